/*
 * badset.h - what the engine knows of bad samples: which source samples
 * failed to decode (and with which code), which ones a worker is trying
 * right now, and for each bad one a hint to the next sample worth trying.
 *
 * It exists so that a bad sample is decoded at most once per mount, and
 * so that finding the replacement of every sample in a run of k bad ones
 * (--on-error skip: the first of i+1, i+2, ... that decodes) costs O(k)
 * in total instead of O(k^2): bfs_badset_next() follows the hints and
 * shortens them as it goes (path compression, as in union-find).
 *
 * Memory is proportional to the bad (and pending) samples, not to the
 * source: an open-addressing table of 24-byte entries kept at most 3/4
 * full, so a million bad samples cost 24..48 MB.  Good samples are never
 * stored.
 *
 * Threads: none of its own; the caller serializes every call (the engine
 * holds e->lock).
 */
#ifndef BFS_BADSET_H
#define BFS_BADSET_H

#include <stddef.h>
#include <stdint.h>

typedef struct bfs_badset bfs_badset;

typedef enum {
	BFS_SAMPLE_UNKNOWN = 0, /* never failed (or never tried) */
	BFS_SAMPLE_PENDING = 1, /* claimed: a worker is trying it now */
	BFS_SAMPLE_BAD = 2,     /* failed; its code is known */
} bfs_sample_state;

/* A set over the samples 0 .. n-1 (n >= 1).  0 or -ENOMEM. */
int bfs_badset_create(uint64_t n, bfs_badset **out);
void bfs_badset_destroy(bfs_badset *b); /* accepts NULL */

/* The state of sample i, and its code when BAD (*code may be NULL). */
bfs_sample_state bfs_badset_state(const bfs_badset *b, uint64_t i, int *code);

/* Claim sample i (UNKNOWN -> PENDING).  0; -EEXIST if it is not UNKNOWN;
 * -ENOMEM (nothing changed). */
int bfs_badset_claim(bfs_badset *b, uint64_t i);
/* A claimed sample decoded after all: back to UNKNOWN.  No-op otherwise. */
void bfs_badset_unclaim(bfs_badset *b, uint64_t i);
/* Record that sample i failed with code (< 0), from UNKNOWN or PENDING.
 * Returns 1 if i was not BAD before, 0 if it was (the first code stays),
 * -ENOMEM (nothing changed). */
int bfs_badset_mark_bad(bfs_badset *b, uint64_t i, int code);

/* The first sample after i, in the order i+1, i+2, ..., n-1, 0, 1, ...,
 * that is not BAD (it may be PENDING).  Returns i itself when every other
 * sample is BAD.  Shortens the hints it followed, so a run of k bad
 * samples is walked in O(k) over all calls. */
uint64_t bfs_badset_next(bfs_badset *b, uint64_t i);

/* Samples in state BAD. */
uint64_t bfs_badset_count(const bfs_badset *b);

#endif
