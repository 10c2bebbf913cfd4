/*
 * host.h - what the mount asks of the machine it runs on, without FUSE:
 * absolute paths, mount points in /proc/self/mountinfo, the mount's
 * read-ahead, the log file, and a home for the engine's slot files.
 *
 * Nothing here touches a mount point itself (a stat of a mount whose
 * daemon is gone fails with ENOTCONN, and of one not serving yet hangs).
 * Threads: any.
 */
#ifndef BFS_FS_HOST_H
#define BFS_FS_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The absolute, resolved form of path: its parent resolved (realpath),
 * its last component appended as it is.  0, or -errno. */
int bfs_host_resolve(const char *path, char *out, size_t cap);

/* The default shard cache of a remote source (--shard-cache):
 * $XDG_CACHE_HOME/batchfs-shards, else $HOME/.cache/batchfs-shards,
 * beside the sample cache's default.  0, or -1 when neither is set (or
 * the path does not fit cap bytes). */
int bfs_host_default_shard_cache(char *buf, size_t cap);

/* path made absolute against the current directory without resolving
 * anything (it may not exist yet).  The daemon works from / once it is
 * detached, so every path it keeps must be absolute first.  0, or
 * -ENAMETOOLONG, or getcwd's -errno. */
int bfs_host_absolute(const char *path, char *out, size_t cap);

/* The topmost mount on path (mounts stacked on one path are listed in
 * mount order: the last match is what a lookup reaches).  1 if there is
 * one, with its device number "MAJ:MIN" in devno (cap bytes) when devno
 * is not NULL; 0 if none. */
int bfs_host_find_mount(const char *path, char *devno, size_t cap);
/* What /proc/self/mountinfo says of the topmost mount on path. */
typedef struct {
	int id;              /* mount ID (fdinfo's mnt_id) */
	int parent_id;       /* the mount it sits on: where its mount point
			      * directory is */
	char devno[32];      /* "MAJ:MIN" */
	char fstype[64];     /* "fuse.batchfs", "tmpfs", "ext4", ... */
	char source[4096];   /* the source (fsname), unescaped; may be "" */
} bfs_host_mount;
/* 1 with *out filled (out may be NULL), or 0 when nothing is mounted on
 * path. */
int bfs_host_mount_info(const char *path, bfs_host_mount *out);
int bfs_host_is_mountpoint(const char *path);
/* The mount ID (mountinfo's first field, /proc/PID/fdinfo's mnt_id) of
 * the topmost mount on path, or -1 when there is none. */
int bfs_host_mount_id(const char *path);

/* Raise the mount's bdi read_ahead_kb to 1 MiB (the kernel splits reads
 * into requests of that size, 128 KiB by default: a 19 MB batch was ~150
 * requests; measured 15% less CPU per GB served).  Needs root; failing
 * only costs speed. */
void bfs_host_raise_readahead(const char *mountpoint);

/* Open the log for appending, line-buffered: log_path, or by default
 * $XDG_STATE_HOME/batchfs/batchfs.log (~/.local/state/... when unset;
 * without HOME, the home directory in the password database), creating
 * every missing directory.  *path gets the file's name.  NULL with *why
 * saying why when it cannot be had. */
FILE *bfs_host_open_log(const char *log_path, char *path, size_t cap,
			char *why, size_t why_cap);

/* Is dir fit to be a cache directory: absent (it will be created), or a
 * directory that holds nothing but a batchfs cache's files (data.mdb,
 * lock.mdb, users.lock or any NAME.lock, damaged and data.mdb.damaged-*
 * moved aside, see cache/cache_open.c)?  Any other entry, or a dir that is not a
 * directory, and it is not: a cache there would write its files among
 * someone else's (--cache /etc).  0, or -ENOTEMPTY / -ENOTDIR / -errno
 * with *why (cap bytes) naming the directory and the first stranger. */
int bfs_host_check_cache_dir(const char *dir, char *why, size_t cap);

/* Is path fit to be the log file: absent, or anything but a directory
 * (--log /)?  0, or -EISDIR with *why. */
int bfs_host_check_log_path(const char *path, char *why, size_t cap);

/* Is dir, given as --slot-dir, a directory on a tmpfs (the engine's slot
 * files are unnamed files there; on a disk they would be written back)?
 * Whether passthrough can be had at all (capability, room, leases) is
 * bfs_host_slot_dir's to say, when the mount starts; this is the rule for
 * a directory a person named.  0, or -errno with *why. */
int bfs_host_check_slot_dir(const char *dir, char *why, size_t cap);

/* dir, if it can hold the engine's slot files for passthrough: this
 * process can register backing files (CAP_SYS_ADMIN), dir is a tmpfs (a
 * disk file system would write batches back) with room for the memory
 * budget (budget 0: not checked here; the mount leaves that to the
 * engine, which knows the budget it settles on), and it grants file
 * leases (how the engine tells that readers let go of a file).  Else NULL
 * with *why (cap bytes) saying why not. */
const char *bfs_host_slot_dir(const char *dir, uint64_t budget, char *why,
			      size_t cap);

#endif
