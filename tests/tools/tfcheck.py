#!/usr/bin/env python3
"""tfcheck.py - cross-check batchfs's TFRecord/Example code against TensorFlow.

Not part of `make test` (it needs tensorflow, which CI does not install).
Run from the repository root after `make build/libbatchfs.a`:

    python3 tests/tools/tfcheck.py [--build build] [--keep]

It compiles a small helper against build/libbatchfs.a and checks three ways:
  1. records written by bfs_tfrecord_write + bfs_example_builder are read by
     tf.data.TFRecordDataset + tf.io.parse_single_example with equal values;
  2. a file written by tf.io.TFRecordWriter with tf.train.Example records
     (small, empty and > 256 KiB payloads) is scanned by bfs_tfrecord_scan,
     passes bfs_tfrecord_check, and bfs_example_find returns the same bytes
     and labels;
  3. shards made by bfs_mkshards_main from JPEGs that TensorFlow encoded
     parse in TensorFlow with the right label, synset, filename, size, and
     the original JPEG bytes;
  4. records whose image or label feature holds two values are refused by
     both tf.io.parse_single_example with FixedLenFeature([]) and
     bfs_example_find.
Prints one line per check and exits 0 when all pass.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HELPER_C = r'''
#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/formats/tfrecord.h"
#include "fs/mkshards.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int die(const char *what, int err, const char *msg)
{
	fprintf(stderr, "helper: %s: %s (%s)\n", what, bfs_strerror(err), msg);
	return 1;
}

/* write OUT N: record i has image/encoded = i*37 % 1000 bytes of (i+k)&255,
 * label (packed) i - 5, "unpacked" [i, -i] unpacked, "score" float i/4,
 * "empty" = b"". */
static int do_write(const char *out, int n)
{
	bfs_example_builder *b;
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	static unsigned char img[1000];

	if (fd < 0 || bfs_example_builder_create(&b))
		return 1;
	for (int i = 0; i < n; i++) {
		const uint8_t *rec;
		size_t len, ilen = (size_t)(i * 37 % 1000);
		int64_t un[2] = {i, -i};

		for (size_t k = 0; k < ilen; k++)
			img[k] = (unsigned char)(i + k);
		bfs_example_builder_reset(b);
		bfs_example_builder_add_bytes(b, "image/encoded", img, ilen);
		bfs_example_builder_add_int64(b, "image/class/label", i - 5);
		bfs_example_builder_add_int64s(b, "unpacked", un, 2, 0);
		bfs_example_builder_add_float(b, "score", (float)i / 4);
		bfs_example_builder_add_bytes(b, "empty", NULL, 0);
		if (bfs_example_builder_finish(b, &rec, &len) ||
		    bfs_tfrecord_write(fd, rec, len))
			return 1;
	}
	bfs_example_builder_destroy(b);
	return close(fd) != 0;
}

typedef struct { int fd; const char *dir; int n; int bad; } rctx;

static int on_rec(void *p, const bfs_tfrecord_entry *e)
{
	rctx *c = p;
	char err[BFS_ERRMSG_MAX], path[4096];
	uint8_t *buf = malloc(e->length + 4);
	const uint8_t *img;
	size_t ilen;
	int64_t label = -999;
	int r;
	FILE *f;

	if (!buf || pread(c->fd, buf, e->length + 4, (off_t)e->offset) !=
		    (ssize_t)(e->length + 4))
		return die("pread", -5, "");
	if ((r = bfs_tfrecord_check(buf, e->length, err)))
		return die("check", r, err);
	r = bfs_example_find(buf, e->length, "image/encoded", "image/class/label",
			     &img, &ilen, &label, err);
	if (r) {
		/* a refused record: "N OFFSET LENGTH refused CODE" */
		printf("%d %llu %llu refused %d\n", c->n,
		       (unsigned long long)e->offset,
		       (unsigned long long)e->length, r);
		free(buf);
		c->n++;
		return 0;
	}
	snprintf(path, sizeof(path), "%s/%d.bin", c->dir, c->n);
	f = fopen(path, "wb");
	if (!f || fwrite(img, 1, ilen, f) != ilen || fclose(f))
		return die("dump", -5, path);
	printf("%d %llu %llu %d %lld\n", c->n, (unsigned long long)e->offset,
	       (unsigned long long)e->length, e->status, (long long)label);
	free(buf);
	c->n++;
	return 0;
}

/* read FILE DIR: one line per record, image bytes dumped to DIR/i.bin */
static int do_read(const char *file, const char *dir)
{
	rctx c = { open(file, O_RDONLY), dir, 0, 0 };
	char err[BFS_ERRMSG_MAX] = "";
	struct stat st;
	int r;

	if (c.fd < 0 || fstat(c.fd, &st))
		return 1;
	r = bfs_tfrecord_scan(c.fd, (uint64_t)st.st_size, on_rec, &c, err);
	if (r)
		return die("scan", r, err);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "write"))
		return do_write(argv[2], atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "read"))
		return do_read(argv[2], argv[3]);
	if (argc >= 2 && !strcmp(argv[1], "mkshards"))
		return bfs_mkshards_main(argc - 1, argv + 1);
	fprintf(stderr, "usage: helper write OUT N | read FILE DIR | mkshards ...\n");
	return 2;
}
'''


def log(ok, what):
    print(("ok     " if ok else "FAILED ") + what)
    return ok


def build_helper(build, tmp):
    src = os.path.join(tmp, "helper.c")
    exe = os.path.join(tmp, "helper")
    with open(src, "w") as f:
        f.write(HELPER_C)
    lib = os.path.join(build, "libbatchfs.a")
    if not os.path.exists(lib):
        sys.exit("tfcheck: %s missing; run `make %s` first" % (lib, lib))
    cmd = ["cc", "-O1", "-std=gnu11", "-I.", src, lib, "-lturbojpeg", "-lm",
           "-pthread", "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def check_tf_reads_ours(tf, helper, tmp):
    path = os.path.join(tmp, "ours.tfrecord")
    n = 300
    subprocess.run([helper, "write", path, str(n)], check=True)
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "unpacked": tf.io.FixedLenFeature([2], tf.int64),
        "score": tf.io.FixedLenFeature([], tf.float32),
        "empty": tf.io.FixedLenFeature([], tf.string),
    }
    ok = True
    count = 0
    for i, raw in enumerate(tf.data.TFRecordDataset(path)):
        ex = tf.io.parse_single_example(raw, spec)
        ilen = i * 37 % 1000
        want = bytes((i + k) & 255 for k in range(ilen))
        ok &= ex["image/encoded"].numpy() == want
        ok &= int(ex["image/class/label"]) == i - 5
        ok &= list(ex["unpacked"].numpy()) == [i, -i]
        ok &= float(ex["score"]) == i / 4
        ok &= ex["empty"].numpy() == b""
        count += 1
    return log(ok and count == n,
               "TensorFlow reads %d records written by bfs_tfrecord_write + "
               "bfs_example_builder" % count)


def check_we_read_tf(tf, helper, tmp):
    path = os.path.join(tmp, "tf.tfrecord")
    dump = os.path.join(tmp, "dump")
    os.mkdir(dump)
    want = []
    with tf.io.TFRecordWriter(path) as w:
        for i in range(50):
            size = 300000 + i if i % 10 == 3 else i * 101 % 5000
            img = bytes((i * 7 + k * 13) & 255 for k in range(size))
            feats = {
                "image/height": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[i, 2, 3])),
                "image/encoded": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[img])),
                "image/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[i * 1000003 - 7])),
                "image/object/bbox/xmin": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[0.5] * (i % 4))),
            }
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            w.write(ex.SerializeToString())
            want.append((img, i * 1000003 - 7))
    out = subprocess.run([helper, "read", path, dump], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    lines = [l.split() for l in out if l]
    ok = len(lines) == len(want)
    for (idx, _off, _len, status, label), (img, lab) in zip(lines, want):
        with open(os.path.join(dump, idx + ".bin"), "rb") as f:
            got = f.read()
        ok &= got == img and int(label) == lab and status == "0"
    return log(ok, "bfs_tfrecord_scan/check + bfs_example_find read %d records "
               "written by TensorFlow (incl. > 256 KiB payloads)" % len(lines))


def check_two_values_are_refused(tf, helper, tmp):
    """An image or label feature with two values: TensorFlow's
    FixedLenFeature([]) parsing fails the record, and so does batchfs."""
    path = os.path.join(tmp, "two.tfrecord")
    dump = os.path.join(tmp, "dump2")
    os.mkdir(dump)
    cases = [([b"\xff\xd8one"], [3]), ([b"\xff\xd8one", b"two"], [3]),
             ([b"\xff\xd8one"], [3, 7]), ([b"\xff\xd8one"], [])]
    with tf.io.TFRecordWriter(path) as w:
        for imgs, labels in cases:
            feats = {
                "image/encoded": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=imgs)),
                "image/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=labels)),
            }
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            w.write(ex.SerializeToString())
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    tf_ok = []
    for raw in tf.data.TFRecordDataset(path):
        try:
            tf.io.parse_single_example(raw, spec)
            tf_ok.append(True)
        except tf.errors.InvalidArgumentError:
            tf_ok.append(False)
    out = subprocess.run([helper, "read", path, dump], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    ours = [l.split()[3] != "refused" for l in out if l]
    # an empty label list reads as no label here (the source then refuses
    # the sample: "no int64 feature"), so only the first three are compared
    ok = tf_ok[:3] == [True, False, False] and ours[:3] == tf_ok[:3]
    return log(ok, "TensorFlow and bfs_example_find both refuse an image or "
               "label feature of two values (TF %s, batchfs %s)" %
               (tf_ok, ours))


def check_mkshards(tf, helper, tmp):
    import numpy as np
    src = os.path.join(tmp, "jpegs")
    rng = np.random.default_rng(1)
    files = {}
    for c, cls in enumerate(["n01", "n02", "zebra"]):
        os.makedirs(os.path.join(src, cls))
        for k in range(7 + c):
            h, w = int(rng.integers(16, 120)), int(rng.integers(16, 120))
            img = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
            data = tf.io.encode_jpeg(img).numpy()
            name = "img_%02d.%s" % (k, ["jpg", "JPEG", "jpeg"][k % 3])
            with open(os.path.join(src, cls, name), "wb") as f:
                f.write(data)
            files[(cls, name)] = (data, c, h, w)
    with open(os.path.join(src, "zebra", "readme.jpg"), "w") as f:
        f.write("not a jpeg")
    out = os.path.join(tmp, "shards")
    r = subprocess.run([helper, "mkshards", src, out, "--per-shard", "5",
                        "--quiet"], capture_output=True, text=True)
    ok = r.returncode == 0 and "readme.jpg" in r.stderr
    names = sorted(os.listdir(out))
    ok &= names == ["train-%05d-of-00005.tfrecord" % i for i in range(5)]
    spec = {k: tf.io.FixedLenFeature([], t) for k, t in [
        ("image/encoded", tf.string), ("image/format", tf.string),
        ("image/class/label", tf.int64), ("image/class/synset", tf.string),
        ("image/filename", tf.string), ("image/height", tf.int64),
        ("image/width", tf.int64)]}
    seen = []
    for n in names:
        for raw in tf.data.TFRecordDataset(os.path.join(out, n)):
            ex = tf.io.parse_single_example(raw, spec)
            cls = ex["image/class/synset"].numpy().decode()
            name = ex["image/filename"].numpy().decode()
            data, c, h, w = files[(cls, name)]
            ok &= ex["image/encoded"].numpy() == data
            ok &= ex["image/format"].numpy() == b"JPEG"
            ok &= int(ex["image/class/label"]) == c
            ok &= (int(ex["image/height"]), int(ex["image/width"])) == (h, w)
            seen.append((cls, name))
    ok &= seen == sorted(files)  # class order, then file order, bytewise
    return log(ok, "TensorFlow parses %d records of %d mkshards shards "
               "(labels, synsets, names, sizes, JPEG bytes)" % (len(seen),
                                                                len(names)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # noqa: E402 (slow; after argument parsing)
    tmp = tempfile.mkdtemp(prefix="tfcheck.")
    try:
        helper = build_helper(args.build, tmp)
        results = [check_tf_reads_ours(tf, helper, tmp),
                   check_we_read_tf(tf, helper, tmp),
                   check_two_values_are_refused(tf, helper, tmp),
                   check_mkshards(tf, helper, tmp)]
    finally:
        if args.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp)
    print("tfcheck: %d of %d checks passed (TensorFlow %s)" %
          (sum(results), len(results), tf.__version__))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
