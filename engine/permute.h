/*
 * permute.h - stateless, invertible epoch orders: a keyed pseudorandom
 * permutation of [0, n) chosen by (seed, epoch) alone, and PyTorch
 * DistributedSampler(drop_last=True) rank slices on top of it.
 *
 * Any position of any epoch is computed on its own, in O(1) expected time
 * and without tables, so any batch of any epoch can be built first, by any
 * process, and always holds the same samples.
 *
 * The permutation is a Feistel network over the smallest power of two
 * 2^b >= max(n, 256), split into halves of ceil(b/2) and floor(b/2) bits,
 * BFS_PERM_ROUNDS rounds, each round function a splitmix64 finalizer of
 * (round key XOR right half); values that land outside [0, n) are walked
 * through the network again ("cycle walking") until they land inside.
 * A position takes 2^b / n walks on average: fewer than 2 for n > 128.
 * (The 8-bit floor and 8 rounds are there for quality: with halves of 1-3
 * bits a 6-round network visibly favours some orders of tiny n.)
 * It is a deterministic pseudorandom permutation for shuffling, not a
 * cryptographic one.  The exact orders are part of the on-disk contract
 * (same seed, same bytes): changing this file changes every shuffled epoch.
 */
#ifndef BFS_PERMUTE_H
#define BFS_PERMUTE_H

#include <stdint.h>

/* Feistel rounds per pass through the network. */
#define BFS_PERM_ROUNDS 8

/* A permutation of [0, n).  A plain value: copy it freely; no destroy. */
typedef struct {
	uint64_t n;                      /* domain size, >= 1 */
	unsigned lbits, rbits;           /* Feistel half widths, 4..32 each */
	uint64_t key[BFS_PERM_ROUNDS];   /* round keys from (seed, epoch) */
} bfs_perm;

/*
 * Set up the permutation of epoch `epoch` under `seed` over [0, n).
 * n: any value >= 1 (n == 0 is treated as 1).  Every (seed, epoch) pair
 * gives its own order; n only sets the domain.  Never fails; allocates
 * nothing.  Pure; any thread.
 */
void bfs_perm_init(bfs_perm *p, uint64_t n, uint64_t seed, uint64_t epoch);

/*
 * The sample index at position pos of the epoch (pos < n).  For pos >= n
 * returns pos unchanged.  Pure; any number of threads on one bfs_perm.
 */
uint64_t bfs_perm_apply(const bfs_perm *p, uint64_t pos);

/*
 * The position of `sample` in the epoch: bfs_perm_apply(p,
 * bfs_perm_invert(p, s)) == s for every s < n.  For sample >= n returns
 * sample unchanged.  Same cost and threading as bfs_perm_apply.
 */
uint64_t bfs_perm_invert(const bfs_perm *p, uint64_t sample);

/*
 * A permutation of [0, n) of its own for one part of epoch `epoch` under
 * `seed`: part `index` of kind `domain` (engine/layout.h numbers the
 * shards' order and each block's samples).  Keyed by (seed, epoch,
 * domain, index) through another domain constant than bfs_perm_init's, so
 * it is never the epoch's own order; the same rounds and cycle walking.
 * Never fails; allocates nothing.  Pure; any thread.
 */
void bfs_perm_init_part(bfs_perm *p, uint64_t n, uint64_t seed, uint64_t epoch,
			uint64_t domain, uint64_t index);

/*
 * One rank's slice of one epoch, with the semantics of PyTorch's
 * DistributedSampler(num_replicas=world, rank=rank, shuffle, drop_last=True):
 *   per_rank = floor(n / world)   (PyTorch: ceil((n - world) / world) when
 *                                  world does not divide n, else n / world)
 *   the epoch order is order[i] = bfs_perm_apply(perm, i) with shuffle,
 *   or order[i] = i without;
 *   the first world * per_rank positions are kept, the tail is dropped;
 *   rank r's k-th sample is order[r + k * world] (strided, as PyTorch).
 * So ranks are disjoint, all have per_rank samples, and together they hold
 * world * per_rank distinct samples.  Only the semantics are PyTorch's: the
 * shuffled order itself is batchfs's own (torch.randperm is not reproduced).
 * A plain value like bfs_perm.
 */
typedef struct {
	bfs_perm perm;      /* the epoch's order; unused without shuffle */
	int shuffle;        /* 0: file order */
	uint64_t n;         /* samples in the whole epoch */
	unsigned rank, world;
	uint64_t per_rank;  /* samples this rank gets, floor(n / world) */
} bfs_order;

/* bfs_order_sample's answer for k >= per_rank. */
#define BFS_ORDER_NONE UINT64_MAX

/*
 * Set up rank `rank` of `world` for epoch `epoch`.  shuffle: nonzero for
 * the (seed, epoch) permutation, 0 for file order (seed and epoch unused).
 * Returns 0, or -EINVAL for world == 0, rank >= world or n < world (which
 * would leave every rank empty); *o is then zeroed.  Pure; any thread.
 */
int bfs_order_init(bfs_order *o, uint64_t n, int shuffle, uint64_t seed, uint64_t epoch,
                   unsigned rank, unsigned world);

/*
 * The source sample index of this rank's k-th sample of the epoch, for
 * k < o->per_rank; BFS_ORDER_NONE for k >= per_rank.  Pure; any number of
 * threads on one bfs_order.
 */
uint64_t bfs_order_sample(const bfs_order *o, uint64_t k);

/*
 * The same for another rank of the same epoch: what bfs_order_sample gives
 * on the order bfs_order_init makes for `rank` (same n, shuffle, seed,
 * epoch and world).  Every rank has the same per_rank, so one bfs_order per
 * epoch serves all of them.  BFS_ORDER_NONE for k >= per_rank or rank >=
 * world.  Pure; any number of threads on one bfs_order.
 */
uint64_t bfs_order_sample_rank(const bfs_order *o, unsigned rank, uint64_t k);

#endif
