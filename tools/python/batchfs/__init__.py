"""batchfs: train from a batchfs mount.

    import batchfs
    with batchfs.Mount("/data/train", batch=32, size=(224, 224),
                       rank="auto", world="auto") as m:
        for images, labels in batchfs.GpuLoader(m.epoch_dir(0), device=0):
            ...

batchfs.Mount mounts (a context manager over `batchfs mount`);
batchfs.torch.BatchDataset, batchfs.tf.dataset and batchfs.jax.batches
serve its epochs to PyTorch, TensorFlow and JAX (each imports its
framework only when imported itself: `import batchfs` needs NumPy alone);
batchfs.load(path) is np.load for one batch file (a failed batch raises
BatchfsError naming it, its bad samples, the cause and the fix);
GpuLoader reads batch files into NumPy arrays or straight into GPU memory
(pinned, asynchronous uploads through libbatchfs_gpu.so, bound with
ctypes: no compiler needed to install).
"""

from ._npy import BatchfsError, NpyHeader, image_layout, list_batches, \
    load, read_batch, read_header, read_npy
from ._lib import device_count, find_library
from .loader import DeviceArray, GpuLoader, IMAGENET_MEAN, IMAGENET_STD
from .mount import Mount, open_source


def _checkout_version():
    """BFS_VERSION of engine/version.h, for a source checkout where make
    has not written _version.py yet."""
    import os
    import re
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                     os.pardir, os.pardir, "engine", "version.h")
    try:
        with open(h) as f:
            m = re.search(r'^#define BFS_VERSION "([^"]*)"', f.read(), re.M)
    except OSError:
        m = None
    if m is None:
        raise ImportError("batchfs/_version.py is missing: `make python` "
                          "writes it from engine/version.h")
    return m.group(1)


try:  # written by make from engine/version.h (tools/python/python.mk)
    from ._version import __version__
except ImportError:
    __version__ = _checkout_version()

__all__ = ["Mount", "open_source", "GpuLoader", "DeviceArray", "BatchfsError", "load", "NpyHeader",
           "image_layout", "list_batches", "read_batch", "read_header",
           "read_npy", "device_count", "find_library", "IMAGENET_MEAN",
           "IMAGENET_STD"]
