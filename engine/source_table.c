/*
 * source_table.c - the sample table that every indexer of the source adds
 * to (source_internal.h): shards with their stamps, samples, scan errors,
 * and the progress hook told how far indexing has come.
 */
#include "engine/source_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/storage/sigv4.h"

int bfs__src_add_error(bfs_source *s, const char *shard, const char *msg)
{
	struct scan_error *ne = realloc(s->errs, (s->nerrs + 1) * sizeof(*ne));

	if (!ne)
		return -ENOMEM;
	s->errs = ne;
	ne[s->nerrs].shard = strdup(shard);
	ne[s->nerrs].msg = strdup(msg);
	if (!ne[s->nerrs].shard || !ne[s->nerrs].msg) {
		free(ne[s->nerrs].shard);
		free(ne[s->nerrs].msg);
		return -ENOMEM;
	}
	s->nerrs++;
	return 0;
}

void bfs__src_stamp_of(const struct stat *st, bfs_shard_stamp *out)
{
	out->size = (uint64_t)st->st_size;
	out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 +
			st->st_mtim.tv_nsec;
	out->ino = (uint64_t)st->st_ino;
	out->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 +
			st->st_ctim.tv_nsec;
}

void bfs_shard_stamp_remote(uint64_t size, const char *etag,
			    bfs_shard_stamp *out)
{
	char hex[65];
	uint64_t h[2] = { 0, 0 };

	bfs_sigv4_sha256_hex(etag, strlen(etag), hex);
	for (int i = 0; i < 32; i++) {
		char c = hex[i];

		h[i / 16] = h[i / 16] << 4 |
			    (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
	}
	out->size = size;
	out->mtime_ns = 0;
	out->ino = h[0];
	out->ctime_ns = (int64_t)h[1];
}

int bfs__src_add_shard(bfs_source *s, const char *name,
		       const bfs_shard_stamp *stamp)
{
	struct bfs_shard *sh;

	if (s->nshards == s->shards_cap) {
		size_t ncap = s->shards_cap ? s->shards_cap * 2 : 64;
		struct bfs_shard *n = realloc(s->shards, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->shards = n;
		s->shards_cap = ncap;
	}
	sh = &s->shards[s->nshards];
	memset(sh, 0, sizeof(*sh));
	if (!(sh->name = strdup(name)))
		return -ENOMEM;
	sh->first = s->nsamples;
	sh->stamp = *stamp;
	s->nshards++;
	return 0;
}

int bfs__src_add_sample(bfs_source *s, uint64_t off, uint64_t len,
		      int32_t label, uint32_t flags)
{
	struct bfs_sample *smp;

	if (len > UINT32_MAX)
		return BFS_E_CORRUPT;
	if (s->nsamples == s->samples_cap) {
		uint64_t ncap = s->samples_cap ? s->samples_cap * 2 : 4096;
		struct bfs_sample *n = realloc(s->samples, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->samples = n;
		s->samples_cap = ncap;
	}
	smp = &s->samples[s->nsamples++];
	smp->offset = off;
	smp->length = (uint32_t)len;
	smp->shard = (uint32_t)(s->nshards - 1);
	smp->label = label;
	smp->flags = flags;
	s->shards[s->nshards - 1].count++;
	return 0;
}

/* Tell the progress hook (if any) where indexing stands. */
void bfs__src_progress(bfs_source *s)
{
	if (!s->o.progress)
		return;
	s->prog.records = s->nsamples;
	s->o.progress(s->o.progress_ctx, &s->prog);
}

void bfs__src_free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}
