"""batchfs.tf: a tf.data.Dataset over one epoch of a batchfs mount.

    import batchfs, batchfs.tf
    ds = batchfs.tf.dataset("/mnt/train", epoch=0)   # or a batchfs.Mount
    model.fit(ds, epochs=1)

A run resumes where it stopped, on this world or another one, with the
state batchfs.torch keeps: state_dict(m, epoch, batches_taken) to save,
and after a mount made with batchfs.Mount(..., resume=state),
load_state_dict(m, state) gives (epoch, start) for dataset(m, epoch,
start=start).

TensorFlow is imported when this module is: `import batchfs` alone needs
only NumPy.
"""

import numpy as np
import tensorflow as tf

from . import _state
from ._npy import read_batch
from .mount import open_source

__all__ = ["dataset", "element_spec", "state_dict", "load_state_dict"]

_DTYPES = {"uint8": tf.uint8, "float16": tf.float16, "float32": tf.float32}


def element_spec(mount_or_path):
    """(images, labels) TensorSpecs from dataset.json: the images' shape
    (B, H, W, 3) or (B, 3, H, W) and dtype; B is static when every batch
    of an epoch is full (drop_remainder, or B divides the epoch), else
    None (the last batch is smaller)."""
    info = open_source(mount_or_path).info
    shape = list(info["shape"])
    r = info.get("resume")
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
    folder = src.epoch_dir(epoch)
    spec = element_spec(src)
    n = src.batches_of(epoch)
    width = max(6, len(str(src.batches - 1)))
    if not 0 <= int(start) <= n:
        raise ValueError("start %d: epoch %d has %d batches" % (start, epoch, n))

    def gen():
        for k in range(int(start), n):
            base = "%s/batch-%0*d" % (folder, width, k)
            images, labels = read_batch(base + ".npy", base + ".labels.npy")
            yield images, np.asarray(labels, dtype=np.int64)

    ds = tf.data.Dataset.from_generator(gen, output_signature=spec)
    return ds.apply(tf.data.experimental.assert_cardinality(n - int(start)))


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
