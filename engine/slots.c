/*
 * slots.c - batch slots and the memory that holds them: plain memory, or
 * a file in a tmpfs directory (opts.lend_dir) that can be lent to a
 * reader; which slot a new batch takes; files readers still hold; and
 * slot memory given up for a big sample.
 *
 * DESIGN
 * With lend_dir each slot is an unnamed file there, mapped shared, that
 * holds the batch's whole .npy file: the NPY header, then the images the
 * workers decode into.  bfs_engine_lend hands that file to a reader (the
 * mount gives it to the kernel: a read() or mmap then reaches the decoded
 * pages with no request to the daemon and no copy).
 *
 * A lent file is never written again while a reader can still see it:
 * not while it is open, nor while a reader maps it after closing
 * (np.load(mmap_mode='r') closes the file at once).  The engine keeps its
 * own descriptor, and a write lease is granted only when no other open
 * file of the inode remains (a mapping holds its file open), so a refused
 * lease means a reader still holds it.  Before a slot takes a new batch,
 * the lease of a lent file is asked for: granted, the file is reused in
 * place; refused, the slot moves to a fresh file and the old one is kept
 * as a held file, counted in the budget until its reader lets go.
 *
 * No system call that can sleep runs under e->lock.  start_locked only
 * claims a slot (and its share of the budget); when the slot's memory
 * needs work (its first allocation, a lent file's lease, a file sized for
 * another batch) the first worker to come to it prepares it with the lock
 * dropped, marking it `busy` meanwhile so that nobody reuses, frees or
 * probes it (bfs__prepare).  Lease probes elsewhere (lending, releasing
 * memory, held files) follow the same pattern: mark busy, drop the lock,
 * probe, take it again.  Memory taken away from a slot is freed after
 * the lock is dropped.
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define PROBE_MAX 64 /* lent slots a lend or a borrower probes at once */

uint64_t bfs__mem_used_locked(const bfs_engine *e)
{
	return e->slot_mem + e->scratch_used + bfs__held_bytes_locked(e);
}

struct bfs_batch *bfs__find_locked(bfs_engine *e, uint64_t id)
{
	for (unsigned s = 0; s < e->nslots; s++)
		if (e->slots[s].state != SLOT_FREE && e->slots[s].id == id &&
		    !e->slots[s].cancelled)
			return &e->slots[s];
	return NULL;
}

/* ---- slot memory (no lock held) --------------------------------------- */

/* Does an open file of fd's inode other than ours exist (see DESIGN)? */
static int file_held(int fd)
{
	if (fcntl(fd, F_SETLEASE, F_WRLCK) != 0)
		return 1; /* EAGAIN; or no leases here: assume held */
	fcntl(fd, F_SETLEASE, F_UNLCK);
	return 0;
}

/* A new file of head + images_cap bytes, allocated now (tmpfs pages are
 * allocated on first touch, and a full tmpfs would then raise SIGBUS in
 * the decoder; posix_fallocate reports ENOSPC instead).  Sets b's file
 * fields; 0 or -errno.  b is busy (or the engine is being created). */
static int file_open(bfs_engine *e, struct bfs_batch *b)
{
	size_t len = e->slot_head + e->images_cap;
	int fd = open(e->o.lend_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
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
	return 0;
}

static void file_close(struct bfs_batch *b)
{
	munmap(b->map, b->map_len);
	close(b->fd);
	b->fd = -1;
	b->map = NULL;
	b->images = NULL;
}

/* Plain memory for b's images.  2 MiB alignment lets the kernel back the
 * buffer with huge pages, which makes the first touch ~30x cheaper on
 * these VMs.  (tmpfs pages here are 4 KiB: shmem_enabled is never; a slot
 * file is allocated once, so only its first fill pays for that.) */
static int plain_open(bfs_engine *e, struct bfs_batch *b)
{
	if (posix_memalign((void **)&b->images, 2u << 20, e->images_cap)) {
		b->images = NULL;
		return -ENOMEM;
	}
#ifdef MADV_HUGEPAGE
	madvise(b->images, e->images_cap, MADV_HUGEPAGE);
#endif
	return 0;
}

/* Give b what a batch needs besides its images, once. */
static int small_buffers(bfs_engine *e, struct bfs_batch *b)
{
	int s1 = e->post && !e->rrc;

	if (s1 && !b->stage1 &&
	    posix_memalign((void **)&b->stage1, 2u << 20, e->s1_bytes * e->o.batch))
		b->stage1 = NULL;
	if (e->arena_cap && !b->arena && !(b->arena = malloc(e->arena_cap)))
		b->arena = NULL;
	if (e->rrc && !b->rrc)
		b->rrc = calloc(e->o.batch, sizeof(*b->rrc));
	if (!b->labels)
		b->labels = calloc(e->o.batch, sizeof(*b->labels));
	if (!b->served)
		b->served = calloc(e->o.batch, sizeof(*b->served));
	if (!b->rec)
		b->rec = calloc(e->o.batch, sizeof(*b->rec));
	if (e->o.store && !b->items)
		b->items = calloc(e->o.batch, sizeof(*b->items));
	b->e = e;
	return (s1 && !b->stage1) || (e->arena_cap && !b->arena) || (e->rrc && !b->rrc) ||
	       !b->labels || !b->served || !b->rec || (e->o.store && !b->items) ? -ENOMEM : 0;
}

/* ---- held files --------------------------------------------------------- */

/* Keep file fd (len bytes), which a reader still holds, until the reader
 * lets go: counted in the budget.  0 or -ENOMEM.  Lock held. */
static int hold_file_locked(bfs_engine *e, int fd, size_t len)
{
	if (e->nheld == e->held_cap) {
		unsigned cap = e->held_cap ? e->held_cap * 2 : 16;
		struct held_file *n = realloc(e->held, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		e->held = n;
		e->held_cap = cap;
	}
	e->held[e->nheld++] = (struct held_file){ .fd = fd, .len = len };
	e->held_bytes += len;
	return 0;
}

unsigned bfs__reap_held(bfs_engine *e)
{
	struct held_file mine[32];
	unsigned n = 0, freed = 0;

	/* take them out of the list (so no other reaper probes them), probe
	 * with the lock dropped, put back the ones still held */
	while (e->nheld && n < 32)
		mine[n++] = e->held[--e->nheld];
	if (!n)
		return 0;
	pthread_mutex_unlock(&e->lock);
	for (unsigned k = 0; k < n; k++) {
		if (file_held(mine[k].fd))
			continue;
		close(mine[k].fd); /* frees the pages */
		mine[k].fd = -1;
		freed++;
	}
	pthread_mutex_lock(&e->lock);
	for (unsigned k = 0; k < n; k++) {
		if (mine[k].fd >= 0)
			e->held[e->nheld++] = mine[k]; /* room: we took them */
		else
			e->held_bytes -= mine[k].len;
	}
	if (freed)
		pthread_cond_broadcast(&e->room);
	return freed;
}

/* ---- lending ------------------------------------------------------------ */

/* b is no longer a file lent to a reader (reused, replaced, freed).
 * Lock held. */
static void unlend_locked(bfs_engine *e, struct bfs_batch *b)
{
	if (b->lent) {
		b->lent = 0;
		e->nlent--;
	}
	b->held_by_reader = 0;
}

/* Probe the leases of up to PROBE_MAX lent slots that no one holds for
 * their bytes (filter), with the lock dropped: a slot whose file no
 * reader holds any more is no longer lent.  Returns how many became so.
 * Lock held; dropped inside. */
static unsigned probe_lent(bfs_engine *e, int (*filter)(const struct bfs_batch *))
{
	struct bfs_batch *mine[PROBE_MAX];
	int free_now[PROBE_MAX];
	unsigned n = 0, freed = 0;

	for (unsigned s = 0; s < e->nslots && n < PROBE_MAX; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (b->lent && b->fd >= 0 && !b->busy && filter(b)) {
			b->busy++;
			mine[n++] = b;
		}
	}
	if (!n)
		return 0;
	pthread_mutex_unlock(&e->lock);
	for (unsigned k = 0; k < n; k++)
		free_now[k] = !file_held(mine[k]->fd);
	pthread_mutex_lock(&e->lock);
	for (unsigned k = 0; k < n; k++) {
		mine[k]->busy--;
		if (free_now[k]) {
			unlend_locked(e, mine[k]);
			freed++;
		}
	}
	return freed;
}

static int held_by_reader(const struct bfs_batch *b)
{
	return b->held_by_reader;
}

unsigned bfs__probe_held(bfs_engine *e)
{
	return bfs__reap_held(e) + probe_lent(e, held_by_reader);
}

static int unpinned_done(const struct bfs_batch *b)
{
	return !b->pins && b->state != SLOT_FILLING;
}

/* May one more slot file be lent?  Only while the budget could pay for a
 * fresh file for each slot a reader may still hold when that slot is
 * reused.  Lock held. */
static int lend_room_locked(const bfs_engine *e)
{
	return bfs__mem_used_locked(e) + (uint64_t)(e->nlent + 1) * e->slot_bytes <=
	       e->o.mem_bytes;
}

int bfs_engine_lend(bfs_engine *e, bfs_batch *b, size_t *len)
{
	int fd = -1;

	pthread_mutex_lock(&e->lock);
	if (b->fd >= 0 && b->file_ok && !b->lent && !lend_room_locked(e)) {
		/* files lent earlier that nobody holds any more cost nothing
		 * at reuse: count only the held ones */
		bfs__reap_held(e);
		probe_lent(e, unpinned_done);
	}
	if (b->fd >= 0 && b->file_ok) {
		if (b->lent || lend_room_locked(e)) {
			if (!b->lent) {
				b->lent = 1;
				e->nlent++;
			}
			fd = b->fd;
			*len = b->file_len;
		} else {
			e->st.lend_declined++;
		}
	}
	pthread_mutex_unlock(&e->lock);
	return fd;
}

/* ---- claiming and preparing a slot -------------------------------------- */

/* Does the budget have room for one more slot's batch memory?  Not while
 * a worker is freeing slot memory for a big sample.  Lock held. */
static int slot_room_locked(const bfs_engine *e)
{
	return !e->borrower &&
	       bfs__mem_used_locked(e) + e->slot_bytes <= e->o.mem_bytes;
}

/* Write b's NPY header for its batch into its file's head room.  The
 * mapping is the file's own memory: no system call.  Lock held, or b
 * busy. */
static void write_header(bfs_engine *e, struct bfs_batch *b)
{
	b->file_ok = bfs_engine_npy_header(e, b->id, (char *)b->map,
					   e->slot_head) == e->slot_head;
}

int bfs__start_locked(bfs_engine *e, struct bfs_batch *b, uint64_t id,
		      int urgent)
{
	unsigned n = bfs_engine_batch_count(e, id);
	size_t sb = bfs_engine_batch_sample_bytes(e, id);

	if (!b->counted) {
		/* memory the preparing worker allocates: counted from now */
		if (!slot_room_locked(e))
			return -EAGAIN;
		e->slot_mem += e->slot_bytes;
		b->counted = 1;
	}
	b->state = SLOT_FILLING;
	b->id = id;
	b->n = n;
	b->next = b->done = b->inflight = 0;
	b->urgent = urgent;
	b->seq = ++e->seq;
	b->last_use = ++e->tick;
	b->consumed = 0;
	b->delivered = 0;
	b->to_hand_on = 0;
	b->cancelled = 0;
	b->err = 0;
	b->err_at = 0;
	b->errmsg[0] = '\0';
	b->arena_used = 0;
	/* Ready at once when nothing but the header needs doing; else the
	 * first worker to come prepares it (bfs__prepare). */
	b->prepared = b->images && b->labels &&
		      (b->fd < 0 ||
		       (!b->lent && b->file_len == e->slot_head + (size_t)n * sb));
	if (b->prepared && b->fd >= 0)
		write_header(e, b);
	pthread_cond_broadcast(&e->work);
	return 0;
}

void bfs__prepare(bfs_engine *e, struct bfs_batch *b)
{
	size_t len = e->slot_head + (size_t)b->n * bfs_engine_batch_sample_bytes(e, b->id);
	int lent = b->lent, err = 0, file_error = 0, held = 0, kept = 0;
	uint8_t *old_map = NULL;
	size_t old_len = 0;

	b->busy++;
	pthread_mutex_unlock(&e->lock);
	if (!b->images && e->o.lend_dir && file_open(e, b) != 0)
		file_error = 1; /* this slot uses plain memory */
	if (!b->images)
		err = plain_open(e, b);
	if (!err)
		err = small_buffers(e, b);
	if (!err && b->fd >= 0 && lent)
		held = file_held(b->fd);
	pthread_mutex_lock(&e->lock);
	if (held) {
		struct bfs_batch *nb;
		uint64_t id = b->id;

		/* A reader holds the file (a reader that maps its last batch
		 * while it opens the next holds exactly the slot read-ahead
		 * took).  Pass it over while another slot will do: the batch
		 * starts there, and this slot waits until a probe says its
		 * reader let go.  Else keep the file for the reader and move
		 * to a fresh one, if the budget can pay for both. */
		b->held_by_reader = 1;
		b->cancelled = 1; /* find_locked no longer sees it here */
		if (!(nb = bfs__victim_locked(e, b->urgent)) &&
		    bfs__probe_held(e)) /* others passed over may be free now */
			nb = bfs__victim_locked(e, b->urgent);
		if (bfs__find_locked(e, id)) {
			err = -EAGAIN; /* a reader started it elsewhere meanwhile */
		} else if (nb && bfs__start_locked(e, nb, id, b->urgent) == 0) {
			nb->seq = b->seq; /* keeps its turn */
			e->st.slot_files_passed_over++;
			err = -EAGAIN;
		} else if (bfs__mem_used_locked(e) + e->slot_bytes <= e->o.mem_bytes &&
			   hold_file_locked(e, b->fd, b->map_len) == 0) {
			b->cancelled = 0;
			b->held_by_reader = 0;
			old_map = b->map;
			old_len = b->map_len;
			b->fd = -1;
			b->map = NULL;
			b->images = NULL;
			e->st.slot_files_replaced++;
			kept = 1;
		} else {
			err = -EAGAIN; /* not now: its readers start it again */
		}
	}
	if (!err)
		unlend_locked(e, b);
	pthread_mutex_unlock(&e->lock);
	if (kept) {
		munmap(old_map, old_len); /* the descriptor stays held */
		if (file_open(e, b) != 0) {
			file_error = 1;
			err = plain_open(e, b);
		}
	}
	/* Only the last batch of an epoch is shorter; a file sized to it
	 * keeps a reader's read() from finding bytes past the batch. */
	if (!err && b->fd >= 0 && len != b->file_len) {
		if (ftruncate(b->fd, (off_t)len) != 0 ||
		    (len > b->file_len &&
		     posix_fallocate(b->fd, (off_t)b->file_len,
				     (off_t)(len - b->file_len)) != 0)) {
			file_close(b);
			file_error = 1;
			err = plain_open(e, b);
		} else {
			b->file_len = len;
		}
	}
	pthread_mutex_lock(&e->lock);
	if (file_error)
		e->st.slot_file_errors++;
	b->busy--;
	if (!err && b->fd >= 0)
		write_header(e, b);
	if (err == -EAGAIN || (err && !b->cancelled)) {
		/* The batch cannot be made here: give the slot up, so that its
		 * readers start it again in another (-EAGAIN: this one's file
		 * is held), or fail it (-ENOMEM). */
		if (err == -EAGAIN) {
			b->cancelled = 1;
			b->next = b->n;
			b->done = b->n;
		} else {
			b->err = err;
			bfs_seterr(b->errmsg, "out of memory for a batch");
			e->st.batch_mem_errors++;
			b->done = b->next = b->n;
			b->state = SLOT_FAILED;
		}
	}
	if (!b->images && b->counted) {
		e->slot_mem -= e->slot_bytes; /* nothing was allocated */
		b->counted = 0;
	}
	b->prepared = !err;
	if (b->cancelled && b->inflight == 0 && !b->busy) {
		b->state = SLOT_FREE;
		pthread_cond_broadcast(&e->room);
	}
	pthread_cond_broadcast(&e->done);
	pthread_cond_broadcast(&e->work);
}

/* ---- choosing a slot ------------------------------------------------------ */

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
 * A lent file comes after every other choice of its rank: a reader may
 * still hold it (np.load with mmap_mode='r' keeps its last batch while it
 * opens the next), and reusing a held file costs a fresh one.  Lock held.
 * NULL if none. */
struct bfs_batch *bfs__victim_locked(bfs_engine *e, int for_reader)
{
	struct bfs_batch *best = NULL;
	int best_rank = 99, room = slot_room_locked(e);

	for (unsigned s = 0; s < e->nslots; s++) {
		struct bfs_batch *b = &e->slots[s];
		int rank;

		if (b->pins || b->inflight || b->busy || b->held_by_reader)
			continue;
		if (b->state == SLOT_FREE && b->counted)
			rank = 0;
		else if (b->state != SLOT_FREE && b->state != SLOT_FILLING &&
			 b->consumed && !being_read_locked(e, b->id))
			rank = 2;
		else if (b->state == SLOT_FREE && room)
			rank = 4; /* never used: its pages are not touched yet */
		else if (b->state != SLOT_FREE && b->state != SLOT_FILLING &&
			 for_reader)
			rank = 6;
		else
			continue;
		rank += b->lent;
		if (rank < best_rank ||
		    (rank == best_rank && b->last_use < best->last_use)) {
			best = b;
			best_rank = rank;
		}
	}
	return best;
}

int bfs__cancel_readahead_locked(bfs_engine *e)
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
	if (best->inflight == 0 && !best->busy)
		best->state = SLOT_FREE;
	return 1;
}

/* ---- giving memory up for a big sample ---------------------------------- */

/* Memory a slot gave up, freed once the lock is dropped. */
struct freed {
	uint8_t *images, *stage1, *arena, *map;
	size_t map_len;
	int fd;
};

/* Take b's batch memory away into *f (b is FREE and memoryless after).
 * Lock held. */
static void strip_locked(bfs_engine *e, struct bfs_batch *b, struct freed *f)
{
	f->fd = b->fd;
	f->map = b->map;
	f->map_len = b->map_len;
	f->images = b->fd >= 0 ? NULL : b->images;
	f->stage1 = b->stage1;
	f->arena = b->arena;
	unlend_locked(e, b);
	b->fd = -1;
	b->map = NULL;
	b->images = NULL;
	b->stage1 = NULL;
	b->arena = NULL;
	b->state = SLOT_FREE;
	b->cancelled = 0;
	b->consumed = 0;
	b->delivered = 0;
	b->to_hand_on = 0;
	b->prepared = 0;
	if (b->counted) {
		e->slot_mem -= e->slot_bytes;
		b->counted = 0;
	}
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
		free(f[k].arena);
	}
}

static int any_unpinned(const struct bfs_batch *b)
{
	return !b->pins;
}

unsigned bfs__release_slots_locked(bfs_engine *e, struct worker *w,
				   uint64_t want)
{
	struct freed f[16];
	unsigned nf = 0, acted = 0;
	uint64_t got = 0;

	if (bfs__reap_held(e))
		return 1;
	if (probe_lent(e, any_unpinned))
		return 1; /* files let go of: look again */
	for (int pass = 0; pass < 5 && got < want && nf < 16; pass++) {
		for (unsigned s = 0; s < e->nslots && got < want && nf < 16; s++) {
			struct bfs_batch *b = &e->slots[s];
			int ok;

			if (!b->images || b->inflight || b->busy || b == w->slot ||
			    b->lent)
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
			if (!ok)
				continue;
			strip_locked(e, b, &f[nf++]);
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

/* ---- the batch -------------------------------------------------------------- */

unsigned bfs_batch_count(const bfs_batch *b) { return b->n; }
const void *bfs_batch_images(const bfs_batch *b) { return b->images; }
const int64_t *bfs_batch_labels(const bfs_batch *b) { return b->labels; }

uint64_t bfs_batch_sample(const bfs_batch *b, unsigned j)
{
	return b->served[j];
}

int bfs_batch_rrc(const bfs_batch *b, unsigned j, bfs_rrc_box *box, int *flip,
		  int *src_w, int *src_h)
{
	const struct rrc_rec *r;

	if (!b->rrc || j >= b->n || !b->rrc[j].ok)
		return -EINVAL;
	r = &b->rrc[j];
	*box = r->box;
	*flip = r->flip;
	*src_w = r->src_w;
	*src_h = r->src_h;
	return 0;
}

int bfs_batch_file(const bfs_batch *b, size_t *len)
{
	if (b->fd < 0 || !b->file_ok)
		return -1;
	*len = b->file_len;
	return b->fd;
}

void bfs__slots_free(bfs_engine *e)
{
	for (unsigned s = 0; s < e->nslots && e->slots; s++) {
		struct bfs_batch *b = &e->slots[s];

		if (b->fd >= 0)
			file_close(b);
		else
			free(b->images);
		free(b->stage1);
		free(b->arena);
		free(b->rrc);
		free(b->labels);
		free(b->served);
		free(b->rec);
		free(b->items);
	}
	for (unsigned k = 0; k < e->nheld; k++)
		close(e->held[k].fd);
	free(e->held);
}
