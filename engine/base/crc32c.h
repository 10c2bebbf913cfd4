/*
 * crc32c.h - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used
 * by TFRecord framing, with the TFRecord "mask".
 *
 * bfs_crc32c() uses the SSE4.2 crc32 instruction when the CPU has it
 * (checked once at run time; three interleaved streams, 8 bytes at a time)
 * and a slicing-by-8 table otherwise.  Both give identical results; both
 * are exported so tests can compare them.  No allocation; tables are built
 * once on first use (pthread_once).  Every function here may be called from
 * any thread at any time.
 */
#ifndef BFS_CRC32C_H
#define BFS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * Extend the CRC-32C `crc` of some earlier bytes by buf[0..len).  Start
 * with crc = 0; chaining is exact: bfs_crc32c(bfs_crc32c(0, a, n), b, m) is
 * the CRC of a followed by b.  bfs_crc32c(0, "123456789", 9) == 0xE3069283.
 * buf may be unaligned; buf may be NULL when len is 0.
 */
uint32_t bfs_crc32c(uint32_t crc, const void *buf, size_t len);

/* The table-driven path, always available. Same contract as bfs_crc32c. */
uint32_t bfs_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* 1 when the CPU has SSE4.2 (and this is an x86-64 build), else 0. */
int bfs_crc32c_hw_available(void);

/* The SSE4.2 path.  Same contract as bfs_crc32c; falls back to the table
 * path when bfs_crc32c_hw_available() is 0, so it is always safe to call. */
uint32_t bfs_crc32c_hw(uint32_t crc, const void *buf, size_t len);

/* TFRecord's masked CRC: rotate right by 15 and add a constant. */
static inline uint32_t bfs_crc32c_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
