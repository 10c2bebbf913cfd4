#!/usr/bin/env bash
# Scale: 1,000 shards of 1,000 tiny records (1M samples) mount, list and
# read correctly, and the index stays within 48 bytes per sample.  Nothing
# here is timed (make bench reports the index build and ls times).
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
SHARDS=${SCALE_SHARDS:-1000}
RECORDS=1000
N=$((SHARDS * RECORDS))
NB=$(((N + 31) / 32))

# One 8x8 JPEG, 1,000 names for it, one shard of 1,000 records made by
# mkshards, then 1,000 names for that shard (hard links: no disk, no time).
mkdir -p "$D/jpegs/class_000" "$D/big" "$D/small"
"$MKJPEG" --one "$D/tiny.jpg" 8x8 --seed 7 >/dev/null || { not_ok "mkjpeg"; t_end; }
for i in $(seq -f %05g 0 $((RECORDS - 1))); do
	ln "$D/tiny.jpg" "$D/jpegs/class_000/img_$i.jpg"
done
check "mkshards packs 1,000 tiny JPEGs into one shard" \
	"$BATCHFS" mkshards "$D/jpegs" "$D/one" --per-shard $RECORDS --quiet
ONE=$(ls "$D/one"/*.tfrecord | head -1)
for i in $(seq -f %05g 0 $((SHARDS - 1))); do
	ln "$ONE" "$D/big/train-$i.tfrecord"
done
ln "$ONE" "$D/small/train-00000.tfrecord"

rss() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"; }

# --cache none: the index is what is measured; with the cache the shard
# indexes being written (1,000 blobs queued for the writer) sit in the
# daemon's memory for a moment too, and RSS then depends on the writer.
mount_fg "$D/small" "$D/base" --cache none || { not_ok "baseline mount"; t_end; }
sleep 0.2
BASE=$(rss "$MOUNT_PID")
unmount_wait "$D/base"

mount_fg "$D/big" "$D/mnt" --cache none || { not_ok "mount of $SHARDS shards"; t_end; }
M=$D/mnt
E=$M/epoch-0000
sleep 0.2
BIG=$(rss "$MOUNT_PID")

check "dataset.json counts $N samples in $NB batches" $PY - "$M" "$N" "$NB" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["samples"] == int(sys.argv[2]) and d["batches_per_epoch"] == int(sys.argv[3]), d
assert d["shards"] == int(sys.argv[2]) // 1000, d
PY
check "ls lists every batch and label file ($((2 * NB)) names)" \
	test "$(ls "$E" | wc -l)" -eq $((2 * NB))
LAST=$(printf 'batch-%06d' $((NB - 1)))
check "ls ends with the last batch's files" \
	test "$(ls "$E" | tail -2 | tr '\n' ' ')" = "$LAST.labels.npy $LAST.npy "
check "stat of a batch past the last one fails" \
	bash -c "! stat '$E/$(printf 'batch-%06d' "$NB").npy' 2>/dev/null"
check "the first, a middle and the last batch load with the right shapes" \
	$PY - "$E" "$NB" "$N" <<'PY'
import numpy as np, sys
e, nb, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for k in (0, nb // 2, nb - 1):
    x = np.load(f"{e}/batch-{k:06d}.npy")
    y = np.load(f"{e}/batch-{k:06d}.labels.npy")
    b = 32 if k < nb - 1 else n - 32 * (nb - 1)
    assert x.shape == (b, 224, 224, 3) and x.dtype == np.float32, x.shape
    assert (y == 0).all() and y.shape == (b,)
    # every record is the same image: every sample is identical
    assert np.array_equal(x[0], x[-1])
PY

if nm "$BATCHFS" 2>/dev/null | grep -q -E '__(asan|tsan|msan)_init'; then
	echo "skip index memory per sample: sanitizer build (shadow memory)"
else
	check "the index costs at most 48 bytes per sample (RSS $BIG - $BASE over $N)" \
		test $(((BIG - BASE) / (N - RECORDS))) -le 48
fi
unmount_wait "$M"
t_end
