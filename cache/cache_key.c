/*
 * cache_key.c - the sample cache's keys (see cache.h, DESIGN, Keys): the
 * settings fingerprint, sample keys and the identity check they carry,
 * shard index keys and shard hashes, and the big-endian and hex helpers
 * they are built with.  Pure functions of their arguments: no LMDB, no
 * state, any thread.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- bytes and hex ------------------------------------------------------- */

void bfs__put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

uint64_t bfs__get_be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

int bfs__parse_fp(const char *hex, uint8_t out[8])
{
	uint64_t v = 0;

	if (!hex || strlen(hex) != 16)
		return -EINVAL;
	for (int i = 0; i < 16; i++) {
		char ch = hex[i];
		int d;

		if (ch >= '0' && ch <= '9')
			d = ch - '0';
		else if (ch >= 'a' && ch <= 'f')
			d = ch - 'a' + 10;
		else if (ch >= 'A' && ch <= 'F')
			d = ch - 'A' + 10;
		else
			return -EINVAL;
		v = v << 4 | (uint64_t)d;
	}
	bfs__put_be64(out, v);
	return 0;
}

void bfs__fp_hex(const uint8_t fp[8], char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)bfs__get_be64(fp));
}

/* ---- hashing ------------------------------------------------------------
 * Two unrelated 64-bit hashes: FNV-1a with a final avalanche (the shard
 * hash in keys) and a multiply-xorshift byte hash (the identity check kept
 * in values).  Not cryptographic; together they make a wrong hit need a
 * simultaneous collision of both. */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

typedef struct {
	uint64_t a, b;
} hash2;

static void h2_init(hash2 *h, uint64_t tag)
{
	h->a = 0xcbf29ce484222325ull ^ tag;
	h->b = 0x6a09e667f3bcc909ull ^ mix64(tag);
}

static void h2_feed(hash2 *h, const void *p, size_t n)
{
	const uint8_t *s = p;

	for (size_t i = 0; i < n; i++) {
		h->a ^= s[i];
		h->a *= 0x100000001b3ull;
		h->b = (h->b + s[i] + 1) * 0x9e3779b97f4a7c15ull;
		h->b ^= h->b >> 29;
	}
}

static void h2_u64(hash2 *h, uint64_t v)
{
	uint8_t b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	h2_feed(h, b, 8);
}

/* "dir/shard", with trailing slashes of dir dropped, and a NUL after the
 * path so that no path is a prefix of another's input. */
static void h2_path(hash2 *h, const char *dir, const char *shard)
{
	size_t n = strlen(dir);

	while (n > 0 && dir[n - 1] == '/')
		n--;
	h2_feed(h, dir, n);
	h2_feed(h, "/", 1);
	h2_feed(h, shard, strlen(shard) + 1);
}

static void h2_stamp(hash2 *h, const bfs_shard_stamp *st)
{
	h2_u64(h, st->size);
	h2_u64(h, (uint64_t)st->mtime_ns);
	h2_u64(h, st->ino);
	h2_u64(h, (uint64_t)st->ctime_ns);
}

uint64_t bfs__shard_hash(const char *dir, const char *shard,
			 const bfs_shard_stamp *st)
{
	hash2 h;

	h2_init(&h, 0x5348415244ull); /* "SHARD" */
	h2_path(&h, dir, shard);
	h2_stamp(&h, st);
	return mix64(h.a);
}

uint64_t bfs__shard_hash_joined(const void *path, size_t n,
				const bfs_shard_stamp *st)
{
	hash2 h;

	/* the same bytes h2_path() feeds for the dir and shard joined */
	h2_init(&h, 0x5348415244ull);
	h2_feed(&h, path, n);
	h2_feed(&h, "", 1);
	h2_stamp(&h, st);
	return mix64(h.a);
}

void bfs__index_key(const char *dir, const char *shard, uint8_t out[16])
{
	hash2 h;

	h2_init(&h, 0x494e444558ull); /* "INDEX" */
	h2_path(&h, dir, shard);
	bfs__put_be64(out, mix64(h.a));
	bfs__put_be64(out + 8, mix64(h.b));
}

void bfs__index_key_joined(const void *path, size_t n, uint8_t out[16])
{
	hash2 h;

	h2_init(&h, 0x494e444558ull);
	h2_feed(&h, path, n);
	h2_feed(&h, "", 1);
	bfs__put_be64(out, mix64(h.a));
	bfs__put_be64(out + 8, mix64(h.b));
}

int bfs_cache_fingerprint(char out[17], const char *engine_fp,
			  const char *source_settings)
{
	uint8_t fp[8];
	hash2 h;
	int err;

	if (!out || !source_settings)
		return -EINVAL;
	err = bfs__parse_fp(engine_fp, fp);
	if (err)
		return err;
	h2_init(&h, 0x46494e47455250ull); /* "FINGERP" */
	h2_feed(&h, fp, 8);
	h2_feed(&h, source_settings, strlen(source_settings) + 1);
	bfs__put_be64(fp, mix64(h.a));
	bfs__fp_hex(fp, out);
	return 0;
}

int bfs_cache_key_make(bfs_cache_key *key, const char *fingerprint,
		       const char *dir, const bfs_sample_identity *id)
{
	bfs_shard_stamp st;
	hash2 h;
	int err;

	if (!key || !dir || !id || !id->shard)
		return -EINVAL;
	err = bfs__parse_fp(fingerprint, key->k);
	if (err)
		return err;
	st.size = id->shard_size;
	st.mtime_ns = id->shard_mtime_ns;
	st.ino = id->shard_ino;
	st.ctime_ns = id->shard_ctime_ns;
	bfs__put_be64(key->k + 8, bfs__shard_hash(dir, id->shard, &st));
	bfs__put_be64(key->k + 16, id->offset);
	h2_init(&h, 0x53414d504c45ull); /* "SAMPLE" */
	h2_path(&h, dir, id->shard);
	h2_stamp(&h, &st);
	h2_u64(&h, id->offset);
	h2_u64(&h, id->length);
	h2_feed(&h, fingerprint, 16);
	key->check = mix64(h.b) | 1; /* never 0: 0 means "don't check" */
	return 0;
}
