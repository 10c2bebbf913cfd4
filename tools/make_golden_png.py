#!/usr/bin/env python3
"""make_golden_png.py - PNG fixtures and what TensorFlow decodes them to.

Writes small PNG fixtures of every kind PNG has (8- and 16-bit, gray with
1, 2, 4, 8 and 16 bits, gray+alpha, RGB, RGBA, palette with and without
tRNS, color-key tRNS, Adam7 interlacing, every filter type, several IDAT
chunks, ancillary chunks batchfs must ignore) into tests/data/golden/png/,
with a PNG writer of its own (zlib and struct only, so it can write what
encoders rarely do), plus PNGs from tf.io.encode_png as a second encoder.
Then runs the real

    tf.io.decode_png(png_bytes, channels=3)            -> FIXTURE.u8.npy
    tf.image.resize(that, [H, W]) / 255.0             -> FIXTURE_HxW.npy

and writes tests/data/golden/png/manifest.txt, which tests/test_png.c reads;
the C tests need no TensorFlow.

    python3 tools/make_golden_png.py               # goldens + manifest
    python3 tools/make_golden_png.py --fixtures    # remake the fixtures first

Run from the repository root.  The fixtures are committed and this script
remakes the same bytes, so goldens only change when TensorFlow does.
"""

import argparse
import os
import struct
import sys
import zlib

import numpy as np

OUT = os.path.join("tests", "data", "golden", "png")


def splitmix64(state):
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def samples(w, h, ch, maxv, seed):
    """Gradients, a hard edge and noise, per channel, in 0..maxv."""
    st = [seed]
    a = np.zeros((h, w, ch), dtype=np.int64)
    for y in range(h):
        for x in range(w):
            n = splitmix64(st) % 7
            for c in range(ch):
                v = (x * (c + 1) * maxv // max(w - 1, 1) + y * (ch - c) * maxv // max(h - 1, 1)
                     + (maxv // 3 if (x > w // 2) != (y > h // 2) else 0) + n * (maxv // 64 + 1))
                a[y, x, c] = v % (maxv + 1)
    return a


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def pack_row(vals, depth):
    """One row of samples (ints) into bytes at `depth` bits each, big-endian."""
    if depth == 16:
        return b"".join(struct.pack(">H", int(v)) for v in vals)
    if depth == 8:
        return bytes(int(v) for v in vals)
    out, acc, nbits = bytearray(), 0, 0
    for v in vals:
        acc = (acc << depth) | int(v)
        nbits += depth
        if nbits == 8:
            out.append(acc)
            acc, nbits = 0, 0
    if nbits:
        out.append(acc << (8 - nbits))
    return bytes(out)


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def filter_rows(rows, bpp, filters):
    """Filter each raw row with filter type filters[i % len(filters)]."""
    out = bytearray()
    prev = bytes(len(rows[0])) if rows else b""
    for i, raw in enumerate(rows):
        f = filters[i % len(filters)]
        line = bytearray()
        for j, x in enumerate(raw):
            a = raw[j - bpp] if j >= bpp else 0
            b = prev[j]
            c = prev[j - bpp] if j >= bpp else 0
            pred = [0, a, b, (a + b) // 2, paeth(a, b, c)][f]
            line.append((x - pred) & 0xFF)
        out.append(f)
        out += line
        prev = raw
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path, img, depth, color_type, palette=None, trns=None, interlace=False,
              filters=(0, 1, 2, 3, 4), idat_split=None, extra=()):
    """img: (h, w, ch) ints (palette images: indices, ch == 1)."""
    h, w, ch = img.shape
    bits = ch * depth
    bpp = max(1, bits // 8)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if interlace else 0)
    data = bytearray()
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for (x0, y0, dx, dy) in passes:
        sub = img[y0::dy, x0::dx, :]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        rows = [pack_row(sub[y].reshape(-1), depth) for y in range(sub.shape[0])]
        data += filter_rows(rows, bpp, filters)
    z = zlib.compress(bytes(data), 9)
    body = chunk(b"IHDR", ihdr)
    for kind, payload in extra:
        body += chunk(kind, payload)
    if palette is not None:
        body += chunk(b"PLTE", bytes(int(v) for rgb in palette for v in rgb))
    if trns is not None:
        body += chunk(b"tRNS", trns)
    parts = [z] if not idat_split else [z[i:i + idat_split] for i in range(0, len(z), idat_split)]
    for p in parts:
        body += chunk(b"IDAT", p)
    body += chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + body)


def make_fixtures(tf):
    os.makedirs(OUT, exist_ok=True)
    W, H = 37, 23
    rgb8 = samples(W, H, 3, 255, 1)
    rgba8 = samples(W, H, 4, 255, 2)
    g8 = samples(W, H, 1, 255, 3)
    ga8 = samples(W, H, 2, 255, 4)
    w = lambda name, *a, **k: write_png(os.path.join(OUT, name), *a, **k)
    w("rgb8_37x23.png", rgb8, 8, 2)
    w("rgba8_37x23.png", rgba8, 8, 6)
    w("gray8_37x23.png", g8, 8, 0)
    w("graya8_37x23.png", ga8, 8, 4)
    for d in (1, 2, 4):
        w("gray%d_37x23.png" % d, samples(W, H, 1, (1 << d) - 1, 10 + d), d, 0)
    pal = [((i * 37) % 256, (i * 91 + 17) % 256, (255 - i * 13) % 256) for i in range(256)]
    for d in (1, 2, 4, 8):
        n = 1 << d
        idx = samples(W, H, 1, n - 1, 20 + d)
        w("pal%d_37x23.png" % d, idx, d, 3, palette=pal[:n])
    idx = samples(W, H, 1, 11, 30)
    w("pal4_trns_37x23.png", idx, 4, 3, palette=pal[:12], trns=bytes(range(0, 240, 20)))
    w("pal8_short_37x23.png", samples(W, H, 1, 99, 31), 8, 3, palette=pal[:100])
    w("rgb16_37x23.png", samples(W, H, 3, 65535, 40), 16, 2)
    w("rgba16_37x23.png", samples(W, H, 4, 65535, 41), 16, 6)
    w("gray16_37x23.png", samples(W, H, 1, 65535, 42), 16, 0)
    w("graya16_37x23.png", samples(W, H, 2, 65535, 43), 16, 4)
    w("rgb8_trns_37x23.png", rgb8, 8, 2, trns=struct.pack(">HHH", *[int(v) for v in rgb8[5, 5]]))
    w("gray8_trns_37x23.png", g8, 8, 0, trns=struct.pack(">H", int(g8[3, 3, 0])))
    w("rgb8_interlaced_37x23.png", rgb8, 8, 2, interlace=True)
    w("rgba16_interlaced_37x23.png", samples(W, H, 4, 65535, 50), 16, 6, interlace=True)
    w("pal2_interlaced_37x23.png", samples(W, H, 1, 3, 51), 2, 3, palette=pal[:4], interlace=True)
    w("gray1_interlaced_37x23.png", samples(W, H, 1, 1, 52), 1, 0, interlace=True)
    w("rgb8_interlaced_5x3.png", samples(5, 3, 3, 255, 53), 8, 2, interlace=True)
    w("rgb8_1x1.png", samples(1, 1, 3, 255, 54), 8, 2)
    w("rgb8_idat_split_37x23.png", rgb8, 8, 2, idat_split=97)
    w("rgb8_ancillary_37x23.png", rgb8, 8, 2, extra=[
        (b"gAMA", struct.pack(">I", 100000)),   # gamma 1.0: ignored, as TF ignores it
        (b"sBIT", bytes([5, 6, 5])),
        (b"tEXt", b"Comment\x00made by make_golden_png.py"),
        (b"pHYs", struct.pack(">IIB", 2835, 2835, 1))])
    w("rgb8_large_160x120.png", samples(160, 120, 3, 255, 55), 8, 2, filters=(4, 1, 2, 3, 0))
    # A second encoder: libpng through TensorFlow (8- and 16-bit).
    src = tf.constant(rgb8.astype(np.uint8))
    tf.io.write_file(os.path.join(OUT, "tfenc_rgb8_37x23.png"), tf.io.encode_png(src, compression=9))
    src16 = tf.constant(samples(29, 17, 4, 65535, 60).astype(np.uint16))
    tf.io.write_file(os.path.join(OUT, "tfenc_rgba16_29x17.png"), tf.io.encode_png(src16))


RESIZED = [("rgb8_large_160x120.png", 48, 64), ("rgba16_37x23.png", 31, 17),
           ("pal4_trns_37x23.png", 64, 64)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", action="store_true", help="remake the fixture PNGs first")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if args.fixtures:
        make_fixtures(tf)
    lines = ["# batchfs PNG golden manifest, written by tools/make_golden_png.py (TensorFlow %s)."
             % tf.__version__,
             "# decode FIXTURE.png GOLDEN.npy: GOLDEN = tf.io.decode_png(FIXTURE, channels=3), uint8 (H, W, 3)",
             "# resize FIXTURE.png H W GOLDEN.npy: GOLDEN = tf.image.resize(that, [H, W]) / 255.0, float32"]
    for name in sorted(f for f in os.listdir(OUT) if f.endswith(".png")):
        data = tf.io.read_file(os.path.join(OUT, name))
        img = tf.io.decode_png(data, channels=3)
        same = tf.io.decode_image(data, channels=3, expand_animations=False)
        assert np.array_equal(img.numpy(), same.numpy()), name
        out = img.numpy()
        assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3
        npy = name[:-4] + ".u8.npy"
        np.save(os.path.join(OUT, npy), out)
        lines.append("decode %s %s" % (name, npy))
        print("%-32s %dx%d" % (name, out.shape[1], out.shape[0]))
    for name, h, w in RESIZED:
        img = tf.io.decode_png(tf.io.read_file(os.path.join(OUT, name)), channels=3)
        out = (tf.image.resize(img, [h, w]) / 255.0).numpy()
        npy = "%s_%dx%d.npy" % (name[:-4], h, w)
        np.save(os.path.join(OUT, npy), out)
        lines.append("resize %s %d %d %s" % (name, h, w, npy))
    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print("%s: %.0f KiB in all" % (OUT, total / 1024.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
