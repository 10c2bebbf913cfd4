/*
 * shardfetch_main.c - build/bench_shardfetch: what the link gives a remote
 * source, and what the shard cache makes of it (engine/storage/).
 *
 *   bench_shardfetch URL [--connections N] [--parts 1,4,8,16] [--threads T]
 *                        [--repeat R] [--dir DIR]
 *
 * Credentials and endpoint as a mount takes them (AWS_* in the
 * environment).  Prints one JSON object per line:
 *   link     every object read once, whole, N at a time through
 *            bfs_storage_read_to into no buffer: the link's MB/s with N
 *            connections, for each part size (one ranged GET per part)
 *   index    bfs_source_open through an empty shard cache and no index
 *            store (the first mount's indexing), its MB/s, and its share
 *            of the link's best
 *   range    one record read alone (a ranged GET): its time, and whole, one
 *            object read alone on one connection: its time
 *   policy   a reader of T threads (as decode threads) that needs every
 *            record of every object in order, through a cache of two
 *            objects (one fetched ahead at most): a record whose object is
 *            not local yet "wait"s for the object's fetch, or is read alone
 *            ("range") while the fetch goes on, or ("default") the shard
 *            cache's own rule: by range while the link has a connection to
 *            spare, else wait; seconds, bytes and requests
 * Traffic goes only where URL (and AWS_ENDPOINT_URL) point.  Leaves DIR
 * (default a folder in $TMPDIR) empty.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/source.h"
#include "engine/storage/shardcache.h"
#include "engine/storage/storage.h"

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int null_sink(void *ctx, uint64_t off, const void *p, size_t n)
{
	(void)ctx, (void)off, (void)p, (void)n;
	return 0;
}

/* ---- the link -------------------------------------------------------------- */

struct link {
	bfs_storage *st;
	bfs_storage_object *objs;
	size_t n;
	uint64_t part;
	pthread_mutex_t lock;
	size_t next_obj;      /* protected by lock */
	uint64_t next_off;    /* protected by lock */
	int err;              /* protected by lock */
};

static void *link_main(void *arg)
{
	struct link *l = arg;
	char errmsg[BFS_ERRMSG_MAX];

	for (;;) {
		size_t k;
		uint64_t off, len;
		int err;

		pthread_mutex_lock(&l->lock);
		while (l->next_obj < l->n && l->next_off >= l->objs[l->next_obj].size) {
			l->next_obj++;
			l->next_off = 0;
		}
		if (l->err || l->next_obj >= l->n) {
			pthread_mutex_unlock(&l->lock);
			return NULL;
		}
		k = l->next_obj;
		off = l->next_off;
		len = l->objs[k].size - off < l->part ? l->objs[k].size - off : l->part;
		l->next_off += len;
		pthread_mutex_unlock(&l->lock);
		err = bfs_storage_read_to(l->st, &l->objs[k], off, len, null_sink, NULL, errmsg);
		if (err) {
			fprintf(stderr, "bench_shardfetch: %s\n", errmsg);
			pthread_mutex_lock(&l->lock);
			l->err = err;
			pthread_mutex_unlock(&l->lock);
		}
	}
}

static double link_mb_s(bfs_storage *st, bfs_storage_object *objs, size_t n,
			unsigned conns, uint64_t part, uint64_t total)
{
	struct link l = { st, objs, n, part, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0 };
	pthread_t t[256];
	double t0 = now_s(), s;

	for (unsigned i = 0; i < conns; i++)
		pthread_create(&t[i], NULL, link_main, &l);
	for (unsigned i = 0; i < conns; i++)
		pthread_join(t[i], NULL);
	s = now_s() - t0;
	printf("{\"what\": \"link\", \"connections\": %u, \"part_mib\": %.2f, \"bytes\": %llu, "
	       "\"seconds\": %.3f, \"mb_s\": %.1f}\n", conns, part / 1048576.0,
	       (unsigned long long)total, s, total / s / 1e6);
	fflush(stdout);
	return l.err ? 0 : total / s / 1e6;
}

/* ---- the policies ---------------------------------------------------------- */

struct rec {
	size_t obj;
	uint64_t off;
	uint32_t len;
};

struct reader {
	bfs_shardcache *c;
	const struct rec *recs;
	size_t n;
	pthread_mutex_t lock;
	size_t next;          /* protected by lock */
	size_t obj_first;     /* protected by lock: the first record of the
			       * object being read */
	int err;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char errmsg[BFS_ERRMSG_MAX];
	uint8_t *buf = malloc(64u << 20);

	for (;;) {
		size_t i;
		int err;

		pthread_mutex_lock(&r->lock);
		i = r->next++;
		pthread_mutex_unlock(&r->lock);
		if (i >= r->n || !buf)
			break;
		/* the plan's position: this record's (a reader in order) */
		bfs_shardcache_advance(r->c, i, 0);
		err = bfs_shardcache_read(r->c, r->recs[i].obj, r->recs[i].off, buf,
					  r->recs[i].len, errmsg);
		if (err) {
			fprintf(stderr, "bench_shardfetch: %s\n", errmsg);
			r->err = err;
			break;
		}
	}
	free(buf);
	return NULL;
}

static int run_policy(bfs_storage *st, const char *dir, const struct rec *recs,
		      size_t nrec, unsigned threads, unsigned wait_percent,
		      const char *name)
{
	bfs_shardcache_opts o = { .dir = dir, .fetchers = 8, .wait_percent = wait_percent };
	struct reader r = { .recs = recs, .n = nrec, .lock = PTHREAD_MUTEX_INITIALIZER };
	bfs_shardcache_stats s;
	bfs_http_stats h0, h1;
	uint64_t largest = 0;
	size_t nspan = 0;
	bfs_span *spans = calloc(nrec ? nrec : 1, sizeof(*spans));
	pthread_t t[64];
	char errmsg[BFS_ERRMSG_MAX] = "", cmd[PATH_MAX + 16];
	double t0, sec;
	int err;

	/* two objects' room: nothing can be fetched ahead of the reader */
	for (size_t i = 0; i < nrec; i++) {
		uint64_t size = 0;

		(void)size;
		if (!i || recs[i].obj != recs[i - 1].obj)
			spans[nspan++] = (bfs_span){ (uint32_t)recs[i].obj, i, i, 0 };
		spans[nspan - 1].last = i;
		spans[nspan - 1].bytes += recs[i].len;
	}
	for (size_t i = 0; i < nspan; i++) {
		uint64_t sz = spans[i].bytes + 4096;

		if (sz > largest)
			largest = sz;
	}
	o.max_bytes = 2 * largest + (1u << 20);
	if ((err = bfs_shardcache_open(st, &o, &r.c, errmsg))) {
		fprintf(stderr, "bench_shardfetch: %s\n", errmsg);
		free(spans);
		return err;
	}
	bfs_shardcache_plan(r.c, spans, nspan, 0, 0);
	bfs_storage_stats(st, &h0);
	t0 = now_s();
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, reader_main, &r);
	for (unsigned i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	sec = now_s() - t0;
	bfs_storage_stats(st, &h1);
	bfs_shardcache_get_stats(r.c, &s);
	printf("{\"what\": \"policy\", \"policy\": \"%s\", \"threads\": %u, \"records\": %zu, "
	       "\"seconds\": %.3f, \"records_per_s\": %.0f, \"bytes\": %llu, \"requests\": %llu, "
	       "\"range_reads\": %llu, \"fetched\": %llu, \"waits\": %llu, \"wait_seconds\": %.3f}\n",
	       name, threads, nrec, sec, nrec / sec,
	       (unsigned long long)(h1.bytes - h0.bytes),
	       (unsigned long long)(h1.requests - h0.requests),
	       (unsigned long long)s.range_reads, (unsigned long long)s.fetched,
	       (unsigned long long)s.waits, s.wait_seconds);
	fflush(stdout);
	bfs_shardcache_close(r.c);
	free(spans);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
	return r.err;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *url = NULL, *parts = "1,4,8,16", *base = NULL;
	unsigned conns = 8, threads = 2, repeat = 1;
	bfs_storage_opts so = { 0 };
	bfs_storage *st = NULL;
	bfs_storage_object *objs = NULL;
	bfs_source *src = NULL;
	bfs_shardcache *c = NULL;
	char errmsg[BFS_ERRMSG_MAX] = "", dir[PATH_MAX], tmpl[PATH_MAX];
	uint64_t total = 0;
	double best = 0;
	size_t n = 0;
	struct rec *recs = NULL;
	size_t nrec = 0;
	int err;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--connections") && i + 1 < argc)
			conns = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--parts") && i + 1 < argc)
			parts = argv[++i];
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
			repeat = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			base = argv[++i];
		else if (argv[i][0] != '-' && !url)
			url = argv[i];
		else {
			fprintf(stderr, "usage: bench_shardfetch URL [--connections N] "
				"[--parts 1,4,8,16] [--threads T] [--repeat R] [--dir DIR]\n");
			return 2;
		}
	}
	if (!url || !conns || conns > 256 || !threads || threads > 64) {
		fprintf(stderr, "usage: bench_shardfetch URL [--connections N] "
			"[--parts 1,4,8,16] [--threads T] [--dir DIR]\n");
		return 2;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/bfs-shardfetch-XXXXXX",
		 base ? base : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpl)) {
		perror("bench_shardfetch: mkdtemp");
		return 1;
	}
	bfs_http_opts_default(&so.http);
	so.http.connections = conns + threads + 2;
	if ((err = bfs_storage_open(url, &so, &st, errmsg)) ||
	    (err = bfs_storage_list(st, &objs, &n, errmsg))) {
		fprintf(stderr, "bench_shardfetch: %s\n", errmsg);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		total += objs[i].size;

	/* the link, by part size */
	for (const char *p = parts; p && *p;) {
		uint64_t mib = strtoull(p, NULL, 10);
		double mb = link_mb_s(st, objs, n, conns, mib << 20, total);

		if (mb > best)
			best = mb;
		p = strchr(p, ',');
		p = p ? p + 1 : NULL;
	}

	/* the first mount's indexing through an empty cache */
	{
		bfs_shardcache_opts co = { .dir = dir, .fetchers = conns };
		bfs_source_opts o = { 0 };
		double t0, sec;

		snprintf(dir, sizeof(dir), "%s/index", tmpl);
		t0 = now_s();
		if ((err = bfs_shardcache_open(st, &co, &c, errmsg))) {
			fprintf(stderr, "bench_shardfetch: %s\n", errmsg);
			return 1;
		}
		o.shards = c;
		if ((err = bfs_source_open(&o, &src, errmsg))) {
			fprintf(stderr, "bench_shardfetch: %s\n", errmsg);
			return 1;
		}
		sec = now_s() - t0;
		printf("{\"what\": \"index\", \"connections\": %u, \"shards\": %zu, \"bytes\": %llu, "
		       "\"seconds\": %.3f, \"mb_s\": %.1f, \"share_of_link\": %.3f}\n",
		       conns, bfs_source_nshards(src), (unsigned long long)total, sec,
		       total / sec / 1e6, best > 0 ? total / sec / 1e6 / best : 0);
		fflush(stdout);
	}

	/* the records, by object and offset */
	nrec = bfs_source_count(src);
	recs = calloc(nrec ? nrec : 1, sizeof(*recs));
	for (size_t i = 0; i < nrec; i++) {
		bfs_sample_identity id;

		bfs_source_identity(src, i, &id);
		recs[i].obj = (size_t)bfs_shardcache_find(c, id.shard);
		recs[i].off = id.offset;
		recs[i].len = id.length;
	}

	/* one record alone, one object alone */
	{
		double ms[64], w[16];
		size_t k = 0, m = nrec < 64 ? nrec : 64;
		uint8_t *buf = malloc(64u << 20);

		for (size_t i = 0; i < m && buf; i++) {
			size_t j = i * nrec / m;
			double t0 = now_s();

			if (bfs_storage_read(st, bfs_shardcache_object(c, recs[j].obj), recs[j].off,
					     buf, recs[j].len, errmsg) == 0)
				ms[k++] = (now_s() - t0) * 1e3;
		}
		qsort(ms, k, sizeof(*ms), cmp_double);
		for (size_t i = 0; i < 16 && i < n; i++) {
			double t0 = now_s();

			bfs_storage_read_to(st, &objs[i * n / (n < 16 ? n : 16)], 0,
					    objs[i * n / (n < 16 ? n : 16)].size, null_sink,
					    NULL, errmsg);
			w[i] = (now_s() - t0) * 1e3;
		}
		qsort(w, n < 16 ? n : 16, sizeof(*w), cmp_double);
		printf("{\"what\": \"range\", \"record_bytes_mean\": %.0f, \"record_ms_median\": %.2f, "
		       "\"record_ms_p90\": %.2f, \"object_bytes_mean\": %.0f, \"object_ms_median\": %.2f}\n",
		       nrec ? (double)bfs_source_count(src) ? (double)total / (double)nrec : 0 : 0,
		       k ? ms[k / 2] : 0, k ? ms[k * 9 / 10] : 0, n ? (double)total / (double)n : 0,
		       w[(n < 16 ? n : 16) / 2]);
		fflush(stdout);
		free(buf);
	}

	/* the policies, a cache of two objects, taking turns (a machine's
	 * noise falls on each alike) */
	for (unsigned r = 0; r < repeat; r++) {
		snprintf(dir, sizeof(dir), "%s/wait", tmpl);
		run_policy(st, dir, recs, nrec, threads, 1, "wait");
		snprintf(dir, sizeof(dir), "%s/range", tmpl);
		run_policy(st, dir, recs, nrec, threads, 101, "range");
		snprintf(dir, sizeof(dir), "%s/default", tmpl);
		run_policy(st, dir, recs, nrec, threads, 0, "default");
	}

	free(recs);
	bfs_source_close(src);
	bfs_shardcache_close(c);
	bfs_storage_objects_free(objs, n);
	bfs_storage_close(st);
	snprintf(dir, sizeof(dir), "rm -rf '%s'", tmpl);
	(void)!system(dir);
	return 0;
}
