/*
 * utf8.c - strict UTF-8 decoding of one sequence (see utf8.h).
 */
#include "fs/utf8.h"

size_t bfs_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	uint32_t c, min;
	size_t len;

	if (n == 0)
		return 0;
	c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {        /* C0, C1: always overlong */
		len = 2;
		c &= 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		c &= 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) { /* F5..FF: over U+10FFFF */
		len = 4;
		c &= 0x07;
		min = 0x10000;
	} else {
		return 0; /* a continuation byte, C0, C1 or F5..FF */
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}
