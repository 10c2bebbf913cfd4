#!/usr/bin/env bash
# The core mount end to end: TFRecord shards made by mkshards from JPEGs the
# test generates, mounted for real and read with cat, dd, file, head,
# getfattr and np.load; bytes compared with a one-thread reference made
# without the engine or FUSE, and across thread counts and read orders.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 25 --seed 7 --gray-every 10 \
	--cmyk-every 11 >/dev/null || { not_ok "mkjpeg"; t_end; }
check "mkshards packs 75 JPEGs into 4 shards" \
	"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 20 --quiet
check "mkshards wrote 4 shard files" test "$(ls "$D/shards" | wc -l)" -eq 4

mount_fg "$D/shards" "$D/mnt" --threads 2 --cache none || { not_ok "mount"; t_end; }
M=$D/mnt
E=$M/epoch-0000
IMG=$((224 * 224 * 3 * 4))

check "epoch-0000 lists 3 batch files and 3 label files" \
	test "$(ls "$E" | tr '\n' ' ')" = "batch-000000.labels.npy batch-000000.npy batch-000001.labels.npy batch-000001.npy batch-000002.labels.npy batch-000002.npy "
check "root lists dataset.json, stats.json and the epoch" \
	test "$(ls "$M" | tr '\n' ' ')" = "dataset.json epoch-0000 stats.json "
check "stat size of a full batch is exact before decoding" \
	test "$(stat -c %s "$E/batch-000001.npy")" -eq $((128 + 32 * IMG))
check "stat size of the partial last batch is exact" \
	test "$(stat -c %s "$E/batch-000002.npy")" -eq $((128 + 11 * IMG))
check "stat size of a label file is exact" \
	test "$(stat -c %s "$E/batch-000000.labels.npy")" -eq $((128 + 32 * 8))
check "file(1) recognizes a NumPy array" \
	bash -c "file '$E/batch-000000.npy' | grep -q 'NumPy array, version 1.0'"
check "head -c 128 shows the shape (32, 224, 224, 3) and dtype <f4" \
	bash -c "head -c 128 '$E/batch-000000.npy' | grep -aq \"'descr': '<f4', 'fortran_order': False, 'shape': (32, 224, 224, 3)\""
check "head -c 128 of the last batch shows its real B" \
	bash -c "head -c 128 '$E/batch-000002.npy' | grep -aq \"'shape': (11, 224, 224, 3)\""
check "getfattr -d shows user.batchfs.shape and dtype" \
	bash -c "getfattr -d '$E/batch-000000.npy' | grep -q 'user.batchfs.shape=\"(32, 224, 224, 3)\"' && getfattr -d '$E/batch-000000.npy' | grep -q 'user.batchfs.dtype=\"float32\"'"

check "dataset.json is valid JSON with the pipeline settings" $PY - "$M" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["samples"] == 75 and d["batches_per_epoch"] == 3, d
assert d["batch_size"] == 32 and d["shape"] == [32, 224, 224, 3], d
assert d["dtype"] == "float32" and d["layout"] == "NHWC" and d["format"] == "tfrecord"
assert d["image_key"] == "image/encoded" and d["label_key"] == "image/class/label"
assert len(d["fingerprint"]) == 16 and d["batchfs_version"]
PY

check "np.load gives shapes, dtypes and labels in file order" $PY - "$E" <<'PY'
import numpy as np, sys
e = sys.argv[1]
labels = []
for k in range(3):
    x = np.load(f"{e}/batch-{k:06d}.npy")
    y = np.load(f"{e}/batch-{k:06d}.labels.npy")
    n = 32 if k < 2 else 11
    assert x.shape == (n, 224, 224, 3) and x.dtype == np.float32, x.shape
    assert y.shape == (n,) and y.dtype == np.int64
    assert 0.0 <= x.min() and x.max() <= 1.0 and x.std() > 0.05
    labels += y.tolist()
assert labels == [0] * 25 + [1] * 25 + [2] * 25, labels
PY

# The reference: the same JPEGs decoded and resized directly, one thread.
mapfile -t JPEGS < <(cd "$D/jpegs" && ls -d */* | LC_ALL=C sort)
REF=${BATCHFS%/batchfs}/tests/refbatch
(cd "$D/jpegs" && "$REF" 224 224 float32 "$D/ref0.npy" "${JPEGS[@]:0:32}" &&
	"$REF" 224 224 float32 "$D/ref2.npy" "${JPEGS[@]:64:11}") ||
	not_ok "refbatch"
check "batch 0 equals the one-thread reference byte for byte" \
	cmp "$E/batch-000000.npy" "$D/ref0.npy"
check "the partial batch equals the reference byte for byte" \
	cmp "$E/batch-000002.npy" "$D/ref2.npy"
check "cat and dd read the same bytes" \
	bash -c "cmp <(cat '$E/batch-000001.npy') <(dd if='$E/batch-000001.npy' bs=1M status=none)"
check "small odd-sized reads give the same bytes" \
	bash -c "cmp <(dd if='$E/batch-000001.npy' bs=4093 status=none) '$E/batch-000001.npy'"
check "np.load(mmap_mode='r') and np.memmap work" $PY - "$E" <<'PY'
import numpy as np, sys
p = sys.argv[1] + "/batch-000001.npy"
a = np.load(p, mmap_mode="r")
b = np.load(p)
assert a.shape == b.shape and np.array_equal(a, b)
m = np.memmap(p, dtype=np.float32, mode="r", offset=128, shape=b.shape)
assert np.array_equal(m, b)
PY
for f in "$E"/*; do md5sum <"$f"; done >"$D/sums.t2.first"
for f in "$E"/*; do md5sum <"$f"; done >"$D/sums.t2.again"
check "the same file read twice gives the same bytes" \
	cmp "$D/sums.t2.first" "$D/sums.t2.again"

check "writes fail with EROFS" bash -c "
	! touch '$M/new' 2>/dev/null &&
	! (echo x > '$E/batch-000000.npy') 2>/dev/null &&
	$PY -c \"
import errno, os, sys
try:
    os.open('$E/batch-000000.npy', os.O_WRONLY)
except OSError as e:
    sys.exit(0 if e.errno == errno.EROFS else 1)
sys.exit(1)\""
check "names that are not canonical do not exist" bash -c "
	! test -e '$E/batch-0.npy' && ! test -e '$E/batch-000003.npy' &&
	! test -e '$M/epoch-0001' && ! test -e '$M/epoch-0000/../../etc/passwd' &&
	! test -e '$E/batch-+00001.npy' && ! test -e '$E/batch-000000.npy.bak'"
check "stats.json counts what was served" $PY - "$M" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
assert s["batches_served"] >= 3 and s["samples_decoded"] >= 75, s
assert s["errors"] == [] and s["threads"] == 2 and s["memory_bytes"] > 0, s
PY
check "a second mount on the same mount point is refused as busy" bash -c "
	! '$BATCHFS' mount '$D/shards' '$M' 2>'$D/busy.err' && grep -q busy '$D/busy.err'"
unmount_wait "$M"
check "batchfs unmount leaves nothing mounted" bash -c "! mountpoint -q '$M'"

# One thread, reading in reverse order: the same bytes.
mount_fg "$D/shards" "$D/mnt1" --threads 1 --cache none || { not_ok "mount --threads 1"; t_end; }
for f in $(ls "$D/mnt1/epoch-0000" | sort -r); do :; done
for k in 2 1 0; do cat "$D/mnt1/epoch-0000/batch-00000$k.npy" >/dev/null; done
for f in "$D/mnt1/epoch-0000"/*; do md5sum <"$f"; done >"$D/sums.t1"
check "--threads 1 in reverse order gives the bytes --threads 2 gave" \
	cmp "$D/sums.t1" "$D/sums.t2.first"
fusermount3 -u "$D/mnt1"
check "fusermount3 -u works too" bash -c "sleep 0.5; ! mountpoint -q '$D/mnt1'"

# The folder layout serves the same pixels and labels as the shards.
mount_fg "$D/jpegs" "$D/mntf" --threads 2 --cache none || { not_ok "mount folder"; t_end; }
for f in "$D/mntf/epoch-0000"/*; do md5sum <"$f"; done >"$D/sums.folder"
check "a JPEG folder serves the same bytes as its TFRecord shards" \
	cmp "$D/sums.folder" "$D/sums.t2.first"
check "dataset.json of a folder lists its class names" $PY - "$D/mntf" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["format"] == "folder" and d["classes"] == ["class_000", "class_001", "class_002"], d
PY
fusermount3 -u "$D/mntf"

# uint8 and float32 agree: float32 = resized/255, uint8 = round(resized).
mount_fg "$D/shards" "$D/mnt8" --dtype uint8 --batch 16 --size 96x128 ||
	{ not_ok "mount uint8"; t_end; }
mount_fg "$D/shards" "$D/mnt32" --batch 16 --size 96x128 ||
	{ not_ok "mount float32 96x128"; t_end; }
check "uint8 batches are float32 batches *255 rounded to nearest" $PY - "$D" <<'PY'
import numpy as np, sys
d = sys.argv[1]
for k in range(5):
    u = np.load(f"{d}/mnt8/epoch-0000/batch-{k:06d}.npy")
    f = np.load(f"{d}/mnt32/epoch-0000/batch-{k:06d}.npy")
    assert u.dtype == np.uint8 and u.shape == f.shape and u.shape[1:] == (96, 128, 3)
    assert np.abs(u.astype(np.float32) - f * 255).max() <= 0.5 + 1e-3
PY
check "--size and --batch reshape the namespace" \
	test "$(ls "$D/mnt8/epoch-0000" | wc -l)" -eq 10
mount_fg "$D/shards" "$D/mnt16" --dtype float16 --batch 16 --size 96x128 \
	--label-offset -1 || { not_ok "mount float16"; t_end; }
check "float16 batches are the float32 batches rounded to half; --label-offset shifts labels" $PY - "$D" <<'PY'
import numpy as np, sys
d = sys.argv[1]
for k in range(5):
    h = np.load(f"{d}/mnt16/epoch-0000/batch-{k:06d}.npy")
    f = np.load(f"{d}/mnt32/epoch-0000/batch-{k:06d}.npy")
    assert h.dtype == np.float16 and np.array_equal(h, f.astype(np.float16))
    lh = np.load(f"{d}/mnt16/epoch-0000/batch-{k:06d}.labels.npy")
    lf = np.load(f"{d}/mnt32/epoch-0000/batch-{k:06d}.labels.npy")
    assert np.array_equal(lh, lf - 1)
PY
t_end
