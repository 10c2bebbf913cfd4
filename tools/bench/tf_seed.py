#!/usr/bin/env python3
"""The seed tf.data pipeline of issue 3, timed for `make bench`.

usage: tools/bench/tf_seed.py SHARD_DIR [--batch 32] [--size 224x224]
                              [--epochs 3] [--threads N]

    TFRecordDataset(files) -> interleave -> map(parse + decode_jpeg(channels=3)
    + resize + / 255, AUTOTUNE) -> batch(32) -> prefetch(AUTOTUNE)

on every shard of SHARD_DIR (sorted by name).  One untimed warm-up (two
batches: traces the map function and starts the thread pools), then
--epochs timed epochs, each from a fresh iterator (so each starts with an
empty prefetch buffer, as a cold batchfs epoch starts with nothing
decoded).  Each step of the loop yields a batch as eager tensors already
computed in host memory, as a training loop would receive it.

Prints one JSON object on stdout: images per epoch, the images/s of each
epoch and their median, the CPU time per image of the whole process over
the timed epochs (all threads), the TensorFlow version.  Exits 3 when TensorFlow
cannot be imported (the caller skips the row), 1 on any other failure.
"""
import argparse
import json
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", default="224x224")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="TF intra/inter op threads (0: TF's default, all cores)")
    ap.add_argument("--image-key", default="image/encoded")
    ap.add_argument("--label-key", default="image/class/label")
    a = ap.parse_args()
    h, w = (int(x) for x in a.size.lower().split("x"))

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except Exception as e:  # ImportError, or a broken install
        print(json.dumps({"skipped": f"TensorFlow not importable: {e}"}))
        return 3
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)

    files = sorted(os.path.join(a.shards, f) for f in os.listdir(a.shards)
                   if not f.startswith("."))
    feats = {a.image_key: tf.io.FixedLenFeature([], tf.string),
             a.label_key: tf.io.FixedLenFeature([], tf.int64)}
    autotune = tf.data.AUTOTUNE

    def parse(rec):
        ex = tf.io.parse_single_example(rec, feats)
        img = tf.io.decode_jpeg(ex[a.image_key], channels=3)
        img = tf.image.resize(img, [h, w]) / 255.0
        return img, ex[a.label_key]

    ds = (tf.data.Dataset.from_tensor_slices(files)
          .interleave(tf.data.TFRecordDataset, num_parallel_calls=autotune)
          .map(parse, num_parallel_calls=autotune)
          .batch(a.batch)
          .prefetch(autotune))

    for _ in ds.take(2):  # warm-up
        pass
    rates, images, total, cpu0 = [], 0, 0, time.process_time()
    for _ in range(a.epochs):
        images = 0
        t0 = time.perf_counter()
        for x, _y in ds:
            images += int(x.shape[0])
        dt = time.perf_counter() - t0
        rates.append(images / dt)
        total += images
    cpu = time.process_time() - cpu0  # every thread of this process
    print(json.dumps({"images": images, "epochs": a.epochs, "rates": rates,
                      "images_per_s": statistics.median(rates),
                      "cpu_ms_per_image": cpu * 1e3 / total,
                      "tensorflow": tf.__version__, "shards": len(files)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
