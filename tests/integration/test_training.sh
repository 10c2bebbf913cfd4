#!/usr/bin/env bash
# Training semantics: augmentation (deterministic, drawn per seed, epoch and
# sample, applied after the cache), NCHW, mean/std, center-crop resizing,
# float16, and the per-batch provenance (index.json) and preview (JPEG).
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 4 --per-class 30 --seed 21 --min-size 40 \
	--max-size 120 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 50 --quiet || { not_ok mkshards; t_end; }
A=(--batch 16 --size 28x28 --shuffle 5 --epochs 2)

mount_fg "$D/shards" "$D/plain" --batch 16 --size 32x32 --cache none || { not_ok "mount plain"; t_end; }
mount_fg "$D/shards" "$D/aug" "${A[@]}" --augment flip,crop --cache "$D/c" --threads 2 ||
	{ not_ok "mount augment"; t_end; }
check "dataset.json records the augmentation and the 8/7 larger cached shape" $PY - "$D/aug" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["augment"] == ["flip", "crop"] and d["cached_shape"] == [32, 32, 3], d
assert "probability 1/2" in d["augment_rule"]
PY
check "an augmented sample is the flip/crop of its cached sample that index.json names" $PY - "$D" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
plain = np.concatenate([np.load(f"{d}/plain/epoch-0000/batch-{k:06d}.npy") for k in range(8)])
flips = 0
for e in range(2):
    for k in range(8):
        x = np.load(f"{d}/aug/epoch-{e:04d}/batch-{k:06d}.npy")
        idx = json.load(open(f"{d}/aug/epoch-{e:04d}/batch-{k:06d}.index.json"))
        assert idx["count"] == len(x)
        for p, s in enumerate(idx["samples"]):
            y0, x0, h, w = s["augment"]["crop"]
            assert (h, w) == (28, 28) and 0 <= y0 <= 4 and 0 <= x0 <= 4
            ref = plain[s["sample"], y0:y0 + 28, x0:x0 + 28]
            if s["augment"]["flip"]:
                ref = ref[:, ::-1]
                flips += 1
            assert np.array_equal(x[p], ref), (e, k, p)
share = flips / 240
assert 0.35 < share < 0.65, share
print("flip share", share)
PY
check "augmentation differs between epochs" $PY - "$D/aug" <<'PY'
import json, sys
m = sys.argv[1]
def draws(e):
    out = {}
    for k in range(8):
        for s in json.load(open(f"{m}/epoch-{e:04d}/batch-{k:06d}.index.json"))["samples"]:
            out[s["sample"]] = (s["augment"]["flip"], tuple(s["augment"]["crop"]))
    return out
a, b = draws(0), draws(1)
assert sum(a[i] != b[i] for i in a) > len(a) // 2
PY
(cd "$D/aug" && for f in epoch-*/*.npy; do md5sum "$f"; done) >"$D/aug.sums"
check "the cache holds one entry per sample, before augmentation" $PY - "$D/aug" <<'PY'
import json, sys, time
m = sys.argv[1]
for _ in range(100):
    s = json.load(open(m + "/stats.json"))
    if s["cache"]["inserts"] + s["cache"]["dropped_queue"] >= 120 or s["cache"]["entries"] >= 120:
        break
    time.sleep(0.1)
assert s["cache"]["entries"] <= 120, s["cache"]   # never one per epoch
# a sample both epochs missed is offered twice: a duplicate, never damage
assert s["cache"]["damaged"] == 0 and s["cache"]["write_errors"] == 0, s["cache"]
PY
unmount_wait "$D/aug"
mount_fg "$D/shards" "$D/aug1" "${A[@]}" --augment flip,crop --cache "$D/c" --threads 1 ||
	{ not_ok "remount augment"; t_end; }
(cd "$D/aug1" && for f in epoch-*/*.npy; do md5sum "$f"; done) >"$D/aug1.sums"
check "both augmented epochs are served from cached samples after a remount" $PY - "$D/aug1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
assert s["cache"]["hits"] >= 200 and s["samples_decoded"] <= 40, (s["cache"], s["samples_decoded"])
PY
check "augmentation is deterministic across remounts, threads and the cache" \
	cmp "$D/aug.sums" "$D/aug1.sums"
unmount_wait "$D/aug1"

mount_fg "$D/shards" "$D/nhwc" --batch 16 --size 32x32 --mean 0.485,0.456,0.406 \
	--std 0.229,0.224,0.225 || { not_ok "mount mean/std"; t_end; }
mount_fg "$D/shards" "$D/nchw" --batch 16 --size 32x32 --mean 0.485,0.456,0.406 \
	--std 0.229,0.224,0.225 --layout nchw || { not_ok "mount nchw"; t_end; }
mount_fg "$D/shards" "$D/f16" --batch 16 --size 32x32 --mean 0.485,0.456,0.406 \
	--std 0.229,0.224,0.225 --layout nchw --dtype float16 || { not_ok "mount f16"; t_end; }
check "NCHW equals the transpose of NHWC; mean/std normalize; float16 rounds it" $PY - "$D" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
mean = np.array([0.485, 0.456, 0.406], np.float32)
std = np.array([0.229, 0.224, 0.225], np.float32)
for k in range(8):
    p = np.load(f"{d}/plain/epoch-0000/batch-{k:06d}.npy")
    a = np.load(f"{d}/nhwc/epoch-0000/batch-{k:06d}.npy")
    b = np.load(f"{d}/nchw/epoch-0000/batch-{k:06d}.npy")
    h = np.load(f"{d}/f16/epoch-0000/batch-{k:06d}.npy")
    assert b.shape == (p.shape[0], 3, 32, 32) and h.dtype == np.float16
    assert np.array_equal(b, a.transpose(0, 3, 1, 2))
    assert np.allclose(a, (p - mean) / std, atol=1e-6)
    assert np.array_equal(h, b.astype(np.float16))
PY
check "getfattr shows the NCHW shape" bash -c "
	getfattr -n user.batchfs.shape '$D/nchw/epoch-0000/batch-000000.npy' | grep -q '(16, 3, 32, 32)'"
check "a preview is a JPEG contact sheet any viewer opens" bash -c "
	file '$D/nchw/epoch-0000/batch-000001.preview.jpg' | grep -q 'JPEG image data' &&
	test \$(stat -c %s '$D/nchw/epoch-0000/batch-000001.preview.jpg') -eq \$(cat '$D/nchw/epoch-0000/batch-000001.preview.jpg' | wc -c)"
check "ls lists batch and label files only" \
	test "$(ls "$D/nchw/epoch-0000" | grep -vc '\.npy$')" -eq 0
check "the preview shows the images as the model sees them, normalization undone" $PY - "$D" <<'PY'
import struct, sys
d = sys.argv[1]
j = open(f"{d}/nchw/epoch-0000/batch-000001.preview.jpg", "rb").read()
assert j[:2] == b"\xff\xd8" and j[-2:] == b"\xff\xd9" and len(j) > 1000
i = 2
while i < len(j):
    marker, seglen = j[i + 1], struct.unpack(">H", j[i + 2:i + 4])[0]
    if marker in (0xC0, 0xC1, 0xC2):
        h, w = struct.unpack(">HH", j[i + 5:i + 9])
        break
    i += 2 + seglen
assert w >= 4 * 32 and h >= 4 * 32, (w, h)   # a 4x4 grid of 32x32 tiles
PY
fusermount3 -u "$D/nhwc"; fusermount3 -u "$D/nchw"; fusermount3 -u "$D/f16"

mount_fg "$D/shards" "$D/crop" --batch 16 --size 32x32 --resize crop --crop-from 36 ||
	{ not_ok "mount crop"; t_end; }
check "--resize crop gives the center window, not the stretched image" $PY - "$D" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
c = np.load(f"{d}/crop/epoch-0000/batch-000000.npy")
p = np.load(f"{d}/plain/epoch-0000/batch-000000.npy")
assert c.shape == p.shape and not np.array_equal(c, p)
ds = json.load(open(f"{d}/crop/dataset.json"))
assert ds["resize_mode"] == "crop" and ds["crop_from"] == 36
PY
check "index.json names shard, record and label of every position" $PY - "$D/crop" <<'PY'
import json, sys
import numpy as np
m = sys.argv[1]
idx = json.load(open(m + "/epoch-0000/batch-000003.index.json"))
lab = np.load(m + "/epoch-0000/batch-000003.labels.npy")
assert [s["label"] for s in idx["samples"]] == lab.tolist()
assert all(s["shard"].startswith("train-") and s["record"] >= 0 for s in idx["samples"])
assert [s["sample"] for s in idx["samples"]] == list(range(48, 64))
PY
check "a --crop-from smaller than the size is refused" bash -c "
	! '$BATCHFS' mount -f '$D/shards' '$D/x' --size 32x32 --resize crop --crop-from 20 2>/dev/null"
check "uint8 with --mean is refused with a reason" bash -c "
	mkdir -p '$D/y'; ! '$BATCHFS' mount -f '$D/shards' '$D/y' --dtype uint8 --mean 0.5,0.5,0.5 2>'$D/y.err' &&
	grep -qi 'normal' '$D/y.err'"
t_end
