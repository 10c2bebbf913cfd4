/*
 * peek.h - a child process that looks names up through the daemon's own
 * mount, so that no thread of the daemon ever waits inside the kernel on
 * its own file system.
 *
 * Why: a push into the page cache (fs/ll.c) first makes the kernel look
 * the batch file up, with a stat through the mount.  When a reader looks
 * up the same name at that instant, the stat waits for the reader's
 * lookup (d_wait_lookup), which no signal interrupts, and the reader
 * waits for the daemon's reply.  Were the stat the daemon's own, a
 * SIGKILL (the OOM killer's) would end every thread but that one: the
 * process would never exit, /dev/fuse would stay open, and the mount
 * would be neither served nor dead until the reader was killed.  The
 * peeker holds no descriptor of /dev/fuse, so the daemon's death aborts
 * the connection; the stat then fails, and the peeker sees its socket
 * closed and exits.  The daemon waits for its answer in a read(), which
 * a signal ends.
 *
 * Start it before anything opens /dev/fuse, a lock or a cache (it keeps
 * only its socket).  Threads: bfs_peek_stat from any thread (one look-up
 * at a time); start and stop from the thread that runs the mount.
 */
#ifndef BFS_FS_PEEK_H
#define BFS_FS_PEEK_H

#include <stdint.h>

typedef struct bfs_peek bfs_peek;

/* Fork the peeker for names under `root` (the mount point, absolute; the
 * mount need not be there yet).  0, or -errno (no process: the caller
 * looks names up itself). */
int bfs_peek_start(const char *root, bfs_peek **out);

/* Look `rel` (relative to root) up through the mount, as stat(2) does:
 * 0 with *ino, or -errno (-EPIPE when the peeker is gone). */
int bfs_peek_stat(bfs_peek *p, const char *rel, uint64_t *ino);

/* The same look-up in the calling process (without a peeker: a fork
 * that failed).  0 with *ino, or -errno. */
int bfs_peek_stat_here(const char *root, const char *rel, uint64_t *ino);

/* Close its socket (it exits) and reap it.  NULL is fine. */
void bfs_peek_stop(bfs_peek *p);

/* Its pid, for tests and the log; 0 when none. */
int bfs_peek_pid(const bfs_peek *p);

#endif
