/*
 * FUSE passthrough for batch files: see passthrough.h.
 *
 * Kernel ABI used here beyond the 7.38 <linux/fuse.h> of Debian bookworm
 * (values from the kernel's include/uapi/linux/fuse.h, protocol 7.40):
 * FUSE_PASSTHROUGH (INIT flags bit 37), max_stack_depth (the INIT reply's
 * first word after flags2), FOPEN_PASSTHROUGH (open flag bit 7), the open
 * reply's backing_id (after open_flags), and the FUSE_DEV_IOC_BACKING_OPEN
 * and _CLOSE ioctls on /dev/fuse.
 */
#define FUSE_USE_VERSION 312

#include "fs/passthrough.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/log.h"

#define PT_INIT_FLAG      (1ull << 37)  /* FUSE_PASSTHROUGH */
#define PT_OPEN_FLAG      (1u << 7)     /* FOPEN_PASSTHROUGH */
#define PT_STACK_DEPTH    1             /* backing files on tmpfs only */

struct pt_backing_map {                 /* struct fuse_backing_map */
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
struct pt_open_out {                    /* struct fuse_open_out, 7.40 */
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};
#define PT_IOC_BACKING_OPEN  _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

struct open_ino {
	uint64_t ino;
	unsigned opens;
	int decided;
	bfs_pt_mode mode;
	int backing;
	struct open_ino *next;
};

struct bfs_pt {
	int devfd;
	int want;
	uint64_t init_unique;    /* atomic: INIT's unique until replied */
	int offered;             /* atomic: the kernel offered passthrough */
	int negotiated;          /* atomic: INIT turned it on (never reset) */
	int active;              /* atomic: negotiated, and no failure since */
	uint64_t opens;          /* atomic: passthrough opens answered */
	pthread_mutex_t lock;
	pthread_cond_t decided;
	struct open_ino *inos;   /* protected by lock */
};

/* libfuse hands the custom I/O hooks the session's userdata (the mount),
 * not ours; a daemon serves one session. */
static bfs_pt *the_pt;

/* ---- INIT ------------------------------------------------------------- */

int bfs_pt_parse_init(const void *buf, size_t len, uint64_t *unique)
{
	struct fuse_in_header h;
	struct fuse_init_in in;
	uint64_t flags;

	if (len < sizeof(h))
		return -1;
	memcpy(&h, buf, sizeof(h));
	if (h.opcode != FUSE_INIT)
		return -1;
	*unique = h.unique;
	memset(&in, 0, sizeof(in));
	memcpy(&in, (const char *)buf + sizeof(h),
	       len - sizeof(h) < sizeof(in) ? len - sizeof(h) : sizeof(in));
	flags = in.flags;
	if (flags & FUSE_INIT_EXT)
		flags |= (uint64_t)in.flags2 << 32;
	return (flags & PT_INIT_FLAG) ? 1 : 0;
}

int bfs_pt_patch_init_reply(void *body, size_t len)
{
	struct fuse_init_out out;
	uint32_t depth = PT_STACK_DEPTH;

	if (len < offsetof(struct fuse_init_out, unused) + sizeof(depth))
		return -EINVAL;
	memcpy(&out, body, len < sizeof(out) ? len : sizeof(out));
	if (out.flags & FUSE_WRITEBACK_CACHE)
		return -EINVAL;
	out.flags |= FUSE_INIT_EXT;
	out.flags2 |= (uint32_t)(PT_INIT_FLAG >> 32);
	memcpy(body, &out, offsetof(struct fuse_init_out, unused));
	memcpy((char *)body + offsetof(struct fuse_init_out, unused), &depth,
	       sizeof(depth));
	return 0;
}

static ssize_t pt_read(int fd, void *buf, size_t len, void *userdata)
{
	bfs_pt *pt = the_pt;
	ssize_t n = read(fd, buf, len);
	uint64_t unique;
	int r;

	if (n > 0 && !__atomic_load_n(&pt->negotiated, __ATOMIC_RELAXED) &&
	    (r = bfs_pt_parse_init(buf, (size_t)n, &unique)) >= 0) {
		__atomic_store_n(&pt->offered, r, __ATOMIC_RELAXED);
		__atomic_store_n(&pt->init_unique, unique, __ATOMIC_RELEASE);
	}
	return n;
}

static ssize_t pt_writev(int fd, struct iovec *iov, int count,
			 void *userdata)
{
	bfs_pt *pt = the_pt;
	uint64_t unique = __atomic_load_n(&pt->init_unique, __ATOMIC_ACQUIRE);
	struct fuse_out_header h;

	if (unique && count >= 2 && iov[0].iov_len >= sizeof(h)) {
		memcpy(&h, iov[0].iov_base, sizeof(h));
		if (h.unique == unique && h.error == 0) {
			__atomic_store_n(&pt->init_unique, 0, __ATOMIC_RELAXED);
			if (!pt->want) {
				/* nothing asked */
			} else if (!pt->offered) {
				bfs_log(BFS_LOG_INFO,
					"passthrough off: the kernel does not offer it (Linux 6.9+ with CONFIG_FUSE_PASSTHROUGH)");
			} else if (bfs_pt_patch_init_reply(iov[1].iov_base,
							   iov[1].iov_len) != 0) {
				bfs_log(BFS_LOG_WARN,
					"passthrough off: libfuse's INIT reply does not allow it");
			} else {
				__atomic_store_n(&pt->negotiated, 1,
						 __ATOMIC_RELEASE);
				__atomic_store_n(&pt->active, 1,
						 __ATOMIC_RELEASE);
				bfs_log(BFS_LOG_INFO,
					"passthrough on: the kernel reads batch files from the engine's slot files");
			}
		}
	}
	return writev(fd, iov, count);
}

int bfs_pt_attach(struct fuse_session *se, int want, bfs_pt **out)
{
	static const struct fuse_custom_io io = {
		.read = pt_read,
		.writev = pt_writev,
	};
	bfs_pt *pt = calloc(1, sizeof(*pt));
	int err;

	*out = NULL;
	if (!pt)
		return -ENOMEM;
	pt->devfd = fuse_session_fd(se);
	pt->want = want;
	pthread_mutex_init(&pt->lock, NULL);
	pthread_cond_init(&pt->decided, NULL);
	the_pt = pt;
	/* After fuse_session_mount: the same descriptor, now read and
	 * written through the hooks above. */
	if ((err = fuse_session_custom_io(se, &io, pt->devfd)) != 0) {
		the_pt = NULL;
		bfs_pt_destroy(pt);
		return err < 0 ? err : -EINVAL;
	}
	*out = pt;
	return 0;
}

void bfs_pt_destroy(bfs_pt *pt)
{
	if (!pt)
		return;
	while (pt->inos) {
		struct open_ino *o = pt->inos;

		pt->inos = o->next;
		free(o);
	}
	pthread_cond_destroy(&pt->decided);
	pthread_mutex_destroy(&pt->lock);
	free(pt);
}

int bfs_pt_active(const bfs_pt *pt)
{
	return pt && __atomic_load_n(&pt->active, __ATOMIC_ACQUIRE);
}

int bfs_pt_negotiated(const bfs_pt *pt)
{
	return pt && __atomic_load_n(&pt->negotiated, __ATOMIC_ACQUIRE);
}

uint64_t bfs_pt_opens(const bfs_pt *pt)
{
	return pt ? __atomic_load_n(&pt->opens, __ATOMIC_RELAXED) : 0;
}

/* ---- opens ------------------------------------------------------------ */

static struct open_ino *find_locked(bfs_pt *pt, uint64_t ino)
{
	for (struct open_ino *o = pt->inos; o; o = o->next)
		if (o->ino == ino)
			return o;
	return NULL;
}

int bfs_pt_begin(bfs_pt *pt, uint64_t ino, bfs_pt_mode *mode, int *backing)
{
	struct open_ino *o;

	pthread_mutex_lock(&pt->lock);
	while ((o = find_locked(pt, ino)) && !o->decided)
		pthread_cond_wait(&pt->decided, &pt->lock);
	if (o) {
		o->opens++;
		*mode = o->mode;
		*backing = o->backing;
		pthread_mutex_unlock(&pt->lock);
		if (*mode == BFS_PT_BACKED)
			__atomic_add_fetch(&pt->opens, 1, __ATOMIC_RELAXED);
		return 1;
	}
	o = calloc(1, sizeof(*o));
	if (o) {
		o->ino = ino;
		o->opens = 1;
		o->backing = -1;
		o->next = pt->inos;
		pt->inos = o;
	}
	pthread_mutex_unlock(&pt->lock);
	if (!o) { /* no room to track it: the ordinary path, untracked */
		*mode = BFS_PT_CACHED;
		*backing = -1;
		return 1;
	}
	return 0;
}

/* Register a read-only open of fd as a backing file: the id, or -errno. */
static int backing_open(bfs_pt *pt, int fd)
{
	char path[64];
	struct pt_backing_map map = { 0 };
	int ro, id, err = 0;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if ((ro = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	map.fd = ro;
	if ((id = ioctl(pt->devfd, PT_IOC_BACKING_OPEN, &map)) < 0)
		err = -errno;
	close(ro); /* the kernel holds its own reference */
	return err ? err : id;
}

static void backing_close(bfs_pt *pt, int id)
{
	uint32_t v = (uint32_t)id;

	if (ioctl(pt->devfd, PT_IOC_BACKING_CLOSE, &v) != 0)
		bfs_log(BFS_LOG_WARN, "passthrough: closing backing file %d: %s",
			id, strerror(errno));
}

bfs_pt_mode bfs_pt_decide(bfs_pt *pt, uint64_t ino, int fd, int *backing)
{
	struct open_ino *o;
	bfs_pt_mode mode = BFS_PT_CACHED;
	int id = -1;

	if (fd >= 0 && bfs_pt_active(pt)) {
		id = backing_open(pt, fd);
		if (id >= 0) {
			mode = BFS_PT_BACKED;
			__atomic_add_fetch(&pt->opens, 1, __ATOMIC_RELAXED);
		} else if (__atomic_exchange_n(&pt->active, 0,
					       __ATOMIC_RELAXED)) {
			bfs_log(BFS_LOG_WARN,
				"passthrough off for this mount: registering a backing file failed: %s",
				strerror(-id));
		}
	}
	pthread_mutex_lock(&pt->lock);
	o = find_locked(pt, ino);
	o->decided = 1;
	o->mode = mode;
	o->backing = mode == BFS_PT_BACKED ? id : -1;
	pthread_cond_broadcast(&pt->decided);
	pthread_mutex_unlock(&pt->lock);
	*backing = mode == BFS_PT_BACKED ? id : -1;
	return mode;
}

void bfs_pt_release(bfs_pt *pt, uint64_t ino)
{
	struct open_ino **pp, *o = NULL;
	int close_id = -1;

	pthread_mutex_lock(&pt->lock);
	for (pp = &pt->inos; *pp; pp = &(*pp)->next)
		if ((*pp)->ino == ino && (*pp)->decided) {
			o = *pp;
			break;
		}
	if (o && --o->opens == 0) {
		*pp = o->next;
		if (o->mode == BFS_PT_BACKED)
			close_id = o->backing;
		free(o);
	}
	pthread_mutex_unlock(&pt->lock);
	if (close_id >= 0)
		backing_close(pt, close_id);
}

int bfs_pt_reply_open(struct fuse_req *req, int backing)
{
	struct pt_open_out out = {
		.fh = 0,
		.open_flags = PT_OPEN_FLAG,
		.backing_id = backing,
	};

	return fuse_reply_buf(req, (const char *)&out, sizeof(out));
}
