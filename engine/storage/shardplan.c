/*
 * shardplan.c - the plan of a remote source's objects (see shardplan.h):
 * spans kept per object, next use, the whole-or-by-range sweep, and the
 * choice of what to evict and what to fetch next.
 */
#include "engine/storage/shardplan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct pspan {
	uint64_t first, last, bytes;
	int whole;
};

struct bfs_shardplan {
	size_t nobj;
	uint64_t *cost;
	struct pspan *spans;  /* by object, then first */
	size_t nspans;
	size_t *off;          /* object k's spans: spans[off[k] .. off[k+1]) */
};

int bfs_shardplan_create(size_t nobj, const uint64_t *cost, bfs_shardplan **out)
{
	bfs_shardplan *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->nobj = nobj;
	p->cost = malloc((nobj ? nobj : 1) * sizeof(*p->cost));
	p->off = calloc(nobj + 1, sizeof(*p->off));
	if (!p->cost || !p->off) {
		bfs_shardplan_destroy(p);
		return -ENOMEM;
	}
	if (nobj)
		memcpy(p->cost, cost, nobj * sizeof(*cost));
	*out = p;
	return 0;
}

void bfs_shardplan_destroy(bfs_shardplan *p)
{
	if (!p)
		return;
	free(p->cost);
	free(p->spans);
	free(p->off);
	free(p);
}

static int by_obj_first(const void *a, const void *b)
{
	const bfs_span *x = a, *y = b;

	if (x->obj != y->obj)
		return x->obj < y->obj ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first;
}

/* The sweep's order: spans (indexes into ctx's array) by first position. */
static int by_first(const void *a, const void *b, void *ctx)
{
	const struct pspan *sp = ctx;
	const struct pspan *x = &sp[*(const size_t *)a];
	const struct pspan *y = &sp[*(const size_t *)b];

	return x->first < y->first ? -1 : x->first > y->first;
}

/* A min-heap of (last, cost) of the whole spans alive in the sweep. */
struct alive {
	uint64_t last, cost;
};

static void heap_push(struct alive *h, size_t *n, struct alive v)
{
	size_t i = (*n)++;

	while (i && h[(i - 1) / 2].last > v.last) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

static struct alive heap_pop(struct alive *h, size_t *n)
{
	struct alive top = h[0], v = h[--*n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1].last < h[c].last)
			c++;
		if (h[c].last >= v.last)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = v;
	return top;
}

int bfs_shardplan_set(bfs_shardplan *p, const bfs_span *spans, size_t n,
		      uint64_t room, uint64_t limit)
{
	bfs_span *sorted = NULL;
	struct pspan *ps = NULL;
	size_t *order = NULL, alive_n = 0;
	struct alive *alive = NULL;
	uint64_t total = 0, occ = 0;
	int err = -ENOMEM;

	for (size_t i = 0; i < n; i++)
		if (spans[i].obj >= p->nobj || spans[i].last < spans[i].first)
			return -EINVAL;
	sorted = malloc((n ? n : 1) * sizeof(*sorted));
	ps = malloc((n ? n : 1) * sizeof(*ps));
	order = malloc((n ? n : 1) * sizeof(*order));
	alive = malloc((n ? n : 1) * sizeof(*alive));
	if (!sorted || !ps || !order || !alive)
		goto out;
	if (n)
		memcpy(sorted, spans, n * sizeof(*spans));
	qsort(sorted, n, sizeof(*sorted), by_obj_first);
	memset(p->off, 0, (p->nobj + 1) * sizeof(*p->off));
	for (size_t i = 0; i < n; i++) {
		ps[i] = (struct pspan){ sorted[i].first, sorted[i].last,
					sorted[i].bytes, 0 };
		p->off[sorted[i].obj + 1]++;
		if (!i || sorted[i - 1].obj != sorted[i].obj)
			total += p->cost[sorted[i].obj];
	}
	for (size_t k = 0; k < p->nobj; k++)
		p->off[k + 1] += p->off[k];
	if (total <= limit) {
		/* everything the plan names fits at once: keep it all */
		for (size_t i = 0; i < n; i++)
			ps[i].whole = 1;
	} else {
		for (size_t i = 0; i < n; i++)
			order[i] = i;
		qsort_r(order, n, sizeof(*order), by_first, ps);
		for (size_t t = 0; t < n; t++) {
			struct pspan *s = &ps[order[t]];
			uint64_t c = p->cost[sorted[order[t]].obj];

			while (alive_n && alive[0].last < s->first)
				occ -= heap_pop(alive, &alive_n).cost;
			if (occ + c <= room) {
				s->whole = 1;
				occ += c;
				heap_push(alive, &alive_n, (struct alive){ s->last, c });
			}
		}
	}
	free(p->spans);
	p->spans = ps;
	p->nspans = n;
	ps = NULL;
	err = 0;
out:
	free(sorted);
	free(ps);
	free(order);
	free(alive);
	return err;
}

/* Object k's span current at pos (the one pos is in, else the next), or
 * NULL. */
static const struct pspan *current(const bfs_shardplan *p, size_t k,
				   uint64_t pos)
{
	if (k >= p->nobj)
		return NULL;
	for (size_t i = p->off[k]; i < p->off[k + 1]; i++)
		if (p->spans[i].last >= pos)
			return &p->spans[i];
	return NULL;
}

uint64_t bfs_shardplan_next(const bfs_shardplan *p, size_t k, uint64_t pos)
{
	const struct pspan *s = current(p, k, pos);

	if (!s)
		return UINT64_MAX;
	return s->first > pos ? s->first - pos : 0;
}

int bfs_shardplan_whole(const bfs_shardplan *p, size_t k, uint64_t pos)
{
	const struct pspan *s = current(p, k, pos);

	return s ? s->whole : 0;
}

uint64_t bfs_shardplan_bytes_ahead(const bfs_shardplan *p, size_t k,
				   uint64_t pos)
{
	const struct pspan *s = current(p, k, pos);
	uint64_t from, len;

	if (!s)
		return 0;
	from = s->first > pos ? s->first : pos;
	len = s->last - s->first + 1;
	return (uint64_t)((double)s->bytes * (double)(s->last - from + 1) /
			  (double)len);
}

ssize_t bfs_shardplan_victim(const bfs_shardplan *p, uint64_t pos,
			     const uint8_t *ok, uint64_t before)
{
	ssize_t best = -1;
	uint64_t best_d = 0;

	for (size_t k = 0; k < p->nobj; k++) {
		uint64_t d;

		if (!ok[k])
			continue;
		d = bfs_shardplan_next(p, k, pos);
		if (d <= before)
			continue;
		if (best < 0 || d >= best_d) {
			best = (ssize_t)k;
			best_d = d;
		}
	}
	return best;
}

ssize_t bfs_shardplan_next_fetch(const bfs_shardplan *p, uint64_t pos,
				 const uint8_t *want)
{
	ssize_t best = -1;
	uint64_t best_d = UINT64_MAX;

	for (size_t k = 0; k < p->nobj; k++) {
		const struct pspan *s;
		uint64_t d;

		if (!want[k] || !(s = current(p, k, pos)) || !s->whole)
			continue;
		d = s->first > pos ? s->first - pos : 0;
		if (d < best_d) {
			best = (ssize_t)k;
			best_d = d;
		}
	}
	return best;
}

void bfs_shardplan_ahead(const bfs_shardplan *p, uint64_t pos, size_t *objs,
			 uint64_t *cost)
{
	*objs = 0;
	*cost = 0;
	for (size_t k = 0; k < p->nobj; k++)
		if (current(p, k, pos)) {
			(*objs)++;
			*cost += p->cost[k];
		}
}
