#!/usr/bin/env bash
# Epochs, shuffling and distributed ranks: every epoch is a permutation,
# epochs differ, bytes are the same across remounts, thread counts and read
# orders, and ranks are disjoint slices of equal size.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
N=100

"$MKJPEG" "$D/jpegs" --classes 1 --per-class 10 --min-size 24 --max-size 64 \
	--seed 5 >/dev/null || { not_ok mkjpeg; t_end; }
# Shards whose label is the sample's own index, so labels identify samples.
$PY - "$D/jpegs" "$D/shards" $N <<'PY' || { not_ok "write shards"; t_end; }
import os, sys
from tfrec import example, record, write_shard
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
jp = [open(os.path.join(r, f), "rb").read() for r, _, fs in sorted(os.walk(src)) for f in sorted(fs)]
os.makedirs(out)
recs = [record(example({"image/encoded": jp[i % len(jp)], "image/class/label": i})) for i in range(n)]
for s in range(4):
    write_shard(f"{out}/s-{s}.tfrecord", recs[s * 25:(s + 1) * 25])
PY

labels_of() { # MNT EPOCH -> labels of the epoch, in batch order
	$PY - "$1" "$2" <<'PY'
import glob, sys
import numpy as np
fs = sorted(glob.glob(f"{sys.argv[1]}/epoch-{int(sys.argv[2]):04d}/*.labels.npy"))
print(" ".join(str(int(v)) for f in fs for v in np.load(f)))
PY
}

mount_fg "$D/shards" "$D/a" --batch 8 --size 16x16 --epochs 3 --shuffle 42 --threads 2 ||
	{ not_ok "mount --shuffle"; t_end; }
check "--epochs 3 lists three epoch folders" \
	test "$(ls "$D/a" | grep -c '^epoch-')" -eq 3
for e in 0 1 2; do labels_of "$D/a" $e >"$D/a.$e"; done
check "each shuffled epoch holds every sample exactly once" $PY - "$D" $N <<'PY'
import sys
d, n = sys.argv[1], int(sys.argv[2])
for e in range(3):
    got = [int(x) for x in open(f"{d}/a.{e}").read().split()]
    assert sorted(got) == list(range(n)), e
PY
check "the three epochs have three different orders" bash -c "
	! cmp -s '$D/a.0' '$D/a.1' && ! cmp -s '$D/a.1' '$D/a.2' && ! cmp -s '$D/a.0' '$D/a.2'"
check "a shuffled epoch is not file order" bash -c "
	test \"\$(cat '$D/a.0')\" != \"\$(seq -s ' ' 0 $((N - 1)))\""
check "a shuffled batch's images follow its labels" $PY - "$D" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
# samples i and i+10k share a JPEG; their images must be equal wherever they land
imgs = np.concatenate([np.load(f"{d}/a/epoch-0001/batch-{k:06d}.npy") for k in range(13)])
labs = np.concatenate([np.load(f"{d}/a/epoch-0001/batch-{k:06d}.labels.npy") for k in range(13)])
by = {int(l): imgs[i] for i, l in enumerate(labs)}
for i in range(10):
    for j in range(i + 10, 100, 10):
        assert np.array_equal(by[i], by[j]), (i, j)
assert not np.array_equal(by[0], by[1])
PY
(cd "$D/a" && find . -name '*.npy' | sort | xargs md5sum) >"$D/sums.a"
unmount_wait "$D/a"

mount_fg "$D/shards" "$D/b" --batch 8 --size 16x16 --epochs 3 --shuffle 42 --threads 1 ||
	{ not_ok "remount --shuffle"; t_end; }
# read epoch 2 first, batches backwards, then the rest
for f in $(ls -r "$D/b/epoch-0002"); do cat "$D/b/epoch-0002/$f" >/dev/null; done
(cd "$D/b" && find . -name '*.npy' | sort | xargs md5sum) >"$D/sums.b"
check "the same seed gives the same bytes across remounts, threads and read order" \
	cmp "$D/sums.a" "$D/sums.b"
unmount_wait "$D/b"

mount_fg "$D/shards" "$D/c" --batch 8 --size 16x16 --epochs 2 --shuffle 43 ||
	{ not_ok "mount --shuffle 43"; t_end; }
labels_of "$D/c" 0 >"$D/c.0"
check "another seed gives another order" bash -c "! cmp -s '$D/a.0' '$D/c.0'"
unmount_wait "$D/c"

mount_fg "$D/shards" "$D/f" --batch 8 --size 16x16 --epochs 2 ||
	{ not_ok "mount without shuffle"; t_end; }
check "without --shuffle every epoch is file order" bash -c "
	cmp <(cd '$D/f/epoch-0000' && cat *) <(cd '$D/f/epoch-0001' && cat *)"
labels_of "$D/f" 0 >"$D/f.0"
check "file order is 0..N-1" test "$(cat "$D/f.0")" = "$(seq -s ' ' 0 $((N - 1)))"
unmount_wait "$D/f"

for r in 0 1 2; do
	mount_fg "$D/shards" "$D/r$r" --batch 8 --size 16x16 --epochs 2 --shuffle 7 \
		--rank $r --world 3 || { not_ok "mount rank $r"; t_end; }
	for e in 0 1; do labels_of "$D/r$r" $e >"$D/r$r.$e"; done
done
check "ranks are disjoint, equal in size, and cover W*floor(N/W) samples" $PY - "$D" $N <<'PY'
import sys
d, n = sys.argv[1], int(sys.argv[2])
for e in range(2):
    parts = [[int(x) for x in open(f"{d}/r{r}.{e}").read().split()] for r in range(3)]
    sizes = {len(p) for p in parts}
    assert sizes == {n // 3}, sizes
    union = set().union(*map(set, parts))
    assert len(union) == 3 * (n // 3), len(union)
    for p in parts:
        assert len(set(p)) == len(p)
PY
check "every rank has the same number of batch files" bash -c "
	test \$(ls '$D/r0/epoch-0000' | wc -l) -eq \$(ls '$D/r1/epoch-0000' | wc -l) &&
	test \$(ls '$D/r1/epoch-0000' | wc -l) -eq \$(ls '$D/r2/epoch-0000' | wc -l)"
check "dataset.json records seed, epochs, rank and world" $PY - "$D/r1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/dataset.json"))
assert d["seed"] == 7 and d["epochs"] == 2 and d["rank"] == 1 and d["world"] == 3, d
assert d["samples_per_epoch"] == 33, d
PY
check "--rank must be below --world" bash -c "
	'$BATCHFS' mount --rank 3 --world 3 '$D/shards' '$D/x' 2>/dev/null; test \$? -eq 2"
t_end
