"""The training job of test_two_nodes.sh: torchrun across nodes (gloo, CPU),
one batchfs mount per node (batchfs.Mount(per_node=True)), the tiny CNN of
train_torch.py, recording what each rank saw.

  torchrun ... train_nodes.py SOURCE OUT MODE

MODE
  train    2 epochs; rank 0 saves a checkpoint (model, optimizer,
           BatchDataset.state_dict()) every BFS_CKPT_EVERY batches
  resume   load that checkpoint and finish the 2 epochs: the mount is made
           with resume=the checkpoint's data state (an elastic resume: the
           job that saved it may have had another world size)

The environment says the rest: BFS_NODE (the node's name), BFS_CACHE and
BFS_SHARD_CACHE (the node's LMDB and shard cache directories), BFS_SPLIT
(samples or shards; unset: the mount's default), BFS_CKPT (the checkpoint
file), BFS_CKPT_EVERY, and BFS_HOLD=E:K: after the K-th batch of epoch E
every rank says "held" and waits (at most BFS_HOLD_WAIT seconds) for the
file OUT.go, so that the test can kill a node at a known point mid-epoch.

OUT.rank-R.jsonl gets one JSON line per event, written at once (a rank
killed with SIGKILL loses none it wrote): "start" (the node, the daemon's
pid, the mount point, dataset.json's split and ranks), "batch" (epoch,
batch, the samples' keys shard:record from index.json, the labels, the
loss), "epoch-end" (on local rank 0: the mount's stats.json counters),
"eval" (the mean loss over the rank's epoch 0 before and after), "held",
"end".  Rank 0 writes the checkpoint's data state to BFS_CKPT.json too.
"""

import inspect
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import batchfs
import batchfs.torch

SOURCE, OUT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
EPOCHS = 2
OPTS = dict(batch=8, size=(32, 32), dtype="uint8", layout="nchw", shuffle=3,
            epochs=EPOCHS, threads=1, cache=os.environ["BFS_CACHE"])
if SOURCE.startswith("s3://"):
    OPTS["shard_cache"] = os.environ["BFS_SHARD_CACHE"]
if os.environ.get("BFS_SPLIT"):
    OPTS["split"] = os.environ["BFS_SPLIT"]
CKPT = os.environ.get("BFS_CKPT")
CKPT_EVERY = int(os.environ.get("BFS_CKPT_EVERY", "2"))
HOLD = os.environ.get("BFS_HOLD")
HOLD_WAIT = float(os.environ.get("BFS_HOLD_WAIT", "300"))

t_start = time.monotonic()
dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()
LOCAL = int(os.environ["LOCAL_RANK"])
torch.manual_seed(0)
torch.set_num_threads(1)
_log = os.open("%s.rank-%d.jsonl" % (OUT, RANK),
               os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def log(kind, **kw):
    kw.update(event=kind, mode=MODE, rank=RANK, world=WORLD,
              node=os.environ.get("BFS_NODE"))
    os.write(_log, (json.dumps(kw) + "\n").encode())


def model_and_opt():
    # the tiny CNN of train_torch.py: mean colour -> class
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


def keys(mount, epoch, k):
    with open("%s/batch-%06d.index.json" % (mount.epoch_dir(epoch), k)) as f:
        return ["%s:%d" % (s["shard"], s["record"])
                for s in json.load(f)["samples"]]


def counters(mount):
    """What the node's mount fetched and read so far (stats.json)."""
    with open(os.path.join(mount.path, "stats.json")) as f:
        s = json.load(f)
    remote = s.get("remote") or {}
    return {"bytes_read": s.get("bytes_read"),
            "bytes_fetched": remote.get("bytes_fetched"),
            "remote": remote}


def save(net, opt, ds, epoch):
    """Rank 0's checkpoint, replaced whole (a kill leaves the last one)."""
    data = ds.state_dict()
    tmp = CKPT + ".tmp"
    torch.save({"model": net.state_dict(), "opt": opt.state_dict(),
                "data": data}, tmp)
    os.replace(tmp, CKPT)
    with open(CKPT + ".json.tmp", "w") as f:
        json.dump({"epoch": epoch, "batch": data["batch"], "world": WORLD,
                   "data": data}, f, default=str)
    os.replace(CKPT + ".json.tmp", CKPT + ".json")


def hold(epoch, taken):
    if not HOLD or HOLD != "%d:%d" % (epoch, taken):
        return
    log("held", epoch=epoch, batch=taken)
    end = time.monotonic() + HOLD_WAIT
    while not os.path.exists(OUT + ".go"):
        if time.monotonic() > end:
            raise SystemExit("rank %d: no %s.go within %.0f s" %
                             (RANK, OUT, HOLD_WAIT))
        time.sleep(0.05)


def train(mount, ds, net, opt, start_epoch):
    lossf = nn.CrossEntropyLoss()
    first = True
    for epoch in range(start_epoch, EPOCHS):
        ds.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(ds, batch_size=None,
                                             num_workers=0)
        for images, labels in loader:
            if first:
                log("first-batch", seconds=time.monotonic() - t_start)
                first = False
            k = ds.state_dict()["batch"] - 1
            loss = lossf(net(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log("batch", epoch=epoch, batch=k, samples=keys(mount, epoch, k),
                labels=labels.tolist(), loss=float(loss.detach()))
            if RANK == 0 and CKPT and (k + 1) % CKPT_EVERY == 0:
                save(net, opt, ds, epoch)
            hold(epoch, k + 1)
        dist.barrier()  # every rank of the node is done with the epoch
        if LOCAL == 0:
            log("epoch-end", epoch=epoch, **counters(mount))


resume = None
if MODE == "resume":
    if "resume" not in inspect.signature(batchfs.Mount).parameters:
        raise SystemExit("batchfs.Mount has no resume=: no elastic resume")
    ckpt = torch.load(CKPT, weights_only=False)
    resume = ckpt["data"]
kw = {"resume": resume} if resume is not None else {}
with batchfs.Mount(SOURCE, per_node=True, **OPTS, **kw) as m:
    log("start", pid=m.pid, path=m.path, split=m.info.get("split"),
        node_of_rank=m.info.get("node"), ranks=m.info.get("ranks"),
        samples=m.info["samples"], samples_per_epoch=m.info[
            "samples_per_epoch"], resume_info=m.info.get("resume"),
        counters=counters(m) if LOCAL == 0 else None)
    ds = dataset(m)
    net, opt = model_and_opt()
    start = 0
    before = evaluate(net, m) if MODE == "train" else None
    if resume is not None:
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        ds.load_state_dict(resume)
        start = int(resume["epoch"])
    train(m, ds, net, opt, start)
    if MODE == "train":
        log("eval", before=before, after=evaluate(net, m))
    dist.barrier()  # no node's mount ends before every rank is done
    log("end")
dist.destroy_process_group()
