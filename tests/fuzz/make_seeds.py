"""Write the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

usage: python3 tests/fuzz/make_seeds.py   (from the repository root)

Deterministic; the output is committed.  Seeds are named seed-*; inputs that
libFuzzer found and that once broke a target are added under their SHA-1
names next to them (see docs/RELIABILITY.md).  Needs only the standard
library plus numpy (for real np.save headers) and the golden JPEGs.
"""
import io
import os
import struct
import sys

sys.path.insert(0, "tests/integration")
from tfrec import _field, _varint, example, record  # noqa: E402

OUT = "tests/fuzz/corpus"
GOLD = "tests/data/golden"


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def jpeg(name):
    with open(os.path.join(GOLD, name), "rb") as f:
        return f.read()


small = jpeg("small_20x15_420.jpg")
odd = jpeg("odd_37x23_420.jpg")

# ---- decode: real JPEGs of each kind, and headers that must be refused ----
for name in ("small_20x15_420.jpg", "odd_37x23_420.jpg", "gray_121x91.jpg",
             "cmyk_120x90.jpg", "progressive_133x97_420.jpg",
             "photo_99x77_444.jpg", "tfenc_90x67_420.jpg"):
    put("decode", name.replace(".jpg", ""), jpeg(name))


def with_size(j, w, h):
    """The same JPEG with its SOF frame size replaced."""
    b = bytearray(j)
    i = 2
    while i + 4 <= len(b):
        m = b[i + 1]
        seg = b[i + 2] << 8 | b[i + 3]
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
            struct.pack_into(">HH", b, i + 5, h, w)
            return bytes(b)
        i += 2 + seg
    raise SystemExit("no SOF")


put("decode", "bomb_30000x30000", with_size(small, 30000, 30000))
put("decode", "wide_65000x64", with_size(small, 65000, 64))
put("decode", "truncated", odd[: len(odd) // 2])
put("decode", "png", b"\x89PNG\r\n\x1a\n" + b"\0" * 32)
put("decode", "soi_eoi", b"\xff\xd8\xff\xd9")

# ---- tfrecord: byte 0 is the mode (bit 0: repair CRCs, bit 1: lie) ----
good = [record(example({"image/encoded": odd, "image/class/label": i}))
        for i in range(3)]
big = record(example({"image/encoded": b"\xff\xd8" + bytes(17000),
                      "image/class/label": 9}))
put("tfrecord", "three_records", b"\0" + b"".join(good))
put("tfrecord", "big_then_small", b"\0" + big + good[0])
put("tfrecord", "bad_length_crc", b"\0" + good[0] + record(b"x" * 40, bad_len_crc=True)
    + good[1])
put("tfrecord", "bad_payload_crc", b"\0" + record(b"y" * 30, bad_data_crc=True))
put("tfrecord", "cut_mid_record", b"\0" + good[0] + good[1][:50])
put("tfrecord", "repair_chain", b"\1" + struct.pack("<Q", 5) + b"\0" * 4 + b"hello"
    + b"\0" * 4 + struct.pack("<Q", 0) + b"\0" * 8)
put("tfrecord", "shrunk", b"\x06" + b"".join(good[:2]))
put("tfrecord", "empty", b"\0")

# ---- example: byte 0 even = raw Example, odd = builder program ----
put("example", "imagenet", b"\0" + example({"image/encoded": small,
                                              "image/class/label": 417}))
ex_multi = example({"image/format": "JPEG", "image/encoded": b"\xff\xd8abc",
                    "image/height": 15, "image/class/label": 3})
put("example", "many_keys", b"\0" + ex_multi)
# label packed with several values, a float feature, repeated keys
feat_f = _field(2, _field(1, struct.pack("<f", 1.5)))
feat_i = _field(3, _field(1, _varint(7) + _varint(8)))
feat_b = _field(1, _field(1, b"JPEG"))
ent = lambda k, f: _field(1, _field(1, k) + _field(2, f))  # noqa: E731
put("example", "repeated_and_packed",
    b"\0" + _field(1, ent(b"image/encoded", feat_i) + ent(b"image/encoded", feat_b)
                   + ent(b"image/class/label", feat_f) + ent(b"image/class/label", feat_i)))
put("example", "group_wire_type", b"\0" + _field(1, b"\x0b\x0c"))
put("example", "unknown_fields", b"\0" + b"\x08\x96\x01\x11" + bytes(8) + b"\x1d" + bytes(4)
    + example({"image/encoded": b"z"}))
# builder programs: op = key | kind << 2, arg
put("example", "prog_basic", b"\1" + bytes([0x00, 5]) + b"abcde" + bytes([0x05, 1]) + bytes(8))
put("example", "prog_mixed", b"\1" + bytes([0x0c, 3, 0x00, 2]) + b"hi" + bytes([0x09, 3]) + bytes(24)
    + bytes([0x0d, 7, 0x03, 0]))

# ---- npy: real np.save headers and hand-made ones ----
try:
    import numpy as np
    for name, arr in (("f4_4d", np.zeros((2, 3, 4, 3), np.float32)),
                      ("i8_1d", np.zeros(5, np.int64)),
                      ("u1_scalar", np.uint8(7)),
                      ("fortran", np.asfortranarray(np.zeros((2, 3), ">f8"))),
                      ("unicode", np.array(["ab", "c"])),
                      ("datetime", np.zeros(2, "M8[ns]"))):
        b = io.BytesIO()
        np.save(b, arr)
        put("npy", name, b.getvalue()[:256])
except ImportError:
    print("make_seeds: numpy not installed; npy seeds from hand only", file=sys.stderr)


def npy(ver, text):
    text = text.encode()
    if ver == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text
    return b"\x93NUMPY" + bytes([ver, 0]) + struct.pack("<I", len(text)) + text


put("npy", "v2_any_order", npy(2, "{'shape': (1, 2,), 'fortran_order': False, 'descr': '<u2'}\n"))
put("npy", "v3_py2_long", npy(3, '{"descr": "|b1", "fortran_order": True, "shape": (3L, 4L)}'))
put("npy", "structured", npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"))
put("npy", "overflow", npy(1, "{'descr': '<f8', 'fortran_order': False, "
                              "'shape': (4294967296, 4294967296, 4)}"))

# ---- namespace: 4 shape bytes (epochs, batches), then the path ----
shape = bytes([0x01, 0x00, 0x00, 0x63])  # 9 epochs, 100 batches
for name, path in (("root", "/"), ("dataset", "/dataset.json"), ("stats", "/stats.json"),
                   ("epoch", "/epoch-0003"), ("batch", "/epoch-0000/batch-000042.npy"),
                   ("labels", "/epoch-0008/batch-000099.labels.npy"),
                   ("index", "/epoch-0001/batch-000007.index.json"),
                   ("preview", "/epoch-0002/batch-000000.preview.jpg"),
                   ("dotdot", "/epoch-0000/../../etc/passwd"),
                   ("short", "/epoch-0000/batch-0.npy"),
                   ("sign", "/epoch-0000/batch-+00001.npy"),
                   ("odd_bytes", "/epoch-0000/batch-00000\n.npy\xff%"),
                   ("long", "/" + "a" * 300),
                   ("slashes", "//epoch-0001///batch-000001.npy/")):
    put("namespace", name, shape + path.encode("latin-1"))
put("namespace", "wide", bytes([0x06, 0x86, 0, 0]) + b"/epoch-10000/batch-1000000.npy")

# ---- tar: byte 0 is the mode (bit 0: fix checksums, bit 1: lie) ----
import tarfile  # noqa: E402


def tar(members, fmt=tarfile.USTAR_FORMAT):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 0
            t.addfile(ti, io.BytesIO(data))
    return b.getvalue().rstrip(b"\0") + bytes(1024)  # drop tarfile's 10 KiB record padding


wds = [("s/000.jpg", odd), ("s/000.cls", b"3\n"), ("s/001.jpg", small), ("s/001.cls", b"17"),
       ("s/002.JPEG", small), ("s/002.txt", b"no label")]
put("tar", "ustar_wds", b"\0" + tar(wds))
put("tar", "gnu_long_name", b"\0" + tar([("d/" + "n" * 120 + ".jpg", small),
                                          ("d/" + "n" * 120 + ".cls", b"5")], tarfile.GNU_FORMAT))
put("tar", "pax", b"\0" + tar([("p/\u00e9t\u00e9.jpg", small), ("p/\u00e9t\u00e9.cls", b" -2 ")],
                              tarfile.PAX_FORMAT))
put("tar", "big_member", b"\0" + tar([("b/0.jpg", b"\xff\xd8" + bytes(17000)), ("b/0.cls", b"1"),
                                       ("b/1.jpg", small), ("b/1.cls", b"x")]))
t = tar(wds[:2])
put("tar", "cut_in_data", b"\0" + t[:700])
put("tar", "bad_checksum_fixable", b"\1" + t[:148] + b"0000000\0" + t[156:])
put("tar", "shrunk", b"\x0a" + t)
put("tar", "empty", b"\0")


def tar_links(members, fmt=tarfile.GNU_FORMAT):
    """members: (name, data) or (name, None, target) for a hard link."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for m in members:
            ti = tarfile.TarInfo(m[0])
            ti.mtime = 0
            if m[1] is None:
                ti.type = tarfile.LNKTYPE
                ti.linkname = m[2]
                t.addfile(ti)
            else:
                ti.size = len(m[1])
                t.addfile(ti, io.BytesIO(m[1]))
    return b.getvalue().rstrip(b"\0") + bytes(1024)


put("tar", "hard_links", b"\0" + tar_links([
    ("h/a.jpg", small), ("h/a.cls", b"1"), ("h/b.jpg", None, "h/a.jpg"),
    ("h/b.cls", None, "h/a.cls"), ("h/c.jpg", None, "h/gone.jpg"), ("h/c.cls", b"3"),
    ("h/" + "l" * 120 + ".jpg", None, "h/a.jpg"), ("h/" + "l" * 120 + ".cls", b"4")]))

# ---- image: PNGs of each kind (the golden fixtures), a JPEG, a GIF header,
# and cut copies.  The WebP seeds (seed-webp-*) are committed as made by
# cwebp from rgb8_37x23.png (-q 70) and rgba8_37x23.png (-lossless; -q 70
# -alpha_q 50); this script does not remake them. --------------------------
PNGS = os.path.join(GOLD, "png")
for name in ("rgb8_37x23.png", "pal2_interlaced_37x23.png", "gray1_interlaced_37x23.png",
             "rgba16_interlaced_37x23.png", "tfenc_rgba16_29x17.png", "pal4_trns_37x23.png",
             "graya8_37x23.png", "rgb8_ancillary_37x23.png"):
    with open(os.path.join(PNGS, name), "rb") as f:
        data = f.read()
    put("image", name.replace(".png", ""), data)
    put("image", name.replace(".png", "-cut"), data[: len(data) * 2 // 3])
put("image", "jpeg_small", small)
put("image", "gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")
put("image", "bmp", b"BM" + bytes(60))

# ---- gzindex: byte 0 even: a gzip file follows; odd: a saved index ----------
import zlib  # noqa: E402


def gz(data, level=6, members=1):
    out = b""
    for m in range(members):
        part = data[len(data) * m // members: len(data) * (m + 1) // members]
        c = zlib.compressobj(level, zlib.DEFLATED, 31)
        out += c.compress(part) + c.flush()
    return out


recs = b"".join(record(example({"image/encoded": small, "image/class/label": i}))
                for i in range(6))
put("gzindex", "tfrecords", b"\x00" + gz(recs))
put("gzindex", "tfrecords-bad-crc-kept", b"\x02" + gz(recs)[:-8] + b"\x00" * 4 + gz(recs)[-4:])
put("gzindex", "members", b"\x00" + gz(recs, 6, 4))
put("gzindex", "stored", b"\x00" + gz(recs * 3, 0))
put("gzindex", "cut", b"\x00" + gz(recs)[:300])
put("gzindex", "trailing", b"\x00" + gz(recs) + b"junk")
put("gzindex", "not-gzip", b"\x00" + small[:200])
put("gzindex", "index-header", b"\x01BFSGZX01" + bytes(24))

# ---- sidecar: byte 0 even: a sidecar file; odd: a stored shard index -------
import binascii  # noqa: E402


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def sidecar(entries, fmt=1, label_key=b""):
    """A sidecar file (docs/SIDECAR_INDEX.md) of (name, kind, etag, blob,
    deflate) entries, sorted by name as a writer sorts them."""
    strs = b""
    if label_key:
        strs += struct.pack("<HH", 1, len(label_key)) + label_key
    dirs, data = b"", b""
    for name, kind, etag, blob, deflate in sorted(entries):
        stored = zlib.compress(blob) if deflate else blob
        dirs += struct.pack("<QqQqQQIIHBBB3x", 1000, 5 if kind == 2 else 0, 7 if kind == 2 else 0,
                            9 if kind == 2 else 0, len(data), len(stored), len(blob),
                            crc32c(stored), len(name), kind, len(etag), 1 if deflate else 0)
        dirs += name + etag
        data += stored
    head = b"BFSSIDEC" + struct.pack("<IIIIIIQQq", 1, 64, 0, fmt, len(entries), len(strs),
                                     len(dirs), len(data), 42)
    head += struct.pack("<I", crc32c(strs + dirs))
    head += struct.pack("<I", crc32c(head))
    return head + strs + dirs + data


idx = b"BFSIDX03" + struct.pack("<QII", 2, 0, 0) + struct.pack("<QII", 12, 30, 0) * 2
put("sidecar", "two-entries", b"\x00" + sidecar([(b"a.tfrecord", 1, b'"e1"', idx, 0),
                                                 (b"b/c.tfrecord", 2, b"", idx * 3, 1)],
                                                1, b"image/class/label"))
put("sidecar", "empty", b"\x00" + sidecar([], 2, b"none"))
put("sidecar", "bad-crc", b"\x00" + sidecar([(b"a", 1, b'"e"', b"x", 0)])[:-1] + b"y")
# odd: bits 1-2 the shard kind, bit 3 replace the index (else edit it)
for k in range(4):
    put("sidecar", f"index-{k}", bytes([1 | k << 1]))
    put("sidecar", f"index-{k}-edited", bytes([1 | k << 1]) + struct.pack("<HB", 8, 1) +
        struct.pack("<HB", 24, 0x40) + struct.pack("<HB", 40, 0xff))
put("sidecar", "index-replaced", b"\x09" + idx)
put("sidecar", "tar-replaced", b"\x0d" + b"BFSTAR01" + struct.pack("<IIQ", 0, 8, 1) + b"cls,txt:" +
    struct.pack("<QQqiIII", 512, 6, 1, 0, 5, 0, 0) + b"a.jpg")
