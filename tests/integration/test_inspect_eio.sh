#!/usr/bin/env bash
# Reading a batch that holds a corrupt JPEG fails with EIO, and our own
# tools say so instead of dying: before, `batchfs inspect` mapped the file
# and the page fault's EIO became SIGBUS (rc 135).  Now inspect reads it,
# exits 1 and prints the EIO with what the mount says of the batch (its
# index.json "error": the bad file and the decoder's reason), and the
# Python package's reader raises OSError(EIO) naming the same.  With
# passthrough (the kernel reads slot files) and without.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

"$MKJPEG" "$D/src" --classes 1 --per-class 4 --seed 2 >/dev/null || { not_ok "mkjpeg"; t_end; }
bad=$D/src/class_000/img_00002.jpg
size=$(stat -c %s "$bad")
truncate -s $((size / 3)) "$bad" # a JPEG cut short: sample 2, batch 1

for how in passthrough no-passthrough; do
	extra=()
	[ "$how" = no-passthrough ] && extra=(--no-passthrough)
	mnt=$D/m-$how
	mount_fg "$D/src" "$mnt" --batch 2 --size 32x32 --cache none --threads 1 "${extra[@]}" ||
		{ not_ok "mount ($how)"; continue; }
	f=$mnt/epoch-0000/batch-000001.npy
	out=$("$BATCHFS" inspect "$f" 2>&1)
	rc=$?
	check "$how: inspect of the batch with the corrupt JPEG exits 1, not a signal (rc $rc)" test "$rc" = 1
	check "$how:   and prints the EIO and the mount's error naming the file" \
		bash -c 'printf "%s" "$1" | grep -q "read at byte 0: Input/output error" &&
			 printf "%s" "$1" | grep -q "the mount failed this batch: .*img_00002.jpg"' _ "$out"
	out=$("$BATCHFS" inspect "$mnt/epoch-0000/batch-000001.labels.npy" 2>&1)
	check "$how:   its labels file too (rc $?)" \
		bash -c 'printf "%s" "$1" | grep -q "the mount failed this batch: .*img_00002.jpg"' _ "$out"
	check "$how: the batches beside it inspect as ever" \
		"$BATCHFS" inspect "$mnt/epoch-0000/batch-000000.npy" "$mnt/epoch-0000/batch-000000.labels.npy"
	if $PY -c 'import numpy' 2>/dev/null; then
		check "$how: the Python package's reader raises OSError(EIO) naming the file" \
			env PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" $PY - "$f" <<'PY'
import errno, sys
from batchfs import _npy
try:
    _npy.read_npy(sys.argv[1])
except OSError as e:
    assert e.errno == errno.EIO, e
    assert "img_00002.jpg" in str(e), str(e)
else:
    raise AssertionError("read a failed batch")
PY
	fi
	unmount_wait "$mnt"
done
t_end
