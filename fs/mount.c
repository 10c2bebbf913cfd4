/*
 * mount.c - the FUSE adapter and the mount's life (see mount.h).
 *
 * DESIGN
 * FUSE runs a multithreaded session loop; each request thread calls into
 * the engine, which may block a read until its batch is produced.  Other
 * requests (stat, readdir, stats.json, other batches) keep being served by
 * other loop threads meanwhile.
 *
 * Buffers: dataset.json is built once at mount and owned by struct mnt.
 * stats.json is built at open and owned by that open file (fi->fh) until
 * release.  Batch files own nothing: every read pins the batch in the
 * engine (bfs_engine_get), copies out of it and unpins it
 * (bfs_engine_put) before replying, so an open file never holds memory.
 */
#define FUSE_USE_VERSION 312
#include "fs/mount.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
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
};

/* What fi->fh points to for JSON files: a snapshot made at open. */
struct text_file {
	char *buf;
	size_t len;
};

static struct mnt *ctx_mnt(void)
{
	return fuse_get_context()->private_data;
}

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
	const bfs_engine_opts *eo = bfs_engine_options(m->eng);
	unsigned count = bfs_engine_batch_count(m->eng, batch_id(m, n));
	uint64_t shape[4] = { count, (uint64_t)eo->height,
			      (uint64_t)eo->width, 3 };

	if (eo->nchw) {
		shape[1] = 3;
		shape[2] = (uint64_t)eo->height;
		shape[3] = (uint64_t)eo->width;
	}
	int len;

	if (n->kind == BFS_NODE_LABELS) {
		len = bfs_npy_header(hdr, cap, "<i8", shape, 1);
		*data_len = (size_t)count * sizeof(int64_t);
	} else {
		len = bfs_npy_header(hdr, cap, bfs_dtype_descr(eo->dtype),
				     shape, 4);
		*data_len = (size_t)count * bfs_engine_sample_bytes(m->eng);
	}
	return len > 0 ? (size_t)len : 0;
}

static int build_stats(struct mnt *m, struct text_file *tf);
static int build_index(struct mnt *m, const bfs_node *n, struct text_file *tf);
static int build_preview(struct mnt *m, const bfs_node *n,
			 struct text_file *tf);
static int made_len(struct mnt *m, const bfs_node *n, size_t *len);
static int made_copy(struct mnt *m, const bfs_node *n, struct text_file *tf);

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

/* Start batch id for the calling reader (it may not have opened the batch
 * file) and wait for it; bfs_engine_get's contract. */
static int wait_batch(struct mnt *m, uint64_t id, bfs_batch **b, char *msg)
{
	uint64_t reader = (uint64_t)fuse_get_context()->pid;

	bfs_engine_hint(m->eng, reader, id);
	return bfs_engine_get(m->eng, reader, id, b, msg);
}

/* batch-NNNNNN.index.json: for each position, where the sample came from,
 * its label and the augmentation drawn.  Waits for the batch (for the
 * labels); a failed batch still lists its samples, with the error. */
static int build_index(struct mnt *m, const bfs_node *n, struct text_file *tf)
{
	const bfs_engine_opts *eo = bfs_engine_options(m->eng);
	uint64_t id = batch_id(m, n);
	unsigned count = bfs_engine_batch_count(m->eng, id);
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_batch *b = NULL;
	bfs_json j;
	int err;

	err = wait_batch(m, id, &b, msg);
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
static int build_preview(struct mnt *m, const bfs_node *n, struct text_file *tf)
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

	err = wait_batch(m, id, &b, msg);
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
static struct made *made_get_locked(struct mnt *m, const bfs_node *n,
				    int *err)
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
	*err = n->kind == BFS_NODE_INDEX ? build_index(m, n, &tf)
					 : build_preview(m, n, &tf);
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

static int made_len(struct mnt *m, const bfs_node *n, size_t *len)
{
	struct made *e;
	int err = 0;

	pthread_mutex_lock(&m->made_lock);
	if ((e = made_get_locked(m, n, &err)))
		*len = e->len;
	pthread_mutex_unlock(&m->made_lock);
	return err;
}

static int made_copy(struct mnt *m, const bfs_node *n, struct text_file *tf)
{
	struct made *e;
	int err = 0;

	pthread_mutex_lock(&m->made_lock);
	if ((e = made_get_locked(m, n, &err))) {
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

/* ---- FUSE operations -------------------------------------------------- */

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	/* Everything but stats.json is immutable for the mount's life. */
	cfg->entry_timeout = 3600;
	cfg->attr_timeout = 3600;
	cfg->negative_timeout = 3600;
	conn->max_readahead = 1u << 20;
	return fuse_get_context()->private_data;
}

static void fill_times(const struct mnt *m, struct stat *st)
{
	st->st_atim = st->st_mtim = st->st_ctim = m->mounted;
	st->st_uid = getuid();
	st->st_gid = getgid();
}

static int op_getattr(const char *path, struct stat *st,
		      struct fuse_file_info *fi)
{
	struct mnt *m = ctx_mnt();
	bfs_node n;
	char hdr[256];
	size_t data_len;
	int err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	memset(st, 0, sizeof(*st));
	fill_times(m, st);
	switch (n.kind) {
	case BFS_NODE_ROOT:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + m->shape.epochs;
		break;
	case BFS_NODE_EPOCH:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		break;
	case BFS_NODE_DATASET_JSON:
		st->st_mode = S_IFREG | 0444;
		st->st_size = (off_t)m->dataset_len;
		break;
	case BFS_NODE_STATS_JSON: {
		struct text_file tf;

		st->st_mode = S_IFREG | 0444;
		clock_gettime(CLOCK_REALTIME, &st->st_mtim);
		if (build_stats(m, &tf) == 0) {
			st->st_size = (off_t)tf.len;
			free(tf.buf);
		}
		break;
	}
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		st->st_mode = S_IFREG | 0444;
		st->st_size = (off_t)(file_header(m, &n, hdr, sizeof(hdr),
						  &data_len) + data_len);
		break;
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW: {
		/* Their size depends on the produced batch, so stat waits for
		 * it; readdir does not list them, so `ls -l` never does. */
		size_t len = 0;
		int err = made_len(m, &n, &len);

		if (err)
			return err;
		st->st_mode = S_IFREG | 0444;
		st->st_size = (off_t)len;
		break;
	}
	}
	st->st_nlink = st->st_nlink ? st->st_nlink : 1;
	st->st_blksize = 1 << 20;
	st->st_blocks = (st->st_size + 511) / 512;
	return 0;
}

static int op_readdir(const char *path, void *buf, fuse_fill_dir_t filler,
		      off_t off, struct fuse_file_info *fi,
		      enum fuse_readdir_flags flags)
{
	struct mnt *m = ctx_mnt();
	char name[64];
	bfs_node n, c;
	int err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	if (n.kind != BFS_NODE_ROOT && n.kind != BFS_NODE_EPOCH)
		return -ENOTDIR;
	filler(buf, ".", NULL, 0, 0);
	filler(buf, "..", NULL, 0, 0);
	if (n.kind == BFS_NODE_ROOT) {
		filler(buf, "dataset.json", NULL, 0, 0);
		filler(buf, "stats.json", NULL, 0, 0);
		c.kind = BFS_NODE_EPOCH;
		for (uint32_t e = 0; e < m->shape.epochs; e++) {
			c.epoch = e;
			if (bfs_ns_name(&m->shape, &c, name, sizeof(name)) > 0 &&
			    filler(buf, name, NULL, 0, 0))
				break;
		}
		return 0;
	}
	c.epoch = n.epoch;
	for (uint64_t b = 0; b < m->shape.batches; b++) {
		c.batch = b;
		c.kind = BFS_NODE_BATCH;
		if (bfs_ns_name(&m->shape, &c, name, sizeof(name)) > 0 &&
		    filler(buf, name, NULL, 0, 0))
			break;
		c.kind = BFS_NODE_LABELS;
		if (bfs_ns_name(&m->shape, &c, name, sizeof(name)) > 0 &&
		    filler(buf, name, NULL, 0, 0))
			break;
		/* .index.json and .preview.jpg exist but are not listed:
		 * their size needs the batch decoded (see op_getattr) */
	}
	return 0;
}

static int op_open(const char *path, struct fuse_file_info *fi)
{
	struct mnt *m = ctx_mnt();
	bfs_node n;
	int err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	if ((fi->flags & O_ACCMODE) != O_RDONLY ||
	    (fi->flags & (O_TRUNC | O_CREAT)))
		return -EROFS;
	switch (n.kind) {
	case BFS_NODE_ROOT:
	case BFS_NODE_EPOCH:
		return -EISDIR;
	case BFS_NODE_DATASET_JSON:
		fi->keep_cache = 1;
		fi->fh = 0;
		return 0;
	case BFS_NODE_STATS_JSON: {
		struct text_file *tf = malloc(sizeof(*tf));

		if (!tf)
			return -ENOMEM;
		if ((err = build_stats(m, tf))) {
			free(tf);
			return err;
		}
		fi->fh = (uint64_t)(uintptr_t)tf; /* freed in op_release */
		fi->direct_io = 1;                 /* fresh at every open */
		return 0;
	}
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		/* The bytes never change, so the kernel may keep its cache. */
		fi->keep_cache = 1;
		fi->fh = 0;
		bfs_engine_hint(m->eng, (uint64_t)fuse_get_context()->pid,
				batch_id(m, &n));
		return 0;
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW: {
		struct text_file *tf = calloc(1, sizeof(*tf));

		if (!tf)
			return -ENOMEM;
		if ((err = made_copy(m, &n, tf))) {
			free(tf);
			return err;
		}
		fi->fh = (uint64_t)(uintptr_t)tf; /* freed in op_release */
		fi->keep_cache = 1;               /* the bytes never change */
		return 0;
	}
	}
	return -ENOENT;
}

static int copy_out(char *dst, size_t size, off_t off, const void *src,
		    size_t len)
{
	if ((uint64_t)off >= len)
		return 0;
	if (size > len - (size_t)off)
		size = len - (size_t)off;
	memcpy(dst, (const char *)src + off, size);
	return (int)size;
}

static int read_batch(struct mnt *m, const bfs_node *n, char *buf,
		      size_t size, off_t off)
{
	char hdr[256], msg[BFS_ERRMSG_MAX] = "";
	size_t data_len, hlen = file_header(m, n, hdr, sizeof(hdr), &data_len);
	size_t done = 0;
	bfs_batch *b;
	int err;

	if ((uint64_t)off >= hlen + data_len)
		return 0;
	if (size > hlen + data_len - (size_t)off)
		size = hlen + data_len - (size_t)off;
	if ((size_t)off < hlen) {
		done = (size_t)copy_out(buf, size, off, hdr, hlen);
		if (done == size)
			return (int)done;
	}
	err = bfs_engine_get(m->eng, (uint64_t)fuse_get_context()->pid,
			     batch_id(m, n), &b, msg);
	if (err) {
		static uint64_t last_logged = UINT64_MAX; /* atomic */
		uint64_t id = batch_id(m, n);
		char esc[2 * BFS_ERRMSG_MAX];

		/* The kernel retries a failed page read; say it once. */
		if (__atomic_exchange_n(&last_logged, id, __ATOMIC_RELAXED) != id)
			bfs_log(BFS_LOG_WARN, "read of epoch %u batch %llu fails with EIO: %s",
			n->epoch, (unsigned long long)n->batch,
			bfs_log_escape(msg[0] ? msg : bfs_strerror(err), esc,
				       sizeof(esc)));
		return -EIO;
	}
	off += (off_t)done;
	if (n->kind == BFS_NODE_LABELS)
		done += (size_t)copy_out(buf + done, size - done,
					 off - (off_t)hlen, bfs_batch_labels(b),
					 data_len);
	else
		done += (size_t)copy_out(buf + done, size - done,
					 off - (off_t)hlen, bfs_batch_images(b),
					 data_len);
	bfs_engine_put(m->eng, b);
	return (int)done;
}

static int op_read(const char *path, char *buf, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	struct mnt *m = ctx_mnt();
	bfs_node n;
	int err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	if (off < 0)
		return -EINVAL;
	switch (n.kind) {
	case BFS_NODE_DATASET_JSON:
		return copy_out(buf, size, off, m->dataset_json, m->dataset_len);
	case BFS_NODE_STATS_JSON:
	case BFS_NODE_INDEX:
	case BFS_NODE_PREVIEW: {
		struct text_file *tf = (struct text_file *)(uintptr_t)fi->fh;

		return tf ? copy_out(buf, size, off, tf->buf, tf->len) : -EIO;
	}
	case BFS_NODE_BATCH:
	case BFS_NODE_LABELS:
		return read_batch(m, &n, buf, size, off);
	default:
		return -EISDIR;
	}
}

static int op_release(const char *path, struct fuse_file_info *fi)
{
	struct text_file *tf = (struct text_file *)(uintptr_t)fi->fh;

	if (tf) {
		free(tf->buf);
		free(tf);
	}
	return 0;
}

static int op_opendir(const char *path, struct fuse_file_info *fi)
{
	struct mnt *m = ctx_mnt();
	bfs_node n;
	int err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	return n.kind == BFS_NODE_ROOT || n.kind == BFS_NODE_EPOCH ? 0
								   : -ENOTDIR;
}

static int xattr_value(struct mnt *m, const bfs_node *n, const char *name,
		       char *val, size_t cap)
{
	const bfs_engine_opts *eo = bfs_engine_options(m->eng);
	unsigned count = bfs_engine_batch_count(m->eng, batch_id(m, n));
	int len;

	if (n->kind != BFS_NODE_BATCH && n->kind != BFS_NODE_LABELS)
		return -ENODATA;
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

static int op_getxattr(const char *path, const char *name, char *value,
		       size_t size)
{
	struct mnt *m = ctx_mnt();
	char val[128];
	bfs_node n;
	int len, err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	len = xattr_value(m, &n, name, val, sizeof(val));
	if (len < 0)
		return len;
	if (size == 0)
		return len;
	if ((size_t)len > size)
		return -ERANGE;
	memcpy(value, val, (size_t)len);
	return len;
}

static int op_listxattr(const char *path, char *list, size_t size)
{
	static const char names[] = "user.batchfs.shape\0user.batchfs.dtype";
	struct mnt *m = ctx_mnt();
	bfs_node n;
	int err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	if (n.kind != BFS_NODE_BATCH && n.kind != BFS_NODE_LABELS)
		return 0;
	if (size == 0)
		return sizeof(names);
	if (size < sizeof(names))
		return -ERANGE;
	memcpy(list, names, sizeof(names));
	return sizeof(names);
}

static int op_statfs(const char *path, struct statvfs *sv)
{
	struct mnt *m = ctx_mnt();

	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = sv->f_frsize = 4096;
	sv->f_files = 2 + m->shape.epochs * (1 + 2 * m->shape.batches);
	sv->f_namemax = 255;
	sv->f_flag = ST_RDONLY;
	return 0;
}

static int op_access(const char *path, int mask)
{
	struct mnt *m = ctx_mnt();
	bfs_node n;
	int err = bfs_ns_parse(&m->shape, path, &n);

	if (err)
		return err;
	return (mask & W_OK) ? -EROFS : 0;
}

/* Everything that would change the tree: the mount is read-only. */
static int op_rofs_create(const char *p, mode_t m, struct fuse_file_info *f) { return -EROFS; }
static int op_rofs_mknod(const char *p, mode_t m, dev_t d) { return -EROFS; }
static int op_rofs_path(const char *p) { return -EROFS; }
static int op_rofs_mkdir(const char *p, mode_t m) { return -EROFS; }
static int op_rofs_rename(const char *a, const char *b, unsigned int f) { return -EROFS; }
static int op_rofs_link(const char *a, const char *b) { return -EROFS; }
static int op_rofs_chmod(const char *p, mode_t m, struct fuse_file_info *f) { return -EROFS; }
static int op_rofs_chown(const char *p, uid_t u, gid_t g, struct fuse_file_info *f) { return -EROFS; }
static int op_rofs_truncate(const char *p, off_t o, struct fuse_file_info *f) { return -EROFS; }
static int op_rofs_write(const char *p, const char *b, size_t s, off_t o, struct fuse_file_info *f) { return -EROFS; }
static int op_rofs_setxattr(const char *p, const char *n, const char *v, size_t s, int f) { return -EROFS; }
static int op_rofs_removexattr(const char *p, const char *n) { return -EROFS; }
static int op_rofs_utimens(const char *p, const struct timespec tv[2], struct fuse_file_info *f) { return -EROFS; }

static const struct fuse_operations ops = {
	.init = op_init,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.opendir = op_opendir,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.statfs = op_statfs,
	.access = op_access,
	.create = op_rofs_create,
	.mknod = op_rofs_mknod,
	.unlink = op_rofs_path,
	.rmdir = op_rofs_path,
	.mkdir = op_rofs_mkdir,
	.rename = op_rofs_rename,
	.link = op_rofs_link,
	.symlink = op_rofs_link,
	.chmod = op_rofs_chmod,
	.chown = op_rofs_chown,
	.truncate = op_rofs_truncate,
	.write = op_rofs_write,
	.setxattr = op_rofs_setxattr,
	.removexattr = op_rofs_removexattr,
	.utimens = op_rofs_utimens,
};

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
		     uint64_t size, int64_t mtime_ns, void **blob, size_t *len)
{
	return bfs_cache_index_get(ctx, dir, shard, size, mtime_ns, blob, len);
}

static int index_put(void *ctx, const char *dir, const char *shard,
		     uint64_t size, int64_t mtime_ns, const void *blob,
		     size_t len)
{
	return bfs_cache_index_put(ctx, dir, shard, size, mtime_ns, blob, len);
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
static int serve(const bfs_mount_opts *o, int notify_fd)
{
	struct mnt m = { .o = o };
	struct fuse *fuse = NULL;
	struct fuse_loop_config *loop = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	char msg[BFS_ERRMSG_MAX + PATH_MAX] = "", errmsg[BFS_ERRMSG_MAX] = "";
	char optstr[1024], logpath[PATH_MAX] = "";
	FILE *logf = NULL;
	bfs_engine_opts eo = o->engine;
	bfs_source_opts so = o->source;
	char cache_why[BFS_ERRMSG_MAX + 32] = "";
	int err, status = 1, mounted = 0;

	clock_gettime(CLOCK_REALTIME, &m.mounted);
	pthread_mutex_init(&m.made_lock, NULL);
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
	eo.on_sample_error = on_sample_error;
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
	fuse = fuse_new(&args, &ops, sizeof(ops), &m);
	if (!fuse) {
		snprintf(msg, sizeof(msg),
			 "batchfs: bad FUSE options '%s' (see above)", optstr);
		notify(notify_fd, 0, msg);
		goto out;
	}
	if (fuse_mount(fuse, o->mountpoint) != 0) {
		snprintf(msg, sizeof(msg),
			 "batchfs: cannot mount on %s (is /dev/fuse usable, and fusermount3 installed?)",
			 o->mountpoint);
		notify(notify_fd, 0, msg);
		goto out;
	}
	mounted = 1;
	raise_readahead(o->mountpoint);
	if (fuse_set_signal_handlers(fuse_get_session(fuse)) != 0) {
		notify(notify_fd, 0, "batchfs: cannot install signal handlers");
		goto out;
	}

	if (notify_fd >= 0) {
		logf = open_log(o, logpath, sizeof(logpath));
		bfs_log_init(logf ? logf : fopen("/dev/null", "we"),
			     BFS_LOG_INFO);
	}
	snprintf(msg, sizeof(msg),
		 "batchfs: mounted %s on %s: %llu samples, %llu batches of %u, %s %dx%d, cache %s%s%s%s%s%s%s",
		 bfs_source_dir(m.src), o->mountpoint,
		 (unsigned long long)bfs_source_count(m.src),
		 (unsigned long long)m.shape.batches, eo.batch ? eo.batch : 32,
		 bfs_dtype_name(eo.dtype), bfs_engine_options(m.eng)->height,
		 bfs_engine_options(m.eng)->width,
		 m.cache ? bfs_cache_dir(m.cache) : "none",
		 cache_why[0] ? " (" : "", cache_why, cache_why[0] ? ")" : "",
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
	err = fuse_loop_mt(fuse, loop);
	status = err == 0 ? 0 : 1;
	bfs_log(BFS_LOG_INFO, "unmounting %s", o->mountpoint);
	fuse_remove_signal_handlers(fuse_get_session(fuse));
out:
	if (loop)
		fuse_loop_cfg_destroy(loop);
	if (fuse) {
		if (mounted)
			fuse_unmount(fuse);
		fuse_destroy(fuse);
	}
	fuse_opt_free_args(&args);
	bfs_engine_destroy(m.eng);   /* flushes what it gave the cache */
	bfs_source_close(m.src);
	bfs_cache_close(m.cache);
	for (size_t i = 0; i < sizeof(m.made) / sizeof(m.made[0]); i++)
		free(m.made[i].buf);
	pthread_mutex_destroy(&m.made_lock);
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
		if (umount2(mountpoint, 0) == 0)
			goto wait;
		if (errno != EPERM) {
			fprintf(stderr, "batchfs: unmount %s: %s\n", mountpoint,
				strerror(errno));
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
