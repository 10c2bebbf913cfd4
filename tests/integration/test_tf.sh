#!/usr/bin/env bash
# TensorFlow, for real (tensorflow-cpu): batchfs.tf.dataset has static
# shapes and dtypes from dataset.json, its tensors equal np.load of the
# files for every dtype and layout, and model.fit of a tiny Keras model
# runs one epoch on it; batchfs.tf.epochs steps Keras' model.fit(epochs=N)
# through epochs 0..N-1 (what dataset(epoch=0) replays N times).
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
# Keras, several epochs.  The labels each train_step got (run_eagerly) are
# the epochs' label files in order; with frozen weights (learning rate 0)
# and a flip augmentation that differs by epoch, each epoch's mean loss
# differs, where dataset(m, epoch=0) gives the same loss to the last digit
# every epoch (the same batches again).
check "model.fit(batchfs.tf.epochs(m), epochs=3) trains on epochs 0, 1, 2; dataset(epoch=0) replays epoch 0" \
	$PY - "$D/shards" <<'PY'
import sys
import numpy as np
import tensorflow as tf
import keras
import batchfs, batchfs.tf
seen = []
class Recording(keras.Sequential):
    def train_step(self, data):
        seen.append(data[1].numpy().tolist())
        return super().train_step(data)
def model(recording=False):
    layers = [keras.Input(shape=(16, 16, 3)), keras.layers.Conv2D(4, 3),
              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)]
    md = Recording(layers) if recording else keras.Sequential(layers)
    md.compile(optimizer=keras.optimizers.SGD(0.0), run_eagerly=recording,
               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return md
def scaled(ds):
    return ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
tf.random.set_seed(0)
with batchfs.Mount(sys.argv[1], batch=8, size=(16, 16), dtype="uint8", epochs=4,
                   shuffle=3, augment="flip", cache="none", threads=1) as m:
    labels = [[np.load(m.epoch_dir(e) + "/batch-%06d.labels.npy" % k).tolist()
               for k in range(len(m))] for e in range(4)]
    assert len({str(l) for l in labels}) == 4, "the epochs' orders must differ"
    h = model(True).fit(scaled(batchfs.tf.epochs(m)), epochs=3, verbose=0)
    assert seen == labels[0] + labels[1] + labels[2], seen
    assert len(h.history["loss"]) == 3
    # compiled (not eager), with a prefetch on top: every epoch's loss differs
    md = model()
    w = md.get_weights()
    h = md.fit(scaled(batchfs.tf.epochs(m)).prefetch(2), epochs=3, verbose=0)
    loss = h.history["loss"]
    assert len(set(loss)) == 3, loss
    assert all(np.array_equal(a, b) for a, b in zip(w, md.get_weights())), "frozen"
    # the old recipe: epoch 0 three times, the same loss to the last digit
    old = md.fit(scaled(batchfs.tf.dataset(m, epoch=0)), epochs=3, verbose=0).history["loss"]
    assert len(set(old)) == 1 and old[0] == loss[0], (old, loss)
    # resuming at Keras' initial_epoch 2: epochs 2 and 3
    seen.clear()
    model(True).fit(scaled(batchfs.tf.epochs(m, first=2)), epochs=4, initial_epoch=2, verbose=0)
    assert seen == labels[2] + labels[3], seen
    # a pass beyond the mount's last epoch fails naming it
    try:
        model().fit(scaled(batchfs.tf.epochs(m, first=3)), epochs=2, verbose=0)
        raise AssertionError("a fifth epoch of a mount of 4 was served")
    except tf.errors.OpError as e:
        assert "asks for epoch 4, and the mount has epochs 0..3" in str(e), e
    try:
        batchfs.tf.epochs(m, first=4)
        raise AssertionError("first=4 of a mount of 4 epochs was taken")
    except IndexError as e:
        assert "epochs 0..3" in str(e), e
    print("losses", loss, "old", old)
PY
t_end
