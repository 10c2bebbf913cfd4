/*
 * view.c - the mount as its readers see it (see view.h): nodes and their
 * attributes, opens and reads, the snapshots open files hold, and how a
 * batch is delivered (read, pushed or lent).  The contents of the files
 * that are not batches are made by fs/files.c.
 *
 * DESIGN
 * Nodes are computed from names and inode numbers (fs/namespace), so the
 * view keeps no per-name state.  Two tables are shared between threads:
 *   made[]  index.json / preview.jpg built recently (made_lock).  An entry
 *           being built is marked `building`; the builder works with the
 *           lock dropped, since building waits for a batch to decode, and
 *           others that want the same entry wait on made_cv, while lookups
 *           of every other entry go on.
 *   snaps   the bytes each open of stats.json, index.json or preview.jpg
 *           took (snap_lock), named by number in the open's fh.
 * Batch bytes are never copied: a read pins its batch in the engine until
 * its reply is written (bfs_view_done).
 */
#include "fs/view.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/npy.h"

/* index.json / preview.jpg built recently, so that the stat (which must
 * know the size) and the open that follow build them only once. */
struct bfs__made {
	bfs_node_kind kind;
	uint64_t id;
	char *buf;           /* owned here; NULL: empty, or being built */
	size_t len;
	uint64_t used;       /* LRU tick */
	int building;        /* a thread builds it, without made_lock */
};

/* A file's bytes taken at open (stats.json, index.json, preview.jpg).
 * Open files name theirs by number (fh), not by pointer, so a read that
 * races its file's release finds nothing instead of freed memory. */
struct bfs__snapshot {
	uint64_t id;
	char *buf;
	size_t len;
	struct bfs__snapshot *next;
};

#define BFS__MADE 8

struct bfs_view {
	bfs_view_opts o;
	bfs_ns_shape shape;
	char fingerprint[17];        /* bfs_engine_fingerprint of the mount */
	bfs_files files;             /* what the generated files are made of */
	char *dataset_json;          /* built once, read-only after create */
	size_t dataset_len;

	pthread_mutex_t made_lock;
	pthread_cond_t made_cv;      /* an entry finished building */
	struct bfs__made made[BFS__MADE]; /* protected by made_lock */
	uint64_t made_tick;          /* protected by made_lock */

	pthread_mutex_t snap_lock;
	struct bfs__snapshot *snaps; /* protected by snap_lock */
	uint64_t next_snap;          /* protected by snap_lock */

	uint64_t last_failed;        /* atomic: last batch whose failed read
				      * was told to warn (+1; 0 none) */
	uint64_t holders;            /* atomic: opens of /hold now */
	uint64_t holds;              /* atomic: opens of /hold so far */
};


/* opts.warn, formatted; a no-op without one. */
static void view_warn(const bfs_view *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void view_warn(const bfs_view *v, const char *fmt, ...)
{
	char msg[2 * BFS_ERRMSG_MAX];
	va_list ap;

	if (!v->o.warn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	v->o.warn(v->o.ctx, msg);
}

/* ---- create / destroy ------------------------------------------------- */

int bfs_view_create(const bfs_view_opts *o, bfs_view **out)
{
	bfs_view *v;
	int err;

	*out = NULL;
	if (!(v = calloc(1, sizeof(*v))))
		return -ENOMEM;
	v->o = *o;
	v->shape.epochs = bfs_engine_epochs(o->eng);
	v->shape.batches = bfs_engine_batches_per_epoch(o->eng);
	if (bfs_engine_options(o->eng)->resume.on) {
		v->shape.partial = 1;
		v->shape.partial_epoch = bfs_engine_options(o->eng)->resume.epoch;
		v->shape.partial_batches = bfs_engine_epoch_batches(
			o->eng, v->shape.partial_epoch);
	}
	if (bfs_engine_options(o->eng)->ranks) {
		v->shape.ranks = bfs_engine_ranks(o->eng);
		v->shape.rank0 = bfs_engine_options(o->eng)->rank;
	}
	v->shape.hold = o->hold != 0;
	bfs_engine_fingerprint(bfs_engine_options(o->eng), v->fingerprint);
	v->files = (bfs_files){
		.shape = &v->shape,
		.src = o->src, .origin = o->origin, .shard_cache = o->shard_cache,
		.eng = o->eng,
		.cache = o->cache, .cache_fp = o->cache_fp, .image_key = o->image_key,
		.label_key = o->label_key, .fingerprint = v->fingerprint,
		.io = o->io, .history = o->history, .warn = o->warn, .ctx = o->ctx,
	};
	clock_gettime(CLOCK_MONOTONIC, &v->files.started);
	pthread_mutex_init(&v->made_lock, NULL);
	pthread_cond_init(&v->made_cv, NULL);
	pthread_mutex_init(&v->snap_lock, NULL);
	if ((err = bfs_files_dataset_json(&v->files, &v->dataset_json, &v->dataset_len))) {
		bfs_view_destroy(v);
		return err;
	}
	*out = v;
	return 0;
}

void bfs_view_destroy(bfs_view *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < BFS__MADE; i++)
		free(v->made[i].buf);
	while (v->snaps) {
		struct bfs__snapshot *s = v->snaps;

		v->snaps = s->next;
		free(s->buf);
		free(s);
	}
	pthread_mutex_destroy(&v->made_lock);
	pthread_cond_destroy(&v->made_cv);
	pthread_mutex_destroy(&v->snap_lock);
	free(v->dataset_json);
	free(v);
}

int bfs_view_stats_json(bfs_view *v, char **buf, size_t *len)
{
	return bfs_files_stats_json(&v->files, buf, len);
}

const char *bfs_view_dataset_json(const bfs_view *v, size_t *len)
{
	*len = v->dataset_len;
	return v->dataset_json;
}

const bfs_ns_shape *bfs_view_shape(const bfs_view *v) { return &v->shape; }

void bfs_view_holders(const bfs_view *v, uint64_t *now, uint64_t *ever)
{
	*now = __atomic_load_n(&v->holders, __ATOMIC_ACQUIRE);
	*ever = __atomic_load_n(&v->holds, __ATOMIC_ACQUIRE);
}

uint64_t bfs_view_batch_id(const bfs_view *v, const bfs_node *n)
{
	return bfs_ns_batch_id(&v->shape, n);
}

uint64_t bfs_view_ino(const bfs_view *v, const bfs_node *n)
{
	return bfs_ns_ino(&v->shape, n);
}

int bfs_view_node(const bfs_view *v, uint64_t ino, bfs_node *n)
{
	return bfs_ns_from_ino(&v->shape, ino, n);
}

/* ---- index.json and preview.jpg, built once ---------------------------- */

/* Find or build the index.json / preview.jpg of node n and hand a copy of
 * its bytes (want_copy) or only its length.  The builder drops made_lock
 * while it waits for the batch; a second thread that wants the same file
 * waits for the first, any other goes on.  0 or the builder's error. */
static int made_get(bfs_view *v, uint64_t reader, const bfs_node *n,
		    int want_copy, char **copy, size_t *len)
{
	uint64_t id = bfs_view_batch_id(v, n);
	struct bfs__made *e = NULL, *slot;
	char *buf = NULL;
	size_t blen = 0;
	int err = 0;

	pthread_mutex_lock(&v->made_lock);
	for (;;) {
		slot = NULL;
		e = NULL;
		for (size_t i = 0; i < BFS__MADE; i++) {
			struct bfs__made *m = &v->made[i];

			if ((m->buf || m->building) && m->kind == n->kind &&
			    m->id == id) {
				e = m;
				break;
			}
			if (m->building)
				continue;
			if (!slot || !m->buf || (slot->buf && m->used < slot->used))
				slot = m;
		}
		if (e && e->building) {
			pthread_cond_wait(&v->made_cv, &v->made_lock);
			continue;
		}
		if (e || slot)
			break;
		/* every entry is being built: wait for one */
		pthread_cond_wait(&v->made_cv, &v->made_lock);
	}
	if (!e) {
		/* build it into slot, without the lock */
		free(slot->buf);
		slot->buf = NULL;
		slot->len = 0;
		slot->kind = n->kind;
		slot->id = id;
		slot->building = 1;
		pthread_mutex_unlock(&v->made_lock);
		err = n->kind == BFS_NODE_INDEX
			? bfs_files_index_json(&v->files, reader, n, &buf, &blen)
			: bfs_files_preview_jpg(&v->files, reader, n, &buf, &blen);
		pthread_mutex_lock(&v->made_lock);
		slot->building = 0;
		slot->buf = err ? NULL : buf;
		slot->len = err ? 0 : blen;
		pthread_cond_broadcast(&v->made_cv);
		e = err ? NULL : slot;
	}
	if (e) {
		e->used = ++v->made_tick;
		*len = e->len;
		if (want_copy) {
			if ((*copy = malloc(e->len ? e->len : 1)))
				memcpy(*copy, e->buf, e->len);
			else
				err = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&v->made_lock);
	return err;
}

/* ---- snapshots --------------------------------------------------------- */

/* Keep buf (len bytes, malloc()ed, now the view's) for an open; returns
 * its number for fh.  0: out of memory (buf is freed). */
static uint64_t snap_add(bfs_view *v, char *buf, size_t len)
{
	struct bfs__snapshot *s = malloc(sizeof(*s));

	if (!s) {
		free(buf);
		return 0;
	}
	s->buf = buf;
	s->len = len;
	pthread_mutex_lock(&v->snap_lock);
	s->id = ++v->next_snap;
	s->next = v->snaps;
	v->snaps = s;
	pthread_mutex_unlock(&v->snap_lock);
	return s->id;
}

static void snap_drop(bfs_view *v, uint64_t id)
{
	struct bfs__snapshot **p, *s = NULL;

	pthread_mutex_lock(&v->snap_lock);
	for (p = &v->snaps; *p; p = &(*p)->next)
		if ((*p)->id == id) {
			s = *p;
			*p = s->next;
			break;
		}
	pthread_mutex_unlock(&v->snap_lock);
	if (s) {
		free(s->buf);
		free(s);
	}
}

/* Bytes a read of size at off gets from a buffer of len bytes. */
static size_t slice_len(size_t len, size_t size, off_t off)
{
	if (off < 0 || (uint64_t)off >= len)
		return 0;
	return size < len - (size_t)off ? size : len - (size_t)off;
}

/* ---- nodes ------------------------------------------------------------ */

int bfs_view_getattr(bfs_view *v, uint64_t reader, const bfs_node *n,
		     struct stat *st, double *timeout)
{
	char hdr[256];
	size_t data_len, len = 0;
	int err;

	memset(st, 0, sizeof(*st));
	st->st_ino = bfs_ns_ino(&v->shape, n);
	st->st_atim = st->st_mtim = st->st_ctim = v->o.mounted;
	st->st_uid = v->o.uid;
	st->st_gid = v->o.gid;
	st->st_nlink = 1;
	st->st_mode = S_IFREG | 0444;
	*timeout = BFS_VIEW_TIMEOUT;
	switch (n->kind) {
	case BFS_NODE_ROOT:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + (v->shape.ranks ? v->shape.ranks : v->shape.epochs);
		break;
	case BFS_NODE_RANK:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + v->shape.epochs;
		break;
	case BFS_NODE_EPOCH:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		break;
	case BFS_NODE_HOLD:
		break; /* empty: only its opens count */
	case BFS_NODE_DATASET_JSON:
		st->st_size = (off_t)v->dataset_len;
		break;
	case BFS_NODE_STATS_JSON: {
		char *buf;

		*timeout = 0.0; /* its size changes */
		clock_gettime(CLOCK_REALTIME, &st->st_mtim);
		if (bfs_files_stats_json(&v->files, &buf, &len) == 0) {
			st->st_size = (off_t)len;
			free(buf);
		}
		break;
	}
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		st->st_size = (off_t)(bfs_files_npy_header(&v->files, n, hdr, sizeof(hdr),
						       &data_len) + data_len);
		break;
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW:
		if ((err = made_get(v, reader, n, 0, NULL, &len)))
			return err;
		st->st_size = (off_t)len;
		break;
	}
	st->st_blksize = 1 << 20;
	st->st_blocks = (st->st_size + 511) / 512;
	return 0;
}

int bfs_view_lookup(bfs_view *v, uint64_t reader, const bfs_node *dir,
		    const char *name, bfs_node *n, struct stat *st,
		    double *timeout)
{
	int err = bfs_ns_child(&v->shape, dir, name, n);

	*timeout = BFS_VIEW_TIMEOUT;
	if (err)
		return err;
	return bfs_view_getattr(v, reader, n, st, timeout);
}

int bfs_view_dirent(const bfs_view *v, const bfs_node *dir, uint64_t k,
		    char *name, size_t cap, struct stat *st)
{
	bfs_node c = *dir;

	if (dir->kind != BFS_NODE_ROOT && dir->kind != BFS_NODE_EPOCH &&
	    dir->kind != BFS_NODE_RANK)
		return -ENOTDIR;
	memset(st, 0, sizeof(*st));
	if (k < 2) {
		snprintf(name, cap, "%s", k == 0 ? "." : "..");
		if (k == 1) /* an epoch's parent is its rank directory */
			c.kind = dir->kind == BFS_NODE_EPOCH && v->shape.ranks
				? BFS_NODE_RANK : BFS_NODE_ROOT;
		st->st_ino = bfs_ns_ino(&v->shape, &c);
		st->st_mode = S_IFDIR;
		return 0;
	}
	k -= 2;
	if (dir->kind == BFS_NODE_ROOT) {
		uint64_t files = 2 + (v->shape.hold ? 1 : 0);

		if (k < files) {
			c.kind = k == 0 ? BFS_NODE_DATASET_JSON
			       : k == 1 ? BFS_NODE_STATS_JSON : BFS_NODE_HOLD;
		} else if (v->shape.ranks && k - files < v->shape.ranks) {
			c.kind = BFS_NODE_RANK;
			c.rank = v->shape.rank0 + (uint32_t)(k - files);
		} else if (!v->shape.ranks && k - files < v->shape.epochs) {
			c.kind = BFS_NODE_EPOCH;
			c.epoch = (uint32_t)(k - files);
		} else {
			return -ENOENT;
		}
	} else if (dir->kind == BFS_NODE_RANK) {
		if (k >= v->shape.epochs)
			return -ENOENT;
		c.kind = BFS_NODE_EPOCH;
		c.epoch = (uint32_t)k;
	} else {
		/* .index.json and .preview.jpg exist but are not listed: their
		 * size needs the batch decoded, and `ls -l` would decode all */
		if (k / 2 >= bfs_ns_epoch_batches(&v->shape, dir->epoch))
			return -ENOENT;
		c.kind = k % 2 ? BFS_NODE_LABELS : BFS_NODE_BATCH;
		c.batch = k / 2;
	}
	if (bfs_ns_name(&v->shape, &c, name, cap) < 0)
		return -ENOENT;
	st->st_ino = bfs_ns_ino(&v->shape, &c);
	st->st_mode = c.kind == BFS_NODE_EPOCH || c.kind == BFS_NODE_RANK
		? S_IFDIR : S_IFREG;
	return 0;
}

int bfs_view_opendir(const bfs_view *v, const bfs_node *n)
{
	return n->kind == BFS_NODE_ROOT || n->kind == BFS_NODE_EPOCH ||
	       n->kind == BFS_NODE_RANK ? 0 : -ENOTDIR;
}

int bfs_view_access(const bfs_view *v, const bfs_node *n, int mask)
{
	return mask & W_OK ? -EROFS : 0;
}

/* ---- opening and reading ---------------------------------------------- */

int bfs_view_open(bfs_view *v, uint64_t reader, const bfs_node *n, int flags,
		  int lend_ok, bfs_view_open_info *oi)
{
	char *buf = NULL;
	size_t len = 0;
	int err;

	memset(oi, 0, sizeof(*oi));
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)))
		return -EROFS;
	switch (n->kind) {
	case BFS_NODE_ROOT:
	case BFS_NODE_RANK:
	case BFS_NODE_EPOCH:
		return -EISDIR;
	case BFS_NODE_DATASET_JSON:
		oi->keep_cache = 1;
		return 0;
	case BFS_NODE_HOLD:
		/* counted until its release (bfs_view_release) */
		__atomic_add_fetch(&v->holds, 1, __ATOMIC_ACQ_REL);
		__atomic_add_fetch(&v->holders, 1, __ATOMIC_ACQ_REL);
		return 0;
	case BFS_NODE_STATS_JSON:
		if ((err = bfs_files_stats_json(&v->files, &buf, &len)))
			return err;
		oi->direct_io = 1; /* fresh at every open */
		break;
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		/* the bytes never change: the kernel keeps its cache (and
		 * what a push put there) */
		oi->keep_cache = 1;
		oi->hint = 1;
		oi->lend = n->kind == BFS_NODE_BATCH && lend_ok;
		return 0;
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW:
		if ((err = made_get(v, reader, n, 1, &buf, &len)))
			return err;
		oi->keep_cache = 1;
		break;
	}
	if (!(oi->fh = snap_add(v, buf, len)))
		return -ENOMEM;
	return 0;
}

void bfs_view_hint(bfs_view *v, uint64_t reader, const bfs_node *n)
{
	bfs_engine_hint(v->o.eng, reader, bfs_view_batch_id(v, n));
}

/* A read of a snapshot: its bytes copied out under the lock. */
static int read_snapshot(bfs_view *v, uint64_t fh, size_t size, off_t off,
			 struct iovec *iov, int *niov, bfs_view_pin *pin)
{
	struct bfs__snapshot *s;
	size_t n = 0;
	int err = -EBADF;

	pthread_mutex_lock(&v->snap_lock);
	for (s = v->snaps; s && s->id != fh; s = s->next)
		;
	if (s) {
		err = 0;
		if ((n = slice_len(s->len, size, off))) {
			if ((pin->copy = malloc(n)))
				memcpy(pin->copy, s->buf + off, n);
			else
				err = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&v->snap_lock);
	if (!err && n) {
		iov[0].iov_base = pin->copy;
		iov[0].iov_len = n;
		*niov = 1;
	}
	return err;
}

/* A read of a batch or label file: the header is built from the geometry
 * alone (head -c 128, file and stat never wait); a read that reaches the
 * data pins the batch and points into its memory. */
static int read_batch(bfs_view *v, uint64_t reader, const bfs_node *n,
		      size_t size, off_t off, struct iovec *iov, int *niov,
		      bfs_view_pin *pin)
{
	char msg[BFS_ERRMSG_MAX] = "";
	size_t data_len, hlen = bfs_files_npy_header(&v->files, n, pin->hdr,
						 sizeof(pin->hdr), &data_len);
	uint64_t pos = (uint64_t)off, id = bfs_view_batch_id(v, n);
	int err;

	if (off < 0 || pos >= hlen + data_len)
		return 0;
	if (size > hlen + data_len - pos)
		size = hlen + data_len - pos;
	if (pos < hlen) {
		iov[*niov].iov_base = pin->hdr + pos;
		iov[*niov].iov_len = size < hlen - pos ? size : hlen - pos;
		pos += iov[*niov].iov_len;
		size -= iov[*niov].iov_len;
		(*niov)++;
	}
	if (!size)
		return 0;
	if ((err = bfs_engine_get(v->o.eng, reader, id, &pin->batch, msg))) {
		/* The kernel retries a failed page read; say it once. */
		if (__atomic_exchange_n(&v->last_failed, id + 1,
					__ATOMIC_RELAXED) != id + 1) {
			char where[32] = "";

			if (v->shape.ranks)
				snprintf(where, sizeof(where), "rank %u ", n->rank);
			view_warn(v, "read of %sepoch %u batch %llu fails with EIO: %s",
				  where, n->epoch, (unsigned long long)n->batch,
				  msg[0] ? msg : bfs_strerror(err));
		}
		*niov = 0;
		return -EIO;
	}
	iov[*niov].iov_base = (char *)(n->kind == BFS_NODE_LABELS
		? (const void *)bfs_batch_labels(pin->batch)
		: bfs_batch_images(pin->batch)) + (pos - hlen);
	iov[*niov].iov_len = size;
	(*niov)++;
	return 0;
}

int bfs_view_read(bfs_view *v, uint64_t reader, const bfs_node *n,
		  uint64_t fh, size_t size, off_t off, struct iovec iov[2],
		  int *niov, bfs_view_pin *pin)
{
	size_t len;

	memset(pin, 0, sizeof(*pin));
	*niov = 0;
	switch (n->kind) {
	case BFS_NODE_DATASET_JSON:
		if ((len = slice_len(v->dataset_len, size, off))) {
			iov[0].iov_base = v->dataset_json + off;
			iov[0].iov_len = len;
			*niov = 1;
		}
		return 0;
	case BFS_NODE_STATS_JSON:
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW:
		return read_snapshot(v, fh, size, off, iov, niov, pin);
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		return read_batch(v, reader, n, size, off, iov, niov, pin);
	case BFS_NODE_HOLD:
		return 0;
	default:
		return -EISDIR;
	}
}

void bfs_view_done(bfs_view *v, bfs_view_pin *pin)
{
	if (pin->batch)
		bfs_engine_put(v->o.eng, pin->batch);
	free(pin->copy);
	pin->batch = NULL;
	pin->copy = NULL;
}

void bfs_view_release(bfs_view *v, const bfs_node *n, uint64_t fh)
{
	if (fh)
		snap_drop(v, fh);
	if (n->kind == BFS_NODE_HOLD &&
	    __atomic_sub_fetch(&v->holders, 1, __ATOMIC_ACQ_REL) == 0 &&
	    v->o.on_released)
		v->o.on_released(v->o.ctx);
}

int bfs_view_lend(bfs_view *v, uint64_t reader, const bfs_node *n,
		  size_t *len, bfs_view_pin *pin)
{
	char msg[BFS_ERRMSG_MAX];

	memset(pin, 0, sizeof(*pin));
	if (n->kind != BFS_NODE_BATCH ||
	    bfs_engine_get_flags(v->o.eng, reader, bfs_view_batch_id(v, n),
				 BFS_GET_ALONE, &pin->batch, msg) != 0)
		return -1; /* a failed batch fails its reads, as always */
	/* lent while pinned, so its slot cannot move on before */
	return bfs_engine_lend(v->o.eng, pin->batch, len);
}

/* ---- pushing ---------------------------------------------------------- */

void bfs_view_push_plan(const bfs_view *v, uint64_t id, const bfs_batch *b,
			int passthrough, bfs_view_push *plan)
{
	bfs_node n;

	memset(plan, 0, sizeof(*plan));
	bfs_ns_batch_node(&v->shape, id, &n);
	plan->batch = n;
	plan->lookup = 1;
	if (!passthrough) {
		bfs_view_file_bytes *f = &plan->files[plan->nfiles++];

		f->node = n;
		f->hdr_len = bfs_files_npy_header(&v->files, &n, f->hdr_buf,
					      sizeof(f->hdr_buf), &f->data_len);
		f->hdr = f->hdr_buf;
		f->data = bfs_batch_images(b);
		plan->counts = 1;
		plan->lookup = 0; /* the push looks it up if it must */
	}
	{
		bfs_view_file_bytes *f = &plan->files[plan->nfiles++];

		f->node = n;
		f->node.kind = BFS_NODE_LABELS;
		f->hdr_len = bfs_files_npy_header(&v->files, &f->node, f->hdr_buf,
					      sizeof(f->hdr_buf), &f->data_len);
		f->hdr = f->hdr_buf;
		f->data = bfs_batch_labels(b);
	}
}

/* ---- the rest --------------------------------------------------------- */

int bfs_view_getxattr(const bfs_view *v, const bfs_node *n, const char *name,
		      char *val, size_t cap)
{
	const bfs_engine_opts *eo = bfs_engine_options(v->o.eng);
	unsigned count;
	int len;

	if (n->kind == BFS_NODE_ROOT && strcmp(name, "user.batchfs.pid") == 0)
		return snprintf(val, cap, "%ld", (long)getpid());
	if (n->kind == BFS_NODE_HOLD && (strcmp(name, "user.batchfs.holders") == 0 ||
					 strcmp(name, "user.batchfs.holds") == 0)) {
		uint64_t now, ever;

		bfs_view_holders(v, &now, &ever);
		return snprintf(val, cap, "%llu", (unsigned long long)
				(strcmp(name, "user.batchfs.holders") == 0 ? now : ever));
	}
	if (n->kind != BFS_NODE_BATCH && n->kind != BFS_NODE_LABELS)
		return -ENODATA;
	count = bfs_engine_batch_count(v->o.eng, bfs_view_batch_id(v, n));
	if (strcmp(name, "user.batchfs.shape") == 0) {
		int h, w;

		bfs_engine_epoch_shape(v->o.eng, n->epoch, &h, &w);
		if (n->kind == BFS_NODE_LABELS)
			len = snprintf(val, cap, "(%u,)", count);
		else if (eo->nchw)
			len = snprintf(val, cap, "(%u, 3, %d, %d)", count, h, w);
		else
			len = snprintf(val, cap, "(%u, %d, %d, 3)", count, h, w);
	} else if (strcmp(name, "user.batchfs.dtype") == 0) {
		len = snprintf(val, cap, "%s",
			       n->kind == BFS_NODE_LABELS
				       ? "int64" : bfs_dtype_name(eo->dtype));
	} else {
		return -ENODATA;
	}
	return len;
}

int bfs_view_listxattr(const bfs_view *v, const bfs_node *n,
		       const char **names)
{
	static const char batch[] = "user.batchfs.shape\0user.batchfs.dtype";
	static const char root[] = "user.batchfs.pid";
	static const char hold[] = "user.batchfs.holders\0user.batchfs.holds";

	if (n->kind == BFS_NODE_HOLD) {
		*names = hold;
		return (int)sizeof(hold);
	}
	if (n->kind == BFS_NODE_BATCH || n->kind == BFS_NODE_LABELS) {
		*names = batch;
		return (int)sizeof(batch);
	}
	if (n->kind == BFS_NODE_ROOT) {
		*names = root;
		return (int)sizeof(root);
	}
	*names = batch;
	return 0;
}

void bfs_view_statfs(const bfs_view *v, struct statvfs *sv)
{
	uint64_t nr = v->shape.ranks ? v->shape.ranks : 1;

	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = sv->f_frsize = 4096;
	sv->f_files = 2 + (v->shape.hold ? 1 : 0) + v->shape.ranks +
		      nr * v->shape.epochs * (1 + 2 * v->shape.batches);
	sv->f_namemax = 255;
	sv->f_flag = ST_RDONLY;
}
