# netns.sh - a small cluster of network namespaces for tests and benches:
# node namespaces joined through a router namespace by veth pairs,
# commands run in a node, and a teardown that leaves nothing behind, even
# when the test is killed (SIGKILL of its whole process group included).
# Needs root, iproute2 and nsenter.
#
# The interface is the bench harness's (the bench branch's netns.sh, which
# adds a delay line and rate caps): the two files are meant to become one.
# Source it after lib.sh's t_begin:
#
#   source "$HERE/netns.sh"
#   netns_check || { echo "skip NAME: $NETNS_WHY"; exit 0; }
#   netns_begin                     # state dir, watchdog, EXIT trap
#   netns_router r                  # the router: forwards between nodes
#   S=$(netns_attach r s)           # node "s", its address (10.201.N.2)
#   netns_spawn s "$T_DIR/srv.log" my-server --bind "$S"   # NETNS_PID
#   netns_exec s curl "http://$S:8080/"
#   netns_track_mount "$T_DIR"      # unmount whatever is mounted under it
#   netns_track_dir "$T_DIR"        # and remove it, once nothing is
#
# Names: every namespace is "bfs<owner pid>-<role>" (ip netns list shows
# them), and the state dir (/tmp/batchfs-netns.XXXXXX) lists each one made,
# so a cleanup removes exactly what this run made.  Interfaces live only
# inside our namespaces (the router's end of node N's link is "v-<role>",
# the node's end "eth0"), so nothing is added to the machine's own
# namespace and no address can clash with its networks.  Link N is
# 10.201.N.0/24: the router .1, the node .2, the node's default route
# through the router.  Every node has lo up.  Processes run with
# `nsenter --net`: in the node's network namespace but the machine's mount
# namespace, so a FUSE mount made in a node is seen (and unmounted) from
# outside.
#
# Teardown (netns_cleanup: the EXIT trap, and a watchdog in a session of
# its own that does the same once the owner is gone, whatever killed it):
# unmount what is tracked, SIGTERM then SIGKILL every process inside our
# namespaces (`ip netns pids`: only processes in namespaces we made),
# unmount again (lazily if need be), delete the namespaces (their veths go
# with them), then remove the tracked dirs once nothing is mounted under
# them.  Every wait has a deadline.

NETNS_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

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

netns__starttime() { # PID: its start time (field 22 of /proc/PID/stat)
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	set -- $s
	echo "${20}"
}

netns__alive() { # PID STARTTIME: that very process still runs (not a zombie)
	local st
	st=$(netns__starttime "$1") || return 1
	[ "$st" = "$2" ] || return 1
	! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

netns__load() {
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

# netns_begin [OWNER_PID]: the state dir (NETNS_STATE), the names' prefix
# (NETNS_ID), and a watchdog that cleans up once OWNER_PID (the calling
# shell by default) is gone.  It puts netns_cleanup in front of the EXIT
# trap, and makes INT, TERM and HUP exit through it.
netns_begin() {
	local owner=${1:-$$} st prev
	st=$(netns__starttime "$owner") || { echo "netns.sh: no process $owner" >&2; return 1; }
	NETNS_ID="bfs$owner"
	NETNS_STATE=$(mktemp -d /tmp/batchfs-netns.XXXXXX) || return 1
	export NETNS_STATE NETNS_ID
	echo "$NETNS_ID" >"$NETNS_STATE/id"
	echo 0 >"$NETNS_STATE/nlinks"
	: >"$NETNS_STATE/ns"
	: >"$NETNS_STATE/links"
	: >"$NETNS_STATE/mounts"
	: >"$NETNS_STATE/dirs"
	# Its own session: a Ctrl-C or a kill of the owner's process group
	# leaves it to clean up.
	setsid bash -c 'trap "" INT HUP; source "$1"; netns__watch "$2" "$3" "$4"' \
		netns-watchdog "$NETNS_LIB" "$NETNS_STATE" "$owner" "$st" \
		</dev/null >/dev/null 2>&1 &
	prev=$(trap -p EXIT)
	if [ -n "$prev" ]; then
		eval "set -- $prev"
		trap "netns_cleanup; $3" EXIT
	else
		trap netns_cleanup EXIT
	fi
	[ -n "$(trap -p INT)" ] || trap 'exit 130' INT
	[ -n "$(trap -p TERM)" ] || trap 'exit 143' TERM
	[ -n "$(trap -p HUP)" ] || trap 'exit 129' HUP
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
	ip netns exec "$(netns_name "$1")" sysctl -q -w net.ipv4.ip_forward=1 \
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
	ip -n "$rn" addr add "10.201.$idx.1/24" dev "$rif" &&
		ip -n "$nn" addr add "10.201.$idx.2/24" dev eth0 &&
		ip -n "$rn" link set "$rif" up &&
		ip -n "$nn" link set eth0 up &&
		ip -n "$nn" route add default via "10.201.$idx.1" || return 1
	echo "$role $r $idx 10.201.$idx.0/24 $rif" >>"$NETNS_STATE/links"
	echo "10.201.$idx.2"
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
	NETNS_PID=$!
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

netns__pids() { # the processes in our namespaces
	local n
	for n in $(cat "$NETNS_STATE/ns"); do
		ip netns pids "$n" 2>/dev/null
	done
}

netns__signal_all() { # SIG: signal every process in our namespaces, and
	# wait (5 s at most) until none is left
	local pids i
	pids=$(netns__pids)
	[ -n "$pids" ] && kill -"$1" $pids 2>/dev/null
	for i in $(seq 1 50); do
		[ -z "$(netns__pids)" ] && return 0
		sleep 0.1
	done
	return 1
}

# netns_cleanup: tear down everything this harness made (idempotent; safe
# to run from a trap and from the watchdog at once: it locks).
netns_cleanup() {
	[ -n "${NETNS_STATE:-}" ] && [ -d "$NETNS_STATE" ] || return 0
	(
		flock -w 120 9 || exit 0
		[ -f "$NETNS_STATE/id" ] || exit 0
		local n d
		netns__unmount_tracked 0
		netns__signal_all TERM || netns__signal_all KILL
		netns__unmount_tracked 1
		for n in $(cat "$NETNS_STATE/ns"); do
			ip netns del "$n" 2>/dev/null
		done
		while read -r d; do
			[ -n "$d" ] && [ -d "$d" ] || continue
			[ -z "$(netns__mounts_under "$d")" ] && rm -rf "$d"
		done <"$NETNS_STATE/dirs"
		rm -f "$NETNS_STATE"/*
	) 9>>"$NETNS_STATE/lock"
	rm -f "$NETNS_STATE/lock"
	rmdir "$NETNS_STATE" 2>/dev/null
	return 0
}
