#!/usr/bin/env python3
"""Train ResNet-50 (torchvision, random init, bf16 autocast, channels_last)
fed by batchfs.GpuLoader, and the same with torchvision ImageFolder +
DataLoader on the same images and CPU cores.  Reports images/s and the GPU
busy share (CUDA events around every step: busy time over the span).

  # a batchfs mount (uint8 batches) and the JPEG folder it was made from
  python3 tools/train_demo.py --batches MNT/epoch-0000 --imagefolder JPEGS

  # no mount: make both from the same synthetic images first
  python3 tools/train_demo.py --make-data /tmp/demo --images 2560 --size 224
  python3 tools/train_demo.py --batches /tmp/demo/batches \\
      --imagefolder /tmp/demo/jpeg

--make-data writes DIR/jpeg/<class>/*.jpg and DIR/batches/batch-*.npy: the
same JPEGs decoded and resized (shorter side to SIZE, centre crop) with
PIL, exactly what the ImageFolder pipeline computes, as uint8 NHWC batches.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "python"))


# ---- data ---------------------------------------------------------------

def _make_one(args):
    path, seed, w, h = args
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.BICUBIC)
    arr = np.asarray(img).astype(np.int16)
    arr += rng.integers(-12, 13, size=arr.shape, dtype=np.int16)
    Image.fromarray(arr.clip(0, 255).astype(np.uint8)).save(path, quality=90)


def _load_one(args):
    """Decode and resize like transforms.Resize(size) + CenterCrop(size) on
    a PIL image (shorter side to size, bilinear, then the centre crop)."""
    path, size = args
    import numpy as np
    from PIL import Image
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        if w <= h:
            nw, nh = size, int(size * h / w)
        else:
            nw, nh = int(size * w / h), size
        im = im.resize((nw, nh), Image.BILINEAR)
        top = int(round((nh - size) / 2.0))
        left = int(round((nw - size) / 2.0))
        return np.asarray(im.crop((left, top, left + size, top + size)))


def make_data(out, n, size, batch, classes=10):
    import numpy as np
    from multiprocessing import Pool
    jpeg = os.path.join(out, "jpeg")
    bdir = os.path.join(out, "batches")
    os.makedirs(bdir, exist_ok=True)
    jobs, labels = [], []
    for i in range(n):
        c = i % classes
        d = os.path.join(jpeg, "class%02d" % c)
        os.makedirs(d, exist_ok=True)
        jobs.append((os.path.join(d, "img%06d.jpg" % i), i,
                     size + 32 + (i % 5) * 16, size + 16 + (i % 3) * 8))
    t = time.time()
    with Pool(os.cpu_count()) as p:
        p.map(_make_one, jobs, chunksize=32)
        # ImageFolder's order: classes sorted, files sorted in each
        order = sorted((os.path.basename(os.path.dirname(j[0])), j[0])
                       for j in jobs)
        paths = [o[1] for o in order]
        labels = [int(o[0][5:]) for o in order]
        arrays = p.map(_load_one, [(q, size) for q in paths], chunksize=32)
    # the same images, shuffled once so batches mix classes (a mount
    # shuffles too); ImageFolder's DataLoader shuffles every epoch
    perm = np.random.default_rng(0).permutation(n)
    for b in range(0, n, batch):
        idx = perm[b:b + batch]
        x = np.stack([arrays[i] for i in idx])
        y = np.asarray([labels[i] for i in idx], dtype=np.int64)
        np.save(os.path.join(bdir, "batch-%06d.npy" % (b // batch)), x)
        np.save(os.path.join(bdir, "batch-%06d.labels.npy" % (b // batch)),
                y)
    print("made %d JPEGs in %s and %d batch files in %s (%.1f s)" %
          (n, jpeg, (n + batch - 1) // batch, bdir, time.time() - t))


# ---- training -----------------------------------------------------------

def build(torch, classes):
    import torchvision
    model = torchvision.models.resnet50(weights=None, num_classes=classes)
    model = model.cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                          weight_decay=1e-4)
    return model, opt


def run(name, torch, model, opt, batches, steps, warmup):
    """Train on `batches` (an iterator of CUDA (NCHW channels_last float,
    int64) pairs).  Returns a dict of the measurements."""
    loss_fn = torch.nn.CrossEntropyLoss()
    starts, ends = [], []
    n_img = 0
    wait = 0.0
    t0 = None
    it = iter(batches)
    for step in range(warmup + steps):
        if step == warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            wait = 0.0
        tw = time.perf_counter()
        x, y = next(it)
        wait += time.perf_counter() - tw
        s, e = torch.cuda.Event(enable_timing=True), \
            torch.cuda.Event(enable_timing=True)
        s.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        e.record()
        if step >= warmup:
            starts.append(s)
            ends.append(e)
            n_img += x.shape[0]
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    busy = sum(a.elapsed_time(b) for a, b in zip(starts, ends))
    span = starts[0].elapsed_time(ends[-1])
    r = dict(name=name, images_per_s=n_img / wall, busy=busy / span,
             step_ms=busy / len(starts), wall=wall, host_wait=wait,
             loss=float(loss.detach()))
    print("%-44s %8.0f images/s   GPU busy %5.1f%%   %.1f ms/step   "
          "host waited for data %.2f s of %.2f s" %
          (name, r["images_per_s"], 100 * r["busy"], r["step_ms"], wait,
           wall), flush=True)
    return r


def gpuloader_batches(torch, folder, depth, readers):
    import batchfs
    ld = batchfs.GpuLoader(folder, device=torch.cuda.current_device(),
                           depth=depth, readers=readers, passes=-1,
                           normalize="imagenet")
    for x, y in ld:
        # (B,H,W,C) float32 -> (B,C,H,W) view: channels_last, no copy
        yield x.permute(0, 3, 1, 2), y


def imagefolder_batches(torch, folder, size, batch, workers):
    from torchvision import datasets, transforms
    t = transforms.Compose([
        transforms.Resize(size), transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    ds = datasets.ImageFolder(folder, t)
    dl = torch.utils.data.DataLoader(
        ds, batch_size=batch, shuffle=True, num_workers=workers,
        pin_memory=True, drop_last=True, persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None)
    while True:
        for x, y in dl:
            x = x.cuda(non_blocking=True).contiguous(
                memory_format=torch.channels_last)
            yield x, y.cuda(non_blocking=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", action="append", default=[],
                    help="epoch folder of a batchfs mount, or any folder of "
                    "uint8 batch-*.npy files (repeat to compare several)")
    ap.add_argument("--imagefolder", help="JPEG tree of the same images for "
                    "the torchvision ImageFolder + DataLoader comparison")
    ap.add_argument("--make-data", metavar="DIR")
    ap.add_argument("--images", type=int, default=2560)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=256,
                    help="batch size for --make-data and ImageFolder")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--readers", type=int, default=0,
                    help="GpuLoader reader threads (0: min(depth, 4))")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--classes", type=int, default=1000)
    a = ap.parse_args()

    if a.make_data:
        make_data(a.make_data, a.images, a.size, a.batch)
        if not a.batches:
            return 0
    import torch
    if not torch.cuda.is_available():
        print("train_demo: no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cudnn.benchmark = True
    print("# %s, torch %s, %d CPU cores, ResNet-50 bf16 autocast "
          "channels_last, %d timed steps after %d warm-up" %
          (torch.cuda.get_device_name(), torch.__version__, os.cpu_count(),
           a.steps, a.warmup), flush=True)
    results = []
    model, opt = build(torch, a.classes)
    for b in a.batches:
        results.append(run("GpuLoader %s" % b, torch, model, opt,
                           gpuloader_batches(torch, b, a.depth, a.readers),
                           a.steps, a.warmup))
    if a.imagefolder:
        results.append(run("ImageFolder+DataLoader(%d)" % a.workers, torch,
                           model, opt,
                           imagefolder_batches(torch, a.imagefolder, a.size,
                                               a.batch, a.workers),
                           a.steps, a.warmup))
    # the model alone: synthetic data already on the GPU, the ceiling
    x = torch.randn(a.batch, 3, a.size, a.size, device="cuda").contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (a.batch,), device="cuda")

    def same():
        while True:
            yield x, y
    results.append(run("synthetic (model only)", torch, model, opt, same(),
                       a.steps, a.warmup))
    for r in results:
        print("RESULT demo=%r images_per_s=%.1f gpu_busy=%.4f step_ms=%.2f"
              % (r["name"], r["images_per_s"], r["busy"], r["step_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
