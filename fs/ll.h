/*
 * ll.h - the FUSE adapter: libfuse's low-level operations over a bfs_view.
 *
 * Each handler parses its request, makes one or two bfs_view calls and
 * replies; errors become errno replies.  Besides the handlers it carries
 * out the view's delivery decisions that need FUSE: registering a backing
 * file for passthrough (fs/passthrough.c) and copying finished read-ahead
 * into the kernel's page cache (notify_store).  Inode numbers are computed
 * from names (fs/namespace), so it keeps no table of names and forget is a
 * no-op.  (squashfuse's ll.c is the model.)
 *
 * Threads: the session loop's threads call the handlers; engine workers
 * call bfs_ll_push; stop_pushes from the thread that stops the mount.
 */
#ifndef BFS_FS_LL_H
#define BFS_FS_LL_H

#include <stdint.h>

#include "engine/engine.h"
#include "fs/passthrough.h"
#include "fs/peek.h"
#include "fs/view.h"

struct fuse_session;
struct fuse_lowlevel_ops;

typedef struct bfs_ll bfs_ll;

/* An adapter with no view yet (the engine it serves needs bfs_ll_push
 * before the view exists).  0 or -ENOMEM. */
int bfs_ll_create(bfs_ll **out);
void bfs_ll_destroy(bfs_ll *ll); /* accepts NULL; after the session */

/* The operations for fuse_session_new, with ll as its userdata. */
const struct fuse_lowlevel_ops *bfs_ll_ops(size_t *size);

/* Wire in what the handlers serve: the view; after fuse_session_mount,
 * the session, its passthrough state (NULL: none), the absolute mount
 * point and the peeker that looks names up through it for a push
 * (fs/peek.h; NULL: this process looks them up, and a SIGKILL during one
 * can leave the mount wedged).  Before the loop runs. */
void bfs_ll_set_view(bfs_ll *ll, bfs_view *view);
void bfs_ll_set_session(bfs_ll *ll, struct fuse_session *se, bfs_pt *pt,
			const char *mountpoint, bfs_peek *peek);

/* For the engine's on_batch_ready: carry out bfs_view_push_plan for
 * batch id, from the worker that finished it.  Returns 1 when the batch
 * file is all in the page cache. */
int bfs_ll_push(bfs_ll *ll, uint64_t id, const bfs_batch *b);

/* For the view's io: passthrough and push counters. */
void bfs_ll_io(bfs_ll *ll, bfs_view_io *io);

/* Let pushes start (once the loop runs), or stop new ones and wait (at
 * most ~10 s) for those in flight, which may need the loop to answer
 * their lookups: call while it still runs.  1 if some did not finish. */
void bfs_ll_start_pushes(bfs_ll *ll);
int bfs_ll_stop_pushes(bfs_ll *ll);

#endif
