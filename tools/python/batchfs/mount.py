"""batchfs.Mount: a batchfs mount as a context manager, and what the
loaders need to know of a mount or a mounted folder.

    with batchfs.Mount("/data/train", batch=32, size=(224, 224),
                       dtype="uint8", shuffle=1, epochs=90,
                       rank="auto", world="auto") as m:
        m.path, m.info, m.epoch_dir(3)

How a Mount never leaves a daemon behind.  It mounts with `--hold`: the
mount has a file MNT/hold, which every process that uses the mount keeps
open, and the daemon unmounts itself once the last open of it is closed.
The kernel closes every file of a process when it exits, however it dies
(an exception, SIGTERM, SIGKILL, the OOM killer), so the daemon learns of
it without anyone left to tell it.  A mount that nobody has opened within
HOLD_WAIT seconds of starting (its starter died in between) unmounts
itself too.  close() (and leaving the `with`) closes this process's hold
and, for a mount of its own, waits until the daemon is gone.  A daemon
that died (kill -9, the OOM killer) leaves a dead mount, on which every
call fails with ENOTCONN: close() detaches it (`batchfs unmount`, which
cleans a dead batchfs mount and nothing else), and a Mount that finds an
earlier run's dead mount on its mount point does the same first.

One mount per node (per_node=True).  The process with LOCAL_RANK 0 mounts
`--ranks A-B --world W` for the node's ranks A..B (RANK - LOCAL_RANK and
LOCAL_WORLD_SIZE of them; Slurm: SLURM_PROCID - SLURM_LOCALID and the
node's SLURM_TASKS_PER_NODE); every local rank, rank 0 included, holds
MNT/hold and reads MNT/rank-R/.  The others wait for the mount.  Rank 0's
close() waits until every local rank has arrived (so that the mount does
not end before the last of them came), then lets go; the mount ends when
the last local rank has left or died.  The mount point, unless given, is a
folder in the temporary directory named after the job (torchrun's
TORCHELASTIC_RUN_ID, restart count, MASTER_ADDR and MASTER_PORT; Slurm's
job and step), the source and the options, so the ranks of one job find
it and two jobs never share one.  Local rank 0 holds a lock on that
folder from before it mounts; a job killed whole (SIGKILL, a node's job
cancelled) leaves the folder empty and unlocked once its mount ended, and
the next Mount on the node removes it (sweep_private_mountpoints).  A
node's ranks must be consecutive (always with torchrun; Slurm's default
block distribution).

split="shards" (`--split shards`) gives each node a span of the epoch's
block order, so that it reads about 1/nodes of the shards.  A node is one
per-node mount, so per_node=True says how many ranks a node has
(LOCAL_WORLD_SIZE); a mount of one rank says it with node_ranks= (by
default LOCAL_WORLD_SIZE, or Slurm's tasks on this node, else 1).

resume=state (a state_dict() of batchfs.torch.BatchDataset, batchfs.tf or
batchfs.jax, saved by a job of any world) mounts with `--resume`: the
state's epoch serves only what that job had not consumed, divided over
this world, and the shuffle block is the state's.  The loader's
load_state_dict(state) then starts there (see batchfs._state).
"""

import errno
import fcntl
import hashlib
import json
import os
import re
import select
import subprocess
import tempfile
import time

from . import _state, _where
from ._npy import BatchfsError

__all__ = ["Mount", "open_source", "HOLD_WAIT"]

HOLD_WAIT = 60   # seconds a fresh mount waits for its first holder

# Options a Mount sets itself.
_OWN = {"rank", "world", "ranks", "hold", "f", "d", "foreground", "debug"}
# ...and those it sets unless given (node_ranks, shuffle_block) or takes
# as resume= (the state's).



def _is_url(source):
    """A remote source that batchfs mount takes as it is (never a path)."""
    return isinstance(source, str) and source.lower().startswith(
        ("s3://", "http://", "https://"))

def _cli_args(options):
    """Python names of `batchfs mount` options, as command-line arguments:
    batch=32 -> --batch 32, size=(224, 224) -> --size 224x224, mean=(...)
    -> --mean a,b,c, drop_remainder=True -> --drop-remainder,
    passthrough=False -> --no-passthrough, fuse_options="x,y" -> -o x,y.
    None leaves an option at its default."""
    args = []
    for name, value in options.items():
        if name in _OWN:
            raise TypeError("Mount sets %r itself (see rank=, world=, "
                            "per_node=)" % name)
        if value is None:
            continue
        if name == "fuse_options":
            args += ["-o", ",".join(value) if isinstance(value, (list, tuple))
                     else str(value)]
            continue
        flag = "--" + name.replace("_", "-")
        if name in ("passthrough", "push"):
            if value is False:
                args.append("--no-" + name)
            elif value is not True:
                raise ValueError("%s= takes True or False" % name)
            continue
        if name == "shuffle" and isinstance(value, bool):
            raise ValueError("shuffle= takes a seed (an int), not %r" % value)
        if value is True:
            args.append(flag)
            continue
        if value is False:
            continue
        if name == "size":
            h, w = (value, value) if isinstance(value, int) else tuple(value)
            value = "%dx%d" % (h, w)
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args += [flag, str(value)]
    return args


def _env_int(*names):
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                raise BatchfsError("$%s=%r is not a number" % (n, v))
    return None


def _slurm_local_world():
    """This node's task count from SLURM_TASKS_PER_NODE ("4(x2),3") and
    SLURM_NODEID, or SLURM_NTASKS_PER_NODE."""
    tpn, node = os.environ.get("SLURM_TASKS_PER_NODE"), _env_int("SLURM_NODEID")
    if tpn and node is not None:
        counts = []
        for part in tpn.split(","):
            if "(x" in part:
                c, rep = part.rstrip(")").split("(x")
                counts += [int(c)] * int(rep)
            else:
                counts.append(int(part))
        if node < len(counts):
            return counts[node]
    return _env_int("SLURM_NTASKS_PER_NODE")


def _rank_world(rank, world):
    """rank="auto" / world="auto": torchrun's RANK / WORLD_SIZE, else
    Slurm's SLURM_PROCID / SLURM_NTASKS, else 0 / 1."""
    if rank == "auto":
        rank = _env_int("RANK", "SLURM_PROCID")
        rank = 0 if rank is None else rank
    if world == "auto":
        world = _env_int("WORLD_SIZE", "SLURM_NTASKS")
        world = 1 if world is None else world
    if rank is None and world is None:
        return None, None
    rank = 0 if rank is None else int(rank)
    world = 1 if world is None else int(world)
    if not 0 <= rank < world:
        raise ValueError("rank %d is not in 0..world-1 (world %d)" %
                         (rank, world))
    return rank, world


def _local(world):
    """(local rank, local world size) of this process, from torchrun or
    Slurm; (0, 1) for a single process without either."""
    lr = _env_int("LOCAL_RANK", "SLURM_LOCALID")
    lw = _env_int("LOCAL_WORLD_SIZE")
    if lw is None and os.environ.get("SLURM_LOCALID") is not None:
        lw = _slurm_local_world()
    if lr is None and lw is None and world == 1:
        return 0, 1
    if lr is None or lw is None:
        raise BatchfsError("per_node=True needs LOCAL_RANK and "
                           "LOCAL_WORLD_SIZE (torchrun) or SLURM_LOCALID, "
                           "SLURM_TASKS_PER_NODE and SLURM_NODEID (srun)")
    if not 0 <= lr < lw:
        raise BatchfsError("LOCAL_RANK %d is not in 0..%d" % (lr, lw - 1))
    return lr, lw


def _job_key():
    keys = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
            "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURM_STEP_ID")
    return ";".join("%s=%s" % (k, os.environ.get(k, "")) for k in keys)


def _xattr(path, name):
    try:
        return os.getxattr(path, name).decode()
    except OSError:
        return None


def _dead(path):
    """Is path a mount whose daemon is gone (every call into it fails
    with ENOTCONN)?  os.path.ismount() says False for it, and a stat may
    still be answered from the kernel's attribute cache: an xattr is
    always asked of the daemon."""
    try:
        os.getxattr(path, "user.batchfs.pid")
    except OSError as e:
        # ECONNABORTED: a request the end of the connection cut short
        return e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    return False


def _wait_pid_exit(pid, timeout):
    """True once process pid has exited (within timeout seconds)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        if fd is not None:
            return bool(select.select([fd], [], [], timeout)[0])
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return True  # exited; its reaper has not come yet
            except OSError:
                return True
            time.sleep(0.05)
        return False
    finally:
        if fd is not None:
            os.close(fd)


# A private mount point: tempfile.mkdtemp(prefix="batchfs-") in the temp
# folder, locked (flock) by the Mount that made it for as long as it lives.
_PRIVATE = re.compile(r"batchfs-[a-z0-9_]{8}\Z")


def _node_name(uid):
    """A per_node mount point's name: batchfs-UID-KEY (KEY: 16 hex digits
    of the job, source and options), in the temp folder; locked (flock,
    shared) by the node's local rank 0 from before it mounts until its
    Mount ends, so that a sweep never takes it from a live job."""
    return re.compile(r"batchfs-%d-[0-9a-f]{16}\Z" % uid)


def _private_mountpoint():
    """A fresh private mount point, and the open, flock'ed descriptor that
    says it is in use (the kernel drops the lock when the process dies,
    however it dies)."""
    while True:
        path = tempfile.mkdtemp(prefix="batchfs-")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a sweep holds it only briefly
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return path, fd
        except FileNotFoundError:
            pass  # swept between mkdtemp and the lock: make another
        os.close(fd)


def _mount_points():
    """The mount points of this mount namespace (/proc/self/mountinfo; no
    file system is asked anything)."""
    out = set()
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                out.add(re.sub(r"\\([0-7]{3})",
                               lambda m: chr(int(m.group(1), 8)),
                               line.split()[4]))
    except OSError:
        pass
    return out


def _node_mountpoint(path):
    """The per_node mount point path, made if missing, and the open,
    flock'ed (shared) descriptor that says a live job's local rank 0 is
    about to mount it (or has)."""
    while True:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_SH)  # a sweep holds it only briefly
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass  # swept between mkdir and the lock: make it again
        os.close(fd)


def sweep_private_mountpoints(program=None, tmpdir=None):
    """Remove this user's private mount points (temp/batchfs-XXXXXXXX)
    that a killed process left: empty, unlocked (no live Mount holds
    them) and no mount, or a dead batchfs mount (its daemon gone), which
    `batchfs unmount` detaches first; and the per_node ones
    (temp/batchfs-UID-KEY) that a killed job left: empty, unlocked and no
    mount (any mount there, live, stopped or dead, is left alone, and
    nothing is asked of it).  Anything else (a live mount, a folder with
    files, another user's) is left alone.  Returns the paths removed.
    Every Mount without a mount point of its own (per_node: local rank
    0's) calls it first."""
    tmpdir = tmpdir or tempfile.gettempdir()
    removed = []
    node = _node_name(os.getuid())
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return removed
    mounted = None
    for name in names:
        per_node = bool(node.match(name))
        if not _PRIVATE.match(name) and not per_node:
            continue
        path = os.path.join(tmpdir, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != os.getuid() or not os.path.isdir(path) or \
                os.path.islink(path):
            continue
        if per_node:
            # Ask nothing of a per_node mount, live or not: its daemon may
            # be stopped (a suspended Slurm job), and a call into it would
            # wait for as long.  Only an empty folder is removed.
            if mounted is None:
                mounted = _mount_points()
            if os.path.realpath(path) in mounted:
                continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            fd = None  # a dead mount: its root cannot be opened
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live Mount's
            if _dead(path) and program:
                subprocess.run([program, "unmount", path],
                               stdin=subprocess.DEVNULL, capture_output=True)
            if os.path.ismount(path):
                continue
            try:
                os.rmdir(path)  # only when empty
                removed.append(path)
            except OSError:
                pass
        finally:
            if fd is not None:
                os.close(fd)
    return removed


class Mount:
    """`batchfs mount SOURCE MOUNTPOINT --opt ...` for the life of the object.

    source      a shard directory (TFRecord, WebDataset tars or JPEG folders),
                or s3://BUCKET/PREFIX, or an http(s):// URL (WebDataset's
                braces: shard-{000000..000146}.tar), kept as given
    mountpoint  where to mount: an existing folder, as `batchfs mount`
                wants it; None: a private temporary folder (or, with
                per_node, one that the node's ranks agree on), removed at
                close (and, if a killed process left one, by the next
                Mount: sweep_private_mountpoints)
    rank, world None (the default): the whole dataset; ints; or "auto" for
                RANK / WORLD_SIZE (torchrun) or SLURM_PROCID /
                SLURM_NTASKS (srun), 0 / 1 when neither is set
    per_node    one mount for the node's local ranks (module doc): this
                process reads its own MNT/rank-R/
    resume      a state_dict() of a run (of any world) stopped part way
                through an epoch, or a `--resume` value: this mount serves
                the rest of that epoch over this world (module doc)
    program     the batchfs program (default: found as _where.py says)
    timeout     seconds to wait for the mount, or for the other local ranks
    **options   `batchfs mount` options by their Python names: batch=32,
                size=(224, 224), dtype="uint8", shuffle=1, epochs=90,
                cache="none" or a path, threads=4, mem="2G", augment="flip",
                layout="nchw", mean=(...), std=(...), drop_remainder=True,
                passthrough=False, fuse_options=..., and so on

    Mounts at once; use it in a `with` block or call close().  Attributes:
    .path (the mount point), .info (dataset.json as a dict), .rank and
    .world (None without), .rank_dir (the folder that holds the epochs:
    .path, or .path/rank-R), .epoch_dir(e), .pid (the daemon's).
    Raises BatchfsError with batchfs's own message when the mount fails.
    """

    def __init__(self, source, mountpoint=None, *, rank=None, world=None,
                 per_node=False, program=None, timeout=120.0, resume=None,
                 **options):
        source = os.fspath(source)
        self.source = (source if _is_url(source)
                       else os.path.abspath(source))
        self.timeout = float(timeout)
        self.per_node = bool(per_node)
        self.rank, self.world = _rank_world(rank, world)
        if self.per_node and self.rank is None:
            self.rank, self.world = _rank_world("auto", "auto")
        self.program = program or _where.program()
        if not self.program:
            raise BatchfsError("the batchfs program was not found: build it "
                               "(make), put it on PATH or set $BATCHFS")
        why = _where.missing_system_parts(self.program)
        if why:
            raise BatchfsError(why)
        options = self._order_options(options, resume)
        self._args = _cli_args(options)
        self._hold = None
        self._made_dir = False
        self._dir_lock = None
        self._owner = True
        self.info = None
        self.pid = None
        if self.per_node:
            self._local_rank, self._local_world = _local(self.world)
            first = self.rank - self._local_rank
            if first < 0 or first + self._local_world > self.world:
                raise BatchfsError(
                    "RANK %d, LOCAL_RANK %d, LOCAL_WORLD_SIZE %d, world %d: "
                    "the node's ranks are not consecutive" %
                    (self.rank, self._local_rank, self._local_world,
                     self.world))
            self._ranks = (first, first + self._local_world - 1)
            self._owner = self._local_rank == 0
        if mountpoint is None:
            if self.per_node:
                key = hashlib.sha1(("%s|%r|%s|%s" % (
                    self.source, self._args, self._ranks, _job_key())
                ).encode()).hexdigest()[:16]
                mountpoint = os.path.join(tempfile.gettempdir(),
                                          "batchfs-%d-%s" % (os.getuid(), key))
                if self._owner:
                    # what killed jobs left on this node; the folder
                    # itself is made (and locked) just before mounting
                    sweep_private_mountpoints(self.program)
                # the job's own folder: whichever rank leaves last removes it
                self._made_dir = True
            else:
                sweep_private_mountpoints(self.program)
                mountpoint, self._dir_lock = _private_mountpoint()
                self._made_dir = True
        elif self._owner and not os.path.isdir(mountpoint) and \
                not _dead(mountpoint):
            # as `batchfs mount` says it: a mount point is made by its user
            raise BatchfsError(
                "mount point %s: %s (create it first: mkdir -p %s; or give "
                "no mount point for a private one, removed at close)" % (
                    mountpoint, "not a directory" if os.path.exists(
                        mountpoint) else os.strerror(errno.ENOENT),
                    mountpoint))
        self.path = os.path.abspath(os.fspath(mountpoint))
        try:
            if self._owner:
                self._mount()
            else:
                self._join()
        except BaseException:
            self._cleanup_dir()
            raise

    def _order_options(self, options, resume):
        """options with what the order needs: the state's --resume and
        shuffle block, and the ranks a node for a one-rank mount of a
        shards split."""
        options = dict(options)
        if resume is not None:
            opt = _state.resume_option(resume)
            if opt:
                options["resume"] = opt
            g = resume.get("global") if isinstance(resume, dict) else None
            if g and options.get("shuffle_block") is None and \
                    g.get("shuffle_block") is not None:
                # the state's order, whatever this world's default
                options["shuffle_block"] = g["shuffle_block"]
        if options.get("split") == "shards" and not self.per_node and \
                options.get("node_ranks") is None and self.world is not None:
            lw = _env_int("LOCAL_WORLD_SIZE")
            if lw is None and os.environ.get("SLURM_LOCALID") is not None:
                lw = _slurm_local_world()
            options["node_ranks"] = lw or 1
        return options

    # -- starting ----------------------------------------------------------

    def _cmd(self):
        cmd = [self.program, "mount", self.source, self.path] + self._args
        if self.per_node:
            cmd += ["--ranks", "%d-%d" % self._ranks, "--world",
                    str(self.world)]
        elif self.world is not None:
            cmd += ["--rank", str(self.rank), "--world", str(self.world)]
        return cmd + ["--hold", str(HOLD_WAIT)]

    def _mount(self):
        end = time.monotonic() + self.timeout
        # an earlier run's mount whose daemon died: `batchfs unmount`
        # cleans a dead batchfs mount (and touches nothing else)
        if _dead(self.path):
            self._detach_dead()
        # the mount of an earlier run that is ending (its holders are gone)
        while os.path.ismount(self.path) and time.monotonic() < end:
            time.sleep(0.1)
        if self.per_node and self._made_dir and self._dir_lock is None:
            self._dir_lock = _node_mountpoint(self.path)
        try:
            p = subprocess.run(self._cmd(), stdin=subprocess.DEVNULL,
                               capture_output=True, text=True,
                               timeout=max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise BatchfsError("batchfs mount %s %s: no answer within %.0f s"
                               % (self.source, self.path, self.timeout))
        if p.returncode != 0:
            raise BatchfsError((p.stderr or p.stdout).strip() or
                               "batchfs mount exited with status %d" %
                               p.returncode)
        self.message = p.stdout.strip()
        try:
            self._take_hold()
        except BaseException:
            subprocess.run([self.program, "unmount", self.path],
                           capture_output=True)
            raise

    def _join(self):
        """A local rank other than 0: wait for rank 0's mount of our rank."""
        end = time.monotonic() + self.timeout
        last = "not mounted"
        while True:
            if os.path.ismount(self.path):
                try:
                    with open(os.path.join(self.path, "dataset.json")) as f:
                        info = json.load(f)
                    if self.rank in info.get("ranks", ()) and \
                            info.get("world") == self.world:
                        try:
                            self._take_hold()
                            return
                        except OSError as e:
                            last = "MNT/hold: %s" % e
                    else:
                        last = "it serves ranks %s of %s" % (
                            info.get("ranks"), info.get("world"))
                except (OSError, ValueError) as e:
                    last = str(e)
            if time.monotonic() > end:
                raise BatchfsError(
                    "LOCAL_RANK 0 did not mount rank %d of %d on %s within "
                    "%.0f s (%s)" % (self.rank, self.world, self.path,
                                     self.timeout, last))
            time.sleep(0.05)

    def _take_hold(self):
        self._hold = os.open(os.path.join(self.path, "hold"),
                             os.O_RDONLY | os.O_CLOEXEC)
        with open(os.path.join(self.path, "dataset.json")) as f:
            self.info = json.load(f)
        pid = _xattr(self.path, "user.batchfs.pid")
        self.pid = int(pid) if pid else None

    # -- what it serves ----------------------------------------------------

    @property
    def rank_dir(self):
        if self.per_node:
            return os.path.join(self.path, "rank-%d" % self.rank)
        return self.path

    @property
    def epochs(self):
        return int(self.info["epochs"])

    def epoch_dir(self, e):
        """The folder of epoch e (0 <= e < epochs) this process reads."""
        e = int(e)
        if not 0 <= e < self.epochs:
            raise IndexError("epoch %d: the mount has epochs 0..%d" %
                             (e, self.epochs - 1))
        width = max(4, len(str(self.epochs - 1)))
        return os.path.join(self.rank_dir, "epoch-%0*d" % (width, e))

    def __len__(self):
        """Batches per epoch."""
        return int(self.info["batches_per_epoch"])

    def __fspath__(self):
        return self.rank_dir

    def __repr__(self):
        return "Mount(%r on %r%s)" % (
            self.source, self.path,
            "" if self.world is None else ", rank %d of %d" % (self.rank,
                                                              self.world))

    # -- stopping ----------------------------------------------------------

    def _holds(self):
        v = _xattr(os.path.join(self.path, "hold"), "user.batchfs.holds")
        return int(v) if v else 0

    def close(self, _wait_others=None):
        """Let go of the mount.  A mount of its own is unmounted and its
        daemon waited for; with per_node, local rank 0 first waits (at most
        timeout seconds) until every local rank has arrived, and the mount
        ends when the last of them lets go.  A mount whose daemon died
        (kill -9, the OOM killer) is detached, so that a rerun finds the
        mount point free.  Idempotent."""
        if self._hold is None:
            self._cleanup_dir()
            return
        if self.per_node and self._owner:
            wait = self.timeout if _wait_others is None else _wait_others
            end = time.monotonic() + wait
            while self._holds() < self._local_world and \
                    time.monotonic() < end and not _dead(self.path):
                time.sleep(0.05)
        last = _xattr(os.path.join(self.path, "hold"),
                      "user.batchfs.holders") == "1"
        os.close(self._hold)
        self._hold = None
        if not self.per_node or last:
            self._wait_gone()
        elif self.pid:
            # two ranks that leave at the same instant each see the other's
            # hold, so neither is "last": give the daemon a moment to end
            # (a pidfd, no call into the mount), so that whichever of them
            # finds it gone removes the mount point
            _wait_pid_exit(self.pid, 2.0)
        # its daemon died (killed, the OOM killer): nobody else will
        # detach the dead mount, and a rerun would find it in the way
        if _dead(self.path):
            self._detach_dead()
        self._cleanup_dir()

    def _detach_dead(self):
        """Detach the dead batchfs mount on self.path: `batchfs unmount`
        cleans one (and refuses anything that is not batchfs); else
        fusermount3 -u -z.  Whichever local rank comes first does it."""
        p = subprocess.run([self.program, "unmount", self.path],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True)
        if p.returncode != 0 and _dead(self.path):
            try:
                subprocess.run(["fusermount3", "-u", "-z", self.path],
                               stdin=subprocess.DEVNULL, capture_output=True)
            except OSError:
                pass  # no fusermount3: the error the caller sees stays

    def _wait_gone(self):
        """After the last hold is closed: the daemon unmounts itself."""
        if self.pid and _wait_pid_exit(self.pid, 30.0):
            return  # (a daemon that died leaves a dead mount: close())
        if os.path.ismount(self.path) and not self.per_node:
            p = subprocess.run([self.program, "unmount", self.path],
                               capture_output=True, text=True)
            if p.returncode != 0 and os.path.ismount(self.path):
                raise BatchfsError("cannot unmount %s: %s" %
                                   (self.path, p.stderr.strip()))

    def _cleanup_dir(self):
        if self._made_dir and not os.path.ismount(self.path):
            try:
                os.rmdir(self.path)
                self._made_dir = False
            except FileNotFoundError:
                self._made_dir = False  # another local rank removed it
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EBUSY):
                    raise
        if not self._made_dir and self._dir_lock is not None:
            os.close(self._dir_lock)
            self._dir_lock = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # after an exception, wait less for ranks that may never come
        self.close(_wait_others=None if exc_type is None else
                   min(self.timeout, 10.0))
        return False

    def __del__(self):
        try:
            if self._hold is not None:
                os.close(self._hold)  # the daemon ends itself
                self._hold = None
            if self._dir_lock is not None:
                os.close(self._dir_lock)
                self._dir_lock = None
        except Exception:
            pass


class _Source:
    """What the loaders need of a mount, a mount root or a rank folder."""

    def __init__(self, info, base):
        self.info = info
        self.base = base

    @property
    def epochs(self):
        return int(self.info["epochs"])

    @property
    def batches(self):
        """Batches of a whole epoch (the resumed one: batches_of)."""
        return int(self.info["batches_per_epoch"])

    def batches_of(self, e):
        """Batches of epoch e (an epoch resumed part way has fewer)."""
        return _state.epoch_batches(self.info, e)

    @property
    def rank(self):
        base = os.path.basename(os.path.normpath(self.base))
        if base.startswith("rank-") and base[5:].isdigit():
            return int(base[5:])
        return self.info.get("rank")

    def epoch_dir(self, e):
        e = int(e)
        if not 0 <= e < self.epochs:
            raise IndexError("epoch %d: the mount has epochs 0..%d" %
                             (e, self.epochs - 1))
        width = max(4, len(str(self.epochs - 1)))
        return os.path.join(self.base, "epoch-%0*d" % (width, e))


def open_source(mount_or_path, rank=None):
    """A Mount, a mount root (MNT, with its dataset.json) or a rank folder
    of a mount of several ranks (MNT/rank-R).  A root of several ranks
    takes `rank`, else $RANK.  Raises BatchfsError for anything else (an
    epoch folder: give its mount, or use GpuLoader on it)."""
    if isinstance(mount_or_path, Mount):
        return _Source(mount_or_path.info, mount_or_path.rank_dir)
    if isinstance(mount_or_path, _Source):
        return mount_or_path
    path = os.path.abspath(os.fspath(mount_or_path))
    name = os.path.basename(path)
    root, sub = path, None
    if not os.path.exists(os.path.join(path, "dataset.json")):
        parent = os.path.dirname(path)
        if name.startswith("rank-") and \
                os.path.exists(os.path.join(parent, "dataset.json")):
            root, sub = parent, path
        elif name.startswith("epoch-"):
            raise BatchfsError(
                "%s is an epoch folder: give the mount (or its root) to "
                "choose epochs with set_epoch, or read it with "
                "batchfs.GpuLoader" % path)
        else:
            raise BatchfsError("%s is not a batchfs mount (no dataset.json)"
                               % path)
    with open(os.path.join(root, "dataset.json")) as f:
        info = json.load(f)
    if "ranks" in info and sub is None:
        r = rank if rank is not None else _env_int("RANK", "SLURM_PROCID")
        if r is None or r not in info["ranks"]:
            raise BatchfsError("%s serves ranks %s: give its rank-R folder "
                               "(or rank=, or $RANK)" % (root, info["ranks"]))
        sub = os.path.join(root, "rank-%d" % r)
    return _Source(info, sub or root)
