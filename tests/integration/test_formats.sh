#!/usr/bin/env bash
# PNG and WebP beside JPEG, chosen by content: a folder and a WebDataset tar
# that mix them are served with tf.io.decode_png's pixels (the committed
# TensorFlow goldens), libwebp's (dwebp -ppm) and the JPEG decoder's; tar
# labels from .cls, .txt and, with --label-key, .json; a GIF is refused by
# name; and GZIP TFRecords and a .tar.gz serve the same bytes as the same
# shards uncompressed, from the first mount and from the stored index.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
G=$PWD/tests/data/golden/png
command -v cwebp >/dev/null && command -v dwebp >/dev/null ||
	{ not_ok "cwebp/dwebp not found (make deps installs the webp package)"; t_end; }

mkdir -p "$D/folder/a" "$D/ref"
cp "$G/rgba16_37x23.png" "$D/folder/a/1.png"
cwebp -quiet -q 60 "$G/rgb8_37x23.png" -o "$D/folder/a/2.webp"
"$MKJPEG" --one "$D/folder/a/3.jpg" 37x23 --seed 5 >/dev/null
cp "$G/pal4_trns_37x23.png" "$D/folder/a/4.jpg"        # a PNG named .jpg
cwebp -quiet -lossless "$G/rgba8_37x23.png" -o "$D/folder/a/5.webp"
cp "$G/gray1_interlaced_37x23.png" "$D/folder/a/6.PNG"
cwebp -quiet -q 80 -alpha_q 40 "$G/graya8_37x23.png" -o "$D/folder/a/7.webp"
for i in 2 5 7; do dwebp -quiet "$D/folder/a/$i.webp" -ppm -o "$D/ref/$i.ppm"; done
"$BUILD/tests/refbatch" 23 37 uint8 "$D/ref/3.npy" "$D/folder/a/3.jpg" >/dev/null ||
	{ not_ok refbatch; t_end; }

OPTS=(--batch 7 --size 23x37 --dtype uint8 --cache none --threads 2)
mount_fg "$D/folder" "$D/m" "${OPTS[@]}" || { not_ok "mount folder"; t_end; }
check "a folder of JPEG, PNG and WebP serves each as its own decoder does" $PY - "$D/m" "$G" "$D/ref" <<'PY'
import json, sys
import numpy as np
m, g, ref = sys.argv[1:]
def ppm(p):
    b = open(p, "rb").read()
    parts = b.split(b"\n", 3)
    w, h = map(int, parts[1].split())
    return np.frombuffer(parts[3], np.uint8).reshape(h, w, 3)
want = [np.load(f"{g}/rgba16_37x23.u8.npy"), ppm(f"{ref}/2.ppm"), np.load(f"{ref}/3.npy")[0],
        np.load(f"{g}/pal4_trns_37x23.u8.npy"), ppm(f"{ref}/5.ppm"),
        np.load(f"{g}/gray1_interlaced_37x23.u8.npy"), ppm(f"{ref}/7.ppm")]
got = np.load(f"{m}/epoch-0000/batch-000000.npy")
assert got.shape == (7, 23, 37, 3), got.shape
for i, w in enumerate(want):
    assert np.array_equal(got[i], w), (i, int(np.abs(got[i].astype(int) - w).max()))
s = json.load(open(f"{m}/stats.json"))
assert s["errors_total"] == 0, s["errors"]
PY
unmount_wait "$D/m"

# The same images in a WebDataset tar, labels from .cls, .txt and .json.
$PY - "$D/folder/a" "$D/wds" <<'PY' || { not_ok "write tar"; t_end; }
import io, json, os, sys, tarfile
src, out = sys.argv[1:]
os.makedirs(out)
names = sorted(os.listdir(src))
def add(t, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))
ext = {"1.png": "png", "2.webp": "webp", "3.jpg": "jpeg", "4.jpg": "jpg", "5.webp": "webp",
       "6.PNG": "PNG", "7.webp": "webp"}
with tarfile.open(f"{out}/a.tar", "w") as t:
    for k, n in enumerate(names):
        key = "s%02d" % k
        add(t, f"{key}.{ext[n]}", open(os.path.join(src, n), "rb").read())
        lab = b"%d" % (10 + k)
        add(t, f"{key}.cls" if k % 2 else f"{key}.txt", lab)
        add(t, f"{key}.json", json.dumps({"caption": "x", "label": 20 + k}).encode())
PY
mount_fg "$D/wds" "$D/t" "${OPTS[@]}" || { not_ok "mount tar"; t_end; }
mount_fg "$D/wds" "$D/tj" "${OPTS[@]}" --label-key label || { not_ok "mount tar json"; t_end; }
mount_fg "$D/folder" "$D/m" "${OPTS[@]}" || { not_ok "mount folder again"; t_end; }
check "a tar of png, webp, jpeg and jpg members gives the folder's pixels" \
	cmp "$D/m/epoch-0000/batch-000000.npy" "$D/t/epoch-0000/batch-000000.npy"
check "tar labels come from .cls, else .txt" $PY - "$D/t" <<'PY'
import sys, numpy as np
l = np.load(sys.argv[1] + "/epoch-0000/batch-000000.labels.npy")
assert list(l) == [10 + k for k in range(7)], l
PY
check "with --label-key, tar labels come from that member of .json" $PY - "$D/tj" <<'PY'
import sys, numpy as np
l = np.load(sys.argv[1] + "/epoch-0000/batch-000000.labels.npy")
assert list(l) == [20 + k for k in range(7)], l
PY
unmount_wait "$D/tj"

# GIF: refused with a clear error, the rest served.
mkdir -p "$D/gif/a"
cp "$D/folder/a/1.png" "$D/folder/a/3.jpg" "$D/gif/a/"
printf 'GIF89a\001\000\001\000\000\000\000;' >"$D/gif/a/2.gif"
mount_fg "$D/gif" "$D/g" --batch 1 --size 23x37 --dtype uint8 --cache none ||
	{ not_ok "mount gif"; t_end; }
check "a GIF fails its batch, the others serve" bash -c "
	cat '$D/g/epoch-0000/batch-000000.npy' >/dev/null &&
	! cat '$D/g/epoch-0000/batch-000001.npy' >/dev/null 2>&1 &&
	cat '$D/g/epoch-0000/batch-000002.npy' >/dev/null"
check "stats.json says GIF is not decoded" $PY - "$D/g" <<'PY'
import json, sys
e = json.load(open(sys.argv[1] + "/stats.json"))["errors"]
assert len(e) == 1 and e[0]["shard"] == "a/2.gif" and "GIF images are not decoded" in e[0]["message"], e
PY
unmount_wait "$D/g"

# GZIP TFRecords and a .tar.gz: the same bytes as uncompressed.
mkdir -p "$D/tfr" "$D/tfrgz" "$D/tgz"
$PY - "$D/folder/a" "$D/tfr" <<'PY' || { not_ok "write tfrecords"; t_end; }
import os, sys
from tfrec import example, record
src, out = sys.argv[1:]
names = sorted(os.listdir(src)) * 40                 # 280 records, ~0.5 MB
for s in range(2):
    with open(f"{out}/train-{s:05d}-of-00002", "wb") as f:
        for k, n in enumerate(names[s::2]):
            f.write(record(example({"image/encoded": open(os.path.join(src, n), "rb").read(),
                                    "image/class/label": k % 5})))
PY
for f in "$D"/tfr/*; do gzip -c "$f" >"$D/tfrgz/$(basename "$f").gz"; done
gzip -c "$D/wds/a.tar" >"$D/tgz/a.tar.gz"
mount_fg "$D/tfr" "$D/p" "${OPTS[@]}" || { not_ok "mount tfrecord"; t_end; }
mount_fg "$D/tfrgz" "$D/z" --batch 7 --size 23x37 --dtype uint8 --threads 2 \
	--cache "$D/cache" || { not_ok "mount gzip tfrecord"; t_end; }
check "GZIP TFRecords serve the same batches as the same records uncompressed" \
	cmp <(cd "$D/p/epoch-0000" && cat *) <(cd "$D/z/epoch-0000" && cat *)
unmount_wait "$D/z"
mount_fg "$D/tfrgz" "$D/z" --batch 7 --size 23x37 --dtype uint8 --threads 2 \
	--cache "$D/cache" || { not_ok "remount gzip tfrecord"; t_end; }
check "a remount takes both gzip indexes from the cache" $PY - "$D/z" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
assert s["cache"]["index_hits"] == 2, s["cache"]
PY
check "and serves the same bytes from them" \
	cmp <(cd "$D/p/epoch-0000" && cat *) <(cd "$D/z/epoch-0000" && cat *)
mount_fg "$D/tgz" "$D/tz" "${OPTS[@]}" || { not_ok "mount tar.gz"; t_end; }
check "a .tar.gz serves what the .tar does" \
	cmp <(cd "$D/t/epoch-0000" && cat *) <(cd "$D/tz/epoch-0000" && cat *)
t_end
