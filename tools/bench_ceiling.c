/*
 * bench_ceiling.c - the decode+resize ceiling for `make bench` (see
 * bench_ceiling.h): JPEG bytes preloaded, one thread per core, nothing but
 * engine/pixels/decode and engine/pixels/resize in the timed loop.
 *
 * DESIGN
 * The main thread loads every sample into `struct corpus` (read-only once
 * the threads start).  Each pass hands out sample indices through one
 * atomic counter; a worker owns its bfs_decoder, resize scratch and batch
 * buffer for the whole run and reports its nanoseconds of decode and
 * resize into its own `struct cworker` (read by main after the join).
 */
#include "tools/bench_ceiling.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/pixels/decode.h"
#include "engine/base/error.h"
#include "engine/engine.h"
#include "engine/pixels/resize.h"
#include "engine/pixels/resize_pil.h"
#include "engine/source.h"
#include "engine/base/types.h"

#define CEIL_BATCH 32
#define CEIL_MAX_PASSES 32

struct corpus {
	uint8_t *bytes;         /* every JPEG, back to back */
	size_t *off, *len;      /* sample i is bytes[off[i] .. off[i]+len[i]) */
	size_t n;
};

struct cfg {
	const char *dir;
	bfs_dtype dtype;
	int height, width;
	unsigned threads;
	unsigned repeat;
	uint64_t limit;
	int quiet;
	int pil; /* --resize-filter pil: Pillow's decode and resize */
};

struct pass {
	const struct corpus *c;
	const struct cfg *g;
	size_t count;            /* samples in this pass */
	size_t next;             /* atomic: next sample to hand out */
	int failed;              /* atomic: set by the first worker that fails */
};

struct cworker {
	pthread_t thread;
	struct pass *p;          /* the pass being run; set by main */
	bfs_decoder *dec;
	void *scratch;
	size_t scratch_cap;
	uint8_t *dst;            /* CEIL_BATCH samples */
	size_t sample_bytes;
	unsigned slot;           /* next position in dst */
	/* thread CPU time in decode, in resize, and in all; written by the
	 * worker only, read by main after the join */
	uint64_t decode_ns, resize_ns, cpu_ns, samples;
	char errmsg[BFS_ERRMSG_MAX];
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* CPU time of the calling thread: what decode and resize cost, whatever
 * else the machine runs at the same time. */
static uint64_t cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static int usage(void)
{
	fprintf(stderr,
		"usage: bench_ceiling SHARD_DIR [--dtype float32|uint8] [--size HxW]\n"
		"                     [--threads N] [--repeat R] [--limit N] [--quiet]\n"
		"                     [--resize-filter tf|pil]\n");
	return 2;
}

static void corpus_free(struct corpus *c)
{
	free(c->bytes);
	free(c->off);
	free(c->len);
	memset(c, 0, sizeof(*c));
}

/* Load every sample (up to limit) of dir into c.  0 or an error (errmsg). */
static int corpus_load(const struct cfg *g, struct corpus *c, char *errmsg)
{
	bfs_source_opts so = { .dir = g->dir };
	bfs_source *src = NULL;
	bfs_buf buf = { 0 };
	size_t cap = 0, used = 0;
	uint64_t n;
	int err;

	memset(c, 0, sizeof(*c));
	if ((err = bfs_source_open(&so, &src, errmsg)))
		return err;
	n = bfs_source_count(src);
	if (g->limit && n > g->limit)
		n = g->limit;
	c->off = calloc(n ? n : 1, sizeof(*c->off));
	c->len = calloc(n ? n : 1, sizeof(*c->len));
	if (!c->off || !c->len) {
		err = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < n; i++) {
		const uint8_t *jpeg;
		size_t len;
		int64_t label;

		if ((err = bfs_source_read(src, i, &buf, &jpeg, &len, &label,
					   errmsg)))
			goto out;
		if (used + len > cap) {
			size_t ncap = cap ? cap * 2 : (64u << 20);
			uint8_t *nb;

			while (ncap < used + len)
				ncap *= 2;
			if (!(nb = realloc(c->bytes, ncap))) {
				err = -ENOMEM;
				goto out;
			}
			c->bytes = nb;
			cap = ncap;
		}
		memcpy(c->bytes + used, jpeg, len);
		c->off[i] = used;
		c->len[i] = len;
		used += len;
	}
	c->n = (size_t)n;
out:
	bfs_buf_free(&buf);
	bfs_source_close(src);
	if (err)
		corpus_free(c);
	return err;
}

/* Decode and resize sample i into the worker's next batch position. */
static int one_sample(struct cworker *w, const struct corpus *c,
		      const struct cfg *g, size_t i)
{
	const uint8_t *rgb;
	int sw, sh, err;
	size_t need;
	uint64_t t0 = cpu_ns(), t1;

	err = bfs_decode_rgb(w->dec, c->bytes + c->off[i], c->len[i], 0, &rgb,
			     &sw, &sh, w->errmsg);
	t1 = cpu_ns();
	w->decode_ns += t1 - t0;
	if (err)
		return err;
	need = g->pil ? bfs_resize_pil_scratch_size(sw, sh, g->width, g->height)
		      : bfs_resize_scratch_size(sw, sh, g->width, g->height);
	if (need > w->scratch_cap) {
		void *ns = realloc(w->scratch, need);

		if (!ns)
			return -ENOMEM;
		w->scratch = ns;
		w->scratch_cap = need;
	}
	if (g->pil)
		err = bfs_resize_pil(rgb, sw, sh, (size_t)sw * 3,
				     w->dst + (size_t)w->slot * w->sample_bytes, g->width,
				     g->height, g->dtype, 0, w->scratch);
	else
		err = bfs_resize_rgb(rgb, sw, sh, (size_t)sw * 3,
				     w->dst + (size_t)w->slot * w->sample_bytes,
				     g->width, g->height, g->dtype, w->scratch);
	w->resize_ns += cpu_ns() - t1;
	w->slot = (w->slot + 1) % CEIL_BATCH;
	w->samples++;
	if (err)
		bfs_seterr(w->errmsg, "resize %dx%d failed", sw, sh);
	return err;
}

static void *worker_main(void *arg)
{
	struct cworker *w = arg;
	struct pass *p = w->p;
	uint64_t c0 = cpu_ns();

	for (;;) {
		size_t i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
		int err;

		if (i >= p->count || __atomic_load_n(&p->failed, __ATOMIC_RELAXED))
			break;
		if ((err = one_sample(w, p->c, p->g, i % p->c->n))) {
			if (!w->errmsg[0])
				bfs_seterr(w->errmsg, "sample %zu: %s", i,
					   bfs_strerror(err));
			__atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
			break;
		}
	}
	w->cpu_ns += cpu_ns() - c0;
	return NULL;
}

/* Run one pass of count samples on every worker.  Returns its seconds, or
 * a negative number when a worker failed (its errmsg says why). */
static double run_pass(struct cworker *ws, unsigned nw, struct pass *p)
{
	uint64_t t0 = now_ns();
	unsigned started = 0;

	for (unsigned k = 0; k < nw; k++) {
		ws[k].p = p;
		if (pthread_create(&ws[k].thread, NULL, worker_main, &ws[k]))
			break;
		started++;
	}
	if (started < nw)
		__atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
	for (unsigned k = 0; k < started; k++)
		pthread_join(ws[k].thread, NULL);
	if (p->failed)
		return -1.0;
	return (double)(now_ns() - t0) / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int parse_args(int argc, char **argv, struct cfg *g)
{
	memset(g, 0, sizeof(*g));
	g->dtype = BFS_DTYPE_FLOAT32;
	g->height = g->width = 224;
	g->repeat = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (!strcmp(a, "--quiet")) {
			g->quiet = 1;
		} else if (a[0] != '-') {
			if (g->dir)
				return usage();
			g->dir = a;
		} else if (!v) {
			return usage();
		} else if (!strcmp(a, "--dtype")) {
			if (!strcmp(v, "float32"))
				g->dtype = BFS_DTYPE_FLOAT32;
			else if (!strcmp(v, "uint8"))
				g->dtype = BFS_DTYPE_UINT8;
			else
				return usage();
			i++;
		} else if (!strcmp(a, "--resize-filter")) {
			if (!strcmp(v, "tf") || !strcmp(v, "pil"))
				g->pil = v[0] == 'p';
			else
				return usage();
			i++;
		} else if (!strcmp(a, "--size")) {
			if (sscanf(v, "%dx%d", &g->height, &g->width) != 2 ||
			    g->height < 1 || g->width < 1 || g->height > 16384 ||
			    g->width > 16384)
				return usage();
			i++;
		} else if (!strcmp(a, "--threads") || !strcmp(a, "--repeat") ||
			   !strcmp(a, "--limit")) {
			unsigned long long x = strtoull(v, &end, 10);

			if (*end || end == v)
				return usage();
			if (a[2] == 't') {
				if (x < 1 || x > 1024)
					return usage();
				g->threads = (unsigned)x;
			} else if (a[2] == 'r') {
				if (x < 1 || x > CEIL_MAX_PASSES)
					return usage();
				g->repeat = (unsigned)x;
			} else {
				g->limit = x;
			}
			i++;
		} else {
			return usage();
		}
	}
	if (!g->dir)
		return usage();
	if (!g->threads)
		g->threads = bfs_engine_cores(); /* as batchfs's --threads auto */
	return 0;
}

int bfs_bench_ceiling_main(int argc, char **argv)
{
	struct cfg g;
	struct corpus c;
	struct cworker *ws = NULL;
	double secs[CEIL_MAX_PASSES], sorted[CEIL_MAX_PASSES];
	char errmsg[BFS_ERRMSG_MAX] = "";
	uint64_t dec_ns = 0, rsz_ns = 0, all_ns = 0, loaded_bytes = 0;
	int rc = 1, err;

	if ((rc = parse_args(argc, argv, &g)))
		return rc;
	rc = 1;
	if ((err = corpus_load(&g, &c, errmsg))) {
		fprintf(stderr, "bench_ceiling: %s: %s\n", g.dir,
			errmsg[0] ? errmsg : bfs_strerror(err));
		return 1;
	}
	if (c.n == 0) {
		fprintf(stderr, "bench_ceiling: %s: no samples\n", g.dir);
		goto out;
	}
	for (size_t i = 0; i < c.n; i++)
		loaded_bytes += c.len[i];
	if (!(ws = calloc(g.threads, sizeof(*ws))))
		goto oom;
	for (unsigned k = 0; k < g.threads; k++) {
		struct cworker *w = &ws[k];

		w->sample_bytes = (size_t)g.height * g.width * 3 *
				  bfs_dtype_size(g.dtype);
		if ((err = bfs_decoder_create(&w->dec)))
			goto oom;
		if (g.pil && (err = bfs_decoder_set_method(w->dec, BFS_DECODE_PIL)))
			goto oom;
		if (posix_memalign((void **)&w->dst, 2u << 20,
				   w->sample_bytes * CEIL_BATCH)) {
			w->dst = NULL;
			goto oom;
		}
#ifdef MADV_HUGEPAGE
		madvise(w->dst, w->sample_bytes * CEIL_BATCH, MADV_HUGEPAGE);
#endif
		memset(w->dst, 0, w->sample_bytes * CEIL_BATCH);
	}

	/* Warm-up: grow every decoder and scratch, fault in the code. */
	{
		struct pass p = { .c = &c, .g = &g,
				  .count = c.n < 8u * g.threads ? c.n : 8u * g.threads };

		if (run_pass(ws, g.threads, &p) < 0)
			goto failed;
		for (unsigned k = 0; k < g.threads; k++)
			ws[k].decode_ns = ws[k].resize_ns = ws[k].cpu_ns =
				ws[k].samples = 0;
	}
	for (unsigned r = 0; r < g.repeat; r++) {
		struct pass p = { .c = &c, .g = &g, .count = c.n };

		if (!g.quiet)
			fprintf(stderr, "\rbench_ceiling: %s pass %u/%u", bfs_dtype_name(g.dtype),
				r + 1, g.repeat);
		if ((secs[r] = run_pass(ws, g.threads, &p)) < 0)
			goto failed;
	}
	if (!g.quiet)
		fprintf(stderr, "\r\033[K");
	for (unsigned k = 0; k < g.threads; k++) {
		dec_ns += ws[k].decode_ns;
		rsz_ns += ws[k].resize_ns;
		all_ns += ws[k].cpu_ns;
	}
	memcpy(sorted, secs, g.repeat * sizeof(*secs));
	qsort(sorted, g.repeat, sizeof(*sorted), cmp_double);

	printf("{\"images\": %zu, \"encoded_bytes\": %llu, \"threads\": %u, "
	       "\"dtype\": \"%s\", \"size\": \"%dx%d\", \"passes\": [",
	       c.n, (unsigned long long)loaded_bytes, g.threads,
	       bfs_dtype_name(g.dtype), g.height, g.width);
	for (unsigned r = 0; r < g.repeat; r++)
		printf("%s%.2f", r ? ", " : "", (double)c.n / secs[r]);
	printf("], \"images_per_s\": %.2f, \"decode_share\": %.4f, "
	       "\"resize_share\": %.4f, \"decode_ms_per_image\": %.4f, "
	       "\"resize_ms_per_image\": %.4f, \"cpu_ms_per_image\": %.4f}\n",
	       (double)c.n / sorted[g.repeat / 2],
	       dec_ns + rsz_ns ? (double)dec_ns / (double)(dec_ns + rsz_ns) : 0,
	       dec_ns + rsz_ns ? (double)rsz_ns / (double)(dec_ns + rsz_ns) : 0,
	       (double)dec_ns / 1e6 / ((double)c.n * g.repeat),
	       (double)rsz_ns / 1e6 / ((double)c.n * g.repeat),
	       (double)all_ns / 1e6 / ((double)c.n * g.repeat));
	rc = 0;
	goto out;
failed:
	for (unsigned k = 0; k < g.threads; k++)
		if (ws[k].errmsg[0]) {
			fprintf(stderr, "bench_ceiling: %s\n", ws[k].errmsg);
			goto out;
		}
	fprintf(stderr, "bench_ceiling: a worker failed to start\n");
	goto out;
oom:
	fprintf(stderr, "bench_ceiling: out of memory\n");
out:
	for (unsigned k = 0; ws && k < g.threads; k++) {
		bfs_decoder_destroy(ws[k].dec);
		free(ws[k].scratch);
		free(ws[k].dst);
	}
	free(ws);
	corpus_free(&c);
	return rc;
}
