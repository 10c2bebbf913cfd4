/*
 * ll.c - the FUSE adapter: low-level operations over a bfs_view (ll.h).
 *
 * DESIGN
 * A multithreaded session loop calls the handlers; a read may wait in the
 * engine for its batch while other loop threads go on serving stat,
 * readdir, stats.json and other batches.  Each handler: node from inode,
 * one view call, one reply.  Two kinds of work need FUSE itself and live
 * here: the passthrough open (a backing file registered per open inode,
 * fs/passthrough.c) and the page-cache push, run by an engine worker for
 * read-ahead that finished while the pool was idle.  A push may wait on
 * the loop (its own lookup, or a page that a pending read holds locked),
 * so the mount stops pushes while the loop still runs (stop_pushes).
 */
#define FUSE_USE_VERSION 312
#include "fs/ll.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct bfs_ll {
	bfs_view *view;           /* set before the loop runs */
	struct fuse_session *se;
	bfs_pt *pt;               /* NULL: no passthrough asked for */
	char root[PATH_MAX];      /* the mount point, absolute */
	bfs_peek *peek;           /* looks names up for a push; NULL: we do */
	int push_live;            /* atomic: new pushes may start */
	int pushing;              /* atomic: pushes in flight */
	uint64_t pushed_bytes;    /* atomic */
};

int bfs_ll_create(bfs_ll **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void bfs_ll_destroy(bfs_ll *ll)
{
	free(ll);
}

void bfs_ll_set_view(bfs_ll *ll, bfs_view *view)
{
	ll->view = view;
}

void bfs_ll_set_session(bfs_ll *ll, struct fuse_session *se, bfs_pt *pt,
			const char *mountpoint, bfs_peek *peek)
{
	ll->se = se;
	ll->pt = pt;
	ll->peek = peek;
	snprintf(ll->root, sizeof(ll->root), "%s", mountpoint);
}

void bfs_ll_io(bfs_ll *ll, bfs_view_io *io)
{
	io->passthrough = bfs_pt_active(ll->pt);
	io->passthrough_opens = bfs_pt_opens(ll->pt);
	io->bytes_pushed = __atomic_load_n(&ll->pushed_bytes, __ATOMIC_RELAXED);
}

/* ---- requests --------------------------------------------------------- */

static bfs_ll *req_ll(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The reader a request comes from: the engine keeps one read-ahead per
 * process. */
static uint64_t req_reader(fuse_req_t req)
{
	return (uint64_t)fuse_req_ctx(req)->pid;
}

/* The node of ino, or an error reply (then 0). */
static int req_node(fuse_req_t req, fuse_ino_t ino, bfs_node *n)
{
	int err = bfs_view_node(req_ll(req)->view, ino, n);

	if (err)
		fuse_reply_err(req, -err);
	return err == 0;
}

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	/* The kernel still caps requests at the bdi's read_ahead_kb (the
	 * mount raises it as root). */
	conn->max_readahead = 1u << 20;
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	bfs_ll *ll = req_ll(req);
	struct fuse_entry_param ep;
	bfs_node dir, n;
	double timeout;
	int err;

	memset(&ep, 0, sizeof(ep));
	if (!req_node(req, parent, &dir))
		return;
	err = bfs_view_lookup(ll->view, req_reader(req), &dir, name, &n,
			      &ep.attr, &timeout);
	ep.entry_timeout = BFS_VIEW_TIMEOUT;
	if (err == -ENOENT) {
		fuse_reply_entry(req, &ep); /* a miss the kernel may keep */
	} else if (err) {
		fuse_reply_err(req, -err);
	} else {
		ep.ino = ep.attr.st_ino;
		ep.attr_timeout = timeout;
		fuse_reply_entry(req, &ep);
	}
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct stat st;
	double timeout;
	bfs_node n;
	int err;

	if (!req_node(req, ino, &n))
		return;
	err = bfs_view_getattr(req_ll(req)->view, req_reader(req), &n, &st,
			       &timeout);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, timeout);
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, struct fuse_file_info *fi)
{
	bfs_view *v = req_ll(req)->view;
	size_t used = 0;
	bfs_node dir;
	char *buf;
	int err;

	if (!req_node(req, ino, &dir))
		return;
	if ((err = bfs_view_opendir(v, &dir))) {
		fuse_reply_err(req, -err);
		return;
	}
	if (!(buf = malloc(size ? size : 1))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t k = (uint64_t)(off > 0 ? off : 0);; k++) {
		char name[64];
		struct stat st;
		size_t need;

		if (bfs_view_dirent(v, &dir, k, name, sizeof(name), &st))
			break;
		need = fuse_add_direntry(req, buf + used, size - used, name, &st,
					 (off_t)(k + 1));
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ll_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	bfs_node n;
	int err;

	if (!req_node(req, ino, &n))
		return;
	if ((err = bfs_view_opendir(req_ll(req)->view, &n)))
		fuse_reply_err(req, -err);
	else
		fuse_reply_open(req, fi);
}

/* Open a batch file with passthrough: the first open of its inode waits
 * until the batch is whole, then hands the kernel the engine's file of it,
 * which holds exactly the file's bytes.  A batch that failed, sits in
 * plain memory, or that the memory budget cannot lend, is served the
 * ordinary way.  Every open goes through the per-inode count, since the
 * kernel refuses two different backing files on one open inode. */
static void open_lent(fuse_req_t req, bfs_ll *ll, fuse_ino_t ino,
		      const bfs_node *n, struct fuse_file_info *fi)
{
	bfs_view_pin pin;
	bfs_pt_mode mode;
	size_t len;
	int backing, fd = -1, err;

	if (!bfs_pt_begin(ll->pt, ino, &mode, &backing)) {
		if (bfs_pt_active(ll->pt))
			fd = bfs_view_lend(ll->view, req_reader(req), n, &len, &pin);
		else
			memset(&pin, 0, sizeof(pin));
		mode = bfs_pt_decide(ll->pt, ino, fd, &backing);
		bfs_view_done(ll->view, &pin);
	}
	if (mode == BFS_PT_BACKED) {
		err = bfs_pt_reply_open(req, backing);
	} else {
		fi->keep_cache = 1;
		err = fuse_reply_open(req, fi);
	}
	if (err == -ENOENT) /* the opener was interrupted: no release */
		bfs_pt_release(ll->pt, ino);
}

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	bfs_ll *ll = req_ll(req);
	uint64_t reader = req_reader(req); /* req is gone after the reply */
	bfs_view_open_info oi;
	bfs_node n;
	int err;

	if (!req_node(req, ino, &n))
		return;
	err = bfs_view_open(ll->view, reader, &n, fi->flags,
			    bfs_pt_negotiated(ll->pt), &oi);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	if (oi.lend) {
		open_lent(req, ll, ino, &n, fi);
	} else {
		fi->fh = oi.fh;
		fi->keep_cache = oi.keep_cache;
		fi->direct_io = oi.direct_io;
		if (fuse_reply_open(req, fi) == -ENOENT)
			bfs_view_release(ll->view, &n, oi.fh); /* no release */
	}
	if (oi.hint)
		bfs_view_hint(ll->view, reader, &n);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	bfs_ll *ll = req_ll(req);
	struct iovec iov[2];
	bfs_view_pin pin;
	bfs_node n;
	int niov, err;

	if (!req_node(req, ino, &n))
		return;
	/* gathered: the kernel copies straight from the batch's memory */
	err = bfs_view_read(ll->view, req_reader(req), &n, fi->fh, size, off,
			    iov, &niov, &pin);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_iov(req, iov, niov);
	bfs_view_done(ll->view, &pin);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	bfs_ll *ll = req_ll(req);
	bfs_node n;

	if (bfs_view_node(ll->view, ino, &n) == 0) {
		bfs_view_release(ll->view, &n, fi->fh);
		if (ll->pt && n.kind == BFS_NODE_BATCH)
			bfs_pt_release(ll->pt, ino);
	}
	fuse_reply_err(req, 0);
}

/* getxattr/listxattr reply: the size when asked for 0 bytes, ERANGE when
 * the caller's buffer is too small. */
static void reply_xattr(fuse_req_t req, const char *val, int len, size_t size)
{
	if (len < 0)
		fuse_reply_err(req, -len);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)len);
	else if ((size_t)len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, (size_t)len);
}

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	char val[128];
	bfs_node n;

	if (req_node(req, ino, &n))
		reply_xattr(req, val, bfs_view_getxattr(req_ll(req)->view, &n,
							name, val, sizeof(val)),
			    size);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	const char *names;
	bfs_node n;

	if (req_node(req, ino, &n))
		reply_xattr(req, names, bfs_view_listxattr(req_ll(req)->view, &n,
							   &names), size);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	bfs_view_statfs(req_ll(req)->view, &sv);
	fuse_reply_statfs(req, &sv);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	bfs_node n;

	if (req_node(req, ino, &n))
		fuse_reply_err(req, -bfs_view_access(req_ll(req)->view, &n, mask));
}

/* Everything that would change the tree: the mount is read-only.  (The
 * "ro" mount flag makes the kernel refuse most of these itself.) */
static void rofs_entry(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t d) { fuse_reply_err(req, EROFS); }
static void rofs_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m) { fuse_reply_err(req, EROFS); }
static void rofs_name(fuse_req_t req, fuse_ino_t p, const char *n) { fuse_reply_err(req, EROFS); }
static void rofs_symlink(fuse_req_t req, const char *l, fuse_ino_t p, const char *n) { fuse_reply_err(req, EROFS); }
static void rofs_rename(fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn, unsigned int f) { fuse_reply_err(req, EROFS); }
static void rofs_link(fuse_req_t req, fuse_ino_t i, fuse_ino_t np, const char *nn) { fuse_reply_err(req, EROFS); }
static void rofs_setattr(fuse_req_t req, fuse_ino_t i, struct stat *a, int s, struct fuse_file_info *f) { fuse_reply_err(req, EROFS); }
static void rofs_write(fuse_req_t req, fuse_ino_t i, const char *b, size_t s, off_t o, struct fuse_file_info *f) { fuse_reply_err(req, EROFS); }
static void rofs_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, struct fuse_file_info *f) { fuse_reply_err(req, EROFS); }
static void rofs_setxattr(fuse_req_t req, fuse_ino_t i, const char *n, const char *v, size_t s, int f) { fuse_reply_err(req, EROFS); }
static void rofs_removexattr(fuse_req_t req, fuse_ino_t i, const char *n) { fuse_reply_err(req, EROFS); }

static const struct fuse_lowlevel_ops ops = {
	.init = ll_init,
	.lookup = ll_lookup,
	.getattr = ll_getattr,
	.opendir = ll_opendir,
	.readdir = ll_readdir,
	.open = ll_open,
	.read = ll_read,
	.release = ll_release,
	.getxattr = ll_getxattr,
	.listxattr = ll_listxattr,
	.statfs = ll_statfs,
	.access = ll_access,
	.mknod = rofs_entry,
	.mkdir = rofs_mkdir,
	.unlink = rofs_name,
	.rmdir = rofs_name,
	.symlink = rofs_symlink,
	.rename = rofs_rename,
	.link = rofs_link,
	.setattr = rofs_setattr,
	.write = rofs_write,
	.create = rofs_create,
	.setxattr = rofs_setxattr,
	.removexattr = rofs_removexattr,
};

const struct fuse_lowlevel_ops *bfs_ll_ops(size_t *size)
{
	*size = sizeof(ops);
	return &ops;
}

/* ---- pushing into the page cache -------------------------------------- */

/* Make the kernel look up node n (so that it knows the inode, and a
 * reader's open of the name needs no LOOKUP): a stat() through the mount,
 * answered by a loop thread.  The peeker does it (fs/peek.h), so that no
 * thread of this process waits in the kernel on its own mount: a SIGKILL
 * then always ends the process, and with it the connection. */
static int look_up(bfs_ll *ll, const bfs_node *n)
{
	char rel[128];
	uint64_t ino = 0;
	int rc;

	if (bfs_ns_path(bfs_view_shape(ll->view), n, rel, sizeof(rel)) < 0)
		return -ENAMETOOLONG;
	rc = ll->peek ? bfs_peek_stat(ll->peek, rel, &ino)
		      : bfs_peek_stat_here(ll->root, rel, &ino);
	if (rc)
		return rc;
	if (ino != bfs_view_ino(ll->view, n))
		return -ESTALE; /* something else is mounted there now */
	return 0;
}

/* Copy one file whole into its inode's page cache.  The kernel takes
 * pages only for an inode it knows, so on ENOENT it is looked up first;
 * page 0 goes in one push with the header, since the kernel marks a page
 * valid only when one push fills it.  0, or -errno. */
static int push_file(bfs_ll *ll, const bfs_view_file_bytes *f)
{
	unsigned char page[4096];
	size_t total = f->hdr_len + f->data_len;
	size_t first = total < sizeof(page) ? total : sizeof(page);
	uint64_t ino = bfs_view_ino(ll->view, &f->node);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(first);
	int err;

	memcpy(page, f->hdr, f->hdr_len);
	memcpy(page + f->hdr_len, f->data, first - f->hdr_len);
	bv.buf[0].mem = page;
	err = fuse_lowlevel_notify_store(ll->se, ino, 0, &bv, 0);
	if (err == -ENOENT) {
		if ((err = look_up(ll, &f->node)))
			return err;
		err = fuse_lowlevel_notify_store(ll->se, ino, 0, &bv, 0);
	}
	if (err || total == first)
		return err;
	bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(total - first);
	bv.buf[0].mem = (void *)((const char *)f->data + (first - f->hdr_len));
	return fuse_lowlevel_notify_store(ll->se, ino, (off_t)first, &bv, 0);
}

/* The engine calls this from its courier thread for read-ahead that
 * became ready while its pool was otherwise idle, so the copy costs no
 * decoding; the reader's read() (or mmap) is then one copy out of the
 * page cache instead of ~20 FUSE round trips (docs/BENCHMARKS.md).  The
 * look-up and the stores may wait on this mount's loop threads, and they
 * on the engine's workers: never on the courier, so this may block. */
int bfs_ll_push(bfs_ll *ll, uint64_t id, const bfs_batch *b)
{
	bfs_view_push plan;
	int handed = 0;

	/* counted before the check, so that stop_pushes sees it */
	__atomic_add_fetch(&ll->pushing, 1, __ATOMIC_ACQ_REL);
	if (!__atomic_load_n(&ll->push_live, __ATOMIC_ACQUIRE))
		goto out;
	bfs_view_push_plan(ll->view, id, b, bfs_pt_active(ll->pt), &plan);
	if (plan.lookup)
		look_up(ll, &plan.batch);
	for (unsigned k = 0; k < plan.nfiles; k++) {
		if (push_file(ll, &plan.files[k]))
			break; /* what is not there is read as usual */
		if (k == 0 && plan.counts) {
			handed = 1;
			__atomic_add_fetch(&ll->pushed_bytes, plan.files[0].data_len,
					   __ATOMIC_RELAXED);
		}
	}
out:
	__atomic_sub_fetch(&ll->pushing, 1, __ATOMIC_ACQ_REL);
	return handed;
}

void bfs_ll_start_pushes(bfs_ll *ll)
{
	__atomic_store_n(&ll->push_live, 1, __ATOMIC_RELEASE);
}

int bfs_ll_stop_pushes(bfs_ll *ll)
{
	__atomic_store_n(&ll->push_live, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 10000 &&
			__atomic_load_n(&ll->pushing, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	return __atomic_load_n(&ll->pushing, __ATOMIC_ACQUIRE) != 0;
}
