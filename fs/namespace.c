/*
 * namespace.c - canonical names of the mount (see namespace.h).
 */
#include "fs/namespace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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
	if (parse_u64(name + 6, end - 6, &b) || b >= shape->batches)
		return -ENOENT;
	node->batch = b;
	return canonical(shape, node, name, len) ? 0 : -ENOENT;
}

int bfs_ns_parse(const bfs_ns_shape *shape, const char *path, bfs_node *node)
{
	const char *p = path, *slash;
	size_t len;
	bfs_node n = { .kind = BFS_NODE_ROOT };
	int depth = 0;

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
		if (depth == 0) {
			if (len == 12 && memcmp(p, "dataset.json", 12) == 0)
				n.kind = BFS_NODE_DATASET_JSON;
			else if (len == 10 && memcmp(p, "stats.json", 10) == 0)
				n.kind = BFS_NODE_STATS_JSON;
			else if (parse_epoch(shape, p, len, &n))
				return -ENOENT;
		} else if (depth == 1 && n.kind == BFS_NODE_EPOCH) {
			if (parse_batch(shape, p, len, &n))
				return -ENOENT;
		} else {
			return -ENOENT;
		}
		depth++;
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

	if (len > 255)
		return -ENAMETOOLONG;
	if (parent->kind == BFS_NODE_ROOT) {
		if (len == 12 && memcmp(name, "dataset.json", 12) == 0)
			n.kind = BFS_NODE_DATASET_JSON;
		else if (len == 10 && memcmp(name, "stats.json", 10) == 0)
			n.kind = BFS_NODE_STATS_JSON;
		else if (parse_epoch(shape, name, len, &n))
			return -ENOENT;
	} else if (parent->kind == BFS_NODE_EPOCH) {
		if (parse_batch(shape, name, len, &n))
			return -ENOENT;
	} else {
		return -ENOTDIR;
	}
	*node = n;
	return 0;
}

enum { INO_ROOT = 1, INO_DATASET = 2, INO_STATS = 3, INO_EPOCH0 = 4 };

uint64_t bfs_ns_ino(const bfs_ns_shape *shape, const bfs_node *node)
{
	uint64_t files = INO_EPOCH0 + (uint64_t)shape->epochs;

	switch (node->kind) {
	case BFS_NODE_ROOT:
		return INO_ROOT;
	case BFS_NODE_DATASET_JSON:
		return INO_DATASET;
	case BFS_NODE_STATS_JSON:
		return INO_STATS;
	case BFS_NODE_EPOCH:
		return INO_EPOCH0 + node->epoch;
	default:
		return files + 4 * ((uint64_t)node->epoch * shape->batches +
				    node->batch) +
		       (uint64_t)(node->kind - BFS_NODE_BATCH);
	}
}

int bfs_ns_from_ino(const bfs_ns_shape *shape, uint64_t ino, bfs_node *node)
{
	uint64_t files = INO_EPOCH0 + (uint64_t)shape->epochs, rel;
	bfs_node n = { .kind = BFS_NODE_ROOT };

	if (ino == INO_ROOT) {
		n.kind = BFS_NODE_ROOT;
	} else if (ino == INO_DATASET) {
		n.kind = BFS_NODE_DATASET_JSON;
	} else if (ino == INO_STATS) {
		n.kind = BFS_NODE_STATS_JSON;
	} else if (ino >= INO_EPOCH0 && ino < files) {
		n.kind = BFS_NODE_EPOCH;
		n.epoch = (uint32_t)(ino - INO_EPOCH0);
	} else if (ino >= files && shape->batches &&
		   (rel = (ino - files) / 4) / shape->batches < shape->epochs) {
		n.kind = (bfs_node_kind)(BFS_NODE_BATCH + (ino - files) % 4);
		n.epoch = (uint32_t)(rel / shape->batches);
		n.batch = rel % shape->batches;
	} else {
		return -ENOENT;
	}
	*node = n;
	return 0;
}
