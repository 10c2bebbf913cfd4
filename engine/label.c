/*
 * label.c - --label-offset, with the overflow check (see label.h).
 */
#include "engine/label.h"

#include <errno.h>

#include "engine/error.h"

int bfs_label_add_offset(int64_t *label, int64_t offset, char *errmsg)
{
	int64_t sum;

	if (__builtin_add_overflow(*label, offset, &sum)) {
		bfs_seterr(errmsg, "label %lld + --label-offset %lld overflows "
			   "int64", (long long)*label, (long long)offset);
		return -ERANGE;
	}
	*label = sum;
	return 0;
}
