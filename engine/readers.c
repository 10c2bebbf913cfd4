/*
 * readers.c - the calls readers make (hint, get, put), each reader's
 * read-ahead and its autotuned depth, and the engine's stats (what the
 * readers and the slots are doing now).
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <string.h>

/* ---- readers and autotuning ----------------------------------------- */

static unsigned active_readers_locked(bfs_engine *e, uint64_t now)
{
	unsigned n = 0;

	for (unsigned r = 0; r < BFS_MAX_READERS; r++)
		if (e->readers[r].key && now - e->readers[r].last_ns < READER_IDLE_NS)
			n++;
	return n ? n : 1;
}

/* The most read-ahead one reader may have: its share of e->ahead_max
 * (the slots, one kept back for the batch it reads; for a remote source
 * no more than its shard cache has room for). */
static unsigned depth_cap_locked(bfs_engine *e, uint64_t now)
{
	unsigned share = e->ahead_max / active_readers_locked(e, now);

	return share ? share : 1;
}

/* Find or make the entry of reader key (LRU replacement).  Lock held. */
static struct reader *reader_locked(bfs_engine *e, uint64_t reader,
				    uint64_t now)
{
	uint64_t key = reader + 1; /* 0 marks an unused entry */
	struct reader *oldest = &e->readers[0];

	for (unsigned r = 0; r < BFS_MAX_READERS; r++) {
		struct reader *rd = &e->readers[r];

		if (rd->key == key)
			return rd;
		if (rd->last_ns < oldest->last_ns)
			oldest = rd;
	}
	memset(oldest, 0, sizeof(*oldest));
	oldest->key = key;
	oldest->last_id = UINT64_MAX;
	oldest->settled_id = UINT64_MAX;
	oldest->last_ns = now;
	oldest->depth = e->o.prefetch ? e->o.prefetch : e->ahead_max < 2 ? e->ahead_max : 2;
	oldest->idle_mark = e->idle_ns;
	oldest->mark_ns = now;
	return oldest;
}

/* Worker idle time so far, including workers idle right now.  Lock held. */
uint64_t bfs__idle_now_locked(bfs_engine *e, uint64_t now)
{
	return e->idle_ns + (uint64_t)e->idle_workers * (now - e->idle_since);
}

/* A reader waited for a batch: if the workers had idle time since the
 * depth last changed, deeper read-ahead would have used it, so grow. */
static void reader_waited_locked(bfs_engine *e, struct reader *rd,
				 uint64_t now)
{
	uint64_t idle = bfs__idle_now_locked(e, now) - rd->idle_mark;
	uint64_t span = (now - rd->mark_ns) * e->nworkers;

	rd->calm = 0;
	if (e->o.prefetch)
		return;
	if (span && idle * 20 > span && rd->depth < depth_cap_locked(e, now)) {
		rd->depth++;
		rd->idle_mark = bfs__idle_now_locked(e, now);
		rd->mark_ns = now;
	}
}

/* A reader moved on to a new batch without waiting for the last one. */
static void reader_calm_locked(bfs_engine *e, struct reader *rd, uint64_t now)
{
	unsigned cap = depth_cap_locked(e, now);

	if (e->o.prefetch)
		return;
	if (rd->depth > cap)
		rd->depth = cap;
	if (++rd->calm >= 8 * rd->depth && rd->depth > 2) {
		rd->depth--;
		rd->calm = 0;
		rd->idle_mark = bfs__idle_now_locked(e, now);
		rd->mark_ns = now;
	}
}

static void readahead_locked(bfs_engine *e, uint64_t id, unsigned depth)
{
	for (unsigned d = 1; d <= depth; d++) {
		uint64_t next = bfs__ahead_of(e, id, d);
		struct bfs_batch *b;

		/* a remote source is not read ahead past the last epoch
		 * into the first (what a reader that loops would read
		 * next): that would fetch shards nobody may want; the
		 * reader's own hint starts it when it comes */
		if (next == id || (next < id && bfs_source_is_remote(e->src)))
			break;
		if (bfs__find_locked(e, next))
			continue;
		if (!(b = bfs__victim_locked(e, 0)) || bfs__start_locked(e, b, next, 0))
			break;
	}
}

void bfs_engine_hint(bfs_engine *e, uint64_t reader, uint64_t id)
{
	uint64_t now = bfs__now_ns();
	struct reader *rd;
	struct bfs_batch *b;

	if (!bfs_engine_batch_count(e, id)) /* out of range, or a hole */
		return;
	pthread_mutex_lock(&e->lock);
	rd = reader_locked(e, reader, now);
	if (rd->last_id != id) {
		if (rd->last_id != UINT64_MAX) {
			double dt = (double)(now - rd->last_ns);

			rd->interval_ns = rd->interval_ns
				? 0.8 * rd->interval_ns + 0.2 * dt : dt;
		}
		rd->last_id = id;
		rd->last_ns = now;
		rd->batches++;
	}
	if ((b = bfs__find_locked(e, id))) {
		if (b->state == SLOT_FILLING && !b->urgent) {
			b->urgent = 1;
			b->seq = ++e->seq;
		}
		/* Ready before the reader came for it: the read-ahead was deep
		 * enough.  (A pushed batch is then read from the page cache,
		 * so bfs_engine_get never sees it.) */
		if (b->state == SLOT_READY && rd->settled_id != id) {
			rd->settled_id = id;
			reader_calm_locked(e, rd, now);
		}
		if (b->state == SLOT_READY && b->delivered && !b->consumed) {
			b->consumed = 1;
			e->st.batches_served++;
			e->st.samples_served += b->n;
		}
	} else if ((b = bfs__victim_locked(e, 1))) {
		bfs__start_locked(e, b, id, 1);
	}
	readahead_locked(e, id, rd->depth);
	pthread_mutex_unlock(&e->lock);
}

int bfs_engine_get(bfs_engine *e, uint64_t reader, uint64_t id,
		   bfs_batch **out, char *errmsg)
{
	return bfs_engine_get_flags(e, reader, id, 0, out, errmsg);
}

int bfs_engine_get_flags(bfs_engine *e, uint64_t reader, uint64_t id,
			 unsigned flags, bfs_batch **out, char *errmsg)
{
	struct bfs_batch *b;
	struct reader *rd;
	uint64_t t0 = 0, now;
	int err = 0, waited = 0;

	*out = NULL;
	if (!bfs_engine_batch_count(e, id)) /* out of range, or a hole */
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		if ((b = bfs__find_locked(e, id))) {
			if (b->state == SLOT_FAILED && b->transient &&
			    !b->failed_urgent && !b->pins) {
				/* read-ahead that failed for the moment before
				 * anyone asked: start it again */
				b->cancelled = 1;
				b->consumed = 1;
				continue;
			}
			if (b->state == SLOT_READY || b->state == SLOT_FAILED)
				break;
			if (!b->urgent) {
				b->urgent = 1;
				b->seq = ++e->seq;
			}
			b->pins++; /* keep it from being cancelled while we wait */
		} else if ((b = bfs__victim_locked(e, 1)) &&
			   (err = bfs__start_locked(e, b, id, 1)) == 0) {
			b->pins++;
		} else if (b && err != -EAGAIN) {
			goto out;
		} else if (!b && bfs__cancel_readahead_locked(e)) {
			continue;
		} else {
			/* No slot, or no memory for one: a borrower holds it, or
			 * readers hold files (let go of with no wake-up, hence
			 * the deadline, after which victim_locked looks again). */
			b = NULL;
			err = 0;
		}
		if (!waited) {
			waited = 1;
			t0 = bfs__now_ns();
		}
		if (b) {
			pthread_cond_wait(&e->done, &e->lock);
			b->pins--;
		} else {
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += 100 * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&e->done, &e->lock, &until);
			bfs__probe_held(e);
		}
	}
	now = bfs__now_ns();
	rd = reader_locked(e, reader, now);
	if (waited) {
		e->st.reader_waits++;
		e->st.reader_wait_ns += now - t0;
		bfs_hist_add(&e->st.reader_wait, now - t0);
		rd->waits++;
		rd->wait_ns += now - t0;
		reader_waited_locked(e, rd, now);
		rd->settled_id = id;
	} else if (rd->settled_id != id) {
		reader_calm_locked(e, rd, now);
		rd->settled_id = id;
	}
	b->last_use = ++e->tick;
	if (b->state == SLOT_FAILED) {
		err = b->err;
		bfs_seterr(errmsg, "%s", b->errmsg);
		if (b->transient && !b->pins) {
			/* told once: the next get starts it again */
			b->cancelled = 1;
			b->consumed = 1;
		}
		goto out;
	}
	b->pins++; /* before read-ahead, which may evict unpinned slots */
	if (!b->consumed) {
		b->consumed = 1;
		e->st.batches_served++;
		e->st.samples_served += b->n;
		/* keep reading ahead as the reader moves, even without a hint */
		if (!(flags & BFS_GET_ALONE))
			readahead_locked(e, id, rd->depth);
	}
	*out = b;
out:
	pthread_mutex_unlock(&e->lock);
	return err;
}

void bfs_engine_put(bfs_engine *e, bfs_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&e->lock);
	b->pins--;
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
}

/* ---- stats ----------------------------------------------------------- */

void bfs_engine_get_stats(bfs_engine *e, bfs_engine_stats *st)
{
	uint64_t now = bfs__now_ns(), alive;

	pthread_mutex_lock(&e->lock);
	bfs__reap_held(e);
	*st = e->st;
	st->decode_attempts = __atomic_load_n(&e->decode_attempts, __ATOMIC_RELAXED);
	st->sample_errors = bfs_badset_count(e->bad);
	st->errors_kept = e->nerrors;
	st->mem_slots = e->slot_mem;
	st->mem_scratch = e->scratch_used;
	st->mem_held = e->held_bytes;
	st->held_files = e->nheld;
	st->mem_bytes = st->mem_slots + st->mem_scratch + st->mem_held;
	st->slots_ready = st->slots_filling = 0;
	for (unsigned s = 0; s < e->nslots; s++) {
		if (e->slots[s].state == SLOT_READY)
			st->slots_ready++;
		else if (e->slots[s].state == SLOT_FILLING)
			st->slots_filling++;
	}
	st->samples_per_s = e->sample_ns > 0 ? 1e9 / e->sample_ns * e->nworkers : 0;
	alive = (now - e->created_ns) * e->nworkers;
	st->worker_idle = alive ? (double)bfs__idle_now_locked(e, now) / (double)alive : 0;
	st->nreaders = 0;
	for (unsigned r = 0; r < BFS_MAX_READERS; r++) {
		const struct reader *rd = &e->readers[r];
		bfs_reader_stats *o;

		if (!rd->key || now - rd->last_ns > READER_IDLE_NS)
			continue;
		o = &st->readers[st->nreaders++];
		o->reader = rd->key - 1;
		o->last_batch = rd->last_id;
		o->depth = rd->depth;
		o->batches_per_s = rd->interval_ns > 0 ? 1e9 / rd->interval_ns : 0;
		o->batches = rd->batches;
		o->waits = rd->waits;
		o->wait_s = (double)rd->wait_ns / 1e9;
	}
	pthread_mutex_unlock(&e->lock);
}

