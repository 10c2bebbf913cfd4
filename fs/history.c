/*
 * history.c - the mount's bounded history and its sampler (history.h).
 */
#include "fs/history.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bfs_history {
	pthread_mutex_t lock;          /* guards pts, n, stride, last, stop */
	pthread_cond_t cv;             /* stop was set */
	bfs_history_point pts[BFS_HISTORY_CAP];
	uint64_t ticks[BFS_HISTORY_CAP]; /* each point's tick */
	size_t n;
	uint64_t stride;               /* ticks between kept points */
	unsigned every_s;
	struct timespec t0;            /* CLOCK_MONOTONIC at create */
	int stop;
	int running;
	pthread_t thread;
	bfs_history_sample fn;
	void *ctx;
};

int bfs_history_create(unsigned every_s, bfs_history **out)
{
	bfs_history *h;
	pthread_condattr_t ca;

	*out = NULL;
	if (every_s > 86400)
		return -EINVAL;
	if (!(h = calloc(1, sizeof(*h))))
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cv, &ca);
	pthread_condattr_destroy(&ca);
	h->stride = 1;
	h->every_s = every_s ? every_s : BFS_HISTORY_EVERY;
	clock_gettime(CLOCK_MONOTONIC, &h->t0);
	*out = h;
	return 0;
}

void bfs_history_free(bfs_history *h)
{
	if (!h)
		return;
	bfs_history_stop(h);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

int bfs_history_add(bfs_history *h, uint64_t tick, const bfs_history_point *p)
{
	int kept = 0;

	pthread_mutex_lock(&h->lock);
	if ((h->n && tick <= h->ticks[h->n - 1]) || tick % h->stride)
		goto out;
	while (h->n == BFS_HISTORY_CAP && h->stride <= UINT64_MAX / 2) {
		/* halve the resolution: keep the points on twice the stride
		 * (every other one, when no tick was skipped) */
		size_t k = 0;

		h->stride *= 2;
		for (size_t i = 0; i < h->n; i++)
			if (h->ticks[i] % h->stride == 0) {
				h->pts[k] = h->pts[i];
				h->ticks[k++] = h->ticks[i];
			}
		h->n = k;
	}
	if (h->n == BFS_HISTORY_CAP || tick % h->stride)
		goto out;
	h->pts[h->n] = *p;
	h->ticks[h->n++] = tick;
	kept = 1;
out:
	pthread_mutex_unlock(&h->lock);
	return kept;
}

size_t bfs_history_copy(const bfs_history *h, bfs_history_point *out,
			size_t cap, double *step_s)
{
	bfs_history *w = (bfs_history *)h; /* the lock only */
	size_t n;

	pthread_mutex_lock(&w->lock);
	n = h->n < cap ? h->n : cap;
	memcpy(out, h->pts, n * sizeof(*out));
	if (step_s)
		*step_s = (double)h->stride * h->every_s;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void bfs_history_json(const bfs_history *h, bfs_json *j)
{
	static const char *fields[] = {
		"t", "samples_served", "samples_decoded", "reader_wait_seconds",
		"cache_hits", "cache_misses",
	};
	bfs_history_point *pts;
	double step;
	size_t n;

	if (!h)
		return;
	if (!(pts = malloc(BFS_HISTORY_CAP * sizeof(*pts)))) {
		j->oom = 1;
		return;
	}
	n = bfs_history_copy(h, pts, BFS_HISTORY_CAP, &step);
	bfs_json_open(j, "history", '{');
	bfs_json_u64(j, "interval_seconds", h->every_s);
	bfs_json_fixed(j, "step_seconds", step, 0);
	{
		int was = j->compact;

		bfs_json_open(j, "fields", '[');
		j->compact = 1;
		for (size_t f = 0; f < sizeof(fields) / sizeof(*fields); f++)
			bfs_json_str(j, NULL, fields[f]);
		bfs_json_close(j, ']');
		j->compact = was;
		bfs_json_open(j, "points", '[');
		for (size_t i = 0; i < n; i++) {
			bfs_json_open(j, NULL, '[');
			j->compact = 1;
			bfs_json_fixed(j, NULL, pts[i].t, 3);
			bfs_json_u64(j, NULL, pts[i].served);
			bfs_json_u64(j, NULL, pts[i].decoded);
			bfs_json_fixed(j, NULL, pts[i].wait_s, 6);
			bfs_json_u64(j, NULL, pts[i].hits);
			bfs_json_u64(j, NULL, pts[i].misses);
			bfs_json_close(j, ']');
			j->compact = was;
		}
		bfs_json_close(j, ']');
	}
	bfs_json_close(j, '}');
	free(pts);
}

/* ---- the sampler -------------------------------------------------------- */

static double since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void *sampler_main(void *arg)
{
	bfs_history *h = arg;
	uint64_t tick = 0;

	for (;;) {
		bfs_history_point p = { 0 };
		struct timespec until;
		uint64_t s;
		int stop;

		h->fn(h->ctx, &p); /* no lock held */
		p.t = since(&h->t0);
		bfs_history_add(h, tick, &p);

		pthread_mutex_lock(&h->lock);
		/* the next tick the ring keeps: the stride may have doubled */
		s = h->stride;
		{
			/* late (a slow sample, a suspended machine): on from
			 * now, not a burst of points to catch up */
			double e = since(&h->t0) / h->every_s;

			if (e > (double)tick && e < 1e18)
				tick = (uint64_t)e;
		}
		tick = (tick / s + 1) * s;
		if (h->n == BFS_HISTORY_CAP && tick % (2 * s))
			tick += s; /* full: the next one kept is on 2 * stride */
		until = h->t0;
		until.tv_sec += (time_t)(tick * h->every_s);
		while (!h->stop &&
		       pthread_cond_timedwait(&h->cv, &h->lock, &until) != ETIMEDOUT)
			;
		stop = h->stop;
		pthread_mutex_unlock(&h->lock);
		if (stop)
			break;
	}
	return NULL;
}

int bfs_history_start(bfs_history *h, bfs_history_sample fn, void *ctx)
{
	int err;

	if (h->running || !fn)
		return -EINVAL;
	h->fn = fn;
	h->ctx = ctx;
	h->stop = 0;
	clock_gettime(CLOCK_MONOTONIC, &h->t0);
	if ((err = pthread_create(&h->thread, NULL, sampler_main, h)))
		return -err;
	h->running = 1;
	return 0;
}

void bfs_history_stop(bfs_history *h)
{
	if (!h || !h->running)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = 1;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	h->running = 0;
}
