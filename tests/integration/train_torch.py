"""A small DDP training script for torchrun (gloo, CPU), run by
test_torch.sh: a tiny CNN on a batchfs mount, through batchfs.Mount and
batchfs.torch.BatchDataset, recording what each rank saw.

  torchrun --nproc-per-node 2 train_torch.py SHARDS OUT MODE [ARG]

MODE
  train         2 epochs on Mount(rank="auto", world="auto")
  kill K        the same, but after K batches save the state (model,
                optimizer, dataset.state_dict()) and SIGKILL itself
  resume        load that state and finish the 2 epochs
  pernode       Mount(per_node=True): train 2 epochs, and compare every
                batch with a mount of this rank's own
  pernode-kill  Mount(per_node=True); rank 1 SIGKILLs itself mid-epoch

OUT.rank-R.json gets, per batch taken: epoch, batch, the samples
(index.json), an md5 of the images, the loss; and the daemon's pid and
the mount point.
"""

import hashlib
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import batchfs
import batchfs.torch

SHARDS, OUT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
ARG = sys.argv[4] if len(sys.argv) > 4 else None
OPTS = dict(batch=8, size=(32, 32), dtype="uint8", layout="nchw", shuffle=3,
            epochs=2, threads=1, cache=os.environ["BFS_TEST_CACHE"])
EPOCHS = 2

dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
torch.set_num_threads(1)


def model_and_opt():
    # mean colour -> class: the generated classes differ in their tint
    net = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(3, 4))
    ddp = nn.parallel.DistributedDataParallel(net)
    return ddp, torch.optim.Adam(ddp.parameters(), lr=0.1)


def dataset(mount, **kw):
    return batchfs.torch.BatchDataset(mount, normalize=True,
                                      mean=(0.47,) * 3, std=(0.1,) * 3, **kw)


def evaluate(net, mount):
    """Mean loss over this rank's epoch 0, without training."""
    with torch.no_grad():
        ds = dataset(mount, epoch=0)
        return sum(float(nn.functional.cross_entropy(net.module(x), y))
                   for x, y in ds) / len(ds)


def samples(folder, k):
    with open("%s/batch-%06d.index.json" % (folder, k)) as f:
        return [s["sample"] for s in json.load(f)["samples"]]


def write(records, mount, extra=None):
    out = {"rank": RANK, "world": WORLD, "pid": mount.pid,
           "path": mount.path, "records": records}
    out.update(extra or {})
    with open("%s.rank-%d.json" % (OUT, RANK), "w") as f:
        json.dump(out, f)


def train(mount, ds, net, opt, records, start_epoch=0, kill_at=None,
          state_path=None):
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    lossf = nn.CrossEntropyLoss()
    for epoch in range(start_epoch, EPOCHS):
        ds.set_epoch(epoch)
        for images, labels in loader:
            k = ds.state_dict()["batch"] - 1
            loss = lossf(net(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            records.append({
                "epoch": epoch, "batch": k,
                "samples": samples(mount.epoch_dir(epoch), k),
                "md5": hashlib.md5(images.numpy().tobytes()).hexdigest(),
                "labels": labels.tolist(), "loss": float(loss.detach())})
            if kill_at is not None and len(records) == kill_at:
                torch.save({"model": net.state_dict(),
                            "opt": opt.state_dict(),
                            "data": ds.state_dict(), "records": records},
                           state_path)
                write(records, mount)
                os.kill(os.getpid(), signal.SIGKILL)


state_path = "%s.state-%d.pt" % (OUT, RANK)
if MODE in ("train", "kill", "resume"):
    with batchfs.Mount(SHARDS, rank="auto", world="auto", **OPTS) as m:
        assert (m.rank, m.world) == (RANK, WORLD), (m.rank, m.world)
        ds = dataset(m)
        net, opt = model_and_opt()
        records, start = [], 0
        before = evaluate(net, m)
        if MODE == "resume":
            st = torch.load(state_path, weights_only=False)
            net.load_state_dict(st["model"])
            opt.load_state_dict(st["opt"])
            ds.load_state_dict(st["data"])
            records, start = st["records"], st["data"]["epoch"]
        train(m, ds, net, opt, records, start,
              kill_at=int(ARG) if MODE == "kill" else None,
              state_path=state_path)
        write(records, m, {"eval_before": before,
                           "eval_after": evaluate(net, m)})
elif MODE == "pernode":
    with batchfs.Mount(SHARDS, per_node=True, **OPTS) as node, \
            batchfs.Mount(SHARDS, rank=RANK, world=WORLD, **OPTS) as own:
        assert node.rank_dir.endswith("/rank-%d" % RANK), node.rank_dir
        assert node.info["ranks"] == list(range(WORLD)), node.info["ranks"]
        same = 0
        for e in range(EPOCHS):
            a = batchfs.torch.BatchDataset(node, epoch=e)
            b = batchfs.torch.BatchDataset(own, epoch=e)
            for (x, y), (x2, y2) in zip(a, b):
                assert torch.equal(x, x2) and torch.equal(y, y2), (e, same)
                same += 1
            assert same == (e + 1) * len(b) == (e + 1) * len(a)
        ds = dataset(node)
        net, opt = model_and_opt()
        records = []
        train(node, ds, net, opt, records)
        dist.barrier()
        write(records, node, {"own_pid": own.pid, "compared": same})
elif MODE == "pernode-kill":
    m = batchfs.Mount(SHARDS, per_node=True, **OPTS)
    write([], m)
    dist.barrier()  # both hold the mount
    ds = dataset(m)
    for k, _ in enumerate(ds):
        if RANK == 1 and k == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()  # rank 0 waits here for a rank that is gone
    raise SystemExit("rank %d was not stopped" % RANK)
dist.destroy_process_group()
