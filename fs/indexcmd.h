/*
 * indexcmd.h - `batchfs index SOURCE`: write the sidecar index of a source
 * (engine/formats/sidecar.h, docs/SIDECAR_INDEX.md) beside its shards, so
 * that a mount on any node starts without scanning them.
 *
 * SOURCE is a shard directory (the file is written to a temporary name in
 * it, synced and renamed over SOURCE/.batchfs-index) or s3://BUCKET/PREFIX
 * (one PUT of PREFIX/.batchfs-index).  http(s) sources are read-only:
 * refused, saying where to run it instead.  An earlier sidecar is read
 * first, and each of its entries that still fits its shard is kept rather
 * than scanned again, so a rerun after some shards changed scans only
 * those.  DALI .idx files are not used: every entry is the shard's own
 * index, class names included.
 *
 * Output on stdout, errors on stderr.  Returns the exit status: 0 written,
 * 1 failure, 2 usage.  Call from main only.
 */
#ifndef BFS_FS_INDEXCMD_H
#define BFS_FS_INDEXCMD_H

/* argv[0] is "index". */
int bfs_indexcmd_main(int argc, char **argv);

#endif
