/*
 * slots.c - batch slots and the memory that holds them: plain memory, or a
 * file in a tmpfs directory that a reader can be handed (lent); which slot
 * a new batch takes; files readers still hold; and slot memory given up
 * for a big sample
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/npy.h"

/* Memory the budget (--mem) counts now: batch slots, decoder scratch and
 * batch files readers hold.  Lock held. */
uint64_t bfs__mem_used_locked(const bfs_engine *e)
{
	return e->slot_mem + e->scratch_used + bfs__held_bytes_locked(e);
}


/* ---- slots ------------------------------------------------------------ */

struct bfs_batch *bfs__find_locked(bfs_engine *e, uint64_t id)
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
unsigned bfs__reap_held(bfs_engine *e)
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
		if (bfs__mem_used_locked(e) + e->slot_bytes > e->o.mem_bytes)
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
	       bfs__mem_used_locked(e) + e->slot_bytes <= e->o.mem_bytes;
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
struct bfs_batch *bfs__victim_locked(bfs_engine *e, int for_reader)
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
unsigned bfs__release_slots_locked(bfs_engine *e, struct worker *w,
				     uint64_t want)
{
	struct freed f[16];
	unsigned nf = 0, acted = 0;
	uint64_t got = 0;

	if (bfs__reap_held(e))
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
	if (best->inflight == 0)
		best->state = SLOT_FREE;
	return 1;
}

/* Start batch id in slot b.  Lock held. */
int bfs__start_locked(bfs_engine *e, struct bfs_batch *b, uint64_t id,
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

/* May one more slot file be handed to a reader?  Only while the budget
 * could pay for a fresh file for each slot a reader may still hold when
 * that slot is reused.  Lock held. */
static int expose_room_locked(const bfs_engine *e)
{
	return bfs__mem_used_locked(e) + (uint64_t)(e->nexposed + 1) * e->slot_bytes <=
	       e->o.mem_bytes;
}

int bfs_engine_expose(bfs_engine *e, bfs_batch *b, size_t *len)
{
	int fd = -1;

	pthread_mutex_lock(&e->lock);
	if (b->fd >= 0 && b->file_ok && !b->exposed && !expose_room_locked(e)) {
		/* files handed out earlier that nobody holds any more cost
		 * nothing at reuse: count only the held ones */
		bfs__reap_held(e);
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

void bfs__slots_free(bfs_engine *e)
{
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
}
