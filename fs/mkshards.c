/*
 * mkshards.c - `batchfs mkshards`: ImageFolder of JPEGs -> TFRecord shards
 * of tf.train.Example records (see mkshards.h).
 *
 * A tool main, so it prints: progress and problems on stderr, the summary
 * on stdout.  The work is serial: list and sort the inputs, then for each
 * file read it, take width/height from its JPEG header, build the Example
 * and append it to the current shard's temp file.  The shard count is only
 * known at the end (non-JPEGs are skipped), so the temp files are renamed
 * to their final "-of-N" names last.
 */
#include "fs/mkshards.h"

#include "engine/base/error.h"
#include "engine/formats/example.h"
#include "engine/formats/tfrecord.h"
#include "engine/storage/storage.h"
#include "fs/optparse.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <turbojpeg.h>

#define MAX_JPEG_BYTES (512u << 20) /* larger files are skipped */

static const char usage_text[] =
	"usage: batchfs mkshards JPEG_DIR OUT_DIR [--per-shard N] [--prefix P] [--force] [--quiet]\n"
	"\n"
	"Pack JPEGs into TFRecord shards of tf.train.Example records with the\n"
	"ImageNet keys (image/encoded, image/format, image/class/label,\n"
	"image/class/synset, image/filename, image/height, image/width).\n"
	"\n"
	"  JPEG_DIR         class sub-folders (sorted by name; label = index from 0)\n"
	"                   of .jpg/.jpeg files, or just files (all class 0)\n"
	"  OUT_DIR          where P-00000-of-0000N.tfrecord go (created if missing),\n"
	"                   or s3://BUCKET/PREFIX: written to a staging folder in\n"
	"                   $TMPDIR, then uploaded whole (credentials and endpoint\n"
	"                   as for batchfs mount)\n"
	"  --per-shard N    records per shard (default 1024)\n"
	"  --prefix P       shard name prefix (default train)\n"
	"  --force          replace the P-*-of-*.tfrecord shards of an earlier run\n"
	"                   in OUT_DIR (without it such a rerun is refused: a mount\n"
	"                   would count the old shards with the new ones)\n"
	"  --quiet          no progress output\n"
	"  --help           this text\n"
	"\n"
	"Exit status: 0 done, 1 failed, 2 usage error.\n";

typedef struct {
	char *path;    /* JPEG_DIR/class/file */
	char *name;    /* points into path: the file name */
	int label;
} item;

typedef struct {
	char **v;
	size_t n, cap;
} strvec;

typedef struct {
	const char *in, *out, *prefix;
	long per_shard;
	int quiet;
	int force;     /* replace an earlier run's shards */
} opts;

typedef struct {
	const opts *o;
	char **synsets;    /* per label */
	size_t nclasses;
	item *items;
	size_t nitems, items_cap;

	char **tmp;        /* temp file path of each shard written so far */
	size_t nshards, tmp_cap;
	int fd;            /* current shard, or -1 */
	long in_shard;     /* records in the current shard */

	uint64_t written, skipped, bytes_in;
	size_t done;       /* items looked at, for progress */
	int tty;
	int bar_shown;     /* a progress bar without its newline is on stderr */
	double t0, last_progress;
} job;

static void errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void errf(const char *fmt, ...)
{
	va_list ap;

	fputs("batchfs mkshards: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 2);

	if (s) {
		memcpy(s, a, la);
		s[la] = '/';
		memcpy(s + la + 1, b, lb + 1);
	}
	return s;
}

static int strvec_push(strvec *v, const char *s)
{
	if (v->n == v->cap) {
		size_t ncap = v->cap ? v->cap * 2 : 64;
		char **nv = realloc(v->v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		v->v = nv;
		v->cap = ncap;
	}
	if (!(v->v[v->n] = strdup(s)))
		return -ENOMEM;
	v->n++;
	return 0;
}

static void strvec_free(strvec *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->v[i]);
	free(v->v);
	v->v = NULL;
	v->n = v->cap = 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b); /* bytewise */
}

static int is_jpeg_name(const char *name)
{
	size_t n = strlen(name);

	return (n > 4 && strcasecmp(name + n - 4, ".jpg") == 0) ||
	       (n > 5 && strcasecmp(name + n - 5, ".jpeg") == 0);
}

/* Sorted non-hidden entries of dir that are directories (want_dirs) or
 * regular JPEG files (following symlinks).  *nother counts regular files
 * skipped by the filter (for want_dirs: files beside the class folders). */
static int list_dir(const char *dir, int want_dirs, strvec *out,
		    size_t *nother)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int err = 0;

	if (!d) {
		err = -errno;
		errf("cannot open %s: %s", dir, strerror(errno));
		return err;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, 0) != 0) {
			errf("cannot stat %s/%s: %s", dir, de->d_name,
			     strerror(errno));
			continue; /* e.g. a dangling symlink */
		}
		if (want_dirs ? S_ISDIR(st.st_mode)
			      : S_ISREG(st.st_mode) && is_jpeg_name(de->d_name)) {
			if ((err = strvec_push(out, de->d_name)))
				break;
		} else if (S_ISREG(st.st_mode) && nother) {
			(*nother)++;
		}
	}
	if (!err && errno) {
		err = -errno;
		errf("cannot read %s: %s", dir, strerror(errno));
	}
	closedir(d);
	if (!err && out->n)
		qsort(out->v, out->n, sizeof(char *), cmp_str);
	return err;
}

static int add_item(job *j, const char *dir, const char *file, int label)
{
	item *it;

	if (j->nitems == j->items_cap) {
		size_t ncap = j->items_cap ? j->items_cap * 2 : 1024;
		item *n = realloc(j->items, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		j->items = n;
		j->items_cap = ncap;
	}
	it = &j->items[j->nitems];
	if (!(it->path = join(dir, file)))
		return -ENOMEM;
	it->name = it->path + strlen(dir) + 1;
	it->label = label;
	j->nitems++;
	return 0;
}

/* Fill j->synsets and j->items from the input tree. */
static int collect(job *j)
{
	strvec classes = {0}, files = {0};
	size_t loose = 0, ignored = 0;
	int err;

	if ((err = list_dir(j->o->in, 1, &classes, &loose)))
		goto out;
	if (classes.n == 0) {
		/* No sub-folders: the directory itself is class 0. */
		const char *base;
		char *dir = strdup(j->o->in);
		size_t n;

		if (!dir) {
			err = -ENOMEM;
			goto out;
		}
		n = strlen(dir); /* the synset is the folder's own name */
		while (n > 1 && dir[n - 1] == '/')
			dir[--n] = '\0';
		base = strrchr(dir, '/');
		err = strvec_push(&classes, base ? base + 1 : dir);
		free(dir);
		if (err)
			goto out;
		j->synsets = classes.v;
		j->nclasses = 1;
		if ((err = list_dir(j->o->in, 0, &files, &ignored)))
			goto out;
		for (size_t f = 0; f < files.n && !err; f++)
			err = add_item(j, j->o->in, files.v[f], 0);
		goto out;
	}
	if (loose)
		errf("note: %zu file(s) directly in %s ignored (class sub-folders "
		     "are used)", loose, j->o->in);
	j->synsets = classes.v;
	j->nclasses = classes.n;
	for (size_t c = 0; c < classes.n && !err; c++) {
		char *dir = join(j->o->in, classes.v[c]);

		if (!dir) {
			err = -ENOMEM;
			break;
		}
		strvec_free(&files);
		err = list_dir(dir, 0, &files, &ignored);
		for (size_t f = 0; f < files.n && !err; f++)
			err = add_item(j, dir, files.v[f], (int)c);
		free(dir);
	}
out:
	if (classes.v != j->synsets)
		strvec_free(&classes);
	strvec_free(&files);
	if (err == -ENOMEM)
		errf("out of memory");
	return err;
}

static int read_file(const char *path, uint8_t **buf, size_t *cap,
		     size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	size_t got = 0;

	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = -errno;

		if (fd >= 0)
			close(fd);
		return e;
	}
	if ((uint64_t)st.st_size > MAX_JPEG_BYTES) {
		close(fd);
		return -EFBIG;
	}
	if ((size_t)st.st_size + 1 > *cap) {
		size_t ncap = (size_t)st.st_size + 1;
		uint8_t *n = realloc(*buf, ncap);

		if (!n) {
			close(fd);
			return -ENOMEM;
		}
		*buf = n;
		*cap = ncap;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, *buf + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? -errno : -EIO; /* shrank under us */

			close(fd);
			return e;
		}
		got += (size_t)r;
	}
	close(fd);
	*len = got;
	return 0;
}

static void progress(job *j, int final)
{
	double t = now_s(), el = t - j->t0;
	double pct = j->nitems ? 100.0 * (double)j->done / (double)j->nitems : 100;
	double mbs = el > 0 ? (double)j->bytes_in / el / 1e6 : 0;

	if (j->o->quiet)
		return;
	if (j->tty) {
		char bar[31];
		int fill = (int)(pct * 30 / 100);

		if (!final && t - j->last_progress < 0.1)
			return;
		for (int i = 0; i < 30; i++)
			bar[i] = i < fill ? '#' : '-';
		bar[30] = '\0';
		fprintf(stderr, "\r[%s] %3.0f%% %zu/%zu files, %zu shards, %.1f MB/s ",
			bar, pct, j->done, j->nitems,
			j->nshards, mbs);
		j->bar_shown = !final;
		if (final)
			fputc('\n', stderr);
	} else {
		if (!final && t - j->last_progress < 5.0)
			return;
		fprintf(stderr, "mkshards: %zu/%zu files (%.0f%%), %zu shards, "
			"%.1f MB/s\n", j->done, j->nitems, pct, j->nshards, mbs);
	}
	j->last_progress = t;
}

static char *shard_tmp_name(const job *j, size_t idx)
{
	char name[512];

	snprintf(name, sizeof(name), ".%s-%05zu.tfrecord.tmp%ld", j->o->prefix,
		 idx, (long)getpid());
	return join(j->o->out, name);
}

static int close_shard(job *j)
{
	int err = 0;

	if (j->fd < 0)
		return 0;
	if (fsync(j->fd) != 0)
		err = -errno;
	if (close(j->fd) != 0 && !err)
		err = -errno;
	j->fd = -1;
	if (err)
		errf("cannot write %s: %s", j->tmp[j->nshards - 1],
		     strerror(-err));
	return err;
}

static int open_shard(job *j)
{
	char *path;

	if (j->nshards == j->tmp_cap) {
		size_t ncap = j->tmp_cap ? j->tmp_cap * 2 : 16;
		char **n = realloc(j->tmp, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		j->tmp = n;
		j->tmp_cap = ncap;
	}
	if (!(path = shard_tmp_name(j, j->nshards)))
		return -ENOMEM;
	j->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (j->fd < 0) {
		int e = -errno;

		errf("cannot create %s: %s", path, strerror(errno));
		free(path);
		return e;
	}
	j->tmp[j->nshards++] = path;
	j->in_shard = 0;
	return 0;
}

static int add_record(job *j, bfs_example_builder *b, const item *it,
		      const uint8_t *jpeg, size_t len, int w, int h)
{
	const uint8_t *rec;
	size_t rec_len;
	int err;

	bfs_example_builder_reset(b);
	if ((err = bfs_example_builder_add_int64(b, "image/class/label", it->label)) ||
	    (err = bfs_example_builder_add_bytes(b, "image/class/synset",
				 j->synsets[it->label], strlen(j->synsets[it->label]))) ||
	    (err = bfs_example_builder_add_bytes(b, "image/encoded", jpeg, len)) ||
	    (err = bfs_example_builder_add_bytes(b, "image/filename", it->name,
						 strlen(it->name))) ||
	    (err = bfs_example_builder_add_bytes(b, "image/format", "JPEG", 4)) ||
	    (err = bfs_example_builder_add_int64(b, "image/height", h)) ||
	    (err = bfs_example_builder_add_int64(b, "image/width", w)) ||
	    (err = bfs_example_builder_finish(b, &rec, &rec_len))) {
		errf("out of memory");
		return err;
	}
	if (j->fd < 0 && (err = open_shard(j)))
		return err;
	if ((err = bfs_tfrecord_write(j->fd, rec, rec_len))) {
		errf("cannot write %s: %s", j->tmp[j->nshards - 1],
		     strerror(-err));
		return err;
	}
	j->written++;
	if (++j->in_shard == j->o->per_shard)
		return close_shard(j);
	return 0;
}

static int convert(job *j)
{
	bfs_example_builder *b = NULL;
	tjhandle tj = tjInitDecompress();
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	int err = 0;

	if (!tj || bfs_example_builder_create(&b)) {
		errf("cannot set up: %s", tj ? "out of memory" : tjGetErrorStr());
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < j->nitems; i++) {
		const item *it = &j->items[i];
		int w, h, subsamp, cs;

		err = read_file(it->path, &buf, &cap, &len);
		if (err == -EFBIG) {
			errf("skip %s: larger than %u MiB", it->path,
			     MAX_JPEG_BYTES >> 20);
			j->skipped++;
			err = 0;
			goto next;
		}
		if (err) {
			errf("cannot read %s: %s", it->path, strerror(-err));
			goto out;
		}
		j->bytes_in += len;
		if (tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h,
					&subsamp, &cs) != 0) {
			if (j->bar_shown)
				fputc('\n', stderr);
			j->bar_shown = 0;
			errf("skip %s: not a JPEG (%s)", it->path,
			     tjGetErrorStr2(tj));
			j->skipped++;
			goto next;
		}
		if ((err = add_record(j, b, it, buf, len, w, h)))
			goto out;
next:
		j->done++;
		progress(j, 0);
	}
	err = close_shard(j);
out:
	if (tj)
		tjDestroy(tj);
	bfs_example_builder_destroy(b);
	free(buf);
	return err;
}

/* Rename every temp shard to PREFIX-i-of-N.tfrecord. */
static int publish(job *j)
{
	for (size_t i = 0; i < j->nshards; i++) {
		char name[512], *path;
		int e;

		snprintf(name, sizeof(name), "%s-%05zu-of-%05zu.tfrecord",
			 j->o->prefix, i, j->nshards);
		if (!(path = join(j->o->out, name)))
			return -ENOMEM;
		if (rename(j->tmp[i], path) != 0) {
			e = -errno;
			errf("cannot rename %s to %s: %s", j->tmp[i], path,
			     strerror(errno));
			free(path);
			return e;
		}
		free(path);
		free(j->tmp[i]);
		j->tmp[i] = NULL; /* published: no longer ours to remove */
	}
	return 0;
}

/* Is name one of ours: PREFIX-NNNNN-of-NNNNN.tfrecord (digits, any count)? */
static int is_our_shard(const char *name, const char *prefix)
{
	size_t plen = strlen(prefix);
	const char *p = name + plen;
	int digits;

	if (strncmp(name, prefix, plen) != 0 || *p++ != '-')
		return 0;
	for (digits = 0; *p >= '0' && *p <= '9'; p++)
		digits++;
	if (!digits || strncmp(p, "-of-", 4) != 0)
		return 0;
	for (p += 4, digits = 0; *p >= '0' && *p <= '9'; p++)
		digits++;
	return digits && !strcmp(p, ".tfrecord");
}

/* The shards of an earlier run in OUT_DIR, sorted, into *out (empty when
 * there are none or OUT_DIR does not exist yet).  0 or -errno. */
static int earlier_shards(const opts *o, strvec *out)
{
	DIR *d = opendir(o->out);
	struct dirent *de;
	int err = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while (!err && (de = readdir(d)))
		if (is_our_shard(de->d_name, o->prefix))
			err = strvec_push(out, de->d_name);
	closedir(d);
	if (!err && out->n)
		qsort(out->v, out->n, sizeof(char *), cmp_str);
	return err;
}

/* After --force published the new shards: remove the earlier run's that
 * the new names did not replace (a run with fewer shards, or another
 * count in the name).  0, or the first unlink error (said). */
static int remove_replaced(const job *j, const strvec *old)
{
	char tail[64];
	int err = 0;

	snprintf(tail, sizeof(tail), "-of-%05zu.tfrecord", j->nshards);
	for (size_t i = 0; i < old->n; i++) {
		const char *n = old->v[i];
		const char *t = strstr(n + strlen(j->o->prefix) + 1, "-of-");
		char *path;
		unsigned long idx = strtoul(n + strlen(j->o->prefix) + 1, NULL, 10);

		/* rewritten by this run: PREFIX-i-of-N with i < N, N ours */
		if (t && !strcmp(t, tail) && idx < j->nshards &&
		    (size_t)(t - n) == strlen(j->o->prefix) + 6)
			continue;
		if (!(path = join(j->o->out, n)))
			return -ENOMEM;
		if (unlink(path) != 0 && errno != ENOENT && !err) {
			err = -errno;
			errf("cannot remove %s: %s", path, strerror(errno));
		}
		free(path);
	}
	return err;
}

static int mkdir_p(const char *path)
{
	char *p = strdup(path);
	int err = 0;

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; ; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;

			*s = '\0';
			if (mkdir(p, 0755) != 0 && errno != EEXIST) {
				err = -errno;
				break;
			}
			*s = c;
			if (c == '\0')
				break;
		}
	}
	free(p);
	return err;
}

static int parse_args(int argc, char **argv, opts *o)
{
	const char *pos[2];
	int npos = 0;

	o->per_shard = 1024;
	o->prefix = "train";
	o->quiet = 0;
	o->force = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage_text, stdout);
			return 1;
		}
		if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
			o->quiet = 1;
			continue;
		}
		if (!strcmp(a, "--force") || !strcmp(a, "-f")) {
			o->force = 1;
			continue;
		}
		if (!strncmp(a, "--per-shard", 11) || !strncmp(a, "--prefix", 8)) {
			int is_per = a[2] == 'p' && a[5] == '-';
			size_t klen = is_per ? 11 : 8;

			if (a[klen] == '=')
				val = a + klen + 1;
			else if (a[klen] == '\0' && i + 1 < argc)
				val = argv[++i];
			else if (a[klen] == '\0') {
				errf("%s needs a value", a);
				return 2;
			} else
				goto unknown;
			if (is_per) {
				char *end;

				errno = 0;
				o->per_shard = strtol(val, &end, 10);
				if (errno || *end || end == val || o->per_shard < 1) {
					errf("--per-shard wants a positive integer, "
					     "not '%s'", val);
					return 2;
				}
			} else {
				if (!*val || strchr(val, '/') || strlen(val) > 200) {
					errf("--prefix must be a plain file name prefix");
					return 2;
				}
				o->prefix = val;
			}
			continue;
		}
		if (a[0] == '-' && a[1] != '\0') {
unknown:
			static const char *const names[] = { "per-shard", "prefix",
							     "force", "quiet", "help",
							     NULL };
			const char *near = bfs_opt_nearest(a, names);

			if (near)
				errf("unknown option '%s' (did you mean --%s?)", a, near);
			else
				errf("unknown option '%s' (try --help)", a);
			return 2;
		}
		if (npos == 2) {
			errf("too many arguments (try --help)");
			return 2;
		}
		pos[npos++] = a;
	}
	if (npos != 2) {
		fputs(usage_text, stderr);
		return 2;
	}
	o->in = pos[0];
	o->out = pos[1];
	return 0;
}

/* ---- OUT_DIR in object storage (s3://BUCKET/PREFIX) ------------------- */

/* The shards of an earlier run under the remote prefix, like
 * earlier_shards: only names directly under it. */
static int earlier_remote(bfs_storage *st, const opts *o, strvec *out)
{
	bfs_storage_object *objs;
	size_t n;
	char errmsg[BFS_ERRMSG_MAX] = "";
	int err = bfs_storage_list(st, &objs, &n, errmsg);

	if (err == -ENOENT)
		return 0; /* nothing there yet */
	if (err) {
		errf("cannot list %s: %s", o->out, errmsg[0] ? errmsg : strerror(-err));
		return err;
	}
	for (size_t i = 0; !err && i < n; i++)
		if (!strchr(objs[i].name, '/') && is_our_shard(objs[i].name, o->prefix))
			err = strvec_push(out, objs[i].name);
	bfs_storage_objects_free(objs, n);
	if (!err && out->n)
		qsort(out->v, out->n, sizeof(char *), cmp_str);
	return err;
}

/* Upload every published shard of local dir `dir` (PREFIX-i-of-N), each
 * one whole, then remove the earlier run's keys this run did not replace. */
static int upload(bfs_storage *st, const job *j, const char *dir,
		  const strvec *old)
{
	char errmsg[BFS_ERRMSG_MAX];

	for (size_t i = 0; i < j->nshards; i++) {
		char name[512], *path;
		struct stat sb;
		void *map = NULL;
		int fd, err;

		snprintf(name, sizeof(name), "%s-%05zu-of-%05zu.tfrecord",
			 j->o->prefix, i, j->nshards);
		if (!(path = join(dir, name)))
			return -ENOMEM;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		free(path);
		if (fd < 0 || fstat(fd, &sb)) {
			err = -errno;
			errf("cannot read %s back: %s", name, strerror(errno));
			if (fd >= 0)
				close(fd);
			return err;
		}
		if (sb.st_size &&
		    (map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd,
				0)) == MAP_FAILED) {
			err = -errno;
			close(fd);
			errf("cannot map %s: %s", name, strerror(-err));
			return err;
		}
		close(fd);
		errmsg[0] = '\0';
		err = bfs_storage_put(st, name, map ? map : "", (size_t)sb.st_size,
				      errmsg);
		if (map)
			munmap(map, (size_t)sb.st_size);
		if (err) {
			errf("cannot upload %s: %s", name,
			     errmsg[0] ? errmsg : strerror(-err));
			return err;
		}
		if (!j->o->quiet && j->tty)
			fprintf(stderr, "\rbatchfs mkshards: uploaded %zu/%zu shards",
				i + 1, j->nshards);
	}
	if (!j->o->quiet && j->tty)
		fputc('\n', stderr);
	for (size_t i = 0; i < old->n; i++) {
		char tail[64];
		const char *t = strstr(old->v[i] + strlen(j->o->prefix) + 1, "-of-");
		int err;

		snprintf(tail, sizeof(tail), "-of-%05zu.tfrecord", j->nshards);
		if (t && !strcmp(t, tail) &&
		    strtoul(old->v[i] + strlen(j->o->prefix) + 1, NULL, 10) < j->nshards)
			continue; /* rewritten by this run */
		errmsg[0] = '\0';
		if ((err = bfs_storage_delete(st, old->v[i], errmsg))) {
			errf("cannot remove the earlier %s: %s", old->v[i],
			     errmsg[0] ? errmsg : strerror(-err));
			return err;
		}
	}
	return 0;
}

/* Remove dir and the shards in it (it holds only what this run wrote). */
static void remove_staging(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char *p;

		if (de->d_name[0] == '.' || !(p = join(dir, de->d_name)))
			continue;
		unlink(p);
		free(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

int bfs_mkshards_main(int argc, char **argv)
{
	opts o;
	job j;
	strvec old = {0};
	struct stat st;
	bfs_storage *remote = NULL;
	const char *remote_url = NULL;
	char staging[4096] = "";
	int r, err, status = 1;

	r = parse_args(argc, argv, &o);
	if (r)
		return r == 1 ? 0 : r;
	if (bfs_storage_is_url(o.out)) {
		/* Shards are written to a staging folder, then uploaded whole. */
		bfs_storage_opts so = { 0 };
		char errmsg[BFS_ERRMSG_MAX] = "";
		const char *tmp = getenv("TMPDIR");

		if (strncmp(o.out, "s3://", 5)) {
			errf("%s: only s3:// can be written (http(s) is read only)", o.out);
			return 2;
		}
		bfs_http_opts_default(&so.http);
		if ((err = bfs_storage_open(o.out, &so, &remote, errmsg))) {
			errf("%s", errmsg[0] ? errmsg : strerror(-err));
			return 1;
		}
		snprintf(staging, sizeof(staging), "%s/batchfs-mkshards-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(staging)) {
			errf("cannot make a staging folder %s: %s", staging,
			     strerror(errno));
			bfs_storage_close(remote);
			return 1;
		}
		remote_url = o.out;
	}
	memset(&j, 0, sizeof(j));
	j.o = &o;
	j.fd = -1;
	j.tty = isatty(STDERR_FILENO);
	j.t0 = j.last_progress = now_s();

	if (stat(o.in, &st) != 0 || !S_ISDIR(st.st_mode)) {
		errf("%s is not a directory", o.in);
		return 1;
	}
	/* Refused before any work: a rerun into the same OUT_DIR would leave
	 * the old shards beside the new ones, and a mount reads them all. */
	if (remote ? (err = earlier_remote(remote, &o, &old))
		   : (err = earlier_shards(&o, &old))) {
		if (!remote)
			errf("cannot read %s: %s", o.out, strerror(-err));
		goto out;
	}
	if (old.n && !o.force) {
		errf("%s already holds %zu shard(s) of an earlier run (%s%s%s); a mount would count them with the new ones: pass --force to replace them, or choose another OUT_DIR or --prefix",
		     o.out, old.n, old.v[0], old.n > 1 ? " ... " : "",
		     old.n > 1 ? old.v[old.n - 1] : "");
		goto out;
	}
	if (remote)
		o.out = staging;
	if ((err = collect(&j)))
		goto out;
	if (j.nitems == 0) {
		errf("no .jpg/.jpeg files found in %s", o.in);
		goto out;
	}
	if ((err = mkdir_p(o.out))) {
		errf("cannot create %s: %s", o.out, strerror(-err));
		goto out;
	}
	if ((err = convert(&j)))
		goto out;
	progress(&j, 1);
	if (j.written == 0) {
		errf("none of the %zu files in %s is a readable JPEG", j.nitems,
		     o.in);
		goto out;
	}
	if ((err = publish(&j)))
		goto out;
	if (remote) {
		if ((err = upload(remote, &j, staging, &old)))
			goto out;
		o.out = remote_url;
	} else if (old.n && (err = remove_replaced(&j, &old))) {
		goto out;
	}
	if (j.skipped)
		errf("skipped %llu file(s) that are not JPEGs",
		     (unsigned long long)j.skipped);
	if (!o.quiet)
		printf("wrote %llu records in %zu shard(s) of up to %ld to %s "
		       "(%zu classes, %.1f MB)%s\n",
		       (unsigned long long)j.written, j.nshards, o.per_shard,
		       o.out, j.nclasses, (double)j.bytes_in / 1e6,
		       old.n ? ", replacing the earlier run's shards" : "");
	status = 0;
out:
	if (j.fd >= 0)
		close(j.fd);
	for (size_t i = 0; i < j.nshards; i++) {
		if (j.tmp[i])
			unlink(j.tmp[i]); /* not published: leave no debris */
		free(j.tmp[i]);
	}
	free(j.tmp);
	for (size_t i = 0; i < j.nitems; i++)
		free(j.items[i].path);
	free(j.items);
	for (size_t i = 0; i < j.nclasses; i++)
		free(j.synsets[i]);
	free(j.synsets);
	strvec_free(&old);
	if (staging[0])
		remove_staging(staging);
	bfs_storage_close(remote);
	return status;
}
