/*
 * mount.h - the FUSE adapter: serves a bfs_engine as a read-only file
 * system and runs the mount's life (checks, daemon, loop, unmount).
 *
 * This is the only part of batchfs that includes <fuse.h>.  It turns the
 * core's error codes into errno replies (every failed batch read is EIO)
 * and decides what a person sees in the log.
 */
#ifndef BFS_MOUNT_H
#define BFS_MOUNT_H

#include "engine/engine.h"
#include "engine/source.h"

typedef struct {
	const char *shard_dir;
	const char *mountpoint;
	bfs_source_opts source;
	bfs_engine_opts engine;
	const char *cache;        /* cache directory; NULL = the default
				   ($XDG_CACHE_HOME/batchfs); "none" = off */
	uint64_t cache_size;      /* --cache-size; 0 = the cache's default */
	int foreground;           /* -f: stay in the foreground, log to stderr */
	int debug;                /* -d: FUSE debug output, implies -f */
	const char *log_path;     /* daemon log; NULL = default location */
	const char *fuse_opts;    /* -o values, comma-joined; may be NULL */
	int allow_other;          /* only when asked for */
	const char *slot_dir;     /* --slot-dir: a tmpfs for the slot files
				   * passthrough serves (NULL: /dev/shm) */
	int no_passthrough;       /* --no-passthrough: serve every read of a
				   * batch file through the daemon */
	int no_push;              /* --no-push: never copy finished batches
				   into the page cache ahead of the reader */
} bfs_mount_opts;

/* Mount, serve until unmounted, clean up.  Without foreground, returns in
 * the parent as soon as the mount is ready (or failed) and leaves a daemon
 * behind.  Returns the process exit status: 0 ok, 1 failure (a message was
 * printed on stderr). */
int bfs_mount_main(const bfs_mount_opts *opts);

/* Unmount MOUNTPOINT (fusermount3 -u, or umount2 as root) and wait until
 * the daemon has let go of it.  Returns the exit status. */
int bfs_unmount_main(const char *mountpoint);

/* 1 if path is currently a mount point (per /proc/self/mountinfo). */
int bfs_is_mountpoint(const char *path);

#endif
