#!/usr/bin/env python3
"""make_golden.py - golden outputs of the seed TensorFlow pipeline.

For every entry of GOLDENS below, runs the real seed pipeline

    img = tf.io.decode_jpeg(jpeg_bytes, channels=3)
    img = tf.image.resize(img, [H, W])        # bilinear, half-pixel, no antialias
    img = img / 255.0

over a fixture JPEG in tests/data/golden/ and saves the float32 HWC result as
.npy next to it, then writes tests/data/golden/manifest.txt, which the C tests
(tests/test_decode.c) read; they never need TensorFlow.

    python3 tools/make_golden.py               # goldens + manifest from the fixtures
    python3 tools/make_golden.py --fixtures    # also remake the fixture JPEGs
                                               # (needs build/tests/mkjpeg: make build/tests/mkjpeg)

Run from the repository root.  Fixtures are committed, so goldens only change
when TensorFlow's decoder or resize does.
"""

import argparse
import os
import subprocess
import sys

import numpy as np

GOLDEN_DIR = os.path.join("tests", "data", "golden")

# name -> how it is made.  ("mkjpeg", args...) runs tests/tools/mkjpeg --one;
# ("tf", ...) is built below with tf.io.encode_jpeg (a second encoder).
FIXTURES = {
    "photo_500x375_420.jpg": ("mkjpeg", "500x375", "--seed", "11", "--quality", "90"),
    "photo_160x120_420.jpg": ("mkjpeg", "160x120", "--seed", "12", "--quality", "90"),
    "photo_151x101_422.jpg": ("mkjpeg", "151x101", "--seed", "13", "--subsamp", "422"),
    "photo_99x77_444.jpg":   ("mkjpeg", "99x77", "--seed", "14", "--subsamp", "444",
                              "--quality", "95"),
    "gray_121x91.jpg":       ("mkjpeg", "121x91", "--seed", "15", "--gray"),
    "progressive_133x97_420.jpg": ("mkjpeg", "133x97", "--seed", "16", "--progressive"),
    "small_20x15_420.jpg":   ("mkjpeg", "20x15", "--seed", "17", "--quality", "85"),
    "odd_37x23_420.jpg":     ("mkjpeg", "37x23", "--seed", "18", "--quality", "75"),
    "cmyk_120x90.jpg":       ("mkjpeg", "120x90", "--seed", "19", "--cmyk"),
    "tfenc_90x67_420.jpg":   ("tf",),
}

# (fixture, H, W): exactly one 224x224 for the default path; the rest small.
GOLDENS = [
    ("photo_500x375_420.jpg", 224, 224),
    ("photo_160x120_420.jpg", 48, 64),
    ("photo_151x101_422.jpg", 31, 17),
    ("photo_99x77_444.jpg", 48, 64),
    ("gray_121x91.jpg", 31, 17),
    ("progressive_133x97_420.jpg", 48, 64),
    ("small_20x15_420.jpg", 64, 64),
    ("odd_37x23_420.jpg", 48, 64),
    ("cmyk_120x90.jpg", 31, 17),
    ("tfenc_90x67_420.jpg", 48, 64),
]


def make_fixtures(tf, mkjpeg):
    for name, how in FIXTURES.items():
        path = os.path.join(GOLDEN_DIR, name)
        if how[0] == "mkjpeg":
            subprocess.run([mkjpeg, "--one", path] + list(how[1:]), check=True)
    # Second encoder: libjpeg through TF with optimized Huffman tables, from
    # a flipped, odd-sized crop of a mkjpeg photo.
    src = tf.io.decode_jpeg(tf.io.read_file(os.path.join(GOLDEN_DIR, "photo_160x120_420.jpg")),
                            channels=3)
    crop = tf.image.flip_left_right(src[13:80, 21:111, :])
    data = tf.io.encode_jpeg(crop, quality=80, optimize_size=True, chroma_downsampling=True)
    tf.io.write_file(os.path.join(GOLDEN_DIR, "tfenc_90x67_420.jpg"), data)


def golden_name(jpg, h, w):
    return "%s_%dx%d.npy" % (os.path.splitext(jpg)[0], h, w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", action="store_true", help="remake the fixture JPEGs first")
    ap.add_argument("--mkjpeg", default=os.path.join("build", "tests", "mkjpeg"))
    args = ap.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    os.makedirs(GOLDEN_DIR, exist_ok=True)
    if args.fixtures:
        make_fixtures(tf, args.mkjpeg)

    lines = [
        "# batchfs golden manifest, written by tools/make_golden.py (TensorFlow %s)." % tf.__version__,
        "# Each line: FIXTURE.jpg H W GOLDEN.npy",
        "# GOLDEN = tf.image.resize(tf.io.decode_jpeg(FIXTURE, channels=3), [H, W]) / 255.0,",
        "# float32, shape (H, W, 3).",
    ]
    for jpg, h, w in GOLDENS:
        data = tf.io.read_file(os.path.join(GOLDEN_DIR, jpg))
        img = tf.io.decode_jpeg(data, channels=3)
        out = (tf.image.resize(img, [h, w]) / 255.0).numpy()
        assert out.dtype == np.float32 and out.shape == (h, w, 3), (out.dtype, out.shape)
        npy = golden_name(jpg, h, w)
        np.save(os.path.join(GOLDEN_DIR, npy), out)
        lines.append("%s %d %d %s" % (jpg, h, w, npy))
        print("%-28s %4dx%-4d -> %-36s %dx%d source" % (jpg, h, w, npy, img.shape[1], img.shape[0]))
    with open(os.path.join(GOLDEN_DIR, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")

    total = sum(os.path.getsize(os.path.join(GOLDEN_DIR, f)) for f in os.listdir(GOLDEN_DIR))
    print("%s: %.0f KiB in all" % (GOLDEN_DIR, total / 1024.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
