/*
 * indexes.c - the shard indexes in front of the scan (indexes.h): the
 * store, then the sidecar, with the capture for `batchfs index` and the
 * counts of where each used index came from.
 */
#include "fs/indexes.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"

/* The first answer for a shard: an index handed out (from the store or
 * the sidecar), or why the sidecar gave none. */
enum { FROM_STORE = 1, FROM_SIDECAR, MISS_MISSING, MISS_STALE, MISS_BAD, MISS_NONE };

/* The shards an index was handed out for, by name, with where it came
 * from: a put for one of them means the source turned it down. */
struct served {
	char *name;
	int from;                 /* FROM_* or MISS_* */
};

struct bfs_indexes {
	bfs_indexes_opts o;
	pthread_mutex_t lock;
	bfs_indexes_stats st;     /* protected by lock */
	struct served *set;       /* protected by lock: open addressing */
	size_t set_cap, set_n;
};

int bfs_indexes_create(const bfs_indexes_opts *o, bfs_indexes **out)
{
	bfs_indexes *x = calloc(1, sizeof(*x));

	*out = NULL;
	if (!x)
		return -ENOMEM;
	x->o = *o;
	pthread_mutex_init(&x->lock, NULL);
	*out = x;
	return 0;
}

void bfs_indexes_destroy(bfs_indexes *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->set_cap; i++)
		free(x->set[i].name);
	free(x->set);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

void bfs_indexes_get_stats(bfs_indexes *x, bfs_indexes_stats *out)
{
	pthread_mutex_lock(&x->lock);
	*out = x->st;
	pthread_mutex_unlock(&x->lock);
}

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* The slot of name in the set (empty when it is not there).  Under lock. */
static struct served *slot(bfs_indexes *x, const char *name)
{
	size_t i = (size_t)fnv(name) & (x->set_cap - 1);

	while (x->set[i].name && strcmp(x->set[i].name, name))
		i = (i + 1) & (x->set_cap - 1);
	return &x->set[i];
}

/* Remember the first answer for shard `name`: 1 the first time (a source
 * may ask again for a shard: its first answer is where the index came
 * from, or why there was none), 0 after, -ENOMEM (then the count may be
 * off by one shard: nothing else).  Under lock. */
static int remember(bfs_indexes *x, const char *name, int from)
{
	struct served *s;

	if (2 * (x->set_n + 1) > x->set_cap) {
		size_t cap = x->set_cap ? x->set_cap * 2 : 256;
		struct served *old = x->set, *n = calloc(cap, sizeof(*n));
		size_t ocap = x->set_cap;

		if (!n)
			return -ENOMEM;
		x->set = n;
		x->set_cap = cap;
		for (size_t i = 0; i < ocap; i++)
			if (old[i].name)
				*slot(x, old[i].name) = old[i];
		free(old);
	}
	s = slot(x, name);
	if (s->name)
		return 0;
	if (!(s->name = strdup(name)))
		return -ENOMEM;
	x->set_n++;
	s->from = from;
	return 1;
}

/* Add an index to the capture.  Under lock. */
static void capture(bfs_indexes *x, const char *shard, const bfs_sidecar_id *id,
		    const void *blob, size_t len)
{
	int err = bfs_sidecar_writer_add(x->o.capture, shard, id, blob, len);

	if (err == 0)
		x->st.captured++;
	else
		x->st.capture_failed++;
}

/* The sidecar identity of a shard: the hook's, or the local stamp's. */
static int identity(bfs_indexes *x, const char *shard, const bfs_shard_stamp *st,
		    bfs_sidecar_id *id)
{
	memset(id, 0, sizeof(*id));
	if (x->o.identity)
		return x->o.identity(x->o.identity_ctx, shard, st, id);
	id->kind = BFS_SIDECAR_ID_STAMP;
	id->size = st->size;
	id->mtime_ns = st->mtime_ns;
	id->ino = st->ino;
	id->ctime_ns = st->ctime_ns;
	return 0;
}

static int index_get(void *ctx, const char *dir, const char *shard,
		     const bfs_shard_stamp *st, void **blob, size_t *len)
{
	bfs_indexes *x = ctx;
	bfs_sidecar_id id;
	int have_id = -ENOENT, from = 0, err = -ENOENT, first;

	if (x->o.cache && bfs_cache_index_get(x->o.cache, dir, shard, st, blob, len) == 0)
		from = FROM_STORE;
	if ((!from && x->o.sidecar) || x->o.capture)
		have_id = identity(x, shard, st, &id);
	if (!from && x->o.sidecar && have_id == 0) {
		err = bfs_sidecar_lookup(x->o.sidecar, shard, &id, blob, len);
		if (err == 0)
			from = FROM_SIDECAR;
	}
	pthread_mutex_lock(&x->lock);
	{
		int verdict = from ? from
			    : !x->o.sidecar || have_id != 0 || err == -ENOMEM ? MISS_NONE
			    : err == -ENOENT ? MISS_MISSING
			    : err == -ESTALE ? MISS_STALE : MISS_BAD;

		first = remember(x, shard, verdict);
		if (first > 0 && !from && x->o.sidecar && have_id != 0)
			x->st.unproven++;
		if (first > 0) {
			switch (verdict) {
			case FROM_STORE: x->st.from_store++; break;
			case FROM_SIDECAR: x->st.from_sidecar++; break;
			case MISS_MISSING: x->st.sidecar_missing++; break;
			case MISS_STALE: x->st.sidecar_stale++; break;
			case MISS_BAD:
				x->st.sidecar_bad++;
				if (!x->st.first_bad[0])
					snprintf(x->st.first_bad, sizeof(x->st.first_bad),
						 "%s", shard);
				break;
			}
		}
	}
	if (from && x->o.capture && have_id == 0)
		capture(x, shard, &id, *blob, *len);
	pthread_mutex_unlock(&x->lock);
	/* the node's next mount has it from its own store (once: a source
	 * may ask again before the store's writer has it) */
	if (from == FROM_SIDECAR && x->o.cache && first != 0)
		bfs_cache_index_put(x->o.cache, dir, shard, st, *blob, *len);
	return from ? 0 : -ENOENT;
}

int bfs_indexes_remote_identity(void *ctx, const char *shard,
				const bfs_shard_stamp *st, bfs_sidecar_id *id)
{
	bfs_shardcache *sc = ctx;
	ssize_t k = bfs_shardcache_find(sc, shard);
	const bfs_storage_object *o;

	(void)st;
	if (k < 0)
		return -ENOENT;
	o = bfs_shardcache_object(sc, (size_t)k);
	/* only a strong ETag proves the bytes unchanged (SIDECAR_INDEX.md) */
	if (!o->etag[0] || !strncmp(o->etag, "W/", 2) ||
	    strlen(o->etag) > BFS_SIDECAR_ETAG_MAX)
		return -ENOENT;
	memset(id, 0, sizeof(*id));
	id->kind = BFS_SIDECAR_ID_ETAG;
	id->size = o->size;
	id->etag = o->etag;
	return 0;
}

int bfs_indexes_read_remote(bfs_shardcache *sc, void **data, size_t *len,
			    char *why, size_t cap)
{
	bfs_storage *st = bfs_shardcache_storage(sc);
	char errmsg[BFS_ERRMSG_MAX] = "";
	ssize_t k = bfs_shardcache_find(sc, BFS_SIDECAR_NAME);
	bfs_storage_object own = { 0 };
	const bfs_storage_object *obj;
	void *buf;
	int err;

	*data = NULL;
	*len = 0;
	if (k >= 0) {
		obj = bfs_shardcache_object(sc, (size_t)k);
	} else if (!strncmp(bfs_storage_root(st), "s3://", 5)) {
		return -ENOENT; /* the listing of the prefix would have it */
	} else {
		if ((err = bfs_storage_stat(st, BFS_SIDECAR_NAME, &own, errmsg))) {
			if (err != -ENOENT)
				snprintf(why, cap, "%s%s: %s", bfs_storage_root(st),
					 BFS_SIDECAR_NAME, errmsg[0] ? errmsg : bfs_strerror(err));
			return err;
		}
		obj = &own;
	}
	if (obj->size > BFS_INDEXES_SIDECAR_MAX || obj->size > SIZE_MAX - 1) {
		snprintf(why, cap, "%s%s: %llu bytes, more than a sidecar may be (%llu)",
			 bfs_storage_root(st), BFS_SIDECAR_NAME,
			 (unsigned long long)obj->size,
			 (unsigned long long)BFS_INDEXES_SIDECAR_MAX);
		free(own.name);
		return -EFBIG;
	}
	if (!(buf = malloc(obj->size ? (size_t)obj->size : 1))) {
		snprintf(why, cap, "%s%s: %llu bytes: out of memory", bfs_storage_root(st),
			 BFS_SIDECAR_NAME, (unsigned long long)obj->size);
		free(own.name);
		return -ENOMEM;
	}
	err = obj->size ? bfs_storage_read(st, obj, 0, buf, (size_t)obj->size, errmsg) : 0;
	if (err) {
		snprintf(why, cap, "%s%s: %s", bfs_storage_root(st), BFS_SIDECAR_NAME,
			 errmsg[0] ? errmsg : bfs_strerror(err));
		free(buf);
		free(own.name);
		return err == -ENOENT ? -EIO : err; /* listed, then gone: not "none" */
	}
	*data = buf;
	*len = (size_t)obj->size;
	free(own.name);
	return 0;
}

static int index_put(void *ctx, const char *dir, const char *shard,
		     const bfs_shard_stamp *st, const void *blob, size_t len)
{
	bfs_indexes *x = ctx;
	bfs_sidecar_id id;
	int err = 0, have_id = x->o.capture ? identity(x, shard, st, &id) : -ENOENT;

	if (x->o.cache)
		err = bfs_cache_index_put(x->o.cache, dir, shard, st, blob, len);
	pthread_mutex_lock(&x->lock);
	if (x->set_cap) {
		struct served *s = slot(x, shard);

		if (s->name && (s->from == FROM_STORE || s->from == FROM_SIDECAR)) {
			/* handed out, turned down, scanned */
			if (s->from == FROM_STORE)
				x->st.from_store--;
			else
				x->st.from_sidecar--;
			x->st.refused++;
			if (x->o.capture) /* captured: the scan's replaces it */
				x->st.captured--;
			s->from = MISS_NONE;
		}
	}
	if (x->o.capture && have_id == 0)
		capture(x, shard, &id, blob, len);
	pthread_mutex_unlock(&x->lock);
	return err;
}

void bfs_indexes_wire(bfs_indexes *x, bfs_source_opts *so)
{
	so->index_get = index_get;
	so->index_put = index_put;
	so->index_ctx = x;
}

int bfs_indexes_read_local(const char *dir, void **data, size_t *len,
			   char *why, size_t cap)
{
	char path[PATH_MAX];
	struct stat st;
	size_t got = 0;
	uint8_t *buf;
	int fd, err;

	*data = NULL;
	*len = 0;
	snprintf(path, sizeof(path), "%s/%s", dir, BFS_SIDECAR_NAME);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		err = -errno;
		if (err != -ENOENT)
			snprintf(why, cap, "%s: %s", path, strerror(errno));
		return err;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		err = fstat(fd, &st) != 0 ? -errno : -EINVAL;
		snprintf(why, cap, "%s: not a regular file", path);
		close(fd);
		return err;
	}
	if (!(buf = malloc(st.st_size ? (size_t)st.st_size : 1))) {
		snprintf(why, cap, "%s: %lld bytes: out of memory", path,
			 (long long)st.st_size);
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

		if (r <= 0) {
			err = r < 0 ? -errno : -EIO;
			snprintf(why, cap, "%s: %s", path, r < 0 ? strerror(errno)
				 : "shorter than its size (changed while read)");
			free(buf);
			close(fd);
			return err;
		}
		got += (size_t)r;
	}
	close(fd);
	*data = buf;
	*len = got;
	return 0;
}

int bfs_indexes_sidecar_mismatch(const bfs_sidecar *sc, bfs_format format,
				 const char *label_key, int exact, char *why,
				 size_t cap)
{
	bfs_sidecar_info in;
	const char *want = label_key ? label_key : "", *had;
	int tar;

	bfs_sidecar_get_info(sc, &in);
	tar = in.format == BFS_SIDECAR_TAR;
	had = in.label_key;
	if ((format == BFS_FORMAT_TAR && !tar) ||
	    (format == BFS_FORMAT_TFRECORD && tar) || format == BFS_FORMAT_FOLDER) {
		snprintf(why, cap, "it indexes %s shards, not %s ones",
			 tar ? "tar" : "TFRecord", bfs_format_name(format));
		return 1;
	}
	/* TFRecord: the key the labels were read with (the default named or
	 * not is the same key), and any for none, which reads no names;
	 * tar: where labels come from, which naming a key changes (a .json
	 * member's, not .cls) */
	if (!tar) {
		if (!want[0])
			want = "image/class/label";
		if (!had[0])
			had = "image/class/label";
		if (!strcmp(want, had) || (!exact && !strcmp(want, "none")))
			return 0;
	} else if (!strcmp(want, had)) {
		return 0;
	}
	snprintf(why, cap, "it was written with --label-key %s, not %s",
		 in.label_key[0] ? in.label_key : "(the default)",
		 label_key && label_key[0] ? label_key : "(the default)");
	return 1;
}
