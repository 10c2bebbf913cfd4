#!/usr/bin/env python3
"""Other loaders on the same JPEGs, timed for `make bench`.

usage: tools/bench/peer_loader.py torchvision|dali IMAGE_FOLDER
                                  [--rrc] [--batch 32] [--size 224]
                                  [--epochs 3] [--threads N]

  torchvision  ImageFolder + DataLoader(num_workers=N, persistent), PIL
               decode; seed: Resize((S, S)) + ToTensor; --rrc:
               RandomResizedCrop(S) + RandomHorizontalFlip + ToTensor
  dali         NVIDIA DALI, CPU only: readers.file + decoders.image
               (seed) or decoders.image_random_crop (--rrc: area 0.08..1,
               ratio 3/4..4/3, 10 tries), resize to S x S,
               crop_mirror_normalize to float32 / 255 (random mirror with
               --rrc), batch 32, N threads

Each epoch yields every image once as batches of float32 in host memory.
One warm-up of two batches, then --epochs timed epochs; the median of
their images/s.  Prints one JSON object on stdout; exits 3 when the loader
cannot be imported (the caller skips the row), 1 on any other failure.
"""
import argparse
import json
import os
import statistics
import sys
import time


def count_images(root):
    return sum(1 for _, _, files in os.walk(root)
               for f in files if f.lower().endswith((".jpg", ".jpeg")))


def torchvision_epochs(a, n):
    try:
        import torch
        import torchvision
        from torchvision import datasets, transforms
    except Exception as e:
        return {"skipped": f"torchvision not importable: {e}"}
    torch.set_num_threads(1)
    if a.rrc:
        tf = transforms.Compose([transforms.RandomResizedCrop(a.size),
                                 transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor()])
    else:
        tf = transforms.Compose([transforms.Resize((a.size, a.size)), transforms.ToTensor()])
    ds = datasets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=False,
                                     num_workers=a.threads, persistent_workers=True,
                                     prefetch_factor=4)
    it = iter(dl)
    for _ in range(2):
        next(it)
    rates = []
    for _ in range(a.epochs):
        t0 = time.perf_counter()
        images = 0
        for x, _y in dl:
            images += int(x.shape[0])
        rates.append(images / (time.perf_counter() - t0))
    return {"rates": rates, "images": images, "version": torchvision.__version__}


def dali_epochs(a, n):
    try:
        import numpy as np
        import nvidia.dali as dali
        import nvidia.dali.fn as fn
        from nvidia.dali import pipeline_def
    except Exception as e:
        return {"skipped": f"DALI not importable: {e}"}

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None,
                  prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.root, name="reader")
        if a.rrc:
            img = fn.decoders.image_random_crop(jpegs, device="cpu",
                                                random_area=[0.08, 1.0],
                                                random_aspect_ratio=[0.75, 4.0 / 3.0],
                                                num_attempts=10)
            mirror = fn.random.coin_flip()
        else:
            img = fn.decoders.image(jpegs, device="cpu")
            mirror = 0
        img = fn.resize(img, resize_x=a.size, resize_y=a.size)
        img = fn.crop_mirror_normalize(img, dtype=dali.types.FLOAT, output_layout="HWC",
                                       mean=[0.0], std=[255.0], mirror=mirror)
        return img, labels

    p = pipe()
    p.build()
    steps = -(-n // a.batch)
    for _ in range(2):
        p.run()
    rates = []
    for _ in range(a.epochs):
        t0 = time.perf_counter()
        images = 0
        for _ in range(steps):
            x, _y = p.run()
            arr = np.asarray(x.as_tensor())  # the batch in host memory
            images += arr.shape[0]
        rates.append(images / (time.perf_counter() - t0))
    return {"rates": rates, "images": images, "version": dali.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loader", choices=("torchvision", "dali"))
    ap.add_argument("root")
    ap.add_argument("--rrc", action="store_true")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    n = count_images(a.root)
    cpu0 = time.process_time()
    r = (torchvision_epochs if a.loader == "torchvision" else dali_epochs)(a, n)
    if "skipped" in r:
        print(json.dumps(r))
        return 3
    r.update({"loader": a.loader, "rrc": a.rrc, "images_per_s": statistics.median(r["rates"]),
              "epochs": a.epochs, "threads": a.threads,
              "cpu_s_main_process": time.process_time() - cpu0})
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
