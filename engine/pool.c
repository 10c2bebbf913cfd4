/*
 * pool.c - the engine's threads and its life: create (options checked,
 * the memory budget split, slots and workers made), the workers' loop
 * (which slot gets the next sample, a batch completed ready or failed,
 * offered to the store and, while the pool is idle, queued to be delivered
 * ahead of its reader), the courier that delivers it, and destroy.
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/pixels/image.h"
#include "engine/pixels/resize.h"
#include "engine/pixels/resize_pil.h"

/* ---- workers ---------------------------------------------------------- */

/* The store finished with batch b's memory (any thread). */
static void store_done(void *ctx)
{
	struct bfs_batch *b = ctx;
	bfs_engine *e = b->e;

	pthread_mutex_lock(&e->lock);
	b->pins--; /* matches the pin taken when b became READY */
	pthread_cond_broadcast(&e->done);
	pthread_mutex_unlock(&e->lock);
}

/* Offer the samples of a READY, pinned batch that were decoded (not read
 * from the store) to the store, one offer per batch.  Called without
 * e->lock, since the store may call store_done at once. */
static void offer_to_store(bfs_engine *e, struct bfs_batch *b)
{
	size_t n = 0;

	for (unsigned j = 0; j < b->n; j++) {
		if (!b->rec[j].decoded)
			continue;
		b->items[n].id = b->rec[j].id;
		b->items[n].label = b->rec[j].raw_label;
		if (e->rrc) { /* the copy in the arena, of its own size */
			b->items[n].data = b->arena + b->rec[j].off;
			b->items[n].len = b->rec[j].len;
			b->items[n].shape = b->rec[j].shape;
		} else {
			b->items[n].data = b->stage1 ? b->stage1 + (size_t)j * e->s1_bytes
						     : b->images + (size_t)j * e->sample_bytes;
			b->items[n].len = e->s1_bytes;
			b->items[n].shape = (bfs_store_shape){ (uint32_t)e->s1_h,
							       (uint32_t)e->s1_w, 0, 0 };
		}
		n++;
	}
	e->store.offer(e->store.ctx, b->items, n, store_done, b);
}

/* The slot with work whose turn it is: urgent first, then oldest request.
 * Its work may be to prepare its memory first (not prepared); a slot
 * another worker is preparing (busy) has none for now. */
static struct bfs_batch *next_work_locked(bfs_engine *e)
{
	struct bfs_batch *best = NULL;

	for (unsigned s = 0; s < e->nslots; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (b->state != SLOT_FILLING || b->next >= b->n || b->busy)
			continue;
		if (!best || (b->urgent && !best->urgent) ||
		    (b->urgent == best->urgent && b->seq < best->seq))
			best = b;
	}
	return best;
}

void *bfs__worker_main(void *arg)
{
	struct worker *w = arg;
	bfs_engine *e = w->e;
	char msg[BFS_ERRMSG_MAX];

	pthread_setname_np(pthread_self(), "bfs-decode"); /* top -H, perf, gdb */
	pthread_mutex_lock(&e->lock);
	while (!e->stop) {
		struct bfs_batch *b = next_work_locked(e);
		uint64_t id, bad = 0;
		unsigned j;
		int err;

		if (!b) {
			uint64_t t = bfs__now_ns();

			/* idle time: the autotuner's sign of an unsaturated pool */
			e->idle_ns += (uint64_t)e->idle_workers * (t - e->idle_since);
			e->idle_since = t;
			e->idle_workers++;
			pthread_cond_wait(&e->work, &e->lock);
			t = bfs__now_ns();
			e->idle_ns += (uint64_t)e->idle_workers * (t - e->idle_since);
			e->idle_since = t;
			e->idle_workers--;
			continue;
		}
		if (!b->prepared) {
			bfs__prepare(e, b); /* drops the lock meanwhile */
			continue;
		}
		j = b->next++;
		b->inflight++;
		id = b->id;
		w->slot = b;
		pthread_mutex_unlock(&e->lock);

		err = bfs__produce(w, b, j, msg);
		if (err) {
			b->rec[j].decoded = 0;
			bad = bfs__sample_of(e, id, j); /* before the lock */
		}

		pthread_mutex_lock(&e->lock);
		w->slot = NULL;
		b->inflight--;
		b->done++;
		if (err && !b->cancelled && (!b->err || j < b->err_at)) {
			char where[160];

			bfs_source_describe(e->src, bad, where, sizeof(where));
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
			if (b->inflight == 0 && !b->busy) {
				b->state = SLOT_FREE;
				pthread_cond_broadcast(&e->done);
				pthread_cond_broadcast(&e->room);
			}
		} else if (b->done == b->n && b->inflight == 0) {
			b->state = b->err ? SLOT_FAILED : SLOT_READY;
			b->transient = b->err && !bfs__lasting_error(b->err);
			b->failed_urgent = b->urgent;
			e->st.batches_produced++;
			pthread_cond_broadcast(&e->done);
			if (b->state == SLOT_READY && e->o.store) {
				/* pinned until the store is done with it */
				b->pins++;
				pthread_mutex_unlock(&e->lock);
				offer_to_store(e, b);
				pthread_mutex_lock(&e->lock);
			}
			/* Hand on only read-ahead that no reader has asked for
			 * yet, and only when no other work is queued: handing
			 * on costs CPU (a copy into the page cache) that a
			 * reader waiting on the pool would rather see spent on
			 * decoding; its reads copy the batch out anyway.  A
			 * pool with nothing else to do has the time to spare.
			 * (Measured, docs/BENCHMARKS.md: pushing every batch
			 * made cold epochs ~8% slower.)  The courier does it,
			 * never this worker (see courier_main). */
			if (b->state == SLOT_READY && e->o.deliver_ahead &&
			    !b->urgent && !next_work_locked(e)) {
				b->to_hand_on = 1;
				pthread_cond_signal(&e->hand);
			}
		}
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* ---- the courier ---------------------------------------------------- */

/* The oldest slot queued for handing on that is still unread read-ahead
 * (a reader may have asked for it, or it may have moved on, since). */
static struct bfs_batch *next_hand_on_locked(bfs_engine *e)
{
	struct bfs_batch *best = NULL;

	for (unsigned s = 0; s < e->nslots; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (!b->to_hand_on)
			continue;
		if (b->state != SLOT_READY || b->urgent || b->consumed ||
		    b->delivered) {
			b->to_hand_on = 0;
			continue;
		}
		if (!best || b->seq < best->seq)
			best = b;
	}
	return best;
}

/* The courier hands queued batches to deliver_ahead, one at a time,
 * pinned and without the lock.  deliver_ahead may wait on the reader's
 * side of the mount (the kernel looking up a name, or taking a page that
 * a READ holds): were a worker to call it, a reader's READ waiting on
 * that worker's next batch would wait on itself, and with every loop
 * thread of the mount in such a READ, nothing could answer the look-up.
 * The courier waits instead, and the workers go on decoding. */
static void *courier_main(void *arg)
{
	bfs_engine *e = arg;

	pthread_setname_np(pthread_self(), "bfs-courier"); /* top -H, perf, gdb */
	pthread_mutex_lock(&e->lock);
	while (!e->stop) {
		struct bfs_batch *b = next_hand_on_locked(e);
		uint64_t id;
		int handed;

		if (!b) {
			pthread_cond_wait(&e->hand, &e->lock);
			continue;
		}
		b->to_hand_on = 0;
		id = b->id;
		b->pins++;
		pthread_mutex_unlock(&e->lock);
		handed = e->o.deliver_ahead(e->o.ctx, id, b);
		pthread_mutex_lock(&e->lock);
		b->pins--;
		if (handed == 1) {
			e->st.batches_delivered++;
			b->delivered = 1; /* consumed once its reader hints it */
		}
		pthread_cond_broadcast(&e->done);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* ---- create/destroy --------------------------------------------------- */

unsigned bfs_engine_cores(void)
{
	cpu_set_t set;
	long n;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

/* Scratch one sample of this many pixels may need: its encoded bytes (as
 * large as the largest record, in the buffer's power-of-two steps), the
 * decoded pixels and the decoder's work memory in the format that needs
 * the most (bfs_image_scratch_max: lossless WebP, about 8 bytes a pixel;
 * a JPEG takes 4, CMYK decoding through four channels) and the resize
 * rows. */
static uint64_t need_for_pixels(const bfs_engine *e, uint64_t in_max,
				uint64_t pixels)
{
	uint64_t rs = 0;
	int side = 1;

	while ((uint64_t)side * side < pixels && side < 65500)
		side++;
	/* resize scratch depends on the output (and for crop on the shape):
	 * the square and the two extreme shapes bound it */
	if (e->rrc) {
		/* the reduced copy (or a stored one: never more pixels than
		 * the image), the resized box, and the resize rows for the
		 * widest reduced copy or output */
		rs = bfs_resize_scratch_size(65500, 65500, 65500, 1);
		if (e->o.resize_filter == BFS_RESIZE_FILTER_PIL)
			/* Pillow's passes keep a whole intermediate image
			 * (at most the source's pixels, or the output's times
			 * the box's side) and coefficient tables */
			rs += pixels * 3 + e->sample_bytes * 3 + (uint64_t)65500 * 64;
		return in_max + pixels * 4 + pixels * 3 + e->sample_bytes * 4 /
			bfs_dtype_size(e->o.dtype) + rs;
	}
	for (int k = 0; k < 3; k++) {
		int w = k == 0 ? side : k == 1 ? 65500 : (int)(pixels / 65500 + 1);
		int h = k == 0 ? side : k == 1 ? (int)(pixels / 65500 + 1) : 65500;
		int pil = e->o.resize_filter == BFS_RESIZE_FILTER_PIL;
		size_t r = e->o.resize_crop
			? (pil ? bfs_resize_pil_crop_scratch_size(w, h, e->o.crop_from, e->s1_w,
								  e->s1_h)
			       : bfs_resize_crop_scratch_size(w, h, e->o.crop_from, e->s1_w,
							      e->s1_h))
			: pil ? bfs_resize_pil_scratch_size(w, h, e->s1_w, e->s1_h)
			      : bfs_resize_scratch_size(w, h, e->s1_w, e->s1_h);

		if (r > rs)
			rs = r;
	}
	return in_max + bfs_image_scratch_max(pixels) + rs;
}

/* "--batch 16 of 10000x10000 float32 (the size schedule's largest)": what
 * one batch holds, for the messages below. */
static void describe_batch(const bfs_engine *e, char *out, size_t cap)
{
	int h = e->o.height, w = e->o.width, from_schedule = 0;

	for (unsigned k = 0; k < e->o.nsizes; k++)
		if ((uint64_t)e->o.sizes[k].h * (uint64_t)e->o.sizes[k].w >
		    (uint64_t)h * (uint64_t)w) {
			h = e->o.sizes[k].h;
			w = e->o.sizes[k].w;
			from_schedule = 1;
		}
	int n = snprintf(out, cap, "--batch %u of %dx%d %s%s", e->o.batch, h, w,
			 bfs_dtype_name(e->o.dtype),
			 from_schedule ? ", the size schedule's largest" : "");

	if (e->arena_cap && n > 0 && (size_t)n < cap)
		snprintf(out + n, cap - (size_t)n,
			 ", and room for their --cache-res %d copies in the cache",
			 e->cache_res ? e->cache_res : BFS_CACHE_RES_DEFAULT);
}

/* " (half of the RAM 23541 MiB and of the 20000 MiB available)" */
static void describe_room(const bfs_engine *e, char *out, size_t cap)
{
	snprintf(out, cap, "half of the RAM %llu MiB and of the %llu MiB available",
		 (unsigned long long)(e->mroom.ram_total >> 20),
		 (unsigned long long)(e->mroom.ram_available >> 20));
}

/* Split the budget (--mem): a scratch pool for the workers (at least
 * SCRATCH_BASE each, an eighth of the budget if that is more) and batch
 * slots in the rest.  A worker may borrow past the pool from the slots'
 * share (reserve), so the largest sample decodes as long as it fits in
 * the budget beside one batch and the other workers' SCRATCH_BASE.  With
 * --max-pixels that must hold for the largest image it allows: a default
 * budget grows to fit it (up to e->mem_cap), a default --max-pixels
 * (max_pixels_auto) shrinks to what the budget decodes, and otherwise the
 * options are refused with the --mem that would do.  A default budget too
 * small for two batches grows to hold four, never past e->mem_cap; what
 * does not fit there is refused, naming the batch and the room.  An
 * explicit --mem above what the machine has available (e->mem_max) is
 * refused.  0 or -EINVAL (errmsg says why). */
static int fit_budget(bfs_engine *e, int mem_default, char *errmsg)
{
	uint64_t slot_bytes = e->images_cap + e->o.batch * sizeof(int64_t) +
			      (e->post && !e->rrc ? (uint64_t)e->s1_bytes * e->o.batch : 0) +
			      e->arena_cap;
	uint64_t others = (uint64_t)(e->o.threads - 1) * SCRATCH_BASE;
	uint64_t scratch, slots, in_max = 0, len_max = 0, cap = e->mem_cap;
	char batch[160], room[160];

	describe_batch(e, batch, sizeof(batch));
	describe_room(e, room, sizeof(room));
	if (!mem_default && e->mem_max && e->o.mem_bytes > e->mem_max) {
		bfs_seterr(errmsg,
			   "--mem %llu MiB is more than this machine has: %llu MiB available of %llu MiB of RAM; use --mem %lluM or less",
			   (unsigned long long)(e->o.mem_bytes >> 20),
			   (unsigned long long)(e->mroom.ram_available >> 20),
			   (unsigned long long)(e->mroom.ram_total >> 20),
			   (unsigned long long)(cap >> 20));
		return -EINVAL;
	}
	for (uint64_t i = 0; i < e->nsamples; i++) {
		bfs_sample_identity id;

		if (bfs_source_identity(e->src, i, &id) == 0 && id.length > len_max)
			len_max = id.length;
	}
	in_max = bfs__pow2_at_least((size_t)len_max + 4, 0);
	if (e->o.max_pixels) {
		uint64_t need = need_for_pixels(e, in_max, e->o.max_pixels);
		/* a default budget may grow as far as the machine's cap */
		uint64_t mem = mem_default ? cap : e->o.mem_bytes;
		uint64_t grown = (need + slot_bytes + others + (1u << 20) - 1) &
				 ~((uint64_t)(1u << 20) - 1);

		if (need + slot_bytes + others <= e->o.mem_bytes) {
			/* fits as it is */
		} else if (mem_default && grown <= cap) {
			e->o.mem_bytes = grown;
		} else if (slot_bytes + others + in_max < mem) {
			/* a batch fits: what the budget decodes beside it is
			 * the question */
			uint64_t fit = (mem - slot_bytes - others - in_max) / 4;

			while (fit && need_for_pixels(e, in_max, fit) + slot_bytes +
					      others > mem)
				fit -= fit / 64 + 1;
			if (e->o.max_pixels_auto && fit >= 1) {
				e->o.max_pixels = fit;
				if (mem_default)
					e->o.mem_bytes = mem;
			} else {
				bfs_seterr(errmsg,
					   "%s%llu MiB%s cannot decode an image of --max-pixels %llu with %u threads (it needs %llu MiB beside a batch and the other threads' scratch); use --mem %lluM or more%s",
					   mem_default ? "the default --mem, at most " : "--mem ",
					   (unsigned long long)(mem >> 20),
					   mem_default ? " on this machine," : "",
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
		/* else not even a batch fits: refused below, naming it */
	}
	scratch = (uint64_t)e->o.threads * SCRATCH_BASE;
	if (mem_default && scratch + 2 * slot_bytes > e->o.mem_bytes) {
		/* many threads, or big batches: room for four, if the machine
		 * has it */
		uint64_t want = scratch + 4 * slot_bytes;

		e->o.mem_bytes = want < cap ? want : cap > e->o.mem_bytes ? cap : e->o.mem_bytes;
	}
	if (scratch < e->o.mem_bytes / 8)
		scratch = e->o.mem_bytes / 8;
	slots = e->o.mem_bytes > scratch
		? (e->o.mem_bytes - scratch) / slot_bytes : 0;
	if (slots > MAX_SLOTS)
		slots = MAX_SLOTS;
	if (e->o.slots)
		slots = e->o.slots; /* an explicit count wins */
	if (slots < 2) {
		uint64_t need = 2 * slot_bytes + (uint64_t)e->o.threads * SCRATCH_BASE;

		if (need < (2 * slot_bytes) * 8 / 7)
			need = (2 * slot_bytes) * 8 / 7; /* scratch takes an eighth */
		if (mem_default)
			bfs_seterr(errmsg,
				   "one batch takes %llu MiB (%s): two of them and the decoder scratch of %u threads need a --mem of %llu MiB, more than this machine gives the default --mem (%llu MiB: %s); use a smaller --batch or size%s",
				   (unsigned long long)((slot_bytes + (1u << 20) - 1) >> 20), batch,
				   e->o.threads, (unsigned long long)(need >> 20) + 1,
				   (unsigned long long)(e->o.mem_bytes >> 20), room,
				   e->mem_max && need > e->mem_max ? ""
				   : ", or an explicit --mem of that size");
		else
			bfs_seterr(errmsg,
				   "--mem %llu MiB is too small: it must hold 2 batches of %llu MiB (%s) plus %llu MiB of decoder scratch (%u threads); use --mem %lluM or more%s",
				   (unsigned long long)(e->o.mem_bytes >> 20),
				   (unsigned long long)(slot_bytes >> 20), batch,
				   (unsigned long long)(scratch >> 20),
				   e->o.threads,
				   (unsigned long long)(need >> 20) + 1,
				   e->mem_max && need > e->mem_max
				   ? ", more than this machine has available: use a smaller --batch or size" : "");
		return -EINVAL;
	}
	e->o.slots = (unsigned)slots;
	e->scratch_budget = (size_t)scratch;
	e->slot_bytes = (size_t)slot_bytes;
	return 0;
}

/* The RandomResizedCrop options, the size schedule and what goes with
 * them: defaults filled in, conflicts refused.  0 or -EINVAL. */
static int check_rrc(bfs_engine *e, char *errmsg)
{
	bfs_engine_opts *o = &e->o;

	if (o->resize_filter != BFS_RESIZE_FILTER_TF && o->resize_filter != BFS_RESIZE_FILTER_PIL) {
		bfs_seterr(errmsg, "resize filter %d: not tf (0) or pil (1)", o->resize_filter);
		return -EINVAL;
	}
	if (!o->augment_rrc) {
		if (o->nsizes || o->decode_scale_auto || o->decode_whole) {
			bfs_seterr(errmsg, "%s needs --augment rrc",
				   o->nsizes ? "--size-schedule"
				   : o->decode_whole ? "--decode-whole" : "--decode-scale auto");
			return -EINVAL;
		}
		return 0;
	}
	if (o->augment_crop || o->resize_crop) {
		bfs_seterr(errmsg, "--augment rrc crops by itself: not with %s",
			   o->augment_crop ? "--augment crop" : "--resize crop");
		return -EINVAL;
	}
	if (o->decode_scale_auto && o->store) {
		bfs_seterr(errmsg, "--decode-scale auto decodes each epoch's box anew: no cache can hold that (use --cache none)");
		return -EINVAL;
	}
	if (o->rrc.scale[0] == 0 && o->rrc.scale[1] == 0) {
		o->rrc.scale[0] = 0.08;
		o->rrc.scale[1] = 1.0;
	}
	if (o->rrc.ratio[0] == 0 && o->rrc.ratio[1] == 0) {
		o->rrc.ratio[0] = 3.0 / 4.0;
		o->rrc.ratio[1] = 4.0 / 3.0;
	}
	if (bfs_rrc_check(&o->rrc, errmsg))
		return -EINVAL;
	if (o->nsizes > BFS_ENGINE_MAX_SIZES) {
		bfs_seterr(errmsg, "a size schedule has at most %d entries", BFS_ENGINE_MAX_SIZES);
		return -EINVAL;
	}
	for (unsigned k = 0; k < o->nsizes; k++) {
		if (o->sizes[k].h < 1 || o->sizes[k].w < 1 ||
		    o->sizes[k].h > BFS_ENGINE_MAX_SIDE || o->sizes[k].w > BFS_ENGINE_MAX_SIDE ||
		    (k && o->sizes[k].from <= o->sizes[k - 1].from)) {
			bfs_seterr(errmsg, "size schedule: sizes 1..%d, epochs ascending",
				   BFS_ENGINE_MAX_SIDE);
			return -EINVAL;
		}
	}
	e->rrc = 1;
	e->cache_res = o->cache_res < 0 ? 0 : o->cache_res ? o->cache_res : BFS_CACHE_RES_DEFAULT;
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
		e->o.threads = bfs_engine_cores();
	if (!e->o.epochs)
		e->o.epochs = 1;
	if (opts->room)
		e->mroom = *opts->room;
	else
		bfs_engine_mem_room(opts->lend_dir, &e->mroom);
	e->o.room = NULL; /* copied */
	e->mem_cap = bfs_engine_mem_cap(&e->mroom);
	e->mem_max = bfs_engine_mem_max(&e->mroom);
	mem_default = !e->o.mem_bytes;
	if (!e->o.mem_bytes)
		e->o.mem_bytes = bfs_engine_default_mem_for(&e->mroom);
	if (e->o.height < 1 || e->o.width < 1 || e->o.height > BFS_ENGINE_MAX_SIDE ||
	    e->o.width > BFS_ENGINE_MAX_SIDE || e->o.batch < 1 || e->o.batch > 65536 ||
	    e->o.threads > 1024 || e->o.slots > MAX_SLOTS) {
		bfs_seterr(errmsg, "invalid engine options");
		free(e);
		return -EINVAL;
	}
	if ((err = check_rrc(e, errmsg))) {
		free(e);
		return err;
	}
	if (!e->o.world)
		e->o.world = 1;
	e->nranks = e->o.ranks ? e->o.ranks : 1;
	e->nsamples = bfs_source_count(src);
	if (e->o.rank >= e->o.world || e->nranks > e->o.world - e->o.rank ||
	    e->nsamples < e->o.world) {
		if (e->nranks > 1)
			bfs_seterr(errmsg, "--ranks %u-%u --world %u: %s", e->o.rank,
				   e->o.rank + e->nranks - 1, e->o.world,
				   e->nsamples >= e->o.world
				   ? "every rank must be below world"
				   : "fewer samples than ranks");
		else
			bfs_seterr(errmsg, "--rank %u --world %u: %s", e->o.rank,
				   e->o.world, e->o.rank >= e->o.world
				   ? "rank must be below world"
				   : "fewer samples than ranks");
		free(e);
		return -EINVAL;
	}
	if ((err = bfs__orders_create(e, errmsg))) {
		free(e);
		return err;
	}
	e->epoch_n = e->nsamples / e->o.world; /* bfs_layout_per_rank of a whole epoch */
	e->per_epoch = e->o.drop_remainder
		? e->epoch_n / e->o.batch
		: (e->epoch_n + e->o.batch - 1) / e->o.batch;
	if (e->per_epoch == 0) {
		bfs_seterr(errmsg,
			   "%llu samples make no full batch of %u (--drop-remainder)",
			   (unsigned long long)e->epoch_n, e->o.batch);
		bfs__orders_destroy(e);
		free(e);
		return BFS_E_EMPTY;
	}
	if (e->o.drop_remainder)
		e->epoch_n = e->per_epoch * e->o.batch;
	if (e->o.resume.on) { /* a resumed epoch: its rest, in fewer batches */
		e->partial = 1;
		e->partial_epoch = e->o.resume.epoch;
		e->partial_n = bfs_layout_per_rank(e->layout, e->partial_epoch);
		e->partial_batches = e->o.drop_remainder
			? e->partial_n / e->o.batch
			: (e->partial_n + e->o.batch - 1) / e->o.batch;
		if (e->o.drop_remainder)
			e->partial_n = e->partial_batches * e->o.batch;
	}
	e->per_rank = e->per_epoch * e->o.epochs;
	e->total = e->per_rank * e->nranks;
	e->sample_bytes = (size_t)e->o.height * e->o.width * 3 *
			  bfs_dtype_size(e->o.dtype);
	for (unsigned k = 0; k < e->o.nsizes; k++) { /* slots hold the largest */
		size_t sb = (size_t)e->o.sizes[k].h * e->o.sizes[k].w * 3 *
			    bfs_dtype_size(e->o.dtype);

		if (sb > e->sample_bytes)
			e->sample_bytes = sb;
	}
	e->images_cap = e->sample_bytes * e->o.batch;
	if (e->o.resize_crop && !e->o.crop_from)
		e->o.crop_from = 256;
	bfs__stage1_of(&e->o, &e->s1_h, &e->s1_w, &e->s1_dtype, &e->post);
	e->s1_bytes = (size_t)e->s1_h * e->s1_w * 3 * bfs_dtype_size(e->s1_dtype);
	if (e->o.resize_crop &&
	    (e->o.crop_from < e->s1_h || e->o.crop_from < e->s1_w)) {
		bfs_seterr(errmsg,
			   "--crop-from %d is smaller than the %dx%d window it must hold",
			   e->o.crop_from, e->s1_h, e->s1_w);
		bfs__orders_destroy(e);
		free(e);
		return -EINVAL;
	}
	if (e->o.lend_dir) {
		char hdr[256];

		e->slot_head = bfs_engine_npy_header(e, 0, hdr, sizeof(hdr));
		if (!e->slot_head)
			e->o.lend_dir = NULL;
	}
	if (e->post && !e->rrc) {
		char why[BFS_ERRMSG_MAX];

		bfs__post_of(e, 0, e->s1_dtype, &e->post_o);
		if (bfs_post_check(&e->post_o, why)) {
			bfs_seterr(errmsg, "%s", why);
			bfs__orders_destroy(e);
			free(e);
			return -EINVAL;
		}
	}
	for (unsigned ep = 0; e->rrc && ep <= e->o.nsizes; ep++) {
		char why[BFS_ERRMSG_MAX];
		bfs_post_opts po;

		/* every size of the schedule: the resized box, then stage 2 */
		bfs__post_of(e, ep ? e->o.sizes[ep - 1].from : 0,
			     e->o.dtype == BFS_DTYPE_UINT8 ? BFS_DTYPE_UINT8 : BFS_DTYPE_FLOAT32,
			     &po);
		if (bfs_post_check(&po, why)) {
			bfs_seterr(errmsg, "%s", why);
			bfs__orders_destroy(e);
			free(e);
			return -EINVAL;
		}
	}
	if (e->rrc && e->o.store) {
		/* a slot's stage-1 copies: room for a 4:3 image at the bound
		 * a sample (smaller ones leave room for wider ones); a copy
		 * that finds no room is offered in a later epoch, when its
		 * batch has room */
		size_t cr = (size_t)(e->cache_res ? e->cache_res : BFS_CACHE_RES_DEFAULT);

		e->arena_cap = (size_t)e->o.batch * cr * (cr * 4 / 3) * 3;
	}

	if ((err = fit_budget(e, mem_default, errmsg))) {
		bfs__orders_destroy(e);
		free(e);
		return err;
	}
	if (e->o.prefetch >= e->o.slots)
		e->o.prefetch = e->o.slots - 1;
	if (e->o.lend_dir && !bfs_engine_dir_fits(&e->mroom, e->o.mem_bytes)) {
		/* slot files would fill it: plain memory, which counts against
		 * the daemon, instead */
		snprintf(e->lend_note, sizeof(e->lend_note),
			 "%s has %llu MiB free, less than --mem %llu MiB and a quarter to spare; see --slot-dir",
			 e->o.lend_dir, (unsigned long long)(e->mroom.dir_free >> 20),
			 (unsigned long long)(e->o.mem_bytes >> 20));
		e->o.lend_dir = NULL;
		e->slot_head = 0;
	}

	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->work, NULL);
	pthread_cond_init(&e->done, NULL);
	pthread_cond_init(&e->room, NULL);
	pthread_cond_init(&e->bad_cv, NULL);
	pthread_cond_init(&e->hand, NULL);
	pthread_cond_init(&e->plan_cv, NULL);
	e->created_ns = e->idle_since = bfs__now_ns();
	e->nslots = e->o.slots;
	e->slots = calloc(e->nslots, sizeof(*e->slots));
	e->ahead_max = e->nslots - 1;
	{
		uint64_t n = bfs_source_ahead_samples(e->src) / e->o.batch;

		if (n < e->ahead_max)
			e->ahead_max = n ? (unsigned)n : 1;
	}
	e->errors = calloc(MAX_ERRORS, sizeof(*e->errors));
	if (bfs_badset_create(e->nsamples, &e->bad) ||
	    (e->rrc && !(e->whole_ok = calloc((size_t)((e->nsamples + 63) / 64),
					      sizeof(*e->whole_ok))))) {
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
		if (e->o.resize_filter == BFS_RESIZE_FILTER_PIL &&
		    (err = bfs_decoder_set_method(w->dec, BFS_DECODE_PIL)))
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
	if (e->o.deliver_ahead) {
		if (pthread_create(&e->courier, NULL, courier_main, e)) {
			err = -EAGAIN;
			goto fail;
		}
		e->courier_on = 1;
	}
	if ((err = bfs__plan_start(e)))
		goto fail;
	e->st.threads = e->nworkers;
	e->st.prefetch = e->o.prefetch;
	e->st.slots = e->nslots;
	e->st.ahead_max = e->ahead_max;
	e->st.mem_budget = e->o.mem_bytes;
	e->st.mem_cap = e->mem_cap;
	*out = e;
	return 0;
fail:
	bfs_seterr(errmsg, "cannot start the engine: %s", bfs_strerror(err));
	bfs_engine_destroy(e);
	return err;
}

const char *bfs_engine_lend_note(const bfs_engine *e)
{
	return e->lend_note;
}

void bfs_engine_destroy(bfs_engine *e)
{
	if (!e)
		return;
	bfs__plan_stop(e);
	pthread_mutex_lock(&e->lock);
	e->stop = 1;
	pthread_cond_broadcast(&e->work);
	pthread_cond_broadcast(&e->room);
	pthread_cond_broadcast(&e->bad_cv);
	pthread_cond_broadcast(&e->hand);
	pthread_mutex_unlock(&e->lock);
	if (e->courier_on)
		pthread_join(e->courier, NULL);
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
		free(e->workers[i].pix);
		free(e->workers[i].s1);
		free(e->workers[i].out);
	}
	bfs__slots_free(e);
	pthread_cond_destroy(&e->work);
	pthread_cond_destroy(&e->done);
	pthread_cond_destroy(&e->room);
	pthread_cond_destroy(&e->bad_cv);
	pthread_cond_destroy(&e->hand);
	pthread_cond_destroy(&e->plan_cv);
	pthread_mutex_destroy(&e->lock);
	bfs_badset_destroy(e->bad);
	free(e->whole_ok);
	free(e->workers);
	free(e->errors);
	free(e->slots);
	bfs__orders_destroy(e);
	free(e);
}

