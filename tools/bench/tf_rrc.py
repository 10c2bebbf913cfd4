#!/usr/bin/env python3
"""TensorFlow's RandomResizedCrop pipeline, timed for `make bench`.

usage: tools/bench/tf_rrc.py SHARD_DIR [--batch 32] [--size 224x224]
                             [--epochs 3] [--threads N]

    TFRecordDataset(files) -> interleave -> map(parse
      + extract_jpeg_shape
      + sample_distorted_bounding_box(area_range=(0.08, 1),
            aspect_ratio_range=(3/4, 4/3), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
      + decode_and_crop_jpeg(channels=3)     # decodes only the crop
      + resize + random_flip_left_right + / 255, AUTOTUNE)
    -> batch(32) -> prefetch(AUTOTUNE)

the Inception/ResNet training preprocessing of TensorFlow's model garden,
on every shard of SHARD_DIR.  Timed as tools/bench/tf_seed.py times the
seed pipeline (a warm-up of two batches, then --epochs epochs, each from
a fresh iterator).  Prints one JSON object; exits 3 when TensorFlow cannot
be imported.
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
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--image-key", default="image/encoded")
    ap.add_argument("--label-key", default="image/class/label")
    a = ap.parse_args()
    h, w = (int(x) for x in a.size.lower().split("x"))

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except Exception as e:
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
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4])

    def parse(rec):
        ex = tf.io.parse_single_example(rec, feats)
        data = ex[a.image_key]
        shape = tf.io.extract_jpeg_shape(data)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=whole, min_object_covered=0.0,
            aspect_ratio_range=(3.0 / 4.0, 4.0 / 3.0), area_range=(0.08, 1.0),
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        y, x, _ = tf.unstack(begin)
        ch, cw, _ = tf.unstack(size)
        img = tf.io.decode_and_crop_jpeg(data, tf.stack([y, x, ch, cw]), channels=3)
        img = tf.image.resize(img, [h, w])
        img = tf.image.random_flip_left_right(img) / 255.0
        return img, ex[a.label_key]

    ds = (tf.data.Dataset.from_tensor_slices(files)
          .interleave(tf.data.TFRecordDataset, num_parallel_calls=autotune)
          .map(parse, num_parallel_calls=autotune)
          .batch(a.batch)
          .prefetch(autotune))

    for _ in ds.take(2):
        pass
    rates, images, total, cpu0 = [], 0, 0, time.process_time()
    for _ in range(a.epochs):
        images = 0
        t0 = time.perf_counter()
        for x, _y in ds:
            images += int(x.shape[0])
        rates.append(images / (time.perf_counter() - t0))
        total += images
    cpu = time.process_time() - cpu0
    print(json.dumps({"images": images, "epochs": a.epochs, "rates": rates,
                      "images_per_s": statistics.median(rates),
                      "cpu_ms_per_image": cpu * 1e3 / total,
                      "tensorflow": tf.__version__, "shards": len(files)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
