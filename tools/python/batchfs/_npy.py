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
import errno as _errno
import json
import os

import numpy as np
from numpy.lib import format as npformat

__all__ = ["BatchfsError", "NpyHeader", "list_batches", "read_header",
           "read_npy", "load", "read_batch", "image_layout"]

# BFS_GPU_MAX_CHANNELS: the binding's copy, as the ctypes structs in _lib
# are (checked against batchfs_gpu.h by tests/gpu/check_cpu.py).
MAX_CHANNELS = 4
IMAGE_DESCRS = ("|u1", "<f2", "<f4")
LAYOUTS = ("NHWC", "NCHW")


class BatchfsError(OSError):
    """A batch folder or file that batchfs cannot serve, or a mount that
    failed.  An OSError, errno EIO unless ``errno`` says otherwise, so
    code that handles a failed read keeps working.

    ``code`` is the library's negative error code when it came from the C
    library (compare it with ``batchfs._lib.E_FORMAT`` and so on), else
    None.  For a batch the mount failed to make (a corrupt image, with
    ``on_error="fail"``): ``filename`` is the batch file, ``samples`` the
    bad samples in it (dicts of the batch's index.json: "position",
    "sample", "shard", "record" or "member", and "path" for a folder's
    image), ``cause`` what the mount says, ``fix`` what would help.
    """

    def __init__(self, message, code=None, errno=_errno.EIO, filename=None,
                 samples=(), cause=None, fix=None):
        super().__init__(errno, message)
        self.message = message
        self.code = code
        self.filename = filename
        self.samples = list(samples)
        self.cause = cause
        self.fix = fix

    def __str__(self):
        return self.message

    def __reduce__(self):  # pickles (DataLoader workers) as it was made
        return (_rebuild_error, (type(self), self.message, self.code,
                                 self.errno, self.filename, self.samples,
                                 self.cause, self.fix))


def _rebuild_error(cls, message, code, errno_, filename, samples, cause,
                   fix):
    return cls(message, code, errno_, filename, samples, cause, fix)


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


def _index_of(path):
    """The batch-NNNNNN.index.json beside a batch file, or None."""
    path = os.fspath(path)
    for tail in (".labels.npy", ".npy"):
        if path.endswith(tail):
            return path[:-len(tail)] + ".index.json"
    return None


def _read_index(path):
    idx = _index_of(path)
    if idx is None:
        return None
    try:
        with open(idx, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def mount_says(path):
    """What a batchfs mount says of the batch file ``path`` whose read
    failed: the "error" of its batch-NNNNNN.index.json (the bad sample's
    file or shard and record, and why), or None."""
    doc = _read_index(path)
    err = doc.get("error") if doc is not None else None
    return err if isinstance(err, str) else None


def _mount_info(path):
    """dataset.json of the mount that serves batch file ``path`` (its
    epoch folder's parent, or the rank folder's), or None."""
    d = os.path.dirname(os.path.abspath(os.fspath(path)))
    for _ in range(3):
        d = os.path.dirname(d)
        try:
            with open(os.path.join(d, "dataset.json"), "rb") as f:
                return json.loads(f.read())
        except (OSError, ValueError):
            continue
    return None


def _describe(sample):
    """The mount's own name for a sample (engine's bfs_source_describe)."""
    shard = sample.get("shard")
    if "member" in sample:
        return "%s member %s" % (shard, sample["member"])
    if "record" in sample:
        return "%s record %s" % (shard, sample["record"])
    return str(shard)


def bad_samples(path, says=None):
    """The samples of the batch file ``path`` that the mount's error names
    (a failed batch stops at its first bad sample: one, in practice), each
    a dict of its index.json with, for a folder of images, "path": the
    image's path in the source."""
    doc = _read_index(path)
    if doc is None:
        return []
    says = says if says is not None else doc.get("error")
    if not isinstance(says, str):
        return []
    info = _mount_info(path) or {}
    out = []
    for s in doc.get("samples") or ():
        if not isinstance(s, dict) or "shard" not in s:
            continue
        name = _describe(s)
        if says == name or says.startswith(name + ": ") or \
                says.startswith(name + " ("):
            s = dict(s)
            s.pop("label", None)
            src = info.get("source")
            if info.get("format") == "folder" and isinstance(src, str):
                s["path"] = (src.rstrip("/") + "/" + s["shard"]) \
                    if "://" in src else os.path.join(src, s["shard"])
            out.append(s)
    return out


def _sample_text(s):
    where = s.get("path") or s.get("shard")
    if "record" in s:
        where = "%s record %s" % (where, s["record"])
    elif "member" in s:
        where = "%s member %s" % (where, s["member"])
    return "sample %s (position %s of the batch): %s" % (
        s.get("sample"), s.get("position"), where)


FIX = ('mount with on_error="skip" (batchfs mount --on-error skip) to serve '
       'a good sample in place of each bad one (the index.json says which), '
       'or repair or remove the file')


def batch_error(path, cause=None):
    """The BatchfsError (EIO) for batch file ``path`` whose read failed:
    the file, the bad samples and the cause as the mount says them, and the
    fix.  A link (a DataLoader worker's folder of links) names its
    target, the mount's own file."""
    path = os.path.realpath(os.fspath(path))
    says = mount_says(path)
    samples = bad_samples(path, says) if says is not None else []
    if says is not None:
        msg = "%s: %s; the mount failed this batch: %s" % (
            path, os.strerror(errno.EIO), says)
        for s in samples:
            msg += "\n  bad %s" % _sample_text(s)
        msg += "\n  fix: " + FIX
        fix = FIX
    else:
        msg = "%s: %s%s (the mount says nothing of it: see its log, or " \
            "`batchfs status`)" % (path, os.strerror(errno.EIO),
                                   " (%s)" % cause if cause else "")
        fix = None
    return BatchfsError(msg, filename=path, samples=samples,
                        cause=says if says is not None else cause, fix=fix)


def read_npy(path, expect=None):
    """Read one .npy file into a fresh C-order array (one copy: readinto;
    never a mapping, whose page fault on a failed read is SIGBUS).

    ``expect(header, path)``, if given, may raise to refuse the file before
    its data are read.  Raises BatchfsError for a file that is not what the
    header says, and for a read that fails with EIO (a batch the mount
    failed: naming the file, its bad samples, what the mount says and the
    fix, see batch_error); OSError for other failed reads.
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
    except BatchfsError:
        raise
    except OSError as e:
        if e.errno != errno.EIO:
            raise
        raise batch_error(path) from e
    return arr


def load(path):
    """np.load for a batch file of a batchfs mount: the array (images or
    labels) in a fresh array, or, for a batch the mount failed, a
    BatchfsError naming the file, the bad samples, the cause and the fix
    where np.load gives a bare ``OSError: [Errno 5]``."""
    return read_npy(path)


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
