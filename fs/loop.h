/*
 * loop.h - the threads that serve a FUSE session: each reads a request
 * from the kernel and answers it, and a new one starts when none is free
 * to read, up to a bound.
 *
 * Why not libfuse's fuse_session_loop_mt: when one of its workers cannot
 * get its request buffer (or a thread cannot be made), it ends the whole
 * loop, and a request that another worker read at that moment is dropped
 * unanswered (libfuse's receive returns 0 for a request read once the
 * session has exited, and a worker that reads one after the loop began to
 * end returns without it).  The reader that sent it waits forever.  Here a
 * worker that cannot get its buffer has read nothing and simply is not
 * there; the first worker waits and tries again; only a stop ends the
 * loop, and every request read before it is answered.
 */
#ifndef BFS_FS_LOOP_H
#define BFS_FS_LOOP_H

struct fuse_session;

/* Serve se on the calling thread and up to max_threads - 1 more, until
 * the session exits (fuse_session_exit from a stop, or the file system
 * unmounted); then wake the other workers (SIGUSR1, which must have a
 * handler installed without SA_RESTART: bfs_daemon_watch does), wait for
 * them to finish what they are answering, and return.  0, or the -errno
 * of reading the device.  A shortage of memory (a request buffer, a
 * thread) is said in the log and waited out, never returned. */
int bfs_loop_run(struct fuse_session *se, unsigned max_threads);

#endif
