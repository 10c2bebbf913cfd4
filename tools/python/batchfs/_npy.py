"""NPY headers and the CPU reader of batch folders (no CUDA, NumPy only).

The same folder contract as tools/gpu/batchfs_gpu.h: every ``batch-*.npy``
that is not ``*.labels.npy``, sorted by name, each an NPY array of shape
(B,H,W,C) of dtype ``|u1`` or ``<f4``, next to ``batch-*.labels.npy``
(``<i8``, shape (B,)).
"""

import ast
import os
import struct

import numpy as np

__all__ = ["BatchfsError", "NpyHeader", "list_batches", "read_header",
           "read_npy", "read_batch"]

_MAGIC = b"\x93NUMPY"
_IMAGE_DTYPES = {"|u1": np.uint8, "<u1": np.uint8, "<f4": np.float32}


class BatchfsError(Exception):
    """A batch folder or file that batchfs cannot serve.

    ``code`` is the library's negative error code when it came from the C
    library, else None.
    """

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class NpyHeader:
    """Parsed NPY header: ``descr``, ``shape``, ``header_len``, ``data_len``."""

    __slots__ = ("descr", "shape", "header_len", "data_len")

    def __init__(self, descr, shape, header_len):
        self.descr = descr
        self.shape = shape
        self.header_len = header_len
        self.data_len = int(np.prod(shape, dtype=np.int64)) * \
            np.dtype(descr).itemsize

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


def _parse(prefix, path):
    if len(prefix) < 10 or prefix[:6] != _MAGIC:
        raise BatchfsError("%s: not an .npy file (bad magic)" % path)
    major = prefix[6]
    if major == 1:
        hlen, start = struct.unpack("<H", prefix[8:10])[0], 10
    elif major in (2, 3):
        if len(prefix) < 12:
            raise BatchfsError("%s: truncated header" % path)
        hlen, start = struct.unpack("<I", prefix[8:12])[0], 12
    else:
        raise BatchfsError("%s: unknown .npy version %d" % (path, major))
    return start, hlen


def read_header(f, path="<file>"):
    """Parse the NPY header at the start of the binary file object f.

    Leaves f positioned at the first data byte.  Raises BatchfsError.
    """
    f.seek(0)
    prefix = f.read(12)
    start, hlen = _parse(prefix, path)
    f.seek(start)
    text = f.read(hlen)
    if len(text) != hlen:
        raise BatchfsError("%s: truncated header" % path)
    try:
        d = ast.literal_eval(text.decode("latin1"))
    except (ValueError, SyntaxError) as e:
        raise BatchfsError("%s: malformed header dict (%s)" % (path, e))
    if (not isinstance(d, dict) or
            set(d) != {"descr", "fortran_order", "shape"} or
            not isinstance(d["descr"], str) or
            not isinstance(d["shape"], tuple) or
            not all(isinstance(x, int) and x >= 0 for x in d["shape"])):
        raise BatchfsError("%s: malformed header dict" % path)
    if d["fortran_order"]:
        raise BatchfsError("%s: fortran_order arrays are not served" % path)
    try:
        h = NpyHeader(d["descr"], d["shape"], start + hlen)
    except TypeError:
        raise BatchfsError("%s: unsupported dtype %r" % (path, d["descr"]))
    return h


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


def read_npy(path, expect=None):
    """Read one .npy file into a fresh C-order array (one copy: readinto).

    ``expect`` may be a dict of descr set / ndim to check.  Raises
    BatchfsError for a file that is not what the header says.
    """
    with open(path, "rb", buffering=0) as f:
        h = read_header(f, path)
        if expect is not None:
            expect(h, path)
        arr = np.empty(h.shape, dtype=np.dtype(h.descr))
        if arr.nbytes:
            _readinto_exact(f, memoryview(arr.reshape(-1)).cast("B"), path)
        elif f.read(1):
            raise BatchfsError("%s: bytes after the array data" % path)
    return arr


def _expect_images(h, path):
    if h.descr not in _IMAGE_DTYPES:
        raise BatchfsError("%s: images dtype '%s', want '|u1' or '<f4'" %
                           (path, h.descr))
    if len(h.shape) != 4 or h.shape[0] < 1 or not 1 <= h.shape[3] <= 4:
        raise BatchfsError("%s: images shape %r, want (B,H,W,C), C in 1..4"
                           % (path, h.shape))


def read_batch(images_path, labels_path):
    """Read one batch: (images (B,H,W,C) uint8/float32, labels (B,) int64)."""
    images = read_npy(images_path, _expect_images)

    def expect_labels(h, path):
        if h.descr != "<i8" or h.shape != (images.shape[0],):
            raise BatchfsError("%s: labels %s %r, want '<i8' (%d,)" %
                               (path, h.descr, h.shape, images.shape[0]))

    labels = read_npy(labels_path, expect_labels)
    return images, labels
