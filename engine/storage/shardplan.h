/*
 * shardplan.h - what the epoch order will need of a remote source's
 * objects, as the shard cache (shardcache.h) decides with it: which object
 * to fetch next, which to evict, and which to keep whole rather than read
 * by range.  Pure: no I/O, no lock, no clock.
 *
 * A plan is a set of spans, each the stretch of positions (the engine's
 * sample positions, or the indexing's shard count: any unit that grows as
 * the reader goes on) over which one object's records are needed, with
 * the bytes of those records.  An object may have several spans (one per
 * epoch the plan covers); spans of one object do not overlap.  The reader's
 * position moves forward; a span entirely behind it is spent.
 *
 *   next use   of object k at position pos: 0 while pos lies inside one of
 *              its spans, first - pos before its next one, UINT64_MAX when
 *              no span lies ahead (not needed in the known future).
 *   eviction   Belady's rule over the known future: the object whose next
 *              use is furthest goes first; ties (two objects never needed
 *              again) go to the higher index.  Fetching ahead may evict
 *              only objects needed later than what it fetches, so it never
 *              throws out what the reader needs sooner.
 *   whole      A span is kept whole (fetched ahead, held to its end) when
 *              that fits: sweeping spans by their first position, a span
 *              joins while the objects of the whole spans alive with it
 *              take no more than `room` bytes on disk.  The rest are read
 *              by range, record by record.  In file order or a block order
 *              a span is short and every one fits; a global shuffle over a
 *              source larger than the room makes every span as long as
 *              the epoch, and then only `room` bytes of objects are kept
 *              whole and the others read by range (bytes fetched stay the
 *              dataset's once, instead of a whole object per record).
 *
 * Threads: a plan is the caller's; nothing here locks.
 */
#ifndef BFS_SHARDPLAN_H
#define BFS_SHARDPLAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
	uint32_t obj;        /* the object's index */
	uint64_t first, last;/* positions of its first and last record needed
			      * in this span (first <= last) */
	uint64_t bytes;      /* the bytes of those records */
} bfs_span;

typedef struct bfs_shardplan bfs_shardplan;

/* A plan over nobj objects whose on-disk costs (bytes each takes in the
 * cache) are cost[0..nobj) (copied), with no span: nothing needed.
 * 0 or -ENOMEM. */
int bfs_shardplan_create(size_t nobj, const uint64_t *cost, bfs_shardplan **out);
void bfs_shardplan_destroy(bfs_shardplan *p); /* NULL is fine */

/*
 * Replace the plan's spans with spans[0..n) (copied; any order).  Spans
 * naming an object past nobj, or with last < first, are -EINVAL (nothing
 * changed).  Which spans are kept whole is decided now, for `room` bytes:
 * when every object with a span fits in `limit` at once, all are whole;
 * else the sweep above with `room`.  0, -EINVAL, -ENOMEM.
 */
int bfs_shardplan_set(bfs_shardplan *p, const bfs_span *spans, size_t n,
		      uint64_t room, uint64_t limit);

/* The next use of object k from position pos (see above). */
uint64_t bfs_shardplan_next(const bfs_shardplan *p, size_t k, uint64_t pos);

/* Whether the span of object k that is current at pos (the one pos lies
 * in, else the next one ahead) is kept whole: 1, or 0 (read by range, or
 * no span ahead). */
int bfs_shardplan_whole(const bfs_shardplan *p, size_t k, uint64_t pos);

/* The bytes object k's current or next span still needs from pos on
 * (its bytes in proportion to what is left of it); 0 with no span ahead. */
uint64_t bfs_shardplan_bytes_ahead(const bfs_shardplan *p, size_t k,
				   uint64_t pos);

/*
 * The object to evict at pos: among those with ok[k] set (what the caller
 * may evict: local, not in use), the one whose next use is furthest, ties
 * to the higher index; only one whose next use is later than `before`
 * (UINT64_MAX - 1 and below; pass 0 to allow anything needed later than
 * now, i.e. not in use at pos).  Its index, or -1 when none qualifies.
 */
ssize_t bfs_shardplan_victim(const bfs_shardplan *p, uint64_t pos,
			     const uint8_t *ok, uint64_t before);

/*
 * The object to fetch next at pos: among those with want[k] set (what
 * the caller could fetch: not local, not being fetched), whose current
 * span is kept whole, the one needed soonest (ties to the lower index).
 * Its index, or -1.
 */
ssize_t bfs_shardplan_next_fetch(const bfs_shardplan *p, uint64_t pos,
				 const uint8_t *want);

/* Objects with a span ahead of pos, and the bytes they take on disk. */
void bfs_shardplan_ahead(const bfs_shardplan *p, uint64_t pos, size_t *objs,
			 uint64_t *cost);

#endif
