/*
 * store.h - where the engine keeps decoded samples from one epoch to the
 * next, as the engine sees it: look a sample up, offer finished ones.
 *
 * The engine knows no cache.  Whoever creates the engine hands it a
 * bfs_store, a small table of functions with its own context; cache/
 * implements one over LMDB (bfs_cache_store, cache/cache.h) and the mount
 * wires the two together, as bfs_source_opts takes index_get/index_put.
 * A sample is named by its identity (bfs_source_identity): the store makes
 * its own keys from it.
 *
 * What is stored is the stage-1 sample (after decode and resize, before
 * augmentation, normalization and layout), so a store stays valid across
 * epochs; the engine's fingerprint (bfs_engine_fingerprint) names every
 * setting that changes its bytes, and a store must keep samples of other
 * fingerprints apart.
 */
#ifndef BFS_STORE_H
#define BFS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/source.h"

/* One decoded sample to keep. */
typedef struct {
	bfs_sample_identity id;  /* which sample; id.shard points into the
				  * source and lives as long as it */
	int64_t label;           /* as read, before --label-offset */
	const void *data;        /* len bytes; valid and unchanged until the
				  * offer's done(arg) */
	size_t len;
} bfs_store_item;

typedef struct {
	void *ctx;
	/* A reader for one worker thread, used by one thread at a time:
	 * 0 and *reader, or an error (the worker then runs without the
	 * store).  reader_destroy accepts NULL. */
	int (*reader_create)(void *ctx, void **reader);
	void (*reader_destroy)(void *reader);
	/* Copy sample id's stored bytes (exactly len) into dst and its label
	 * into *label.  0 (a hit); -ENOENT (a miss); BFS_E_CRC (the stored
	 * copy was damaged and is dropped: the engine decodes again and
	 * counts it); any other error counts as a miss.  On error dst may
	 * hold garbage and *label is untouched. */
	int (*get)(void *reader, const bfs_sample_identity *id, void *dst,
		   size_t len, int64_t *label);
	/* Offer n decoded samples.  done(arg) is called exactly once, when
	 * the store no longer needs their bytes: later, from any thread, or
	 * before offer returns.  The engine calls it without its locks held
	 * and keeps the bytes pinned until done. */
	void (*offer)(void *ctx, const bfs_store_item *items, size_t n,
		      void (*done)(void *arg), void *arg);
	/* Wait until every offer made before has called its done. */
	void (*flush)(void *ctx);
} bfs_store;

#endif
