"""batchfs.tf: tf.data.Datasets over the epochs of a batchfs mount.

    import batchfs, batchfs.tf
    ds = batchfs.tf.dataset("/mnt/train", epoch=0)   # or a batchfs.Mount
    model.fit(ds, epochs=1)

    # Keras, several epochs: each pass over the dataset is the next epoch
    with batchfs.Mount("/data/train", batch=32, shuffle=1, epochs=90) as m:
        model.fit(batchfs.tf.epochs(m), epochs=90)

A run resumes where it stopped, on this world or another one, with the
state batchfs.torch keeps: state_dict(m, epoch, batches_taken) to save,
and after a mount made with batchfs.Mount(..., resume=state),
load_state_dict(m, state) gives (epoch, start) for dataset(m, epoch,
start=start).

TensorFlow is imported when this module is: `import batchfs` alone needs
only NumPy.
"""

import itertools

import numpy as np
import tensorflow as tf

from . import _state
from ._npy import read_batch
from .mount import open_source

__all__ = ["dataset", "epochs", "element_spec", "state_dict",
           "load_state_dict"]

_DTYPES = {"uint8": tf.uint8, "float16": tf.float16, "float32": tf.float32}


def element_spec(mount_or_path):
    """(images, labels) TensorSpecs from dataset.json: the images' shape
    (B, H, W, 3) or (B, 3, H, W) and dtype; B is static when every batch
    of an epoch is full (drop_remainder, or B divides the epoch), else
    None (the last batch is smaller)."""
    info = open_source(mount_or_path).info
    shape = list(info["shape"])
    r = info.get("resume")  # an epoch resumed part way: its last batch too
    if int(info["last_batch_size"]) != int(info["batch_size"]) or (
            r and int(r["batches"]) and
            int(r["last_batch_size"]) != int(info["batch_size"])):
        shape[0] = None
    return (tf.TensorSpec(shape=shape, dtype=_DTYPES[info["dtype"]]),
            tf.TensorSpec(shape=[shape[0]], dtype=tf.int64))


def dataset(mount_or_path, epoch=0, start=0):
    """The batches of epoch `epoch` as a tf.data.Dataset of (images,
    labels): images as the mount stores them (its dtype and layout, see
    element_spec), labels int64; one element per batch file, in order,
    from batch `start` on, with that cardinality (an epoch resumed part
    way has fewer batches).  Each batch is the file's bytes (np.load of
    it).  The mount reads ahead and decodes in its own threads; add
    .prefetch() for overlap with the model on top."""
    src = open_source(mount_or_path)
    src.epoch_dir(epoch)  # IndexError now, not at the first batch
    n, start = src.batches_of(epoch), int(start)
    if not 0 <= start <= n:
        raise ValueError("start %d: epoch %d has %d batches" % (start, epoch, n))
    ds = tf.data.Dataset.from_generator(lambda: _batches(src, epoch, start),
                                        output_signature=element_spec(src))
    return ds.apply(tf.data.experimental.assert_cardinality(n - start))


def epochs(mount_or_path, first=0):
    """A tf.data.Dataset that serves the next epoch each time it is
    iterated: the first pass is epoch `first`, the next `first + 1`, and so
    on.  Keras' model.fit(ds, epochs=N) iterates its dataset once per
    epoch, so it trains on epochs first .. first+N-1 of the mount (with
    `dataset(m, epoch=0)` it would train on epoch 0 N times: the same
    samples in the same order, the same augmentation).  Each pass is the
    batches of one epoch, as dataset() gives them, with the epoch's
    cardinality.

    An epoch starts when its pass reads its first batch (so an iterator
    that is made and never read takes none).  A pass beyond the mount's
    last epoch fails with an error naming it (TensorFlow passes it on
    as a tf.errors error): mount with epochs= at least fit's.  To resume
    at Keras' initial_epoch k, give first=k: model.fit(epochs(m, first=k),
    epochs=N, initial_epoch=k).  Every pass of this dataset, and of any
    dataset made from it by .map(), .prefetch() and so on, counts, so use
    one for model.fit alone and dataset(m, epoch=e) for evaluation.

    A .prefetch() on top reads the next epoch's first batches while the
    last steps of an epoch run, as Keras makes the next pass's iterator
    at the end of each epoch; after the last epoch that read-ahead fails
    unseen, and the pass it began is never used."""
    src = open_source(mount_or_path)
    src.epoch_dir(first)  # IndexError now for a first that is out of range
    counter = itertools.count(int(first))  # next() is atomic under the GIL

    def gen():
        e = next(counter)
        if e >= src.epochs:
            raise IndexError(
                "batchfs.tf.epochs: pass %d over the dataset asks for epoch "
                "%d, and the mount has epochs 0..%d: mount with epochs= at "
                "least model.fit's epochs" % (e - int(first) + 1, e,
                                               src.epochs - 1))
        yield from _batches(src, e)

    ds = tf.data.Dataset.from_generator(gen, output_signature=element_spec(src))
    if src.info.get("resume"):  # one epoch has fewer batches
        return ds
    return ds.apply(tf.data.experimental.assert_cardinality(src.batches))


def _batches(src, epoch, start=0):
    """(images, labels int64) of each batch of the epoch from `start`, in
    order."""
    folder = src.epoch_dir(epoch)
    width = max(6, len(str(src.batches - 1)))
    for k in range(start, src.batches_of(epoch)):
        base = "%s/batch-%0*d" % (folder, width, k)
        images, labels = read_batch(base + ".npy", base + ".labels.npy")
        yield images, np.asarray(labels, dtype=np.int64)


def state_dict(mount_or_path, epoch, batch):
    """The state of a run that took `batch` batches of `epoch` from this
    mount: the dict batchfs.torch.BatchDataset.state_dict() makes (what
    the whole job consumed, and the mount's settings)."""
    src = open_source(mount_or_path)
    return _state.make_state(src.info, src.rank, epoch, batch)


def load_state_dict(mount_or_path, state, allow=()):
    """(epoch, start): where `state` resumes on this mount, for
    dataset(mount, epoch, start=start).  Refuses (ValueError) a state of
    another mount, or of another world that the mount was not made for
    (batchfs.Mount(..., resume=state) makes one); as BatchDataset's."""
    src = open_source(mount_or_path)
    return _state.position(src.info, src.rank, state, allow)
