#!/usr/bin/env bash
# JAX, for real (jax[cpu]): batchfs.jax.batches yields jax.Arrays equal to
# np.load of the files, for every dtype and layout, placed with the given
# sharding (two host devices), and on the default device without one.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
if ! $PY -c 'import jax' 2>/dev/null; then
	not_ok "jax: not installed (make python-deps, or pip install 'jax[cpu]')"
	t_end
fi
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS TMPDIR="$D/tmp"
export XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu
mkdir -p "$TMPDIR"
"$MKJPEG" "$D/jpegs" --classes 3 --per-class 12 --seed 41 --min-size 30 \
	--max-size 80 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 16 --quiet || { not_ok mkshards; t_end; }
check "batchfs.jax.batches: jax.Arrays equal np.load, every dtype and layout, with a sharding" \
	$PY - "$D/shards" <<'PY'
import sys
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import batchfs, batchfs.jax
assert len(jax.devices()) == 2, jax.devices()
mesh = Mesh(np.array(jax.devices()), ("data",))
sh = NamedSharding(mesh, P("data"))
for dtype in ("uint8", "float16", "float32"):
    for layout in ("nhwc", "nchw"):
        with batchfs.Mount(sys.argv[1], batch=6, size=(10, 14), dtype=dtype,
                           layout=layout, epochs=2, shuffle=5, cache="none",
                           threads=1) as m:
            n = 0
            for k, (x, y) in enumerate(batchfs.jax.batches(m, epoch=1, sharding=sh)):
                f = m.epoch_dir(1) + "/batch-%06d" % k
                want = np.load(f + ".npy")
                assert isinstance(x, jax.Array) and x.dtype == want.dtype, (x.dtype, want.dtype)
                assert x.sharding == sh and y.sharding == sh, (x.sharding, y.sharding)
                assert len(x.addressable_shards) == 2
                assert x.addressable_shards[0].data.shape[0] == 3
                assert np.array_equal(np.asarray(x), want), (dtype, layout, k)
                assert np.array_equal(np.asarray(y), np.load(f + ".labels.npy"))
                n += 1
            assert n == len(m) == 6, n
            # without a sharding: the default device, the same arrays
            for k, (x, y) in enumerate(batchfs.jax.batches(m.rank_dir, epoch=0)):
                assert x.devices() == {jax.devices()[0]}
                assert np.array_equal(np.asarray(x), np.load(m.epoch_dir(0) + "/batch-%06d.npy" % k))
PY
t_end
