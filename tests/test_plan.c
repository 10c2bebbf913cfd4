/*
 * test_plan.c - the planner of a remote source (engine/plan.c): where it
 * takes the readers and the decode frontier to be, from the engine's
 * slots and readers, set by hand here.  The rest of the plan (the spans
 * it walks, what the shard cache does with them) is covered through real
 * mounts in tests/integration/test_stream.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/engine_internal.h"

/* The planner's frontier (plan.c) is the first batch from the slowest
 * reader on that is not decoded.  A batch given up in its slot and not
 * begun again (a slot whose file a reader held) sits behind read-ahead
 * that is decoded or under way: the frontier stays at it.  Past it, the
 * shard cache took that batch's shard for spent, evicted it, and its
 * records were read by range (test_stream's 1.05x check, 1 run in 16
 * under load). */
static void test_plan_frontier_stops_at_a_batch_not_begun(void **state)
{
	struct bfs_batch slots[4];
	bfs_engine *e = calloc(1, sizeof(*e));
	uint64_t lo, hi, front, end;

	(void)state;
	assert_non_null(e);
	memset(slots, 0, sizeof(slots));
	e->per_rank = 100;
	e->slots = slots;
	e->nslots = 4;
	e->readers[0].key = 1;
	e->readers[0].last_id = 22;
	e->readers[0].last_ns = bfs__now_ns();
	e->readers[0].interval_ns = 1e9;
	slots[0] = (struct bfs_batch){ .state = SLOT_READY, .id = 22 };
	slots[1] = (struct bfs_batch){ .state = SLOT_READY, .id = 24 };
	slots[2] = (struct bfs_batch){ .state = SLOT_FILLING, .id = 25 };
	slots[3] = (struct bfs_batch){ .state = SLOT_FILLING, .id = 23, .cancelled = 1 };
	assert_int_equal(bfs__plan_positions_locked(e, &lo, &hi, &front, &end), 1);
	assert_int_equal(lo, 22);
	assert_int_equal(hi, 22);
	assert_int_equal(front, 23); /* not 25: 23 is not decoded */
	assert_int_equal(end, 26);

	/* begun again, and decoded: the frontier is the batch under way */
	slots[3] = (struct bfs_batch){ .state = SLOT_READY, .id = 23 };
	assert_int_equal(bfs__plan_positions_locked(e, &lo, &hi, &front, &end), 1);
	assert_int_equal(front, 25);
	assert_int_equal(end, 26);

	/* nothing under way: one past the last decoded in a row */
	slots[2].state = SLOT_READY;
	assert_int_equal(bfs__plan_positions_locked(e, &lo, &hi, &front, &end), 1);
	assert_int_equal(front, 26);
	assert_int_equal(end, 27);

	/* the reader's own batch gone from its slot: it is where it is */
	slots[0].state = SLOT_FREE;
	assert_int_equal(bfs__plan_positions_locked(e, &lo, &hi, &front, &end), 1);
	assert_int_equal(front, 22);

	/* no live reader: no position */
	e->readers[0].key = 0;
	assert_int_equal(bfs__plan_positions_locked(e, &lo, &hi, &front, &end), 0);
	free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan_frontier_stops_at_a_batch_not_begun),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
