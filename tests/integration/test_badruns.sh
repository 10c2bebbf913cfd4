#!/usr/bin/env bash
# Long runs of bad records: 2,000 consecutive records that are not JPEGs,
# then 64 good ones.  With --on-error skip every position of the run is
# replaced by the first good sample after it; each bad sample is decoded
# once (not once per position that walks past it), the error list and the
# log stay bounded, and stats.json says how many errors it left out.
# Counted through stats.json, never timed.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
NBAD=2000
NGOOD=64

"$MKJPEG" "$D/jpegs" --classes 1 --per-class $NGOOD --min-size 24 --max-size 48 \
	--seed 11 >/dev/null || { not_ok "mkjpeg"; t_end; }
mkdir -p "$D/shards"
$PY - "$D/jpegs" "$D/shards" $NBAD <<'PY' || { not_ok "write shards"; t_end; }
import os, sys
sys.path.insert(0, os.environ.get("HERE", "tests/integration"))
from tfrec import example, record, write_shard
jd, out, nbad = sys.argv[1], sys.argv[2], int(sys.argv[3])
jpegs = [open(os.path.join(r, f), "rb").read()
         for r, _, fs in sorted(os.walk(jd)) for f in sorted(fs)]
bad = [record(example({"image/encoded": b"not a jpeg %d" % i, "image/class/label": i}))
       for i in range(nbad)]
good = [record(example({"image/encoded": j, "image/class/label": nbad + k}))
        for k, j in enumerate(jpegs)]
write_shard(os.path.join(out, "a.tfrecord"), bad + good)
PY

stats() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1/stats.json" "$2"; }

# A daemon, so that --log is its log.
mkdir -p "$D/skip"
T_MOUNTS+=("$D/skip")
"$BATCHFS" mount "$D/shards" "$D/skip" --batch 32 --size 16x16 --threads 2 --cache none \
	--on-error skip --log "$D/skip.log" >/dev/null || { not_ok "mount --on-error skip"; t_end; }
check "every batch of the epoch is served" bash -c "cat '$D/skip/epoch-0000/'*.npy >/dev/null"
check "a bad position holds the first good sample after the run" $PY - "$D/skip" $NBAD <<'PY'
import numpy as np, sys
m, nbad = sys.argv[1], int(sys.argv[2])
x = np.load(f"{m}/epoch-0000/batch-000000.npy")
y = np.load(f"{m}/epoch-0000/batch-000000.labels.npy")
last = np.load(f"{m}/epoch-0000/batch-{nbad // 32:06d}.npy")
assert (y == nbad).all(), y
assert (x == x[0]).all()
assert np.array_equal(x[0], last[nbad % 32]), "replacement is sample nbad"
PY
attempts=$(stats "$D/skip" decode_attempts)
decoded=$(stats "$D/skip" samples_decoded)
# Every attempt that did not decode is a bad sample's: each of the 2,000 is
# tried once (walking the run again for every position was ~2 million).
# The good ones decode once per position produced (read-ahead wrapping
# into the next epoch produces a few batches twice).
check "each bad sample is decoded once ($attempts attempts, $decoded decoded)" \
	test $((attempts - decoded)) -eq $NBAD
check "errors_total counts every bad sample once" test "$(stats "$D/skip" errors_total)" = $NBAD
check "stats.json lists the first errors and says how many it left out" $PY - "$D/skip" $NBAD <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
n = int(sys.argv[2])
assert len(s["errors"]) + s["errors_left_out"] == n, (len(s["errors"]), s["errors_left_out"])
assert 0 < len(s["errors"]) <= 256
# the list is in the order bad samples were found (two workers walk the
# run); the ones a position was read for name their replacement
assert all(x["sample"] < n for x in s["errors"])
assert any(x.get("replaced_by") == n for x in s["errors"]), s["errors"][:4]
PY
size=$(stat -c %s "$D/skip.log")
check "the log stays under 1 MiB ($size bytes)" test "$size" -lt $((1 << 20))
check "the log names the first bad samples and then counts" bash -c "
	grep -Eq 'bad sample ([0-9]+) \(a.tfrecord record \1\): .*; skipped' '$D/skip.log' &&
	grep -q '1024 bad samples so far; the log names the first 64' '$D/skip.log'"
again=$(cat "$D"/skip/epoch-0000/*.npy | md5sum)
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
check "reading the epoch again decodes no bad sample again" bash -c "
	cat '$D/skip/epoch-0000/'*.npy >/dev/null
	$PY -c \"import json; s = json.load(open('$D/skip/stats.json')); assert s['decode_attempts'] - s['samples_decoded'] == $NBAD, s\""
"$BATCHFS" unmount "$D/skip" >/dev/null

# Fail mode: a batch with a bad sample fails; reading it again (a second
# epoch holds the same samples) does not decode the bad sample again.
mount_fg "$D/shards" "$D/fail" --batch 32 --size 16x16 --threads 2 --cache none \
	--epochs 2 --log "$D/fail.log" || { not_ok "mount fail mode"; t_end; }
for e in 0 1; do
	for k in $(seq 0 $(((NBAD + NGOOD - 1) / 32))); do
		cat "$D/fail/epoch-000$e/$(printf 'batch-%06d.npy' "$k")" >/dev/null 2>&1
	done
	eval "after$e=$(stats "$D/fail" decode_attempts)"
done
# 63 batches fail on their first sample, one of them after its good ones
# (batch 62: 16 bad then 16 good); 64 good samples decode per epoch.
check "fail mode: the second epoch decodes only its good samples ($after0 then $after1)" \
	test "${after0:-0}" -gt 0 -a $((after1 - after0)) -le $((NGOOD + 2))
unmount_wait "$D/fail"
# A long run at scale: 200,000 bad records (then 64 good ones) are each
# tried once, counted exactly, and cost the log a few kilobytes.
$PY - "$D/jpegs" "$D/big" 200000 <<'PY' || { not_ok "write the big shard"; t_end; }
import os, sys
sys.path.insert(0, os.environ.get("HERE", "tests/integration"))
from tfrec import example, record
jd, out, nbad = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(out, exist_ok=True)
jpegs = [open(os.path.join(r, f), "rb").read()
         for r, _, fs in sorted(os.walk(jd)) for f in sorted(fs)]
bad = record(example({"image/encoded": b"not a jpeg", "image/class/label": 1}))
with open(os.path.join(out, "a.tfrecord"), "wb") as f:
    f.write(bad * nbad)
    for k, j in enumerate(jpegs):
        f.write(record(example({"image/encoded": j, "image/class/label": k})))
PY
mkdir -p "$D/bigm"
T_MOUNTS+=("$D/bigm")
"$BATCHFS" mount "$D/big" "$D/bigm" --batch 256 --size 8x8 --threads 2 --cache none \
	--on-error skip --log "$D/big.log" >/dev/null || { not_ok "mount 200,000 bad records"; t_end; }
check "200,000 bad records: every batch served" bash -c "
	find '$D/bigm/epoch-0000' -name 'batch-*[0-9].npy' | sort | xargs cat >/dev/null"
check "200,000 bad records: each tried once, counted exactly" $PY - "$D/bigm" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
assert s["errors_total"] == 200000, s["errors_total"]
assert s["decode_attempts"] - s["samples_decoded"] == 200000, s
assert s["errors_left_out"] == 200000 - len(s["errors"]), s["errors_left_out"]
PY
size=$(stat -c %s "$D/big.log")
check "200,000 bad records: the log stays small ($size bytes)" test "$size" -lt 65536
"$BATCHFS" unmount "$D/bigm" >/dev/null
t_end
