#!/usr/bin/env bash
# Soak, without the cache (--cache none) and with it: read 50 epochs (--epochs 50
# --shuffle, so every epoch is a new permutation and nothing comes from the
# page cache) with fresh reader processes each epoch, as DataLoader workers
# are, plus stats.json and dataset.json at every epoch and one bad record
# that fails a batch in every epoch.  The daemon's VmRSS and open file
# descriptors are sampled every 5 epochs and must stay flat; the samples
# are printed as "# soak" lines (docs/RELIABILITY.md reports them).  Epoch 0 read again at
# the end gives the bytes it gave at the start.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
EPOCHS=${SOAK_EPOCHS:-50}

"$MKJPEG" "$D/jpegs" --classes 4 --per-class 64 --min-size 64 --max-size 320 \
	--seed 31 --gray-every 9 --cmyk-every 23 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 64 --quiet || { not_ok mkshards; t_end; }
$PY - "$D" <<'PY' || { not_ok "bad shard"; t_end; }
import sys
from tfrec import example, record, write_shard
d = sys.argv[1]
write_shard(d + "/shards/zz-bad.tfrecord",
            [record(example({"image/encoded": b"not a jpeg", "image/class/label": 0}))])
PY

# Under ASan, freed memory waits in a quarantine (256 MiB by default) that
# would look like growth: keep it small so RSS means the same as without.
if ldd "$BATCHFS" 2>/dev/null | grep -q libasan; then
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4:thread_local_quarantine_size_kb=64"
fi
cat >"$D/soak.py" <<'PY'
import hashlib, json, multiprocessing as mp, os, sys, time
m, pid, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def rss_kb():
    """Anonymous resident memory: what a leak grows.  VmRSS also counts
    pages of files the daemon maps (data.mdb with the cache), which are
    page cache bounded by --cache-size, not the daemon's memory."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

def nfd():
    return len(os.listdir(f"/proc/{pid}/fd"))

def threads():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Threads:"):
            return int(line.split()[1])

def read_file(path):
    """md5 of the file, read straight from the daemon; None on EIO."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    h = hashlib.md5()
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)
    except OSError as e:
        assert e.errno == 5, e
        return None
    finally:
        os.close(fd)

def epoch_sums(e):
    d = f"{m}/epoch-{e:04d}"
    names = sorted(os.listdir(d))
    with mp.get_context("fork").Pool(2) as pool:   # fresh readers each epoch
        sums = pool.map(read_file, [f"{d}/{n}" for n in names])
    return dict(zip(names, sums))

first = epoch_sums(0)
failed = sum(v is None for v in first.values())
assert failed == 2, f"one bad record should fail one batch (2 files): {failed}"
samples = []
t0 = time.time()
for e in range(epochs):
    if e:
        sums = epoch_sums(e)
        assert sum(v is None for v in sums.values()) == 2, e
    st = json.load(open(m + "/stats.json"))
    json.load(open(m + "/dataset.json"))
    if e % 5 == 4 or e == 0:
        samples.append((e + 1, rss_kb(), nfd(), st["batches_produced"], threads()))
        print(f"# soak: after epoch {e + 1:3d}: RssAnon {samples[-1][1]} kB, "
              f"fds {samples[-1][2]}, threads {samples[-1][4]}, "
              f"batches produced {samples[-1][3]}, {time.time() - t0:.0f} s", flush=True)
again = epoch_sums(0)
assert again == first, "epoch 0 changed over the soak"

# Flat, after warm-up (epoch 5).  Two things may legitimately grow: a new
# FUSE loop thread (its 1 MiB buffer and stack, up to 16 of them), and
# libfuse's node table, one node (~160 bytes) per distinct path looked up
# until the kernel forgets its inode -- every epoch has new names.  RSS may
# grow by 1 MiB (+ 16 MiB under ASan, whose allocator caches more; LSan
# checks for leaks there when the daemon exits) plus
# 256 bytes per file looked up plus 1.5 MiB per new thread; a leak of a
# few hundred bytes per batch or sample does not fit in that.  The fd
# count moves by at most 2 (a worker's shard fd open at the sample).
warm = [s for s in samples if s[0] >= 5]
rss = [s[1] for s in warm]
fds = [s[2] for s in samples]
files = len(first) * (warm[-1][0] - warm[0][0])
new_threads = max(0, warm[-1][4] - warm[0][4])
asan = os.environ.get("ASAN_OPTIONS", "").find("quarantine_size_mb") >= 0
allowed = 1024 + (16384 if asan else 0) + files * 256 // 1024 + 1536 * new_threads
grown = max(rss) - rss[0]
print(f"# soak: RssAnon {min(rss)}..{max(rss)} kB after warm-up: +{grown} kB "
      f"(allowed {allowed} kB: {files} files looked up, {new_threads} new threads); "
      f"fds {min(fds)}..{max(fds)}")
assert grown <= allowed, ("RSS grows", rss)
assert max(fds) - min(fds) <= 2, ("fds grow", fds)
assert samples[-1][3] >= epochs * (len(first) // 2 - 1), "batches were not produced each epoch"
PY

# Twice: decoding every epoch (--cache none), and with the LMDB cache,
# where epoch 1 on comes from the cache (its reader transactions, the
# writer thread and data.mdb's mapping must not grow either).
for mode in none cache; do
	copt=(--cache none)
	[ "$mode" = cache ] && copt=(--cache "$D/c-soak")
	mount_fg "$D/shards" "$D/mnt" --batch 16 --size 128x128 --threads 2 --mem 32M \
		--epochs "$EPOCHS" --shuffle 7 "${copt[@]}" || { not_ok "mount ($mode)"; t_end; }
	$PY "$D/soak.py" "$D/mnt" "$MOUNT_PID" "$EPOCHS" >"$D/soak.out" 2>&1
	rc=$?
	sed "s/^# soak:/# soak ($mode):/" "$D/soak.out" | grep '^# soak'
	if [ "$rc" -eq 0 ]; then
		ok "--cache $mode: $EPOCHS epochs read by fresh readers; RSS and file descriptors stay flat"
	else
		not_ok "--cache $mode: $EPOCHS epochs read by fresh readers; RSS and file descriptors stay flat: $(grep -v '^# soak' "$D/soak.out" | tail -3 | tr '\n' ' ')"
	fi
	check "--cache $mode: stats.json records the bad sample once, not once per epoch" $PY - "$D/mnt" <<'PY'
import json, sys
st = json.load(open(sys.argv[1] + "/stats.json"))
samples = [e for e in st["errors"] if e["kind"] == "sample"]
assert len(samples) == 1 and st["bad_shards"] == ["zz-bad.tfrecord"], st["errors"]
PY
	if [ "$mode" = cache ]; then
		check "--cache: later epochs came from the cache" $PY - "$D/mnt" <<'PY'
import json, sys
c = json.load(open(sys.argv[1] + "/stats.json"))["cache"]
assert c["hits"] > 10 * c["misses"], c
PY
	fi
	unmount_wait "$D/mnt"
done
t_end
