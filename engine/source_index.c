/*
 * source_index.c - a shard's index as kept by the index store
 * (bfs_source_opts index_get/index_put): the stored forms of a plain
 * shard's index (BFSIDX03) and of a gzip shard's (BFSGZS02, with its
 * restart points), written after a scan and checked whole before use.
 */
#include "engine/source_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/formats/gzindex.h"

/* A shard's index as stored by opts.index_put: a header, the scan error
 * (if the shard is cut or damaged), one packed entry per record, then its
 * class names (struct index_cls, the label key they were read with, then
 * each distinct (label, name) pair as i64 label, u8 kind, u16 length,
 * bytes).
 * 02: scan errors no longer quote a file's bytes; an 01 index may hold a
 * message that does, so it is scanned again.  03: the class names. */
#define INDEX_MAGIC "BFSIDX03"
struct index_hdr {
	char magic[8];
	uint64_t count;
	uint32_t errlen;
	uint32_t pad;
};
struct index_ent {
	uint64_t offset;
	uint32_t length;
	uint32_t flags;
};

/* Fill shard `name` from a stored index.  1 if it was usable, 0 if not
 * (then nothing was added), or -ENOMEM. */
/* A TFRecord record's payload at offset, length bytes, with its 12-byte
 * header before it and its 4-byte CRC after, inside size bytes. */
static int record_fits(uint64_t offset, uint64_t length, uint64_t size)
{
	return offset >= BFS_TFRECORD_HEADER && offset <= size &&
	       length <= size - offset && size - offset - length >= 4;
}

static int load_tar_index(bfs_source *s, const char *name,
			  const bfs_shard_stamp *st);
static void store_tar_index(bfs_source *s, const char *errmsg);

int bfs__src_index_get(bfs_source *s, const char *name,
		       const bfs_shard_stamp *st, void **blob, size_t *len)
{
	*blob = NULL;
	*len = 0;
	if (s->held_name && !strcmp(s->held_name, name)) {
		if (!s->held_blob || !(*blob = malloc(s->held_len ? s->held_len : 1)))
			return -ENOENT;
		memcpy(*blob, s->held_blob, s->held_len);
		*len = s->held_len;
		return 0;
	}
	if (!s->o.index_get)
		return -ENOENT;
	return s->o.index_get(s->o.index_ctx, s->dir, name, st, blob, len);
}

int bfs__src_load_index(bfs_source *s, const char *name,
			const bfs_shard_stamp *st)
{
	struct index_hdr h;
	void *blob = NULL;
	size_t len = 0, used;
	const struct index_ent *ent;
	const char *err;
	int rc = 0;

	if (s->format == BFS_FORMAT_TAR)
		return load_tar_index(s, name, st);
	if (bfs__src_index_get(s, name, st, &blob, &len) != 0)
		return 0;
	if (len < sizeof(h))
		goto out;
	memcpy(&h, blob, sizeof(h));
	if (memcmp(h.magic, INDEX_MAGIC, 8) != 0 || h.errlen > BFS_ERRMSG_MAX ||
	    h.errlen > len - sizeof(h) ||
	    h.count > (len - sizeof(h) - h.errlen) / sizeof(*ent))
		goto out;
	used = sizeof(h) + h.errlen + h.count * sizeof(*ent);
	err = (const char *)blob + sizeof(h);
	ent = (const struct index_ent *)(err + h.errlen);
	for (uint64_t i = 0; i < h.count; i++) {
		struct index_ent e;

		memcpy(&e, &ent[i], sizeof(e));
		if (!record_fits(e.offset, e.length, st->size))
			goto out; /* an index of another file: scan this one */
	}
	/* the class section first: a mismatch adds nothing */
	if ((rc = bfs__src_load_classes(s, (const uint8_t *)blob + used, len - used)) <= 0)
		goto out;
	if ((rc = bfs__src_add_shard(s, name, st)))
		goto out;
	for (uint64_t i = 0; i < h.count; i++) {
		struct index_ent e;

		memcpy(&e, &ent[i], sizeof(e));
		if ((rc = bfs__src_add_sample(s, e.offset, e.length, -1, e.flags)))
			goto out;
	}
	if (h.errlen) {
		char msg[BFS_ERRMSG_MAX + 1];

		memcpy(msg, err, h.errlen);
		msg[h.errlen] = '\0';
		if ((rc = bfs__src_add_error(s, name, msg)))
			goto out;
	}
	s->index_hits++;
	rc = 1;
out:
	free(blob);
	return rc;
}

/* Store the index of the shard just scanned (the last one added), with
 * its class pairs (s->pairs, deduplicated). */
void bfs__src_store_index(bfs_source *s, const char *errmsg)
{
	const struct bfs_shard *sh = &s->shards[s->nshards - 1];
	size_t elen = errmsg && errmsg[0] ? strlen(errmsg) : 0;
	size_t len = sizeof(struct index_hdr) + elen +
		     sh->count * sizeof(struct index_ent) +
		     bfs__src_classes_section_len(s);
	struct index_hdr h = { .count = sh->count, .errlen = (uint32_t)elen };
	uint8_t *blob, *p;

	if (s->format == BFS_FORMAT_TAR) {
		store_tar_index(s, errmsg);
		return;
	}
	if (!s->o.index_put || strlen(s->label_key) > UINT16_MAX ||
	    !(blob = malloc(len)))
		return;
	memcpy(h.magic, INDEX_MAGIC, 8);
	memcpy(blob, &h, sizeof(h));
	if (elen)
		memcpy(blob + sizeof(h), errmsg, elen);
	p = blob + sizeof(h) + elen;
	for (uint64_t i = 0; i < sh->count; i++) {
		const struct bfs_sample *smp = &s->samples[sh->first + i];
		struct index_ent e = { smp->offset, smp->length, smp->flags };

		memcpy(p, &e, sizeof(e));
		p += sizeof(e);
	}
	bfs__src_classes_section_put(s, p);
	s->o.index_put(s->o.index_ctx, s->dir, sh->name, &sh->stamp, blob,
		       len);
	free(blob);
}

/* ---- gzip shards ------------------------------------------------------ */

/*
 * A gzip shard's stored index: a header, the scan error, the gzip index
 * (gzindex.h), then one entry per sample as the scan reported it: for
 * TFRecord {offset, length, flags} and then the class section (as in a
 * plain shard's index), for tar {offset, length, label, status, name,
 * message}, so that loading replays the scan's callbacks.
 * A tar index depends on where labels come from, which is kept in it
 * (`labels`) and must match.
 */
#define GZS_MAGIC "BFSGZS02"  /* 02: TFRecord class names */
struct gzs_hdr {
	char magic[8];
	uint32_t tar;       /* 1: tar entries */
	uint32_t errlen;
	uint64_t count;
	uint64_t gzlen;
	uint32_t labelslen;
	uint32_t pad;
};
struct gzs_tar_ent {
	uint64_t offset, length;
	int64_t label;
	int32_t status;
	uint32_t namelen, msglen, pad;
};

/* Where tar labels come from, as stored with a tar index. */
static void labels_of(const bfs_source *s, char *out, size_t cap)
{
	snprintf(out, cap, "%s:%s", !s->label_key[0] ? "none"
		 : s->label_key_given ? "json" : "cls,txt",
		 s->label_key_given ? s->label_key : "");
}

/* ---- tar entries, as both tar forms keep them ---------------------------- */

/* The bytes of shard sh's tar entries. */
static size_t tar_entries_len(const bfs_source *s, const struct bfs_shard *sh)
{
	size_t len = 0;

	for (uint64_t i = 0; i < sh->count; i++) {
		uint64_t k = sh->first + i;
		const struct bad_sample *b = bfs__src_find_bad(s, k);

		len += sizeof(struct gzs_tar_ent) + strlen(s->pool + s->names[k]) +
		       (b ? strlen(b->msg) : 0);
	}
	return len;
}

/* Write shard sh's tar entries at p; returns the end. */
static uint8_t *tar_entries_put(const bfs_source *s, const struct bfs_shard *sh,
				uint8_t *p)
{
	for (uint64_t i = 0; i < sh->count; i++) {
		uint64_t k = sh->first + i;
		const struct bfs_sample *smp = &s->samples[k];
		const struct bad_sample *b = bfs__src_find_bad(s, k);
		const char *name = s->pool + s->names[k];
		struct gzs_tar_ent e = { smp->offset, smp->length, smp->label,
					 b ? b->code : 0, (uint32_t)strlen(name),
					 b ? (uint32_t)strlen(b->msg) : 0, 0 };

		memcpy(p, &e, sizeof(e));
		p += sizeof(e);
		memcpy(p, name, e.namelen);
		p += e.namelen;
		if (b)
			memcpy(p, b->msg, e.msglen);
		p += e.msglen;
	}
	return p;
}

/* Check count tar entries at p[0..end), their members inside size bytes:
 * where they end, or NULL when one does not hold. */
static const uint8_t *tar_entries_check(const uint8_t *p, const uint8_t *end,
					uint64_t count, uint64_t size)
{
	for (uint64_t i = 0; i < count; i++) {
		struct gzs_tar_ent e;

		if ((size_t)(end - p) < sizeof(e))
			return NULL;
		memcpy(&e, p, sizeof(e));
		p += sizeof(e);
		if (e.namelen > (size_t)(end - p) ||
		    e.msglen > (size_t)(end - p) - e.namelen ||
		    e.msglen >= BFS_ERRMSG_MAX || e.namelen >= (1u << 20) ||
		    e.status > 0 || /* a code is 0 or negative */
		    e.offset > size || e.length > size - e.offset)
			return NULL;
		p += e.namelen + e.msglen;
	}
	return p;
}

/* Add count checked tar entries at p to the last shard, as its scan would
 * have.  0 or -ENOMEM. */
static int tar_entries_load(bfs_source *s, const uint8_t *p, uint64_t count)
{
	for (uint64_t i = 0; i < count; i++) {
		struct gzs_tar_ent e;
		bfs_tar_sample t = { 0 };
		char *nm, msg[BFS_ERRMSG_MAX];
		int rc;

		memcpy(&e, p, sizeof(e));
		p += sizeof(e);
		if (!(nm = strndup((const char *)p, e.namelen)))
			return -ENOMEM;
		p += e.namelen;
		memcpy(msg, p, e.msglen);
		msg[e.msglen] = '\0';
		p += e.msglen;
		t.offset = e.offset;
		t.length = e.length;
		t.label = e.label;
		t.name = nm;
		t.status = e.status;
		t.msg = msg;
		rc = bfs__src_on_tar_sample(s, &t);
		free(nm);
		if (rc)
			return rc;
	}
	return 0;
}

void bfs__src_store_gz_index(bfs_source *s, const char *errmsg)
{
	const struct bfs_shard *sh = &s->shards[s->nshards - 1];
	int tar = s->format == BFS_FORMAT_TAR;
	size_t elen = errmsg && errmsg[0] ? strlen(errmsg) : 0, len, gzlen;
	struct gzs_hdr h = { .tar = (uint32_t)tar, .errlen = (uint32_t)elen,
			     .count = sh->count };
	char labels[BFS_ERRMSG_MAX];
	uint8_t *blob, *p;
	void *gzb;

	if (!s->o.index_put || strlen(s->label_key) > UINT16_MAX ||
	    bfs_gzindex_save(sh->gz, &gzb, &gzlen))
		return;
	labels_of(s, labels, sizeof(labels));
	h.labelslen = tar ? (uint32_t)strlen(labels) : 0;
	h.gzlen = gzlen;
	len = sizeof(h) + elen + h.labelslen + gzlen +
	      (tar ? tar_entries_len(s, sh)
		   : sh->count * sizeof(struct index_ent) + bfs__src_classes_section_len(s));
	if (!(blob = malloc(len))) {
		free(gzb);
		return;
	}
	memcpy(h.magic, GZS_MAGIC, 8);
	memcpy(blob, &h, sizeof(h));
	p = blob + sizeof(h);
	memcpy(p, errmsg ? errmsg : "", elen);
	p += elen;
	memcpy(p, labels, h.labelslen);
	p += h.labelslen;
	memcpy(p, gzb, gzlen);
	p += gzlen;
	free(gzb);
	if (tar) {
		tar_entries_put(s, sh, p);
	} else {
		for (uint64_t i = 0; i < sh->count; i++) {
			const struct bfs_sample *smp = &s->samples[sh->first + i];
			struct index_ent e = { smp->offset, smp->length, smp->flags };

			memcpy(p, &e, sizeof(e));
			p += sizeof(e);
		}
		bfs__src_classes_section_put(s, p);
	}
	s->o.index_put(s->o.index_ctx, s->dir, sh->name, &sh->stamp, blob, len);
	free(blob);
}

/* Fill gzip shard `name` from a stored index: 1 if it was usable, 0 if
 * not (nothing added), or -ENOMEM. */
int bfs__src_load_gz_index(bfs_source *s, const char *name,
			   const bfs_shard_stamp *st)
{
	int tar = s->format == BFS_FORMAT_TAR;
	char labels[BFS_ERRMSG_MAX], text[BFS_ERRMSG_MAX + 1];
	const uint8_t *p, *end;
	struct gzs_hdr h;
	bfs_gzindex *gz = NULL;
	void *blob = NULL;
	size_t len = 0;
	int rc = 0;

	if (bfs__src_index_get(s, name, st, &blob, &len) != 0)
		return 0;
	p = blob;
	end = p + len;
	if (len < sizeof(h))
		goto out;
	memcpy(&h, p, sizeof(h));
	p += sizeof(h);
	labels_of(s, labels, sizeof(labels));
	if (memcmp(h.magic, GZS_MAGIC, 8) || h.tar != (uint32_t)tar ||
	    h.errlen > BFS_ERRMSG_MAX || h.labelslen > BFS_ERRMSG_MAX ||
	    (size_t)(end - p) < (size_t)h.errlen + h.labelslen ||
	    h.gzlen > (size_t)(end - p) - h.errlen - h.labelslen ||
	    (tar && (h.labelslen != strlen(labels) ||
		     memcmp(p + h.errlen, labels, h.labelslen))))
		goto out;
	memcpy(text, p, h.errlen);
	text[h.errlen] = '\0';
	p += h.errlen + h.labelslen;
	if (bfs_gzindex_load(p, (size_t)h.gzlen, st->size, &gz, NULL))
		goto out;
	if (s->max_ratio && bfs_gzindex_size(gz) > BFS_GZ_RATIO_FLOOR &&
	    bfs_gzindex_size(gz) / s->max_ratio > st->size)
		goto out; /* past this mount's limit: indexing again refuses it */
	p += h.gzlen;
	/* the entries must fill the rest exactly, each checked before use */
	{
		const uint8_t *q = p;

		if (tar) {
			if (!(q = tar_entries_check(q, end, h.count, bfs_gzindex_size(gz))))
				goto out;
		} else {
			if (h.count > (size_t)(end - q) / sizeof(struct index_ent))
				goto out;
			for (uint64_t i = 0; i < h.count; i++) {
				struct index_ent e;

				memcpy(&e, q, sizeof(e));
				q += sizeof(e);
				if (!record_fits(e.offset, e.length, bfs_gzindex_size(gz)))
					goto out;
			}
		}
		/* a TFRecord index ends with its class section: a mismatch
		 * (another label key) adds nothing */
		if (tar ? q != end : (rc = bfs__src_load_classes(s, q, (size_t)(end - q))) <= 0)
			goto out;
		rc = 0;
	}
	if ((rc = bfs__src_add_shard(s, name, st)))
		goto out;
	s->shards[s->nshards - 1].gz = gz;
	gz = NULL;
	if (tar && (rc = tar_entries_load(s, p, h.count)))
		goto out;
	for (uint64_t i = 0; !tar && i < h.count; i++) {
		struct index_ent e;

		memcpy(&e, p, sizeof(e));
		p += sizeof(e);
		if ((rc = bfs__src_add_sample(s, e.offset, e.length, -1, e.flags)))
			goto out;
	}
	if (h.errlen && (rc = bfs__src_add_error(s, name, text)))
		goto out;
	s->index_hits++;
	rc = 1;
out:
	bfs_gzindex_free(gz);
	free(blob);
	return rc;
}

/* ---- plain tar shards ----------------------------------------------------- */

/*
 * A plain tar shard's stored index: a header, the scan error, where its
 * labels came from (as a .tar.gz index keeps it, and which must match),
 * then one tar entry per sample as the scan reported it (the form of a
 * .tar.gz index's entries), so that loading replays the scan's callbacks.
 */
#define TAR_MAGIC "BFSTAR01"
struct tar_hdr {
	char magic[8];
	uint32_t errlen;
	uint32_t labelslen;
	uint64_t count;
};

static void store_tar_index(bfs_source *s, const char *errmsg)
{
	const struct bfs_shard *sh = &s->shards[s->nshards - 1];
	size_t elen = errmsg && errmsg[0] ? strlen(errmsg) : 0, len;
	struct tar_hdr h = { .errlen = (uint32_t)elen, .count = sh->count };
	char labels[BFS_ERRMSG_MAX];
	uint8_t *blob, *p;

	if (!s->o.index_put || strlen(s->label_key) > UINT16_MAX)
		return;
	labels_of(s, labels, sizeof(labels));
	h.labelslen = (uint32_t)strlen(labels);
	len = sizeof(h) + elen + h.labelslen + tar_entries_len(s, sh);
	if (!(blob = malloc(len)))
		return;
	memcpy(h.magic, TAR_MAGIC, 8);
	memcpy(blob, &h, sizeof(h));
	p = blob + sizeof(h);
	memcpy(p, errmsg ? errmsg : "", elen);
	p += elen;
	memcpy(p, labels, h.labelslen);
	p += h.labelslen;
	tar_entries_put(s, sh, p);
	s->o.index_put(s->o.index_ctx, s->dir, sh->name, &sh->stamp, blob, len);
	free(blob);
}

static int load_tar_index(bfs_source *s, const char *name,
			  const bfs_shard_stamp *st)
{
	char labels[BFS_ERRMSG_MAX], text[BFS_ERRMSG_MAX + 1];
	const uint8_t *p, *end;
	struct tar_hdr h;
	void *blob = NULL;
	size_t len = 0;
	int rc = 0;

	if (bfs__src_index_get(s, name, st, &blob, &len) != 0)
		return 0;
	p = blob;
	end = p + len;
	if (len < sizeof(h))
		goto out;
	memcpy(&h, p, sizeof(h));
	p += sizeof(h);
	labels_of(s, labels, sizeof(labels));
	if (memcmp(h.magic, TAR_MAGIC, 8) || h.errlen > BFS_ERRMSG_MAX ||
	    h.labelslen != strlen(labels) ||
	    (size_t)(end - p) < (size_t)h.errlen + h.labelslen ||
	    memcmp(p + h.errlen, labels, h.labelslen))
		goto out;
	memcpy(text, p, h.errlen);
	text[h.errlen] = '\0';
	p += h.errlen + h.labelslen;
	if (tar_entries_check(p, end, h.count, st->size) != end)
		goto out; /* the entries must fill the rest exactly */
	if ((rc = bfs__src_add_shard(s, name, st)) ||
	    (rc = tar_entries_load(s, p, h.count)) ||
	    (h.errlen && (rc = bfs__src_add_error(s, name, text))))
		goto out;
	s->index_hits++;
	rc = 1;
out:
	free(blob);
	return rc;
}
