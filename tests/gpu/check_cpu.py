#!/usr/bin/env python3
"""CPU-side tests of the GPU companion: they run everywhere (CI has no GPU).

GpuLoader(device="cpu") against np.load for every batch, partial last
batches, uint8 and float32, bad folders; the ctypes binding of
libbatchfs_gpu.so without a device; the batchfs-gpu CLI's "no CUDA device"
exit; the DLPack / CUDA array interface plumbing with no device memory.
Run: python3 tests/gpu/check_cpu.py [TEST_NAME...]
"""

import os
import subprocess
import sys
import time

import numpy as np

from _harness import Runner, Skip, build_dir, repo_root
import _mkbatches

import batchfs
from batchfs import _lib

R = Runner()


def test(fn):
    R.run(fn)
    return fn


def has_gpu():
    try:
        n, _ = _lib.device_count()
    except batchfs.BatchfsError:
        return False
    return n > 0


def lib_or_skip():
    try:
        return _lib.load()
    except batchfs.BatchfsError as e:
        raise Skip("no libbatchfs_gpu.so (make gpu needs a CUDA toolkit): "
                   "%s" % str(e)[:80])


def same(ds, got):
    assert len(got) == len(ds), "%d batches, want %d" % (len(got), len(ds))
    for i, ((x, y), (gx, gy)) in enumerate(zip(ds, got)):
        assert gx.dtype == x.dtype and gx.shape == x.shape, \
            "batch %d: %s %s vs %s %s" % (i, gx.dtype, gx.shape, x.dtype,
                                          x.shape)
        assert np.array_equal(gx, x), "batch %d images differ" % i
        assert gy.dtype == np.int64 and np.array_equal(gy, y), \
            "batch %d labels differ" % i


@test
def cpu_loader_equals_np_load_uint8_with_partial_last_batch(tmp):
    _mkbatches.make(tmp, batches=5, batch=8, height=12, width=10, last=3)
    ds = [(np.load(os.path.join(tmp, "batch-%06d.npy" % i)),
           np.load(os.path.join(tmp, "batch-%06d.labels.npy" % i)))
          for i in range(5)]
    got = list(batchfs.GpuLoader(tmp, device="cpu"))
    same(ds, got)
    assert got[-1][0].shape[0] == 3
    assert len(batchfs.GpuLoader(tmp, device="cpu")) == 5


@test
def cpu_loader_equals_np_load_float32(tmp):
    ds = _mkbatches.make(tmp, batches=4, batch=6, height=9, dtype="float32",
                         last=1)
    same(ds, list(batchfs.GpuLoader(tmp, device="cpu", depth=2)))


@test
def cpu_loader_without_prefetch_and_with_passes(tmp):
    ds = _mkbatches.make(tmp, batches=3, batch=4, height=5)
    same(ds, list(batchfs.GpuLoader(tmp, device="cpu", depth=0)))
    same(ds + ds, list(batchfs.GpuLoader(tmp, device="cpu", passes=2)))
    ld = batchfs.GpuLoader(tmp, device="cpu")
    same(ds, list(ld))
    same(ds, list(ld))  # each iter() starts again


@test
def cpu_loader_orders_by_name_and_ignores_strays(tmp):
    ds = _mkbatches.make(tmp, batches=12, batch=2, height=3)
    open(os.path.join(tmp, "dataset.json"), "w").write("{}")
    open(os.path.join(tmp, "notes.npy"), "w").close()
    os.mkdir(os.path.join(tmp, "epoch-0001"))
    same(ds, list(batchfs.GpuLoader(tmp, device="cpu")))


@test
def cpu_loader_yields_fresh_arrays_that_stay_valid(tmp):
    ds = _mkbatches.make(tmp, batches=4, batch=3, height=4)
    kept = [x for x, _ in batchfs.GpuLoader(tmp, device="cpu", depth=2)]
    for (x, _), k in zip(ds, kept):
        assert np.array_equal(x, k)
    assert all(k.flags.c_contiguous and k.flags.writeable for k in kept)


@test
def cpu_normalize_matches_float32_reference(tmp):
    ds = _mkbatches.make(tmp, batches=2, batch=3, height=4, last=2)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    got = list(batchfs.GpuLoader(tmp, device="cpu", normalize=True,
                                 mean=mean, std=std, layout="NCHW"))
    for (x, _), (g, _) in zip(ds, got):
        ref = (x.astype(np.float32) / np.float32(255) -
               np.float32(mean)) / np.float32(std)
        assert g.dtype == np.float32
        assert np.array_equal(g, ref.transpose(0, 3, 1, 2))
    got = list(batchfs.GpuLoader(tmp, device="cpu", normalize=True))
    assert np.array_equal(got[0][0], ds[0][0].astype(np.float32) /
                          np.float32(255))


@test
def cpu_loader_rejects_bad_folders(tmp):
    def raises(cls, fn, text=None):
        try:
            fn()
        except cls as e:
            if text:
                assert text in str(e), "%r lacks %r" % (str(e), text)
            return
        raise AssertionError("no %s" % cls.__name__)

    L = batchfs.GpuLoader
    raises(FileNotFoundError, lambda: L(os.path.join(tmp, "nope"), device="cpu"))
    open(os.path.join(tmp, "file"), "w").close()
    raises(NotADirectoryError, lambda: L(os.path.join(tmp, "file"),
                                         device="cpu"))
    os.mkdir(os.path.join(tmp, "empty"))
    raises(batchfs.BatchfsError, lambda: L(os.path.join(tmp, "empty"),
                                           device="cpu"), "no batch")
    d = os.path.join(tmp, "nolabels")
    _mkbatches.make(d, batches=2)
    os.unlink(os.path.join(d, "batch-000001.labels.npy"))
    raises(batchfs.BatchfsError, lambda: L(d, device="cpu"),
           "batch-000001.labels.npy")
    raises(ValueError, lambda: L(tmp, device="cpu", layout="NCHW"))
    raises(ValueError, lambda: L(tmp, device="cpu", mean=(0,), std=(1,)))


def bad_file_case(tmp, mutate, text, depth):
    d = os.path.join(tmp, "bad%d" % depth)
    ds = _mkbatches.make(d, batches=4, batch=4, height=5)
    mutate(os.path.join(d, "batch-000002.npy"),
           os.path.join(d, "batch-000002.labels.npy"))
    got = []
    try:
        for x, y in batchfs.GpuLoader(d, device="cpu", depth=depth):
            got.append((x, y))
    except batchfs.BatchfsError as e:
        assert text in str(e), "%r lacks %r" % (str(e), text)
        assert "batch-000002" in str(e)
        same(ds[:2], got)  # the good batches before it came first
        return
    raise AssertionError("no error for %s" % text)


@test
def cpu_loader_reports_corrupt_truncated_and_wrong_files_in_order(tmp):
    def corrupt(img, lbl):
        with open(img, "r+b") as f:
            f.write(b"XXXX")

    def truncate(img, lbl):
        os.truncate(img, os.path.getsize(img) - 1)

    def trailing(img, lbl):
        with open(img, "ab") as f:
            f.write(b"\0")

    def float64(img, lbl):
        np.save(img, np.zeros((4, 5, 5, 3)))

    def labels_len(img, lbl):
        np.save(lbl, np.zeros((3,), np.int64))

    def fortran(img, lbl):
        np.save(img, np.asfortranarray(np.zeros((4, 5, 5, 3), np.uint8)))

    for depth in (0, 3):
        bad_file_case(tmp, corrupt, "bad magic", depth)
        bad_file_case(tmp, truncate, "early", depth)
        bad_file_case(tmp, trailing, "after the array", depth)
        bad_file_case(tmp, float64, "<f8", depth)
        bad_file_case(tmp, labels_len, "labels", depth)
        bad_file_case(tmp, fortran, "fortran", depth)


@test
def cpu_loader_reads_at_a_reasonable_speed(tmp):
    _mkbatches.make_fast(tmp, batches=8, batch=64, size=224)  # 77 MB
    mb = sum(os.path.getsize(os.path.join(tmp, n)) for n in os.listdir(tmp))
    list(batchfs.GpuLoader(tmp, device="cpu"))  # warm the page cache
    t = time.perf_counter()
    n = sum(1 for _ in batchfs.GpuLoader(tmp, device="cpu"))
    dt = time.perf_counter() - t
    print("# cpu mode: %d batches, %.0f MB in %.3f s: %.2f GB/s" %
          (n, mb / 1e6, dt, mb / dt / 1e9))
    t = time.perf_counter()
    for i in range(8):
        np.load(os.path.join(tmp, "batch-%06d.npy" % i))
        np.load(os.path.join(tmp, "batch-%06d.labels.npy" % i))
    dn = time.perf_counter() - t
    print("# np.load of the same files: %.3f s" % dn)
    assert dt < 3 * dn + 0.5, "cpu mode %.3fs vs np.load %.3fs" % (dt, dn)


# ---- the C library and the CLI, without a device ------------------------

@test
def library_loads_with_matching_abi_and_names_its_errors(tmp):
    lib_or_skip()
    assert _lib.strerror(_lib.E_NODEV) == "no CUDA device"
    assert _lib.strerror(_lib.E_END) == "end of batches"
    assert _lib.strerror(-10000 + 7) == "unrecognized format"  # BFS_E_FORMAT
    assert _lib.strerror(-2) == "No such file or directory"
    syms = subprocess.run(["nm", "-D", "--defined-only",
                           _lib.find_library()], capture_output=True,
                          text=True)
    if syms.returncode == 0:
        names = [ln.split()[-1] for ln in syms.stdout.splitlines()]
        assert names and all(n.startswith("bfs_gpu_") for n in names), \
            "exports beyond bfs_gpu_*: %s" % [n for n in names
                                              if not n.startswith("bfs_gpu_")]


def c_open(path, **opts):
    """bfs_gpu_open through ctypes: (code, errmsg); closes on success."""
    import ctypes
    lib = _lib.load()
    o = _lib.Opts()
    lib.bfs_gpu_opts_init(ctypes.byref(o))
    for k, v in opts.items():
        setattr(o, k, v)
    h = ctypes.c_void_p()
    buf = ctypes.create_string_buffer(_lib.ERRMSG_MAX)
    err = lib.bfs_gpu_open(path.encode(), ctypes.byref(o), ctypes.byref(h),
                           buf)
    if err == 0:
        lib.bfs_gpu_close(h)
    else:
        assert not h.value, "handle set on failure"
    return err, buf.value.decode()


@test
def library_open_checks_the_folder_before_the_device(tmp):
    lib_or_skip()
    err, msg = c_open(os.path.join(tmp, "nope"))
    assert err == -2 and "nope" in msg, (err, msg)
    err, msg = c_open(tmp)
    assert err == -10000 + 8 and "no batch" in msg, (err, msg)  # BFS_E_EMPTY
    _mkbatches.make(tmp, batches=2)
    os.unlink(os.path.join(tmp, "batch-000001.labels.npy"))
    err, msg = c_open(tmp)
    assert err == -2 and "batch-000001.labels.npy" in msg, (err, msg)
    for bad in ({"depth": 0}, {"depth": 65}, {"readers": 4, "depth": 3},
                {"passes": 0}, {"io": 7}, {"flags": 0x2}, {"flags": 0x80}):
        err, msg = c_open(tmp, **bad)
        assert err == -22 and msg, (bad, err, msg)
    # the Python binding turns codes into exceptions with the detail
    np.save(os.path.join(tmp, "batch-000001.labels.npy"),
            np.zeros((8,), np.int64))
    try:
        next(iter(batchfs.GpuLoader(tmp, device=0, depth=0, output="array")))
    except batchfs.BatchfsError as e:
        assert e.code == -22 and "depth 0" in str(e), (e.code, str(e))
    else:
        raise AssertionError("depth 0 accepted")


@test
def library_open_without_a_device_says_no_cuda_device(tmp):
    lib_or_skip()
    if has_gpu():
        raise Skip("this machine has a GPU")
    _mkbatches.make(tmp, batches=2)
    try:
        next(iter(batchfs.GpuLoader(tmp, device=0, output="array")))
    except batchfs.BatchfsError as e:
        assert e.code == _lib.E_NODEV, e.code
        assert "no CUDA device" in str(e)
        return
    raise AssertionError("opened without a device")


@test
def cli_without_a_device_exits_non_zero_saying_no_cuda_device(tmp):
    cli = os.path.join(build_dir(), "batchfs-gpu")
    if not os.path.exists(cli):
        raise Skip("no %s (make gpu needs a CUDA toolkit)" % cli)
    _mkbatches.make(tmp, batches=2)
    r = subprocess.run([cli, "bench", tmp], capture_output=True, text=True,
                       timeout=120)
    if has_gpu():
        assert r.returncode == 0, r.stderr
        assert "RESULT " in r.stdout
        return
    assert r.returncode != 0
    assert "no CUDA device" in r.stderr, r.stderr
    assert r.stdout == ""
    r = subprocess.run([cli], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr
    r = subprocess.run([cli, "bench", tmp, "--depth", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "bad argument" in r.stderr


@test
def device_array_exposes_cuda_array_interface_and_dlpack(tmp):
    lib_or_skip()
    import ctypes
    from batchfs import loader as L
    a = batchfs.DeviceArray(0x1000, (2, 3, 4, 3), _lib.UINT8, 0, 0, None)
    cai = a.__cuda_array_interface__
    assert cai["shape"] == (2, 3, 4, 3) and cai["typestr"] == "|u1"
    assert cai["data"] == (0x1000, False) and cai["version"] == 3
    assert cai["stream"] == 1 and a.nbytes == 72
    assert a.__dlpack_device__() == (2, 0)
    n0 = len(L._live)
    cap = a.__dlpack__(stream=None)
    assert len(L._live) == n0 + 1
    ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
    ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
    assert ctypes.pythonapi.PyCapsule_GetName(cap) == b"dltensor"
    addr = L._pyapi.PyCapsule_GetPointer(ctypes.c_void_p(id(cap)),
                                         b"dltensor")
    m = L._DLManagedTensor.from_address(addr)
    assert m.dl_tensor.data == 0x1000 and m.dl_tensor.ndim == 4
    assert [m.dl_tensor.shape[i] for i in range(4)] == [2, 3, 4, 3]
    assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == (1, 8)
    del cap, m  # unconsumed: the capsule's destructor frees it
    assert len(L._live) == n0


@test
def package_installs_with_pip(tmp):
    try:
        import setuptools
    except ImportError:
        raise Skip("setuptools missing: pip would need the network")
    # setuptools before 70.1 builds wheels only with the wheel package
    st_version = tuple(int(x) for x in
                       setuptools.__version__.split(".")[:2] if x.isdigit())
    if st_version < (70, 1):
        try:
            import wheel  # noqa: F401
        except ImportError:
            raise Skip("setuptools %s without the wheel package: pip would "
                       "need the network" % setuptools.__version__)
    import shutil
    tgt = os.path.join(tmp, "site")
    src = os.path.join(tmp, "src")  # setuptools writes build/ into it
    shutil.copytree(os.path.join(repo_root(), "tools", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build",
                                                  "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", tgt, src],
                       capture_output=True, text=True, timeout=300,
                       cwd=tmp)
    if r.returncode != 0 and "No module named pip" in r.stderr:
        raise Skip("no pip")
    assert r.returncode == 0, r.stderr[-500:]
    d = os.path.join(tmp, "data")
    _mkbatches.make(d, batches=2, batch=2, height=3)
    code = ("import batchfs,sys; assert batchfs.__file__.startswith(%r); "
            "print(sum(1 for _ in batchfs.GpuLoader(%r, device='cpu')))"
            % (tgt, d))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=tgt),
                       cwd=tmp)
    assert r.returncode == 0 and r.stdout.strip() == "2", r.stderr[-500:]


R.finish()
