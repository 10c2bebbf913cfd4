#!/usr/bin/env bash
# GPU companion end to end on a real batchfs mount: GpuLoader(device="cpu")
# equals np.load for every batch of uint8 and float32 mounts (partial last
# batch included); with a CUDA device and torch, GPU mode too, and
# batchfs-gpu bench runs on the mount.  Skips without /dev/fuse, the mount
# binary or mkjpeg.  Uses tests/integration/lib.sh for mounts and cleanup.
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
finish
