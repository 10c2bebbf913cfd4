/*
 * indexcmd.h - `batchfs index SOURCE`: write the sidecar index of a source
 * (engine/formats/sidecar.h, docs/SIDECAR_INDEX.md) beside its shards, so
 * that a mount on any node starts without scanning them.
 *
 * SOURCE is a shard directory (the file is written to a temporary name in
 * it, synced and renamed over SOURCE/.batchfs-index), s3://BUCKET/PREFIX
 * (one PUT of PREFIX/.batchfs-index, after every shard is indexed), or an
 * http(s) brace pattern or wids index (fs/wids.h), which are read-only:
 * --out FILE is required, and FILE is to be published as .batchfs-index
 * in the folder of the shards (bfs_storage_root), where a mount looks for
 * it.  --out FILE writes any source's sidecar there instead.
 *
 * A remote source is opened as a mount opens it: listed, and its shards
 * streamed through a shard cache (--shard-cache, the mount's default) to
 * be scanned, only those that neither the earlier sidecar nor the stored
 * indexes of a sample cache (--cache DIR, opened read-only: a node that
 * mounted the source before) index already.  Its entries carry the
 * listing's size and ETag (a shard without a strong ETag gets none).
 *
 * An earlier sidecar is read first (beside the shards, where a mount
 * reads it), and each of its entries that still fits its shard is kept
 * rather than scanned again, so a rerun after some shards changed scans
 * only those.  DALI .idx files are not used: every entry is the shard's
 * own index, class names included.
 *
 * Output on stdout, errors on stderr.  Returns the exit status: 0 written,
 * 1 failure, 2 usage.  Call from main only.
 */
#ifndef BFS_FS_INDEXCMD_H
#define BFS_FS_INDEXCMD_H

/* argv[0] is "index". */
int bfs_indexcmd_main(int argc, char **argv);

#endif
