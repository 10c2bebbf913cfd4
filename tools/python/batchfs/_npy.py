"""The CPU reader of batch folders (no CUDA, NumPy only).

The same folder contract as tools/gpu/batchfs_gpu.h: every ``batch-*.npy``
that is not ``*.labels.npy``, sorted by name, each an NPY array of dtype
``|u1``, ``<f2`` or ``<f4`` and of shape (B,H,W,C) or (B,C,H,W), C in 1..4
(everything ``batchfs mount --dtype --layout`` serves), next to
``batch-*.labels.npy`` (``<i8``, shape (B,)).  NPY headers are read with
``numpy.lib.format``; the data with one ``readinto`` into a fresh array,
checked against the file's size.
"""

import errno
import json
import os

import numpy as np
from numpy.lib import format as npformat

__all__ = ["BatchfsError", "NpyHeader", "list_batches", "read_header",
           "read_npy", "read_batch", "image_layout"]

# BFS_GPU_MAX_CHANNELS: the binding's copy, as the ctypes structs in _lib
# are (checked against batchfs_gpu.h by tests/gpu/check_cpu.py).
MAX_CHANNELS = 4
IMAGE_DESCRS = ("|u1", "<f2", "<f4")
LAYOUTS = ("NHWC", "NCHW")


class BatchfsError(Exception):
    """A batch folder or file that batchfs cannot serve.

    ``code`` is the library's negative error code when it came from the C
    library (compare it with ``batchfs._lib.E_FORMAT`` and so on), else
    None.
    """

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class NpyHeader:
    """Parsed NPY header: ``descr`` (the dtype's ``str``, e.g. ``'<f2'``),
    ``dtype``, ``shape``, ``header_len``, ``data_len``."""

    __slots__ = ("descr", "dtype", "shape", "header_len", "data_len")

    def __init__(self, dtype, shape, header_len):
        self.dtype = np.dtype(dtype)
        self.descr = self.dtype.str
        self.shape = shape
        self.header_len = header_len
        self.data_len = int(np.prod(shape, dtype=np.int64)) * \
            self.dtype.itemsize

    def __repr__(self):
        return "NpyHeader(descr=%r, shape=%r, header_len=%d)" % (
            self.descr, self.shape, self.header_len)


def list_batches(folder):
    """Return [(images_path, labels_path), ...] of a batch folder, sorted.

    Raises FileNotFoundError / NotADirectoryError / PermissionError for the
    folder, BatchfsError when it holds no batch file or a labels file is
    missing.
    """
    names = sorted(n for n in os.listdir(folder)
                   if n.startswith("batch-") and n.endswith(".npy")
                   and not n.endswith(".labels.npy"))
    if not names and os.path.exists(os.path.join(folder, "dataset.json")):
        raise BatchfsError(
            "%s is the root of a batchfs mount, not a folder of batches: "
            "give one of its epoch folders (%s), or the mount itself to "
            "batchfs.torch.BatchDataset, batchfs.tf.dataset or "
            "batchfs.jax.batches" % (folder, os.path.join(
                folder, "rank-R/epoch-0000" if any(
                    n.startswith("rank-") for n in os.listdir(folder))
                else "epoch-0000")))
    if not names:
        raise BatchfsError("%s: no batch-*.npy files" % folder)
    out = []
    for n in names:
        img = os.path.join(folder, n)
        lbl = os.path.join(folder, n[:-len(".npy")] + ".labels.npy")
        if not os.path.exists(lbl):
            raise BatchfsError("%s: missing (every batch needs its labels "
                               "file)" % lbl)
        out.append((img, lbl))
    return out


def read_header(f, path="<file>"):
    """Parse the NPY header (v1.0, v2.0 or v3.0) at the start of the binary
    file object f with numpy.lib.format.

    Leaves f positioned at the first data byte.  Raises BatchfsError: bad
    magic, unknown version, truncated or malformed header, fortran order.
    """
    f.seek(0)
    try:
        major, minor = npformat.read_magic(f)
    except ValueError as e:
        raise BatchfsError("%s: not an .npy file (bad magic: %s)" % (path, e))
    if major == 1:
        read = npformat.read_array_header_1_0
    elif major in (2, 3):
        # 3.0 differs from 2.0 only in the header's encoding (UTF-8, for
        # structured field names, which no image or label array has):
        # numpy has no public reader for it, and the ASCII dicts we
        # accept read the same either way.
        read = npformat.read_array_header_2_0
    else:
        raise BatchfsError("%s: unknown .npy version %d.%d" %
                           (path, major, minor))
    try:
        shape, fortran, dtype = read(f)
    except ValueError as e:
        text = str(e).splitlines()[0]
        if text.startswith("EOF"):
            raise BatchfsError("%s: truncated header (%s)" % (path, text))
        raise BatchfsError("%s: malformed header dict (%s)" % (path, text))
    if not all(x >= 0 for x in shape):
        raise BatchfsError("%s: malformed header dict (negative dimension "
                           "in shape %r)" % (path, shape))
    if fortran:
        raise BatchfsError("%s: fortran_order arrays are not served" % path)
    return NpyHeader(dtype, shape, f.tell())


def _readinto_exact(f, view, path):
    got = 0
    n = len(view)
    while got < n:
        r = f.readinto(view[got:])
        if not r:
            raise BatchfsError("%s: file ends %d bytes early" %
                               (path, n - got))
        got += r
    if f.read(1):
        raise BatchfsError("%s: bytes after the array data" % path)


def mount_says(path):
    """What a batchfs mount says of the batch file ``path`` whose read
    failed: the "error" of its batch-NNNNNN.index.json (the bad sample's
    file or shard and record, and why), or None."""
    path = os.fspath(path)
    for tail in (".labels.npy", ".npy"):
        if path.endswith(tail):
            try:
                with open(path[:-len(tail)] + ".index.json", "rb") as f:
                    err = json.loads(f.read()).get("error")
            except (OSError, ValueError, AttributeError):
                return None
            return err if isinstance(err, str) else None
    return None


def read_npy(path, expect=None):
    """Read one .npy file into a fresh C-order array (one copy: readinto;
    never a mapping, whose page fault on a failed read is SIGBUS).

    ``expect(header, path)``, if given, may raise to refuse the file before
    its data are read.  Raises BatchfsError for a file that is not what the
    header says; OSError for a read that fails, EIO naming what the mount
    says of the batch (mount_says) when it says something.
    """
    try:
        with open(path, "rb", buffering=0) as f:
            h = read_header(f, path)
            if expect is not None:
                expect(h, path)
            arr = np.empty(h.shape, dtype=h.dtype)
            if arr.nbytes:
                _readinto_exact(f, memoryview(arr.reshape(-1)).cast("B"), path)
            elif f.read(1):
                raise BatchfsError("%s: bytes after the array data" % path)
    except OSError as e:
        says = mount_says(path) if e.errno == errno.EIO else None
        if says is None:
            raise
        raise OSError(errno.EIO, "%s; the mount failed this batch: %s" %
                      (os.strerror(errno.EIO), says), os.fspath(path)) from e
    return arr


def image_layout(shape, files_layout=None):
    """"NHWC" or "NCHW": how an images array of this 4-D shape is laid out.

    ``files_layout`` ("NHWC"/"NCHW") says it; None reads it from the shape
    as the C library does: NHWC when the last dimension is 1..4 channels,
    else NCHW when the second is.  (A batchfs mount has 3 channels: only an
    NCHW mount of width 1..4 needs ``files_layout``.)  None if the shape
    fits neither.
    """
    def is_c(x):
        return 1 <= x <= MAX_CHANNELS

    if files_layout is not None:
        c = shape[3] if files_layout == "NHWC" else shape[1]
        return files_layout if is_c(c) else None
    if is_c(shape[3]):
        return "NHWC"
    if is_c(shape[1]):
        return "NCHW"
    return None


def _expect_images(files_layout):
    def expect(h, path):
        if h.descr not in IMAGE_DESCRS:
            raise BatchfsError("%s: images dtype '%s', want '|u1', '<f2' "
                               "or '<f4'" % (path, h.descr))
        if len(h.shape) != 4 or h.shape[0] < 1 or \
                image_layout(h.shape, files_layout) is None:
            raise BatchfsError(
                "%s: images shape %r, want %s, C in 1..%d" %
                (path, h.shape,
                 {"NHWC": "(B,H,W,C)", "NCHW": "(B,C,H,W)"}.get(
                     files_layout, "(B,H,W,C) or (B,C,H,W)"), MAX_CHANNELS))
    return expect


def read_batch(images_path, labels_path, files_layout=None):
    """Read one batch as stored: (images (B,H,W,C) or (B,C,H,W) of uint8,
    float16 or float32, labels (B,) int64).  ``files_layout``: see
    image_layout."""
    images = read_npy(images_path, _expect_images(files_layout))

    def expect_labels(h, path):
        if h.descr != "<i8" or h.shape != (images.shape[0],):
            raise BatchfsError("%s: labels %s %r, want '<i8' (%d,)" %
                               (path, h.descr, h.shape, images.shape[0]))

    labels = read_npy(labels_path, expect_labels)
    return images, labels
