/*
 * files.c - the contents of the mount's files that are not batches:
 * dataset.json, stats.json, index.json and preview.jpg, and the NPY
 * headers of batch and label files (see files.h).  FUSE-free.
 */
#include "fs/files.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include <turbojpeg.h>

#include "engine/base/npy.h"
#include "engine/pixels/preview.h"
#include "engine/version.h"
#include "fs/json.h"
#include "fs/optparse.h"

/* opts.warn, formatted; a no-op without one. */
static void files_warn(const bfs_files *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void files_warn(const bfs_files *f, const char *fmt, ...)
{
	char msg[2 * BFS_ERRMSG_MAX];
	va_list ap;

	if (!f->warn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	f->warn(f->ctx, msg);
}

static uint64_t batch_id(const bfs_files *f, const bfs_node *n)
{
	return bfs_ns_batch_id(f->shape, n);
}

/* "rank 3 " in messages of a mount of several ranks, else "". */
static const char *rank_words(const bfs_files *f, const bfs_node *n,
			      char *buf, size_t cap)
{
	buf[0] = '\0';
	if (f->shape->ranks)
		snprintf(buf, cap, "rank %u ", n->rank);
	return buf;
}

size_t bfs_files_npy_header(const bfs_files *f, const bfs_node *n, char *hdr,
			size_t cap, size_t *data_len)
{
	uint64_t id = batch_id(f, n);
	uint64_t count = bfs_engine_batch_count(f->eng, id);
	int len;

	if (n->kind == BFS_NODE_LABELS) {
		len = bfs_npy_header(hdr, cap, "<i8", &count, 1);
		*data_len = (size_t)count * sizeof(int64_t);
		return len > 0 ? (size_t)len : 0;
	}
	*data_len = (size_t)count * bfs_engine_batch_sample_bytes(f->eng, id);
	return bfs_engine_npy_header(f->eng, id, hdr, cap);
}

/* ---- class names ------------------------------------------------------ */

/* Labels as batches hold them are the source's plus --label-offset, so
 * the class list is indexed by that: classes[l] names label l. */
#define MAX_SERVED_CLASSES (1u << 21)

/* How many labels the list covers (0: none), as served. */
static size_t served_classes(const bfs_files *f)
{
	int64_t off = bfs_engine_options(f->eng)->label_offset, top;
	size_t n = bfs_source_nclasses(f->src);

	if (!n || __builtin_add_overflow((int64_t)n - 1, off, &top) || top < 0 ||
	    (uint64_t)top >= MAX_SERVED_CLASSES)
		return 0;
	return (size_t)top + 1;
}

/* The name of served label l, or NULL (no record has it). */
static const char *class_of(const bfs_files *f, int64_t l)
{
	int64_t raw;

	if (__builtin_sub_overflow(l, bfs_engine_options(f->eng)->label_offset,
				   &raw) || raw < 0)
		return NULL;
	return bfs_source_class_name(f->src, (size_t)raw);
}

/* ---- dataset.json ----------------------------------------------------- */

/* dataset.json's RandomResizedCrop part: the sampler, the cached form and
 * the size of each epoch. */
static void rrc_json(const bfs_files *f, const bfs_engine_opts *eo, bfs_json *j)
{
	unsigned epochs = bfs_engine_epochs(f->eng), from = 0;
	int res = eo->cache_res < 0 ? 0 : eo->cache_res ? eo->cache_res : BFS_CACHE_RES_DEFAULT;

	bfs_json_open(j, "rrc", '{');
	bfs_json_open(j, "scale", '[');
	bfs_json_f64(j, NULL, eo->rrc.scale[0]);
	bfs_json_f64(j, NULL, eo->rrc.scale[1]);
	bfs_json_close(j, ']');
	bfs_json_open(j, "ratio", '[');
	bfs_json_f64(j, NULL, eo->rrc.ratio[0]);
	bfs_json_f64(j, NULL, eo->rrc.ratio[1]);
	bfs_json_close(j, ']');
	if (res)
		bfs_json_u64(j, "cache_res", (uint64_t)res);
	else
		bfs_json_str(j, "cache_res", "full");
	bfs_json_str(j, "decode_scale", eo->decode_scale_auto ? "auto" : "exact");
	bfs_json_str(j, "decode_region", eo->decode_scale_auto ? "box"
			   : eo->decode_whole ? "whole" : "box when nothing needs the whole image");
	bfs_json_str(j, "rule",
		     "torchvision RandomResizedCrop.get_params drawn from (seed, epoch, sample index) "
		     "alone over the source image's size: 10 tries of area share U(scale) and "
		     "log-uniform ratio, then the center crop of the clamped ratio; box = "
		     "[y, x, h, w] in source pixels (index.json); flip with probability 1/2");
	bfs_json_str(j, "pixels",
		     eo->decode_scale_auto
			     ? "the box decoded at 1/2, 1/4 or 1/8 IDCT scale when it is that many times "
			       "the output, then resized (bilinear, half-pixel, no antialias)"
			     : "the decoded image (its shorter side reduced to cache_res when larger: "
			       "bilinear, half-pixel, no antialias, rounded to uint8), the box scaled into it "
			       "and rounded to whole pixels, resized (bilinear, half-pixel, no antialias); "
			       "bit for bit the full decode's box resized when the shorter side is at most "
			       "cache_res");
	bfs_json_close(j, '}');
	bfs_json_str(j, "cached_form", "the decoded image, uint8 RGB, shorter side at most cache_res");
	bfs_json_open(j, "size_schedule", '[');
	for (unsigned k = 0; k <= eo->nsizes; k++) {
		unsigned until = k < eo->nsizes ? eo->sizes[k].from : epochs;
		int h, w;

		if (until > epochs)
			until = epochs;
		if (until <= from)
			continue; /* a size from a later epoch than the mount has */
		bfs_engine_epoch_shape(f->eng, from, &h, &w);
		bfs_json_open(j, NULL, '{');
		bfs_json_u64(j, "first_epoch", from);
		bfs_json_u64(j, "last_epoch", until - 1);
		bfs_json_open(j, "size", '[');
		bfs_json_u64(j, NULL, (uint64_t)h);
		bfs_json_u64(j, NULL, (uint64_t)w);
		bfs_json_close(j, ']');
		bfs_json_close(j, '}');
		from = until;
	}
	bfs_json_close(j, ']');
}

/* dataset.json's split: which, and with shards the nodes and this
 * mount's. */
static void split_json(const bfs_files *f, const bfs_engine_opts *eo, bfs_json *j)
{
	const bfs_layout *l = bfs_engine_layout(f->eng);

	if (eo->split != BFS_SPLIT_SHARDS) {
		bfs_json_str(j, "split", "samples");
		bfs_json_str(j, "split_rule",
			     "rank r serves places r, r + world, r + 2 world, ... of the epoch's order, "
			     "floor(samples / world) of them (DistributedSampler, drop_last)");
		return;
	}
	bfs_json_str(j, "split", "shards");
	bfs_json_u64(j, "node_ranks", eo->node_ranks);
	bfs_json_u64(j, "nodes", bfs_layout_nodes(l));
	bfs_json_u64(j, "node", bfs_layout_node_of(l, eo->rank));
	bfs_json_str(j, "split_rule",
		     "ranks i*node_ranks .. i*node_ranks+node_ranks-1 are node i; the epoch's order is "
		     "cut into nodes spans of node_ranks * floor(samples / world) places (the rest is "
		     "not served); node i takes span (i + epoch) mod nodes, its ranks its places in "
		     "turn");
}

/* dataset.json's resume: null, or the epoch that starts part way, what
 * was served of it before, and its batches here. */
static void resume_json(const bfs_files *f, const bfs_engine_opts *eo, bfs_json *j)
{
	const bfs_layout *l = bfs_engine_layout(f->eng);
	const bfs_layout_resume *r = &eo->resume;
	unsigned e = r->epoch;
	uint64_t nb = bfs_engine_epoch_batches(f->eng, e);
	char opt[1024];

	if (!r->on) {
		bfs_json_null(j, "resume");
		return;
	}
	bfs_json_open(j, "resume", '{');
	bfs_json_u64(j, "epoch", e);
	if (bfs_opt_resume_format(r, opt, sizeof(opt)) > 0)
		bfs_json_str(j, "option", opt);
	bfs_json_open(j, "runs", '[');
	for (unsigned i = 0; i < r->nruns; i++) {
		bfs_json_open(j, NULL, '{');
		bfs_json_u64(j, "samples", r->runs[i].consumed);
		bfs_json_u64(j, "world", r->runs[i].world);
		bfs_json_str(j, "split", r->runs[i].node_ranks ? "shards" : "samples");
		if (r->runs[i].node_ranks)
			bfs_json_u64(j, "node_ranks", r->runs[i].node_ranks);
		bfs_json_close(j, '}');
	}
	bfs_json_close(j, ']');
	bfs_json_u64(j, "samples_before", bfs_layout_resumed_before(l));
	bfs_json_u64(j, "samples_left", bfs_layout_resumed_left(l));
	bfs_json_u64(j, "samples_per_epoch", bfs_engine_epoch_samples_of(f->eng, e));
	bfs_json_u64(j, "batches", nb);
	bfs_json_u64(j, "last_batch_size",
		     nb ? bfs_engine_batch_count(f->eng, (uint64_t)e * bfs_engine_batches_per_epoch(f->eng) + nb - 1)
			: 0);
	bfs_json_str(j, "rule",
		     "each run laid its world over what was left of the epoch and its ranks consumed "
		     "their first samples; this world lays out the rest, in the epoch's order: every "
		     "sample of the epoch once over all runs, but the last samples_left mod world");
	bfs_json_close(j, '}');
}

int bfs_files_dataset_json(const bfs_files *f, char **buf, size_t *len)
{
	const bfs_engine_opts *eo = bfs_engine_options(f->eng);
	uint64_t per_epoch = bfs_engine_batches_per_epoch(f->eng);
	unsigned last = bfs_engine_batch_count(f->eng, per_epoch - 1);
	bfs_json j;

	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	bfs_json_str(&j, "batchfs_version", BFS_VERSION);
	bfs_json_u64(&j, "format_version", BFS_FORMAT_VERSION);
	bfs_json_str(&j, "source", f->origin ? f->origin : bfs_source_dir(f->src));
	if (f->origin && f->shard_cache)
		bfs_json_str(&j, "shard_cache", f->shard_cache);
	bfs_json_str(&j, "format", bfs_format_name(bfs_source_format(f->src)));
	bfs_json_u64(&j, "shards", bfs_source_nshards(f->src));
	bfs_json_u64(&j, "samples", bfs_source_count(f->src));
	bfs_json_u64(&j, "samples_per_epoch", bfs_engine_epoch_samples(f->eng));
	bfs_json_u64(&j, "batch_size", eo->batch);
	bfs_json_u64(&j, "batches_per_epoch", per_epoch);
	bfs_json_u64(&j, "last_batch_size", last);
	bfs_json_bool(&j, "drop_remainder", eo->drop_remainder);
	bfs_json_u64(&j, "epochs", bfs_engine_epochs(f->eng));
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
	if (eo->augment_rrc)
		bfs_json_str(&j, NULL, "rrc");
	if (eo->augment_flip)
		bfs_json_str(&j, NULL, "flip");
	if (eo->augment_crop)
		bfs_json_str(&j, NULL, "crop");
	bfs_json_close(&j, ']');
	if (eo->augment_rrc) {
		rrc_json(f, eo, &j);
	} else {
		int ch, cw;

		bfs_engine_cached_shape(f->eng, &ch, &cw);
		bfs_json_open(&j, "cached_shape", '[');
		bfs_json_u64(&j, NULL, (uint64_t)ch);
		bfs_json_u64(&j, NULL, (uint64_t)cw);
		bfs_json_u64(&j, NULL, 3);
		bfs_json_close(&j, ']');
	}
	if (!eo->augment_rrc && (eo->augment_flip || eo->augment_crop))
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
		     eo->dtype == BFS_DTYPE_UINT8 ? "round-half-even(resized)"
		     : eo->normalize ? "(resized / 255 - mean) / std, per channel (mean and std above)"
				     : "resized / 255");
	if (eo->resize_filter == BFS_RESIZE_FILTER_PIL) {
		bfs_json_str(&j, "resize_filter", "pil");
		bfs_json_str(&j, "decode",
			     "libjpeg-turbo, ISLOW DCT, fancy upsampling (Pillow's defaults); grayscale to RGB; CMYK/YCCK to RGB with Pillow's formula");
		bfs_json_str(&j, "resize",
			     "bilinear, antialiased when shrinking, 22-bit fixed point, two uint8 passes (Pillow 13's Image.resize BILINEAR, as torchvision on PIL images)");
	} else {
		bfs_json_str(&j, "resize_filter", "tf");
		bfs_json_str(&j, "decode",
			     "TurboJPEG, IFAST DCT, fancy upsampling (tf.io.decode_jpeg defaults); grayscale to RGB; CMYK/YCCK to RGB with TensorFlow's formula");
		bfs_json_str(&j, "resize",
			     "bilinear, half-pixel centers, no antialias (tf.image.resize defaults)");
	}
	bfs_json_str(&j, "order", "shards sorted by name, records in file order");
	bfs_json_bool(&j, "shuffle", eo->shuffle);
	if (eo->shuffle) {
		bfs_json_u64(&j, "seed", eo->seed);
		if (eo->shuffle_block) {
			bfs_json_u64(&j, "shuffle_block", eo->shuffle_block);
			bfs_json_str(&j, "shuffle_rule",
				     "epoch e: the shards in the order of their own stateless permutation of "
				     "(seed, e), taken shuffle_block at a time; the samples of each block "
				     "together, in the order of a stateless permutation of (seed, e, block)");
		} else {
			bfs_json_str(&j, "shuffle_block", "global");
			bfs_json_str(&j, "shuffle_rule",
				     "epoch e is a stateless permutation of (seed, e)");
		}
	} else {
		bfs_json_null(&j, "seed");
		bfs_json_null(&j, "shuffle_block");
	}
	if (f->shape->ranks) { /* --ranks: rank-R/ for each of them */
		bfs_json_open(&j, "ranks", '[');
		for (uint32_t r = 0; r < f->shape->ranks; r++)
			bfs_json_u64(&j, NULL, f->shape->rank0 + r);
		bfs_json_close(&j, ']');
	} else {
		bfs_json_u64(&j, "rank", eo->rank);
	}
	bfs_json_u64(&j, "world", eo->world ? eo->world : 1);
	split_json(f, eo, &j);
	resume_json(f, eo, &j);
	bfs_json_str(&j, "image_key",
		     f->image_key ? f->image_key : "image/encoded");
	bfs_json_str(&j, "label_key",
		     f->label_key ? f->label_key : "image/class/label");
	{
		size_t n = served_classes(f);
		const char *note = bfs_source_classes_note(f->src);

		/* classes[l] names label l as the batches hold it; null for a
		 * label no record has */
		bfs_json_open(&j, "classes", '[');
		for (size_t i = 0; i < n; i++)
			bfs_json_str(&j, NULL, class_of(f, (int64_t)i));
		bfs_json_close(&j, ']');
		bfs_json_str(&j, "classes_from",
			     n ? bfs_source_classes_from(f->src) : NULL);
		if (!n && bfs_source_nclasses(f->src))
			note = "--label-offset puts every label outside 0..2^21";
		if (note)
			bfs_json_str(&j, "classes_note", note);
	}
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
	if (f->cache) {
		bfs_cache_stats cs;

		bfs_cache_get_stats(f->cache, &cs);
		bfs_json_str(&j, "cache", bfs_cache_dir(f->cache));
		bfs_json_u64(&j, "cache_size", cs.map_bytes);
		bfs_json_str(&j, "cache_fingerprint", f->cache_fp);
	} else {
		bfs_json_str(&j, "cache", "none");
	}
	bfs_json_str(&j, "fingerprint", f->fingerprint);
	{
		const char *rd = f->shape->ranks ? "rank-R/" : "";
		char p[4][64];

		snprintf(p[0], sizeof(p[0]), "%sepoch-NNNN/batch-NNNNNN.npy", rd);
		snprintf(p[1], sizeof(p[1]), "%sepoch-NNNN/batch-NNNNNN.labels.npy", rd);
		snprintf(p[2], sizeof(p[2]), "%sepoch-NNNN/batch-NNNNNN.index.json", rd);
		snprintf(p[3], sizeof(p[3]), "%sepoch-NNNN/batch-NNNNNN.preview.jpg", rd);
		bfs_json_open(&j, "files", '{');
		bfs_json_str(&j, "images", p[0]);
		bfs_json_str(&j, "labels", p[1]);
		bfs_json_str(&j, "provenance", p[2]);
		bfs_json_str(&j, "preview", p[3]);
		if (f->shape->hold)
			bfs_json_str(&j, "hold", "hold");
		bfs_json_close(&j, '}');
	}
	bfs_json_close(&j, '}');
	return bfs_json_take(&j, buf, len);
}

/* ---- index.json and preview.jpg ------------------------------------ */

/* Start batch id for reader (it may not have opened the batch file) and
 * wait for it; bfs_engine_get's contract. */
static int wait_batch(const bfs_files *f, uint64_t reader, uint64_t id,
		      bfs_batch **b, char *msg)
{
	bfs_engine_hint(f->eng, reader, id);
	return bfs_engine_get(f->eng, reader, id, b, msg);
}

/* Where source sample i came from: "sample", "shard" and the record or
 * member, into the open object. */
static void sample_origin(const bfs_files *f, bfs_json *j, uint64_t i)
{
	uint64_t rec = 0;
	const char *shard = bfs_source_sample_shard(f->src, i, &rec);

	bfs_json_u64(j, "sample", i);
	bfs_json_str(j, "shard", shard);
	switch (bfs_source_format(f->src)) {
	case BFS_FORMAT_TFRECORD:
		bfs_json_u64(j, "record", rec);
		break;
	case BFS_FORMAT_TAR:
		bfs_json_str(j, "member", bfs_source_member_name(f->src, i));
		break;
	default:
		break;
	}
}

/* batch-NNNNNN.index.json: for each position, where the sample it holds
 * came from (in skip mode a bad sample's replacement, with "replaces"
 * naming the bad one), its label and the augmentation drawn.  Waits for
 * the batch (for the labels); a failed batch still lists its samples,
 * with the error. */
int bfs_files_index_json(const bfs_files *f, uint64_t reader, const bfs_node *n,
		    char **buf, size_t *len)
{
	const bfs_engine_opts *eo = bfs_engine_options(f->eng);
	uint64_t id = batch_id(f, n);
	unsigned count = bfs_engine_batch_count(f->eng, id);
	char msg[BFS_ERRMSG_MAX] = "";
	bfs_batch *b = NULL;
	bfs_json j;
	int err;

	err = wait_batch(f, reader, id, &b, msg);
	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	if (f->shape->ranks)
		bfs_json_u64(&j, "rank", n->rank);
	if (eo->split == BFS_SPLIT_SHARDS)
		bfs_json_u64(&j, "node", bfs_layout_node_of(bfs_engine_layout(f->eng),
							    f->shape->ranks ? n->rank : eo->rank));
	bfs_json_u64(&j, "epoch", n->epoch);
	bfs_json_u64(&j, "batch", n->batch);
	bfs_json_u64(&j, "count", count);
	{
		int h, w;

		bfs_engine_epoch_shape(f->eng, n->epoch, &h, &w);
		bfs_json_open(&j, "size", '[');
		bfs_json_u64(&j, NULL, (uint64_t)h);
		bfs_json_u64(&j, NULL, (uint64_t)w);
		bfs_json_close(&j, ']');
	}
	if (err)
		bfs_json_str(&j, "error", msg[0] ? msg : bfs_strerror(err));
	bfs_json_open(&j, "samples", '[');
	for (unsigned k = 0; k < count; k++) {
		uint64_t i = bfs_engine_sample_index(f->eng, id, k);
		uint64_t s = b ? bfs_batch_sample(b, k) : i;
		int flip, x0, y0;

		bfs_json_open(&j, NULL, '{');
		bfs_json_u64(&j, "position", k);
		sample_origin(f, &j, s);
		if (s != i) {
			bfs_json_open(&j, "replaces", '{');
			sample_origin(f, &j, i);
			bfs_json_close(&j, '}');
		}
		if (b)
			bfs_json_i64(&j, "label", bfs_batch_labels(b)[k]);
		else
			bfs_json_null(&j, "label");
		if (eo->augment_rrc) {
			bfs_rrc_box bx;
			int iw, ih;

			if (b && bfs_batch_rrc(b, k, &bx, &flip, &iw, &ih) == 0) {
				bfs_json_open(&j, "box", '[');
				bfs_json_u64(&j, NULL, (uint64_t)bx.y);
				bfs_json_u64(&j, NULL, (uint64_t)bx.x);
				bfs_json_u64(&j, NULL, (uint64_t)bx.h);
				bfs_json_u64(&j, NULL, (uint64_t)bx.w);
				bfs_json_close(&j, ']');
				bfs_json_bool(&j, "flip", flip);
				bfs_json_open(&j, "image_size", '[');
				bfs_json_u64(&j, NULL, (uint64_t)ih);
				bfs_json_u64(&j, NULL, (uint64_t)iw);
				bfs_json_close(&j, ']');
			}
		} else if ((eo->augment_flip || eo->augment_crop) &&
		    bfs_engine_sample_aug(f->eng, id, k, &flip, &x0, &y0) == 0) {
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
		bfs_engine_put(f->eng, b);
	return bfs_json_take(&j, buf, len);
}

/* batch-NNNNNN.preview.jpg: the batch as the model sees it, normalization
 * undone for display, with each tile's label (class name for folders). */
int bfs_files_preview_jpg(const bfs_files *f, uint64_t reader, const bfs_node *n,
		     char **buf, size_t *len)
{
	const bfs_engine_opts *eo = bfs_engine_options(f->eng);
	uint64_t id = batch_id(f, n);
	char msg[BFS_ERRMSG_MAX] = "";
	const char **names = NULL;
	char *numbers = NULL;     /* the labels no name is known for */
	size_t ncls = served_classes(f);
	bfs_preview_opts po = { 0 };
	unsigned char *jpeg = NULL;
	unsigned long jlen = 0;
	bfs_batch *b;
	int err;

	err = wait_batch(f, reader, id, &b, msg);
	if (err)
		return -EIO;
	if (ncls && (names = calloc(ncls + 1, sizeof(*names))) &&
	    (numbers = malloc(ncls * 21))) {
		/* a NULL-ended list: a label without a name shows its number */
		for (size_t c = 0; c < ncls; c++) {
			if (!(names[c] = class_of(f, (int64_t)c))) {
				snprintf(numbers + c * 21, 21, "%zu", c);
				names[c] = numbers + c * 21;
			}
		}
	} else {
		free(names);
		names = NULL;
	}
	bfs_engine_epoch_shape(f->eng, n->epoch, &po.h, &po.w);
	po.dtype = eo->dtype;
	po.nchw = eo->nchw;
	po.normalized = eo->normalize;
	memcpy(po.mean, eo->mean, sizeof(po.mean));
	memcpy(po.std, eo->std, sizeof(po.std));
	err = bfs_preview_render(&po, bfs_batch_images(b), bfs_batch_labels(b),
				 names, bfs_batch_count(b), &jpeg, &jlen, msg);
	bfs_engine_put(f->eng, b);
	free(names);
	free(numbers);
	if (err) {
		char rw[32];

		files_warn(f, "preview of %sepoch %u batch %llu: %s",
			   rank_words(f, n, rw, sizeof(rw)), n->epoch,
			   (unsigned long long)n->batch, msg);
		return err == -ENOMEM ? -ENOMEM : -EIO;
	}
	/* copy into malloc'd memory: the caller releases it with free() */
	*buf = malloc(jlen ? jlen : 1);
	if (!*buf) {
		tjFree(jpeg);
		return -ENOMEM;
	}
	memcpy(*buf, jpeg, jlen);
	*len = jlen;
	tjFree(jpeg);
	return 0;
}

/* ---- stats.json ------------------------------------------------------- */

/* Has reader process pid gone (exited, or a zombie nobody reaped yet)?
 * The pid is the one FUSE gave the daemon, in its own pid namespace. */
static int reader_gone(uint64_t pid)
{
	char path[64], buf[256], *p;
	FILE *f;
	int gone = 0;

	if (pid == 0 || pid > INT32_MAX)
		return 0; /* not a process we can ask about */
	if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
		return 1;
	snprintf(path, sizeof(path), "/proc/%llu/stat", (unsigned long long)pid);
	if (!(f = fopen(path, "re")))
		return 0;
	/* "pid (comm) S ...": the state follows the last ')' */
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) && p[1] == ' ')
		gone = p[2] == 'Z' || p[2] == 'X';
	fclose(f);
	return gone;
}

/* A bfs_hist as stats.json shows it: "le", the upper bounds in seconds
 * (the last bucket, unbounded, has none); "counts", the observations in
 * each bucket (not cumulative: one more than "le"); "count" and "sum"
 * (seconds). */
static void hist_json(bfs_json *j, const char *key, const bfs_hist *h)
{
	bfs_json_open(j, key, '{');
	bfs_json_open(j, "le", '[');
	for (unsigned i = 0; i + 1 < BFS_HIST_BUCKETS; i++)
		bfs_json_f64(j, NULL, (double)bfs_hist_bound_ns(i) / 1e9);
	bfs_json_close(j, ']');
	bfs_json_open(j, "counts", '[');
	for (unsigned i = 0; i < BFS_HIST_BUCKETS; i++)
		bfs_json_u64(j, NULL, h->count[i]);
	bfs_json_close(j, ']');
	bfs_json_u64(j, "count", h->n);
	bfs_json_fixed(j, "sum", (double)h->sum_ns / 1e9, 9);
	bfs_json_close(j, '}');
}

static double seconds_since(const struct timespec *t0, clockid_t clk)
{
	struct timespec now;

	clock_gettime(clk, &now);
	return (double)(now.tv_sec - t0->tv_sec) +
	       (double)(now.tv_nsec - t0->tv_nsec) * 1e-9;
}

int bfs_files_stats_json(const bfs_files *f, char **buf, size_t *len)
{
	enum { SHOW = 256 };
	bfs_sample_error *errs = calloc(SHOW, sizeof(*errs));
	bfs_files_io io = { 0 };
	bfs_engine_stats st;
	size_t nerr, shown, nscan = bfs_source_nscan_errors(f->src);
	bfs_json j;

	if (!errs)
		return -ENOMEM;
	if (f->io)
		f->io(f->ctx, &io);
	bfs_engine_get_stats(f->eng, &st);
	nerr = bfs_engine_errors(f->eng, errs, SHOW);
	shown = nerr < SHOW ? nerr : SHOW;

	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	{
		struct timespec zero = { 0, 0 };

		/* when this snapshot was taken (Unix time, seconds) */
		bfs_json_fixed(&j, "timestamp",
			       seconds_since(&zero, CLOCK_REALTIME), 3);
		bfs_json_fixed(&j, "uptime_seconds",
			       seconds_since(&f->started, CLOCK_MONOTONIC), 3);
	}
	bfs_json_u64(&j, "batches_served", st.batches_served);
	bfs_json_u64(&j, "samples_served", st.samples_served);
	bfs_json_u64(&j, "batches_produced", st.batches_produced);
	bfs_json_u64(&j, "batches_pushed", st.batches_delivered);
	bfs_json_u64(&j, "bytes_pushed", io.bytes_pushed);
	bfs_json_bool(&j, "passthrough", io.passthrough);
	bfs_json_u64(&j, "passthrough_opens", io.passthrough_opens);
	if (io.index_total) {
		uint64_t used = io.indexes.from_store + io.indexes.from_sidecar + io.index_dali;

		bfs_json_open(&j, "index", '{');
		bfs_json_u64(&j, "shards", io.index_total);
		bfs_json_u64(&j, "from_cache", io.indexes.from_store);
		bfs_json_u64(&j, "from_sidecar", io.indexes.from_sidecar);
		bfs_json_u64(&j, "from_dali", io.index_dali);
		bfs_json_u64(&j, "scanned", io.index_total > used ? io.index_total - used : 0);
		bfs_json_bool(&j, "sidecar", io.sidecar);
		bfs_json_u64(&j, "sidecar_changed", io.indexes.sidecar_stale);
		bfs_json_u64(&j, "sidecar_missing", io.indexes.sidecar_missing);
		bfs_json_u64(&j, "sidecar_damaged", io.indexes.sidecar_bad);
		bfs_json_close(&j, '}');
	}
	if (io.remote) {
		static const char *cause[BFS_HTTP_RETRY_CAUSES] = {
			"reset", "timeout", "server_error", "throttled", "short_body",
		};

		bfs_json_open(&j, "remote", '{');
		bfs_json_u64(&j, "requests", io.net.requests);
		bfs_json_u64(&j, "bytes", io.net.bytes);
		bfs_json_u64(&j, "in_flight", io.net.in_flight);
		bfs_json_u64(&j, "failed", io.net.failed);
		bfs_json_open(&j, "retries", '{');
		for (int c = 0; c < BFS_HTTP_RETRY_CAUSES; c++)
			bfs_json_u64(&j, cause[c], io.net.retries[c]);
		bfs_json_close(&j, '}');
		bfs_json_f64(&j, "link_mb_per_second", io.shards.link_mb_s);
		bfs_json_f64(&j, "link_bytes_per_second", io.shards.link_mb_s * 1e6);
		bfs_json_str(&j, "shard_cache", io.shard_cache);
		bfs_json_u64(&j, "objects", io.shards.objects);
		bfs_json_u64(&j, "bytes_total", io.shards.bytes_total);
		bfs_json_u64(&j, "limit", io.shards.limit);
		bfs_json_u64(&j, "bytes_on_disk", io.shards.bytes_on_disk);
		bfs_json_u64(&j, "held", io.shards.held);
		bfs_json_u64(&j, "fetching", io.shards.fetching);
		bfs_json_u64(&j, "hits", io.shards.hits);
		bfs_json_u64(&j, "misses", io.shards.misses);
		bfs_json_u64(&j, "range_reads", io.shards.range_reads);
		bfs_json_u64(&j, "range_bytes", io.shards.range_bytes);
		bfs_json_u64(&j, "waits", io.shards.waits);
		bfs_json_fixed(&j, "wait_seconds", io.shards.wait_seconds, 3);
		bfs_json_u64(&j, "fetched", io.shards.fetched);
		bfs_json_u64(&j, "bytes_fetched", io.shards.bytes_fetched);
		bfs_json_u64(&j, "found", io.shards.found);
		bfs_json_u64(&j, "evictions", io.shards.evictions);
		bfs_json_u64(&j, "evicted_bytes", io.shards.evicted_bytes);
		bfs_json_u64(&j, "removed", io.shards.removed);
		bfs_json_u64(&j, "failures", io.shards.failures);
		bfs_json_f64(&j, "part_mb_per_second", io.shards.part_mb_s);
		bfs_json_f64(&j, "range_read_ms", io.shards.range_ms);
		/* bytes fetched (whole or by range) for each epoch, the last
		 * BFS_SHARDCACHE_EPOCHS of them (shardcache.h epoch_bytes) */
		bfs_json_open(&j, "bytes_by_epoch", '[');
		for (int64_t e = io.shards.epoch_first;
		     e >= 0 && e <= io.shards.epoch_last; e++) {
			bfs_json_open(&j, NULL, '{');
			bfs_json_u64(&j, "epoch", (uint64_t)e);
			bfs_json_u64(&j, "bytes",
				     io.shards.epoch_bytes[e % BFS_SHARDCACHE_EPOCHS]);
			bfs_json_close(&j, '}');
		}
		bfs_json_close(&j, ']');
		bfs_json_close(&j, '}');
	}
	bfs_json_u64(&j, "slot_files_replaced", st.slot_files_replaced);
	bfs_json_u64(&j, "slot_files_passed_over", st.slot_files_passed_over);
	bfs_json_u64(&j, "slot_file_errors", st.slot_file_errors);
	bfs_json_u64(&j, "samples_decoded", st.samples_decoded);
	bfs_json_u64(&j, "decode_attempts", st.decode_attempts);
	bfs_json_u64(&j, "boxes_stopped_early", st.boxes_stopped_early);
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
	bfs_json_u64(&j, "prefetch_max", st.ahead_max);
	bfs_json_u64(&j, "memory_bytes", st.mem_bytes);
	bfs_json_u64(&j, "memory_budget", st.mem_budget);
	bfs_json_u64(&j, "memory_cap", st.mem_cap);
	bfs_json_open(&j, "memory", '{');
	bfs_json_u64(&j, "batch_slots", st.mem_slots);
	bfs_json_u64(&j, "decoder_scratch", st.mem_scratch);
	bfs_json_u64(&j, "held_files", st.mem_held);
	bfs_json_u64(&j, "held_file_count", st.held_files);
	bfs_json_close(&j, '}');
	bfs_json_u64(&j, "passthrough_declined", st.lend_declined);
	bfs_json_open(&j, "slots", '{');
	bfs_json_u64(&j, "total", st.slots);
	bfs_json_u64(&j, "ready", st.slots_ready);
	bfs_json_u64(&j, "filling", st.slots_filling);
	bfs_json_close(&j, '}');
	bfs_json_u64(&j, "reader_waits", st.reader_waits);
	bfs_json_f64(&j, "reader_wait_seconds", (double)st.reader_wait_ns / 1e9);
	bfs_json_open(&j, "histograms", '{');
	hist_json(&j, "reader_wait_seconds", &st.reader_wait);
	hist_json(&j, "decode_seconds", &st.decode);
	bfs_json_close(&j, '}');
	if (f->cache) {
		bfs_cache_stats cs;

		bfs_cache_get_stats(f->cache, &cs);
		bfs_json_open(&j, "cache", '{');
		bfs_json_str(&j, "dir", bfs_cache_dir(f->cache));
		bfs_json_u64(&j, "hits", cs.hits);
		bfs_json_u64(&j, "misses", cs.misses);
		bfs_json_f64(&j, "hit_rate", cs.hits + cs.misses
			     ? (double)cs.hits / (double)(cs.hits + cs.misses) : 0);
		bfs_json_u64(&j, "inserts", cs.inserts);
		bfs_json_u64(&j, "evictions", cs.evictions);
		bfs_json_u64(&j, "dropped_queue", cs.dropped_queue);
		bfs_json_u64(&j, "dropped_full", cs.dropped_full);
		bfs_json_bool(&j, "fs_full", cs.fs_full);
		bfs_json_u64(&j, "dropped_locked", cs.dropped_locked);
		bfs_json_bool(&j, "read_only", cs.nowrite);
		bfs_json_u64(&j, "crc_errors", cs.crc_errors);
		bfs_json_u64(&j, "damaged", cs.damaged);
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
		uint64_t per = bfs_engine_batches_per_epoch(f->eng);

		if (reader_gone(rs->reader))
			continue;
		bfs_json_open(&j, NULL, '{');
		bfs_json_u64(&j, "pid", rs->reader);
		if (rs->last_batch != UINT64_MAX && per) {
			/* where it is: the batch it moved to last */
			bfs_json_u64(&j, "epoch", rs->last_batch / per);
			bfs_json_u64(&j, "batch", rs->last_batch % per);
		} else {
			bfs_json_null(&j, "epoch");
			bfs_json_null(&j, "batch");
		}
		bfs_json_u64(&j, "depth", rs->depth);
		bfs_json_f64(&j, "batches_per_second", rs->batches_per_s);
		bfs_json_u64(&j, "batches", rs->batches);
		bfs_json_u64(&j, "waits", rs->waits);
		bfs_json_f64(&j, "wait_seconds", rs->wait_s);
		bfs_json_close(&j, '}');
	}
	bfs_json_close(&j, ']');
	/* batches that failed for want of memory count as errors too */
	bfs_json_u64(&j, "batch_memory_errors", st.batch_mem_errors);
	bfs_json_u64(&j, "errors_total", nerr + nscan + st.batch_mem_errors);
	/* the list below holds the first SHOW sample errors */
	bfs_json_u64(&j, "errors_left_out", nerr - shown);
	bfs_json_open(&j, "bad_shards", '[');
	for (size_t i = 0; i < nscan; i++)
		bfs_json_str(&j, NULL, bfs_source_scan_error_shard(f->src, i));
	for (size_t i = 0; i < shown; i++) {
		int seen = 0;

		for (size_t k = 0; k < i && !seen; k++)
			seen = strcmp(errs[k].shard, errs[i].shard) == 0;
		for (size_t k = 0; k < nscan && !seen; k++)
			seen = strcmp(bfs_source_scan_error_shard(f->src, k),
				      errs[i].shard) == 0;
		if (!seen)
			bfs_json_str(&j, NULL, errs[i].shard);
	}
	bfs_json_close(&j, ']');
	bfs_json_open(&j, "errors", '[');
	for (size_t i = 0; i < nscan; i++) {
		bfs_json_open(&j, NULL, '{');
		bfs_json_str(&j, "kind", "index");
		bfs_json_str(&j, "shard", bfs_source_scan_error_shard(f->src, i));
		bfs_json_str(&j, "message", bfs_source_scan_error(f->src, i));
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
	bfs_history_json(f->history, &j); /* the run so far, for --plot */
	bfs_json_close(&j, '}');
	free(errs);
	return bfs_json_take(&j, buf, len);
}

