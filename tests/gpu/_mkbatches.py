"""Make a folder of batch files as a batchfs mount serves them (np.save:
NPY v1.0, C order, 64-byte-aligned header), for tests and device checks.

    python3 tests/gpu/_mkbatches.py DIR --batches 12 --batch 256 \
        --size 224 --dtype uint8 [--last 100] [--seed 0]
"""

import argparse
import os

import numpy as np


def make(folder, batches=5, batch=8, height=16, width=None, dtype="uint8",
         last=None, seed=0, channels=3, layout="NHWC"):
    """Write batch-000000.npy .. and their .labels.npy; return the arrays
    as [(images, labels), ...].  `last` sets the last batch's size.
    dtype uint8, float16 or float32 (float: k/255 as a mount without
    --mean, float16 rounded from float32 as the mount does); layout NHWC
    (B,H,W,C) or NCHW (B,C,H,W)."""
    width = height if width is None else width
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(batches):
        b = last if (last is not None and i == batches - 1) else batch
        if dtype == "uint8":
            x = rng.integers(0, 256, size=(b, height, width, channels),
                             dtype=np.uint8)
        else:
            x = rng.integers(0, 256, size=(b, height, width, channels)
                             ).astype(np.float32) / np.float32(255)
            x = x.astype(dtype)
        if layout == "NCHW":
            x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        y = rng.integers(0, 1000, size=(b,), dtype=np.int64)
        np.save(os.path.join(folder, "batch-%06d.npy" % i), x)
        np.save(os.path.join(folder, "batch-%06d.labels.npy" % i), y)
        out.append((x, y))
    return out


def make_fast(folder, batches, batch, size, dtype="uint8", last=None):
    """Large folders quickly: one random batch pattern, rolled per file so
    every file differs.  Returns nothing."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, size=(batch, size, size, 3), dtype=np.uint8)
    if dtype != "uint8":
        base = (base.astype(np.float32) / np.float32(255)).astype(dtype)
    for i in range(batches):
        b = last if (last is not None and i == batches - 1) else batch
        x = np.roll(base[:b], i, axis=2)
        y = (np.arange(b, dtype=np.int64) + i) % 1000
        np.save(os.path.join(folder, "batch-%06d.npy" % i), x)
        np.save(os.path.join(folder, "batch-%06d.labels.npy" % i), y)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--dtype", default="uint8",
                    choices=["uint8", "float16", "float32"])
    ap.add_argument("--last", type=int, default=None)
    a = ap.parse_args()
    make_fast(a.dir, a.batches, a.batch, a.size, a.dtype, a.last)
