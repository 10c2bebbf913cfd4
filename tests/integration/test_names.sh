#!/usr/bin/env bash
# Names that are not ASCII: class folders, shards and tar members named in
# UTF-8 read back exactly from dataset.json, index.json and stats.json
# (Python's json), and so do names holding a byte that is not UTF-8 (as
# \udcXX, which os.fsencode turns back into the byte).  The log shows the
# UTF-8 names as they are and escapes the invalid byte.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 1 --per-class 12 --seed 5 --min-size 24 \
	--max-size 48 >/dev/null || { not_ok mkjpeg; t_end; }

$PY - "$D" <<'PY' || { not_ok "write the trees"; t_end; }
import io, os, sys, tarfile
from tfrec import example, record, write_shard
d = os.fsencode(sys.argv[1])
src = d + b"/jpegs/class_000"
jp = [open(src + b"/" + f, "rb").read() for f in sorted(os.listdir(src))]
# ImageFolder: 猫, chien, and caf\xe9 (Latin-1 bytes, not UTF-8)
classes = ["\u732b".encode(), b"chien", b"caf\xe9"]
for c, cls in enumerate(classes):
    os.makedirs(d + b"/folder/" + cls)
    for i in range(3):
        open(d + b"/folder/" + cls + b"/img%d.jpg" % i, "wb").write(jp[3 * c + i])
# a broken image in each of two classes: stats.json names them
open(d + b"/folder/" + classes[0] + b"/z\xc3\xa9.jpg", "wb").write(jp[9][:len(jp[9]) // 3])
open(d + b"/folder/" + classes[2] + b"/z.jpg", "wb").write(b"not a jpeg")
# TFRecord: données.tfrecord (one bad record), a cut shard with a UTF-8
# name, and one whose name holds the byte 0xff
os.makedirs(d + b"/tfr")
recs = [record(example({"image/encoded": jp[i], "image/class/label": i})) for i in range(6)]
bad = record(example({"image/encoded": b"not a jpeg", "image/class/label": 9}))
write_shard(d + b"/tfr/donn\xc3\xa9es.tfrecord", recs[:3] + [bad])
write_shard(d + b"/tfr/cass\xc3\xa9-\xe7\x8c\xab.tfrecord", recs[3:5])
with open(d + b"/tfr/cass\xc3\xa9-\xe7\x8c\xab.tfrecord", "ab") as f:
    f.write(recs[5][:30])
write_shard(d + b"/tfr/x\xff.tfrecord", [bad, recs[5]])
# WebDataset: members under 猫/ and caf\xe9/
os.makedirs(d + b"/wds")
with tarfile.open(d + b"/wds/\xe7\x8c\xab.tar", "w", format=tarfile.GNU_FORMAT,
                  encoding="utf-8", errors="surrogateescape") as t:
    for i, name in enumerate(["\u732b/0001", "chien/0002", "caf\udce9/0003",
                              "caf\udce9/0004"]):
        for ext, data in ((".jpg", jp[i] if i < 3 else b"not a jpeg"),
                          (".cls", b"%d" % i)):
            ti = tarfile.TarInfo(name + ext)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
PY

mount_fg "$D/folder" "$D/mf" --batch 4 --size 16x16 --threads 1 || { not_ok "mount folder"; t_end; }
mount_fg "$D/tfr" "$D/mt" --batch 4 --size 16x16 --threads 1 --on-error skip || { not_ok "mount tfrecord"; t_end; }
mount_fg "$D/wds" "$D/mw" --batch 4 --size 16x16 --threads 1 || { not_ok "mount tar"; t_end; }
for m in mf mt mw; do
	for f in "$D/$m/epoch-0000"/*; do cat "$f" >/dev/null 2>&1; done
done

check "dataset.json holds the UTF-8 class name as it is, and valid UTF-8 only" $PY - "$D/mf" <<'PY'
import sys
raw = open(sys.argv[1] + "/dataset.json", "rb").read()
raw.decode("utf-8")                      # strict: raises on a bad byte
assert "\"\u732b\"".encode() in raw, raw
assert b"\"caf\\udce9\"" in raw, raw
PY
check "dataset.json classes read back as the exact folder names" $PY - "$D/mf" <<'PY'
import json, os, sys
classes = json.load(open(sys.argv[1] + "/dataset.json"))["classes"]
got = [os.fsencode(c) for c in classes]
assert got == [b"caf\xe9", b"chien", "\u732b".encode()], got
PY
check "index.json names each folder image exactly" $PY - "$D/mf" <<'PY'
import json, os, sys
m = sys.argv[1]
shards = []
for k in range(3):
    idx = json.load(open(f"{m}/epoch-0000/batch-{k:06d}.index.json"))
    shards += [os.fsencode(s["shard"]) for s in idx["samples"]]
want = [b"caf\xe9/img%d.jpg" % i for i in range(3)] + [b"caf\xe9/z.jpg"] + \
       [b"chien/img%d.jpg" % i for i in range(3)] + \
       ["\u732b/".encode() + b"img%d.jpg" % i for i in range(3)] + \
       ["\u732b/z\u00e9.jpg".encode()]
assert shards == want, shards
PY
check "stats.json names the bad folder images exactly" $PY - "$D/mf" <<'PY'
import json, os, sys
st = json.load(open(sys.argv[1] + "/stats.json"))
got = sorted(os.fsencode(e["shard"]) for e in st["errors"])
assert got == [b"caf\xe9/z.jpg", "\u732b/z\u00e9.jpg".encode()], got
assert sorted(os.fsencode(s) for s in st["bad_shards"]) == got, st["bad_shards"]
PY
check "index.json and stats.json name the TFRecord shards exactly" $PY - "$D/mt" <<'PY'
import json, os, sys
m = sys.argv[1]
idx = json.load(open(f"{m}/epoch-0000/batch-000000.index.json"))
names = [os.fsencode(s["shard"]) for s in idx["samples"]]
assert names == [b"cass\xc3\xa9-\xe7\x8c\xab.tfrecord"] * 2 + \
                [b"donn\xc3\xa9es.tfrecord"] * 2, names
raw = open(f"{m}/stats.json", "rb").read()
raw.decode("utf-8")
st = json.loads(raw)
bad = sorted(os.fsencode(s) for s in st["bad_shards"])
assert bad == [b"cass\xc3\xa9-\xe7\x8c\xab.tfrecord", b"donn\xc3\xa9es.tfrecord",
               b"x\xff.tfrecord"], bad
kinds = sorted((e["kind"], os.fsencode(e["shard"])) for e in st["errors"])
assert kinds == [("index", b"cass\xc3\xa9-\xe7\x8c\xab.tfrecord"),
                 ("sample", b"donn\xc3\xa9es.tfrecord"),
                 ("sample", b"x\xff.tfrecord")], kinds
PY
check "index.json and stats.json name the tar members exactly" $PY - "$D/mw" <<'PY'
import json, os, sys
m = sys.argv[1]
idx = json.load(open(f"{m}/epoch-0000/batch-000000.index.json"))
got = [(os.fsencode(s["shard"]), os.fsencode(s["member"])) for s in idx["samples"]]
t = "\u732b.tar".encode()
assert got == [(t, "\u732b/0001.jpg".encode()), (t, b"chien/0002.jpg"),
               (t, b"caf\xe9/0003.jpg"), (t, b"caf\xe9/0004.jpg")], got
st = json.load(open(f"{m}/stats.json"))
assert [os.fsencode(e["shard"]) for e in st["errors"]] == [t], st["errors"]
assert [os.fsencode(s) for s in st["bad_shards"]] == [t], st["bad_shards"]
PY
check "the log shows the UTF-8 names as they are and escapes the 0xff byte" \
	$PY - "$D/mount.log" <<'PY'
import sys
log = open(sys.argv[1], "rb").read()
log.decode("utf-8")
assert b"cass\xc3\xa9-\xe7\x8c\xab.tfrecord" in log, log[-2000:]
assert b"donn\xc3\xa9es.tfrecord" in log, log[-2000:]
assert b"x\\xff.tfrecord" in log and b"x\xff" not in log, log[-2000:]
assert b"caf\\xe9/z.jpg" in log, log[-2000:]
PY
t_end
