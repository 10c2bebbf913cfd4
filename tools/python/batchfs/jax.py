"""batchfs.jax: the batches of one epoch of a batchfs mount as jax.Arrays.

    import batchfs, batchfs.jax, jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(jax.devices(), ("data",))
    for images, labels in batchfs.jax.batches(
            "/mnt/train", epoch=0, sharding=NamedSharding(mesh, P("data"))):
        ...

JAX is imported when this module is: `import batchfs` alone needs only
NumPy.
"""

import jax
from jax.sharding import NamedSharding, PartitionSpec

from .loader import GpuLoader
from .mount import open_source

__all__ = ["batches"]


def _label_sharding(s):
    """The labels' (B,) sharding that matches images sharding s."""
    if isinstance(s, NamedSharding):
        spec = tuple(s.spec)
        return NamedSharding(s.mesh, PartitionSpec(spec[0] if spec else None))
    if getattr(s, "is_fully_replicated", False) or len(s.device_set) == 1:
        return s
    raise ValueError("give sharding=(images_sharding, labels_sharding) for "
                     "a %s" % type(s).__name__)


def batches(mount_or_path, epoch=0, sharding=None, depth=2):
    """Yield (images, labels) jax.Arrays for each batch of epoch `epoch`,
    in order: images as the mount stores them (its dtype and layout),
    labels int64 (with jax_enable_x64; else JAX's int32), each equal to
    np.load of its file.

    sharding  None: the default device; a jax.sharding.Sharding for the
              images (a NamedSharding's first axis shards the labels too);
              or a pair (images_sharding, labels_sharding).  A sharding
              over the batch axis needs every batch to divide evenly: mount
              with drop_remainder=True or a batch that divides the epoch.
    depth     batches read ahead by a background thread (GpuLoader's CPU
              mode)
    """
    src = open_source(mount_or_path)
    if sharding is None:
        put_img = put_lbl = None
    elif isinstance(sharding, (tuple, list)):
        put_img, put_lbl = sharding
    else:
        put_img, put_lbl = sharding, _label_sharding(sharding)
    with GpuLoader(src.epoch_dir(epoch), device="cpu", depth=depth) as ld:
        for images, labels in ld:
            yield (jax.device_put(images, put_img),
                   jax.device_put(labels, put_lbl))
