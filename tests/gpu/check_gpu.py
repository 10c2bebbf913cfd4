#!/usr/bin/env python3
"""GPU tests of the Python binding (skip without torch + a CUDA device):
GpuLoader tensors equal np.load for every batch in each mode, GPU
normalization equals the CPU mode (for every dtype x layout x output too),
DLPack / CUDA array interface hand-over without copies, a non-default
consumer stream.
"""

import itertools
import os

import numpy as np

from _harness import Runner, Skip
import _mkbatches

import batchfs
from batchfs import _lib

R = Runner()


def test(fn):
    R.run(fn)
    return fn


def torch_cuda():
    try:
        import torch
    except ImportError:
        raise Skip("torch is not installed")
    if not torch.cuda.is_available():
        raise Skip("no CUDA device")
    try:
        _lib.load()
    except batchfs.BatchfsError as e:
        raise Skip(str(e)[:100])
    return torch


def folder(tmp, name, **kw):
    d = os.path.join(tmp, name)
    _mkbatches.make(d, **kw)
    return d, [(np.load(os.path.join(d, "batch-%06d.npy" % i)),
                np.load(os.path.join(d, "batch-%06d.labels.npy" % i)))
               for i in range(kw["batches"])]


@test
def torch_tensors_equal_np_load_for_every_batch(tmp):
    torch = torch_cuda()
    du, ru = folder(tmp, "u8", batches=6, batch=16, height=24, width=20,
                    last=7)
    df, rf = folder(tmp, "f32", batches=4, batch=8, height=12,
                    dtype="float32", last=2)
    for d, ref in ((du, ru), (df, rf)):
        for kw in (dict(depth=2), dict(depth=3, readers=2),
                   dict(depth=3, io="mmap"), dict(depth=1)):
            n = 0
            for (x, y), (gx, gy) in zip(ref, batchfs.GpuLoader(d, **kw)):
                assert gx.is_cuda and gy.is_cuda
                assert gx.dtype == (torch.uint8 if x.dtype == np.uint8
                                    else torch.float32)
                assert gy.dtype == torch.int64
                assert tuple(gx.shape) == x.shape
                assert np.array_equal(gx.cpu().numpy(), x), (d, kw, n)
                assert np.array_equal(gy.cpu().numpy(), y), (d, kw, n)
                n += 1
            assert n == len(ref), (n, kw)


@test
def gpu_normalization_equals_cpu_mode_bit_for_bit(tmp):
    torch_cuda()
    d, _ = folder(tmp, "n", batches=3, batch=5, height=14, width=9, last=2)
    for kw in (dict(normalize=True),
               dict(normalize="imagenet"),
               dict(normalize="imagenet", layout="NCHW")):
        cpu = list(batchfs.GpuLoader(d, device="cpu", **kw))
        gpu = [(x.cpu().numpy(), y.cpu().numpy())
               for x, y in batchfs.GpuLoader(d, device=0, **kw)]
        assert len(cpu) == len(gpu) == 3
        for (cx, cy), (gx, gy) in zip(cpu, gpu):
            assert cx.shape == gx.shape, (kw, cx.shape, gx.shape)
            assert np.array_equal(cx.view(np.uint32), gx.view(np.uint32)), \
                "%s: max diff %g" % (kw, np.abs(cx - gx).max())
            assert np.array_equal(cy, gy)


@test
def gpu_mode_equals_cpu_mode_for_every_dtype_and_layout(tmp):
    torch = torch_cuda()
    tdt = {"uint8": torch.uint8, "float16": torch.float16,
           "float32": torch.float32}
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    for dtype, stored in itertools.product(tdt, ("NHWC", "NCHW")):
        d = os.path.join(tmp, dtype + stored)
        ref = _mkbatches.make(d, batches=3, batch=4, height=6, width=10,
                              dtype=dtype, layout=stored, last=2)
        runs = [dict(), dict(io="mmap")] + [
            dict(normalize=True, layout=o, **m)
            for o, m in itertools.product(
                (None, "NHWC", "NCHW"), ({}, dict(mean=mean, std=std)))]
        for kw in runs:
            cpu = list(batchfs.GpuLoader(d, device="cpu",
                                         **{k: v for k, v in kw.items()
                                            if k != "io"}))
            gpu = []
            for x, y in batchfs.GpuLoader(d, device=0, **kw):
                if not kw.get("normalize"):
                    assert x.dtype == tdt[dtype], (dtype, x.dtype)
                gpu.append((x.cpu().numpy(), y.cpu().numpy()))
            assert len(cpu) == len(gpu) == 3, (dtype, stored, kw)
            for (x, _), (cx, cy), (gx, gy) in zip(ref, cpu, gpu):
                if not kw.get("normalize"):
                    assert gx.shape == x.shape and np.array_equal(gx, x)
                assert cx.dtype == gx.dtype and cx.shape == gx.shape, \
                    (dtype, stored, kw, cx.shape, gx.shape)
                assert cx.tobytes() == gx.tobytes(), (dtype, stored, kw)
                assert np.array_equal(cy, gy)


@test
def device_arrays_hand_over_without_copies(tmp):
    torch = torch_cuda()
    d, ref = folder(tmp, "a", batches=2, batch=4, height=8)
    for (x, y), (a, la) in zip(ref, batchfs.GpuLoader(d, output="array")):
        assert isinstance(a, batchfs.DeviceArray)
        t = torch.from_dlpack(a)
        assert t.data_ptr() == a.ptr and t.is_cuda
        assert np.array_equal(t.cpu().numpy(), x)
        t2 = torch.as_tensor(a, device="cuda")
        assert t2.data_ptr() == a.ptr
        assert np.array_equal(torch.from_dlpack(la).cpu().numpy(), y)
        try:
            import cupy
        except ImportError:
            continue
        c = cupy.asarray(a)
        assert c.data.ptr == a.ptr and np.array_equal(cupy.asnumpy(c), x)
    # torch tensors from output="torch" alias the ring too
    for img, _ in batchfs.GpuLoader(d, output="torch"):
        assert img.data_ptr() != 0


@test
def loader_follows_a_non_default_torch_stream(tmp):
    torch = torch_cuda()
    d, ref = folder(tmp, "s", batches=5, batch=32, height=64)
    s = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(s):
        for x, _ in batchfs.GpuLoader(d, depth=2):
            sums.append(x.to(torch.int64).sum())  # queued on s
        torch.cuda.current_stream().synchronize()
    want = [int(x.astype(np.int64).sum()) for x, _ in ref]
    assert [int(v) for v in sums] == want, (sums, want)


R.finish()
