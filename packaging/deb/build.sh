#!/usr/bin/env bash
# Builds dist/lbd_<version>_<arch>.deb from the working tree, reproducibly:
# a static binary built with -trimpath and no build id, every file's mtime
# clamped to SOURCE_DATE_EPOCH (the commit time), root ownership, and
# dpkg-deb's sorted archive. Run it through `make deb` (ARCH=arm64 for arm64).
#
#   ARCH        Debian architecture: amd64 (default) or arm64
#   VERSION     package version (default: packaging/deb/version.sh)
#   MAINTAINER  Maintainer field
#   OUT         output directory (default: dist)
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
pkg=packaging/deb

export GOTOOLCHAIN=local
ARCH=${ARCH:-amd64}
VERSION=${VERSION:-$($pkg/version.sh)}
MAINTAINER=${MAINTAINER:-lbd maintainers <maintainers@lbd.invalid>}
OUT=${OUT:-dist}
: "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct)}"
export SOURCE_DATE_EPOCH TZ=UTC LC_ALL=C.UTF-8

case $ARCH in
amd64 | arm64) goarch=$ARCH ;;
*) echo "build.sh: ARCH=$ARCH: expected amd64 or arm64" >&2; exit 2 ;;
esac
for tool in go dpkg-deb gzip; do
	command -v $tool >/dev/null || { echo "build.sh: $tool is needed" >&2; exit 1; }
done

stage=$OUT/.stage-$ARCH
deb=$OUT/lbd_${VERSION}_$ARCH.deb
rm -rf "$stage" "$deb"
mkdir -p "$stage/DEBIAN"
umask 022

# The binary, static. -buildvcs=false keeps a dirty work tree's state out;
# the version says which commit it is.
ldflags="-s -w -buildid= -X main.version=$VERSION"
gobuild() { # GOARCH OUTPUT
	CGO_ENABLED=0 GOOS=linux GOARCH=$1 go build -trimpath -buildvcs=false \
		-ldflags "$ldflags" -o "$2" ./cmd/lbd
}
gobuild "$goarch" "$stage/usr/sbin/lbd"
# The man page and shell completions come from a binary this machine runs.
host=$stage/usr/sbin/lbd
if [ "$goarch" != "$(go env GOHOSTARCH)" ]; then
	host=$OUT/.lbd-host
	gobuild "$(go env GOHOSTARCH)" "$host"
fi

install -d "$stage/usr/share/man/man8"
"$host" man "$stage/usr/share/man/man8"
gzip -9n "$stage/usr/share/man/man8/lbd.8"

install -d "$stage/usr/share/bash-completion/completions" \
	"$stage/usr/share/zsh/vendor-completions" \
	"$stage/usr/share/fish/vendor_completions.d"
"$host" completion bash >"$stage/usr/share/bash-completion/completions/lbd"
"$host" completion zsh >"$stage/usr/share/zsh/vendor-completions/_lbd"
"$host" completion fish >"$stage/usr/share/fish/vendor_completions.d/lbd.fish"
[ "$host" = "$stage/usr/sbin/lbd" ] || rm -f "$host"

# Configuration (conffiles), unit, kernel settings.
install -d -m 0755 "$stage/etc/lbd/conf.d"
install -m 0644 $pkg/lbd.toml "$stage/etc/lbd/lbd.toml"
install -m 0644 $pkg/conf.d-README "$stage/etc/lbd/conf.d/README"
install -D -m 0644 $pkg/modules-load.conf "$stage/etc/modules-load.d/lbd.conf"
install -D -m 0644 $pkg/modprobe.conf "$stage/etc/modprobe.d/lbd.conf"
install -D -m 0644 $pkg/sysctl.conf "$stage/usr/lib/sysctl.d/60-lbd.conf"
install -D -m 0644 systemd/lbd.service "$stage/usr/lib/systemd/system/lbd.service"
install -D -m 0644 $pkg/lintian-overrides "$stage/usr/share/lintian/overrides/lbd"

# Documentation.
doc=$stage/usr/share/doc/lbd
install -d "$doc/examples/conf.d"
install -m 0644 $pkg/copyright "$doc/copyright"
install -m 0644 examples/lbd.toml "$doc/examples/lbd.toml"
install -m 0644 examples/conf.d/*.toml "$doc/examples/conf.d/"
install -d "$doc/examples/pair"
install -m 0644 examples/pair/*.toml "$doc/examples/pair/"
install -d "$doc/examples/forwarding"
install -m 0644 examples/forwarding/*.toml "$doc/examples/forwarding/"
install -d "$doc/examples/sctp"
install -m 0644 examples/sctp/*.toml "$doc/examples/sctp/"
install -m 0644 docs/config-reference.md "$doc/config-reference.md"
gzip -9n "$doc/config-reference.md"
install -m 0644 docs/realserver.md "$doc/realserver.md"
gzip -9n "$doc/realserver.md"
# Native package: the changelog is changelog.gz, one entry per build.
commit=$(git rev-parse --short=12 HEAD)
{
	printf 'lbd (%s) unstable; urgency=medium\n\n' "$VERSION"
	printf '  * Built from git commit %s.\n\n' "$commit"
	printf ' -- %s  %s\n' "$MAINTAINER" "$(date -R -d "@$SOURCE_DATE_EPOCH")"
} >"$doc/changelog"
gzip -9n "$doc/changelog"
# The licence texts of everything compiled into the binary.
{
	printf 'Licences of the code compiled into /usr/sbin/lbd.\n'
	printf '\n==> Go standard library (%s)\n\n' "$(go env GOVERSION)"
	cat "$(go env GOROOT)/LICENSE"
	GOOS=linux GOARCH=$goarch CGO_ENABLED=0 go list -deps \
		-f '{{with .Module}}{{if not .Main}}{{with .Replace}}{{.Path}} {{.Version}} {{.Dir}}{{else}}{{.Path}} {{.Version}} {{.Dir}}{{end}}{{end}}{{end}}' \
		./cmd/lbd | sort -u | while read -r path ver dir; do
		printf '\n==> %s %s\n' "$path" "$ver"
		found=0
		shopt -s nocaseglob
		for f in "$dir"/LICEN[CS]E* "$dir"/COPYING* "$dir"/NOTICE*; do
			[ -f "$f" ] || continue
			printf '\n--- %s\n\n' "${f##*/}"
			cat "$f"
			found=1
		done
		[ $found = 1 ] || { echo "build.sh: no licence file in $dir" >&2; exit 1; }
	done
} >"$doc/third-party-licenses"
gzip -9n "$doc/third-party-licenses"

# Control files.
cd "$stage"
find etc -type f | sort | sed 's,^,/,' >DEBIAN/conffiles
find . -type f ! -path './DEBIAN/*' | sed 's,^\./,,' | sort | xargs -d '\n' md5sum >DEBIAN/md5sums
size=$(du -sk --apparent-size --exclude=DEBIAN . | cut -f1)
ctl=$(<"$top/$pkg/control.in")
ctl=${ctl//@VERSION@/$VERSION}
ctl=${ctl//@ARCH@/$ARCH}
ctl=${ctl//@INSTALLED_SIZE@/$size}
ctl=${ctl//@MAINTAINER@/$MAINTAINER}
printf '%s\n' "$ctl" >DEBIAN/control
for s in postinst prerm postrm; do
	install -m 0755 "$top/$pkg/$s" "DEBIAN/$s"
done
chmod 0644 DEBIAN/control DEBIAN/conffiles DEBIAN/md5sums
cd "$top"

# Reproducible: every mtime is the commit time, directories 0755.
find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group -Zxz --threads-max=1 --build "$stage" "$deb" >/dev/null
echo "$deb"
