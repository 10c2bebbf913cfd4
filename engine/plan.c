/*
 * plan.c - a remote source's plan: which of its shards the readers will
 * need, when, and how many bytes of each, from the epochs' order, handed
 * to the source's shard cache (bfs_source_plan; shardplan.h) so that it
 * fetches ahead and evicts in that order; and where the readers are now.
 *
 * DESIGN: one thread, started with the engine for a remote source only.
 * A position counts samples along a rank's sequence of batches: position
 * j of the rank's batch q (q = epoch * per_epoch + index) is q * B + j.
 * The ranks of an engine go in step (their readers are the one job's), so
 * one position stands for all of them: the decode frontier, the first
 * batch that still needs shard bytes (read-ahead decodes ahead of the
 * readers; what lies between is spent).  Whenever the readers' epochs
 * change (the slowest's, or the fastest's or the frontier's), the planner
 * walks those epochs and the next for every rank (bfs__sample_of at each position -- the one map from a batch
 * to its samples -- the shard of each sample, and the store's `has`: a
 * sample the store holds needs no shard bytes) and hands the spans over;
 * in between it only moves the position on, every PLAN_TICK_MS.  No plan
 * before the first reader: a mount whose indexes are stored fetches
 * nothing until a batch is asked for.  e->lock is held only to read the
 * readers' positions; the walk runs without it.
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_TICK_MS 10 /* how often the readers' position is looked at */
#define MAX_PLANNED 3   /* epochs in one plan at most */

/* A reader still reading: it moved on within three of its own intervals
 * between batches (a DataLoader worker that takes every 8th batch moves
 * slowly but surely), at least LIVE_MIN_NS, at most READER_IDLE_NS.  A
 * reader that stopped (a process that read its epoch and ended) no longer
 * holds the plan back. */
#define LIVE_MIN_NS 50000000ull

static int live(const struct reader *rd, uint64_t now)
{
	uint64_t span = (uint64_t)(3 * rd->interval_ns);

	if (span < LIVE_MIN_NS)
		span = LIVE_MIN_NS;
	if (span > READER_IDLE_NS)
		span = READER_IDLE_NS;
	return now - rd->last_ns < span;
}

/* Where the readers and the workers are, along a rank's sequence of
 * batches: the slowest and fastest live readers' batches (lo, hi), and the
 * decode frontier: the first batch from the slowest reader on that is not
 * decoded -- being decoded, or not begun (read-ahead has not reached it,
 * or it was given up in its slot and not started again yet:
 * bfs__start_locked gives up a slot whose file a reader holds).  Batches
 * between the slowest reader and the frontier are decoded already: their
 * shards are spent, and what they take in the shard cache is the
 * read-ahead's to use.  A batch decoded beyond one not begun does not
 * move the frontier past that one: its shard would be evicted as spent,
 * then read record by record, or fetched again whole for a later epoch
 * and counted there.  *end: one past the last batch being decoded (the
 * batches from the frontier to it are read at once).  1, or 0 when no
 * reader reads now (or none has asked for a batch yet; a reader waiting
 * for a batch it asked for without a hint counts at that batch).  Lock
 * held. */
int bfs__plan_positions_locked(const bfs_engine *e, uint64_t *lo, uint64_t *hi,
			       uint64_t *front, uint64_t *end)
{
	uint64_t now = bfs__now_ns(), fill = UINT64_MAX, fill_hi = 0, f;
	uint8_t ready[MAX_SLOTS / 8 + 1] = { 0 }; /* bit i: batch lo + i is
						   * decoded */
	int any = 0;

	for (unsigned r = 0; r < BFS_MAX_READERS; r++) {
		const struct reader *rd = &e->readers[r];
		uint64_t q;

		if (!rd->key || rd->last_id == UINT64_MAX || !live(rd, now))
			continue;
		q = rd->last_id % e->per_rank;
		if (!any || q < *lo)
			*lo = q;
		if (!any || q > *hi)
			*hi = q;
		any = 1;
	}
	/* A reader that waits in a get for a batch it gave no hint of (an
	 * open that lends the batch's file asks for it first, and hints
	 * after): the batch it waits for is where it is.  Without it, the
	 * first batch of such a mount would have no plan to fetch by. */
	for (unsigned s = 0; !any && s < e->nslots; s++) {
		const struct bfs_batch *b = &e->slots[s];

		if (b->state == SLOT_FILLING && b->urgent && !b->cancelled) {
			uint64_t q = b->id % e->per_rank;

			for (unsigned t = s; t < e->nslots; t++) {
				const struct bfs_batch *c = &e->slots[t];
				uint64_t x = c->id % e->per_rank;

				if (c->state != SLOT_FILLING || !c->urgent || c->cancelled)
					continue;
				if (x < q)
					q = x;
			}
			*lo = *hi = q;
			any = 1;
		}
	}
	if (!any)
		return 0;
	/* nslots decoded batches at most: those from lo on that the walk
	 * below can step over lie within lo + nslots */
	for (unsigned s = 0; s < e->nslots; s++) {
		const struct bfs_batch *b = &e->slots[s];
		uint64_t q = b->id % e->per_rank;

		if (b->state == SLOT_FREE || b->cancelled || q < *lo)
			continue;
		if (b->state == SLOT_FILLING) {
			if (q < fill)
				fill = q;
			if (q + 1 > fill_hi)
				fill_hi = q + 1;
		} else if (q - *lo <= MAX_SLOTS) {
			ready[(q - *lo) / 8] |= (uint8_t)(1u << ((q - *lo) % 8));
		}
	}
	for (f = *lo; f < fill && f - *lo <= MAX_SLOTS &&
		      (ready[(f - *lo) / 8] >> ((f - *lo) % 8) & 1); f++)
		;
	*front = f;
	*end = fill_hi > *front ? fill_hi : *front + 1;
	return 1;
}

/* The epoch the bytes fetched now count towards: the frontier's (past the
 * last epoch, where read-ahead wraps to the first, the last's). */
static uint64_t epoch_of_front(const bfs_engine *e, uint64_t front)
{
	uint64_t ep = front / e->per_epoch;

	return ep < e->o.epochs ? ep : e->o.epochs - 1;
}

struct acc {
	uint64_t *first, *last, *bytes; /* per shard; first UINT64_MAX: none */
};

/* Add the needs of epoch `epoch` (every rank) to a. */
static void walk_epoch(bfs_engine *e, void *sr, unsigned epoch, struct acc *a)
{
	uint64_t B = e->o.batch;

	for (unsigned r = 0; r < e->nranks; r++) {
		for (uint64_t b = 0; b < e->per_epoch; b++) {
			uint64_t q = (uint64_t)epoch * e->per_epoch + b;
			uint64_t id = (uint64_t)r * e->per_rank + q;
			unsigned n = bfs_engine_batch_count(e, id);

			for (unsigned j = 0; j < n; j++) {
				uint64_t i = bfs__sample_of(e, id, j), pos = q * B + j;
				bfs_sample_identity sid;
				size_t k;

				if (bfs_source_identity(e->src, i, &sid))
					continue;
				if (sr && e->store.has && e->store.has(sr, &sid))
					continue; /* the store has it: no bytes */
				k = bfs_source_shard_of(e->src, i);
				if (a->first[k] == UINT64_MAX) {
					a->first[k] = a->last[k] = pos;
				} else {
					if (pos < a->first[k])
						a->first[k] = pos;
					if (pos > a->last[k])
						a->last[k] = pos;
				}
				a->bytes[k] += sid.length;
			}
		}
	}
}

/* The spans of epochs from..to (those that exist). */
struct walked {
	bfs_span *spans;
	size_t n;
	uint64_t from, to;   /* UINT64_MAX from: none */
};

static int walk_epochs(bfs_engine *e, void *sr, uint64_t from, uint64_t to,
		       struct walked *w)
{
	size_t S = bfs_source_nshards(e->src);
	struct acc a;
	int err = -ENOMEM;

	w->n = 0;
	w->from = from;
	w->to = to;
	a.first = malloc(S * sizeof(uint64_t));
	a.last = malloc(S * sizeof(uint64_t));
	a.bytes = malloc(S * sizeof(uint64_t));
	w->spans = malloc((size_t)(to - from + 1) * S * sizeof(*w->spans));
	if (!a.first || !a.last || !a.bytes || !w->spans)
		goto out;
	for (uint64_t ep = from; ep <= to && ep < e->o.epochs; ep++) {
		for (size_t k = 0; k < S; k++) {
			a.first[k] = UINT64_MAX;
			a.last[k] = 0;
			a.bytes[k] = 0;
		}
		walk_epoch(e, sr, (unsigned)ep, &a);
		for (size_t k = 0; k < S; k++)
			if (a.first[k] != UINT64_MAX)
				w->spans[w->n++] = (bfs_span){ (uint32_t)k, a.first[k],
							       a.last[k], a.bytes[k] };
	}
	err = 0;
out:
	free(a.first);
	free(a.last);
	free(a.bytes);
	if (err) {
		free(w->spans);
		w->spans = NULL;
		w->from = UINT64_MAX;
	}
	return err;
}

static void *planner_main(void *arg)
{
	bfs_engine *e = arg;
	void *sr = NULL;
	uint64_t from = UINT64_MAX, to = 0; /* the epochs planned last */
	struct walked ahead = { NULL, 0, UINT64_MAX, 0 };

	pthread_setname_np(pthread_self(), "bfs-plan"); /* top -H, perf, gdb */
	if (e->o.store && e->store.has && e->store.reader_create(e->store.ctx, &sr))
		sr = NULL;
	/* The first readers most likely start at the first epoch: its plan is
	 * walked now, while nobody reads, and handed over the moment they
	 * come (fetching nothing before: a plan is what starts fetches). */
	walk_epochs(e, sr, 0, e->o.epochs > 1 ? 1 : 0, &ahead);
	pthread_mutex_lock(&e->lock);
	while (!e->plan_stop) {
		struct timespec until;
		uint64_t lo, hi, front, end;

		if (bfs__plan_positions_locked(e, &lo, &hi, &front, &end)) {
			/* the epochs the readers and the workers are in, and the
			 * next one */
			uint64_t a = lo / e->per_epoch, b = (hi > front ? hi : front) /
							    e->per_epoch + 1;
			int64_t ep = (int64_t)epoch_of_front(e, front);

			if (b > a + MAX_PLANNED - 1)
				b = a + MAX_PLANNED - 1;
			if (b >= e->o.epochs)
				b = e->o.epochs - 1 > a ? e->o.epochs - 1 : a;
			pthread_mutex_unlock(&e->lock);
			bfs_source_window(e->src, end * e->o.batch);
			if (a != from || b != to) {
				struct walked w = { NULL, 0, UINT64_MAX, 0 };

				if (ahead.from == a && ahead.to == b) {
					w = ahead;
					ahead.spans = NULL;
				} else {
					walk_epochs(e, sr, a, b, &w);
				}
				free(ahead.spans);
				ahead.spans = NULL;
				ahead.from = UINT64_MAX;
				if (w.spans && bfs_source_plan(e->src, w.spans, w.n,
							       front * e->o.batch, ep) == 0) {
					from = a;
					to = b;
				}
				free(w.spans);
			} else {
				bfs_source_advance(e->src, front * e->o.batch, ep);
			}
			pthread_mutex_lock(&e->lock);
			if (e->plan_stop)
				break;
		}
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += PLAN_TICK_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&e->plan_cv, &e->lock, &until);
	}
	pthread_mutex_unlock(&e->lock);
	free(ahead.spans);
	if (sr)
		e->store.reader_destroy(sr);
	return NULL;
}

int bfs__plan_start(bfs_engine *e)
{
	if (!bfs_source_is_remote(e->src))
		return 0;
	/* reads wait for the first plan rather than guess without one */
	bfs_source_expect_plan(e->src);
	/* what is fetched ahead for the next epoch counts as that epoch's */
	bfs_source_epoch_positions(e->src, e->per_epoch * e->o.batch);
	if (pthread_create(&e->planner, NULL, planner_main, e))
		return -EAGAIN;
	e->planner_on = 1;
	return 0;
}

void bfs__plan_stop(bfs_engine *e)
{
	if (!e->planner_on)
		return;
	pthread_mutex_lock(&e->lock);
	e->plan_stop = 1;
	pthread_cond_broadcast(&e->plan_cv);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->planner, NULL);
	e->planner_on = 0;
}
