/*
 * permute.c - keyed Feistel permutation with cycle walking, and rank slices
 * of it (see permute.h for the contract).
 *
 * DESIGN: a value x in [0, 2^b) is split into L (high lbits) and R (low
 * rbits), lbits = ceil(b/2), rbits = floor(b/2).  A round maps (L, R) to
 * (R, L ^ F_i(R)), where F_i(R) is the top |L| bits of mix64(key[i] ^ R);
 * the halves trade widths every round, and after an even number of rounds
 * the widths are back to (lbits, rbits).  Each round is a bijection, so the
 * network is one; running the rounds backwards undoes it.  Restricting it
 * to [0, n) by cycle walking (apply again while the value is >= n) keeps it
 * a bijection, and walking backwards with the inverse inverts that.
 */
#include "engine/permute.h"

#include <errno.h>
#include <string.h>

_Static_assert(BFS_PERM_ROUNDS % 2 == 0, "widths return to (lbits, rbits)");

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define DOMAIN_PERM 0x7065726d75746521ULL /* "permute!": keys differ from augment's */
#define DOMAIN_PART 0x7061727473686466ULL /* "partshdf": bfs_perm_init_part's */

/* splitmix64's finalizer (Stafford's Mix13): a bijection of 64 bits with
 * full avalanche. */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The network over [0, n) with round keys from k. */
static void perm_setup(bfs_perm *p, uint64_t n, uint64_t k)
{
	unsigned b = 8; /* see permute.h: quality floor for tiny n */

	if (n == 0)
		n = 1;
	while (b < 64 && ((uint64_t)1 << b) < n)
		b++;
	memset(p, 0, sizeof(*p));
	p->n = n;
	p->lbits = (b + 1) / 2;
	p->rbits = b / 2;
	for (int i = 0; i < BFS_PERM_ROUNDS; i++)
		p->key[i] = mix64(k + (uint64_t)(i + 1) * GOLDEN);
}

void bfs_perm_init(bfs_perm *p, uint64_t n, uint64_t seed, uint64_t epoch)
{
	perm_setup(p, n, mix64(mix64(seed ^ DOMAIN_PERM) + epoch * GOLDEN));
}

void bfs_perm_init_part(bfs_perm *p, uint64_t n, uint64_t seed, uint64_t epoch,
			uint64_t domain, uint64_t index)
{
	uint64_t k = mix64(mix64(seed ^ DOMAIN_PART) + epoch * GOLDEN);

	k = mix64(k ^ mix64(domain + GOLDEN));
	perm_setup(p, n, mix64(k + index * GOLDEN));
}

/* Round function: `bits` (1..32) pseudorandom bits of (key, r). */
static uint64_t round_f(uint64_t key, uint64_t r, unsigned bits)
{
	return mix64(key ^ r) >> (64 - bits);
}

static uint64_t low_mask(unsigned bits)
{
	return ((uint64_t)1 << bits) - 1; /* bits <= 32 */
}

static uint64_t feistel_fwd(const bfs_perm *p, uint64_t x)
{
	unsigned wl = p->lbits, wr = p->rbits, t;
	uint64_t l = x >> wr, r = x & low_mask(wr), nl;

	for (int i = 0; i < BFS_PERM_ROUNDS; i++) {
		nl = r;
		r = l ^ round_f(p->key[i], r, wl);
		l = nl;
		t = wl, wl = wr, wr = t;
	}
	return (l << wr) | r;
}

static uint64_t feistel_inv(const bfs_perm *p, uint64_t y)
{
	unsigned wl = p->lbits, wr = p->rbits, t;
	uint64_t l = y >> wr, r = y & low_mask(wr), pl;

	/* Undo round i: (l, r) = (R_i, L_i ^ F_i(R_i)), |L_i| = |r| = wr. */
	for (int i = BFS_PERM_ROUNDS - 1; i >= 0; i--) {
		pl = r ^ round_f(p->key[i], l, wr);
		r = l;
		l = pl;
		t = wl, wl = wr, wr = t;
	}
	return (l << wr) | r;
}

uint64_t bfs_perm_apply(const bfs_perm *p, uint64_t pos)
{
	if (pos >= p->n || p->n == 1)
		return pos;
	do
		pos = feistel_fwd(p, pos);
	while (pos >= p->n);
	return pos;
}

uint64_t bfs_perm_invert(const bfs_perm *p, uint64_t sample)
{
	if (sample >= p->n || p->n == 1)
		return sample;
	do
		sample = feistel_inv(p, sample);
	while (sample >= p->n);
	return sample;
}

int bfs_order_init(bfs_order *o, uint64_t n, int shuffle, uint64_t seed, uint64_t epoch,
                   unsigned rank, unsigned world)
{
	memset(o, 0, sizeof(*o));
	if (world == 0 || rank >= world || n < world)
		return -EINVAL;
	o->shuffle = shuffle != 0;
	o->n = n;
	o->rank = rank;
	o->world = world;
	o->per_rank = n / world;
	bfs_perm_init(&o->perm, n, seed, epoch);
	return 0;
}

uint64_t bfs_order_sample_rank(const bfs_order *o, unsigned rank, uint64_t k)
{
	uint64_t pos;

	if (k >= o->per_rank || rank >= o->world)
		return BFS_ORDER_NONE;
	pos = rank + k * o->world; /* < per_rank * world <= n */
	return o->shuffle ? bfs_perm_apply(&o->perm, pos) : pos;
}

uint64_t bfs_order_sample(const bfs_order *o, uint64_t k)
{
	return bfs_order_sample_rank(o, o->rank, k);
}
