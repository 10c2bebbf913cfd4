# netns.sh - a network of namespaces for tests and benches: nodes joined
# through a router namespace by veth pairs, an added round trip (a delay
# line, delayline.py, since this kernel has no netem), a bandwidth cap
# (tbf), commands run in a node, and a teardown that leaves nothing, even
# when the owner is killed with SIGKILL.  Needs root, iproute2 and nsenter.
#
# Sourced by a bash test (after lib.sh's t_begin, whose EXIT trap it runs
# after its own):
#
#   source "$HERE/netns.sh"
#   netns_check || { echo "skip NAME: $NETNS_WHY"; exit 0; }
#   netns_begin                     # state dir, watchdog, EXIT trap
#   netns_router r                  # the router: forwards between nodes
#   S=$(netns_attach r s)           # node "s", its address (10.201.N.2)
#   C=$(netns_attach r c)
#   netns_delay r c 25              # 25 ms added to every round trip of c
#   netns_rate r c 1gbit            # and c's link capped at 1 Gbit/s
#   netns_spawn s "$T_DIR/srv.log" my-server --bind 0.0.0.0   # NETNS_PID
#   netns_exec c curl "http://$S:8080/"
#   netns_track_mount "$T_DIR"      # unmount whatever is mounted under it
#
# or run as a command, with the state dir in NETNS_STATE (what bench.py
# does): `bash netns.sh begin --owner PID` prints NETNS_STATE=... and
# NETNS_ID=...; then `bash netns.sh router r`, `attach r s`, `delay r c
# 25`, `rate r c 1gbit`, `exec c CMD...`, `path c` (the namespace's file
# for nsenter --net=), `track-mount DIR`, `track-dir DIR`, `cleanup`.
#
# Names: every namespace is "bfs<owner pid>-<role>" (ip netns list shows
# them); interfaces live only inside our namespaces (the router's end of
# node N's link is "v-<role>", the node's end "eth0"), so nothing is added
# to the machine's own namespace and no address can clash with its
# networks or another harness's.  Link N is 10.201.N.0/24: the router .1,
# the node .2, the node's default route through the router.  Every node
# has lo up.  Processes run with `nsenter --net`: in the node's network
# namespace but the machine's mount namespace, so a FUSE mount made in a
# node is seen (and unmounted) from outside.
#
# Teardown (netns_cleanup; the EXIT trap, or bench.py's `cleanup`, and a
# watchdog process that does the same once the owner is gone, whatever
# killed it): unmount what is tracked (fusermount3 -u, then umount -l),
# SIGTERM then SIGKILL every process inside our namespaces (ip netns pids:
# only processes in namespaces we made), unmount again, delete the
# namespaces (their veths and the delay line's tun go with them), then
# remove the tracked dirs when nothing is mounted under them.  Every wait
# has a deadline.

NETNS_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
NETNS_PY=${PYTHON:-python3}

# netns_check: 0 when namespaces can be made here; else 1 with the reason
# in NETNS_WHY.
netns_check() {
	NETNS_WHY=
	if [ "$(id -u)" != 0 ]; then
		NETNS_WHY="network namespaces need root"
	elif ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
		NETNS_WHY="no ip (iproute2) or nsenter (util-linux)"
	else
		local probe="bfsprobe$$"
		if ! ip netns add "$probe" 2>/dev/null; then
			NETNS_WHY="ip netns add failed (no network namespaces in this kernel or container)"
		elif ! ip link add v0 netns "$probe" type veth peer name v1 netns "$probe" 2>/dev/null; then
			NETNS_WHY="no veth pairs in this kernel"
		fi
		ip netns del "$probe" 2>/dev/null
	fi
	[ -z "$NETNS_WHY" ]
}

# netns_check_delay: 0 when the delay line can run (a tun device and
# Python); else 1 with NETNS_WHY.
netns_check_delay() {
	NETNS_WHY=
	if [ ! -c /dev/net/tun ]; then
		NETNS_WHY="no /dev/net/tun for the delay line"
	elif ! command -v "$NETNS_PY" >/dev/null; then
		NETNS_WHY="no $NETNS_PY for the delay line"
	fi
	[ -z "$NETNS_WHY" ]
}

netns__starttime() { # PID: its start time (field 22 of /proc/PID/stat)
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	set -- $s
	echo "${20}"
}

netns__alive() { # PID STARTTIME: that process still runs (not a zombie)
	local st
	st=$(netns__starttime "$1") || return 1
	[ "$st" = "$2" ] || return 1
	! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

netns__load() { # the state of NETNS_STATE into NETNS_ID
	[ -n "${NETNS_STATE:-}" ] && [ -f "$NETNS_STATE/id" ] || {
		echo "netns.sh: no harness state (NETNS_STATE unset or gone)" >&2
		return 1
	}
	NETNS_ID=$(cat "$NETNS_STATE/id")
}

netns_name() { # ROLE: the namespace's name
	echo "$NETNS_ID-$1"
}

netns_path() { # ROLE: the file that nsenter --net= takes
	echo "/run/netns/$NETNS_ID-$1"
}

# netns_begin [OWNER_PID]: a state dir (NETNS_STATE), the names'
# prefix (NETNS_ID), and a watchdog that cleans up once OWNER_PID (the
# calling shell by default) is gone.  Sourced, it also puts netns_cleanup
# in front of the EXIT trap, and makes INT, TERM and HUP exit through it.
netns_begin() {
	local owner=${1:-$$} st prev
	st=$(netns__starttime "$owner") || { echo "netns.sh: no process $owner" >&2; return 1; }
	NETNS_ID="bfs$owner"
	NETNS_STATE=$(mktemp -d /tmp/batchfs-netns.XXXXXX) || return 1
	export NETNS_STATE NETNS_ID
	echo "$NETNS_ID" >"$NETNS_STATE/id"
	echo "$owner $st" >"$NETNS_STATE/owner"
	echo 0 >"$NETNS_STATE/nlinks"
	: >"$NETNS_STATE/ns"
	: >"$NETNS_STATE/links"
	: >"$NETNS_STATE/mounts"
	: >"$NETNS_STATE/dirs"
	# The watchdog: its own session, so that a Ctrl-C or a kill of the
	# owner's process group leaves it to clean up.
	setsid bash -c 'trap "" INT HUP; source "$1"; netns__watch "$2" "$3" "$4"' \
		netns-watchdog "$NETNS_LIB" "$NETNS_STATE" "$owner" "$st" \
		</dev/null >/dev/null 2>&1 &
	echo $! >"$NETNS_STATE/watchdog"
	if [ "${NETNS_CLI:-0}" != 1 ]; then
		prev=$(trap -p EXIT)
		if [ -n "$prev" ]; then
			eval "set -- $prev"
			# shellcheck disable=SC2064  # the trap before ours, kept as it is now
			trap "netns_cleanup; $3" EXIT
		else
			trap netns_cleanup EXIT
		fi
		[ -n "$(trap -p INT)" ] || trap 'exit 130' INT
		[ -n "$(trap -p TERM)" ] || trap 'exit 143' TERM
		[ -n "$(trap -p HUP)" ] || trap 'exit 129' HUP
	fi
}

netns__watch() { # STATE OWNER STARTTIME: clean up once the owner is gone
	local state=$1 owner=$2 st=$3
	while [ -d "$state" ] && netns__alive "$owner" "$st"; do
		sleep 0.5
	done
	[ -d "$state" ] || return 0
	NETNS_STATE=$state netns_cleanup
}

netns__add_ns() { # ROLE: a namespace with lo up
	local name
	name=$(netns_name "$1")
	ip netns add "$name" || return 1
	echo "$name" >>"$NETNS_STATE/ns"
	ip -n "$name" link set lo up
}

# netns_router ROLE: a namespace that forwards between the nodes attached
# to it.
netns_router() {
	netns__load || return 1
	netns__add_ns "$1" || return 1
	local n
	n=$(netns_name "$1")
	ip netns exec "$n" sysctl -q -w net.ipv4.ip_forward=1 \
		net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 >/dev/null
}

# netns_attach ROUTER ROLE: a node namespace ROLE (made here), linked to
# ROUTER by a veth pair; prints the node's address.
netns_attach() {
	netns__load || return 1
	local r=$1 role=$2 idx rn nn rif=v-$2
	rn=$(netns_name "$r")
	netns__add_ns "$role" || return 1
	nn=$(netns_name "$role")
	idx=$(($(cat "$NETNS_STATE/nlinks") + 1))
	[ "$idx" -le 250 ] || { echo "netns.sh: too many links" >&2; return 1; }
	echo "$idx" >"$NETNS_STATE/nlinks"
	ip link add "$rif" netns "$rn" type veth peer name eth0 netns "$nn" || return 1
	ip -n "$rn" addr add "10.201.$idx.1/24" dev "$rif"
	ip -n "$nn" addr add "10.201.$idx.2/24" dev eth0
	ip -n "$rn" link set "$rif" up
	ip -n "$nn" link set eth0 up
	ip -n "$nn" route add default via "10.201.$idx.1"
	echo "$role $r $idx 10.201.$idx.0/24 $rif" >>"$NETNS_STATE/links"
	# a link attached after the delay line started goes through it too
	[ -f "$NETNS_STATE/delay-$r.pid" ] &&
		ip -n "$rn" rule add iif "$rif" lookup 201 pref 1000
	echo "10.201.$idx.2"
}

netns__link() { # ROUTER ROLE: "idx subnet rif" of ROLE's link
	local l
	l=$(awk -v r="$1" -v n="$2" '$1 == n && $2 == r { print $3, $4, $5 }' "$NETNS_STATE/links")
	[ -n "$l" ] || { echo "netns.sh: $2 is not attached to $1" >&2; return 1; }
	echo "$l"
}

# netns_exec ROLE CMD...: run CMD in ROLE's network namespace (the
# machine's mount namespace, so mounts made there are seen outside).
netns_exec() {
	netns__load || return 1
	local p
	p=$(netns_path "$1")
	shift
	nsenter --net="$p" -- "$@"
}

# netns_spawn ROLE LOG CMD...: CMD in the background in ROLE, its output
# to LOG; NETNS_PID is its pid.  netns_cleanup ends it (and anything else
# in our namespaces).
netns_spawn() {
	netns__load || return 1
	local p log=$2
	p=$(netns_path "$1")
	shift 2
	nsenter --net="$p" -- "$@" >"$log" 2>&1 </dev/null &
	# shellcheck disable=SC2034  # for the caller
	NETNS_PID=$!
}

# netns_delay ROUTER ROLE RTT_MS: every round trip to or from ROLE takes
# RTT_MS more (its packets wait RTT_MS/2 in each direction on the router;
# two delayed nodes add both).  0 takes the delay away.  The first call
# starts the delay line on ROUTER and sends every attached link through it.
netns_delay() {
	netns__load || return 1
	local r=$1 role=$2 rtt=$3 l idx subnet rif rn conf pidf i
	l=$(netns__link "$r" "$role") || return 1
	set -- $l
	idx=$1 subnet=$2 rif=$3
	rn=$(netns_name "$r")
	conf=$NETNS_STATE/delay-$r.conf
	pidf=$NETNS_STATE/delay-$r.pid
	local gen=$(($(cat "$NETNS_STATE/delay-$r.gen" 2>/dev/null || echo 0) + 1))
	echo "$gen" >"$NETNS_STATE/delay-$r.gen"
	touch "$conf"
	{
		echo "# generation $gen"
		grep -v "^$subnet \|^# generation " "$conf"
		echo "$subnet $($NETNS_PY -c 'import sys; print(float(sys.argv[1]) / 2)' "$rtt")"
	} >"$conf.new"
	mv "$conf.new" "$conf"
	if [ -f "$pidf" ]; then
		# the new delays hold once the delay line says it read them
		kill -HUP "$(cat "$pidf")" || return 1
		for i in $(seq 1 100); do
			[ "$(cat "$NETNS_STATE/delay-$r.ready.gen" 2>/dev/null)" = "$gen" ] && return 0
			sleep 0.05
		done
		echo "netns.sh: the delay line did not take the new delay" >&2
		return 1
	fi
	netns_check_delay || { echo "netns.sh: $NETNS_WHY" >&2; return 1; }
	rm -f "$NETNS_STATE/delay-$r.ready"
	# A little ahead of the work it delays (SCHED_FIFO when allowed), so
	# that a busy machine adds as little as it can to the delay it keeps.
	local pre=()
	chrt -f 10 true 2>/dev/null && pre=(chrt -f 10)
	nsenter --net="$(netns_path "$r")" -- "${pre[@]}" "$NETNS_PY" \
		"$(dirname "$NETNS_LIB")/delayline.py" dl0 "$conf" \
		"$NETNS_STATE/delay-$r.ready" "$NETNS_STATE/delay-$r.stats" \
		>"$NETNS_STATE/delay-$r.log" 2>&1 </dev/null &
	for i in $(seq 1 100); do
		[ -s "$NETNS_STATE/delay-$r.ready" ] && break
		kill -0 $! 2>/dev/null || break
		sleep 0.1
	done
	[ -s "$NETNS_STATE/delay-$r.ready" ] || {
		echo "netns.sh: the delay line did not start: $(tail -3 "$NETNS_STATE/delay-$r.log")" >&2
		return 1
	}
	cat "$NETNS_STATE/delay-$r.ready" >"$pidf"
	ip -n "$rn" link set dl0 up || return 1
	ip netns exec "$rn" sysctl -q -w net.ipv4.conf.dl0.rp_filter=0 >/dev/null
	ip -n "$rn" route add default dev dl0 table 201 || return 1
	# Packets that come in from a node's link go into the delay line;
	# those it writes back come in on dl0 and take the main table.
	awk -v r="$r" '$2 == r { print $5 }' "$NETNS_STATE/links" | while read -r i; do
		ip -n "$rn" rule add iif "$i" lookup 201 pref 1000
	done
}

# netns_delay_stats ROUTER: the delay line's counters (one JSON line).
netns_delay_stats() {
	netns__load || return 1
	local f=$NETNS_STATE/delay-$1.stats i
	[ -f "$NETNS_STATE/delay-$1.pid" ] || { echo '{}'; return 0; }
	rm -f "$f"
	kill -USR1 "$(cat "$NETNS_STATE/delay-$1.pid")" 2>/dev/null
	for i in $(seq 1 50); do
		[ -s "$f" ] && break
		sleep 0.05
	done
	cat "$f" 2>/dev/null || echo '{}'
}

# netns_rate ROUTER ROLE RATE: cap ROLE's link at RATE (tc's units:
# 1gbit, 500mbit) each way, with tbf; "off" takes the cap away.
netns_rate() {
	netns__load || return 1
	local r=$1 role=$2 rate=$3 l rif bytes burst
	l=$(netns__link "$r" "$role") || return 1
	set -- $l
	rif=$3
	if [ "$rate" = off ]; then
		ip -n "$(netns_name "$r")" link show "$rif" >/dev/null 2>&1 &&
			tc -n "$(netns_name "$r")" qdisc del dev "$rif" root 2>/dev/null
		tc -n "$(netns_name "$role")" qdisc del dev eth0 root 2>/dev/null
		return 0
	fi
	# A burst of 5 ms at that rate (64 KiB at least, a TSO packet), and
	# a queue of 50 ms before tbf drops.
	bytes=$($NETNS_PY -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
if not m:
    sys.exit(1)
print(int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8))' "$rate") ||
		{ echo "netns.sh: a rate is N[kmg]bit, not $rate" >&2; return 1; }
	burst=$((bytes / 200))
	[ "$burst" -ge 65536 ] || burst=65536
	tc -n "$(netns_name "$r")" qdisc replace dev "$rif" root tbf rate "$rate" \
		burst "$burst" latency 50ms || return 1
	tc -n "$(netns_name "$role")" qdisc replace dev eth0 root tbf rate "$rate" \
		burst "$burst" latency 50ms
}

# netns_track_mount DIR: at teardown, unmount DIR and every mount under it.
netns_track_mount() {
	netns__load || return 1
	echo "$(cd "$1" && pwd)" >>"$NETNS_STATE/mounts"
}

# netns_track_dir DIR: at teardown, once nothing is mounted under it,
# remove DIR.
netns_track_dir() {
	netns__load || return 1
	echo "$(cd "$1" && pwd)" >>"$NETNS_STATE/dirs"
}

netns__mounts_under() { # DIR: mount points at or under DIR, deepest first
	awk -v d="$1" '{ m = $5; gsub(/\\040/, " ", m)
		if (m == d || index(m, d "/") == 1) print length(m), m }' /proc/self/mountinfo |
		sort -rn | cut -d' ' -f2-
}

netns__unmount_tracked() { # LAZY: 1 to detach what will not go
	local d m
	while read -r d; do
		[ -n "$d" ] || continue
		netns__mounts_under "$d" | while read -r m; do
			timeout 20 fusermount3 -u "$m" 2>/dev/null ||
				{ [ "$1" = 1 ] && timeout 20 umount -l "$m" 2>/dev/null; }
		done
	done <"$NETNS_STATE/mounts"
}

# netns_cleanup: tear down everything this harness made (idempotent; safe
# to run from a trap, and from the watchdog at the same time: it locks).
netns_cleanup() {
	[ -n "${NETNS_STATE:-}" ] && [ -d "$NETNS_STATE" ] || return 0
	(
		flock -w 120 9 || exit 0
		[ -f "$NETNS_STATE/id" ] || exit 0
		local n p pids i d
		netns__unmount_tracked 0
		for n in $(cat "$NETNS_STATE/ns"); do
			pids=$(ip netns pids "$n" 2>/dev/null)
			[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
		done
		for i in $(seq 1 50); do
			pids=
			for n in $(cat "$NETNS_STATE/ns"); do
				pids="$pids$(ip netns pids "$n" 2>/dev/null)"
			done
			[ -z "$pids" ] && break
			sleep 0.1
		done
		for n in $(cat "$NETNS_STATE/ns"); do
			pids=$(ip netns pids "$n" 2>/dev/null)
			[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
		done
		for i in $(seq 1 50); do
			pids=
			for n in $(cat "$NETNS_STATE/ns"); do
				pids="$pids$(ip netns pids "$n" 2>/dev/null)"
			done
			[ -z "$pids" ] && break
			sleep 0.1
		done
		netns__unmount_tracked 1
		for n in $(cat "$NETNS_STATE/ns"); do
			ip netns del "$n" 2>/dev/null
		done
		while read -r d; do
			[ -n "$d" ] && [ -d "$d" ] || continue
			if [ -z "$(netns__mounts_under "$d")" ]; then
				rm -rf "$d"
			fi
		done <"$NETNS_STATE/dirs"
		rm -f "$NETNS_STATE"/*
	) 9>>"$NETNS_STATE/lock"
	rm -f "$NETNS_STATE/lock"
	rmdir "$NETNS_STATE" 2>/dev/null
	return 0
}

# ---- run as a command --------------------------------------------------------

netns__main() {
	local cmd=${1:-}
	[ $# -gt 0 ] && shift
	NETNS_CLI=1
	case $cmd in
	check) netns_check || { echo "$NETNS_WHY"; return 1; } ;;
	check-delay) netns_check_delay || { echo "$NETNS_WHY"; return 1; } ;;
	begin)
		local owner=$PPID
		[ "${1:-}" = --owner ] && owner=$2
		netns_begin "$owner" || return 1
		echo "NETNS_STATE=$NETNS_STATE"
		echo "NETNS_ID=$NETNS_ID"
		;;
	router) netns_router "$@" ;;
	attach) netns_attach "$@" ;;
	delay) netns_delay "$@" ;;
	delay-stats) netns_delay_stats "$@" ;;
	rate) netns_rate "$@" ;;
	exec) netns_exec "$@" ;;
	path) netns__load && netns_path "$1" ;;
	track-mount) netns_track_mount "$@" ;;
	track-dir) netns_track_dir "$@" ;;
	cleanup) netns_cleanup ;;
	*)
		echo "usage: netns.sh check|check-delay|begin [--owner PID]|router R|attach R ROLE|delay R ROLE RTT_MS|delay-stats R|rate R ROLE RATE|exec ROLE CMD...|path ROLE|track-mount DIR|track-dir DIR|cleanup" >&2
		return 2
		;;
	esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	netns__main "$@"
	exit $?
fi
