/*
 * label.h - what happens to a label between the data and the batch:
 * --label-offset is added, and a sum that int64 cannot hold is refused.
 *
 * Labels come from the data (an int64 feature of an Example, a tar .cls, a
 * class index), so whether label + offset overflows is known only per
 * sample; the offset alone cannot be refused at mount time.
 */
#ifndef BFS_LABEL_H
#define BFS_LABEL_H

#include <stdint.h>

/*
 * *label += offset, unless the sum overflows int64: then *label is left
 * alone and -ERANGE is returned with errmsg (BFS_ERRMSG_MAX bytes, may be
 * NULL) naming both, e.g. "label 3 + --label-offset 9223372036854775807
 * overflows int64".  The caller adds which shard and record.  Returns 0 or
 * -ERANGE.  Pure function: any thread.
 */
int bfs_label_add_offset(int64_t *label, int64_t offset, char *errmsg);

#endif
