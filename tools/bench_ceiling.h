/*
 * bench_ceiling.h - the in-process decode+resize ceiling of `make bench`:
 * how many images per second this machine decodes and resizes with every
 * core busy and nothing else in the way (no FUSE, no files, no batching).
 */
#ifndef BFS_TOOLS_BENCH_CEILING_H
#define BFS_TOOLS_BENCH_CEILING_H

/*
 * bench_ceiling SHARD_DIR [--dtype float32|uint8] [--size HxW]
 *               [--threads N] [--repeat R] [--limit N] [--quiet]
 *
 * argv[0] is the program name.  Indexes SHARD_DIR with engine/source (a
 * TFRecord directory or an ImageFolder tree, as `batchfs mount` does) and
 * loads every sample's JPEG bytes into memory first; --limit N keeps the
 * first N.  Then R timed passes (default 3, after one short warm-up) each
 * decode (engine/pixels/decode) and resize (engine/pixels/resize) every loaded sample
 * once, spread over N threads (default: one per online core) that take the
 * next sample from a shared counter.  Each thread owns its bfs_decoder, its
 * resize scratch and a destination buffer of one batch (32 samples, 2 MiB
 * aligned, MADV_HUGEPAGE, touched before timing) that it fills in turn, so
 * output memory traffic matches the engine's without the engine's slots.
 *
 * Prints one JSON object on stdout: images, threads, dtype, size, the
 * images/s of each pass and their median, and the CPU time per image
 * (in all, decoding, resizing) from the threads' CPU clocks, so that other
 * load on the machine does not inflate it.  Progress goes to stderr unless
 * --quiet.
 * Returns the exit status: 0 done, 1 failure (index or decode error, out
 * of memory), 2 usage.  Call it from main only (uses stdio, creates
 * threads, not reentrant).
 */
int bfs_bench_ceiling_main(int argc, char **argv);

#endif
