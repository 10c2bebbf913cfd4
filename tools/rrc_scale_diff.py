#!/usr/bin/env python3
"""rrc_scale_diff.py - how far --decode-scale auto is from the exact path.

Mounts the same shards twice with --augment rrc,flip, the same seed and
--dtype uint8 and --cache none: once with --decode-scale exact (the
default, optionally with --cache-res) and once with --decode-scale auto,
reads every batch of the first EPOCHS epochs from both, and prints, over
every pixel value of every sample, the mean and max absolute difference
(in 0..255 steps), the share of values and of samples that differ, and the
same per IDCT scale that auto picked for a sample (read off each batch's
index.json box and the output size with auto's rule).  Both mounts draw the same boxes
(the box depends on the seed, epoch and sample only), which it checks.

    python3 tools/rrc_scale_diff.py BATCHFS SRC [--epochs E] [--size HxW]
                                    [--cache-res N|full] [--shuffle S]

numpy only; nothing is written but two temporary mount points.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def mount(bfs, src, opts):
    mnt = tempfile.mkdtemp(prefix="bfs-scale-diff-")
    p = subprocess.Popen([bfs, "mount", "-f", src, mnt] + opts,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while not os.path.exists(os.path.join(mnt, "dataset.json")):
        if p.poll() is not None:
            sys.exit("mount failed: " + p.stderr.read().decode(errors="replace"))
        time.sleep(0.01)
    return mnt, p


def unmount(bfs, mnt, p):
    subprocess.run([bfs, "unmount", mnt], check=False)
    p.wait()
    os.rmdir(mnt)


def auto_scale(bh, bw, oh, ow):
    """engine/sample.c's auto_scale: the largest of 8, 4, 2 that leaves the
    box at least the output size, else 1."""
    for s in (8, 4, 2):
        if bw // s >= ow and bh // s >= oh:
            return s
    return 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("batchfs")
    ap.add_argument("src")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--size", default="224x224")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--shuffle", default="1")
    ap.add_argument("--cache-res", default=None)
    a = ap.parse_args()
    oh, ow = (int(v) for v in a.size.split("x"))
    common = ["--batch", a.batch, "--size", a.size, "--augment", "rrc,flip",
              "--shuffle", a.shuffle, "--dtype", "uint8", "--cache", "none",
              "--epochs", str(a.epochs)]
    exact_opts = common + (["--cache-res", a.cache_res] if a.cache_res else [])
    m1, p1 = mount(a.batchfs, a.src, exact_opts)
    m2, p2 = mount(a.batchfs, a.src, common + ["--decode-scale", "auto"])
    try:
        ds = json.load(open(os.path.join(m1, "dataset.json")))
        tot_abs = 0.0
        tot_n = tot_diff = 0
        worst = 0
        samples = samples_diff = 0
        per = {}  # scale -> [sum abs, values, max, samples]
        for e in range(a.epochs):
            ed = "epoch-%04d" % e
            for k in range(ds["batches_per_epoch"]):
                name = "batch-%06d.npy" % k
                x = np.load(os.path.join(m1, ed, name)).astype(np.int16)
                y = np.load(os.path.join(m2, ed, name)).astype(np.int16)
                if x.shape != y.shape:
                    sys.exit("%s/%s: shapes %s and %s" % (ed, name, x.shape, y.shape))
                d = np.abs(x - y)
                ix = "batch-%06d.index.json" % k
                b1 = json.load(open(os.path.join(m1, ed, ix)))["samples"]
                b2 = json.load(open(os.path.join(m2, ed, ix)))["samples"]
                for j in range(d.shape[0]):
                    if b1[j]["box"] != b2[j]["box"] or b1[j]["flip"] != b2[j]["flip"]:
                        sys.exit("%s/%s sample %d: the mounts drew other boxes" % (ed, name, j))
                    bh, bw = b1[j]["box"][2], b1[j]["box"][3]
                    s = auto_scale(bh, bw, oh, ow)
                    dj = d[j]
                    r = per.setdefault(s, [0.0, 0, 0, 0])
                    r[0] += float(dj.sum())
                    r[1] += dj.size
                    r[2] = max(r[2], int(dj.max()))
                    r[3] += 1
                    samples += 1
                    samples_diff += int(dj.any())
                tot_abs += float(d.sum())
                tot_n += d.size
                tot_diff += int(np.count_nonzero(d))
                worst = max(worst, int(d.max()))
    finally:
        unmount(a.batchfs, m1, p1)
        unmount(a.batchfs, m2, p2)
    print("samples %d (%d epochs), values %d" % (samples, a.epochs, tot_n))
    print("mean abs diff %.3f (of 255; %.5f in 0..1), max abs diff %d" %
          (tot_abs / tot_n, tot_abs / tot_n / 255.0, worst))
    print("values that differ %.1f%%, samples that differ %.1f%%" %
          (100.0 * tot_diff / tot_n, 100.0 * samples_diff / samples))
    for s in sorted(per):
        r = per[s]
        print("  scale 1/%d: %5.1f%% of samples, mean abs diff %.3f, max %d" %
              (s, 100.0 * r[3] / samples, r[0] / r[1], r[2]))


if __name__ == "__main__":
    main()
