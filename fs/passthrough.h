/*
 * FUSE passthrough for batch files (Linux 6.9+, CAP_SYS_ADMIN).
 *
 * A batch lives in one of the engine's slot files (an unnamed tmpfs file:
 * room for the NPY header, then the images).  When a batch file is
 * opened, the mount registers a read-only open of that file with the
 * kernel (FUSE_DEV_IOC_BACKING_OPEN) and answers the open with
 * FOPEN_PASSTHROUGH.  The kernel then serves read() and mmap() of the
 * batch file from the tmpfs file itself: no request reaches the daemon,
 * nothing is copied into FUSE's page cache, and an mmap maps the decoded
 * pages.
 *
 * libfuse 3.14 (Debian bookworm) predates passthrough (3.16), so this
 * module does the two protocol steps it lacks, through libfuse's custom
 * I/O hooks: it adds FUSE_PASSTHROUGH and max_stack_depth to the INIT
 * reply when the kernel offers it, and it writes the open reply (whose
 * backing_id field 3.14 calls padding) itself.
 *
 * Every open of one inode must use the same backing file while any is
 * open (the kernel answers EBUSY otherwise), so opens are counted per
 * inode here, and a second open reuses the first one's registration.
 */
#ifndef BFS_FS_PASSTHROUGH_H
#define BFS_FS_PASSTHROUGH_H

#include <stddef.h>
#include <stdint.h>

struct fuse_session;
typedef struct bfs_pt bfs_pt;

/* Install the INIT hook on a mounted session, before its loop runs.
 * want 0: never negotiate passthrough (--no-passthrough).  *out is NULL
 * on -ENOMEM. */
int bfs_pt_attach(struct fuse_session *se, int want, bfs_pt **out);
void bfs_pt_destroy(bfs_pt *pt);

/* Did INIT turn passthrough on, and has no backing registration failed
 * since?  (A failure, e.g. EPERM without CAP_SYS_ADMIN, turns it off for
 * the rest of the mount.) */
int bfs_pt_active(const bfs_pt *pt);

/* Did INIT turn passthrough on at all?  Once it has, every open of a
 * batch file must go through bfs_pt_begin, even after a failure turned it
 * off: the kernel refuses an ordinary open of an inode that is open with
 * passthrough, and the per-inode count answers such an open the same way
 * as the ones before it. */
int bfs_pt_negotiated(const bfs_pt *pt);

/* How an open of a batch file is served. */
typedef enum {
	BFS_PT_CACHED = 0,  /* the ordinary FUSE read path */
	BFS_PT_BACKED = 1,  /* passthrough, with backing id *backing */
} bfs_pt_mode;

/* Start an open of inode ino.  Returns 1 with *mode and *backing set when
 * another open of ino is in progress or open (it waits for one in
 * progress to be decided): the caller answers the same way and later
 * calls bfs_pt_release.  Returns 0 when this is the first: the caller
 * decides, then calls bfs_pt_decide (exactly once). */
int bfs_pt_begin(bfs_pt *pt, uint64_t ino, bfs_pt_mode *mode, int *backing);

/* Decide the first open of ino: register fd (opened read-only here, so
 * that the engine can tell when readers let go of the file) when fd >= 0
 * and passthrough is active; else the ordinary path.  Returns the mode
 * and sets *backing. */
bfs_pt_mode bfs_pt_decide(bfs_pt *pt, uint64_t ino, int fd, int *backing);

/* An open of ino ended (its release, or an open whose reply failed).
 * The last one unregisters the backing file. */
void bfs_pt_release(bfs_pt *pt, uint64_t ino);

/* Reply to an open with FOPEN_PASSTHROUGH.  Returns fuse_reply_buf's
 * result (-ENOENT: the opener was interrupted, no release will come). */
struct fuse_req;
int bfs_pt_reply_open(struct fuse_req *req, int backing);

/* Counters for stats.json. */
uint64_t bfs_pt_opens(const bfs_pt *pt);

/* Pure helpers, exposed for tests. */
/* The kernel's INIT request in buf (len bytes, header included): 1 if it
 * is FUSE_INIT offering passthrough, 0 if FUSE_INIT without it, -1 if it
 * is not FUSE_INIT.  *unique gets the request's unique. */
int bfs_pt_parse_init(const void *buf, size_t len, uint64_t *unique);
/* Turn passthrough on in an INIT reply body (struct fuse_init_out, len
 * bytes).  0, or -EINVAL if it is too short or asks for writeback
 * caching, which passthrough excludes. */
int bfs_pt_patch_init_reply(void *body, size_t len);

#endif
