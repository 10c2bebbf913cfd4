/*
 * view_internal.h - what fs/view.c (nodes, opens, reads, snapshots,
 * delivery) and fs/view_files.c (the contents of the JSON and preview
 * files) share.  Not part of the contract; see view.h.
 */
#ifndef BFS_FS_VIEW_INTERNAL_H
#define BFS_FS_VIEW_INTERNAL_H

#include <pthread.h>

#include "fs/view.h"

/* index.json / preview.jpg built recently, so that the stat (which must
 * know the size) and the open that follow build them only once. */
struct bfs__made {
	bfs_node_kind kind;
	uint64_t id;
	char *buf;           /* owned here; NULL: empty, or being built */
	size_t len;
	uint64_t used;       /* LRU tick */
	int building;        /* a thread builds it, without made_lock */
};

/* A file's bytes taken at open (stats.json, index.json, preview.jpg).
 * Open files name theirs by number (fh), not by pointer, so a read that
 * races its file's release finds nothing instead of freed memory. */
struct bfs__snapshot {
	uint64_t id;
	char *buf;
	size_t len;
	struct bfs__snapshot *next;
};

#define BFS__MADE 8

struct bfs_view {
	bfs_view_opts o;
	bfs_ns_shape shape;
	char fingerprint[17];        /* bfs_engine_fingerprint of the mount */
	char *dataset_json;          /* built once, read-only after create */
	size_t dataset_len;

	pthread_mutex_t made_lock;
	pthread_cond_t made_cv;      /* an entry finished building */
	struct bfs__made made[BFS__MADE]; /* protected by made_lock */
	uint64_t made_tick;          /* protected by made_lock */

	pthread_mutex_t snap_lock;
	struct bfs__snapshot *snaps; /* protected by snap_lock */
	uint64_t next_snap;          /* protected by snap_lock */

	uint64_t last_failed;        /* atomic: last batch whose failed read
				      * was told to warn (+1; 0 none) */
};

/* The NPY header of a batch or label file into hdr (>= 128 bytes): its
 * length, and the payload's in *data_len. */
size_t bfs__file_header(const bfs_view *v, const bfs_node *n, char *hdr,
			size_t cap, size_t *data_len);

/* The files' contents, each a malloc()ed buffer for the caller:
 * 0, -ENOMEM; index.json and preview.jpg also -EIO (their batch, or the
 * drawing, failed: preview says why through warn).  index.json and
 * preview.jpg wait for their batch, for `reader`. */
int bfs__dataset_json(bfs_view *v, char **buf, size_t *len);
int bfs__stats_json(bfs_view *v, char **buf, size_t *len);
int bfs__index_json(bfs_view *v, uint64_t reader, const bfs_node *n,
		    char **buf, size_t *len);
int bfs__preview_jpg(bfs_view *v, uint64_t reader, const bfs_node *n,
		     char **buf, size_t *len);

/* opts.warn, formatted; a no-op without one. */
void bfs__warn(const bfs_view *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
