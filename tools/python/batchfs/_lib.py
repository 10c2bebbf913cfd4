"""ctypes binding of libbatchfs_gpu.so (tools/gpu/batchfs_gpu.h).

The structs, enums and flags below are the binding's copy of the header's
ABI; ``load()`` checks the ABI version and the struct sizes against
``bfs_gpu_abi`` so a mismatch fails loudly instead of corrupting memory.
Error codes are not copied: ``E_END``, ``E_NODEV``, ``E_FORMAT``, ... are
looked up by name in the library's own table (``bfs_gpu_codes``) on first
use, and ``version()`` is the library's ``bfs_gpu_version``.
"""

import ctypes
import os

from . import _where
from ._npy import BatchfsError, MAX_CHANNELS

ABI_VERSION = 2
ERRMSG_MAX = 512

FLOAT32, UINT8, INT64, FLOAT16 = 0, 1, 2, 3
IO_PREAD, IO_MMAP = 0, 1
NORMALIZE, NCHW, TIMING, NHWC = 0x1, 0x2, 0x4, 0x8
FILES_NHWC, FILES_NCHW = 0x10, 0x20
NORM_DST_NCHW, NORM_SRC_NCHW = 0x1, 0x2


class Opts(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_int),
        ("depth", ctypes.c_int),
        ("readers", ctypes.c_int),
        ("passes", ctypes.c_int),
        ("io", ctypes.c_int),
        ("flags", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        ("mean", ctypes.c_float * MAX_CHANNELS),
        ("std", ctypes.c_float * MAX_CHANNELS),
    ]


class Code(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("name", ctypes.c_char_p)]


class Batch(ctypes.Structure):
    _fields_ = [
        ("seq", ctypes.c_int64),
        ("index", ctypes.c_int64),
        ("images", ctypes.c_void_p),
        ("labels", ctypes.c_void_p),
        ("shape", ctypes.c_int64 * 4),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("labels_len", ctypes.c_int64),
        ("images_bytes", ctypes.c_uint64),
        ("labels_bytes", ctypes.c_uint64),
        ("upload_bytes", ctypes.c_uint64),
        ("ready", ctypes.c_void_p),
        ("copy_start", ctypes.c_void_p),
        ("copy_end", ctypes.c_void_p),
        ("path", ctypes.c_char_p),
        ("slot", ctypes.c_int32),
        ("nchw", ctypes.c_int32),
    ]


def _candidates():
    return _where.library_candidates()


_lib = None


def find_library():
    """Path of the library that load() would use, or None."""
    for p in _candidates():
        if os.sep not in p or os.path.exists(p):
            return p
    return None


def load():
    """Load and type the library once; raise BatchfsError if not found."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    lib = None
    for p in _candidates():
        if os.sep in p and not os.path.exists(p):
            tried.append(p)
            continue
        try:
            lib = ctypes.CDLL(p)
            break
        except OSError as e:
            tried.append("%s (%s)" % (p, e))
    if lib is None:
        raise BatchfsError("libbatchfs_gpu.so not found (build it with "
                           "`make gpu`, or set BATCHFS_GPU_LIB); tried: " +
                           ", ".join(tried))
    c_int, c_void_p, c_char_p = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
    sig = {
        "bfs_gpu_opts_init": (None, [ctypes.POINTER(Opts)]),
        "bfs_gpu_open": (c_int, [c_char_p, ctypes.POINTER(Opts),
                                 ctypes.POINTER(c_void_p), c_char_p]),
        "bfs_gpu_next": (c_int, [c_void_p, ctypes.POINTER(Batch)]),
        "bfs_gpu_release": (c_int, [c_void_p, ctypes.POINTER(Batch)]),
        "bfs_gpu_close": (None, [c_void_p]),
        "bfs_gpu_count": (ctypes.c_int64, [c_void_p]),
        "bfs_gpu_errmsg": (c_char_p, [c_void_p]),
        "bfs_gpu_strerror": (c_char_p, [c_int]),
        "bfs_gpu_device_count": (c_int, [ctypes.POINTER(c_int), c_char_p]),
        "bfs_gpu_normalize": (c_int, [c_void_p, c_int, c_void_p,
                                      ctypes.c_int64, ctypes.c_int64,
                                      ctypes.c_int64, ctypes.c_int64,
                                      c_void_p, c_void_p, c_int, c_void_p]),
        "bfs_gpu_stream_wait": (c_int, [c_void_p, c_void_p]),
        "bfs_gpu_abi": (c_int, [ctypes.POINTER(ctypes.c_size_t),
                                ctypes.POINTER(ctypes.c_size_t)]),
        "bfs_gpu_codes": (ctypes.POINTER(Code),
                          [ctypes.POINTER(ctypes.c_size_t)]),
        "bfs_gpu_version": (c_char_p, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name, None)
        if fn is None:  # an older library
            raise BatchfsError("libbatchfs_gpu.so lacks %s: it does not "
                               "match this package (ABI %d); rebuild it "
                               "with `make gpu`" % (name, ABI_VERSION))
        fn.restype = res
        fn.argtypes = args
    osz, bsz = ctypes.c_size_t(), ctypes.c_size_t()
    ver = lib.bfs_gpu_abi(ctypes.byref(osz), ctypes.byref(bsz))
    if (ver != ABI_VERSION or osz.value != ctypes.sizeof(Opts) or
            bsz.value != ctypes.sizeof(Batch)):
        raise BatchfsError(
            "libbatchfs_gpu.so ABI %d (opts %d, batch %d bytes) does not "
            "match this package (ABI %d, %d, %d)" %
            (ver, osz.value, bsz.value, ABI_VERSION, ctypes.sizeof(Opts),
             ctypes.sizeof(Batch)))
    _lib = lib
    return lib


_codes = None


def codes():
    """{name: code} of every code the library defines itself
    ("BFS_E_FORMAT", "BFS_GPU_E_END", ...), from bfs_gpu_codes."""
    global _codes
    if _codes is None:
        n = ctypes.c_size_t()
        t = load().bfs_gpu_codes(ctypes.byref(n))
        _codes = {t[i].name.decode(): t[i].code for i in range(n.value)}
    return _codes


def __getattr__(name):
    """E_END, E_NODEV, E_FORMAT, ...: BFS_GPU_E_* or BFS_E_* of the
    library's table (loads the library; BatchfsError without it)."""
    if name.startswith("E_"):
        c = codes()
        for full in ("BFS_GPU_" + name, "BFS_" + name):
            if full in c:
                return c[full]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def version():
    """The batchfs release the library was built from (bfs_gpu_version)."""
    return load().bfs_gpu_version().decode()


def strerror(code):
    return load().bfs_gpu_strerror(code).decode()


def error(code, detail):
    """A BatchfsError (or OSError subclass for errno codes) for code."""
    text = strerror(code)
    msg = "%s: %s" % (text, detail) if detail else text
    if -4096 < code < 0:
        import errno as _errno
        cls = {_errno.ENOENT: FileNotFoundError,
               _errno.ENOTDIR: NotADirectoryError,
               _errno.EACCES: PermissionError}.get(-code)
        if cls is not None:
            return cls(-code, msg)
    return BatchfsError(msg, code)


def device_count():
    """(count, reason): count 0 and the runtime's reason when no GPU."""
    lib = load()
    n = ctypes.c_int()
    buf = ctypes.create_string_buffer(ERRMSG_MAX)
    err = lib.bfs_gpu_device_count(ctypes.byref(n), buf)
    return (0, buf.value.decode(errors="replace")) if err else (n.value, "")
