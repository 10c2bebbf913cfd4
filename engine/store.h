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

/*
 * The shape of a stored sample: h x w pixels of 3 channels, and the size
 * of the source image it was made from.  A fixed-size stage-1 sample (the
 * engine's final tensor before stage 2) says its h and w and leaves src
 * at 0; a RandomResizedCrop sample is the decoded image, reduced to
 * --cache-res, of its own size, and says the source's size too, since its
 * boxes are drawn in source pixels.
 */
typedef struct {
	uint32_t h, w;
	uint32_t src_h, src_w;
} bfs_store_shape;

/* One decoded sample to keep. */
typedef struct {
	bfs_sample_identity id;  /* which sample; id.shard points into the
				  * source and lives as long as it */
	int64_t label;           /* as read, before --label-offset */
	const void *data;        /* len bytes; valid and unchanged until the
				  * offer's done(arg) */
	size_t len;
	bfs_store_shape shape;
} bfs_store_item;

typedef struct {
	void *ctx;
	/* A reader for one worker thread, used by one thread at a time:
	 * 0 and *reader, or an error (the worker then runs without the
	 * store).  reader_destroy accepts NULL. */
	int (*reader_create)(void *ctx, void **reader);
	void (*reader_destroy)(void *reader);
	/* Copy sample id's stored bytes into dst (cap bytes of room), their
	 * length into *len, their shape into *shape and the label into
	 * *label.  0 (a hit); -ENOENT (a miss); -ENOBUFS (stored, but larger
	 * than cap: *len says how large, nothing copied; ask again with
	 * room); BFS_E_CRC (the stored copy was damaged and is dropped: the
	 * engine decodes again and counts it); any other error counts as a
	 * miss.  On error dst may hold garbage and *shape, *label are
	 * untouched.  The engine checks that a fixed-size sample's length
	 * and shape are what it expects. */
	int (*get)(void *reader, const bfs_sample_identity *id, void *dst,
		   size_t cap, size_t *len, bfs_store_shape *shape,
		   int64_t *label);
	/* Offer n decoded samples.  done(arg) is called exactly once, when
	 * the store no longer needs their bytes: later, from any thread, or
	 * before offer returns.  The engine calls it without its locks held
	 * and keeps the bytes pinned until done. */
	void (*offer)(void *ctx, const bfs_store_item *items, size_t n,
		      void (*done)(void *arg), void *arg);
	/* Whether an offer now would be kept: 0 while the store is full and
	 * drops offers.  A hint, without locks: the engine decodes a whole
	 * image for the store only while it says 1, else only the box it
	 * needs.  May be NULL (always 1). */
	int (*wants)(void *ctx);
	/* Wait until every offer made before has called its done. */
	void (*flush)(void *ctx);
	/* get without the copy, for a sample the engine reads from once and
	 * keeps nothing of (a RandomResizedCrop copy it crops and resizes):
	 * 0 and *data pointing at the *len stored bytes, checked as get
	 * checks them (the CRC), with *shape and *label.  The bytes are the
	 * store's, read-only.  They stay valid and unchanged -- whatever
	 * another thread or process stores, replaces or clears meanwhile --
	 * until the same thread calls put_view(reader), or asks the reader
	 * again (get or get_view), or destroys it: at most one view per
	 * reader.  A view may pin the store's storage (an open read
	 * transaction, a read-held lock), so the engine holds it for one
	 * sample only, and while it holds it it does not wait (on a
	 * condition, on memory, on the store) or call the store from that
	 * thread; put_view comes before any of those.  Errors as get
	 * (-ENOENT, BFS_E_CRC: the copy is dropped, decode again and count
	 * it, anything else a miss; never -ENOBUFS); on error no view is
	 * held and *data, *shape, *label are untouched.  Both NULL: the
	 * store has no views, and the engine uses get. */
	int (*get_view)(void *reader, const bfs_sample_identity *id, const void **data,
			size_t *len, bfs_store_shape *shape, int64_t *label);
	/* Give back reader's view, if it holds one (after it, the bytes
	 * may change or go).  The thread that got it. */
	void (*put_view)(void *reader);
	/* Whether sample id is stored: 1 or 0, a hint (nothing read,
	 * checked or counted), for planning which samples a remote shard
	 * must still give.  As get's threads.  May be NULL (nothing is
	 * assumed stored). */
	int (*has)(void *reader, const bfs_sample_identity *id);
} bfs_store;

#endif
