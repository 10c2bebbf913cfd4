/*
 * orders.c - the engine's epoch layouts: set up at create from the
 * options and the source's shards (engine/layout.h), and the one lookup
 * every position goes through (bfs__order_sample).
 *
 * DESIGN: a layout is pure, but a block order over shards of uneven
 * sizes needs a table per epoch (the samples before each shard in that
 * epoch's shard order, O(shards)).  Tables are built when an epoch is
 * first asked for and kept in ORDER_SLOTS slots (the epochs in use: the
 * readers' and their read-ahead's), never one per epoch of the mount, so
 * memory stays ORDER_SLOTS tables whatever --epochs is.  The slots and
 * their state are protected by oc->lock, which is taken after e->lock
 * (never before) and never held while a table is built: a slot being
 * built is marked BUILDING and its builder owns it; others wanting that
 * epoch wait on oc->changed.  A reader holds a slot (refs) only for the
 * few arithmetic steps of one lookup.  Layouts that need no table (file
 * order, the global shuffle, shards of one size) have no cache at all.
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORDER_SLOTS 4

enum { ORD_EMPTY, ORD_BUILDING, ORD_BUILT };

struct order_slot {
	int state;             /* protected by oc->lock */
	uint64_t epoch;        /* protected by oc->lock */
	unsigned refs;         /* protected by oc->lock */
	uint64_t used;         /* LRU tick, protected by oc->lock */
	bfs_layout_epoch ep;   /* written by its builder, then read-only */
	uint64_t *table;       /* owned; written by its builder */
};

struct order_cache {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a slot was built or let go of */
	uint64_t tick;          /* protected by lock */
	struct order_slot slot[ORDER_SLOTS];
};

/* first[k] = the source's first sample of shard k (shards in sample
 * order, empty ones included), first[nshards] = n.  0 or -EINVAL. */
static int shard_table(const bfs_source *src, uint64_t *first, size_t shards, char *errmsg)
{
	uint64_t n = bfs_source_count(src);
	size_t k = 0;

	first[0] = 0;
	for (uint64_t i = 0; i < n; i++) {
		const char *name = bfs_source_sample_shard(src, i, NULL);

		while (k < shards && bfs_source_shard_name(src, k) != name)
			first[++k] = i;
		if (k == shards) {
			bfs_seterr(errmsg, "sample %llu is in no shard of the index",
				   (unsigned long long)i);
			return -EINVAL;
		}
	}
	while (k < shards)
		first[++k] = n;
	return 0;
}

int bfs__orders_create(bfs_engine *e, char *errmsg)
{
	bfs_layout_opts lo = {
		.n = e->nsamples, .shuffle = e->o.shuffle, .seed = e->o.seed,
		.block = e->o.shuffle_block, .split = e->o.split, .world = e->o.world,
		.node_ranks = e->o.node_ranks, .resume = e->o.resume,
	};
	uint64_t *first = NULL;
	size_t tl;
	int err;

	if (e->o.split == BFS_SPLIT_SHARDS) {
		if (!lo.node_ranks)
			lo.node_ranks = e->nranks;
		if (e->o.ranks > 1 && lo.node_ranks != e->nranks) {
			bfs_seterr(errmsg, "--split shards: a mount of --ranks %u-%u is one node of %u ranks, not --node-ranks %u",
				   e->o.rank, e->o.rank + e->nranks - 1, e->nranks, lo.node_ranks);
			return -EINVAL;
		}
		if (e->nranks > 1 && e->o.rank % lo.node_ranks) {
			bfs_seterr(errmsg, "--split shards: a node's ranks start at a multiple of its %u ranks, not at %u (--ranks %u-%u)",
				   lo.node_ranks, e->o.rank, e->o.rank, e->o.rank + e->nranks - 1);
			return -EINVAL;
		}
	} else if (e->o.node_ranks > 1) {
		bfs_seterr(errmsg, "--node-ranks %u: only --split shards places ranks on nodes",
			   e->o.node_ranks);
		return -EINVAL;
	}
	if (e->o.resume.on && e->o.resume.epoch >= e->o.epochs) {
		bfs_seterr(errmsg, "--resume: epoch %u is past the mount's %u epochs",
			   e->o.resume.epoch, e->o.epochs);
		return -EINVAL;
	}
	if (e->o.shuffle_block) {
		lo.nshards = bfs_source_nshards(e->src);
		if (!(first = malloc((lo.nshards + 1) * sizeof(*first))))
			return -ENOMEM;
		if ((err = shard_table(e->src, first, lo.nshards, errmsg))) {
			free(first);
			return err;
		}
		lo.first = first;
	}
	err = bfs_layout_create(&lo, &e->layout, errmsg);
	free(first); /* copied */
	if (err)
		return err;
	/* the node's size as the layout settled it, for dataset.json */
	if (e->o.split == BFS_SPLIT_SHARDS)
		e->o.node_ranks = bfs_layout_options(e->layout)->node_ranks;
	if (!(tl = bfs_layout_table_len(e->layout)))
		return 0;
	if (!(e->oc = calloc(1, sizeof(*e->oc))))
		goto nomem;
	for (int s = 0; s < ORDER_SLOTS; s++)
		if (!(e->oc->slot[s].table = malloc(tl * sizeof(uint64_t))))
			goto nomem;
	pthread_mutex_init(&e->oc->lock, NULL);
	pthread_cond_init(&e->oc->changed, NULL);
	return 0;
nomem:
	if (e->oc)
		for (int s = 0; s < ORDER_SLOTS; s++)
			free(e->oc->slot[s].table);
	free(e->oc);
	e->oc = NULL;
	bfs_layout_destroy(e->layout);
	e->layout = NULL;
	return -ENOMEM;
}

void bfs__orders_destroy(bfs_engine *e)
{
	if (e->oc) {
		for (int s = 0; s < ORDER_SLOTS; s++)
			free(e->oc->slot[s].table);
		pthread_mutex_destroy(&e->oc->lock);
		pthread_cond_destroy(&e->oc->changed);
		free(e->oc);
		e->oc = NULL;
	}
	bfs_layout_destroy(e->layout);
	e->layout = NULL;
}

/* The slot holding epoch's table, held (refs) for the caller: built
 * here if no slot has it. */
static struct order_slot *slot_get(struct order_cache *oc, const bfs_layout *l, uint64_t epoch)
{
	struct order_slot *s;

	pthread_mutex_lock(&oc->lock);
	for (;;) {
		struct order_slot *free_one = NULL;

		s = NULL;
		for (int i = 0; i < ORDER_SLOTS; i++) {
			struct order_slot *x = &oc->slot[i];

			if (x->state != ORD_EMPTY && x->epoch == epoch)
				s = x;
			else if (!x->refs && (!free_one || x->used < free_one->used))
				free_one = x;
		}
		if (s && s->state == ORD_BUILT)
			break;
		if (!s && free_one) { /* build it, without the lock */
			s = free_one;
			s->state = ORD_BUILDING;
			s->epoch = epoch;
			s->refs = 1;
			pthread_mutex_unlock(&oc->lock);
			bfs_layout_epoch_init(&s->ep, l, epoch, s->table);
			pthread_mutex_lock(&oc->lock);
			s->state = ORD_BUILT;
			s->used = ++oc->tick;
			pthread_cond_broadcast(&oc->changed);
			pthread_mutex_unlock(&oc->lock);
			return s;
		}
		/* being built by another, or every slot held: a few steps */
		pthread_cond_wait(&oc->changed, &oc->lock);
	}
	s->refs++;
	s->used = ++oc->tick;
	pthread_mutex_unlock(&oc->lock);
	return s;
}

static void slot_put(struct order_cache *oc, struct order_slot *s)
{
	pthread_mutex_lock(&oc->lock);
	if (--s->refs == 0)
		pthread_cond_broadcast(&oc->changed);
	pthread_mutex_unlock(&oc->lock);
}

uint64_t bfs__order_sample(const bfs_engine *e, uint64_t epoch, unsigned rank, uint64_t k)
{
	struct order_slot *s;
	bfs_layout_epoch ep;
	uint64_t i;

	if (!e->oc) {
		bfs_layout_epoch_init(&ep, e->layout, epoch, NULL);
		return bfs_layout_sample(&ep, rank, k);
	}
	s = slot_get(e->oc, e->layout, epoch);
	i = bfs_layout_sample(&s->ep, rank, k);
	slot_put(e->oc, s);
	return i;
}
