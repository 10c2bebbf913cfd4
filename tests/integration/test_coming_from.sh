#!/usr/bin/env bash
# The "Coming from torchvision" and "Coming from tf.data" pages
# (docs/COMING_FROM_*.md) run as written: every code block marked
# `<!-- ci: NAME -->` is taken from the page and run on generated images,
# so the pages cannot drift from the code.
#   torchvision: the before (ImageFolder + transforms + DataLoader) and after
#     (batchfs) scripts train 2 epochs under python and under torchrun with
#     gloo and 2 processes; the after script reads epoch 0's batches, then
#     epoch 1's (each rank its own); --evaluate gives the same loss to the
#     last digit before and after; the page's check script finds every
#     batch equal to torchvision's.
#   tf.data: the before (TFRecordDataset pipeline) and after
#     (batchfs.tf.epochs) scripts train 2 epochs with Keras, the after one
#     on epoch 0's batches, then epoch 1's; --evaluate gives the same loss
#     within float rounding; the page's check script passes.
# Which batch files a script read is seen with a Python audit hook (every
# open()), around the page's script run unchanged.  A framework that is
# not importable skips its half, saying so.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS TMPDIR="$D/tmp" \
	TF_CPP_MIN_LOG_LEVEL=2 OMP_NUM_THREADS=1
mkdir -p "$TMPDIR" "$D/cf"

# ---- the pages' marked blocks, as files
$PY - "$D/cf" docs/COMING_FROM_TORCHVISION.md docs/COMING_FROM_TF_DATA.md \
	>"$D/extract.out" 2>&1 <<'PY'
import re, sys
out = sys.argv[1]
for page in sys.argv[2:]:
    text = open(page, encoding="utf-8").read()
    for name, code in re.findall(r"<!-- ci: ([\w.]+) -->\n```python\n(.*?)\n```\n", text, re.S):
        with open(f"{out}/{name}", "w") as f:
            f.write(code + "\n")
        print(page, name)
PY
for f in train_torchvision.py train_batchfs.py check_torchvision.py \
	train_tfdata.py train_tf_batchfs.py check_tfdata.py; do
	check "the pages hold a marked block $f" test -s "$D/cf/$f"
done

# run a page's script with every open() of a batch file written to
# $D/reads.RANK (RANK of torchrun, else 0)
cat >"$D/record.py" <<'PY'
import os, re, runpy, sys
log = open("%s.%s" % (os.environ["BFS_READS"], os.environ.get("RANK", "0")), "a")
batch = re.compile(r"/epoch-\d+/batch-\d+\.npy$")
def hook(event, args):
    if event == "open" and args and isinstance(args[0], str) and batch.search(args[0]):
        log.write(args[0] + "\n")
        log.flush()
sys.addaudithook(hook)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
PY

# reads_ok LOG EPOCHS BATCHES: the mount that read epoch-0001 (the training
# one) read batches 0..BATCHES-1 of epoch 0, then of epoch 1, ... in order
reads_ok() {
	$PY - "$@" <<'PY'
import re, sys
log, epochs, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
reads = [re.match(r"(.*)/epoch-(\d+)/batch-(\d+)\.npy$", l.strip()).groups()
         for l in open(log)]
train = {root for root, e, _ in reads if int(e) == 1}
assert len(train) == 1, f"not one mount read epoch 1: {train}"
seq = [(int(e), int(k)) for root, e, k in reads if root in train]
firsts = sorted(set(seq), key=seq.index)     # each batch, when first read
want = [(e, k) for e in range(epochs) for k in range(batches)]
assert firsts == want, f"read {firsts}, not {want}"
print(f"{train.pop()}: epochs 0..{epochs - 1}, {batches} batches each, in order")
PY
}

# finite NAME OUT PATTERN COUNT: COUNT lines match PATTERN (its group 1 a
# number) and each number is finite
finite() {
	$PY - "$@" <<'PY'
import math, re, sys
name, out, pat, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
vals = [float(m.group(1)) for m in re.finditer(pat, open(out).read())]
assert len(vals) == n and all(math.isfinite(v) for v in vals), (name, vals)
print(vals)
PY
}

"$MKJPEG" "$D/train" --classes 4 --per-class 12 --seed 5 --min-size 40 --max-size 120 >/dev/null &&
	"$MKJPEG" "$D/val" --classes 4 --per-class 5 --seed 6 --min-size 40 --max-size 120 >/dev/null ||
	{ not_ok "mkjpeg"; t_end; }
SMALL=(--arch resnet18 --size 32 --batch-size 8 --lr 0.01)

# ---- torchvision
if ! $PY -c "import torch, torchvision" 2>/dev/null; then
	echo "skip coming_from_torchvision: torch or torchvision is not importable (make python-deps)"
else
	cd "$D/cf"
	$PY train_torchvision.py "$D/train" --val "$D/val" --evaluate "${SMALL[@]}" --workers 0 \
		>"$D/tv-eval.out" 2>&1
	$PY train_batchfs.py "$D/train" --val "$D/val" --evaluate "${SMALL[@]}" >"$D/bfs-eval.out" 2>&1
	check "--evaluate: the same val loss and accuracy to the last digit ($(grep '^val' "$D/bfs-eval.out"))" \
		bash -c "grep -q '^val: 20 images' '$D/tv-eval.out' && diff <(grep '^val' '$D/tv-eval.out') <(grep '^val' '$D/bfs-eval.out')"

	$PY train_torchvision.py "$D/train" --val "$D/val" --epochs 2 "${SMALL[@]}" --workers 1 \
		>"$D/tv.out" 2>&1 || not_ok "train_torchvision.py: $(tail -3 "$D/tv.out")"
	check "train_torchvision.py trains 2 epochs, finite losses" \
		finite tv "$D/tv.out" '(?m)^epoch \d: loss (\S+)$' 2
	BFS_READS="$D/reads-py" $PY "$D/record.py" train_batchfs.py "$D/train" --val "$D/val" \
		--epochs 2 "${SMALL[@]}" >"$D/bfs.out" 2>&1 || not_ok "train_batchfs.py: $(tail -3 "$D/bfs.out")"
	check "train_batchfs.py trains 2 epochs, finite losses" \
		finite bfs "$D/bfs.out" '(?m)^epoch \d: loss (\S+)$' 2
	check "... on epoch 0's 6 batches, then epoch 1's: $(reads_ok "$D/reads-py.0" 2 6 2>&1 | tail -1)" \
		reads_ok "$D/reads-py.0" 2 6
	check "... and its validation (val) lines" finite bfs "$D/bfs.out" '(?m)^val: 20 images, loss (\S+),' 2

	TR=(torchrun --standalone --nproc-per-node 2)
	BFS_READS="$D/reads-tr" "${TR[@]}" "$D/record.py" train_batchfs.py "$D/train" --epochs 2 \
		"${SMALL[@]}" >"$D/bfs-tr.out" 2>&1 || not_ok "torchrun train_batchfs.py: $(tail -3 "$D/bfs-tr.out")"
	check "torchrun, gloo, 2 processes: train_batchfs.py trains 2 epochs (rank 0 prints)" \
		finite bfs-tr "$D/bfs-tr.out" '(?m)^epoch \d: loss (\S+)$' 2
	# 48 samples, 24 a rank: 3 batches of 8 each epoch
	for r in 0 1; do
		check "... rank $r read only its own folder, rank-$r/" bash -c \
			"grep -q '/rank-$r/epoch-' '$D/reads-tr.$r' && ! grep -qv '/rank-$r/epoch-' '$D/reads-tr.$r'"
		check "... its epoch 0's 3 batches, then epoch 1's" reads_ok "$D/reads-tr.$r" 2 3
	done
	"${TR[@]}" train_torchvision.py "$D/train" --epochs 2 "${SMALL[@]}" --workers 0 \
		>"$D/tv-tr.out" 2>&1 || not_ok "torchrun train_torchvision.py: $(tail -3 "$D/tv-tr.out")"
	check "torchrun, gloo, 2 processes: train_torchvision.py trains 2 epochs" \
		finite tv-tr "$D/tv-tr.out" '(?m)^epoch \d: loss (\S+)$' 2

	$PY check_torchvision.py "$D/train" 32 >"$D/check-tv.out" 2>&1
	check "check_torchvision.py: $(tr '\n' ' ' <"$D/check-tv.out" | tail -c 300)" bash -c "
		grep -q '^Resize + CenterCrop + ToTensor + Normalize: 48 images, every batch equal' '$D/check-tv.out' &&
		grep -q '^RandomResizedCrop + RandomHorizontalFlip: 96 crops (.* flipped), every one equal' '$D/check-tv.out'"
	cd - >/dev/null
fi

# ---- tf.data
if ! $PY -c "import tensorflow, keras" 2>/dev/null; then
	echo "skip coming_from_tf_data: tensorflow is not importable (make python-deps)"
else
	"$BATCHFS" mkshards "$D/train" "$D/train-shards" --per-shard 16 --quiet &&
		"$BATCHFS" mkshards "$D/val" "$D/val-shards" --per-shard 16 --quiet ||
		{ not_ok "mkshards"; t_end; }
	cd "$D/cf"
	TSMALL=(--size 32 --batch-size 8 --classes 4 --lr 0.001)
	$PY train_tfdata.py "$D/train-shards" --val "$D/val-shards" --evaluate "${TSMALL[@]}" \
		>"$D/tfd-eval.out" 2>&1
	$PY train_tf_batchfs.py "$D/train-shards" --val "$D/val-shards" --evaluate "${TSMALL[@]}" \
		>"$D/tfb-eval.out" 2>&1
	check "--evaluate: the same val loss within float rounding ($(grep '^val' "$D/tfb-eval.out"))" \
		$PY - "$D/tfd-eval.out" "$D/tfb-eval.out" <<'PY'
import re, sys
a, b = (re.search(r"(?m)^val: loss (\S+), accuracy (\S+)$", open(f).read()).groups() for f in sys.argv[1:])
assert abs(float(a[0]) - float(b[0])) <= 1e-5 * abs(float(a[0])) and a[1] == b[1], (a, b)
PY
	$PY train_tfdata.py "$D/train-shards" --val "$D/val-shards" --epochs 2 "${TSMALL[@]}" \
		>"$D/tfd.out" 2>&1 || not_ok "train_tfdata.py: $(tail -3 "$D/tfd.out")"
	check "train_tfdata.py trains 2 epochs, finite losses" \
		finite tfd "$D/tfd.out" ' - loss: (\S+) - val_accuracy' 2
	BFS_READS="$D/reads-tf" $PY "$D/record.py" train_tf_batchfs.py "$D/train-shards" \
		--val "$D/val-shards" --epochs 2 "${TSMALL[@]}" >"$D/tfb.out" 2>&1 ||
		not_ok "train_tf_batchfs.py: $(tail -3 "$D/tfb.out")"
	check "train_tf_batchfs.py trains 2 epochs, finite losses" \
		finite tfb "$D/tfb.out" ' - loss: (\S+) - val_accuracy' 2
	check "... Keras read epoch 0's 6 batches, then epoch 1's: $(reads_ok "$D/reads-tf.0" 2 6 2>&1 | tail -1)" \
		reads_ok "$D/reads-tf.0" 2 6
	$PY check_tfdata.py "$D/train-shards" 32 >"$D/check-tf.out" 2>&1
	check "check_tfdata.py: $(tail -1 "$D/check-tf.out")" \
		grep -q "^decode_jpeg + resize + / 255: 48 images, every batch within .* of tf.data's" "$D/check-tf.out"
	cd - >/dev/null
fi

check "the scripts left no mount and no mount point: $(ls "$TMPDIR" | tr '\n' ' ')" bash -c "
	! grep -q ' $TMPDIR/' /proc/mounts && test -z \"\$(ls -A '$TMPDIR' | grep '^batchfs-')\""
t_end
