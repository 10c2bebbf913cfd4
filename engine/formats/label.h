/*
 * label.h - what happens to a label between the data and the batch:
 * --label-offset is added, and a sum that int64 cannot hold is refused;
 * and the label read from the text of a WebDataset member (.cls and .txt
 * hold a decimal, .json an object with the label under a key).
 *
 * Labels come from the data (an int64 feature of an Example, a tar .cls, a
 * class index), so whether label + offset overflows is known only per
 * sample; the offset alone cannot be refused at mount time.
 */
#ifndef BFS_LABEL_H
#define BFS_LABEL_H

#include <stddef.h>
#include <stdint.h>

/*
 * *label += offset, unless the sum overflows int64: then *label is left
 * alone and -ERANGE is returned with errmsg (BFS_ERRMSG_MAX bytes, may be
 * NULL) naming both, e.g. "label 3 + --label-offset 9223372036854775807
 * overflows int64".  The caller adds which shard and record.  Returns 0 or
 * -ERANGE.  Pure function: any thread.
 */
int bfs_label_add_offset(int64_t *label, int64_t offset, char *errmsg);

/*
 * The label a WebDataset .cls or .txt member holds: an ASCII decimal
 * int64, an optional sign, whitespace (space, \t, \n, \r, \v, \f) before
 * and after allowed, nothing else.  text[0..n) need not be NUL-terminated.
 * Returns 0 and *label, or -1 (nothing set).  Pure function: any thread.
 */
int bfs_label_parse_decimal(const uint8_t *text, size_t n, int64_t *label);

/* Nesting deeper than this makes a .json member malformed. */
#define BFS_LABEL_JSON_DEPTH 64

/*
 * The label in a WebDataset .json member: the value of the top-level
 * member `key` of the one JSON object (RFC 8259) that json[0..n) holds.
 * The key is compared after its escapes are decoded ("a\/b" is "a/b");
 * when it appears more than once the last one counts, as with Python's
 * json module.  The value must be an integer: a JSON number with no
 * fraction and no exponent, within int64 ("3", "-1"; not "3.0", "\"3\"").
 * Returns 0 and *label, or (nothing set):
 *   BFS_E_NOKEY    the object has no member `key`;
 *   BFS_E_CORRUPT  json is not one JSON object (bad syntax, anything but
 *                  whitespace after it, nesting deeper than
 *                  BFS_LABEL_JSON_DEPTH), or the value is not an integer;
 *   -EINVAL        json (with n > 0), key or label is NULL.
 * errmsg (BFS_ERRMSG_MAX bytes, may be NULL) says which, naming `key` but
 * never quoting the member's bytes: "has no member \"label\"", "is not
 * JSON (byte 17)", "member \"label\" is not an integer".  The caller
 * names the member.  Never allocates; recursion is bounded by the depth
 * limit.  Pure function: any thread.
 */
int bfs_label_json(const uint8_t *json, size_t n, const char *key,
		   int64_t *label, char *errmsg);

#endif
