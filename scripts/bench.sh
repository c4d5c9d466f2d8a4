#!/usr/bin/env bash
# Runs lbd's dataplane benchmarks on a real IPVS kernel and prints a table
# of figures against their targets (docs/benchmarks.md says what each one
# means). It runs TestBenchDataplane through e2e/run.sh: on this host when
# its kernel has IPVS, otherwise in one QEMU guest boot.
#
#   scripts/bench.sh                                  10,000 services × 10 real servers, 3 rounds
#   LBD_BENCH_SERVICES=2000 LBD_BENCH_ROUNDS=1 scripts/bench.sh
#   LBD_BENCH_OUT=bench.txt scripts/bench.sh          also write the table to a file
#   LBD_BENCH_PROFILE=DIR scripts/bench.sh            CPU profile of the first lbd round's
#                                                     syncs in DIR/lbd-syncs.pprof
#                                                     (go tool pprof -top DIR/lbd-syncs.pprof)
#                                                     and lbd run's heap at full size in
#                                                     DIR/lbd-run-heap.pprof
#
# Environment: LBD_BENCH_SERVICES (default 10000), LBD_BENCH_REALS (10),
# LBD_BENCH_ROUNDS (3), LBD_BENCH_OUT, LBD_BENCH_PROFILE; e2e/run.sh's own
# variables work too (LBD_E2E_VM_TIMEOUT, LBD_E2E_VM_MEM, LBD_E2E_KEEP ...).
# Extra arguments go to e2e/run.sh (go test flags).
set -euo pipefail
cd "$(dirname "$0")/.."

# e2e/run.sh passes LBD_E2E_* variables into the guest.
export LBD_E2E_BENCH=1
export LBD_E2E_BENCH_SERVICES=${LBD_BENCH_SERVICES:-10000}
export LBD_E2E_BENCH_REALS=${LBD_BENCH_REALS:-10}
export LBD_E2E_BENCH_ROUNDS=${LBD_BENCH_ROUNDS:-3}
if [[ -n ${LBD_BENCH_PROFILE:-} ]]; then export LBD_E2E_BENCH_PROFILE=1; fi
# A full-size run takes about 10-15 minutes in the emulated guest (ipvsadm -R
# alone is ~35 s a round); give the VM more than the e2e suite's 1500 s.
export LBD_E2E_VM_TIMEOUT=${LBD_E2E_VM_TIMEOUT:-3600}

log=$(mktemp "${TMPDIR:-/tmp}/lbd-bench.XXXXXX")
trap 'rm -f "$log"' EXIT
rc=0
e2e/run.sh -run '^TestBenchDataplane$' "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}

# The table again, last, after run.sh's stage timings.
table=$(tr -d '\r' <"$log" | sed -n '/^==== lbd dataplane benchmark ====$/,/^==== end of lbd dataplane benchmark ====$/p')
if [[ -z $table ]]; then
	echo "bench.sh: no benchmark table in the output (exit status $rc)" >&2
	exit $((rc == 0 ? 1 : rc))
fi
printf '\n%s\n' "$table"
if [[ -n ${LBD_BENCH_OUT:-} ]]; then printf '%s\n' "$table" >"$LBD_BENCH_OUT"; fi
if [[ -n ${LBD_BENCH_PROFILE:-} ]]; then
	# The guest's files vanish with it: the profile came over the console.
	mkdir -p "$LBD_BENCH_PROFILE"
	tr -d '\r' <"$log" |
		sed -n '/^==== lbd bench cpu profile (base64) ====$/,/^==== end of lbd bench cpu profile ====$/p' |
		sed '1d;$d' | base64 -d >"$LBD_BENCH_PROFILE/lbd-syncs.pprof"
	echo "CPU profile of the first lbd round's syncs: $LBD_BENCH_PROFILE/lbd-syncs.pprof"
	tr -d '\r' <"$log" |
		sed -n '/^==== lbd run heap profile (base64) ====$/,/^==== end of lbd run heap profile ====$/p' |
		sed '1d;$d' | base64 -d >"$LBD_BENCH_PROFILE/lbd-run-heap.pprof"
	echo "heap profile of lbd run at full size: $LBD_BENCH_PROFILE/lbd-run-heap.pprof"
fi
exit "$rc"
