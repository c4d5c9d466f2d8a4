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
readonly HOST_TOOL_PKGS=(iproute2 ipvsadm ipset iptables conntrack nftables kmod strace hping3 keepalived conntrackd apache2-utils)
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
	# The tools are copied into the guest; none of their services may
	# start here (conntrackd's would, with Debian's configuration). A
	# policy-rc.d already in place (containers have one) is left alone.
	local policy=/usr/sbin/policy-rc.d own_policy=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
	fi
	local rc=0
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
		--no-install-recommends "${missing[@]}" </dev/null >/dev/null || rc=$?
	((own_policy == 0)) || rm -f "$policy"
	return "$rc"
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

# VM mode: the guest kernel and the base initramfs (e2e/lib/image.sh).
# shellcheck source=lib/image.sh
. "$E2E_DIR/lib/image.sh"

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
