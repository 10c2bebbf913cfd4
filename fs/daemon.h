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

/* ---- a mount's daemon, asked with a deadline ---- */

/* How long `batchfs unmount` and `batchfs status` wait for a daemon to
 * answer before they say it does not (milliseconds). */
#define BFS_DAEMON_PROBE_MS 3000

/* Where the daemon of a mount stands, as bfs_daemon_probe found it. */
typedef enum {
	BFS_DAEMON_NOT_MOUNTED, /* nothing is mounted on the path */
	BFS_DAEMON_OTHER_FS,    /* a mount of another type (fstype says) */
	BFS_DAEMON_DEAD,        /* fuse.batchfs whose daemon is gone
				 * (ENOTCONN, or ECONNABORTED for an ask
				 * that raced its end) */
	BFS_DAEMON_STOPPED,     /* its daemon is stopped (SIGSTOP: state T,
				 * or t under a tracer) */
	BFS_DAEMON_SILENT,      /* no answer within the deadline */
	BFS_DAEMON_FOREIGN,     /* fuse.batchfs, but the file system does not
				 * answer as batchfs (no user.batchfs.pid) */
	BFS_DAEMON_SERVING,     /* answers as batchfs */
} bfs_daemon_state;

typedef struct {
	bfs_daemon_state state;
	long pid;           /* the daemon; 0 when not known */
	char proc_state;    /* its state letter in /proc/PID/stat; 0 unknown */
	int err;            /* FOREIGN: the errno the root's xattr gave */
	char fstype[64];    /* the mount's type, from mountinfo */
} bfs_daemon_probe_result;

/* Where the daemon of the mount on path stands, waiting at most
 * timeout_ms for it.  The type comes from /proc/self/mountinfo; the
 * daemon is looked for in /proc (a process with /dev/fuse open and the
 * mark of bfs_daemon_mark on this mount point; only root sees other
 * users' processes) and, when it is stopped, nothing is asked of the
 * mount; else user.batchfs.pid of the mount root is asked from a thread
 * of its own, given timeout_ms.  A thread still waiting on a daemon that
 * does not answer stays blocked until the daemon answers or the process
 * exits, and holds the mount busy meanwhile (only a lazy unmount detaches
 * it).  Returns 0 with *out filled, or -ENOMEM / -errno (out->state
 * NOT_MOUNTED).  Threads: any. */
int bfs_daemon_probe(const char *path, int timeout_ms,
		     bfs_daemon_probe_result *out);

/* A sentence (no newline, no final stop) saying what r found on
 * mountpoint ("t1 is a tmpfs mount, not batchfs"; "m: its daemon 12 is
 * stopped (state T); 'kill -CONT 12' resumes it"), into out (cap
 * bytes).  timeout_ms: the deadline the probe was given. */
void bfs_daemon_describe(const char *mountpoint,
			 const bfs_daemon_probe_result *r, int timeout_ms,
			 char *out, size_t cap);

/* The file at path read whole, from a thread of its own given
 * timeout_ms: a read through a mount whose daemon is stopped or hung
 * never returns, and the caller must.  0 with a malloc'd *out (the
 * caller frees it) of *len bytes; -ETIMEDOUT (the thread goes on waiting
 * and frees what it reads), or open's or read's -errno, or -ENOMEM. */
int bfs_daemon_read_file(const char *path, int timeout_ms, char **out,
			 size_t *len);

/* In the daemon, before the mount: a descriptor (O_PATH, close-on-exec)
 * of the mount point directory, which the mount then covers, kept open
 * while the mount serves.  It is how bfs_daemon_probe finds the daemon
 * in /proc without asking the mount (its link names the mount point, its
 * mnt_id is the mount beneath).  It holds nothing of the mount itself
 * (the file system beneath stays busy while the daemon runs, as it is
 * while the mount is on it).
 * The descriptor, or -1 (then only that lookup is lost). */
int bfs_daemon_mark(const char *mountpoint);

/* `batchfs unmount [--lazy] MOUNTPOINT`: unmount (umount2 as root,
 * retrying a brief EBUSY; fusermount3 -u otherwise) and wait until the
 * daemon has exited, so its cache is closed: the daemon's pid is asked of
 * the mount root (bfs_daemon_probe) before the unmount and waited for on
 * a pidfd.  Only a batchfs mount is unmounted: anything that is not
 * fuse.batchfs, or does not answer as batchfs, is refused ("t1 is a
 * tmpfs mount, not batchfs; nothing was unmounted"), lazy or not; a dead
 * batchfs mount (its daemon gone) is cleaned.  A daemon that is stopped
 * or does not answer within BFS_DAEMON_PROBE_MS is said so and its mount
 * left, unless lazy.  A mount that stays busy is left mounted, and the processes that
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
