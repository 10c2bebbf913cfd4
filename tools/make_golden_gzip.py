#!/usr/bin/env python3
"""make_golden_gzip.py - a GZIP TFRecord shard written by real TensorFlow.

Writes tests/data/golden/gzip/plain/a.tfrecord and gz/a.tfrecord.gz with
tf.io.TFRecordWriter (the second with options="GZIP", what
tf.data.TFRecordDataset(compression_type="GZIP") reads): the same 300
tf.train.Examples (image/encoded: small PNGs from tests/data/golden/png,
image/class/label: k % 7), flushed every 50 records as a training job's
writer may be.  It checks that TensorFlow reads both back to the same
records; tests/test_source.c checks that batchfs does, without TensorFlow.

    python3 tools/make_golden_gzip.py      (from the repository root)
"""
import os
import sys

OUT = os.path.join("tests", "data", "golden", "gzip")
PNGS = os.path.join("tests", "data", "golden", "png")


def main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    names = sorted(f for f in os.listdir(PNGS) if f.endswith(".png"))[:12]
    imgs = [open(os.path.join(PNGS, n), "rb").read() for n in names]
    recs = []
    for k in range(300):
        ex = tf.train.Example(features=tf.train.Features(feature={
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[imgs[k % len(imgs)]])),
            "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[k % 7])),
        }))
        recs.append(ex.SerializeToString())
    for sub, opts, name in (("plain", None, "a.tfrecord"), ("gz", "GZIP", "a.tfrecord.gz")):
        os.makedirs(os.path.join(OUT, sub), exist_ok=True)
        path = os.path.join(OUT, sub, name)
        with tf.io.TFRecordWriter(path, options=opts) as w:
            for k, r in enumerate(recs):
                w.write(r)
                if k % 50 == 49:
                    w.flush()
        back = [bytes(x.numpy()) for x in tf.data.TFRecordDataset(path, compression_type=opts or "")]
        assert back == recs, path
        print("%s: %d records, %d bytes" % (path, len(back), os.path.getsize(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
