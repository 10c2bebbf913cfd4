/*
 * optparse.h - the numbers of the command line, each read whole: a value
 * that would wrap, carries a sign it may not have, or has anything after
 * the number is refused, never bent into range.  (sscanf's %u reads
 * "4294967297" as 1 and "-4294967295" as 1; strtoull reads "-1" as
 * 2^64-1 and skips leading spaces.)
 *
 * Every function is pure and thread-safe, writes *out only on success and
 * returns 0, -EINVAL (not a number of that form: empty, a sign where none
 * may be, spaces, trailing text) or -ERANGE (a number of that form, out of
 * [min, max] or past what the type holds).  The caller names the option.
 */
#ifndef BFS_FS_OPTPARSE_H
#define BFS_FS_OPTPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/layout.h"

/* Decimal digits only ("0" .. "18446744073709551615"), no sign or space,
 * min <= value <= max. */
int bfs_opt_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* bfs_opt_u64 into an unsigned (max <= UINT_MAX). */
int bfs_opt_uint(const char *s, unsigned min, unsigned max, unsigned *out);

/* Decimal, "0x" hexadecimal or leading-"0" octal as strtoull's base 0
 * reads them, but starting with a digit: 0 .. 2^64-1 (a --shuffle seed). */
int bfs_opt_seed(const char *s, uint64_t *out);

/* An optional '-' or '+', then decimal digits: INT64_MIN .. INT64_MAX,
 * within [min, max]. */
int bfs_opt_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* A size or count: decimal digits, then optionally k/K, m/M, g/G or t/T
 * (binary: 2^10 .. 2^40) and an optional "i" or "B" ("64M", "1GiB",
 * "2GB", "1000").  -ERANGE when the product passes 2^64-1 or is below min. */
int bfs_opt_size(const char *s, uint64_t min, uint64_t *out);

/* "HxW" (or "HXW") or "N" for NxN, each side 1..max_side. */
int bfs_opt_hw(const char *s, int max_side, int *h, int *w);

/* n comma-separated finite numbers, as strtod reads them ("0.08,1",
 * "0.485,0.456,0.406"); no spaces, nothing after the last.  "nan", "inf"
 * and a number too large for a double (1e999) are -ERANGE. */
int bfs_opt_doubles(const char *s, double *v, int n);

/* --resume EPOCH:RUN[+RUN...]: RUN = CONSUMED@WORLD for a run that split
 * by samples, CONSUMED@WORLD/K for one that split by shards with K ranks
 * a node (engine/layout.h), oldest first, at most BFS_LAYOUT_MAX_RUNS;
 * EPOCH 0..99999, CONSUMED 0..2^64-1, WORLD and K 1..2^20 ("3:1024@4/2",
 * "0:96@3+60@2").  Fills *out (on set); -ERANGE also for too many runs. */
int bfs_opt_resume(const char *s, bfs_layout_resume *out);

/* The --resume value of r (the form bfs_opt_resume reads) into buf:
 * its length, or -ENOSPC when cap is short. */
int bfs_opt_resume_format(const bfs_layout_resume *r, char *buf, size_t cap);

#endif
