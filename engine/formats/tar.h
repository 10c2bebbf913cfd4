/*
 * tar.h - WebDataset tar shards: index the samples of a tar archive from its
 * 512-byte member headers, bounds-checked, without reading image data.
 *
 * A WebDataset shard is a plain tar whose members are grouped into samples
 * by KEY, WebDataset's rule (webdataset.tariterators.base_plus_ext): KEY is
 * the member path up to the first '.' of its last path component, and the
 * rest is the extension; "train/n01440764_1.jpg" has KEY
 * "train/n01440764_1" and extension "jpg", "a/b.seg.png" has KEY "a/b" and
 * extension "seg.png".  Names without such a '.' and "__x__" names at the
 * top level are ignored, as WebDataset ignores them.  Members of one sample
 * are adjacent; a KEY that comes back after another KEY starts a new sample.
 *
 * Of each sample batchfs uses the image member (extension jpg, jpeg, png,
 * webp or gif, any case: WebDataset's image extensions that batchfs
 * decodes, and gif so that a GIF is refused by name; which format an image
 * is comes from its bytes) and one label member (any case):
 *   - by default KEY.cls, or when the sample has none KEY.txt: an ASCII
 *     decimal int64, surrounding whitespace allowed (bfs_label_parse_decimal);
 *   - with bfs_tar_opts.json_key, KEY.json: the integer member of that name
 *     of the JSON object it holds (bfs_label_json); .cls and .txt are then
 *     skipped.
 * Everything else is skipped.
 *
 * Formats read: POSIX ustar (with the prefix field), GNU tar (long names
 * 'L', long link names 'K', base-256 numbers), pax (extended headers 'x'
 * with path=, linkpath= and size=; global headers 'g' are skipped), and
 * v7.  A hard link ('1', which GNU tar writes for a second name of a file
 * already in the archive: size 0 and the first name as its link name) is
 * the member it names, data and all: the last earlier member of exactly
 * that name (itself perhaps a hard link).  Other members that are not
 * regular files ('0', '\0', '7') are skipped: directories, symlinks,
 * devices, FIFOs.  Sparse members never hold a usable image (see
 * BFS_E_FORMAT below).
 *
 * No global state: every function may be called from any thread, on
 * different file descriptors concurrently.
 */
#ifndef BFS_TAR_H
#define BFS_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/reader.h"

#define BFS_TAR_BLOCK 512

/* A .json label member larger than this is a bad label (BFS_E_CORRUPT),
 * never read. */
#define BFS_TAR_MAX_JSON (64u * 1024)

/* A long name ('L'), long link name ('K') or pax header ('x') larger than
 * this is refused with BFS_E_CORRUPT rather than read into memory. */
#define BFS_TAR_MAX_EXT_HEADER (1u << 20)

typedef struct {
	uint64_t offset;        /* file offset of the image member's data
				 * (for a hard link, its target's, which
				 * lies before header_offset) */
	uint64_t length;        /* image bytes (the member's size) */
	int64_t label;          /* the .cls value when status is 0, else -1 */
	const char *key;        /* the sample's KEY, NUL-terminated */
	const char *name;       /* the image member's full path */
	uint64_t member;        /* the image member's index in the archive
				 * (0-based; extension headers 'L', 'K',
				 * 'x' belong to the member after them,
				 * global 'g' ones to none; neither kind is
				 * counted) */
	uint64_t header_offset; /* file offset of that member's header (of
				 * its first extension header, if any) */
	int status;             /* 0, or a bad sample that keeps its slot
				 * and must fail when read:
				 *   BFS_E_NOKEY   no label member in the
				 *                 sample (no .cls nor .txt;
				 *                 with json_key no .json, or
				 *                 a .json without that key;
				 *                 for unlabeled data the
				 *                 caller may accept it);
				 *   BFS_E_CORRUPT the .cls or .txt is not a
				 *                 decimal int64 or is over 256
				 *                 bytes; the .json is not a
				 *                 JSON object, is over
				 *                 BFS_TAR_MAX_JSON, or its
				 *                 value is not an integer;
				 *                 the sample has two image
				 *                 members, or two of the label
				 *                 member used;
				 *                 or its image or label is a
				 *                 hard link to a name no
				 *                 earlier member has
				 *                 ("member b.jpg is a hard
				 *                 link to a.jpg, which is
				 *                 not an earlier member of
				 *                 the archive");
				 *   BFS_E_FORMAT  the image member is a GNU
				 *                 sparse file */
	const char *msg;        /* "" when status is 0, else what is wrong,
				 * e.g. "member n01440764_1.jpg has no .cls" */
} bfs_tar_sample;

/* Called once per sample with an image member, in archive order.  `s` and
 * the strings it points to are valid only during the call.  A nonzero
 * return stops the scan and is returned by it. */
typedef int (*bfs_tar_scan_fn)(void *ctx, const bfs_tar_sample *s);

/*
 * Index the tar shard open on `fd` (any file position; only pread is used)
 * of `file_size` bytes.  Reads member headers, the small .cls members, and
 * long-name, long-link-name and pax headers; image data is never read.  After a member of
 * 16 KiB or more the next header is fetched with one 4 KiB pread (which
 * usually also holds the .cls member after it), otherwise 64 KiB at a time.
 * Every header checksum is verified (unsigned or signed sum, as tar and
 * Python's tarfile accept), every number is range-checked, and every size
 * is checked against file_size before it is used.  Memory is one 64 KiB
 * buffer, the names of the member and the sample in progress, and a long
 * name or pax header (at most BFS_TAR_MAX_EXT_HEADER), whatever the file
 * says; nothing grows with the number of samples -- except in an archive
 * with a hard link: at the first one the scan starts over from the
 * beginning (reading the headers before it twice, and calling fn only
 * once per sample) and keeps the name and data extent of every regular
 * member until it returns, about 50 bytes plus the name each.
 *
 * The scan ends successfully at the first all-zero header block (the
 * end-of-archive marker; what follows it is not looked at) or at a zero
 * tail shorter than a block (a cut marker).  A file that ends anywhere
 * else, even at a member boundary, was cut: the members after the cut may
 * have belonged to the last sample.  An empty file is an archive with no
 * samples.
 *
 * Calls fn(ctx, sample) for every sample that has an image member (a KEY
 * with only .cls/.txt/... members is not a sample).  Returns:
 *   0                the archive ended at its end-of-archive marker;
 *   BFS_E_CORRUPT    a header whose checksum fails, a number field that is
 *                    not octal or base-256 or overflows, a negative size, a
 *                    malformed pax record, an extension header over
 *                    BFS_TAR_MAX_EXT_HEADER, or one not followed by a
 *                    member;
 *   BFS_E_TRUNCATED  the file ends before the end-of-archive marker:
 *                    inside a header, inside a member's data or padding,
 *                    or between members (also for an absurd size field:
 *                    nothing is ever allocated from a size field);
 *   -errno           pread failed; -EIO if the file is shorter than
 *                    file_size says; -ENOMEM; -EINVAL when fn is NULL;
 *   fn's nonzero return value, unchanged.
 * In every error case fn has been called for each sample before the bad
 * header, including the sample in progress when its image member is whole
 * (with BFS_E_NOKEY if its .cls was not reached) -- except after a failed
 * or short read (-errno, -EIO), where the sample in progress is left out,
 * since its image may lie in the part of the file that is gone -- and errmsg
 * (BFS_ERRMSG_MAX bytes, may be NULL) names the member index, the byte
 * offset of its header and what is wrong, e.g. "member 7 at offset 9216:
 * header checksum 0o6543 does not match the computed 0o6552".
 */
int bfs_tar_scan(int fd, uint64_t file_size, bfs_tar_scan_fn fn, void *ctx,
		 char *errmsg);

/* How labels are read (NULL: the defaults). */
typedef struct {
	const char *json_key;   /* NULL: KEY.cls, else KEY.txt; else the label
				 * is this member of KEY.json (--label-key) */
} bfs_tar_opts;

/*
 * The same scan over any byte source (src holds file_size bytes; for a
 * .tar.gz shard its uncompressed bytes, gzindex.h), with label options
 * (opts may be NULL).  bfs_tar_scan(fd, ...) is this with a plain-file
 * reader and NULL opts.  A read that src fails with a message of its own
 * (a damaged gzip stream) ends the scan with that message after the member
 * index and offset.
 */
int bfs_tar_scan_reader(const bfs_reader *src, uint64_t file_size,
			const bfs_tar_opts *opts, bfs_tar_scan_fn fn,
			void *ctx, char *errmsg);

/*
 * Format detection: 1 if `first512` (the first `len` bytes of a file) is a
 * tar header block with a valid checksum, else 0.  Needs len >= 512; an
 * all-zero block (an empty archive) gives 0.  Pure function; any thread.
 */
int bfs_tar_probe(const uint8_t *first512, size_t len);

#endif
