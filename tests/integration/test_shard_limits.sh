#!/usr/bin/env bash
# Shards past what batchfs holds, through a real mount: a TFRecord record
# over 4 GiB (a sparse file: its payload is a hole, no disk) is a bad sample
# that names its record, offset and the limit, and the records after it are
# served; a gzip bomb (.tfrecord.gz, .tar.gz: one sample and 64 MiB of
# zeros, about 65 KB compressed) is refused by --max-inflate-ratio, naming
# the shard, the ratio reached and the option, while the good shard beside
# it is served, and --max-inflate-ratio 0 lets it through.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
OPTS=(--batch 1 --size 16x16 --dtype uint8 --cache none --threads 2)
for i in 0 1 2; do
	"$MKJPEG" --one "$D/$i.jpg" 20x20 --seed "$i" >/dev/null || { not_ok mkjpeg; t_end; }
done

# a.tfrecord: record 0, record 1 of 5 GiB (a hole), record 2
mkdir -p "$D/huge"
$PY - "$D" "$D/huge/a.tfrecord" <<'PY' || { not_ok "write the sparse shard"; t_end; }
import os, struct, sys
from tfrec import example, masked_crc, record
d, out = sys.argv[1:]
img = [open(f"{d}/{i}.jpg", "rb").read() for i in range(3)]
with open(out, "wb") as f:
    f.write(record(example({"image/encoded": img[0], "image/class/label": 10})))
    n = 5 << 30
    h = struct.pack("<Q", n)
    f.write(h + struct.pack("<I", masked_crc(h)))
    f.seek(n + 4, os.SEEK_CUR)                         # the payload: a hole
    f.write(record(example({"image/encoded": img[2], "image/class/label": 12})))
PY
check "the 5 GiB shard takes under 1 MiB of disk" \
	test "$(du -k "$D/huge/a.tfrecord" | cut -f1)" -lt 1024
mount_fg "$D/huge" "$D/m" "${OPTS[@]}" || { not_ok "mount the shard with a 5 GiB record"; t_end; }
check "the records around the one over 4 GiB are served" $PY - "$D/m" <<'PY'
import json, sys
import numpy as np
m = sys.argv[1]
assert json.load(open(m + "/dataset.json"))["samples"] == 3
for b, label in ((0, 10), (2, 12)):
    with open(f"{m}/epoch-0000/batch-{b:06d}.labels.npy", "rb") as f:
        assert int(np.load(f)[0]) == label
PY
check "reading the record over 4 GiB fails" \
	bash -c "! cat '$D/m/epoch-0000/batch-000001.npy' >/dev/null 2>&1"
check "stats.json names its record, offset, length and the limit" $PY - "$D/m" <<'PY'
import json, sys
e = json.load(open(sys.argv[1] + "/stats.json"))["errors"]
msg = [x["message"] for x in e if x["kind"] == "sample"]
assert len(msg) == 1, e
assert e[0]["shard"] == "a.tfrecord", e
assert "record 1 at offset" in msg[0] and "5368709120" in msg[0] and "4294967295" in msg[0], msg
PY
unmount_wait "$D/m"

# gzip bombs: one sample and 64 MiB of zeros
mkdir -p "$D/tfz" "$D/tgz" "$D/tfz1"
$PY - "$D" <<'PY' || { not_ok "write the gzip bombs"; t_end; }
import io, sys, tarfile, zlib
from tfrec import example, record
d = sys.argv[1]
img = open(f"{d}/0.jpg", "rb").read()
def bomb(path, head):
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(c.compress(head))
        z = bytes(1 << 20)
        for _ in range(64):
            f.write(c.compress(z))
        f.write(c.flush())
rec = record(example({"image/encoded": img, "image/class/label": 3}))
bomb(f"{d}/tfz/bomb.tfrecord.gz", rec)
bomb(f"{d}/tfz1/bomb.tfrecord.gz", rec)
import gzip
with gzip.open(f"{d}/tfz/good.tfrecord.gz", "wb") as f:
    f.write(rec * 2)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
    for name, data in (("k.jpg", img), ("k.cls", b"4")):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
bomb(f"{d}/tgz/bomb.tar.gz", buf.getvalue())   # a valid tar: zeros end it
PY
check "the bombs are small on disk" \
	test "$(du -k "$D/tfz/bomb.tfrecord.gz" | cut -f1)" -lt 1024
mount_fg "$D/tfz" "$D/z" "${OPTS[@]}" || { not_ok "mount a good shard beside a bomb"; t_end; }
check "the good shard beside a gzip bomb is served, the bomb listed" $PY - "$D/z" <<'PY'
import json, sys
m = sys.argv[1]
assert json.load(open(m + "/dataset.json"))["samples"] == 2
e = json.load(open(m + "/stats.json"))["errors"]
assert len(e) == 1 and e[0]["kind"] == "index" and e[0]["shard"] == "bomb.tfrecord.gz", e
msg = e[0]["message"]
assert "more than 100 times" in msg and "ratio " in msg and "--max-inflate-ratio" in msg, msg
PY
unmount_wait "$D/z"
mkdir -p "$D/n"
T_MOUNTS+=("$D/n")
for s in tfz1 tgz; do
	timeout 60 "$BATCHFS" mount -f "$D/$s" "$D/n" "${OPTS[@]}" >"$D/$s.out" 2>&1
	rc=$?
	mountpoint -q "$D/n" 2>/dev/null && fusermount3 -u "$D/n"
	check "a lone $s bomb is refused, naming the shard, the ratio and the option" \
		bash -c "[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
			grep -q 'bomb\.t[a-z.]*gz: gzip: inflates to more than 100 times' '$D/$s.out' &&
			grep -q 'ratio [0-9]' '$D/$s.out' && grep -q -- '--max-inflate-ratio' '$D/$s.out' ||
			{ cat '$D/$s.out'; false; }"
done
mount_fg "$D/tgz" "$D/n" "${OPTS[@]}" --max-inflate-ratio 0 ||
	{ not_ok "mount a .tar.gz bomb with --max-inflate-ratio 0"; t_end; }
check "--max-inflate-ratio 0 lets a .tar.gz bomb through" $PY - "$D/n" <<'PY'
import json, sys
m = sys.argv[1]
assert json.load(open(m + "/dataset.json"))["samples"] == 1
assert json.load(open(m + "/stats.json"))["errors"] == []
PY
unmount_wait "$D/n"
t_end
