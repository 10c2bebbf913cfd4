/*
 * mounthelper.c - batchfs as mount(8)'s helper (see mounthelper.h): the
 * helper's `SRC MNT -o OPTIONS` turned into `batchfs mount`'s arguments.
 */
#include "fs/mounthelper.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bfs_mounthelper_called(const char *argv0)
{
	const char *base = argv0 ? strrchr(argv0, '/') : NULL;

	base = base ? base + 1 : argv0;
	return base && (!strcmp(base, "mount.batchfs") ||
			!strcmp(base, "mount.fuse.batchfs"));
}

/* mount(8)'s own options, which are not the file system's. */
static int mount_only(const char *opt)
{
	static const char *const words[] = {
		"defaults", "auto", "noauto", "user", "nouser", "users",
		"owner", "group", "nofail", "_netdev", "rw",
	};

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(opt, words[i]))
			return 1;
	return !strncmp(opt, "x-", 2) || !strncmp(opt, "comment=", 8);
}

/* Options for FUSE and the kernel's mount. */
static int fuse_option(const char *opt)
{
	static const char *const words[] = {
		"ro", "dev", "nodev", "suid", "nosuid", "exec", "noexec",
		"atime", "noatime", "relatime", "norelatime", "strictatime",
		"nostrictatime", "diratime", "nodiratime", "lazytime",
		"nolazytime", "sync", "async", "dirsync", "allow_root",
		"auto_unmount", "default_permissions",
	};
	static const char *const prefixes[] = {
		"fsname=", "max_read=", "context=", "fscontext=",
		"defcontext=", "rootcontext=",
	};

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(opt, words[i]))
			return 1;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(opt, prefixes[i], strlen(prefixes[i])))
			return 1;
	return 0;
}

/* Would a bare token continue the list of option `name` (mean, std,
 * augment) that mount(8) split at its commas? */
static int continues_list(const char *name, const char *tok)
{
	char *end;

	if (!strcmp(name, "augment"))
		return !strcmp(tok, "flip") || !strcmp(tok, "crop") ||
		       !strcmp(tok, "none");
	if (!strcmp(name, "mean") || !strcmp(name, "std")) {
		if (!tok[0])
			return 0;
		(void)strtod(tok, &end);
		return *end == '\0';
	}
	return 0;
}

static int seterr(char *err, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int seterr(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A growable, NULL-ended argv of strings it owns. */
static int push(bfs_mounthelper_args *a, size_t *cap, char *s)
{
	if (!s)
		return -ENOMEM;
	if ((size_t)a->argc + 2 > *cap) {
		size_t n = *cap ? *cap * 2 : 16;
		char **v = realloc(a->argv, n * sizeof(*v));

		if (!v) {
			free(s);
			return -ENOMEM;
		}
		a->argv = v;
		*cap = n;
	}
	a->argv[a->argc++] = s;
	a->argv[a->argc] = NULL;
	return 0;
}

/* Append text to the comma-joined string *s (malloc'd, may be NULL). */
static int join(char **s, const char *text)
{
	size_t len = *s ? strlen(*s) : 0;
	char *n = realloc(*s, len + strlen(text) + 2);

	if (!n)
		return -ENOMEM;
	if (len)
		n[len++] = ',';
	strcpy(n + len, text);
	*s = n;
	return 0;
}

/* Turn the -o string into batchfs mount's options (pushed onto out) and
 * FUSE's (joined into *fuse).  0, -ENOMEM or -EINVAL with err. */
static int translate(const char *opts, bfs_mounthelper_args *out, size_t *cap,
		     char **fuse, char *err, size_t ecap)
{
	char *copy = strdup(opts), *save = NULL, *tok;
	char list_name[32] = "";   /* the last option, if it takes a list */
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok && !rc;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq, *arg, *p;
		size_t n;

		if (!tok[0])
			continue;
		if (list_name[0] && !strchr(tok, '=') &&
		    continues_list(list_name, tok)) {
			/* mean=0.485,0.456,0.406: mount(8) split the list */
			char *last = out->argv[out->argc - 1];
			char *grown = realloc(last, strlen(last) + strlen(tok) + 2);

			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			strcat(strcat(grown, ","), tok);
			out->argv[out->argc - 1] = grown;
			continue;
		}
		list_name[0] = '\0';
		if (mount_only(tok))
			continue;
		/* `batchfs mount --help` would print the usage and exit 0:
		 * mount(8) would report a mount that did not happen */
		if (!strcmp(tok, "help")) {
			rc = seterr(err, ecap,
				    "'help' is not a mount option (see 'batchfs mount --help' for the options)");
			break;
		}
		if (!strncmp(tok, "subtype=", 8)) {
			rc = seterr(err, ecap,
				    "'%s' is not an option: a batchfs mount is always of type fuse.batchfs",
				    tok);
			break;
		}
		if (fuse_option(tok)) {
			rc = join(fuse, tok);
			continue;
		}
		eq = strchr(tok, '=');
		n = eq ? (size_t)(eq - tok) : strlen(tok);
		if (n == 0) {
			rc = seterr(err, ecap, "bad option '%s' in -o", tok);
			break;
		}
		if (!(arg = malloc(strlen(tok) + 3))) {
			rc = -ENOMEM;
			break;
		}
		arg[0] = arg[1] = '-';
		strcpy(arg + 2, tok);
		for (p = arg + 2; p < arg + 2 + n; p++)
			if (*p == '_')
				*p = '-';
		if (eq && n < sizeof(list_name)) {
			char name[32];

			memcpy(name, arg + 2, n);
			name[n] = '\0';
			if (!strcmp(name, "mean") || !strcmp(name, "std") ||
			    !strcmp(name, "augment")) {
				/* mean=0.485:0.456:0.406 */
				for (p = arg + 2 + n + 1; *p; p++)
					if (*p == ':')
						*p = ',';
				snprintf(list_name, sizeof(list_name), "%s", name);
			}
		}
		rc = push(out, cap, arg);
	}
	free(copy);
	return rc;
}

int bfs_mounthelper_parse(int argc, char **argv, bfs_mounthelper_args *out,
			  char *err, size_t cap)
{
	const char *pos[2] = { NULL, NULL };
	char *opts = NULL, *fuse = NULL;
	size_t vcap = 0;
	int npos = 0, rc = 0;

	memset(out, 0, sizeof(*out));
	err[0] = '\0';
	for (int i = 1; i < argc && !rc; i++) {
		const char *a = argv[i];

		if (a[0] != '-' || !a[1]) {
			if (npos == 2) {
				rc = seterr(err, cap, "too many arguments ('%s')", a);
				break;
			}
			pos[npos++] = a;
			continue;
		}
		/* -o OPTS and -oOPTS; -t TYPE; flags alone or grouped (-nv) */
		if (a[1] == 'o' || a[1] == 't' || a[1] == 'N') {
			const char *v = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);

			if (!v) {
				rc = seterr(err, cap, "-%c needs a value", a[1]);
			} else if (a[1] == 'o') {
				rc = join(&opts, v);
			} else if (a[1] == 'N') {
				rc = seterr(err, cap,
					    "-N (mount in another namespace) is not supported");
			} else if (strcmp(v, "fuse.batchfs") && strcmp(v, "batchfs")) {
				rc = seterr(err, cap, "type '%s' is not batchfs's", v);
			}
			continue;
		}
		for (const char *f = a + 1; *f && !rc; f++) {
			if (*f == 'f')
				out->fake = 1;
			else if (*f == 'v')
				out->verbose = 1;
			else if (*f != 'n' && *f != 's')
				rc = seterr(err, cap, "unknown option '-%c'", *f);
		}
	}
	if (!rc && npos != 2)
		rc = seterr(err, cap, "needs SHARD_DIR and MOUNTPOINT");
	if (!rc)
		rc = push(out, &vcap, strdup("mount"));
	if (!rc && opts)
		rc = translate(opts, out, &vcap, &fuse, err, cap);
	if (!rc && fuse) {
		rc = push(out, &vcap, strdup("-o"));
		if (!rc) {
			rc = push(out, &vcap, fuse);
			fuse = NULL;
		}
	}
	if (!rc)
		rc = push(out, &vcap, strdup("--"));
	for (int k = 0; k < 2 && !rc; k++)
		rc = push(out, &vcap, strdup(pos[k]));
	free(opts);
	free(fuse);
	if (rc) {
		if (rc == -ENOMEM)
			snprintf(err, cap, "out of memory");
		bfs_mounthelper_free(out);
	}
	return rc;
}

void bfs_mounthelper_free(bfs_mounthelper_args *a)
{
	for (int i = 0; a->argv && i < a->argc; i++)
		free(a->argv[i]);
	free(a->argv);
	memset(a, 0, sizeof(*a));
}

int bfs_mounthelper_main(int argc, char **argv,
			 int (*mount_cmd)(int argc, char **argv))
{
	bfs_mounthelper_args a;
	char err[512];
	int rc;

	if (bfs_mounthelper_parse(argc, argv, &a, err, sizeof(err))) {
		fprintf(stderr, "mount.batchfs: %s; see mount.batchfs(8)\n", err);
		return 2;
	}
	if (a.verbose) {
		fputs("batchfs", stderr);
		for (int i = 0; i < a.argc; i++)
			fprintf(stderr, " %s", a.argv[i]);
		fputc('\n', stderr);
	}
	rc = a.fake ? 0 : mount_cmd(a.argc, a.argv);
	bfs_mounthelper_free(&a);
	return rc;
}
