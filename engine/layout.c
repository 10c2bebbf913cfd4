/*
 * layout.c - epoch sequences (file order, global and block shuffles),
 * the samples and shards splits, and resumed epochs (see layout.h).
 *
 * DESIGN: a rank's k-th sample is found top down: its place on the last
 * level (the split's formula), lifted through each resumed run to a
 * place of the sequence (one division each), then the sequence at that
 * place.  A block order needs the samples before each shard in the
 * epoch's shard order (the caller's table, O(shards)); a place is found
 * in it by binary search, so a sample costs O(log shards) and a few
 * passes of the Feistel network.  Shards that all hold the same number
 * of samples (a folder: one each) need no table.
 */
#include "engine/layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"

/* bfs_perm_init_part's domains (layout.h: the shards' order, a block's
 * samples); part of the order contract like permute.c's constants. */
#define DOMAIN_SHARDS 1
#define DOMAIN_BLOCK 2

struct bfs_layout {
	bfs_layout_opts o;    /* first points at the copy below */
	uint64_t *first;      /* block order: the shard table; else NULL */
	uint64_t unit;        /* block order: every shard holds this many
			       * samples (then no table); 0: uneven */
	unsigned world, k, nodes;
	/* the resumed epoch: len[i] = level i's length (len[0] = n); for a
	 * run that split shards, its span length and the places of each span
	 * it consumed */
	uint64_t len[BFS_LAYOUT_MAX_RUNS + 1];
	uint64_t span[BFS_LAYOUT_MAX_RUNS];
	uint64_t eaten[BFS_LAYOUT_MAX_RUNS];
};

uint64_t bfs_layout_default_block(int remote, int folder, bfs_split split,
				  size_t nshards, unsigned nodes)
{
	uint64_t b = nshards / BFS_LAYOUT_BLOCK_SHARE;

	if (split == BFS_SPLIT_SAMPLES && (folder || !remote))
		return 0;
	if (split == BFS_SPLIT_SHARDS && nodes && b > nshards / (2 * (uint64_t)nodes))
		b = nshards / (2 * (uint64_t)nodes);
	if (b > BFS_LAYOUT_BLOCK_MAX)
		b = BFS_LAYOUT_BLOCK_MAX;
	return b ? b : 1;
}

/* The shard table: ascending from 0 to n.  Sets l->unit when every shard
 * holds the same number of samples. */
static int check_shards(bfs_layout *l, char *errmsg)
{
	const bfs_layout_opts *o = &l->o;
	uint64_t unit;

	if (!o->first || !o->nshards || o->first[0] != 0 || o->first[o->nshards] != o->n) {
		bfs_seterr(errmsg, "a block order needs the shards' sample counts (%zu shards, %llu samples)",
			   o->nshards, (unsigned long long)o->n);
		return -EINVAL;
	}
	unit = o->first[1];
	for (size_t k = 0; k < o->nshards; k++) {
		if (o->first[k + 1] < o->first[k]) {
			bfs_seterr(errmsg, "shard table not ascending at shard %zu", k);
			return -EINVAL;
		}
		if (o->first[k + 1] - o->first[k] != unit)
			unit = 0;
	}
	l->unit = unit;
	return 0;
}

/* The resumed runs' levels, checked.  0 or -EINVAL. */
static int check_resume(bfs_layout *l, char *errmsg)
{
	const bfs_layout_resume *r = &l->o.resume;
	char at[64];

	l->len[0] = l->o.n;
	if (!r->on)
		return 0;
	if (r->nruns < 1 || r->nruns > BFS_LAYOUT_MAX_RUNS) {
		bfs_seterr(errmsg, "--resume: 1 to %d runs, not %u", BFS_LAYOUT_MAX_RUNS, r->nruns);
		return -EINVAL;
	}
	for (unsigned i = 0; i < r->nruns; i++) {
		const bfs_layout_run *u = &r->runs[i];
		uint64_t m = l->len[i], per;

		if (r->nruns > 1)
			snprintf(at, sizeof(at), "run %u of epoch %u", i + 1, r->epoch);
		else
			snprintf(at, sizeof(at), "epoch %u", r->epoch);
		if (u->world == 0 || (u->node_ranks && u->world % u->node_ranks)) {
			bfs_seterr(errmsg, "--resume, %s: world %u is not a whole number of nodes of %u ranks",
				   at, u->world, u->node_ranks ? u->node_ranks : 1);
			return -EINVAL;
		}
		if (u->consumed % u->world) {
			bfs_seterr(errmsg,
				   "--resume, %s: %llu samples consumed is not a multiple of its world %u (every rank consumes as many)",
				   at, (unsigned long long)u->consumed, u->world);
			return -EINVAL;
		}
		per = m / u->world;
		if (u->consumed / u->world > per) {
			bfs_seterr(errmsg,
				   "--resume, %s: %llu samples consumed, but its world of %u had %llu (%llu a rank) to serve",
				   at, (unsigned long long)u->consumed, u->world,
				   (unsigned long long)(per * u->world), (unsigned long long)per);
			return -EINVAL;
		}
		if (u->node_ranks) {
			l->span[i] = (uint64_t)u->node_ranks * per;
			l->eaten[i] = u->consumed / u->world * u->node_ranks;
		}
		l->len[i + 1] = m - u->consumed;
	}
	if (l->len[r->nruns] < l->world) {
		bfs_seterr(errmsg,
			   "--resume: epoch %u has %llu samples left, fewer than the %u ranks of this world: start at epoch %u instead",
			   r->epoch, (unsigned long long)l->len[r->nruns], l->world, r->epoch + 1);
		return -EINVAL;
	}
	return 0;
}

int bfs_layout_create(const bfs_layout_opts *o, bfs_layout **out, char *errmsg)
{
	bfs_layout *l;
	int err;

	*out = NULL;
	if (!(l = calloc(1, sizeof(*l))))
		return -ENOMEM;
	l->o = *o;
	l->o.first = NULL;
	l->world = o->world ? o->world : 1;
	l->k = o->node_ranks ? o->node_ranks : 1;
	l->o.world = l->world;
	l->o.node_ranks = l->k;
	err = -EINVAL;
	if (o->n < l->world) {
		bfs_seterr(errmsg, "%llu samples are fewer than the %u ranks",
			   (unsigned long long)o->n, l->world);
		goto fail;
	}
	if (o->block && !o->shuffle) {
		bfs_seterr(errmsg, "--shuffle-block needs --shuffle SEED (without it every epoch is in file order)");
		goto fail;
	}
	if (o->split != BFS_SPLIT_SAMPLES && o->split != BFS_SPLIT_SHARDS) {
		bfs_seterr(errmsg, "split %d: not samples (0) or shards (1)", (int)o->split);
		goto fail;
	}
	if (o->split == BFS_SPLIT_SHARDS) {
		if (o->shuffle && !o->block) {
			bfs_seterr(errmsg, "--split shards deals blocks of shards to the nodes: it needs --shuffle-block N, not a global shuffle (whose every node would read every shard)");
			goto fail;
		}
		if (l->world % l->k) {
			bfs_seterr(errmsg, "--split shards: --world %u is not a whole number of nodes of %u ranks",
				   l->world, l->k);
			goto fail;
		}
		l->nodes = l->world / l->k;
	} else {
		l->nodes = 1;
	}
	if (o->block) {
		l->o.first = o->first; /* checked, then copied */
		if ((err = check_shards(l, errmsg)))
			goto fail;
		l->o.first = NULL;
		if (!l->unit) {
			err = -ENOMEM;
			if (!(l->first = malloc((o->nshards + 1) * sizeof(*l->first))))
				goto fail;
			memcpy(l->first, o->first, (o->nshards + 1) * sizeof(*l->first));
			l->o.first = l->first;
		}
	} else {
		l->o.nshards = 0;
	}
	if ((err = check_resume(l, errmsg)))
		goto fail;
	*out = l;
	return 0;
fail:
	bfs_layout_destroy(l);
	return err;
}

void bfs_layout_destroy(bfs_layout *l)
{
	if (!l)
		return;
	free(l->first);
	free(l);
}

const bfs_layout_opts *bfs_layout_options(const bfs_layout *l) { return &l->o; }

static int resumed(const bfs_layout *l, uint64_t epoch)
{
	return l->o.resume.on && epoch == l->o.resume.epoch;
}

uint64_t bfs_layout_per_rank(const bfs_layout *l, uint64_t epoch)
{
	return (resumed(l, epoch) ? l->len[l->o.resume.nruns] : l->o.n) / l->world;
}

uint64_t bfs_layout_resumed_before(const bfs_layout *l)
{
	return l->o.n - bfs_layout_resumed_left(l);
}

uint64_t bfs_layout_resumed_left(const bfs_layout *l)
{
	return l->o.resume.on ? l->len[l->o.resume.nruns] : l->o.n;
}

unsigned bfs_layout_nodes(const bfs_layout *l) { return l->nodes; }

unsigned bfs_layout_node_of(const bfs_layout *l, unsigned rank)
{
	return l->o.split == BFS_SPLIT_SHARDS ? rank / l->k : 0;
}

size_t bfs_layout_table_len(const bfs_layout *l)
{
	return l->o.block && !l->unit ? l->o.nshards + 1 : 0;
}

void bfs_layout_epoch_init(bfs_layout_epoch *ep, const bfs_layout *l,
			   uint64_t epoch, uint64_t *table)
{
	const bfs_layout_opts *o = &l->o;

	memset(ep, 0, sizeof(*ep));
	ep->l = l;
	ep->epoch = epoch;
	ep->per_rank = bfs_layout_per_rank(l, epoch);
	ep->levels = resumed(l, epoch) ? o->resume.nruns : 0;
	if (!o->shuffle)
		return;
	if (!o->block) {
		bfs_perm_init(&ep->perm, o->n, o->seed, epoch);
		return;
	}
	bfs_perm_init_part(&ep->perm, o->nshards, o->seed, epoch, DOMAIN_SHARDS, 0);
	if (l->unit || !table)
		return;
	table[0] = 0;
	for (size_t j = 0; j < o->nshards; j++) {
		uint64_t s = bfs_perm_apply(&ep->perm, j);

		table[j + 1] = table[j] + (l->first[s + 1] - l->first[s]);
	}
	ep->cum = table;
}

/* Samples before the j-th shard of the epoch's shard order. */
static uint64_t cum_at(const bfs_layout_epoch *ep, uint64_t j)
{
	return ep->l->unit ? j * ep->l->unit : ep->cum[j];
}

/* The last j in [lo, hi) whose cum_at(j) <= p (cum_at(lo) <= p). */
static uint64_t shard_at(const bfs_layout_epoch *ep, uint64_t lo, uint64_t hi, uint64_t p)
{
	if (ep->l->unit)
		return p / ep->l->unit;
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (ep->cum[mid] <= p)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

uint64_t bfs_layout_seq(const bfs_layout_epoch *ep, uint64_t p)
{
	const bfs_layout *l = ep->l;
	const bfs_layout_opts *o = &l->o;
	uint64_t s = o->nshards, j, j0, j1, bs, be, q;
	bfs_perm blk;

	if (p >= o->n || !o->shuffle)
		return p;
	if (!o->block)
		return bfs_perm_apply(&ep->perm, p);
	if (!l->unit && !ep->cum)
		return BFS_ORDER_NONE; /* an epoch set up without its table */
	j = shard_at(ep, 0, s, p);
	j0 = j / o->block * o->block;
	j1 = s - j0 > o->block ? j0 + o->block : s;
	bs = cum_at(ep, j0);
	be = cum_at(ep, j1);
	bfs_perm_init_part(&blk, be - bs, o->seed, ep->epoch, DOMAIN_BLOCK, j0 / o->block);
	q = bs + bfs_perm_apply(&blk, p - bs);
	j = shard_at(ep, j0, j1, q);
	s = bfs_perm_apply(&ep->perm, j);
	return (l->unit ? s * l->unit : l->first[s]) + (q - cum_at(ep, j));
}

/* The place on a level of length len of rank's k-th sample, laid out by
 * world, node ranks kr and split, in epoch `epoch` (the turn of the
 * deal).  k < len / world. */
static uint64_t place(uint64_t len, unsigned world, unsigned kr, int shards,
		      uint64_t epoch, unsigned rank, uint64_t k)
{
	unsigned nodes;
	uint64_t span;

	if (!shards)
		return rank + k * world;
	nodes = world / kr;
	span = (uint64_t)kr * (len / world);
	return (uint64_t)((rank / kr + epoch) % nodes) * span + rank % kr + k * kr;
}

/* Level i's place q as a place of level i - 1 (run i, counted from 1). */
static uint64_t lift(const bfs_layout *l, unsigned i, uint64_t q)
{
	const bfs_layout_run *u = &l->o.resume.runs[i - 1];
	uint64_t nodes, rest;

	if (!u->node_ranks)
		return q + u->consumed;
	nodes = u->world / u->node_ranks;
	rest = l->span[i - 1] - l->eaten[i - 1];
	if (q < nodes * rest)
		return q / rest * l->span[i - 1] + l->eaten[i - 1] + q % rest;
	return nodes * l->span[i - 1] + (q - nodes * rest);
}

uint64_t bfs_layout_sample(const bfs_layout_epoch *ep, unsigned rank, uint64_t k)
{
	const bfs_layout *l = ep->l;
	uint64_t p;

	if (k >= ep->per_rank || rank >= l->world)
		return BFS_ORDER_NONE;
	p = place(l->len[ep->levels], l->world, l->k, l->o.split == BFS_SPLIT_SHARDS,
		  ep->epoch, rank, k);
	for (unsigned i = ep->levels; i > 0; i--)
		p = lift(l, i, p);
	return bfs_layout_seq(ep, p);
}
