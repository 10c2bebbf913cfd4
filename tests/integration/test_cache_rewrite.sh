#!/usr/bin/env bash
# A shard rewritten at the same size with its mtime restored (touch -d,
# rsync -t, tar x) is not served from the cache: a mount with the cache
# reads an epoch, one shard is rewritten in place with other images, padded
# to exactly its old byte size, and its mtime is set back with touch -d; a
# remount must serve the new images -- every batch equal to a --cache none
# mount of the new data -- and still take the untouched shards from the
# cache.  The shard keeps its size, mtime and inode; only its ctime tells.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
OPTS=(--batch 8 --size 32x32)

"$MKJPEG" "$D/old" --classes 2 --per-class 10 --seed 41 --min-size 60 \
	--max-size 100 >/dev/null || { not_ok mkjpeg; t_end; }
"$MKJPEG" "$D/new" --classes 1 --per-class 10 --seed 42 --min-size 30 \
	--max-size 50 >/dev/null || { not_ok "mkjpeg new"; t_end; }
"$BATCHFS" mkshards "$D/old" "$D/shards" --per-shard 10 --quiet || { not_ok mkshards; t_end; }
SHARD=$D/shards/$(ls "$D/shards" | tail -1)

sums() { (cd "$1/epoch-0000" && for f in *; do printf '%s ' "$f"; md5sum <"$f"; done); }
stat_of() { $PY -c "import json,sys; s=json.load(open('$1/stats.json')); print(eval(sys.argv[1]))" "$2"; }
wait_inserts() {
	local i
	for i in $(seq 1 300); do
		[ "$(stat_of "$1" "s['cache']['inserts']")" -ge "$2" ] && return 0
		sleep 0.1
	done
	return 1
}

mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$D/c" || { not_ok "mount with the cache"; t_end; }
sums "$D/m" >"$D/sums.old"
check "the first epoch is cached whole (20 samples, 2 shard indexes)" wait_inserts "$D/m" 20
unmount_wait "$D/m"

# Rewrite the last shard in place: records of the new images (labels 0..9),
# the last one padded with an extra feature so the file keeps its size.
before=$(stat -c '%s %Y %i' "$SHARD")
mtime=$($PY -c "import os,sys; t=os.stat(sys.argv[1]).st_mtime_ns; print('%d.%09d' % divmod(t, 10**9))" "$SHARD")
cp "$SHARD" "$D/old-copy"
# The kernel stamps files from a clock that ticks every few ms: wait
# (deadline 5 s) until a file touched now gets a later ctime than the
# shard's, or the rewrite could get the very ctime the shard has.
$PY - "$SHARD" "$D/probe" <<'PY' || { not_ok "the file clock did not move on"; t_end; }
import os, sys, time
shard, probe = sys.argv[1], sys.argv[2]
for _ in range(5000):
    open(probe, "w").close()
    if os.stat(probe).st_ctime_ns > os.stat(shard).st_ctime_ns:
        break
    time.sleep(0.001)
else:
    sys.exit(1)
PY
$PY - "$SHARD" "$D/new" <<'PY' || { not_ok "rewrite the shard"; t_end; }
import glob, os, sys
from tfrec import example, record
path, new = sys.argv[1], sys.argv[2]
size = os.path.getsize(path)
jpegs = [open(p, "rb").read() for p in sorted(glob.glob(new + "/*/*.jpg"))]
head = [record(example({"image/encoded": j, "image/class/label": i}))
        for i, j in enumerate(jpegs[:-1])]
used = sum(len(r) for r in head)
for pad in range(size):
    last = record(example({"image/encoded": jpegs[-1], "image/class/label": 9,
                           "pad": b"\0" * pad}))
    if used + len(last) >= size:
        break
assert used + len(last) == size, ("cannot pad to", size, used + len(last))
with open(path, "r+b") as f:  # in place: the same inode
    f.write(b"".join(head) + last)
PY
touch -d "@$mtime" "$SHARD"
check "the rewritten shard has its old size, mtime and inode" \
	test "$(stat -c '%s %Y %i' "$SHARD")" = "$before"
check "but not its old content" bash -c "! cmp -s '$SHARD' '$D/old-copy' 2>/dev/null"

mount_fg "$D/shards" "$D/ref" "${OPTS[@]}" --cache none || { not_ok "mount reference"; t_end; }
sums "$D/ref" >"$D/sums.ref"
unmount_wait "$D/ref"
check "the new data differs from the old in the rewritten shard's batches" \
	bash -c "! cmp -s '$D/sums.old' '$D/sums.ref'"

mount_fg "$D/shards" "$D/m" "${OPTS[@]}" --cache "$D/c" || { not_ok "remount with the cache"; t_end; }
sums "$D/m" >"$D/sums.new"
check "after the rewrite a remount with the cache serves the new images (equal to a --cache none mount)" \
	cmp "$D/sums.ref" "$D/sums.new"
check "the rewritten shard was indexed and decoded again, the other one came from the cache" bash -c "
	test \"\$($PY -c \"import json; s=json.load(open('$D/m/stats.json')); print(s['samples_decoded'], s['cache']['hits'], s['cache']['index_hits'])\")\" = '10 10 1'"
unmount_wait "$D/m"
t_end
