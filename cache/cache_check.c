/*
 * cache_check.c - the structural check of data.mdb (see cache.h,
 * bfs_cache_check): a walk of LMDB's on-disk format that trusts nothing in
 * the file, run in a child process so that not even a bug in the walk can
 * take the caller down.
 *
 * DESIGN
 *   LMDB trusts its pages: one bad node offset or size makes mdb_get read,
 *   and the writer write, wherever it points.  So before a process relies
 *   on an environment, the snapshot LMDB will use is walked from its meta
 *   page: the free database and the main database, and every named
 *   database the main one lists, down to every leaf.  Every number is
 *   checked against the file before it is used, every page is claimed in a
 *   bitmap (no page reached twice, no page both in use and free), and the
 *   counts LMDB keeps in its database records and meta page must come out
 *   exactly (each page up to the last is in use or free, exactly once: the
 *   invariant LMDB's own audit states).  Branch and leaf pages are read
 *   whole; of an overflow value only its first page header is read, and
 *   not even that for the samples database (one random read per sample
 *   would make the check as slow as reading the cache): bfs_cache_get and
 *   every write path check that header instead (bfs__check_ovhdr).
 *   The walk is a pure function of a byte image (walk_image), so tests can
 *   damage an image in memory; bfs_cache_check runs it in a forked child
 *   over a read-only mapping of the file and takes the verdict through a
 *   pipe.  (The walk reads some fields twice: once to check them, once to
 *   use them.  Bytes that change in between -- someone writing into the
 *   file during the check -- can only make the child fail, which is a
 *   verdict of damage, as is any crash of the child.)  When other processes use the environment (no exclusive
 *   users.lock), the child first opens it read-only and begins a read
 *   transaction, which pins the snapshot it walks: LMDB never reuses a
 *   page a reader may still see.  No state is shared; one thread.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- LMDB's on-disk format (0.9, 64-bit; liblmdb's mdb.c) ----------------
 * A page starts with a 16-byte header: pgno (8), pad (2), flags (2), then
 * lower and upper (2 + 2; for an overflow page, one 4-byte page count).
 * Branch and leaf pages hold an array of 2-byte node offsets from byte 16
 * to lower, and the nodes themselves from upper to the end of the page.  A
 * node is lo (2), hi (2), flags (2), key size (2), the key, then (leaf) the
 * data, or its overflow page number with F_BIGDATA; lo | hi << 16 is the
 * data size of a leaf node, lo | hi << 16 | flags << 32 the child page
 * number of a branch node.  Pages 0 and 1 are meta pages: a header, then
 * magic, version, address, map size, the free and main database records,
 * the last page number and the transaction id. */
enum {
	PAGEHDR = 16,
	NODEHDR = 8,
	P_BRANCH = 0x01,
	P_LEAF = 0x02,
	P_META = 0x08,
	F_BIGDATA = 0x01,
	F_SUBDATA = 0x02,
	DBREC = 48,          /* struct MDB_db */
	META_AT = PAGEHDR,   /* struct MDB_meta, in a meta page */
	META_LEN = 136,
	MAX_DEPTH = 32,      /* LMDB's cursor stack */
	MAX_KEY = 511,       /* MDB_MAXKEYSIZE */
	DB_INTEGERKEY = 0x08,
};
#define META_MAGIC 0xBEEFC0DEu
#define DATA_VERSION 1u
#define PGNO_NONE UINT64_MAX
/* Pages a commit may leave unwritten past the end of the file (its loose
 * pages, on the free list): at most its dirty list, MDB_IDL_UM_MAX. */
#define MAX_UNWRITTEN (1ull << 17)

static uint16_t rd16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

struct dbrec {
	uint32_t pad;
	uint16_t flags, depth;
	uint64_t branch, leaf, overflow, entries, root;
};

static void dbrec_read(struct dbrec *d, const uint8_t *p)
{
	d->pad = rd32(p);
	d->flags = rd16(p + 4);
	d->depth = rd16(p + 6);
	d->branch = rd64(p + 8);
	d->leaf = rd64(p + 16);
	d->overflow = rd64(p + 24);
	d->entries = rd64(p + 32);
	d->root = rd64(p + 40);
}

/* ---- the walk -------------------------------------------------------------- */

enum { T_FREE, T_MAIN, T_NAMED };

struct tree {
	const char *name;       /* for messages: "free", "main", "samples", ... */
	int kind;
	int samples;            /* overflow headers are not read */
	struct dbrec db;
	uint64_t branch, leaf, overflow, entries;
};

struct key {
	const uint8_t *p;
	size_t n;
};

struct walk {
	const uint8_t *m;       /* the file */
	uint64_t len;
	uint64_t psize;
	uint64_t npages;        /* last_pg + 1 */
	uint64_t tree_end;      /* pages below this may hold trees: written */
	uint64_t txnid;
	uint8_t *seen;          /* one bit per page below npages */
	uint64_t *spans;        /* scratch: one page's nodes, offset << 32 | size */
	uint64_t free_pages;
	uint64_t used_pages;    /* what the database records count */
	bfs_cache_check_info *info;
	char *msg;
};

#define FAIL(w, ...) (bfs_seterr((w)->msg, __VA_ARGS__), BFS_E_CORRUPT)

static int claim(struct walk *w, uint64_t pgno, const char *what,
		 const char *db)
{
	uint8_t bit = (uint8_t)(1u << (pgno & 7));

	if (w->seen[pgno >> 3] & bit)
		return FAIL(w, "page %llu (%s of '%s') is reached twice",
			    (unsigned long long)pgno, what, db);
	w->seen[pgno >> 3] |= bit;
	return 0;
}

static int cmp_mem(struct key a, struct key b)
{
	size_t n = a.n < b.n ? a.n : b.n;
	int d = memcmp(a.p, b.p, n);

	if (d)
		return d;
	return a.n < b.n ? -1 : a.n > b.n;
}

static int cmp_key(const struct tree *t, struct key a, struct key b)
{
	if (t->kind == T_FREE) { /* MDB_INTEGERKEY: size_t, 8 bytes */
		uint64_t x = rd64(a.p), y = rd64(b.p);

		return x < y ? -1 : x > y;
	}
	return cmp_mem(a, b);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t ovpages(uint64_t dsize, uint64_t psize)
{
	return (PAGEHDR - 1 + dsize) / psize + 1;
}

/* The overflow value of `dsize` bytes at page opg, referenced by node `i`
 * of page `pgno`: claim its pages and count them.  Unless t->samples, its
 * page header is read and must be what LMDB writes. */
static int overflow(struct walk *w, struct tree *t, uint64_t pgno, unsigned i,
		    uint64_t opg, uint64_t dsize)
{
	uint64_t n = ovpages(dsize, w->psize);
	int err;

	if (opg < 2 || opg >= w->tree_end || n > w->tree_end - opg)
		return FAIL(w, "page %llu (leaf of '%s'): node %u's value of %llu bytes on page %llu lies outside the file's %llu pages",
			    (unsigned long long)pgno, t->name, i,
			    (unsigned long long)dsize, (unsigned long long)opg,
			    (unsigned long long)w->tree_end);
	if (!t->samples) {
		const uint8_t *o = w->m + opg * w->psize;
		uint32_t pages = rd32(o + 12);

		if (rd64(o) != opg || rd16(o + 10) != 0x04 || pages < n ||
		    pages > w->tree_end - opg)
			return FAIL(w, "page %llu (overflow of '%s'): header says page %llu, flags 0x%x, %u pages, where page %llu, flags 0x4 and %llu or more pages were expected",
				    (unsigned long long)opg, t->name,
				    (unsigned long long)rd64(o), rd16(o + 10),
				    pages, (unsigned long long)opg,
				    (unsigned long long)n);
		n = pages;
	}
	for (uint64_t p = opg; p < opg + n; p++)
		if ((err = claim(w, p, "overflow", t->name)))
			return err;
	t->overflow += n;
	return 0;
}

/* A free-database record: key txnid, data an IDL (count, then that many
 * page numbers, descending), perhaps with unused room after them. */
static int free_record(struct walk *w, struct tree *t, uint64_t pgno,
		       unsigned i, struct key k, const uint8_t *d,
		       uint64_t dsize)
{
	uint64_t id = rd64(k.p), count, prev = UINT64_MAX;
	int err;

	if (id > w->txnid)
		return FAIL(w, "page %llu (leaf of 'free'): record %u is keyed by transaction %llu, after the snapshot's %llu",
			    (unsigned long long)pgno, i,
			    (unsigned long long)id,
			    (unsigned long long)w->txnid);
	if (dsize < 8 || dsize % 8)
		return FAIL(w, "page %llu (leaf of 'free'): record %u holds %llu bytes, not a page list",
			    (unsigned long long)pgno, i,
			    (unsigned long long)dsize);
	count = rd64(d);
	if (count > dsize / 8 - 1)
		return FAIL(w, "page %llu (leaf of 'free'): record %u lists %llu pages in room for %llu",
			    (unsigned long long)pgno, i,
			    (unsigned long long)count,
			    (unsigned long long)(dsize / 8 - 1));
	for (uint64_t j = 1; j <= count; j++) {
		uint64_t p = rd64(d + 8 * j);

		if (p < 2 || p >= w->npages || p >= prev)
			return FAIL(w, "page %llu (leaf of 'free'): record %u lists page %llu (entry %llu), not a page below %llu in descending order",
				    (unsigned long long)pgno, i,
				    (unsigned long long)p,
				    (unsigned long long)j,
				    (unsigned long long)w->npages);
		if ((err = claim(w, p, "free page", "free")))
			return err;
		prev = p;
	}
	w->free_pages += count;
	return 0;
}

static int walk_tree(struct walk *w, struct tree *t);

/* The record of a named database in the main database. */
static int named_db(struct walk *w, uint64_t pgno, unsigned i, struct key k,
		    const uint8_t *d, uint16_t flags, uint64_t dsize)
{
	static const char *const names[] = { "index", "meta", "samples" };
	struct tree sub = { 0 };

	for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++)
		if (k.n == strlen(names[j]) && !memcmp(k.p, names[j], k.n))
			sub.name = names[j];
	if (!sub.name)
		return FAIL(w, "page %llu (leaf of 'main'): node %u names a database (%zu bytes) that a batchfs cache does not have",
			    (unsigned long long)pgno, i, k.n);
	if (flags != F_SUBDATA || dsize != DBREC)
		return FAIL(w, "page %llu (leaf of 'main'): the record of '%s' has flags 0x%x and %llu bytes, not a database record",
			    (unsigned long long)pgno, sub.name, flags,
			    (unsigned long long)dsize);
	dbrec_read(&sub.db, d);
	if (sub.db.pad || sub.db.flags)
		return FAIL(w, "'%s': database flags 0x%x, pad %u (a batchfs cache opens its databases with none)",
			    sub.name, sub.db.flags, sub.db.pad);
	sub.kind = T_NAMED;
	sub.samples = sub.name == names[2];
	return walk_tree(w, &sub);
}

/* Check page pgno at `level` (root 1) of tree t, every key in [lo, hi)
 * (NULL: unbounded), then its children or its records. */
static int walk_page(struct walk *w, struct tree *t, uint64_t pgno,
		     unsigned level, const struct key *lo,
		     const struct key *hi)
{
	const uint8_t *p;
	uint16_t flags, lower, upper, want;
	unsigned n, i;
	uint64_t total = 0;
	int leaf, err;

	if (pgno < 2 || pgno >= w->tree_end)
		return FAIL(w, "'%s' level %u: page %llu lies outside the file's %llu written pages",
			    t->name, level, (unsigned long long)pgno,
			    (unsigned long long)w->tree_end);
	leaf = level == t->db.depth;
	if ((err = claim(w, pgno, leaf ? "leaf" : "branch", t->name)))
		return err;
	p = w->m + pgno * w->psize;
	flags = rd16(p + 10);
	lower = rd16(p + 12);
	upper = rd16(p + 14);
	want = leaf ? P_LEAF : P_BRANCH;
	/* pad is LMDB's key size on LEAF2 pages only; elsewhere it is
	 * whatever the page held before (MDB_WRITEMAP reuses pages in
	 * place), so it says nothing */
	if (rd64(p) != pgno || flags != want)
		return FAIL(w, "page %llu ('%s' level %u of %u): header says page %llu, pad %u, flags 0x%x, where flags 0x%x (%s) were expected",
			    (unsigned long long)pgno, t->name, level,
			    t->db.depth, (unsigned long long)rd64(p),
			    rd16(p + 8), flags, want, leaf ? "leaf" : "branch");
	if (lower < PAGEHDR + 2 || (lower & 1) || (upper & 1) ||
	    upper > w->psize || lower > upper)
		return FAIL(w, "page %llu (%s of '%s'): lower %u and upper %u do not bound a node array in a %llu-byte page",
			    (unsigned long long)pgno, leaf ? "leaf" : "branch",
			    t->name, lower, upper,
			    (unsigned long long)w->psize);
	n = (lower - PAGEHDR) / 2u;

	/* Every node inside the page, the nodes tiling [upper, end). */
	for (i = 0; i < n; i++) {
		uint16_t off = rd16(p + PAGEHDR + 2 * i), ks, nf;
		uint64_t size;

		if (off < upper || (off & 1) || off > w->psize - NODEHDR)
			return FAIL(w, "page %llu (%s of '%s'): node %u at offset %u lies outside the node area [%u, %llu)",
				    (unsigned long long)pgno,
				    leaf ? "leaf" : "branch", t->name, i, off,
				    upper, (unsigned long long)w->psize);
		nf = rd16(p + off + 4);
		ks = rd16(p + off + 6);
		if (ks > MAX_KEY || (ks == 0 && (leaf || i > 0)) ||
		    (t->kind == T_FREE && (leaf || i > 0) && ks != 8))
			return FAIL(w, "page %llu (%s of '%s'): node %u has a key of %u bytes",
				    (unsigned long long)pgno,
				    leaf ? "leaf" : "branch", t->name, i, ks);
		size = NODEHDR + ks;
		if (leaf) {
			unsigned allowed = t->kind == T_MAIN ? F_SUBDATA : F_BIGDATA;

			if (nf & ~allowed)
				return FAIL(w, "page %llu (leaf of '%s'): node %u has flags 0x%x",
					    (unsigned long long)pgno, t->name,
					    i, nf);
			size += (nf & F_BIGDATA) ? 8 : (rd16(p + off) |
				(uint64_t)rd16(p + off + 2) << 16);
		}
		if (size > w->psize - off)
			return FAIL(w, "page %llu (%s of '%s'): node %u at offset %u (key %u bytes) runs %llu bytes past the end of the page",
				    (unsigned long long)pgno,
				    leaf ? "leaf" : "branch", t->name, i, off,
				    ks, (unsigned long long)(size - (w->psize - off)));
		size += size & 1;
		total += size;
		w->spans[i] = (uint64_t)off << 32 | size;
	}
	if (total != w->psize - upper)
		return FAIL(w, "page %llu (%s of '%s'): its %u nodes take %llu bytes, but the page has %llu in use",
			    (unsigned long long)pgno, leaf ? "leaf" : "branch",
			    t->name, n, (unsigned long long)total,
			    (unsigned long long)(w->psize - upper));
	qsort(w->spans, n, sizeof(w->spans[0]), cmp_u64);
	for (i = 0; i + 1 < n; i++)
		if ((w->spans[i] >> 32) + (w->spans[i] & 0xffffffffu) >
		    (w->spans[i + 1] >> 32))
			return FAIL(w, "page %llu (%s of '%s'): nodes at offsets %llu and %llu overlap",
				    (unsigned long long)pgno,
				    leaf ? "leaf" : "branch", t->name,
				    (unsigned long long)(w->spans[i] >> 32),
				    (unsigned long long)(w->spans[i + 1] >> 32));

	/* Keys ascending, inside [lo, hi).  A branch's key 0 is not used. */
	for (i = leaf ? 0 : 1; i < n; i++) {
		const uint8_t *nd = p + rd16(p + PAGEHDR + 2 * i);
		struct key k = { nd + NODEHDR, rd16(nd + 6) };
		int below_lo = lo && (leaf ? cmp_key(t, k, *lo) < 0
					   : cmp_key(t, k, *lo) <= 0);

		if (below_lo || (hi && cmp_key(t, k, *hi) >= 0))
			return FAIL(w, "page %llu (%s of '%s'): key %u lies outside the range its parent gives it",
				    (unsigned long long)pgno,
				    leaf ? "leaf" : "branch", t->name, i);
		if (i > (leaf ? 0u : 1u)) {
			const uint8_t *pd = p + rd16(p + PAGEHDR + 2 * (i - 1));
			struct key pk = { pd + NODEHDR, rd16(pd + 6) };

			if (cmp_key(t, pk, k) >= 0)
				return FAIL(w, "page %llu (%s of '%s'): keys %u and %u are out of order",
					    (unsigned long long)pgno,
					    leaf ? "leaf" : "branch", t->name,
					    i - 1, i);
		}
	}

	if (!leaf) {
		t->branch++;
		for (i = 0; i < n; i++) {
			const uint8_t *nd = p + rd16(p + PAGEHDR + 2 * i);
			uint64_t child = rd16(nd) | (uint64_t)rd16(nd + 2) << 16 |
					 (uint64_t)rd16(nd + 4) << 32;
			struct key klo, khi;
			const struct key *clo = lo, *chi = hi;

			if (i > 0) {
				klo.p = nd + NODEHDR;
				klo.n = rd16(nd + 6);
				clo = &klo;
			}
			if (i + 1 < n) {
				const uint8_t *nx = p + rd16(p + PAGEHDR + 2 * (i + 1));

				khi.p = nx + NODEHDR;
				khi.n = rd16(nx + 6);
				chi = &khi;
			}
			if ((err = walk_page(w, t, child, level + 1, clo, chi)))
				return err;
		}
		return 0;
	}

	t->leaf++;
	for (i = 0; i < n; i++) {
		const uint8_t *nd = p + rd16(p + PAGEHDR + 2 * i);
		uint16_t nf = rd16(nd + 4);
		struct key k = { nd + NODEHDR, rd16(nd + 6) };
		const uint8_t *d = k.p + k.n;
		uint64_t dsize = rd16(nd) | (uint64_t)rd16(nd + 2) << 16;

		t->entries++;
		if (nf & F_BIGDATA) {
			uint64_t opg = rd64(d);

			if ((err = overflow(w, t, pgno, i, opg, dsize)))
				return err;
			d = w->m + opg * w->psize + PAGEHDR;
		}
		if (t->kind == T_FREE)
			err = free_record(w, t, pgno, i, k, d, dsize);
		else if (t->kind == T_MAIN)
			err = named_db(w, pgno, i, k, d, nf, dsize);
		else
			err = 0;
		if (err)
			return err;
	}
	return 0;
}

/* Walk one database from its record and compare what was found with what
 * the record counts. */
static int walk_tree(struct walk *w, struct tree *t)
{
	const struct dbrec *d = &t->db;
	int err;

	if (d->root == PGNO_NONE) {
		if (d->depth || d->branch || d->leaf || d->overflow || d->entries)
			return FAIL(w, "'%s': an empty database with depth %u and %llu entries",
				    t->name, d->depth,
				    (unsigned long long)d->entries);
		return 0;
	}
	if (d->depth < 1 || d->depth > MAX_DEPTH)
		return FAIL(w, "'%s': depth %u", t->name, d->depth);
	if ((err = walk_page(w, t, d->root, 1, NULL, NULL)))
		return err;
	if (t->branch != d->branch || t->leaf != d->leaf ||
	    t->entries != d->entries ||
	    (t->samples ? t->overflow > d->overflow : t->overflow != d->overflow))
		return FAIL(w, "'%s': the tree holds %llu branch, %llu leaf and %llu overflow pages and %llu entries; its record says %llu, %llu, %llu and %llu",
			    t->name, (unsigned long long)t->branch,
			    (unsigned long long)t->leaf,
			    (unsigned long long)t->overflow,
			    (unsigned long long)t->entries,
			    (unsigned long long)d->branch,
			    (unsigned long long)d->leaf,
			    (unsigned long long)d->overflow,
			    (unsigned long long)d->entries);
	w->used_pages += d->branch + d->leaf + d->overflow;
	w->info->tree_pages += d->branch + d->leaf;
	w->info->overflow_pages += d->overflow;
	if (t->samples)
		w->info->samples = d->entries;
	else if (!strcmp(t->name, "index"))
		w->info->indexes = d->entries;
	return 0;
}

/* Both meta pages as LMDB checks them when it opens the file (and a bit
 * more): header, magic, version, page size.  Sets w->psize and ids[]. */
static int meta_headers(struct walk *w, uint64_t ids[2])
{
	uint64_t psize;

	if (w->len < 2 * 512)
		return FAIL(w, "data.mdb has %llu bytes, less than two meta pages",
			    (unsigned long long)w->len);
	psize = rd32(w->m + META_AT + 24);
	if (psize < 512 || psize > 32768 || (psize & (psize - 1)) ||
	    w->len < 2 * psize)
		return FAIL(w, "meta page 0: page size %llu (file %llu bytes)",
			    (unsigned long long)psize,
			    (unsigned long long)w->len);
	for (unsigned i = 0; i < 2; i++) {
		const uint8_t *p = w->m + i * psize, *mm = p + META_AT;

		if (rd64(p) != i || rd16(p + 10) != P_META ||
		    rd32(mm) != META_MAGIC || rd32(mm + 4) != DATA_VERSION ||
		    rd64(mm + 8) != 0 || rd32(mm + 24) != psize)
			return FAIL(w, "meta page %u: page %llu, flags 0x%x, magic 0x%x, version %u, address %llu, page size %u: not an LMDB 0.9 meta page of this file",
				    i, (unsigned long long)rd64(p),
				    rd16(p + 10), rd32(mm), rd32(mm + 4),
				    (unsigned long long)rd64(mm + 8),
				    rd32(mm + 24));
		ids[i] = rd64(mm + 128);
	}
	w->psize = psize;
	return 0;
}

/* The meta page LMDB uses for snapshot `txnid` (0: the newest, as LMDB
 * picks it when it is the first to open the file) and what it says.
 * Fills w's geometry and the two core database records.  With pinned,
 * a meta page that holds another transaction than txnid is -EAGAIN: it
 * was rewritten by a later commit before it could be read. */
static int read_metas(struct walk *w, uint64_t txnid, int pinned,
		      struct dbrec *fdb, struct dbrec *mdb)
{
	uint64_t ids[2];
	const uint8_t *mm;
	unsigned use;
	int err;

	if ((err = meta_headers(w, ids)))
		return err;
	if (!txnid)
		txnid = ids[ids[0] < ids[1]];
	use = (unsigned)(txnid & 1);
	if (ids[use] != txnid) {
		if (pinned)
			return -EAGAIN;
		return FAIL(w, "meta page %u holds transaction %llu, where the newest, %llu, belongs",
			    use, (unsigned long long)ids[use],
			    (unsigned long long)txnid);
	}
	mm = w->m + use * w->psize + META_AT;
	w->txnid = txnid;
	w->npages = rd64(mm + 120) + 1;
	w->tree_end = w->len / w->psize;
	if (w->npages < 2 || w->npages - 1 > (UINT64_MAX >> 20) ||
	    w->npages > w->tree_end + MAX_UNWRITTEN)
		return FAIL(w, "meta page %u: last page %llu, in a file of %llu pages",
			    use, (unsigned long long)(w->npages - 1),
			    (unsigned long long)w->tree_end);
	if (w->tree_end > w->npages)
		w->tree_end = w->npages;
	dbrec_read(fdb, mm + 24);
	dbrec_read(mdb, mm + 24 + DBREC);
	/* LMDB 0.9 marks the free database MDB_INTEGERKEY (older releases
	 * left 0); any other flag changes how LMDB walks it (MDB_DUPSORT
	 * there is an assertion failure) */
	if (fdb->pad != w->psize || (fdb->flags & ~DB_INTEGERKEY) ||
	    mdb->pad || mdb->flags)
		return FAIL(w, "meta page %u: free database flags 0x%x, main database flags 0x%x, pad %u",
			    use, fdb->flags, mdb->flags, mdb->pad);
	w->info->psize = w->psize;
	w->info->txnid = txnid;
	w->info->pages = w->npages;
	return 0;
}

static int walk_image(const uint8_t *m, uint64_t len, uint64_t txnid,
		      int pinned, bfs_cache_check_info *info, char *errmsg)
{
	struct walk w = { .m = m, .len = len, .info = info, .msg = errmsg };
	struct tree ft = { "free", T_FREE, 0, { 0 }, 0, 0, 0, 0 };
	struct tree mt = { "main", T_MAIN, 0, { 0 }, 0, 0, 0, 0 };
	int err;

	memset(info, 0, sizeof(*info));
	if ((err = read_metas(&w, txnid, pinned, &ft.db, &mt.db)))
		return err;
	w.seen = calloc((size_t)(w.npages / 8 + 1), 1);
	w.spans = malloc((w.psize / 2) * sizeof(*w.spans));
	if (!w.seen || !w.spans) {
		err = -ENOMEM;
		bfs_seterr(errmsg, "no memory for the check of %llu pages",
			   (unsigned long long)w.npages);
		goto out;
	}
	w.seen[0] |= 3; /* the meta pages */
	if ((err = walk_tree(&w, &ft)) || (err = walk_tree(&w, &mt)))
		goto out;
	info->free_pages = w.free_pages;
	if (2 + w.used_pages + w.free_pages != w.npages) {
		err = FAIL(&w, "the databases use %llu pages and %llu are free, but the file's last page is %llu: pages are lost or counted twice",
			   (unsigned long long)w.used_pages,
			   (unsigned long long)w.free_pages,
			   (unsigned long long)(w.npages - 1));
		goto out;
	}
out:
	free(w.seen);
	free(w.spans);
	return err;
}

int bfs_cache_check_image(const void *data, size_t len,
			  bfs_cache_check_info *info, char *errmsg)
{
	bfs_cache_check_info tmp;

	if (!data)
		return -EINVAL;
	return walk_image(data, len, 0, 0, info ? info : &tmp, errmsg);
}

/* ---- the file, in a child ----------------------------------------------------- */

/* Copy the meta page LMDB uses for txnid (its first bytes) into out;
 * 0 when the file is too short for it. */
static int meta_copy(const uint8_t *m, uint64_t len, uint64_t txnid,
		     uint8_t out[PAGEHDR + META_LEN])
{
	uint64_t psize = len >= META_AT + 28 ? rd32(m + META_AT + 24) : 0;
	uint64_t at = (txnid & 1) * psize;

	if (!psize || psize > 32768 || at + PAGEHDR + META_LEN > len)
		return 0;
	memcpy(out, m + at, PAGEHDR + META_LEN);
	return 1;
}

/* In the child: map data.mdb read-only and walk it.  pin: walk the
 * snapshot of an LMDB read transaction begun first, which other
 * processes' writers cannot recycle while it lasts. */
static int check_file(const char *dir, int pin, bfs_cache_check_info *info,
		      char *errmsg)
{
	char path[PATH_MAX];
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	struct stat st;
	uint64_t txnid = 0;
	void *map = MAP_FAILED;
	size_t maplen = 0;
	uint8_t before[PAGEHDR + META_LEN], after[PAGEHDR + META_LEN];
	int fd = -1, err, tries = 0, copied;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
again:
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (st.st_size == 0) {
		err = 0; /* a new environment: LMDB writes its meta pages */
		goto out;
	}
	if (pin) {
		/* LMDB reads only the meta pages to open the environment and
		 * begin a read transaction; check them first */
		uint8_t *head = malloc(2 * 32768);
		ssize_t n = head ? pread(fd, head, 2 * 32768, 0) : -1;
		struct walk w = { .m = head, .info = info, .msg = errmsg };
		uint64_t ids[2];

		w.len = n > 0 ? (uint64_t)n : 0;
		err = head ? meta_headers(&w, ids) : -ENOMEM;
		free(head);
		if (err)
			goto out;
		if (mdb_env_create(&env) == 0) {
			mdb_env_set_maxreaders(env, BFS__MAXREADERS);
			mdb_env_set_maxdbs(env, 4);
			if (mdb_env_open(env, dir, MDB_RDONLY | MDB_NOTLS, 0600) == 0 &&
			    mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0)
				txnid = mdb_txn_id(txn);
			else
				/* LMDB cannot open it (a meta page it refuses,
				 * a map it cannot make): walk the newest
				 * snapshot unpinned, to say why.  A verdict of
				 * damage may then be a page rewritten under
				 * the walk; the caller never deletes a file
				 * others use, so that costs this process its
				 * cache, nothing more. */
				txn = NULL;
		}
		/* the snapshot's pages are all in the file by now */
		if (fstat(fd, &st) != 0) {
			err = -errno;
			goto out;
		}
	}
	maplen = (size_t)st.st_size;
	map = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		bfs_seterr(errmsg, "mapping %s: %s", path, strerror(errno));
		goto out;
	}
	copied = txn && meta_copy(map, maplen, txnid, before);
	err = walk_image(map, maplen, txnid, txn != NULL, info, errmsg);
	if (err == BFS_E_CORRUPT && copied &&
	    (!meta_copy(map, maplen, txnid, after) ||
	     memcmp(before, after, sizeof(before))))
		/* The meta page was rewritten while the walk read it (two
		 * commits by another process since the snapshot began): the
		 * verdict may rest on half of it.  Take a new snapshot. */
		err = -EAGAIN;
out:
	if (map != MAP_FAILED)
		munmap(map, maplen);
	map = MAP_FAILED;
	if (fd >= 0)
		close(fd);
	fd = -1;
	if (txn)
		mdb_txn_abort(txn);
	txn = NULL;
	if (env)
		mdb_env_close(env);
	env = NULL;
	txnid = 0;
	if (err == -EAGAIN) {
		if (++tries < 3)
			goto again;
		bfs_seterr(errmsg, "data.mdb changed too fast to be checked");
	}
	return err;
}

/* What the child sends back. */
struct verdict {
	int rc;
	bfs_cache_check_info info;
	char msg[BFS_ERRMSG_MAX];
};

struct check_arg {
	const char *dir;
	int pin;
};

static int run_check_file(void *arg, bfs_cache_check_info *info,
			  char *errmsg)
{
	const struct check_arg *a = arg;

	return check_file(a->dir, a->pin, info, errmsg);
}

int bfs__run_isolated(int (*fn)(void *arg, bfs_cache_check_info *info,
				char *errmsg),
		      void *arg, bfs_cache_check_info *info, char *errmsg)
{
	struct verdict v;
	size_t got = 0;
	int fds[2], status = 0;
	pid_t pid;

	memset(&v, 0, sizeof(v));
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		close(fds[0]);
		close(fds[1]);
		return err;
	}
	if (pid == 0) {
		const uint8_t *p = (const uint8_t *)&v;
		size_t off = 0;

		close(fds[0]);
		v.rc = fn(arg, &v.info, v.msg);
		while (off < sizeof(v)) {
			ssize_t n = write(fds[1], p + off, sizeof(v) - off);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			off += (size_t)n;
		}
		_exit(0);
	}
	close(fds[1]);
	while (got < sizeof(v)) {
		ssize_t n = read(fds[0], (uint8_t *)&v + got, sizeof(v) - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (got < sizeof(v)) {
		if (WIFSIGNALED(status))
			bfs_seterr(errmsg, "the check of data.mdb died by signal %d (%s) before it finished",
				   WTERMSIG(status), strsignal(WTERMSIG(status)));
		else
			bfs_seterr(errmsg, "the check of data.mdb ended before it finished");
		return BFS_E_CORRUPT;
	}
	v.msg[sizeof(v.msg) - 1] = '\0';
	if (info)
		*info = v.info;
	if (v.msg[0])
		bfs_seterr(errmsg, "%s", v.msg);
	return v.rc;
}

int bfs__check_dir(const char *dir, int pin, bfs_cache_check_info *info,
		   char *errmsg)
{
	struct check_arg a = { dir, pin };
	struct timespec t0, t1;
	int err;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	err = bfs__run_isolated(run_check_file, &a, info, errmsg);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (info)
		info->usec = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000ll +
					(t1.tv_nsec - t0.tv_nsec) / 1000);
	return err;
}

int bfs_cache_check(const char *dir, bfs_cache_check_info *info,
		    char *errmsg)
{
	char path[PATH_MAX];
	bfs_cache_check_info tmp;
	int fd, pin = 1, err;

	if (!dir)
		return -EINVAL;
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (access(path, F_OK) != 0) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", path, strerror(errno));
		return err;
	}
	/* nobody else has it open: no writer to pin a snapshot against */
	snprintf(path, sizeof(path), "%s/users.lock", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
		pin = 0;
	err = bfs__check_dir(dir, pin, info ? info : &tmp, errmsg);
	if (fd >= 0)
		close(fd);
	return err;
}
