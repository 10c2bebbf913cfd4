/*
 * engine.c - worker pool and batch slots (see engine.h).
 *
 * DESIGN
 * Producers: `threads` workers.  Consumers: readers in bfs_engine_get().
 * Everything shared lives in struct bfs_engine and is protected by
 * e->lock, except the pixels a worker writes: a worker that claimed
 * sample j of a slot owns images[j] and labels[j] until it reports back.
 *
 * A slot holds one batch.  Its life: FREE -> FILLING (samples handed out
 * one at a time, several workers on one batch) -> READY or FAILED.  A
 * slot is reused (LRU) only when nobody pins it and no worker is still
 * writing into it (inflight == 0).  Buffers are allocated once per slot
 * and reused for every batch that slot ever holds.
 *
 * Scheduling: a batch some reader waits on goes first (oldest wait
 * first); read-ahead comes after, in the order it was asked for, which
 * is nearest batch first.  Read-ahead never evicts a batch that was
 * produced but not yet read, so it cannot thrash.
 *
 * Memory: the budget (opts.mem_bytes) is split once at create into a
 * scratch pool (decoder pixels, encoded record, resize rows) and as many
 * batch slots as the rest holds.  A worker reserves scratch from the pool
 * before it grows a buffer and gives back what it holds above
 * SCRATCH_BASE after each sample, so a rare huge image waits for room
 * instead of pushing the process past the budget.
 *
 * Autotuning: each reader (keyed by pid) has its own read-ahead depth.
 * A reader that had to wait for a batch gets one more batch of depth,
 * but only while the workers were not already busy all the time (more
 * depth cannot help a saturated pool); a reader that has not waited for
 * a while gives one back.  Depth is capped by the slots it may use.
 */
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/augment.h"
#include "engine/badset.h"
#include "engine/decode.h"
#include "engine/label.h"
#include "engine/npy.h"
#include "engine/permute.h"
#include "engine/resize.h"
#include "engine/version.h"

#define MAX_ERRORS BFS_ENGINE_MAX_ERRORS /* bad samples whose records are kept */
#define SCRATCH_BASE (8u << 20) /* per-worker scratch kept between samples */
#define MAX_SLOTS 1024
#define READER_IDLE_NS (10ull * 1000000000ull) /* forget quiet readers */

enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_FAILED };

struct bfs_batch {
	/* all fields protected by e->lock, except the pixels (see DESIGN) */
	enum slot_state state;
	uint64_t id;
	unsigned n;           /* samples in this batch */
	unsigned next;        /* next sample to hand out */
	unsigned done;        /* samples finished (or abandoned) */
	unsigned inflight;    /* samples a worker is working on */
	unsigned pins;        /* readers holding it */
	int urgent;           /* a reader waits or is about to */
	uint64_t seq;         /* order in which work was asked for */
	uint64_t last_use;    /* LRU tick */
	int consumed;         /* a reader got it at least once */
	int pushed;           /* handed on by on_batch_ready */
	int cancelled;        /* read-ahead abandoned to free the slot */
	int err;              /* first error (lowest sample) when FAILED */
	unsigned err_at;      /* sample position of err */
	char errmsg[BFS_ERRMSG_MAX];
	uint8_t *images;      /* capacity: opts.batch * sample_bytes */
	/* With o.slot_dir the slot is a file: the batch's NPY header, then
	 * the images (see slot files below) */
	int fd;               /* -1: images is plain memory */
	uint8_t *map;         /* the file's mapping; images = map + slot_head */
	size_t map_len;
	size_t file_len;      /* the file's size: head + n samples */
	int file_ok;          /* the header fits the head room exactly */
	int exposed;          /* handed to a reader as a file since filled */
	uint64_t held_pass;   /* victim search that found its file held */
	uint8_t *stage1;      /* B cached-form samples when stage 2 runs,
				 else NULL (images are the cached form) */
	int64_t *labels;
	/* cache bookkeeping, position j owned like images[j] */
	struct cache_rec *rec;
	bfs_cache_item *items;
	bfs_engine *e;        /* for the cache writer's done callback */
};

/* What the cache needs of position j once the batch is complete. */
struct cache_rec {
	bfs_cache_key key;    /* of the sample actually decoded */
	int64_t raw_label;    /* before --label-offset */
	int decoded;          /* 1: decoded here, so worth inserting */
};

struct worker {
	bfs_engine *e;
	pthread_t thread;
	bfs_decoder *dec;
	size_t dec_bytes;      /* largest image the decoder has held */
	bfs_buf in;            /* encoded bytes */
	void *scratch;         /* resize scratch */
	size_t scratch_cap;
	size_t held;           /* scratch reserved from the budget */
	struct bfs_batch *slot;/* the slot of the sample it works on, or NULL
				* (protected by e->lock) */
	bfs_cache_reader *cr;  /* NULL without a cache */
};

struct reader {
	uint64_t key;          /* 0: entry unused */
	uint64_t last_id;
	uint64_t last_ns;      /* when it moved to last_id */
	uint64_t settled_id;   /* last batch whose wait (or not) was counted */
	double interval_ns;    /* EWMA of time between new batches */
	unsigned depth;
	unsigned calm;         /* new batches since its last wait */
	uint64_t idle_mark;    /* e->idle_ns when depth last grew */
	uint64_t mark_ns;
	uint64_t batches, waits, wait_ns;
};

struct bfs_engine {
	bfs_source *src;
	bfs_engine_opts o;
	uint64_t nsamples;    /* in the source */
	uint64_t epoch_n;     /* samples one epoch of this rank serves */
	bfs_order *orders;    /* one per epoch: shuffle and rank slicing */
	uint64_t per_epoch;   /* batches per epoch */
	uint64_t total;       /* per_epoch * epochs */
	size_t sample_bytes;
	size_t images_cap;    /* bytes of one slot's image buffer */
	size_t slot_head;     /* slot files: a full batch's NPY header */
	int s1_h, s1_w;       /* stage-1 (cached) sample size */
	bfs_dtype s1_dtype;
	size_t s1_bytes;
	int post;             /* stage 2 does something */
	bfs_post_opts post_o;

	pthread_mutex_t lock;
	pthread_cond_t work;  /* a slot got work, or stop */
	pthread_cond_t done;  /* a slot changed state */
	int stop;                          /* protected by lock */
	struct bfs_batch *slots;           /* protected by lock */
	unsigned nslots;
	uint64_t seq, tick;                /* protected by lock */
	uint64_t held_pass;                /* protected by lock */
	struct worker *workers;
	unsigned nworkers;

	bfs_sample_error *errors;          /* protected by lock: the first
					    * MAX_ERRORS bad samples */
	size_t nerrors;                    /* protected by lock */
	bfs_badset *bad;                   /* protected by lock: every bad
					    * sample, and those being tried */
	pthread_cond_t bad_cv;             /* a pending sample was decided */

	pthread_cond_t room;               /* memory was given back */
	size_t scratch_budget;             /* the scratch pool, fixed at create */
	size_t scratch_used;               /* protected by lock */
	size_t slot_bytes;                 /* one slot's batch memory */
	uint64_t slot_mem;                 /* protected by lock: slots' batch
					    * memory allocated now */
	struct worker *borrower;           /* protected by lock: the worker
					    * freeing slot memory for scratch */
	/* Files a reader still held when their slot moved on (see slot
	 * files): memory the mount caused, counted in the budget until the
	 * reader lets go.  Protected by lock. */
	struct held_file { int fd; size_t len; } *held;
	unsigned nheld, held_cap;
	uint64_t held_bytes;
	unsigned nexposed;                 /* protected by lock: slots whose
					    * file was handed to a reader */

	struct reader readers[BFS_MAX_READERS]; /* protected by lock */
	uint64_t idle_ns;                  /* workers' waiting, protected by lock */
	unsigned idle_workers;             /* protected by lock */
	uint64_t idle_since;               /* protected by lock */
	double sample_ns;                  /* EWMA per sample, protected by lock */
	uint64_t created_ns;

	uint64_t decode_attempts;          /* atomic */
	bfs_engine_stats st;               /* protected by lock */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t held_bytes_locked(const bfs_engine *e)
{
	return e->held_bytes;
}

/* ---- geometry --------------------------------------------------------- */

/* The cached (stage-1) form of a sample for these options. */
static void stage1_of(const bfs_engine_opts *o, int *h, int *w, bfs_dtype *dt,
		      int *post)
{
	int oh = o->height ? o->height : 224, ow = o->width ? o->width : 224;

	*post = o->augment_flip || o->augment_crop || o->nchw || o->normalize;
	*h = oh;
	*w = ow;
	if (o->augment_crop) { /* crop HxW out of a sample 8/7 larger */
		*h = oh + (oh + 3) / 7;
		*w = ow + (ow + 3) / 7;
	}
	/* stage 2 computes in float32 unless it only moves uint8 bytes */
	*dt = *post && o->dtype == BFS_DTYPE_FLOAT16 ? BFS_DTYPE_FLOAT32 : o->dtype;
}

void bfs_engine_cached_shape(const bfs_engine *e, int *h, int *w)
{
	*h = e->s1_h;
	*w = e->s1_w;
}

int bfs_engine_sample_aug(const bfs_engine *e, uint64_t id, unsigned j,
			  int *flip, int *x0, int *y0)
{
	bfs_aug a = { 0 };
	uint64_t i;

	if (id >= e->total || j >= bfs_engine_batch_count(e, id))
		return -EINVAL;
	i = bfs_order_sample(&e->orders[id / e->per_epoch],
			     (id % e->per_epoch) * e->o.batch + j);
	if (e->o.augment_flip || e->o.augment_crop)
		bfs_aug_draw(e->o.seed, id / e->per_epoch, i, e->s1_h, e->s1_w,
			     e->o.height, e->o.width, e->o.augment_flip,
			     e->o.augment_crop, &a);
	*flip = a.flip;
	*x0 = a.x0;
	*y0 = a.y0;
	return 0;
}

uint64_t bfs_engine_batches_per_epoch(const bfs_engine *e)
{
	return e->per_epoch;
}

unsigned bfs_engine_epochs(const bfs_engine *e) { return e->o.epochs; }
uint64_t bfs_engine_epoch_samples(const bfs_engine *e) { return e->epoch_n; }
size_t bfs_engine_sample_bytes(const bfs_engine *e) { return e->sample_bytes; }
const bfs_engine_opts *bfs_engine_options(const bfs_engine *e) { return &e->o; }

unsigned bfs_engine_batch_count(const bfs_engine *e, uint64_t id)
{
	uint64_t k, first;

	if (id >= e->total)
		return 0;
	k = id % e->per_epoch;
	first = k * e->o.batch;
	if (first + e->o.batch <= e->epoch_n)
		return e->o.batch;
	return (unsigned)(e->epoch_n - first);
}

/* Source index of position j of batch id: the epoch's order (file order,
 * or the stateless permutation of (seed, epoch)), sliced for this rank. */
static uint64_t sample_of(const bfs_engine *e, uint64_t id, unsigned j)
{
	uint64_t epoch = id / e->per_epoch;
	uint64_t k = (id % e->per_epoch) * e->o.batch + j;

	return bfs_order_sample(&e->orders[epoch], k);
}

uint64_t bfs_engine_sample_index(const bfs_engine *e, uint64_t id, unsigned j)
{
	if (id >= e->total || j >= bfs_engine_batch_count(e, id))
		return UINT64_MAX;
	return sample_of(e, id, j);
}

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

/* ---- producing one sample -------------------------------------------- */

static size_t pow2_at_least(size_t need, size_t from)
{
	size_t cap = from ? from : 1 << 16;

	while (cap < need)
		cap *= 2;
	return cap;
}

/* Memory the budget (--mem) counts now: batch slots, decoder scratch and
 * batch files readers hold.  Lock held. */
static uint64_t mem_used_locked(const bfs_engine *e)
{
	return e->slot_mem + e->scratch_used + held_bytes_locked(e);
}

/* The most scratch one sample can ever have: the budget, less one batch
 * (the one it is decoded into), the scratch every other worker keeps
 * between samples, and the files readers hold.  Lock held. */
static uint64_t most_for_one_locked(const bfs_engine *e)
{
	uint64_t keep = e->slot_bytes +
			(uint64_t)(e->nworkers ? e->nworkers - 1 : 0) * SCRATCH_BASE +
			held_bytes_locked(e);

	return e->o.mem_bytes > keep ? e->o.mem_bytes - keep : 0;
}

static unsigned release_slots_locked(bfs_engine *e, struct worker *w,
				     uint64_t want);

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
			uint64_t held = held_bytes_locked(e);

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
		    mem_used_locked(e) + extra <= e->o.mem_bytes)
			break;
		if (!e->borrower || e->borrower == w) {
			if (mem_used_locked(e) + extra <= e->o.mem_bytes)
				break; /* borrowed from slot memory not in use */
			e->borrower = w;
			if (release_slots_locked(e, w, mem_used_locked(e) + extra -
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
	pthread_mutex_lock(&e->lock);
	e->scratch_used -= w->held;
	pthread_cond_broadcast(&e->room);
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
	w->held = 0;
}

/* Decode source sample i into dst and *label, or copy it from the cache.
 * rec tells the batch's completion what to insert.  0 or an error. */
static int make_sample(struct worker *w, uint64_t i, void *dst,
		       int64_t *label, struct cache_rec *rec, char *msg)
{
	bfs_engine *e = w->e;
	const uint8_t *jpeg, *rgb;
	bfs_sample_identity id;
	size_t len, px, rs, in_cap;
	uint64_t t0 = now_ns();
	int err, sw, sh;

	msg[0] = '\0';
	rec->decoded = 0;
	if ((err = bfs_source_identity(e->src, i, &id)))
		return err;
	if (w->cr && bfs_cache_key_make(&rec->key, e->o.cache_fp,
					bfs_source_dir(e->src), &id) == 0) {
		err = bfs_cache_get(w->cr, &rec->key, dst, e->s1_bytes, label);
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
	in_cap = pow2_at_least((size_t)id.length + 4, w->in.cap);
	if ((err = reserve(w, in_cap + w->dec_bytes + w->scratch_cap, msg)))
		return err;
	__atomic_add_fetch(&e->decode_attempts, 1, __ATOMIC_RELAXED);
	err = bfs_source_read(e->src, i, &w->in, &jpeg, &len, label, msg);
	if (err)
		return err;
	if ((err = bfs_decode_header(w->dec, jpeg, len, &sw, &sh, msg)))
		return err;
	if (e->o.max_pixels && (uint64_t)sw * (uint64_t)sh > e->o.max_pixels) {
		bfs_seterr(msg, "%dx%d JPEG has %llu pixels, more than the limit of %llu",
			   sw, sh, (unsigned long long)sw * (unsigned long long)sh,
			   (unsigned long long)e->o.max_pixels);
		return BFS_E_TOOBIG;
	}
	px = (size_t)sw * (size_t)sh * 4; /* CMYK decodes through 4 channels */
	rs = e->o.resize_crop
		? bfs_resize_crop_scratch_size(sw, sh, e->o.crop_from, e->s1_w, e->s1_h)
		: bfs_resize_scratch_size(sw, sh, e->s1_w, e->s1_h);
	if ((err = reserve(w, w->in.cap + (px > w->dec_bytes ? px : w->dec_bytes) +
			   (rs > w->scratch_cap ? rs : w->scratch_cap), msg)))
		return err;
	err = bfs_decode_rgb(w->dec, jpeg, len, e->o.max_pixels, &rgb, &sw,
			     &sh, msg);
	if (err)
		return err;
	if (px > w->dec_bytes)
		w->dec_bytes = px;
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
		double ns = (double)(now_ns() - t0);
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
		bfs_aug_draw(e->o.seed, id / e->per_epoch, i, e->s1_h, e->s1_w,
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
static int produce(struct worker *w, uint64_t id, unsigned j, void *dst,
		   void *s1, int64_t *label, struct cache_rec *rec, char *msg)
{
	bfs_engine *e = w->e;
	uint64_t i = sample_of(e, id, j), r;
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

/* ---- slots ------------------------------------------------------------ */

static struct bfs_batch *find_locked(bfs_engine *e, uint64_t id)
{
	for (unsigned s = 0; s < e->nslots; s++)
		if (e->slots[s].state != SLOT_FREE && e->slots[s].id == id &&
		    !e->slots[s].cancelled)
			return &e->slots[s];
	return NULL;
}

/* ---- slot files ------------------------------------------------------
 * With o.slot_dir (a tmpfs) each slot is an unnamed file there, mapped
 * shared, holding the batch's whole .npy file: its NPY header (written by
 * start_locked), then the images the workers decode into.  The mount can
 * then give the kernel the file itself (FUSE passthrough), and a reader's
 * read() or mmap reaches the decoded pages with no request to the daemon
 * and no copy into FUSE's page cache.
 *
 * A file handed to a reader is never written again while the reader can
 * still see it: not while it is open, and not while a reader maps it
 * after closing (np.load(mmap_mode='r') closes the file at once).  The
 * mount hands the kernel a separate read-only open of the file, and a
 * write lease is granted only when no open file of the inode but ours
 * remains, so a lease that fails means a reader still holds it; the slot
 * then moves to a fresh file and leaves the old one to the reader. */

static void slot_file_close(struct bfs_batch *b)
{
	if (b->fd < 0)
		return;
	munmap(b->map, b->map_len);
	close(b->fd);
	b->fd = -1;
	b->map = NULL;
	b->images = NULL;
}

/* b is no longer a file handed to a reader (reused, replaced, freed).
 * Lock held. */
static void unexpose_locked(bfs_engine *e, struct bfs_batch *b)
{
	if (b->exposed) {
		b->exposed = 0;
		e->nexposed--;
	}
}

/* A new file of head + images_cap bytes, allocated now (tmpfs pages are
 * allocated on first touch, and a full tmpfs would then raise SIGBUS in
 * the decoder; posix_fallocate reports ENOSPC instead). */
static int slot_file_open(bfs_engine *e, struct bfs_batch *b)
{
	size_t len = e->slot_head + e->images_cap;
	int fd = open(e->o.slot_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	int err;
	void *p;

	if (fd < 0)
		return -errno;
	if ((err = posix_fallocate(fd, 0, (off_t)len))) {
		close(fd);
		return -err;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		err = -errno;
		close(fd);
		return err;
	}
	b->fd = fd;
	b->map = p;
	b->map_len = len;
	b->file_len = len;
	b->images = b->map + e->slot_head;
	b->exposed = 0;
	return 0;
}

/* Does an open file of b's inode other than ours exist (see above)? */
static int slot_file_held(const struct bfs_batch *b)
{
	if (fcntl(b->fd, F_SETLEASE, F_WRLCK) != 0)
		return 1; /* EAGAIN; or no leases here: assume held */
	fcntl(b->fd, F_SETLEASE, F_UNLCK);
	return 0;
}

/* Plain memory for a slot whose file could not be had (a full tmpfs):
 * its batches are still served, by the mount's ordinary read path. */
static int slot_plain_memory(bfs_engine *e, struct bfs_batch *b)
{
	unexpose_locked(e, b);
	slot_file_close(b);
	e->st.slot_file_errors++;
	if (posix_memalign((void **)&b->images, 2u << 20, e->images_cap)) {
		b->images = NULL;
		e->slot_mem -= e->slot_bytes; /* the slot has none now */
		return -ENOMEM;
	}
	return 0;
}

static void slot_images_free(struct bfs_batch *b)
{
	if (b->fd >= 0)
		slot_file_close(b);
	else
		free(b->images);
	b->images = NULL;
}

/* Keep b's file, which a reader still holds, as a held file: our mapping
 * goes, our descriptor stays (to tell when the reader lets go), and its
 * pages count in the budget until then.  b is left without a file.
 * 0, or -ENOMEM (b keeps its file).  Lock held. */
static int hold_file_locked(bfs_engine *e, struct bfs_batch *b)
{
	if (e->nheld == e->held_cap) {
		unsigned cap = e->held_cap ? e->held_cap * 2 : 16;
		struct held_file *n = realloc(e->held, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		e->held = n;
		e->held_cap = cap;
	}
	munmap(b->map, b->map_len);
	e->held[e->nheld++] = (struct held_file){ .fd = b->fd, .len = b->map_len };
	e->held_bytes += b->map_len;
	unexpose_locked(e, b);
	b->fd = -1;
	b->map = NULL;
	b->images = NULL;
	return 0;
}

/* Forget the held files their readers have let go of: their descriptors
 * go into fds (the caller closes them after unlocking, which frees the
 * pages), up to cap of them.  Returns how many.  Lock held. */
static unsigned reap_held_locked(bfs_engine *e, int *fds, unsigned cap)
{
	unsigned n = 0;

	for (unsigned k = 0; k < e->nheld && n < cap;) {
		struct held_file *h = &e->held[k];

		if (fcntl(h->fd, F_SETLEASE, F_WRLCK) != 0) {
			k++; /* still held */
			continue;
		}
		fcntl(h->fd, F_SETLEASE, F_UNLCK);
		fds[n++] = h->fd;
		e->held_bytes -= h->len;
		*h = e->held[--e->nheld];
	}
	return n;
}

/* reap_held_locked, closing what it found with the lock dropped for the
 * closes.  Returns how many were let go.  Lock held (dropped inside). */
static unsigned reap_held(bfs_engine *e)
{
	int fds[32];
	unsigned n = reap_held_locked(e, fds, 32);

	if (n) {
		pthread_mutex_unlock(&e->lock);
		for (unsigned k = 0; k < n; k++)
			close(fds[k]);
		pthread_mutex_lock(&e->lock);
		pthread_cond_broadcast(&e->room);
	}
	return n;
}

/* Make b's file ready for a batch of n samples: a fresh file if a reader
 * still holds the old one (which is then kept as a held file, counted in
 * the budget), and the size a file of n samples has.  -EAGAIN when the
 * budget has no room for the fresh file: b is left as it is, for its
 * reader.  Lock held (the slot is neither pinned nor being filled). */
static int slot_file_prepare_locked(bfs_engine *e, struct bfs_batch *b,
				    uint64_t id, unsigned n)
{
	size_t len = e->slot_head + (size_t)n * e->sample_bytes;

	if (b->fd < 0)
		return 0;
	if (b->exposed && slot_file_held(b)) {
		if (mem_used_locked(e) + e->slot_bytes > e->o.mem_bytes)
			return -EAGAIN;
		if (hold_file_locked(e, b))
			return -ENOMEM;
		e->st.slot_files_replaced++;
		if (slot_file_open(e, b) != 0)
			return slot_plain_memory(e, b);
	}
	unexpose_locked(e, b);
	b->file_ok = bfs_engine_npy_header(e, id, (char *)b->map,
					   e->slot_head) == e->slot_head;
	if (len == b->file_len)
		return 0;
	/* Only the last batch of an epoch is shorter; a file sized to it
	 * keeps a reader's read() from finding bytes past the batch. */
	if (ftruncate(b->fd, (off_t)len) != 0 ||
	    (len > b->file_len &&
	     posix_fallocate(b->fd, (off_t)b->file_len,
			     (off_t)(len - b->file_len)) != 0))
		return slot_plain_memory(e, b);
	b->file_len = len;
	return 0;
}

/* Does the budget have room for one more slot's batch memory?  Not while
 * a worker is freeing slot memory for a big sample.  Lock held. */
static int slot_room_locked(const bfs_engine *e)
{
	return !e->borrower &&
	       mem_used_locked(e) + e->slot_bytes <= e->o.mem_bytes;
}

/* Give slot b its batch memory if it has none: a slot file, or plain
 * memory.  -EAGAIN: the budget has no room now (a worker borrowed it).
 * Lock held. */
static int slot_buffers(bfs_engine *e, struct bfs_batch *b)
{
	if (b->images)
		return 0;
	if (!slot_room_locked(e))
		return -EAGAIN;
	if (e->o.slot_dir && slot_file_open(e, b) != 0)
		e->st.slot_file_errors++; /* this slot uses plain memory */
	/* 2 MiB alignment lets the kernel back the buffer with huge pages,
	 * which makes the first touch ~30x cheaper on these VMs.  (tmpfs
	 * pages here are 4 KiB: shmem_enabled is never; a slot file is
	 * allocated once, so only its first fill pays for that.) */
	if (!b->images &&
	    posix_memalign((void **)&b->images, 2u << 20, e->images_cap))
		b->images = NULL;
	if (e->post && b->images && !b->stage1 &&
	    posix_memalign((void **)&b->stage1, 2u << 20, e->s1_bytes * e->o.batch)) {
		slot_images_free(b);
		b->stage1 = NULL;
	}
	if (!b->labels)
		b->labels = calloc(e->o.batch, sizeof(*b->labels));
	if (!b->rec)
		b->rec = calloc(e->o.batch, sizeof(*b->rec));
	if (e->o.cache && !b->items)
		b->items = calloc(e->o.batch, sizeof(*b->items));
	b->e = e;
	if (!b->images || !b->labels || !b->rec || (e->o.cache && !b->items)) {
		if (b->images)
			slot_images_free(b);
		free(b->stage1);
		b->stage1 = NULL;
		b->images = NULL;
		return -ENOMEM;
	}
#ifdef MADV_HUGEPAGE
	if (b->fd < 0)
		madvise(b->images, e->images_cap, MADV_HUGEPAGE);
#endif
	e->slot_mem += e->slot_bytes;
	return 0;
}

/* Memory a slot gave up (release_slots_locked), freed once the lock is
 * dropped. */
struct freed {
	uint8_t *images, *stage1, *map;
	size_t map_len;
	int fd;
};

/* Take b's batch memory away into *f (b is FREE and memoryless after).
 * Lock held. */
static void slot_strip_locked(bfs_engine *e, struct bfs_batch *b,
			      struct freed *f)
{
	f->fd = b->fd;
	f->map = b->map;
	f->map_len = b->map_len;
	f->images = b->fd >= 0 ? NULL : b->images;
	f->stage1 = b->stage1;
	unexpose_locked(e, b);
	b->fd = -1;
	b->map = NULL;
	b->images = NULL;
	b->stage1 = NULL;
	b->state = SLOT_FREE;
	b->cancelled = 0;
	b->consumed = 0;
	b->pushed = 0;
	e->slot_mem -= e->slot_bytes;
}

static void freed_release(struct freed *f, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		if (f[k].fd >= 0) {
			munmap(f[k].map, f[k].map_len);
			close(f[k].fd);
		}
		free(f[k].images);
		free(f[k].stage1);
	}
}

/* Is batch id the one some reader is reading now?  Between two read()s
 * of one file nothing is pinned, so this keeps a batch from being evicted
 * in the middle of its reader.  Lock held. */
static int being_read_locked(const bfs_engine *e, uint64_t id)
{
	for (unsigned r = 0; r < BFS_MAX_READERS; r++)
		if (e->readers[r].key && e->readers[r].last_id == id)
			return 1;
	return 0;
}

/* Pick a slot to reuse for a new batch.  Readers (for_reader) may take any
 * idle slot and may cancel unpinned read-ahead; read-ahead takes only free
 * slots or batches that were already read.  Memory already touched is
 * reused before a never-used slot is: the first touch of fresh pages costs
 * the kernel a page fault and zeroing (measured: most of a cold epoch's
 * kernel time), so the working set stays as small as read-ahead needs.
 * Slots marked held in this search (held_pass == pass) are passed over.
 * Lock held.  NULL if none. */
static struct bfs_batch *pick_victim_locked(bfs_engine *e, int for_reader,
					    uint64_t pass)
{
	struct bfs_batch *best = NULL;
	int best_rank = 99;

	for (unsigned s = 0; s < e->nslots; s++) {
		struct bfs_batch *b = &e->slots[s];
		int rank;

		if (b->pins || b->inflight || b->held_pass == pass)
			continue;
		if (b->state == SLOT_FREE && b->images)
			rank = 0;
		else if (b->state == SLOT_FREE && !b->images && !slot_room_locked(e))
			continue;
		else if (b->state != SLOT_FILLING && b->consumed &&
			 !being_read_locked(e, b->id))
			rank = 1;
		else if (b->state == SLOT_FREE && slot_room_locked(e))
			rank = 2; /* never used: its pages are not touched yet */
		else if (b->state != SLOT_FILLING && for_reader)
			rank = 3;
		else
			continue;
		if (rank < best_rank ||
		    (rank == best_rank && b->last_use < best->last_use)) {
			best = b;
			best_rank = rank;
		}
	}
	return best;
}

/* pick_victim_locked, passing over a slot file a reader still holds while
 * another slot will do: reusing it means a new file, allocated under this
 * lock (slot_file_prepare_locked).  A reader that maps its batch (np.load
 * with mmap_mode='r') still holds it while it opens the next one, which is
 * when read-ahead looks for a slot, and the batch it holds is the one read
 * most recently, often the only read one.  Lock held.  NULL if none. */
static struct bfs_batch *victim_locked(bfs_engine *e, int for_reader)
{
	uint64_t pass = ++e->held_pass;
	struct bfs_batch *b, *held = NULL;

	while ((b = pick_victim_locked(e, for_reader, pass))) {
		if (b->fd < 0 || !b->exposed)
			return b;
		if (!slot_file_held(b)) {
			b->exposed = 0; /* nobody holds it: reuse it in place */
			return b;
		}
		b->held_pass = pass;
		if (!held)
			held = b;
	}
	return held; /* only held ones left: it moves to a new file */
}

/* Free slot batch memory for worker w's sample: `want` bytes if it can,
 * taking first what costs least to make again (free slots, read batches,
 * unread read-ahead), then batches being filled that no worker is inside
 * (a reader waiting on one starts it again later); read-ahead being filled
 * is cancelled, to be freed once its samples are done.  Never w's own
 * slot, a batch pinned for its bytes, or a file a reader holds.  Returns
 * how many slots it freed or cancelled: 0 when nothing can be taken now.
 * Lock held; dropped while the memory is freed. */
static unsigned release_slots_locked(bfs_engine *e, struct worker *w,
				     uint64_t want)
{
	struct freed f[16];
	unsigned nf = 0, acted = 0;
	uint64_t got = 0;

	if (reap_held(e))
		return 1;
	for (int pass = 0; pass < 5 && got < want && nf < 16; pass++) {
		for (unsigned s = 0; s < e->nslots && got < want && nf < 16; s++) {
			struct bfs_batch *b = &e->slots[s];
			int ok;

			if (!b->images || b->inflight || b == w->slot)
				continue;
			switch (pass) {
			case 0:
				ok = b->state == SLOT_FREE && !b->pins;
				break;
			case 1:
				ok = (b->state == SLOT_READY || b->state == SLOT_FAILED) &&
				     !b->pins && b->consumed &&
				     !being_read_locked(e, b->id);
				break;
			case 2:
				ok = (b->state == SLOT_READY || b->state == SLOT_FAILED) &&
				     !b->pins;
				break;
			case 3:
				ok = b->state == SLOT_FILLING && !b->pins && !b->urgent;
				break;
			default: /* waiting readers start it again */
				ok = b->state == SLOT_FILLING;
				break;
			}
			if (!ok || (b->fd >= 0 && b->exposed && slot_file_held(b)))
				continue;
			slot_strip_locked(e, b, &f[nf++]);
			got += e->slot_bytes;
		}
	}
	/* read-ahead still being filled: freed when its samples are done */
	for (unsigned s = 0; s < e->nslots && got < want; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (b->state == SLOT_FILLING && b->inflight && !b->pins &&
		    !b->urgent && !b->cancelled && b != w->slot) {
			b->cancelled = 1;
			b->done += b->n - b->next;
			b->next = b->n;
			acted++;
		}
	}
	if (nf) {
		pthread_mutex_unlock(&e->lock);
		freed_release(f, nf);
		pthread_mutex_lock(&e->lock);
		pthread_cond_broadcast(&e->done); /* readers waiting on them */
	}
	return nf + acted;
}

/* Cancel the unpinned, non-urgent read-ahead that was asked for last, so
 * its slot frees up once its in-flight samples finish.  Lock held. */
static int cancel_readahead_locked(bfs_engine *e)
{
	struct bfs_batch *best = NULL;

	for (unsigned s = 0; s < e->nslots; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (b->state != SLOT_FILLING || b->pins || b->urgent ||
		    b->cancelled)
			continue;
		if (!best || b->seq > best->seq)
			best = b;
	}
	if (!best)
		return 0;
	best->cancelled = 1;
	best->done += best->n - best->next; /* never handed out */
	best->next = best->n;
	if (best->inflight == 0)
		best->state = SLOT_FREE;
	return 1;
}

/* Start batch id in slot b.  Lock held. */
static int start_locked(bfs_engine *e, struct bfs_batch *b, uint64_t id,
			int urgent)
{
	unsigned n = bfs_engine_batch_count(e, id);
	int err = slot_buffers(e, b);

	if (err || (err = slot_file_prepare_locked(e, b, id, n)))
		return err;
	b->state = SLOT_FILLING;
	b->id = id;
	b->n = n;
	b->next = b->done = b->inflight = 0;
	b->urgent = urgent;
	b->seq = ++e->seq;
	b->last_use = ++e->tick;
	b->consumed = 0;
	b->pushed = 0;
	b->cancelled = 0;
	b->err = 0;
	b->err_at = 0;
	b->errmsg[0] = '\0';
	pthread_cond_broadcast(&e->work);
	return 0;
}

/* ---- readers and autotuning ----------------------------------------- */

static unsigned active_readers_locked(bfs_engine *e, uint64_t now)
{
	unsigned n = 0;

	for (unsigned r = 0; r < BFS_MAX_READERS; r++)
		if (e->readers[r].key && now - e->readers[r].last_ns < READER_IDLE_NS)
			n++;
	return n ? n : 1;
}

/* The most read-ahead one reader may have: its share of the slots, one
 * kept back for the batch it reads. */
static unsigned depth_cap_locked(bfs_engine *e, uint64_t now)
{
	unsigned share = (e->nslots - 1) / active_readers_locked(e, now);

	return share ? share : 1;
}

/* Find or make the entry of reader key (LRU replacement).  Lock held. */
static struct reader *reader_locked(bfs_engine *e, uint64_t reader,
				    uint64_t now)
{
	uint64_t key = reader + 1; /* 0 marks an unused entry */
	struct reader *oldest = &e->readers[0];

	for (unsigned r = 0; r < BFS_MAX_READERS; r++) {
		struct reader *rd = &e->readers[r];

		if (rd->key == key)
			return rd;
		if (rd->last_ns < oldest->last_ns)
			oldest = rd;
	}
	memset(oldest, 0, sizeof(*oldest));
	oldest->key = key;
	oldest->last_id = UINT64_MAX;
	oldest->settled_id = UINT64_MAX;
	oldest->last_ns = now;
	oldest->depth = e->o.prefetch ? e->o.prefetch : 2;
	oldest->idle_mark = e->idle_ns;
	oldest->mark_ns = now;
	return oldest;
}

/* Worker idle time so far, including workers idle right now.  Lock held. */
static uint64_t idle_now_locked(bfs_engine *e, uint64_t now)
{
	return e->idle_ns + (uint64_t)e->idle_workers * (now - e->idle_since);
}

/* A reader waited for a batch: if the workers had idle time since the
 * depth last changed, deeper read-ahead would have used it, so grow. */
static void reader_waited_locked(bfs_engine *e, struct reader *rd,
				 uint64_t now)
{
	uint64_t idle = idle_now_locked(e, now) - rd->idle_mark;
	uint64_t span = (now - rd->mark_ns) * e->nworkers;

	rd->calm = 0;
	if (e->o.prefetch)
		return;
	if (span && idle * 20 > span && rd->depth < depth_cap_locked(e, now)) {
		rd->depth++;
		rd->idle_mark = idle_now_locked(e, now);
		rd->mark_ns = now;
	}
}

/* A reader moved on to a new batch without waiting for the last one. */
static void reader_calm_locked(bfs_engine *e, struct reader *rd, uint64_t now)
{
	unsigned cap = depth_cap_locked(e, now);

	if (e->o.prefetch)
		return;
	if (rd->depth > cap)
		rd->depth = cap;
	if (++rd->calm >= 8 * rd->depth && rd->depth > 2) {
		rd->depth--;
		rd->calm = 0;
		rd->idle_mark = idle_now_locked(e, now);
		rd->mark_ns = now;
	}
}

static void readahead_locked(bfs_engine *e, uint64_t id, unsigned depth)
{
	for (unsigned d = 1; d <= depth; d++) {
		uint64_t next = (id + d) % e->total;
		struct bfs_batch *b;

		if (next == id)
			break;
		if (find_locked(e, next))
			continue;
		if (!(b = victim_locked(e, 0)) || start_locked(e, b, next, 0))
			break;
	}
}

void bfs_engine_hint(bfs_engine *e, uint64_t reader, uint64_t id)
{
	uint64_t now = now_ns();
	struct reader *rd;
	struct bfs_batch *b;

	if (id >= e->total)
		return;
	pthread_mutex_lock(&e->lock);
	rd = reader_locked(e, reader, now);
	if (rd->last_id != id) {
		if (rd->last_id != UINT64_MAX) {
			double dt = (double)(now - rd->last_ns);

			rd->interval_ns = rd->interval_ns
				? 0.8 * rd->interval_ns + 0.2 * dt : dt;
		}
		rd->last_id = id;
		rd->last_ns = now;
		rd->batches++;
	}
	if ((b = find_locked(e, id))) {
		if (b->state == SLOT_FILLING && !b->urgent) {
			b->urgent = 1;
			b->seq = ++e->seq;
		}
		/* Ready before the reader came for it: the read-ahead was deep
		 * enough.  (A pushed batch is then read from the page cache,
		 * so bfs_engine_get never sees it.) */
		if (b->state == SLOT_READY && rd->settled_id != id) {
			rd->settled_id = id;
			reader_calm_locked(e, rd, now);
		}
		if (b->state == SLOT_READY && b->pushed && !b->consumed) {
			b->consumed = 1;
			e->st.batches_served++;
		}
	} else if ((b = victim_locked(e, 1))) {
		start_locked(e, b, id, 1);
	}
	readahead_locked(e, id, rd->depth);
	pthread_mutex_unlock(&e->lock);
}

int bfs_engine_get(bfs_engine *e, uint64_t reader, uint64_t id,
		   bfs_batch **out, char *errmsg)
{
	return bfs_engine_get_flags(e, reader, id, 0, out, errmsg);
}

int bfs_engine_get_flags(bfs_engine *e, uint64_t reader, uint64_t id,
			 unsigned flags, bfs_batch **out, char *errmsg)
{
	struct bfs_batch *b;
	struct reader *rd;
	uint64_t t0 = 0, now;
	int err = 0, waited = 0;

	*out = NULL;
	if (id >= e->total)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		if ((b = find_locked(e, id))) {
			if (b->state == SLOT_READY || b->state == SLOT_FAILED)
				break;
			if (!b->urgent) {
				b->urgent = 1;
				b->seq = ++e->seq;
			}
			b->pins++; /* keep it from being cancelled while we wait */
		} else if ((b = victim_locked(e, 1)) &&
			   (err = start_locked(e, b, id, 1)) == 0) {
			b->pins++;
		} else if (b && err != -EAGAIN) {
			goto out;
		} else if (!b && cancel_readahead_locked(e)) {
			continue;
		} else {
			/* No slot, or no memory for one: a borrower holds it, or
			 * readers hold files (let go of with no wake-up, hence
			 * the deadline, after which victim_locked looks again). */
			b = NULL;
			err = 0;
		}
		if (!waited) {
			waited = 1;
			t0 = now_ns();
		}
		if (b) {
			pthread_cond_wait(&e->done, &e->lock);
			b->pins--;
		} else {
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += 100 * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&e->done, &e->lock, &until);
			reap_held(e);
		}
	}
	now = now_ns();
	rd = reader_locked(e, reader, now);
	if (waited) {
		e->st.reader_waits++;
		e->st.reader_wait_ns += now - t0;
		rd->waits++;
		rd->wait_ns += now - t0;
		reader_waited_locked(e, rd, now);
		rd->settled_id = id;
	} else if (rd->settled_id != id) {
		reader_calm_locked(e, rd, now);
		rd->settled_id = id;
	}
	b->last_use = ++e->tick;
	if (b->state == SLOT_FAILED) {
		err = b->err;
		bfs_seterr(errmsg, "%s", b->errmsg);
		goto out;
	}
	b->pins++; /* before read-ahead, which may evict unpinned slots */
	if (!b->consumed) {
		b->consumed = 1;
		e->st.batches_served++;
		/* keep reading ahead as the reader moves, even without a hint */
		if (!(flags & BFS_GET_NO_READAHEAD))
			readahead_locked(e, id, rd->depth);
	}
	*out = b;
out:
	pthread_mutex_unlock(&e->lock);
	return err;
}

void bfs_engine_put(bfs_engine *e, bfs_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&e->lock);
	b->pins--;
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
}

unsigned bfs_batch_count(const bfs_batch *b) { return b->n; }
const void *bfs_batch_images(const bfs_batch *b) { return b->images; }
const int64_t *bfs_batch_labels(const bfs_batch *b) { return b->labels; }

int bfs_batch_file(const bfs_batch *b, size_t *len)
{
	if (b->fd < 0 || !b->file_ok)
		return -1;
	*len = b->file_len;
	return b->fd;
}

size_t bfs_engine_npy_header(const bfs_engine *e, uint64_t id, char *hdr,
			     size_t cap)
{
	uint64_t shape[4] = { bfs_engine_batch_count(e, id),
			      (uint64_t)e->o.height, (uint64_t)e->o.width, 3 };
	int len;

	if (e->o.nchw) {
		shape[1] = 3;
		shape[2] = (uint64_t)e->o.height;
		shape[3] = (uint64_t)e->o.width;
	}
	len = bfs_npy_header(hdr, cap, bfs_dtype_descr(e->o.dtype), shape, 4);
	return len > 0 ? (size_t)len : 0;
}

/* May one more slot file be handed to a reader?  Only while the budget
 * could pay for a fresh file for each slot a reader may still hold when
 * that slot is reused.  Lock held. */
static int expose_room_locked(const bfs_engine *e)
{
	return mem_used_locked(e) + (uint64_t)(e->nexposed + 1) * e->slot_bytes <=
	       e->o.mem_bytes;
}

int bfs_engine_expose(bfs_engine *e, bfs_batch *b, size_t *len)
{
	int fd = -1;

	pthread_mutex_lock(&e->lock);
	if (b->fd >= 0 && b->file_ok && !b->exposed && !expose_room_locked(e)) {
		/* files handed out earlier that nobody holds any more cost
		 * nothing at reuse: count only the held ones */
		reap_held(e);
		for (unsigned s = 0; s < e->nslots; s++) {
			struct bfs_batch *o = &e->slots[s];

			if (o->exposed && o->fd >= 0 && !o->pins &&
			    !slot_file_held(o))
				unexpose_locked(e, o);
		}
	}
	if (b->fd >= 0 && b->file_ok) {
		if (b->exposed || expose_room_locked(e)) {
			if (!b->exposed) {
				b->exposed = 1;
				e->nexposed++;
			}
			fd = b->fd;
			*len = b->file_len;
		} else {
			e->st.expose_declined++;
		}
	}
	pthread_mutex_unlock(&e->lock);
	return fd;
}

/* ---- workers ---------------------------------------------------------- */

/* The cache writer finished with batch b's memory (any thread). */
static void cache_done(void *ctx)
{
	struct bfs_batch *b = ctx;
	bfs_engine *e = b->e;

	pthread_mutex_lock(&e->lock);
	b->pins--; /* matches the pin taken when b became READY */
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
}

/* Hand the samples of a READY, pinned batch that were decoded (not read
 * from the cache) to the cache writer: one transaction per batch.  Called
 * without e->lock, since a dropped submission calls cache_done at once. */
static void submit_to_cache(bfs_engine *e, struct bfs_batch *b)
{
	size_t n = 0;

	for (unsigned j = 0; j < b->n; j++) {
		if (!b->rec[j].decoded)
			continue;
		b->items[n].key = b->rec[j].key;
		b->items[n].label = b->rec[j].raw_label;
		b->items[n].data = b->stage1 ? b->stage1 + (size_t)j * e->s1_bytes
					     : b->images + (size_t)j * e->sample_bytes;
		b->items[n].len = e->s1_bytes;
		n++;
	}
	bfs_cache_submit(e->o.cache, b->items, n, cache_done, b);
}

/* Offer a READY batch to on_batch_ready, pinned and without the lock. */
static void hand_on_locked(bfs_engine *e, struct bfs_batch *b)
{
	uint64_t id = b->id;
	int handed;

	b->pins++;
	pthread_mutex_unlock(&e->lock);
	handed = e->o.on_batch_ready(e->o.ctx, id, b);
	pthread_mutex_lock(&e->lock);
	b->pins--;
	if (handed == 1) {
		e->st.batches_pushed++;
		b->pushed = 1; /* consumed once its reader hints it */
	}
	pthread_cond_broadcast(&e->done);
}

/* The slot with work whose turn it is: urgent first, then oldest request. */
static struct bfs_batch *next_work_locked(bfs_engine *e)
{
	struct bfs_batch *best = NULL;

	for (unsigned s = 0; s < e->nslots; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (b->state != SLOT_FILLING || b->next >= b->n)
			continue;
		if (!best || (b->urgent && !best->urgent) ||
		    (b->urgent == best->urgent && b->seq < best->seq))
			best = b;
	}
	return best;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	bfs_engine *e = w->e;
	char msg[BFS_ERRMSG_MAX];
	pthread_mutex_lock(&e->lock);
	while (!e->stop) {
		struct bfs_batch *b = next_work_locked(e);
		uint64_t id;
		unsigned j;
		int err;

		if (!b) {
			uint64_t t = now_ns();

			/* idle time: the autotuner's sign of an unsaturated pool */
			e->idle_ns += (uint64_t)e->idle_workers * (t - e->idle_since);
			e->idle_since = t;
			e->idle_workers++;
			pthread_cond_wait(&e->work, &e->lock);
			t = now_ns();
			e->idle_ns += (uint64_t)e->idle_workers * (t - e->idle_since);
			e->idle_since = t;
			e->idle_workers--;
			continue;
		}
		j = b->next++;
		b->inflight++;
		id = b->id;
		w->slot = b;
		pthread_mutex_unlock(&e->lock);

		err = produce(w, id, j, b->images + (size_t)j * e->sample_bytes,
			      b->stage1 ? b->stage1 + (size_t)j * e->s1_bytes
					: b->images + (size_t)j * e->sample_bytes,
			      &b->labels[j], &b->rec[j], msg);
		if (err)
			b->rec[j].decoded = 0;

		pthread_mutex_lock(&e->lock);
		w->slot = NULL;
		b->inflight--;
		b->done++;
		if (err && !b->cancelled && (!b->err || j < b->err_at)) {
			char where[160];

			bfs_source_describe(e->src, sample_of(e, id, j), where,
					    sizeof(where));
			b->err = err;
			b->err_at = j;
			snprintf(b->errmsg, sizeof(b->errmsg), "%s: %s", where,
				 msg[0] ? msg : bfs_strerror(err));
			/* the batch fails anyway: hand out nothing more */
			b->done += b->n - b->next;
			b->next = b->n;
		}
		/* Readers wait for a slot to change state (or be unpinned, see
		 * bfs_engine_put): wake them only then, not after every sample,
		 * which cost ~7 context switches per image. */
		if (b->cancelled) {
			if (b->inflight == 0) {
				b->state = SLOT_FREE;
				pthread_cond_broadcast(&e->done);
				pthread_cond_broadcast(&e->room);
			}
		} else if (b->done == b->n && b->inflight == 0) {
			b->state = b->err ? SLOT_FAILED : SLOT_READY;
			e->st.batches_produced++;
			pthread_cond_broadcast(&e->done);
			if (b->state == SLOT_READY && e->o.cache) {
				/* pinned until the cache writer is done with it */
				b->pins++;
				pthread_mutex_unlock(&e->lock);
				submit_to_cache(e, b);
				pthread_mutex_lock(&e->lock);
			}
			/* Hand on only read-ahead that no reader has asked for
			 * yet, and only when no other work is queued: handing
			 * on costs CPU (a copy into the page cache) that a
			 * reader waiting on the pool would rather see spent on
			 * decoding; its reads copy the batch out anyway.  A
			 * pool with nothing else to do has the time to spare.
			 * (Measured, docs/BENCHMARKS.md: pushing every batch
			 * made cold epochs ~8% slower.) */
			if (b->state == SLOT_READY && e->o.on_batch_ready &&
			    !b->urgent && !next_work_locked(e))
				hand_on_locked(e, b);
		}
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* ---- create/destroy --------------------------------------------------- */

static unsigned online_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (unsigned)n : 1;
}

/* Scratch one sample of this many pixels may need: its encoded bytes (as
 * large as the largest record, in the buffer's power-of-two steps), the
 * decoded pixels (4 bytes each: CMYK decodes through four channels) and
 * the resize rows. */
static uint64_t need_for_pixels(const bfs_engine *e, uint64_t in_max,
				uint64_t pixels)
{
	uint64_t rs = 0;
	int side = 1;

	while ((uint64_t)side * side < pixels && side < 65500)
		side++;
	/* resize scratch depends on the output (and for crop on the shape):
	 * the square and the two extreme shapes bound it */
	for (int k = 0; k < 3; k++) {
		int w = k == 0 ? side : k == 1 ? 65500 : (int)(pixels / 65500 + 1);
		int h = k == 0 ? side : k == 1 ? (int)(pixels / 65500 + 1) : 65500;
		size_t r = e->o.resize_crop
			? bfs_resize_crop_scratch_size(w, h, e->o.crop_from, e->s1_w, e->s1_h)
			: bfs_resize_scratch_size(w, h, e->s1_w, e->s1_h);

		if (r > rs)
			rs = r;
	}
	return in_max + pixels * 4 + rs;
}

/* Split the budget (--mem): a scratch pool for the workers (at least
 * SCRATCH_BASE each, an eighth of the budget if that is more) and batch
 * slots in the rest.  A worker may borrow past the pool from the slots'
 * share (reserve), so the largest sample decodes as long as it fits in
 * the budget beside one batch and the other workers' SCRATCH_BASE.  With
 * --max-pixels that must hold for the largest image it allows: a default
 * budget grows to fit it, a default --max-pixels (max_pixels_auto) shrinks
 * to what the budget decodes, and otherwise the options are refused with
 * the --mem that would do.  0 or -EINVAL (errmsg says why). */
static int fit_budget(bfs_engine *e, int mem_default, char *errmsg)
{
	uint64_t slot_bytes = e->images_cap + e->o.batch * sizeof(int64_t) +
			      (e->post ? (uint64_t)e->s1_bytes * e->o.batch : 0);
	uint64_t others = (uint64_t)(e->o.threads - 1) * SCRATCH_BASE;
	uint64_t scratch, slots, in_max = 0, len_max = 0;

	for (uint64_t i = 0; i < e->nsamples; i++) {
		bfs_sample_identity id;

		if (bfs_source_identity(e->src, i, &id) == 0 && id.length > len_max)
			len_max = id.length;
	}
	in_max = pow2_at_least((size_t)len_max + 4, 0);
	if (e->o.max_pixels) {
		uint64_t need = need_for_pixels(e, in_max, e->o.max_pixels);
		uint64_t mem = e->o.mem_bytes;

		if (need + slot_bytes + others > mem) {
			if (mem_default) {
				mem = need + slot_bytes + others;
				e->o.mem_bytes = (mem + (1u << 20) - 1) & ~((uint64_t)(1u << 20) - 1);
			} else {
				uint64_t fit = mem > slot_bytes + others + in_max
					? (mem - slot_bytes - others - in_max) / 4 : 0;

				while (fit && need_for_pixels(e, in_max, fit) + slot_bytes +
						      others > mem)
					fit -= fit / 64 + 1;
				if (e->o.max_pixels_auto && fit >= 1) {
					e->o.max_pixels = fit;
				} else {
					bfs_seterr(errmsg,
						   "--mem %llu MiB cannot decode an image of --max-pixels %llu with %u threads (it needs %llu MiB beside a batch and the other threads' scratch); use --mem %lluM or more%s",
						   (unsigned long long)(mem >> 20),
						   (unsigned long long)e->o.max_pixels,
						   e->o.threads,
						   (unsigned long long)((need + (1u << 20) - 1) >> 20),
						   (unsigned long long)((need + slot_bytes + others) >> 20) + 1,
						   fit ? ", or a smaller --max-pixels" : "");
					if (fit) {
						size_t n = strlen(errmsg);

						snprintf(errmsg + n, BFS_ERRMSG_MAX - n,
							 " (at most %llu)",
							 (unsigned long long)fit);
					}
					return -EINVAL;
				}
			}
		}
	}
	scratch = (uint64_t)e->o.threads * SCRATCH_BASE;
	if (mem_default && scratch + 2 * slot_bytes > e->o.mem_bytes)
		e->o.mem_bytes = scratch + 4 * slot_bytes; /* many threads */
	if (scratch < e->o.mem_bytes / 8)
		scratch = e->o.mem_bytes / 8;
	slots = e->o.mem_bytes > scratch
		? (e->o.mem_bytes - scratch) / slot_bytes : 0;
	if (slots > MAX_SLOTS)
		slots = MAX_SLOTS;
	if (e->o.slots)
		slots = e->o.slots; /* an explicit count wins */
	if (slots < 2) {
		bfs_seterr(errmsg,
			   "--mem %llu MiB is too small: it must hold 2 batches of %llu MiB plus %llu MiB of decoder scratch (%u threads); use --mem %llu M or more",
			   (unsigned long long)(e->o.mem_bytes >> 20),
			   (unsigned long long)(slot_bytes >> 20),
			   (unsigned long long)(scratch >> 20),
			   e->o.threads,
			   (unsigned long long)((2 * slot_bytes + scratch * 8 / 7) >> 20) + 1);
		return -EINVAL;
	}
	e->o.slots = (unsigned)slots;
	e->scratch_budget = (size_t)scratch;
	e->slot_bytes = (size_t)slot_bytes;
	return 0;
}

int bfs_engine_create(bfs_source *src, const bfs_engine_opts *opts,
		      bfs_engine **out, char *errmsg)
{
	bfs_engine *e;
	int err, mem_default;

	*out = NULL;
	if (!(e = calloc(1, sizeof(*e))))
		return -ENOMEM;
	e->src = src;
	e->o = *opts;
	if (!e->o.batch)
		e->o.batch = 32;
	if (!e->o.height || !e->o.width)
		e->o.height = e->o.width = 224;
	if (!e->o.threads)
		e->o.threads = online_cores();
	if (!e->o.epochs)
		e->o.epochs = 1;
	mem_default = !e->o.mem_bytes;
	if (!e->o.mem_bytes)
		e->o.mem_bytes = bfs_engine_default_mem();
	if (e->o.height < 1 || e->o.width < 1 || e->o.height > 16384 ||
	    e->o.width > 16384 || e->o.batch < 1 || e->o.batch > 65536 ||
	    e->o.threads > 1024 || e->o.slots > MAX_SLOTS) {
		bfs_seterr(errmsg, "invalid engine options");
		free(e);
		return -EINVAL;
	}
	if (!e->o.world)
		e->o.world = 1;
	e->nsamples = bfs_source_count(src);
	if (e->o.rank >= e->o.world || e->nsamples < e->o.world) {
		bfs_seterr(errmsg, "--rank %u --world %u: %s", e->o.rank,
			   e->o.world, e->o.rank >= e->o.world
			   ? "rank must be below world"
			   : "fewer samples than ranks");
		free(e);
		return -EINVAL;
	}
	if (!(e->orders = calloc(e->o.epochs, sizeof(*e->orders)))) {
		free(e);
		return -ENOMEM;
	}
	for (unsigned ep = 0; ep < e->o.epochs; ep++)
		bfs_order_init(&e->orders[ep], e->nsamples, e->o.shuffle,
			       e->o.seed, ep, e->o.rank, e->o.world);
	e->epoch_n = e->orders[0].per_rank;
	e->per_epoch = e->o.drop_remainder
		? e->epoch_n / e->o.batch
		: (e->epoch_n + e->o.batch - 1) / e->o.batch;
	if (e->per_epoch == 0) {
		bfs_seterr(errmsg,
			   "%llu samples make no full batch of %u (--drop-remainder)",
			   (unsigned long long)e->epoch_n, e->o.batch);
		free(e->orders);
		free(e);
		return BFS_E_EMPTY;
	}
	if (e->o.drop_remainder)
		e->epoch_n = e->per_epoch * e->o.batch;
	e->total = e->per_epoch * e->o.epochs;
	e->sample_bytes = (size_t)e->o.height * e->o.width * 3 *
			  bfs_dtype_size(e->o.dtype);
	e->images_cap = e->sample_bytes * e->o.batch;
	if (e->o.resize_crop && !e->o.crop_from)
		e->o.crop_from = 256;
	stage1_of(&e->o, &e->s1_h, &e->s1_w, &e->s1_dtype, &e->post);
	e->s1_bytes = (size_t)e->s1_h * e->s1_w * 3 * bfs_dtype_size(e->s1_dtype);
	if (e->o.resize_crop &&
	    (e->o.crop_from < e->s1_h || e->o.crop_from < e->s1_w)) {
		bfs_seterr(errmsg,
			   "--crop-from %d is smaller than the %dx%d window it must hold",
			   e->o.crop_from, e->s1_h, e->s1_w);
		free(e->orders);
		free(e);
		return -EINVAL;
	}
	if (e->o.slot_dir) {
		char hdr[256];

		e->slot_head = bfs_engine_npy_header(e, 0, hdr, sizeof(hdr));
		if (!e->slot_head)
			e->o.slot_dir = NULL;
	}
	if (e->post) {
		char why[BFS_ERRMSG_MAX];

		e->post_o = (bfs_post_opts){
			.src_h = e->s1_h, .src_w = e->s1_w, .src_dtype = e->s1_dtype,
			.h = e->o.height, .w = e->o.width, .out_dtype = e->o.dtype,
			.nchw = e->o.nchw, .normalize = e->o.normalize,
		};
		memcpy(e->post_o.mean, e->o.mean, sizeof(e->o.mean));
		memcpy(e->post_o.std, e->o.std, sizeof(e->o.std));
		if (bfs_post_check(&e->post_o, why)) {
			bfs_seterr(errmsg, "%s", why);
			free(e->orders);
			free(e);
			return -EINVAL;
		}
	}

	if ((err = fit_budget(e, mem_default, errmsg))) {
		free(e->orders);
		free(e);
		return err;
	}
	if (e->o.prefetch >= e->o.slots)
		e->o.prefetch = e->o.slots - 1;

	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->work, NULL);
	pthread_cond_init(&e->done, NULL);
	pthread_cond_init(&e->room, NULL);
	pthread_cond_init(&e->bad_cv, NULL);
	e->created_ns = e->idle_since = now_ns();
	e->nslots = e->o.slots;
	e->slots = calloc(e->nslots, sizeof(*e->slots));
	e->errors = calloc(MAX_ERRORS, sizeof(*e->errors));
	if (bfs_badset_create(e->nsamples, &e->bad)) {
		err = -ENOMEM;
		goto fail;
	}
	e->workers = calloc(e->o.threads, sizeof(*e->workers));
	if (!e->slots || !e->errors || !e->workers) {
		err = -ENOMEM;
		goto fail;
	}
	for (unsigned s = 0; s < e->nslots; s++)
		e->slots[s].fd = -1;
	for (unsigned i = 0; i < e->o.threads; i++) {
		struct worker *w = &e->workers[i];

		w->e = e;
		if ((err = bfs_decoder_create(&w->dec)))
			goto fail;
		if (e->o.cache &&
		    (err = bfs_cache_reader_create(e->o.cache, &w->cr))) {
			bfs_decoder_destroy(w->dec);
			w->dec = NULL;
			goto fail;
		}
		if (pthread_create(&w->thread, NULL, worker_main, w)) {
			bfs_decoder_destroy(w->dec);
			w->dec = NULL;
			err = -EAGAIN;
			goto fail;
		}
		e->nworkers++;
	}
	e->st.threads = e->nworkers;
	e->st.prefetch = e->o.prefetch;
	e->st.slots = e->nslots;
	e->st.mem_budget = e->o.mem_bytes;
	*out = e;
	return 0;
fail:
	bfs_seterr(errmsg, "cannot start the engine: %s", bfs_strerror(err));
	bfs_engine_destroy(e);
	return err;
}

void bfs_engine_destroy(bfs_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stop = 1;
	pthread_cond_broadcast(&e->work);
	pthread_cond_broadcast(&e->room);
	pthread_cond_broadcast(&e->bad_cv);
	pthread_mutex_unlock(&e->lock);
	for (unsigned i = 0; i < e->nworkers; i++)
		pthread_join(e->workers[i].thread, NULL);
	/* the cache writer may still read slots it was handed */
	if (e->o.cache)
		bfs_cache_flush(e->o.cache);
	for (unsigned i = 0; i < e->nworkers; i++) {
		bfs_decoder_destroy(e->workers[i].dec);
		bfs_cache_reader_destroy(e->workers[i].cr);
		bfs_buf_free(&e->workers[i].in);
		free(e->workers[i].scratch);
	}
	for (unsigned s = 0; s < e->nslots && e->slots; s++) {
		if (e->slots[s].images)
			slot_images_free(&e->slots[s]);
		free(e->slots[s].stage1);
		free(e->slots[s].labels);
		free(e->slots[s].rec);
		free(e->slots[s].items);
	}
	for (unsigned k = 0; k < e->nheld; k++)
		close(e->held[k].fd);
	free(e->held);
	pthread_cond_destroy(&e->work);
	pthread_cond_destroy(&e->done);
	pthread_cond_destroy(&e->room);
	pthread_cond_destroy(&e->bad_cv);
	pthread_mutex_destroy(&e->lock);
	bfs_badset_destroy(e->bad);
	free(e->workers);
	free(e->errors);
	free(e->slots);
	free(e->orders);
	free(e);
}

void bfs_engine_get_stats(bfs_engine *e, bfs_engine_stats *st)
{
	uint64_t now = now_ns(), alive;

	pthread_mutex_lock(&e->lock);
	reap_held(e);
	*st = e->st;
	st->decode_attempts = __atomic_load_n(&e->decode_attempts, __ATOMIC_RELAXED);
	st->sample_errors = bfs_badset_count(e->bad);
	st->errors_kept = e->nerrors;
	st->mem_slots = e->slot_mem;
	st->mem_scratch = e->scratch_used;
	st->mem_held = e->held_bytes;
	st->held_files = e->nheld;
	st->mem_bytes = st->mem_slots + st->mem_scratch + st->mem_held;
	st->slots_ready = st->slots_filling = 0;
	for (unsigned s = 0; s < e->nslots; s++) {
		if (e->slots[s].state == SLOT_READY)
			st->slots_ready++;
		else if (e->slots[s].state == SLOT_FILLING)
			st->slots_filling++;
	}
	st->samples_per_s = e->sample_ns > 0 ? 1e9 / e->sample_ns * e->nworkers : 0;
	alive = (now - e->created_ns) * e->nworkers;
	st->worker_idle = alive ? (double)idle_now_locked(e, now) / (double)alive : 0;
	st->nreaders = 0;
	for (unsigned r = 0; r < BFS_MAX_READERS; r++) {
		const struct reader *rd = &e->readers[r];
		bfs_reader_stats *o;

		if (!rd->key || now - rd->last_ns > READER_IDLE_NS)
			continue;
		o = &st->readers[st->nreaders++];
		o->reader = rd->key - 1;
		o->depth = rd->depth;
		o->batches_per_s = rd->interval_ns > 0 ? 1e9 / rd->interval_ns : 0;
		o->batches = rd->batches;
		o->waits = rd->waits;
		o->wait_s = (double)rd->wait_ns / 1e9;
	}
	pthread_mutex_unlock(&e->lock);
}

uint64_t bfs_engine_default_mem(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t mem = pages > 0 && psize > 0
		? (uint64_t)pages * (uint64_t)psize / 8 : 1ull << 30;

	if (mem > (1ull << 30))
		mem = 1ull << 30;
	if (mem < (256ull << 20))
		mem = 256ull << 20;
	return mem;
}

void bfs_engine_fingerprint(const bfs_engine_opts *o, char out[17])
{
	char desc[256];
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
	int n, s1h, s1w, post;
	bfs_dtype dt;

	stage1_of(o, &s1h, &s1w, &dt, &post);
	n = snprintf(desc, sizeof(desc),
		     "batchfs-format=%d;size=%dx%d;dtype=%s;"
		     "decode=turbojpeg-ifast-fancy-cmyk-adobe;"
		     "resize=bilinear-halfpixel-noaa",
		     BFS_FORMAT_VERSION, s1h, s1w, bfs_dtype_name(dt));
	if (o->resize_crop && n > 0 && n < (int)sizeof(desc))
		n += snprintf(desc + n, sizeof(desc) - (size_t)n, ";crop-from=%d",
			      o->crop_from ? o->crop_from : 256);
	for (int i = 0; i < n && i < (int)sizeof(desc); i++) {
		h ^= (unsigned char)desc[i];
		h *= 0x100000001b3ull;
	}
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}
