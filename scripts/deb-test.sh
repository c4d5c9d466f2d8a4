#!/usr/bin/env bash
# Tests lbd's Debian package: builds it (make deb), runs lintian (any error
# or warning fails), then installs it with apt into a fresh copy of a clean
# Debian 12 root and checks what it installs, the unit (enabled, not
# started; systemd-analyze verify and security), the configuration, an
# upgrade, a removal and a purge. It never starts lbd and never touches the
# kernel: everything happens inside the copied root, and systemctl is a
# recording shim there.
#
# Run as root on Debian 12 with Go; it installs what it needs with apt-get.
# The clean root is built once with mmdebstrap and cached, with the
# package's dependencies downloaded, so later runs need no network.
#
#   LBD_DEB_TEST_CACHE=DIR     cache (default /var/cache/lbd-test/deb)
#   LBD_DEB_TEST_MIRROR=M      mirror or sources file for the root (default:
#                              this machine's Debian sources)
#   LBD_DEB_TEST_KEEP=1        keep the test root for inspection
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
start=$SECONDS

log() { printf '== %s\n' "$*"; }
die() { printf 'deb-test: %s\n' "$*" >&2; exit 1; }
fail() { printf 'deb-test: FAIL: %s\n' "$*" >&2; failures=$((failures + 1)); }
pass() { printf '   ok   %s\n' "$*"; passes=$((passes + 1)); }
check() { # DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}
failures=0
passes=0

[[ $EUID -eq 0 ]] || die "run as root (it installs packages and builds a chroot)"
command -v go >/dev/null || die "Go is needed on PATH"
export GOTOOLCHAIN=local LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive

# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------
need=()
for p in lintian mmdebstrap man-db make git; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || need+=("$p")
done
if ((${#need[@]})); then
	log "apt-get install ${need[*]}"
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null 2>&1 ||
		{ apt-get -o DPkg::Lock::Timeout=300 update -qq || true
		  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null; }
fi

# ---------------------------------------------------------------------------
# Build: the package, and the same tree as version+1 for the upgrade
# ---------------------------------------------------------------------------
log "make deb"
version=$(packaging/deb/version.sh)
out=$top/dist
make --no-print-directory deb VERSION="$version" >/dev/null
deb=$out/lbd_${version}_amd64.deb
[[ -f $deb ]] || die "make deb made no $deb"
up_version=$version+1
up_out=$out/deb-test-upgrade
OUT=$up_out VERSION=$up_version ARCH=amd64 packaging/deb/build.sh >/dev/null
up_deb=$up_out/lbd_${up_version}_amd64.deb
deb_size=$(stat -c %s "$deb")
log "built $(basename "$deb") ($((deb_size / 1024)) KiB)"

# Reproducible: a second build of the same commit is the same file.
sum1=$(sha256sum <"$deb")
make --no-print-directory deb VERSION="$version" >/dev/null
check "a rebuild gives the same .deb (reproducible)" test "$sum1" = "$(sha256sum <"$deb")"

# ---------------------------------------------------------------------------
# lintian (Debian 12's)
# ---------------------------------------------------------------------------
log "lintian"
lintian_out=$(lintian -I -E --pedantic --show-overrides "$deb" 2>&1 | grep -Ev '^N:|running with root privileges' || true)
printf '%s\n' "$lintian_out" | sed -e '/^$/d' -e 's/^/   /'
lintian_errors=$(printf '%s\n' "$lintian_out" | grep -c '^E: ' || true)
lintian_warnings=$(printf '%s\n' "$lintian_out" | grep -c '^W: ' || true)
lintian_other=$(printf '%s\n' "$lintian_out" | grep -c '^[IPX]: ' || true)
lintian_overrides=$(printf '%s\n' "$lintian_out" | grep -c '^O: ' || true)
lintian_summary="$lintian_errors errors, $lintian_warnings warnings, $lintian_other info/pedantic/experimental, $lintian_overrides overridden ($(lintian --version))"
check "lintian: no error, no warning" test "$lintian_errors$lintian_warnings" = 00

# ---------------------------------------------------------------------------
# The clean Debian 12 root, cached
# ---------------------------------------------------------------------------
cache=${LBD_DEB_TEST_CACHE:-/var/cache/lbd-test/deb}
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

mirror=${LBD_DEB_TEST_MIRROR:-}
if [[ -z $mirror ]]; then
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		if [[ -f $f ]] && grep -Eq '^[^#]*\bbookworm\b' "$f"; then mirror=$f; break; fi
	done
	: "${mirror:=http://deb.debian.org/debian}"
fi
# What the package pulls in is downloaded into the root's apt cache, so a
# later run resolves and installs it without the network.
deps=$(dpkg-deb -f "$deb" Depends Recommends | sed -E 's/^[A-Za-z-]+: //; s/\([^)]*\)//g; s/[,|]/ /g' | xargs -n1 | sort -u | xargs)
mirror_text=$([[ -f $mirror ]] && cat "$mirror" || echo "$mirror")
key=$(printf 'v2\nbookworm minbase systemd\n%s\n%s\n' "$mirror_text" "$deps" | sha256sum | cut -c1-16)
base=$cache/bookworm-$key.tar
if [[ ! -f $base ]]; then
	log "building the clean Debian 12 root (mmdebstrap, cached as $base)"
	rm -rf "$cache"/bookworm-*.tar "$cache"/.building-*
	mmdebstrap --quiet --format=tar --variant=minbase --include=systemd \
		--skip=cleanup/apt/lists --skip=cleanup/apt/cache \
		--customize-hook="chroot \"\$1\" apt-get install -y -qq --download-only -o APT::Install-Recommends=true $deps >/dev/null" \
		bookworm "$cache/.building-$key.tar" "$mirror"
	mv "$cache/.building-$key.tar" "$base"
fi

root=$(mktemp -d /var/tmp/lbd-deb-test.XXXXXX)
cleanup() {
	mountpoint -q "$root/proc" && umount "$root/proc"
	if [[ ${LBD_DEB_TEST_KEEP:-0} = 1 ]]; then
		echo "deb-test: root kept in $root"
	else
		rm -rf --one-file-system "$root"
	fi
}
trap cleanup EXIT
log "fresh root in $root"
tar -C "$root" -xf "$base"
mount -t proc proc "$root/proc"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# A booted systemd, as far as maintainer scripts can tell; systemctl records
# what they ask and does what needs no running systemd (preset, is-enabled).
mkdir -p "$root/run/systemd/system"
cat >"$root/usr/local/sbin/systemctl" <<'EOF'
#!/bin/sh
echo "systemctl $*" >>/var/log/systemctl.calls
for a in "$@"; do
	case $a in
	start | stop | restart | try-restart | reload | reload-or-restart | daemon-reload) exit 0 ;;
	is-active) exit 3 ;;
	esac
done
exec /usr/bin/systemctl "$@"
EOF
chmod 0755 "$root/usr/local/sbin/systemctl"
cp "$deb" "$up_deb" "$root/tmp/"
in_root() {
	chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}
# apt runs dpkg with its own PATH (DPkg::Path): put the shim first in it.
apt_root() { in_root apt-get -y -q -o Dpkg::Use-Pty=0 -o DPkg::Path=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin "$@" </dev/null >>"$root/var/log/deb-test-apt.log" 2>&1; }
calls() { cat "$root/var/log/systemctl.calls" 2>/dev/null || true; : >"$root/var/log/systemctl.calls"; }
status_of() { in_root dpkg-query -W -f='${Status} ${Version}' lbd 2>/dev/null || true; }

# ---------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------
log "install (apt resolves Depends/Recommends)"
calls >/dev/null
apt_root install "/tmp/$(basename "$deb")" || { tail -30 "$root/var/log/deb-test-apt.log"; die "apt-get install failed"; }
check "installed: $(status_of)" test "$(status_of)" = "install ok installed $version"
installed() { test "$(in_root dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed"; }
for p in iptables procps ipvsadm ipset; do
	check "$p installed with it" installed "$p"
done

mode() { stat -c '%a %U:%G' "$root$1"; }
check "/usr/sbin/lbd 0755 root:root" test "$(mode /usr/sbin/lbd)" = "755 root:root"
for f in /etc/lbd/lbd.toml /etc/lbd/conf.d/README /etc/modules-load.d/lbd.conf /etc/modprobe.d/lbd.conf \
	/usr/lib/sysctl.d/60-lbd.conf /usr/lib/systemd/system/lbd.service /usr/share/man/man8/lbd.8.gz \
	/usr/share/doc/lbd/copyright /usr/share/doc/lbd/changelog.gz /usr/share/bash-completion/completions/lbd; do
	check "$f 0644 root:root" test "$(mode "$f")" = "644 root:root"
done
check "/etc/lbd/conf.d is a directory" test -d "$root/etc/lbd/conf.d"
for f in /etc/lbd/lbd.toml /etc/lbd/conf.d/README /etc/modules-load.d/lbd.conf /etc/modprobe.d/lbd.conf; do
	check "$f is a conffile" grep -qx "$f" "$root/var/lib/dpkg/info/lbd.conffiles"
done
check "the unit is systemd/lbd.service" cmp -s "$root/usr/lib/systemd/system/lbd.service" systemd/lbd.service
scripts_leave_kernel_alone() {
	! sed 's/#.*//' "$root"/var/lib/dpkg/info/lbd.{postinst,prerm,postrm} |
		grep -Eq 'ipvsadm|ipset|iptables|modprobe|rmmod|sysctl|lbd +cleanup|/usr/sbin/lbd'
}
check "maintainer scripts never touch kernel state" scripts_leave_kernel_alone

# Enabled, not started.
# deb-systemd-helper links /lib/systemd/system/lbd.service: the same file
# on Debian 12's merged /usr.
enabled_link() {
	case $(readlink "$root/etc/systemd/system/multi-user.target.wants/lbd.service") in
	/lib/systemd/system/lbd.service | /usr/lib/systemd/system/lbd.service) return 0 ;;
	*) return 1 ;;
	esac
}
# The real systemctl, offline (the root pretends that systemd runs).
systemctl_root() { in_root /usr/bin/systemctl --root=/ "$@"; }
check "enabled: multi-user.target.wants/lbd.service" enabled_link
check "systemctl is-enabled lbd: enabled" test "$(systemctl_root is-enabled lbd.service 2>&1)" = enabled
first_calls=$(calls)
not() { ! "$@"; }
check "first install does not start lbd" not grep -Eq '(start|restart) .*lbd' <<<"$first_calls"

# The binary and its configuration.
quiet() { "$@" >/dev/null; }
check "lbd check-config /etc/lbd/lbd.toml" quiet in_root /usr/sbin/lbd check-config /etc/lbd/lbd.toml
check "lbd --help" bash -c "chroot '$root' /usr/sbin/lbd --help | grep -q 'Available Commands'"
check "lbd version: $version" test "$(in_root /usr/sbin/lbd version)" = "lbd $version"
# The commented settings of /etc/lbd/lbd.toml, uncommented, are valid too.
sed 's/^#\([^ #!]\)/\1/' "$root/etc/lbd/lbd.toml" >"$root/tmp/uncommented.toml"
check "/etc/lbd/lbd.toml with its settings uncommented is valid" \
	quiet in_root /usr/sbin/lbd check-config /tmp/uncommented.toml
check "conf.d/README is not loaded" bash -c \
	"chroot '$root' /usr/sbin/lbd check-config /etc/lbd/lbd.toml | grep -q 'from 1 files'"

# The man page: renders without warnings, and names every command and flag.
man_warnings=$(MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$root/usr/share/man/man8/lbd.8.gz" 2>&1 >/dev/null || echo "man failed")
check "lbd(8) renders without warnings" test -z "$man_warnings"
man_src=$(zcat "$root/usr/share/man/man8/lbd.8.gz")
man_missing=()
subcommands() { # COMMAND...: its subcommands
	in_root /usr/sbin/lbd "$@" --help | sed -n '/^Available Commands:/,/^$/p' | awk 'NR>1 && NF {print $1}'
}
check_command() { # COMMAND...
	local section flag sub
	section=$(awk -v h=".SS \"lbd $*" 'index($0, h) == 1 {p=1; next} /^\.S[SH] / {p=0} p' <<<"${man_src//\\-/-}")
	[[ -n $section ]] || { man_missing+=("lbd $*"); return; }
	for flag in $(in_root /usr/sbin/lbd "$@" --help | sed -n '/^Flags:/,/^$/p' | grep -oE -- '--[a-z0-9-]+' | grep -vx -- --help); do
		grep -q -- "$flag" <<<"$section" || man_missing+=("lbd $* $flag")
	done
	for sub in $(subcommands "$@"); do
		[[ $sub = help ]] && continue
		check_command "$@" "$sub"
	done
}
for c in $(subcommands); do check_command "$c"; done
check "lbd(8) documents every command and flag${man_missing:+ (missing: ${man_missing[*]})}" test ${#man_missing[@]} -eq 0

# The unit, as Debian 12's systemd sees it in this root.
verify_out=$(in_root systemd-analyze verify --man=no /usr/lib/systemd/system/lbd.service 2>&1) || verify_out+=" (exit $?)"
check "systemd-analyze verify lbd.service${verify_out:+: $verify_out}" test -z "$verify_out"
exposure=$(in_root systemd-analyze security --offline=yes /usr/lib/systemd/system/lbd.service 2>/dev/null |
	sed -n 's/.*Overall exposure level for lbd.service: \([0-9.]*\).*/\1/p')
check "systemd-analyze security: exposure ${exposure:-?} <= 3.0" awk -v e="${exposure:-99}" 'BEGIN {exit !(e <= 3.0)}'

# ---------------------------------------------------------------------------
# Upgrade, reinstall, an admin's disable
# ---------------------------------------------------------------------------
log "upgrade to $up_version"
echo '# a local edit' >>"$root/etc/lbd/lbd.toml"
apt_root install "/tmp/$(basename "$up_deb")" || { tail -30 "$root/var/log/deb-test-apt.log"; die "upgrade failed"; }
check "upgraded: $(status_of)" test "$(status_of)" = "install ok installed $up_version"
up_calls=$(calls)
check "postinst configure <old version> asked for try-restart lbd.service" grep -q 'try-restart lbd.service' <<<"$up_calls"
check "the upgrade kept the admin's edit of lbd.toml" grep -q '^# a local edit$' "$root/etc/lbd/lbd.toml"
check "still enabled after the upgrade" enabled_link
apt_root install --reinstall "/tmp/$(basename "$up_deb")" || die "reinstall failed"
check "reinstalling the same version works" test "$(status_of)" = "install ok installed $up_version"
systemctl_root disable lbd.service >/dev/null 2>&1
apt_root install --reinstall "/tmp/$(basename "$up_deb")" || die "reinstall failed"
check "an admin's disable survives an upgrade" test ! -e "$root/etc/systemd/system/multi-user.target.wants/lbd.service"
systemctl_root enable lbd.service >/dev/null 2>&1
calls >/dev/null

# ---------------------------------------------------------------------------
# Remove, purge
# ---------------------------------------------------------------------------
log "remove"
apt_root remove lbd || die "apt-get remove failed"
check "removed: $(status_of)" test "$(status_of)" = "deinstall ok config-files $up_version"
check "prerm remove stopped lbd.service" grep -q 'stop lbd.service' <<<"$(calls)"
check "remove leaves /etc/lbd/lbd.toml" test -f "$root/etc/lbd/lbd.toml"
check "remove takes /usr/sbin/lbd" test ! -e "$root/usr/sbin/lbd"
check "remove masks lbd.service, as postrm says" test "$(readlink "$root/etc/systemd/system/lbd.service")" = /dev/null

log "purge"
apt_root purge lbd || die "apt-get purge failed"
check "purged: not installed" test -z "$(status_of | grep -v '^unknown ok not-installed')"
check "purge removes /etc/lbd" test ! -e "$root/etc/lbd"
check "purge removes /etc/modules-load.d/lbd.conf and /etc/modprobe.d/lbd.conf" \
	test ! -e "$root/etc/modules-load.d/lbd.conf" -a ! -e "$root/etc/modprobe.d/lbd.conf"
check "purge removes the enable symlink" test ! -e "$root/etc/systemd/system/multi-user.target.wants/lbd.service"
check "purge removes the mask" test ! -L "$root/etc/systemd/system/lbd.service"

log "install again, add a drop-in, purge"
apt_root install "/tmp/$(basename "$deb")" || die "install after purge failed"
check "enabled again after a purge and a new install" enabled_link
printf '[[service]]\nname = "web"\nvips = ["192.0.2.10"]\nport = 80\nreal_server = [{ address = "10.10.0.11" }]\n' \
	>"$root/etc/lbd/conf.d/web.toml"
check "a drop-in in conf.d is loaded" bash -c \
	"chroot '$root' /usr/sbin/lbd check-config | grep -q '1 services'"
apt_root purge lbd || die "apt-get purge failed"
check "purge keeps the admin's conf.d/web.toml, as dpkg does" test -f "$root/etc/lbd/conf.d/web.toml"
check "purge removes the shipped lbd.toml" test ! -e "$root/etc/lbd/lbd.toml"

# ---------------------------------------------------------------------------
elapsed=$((SECONDS - start))
cat <<EOF

deb-test summary
  package     $(basename "$deb"), $((deb_size / 1024)) KiB
  lintian     $lintian_summary
  security    systemd-analyze security --offline=yes: exposure ${exposure:-?} (OK <= 3.0)
  runtime     ${elapsed}s
$passes passed, $failures failed
EOF
((failures == 0))
