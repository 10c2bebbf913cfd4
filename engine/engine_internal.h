/*
 * engine_internal.h - what the engine's files share: its state, the slots
 * and workers, and the few functions one file offers another.  Not part of
 * the contract (engine.h).
 *
 * DESIGN
 * Producers: `threads` workers (pool.c).  Consumers: readers in hint, get
 * and put (readers.c).  Everything shared lives in struct bfs_engine and
 * is protected by e->lock, except the pixels a worker writes: a worker
 * that claimed sample j of a slot owns images[j] and labels[j] until it
 * reports back.
 *
 * A slot holds one batch (slots.c).  Its life: FREE -> FILLING (samples
 * handed out one at a time, several workers on one batch) -> READY or
 * FAILED.  A slot is reused (LRU) only when nobody pins it and no worker
 * is still writing into it (inflight == 0).  Its memory is allocated once
 * and reused for every batch it holds: plain memory, or a file in a tmpfs
 * directory (lend_dir) that a reader can be handed.
 *
 * Scheduling: a batch some reader waits on goes first (oldest wait
 * first); read-ahead comes after, in the order it was asked for, which is
 * nearest batch first.  Read-ahead never evicts a batch that was produced
 * but not yet read, so it cannot thrash.
 *
 * Memory: the budget (opts.mem_bytes) is split once at create (engine.c)
 * into a scratch pool (decoder pixels, encoded record, resize rows) and as
 * many batch slots as the rest holds.  A worker reserves scratch before it
 * grows a buffer (sample.c), borrowing from the slots' share when the pool
 * is short, and gives back what it holds above SCRATCH_BASE after each
 * sample, so a rare huge image waits for room instead of pushing the
 * process past the budget.  Files readers still hold count too.
 *
 * Autotuning (readers.c): each reader (keyed by pid) has its own
 * read-ahead depth.  A reader that had to wait for a batch gets one more
 * batch of depth, but only while the workers were not already busy all
 * the time (more depth cannot help a saturated pool); a reader that has
 * not waited for a while gives one back.  Depth is capped by the slots it
 * may use.
 */
#ifndef BFS_ENGINE_INTERNAL_H
#define BFS_ENGINE_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/pixels/augment.h"
#include "engine/badset.h"
#include "engine/pixels/decode.h"
#include "engine/engine.h"
#include "engine/layout.h"
#include "engine/pixels/rrc.h"

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
	int delivered;        /* handed on ahead by deliver_ahead */
	int to_hand_on;       /* queued for the courier (pool.c) */
	int cancelled;        /* read-ahead abandoned to free the slot */
	int prepared;         /* its memory is ready for its batch: samples
			       * may be handed out (slots.c) */
	unsigned busy;        /* threads working on its memory without the
			       * lock (preparing it, probing its lease):
			       * not to be reused, freed or probed */
	int counted;          /* its batch memory counts in e->slot_mem
			       * (allocated, or claimed for a preparer) */
	int err;              /* first error (lowest sample) when FAILED */
	int transient;        /* FAILED for a reason of the moment (a remote
			       * shard the network did not give): a later get
			       * starts it again; reported first if a reader
			       * was waiting for it when it failed */
	int failed_urgent;    /* a reader waited for it when it failed */
	unsigned err_at;      /* sample position of err */
	char errmsg[BFS_ERRMSG_MAX];
	uint8_t *images;      /* capacity: opts.batch * sample_bytes */
	/* With o.lend_dir the slot is a file: the batch's NPY header, then
	 * the images (see slots.c) */
	int fd;               /* -1: images is plain memory */
	uint8_t *map;         /* the file's mapping; images = map + slot_head */
	size_t map_len;
	size_t file_len;      /* the file's size: head + n samples */
	int file_ok;          /* the header fits the head room exactly */
	int lent;             /* its file was lent to a reader since filled */
	int held_by_reader;   /* a reader still held it when it was to be
			       * reused: passed over until a probe says not */
	uint8_t *stage1;      /* B cached-form samples when stage 2 runs,
				 else NULL (images are the cached form) */
	/* rrc with a store: the stage-1 copies offered, one after the other
	 * (e->arena_cap bytes; arena_used protected by e->lock, the bytes
	 * of a claimed range owned like images[j]) */
	uint8_t *arena;
	size_t arena_used;
	struct rrc_rec *rrc;  /* rrc: what position j drew, owned like images[j] */
	int64_t *labels;
	/* position j: the source sample whose pixels and label it holds --
	 * its own (bfs__sample_of), or in skip mode the one that replaced it;
	 * owned like images[j] */
	uint64_t *served;
	/* cache bookkeeping, position j owned like images[j] */
	struct cache_rec *rec;
	bfs_store_item *items;
	bfs_engine *e;        /* for the cache writer's done callback */
};

/* What the store needs of position j once the batch is complete. */
struct cache_rec {
	bfs_sample_identity id; /* of the sample actually decoded */
	int64_t raw_label;    /* before --label-offset */
	int decoded;          /* 1: decoded here, so worth inserting */
	/* rrc: the stage-1 copy in the slot's arena */
	size_t off, len;
	bfs_store_shape shape;
};

/* What position j of an rrc batch drew (index.json shows it). */
struct rrc_rec {
	int ok;               /* the position was produced */
	bfs_rrc_box box;      /* in source pixels */
	int flip;
	int src_w, src_h;
};

struct worker {
	bfs_engine *e;
	pthread_t thread;
	bfs_decoder *dec;
	size_t dec_bytes;      /* largest image the decoder has held */
	bfs_buf in;            /* encoded bytes */
	void *scratch;         /* resize scratch */
	size_t scratch_cap;
	uint8_t *pix;          /* decoded pixels of a PNG or WebP (a JPEG's
				* are in dec); at most one of the two held */
	size_t pix_cap;
	uint8_t *s1;           /* rrc: the stage-1 copy (reduced, or from the
				* store) */
	size_t s1_cap;
	void *out;             /* rrc: the resized box before stage 2 */
	size_t out_cap;
	size_t held;           /* scratch reserved from the budget */
	struct bfs_batch *slot;/* the slot of the sample it works on, or NULL
				* (protected by e->lock) */
	void *sr;              /* its store reader; NULL: none */
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
	bfs_store store;      /* a copy of *o.store, when there is one */
	uint64_t nsamples;    /* in the source */
	uint64_t epoch_n;     /* samples one epoch of this rank serves */
	bfs_layout *layout;   /* which sample each rank serves where, for
			       * every epoch and rank (orders.c) */
	struct order_cache *oc; /* the tables of the epochs in use (a block
			       * order's); NULL when epochs need none */
	unsigned nranks;      /* ranks served, opts.ranks or 1 */
	uint64_t per_epoch;   /* batches per epoch (the resumed one: fewer) */
	int partial;          /* opts.resume: epoch partial_epoch has only
			       * partial_batches batches, of partial_n
			       * samples; its ids past those are holes */
	unsigned partial_epoch;
	uint64_t partial_n, partial_batches;
	uint64_t per_rank;    /* per_epoch * epochs: one rank's batch ids */
	uint64_t total;       /* per_rank * nranks */
	size_t sample_bytes;
	size_t images_cap;    /* bytes of one slot's image buffer */
	size_t slot_head;     /* slot files: a full batch's NPY header */
	int s1_h, s1_w;       /* stage-1 (cached) sample size; 0 with rrc */
	int rrc;              /* RandomResizedCrop (o.augment_rrc) */
	int cache_res;        /* rrc: shorter side bound; 0 = none */
	size_t arena_cap;     /* rrc with a store: bytes of a slot's arena */
	bfs_mem_room mroom;   /* what the machine gives (opts.room or measured) */
	uint64_t mem_cap;     /* bfs_engine_mem_cap(&room): a default's limit */
	uint64_t mem_max;     /* bfs_engine_mem_max(&room): an explicit one's */
	char lend_note[256];  /* why lend_dir was dropped, or "" */
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
	unsigned ahead_max;   /* batches read ahead, all readers together, at
			       * most: nslots - 1, and for a remote source
			       * what half its shard cache holds
			       * (bfs_source_ahead_samples) */
	uint64_t seq, tick;                /* protected by lock */
	struct worker *workers;
	unsigned nworkers;
	/* The courier: the one thread that calls o.deliver_ahead, which may
	 * block on the reader's side of the mount; a worker never does, so
	 * decoding goes on meanwhile (pool.c). */
	pthread_t courier;
	int courier_on;
	pthread_cond_t hand;               /* a slot was queued for it, or stop */

	bfs_sample_error *errors;          /* protected by lock: the first
					    * MAX_ERRORS bad samples */
	size_t nerrors;                    /* protected by lock */
	bfs_badset *bad;                   /* protected by lock: every bad
					    * sample, and those being tried */
	pthread_cond_t bad_cv;             /* a pending sample was decided */
	/* rrc: bit i of whole_ok is set once source sample i's JPEG has been
	 * entropy-decoded whole without an error in this engine's life (a
	 * whole decode, or a box decode that read the stream to its end);
	 * its later box decodes stop after the box (BFS_DECODE_BOX_STOP): the
	 * same pixels, and the same samples bad in every epoch.  Words set
	 * and read with atomics, no lock; NULL without rrc. */
	uint64_t *whole_ok;

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
	unsigned nlent;                    /* protected by lock: slots whose
					    * file is lent to a reader */

	struct reader readers[BFS_MAX_READERS]; /* protected by lock */
	uint64_t idle_ns;                  /* workers' waiting, protected by lock */
	unsigned idle_workers;             /* protected by lock */
	uint64_t idle_since;               /* protected by lock */
	double sample_ns;                  /* EWMA per sample, protected by lock */
	uint64_t created_ns;

	uint64_t decode_attempts;          /* atomic */
	bfs_engine_stats st;               /* protected by lock */

	/* A remote source's planner (plan.c) */
	pthread_t planner;
	int planner_on;
	int plan_stop;                     /* protected by lock */
	pthread_cond_t plan_cv;            /* plan_stop was set */
};

/* Does a failure say something about the sample itself (so trying it
 * again gives the same answer), rather than about this moment: memory, a
 * remote shard the network did not give? */
static inline int bfs__lasting_error(int err)
{
	return err != -ENOMEM && err != -EAGAIN && err != -EINTR &&
	       err != BFS_E_REMOTE && err != -ECANCELED;
}

static inline uint64_t bfs__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The smallest power of two >= need, starting at from (or 64 KiB). */
static inline size_t bfs__pow2_at_least(size_t need, size_t from)
{
	size_t cap = from ? from : 1 << 16;

	while (cap < need)
		cap *= 2;
	return cap;
}

/* Files readers still hold after their slot moved on: bytes.  Lock held. */
static inline uint64_t bfs__held_bytes_locked(const bfs_engine *e)
{
	return e->held_bytes;
}

/* ---- engine.c ---------------------------------------------------------- */

/* The cached (stage-1) form of a sample for these options: its size and
 * dtype, and whether stage 2 does anything (*post). */
void bfs__stage1_of(const bfs_engine_opts *o, int *h, int *w, bfs_dtype *dt,
		    int *post);

/* Source index of position j of batch id: its rank's k-th sample of its
 * epoch's layout (layout.h: the order, the split, a resume), k = index *
 * batch + j.  The one place that maps a position to a sample; cheap
 * (O(log shards), a block order's table from the cache), any thread,
 * with or without e->lock. */
uint64_t bfs__sample_of(const bfs_engine *e, uint64_t id, unsigned j);
/* The epoch batch id belongs to (whatever its rank). */
uint64_t bfs__epoch_of(const bfs_engine *e, uint64_t id);
/* The batch d after id in its reader's sequence: the same rank's next
 * batch, past the end of an epoch into the next, after the last epoch
 * back to the rank's first; the resumed epoch's holes are passed over. */
uint64_t bfs__ahead_of(const bfs_engine *e, uint64_t id, unsigned d);

/* How stage 2 makes an output sample of epoch `epoch` (its size from the
 * schedule) out of a src_h x src_w sample of src_dtype. */
void bfs__post_of(const bfs_engine *e, unsigned epoch, bfs_dtype src_dtype,
		  bfs_post_opts *po);

/* ---- sample.c ---------------------------------------------------------- */

/* Produce position j of slot b's batch: its output sample in images,
 * its label, the cache's record of it (and with rrc its draw).  In skip
 * mode a bad sample is replaced by the next source sample that decodes
 * (wrapping).  0, or the error for position j (msg says what). */
int bfs__produce(struct worker *w, struct bfs_batch *b, unsigned j, char *msg);

/* ---- slots.c ----------------------------------------------------------- */

/* What the budget counts now: slots, scratch and held files.  Lock held. */
uint64_t bfs__mem_used_locked(const bfs_engine *e);
/* The slot holding batch id (not cancelled), or NULL.  Lock held. */
struct bfs_batch *bfs__find_locked(bfs_engine *e, uint64_t id);
/* A slot to start a new batch in (for_reader: a reader waits for it, so
 * unread read-ahead may go), or NULL.  Lock held. */
struct bfs_batch *bfs__victim_locked(bfs_engine *e, int for_reader);
/* Start batch id in slot b (claims it and its share of the budget; no
 * system call: a worker prepares its memory, bfs__prepare).  0, or
 * -EAGAIN when the budget has no room for its memory now (a worker
 * borrowed it, or files readers hold spent it).  Lock held. */
int bfs__start_locked(bfs_engine *e, struct bfs_batch *b, uint64_t id,
		      int urgent);
/* Cancel the newest unpinned, non-urgent read-ahead: 1 if one was.
 * Lock held. */
int bfs__cancel_readahead_locked(bfs_engine *e);
/* Free slot memory for worker w's big sample (see slots.c); how many slots
 * were freed or cancelled.  Lock held; dropped inside. */
unsigned bfs__release_slots_locked(bfs_engine *e, struct worker *w,
				   uint64_t want);
/* Forget the held files their readers let go of; how many.  Lock held;
 * dropped inside. */
unsigned bfs__reap_held(bfs_engine *e);
/* bfs__reap_held, and look again at slots whose lent file a reader held
 * when they were to be reused: how many were let go of.  Lock held;
 * dropped inside. */
unsigned bfs__probe_held(bfs_engine *e);
/* Prepare slot b's memory for its batch (first allocation, a lent file's
 * lease, the file's size) with the lock dropped; b is busy meanwhile.
 * Then b is prepared, or given up (its readers start the batch again
 * elsewhere), or failed (-ENOMEM).  Lock held; dropped inside. */
void bfs__prepare(bfs_engine *e, struct bfs_batch *b);
/* Free every slot's memory and the held files (destroy). */
void bfs__slots_free(bfs_engine *e);

/* ---- orders.c ---------------------------------------------------------- */

/* Set up e->layout from e->o and the source (the shard table of a block
 * order), and the cache of epoch tables if it needs one.  0, -EINVAL
 * (errmsg says why) or -ENOMEM. */
int bfs__orders_create(bfs_engine *e, char *errmsg);
void bfs__orders_destroy(bfs_engine *e);
/* Rank rank's k-th sample of epoch `epoch` (bfs_layout_sample), or
 * BFS_ORDER_NONE.  Any thread, with or without e->lock (the cache has a
 * lock of its own, taken after e->lock, never before). */
uint64_t bfs__order_sample(const bfs_engine *e, uint64_t epoch, unsigned rank,
			   uint64_t k);

/* ---- readers.c --------------------------------------------------------- */

/* Worker idle time so far, including workers idle right now.  Lock held. */
uint64_t bfs__idle_now_locked(bfs_engine *e, uint64_t now);

/* ---- plan.c ------------------------------------------------------------ */

/* Start the planner of a remote source (nothing for a local one): 0 or
 * -EAGAIN.  Stop it (and join it) before anything it reads goes. */
int bfs__plan_start(bfs_engine *e);
void bfs__plan_stop(bfs_engine *e);

/* Where the live readers and the decode work are, in batches along a
 * rank's sequence: the slowest and fastest readers' (*lo, *hi), the
 * frontier (*front: the first batch from *lo on that is not decoded --
 * its shards and those of every batch after it are still needed), and
 * one past the last batch being decoded (*end).  1, or 0 when no reader
 * reads.  Lock held. */
int bfs__plan_positions_locked(const bfs_engine *e, uint64_t *lo, uint64_t *hi,
			       uint64_t *front, uint64_t *end);

/* ---- pool.c ------------------------------------------------------------ */

/* A worker thread (arg: its struct worker). */
void *bfs__worker_main(void *arg);

#endif
