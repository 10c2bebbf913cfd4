/*
 * badset.c - bad, pending and unknown samples (see badset.h).
 *
 * An open-addressing table keyed by sample index + 1 (0 marks a free
 * entry), linear probing, backward-shift deletion (no tombstones), grown
 * to twice its size past 3/4 full.  A BAD entry's `next` is a hint: every
 * sample from it up to (not including) `next`, going round, is BAD.
 */
#include "engine/badset.h"

#include <errno.h>
#include <stdlib.h>

struct entry {
	uint64_t key;   /* sample + 1; 0: free */
	uint64_t next;  /* BAD: the first sample after it that may be good */
	int32_t code;   /* BAD: its error */
	uint8_t state;  /* bfs_sample_state */
};

struct bfs_badset {
	uint64_t n;          /* samples */
	struct entry *t;
	size_t cap;          /* a power of two */
	size_t used;
	uint64_t bad;
};

static size_t slot_of(const bfs_badset *b, uint64_t key)
{
	uint64_t h = key * 0x9e3779b97f4a7c15ull;

	return (size_t)(h >> 17) & (b->cap - 1);
}

static struct entry *find(const bfs_badset *b, uint64_t i)
{
	uint64_t key = i + 1;

	for (size_t s = slot_of(b, key);; s = (s + 1) & (b->cap - 1)) {
		if (b->t[s].key == key)
			return &b->t[s];
		if (!b->t[s].key)
			return NULL;
	}
}

static int grow(bfs_badset *b)
{
	struct entry *old = b->t;
	size_t ocap = b->cap;

	if (!(b->t = calloc(ocap * 2, sizeof(*b->t)))) {
		b->t = old;
		return -ENOMEM;
	}
	b->cap = ocap * 2;
	for (size_t s = 0; s < ocap; s++) {
		size_t d;

		if (!old[s].key)
			continue;
		for (d = slot_of(b, old[s].key); b->t[d].key; d = (d + 1) & (b->cap - 1))
			;
		b->t[d] = old[s];
	}
	free(old);
	return 0;
}

/* The entry of sample i, made (UNKNOWN) if missing.  NULL: -ENOMEM. */
static struct entry *get(bfs_badset *b, uint64_t i)
{
	struct entry *e = find(b, i);
	size_t s;

	if (e)
		return e;
	if ((b->used + 1) * 4 > b->cap * 3 && grow(b))
		return NULL;
	for (s = slot_of(b, i + 1); b->t[s].key; s = (s + 1) & (b->cap - 1))
		;
	b->t[s] = (struct entry){ .key = i + 1, .next = (i + 1) % b->n };
	b->used++;
	return &b->t[s];
}

/* Remove entry e, shifting later entries of its probe run back. */
static void drop(bfs_badset *b, struct entry *e)
{
	size_t hole = (size_t)(e - b->t);

	for (size_t s = (hole + 1) & (b->cap - 1); b->t[s].key;
	     s = (s + 1) & (b->cap - 1)) {
		size_t home = slot_of(b, b->t[s].key);

		/* s may move to the hole unless its home lies in (hole, s] */
		if (((s - home) & (b->cap - 1)) >= ((s - hole) & (b->cap - 1))) {
			b->t[hole] = b->t[s];
			hole = s;
		}
	}
	b->t[hole].key = 0;
	b->used--;
}

int bfs_badset_create(uint64_t n, bfs_badset **out)
{
	bfs_badset *b;

	*out = NULL;
	if (n == 0)
		return -EINVAL;
	if (!(b = calloc(1, sizeof(*b))))
		return -ENOMEM;
	b->n = n;
	b->cap = 64;
	if (!(b->t = calloc(b->cap, sizeof(*b->t)))) {
		free(b);
		return -ENOMEM;
	}
	*out = b;
	return 0;
}

void bfs_badset_destroy(bfs_badset *b)
{
	if (!b)
		return;
	free(b->t);
	free(b);
}

bfs_sample_state bfs_badset_state(const bfs_badset *b, uint64_t i, int *code)
{
	const struct entry *e = find(b, i);

	if (!e)
		return BFS_SAMPLE_UNKNOWN;
	if (code && e->state == BFS_SAMPLE_BAD)
		*code = e->code;
	return (bfs_sample_state)e->state;
}

int bfs_badset_claim(bfs_badset *b, uint64_t i)
{
	struct entry *e;

	if (find(b, i))
		return -EEXIST;
	if (!(e = get(b, i)))
		return -ENOMEM;
	e->state = BFS_SAMPLE_PENDING;
	return 0;
}

void bfs_badset_unclaim(bfs_badset *b, uint64_t i)
{
	struct entry *e = find(b, i);

	if (e && e->state == BFS_SAMPLE_PENDING)
		drop(b, e);
}

int bfs_badset_mark_bad(bfs_badset *b, uint64_t i, int code)
{
	struct entry *e = get(b, i);

	if (!e)
		return -ENOMEM;
	if (e->state == BFS_SAMPLE_BAD)
		return 0;
	e->state = BFS_SAMPLE_BAD;
	e->code = code;
	e->next = (i + 1) % b->n;
	b->bad++;
	return 1;
}

uint64_t bfs_badset_next(bfs_badset *b, uint64_t i)
{
	uint64_t c = (i + 1) % b->n, end, dist = 1;
	struct entry *e;

	/* Find the end of the chain of BAD entries after i.  The hints of a
	 * run may jump over i only when everything else is BAD; `dist`
	 * counts the samples passed, so a set that is all BAD stops. */
	while (dist < b->n && (e = find(b, c)) && e->state == BFS_SAMPLE_BAD) {
		uint64_t step = (e->next + b->n - c) % b->n;

		if (step == 0)
			step = b->n;
		dist += step;
		c = e->next;
	}
	if (dist >= b->n)
		return i;
	end = c;
	/* Point every hint on the way at the end. */
	for (c = (i + 1) % b->n; c != end;) {
		e = find(b, c);
		c = e->next;
		e->next = end;
	}
	return end;
}

uint64_t bfs_badset_count(const bfs_badset *b)
{
	return b->bad;
}
