#!/usr/bin/env bash
# GPU companion, CPU side (runs in CI): GpuLoader(device="cpu") vs np.load,
# bad folders, the ctypes binding and batchfs-gpu without a device.
# Prints ok/not ok/skip lines and "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
if ! python3 -c 'import numpy' 2>/dev/null; then
	echo "skip gpu_cpu: python3 with numpy is not installed"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
BUILD=${BUILD:-build} exec python3 tests/gpu/check_cpu.py "$@"
