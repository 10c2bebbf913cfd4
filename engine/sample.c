/*
 * sample.c - producing one sample of a batch: the cache or the decoder, the
 * scratch memory it needs, stage 2, and what becomes of a bad sample
 * (recorded once, replaced in skip mode)
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pixels/augment.h"
#include "engine/pixels/decode.h"
#include "engine/pixels/image.h"
#include "engine/formats/label.h"
#include "engine/pixels/resize.h"
#include "engine/pixels/resize_pil.h"
#include "engine/pixels/rrc.h"

/* ---- errors ----------------------------------------------------------- */

/* Record bad sample `sample` (just marked BAD in e->bad, so once) in the
 * error list while it has room: past MAX_ERRORS bad samples only e->bad
 * counts them.  Returns its place in the list, or -1. */
/* --resize-filter: TensorFlow's resize or Pillow's (engine.h). */
static int pil_filter(const bfs_engine *e)
{
	return e->o.resize_filter == BFS_RESIZE_FILTER_PIL;
}

/* A decoder that decodes as the filter's framework does. */
static int decoder_new(const bfs_engine *e, bfs_decoder **d)
{
	int err = bfs_decoder_create(d);

	if (!err && pil_filter(e))
		err = bfs_decoder_set_method(*d, BFS_DECODE_PIL);
	return err;
}

static size_t resize_scratch(const bfs_engine *e, int sw, int sh, int dw, int dh)
{
	return pil_filter(e) ? bfs_resize_pil_scratch_size(sw, sh, dw, dh)
			     : bfs_resize_scratch_size(sw, sh, dw, dh);
}

static int resize_flags(const bfs_engine *e, const uint8_t *src, int sw, int sh, size_t stride,
			void *dst, int dw, int dh, bfs_dtype dt, unsigned flags, void *scratch)
{
	return pil_filter(e) ? bfs_resize_pil(src, sw, sh, stride, dst, dw, dh, dt, flags, scratch)
			     : bfs_resize_rgb_flags(src, sw, sh, stride, dst, dw, dh, dt, flags,
						    scratch);
}

static long record_error(bfs_engine *e, uint64_t sample, int code,
			 const char *msg)
{
	bfs_sample_error err;
	const char *shard;
	long at = -1;

	memset(&err, 0, sizeof(err));
	err.sample = sample;
	shard = bfs_source_sample_shard(e->src, sample, &err.record);
	snprintf(err.shard, sizeof(err.shard), "%s", shard ? shard : "?");
	err.code = code;
	snprintf(err.msg, sizeof(err.msg), "%s", msg && msg[0] ? msg : bfs_strerror(code));

	pthread_mutex_lock(&e->lock);
	if (e->nerrors < MAX_ERRORS) {
		at = (long)e->nerrors;
		e->errors[e->nerrors++] = err;
	}
	e->st.sample_errors = bfs_badset_count(e->bad);
	pthread_mutex_unlock(&e->lock);
	return at;
}

/* Tell on_sample_error of a bad sample, once, as soon as it is found. */
static void tell_error(bfs_engine *e, uint64_t sample, int code,
		       const char *msg)
{
	bfs_sample_error err;
	const char *shard;

	if (!e->o.on_sample_error)
		return;
	memset(&err, 0, sizeof(err));
	err.sample = sample;
	shard = bfs_source_sample_shard(e->src, sample, &err.record);
	snprintf(err.shard, sizeof(err.shard), "%s", shard ? shard : "?");
	err.code = code;
	snprintf(err.msg, sizeof(err.msg), "%s", msg && msg[0] ? msg : bfs_strerror(code));
	e->o.on_sample_error(e->o.ctx, &err);
}

static long report_error(bfs_engine *e, uint64_t sample, int code,
			 const char *msg)
{
	long at = record_error(e, sample, code, msg);

	tell_error(e, sample, code, msg);
	return at;
}

/* Skip mode: record that bad sample's position is served by sample r. */
static void note_replacement(bfs_engine *e, long at, uint64_t r)
{
	if (at < 0)
		return;
	pthread_mutex_lock(&e->lock);
	e->errors[at].replaced = 1;
	e->errors[at].replacement = r;
	pthread_mutex_unlock(&e->lock);
}

/* The message of a sample known to be bad, from the error list (or a
 * note that it was not kept).  Lock held. */
static void known_message_locked(bfs_engine *e, uint64_t sample, int code,
				 char *msg)
{
	for (size_t k = 0; k < e->nerrors; k++)
		if (e->errors[k].sample == sample) {
			bfs_seterr(msg, "%s", e->errors[k].msg);
			return;
		}
	bfs_seterr(msg, "%s (known bad; its message was not kept: more than %d bad samples)",
		   bfs_strerror(code), MAX_ERRORS);
}

size_t bfs_engine_errors(bfs_engine *e, bfs_sample_error *out, size_t max)
{
	size_t n;

	pthread_mutex_lock(&e->lock);
	n = e->nerrors < max ? e->nerrors : max;
	if (n)
		memcpy(out, e->errors, n * sizeof(*out));
	n = (size_t)bfs_badset_count(e->bad);
	pthread_mutex_unlock(&e->lock);
	return n;
}

/* ---- scratch memory -------------------------------------------------- */

/* The most scratch one sample can ever have: the budget, less one batch
 * (the one it is decoded into), the scratch every other worker keeps
 * between samples, and the files readers hold.  Lock held. */
static uint64_t most_for_one_locked(const bfs_engine *e)
{
	uint64_t keep = e->slot_bytes +
			(uint64_t)(e->nworkers ? e->nworkers - 1 : 0) * SCRATCH_BASE +
			bfs__held_bytes_locked(e);

	return e->o.mem_bytes > keep ? e->o.mem_bytes - keep : 0;
}

/* Make sure worker w holds at least `want` bytes of scratch.  Within the
 * scratch pool a worker takes what it needs at once; past it (a big image,
 * or many threads each keeping SCRATCH_BASE) it borrows from the slots'
 * share of the budget: memory no slot uses yet, or, taking turns with
 * other borrowers, slot memory it frees (release_slots_locked).  It waits
 * while memory that other workers and readers will give back is in use,
 * and fails only when the sample cannot fit in the budget at all:
 * BFS_E_MEMORY, with msg saying which --mem would do.  With wait 0
 * (reserve_or_not) it never waits: -EAGAIN where it would. */
static int reserve_or_not(struct worker *w, size_t want, int wait, char *msg)
{
	bfs_engine *e = w->e;
	int err = 0;

	if (want <= w->held)
		return 0;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		size_t extra = want - w->held;
		uint64_t most = most_for_one_locked(e);

		if (want > most) {
			uint64_t held = bfs__held_bytes_locked(e);

			char extra_held[64] = "";

			if (held)
				snprintf(extra_held, sizeof(extra_held),
					 ", and %llu MiB of batch files readers hold",
					 (unsigned long long)(held >> 20));
			bfs_seterr(msg,
				   "decoding it needs %zu MiB, more than --mem %llu MiB leaves for one image (%llu MiB, beside a batch of %zu MiB and %u other decode threads' %u MiB each%s); use --mem %lluM or more",
				   (want + (1u << 20) - 1) >> 20,
				   (unsigned long long)(e->o.mem_bytes >> 20),
				   (unsigned long long)(most >> 20),
				   (e->slot_bytes + (1u << 20) - 1) >> 20,
				   e->nworkers ? e->nworkers - 1 : 0,
				   SCRATCH_BASE >> 20, extra_held,
				   (unsigned long long)((e->o.mem_bytes - most + want) >> 20) + 1);
			err = BFS_E_MEMORY;
			break;
		}
		if (e->stop) {
			err = -ECANCELED;
			break;
		}
		/* the pool: free to take, but past SCRATCH_BASE only when
		 * nobody is freeing memory for a bigger sample */
		if (e->scratch_used + extra <= e->scratch_budget &&
		    (want <= SCRATCH_BASE || !e->borrower || e->borrower == w) &&
		    bfs__mem_used_locked(e) + extra <= e->o.mem_bytes)
			break;
		if (!e->borrower || e->borrower == w) {
			if (bfs__mem_used_locked(e) + extra <= e->o.mem_bytes)
				break; /* borrowed from slot memory not in use */
			e->borrower = w;
			if (bfs__release_slots_locked(e, w, bfs__mem_used_locked(e) + extra -
							       e->o.mem_bytes))
				continue;
		}
		if (!wait) {
			err = -EAGAIN;
			break;
		}
		pthread_cond_wait(&e->room, &e->lock);
	}
	if (!err) {
		e->scratch_used += want - w->held;
		w->held = want;
	}
	if (e->borrower == w) {
		e->borrower = NULL;
		pthread_cond_broadcast(&e->room);
	}
	pthread_mutex_unlock(&e->lock);
	return err;
}

static int reserve(struct worker *w, size_t want, char *msg)
{
	return reserve_or_not(w, want, 1, msg);
}

/* After a sample: a worker that grew past SCRATCH_BASE frees its buffers
 * and gives the reservation back, so peaks stay rare and short.  Readers
 * waiting for slot memory (a borrower took it) are woken too. */
static void trim(struct worker *w)
{
	bfs_engine *e = w->e;

	if (w->held <= SCRATCH_BASE)
		return;
	bfs_decoder_destroy(w->dec);
	w->dec = NULL;
	if (decoder_new(w->e, &w->dec))
		w->dec = NULL; /* retried before the next sample */
	w->dec_bytes = 0;
	bfs_buf_free(&w->in);
	free(w->scratch);
	w->scratch = NULL;
	w->scratch_cap = 0;
	free(w->pix);
	w->pix = NULL;
	w->pix_cap = 0;
	free(w->s1);
	w->s1 = NULL;
	w->s1_cap = 0;
	free(w->out);
	w->out = NULL;
	w->out_cap = 0;
	pthread_mutex_lock(&e->lock);
	e->scratch_used -= w->held;
	pthread_cond_broadcast(&e->room);
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
	w->held = 0;
}

/* BFS_E_TOOBIG (msg says why) for an image over --max-pixels, else 0. */
static int within_max_pixels(const bfs_engine *e, const bfs_image_info *img,
			     char *msg)
{
	uint64_t px = (uint64_t)img->width * (uint64_t)img->height;

	if (!e->o.max_pixels || px <= e->o.max_pixels)
		return 0;
	bfs_seterr(msg, "%dx%d %s has %llu pixels, more than the limit of %llu",
		   img->width, img->height, bfs_image_format_name(img->format),
		   (unsigned long long)px, (unsigned long long)e->o.max_pixels);
	return BFS_E_TOOBIG;
}

/* One decoded-image buffer at a time, so that what the budget left for
 * one image (bfs_image_scratch_max) covers it: a JPEG decodes in the
 * decoder's scratch, anything else in w->pix, so the other one goes
 * first.  0 or an error. */
static int one_image_buffer(struct worker *w, const bfs_image_info *img)
{
	int err;

	if (img->format == BFS_IMAGE_JPEG && w->pix) {
		free(w->pix);
		w->pix = NULL;
		w->pix_cap = 0;
	} else if (img->format != BFS_IMAGE_JPEG && w->dec_bytes) {
		bfs_decoder_destroy(w->dec);
		w->dec_bytes = 0;
		if ((err = decoder_new(w->e, &w->dec))) {
			w->dec = NULL;
			return err;
		}
	}
	return 0;
}

/* PNG or WebP: w->pix grown to the image's pixels (reserved already).
 * 0 or -ENOMEM with msg. */
static int pix_grow(struct worker *w, const bfs_image_info *img, char *msg)
{
	uint8_t *n;

	if (img->pixel_bytes <= w->pix_cap)
		return 0;
	if (!(n = realloc(w->pix, img->pixel_bytes))) {
		bfs_seterr(msg, "out of memory for a %dx%d image", img->width,
			   img->height);
		return -ENOMEM;
	}
	w->pix = n;
	w->pix_cap = img->pixel_bytes;
	return 0;
}

/* Decode source sample i into dst and *label, or copy it from the store.
 * rec tells the batch's completion what to insert.  0 or an error. */
static int make_sample(struct worker *w, uint64_t i, void *dst,
		       int64_t *label, struct cache_rec *rec, char *msg)
{
	bfs_engine *e = w->e;
	const uint8_t *jpeg, *rgb;
	bfs_sample_identity id;
	bfs_image_info img;
	size_t len, px, rs, in_cap;
	uint64_t t0 = bfs__now_ns();
	int err, sw, sh;

	msg[0] = '\0';
	rec->decoded = 0;
	if ((err = bfs_source_identity(e->src, i, &id)))
		return err;
	rec->id = id;
	if (w->sr) {
		bfs_store_shape shape;
		size_t got = 0;

		err = e->store.get(w->sr, &id, dst, e->s1_bytes, &got, &shape, label);
		if (err == 0 && (got != e->s1_bytes || shape.h != (uint32_t)e->s1_h ||
				 shape.w != (uint32_t)e->s1_w))
			err = -EINVAL; /* not this fingerprint's form: a miss */
		if (err == 0) {
			pthread_mutex_lock(&e->lock);
			e->st.cache_hits++;
			pthread_mutex_unlock(&e->lock);
			return 0;
		}
		if (err == BFS_E_CRC) {
			pthread_mutex_lock(&e->lock);
			e->st.cache_crc_errors++;
			pthread_mutex_unlock(&e->lock);
		}
		rec->decoded = 1; /* a miss (or a bad entry): insert after */
	}
	if (!w->dec && (err = decoder_new(w->e, &w->dec)))
		return err;
	in_cap = bfs__pow2_at_least((size_t)id.length + 4, w->in.cap);
	if ((err = reserve(w, in_cap + w->dec_bytes + w->scratch_cap, msg)))
		return err;
	__atomic_add_fetch(&e->decode_attempts, 1, __ATOMIC_RELAXED);
	err = bfs_source_read(e->src, i, &w->in, &jpeg, &len, label, msg);
	if (err)
		return err;
	if ((err = bfs_image_header(w->dec, jpeg, len, &img, msg)))
		return err;
	sw = img.width;
	sh = img.height;
	if ((err = within_max_pixels(e, &img, msg)))
		return err;
	if ((err = one_image_buffer(w, &img)))
		return err;
	px = img.format == BFS_IMAGE_JPEG
		? (img.pixel_bytes > w->dec_bytes ? img.pixel_bytes : w->dec_bytes)
		: (img.pixel_bytes > w->pix_cap ? img.pixel_bytes : w->pix_cap) +
		  img.work_bytes;
	rs = e->o.resize_crop
		? (pil_filter(e)
		   ? bfs_resize_pil_crop_scratch_size(sw, sh, e->o.crop_from, e->s1_w, e->s1_h)
		   : bfs_resize_crop_scratch_size(sw, sh, e->o.crop_from, e->s1_w, e->s1_h))
		: resize_scratch(e, sw, sh, e->s1_w, e->s1_h);
	if ((err = reserve(w, w->in.cap + px +
			   (rs > w->scratch_cap ? rs : w->scratch_cap), msg)))
		return err;
	if (img.format != BFS_IMAGE_JPEG && (err = pix_grow(w, &img, msg)))
		return err;
	err = bfs_image_decode(w->dec, jpeg, len, &img, e->o.max_pixels,
			       w->pix, w->pix_cap, &rgb, &sw, &sh, msg);
	if (err)
		return err;
	if (img.format == BFS_IMAGE_JPEG && img.pixel_bytes > w->dec_bytes)
		w->dec_bytes = img.pixel_bytes;
	if (rs > w->scratch_cap) {
		void *n = realloc(w->scratch, rs);
		if (!n) {
			bfs_seterr(msg, "out of memory for resize scratch");
			return -ENOMEM;
		}
		w->scratch = n;
		w->scratch_cap = rs;
	}
	if (e->o.resize_crop && pil_filter(e))
		err = bfs_resize_pil_crop(rgb, sw, sh, (size_t)sw * 3, e->o.crop_from, dst,
					  e->s1_w, e->s1_h, e->s1_dtype, w->scratch);
	else if (e->o.resize_crop)
		err = bfs_resize_rgb_crop(rgb, sw, sh, (size_t)sw * 3,
					  e->o.crop_from, dst, e->s1_w, e->s1_h,
					  e->s1_dtype, w->scratch);
	else
		err = resize_flags(e, rgb, sw, sh, (size_t)sw * 3, dst, e->s1_w, e->s1_h,
				   e->s1_dtype, 0, w->scratch);
	if (err)
		bfs_seterr(msg, "resize %dx%d -> %dx%d failed", sw, sh,
			   e->s1_w, e->s1_h);
	if (!err)
		rec->raw_label = *label;
	else
		rec->decoded = 0;
	pthread_mutex_lock(&e->lock);
	e->st.samples_decoded++;
	e->st.bytes_read += len;
	{
		uint64_t took = bfs__now_ns() - t0;
		double ns = (double)took;

		bfs_hist_add(&e->st.decode, took);
		e->sample_ns = e->sample_ns ? 0.9 * e->sample_ns + 0.1 * ns : ns;
	}
	pthread_mutex_unlock(&e->lock);
	return err;
}

/* ---- RandomResizedCrop ------------------------------------------------ */

/* What one position is made into, and what it draws with. */
struct job {
	struct bfs_batch *b;
	unsigned j;
	uint64_t id, epoch;
	uint64_t key;      /* the position's source sample: its draws */
	void *dst;         /* the output sample */
	void *s1;          /* without rrc: its stage-1 sample */
};

/* Grow one of worker w's buffers to at least need bytes (the reservation
 * was made).  0 or -ENOMEM. */
static int grow(void **buf, size_t *cap, size_t need)
{
	void *n;

	if (need <= *cap)
		return 0;
	if (!(n = realloc(*buf, need)))
		return -ENOMEM;
	*buf = n;
	*cap = need;
	return 0;
}

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* The IDCT scale for --decode-scale auto: the largest of 8, 4, 2 whose
 * scaled box still holds the output on both sides, else 1. */
static int auto_scale(const bfs_rrc_box *box, int oh, int ow)
{
	for (int s = 8; s >= 2; s /= 2)
		if (box->w / s >= ow && box->h / s >= oh)
			return s;
	return 1;
}

/* Claim room for len bytes in b's arena: the offset, or (size_t)-1. */
static size_t arena_claim(bfs_engine *e, struct bfs_batch *b, size_t len)
{
	size_t off = (size_t)-1;

	pthread_mutex_lock(&e->lock);
	if (b->arena && len <= e->arena_cap - b->arena_used) {
		off = b->arena_used;
		b->arena_used += len;
	}
	pthread_mutex_unlock(&e->lock);
	return off;
}

/* Where the resize reads a box from: h rows of w pixels, stride apart. */
struct rrc_src {
	const uint8_t *p;
	size_t stride;
	int w, h;
};

/* Look source sample id up in the store.  With view (the store lends
 * views) *copy points at its bytes in the store, lent until the caller's
 * put_view; else they are copied into w->s1 (grown to fit) and *copy is
 * w->s1.  1 (a hit: *shape is the copy's), 0 (decode it; no view held),
 * or an error.  Hits are counted by the caller (after put_view: no lock is
 * taken with a view held); damaged copies here. */
static int rrc_lookup(struct worker *w, const bfs_sample_identity *id, size_t out_need,
		      int view, int64_t *label, bfs_store_shape *shape, const uint8_t **copy,
		      char *msg)
{
	bfs_engine *e = w->e;
	uint64_t most = 3 * (e->o.max_pixels ? e->o.max_pixels : (uint64_t)1 << 32);
	const void *p = NULL;
	size_t got = 0;
	int err;

	if (view) {
		err = e->store.get_view(w->sr, id, &p, &got, shape, label);
	} else {
		err = e->store.get(w->sr, id, w->s1, w->s1_cap, &got, shape, label);
		if (err == -ENOBUFS && got <= most) { /* room for it, and again */
			if ((err = reserve(w, w->in.cap + w->dec_bytes + w->pix_cap + got +
					   max_sz(out_need, w->out_cap) + w->scratch_cap, msg)))
				return err;
			if (grow((void **)&w->s1, &w->s1_cap, got))
				return -ENOMEM;
			err = e->store.get(w->sr, id, w->s1, w->s1_cap, &got, shape, label);
		}
		p = w->s1;
	}
	/* a copy whose shape does not add up is not used */
	if (err == 0 && ((uint64_t)shape->h * shape->w * 3 != got || !shape->h || !shape->w ||
			 shape->src_h < shape->h || shape->src_w < shape->w)) {
		err = -EINVAL;
		if (view)
			e->store.put_view(w->sr);
	}
	if (err == BFS_E_CRC) {
		pthread_mutex_lock(&e->lock);
		e->st.cache_crc_errors++;
		pthread_mutex_unlock(&e->lock);
	}
	if (err == 0)
		*copy = p;
	return err == 0;
}

/* Whether source sample i's JPEG has decoded whole in this engine's life
 * (e->whole_ok), and saying that it has. */
static int whole_ok(const bfs_engine *e, uint64_t i)
{
	return (__atomic_load_n(&e->whole_ok[i / 64], __ATOMIC_RELAXED) >> (i % 64)) & 1;
}

static void set_whole_ok(bfs_engine *e, uint64_t i)
{
	__atomic_fetch_or(&e->whole_ok[i / 64], (uint64_t)1 << (i % 64), __ATOMIC_RELAXED);
}

/*
 * Decode the sw x sh JPEG of source sample i for position jb: whole, and
 * reduced to cache_res, when the store wants it (the copy goes to the
 * slot's arena, for the batch's offer) or the image is larger than
 * cache_res; else its box alone (exact, or at 1/scale with --decode-scale
 * auto), stopping after the box when the JPEG has decoded whole before
 * (*stopped 1).  *src is then the box, in the decoded pixels or in the
 * copy.  0 or an error.
 */
static int rrc_decode(struct worker *w, const struct job *jb, uint64_t i, const uint8_t *jpeg,
		      size_t len, const bfs_image_info *img, const bfs_rrc_box *box,
		      int oh, int ow, size_t out_need, struct cache_rec *rec,
		      struct rrc_src *src, int *stopped, char *msg)
{
	bfs_engine *e = w->e;
	bfs_box want = { box->x, box->y, box->w, box->h };
	bfs_rrc_box sbox;
	const uint8_t *copy;
	size_t px, s1_need, rs;
	int sw = img->width, sh = img->height, is_jpeg = img->format == BFS_IMAGE_JPEG;
	int rw, rh, whole, offer, scale = 1, err;

	*stopped = 0;
	bfs_rrc_reduced_size(sw, sh, e->cache_res, &rw, &rh);
	offer = w->sr && jb->b->arena && (!e->store.wants || e->store.wants(e->store.ctx));
	/* PNG and WebP are decoded whole, then cropped: the same bytes */
	whole = !is_jpeg ||
		(!e->o.decode_scale_auto && (offer || rw != sw || rh != sh || e->o.decode_whole));
	if (is_jpeg && e->o.decode_scale_auto)
		scale = auto_scale(box, oh, ow);
	if ((err = one_image_buffer(w, img)))
		return err;
	px = !is_jpeg ? max_sz(img->pixel_bytes, w->pix_cap) + img->work_bytes
		: max_sz(whole ? (size_t)sw * sh * 4
			       : bfs_decode_box_scratch(sw, sh, &want, scale), w->dec_bytes);
	s1_need = whole && (rw != sw || rh != sh) ? (size_t)rw * rh * 3 : 0;
	rs = whole ? resize_scratch(e, sw, sh, rw, rh) : 0;
	if ((err = reserve(w, w->in.cap + px + max_sz(s1_need, w->s1_cap) +
			   max_sz(out_need, w->out_cap) + max_sz(rs, w->scratch_cap), msg)))
		return err;
	if (is_jpeg && px > w->dec_bytes)
		w->dec_bytes = px;
	if (!whole) {
		bfs_decoded_box db;
		unsigned flags = whole_ok(e, i) ? BFS_DECODE_BOX_STOP : 0;

		if ((err = bfs_decode_box_flags(w->dec, jpeg, len, e->o.max_pixels, &want, scale,
						flags, &db, msg)))
			return err;
		if (flags)
			*stopped = 1;
		else /* it read the whole stream */
			set_whole_ok(e, i);
		*src = (struct rrc_src){ db.rgb, db.stride, db.box.w, db.box.h };
		return 0;
	}
	if (is_jpeg) {
		err = bfs_decode_rgb(w->dec, jpeg, len, e->o.max_pixels, &copy, &sw, &sh, msg);
		if (!err)
			set_whole_ok(e, i);
	} else if (!(err = pix_grow(w, img, msg)))
		err = bfs_image_decode(w->dec, jpeg, len, img, e->o.max_pixels, w->pix,
				       w->pix_cap, &copy, &sw, &sh, msg);
	if (err)
		return err;
	if (rw != sw || rh != sh) { /* the copy the cache keeps */
		if (grow((void **)&w->s1, &w->s1_cap, s1_need) ||
		    grow(&w->scratch, &w->scratch_cap, rs)) {
			bfs_seterr(msg, "out of memory for a %dx%d copy", rw, rh);
			return -ENOMEM;
		}
		resize_flags(e, copy, sw, sh, (size_t)sw * 3, w->s1, rw, rh, BFS_DTYPE_UINT8, 0,
			     w->scratch);
		copy = w->s1;
	}
	if (offer) {
		size_t n = (size_t)rw * rh * 3, off = arena_claim(e, jb->b, n);

		if (off != (size_t)-1) { /* else offered again next epoch */
			memcpy(jb->b->arena + off, copy, n);
			rec->off = off;
			rec->len = n;
			rec->shape = (bfs_store_shape){ (uint32_t)rh, (uint32_t)rw, (uint32_t)sh,
							(uint32_t)sw };
			rec->decoded = 1;
		}
	}
	bfs_rrc_map_box(box, sw, sh, rw, rh, &sbox);
	*src = (struct rrc_src){ copy + ((size_t)sbox.y * rw + sbox.x) * 3, (size_t)rw * 3,
				 sbox.w, sbox.h };
	return 0;
}

/* The box src resized to the epoch's oh x ow into jb->dst, mirrored in
 * the same pass when flipped: straight in (streamed: BFS_RESIZE_STREAM),
 * or through w->out when stage 2 normalizes or lays it out.  *need gets the memory it reserves; with
 * wait 0 (src is a store's view) it does not wait for it: -EAGAIN.  0 or
 * an error. */
static int rrc_output(struct worker *w, const struct job *jb, const struct rrc_src *src,
		      const bfs_aug *a, int oh, int ow, size_t out_need, int wait, size_t *need,
		      char *msg)
{
	bfs_engine *e = w->e;
	bfs_dtype rdt = e->o.dtype == BFS_DTYPE_UINT8 ? BFS_DTYPE_UINT8 : BFS_DTYPE_FLOAT32;
	size_t rs = resize_scratch(e, src->w, src->h, ow, oh);
	unsigned flip = a->flip ? BFS_RESIZE_MIRROR : 0;
	bfs_aug none = { 0 };
	bfs_post_opts po;
	int err;

	*need = w->in.cap + w->dec_bytes + w->pix_cap + w->s1_cap +
		max_sz(out_need, w->out_cap) + max_sz(rs, w->scratch_cap);
	if ((err = reserve_or_not(w, *need, wait, msg)))
		return err;
	if (grow(&w->scratch, &w->scratch_cap, rs) || grow(&w->out, &w->out_cap, out_need)) {
		bfs_seterr(msg, "out of memory for RandomResizedCrop scratch");
		return -ENOMEM;
	}
	if (!out_need) /* the batch: written once, read by the consumer */
		err = resize_flags(e, src->p, src->w, src->h, src->stride, jb->dst, ow, oh,
				   e->o.dtype, flip | BFS_RESIZE_STREAM, w->scratch);
	else if (!(err = resize_flags(e, src->p, src->w, src->h, src->stride, w->out, ow, oh,
				      rdt, flip, w->scratch))) {
		bfs__post_of(e, (unsigned)jb->epoch, rdt, &po);
		bfs_post_apply(&po, &none, w->out, jb->dst); /* mirrored already */
	}
	if (err)
		bfs_seterr(msg, "resize %dx%d -> %dx%d failed", src->w, src->h, ow, oh);
	return err;
}

/*
 * Make position jb->j of an rrc batch from source sample i: the stage-1
 * copy from the store, or decoded (rrc_decode); the box drawn from (seed,
 * epoch, jb->key) over the image's size; the box resized, flipped,
 * normalized and laid out into jb->dst (rrc_output).  *rr records the
 * draw.  0 or an error (msg says what).
 */
static int make_rrc(struct worker *w, const struct job *jb, uint64_t i, int64_t *label,
		    struct cache_rec *rec, struct rrc_rec *rr, char *msg)
{
	bfs_engine *e = w->e;
	bfs_sample_identity id;
	bfs_store_shape shape;
	bfs_rrc_box box, sbox;
	struct rrc_src src = { NULL, 0, 0, 0 };
	bfs_image_info img;
	bfs_aug a = { 0 };
	const uint8_t *jpeg = NULL, *copy = NULL;
	size_t len = 0, out_need, in_cap, need = 0;
	uint64_t t0 = bfs__now_ns();
	int err, hit = 0, sw, sh, oh, ow, tries = 0, stopped = 0;
	int view = w->sr && e->store.get_view && e->store.put_view;

	msg[0] = '\0';
	rec->decoded = 0;
	rr->ok = 0;
	if ((err = bfs_source_identity(e->src, i, &id)))
		return err;
	rec->id = id;
	bfs_engine_epoch_shape(e, (unsigned)jb->epoch, &oh, &ow);
	out_need = e->o.normalize || e->o.nchw /* a flip is mirrored in the resize */
		? (size_t)oh * ow * 3 * (e->o.dtype == BFS_DTYPE_UINT8 ? 1 : 4) : 0;
again:
	if (w->sr && (hit = rrc_lookup(w, &id, out_need, view, label, &shape, &copy, msg)) < 0)
		return hit;
	/* with a view held (hit && view), nothing below waits until put_view */
	if (hit) {
		sw = (int)shape.src_w;
		sh = (int)shape.src_h;
	} else {
		if (!w->dec && (err = decoder_new(w->e, &w->dec)))
			return err;
		in_cap = bfs__pow2_at_least((size_t)id.length + 4, w->in.cap);
		if ((err = reserve(w, in_cap + w->dec_bytes + w->pix_cap + w->s1_cap +
				   w->out_cap + w->scratch_cap, msg)))
			return err;
		__atomic_add_fetch(&e->decode_attempts, 1, __ATOMIC_RELAXED);
		if ((err = bfs_source_read(e->src, i, &w->in, &jpeg, &len, label, msg)) ||
		    (err = bfs_image_header(w->dec, jpeg, len, &img, msg)))
			return err;
		sw = img.width;
		sh = img.height;
		if ((err = within_max_pixels(e, &img, msg)))
			return err;
	}
	bfs_rrc_draw(e->o.seed, jb->epoch, jb->key, sw, sh, &e->o.rrc, &box);
	if (e->o.augment_flip)
		bfs_aug_draw(e->o.seed, jb->epoch, jb->key, 1, 1, 1, 1, 1, 0, &a);
	if (hit) {
		bfs_rrc_map_box(&box, sw, sh, (int)shape.w, (int)shape.h, &sbox);
		src = (struct rrc_src){ copy + ((size_t)sbox.y * shape.w + sbox.x) * 3,
					(size_t)shape.w * 3, sbox.w, sbox.h };
	} else {
		err = rrc_decode(w, jb, i, jpeg, len, &img, &box, oh, ow, out_need, rec, &src,
				 &stopped, msg);
		uint64_t took = bfs__now_ns() - t0;

		pthread_mutex_lock(&e->lock);
		e->st.samples_decoded++;
		e->st.boxes_stopped_early += (uint64_t)stopped;
		e->st.bytes_read += len;
		bfs_hist_add(&e->st.decode, took);
		if (!err) {
			double ns = (double)took;

			e->sample_ns = e->sample_ns ? 0.9 * e->sample_ns + 0.1 * ns : ns;
		}
		pthread_mutex_unlock(&e->lock);
		if (err) {
			rec->decoded = 0;
			return err;
		}
	}
	err = rrc_output(w, jb, &src, &a, oh, ow, out_need, !(hit && view), &need, msg);
	if (hit && view)
		e->store.put_view(w->sr);
	if (err == -EAGAIN && hit && view) {
		/* it would have waited for memory with the view held: wait
		 * without it, then look again (a view no more after 3 tries) */
		if ((err = reserve(w, need, msg)))
			return err;
		if (++tries == 3)
			view = 0;
		goto again;
	}
	if (hit) {
		pthread_mutex_lock(&e->lock);
		e->st.cache_hits++;
		pthread_mutex_unlock(&e->lock);
	}
	if (err) {
		rec->decoded = 0;
		return err;
	}
	rec->raw_label = *label;
	rr->box = box;
	rr->flip = a.flip;
	rr->src_w = sw;
	rr->src_h = sh;
	rr->ok = 1;
	return 0;
}

/* Make the sample of a position: rrc's, or decode-and-resize's into the
 * job's stage-1 buffer. */
static int make(struct worker *w, const struct job *jb, uint64_t i, int64_t *label,
		struct cache_rec *rec, char *msg)
{
	if (w->e->rrc)
		return make_rrc(w, jb, i, label, rec, &jb->b->rrc[jb->j], msg);
	return make_sample(w, i, jb->s1, label, rec, msg);
}

/* Stage 2 for position j: augmentation drawn from (seed, epoch, sample),
 * normalization and layout, from the stage-1 sample s1 into out. */
static void finish(bfs_engine *e, uint64_t id, uint64_t i, const void *s1,
		   void *out)
{
	bfs_aug a = { 0 };

	if (!e->post || e->rrc) /* rrc: made whole by make_rrc */
		return;
	if (e->o.augment_flip || e->o.augment_crop)
		bfs_aug_draw(e->o.seed, bfs__epoch_of(e, id), i, e->s1_h, e->s1_w,
			     e->o.height, e->o.width, e->o.augment_flip,
			     e->o.augment_crop, &a);
	else
		bfs_aug_draw(0, 0, 0, e->s1_h, e->s1_w, e->o.height, e->o.width,
			     0, 0, &a);
	bfs_post_apply(&e->post_o, &a, s1, out);
}

static int lasting_error(int err)
{
	return bfs__lasting_error(err);
}

/* Make source sample i (make_sample), unless it is already known to be
 * bad: then its code and message come back without decoding it again.
 * A lasting failure is recorded in e->bad; *fresh says it was recorded
 * now (the caller reports it once). */
static int try_sample(struct worker *w, const struct job *jb, uint64_t i, int64_t *label,
		      struct cache_rec *rec, char *msg, int *fresh)
{
	bfs_engine *e = w->e;
	bfs_sample_state state;
	int err, code = 0, claimed;

	*fresh = 0;
	pthread_mutex_lock(&e->lock);
	/* Another worker trying i now (the same sample in another batch,
	 * or a replacement search passing it) answers for both. */
	while ((state = bfs_badset_state(e->bad, i, &code)) == BFS_SAMPLE_PENDING &&
	       !e->stop)
		pthread_cond_wait(&e->bad_cv, &e->lock);
	if (state == BFS_SAMPLE_BAD) {
		known_message_locked(e, i, code, msg);
		pthread_mutex_unlock(&e->lock);
		rec->decoded = 0;
		return code;
	}
	claimed = bfs_badset_claim(e->bad, i) == 0;
	pthread_mutex_unlock(&e->lock);

	err = make(w, jb, i, label, rec, msg);
	if (!err) /* a label the offset overflows makes the sample bad */
		err = bfs_label_add_offset(label, e->o.label_offset, msg);
	trim(w);

	pthread_mutex_lock(&e->lock);
	if (err && lasting_error(err))
		*fresh = bfs_badset_mark_bad(e->bad, i, err) == 1;
	else if (claimed)
		bfs_badset_unclaim(e->bad, i);
	pthread_cond_broadcast(&e->bad_cv);
	pthread_mutex_unlock(&e->lock);
	return err;
}

/* Skip mode: the first sample after bad sample i (i+1, i+2, ...,
 * wrapping) that decodes, made into s1; *r says which.  Samples known to
 * be bad are passed over without decoding, and a sample another worker
 * is trying is waited for, so each bad one is decoded once.  0, or the
 * error that ends the search (every sample bad: `err` of i). */
static int replace(struct worker *w, const struct job *jb, uint64_t i, int err,
		   int64_t *label, struct cache_rec *rec, uint64_t *r)
{
	bfs_engine *e = w->e;
	char rmsg[BFS_ERRMSG_MAX];

	for (;;) {
		uint64_t c;
		int claimed, rerr, rfresh = 0;

		pthread_mutex_lock(&e->lock);
		while ((c = bfs_badset_next(e->bad, i)) != i && !e->stop &&
		       bfs_badset_state(e->bad, c, NULL) == BFS_SAMPLE_PENDING)
			pthread_cond_wait(&e->bad_cv, &e->lock);
		if (c == i || e->stop) {
			pthread_mutex_unlock(&e->lock);
			return err;
		}
		claimed = bfs_badset_claim(e->bad, c) == 0;
		pthread_mutex_unlock(&e->lock);

		rerr = make(w, jb, c, label, rec, rmsg);
		if (!rerr)
			rerr = bfs_label_add_offset(label, e->o.label_offset,
						    rmsg);
		trim(w);

		pthread_mutex_lock(&e->lock);
		if (rerr && lasting_error(rerr))
			rfresh = bfs_badset_mark_bad(e->bad, c, rerr) == 1;
		else if (claimed)
			bfs_badset_unclaim(e->bad, c);
		pthread_cond_broadcast(&e->bad_cv);
		pthread_mutex_unlock(&e->lock);
		if (!rerr) {
			*r = c;
			return 0;
		}
		if (rfresh)
			report_error(e, c, rerr, rmsg);
		if (!lasting_error(rerr))
			return rerr; /* not the sample's fault: no substitute */
	}
}

/* Produce position j of slot b's batch.  In skip mode a bad sample is
 * replaced by the next source sample that decodes (wrapping), so the
 * result is a function of the data alone.  Returns 0 or the error for
 * position j. */
int bfs__produce(struct worker *w, struct bfs_batch *b, unsigned j, char *msg)
{
	bfs_engine *e = w->e;
	uint64_t id = b->id, i = bfs__sample_of(e, id, j), r;
	size_t sb = bfs_engine_batch_sample_bytes(e, id);
	struct job jb = {
		.b = b, .j = j, .id = id, .epoch = bfs__epoch_of(e, id), .key = i,
		.dst = b->images + (size_t)j * sb,
		.s1 = b->stage1 ? b->stage1 + (size_t)j * e->s1_bytes : b->images + (size_t)j * sb,
	};
	int64_t *label = &b->labels[j];
	struct cache_rec *rec = &b->rec[j];
	int fresh, err;
	long at;

	if (b->rrc)
		b->rrc[j].ok = 0;
	b->served[j] = i;
	err = try_sample(w, &jb, i, label, rec, msg, &fresh);
	if (!err) {
		finish(e, id, i, jb.s1, jb.dst);
		return 0;
	}
	if (e->o.on_error == BFS_ON_ERROR_FAIL || !lasting_error(err)) {
		if (fresh)
			report_error(e, i, err, msg);
		return err;
	}
	at = fresh ? report_error(e, i, err, msg) : -1;
	if (replace(w, &jb, i, err, label, rec, &r) != 0)
		return err;
	note_replacement(e, at, r);
	b->served[j] = r;
	finish(e, id, i, jb.s1, jb.dst);
	return 0;
}
