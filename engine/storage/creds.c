/*
 * creds.c - where credentials come from (see creds.h): the environment,
 * the shared files, the instance metadata service; and their refresh.
 */
#include "engine/storage/creds.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "engine/base/error.h"
#include "engine/storage/http.h"

enum { SRC_ANON, SRC_ENV, SRC_FILE, SRC_IMDS };

struct bfs_creds {
	pthread_mutex_t lock; /* guards set, expiry, role */
	bfs_creds_set set;    /* protected by lock */
	time_t expiry;        /* protected by lock; 0 never */
	int source;           /* set at open */
	char where[512];      /* the file and profile, for describe */
	char role[256];       /* IMDS role; protected by lock */
	char imds[256];       /* the metadata service's base URL */
	unsigned refresh_s;
	time_t (*now)(void);
	bfs_http *http;       /* IMDS only */
};

static time_t now_default(void) { return time(NULL); }

void bfs_creds_set_wipe(bfs_creds_set *s) { OPENSSL_cleanse(s, sizeof(*s)); }

static int copy(char *dst, size_t n, const char *v)
{
	size_t k = strlen(v);

	if (k >= n)
		return -EINVAL;
	memcpy(dst, v, k + 1);
	return 0;
}

/* ---- the shared files -------------------------------------------------- */

static void trim(char **s)
{
	char *e;

	while (isspace((unsigned char)**s))
		(*s)++;
	e = *s + strlen(*s);
	while (e > *s && isspace((unsigned char)e[-1]))
		*--e = '\0';
}

/*
 * The keys of section `profile` of an INI file (config: "[profile NAME]",
 * or "[default]"; credentials: "[NAME]").  Returns 1 when the section had
 * an access key, 0 when not (or no file), -EINVAL with the line on a
 * malformed line inside the section.
 */
static int read_ini(const char *path, const char *profile, int config,
		    bfs_creds_set *s, char *errmsg)
{
	FILE *f = fopen(path, "r");
	char line[8192], want[300];
	int in = 0, got = 0, lineno = 0, err = 0;

	if (!f)
		return 0;
	if (config && strcmp(profile, "default"))
		snprintf(want, sizeof(want), "profile %s", profile);
	else
		snprintf(want, sizeof(want), "%s", profile);
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *eq, *k, *v;

		lineno++;
		trim(&p);
		if (!*p || *p == '#' || *p == ';')
			continue;
		if (*p == '[') {
			char *e = strchr(p, ']');

			if (!e) {
				in = 0;
				continue;
			}
			*e = '\0';
			p++;
			trim(&p);
			in = !strcmp(p, want);
			continue;
		}
		if (!in)
			continue;
		eq = strchr(p, '=');
		if (!eq) {
			/* A nested block (s3 = ...) line; not ours. */
			continue;
		}
		*eq = '\0';
		k = p;
		v = eq + 1;
		trim(&k);
		trim(&v);
		if (!strcmp(k, "aws_access_key_id"))
			err = copy(s->access_key, sizeof(s->access_key), v), got = 1;
		else if (!strcmp(k, "aws_secret_access_key"))
			err = copy(s->secret_key, sizeof(s->secret_key), v);
		else if (!strcmp(k, "aws_session_token"))
			err = copy(s->token, sizeof(s->token), v);
		if (err) {
			bfs_seterr(errmsg, "%s:%d: %s is too long", path, lineno, k);
			break;
		}
	}
	OPENSSL_cleanse(line, sizeof(line));
	fclose(f);
	if (err)
		return err;
	if (got && !s->secret_key[0]) {
		bfs_seterr(errmsg, "%s: profile %s has aws_access_key_id but no "
			   "aws_secret_access_key", path, profile);
		return -EINVAL;
	}
	return got;
}

static const char *home(void)
{
	const char *h = getenv("HOME");
	struct passwd *pw;

	if (h && *h)
		return h;
	pw = getpwuid(getuid());
	return pw ? pw->pw_dir : "/";
}

/* ---- IMDSv2 ------------------------------------------------------------ */

typedef struct {
	bfs_creds *c;
	const char *path;
	const char *token; /* NULL for the token request itself */
} imds_req;

static int imds_prepare(void *ctx, uint64_t off, uint64_t len,
			bfs_http_attempt *a)
{
	imds_req *r = ctx;

	(void)off, (void)len;
	snprintf(a->url, sizeof(a->url), "%s%s", r->c->imds, r->path);
	if (r->token)
		snprintf(a->headers[a->nheaders++], BFS_HTTP_HEADER_MAX,
			 "X-aws-ec2-metadata-token: %s", r->token);
	else
		snprintf(a->headers[a->nheaders++], BFS_HTTP_HEADER_MAX,
			 "X-aws-ec2-metadata-token-ttl-seconds: 21600");
	return 0;
}

static int imds_call(bfs_creds *c, const char *method, const char *path,
		     const char *token, char **body, char *errmsg)
{
	imds_req r = { c, path, token };
	bfs_http_req q = {
		.method = method, .prepare = imds_prepare, .ctx = &r,
		.what = "the instance metadata service", .buf_max = 65536,
		.dyn = body,
	};

	return bfs_http_do(c->http, &q, NULL, errmsg);
}

/* The string value of "key" in a flat JSON object (the metadata service's
 * credentials), unescaped into out.  Returns 0 or -ENOENT. */
static int json_str(const char *js, const char *key, char *out, size_t n)
{
	char pat[64];
	const char *p;
	size_t o = 0;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(js, pat);
	if (!p)
		return -ENOENT;
	p += strlen(pat);
	while (isspace((unsigned char)*p))
		p++;
	if (*p++ != ':')
		return -ENOENT;
	while (isspace((unsigned char)*p))
		p++;
	if (*p++ != '"')
		return -ENOENT;
	for (; *p && *p != '"'; p++) {
		char ch = *p;

		if (ch == '\\') {
			p++;
			ch = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
			if (!ch)
				return -ENOENT;
		}
		if (o + 1 >= n)
			return -ENOENT;
		out[o++] = ch;
	}
	if (*p != '"')
		return -ENOENT;
	out[o] = '\0';
	return 0;
}

static time_t parse_iso8601(const char *s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (!strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
		return 0;
	return timegm(&tm);
}

/* Fetch a set from the metadata service; no lock held. */
static int imds_fetch(bfs_creds *c, bfs_creds_set *s, time_t *expiry,
		      char *role, size_t role_n, char *errmsg)
{
	char *token = NULL, *roles = NULL, *js = NULL, path[512], exp[64];
	int err;

	err = imds_call(c, "PUT", "/latest/api/token", NULL, &token, errmsg);
	if (err)
		goto out;
	err = imds_call(c, "GET", "/latest/meta-data/iam/security-credentials/",
			token, &roles, errmsg);
	if (err)
		goto out;
	roles[strcspn(roles, "\r\n")] = '\0';
	if (!roles[0] || strchr(roles, '/') || strlen(roles) >= role_n) {
		err = -ENOENT;
		bfs_seterr(errmsg, "the instance metadata service names no IAM "
			   "role for this machine");
		goto out;
	}
	snprintf(role, role_n, "%s", roles);
	snprintf(path, sizeof(path), "/latest/meta-data/iam/security-credentials/%s",
		 roles);
	err = imds_call(c, "GET", path, token, &js, errmsg);
	if (err)
		goto out;
	memset(s, 0, sizeof(*s));
	if (json_str(js, "AccessKeyId", s->access_key, sizeof(s->access_key)) ||
	    json_str(js, "SecretAccessKey", s->secret_key, sizeof(s->secret_key)) ||
	    json_str(js, "Token", s->token, sizeof(s->token))) {
		bfs_creds_set_wipe(s);
		err = -EPROTO;
		bfs_seterr(errmsg, "the instance metadata service's credentials "
			   "for role %s lack AccessKeyId, SecretAccessKey or Token",
			   role);
		goto out;
	}
	*expiry = json_str(js, "Expiration", exp, sizeof(exp)) ? 0
								: parse_iso8601(exp);
out:
	if (token)
		OPENSSL_cleanse(token, strlen(token));
	if (js)
		OPENSSL_cleanse(js, strlen(js));
	free(token);
	free(roles);
	free(js);
	return err;
}

/* ---- open, get, close -------------------------------------------------- */

int bfs_creds_open(const bfs_creds_opts *o, bfs_creds **out, char *errmsg)
{
	bfs_creds *c;
	const char *v, *profile;
	char path[1024], looked[1024];
	int r;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->now = o->now ? o->now : now_default;
	c->refresh_s = o->refresh_s ? o->refresh_s : 300;

	if (o->anonymous) {
		c->source = SRC_ANON;
		c->set.anonymous = 1;
		goto found;
	}

	v = getenv("AWS_ACCESS_KEY_ID");
	if (v && *v) {
		const char *sk = getenv("AWS_SECRET_ACCESS_KEY");
		const char *tk = getenv("AWS_SESSION_TOKEN");

		if (!sk || !*sk) {
			bfs_seterr(errmsg, "AWS_ACCESS_KEY_ID is set but "
				   "AWS_SECRET_ACCESS_KEY is not");
			r = -EINVAL;
			goto fail;
		}
		if (copy(c->set.access_key, sizeof(c->set.access_key), v) ||
		    copy(c->set.secret_key, sizeof(c->set.secret_key), sk) ||
		    (tk && copy(c->set.token, sizeof(c->set.token), tk))) {
			bfs_seterr(errmsg, "an AWS_* credential variable is too long");
			r = -EINVAL;
			goto fail;
		}
		c->source = SRC_ENV;
		goto found;
	}

	profile = o->profile ? o->profile : getenv("AWS_PROFILE");
	if (!profile || !*profile)
		profile = "default";
	v = getenv("AWS_SHARED_CREDENTIALS_FILE");
	if (v && *v)
		snprintf(path, sizeof(path), "%s", v);
	else
		snprintf(path, sizeof(path), "%s/.aws/credentials", home());
	snprintf(looked, sizeof(looked), "%s", path);
	r = read_ini(path, profile, 0, &c->set, errmsg);
	if (r < 0)
		goto fail;
	if (!r) {
		v = getenv("AWS_CONFIG_FILE");
		if (v && *v)
			snprintf(path, sizeof(path), "%s", v);
		else
			snprintf(path, sizeof(path), "%s/.aws/config", home());
		snprintf(looked + strlen(looked), sizeof(looked) - strlen(looked),
			 ", %s", path);
		r = read_ini(path, profile, 1, &c->set, errmsg);
		if (r < 0)
			goto fail;
	}
	if (r) {
		c->source = SRC_FILE;
		snprintf(c->where, sizeof(c->where), "profile %s of %s", profile,
			 path);
		goto found;
	}

	v = getenv("AWS_EC2_METADATA_DISABLED");
	if (v && !strcasecmp(v, "true")) {
		bfs_seterr(errmsg, "no AWS credentials: none in AWS_ACCESS_KEY_ID/"
			   "AWS_SECRET_ACCESS_KEY, none for profile %s in %s, and "
			   "the instance metadata service is disabled; for a public "
			   "bucket use --s3-anonymous", profile, looked);
		r = -ENOENT;
		goto fail;
	}
	v = o->imds_endpoint ? o->imds_endpoint
			     : getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	snprintf(c->imds, sizeof(c->imds), "%s",
		 v && *v ? v : "http://169.254.169.254");
	if (c->imds[0] && c->imds[strlen(c->imds) - 1] == '/')
		c->imds[strlen(c->imds) - 1] = '\0';
	{
		bfs_http_opts ho;
		char why[BFS_ERRMSG_MAX] = "";

		bfs_http_opts_default(&ho);
		ho.connections = 1;
		ho.connect_ms = 1000;
		ho.stall_ms = 1000;
		ho.giveup_ms = o->imds_giveup_ms ? o->imds_giveup_ms : 3000;
		r = bfs_http_create(&ho, &c->http, errmsg);
		if (r)
			goto fail;
		r = imds_fetch(c, &c->set, &c->expiry, c->role, sizeof(c->role), why);
		if (r) {
			bfs_seterr(errmsg, "no AWS credentials: none in "
				   "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, none for "
				   "profile %s in %s, and the instance metadata "
				   "service at %s gave none (%s); for a public bucket "
				   "use --s3-anonymous", profile, looked, c->imds, why);
			r = r == -EACCES ? -EACCES : -ENOENT;
			goto fail;
		}
		c->source = SRC_IMDS;
	}
found:
	*out = c;
	return 0;
fail:
	bfs_creds_close(c);
	return r;
}

void bfs_creds_close(bfs_creds *c)
{
	if (!c)
		return;
	bfs_http_destroy(c->http);
	bfs_creds_set_wipe(&c->set);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int bfs_creds_get(bfs_creds *c, bfs_creds_set *out, char *errmsg)
{
	time_t now = c->now(), exp;
	bfs_creds_set fresh;
	char role[256];
	int err = 0;

	pthread_mutex_lock(&c->lock);
	exp = c->expiry;
	pthread_mutex_unlock(&c->lock);
	if (c->source == SRC_IMDS && exp && now + (time_t)c->refresh_s >= exp) {
		time_t fexp = 0;

		err = imds_fetch(c, &fresh, &fexp, role, sizeof(role), errmsg);
		pthread_mutex_lock(&c->lock);
		if (!err) {
			c->set = fresh;
			c->expiry = fexp;
			snprintf(c->role, sizeof(c->role), "%s", role);
		} else if (now < c->expiry) {
			err = 0; /* the old set still works a while */
		}
		pthread_mutex_unlock(&c->lock);
		bfs_creds_set_wipe(&fresh);
		if (err)
			return err;
	}
	pthread_mutex_lock(&c->lock);
	*out = c->set;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

time_t bfs_creds_expiry(bfs_creds *c)
{
	time_t t;

	pthread_mutex_lock(&c->lock);
	t = c->expiry;
	pthread_mutex_unlock(&c->lock);
	return t;
}

void bfs_creds_describe(bfs_creds *c, char *buf, size_t n)
{
	char ak[128];

	pthread_mutex_lock(&c->lock);
	snprintf(ak, sizeof(ak), "%s", c->set.access_key);
	switch (c->source) {
	case SRC_ANON:
		snprintf(buf, n, "anonymous (requests are not signed)");
		break;
	case SRC_ENV:
		snprintf(buf, n, "the environment (%s)", ak);
		break;
	case SRC_FILE:
		snprintf(buf, n, "%s (%s)", c->where, ak);
		break;
	default: {
		char when[32] = "never";
		struct tm tm;

		if (c->expiry && gmtime_r(&c->expiry, &tm))
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(buf, n, "the instance metadata service at %s, role %s "
			 "(%s), expires %s", c->imds, c->role, ak, when);
	}
	}
	pthread_mutex_unlock(&c->lock);
}
