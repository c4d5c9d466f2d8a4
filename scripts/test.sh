#!/usr/bin/env bash
# Runs every test of lbd: static checks, unit tests, then the end-to-end
# tests on a real IPVS kernel (on the host when it has IPVS, else in a QEMU
# guest; e2e/run.sh installs what it needs). Needs root for the e2e part.
#
#   scripts/test.sh            everything
#   LBD_SKIP_E2E=1 scripts/test.sh   no end-to-end tests
#   LBD_SKIP_DEB=1 scripts/test.sh   no package test
set -euo pipefail
cd "$(dirname "$0")/.."

stage() { printf '\n== %s\n' "$*"; }
start=$SECONDS

command -v go >/dev/null || { echo "test.sh: Go is needed on PATH" >&2; exit 1; }
export GOTOOLCHAIN=local
# The race detector needs cgo and a C compiler; the packet-filter tests run
# the host's iptables and ipset in network namespaces (iproute2).
need=()
command -v gcc >/dev/null || need+=(gcc)
command -v ip >/dev/null || need+=(iproute2)
command -v iptables-restore >/dev/null || need+=(iptables)
command -v ipset >/dev/null || need+=(ipset)
# A real VRRP peer for the VRRP unit tests (keepalived only runs in their
# network namespaces; its packaged service stays off without a config).
command -v keepalived >/dev/null || need+=(keepalived)
if [ ${#need[@]} -gt 0 ]; then
	stage "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null; }
fi

stage "go mod download"
go mod download

# A real Consul agent for the Consul tests (unit and e2e): built from the Go
# module proxy once (about 6 minutes) and cached; see scripts/consul.sh.
stage "consul agent"
LBD_CONSUL=$(scripts/consul.sh)
export LBD_CONSUL
echo "$LBD_CONSUL"

stage "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

stage "go vet"
go vet ./...
go vet -tags e2e ./e2e/...

stage "unit tests"
# The keepalived importer's tests read Debian's sample configurations and
# ask keepalived itself (-t, configuration test only) as their oracle.
export LBD_KEEPALIVED_SAMPLES=/usr/share/doc/keepalived/samples
LBD_KEEPALIVED_BIN=$(command -v keepalived)
export LBD_KEEPALIVED_BIN
go test -race -count=1 ./...

# Every fuzz target for a bounded time (LBD_FUZZTIME, default 10s each):
# the parsers of files and of Consul's registrations meet hostile input.
stage "fuzz (${LBD_FUZZTIME:-10s} per target)"
# fuzz_one TARGET PKG: a run that ends in a bare "context deadline
# exceeded" with no failing input written is Go's own race at the end of
# -fuzztime (golang/go#75804, fixed in Go 1.27), not a finding: it is run
# again, and a second such ending is reported and let pass (the unit
# tests above replayed the seed corpus). Any other failure fails.
fuzz_one() {
	local out try
	for try in 1 2; do
		out=$(go test -run='^$' -fuzz="^$1\$" -fuzztime="${LBD_FUZZTIME:-10s}" "$2" 2>&1) && { echo "$out" | tail -3; return 0; }
		echo "$out"
		if ! grep -q 'context deadline exceeded' <<<"$out" || grep -qE 'Failing input written|panic:' <<<"$out"; then
			return 1
		fi
		echo "test.sh: $1: Go's fuzz-deadline race (golang/go#75804), no input found; try $try of 2"
	done
	echo "test.sh: $1: the deadline race twice; no failing input was found, going on"
}
for target in FuzzParse:./config FuzzFastPath:./config FuzzParse:./config/internal/tree \
	FuzzScan:./config/internal/prescan FuzzScan:./config/internal/keypos FuzzConsulMerge:./discovery/merge FuzzNotifications:./dataplane/drift \
	FuzzParseAdvert:./ha/vrrp FuzzDecide6:./dataplane/announce FuzzReader:./dataplane/connsync \
	FuzzParse:./keepalived/conf; do
	fuzz_one "${target%%:*}" "${target#*:}"
done

if [ "${LBD_SKIP_DEB:-}" = 1 ]; then
	stage "package test skipped (LBD_SKIP_DEB=1)"
else
	stage "package: build, lintian, install into a clean Debian 12 root"
	scripts/deb-test.sh
	stage "package under systemd (PID 1, QEMU): start, reload, watchdog, restart, upgrade"
	scripts/systemd-test.sh
fi

if [ "${LBD_SKIP_E2E:-}" = 1 ]; then
	stage "e2e skipped (LBD_SKIP_E2E=1)"
else
	stage "end-to-end tests"
	LBD_E2E_SHARE=$(dirname "$LBD_CONSUL") e2e/run.sh
fi
printf '\nall tests passed in %ds\n' $((SECONDS - start))
