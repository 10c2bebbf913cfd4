/*
 * source_tar.c - the samples of WebDataset tar shards in the table: each
 * member's name (in one pool), the samples a scan found bad (no label, a
 * label out of range, a member over 4 GiB), kept sorted by sample so a
 * read finds them.
 */
#include "engine/source_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/formats/tar.h"

static int pool_add(bfs_source *s, const char *str, uint32_t *off)
{
	size_t len = strlen(str) + 1;

	if (s->pool_len + len > UINT32_MAX)
		return -ENOMEM;
	if (s->pool_len + len > s->pool_cap) {
		size_t cap = s->pool_cap ? s->pool_cap * 2 : 1 << 16;
		char *n;

		while (cap < s->pool_len + len)
			cap *= 2;
		if (!(n = realloc(s->pool, cap)))
			return -ENOMEM;
		s->pool = n;
		s->pool_cap = cap;
	}
	memcpy(s->pool + s->pool_len, str, len);
	*off = (uint32_t)s->pool_len;
	s->pool_len += len;
	return 0;
}

int bfs__src_on_tar_sample(void *ctx, const bfs_tar_sample *t)
{
	bfs_source *s = ctx;
	int unlabeled = !s->label_key[0] && t->status == BFS_E_NOKEY;
	int status = unlabeled ? 0 : t->status;
	int64_t label = unlabeled ? -1 : t->label;
	int big = t->length > SAMPLE_MAX;
	uint32_t name;
	int err;

	if (!status && (label < INT32_MIN || label > INT32_MAX))
		status = BFS_E_CORRUPT;
	if (big)
		status = BFS_E_CORRUPT;
	if (s->nsamples + 1 > s->samples_cap) {
		/* names grows with samples: keep the same capacity */
		uint32_t *n = realloc(s->names, (s->samples_cap ? s->samples_cap * 2
					       : 4096) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->names = n;
	}
	if ((err = pool_add(s, t->name ? t->name : "?", &name)))
		return err;
	s->names[s->nsamples] = name;
	if (status) {
		struct bad_sample *nb = realloc(s->bad, (s->nbad + 1) * sizeof(*nb));
		char msg[BFS_ERRMSG_MAX];

		if (!nb)
			return -ENOMEM;
		s->bad = nb;
		if (big)
			snprintf(msg, sizeof(msg), "member %s at offset %llu: its "
				 "%llu bytes are over %llu (4 GiB), the most one "
				 "sample may hold; the other members are kept",
				 t->name ? t->name : "?",
				 (unsigned long long)t->header_offset,
				 (unsigned long long)t->length,
				 (unsigned long long)SAMPLE_MAX);
		else if (status == BFS_E_CORRUPT && !(t->msg && t->msg[0]))
			snprintf(msg, sizeof(msg), "member %s: label %lld out of range",
				 t->name ? t->name : "?", (long long)label);
		else
			snprintf(msg, sizeof(msg), "%s", t->msg && t->msg[0]
				 ? t->msg : bfs_strerror(status));
		nb[s->nbad].sample = s->nsamples;
		nb[s->nbad].code = status;
		if (!(nb[s->nbad].msg = strdup(msg)))
			return -ENOMEM;
		s->nbad++;
	}
	if ((err = bfs__src_add_sample(s, t->offset, big ? 0 : t->length,
			      status ? -1 : (int32_t)label, 0)))
		return err;
	if ((s->nsamples & 0xffff) == 0)
		bfs__src_progress(s);
	return 0;
}

int bfs__src_scan_tar(bfs_source *s, const bfs_reader *r, uint64_t size,
		    char *msg)
{
	bfs_tar_opts to = { .json_key = s->label_key_given ? s->label_key : NULL };

	return bfs_tar_scan_reader(r, size, &to, bfs__src_on_tar_sample, s, msg);
}

const struct bad_sample *bfs__src_find_bad(const bfs_source *s, uint64_t i)
{
	size_t lo = 0, hi = s->nbad;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->bad[mid].sample < i)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nbad && s->bad[lo].sample == i ? &s->bad[lo] : NULL;
}

const char *bfs_source_member_name(const bfs_source *s, uint64_t i)
{
	if (s->format != BFS_FORMAT_TAR || i >= s->nsamples)
		return NULL;
	return s->pool + s->names[i];
}
