#!/usr/bin/env bash
# WebDataset tar shards: auto-detected, the same pixels and labels as
# TFRecord shards of the same JPEGs, and a bad member gets the same clear
# error treatment as a bad record.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
TOOLS=$(cd "$HERE/../tools" && pwd)

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 12 --seed 9 --min-size 40 \
	--max-size 120 --gray-every 7 --cmyk-every 9 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/tfr" --per-shard 10 --quiet || { not_ok mkshards; t_end; }
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/wds" --per-shard 10 >/dev/null || { not_ok mkwds; t_end; }
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/wdspax" --per-shard 7 --format pax --cls-first >/dev/null ||
	{ not_ok "mkwds pax"; t_end; }

mount_fg "$D/tfr" "$D/m1" --batch 8 --size 48x40 || { not_ok "mount tfrecord"; t_end; }
mount_fg "$D/wds" "$D/m2" --batch 8 --size 48x40 || { not_ok "mount tar"; t_end; }
mount_fg "$D/wdspax" "$D/m3" --batch 8 --size 48x40 || { not_ok "mount pax tar"; t_end; }
check "tar shards are detected as WebDataset" \
	bash -c "grep -q '\"format\": \"tar\"' '$D/m2/dataset.json'"
check "tar shards give the same pixels and labels as TFRecords of the same JPEGs" \
	cmp <(cd "$D/m1/epoch-0000" && cat *) <(cd "$D/m2/epoch-0000" && cat *)
check "pax tars with .cls before .jpg and other shard sizes give the same bytes" \
	cmp <(cd "$D/m1/epoch-0000" && cat *) <(cd "$D/m3/epoch-0000" && cat *)

# A tar with a member lacking its .cls, a corrupt JPEG member, then a cut.
$PY - "$D/jpegs" "$D/bad" <<'PY' || { not_ok "write bad tar"; t_end; }
import io, os, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
jp = [os.path.join(r, f) for r, _, fs in sorted(os.walk(src)) for f in sorted(fs)]
os.makedirs(out)
def add(t, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))
with tarfile.open(f"{out}/a.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for i in range(8):                      # batch 0: good
        add(t, f"s{i:03d}.jpg", open(jp[i], "rb").read()); add(t, f"s{i:03d}.cls", b"%d" % i)
    add(t, "s008.jpg", open(jp[8], "rb").read())   # batch 1: no .cls
    for i in range(9, 16):
        add(t, f"s{i:03d}.jpg", open(jp[i], "rb").read()); add(t, f"s{i:03d}.cls", b"%d" % i)
    d = open(jp[16], "rb").read()
    add(t, "s016.jpg", d[:len(d) // 3]); add(t, "s016.cls", b"16")   # batch 2: truncated
    for i in range(17, 24):
        add(t, f"s{i:03d}.jpg", open(jp[i], "rb").read()); add(t, f"s{i:03d}.cls", b"%d" % i)
data = open(f"{out}/b.tar", "wb")
# b.tar: 8 good samples (batch 3), then cut in the middle of a member
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
    for i in range(24, 33):
        add(t, f"s{i:03d}.jpg", open(jp[i], "rb").read()); add(t, f"s{i:03d}.cls", b"%d" % i)
raw = buf.getvalue()
with tarfile.open(fileobj=io.BytesIO(raw)) as t:
    cut = t.getmember("s032.jpg").offset_data + 10
data.write(raw[:cut])
data.close()
PY
mount_fg "$D/bad" "$D/m4" --batch 8 --size 16x16 || { not_ok "mount bad tar"; t_end; }
check "only the batches with a bad member fail, with EIO" $PY - "$D/m4" <<'PY'
import errno, sys
import numpy as np
m = sys.argv[1]
for k in range(4):
    try:
        np.load(f"{m}/epoch-0000/batch-{k:06d}.npy")
        bad = False
    except OSError as e:
        assert e.errno == errno.EIO
        bad = True
    assert bad == (k in (1, 2)), k
labels = np.load(f"{m}/epoch-0000/batch-000003.labels.npy")
assert list(labels) == list(range(24, 32)), labels
PY
check "stats.json names the tar shard, the member and the reason" $PY - "$D/m4" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
msgs = [(e["shard"], e["message"]) for e in s["errors"]]
assert any(sh == "a.tar" and "s008" in m and ".cls" in m for sh, m in msgs), msgs
assert any(sh == "a.tar" and "Premature end" in m for sh, m in msgs), msgs
assert any(sh == "b.tar" for sh, m in msgs), msgs
assert "b.tar" in s["bad_shards"] and "a.tar" in s["bad_shards"]
PY
check "the log names the tar member of a bad sample" \
	grep -q "a.tar member s016.jpg" "$D/mount.log"

# GNU tar of a directory whose files are hard linked: the second name of a
# file is a hard-link member (size 0, naming the first), served as its data.
mkdir -p "$D/hl/src" "$D/hl/links" "$D/hl/copies" "$D/hl/cut"
jp=("$D"/jpegs/*/*.jpg)
for i in 0 1 2 3 4 5 6 7; do
	k=$(printf '%03d' "$i")
	case $i in
	2) ln "$D/hl/src/s000.jpg" "$D/hl/src/s$k.jpg" ;;   # a link to an image
	5) ln "$D/hl/src/s003.jpg" "$D/hl/src/s$k.jpg" ;;
	*) cp "${jp[$i]}" "$D/hl/src/s$k.jpg" ;;
	esac
	if [ "$i" = 6 ]; then
		ln "$D/hl/src/s001.cls" "$D/hl/src/s$k.cls"      # and to a label
	else
		printf '%d' "$i" >"$D/hl/src/s$k.cls"
	fi
done
tar -cf "$D/hl/links/a.tar" --sort=name -C "$D/hl/src" . &&
	tar -cf "$D/hl/copies/a.tar" --sort=name --hard-dereference -C "$D/hl/src" . ||
	{ not_ok "GNU tar"; t_end; }
check "GNU tar wrote hard-link members" \
	bash -c "test \$(tar -tvf '$D/hl/links/a.tar' | grep -c ' link to ') = 3"
mount_fg "$D/hl/links" "$D/m5" --batch 4 --size 16x16 || { not_ok "mount linked tar"; t_end; }
mount_fg "$D/hl/copies" "$D/m6" --batch 4 --size 16x16 || { not_ok "mount copied tar"; t_end; }
check "a tar with hard links has every sample" \
	grep -q '"samples": 8,' "$D/m5/dataset.json"
check "hard-linked members give the same pixels and labels as copies" \
	cmp <(cd "$D/m5/epoch-0000" && cat *) <(cd "$D/m6/epoch-0000" && cat *)
check "a hard-linked label is its target's" $PY - "$D/m5" <<'PY'
import sys
import numpy as np
labels = np.concatenate([np.load(f"{sys.argv[1]}/epoch-0000/batch-{k:06d}.labels.npy")
                         for k in range(2)])
assert list(labels) == [0, 1, 2, 3, 4, 5, 1, 7], labels
PY
# The target deleted from the archive: the link names a member that is not
# there, and its sample fails with a message naming shard and member.
cp "$D/hl/links/a.tar" "$D/hl/cut/c.tar"
tar --delete -f "$D/hl/cut/c.tar" ./s003.jpg || { not_ok "tar --delete"; t_end; }
mount_fg "$D/hl/cut" "$D/m7" --batch 4 --size 16x16 || { not_ok "mount cut tar"; t_end; }
check "a hard link whose target is gone fails its batch, the others serve" $PY - "$D/m7" <<'PY'
import errno, json, sys
import numpy as np
m = sys.argv[1]
n = json.load(open(m + "/dataset.json"))["samples"]
assert n == 7, n        # s003 has no image member left
np.load(f"{m}/epoch-0000/batch-000000.npy")
try:
    np.load(f"{m}/epoch-0000/batch-000001.npy")
    raise AssertionError("batch 1 served")
except OSError as e:
    assert e.errno == errno.EIO, e
st = json.load(open(m + "/stats.json"))
msgs = [(e["shard"], e["message"]) for e in st["errors"]]
assert msgs == [("c.tar", "member ./s005.jpg is a hard link to ./s003.jpg, "
                 "which is not an earlier member of the archive")], msgs
PY
check "the log names the shard and the member of the broken link" \
	grep -q "c.tar member ./s005.jpg: member ./s005.jpg is a hard link to ./s003.jpg" "$D/mount.log"
t_end
