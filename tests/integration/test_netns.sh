#!/usr/bin/env bash
# The network-namespace harness (netns.sh, delayline.py) that `make bench`
# and the multi-node tests build their networks with: nodes reach each
# other through the router; an added round trip holds every connect for
# at least that long (and goes away when set to 0); a rate cap holds a
# download to at least its time at that rate; a FUSE mount made inside a
# node is seen from outside; and the teardown leaves no namespace,
# process, mount or tracked folder, both from the owner's own cleanup and,
# through the watchdog, when the owner is killed with SIGKILL.  Only lower
# bounds on time are asserted: a busy machine only makes things slower.
source "$(dirname "$0")/lib.sh"
t_begin
source "$HERE/netns.sh"
if ! netns_check; then
	echo "skip test_netns: $NETNS_WHY"
	exit 0
fi
if ! netns_check_delay; then
	echo "skip test_netns: $NETNS_WHY"
	exit 0
fi
D=$T_DIR

# connect_ms ROLE HOST PORT: the fastest of 5 TCP connects, in ms.
connect_ms() {
	netns_exec "$1" $PY -c '
import socket, sys, time
best = 1e9
for _ in range(5):
    t0 = time.perf_counter()
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close()
    best = min(best, (time.perf_counter() - t0) * 1e3)
print(int(best))' "$2" "$3"
}

netns_begin
netns_router r
S=$(netns_attach r s)
C=$(netns_attach r c)
check "namespaces are named after the owner's pid" \
	bash -c "ip netns list | grep -q '^bfs$$-s\\b' && ip netns list | grep -q '^bfs$$-c\\b' &&
		ip netns list | grep -q '^bfs$$-r\\b'"
check "each link's ends live in our namespaces, with private addresses" \
	bash -c "ip -n bfs$$-r addr show v-s | grep -q '10.201.1.1/24' &&
		ip -n bfs$$-s addr show eth0 | grep -q '$S/24' && [ '$S' = 10.201.1.2 ] &&
		[ '$C' = 10.201.2.2 ] && ! ip link show v-s >/dev/null 2>&1"

mkdir -p "$D/www"
head -c 2000000 /dev/urandom >"$D/www/blob"
netns_spawn s "$D/http.log" $PY -m http.server 8080 --bind 0.0.0.0 --directory "$D/www"
SRV=$NETNS_PID
up=0
for _ in $(seq 1 100); do
	netns_exec c curl -s -o /dev/null "http://$S:8080/" && { up=1; break; }
	sleep 0.1
done
check "a node reaches another through the router" [ $up = 1 ]

netns_delay r c 25
ms=$(connect_ms c "$S" 8080)
check "with 25 ms added, every TCP connect takes at least 25 ms (fastest: $ms ms)" [ "$ms" -ge 25 ]
netns_delay r s 25
ms=$(connect_ms c "$S" 8080)
check "two delayed nodes add both delays (fastest connect: $ms ms)" [ "$ms" -ge 50 ]
check "the delay line said it took each new delay" \
	bash -c "[ \"\$(cat '$NETNS_STATE/delay-r.ready.gen')\" = \"\$(cat '$NETNS_STATE/delay-r.gen')\" ]"
netns_delay r s 0
netns_delay r c 0
check "taking the delays away: the delay line's config holds none" \
	bash -c "! grep -v '^#' '$NETNS_STATE/delay-r.conf' | grep -qv ' 0.0$'"
check "the delay line counts what it forwarded, and dropped nothing" \
	bash -c "netns_stats=\$(NETNS_STATE='$NETNS_STATE' bash '$HERE/netns.sh' delay-stats r) &&
		$PY -c 'import json, sys; s = json.loads(sys.argv[1]); sys.exit(not (s[\"packets\"] > 0 and s[\"drops\"] == 0))' \"\$netns_stats\""

# 2,000,000 bytes at 8 Mbit/s (1 MB/s) take 2 s; tbf's first burst of
# 64 KiB comes at once, so at least 1.8 s.
netns_rate r c 8mbit
t=$(netns_exec c curl -s -o /dev/null -w '%{time_total}' "http://$S:8080/blob")
check "a download through an 8mbit cap takes at least its time at that rate (${t} s)" \
	$PY -c "import sys; sys.exit(not float('$t') >= 1.8)"
check "the cap is tbf on both ends of the link" \
	bash -c "tc -n bfs$$-r qdisc show dev v-c | grep -q tbf && tc -n bfs$$-c qdisc show dev eth0 | grep -q tbf"
netns_rate r c off
check "taking the cap away removes both" \
	bash -c "! tc -n bfs$$-r qdisc show dev v-c | grep -q tbf && ! tc -n bfs$$-c qdisc show dev eth0 | grep -q tbf"

# A FUSE mount made in a node is the machine's, seen and read from here.
"$MKJPEG" "$D/jpegs" --classes 2 --per-class 4 --seed 3 --min-size 20 --max-size 40 >/dev/null &&
	"$BATCHFS" mkshards "$D/jpegs" "$D/tfr" --per-shard 4 --quiet || not_ok "test data"
mkdir -p "$D/mnt/in-c"
T_MOUNTS+=("$D/mnt/in-c")
netns_track_mount "$D/mnt"
netns_exec c "$BATCHFS" mount "$D/tfr" "$D/mnt/in-c" --batch 4 --size 16x16 --cache none >/dev/null 2>&1
check "a mount made inside a node is seen outside it" \
	bash -c "mountpoint -q '$D/mnt/in-c' && [ -s '$D/mnt/in-c/epoch-0000/batch-000000.npy' ]"
mpid=$(pgrep -f "mount $D/tfr $D/mnt/in-c" | head -1)
check "its daemon runs in the node's network namespace" \
	bash -c "[ -n '$mpid' ] && [ \"\$(readlink /proc/$mpid/ns/net)\" = \"\$(ip netns exec bfs$$-c readlink /proc/self/ns/net)\" ]"

# The owner's teardown: mounts, processes, namespaces, tracked folders.
mkdir -p "$D/tracked"
netns_track_dir "$D/tracked"
state=$NETNS_STATE
netns_cleanup
check "teardown: no namespace of ours is left" bash -c "! ip netns list | grep -q '^bfs$$-'"
gone=1
alive "$SRV" && gone=0
[ -n "$mpid" ] && alive "$mpid" && gone=0
check "teardown: the server and the daemon in them are gone" [ $gone = 1 ]
check "teardown: the mount made in a node is gone" bash -c "! mountpoint -q '$D/mnt/in-c'"
check "teardown: tracked folders and the harness's state are removed" \
	bash -c "[ ! -e '$D/tracked' ] && [ ! -e '$state' ]"
netns_cleanup
check "a second teardown is a no-op" bash -c "! ip netns list | grep -q '^bfs$$-'"

# An owner killed with SIGKILL: its watchdog tears everything down.
mkdir -p "$D/k/mnt" "$D/k/tracked"
cat >"$D/owner.sh" <<EOF
source "$HERE/netns.sh"
netns_begin
netns_router r
netns_attach r n >/dev/null
netns_track_mount "$D/k"
netns_track_dir "$D/k/tracked"
netns_spawn n "$D/k/sleep.log" sleep 300
echo \$NETNS_PID >"$D/k/sleep.pid"
netns_exec n "$BATCHFS" mount "$D/tfr" "$D/k/mnt" --batch 4 --size 16x16 --cache none >/dev/null 2>&1
echo "\$NETNS_ID \$NETNS_STATE" >"$D/k/ready"
sleep 300
EOF
bash "$D/owner.sh" &
OWNER=$!
T_PIDS+=("$OWNER")
for _ in $(seq 1 300); do [ -s "$D/k/ready" ] && break; sleep 0.1; done
read -r kid kstate <"$D/k/ready"
check "the killed owner's network was up (namespaces, a process, a mount)" \
	bash -c "ip netns list | grep -q '^$kid-n\\b' && kill -0 \$(cat '$D/k/sleep.pid') && mountpoint -q '$D/k/mnt'"
T_MOUNTS+=("$D/k/mnt")
kpid=$(cat "$D/k/sleep.pid")
kill -9 "$OWNER"
wait "$OWNER" 2>/dev/null
gone=0
for _ in $(seq 1 300); do
	if ! ip netns list | grep -q "^$kid-" &&
		! alive "$kpid" && ! mountpoint -q "$D/k/mnt" && [ ! -e "$D/k/tracked" ] &&
		[ ! -e "$kstate" ]; then
		gone=1
		break
	fi
	sleep 0.1
done
check "SIGKILL of the owner: the watchdog removes its namespaces, processes, mounts and folders" \
	[ $gone = 1 ]
t_end
