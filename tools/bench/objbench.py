#!/usr/bin/env python3
"""The object-storage side of `make bench` (tools/bench.py, stage remote):
uploads into SeaweedFS, a round-trip check, and the peers that read the
same bucket, each timed for one cold epoch.

usage: tools/bench/objbench.py upload FILER_URL BUCKET/PREFIX DIR
       tools/bench/objbench.py upload-copies FILER_URL BUCKET/PREFIX FILE N
       tools/bench/objbench.py rtt HOST PORT [--n 20]
       tools/bench/objbench.py mds-write IMAGE_FOLDER s3://BUCKET/PREFIX
       tools/bench/objbench.py streaming s3://BUCKET/PREFIX LOCAL_DIR
                               [--workers 2] [--batch 32] [--size 224]
       tools/bench/objbench.py webdataset URLS [--workers 2] [--batch 32]
                               [--size 224]

  upload         every file under DIR to BUCKET/PREFIX/NAME through the
                 filer's HTTP API (PUT /buckets/BUCKET/...), one keep-alive
                 connection: the code under test uploads nothing
  upload-copies  FILE under N names, PREFIX/shard-000000.tfrecord ...
  rtt            N TCP connects to HOST:PORT, then N small GETs of / on one
                 keep-alive connection: median, min and max of each (ms)
  mds-write      the ImageFolder's JPEGs, in mkshards' order (classes and
                 files sorted bytewise), with MosaicML Streaming's
                 MDSWriter (columns jpeg: bytes, label: int; its default
                 shard size) to s3:// (S3_ENDPOINT_URL names the server)
  streaming      StreamingDataset(remote, local, shuffle=False,
                 batch_size=B) + DataLoader(num_workers=W, batch_size=B):
                 each worker downloads the shards it needs (Streaming's
                 defaults: predownload 8 x batch) and decodes and resizes
                 in __getitem__
  webdataset     WebDataset(URLS, shardshuffle=False) (shards split over
                 the workers) reading http:// with its default curl pipe,
                 .to_tuple(jpg, cls), decode and resize in a map,
                 .batched(B), WebLoader(batch_size=None, num_workers=W)

Every peer makes the same output as the batchfs mount it is timed against:
Pillow decodes (Image.open + convert RGB), Image.resize((S, S), BILINEAR)
(what `--resize-filter pil` matches), float32 / 255, HWC, batches of B
with int64 labels.  Timed from making the dataset to the last batch (the
imports before); prints one JSON object; exits 3 when a package is not
importable (the caller skips the row), 1 on other errors.
"""
import argparse
import http.client
import io
import json
import os
import socket
import statistics
import sys
import time
import urllib.parse


def put_all(filer, items):
    """PUT (key, path) pairs through the filer on one keep-alive
    connection; returns bytes sent."""
    u = urllib.parse.urlsplit(filer)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    sent = 0
    for key, path in items:
        with open(path, "rb") as f:
            body = f.read()
        for attempt in range(3):
            try:
                conn.request("PUT", "/buckets/" + urllib.parse.quote(key), body=body,
                             headers={"Content-Type": "application/octet-stream"})
                r = conn.getresponse()
                r.read()
                if r.status >= 300:
                    raise RuntimeError(f"PUT {key}: {r.status} {r.reason}")
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
                if attempt == 2:
                    raise
        sent += len(body)
    conn.close()
    return sent


def cmd_upload(a):
    items = []
    for root, _, files in os.walk(a.dir):
        for f in files:
            p = os.path.join(root, f)
            items.append((a.dest.rstrip("/") + "/" + os.path.relpath(p, a.dir), p))
    items.sort()
    t0 = time.perf_counter()
    n = put_all(a.filer, items)
    return {"objects": len(items), "bytes": n, "seconds": time.perf_counter() - t0}


def cmd_upload_copies(a):
    base = os.path.basename(a.file)
    ext = base.split(".", 1)[1] if "." in base else "bin"
    items = [(f"{a.dest.rstrip('/')}/shard-{i:06d}.{ext}", a.file) for i in range(a.n)]
    t0 = time.perf_counter()
    n = put_all(a.filer, items)
    return {"objects": a.n, "bytes": n, "seconds": time.perf_counter() - t0}


def cmd_rtt(a):
    conn_ms, get_ms = [], []
    for _ in range(a.n):
        t0 = time.perf_counter()
        s = socket.create_connection((a.host, a.port), timeout=10)
        conn_ms.append((time.perf_counter() - t0) * 1e3)
        s.close()
    c = http.client.HTTPConnection(a.host, a.port, timeout=10)
    c.request("GET", "/")       # opens the connection: not timed
    c.getresponse().read()
    for _ in range(a.n):
        t0 = time.perf_counter()
        c.request("GET", "/")
        c.getresponse().read()
        get_ms.append((time.perf_counter() - t0) * 1e3)
    c.close()

    def summary(v):
        return {"median": statistics.median(v), "min": min(v), "max": max(v)}
    return {"connect_ms": summary(conn_ms), "get_ms": summary(get_ms), "n": a.n}


def folder_samples(root):
    """(path, label) in mkshards' order: class folders and files sorted
    bytewise, label = class index."""
    classes = sorted(d for d in os.listdir(root)
                     if not d.startswith(".") and os.path.isdir(os.path.join(root, d)))
    out = []
    for i, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if f.lower().endswith((".jpg", ".jpeg")) and not f.startswith("."):
                out.append((os.path.join(root, c, f), i))
    return out


def cmd_mds_write(a):
    try:
        from streaming import MDSWriter
    except Exception as e:
        return {"skipped": f"mosaicml-streaming not importable: {e}"}
    samples = folder_samples(a.folder)
    t0 = time.perf_counter()
    with MDSWriter(out=a.remote, columns={"jpeg": "bytes", "label": "int"},
                   progress_bar=False) as w:
        for p, label in samples:
            with open(p, "rb") as f:
                w.write({"jpeg": f.read(), "label": label})
    return {"samples": len(samples), "seconds": time.perf_counter() - t0}


def make_transform(size):
    import numpy as np
    from PIL import Image

    def tf(jpeg):
        img = Image.open(io.BytesIO(jpeg)).convert("RGB")
        img = img.resize((size, size), Image.BILINEAR)
        return np.asarray(img, dtype=np.float32) / 255.0
    return tf


def run_epoch(loader):
    t0 = time.perf_counter()
    first = None
    images = batches = 0
    for x, y in loader:
        if first is None:
            first = time.perf_counter() - t0
        images += int(x.shape[0])
        batches += 1
    return images, batches, first


def cmd_streaming(a):
    try:
        import torch
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
        import streaming
    except Exception as e:
        return {"skipped": f"mosaicml-streaming not importable: {e}"}
    torch.set_num_threads(1)
    clean_stale_shared_memory()
    tf = make_transform(a.size)

    class Images(StreamingDataset):
        def __getitem__(self, i):
            s = super().__getitem__(i)
            return tf(s["jpeg"]), s["label"]

    t0 = time.perf_counter()
    ds = Images(remote=a.remote, local=a.local, shuffle=False, batch_size=a.batch)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.workers)
    images, batches, first = run_epoch(dl)
    dt = time.perf_counter() - t0
    return {"images": images, "batches": batches, "seconds": dt,
            "first_batch_s": first, "version": streaming.__version__,
            "settings": f"StreamingDataset(shuffle=False, batch_size={a.batch}; "
                        f"defaults otherwise) + DataLoader(num_workers={a.workers})"}


def cmd_webdataset(a):
    try:
        import torch
        import webdataset as wds
    except Exception as e:
        return {"skipped": f"webdataset not importable: {e}"}
    torch.set_num_threads(1)
    tf = make_transform(a.size)

    def sample(t):
        return tf(t[0]), int(t[1])
    t0 = time.perf_counter()
    ds = (wds.WebDataset(a.urls, shardshuffle=False, workersplitter=wds.split_by_worker)
          .to_tuple("jpg", "cls").map(sample).batched(a.batch))
    dl = wds.WebLoader(ds, batch_size=None, num_workers=a.workers)
    images, batches, first = run_epoch(dl)
    dt = time.perf_counter() - t0
    return {"images": images, "batches": batches, "seconds": dt,
            "first_batch_s": first, "version": getattr(wds, "__version__", "?"),
            "settings": f"WebDataset(shardshuffle=False, split_by_worker), "
                        f".batched({a.batch}), WebLoader(num_workers={a.workers})"}


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("upload")
    p.add_argument("filer")
    p.add_argument("dest")
    p.add_argument("dir")
    p = sub.add_parser("upload-copies")
    p.add_argument("filer")
    p.add_argument("dest")
    p.add_argument("file")
    p.add_argument("n", type=int)
    p = sub.add_parser("rtt")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--n", type=int, default=20)
    p = sub.add_parser("mds-write")
    p.add_argument("folder")
    p.add_argument("remote")
    for name in ("streaming", "webdataset"):
        p = sub.add_parser(name)
        if name == "streaming":
            p.add_argument("remote")
            p.add_argument("local")
        else:
            p.add_argument("urls")
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--batch", type=int, default=32)
        p.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    fn = {"upload": cmd_upload, "upload-copies": cmd_upload_copies, "rtt": cmd_rtt,
          "mds-write": cmd_mds_write, "streaming": cmd_streaming,
          "webdataset": cmd_webdataset}[a.cmd]
    r = fn(a)
    print(json.dumps(r))
    return 3 if "skipped" in r else 0


if __name__ == "__main__":
    sys.exit(main())
