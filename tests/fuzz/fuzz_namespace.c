/*
 * fuzz_namespace.c - the mount's path parser (bfs_ns_parse) from any bytes.
 *
 * Input: bytes 0..3 pick the namespace shape (epochs 1..65536, batches
 * 1..10^10, biased towards small and power-of-ten edges); the rest, cut at
 * the first NUL, is the path the kernel would send.
 *
 * Properties: a parsed node is in range; printing it with bfs_ns_name gives
 * back exactly the path's components (only canonical names exist, so
 * nothing else -- "..", "batch-0.npy", odd bytes, long names -- resolves);
 * -ENAMETOOLONG only when a component is over 255 bytes; and the reverse:
 * a node made from the input prints to a path that parses back to it.
 */
#include <errno.h>
#include <string.h>

#include "fs/namespace.h"
#include "tests/fuzz/fuzz.h"

/* The last kind namespace.h knows of, for making nodes; every kind after
 * EPOCH is a file inside an epoch directory, named after its batch. */
#define BFS_NODE_KINDS BFS_NODE_PREVIEW

static const uint32_t epoch_edges[8] = { 1, 9, 10, 11, 9999, 10000, 10001,
					 65536 };
static const uint64_t batch_edges[8] = { 1, 9, 10, 11, 999999, 1000000,
					 1000001, 10000000000ull };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bfs_ns_shape shape = { 0 }; /* no rank level, no /hold */
	bfs_node node, back;
	char *path, rebuilt[4096], name[64];
	size_t n, o = 0;
	int r, longest = 0, comps = 0;

	if (size < 4)
		return 0;
	shape.epochs = data[0] & 0x80 ? 1 + (data[0] & 0x7fu) * 517u
				      : epoch_edges[data[0] & 7];
	shape.batches = data[1] & 0x80 ? batch_edges[data[1] & 7]
				       : 1 + ((uint64_t)data[1] << 16 | data[2] << 8 | data[3]);
	data += 4;
	size -= 4;
	n = strnlen((const char *)data, size);
	path = malloc(n + 1);
	CHECK(path, "malloc");
	memcpy(path, data, n);
	path[n] = '\0';

	for (size_t i = 0, run = 0; i <= n; i++) {
		if (i == n || path[i] == '/') {
			if (run > (size_t)longest)
				longest = (int)run;
			comps += run > 0;
			run = 0;
		} else {
			run++;
		}
	}

	r = bfs_ns_parse(&shape, path, &node);
	CHECK(r == 0 || r == -ENOENT || r == -ENAMETOOLONG, "parse returned %d", r);
	if (r == -ENAMETOOLONG)
		CHECK(longest > 255, "ENAMETOOLONG with components of <= %d bytes",
		      longest);
	if (r == 0) {
		/* Rebuild the path from the node and compare component-wise. */
		switch (node.kind) {
		case BFS_NODE_ROOT:
			CHECK(comps == 0, "root with %d components", comps);
			break;
		case BFS_NODE_DATASET_JSON:
		case BFS_NODE_STATS_JSON:
		case BFS_NODE_EPOCH:
			CHECK(node.kind != BFS_NODE_EPOCH || node.epoch < shape.epochs,
			      "epoch %u out of range", node.epoch);
			CHECK(bfs_ns_name(&shape, &node, name, sizeof(name)) > 0, "name");
			o = (size_t)snprintf(rebuilt, sizeof(rebuilt), "/%s", name);
			break;
		default: { /* BATCH, LABELS and every other file of an epoch */
			bfs_node ep = { .kind = BFS_NODE_EPOCH, .epoch = node.epoch };


			CHECK(node.epoch < shape.epochs && node.batch < shape.batches,
			      "batch %u/%llu out of range", node.epoch,
			      (unsigned long long)node.batch);
			CHECK(bfs_ns_name(&shape, &ep, rebuilt + 1, sizeof(rebuilt) - 1) > 0,
			      "epoch name");
			rebuilt[0] = '/';
			o = strlen(rebuilt);
			CHECK(bfs_ns_name(&shape, &node, name, sizeof(name)) > 0, "name");
			o += (size_t)snprintf(rebuilt + o, sizeof(rebuilt) - o, "/%s", name);
			break;
		}
		}
		if (node.kind != BFS_NODE_ROOT) {
			/* The path equals the rebuilt one up to repeated and
			 * trailing slashes. */
			char squeezed[4096];
			size_t s = 0;

			for (size_t i = 0; i < n && s + 1 < sizeof(squeezed); i++)
				if (!(path[i] == '/' && (i + 1 == n || path[i + 1] == '/')))
					squeezed[s++] = path[i];
			squeezed[s] = '\0';
			CHECK(strcmp(squeezed, rebuilt) == 0, "'%s' resolved as '%s'",
			      squeezed, rebuilt);
		}
		CHECK(!strstr(path, "/../") && !strstr(path, "/./"),
		      "dot component resolved");
	}

	/* Reverse: a node from the input prints and parses back to itself. */
	{
		uint64_t v = 0;

		for (size_t i = 0; i < 8 && i < size; i++)
			v = v << 8 | data[i];
		node.kind = (bfs_node_kind)(v % (BFS_NODE_KINDS + 1));
		node.epoch = (uint32_t)((v >> 3) % shape.epochs);
		node.batch = (v >> 20) % shape.batches;
		if (node.kind == BFS_NODE_ROOT)
			return free(path), 0;
		if (node.kind > BFS_NODE_EPOCH) {
			bfs_node ep = { .kind = BFS_NODE_EPOCH, .epoch = node.epoch };

			rebuilt[0] = '/';
			CHECK(bfs_ns_name(&shape, &ep, rebuilt + 1, 64) > 0, "epoch name");
			o = strlen(rebuilt);
			rebuilt[o++] = '/';
		} else {
			rebuilt[0] = '/';
			o = 1;
			node.epoch = node.kind == BFS_NODE_EPOCH ? node.epoch : 0;
			node.batch = 0;
		}
		CHECK(bfs_ns_name(&shape, &node, rebuilt + o, 64) > 0, "name");
		CHECK(bfs_ns_parse(&shape, rebuilt, &back) == 0, "'%s' does not parse",
		      rebuilt);
		CHECK(back.kind == node.kind &&
		      (node.kind < BFS_NODE_EPOCH || back.epoch == node.epoch) &&
		      (node.kind < BFS_NODE_BATCH || back.batch == node.batch),
		      "'%s' parsed to another node", rebuilt);
	}
	free(path);
	return 0;
}
