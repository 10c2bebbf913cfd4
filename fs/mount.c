/*
 * mount.c - the FUSE adapter and the mount's life (see mount.h).
 *
 * DESIGN
 * The low-level FUSE API, with inode numbers computed from the names
 * (bfs_ns_ino), so the daemon keeps no per-name state: a million-batch
 * listing costs nothing after it has been read, and forget is a no-op.
 * A multithreaded session loop serves requests; a read may block in the
 * engine until its batch is produced while other loop threads keep
 * serving stat, readdir, stats.json and other batches.
 *
 * Two ways bytes reach a reader:
 *  - push: read-ahead that finishes while the pool has nothing else to do
 *    (the reader is slower than decoding) is copied whole, with its label
 *    file, into the kernel's page cache (push_batch), so the reader's
 *    read() or mmap of it never waits on the daemon;
 *  - read: anything else (a batch the reader already waits for, read-ahead
 *    finished while decoding is behind, pages the kernel dropped) is read
 *    through FUSE: the read pins the batch (bfs_engine_get) and replies
 *    straight from its memory.
 *
 * Buffers: dataset.json is built once at mount and owned by struct mnt.
 * stats.json, index.json and preview.jpg are copied at open into a
 * text_file in m->texts, named by number in fi->fh until release.  Batch files
 * own nothing: a read pins its batch only until the reply is written.
 */
#define FUSE_USE_VERSION 312
#include "fs/mount.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "engine/npy.h"
#include "engine/preview.h"
#include "engine/version.h"
#include "fs/json.h"
#include "fs/log.h"
#include "fs/namespace.h"
#include "fs/passthrough.h"

struct mnt {
	const bfs_mount_opts *o;
	bfs_source *src;
	bfs_engine *eng;
	bfs_cache *cache;         /* NULL with --cache none or if it failed */
	char cache_fp[17];
	/* index.json / preview.jpg made recently, so that stat (which must
	 * know the size) and the open that follows build them only once */
	pthread_mutex_t made_lock;
	struct made {
		bfs_node_kind kind;
		uint64_t id;
		char *buf;        /* owned here; NULL = empty entry */
		size_t len;
		uint64_t used;
	} made[8];                /* protected by made_lock */
	uint64_t made_tick;
	bfs_ns_shape shape;
	char *dataset_json;       /* built once, read-only after mount */
	size_t dataset_len;
	struct timespec mounted;
	char fingerprint[17];
	struct fuse_session *se;
	bfs_pt *pt;               /* NULL: no passthrough asked for */
	char slot_dir[PATH_MAX];  /* the engine's slot files (passthrough) */
	char root[PATH_MAX];      /* the mount point, absolute (push_batch) */
	int push_live;            /* atomic: new pushes may start */
	int pushing;              /* atomic: pushes in flight */
	uint64_t pushed_bytes;    /* atomic */
	/* open snapshots of stats.json, index.json, preview.jpg (fi->fh) */
	pthread_mutex_t texts_lock;
	struct text_file *texts;  /* protected by texts_lock */
	uint64_t next_text;       /* protected by texts_lock */
};

/* A snapshot made at open: stats.json, index.json or preview.jpg.  Open
 * files name theirs by number (fi->fh) in m->texts, not by pointer, so a
 * read that races its file's release (seen under ASan, with readers
 * killed mid-read) finds nothing instead of freed memory. */
struct text_file {
	uint64_t id;
	char *buf;
	size_t len;
	struct text_file *next;
};

static uint64_t text_add(struct mnt *m, struct text_file *tf);
static void text_drop(struct mnt *m, uint64_t id);

/* ---- sizes and headers ------------------------------------------------ */

static uint64_t batch_id(const struct mnt *m, const bfs_node *n)
{
	return (uint64_t)n->epoch * m->shape.batches + n->batch;
}

/* Write the NPY header of a batch or label file into hdr (>= 128 bytes);
 * returns the header length and sets *data_len to the payload size. */
static size_t file_header(const struct mnt *m, const bfs_node *n, char *hdr,
			  size_t cap, size_t *data_len)
{
	uint64_t id = batch_id(m, n);
	uint64_t count = bfs_engine_batch_count(m->eng, id);
	int len;

	if (n->kind == BFS_NODE_LABELS) {
		len = bfs_npy_header(hdr, cap, "<i8", &count, 1);
		*data_len = (size_t)count * sizeof(int64_t);
		return len > 0 ? (size_t)len : 0;
	}
	*data_len = (size_t)count * bfs_engine_sample_bytes(m->eng);
	return bfs_engine_npy_header(m->eng, id, hdr, cap);
}

static int build_stats(struct mnt *m, struct text_file *tf);
static int made_len(struct mnt *m, uint64_t reader, const bfs_node *n,
		    size_t *len);
static int made_copy(struct mnt *m, uint64_t reader, const bfs_node *n,
		     struct text_file *tf);

/* ---- dataset.json ----------------------------------------------------- */

static int build_dataset_json(struct mnt *m)
{
	const bfs_engine_opts *eo = bfs_engine_options(m->eng);
	uint64_t per_epoch = bfs_engine_batches_per_epoch(m->eng);
	unsigned last = bfs_engine_batch_count(m->eng, per_epoch - 1);
	bfs_json j;

	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	bfs_json_str(&j, "batchfs_version", BFS_VERSION);
	bfs_json_u64(&j, "format_version", BFS_FORMAT_VERSION);
	bfs_json_str(&j, "source", bfs_source_dir(m->src));
	bfs_json_str(&j, "format", bfs_format_name(bfs_source_format(m->src)));
	bfs_json_u64(&j, "shards", bfs_source_nshards(m->src));
	bfs_json_u64(&j, "samples", bfs_source_count(m->src));
	bfs_json_u64(&j, "samples_per_epoch", bfs_engine_epoch_samples(m->eng));
	bfs_json_u64(&j, "batch_size", eo->batch);
	bfs_json_u64(&j, "batches_per_epoch", per_epoch);
	bfs_json_u64(&j, "last_batch_size", last);
	bfs_json_bool(&j, "drop_remainder", eo->drop_remainder);
	bfs_json_u64(&j, "epochs", bfs_engine_epochs(m->eng));
	bfs_json_open(&j, "shape", '[');
	bfs_json_u64(&j, NULL, eo->batch);
	if (eo->nchw)
		bfs_json_u64(&j, NULL, 3);
	bfs_json_u64(&j, NULL, (uint64_t)eo->height);
	bfs_json_u64(&j, NULL, (uint64_t)eo->width);
	if (!eo->nchw)
		bfs_json_u64(&j, NULL, 3);
	bfs_json_close(&j, ']');
	bfs_json_str(&j, "dtype", bfs_dtype_name(eo->dtype));
	bfs_json_str(&j, "layout", eo->nchw ? "NCHW" : "NHWC");
	bfs_json_str(&j, "resize_mode", eo->resize_crop ? "crop" : "stretch");
	if (eo->resize_crop)
		bfs_json_u64(&j, "crop_from", (uint64_t)eo->crop_from);
	bfs_json_open(&j, "augment", '[');
	if (eo->augment_flip)
		bfs_json_str(&j, NULL, "flip");
	if (eo->augment_crop)
		bfs_json_str(&j, NULL, "crop");
	bfs_json_close(&j, ']');
	{
		int ch, cw;

		bfs_engine_cached_shape(m->eng, &ch, &cw);
		bfs_json_open(&j, "cached_shape", '[');
		bfs_json_u64(&j, NULL, (uint64_t)ch);
		bfs_json_u64(&j, NULL, (uint64_t)cw);
		bfs_json_u64(&j, NULL, 3);
		bfs_json_close(&j, ']');
	}
	if (eo->augment_flip || eo->augment_crop)
		bfs_json_str(&j, "augment_rule",
			     "drawn from (seed, epoch, sample index) alone: flip = horizontal with "
			     "probability 1/2; crop = the HxW window at (y0, x0), y0 and x0 uniform "
			     "integers on [0, cached_h - H] and [0, cached_w - W], independent; "
			     "without crop the window is centered (rounded down)");
	if (eo->normalize) {
		bfs_json_open(&j, "mean", '[');
		for (int c = 0; c < 3; c++)
			bfs_json_f64(&j, NULL, eo->mean[c]);
		bfs_json_close(&j, ']');
		bfs_json_open(&j, "std", '[');
		for (int c = 0; c < 3; c++)
			bfs_json_f64(&j, NULL, eo->std[c]);
		bfs_json_close(&j, ']');
	}
	bfs_json_str(&j, "label_dtype", "int64");
	bfs_json_i64(&j, "label_offset", eo->label_offset);
	bfs_json_str(&j, "normalization",
		     eo->dtype == BFS_DTYPE_UINT8
			     ? "round-half-even(resized)"
			     : "resized / 255");
	bfs_json_str(&j, "decode",
		     "TurboJPEG, IFAST DCT, fancy upsampling (tf.io.decode_jpeg defaults); grayscale to RGB; CMYK/YCCK to RGB with TensorFlow's formula");
	bfs_json_str(&j, "resize",
		     "bilinear, half-pixel centers, no antialias (tf.image.resize defaults)");
	bfs_json_str(&j, "order", "shards sorted by name, records in file order");
	if (eo->shuffle) {
		bfs_json_str(&j, "shuffle", "stateless permutation per (seed, epoch)");
		bfs_json_u64(&j, "seed", eo->seed);
	} else {
		bfs_json_bool(&j, "shuffle", 0);
	}
	bfs_json_u64(&j, "rank", eo->rank);
	bfs_json_u64(&j, "world", eo->world ? eo->world : 1);
	bfs_json_str(&j, "image_key",
		     m->o->source.image_key ? m->o->source.image_key : "image/encoded");
	bfs_json_str(&j, "label_key",
		     m->o->source.label_key ? m->o->source.label_key : "image/class/label");
	bfs_json_open(&j, "classes", '[');
	for (size_t i = 0; i < bfs_source_nclasses(m->src); i++)
		bfs_json_str(&j, NULL, bfs_source_class_name(m->src, i));
	bfs_json_close(&j, ']');
	bfs_json_str(&j, "on_error",
		     eo->on_error == BFS_ON_ERROR_SKIP ? "skip" : "fail");
	bfs_json_u64(&j, "max_pixels", eo->max_pixels);
	bfs_json_u64(&j, "threads", eo->threads);
	if (eo->prefetch)
		bfs_json_u64(&j, "prefetch", eo->prefetch);
	else
		bfs_json_str(&j, "prefetch", "auto");
	bfs_json_u64(&j, "mem_bytes", eo->mem_bytes);
	bfs_json_u64(&j, "slots", eo->slots);
	if (m->cache) {
		bfs_cache_stats cs;

		bfs_cache_get_stats(m->cache, &cs);
		bfs_json_str(&j, "cache", bfs_cache_dir(m->cache));
		bfs_json_u64(&j, "cache_size", cs.map_bytes);
		bfs_json_str(&j, "cache_fingerprint", m->cache_fp);
	} else {
		bfs_json_str(&j, "cache", "none");
	}
	bfs_json_str(&j, "fingerprint", m->fingerprint);
	bfs_json_open(&j, "files", '{');
	bfs_json_str(&j, "images", "epoch-NNNN/batch-NNNNNN.npy");
	bfs_json_str(&j, "labels", "epoch-NNNN/batch-NNNNNN.labels.npy");
	bfs_json_str(&j, "provenance", "epoch-NNNN/batch-NNNNNN.index.json");
	bfs_json_str(&j, "preview", "epoch-NNNN/batch-NNNNNN.preview.jpg");
	bfs_json_close(&j, '}');
	bfs_json_close(&j, '}');
	return bfs_json_take(&j, &m->dataset_json, &m->dataset_len);
}

/* ---- provenance and preview ------------------------------------------ */

/* Start batch id for reader (it may not have opened the batch file) and
 * wait for it; bfs_engine_get's contract. */
static int wait_batch(struct mnt *m, uint64_t reader, uint64_t id,
		      bfs_batch **b, char *msg)
{
	bfs_engine_hint(m->eng, reader, id);
	return bfs_engine_get(m->eng, reader, id, b, msg);
}

/* batch-NNNNNN.index.json: for each position, where the sample came from,
 * its label and the augmentation drawn.  Waits for the batch (for the
 * labels); a failed batch still lists its samples, with the error. */
static int build_index(struct mnt *m, uint64_t reader, const bfs_node *n,
		       struct text_file *tf)
{
	const bfs_engine_opts *eo = bfs_engine_options(m->eng);
	uint64_t id = batch_id(m, n);
	unsigned count = bfs_engine_batch_count(m->eng, id);
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_batch *b = NULL;
	bfs_json j;
	int err;

	err = wait_batch(m, reader, id, &b, msg);
	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	bfs_json_u64(&j, "epoch", n->epoch);
	bfs_json_u64(&j, "batch", n->batch);
	bfs_json_u64(&j, "count", count);
	if (err)
		bfs_json_str(&j, "error", msg[0] ? msg : bfs_strerror(err));
	bfs_json_open(&j, "samples", '[');
	for (unsigned k = 0; k < count; k++) {
		uint64_t i = bfs_engine_sample_index(m->eng, id, k), rec = 0;
		const char *shard = bfs_source_sample_shard(m->src, i, &rec);
		const char *member = bfs_source_member_name(m->src, i);
		int flip, x0, y0;

		bfs_json_open(&j, NULL, '{');
		bfs_json_u64(&j, "position", k);
		bfs_json_u64(&j, "sample", i);
		bfs_json_str(&j, "shard", shard);
		switch (bfs_source_format(m->src)) {
		case BFS_FORMAT_TFRECORD:
			bfs_json_u64(&j, "record", rec);
			break;
		case BFS_FORMAT_TAR:
			bfs_json_str(&j, "member", member);
			break;
		default:
			break;
		}
		if (b)
			bfs_json_i64(&j, "label", bfs_batch_labels(b)[k]);
		else
			bfs_json_null(&j, "label");
		if ((eo->augment_flip || eo->augment_crop) &&
		    bfs_engine_sample_aug(m->eng, id, k, &flip, &x0, &y0) == 0) {
			bfs_json_open(&j, "augment", '{');
			bfs_json_bool(&j, "flip", flip);
			bfs_json_open(&j, "crop", '[');
			bfs_json_u64(&j, NULL, (uint64_t)y0);
			bfs_json_u64(&j, NULL, (uint64_t)x0);
			bfs_json_u64(&j, NULL, (uint64_t)eo->height);
			bfs_json_u64(&j, NULL, (uint64_t)eo->width);
			bfs_json_close(&j, ']');
			bfs_json_close(&j, '}');
		}
		bfs_json_close(&j, '}');
	}
	bfs_json_close(&j, ']');
	bfs_json_close(&j, '}');
	if (b)
		bfs_engine_put(m->eng, b);
	return bfs_json_take(&j, &tf->buf, &tf->len);
}

/* batch-NNNNNN.preview.jpg: the batch as the model sees it, normalization
 * undone for display, with each tile's label (class name for folders). */
static int build_preview(struct mnt *m, uint64_t reader, const bfs_node *n,
			 struct text_file *tf)
{
	const bfs_engine_opts *eo = bfs_engine_options(m->eng);
	uint64_t id = batch_id(m, n);
	char msg[BFS_ERRMSG_MAX] = "";
	const char **names = NULL;
	size_t ncls = bfs_source_nclasses(m->src);
	bfs_preview_opts po = { 0 };
	unsigned char *jpeg = NULL;
	unsigned long len = 0;
	bfs_batch *b;
	int err;

	err = wait_batch(m, reader, id, &b, msg);
	if (err)
		return -EIO;
	if (ncls && (names = calloc(ncls + 1, sizeof(*names)))) {
		for (size_t c = 0; c < ncls; c++)
			names[c] = bfs_source_class_name(m->src, c);
	}
	po.h = eo->height;
	po.w = eo->width;
	po.dtype = eo->dtype;
	po.nchw = eo->nchw;
	po.normalized = eo->normalize;
	memcpy(po.mean, eo->mean, sizeof(po.mean));
	memcpy(po.std, eo->std, sizeof(po.std));
	err = bfs_preview_render(&po, bfs_batch_images(b), bfs_batch_labels(b),
				 names, bfs_batch_count(b), &jpeg, &len, msg);
	bfs_engine_put(m->eng, b);
	free(names);
	if (err) {
		char esc[2 * BFS_ERRMSG_MAX];

		bfs_log(BFS_LOG_WARN, "preview of epoch %u batch %llu: %s",
			n->epoch, (unsigned long long)n->batch,
			bfs_log_escape(msg, esc, sizeof(esc)));
		return err == -ENOMEM ? -ENOMEM : -EIO;
	}
	/* copy into malloc'd memory: text_file buffers are released with free() */
	tf->buf = malloc(len ? len : 1);
	if (!tf->buf) {
		tjFree(jpeg);
		return -ENOMEM;
	}
	memcpy(tf->buf, jpeg, len);
	tf->len = len;
	tjFree(jpeg);
	return 0;
}

/* Find or build the index.json / preview.jpg of node n.  Lock held. */
static struct made *made_get_locked(struct mnt *m, uint64_t reader,
				    const bfs_node *n, int *err)
{
	uint64_t id = batch_id(m, n);
	struct made *slot = &m->made[0];
	struct text_file tf = { 0 };

	for (size_t i = 0; i < sizeof(m->made) / sizeof(m->made[0]); i++) {
		struct made *e = &m->made[i];

		if (e->buf && e->kind == n->kind && e->id == id) {
			e->used = ++m->made_tick;
			return e;
		}
		if (!e->buf || e->used < slot->used)
			slot = e;
	}
	*err = n->kind == BFS_NODE_INDEX ? build_index(m, reader, n, &tf)
					 : build_preview(m, reader, n, &tf);
	if (*err)
		return NULL;
	free(slot->buf);
	slot->kind = n->kind;
	slot->id = id;
	slot->buf = tf.buf;
	slot->len = tf.len;
	slot->used = ++m->made_tick;
	return slot;
}

static int made_len(struct mnt *m, uint64_t reader, const bfs_node *n,
		    size_t *len)
{
	struct made *e;
	int err = 0;

	pthread_mutex_lock(&m->made_lock);
	if ((e = made_get_locked(m, reader, n, &err)))
		*len = e->len;
	pthread_mutex_unlock(&m->made_lock);
	return err;
}

static int made_copy(struct mnt *m, uint64_t reader, const bfs_node *n,
		     struct text_file *tf)
{
	struct made *e;
	int err = 0;

	pthread_mutex_lock(&m->made_lock);
	if ((e = made_get_locked(m, reader, n, &err))) {
		if ((tf->buf = malloc(e->len ? e->len : 1))) {
			memcpy(tf->buf, e->buf, e->len);
			tf->len = e->len;
		} else {
			err = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&m->made_lock);
	return err;
}

/* ---- attributes ------------------------------------------------------- */

/* Everything but stats.json is immutable for the mount's life, so the
 * kernel may keep names, misses and attributes for an hour. */
#define CACHE_TIMEOUT 3600.0

static struct mnt *req_mnt(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The reader a request comes from: the engine keeps one read-ahead per
 * process. */
static uint64_t req_reader(fuse_req_t req)
{
	return (uint64_t)fuse_req_ctx(req)->pid;
}

static double attr_timeout(const bfs_node *n)
{
	return n->kind == BFS_NODE_STATS_JSON ? 0.0 : CACHE_TIMEOUT;
}

/* Fill *st for node n.  index.json and preview.jpg need their batch to
 * know their size, so they wait for it (as `reader`); readdir does not
 * list them, so `ls -l` never does. */
static int node_attr(struct mnt *m, uint64_t reader, const bfs_node *n,
		     struct stat *st)
{
	char hdr[256];
	size_t data_len, len = 0;
	int err;

	memset(st, 0, sizeof(*st));
	st->st_ino = bfs_ns_ino(&m->shape, n);
	st->st_atim = st->st_mtim = st->st_ctim = m->mounted;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_nlink = 1;
	st->st_mode = S_IFREG | 0444;
	switch (n->kind) {
	case BFS_NODE_ROOT:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + m->shape.epochs;
		break;
	case BFS_NODE_EPOCH:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		break;
	case BFS_NODE_DATASET_JSON:
		st->st_size = (off_t)m->dataset_len;
		break;
	case BFS_NODE_STATS_JSON: {
		struct text_file tf;

		clock_gettime(CLOCK_REALTIME, &st->st_mtim);
		if (build_stats(m, &tf) == 0) {
			st->st_size = (off_t)tf.len;
			free(tf.buf);
		}
		break;
	}
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		st->st_size = (off_t)(file_header(m, n, hdr, sizeof(hdr),
						  &data_len) + data_len);
		break;
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW:
		if ((err = made_len(m, reader, n, &len)))
			return err;
		st->st_size = (off_t)len;
		break;
	}
	st->st_blksize = 1 << 20;
	st->st_blocks = (st->st_size + 511) / 512;
	return 0;
}

/* ---- FUSE operations (low-level API) ---------------------------------- */

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	/* The kernel still caps requests at the bdi's read_ahead_kb (see
	 * raise_readahead). */
	conn->max_readahead = 1u << 20;
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mnt *m = req_mnt(req);
	struct fuse_entry_param ep;
	bfs_node dir, n;
	int err = bfs_ns_from_ino(&m->shape, parent, &dir);

	memset(&ep, 0, sizeof(ep));
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	err = bfs_ns_child(&m->shape, &dir, name, &n);
	if (err == -ENOENT) {
		/* a miss is as permanent as a hit: let the kernel cache it */
		ep.entry_timeout = CACHE_TIMEOUT;
		fuse_reply_entry(req, &ep);
		return;
	}
	if (!err)
		err = node_attr(m, req_reader(req), &n, &ep.attr);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	ep.ino = ep.attr.st_ino;
	ep.attr_timeout = attr_timeout(&n);
	ep.entry_timeout = CACHE_TIMEOUT;
	fuse_reply_entry(req, &ep);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct mnt *m = req_mnt(req);
	struct stat st;
	bfs_node n;
	int err = bfs_ns_from_ino(&m->shape, ino, &n);

	if (!err)
		err = node_attr(m, req_reader(req), &n, &st);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, attr_timeout(&n));
}

/* Entry k of directory dir, in listing order: ".", "..", then the root's
 * two JSON files and its epochs, or an epoch's .npy and .labels.npy per
 * batch (.index.json and .preview.jpg exist but are not listed: their
 * size needs the batch decoded).  0, or -ENOENT past the end. */
static int dir_entry(const struct mnt *m, const bfs_node *dir, uint64_t k,
		     bfs_node *child, const char **fixed)
{
	*fixed = NULL;
	*child = *dir;
	if (k < 2) {
		*fixed = k == 0 ? "." : "..";
		if (k == 1)
			child->kind = BFS_NODE_ROOT;
		return 0;
	}
	k -= 2;
	if (dir->kind == BFS_NODE_ROOT) {
		if (k < 2) {
			child->kind = k == 0 ? BFS_NODE_DATASET_JSON
					     : BFS_NODE_STATS_JSON;
			return 0;
		}
		if (k - 2 >= m->shape.epochs)
			return -ENOENT;
		child->kind = BFS_NODE_EPOCH;
		child->epoch = (uint32_t)(k - 2);
		return 0;
	}
	if (k / 2 >= m->shape.batches)
		return -ENOENT;
	child->kind = k % 2 ? BFS_NODE_LABELS : BFS_NODE_BATCH;
	child->batch = k / 2;
	return 0;
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, struct fuse_file_info *fi)
{
	struct mnt *m = req_mnt(req);
	bfs_node dir, c;
	size_t used = 0;
	char *buf;
	int err = bfs_ns_from_ino(&m->shape, ino, &dir);

	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	if (dir.kind != BFS_NODE_ROOT && dir.kind != BFS_NODE_EPOCH) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (!(buf = malloc(size ? size : 1))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t k = (uint64_t)(off > 0 ? off : 0);; k++) {
		const char *fixed;
		char name[64];
		struct stat st;
		size_t need;

		if (dir_entry(m, &dir, k, &c, &fixed))
			break;
		if (!fixed && bfs_ns_name(&m->shape, &c, name, sizeof(name)) < 0)
			break;
		memset(&st, 0, sizeof(st));
		st.st_ino = bfs_ns_ino(&m->shape, &c);
		st.st_mode = c.kind == BFS_NODE_ROOT || c.kind == BFS_NODE_EPOCH
				     ? S_IFDIR : S_IFREG;
		need = fuse_add_direntry(req, buf + used, size - used,
					 fixed ? fixed : name, &st,
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
	struct mnt *m = req_mnt(req);
	bfs_node n;
	int err = bfs_ns_from_ino(&m->shape, ino, &n);

	if (err)
		fuse_reply_err(req, -err);
	else if (n.kind != BFS_NODE_ROOT && n.kind != BFS_NODE_EPOCH)
		fuse_reply_err(req, ENOTDIR);
	else
		fuse_reply_open(req, fi);
}

/* Open a batch file with passthrough (fs/passthrough.h): the first open
 * of its inode waits until the batch is whole, then hands the kernel the
 * engine's slot file, which holds exactly the file's bytes.  A batch that
 * failed, or sits in plain memory, is served the ordinary way, and its
 * reads fail or succeed as they always do.  The caller starts read-ahead
 * after this replies. */
static void open_backed(fuse_req_t req, struct mnt *m, fuse_ino_t ino,
			const bfs_node *n, struct fuse_file_info *fi)
{
	char msg[BFS_ERRMSG_MAX];
	bfs_pt_mode mode;
	bfs_batch *b = NULL;
	size_t len;
	int backing, fd = -1, err;

	if (!bfs_pt_begin(m->pt, ino, &mode, &backing)) {
		if (bfs_pt_active(m->pt) &&
		    bfs_engine_get_flags(m->eng, req_reader(req), batch_id(m, n),
					 BFS_GET_NO_READAHEAD, &b, msg) == 0)
			fd = bfs_batch_file(b, &len);
		mode = bfs_pt_decide(m->pt, ino, fd, &backing);
		if (mode == BFS_PT_BACKED)
			bfs_engine_expose(m->eng, b); /* before it is unpinned */
		bfs_engine_put(m->eng, b);
	}
	if (mode == BFS_PT_BACKED) {
		err = bfs_pt_reply_open(req, backing);
	} else {
		fi->keep_cache = 1;
		err = fuse_reply_open(req, fi);
	}
	if (err == -ENOENT) /* the opener was interrupted: no release */
		bfs_pt_release(m->pt, ino);
}

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mnt *m = req_mnt(req);
	struct text_file *tf = NULL;
	uint64_t reader = 0;
	bfs_node n;
	int err = bfs_ns_from_ino(&m->shape, ino, &n), hint = 0;

	if (err)
		goto fail;
	err = -EROFS;
	if ((fi->flags & O_ACCMODE) != O_RDONLY ||
	    (fi->flags & (O_TRUNC | O_CREAT)))
		goto fail;
	fi->fh = 0;
	switch (n.kind) {
	case BFS_NODE_ROOT:
	case BFS_NODE_EPOCH:
		err = -EISDIR;
		goto fail;
	case BFS_NODE_DATASET_JSON:
		fi->keep_cache = 1;
		break;
	case BFS_NODE_STATS_JSON:
		err = -ENOMEM;
		if (!(tf = calloc(1, sizeof(*tf))) ||
		    (err = build_stats(m, tf)))
			goto fail;
		fi->direct_io = 1; /* fresh at every open */
		break;
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		/* Read-ahead starts after the reply (see BFS_GET_NO_READAHEAD);
		 * the reader is read from req before the reply frees it. */
		reader = req_reader(req);
		if (n.kind == BFS_NODE_BATCH && bfs_pt_negotiated(m->pt)) {
			open_backed(req, m, ino, &n, fi);
			bfs_engine_hint(m->eng, reader, batch_id(m, &n));
			return;
		}
		/* The bytes never change, so the kernel keeps its cache (and
		 * what push_batch put there). */
		fi->keep_cache = 1;
		hint = 1;
		break;
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW:
		err = -ENOMEM;
		if (!(tf = calloc(1, sizeof(*tf))) ||
		    (err = made_copy(m, req_reader(req), &n, tf)))
			goto fail;
		fi->keep_cache = 1;
		break;
	}
	fi->fh = tf ? text_add(m, tf) : 0; /* dropped in ll_release */
	if (fuse_reply_open(req, fi) == -ENOENT && tf)
		text_drop(m, fi->fh); /* the opener was interrupted: no release */
	if (hint)
		bfs_engine_hint(m->eng, reader, batch_id(m, &n));
	return;
fail:
	free(tf);
	fuse_reply_err(req, -err);
}

/* Bytes a read of size at off gets from a buffer of len bytes. */
static size_t slice_len(size_t len, size_t size, off_t off)
{
	if (off < 0 || (uint64_t)off >= len)
		return 0;
	return size < len - (size_t)off ? size : len - (size_t)off;
}

static uint64_t text_add(struct mnt *m, struct text_file *tf)
{
	pthread_mutex_lock(&m->texts_lock);
	tf->id = ++m->next_text;
	tf->next = m->texts;
	m->texts = tf;
	pthread_mutex_unlock(&m->texts_lock);
	return tf->id;
}

static void text_drop(struct mnt *m, uint64_t id)
{
	struct text_file **p, *tf = NULL;

	pthread_mutex_lock(&m->texts_lock);
	for (p = &m->texts; *p; p = &(*p)->next)
		if ((*p)->id == id) {
			tf = *p;
			*p = tf->next;
			break;
		}
	pthread_mutex_unlock(&m->texts_lock);
	if (tf) {
		free(tf->buf);
		free(tf);
	}
}

/* Reply with bytes [off, off + size) of snapshot id (copied out under the
 * lock), or EBADF when it is gone. */
static void reply_text(fuse_req_t req, struct mnt *m, uint64_t id, size_t size,
		       off_t off)
{
	struct text_file *tf;
	char *copy = NULL;
	size_t n = 0;
	int err = EBADF;

	pthread_mutex_lock(&m->texts_lock);
	for (tf = m->texts; tf && tf->id != id; tf = tf->next)
		;
	if (tf) {
		err = 0;
		if ((n = slice_len(tf->len, size, off))) {
			if ((copy = malloc(n)))
				memcpy(copy, tf->buf + off, n);
			else
				err = ENOMEM;
		}
	}
	pthread_mutex_unlock(&m->texts_lock);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, copy, n);
	free(copy);
}

/* Reply with bytes [off, off + size) of a buffer of len bytes. */
static void reply_slice(fuse_req_t req, const void *src, size_t len,
			size_t size, off_t off)
{
	size_t n = slice_len(len, size, off);

	fuse_reply_buf(req, n ? (const char *)src + off : NULL, n);
}

/* Reply to a read of a batch or label file.  The reply is gathered
 * (header, then the pinned batch's memory) and written by the kernel
 * straight from there: no copy in user space. */
static void read_batch(fuse_req_t req, struct mnt *m, const bfs_node *n,
		       size_t size, off_t off)
{
	char hdr[256], msg[BFS_ERRMSG_MAX] = "";
	size_t data_len, hlen = file_header(m, n, hdr, sizeof(hdr), &data_len);
	uint64_t pos = (uint64_t)off, id = batch_id(m, n);
	struct iovec iov[2];
	int count = 0, err;
	bfs_batch *b = NULL;

	if (off < 0 || pos >= hlen + data_len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > hlen + data_len - pos)
		size = hlen + data_len - pos;
	if (pos < hlen) {
		iov[count].iov_base = hdr + pos;
		iov[count].iov_len = size < hlen - pos ? size : hlen - pos;
		pos += iov[count].iov_len;
		size -= iov[count].iov_len;
		count++;
	}
	if (size) {
		err = bfs_engine_get(m->eng, req_reader(req), id, &b, msg);
		if (err) {
			static uint64_t last_logged = UINT64_MAX; /* atomic */
			char esc[2 * BFS_ERRMSG_MAX];

			/* The kernel retries a failed page read; say it once. */
			if (__atomic_exchange_n(&last_logged, id,
						__ATOMIC_RELAXED) != id)
				bfs_log(BFS_LOG_WARN,
					"read of epoch %u batch %llu fails with EIO: %s",
					n->epoch, (unsigned long long)n->batch,
					bfs_log_escape(msg[0] ? msg : bfs_strerror(err),
						       esc, sizeof(esc)));
			fuse_reply_err(req, EIO);
			return;
		}
		iov[count].iov_base = (char *)(n->kind == BFS_NODE_LABELS
			? (const void *)bfs_batch_labels(b)
			: bfs_batch_images(b)) + (pos - hlen);
		iov[count].iov_len = size;
		count++;
	}
	fuse_reply_iov(req, iov, count);
	bfs_engine_put(m->eng, b);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct mnt *m = req_mnt(req);
	bfs_node n;
	int err = bfs_ns_from_ino(&m->shape, ino, &n);

	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	switch (n.kind) {
	case BFS_NODE_DATASET_JSON:
		reply_slice(req, m->dataset_json, m->dataset_len, size, off);
		break;
	case BFS_NODE_STATS_JSON:
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW:
		reply_text(req, m, fi->fh, size, off);
		break;
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		read_batch(req, m, &n, size, off);
		break;
	default:
		fuse_reply_err(req, EISDIR);
	}
}

static void ll_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct mnt *m = req_mnt(req);
	bfs_node n;

	if (fi->fh)
		text_drop(m, fi->fh);
	if (m->pt && bfs_ns_from_ino(&m->shape, ino, &n) == 0 &&
	    n.kind == BFS_NODE_BATCH)
		bfs_pt_release(m->pt, ino);
	fuse_reply_err(req, 0);
}

static int xattr_value(struct mnt *m, const bfs_node *n, const char *name,
		       char *val, size_t cap)
{
	const bfs_engine_opts *eo = bfs_engine_options(m->eng);
	unsigned count;
	int len;

	if (n->kind != BFS_NODE_BATCH && n->kind != BFS_NODE_LABELS)
		return -ENODATA;
	count = bfs_engine_batch_count(m->eng, batch_id(m, n));
	if (strcmp(name, "user.batchfs.shape") == 0) {
		if (n->kind == BFS_NODE_LABELS)
			len = snprintf(val, cap, "(%u,)", count);
		else if (eo->nchw)
			len = snprintf(val, cap, "(%u, 3, %d, %d)", count,
				       eo->height, eo->width);
		else
			len = snprintf(val, cap, "(%u, %d, %d, 3)", count,
				       eo->height, eo->width);
	} else if (strcmp(name, "user.batchfs.dtype") == 0) {
		len = snprintf(val, cap, "%s",
			       n->kind == BFS_NODE_LABELS
				       ? "int64" : bfs_dtype_name(eo->dtype));
	} else {
		return -ENODATA;
	}
	return len;
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
	struct mnt *m = req_mnt(req);
	char val[128];
	bfs_node n;
	int err = bfs_ns_from_ino(&m->shape, ino, &n);

	reply_xattr(req, val, err ? err : xattr_value(m, &n, name, val,
						       sizeof(val)), size);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const char names[] = "user.batchfs.shape\0user.batchfs.dtype";
	struct mnt *m = req_mnt(req);
	bfs_node n;
	int err = bfs_ns_from_ino(&m->shape, ino, &n);

	if (err)
		reply_xattr(req, NULL, err, size);
	else if (n.kind == BFS_NODE_BATCH || n.kind == BFS_NODE_LABELS)
		reply_xattr(req, names, (int)sizeof(names), size);
	else
		reply_xattr(req, names, 0, size);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct mnt *m = req_mnt(req);
	struct statvfs sv;

	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_files = 2 + m->shape.epochs * (1 + 2 * m->shape.batches);
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct mnt *m = req_mnt(req);
	bfs_node n;
	int err = bfs_ns_from_ino(&m->shape, ino, &n);

	fuse_reply_err(req, err ? -err : (mask & W_OK) ? EROFS : 0);
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

/* ---- pushing batches into the page cache ------------------------------ */

/* Push one batch or label file (node n, `data` the bytes after its NPY
 * header) whole into the page cache.  0, or -errno. */
/* Make the kernel look up node n (so that it knows the inode, and a
 * reader's open of the name needs no LOOKUP): a stat() through the mount,
 * answered by a loop thread. */
static int look_up(struct mnt *m, const bfs_node *n)
{
	bfs_node ep = { .kind = BFS_NODE_EPOCH, .epoch = n->epoch };
	char path[PATH_MAX + 64], name[64], ename[64];
	struct stat st;

	if (bfs_ns_name(&m->shape, &ep, ename, sizeof(ename)) < 0 ||
	    bfs_ns_name(&m->shape, n, name, sizeof(name)) < 0)
		return -ENAMETOOLONG;
	snprintf(path, sizeof(path), "%s/%s/%s", m->root, ename, name);
	if (stat(path, &st) != 0)
		return -errno;
	if ((uint64_t)st.st_ino != bfs_ns_ino(&m->shape, n))
		return -ESTALE; /* something else is mounted there now */
	return 0;
}

static int push_file(struct mnt *m, const bfs_node *n, const void *data)
{
	char hdr[256];
	unsigned char page[4096];
	size_t data_len, hlen = file_header(m, n, hdr, sizeof(hdr), &data_len);
	size_t total = hlen + data_len;
	size_t first = total < sizeof(page) ? total : sizeof(page);
	uint64_t ino = bfs_ns_ino(&m->shape, n);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(first);
	int err;

	memcpy(page, hdr, hlen);
	memcpy(page + hlen, data, first - hlen);
	bv.buf[0].mem = page;
	err = fuse_lowlevel_notify_store(m->se, ino, 0, &bv, 0);
	if (err == -ENOENT) {
		if ((err = look_up(m, n)))
			return err;
		err = fuse_lowlevel_notify_store(m->se, ino, 0, &bv, 0);
	}
	if (err || total == first)
		return err;
	bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(total - first);
	bv.buf[0].mem = (void *)((const char *)data + (first - hlen));
	return fuse_lowlevel_notify_store(m->se, ino, (off_t)first, &bv, 0);
}

/* on_batch_ready: copy a finished read-ahead batch's two files into the
 * kernel's page cache (FUSE_NOTIFY_STORE), from the worker that finished
 * it, while its reader is still busy with the batch before.  The reader's
 * read() (or mmap) then costs one copy out of the page cache instead of
 * ~20 FUSE round trips, each waiting for a loop thread and copying into
 * the page cache anyway (docs/BENCHMARKS.md, "FUSE serving").  The engine
 * calls it only when the pool is otherwise idle, so the copy costs no
 * decoding.  Returns 1 when the images file is all there; 0 leaves the
 * batch to the read path.
 *
 * The kernel only takes pages for an inode it knows: one looked up and not
 * forgotten since.  A reader that did not list the folder has not looked
 * up its next batch yet, so the daemon looks it up itself with a stat()
 * through its own mount (answered by a loop thread; free once the name is
 * cached).  Page 0 is pushed whole (header + the first bytes), since the
 * kernel marks a page valid only when one push fills it. */
static int push_batch(void *ctx, uint64_t id, const bfs_batch *b)
{
	struct mnt *m = ctx;
	bfs_node n = { .kind = BFS_NODE_BATCH };
	int handed = 0;

	/* counted before the check, so that wait_pushes() sees it */
	__atomic_add_fetch(&m->pushing, 1, __ATOMIC_ACQ_REL);
	if (!__atomic_load_n(&m->push_live, __ATOMIC_ACQUIRE))
		goto out;
	n.epoch = (uint32_t)(id / m->shape.batches);
	n.batch = id % m->shape.batches;
	if (bfs_pt_active(m->pt)) {
		/* The kernel reads the slot file itself; what is left for the
		 * reader's wake-ups is the two names' lookups and the labels'
		 * read: done here, its open of each file is one round trip. */
		look_up(m, &n);
		n.kind = BFS_NODE_LABELS;
		push_file(m, &n, bfs_batch_labels(b));
		goto out;
	}
	if (push_file(m, &n, bfs_batch_images(b)))
		goto out;
	n.kind = BFS_NODE_LABELS;
	push_file(m, &n, bfs_batch_labels(b)); /* else read as usual */
	__atomic_add_fetch(&m->pushed_bytes, (uint64_t)bfs_batch_count(b) *
			   bfs_engine_sample_bytes(m->eng), __ATOMIC_RELAXED);
	handed = 1;
out:
	__atomic_sub_fetch(&m->pushing, 1, __ATOMIC_ACQ_REL);
	return handed;
}

/* ---- shutdown -------------------------------------------------------- */

/* A push can wait on the session loop: for its own lookup, or for a page
 * that a pending read holds locked.  So SIGTERM, SIGINT and SIGHUP do not
 * stop the loop at once (as fuse_set_signal_handlers would, dropping the
 * requests its threads hold): the handler only wakes a watcher thread,
 * which stops new pushes, waits while the loop still answers until the
 * pushes in flight are done, and only then ends the loop. */
static int stop_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (write(stop_pipe[1], &c, 1) < 0) {
		/* the pipe is full: a stop is already on its way */
	}
	errno = saved;
}

static void on_wake_signal(int sig)
{
	/* only interrupts the loop's sem_wait, so it sees the exit flag */
}

/* Stop new pushes and wait (at most ~10 s) for those in flight. */
static void wait_pushes(struct mnt *m)
{
	__atomic_store_n(&m->push_live, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 10000 &&
			__atomic_load_n(&m->pushing, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	if (__atomic_load_n(&m->pushing, __ATOMIC_ACQUIRE))
		bfs_log(BFS_LOG_WARN, "a page-cache push is still running at exit");
}

struct watcher {
	struct mnt *m;
	pthread_t main;
};

static void *watcher_main(void *arg)
{
	struct watcher *w = arg;
	char c;

	while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	wait_pushes(w->m);
	fuse_session_exit(w->m->se);
	pthread_kill(w->main, SIGUSR1);
	return NULL;
}

/* Install the stop handlers and start the watcher.  0 or -errno. */
static int start_watcher(struct watcher *w, pthread_t *tid)
{
	struct sigaction sa;
	int err;

	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	fcntl(stop_pipe[0], F_SETFL, 0); /* the watcher blocks on it */
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_stop_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = on_wake_signal;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	if ((err = pthread_create(tid, NULL, watcher_main, w)))
		return -err;
	return 0;
}

/* Stop the watcher if it did not fire (the mount was unmounted). */
static void stop_watcher(pthread_t tid)
{
	char c = 0;
	struct sigaction sa;

	if (write(stop_pipe[1], &c, 1) < 0) {
		/* full: it has fired already */
	}
	pthread_join(tid, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	close(stop_pipe[0]);
	close(stop_pipe[1]);
	stop_pipe[0] = stop_pipe[1] = -1;
}

/* ---- stats.json ------------------------------------------------------- */

static int build_stats(struct mnt *m, struct text_file *tf)
{
	enum { SHOW = 256 };
	bfs_sample_error *errs = calloc(SHOW, sizeof(*errs));
	bfs_engine_stats st;
	size_t nerr, shown, nscan = bfs_source_nscan_errors(m->src);
	bfs_json j;

	if (!errs)
		return -ENOMEM;
	bfs_engine_get_stats(m->eng, &st);
	nerr = bfs_engine_errors(m->eng, errs, SHOW);
	shown = nerr < SHOW ? nerr : SHOW;

	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	bfs_json_u64(&j, "batches_served", st.batches_served);
	bfs_json_u64(&j, "batches_produced", st.batches_produced);
	bfs_json_u64(&j, "batches_pushed", st.batches_pushed);
	bfs_json_u64(&j, "bytes_pushed",
		     __atomic_load_n(&m->pushed_bytes, __ATOMIC_RELAXED));
	bfs_json_bool(&j, "passthrough", bfs_pt_active(m->pt));
	bfs_json_u64(&j, "passthrough_opens", bfs_pt_opens(m->pt));
	bfs_json_u64(&j, "slot_files_replaced", st.slot_files_replaced);
	bfs_json_u64(&j, "slot_file_errors", st.slot_file_errors);
	bfs_json_u64(&j, "samples_decoded", st.samples_decoded);
	bfs_json_u64(&j, "bytes_read", st.bytes_read);
	bfs_json_u64(&j, "threads", st.threads);
	bfs_json_f64(&j, "samples_per_second", st.samples_per_s);
	bfs_json_f64(&j, "worker_idle_share", st.worker_idle);
	{
		unsigned depth = 0;

		for (unsigned r = 0; r < st.nreaders; r++)
			if (st.readers[r].depth > depth)
				depth = st.readers[r].depth;
		bfs_json_u64(&j, "prefetch_depth", st.prefetch ? st.prefetch : depth);
	}
	bfs_json_str(&j, "prefetch_mode", st.prefetch ? "fixed" : "auto");
	bfs_json_u64(&j, "memory_bytes", st.mem_bytes);
	bfs_json_u64(&j, "memory_budget", st.mem_budget);
	bfs_json_open(&j, "memory", '{');
	bfs_json_u64(&j, "batch_slots", st.mem_slots);
	bfs_json_u64(&j, "decoder_scratch", st.mem_scratch);
	bfs_json_close(&j, '}');
	bfs_json_open(&j, "slots", '{');
	bfs_json_u64(&j, "total", st.slots);
	bfs_json_u64(&j, "ready", st.slots_ready);
	bfs_json_u64(&j, "filling", st.slots_filling);
	bfs_json_close(&j, '}');
	bfs_json_u64(&j, "reader_waits", st.reader_waits);
	bfs_json_f64(&j, "reader_wait_seconds", (double)st.reader_wait_ns / 1e9);
	if (m->cache) {
		bfs_cache_stats cs;

		bfs_cache_get_stats(m->cache, &cs);
		bfs_json_open(&j, "cache", '{');
		bfs_json_str(&j, "dir", bfs_cache_dir(m->cache));
		bfs_json_u64(&j, "hits", cs.hits);
		bfs_json_u64(&j, "misses", cs.misses);
		bfs_json_f64(&j, "hit_rate", cs.hits + cs.misses
			     ? (double)cs.hits / (double)(cs.hits + cs.misses) : 0);
		bfs_json_u64(&j, "inserts", cs.inserts);
		bfs_json_u64(&j, "evictions", cs.evictions);
		bfs_json_u64(&j, "dropped_queue", cs.dropped_queue);
		bfs_json_u64(&j, "dropped_full", cs.dropped_full);
		bfs_json_u64(&j, "crc_errors", cs.crc_errors);
		bfs_json_u64(&j, "write_errors", cs.write_errors);
		bfs_json_u64(&j, "entries", cs.entries);
		bfs_json_u64(&j, "bytes_used", cs.bytes_used);
		bfs_json_u64(&j, "file_bytes", cs.file_bytes);
		bfs_json_u64(&j, "size_limit", cs.map_bytes);
		bfs_json_bool(&j, "full", cs.full);
		bfs_json_u64(&j, "index_hits", cs.index_hits);
		bfs_json_u64(&j, "index_misses", cs.index_misses);
		bfs_json_close(&j, '}');
	} else {
		bfs_json_null(&j, "cache");
	}
	bfs_json_open(&j, "readers", '[');
	for (unsigned r = 0; r < st.nreaders; r++) {
		const bfs_reader_stats *rs = &st.readers[r];

		bfs_json_open(&j, NULL, '{');
		bfs_json_u64(&j, "pid", rs->reader);
		bfs_json_u64(&j, "depth", rs->depth);
		bfs_json_f64(&j, "batches_per_second", rs->batches_per_s);
		bfs_json_u64(&j, "batches", rs->batches);
		bfs_json_u64(&j, "waits", rs->waits);
		bfs_json_f64(&j, "wait_seconds", rs->wait_s);
		bfs_json_close(&j, '}');
	}
	bfs_json_close(&j, ']');
	bfs_json_u64(&j, "errors_total", nerr + nscan);
	bfs_json_open(&j, "bad_shards", '[');
	for (size_t i = 0; i < nscan; i++)
		bfs_json_str(&j, NULL, bfs_source_scan_error_shard(m->src, i));
	for (size_t i = 0; i < shown; i++) {
		int seen = 0;

		for (size_t k = 0; k < i && !seen; k++)
			seen = strcmp(errs[k].shard, errs[i].shard) == 0;
		for (size_t k = 0; k < nscan && !seen; k++)
			seen = strcmp(bfs_source_scan_error_shard(m->src, k),
				      errs[i].shard) == 0;
		if (!seen)
			bfs_json_str(&j, NULL, errs[i].shard);
	}
	bfs_json_close(&j, ']');
	bfs_json_open(&j, "errors", '[');
	for (size_t i = 0; i < nscan; i++) {
		bfs_json_open(&j, NULL, '{');
		bfs_json_str(&j, "kind", "index");
		bfs_json_str(&j, "shard", bfs_source_scan_error_shard(m->src, i));
		bfs_json_str(&j, "message", bfs_source_scan_error(m->src, i));
		bfs_json_close(&j, '}');
	}
	for (size_t i = 0; i < shown; i++) {
		bfs_json_open(&j, NULL, '{');
		bfs_json_str(&j, "kind", "sample");
		bfs_json_str(&j, "shard", errs[i].shard);
		bfs_json_u64(&j, "record", errs[i].record);
		bfs_json_u64(&j, "sample", errs[i].sample);
		bfs_json_str(&j, "error", bfs_strerror(errs[i].code));
		bfs_json_str(&j, "message", errs[i].msg);
		if (errs[i].replaced)
			bfs_json_u64(&j, "replaced_by", errs[i].replacement);
		bfs_json_close(&j, '}');
	}
	bfs_json_close(&j, ']');
	bfs_json_close(&j, '}');
	free(errs);
	return bfs_json_take(&j, &tf->buf, &tf->len);
}

/* ---- lifecycle -------------------------------------------------------- */

static void on_sample_error(void *ctx, const bfs_sample_error *e)
{
	char shard[256], msg[2 * BFS_ERRMSG_MAX];

	bfs_log_escape(e->shard, shard, sizeof(shard));
	bfs_log_escape(e->msg, msg, sizeof(msg));
	if (e->replaced)
		bfs_log(BFS_LOG_WARN,
			"bad sample %llu (%s record %llu): %s; replaced by sample %llu",
			(unsigned long long)e->sample, shard,
			(unsigned long long)e->record, msg,
			(unsigned long long)e->replacement);
	else
		bfs_log(BFS_LOG_WARN, "bad sample %llu (%s record %llu): %s",
			(unsigned long long)e->sample, shard,
			(unsigned long long)e->record, msg);
}

static int index_get(void *ctx, const char *dir, const char *shard,
		     const bfs_shard_stamp *st, void **blob, size_t *len)
{
	return bfs_cache_index_get(ctx, dir, shard, st, blob, len);
}

static int index_put(void *ctx, const char *dir, const char *shard,
		     const bfs_shard_stamp *st, const void *blob, size_t len)
{
	return bfs_cache_index_put(ctx, dir, shard, st, blob, len);
}

/* Open the sample cache for this mount's settings.  A cache that cannot
 * be opened is not fatal: the mount decodes everything and says why. */
static void open_cache(struct mnt *m, char *why, size_t cap)
{
	const bfs_mount_opts *o = m->o;
	char efp[17], settings[1024], errmsg[BFS_ERRMSG_MAX] = "";
	bfs_cache_opts co = { 0 };
	int err;

	if (o->cache && strcmp(o->cache, "none") == 0)
		return;
	bfs_engine_fingerprint(&o->engine, efp);
	snprintf(settings, sizeof(settings), "image_key=%s;label_key=%s",
		 o->source.image_key ? o->source.image_key : "image/encoded",
		 o->source.label_key ? o->source.label_key : "image/class/label");
	bfs_cache_fingerprint(m->cache_fp, efp, settings);
	co.dir = o->cache;
	co.max_bytes = o->cache_size;
	co.fingerprint = m->cache_fp;
	err = bfs_cache_open(&co, &m->cache, errmsg);
	if (err) {
		m->cache = NULL;
		snprintf(why, cap, "cache disabled: %s",
			 errmsg[0] ? errmsg : bfs_strerror(err));
	} else if (bfs_cache_notice(m->cache)) {
		snprintf(why, cap, "%s", bfs_cache_notice(m->cache));
	}
}

/* Undo the octal escapes of /proc/self/mountinfo ("\040" for a space). */
static void unescape_mountinfo(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] &&
		    s[3]) {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* Find path's entry in /proc/self/mountinfo (never touching the mount
 * itself, which may not be serving yet).  1 if found, with its device
 * number "MAJ:MIN" copied to devno (cap bytes) when devno is not NULL. */
static int find_mount(const char *path, char *devno, size_t cap)
{
	char real[PATH_MAX], line[4 * PATH_MAX];
	FILE *f;
	int found = 0;

	if (!realpath(path, real))
		return 0;
	if (!(f = fopen("/proc/self/mountinfo", "re")))
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *save = NULL, *dev = NULL, *tok = strtok_r(line, " ", &save);

		for (int field = 1; tok && field < 5; field++) {
			tok = strtok_r(NULL, " ", &save);
			if (field == 2)
				dev = tok;
		}
		if (!tok || !dev)
			continue;
		unescape_mountinfo(tok);
		if ((found = strcmp(tok, real) == 0) && devno)
			snprintf(devno, cap, "%s", dev);
	}
	fclose(f);
	return found;
}

int bfs_is_mountpoint(const char *path)
{
	return find_mount(path, NULL, 0);
}

/* The kernel sends reads of at most read_ahead_kb of the mount's bdi
 * (128 KiB by default, whatever conn->max_readahead asks), so a 19 MB
 * batch costs ~150 requests.  As root, raise it to 1 MiB: measured 15%
 * less CPU per GB served.  Failure (not root) only costs speed. */
static void raise_readahead(const char *mountpoint)
{
	char devno[64], path[128];
	FILE *ra;

	if (!find_mount(mountpoint, devno, sizeof(devno)))
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", devno);
	if ((ra = fopen(path, "we"))) {
		fputs("1024", ra);
		fclose(ra);
	}
}

static FILE *open_log(const bfs_mount_opts *o, char *path, size_t cap)
{
	const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	char dir[PATH_MAX];
	FILE *f;

	if (o->log_path) {
		snprintf(path, cap, "%s", o->log_path);
	} else {
		if (state && state[0])
			snprintf(dir, sizeof(dir), "%s/batchfs", state);
		else
			snprintf(dir, sizeof(dir), "%s/.local/state/batchfs",
				 home && home[0] ? home : "/tmp");
		/* mkdir -p of the last two levels is enough for the default */
		char parent[PATH_MAX];
		snprintf(parent, sizeof(parent), "%s", dir);
		char *slash = strrchr(parent, '/');
		if (slash) {
			*slash = '\0';
			mkdir(parent, 0755);
		}
		mkdir(dir, 0755);
		snprintf(path, cap, "%s/batchfs.log", dir);
	}
	f = fopen(path, "ae");
	if (f)
		setvbuf(f, NULL, _IOLBF, 0);
	return f;
}

/* Tell the waiting parent how the start went: "0message" or "1message". */
static void notify(int fd, int ok, const char *msg)
{
	char buf[2048];
	int n;

	if (fd < 0) {
		fprintf(ok ? stdout : stderr, "%s\n", msg);
		fflush(NULL);
		return;
	}
	n = snprintf(buf, sizeof(buf), "%c%s", ok ? '0' : '1', msg);
	if (n > 0 && write(fd, buf, (size_t)n < sizeof(buf) ? (size_t)n
							    : sizeof(buf) - 1) < 0)
		return;
}

/* The mount itself; runs in the daemon (or in the foreground).  Reports to
 * notify_fd (-1 in the foreground) and returns the exit status. */
/* Where the engine's slot files go for passthrough (--slot-dir, default
 * /dev/shm), or NULL with *why saying why not: this process must be able
 * to register backing files (CAP_SYS_ADMIN), and dir must be a tmpfs (a
 * disk file system would write the batches back to disk) with room for
 * the memory budget that grants write leases (how the engine tells that
 * readers let go of a file). */
static const char *slot_dir_for(const char *dir, const bfs_engine_opts *eo,
				char *why, size_t cap)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct caps[2] = { { 0 } };
	uint64_t budget = eo->mem_bytes ? eo->mem_bytes
					: bfs_engine_default_mem();
	struct statfs sf;
	int fd, leased;

	if (syscall(SYS_capget, &hdr, caps) != 0 ||
	    !(caps[0].effective & (1u << CAP_SYS_ADMIN))) {
		snprintf(why, cap, "needs CAP_SYS_ADMIN");
		return NULL;
	}
	if (statfs(dir, &sf) != 0) {
		snprintf(why, cap, "%s: %s", dir, strerror(errno));
		return NULL;
	}
	if (sf.f_type != TMPFS_MAGIC) {
		snprintf(why, cap, "%s is not a tmpfs", dir);
		return NULL;
	}
	if ((uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize < budget) {
		snprintf(why, cap,
			 "%s has %llu MiB free, less than --mem %llu MiB; see --slot-dir",
			 dir, (unsigned long long)((uint64_t)sf.f_bavail *
						   (uint64_t)sf.f_bsize >> 20),
			 (unsigned long long)(budget >> 20));
		return NULL;
	}
	if ((fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) < 0) {
		snprintf(why, cap, "%s: %s", dir, strerror(errno));
		return NULL;
	}
	leased = fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
	close(fd);
	if (!leased) {
		snprintf(why, cap, "%s grants no file leases", dir);
		return NULL;
	}
	return dir;
}

static int serve(const bfs_mount_opts *o, int notify_fd)
{
	struct mnt m = { .o = o };
	struct fuse_session *se = NULL;
	struct fuse_loop_config *loop = NULL;
	struct watcher watch;
	pthread_t watcher;
	int watching = 0;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	char msg[BFS_ERRMSG_MAX + PATH_MAX] = "", errmsg[BFS_ERRMSG_MAX] = "";
	char optstr[1024], logpath[PATH_MAX] = "";
	FILE *logf = NULL;
	bfs_engine_opts eo = o->engine;
	bfs_source_opts so = o->source;
	char cache_why[BFS_ERRMSG_MAX + 32] = "", cache_why_pt[256] = "";
	int err, status = 1, mounted = 0;

	clock_gettime(CLOCK_REALTIME, &m.mounted);
	/* The engine holds a file lease for an instant (slot files); a lease
	 * break would raise SIGIO, whose default action ends the process. */
	signal(SIGIO, SIG_IGN);
	pthread_mutex_init(&m.made_lock, NULL);
	pthread_mutex_init(&m.texts_lock, NULL);
	open_cache(&m, cache_why, sizeof(cache_why));
	if (m.cache) {
		so.index_get = index_get;
		so.index_put = index_put;
		so.index_ctx = m.cache;
	}
	if ((err = bfs_source_open(&so, &m.src, errmsg))) {
		snprintf(msg, sizeof(msg), "batchfs: cannot index %s: %s",
			 o->shard_dir, errmsg[0] ? errmsg : bfs_strerror(err));
		notify(notify_fd, 0, msg);
		goto out;
	}
	if (!o->no_passthrough) {
		/* absolute: the daemon works from / once it is detached */
		const char *dir = o->slot_dir ? o->slot_dir : "/dev/shm";

		if (!realpath(dir, m.slot_dir))
			snprintf(cache_why_pt, sizeof(cache_why_pt), "%s: %s",
				 dir, strerror(errno));
		else
			eo.slot_dir = slot_dir_for(m.slot_dir, &eo, cache_why_pt,
						   sizeof(cache_why_pt));
	}
	eo.on_sample_error = on_sample_error;
	if (!o->no_push && realpath(o->mountpoint, m.root))
		eo.on_batch_ready = push_batch;
	eo.ctx = &m;
	eo.cache = m.cache;
	memcpy(eo.cache_fp, m.cache_fp, sizeof(eo.cache_fp));
	if ((err = bfs_engine_create(m.src, &eo, &m.eng, errmsg))) {
		snprintf(msg, sizeof(msg), "batchfs: %s",
			 errmsg[0] ? errmsg : bfs_strerror(err));
		notify(notify_fd, 0, msg);
		goto out;
	}
	bfs_engine_fingerprint(bfs_engine_options(m.eng), m.fingerprint);
	m.shape.epochs = bfs_engine_epochs(m.eng);
	m.shape.batches = bfs_engine_batches_per_epoch(m.eng);
	if (build_dataset_json(&m)) {
		notify(notify_fd, 0, "batchfs: out of memory");
		goto out;
	}

	snprintf(optstr, sizeof(optstr),
		 "ro,fsname=batchfs,subtype=batchfs,default_permissions%s%s%s",
		 o->allow_other ? ",allow_other" : "",
		 o->fuse_opts ? "," : "", o->fuse_opts ? o->fuse_opts : "");
	if (fuse_opt_add_arg(&args, "batchfs") ||
	    fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, optstr) ||
	    (o->debug && fuse_opt_add_arg(&args, "-d"))) {
		notify(notify_fd, 0, "batchfs: out of memory");
		goto out;
	}
	se = fuse_session_new(&args, &ops, sizeof(ops), &m);
	if (!se) {
		snprintf(msg, sizeof(msg),
			 "batchfs: bad FUSE options '%s' (see above)", optstr);
		notify(notify_fd, 0, msg);
		goto out;
	}
	if (fuse_session_mount(se, o->mountpoint) != 0) {
		snprintf(msg, sizeof(msg),
			 "batchfs: cannot mount on %s (is /dev/fuse usable, and fusermount3 installed?)",
			 o->mountpoint);
		notify(notify_fd, 0, msg);
		goto out;
	}
	mounted = 1;
	m.se = se;
	if (eo.slot_dir && bfs_pt_attach(se, 1, &m.pt) != 0)
		snprintf(cache_why_pt, sizeof(cache_why_pt),
			 "libfuse refused custom I/O");
	raise_readahead(o->mountpoint);
	watch.m = &m;
	watch.main = pthread_self();
	if (start_watcher(&watch, &watcher) != 0) {
		notify(notify_fd, 0, "batchfs: cannot install signal handlers");
		goto out;
	}
	watching = 1;

	if (notify_fd >= 0) {
		logf = open_log(o, logpath, sizeof(logpath));
		bfs_log_init(logf ? logf : fopen("/dev/null", "we"),
			     BFS_LOG_INFO);
	}
	snprintf(msg, sizeof(msg),
		 "batchfs: mounted %s on %s: %llu samples, %llu batches of %u, %s %dx%d, cache %s%s%s%s, passthrough %s%s%s%s%s%s%s",
		 bfs_source_dir(m.src), o->mountpoint,
		 (unsigned long long)bfs_source_count(m.src),
		 (unsigned long long)m.shape.batches, eo.batch ? eo.batch : 32,
		 bfs_dtype_name(eo.dtype), bfs_engine_options(m.eng)->height,
		 bfs_engine_options(m.eng)->width,
		 m.cache ? bfs_cache_dir(m.cache) : "none",
		 cache_why[0] ? " (" : "", cache_why, cache_why[0] ? ")" : "",
		 m.pt ? "where the kernel offers it" : "off",
		 cache_why_pt[0] ? " (" : "", cache_why_pt,
		 cache_why_pt[0] ? ")" : "",
		 logpath[0] ? "; log: " : "", logpath,
		 bfs_source_nscan_errors(m.src) ? "; index errors: see stats.json" : "");
	if (notify_fd >= 0)
		bfs_log(BFS_LOG_INFO, "%s", msg + strlen("batchfs: "));
	for (size_t i = 0; i < bfs_source_nscan_errors(m.src); i++) {
		char a[256], b[512];

		bfs_log(BFS_LOG_WARN, "shard %s: %s",
			bfs_log_escape(bfs_source_scan_error_shard(m.src, i), a, sizeof(a)),
			bfs_log_escape(bfs_source_scan_error(m.src, i), b, sizeof(b)));
	}
	notify(notify_fd, 1, msg);
	if (notify_fd >= 0) {
		int null = open("/dev/null", O_RDWR);

		close(notify_fd);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
			if (null > 2)
				close(null);
		}
		if (chdir("/") != 0)
			bfs_log(BFS_LOG_WARN, "chdir /: %s", strerror(errno));
	}

	loop = fuse_loop_cfg_create();
	if (loop) {
		fuse_loop_cfg_set_clone_fd(loop, 0);
		fuse_loop_cfg_set_max_threads(loop, 16); /* 1 MiB buffer each */
	}
	__atomic_store_n(&m.push_live, 1, __ATOMIC_RELEASE);
	err = fuse_session_loop_mt(se, loop);
	status = err == 0 ? 0 : 1;
	wait_pushes(&m); /* after an unmount: none can be waiting any more */
	bfs_log(BFS_LOG_INFO, "unmounting %s", o->mountpoint);
out:
	if (watching)
		stop_watcher(watcher);
	if (loop)
		fuse_loop_cfg_destroy(loop);
	if (se && mounted)
		fuse_session_unmount(se);
	/* before the session: no worker may push into a freed session */
	bfs_engine_destroy(m.eng);   /* flushes what it gave the cache */
	if (se)
		fuse_session_destroy(se);
	bfs_pt_destroy(m.pt);
	fuse_opt_free_args(&args);
	bfs_source_close(m.src);
	bfs_cache_close(m.cache);
	for (size_t i = 0; i < sizeof(m.made) / sizeof(m.made[0]); i++)
		free(m.made[i].buf);
	pthread_mutex_destroy(&m.made_lock);
	while (m.texts)
		text_drop(&m, m.texts->id);
	pthread_mutex_destroy(&m.texts_lock);
	free(m.dataset_json);
	if (logf)
		fclose(logf);
	return status;
}

int bfs_mount_main(const bfs_mount_opts *o)
{
	struct stat st;
	int pfd[2];
	pid_t pid;
	char buf[4096];
	size_t got = 0;

	if (stat(o->shard_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "batchfs: %s: %s\n", o->shard_dir,
			errno && !S_ISDIR(st.st_mode) && stat(o->shard_dir, &st) != 0
				? strerror(errno) : "not a directory");
		return 1;
	}
	if (access(o->shard_dir, R_OK | X_OK) != 0) {
		fprintf(stderr, "batchfs: %s: %s\n", o->shard_dir,
			strerror(errno));
		return 1;
	}
	if (stat(o->mountpoint, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "batchfs: mount point %s: %s\n", o->mountpoint,
			stat(o->mountpoint, &st) != 0 ? strerror(errno)
						      : "not a directory");
		return 1;
	}
	if (bfs_is_mountpoint(o->mountpoint)) {
		fprintf(stderr,
			"batchfs: mount point %s is busy: something is already mounted there (batchfs unmount %s)\n",
			o->mountpoint, o->mountpoint);
		return 1;
	}
	if (o->foreground || o->debug)
		return serve(o, -1);

	if (pipe2(pfd, O_CLOEXEC) != 0) {
		perror("batchfs: pipe");
		return 1;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		perror("batchfs: fork");
		return 1;
	}
	if (pid == 0) {
		close(pfd[0]);
		setsid();
		signal(SIGPIPE, SIG_IGN);
		_exit(serve(o, pfd[1]));
	}
	close(pfd[1]);
	for (;;) {
		ssize_t r = read(pfd[0], buf + got, sizeof(buf) - 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof(buf) - 1)
			break;
	}
	close(pfd[0]);
	buf[got] = '\0';
	if (got == 0) {
		int wst = 0;

		waitpid(pid, &wst, 0);
		fprintf(stderr, "batchfs: the daemon exited during start-up (%s %d)\n",
			WIFSIGNALED(wst) ? "signal" : "status",
			WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
		return 1;
	}
	if (buf[0] == '0') {
		printf("%s\n", buf + 1);
		return 0;
	}
	waitpid(pid, NULL, 0);
	fprintf(stderr, "%s\n", buf + 1);
	return 1;
}

int bfs_unmount_main(const char *mountpoint)
{
	pid_t pid;
	int wst = 0;

	if (!bfs_is_mountpoint(mountpoint)) {
		fprintf(stderr, "batchfs: %s is not mounted\n", mountpoint);
		return 1;
	}
	if (geteuid() == 0) {
		/* EBUSY for an instant is possible while the daemon looks up a
		 * batch it is about to push (push_file); a mount someone holds
		 * open stays busy and fails after the retries. */
		int err = 0;

		for (int i = 0; i < 20; i++) {
			if (umount2(mountpoint, 0) == 0)
				goto wait;
			if ((err = errno) != EBUSY)
				break;
			usleep(50 * 1000);
		}
		if (err != EPERM) {
			fprintf(stderr, "batchfs: unmount %s: %s\n", mountpoint,
				strerror(err));
			return 1;
		}
	}
	pid = fork();
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", mountpoint,
		       (char *)NULL);
		perror("batchfs: fusermount3");
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &wst, 0) < 0 || !WIFEXITED(wst) ||
	    WEXITSTATUS(wst) != 0) {
		fprintf(stderr, "batchfs: unmount %s failed\n", mountpoint);
		return 1;
	}
wait:
	for (int i = 0; i < 100 && bfs_is_mountpoint(mountpoint); i++)
		usleep(50 * 1000);
	return 0;
}
