#!/usr/bin/env bash
# Prometheus metrics of a real mount: `batchfs metrics MNT`, the
# --metrics-file and the --metrics-port page, parsed with prometheus_client's
# own parser; names, types and values checked against stats.json; the page
# scraped while an epoch is read; a non-loopback address refused unless
# --metrics-public asks for it.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

if ! $PY -c 'import prometheus_client, numpy' 2>/dev/null; then
	echo "skip test_metrics: python3 lacks prometheus_client or numpy (make python-deps)"
	exit 0
fi

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 25 --seed 5 >/dev/null || { not_ok "mkjpeg"; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 20 --quiet || { not_ok "mkshards"; t_end; }

M=$D/mnt
mount_fg "$D/shards" "$M" --threads 2 --size 32 --batch 8 --epochs 2 \
	--cache "$D/cache" --metrics-port 0 --metrics-file "$D/textfile/batchfs.prom" \
	--metrics-interval 1 2>/dev/null
# the directory must exist: the mount fails first, with the reason
check "a --metrics-file in a missing directory fails the mount with its name" \
	bash -c "grep -q 'metrics-file $D/textfile/batchfs.prom' '$T_DIR/mount.log' && ! mountpoint -q '$M'"
mkdir -p "$D/textfile"
mount_fg "$D/shards" "$M" --threads 2 --size 32 --batch 8 --epochs 2 \
	--cache "$D/cache" --metrics-port 0 --metrics-file "$D/textfile/batchfs.prom" \
	--metrics-interval 1 || { not_ok "mount"; t_end; }
PORT=$(sed -n 's,.*http://127\.0\.0\.1:\([0-9]*\)/metrics.*,\1,p' "$T_DIR/mount.log" | tail -1)
check "the mount message names the metrics page on 127.0.0.1" test -n "$PORT"
check "the metrics file is there once the mount is" test -s "$D/textfile/batchfs.prom"

check "the page, scraped after each batch of two epochs, counts them as they are read" \
	$PY - "$M" "$PORT" <<'PY'
import glob, sys, urllib.request
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

mnt, port = sys.argv[1], sys.argv[2]

def scrape():
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=30) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items()
                                      if k not in ("mount", "rank"))))] = s.value
    return out

seen, read = [], 0
for e in (0, 1):
    files = sorted(glob.glob("%s/epoch-%04d/batch-*[0-9].npy" % (mnt, e)))
    assert len(files) == 10, files
    for f in files:
        assert np.load(f).shape[1:] == (32, 32, 3)
        read += 1
        m = scrape()
        served = m[("batchfs_batches_served_total", ())]
        # every batch read so far is counted, none that was not
        assert served == read, (served, read)
        seen.append(m)
# mid-epoch scrapes saw the epoch in progress
assert any(0 < s[("batchfs_batches_served_total", ())] < 10 for s in seen)
last = seen[-1]
assert last[("batchfs_cache_hits_total", ())] > 0, "epoch 1 came from the cache"
assert last[("batchfs_batch_wait_seconds_count", ())] >= 1
for a, b in zip(seen, seen[1:]):
    for k, v in a.items():
        if k[0].endswith("_total") and k in b:
            assert b[k] >= v, (k, v, b[k])
PY

check "batchfs metrics MNT parses, with the types and labels Prometheus expects" \
	bash -c "'$BATCHFS' metrics '$M' > '$D/m1.txt' && $PY - '$D/m1.txt' '$M' <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
text, mnt = open(sys.argv[1]).read(), sys.argv[2]
fams = {f.name: f for f in text_string_to_metric_families(text)}
for f in fams.values():
    assert f.name.startswith('batchfs_'), f.name
    for s in f.samples:
        assert s.labels['mount'] == mnt and s.labels['rank'] == '0', s
# counters lose _total in the family name, as the parser reads them
for c in ('batchfs_batches_served', 'batchfs_samples_decoded', 'batchfs_cache_hits',
          'batchfs_errors', 'batchfs_cache_dropped', 'batchfs_shard_read_bytes'):
    assert fams[c].type == 'counter', (c, fams[c].type)
for g in ('batchfs_uptime_seconds', 'batchfs_memory_bytes', 'batchfs_cache_hit_ratio'):
    assert fams[g].type == 'gauge', g
for h in ('batchfs_batch_wait_seconds', 'batchfs_decode_seconds'):
    assert fams[h].type == 'histogram', h
    b = [s for s in fams[h].samples if s.name == h + '_bucket']
    assert b[-1].labels['le'] == '+Inf' and len(b) == 17, b
    assert all(x.value <= y.value for x, y in zip(b, b[1:]))
    cnt = [s.value for s in fams[h].samples if s.name == h + '_count'][0]
    assert b[-1].value == cnt
assert {s.labels['cause'] for s in fams['batchfs_cache_dropped'].samples} == {'queue', 'full'}
PY"

# Values: one read of stats.json against one run of `batchfs metrics`, the
# mount idle: every counter the same; what moves with the clock no later.
cat "$M/stats.json" > "$D/s_before.json"
"$BATCHFS" metrics "$M" > "$D/m2.txt"
cat "$M/stats.json" > "$D/s_after.json"
# the file as rewritten after that (every second here; deadline 30 s)
touch "$D/marker"
for i in $(seq 1 300); do
	[ "$D/textfile/batchfs.prom" -nt "$D/marker" ] && break
	sleep 0.1
done
cp "$D/textfile/batchfs.prom" "$D/file.txt"
check "the values are stats.json's (batchfs metrics, and the --metrics-file)" \
	$PY - "$D/s_before.json" "$D/m2.txt" "$D/s_after.json" "$D/file.txt" <<'PY'
import json, sys
from prometheus_client.parser import text_string_to_metric_families
before = json.load(open(sys.argv[1]))
after = json.load(open(sys.argv[3]))

def parse(path):
    out = {}
    for f in text_string_to_metric_families(open(path).read()):
        for s in f.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items()
                                      if k not in ("mount", "rank"))))] = s.value
    return out

same = {  # metric -> stats.json path: constant while the mount is idle
    "batchfs_batches_served_total": "batches_served",
    "batchfs_samples_served_total": "samples_served",
    "batchfs_batches_produced_total": "batches_produced",
    "batchfs_batches_pushed_total": "batches_pushed",
    "batchfs_pushed_bytes_total": "bytes_pushed",
    "batchfs_samples_decoded_total": "samples_decoded",
    "batchfs_decode_attempts_total": "decode_attempts",
    "batchfs_shard_read_bytes_total": "bytes_read",
    "batchfs_threads": "threads",
    "batchfs_samples_per_second": "samples_per_second",
    "batchfs_memory_budget_bytes": "memory_budget",
    "batchfs_slots": "slots.total",
    "batchfs_cache_hits_total": "cache.hits",
    "batchfs_cache_misses_total": "cache.misses",
    "batchfs_cache_hit_ratio": "cache.hit_rate",
    "batchfs_cache_inserts_total": "cache.inserts",
    "batchfs_cache_entries": "cache.entries",
    "batchfs_cache_size_limit_bytes": "cache.size_limit",
    "batchfs_batch_wait_seconds_count": "histograms.reader_wait_seconds.count",
    "batchfs_batch_wait_seconds_sum": "histograms.reader_wait_seconds.sum",
    "batchfs_decode_seconds_count": "histograms.decode_seconds.count",
    "batchfs_decode_seconds_sum": "histograms.decode_seconds.sum",
}

def get(d, path):
    for p in path.split("."):
        d = d[p]
    return d

assert before["samples_decoded"] == after["samples_decoded"], "the mount was not idle"
for path in (sys.argv[2], sys.argv[4]):
    m = parse(path)
    for name, p in same.items():
        assert m[(name, ())] == get(before, p) == get(after, p), (path, name, m[(name, ())], get(before, p))
    # the histograms' counts are the engine's own counters
    assert m[("batchfs_batch_wait_seconds_count", ())] == before["reader_waits"]
    assert m[("batchfs_decode_seconds_count", ())] == before["samples_decoded"]
    assert abs(m[("batchfs_batch_wait_seconds_sum", ())] - before["reader_wait_seconds"]) <= 1e-5 * max(1, before["reader_wait_seconds"])
    cum = 0
    for le, c in zip(before["histograms"]["decode_seconds"]["le"] + ["+Inf"],
                     before["histograms"]["decode_seconds"]["counts"]):
        cum += c
        got = [v for (n, lab), v in m.items() if n == "batchfs_decode_seconds_bucket"
               and float(dict(lab)["le"]) == float(le)]
        assert got == [cum], (le, got, cum)
    assert m[("batchfs_errors_total", (("kind", "sample"),))] + \
        m[("batchfs_errors_total", (("kind", "index"),))] == before["errors_total"]
m = parse(sys.argv[2])
assert before["uptime_seconds"] <= m[("batchfs_uptime_seconds", ())] <= after["uptime_seconds"]
PY

check "the page answers only GET: POST is refused with 405" $PY - "$PORT" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(
        "http://127.0.0.1:%s/metrics" % sys.argv[1], data=b"x", method="POST"), timeout=30)
    raise SystemExit("POST was answered")
except urllib.error.HTTPError as e:
    assert e.code == 405 and e.headers["Allow"] == "GET, HEAD", e
try:
    urllib.request.urlopen("http://127.0.0.1:%s/stats.json" % sys.argv[1], timeout=30)
    raise SystemExit("another path was answered")
except urllib.error.HTTPError as e:
    assert e.code == 404
PY

unmount_wait "$M"
check "the metrics file goes with the mount" test ! -e "$D/textfile/batchfs.prom"
check "and leaves no temporary file" test -z "$(ls "$D/textfile")"

# A non-loopback address: refused before anything is mounted, unless asked.
mkdir -p "$D/pub"
"$BATCHFS" mount -f "$D/shards" "$D/pub" --metrics-port 0 --metrics-addr 0.0.0.0 \
	>"$D/pub.out" 2>&1
rc=$?
check "--metrics-addr 0.0.0.0 without --metrics-public fails the mount" test "$rc" -eq 1
check "...saying why and what to add" grep -q "0.0.0.0 is not a loopback address.*--metrics-public" "$D/pub.out"
check "...and mounts nothing" bash -c "! mountpoint -q '$D/pub'"
"$BATCHFS" mount -f "$D/shards" "$D/pub" --metrics-port 0 --metrics-addr ::ffff:10.0.0.1 \
	>"$D/pub.out" 2>&1
check "an IPv6-mapped public address is refused too" grep -q "not a loopback address" "$D/pub.out"
mount_fg "$D/shards" "$D/pub" --metrics-port 0 --metrics-addr 0.0.0.0 --metrics-public \
	|| not_ok "mount with --metrics-public"
PORT=$(sed -n 's,.*http://0\.0\.0\.0:\([0-9]*\)/metrics.*,\1,p' "$T_DIR/mount.log" | tail -1)
check "with --metrics-public it binds 0.0.0.0 and serves" \
	bash -c "test -n '$PORT' && $PY -c \"import urllib.request; assert b'batchfs_uptime_seconds' in urllib.request.urlopen('http://127.0.0.1:$PORT/metrics', timeout=30).read()\""
unmount_wait "$D/pub"

# A mount of several ranks: its rank label is the range.
mount_fg "$D/shards" "$D/ranks" --world 4 --ranks 2-3 --size 32 --batch 4 --cache none \
	|| not_ok "mount --ranks 2-3"
check "a mount of --ranks 2-3 labels its samples rank=\"2-3\"" \
	bash -c "'$BATCHFS' metrics '$D/ranks' | grep -q '^batchfs_uptime_seconds{mount=\"$D/ranks\",rank=\"2-3\"} '"
unmount_wait "$D/ranks"

check "batchfs metrics on a directory that is not a mount fails, naming it" \
	bash -c "! '$BATCHFS' metrics '$D/shards' 2> '$D/err.txt' && grep -q 'dataset.json' '$D/err.txt'"
t_end
