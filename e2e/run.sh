#!/usr/bin/env bash
# e2e/run.sh — the single entry point of lbd's end-to-end tests.
#
#   e2e/run.sh [test flags...]        e.g. e2e/run.sh -run TestHarness -count=1
#
# If this machine's kernel has IPVS and we are root, the tests run here with
# `go test -tags e2e ./e2e/...`. Otherwise they run inside a Debian cloud
# kernel booted under QEMU (TCG): the kernel and a base initramfs are cached,
# the test binary is built and appended as a small payload, and the guest's
# test exit status becomes this script's exit status.
#
# Environment (all optional):
#   LBD_E2E_MODE=auto|host|vm   where to run (default auto)
#   LBD_E2E_CACHE=DIR           cache (default /var/cache/lbd-e2e as root,
#                               else $HOME/.cache/lbd-e2e)
#   LBD_E2E_VM_TIMEOUT=SECS     hard limit on the VM's life (default 1500)
#   LBD_E2E_VM_MEM=MiB          guest memory (default 2048)
#   LBD_E2E_VM_SMP=N            guest CPUs (default 2)
#   LBD_E2E_SHARE=DIR           directory made available read-only in the guest
#                               at /mnt/share (big files: Consul, ...), as an
#                               ext4 image on a virtio disk, cached by content
#   LBD_E2E_KEEP=1              keep the run directory (console log, payload)
#   LBD_E2E_OFFLINE=1           never call apt-get; use what is cached
# Any other LBD_E2E_* variable is passed into the guest's environment.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$E2E_DIR/.." && pwd)
readonly E2E_DIR REPO_DIR

# Debian packages the harness needs on the host (VM mode adds QEMU & co).
readonly HOST_TOOL_PKGS=(iproute2 ipvsadm ipset iptables conntrack nftables kmod strace hping3 keepalived)
readonly VM_PKGS=(qemu-system-x86 busybox-static cpio e2fsprogs)

log() { printf '[e2e] %s\n' "$*" >&2; }
die() { printf '[e2e] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# Stage timings: every stage is timed and a summary is printed at exit, so
# docs/ci-time-ledger.md can be kept true.
# ---------------------------------------------------------------------------
STAGE_NAMES=()
STAGE_SECS=()
readonly RUN_START=$EPOCHREALTIME
_stage_name=""
_stage_start=""

elapsed_since() { # START -> seconds with one decimal
	awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

stage_record() { # NAME SECONDS
	STAGE_NAMES+=("$1")
	STAGE_SECS+=("$2")
	log "stage '$1' took ${2}s"
}

stage() { # NAME: ends the previous stage (if any) and starts NAME
	stage_done
	_stage_name=$1
	_stage_start=$EPOCHREALTIME
	log "stage '$1' ..."
}

stage_done() {
	[[ -n $_stage_name ]] || return 0
	stage_record "$_stage_name" "$(elapsed_since "$_stage_start")"
	_stage_name=""
}

print_timings() {
	stage_done
	local i
	printf '[e2e] ---- stage timings ----\n' >&2
	for i in "${!STAGE_NAMES[@]}"; do
		printf '[e2e] %-34s %7ss\n' "${STAGE_NAMES[$i]}" "${STAGE_SECS[$i]}" >&2
	done
	printf '[e2e] %-34s %7ss\n' "total" "$(elapsed_since "$RUN_START")" >&2
}

# ---------------------------------------------------------------------------
# Host packages
# ---------------------------------------------------------------------------
missing_packages() { # PKG... -> prints those not installed
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
			printf '%s\n' "$p"
	done
}

APT_UPDATED=0
apt_update() {
	((APT_UPDATED)) && return 0
	log "apt-get update"
	# A failing third-party source must not stop us: the install that follows
	# tells whether what we need was found.
	apt-get -o DPkg::Lock::Timeout=300 update -qq || log "apt-get update reported errors (ignored)"
	APT_UPDATED=1
}

ensure_packages() { # PKG...
	local missing
	mapfile -t missing < <(missing_packages "$@")
	if ((${#missing[@]} == 0)); then
		log "packages present: $*"
		return 0
	fi
	[[ ${LBD_E2E_OFFLINE:-0} != 1 ]] || die "missing packages and LBD_E2E_OFFLINE=1: ${missing[*]}"
	[[ $EUID -eq 0 ]] || die "missing packages (run as root to install them): ${missing[*]}"
	apt_update
	log "apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
		--no-install-recommends "${missing[@]}" </dev/null >/dev/null
}

# ---------------------------------------------------------------------------
# Mode selection
# ---------------------------------------------------------------------------
host_has_ipvs() {
	[[ $EUID -eq 0 ]] || return 1
	[[ -e /proc/net/ip_vs ]] && return 0
	command -v modprobe >/dev/null && modprobe -q ip_vs 2>/dev/null && [[ -e /proc/net/ip_vs ]]
}

# ---------------------------------------------------------------------------
# Test output summary: each top-level test's result and duration, then a
# closing 'N passed, N failed' line for CI.
# ---------------------------------------------------------------------------
summarize_tests() { # LOGFILE RC -> the final exit status
	local f=$1 rc=$2 pass fail skip
	sed -n -E 's/^--- (PASS|FAIL|SKIP): ([^ ]+) \(([0-9.]+s)\)$/[e2e] test \2: \1 in \3/p' "$f" >&2
	pass=$(grep -c -E '^--- PASS: ' "$f" || true)
	fail=$(grep -c -E '^--- FAIL: ' "$f" || true)
	skip=$(grep -c -E '^--- SKIP: ' "$f" || true)
	printf 'e2e: %d passed, %d failed, %d skipped\n' "$pass" "$fail" "$skip"
	if ((rc == 0 && pass + fail == 0)); then
		log "FAIL: no test ran (check the -run pattern)"
		rc=1
	fi
	return "$rc"
}

# ---------------------------------------------------------------------------
# lbd itself, for the tests that run it (LBD_BIN)
# ---------------------------------------------------------------------------
build_lbd() { # OUT: builds ./cmd/lbd statically if it exists; 1 if it does not
	compgen -G "$REPO_DIR/cmd/lbd/*.go" >/dev/null || return 1
	log "building lbd"
	(cd "$REPO_DIR" && CGO_ENABLED=0 go build -o "$1" ./cmd/lbd)
}

# ---------------------------------------------------------------------------
# Host mode
# ---------------------------------------------------------------------------
run_on_host() {
	stage "host packages"
	ensure_packages "${HOST_TOOL_PKGS[@]}"
	command -v go >/dev/null || die "go is not on PATH"
	RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lbd-e2e-run.XXXXXX")
	stage "lbd build"
	if build_lbd "$RUN_DIR/lbd"; then export LBD_BIN=$RUN_DIR/lbd; fi
	if [[ -n ${LBD_E2E_SHARE:-} ]]; then export LBD_E2E_SHARE_MOUNT=$(realpath "$LBD_E2E_SHARE"); fi
	stage "go test (host)"
	local rc=0
	(cd "$REPO_DIR" && LBD_E2E_REQUIRE=1 go test -tags e2e -count=1 -v ./e2e/... "$@") 2>&1 |
		tee "$RUN_DIR/test.log" || rc=$?
	stage_done
	summarize_tests "$RUN_DIR/test.log" "$rc"
}

# ---------------------------------------------------------------------------
# VM mode: cache
# ---------------------------------------------------------------------------
default_cache_dir() {
	if [[ -n ${LBD_E2E_CACHE:-} ]]; then
		printf '%s\n' "$LBD_E2E_CACHE"
	elif [[ $EUID -eq 0 ]]; then
		printf '/var/cache/lbd-e2e\n'
	else
		printf '%s/.cache/lbd-e2e\n' "${XDG_CACHE_HOME:-$HOME/.cache}"
	fi
}

CACHE=""
init_cache() {
	CACHE=$(default_cache_dir)
	mkdir -p "$CACHE/kernels" "$CACHE/base" "$CACHE/share"
	# One run at a time uses the cache (a run may replace what another boots
	# from); the lock is held until exit, by qemu too.
	exec {CACHE_LOCK_FD}>"$CACHE/.lock"
	if ! flock -n "$CACHE_LOCK_FD"; then
		log "waiting for another e2e run to release $CACHE/.lock"
		flock "$CACHE_LOCK_FD"
	fi
	# Leftovers of runs that were killed while filling the cache.
	rm -rf "$CACHE"/kernels/.dl.* "$CACHE"/base/.build.* "$CACHE"/share/*.tmp
	log "cache: $CACHE"
}

# ---------------------------------------------------------------------------
# VM mode: kernel
# ---------------------------------------------------------------------------
KERNEL_DIR="" # $CACHE/kernels/<pkg>_<version>: vmlinuz, config, kver, lib/modules/<kver>/
KVER=""
# Bump when the layout of a cached kernel directory changes.
readonly KERNEL_LAYOUT=2

kernel_ready() { # DIR
	[[ -f $1/layout && $(cat "$1/layout") == "$KERNEL_LAYOUT" ]]
}

# The metapackage depends on the current kernel with an exact version:
#   Depends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)
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

cached_kernels() { # -> cached kernel directories, most recently used first
	find "$CACHE/kernels" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%T@ %p\n' |
		sort -rn | cut -d' ' -f2-
}

newest_cached_kernel() {
	local d
	while read -r d; do
		if kernel_ready "$d"; then
			printf '%s\n' "$d"
			return 0
		fi
	done < <(cached_kernels)
	return 1
}

download_kernel() { # PKG VERSION DESTDIR
	local pkg=$1 ver=$2 dest=$3 tmp deb
	tmp=$(mktemp -d "$CACHE/kernels/.dl.XXXXXX")
	chmod 755 "$tmp"
	if id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
	if ! (cd "$tmp" && apt-get download -q "$pkg=$ver" >"$tmp/download.log" 2>&1); then
		log "apt-get download $pkg=$ver failed:"
		sed 's/^/[apt] /' "$tmp/download.log" >&2
		rm -rf "$tmp"
		return 1
	fi
	deb=$(ls "$tmp"/*.deb)
	log "unpacking $(basename "$deb") ($(du -h "$deb" | cut -f1))"
	mkdir "$tmp/x"
	dpkg-deb -x "$deb" "$tmp/x"
	local kver
	kver=$(ls "$tmp/x/lib/modules")
	mkdir -p "$tmp/k/lib/modules"
	mv "$tmp/x/boot/vmlinuz-$kver" "$tmp/k/vmlinuz"
	mv "$tmp/x/boot/config-$kver" "$tmp/k/config"
	mv "$tmp/x/lib/modules/$kver" "$tmp/k/lib/modules/$kver"
	# modules.dep of the whole tree: the base image takes a subset of it.
	depmod -b "$tmp/k" "$kver"
	printf '%s\n' "$kver" >"$tmp/k/kver"
	printf '%s\n' "$KERNEL_LAYOUT" >"$tmp/k/layout"
	rm -rf "$dest"
	mv "$tmp/k" "$dest"
	rm -rf "$tmp"
}

ensure_kernel() {
	local pkg="" ver="" line
	if [[ ${LBD_E2E_OFFLINE:-0} != 1 ]]; then
		line=$(current_kernel_package) || { apt_update; line=$(current_kernel_package) || true; }
		read -r pkg ver <<<"${line:-}"
	fi
	if [[ -n $pkg ]]; then
		KERNEL_DIR="$CACHE/kernels/${pkg}_${ver}"
		if ! kernel_ready "$KERNEL_DIR"; then
			log "downloading $pkg $ver"
			if ! download_kernel "$pkg" "$ver" "$KERNEL_DIR"; then
				# Stale package lists name a version the mirror no longer has.
				apt_update
				read -r pkg ver <<<"$(current_kernel_package || true)"
				KERNEL_DIR="$CACHE/kernels/${pkg}_${ver}"
				kernel_ready "$KERNEL_DIR" || download_kernel "$pkg" "$ver" "$KERNEL_DIR" ||
					KERNEL_DIR=""
			fi
		fi
	fi
	if [[ -z $KERNEL_DIR ]] || ! kernel_ready "$KERNEL_DIR"; then
		KERNEL_DIR=$(newest_cached_kernel) || die "no kernel: download failed and none is cached in $CACHE/kernels"
		log "WARNING: using cached kernel $(basename "$KERNEL_DIR") (current one unavailable)"
	fi
	touch "$KERNEL_DIR"
	KVER=$(cat "$KERNEL_DIR/kver")
	log "kernel: $(basename "$KERNEL_DIR") ($KVER)"
	prune_old_kernels
}

prune_old_kernels() { # keep the one in use and one older
	local d n=0
	while read -r d; do
		[[ $d != "$KERNEL_DIR" ]] || continue
		n=$((n + 1))
		if ((n > 1)); then
			log "removing old kernel $d"
			rm -rf "$d"
		fi
	done < <(cached_kernels)
}

# ---------------------------------------------------------------------------
# VM mode: base initramfs (busybox, kernel modules, host tools), cached
# ---------------------------------------------------------------------------
# Host tools copied into the guest with their shared libraries.
readonly GUEST_TOOLS=(
	/usr/sbin/ip /usr/sbin/bridge /usr/bin/ss
	/usr/sbin/ipvsadm /usr/sbin/ipset /usr/sbin/conntrack /usr/sbin/nft
	/usr/sbin/xtables-nft-multi /usr/bin/kmod /usr/bin/strace /usr/sbin/hping3
	/usr/sbin/keepalived
)
# Names that xtables-nft-multi and kmod answer to.
readonly XTABLES_NAMES=(
	iptables iptables-save iptables-restore iptables-nft iptables-nft-save iptables-nft-restore
	ip6tables ip6tables-save ip6tables-restore ip6tables-nft ip6tables-nft-save ip6tables-nft-restore
)
readonly KMOD_NAMES=(modprobe insmod rmmod lsmod modinfo depmod)
readonly GUEST_ETC_FILES=(/etc/protocols /etc/services /etc/ethertypes)
# Parts of the kernel's module tree the guest gets (plus whatever these
# modules depend on). The whole tree (~90 MB) costs seconds of boot under TCG.
readonly GUEST_MODULE_DIRS=(
	kernel/net kernel/lib kernel/crypto kernel/arch/x86/crypto
	kernel/drivers/net kernel/drivers/block kernel/drivers/virtio kernel/drivers/char
	kernel/fs/overlayfs kernel/fs/squashfs kernel/fs/isofs kernel/fs/fuse
)

copy_into_root() { # ROOT FILE: copy FILE (following its symlink chain) to the same path in ROOT
	local root=$1 src=$2 dir base target
	while :; do
		dir=$(realpath "$(dirname "$src")")
		base=$(basename "$src")
		mkdir -p "$root$dir"
		if [[ ! -e $root$dir/$base && ! -L $root$dir/$base ]]; then
			cp -a "$dir/$base" "$root$dir/$base"
		fi
		[[ -L $dir/$base ]] || break
		target=$(readlink "$dir/$base")
		[[ $target == /* ]] || target=$dir/$target
		src=$target
	done
}

copy_with_libs() { # ROOT FILE...: copy binaries/objects and every library ldd names
	local root=$1 f lib
	shift
	for f in "$@"; do
		copy_into_root "$root" "$f"
		while read -r lib; do
			copy_into_root "$root" "$lib"
		done < <(ldd "$f" 2>/dev/null | grep -oE '/[^ ]+' || true)
	done
}

build_base_tree() { # ROOT KERNEL_DIR KVER
	local root=$1 kdir=$2 kver=$3 a f
	# Debian's merged /usr layout, so paths are the host's.
	mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,proc,sys,dev,tmp,run,root,mnt,var}
	ln -s usr/bin "$root/bin"
	ln -s usr/sbin "$root/sbin"
	ln -s usr/lib "$root/lib"
	ln -s usr/lib64 "$root/lib64"
	ln -s ../run "$root/var/run"

	copy_with_libs "$root" "${GUEST_TOOLS[@]}"
	copy_with_libs "$root" /usr/lib/x86_64-linux-gnu/xtables/*.so
	copy_into_root "$root" /usr/lib/x86_64-linux-gnu/libnss_files.so.2
	for a in "${XTABLES_NAMES[@]}"; do ln -sf xtables-nft-multi "$root/usr/sbin/$a"; done
	for a in "${KMOD_NAMES[@]}"; do ln -sf ../bin/kmod "$root/usr/sbin/$a"; done

	# busybox for the shell and coreutils; real tools above take precedence,
	# so no applet link is made where a real tool of that name exists.
	cp /bin/busybox "$root/usr/bin/busybox"
	for a in $("$root/usr/bin/busybox" --list); do
		[[ -e $root/usr/bin/$a || -e $root/usr/sbin/$a || -L $root/usr/sbin/$a ]] && continue
		ln -s busybox "$root/usr/bin/$a"
	done

	for f in "${GUEST_ETC_FILES[@]}"; do
		if [[ -f $f ]]; then cp "$f" "$root$f"; fi
	done
	if [[ -d /etc/iproute2 ]]; then cp -a /etc/iproute2 "$root/etc/"; fi
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"
	printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
	printf '%s\n' 'passwd: files' 'group: files' 'hosts: files' 'protocols: files' \
		'services: files' 'ethers: files' 'networks: files' >"$root/etc/nsswitch.conf"

	copy_modules "$kdir/lib/modules/$kver" "$root/usr/lib/modules/$kver"
	depmod -b "$root" "$kver"
}

copy_modules() { # SRC_TREE DST_TREE: GUEST_MODULE_DIRS and their dependencies
	local src=$1 dst=$2 d
	mkdir -p "$dst"
	cp "$src"/modules.builtin* "$src"/modules.order "$dst/"
	{
		for d in "${GUEST_MODULE_DIRS[@]}"; do
			[[ -d $src/$d ]] && (cd "$src" && find "$d" -name '*.ko*')
		done
	} | awk -v depfile="$src/modules.dep" '
		BEGIN {
			while ((getline line < depfile) > 0) {
				n = split(line, f, /[: ]+/)
				deps[f[1]] = ""
				for (i = 2; i <= n; i++) if (f[i] != "") deps[f[1]] = deps[f[1]] " " f[i]
			}
		}
		function want(m,   n, i, d) {
			if (m in seen) return
			seen[m] = 1
			print m
			n = split(deps[m], d, " ")
			for (i = 1; i <= n; i++) want(d[i])
		}
		{ want($0) }' | (cd "$src" && cpio -pdm --quiet "$dst")
}

# The cache key covers the kernel, the host tools' package versions and the
# code that builds the tree, so a change in any of them rebuilds the image.
base_cache_key() {
	{
		printf 'kernel %s\n' "$(basename "$KERNEL_DIR")"
		dpkg-query -W -f='${Package} ${Version}\n' busybox-static "${HOST_TOOL_PKGS[@]}" libc6
		declare -f build_base_tree copy_with_libs copy_into_root copy_modules pack_cpio
		declare -p GUEST_TOOLS XTABLES_NAMES KMOD_NAMES GUEST_ETC_FILES GUEST_MODULE_DIRS
	} | sha256sum | cut -c1-16
}

# Archives stay uncompressed: under TCG the guest kernel copies an
# uncompressed archive faster than it decompresses a zstd or gzip one
# (measured: ~1.2 s less boot for the base image).
pack_cpio() { # DIR OUT: newc archive of DIR
	local dir=$1 out=$2
	(cd "$dir" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out"
}

BASE_IMAGE=""
ensure_base_image() {
	local key
	key=$(base_cache_key)
	BASE_IMAGE="$CACHE/base/base-$key.cpio"
	if [[ -f $BASE_IMAGE ]]; then
		log "base initramfs cached: $(basename "$BASE_IMAGE") ($(du -h "$BASE_IMAGE" | cut -f1))"
		return 0
	fi
	log "building base initramfs $key"
	local tmp
	tmp=$(mktemp -d "$CACHE/base/.build.XXXXXX")
	build_base_tree "$tmp/root" "$KERNEL_DIR" "$KVER"
	pack_cpio "$tmp/root" "$tmp/base.cpio"
	rm -f "$CACHE"/base/base-*.cpio
	mv "$tmp/base.cpio" "$BASE_IMAGE"
	rm -rf "$tmp"
	log "base initramfs: $(du -h "$BASE_IMAGE" | cut -f1)"
}

# ---------------------------------------------------------------------------
# VM mode: per-run payload (test binary, lbd, /init, arguments)
# ---------------------------------------------------------------------------
RUN_DIR=""
NONCE=""

# `go test` flags become test-binary flags: -run X -> -test.run X.
test_binary_args() { # ARGS... -> one per line
	local a name
	for a in "$@"; do
		if [[ $a == -* && $a != -test.* ]]; then
			name=${a#-}
			name=${name#-}
			case ${name%%=*} in
			run | skip | v | count | timeout | failfast | short | list | parallel | cpu | \
				bench | benchtime | benchmem | shuffle | fullpath)
				a=-test.$name
				;;
			esac
		fi
		printf '%s\n' "$a"
	done
}

shell_quote() { # VALUE -> 'VALUE' for a POSIX shell
	local s=${1//\'/\'\\\'\'}
	printf "'%s'" "$s"
}

build_payload() { # ARGS...
	local p="$RUN_DIR/payload" name
	mkdir -p "$p/e2e/bin" "$p/e2e/pkg"
	log "building e2e test binary"
	(cd "$REPO_DIR" && CGO_ENABLED=0 go test -c -tags e2e -o "$p/e2e/bin/e2e.test" ./e2e)
	build_lbd "$p/e2e/bin/lbd" || true
	if [[ -d $E2E_DIR/testdata ]]; then cp -a "$E2E_DIR/testdata" "$p/e2e/pkg/testdata"; fi
	install -m 0755 "$E2E_DIR/vm/init" "$p/init"
	cp "$E2E_DIR/vm/modules" "$p/e2e/modules"

	# Guest test timeout: a little less than the VM's, so Go prints its
	# goroutine dump before the VM is killed. A user's -timeout comes later
	# on the command line and wins.
	local test_timeout=$((VM_TIMEOUT > 270 ? VM_TIMEOUT - 90 : VM_TIMEOUT * 2 / 3))
	{
		printf -- '-test.v\n-test.timeout=%ss\n' "$test_timeout"
		test_binary_args "$@"
	} >"$p/e2e/args"

	{
		printf 'export LBD_E2E_NONCE=%s\n' "$NONCE"
		printf 'export LBD_E2E_REQUIRE=1\n'
		if [[ -f $p/e2e/bin/lbd ]]; then printf 'export LBD_BIN=/e2e/bin/lbd\n'; fi
		if [[ -n $SHARE_IMAGE ]]; then printf 'export LBD_E2E_SHARE_MOUNT=/mnt/share\n'; fi
		for name in $(compgen -e); do
			case $name in
			LBD_E2E_CACHE | LBD_E2E_MODE | LBD_E2E_KEEP | LBD_E2E_OFFLINE | LBD_E2E_VM_* | LBD_E2E_SHARE) ;;
			LBD_E2E_*) printf 'export %s=%s\n' "$name" "$(shell_quote "${!name}")" ;;
			esac
		done
	} >"$p/e2e/env"

	pack_cpio "$p" "$RUN_DIR/payload.cpio"
	log "payload: $(du -h "$RUN_DIR/payload.cpio" | cut -f1)"
}

# ---------------------------------------------------------------------------
# VM mode: big files (LBD_E2E_SHARE) on a read-only ext4 disk image
# ---------------------------------------------------------------------------
# Measured with a 190 MB file: building the image takes ~2.5 s (done once per
# content, then cached); in the guest, loading virtio_blk and mounting take
# ~0.4 s and the first full read ~1.3 s. Appending the same file to the
# initramfs instead added ~2 s to every boot and held it twice in RAM.
SHARE_IMAGE=""
ensure_share_image() {
	[[ -d $SHARE_DIR ]] || die "LBD_E2E_SHARE=$SHARE_DIR is not a directory"
	SHARE_DIR=$(realpath "$SHARE_DIR")
	local key kib
	key=$({
		(cd "$SHARE_DIR" && find . -printf '%P %y %s %T@ %m %l\n' | LC_ALL=C sort)
		declare -f ensure_share_image
	} | sha256sum | cut -c1-16)
	SHARE_IMAGE="$CACHE/share/share-$key.ext4"
	if [[ -f $SHARE_IMAGE ]]; then
		log "share image cached: $(basename "$SHARE_IMAGE")"
		return 0
	fi
	kib=$(du -sk --apparent-size "$SHARE_DIR" | cut -f1)
	kib=$((kib + kib / 5 + 16384))
	log "building share image from $SHARE_DIR (${kib} KiB)"
	rm -f "$CACHE"/share/share-*.ext4
	mke2fs -q -t ext4 -O ^has_journal -L lbd-share -E root_owner=0:0 \
		-d "$SHARE_DIR" "$SHARE_IMAGE.tmp" "${kib}k" >/dev/null
	mv "$SHARE_IMAGE.tmp" "$SHARE_IMAGE"
}

# ---------------------------------------------------------------------------
# VM mode: boot and collect the result
# ---------------------------------------------------------------------------
VM_TIMEOUT=${LBD_E2E_VM_TIMEOUT:-1500}
[[ $VM_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "LBD_E2E_VM_TIMEOUT must be a number of seconds (got '$VM_TIMEOUT')"
SHARE_DIR=${LBD_E2E_SHARE:-}

# Reads the guest console from stdin: prints it, strips CRs, keeps a log,
# and records stage timings from the guest's "lbd-e2e: stage NAME" lines.
follow_console() { # LOGFILE
	local logf=$1 line prev_name="vm boot to /init" prev_start=$EPOCHREALTIME
	while IFS= read -r line || [[ -n $line ]]; do
		line=${line%$'\r'}
		printf '%s\n' "$line"
		printf '%s\n' "$line" >>"$logf"
		if [[ $line =~ ^lbd-e2e:\ stage\ (.+)$ ]]; then
			printf '%s %s\n' "$prev_name" "$(elapsed_since "$prev_start")" >>"$RUN_DIR/guest-stages"
			prev_name="guest ${BASH_REMATCH[1]}"
			prev_start=$EPOCHREALTIME
		fi
	done
	printf '%s %s\n' "$prev_name" "$(elapsed_since "$prev_start")" >>"$RUN_DIR/guest-stages"
}

qemu_command() {
	local kdir=$KERNEL_DIR
	QEMU_CMD=(
		qemu-system-x86_64
		-accel tcg -cpu max
		-m "${LBD_E2E_VM_MEM:-2048}" -smp "${LBD_E2E_VM_SMP:-2}"
		-nodefaults -display none -no-reboot
		-kernel "$kdir/vmlinuz"
		-initrd "$RUN_DIR/initrd"
		-append "console=ttyS0 rdinit=/init panic=-1 loglevel=3 mitigations=off"
		-serial stdio
		-serial "file:$RUN_DIR/result"
	)
	if [[ -n $SHARE_IMAGE ]]; then
		QEMU_CMD+=(-drive "file=$SHARE_IMAGE,if=virtio,format=raw,readonly=on")
	fi
}

# The guest's exit status: the line "lbd-e2e: result NONCE rc=N" written to
# its second serial port (a file here) or, failing that, to the console.
# Anything else — no line, a wrong nonce, a panic, a timeout — is a failure.
guest_status() {
	local f line
	for f in "$RUN_DIR/result" "$RUN_DIR/console.log"; do
		[[ -f $f ]] || continue
		line=$(tr -d '\r' <"$f" | grep -E "^lbd-e2e: result $NONCE rc=[0-9]+$" | tail -n 1) || true
		if [[ -n $line ]]; then
			printf '%s\n' "${line##*rc=}"
			return 0
		fi
	done
	return 1
}

run_in_vm() {
	[[ $EUID -eq 0 ]] || log "note: not root; packages must already be installed"
	stage "host packages"
	ensure_packages "${VM_PKGS[@]}" "${HOST_TOOL_PKGS[@]}"
	command -v go >/dev/null || die "go is not on PATH"

	stage "kernel (fetch or cache)"
	init_cache
	ensure_kernel

	stage "base initramfs (build or cache)"
	ensure_base_image

	if [[ -n $SHARE_DIR ]]; then
		stage "share image (build or cache)"
		ensure_share_image
	fi

	stage "payload build"
	RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lbd-e2e-run.XXXXXX")
	NONCE=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
	build_payload "$@"
	cat "$BASE_IMAGE" "$RUN_DIR/payload.cpio" >"$RUN_DIR/initrd"
	stage_done

	qemu_command
	log "booting: ${QEMU_CMD[*]}"
	log "VM hard timeout: ${VM_TIMEOUT}s"
	local qemu_rc=0 vm_start=$EPOCHREALTIME
	# --foreground: qemu stays in our process group, so whoever stops this
	# script's group (CI at its time limit) stops the VM too.
	timeout --foreground --kill-after=15 "$VM_TIMEOUT" "${QEMU_CMD[@]}" </dev/null 2>"$RUN_DIR/qemu.stderr" |
		follow_console "$RUN_DIR/console.log" || qemu_rc=${PIPESTATUS[0]}
	local vm_secs
	vm_secs=$(elapsed_since "$vm_start")
	if [[ -f $RUN_DIR/guest-stages ]]; then
		local n s
		while read -r line; do
			s=${line##* }
			n=${line% *}
			stage_record "$n" "$s"
		done <"$RUN_DIR/guest-stages"
	fi
	stage_record "vm total (boot to poweroff)" "$vm_secs"

	if [[ -s $RUN_DIR/qemu.stderr ]]; then
		log "qemu stderr:"
		sed 's/^/[qemu] /' "$RUN_DIR/qemu.stderr" >&2
	fi

	local rc
	if ((qemu_rc == 124 || qemu_rc == 137)); then
		log "FAIL: the VM hit its hard timeout of ${VM_TIMEOUT}s"
		rc=1
	elif rc=$(guest_status); then
		if ((rc == 0)); then log "guest tests exited 0"; else log "FAIL: guest tests exited $rc"; fi
	else
		log "FAIL: no result from the guest (kernel panic, crash or early exit); qemu exited $qemu_rc"
		rc=1
	fi
	summarize_tests "$RUN_DIR/console.log" "$rc"
}

cleanup() {
	local rc=$?
	print_timings
	if [[ -n $RUN_DIR && -d $RUN_DIR ]]; then
		if [[ ${LBD_E2E_KEEP:-0} == 1 || $rc -ne 0 ]]; then
			log "run directory kept: $RUN_DIR"
		else
			rm -rf "$RUN_DIR"
		fi
	fi
	exit "$rc"
}

main() {
	trap cleanup EXIT
	local mode=${LBD_E2E_MODE:-auto}
	case $mode in
	auto) if host_has_ipvs; then mode=host; else mode=vm; fi ;;
	host | vm) ;;
	*) die "LBD_E2E_MODE must be auto, host or vm (got '$mode')" ;;
	esac
	log "mode: $mode"
	if [[ $mode == host ]]; then
		run_on_host "$@"
	else
		run_in_vm "$@"
	fi
}

main "$@"
