#!/usr/bin/env bash
# GPU companion end to end on a real batchfs mount: GpuLoader(device="cpu")
# equals np.load for every batch of uint8 and float32 mounts (partial last
# batch included); with a CUDA device and torch, GPU mode too, and
# batchfs-gpu bench runs on the mount.  Then small mounts (2 batches of 4
# at 32x32) of every --dtype x --layout, and float16 NCHW with --mean/--std:
# CPU mode and the library's CPU code (build/tests/gpu/hostref) equal
# np.load as stored, and agree bit for bit for every normalize output; with
# a device, GPU mode and batchfs-gpu bench too.  Skips without /dev/fuse,
# the mount binary or mkjpeg.  Uses tests/integration/lib.sh for mounts and
# cleanup.
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
export BATCHFS=${BATCHFS:-$PWD/$BUILD/batchfs} MKJPEG=${MKJPEG:-$PWD/$BUILD/tests/mkjpeg}
if [ ! -f tests/integration/lib.sh ] || [ ! -x "$BATCHFS" ] || [ ! -x "$MKJPEG" ]; then
	echo "skip gpu_mount: needs $BATCHFS, $MKJPEG and tests/integration/lib.sh"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
if ! python3 -c 'import numpy' 2>/dev/null; then
	echo "skip gpu_mount: python3 with numpy is not installed"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
. tests/integration/lib.sh
t_begin
NP=0 NF=0 NS=0
ok() { echo "ok $*"; NP=$((NP + 1)); }
not_ok() { echo "not ok $*"; T_FAILED=1; NF=$((NF + 1)); }
skip() { echo "skip $*"; NS=$((NS + 1)); }
finish() { echo "$NP passed, $NF failed, $NS skipped"; t_end; }
export PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}"

"$MKJPEG" "$T_DIR/jpeg" --classes 3 --per-class 40 --min-size 40 \
	--max-size 160 --seed 5 >/dev/null 2>&1 || { not_ok "gpu_mount_mkjpeg"; finish; }

compare() {  # compare NAME MNT: every batch, cpu (and gpu) vs np.load
	python3 - "$2" <<'PY'
import os, sys
import numpy as np
import batchfs
d = os.path.join(sys.argv[1], "epoch-0000")
files = batchfs.list_batches(d)
modes = ["cpu"]
try:
    import torch
    if torch.cuda.is_available() and batchfs.device_count()[0] > 0:
        modes.append(0)
except Exception:
    pass
for mode in modes:
    n = 0
    for (x, y), (img, lbl) in zip(batchfs.GpuLoader(d, device=mode), files):
        if mode != "cpu":
            x, y = x.cpu().numpy(), y.cpu().numpy()
        assert np.array_equal(x, np.load(img)), (mode, img)
        assert np.array_equal(y, np.load(lbl)), (mode, lbl)
        n += 1
    assert n == len(files) == 8, (mode, n)
    assert x.shape[0] == 120 - 7 * 16, x.shape  # the partial last batch
print("modes", modes)
PY
}

for dt in uint8 float32; do
	mnt=$T_DIR/mnt-$dt
	if ! mount_fg "$T_DIR/jpeg" "$mnt" --batch 16 --size 48x40 --dtype $dt \
		--threads 2; then
		skip "gpu_mount_$dt: the mount did not come up"
		continue
	fi
	check "gpu_mount_${dt}_loader_equals_np_load" compare $dt "$mnt"
	if python3 -c 'import batchfs,sys; sys.exit(batchfs.device_count()[0] == 0)' 2>/dev/null \
		&& [ -x "$BUILD/batchfs-gpu" ]; then
		check "gpu_mount_${dt}_bench" "$BUILD/batchfs-gpu" bench "$mnt/epoch-0000"
	else
		skip "gpu_mount_${dt}_bench: no CUDA device"
	fi
	unmount_wait "$mnt"
done

"$MKJPEG" "$T_DIR/small" --classes 2 --per-class 4 --min-size 40 \
	--max-size 90 --seed 7 >/dev/null 2>&1 || { not_ok "gpu_mount_small_mkjpeg"; finish; }
HOSTREF=$PWD/$BUILD/tests/gpu/hostref

compare_small() {  # compare_small MNT DTYPE LAYOUT: 2 batches of 4, 32x32
	python3 - "$@" "$HOSTREF" "$T_DIR" <<'PY'
import itertools, json, os, subprocess, sys, tempfile
import numpy as np
import batchfs
mnt, dtype, layout, hostref = sys.argv[1:5]
layout = layout.upper()
meta = json.load(open(os.path.join(mnt, "dataset.json")))
assert (meta["dtype"], meta["layout"]) == (dtype, layout), meta
d = os.path.join(mnt, "epoch-0000")
files = batchfs.list_batches(d)
ref = [(np.load(i), np.load(l)) for i, l in files]
shape = (4, 32, 32, 3) if layout == "NHWC" else (4, 3, 32, 32)
assert len(ref) == 2 and all(x.shape == shape and x.dtype == dtype
                             for x, _ in ref), [x.shape for x, _ in ref]
mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
runs = [{}] + [dict(normalize=True, layout=o, **m)
               for o, m in itertools.product(
                   (None, "NHWC", "NCHW"), ({}, dict(mean=mean, std=std)))]
modes = ["cpu"]
try:
    import torch
    if torch.cuda.is_available() and batchfs.device_count()[0] > 0:
        modes.append(0)
except Exception:
    pass

def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        a.tobytes() == b.tobytes()

tmp = tempfile.mkdtemp(prefix="hostref-", dir=sys.argv[5])
for k, kw in enumerate(runs):
    cpu = list(batchfs.GpuLoader(d, device="cpu", **kw))
    assert len(cpu) == 2, kw
    if not kw:  # as stored: exactly what np.load gives
        for (x, y), (g, gy) in zip(ref, cpu):
            assert same_bits(g, x) and np.array_equal(gy, y), kw
    else:
        for g, _ in cpu:
            assert g.dtype == np.float32 and g.shape[0] == 4
            assert g.shape[1 if (kw["layout"] or layout) == "NCHW"
                           else 3] == 3, (kw, g.shape)
    for mode in modes[1:]:
        gpu = [(x.cpu().numpy(), y.cpu().numpy())
               for x, y in batchfs.GpuLoader(d, device=mode, **kw)]
        for (c, cy), (g, gy) in zip(cpu, gpu):
            assert same_bits(g, c) and np.array_equal(gy, cy), (mode, kw)
    if os.path.exists(hostref):
        out = os.path.join(tmp, str(k))
        os.mkdir(out)
        args = [hostref]
        if kw:
            args.append("--normalize")
        if kw.get("layout"):
            args.append("--" + kw["layout"].lower())
        if "mean" in kw:
            args += ["--mean", ",".join(map(str, mean)),
                     "--std", ",".join(map(str, std))]
        r = subprocess.run(args + [d, out], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        for i, (g, gy) in enumerate(cpu):
            h = np.load(os.path.join(out, "batch-%06d.npy" % i))
            assert same_bits(h, g), ("hostref", kw, i, h.shape, g.shape)
print("modes", modes, "hostref", os.path.exists(hostref))
PY
}

for combo in uint8:nhwc uint8:nchw float16:nhwc float16:nchw float32:nhwc \
	float32:nchw float16:nchw:ms; do
	IFS=: read -r dt lay ms <<<"$combo"
	name=gpu_mount_small_${dt}_${lay}${ms:+_mean_std}
	extra=()
	[ -n "$ms" ] && extra=(--mean 0.485,0.456,0.406 --std 0.229,0.224,0.225)
	mnt=$T_DIR/mnt-$dt-$lay$ms
	if ! mount_fg "$T_DIR/small" "$mnt" --batch 4 --size 32x32 --dtype "$dt" \
		--layout "$lay" --threads 2 --cache none "${extra[@]}"; then
		not_ok "$name: the mount did not come up"
		continue
	fi
	check "${name}_loaders_equal_np_load" compare_small "$mnt" "$dt" "$lay"
	if python3 -c 'import batchfs,sys; sys.exit(batchfs.device_count()[0] == 0)' 2>/dev/null \
		&& [ -x "$BUILD/batchfs-gpu" ]; then
		check "${name}_bench" "$BUILD/batchfs-gpu" bench "$mnt/epoch-0000"
		check "${name}_bench_normalize" "$BUILD/batchfs-gpu" bench \
			"$mnt/epoch-0000" --normalize
	else
		skip "${name}_bench: no CUDA device"
	fi
	unmount_wait "$mnt"
done
finish
