/*
 * cache_writer.c - the sample cache's one writer thread: the bounded queue
 * behind bfs_cache_submit / bfs_cache_index_put, one write transaction per
 * submission, the "fill, then keep" policy when the map or the disk is
 * full, reclaiming idle foreign fingerprints and changed shards, CRC
 * deletions, and the counters persisted in the meta database.
 *
 * DESIGN
 *   Producers: engine workers (submit), the source open (index_put),
 *   readers that found a bad CRC (queue_crcdel, which bfs__writer_start
 *   hands down to the read path as c->crcdel).  Consumer: one writer
 *   thread per bfs_cache.  The FIFO (c->head/tail), its counts and the
 *   sequence numbers are protected by c->lock; c->wake wakes the
 *   writer, c->progress wakes bfs_cache_flush.  The writer never holds
 *   c->lock while in a transaction or calling done(), so submit never
 *   waits for the disk.  Every transaction holds e->maplock for reading
 *   (bfs__txn_begin); the writer never nests two transactions.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/crc32c.h"

#define SUBMIT_MAX_ITEMS 65536
#define INDEX_QUEUE_MAX (256ull << 20)
#define CRCDEL_MAX 64
#define RUN_BYTES_MAX (64ull << 20)
/* Submissions committed together: at most this many bytes of values (or
 * one submission, if it is larger).  The writer holds them, copied into
 * LMDB's pages, until the commit: memory outside the caller's budget. */
#define GROUP_BYTES_MAX (32ull << 20)
#define DEL_CHUNK 256        /* entries per delete transaction */
#define PUT_ATTEMPTS 6
/* Pages of LMDB's tree one put or delete may touch besides its value's
 * (a leaf and the branches above it, each split once, copied on write):
 * reserved with MDB_WRITEMAP (bfs__reserve). */
#define TREE_PAGES 16

#define ADD(field, n) \
	atomic_fetch_add_explicit(&c->field, (n), memory_order_relaxed)

/* ---- the size limit and what a person hears ----------------------------- */

/* Inside a write transaction (writer lock held, so the committed end is
 * the transaction's start): how far it may take data.mdb's used end, in
 * bytes.  Free pages below that are used anywhere; growth stops at this
 * handle's limit, or at the used end if that is past it already (a
 * larger mount filled it): the map is the largest opener's, the limit
 * this handle's policy. */
static uint64_t grow_limit(bfs_cache *c)
{
	MDB_envinfo info;
	uint64_t used;

	if (mdb_env_info(c->e->env, &info) != 0)
		return c->limit;
	used = ((uint64_t)info.me_last_pgno + 1) * c->e->psize;
	return used > c->limit ? used : c->limit;
}

/* A put whose value's pages end past glimit: the limit is reached (as
 * LMDB's MDB_MAP_FULL would say at its map's end). */
static int over_limit(bfs_cache *c, size_t ksize, const MDB_val *v,
		      uint64_t glimit)
{
	return bfs__value_end(c->e, ksize, v) > glimit;
}

static void say(bfs_cache *c, int warn, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(bfs_cache *c, int warn, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!c->o.log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	c->o.log(c->o.log_ctx, warn, line);
}

/* The first drop for lack of room (rc: what the full transaction said),
 * once per handle. */
static void say_full(bfs_cache *c, int rc, uint64_t n)
{
	int zero = 0;

	if (!atomic_compare_exchange_strong(&c->said_full, &zero, 1))
		return;
	if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG || rc == EIO) {
		atomic_store(&c->fs_full, 1);
		say(c, 1, "cache %s: its file system has no room left (%s): %llu samples not stored, inserts paused; the entries there stay and are served",
		    c->dir, strerror(rc), (unsigned long long)n);
	} else {
		say(c, 1, "cache %s: full at its limit of %llu MiB: %llu samples not stored, inserts paused; the entries there stay and are served (fill, then keep)",
		    c->dir, (unsigned long long)(c->limit >> 20),
		    (unsigned long long)n);
	}
}

/* The writer lock ran out (ETIMEDOUT from a transaction's begin): pause
 * inserts, and say who holds it, once per episode. */
static void lock_ran_out(bfs_cache *c, uint64_t n)
{
	char who[128];
	int zero = 0;

	atomic_store(&c->paused_locked, 1);
	atomic_store(&c->paused_until_ns, bfs__now_ns() + BFS__PAUSE_NS);
	ADD(dropped_locked, n);
	if (!atomic_compare_exchange_strong(&c->said_locked, &zero, 1))
		return;
	bfs__describe_pid(bfs__lock_holder(c->e->wlock_fd), who, sizeof(who));
	say(c, 1, "cache %s: its writer lock (writer.lock) is held by %s, for more than %.0f s: samples are not stored while it is; reads go on",
	    c->dir, who, (double)c->e->lock_wait_ns / 1e9);
}

/* A transaction began: a writer lock episode is over. */
static void lock_had(bfs_cache *c)
{
	int one = 1;

	if (atomic_compare_exchange_strong(&c->said_locked, &one, 0))
		say(c, 0, "cache %s: its writer lock is free again; storing samples again",
		    c->dir);
}

/* ---- counters and the fingerprint record --------------------------------- */

static int meta_add_u64(struct bfs__env *e, MDB_txn *txn, const char *name,
			uint64_t add)
{
	uint64_t x = 0;
	int rc;

	rc = bfs__meta_get(e, txn, name, strlen(name), &x, 8);
	if (rc == MDB_NOTFOUND)
		x = 0; /* absent, or damaged: counted again from here */
	else if (rc)
		return rc;
	x += add;
	return bfs__meta_put(e, txn, name, strlen(name), &x, 8);
}

/* Add the unflushed hits/misses to the meta DB and touch this
 * fingerprint's record, inside txn. */
static int flush_counters(bfs_cache *c, MDB_txn *txn)
{
	struct bfs__env *e = c->e;
	uint64_t h = atomic_load(&c->hits), m = atomic_load(&c->misses);
	uint64_t fh = atomic_load(&c->flushed_hits);
	uint64_t fm = atomic_load(&c->flushed_misses);
	int rc;

	if (h > fh && (rc = meta_add_u64(e, txn, "hits", h - fh)))
		return rc;
	if (m > fm && (rc = meta_add_u64(e, txn, "misses", m - fm)))
		return rc;
	c->pend_hits = h;
	c->pend_misses = m;
	if (c->has_fp) {
		uint8_t kb[10] = { 'f', 'p' };
		struct bfs__fprec rec = { 0, 0 };

		memcpy(kb + 2, c->fp, 8);
		if (bfs__meta_get(e, txn, kb, sizeof(kb), &rec, sizeof(rec)))
			memset(&rec, 0, sizeof(rec));
		rec.last_active_ns = bfs__wall_ns();
		if (!rec.first_seen_ns)
			rec.first_seen_ns = rec.last_active_ns;
		if ((rc = bfs__meta_put(e, txn, kb, sizeof(kb), &rec,
					sizeof(rec))))
			return rc;
	}
	return 0;
}

static int flush_due(bfs_cache *c)
{
	return bfs__now_ns() - c->last_flush_ns >= BFS__FLUSH_NS;
}

/* Commit txn; flushed = 1 when flush_counters ran inside it; vals[0..n):
 * the values put, whose pages the process stops mapping. */
static int commit(bfs_cache *c, MDB_txn *txn, int flushed,
		  const MDB_val *vals, size_t n)
{
	int rc;

	if (flushed)
		atomic_fetch_add(&c->flush_seq, 1); /* odd: see get_stats */
	rc = bfs__txn_end_drop(c->e, txn, 1, vals, n);
	if (flushed) {
		if (rc == 0) {
			atomic_store(&c->flushed_hits, c->pend_hits);
			atomic_store(&c->flushed_misses, c->pend_misses);
			c->last_flush_ns = bfs__now_ns();
		}
		atomic_fetch_add(&c->flush_seq, 1);
	}
	if (rc == 0)
		c->unsynced = 1;
	return rc;
}

/* A transaction holding only the counters and the fingerprint record. */
static int flush_now(bfs_cache *c)
{
	MDB_txn *txn;
	int rc;

	rc = bfs__txn_begin(c->e, 0, &txn);
	if (rc)
		return rc;
	rc = flush_counters(c, txn);
	if (rc) {
		bfs__txn_end(c->e, txn, 0);
		return rc;
	}
	return commit(c, txn, 1, NULL, 0);
}

static void maybe_sync(bfs_cache *c, int force)
{
	int64_t now = bfs__now_ns();

	if (!c->unsynced)
		return;
	if (force || (c->o.sync == BFS_CACHE_SYNC_NONE &&
		      now - c->last_sync_ns >= BFS__FLUSH_NS)) {
		mdb_env_sync(c->e->env, 1);
		c->unsynced = 0;
		c->last_sync_ns = now;
	}
}

/* ---- deleting ------------------------------------------------------------ */

/* Delete entries of samples whose key starts with prefix[0..plen), inside
 * txn, until none is left (returns 0, *more = 0) or max_count entries /
 * max_bytes bytes are gone (*more = 1). */
static int del_prefix_txn(bfs_cache *c, MDB_txn *txn,
			  const uint8_t *prefix, size_t plen,
			  uint64_t max_count, uint64_t max_bytes,
			  uint64_t *count, uint64_t *bytes, int *more)
{
	struct bfs__env *e = c->e;
	uint8_t kb[BFS_CACHE_KEY_BYTES] = { 0 };
	MDB_cursor *cur;
	int rc;

	*more = 0;
	memcpy(kb, prefix, plen);
	rc = mdb_cursor_open(txn, e->samples, &cur);
	if (rc)
		return rc;
	for (;;) {
		MDB_val k = { sizeof(kb), kb }, v;

		if (*count >= max_count || *bytes >= max_bytes) {
			*more = 1;
			break;
		}
		/* the first key >= prefix: deleting it exposes the next */
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (rc == MDB_NOTFOUND) {
			rc = 0;
			break;
		}
		if (rc)
			break;
		if (k.mv_size < plen || memcmp(k.mv_data, prefix, plen))
			break;
		/* LMDB frees a value's pages by what its page header says:
		 * stop rather than free the wrong ones */
		if (bfs__check_ovhdr(e, &v)) {
			ADD(damaged, 1);
			bfs__note_damage(c, "a sample's overflow page header is damaged");
			rc = MDB_CORRUPTED;
			break;
		}
		rc = mdb_cursor_del(cur, 0);
		if (rc)
			break;
		(*count)++;
		*bytes += v.mv_size;
	}
	mdb_cursor_close(cur);
	return rc;
}

int bfs__delete_prefix(bfs_cache *c, const uint8_t *prefix, size_t plen,
		       uint64_t max_bytes, uint64_t *removed, uint64_t *bytes)
{
	uint64_t cnt = 0, b = 0;
	int rc = 0, more = 1;

	while (more && b < max_bytes) {
		MDB_txn *txn;
		uint64_t n = 0, nb = 0;

		rc = bfs__txn_begin(c->e, 0, &txn);
		if (rc)
			break;
		rc = bfs__reserve(c->e, (uint64_t)DEL_CHUNK * TREE_PAGES *
					c->e->psize);
		if (rc) {
			bfs__txn_end(c->e, txn, 0);
			break;
		}
		rc = del_prefix_txn(c, txn, prefix, plen, DEL_CHUNK,
				    max_bytes - b, &n, &nb, &more);
		if (rc) {
			bfs__txn_end(c->e, txn, 0);
			break;
		}
		rc = bfs__txn_end(c->e, txn, 1);
		if (rc)
			break;
		cnt += n;
		b += nb;
	}
	if (removed)
		*removed = cnt;
	if (bytes)
		*bytes = b;
	return rc;
}

int bfs__next_fp(struct bfs__env *e, MDB_txn *txn, uint8_t fp[8])
{
	uint8_t kb[BFS_CACHE_KEY_BYTES] = { 0 };
	MDB_val k = { sizeof(kb), kb }, v;
	MDB_cursor *cur;
	int rc;

	memcpy(kb, fp, 8);
	rc = mdb_cursor_open(txn, e->samples, &cur);
	if (rc)
		return rc;
	rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	if (rc == 0) {
		if (k.mv_size >= 8)
			memcpy(fp, k.mv_data, 8);
		else
			rc = MDB_CORRUPTED;
	}
	mdb_cursor_close(cur);
	return rc;
}

/* Delete every sample of the shard identity `hash`, of every fingerprint,
 * inside txn. */
static int purge_shard(bfs_cache *c, MDB_txn *txn, uint64_t hash)
{
	uint8_t fp[8] = { 0 }, prefix[16];
	MDB_envinfo info;
	int rc;

	/* any number of entries: as many pages again as the file holds,
	 * at most, are copied on write */
	if ((rc = mdb_env_info(c->e->env, &info)) != 0 ||
	    (rc = bfs__reserve(c->e, ((uint64_t)info.me_last_pgno + 1) *
					   c->e->psize)) != 0)
		return rc;
	for (;;) {
		uint64_t n = 0, b = 0, next;
		int more;

		rc = bfs__next_fp(c->e, txn, fp);
		if (rc == MDB_NOTFOUND)
			return 0;
		if (rc)
			return rc;
		memcpy(prefix, fp, 8);
		bfs__put_be64(prefix + 8, hash);
		rc = del_prefix_txn(c, txn, prefix, 16, UINT64_MAX,
				    UINT64_MAX, &n, &b, &more);
		if (rc)
			return rc;
		ADD(evictions, n);
		next = bfs__get_be64(fp) + 1;
		if (next == 0)
			return 0;
		bfs__put_be64(fp, next);
	}
}

struct cand {
	uint8_t fp[8];
	int64_t last;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	return x->last < y->last ? -1 : x->last > y->last;
}

/*
 * Make room for `need` bytes: delete entries of foreign fingerprints idle
 * for foreign_idle_s, least recently active first; with allow_own (for
 * index puts, which are worth far more than a few samples) this mount's
 * own entries last.  Returns the bytes freed.  No transaction open.
 */
static uint64_t reclaim(bfs_cache *c, uint64_t need, int allow_own)
{
	struct bfs__env *e = c->e;
	struct cand cands[64];
	size_t n = 0;
	uint8_t fp[8] = { 0 };
	MDB_txn *txn;
	MDB_envinfo info;
	uint64_t target, freed = 0;
	int64_t now = bfs__wall_ns();
	int64_t idle = (int64_t)c->o.foreign_idle_s * 1000000000ll;

	if (bfs__txn_begin(e, 1, &txn))
		return 0;
	while (n < sizeof(cands) / sizeof(cands[0])) {
		uint8_t kb[10] = { 'f', 'p' };
		struct bfs__fprec rec = { 0, 0 };
		uint64_t next;
		int own;

		if (bfs__next_fp(e, txn, fp))
			break;
		own = c->has_fp && !memcmp(fp, c->fp, 8);
		memcpy(kb + 2, fp, 8);
		if (bfs__meta_get(e, txn, kb, sizeof(kb), &rec, sizeof(rec)))
			memset(&rec, 0, sizeof(rec));
		if (own ? allow_own
			: c->o.foreign_idle_s > 0 && now - rec.last_active_ns >= idle) {
			memcpy(cands[n].fp, fp, 8);
			cands[n].last = own ? INT64_MAX : rec.last_active_ns;
			n++;
		}
		next = bfs__get_be64(fp) + 1;
		if (next == 0)
			break;
		bfs__put_be64(fp, next);
	}
	bfs__txn_end(e, txn, 0);
	if (!n)
		return 0;
	qsort(cands, n, sizeof(cands[0]), cand_cmp);

	/* Free a slice at a time, not one batch: each reclaim costs a failed
	 * transaction first. */
	target = need;
	if (!allow_own && mdb_env_info(e->env, &info) == 0) {
		uint64_t slice = c->limit / 16;

		if (slice > (256ull << 20))
			slice = 256ull << 20;
		if (slice > target)
			target = slice;
	}
	for (size_t i = 0; i < n && freed < target; i++) {
		uint64_t cnt = 0, b = 0;

		bfs__delete_prefix(c, cands[i].fp, 8, target - freed, &cnt, &b);
		ADD(evictions, cnt);
		freed += b;
	}
	/* Pages freed by transaction T are reusable from T+2: commit one
	 * more small transaction before retrying. */
	if (freed)
		flush_now(c);
	return freed;
}

/* ---- writing samples -------------------------------------------------- */

/* Values are written through the file in pieces of this size (within
 * a core's L2 cache): the CRC
 * reads a piece, and write() copies it while it is still in the CPU's
 * cache. */
#define WRITE_PIECE (256u << 10)

/* The header of item it's value, all but its CRC. */
static struct bfs__vhdr value_header(const bfs_cache_item *it)
{
	return (struct bfs__vhdr){
		.magic = BFS__VMAGIC,
		.version = BFS__CACHE_FORMAT,
		.hdr_len = BFS__VHDR,
		.len = it->len,
		.label = it->label,
		.check = it->key.check,
		.stamp_ns = bfs__wall_ns(),
		.h = it->shape.h,
		.w = it->shape.w,
		.src_h = it->shape.src_h,
		.src_w = it->shape.src_w,
	};
}

/*
 * With MDB_WRITEMAP, write the value whose reserved space LMDB put at dst
 * (in its map) with pwrite() instead of a copy through the map: the
 * kernel copies whole pages into the page cache, where a first touch of
 * the map would have made it zero (or read) each page first.  The bytes
 * land in the same pages (one page cache), and the commit's sync covers
 * them.  0, or an errno; -1 when this cannot be done here (no map known):
 * the caller then copies through the map.
 */
static int write_value(struct bfs__env *e, void *dst, const bfs_cache_item *it)
{
	struct bfs__vhdr h = value_header(it);
	const uint8_t *src = it->data, *ph = (const uint8_t *)dst - 16;
	uint64_t pgno;
	uint16_t flags;
	uint32_t crc = 0;
	off_t off;
	int fd;

	/* an overflow value starts 16 bytes into its first page, whose
	 * header LMDB has just written: the page number says where it is
	 * in the file (a value inside a leaf page is copied in place) */
	if (!e->writemap || !e->psize ||
	    (uintptr_t)dst % e->psize != 16 ||
	    mdb_env_get_fd(e->env, &fd) != 0)
		return -1;
	memcpy(&pgno, ph, 8);
	memcpy(&flags, ph + 10, 2);
	if (!(flags & 0x04 /* P_OVERFLOW */))
		return -1;
	off = (off_t)(pgno * e->psize + 16);
	for (size_t done = 0; done < it->len;) {
		/* pieces end on WRITE_PIECE boundaries of the file, so that
		 * the kernel can use large page-cache folios for them */
		off_t at_file = off + BFS__VHDR + (off_t)done;
		size_t n = WRITE_PIECE - (size_t)(at_file % WRITE_PIECE);
		ssize_t w;

		if (n > it->len - done)
			n = it->len - done;

		crc = bfs_crc32c(crc, src + done, n);
		w = pwrite(fd, src + done, n, off + BFS__VHDR + (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? errno : EIO;
		if ((size_t)w < n) /* the rest of the piece again */
			crc = bfs_crc32c(0, src, done + (size_t)w);
		done += (size_t)w;
	}
	crc = bfs__vhdr_crc(crc, &h);
	h.crc = bfs_crc32c(crc, it->key.k, BFS_CACHE_KEY_BYTES);
	/* the header last, through the map: its page is LMDB's first page
	 * of the value, already touched */
	memcpy(dst, &h, BFS__VHDR);
	return 0;
}

static void fill_value(void *dst, const bfs_cache_item *it)
{
	struct bfs__vhdr h = value_header(it);
	uint32_t crc;

	crc = bfs__copy_crc((uint8_t *)dst + BFS__VHDR, it->data, it->len, 0);
	crc = bfs__vhdr_crc(crc, &h);
	h.crc = bfs_crc32c(crc, it->key.k, BFS_CACHE_KEY_BYTES);
	memcpy(dst, &h, BFS__VHDR);
}

/*
 * Whether v is a value the caller's write transaction put itself
 * (vals[0..n), in the order put): the same key offered twice before a
 * commit, the same shard indexed twice in one run.  Such a value is
 * known good and must not meet the page check: with MDB_WRITEMAP its
 * overflow pages lie in the map, flagged dirty by LMDB until the commit
 * (and past the committed end when new), which bfs__check_ovhdr reads as
 * damage.  An overflow value never moves inside its transaction, so its
 * address names it; a value inside a leaf may move, but the page check
 * passes those.
 */
static int put_in_txn(const MDB_val *vals, size_t n, const MDB_val *v)
{
	for (size_t i = n; i-- > 0;)
		if (vals[i].mv_data == v->mv_data)
			return 1;
	return 0;
}

static int is_full(int rc)
{
	return rc == MDB_MAP_FULL || rc == ENOSPC || rc == EDQUOT ||
	       rc == EFBIG || rc == EIO || rc == MDB_TXN_FULL;
}

/* Call the done() of every submission of the group that has not had it:
 * their bytes are no longer needed. */
static void release_group(struct bfs__pending *group)
{
	for (struct bfs__pending *p = group; p; p = p->next)
		if (p->done) {
			void (*done)(void *) = p->done;

			p->done = NULL;
			done(p->ctx);
		}
}

/*
 * Put items[0..n) in one transaction.  Once every put has succeeded the
 * items' bytes sit in the transaction's own pages, so the group's
 * submissions are released (done) before the commit and its fdatasync:
 * the caller's memory does not wait for the disk.  Returns 0 (committed,
 * *released 1); a put's error, with *nput the index of the item whose put
 * failed and nothing released; or the commit's error, with *nput = n and
 * *released 1 (those items are lost: decoded and offered again later).
 */
static int put_group(bfs_cache *c, const bfs_cache_item *const *items, size_t n,
		     struct bfs__pending *group, MDB_val *vals, size_t *nput,
		     uint64_t *ins, uint64_t *dup, int *released)
{
	struct bfs__env *e = c->e;
	MDB_txn *txn;
	uint64_t need = 0, glimit;
	size_t nv = 0;
	int rc, flushed = 0;

	*ins = *dup = 0;
	*nput = 0;
	*released = 0;
	rc = bfs__txn_begin(e, 0, &txn);
	if (rc)
		return rc;
	lock_had(c);
	glimit = grow_limit(c);
	for (size_t i = 0; i < n; i++)
		need += BFS__VHDR + items[i]->len + TREE_PAGES * e->psize;
	/* the values' pages get their blocks before they are written: a full
	 * disk is then this error, never a fault in the copy */
	if ((rc = bfs__reserve(e, need)) != 0) {
		bfs__txn_end(e, txn, 0);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		const bfs_cache_item *it = items[i];
		MDB_val k = { BFS_CACHE_KEY_BYTES, (void *)it->key.k };
		MDB_val v = { BFS__VHDR + it->len, NULL };

		rc = mdb_put(txn, e->samples, &k, &v,
			     MDB_NOOVERWRITE | MDB_RESERVE);
		if (rc == MDB_KEYEXIST && put_in_txn(vals, nv, &v)) {
			/* offered twice before this commit: the first copy */
			(*dup)++;
			continue;
		}
		if (rc == MDB_KEYEXIST) {
			/* another mount got there first: keep a good copy,
			 * replace a corrupt or foreign one -- never one whose
			 * page is damaged (LMDB would free the wrong pages) */
			int chk = bfs__check_value(e, it->key.k, &v,
						   it->key.check, NULL);

			if (chk == 0) {
				(*dup)++;
				continue;
			}
			if (chk == BFS_E_CORRUPT) {
				ADD(damaged, 1);
				bfs__note_damage(c, "a sample's overflow page header is damaged");
				continue;
			}
			v.mv_size = BFS__VHDR + it->len;
			v.mv_data = NULL;
			rc = mdb_put(txn, e->samples, &k, &v, MDB_RESERVE);
		}
		if (rc == 0 && over_limit(c, BFS_CACHE_KEY_BYTES, &v, glimit))
			rc = MDB_MAP_FULL;
		if (rc) {
			*nput = i;
			bfs__txn_end(e, txn, 0);
			return rc;
		}
		rc = write_value(e, v.mv_data, it);
		if (rc > 0) {
			*nput = i;
			bfs__txn_end(e, txn, 0);
			return rc;
		}
		if (rc < 0)
			fill_value(v.mv_data, it);
		vals[nv++] = v;
		(*ins)++;
	}
	if (flush_due(c) && flush_counters(c, txn) == 0)
		flushed = 1;
	*nput = n;
	release_group(group);
	*released = 1;
	return commit(c, txn, flushed, vals, nv);
}

static void pause_inserts(bfs_cache *c)
{
	atomic_store(&c->paused_until_ns, bfs__now_ns() + BFS__PAUSE_NS);
}

/*
 * A group of submissions (queued one after the other, taken together by
 * take_locked) in one transaction, so that a writer behind the decoders
 * pays one fdatasync for all it has caught up on.  When the map is full,
 * what fitted of the group goes in and the rest is dropped (fill, then
 * keep).  Every submission's done is called exactly once.
 */
static void process_group(bfs_cache *c, struct bfs__pending *group)
{
	const bfs_cache_item **items;
	MDB_val *vals;
	size_t n = 0, m, nput = 0, k = 0;
	uint64_t ins, dup, need = 0;
	int rc = 0, reclaimed = 0, released = 0, full_rc = MDB_MAP_FULL;

	for (struct bfs__pending *p = group; p; p = p->next)
		n += p->n;
	if (atomic_load(&c->paused_until_ns) > bfs__now_ns()) {
		if (atomic_load(&c->paused_locked))
			ADD(dropped_locked, n);
		else
			ADD(dropped_full, n);
		release_group(group);
		return;
	}
	atomic_store(&c->paused_locked, 0);
	items = malloc(n * sizeof(*items));
	vals = malloc(n * sizeof(*vals));
	if (!items || !vals) {
		free(items);
		free(vals);
		ADD(write_errors, 1);
		release_group(group);
		return;
	}
	for (struct bfs__pending *p = group; p; p = p->next)
		for (size_t i = 0; i < p->n; i++) {
			items[k++] = &p->items[i];
			need += BFS__VHDR + p->items[i].len + 2 * c->e->psize;
		}
	m = n;
	for (int attempt = 0; attempt < PUT_ATTEMPTS && m > 0; attempt++) {
		rc = put_group(c, items, m, group, vals, &nput, &ins, &dup,
			       &released);
		if (rc == 0) {
			ADD(inserts, ins);
			ADD(duplicates, dup);
			if (m < n) {
				/* the map is full: what fitted is in */
				ADD(dropped_full, n - m);
				pause_inserts(c);
				say_full(c, full_rc, n - m);
			}
			goto done;
		}
		if (rc == ETIMEDOUT && !released) {
			/* the writer lock: its holder does not let go */
			lock_ran_out(c, n);
			goto done;
		}
		if (released || !is_full(rc))
			break;
		full_rc = rc;
		if (!reclaimed) {
			int dead = 0;

			reclaimed = 1;
			/* a reader slot of a killed process pins old pages:
			 * freeing it may be all the room needed */
			mdb_reader_check(c->e->env, &dead);
			if (reclaim(c, need, 0) > 0 || dead > 0)
				continue;
		}
		/* commit what fitted: the items before the failing put */
		m = nput;
	}
	if (rc && !is_full(rc)) {
		ADD(write_errors, 1);
		if (rc == MDB_PANIC) /* the environment is unusable: stop */
			atomic_store(&c->paused_until_ns, INT64_MAX);
	} else {
		pause_inserts(c);
		ADD(dropped_full, released ? m : n);
		say_full(c, rc, released ? m : n);
	}
done:
	free(items);
	free(vals);
	release_group(group);
}

int bfs_cache_inserting(bfs_cache *c)
{
	return c && !c->o.admin && !c->nowrite &&
	       atomic_load(&c->paused_until_ns) <= bfs__now_ns();
}

/* ---- index puts and CRC deletions ----------------------------------------- */

/* If an index for another identity of the same path is stored, purge the
 * samples of that old identity.  vals[0..nv): the indexes txn has put. */
static int purge_replaced(bfs_cache *c, MDB_txn *txn,
			  const struct bfs__pending *p, const MDB_val *vals,
			  size_t nv)
{
	struct bfs__env *e = c->e;
	MDB_val k = { 16, (void *)p->ikey }, v;
	struct bfs__ihdr oh, nh;
	const uint8_t *op, *np;
	bfs_shard_stamp ost;
	int rc;

	rc = mdb_get(txn, e->index, &k, &v);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc)
		return rc;
	/* the put replaces the old value: LMDB frees its pages by their
	 * header (one this run put is known good) */
	if (!put_in_txn(vals, nv, &v) && bfs__check_ovhdr(e, &v)) {
		bfs__note_damage(c, "a shard index's overflow page header is damaged");
		return MDB_CORRUPTED;
	}
	if (v.mv_size < BFS__IHDR)
		return 0;
	memcpy(&oh, v.mv_data, BFS__IHDR);
	memcpy(&nh, p->ival, BFS__IHDR);
	op = (const uint8_t *)v.mv_data + BFS__IHDR;
	np = (const uint8_t *)p->ival + BFS__IHDR;
	if (oh.magic != BFS__IMAGIC || oh.path_len != nh.path_len ||
	    (uint64_t)oh.path_len + BFS__IHDR > v.mv_size ||
	    memcmp(op, np, nh.path_len))
		return 0; /* unreadable, or another path with the same hash */
	if (oh.size == nh.size && oh.mtime_ns == nh.mtime_ns &&
	    oh.ino == nh.ino && oh.ctime_ns == nh.ctime_ns)
		return 0;
	ost.size = oh.size;
	ost.mtime_ns = oh.mtime_ns;
	ost.ino = oh.ino;
	ost.ctime_ns = oh.ctime_ns;
	return purge_shard(c, txn, bfs__shard_hash_joined(op, oh.path_len,
							  &ost));
}

static int run_txn(bfs_cache *c, struct bfs__pending *run, uint64_t *bytes)
{
	struct bfs__env *e = c->e;
	MDB_txn *txn;
	MDB_val *vals = NULL;
	size_t nidx = 0, nv = 0;
	uint64_t glimit;
	int rc, flushed = 0;

	*bytes = 0;
	for (struct bfs__pending *p = run; p; p = p->next) {
		*bytes += (p->kind != BFS__P_CRCDEL ? p->ival_len : 0) +
			  TREE_PAGES * e->psize;
		nidx += p->kind != BFS__P_CRCDEL;
	}
	/* the indexes put: unmapped after the commit, and known good when
	 * the run puts the same one again (purge_replaced) */
	if (nidx && !(vals = malloc(nidx * sizeof(*vals))))
		return ENOMEM;
	rc = bfs__txn_begin(e, 0, &txn);
	if (rc) {
		free(vals);
		return rc;
	}
	lock_had(c);
	glimit = grow_limit(c);
	if ((rc = bfs__reserve(e, *bytes)) != 0) {
		bfs__txn_end(e, txn, 0);
		free(vals);
		return rc;
	}
	for (struct bfs__pending *p = run; p; p = p->next) {
		if (p->kind == BFS__P_CRCDEL) {
			MDB_val k = { BFS_CACHE_KEY_BYTES, p->key.k }, v;

			rc = mdb_get(txn, e->samples, &k, &v);
			if (rc == MDB_NOTFOUND) {
				rc = 0;
				continue;
			}
			/* re-check: a good copy may have replaced it */
			if (rc == 0 &&
			    bfs__check_value(e, p->key.k, &v, 0, NULL) == BFS_E_CRC) {
				rc = mdb_del(txn, e->samples, &k, NULL);
				if (rc == 0)
					ADD(evictions, 1);
			}
		} else {
			MDB_val k = { 16, p->ikey };
			MDB_val v = { p->ival_len, NULL };

			rc = purge_replaced(c, txn, p, vals, nv);
			if (rc == 0)
				rc = mdb_put(txn, e->index, &k, &v, MDB_RESERVE);
			if (rc == 0 && over_limit(c, 16, &v, glimit))
				rc = MDB_MAP_FULL;
			if (rc == 0) {
				memcpy(v.mv_data, p->ival, p->ival_len);
				vals[nv++] = v;
			}
		}
		if (rc) {
			bfs__txn_end(e, txn, 0);
			free(vals);
			return rc;
		}
	}
	if (flush_due(c) && flush_counters(c, txn) == 0)
		flushed = 1;
	rc = commit(c, txn, flushed, vals, nv);
	free(vals);
	return rc;
}

static void process_run(bfs_cache *c, struct bfs__pending *run)
{
	uint64_t bytes;
	int rc;

	rc = run_txn(c, run, &bytes);
	if (rc && is_full(rc) && reclaim(c, bytes + (1u << 20), 1) > 0)
		rc = run_txn(c, run, &bytes);
	if (rc == ETIMEDOUT)
		lock_ran_out(c, 0);
	else if (rc)
		ADD(write_errors, 1);
}

/* ---- the queue -------------------------------------------------------------- */

/* Append p (lock held). */
static void enqueue_locked(bfs_cache *c, struct bfs__pending *p)
{
	p->seq = ++c->seq_queued;
	p->next = NULL;
	if (c->tail)
		c->tail->next = p;
	else
		c->head = p;
	c->tail = p;
	pthread_cond_signal(&c->wake);
}

static void free_pending(struct bfs__pending *p)
{
	while (p) {
		struct bfs__pending *next = p->next;

		free(p->items);
		free(p->ival);
		free(p);
		p = next;
	}
}

int bfs_cache_submit(bfs_cache *c, const bfs_cache_item *items, size_t n,
		     void (*done)(void *ctx), void *ctx)
{
	struct bfs__pending *p = NULL;
	int err;

	if (!c || c->o.admin) {
		err = -EPERM;
		goto drop;
	}
	if (n == 0) {
		err = 0;
		goto drop;
	}
	err = -EINVAL;
	if (n > SUBMIT_MAX_ITEMS || !items)
		goto drop;
	for (size_t i = 0; i < n; i++)
		if (!items[i].data || !items[i].len ||
		    items[i].len > BFS__ITEM_MAX)
			goto drop;
	if (c->nowrite) {
		ADD(dropped_locked, n);
		err = -EROFS;
		goto drop;
	}
	if (atomic_load(&c->paused_until_ns) > bfs__now_ns()) {
		if (atomic_load(&c->paused_locked)) {
			ADD(dropped_locked, n);
			err = -EAGAIN;
		} else {
			ADD(dropped_full, n);
			err = -ENOSPC;
		}
		goto drop;
	}
	err = -ENOMEM;
	p = calloc(1, sizeof(*p));
	if (!p || !(p->items = malloc(n * sizeof(*items))))
		goto drop;
	memcpy(p->items, items, n * sizeof(*items));
	p->kind = BFS__P_SUBMIT;
	p->n = n;
	for (size_t i = 0; i < n; i++)
		p->bytes += items[i].len;
	p->done = done;
	p->ctx = ctx;
	pthread_mutex_lock(&c->lock);
	if (c->stop) {
		err = -ESHUTDOWN;
	} else if (c->nsubmits >= c->o.queue_max) {
		err = -EAGAIN;
		ADD(dropped_queue, n);
	} else {
		c->nsubmits++;
		enqueue_locked(c, p);
		err = 0;
	}
	pthread_mutex_unlock(&c->lock);
	if (err == 0)
		return 0;
drop:
	free_pending(p);
	if (done)
		done(ctx);
	return err;
}

int bfs_cache_index_put(bfs_cache *c, const char *dir, const char *shard,
			const bfs_shard_stamp *st, const void *blob,
			size_t len)
{
	struct bfs__pending *p;
	struct bfs__ihdr h;
	size_t dn, sn, plen;
	uint8_t *val, *q;
	uint32_t crc;
	int err = 0;

	if (!c || c->o.admin)
		return -EPERM;
	if (!dir || !shard || !st || (!blob && len) || len > BFS__ITEM_MAX)
		return -EINVAL;
	if (c->nowrite)
		return -EROFS;
	dn = strlen(dir);
	while (dn > 0 && dir[dn - 1] == '/')
		dn--;
	sn = strlen(shard);
	plen = dn + 1 + sn;
	p = calloc(1, sizeof(*p));
	val = malloc(BFS__IHDR + plen + len);
	if (!p || !val) {
		free(p);
		free(val);
		return -ENOMEM;
	}
	q = val + BFS__IHDR;
	memcpy(q, dir, dn);
	q[dn] = '/';
	memcpy(q + dn + 1, shard, sn);
	if (len)
		memcpy(q + plen, blob, len);
	memset(&h, 0, sizeof(h));
	h.magic = BFS__IMAGIC;
	h.version = BFS__CACHE_FORMAT;
	h.hdr_len = BFS__IHDR;
	h.path_len = (uint32_t)plen;
	h.size = st->size;
	h.mtime_ns = st->mtime_ns;
	h.blob_len = len;
	h.stamp_ns = bfs__wall_ns();
	h.ino = st->ino;
	h.ctime_ns = st->ctime_ns;
	crc = bfs_crc32c(0, q, plen + len);
	crc = bfs_crc32c(crc, &h, 8);
	h.crc = bfs_crc32c(crc, (const uint8_t *)&h + 12, BFS__IHDR - 12);
	memcpy(val, &h, BFS__IHDR);
	p->kind = BFS__P_INDEX;
	bfs__index_key(dir, shard, p->ikey);
	p->ival = val;
	p->ival_len = BFS__IHDR + plen + len;

	pthread_mutex_lock(&c->lock);
	if (c->stop)
		err = -ESHUTDOWN;
	else if (c->index_bytes + p->ival_len > INDEX_QUEUE_MAX)
		err = -EAGAIN;
	else {
		c->index_bytes += p->ival_len;
		enqueue_locked(c, p);
	}
	pthread_mutex_unlock(&c->lock);
	if (err)
		free_pending(p);
	return err;
}

/* c->crcdel: queue the deletion of a sample entry a reader found corrupt;
 * dropped when CRCDEL_MAX are waiting or the writer is stopping. */
static void queue_crcdel(bfs_cache *c, const bfs_cache_key *key)
{
	struct bfs__pending *p;

	if (c->o.admin)
		return;
	p = calloc(1, sizeof(*p));
	if (!p)
		return;
	p->kind = BFS__P_CRCDEL;
	p->key = *key;
	pthread_mutex_lock(&c->lock);
	if (!c->stop && c->ncrcdel < CRCDEL_MAX) {
		c->ncrcdel++;
		enqueue_locked(c, p);
		p = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	free(p); /* dropped: the next get finds it again */
}

int bfs_cache_flush(bfs_cache *c)
{
	uint64_t target;

	if (!c || c->o.admin)
		return -EPERM;
	pthread_mutex_lock(&c->lock);
	target = c->seq_queued;
	while (c->seq_done < target)
		pthread_cond_wait(&c->progress, &c->lock);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- the thread ---------------------------------------------------------------- */

/* Take the next unit of work (lock held): a group of submissions (up to
 * GROUP_BYTES_MAX of values, at least one), or a run of index puts and CRC
 * deletions (one transaction each). */
static struct bfs__pending *take_locked(bfs_cache *c, uint64_t *seq)
{
	struct bfs__pending *run = c->head, *last = run;
	uint64_t bytes;

	if (run->kind == BFS__P_SUBMIT) {
		bytes = run->bytes;
		c->nsubmits--;
		while (last->next && last->next->kind == BFS__P_SUBMIT &&
		       bytes + last->next->bytes <= GROUP_BYTES_MAX) {
			last = last->next;
			bytes += last->bytes;
			c->nsubmits--;
		}
	} else {
		bytes = run->ival_len;
		while (last->next && last->next->kind != BFS__P_SUBMIT &&
		       bytes < RUN_BYTES_MAX) {
			last = last->next;
			bytes += last->ival_len;
		}
		for (struct bfs__pending *p = run;; p = p->next) {
			if (p->kind == BFS__P_CRCDEL)
				c->ncrcdel--;
			else
				c->index_bytes -= p->ival_len;
			if (p == last)
				break;
		}
	}
	c->head = last->next;
	if (!c->head)
		c->tail = NULL;
	last->next = NULL;
	*seq = last->seq;
	return run;
}

static void *writer_main(void *arg)
{
	bfs_cache *c = arg;

	pthread_setname_np(pthread_self(), "bfs-cachewrite"); /* top -H, perf, gdb */
	flush_now(c); /* record this fingerprint as active */
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct bfs__pending *run;
		uint64_t seq;

		if (!c->head) {
			struct timespec ts;
			int64_t due = c->last_flush_ns + BFS__FLUSH_NS;

			if (c->stop)
				break;
			if (due <= bfs__now_ns()) {
				int dead;

				pthread_mutex_unlock(&c->lock);
				mdb_reader_check(c->e->env, &dead);
				if (flush_now(c))
					c->last_flush_ns = bfs__now_ns();
				maybe_sync(c, 0);
				pthread_mutex_lock(&c->lock);
				continue;
			}
			ts.tv_sec = due / 1000000000ll;
			ts.tv_nsec = due % 1000000000ll;
			pthread_cond_timedwait(&c->wake, &c->lock, &ts);
			continue;
		}
		run = take_locked(c, &seq);
		pthread_mutex_unlock(&c->lock);
		if (run->kind == BFS__P_SUBMIT)
			process_group(c, run);
		else
			process_run(c, run);
		free_pending(run);
		maybe_sync(c, 0);
		pthread_mutex_lock(&c->lock);
		c->seq_done = seq;
		pthread_cond_broadcast(&c->progress);
	}
	pthread_mutex_unlock(&c->lock);
	flush_now(c);
	maybe_sync(c, 1); /* make the last commits durable at close */
	return NULL;
}

int bfs__writer_start(bfs_cache *c)
{
	int rc;

	c->last_flush_ns = bfs__now_ns();
	c->last_sync_ns = c->last_flush_ns;
	c->crcdel = queue_crcdel;
	rc = pthread_create(&c->writer, NULL, writer_main, c);
	if (rc)
		return -rc;
	c->writer_started = 1;
	return 0;
}

void bfs__writer_stop(bfs_cache *c)
{
	if (!c->writer_started)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->writer, NULL);
	c->writer_started = 0;
}
