/*
 * layout.h - which source sample each rank serves at each step of an
 * epoch: the epoch's sequence (file order, a global shuffle, or a block
 * shuffle over shards), how the ranks divide it (--split samples or
 * shards), and an epoch that starts part way (an elastic resume).
 *
 * Everything is a pure function of the options and (seed, epoch): any
 * position of any epoch is computed on its own, by any process, in
 * O(log shards) time, so every rank of a job computes the same layout.
 *
 * THE SEQUENCE of epoch e, seq(p) for p in [0, n): the order the epoch
 * would serve the samples in with one rank.
 *   no shuffle     p: file order (shards sorted by name, records in order)
 *   global         bfs_perm_apply(bfs_perm_init(n, seed, e), p): the
 *                  order every batchfs mount has always had (permute.h);
 *                  not one bit of it changes
 *   block N        the shards in the order of their own permutation of
 *                  (seed, e) (bfs_perm_init_part, domain 1), taken N at a
 *                  time: block b is the shards at places bN .. bN+N-1 of
 *                  that order, its samples shard after shard; and the
 *                  samples of each block permuted by (seed, e, b)
 *                  (domain 2, index b).  So a block's samples come
 *                  together and in no order, and the next block needs
 *                  none of its shards: what must be local is one block.
 *
 * THE SPLIT: rank r's k-th sample of an epoch is seq(place(r, k)), for
 * k < per_rank = floor(n / world) (drop_last: the tail of the sequence
 * past world * per_rank is not served):
 *   samples        place = r + k * world: PyTorch's DistributedSampler
 *                  (drop_last=True) over the sequence, as bfs_order
 *   shards         the world's ranks sit on nodes of node_ranks ranks
 *                  each (ranks i*K .. i*K+K-1 on node i, K = node_ranks,
 *                  nodes = world / K).  The sequence is cut into nodes
 *                  spans of L = K * per_rank consecutive places; node i
 *                  takes span (i + e) mod nodes, so the deal turns every
 *                  epoch; inside its span the node's ranks take places in
 *                  turn: place = span * L + (r mod K) + k * K.  A span
 *                  of a block order holds whole blocks but at its two
 *                  ends, so each node reads about 1/nodes of the shards.
 *
 * AN EPOCH THAT STARTS PART WAY (resume): runs 1..d of a job served part
 * of epoch E before they stopped; run i had world W_i, split s_i (and K_i)
 * and its ranks had each consumed c_i samples, C_i = W_i * c_i in all.
 * Level 0 is the sequence (length n); run i laid its ranks over level
 * i-1 as above, and level i is level i-1 without the places run i
 * consumed, in their order (length len_i = len_{i-1} - C_i):
 *   samples        the places consumed are the first C_i: level i is the
 *                  rest of level i-1 from place C_i on
 *   shards         the first c_i * K_i places of each node's span:
 *                  level i is each span's rest, span after span, then the
 *                  tail no span had
 * Epoch E of this layout lays its own world over level d, so over runs
 * 1..d and this one every sample of the epoch is served once, but for
 * the last len_d mod world places of level d (drop_last again: fewer
 * than world samples).  Levels keep the sequence's order, so a shards
 * split keeps its locality, and a layout of the same world, split and K
 * as the last run serves each rank exactly the samples that run would
 * have served next.  Chained: a run of a resumed epoch is one more run.
 * Every other epoch is laid out whole.
 *
 * Threads: create/destroy from one thread; everything else is pure and
 * may be called from any number of threads on one layout.
 */
#ifndef BFS_LAYOUT_H
#define BFS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/permute.h"

typedef enum {
	BFS_SPLIT_SAMPLES = 0,
	BFS_SPLIT_SHARDS = 1,
} bfs_split;

/* One run that consumed part of an epoch before it stopped. */
typedef struct {
	uint64_t consumed;   /* samples its whole job consumed: world x each
			      * rank's (all ranks the same) */
	unsigned world;
	unsigned node_ranks; /* 0: it split samples; K >= 1: it split shards,
			      * K ranks a node */
} bfs_layout_run;

#define BFS_LAYOUT_MAX_RUNS 16

typedef struct {
	int on;              /* epoch `epoch` starts part way */
	unsigned epoch;
	unsigned nruns;      /* 1 .. BFS_LAYOUT_MAX_RUNS, oldest first */
	bfs_layout_run runs[BFS_LAYOUT_MAX_RUNS];
} bfs_layout_resume;

typedef struct {
	uint64_t n;              /* samples, >= 1 */
	/* The shards, for a block order: shard k holds samples first[k] ..
	 * first[k + 1] - 1; first[0] = 0, ascending, first[nshards] = n.
	 * Copied at create.  Unused (may be NULL) without a block. */
	const uint64_t *first;
	size_t nshards;
	int shuffle;             /* 0: file order */
	uint64_t seed;
	uint64_t block;          /* shards per block (needs shuffle); 0: a
				  * global shuffle */
	bfs_split split;
	unsigned world;          /* 0 = 1 */
	unsigned node_ranks;     /* split shards: ranks a node, dividing
				  * world; 0 = 1 */
	bfs_layout_resume resume;
} bfs_layout_opts;

typedef struct bfs_layout bfs_layout;

/*
 * Check the options and set the layout up.  Errors: -EINVAL with errmsg
 * (BFS_ERRMSG_MAX bytes) saying what: a block without shuffle, a shard
 * table that does not add up to n, a shards split over a global shuffle
 * (whose nodes would read every shard), a world that node_ranks does not
 * divide, fewer samples than ranks, a resume whose run consumed more
 * than its ranks had or a count its world does not divide, or that
 * leaves fewer samples than this world has ranks; -ENOMEM.  On success
 * *out owns a copy of everything.  One thread.
 */
int bfs_layout_create(const bfs_layout_opts *o, bfs_layout **out, char *errmsg);
void bfs_layout_destroy(bfs_layout *l); /* NULL ok */

const bfs_layout_opts *bfs_layout_options(const bfs_layout *l);

/* Samples each rank serves in epoch `epoch` (before drop_remainder's
 * batches): floor(n / world), or for a resumed epoch floor(len_d /
 * world).  Pure. */
uint64_t bfs_layout_per_rank(const bfs_layout *l, uint64_t epoch);
/* The resumed epoch's samples served before (C_1 + ... + C_d) and left
 * (len_d); 0 and n without a resume.  Pure. */
uint64_t bfs_layout_resumed_before(const bfs_layout *l);
uint64_t bfs_layout_resumed_left(const bfs_layout *l);
/* With the shards split: nodes (world / node_ranks) and rank's node;
 * 1 and 0 otherwise.  Pure. */
unsigned bfs_layout_nodes(const bfs_layout *l);
unsigned bfs_layout_node_of(const bfs_layout *l, unsigned rank);

/* Entries of the table an epoch needs (bfs_layout_epoch_init), 0 when
 * it needs none: nshards + 1 for a block order over shards of uneven
 * sizes.  Pure. */
size_t bfs_layout_table_len(const bfs_layout *l);

/* One epoch of a layout: a plain value (no destroy) that reads the
 * layout and the caller's table; both must outlive it. */
typedef struct {
	const bfs_layout *l;
	uint64_t epoch;
	bfs_perm perm;        /* global: the epoch's order; block: the shards' */
	const uint64_t *cum;  /* block order over uneven shards: cum[j] = the
			       * samples of the shards before the j-th of the
			       * shards' order (the caller's table) */
	uint64_t per_rank;
	unsigned levels;      /* resumed runs under this epoch (0 or d) */
} bfs_layout_epoch;

/*
 * Set up epoch `epoch`: table is bfs_layout_table_len(l) entries the
 * caller owns (filled here, O(nshards)), or NULL when that is 0.  Never
 * fails; allocates nothing.  Pure; any thread.
 */
void bfs_layout_epoch_init(bfs_layout_epoch *ep, const bfs_layout *l,
			   uint64_t epoch, uint64_t *table);

/* Rank rank's k-th sample of the epoch (a source sample index), or
 * BFS_ORDER_NONE for k >= ep->per_rank or rank >= world.  Pure; any
 * number of threads on one epoch. */
uint64_t bfs_layout_sample(const bfs_layout_epoch *ep, unsigned rank, uint64_t k);

/* The epoch's sequence at place p < n (see above); p >= n: p.  Pure. */
uint64_t bfs_layout_seq(const bfs_layout_epoch *ep, uint64_t p);

/* The block size batchfs uses when none is asked for: a function of the
 * source (and of the split, which every rank shares), never of a node's
 * cache, so that every rank computes the same order.
 *   0 (a global shuffle) for a local source split by samples, and for a
 *   folder split by samples (each image is its own object: blocks save
 *   nothing there);
 *   else nshards / BFS_LAYOUT_BLOCK_SHARE shards, at least 1 and at most
 *   BFS_LAYOUT_BLOCK_MAX: a block is 1/32 of the dataset, so fetching the
 *   next block while one is read keeps 1/16 of it on disk, and a batch of
 *   256 mixes up to 64 shards (object storage, where a global shuffle
 *   needs every shard local at once, and --split shards, which deals
 *   blocks); with the shards split, also at most nshards / (2 * nodes),
 *   so that each node's share holds two blocks or more.
 * docs/BENCHMARKS.md has the figures behind the numbers. */
#define BFS_LAYOUT_BLOCK_SHARE 32
#define BFS_LAYOUT_BLOCK_MAX 64
uint64_t bfs_layout_default_block(int remote, int folder, bfs_split split,
				  size_t nshards, unsigned nodes);

#endif
