#!/usr/bin/env python3
"""make_golden_pil.py - goldens of Pillow's and torchvision's resizing, for
batchfs's --resize-filter pil (engine/pixels/resize_pil.c).

Makes a few small JPEGs itself, deterministically (a smooth pattern plus
seeded noise, saved by Pillow), then, with the real Pillow and torchvision:

    img = Image.open(jpeg).convert("RGB")          # the decode (decoded_*.npy)
    img.resize((W, H), Image.BILINEAR)             # plain resize ("resize")
    CenterCrop((CH, CW))(Resize(S)(img))           # eval transform ("crop")
    F.resized_crop(img, top, left, h, w, (H, W))   # RandomResizedCrop's box
        (+ F.hflip when flip)                      # ("rrc")
    ToTensor()(...) for a few, float32 CHW -> HWC  # ("tensor")

and writes tests/data/golden/pil/: the JPEGs, each one's decoded RGB, each
result as uint8 (or float32) HWC .npy, and manifest.txt, which
tests/test_resize_pil.c reads (it needs neither Pillow nor torchvision).

    python3 tools/make_golden_pil.py     # from the repository root

Everything is remade each run; the JPEG bytes depend on Pillow's libjpeg,
so commit what one run made.
"""

import os
import sys

import numpy as np
from PIL import Image
import PIL
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as F

OUT = os.path.join("tests", "data", "golden", "pil")

# name -> (width, height, seed, Pillow save arguments)
JPEGS = {
    "pil_160x120_420.jpg": (160, 120, 1, dict(quality=90, subsampling=2)),
    "pil_97x131_422.jpg": (97, 131, 2, dict(quality=85, subsampling=1)),
    "pil_64x48_444.jpg": (64, 48, 3, dict(quality=95, subsampling=0)),
    "pil_cmyk_40x30.jpg": (40, 30, 4, dict(quality=90)),   # Pillow writes an Adobe marker
    "pil_gray_33x21.jpg": (33, 21, 5, dict(quality=90)),
}

# (kind, jpeg, args...):
#   resize: W, H            img.resize((W, H), BILINEAR)
#   crop:   S, CH, CW       CenterCrop((CH, CW))(Resize(S)(img))
#   rrc:    top, left, h, w, H, W, flip
#   tensor: W, H            ToTensor()(img.resize(...)), float32
CASES = [
    ("resize", "pil_160x120_420.jpg", 80, 60),     # 2x down
    ("resize", "pil_160x120_420.jpg", 40, 30),     # 4x
    ("resize", "pil_160x120_420.jpg", 20, 15),     # 8x
    ("resize", "pil_160x120_420.jpg", 53, 37),     # non-integer, about 3.1x
    ("resize", "pil_160x120_420.jpg", 160, 45),    # height only (no horizontal pass)
    ("resize", "pil_160x120_420.jpg", 57, 120),    # width only (no vertical pass)
    ("resize", "pil_64x48_444.jpg", 128, 96),      # 2x up
    ("resize", "pil_64x48_444.jpg", 101, 77),      # non-integer up
    ("resize", "pil_160x120_420.jpg", 300, 50),    # up one axis, down the other
    ("resize", "pil_97x131_422.jpg", 90, 60),      # height loses > 2x the width's pixels:
                                                   # Pillow 13 runs the vertical pass first
    ("resize", "pil_160x120_420.jpg", 150, 100),   # exactly 2x: horizontal first still
    ("resize", "pil_97x131_422.jpg", 24, 32),      # about 4x, odd sizes
    ("resize", "pil_97x131_422.jpg", 13, 17),      # about 7.6x
    ("resize", "pil_97x131_422.jpg", 110, 150),    # up
    ("resize", "pil_64x48_444.jpg", 64, 48),       # the same size: a copy
    ("resize", "pil_64x48_444.jpg", 7, 5),
    ("crop", "pil_160x120_420.jpg", 64, 56, 56),
    ("crop", "pil_160x120_420.jpg", 120, 112, 112),  # short side kept: no vertical pass
    ("crop", "pil_97x131_422.jpg", 50, 48, 47),      # odd margins
    ("crop", "pil_97x131_422.jpg", 160, 144, 144),   # an upscale, as Resize(256) of a small image
    ("crop", "pil_64x48_444.jpg", 20, 17, 20),
    ("rrc", "pil_160x120_420.jpg", 10, 20, 90, 120, 32, 32, 0),
    ("rrc", "pil_160x120_420.jpg", 10, 20, 90, 120, 32, 32, 1),
    ("rrc", "pil_160x120_420.jpg", 0, 0, 120, 160, 24, 40, 1),
    ("rrc", "pil_97x131_422.jpg", 33, 5, 17, 13, 40, 48, 0),  # a box smaller than the output
    ("rrc", "pil_97x131_422.jpg", 3, 2, 120, 90, 30, 30, 1),
    ("rrc", "pil_160x120_420.jpg", 0, 10, 120, 30, 32, 32, 1),  # width up, height down:
                                                               # Pillow 13 runs the vertical pass first
    ("tensor", "pil_160x120_420.jpg", 53, 37),
    ("tensor", "pil_64x48_444.jpg", 80, 60),
    ("resize", "pil_cmyk_40x30.jpg", 17, 13),
    ("crop", "pil_gray_33x21.jpg", 16, 14, 15),
]


def make_jpeg(path, w, h, seed, kw):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([
        128 + 100 * np.sin(x / 7.0 + seed) * np.cos(y / 11.0),
        128 + 90 * np.cos((x + y) / 9.0),
        255 * ((x // 8 + y // 8) % 2),          # hard edges: antialiasing shows
    ], axis=-1)
    img = np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8)
    im = Image.fromarray(img, "RGB")
    if "cmyk" in path:
        im = im.convert("CMYK")
    elif "gray" in path:
        im = im.convert("L")
    im.save(path, "JPEG", **kw)


def hwc(t):
    return t.permute(1, 2, 0).contiguous().numpy()


def main():
    if not os.path.isdir(os.path.join("tests", "data", "golden")):
        sys.exit("run from the repository root")
    os.makedirs(OUT, exist_ok=True)
    for name, (w, h, seed, kw) in JPEGS.items():
        make_jpeg(os.path.join(OUT, name), w, h, seed, kw)
    lines = [
        "# batchfs Pillow goldens, written by tools/make_golden_pil.py "
        f"(Pillow {PIL.__version__}, torchvision {torchvision.__version__}).",
        "# decode JPEG DECODED.npy: np.asarray(Image.open(JPEG).convert('RGB'))",
        "# resize DECODED.npy W H GOLDEN.npy: img.resize((W, H), Image.BILINEAR), uint8 HWC",
        "# crop DECODED.npy S CH CW GOLDEN.npy: CenterCrop((CH, CW))(Resize(S)(img)), uint8",
        "# rrc DECODED.npy TOP LEFT BH BW H W FLIP GOLDEN.npy: F.resized_crop(img, TOP, LEFT,"
        " BH, BW, (H, W)), then F.hflip when FLIP, uint8",
        "# tensor DECODED.npy W H GOLDEN.npy: ToTensor()(img.resize((W, H), BILINEAR)),"
        " float32 HWC",
    ]
    imgs = {}
    for name in JPEGS:
        img = Image.open(os.path.join(OUT, name)).convert("RGB")
        imgs[name] = img
        dec = name.replace(".jpg", "_decoded.npy")
        np.save(os.path.join(OUT, dec), np.asarray(img))
        lines.append(f"decode {name} {dec}")
    for case in CASES:
        kind, name, args = case[0], case[1], case[2:]
        img = imgs[name]
        dec = name.replace(".jpg", "_decoded.npy")
        stem = name[:-4] + "_" + kind + "_" + "_".join(str(a) for a in args)
        if kind == "resize":
            out = np.asarray(img.resize(args, Image.BILINEAR))
        elif kind == "crop":
            s, ch, cw = args
            out = np.asarray(T.CenterCrop((ch, cw))(
                T.Resize(s, interpolation=T.InterpolationMode.BILINEAR)(img)))
        elif kind == "rrc":
            top, left, bh, bw, oh, ow, flip = args
            r = F.resized_crop(img, top, left, bh, bw, [oh, ow],
                               interpolation=T.InterpolationMode.BILINEAR)
            if flip:
                r = F.hflip(r)
            out = np.asarray(r)
        else:
            out = hwc(T.ToTensor()(img.resize(args, Image.BILINEAR)))
            assert out.dtype == np.float32
        np.save(os.path.join(OUT, stem + ".npy"), np.ascontiguousarray(out))
        lines.append(f"{kind} {dec} {' '.join(str(a) for a in args)} {stem}.npy")
    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(CASES)} goldens and {len(JPEGS)} JPEGs to {OUT}")


if __name__ == "__main__":
    main()
