"""batchfs: read the .npy batches a batchfs mount serves, into NumPy arrays
or straight into GPU memory (pinned, asynchronous uploads through
libbatchfs_gpu.so, bound with ctypes: no compiler needed to install).

    import batchfs
    for images, labels in batchfs.GpuLoader(epoch_dir, device=0):
        ...
"""

from ._npy import BatchfsError, NpyHeader, list_batches, read_batch, \
    read_header, read_npy
from ._lib import device_count, find_library
from .loader import DeviceArray, GpuLoader, IMAGENET_MEAN, IMAGENET_STD

__version__ = "0.1.0"

__all__ = ["GpuLoader", "DeviceArray", "BatchfsError", "NpyHeader",
           "list_batches", "read_batch", "read_header", "read_npy",
           "device_count", "find_library", "IMAGENET_MEAN", "IMAGENET_STD"]
