#!/usr/bin/env bash
# GPU companion on a real device: the C tests (device bytes == file bytes,
# normalization kernel == CPU reference, upload N+1 overlapping work on N)
# and the Python/torch tests.  Each skips, with the reason, when there is no
# CUDA device, no built binary or no torch.  Prints ok/not ok/skip lines and
# a final "N passed, N failed[, N skipped]".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
export BUILD
p=0 f=0 k=0
count() {  # add up one runner's ok/not ok/skip lines from $1
	p=$((p + $(grep -c '^ok ' "$1"))) f=$((f + $(grep -c '^not ok ' "$1")))
	k=$((k + $(grep -c '^skip ' "$1")))
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

bin=$BUILD/tests/gpu/test_gpu_device
if [ -x "$bin" ]; then
	timeout 600 "$bin" >"$log" 2>&1
	rc=$?
	grep -v '^[0-9]* passed' "$log"
	count "$log"
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok ' "$log"; then
		echo "not ok gpu_device: exited with status $rc"; f=$((f + 1))
	fi
else
	echo "skip gpu_device: $bin not built (no CUDA toolkit for make gpu-tests)"
	k=$((k + 1))
fi

if python3 -c 'import numpy' 2>/dev/null; then
	timeout 600 python3 tests/gpu/check_gpu.py >"$log" 2>&1
	rc=$?
	grep -v '^[0-9]* passed' "$log"
	count "$log"
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok ' "$log"; then
		echo "not ok gpu_python: exited with status $rc"; f=$((f + 1))
	fi
else
	echo "skip gpu_python: python3 with numpy is not installed"
	k=$((k + 1))
fi

echo "$p passed, $f failed, $k skipped"
[ "$f" -eq 0 ]
