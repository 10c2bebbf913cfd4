/*
 * source_shards.c - TFRecord and WebDataset tar shards indexed into the
 * sample table: each shard's stored index used when it is current, else
 * the shard scanned (through a gzip index for .gz shards) and its index
 * stored; tar member names and the samples a tar scan found bad.
 */
#include "engine/source_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/formats/filekind.h"
#include "engine/formats/gzindex.h"
#include "engine/formats/tfrecord.h"

/* ---- TFRecord --------------------------------------------------------- */

static int on_record(void *ctx, const bfs_tfrecord_entry *e)
{
	bfs_source *s = ctx;
	int big = e->length > SAMPLE_MAX;
	int err = bfs__src_add_sample(s, e->offset, big ? 0 : e->length, -1,
			     (e->status ? SAMPLE_BAD_LENGTH_CRC : 0) |
			     (big ? SAMPLE_TOO_BIG : 0));

	if (!err && s->want_classes && !big)
		err = bfs__src_skim_class(s, e);
	if (!err && (s->nsamples & 0xffff) == 0)
		bfs__src_progress(s); /* a big shard: say so within it too */
	return err;
}

/* A shard whose scan found not one record: when it is compressed data
 * (a GZIP or ZLIB TFRecord, a .tar.gz), say what it likely is and what to
 * do, after what the scanner said ("...; it looks like gzip data"). */
static void advise_compressed(int fd, char *msg, size_t cap)
{
	uint8_t head[16];
	ssize_t n = pread(fd, head, sizeof(head), 0);
	const char *kind = n > 0 ? bfs_filekind(head, (size_t)n) : NULL;
	const char *advice = bfs_filekind_advice(kind);
	char tail[64];
	size_t len = strlen(msg), tl;

	if (!advice)
		return;
	snprintf(tail, sizeof(tail), "it looks like %s", kind);
	tl = strlen(tail);
	if (len >= tl && !strcmp(msg + len - tl, tail))
		snprintf(msg + len, cap - len, ": %s", advice);
	else
		snprintf(msg + len, cap - len, "%s%s: %s", len ? "; " : "", tail,
			 advice);
}

int bfs__src_scan_tfrecord(bfs_source *s, const bfs_reader *r, uint64_t size,
			 char *msg)
{
	return bfs_tfrecord_scan_reader(r, size, on_record, s, msg);
}

/* Index gzip shard files[i] open on fd: its restart points, then the
 * scan over its uncompressed bytes.  0 or -ENOMEM (problems are scan
 * errors of the shard). */
static int index_gz_shard(bfs_source *s, const char *name, int fd,
			  const bfs_shard_stamp *st, bfs__scan_fn scan)
{
	char msg[BFS_ERRMSG_MAX] = "", full[BFS_ERRMSG_MAX];
	bfs_gzcursor *cur = NULL;
	bfs_gz_reader_ctx rc = { 0 };
	bfs_reader r;
	struct bfs_shard *sh;
	bfs_gzindex *gz;
	int err;

	/* TFRecords carry CRCs of their own, so a gzip member whose CRC
	 * fails is still read: only the records it damaged fail */
	err = bfs_gzindex_build(fd, st->size, 0,
				s->format == BFS_FORMAT_TFRECORD ? BFS_GZ_KEEP_BAD_CRC : 0,
				s->max_ratio, &gz, msg);
	if (err == -ENOMEM)
		return err;
	if ((err = bfs__src_add_shard(s, name, st))) {
		bfs_gzindex_free(gz);
		return err;
	}
	if (!gz) /* not gzip after all, or unreadable */
		return bfs__src_add_error(s, name, msg[0] ? msg : bfs_strerror(err)) ? -ENOMEM : 0;
	sh = &s->shards[s->nshards - 1];
	sh->gz = gz;
	if ((err = bfs_gzcursor_create(&cur)))
		return err;
	rc.cursor = cur;
	rc.idx = gz;
	rc.fd = fd;
	r = bfs_gz_reader(&rc);
	msg[0] = '\0';
	bfs__src_pairs_reset(s);
	s->scan_r = &r;
	err = scan(s, &r, bfs_gzindex_size(gz), msg);
	s->scan_r = NULL;
	bfs__src_pairs_dedupe(s);
	bfs_gzcursor_destroy(cur);
	if (err == -ENOMEM)
		return err;
	if (err && !msg[0])
		snprintf(msg, sizeof(msg), "%s", bfs_strerror(err));
	if (err) { /* its offsets are into the uncompressed data: say so */
		snprintf(full, sizeof(full), "in its gzip-compressed data: %s", msg);
		snprintf(msg, sizeof(msg), "%s", full);
	}
	if (!bfs_gzindex_complete(gz)) {
		/* the scan stopped at the end of the good part, or before */
		if (err)
			snprintf(full, sizeof(full), "%s; %s", msg, bfs_gzindex_damage(gz));
		else
			snprintf(full, sizeof(full), "%s", bfs_gzindex_damage(gz));
		return bfs__src_add_error(s, name, full) ? -ENOMEM : 0;
	}
	if (bfs_gzindex_damage(gz)[0]) { /* a member's CRC failed */
		if (err)
			snprintf(full, sizeof(full), "%s; %s", msg, bfs_gzindex_damage(gz));
		else
			snprintf(full, sizeof(full), "%s", bfs_gzindex_damage(gz));
		snprintf(msg, sizeof(msg), "%s", full);
		if (!err)
			err = BFS_E_CRC;
	}
	if (err && bfs__src_add_error(s, name, msg))
		return -ENOMEM;
	if (!err || err == BFS_E_TRUNCATED || err == BFS_E_CRC ||
	    err == BFS_E_CORRUPT)
		bfs__src_store_gz_index(s, err ? msg : NULL);
	return 0;
}

/* Index shard `name` open on fd, of identity *st: its stored index (unless
 * the caller tried it already, tried_store), else a scan whose index is
 * stored.  0 or -ENOMEM (errmsg says so); problems are the shard's scan
 * errors. */
static int index_open_shard(bfs_source *s, const char *name, int fd,
			    const bfs_shard_stamp *st, bfs__scan_fn scan,
			    int cache_index, int tried_store, char *errmsg)
{
	char msg[BFS_ERRMSG_MAX] = "";
	uint8_t magic[3];
	int err;

	if (pread(fd, magic, 3, 0) == 3 && bfs_gz_probe(magic, 3)) {
		/* gzip: indexes are kept for both formats, since building one
		 * reads the whole file */
		bfs__src_pairs_reset(s);
		err = tried_store ? 0 : bfs__src_load_gz_index(s, name, st);
		if (err == 0)
			err = index_gz_shard(s, name, fd, st, scan);
		else if (err > 0)
			err = 0;
		if (err == -ENOMEM) {
			bfs_seterr(errmsg, "%s: out of memory", name);
			return err;
		}
		return bfs__src_classes_merge(s);
	}
	if (cache_index && !tried_store &&
	    (err = bfs__src_load_index(s, name, st)) != 0) {
		if (err < 0)
			return err;
		return bfs__src_classes_merge(s); /* the stored index was used */
	}
	if (cache_index && (err = bfs__src_load_dali(s, name, st)) != 0) {
		if (err < 0)
			return err;
		return bfs__src_classes_merge(s); /* DALI's index was used */
	}
	if ((err = bfs__src_add_shard(s, name, st)))
		return err;
	bfs__src_pairs_reset(s);
	{
		bfs_reader r = bfs_reader_fd(fd);

		s->scan_r = &r;
		err = scan(s, &r, st->size, msg);
		s->scan_r = NULL;
	}
	if (err && err != -ENOMEM && s->shards[s->nshards - 1].count == 0)
		advise_compressed(fd, msg, sizeof(msg));
	if (err == -ENOMEM) {
		bfs_seterr(errmsg, "%s: out of memory", name);
		return err;
	}
	if (err && !msg[0])
		snprintf(msg, sizeof(msg), "%s", bfs_strerror(err));
	if (err && bfs__src_add_error(s, name, msg))
		return -ENOMEM;
	bfs__src_pairs_dedupe(s);
	/* a read error is not the shard's content: do not store it */
	if (cache_index && (!err || err == BFS_E_TRUNCATED ||
			    err == BFS_E_CRC || err == BFS_E_CORRUPT))
		bfs__src_store_index(s, err ? msg : NULL);
	return bfs__src_classes_merge(s);
}

/* Index the shard files of a local folder. */
static int index_local(bfs_source *s, char **files, size_t n, bfs__scan_fn scan,
		       int cache_index, char *errmsg)
{
	s->prog.total = n;
	for (size_t i = 0; i < n; i++, s->prog.done = i, bfs__src_progress(s)) {
		char path[PATH_MAX], msg[BFS_ERRMSG_MAX] = "";
		bfs_shard_stamp stamp;
		struct stat st;
		int fd, err;

		snprintf(path, sizeof(path), "%s/%s", s->dir, files[i]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) != 0) {
			snprintf(msg, sizeof(msg), "cannot open: %s",
				 strerror(errno));
			if (fd >= 0)
				close(fd);
			if (bfs__src_add_error(s, files[i], msg))
				return -ENOMEM;
			continue;
		}
		s->prog.bytes += (uint64_t)st.st_size;
		bfs__src_stamp_of(&st, &stamp);
		err = index_open_shard(s, files[i], fd, &stamp, scan, cache_index,
				       0, errmsg);
		close(fd);
		if (err) {
			if (err == -ENOMEM)
				bfs_seterr(errmsg, "%s: out of memory", path);
			return err;
		}
	}
	return 0;
}

/* Whether the index store holds an index of shard `name` of that stamp
 * (of whatever kind): a shard that need not be fetched to be indexed. */
static int stored(bfs_source *s, const char *name, const bfs_shard_stamp *st)
{
	void *blob = NULL;
	size_t len = 0;

	if (!s->o.index_get ||
	    s->o.index_get(s->o.index_ctx, s->dir, name, st, &blob, &len) != 0)
		return 0;
	free(blob);
	return 1;
}

/* Index the shards of a remote source: from the index store where it has
 * them (no byte of the shard fetched), else scanned once their object is
 * whole in the shard cache.  The shard cache is told first which ones
 * will be scanned, in order, so that it fetches them ahead, in parallel,
 * while each is scanned; and that each is needed again after the scan, in
 * the same order (what a first epoch in file order would do), so that
 * what the cache cannot keep is the last shards scanned, and the first
 * stay for the first batches.  A stored shard's index is asked for once
 * more when it is loaded, and that answer is handed to each loader
 * (plain, gzip) in turn; a shard the store lacked is not asked again.  A
 * shard that cannot be fetched fails the open. */
static int index_remote(bfs_source *s, char **files, size_t n, bfs__scan_fn scan,
			int cache_index, char *errmsg)
{
	bfs_span *spans = calloc(2 * n + 1, sizeof(*spans));
	uint8_t *have = calloc(n ? n : 1, 1);
	uint64_t scanned = 0;
	size_t m = 0;
	int err = 0;

	if (!spans || !have) {
		free(spans);
		free(have);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		ssize_t k = bfs_shardcache_find(s->sc, files[i]);
		const bfs_storage_object *o = bfs_shardcache_object(s->sc, (size_t)k);
		bfs_shard_stamp st;

		bfs_shard_stamp_remote(o->size, o->etag, &st);
		if (!(have[i] = (uint8_t)stored(s, files[i], &st))) {
			spans[m] = (bfs_span){ (uint32_t)k, m, m, o->size };
			m++;
		}
	}
	for (size_t j = 0; j < m; j++)
		spans[m + j] = (bfs_span){ spans[j].obj, m + j, m + j, spans[j].bytes };
	err = bfs_shardcache_plan(s->sc, spans, 2 * m, 0, -1);
	free(spans);
	if (err) {
		free(have);
		return err;
	}
	s->prog.total = n;
	for (size_t i = 0; i < n; i++, s->prog.done = i, bfs__src_progress(s)) {
		ssize_t k = bfs_shardcache_find(s->sc, files[i]);
		const bfs_storage_object *o = bfs_shardcache_object(s->sc, (size_t)k);
		char msg[BFS_ERRMSG_MAX] = "";
		bfs_shard_stamp st;
		int fd, used = 0;

		bfs_shard_stamp_remote(o->size, o->etag, &st);
		s->prog.bytes += o->size;
		bfs__src_pairs_reset(s);
		if (have[i]) {
			if (s->o.index_get(s->o.index_ctx, s->dir, files[i], &st,
					   &s->held_blob, &s->held_len) != 0)
				s->held_blob = NULL; /* changed since: a miss */
			s->held_name = files[i];
			used = cache_index ? bfs__src_load_index(s, files[i], &st) : 0;
			if (!used)
				used = bfs__src_load_gz_index(s, files[i], &st);
			free(s->held_blob);
			s->held_blob = NULL;
			s->held_name = NULL;
			if (used < 0 || (used && (err = bfs__src_classes_merge(s)))) {
				free(have);
				return used < 0 ? used : err;
			}
			if (used)
				continue;
		}
		if ((err = bfs_shardcache_pin(s->sc, (size_t)k, &fd, msg))) {
			bfs_seterr(errmsg, "%s", msg[0] ? msg : bfs_strerror(err));
			free(have);
			return err;
		}
		err = index_open_shard(s, files[i], fd, &st, scan, cache_index, 1,
				       errmsg);
		bfs_shardcache_unpin(s->sc, (size_t)k);
		bfs_shardcache_advance(s->sc, ++scanned, -1);
		if (err) {
			free(have);
			return err;
		}
	}
	free(have);
	return 0;
}

/* Index the shard files of one format.  A shard that cannot be opened,
 * or whose scan stops early, is listed in the scan errors with whatever
 * complete samples it had; with cache_index the stored index of an
 * unchanged shard replaces the scan, and a fresh scan is stored (gzip
 * shards' indexes are stored whatever cache_index says). */
int bfs__src_index_shards(bfs_source *s, char **files, size_t n, bfs__scan_fn scan,
			int cache_index, char *errmsg)
{
	return s->sc ? index_remote(s, files, n, scan, cache_index, errmsg)
		     : index_local(s, files, n, scan, cache_index, errmsg);
}
