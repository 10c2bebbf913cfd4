/*
 * daemon.h - the mount daemon's life, without FUSE: the start-up
 * handshake with the `batchfs mount` that started it, detaching, the stop
 * signals and the watcher that turns them into an orderly stop, and
 * `batchfs unmount`, which returns only once the daemon is gone.
 *
 * Start-up: `batchfs mount` forks; the child (the daemon) calls setsid,
 * builds the mount and reports "ready" (or the error) over a pipe, and
 * only then does the parent print it and exit 0 or 1.  So mount returns
 * once the mount answers, and a failed start leaves nothing mounted.  In
 * the foreground (-f) the same runs in one process.  Before the result the
 * child may send progress lines (indexing a big shard directory), which
 * the parent shows only on a terminal.  On the pipe each is one line:
 * "P" + progress, then "0" + message (ready) or "1" + message (failed).
 *
 * Stopping: SIGTERM, SIGINT and SIGHUP only wake a watcher thread, which
 * calls the mount's stop function (it stops what could wait on the
 * session loop while the loop still answers, then ends the loop) and then
 * wakes the loop with SIGUSR1.  An unmount ends the loop from the kernel
 * side instead.
 */
#ifndef BFS_FS_DAEMON_H
#define BFS_FS_DAEMON_H

#include <stddef.h>

/* Run serve(ctx, notify_fd) as a daemon: it must call bfs_daemon_notify
 * once, when the mount answers or has failed, and returns the daemon's
 * exit status.  foreground: in this process, with notify_fd -1.  Returns
 * this process's exit status: 0 when the daemon said it is ready (its
 * message on stdout), else 1 (the message, or what became of the daemon,
 * on stderr). */
int bfs_daemon_run(int foreground, int (*serve)(void *ctx, int notify_fd),
		   void *ctx);

/* Tell the waiting parent how the start went (ok 1: ready), with msg; in
 * the foreground (fd -1), print it (stdout, or stderr on failure).  Bytes
 * that could act on a terminal (controls, invalid UTF-8) are escaped as
 * the log escapes them. */
void bfs_daemon_notify(int fd, int ok, const char *msg);

/* A progress line while the mount starts (numbers, no newline): to the
 * parent, which shows it when its stderr is a terminal; in the foreground
 * (fd -1) on stderr: on a terminal overwriting the last one, elsewhere a
 * line of its own.  The caller decides how often.  From the thread that
 * notifies, before bfs_daemon_notify. */
void bfs_daemon_progress(int fd, const char *text);

/* After a ready notify: stop talking to the parent and the terminal
 * (notify_fd closed, stdio on /dev/null) and work from /.  A no-op in the
 * foreground (fd -1).  Every path the daemon keeps must be absolute. */
void bfs_daemon_detach(int notify_fd);

typedef struct bfs_watch bfs_watch;

/* Catch SIGTERM, SIGINT and SIGHUP for the calling thread's process and
 * start the watcher: on the first of them it calls stop(ctx) from its own
 * thread, then wakes `main` (pthread_self() of the caller: the session
 * loop's thread) with SIGUSR1.  SIGPIPE is ignored from now on.  0 or
 * -errno. */
int bfs_daemon_watch(void (*stop)(void *ctx), void *ctx, bfs_watch **out);
/* Ask for the same orderly stop as SIGTERM, from any thread (e.g. a
 * request handler): the watcher calls stop(ctx) from its own thread.
 * Never blocks; a no-op when a stop is already on its way. */
void bfs_daemon_request_stop(bfs_watch *w);
/* Stop the watcher (if no signal came, stop is not called) and restore
 * the default actions.  Accepts NULL. */
void bfs_daemon_unwatch(bfs_watch *w);

/* `batchfs unmount [--lazy] MOUNTPOINT`: unmount (umount2 as root,
 * retrying a brief EBUSY; fusermount3 -u otherwise) and wait until the
 * daemon has exited, so its cache is closed: the daemon's pid is asked of
 * the mount root (user.batchfs.pid) before the unmount and waited for on a
 * pidfd.  A mount that stays busy is left mounted, and the processes that
 * hold it are named (bfs_daemon_holders).  lazy: detach it at once
 * (MNT_DETACH, fusermount3 -u -z) and do not wait for a daemon whose mount
 * is still held: say who holds it.  Returns the exit status: 0, or 1 with
 * a message on stderr. */
int bfs_daemon_unmount(const char *mountpoint, int lazy);

/* The processes (other than this one and pid skip) that hold the mount on
 * mountpoint: an open file on it (the mnt_id in /proc/PID/fdinfo), a
 * mapping of one (the device in /proc/PID/maps), or a working or root
 * directory inside it.  Only /proc is read, never the mount, so a daemon
 * that does not answer cannot hang it; processes of other users are seen
 * only by root.  Writes "python3 (pid 12: an open file), bash (pid 9: its
 * working directory)" (the first 8, then "and N more") to out (cap bytes)
 * and returns how many there are; 0 (out empty) when none is seen. */
int bfs_daemon_holders(const char *mountpoint, long skip, char *out,
		       size_t cap);

#endif
