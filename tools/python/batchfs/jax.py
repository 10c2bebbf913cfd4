"""batchfs.jax: the batches of one epoch of a batchfs mount as jax.Arrays.

    import batchfs, batchfs.jax, jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(jax.devices(), ("data",))
    for images, labels in batchfs.jax.batches(
            "/mnt/train", epoch=0, sharding=NamedSharding(mesh, P("data"))):
        ...

A run resumes where it stopped, on this world or another one, with the
state batchfs.torch keeps: state_dict(m, epoch, batches_taken) to save,
and after a mount made with batchfs.Mount(..., resume=state),
load_state_dict(m, state) gives (epoch, start) for batches(m, epoch,
start=start).

JAX is imported when this module is: `import batchfs` alone needs only
NumPy.
"""

import jax
from jax.sharding import NamedSharding, PartitionSpec

from . import _state
from .loader import GpuLoader
from .mount import open_source

__all__ = ["batches", "state_dict", "load_state_dict"]


def _label_sharding(s):
    """The labels' (B,) sharding that matches images sharding s."""
    if isinstance(s, NamedSharding):
        spec = tuple(s.spec)
        return NamedSharding(s.mesh, PartitionSpec(spec[0] if spec else None))
    if getattr(s, "is_fully_replicated", False) or len(s.device_set) == 1:
        return s
    raise ValueError("give sharding=(images_sharding, labels_sharding) for "
                     "a %s" % type(s).__name__)


def batches(mount_or_path, epoch=0, sharding=None, depth=2, start=0):
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
    start     the first batch (a resumed run: load_state_dict)
    """
    src = open_source(mount_or_path)
    if sharding is None:
        put_img = put_lbl = None
    elif isinstance(sharding, (tuple, list)):
        put_img, put_lbl = sharding
    else:
        put_img, put_lbl = sharding, _label_sharding(sharding)
    with GpuLoader(src.epoch_dir(epoch), device="cpu", depth=depth,
                   start=start) as ld:
        for images, labels in ld:
            yield (jax.device_put(images, put_img),
                   jax.device_put(labels, put_lbl))


def state_dict(mount_or_path, epoch, batch):
    """The state of a run that took `batch` batches of `epoch` from this
    mount: the dict batchfs.torch.BatchDataset.state_dict() makes."""
    src = open_source(mount_or_path)
    return _state.make_state(src.info, src.rank, epoch, batch)


def load_state_dict(mount_or_path, state, allow=()):
    """(epoch, start): where `state` resumes on this mount, for
    batches(mount, epoch, start=start); refuses as BatchDataset's."""
    src = open_source(mount_or_path)
    return _state.position(src.info, src.rank, state, allow)
