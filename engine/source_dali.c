/*
 * source_dali.c - a TFRecord shard indexed from NVIDIA DALI's index file
 * (NAME.idx, else STEM.idx for NAME = STEM.EXT, as tfrecord2idx is
 * commonly run; in opts.dali_dir, else beside the shard) instead of a
 * scan, when the file describes the shard exactly (daliidx.h).  Its records are not skimmed, so no class names
 * come from the shard; a read whose payload CRC fails names the file.
 */
#include "engine/source_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/formats/daliidx.h"

int bfs__src_is_index_name(const char *name)
{
	size_t n = strlen(name);

	return n > 4 && !strcasecmp(name + n - 4, ".idx");
}

/* dir/idx (idx itself when dir is NULL) read whole into a malloc()ed
 * *text: 0, -ENOENT (none there, or not a regular file), -EFBIG, -errno. */
static int read_idx(const char *dir, const char *idx, char **text, size_t *len)
{
	char path[PATH_MAX];
	struct stat st;
	size_t got = 0;
	int fd, err = 0;

	*text = NULL;
	if (snprintf(path, sizeof(path), "%s%s%s", dir ? dir : "", dir ? "/" : "",
		     idx) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	if ((uint64_t)st.st_size > BFS_DALIIDX_MAX) {
		close(fd);
		return -EFBIG;
	}
	if (!(*text = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, *text + got, (size_t)st.st_size - got);

		if (r <= 0) {
			err = r < 0 ? -errno : -EIO;
			break;
		}
		got += (size_t)r;
	}
	close(fd);
	if (err) {
		free(*text);
		*text = NULL;
		return err;
	}
	*len = got;
	return 0;
}

int bfs__src_load_dali(bfs_source *s, const char *name,
		      const bfs_shard_stamp *st)
{
	char idx[PATH_MAX], msg[BFS_ERRMSG_MAX] = "", *text = NULL;
	const char *dot = strrchr(name, '.'), *slash = strrchr(name, '/');
	const char *base = slash ? slash + 1 : name;
	bfs_daliidx_rec *recs = NULL;
	size_t len = 0, n = 0;
	int err = -ENOENT;

	if (s->o.skip_dali)
		return 0;
	/* in --dali-index, then beside the shard; NAME.idx, then STEM.idx */
	for (int k = 0; k < 4 && err == -ENOENT; k++) {
		const char *dir = k < 2 ? s->dali_dir : s->dir;
		const char *nm = k < 2 ? base : name;
		size_t stem = !(k & 1) ? strlen(nm)
			    : dot && dot > nm && (!slash || dot > slash) ? (size_t)(dot - nm) : 0;

		if (!dir || !stem)
			continue;
		if ((k < 2 ? snprintf(idx, sizeof(idx), "%s/%.*s.idx", dir, (int)stem, nm)
			   : snprintf(idx, sizeof(idx), "%.*s.idx", (int)stem, nm)) >= (int)sizeof(idx))
			continue;
		err = k < 2 ? read_idx(NULL, idx, &text, &len) : read_idx(s->dir, idx, &text, &len);
	}
	if (err == -ENOMEM)
		return err;
	if (err) {
		if (err != -ENOENT && !s->dali_note[0])
			snprintf(s->dali_note, sizeof(s->dali_note), "%s: %s; %s was scanned",
				 idx, strerror(-err), name);
		return 0;
	}
	err = bfs_daliidx_parse(text, len, st->size, &recs, &n, msg);
	free(text);
	if (err == -ENOMEM)
		return err;
	if (err) {
		if (!s->dali_note[0])
			snprintf(s->dali_note, sizeof(s->dali_note), "%s does not describe %s "
				 "(%s); the shard was scanned", idx, name, msg);
		return 0;
	}
	if ((err = bfs__src_add_shard(s, name, st)))
		goto out;
	if (!(s->shards[s->nshards - 1].idx = strdup(idx))) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if ((err = bfs__src_add_sample(s, recs[i].offset, recs[i].length, -1, 0)))
			goto out;
	bfs__src_pairs_reset(s); /* nothing skimmed: no names from this shard */
	if (s->want_classes)
		bfs__src_classes_broken(s, "class names are not read from %s: it was "
					"indexed from DALI's %s, without reading its records",
					name, idx);
	s->index_dali++;
	err = 1;
out:
	free(recs);
	return err;
}
