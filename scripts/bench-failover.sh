#!/usr/bin/env bash
# Runs lbd's failover benchmark on a real IPVS kernel and prints its table
# (docs/benchmarks.md, "Failover", says what each figure means): box-death
# failovers of an lbd pair and of a keepalived pair doing the same job,
# interleaved, and the CPU VRRP costs while idle. It runs TestBenchFailover
# through e2e/run.sh: on this host when its kernel has IPVS, otherwise in
# one QEMU guest boot.
#
#   scripts/bench-failover.sh                          20 failovers of each of a, b, c, d
#   LBD_FAILBENCH_ROUNDS=3 LBD_FAILBENCH_VARIANTS=a,b scripts/bench-failover.sh
#   LBD_FAILBENCH_OUT=failover.txt scripts/bench-failover.sh   also write the table to a file
#
# Variants: a = lbd, VRRPv3, 200 ms (lbd's default); b = keepalived, v3,
# advert_int 0.2; c = keepalived's defaults (v2, advert_int 1); d = lbd, v2,
# 1 s.
#
# Environment: LBD_FAILBENCH_ROUNDS (default 20), LBD_FAILBENCH_VARIANTS
# (a,b,c,d), LBD_FAILBENCH_CPU_SECONDS (30; 0 skips the CPU figures),
# LBD_FAILBENCH_OUT; e2e/run.sh's own variables work too (LBD_E2E_VM_TIMEOUT,
# LBD_E2E_KEEP ...). Extra arguments go to e2e/run.sh (go test flags).
set -euo pipefail
cd "$(dirname "$0")/.."

# e2e/run.sh passes LBD_E2E_* variables into the guest.
export LBD_E2E_FAILBENCH=1
export LBD_E2E_FAILBENCH_ROUNDS=${LBD_FAILBENCH_ROUNDS:-20}
export LBD_E2E_FAILBENCH_VARIANTS=${LBD_FAILBENCH_VARIANTS:-a,b,c,d}
export LBD_E2E_FAILBENCH_CPU_SECONDS=${LBD_FAILBENCH_CPU_SECONDS:-30}
# 80 failovers of about 9 s each in the emulated guest, the pairs' start
# and the CPU window: 783 s of VM time on a 2-core host; a busy host can
# double that, past the e2e suite's 1500 s.
export LBD_E2E_VM_TIMEOUT=${LBD_E2E_VM_TIMEOUT:-3600}

log=$(mktemp "${TMPDIR:-/tmp}/lbd-failbench.XXXXXX")
trap 'rm -f "$log"' EXIT
rc=0
e2e/run.sh -run '^TestBenchFailover$' "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}

# The table again, last, after run.sh's stage timings.
table=$(tr -d '\r' <"$log" | sed -n '/^==== lbd failover benchmark ====$/,/^==== end of lbd failover benchmark ====$/p')
if [[ -z $table ]]; then
	echo "bench-failover.sh: no benchmark table in the output (exit status $rc)" >&2
	exit $((rc == 0 ? 1 : rc))
fi
printf '\n%s\n' "$table"
if [[ -n ${LBD_FAILBENCH_OUT:-} ]]; then printf '%s\n' "$table" >"$LBD_FAILBENCH_OUT"; fi
exit "$rc"
