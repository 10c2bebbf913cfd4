/*
 * pool.c - the worker threads: which slot gets the next sample, a batch
 * completed (ready or failed), handed to the cache and, when the pool is
 * idle, on to the mount
 */
#include "engine/engine_internal.h"

#include <stdio.h>

/* ---- workers ---------------------------------------------------------- */

/* The store finished with batch b's memory (any thread). */
static void store_done(void *ctx)
{
	struct bfs_batch *b = ctx;
	bfs_engine *e = b->e;

	pthread_mutex_lock(&e->lock);
	b->pins--; /* matches the pin taken when b became READY */
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
}

/* Offer the samples of a READY, pinned batch that were decoded (not read
 * from the store) to the store, one offer per batch.  Called without
 * e->lock, since the store may call store_done at once. */
static void offer_to_store(bfs_engine *e, struct bfs_batch *b)
{
	size_t n = 0;

	for (unsigned j = 0; j < b->n; j++) {
		if (!b->rec[j].decoded)
			continue;
		b->items[n].id = b->rec[j].id;
		b->items[n].label = b->rec[j].raw_label;
		b->items[n].data = b->stage1 ? b->stage1 + (size_t)j * e->s1_bytes
					     : b->images + (size_t)j * e->sample_bytes;
		b->items[n].len = e->s1_bytes;
		n++;
	}
	e->store.offer(e->store.ctx, b->items, n, store_done, b);
}

/* Offer a READY batch to deliver_ahead, pinned and without the lock. */
static void hand_on_locked(bfs_engine *e, struct bfs_batch *b)
{
	uint64_t id = b->id;
	int handed;

	b->pins++;
	pthread_mutex_unlock(&e->lock);
	handed = e->o.deliver_ahead(e->o.ctx, id, b);
	pthread_mutex_lock(&e->lock);
	b->pins--;
	if (handed == 1) {
		e->st.batches_delivered++;
		b->delivered = 1; /* consumed once its reader hints it */
	}
	pthread_cond_broadcast(&e->done);
}

/* The slot with work whose turn it is: urgent first, then oldest request.
 * Its work may be to prepare its memory first (not prepared); a slot
 * another worker is preparing (busy) has none for now. */
static struct bfs_batch *next_work_locked(bfs_engine *e)
{
	struct bfs_batch *best = NULL;

	for (unsigned s = 0; s < e->nslots; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (b->state != SLOT_FILLING || b->next >= b->n || b->busy)
			continue;
		if (!best || (b->urgent && !best->urgent) ||
		    (b->urgent == best->urgent && b->seq < best->seq))
			best = b;
	}
	return best;
}

void *bfs__worker_main(void *arg)
{
	struct worker *w = arg;
	bfs_engine *e = w->e;
	char msg[BFS_ERRMSG_MAX];
	pthread_mutex_lock(&e->lock);
	while (!e->stop) {
		struct bfs_batch *b = next_work_locked(e);
		uint64_t id;
		unsigned j;
		int err;

		if (!b) {
			uint64_t t = bfs__now_ns();

			/* idle time: the autotuner's sign of an unsaturated pool */
			e->idle_ns += (uint64_t)e->idle_workers * (t - e->idle_since);
			e->idle_since = t;
			e->idle_workers++;
			pthread_cond_wait(&e->work, &e->lock);
			t = bfs__now_ns();
			e->idle_ns += (uint64_t)e->idle_workers * (t - e->idle_since);
			e->idle_since = t;
			e->idle_workers--;
			continue;
		}
		if (!b->prepared) {
			bfs__prepare(e, b); /* drops the lock meanwhile */
			continue;
		}
		j = b->next++;
		b->inflight++;
		id = b->id;
		w->slot = b;
		pthread_mutex_unlock(&e->lock);

		err = bfs__produce(w, id, j, b->images + (size_t)j * e->sample_bytes,
			      b->stage1 ? b->stage1 + (size_t)j * e->s1_bytes
					: b->images + (size_t)j * e->sample_bytes,
			      &b->labels[j], &b->rec[j], msg);
		if (err)
			b->rec[j].decoded = 0;

		pthread_mutex_lock(&e->lock);
		w->slot = NULL;
		b->inflight--;
		b->done++;
		if (err && !b->cancelled && (!b->err || j < b->err_at)) {
			char where[160];

			bfs_source_describe(e->src, bfs__sample_of(e, id, j), where,
					    sizeof(where));
			b->err = err;
			b->err_at = j;
			snprintf(b->errmsg, sizeof(b->errmsg), "%s: %s", where,
				 msg[0] ? msg : bfs_strerror(err));
			/* the batch fails anyway: hand out nothing more */
			b->done += b->n - b->next;
			b->next = b->n;
		}
		/* Readers wait for a slot to change state (or be unpinned, see
		 * bfs_engine_put): wake them only then, not after every sample,
		 * which cost ~7 context switches per image. */
		if (b->cancelled) {
			if (b->inflight == 0 && !b->busy) {
				b->state = SLOT_FREE;
				pthread_cond_broadcast(&e->done);
				pthread_cond_broadcast(&e->room);
			}
		} else if (b->done == b->n && b->inflight == 0) {
			b->state = b->err ? SLOT_FAILED : SLOT_READY;
			e->st.batches_produced++;
			pthread_cond_broadcast(&e->done);
			if (b->state == SLOT_READY && e->o.store) {
				/* pinned until the store is done with it */
				b->pins++;
				pthread_mutex_unlock(&e->lock);
				offer_to_store(e, b);
				pthread_mutex_lock(&e->lock);
			}
			/* Hand on only read-ahead that no reader has asked for
			 * yet, and only when no other work is queued: handing
			 * on costs CPU (a copy into the page cache) that a
			 * reader waiting on the pool would rather see spent on
			 * decoding; its reads copy the batch out anyway.  A
			 * pool with nothing else to do has the time to spare.
			 * (Measured, docs/BENCHMARKS.md: pushing every batch
			 * made cold epochs ~8% slower.) */
			if (b->state == SLOT_READY && e->o.deliver_ahead &&
			    !b->urgent && !next_work_locked(e))
				hand_on_locked(e, b);
		}
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}
