#!/usr/bin/env bash
# The page-cache push (fs/mount.c, push_batch), on real mounts: read-ahead
# the reader has not opened yet is resident in the kernel's page cache once
# it is produced while the pool is otherwise idle (mincore), and not with
# --no-push; pushed and
# read-served bytes are identical, through read() and mmap; the stats
# count the pushes; and an unmount or a SIGTERM while pushes are in flight
# ends the daemon promptly with the mount gone.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 2 --per-class 40 --min-size 120 --max-size 300 \
	--seed 5 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 25 --quiet ||
	{ not_ok mkshards; t_end; }
# Pushes serve the ordinary read path; with passthrough (the default where
# the kernel has it) the kernel reads slot files instead (test_passthrough).
# One worker: batches 1 and 2 finish while later read-ahead is queued, so
# batch 3 is the one pushed.
OPTS=(--batch 8 --size 64x80 --cache none --prefetch 3 --no-passthrough --threads 1)

sums() { (cd "$1/epoch-0000" && for f in *; do echo "$f $(md5sum <"$f" | cut -c1-32)"; done); }

# peek_of PID: the daemon's look-up child (comm bfs-peek), or nothing.
peek_of() {
	local c
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		[ "$(cat /proc/"$c"/comm 2>/dev/null)" = bfs-peek ] && { echo "$c"; return; }
	done
}

# Residency of batch 3 after a reader opened batch 0 (read-ahead 3) and the
# engine says batch 3 is produced: the last read-ahead, finished with
# nothing else queued, so it is pushed (by the engine's courier thread,
# which the stats say when it has; with --no-push, a moment is given for
# a push that must not come); prints "resident/pages".
RESIDENT=$(cat <<'PY'
import ctypes, json, mmap, os, sys, time
mnt = sys.argv[1]
e = f"{mnt}/epoch-0000"
with open(f"{e}/batch-000000.npy", "rb") as f:
    f.read(1)
for _ in range(200):
    st = json.load(open(f"{mnt}/stats.json"))
    if st["batches_produced"] >= 4:
        break
    time.sleep(0.05)
for _ in range(400 if len(sys.argv) > 2 else 6):
    if json.load(open(f"{mnt}/stats.json"))["batches_pushed"] >= 1:
        break
    time.sleep(0.05)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(f"{e}/batch-000003.npy", os.O_RDONLY)
size = os.fstat(fd).st_size
addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
pages = (size + 4095) // 4096
vec = (ctypes.c_ubyte * pages)()
if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
    sys.exit(f"mincore: {os.strerror(ctypes.get_errno())}")
print(f"{sum(v & 1 for v in vec)}/{pages}")
PY
)

mount_fg "$D/shards" "$D/push" "${OPTS[@]}" || { not_ok "mount push"; t_end; }
P1=$MOUNT_PID
R=$($PY -c "$RESIDENT" "$D/push" pushed 2>&1)
# At least 90%, not all: these VMs run DAMON proactive reclaim (a kdamond
# with a "pageout" scheme), which may take a page back at any moment; a
# missed push leaves none.
check "a produced batch is in the page cache before its reader opens it ($R pages)" \
	test "$(( ${R%%/*} * 10 ))" -ge "$(( ${R##*/} * 9 ))"
check "np.load(mmap_mode='r') of a pushed batch equals its read() bytes" $PY - "$D/push" <<'PY'
import numpy as np, sys
p = f"{sys.argv[1]}/epoch-0000/batch-000003.npy"
a = np.load(p, mmap_mode="r")
b = np.load(p)
assert a.shape == b.shape == (8, 64, 80, 3), a.shape
assert np.array_equal(np.asarray(a), b)
PY
sums "$D/push" >"$D/push.md5"
check "stats.json counts the pushes" $PY - "$D/push" <<'PY'
import json, sys
st = json.load(open(f"{sys.argv[1]}/stats.json"))
assert st["batches_pushed"] >= 1, st["batches_pushed"]
assert st["bytes_pushed"] == st["batches_pushed"] * 8 * 64 * 80 * 3 * 4, st
PY
# The look-ups a push needs run in a child of the daemon (fs/peek.h), so
# that no thread of the daemon waits in the kernel on its own mount.
PEEK=$(peek_of "$P1")
check "a push's look-ups run in the daemon's child bfs-peek (pid ${PEEK:-none})" test -n "$PEEK"
check "... which holds nothing but its socket: no /dev/fuse, no lock" bash -c \
	"[ \$(ls /proc/$PEEK/fd | wc -l) = 1 ] && readlink /proc/$PEEK/fd/* | grep -q '^socket:'"
MOUNT_PID=$P1 unmount_wait "$D/push"
if [ -n "$PEEK" ]; then
	for i in $(seq 1 50); do alive "$PEEK" || break; sleep 0.1; done
	if alive "$PEEK"; then not_ok "... and it ends with the mount"; else ok "... and it ends with the mount"; fi
fi

mount_fg "$D/shards" "$D/nopush" "${OPTS[@]}" --no-push || { not_ok "mount nopush"; t_end; }
R=$($PY -c "$RESIDENT" "$D/nopush" 2>&1)
check "with --no-push the same batch is not in the page cache ($R pages)" \
	test "${R%%/*}" = 0
sums "$D/nopush" >"$D/nopush.md5"
check "--no-push has no pushes" $PY -c '
import json, sys
assert json.load(open(sys.argv[1] + "/stats.json"))["batches_pushed"] == 0' "$D/nopush"
unmount_wait "$D/nopush"
check "pushed and read-served files are byte-identical (md5 of all $(wc -l <"$D/push.md5"))" \
	cmp "$D/push.md5" "$D/nopush.md5"

# ---- shutdown while pushes are in flight -----------------------------------
# Each round starts read-ahead (8 batches pushed as they finish) and ends
# the mount at once, by `batchfs unmount` or by SIGTERM.
BIG=(--batch 8 --size 224x224 --cache none --prefetch 8 --threads 2)
for how in unmount term unmount term; do
	mount_fg "$D/shards" "$D/s" "${BIG[@]}" || { not_ok "mount s ($how)"; break; }
	head -c 1 "$D/s/epoch-0000/batch-000000.npy" >/dev/null
	if [ "$how" = unmount ]; then
		"$BATCHFS" unmount "$D/s" >/dev/null 2>&1
	else
		kill -TERM "$MOUNT_PID"
	fi
	for i in $(seq 1 100); do
		kill -0 "$MOUNT_PID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$MOUNT_PID" 2>/dev/null || mountpoint -q "$D/s"; then
		not_ok "$how during pushes: the daemon or the mount is still there after 10 s"
	else
		ok "$how during pushes: daemon gone, mount gone"
	fi
done

# ---- SIGKILL while readers open the batches it pushes ----------------------
# (the OOM killer's signal).  A push's look-up once ran in the daemon: a
# reader's lookup of the same name held it in d_wait_lookup, so SIGKILL
# left that one thread, /dev/fuse open, and the mount wedged until the
# reader was killed.  Now the daemon always ends, the connection with it
# (the readers get an error, not a hang), and its look-up child goes too.
for round in 1 2 3 4 5 6; do
	mount_fg "$D/shards" "$D/k" "${BIG[@]}" || { not_ok "mount k (round $round)"; break; }
	KP=$MOUNT_PID
	KPEEK=$(peek_of "$KP")
	READERS=()
	for r in 1 2; do
		( for k in $(seq $((r - 1)) 2 60); do
			timeout 60 cat "$D/k/epoch-0000/batch-$(printf %06d "$k").npy" \
				>/dev/null 2>&1 || exit 0
		done ) &
		READERS+=("$!")
		T_PIDS+=("$!")
	done
	sleep "0.$((round * 15))"
	kill -9 "$KP"
	for i in $(seq 1 100); do
		alive "$KP" || { [ -n "$KPEEK" ] && alive "$KPEEK"; } || break
		sleep 0.1
	done
	if alive "$KP"; then
		not_ok "SIGKILL while readers open pushed batches (round $round): the daemon is still there after 10 s: $(grep -h '^State' /proc/"$KP"/task/*/status | sort | uniq -c | tr '\n' ' ')"
	elif [ -n "$KPEEK" ] && alive "$KPEEK"; then
		not_ok "SIGKILL (round $round): the daemon ended, its look-up child is still there after 10 s"
	else
		ok "SIGKILL while readers open pushed batches (round $round): the daemon and its look-up child ended"
	fi
	{ wait "$KP"; } 2>/dev/null # no "Killed" line from the shell
	for j in "${READERS[@]}"; do wait "$j" 2>/dev/null; done
	check "... and \`batchfs unmount\` clears the dead mount (round $round)" \
		bash -c "timeout 30 '$BATCHFS' unmount '$D/k' >/dev/null 2>&1; ! mountpoint -q '$D/k'"
done
t_end
