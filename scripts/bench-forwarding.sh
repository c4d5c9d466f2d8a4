#!/usr/bin/env bash
# Runs lbd's forwarding benchmark on a real IPVS kernel and prints its
# table (docs/benchmarks.md, "Forwarding methods", says what each figure
# means): NAT (masqueraded), direct routing and IPIP with the same two
# real servers and the same ab load, in interleaved rounds of one guest
# run. It runs TestBenchForwarding through e2e/run.sh.
#
#   scripts/bench-forwarding.sh
#   LBD_FWDBENCH_ROUNDS=5 LBD_FWDBENCH_REQUESTS=5000 scripts/bench-forwarding.sh
#
# Environment: LBD_FWDBENCH_ROUNDS (3), LBD_FWDBENCH_REQUESTS (2000 per
# round and method), LBD_FWDBENCH_SIZE (65536, the response's bytes),
# LBD_FWDBENCH_CONCURRENCY (8); e2e/run.sh's own variables work too.
# Extra arguments go to e2e/run.sh (go test flags).
set -euo pipefail
cd "$(dirname "$0")/.."

# e2e/run.sh passes LBD_E2E_* variables into the guest.
export LBD_E2E_FWDBENCH=1
export LBD_E2E_FWDBENCH_ROUNDS=${LBD_FWDBENCH_ROUNDS:-3}
export LBD_E2E_FWDBENCH_REQUESTS=${LBD_FWDBENCH_REQUESTS:-2000}
export LBD_E2E_FWDBENCH_SIZE=${LBD_FWDBENCH_SIZE:-65536}
export LBD_E2E_FWDBENCH_CONCURRENCY=${LBD_FWDBENCH_CONCURRENCY:-8}

log=$(mktemp "${TMPDIR:-/tmp}/lbd-fwdbench.XXXXXX")
trap 'rm -f "$log"' EXIT
rc=0
e2e/run.sh -run '^TestBenchForwarding$' "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}

table=$(tr -d '\r' <"$log" | sed -n '/==== lbd forwarding benchmark ====$/,/==== end of lbd forwarding benchmark ====$/p' | sed 's/^ *//')
if [[ -z $table ]]; then
	echo "bench-forwarding.sh: no benchmark table in the output (exit status $rc)" >&2
	exit $((rc == 0 ? 1 : rc))
fi
printf '\n%s\n' "$table"
exit "$rc"
