/*
 * engine.h - the parallel decode -> resize -> batch engine.
 *
 * The engine turns sample indices of a bfs_source into batches: arrays of
 * B images of H x W x 3 (float32 = resized/255, or uint8 = resized rounded)
 * plus B int64 labels.  A pool of worker threads decodes samples in
 * parallel; batches live in a fixed set of reusable slots.
 *
 * Batch ids are global: id = epoch * batches_per_epoch + index.  Epoch e
 * serves the samples in file order, or with shuffle in the order of a
 * stateless permutation of (seed, e) (or with shuffle_block a block order
 * over shards), so any batch of any epoch can be produced first.  With
 * world > 1 a rank takes positions rank, rank+world, ... of that order,
 * floor(N / world) of them (PyTorch's DistributedSampler with
 * drop_last=True), or with split shards its node's span of it: engine/
 * layout.h says exactly which sample each rank serves where.  An epoch
 * that starts part way (opts.resume, an elastic resume) has fewer
 * batches: its batch ids past bfs_engine_epoch_batches do not exist.
 *
 * One engine may serve several consecutive ranks (opts.ranks, for the
 * local ranks of a node): then id = (r * epochs + epoch) *
 * batches_per_epoch + index, where r = rank - opts.rank, and each rank's
 * batches are byte for byte those of an engine made for that rank alone
 * (every rank has the same number of samples and batches).  The ranks
 * share the workers, the memory budget and the store; read-ahead follows
 * each reader within its own rank.  With one rank (opts.ranks 0 or 1) the
 * two formulas agree.
 *
 * The bytes of a batch depend only on the source, the options and the id:
 * never on the thread count, on timing, or on which batch was read first.
 *
 * Threads: every function except create/destroy may be called from any
 * thread at once.  bfs_engine_get() (and _flags) waits for its batch;
 * nothing else waits for a batch, and bfs_engine_hint makes no system
 * call at all (the workers prepare memory).  No engine lock is held
 * across a system call that can sleep.
 */
#ifndef BFS_ENGINE_H
#define BFS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"
#include "engine/layout.h"
#include "engine/pixels/rrc.h"
#include "engine/source.h"
#include "engine/store.h"
#include "engine/base/types.h"

typedef struct bfs_engine bfs_engine;
typedef struct bfs_batch bfs_batch;

#define BFS_RESIZE_FILTER_TF 0
#define BFS_RESIZE_FILTER_PIL 1
#define BFS_ENGINE_MAX_SIZES 16   /* entries of a size schedule */
#define BFS_ENGINE_MAX_SIDE 16384 /* output height and width */
#define BFS_CACHE_RES_DEFAULT 512 /* --cache-res: see docs/TRAINING.md, RandomResizedCrop */

typedef enum {
	BFS_ON_ERROR_FAIL = 0, /* the batch holding a bad sample fails */
	BFS_ON_ERROR_SKIP = 1, /* a bad sample is replaced (see below) */
} bfs_on_error;

/* One bad sample, as told to on_sample_error (once, when it is found)
 * and as recorded by bfs_engine_errors().  In skip mode a bad sample at
 * source index i is replaced by the first of i+1, i+2, ... (wrapping)
 * that decodes; the replacement's pixels and label take its place, and
 * its record (not the call, which comes before the replacement is known)
 * says which sample that was.  A bad sample is decoded once per engine:
 * later uses of it get its recorded error without decoding. */
typedef struct {
	uint64_t sample;         /* source index of the bad sample */
	uint64_t record;         /* its record index inside the shard */
	char shard[128];         /* shard file (relative to the source dir) */
	int code;                /* BFS_E_* or -errno */
	char msg[BFS_ERRMSG_MAX];/* what the reader or decoder said */
	int replaced;            /* skip mode, bfs_engine_errors() only: its
				  * positions are served by `replacement` */
	uint64_t replacement;
} bfs_sample_error;

typedef struct {
	unsigned batch;          /* samples per batch; default 32 */
	int height, width;       /* output size; default 224 x 224 */
	bfs_dtype dtype;         /* default float32 */
	unsigned threads;        /* decode workers; 0 = bfs_engine_cores() */
	unsigned prefetch;       /* batches read ahead per reader; 0 = auto */
	uint64_t mem_bytes;      /* memory budget: batch slots + decoder
				  * scratch; 0 = the default (see
				  * bfs_engine_default_mem_for), which may
				  * grow to hold big batches, never past
				  * bfs_engine_mem_cap */
	const struct bfs_mem_room *room; /* what the machine can give; NULL:
				  * measured at create (bfs_engine_mem_room,
				  * lend_dir's free space included).  Tests
				  * set it; copied */
	unsigned slots;          /* batches held in memory; 0 = as many as
				  * mem_bytes allows (tests set it) */
	unsigned epochs;         /* epochs in the namespace; 0 = 1 */
	int shuffle;             /* each epoch a permutation of (seed, epoch) */
	uint64_t seed;
	uint64_t shuffle_block;  /* with shuffle: blocks of this many shards,
				  * each block's samples permuted (layout.h);
				  * 0: a global shuffle */
	bfs_split split;         /* how the world divides an epoch (layout.h) */
	unsigned node_ranks;     /* split shards: ranks a node; 0: opts.ranks
				  * (a mount of a node's ranks), else 1 */
	bfs_layout_resume resume;/* an epoch that starts part way: what runs
				  * of a job already served of it (layout.h) */
	int64_t label_offset;    /* added to every label */
	/* Stage 1 (cached): decode, then resize.  resize_crop 0: stretch to
	 * the size (tf.image.resize); 1: shorter side to crop_from (0 = 256),
	 * keeping the aspect ratio, then the center window (ImageNet eval). */
	int resize_crop;
	int crop_from;
	/* The resize and decode rules of stage 1 and of RandomResizedCrop's
	 * box (and of the reduced copy the cache keeps for it):
	 * BFS_RESIZE_FILTER_TF (0): TensorFlow's (tf.image.resize, bilinear,
	 *   half-pixel, no antialias; tf.io.decode_jpeg's IFAST DCT);
	 * BFS_RESIZE_FILTER_PIL: Pillow's, as torchvision on PIL images
	 *   (Image.resize BILINEAR, antialiased when shrinking, resize_pil.h;
	 *   JPEGs decoded with the ISLOW DCT, BFS_DECODE_PIL). */
	int resize_filter;
	/* Stage 2 (after the cache, per epoch): a random horizontal flip and
	 * a random HxW crop out of a sample cached 8/7 larger, drawn from
	 * (seed, epoch, sample); then (x - mean) / std; then the layout. */
	int augment_flip, augment_crop;
	/* RandomResizedCrop (--augment rrc), instead of stage 1's resize and
	 * augment_crop: each epoch crops a box drawn per (seed, epoch,
	 * sample) from the decoded image (torchvision's semantics, rrc.h)
	 * and resizes it to the epoch's size (bilinear, half-pixel, as
	 * bfs_resize_rgb; Pillow's with resize_filter pil); augment_flip
	 * then mirrors it.  The stage-1 sample
	 * is the decoded image itself, uint8, with its shorter side reduced
	 * to cache_res when larger (bfs_rrc_reduced_size, bfs_resize_rgb to
	 * uint8), in every path, so its bytes never depend on the store:
	 * bit for bit a full decode, the box cut out and resized, for every
	 * image whose shorter side is at most cache_res.  Without a store
	 * (or while it wants nothing) an image that needs no reduction is
	 * decoded only in its box (bfs_decode_box).  rrc: zero ranges mean
	 * torchvision's (0.08, 1) and (3/4, 4/3). */
	int augment_rrc;
	bfs_rrc_opts rrc;
	int cache_res;           /* 0 = BFS_CACHE_RES_DEFAULT; < 0: never reduce */
	/* Scale the IDCT down (1/2, 1/4, 1/8) when the box is at least that
	 * many times the output, on every side: other pixels than the exact
	 * path (cache_res does not apply).  Needs store == NULL: the pixels
	 * depend on each epoch's box, which no stored copy holds. */
	int decode_scale_auto;
	/* rrc: decode every image whole and cut the box out, as the epoch
	 * that fills a store does (the same bytes; for comparison). */
	int decode_whole;
	/* Progressive resizing (rrc only): from epoch sizes[k].from on, the
	 * output is sizes[k].h x sizes[k].w; from 0 up to the first, height x
	 * width.  Ascending from, each in 1 .. BFS_ENGINE_MAX_SIDE. */
	unsigned nsizes;
	struct { unsigned from; int h, w; } sizes[BFS_ENGINE_MAX_SIZES];
	int nchw;
	int normalize;
	float mean[3], std[3];
	/* Where decoded samples are kept between epochs (store.h), or NULL.
	 * Samples are looked up before decoding, and every batch's decoded
	 * samples are offered once it is complete.  It must outlive the
	 * engine, which copies the table. */
	const bfs_store *store;
	unsigned rank, world;    /* DistributedSampler(drop_last=True) slice;
				  * world 0 = 1 */
	unsigned ranks;          /* serve ranks rank .. rank+ranks-1 (see the
				  * batch ids above); 0 = 1 */
	bfs_on_error on_error;
	uint64_t max_pixels;     /* 0 = no limit.  Every image within it must
				  * decode under mem_bytes (see create) */
	int max_pixels_auto;     /* max_pixels is a default, not asked for:
				  * lowered to what mem_bytes decodes instead
				  * of refusing the options */
	int drop_remainder;      /* drop the last partial batch */
	/* Called once per bad sample, when it is found, from a worker
	 * thread, without engine locks held; must not call back into the
	 * engine.  May be NULL. */
	void (*on_sample_error)(void *ctx, const bfs_sample_error *err);
	/* Delivery ahead of the reader: called for a batch that became ready
	 * as read-ahead (no reader has asked for it yet) while the pool had
	 * no other work queued, from the engine's courier thread (one call at
	 * a time, never from a worker), without engine locks held; b is
	 * pinned for the call.  It may block, even on readers (the mount's
	 * does a look-up through itself): decoding goes on meanwhile.  A
	 * batch a reader asks for before its turn is not handed on.  Return
	 * 1 when its bytes were delivered in full (the mount copies them into
	 * the kernel's page cache); the batch then counts as read once its
	 * reader hints it.  May be NULL. */
	int (*deliver_ahead)(void *ctx, uint64_t id, const bfs_batch *b);
	/* Memory that can be lent: with lend_dir (a tmpfs directory, e.g.
	 * /dev/shm) each slot is an unnamed file there holding the batch's
	 * whole .npy file, header and images, which bfs_engine_lend hands to
	 * a reader.  NULL: plain memory. */
	const char *lend_dir;
	void *ctx;
} bfs_engine_opts;

/* One reader (a process reading the mount), as the autotuner sees it. */
typedef struct {
	uint64_t reader;           /* the key given to hint/get (a pid) */
	uint64_t last_batch;       /* the batch id it moved to last (epoch *
				    * batches per epoch + batch) */
	unsigned depth;            /* its read-ahead depth now */
	double batches_per_s;      /* rate at which it moves to new batches */
	uint64_t batches;          /* new batches it asked for */
	uint64_t waits;            /* gets that found the batch not ready */
	double wait_s;             /* time spent waiting */
} bfs_reader_stats;

#define BFS_MAX_READERS 32

/* A histogram of durations over fixed bounds: count[i] holds the
 * observations d with bound(i-1) < d <= bound(i) (bfs_hist_bound_ns),
 * count[BFS_HIST_BUCKETS - 1] those above the last bound; not cumulative.
 * n is their number, sum_ns their total. */
#define BFS_HIST_BUCKETS 17
typedef struct {
	uint64_t count[BFS_HIST_BUCKETS];
	uint64_t n;
	uint64_t sum_ns;
} bfs_hist;

/* The upper bound of bucket i in nanoseconds, 100 us to 10 s in steps of
 * 1, 2.5, 5; UINT64_MAX for the last bucket (and for i out of range). */
uint64_t bfs_hist_bound_ns(unsigned i);
/* Count one duration of ns nanoseconds into h (the caller serializes). */
void bfs_hist_add(bfs_hist *h, uint64_t ns);

typedef struct {
	uint64_t batches_served;   /* distinct batch productions read */
	uint64_t samples_served;   /* the samples in them */
	uint64_t batches_produced;
	uint64_t batches_delivered;/* delivered ahead by deliver_ahead */
	uint64_t slot_files_replaced; /* moved to a new file: a reader held it */
	uint64_t slot_files_passed_over; /* held by a reader when it was to be
				    * reused: its batch went to another slot */
	uint64_t slot_file_errors; /* slot files not had (full tmpfs): plain
				    * memory used instead */
	uint64_t samples_decoded;
	uint64_t boxes_stopped_early; /* rrc: box decodes that stopped after
				    * the box, the sample's JPEG having decoded
				    * whole before in this engine's life */
	uint64_t decode_attempts;  /* samples read from a shard to be decoded
				    * (cache misses), whether they decoded or
				    * not: a bad sample is tried once */
	uint64_t bytes_read;       /* encoded bytes read from shards */
	uint64_t sample_errors;    /* bad samples seen (distinct, all of them) */
	uint64_t errors_kept;      /* of which bfs_engine_errors() keeps the
				    * records (the first BFS_ENGINE_MAX_ERRORS) */
	uint64_t cache_hits;       /* samples served from the store */
	uint64_t cache_crc_errors; /* stored samples that failed their CRC */
	uint64_t reader_waits;     /* gets that had to wait */
	uint64_t reader_wait_ns;   /* total time readers waited */
	bfs_hist reader_wait;      /* each of those waits (n == reader_waits,
				    * sum_ns == reader_wait_ns) */
	bfs_hist decode;           /* each sample decoded, the time to read,
				    * decode and resize it (n ==
				    * samples_decoded) */
	uint64_t mem_budget;       /* the budget (--mem) */
	uint64_t mem_cap;          /* the most a default budget may take on
				    * this machine (bfs_engine_mem_cap) */
	uint64_t mem_bytes;        /* what the budget counts now: the three
				    * below, never more than mem_budget */
	uint64_t mem_slots;        /* batch slots */
	uint64_t mem_scratch;      /* decoder/resize scratch */
	uint64_t mem_held;         /* slot files readers still hold after
				    * their slot moved on */
	uint64_t held_files;       /* how many files that is */
	uint64_t lend_declined;    /* bfs_engine_lend() refusals: the budget
				    * could not pay for another held file */
	uint64_t batch_mem_errors; /* batches failed because their memory
				    * could not be had (allocation refused):
				    * each read of one fails with EIO */
	double samples_per_s;      /* production rate while busy (all threads) */
	double worker_idle;        /* share of worker time spent idle */
	unsigned threads;
	unsigned prefetch;         /* fixed depth, or 0 when auto */
	unsigned ahead_max;        /* auto read-ahead, all readers together, at
				    * most: slots - 1, and for a remote source
				    * no more than half its shard cache holds */
	unsigned slots;
	unsigned slots_ready;
	unsigned slots_filling;
	unsigned nreaders;
	bfs_reader_stats readers[BFS_MAX_READERS];
} bfs_engine_stats;

/* What the machine can give a memory budget, in bytes; 0: unknown. */
typedef struct bfs_mem_room {
	uint64_t ram_total;      /* physical memory (sysinfo), or the
				  * cgroup's memory.max when lower */
	uint64_t ram_available;  /* MemAvailable (/proc/meminfo), or what the
				  * cgroup has left when lower */
	uint64_t dir_free;       /* free space of the slot directory
				  * (statvfs f_bavail), where slot files go */
} bfs_mem_room;

/* Measure *out: RAM from sysinfo (_SC_PHYS_PAGES if that fails), what is
 * available from /proc/meminfo, both lowered to a cgroup v2 memory.max
 * when there is one, and dir's free space from statvfs (dir NULL: 0).
 * What cannot be read stays 0.  Any thread. */
void bfs_engine_mem_room(const char *dir, bfs_mem_room *out);

/* The most a budget may take on a machine with room *r: half of its RAM
 * and half of what is available now, so that the trainer, the page cache
 * and everyone else keep the other half (batch slots in a tmpfs are
 * shared memory, which the kernel's OOM killer does not charge to the
 * daemon: a budget past the RAM made it kill other processes).  Unknown
 * quantities do not limit; nothing known: 1 GiB.  Pure. */
uint64_t bfs_engine_mem_cap(const bfs_mem_room *r);

/* The most an explicit --mem may be: what is available (RAM when that is
 * unknown); 0: no limit known.  Pure. */
uint64_t bfs_engine_mem_max(const bfs_mem_room *r);

/* The default memory budget: 1/8 of physical memory, between 256 MiB and
 * 1 GiB, never more than bfs_engine_mem_cap(r).  1 GiB holds ~50 float32
 * batches of 32 x 224 x 224 x 3 (19 MB): read-ahead for several readers
 * plus decoder scratch, while staying a small share of a training
 * machine's host memory.  Create grows it (to four batches and scratch,
 * or to decode an image of max_pixels) as far as the cap, and refuses
 * options that do not fit there.  Pure. */
uint64_t bfs_engine_default_mem_for(const bfs_mem_room *r);

/* bfs_engine_default_mem_for this machine's room (no slot directory). */
uint64_t bfs_engine_default_mem(void);

/* The slot directory only fits budgets up to 3/4 of its free space (a
 * quarter is left to others); a larger one turns lending off.  Pure. */
int bfs_engine_dir_fits(const bfs_mem_room *r, uint64_t budget);

/* The cores this process may run on: its CPU affinity (what taskset,
 * cpusets and Slurm's binding leave it), as nproc counts them; the online
 * cores when the affinity cannot be read.  At least 1. */
unsigned bfs_engine_cores(void);

/* Start the worker pool over src, which must outlive the engine.  With
 * lend_dir, a budget the directory has no room for (bfs_engine_dir_fits)
 * leaves lending off: bfs_engine_lend_note says why.
 * Errors: -EINVAL (bad options -- the layout's among them, layout.h --, or
 * a memory budget too small for two
 * batches plus decoder scratch: errmsg says how much is needed; a default
 * budget that would need more than bfs_engine_mem_cap, or an explicit one
 * above bfs_engine_mem_max: errmsg names the budget and the room),
 * BFS_E_EMPTY (no batch: fewer samples than one batch with
 * drop_remainder), -ENOMEM, -EAGAIN (threads). */
int bfs_engine_create(bfs_source *src, const bfs_engine_opts *opts,
		      bfs_engine **out, char *errmsg);
/* Why opts.lend_dir was not used (the directory has no room for the
 * budget), or "" when it is used or none was given.  Owned by e. */
const char *bfs_engine_lend_note(const bfs_engine *e);

/* Stop the workers and free everything.  No batch may be held.  NULL ok. */
void bfs_engine_destroy(bfs_engine *e);

/* Shape of the namespace. */
uint64_t bfs_engine_batches_per_epoch(const bfs_engine *e);
unsigned bfs_engine_epochs(const bfs_engine *e);
/* Ranks served (opts.ranks, at least 1); ids run over all of them. */
unsigned bfs_engine_ranks(const bfs_engine *e);
/* Samples in batch id (B, or fewer for the last one of an epoch); 0 for
 * an id that does not exist (out of range, or past the resumed epoch's
 * batches). */
unsigned bfs_engine_batch_count(const bfs_engine *e, uint64_t id);
/* Height and width of the cached (stage-1) form of a sample; 0 x 0 with
 * rrc, whose stage-1 samples each have their image's own size. */
void bfs_engine_cached_shape(const bfs_engine *e, int *h, int *w);
/* The output size of epoch `epoch` (the size schedule's, or the options'). */
void bfs_engine_epoch_shape(const bfs_engine *e, unsigned epoch, int *h, int *w);
/* Bytes of one image of batch id: its epoch's H * W * 3 * sizeof(dtype);
 * 0 for an id out of range. */
size_t bfs_engine_batch_sample_bytes(const bfs_engine *e, uint64_t id);

/* The augmentation drawn for position j of batch id (all zero without
 * --augment; with rrc the flip only: the box is bfs_batch_rrc's).  0 or
 * -EINVAL. */
int bfs_engine_sample_aug(const bfs_engine *e, uint64_t id, unsigned j,
			  int *flip, int *x0, int *y0);
/* Source index of position j of batch id, or UINT64_MAX if out of range. */
uint64_t bfs_engine_sample_index(const bfs_engine *e, uint64_t id,
				 unsigned j);
/* Samples one epoch serves (one rank's share, after drop_remainder). */
uint64_t bfs_engine_epoch_samples(const bfs_engine *e);
/* The same for epoch `epoch` (the resumed epoch has fewer), and its
 * batches (<= bfs_engine_batches_per_epoch; 0 past the epochs). */
uint64_t bfs_engine_epoch_samples_of(const bfs_engine *e, unsigned epoch);
uint64_t bfs_engine_epoch_batches(const bfs_engine *e, unsigned epoch);
/* The epochs' layout (which sample each rank serves where; its options
 * with every default filled in).  Owned by e. */
const bfs_layout *bfs_engine_layout(const bfs_engine *e);
/* Bytes of one image in the output: H * W * 3 * sizeof(dtype), of the
 * largest size of the schedule (what a slot holds per sample). */
size_t bfs_engine_sample_bytes(const bfs_engine *e);
const bfs_engine_opts *bfs_engine_options(const bfs_engine *e);

/* Reader `reader` (any stable key, e.g. its pid; 0 = anonymous) is about
 * to read batch id: start it (if it is not in memory) and read ahead the
 * next batches, as deep as this reader's depth (fixed --prefetch, or
 * autotuned).  Never blocks. */
void bfs_engine_hint(bfs_engine *e, uint64_t reader, uint64_t id);

/* Get batch id, waiting until it is produced.  On success *out is pinned:
 * its memory stays valid and unchanged until bfs_engine_put(e, *out).
 * Errors: the first bad sample's code (BFS_E_*, -EIO, ...) with errmsg
 * naming the shard and record, when on_error is fail; -EINVAL for an id
 * that does not exist (bfs_engine_batch_count 0); -ENOMEM.  Nothing is
 * pinned on error. */
int bfs_engine_get(bfs_engine *e, uint64_t reader, uint64_t id,
		   bfs_batch **out, char *errmsg);
/* bfs_engine_get, but with BFS_GET_ALONE it starts only batch id, no
 * read-ahead: for a caller that lets its reader go first and then calls
 * bfs_engine_hint.  Workers woken for read-ahead just before the reader
 * is let go delay its wake-up by a scheduler slice (4-5 ms measured here,
 * both cores then busy decoding). */
#define BFS_GET_ALONE 1u
int bfs_engine_get_flags(bfs_engine *e, uint64_t reader, uint64_t id,
			 unsigned flags, bfs_batch **out, char *errmsg);
/* Unpin a batch from bfs_engine_get(). */
void bfs_engine_put(bfs_engine *e, bfs_batch *b);

/* The pinned batch's contents: count images of sample_bytes each, packed
 * NHWC, and count labels.  Valid until bfs_engine_put(). */
unsigned bfs_batch_count(const bfs_batch *b);
const void *bfs_batch_images(const bfs_batch *b);
const int64_t *bfs_batch_labels(const bfs_batch *b);
/* The source sample whose pixels and label position j (< count) holds:
 * bfs_engine_sample_index's, or with BFS_ON_ERROR_SKIP the sample that
 * replaced a bad one there (also when the position failed: its own).
 * Valid while b is pinned. */
uint64_t bfs_batch_sample(const bfs_batch *b, unsigned j);
/* With rrc: position j's box in its source image's pixels, its flip and
 * the source image's width and height, as the worker drew and used them.
 * 0, or -EINVAL (no rrc, j out of range, or the position failed).  Valid
 * while b is pinned. */
int bfs_batch_rrc(const bfs_batch *b, unsigned j, bfs_rrc_box *box, int *flip,
		  int *src_w, int *src_h);

/* The NPY header of batch id's image file ("<f4" or "|u1", shape
 * (count, H, W, 3) or (count, 3, H, W), H and W of its epoch): its
 * length, 0 if cap is short. */
size_t bfs_engine_npy_header(const bfs_engine *e, uint64_t id, char *hdr,
			     size_t cap);
/* The pinned batch's file (lend_dir): its descriptor (owned by the
 * engine), a complete .npy file of *len bytes (the header above, then the
 * images).  -1 if the batch is in plain memory, or its header is not the
 * length of a full batch's (the images start where that one ends).  Only
 * for looking: a reader must be given it through bfs_engine_lend. */
int bfs_batch_file(const bfs_batch *b, size_t *len);
/* Lend the pinned batch's file to a reader (who opens it, and may map
 * it): returns its descriptor (owned by the engine; valid while b is
 * pinned) and its length in *len, or -1 when the batch is in plain memory
 * or the budget is spent.  Its bytes then stay as they are for as long as
 * any open file of it exists: when the slot is reused while a reader
 * still holds the file, the slot moves to a fresh file and the held one
 * counts in the memory budget (mem_held) until the reader lets go.  So a
 * file is lent only while the budget could pay for a fresh file for every
 * slot a reader may hold; past that it returns -1 (lend_declined) and the
 * caller serves the batch from memory.  Any thread; the lease probes it
 * may need run without engine locks. */
int bfs_engine_lend(bfs_engine *e, bfs_batch *b, size_t *len);

void bfs_engine_get_stats(bfs_engine *e, bfs_engine_stats *st);

/* Fingerprint of every setting that changes a cached (stage-1) sample's
 * bytes (its size, dtype, resize mode, decode and resize rules,
 * BFS_FORMAT_VERSION; with rrc: cache_res and the decode and reduce
 * rules), but not of stage 2 (augmentation, normalization, layout; with
 * rrc also the output size and dtype), which runs after the cache: 16 hex
 * digits + NUL. */
void bfs_engine_fingerprint(const bfs_engine_opts *opts, char out[17]);
/* Copy up to max recorded bad samples (oldest first) into out; returns how
 * many bad samples there are in all (which may exceed max, and the
 * BFS_ENGINE_MAX_ERRORS records kept: past those, bad samples are only
 * counted).  Each bad sample is recorded and reported once. */
#define BFS_ENGINE_MAX_ERRORS 1024
size_t bfs_engine_errors(bfs_engine *e, bfs_sample_error *out, size_t max);

#endif
