#!/usr/bin/env python3
"""Compare a batchfs mount with the seed tf.data pipeline, batch by batch.

usage: tools/check_tf.py SHARD_DIR MOUNTPOINT [--image-key K] [--label-key K]

Runs the seed pipeline in real TensorFlow (pip install tensorflow-cpu) over
the TFRecord shards in SHARD_DIR, in batchfs's order (shards sorted by
name, records in file order):
    decode_jpeg(channels=3) -> resize(H, W) (bilinear) -> / 255
and compares every image and label with MOUNTPOINT/epoch-0000.  Images that
TensorFlow cannot decode are counted and left out of the comparison.
Exits non-zero if any image differs by more than 1e-5.
"""
import argparse
import json
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("mount")
    ap.add_argument("--image-key", default="image/encoded")
    ap.add_argument("--label-key", default="image/class/label")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    ds = json.load(open(os.path.join(a.mount, "dataset.json")))
    if ds["dtype"] != "float32":
        sys.exit("compare a float32 mount")
    h, w = ds["shape"][1], ds["shape"][2]
    bsz = ds["batch_size"]
    files = sorted(os.path.join(a.shards, f) for f in os.listdir(a.shards)
                   if not f.startswith("."))
    feats = {a.image_key: tf.io.FixedLenFeature([], tf.string),
             a.label_key: tf.io.FixedLenFeature([], tf.int64)}
    worst, compared, undecodable, label_bad = 0.0, 0, 0, 0
    cur_batch, cur = -1, None
    for i, rec in enumerate(tf.data.TFRecordDataset(files)):
        ex = tf.io.parse_single_example(rec, feats)
        k, j = divmod(i, bsz)
        if k != cur_batch:
            cur_batch = k
            base = os.path.join(a.mount, "epoch-0000", f"batch-{k:06d}")
            cur = (np.load(base + ".npy"), np.load(base + ".labels.npy"))
        if int(ex[a.label_key]) != int(cur[1][j]):
            label_bad += 1
        try:
            img = tf.io.decode_jpeg(ex[a.image_key], channels=3)
        except tf.errors.InvalidArgumentError:
            undecodable += 1
            continue
        ref = (tf.image.resize(img, [h, w]) / 255.0).numpy()
        diff = float(np.abs(ref - cur[0][j]).max())
        worst = max(worst, diff)
        compared += 1
    print(f"{i + 1} samples, {compared} compared with TensorFlow {tf.__version__}, "
          f"{undecodable} TensorFlow cannot decode; max abs diff {worst:.3g}; "
          f"label mismatches {label_bad}")
    sys.exit(0 if worst <= a.tol and label_bad == 0 else 1)


if __name__ == "__main__":
    main()
