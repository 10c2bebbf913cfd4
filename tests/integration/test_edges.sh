#!/usr/bin/env bash
# The answers a user gets at the edges: usage errors of one line, -V,
# mkshards refusing (or with --force replacing) an earlier run, compressed
# shards named with what to do (and the advice works), the rank message,
# fsname, class names that scripts can trust, and `batchfs status` read
# during an epoch.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 10 --seed 3 --min-size 24 \
	--max-size 48 >/dev/null || { not_ok "mkjpeg"; t_end; }
OPTS=(--batch 4 --size 16x16 --threads 1 --cache none)

# ---- usage errors: one line, and where the help is
for args in "mount --frob a b" "mount --batch" "mount a" "unmount --x" \
	"unmount" "status" "status --watch" "frob" "--frob" "mount -q a b"; do
	out=$("$BATCHFS" $args 2>&1 >/dev/null)
	rc=$?
	if [ "$rc" = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
		printf '%s' "$out" | grep -q "; see 'batchfs.* --help'$"; then
		ok "batchfs $args: one line and where the help is"
	else
		not_ok "batchfs $args: rc $rc, '$out'"
	fi
done
check "an unknown option is named" bash -c \
	"'$BATCHFS' mount --frob a b 2>&1 | grep -qx \"batchfs mount: unknown option '--frob'; see 'batchfs mount --help'\""
check "-V prints the version, as --version does" bash -c \
	"test \"\$('$BATCHFS' -V)\" = \"\$('$BATCHFS' --version)\" && '$BATCHFS' -V | grep -q '^batchfs [0-9]'"

# ---- mkshards: a rerun is refused with the reason; --force replaces
"$BATCHFS" mkshards "$D/jpegs" "$D/sh" --per-shard 8 --quiet ||
	{ not_ok "mkshards"; t_end; }
out=$("$BATCHFS" mkshards "$D/jpegs" "$D/sh" --per-shard 5 --quiet 2>&1)
rc=$?
check "mkshards refuses to write over an earlier run (exit 1)" test "$rc" = 1
check "... and says why and what to do: $out" bash -c "printf '%s' \"\$1\" |
	grep -q 'already holds 4 shard(s) of an earlier run (train-00000-of-00004.tfrecord ... train-00003-of-00004.tfrecord); a mount would count them with the new ones: pass --force'" _ "$out"
check "... and leaves the earlier shards as they were" \
	test "$(ls "$D/sh" | tr '\n' ' ')" = "train-00000-of-00004.tfrecord train-00001-of-00004.tfrecord train-00002-of-00004.tfrecord train-00003-of-00004.tfrecord "
check "mkshards --force replaces them" \
	"$BATCHFS" mkshards "$D/jpegs" "$D/sh" --per-shard 5 --force --quiet
check "... leaving only the new run's 6 shards" \
	test "$(ls "$D/sh" | tr '\n' ' ')" = "train-00000-of-00006.tfrecord train-00001-of-00006.tfrecord train-00002-of-00006.tfrecord train-00003-of-00006.tfrecord train-00004-of-00006.tfrecord train-00005-of-00006.tfrecord "
mount_fg "$D/sh" "$D/m1" "${OPTS[@]}" --rank 0 --world 2 ||
	{ not_ok "mount the replaced shards"; t_end; }
check "a mount of them counts each sample once (30)" $PY - "$D/m1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["samples"] == 30, d["samples"]
PY
check "the mount message says 'rank 0 of 2: 15 of 30 samples'" \
	grep -q "mounted $D/sh on $D/m1: rank 0 of 2: 15 of 30 samples, 4 batches of 4" "$T_DIR/mount.log"
check "findmnt shows the source path as what is mounted, type fuse.batchfs" \
	test "$(findmnt -n -o SOURCE,FSTYPE "$D/m1" | tr -s ' ')" = "$D/sh fuse.batchfs"
check "dataset.json: classes from image/class/synset, shuffle a boolean with its seed" \
	$PY - "$D/m1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["classes"] == ["class_000", "class_001", "class_002"], d["classes"]
assert d["classes_from"] == "image/class/synset", d
assert d["shuffle"] is False and d["seed"] is None, d
assert d["rank"] == 0 and d["world"] == 2 and d["samples_per_epoch"] == 15, d
PY
unmount_wait "$D/m1"

# a comma in the source path survives into fsname
mkdir -p "$D/a,b"
cp "$D/sh"/* "$D/a,b/"
mount_fg "$D/a,b" "$D/m2" "${OPTS[@]}" --shuffle 7 --label-offset 1 \
	--cache "$D/cache" || { not_ok "mount a source with a comma"; t_end; }
check "fsname keeps a comma of the source path" \
	test "$(findmnt -n -o SOURCE "$D/m2")" = "$D/a,b"
check "dataset.json: shuffle true with the seed; classes follow --label-offset" \
	$PY - "$D/m2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["shuffle"] is True and d["seed"] == 7, d
assert d["classes"] == [None, "class_000", "class_001", "class_002"], d["classes"]
PY
unmount_wait "$D/m2"
mount_fg "$D/a,b" "$D/m2" "${OPTS[@]}" --cache "$D/cache" ||
	{ not_ok "remount"; t_end; }
check "a remount from the cached shard indexes has the same classes" $PY - "$D/m2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
s = json.load(open(sys.argv[1] + "/stats.json"))
assert s["cache"]["index_hits"] == 6, s["cache"]
assert d["classes"] == ["class_000", "class_001", "class_002"], d["classes"]
PY
unmount_wait "$D/m2"

# ---- compressed shards: ZLIB named as such, with what to do, and that
# works; GZIP and .tar.gz read
mkdir -p "$D/z" "$D/g" "$D/tgz"
cp "$D/sh/train-00000-of-00006.tfrecord" "$D/z/plain.tfrecord"
cp "$D/sh/train-00000-of-00006.tfrecord" "$D/g/plain.tfrecord"
$PY - "$D" <<'PY'
import gzip, io, shutil, sys, tarfile, zlib
d = sys.argv[1]
raw = open(d + "/sh/train-00001-of-00006.tfrecord", "rb").read()
# as TensorFlow's TFRecordWriter(options="ZLIB"/"GZIP") writes them:
# the whole record stream through one zlib or gzip stream
open(d + "/z/zlib.tfrecord", "wb").write(zlib.compress(raw))
open(d + "/g/gzip.tfrecord", "wb").write(gzip.compress(raw))
t = io.BytesIO()
with tarfile.open(fileobj=t, mode="w") as tar:
    data = open(d + "/jpegs/class_000/" + sorted(__import__("os").listdir(d + "/jpegs/class_000"))[0], "rb").read()
    for name, payload in (("k1.jpg", data), ("k1.cls", b"0")):
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
open(d + "/tgz/train-0.tar.gz", "wb").write(gzip.compress(t.getvalue()))
PY
# advice_of SHARD_DIR SHARD: the command stats.json's message advises
advice_of() {
	$PY - "$1" "$2" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1] + "/stats.json"))["errors"]:
    if e["shard"] == sys.argv[2]:
        m = e["message"]
        print(m[m.index("decompress it first (") + 21:-1])
PY
}
mount_fg "$D/z" "$D/m3" "${OPTS[@]}" || { not_ok "mount beside a ZLIB shard"; t_end; }
check "a ZLIB TFRecord is named as such, with what to do" $PY - "$D/m3" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
m = {e["shard"]: e["message"] for e in s["errors"]}["zlib.tfrecord"]
assert "it looks like zlib data: a ZLIB-compressed TFRecord (TFRecordDataset's compression_type \"ZLIB\"), which batchfs does not read: decompress it first" in m, m
assert "length field" not in m, m
PY
cmd=$(advice_of "$D/m3" zlib.tfrecord)
unmount_wait "$D/m3"
mount_fg "$D/g" "$D/m4" "${OPTS[@]}" || { not_ok "mount beside a GZIP shard"; t_end; }
check "a GZIP TFRecord is read: no error, and its records counted" $PY - "$D/m4" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
assert s["errors"] == [], s["errors"]
# a plain shard of 5 records beside the GZIP one of 5
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["samples"] == 10, d["samples"]
PY
unmount_wait "$D/m4"
mount_fg "$D/tgz" "$D/m5" "${OPTS[@]}" || { not_ok "mount a folder of .tar.gz"; t_end; }
check "a folder of .tar.gz is read as tar shards" $PY - "$D/m5" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert s["errors"] == [] and d["samples"] == 1, (s["errors"], d)
PY
unmount_wait "$D/m5"
# the advice, followed word for word, gives shards that mount
(cd "$D/z" && rm -f NEW && eval "${cmd//FILE/zlib.tfrecord}" && mv NEW unzlib.tfrecord && rm zlib.tfrecord)
for x in z; do
	mount_fg "$D/$x" "$D/m6$x" "${OPTS[@]}" || { not_ok "mount $x after the advice"; continue; }
	check "after the advice, $x mounts without errors" $PY - "$D/m6$x" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert s["errors"] == [], s["errors"]
assert d["samples"] >= 1, d
PY
	unmount_wait "$D/m6$x"
done

# ---- batchfs status, read during an epoch
mount_fg "$D/sh" "$D/m7" --batch 2 --size 16x16 --threads 1 --cache none \
	--epochs 9999 || { not_ok "mount for status"; t_end; }
# a reader that keeps reading new batches until it is stopped
$PY - "$D/m7" "$D/reader.ready" <<'PY' &
import os, sys, time
m = sys.argv[1]
n = 0
while True:
    e, b = divmod(n, 15)
    open(f"{m}/epoch-{e:04d}/batch-{b:06d}.npy", "rb").read()
    n += 1
    if n == 3:
        open(sys.argv[2], "w").close()
    time.sleep(0.01)
PY
READER=$!
T_PIDS+=("$READER")
for i in $(seq 1 300); do [ -e "$D/reader.ready" ] && break; sleep 0.1; done
"$BATCHFS" status --json --interval 0.5 "$D/m7" >"$D/status.json" 2>"$D/status.err"
check "batchfs status --json prints one object while a reader reads" $PY - "$D/status.json" "$READER" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
s = json.loads(lines[0])
pid = int(sys.argv[2])
r = [r for r in s["readers"] if r["pid"] == pid]
assert r, s["readers"]
r = r[0]
assert 0 <= r["epoch"] < 9999 and 0 <= r["batch"] < 15, r
assert s["batches_per_epoch"] == 15 and s["epochs"] == 9999, s
assert s["samples_per_second"]["served"] > 0, s["samples_per_second"]
assert s["samples_per_second"]["decoded"] > 0, s["samples_per_second"]
assert s["memory"]["budget"] > 0 and s["memory"]["bytes"] > 0, s["memory"]
assert 0.4 < s["interval_seconds"] < 60, s
assert s["uptime_seconds"] > 0 and s["timestamp"] > 1.6e9, s
assert s["cache"] is None and s["errors_total"] == 0, s
PY
"$BATCHFS" status --interval 0.2 "$D/m7" >"$D/status.txt" 2>&1
check "batchfs status shows where the reader is" \
	grep -Eq "^readers      pid $READER: epoch-[0-9]{4}/batch-[0-9]{6} \(epoch [0-9]+ of 9999, batch [0-9]+ of 15\)" "$D/status.txt"
"$BATCHFS" status --watch --json --interval 0.2 "$D/m7" >"$D/watch.json" 2>&1 &
WATCH=$!
T_PIDS+=("$WATCH")
for i in $(seq 1 300); do [ "$(wc -l <"$D/watch.json")" -ge 3 ] && break; sleep 0.1; done
kill "$WATCH" 2>/dev/null
wait "$WATCH" 2>/dev/null
check "batchfs status --watch --json prints one object per look" $PY - "$D/watch.json" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) >= 3, lines
t = [json.loads(l)["uptime_seconds"] for l in lines]
assert t == sorted(t) and t[0] < t[-1], t
PY
kill "$READER" 2>/dev/null
wait "$READER" 2>/dev/null
check "stats.json drops a reader whose process has gone" $PY - "$D/m7" "$READER" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
assert all(r["pid"] != int(sys.argv[2]) for r in s["readers"]), s["readers"]
PY
unmount_wait "$D/m7"
out=$("$BATCHFS" status "$D/jpegs" 2>&1)
rc=$?
check "batchfs status of a directory that is no mount says so (exit 1): $out" bash -c \
	"test $rc = 1 && printf '%s' \"\$1\" | grep -q 'is not a batchfs mount'" _ "$out"
t_end
