#!/usr/bin/env bash
# PyTorch, for real: torchrun --nproc-per-node 2 (gloo, CPU) trains a tiny
# CNN on generated JPEGs through batchfs.Mount(rank="auto", world="auto")
# and batchfs.torch.BatchDataset (train_torch.py): ranks disjoint and
# equal, the loss falls, a run killed after k batches and resumed from its
# state_dict sees the same samples as an uninterrupted one, and with
# per_node=True one daemon serves both ranks the bytes of mounts of their
# own; no daemon outlives its ranks, SIGKILL included.  Then the Dataset's
# own contract (len, set_epoch, resume at any k, workers, the GPU path's
# plumbing) in one process.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
if ! $PY -c 'import torch' 2>/dev/null; then
	not_ok "torch: not installed (make python-deps, or pip install torch)"
	t_end
fi
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS TMPDIR="$D/tmp"
export BFS_TEST_CACHE="$D/cache"
mkdir -p "$TMPDIR"
if command -v torchrun >/dev/null; then TORCHRUN=(torchrun); else TORCHRUN=($PY -m torch.distributed.run); fi
run2() { # OUT MODE [ARG]: torchrun with 2 ranks; its output in OUT.log
	local out=$1
	shift
	timeout 600 "${TORCHRUN[@]}" --standalone --nproc-per-node 2 \
		"$HERE/train_torch.py" "$D/shards" "$out" "$@" >"$out.log" 2>&1
}

"$MKJPEG" "$D/jpegs" --classes 4 --per-class 24 --seed 12 --min-size 40 \
	--max-size 100 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 30 --quiet || { not_ok mkshards; t_end; }

if run2 "$D/full" train; then ok "torchrun trains 2 epochs on 2 ranks"; else
	not_ok "torchrun train: $(tail -5 "$D/full.log" | tr '\n' ' ')"; t_end; fi
check "each epoch's samples are disjoint across ranks and equal in number" $PY - "$D/full" <<'PY'
import json, sys
recs = [json.load(open(f"{sys.argv[1]}.rank-{r}.json"))["records"] for r in (0, 1)]
for e in (0, 1):
    s = [[x for b in rec if b["epoch"] == e for x in b["samples"]] for rec in recs]
    assert len(s[0]) == len(s[1]) == 48, [len(x) for x in s]
    assert len(set(s[0])) == 48 and not set(s[0]) & set(s[1]), e
assert [b["samples"] for b in recs[0] if b["epoch"] == 0] != \
       [b["samples"] for b in recs[0] if b["epoch"] == 1]   # shuffled per epoch
PY
check "the loss falls" $PY - "$D/full" <<'PY'
import json, sys
for r in (0, 1):
    d = json.load(open(f"{sys.argv[1]}.rank-{r}.json"))
    # the mean loss over the rank's epoch 0, before and after training
    assert d["eval_after"] < 0.9 * d["eval_before"], (r, d["eval_before"], d["eval_after"])
    print("rank", r, "loss", round(d["eval_before"], 3), "->", round(d["eval_after"], 3))
PY
check "no daemon outlives the run, and the private mount point is gone" $PY - "$D/full" <<'PY'
import json, os, sys
from bfstest import alive
for r in (0, 1):
    d = json.load(open(f"{sys.argv[1]}.rank-{r}.json"))
    assert not alive(d["pid"]), d["pid"]
    assert not os.path.exists(d["path"]), d["path"]
PY

if run2 "$D/cut" kill 8; then not_ok "a rank that kills itself fails the run"; else
	ok "the run killed after 8 batches failed, as it should"; fi
check "the killed run left no daemon and no mount behind" $PY - "$D/cut" <<'PY'
import json, os, sys, time
from bfstest import wait_gone
for r in (0, 1):
    d = json.load(open(f"{sys.argv[1]}.rank-{r}.json"))
    assert wait_gone(d["pid"], d["path"]), ("daemon or mount left", d["pid"], d["path"])
PY
if run2 "$D/cut" resume; then ok "the resumed run finishes"; else
	not_ok "resume: $(tail -5 "$D/cut.log" | tr '\n' ' ')"; fi
check "killed after k batches and resumed, a run sees the uninterrupted run's samples, bytes and losses" $PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
for r in (0, 1):
    a = json.load(open(f"{d}/full.rank-{r}.json"))["records"]
    b = json.load(open(f"{d}/cut.rank-{r}.json"))["records"]
    assert len(a) == len(b) == 12, (len(a), len(b))
    for x, y in zip(a, b):
        for k in ("epoch", "batch", "samples", "md5", "labels"):
            assert x[k] == y[k], (r, x["epoch"], x["batch"], k)
        assert abs(x["loss"] - y["loss"]) <= 1e-4 * abs(x["loss"]), (x["loss"], y["loss"])
PY

if run2 "$D/node" pernode; then ok "torchrun with per_node=True"; else
	not_ok "pernode: $(tail -5 "$D/node.log" | tr '\n' ' ')"; fi
check "per_node: one daemon serves both ranks, each rank's batches equal a mount of its own" $PY - "$D" <<'PY'
import json, os, sys
d = sys.argv[1]
a, b = (json.load(open(f"{d}/node.rank-{r}.json")) for r in (0, 1))
assert a["pid"] == b["pid"] and a["path"] == b["path"], (a["pid"], b["pid"])
assert a["own_pid"] != a["pid"] != b["own_pid"]
assert a["compared"] == b["compared"] == 12
full = [json.load(open(f"{d}/full.rank-{r}.json"))["records"] for r in (0, 1)]
for r, x in enumerate((a, b)):   # and the same batches as the run above
    assert [y["md5"] for y in x["records"]] == [y["md5"] for y in full[r]], r
PY
check "per_node: the node's mount and its daemon are gone after the last rank left" $PY - "$D/node" <<'PY'
import json, os, sys, time
from bfstest import wait_gone
d = json.load(open(f"{sys.argv[1]}.rank-0.json"))
assert wait_gone(d["pid"], d["path"]), ("daemon or mount left", d["pid"], d["path"])
for _ in range(100):  # the last rank out removes the mount point
    if not os.path.exists(d["path"]):
        break
    time.sleep(0.1)
assert not os.path.exists(d["path"]), d["path"]
PY

if run2 "$D/nodekill" pernode-kill; then not_ok "pernode-kill should fail"; else
	ok "per_node: a rank killed mid-epoch fails the run"; fi
check "per_node: ranks killed (SIGKILL, then torchrun's SIGTERM) leave no daemon and no mount" $PY - "$D/nodekill" <<'PY'
import json, os, sys, time
from bfstest import wait_gone
d = json.load(open(f"{sys.argv[1]}.rank-0.json"))
assert wait_gone(d["pid"], d["path"]), ("daemon or mount left", d["pid"], d["path"])
PY

check "BatchDataset: len, set_epoch, resume at every k, workers, and the GPU path's plumbing" \
	$PY "$HERE/check_torch_dataset.py" "$D/shards"
t_end
