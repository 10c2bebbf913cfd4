/*
 * utf8.h - strict UTF-8 decoding, one sequence at a time, for the writers
 * of text that carries names from the shard directory (fs/json, fs/log).
 *
 * Linux names are bytes, so a shard or class name may hold anything.  This
 * module says only which bytes form valid UTF-8 (RFC 3629): the shortest
 * form of a code point up to U+10FFFF that is not a surrogate.  Overlong
 * forms (C0 80, E0 80 80, ...), surrogates encoded in UTF-8 (ED A0 80 ..
 * ED BF BF), code points over U+10FFFF (F4 90 80 80 and up, F5..FF), lone
 * continuation bytes and sequences cut short are invalid.
 *
 * Pure functions: any thread.
 */
#ifndef BFS_UTF8_H
#define BFS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * The valid UTF-8 sequence at the start of s[0..n): returns its length
 * (1..4) and sets *cp to the code point, or returns 0 when s[0] does not
 * start a valid, complete sequence within n bytes (then *cp is untouched;
 * the caller treats s[0] alone as an invalid byte and goes on with s[1]).
 * n == 0 returns 0.  An ASCII byte, NUL included, is a valid sequence of 1.
 */
size_t bfs_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

#endif
