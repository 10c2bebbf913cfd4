/*
 * mount.h - `batchfs mount`: one mount of a shard directory put together
 * (cache, source index, engine, view, FUSE session), served until it is
 * unmounted or stopped, and taken apart in order.
 *
 * The FUSE requests themselves are answered by fs/ll.c over fs/view.c;
 * the daemon's life (start-up handshake, signals, unmount) is
 * fs/daemon.c.  This part decides what a person sees: the mount message
 * and the log.
 */
#ifndef BFS_MOUNT_H
#define BFS_MOUNT_H

#include "engine/engine.h"
#include "engine/source.h"
#include "engine/storage/storage.h"

typedef struct {
	const char *shard_dir;
	const char *mountpoint;
	bfs_source_opts source;
	bfs_engine_opts engine;
	int shuffle_block_given;  /* --shuffle-block: engine.shuffle_block as
				   * given; else the source's default
				   * (bfs_layout_default_block) */
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
	int hold;                 /* --hold: MNT/hold exists; the mount ends
				   * itself once its last open is closed */
	const char *metrics_file; /* --metrics-file: the Prometheus text,
				   * rewritten every metrics_interval s */
	unsigned metrics_interval;/* --metrics-interval; 0: 15 */
	unsigned history_interval;/* --history-interval: seconds between
				   * stats.json's history points at first;
				   * 0: BFS_HISTORY_EVERY (10) */
	int metrics_http;         /* --metrics-port given: serve /metrics */
	unsigned metrics_port;    /*   on this port (0: any free one) */
	const char *metrics_addr; /* --metrics-addr; NULL: 127.0.0.1 */
	int metrics_public;       /* --metrics-public: a non-loopback
				   * metrics_addr is allowed */
	unsigned hold_wait;       /* --hold SECONDS: ...or when nobody has
				   * opened it that long after the mount
				   * (0: no limit) */
	/* A remote source (shard_dir an s3://, http:// or https:// URL):
	 * its objects are fetched whole into the shard cache, which is then
	 * indexed and read like a local shard directory. */
	bfs_storage_opts storage;
	const char *shard_cache;  /* --shard-cache; NULL: $XDG_CACHE_HOME/
				   * batchfs-shards */
	uint64_t shard_cache_size;/* --shard-cache-size; 0: shardcache.h's */
} bfs_mount_opts;

/* Mount, serve until unmounted, clean up.  Without foreground, returns in
 * the parent as soon as the mount is ready (or failed) and leaves a daemon
 * behind.  Returns the process exit status: 0 ok, 1 failure (a message was
 * printed on stderr). */
int bfs_mount_main(const bfs_mount_opts *opts);


#endif
