#!/usr/bin/env bash
# The first hour of a new user (issue 25): a batch the mount failed (a
# corrupt JPEG) raises batchfs.BatchfsError (an OSError, errno EIO) naming
# the file, the bad sample, the mount's cause and the fix, from
# batchfs.load, GpuLoader, batchfs.torch (workers too), batchfs.jax and,
# inside TensorFlow's error, batchfs.tf; a torch state_dict refuses the
# wrong mount naming each field; dataset.json's normalization says what is
# done; the foot-guns (--mean without --std, a flat folder, NCHW in any
# case, a misspelt long option, an epoch iterated twice).
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS TMPDIR="$D/tmp"
mkdir -p "$TMPDIR"
has() { $PY -c "import $1" 2>/dev/null; }

"$MKJPEG" "$D/src" --classes 2 --per-class 4 --seed 25 >/dev/null || { not_ok mkjpeg; t_end; }
bad=$D/src/class_000/img_00001.jpg
truncate -s $(($(stat -c %s "$bad") / 3)) "$bad" # sample 1: batch 0
mount_fg "$D/src" "$D/m" --batch 2 --size 16x16 --cache none --threads 1 ||
	{ not_ok "mount"; t_end; }
F=$D/m/epoch-0000/batch-000000.npy

cat >"$D/want.py" <<'PY'
import errno, os, sys
import batchfs
def want(e, path):
    """e: the BatchfsError of batch file path (sample 1, the bad JPEG)."""
    assert isinstance(e, batchfs.BatchfsError) and isinstance(e, OSError), type(e)
    assert e.errno == errno.EIO, e.errno
    s = str(e)
    assert path in s, s                              # the batch file
    bad = os.environ["BAD"]
    assert bad in s and "sample 1 " in s, s          # the bad sample, its image
    assert "Invalid JPEG" in s or "JPEG" in s, s     # the cause, from the mount
    assert 'on_error="skip"' in s, s                 # the fix
    assert e.filename == path, e.filename
    assert [x["sample"] for x in e.samples] == [1], e.samples
    assert e.samples[0]["path"] == bad, e.samples
PY
export BAD=$bad
check "batchfs.load of the failed batch: BatchfsError (EIO) naming file, sample, cause and fix" \
	$PY - "$F" <<'PY'
import sys; sys.path.insert(0, sys.argv[1].rsplit("/m/", 1)[0])
import numpy as np
import batchfs
from want import want
try:
    np.load(sys.argv[1])
except OSError as e:
    assert not isinstance(e, batchfs.BatchfsError)   # numpy's own: bare, as before
for f in (sys.argv[1], sys.argv[1][:-4] + ".labels.npy"):
    try:
        batchfs.load(f)
        raise SystemExit("read a failed batch")
    except batchfs.BatchfsError as e:
        want(e, f)
assert batchfs.load(sys.argv[1].replace("000000", "000001")).shape == (2, 16, 16, 3)
PY
check "GpuLoader's NumPy path: the same BatchfsError, after no batch" $PY - "$F" <<'PY'
import os, sys; sys.path.insert(0, sys.argv[1].rsplit("/m/", 1)[0])
import batchfs
from want import want
for depth in (0, 2):
    got = []
    try:
        for b in batchfs.GpuLoader(os.path.dirname(sys.argv[1]), device="cpu", depth=depth):
            got.append(b)
        raise SystemExit("no error")
    except batchfs.BatchfsError as e:
        want(e, sys.argv[1])
    assert got == [], len(got)
PY
if has torch; then
	check "batchfs.torch: BatchfsError from the CPU path, and through DataLoader workers" \
		$PY - "$F" <<'PY'
import os, sys; sys.path.insert(0, sys.argv[1].rsplit("/m/", 1)[0])
import torch, batchfs, batchfs.torch
from want import want
root = sys.argv[1].rsplit("/epoch-", 1)[0]
ds = batchfs.torch.BatchDataset(root)
try:
    next(iter(ds))
    raise SystemExit("no error")
except batchfs.BatchfsError as e:
    want(e, sys.argv[1])
dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
try:
    list(dl)
    raise SystemExit("no error")
except batchfs.BatchfsError as e:   # re-raised by the DataLoader from its message
    assert e.errno == 5 and sys.argv[1] in str(e) and os.environ["BAD"] in str(e), str(e)
PY
else
	not_ok "torch: not installed"
fi
if has jax; then
	check "batchfs.jax: BatchfsError" $PY - "$F" <<'PY'
import sys; sys.path.insert(0, sys.argv[1].rsplit("/m/", 1)[0])
import batchfs, batchfs.jax
from want import want
try:
    list(batchfs.jax.batches(sys.argv[1].rsplit("/epoch-", 1)[0]))
    raise SystemExit("no error")
except batchfs.BatchfsError as e:
    want(e, sys.argv[1])
PY
fi
if has tensorflow; then
	check "batchfs.tf: TensorFlow's error carries the BatchfsError and its text" \
		$PY - "$F" <<'PY'
import os, sys
import tensorflow as tf, batchfs, batchfs.tf
try:
    list(batchfs.tf.dataset(sys.argv[1].rsplit("/epoch-", 1)[0]))
    raise SystemExit("no error")
except tf.errors.OpError as e:
    s = str(e)
    assert "BatchfsError: " + sys.argv[1] in s and os.environ["BAD"] in s and 'on_error="skip"' in s, s
PY
fi
unmount_wait "$D/m"

# -- a resume refuses the wrong mount ------------------------------------
"$MKJPEG" "$D/good" --classes 2 --per-class 10 --seed 26 >/dev/null || not_ok mkjpeg
"$MKJPEG" "$D/small" --classes 2 --per-class 5 --seed 26 >/dev/null || not_ok mkjpeg
mount_fg "$D/good" "$D/r1" --batch 4 --shuffle 1 --size 8x8 --cache none --threads 1 || not_ok "mount r1"
mount_fg "$D/good" "$D/r1b" --batch 4 --shuffle 1 --size 8x8 --cache none --threads 1 || not_ok "mount r1b"
mount_fg "$D/good" "$D/r2" --batch 2 --shuffle 2 --size 8x8 --cache none --threads 1 || not_ok "mount r2"
mount_fg "$D/small" "$D/r3" --batch 4 --shuffle 1 --size 8x8 --cache none --threads 1 || not_ok "mount r3"
if has torch; then
	check "load_state_dict refuses another mount's state, naming each field; takes its own" \
		$PY - "$D" <<'PY'
import sys, torch, batchfs, batchfs.torch
D = sys.argv[1]
a = batchfs.torch.BatchDataset(D + "/r1")
it = iter(a); next(it); next(it)
st = a.state_dict()
assert st["epoch"] == 0 and st["batch"] == 2, st
st = torch.load(__import__("io").BytesIO(
    (lambda b: (torch.save(st, b), b.getvalue())[1])(__import__("io").BytesIO())))
b = batchfs.torch.BatchDataset(D + "/r1b")     # the same settings, the same source
b.load_state_dict(st)
assert b.state_dict()["batch"] == 2
for other, want in (("/r2", ("batch_size 4 (this mount: 2)", "seed 1 (this mount: 2)")),
                    ("/r3", ("samples 20 (this mount: 10)", "batches_per_epoch 5", "source"))):
    c = batchfs.torch.BatchDataset(D + other)
    try:
        c.load_state_dict(st)
        raise SystemExit("loaded into " + other)
    except ValueError as e:
        for w in want:
            assert w in str(e), (w, str(e))
c = batchfs.torch.BatchDataset(D + "/r2")
try:
    c.load_state_dict(st, allow=("batch_size",))
    raise SystemExit("allow= let more through than it names")
except ValueError as e:
    assert "seed 1" in str(e) and "; batch_size" not in str(e) and not str(e).split(": ", 1)[1].startswith("batch_size"), str(e)
for bad in (1.9, "1", None, True):
    try:
        b.load_state_dict(dict(st, epoch=bad))
        raise SystemExit("epoch %r accepted" % (bad,))
    except ValueError as e:
        assert "integer" in str(e), str(e)
b.load_state_dict(dict(st, epoch=__import__("numpy").int64(0)))
PY
fi
for m in r1 r1b r2 r3; do unmount_wait "$D/$m"; done

# -- dataset.json's normalization says what is done -----------------------
mount_fg "$D/good" "$D/n0" --batch 4 --size 8x8 --cache none --threads 1 || not_ok "mount n0"
mount_fg "$D/good" "$D/n1" --batch 4 --size 8x8 --cache none --threads 1 \
	--mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 || not_ok "mount n1"
check "with --mean/--std, dataset.json's normalization is the formula the batches follow" \
	$PY - "$D" <<'PY'
import json, sys
import numpy as np
D = sys.argv[1]
i0, i1 = (json.load(open(D + m + "/dataset.json")) for m in ("/n0", "/n1"))
assert i0["normalization"] == "resized / 255", i0["normalization"]
assert i1["normalization"].startswith("(resized / 255 - mean) / std"), i1["normalization"]
a = np.load(D + "/n0/epoch-0000/batch-000001.npy")   # resized / 255
b = np.load(D + "/n1/epoch-0000/batch-000001.npy")
mean, std = (np.asarray(i1[k], np.float32) for k in ("mean", "std"))
assert np.allclose((a - mean) / std, b, atol=1e-5), abs((a - mean) / std - b).max()
PY
unmount_wait "$D/n0"; unmount_wait "$D/n1"

# -- foot-guns ------------------------------------------------------------
for args in "--mean 0.5,0.5,0.5" "--std 0.2,0.2,0.2"; do
	out=$("$BATCHFS" mount $args "$D/good" "$D/never" 2>&1)
	check "mount $args alone is refused, saying both are needed (rc $?)" \
		bash -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -q "without --\(std\|mean\): normalizing takes both"' _ "$?" "$out"
done
[ -e "$D/never" ] && not_ok "a refused mount made its mount point"
for w in "--batch-size batch" "--batch_size=8 batch" "--suffle shuffle" "--drop_remainder drop-remainder"; do
	set -- $w
	out=$("$BATCHFS" mount "$1" 8 "$D/good" "$D/never" 2>&1)
	check "mount $1: unknown, and the nearest option is suggested" \
		bash -c 'printf "%s" "$1" | grep -qF "unknown option '"'"'$2'"'"' (did you mean --$3?)"' _ "$out" "$1" "$2"
done
out=$("$BATCHFS" mount --zzzz "$D/good" "$D/never" 2>&1)
check "an option near none: no suggestion" bash -c 'printf "%s" "$1" | grep -q "unknown option .--zzzz.;" && ! printf "%s" "$1" | grep -q "did you mean"' _ "$out"
out=$("$BATCHFS" unmount --lazzy "$D/never" 2>&1)
check "unmount --lazzy: did you mean --lazy?" bash -c 'printf "%s" "$1" | grep -qF "(did you mean --lazy?)"' _ "$out"

mkdir -p "$D/flat"
cp "$D/good"/class_000/img_0000[0-5].jpg "$D/flat/"
mount_fg "$D/flat" "$D/fl" --batch 2 --size 8x8 --cache none --threads 1 --layout NCHW || not_ok "mount flat (--layout NCHW)"
check "a flat folder: the mount message and dataset.json's classes_note say every label is 0" \
	$PY - "$D" <<'PY'
import json, sys
D = sys.argv[1]
i = json.load(open(D + "/fl/dataset.json"))
assert i["classes"] == [] and "flat folder" in i.get("classes_note", "") and \
    "label 0" in i["classes_note"], i.get("classes_note")
assert i["layout"] == "NCHW" and i["shape"][1] == 3, (i["layout"], i["shape"])
log = open(D + "/mount.log").read()
line = [l for l in log.splitlines() if "mounted " + D + "/flat" in l]
assert line and "flat folder" in line[0] and "label 0" in line[0], line
PY
if has torch; then
	check "Mount(layout='NCHW') and GpuLoader(layout='nchw') both take either case" \
		$PY - "$D" <<'PY'
import sys, batchfs
D = sys.argv[1]
with batchfs.Mount(D + "/good", batch=4, size=(8, 8), cache="none", layout="NCHW") as m:
    assert m.info["layout"] == "NCHW"
    x, _ = next(iter(batchfs.GpuLoader(m.epoch_dir(0), device="cpu", normalize=True, layout="nhwc")))
    assert x.shape == (4, 8, 8, 3), x.shape
PY
	check "BatchDataset iterated twice without set_epoch warns once; with set_epoch, never" \
		$PY - "$D" <<'PY'
import sys, warnings
import torch, batchfs, batchfs.torch
ds = batchfs.torch.BatchDataset(sys.argv[1] + "/fl")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    list(ds)
    assert not w, [str(x.message) for x in w]
    list(ds)                       # the same epoch again, after its end
    assert len(w) == 1 and "set_epoch" in str(w[0].message), [str(x.message) for x in w]
    list(ds)
    assert len(w) == 1, "warned twice"
ds = batchfs.torch.BatchDataset(sys.argv[1] + "/fl")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for e in range(ds.epochs):
        ds.set_epoch(e); list(ds)
    ds.set_epoch(0)
    it = iter(ds); next(it); it.close()  # not to its end: iterating again restarts it
    list(ds)
    ds.set_epoch(0); list(ds)      # set_epoch of the same epoch: meant
    ds.load_state_dict({"epoch": 0, "batch": 0}); list(ds)  # a position chosen: meant
    assert not w, [str(x.message) for x in w]
PY
fi
unmount_wait "$D/fl"

# -- leftover private mount points; a missing mount point -----------------
check "a killed process's private mount point is swept by the next Mount; live and non-empty ones stay" \
	$PY - "$D" <<'PY'
import json, os, signal, subprocess, sys, tempfile
import batchfs
from bfstest import wait_gone
D = sys.argv[1]
tmp = tempfile.gettempdir()
assert tmp.startswith(D), tmp          # the test's own temp folder
code = ("import batchfs, json, os, signal, sys\n"
        "m = batchfs.Mount(sys.argv[1], batch=4, size=(8, 8), cache='none')\n"
        "print(json.dumps([m.path, m.pid]), flush=True)\n"
        "if sys.argv[2] == 'kill': os.kill(os.getpid(), signal.SIGKILL)\n"
        "sys.stdin.read(); m.close()\n")
p = subprocess.run([sys.executable, "-c", code, D + "/good", "kill"],
                   capture_output=True, text=True)
assert p.returncode == -9, (p.returncode, p.stderr)
left, pid = json.loads(p.stdout)
assert wait_gone(pid, left), "daemon still running, or still mounted"
assert os.path.isdir(left) and os.listdir(left) == [], left   # what a kill leaves
live = subprocess.Popen([sys.executable, "-c", code, D + "/good", "hold"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
live_path, live_pid = json.loads(live.stdout.readline())
full = os.path.join(tmp, "batchfs-keepfile")
os.mkdir(full)
open(os.path.join(full, "x"), "w").close()
other = os.path.join(tmp, "batchfs-notmine.x")
os.mkdir(other)
try:
    with batchfs.Mount(D + "/good", batch=4, size=(8, 8), cache="none") as m:
        assert not os.path.exists(left), "the leftover mount point is still there"
        assert os.path.ismount(live_path), "swept a live Mount's mount point"
        assert os.path.exists(full) and os.path.exists(other)
finally:
    live.stdin.close()
    live.wait()
assert wait_gone(live_pid, live_path)
assert not os.path.exists(live_path), "the live Mount's close left its mount point"
PY
check "a killed job's per_node mount point is swept by the node's next Mount; a live job's, locked or mounted, stays" \
	$PY - "$D" <<'PY'
import fcntl, json, os, signal, subprocess, sys, tempfile
import batchfs
from bfstest import wait_gone
D = sys.argv[1]
tmp = tempfile.gettempdir()
assert tmp.startswith(D), tmp          # the test's own temp folder
code = ("import batchfs, json, os, signal, sys\n"
        "m = batchfs.Mount(sys.argv[1], per_node=True, batch=4, size=(8, 8), cache='none')\n"
        "print(json.dumps([m.path, m.pid]), flush=True)\n"
        "if sys.argv[2] == 'kill': os.kill(os.getpid(), signal.SIGKILL)\n"
        "sys.stdin.read(); m.close()\n")
env = {k: v for k, v in os.environ.items()
       if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "SLURM_", "MASTER_", "TORCHELASTIC"))}
def job(n, what, **kw):   # a job of its own: Slurm's job id tells them apart
    return subprocess.Popen([sys.executable, "-c", code, D + "/good", what],
                            env=dict(env, SLURM_JOB_ID=str(n)), text=True,
                            stdout=subprocess.PIPE, **kw)
p = job(1, "kill", stderr=subprocess.PIPE)
left, pid = json.loads(p.stdout.readline())
assert p.wait() == -9, p.stderr.read()
assert os.path.basename(left).startswith("batchfs-%d-" % os.getuid()), left
assert wait_gone(pid, left), "daemon still running, or still mounted"
assert os.path.isdir(left) and os.listdir(left) == [], left   # what a kill leaves
live = job(2, "hold", stdin=subprocess.PIPE)
live_path, live_pid = json.loads(live.stdout.readline())
# a job's local rank 0 between its lock and its mount: an empty folder, locked
early = os.path.join(tmp, "batchfs-%d-%s" % (os.getuid(), "0123456789abcdef"))
os.mkdir(early)
lock = os.open(early, os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(lock, fcntl.LOCK_SH)
try:
    with batchfs.Mount(D + "/good", per_node=True, batch=4, size=(8, 8), cache="none") as m:
        assert not os.path.exists(left), "the killed job's mount point is still there"
        assert os.path.ismount(live_path), "swept a live job's mount"
        assert os.path.isdir(early), "swept a live job's mount point before its mount"
finally:
    live.stdin.close()
    live.wait()
    os.close(lock)
    os.rmdir(early)
assert wait_gone(live_pid, live_path)
assert not os.path.exists(live_path), "the live job's close left its mount point"
PY
check "a missing mount point: Python refuses it as the CLI does, with the hint, and makes nothing" \
	$PY - "$D" <<'PY'
import os, subprocess, sys
import batchfs
D = sys.argv[1]
want = "create it first: mkdir -p " + D + "/no/such"
try:
    batchfs.Mount(D + "/good", D + "/no/such", batch=4, size=(8, 8), cache="none")
    raise SystemExit("mounted on a missing mount point")
except batchfs.BatchfsError as e:
    assert want in str(e), str(e)
assert not os.path.exists(D + "/no"), "made the mount point's parents"
p = subprocess.run([os.environ["BATCHFS"], "mount", D + "/good", D + "/no/such"],
                   capture_output=True, text=True)
assert p.returncode == 1 and want in p.stderr, (p.returncode, p.stderr)
assert not os.path.exists(D + "/no")
PY
t_end
