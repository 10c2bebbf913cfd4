#!/usr/bin/env bash
# RandomResizedCrop through real mounts: every sample equals the
# crop-then-resize reference of the box index.json names (tests/tools/
# rrcref: a whole decode, the box cut out, resized, mirrored), gray and
# CMYK JPEGs and images the cache reduces included; the same bytes with 1
# and 2 threads, with and without the cache, cold and warm and across
# remounts; the boxes change every epoch; progressive resizing serves each
# epoch's own shape from one cache; --decode-scale auto stays close.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
RRCREF=${RRCREF:-$PWD/$BUILD/tests/rrcref}
[ -x "$RRCREF" ] || RRCREF=$(dirname "$MKJPEG")/rrcref

# 60 JPEGs of 40..260 px: 4:2:0, 4:2:2, 4:4:4, every 7th gray, every 9th
# CMYK; with --cache-res 128 about half of them are reduced
"$MKJPEG" "$D/jpegs" --classes 3 --per-class 20 --seed 41 --min-size 40 \
	--max-size 260 --gray-every 7 --cmyk-every 9 >/dev/null || { not_ok mkjpeg; t_end; }
"$MKJPEG" "$D/prog" --classes 1 --per-class 12 --seed 42 --min-size 50 \
	--max-size 200 --progressive >/dev/null || { not_ok "mkjpeg progressive"; t_end; }
for f in "$D/prog/class_000/"*; do cp "$f" "$D/jpegs/class_002/p-$(basename "$f")"; done
A=(--augment rrc,flip --shuffle 9 --epochs 3 --batch 8 --size 48x40 --cache-res 128)

sums() { (cd "$1" && for f in epoch-*/*.npy; do printf '%s ' "$f"; md5sum <"$f"; done); }
stat_of() { $PY -c "import json,sys; s=json.load(open('$1/stats.json')); print(eval(sys.argv[1]))" "$2"; }

mount_fg "$D/jpegs" "$D/m1" "${A[@]}" --cache none --threads 1 || { not_ok "mount 1 thread"; t_end; }
check "dataset.json describes the sampler, the cache's copy and each epoch's size" $PY - "$D/m1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["augment"] == ["rrc", "flip"], d["augment"]
r = d["rrc"]
assert r["scale"] == [0.08, 1] and abs(r["ratio"][0] - 0.75) < 1e-9, r
assert r["cache_res"] == 128 and r["decode_scale"] == "exact", r
assert d["size_schedule"] == [{"first_epoch": 0, "last_epoch": 2, "size": [48, 40]}], d["size_schedule"]
assert d["shape"] == [8, 48, 40, 3], d["shape"]
PY
check "every sample is the crop-then-resize of the box index.json names (gray, CMYK, progressive, reduced)" \
	$PY - "$D/m1" "$D/jpegs" "$RRCREF" 128 <<'PY'
import json, subprocess, sys, tempfile
import numpy as np
m, src, ref_bin, res = sys.argv[1:5]
n = reduced = flipped = 0
kinds = set()
for e in range(3):
    nb = json.load(open(m + "/dataset.json"))["batches_per_epoch"]
    for k in range(nb):
        x = np.load(f"{m}/epoch-{e:04d}/batch-{k:06d}.npy")
        idx = json.load(open(f"{m}/epoch-{e:04d}/batch-{k:06d}.index.json"))
        assert idx["size"] == [48, 40]
        args = []
        for s in idx["samples"]:
            y, xx, h, w = s["box"]
            H, W = s["image_size"]
            assert 0 <= y and 0 <= xx and y + h <= H and xx + w <= W, s
            args += [f"{src}/{s['shard']}", str(y), str(xx), str(h), str(w), str(int(s["flip"]))]
            reduced += min(H, W) > int(res)
            flipped += s["flip"]
        with tempfile.NamedTemporaryFile(suffix=".npy") as t:
            subprocess.run([ref_bin, "48", "40", "float32", res, t.name] + args, check=True)
            ref = np.load(t.name)
        for p in range(len(x)):
            if not np.array_equal(x[p], ref[p]):
                raise SystemExit(f"epoch {e} batch {k} position {p} differs: max "
                                 f"{np.abs(x[p] - ref[p]).max()} ({idx['samples'][p]})")
            n += 1
assert n == 3 * 72 and reduced > 20 and 0.3 < flipped / n < 0.7, (n, reduced, flipped)
print(f"{n} samples equal, {reduced} from reduced copies, {flipped} flipped")
PY
check "boxes change from epoch to epoch" $PY - "$D/m1" <<'PY'
import json, sys
m = sys.argv[1]
def boxes(e):
    out = {}
    for k in range(9):
        for s in json.load(open(f"{m}/epoch-{e:04d}/batch-{k:06d}.index.json"))["samples"]:
            out[s["sample"]] = tuple(s["box"])
    return out
a, b = boxes(0), boxes(1)
assert sum(a[i] != b[i] for i in a) > 0.9 * len(a)
PY
check "a JPEG that decoded whole once is decoded only down to its box in later epochs" \
	$PY - "$D/m1" <<'PY'
import json, sys
m = sys.argv[1]
s = json.load(open(m + "/stats.json"))
small = sum(min(x["image_size"]) <= 128 for k in range(9)
            for x in json.load(open(f"{m}/epoch-0000/batch-{k:06d}.index.json"))["samples"])
# epochs 1 and 2 of every image the cache would keep as decoded; the
# samples compared above include them
assert small >= 20 and s["boxes_stopped_early"] >= 2 * small, (small, s["boxes_stopped_early"])
assert s["boxes_stopped_early"] <= s["samples_decoded"] - 72, s
PY
sums "$D/m1" >"$D/sums.1"
unmount_wait "$D/m1"

# JPEGs cut at 60%: a box above the cut would decode if the stream were
# not read to its end the first time; they are bad in every epoch, with
# and without the cache, and never served.
mkdir -p "$D/cut/a"
for f in "$D/jpegs/class_000/"*; do cp "$f" "$D/cut/a/"; done
for f in $(ls "$D/cut/a" | head -3); do
	n=$(stat -c %s "$D/cut/a/$f")
	head -c $((n * 6 / 10)) "$D/jpegs/class_000/$f" >"$D/cut/a/$f"
	echo "$f"
done >"$D/cut.names"
for c in none "$D/cutcache"; do
	mount_fg "$D/cut" "$D/cm" --augment rrc --shuffle 5 --epochs 3 --batch 4 --size 32x32 \
		--on-error skip --cache "$c" || { not_ok "mount cut JPEGs"; t_end; }
	check "JPEGs cut below many of their boxes are bad in every epoch (--cache $(basename "$c"))" \
		$PY - "$D/cm" "$D/cut.names" <<'PY'
import json, os, sys
m, names = sys.argv[1], set(open(sys.argv[2]).read().split())
for e in range(3):
    replaced = []
    for k in range(json.load(open(m + "/dataset.json"))["batches_per_epoch"]):
        for x in json.load(open(f"{m}/epoch-{e:04d}/batch-{k:06d}.index.json"))["samples"]:
            assert os.path.basename(x["shard"]) not in names, (e, k, x)
            if "replaces" in x:
                replaced.append(os.path.basename(x["replaces"]["shard"]))
                assert x["sample"] == 3, x  # the first good one after them
    assert sorted(replaced) == sorted(names), (e, replaced)
s = json.load(open(m + "/stats.json"))
assert s["errors_total"] == 3, s["errors_total"]
PY
	unmount_wait "$D/cm"
done

mount_fg "$D/jpegs" "$D/m2" "${A[@]}" --cache none --threads 2 || { not_ok "mount 2 threads"; t_end; }
sums "$D/m2" >"$D/sums.2"
check "the same bytes with 1 and 2 threads" cmp "$D/sums.1" "$D/sums.2"
unmount_wait "$D/m2"

# With a cache: the first epoch fills it with the decoded (reduced) copies,
# and every epoch of a remount crops from them without decoding.
mount_fg "$D/jpegs" "$D/c1" "${A[@]}" --cache "$D/cache" --threads 2 || { not_ok "mount cold cache"; t_end; }
sums "$D/c1" >"$D/sums.cold"
check "the epochs that fill the cache have the bytes of a mount without it" cmp "$D/sums.1" "$D/sums.cold"
check "one copy a sample is cached, not one a box" $PY - "$D/c1" <<'PY'
import json, sys, time
for _ in range(100):
    s = json.load(open(sys.argv[1] + "/stats.json"))
    if s["cache"]["entries"] >= 72:
        break
    time.sleep(0.1)
assert s["cache"]["entries"] == 72, s["cache"]
PY
unmount_wait "$D/c1"
mount_fg "$D/jpegs" "$D/c2" "${A[@]}" --cache "$D/cache" --threads 1 || { not_ok "mount warm cache"; t_end; }
sums "$D/c2" >"$D/sums.warm"
check "after a remount the warm epochs decode nothing and have the same bytes" bash -c "
	cmp '$D/sums.1' '$D/sums.warm' &&
	test \"\$(stat_of() { :; }; $PY -c \"import json; s=json.load(open('$D/c2/stats.json')); print(s['samples_decoded'], s['cache']['hits'] >= 216)\")\" = '0 True'"
unmount_wait "$D/c2"
mount_fg "$D/jpegs" "$D/c3" "${A[@]}" --cache "$D/cache" --threads 2 || { not_ok "mount warm cache again"; t_end; }
sums "$D/c3" >"$D/sums.warm2"
check "and again on another remount, with 2 threads" cmp "$D/sums.1" "$D/sums.warm2"
unmount_wait "$D/c3"

# Stage 2 after the crop: normalization, NCHW and float16.
mount_fg "$D/jpegs" "$D/n" "${A[@]}" --cache "$D/cache" --layout nchw --dtype float16 \
	--mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 || { not_ok "mount nchw float16"; t_end; }
check "normalized float16 NCHW samples are the reference normalized, rounded and laid out" \
	$PY - "$D/n" "$D/jpegs" "$RRCREF" <<'PY'
import json, subprocess, sys, tempfile
import numpy as np
m, src, ref_bin = sys.argv[1:4]
mean = np.array([0.485, 0.456, 0.406], np.float32)
std = np.array([0.229, 0.224, 0.225], np.float32)
for e in (0, 2):
    for k in (0, 5):
        x = np.load(f"{m}/epoch-{e:04d}/batch-{k:06d}.npy")
        assert x.dtype == np.float16 and x.shape[1:] == (3, 48, 40), x.shape
        idx = json.load(open(f"{m}/epoch-{e:04d}/batch-{k:06d}.index.json"))
        args = []
        for s in idx["samples"]:
            args += [f"{src}/{s['shard']}"] + [str(v) for v in s["box"]] + [str(int(s["flip"]))]
        with tempfile.NamedTemporaryFile(suffix=".npy") as t:
            subprocess.run([ref_bin, "48", "40", "float32", "128", t.name] + args, check=True)
            ref = np.load(t.name)
        want = ((ref - mean) / std).astype(np.float16).transpose(0, 3, 1, 2)
        assert np.array_equal(x, want), (e, k, np.abs(x.astype(np.float32) - want).max())
PY
unmount_wait "$D/n"

# Progressive resizing: each epoch its own shape, all from the one cache.
mount_fg "$D/jpegs" "$D/p" --augment rrc --shuffle 9 --epochs 3 --batch 8 --cache-res 128 \
	--size-schedule 32@0,40x24@1,56@2 --cache "$D/cache" --dtype uint8 ||
	{ not_ok "mount size schedule"; t_end; }
check "each epoch folder serves its own shape (header, xattr, dataset.json) from the one cache" \
	$PY - "$D/p" "$D/jpegs" "$RRCREF" <<'PY'
import json, os, subprocess, sys, tempfile
import numpy as np
m, src, ref_bin = sys.argv[1:4]
d = json.load(open(m + "/dataset.json"))
sched = [(x["first_epoch"], x["last_epoch"], tuple(x["size"])) for x in d["size_schedule"]]
assert sched == [(0, 0, (32, 32)), (1, 1, (40, 24)), (2, 2, (56, 56))], sched
for e, size in ((0, (32, 32)), (1, (40, 24)), (2, (56, 56))):
    for k in range(9):
        f = f"{m}/epoch-{e:04d}/batch-{k:06d}.npy"
        x = np.load(f)
        assert x.shape[1:] == size + (3,) and x.dtype == np.uint8, (f, x.shape)
        assert os.path.getsize(f) == 128 + x.nbytes
        assert os.getxattr(f, "user.batchfs.shape").decode() == f"({len(x)}, {size[0]}, {size[1]}, 3)"
    idx = json.load(open(f"{m}/epoch-{e:04d}/batch-000003.index.json"))
    args = []
    for s in idx["samples"]:
        args += [f"{src}/{s['shard']}"] + [str(v) for v in s["box"]] + [str(int(s["flip"]))]
    with tempfile.NamedTemporaryFile(suffix=".npy") as t:
        subprocess.run([ref_bin, str(size[0]), str(size[1]), "uint8", "128", t.name] + args, check=True)
        assert np.array_equal(np.load(t.name), np.load(f"{m}/epoch-{e:04d}/batch-000003.npy"))
s = json.load(open(m + "/stats.json"))
assert s["samples_decoded"] == 0 and s["cache"]["hits"] >= 216, (s["samples_decoded"], s["cache"])
PY
unmount_wait "$D/p"

# --decode-scale auto: boxes decoded at a reduced IDCT scale; no cache.
"$MKJPEG" "$D/big" --classes 1 --per-class 16 --seed 43 --min-size 300 --max-size 420 >/dev/null
mount_fg "$D/big" "$D/e" --augment rrc --shuffle 3 --batch 8 --size 32x32 --cache none ||
	{ not_ok "mount exact"; t_end; }
mount_fg "$D/big" "$D/a" --augment rrc --shuffle 3 --batch 8 --size 32x32 --decode-scale auto \
	--cache "$D/cache" || { not_ok "mount decode-scale auto"; t_end; }
check "--decode-scale auto keeps the boxes, changes pixels a little and uses no cache" \
	$PY - "$D/e" "$D/a" <<'PY'
import json, sys
import numpy as np
e, a = sys.argv[1:3]
assert json.load(open(a + "/dataset.json"))["cache"] == "none"
diff = []
for k in range(2):
    x = np.load(f"{e}/epoch-0000/batch-{k:06d}.npy")
    y = np.load(f"{a}/epoch-0000/batch-{k:06d}.npy")
    ie = json.load(open(f"{e}/epoch-0000/batch-{k:06d}.index.json"))["samples"]
    ia = json.load(open(f"{a}/epoch-0000/batch-{k:06d}.index.json"))["samples"]
    assert [s["box"] for s in ie] == [s["box"] for s in ia]
    diff.append(np.abs(x - y))
diff = np.concatenate(diff)
assert 0 < diff.mean() < 0.05, (diff.mean(), diff.max())
print("mean abs diff", diff.mean(), "max", diff.max())
PY
unmount_wait "$D/a"
unmount_wait "$D/e"

# PNG and WebP go through the same crop: decoded whole, then cropped
if command -v cwebp >/dev/null; then
	mkdir -p "$D/mixed/a" "$D/mixed/b"
	$PY - "$D/mixed" <<'PY' || not_ok "write PNGs"
import struct, sys, zlib
import numpy as np
d = sys.argv[1]
def png(path, img, bits=8):
    h, w, c = img.shape
    ct = {1: 0, 3: 2, 4: 6}[c]
    raw = b"".join(b"\0" + (img[y].astype(">u2") if bits == 16 else img[y]).tobytes() for y in range(h))
    chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bits, ct, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
rng = np.random.default_rng(5)
for k in range(12):
    h, w = int(rng.integers(30, 200)), int(rng.integers(30, 200))
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255 // w), (yy * 255 // h), ((xx + yy) * 3) % 256], -1)
    img = (base + rng.integers(0, 40, base.shape)).clip(0, 255).astype(np.uint8)
    cls = "ab"[k % 2]
    if k % 3 == 0:
        png(f"{d}/{cls}/{k}.png", img)
    elif k % 3 == 1:   # RGBA, alpha dropped
        png(f"{d}/{cls}/{k}.png", np.concatenate([img, img[..., :1]], -1))
    else:              # 16-bit: the high byte
        png(f"{d}/{cls}/{k}.png", img.astype(np.uint16) * 257 + 3, bits=16)
PY
	for f in "$D"/mixed/a/0.png "$D"/mixed/b/1.png "$D"/mixed/a/2.png; do
		cwebp -quiet -q 70 "$f" -o "${f%.png}.webp"
	done
	cwebp -quiet -lossless "$D/mixed/b/5.png" -o "$D/mixed/b/5l.webp"
	cp "$D/jpegs/class_000/"$(ls "$D/jpegs/class_000" | head -1) "$D/mixed/a/j.jpg"
	M=(--augment rrc,flip --shuffle 4 --epochs 2 --batch 6 --size 40x48 --cache-res 96)
	mount_fg "$D/mixed" "$D/px" "${M[@]}" --cache none --threads 2 || { not_ok "mount mixed"; t_end; }
	check "rrc: PNG and WebP samples are the crop-then-resize of their boxes too" \
		$PY - "$D/px" "$D/mixed" "$RRCREF" 96 <<'PY'
import json, subprocess, sys, tempfile
import numpy as np
m, src, ref_bin, res = sys.argv[1:5]
n = 0
kinds = set()
for e in range(2):
    nb = json.load(open(m + "/dataset.json"))["batches_per_epoch"]
    for k in range(nb):
        x = np.load(f"{m}/epoch-{e:04d}/batch-{k:06d}.npy")
        idx = json.load(open(f"{m}/epoch-{e:04d}/batch-{k:06d}.index.json"))
        args = []
        for s in idx["samples"]:
            y, xx, h, w = s["box"]
            args += [f"{src}/{s['shard']}", str(y), str(xx), str(h), str(w), str(int(s["flip"]))]
            kinds.add(s["shard"].rsplit(".", 1)[1])
        with tempfile.NamedTemporaryFile(suffix=".npy") as t:
            subprocess.run([ref_bin, "40", "48", "float32", res, t.name] + args, check=True)
            ref = np.load(t.name)
        for p in range(len(x)):
            assert np.array_equal(x[p], ref[p]), (e, k, p, idx["samples"][p])
            n += 1
st = json.load(open(m + "/stats.json"))
assert st["errors_total"] == 0, st["errors"]
assert kinds == {"png", "webp", "jpg"}, kinds
print(n, "samples equal")
PY
	mount_fg "$D/mixed" "$D/pc" "${M[@]}" --cache "$D/mixcache" --threads 1 ||
		{ not_ok "mount mixed with a cache"; t_end; }
	sums "$D/px" >"$D/px.sums"
	sums "$D/pc" >"$D/pc.cold"
	unmount_wait "$D/pc"
	mount_fg "$D/mixed" "$D/pc" "${M[@]}" --cache "$D/mixcache" --threads 2 ||
		{ not_ok "remount mixed with a cache"; t_end; }
	sums "$D/pc" >"$D/pc.warm"
	check "rrc: a mixed folder's bytes are the same with the cache, cold and warm, 1 and 2 threads" \
		bash -c "cmp '$D/px.sums' '$D/pc.cold' && cmp '$D/px.sums' '$D/pc.warm'"
	check "rrc: ... and the warm mount took them from the cache" \
		test "$(stat_of "$D/pc" "s['cache']['hits'] > 0 and s['samples_decoded'] == 0")" = True
	unmount_wait "$D/pc"
	unmount_wait "$D/px"
else
	echo "skip rrc_png_webp: cwebp not found (make deps installs the webp package)"
fi

# one mount for two ranks: each rank's boxes and bytes are those of a mount of its own
R=(--augment rrc,flip --shuffle 6 --epochs 2 --batch 8 --size 32x32 --cache none
   --size-schedule 24@0,32@1)
mount_fg "$D/jpegs" "$D/node" "${R[@]}" --ranks 0-1 --world 2 || { not_ok "mount --ranks 0-1"; t_end; }
mount_fg "$D/jpegs" "$D/r1" "${R[@]}" --rank 1 --world 2 || { not_ok "mount --rank 1"; t_end; }
check "rrc with --ranks: rank 1's batches are a --rank 1 mount's, byte for byte" bash -c "
	cd '$D/node/rank-1' && n=0 && for f in epoch-*/*.npy; do
		cmp \"\$f\" '$D/r1/'\"\$f\" || exit 1; n=\$((n + 1)); done && test \$n -eq 20"
check "... and so are its boxes, flips and each epoch's shape" $PY - "$D/node/rank-1" "$D/r1" <<'PY'
import json, sys
a, b = sys.argv[1:3]
nb = json.load(open(b + "/dataset.json"))["batches_per_epoch"]
for e in range(2):
    for k in range(nb):
        p = f"epoch-{e:04d}/batch-{k:06d}.index.json"
        x, y = json.load(open(f"{a}/{p}")), json.load(open(f"{b}/{p}"))
        assert x.pop("rank") == 1, p
        assert x == y and y["size"] == [[24, 24], [32, 32]][e], (p, x, y)
PY
unmount_wait "$D/r1"
unmount_wait "$D/node"

check "--size-schedule without rrc is refused with a reason" bash -c "
	! '$BATCHFS' mount -f '$D/jpegs' '$D/x' --size-schedule 32@0 2>'$D/err' &&
	grep -q 'need --augment rrc' '$D/err'"
check "rrc with --augment crop is refused" bash -c "
	! '$BATCHFS' mount -f '$D/jpegs' '$D/x' --augment rrc,crop 2>'$D/err' &&
	grep -q 'crops by itself' '$D/err'"
t_end
