/*
 * host.c - what the mount asks of the machine it runs on, without FUSE:
 * paths made absolute, mount points found in /proc/self/mountinfo, the
 * bdi's read-ahead, the log file, and whether a directory can hold the
 * engine's slot files for passthrough (see host.h).
 */
#include "fs/host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Undo the octal escapes of /proc/self/mountinfo ("\040" for a space). */
static void unescape_mountinfo(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] &&
		    s[3]) {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* The absolute, resolved form of path without touching path itself,
 * which may be a mount point whose daemon is gone (a stat of it fails
 * with ENOTCONN): its parent is resolved and its last component appended.
 * 0, or -errno. */
int bfs_host_resolve(const char *path, char *out, size_t cap)
{
	char parent[PATH_MAX], real[PATH_MAX];
	const char *base;
	size_t n;
	int len;

	n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--;
	if (n == 0 || n >= sizeof(parent))
		return -ENAMETOOLONG;
	memcpy(parent, path, n);
	parent[n] = '\0';
	base = strrchr(parent, '/');
	if (!base) {
		base = parent;
		if (!realpath(".", real))
			return -errno;
	} else if (base == parent) {
		base++;
		snprintf(real, sizeof(real), "/");
	} else {
		parent[base - parent] = '\0';
		base++;
		if (!realpath(parent, real))
			return -errno;
	}
	if (!strcmp(base, ".") || !strcmp(base, "..") || !base[0]) {
		/* nothing to keep apart: resolve the whole name */
		if (!realpath(path, out))
			return -errno;
		return 0;
	}
	len = snprintf(out, cap, "%s%s%s", real,
		       real[strlen(real) - 1] == '/' ? "" : "/", base);
	return len < 0 || (size_t)len >= cap ? -ENAMETOOLONG : 0;
}

int bfs_host_default_shard_cache(char *buf, size_t n)
{
	const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");

	if (x && *x)
		return snprintf(buf, n, "%s/batchfs-shards", x) >= (int)n ? -1 : 0;
	if (h && *h)
		return snprintf(buf, n, "%s/.cache/batchfs-shards", h) >= (int)n ? -1 : 0;
	return -1;
}

/* A path made absolute against the current directory, without resolving
 * anything (it may not exist yet: a log file, a cache directory).  The
 * daemon works from / once it is detached, so every path it keeps must be
 * absolute before it starts.  0, or -errno. */
int bfs_host_absolute(const char *path, char *out, size_t cap)
{
	char cwd[PATH_MAX];
	int len;

	if (path[0] == '/')
		len = snprintf(out, cap, "%s", path);
	else if (!getcwd(cwd, sizeof(cwd)))
		return -errno;
	else
		len = snprintf(out, cap, "%s/%s", cwd, path);
	return len < 0 || (size_t)len >= cap ? -ENAMETOOLONG : 0;
}

/* Find path's topmost entry in /proc/self/mountinfo (never touching the
 * mount itself, which may not be serving yet, or be dead).  1 if found,
 * with what mountinfo says of it in *out (when not NULL).  Mounts stacked
 * on one path are listed in mount order, so the last match is the one a
 * path lookup reaches.  A line is "ID PARENT MAJ:MIN ROOT MOUNTPOINT
 * OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS". */
int bfs_host_mount_info(const char *path, bfs_host_mount *out)
{
	char real[PATH_MAX], line[4 * PATH_MAX];
	FILE *f;
	int found = 0;

	if (bfs_host_resolve(path, real, sizeof(real)))
		return 0;
	if (!(f = fopen("/proc/self/mountinfo", "re")))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *save = NULL, *dev = NULL, *parent = NULL;
		char *tok = strtok_r(line, " \n", &save);
		int id = tok ? atoi(tok) : -1;

		for (int field = 1; tok && field < 5; field++) {
			tok = strtok_r(NULL, " \n", &save);
			if (field == 1)
				parent = tok;
			if (field == 2)
				dev = tok;
		}
		if (!tok || !dev || !parent)
			continue;
		unescape_mountinfo(tok);
		if (strcmp(tok, real) != 0)
			continue;
		found = 1;
		if (!out)
			continue;
		memset(out, 0, sizeof(*out));
		out->id = id;
		out->parent_id = atoi(parent);
		snprintf(out->devno, sizeof(out->devno), "%s", dev);
		/* the optional fields end at a lone "-" */
		while ((tok = strtok_r(NULL, " \n", &save)) && strcmp(tok, "-"))
			;
		if (tok && (tok = strtok_r(NULL, " \n", &save))) {
			unescape_mountinfo(tok);
			snprintf(out->fstype, sizeof(out->fstype), "%s", tok);
			if ((tok = strtok_r(NULL, " \n", &save))) {
				unescape_mountinfo(tok);
				snprintf(out->source, sizeof(out->source), "%s", tok);
			}
		}
	}
	fclose(f);
	return found;
}

static int find_mount(const char *path, char *devno, size_t cap, int *mnt_id)
{
	bfs_host_mount m;

	if (!bfs_host_mount_info(path, &m))
		return 0;
	if (devno)
		snprintf(devno, cap, "%s", m.devno);
	if (mnt_id)
		*mnt_id = m.id;
	return 1;
}

int bfs_host_find_mount(const char *path, char *devno, size_t cap)
{
	return find_mount(path, devno, cap, NULL);
}

int bfs_host_mount_id(const char *path)
{
	int id = -1;

	return find_mount(path, NULL, 0, &id) ? id : -1;
}

int bfs_host_is_mountpoint(const char *path)
{
	return bfs_host_find_mount(path, NULL, 0);
}

/* The kernel sends reads of at most read_ahead_kb of the mount's bdi
 * (128 KiB by default, whatever conn->max_readahead asks), so a 19 MB
 * batch costs ~150 requests.  As root, raise it to 1 MiB: measured 15%
 * less CPU per GB served.  Failure (not root) only costs speed. */
void bfs_host_raise_readahead(const char *mountpoint)
{
	char devno[64], path[128];
	FILE *ra;

	if (!bfs_host_find_mount(mountpoint, devno, sizeof(devno)))
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", devno);
	if ((ra = fopen(path, "we"))) {
		fputs("1024", ra);
		fclose(ra);
	}
}

/* mkdir -p: every missing directory of path, mode 0755.  0 or -errno. */
static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

FILE *bfs_host_open_log(const char *log_path, char *path, size_t cap,
			char *why, size_t why_cap)
{
	const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	char dir[PATH_MAX], pwbuf[4096];
	struct passwd pw, *res = NULL;
	FILE *f;
	int err;

	why[0] = '\0';
	/* no HOME (a systemd unit, mount(8)): the user's home directory */
	if (!(home && home[0] == '/') &&
	    getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res &&
	    res->pw_dir && res->pw_dir[0] == '/')
		home = res->pw_dir;
	if (log_path) {
		snprintf(path, cap, "%s", log_path);
	} else {
		if (state && state[0] == '/')
			snprintf(dir, sizeof(dir), "%s/batchfs", state);
		else if (home && home[0] == '/')
			snprintf(dir, sizeof(dir), "%s/.local/state/batchfs", home);
		else {
			snprintf(why, why_cap,
				 "no home directory (set HOME or XDG_STATE_HOME, or pass --log)");
			return NULL;
		}
		if ((err = mkdir_p(dir))) {
			snprintf(why, why_cap, "cannot create %s: %s", dir,
				 strerror(-err));
			return NULL;
		}
		snprintf(path, cap, "%s/batchfs.log", dir);
	}
	if (!(f = fopen(path, "ae"))) {
		snprintf(why, why_cap, "cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	setvbuf(f, NULL, _IOLBF, 0);
	return f;
}

/* Where the engine's slot files go for passthrough (--slot-dir, default
 * /dev/shm), or NULL with *why saying why not: this process must be able
 * to register backing files (CAP_SYS_ADMIN), and dir must be a tmpfs (a
 * disk file system would write the batches back to disk) with room for
 * the memory budget that grants write leases (how the engine tells that
 * readers let go of a file). */
const char *bfs_host_slot_dir(const char *dir, uint64_t budget, char *why,
			      size_t cap)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct caps[2] = { { 0 } };
	struct statfs sf;
	int fd, leased;

	if (syscall(SYS_capget, &hdr, caps) != 0 ||
	    !(caps[0].effective & (1u << CAP_SYS_ADMIN))) {
		snprintf(why, cap, "needs CAP_SYS_ADMIN");
		return NULL;
	}
	if (statfs(dir, &sf) != 0) {
		snprintf(why, cap, "%s: %s", dir, strerror(errno));
		return NULL;
	}
	if (sf.f_type != TMPFS_MAGIC) {
		snprintf(why, cap, "%s is not a tmpfs", dir);
		return NULL;
	}
	if (budget && (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize < budget) {
		snprintf(why, cap,
			 "%s has %llu MiB free, less than --mem %llu MiB; see --slot-dir",
			 dir, (unsigned long long)((uint64_t)sf.f_bavail *
						   (uint64_t)sf.f_bsize >> 20),
			 (unsigned long long)(budget >> 20));
		return NULL;
	}
	if ((fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) < 0) {
		snprintf(why, cap, "%s: %s", dir, strerror(errno));
		return NULL;
	}
	leased = fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
	close(fd);
	if (!leased) {
		snprintf(why, cap, "%s grants no file leases", dir);
		return NULL;
	}
	return dir;
}


/* A name a batchfs cache directory may hold (cache/cache_open.c,
 * cache/cache_admin.c: the LMDB pair, the users' lock, the damage marker
 * and a damaged data.mdb moved aside).  Any NAME.lock is taken too, so
 * that a lock file the cache adds later does not make its own directory
 * a stranger's. */
static int cache_file_name(const char *name)
{
	static const char *const names[] = {
		"data.mdb", "lock.mdb", "users.lock", "damaged",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			return 1;
	size_t n = strlen(name);

	if (n > 5 && !strcmp(name + n - 5, ".lock"))
		return 1;
	return !strncmp(name, "data.mdb.damaged-", 17);
}

int bfs_host_check_cache_dir(const char *dir, char *why, size_t cap)
{
	struct dirent *de;
	struct stat st;
	int err = 0;
	DIR *d;

	if (stat(dir, &st) != 0) {
		if (errno == ENOENT)
			return 0; /* new: the cache creates it */
		err = -errno;
		snprintf(why, cap, "cache directory %s: %s", dir, strerror(errno));
		return err;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, cap, "cache directory %s is not a directory", dir);
		return -ENOTDIR;
	}
	if (!(d = opendir(dir))) {
		err = -errno;
		snprintf(why, cap, "cache directory %s: %s", dir, strerror(errno));
		return err;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (cache_file_name(de->d_name))
			continue;
		snprintf(why, cap,
			 "cache directory %s holds files that are not a batchfs cache ('%.200s' among them): give --cache an empty or new directory",
			 dir, de->d_name);
		err = -ENOTEMPTY;
		break;
	}
	closedir(d);
	return err;
}

int bfs_host_check_log_path(const char *path, char *why, size_t cap)
{
	struct stat st;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(why, cap, "log path %s is a directory: give --log a file", path);
		return -EISDIR;
	}
	return 0;
}

int bfs_host_check_slot_dir(const char *dir, char *why, size_t cap)
{
	struct statfs sf;
	struct stat st;
	int err;

	if (stat(dir, &st) != 0) {
		err = -errno;
		snprintf(why, cap, "--slot-dir %s: %s", dir, strerror(errno));
		return err;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, cap, "--slot-dir %s is not a directory", dir);
		return -ENOTDIR;
	}
	if (statfs(dir, &sf) != 0) {
		err = -errno;
		snprintf(why, cap, "--slot-dir %s: %s", dir, strerror(errno));
		return err;
	}
	if (sf.f_type != TMPFS_MAGIC) {
		snprintf(why, cap,
			 "--slot-dir %s is not a tmpfs (decoded batches there would be written to disk): give a tmpfs such as /dev/shm",
			 dir);
		return -EINVAL;
	}
	return 0;
}
