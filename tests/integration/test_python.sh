#!/usr/bin/env bash
# The Python package without the frameworks: batchfs.Mount (options by
# their Python names, errors, unmount on exceptions, no daemon left by a
# process killed with SIGKILL, rank="auto" from torchrun's and Slurm's
# variables, one mount per node for two processes), GpuLoader on a mount
# root, `import batchfs` needing NumPy alone, and `pip install
# ./tools/python` finding this checkout's program and GPU library.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS TMPDIR="$D/tmp"
mkdir -p "$TMPDIR"
"$MKJPEG" "$D/jpegs" --classes 2 --per-class 15 --seed 51 --min-size 30 \
	--max-size 70 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 16 --quiet || { not_ok mkshards; t_end; }

check "import batchfs imports no framework" $PY -c "
import sys, batchfs
bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'tensorflow', 'jax')]
assert not bad, bad"
check "Mount options are batchfs mount's flags by their Python names" $PY -c "
from batchfs.mount import _cli_args
got = _cli_args(dict(batch=32, size=(224, 192), dtype='uint8', shuffle=1, epochs=90,
                     cache='none', mean=(0.5, 0.4, 0.3), drop_remainder=True,
                     passthrough=False, label_key=None, augment=['flip', 'crop'],
                     fuse_options='x'))
want = ['--batch', '32', '--size', '224x192', '--dtype', 'uint8', '--shuffle', '1',
        '--epochs', '90', '--cache', 'none', '--mean', '0.5,0.4,0.3', '--drop-remainder',
        '--no-passthrough', '--augment', 'flip,crop', '-o', 'x']
assert got == want, got
for bad in (dict(rank=1), dict(hold=3), dict(shuffle=True)):
    try:
        _cli_args(bad)
        raise SystemExit('accepted %r' % bad)
    except (TypeError, ValueError):
        pass"
check "a bad option fails with batchfs's own message and leaves no mount point" $PY - "$D/shards" <<'PY'
import os, sys, tempfile
import batchfs
before = set(os.listdir(tempfile.gettempdir()))
for kw, want in ((dict(batch=0), "bad value '0' for --batch"),
                 (dict(resize="squash"), "--resize")):
    try:
        batchfs.Mount(sys.argv[1], **kw)
        raise SystemExit("mounted with %r" % kw)
    except batchfs.BatchfsError as e:
        assert want in str(e), e
try:
    batchfs.Mount(sys.argv[1] + "/nope")
    raise SystemExit("mounted a missing folder")
except batchfs.BatchfsError as e:
    assert "nope" in str(e), e
assert set(os.listdir(tempfile.gettempdir())) == before
PY
check "a Mount serves .path, .info and .epoch_dir, and an exception unmounts it" $PY - "$D/shards" <<'PY'
import os, sys, time
import numpy as np
import batchfs
try:
    with batchfs.Mount(sys.argv[1], batch=4, size=(8, 8), epochs=3, cache="none") as m:
        path, pid = m.path, m.pid
        assert os.path.ismount(path) and m.info["epochs"] == 3 and len(m) == 8
        assert m.epoch_dir(2) == path + "/epoch-0002"
        assert np.load(m.epoch_dir(2) + "/batch-000007.npy").shape == (2, 8, 8, 3)
        try:
            m.epoch_dir(3)
            raise SystemExit("epoch 3 of 3")
        except IndexError:
            pass
        raise KeyError("boom")
except KeyError:
    pass
from bfstest import alive
assert not alive(pid), "daemon still running"
assert not os.path.exists(path), "mount point left"
PY
check "a process holding a Mount killed with SIGKILL leaves no daemon and no mount" $PY - "$D/shards" <<'PY'
import json, os, subprocess, sys, time
code = ("import batchfs, json, os, signal, sys\n"
        "m = batchfs.Mount(sys.argv[1], batch=4, size=(8, 8), cache='none')\n"
        "print(json.dumps([m.path, m.pid]), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
p = subprocess.run([sys.executable, "-c", code, sys.argv[1]], capture_output=True, text=True)
assert p.returncode == -9, (p.returncode, p.stderr)
path, pid = json.loads(p.stdout)
from bfstest import wait_gone
assert wait_gone(pid, path), "daemon still running, or still mounted"
PY
check "rank=\"auto\" reads RANK/WORLD_SIZE, else SLURM_PROCID/SLURM_NTASKS" $PY - "$D/shards" <<'PY'
import json, os, subprocess, sys
code = ("import batchfs, json, sys\n"
        "with batchfs.Mount(sys.argv[1], batch=4, size=(8, 8), cache='none', rank='auto', world='auto') as m:\n"
        "    print(json.dumps([m.rank, m.world, m.info['rank'], m.info['world'], m.info['samples_per_epoch']]))\n")
base = {k: v for k, v in os.environ.items() if k not in
        ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")}
for extra, want in (({"RANK": "1", "WORLD_SIZE": "3"}, [1, 3, 1, 3, 10]),
                    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "4"}, [2, 4, 2, 4, 7]),
                    ({}, [0, 1, 0, 1, 30])):
    p = subprocess.run([sys.executable, "-c", code, sys.argv[1]], capture_output=True,
                       text=True, env=dict(base, **extra))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == want, (extra, p.stdout)
PY
check "per_node under srun: one daemon, rank-R for each process, the bytes of a mount of its own" \
	$PY - "$D/shards" <<'PY'
import json, os, subprocess, sys
code = r'''
import batchfs, json, os, sys, hashlib, glob
opts = dict(batch=4, size=(8, 8), epochs=2, shuffle=7, cache="none")
with batchfs.Mount(sys.argv[1], per_node=True, **opts) as node, \
        batchfs.Mount(sys.argv[1], rank=node.rank, world=node.world, **opts) as own:
    same = 0
    for e in range(2):
        for f in sorted(os.listdir(own.epoch_dir(e))):
            a = open(os.path.join(node.epoch_dir(e), f), "rb").read()
            assert a == open(os.path.join(own.epoch_dir(e), f), "rb").read(), f
            same += 1
    print(json.dumps([node.pid, node.path, node.rank_dir, same]), flush=True)
'''
env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "LOCAL_", "WORLD"))}
env.update(SLURM_NTASKS="2", SLURM_TASKS_PER_NODE="2", SLURM_NODEID="0",
           SLURM_JOB_ID="4242", SLURM_STEP_ID="0")
ps = [subprocess.Popen([sys.executable, "-c", code, sys.argv[1]], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True,
                       env=dict(env, SLURM_PROCID=str(r), SLURM_LOCALID=str(r)))
      for r in (1, 0)]  # rank 1 first: it waits for rank 0's mount
outs = [p.communicate(timeout=300) for p in ps]
for p, (o, e) in zip(ps, outs):
    assert p.returncode == 0, e
(p1, path1, dir1, n1), (p0, path0, dir0, n0) = (json.loads(o) for o, _ in outs)
assert p0 == p1 and path0 == path1, (p0, p1)
assert dir0.endswith("/rank-0") and dir1.endswith("/rank-1")
assert n0 == n1 == 2 * 2 * 4, (n0, n1)
from bfstest import wait_gone
assert wait_gone(p0, path0), "the node's daemon outlived its ranks"
assert not os.path.exists(path0), "the node's mount point is left"
PY
check "per_node in a single process without torchrun or srun: ranks 0-0, then gone" $PY - "$D/shards" <<'PY'
import os, sys
import batchfs
from bfstest import wait_gone
env = [k for k in os.environ if k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "SLURM_"))]
assert not env, env
with batchfs.Mount(sys.argv[1], per_node=True, batch=4, size=(8, 8), cache="none") as m:
    assert m.info["ranks"] == [0] and m.rank_dir == m.path + "/rank-0", (m.info["ranks"], m.rank_dir)
    assert os.path.exists(m.epoch_dir(0) + "/batch-000007.npy")
    pid, path = m.pid, m.path
assert wait_gone(pid, path) and not os.path.exists(path)
PY
# issue 23, 7: a daemon killed under a Mount leaves no dead mount behind
for mode in per_node own; do
	check "a Mount ($mode) whose daemon is killed -9 detaches the dead mount, and a rerun mounts" \
		env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 $PY - "$D/shards" "$mode" <<'PY'
import errno, os, signal, sys, time
import batchfs
from bfstest import alive

def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(l.split()[4] == path for l in f)

kw = dict(batch=4, size=(8, 8), cache="none")
if sys.argv[2] == "per_node":
    kw["per_node"] = True
for run in range(2):
    try:
        with batchfs.Mount(sys.argv[1], **kw) as m:
            path, pid = m.path, m.pid
            open(m.epoch_dir(0) + "/batch-000000.npy", "rb").read(6)
            os.kill(pid, signal.SIGKILL)
            end = time.monotonic() + 30
            while alive(pid) and time.monotonic() < end:
                time.sleep(0.05)
            open(m.epoch_dir(0) + "/batch-000001.npy", "rb").read(6)
        raise SystemExit("read through a dead mount")
    except OSError as e:
        # ECONNABORTED when the read raced the end of the connection
        assert e.errno in (errno.ENOTCONN, errno.ECONNABORTED), e
    assert not mounted(path), "%s is left mounted (run %d)" % (path, run)
    assert not os.path.exists(path), "the mount point %s is left" % path
PY
done
check "GpuLoader on a mount root says to give an epoch folder" $PY - "$D/shards" <<'PY'
import sys
import batchfs
with batchfs.Mount(sys.argv[1], batch=4, size=(8, 8), cache="none") as m:
    try:
        batchfs.GpuLoader(m.path, device="cpu")
        raise SystemExit("accepted a mount root")
    except batchfs.BatchfsError as e:
        assert "root of a batchfs mount" in str(e) and "epoch-0000" in str(e), e
    assert len(batchfs.GpuLoader(m.path + "/epoch-0000", device="cpu")) == 8
PY

# pip install ./tools/python into a fresh environment, used from elsewhere
if $PY -m venv --system-site-packages "$D/venv" >/dev/null 2>&1 &&
	"$D/venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps \
		"$PWD/tools/python" >"$D/pip.log" 2>&1; then
	ok "pip install ./tools/python"
else
	not_ok "pip install ./tools/python: $(tail -3 "$D/pip.log" | tr '\n' ' ')"
fi
check "the installed package finds this checkout's program and GPU library, copying neither" \
	env -u PYTHONPATH -u BATCHFS -u BATCHFS_GPU_LIB -u BUILD bash -c "cd / && '$D/venv/bin/python' - '$PWD' <<'PY'
import os, sys
from importlib import metadata
import batchfs
from batchfs import _where, _lib
root = sys.argv[1]
from batchfs import _install
assert not batchfs.__file__.startswith(root), batchfs.__file__
assert _install.CHECKOUT_BUILD == root + '/build', _install.CHECKOUT_BUILD
if os.path.exists(root + '/build/batchfs'):
    assert _where.program() == root + '/build/batchfs', _where.program()
if os.path.exists(root + '/build/libbatchfs_gpu.so'):
    assert _lib.find_library() == root + '/build/libbatchfs_gpu.so', _lib.find_library()
assert not os.path.exists(root + '/tools/python/batchfs/_install.py')
assert not os.path.exists(root + '/tools/python/batchfs/libbatchfs_gpu.so')
extras = set(metadata.metadata('batchfs').get_all('Provides-Extra'))
assert {'torch', 'tf', 'jax'} <= extras, extras
assert batchfs.__version__ == metadata.version('batchfs')
PY"
t_end
