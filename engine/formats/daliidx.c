/*
 * daliidx.c - DALI's TFRecord index files read and checked against the
 * shard they index (daliidx.h).
 */
#include "engine/formats/daliidx.h"

#include <errno.h>
#include <stdlib.h>

#include "engine/base/error.h"

#define HEADER 12u   /* u64 length, u32 masked CRC of it */
#define TRAILER 4u   /* u32 masked CRC of the payload */

static int space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

/* The next decimal number at text[*at..len), past white space: 1 and *v,
 * 0 at the end, or -1 (something else there, or over 2^63). */
static int number(const char *text, size_t len, size_t *at, uint64_t *v)
{
	size_t i = *at;
	uint64_t x = 0;

	while (i < len && space(text[i]))
		i++;
	*at = i;
	if (i == len)
		return 0;
	if (text[i] < '0' || text[i] > '9')
		return -1;
	for (; i < len && text[i] >= '0' && text[i] <= '9'; i++) {
		if (x > ((1ull << 63) - (uint64_t)(text[i] - '0')) / 10)
			return -1;
		x = x * 10 + (uint64_t)(text[i] - '0');
	}
	if (i < len && !space(text[i]))
		return -1;
	*at = i;
	*v = x;
	return 1;
}

int bfs_daliidx_parse(const char *text, size_t len, uint64_t shard_size,
		      bfs_daliidx_rec **recs, size_t *n, char *errmsg)
{
	bfs_daliidx_rec *v = NULL;
	size_t cap = 0, count = 0, at = 0;
	uint64_t end = 0;
	int err;

	*recs = NULL;
	*n = 0;
	for (;;) {
		uint64_t off, size;
		int a = number(text, len, &at, &off), b;

		if (a == 0)
			break;
		b = a < 0 ? -1 : number(text, len, &at, &size);
		if (a < 0 || b <= 0) {
			bfs_seterr(errmsg, "not a DALI index: byte %zu is not %s", at,
				   b == 0 ? "the size after an offset"
					  : "a decimal number or white space");
			err = BFS_E_FORMAT;
			goto fail;
		}
		if (off != end) {
			bfs_seterr(errmsg, "record %zu starts at %llu, not where the one "
				   "before it ends (%llu)", count, (unsigned long long)off,
				   (unsigned long long)end);
			err = BFS_E_CORRUPT;
			goto fail;
		}
		if (size < HEADER + TRAILER || size - HEADER - TRAILER > UINT32_MAX ||
		    size > shard_size - off) {
			bfs_seterr(errmsg, "record %zu at %llu: size %llu is %s", count,
				   (unsigned long long)off, (unsigned long long)size,
				   size < HEADER + TRAILER ? "shorter than a record's framing"
				   : size > shard_size - off ? "past the end of the shard"
				   : "over 4 GiB, the most one sample may hold");
			err = BFS_E_CORRUPT;
			goto fail;
		}
		if (count == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			bfs_daliidx_rec *nv = realloc(v, ncap * sizeof(*nv));

			if (!nv) {
				err = -ENOMEM;
				goto fail;
			}
			v = nv;
			cap = ncap;
		}
		v[count].offset = off + HEADER;
		v[count].length = (uint32_t)(size - HEADER - TRAILER);
		count++;
		end = off + size;
	}
	if (end != shard_size) {
		bfs_seterr(errmsg, "its %zu records end at byte %llu of a shard of %llu "
			   "bytes", count, (unsigned long long)end,
			   (unsigned long long)shard_size);
		err = BFS_E_CORRUPT;
		goto fail;
	}
	*recs = v;
	*n = count;
	return 0;
fail:
	free(v);
	return err;
}
