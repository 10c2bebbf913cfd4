#!/usr/bin/env bash
# Many readers, killed readers and unmounts under load, on real mounts: 16
# reader processes, each in its own random order and chunk size (half with
# O_DIRECT, so the daemon serves every read rather than the page cache),
# see exactly the bytes one reader sees on a one-thread mount (md5 per
# file); a reader killed with SIGKILL while its read is blocked in the
# daemon leaves the mount serving the right bytes; `fusermount3 -u` with a
# reader active fails with EBUSY and loses nothing, and `fusermount3 -u -z`
# lets the reader finish with the right bytes before the daemon exits.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 40 --min-size 160 --max-size 400 \
	--seed 21 --cmyk-every 17 --gray-every 13 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 30 --quiet ||
	{ not_ok mkshards; t_end; }

# md5 of every file of epoch-0000, one sequential reader: NAME -> SUM lines.
sums() { (cd "$1/epoch-0000" && for f in *; do echo "$f $(md5sum <"$f" | cut -c1-32)"; done); }

# References: one decode thread, one reader, one pass.
SMALL=(--batch 8 --size 96x96)
BIG=(--batch 30 --size 224x224)
mount_fg "$D/shards" "$D/ref1" "${SMALL[@]}" --threads 1 || { not_ok "mount ref1"; t_end; }
sums "$D/ref1" >"$D/small.md5"
unmount_wait "$D/ref1"
mount_fg "$D/shards" "$D/ref2" "${BIG[@]}" --threads 1 || { not_ok "mount ref2"; t_end; }
sums "$D/ref2" >"$D/big.md5"
unmount_wait "$D/ref2"
check "the references hold 30 small and 8 big files" \
	test "$(wc -l <"$D/small.md5") $(wc -l <"$D/big.md5")" = "30 8"

# ---- 16 concurrent readers --------------------------------------------------
# A small memory budget, so batches are evicted and decoded again while
# other readers wait on them.
mount_fg "$D/shards" "$D/m16" "${SMALL[@]}" --threads 2 --mem 24M --cache none ||
	{ not_ok "mount m16"; t_end; }
check "16 concurrent readers, each in its own random order, see the one-reader bytes" \
	$PY - "$D/m16/epoch-0000" "$D/small.md5" <<'PY'
import hashlib, multiprocessing as mp, os, random, sys
e, ref = sys.argv[1], dict(l.split() for l in open(sys.argv[2]))

def reader(i):
    rnd = random.Random(i)
    names = sorted(ref)
    rnd.shuffle(names)
    flags = os.O_RDONLY | (os.O_DIRECT if i % 2 else 0)
    got = {}
    for n in names:
        fd = os.open(f"{e}/{n}", flags)
        h, off = hashlib.md5(), 0
        while True:
            b = os.pread(fd, rnd.choice((4093, 65536, 1 << 20)), off)
            if not b:
                break
            h.update(b)
            off += len(b)
        os.close(fd)
        got[n] = h.hexdigest()
    return got

with mp.get_context("fork").Pool(16) as pool:
    results = pool.map(reader, range(16))
for i, got in enumerate(results):
    bad = [n for n in ref if got[n] != ref[n]]
    assert not bad, (i, bad)
print("16 readers x", len(ref), "files agree")
PY
check "stats.json shows no errors after the 16 readers" $PY - "$D/m16" <<'PY'
import json, sys
st = json.load(open(sys.argv[1] + "/stats.json"))
assert st["errors"] == [] and st["batches_produced"] >= 15, st
PY
unmount_wait "$D/m16"

# ---- a reader killed in the middle of a read ---------------------------------
# --cache none: the reference mounts filled this test's cache, and a batch
# served from it is ready too fast for a reader to be caught blocking.
# One thread makes a 30-image batch take long enough to catch; batch 2
# is the retry (reading batch 0 reads batch 1 ahead).
mount_fg "$D/shards" "$D/mk" "${BIG[@]}" --threads 1 --prefetch 1 --cache none ||
	{ not_ok "mount mk"; t_end; }
MK_PID=$MOUNT_PID
# The reader asks for 8 MiB of a batch nobody has decoded yet (O_DIRECT:
# straight to the daemon) and blocks until it is produced; we wait until it
# is inside pread64 (syscall 17), or openat (257) with passthrough, where
# the open waits for the batch, and kill it there.
killed_in_read=0
for k in 0 2; do
	$PY -c "
import os, sys
fd = os.open('$D/mk/epoch-0000/batch-00000$k.npy', os.O_RDONLY | os.O_DIRECT)
os.pread(fd, 8 << 20, 128)
" &
	rp=$!
	for i in $(seq 1 2000); do
		s=$(cut -d' ' -f1 "/proc/$rp/syscall" 2>/dev/null)
		[ "$s" = 17 ] || [ "$s" = 257 ] && break
		kill -0 "$rp" 2>/dev/null || break
		sleep 0.005
	done
	if [ "$s" = 17 ] || [ "$s" = 257 ]; then
		kill -9 "$rp"
		wait "$rp" 2>/dev/null
		killed_in_read=1
		echo "# killed reader $rp inside syscall $s (pread64 17, openat 257) of batch $k"
		break
	fi
	wait "$rp" 2>/dev/null
done
check "a reader was killed with SIGKILL while blocked in the daemon (read, or open with passthrough)" \
	test "$killed_in_read" = 1
check "the daemon survives the killed reader" kill -0 "$MK_PID"
check "after it, every file reads back with the one-reader bytes" \
	bash -c "diff <(cd '$D/mk/epoch-0000' && for f in *; do echo \"\$f \$(md5sum <\"\$f\" | cut -c1-32)\"; done) '$D/big.md5'"

# A reader killed between reads of a big batch, many times over.
for i in 1 2 3 4 5; do
	dd if="$D/mk/epoch-0000/batch-000001.npy" bs=1M iflag=direct status=none |
		(head -c $((i * 3 << 20)) >/dev/null) &
	rp=$!
	sleep 0.0$i
	kill -9 "$rp" 2>/dev/null
	wait "$rp" 2>/dev/null
done
check "after five readers killed mid-stream the batch still reads right" \
	bash -c "test \"\$(md5sum <'$D/mk/epoch-0000/batch-000001.npy' | cut -c1-32)\" = \"\$(awk '\$1 == \"batch-000001.npy\" {print \$2}' '$D/big.md5')\""
unmount_wait "$D/mk"

# ---- fusermount3 -u while a reader is active ---------------------------------
# The reader opens a batch, reads half of it, says so, waits for "go",
# reads the rest and prints the md5 of the whole file.
half_reader() {
	$PY - "$1" "$2" <<'PY'
import hashlib, os, sys, time
path, flag = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
h = hashlib.md5(os.pread(fd, size // 2, 0))
open(flag + ".half", "w").close()
for _ in range(6000):
    if os.path.exists(flag + ".go"):
        break
    time.sleep(0.01)
h.update(os.pread(fd, size - size // 2, size // 2))
print(h.hexdigest())
PY
}
want1=$(awk '$1 == "batch-000001.npy" {print $2}' "$D/big.md5")
[ -n "$want1" ] || { not_ok "no reference sum for batch-000001.npy"; t_end; }
wait_for() { for i in $(seq 1 3000); do [ -e "$1" ] && return 0; sleep 0.01; done; return 1; }

mount_fg "$D/shards" "$D/mu" "${BIG[@]}" --threads 2 || { not_ok "mount mu"; t_end; }
MU_PID=$MOUNT_PID
half_reader "$D/mu/epoch-0000/batch-000001.npy" "$D/r1" >"$D/r1.sum" &
rp=$!
wait_for "$D/r1.half" || not_ok "reader 1 never got half way"
check "fusermount3 -u with a reader active fails cleanly with EBUSY" \
	bash -c "! fusermount3 -u '$D/mu' 2>'$D/busy.err' && grep -qi 'busy' '$D/busy.err'"
check "the mount is still there and answers" \
	bash -c "mountpoint -q '$D/mu' && kill -0 $MU_PID && test -s '$D/mu/dataset.json'"
touch "$D/r1.go"
wait "$rp"
check "the reader finishes with the right bytes (nothing lost)" test "$(cat "$D/r1.sum")" = "$want1"
unmount_wait "$D/mu"
check "once the reader is gone, the unmount succeeds and the daemon exits" \
	bash -c "! mountpoint -q '$D/mu' && ! kill -0 $MU_PID 2>/dev/null"

mount_fg "$D/shards" "$D/mz" "${BIG[@]}" --threads 2 || { not_ok "mount mz"; t_end; }
MZ_PID=$MOUNT_PID
half_reader "$D/mz/epoch-0000/batch-000001.npy" "$D/r2" >"$D/r2.sum" &
rp=$!
wait_for "$D/r2.half" || not_ok "reader 2 never got half way"
check "fusermount3 -u -z (lazy) with a reader active detaches the mount at once" \
	bash -c "fusermount3 -u -z '$D/mz' && ! mountpoint -q '$D/mz'"
check "the daemon waits for the open reader" kill -0 "$MZ_PID"
touch "$D/r2.go"
wait "$rp"
check "the reader finishes through the detached mount with the right bytes" \
	test "$(cat "$D/r2.sum")" = "$want1"
for i in $(seq 1 100); do kill -0 "$MZ_PID" 2>/dev/null || break; sleep 0.1; done
check "then the daemon exits on its own" bash -c "! kill -0 $MZ_PID 2>/dev/null"
t_end
