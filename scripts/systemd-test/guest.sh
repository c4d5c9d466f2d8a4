#!/bin/bash
# The driver of scripts/systemd-test.sh, run by lbd-systemd-test.service in
# the guest once multi-user.target is reached; its output goes to the second
# serial port, a file on the host. Every check prints "ok" or "FAIL" and the
# run goes on; the last line is "lbd-systemd-test: result NONCE rc=N ...".
#
# The network, inside the guest: the director is the root namespace (lbd,
# VIPs on lbd0); real servers rs1 10.10.1.2 and rs2 10.10.2.2 (busybox
# httpd) and a client 10.10.0.2 are namespaces behind veths, each routed
# through the director.
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
	DEBIAN_FRONTEND=noninteractive HOME=/root
# shellcheck source=/dev/null
. /mnt/payload/env
BB=/usr/local/bin/busybox
VIP=192.0.2.10
VIP2=192.0.2.11
WEB=/etc/lbd/conf.d/web.toml
EXTRA=/etc/lbd/conf.d/extra.toml

passes=0
failures=0
pass() { printf '   ok   %s\n' "$*"; passes=$((passes + 1)); }
fail() { printf '   FAIL %s\n' "$*"; failures=$((failures + 1)); }
check() { # DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}
not() { ! "$@"; }
quiet() { "$@" >/dev/null 2>&1; }
indent() { sed 's/^/        /'; }
phase_name=""
phase_t=""
phase() { # NAME: ends the running phase (its time on a phase-time line) and starts NAME
	if [[ -n $phase_name ]]; then
		printf 'phase-time %s %s\n' "$phase_name" "$(awk -v a="$phase_t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
	fi
	phase_name=$1
	phase_t=$EPOCHREALTIME
	[[ -z $1 ]] || printf '== %s\n' "$1"
}
wait_until() { # SECONDS COMMAND...: 0 once COMMAND succeeds, 1 when SECONDS passed
	local end=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || return 1
		sleep 0.2
	done
}
prop() { systemctl show -p "$1" --value lbd.service; }
active_running() { [[ $(prop ActiveState)/$(prop SubState) == active/running ]]; }
# The weight the kernel gives REAL on VIP:80, or nothing.
kernel_weight() { # VIP REAL
	ipvsadm -Ln -t "$1:80" 2>/dev/null | awk -v r="$2:80" '$1 == "->" && $2 == r { print $4 }'
}
weight_is() { [[ $(kernel_weight "$1" "$2") == "$3" ]]; }
# Matches on a command's whole output, never `cmd | grep -q`: with pipefail,
# grep -q quitting at the first match makes the writer's SIGPIPE a failure.
output_has() { # PATTERN COMMAND...: COMMAND's output (stdout and stderr) matches PATTERN
	local pattern=$1 out
	shift
	out=$("$@" 2>&1)
	grep -Eq -- "$pattern" <<<"$out"
}
status_has() { output_has "$1" lbd status; }
# busybox 1.35's wget -T crashes (SIGSEGV): timeout(1) bounds it instead.
get() { ip netns exec cl timeout 3 "$BB" wget -q -O - "http://$1/" 2>&1; }

# ---------------------------------------------------------------------------
# Configuration files
# ---------------------------------------------------------------------------
write_web() { # RS1_WEIGHT RS2_WEIGHT [EXTRA LINE]: conf.d/web.toml
	local tmp=$WEB.tmp
	cat >"$tmp" <<EOF
[[service]]
name = "web"
vips = ["$VIP"]
port = 80
scheduler = "wrr"
drain_timeout = "1m"
${3:-}

[service.health_check]
type = "http"
path = "/"
interval = "1s"

[[service.real_server]]
address = "10.10.1.2"
weight = $1

[[service.real_server]]
address = "10.10.2.2"
weight = $2
EOF
	mv "$tmp" "$WEB"
}

write_extra() { # conf.d/extra.toml: a service with an exec check (setuid, kill)
	cat >"$EXTRA.tmp" <<EOF
[[service]]
name = "extra"
vips = ["$VIP2"]
port = 80

[service.health_check]
type = "exec"
command = ["/usr/local/bin/lbd-test-check"]
interval = "1s"
timeout = "1s"

[[service.real_server]]
address = "10.10.1.2"
EOF
	chown lbdcfg:lbdcfg "$EXTRA.tmp"
	chmod 0640 "$EXTRA.tmp"
	mv "$EXTRA.tmp" "$EXTRA"
}

# ---------------------------------------------------------------------------
# A stream of requests to the VIP from the client namespace
# ---------------------------------------------------------------------------
STREAM_LOG=/run/stream.log
stream_pid=""
stream_start() {
	: >"$STREAM_LOG"
	rm -f /run/stream.stop
	ip netns exec cl bash -c '
		while [ ! -e /run/stream.stop ]; do
			if out=$(timeout 3 '"$BB"' wget -q -O - http://'"$VIP"'/ 2>&1); then
				echo "ok $out"
			else
				echo "fail $(date +%T.%N) $out"
			fi
		done' >>"$STREAM_LOG" 2>&1 &
	stream_pid=$!
}
stream_ok() { grep -c '^ok ' "$STREAM_LOG"; }
stream_failed() { grep -c '^fail ' "$STREAM_LOG"; }
stream_has() { (($(stream_ok) >= $1)); }
stream_stop() {
	touch /run/stream.stop
	wait "$stream_pid" 2>/dev/null
}
# Runs COMMAND... while the stream flows: 20 answers before, then at least
# 20 answers and 5 s after it returned. Sets ACTION_RC.
under_stream() { # COMMAND...
	local n t
	stream_start
	wait_until 60 stream_has 20 || fail "the request stream did not start"
	"$@"
	ACTION_RC=$?
	n=$(stream_ok)
	t=$SECONDS
	wait_until 60 stream_has $((n + 20))
	while ((SECONDS < t + 5)); do sleep 0.5; done
	stream_stop
	check "requests during '$*': $(stream_ok) answered, $(stream_failed) failed" test "$(stream_failed)" = 0
	grep -m5 '^fail ' "$STREAM_LOG" | indent
}

# ---------------------------------------------------------------------------
# The phases
# ---------------------------------------------------------------------------
phase_boot() {
	phase "boot"
	printf '        kernel %s, %s, guest uptime %ss\n' "$(uname -r)" "$(systemctl --version | head -1)" "$(cut -d' ' -f1 /proc/uptime)"
	check "systemd is PID 1" test "$(readlink /proc/1/exe)" = /usr/lib/systemd/systemd
	check "multi-user.target reached" systemctl -q is-active multi-user.target
	local failed
	failed=$(systemctl list-units --failed --plain --no-legend | awk '{ print $1 }' | xargs)
	check "no failed unit at boot${failed:+: $failed}" test -z "$failed"
}

phase_install() {
	phase "install the .deb"
	if ! apt-get install -y -q -o Dpkg::Use-Pty=0 "$DEB" </dev/null >/var/log/systemd-test-apt.log 2>&1; then
		fail "apt-get install $DEB"
		tail -20 /var/log/systemd-test-apt.log | indent
		return 1
	fi
	check "installed: lbd $VERSION" test "$(dpkg-query -W -f='${Status} ${Version}' lbd)" = "install ok installed $VERSION"
	check "lbd.service enabled" test "$(systemctl is-enabled lbd.service)" = enabled
	check "lbd.service not started by the installation" not systemctl -q is-active lbd.service
	check "Type=notify" test "$(prop Type)" = notify
}

phase_network() {
	phase "network: client and real servers"
	local ns i
	i=0
	for ns in cl rs1 rs2; do
		ip netns add "$ns"
		ip link add "${ns}h" type veth peer name eth0 netns "$ns"
		ip addr add "10.10.$i.1/24" dev "${ns}h"
		ip link set "${ns}h" up
		ip -n "$ns" addr add "10.10.$i.2/24" dev eth0
		ip -n "$ns" link set eth0 up
		ip -n "$ns" link set lo up
		ip -n "$ns" route add default via "10.10.$i.1"
		i=$((i + 1))
	done
	for ns in rs1 rs2; do
		mkdir -p "/srv/$ns"
		echo "$ns" >"/srv/$ns/index.html"
		ip netns exec "$ns" "$BB" httpd -p 80 -h "/srv/$ns"
	done
	check "real servers answer (directly from the director)" \
		test "$(timeout 3 $BB wget -q -O - http://10.10.1.2/)$(timeout 3 $BB wget -q -O - http://10.10.2.2/)" = rs1rs2
	printf '#!/bin/sh\nexec %s wget -q -O /dev/null "http://$LBD_REAL_SERVER_ADDRESS:$LBD_REAL_SERVER_PORT/"\n' "$BB" \
		>/usr/local/bin/lbd-test-check
	chmod 0755 /usr/local/bin/lbd-test-check
}

phase_start() {
	phase "start"
	# Faster syncs than shipped, so that periodic full syncs run during the
	# test: an admin's edit of the conffile, which the upgrade must keep.
	printf '\n[sync]\nmin_sync_period = "200ms"\nsync_period = "5s"\n' >>/etc/lbd/lbd.toml
	write_web 1 2
	check "lbd check-config" quiet lbd check-config
	local t=$EPOCHREALTIME
	check "systemctl start lbd (returns at READY=1)" systemctl start lbd
	printf '        start to READY: %ss\n' "$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
	check "active (running)" active_running
	check "WatchdogSec=60s as shipped (WatchdogUSec=$(prop WatchdogUSec))" test "$(prop WatchdogUSec)" = 1min
	check "status text: $(prop StatusText)" grep -q '^1 virtual servers; last sync' <<<"$(prop StatusText)"
	check "IPVS: $VIP:80 -> rs1 weight 1, rs2 weight 2" eval 'weight_is $VIP 10.10.1.2 1 && weight_is $VIP 10.10.2.2 2'
	check "VIP $VIP on lbd0" quiet ip addr show dev lbd0 to "$VIP/32"
	check "ExecStartPre set net.ipv4.ip_forward=1 and net.ipv4.vs.conntrack=1" \
		test "$(sysctl -n net.ipv4.ip_forward net.ipv4.vs.conntrack | xargs)" = "1 1"
	local got="" i
	for i in $(seq 12); do got+=" $(get $VIP)"; done
	check "requests through the VIP reach both real servers:$got" eval '[[ $got == *rs1* && $got == *rs2* && $got != *wget* ]]'
	check "lbd status answers" status_has "$VIP"
	# A few health checks and periodic syncs, then the journal of the start.
	sleep 8
	local warn own
	warn=$(journalctl -q -u lbd -p warning -o short-monotonic)
	check "no journal line at priority warning or above at a clean start" test -z "$warn"
	printf '%s\n' "$warn" | sed '/^$/d' | indent
	own=$(journalctl -q -u lbd -o cat | grep -E 'level=(WARN|ERROR)')
	check "no level=WARN/ERROR line from lbd at a clean start" test -z "$own"
	printf '%s\n' "$own" | sed '/^$/d' | head -10 | indent
	printf '        journal lines of the start: %s\n' "$(journalctl -q -u lbd -o cat | wc -l)"
	check "NRestarts=0" test "$(prop NRestarts)" = 0
}

phase_reload() {
	phase "reload: good and bad edits"
	local pid hups
	pid=$(prop MainPID)
	hups=$(sighups)
	write_web 1 5
	check "systemctl reload lbd (good edit)" systemctl reload lbd
	check "the good edit is applied: rs2 weight 5" wait_until 20 weight_is $VIP 10.10.2.2 5
	check "lbd got the SIGHUP (ExecReload)" wait_until 10 eval '(($(sighups) > hups))'
	write_web 1 70000
	check "lbd check-config rejects the bad edit" not quiet lbd check-config
	check "systemctl reload lbd (bad edit)" systemctl reload lbd
	check "lbd status shows the rejection" wait_until 20 status_has REJECTED
	lbd status 2>&1 | grep -A3 REJECTED | indent
	check "status text says refused: $(prop StatusText)" grep -q 'configuration refused' <<<"$(prop StatusText)"
	check "still active (running), same PID" eval 'active_running && [[ $(prop MainPID) == "$pid" ]]'
	check "the last good configuration stays: rs2 weight 5" weight_is $VIP 10.10.2.2 5
	# Does the journal know how bad that was? lbd's own level=ERROR/WARN
	# lines should carry that priority, or `journalctl -p warning` (and the
	# check at a clean start above) sees none of them.
	local prio
	prio=$(journalctl -q -u lbd -o export _PID="$pid" | awk -F= '/^PRIORITY=/ { p = $2 } /^MESSAGE=.*level=(ERROR|WARN)/ { print p }' | sort -u | xargs)
	check "lbd's level=ERROR/WARN lines reach the journal at priority <= 4 (got: ${prio:-no such line})" \
		eval '[[ -n $prio && ! $prio =~ [5-7] ]]'
	write_web 1 5
	systemctl reload lbd
	check "the fixed file is taken: no rejection left" wait_until 20 not status_has REJECTED
}

vip2_status() { lbd status 2>&1 | grep -A1 "$VIP2:80"; }

phase_group_file() {
	phase "conf.d file readable only through its group"
	groupadd -r lbdcfg && useradd -r -M -g lbdcfg -s /usr/sbin/nologin lbdcfg
	write_extra
	check "$EXTRA is lbdcfg:lbdcfg 0640" test "$(stat -c '%U:%G %a' "$EXTRA")" = "lbdcfg:lbdcfg 640"
	check "root is not in group lbdcfg" not grep -qw "$(getent group lbdcfg | cut -d: -f3)" <<<"$(id -G root)"
	check "lbd check-config (a root shell) reads it: 2 services" output_has "2 services" lbd check-config
	systemctl reload lbd
	check "the daemon reads it: $VIP2:80 in IPVS" wait_until 20 weight_is $VIP2 10.10.1.2 1
	check "no rejection" not status_has REJECTED
	check "a request to $VIP2 is answered" test "$(get $VIP2)" = rs1
	# fall = 3 checks at 1 s: a failing check shows DOWN by then.
	sleep 5
	check "its exec check (as nobody) passes: up in lbd status" output_has "^ +-> 10\.10\.1\.2:80 .* up " vip2_status
	vip2_status | indent
	printf '        capabilities of lbd: %s\n' "$(grep -E '^Cap(Eff|Bnd)' /proc/"$(prop MainPID)"/status | xargs)"
}

watchdog_ticks() { # SECONDS: distinct WatchdogTimestampMonotonic values seen
	local end=$((SECONDS + $1))
	while ((SECONDS < end)); do
		prop WatchdogTimestampMonotonic
		sleep 0.5
	done | sort -u | grep -vc '^0$'
}

phase_watchdog() {
	phase "watchdog"
	local pid t0 ticks restarts
	pid=$(prop MainPID)
	t0=$(prop WatchdogTimestampMonotonic)
	check "watchdog fed at the shipped 60s (timestamp set: $t0)" test "${t0:-0}" != 0
	# The shipped 60 s would make this phase minutes long: 6 s here, and a
	# short abort so that a hung lbd is killed at once.
	mkdir -p /run/systemd/system/lbd.service.d
	printf '[Service]\nWatchdogSec=6s\nTimeoutAbortSec=3s\n' >/run/systemd/system/lbd.service.d/watchdog.conf
	systemctl daemon-reload
	systemctl restart lbd
	pid=$(prop MainPID)
	restarts=$(prop NRestarts)
	ticks=$(watchdog_ticks 15)
	check "fed over 2.5 x WatchdogSec=6s: timestamp moved $ticks times in 15 s" test "$ticks" -ge 4
	check "same PID and no restart over that time" eval '[[ $(prop MainPID) == "$pid" && $(prop NRestarts) == "$restarts" ]] && active_running'
	# The watchdog bites: a stopped lbd is killed and restarted; the
	# dataplane keeps serving meanwhile.
	under_stream watchdog_bite "$pid" "$restarts"
	check "a stopped lbd is killed by the watchdog and restarted" test "$ACTION_RC" = 0
	journalctl -q -u lbd -o cat | grep -i watchdog | tail -2 | indent
	rm -r /run/systemd/system/lbd.service.d
	systemctl daemon-reload
	systemctl restart lbd
	check "back to the shipped WatchdogSec=60s" test "$(prop WatchdogUSec)" = 1min
}

watchdog_bite() { # PID NRESTARTS
	local old_pid=$1 old_restarts=$2
	systemctl kill --kill-who=main -s SIGSTOP lbd
	wait_until 60 eval '[[ $(prop NRestarts) -gt $old_restarts && $(prop MainPID) != "$old_pid" ]] && active_running' || return 1
	output_has 'Watchdog timeout' journalctl -q -u lbd -o cat
}

restart_lbd() {
	local pid
	pid=$(prop MainPID)
	systemctl restart lbd || return 1
	active_running && [[ $(prop MainPID) != "$pid" ]]
}

upgrade_lbd() {
	local pid
	pid=$(prop MainPID)
	apt-get install -y -q -o Dpkg::Use-Pty=0 "$UP_DEB" </dev/null >>/var/log/systemd-test-apt.log 2>&1 || return 1
	active_running && [[ $(prop MainPID) != "$pid" ]]
}

stream_control() { # the stream must see a deleted virtual server, and lbd repairs it
	stream_start
	wait_until 60 stream_has 10
	ipvsadm -D -t "$VIP:80"
	wait_until 10 eval '(($(stream_failed) > 0))'
	wait_until 30 weight_is $VIP 10.10.2.2 5
	local repaired=$?
	stream_stop
	check "control: the stream sees a deleted virtual server ($(stream_failed) failed), and lbd repairs it" \
		eval '(($(stream_failed) > 0 && repaired == 0))'
}

phase_restart_upgrade() {
	phase "restart under a request stream"
	stream_control
	under_stream restart_lbd
	check "systemctl restart lbd: active (running) with a new PID" test "$ACTION_RC" = 0
	check "NRestarts=0 (systemd never had to restart it)" test "$(prop NRestarts)" = 0

	phase "package upgrade under a request stream"
	under_stream upgrade_lbd
	check "apt-get install lbd $UP_VERSION: postinst restarted the unit (new PID, active)" test "$ACTION_RC" = 0
	check "installed: $UP_VERSION" test "$(dpkg-query -W -f='${Version}' lbd)" = "$UP_VERSION"
	check "the running lbd is $UP_VERSION" test "$(lbd version)" = "lbd $UP_VERSION"
	check "the upgrade kept the admin's lbd.toml" grep -q '^sync_period = "5s"$' /etc/lbd/lbd.toml
	check "IPVS unchanged: rs2 weight 5, $VIP2 there" eval 'weight_is $VIP 10.10.2.2 5 && weight_is $VIP2 10.10.1.2 1'
}

phase_invalid_start() {
	phase "invalid configuration at start"
	systemctl stop lbd
	write_web 1 70000
	check "systemctl start lbd with an invalid configuration succeeds" systemctl start lbd
	check "active (running)" active_running
	check "status text: $(prop StatusText)" grep -q '^invalid configuration, nothing applied: ' <<<"$(prop StatusText)"
	check "systemctl status lbd shows it" output_has 'Status: "invalid configuration' systemctl status lbd --no-pager
	systemctl status lbd --no-pager 2>&1 | grep 'Status:' | cut -c1-160 | indent
	check "the kernel is left as it was: rs2 weight 5" weight_is $VIP 10.10.2.2 5
	write_web 1 7
	check "the first valid edit is applied: rs2 weight 7" wait_until 30 weight_is $VIP 10.10.2.2 7
	check "status text now: $(wait_until 10 eval '[[ $(prop StatusText) == [0-9]* ]]'; prop StatusText)" \
		grep -q '^2 virtual servers' <<<"$(prop StatusText)"
	check "NRestarts=0" test "$(prop NRestarts)" = 0
}

sighups() { journalctl -q -u lbd -o cat | grep -c 'SIGHUP: re-reading'; }

# The drop-in of the log-only pass, and the control's comm.
readonly SECCOMP_LOG='[Service]\nSystemCallFilter=\nSystemCallLog=~@system-service\n'
seccomp_records() { journalctl -q -o cat --no-pager | grep -E 'type=1326|type=SECCOMP' | grep -v 'comm="umount"'; }

phase_seccomp() {
	phase "seccomp"
	# The unit's filter answers EPERM without a trace. A control first: with
	# the log-only settings used below, a syscall outside @system-service
	# (umount2) must reach the journal (audit=1 on the kernel command line).
	# (systemd-run needs D-Bus, which minbase lacks: a unit file instead.)
	# busybox's umount calls umount2 whether or not the path is mounted.
	mkdir -p /run/seccomp-control
	ln -sf "$BB" /run/seccomp-control/umount
	printf "[Unit]\nDescription=seccomp log control\n$SECCOMP_LOG"'Type=oneshot\nExecStart=-/run/seccomp-control/umount /nonexistent\n' \
		>/run/systemd/system/seccomp-control.service
	systemctl daemon-reload
	systemctl start seccomp-control.service
	check "control: umount(2) under the log-only filter shows up in the journal" \
		wait_until 10 output_has '(type=1326|type=SECCOMP).*comm="umount"' journalctl -q -o cat
	check "no seccomp record so far (shipped filter)" test -z "$(seccomp_records)"
	# Then lbd with a log-only filter: every syscall the shipped filter
	# would deny is logged instead, while lbd works through start, syncs,
	# health checks, reloads (good and bad), status, drift repair and stop.
	mkdir -p /run/systemd/system/lbd.service.d
	printf "$SECCOMP_LOG" >/run/systemd/system/lbd.service.d/seccomp-log.conf
	systemctl daemon-reload
	systemctl restart lbd
	write_web 2 7
	systemctl reload lbd
	wait_until 20 weight_is $VIP 10.10.1.2 2
	write_web 2 70000
	systemctl reload lbd
	wait_until 20 status_has REJECTED
	write_web 1 5
	systemctl reload lbd
	ipvsadm -D -t "$VIP2:80"
	check "drift repaired under the log-only filter: $VIP2:80 back" wait_until 30 weight_is $VIP2 10.10.1.2 1
	check "reloads applied under the log-only filter" wait_until 20 weight_is $VIP 10.10.2.2 5
	lbd status >/dev/null
	systemctl stop lbd
	local recs
	recs=$(seccomp_records)
	check "no syscall outside @system-service (start, syncs, checks, reloads, status, stop)" test -z "$recs"
	printf '%s\n' "$recs" | sed '/^$/d' | sort | uniq -c | sort -rn | head -10 | indent
	rm -r /run/systemd/system/lbd.service.d
	systemctl daemon-reload
	check "restarted with the shipped filter" systemctl start lbd
}

phase_journal() {
	phase "journal"
	local n
	n=$(journalctl -q -u lbd -o cat | grep -ci seccomp)
	check "journalctl -u lbd: $n lines mention seccomp" test "$n" = 0
	n=$(journalctl -q -k -o cat | grep -E 'type=1326|type=SECCOMP' | grep -vc 'comm="umount"')
	check "journalctl -k: $n seccomp records besides the control" test "$n" = 0
	printf '        lbd journal: %s lines, %s at level=ERROR, %s at level=WARN\n' \
		"$(journalctl -q -u lbd -o cat | wc -l)" "$(journalctl -q -u lbd -o cat | grep -c 'level=ERROR')" \
		"$(journalctl -q -u lbd -o cat | grep -c 'level=WARN')"
}

# ---------------------------------------------------------------------------
# A failover pair: the packaged lbd (box A, under systemd) and a second lbd
# in the namespace "peer" (box B), joined by a veth; VRRP moves 10.10.9.10.
# ---------------------------------------------------------------------------
PAIR_ADDR=10.10.9.10
PEER_STATE=/run/lbd-peer
vrrp_table() { # PRIORITY
	printf '\n[[vrrp]]\nname = "pair"\ninterface = "%s"\nvirtual_router_id = 51\npriority = %s\nadvert_interval = "200ms"\naddresses = ["%s/24"]\n' \
		"$1" "$2" "$PAIR_ADDR"
}
# The VRRP line of box A (a) or B (b) in lbd status: "vrrp pair on IF
# IPv4, VRID 51, version 3, priority P: STATE for T, N transitions".
vrrp_line() { # a|b
	local sock=/run/lbd/lbd.sock
	[[ $1 == a ]] || sock=$PEER_STATE/lbd.sock
	lbd status --socket "$sock" 2>/dev/null | grep '^vrrp pair '
}
vrrp_state() { vrrp_line "$1" | sed -n 's/.*: \([A-Z]*\) for .*/\1/p'; }
roles_are() { [[ $(vrrp_state a) == "$1" && $(vrrp_state b) == "$2" ]]; }
holds() { # a|b: the box holds the pair's address
	if [[ $1 == a ]]; then ip -o addr show dev pairA | grep -q " $PAIR_ADDR/"; else ip -n peer -o addr show dev eth0 | grep -q " $PAIR_ADDR/"; fi
}
one_holds() { # a|b: that box holds the address and the other does not
	local other=b
	[[ $1 == a ]] || other=a
	holds "$1" && ! holds "$other"
}
transitions() { vrrp_line "$1" | sed -n 's/.*, \([0-9]*\) transitions$/\1/p'; }

conntrackd_table() { # INTERFACE PEER
	printf '\n[ha.conntrackd]\ninterface = "%s"\npeer = "%s"\nsnat_address = ["%s"]\n' "$1" "$2" "$PAIR_ADDR"
}
# lbd_conntrackd_in_unit: the conntrackd lbd runs is in lbd.service's
# cgroup (the unit's sandbox) and lbd status says it runs.
lbd_conntrackd_in_unit() {
	local pid
	pid=$(pgrep -f '^/usr/sbin/conntrackd -C /run/lbd/conntrackd/conntrackd.conf$') || return 1
	grep -q '/lbd.service$' "/proc/$pid/cgroup" && status_has '^  running, pid '"$pid"
}

phase_pair() {
	phase "a failover pair: restart and upgrade of the master under systemd"
	ip netns add peer
	ip link add pairA type veth peer name eth0 netns peer
	ip addr add 10.10.9.1/24 dev pairA
	ip link set pairA up
	ip -n peer addr add 10.10.9.2/24 dev eth0
	ip -n peer link set eth0 up
	ip -n peer link set lo up
	mkdir -p /etc/lbd-peer "$PEER_STATE"
	printf '[status]\nsocket = "%s/lbd.sock"\nmetrics_listen = ""\n' "$PEER_STATE" >/etc/lbd-peer/lbd.toml
	vrrp_table eth0 100 >>/etc/lbd-peer/lbd.toml
	vrrp_table pairA 150 >>/etc/lbd/lbd.toml
	# conntrackd (Debian's, whose own service also runs here, untouched)
	# replicates NAT state between the boxes; lbd runs it as its child.
	conntrackd_table eth0 10.10.9.1 >>/etc/lbd-peer/lbd.toml
	conntrackd_table pairA 10.10.9.2 >>/etc/lbd/lbd.toml
	check "lbd check-config with [[vrrp]]" quiet lbd check-config
	check "systemctl restart lbd (box A, priority 150)" systemctl restart lbd
	ip netns exec peer lbd run -c /etc/lbd-peer/lbd.toml --state-dir "$PEER_STATE" >/run/lbd-peer.log 2>&1 &
	local peer_pid=$!
	check "A MASTER, B BACKUP" wait_until 30 roles_are MASTER BACKUP
	check "only A holds $PAIR_ADDR" one_holds a
	check "$PAIR_ADDR answers B (it is on A)" quiet ip netns exec peer "$BB" ping -c 1 -W 2 "$PAIR_ADDR"
	check "A's conntrackd runs under lbd's unit" wait_until 15 lbd_conntrackd_in_unit
	check "A's conntrackd took the lead (commit, then -f -R -B)" wait_until 15 status_has 'last transition: lead .* ok'
	check "B's conntrackd asked A for its entries (a new backup)" wait_until 15 output_has 'resync requested' cat /run/lbd-peer.log

	# systemctl restart of the master: priority 0, B takes over, A comes
	# back as backup; with preempt off, no second move.
	check "systemctl restart lbd (the master)" systemctl restart lbd
	check "after the restart: A BACKUP, B MASTER" wait_until 30 roles_are BACKUP MASTER
	check "only B holds $PAIR_ADDR (no split brain)" one_holds b
	check "A's journal: the peer took over before A gave the address up" \
		output_has 'the peer took over; giving the addresses up' journalctl -q -u lbd -o cat
	check "B committed A's entries before binding" output_has 'Committed [0-9]+ new entries' cat /run/lbd-peer.log
	check "A's new conntrackd asked B for its entries" wait_until 15 status_has 'last transition: follow .* ok'
	local before
	before=$(transitions b)

	# A package upgrade of the (now backup) box: it restarts as backup, the
	# master is left alone.
	check "apt-get install --reinstall (postinst restarts A)" \
		quiet apt-get install -y -q --reinstall -o Dpkg::Use-Pty=0 "$UP_DEB" </dev/null
	check "after the upgrade: A BACKUP, B MASTER" wait_until 30 roles_are BACKUP MASTER
	check "B did not move (transitions $before -> $(transitions b))" test "$(transitions b)" = "$before"
	check "only B holds $PAIR_ADDR" one_holds b

	# Stopping B (the master): A takes over.
	kill "$peer_pid"
	wait "$peer_pid" 2>/dev/null
	check "B stopped: A MASTER, holding $PAIR_ADDR" wait_until 30 eval '[[ $(vrrp_state a) == MASTER ]] && holds a && ! holds b'
}

main() {
	echo "lbd-systemd-test: driver started at guest uptime $(cut -d' ' -f1 /proc/uptime)s"
	phase_boot
	if phase_install; then
		phase_network
		phase_start
		phase_reload
		phase_group_file
		phase_watchdog
		phase_restart_upgrade
		phase_invalid_start
		phase_seccomp
		phase_journal
		phase_pair
	fi
	phase ""
	if ((failures)); then
		echo "== lbd's journal (last 60 lines)"
		journalctl -q -u lbd -o short-monotonic --no-pager | tail -60 | indent
	fi
	local rc=0
	((failures == 0)) || rc=1
	echo "lbd-systemd-test: result $NONCE rc=$rc passed=$passes failed=$failures"
	sync
}

main
