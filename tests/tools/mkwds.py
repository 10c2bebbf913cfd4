#!/usr/bin/env python3
"""mkwds.py - ImageFolder of JPEGs -> WebDataset tar shards, for tests.

    tests/tools/mkwds.py JPEG_DIR OUT_DIR [--per-shard N] [--prefix P]
                         [--format pax|gnu|ustar] [--cls-first]

Takes the same inputs in the same order as `batchfs mkshards`, so a tar
mount and a TFRecord mount of one tree must give the same pixels and labels:

  * classes are the non-hidden sub-folders of JPEG_DIR sorted bytewise,
    label = index from 0; with no sub-folders, JPEG_DIR itself is class 0;
  * in each class, the non-hidden regular .jpg/.jpeg files (any case),
    sorted bytewise;
  * samples go class by class, N per shard, into
    OUT_DIR/P-000000.tar, P-000001.tar, ...

Each sample is KEY.jpg (the file's bytes, unchanged) and KEY.cls (the label
in ASCII decimal), in that order (--cls-first swaps them).  KEY is
CLASS/STEM, STEM being the file name without its extension and with any
other '.' turned into '_', since WebDataset's key ends at the first '.' of
the last path component.  The tars are byte-for-byte reproducible (fixed
mtime, uid, gid, mode) and each is written to a temp file and renamed.

Prints one line per shard and a summary; exit status 0, 1 on errors, 2 on
usage errors.  Needs only the Python standard library.
"""
import argparse
import io
import os
import sys
import tarfile

FORMATS = {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT,
           "ustar": tarfile.USTAR_FORMAT}
MTIME = 1700000000  # fixed, so the same tree gives the same bytes


def is_jpeg(name):
    n = name.lower()
    return n.endswith(".jpg") or n.endswith(".jpeg")


def listdir_sorted(path):
    """Non-hidden entries, sorted bytewise like mkshards (strcmp)."""
    names = [n for n in os.listdir(path) if not n.startswith(".")]
    return sorted(names, key=os.fsencode)


def collect(root):
    """[(class_name or None, label, path)] in mkshards order."""
    classes = [n for n in listdir_sorted(root)
               if os.path.isdir(os.path.join(root, n))]
    dirs = [(c, i, os.path.join(root, c)) for i, c in enumerate(classes)]
    if not dirs:
        dirs = [(None, 0, root)]
    items = []
    for cls, label, d in dirs:
        for n in listdir_sorted(d):
            p = os.path.join(d, n)
            if os.path.isfile(p) and is_jpeg(n):
                items.append((cls, label, p))
    return items


def sample_key(cls, path):
    stem = os.path.basename(path).rsplit(".", 1)[0].replace(".", "_")
    return stem if cls is None else cls + "/" + stem


def add(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = MTIME
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    tar.addfile(ti, io.BytesIO(data))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jpeg_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--per-shard", type=int, default=1024)
    ap.add_argument("--prefix", default="train")
    ap.add_argument("--format", choices=sorted(FORMATS), default="pax")
    ap.add_argument("--cls-first", action="store_true")
    a = ap.parse_args(argv)
    if a.per_shard < 1:
        ap.error("--per-shard must be at least 1")

    items = collect(a.jpeg_dir)
    if not items:
        print("mkwds: no .jpg/.jpeg files found in %s" % a.jpeg_dir,
              file=sys.stderr)
        return 1
    keys = [sample_key(c, p) for c, _, p in items]
    if len(set(keys)) != len(keys):
        dup = sorted(k for k in set(keys) if keys.count(k) > 1)[0]
        print("mkwds: two files give the key %r" % dup, file=sys.stderr)
        return 1
    os.makedirs(a.out_dir, exist_ok=True)

    nshards = (len(items) + a.per_shard - 1) // a.per_shard
    for s in range(nshards):
        chunk = range(s * a.per_shard, min(len(items), (s + 1) * a.per_shard))
        final = os.path.join(a.out_dir, "%s-%06d.tar" % (a.prefix, s))
        tmp = final + ".tmp"
        with tarfile.open(tmp, "w", format=FORMATS[a.format]) as tar:
            for i in chunk:
                _, label, path = items[i]
                with open(path, "rb") as f:
                    jpeg = f.read()
                members = [(keys[i] + ".jpg", jpeg),
                           (keys[i] + ".cls", b"%d" % label)]
                if a.cls_first:
                    members.reverse()
                for name, data in members:
                    add(tar, name, data)
        os.replace(tmp, final)
        print("%s: %d samples" % (final, len(chunk)))
    print("mkwds: %d samples in %d shards" % (len(items), nshards))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
