/*
 * wids.c - wids shard indexes read (wids.h): the JSON checked, each
 * shard's URL resolved against the index's folder as wids does, and the
 * shards named relative to the folder they all share.
 */
#include "fs/wids.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/base/error.h"
#include "fs/jsonread.h"

#define KIND "wids-shard-index-v1"

int bfs_wids_is_index_url(const char *url)
{
	size_t n = strcspn(url, "?#");

	return (!strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8)) &&
	       !strchr(url, '{') && n >= 5 && !strncasecmp(url + n - 5, ".json", 5);
}

void bfs_wids_free(bfs_wids *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n; i++)
		free(w->v[i].url);
	free(w->v);
	free(w->root);
	free(w->name);
	free(w);
}

/* ---- URLs -------------------------------------------------------------- */

/* Where the path of an absolute URL starts ("scheme://host" before it),
 * or 0 when s has no "scheme://". */
static size_t path_start(const char *s)
{
	const char *sep = strstr(s, "://");
	size_t i;

	if (!sep || sep == s || (size_t)(sep - s) != strcspn(s, "/?#:"))
		return 0;
	i = (size_t)(sep - s) + 3;
	return i + strcspn(s + i, "/?#");
}

/* path[0..n) with "." and ".." segments folded and repeated '/' made
 * one, as Python's os.path.normpath does for an absolute path: appended
 * to out (cap bytes).  0 or -ENAMETOOLONG. */
static int fold(const char *path, size_t n, char *out, size_t cap)
{
	size_t o = strlen(out), base = o;

	for (size_t i = 0; i < n;) {
		size_t j = i;

		while (j < n && path[j] != '/')
			j++;
		if (j - i == 0 || (j - i == 1 && path[i] == '.')) {
			/* nothing */
		} else if (j - i == 2 && path[i] == '.' && path[i + 1] == '.') {
			while (o > base && out[o - 1] != '/')
				o--;
			if (o > base)
				o--; /* the '/' before it; ".." at the root stays there */
		} else {
			if (o + 1 + (j - i) + 1 > cap)
				return -ENAMETOOLONG;
			out[o++] = '/';
			memcpy(out + o, path + i, j - i);
			o += j - i;
		}
		out[o] = '\0';
		i = j + 1;
	}
	if (o == base) {
		if (o + 2 > cap)
			return -ENAMETOOLONG;
		out[o++] = '/';
		out[o] = '\0';
	}
	return 0;
}

/* url resolved against the folder `base` (an absolute URL, its path the
 * folder), into out (cap bytes).  0, -EINVAL (base is not absolute),
 * -ENAMETOOLONG. */
static int resolve(const char *base, const char *url, char *out, size_t cap)
{
	size_t bp = path_start(base), plen = strcspn(url, "?#");
	char joined[4096];
	int n, err;

	if (path_start(url)) { /* absolute: as it is */
		if (strlen(url) >= cap)
			return -ENAMETOOLONG;
		strcpy(out, url);
		return 0;
	}
	if (!bp || bp >= cap)
		return -EINVAL;
	if (url[0] == '/') /* the host's path */
		n = snprintf(joined, sizeof(joined), "%.*s", (int)plen, url);
	else               /* below the folder, as os.path.join */
		n = snprintf(joined, sizeof(joined), "%.*s/%.*s",
			     (int)strcspn(base + bp, "?#"), base + bp, (int)plen, url);
	if (n < 0 || (size_t)n >= sizeof(joined))
		return -ENAMETOOLONG;
	memcpy(out, base, bp); /* scheme://host */
	out[bp] = '\0';
	if ((err = fold(joined, (size_t)n, out, cap)))
		return err;
	if (strlen(out) + strlen(url + plen) >= cap)
		return -ENAMETOOLONG;
	strcat(out, url + plen); /* the query and fragment: the url's own */
	return 0;
}

/* The folder of an absolute URL's path (itself when it ends in '/'),
 * query and fragment dropped, as an absolute URL in out. */
static int folder_of(const char *url, char *out, size_t cap)
{
	size_t ps = path_start(url), pl = strcspn(url + ps, "?#");

	while (pl && url[ps + pl - 1] != '/')
		pl--;
	if (ps + pl + 1 > cap)
		return -ENAMETOOLONG;
	memcpy(out, url, ps + pl);
	out[ps + pl] = '\0';
	return 0;
}

/* ---- the index ------------------------------------------------------------ */

/* A whole number 0..2^53 held by v (a JSON number): 1 and *out, else 0. */
static int whole(const bfs_jr *v, uint64_t *out)
{
	if (!v || v->type != BFS_JR_NUMBER || !(v->number >= 0) ||
	    v->number > 9007199254740992.0 || floor(v->number) != v->number)
		return 0;
	*out = (uint64_t)v->number;
	return 1;
}

static int add_list(bfs_wids *w, size_t *cap, const bfs_jr *list,
		    const char *base, char *errmsg)
{
	if (!list || list->type != BFS_JR_ARRAY) {
		bfs_seterr(errmsg, "wids index: \"shardlist\" is not a list");
		return -EINVAL;
	}
	for (size_t i = 0; i < list->n; i++) {
		const bfs_jr *e = bfs_jr_at(list, i);
		const char *u = bfs_jr_str(bfs_jr_get(e, "url"), NULL);
		const bfs_jr *fs = bfs_jr_get(e, "filesize");
		bfs_wids_shard *s;
		uint64_t fsz = 0;
		char url[4096];
		int err;

		if (w->n == *cap) {
			size_t nc = *cap ? *cap * 2 : 64;
			bfs_wids_shard *nv = realloc(w->v, nc * sizeof(*nv));

			if (!nv)
				return -ENOMEM;
			w->v = nv;
			*cap = nc;
		}
		s = &w->v[w->n];
		memset(s, 0, sizeof(*s));
		if (!u || !u[0] || strlen(u) != bfs_jr_get(e, "url")->len) {
			bfs_seterr(errmsg, "wids index: shard %zu has no \"url\" string", w->n);
			return -EINVAL;
		}
		if (!whole(bfs_jr_get(e, "nsamples"), &s->nsamples)) {
			bfs_seterr(errmsg, "wids index: shard %zu (%.200s) has no whole, "
				   "non-negative \"nsamples\"", w->n, u);
			return -EINVAL;
		}
		if (fs && fs->type != BFS_JR_NULL && !whole(fs, &fsz)) {
			bfs_seterr(errmsg, "wids index: shard %zu (%.200s): \"filesize\" is "
				   "not a whole, non-negative number", w->n, u);
			return -EINVAL;
		}
		s->filesize = fs && fs->type != BFS_JR_NULL ? (int64_t)fsz : -1;
		err = resolve(base, u, url, sizeof(url));
		if (err || (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))) {
			bfs_seterr(errmsg, "wids index: shard %zu's URL %.200s is %s", w->n, u,
				   err == -ENAMETOOLONG ? "too long once resolved"
				   : "not http:// or https:// once resolved (batchfs reads a "
				     "wids index's shards over http(s) only)");
			return -EINVAL;
		}
		if (!(s->url = strdup(url)))
			return -ENOMEM;
		w->n++;
	}
	return 0;
}

static int cmp_url(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The longest folder all URLs share, and each shard's name past it. */
static int name_shards(bfs_wids *w, char *errmsg)
{
	size_t n = strlen(w->v[0].url), min;
	char **sorted;

	for (size_t i = 1; i < w->n; i++) {
		size_t k = 0;

		while (k < n && w->v[i].url[k] == w->v[0].url[k])
			k++;
		n = k;
	}
	while (n && w->v[0].url[n - 1] != '/')
		n--;
	min = path_start(w->v[0].url) + 1; /* "scheme://host/" */
	if (n < min) {
		bfs_seterr(errmsg, "wids index: its shards are on more than one host "
			   "(%.150s and others): batchfs reads one source from one place",
			   w->v[0].url);
		return -EINVAL;
	}
	if (!(w->root = strndup(w->v[0].url, n)))
		return -ENOMEM;
	for (size_t i = 0; i < w->n; i++) {
		w->v[i].name = w->v[i].url + n;
		if (!w->v[i].name[0]) {
			bfs_seterr(errmsg, "wids index: shard URL %.200s names a folder", w->v[i].url);
			return -EINVAL;
		}
	}
	if (!(sorted = malloc(w->n * sizeof(*sorted))))
		return -ENOMEM;
	for (size_t i = 0; i < w->n; i++)
		sorted[i] = w->v[i].url;
	qsort(sorted, w->n, sizeof(*sorted), cmp_url);
	for (size_t i = 1; i < w->n; i++)
		if (!strcmp(sorted[i - 1], sorted[i])) {
			bfs_seterr(errmsg, "wids index: shard %.200s is listed twice", sorted[i]);
			free(sorted);
			return -EINVAL;
		}
	free(sorted);
	return 0;
}

int bfs_wids_parse(const char *text, size_t len, const char *index_url,
		   bfs_wids **out, char *errmsg)
{
	char why[256], base[4096], folder[4096];
	const bfs_jr *kind, *ver, *ds;
	bfs_jr *doc = NULL;
	bfs_wids *w;
	size_t cap = 0;
	int err;

	*out = NULL;
	if (!path_start(index_url) || folder_of(index_url, folder, sizeof(folder))) {
		bfs_seterr(errmsg, "wids index: %.200s is not an absolute URL", index_url);
		return -EINVAL;
	}
	if ((err = bfs_jr_parse(text, len, &doc, why, sizeof(why)))) {
		bfs_seterr(errmsg, "wids index: not JSON: %s", why);
		return err;
	}
	if (!(w = calloc(1, sizeof(*w)))) {
		bfs_jr_free(doc);
		return -ENOMEM;
	}
	err = -EINVAL;
	kind = bfs_jr_get(doc, "__kind__");
	ver = bfs_jr_get(doc, "wids_version");
	if (doc->type != BFS_JR_OBJECT) {
		bfs_seterr(errmsg, "wids index: not a JSON object");
		goto fail;
	}
	if (kind && (kind->type != BFS_JR_STRING || strcmp(kind->str, KIND))) {
		bfs_seterr(errmsg, "wids index: \"__kind__\" is %.100s, not \"%s\"",
			   kind->type == BFS_JR_STRING ? kind->str : "not a string", KIND);
		goto fail;
	}
	if (!ver || ver->type != BFS_JR_NUMBER || ver->number != 1) {
		bfs_seterr(errmsg, "wids index: \"wids_version\" is %s, not 1",
			   ver ? "another" : "missing");
		goto fail;
	}
	{
		const char *b = bfs_jr_str(bfs_jr_get(doc, "base"), NULL);

		if (b ? resolve(folder, b, base, sizeof(base)) : (snprintf(base, sizeof(base), "%s", folder), 0)) {
			bfs_seterr(errmsg, "wids index: \"base\" %.200s does not resolve", b);
			goto fail;
		}
	}
	if (bfs_jr_get(doc, "shardlist") &&
	    (err = add_list(w, &cap, bfs_jr_get(doc, "shardlist"), base, errmsg)))
		goto fail;
	err = -EINVAL;
	ds = bfs_jr_get(doc, "datasets");
	for (size_t i = 0; ds && ds->type == BFS_JR_ARRAY && i < ds->n; i++) {
		const bfs_jr *c = bfs_jr_at(ds, i);
		const char *b = bfs_jr_str(bfs_jr_get(c, "base"), NULL);
		char sub[4096];

		if (bfs_jr_get(c, "source_url")) {
			bfs_seterr(errmsg, "wids index: dataset %zu names another index "
				   "(\"source_url\"), which batchfs does not fetch: list its "
				   "shards in this one", i);
			goto fail;
		}
		if (b ? resolve(base, b, sub, sizeof(sub)) : (snprintf(sub, sizeof(sub), "%s", base), 0)) {
			bfs_seterr(errmsg, "wids index: dataset %zu's \"base\" does not resolve", i);
			goto fail;
		}
		if ((err = add_list(w, &cap, bfs_jr_get(c, "shardlist"), sub, errmsg)))
			goto fail;
		err = -EINVAL;
	}
	if (!w->n) {
		bfs_seterr(errmsg, "wids index: no shards in it");
		goto fail;
	}
	if ((err = name_shards(w, errmsg)))
		goto fail;
	if (bfs_jr_str(bfs_jr_get(doc, "name"), NULL) &&
	    !(w->name = strdup(bfs_jr_str(bfs_jr_get(doc, "name"), NULL)))) {
		err = -ENOMEM;
		goto fail;
	}
	bfs_jr_free(doc);
	*out = w;
	return 0;
fail:
	bfs_jr_free(doc);
	bfs_wids_free(w);
	return err;
}

int bfs_wids_fetch(const char *index_url, const bfs_storage_opts *o,
		   bfs_wids **out, char *errmsg)
{
	bfs_storage_opts so = *o;
	bfs_storage_object *objs = NULL;
	bfs_storage *st = NULL;
	char msg[BFS_ERRMSG_MAX] = "";
	size_t n = 0;
	char *text = NULL;
	int err;

	*out = NULL;
	so.urls = NULL;
	so.sizes = NULL;
	so.nurls = 0;
	/* the index alone, as a source of one URL: HEAD, then a GET with
	 * If-Match its ETag */
	if ((err = bfs_storage_open(index_url, &so, &st, msg)) ||
	    (err = bfs_storage_list(st, &objs, &n, msg)))
		goto fail;
	if (n != 1 || objs[0].size > BFS_WIDS_MAX_BYTES) {
		err = -EFBIG;
		snprintf(msg, sizeof(msg), "%.300s: %llu bytes, more than a wids index may "
			 "have (%u)", index_url, n ? (unsigned long long)objs[0].size : 0ull,
			 BFS_WIDS_MAX_BYTES);
		goto fail;
	}
	if (!(text = malloc(objs[0].size + 1))) {
		err = -ENOMEM;
		goto fail;
	}
	if (objs[0].size &&
	    (err = bfs_storage_read(st, &objs[0], 0, text, (size_t)objs[0].size, msg)))
		goto fail;
	text[objs[0].size] = '\0';
	err = bfs_wids_parse(text, (size_t)objs[0].size, index_url, out, errmsg);
	free(text);
	bfs_storage_objects_free(objs, n);
	bfs_storage_close(st);
	return err;
fail:
	if (msg[0])
		bfs_seterr(errmsg, "wids index: %s", msg);
	else
		bfs_seterr(errmsg, "wids index %.300s: %s", index_url, bfs_strerror(err));
	free(text);
	bfs_storage_objects_free(objs, n);
	bfs_storage_close(st);
	return err;
}

const bfs_wids_shard *bfs_wids_find(const bfs_wids *w, const char *name)
{
	for (size_t i = 0; w && i < w->n; i++)
		if (!strcmp(w->v[i].name, name))
			return &w->v[i];
	return NULL;
}

size_t bfs_wids_check(const bfs_wids *w, const char *const *names,
		      const uint64_t *counts, size_t n, char *note, size_t cap)
{
	size_t bad = 0;

	note[0] = '\0';
	for (size_t i = 0; i < w->n; i++) {
		uint64_t have = 0;

		for (size_t k = 0; k < n; k++)
			if (!strcmp(names[k], w->v[i].name)) {
				have = counts[k];
				break;
			}
		if (have == w->v[i].nsamples)
			continue;
		if (!bad++)
			snprintf(note, cap, "%.200s holds %llu samples, the wids index "
				 "says %llu", w->v[i].name, (unsigned long long)have,
				 (unsigned long long)w->v[i].nsamples);
	}
	if (bad > 1) {
		size_t l = strlen(note);

		snprintf(note + l, cap - l, "; %zu shards disagree", bad);
	}
	return bad;
}
