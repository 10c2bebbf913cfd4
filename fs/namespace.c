/*
 * namespace.c - canonical names of the mount (see namespace.h).
 */
#include "fs/namespace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

uint64_t bfs_ns_epoch_batches(const bfs_ns_shape *shape, uint32_t epoch)
{
	if (shape->partial && epoch == shape->partial_epoch &&
	    shape->partial_batches < shape->batches)
		return shape->partial_batches;
	return shape->batches;
}

static int digits(uint64_t v, int min)
{
	int d = 1;

	while (v >= 10) {
		v /= 10;
		d++;
	}
	return d < min ? min : d;
}

int bfs_ns_name(const bfs_ns_shape *shape, const bfs_node *node, char *buf,
		size_t cap)
{
	int ew = digits(shape->epochs ? shape->epochs - 1 : 0, 4);
	int bw = digits(shape->batches ? shape->batches - 1 : 0, 6);
	int n;

	switch (node->kind) {
	case BFS_NODE_ROOT:
		n = snprintf(buf, cap, "%s", "");
		break;
	case BFS_NODE_DATASET_JSON:
		n = snprintf(buf, cap, "dataset.json");
		break;
	case BFS_NODE_STATS_JSON:
		n = snprintf(buf, cap, "stats.json");
		break;
	case BFS_NODE_EPOCH:
		n = snprintf(buf, cap, "epoch-%0*u", ew, node->epoch);
		break;
	case BFS_NODE_RANK:
		n = snprintf(buf, cap, "rank-%u", node->rank);
		break;
	case BFS_NODE_HOLD:
		n = snprintf(buf, cap, "hold");
		break;
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW:
		n = snprintf(buf, cap, "batch-%0*llu%s", bw,
			     (unsigned long long)node->batch,
			     node->kind == BFS_NODE_LABELS ? ".labels.npy"
			     : node->kind == BFS_NODE_INDEX ? ".index.json"
			     : node->kind == BFS_NODE_PREVIEW ? ".preview.jpg"
			     : ".npy");
		break;
	default:
		return -EINVAL;
	}
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

/* Parse an unsigned decimal of at most 19 digits; no sign, no spaces. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (len == 0 || len > 19)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* Check that `name` is exactly the canonical name of node. */
static int canonical(const bfs_ns_shape *shape, const bfs_node *node,
		     const char *name, size_t len)
{
	char buf[64];
	int n = bfs_ns_name(shape, node, buf, sizeof(buf));

	return n >= 0 && (size_t)n == len && memcmp(buf, name, len) == 0;
}

static int parse_epoch(const bfs_ns_shape *shape, const char *name,
		       size_t len, bfs_node *node)
{
	uint64_t e;

	if (len < 7 || memcmp(name, "epoch-", 6) != 0 ||
	    parse_u64(name + 6, len - 6, &e) || e >= shape->epochs)
		return -ENOENT;
	node->kind = BFS_NODE_EPOCH;
	node->epoch = (uint32_t)e;
	return canonical(shape, node, name, len) ? 0 : -ENOENT;
}

static int parse_rank(const bfs_ns_shape *shape, const char *name,
		      size_t len, bfs_node *node)
{
	uint64_t r;

	if (!shape->ranks || len < 6 || memcmp(name, "rank-", 5) != 0 ||
	    parse_u64(name + 5, len - 5, &r) || r < shape->rank0 ||
	    r - shape->rank0 >= shape->ranks)
		return -ENOENT;
	node->kind = BFS_NODE_RANK;
	node->rank = (uint32_t)r;
	return canonical(shape, node, name, len) ? 0 : -ENOENT;
}

static int parse_batch(const bfs_ns_shape *shape, const char *name,
		       size_t len, bfs_node *node)
{
	static const struct {
		const char *suffix;
		bfs_node_kind kind;
	} kinds[] = { /* longest first: ".labels.npy" before ".npy" */
		{ ".labels.npy", BFS_NODE_LABELS },
		{ ".index.json", BFS_NODE_INDEX },
		{ ".preview.jpg", BFS_NODE_PREVIEW },
		{ ".npy", BFS_NODE_BATCH },
	};
	size_t end = 0;
	uint64_t b;

	if (len < 6 || memcmp(name, "batch-", 6) != 0)
		return -ENOENT;
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		size_t sl = strlen(kinds[k].suffix);

		if (len > 6 + sl && memcmp(name + len - sl, kinds[k].suffix, sl) == 0) {
			node->kind = kinds[k].kind;
			end = len - sl;
			break;
		}
	}
	if (!end)
		return -ENOENT;
	if (parse_u64(name + 6, end - 6, &b) || b >= bfs_ns_epoch_batches(shape, node->epoch))
		return -ENOENT;
	node->batch = b;
	return canonical(shape, node, name, len) ? 0 : -ENOENT;
}

/* Entry name (len bytes) of directory *n, in place.  0, -ENOENT or
 * -ENOTDIR (n is a file). */
static int child_of(const bfs_ns_shape *shape, bfs_node *n, const char *name,
		    size_t len)
{
	bfs_node c = *n;

	switch (n->kind) {
	case BFS_NODE_ROOT:
		if (len == 12 && memcmp(name, "dataset.json", 12) == 0)
			c.kind = BFS_NODE_DATASET_JSON;
		else if (len == 10 && memcmp(name, "stats.json", 10) == 0)
			c.kind = BFS_NODE_STATS_JSON;
		else if (shape->hold && len == 4 && memcmp(name, "hold", 4) == 0)
			c.kind = BFS_NODE_HOLD;
		else if (shape->ranks ? parse_rank(shape, name, len, &c)
				      : parse_epoch(shape, name, len, &c))
			return -ENOENT;
		break;
	case BFS_NODE_RANK:
		if (parse_epoch(shape, name, len, &c))
			return -ENOENT;
		break;
	case BFS_NODE_EPOCH:
		if (parse_batch(shape, name, len, &c))
			return -ENOENT;
		break;
	default:
		return -ENOTDIR;
	}
	*n = c;
	return 0;
}

int bfs_ns_parse(const bfs_ns_shape *shape, const char *path, bfs_node *node)
{
	const char *p = path, *slash;
	size_t len;
	bfs_node n = { .kind = BFS_NODE_ROOT };

	if (!path || path[0] != '/')
		return -ENOENT;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		slash = strchr(p, '/');
		len = slash ? (size_t)(slash - p) : strlen(p);
		if (len > 255)
			return -ENAMETOOLONG;
		if (child_of(shape, &n, p, len))
			return -ENOENT;
		p += len;
	}
	*node = n;
	return 0;
}

int bfs_ns_child(const bfs_ns_shape *shape, const bfs_node *parent,
		 const char *name, bfs_node *node)
{
	size_t len = strlen(name);
	bfs_node n = *parent;
	int err;

	if (len > 255)
		return -ENAMETOOLONG;
	if ((err = child_of(shape, &n, name, len)))
		return err;
	*node = n;
	return 0;
}

int bfs_ns_path(const bfs_ns_shape *shape, const bfs_node *node, char *buf,
		size_t cap)
{
	bfs_node up[3];
	int depth = 0, n = 0;

	/* the node, then the directories above it, leaf first */
	up[depth++] = *node;
	if (node->kind >= BFS_NODE_BATCH && node->kind <= BFS_NODE_PREVIEW) {
		up[depth] = *node;
		up[depth++].kind = BFS_NODE_EPOCH;
	}
	if (shape->ranks && up[depth - 1].kind == BFS_NODE_EPOCH) {
		up[depth] = *node;
		up[depth++].kind = BFS_NODE_RANK;
	}
	if (!cap)
		return -ENOSPC;
	buf[0] = '\0';
	while (depth-- > 0) {
		char part[64];
		int k;

		if (bfs_ns_name(shape, &up[depth], part, sizeof(part)) < 0)
			return -ENOSPC;
		k = snprintf(buf + n, cap - (size_t)n, "%s%s", n ? "/" : "", part);
		if (k < 0 || (size_t)(n + k) >= cap)
			return -ENOSPC;
		n += k;
	}
	return n;
}

enum { INO_ROOT = 1, INO_DATASET = 2, INO_STATS = 3, INO_DIR0 = 4 };

/* Rank directories (0 without a rank level) and the ranks whose epochs
 * and batches exist (at least 1). */
static uint64_t rank_dirs(const bfs_ns_shape *s) { return s->ranks; }
static uint64_t rank_count(const bfs_ns_shape *s) { return s->ranks ? s->ranks : 1; }

/* The first batch file's number, F in namespace.h. */
static uint64_t files_base(const bfs_ns_shape *s)
{
	return INO_DIR0 + rank_dirs(s) + rank_count(s) * (uint64_t)s->epochs;
}

/* r of a node below a rank directory (0 without ranks). */
static uint64_t rank_index(const bfs_ns_shape *s, const bfs_node *n)
{
	return s->ranks ? (uint64_t)(n->rank - s->rank0) : 0;
}

uint64_t bfs_ns_batch_id(const bfs_ns_shape *shape, const bfs_node *node)
{
	return (rank_index(shape, node) * shape->epochs + node->epoch) *
	       shape->batches + node->batch;
}

void bfs_ns_batch_node(const bfs_ns_shape *shape, uint64_t id, bfs_node *node)
{
	uint64_t re = shape->batches ? id / shape->batches : 0;

	memset(node, 0, sizeof(*node));
	node->kind = BFS_NODE_BATCH;
	node->batch = shape->batches ? id % shape->batches : 0;
	node->epoch = shape->epochs ? (uint32_t)(re % shape->epochs) : 0;
	if (shape->ranks && shape->epochs)
		node->rank = shape->rank0 + (uint32_t)(re / shape->epochs);
}

uint64_t bfs_ns_ino(const bfs_ns_shape *shape, const bfs_node *node)
{
	uint64_t r = rank_index(shape, node);

	switch (node->kind) {
	case BFS_NODE_ROOT:
		return INO_ROOT;
	case BFS_NODE_DATASET_JSON:
		return INO_DATASET;
	case BFS_NODE_STATS_JSON:
		return INO_STATS;
	case BFS_NODE_RANK:
		return INO_DIR0 + r;
	case BFS_NODE_EPOCH:
		return INO_DIR0 + rank_dirs(shape) + r * shape->epochs + node->epoch;
	case BFS_NODE_HOLD:
		return files_base(shape) +
		       4 * rank_count(shape) * shape->epochs * shape->batches;
	default:
		return files_base(shape) + 4 * bfs_ns_batch_id(shape, node) +
		       (uint64_t)(node->kind - BFS_NODE_BATCH);
	}
}

int bfs_ns_from_ino(const bfs_ns_shape *shape, uint64_t ino, bfs_node *node)
{
	uint64_t dirs = rank_dirs(shape), files = files_base(shape);
	uint64_t nbatch = rank_count(shape) * shape->epochs * shape->batches;
	bfs_node n = { .kind = BFS_NODE_ROOT };

	if (ino == INO_ROOT) {
		n.kind = BFS_NODE_ROOT;
	} else if (ino == INO_DATASET) {
		n.kind = BFS_NODE_DATASET_JSON;
	} else if (ino == INO_STATS) {
		n.kind = BFS_NODE_STATS_JSON;
	} else if (ino >= INO_DIR0 && ino < INO_DIR0 + dirs) {
		n.kind = BFS_NODE_RANK;
		n.rank = shape->rank0 + (uint32_t)(ino - INO_DIR0);
	} else if (ino >= INO_DIR0 + dirs && ino < files) {
		uint64_t re = ino - INO_DIR0 - dirs;

		n.kind = BFS_NODE_EPOCH;
		n.epoch = (uint32_t)(re % shape->epochs);
		if (shape->ranks)
			n.rank = shape->rank0 + (uint32_t)(re / shape->epochs);
	} else if (ino >= files && (ino - files) / 4 < nbatch) {
		bfs_ns_batch_node(shape, (ino - files) / 4, &n);
		n.kind = (bfs_node_kind)(BFS_NODE_BATCH + (ino - files) % 4);
		if (n.batch >= bfs_ns_epoch_batches(shape, n.epoch))
			return -ENOENT;
	} else if (shape->hold && ino == files + 4 * nbatch) {
		n.kind = BFS_NODE_HOLD;
	} else {
		return -ENOENT;
	}
	*node = n;
	return 0;
}
