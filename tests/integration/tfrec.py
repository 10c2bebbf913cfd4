"""Test helpers: write TFRecord files of tf.train.Example records by hand,
with the power to break them (bad CRCs, cut files), and read .npy bytes.

Independent of batchfs's own writer, so tests also check that batchfs reads
files that a different writer made.
"""
import struct

_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def example(features):
    """features: {key: bytes | int | str}; returns serialized tf.train.Example."""
    entries = b""
    for key, val in features.items():
        if isinstance(val, int):
            feat = _field(3, _field(1, b"".join(_varint(val) for _ in [0])))
        else:
            if isinstance(val, str):
                val = val.encode()
            feat = _field(1, _field(1, val))
        entries += _field(1, _field(1, key.encode()) + _field(2, feat))
    return _field(1, entries)


def record(data, bad_len_crc=False, bad_data_crc=False):
    hdr = struct.pack("<Q", len(data))
    lc = masked_crc(hdr) ^ (1 if bad_len_crc else 0)
    dc = masked_crc(data) ^ (1 if bad_data_crc else 0)
    return hdr + struct.pack("<I", lc) + data + struct.pack("<I", dc)


def write_shard(path, records):
    with open(path, "wb") as f:
        for r in records:
            f.write(r)
