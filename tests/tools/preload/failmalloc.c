/*
 * failmalloc.c - an LD_PRELOAD library that fails chosen allocations:
 * with BFS_FAILMALLOC_SIZE=N and BFS_FAILMALLOC_COUNT=K in the
 * environment, the first K calls of malloc(N) in the process return NULL
 * with errno ENOMEM (after the first S, which succeed, with
 * BFS_FAILMALLOC_SKIP=S); every other call is glibc's.  For the tests of
 * what a daemon does when memory cannot be had at one point (libfuse's
 * request buffer, test_budget.sh).  Built without sanitizers: a preloaded library
 * must not need their runtime, and the tests that use it skip under them.
 */
#include <errno.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t n);

static long want = -1; /* the size to fail; 0: none */
static long left;      /* failures still to make */
static long skip;      /* calls of that size to let through first */

void *malloc(size_t n)
{
	if (__atomic_load_n(&want, __ATOMIC_RELAXED) < 0) {
		/* getenv and atol allocate nothing; two threads that both
		 * get here store the same values */
		const char *s = getenv("BFS_FAILMALLOC_SIZE");
		const char *k = getenv("BFS_FAILMALLOC_COUNT");
		const char *f = getenv("BFS_FAILMALLOC_SKIP");

		__atomic_store_n(&left, k ? atol(k) : 1, __ATOMIC_RELAXED);
		__atomic_store_n(&skip, f ? atol(f) : 0, __ATOMIC_RELAXED);
		__atomic_store_n(&want, s ? atol(s) : 0, __ATOMIC_RELEASE);
	}
	if (want > 0 && n == (size_t)want &&
	    __atomic_fetch_sub(&skip, 1, __ATOMIC_RELAXED) <= 0 &&
	    __atomic_fetch_sub(&left, 1, __ATOMIC_RELAXED) > 0) {
		errno = ENOMEM;
		return NULL;
	}
	return __libc_malloc(n);
}
