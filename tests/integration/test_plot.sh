#!/usr/bin/env bash
# A picture of a run: a mount keeps its history in stats.json (points of
# cumulative counters, every --history-interval seconds), and
# `batchfs status MNT --plot OUT.png` draws it as a PNG of the stated size,
# written atomically; bad uses are refused with the reason.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

if ! $PY -c 'import numpy' 2>/dev/null; then
	echo "skip test_plot: python3 lacks numpy"
	exit 0
fi

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 20 --seed 9 >/dev/null || { not_ok "mkjpeg"; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 20 --quiet || { not_ok "mkshards"; t_end; }

M=$D/mnt
check "--history-interval 0 is refused, naming the option" \
	bash -c "! '$BATCHFS' mount '$D/shards' '$M' --history-interval 0 2> '$D/hi.txt' && grep -q -- '--history-interval' '$D/hi.txt' && ! mountpoint -q '$M'"
mount_fg "$D/shards" "$M" --threads 2 --size 32 --batch 10 --epochs 2 \
	--cache "$D/cache" --history-interval 1 || { not_ok "mount"; t_end; }

check "the root lists what it did before: no file for the history" \
	bash -c "[ \"\$(ls '$M' | tr '\n' ' ')\" = 'dataset.json epoch-0000 epoch-0001 stats.json ' ]"

check "--plot before anything was read draws the axes (a valid PNG)" \
	bash -c "'$BATCHFS' status '$M' --plot '$D/empty.png' && file '$D/empty.png' | grep -q 'PNG image data, 960 x 720'"

check "two epochs read, stats.json's history has points whose served counter rises to all of them" \
	$PY - "$M" <<'PY'
import glob, json, sys, time
import numpy as np

mnt = sys.argv[1]

def history():
    with open(mnt + "/stats.json") as f:
        st = json.load(f)
    h = st["history"]
    assert h["fields"] == ["t", "samples_served", "samples_decoded",
                           "reader_wait_seconds", "cache_hits", "cache_misses"], h["fields"]
    assert h["interval_seconds"] == 1, h
    return h["points"]

def wait_for_served(n):
    # a point is taken every second: wait for one that saw n served
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pts = history()
        if pts and pts[-1][1] >= n:
            return pts
        time.sleep(0.2)
    raise SystemExit("no history point reached %d served: %r" % (n, history()[-3:]))

served = 0
for e in (0, 1):
    files = sorted(glob.glob("%s/epoch-%04d/batch-*[0-9].npy" % (mnt, e)))
    assert len(files) == 6, (len(files), files[:3])
    for f in files:
        served += np.load(f).shape[0]
    pts = wait_for_served(served)
assert served == 120, served
assert pts[0][0] < 1.0 and pts[0][1] == 0, pts[0]   # taken at the start
ts = [p[0] for p in pts]
assert ts == sorted(ts) and len(set(ts)) == len(ts), ts
col = list(zip(*pts))
assert list(col[1]) == sorted(col[1]), "served never goes down"
assert col[1][-1] == 120 and col[1][0] < col[1][-1]
assert any(0 < s < 120 for s in col[1]) or len(pts) >= 3
assert col[4][-1] > 0, "epoch 1 came from the cache: hits"
assert col[5][-1] > 0, "epoch 0 missed it"
assert all(len(p) == 6 for p in pts)
PY

OUT=$D/out/run.png
mkdir -p "$D/out"
check "batchfs status MNT --plot OUT.png says where it wrote" \
	bash -c "'$BATCHFS' status '$M' --plot '$OUT' > '$D/plot.txt' && grep -q 'wrote $OUT (960x720 PNG' '$D/plot.txt'"
check "it is a PNG of the stated size (signature, IHDR), and nothing is left beside it" \
	$PY - "$OUT" <<'PY'
import os, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", b[:8]
n, kind = struct.unpack(">I4s", b[8:16])
assert kind == b"IHDR" and n == 13
w, h, depth, ctype = struct.unpack(">IIBB", b[16:26])
assert (w, h, depth, ctype) == (960, 720, 8, 2), (w, h, depth, ctype)
assert b[-8:-4] == b"IEND"
assert os.listdir(os.path.dirname(p)) == ["run.png"], os.listdir(os.path.dirname(p))
PY
check "file(1) agrees" bash -c "file '$OUT' | grep -q 'PNG image data, 960 x 720, 8-bit/color RGB'"
[ -n "${PLOT_KEEP:-}" ] && cp "$OUT" "$PLOT_KEEP"

check "a --plot into a missing folder fails with its name, exit 1" \
	bash -c "! '$BATCHFS' status '$M' --plot '$D/nowhere/x.png' 2> '$D/err.txt'; [ \$? = 0 ] && grep -q '$D/nowhere/x.png' '$D/err.txt' && [ ! -e '$D/nowhere' ]"
check "--plot with --watch is a usage error (exit 2)" \
	bash -c "'$BATCHFS' status '$M' --plot '$D/w.png' --watch 2>/dev/null; [ \$? = 2 ] && [ ! -e '$D/w.png' ]"
check "--plot of a folder that is not a mount fails (exit 1)" \
	bash -c "'$BATCHFS' status '$D/jpegs' --plot '$D/n.png' 2>/dev/null; [ \$? = 1 ] && [ ! -e '$D/n.png' ]"

unmount_wait "$M"
check "the daemon exited after the unmount (its sampler joined)" bash -c "! kill -0 $MOUNT_PID 2>/dev/null"
t_end
