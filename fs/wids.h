/*
 * wids.h - WebDataset's wids shard index (a JSON file: {"__kind__":
 * "wids-shard-index-v1", "wids_version": 1, "shardlist": [{"url": ...,
 * "nsamples": N, "filesize": B}, ...]}), read so that a mount of the
 * index's URL names the shards of an http(s) source, and so that each
 * shard's sample count (and size, when given) is checked against what
 * batchfs finds in it.
 *
 * URLs are resolved as wids resolves them (wids_specs.urlmerge): a URL
 * with a scheme stands as it is, one starting with '/' keeps the index's
 * scheme and host, any other is joined to the folder of the index's URL
 * (or to "base" when the file gives one) and its "." and ".." segments
 * folded.  The entries of "datasets" that hold a shardlist of their own
 * are read too (with their "base"); one that names another file
 * ("source_url") is refused, not fetched.
 *
 * A mount of an index's URL (`batchfs mount https://HOST/PATH/index.json
 * MNT`) fetches it (bfs_wids_fetch), opens the storage over its shards'
 * URLs (storage.h opts.urls: each still asked for its size and ETag with
 * HEAD, the index's filesize taken only when HEAD gives none), and after
 * indexing says which shards hold another count than the index says
 * (bfs_wids_check): a warning, never a refusal.
 *
 * Threads: bfs_wids_fetch from any thread; the rest are pure functions.
 */
#ifndef BFS_FS_WIDS_H
#define BFS_FS_WIDS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/storage/storage.h"

typedef struct {
	char *url;          /* resolved, absolute */
	const char *name;   /* url past root: the shard's name in the source */
	uint64_t nsamples;  /* as the index says */
	int64_t filesize;   /* as the index says, or -1 when it does not */
} bfs_wids_shard;

typedef struct {
	bfs_wids_shard *v;  /* in the index's order */
	size_t n;
	char *root;         /* the longest folder ("scheme://host/.../") that
			     * every shard's URL starts with */
	char *name;         /* the index's "name", or NULL */
} bfs_wids;

/* 1 when url names a wids index by its look: an http(s) URL whose path
 * ends in ".json" (any case), with no brace pattern. */
int bfs_wids_is_index_url(const char *url);

/*
 * Parse text[0..len), the index fetched from index_url (an absolute
 * http(s) URL).  Returns 0 and *out (free with bfs_wids_free), or
 * -EINVAL with errmsg (BFS_ERRMSG_MAX bytes) saying what is wrong: not
 * JSON (with the byte offset), another "__kind__", a "wids_version" other
 * than 1, no shards, a shard without a string "url" or a whole
 * non-negative "nsamples", a URL that is not http(s) once resolved, a
 * URL given twice, shards on more than one host, a "source_url" dataset;
 * or -ENOMEM.
 */
int bfs_wids_parse(const char *text, size_t len, const char *index_url,
		   bfs_wids **out, char *errmsg);
void bfs_wids_free(bfs_wids *w); /* accepts NULL */

/* The most bytes an index may have (a JSON of a million shards is well
 * under it). */
#define BFS_WIDS_MAX_BYTES (256u << 20)

/*
 * Fetch the index at index_url (http(s), through the storage layer with
 * opts o: TLS, deadlines and retries as a mount's) and parse it.  0 and
 * *out; -ENOENT (404), -EFBIG (over BFS_WIDS_MAX_BYTES), the storage's
 * errors, or bfs_wids_parse's; errmsg says which, naming the URL.
 */
int bfs_wids_fetch(const char *index_url, const bfs_storage_opts *o,
		   bfs_wids **out, char *errmsg);

/* The shard named `name`, or NULL. */
const bfs_wids_shard *bfs_wids_find(const bfs_wids *w, const char *name);

/*
 * What the index says against what a mount found: for each of its shards,
 * the sample count the source indexed (counts[i] of names[i], n shards;
 * a shard of the index the source does not have counts as 0 samples).
 * Returns how many shards disagree, with note (cap bytes) naming the
 * first ("shard-000003.tar holds 9 samples, the wids index says 10; 2
 * shards disagree") when any does, "" when none.
 */
size_t bfs_wids_check(const bfs_wids *w, const char *const *names,
		      const uint64_t *counts, size_t n, char *note, size_t cap);

#endif
