"""Write a shard directory full of bad records, and say which batches must fail.

usage: make_bad_shards.py JPEG_DIR OUT_DIR BATCH BIG_JPEG > expect.json

Uses only good JPEGs from JPEG_DIR (sorted) and breaks copies of them. The
layout (shards sorted by name; records in order) is printed as JSON:
{"samples": N, "bad": {sample_index: [shard, record, reason]},
 "cut_shard": name, "batches": nb}
"""
import json
import os
import sys

from tfrec import example, record, write_shard

jpeg_dir, out, batch, big = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
jpegs = []
for root, _, files in sorted(os.walk(jpeg_dir)):
    for f in sorted(files):
        jpegs.append(open(os.path.join(root, f), "rb").read())
os.makedirs(out, exist_ok=True)


def good(i):
    return example({"image/encoded": jpegs[i % len(jpegs)], "image/class/label": i})


samples = 0
bad = {}
layout = {}
shards = {"a.tfrecord": [], "b.tfrecord": [], "c.tfrecord": [], "d.tfrecord": []}


def add(shard, data=None, reason=None, **kw):
    global samples
    idx = samples
    rec_index = len(shards[shard])
    if data is None:
        data = good(idx)
    shards[shard].append(record(data, **kw))
    if reason:
        bad[idx] = [shard, rec_index, reason]
    samples += 1


for _ in range(batch):
    add("a.tfrecord")                       # batch 0: all good
trunc = good(0)
jp = jpegs[0]
add("b.tfrecord", example({"image/encoded": jp[: len(jp) // 2], "image/class/label": 1}),
    "truncated JPEG")                       # batch 1
for _ in range(batch - 1):
    add("b.tfrecord")
for _ in range(batch):
    add("b.tfrecord")                       # batch 2: good
add("b.tfrecord")
add("b.tfrecord", example({"image/encoded": b"\x89PNG\r\n\x1a\n" + b"\0" * 200,
                           "image/class/label": 3}), "PNG, not JPEG")  # batch 3
for _ in range(batch - 2):
    add("b.tfrecord")
for _ in range(2):
    add("b.tfrecord")
add("b.tfrecord", bad_data_crc=True, reason="payload CRC")  # batch 4
for _ in range(batch - 3):
    add("b.tfrecord")
add("b.tfrecord", example({"image/other": jpegs[1], "image/class/label": 5}),
    "missing image key")                     # batch 5
for _ in range(batch - 1):
    add("b.tfrecord")
add("b.tfrecord", bad_len_crc=True, reason="length CRC")  # batch 6
for _ in range(batch - 1):
    add("b.tfrecord")
add("b.tfrecord", example({"image/encoded": open(big, "rb").read(), "image/class/label": 7}),
    "over --max-pixels")                     # batch 7
for _ in range(batch - 1):
    add("b.tfrecord")
zero = example({"image/encoded": b"", "image/class/label": 8})
add("b.tfrecord", zero, "zero-length image")  # batch 8
for _ in range(batch - 1):
    add("b.tfrecord")
add("b.tfrecord", example({"image/encoded": jpegs[2]}), "missing label key")  # batch 9
for _ in range(batch - 1):
    add("b.tfrecord")
for _ in range(batch):
    add("c.tfrecord")                        # batch 10: good, then a cut record
for _ in range(batch):
    add("d.tfrecord")                        # batch 11: good
for name, recs in shards.items():
    write_shard(os.path.join(out, name), recs)
# cut c.tfrecord in the middle of an extra record
with open(os.path.join(out, "c.tfrecord"), "ab") as f:
    f.write(record(good(0))[:100])
json.dump({"samples": samples, "batches": (samples + batch - 1) // batch,
           "bad": bad, "cut_shard": "c.tfrecord"}, sys.stdout)
