#!/usr/bin/env bash
# TensorFlow, for real (tensorflow-cpu): batchfs.tf.dataset has static
# shapes and dtypes from dataset.json, its tensors equal np.load of the
# files for every dtype and layout, and model.fit of a tiny Keras model
# runs one epoch on it.
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR
if ! $PY -c 'import tensorflow' 2>/dev/null; then
	not_ok "tensorflow: not installed (make python-deps, or pip install tensorflow-cpu)"
	t_end
fi
export PYTHONPATH="$PWD/tools/python:$PYTHONPATH" BATCHFS TMPDIR="$D/tmp" TF_CPP_MIN_LOG_LEVEL=2
mkdir -p "$TMPDIR"
"$MKJPEG" "$D/jpegs" --classes 4 --per-class 10 --seed 31 --min-size 30 \
	--max-size 80 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/shards" --per-shard 16 --quiet || { not_ok mkshards; t_end; }
check "batchfs.tf.dataset: static shapes and dtypes, tensors equal np.load, every dtype and layout" \
	$PY - "$D/shards" <<'PY'
import sys
import numpy as np
import tensorflow as tf
import batchfs, batchfs.tf
for dtype, tfd in (("uint8", tf.uint8), ("float16", tf.float16), ("float32", tf.float32)):
    for layout in ("nhwc", "nchw"):
        for drop in (False, True):
            with batchfs.Mount(sys.argv[1], batch=6, size=(10, 14), dtype=dtype,
                               layout=layout, epochs=2, shuffle=2,
                               drop_remainder=drop, cache="none", threads=1) as m:
                ds = batchfs.tf.dataset(m, epoch=1)
                img, lab = ds.element_spec
                hw = [3, 10, 14] if layout == "nchw" else [10, 14, 3]
                # 40 samples: the last batch of 4 unless dropped
                assert img.shape.as_list() == [6 if drop else None] + hw, img.shape
                assert img.dtype == tfd and lab.dtype == tf.int64, (img, lab)
                n = 0
                for k, (x, y) in enumerate(ds):
                    f = m.epoch_dir(1) + "/batch-%06d" % k
                    assert np.array_equal(x.numpy(), np.load(f + ".npy")), (dtype, layout, k)
                    assert np.array_equal(y.numpy(), np.load(f + ".labels.npy"))
                    n += 1
                assert n == len(m) == int(ds.cardinality()) == (6 if drop else 7), n
PY
check "model.fit of a tiny Keras model for one epoch on batchfs.tf.dataset" $PY - "$D/shards" <<'PY'
import sys
import tensorflow as tf
import batchfs, batchfs.tf
tf.random.set_seed(0)
with batchfs.Mount(sys.argv[1], batch=8, size=(16, 16), dtype="uint8", epochs=1,
                   shuffle=1, cache="none") as m:
    ds = batchfs.tf.dataset(m).map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(16, 16, 3)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(4)])
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(ds, epochs=1, verbose=0)
    assert len(h.history["loss"]) == 1 and h.history["loss"][0] > 0, h.history
    print("loss", h.history["loss"])
PY
t_end
