/*
 * namespace.h - the mount's file names, parsed and printed without FUSE.
 *
 *   /                               directory
 *   /dataset.json  /stats.json      files
 *   /epoch-NNNN/                    one directory per epoch
 *   /epoch-NNNN/batch-NNNNNN.npy         images of one batch
 *   /epoch-NNNN/batch-NNNNNN.labels.npy  labels of the same batch
 *   /epoch-NNNN/batch-NNNNNN.index.json  where each sample came from
 *   /epoch-NNNN/batch-NNNNNN.preview.jpg contact sheet of the batch
 *
 * A mount of several ranks (--ranks A-B) has one more level: the root
 * holds rank-A/ ... rank-B/ instead of the epochs, each with its own
 * /rank-R/epoch-NNNN/... as above.  A mount with --hold also has /hold, a
 * file that the processes using the mount keep open.
 *
 * An epoch that resumes part way (--resume) has fewer batches than the
 * others: its names past them do not exist (numbers keep the others'
 * width).
 *
 * Only canonical names exist: a name parses when printing the parsed node
 * gives back exactly the same string, so "batch-0001.npy", "batch-+00001.npy",
 * "../x" or a name with odd bytes never map onto anything.  Numbers are
 * zero-padded to 4 (epochs) and 6 (batches) digits, or wider when there
 * are more of them.  Nothing here maps onto a host path.
 */
#ifndef BFS_NAMESPACE_H
#define BFS_NAMESPACE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
	BFS_NODE_ROOT,
	BFS_NODE_DATASET_JSON,
	BFS_NODE_STATS_JSON,
	BFS_NODE_EPOCH,       /* directory epoch-NNNN */
	/* the four per-batch kinds stay consecutive (see bfs_ns_ino) */
	BFS_NODE_BATCH,       /* batch-NNNNNN.npy */
	BFS_NODE_LABELS,      /* batch-NNNNNN.labels.npy */
	BFS_NODE_INDEX,       /* batch-NNNNNN.index.json */
	BFS_NODE_PREVIEW,     /* batch-NNNNNN.preview.jpg */
	BFS_NODE_RANK,        /* directory rank-R (shape.ranks > 0) */
	BFS_NODE_HOLD,        /* /hold (shape.hold) */
} bfs_node_kind;

typedef struct {
	bfs_node_kind kind;
	uint32_t rank;    /* RANK and everything under it: the rank R (the
			   * global one, as in the name); 0 without ranks */
	uint32_t epoch;   /* EPOCH, BATCH ... PREVIEW */
	uint64_t batch;   /* BATCH ... PREVIEW: index within the epoch */
} bfs_node;

typedef struct {
	uint32_t epochs;  /* epoch-0000 .. epoch-(epochs-1) */
	uint64_t batches; /* batches per epoch */
	uint32_t ranks;   /* rank-rank0 .. rank-(rank0+ranks-1); 0: no rank
			   * level (the epochs sit in the root) */
	uint32_t rank0;
	int hold;         /* /hold exists */
	int partial;      /* epoch partial_epoch has partial_batches only
			   * (<= batches); inode numbers keep the stride */
	uint32_t partial_epoch;
	uint64_t partial_batches;
} bfs_ns_shape;

/* The batches epoch `epoch` has: batches, or partial_batches for the
 * resumed one.  Pure. */
uint64_t bfs_ns_epoch_batches(const bfs_ns_shape *shape, uint32_t epoch);

/* Parse an absolute path ("/epoch-0000/batch-000001.npy").  Returns 0 and
 * fills *node, or -ENOENT for any name that does not exist, -ENAMETOOLONG
 * for a component longer than 255 bytes.  Pure; any thread. */
int bfs_ns_parse(const bfs_ns_shape *shape, const char *path, bfs_node *node);

/* The entry name of node inside its parent directory ("epoch-0000",
 * "batch-000001.labels.npy", "dataset.json"; "" for the root).  Returns the
 * length, or -ENOSPC when cap is too small.  Pure; any thread. */
int bfs_ns_name(const bfs_ns_shape *shape, const bfs_node *node, char *buf,
		size_t cap);

/* The path of node below the root, without the leading '/'
 * ("rank-1/epoch-0000/batch-000001.npy", "dataset.json", "" for the
 * root).  Returns the length, or -ENOSPC.  Pure. */
int bfs_ns_path(const bfs_ns_shape *shape, const bfs_node *node, char *buf,
		size_t cap);

/* Look up entry `name` inside directory `parent` (a ROOT, RANK or EPOCH
 * node).
 * Returns 0 and fills *node, -ENOENT, -ENOTDIR when parent is a file, or
 * -ENAMETOOLONG.  Same canonical-name rule as bfs_ns_parse.  Pure. */
int bfs_ns_child(const bfs_ns_shape *shape, const bfs_node *parent,
		 const char *name, bfs_node *node);

/* Inode numbers, computed rather than stored, so the mount keeps no table
 * of names whatever the dataset size:
 *
 *   1               the root (FUSE_ROOT_ID)
 *   2, 3            dataset.json, stats.json
 *   4 + r           rank-(rank0 + r)              (with ranks only)
 *   4 + R + r * E + e
 *                   epoch-e (of rank r)
 *   F + 4 * ((r * E + e) * B + b) + k,   F = 4 + R + max(R, 1) * E
 *                   batch b of epoch e (of rank r); k = 0 .npy,
 *                   1 .labels.npy, 2 .index.json, 3 .preview.jpg
 *   F + 4 * max(R, 1) * E * B
 *                   hold
 *
 * (R ranks, 0 without a rank level, when r is always 0; E epochs, B
 * batches per epoch; the resumed epoch's numbers past its batches are
 * no node's).  Without ranks these are the numbers of a mount of
 * one rank, whatever its rank.  Every node has its own number;
 * bfs_ns_ino never returns 0; bfs_ns_from_ino returns 0 or -ENOENT for a
 * number no node has.  Pure. */
uint64_t bfs_ns_ino(const bfs_ns_shape *shape, const bfs_node *node);
int bfs_ns_from_ino(const bfs_ns_shape *shape, uint64_t ino, bfs_node *node);

/* The engine's batch id of a batch-level node, (r * E + e) * B + b
 * (engine/engine.h), and back: the BATCH node of an id below
 * max(R, 1) * E * B.  Pure. */
uint64_t bfs_ns_batch_id(const bfs_ns_shape *shape, const bfs_node *node);
void bfs_ns_batch_node(const bfs_ns_shape *shape, uint64_t id,
		       bfs_node *node);

#endif
