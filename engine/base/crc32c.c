/*
 * crc32c.c - CRC-32C, slicing-by-8 in software and SSE4.2 in hardware (see
 * crc32c.h).
 *
 * DESIGN: both paths work on the raw register (the complement of the CRC).
 * The hardware path runs three independent crc32 streams over adjacent
 * blocks, because the instruction has a latency of 3 cycles but a
 * throughput of 1, and then folds them together with "shift through n zero
 * bytes" tables (Mark Adler's method, crc32c.c on Stack Overflow): the
 * register is linear over GF(2), so reg(A||B) = zeros_|B|(reg(A)) ^ reg0(B).
 * All tables are filled once under pthread_once and are read-only after.
 */
#include "engine/base/crc32c.h"

#include <pthread.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "crc32c.c: the 8-byte paths assume a little-endian host"
#endif

#define POLY 0x82f63b78u /* reflected Castagnoli */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t table[8][256];         /* slicing-by-8 */
static uint32_t zeros_long[4][256];    /* shift through LONG_BLOCK zeros */
static uint32_t zeros_short[4][256];   /* shift through SHORT_BLOCK zeros */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* Run the raw register through n zero bytes, a byte at a time. */
static uint32_t shift_slow(uint32_t reg, size_t n)
{
	while (n--)
		reg = table[0][reg & 0xff] ^ (reg >> 8);
	return reg;
}

/* zeros[k][b] = operator applied to b << 8k; the operator is linear, so it
 * is the XOR of its values on the set bits. */
static void fill_zeros(uint32_t zeros[4][256], size_t n)
{
	uint32_t basis[32];
	int i, k, b;

	for (i = 0; i < 32; i++)
		basis[i] = shift_slow(1u << i, n);
	for (k = 0; k < 4; k++)
		for (b = 0; b < 256; b++) {
			uint32_t v = 0;

			for (i = 0; i < 8; i++)
				if (b & (1 << i))
					v ^= basis[8 * k + i];
			zeros[k][b] = v;
		}
}

static void init_tables(void)
{
	uint32_t c;
	int n, k;

	for (n = 0; n < 256; n++) {
		c = (uint32_t)n;
		for (k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][n] = c;
	}
	for (n = 0; n < 256; n++) {
		c = table[0][n];
		for (k = 1; k < 8; k++) {
			c = table[0][c & 0xff] ^ (c >> 8);
			table[k][n] = c;
		}
	}
	fill_zeros(zeros_long, LONG_BLOCK);
	fill_zeros(zeros_short, SHORT_BLOCK);
}

static inline void init(void)
{
	pthread_once(&tables_once, init_tables);
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8); /* one unaligned load; little-endian hosts only */
	return v;
}

static uint32_t sw_raw(uint32_t reg, const unsigned char *p, size_t len)
{
	while (len && ((uintptr_t)p & 7)) {
		reg = table[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
		len--;
	}
	while (len >= 8) {
		uint64_t w = load64(p) ^ reg;

		reg = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^
		      table[5][(w >> 16) & 0xff] ^ table[4][(w >> 24) & 0xff] ^
		      table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
		      table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		reg = table[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
	return reg;
}

uint32_t bfs_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	init();
	return ~sw_raw(~crc, buf, len);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

static inline uint32_t shift(const uint32_t zeros[4][256], uint32_t reg)
{
	return zeros[0][reg & 0xff] ^ zeros[1][(reg >> 8) & 0xff] ^
	       zeros[2][(reg >> 16) & 0xff] ^ zeros[3][reg >> 24];
}

/* Three streams over blocks of `block` bytes while 3 blocks remain. */
#define HW_TRIPLE(reg, p, len, block, zeros)                                 \
	while ((len) >= 3 * (block)) {                                       \
		uint64_t r0 = (reg), r1 = 0, r2 = 0;                         \
		const unsigned char *end = (p) + (block);                    \
		do {                                                         \
			r0 = __builtin_ia32_crc32di(r0, load64(p));          \
			r1 = __builtin_ia32_crc32di(r1, load64(p + (block)));\
			r2 = __builtin_ia32_crc32di(r2,                      \
					load64(p + 2 * (block)));            \
			p += 8;                                              \
		} while (p < end);                                           \
		(reg) = shift(zeros, (uint32_t)r0) ^ (uint32_t)r1;           \
		(reg) = shift(zeros, reg) ^ (uint32_t)r2;                    \
		p += 2 * (block);                                            \
		(len) -= 3 * (block);                                        \
	}

__attribute__((target("sse4.2")))
static uint32_t hw_raw(uint32_t reg, const unsigned char *p, size_t len)
{
	uint64_t r;

	while (len && ((uintptr_t)p & 7)) {
		reg = __builtin_ia32_crc32qi(reg, *p++);
		len--;
	}
	HW_TRIPLE(reg, p, len, LONG_BLOCK, zeros_long);
	HW_TRIPLE(reg, p, len, SHORT_BLOCK, zeros_short);
	r = reg;
	while (len >= 8) {
		r = __builtin_ia32_crc32di(r, load64(p));
		p += 8;
		len -= 8;
	}
	reg = (uint32_t)r;
	while (len--)
		reg = __builtin_ia32_crc32qi(reg, *p++);
	return reg;
}

static int hw_state; /* 0 unknown, 1 yes, 2 no; a benign race: all
		      * threads compute the same value */

int bfs_crc32c_hw_available(void)
{
	int s = __atomic_load_n(&hw_state, __ATOMIC_RELAXED);

	if (!s) {
		__builtin_cpu_init();
		s = __builtin_cpu_supports("sse4.2") ? 1 : 2;
		__atomic_store_n(&hw_state, s, __ATOMIC_RELAXED);
	}
	return s == 1;
}

uint32_t bfs_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	if (!bfs_crc32c_hw_available())
		return bfs_crc32c_sw(crc, buf, len);
	if (len >= 3 * SHORT_BLOCK)
		init(); /* the fold tables */
	return ~hw_raw(~crc, buf, len);
}

uint32_t bfs_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return bfs_crc32c_hw(crc, buf, len);
}

#else /* not x86-64: the table path only */

int bfs_crc32c_hw_available(void)
{
	return 0;
}

uint32_t bfs_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	return bfs_crc32c_sw(crc, buf, len);
}

uint32_t bfs_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return bfs_crc32c_sw(crc, buf, len);
}

#endif
