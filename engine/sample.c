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

#include "engine/augment.h"
#include "engine/decode.h"
#include "engine/image.h"
#include "engine/label.h"
#include "engine/resize.h"

/* ---- errors ----------------------------------------------------------- */

/* Record bad sample `sample` (just marked BAD in e->bad, so once) in the
 * error list while it has room: past MAX_ERRORS bad samples only e->bad
 * counts them.  Returns its place in the list, or -1. */
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
 * BFS_E_MEMORY, with msg saying which --mem would do. */
static int reserve(struct worker *w, size_t want, char *msg)
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
	if (bfs_decoder_create(&w->dec))
		w->dec = NULL; /* retried before the next sample */
	w->dec_bytes = 0;
	bfs_buf_free(&w->in);
	free(w->scratch);
	w->scratch = NULL;
	w->scratch_cap = 0;
	free(w->pix);
	w->pix = NULL;
	w->pix_cap = 0;
	pthread_mutex_lock(&e->lock);
	e->scratch_used -= w->held;
	pthread_cond_broadcast(&e->room);
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
	w->held = 0;
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
		err = e->store.get(w->sr, &id, dst, e->s1_bytes, label);
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
	if (!w->dec && (err = bfs_decoder_create(&w->dec)))
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
	if (e->o.max_pixels && (uint64_t)sw * (uint64_t)sh > e->o.max_pixels) {
		bfs_seterr(msg, "%dx%d %s has %llu pixels, more than the limit of %llu",
			   sw, sh, bfs_image_format_name(img.format),
			   (unsigned long long)sw * (unsigned long long)sh,
			   (unsigned long long)e->o.max_pixels);
		return BFS_E_TOOBIG;
	}
	/* One decoded-image buffer at a time, so that what the budget left
	 * for one image (bfs_image_scratch_max) covers it: a JPEG decodes in
	 * the decoder's scratch, anything else in w->pix, so the other one
	 * goes first. */
	if (img.format == BFS_IMAGE_JPEG && w->pix) {
		free(w->pix);
		w->pix = NULL;
		w->pix_cap = 0;
	} else if (img.format != BFS_IMAGE_JPEG && w->dec_bytes) {
		bfs_decoder_destroy(w->dec);
		w->dec_bytes = 0;
		if ((err = bfs_decoder_create(&w->dec))) {
			w->dec = NULL;
			return err;
		}
	}
	px = img.format == BFS_IMAGE_JPEG
		? (img.pixel_bytes > w->dec_bytes ? img.pixel_bytes : w->dec_bytes)
		: (img.pixel_bytes > w->pix_cap ? img.pixel_bytes : w->pix_cap) +
		  img.work_bytes;
	rs = e->o.resize_crop
		? bfs_resize_crop_scratch_size(sw, sh, e->o.crop_from, e->s1_w, e->s1_h)
		: bfs_resize_scratch_size(sw, sh, e->s1_w, e->s1_h);
	if ((err = reserve(w, w->in.cap + px +
			   (rs > w->scratch_cap ? rs : w->scratch_cap), msg)))
		return err;
	if (img.format != BFS_IMAGE_JPEG && img.pixel_bytes > w->pix_cap) {
		uint8_t *n = realloc(w->pix, img.pixel_bytes);

		if (!n) {
			bfs_seterr(msg, "out of memory for a %dx%d image", sw, sh);
			return -ENOMEM;
		}
		w->pix = n;
		w->pix_cap = img.pixel_bytes;
	}
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
	if (e->o.resize_crop)
		err = bfs_resize_rgb_crop(rgb, sw, sh, (size_t)sw * 3,
					  e->o.crop_from, dst, e->s1_w, e->s1_h,
					  e->s1_dtype, w->scratch);
	else
		err = bfs_resize_rgb(rgb, sw, sh, (size_t)sw * 3, dst, e->s1_w,
				     e->s1_h, e->s1_dtype, w->scratch);
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
		double ns = (double)(bfs__now_ns() - t0);
		e->sample_ns = e->sample_ns ? 0.9 * e->sample_ns + 0.1 * ns : ns;
	}
	pthread_mutex_unlock(&e->lock);
	return err;
}

/* Stage 2 for position j: augmentation drawn from (seed, epoch, sample),
 * normalization and layout, from the stage-1 sample s1 into out. */
static void finish(bfs_engine *e, uint64_t id, uint64_t i, const void *s1,
		   void *out)
{
	bfs_aug a = { 0 };

	if (!e->post)
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

/* Does a failure say something about the sample itself (so trying it
 * again gives the same answer), rather than about this moment? */
static int lasting_error(int err)
{
	return err != -ENOMEM && err != -EAGAIN && err != -EINTR;
}

/* Make source sample i (make_sample), unless it is already known to be
 * bad: then its code and message come back without decoding it again.
 * A lasting failure is recorded in e->bad; *fresh says it was recorded
 * now (the caller reports it once). */
static int try_sample(struct worker *w, uint64_t i, void *s1, int64_t *label,
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

	err = make_sample(w, i, s1, label, rec, msg);
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
static int replace(struct worker *w, uint64_t i, int err, void *s1,
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

		rerr = make_sample(w, c, s1, label, rec, rmsg);
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

/* Produce position j of batch id.  In skip mode a bad sample is replaced
 * by the next source sample that decodes (wrapping), so the result is a
 * function of the data alone.  Returns 0 or the error for position j. */
int bfs__produce(struct worker *w, uint64_t id, unsigned j, void *dst,
		   void *s1, int64_t *label, struct cache_rec *rec, char *msg)
{
	bfs_engine *e = w->e;
	uint64_t i = bfs__sample_of(e, id, j), r;
	int fresh, err = try_sample(w, i, s1, label, rec, msg, &fresh);
	long at;

	if (!err) {
		finish(e, id, i, s1, dst);
		return 0;
	}
	if (e->o.on_error == BFS_ON_ERROR_FAIL || !lasting_error(err)) {
		if (fresh)
			report_error(e, i, err, msg);
		return err;
	}
	at = fresh ? report_error(e, i, err, msg) : -1;
	if (replace(w, i, err, s1, label, rec, &r) != 0)
		return err;
	note_replacement(e, at, r);
	finish(e, id, i, s1, dst);
	return 0;
}
