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
 * one position stands for all of them: the slowest reader's.  Whenever it
 * enters another epoch, the planner walks that epoch and the next for
 * every rank (bfs__sample_of at each position -- the one map from a batch
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

#define PLAN_TICK_MS 50

/* The slowest reader's batch q along its rank's sequence, or UINT64_MAX
 * when no reader has asked for a batch yet.  Lock held. */
static uint64_t slowest_locked(const bfs_engine *e)
{
	uint64_t q = UINT64_MAX;

	for (unsigned r = 0; r < BFS_MAX_READERS; r++) {
		const struct reader *rd = &e->readers[r];

		if (rd->key && rd->last_id != UINT64_MAX &&
		    rd->last_id % e->per_rank < q)
			q = rd->last_id % e->per_rank;
	}
	return q;
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

/* The spans of epochs `epoch` and the one after (if any), handed to the
 * source with the reader at pos.  0 or -ENOMEM. */
static int plan_epochs(bfs_engine *e, void *sr, unsigned epoch, uint64_t pos)
{
	size_t S = bfs_source_nshards(e->src), n = 0;
	struct acc a;
	bfs_span *spans;
	int err = -ENOMEM;

	a.first = malloc(S * sizeof(uint64_t));
	a.last = malloc(S * sizeof(uint64_t));
	a.bytes = malloc(S * sizeof(uint64_t));
	spans = malloc(2 * S * sizeof(*spans));
	if (!a.first || !a.last || !a.bytes || !spans)
		goto out;
	for (unsigned ep = epoch; ep < epoch + 2 && ep < e->o.epochs; ep++) {
		for (size_t k = 0; k < S; k++) {
			a.first[k] = UINT64_MAX;
			a.last[k] = 0;
			a.bytes[k] = 0;
		}
		walk_epoch(e, sr, ep, &a);
		for (size_t k = 0; k < S; k++)
			if (a.first[k] != UINT64_MAX)
				spans[n++] = (bfs_span){ (uint32_t)k, a.first[k],
							 a.last[k], a.bytes[k] };
	}
	err = bfs_source_plan(e->src, spans, n, pos, epoch);
out:
	free(a.first);
	free(a.last);
	free(a.bytes);
	free(spans);
	return err;
}

static void *planner_main(void *arg)
{
	bfs_engine *e = arg;
	void *sr = NULL;
	uint64_t planned = UINT64_MAX; /* the epoch planned last */

	if (e->o.store && e->store.has && e->store.reader_create(e->store.ctx, &sr))
		sr = NULL;
	pthread_mutex_lock(&e->lock);
	while (!e->plan_stop) {
		struct timespec until;
		uint64_t q = slowest_locked(e), epoch;

		if (q != UINT64_MAX) {
			epoch = q / e->per_epoch;
			pthread_mutex_unlock(&e->lock);
			if (epoch != planned) {
				if (plan_epochs(e, sr, (unsigned)epoch, q * e->o.batch) == 0)
					planned = epoch;
			} else {
				bfs_source_advance(e->src, q * e->o.batch, (int64_t)epoch);
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
	if (sr)
		e->store.reader_destroy(sr);
	return NULL;
}

int bfs__plan_start(bfs_engine *e)
{
	if (!bfs_source_is_remote(e->src))
		return 0;
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
