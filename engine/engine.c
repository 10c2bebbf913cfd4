/*
 * engine.c - the engine's face (see engine.h): options and their checks, the
 * geometry of batches and epochs, the memory budget's split, create and
 * destroy, stats and the fingerprint.  The work itself is in pool.c (the
 * workers), sample.c (one sample), slots.c (batch memory) and readers.c
 * (hint, get, put and read-ahead).
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/augment.h"
#include "engine/npy.h"
#include "engine/resize.h"
#include "engine/version.h"

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
uint64_t bfs__sample_of(const bfs_engine *e, uint64_t id, unsigned j)
{
	uint64_t epoch = id / e->per_epoch;
	uint64_t k = (id % e->per_epoch) * e->o.batch + j;

	return bfs_order_sample(&e->orders[epoch], k);
}

uint64_t bfs_engine_sample_index(const bfs_engine *e, uint64_t id, unsigned j)
{
	if (id >= e->total || j >= bfs_engine_batch_count(e, id))
		return UINT64_MAX;
	return bfs__sample_of(e, id, j);
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
	in_max = bfs__pow2_at_least((size_t)len_max + 4, 0);
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
	if (opts->store)
		e->store = *opts->store;
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
	if (e->o.lend_dir) {
		char hdr[256];

		e->slot_head = bfs_engine_npy_header(e, 0, hdr, sizeof(hdr));
		if (!e->slot_head)
			e->o.lend_dir = NULL;
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
	e->created_ns = e->idle_since = bfs__now_ns();
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
		/* a worker the store has no reader for decodes everything */
		if (e->o.store && e->store.reader_create(e->store.ctx, &w->sr))
			w->sr = NULL;
		if (pthread_create(&w->thread, NULL, bfs__worker_main, w)) {
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
	/* the store may still read slots it was offered */
	if (e->o.store)
		e->store.flush(e->store.ctx);
	for (unsigned i = 0; i < e->nworkers; i++) {
		bfs_decoder_destroy(e->workers[i].dec);
		if (e->o.store)
			e->store.reader_destroy(e->workers[i].sr);
		bfs_buf_free(&e->workers[i].in);
		free(e->workers[i].scratch);
	}
	bfs__slots_free(e);
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
	uint64_t now = bfs__now_ns(), alive;

	pthread_mutex_lock(&e->lock);
	bfs__reap_held(e);
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
	st->worker_idle = alive ? (double)bfs__idle_now_locked(e, now) / (double)alive : 0;
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
