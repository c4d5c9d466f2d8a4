#!/usr/bin/env bash
# Tests lbd's Debian package under a real systemd: boots the clean Debian 12
# root of scripts/deb-test.sh with systemd as PID 1 on the Debian cloud
# kernel (the one e2e/run.sh boots, with IPVS) under QEMU (TCG), installs
# the .deb there and runs lbd as the unit. The driver inside the guest
# (scripts/systemd-test/guest.sh) checks: start (Type=notify READY, no
# warning in the journal), reload with a good and a bad edit, a conf.d file
# root reads only through CAP_DAC_READ_SEARCH, the watchdog, restart and
# package upgrade under a stream of requests (no failed request), an
# invalid configuration at start, and seccomp (no denial; every syscall
# outside the unit's filter logged during a pass with a log-only filter).
#
# Run as root on Debian 12 with Go; it installs what it needs with apt-get.
# The disk image (the clean root + iproute2, kmod, busybox, the kernel's
# modules) and its initramfs are built once and cached by a key of their
# inputs; a warm run needs no network.
#
#   LBD_SYSTEMD_TEST_CACHE=DIR   cache (default /var/cache/lbd-test/systemd)
#   LBD_SYSTEMD_TEST_TIMEOUT=S   hard limit on the VM's life (default 1200)
#   LBD_SYSTEMD_TEST_MEM=MiB     guest memory (default 1536)
#   LBD_SYSTEMD_TEST_KEEP=1      keep the run directory (console, report)
#   LBD_DEB_TEST_CACHE, LBD_DEB_TEST_MIRROR: as for scripts/deb-test.sh,
#                                whose cached root this test boots
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
here=$top/scripts/systemd-test
t_start=$EPOCHREALTIME

log() { printf '== %s\n' "$*"; }
die() { printf 'systemd-test: %s\n' "$*" >&2; exit 1; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
timings=()
timed() { # NAME COMMAND...: runs COMMAND, records how long it took
	local name=$1 t=$EPOCHREALTIME
	shift
	"$@"
	timings+=("$(printf '%-38s %7ss' "$name" "$(since "$t")")")
}

[[ $EUID -eq 0 ]] || die "run as root (it installs packages and builds a disk image)"
command -v go >/dev/null || die "Go is needed on PATH"
export GOTOOLCHAIN=local LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive

# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------
install_tools() {
	local need=() p
	for p in qemu-system-x86 busybox-static cpio e2fsprogs kmod mmdebstrap make git; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || need+=("$p")
	done
	((${#need[@]})) || return 0
	log "apt-get install ${need[*]}"
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null 2>&1 ||
		{ apt-get -o DPkg::Lock::Timeout=300 update -qq || true
		  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null; }
}
timed "host tools" install_tools

# ---------------------------------------------------------------------------
# The package, and the same tree as version+1 for the upgrade. Their own
# output directories, so that a deb-test running meanwhile is not disturbed.
# ---------------------------------------------------------------------------
build_debs() {
	log "build the .debs"
	version=$(packaging/deb/version.sh)
	up_version=$version+1
	rm -f dist/systemd-test/lbd_*.deb dist/systemd-test-upgrade/lbd_*.deb
	OUT=dist/systemd-test VERSION=$version ARCH=amd64 packaging/deb/build.sh >/dev/null
	OUT=dist/systemd-test-upgrade VERSION=$up_version ARCH=amd64 packaging/deb/build.sh >/dev/null
	deb=$top/dist/systemd-test/lbd_${version}_amd64.deb
	up_deb=$top/dist/systemd-test-upgrade/lbd_${up_version}_amd64.deb
	[[ -f $deb && -f $up_deb ]] || die "packaging/deb/build.sh made no $deb or $up_deb"
	log "built $(basename "$deb") and $(basename "$up_deb")"
}
timed "build .debs" build_debs

# ---------------------------------------------------------------------------
# deb-test's clean Debian 12 root: the same key, the same command, the same
# cache, so either script builds it for both.
# ---------------------------------------------------------------------------
deb_cache=${LBD_DEB_TEST_CACHE:-/var/cache/lbd-test/deb}
mirror=${LBD_DEB_TEST_MIRROR:-}
if [[ -z $mirror ]]; then
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		if [[ -f $f ]] && grep -Eq '^[^#]*\bbookworm\b' "$f"; then mirror=$f; break; fi
	done
	: "${mirror:=http://deb.debian.org/debian}"
fi
deps=$(dpkg-deb -f "$deb" Depends Recommends | sed -E 's/^[A-Za-z-]+: //; s/\([^)]*\)//g; s/[,|]/ /g' | xargs -n1 | sort -u | xargs)
mirror_text=$([[ -f $mirror ]] && cat "$mirror" || echo "$mirror")
base_key=$(printf 'v2\nbookworm minbase systemd\n%s\n%s\n' "$mirror_text" "$deps" | sha256sum | cut -c1-16)
base=$deb_cache/bookworm-$base_key.tar

ensure_base() {
	[[ -f $base ]] && return 0
	mkdir -p "$deb_cache"
	exec 8>"$deb_cache/.lock"
	flock 8
	if [[ ! -f $base ]]; then
		log "building the clean Debian 12 root (mmdebstrap, cached as $base)"
		rm -rf "$deb_cache"/bookworm-*.tar "$deb_cache"/.building-*
		mmdebstrap --quiet --format=tar --variant=minbase --include=systemd \
			--skip=cleanup/apt/lists --skip=cleanup/apt/cache \
			--customize-hook="chroot \"\$1\" apt-get install -y -qq --download-only -o APT::Install-Recommends=true $deps >/dev/null" \
			bookworm "$deb_cache/.building-$base_key.tar" "$mirror"
		mv "$deb_cache/.building-$base_key.tar" "$base"
	fi
	exec 8>&-
}

# ---------------------------------------------------------------------------
# The kernel: the current Debian cloud kernel, as e2e/run.sh picks it; taken
# from e2e's cache when it is there, else downloaded the same way.
# ---------------------------------------------------------------------------
current_kernel_package() { # -> "pkg version" of the current cloud kernel
	apt-cache show --no-all-versions linux-image-cloud-amd64 2>/dev/null | awk '
		/^Depends:/ && match($0, /linux-image-[0-9][^ ,]*-cloud-amd64 \(= [^)]+\)/) {
			split(substr($0, RSTART, RLENGTH), f, /[ ()=]+/)
			print f[1], f[2]
			found = 1
			exit
		}
		END { exit !found }'
}
e2e_kernels=${LBD_E2E_CACHE:-/var/cache/lbd-e2e}/kernels
read -r kpkg kver_pkg <<<"$(current_kernel_package || { apt-get update -qq >/dev/null 2>&1; current_kernel_package; } ||
	die "apt-cache knows no linux-image-cloud-amd64")"
[[ -n ${kpkg:-} ]] || die "apt-cache knows no linux-image-cloud-amd64"
kernel_name=${kpkg}_$kver_pkg

kernel_dir="" # vmlinuz, kver, lib/modules/<kver>/
ensure_kernel() {
	kernel_dir=$e2e_kernels/$kernel_name
	[[ -f $kernel_dir/layout && -f $kernel_dir/vmlinuz ]] && return 0
	kernel_dir=$cache/kernel-$kernel_name
	[[ -f $kernel_dir/kver ]] && return 0
	log "downloading $kpkg $kver_pkg"
	local tmp kver
	tmp=$(mktemp -d "$cache/.dl.XXXXXX")
	chmod 755 "$tmp"
	if id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
	(cd "$tmp" && apt-get download -q "$kpkg=$kver_pkg" >/dev/null 2>&1) ||
		{ apt-get update -qq || true; (cd "$tmp" && apt-get download -q "$kpkg=$kver_pkg" >/dev/null); }
	dpkg-deb -x "$tmp"/*.deb "$tmp/x"
	kver=$(ls "$tmp/x/lib/modules")
	mkdir -p "$tmp/k/lib/modules"
	mv "$tmp/x/boot/vmlinuz-$kver" "$tmp/k/vmlinuz"
	mv "$tmp/x/lib/modules/$kver" "$tmp/k/lib/modules/$kver"
	depmod -b "$tmp/k" "$kver"
	printf '%s\n' "$kver" >"$tmp/k/kver"
	rm -rf "$cache"/kernel-*
	mv "$tmp/k" "$kernel_dir"
	rm -rf "$tmp"
}

# ---------------------------------------------------------------------------
# The disk image and its initramfs, cached
# ---------------------------------------------------------------------------
# Packages the test itself needs in the guest, beyond what lbd pulls in:
# ip (namespaces, veths) and kmod (the kernel's request_module runs
# /sbin/modprobe for veth, ipvs schedulers, ...).
readonly IMAGE_PKGS=(iproute2 kmod conntrackd)
# Timers that would run apt, dpkg or fsck jobs in the middle of a test;
# firstboot would prompt on the console.
readonly IMAGE_MASK=(apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer
	fstrim.timer systemd-firstboot.service serial-getty@ttyS0.service getty@tty1.service)
# The initramfs: just enough to find /dev/vda.
readonly INITRD_MODULES=(virtio_pci virtio_blk)

image_packages() { # ROOT
	local root=$1 apt=(chroot "$1" apt-get -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends)
	"${apt[@]}" install "${IMAGE_PKGS[@]}" </dev/null >"$root/var/log/systemd-test-image.log" 2>&1 && return 0
	# The lists are the root's own (deb-test's build time): the mirror has
	# moved on. Update them, and download lbd's dependencies again, so that
	# installing lbd in the guest needs no network.
	"${apt[@]}" update </dev/null >>"$root/var/log/systemd-test-image.log" 2>&1 &&
		"${apt[@]}" install "${IMAGE_PKGS[@]}" </dev/null >>"$root/var/log/systemd-test-image.log" 2>&1 &&
		chroot "$root" apt-get install -y -qq --download-only -o APT::Install-Recommends=true $deps \
			</dev/null >>"$root/var/log/systemd-test-image.log" 2>&1
}

customize_root() { # ROOT KERNEL_DIR
	local root=$1 kdir=$2 kver u
	kver=$(cat "$kdir/kver")
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	mount -t proc proc "$root/proc"
	local ok=0
	image_packages "$root" || ok=$?
	umount "$root/proc"
	rm -f "$root/etc/resolv.conf"
	((ok == 0)) || die "apt-get in the image root failed: $(tail -5 "$root/var/log/systemd-test-image.log")"

	mkdir -p "$root/usr/lib/modules"
	cp -a "$kdir/lib/modules/$kver" "$root/usr/lib/modules/"
	depmod -b "$root" "$kver"
	install -m 0755 /bin/busybox "$root/usr/local/bin/busybox"
	od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$root/etc/machine-id"
	echo >>"$root/etc/machine-id"
	echo lbd-systemd-test >"$root/etc/hostname"
	printf '127.0.0.1 localhost\n127.0.1.1 lbd-systemd-test\n::1 localhost\n' >"$root/etc/hosts"
	echo '/dev/vda / ext4 rw 0 0' >"$root/etc/fstab"
	for u in "${IMAGE_MASK[@]}"; do ln -sf /dev/null "$root/etc/systemd/system/$u"; done
	install -m 0644 "$here/lbd-systemd-test.service" "$root/etc/systemd/system/"
	mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
	ln -sf ../lbd-systemd-test.service "$root/etc/systemd/system/multi-user.target.wants/"
}

build_initrd() { # KERNEL_DIR OUT
	local kdir=$1 out=$2 kver mods d m
	kver=$(cat "$kdir/kver")
	mods=$kdir/lib/modules/$kver
	d=$(mktemp -d "$cache/.initrd.XXXXXX")
	mkdir -p "$d"/{bin,dev,proc,sys,lib/modules}
	cp /bin/busybox "$d/bin/busybox"
	install -m 0755 "$here/init" "$d/init"
	# modules.dep lists a module's dependencies in the order modprobe loads
	# them backwards: load them last to first, then the module.
	for m in "${INITRD_MODULES[@]}"; do
		awk -v m="$m" '{ n = $1; sub(/:$/, "", n); b = n; sub(/.*\//, "", b) }
			b == m ".ko" { for (i = NF; i >= 2; i--) print $i; print n }' "$mods/modules.dep"
	done | awk '!seen[$0]++' | while read -r m; do
		cp "$mods/$m" "$d/lib/modules/"
		basename "$m" >>"$d/modules"
	done
	(cd "$d" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out"
	rm -rf "$d"
}

image_key() {
	{
		printf 'v1\n%s\n%s\n' "$(basename "$base")" "$kernel_name"
		dpkg-query -W -f='${Package} ${Version}\n' busybox-static
		cat "$here/init" "$here/lbd-systemd-test.service"
		declare -f image_packages customize_root build_initrd
		declare -p IMAGE_PKGS IMAGE_MASK INITRD_MODULES
	} | sha256sum | cut -c1-16
}

image_dir=""
ensure_image() {
	image_dir=$cache/image-$(image_key)
	if [[ -f $image_dir/disk.img ]]; then
		log "disk image cached: $image_dir ($(du -sh "$image_dir" | cut -f1))"
		return 0
	fi
	timed "clean Debian 12 root (build or cache)" ensure_base
	timed "kernel (e2e cache or download)" ensure_kernel
	log "building the disk image $(basename "$image_dir") from $(basename "$base") and $kernel_name"
	local tmp kib
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	mkdir "$tmp/root"
	tar -C "$tmp/root" -xf "$base"
	customize_root "$tmp/root" "$kernel_dir"
	build_initrd "$kernel_dir" "$tmp/initrd.cpio"
	cp "$kernel_dir/vmlinuz" "$tmp/vmlinuz"
	kib=$(du -sk "$tmp/root" | cut -f1)
	kib=$((kib * 3 / 2 + 512 * 1024))
	mke2fs -q -t ext4 -L lbd-root -E root_owner=0:0 -d "$tmp/root" "$tmp/disk.img" "${kib}k"
	rm -rf "$tmp/root"
	rm -rf "$cache"/image-*
	mv "$tmp" "$image_dir"
	log "disk image: $image_dir ($(du -sh "$image_dir" | cut -f1) on disk)"
}

cache=${LBD_SYSTEMD_TEST_CACHE:-/var/cache/lbd-test/systemd}
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
# Leftovers of runs that were killed while building.
for m in "$cache"/.build.*/root/proc; do
	if mountpoint -q "$m"; then umount "$m"; fi
done
rm -rf --one-file-system "$cache"/.build.* "$cache"/.dl.* "$cache"/.initrd.*
timed "disk image (build or cache)" ensure_image

# ---------------------------------------------------------------------------
# The run: a small disk with the .debs and the driver, then boot
# ---------------------------------------------------------------------------
run=$(mktemp -d /var/tmp/lbd-systemd-test.XXXXXX)
qemu_pid=""
cleanup() {
	local rc=$?
	if [[ -n $qemu_pid ]]; then kill "$qemu_pid" 2>/dev/null || true; fi
	if [[ ${LBD_SYSTEMD_TEST_KEEP:-0} = 1 || $rc -ne 0 ]]; then
		echo "systemd-test: run directory kept: $run"
	else
		rm -rf "$run"
	fi
}
trap cleanup EXIT

nonce=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
mkdir "$run/payload"
cp "$deb" "$up_deb" "$here/guest.sh" "$run/payload/"
cat >"$run/payload/env" <<EOF
NONCE=$nonce
VERSION='$version'
UP_VERSION='$up_version'
DEB=/mnt/payload/$(basename "$deb")
UP_DEB=/mnt/payload/$(basename "$up_deb")
EOF
kib=$(du -sk "$run/payload" | cut -f1)
mke2fs -q -t ext4 -O ^has_journal -L lbd-payload -E root_owner=0:0 -d "$run/payload" "$run/payload.img" "$((kib + 8192))k"

timeout_s=${LBD_SYSTEMD_TEST_TIMEOUT:-1200}
qemu=(
	qemu-system-x86_64 -accel tcg -cpu max -m "${LBD_SYSTEMD_TEST_MEM:-1536}" -smp 2
	-nodefaults -display none -no-reboot
	-kernel "$image_dir/vmlinuz" -initrd "$image_dir/initrd.cpio"
	-append "console=ttyS0 panic=-1 audit=1 mitigations=off loglevel=4 systemd.firstboot=off"
	# snapshot=on: the guest's writes go to a temporary file, the image stays clean.
	-drive "file=$image_dir/disk.img,if=virtio,format=raw,snapshot=on"
	-drive "file=$run/payload.img,if=virtio,format=raw,readonly=on"
	-serial "file:$run/console.log" -serial "file:$run/report.log"
)
log "booting (TCG; console: $run/console.log; hard limit ${timeout_s}s)"
: >"$run/report.log"
boot_t=$EPOCHREALTIME
TMPDIR=$run timeout --kill-after=15 "$timeout_s" "${qemu[@]}" </dev/null 2>"$run/qemu.stderr" &
qemu_pid=$!
# The guest's report, live; the first line marks the driver's start.
first_line_t=""
while IFS= read -r line; do
	line=${line%$'\r'}
	[[ -n $first_line_t ]] || first_line_t=$(since "$boot_t")
	printf '%s\n' "$line"
done < <(tail -n +1 -F --pid="$qemu_pid" "$run/report.log" 2>/dev/null)
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""
vm_secs=$(since "$boot_t")
timings+=("$(printf '%-38s %7ss' "boot to the driver's start (host clock)" "${first_line_t:-?}")")
timings+=("$(printf '%-38s %7ss' "vm total (boot to poweroff)" "$vm_secs")")

report=$(tr -d '\r' <"$run/report.log")
switch_root=$(tr -d '\r' <"$run/console.log" | sed -n 's/^systemd-test initramfs: switch_root at uptime \(.*\)$/\1/p' | tail -1)
driver_up=$(sed -n 's/^lbd-systemd-test: driver started at guest uptime \(.*\)$/\1/p' <<<"$report" | head -1)
result=$(grep -E "^lbd-systemd-test: result $nonce rc=[0-9]+ " <<<"$report" | tail -1 || true)
passes=$(sed -n 's/.* passed=\([0-9]*\).*/\1/p' <<<"$result")
failures=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$result")
rc=1
if ((qemu_rc == 124 || qemu_rc == 137)); then
	echo "systemd-test: FAIL: the VM hit its hard limit of ${timeout_s}s" >&2
elif [[ -z $result ]]; then
	echo "systemd-test: FAIL: no result from the guest (qemu exited $qemu_rc); console tail:" >&2
	tr -d '\r' <"$run/console.log" | tail -40 >&2
	sed 's/^/[qemu] /' "$run/qemu.stderr" >&2
else
	rc=${result#*rc=}
	rc=${rc%% *}
fi

cat <<EOF

systemd-test summary
  packages    $(basename "$deb"), upgrade to $(basename "$up_deb")
  image       $image_dir ($(du -sh "$image_dir" | cut -f1) on disk), kernel $kernel_name
  guest       guest uptime at switch_root ${switch_root:-?}, at the driver's start (multi-user.target) ${driver_up:-?}
  timings
$(printf '    %s\n' "${timings[@]}")
$(sed -n 's/^phase-time \(.*\) \([0-9.]*\)$/\1 \2/p' <<<"$report" | awk '{ t = $NF; $NF = ""; printf "    guest: %-31s %7ss\n", $0, t }')
    total                                  $(since "$t_start")s
${passes:-0} passed, ${failures:-?} failed
EOF
((rc == 0))
