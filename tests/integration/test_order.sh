#!/usr/bin/env bash
# Epoch orders for object storage and many nodes, mounted for real on
# WebDataset tars of uneven sizes: --shuffle-block (each block's samples
# together), --split shards (each node a span of the block order, about
# half the shards for two nodes, the deal turning each epoch), and
# --resume (an epoch started part way on another world: over the killed
# world and this one every sample once).  Every batch of every mount
# equals, byte for byte, the reference made from the JPEGs its index.json
# names (tests/tools/refbatch.c); and what cannot work is refused.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
TOOLS=$(cd "$HERE/../tools" && pwd)
REF=${BATCHFS%/batchfs}/tests/refbatch

# 60 samples in 9 tars: 8 of 7, the last of 4
"$MKJPEG" "$D/jpegs" --classes 3 --per-class 20 --seed 31 --min-size 24 \
	--max-size 60 >/dev/null || { not_ok mkjpeg; t_end; }
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/wds" --per-shard 7 >/dev/null || { not_ok mkwds; t_end; }
A=(--batch 4 --size 20x24 --dtype uint8 --epochs 3 --shuffle 7 --cache none --threads 2)

# compare MNT [RANK_DIR...]: every batch of every epoch under each folder
# equals refbatch of the JPEGs its index.json names, in its order.
compare() {
	local mnt=$1 dir k n=0
	shift
	for dir in "$@"; do
		for e in "$mnt/$dir"epoch-*; do
			for k in "$e"/batch-??????.npy; do
				k=${k%.npy}
				idx=$k.index.json
				mapfile -t J < <($PY -c "
import json, sys
for s in json.load(open(sys.argv[1]))['samples']:
    print(sys.argv[2] + '/' + s['member'])" "$idx" "$D/jpegs") || return 1
				"$REF" 20 24 uint8 "$D/ref.npy" "${J[@]}" >/dev/null || return 1
				cmp -s "$k.npy" "$D/ref.npy" || { echo "$k.npy differs"; return 1; }
				n=$((n + 1))
			done
		done
	done
	[ "$n" -gt 0 ]
}

mount_fg "$D/wds" "$D/block" "${A[@]}" --shuffle-block 2 || { not_ok "mount --shuffle-block 2"; t_end; }
check "the mount message and dataset.json say the block" bash -c "
	grep -q 'shuffled in blocks of 2 shards;\\?' '$T_DIR/mount.log' &&
	grep -q '\"shuffle_block\": 2' '$D/block/dataset.json' &&
	grep -q '\"split\": \"samples\"' '$D/block/dataset.json'"
check "--shuffle-block: every batch equals the reference made from its index.json's JPEGs" \
	compare "$D/block" ""
check "--shuffle-block: each epoch serves every sample once, a block's samples together, a new order each epoch" \
	$PY - "$D/block" <<'PY'
import glob, json, sys
m = sys.argv[1]
orders = []
for e in range(3):
    s = [x for f in sorted(glob.glob(f"{m}/epoch-{e:04d}/batch-??????.npy"))
         for x in json.load(open(f[:-4] + ".index.json"))["samples"]]
    assert sorted(x["sample"] for x in s) == list(range(60)), e
    # each block's places hold all the samples of two shards and of no
    # third: a block ends where the places so far hold whole shards
    size = {}
    for x in s:
        size[x["shard"]] = size.get(x["shard"], 0) + 1
    blocks, run, places = [], set(), 0
    for x in s:
        run.add(x["shard"])
        places += 1
        if places == sum(size[h] for h in run):
            blocks.append(run)
            run, places = set(), 0
    assert [len(b) for b in blocks] in ([2, 2, 2, 2, 1], [2, 2, 2, 2, 1][::-1]) or \
        sorted(len(b) for b in blocks) == [1, 2, 2, 2, 2], (e, blocks)
    orders.append([x["sample"] for x in s])
assert orders[0] != orders[1] != orders[2]
PY
unmount_wait "$D/block"

# --split shards: world 4, two nodes of two ranks, one mount a node
mount_fg "$D/wds" "$D/node0" "${A[@]}" --split shards --shuffle-block 1 --ranks 0-1 --world 4 ||
	{ not_ok "mount node 0"; t_end; }
NODE0=$MOUNT_PID
mount_fg "$D/wds" "$D/node1" "${A[@]}" --split shards --shuffle-block 1 --ranks 2-3 --world 4 ||
	{ not_ok "mount node 1"; t_end; }
check "dataset.json and index.json say the split and the node" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
for i in (0, 1):
    j = json.load(open(f"{d}/node{i}/dataset.json"))
    assert (j["split"], j["node_ranks"], j["nodes"], j["node"]) == ("shards", 2, 2, i), j
    x = json.load(open(f"{d}/node{i}/rank-{2 * i + 1}/epoch-0001/batch-000002.index.json"))
    assert x["node"] == i and x["rank"] == 2 * i + 1, x
PY
check "--split shards: every batch equals the reference made from its index.json's JPEGs" \
	compare "$D/node0" rank-0/ rank-1/
check "--split shards: node 1's batches too" compare "$D/node1" rank-2/ rank-3/
check "--split shards: each epoch serves every sample once over the nodes, equal shares, each node about half the shards, turning" \
	$PY - "$D" <<'PY'
import glob, json, sys
d = sys.argv[1]
shards_of = {}
for e in range(3):
    got = []
    for i in (0, 1):
        node = set()
        for r in (2 * i, 2 * i + 1):
            s = [x for f in sorted(glob.glob(f"{d}/node{i}/rank-{r}/epoch-{e:04d}/batch-??????.npy"))
                 for x in json.load(open(f[:-4] + ".index.json"))["samples"]]
            assert len(s) == 60 // 4, (e, r, len(s))
            got += [x["sample"] for x in s]
            node |= {x["shard"] for x in s}
        # 9 shards, half a node: its span, and one it shares at the cut
        assert len(node) <= 6, (e, i, sorted(node))
        shards_of[e, i] = node
    assert sorted(got) == list(range(60)), (e, len(got), len(set(got)))
assert any(shards_of[e, 0] != shards_of[0, 0] for e in (1, 2))
PY

# --resume: that world of 4 (two nodes of two, split by shards) consumed 2
# batches of 4 a rank of epoch 1, 32 samples; a world of 2 (split by
# samples) serves the rest of it.
mount_fg "$D/wds" "$D/w2" "${A[@]}" --shuffle-block 1 --ranks 0-1 --world 2 --resume 1:32@4/2 ||
	{ not_ok "mount --resume"; t_end; }
check "the resumed epoch has fewer batches, and dataset.json says why" $PY - "$D/w2" <<'PY'
import json, os, sys
m = sys.argv[1]
j = json.load(open(m + "/dataset.json"))
r = j["resume"]
assert r["epoch"] == 1 and r["option"] == "1:32@4/2" and r["samples_before"] == 32, r
assert r["runs"] == [{"samples": 32, "world": 4, "split": "shards", "node_ranks": 2}], r
assert r["samples_left"] == 28 and r["samples_per_epoch"] == 14 and r["batches"] == 4, r
assert r["last_batch_size"] == 2 and j["batches_per_epoch"] == 8, (r, j["batches_per_epoch"])
for rank in (0, 1):
    names = sorted(os.listdir(f"{m}/rank-{rank}/epoch-0001"))
    assert names[-1] == "batch-000003.npy" and len(names) == 8, names
    assert len(os.listdir(f"{m}/rank-{rank}/epoch-0002")) == 16
    assert not os.path.exists(f"{m}/rank-{rank}/epoch-0001/batch-000004.npy")
PY
check "--resume: every batch of the resumed mount equals the reference of its index.json" \
	compare "$D/w2" rank-0/ rank-1/
check "--resume: over the killed world's first 2 batches a rank and the rest on this world, epoch 1 is every sample once" \
	$PY - "$D" <<'PY'
import glob, json, sys
d = sys.argv[1]
def samples(m, r, e, first=None):
    fs = sorted(glob.glob(f"{d}/{m}/rank-{r}/epoch-{e:04d}/batch-??????.npy"))[:first]
    return [x["sample"] for f in fs
            for x in json.load(open(f[:-4] + ".index.json"))["samples"]]
killed = [s for r in range(4) for s in samples("node%d" % (r // 2), r, 1, 2)]
rest = [s for r in range(2) for s in samples("w2", r, 1)]
both = killed + rest
assert len(killed) == 32 and len(rest) == 28, (len(killed), len(rest))
assert sorted(both) == list(range(60)), sorted(both)
# the next epoch is whole again, on the new world
e2 = [s for r in range(2) for s in samples("w2", r, 2)]
assert sorted(e2) == list(range(60))
PY
check "the state of batchfs.jax and batchfs.tf: global terms, chained on a resumed mount, refused where not made for it" \
	env PYTHONPATH="$PWD/tools/python:$PYTHONPATH" $PY - "$D" <<'PY'
import importlib, sys
from batchfs import _state
d = sys.argv[1]
mods = []
for name in ("batchfs.jax", "batchfs.tf"):
    try:
        mods.append(importlib.import_module(name))
    except ImportError as e:
        print("(%s: %s)" % (name, e))
for mod in mods:
    # the killed world: rank 1 (node 0) took 2 batches of epoch 1
    st = mod.state_dict(d + "/node0/rank-1", 1, 2)
    g = st["global"]
    assert (g["epoch"], g["world"], g["global_batch"], g["split"], g["node_ranks"],
            g["shuffle_block"], g["samples_consumed"]) == (1, 4, 16, "shards", 2, 1, 32), g
    assert _state.resume_option(st) == "1:32@4/2"
    assert mod.load_state_dict(d + "/node0/rank-1", st) == (1, 2)
    assert mod.load_state_dict(d + "/w2/rank-0", st) == (1, 0)
    # the resumed world, one batch further: a chain of two runs
    st2 = mod.state_dict(d + "/w2/rank-1", 1, 1)
    assert _state.resume_option(st2) == "1:32@4/2+8@2", _state.resume_option(st2)
    assert st2["global"]["samples_consumed"] == 40
    assert mod.load_state_dict(d + "/w2/rank-1", st2) == (1, 1)
    try:
        mod.load_state_dict(d + "/node1/rank-2", st2)
        raise SystemExit("a chained state loaded on the killed world's mount")
    except ValueError as e:
        assert "--resume 1:32@4/2+8@2" in str(e), str(e)
    # a whole epoch: nothing to resume, the next epoch on any world
    st3 = mod.state_dict(d + "/node0/rank-0", 0, 4)
    assert _state.resume_option(st3) is None and st3["global"]["complete"]
    assert mod.load_state_dict(d + "/w2/rank-0", st3) == (0, 8)
if mods and mods[0].__name__ == "batchfs.jax":
    got = list(mods[0].batches(d + "/w2/rank-0", epoch=1, start=1))
    assert [len(y) for _, y in got] == [4, 4, 2], [len(y) for _, y in got]
PY
check "a one-rank mount split by shards takes its node's size from LOCAL_WORLD_SIZE" \
	env PYTHONPATH="$PWD/tools/python:$PYTHONPATH" LOCAL_WORLD_SIZE=2 $PY - "$D" <<'PY'
import sys, batchfs
d = sys.argv[1]
with batchfs.Mount(d + "/wds", rank=3, world=4, split="shards", shuffle=7, shuffle_block=1,
                   batch=4, size=8, cache="none", threads=1) as m:
    assert (m.info["node_ranks"], m.info["node"], m.info["nodes"]) == (2, 1, 2), m.info
PY
unmount_wait "$D/w2"
unmount_wait "$D/node1"
MOUNT_PID=$NODE0
unmount_wait "$D/node0"

mkdir -p "$D/x"
refused() { # WHAT WORDS OPTIONS...: batchfs mount refuses, saying WORDS
	local what=$1 words=$2
	shift 2
	check "$what" bash -c '
		! "$0" mount -f "$1" "$2" "${@:4}" 2>"$2.err" && grep -qF -- "$3" "$2.err" &&
		! mountpoint -q "$2"' "$BATCHFS" "$D/wds" "$D/x" "$words" "$@"
}
refused "--shuffle-block without --shuffle is refused" "--shuffle-block needs --shuffle SEED" \
	--shuffle-block 2 --cache none
refused "--split shards with a global shuffle is refused" "needs --shuffle-block N, not a global shuffle" \
	--split shards --shuffle 1 --shuffle-block global --cache none
refused "--node-ranks without --split shards is refused" "only --split shards places ranks on nodes" \
	--node-ranks 2 --rank 0 --world 4 --cache none
refused "--split shards on a world that is no whole number of nodes is refused" \
	"--world 6 is not a whole number of nodes of 4 ranks" \
	--split shards --shuffle 1 --rank 0 --world 6 --node-ranks 4 --cache none
refused "a node's ranks must start at a multiple of its size" "start at a multiple of its 2 ranks, not at 1" \
	--split shards --shuffle 1 --ranks 1-2 --world 4 --cache none
refused "--resume of a count the world does not divide is refused" \
	"33 samples consumed is not a multiple of its world 4" --resume 0:33@4 --world 2 --cache none
refused "--resume past the epochs is refused" "epoch 3 is past the mount's 3 epochs" \
	--resume 3:8@4 --epochs 3 --cache none
refused "--resume that leaves fewer samples than ranks is refused, naming the next epoch" \
	"start at epoch 1 instead" --resume 0:58@2 --world 4 --epochs 2 --cache none
refused "a malformed --resume is refused with its form" "EPOCH:CONSUMED@WORLD" --resume 1:32@ --cache none
refused "--shuffle-block 0 is refused" "shards a block, 1 or more, or global" --shuffle 1 --shuffle-block 0
t_end
