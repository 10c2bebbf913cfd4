"""Test helper: find the live B-tree pages of an LMDB data.mdb (64-bit,
LMDB 0.9 layout) and the bytes in them that are in use, so a test can damage
exactly those.  Written from LMDB's on-disk format, independently of the C
checker in cache/cache_check.c, and trusting the file (run it on a healthy
copy only).

  python3 lmdbpages.py pick DATA.MDB COUNT SEED
      prints COUNT lines "OFFSET KIND XOR": distinct random used bytes of
      live branch and leaf pages (every page reachable from the free and
      main databases' roots and the named databases' roots), seeded, with
      a nonzero byte to XOR each with.  KIND says what the byte is:
        header, ptrs (the node offset array), node (a node header), key,
        data (a leaf node's inline data or overflow page number), and the
        classes a change of which may go unseen and is harmless
        (docs/RELIABILITY.md): sep (a branch page's separator key),
        freekey (a free-list record's transaction id), slack (room in a
        free-list record after its page list)
  python3 lmdbpages.py flip FILE OFFSET XOR
      XORs the byte at OFFSET of FILE with XOR
"""
import random
import struct
import sys

P_BRANCH, P_LEAF = 0x01, 0x02
F_BIGDATA, F_SUBDATA = 0x01, 0x02
PAGEHDRSZ, NODESIZE = 16, 8
INVALID = (1 << 64) - 1


def pick_meta(db):
    """(psize, meta dict) of the newest meta page, as LMDB picks it."""
    metas = []
    psize = struct.unpack_from("<I", db, PAGEHDRSZ + 24)[0]
    for i in range(2):
        base = i * psize + PAGEHDRSZ
        magic, version = struct.unpack_from("<II", db, base)
        assert magic == 0xBEEFC0DE and version == 1, "not an LMDB 0.9 file"
        dbs = [struct.unpack_from("<IHHQQQQQ", db, base + 24 + 48 * j)
               for j in range(2)]
        last_pg, txnid = struct.unpack_from("<QQ", db, base + 24 + 96)
        metas.append({"dbs": dbs, "last_pg": last_pg, "txnid": txnid})
    return psize, max(metas, key=lambda m: m["txnid"])


def used_bytes(db, psize):
    """Yield (offset, kind) for every used byte of every live tree page."""
    _, meta = pick_meta(db)
    seen = set()
    stack = [(meta["dbs"][i][7], tree)
             for i, tree in ((0, "free"), (1, "main"))
             if meta["dbs"][i][7] != INVALID]
    while stack:
        pgno, tree = stack.pop()
        if pgno in seen:
            continue
        seen.add(pgno)
        p = pgno * psize
        _, _, flags, lower, upper = struct.unpack_from("<QHHHH", db, p)
        for i in range(PAGEHDRSZ):
            yield p + i, "header"
        for i in range(PAGEHDRSZ, lower):
            yield p + i, "ptrs"
        for n in range((lower - PAGEHDRSZ) // 2):
            off = struct.unpack_from("<H", db, p + PAGEHDRSZ + 2 * n)[0]
            node = p + off
            lo, hi, nflags, ksize = struct.unpack_from("<HHHH", db, node)
            for i in range(NODESIZE):
                yield node + i, "node"
            kind = ("sep" if flags & P_BRANCH else
                    "freekey" if tree == "free" else "key")
            for i in range(ksize):
                yield node + NODESIZE + i, kind
            if flags & P_BRANCH:
                stack.append((lo | hi << 16 | nflags << 32, tree))
                continue
            dsize = lo | hi << 16
            data = node + NODESIZE + ksize
            if nflags & F_BIGDATA:
                for i in range(8):
                    yield data + i, "data"
                continue
            used = dsize
            if tree == "free":  # count, then that many page numbers
                used = 8 * (struct.unpack_from("<Q", db, data)[0] + 1)
            for i in range(dsize):
                yield data + i, "data" if i < used else "slack"
            if tree == "main" and nflags & F_SUBDATA:
                root = struct.unpack_from("<Q", db, data + 40)[0]
                if root != INVALID:
                    stack.append((root, "named"))


def main():
    if sys.argv[1] == "flip":
        path, off, xor = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        with open(path, "r+b") as f:
            f.seek(off)
            b = f.read(1)[0]
            f.seek(off)
            f.write(bytes([b ^ xor]))
        return
    path, count, seed = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    db = open(path, "rb").read()
    psize, _ = pick_meta(db)
    kinds = dict(used_bytes(db, psize))
    rnd = random.Random(seed)
    for off in rnd.sample(sorted(kinds), count):
        print(off, kinds[off], rnd.randrange(1, 256))


if __name__ == "__main__":
    main()
