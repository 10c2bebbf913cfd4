#!/usr/bin/env bash
# tools/gpu/device_check.sh - the one run of the GPU companion on a GPU
# machine: build (or take the carried binaries), the GPU tests, the
# batchfs-gpu benchmark on folders of batch files and, when FUSE works
# there, on a real batchfs mount (pread vs mmap+cudaHostRegister), then the
# ResNet-50 demo.  Logs go to $OUT (default /tmp/bfs-gpu-out); a summary is
# printed last.
#
#   carry: .devcarry/ holding bin/{libbatchfs_gpu.so,batchfs-gpu,
#          test_gpu_device,batchfs,mkjpeg} built here, and the Debian debs
#          libfuse3-3 fuse3 libturbojpeg0 liblmdb0 (apt-get download)
#   run:   bash tools/gpu/device_check.sh [quick|bench]   (bench: no demo)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bfs-gpu-out}
mkdir -p "$OUT"
export BUILD=build PYTHONUNBUFFERED=1
S=$OUT/summary.txt
T0=$(date +%s)
D=$(mktemp -d /tmp/bfs-gpu-data.XXXXXX)
C=$PWD/.devcarry
MNT=$D/mnt
QUICK=${1:-}
stage() { echo "== $* ($(( $(date +%s) - T0 )) s)" | tee -a "$S"; }
cleanup() {
	if mountpoint -q "$MNT" 2>/dev/null; then
		fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"
	fi
	rm -rf "$D"
}
trap cleanup EXIT

stage env
{
	nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem --format=csv
	nvcc --version | tail -2; nproc; free -g; uname -r
	python3 -c 'import torch, torchvision, numpy; print("torch", torch.__version__, "torchvision", torchvision.__version__, "numpy", numpy.__version__)'
	ls -la /dev/fuse 2>&1
} >"$OUT/env.log" 2>&1
head -3 "$OUT/env.log" | tee -a "$S"

stage build
mkdir -p build/tests/gpu
if [ -d "$C/bin" ]; then
	cp "$C/bin/libbatchfs_gpu.so" "$C/bin/batchfs-gpu" "$C/bin/batchfs" build/
	cp "$C/bin/test_gpu_device" build/tests/gpu/
	cp "$C/bin/mkjpeg" build/tests/
fi
if ! build/batchfs-gpu --help >/dev/null 2>&1 ||
	! python3 -c 'import sys; sys.path.insert(0, "tools/python"); from batchfs import _lib; _lib.load()' 2>/dev/null; then
	echo "carried binaries do not run here: building" | tee -a "$S"
	make -j16 gpu build/tests/gpu/test_gpu_device 2>&1 | tail -5 | tee -a "$S"
fi

# FUSE: the carried debs unpacked under .devcarry/root, used only by the
# batchfs daemon and mkjpeg (wrappers), fusermount3 on the PATH.
R=$C/root
mkdir -p "$R"
for f in "$C"/*.deb; do [ -f "$f" ] && dpkg -x "$f" "$R"; done
export PATH=$PATH:$R/bin:$R/usr/bin
LIBS=$R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu
for t in batchfs mkjpeg; do
	src=$PWD/build/$t; [ $t = mkjpeg ] && src=$PWD/build/tests/mkjpeg
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LIBS" "$src" >"$C/$t"
	chmod +x "$C/$t"
done
export BATCHFS=$C/batchfs MKJPEG=$C/mkjpeg
[ -e /dev/fuse ] || mknod /dev/fuse c 10 229 2>/dev/null

stage "GPU tests"
timeout 200 bash tests/gpu/test_gpu_device.sh >"$OUT/tests.log" 2>&1
echo "device tests: $(tail -1 "$OUT/tests.log")" | tee -a "$S"
timeout 90 bash tests/gpu/test_gpu_cpu.sh >>"$OUT/tests.log" 2>&1
echo "cpu tests on the GPU machine: $(tail -1 "$OUT/tests.log")" | tee -a "$S"
timeout 120 bash tests/gpu/test_gpu_mount.sh >>"$OUT/tests.log" 2>&1
echo "mount tests: $(tail -1 "$OUT/tests.log")" | tee -a "$S"
grep -E '^(not ok|skip)' "$OUT/tests.log" | head -20 | tee -a "$S"
grep -E '^# ' "$OUT/tests.log" | tail -16 >>"$S"

stage "bench data"
python3 tests/gpu/_mkbatches.py "$D/u8" --batches 16 --batch 256 --size 224
python3 tests/gpu/_mkbatches.py "$D/f32" --batches 6 --batch 256 --size 224 --dtype float32
du -sh "$D/u8" "$D/f32" | tee -a "$S"

bench() {  # bench LABEL ARGS...
	local label=$1; shift
	echo "### $label: batchfs-gpu bench $*" >>"$OUT/bench.log"
	if timeout 90 build/batchfs-gpu bench "$@" >>"$OUT/bench.log" 2>&1; then
		echo "$label | $(grep RESULT "$OUT/bench.log" | tail -1 | cut -d' ' -f2-)" | tee -a "$S"
	else
		echo "$label | FAILED (see bench.log)" | tee -a "$S"
	fi
}
stage "bench: page-cache folders"
bench "u8 defaults (d3, auto readers, pread)" "$D/u8" --passes 4
for io in pread mmap; do
	for r in 1 2 4 8; do
		bench "u8 $io d$((r > 3 ? r : 3)) r$r" "$D/u8" --depth $((r > 3 ? r : 3)) \
			--readers $r --io $io --passes 4
	done
done
bench "u8 pread d4 r4 normalize" "$D/u8" --depth 4 --readers 4 --normalize --passes 4
for io in pread mmap; do
	for r in 1 4; do
		bench "f32 $io d$((r > 3 ? r : 3)) r$r" "$D/f32" --depth $((r > 3 ? r : 3)) \
			--readers $r --io $io --passes 3
	done
done

stage "demo data"
N=2560; [ "$QUICK" = quick ] && N=1024
timeout 120 python3 tools/train_demo.py --make-data "$D/demo" --images $N \
	--size 224 --batch 256 2>&1 | tail -2 | tee -a "$S"

stage "FUSE mount"
FEED=$D/demo/batches
mkdir -p "$MNT"
if timeout 60 "$BATCHFS" mount "$D/demo/jpeg" "$MNT" --batch 256 --size 224x224 \
	--dtype uint8 --log "$OUT/mount.log" >>"$OUT/mount.log" 2>&1 &&
	[ -e "$MNT/epoch-0000/batch-000000.npy" ]; then
	echo "mounted: $(ls "$MNT/epoch-0000" | wc -l) files" | tee -a "$S"
	bench "mount u8 defaults" "$MNT/epoch-0000" --passes 2
	for io in pread mmap; do
		for r in 1 2 4 8; do
			bench "mount u8 $io d$((r > 3 ? r : 3)) r$r" "$MNT/epoch-0000" \
				--depth $((r > 3 ? r : 3)) --readers $r --io $io --passes 2
		done
	done
	FEED="$MNT/epoch-0000 --batches $D/demo/batches"
else
	echo "FUSE mount failed here; the demo reads a folder of batch files" \
		"made with numpy from the same JPEGs (see mount.log)" | tee -a "$S"
	tail -5 "$OUT/mount.log" | tee -a "$S"
fi

if [ "$QUICK" = bench ]; then stage done; echo "-----"; cat "$S"; exit 0; fi
stage demo
STEPS=30; [ "$QUICK" = quick ] && STEPS=15
# shellcheck disable=SC2086
timeout 300 python3 tools/train_demo.py --batches $FEED \
	--imagefolder "$D/demo/jpeg" --steps $STEPS --warmup 8 \
	--readers 2 >"$OUT/demo.log" 2>&1
grep -vE '^RESULT' "$OUT/demo.log" | tail -8 | tee -a "$S"

stage done
echo "-----"
cat "$S"
