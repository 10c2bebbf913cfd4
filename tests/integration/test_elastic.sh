#!/usr/bin/env bash
# An elastic, exact resume with PyTorch, for real: two torchrun "nodes" on
# this machine (--nnodes 2 --nproc-per-node 2, static rendezvous on
# loopback, gloo), each with its own per-node mount split by shards
# (batchfs.Mount(per_node=True, split="shards")), read epoch 0 in lockstep
# (elastic_torch.py); after 2 batches every rank is killed (SIGKILL).  A
# world of 2 then resumes from rank 0's state_dict: Mount(resume=state)
# serves the rest of epoch 0, with the global batch kept (8 a rank).  Over
# both runs epoch 0's sample keys are the dataset's, once each; epoch 1 is
# whole; no daemon or mount is left.  A mount not made for the state is
# refused, saying how to make one.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
TOOLS=$(cd "$HERE/../tools" && pwd)
if ! $PY -c 'import torch' 2>/dev/null; then
	not_ok "torch: not installed (make python-deps, or pip install torch)"
	t_end
fi
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS TMPDIR="$D/tmp"
mkdir -p "$TMPDIR"
if command -v torchrun >/dev/null; then TORCHRUN=(torchrun); else TORCHRUN=($PY -m torch.distributed.run); fi

# 60 samples in 9 tars (8 of 7, one of 4); keys are the tar members
"$MKJPEG" "$D/jpegs" --classes 3 --per-class 20 --seed 41 --min-size 24 \
	--max-size 60 >/dev/null || { not_ok mkjpeg; t_end; }
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/wds" --per-shard 7 >/dev/null || { not_ok mkwds; t_end; }

# a free port on loopback for the static rendezvous (node 0 serves it)
PORT=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for node in 0 1; do
	timeout 300 "${TORCHRUN[@]}" --nnodes 2 --node-rank $node --nproc-per-node 2 \
		--master-addr 127.0.0.1 --master-port $PORT \
		"$HERE/elastic_torch.py" "$D/wds" "$D/cut" kill 2 >"$D/node$node.log" 2>&1 &
	T_PIDS+=("$!")
done
fails=0
for p in "${T_PIDS[@]}"; do wait "$p" || fails=$((fails + 1)); done
T_PIDS=()
check "the job of two nodes of two ranks was killed after 2 batches, every rank saved its state" bash -c "
	[ $fails -eq 2 ] && for r in 0 1 2 3; do test -s '$D/cut.state-'\$r.pt && test -s '$D/cut.rank-'\$r.json || exit 1; done" ||
	{ tail -5 "$D/node0.log" "$D/node1.log"; t_end; }
check "each node had its own mount, split by shards, and no daemon or mount is left" $PY - "$D/cut" <<'PY'
import json, sys
from bfstest import wait_gone
d = [json.load(open(f"{sys.argv[1]}.rank-{r}.json")) for r in range(4)]
for r in range(4):
    i = d[r]["info"]
    assert (i["world"], i["split"], i["node"], i["nodes"], i["node_ranks"]) == (4, "shards", r // 2, 2, 2), i
    assert len(d[r]["records"]) == 2 and all(x["count"] == 4 for x in d[r]["records"])
assert d[0]["pid"] == d[1]["pid"] != d[2]["pid"] == d[3]["pid"]
for r in (0, 2):
    assert wait_gone(d[r]["pid"], d[r]["path"]), ("daemon or mount left", d[r]["pid"], d[r]["path"])
PY
check "a mount of world 2 not made for the state is refused, saying how to make one" $PY - "$D" <<'PY'
import sys, torch, batchfs, batchfs.torch
d = sys.argv[1]
st = torch.load(d + "/cut.state-0.pt", weights_only=False)
g = st["global"]
assert (g["epoch"], g["world"], g["global_batch"], g["split"], g["node_ranks"]) == (0, 4, 16, "shards", 2), g
assert g["samples_consumed"] == 32 and g["runs"] == [
    {"samples": 32, "world": 4, "split": "shards", "node_ranks": 2}], g
with batchfs.Mount(d + "/wds", rank=0, world=2, batch=8, size=(16, 16), dtype="uint8",
                   shuffle=3, epochs=2, threads=1, cache="none", split="shards",
                   shuffle_block=1) as m:
    ds = batchfs.torch.BatchDataset(m)
    try:
        ds.load_state_dict(st)
        raise SystemExit("loaded")
    except ValueError as e:
        assert "part way through epoch 0" in str(e) and "resume=state" in str(e) and \
            "--resume 0:32@4/2" in str(e), str(e)
PY
if timeout 300 "${TORCHRUN[@]}" --standalone --nproc-per-node 2 "$HERE/elastic_torch.py" \
	"$D/wds" "$D/back" resume "$D/cut.state-0.pt" >"$D/back.log" 2>&1; then
	ok "a world of 2 resumes from the killed world's state"
else
	not_ok "resume: $(tail -5 "$D/back.log" | tr '\n' ' ')"
	t_end
fi
check "over both runs epoch 0's sample keys are the dataset's, once each; epoch 1 is whole on the new world" \
	$PY - "$D" <<'PY'
import collections, json, os, sys
d = sys.argv[1]
keys = sorted(os.path.relpath(os.path.join(r, f), d + "/jpegs")
              for r, _, fs in os.walk(d + "/jpegs") for f in fs)
cut = [json.load(open(f"{d}/cut.rank-{r}.json")) for r in range(4)]
back = [json.load(open(f"{d}/back.rank-{r}.json")) for r in range(2)]
e0 = [k for x in cut for b in x["records"] for k in b["members"]] + \
     [k for x in back for b in x["records"] if b["epoch"] == 0 for k in b["members"]]
dup = [k for k, n in collections.Counter(e0).items() if n > 1]
assert not dup, dup
assert sorted(e0) == keys, (len(e0), len(keys))
for x in back:
    assert x["info"]["resume"]["option"] == "0:32@4/2" and x["info"]["world"] == 2, x["info"]
    # 28 left, 14 a rank: batches of 8 and 6, where a whole epoch has 4
    assert x["len_resumed"] == 2, x["len_resumed"]
    assert [b["count"] for b in x["records"] if b["epoch"] == 0] == [8, 6]
e1 = [k for x in back for b in x["records"] if b["epoch"] == 1 for k in b["members"]]
assert sorted(e1) == keys, len(e1)
PY
check "the resumed job left no daemon or mount" $PY - "$D/back" <<'PY'
import json, sys
from bfstest import wait_gone
d = json.load(open(f"{sys.argv[1]}.rank-0.json"))
assert wait_gone(d["pid"], d["path"]), ("daemon or mount left", d["pid"], d["path"])
PY
t_end
