#!/usr/bin/env bash
# The log must exist: with HOME pointing at a directory without
# .local/state the whole path is made and the mount message names the
# file; where no log file can be had the mount message says why and the
# daemon logs to syslog (or says that nothing listens there), and a
# foreground mount logs to stderr.  The syslog cases run in a private
# mount namespace whose /dev holds a socket the test listens on: the
# machine's /dev/log is never touched.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/src" --classes 1 --per-class 6 --seed 9 --min-size 24 \
	--max-size 48 >/dev/null || { not_ok "mkjpeg"; t_end; }
printf 'not a jpeg' >"$D/src/class_000/zz-bad.jpg" # sample 6: batch 1 fails
OPTS=(--batch 4 --size 16x16 --threads 1 --cache none --no-passthrough)
mkdir -p "$D/home" "$D/m"
: >"$D/homefile"   # a HOME under which no directory can be made

# ---- a fresh HOME: the log directory is made
out=$(env -u XDG_STATE_HOME HOME="$D/home" "$BATCHFS" mount "$D/src" "$D/m" \
	"${OPTS[@]}" 2>&1) || { not_ok "mount with a fresh HOME: $out"; t_end; }
T_MOUNTS+=("$D/m")
LOG=$D/home/.local/state/batchfs/batchfs.log
check "the mount message names the log under the fresh HOME: $out" bash -c \
	"printf '%s' \"\$1\" | grep -q '; log: $LOG'" _ "$out"
cat "$D/m/epoch-0000/batch-000001.npy" >/dev/null 2>&1
"$BATCHFS" unmount "$D/m" >/dev/null 2>&1
check "the whole path was made and the daemon logged to it" \
	grep -q "info: mounted $D/src on $D/m" "$LOG"
check "... a bad sample's warning included" grep -q "warning: bad sample 6 (class_000/zz-bad.jpg" "$LOG"

# ---- foreground: the log is stderr, whatever HOME is
env -u XDG_STATE_HOME HOME="$D/homefile" "$BATCHFS" mount -f "$D/src" "$D/m" \
	"${OPTS[@]}" >"$D/fg.out" 2>"$D/fg.err" &
FG=$!
T_PIDS+=("$FG")
for i in $(seq 1 300); do [ -e "$D/m/dataset.json" ] && break; sleep 0.1; done
cat "$D/m/epoch-0000/batch-000001.npy" >/dev/null 2>&1
"$BATCHFS" unmount "$D/m" >/dev/null 2>&1
wait "$FG"
check "a foreground mount logs to stderr" \
	grep -q "warning: bad sample 6 (class_000/zz-bad.jpg" "$D/fg.err"
check "... and its mount message says nothing of a log file" \
	bash -c "grep -q 'mounted $D/src on $D/m' '$D/fg.out' && ! grep -q 'log' '$D/fg.out'"

if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null ||
	! unshare -m --propagation private true 2>/dev/null; then
	echo "skip log_falls_back_to_syslog: a private mount namespace needs root and unshare"
	t_end
fi

# ---- a log on a full file system: said at mount, never a silent empty file
mkdir -p "$D/full" "$D/mfull"
if mount -t tmpfs -o size=1m batchfs-test-full "$D/full"; then
	T_MOUNTS+=("$D/full")
	dd if=/dev/zero of="$D/full/fill" bs=4k 2>/dev/null
	out=$("$BATCHFS" mount "$D/src" "$D/mfull" "${OPTS[@]}" --log "$D/full/b.log" 2>&1)
	T_MOUNTS+=("$D/mfull")
	check "a log on a full file system: the mount message says it cannot be written, and where lines go: $out" \
		bash -c "printf '%s' \"\$1\" | grep -q '; no log: cannot write $D/full/b.log: No space left on device; \(logging to syslog\|no syslog either\)' &&
			! printf '%s' \"\$1\" | grep -q '; log: '" _ "$out"
	check "... and the mount serves all the same" bash -c "cat '$D/mfull/epoch-0000/batch-000000.npy' >/dev/null"
	"$BATCHFS" unmount "$D/mfull" >/dev/null 2>&1
	umount "$D/full"
fi

# ---- no log file: syslog, in a namespace with our own /dev/log
# syslog_case NAME LISTEN: mount as a daemon with HOME=$D/homefile; LISTEN 1
# puts a syslog listener on the namespace's /dev/log
syslog_case() {
	local name=$1 listen=$2
	unshare -m --propagation private bash -s "$D" "$BATCHFS" "$PY" "$listen" \
		"$name" "${OPTS[@]}" >"$D/$name.ns" 2>&1 <<'NS'
D=$1 BATCHFS=$2 PY=$3 LISTEN=$4 NAME=$5
shift 5
set -u
mkdir -p "$D/dev-$NAME"
mount -t tmpfs batchfs-test-dev "$D/dev-$NAME" || exit 3
for n in null zero random urandom fuse; do
	touch "$D/dev-$NAME/$n" && mount --bind "/dev/$n" "$D/dev-$NAME/$n" || exit 3
done
if [ "$LISTEN" = 1 ]; then
	"$PY" - "$D/dev-$NAME/log" "$D/$NAME.syslog" "$D/$NAME.ready" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
open(sys.argv[3], "w").close()
with open(sys.argv[2], "ab", buffering=0) as f:
    while True:
        f.write(s.recv(65536) + b"\n")
PY
	LPID=$!
	for i in $(seq 1 300); do [ -e "$D/$NAME.ready" ] && break; sleep 0.1; done
fi
mount --rbind "$D/dev-$NAME" /dev || exit 3
env -u XDG_STATE_HOME HOME="$D/homefile" "$BATCHFS" mount "$D/src" "$D/m" "$@" \
	>"$D/$NAME.msg" 2>&1 || exit 4
cat "$D/m/epoch-0000/batch-000001.npy" >/dev/null 2>&1
"$BATCHFS" unmount "$D/m" || umount -l "$D/m"
[ "$LISTEN" = 1 ] && kill "$LPID"
exit 0
NS
}

syslog_case syslog 1
check "syslog case ran: $(tail -3 "$D/syslog.ns" | tr '\n' ' ')" test -s "$D/syslog.msg"
check "the mount message says why there is no log file, and that it logs to syslog" \
	grep -q "; no log: cannot create $D/homefile/.local/state/batchfs: Not a directory; logging to syslog" "$D/syslog.msg"
check "the daemon's lines reach syslog, as the daemon facility" \
	grep -aq "^<30>.*batchfs\[[0-9]*\]: mounted $D/src on $D/m" "$D/syslog.syslog"
check "... a bad sample's warning included" \
	grep -aq "^<28>.*batchfs\[[0-9]*\]: bad sample 6 (class_000/zz-bad.jpg" "$D/syslog.syslog"

syslog_case nosyslog 0
check "without a syslog daemon the mount message says nothing is logged" \
	grep -q "; no log: cannot create $D/homefile/.local/state/batchfs: Not a directory; no syslog either (nothing listens on /dev/log): nothing is logged" "$D/nosyslog.msg"
check "... and nothing but the mount message reaches the terminal" \
	test "$(wc -l <"$D/nosyslog.msg")" = 1
t_end
