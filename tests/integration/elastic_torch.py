"""An elastic resume under torchrun (gloo, CPU), run by test_elastic.sh:
ranks of one node mount once (batchfs.Mount(per_node=True)) with
--split shards, read batches in lockstep through
batchfs.torch.BatchDataset, and record the sample keys (tar members) of
every batch they take.

  torchrun ... elastic_torch.py SHARDS OUT MODE [ARG]

MODE
  kill K    epoch 0 of 2, per-rank batch 4; after K batches every rank
            saves its dataset state (OUT.state-R.pt), writes its records
            and SIGKILLs itself (a job whose node died)
  resume    load rank 0's state of the killed job, mount with
            resume=state (per-rank batch 8: the same global batch on half
            the world), finish that epoch and run the next one

OUT.rank-R.json gets, per batch taken: epoch, batch, the members.
"""

import json
import os
import signal
import sys

import torch
import torch.distributed as dist

import batchfs
import batchfs.torch

SHARDS, OUT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
ARG = sys.argv[4] if len(sys.argv) > 4 else None
OPTS = dict(size=(16, 16), dtype="uint8", shuffle=3, epochs=2, threads=1,
            cache="none", split="shards")

dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)


def members(folder, k):
    with open("%s/batch-%06d.index.json" % (folder, k)) as f:
        return [s["member"] for s in json.load(f)["samples"]]


def write(records, mount, extra=None):
    out = {"rank": RANK, "world": WORLD, "pid": mount.pid,
           "path": mount.path, "records": records,
           "info": {k: mount.info.get(k) for k in (
               "world", "split", "node", "nodes", "node_ranks", "resume",
               "batch_size", "shuffle_block")}}
    out.update(extra or {})
    with open("%s.rank-%d.json" % (OUT, RANK), "w") as f:
        json.dump(out, f)


def run(mount, ds, first_epoch, kill_at=None):
    records = []
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(first_epoch, mount.epochs):
        ds.set_epoch(epoch)
        for images, labels in loader:
            k = ds.state_dict()["batch"] - 1
            records.append({"epoch": epoch, "batch": k,
                            "members": members(mount.epoch_dir(epoch), k),
                            "count": int(labels.shape[0])})
            dist.barrier()  # a training step: every rank in step
            if kill_at is not None and len(records) == kill_at:
                torch.save(ds.state_dict(), "%s.state-%d.pt" % (OUT, RANK))
                write(records, mount)
                dist.barrier()  # every rank saved: the node dies
                os.kill(os.getpid(), signal.SIGKILL)
    return records


if MODE == "kill":
    with batchfs.Mount(SHARDS, per_node=True, batch=4, **OPTS) as m:
        ds = batchfs.torch.BatchDataset(m)
        run(m, ds, 0, kill_at=int(ARG))
    raise SystemExit("rank %d was not killed" % RANK)
elif MODE == "resume":
    state = torch.load(ARG, weights_only=False)
    with batchfs.Mount(SHARDS, per_node=True, batch=8, resume=state,
                       **OPTS) as m:
        ds = batchfs.torch.BatchDataset(m)
        ds.load_state_dict(state)
        records = run(m, ds, ds.epoch)
        dist.barrier()
        write(records, m, {"len_resumed": len(batchfs.torch.BatchDataset(
            m, epoch=state["epoch"]))})
dist.destroy_process_group()
