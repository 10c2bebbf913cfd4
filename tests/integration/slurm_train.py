"""README's training script as its Slurm recipe runs it, on CPU: the same
batchfs.Mount call (rank="auto", world="auto", per_node=True, the cache
on node-local disk as the recipe says) and loop, with gloo for nccl and
the tiny CNN of train_torch.py for ResNet-50.  test_two_nodes.sh copies it
to train.py and runs the README's srun command line on it, with the
variables srun sets; BFS_SLURM_SOURCE is the source, and each rank writes
what it saw to BFS_SLURM_OUT.rank-R.jsonl.
"""

import json
import os

import torch
import torch.nn as nn

import batchfs
import batchfs.torch

torch.distributed.init_process_group("gloo")  # the recipe sets RANK, WORLD_SIZE, ...
torch.set_num_threads(1)
rank = torch.distributed.get_rank()
out = os.open("%s.rank-%d.jsonl" % (os.environ["BFS_SLURM_OUT"], rank),
              os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def log(**kw):
    os.write(out, (json.dumps(kw) + "\n").encode())


model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
source = os.environ["BFS_SLURM_SOURCE"]
local = os.environ.get("SLURM_TMPDIR", "/tmp")  # the node's own disk
remote = {"shard_cache": os.path.join(local, "batchfs-shards")} \
    if source.startswith("s3://") else {}
with batchfs.Mount(source, batch=8, size=(32, 32), dtype="uint8",
                   layout="nchw", shuffle=1, epochs=2, rank="auto",
                   world="auto", per_node=True, threads=1,
                   cache=os.path.join(local, "batchfs-cache"), **remote) as m:
    log(event="start", rank=rank, world=m.world, pid=m.pid, path=m.path,
        ranks=m.info["ranks"], cache=m.info.get("cache"),
        env={k: os.environ.get(k) for k in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_LOCALID")})
    ds = batchfs.torch.BatchDataset(m, normalize="imagenet")
    for epoch in range(m.epochs):
        ds.set_epoch(epoch)
        for k, (images, labels) in enumerate(
                torch.utils.data.DataLoader(ds, batch_size=None)):
            loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with open("%s/batch-%06d.index.json" % (m.epoch_dir(epoch), k)) as f:
                log(event="batch", rank=rank, epoch=epoch, batch=k,
                    samples=["%s:%d" % (s["shard"], s["record"])
                             for s in json.load(f)["samples"]])
    torch.distributed.barrier()
torch.distributed.destroy_process_group()
