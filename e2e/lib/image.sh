# shellcheck shell=bash
# Sourced by e2e/run.sh: the guest kernel and the base initramfs of VM mode,
# both cached. Uses run.sh's log, die, stage, ensure_packages and cache paths.

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
	/usr/sbin/keepalived /usr/sbin/conntrackd /usr/bin/ab
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
