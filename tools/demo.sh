#!/usr/bin/env bash
# make demo: generate sample JPEGs, pack them into TFRecord shards, mount
# them, look at a batch with file, head and np.load, read one epoch with
# its throughput, unmount, and say where the `batchfs` command is (or how
# to get it).  Everything else lives in a temp dir.
#   DEMO_INSTALLED  the batchfs that `make demo` just installed (make install),
#                   run instead of build/batchfs; unset: it was not installed
#   DEMO_PREFIX     the PREFIX make used (for the hint when nothing was installed)
#   DEMO_JPEGS      a folder of class folders of images to use instead of
#                   ../shared/data/imagenet-sample or generated JPEGs
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BATCHFS=${DEMO_INSTALLED:-$PWD/$BUILD/batchfs}
DIR=$(mktemp -d /tmp/batchfs-demo.XXXXXX)
MNT=$DIR/mnt
cleanup() {
	mountpoint -q "$MNT" 2>/dev/null && "$BATCHFS" unmount "$MNT" || true
	rm -rf "$DIR"
}
trap cleanup EXIT
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

python3 -c 'import numpy' 2>/dev/null ||
	python3 -m pip install --quiet --disable-pip-version-check numpy

SRC=${DEMO_JPEGS:-../shared/data/imagenet-sample}
if [ -n "${DEMO_JPEGS:-}" ]; then
	echo "Using the images in $SRC"
elif [ -d "$SRC" ]; then
	echo "Using the real ImageNet sample in $SRC"
else
	echo "Generating 320 synthetic JPEGs (no ../shared/data/imagenet-sample here)"
	SRC=$DIR/jpegs
	"$BUILD/tests/mkjpeg" "$SRC" --classes 10 --per-class 32 --seed 1 \
		--min-size 160 --max-size 500 >/dev/null
fi

say batchfs mkshards "$SRC" "$DIR/shards" --per-shard 128
"$BATCHFS" mkshards "$SRC" "$DIR/shards" --per-shard 128
mkdir -p "$MNT"
say batchfs mount "$DIR/shards" "$MNT" --batch 32 --size 224x224 --cache "$DIR/cache"
"$BATCHFS" mount "$DIR/shards" "$MNT" --batch 32 --size 224x224 --cache "$DIR/cache" \
	--log "$DIR/batchfs.log"
say ls "$MNT" "$MNT/epoch-0000 | head -4"
ls "$MNT"
ls "$MNT/epoch-0000" | head -4
say file "$MNT/epoch-0000/batch-000000.npy"
file "$MNT/epoch-0000/batch-000000.npy"
say head -c 128 "$MNT/epoch-0000/batch-000000.npy"
head -c 128 "$MNT/epoch-0000/batch-000000.npy" | tr -c '[:print:]\n' '.'
echo
say "python3 -c \"import numpy as np; x = np.load('.../batch-000000.npy'); print(x.shape, x.dtype)\""
python3 -c "import numpy as np; x = np.load('$MNT/epoch-0000/batch-000000.npy'); print(x.shape, x.dtype, 'min %.3f max %.3f' % (x.min(), x.max()))"
say batchfs inspect "$MNT/epoch-0000/batch-000000.labels.npy"
"$BATCHFS" inspect "$MNT/epoch-0000/batch-000000.labels.npy"
read_epoch() {
	python3 - "$MNT" "$1" <<'PY'
import json, os, sys, time
mnt, what = sys.argv[1], sys.argv[2]
ds = json.load(open(f"{mnt}/dataset.json"))
t0 = time.perf_counter()
nbytes = 0
for k in range(ds["batches_per_epoch"]):
    with open(f"{mnt}/epoch-0000/batch-{k:06d}.npy", "rb") as f:
        nbytes += len(f.read())
dt = time.perf_counter() - t0
print(f"{ds['samples']} images in {ds['batches_per_epoch']} batches: "
      f"{dt:.2f} s, {ds['samples'] / dt:.0f} images/s, {nbytes / dt / 1e6:.0f} MB/s "
      f"on {os.cpu_count()} cores ({what})")
PY
}
say "read one epoch"
read_epoch "cold: every image decoded and resized"
say batchfs unmount "$MNT" "&&" batchfs mount ... "(same cache)"
"$BATCHFS" unmount "$MNT"
sleep 0.2
"$BATCHFS" mount "$DIR/shards" "$MNT" --batch 32 --size 224x224 --cache "$DIR/cache" \
	--log "$DIR/batchfs.log" >/dev/null
say "read the epoch again"
read_epoch "warm: every sample from the LMDB cache"
python3 -c "import json; c = json.load(open('$MNT/stats.json'))['cache']; print('cache: %d hits, %d misses, %d entries' % (c['hits'], c['misses'], c['entries']))"
say batchfs unmount "$MNT"
"$BATCHFS" unmount "$MNT"

# Where the command is now: a new user's next step is `batchfs ...`.
on_path=$(command -v batchfs || true)
if [ -n "${DEMO_INSTALLED:-}" ]; then
	if [ -n "$on_path" ] && [ "$on_path" -ef "$DEMO_INSTALLED" ]; then
		echo "batchfs is installed and on your PATH: $on_path (make uninstall removes it)"
	else
		echo "batchfs is installed as $DEMO_INSTALLED, but $(dirname "$DEMO_INSTALLED") is" \
			"not on your PATH${on_path:+ (there, batchfs is $on_path)}:"
		echo "  export PATH=$(dirname "$DEMO_INSTALLED"):\$PATH"
	fi
else
	echo "batchfs was not installed (make install into ${DEMO_PREFIX:-/usr/local} needs root)${on_path:+; the batchfs on your PATH now is $on_path}:"
	echo "  sudo make install      # batchfs in ${DEMO_PREFIX:-/usr/local}/bin, on the PATH"
	echo "or run it from the build: $PWD/$BUILD/batchfs" \
		"(or: make demo PREFIX=\$HOME/.local, with ~/.local/bin on your PATH)"
fi
echo "done."
