/*
 * cache_admin.c - whole-cache operations for tools and tests (see
 * cache.h): clear (all or one fingerprint), verify every entry, list the
 * fingerprints present, count or remove one source's entries, and remove
 * the files of an unused cache (and the copy of a damaged one that an
 * open moved aside).
 *
 * These run on the calling thread, in their own short transactions, next
 * to the writer thread and to other processes: LMDB serializes the write
 * transactions; the read scans work in chunks so they never pin old pages
 * for long.
 */
#include "cache/cache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define VERIFY_CHUNK 256

int bfs_cache_clear(bfs_cache *c, const char *fingerprint,
		    uint64_t *removed)
{
	struct bfs__env *e = c->e;
	uint8_t fp[8] = { 0 };
	uint64_t n = 0;
	MDB_txn *txn;
	int rc, err;

	if (removed)
		*removed = 0;
	if (fingerprint) {
		err = bfs__parse_fp(fingerprint, fp);
		if (err)
			return err;
	}
	rc = bfs__delete_prefix(c, fp, fingerprint ? 8 : 0, UINT64_MAX, &n,
				NULL);
	if (removed)
		*removed = n;
	if (rc)
		return bfs__map_err(rc);
	rc = bfs__txn_begin(e, 0, &txn);
	if (rc)
		return bfs__map_err(rc);
	if (fingerprint) {
		uint8_t kb[10] = { 'f', 'p' };
		MDB_val k = { sizeof(kb), kb };

		memcpy(kb + 2, fp, 8);
		rc = mdb_del(txn, e->meta, &k, NULL);
		if (rc == MDB_NOTFOUND)
			rc = 0;
	} else {
		uint32_t fmt = BFS__CACHE_FORMAT;
		MDB_val k = { 6, "format" }, v = { 4, &fmt };

		rc = mdb_drop(txn, e->index, 0);
		if (!rc)
			rc = mdb_drop(txn, e->meta, 0);
		if (!rc)
			rc = mdb_put(txn, e->meta, &k, &v, 0);
	}
	if (rc) {
		bfs__txn_end(e, txn, 0);
		return bfs__map_err(rc);
	}
	rc = bfs__txn_end(e, txn, 1);
	if (rc)
		return bfs__map_err(rc);
	atomic_store(&c->paused_until_ns, 0);
	return 0;
}

void bfs__remove_damaged_copies(const char *dir)
{
	const size_t plen = strlen(BFS__DAMAGED_PREFIX);
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, BFS__DAMAGED_PREFIX, plen))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
}

int bfs_cache_remove_files(const char *dir)
{
	char path[PATH_MAX];
	int fd, err = 0;

	if (!dir || snprintf(path, sizeof(path), "%s/users.lock", dir) >=
			    (int)sizeof(path))
		return -EINVAL;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return err;
	}
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (unlink(path) != 0 && errno != ENOENT)
		err = -errno;
	snprintf(path, sizeof(path), "%s/lock.mdb", dir);
	if (unlink(path) != 0 && errno != ENOENT && !err)
		err = -errno;
	snprintf(path, sizeof(path), "%s/damaged", dir);
	unlink(path);
	bfs__remove_damaged_copies(dir);
	close(fd); /* the lock file stays: openers may be waiting on it */
	return err;
}

static void entry_info(bfs_cache_entry_info *info, const char *db,
		       const MDB_val *k, const MDB_val *v, int code)
{
	const uint8_t *kb = k->mv_data;

	memset(info, 0, sizeof(*info));
	snprintf(info->db, sizeof(info->db), "%s", db);
	if (strcmp(db, "samples")) {
		snprintf(info->fingerprint, sizeof(info->fingerprint), "-");
	} else if (k->mv_size == BFS_CACHE_KEY_BYTES) {
		bfs__fp_hex(kb, info->fingerprint);
		info->shard_hash = bfs__get_be64(kb + 8);
		info->offset = bfs__get_be64(kb + 16);
	} else {
		snprintf(info->fingerprint, sizeof(info->fingerprint), "?");
	}
	info->len = v->mv_size;
	info->code = code;
}

/* Delete the keys in bad[0..n) that still fail their check. */
static int delete_bad(bfs_cache *c, uint8_t (*bad)[BFS_CACHE_KEY_BYTES],
		      size_t n)
{
	struct bfs__env *e = c->e;
	MDB_txn *txn;
	int rc;

	rc = bfs__txn_begin(e, 0, &txn);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		MDB_val k = { BFS_CACHE_KEY_BYTES, bad[i] }, v;

		rc = mdb_get(txn, e->samples, &k, &v);
		if (rc == MDB_NOTFOUND) {
			rc = 0;
			continue;
		}
		if (rc)
			break;
		/* a value on a damaged page stays: LMDB would free the
		 * wrong pages */
		if (bfs__check_value(e, bad[i], &v, 0, NULL) ==
		    BFS_E_CRC) {
			rc = mdb_del(txn, e->samples, &k, NULL);
			if (rc)
				break;
			atomic_fetch_add(&c->evictions, 1);
		}
	}
	if (rc) {
		bfs__txn_end(e, txn, 0);
		return rc;
	}
	return bfs__txn_end(e, txn, 1);
}

/* Increment a big-endian byte string; returns 0 on wrap-around. */
static int key_inc(uint8_t *k, size_t n)
{
	for (size_t i = n; i-- > 0;)
		if (++k[i] != 0)
			return 1;
	return 0;
}

/* The index and meta databases, in one read transaction each (they are
 * small: one entry per shard, a few records). */
static int verify_small(bfs_cache *c,
			void (*bad)(void *ctx, const bfs_cache_entry_info *e),
			void *ctx, uint64_t *nb)
{
	struct bfs__env *e = c->e;
	int rc = 0;

	for (int pass = 0; pass < 2 && !rc; pass++) {
		MDB_dbi dbi = pass ? e->meta : e->index;
		const char *db = pass ? "meta" : "index";
		MDB_txn *txn;
		MDB_cursor *cur;
		MDB_val k, v;

		rc = bfs__txn_begin(e, 1, &txn);
		if (rc)
			break;
		rc = mdb_cursor_open(txn, dbi, &cur);
		if (rc) {
			bfs__txn_end(e, txn, 0);
			break;
		}
		for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
		     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
			int code = pass ? bfs__check_meta_entry(&k, &v)
					: bfs__check_index_entry(e, &k, &v);

			if (code) {
				bfs_cache_entry_info info;

				(*nb)++;
				entry_info(&info, db, &k, &v, code);
				if (bad)
					bad(ctx, &info);
			}
		}
		if (rc == MDB_NOTFOUND)
			rc = 0;
		mdb_cursor_close(cur);
		bfs__txn_end(e, txn, 0);
	}
	return rc;
}

int bfs_cache_verify(bfs_cache *c, const char *fingerprint, int remove,
		     void (*bad)(void *ctx, const bfs_cache_entry_info *e),
		     void *ctx, uint64_t *checked, uint64_t *nbad)
{
	struct bfs__env *e = c->e;
	uint8_t start[BFS_CACHE_KEY_BYTES] = { 0 }, pfx[8];
	uint8_t badkeys[VERIFY_CHUNK][BFS_CACHE_KEY_BYTES];
	size_t plen = 0;
	uint64_t nc = 0, nb = 0;
	int rc = 0, done = 0, err;

	if (fingerprint) {
		err = bfs__parse_fp(fingerprint, pfx);
		if (err)
			return err;
		plen = 8;
		memcpy(start, pfx, 8);
	}
	while (!done) {
		MDB_txn *txn;
		MDB_cursor *cur;
		MDB_val k = { sizeof(start), start }, v;
		size_t nbk = 0, i;

		rc = bfs__txn_begin(e, 1, &txn);
		if (rc)
			break;
		rc = mdb_cursor_open(txn, e->samples, &cur);
		if (rc) {
			bfs__txn_end(e, txn, 0);
			break;
		}
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		for (i = 0; i < VERIFY_CHUNK; i++) {
			int code;

			if (rc == MDB_NOTFOUND) {
				rc = 0;
				done = 1;
				break;
			}
			if (rc)
				break;
			if (plen && (k.mv_size < plen || memcmp(k.mv_data, pfx, plen))) {
				done = 1;
				break;
			}
			code = k.mv_size == BFS_CACHE_KEY_BYTES
				       ? bfs__check_value(e, k.mv_data, &v, 0, NULL)
				       : BFS_E_CORRUPT;
			nc++;
			if (code) {
				bfs_cache_entry_info info;

				nb++;
				entry_info(&info, "samples", &k, &v, code);
				if (bad)
					bad(ctx, &info);
				if (remove && k.mv_size == BFS_CACHE_KEY_BYTES)
					memcpy(badkeys[nbk++], k.mv_data,
					       BFS_CACHE_KEY_BYTES);
			}
			if (k.mv_size == BFS_CACHE_KEY_BYTES)
				memcpy(start, k.mv_data, BFS_CACHE_KEY_BYTES);
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		/* a full chunk that ended on the last entry: the next is
		 * MDB_NOTFOUND, the end, not an error */
		if (rc == MDB_NOTFOUND) {
			rc = 0;
			done = 1;
		}
		mdb_cursor_close(cur);
		bfs__txn_end(e, txn, 0);
		if (rc)
			break;
		if (nbk && (rc = delete_bad(c, badkeys, nbk)))
			break;
		if (!done && !key_inc(start, sizeof(start)))
			done = 1;
	}
	if (!rc && !fingerprint)
		rc = verify_small(c, bad, ctx, &nb);
	if (checked)
		*checked = nc;
	if (nbad)
		*nbad = nb;
	return bfs__map_err(rc);
}

static int fp_cmp(const void *a, const void *b)
{
	return strcmp(((const bfs_cache_fp_info *)a)->fingerprint,
		      ((const bfs_cache_fp_info *)b)->fingerprint);
}

/* Find fp in out[0..*n), appending it when absent; NULL on ENOMEM. */
static bfs_cache_fp_info *fp_slot(bfs_cache_fp_info **out, size_t *n,
				  size_t *cap, const uint8_t fp[8])
{
	char hex[17];

	bfs__fp_hex(fp, hex);
	for (size_t i = *n; i-- > 0;)
		if (!strcmp((*out)[i].fingerprint, hex))
			return &(*out)[i];
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 8;
		bfs_cache_fp_info *g = realloc(*out, nc * sizeof(*g));

		if (!g)
			return NULL;
		*out = g;
		*cap = nc;
	}
	memset(&(*out)[*n], 0, sizeof(**out));
	memcpy((*out)[*n].fingerprint, hex, 17);
	return &(*out)[(*n)++];
}

int bfs_cache_fingerprints(bfs_cache *c, bfs_cache_fp_info **out,
			   size_t *n)
{
	struct bfs__env *e = c->e;
	bfs_cache_fp_info *list = NULL, *cur_fp = NULL;
	size_t cnt = 0, cap = 0;
	uint64_t curv = 0;
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int rc;

	*out = NULL;
	*n = 0;
	rc = bfs__txn_begin(e, 1, &txn);
	if (rc)
		return bfs__map_err(rc);
	rc = mdb_cursor_open(txn, e->samples, &cur);
	if (rc)
		goto out;
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size < 8)
			continue;
		/* keys are sorted: one fingerprint's entries are adjacent */
		if (!cur_fp || bfs__get_be64(k.mv_data) != curv) {
			curv = bfs__get_be64(k.mv_data);
			cur_fp = fp_slot(&list, &cnt, &cap, k.mv_data);
			if (!cur_fp) {
				rc = ENOMEM;
				goto out;
			}
		}
		cur_fp->entries++;
		cur_fp->bytes += v.mv_size;
	}
	if (rc != MDB_NOTFOUND)
		goto out;
	mdb_cursor_close(cur);
	cur = NULL;
	rc = mdb_cursor_open(txn, e->meta, &cur);
	if (rc)
		goto out;
	k.mv_size = 2;
	k.mv_data = "fp";
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		const uint8_t *kb = k.mv_data;
		struct bfs__fprec rec;
		bfs_cache_fp_info *f;

		if (k.mv_size < 2 || kb[0] != 'f' || kb[1] != 'p')
			break;
		if (k.mv_size != 10 ||
		    bfs__meta_get(e, txn, kb, 10, &rec, sizeof(rec)) != 0)
			continue;
		f = fp_slot(&list, &cnt, &cap, kb + 2);
		if (!f) {
			rc = ENOMEM;
			goto out;
		}
		f->last_active_ns = rec.last_active_ns;
	}
	if (rc == MDB_NOTFOUND)
		rc = 0;
out:
	if (cur)
		mdb_cursor_close(cur);
	bfs__txn_end(e, txn, 0);
	if (rc) {
		free(list);
		return bfs__map_err(rc);
	}
	if (cnt)
		qsort(list, cnt, sizeof(*list), fp_cmp);
	*out = list;
	*n = cnt;
	return 0;
}

/* ---- one source's entries ------------------------------------------------ */

/* A shard of the source: its index key and the hash its samples carry. */
struct src_shard {
	uint8_t key[16];
	uint64_t hash;
};

/* Every shard index under root (root/...), into *v (*n of them), with its
 * bytes counted in *info.  One read transaction. */
static int source_shards(bfs_cache *c, const char *root, size_t rn,
			 struct src_shard **v, size_t *n,
			 bfs_cache_source_info *info)
{
	struct bfs__env *e = c->e;
	MDB_val k, val;
	MDB_cursor *cur;
	MDB_txn *txn;
	size_t cap = 0;
	int rc;

	if ((rc = bfs__txn_begin(e, 1, &txn)))
		return rc;
	if ((rc = mdb_cursor_open(txn, e->index, &cur))) {
		bfs__txn_end(e, txn, 0);
		return rc;
	}
	for (rc = mdb_cursor_get(cur, &k, &val, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &val, MDB_NEXT)) {
		struct bfs__ihdr h;
		const uint8_t *path = (const uint8_t *)val.mv_data + BFS__IHDR;
		bfs_shard_stamp st;

		/* a damaged entry is verify's to report: passed over here */
		if (bfs__check_index_entry(e, &k, &val) ||
		    bfs__index_value(&val, &h) || h.path_len <= rn ||
		    memcmp(path, root, rn) || path[rn] != '/')
			continue;
		if (*n == cap) {
			size_t nc = cap ? cap * 2 : 256;
			struct src_shard *nv = realloc(*v, nc * sizeof(*nv));

			if (!nv) {
				rc = ENOMEM;
				break;
			}
			*v = nv;
			cap = nc;
		}
		st.size = h.size;
		st.mtime_ns = h.mtime_ns;
		st.ino = h.ino;
		st.ctime_ns = h.ctime_ns;
		memcpy((*v)[*n].key, k.mv_data, 16);
		(*v)[*n].hash = bfs__shard_hash_joined(path, h.path_len, &st);
		(*n)++;
		info->shards++;
		info->index_bytes += val.mv_size;
	}
	if (rc == MDB_NOTFOUND)
		rc = 0;
	mdb_cursor_close(cur);
	bfs__txn_end(e, txn, 0);
	return rc;
}

/* Count the samples of fingerprint fp and shard hash (prefix, 16 bytes). */
static int count_prefix(struct bfs__env *e, MDB_txn *txn, const uint8_t *prefix,
			uint64_t *n, uint64_t *bytes)
{
	uint8_t kb[BFS_CACHE_KEY_BYTES] = { 0 };
	MDB_val k = { sizeof(kb), kb }, v;
	MDB_cursor *cur;
	int rc;

	memcpy(kb, prefix, 16);
	if ((rc = mdb_cursor_open(txn, e->samples, &cur)))
		return rc;
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size < 16 || memcmp(k.mv_data, prefix, 16))
			break;
		(*n)++;
		*bytes += v.mv_size;
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

int bfs_cache_source(bfs_cache *c, const char *root, int remove,
		     bfs_cache_source_info *info)
{
	struct bfs__env *e = c ? c->e : NULL;
	struct src_shard *v = NULL;
	size_t n = 0, rn;
	uint8_t fp[8] = { 0 };
	int rc = 0;

	if (!c || !root || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	rn = strlen(root);
	while (rn > 0 && root[rn - 1] == '/')
		rn--;
	if (!rn)
		return -EINVAL;
	if ((rc = source_shards(c, root, rn, &v, &n, info)))
		goto out;
	/* each fingerprint's samples of each shard: counted, then deleted */
	for (;;) {
		MDB_txn *txn;
		uint64_t next;

		if ((rc = bfs__txn_begin(e, 1, &txn)))
			goto out;
		rc = bfs__next_fp(e, txn, fp);
		for (size_t i = 0; rc == 0 && i < n; i++) {
			uint8_t prefix[16];
			uint64_t cnt = 0, b = 0;

			memcpy(prefix, fp, 8);
			bfs__put_be64(prefix + 8, v[i].hash);
			if ((rc = count_prefix(e, txn, prefix, &cnt, &b)))
				break;
			info->samples += cnt;
			info->sample_bytes += b;
		}
		bfs__txn_end(e, txn, 0);
		if (rc == MDB_NOTFOUND) {
			rc = 0;
			break;
		}
		if (rc)
			goto out;
		for (size_t i = 0; remove && i < n; i++) {
			uint8_t prefix[16];

			memcpy(prefix, fp, 8);
			bfs__put_be64(prefix + 8, v[i].hash);
			if ((rc = bfs__delete_prefix(c, prefix, 16, UINT64_MAX, NULL, NULL)))
				goto out;
		}
		next = bfs__get_be64(fp) + 1;
		if (next == 0)
			break;
		bfs__put_be64(fp, next);
	}
	/* then the shard indexes, in transactions of a bounded size */
	for (size_t at = 0; remove && at < n;) {
		MDB_txn *txn;
		size_t end = at + VERIFY_CHUNK < n ? at + VERIFY_CHUNK : n;

		if ((rc = bfs__txn_begin(e, 0, &txn)))
			goto out;
		if ((rc = bfs__reserve(e, (uint64_t)(end - at) * 16 * e->psize))) {
			bfs__txn_end(e, txn, 0);
			goto out;
		}
		for (size_t i = at; i < end && !rc; i++) {
			MDB_val k = { 16, v[i].key };

			rc = mdb_del(txn, e->index, &k, NULL);
			if (rc == MDB_NOTFOUND)
				rc = 0;
		}
		if (rc) {
			bfs__txn_end(e, txn, 0);
			goto out;
		}
		if ((rc = bfs__txn_end(e, txn, 1)))
			goto out;
		at = end;
	}
out:
	free(v);
	return rc ? bfs__map_err(rc) : 0;
}
