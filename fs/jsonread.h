/*
 * jsonread.h - a small JSON reader for the files a mount shows
 * (stats.json, dataset.json), so `batchfs status` can read them: the
 * whole text parsed into a tree of values.
 *
 * RFC 8259 syntax, strictly: one value, nothing after it but white space;
 * no comments, no trailing commas, no leading zeros, no NaN.  Nesting is
 * limited to 64 levels.  Strings are decoded to bytes: escapes as JSON
 * says, \uXXXX to UTF-8 (a surrogate pair to one 4-byte character), and a
 * lone low surrogate \udc80..\udcff to the single byte 0x80..0xff, which
 * undoes what fs/json.h writes for a name that is not UTF-8 (so a name
 * comes back as its bytes); any other lone surrogate becomes U+FFFD.  A
 * decoded string may hold a NUL (from \u0000): its length says where it
 * ends.  Numbers are doubles (integers are exact up to 2^53).  Duplicate
 * keys are kept; bfs_jr_get finds the last.
 *
 * Threads: a tree is read-only once made; no global state.
 */
#ifndef BFS_FS_JSONREAD_H
#define BFS_FS_JSONREAD_H

#include <stddef.h>

typedef enum {
	BFS_JR_NULL, BFS_JR_BOOL, BFS_JR_NUMBER, BFS_JR_STRING, BFS_JR_ARRAY,
	BFS_JR_OBJECT,
} bfs_jr_type;

typedef struct bfs_jr bfs_jr;
struct bfs_jr {
	bfs_jr_type type;
	int boolean;          /* BFS_JR_BOOL */
	double number;        /* BFS_JR_NUMBER */
	char *str;            /* BFS_JR_STRING: NUL-terminated bytes */
	size_t len;           /*   and their count */
	char *key;            /* a member of an object: its name, else NULL */
	bfs_jr *items;        /* ARRAY and OBJECT: the elements or members */
	size_t n;
};

/* Parse text[0..len).  0 and *out (free with bfs_jr_free), or -EINVAL
 * with err (cap bytes) naming the byte offset ("offset 17: expected ':'"),
 * or -ENOMEM. */
int bfs_jr_parse(const char *text, size_t len, bfs_jr **out, char *err,
		 size_t cap);
void bfs_jr_free(bfs_jr *v); /* accepts NULL */

/* dir/name read whole (with read(2), as any reader of a mount) and
 * parsed.  0 and *out, or -errno / -EINVAL / -ENOMEM with why (cap bytes)
 * naming the path and what went wrong. */
int bfs_jr_read_file(const char *dir, const char *name, bfs_jr **out,
		     char *why, size_t cap);

/* The last member `key` of object v; NULL when v is NULL, not an object,
 * or has no such member. */
const bfs_jr *bfs_jr_get(const bfs_jr *v, const char *key);
/* Element i of array v, or NULL. */
const bfs_jr *bfs_jr_at(const bfs_jr *v, size_t i);
/* v's number, or dflt when v is NULL or not a number. */
double bfs_jr_num(const bfs_jr *v, double dflt);
/* v's string, or dflt when v is NULL or not a string. */
const char *bfs_jr_str(const bfs_jr *v, const char *dflt);
/* v's boolean, or dflt when v is NULL or not true/false. */
int bfs_jr_bool(const bfs_jr *v, int dflt);

#endif
