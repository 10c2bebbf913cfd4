/*
 * cache_read.c - the sample cache's read path (see cache.h, DESIGN,
 * Reads): per-thread readers, bfs_cache_get, shard index reads, and the
 * stats.
 *
 * DESIGN
 *   A reader owns one MDB_txn, reset between gets: renew at the start of a
 *   get, reset at its end (bfs__txn_renew/bfs__txn_reset, which hold the
 *   map lock meanwhile).  bfs_cache_get_ref's hit leaves it renewed, the
 *   value lent (r->lent), until put_ref or the reader's next call.  Counters are atomics; nothing else is shared
 *   between readers.  An entry that fails its CRC is handed to the writer
 *   through c->crcdel, which the writer set when it started: the read path
 *   never calls up into cache_writer.c.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- reads ---------------------------------------------------------------- */

int bfs_cache_reader_create(bfs_cache *c, bfs_cache_reader **out)
{
	bfs_cache_reader *r;
	int rc;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->c = c;
	rc = bfs__txn_begin(c->e, 1, &r->txn);
	if (rc) {
		free(r);
		return bfs__map_err(rc);
	}
	bfs__txn_reset(c->e, r->txn); /* keeps the reader slot */
	*out = r;
	return 0;
}

void bfs_cache_reader_destroy(bfs_cache_reader *r)
{
	if (!r)
		return;
	bfs_cache_put_ref(r);
	if (r->txn)
		mdb_txn_abort(r->txn); /* frees the slot (MDB_NOTLS) */
	free(r);
}

/* A value read (copied or lent) leaves its pages mapped, and a process's
 * resident set counts every file page it maps: an epoch read from the
 * cache would grow the daemon by the whole cache (1.1 GiB at --mem 256M
 * for 2,000 ImageNet samples).  So a value of its own overflow pages is
 * unmapped once read (its bytes stay in the page cache); small values,
 * which share leaf pages, are left. */
#define DROP_MIN (64u << 10)

static void drop_value(struct bfs__env *e, const void *at, size_t len)
{
	if (len >= DROP_MIN)
		bfs__drop_range(e, at, len);
}

void bfs_cache_put_ref(bfs_cache_reader *r)
{
	if (!r || !r->lent)
		return;
	r->lent = 0;
	drop_value(r->c->e, r->lent_at, r->lent_len);
	bfs__txn_reset(r->c->e, r->txn); /* the snapshot's pages, and maplock */
}

/* Look key up into want.  With lend (want->dst NULL) a hit keeps the
 * transaction open and points *lend at the payload in the map. */
static int get(bfs_cache_reader *r, const bfs_cache_key *key, struct bfs__want *want,
	       const void **lend)
{
	bfs_cache *c = r->c;
	struct bfs__env *e = c->e;
	MDB_val k = { BFS_CACHE_KEY_BYTES, (void *)key->k }, v;
	int rc, err;

	bfs_cache_put_ref(r); /* asking again gives the last one back */
	rc = bfs__txn_renew(e, r->txn);
	if (rc)
		return bfs__map_err(rc);
	rc = mdb_get(r->txn, e->samples, &k, &v);
	if (rc == 0)
		err = c->o.skip_crc ? bfs__copy_value(e, &v, key->check, want)
				    : bfs__check_value(e, key->k, &v, key->check, want);
	else
		err = bfs__map_err(rc);
	if (err == 0 && lend) {
		*lend = (const uint8_t *)v.mv_data + BFS__VHDR;
		r->lent = 1; /* bfs_cache_put_ref resets the transaction */
		r->lent_at = v.mv_data;
		r->lent_len = v.mv_size;
	} else {
		if (rc == 0)
			drop_value(e, v.mv_data, v.mv_size);
		bfs__txn_reset(e, r->txn);
	}

	switch (err) {
	case 0:
		atomic_fetch_add_explicit(&c->hits, 1, memory_order_relaxed);
		break;
	case -ENOENT:
		atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
		break;
	case BFS_E_CRC:
		atomic_fetch_add_explicit(&c->crc_errors, 1,
					  memory_order_relaxed);
		if (c->crcdel) /* the writer's: see struct bfs_cache */
			c->crcdel(c, key);
		break;
	case BFS_E_CORRUPT:
		if (rc == 0) { /* the value's page, not the environment */
			atomic_fetch_add_explicit(&c->damaged, 1,
						  memory_order_relaxed);
			bfs__note_damage(c, "a sample's overflow page header is damaged");
		}
		break;
	}
	return err;
}

int bfs_cache_has(bfs_cache_reader *r, const bfs_cache_key *key)
{
	struct bfs__env *e = r->c->e;
	MDB_val k = { BFS_CACHE_KEY_BYTES, (void *)key->k }, v;
	int rc;

	bfs_cache_put_ref(r);
	if (bfs__txn_renew(e, r->txn))
		return 0;
	rc = mdb_get(r->txn, e->samples, &k, &v);
	bfs__txn_reset(e, r->txn);
	return rc == 0;
}

int bfs_cache_get(bfs_cache_reader *r, const bfs_cache_key *key, void *dst,
		  size_t len, int64_t *label)
{
	struct bfs__want want = { .dst = dst, .cap = len, .exact = 1 };
	int err = get(r, key, &want, NULL);

	if (err == 0)
		*label = want.label;
	return err;
}

int bfs_cache_get_shaped(bfs_cache_reader *r, const bfs_cache_key *key, void *dst,
			 size_t cap, size_t *len, bfs_store_shape *shape,
			 int64_t *label)
{
	struct bfs__want want = { .dst = dst, .cap = cap, .exact = 0 };
	int err = get(r, key, &want, NULL);

	if (err == 0 || err == -ENOBUFS)
		*len = want.len;
	if (err == 0) {
		*shape = want.shape;
		*label = want.label;
	}
	return err;
}

int bfs_cache_get_ref(bfs_cache_reader *r, const bfs_cache_key *key, const void **data,
		      size_t *len, bfs_store_shape *shape, int64_t *label)
{
	struct bfs__want want = { .dst = NULL };
	const void *p = NULL;
	int err = get(r, key, &want, &p);

	if (err == 0) {
		*data = p;
		*len = want.len;
		*shape = want.shape;
		*label = want.label;
	}
	return err;
}

/* ---- index reads ---------------------------------------------------------- */

/* Whether the joined path stored in an index value (n bytes) is
 * dir/shard. */
static int path_equal(const char *stored, size_t n, const char *dir,
		      const char *shard)
{
	size_t dn = strlen(dir), sn = strlen(shard);

	while (dn > 0 && dir[dn - 1] == '/')
		dn--;
	return n == dn + 1 + sn && !memcmp(stored, dir, dn) &&
	       stored[dn] == '/' && !memcmp(stored + dn + 1, shard, sn);
}

int bfs_cache_index_get(bfs_cache *c, const char *dir, const char *shard,
			const bfs_shard_stamp *st, void **blob, size_t *len)
{
	struct bfs__env *e = c->e;
	uint8_t key[16];
	MDB_val k = { 16, key }, v;
	MDB_txn *txn;
	struct bfs__ihdr h;
	const uint8_t *p;
	int rc, err = -ENOENT;

	*blob = NULL;
	*len = 0;
	if (!dir || !shard || !st)
		return -EINVAL;
	bfs__index_key(dir, shard, key);
	rc = bfs__txn_begin(e, 1, &txn);
	if (rc)
		return bfs__map_err(rc);
	rc = mdb_get(txn, e->index, &k, &v);
	if (rc) {
		err = bfs__map_err(rc);
		goto out;
	}
	if (bfs__check_ovhdr(e, &v)) {
		err = BFS_E_CORRUPT;
		bfs__note_damage(c, "a shard index's overflow page header is damaged");
		goto out;
	}
	if ((err = bfs__index_value(&v, &h)))
		goto out;
	p = (const uint8_t *)v.mv_data + BFS__IHDR;
	err = -ENOENT;
	if (!path_equal((const char *)p, h.path_len, dir, shard) ||
	    h.size != st->size || h.mtime_ns != st->mtime_ns ||
	    h.ino != st->ino || h.ctime_ns != st->ctime_ns)
		goto out; /* another shard or another identity: a miss */
	*blob = malloc(h.blob_len ? h.blob_len : 1);
	if (!*blob) {
		err = -ENOMEM;
		goto out;
	}
	memcpy(*blob, p + h.path_len, h.blob_len);
	*len = h.blob_len;
	err = 0;
out:
	bfs__txn_end(e, txn, 0);
	if (err == 0)
		atomic_fetch_add_explicit(&c->index_hits, 1,
					  memory_order_relaxed);
	else if (err == -ENOENT || err == BFS_E_CRC)
		atomic_fetch_add_explicit(&c->index_misses, 1,
					  memory_order_relaxed);
	return err;
}

/* ---- stats ---------------------------------------------------------------- */

static uint64_t meta_u64(struct bfs__env *e, MDB_txn *txn, const char *name)
{
	uint64_t x = 0;

	if (bfs__meta_get(e, txn, name, strlen(name), &x, 8) != 0)
		x = 0;
	return x;
}

void bfs_cache_get_stats(bfs_cache *c, bfs_cache_stats *st)
{
	struct bfs__env *e = c->e;
	MDB_txn *txn;
	MDB_envinfo info;
	MDB_stat ms;
	struct stat fst;
	int fd;
	uint64_t hits, misses, fh = 0, fm = 0, th = 0, tm = 0;
	int ok;

	memset(st, 0, sizeof(*st));
#define LD(x) atomic_load_explicit(&c->x, memory_order_relaxed)
	st->hits = hits = LD(hits);
	st->misses = misses = LD(misses);
	st->crc_errors = LD(crc_errors);
	st->inserts = LD(inserts);
	st->duplicates = LD(duplicates);
	st->dropped_queue = LD(dropped_queue);
	st->dropped_full = LD(dropped_full);
	st->dropped_locked = LD(dropped_locked);
	st->fs_full = LD(fs_full);
	st->nowrite = c->nowrite;
	st->evictions = LD(evictions);
	st->write_errors = LD(write_errors);
	st->index_hits = LD(index_hits);
	st->index_misses = LD(index_misses);
	st->damaged = LD(damaged);
	st->full = LD(paused_until_ns) > bfs__now_ns() && !LD(paused_locked);
	/* The flushed baselines and the meta DB must be read as one.  The
	 * writer makes flush_seq odd while it commits a counter flush and
	 * moves the baselines, even again after: a snapshot begun and read
	 * while flush_seq stayed even sees both or neither.  (A lock here
	 * would invert the writer's maplock -> lock order.) */
	for (int tries = 0;; tries++) {
		uint64_t s1 = atomic_load(&c->flush_seq);

		ok = 0;
		if (s1 & 1) {
			if (tries > 2000)
				break;
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
			continue;
		}
		ok = bfs__txn_begin(e, 1, &txn) == 0;
		fh = LD(flushed_hits);
		fm = LD(flushed_misses);
		if (!ok || atomic_load(&c->flush_seq) == s1 || tries > 2000)
			break;
		bfs__txn_end(e, txn, 0);
	}
	if (ok) {
		th = meta_u64(e, txn, "hits");
		tm = meta_u64(e, txn, "misses");
		st->total_hits = th + (hits > fh ? hits - fh : 0);
		st->total_misses = tm + (misses > fm ? misses - fm : 0);
		if (mdb_stat(txn, e->samples, &ms) == 0) {
			st->entries = ms.ms_entries;
			st->bytes_used += (ms.ms_branch_pages + ms.ms_leaf_pages +
					   ms.ms_overflow_pages) * (uint64_t)ms.ms_psize;
		}
		if (mdb_stat(txn, e->index, &ms) == 0) {
			st->index_entries = ms.ms_entries;
			st->bytes_used += (ms.ms_branch_pages + ms.ms_leaf_pages +
					   ms.ms_overflow_pages) * (uint64_t)ms.ms_psize;
		}
		if (mdb_stat(txn, e->meta, &ms) == 0)
			st->bytes_used += (ms.ms_branch_pages + ms.ms_leaf_pages +
					   ms.ms_overflow_pages) * (uint64_t)ms.ms_psize;
		bfs__txn_end(e, txn, 0);
	}
#undef LD
	if (!c->o.admin)
		st->map_bytes = c->limit;
	else if (mdb_env_info(e->env, &info) == 0)
		st->map_bytes = info.me_mapsize;
	if (mdb_env_get_fd(e->env, &fd) == 0 && fstat(fd, &fst) == 0) {
		/* its blocks: with MDB_WRITEMAP the file is as long as the
		 * map, the rest a hole */
		st->file_bytes = (uint64_t)fst.st_blocks * 512;
		if (st->file_bytes > (uint64_t)fst.st_size)
			st->file_bytes = (uint64_t)fst.st_size;
	}
}
