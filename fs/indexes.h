/*
 * indexes.h - where a mount's shard indexes come from before the source
 * scans a shard: bfs_source_opts' index_get and index_put over, in order,
 *
 *   1. the sample cache's stored indexes (cache.h: this node's LMDB),
 *   2. the sidecar index beside the shards (engine/formats/sidecar.h:
 *      written once by `batchfs index`, read by every node), an entry used
 *      only for the identity the listing gives the shard now, and put into
 *      the store (1) when used, so that the node's next mount needs it no
 *      more,
 *   3. the scan (the source's own), whose index goes into the store,
 *
 * and, for `batchfs index`, a capture: every index the source ends up
 * with (from 2 or from a scan) is added to a new sidecar.
 *
 * The store comes before the sidecar because it is this node's own
 * (written by this build, CRC-checked, on local disk) and is the one that
 * makes a remount start at once; the sidecar is what another node wrote.
 * Both are checked against the same identity, so the order never changes
 * what is served, only where it came from.  (A DALI .idx beside a shard is
 * read by the source itself, after both: source.h.)
 *
 * Counting: the source may turn down an index it was given (another label
 * key, a gzip limit): it then scans and puts, and that put is how a refused
 * index is told from a used one, so the counts are of indexes used.  A
 * shard asked for again (a remote source first asks which shards it need
 * not fetch) counts once, by where its first answer came from.
 *
 * For a remote source the sidecar is read through the storage layer
 * (bfs_indexes_read_remote) and a shard's identity is the listing's size
 * and ETag (bfs_indexes_remote_identity); a listing without strong ETags
 * proves nothing, and such shards are scanned.
 *
 * Threads: index_get and index_put from any number of threads at once
 * (counters and the capture under one mutex, never held while a sidecar
 * entry is inflated or the store is asked).
 */
#ifndef BFS_FS_INDEXES_H
#define BFS_FS_INDEXES_H

#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "engine/formats/sidecar.h"
#include "engine/source.h"

typedef struct bfs_indexes bfs_indexes;

typedef struct {
	bfs_cache *cache;           /* the store (1), or NULL */
	const bfs_sidecar *sidecar; /* (2), or NULL; must outlive the source's open */
	bfs_sidecar_writer *capture;/* or NULL; must outlive the source's open */
	/* The identity a sidecar entry must have for shard `shard` (stamp st
	 * as the source saw it): 0 and *id filled (id->etag pointing to
	 * memory that lives until the source's open ends), or -ENOENT (none
	 * known: the sidecar is not asked).  NULL: the shard is a local
	 * file and its stamp is its identity (BFS_SIDECAR_ID_STAMP). */
	int (*identity)(void *ctx, const char *shard, const bfs_shard_stamp *st,
			bfs_sidecar_id *id);
	void *identity_ctx;
} bfs_indexes_opts;

typedef struct {
	uint64_t from_store;     /* indexes used from the store */
	uint64_t from_sidecar;   /* indexes used from the sidecar */
	uint64_t sidecar_missing;/* shards the sidecar has no entry for */
	uint64_t sidecar_stale;  /* entries for another identity: scanned */
	uint64_t sidecar_bad;    /* entries whose blob is damaged: scanned */
	uint64_t unproven;       /* shards whose identity cannot be proven (a
				  * server that gives no strong ETag): the
				  * sidecar is not asked, nothing captured */
	uint64_t refused;        /* indexes the source turned down: scanned */
	uint64_t captured;       /* indexes added to the capture */
	uint64_t capture_failed; /* not added (out of memory) */
	char first_bad[256];     /* the first damaged entry's shard, or "" */
} bfs_indexes_stats;

/* 0 or -ENOMEM.  o is copied. */
int bfs_indexes_create(const bfs_indexes_opts *o, bfs_indexes **out);
void bfs_indexes_destroy(bfs_indexes *x); /* accepts NULL */

/* Point so's index_get, index_put and index_ctx at x. */
void bfs_indexes_wire(bfs_indexes *x, bfs_source_opts *so);

/* A snapshot of the counts.  Any thread. */
void bfs_indexes_get_stats(bfs_indexes *x, bfs_indexes_stats *out);

/*
 * The sidecar file of local directory dir (dir/BFS_SIDECAR_NAME) read
 * whole: 0 and a malloc()ed *data of *len bytes for the caller to free;
 * -ENOENT when there is none; else -errno with why (cap bytes) naming the
 * file.
 */
int bfs_indexes_read_local(const char *dir, void **data, size_t *len,
			   char *why, size_t cap);

/*
 * The identity hook of a remote source (bfs_indexes_opts.identity, ctx the
 * source's bfs_shardcache): the listing's size and ETag of the shard, or
 * -ENOENT when the listing gives no strong ETag for it (an entry could
 * not be proven to fit, nor written) or does not have it.
 */
int bfs_indexes_remote_identity(void *ctx, const char *shard,
				const bfs_shard_stamp *st, bfs_sidecar_id *id);

/* Sidecars larger than this are not read (a server that says a size it
 * does not have must not make us allocate it). */
#define BFS_INDEXES_SIDECAR_MAX (16ull << 30)

/*
 * The sidecar index of a remote source (BFS_SIDECAR_NAME under
 * bfs_storage_root: PREFIX/.batchfs-index, or the brace pattern's folder's),
 * read whole before any shard byte: the object the listing has (an S3
 * prefix's; read with If-Match its ETag), else asked for by name (HEAD,
 * then a GET with If-Match: a brace pattern's, a wids index's).  0 and a
 * malloc()ed *data of *len bytes for the caller to free; -ENOENT when there
 * is none (not listed under an S3 prefix; a 404); else an error with why
 * (cap bytes) naming the object and the cause.  No retry here beyond the
 * storage's own policy.
 */
int bfs_indexes_read_remote(bfs_shardcache *sc, void **data, size_t *len,
			    char *why, size_t cap);

/*
 * Why a sidecar that opened cannot serve this source: it indexes another
 * layout, or its indexes were read for another --label-key (for TFRecord
 * any fits a mount with none, which reads no class names, unless exact:
 * `batchfs index`, whose new sidecar must say truly what its entries
 * hold).  1 with why (cap bytes) saying so, else 0.  format and label_key
 * as given (label_key NULL for the default).
 */
int bfs_indexes_sidecar_mismatch(const bfs_sidecar *sc, bfs_format format,
				 const char *label_key, int exact, char *why,
				 size_t cap);

#endif
