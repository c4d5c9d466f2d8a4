#!/usr/bin/env bash
# Prints the path of a Consul agent binary for the tests, building it once
# from the Go module proxy and caching it (Consul is not in Debian 12).
#
#   scripts/consul.sh          build if needed, print the binary's path
#
#   LBD_CONSUL=PATH            use this binary instead (printed as is)
#   LBD_CONSUL_CACHE=DIR       cache directory (default /var/cache/lbd-test,
#                              or ~/.cache/lbd-test when not root)
#
# Consul v1.22.0 cannot be `go install`ed (replace directives), so this
# downloads the module, drops the replaces of its nested modules and builds
# it: about 5 minutes on 2 cores, a ~190 MB binary. Three nested modules are
# not in the checksum database, hence GONOSUMDB for them.
set -euo pipefail
VERSION=v1.22.0

if [[ -n ${LBD_CONSUL:-} ]]; then
	[[ -x $LBD_CONSUL ]] || { echo "consul.sh: LBD_CONSUL=$LBD_CONSUL is not executable" >&2; exit 1; }
	echo "$LBD_CONSUL"; exit 0
fi
if [[ $(id -u) == 0 ]]; then def=/var/cache/lbd-test; else def=${XDG_CACHE_HOME:-$HOME/.cache}/lbd-test; fi
cache=${LBD_CONSUL_CACHE:-$def}/consul-$VERSION
bin=$cache/consul
if [[ -x $bin ]]; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "consul.sh: Go is needed on PATH" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ -x $bin ]]; then echo "$bin"; exit 0; fi

echo "consul.sh: building Consul $VERSION from the Go module proxy (about 5 minutes, once)" >&2
start=$SECONDS
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export GONOSUMDB=github.com/hashicorp/consul/proto-public,github.com/hashicorp/consul/envoyextensions,github.com/hashicorp/consul/troubleshoot
work=$(mktemp -d "$cache/.build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
dir=$(cd "$work" && go mod download -json "github.com/hashicorp/consul@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $dir ]] || { echo "consul.sh: go mod download of consul $VERSION failed" >&2; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
# The nested modules come from the proxy at the versions go.mod requires,
# instead of the ./api, ./sdk, ... directories the replaces point at.
for r in $(go mod edit -json | sed -n 's/.*"Path": "\(github.com\/hashicorp\/consul\/[^"]*\)".*/\1/p' | sort -u); do
	go mod edit -dropreplace="$r"
done
go mod download >&2
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/consul" . >&2
mv "$work/consul" "$bin"
echo "consul.sh: built $bin in $((SECONDS - start))s" >&2
echo "$bin"
