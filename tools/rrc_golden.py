#!/usr/bin/env python3
"""rrc_golden.py - boxes drawn by real torchvision's RandomResizedCrop.

For every case of CASES below (an image size, RandomResizedCrop's scale and
ratio, a number of draws), calls

    torchvision.transforms.RandomResizedCrop.get_params(img, scale, ratio)

that many times, after torch.manual_seed(SEED), and writes the boxes it
returns, (top, left, height, width) as int16, one row per draw, case after
case, to tests/data/golden/rrc_torchvision.npy, and the cases to
tests/data/golden/rrc_torchvision.txt (one line: H W scale0 scale1 ratio0
ratio1 first_row count).  tests/test_rrc.c compares batchfs's sampler
(engine/pixels/rrc.c) with them without torch: two-sample Kolmogorov-Smirnov tests
of the area share h*w/(H*W) and of log(w/h), and exact boxes where no try
fits (the fallback, the same for every draw).

    pip install torch torchvision     # CPU wheels are enough
    python3 tools/rrc_golden.py       # from the repository root

The outputs are committed; they only change when torchvision's sampler does.
"""
import os
import sys

import numpy as np

GOLDEN_DIR = os.path.join("tests", "data", "golden")
SEED = 20240501
DEFAULT_SCALE = (0.08, 1.0)
DEFAULT_RATIO = (3.0 / 4.0, 4.0 / 3.0)

# (H, W, scale, ratio, draws)
CASES = [
    (375, 500, DEFAULT_SCALE, DEFAULT_RATIO, 10000),   # ImageNet's usual landscape
    (500, 333, DEFAULT_SCALE, DEFAULT_RATIO, 4000),    # portrait
    (64, 64, DEFAULT_SCALE, DEFAULT_RATIO, 4000),      # small: rounding matters
    (100, 400, DEFAULT_SCALE, DEFAULT_RATIO, 4000),    # wide: many tries fail
    (256, 256, (0.35, 1.0), (0.5, 2.0), 4000),         # other ranges
    (60, 2000, DEFAULT_SCALE, (0.9, 1.1), 50),         # very wide, narrow ratio: fallback
    (2000, 60, DEFAULT_SCALE, (0.9, 1.1), 50),         # very tall: fallback
    (50, 1000, DEFAULT_SCALE, DEFAULT_RATIO, 50),      # wide: fallback at the ratio's max
]


def main():
    try:
        import torch
        import torchvision
        from torchvision.transforms import RandomResizedCrop
    except ImportError as e:
        sys.exit(f"rrc_golden.py needs torch and torchvision: {e}")
    torch.manual_seed(SEED)
    rows, lines = [], []
    for h, w, scale, ratio, n in CASES:
        img = torch.empty(1, h, w)   # get_params reads the size only
        first = len(rows)
        for _ in range(n):
            i, j, bh, bw = RandomResizedCrop.get_params(img, list(scale), list(ratio))
            rows.append((i, j, bh, bw))
        lines.append(f"{h} {w} {scale[0]!r} {scale[1]!r} {ratio[0]!r} {ratio[1]!r} "
                     f"{first} {n}")
    arr = np.array(rows, dtype=np.int16)
    np.save(os.path.join(GOLDEN_DIR, "rrc_torchvision.npy"), arr)
    with open(os.path.join(GOLDEN_DIR, "rrc_torchvision.txt"), "w") as f:
        f.write(f"# torchvision {torchvision.__version__}, torch {torch.__version__}, "
                f"torch.manual_seed({SEED}); RandomResizedCrop.get_params boxes "
                "(top, left, height, width) in rrc_torchvision.npy\n")
        f.write("# H W scale0 scale1 ratio0 ratio1 first_row count\n")
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(rows)} boxes of {len(CASES)} cases to {GOLDEN_DIR}/rrc_torchvision.*")


if __name__ == "__main__":
    main()
