/*
 * cachecmd.h - `batchfs cache stats|verify|clear [DIR]`: look at and manage
 * the preprocessed-sample cache (cache/cache.h) without mounting.
 */
#ifndef BFS_TOOLS_CACHECMD_H
#define BFS_TOOLS_CACHECMD_H

/*
 * batchfs cache stats  [DIR] [--fingerprint FP]
 * batchfs cache verify [DIR] [--fingerprint FP] [--delete]
 * batchfs cache clear  [DIR] [--fingerprint FP]
 *
 * argv[0] is "cache".  DIR defaults to bfs_cache_default_dir().  Works
 * next to running mounts (the cache is opened as a tool: nothing is
 * created, the size limit is not changed).
 *   stats   size on disk and limit, entries, shard indexes, the hit rate
 *           of every mount since the cache was created or cleared, and the
 *           fingerprints present with their entries, bytes and last use.
 *   verify  checks the CRC32C of every entry (of FP only, when given),
 *           lists the bad ones, and with --delete removes them.
 *   clear   removes every entry, or only FP's.  Clearing everything while
 *           no mount uses the cache deletes its files, so the space goes
 *           back to the file system; while one does, the entries are
 *           deleted and data.mdb keeps its size (the space is reused).
 * Output on stdout, errors on stderr.  Returns the exit status: 0 ok, 1
 * failure or (verify) bad entries found, 2 usage.  Call from main only.
 */
int bfs_cachecmd_main(int argc, char **argv);

#endif
