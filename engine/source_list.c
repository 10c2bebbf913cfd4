/*
 * source_list.c - what a shard directory holds: its entries listed and
 * sorted bytewise, the names and first bytes that tell TFRecord shards,
 * tar shards and images apart, and the folder layout (ImageFolder: class
 * folders, or a flat folder of images) indexed into the sample table.
 */
#include "engine/source_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/crc32c.h"
#include "engine/base/error.h"
#include "engine/formats/gzindex.h"

/* ---- small helpers ---------------------------------------------------- */

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* List the non-hidden entries of dir of the wanted type (DT_REG or
 * DT_DIR), sorted bytewise.  *out is malloc'd, free with bfs__src_free_names(). */
int bfs__src_list_dir(const char *dir, int want_dir, char ***out, size_t *n,
		    char *errmsg)
{
	DIR *d = opendir(dir);
	char **names = NULL;
	size_t cnt = 0, cap = 0;
	struct dirent *de;
	int err = 0;

	*out = NULL;
	*n = 0;
	if (!d) {
		err = -errno;
		bfs_seterr(errmsg, "%s: %s", dir, strerror(errno));
		return err;
	}
	while ((de = readdir(d))) {
		char path[PATH_MAX];
		struct stat st;
		int is_dir;

		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >=
		    (int)sizeof(path))
			continue;
		if (stat(path, &st) != 0)
			continue;
		is_dir = S_ISDIR(st.st_mode);
		if (is_dir != want_dir || (!is_dir && !S_ISREG(st.st_mode)))
			continue;
		if (cnt == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			char **nn = realloc(names, ncap * sizeof(*nn));
			if (!nn) {
				err = -ENOMEM;
				goto fail;
			}
			names = nn;
			cap = ncap;
		}
		if (!(names[cnt] = strdup(de->d_name))) {
			err = -ENOMEM;
			goto fail;
		}
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(names, cnt, sizeof(*names), cmp_names);
	*out = names;
	*n = cnt;
	return 0;
fail:
	closedir(d);
	bfs__src_free_names(names, cnt);
	bfs_seterr(errmsg, "%s: out of memory", dir);
	return err;
}

int bfs__src_list_remote(const bfs_source *s, const char *rel, int want_dir,
			 char ***out, size_t *n)
{
	size_t count = bfs_shardcache_count(s->sc), rl = strlen(rel);
	char **names = NULL;
	size_t cnt = 0;

	*out = NULL;
	*n = 0;
	for (size_t i = 0; i < count; i++) {
		const char *name = bfs_shardcache_object(s->sc, i)->name, *rest, *slash;
		size_t len;

		if (rl && (strncmp(name, rel, rl) || name[rl] != '/'))
			continue;
		rest = name + (rl ? rl + 1 : 0);
		slash = strchr(rest, '/');
		if (rest[0] == '.' || (!want_dir && slash) || (want_dir && !slash))
			continue;
		len = slash ? (size_t)(slash - rest) : strlen(rest);
		/* names are sorted: a folder's objects are next to each other */
		if (want_dir && cnt && strlen(names[cnt - 1]) == len &&
		    !strncmp(names[cnt - 1], rest, len))
			continue;
		if (!(cnt & (cnt - 1)) || !cnt) {
			char **nn = realloc(names, (cnt ? cnt * 2 : 1) * sizeof(*nn));

			if (!nn) {
				bfs__src_free_names(names, cnt);
				return -ENOMEM;
			}
			names = nn;
		}
		if (!(names[cnt] = strndup(rest, len))) {
			bfs__src_free_names(names, cnt);
			return -ENOMEM;
		}
		cnt++;
	}
	/* "a/b" sorts before "a0" but folder "a" after "a0": sort the names */
	if (cnt)
		qsort(names, cnt, sizeof(*names), cmp_names);
	*out = names;
	*n = cnt;
	return 0;
}

static int has_suffix_ci(const char *s, const char *suf)
{
	size_t ls = strlen(s), lf = strlen(suf);
	return ls >= lf && strcasecmp(s + ls - lf, suf) == 0;
}

/* The image files of a folder layout: JPEG, PNG and WebP (which of them
 * a file is comes from its bytes), and GIF, so that a GIF is refused by
 * name rather than passed over (image.h). */
int bfs__src_is_image_name(const char *name)
{
	return has_suffix_ci(name, ".jpg") || has_suffix_ci(name, ".jpeg") ||
	       has_suffix_ci(name, ".png") || has_suffix_ci(name, ".webp") ||
	       has_suffix_ci(name, ".gif");
}

/* The name rules look through a .gz suffix: x.tfrecord.gz is a (GZIP)
 * TFRecord shard, x.tar.gz and x.tgz tar shards. */
static int has_suffix_gz(const char *s, const char *suf)
{
	size_t ls = strlen(s), lf = strlen(suf);

	if (has_suffix_ci(s, suf))
		return 1;
	return ls >= lf + 3 && has_suffix_ci(s, ".gz") &&
	       strncasecmp(s + ls - 3 - lf, suf, lf) == 0;
}

int bfs__src_is_tfrecord_name(const char *name)
{
	return has_suffix_gz(name, ".tfrecord") ||
	       has_suffix_gz(name, ".tfrecords") ||
	       has_suffix_gz(name, ".tfrec") || strstr(name, "-of-") != NULL;
}

int bfs__src_is_tar_name(const char *name)
{
	return has_suffix_gz(name, ".tar") || has_suffix_ci(name, ".tgz");
}

/* The first min(cap, size) bytes of a file, for format detection: the
 * count read, or 0 if it cannot be read.  For a gzip file, the first bytes
 * of its uncompressed data. */
size_t bfs__src_read_head(const char *path, uint8_t *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	size_t got = 0;
	ssize_t r;

	if (fd < 0)
		return 0;
	r = pread(fd, buf, cap, 0);
	if (r > 0 && bfs_gz_probe(buf, (size_t)r) && fstat(fd, &st) == 0 &&
	    bfs_gz_peek(fd, (uint64_t)st.st_size, buf, cap, &got) == 0)
		r = (ssize_t)got;
	close(fd);
	return r > 0 ? (size_t)r : 0;
}

size_t bfs__src_head(bfs_source *s, const char *name, uint8_t *buf, size_t cap)
{
	const bfs_storage_object *o;
	char path[PATH_MAX];
	size_t got = 0, n;
	ssize_t k;
	int fd;

	if (!s->sc) {
		snprintf(path, sizeof(path), "%s/%s", s->dir, name);
		return bfs__src_read_head(path, buf, cap);
	}
	if ((k = bfs_shardcache_find(s->sc, name)) < 0)
		return 0;
	o = bfs_shardcache_object(s->sc, (size_t)k);
	n = o->size < cap ? (size_t)o->size : cap;
	if (bfs_shardcache_read(s->sc, (size_t)k, 0, buf, n, NULL))
		return 0;
	if (n >= 3 && bfs_gz_probe(buf, n)) {
		/* what it holds is inside the stream: the whole object */
		if (bfs_shardcache_pin(s->sc, (size_t)k, &fd, NULL))
			return 0;
		if (bfs_gz_peek(fd, o->size, buf, cap, &got))
			got = 0;
		bfs_shardcache_unpin(s->sc, (size_t)k);
		return got;
	}
	return n;
}

/* Does the file start with a TFRecord header whose length CRC holds? */
int bfs__src_looks_like_tfrecord(const uint8_t *h, size_t n)
{
	uint32_t crc;

	if (n < 12)
		return 0;
	memcpy(&crc, h + 8, 4);
	return bfs_crc32c_mask(bfs_crc32c(0, h, 8)) == crc;
}

/* ---- folders ---------------------------------------------------------- */

static int index_class_dir(bfs_source *s, const char *rel, int32_t label)
{
	char dir[PATH_MAX];
	char **files;
	size_t n;
	int err;

	snprintf(dir, sizeof(dir), "%s%s%s", s->dir, rel[0] ? "/" : "", rel);
	if ((err = s->sc ? bfs__src_list_remote(s, rel, 0, &files, &n)
			 : bfs__src_list_dir(dir, 0, &files, &n, NULL)))
		return err == -ENOMEM ? err : 0;
	for (size_t i = 0; i < n && !err; i++) {
		char name[PATH_MAX], path[PATH_MAX];
		bfs_shard_stamp stamp;
		struct stat st;

		if (!bfs__src_is_image_name(files[i]))
			continue;
		snprintf(name, sizeof(name), "%s%s%s", rel, rel[0] ? "/" : "",
			 files[i]);
		if (s->sc) {
			ssize_t k = bfs_shardcache_find(s->sc, name);
			const bfs_storage_object *o;

			if (k < 0)
				continue;
			o = bfs_shardcache_object(s->sc, (size_t)k);
			bfs_shard_stamp_remote(o->size, o->etag, &stamp);
		} else {
			snprintf(path, sizeof(path), "%s/%s", s->dir, name);
			if (stat(path, &st) != 0)
				continue;
			bfs__src_stamp_of(&st, &stamp);
		}
		s->prog.bytes += stamp.size;
		if (!(err = bfs__src_add_shard(s, name, &stamp)))
			err = bfs__src_add_sample(s, 0, stamp.size, label, 0);
	}
	bfs__src_free_names(files, n);
	return err;
}

int bfs__src_index_folder(bfs_source *s, char **dirs, size_t ndirs)
{
	int err = 0;

	s->prog.total = ndirs ? ndirs : 1;
	if (ndirs == 0) {
		/* a flat folder: nothing names a class, so every label is 0 */
		bfs__src_classes_broken(s, "a flat folder (images directly in it, no class subfolders): every "
			       "image has label 0 and there are no classes; for labels, put each "
			       "class's images in a subfolder of its own (SRC/CLASS/IMAGE)");
		err = index_class_dir(s, "", 0);
		s->prog.done = 1;
		return err;
	}
	s->classes = calloc(ndirs, sizeof(*s->classes));
	if (!s->classes)
		return -ENOMEM;
	for (size_t i = 0; i < ndirs && !err; i++) {
		if (!(s->classes[i] = strdup(dirs[i])))
			return -ENOMEM;
		s->nclasses++;
		err = index_class_dir(s, dirs[i], (int32_t)i);
		s->prog.done = i + 1;
		bfs__src_progress(s);
	}
	return err;
}
