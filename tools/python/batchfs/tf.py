"""batchfs.tf: a tf.data.Dataset over one epoch of a batchfs mount.

    import batchfs, batchfs.tf
    ds = batchfs.tf.dataset("/mnt/train", epoch=0)   # or a batchfs.Mount
    model.fit(ds, epochs=1)

TensorFlow is imported when this module is: `import batchfs` alone needs
only NumPy.
"""

import numpy as np
import tensorflow as tf

from ._npy import read_batch
from .mount import open_source

__all__ = ["dataset", "element_spec"]

_DTYPES = {"uint8": tf.uint8, "float16": tf.float16, "float32": tf.float32}


def element_spec(mount_or_path):
    """(images, labels) TensorSpecs from dataset.json: the images' shape
    (B, H, W, 3) or (B, 3, H, W) and dtype; B is static when every batch
    of an epoch is full (drop_remainder, or B divides the epoch), else
    None (the last batch is smaller)."""
    info = open_source(mount_or_path).info
    shape = list(info["shape"])
    if int(info["last_batch_size"]) != int(info["batch_size"]):
        shape[0] = None
    return (tf.TensorSpec(shape=shape, dtype=_DTYPES[info["dtype"]]),
            tf.TensorSpec(shape=[shape[0]], dtype=tf.int64))


def dataset(mount_or_path, epoch=0):
    """The batches of epoch `epoch` as a tf.data.Dataset of (images,
    labels): images as the mount stores them (its dtype and layout, see
    element_spec), labels int64; one element per batch file, in order,
    with the epoch's cardinality.  Each batch is the file's bytes
    (np.load of it).  The mount reads ahead and decodes in its own threads;
    add .prefetch() for overlap with the model on top."""
    src = open_source(mount_or_path)
    folder = src.epoch_dir(epoch)
    spec = element_spec(src)
    n = src.batches
    width = max(6, len(str(n - 1)))

    def gen():
        for k in range(n):
            base = "%s/batch-%0*d" % (folder, width, k)
            images, labels = read_batch(base + ".npy", base + ".labels.npy")
            yield images, np.asarray(labels, dtype=np.int64)

    ds = tf.data.Dataset.from_generator(gen, output_signature=spec)
    return ds.apply(tf.data.experimental.assert_cardinality(n))
