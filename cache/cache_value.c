/*
 * cache_value.c - what the cache stores, byte for byte (see cache.h,
 * DESIGN, Values and Integrity): the header and CRC32C of a sample value,
 * the header and CRC of a shard index value, and the counter and
 * fingerprint records of the meta database, with the checks of each that
 * the read path, the writer and verify share.  No state: each function
 * works on the bytes, or in the transaction, it is given.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <string.h>

#include "engine/base/crc32c.h"

_Static_assert(sizeof(struct bfs__vhdr) == BFS__VHDR, "value header size");
_Static_assert(sizeof(struct bfs__ihdr) == BFS__IHDR, "index header size");

/* ---- sample values ------------------------------------------------------ */

/* Copy n bytes from src to dst and return the CRC32C of what was
 * written, one L1-sized chunk at a time: the map is read once and the
 * CRC reads the chunk back from cache. */
uint32_t bfs__copy_crc(void *dst, const void *src, size_t n, uint32_t crc)
{
	const size_t chunk = 16384;
	uint8_t *d = dst;
	const uint8_t *s = src;

	while (n) {
		size_t m = n < chunk ? n : chunk;

		memcpy(d, s, m);
		crc = bfs_crc32c(crc, d, m);
		d += m;
		s += m;
		n -= m;
	}
	return crc;
}

uint32_t bfs__vhdr_crc(uint32_t crc, const struct bfs__vhdr *h)
{
	crc = bfs_crc32c(crc, h, 8);
	return bfs_crc32c(crc, (const uint8_t *)h + 12, BFS__VHDR - 12);
}

/* The header of v, checked: 0 and *h, or BFS_E_CORRUPT / BFS_E_CRC. */
static int value_header(const struct bfs__env *e, const MDB_val *v, struct bfs__vhdr *h)
{
	if (bfs__check_ovhdr(e, v))
		return BFS_E_CORRUPT;
	if (v->mv_size < BFS__VHDR)
		return BFS_E_CRC;
	memcpy(h, v->mv_data, BFS__VHDR);
	if (h->magic != BFS__VMAGIC || h->version != BFS__CACHE_FORMAT ||
	    h->hdr_len != BFS__VHDR || h->len != v->mv_size - BFS__VHDR)
		return BFS_E_CRC;
	return 0;
}

/* Whether want can take a payload of len bytes: 0, -EINVAL or -ENOBUFS. */
static int fits(struct bfs__want *want, uint64_t len)
{
	want->len = (size_t)len;
	if (want->exact ? len != want->cap : len > want->cap)
		return want->exact ? -EINVAL : -ENOBUFS;
	return 0;
}

static void fill_want(struct bfs__want *want, const struct bfs__vhdr *h)
{
	want->shape.h = h->h;
	want->shape.w = h->w;
	want->shape.src_h = h->src_h;
	want->shape.src_w = h->src_w;
	want->label = h->label;
	want->len = (size_t)h->len;
}

int bfs__check_value(const struct bfs__env *e, const uint8_t *key,
		     const MDB_val *v, uint64_t check, struct bfs__want *want)
{
	struct bfs__vhdr h;
	const uint8_t *payload;
	uint32_t crc;
	int err;

	if ((err = value_header(e, v, &h)))
		return err;
	if (check && h.check != check)
		return -ENOENT;
	if (want && want->dst && (err = fits(want, h.len)))
		return err;
	payload = (const uint8_t *)v->mv_data + BFS__VHDR;
	if (want && want->dst)
		crc = bfs__copy_crc(want->dst, payload, h.len, 0);
	else /* checked where it lies: no copy */
		crc = bfs_crc32c(0, payload, h.len);
	crc = bfs__vhdr_crc(crc, &h);
	if (bfs_crc32c(crc, key, BFS_CACHE_KEY_BYTES) != h.crc)
		return BFS_E_CRC;
	if (want)
		fill_want(want, &h);
	return 0;
}

/* bfs_cache_get's fast path when CRCs are not checked (skip_crc). */
int bfs__copy_value(const struct bfs__env *e, const MDB_val *v,
		    uint64_t check, struct bfs__want *want)
{
	struct bfs__vhdr h;
	int err;

	if ((err = value_header(e, v, &h)))
		return err;
	if (h.check != check)
		return -ENOENT;
	if (want->dst && (err = fits(want, h.len)))
		return err;
	if (want->dst)
		memcpy(want->dst, (const uint8_t *)v->mv_data + BFS__VHDR, h.len);
	fill_want(want, &h);
	return 0;
}

/* ---- index values ------------------------------------------------------- */

/* The index value v: 0 and its header in *h, or BFS_E_CRC. */
int bfs__index_value(const MDB_val *v, struct bfs__ihdr *h)
{
	const uint8_t *p = (const uint8_t *)v->mv_data + BFS__IHDR;
	uint32_t crc;

	if (v->mv_size < BFS__IHDR)
		return BFS_E_CRC;
	memcpy(h, v->mv_data, BFS__IHDR);
	if (h->magic != BFS__IMAGIC || h->version != BFS__CACHE_FORMAT ||
	    h->hdr_len != BFS__IHDR ||
	    (uint64_t)h->path_len + h->blob_len != v->mv_size - BFS__IHDR)
		return BFS_E_CRC;
	crc = bfs_crc32c(0, p, h->path_len + h->blob_len);
	crc = bfs_crc32c(crc, h, 8);
	crc = bfs_crc32c(crc, (const uint8_t *)h + 12, BFS__IHDR - 12);
	return crc == h->crc ? 0 : BFS_E_CRC;
}

int bfs__check_index_entry(const struct bfs__env *e, const MDB_val *k,
			   const MDB_val *v)
{
	struct bfs__ihdr h;
	uint8_t want[16];
	int err;

	if (bfs__check_ovhdr(e, v))
		return BFS_E_CORRUPT;
	if ((err = bfs__index_value(v, &h)))
		return err;
	bfs__index_key_joined((const uint8_t *)v->mv_data + BFS__IHDR,
			      h.path_len, want);
	if (k->mv_size != 16 || memcmp(k->mv_data, want, 16))
		return BFS_E_CRC; /* a key that is not its path's */
	return 0;
}

/* ---- meta records ----------------------------------------------------------- */

static uint32_t meta_crc(const void *key, size_t klen, const void *val,
			 size_t n)
{
	return bfs_crc32c(bfs_crc32c(0, key, klen), val, n);
}

int bfs__meta_get(struct bfs__env *e, MDB_txn *txn, const void *key,
		  size_t klen, void *out, size_t n)
{
	MDB_val k = { klen, (void *)key }, v;
	uint32_t crc;
	int rc;

	rc = mdb_get(txn, e->meta, &k, &v);
	if (rc)
		return rc;
	if (v.mv_size != n + 4)
		return MDB_NOTFOUND;
	memcpy(&crc, (const uint8_t *)v.mv_data + n, 4);
	if (crc != meta_crc(key, klen, v.mv_data, n))
		return MDB_NOTFOUND;
	memcpy(out, v.mv_data, n);
	return 0;
}

int bfs__meta_put(struct bfs__env *e, MDB_txn *txn, const void *key,
		  size_t klen, const void *val, size_t n)
{
	uint8_t buf[64];
	MDB_val k = { klen, (void *)key }, v = { n + 4, buf };
	uint32_t crc = meta_crc(key, klen, val, n);

	if (n + 4 > sizeof(buf))
		return EINVAL;
	memcpy(buf, val, n);
	memcpy(buf + n, &crc, 4);
	return mdb_put(txn, e->meta, &k, &v, 0);
}

int bfs__check_meta_entry(const MDB_val *k, const MDB_val *v)
{
	const uint8_t *kb = k->mv_data;
	size_t n;
	uint32_t crc, fmt;

	if (k->mv_size == 6 && !memcmp(kb, "format", 6)) {
		if (v->mv_size != 4)
			return BFS_E_CRC;
		memcpy(&fmt, v->mv_data, 4);
		return fmt == BFS__CACHE_FORMAT ? 0 : BFS_E_CRC;
	}
	if ((k->mv_size == 4 && !memcmp(kb, "hits", 4)) ||
	    (k->mv_size == 6 && !memcmp(kb, "misses", 6)))
		n = 8;
	else if (k->mv_size == 10 && kb[0] == 'f' && kb[1] == 'p')
		n = sizeof(struct bfs__fprec);
	else
		return BFS_E_CORRUPT; /* no such record */
	if (v->mv_size != n + 4)
		return BFS_E_CRC;
	memcpy(&crc, (const uint8_t *)v->mv_data + n, 4);
	return crc == meta_crc(kb, k->mv_size, v->mv_data, n) ? 0 : BFS_E_CRC;
}
