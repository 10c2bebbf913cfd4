/*
 * cache_store.c - the engine's store (engine/store.h) over the sample
 * cache: a sample's identity becomes its cache key (bfs_cache_key_make,
 * with the mount's fingerprint and source directory), a lookup is
 * bfs_cache_get_shaped, a view bfs_cache_get_ref (put_view its put_ref), an
 * offer is one bfs_cache_submit.  See cache.h.
 */
#include "cache/cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct store {
	bfs_cache *cache;
	char fingerprint[17];
	char *dir;
};

/* The reader does not know its store: the key's fingerprint and dir come
 * from the one store a reader belongs to, kept beside it. */
struct reader {
	bfs_cache_reader *r;
	const struct store *s;
};

static int reader_create(void *ctx, void **out)
{
	struct reader *rd = calloc(1, sizeof(*rd));
	int err;

	if (!rd)
		return -ENOMEM;
	rd->s = ctx;
	if ((err = bfs_cache_reader_create(rd->s->cache, &rd->r))) {
		free(rd);
		return err;
	}
	*out = rd;
	return 0;
}

static void reader_destroy(void *p)
{
	struct reader *rd = p;

	if (!rd)
		return;
	bfs_cache_reader_destroy(rd->r);
	free(rd);
}

static int get(void *p, const bfs_sample_identity *id, void *dst, size_t cap,
	       size_t *len, bfs_store_shape *shape, int64_t *label)
{
	struct reader *rd = p;
	bfs_cache_key key;
	int err;

	bfs_cache_put_ref(rd->r); /* before anything can fail: asking again */
	if ((err = bfs_cache_key_make(&key, rd->s->fingerprint, rd->s->dir, id)))
		return err;
	return bfs_cache_get_shaped(rd->r, &key, dst, cap, len, shape, label);
}

static int get_view(void *p, const bfs_sample_identity *id, const void **data, size_t *len,
		    bfs_store_shape *shape, int64_t *label)
{
	struct reader *rd = p;
	bfs_cache_key key;
	int err;

	bfs_cache_put_ref(rd->r); /* before anything can fail: asking again */
	if ((err = bfs_cache_key_make(&key, rd->s->fingerprint, rd->s->dir, id)))
		return err;
	return bfs_cache_get_ref(rd->r, &key, data, len, shape, label);
}

static int has(void *p, const bfs_sample_identity *id)
{
	struct reader *rd = p;
	bfs_cache_key key;

	if (bfs_cache_key_make(&key, rd->s->fingerprint, rd->s->dir, id))
		return 0;
	return bfs_cache_has(rd->r, &key);
}

static void put_view(void *p)
{
	struct reader *rd = p;

	bfs_cache_put_ref(rd->r);
}

static void offer(void *ctx, const bfs_store_item *items, size_t n,
		  void (*done)(void *arg), void *arg)
{
	struct store *s = ctx;
	bfs_cache_item *ci = n ? calloc(n, sizeof(*ci)) : NULL;
	size_t k = 0;

	if (n && !ci) {
		done(arg); /* not kept: decoded again next time */
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (bfs_cache_key_make(&ci[k].key, s->fingerprint, s->dir,
				       &items[i].id))
			continue;
		ci[k].label = items[i].label;
		ci[k].data = items[i].data;
		ci[k].len = items[i].len;
		ci[k].shape = items[i].shape;
		k++;
	}
	/* submit copies the array and calls done exactly once */
	bfs_cache_submit(s->cache, ci, k, done, arg);
	free(ci);
}

static int wants(void *ctx)
{
	struct store *s = ctx;

	return bfs_cache_inserting(s->cache);
}

static void flush(void *ctx)
{
	struct store *s = ctx;

	bfs_cache_flush(s->cache);
}

int bfs_cache_store_open(bfs_cache *c, const char *fingerprint,
			 const char *dir, bfs_store *out)
{
	struct store *s;

	memset(out, 0, sizeof(*out));
	if (!c || !fingerprint || strlen(fingerprint) != 16 || !dir)
		return -EINVAL;
	if (!(s = calloc(1, sizeof(*s))) || !(s->dir = strdup(dir))) {
		free(s);
		return -ENOMEM;
	}
	s->cache = c;
	memcpy(s->fingerprint, fingerprint, 17);
	out->ctx = s;
	out->reader_create = reader_create;
	out->reader_destroy = reader_destroy;
	out->get = get;
	out->offer = offer;
	out->wants = wants;
	out->flush = flush;
	out->get_view = get_view;
	out->put_view = put_view;
	out->has = has;
	return 0;
}

void bfs_cache_store_close(bfs_store *st)
{
	struct store *s = st ? st->ctx : NULL;

	if (!s)
		return;
	free(s->dir);
	free(s);
	st->ctx = NULL;
}
