"""batchfs.torch.BatchDataset in one process (test_torch.sh): every dtype
and layout against np.load, normalize, len and set_epoch, resume at every
k, state_dict after a partial epoch, DataLoader workers, paths, and the
plumbing of the GPU path with a stand-in for GpuLoader (no GPU here: the
library's device code is not run)."""

import os
import sys

import numpy as np
import torch

import batchfs
import batchfs.torch
from batchfs import loader as bl

SHARDS = sys.argv[1]
TDT = {"uint8": torch.uint8, "float16": torch.float16,
       "float32": torch.float32}


def files(m, e):
    d = m.epoch_dir(e)
    return [(np.load("%s/batch-%06d.npy" % (d, k)),
             np.load("%s/batch-%06d.labels.npy" % (d, k)))
            for k in range(len(m))]


def same(got, want):
    assert len(got) == len(want), (len(got), len(want))
    for i, ((x, y), (a, b)) in enumerate(zip(got, want)):
        assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        assert x.dtype == TDT[str(a.dtype)] and tuple(x.shape) == a.shape, \
            (i, x.dtype, x.shape, a.dtype, a.shape)
        assert np.array_equal(x.numpy(), a), i
        assert y.dtype == torch.int64 and np.array_equal(y.numpy(), b), i


opts = dict(batch=8, size=(12, 20), shuffle=4, epochs=2, cache="none",
            threads=1)
for dtype in ("uint8", "float16", "float32"):
    for layout in ("nhwc", "nchw"):
        with batchfs.Mount(SHARDS, dtype=dtype, layout=layout, **opts) as m:
            ds = batchfs.torch.BatchDataset(m)
            want = files(m, 0)
            assert len(ds) == len(m) == 12 and ds.epochs == 2
            same(list(ds), want)
            x = want[0][0]
            if layout == "nchw":
                assert x.shape[1:] == (3, 12, 20), x.shape
            else:
                assert x.shape[1:] == (12, 20, 3), x.shape
            norm = [(torch.from_numpy(a.astype(np.float32) /
                                      (np.float32(255) if dtype == "uint8"
                                       else np.float32(1))), b)
                    for a, b in want]
            got = list(batchfs.torch.BatchDataset(m, normalize=True))
            for (g, _), (n, _) in zip(got, norm):
                assert g.dtype == torch.float32 and torch.equal(g, n)
print("every dtype and layout equals np.load; normalize gives float32")

with batchfs.Mount(SHARDS, dtype="uint8", **opts) as m:
    e0, e1 = files(m, 0), files(m, 1)
    ds = batchfs.torch.BatchDataset(m, epoch=1)
    same(list(ds), e1)
    ds.set_epoch(0)
    same(list(ds), e0)
    same(list(ds), e0)  # iterating again starts over
    try:
        ds.set_epoch(2)
        raise AssertionError("epoch 2 of 2 accepted")
    except IndexError:
        pass
    # resume at every k of epoch 1, byte for byte
    for k in range(len(ds) + 1):
        ds.load_state_dict({"epoch": 1, "batch": k})
        ds.set_epoch(1)  # the resumed epoch keeps its position
        assert ds.state_dict()["batch"] == k
        same(list(ds), e1[k:])
        st = ds.state_dict()
        assert {k: v for k, v in st.items() if k not in ("mount", "global")} == {
            "epoch": 1, "batch": len(ds), "batches": len(ds),
            "fingerprint": m.info["fingerprint"]}, st
        assert st["mount"]["batch_size"] == m.info["batch_size"] and \
            st["mount"]["rank"] == m.info["rank"], st
    # another epoch starts at 0
    ds.load_state_dict({"epoch": 1, "batch": 5})
    ds.set_epoch(0)
    same(list(ds), e0)
    # a state taken mid-epoch resumes there
    ds.set_epoch(1)
    it = iter(ds)
    for _ in range(3):
        next(it)
    st = ds.state_dict()
    it.close()
    assert st["epoch"] == 1 and st["batch"] == 3, st
    fresh = batchfs.torch.BatchDataset(m.path)
    fresh.load_state_dict(st)
    same(list(fresh), e1[3:])
    for bad in ({"epoch": 1, "batch": 13}, {"epoch": 1, "batch": 0,
                                            "fingerprint": "0" * 16}):
        try:
            fresh.load_state_dict(bad)
            raise AssertionError("accepted %r" % bad)
        except ValueError:
            pass
    # DataLoader: no workers, and two workers, give the same sequence
    for nw in (0, 2):
        dl = torch.utils.data.DataLoader(
            batchfs.torch.BatchDataset(m, epoch=1), batch_size=None,
            num_workers=nw)
        same(list(dl), e1)
    print("set_epoch, resume at every k, state_dict and workers")

    # the GPU path: GpuLoader(device=N, start=k, normalize, output="torch")
    calls = []

    class FakeGpu(bl.GpuLoader):
        def __init__(self, folder, **kw):
            calls.append(dict(kw))
            kw["device"] = "cpu"
            kw.pop("output", None)
            super().__init__(folder, **kw)

        def __iter__(self):  # device tensors stand for themselves
            for x, y in super().__iter__():
                yield torch.from_numpy(x), torch.from_numpy(y)

    real = batchfs.torch.GpuLoader
    batchfs.torch.GpuLoader = FakeGpu
    try:
        g = batchfs.torch.BatchDataset(m, device="cuda:1", depth=4)
        g.load_state_dict({"epoch": 1, "batch": 4})
        same(list(g), e1[4:])
        assert calls[-1] == {"device": 1, "normalize": False, "start": 4,
                             "output": "torch", "depth": 4}, calls[-1]
        assert g.state_dict()["batch"] == 12
    finally:
        batchfs.torch.GpuLoader = real
    # what GPU mode hands the library after a resume: a folder of links
    # to batches k.. only (the library itself cannot run without a GPU)
    ld = bl.GpuLoader(m.epoch_dir(1), device=0, start=7, output="array")
    links = ld._gpu_folder()
    names = sorted(os.listdir(links))
    assert names == sorted(
        n for k in range(7, 12) for n in ("batch-%06d.npy" % k,
                                          "batch-%06d.labels.npy" % k)), names
    for k, (a, b) in enumerate(batchfs.list_batches(links)):
        x, y = np.load(a), np.load(b)
        assert np.array_equal(x, e1[7 + k][0]) and np.array_equal(y, e1[7 + k][1])
    ld.close()
    assert not os.path.exists(links)
    assert len(bl.GpuLoader(m.epoch_dir(0), device="cpu", start=12)) == 0
    print("the GPU path's plumbing (stand-in loader, link folder)")
