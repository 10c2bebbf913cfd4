/*
 * order_main.c - build/bench_order: what an epoch order costs a node that
 * streams shards from object storage, and what it does to the shuffle,
 * computed with the real orders (engine/layout.h) over a model of a
 * dataset: no data, no mount, no timing.
 *
 *   bench_order [--shards S] [--samples N] [--batch B] [--epochs E]
 *               [--markdown]
 *
 * For each block size (1 .. 64 shards, and the global shuffle):
 *   - rho: Spearman's rank correlation between sample index and place in
 *     epoch 0 (0 for an order that forgets the file order);
 *   - rho_epochs: the mean |rho| between the places of the samples in
 *     consecutive epochs (0: each epoch is drawn afresh);
 *   - same_shard: the share of the pairs of samples of one batch that
 *     come from the same shard, averaged over the batches of epoch 0
 *     (a global shuffle: about 1/S; one shard a block: 1);
 *   - working_set: the most shards that are needed again later while
 *     others are read, within an epoch (the shard cache that fetches each
 *     shard once per epoch, as a share of the dataset);
 *   - fetched at cache 10/25/50% of the dataset: shard bytes fetched per
 *     epoch, as a multiple of the dataset, when whole shards are fetched
 *     on demand into a cache that evicts the shard needed furthest in the
 *     future (Belady's optimal policy: a lower bound for any real one),
 *     averaged over epochs 1 .. E-1 (epoch 0 starts cold).
 * Then --split shards against --split samples for 1, 2 and 4 nodes (the
 * default block): the shards each node reads per epoch (its least bytes
 * fetched), and its fetches with a cache of 25% of the dataset.
 * Shards all hold about N/S samples, so bytes are counted in shards.
 * Prints JSON, or with --markdown the tables docs/BENCHMARKS.md shows.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/layout.h"

struct model {
	uint64_t n;
	size_t shards;
	uint64_t *first;    /* shard table */
	uint32_t *shard_of; /* sample -> shard */
	unsigned batch, epochs;
};

static void die(const char *what)
{
	fprintf(stderr, "bench_order: %s\n", what);
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory");
	return p;
}

/* Shards of n / S samples, the first n % S of them one more (as a
 * writer that deals samples round the shards leaves them). */
static void model_init(struct model *m, uint64_t n, size_t shards)
{
	m->n = n;
	m->shards = shards;
	m->first = xmalloc((shards + 1) * sizeof(*m->first));
	m->shard_of = xmalloc(n * sizeof(*m->shard_of));
	m->first[0] = 0;
	for (size_t k = 0; k < shards; k++) {
		m->first[k + 1] = m->first[k] + n / shards + (k < n % shards);
		for (uint64_t i = m->first[k]; i < m->first[k + 1]; i++)
			m->shard_of[i] = (uint32_t)k;
	}
}

static bfs_layout *layout(const struct model *m, uint64_t block, bfs_split split,
			  unsigned world, unsigned k)
{
	bfs_layout_opts o = { .n = m->n, .first = m->first, .nshards = m->shards,
			      .shuffle = 1, .seed = 1, .block = block, .split = split,
			      .world = world, .node_ranks = k };
	char msg[BFS_ERRMSG_MAX];
	bfs_layout *l;

	if (bfs_layout_create(&o, &l, msg))
		die(msg);
	return l;
}

/* The samples rank `rank` serves in epoch e, in order, into out;
 * returns how many. */
static uint64_t rank_order(const bfs_layout *l, uint64_t e, unsigned rank, uint64_t *out)
{
	size_t tl = bfs_layout_table_len(l);
	uint64_t *table = tl ? xmalloc(tl * sizeof(*table)) : NULL;
	bfs_layout_epoch ep;

	bfs_layout_epoch_init(&ep, l, e, table);
	for (uint64_t k = 0; k < ep.per_rank; k++)
		out[k] = bfs_layout_sample(&ep, rank, k);
	free(table);
	return ep.per_rank;
}

/* Spearman's rho of two rankings of [0, n): 1 - 6 sum d^2 / (n (n^2 - 1)). */
static double spearman(const uint64_t *a, const uint64_t *b, uint64_t n)
{
	long double d2 = 0, nn = (long double)n;

	for (uint64_t i = 0; i < n; i++) {
		long double d = (long double)a[i] - (long double)b[i];

		d2 += d * d;
	}
	return (double)(1.0L - 6.0L * d2 / (nn * (nn * nn - 1.0L)));
}

/* ---- Belady ------------------------------------------------------------ */

/* A max-heap of resident shards keyed by their next use. */
struct heap {
	uint32_t *h;       /* shards */
	int64_t *pos;      /* shard -> place in h, -1: not resident */
	uint64_t *key;     /* shard -> next use */
	size_t n;
};

static void heap_swap(struct heap *q, size_t a, size_t b)
{
	uint32_t t = q->h[a];

	q->h[a] = q->h[b];
	q->h[b] = t;
	q->pos[q->h[a]] = (int64_t)a;
	q->pos[q->h[b]] = (int64_t)b;
}

static void heap_fix(struct heap *q, size_t i)
{
	while (i > 0 && q->key[q->h[(i - 1) / 2]] < q->key[q->h[i]]) {
		heap_swap(q, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, big = i;

		if (l < q->n && q->key[q->h[l]] > q->key[q->h[big]])
			big = l;
		if (r < q->n && q->key[q->h[r]] > q->key[q->h[big]])
			big = r;
		if (big == i)
			break;
		heap_swap(q, i, big);
		i = big;
	}
}

/* Fetches per epoch (epochs 1 .. E-1) of a cache of cap shards over the
 * trace of shards (T accesses, E epochs of T / E). */
static double belady(const uint32_t *trace, uint64_t t_len, size_t shards, size_t cap,
		     unsigned epochs)
{
	uint64_t *next = xmalloc(t_len * sizeof(*next)), *last = xmalloc(shards * sizeof(*last));
	struct heap q = { xmalloc((cap + 1) * sizeof(uint32_t)),
			  xmalloc(shards * sizeof(int64_t)), xmalloc(shards * sizeof(uint64_t)), 0 };
	uint64_t fetched = 0, per = t_len / epochs;

	for (size_t s = 0; s < shards; s++) {
		last[s] = UINT64_MAX;
		q.pos[s] = -1;
	}
	for (uint64_t t = t_len; t-- > 0;) {
		next[t] = last[trace[t]];
		last[trace[t]] = t;
	}
	for (uint64_t t = 0; t < t_len; t++) {
		uint32_t s = trace[t];

		q.key[s] = next[t];
		if (q.pos[s] >= 0) {
			heap_fix(&q, (size_t)q.pos[s]);
			continue;
		}
		if (t >= per)
			fetched++;
		if (q.n == cap) { /* evict the one needed furthest ahead */
			uint32_t v = q.h[0];

			heap_swap(&q, 0, q.n - 1);
			q.n--;
			q.pos[v] = -1;
			if (q.n)
				heap_fix(&q, 0);
		}
		q.h[q.n] = s;
		q.pos[s] = (int64_t)q.n;
		q.n++;
		heap_fix(&q, q.n - 1);
	}
	free(next);
	free(last);
	free(q.h);
	free(q.pos);
	free(q.key);
	return (double)fetched / (double)(epochs - 1);
}

/* The most shards live at once within each epoch of the trace: read
 * already and needed again later in the same epoch (the one being read
 * counts).  The cache that fetches each shard once per epoch. */
static size_t working_set(const uint32_t *trace, uint64_t t_len, size_t shards, unsigned epochs)
{
	uint64_t per = t_len / epochs, *lastpos = xmalloc(shards * sizeof(*lastpos));
	uint8_t *open = xmalloc(shards);
	size_t most = 0;

	for (unsigned e = 0; e < epochs; e++) {
		const uint32_t *tr = trace + e * per;
		size_t live = 0;

		memset(open, 0, shards);
		for (uint64_t t = 0; t < per; t++)
			lastpos[tr[t]] = t;
		for (uint64_t t = 0; t < per; t++) {
			if (!open[tr[t]]) {
				open[tr[t]] = 1;
				live++;
			}
			if (live > most)
				most = live;
			if (lastpos[tr[t]] == t)
				live--;
		}
	}
	free(lastpos);
	free(open);
	return most;
}

/* ---- the measures ------------------------------------------------------ */

struct row {
	uint64_t block;     /* 0: global */
	double rho, rho_epochs, same_shard, distinct;
	size_t working;
	double fetched[3];
};

static const double fractions[3] = { 0.10, 0.25, 0.50 };

static void measure(const struct model *m, uint64_t block, struct row *r)
{
	bfs_layout *l = layout(m, block, BFS_SPLIT_SAMPLES, 1, 1);
	uint64_t *ord = xmalloc(m->n * sizeof(*ord)), *pos = xmalloc(m->n * sizeof(*pos));
	uint64_t *prev = xmalloc(m->n * sizeof(*prev)), *idx = xmalloc(m->n * sizeof(*idx));
	uint32_t *trace = xmalloc((size_t)m->epochs * m->n * sizeof(*trace));
	uint32_t *cnt = xmalloc(m->shards * sizeof(*cnt));
	double rho_e = 0, pairs = 0, distinct = 0;
	uint64_t nb = 0;

	memset(r, 0, sizeof(*r));
	r->block = block;
	for (uint64_t i = 0; i < m->n; i++)
		idx[i] = i;
	for (unsigned e = 0; e < m->epochs; e++) {
		rank_order(l, e, 0, ord);
		for (uint64_t p = 0; p < m->n; p++) {
			pos[ord[p]] = p;
			trace[(uint64_t)e * m->n + p] = m->shard_of[ord[p]];
		}
		if (e == 0)
			r->rho = spearman(idx, pos, m->n);
		else
			rho_e += fabs(spearman(prev, pos, m->n));
		memcpy(prev, pos, m->n * sizeof(*pos));
	}
	r->rho_epochs = m->epochs > 1 ? rho_e / (m->epochs - 1) : 0;
	/* batches of epoch 0 */
	memset(cnt, 0, m->shards * sizeof(*cnt));
	for (uint64_t b0 = 0; b0 + m->batch <= m->n; b0 += m->batch, nb++) {
		double same = 0;
		unsigned d = 0;

		for (uint64_t p = b0; p < b0 + m->batch; p++) {
			uint32_t s = trace[p];

			same += cnt[s];
			d += cnt[s]++ == 0;
		}
		for (uint64_t p = b0; p < b0 + m->batch; p++)
			cnt[trace[p]] = 0;
		pairs += same / ((double)m->batch * (m->batch - 1) / 2);
		distinct += d;
	}
	r->same_shard = pairs / (double)nb;
	r->distinct = distinct / (double)nb;
	r->working = working_set(trace, (uint64_t)m->epochs * m->n, m->shards, m->epochs);
	for (int f = 0; f < 3; f++) {
		size_t cap = (size_t)(fractions[f] * (double)m->shards);

		r->fetched[f] = belady(trace, (uint64_t)m->epochs * m->n, m->shards,
				       cap ? cap : 1, m->epochs) / (double)m->shards;
	}
	free(ord);
	free(pos);
	free(prev);
	free(idx);
	free(trace);
	free(cnt);
	bfs_layout_destroy(l);
}

struct noderow {
	unsigned nodes;
	int shards_split;
	double touched;   /* mean over nodes and epochs, share of the shards */
	double fetched;   /* per node per epoch at a 25% cache, x dataset */
};

/* Each node of a world of `nodes` x 2 ranks: the shards it reads. */
static void measure_nodes(const struct model *m, unsigned nodes, int shards_split,
			  struct noderow *r)
{
	bfs_layout *l = layout(m, bfs_layout_default_block(1, 0, shards_split ? BFS_SPLIT_SHARDS
								 : BFS_SPLIT_SAMPLES, m->shards, nodes),
			       shards_split ? BFS_SPLIT_SHARDS : BFS_SPLIT_SAMPLES,
			       2 * nodes, shards_split ? 2 : 1);
	uint64_t per = m->n / (2 * nodes), *a = xmalloc(per * sizeof(*a)), *b = xmalloc(per * sizeof(*b));
	uint32_t *trace = xmalloc((size_t)m->epochs * 2 * per * sizeof(*trace));
	uint8_t *seen = xmalloc(m->shards);
	double touched = 0, fetched = 0;

	r->nodes = nodes;
	r->shards_split = shards_split;
	for (unsigned i = 0; i < nodes; i++) {
		uint64_t t = 0;

		for (unsigned e = 0; e < m->epochs; e++) {
			size_t c = 0;

			/* the node's two ranks read in step: a sample of
			 * each, in turn, as two trainers at the same pace */
			rank_order(l, e, 2 * i, a);
			rank_order(l, e, 2 * i + 1, b);
			memset(seen, 0, m->shards);
			for (uint64_t k = 0; k < 2 * per; k++) {
				uint32_t s = m->shard_of[k % 2 ? b[k / 2] : a[k / 2]];

				trace[t++] = s;
				if (!seen[s]) {
					seen[s] = 1;
					c++;
				}
			}
			touched += (double)c / (double)m->shards;
		}
		fetched += belady(trace, t, m->shards, m->shards / 4, m->epochs) / (double)m->shards;
	}
	r->touched = touched / (nodes * m->epochs);
	r->fetched = fetched / nodes;
	free(a);
	free(b);
	free(trace);
	free(seen);
	bfs_layout_destroy(l);
}

int main(int argc, char **argv)
{
	static const uint64_t blocks[] = { 1, 2, 4, 8, 16, 32, 64, 0 };
	enum { NB = sizeof(blocks) / sizeof(blocks[0]) };
	struct model m = { 0 };
	struct row rows[NB];
	struct noderow nrows[6];
	uint64_t n = 1281167;
	size_t shards = 1024;
	int md = 0;

	m.batch = 256;
	m.epochs = 3;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--markdown"))
			md = 1;
		else if (i + 1 < argc && !strcmp(argv[i], "--shards"))
			shards = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(argv[i], "--samples"))
			n = strtoull(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(argv[i], "--batch"))
			m.batch = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(argv[i], "--epochs"))
			m.epochs = (unsigned)strtoul(argv[++i], NULL, 10);
		else
			die("usage: bench_order [--shards S] [--samples N] [--batch B] [--epochs E] [--markdown]");
	}
	if (shards < 8 || n < shards || m.batch < 2 || m.epochs < 2 || shards > UINT32_MAX)
		die("needs --shards >= 8, --samples >= shards, --batch >= 2, --epochs >= 2");
	model_init(&m, n, shards);
	for (int b = 0; b < NB; b++)
		measure(&m, blocks[b], &rows[b]);
	for (int i = 0; i < 6; i++)
		measure_nodes(&m, 1u << (i / 2), i % 2, &nrows[i]);
	if (md) {
		printf("| block | rank corr. index vs place | mean abs. corr. between epochs | same-shard pairs in a batch | shards in a batch of %u | working set | fetched/epoch, cache 10%% | 25%% | 50%% |\n",
		       m.batch);
		printf("|---|---|---|---|---|---|---|---|---|\n");
		for (int b = 0; b < NB; b++) {
			const struct row *r = &rows[b];
			char name[32];

			if (r->block)
				snprintf(name, sizeof(name), "%llu shard%s%s", (unsigned long long)r->block,
					 r->block > 1 ? "s" : "", r->block == bfs_layout_default_block(
						 1, 0, BFS_SPLIT_SAMPLES, m.shards, 1) ? " (default)" : "");
			else
				snprintf(name, sizeof(name), "global");
			printf("| %s | %+.4f | %.4f | %.4f | %.1f | %.1f%% | %.2fx | %.2fx | %.2fx |\n",
			       name, r->rho, r->rho_epochs, r->same_shard, r->distinct,
			       100.0 * (double)r->working / (double)m.shards, r->fetched[0],
			       r->fetched[1], r->fetched[2]);
		}
		printf("\n| nodes (2 ranks each) | split | shards a node reads per epoch | fetched per node per epoch, cache 25%% |\n");
		printf("|---|---|---|---|\n");
		for (int i = 0; i < 6; i++)
			printf("| %u | %s | %.1f%% | %.2fx |\n", nrows[i].nodes,
			       nrows[i].shards_split ? "shards" : "samples", 100.0 * nrows[i].touched,
			       nrows[i].fetched);
		return 0;
	}
	printf("{\"samples\": %llu, \"shards\": %zu, \"batch\": %u, \"epochs\": %u, \"default_block\": %llu, \"blocks\": [",
	       (unsigned long long)n, shards, m.batch, m.epochs,
	       (unsigned long long)bfs_layout_default_block(1, 0, BFS_SPLIT_SAMPLES, shards, 1));
	for (int b = 0; b < NB; b++) {
		const struct row *r = &rows[b];

		printf("%s{\"block\": %llu, \"rho\": %.6f, \"rho_epochs\": %.6f, \"same_shard\": %.6f, \"shards_per_batch\": %.2f, \"working_set\": %.6f, \"fetched\": {\"0.10\": %.4f, \"0.25\": %.4f, \"0.50\": %.4f}}",
		       b ? ", " : "", (unsigned long long)r->block, r->rho, r->rho_epochs, r->same_shard,
		       r->distinct, (double)r->working / (double)m.shards, r->fetched[0], r->fetched[1],
		       r->fetched[2]);
	}
	printf("], \"nodes\": [");
	for (int i = 0; i < 6; i++)
		printf("%s{\"nodes\": %u, \"split\": \"%s\", \"touched\": %.6f, \"fetched_25\": %.4f}",
		       i ? ", " : "", nrows[i].nodes, nrows[i].shards_split ? "shards" : "samples",
		       nrows[i].touched, nrows[i].fetched);
	printf("]}\n");
	free(m.first);
	free(m.shard_of);
	return 0;
}
