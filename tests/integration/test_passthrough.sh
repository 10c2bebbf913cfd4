#!/usr/bin/env bash
# FUSE passthrough of batch files (fs/passthrough.c, engine slot files), on
# real mounts: the kernel serves read() and mmap() from the engine's slot
# files, with bytes identical to the ordinary read path; a batch a reader
# still maps (np.load(mmap_mode='r') closes its file at once) keeps its
# bytes while read-ahead reuses the slot; two processes may hold one batch open; a reader killed while its open waits
# for a batch leaves the mount serving; nothing is pushed into the page
# cache when the kernel reads slot files; --slot-dir on a tmpfs too small
# for --mem, or on a disk, turns passthrough off with the reason said.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

# Passthrough needs Linux 6.9+ and CAP_SYS_ADMIN; elsewhere the mount
# serves batches the ordinary way and says so (checked below).
kv=$(uname -r | awk -F. '{ print $1 * 1000 + $2 }')
if [ "$kv" -lt 6009 ] || [ "$(id -u)" != 0 ]; then
	echo "skip test_passthrough: needs Linux 6.9+ and root (kernel $(uname -r), uid $(id -u))"
	exit 0
fi

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 23 --min-size 90 --max-size 260 \
	--seed 11 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 20 --quiet ||
	{ not_ok mkshards; t_end; }
# 69 samples: 8 full batches of 8 and a last one of 5 per epoch; two
# epochs; --mem 12M with one thread holds only a few 0.5 MB slots, so
# reading on reuses the slot of every batch many times.
OPTS=(--batch 8 --size 64x80 --cache none --epochs 2 --threads 1 --mem 12M)

sums() { (cd "$1" && for e in epoch-*; do for f in "$e"/*; do echo "$f $(md5sum <"$f" | cut -c1-32)"; done; done); }

mount_fg "$D/shards" "$D/pt" "${OPTS[@]}" || { not_ok "mount pt"; t_end; }
PT_PID=$MOUNT_PID
mount_fg "$D/shards" "$D/plain" "${OPTS[@]}" --no-passthrough ||
	{ not_ok "mount plain"; t_end; }
PLAIN_PID=$MOUNT_PID

check "stats.json: passthrough on, and off with --no-passthrough" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
assert json.load(open(f"{d}/pt/stats.json"))["passthrough"] is True
assert json.load(open(f"{d}/plain/stats.json"))["passthrough"] is False
PY

# ---- a reader that maps batch 0 and keeps it --------------------------------
# It maps batch 0, copies it, and signals; the shell then reads both epochs
# through (reusing every slot); then it compares the mapping with its copy.
mkfifo "$D/go" "$D/done"
$PY - "$D/pt/epoch-0000/batch-000000.npy" "$D/go" "$D/done" >"$D/held.out" 2>&1 <<'PY' &
import numpy as np, sys
path, go, done = sys.argv[1:]
a = np.load(path, mmap_mode="r")  # np.load closes the file at once
want = np.array(a)
open(go, "w").write("mapped\n")
open(done).read()                 # the epochs were read meanwhile
assert a.shape == (8, 64, 80, 3), a.shape
assert np.array_equal(a, want), "the mapped batch changed under its reader"
print("held mapping unchanged")
PY
HOLDER=$!
read -r _ <"$D/go"
sums "$D/pt" >"$D/pt.md5"
sums "$D/pt" >"$D/pt2.md5"
echo done >"$D/done"
wait "$HOLDER"
check "a batch mapped with np.load(mmap_mode='r') keeps its bytes while its slot is reused" \
	grep -q "held mapping unchanged" "$D/held.out"
check "the slot under the mapping moved to a new file, or was passed over for another (slot_files_replaced + slot_files_passed_over >= 1)" $PY - "$D/pt" <<'PY'
import json, sys
st = json.load(open(f"{sys.argv[1]}/stats.json"))
assert st["slot_files_replaced"] + st["slot_files_passed_over"] >= 1, st
assert st["slot_file_errors"] == 0, st["slot_file_errors"]
assert st["passthrough_opens"] >= 18, st["passthrough_opens"]
assert st["batches_pushed"] == 0, st["batches_pushed"]
PY

sums "$D/plain" >"$D/plain.md5"
check "every file of two epochs is byte-identical with and without passthrough ($(wc -l <"$D/pt.md5") files)" \
	cmp "$D/pt.md5" "$D/plain.md5"
check "a second pass over reused slots reads the same bytes" cmp "$D/pt.md5" "$D/pt2.md5"
check "the last, partial batch has its own size (stat = bytes read)" $PY - "$D/pt" <<'PY'
import os, sys
p = f"{sys.argv[1]}/epoch-0001/batch-000008.npy"
data = open(p, "rb").read()
assert len(data) == os.stat(p).st_size == 128 + 5 * 64 * 80 * 3 * 4, len(data)
PY

check "np.memmap and read() agree on a passthrough batch" $PY - "$D/pt" <<'PY'
import numpy as np, sys
p = f"{sys.argv[1]}/epoch-0001/batch-000003.npy"
m = np.memmap(p, dtype=np.uint8, mode="r")
assert bytes(m) == open(p, "rb").read()
a = np.load(p, mmap_mode="r")
assert np.array_equal(a, np.load(p))
PY

check "two processes hold one batch open at once" $PY - "$D/pt" <<'PY'
import os, subprocess, sys
p = f"{sys.argv[1]}/epoch-0000/batch-000004.npy"
with open(p, "rb") as f:
    first = f.read(1000)
    other = subprocess.run([sys.executable, "-c",
        f"import sys; sys.stdout.buffer.write(open({p!r}, 'rb').read())"],
        capture_output=True, check=True).stdout
    rest = f.read()
assert first + rest == other, (len(first + rest), len(other))
PY

# ---- --slot-dir --------------------------------------------------------------
# The slot files need a tmpfs with room for --mem; on a tmpfs without the
# room the mount says why passthrough is off and serves the same bytes the
# ordinary way.  A --slot-dir that is not a tmpfs at all is refused
# (test_helper_refusals.sh).
mkdir -p "$D/small" "$D/roomy" "$D/sd"
if mount -t tmpfs -o size=4m tmpfs "$D/small" && mount -t tmpfs -o size=64m tmpfs "$D/roomy"; then
	T_MOUNTS+=("$D/small" "$D/roomy")
	for how in small:"$D/small"; do
		dir=${how#*:}
		out=$("$BATCHFS" mount "$D/shards" "$D/sd" "${OPTS[@]}" --slot-dir "$dir" 2>&1)
		T_MOUNTS+=("$D/sd")
		check "--slot-dir on a ${how%%:*} dir: the mount says why passthrough is off" \
			bash -c "printf '%s' \"\$1\" | grep -q 'passthrough off (.*\(less than --mem\|not a tmpfs\)'" _ "$out"
		check "  and serves the same bytes the ordinary way" $PY - "$D/sd" "$D/plain" <<'PY'
import json, sys
sd, plain = sys.argv[1:]
assert json.load(open(f"{sd}/stats.json"))["passthrough"] is False
for k in (0, 8):
    f = f"epoch-0000/batch-{k:06d}.npy"
    assert open(f"{sd}/{f}", "rb").read() == open(f"{plain}/{f}", "rb").read(), f
PY
		"$BATCHFS" unmount "$D/sd" >/dev/null 2>&1
	done
	mount_fg "$D/shards" "$D/sd" "${OPTS[@]}" --slot-dir "$D/roomy" ||
		{ not_ok "mount --slot-dir roomy"; t_end; }
	check "--slot-dir on a tmpfs with room: passthrough on, its slot files there" \
		$PY - "$D/sd" "$MOUNT_PID" "$D/roomy" <<'PY'
import json, os, sys
sd, pid, roomy = sys.argv[1:]
data = open(f"{sd}/epoch-0000/batch-000001.npy", "rb").read()
assert json.load(open(f"{sd}/stats.json"))["passthrough"] is True
def link(fd):  # a descriptor the daemon closed since the listing: none
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except FileNotFoundError:
        return ""
links = [link(fd) for fd in os.listdir(f"/proc/{pid}/fd")]
assert any(l.startswith(roomy + "/") for l in links), links
PY
	unmount_wait "$D/sd"
	umount "$D/small" "$D/roomy"
else
	echo "skip --slot-dir checks: cannot mount a tmpfs here"
fi

# ---- a reader killed while its open waits for a batch ------------------------
mount_fg "$D/shards" "$D/slow" --batch 60 --size 224x224 --cache none \
	--threads 1 --prefetch 1 || { not_ok "mount slow"; t_end; }
SLOW_PID=$MOUNT_PID
$PY -c "open('$D/slow/epoch-0000/batch-000000.npy', 'rb').read(1)" &
rp=$!
in_open=0
for i in $(seq 1 400); do
	if [ "$(cut -d' ' -f1 /proc/$rp/syscall 2>/dev/null)" = 257 ]; then
		in_open=1
		break
	fi
	sleep 0.005
done
kill -9 "$rp" 2>/dev/null
wait "$rp" 2>/dev/null
check "a reader was killed inside openat (257), waiting for its batch" test "$in_open" = 1
check "after a reader is killed inside open, the batch still opens and reads" $PY - "$D/slow" <<'PY'
import numpy as np, sys
a = np.load(f"{sys.argv[1]}/epoch-0000/batch-000000.npy")
assert a.shape == (60, 224, 224, 3), a.shape
PY
MOUNT_PID=$SLOW_PID unmount_wait "$D/slow"

# ---- unmount while a batch is mapped ----------------------------------------
# As on any filesystem, a mapped file keeps the mount busy; once the reader
# lets go, the unmount goes through.
$PY - "$D/pt/epoch-0000/batch-000002.npy" "$D/go" "$D/done" >"$D/after.out" 2>&1 <<'PY' &
import numpy as np, sys
path, go, done = sys.argv[1:]
a = np.load(path, mmap_mode="r")
want = np.array(a)
open(go, "w").write("mapped\n")
open(done).read()
assert np.array_equal(a, want)
print("mapping unchanged")
PY
HOLDER=$!
read -r _ <"$D/go"
check "batchfs unmount is refused while a reader maps a batch" \
	bash -c "! '$BATCHFS' unmount '$D/pt' && mountpoint -q '$D/pt'"
echo done >"$D/done"
wait "$HOLDER"
check "the mapping read the batch's bytes to the end" grep -q "mapping unchanged" "$D/after.out"
MOUNT_PID=$PT_PID unmount_wait "$D/pt"
check "once the mapping is gone, the unmount goes through and the daemon exits" \
	bash -c "! mountpoint -q '$D/pt' && ! kill -0 $PT_PID 2>/dev/null"
MOUNT_PID=$PLAIN_PID unmount_wait "$D/plain"
t_end
