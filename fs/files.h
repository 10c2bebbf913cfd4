/*
 * files.h - the contents of the mount's files that are not batches:
 *
 *   dataset.json          the settings, the shape, the classes (built once)
 *   stats.json            live counters and every error (at each open)
 *   batch-N.index.json    where each sample of a batch came from, its label
 *                         and the augmentation drawn (waits for the batch)
 *   batch-N.preview.jpg   a contact sheet of the batch (waits for it)
 *
 * and the NPY headers of batch and label files, built from the geometry
 * alone.  FUSE-free, and free of the view that serves them (fs/view.c),
 * so each is a function of what it is given.
 *
 * Threads: any, at once.  Errors are 0 or a negative errno.
 */
#ifndef BFS_FS_FILES_H
#define BFS_FS_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "cache/cache.h"
#include "engine/engine.h"
#include "engine/source.h"
#include "engine/storage/shardcache.h"
#include "fs/indexes.h"
#include "fs/history.h"
#include "fs/namespace.h"

/* What the FUSE side knows and stats.json shows. */
typedef struct {
	int passthrough;           /* the kernel reads backing files now */
	uint64_t passthrough_opens;
	uint64_t bytes_pushed;     /* copied into the page cache */
	int remote;                /* the source is s3:// or http(s):// */
	bfs_http_stats net;        /* its requests so far */
	bfs_shardcache_stats shards; /* what the shard cache did so far */
	const char *shard_cache;   /* its folder */
	/* where the shards' indexes came from when the mount began */
	bfs_indexes_stats indexes; /* the store's and the sidecar's */
	int sidecar;               /* a sidecar index was read and fit */
	size_t index_dali;         /* shards indexed from DALI .idx files */
	size_t index_total;        /* shards in all */
} bfs_files_io;

/* What the files are made of; everything must outlive the calls. */
typedef struct {
	const bfs_ns_shape *shape; /* the namespace: which ranks, epochs and
				    * batches the nodes name */
	bfs_source *src;
	const char *shard_cache;   /* with origin: its folder in the shard
				    * cache */
	const char *origin;        /* the source as given (a URL); NULL: the
				    * source's directory */
	bfs_engine *eng;
	bfs_cache *cache;          /* NULL: none */
	const char *cache_fp;      /* bfs_cache_fingerprint of the mount */
	const char *image_key;     /* as asked for; NULL: the defaults */
	const char *label_key;
	const char *fingerprint;   /* bfs_engine_fingerprint of the engine */
	struct timespec started;   /* CLOCK_MONOTONIC when the mount started
				    * (stats.json's uptime_seconds) */
	/* Fills *io for stats.json; may be NULL (all zero). */
	void (*io)(void *ctx, bfs_files_io *io);
	/* stats.json's "history" (fs/history.h); NULL: none shown */
	const bfs_history *history;
	/* Told why a preview could not be drawn (the call only says -EIO);
	 * may be NULL. */
	void (*warn)(void *ctx, const char *msg);
	void *ctx;
} bfs_files;

/* Each returns a malloc()ed buffer for the caller to free: 0 with *buf
 * and *len, or -ENOMEM.  index.json and preview.jpg are made for batch
 * node n (a BATCH-level node; its kind does not matter) and wait for the
 * batch as reader `reader` would (starting it if need be); a failed batch
 * still gets its index.json, with its error, but no preview (-EIO). */
int bfs_files_dataset_json(const bfs_files *f, char **buf, size_t *len);
int bfs_files_stats_json(const bfs_files *f, char **buf, size_t *len);
int bfs_files_index_json(const bfs_files *f, uint64_t reader,
			 const bfs_node *n, char **buf, size_t *len);
int bfs_files_preview_jpg(const bfs_files *f, uint64_t reader,
			  const bfs_node *n, char **buf, size_t *len);

/* The NPY header of batch or label file n into hdr (cap >= 128 bytes):
 * its length, and the payload's in *data_len. */
size_t bfs_files_npy_header(const bfs_files *f, const bfs_node *n, char *hdr,
			    size_t cap, size_t *data_len);

#endif
