"""GpuLoader: batches of a batchfs folder as GPU tensors (or NumPy arrays).

GPU mode drives libbatchfs_gpu.so through ctypes: a ring of ``depth`` pinned
and device buffers, filled by reader threads that pread() each batch file
into pinned memory and upload it with cudaMemcpyAsync on the library's own
stream.  Each yielded batch is already queued behind its upload on the
consumer stream (PyTorch's current stream when iteration starts), and the
host never waits for the copy.

Lifetime: a yielded batch is valid until the next iteration step (or the
end of the loop, or close()).  Its memory is then reused for a later batch,
once the work queued on it has completed.  Keep a batch longer with
``.clone()`` (torch) or ``.copy()`` (NumPy).  In CPU mode every batch is a
fresh NumPy array that stays valid.
"""

import ctypes
import os
import queue
import shutil
import tempfile
import threading

import numpy as np

from . import _lib
from ._npy import BatchfsError, LAYOUTS, image_layout, list_batches, \
    read_batch

__all__ = ["GpuLoader", "DeviceArray"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_TYPESTR = {_lib.UINT8: "|u1", _lib.FLOAT16: "<f2", _lib.FLOAT32: "<f4",
            _lib.INT64: "<i8"}
# DLPack: (type code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2
_DLTYPE = {_lib.UINT8: (1, 8), _lib.FLOAT16: (2, 16), _lib.FLOAT32: (2, 32),
           _lib.INT64: (0, 64)}
_KDLCUDA = 2


# ---- DLPack (legacy, unversioned "dltensor" capsules) -------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor),
                             ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]

# Managed tensors handed out and not yet deleted, by address.
_live = {}
_live_lock = threading.Lock()


@_DELETER
def _dl_deleter(addr):
    with _live_lock:
        _live.pop(addr, None)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                 _CAPSULE_DESTRUCTOR]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # A capsule nobody consumed still owns its managed tensor.
    if _pyapi.PyCapsule_IsValid(capsule, b"dltensor"):
        addr = _pyapi.PyCapsule_GetPointer(capsule, b"dltensor")
        _dl_deleter(addr)


class DeviceArray:
    """A view of device memory owned by a GpuLoader slot.

    Exposes ``__cuda_array_interface__`` (v3) and ``__dlpack__`` /
    ``__dlpack_device__``, so torch.from_dlpack, CuPy and JAX can take it
    without a copy.  Valid until the loader moves on (see module doc).
    """

    __slots__ = ("ptr", "shape", "dtype_code", "device", "stream", "_ready",
                 "__weakref__")

    def __init__(self, ptr, shape, dtype_code, device, stream, ready):
        self.ptr = ptr
        self.shape = tuple(int(x) for x in shape)
        self.dtype_code = dtype_code
        self.device = device
        self.stream = stream  # consumer stream (int), already synced
        self._ready = ready   # cudaEvent_t of the upload

    @property
    def dtype(self):
        return np.dtype(_TYPESTR[self.dtype_code])

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "typestr": _TYPESTR[self.dtype_code],
            "data": (self.ptr or 0, False),
            "strides": None,
            "version": 3,
            # Data are ready for work on this stream (1: legacy default).
            "stream": self.stream if self.stream else 1,
        }

    def __dlpack_device__(self):
        return (_KDLCUDA, self.device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None,
                   copy=None):
        if copy:
            raise BufferError("batchfs DeviceArray cannot copy in __dlpack__")
        if stream is not None and stream != -1 and stream != self.stream and \
                not (stream == 1 and not self.stream):
            # The consumer's stream waits on the upload, on the GPU.
            err = _lib.load().bfs_gpu_stream_wait(stream, self._ready)
            if err:
                raise _lib.error(err, "cudaStreamWaitEvent")
        m = _DLManagedTensor()
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        code, bits = _DLTYPE[self.dtype_code]
        m.dl_tensor.data = self.ptr
        m.dl_tensor.device = _DLDevice(_KDLCUDA, self.device)
        m.dl_tensor.ndim = len(self.shape)
        m.dl_tensor.dtype = _DLDataType(code, bits, 1)
        m.dl_tensor.shape = shape
        m.dl_tensor.strides = None
        m.dl_tensor.byte_offset = 0
        m.manager_ctx = None
        m.deleter = _dl_deleter
        addr = ctypes.addressof(m)
        with _live_lock:
            _live[addr] = (m, shape)
        return _pyapi.PyCapsule_New(addr, b"dltensor", _capsule_destructor)

    def __repr__(self):
        return "DeviceArray(0x%x, shape=%r, dtype=%s, cuda:%d)" % (
            self.ptr or 0, self.shape, self.dtype, self.device)


# ---- the loader ---------------------------------------------------------

def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


class GpuLoader:
    """Iterate over the batches of ``epoch_dir`` as (images, labels).

    epoch_dir   an epoch folder of a batchfs mount, or any folder of
                batch-NNNNNN.npy + batch-NNNNNN.labels.npy files: uint8,
                float16 or float32, (B,H,W,C) or (B,C,H,W)
    device      CUDA ordinal (int) or "cpu": NumPy arrays, no CUDA at all
    depth       ring slots (pinned + device buffers) in GPU mode, or batches
                read ahead by a background thread in CPU mode (0: none)
    normalize   deliver float32 (x/255 - mean)/std for uint8 files,
                (x - mean)/std for float16 (widened exactly) and float32
                ones; without mean/std just x/255 or x ("imagenet" for the
                usual constants)
    layout      with normalize: "NHWC" or "NCHW" output; None (the default)
                keeps the files' layout.  Without normalize batches come as
                stored, and layout must be None.
    files_layout  "NHWC" or "NCHW": how the files are laid out; None reads
                it from each file's shape (NHWC when the last dimension is
                1..4, else NCHW).  Needed only for NCHW files of width 1..4.
    readers     reader threads in GPU mode; 0: min(depth, 4)
    io          "pread" (into pinned memory) or "mmap" (mmap +
                cudaHostRegister)
    passes      passes over the folder per iteration (-1: forever)
    output      "torch" (default when torch imports), "array" (DeviceArray
                with __cuda_array_interface__ / __dlpack__)
    stream      consumer stream (cudaStream_t as int) in GPU mode; default
                torch.cuda.current_stream() when torch is present, else
                the legacy default stream
    start       skip the folder's first `start` batches (a resumed epoch):
                each pass is batches start, start+1, ...  The GPU library
                serves whole folders, so in GPU mode it is given a private
                folder of links to those batches, removed at close()

    Yields (images, labels), labels (B,) int64 and images:

        file      without normalize     with normalize
        uint8     uint8, as stored      float32 x/255, (x/255-mean)/std
        float16   float16, as stored    float32 x, (x-mean)/std
        float32   float32, as stored    float32 x, (x-mean)/std

    "as stored" keeps the file's layout; normalize writes ``layout``, or
    the file's.  CPU and GPU mode give the same bits.  See the module doc
    for their lifetime.  Each ``iter()`` is one pass (``passes``) from the
    first batch.
    """

    def __init__(self, epoch_dir, device=0, depth=3, normalize=False,
                 mean=None, std=None, layout=None, readers=0, io="pread",
                 passes=1, output=None, stream=None, files_layout=None,
                 start=0):
        self.epoch_dir = str(epoch_dir)
        self.cpu = isinstance(device, str) and device.lower() == "cpu"
        if not self.cpu:
            if isinstance(device, str) and device.startswith("cuda"):
                device = int(device.split(":")[1]) if ":" in device else 0
            device = int(device)
        self.device = device
        self.depth = int(depth)
        self.normalize = bool(normalize)
        if normalize == "imagenet":
            mean, std = IMAGENET_MEAN, IMAGENET_STD
        self.mean = None if mean is None else tuple(float(x) for x in mean)
        self.std = None if std is None else tuple(float(x) for x in std)
        if (self.mean is None) != (self.std is None):
            raise ValueError("give both mean and std, or neither")
        if self.mean is not None and not self.normalize:
            raise ValueError("mean/std need normalize=True")
        if self.mean is not None and (
                len(self.mean) != len(self.std) or
                not 1 <= len(self.mean) <= _lib.MAX_CHANNELS or
                0.0 in self.std):
            raise ValueError("mean/std: 1..4 values each, std non-zero")
        if layout is not None:
            layout = layout.upper()
            if layout not in LAYOUTS:
                raise ValueError("layout must be 'NHWC', 'NCHW' or None")
            if not self.normalize:
                raise ValueError("layout=%r needs normalize=True (without "
                                 "it batches come as stored)" % layout)
        self.layout = layout
        if files_layout is not None:
            files_layout = files_layout.upper()
            if files_layout not in LAYOUTS:
                raise ValueError("files_layout must be 'NHWC', 'NCHW' or "
                                 "None")
        self.files_layout = files_layout
        self.readers = int(readers)
        if io not in ("pread", "mmap"):
            raise ValueError("io must be 'pread' or 'mmap'")
        self.io = io
        self.passes = int(passes)
        if self.passes == 0 or self.passes < -1:
            raise ValueError("passes must be >= 1 or -1")
        self._torch = None if self.cpu else _torch_or_none()
        if output is None:
            output = "torch" if self._torch is not None else "array"
        if output not in ("torch", "array"):
            raise ValueError("output must be 'torch' or 'array'")
        if output == "torch" and self._torch is None and not self.cpu:
            raise BatchfsError("output='torch' but torch is not installed")
        self.output = output
        self.stream = stream
        self._files = list_batches(self.epoch_dir)  # folder errors now
        self.start = int(start)
        if not 0 <= self.start <= len(self._files):
            raise ValueError("start %d: the folder has %d batches" %
                             (self.start, len(self._files)))
        self._files = self._files[self.start:]
        self._links = None  # GPU mode with start: the folder of links
        self._handle = None
        self._held = None

    def __len__(self):
        if self.passes < 0:
            raise TypeError("an endless GpuLoader (passes=-1) has no len()")
        return len(self._files) * self.passes

    def __iter__(self):
        if self.cpu:
            return self._iter_cpu()
        return self._iter_gpu()

    def close(self):
        """Release the held batch and free the GPU ring.  Idempotent."""
        if self._handle is not None:
            lib = _lib.load()
            if self._held is not None:
                lib.bfs_gpu_release(self._handle, ctypes.byref(self._held))
                self._held = None
            lib.bfs_gpu_close(self._handle)
            self._handle = None
        if self._links is not None:
            shutil.rmtree(self._links, ignore_errors=True)
            self._links = None

    def _gpu_folder(self):
        """The folder the library reads: epoch_dir, or with start a
        private folder of links to batches start, start+1, ... under their
        own names (so the order stays)."""
        if not self.start:
            return self.epoch_dir
        if self._links is None:
            self._links = link_folder(self._files)
        return self._links

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- CPU: NumPy only --------------------------------------------------

    def _cpu_post(self, images, labels):
        if not self.normalize:
            return images, labels
        # read_batch accepted the shape, so it has a layout
        src = image_layout(images.shape, self.files_layout)
        x = images.astype(np.float32)
        if images.dtype == np.uint8:
            x /= np.float32(255)
        if self.mean is not None:
            c = x.shape[3] if src == "NHWC" else x.shape[1]
            # channels past the given values: mean 0, std 1, as in GPU mode
            mean = (self.mean + (0.0,) * c)[:c]
            std = (self.std + (1.0,) * c)[:c]
            shape = (c,) if src == "NHWC" else (c, 1, 1)
            x -= np.asarray(mean, dtype=np.float32).reshape(shape)
            x /= np.asarray(std, dtype=np.float32).reshape(shape)
        dst = self.layout or src
        if dst != src:
            x = np.ascontiguousarray(x.transpose(
                (0, 3, 1, 2) if dst == "NCHW" else (0, 2, 3, 1)))
        return x, labels

    def _cpu_order(self):
        p = 0
        while self.passes < 0 or p < self.passes:
            for pair in self._files:
                yield pair
            p += 1

    def _iter_cpu(self):
        if self.depth <= 0:
            for img, lbl in self._cpu_order():
                yield self._cpu_post(*read_batch(img, lbl,
                                                 self.files_layout))
            return
        # A reader thread keeps up to `depth` batches ready; file reads
        # release the GIL, so they overlap the consumer's work.
        q = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def reader():
            try:
                for img, lbl in self._cpu_order():
                    item = ("ok", read_batch(img, lbl, self.files_layout))
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            pass
                    if stop.is_set():
                        return
                item = ("end", None)
            except BaseException as e:  # handed to the consumer
                item = ("err", e)
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return
                except queue.Full:
                    pass

        t = threading.Thread(target=reader, name="batchfs-cpu-reader",
                             daemon=True)
        t.start()
        try:
            while True:
                kind, val = q.get()
                if kind == "end":
                    return
                if kind == "err":
                    raise val
                yield self._cpu_post(*val)
        finally:
            stop.set()
            t.join()

    # -- GPU: libbatchfs_gpu.so -------------------------------------------

    def _consumer_stream(self):
        if self.stream is not None:
            return int(self.stream)
        # torch without a usable CUDA device (no driver) raises here: the
        # library then says what is wrong, after checking the folder
        if self._torch is not None and self._torch.cuda.is_available():
            torch = self._torch
            return int(torch.cuda.current_stream(self.device).cuda_stream)
        return 0

    def _open(self):
        lib = _lib.load()
        o = _lib.Opts()
        lib.bfs_gpu_opts_init(ctypes.byref(o))
        o.device = self.device
        o.depth = self.depth
        o.readers = self.readers
        o.passes = self.passes
        o.io = _lib.IO_MMAP if self.io == "mmap" else _lib.IO_PREAD
        o.stream = self._consumer_stream() or None
        if self.files_layout is not None:
            o.flags |= (_lib.FILES_NCHW if self.files_layout == "NCHW"
                        else _lib.FILES_NHWC)
        if self.normalize:
            o.flags |= _lib.NORMALIZE
            if self.layout is not None:
                o.flags |= _lib.NCHW if self.layout == "NCHW" else _lib.NHWC
            if self.mean is not None:
                for i, (m, s) in enumerate(zip(self.mean, self.std)):
                    o.mean[i], o.std[i] = m, s
        h = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(_lib.ERRMSG_MAX)
        err = lib.bfs_gpu_open(self._gpu_folder().encode(), ctypes.byref(o),
                               ctypes.byref(h), buf)
        if err:
            raise _lib.error(err, buf.value.decode(errors="replace"))
        self._handle = h
        self._stream_int = o.stream or 0

    def _wrap(self, ptr, shape, dtype, ready):
        a = DeviceArray(ptr, shape, dtype, self.device, self._stream_int,
                        ready)
        if self.output != "torch":
            return a
        torch = self._torch
        try:
            return torch.from_dlpack(a)
        except Exception:  # older torch: the CUDA array interface
            return torch.as_tensor(a, device="cuda:%d" % self.device)

    def _iter_gpu(self):
        self.close()  # a new iteration starts from the first batch
        if not self._files:
            return
        self._open()
        lib = _lib.load()
        b = _lib.Batch()
        try:
            while True:
                if self._held is not None:
                    err = lib.bfs_gpu_release(self._handle,
                                              ctypes.byref(self._held))
                    self._held = None
                    if err:
                        raise _lib.error(err, lib.bfs_gpu_errmsg(
                            self._handle).decode(errors="replace"))
                err = lib.bfs_gpu_next(self._handle, ctypes.byref(b))
                if err == _lib.E_END:
                    return
                if err:
                    raise _lib.error(err, lib.bfs_gpu_errmsg(
                        self._handle).decode(errors="replace"))
                self._held = _lib.Batch.from_buffer_copy(b)
                images = self._wrap(b.images, tuple(b.shape[:b.ndim]),
                                    b.dtype, b.ready)
                labels = self._wrap(b.labels, (b.labels_len,), _lib.INT64,
                                    b.ready)
                yield images, labels
        finally:
            self.close()


def link_folder(pairs):
    """A private temporary folder holding a link, under the same name, to
    each (images, labels) file of `pairs`: a folder of batch files that
    holds exactly those batches, in the same order.  The caller removes
    it (shutil.rmtree)."""
    d = tempfile.mkdtemp(prefix="batchfs-batches-")
    try:
        for img, lbl in pairs:
            for p in (img, lbl):
                os.symlink(os.path.abspath(p),
                           os.path.join(d, os.path.basename(p)))
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    return d
