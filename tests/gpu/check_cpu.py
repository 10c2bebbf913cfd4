#!/usr/bin/env python3
"""CPU-side tests of the GPU companion: they run everywhere (CI has no GPU).

GpuLoader(device="cpu") against np.load for every batch, partial last
batches, uint8, float16 and float32, NHWC and NCHW, bad folders; what
normalize gives for every dtype x layout, in the package's CPU mode and in
the library's CUDA-free code (build/tests/gpu/hostref); the ctypes binding
of libbatchfs_gpu.so without a device; one source for error codes and the
version; the batchfs-gpu CLI's "no CUDA device" exit; the DLPack / CUDA
array interface plumbing with no device memory.
Run: python3 tests/gpu/check_cpu.py [TEST_NAME...]
"""

import itertools
import os
import re
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
def cpu_loader_reads_every_batch_and_reports_its_speed(tmp):
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
    # Speed is reported, never asserted: these machines are shared and
    # noisy (make bench compares speeds side by side in one run).
    assert n == 8, n


# ---- every dtype and layout a mount serves ------------------------------

DTYPES = ("uint8", "float16", "float32")
LAYOUTS = ("NHWC", "NCHW")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def folder_of(tmp, dtype, layout, **kw):
    d = os.path.join(tmp, "%s-%s" % (dtype, layout))
    kw.setdefault("batches", 3)
    kw.setdefault("batch", 4)
    kw.setdefault("height", 6)
    kw.setdefault("width", 7)
    kw.setdefault("last", 2)
    return d, _mkbatches.make(d, dtype=dtype, layout=layout, **kw)


def reference(x, stored, normalize, ms, out):
    """What the header's table says a batch x (stored NHWC/NCHW) becomes,
    computed here with NumPy alone, one float32 operation at a time."""
    if not normalize:
        return x
    v = x.astype(np.float32)
    if x.dtype == np.uint8:
        v = v / np.float32(255)
    if ms:
        shape = (3,) if stored == "NHWC" else (3, 1, 1)
        v = (v - np.float32(MEAN).reshape(shape)) / \
            np.float32(STD).reshape(shape)
    out = out or stored
    if out != stored:
        v = v.transpose((0, 3, 1, 2) if out == "NCHW" else (0, 2, 3, 1))
    return np.ascontiguousarray(v)


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        a.tobytes() == b.tobytes()


@test
def cpu_loader_equals_np_load_for_every_dtype_and_layout(tmp):
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        d, ds = folder_of(tmp, dtype, layout)
        assert ds[0][0].dtype == np.dtype(dtype)
        assert ds[0][0].shape == ((4, 6, 7, 3) if layout == "NHWC"
                                  else (4, 3, 6, 7))
        same(ds, list(batchfs.GpuLoader(d, device="cpu")))
        same(ds, list(batchfs.GpuLoader(d, device="cpu", depth=0,
                                        files_layout=layout)))
        for img, _ in batchfs.list_batches(d):
            assert batchfs.image_layout(np.load(img).shape) == layout


@test
def cpu_normalize_gives_float32_in_the_asked_layout_for_every_input(tmp):
    for dtype, stored in itertools.product(DTYPES, LAYOUTS):
        d, ds = folder_of(tmp, dtype, stored)
        for ms, out in itertools.product((False, True),
                                         (None, "NHWC", "NCHW")):
            kw = dict(normalize=True, layout=out)
            if ms:
                kw.update(mean=MEAN, std=STD)
            got = list(batchfs.GpuLoader(d, device="cpu", **kw))
            assert len(got) == len(ds)
            for i, ((x, y), (g, gy)) in enumerate(zip(ds, got)):
                ref = reference(x, stored, True, ms, out)
                assert g.dtype == np.float32 and g.flags.c_contiguous
                assert bits_equal(g, ref), \
                    "%s %s ms=%s out=%s batch %d: %s vs %s" % (
                        dtype, stored, ms, out, i, g.shape, ref.shape)
                assert np.array_equal(gy, y)


@test
def cpu_loader_takes_the_files_layout_where_the_shape_cannot_tell(tmp):
    # NCHW files of width 3: (B,3,H,3) reads as NHWC from the shape alone
    d = os.path.join(tmp, "w3")
    ds = _mkbatches.make(d, batches=2, batch=2, height=5, width=3,
                         layout="NCHW")
    assert batchfs.image_layout(ds[0][0].shape) == "NHWC"
    assert batchfs.image_layout(ds[0][0].shape, "NCHW") == "NCHW"
    for ms in (False, True):
        kw = dict(mean=MEAN, std=STD) if ms else {}
        got = list(batchfs.GpuLoader(d, device="cpu", normalize=True,
                                     layout="NHWC", files_layout="NCHW",
                                     **kw))
        for (x, _), (g, _) in zip(ds, got):
            assert g.shape == (2, 5, 3, 3)
            assert bits_equal(g, reference(x, "NCHW", True, ms, "NHWC"))
    # a files_layout the shape contradicts is a clear error, with the file
    d2 = os.path.join(tmp, "nchw")
    _mkbatches.make(d2, batches=1, batch=2, height=5, width=6,
                    layout="NCHW")
    try:
        list(batchfs.GpuLoader(d2, device="cpu", files_layout="NHWC"))
    except batchfs.BatchfsError as e:
        assert "batch-000000.npy" in str(e) and "(B,H,W,C)" in str(e), e
    else:
        raise AssertionError("NCHW files read as NHWC")
    for bad in (dict(layout="NHWC"), dict(layout="nchw"),
                dict(files_layout="CHW"), dict(normalize=True,
                                               layout="HWC")):
        try:
            batchfs.GpuLoader(d, device="cpu", **bad)
        except ValueError:
            continue
        raise AssertionError("accepted %r" % bad)


@test
def cpu_loader_names_every_bad_header_clearly(tmp):
    d = os.path.join(tmp, "h")
    _mkbatches.make(d, batches=1, batch=2, height=4)
    img = os.path.join(d, "batch-000000.npy")
    good = open(img, "rb").read()
    hdr = good[:128]
    cases = [
        (good[:5], "bad magic"),
        (good[:6] + b"\x07\x00" + good[8:], "unknown .npy version 7.0"),
        (good[:40], "truncated header"),
        (hdr.replace(b"'|u1'", b"'zz9'") + good[128:],
         "malformed header dict"),
        (hdr.replace(b"(2, 4", b"(-2, 4") + good[128:], "negative"),
        (hdr.replace(b"'|u1'", b"'<f8'") + good[128:], "<f8"),
        (hdr.replace(b"(2, 4, 4, 3)", b"(2, 5, 5, 5)") + good[128:],
         "(B,H,W,C) or (B,C,H,W)"),
    ]
    for data, text in cases:
        with open(img, "wb") as f:
            f.write(data)
        try:
            list(batchfs.GpuLoader(d, device="cpu", depth=0))
        except batchfs.BatchfsError as e:
            assert text in str(e) and img in str(e), (text, str(e))
            continue
        raise AssertionError("no error for %s" % text)
    import numpy.lib.format as npformat  # v2.0 and v3.0 headers read too
    x = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    for v in ((2, 0), (3, 0)):
        with open(img, "wb") as f:
            npformat.write_array(f, x, version=v)
        (g, _), = list(batchfs.GpuLoader(d, device="cpu"))
        assert np.array_equal(g, x), v


def hostref(args):
    tool = os.path.join(build_dir(), "tests", "gpu", "hostref")
    if not os.path.exists(tool):
        raise Skip("no %s (make tests builds it)" % tool)
    return subprocess.run([tool] + args, capture_output=True, text=True,
                          timeout=120)


def hostref_flags(normalize, ms, out, files=None):
    f = []
    if normalize:
        f.append("--normalize")
    if out:
        f.append("--" + out.lower())
    if files:
        f.append("--files-" + files.lower())
    if ms:
        f += ["--mean", ",".join(map(str, MEAN)),
              "--std", ",".join(map(str, STD))]
    return f


def check_hostref(d, out_dir, kw, stored, dtype):
    """hostref over d with GpuLoader kwargs kw: its files equal CPU mode
    bit for bit, and its description lines say what CPU mode gives."""
    normalize = kw.get("normalize", False)
    ms = "mean" in kw
    os.makedirs(out_dir)
    r = hostref(hostref_flags(normalize, ms, kw.get("layout"),
                              kw.get("files_layout")) + [d, out_dir])
    assert r.returncode == 0, r.stderr
    cpu = list(batchfs.GpuLoader(d, device="cpu", **kw))
    lines = r.stdout.splitlines()
    assert len(lines) == len(cpu), r.stdout
    for i, ((g, gy), line) in enumerate(zip(cpu, lines)):
        h = np.load(os.path.join(out_dir, "batch-%06d.npy" % i))
        hy = np.load(os.path.join(out_dir, "batch-%06d.labels.npy" % i))
        assert bits_equal(h, g), (kw, i, h.dtype, h.shape, g.dtype,
                                  g.shape)
        assert np.array_equal(hy, gy)
        src = np.load(os.path.join(d, "batch-%06d.npy" % i))
        want = "batch-%06d.npy (%s) %s %s -> (%s) %s %s" % (
            i, ",".join(map(str, src.shape)), dtype, stored,
            ",".join(map(str, g.shape)), g.dtype.name,
            (kw.get("layout") or stored) if normalize else stored)
        assert line == want, (line, want)


@test
def library_cpu_path_equals_np_load_and_cpu_mode_for_every_combination(tmp):
    n = 0
    for dtype, stored in itertools.product(DTYPES, LAYOUTS):
        d, ds = folder_of(tmp, dtype, stored)
        runs = [dict()] + [
            dict(normalize=True, layout=out, **(dict(mean=MEAN, std=STD)
                                                if ms else {}))
            for ms, out in itertools.product((False, True),
                                             (None, "NHWC", "NCHW"))]
        for kw in runs:
            n += 1
            out_dir = os.path.join(tmp, "out%d" % n)
            check_hostref(d, out_dir, kw, stored, dtype)
            if not kw:  # as stored: the file's own array
                for i, (x, _) in enumerate(ds):
                    h = np.load(os.path.join(out_dir, "batch-%06d.npy" % i))
                    assert bits_equal(h, x), (dtype, stored, i)


@test
def library_cpu_path_refuses_what_cpu_mode_refuses(tmp):
    def f64(img, lbl):
        np.save(img, np.zeros((4, 5, 5, 3)))

    def five(img, lbl):
        np.save(img, np.zeros((4, 5, 5, 5), np.uint8))

    def fortran(img, lbl):
        np.save(img, np.asfortranarray(np.zeros((4, 5, 5, 3), np.uint8)))

    def trailing(img, lbl):
        with open(img, "ab") as f:
            f.write(b"\0")

    def labels(img, lbl):
        np.save(lbl, np.zeros((3,), np.int64))

    for k, mutate in enumerate((f64, five, fortran, trailing, labels)):
        d = os.path.join(tmp, "bad%d" % k)
        _mkbatches.make(d, batches=3, batch=4, height=5)
        mutate(os.path.join(d, "batch-000001.npy"),
               os.path.join(d, "batch-000001.labels.npy"))
        out_dir = os.path.join(tmp, "o%d" % k)
        os.makedirs(out_dir)
        r = hostref([d, out_dir])
        assert r.returncode == 1 and "batch-000001" in r.stderr, \
            (mutate.__name__, r.returncode, r.stderr)
        assert "unrecognized format" in r.stderr, r.stderr
        try:
            list(batchfs.GpuLoader(d, device="cpu"))
        except batchfs.BatchfsError as e:
            assert "batch-000001" in str(e)
        else:
            raise AssertionError("cpu mode took %s" % mutate.__name__)


# ---- one source for error codes and the version -------------------------

def header_enum(path, first):
    """{NAME: value} of the C enum in path that starts at `first`."""
    text = open(os.path.join(repo_root(), path)).read()
    body = re.search(r"enum\s*{\s*%s\s*=\s*(-?\d+),(.*?)}" % first, text,
                     re.S)
    value = int(body.group(1))
    out = {first: value}
    for name in re.findall(r"^\s*([A-Z][A-Z0-9_]*)\s*,", body.group(2),
                           re.M):
        value += 1
        out[name] = value
    return out


def header_defines(path):
    text = open(os.path.join(repo_root(), path)).read()
    return {k: v for k, v in re.findall(
        r'^#define\s+(\w+)\s+("[^"]*"|0x[0-9a-fA-F]+|-?\d+)', text, re.M)}


@test
def package_copies_no_code_or_version(tmp):
    ver = header_defines("engine/version.h")["BFS_VERSION"].strip('"')
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", ver), ver
    assert batchfs.__version__ == ver, (batchfs.__version__, ver)
    pkg = os.path.join(repo_root(), "tools", "python")
    # the generated file, when make wrote it, says the same
    gen = os.path.join(pkg, "batchfs", "_version.py")
    if os.path.exists(gen):
        assert '__version__ = "%s"' % ver in open(gen).read(), gen
    # no other copy of the version, or of a library code, in the package
    py = open(os.path.join(pkg, "pyproject.toml")).read()
    project = py[py.index("[project]"):]
    project = project[:project.find("\n[", 1) % len(project)]
    assert 'dynamic = ["version"]' in project and \
        not re.search(r"^version\s*=", project, re.M), \
        "pyproject's [project] has a version"
    assert 'version = {attr = "batchfs._version.__version__"}' in py
    for name in sorted(os.listdir(os.path.join(pkg, "batchfs"))):
        if not name.endswith(".py") or name == "_version.py":
            continue
        src = open(os.path.join(pkg, "batchfs", name)).read()
        assert ver not in src, "%s copies the version %s" % (name, ver)
        lit = re.findall(r"(?<![\w.])-\s*(?:99\d\d|100\d\d|101\d\d)\b", src)
        assert not lit, "%s copies error codes: %s" % (name, lit)
    # the binding's ABI copies (struct layouts, enums, flags) = the header
    h = header_defines("tools/gpu/batchfs_gpu.h")
    for name in ("ABI_VERSION", "ERRMSG_MAX", "MAX_CHANNELS", "NORMALIZE",
                 "NCHW", "TIMING", "NHWC", "FILES_NHWC", "FILES_NCHW",
                 "NORM_DST_NCHW", "NORM_SRC_NCHW"):
        assert getattr(_lib, name) == int(h["BFS_GPU_" + name], 0), name
    text = open(os.path.join(repo_root(), "tools/gpu/batchfs_gpu.h")).read()
    for name in ("FLOAT32", "UINT8", "INT64", "FLOAT16", "IO_PREAD",
                 "IO_MMAP"):
        m = re.search(r"\bBFS_GPU_%s\s*=\s*(\d+)" % name, text)
        assert getattr(_lib, name) == int(m.group(1)), name


@test
def library_codes_and_version_are_the_headers(tmp):
    # the library's table = the two C enums, and the package reads it
    ver = header_defines("engine/version.h")["BFS_VERSION"].strip('"')
    want = header_enum("engine/base/error.h", "BFS_E_FIRST")
    want.update(header_enum("tools/gpu/batchfs_gpu.h", "BFS_GPU_E_FIRST"))
    want = {k: v for k, v in want.items()
            if not k.endswith(("_FIRST", "_LAST"))}
    assert want["BFS_E_FORMAT"] == -10000 + 7 and \
        want["BFS_GPU_E_END"] == -10097, want
    lib_or_skip()
    assert _lib.codes() == want, (_lib.codes(), want)
    for name, code in want.items():
        short = name.replace("BFS_GPU_", "").replace("BFS_", "")
        assert getattr(_lib, short) == code, name
        assert _lib.strerror(code) != "unknown error", name
    assert _lib.version() == ver, (_lib.version(), ver)
    try:
        _lib.E_NO_SUCH_CODE
    except AttributeError:
        pass
    else:
        raise AssertionError("E_NO_SUCH_CODE resolved")


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
def library_open_refuses_layout_flags_that_conflict(tmp):
    lib_or_skip()
    _mkbatches.make(tmp, batches=2)
    N, NCHW, NHWC = _lib.NORMALIZE, _lib.NCHW, _lib.NHWC
    for flags, text in ((NHWC, "NHWC needs NORMALIZE"),
                        (N | NCHW | NHWC, "one output layout"),
                        (_lib.FILES_NHWC | _lib.FILES_NCHW,
                         "one file layout"),
                        (0x40, "unknown flags")):
        err, msg = c_open(tmp, flags=flags)
        assert err == -22 and text in msg, (flags, err, msg)
    # the same through the package, before any device is touched
    for bad in (dict(layout="NCHW"), dict(files_layout="HWC")):
        try:
            batchfs.GpuLoader(tmp, device=0, output="array", **bad)
        except ValueError:
            continue
        raise AssertionError("accepted %r" % bad)


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
    # the installed package's metadata and __version__: engine/version.h's
    ver = header_defines("engine/version.h")["BFS_VERSION"].strip('"')
    code = ("import batchfs, importlib.metadata as m; "
            "print(batchfs.__version__, m.version('batchfs'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=tgt),
                       cwd=tmp)
    assert r.returncode == 0, r.stderr[-500:]
    assert r.stdout.split() == [ver, ver], (r.stdout, ver)


R.finish()
