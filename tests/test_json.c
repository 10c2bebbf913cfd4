/*
 * test_json.c - the JSON writer: valid UTF-8 names pass through, every
 * byte that is not UTF-8 comes out as \udcXX, and the output is always
 * valid UTF-8 JSON that gives the exact bytes back.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fs/json.h"
#include "fs/utf8.h"

/* The JSON text of the one string s, as bfs_json_str writes it. */
static char *json_of(const char *s)
{
	bfs_json j;
	char *buf;
	size_t len;

	bfs_json_init(&j);
	bfs_json_str(&j, NULL, s);
	assert_int_equal(bfs_json_take(&j, &buf, &len), 0);
	assert_true(len >= 3 && buf[len - 1] == '\n');
	buf[len - 1] = '\0';
	return buf;
}

static void expect_json(const char *in, const char *want)
{
	char *got = json_of(in);

	if (strcmp(got, want) != 0)
		fail_msg("json of \"%s\": got %s, want %s", in, got, want);
	free(got);
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0'
	     : c >= 'a' && c <= 'f' ? c - 'a' + 10
	     : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static size_t put_utf8(uint32_t cp, unsigned char *o)
{
	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xc0 | cp >> 6);
		o[1] = (unsigned char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xe0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (unsigned char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (unsigned char)(0xf0 | cp >> 18);
	o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (unsigned char)(0x80 | (cp & 0x3f));
	return 4;
}

/*
 * A strict reader of one JSON string, as Python's json.loads followed by
 * os.fsencode(): the text must be valid UTF-8 with no raw control
 * character, every escape well-formed, and \udc80..\udcff (a lone low
 * surrogate) gives back the byte 0x80..0xff.  Returns the byte count
 * written to out, or -1 when the text is not such a string.
 */
static long read_back(const char *text, unsigned char *out)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t n = strlen(text), i = 1, o = 0;

	if (n < 2 || p[0] != '"' || p[n - 1] != '"')
		return -1;
	n--;
	while (i < n) {
		uint32_t cp;
		size_t k;

		if (p[i] == '\\') {
			int h[4];

			if (i + 1 >= n)
				return -1;
			if (p[i + 1] == '"' || p[i + 1] == '\\' || p[i + 1] == '/') {
				out[o++] = p[i + 1];
				i += 2;
				continue;
			}
			if (p[i + 1] != 'u' || i + 6 > n)
				return -1;
			cp = 0;
			for (int d = 0; d < 4; d++) {
				if ((h[d] = hexval(p[i + 2 + d])) < 0)
					return -1;
				cp = cp << 4 | (uint32_t)h[d];
			}
			i += 6;
			if (cp >= 0xdc80 && cp <= 0xdcff)
				out[o++] = (unsigned char)(cp - 0xdc00);
			else if (cp >= 0xd800 && cp <= 0xdfff)
				return -1; /* the writer never makes these */
			else
				o += put_utf8(cp, out + o);
			continue;
		}
		if (p[i] < 0x20 || p[i] == '"')
			return -1;
		if (!(k = bfs_utf8_next(p + i, n - i, &cp)))
			return -1; /* raw bytes that are not UTF-8 */
		memcpy(out + o, p + i, k);
		o += k;
		i += k;
	}
	return (long)o;
}

static void expect_round_trip(const unsigned char *in, size_t n)
{
	char s[16];
	unsigned char back[16 * 6];
	char *text;
	long got;

	assert_true(n < sizeof(s));
	memcpy(s, in, n);
	s[n] = '\0';
	text = json_of(s);
	got = read_back(text, back);
	if (got != (long)n || memcmp(back, in, n) != 0) {
		char hex[64] = "";

		for (size_t i = 0; i < n; i++)
			snprintf(hex + 3 * i, sizeof(hex) - 3 * i, " %02x", in[i]);
		fail_msg("bytes%s: JSON %s reads back as %ld bytes", hex, text,
			 got);
	}
	free(text);
}

static void test_json_passes_valid_utf8_names_through_unchanged(void **state)
{
	expect_json("\xe7\x8c\xab", "\"\xe7\x8c\xab\"");             /* 猫 */
	expect_json("donn\xc3\xa9" "es.tfrecord",
		    "\"donn\xc3\xa9" "es.tfrecord\"");
	expect_json("\xc2\xa0", "\"\xc2\xa0\"");           /* U+00A0 */
	expect_json("\xdf\xbf", "\"\xdf\xbf\"");           /* U+07FF */
	expect_json("\xe0\xa0\x80", "\"\xe0\xa0\x80\"");   /* U+0800 */
	expect_json("\xed\x9f\xbf", "\"\xed\x9f\xbf\"");   /* U+D7FF */
	expect_json("\xee\x80\x80", "\"\xee\x80\x80\"");   /* U+E000 */
	expect_json("\xef\xbf\xbf", "\"\xef\xbf\xbf\"");   /* U+FFFF */
	expect_json("\xf0\x90\x80\x80", "\"\xf0\x90\x80\x80\""); /* U+10000 */
	expect_json("\xf0\x9f\x90\x88", "\"\xf0\x9f\x90\x88\""); /* U+1F408 */
	expect_json("\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\""); /* U+10FFFF */
}

static void test_json_escapes_quotes_backslashes_and_control_characters(void **state)
{
	expect_json("a\"b\\c", "\"a\\\"b\\\\c\"");
	expect_json("\x01\t\n\x1f", "\"\\u0001\\u0009\\u000a\\u001f\"");
	expect_json("\x7f", "\"\\u007f\"");
	expect_json("\xc2\x80\xc2\x85\xc2\x9f", "\"\\u0080\\u0085\\u009f\""); /* C1 */
	expect_json("\xe2\x80\xa8\xe2\x80\xa9", "\"\\u2028\\u2029\"");
}

static void test_json_writes_each_byte_that_is_not_utf8_as_a_low_surrogate(void **state)
{
	static const struct { const char *in, *want; } cases[] = {
		/* lone continuation bytes */
		{ "\x80", "\"\\udc80\"" },
		{ "a\xbf" "b", "\"a\\udcbfb\"" },
		/* sequences cut short: at the end, and before ASCII */
		{ "\xc3", "\"\\udcc3\"" },
		{ "\xc3" "A", "\"\\udcc3A\"" },
		{ "\xe7\x8c", "\"\\udce7\\udc8c\"" },
		{ "\xe7\x8c" "x", "\"\\udce7\\udc8cx\"" },
		{ "\xf0\x9f\x90", "\"\\udcf0\\udc9f\\udc90\"" },
		/* a lead byte followed by another lead byte */
		{ "\xc3\xc3\xa9", "\"\\udcc3\xc3\xa9\"" },
		/* overlong forms, two, three and four bytes */
		{ "\xc0\x80", "\"\\udcc0\\udc80\"" },
		{ "\xc1\xbf", "\"\\udcc1\\udcbf\"" },
		{ "\xe0\x80\x80", "\"\\udce0\\udc80\\udc80\"" },
		{ "\xe0\x9f\xbf", "\"\\udce0\\udc9f\\udcbf\"" },
		{ "\xf0\x80\x80\x80", "\"\\udcf0\\udc80\\udc80\\udc80\"" },
		{ "\xf0\x8f\xbf\xbf", "\"\\udcf0\\udc8f\\udcbf\\udcbf\"" },
		/* surrogates encoded in UTF-8 (CESU-8 style) */
		{ "\xed\xa0\x80", "\"\\udced\\udca0\\udc80\"" },
		{ "\xed\xbf\xbf", "\"\\udced\\udcbf\\udcbf\"" },
		{ "\xed\xa0\xbd\xed\xb0\x88",
		  "\"\\udced\\udca0\\udcbd\\udced\\udcb0\\udc88\"" },
		/* over U+10FFFF, and bytes that never start a sequence */
		{ "\xf4\x90\x80\x80", "\"\\udcf4\\udc90\\udc80\\udc80\"" },
		{ "\xf5\x80\x80\x80", "\"\\udcf5\\udc80\\udc80\\udc80\"" },
		{ "\xf8\x88\x80\x80\x80", "\"\\udcf8\\udc88\\udc80\\udc80\\udc80\"" },
		{ "\xfe\xff", "\"\\udcfe\\udcff\"" },
		/* an invalid byte between valid characters */
		{ "\xe7\x8c\xab\xff\xe7\x8c\xab", "\"\xe7\x8c\xab\\udcff\xe7\x8c\xab\"" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_json(cases[i].in, cases[i].want);
}

static void test_json_keys_are_escaped_like_values(void **state)
{
	bfs_json j;
	char *buf;
	size_t len;

	bfs_json_init(&j);
	bfs_json_open(&j, NULL, '{');
	bfs_json_u64(&j, "\xe7\x8c\xab\xff", 1);
	bfs_json_close(&j, '}');
	assert_int_equal(bfs_json_take(&j, &buf, &len), 0);
	assert_string_equal(buf, "{\n  \"\xe7\x8c\xab\\udcff\": 1\n}\n");
	free(buf);
}

/* Every string of one or two bytes, and every three- and four-byte string
 * made of a lead byte and continuation-range edges: the text is valid
 * UTF-8 JSON and reads back to the same bytes. */
static void test_json_any_bytes_read_back_exactly(void **state)
{
	static const unsigned char tails[] = { 0x00, 0x41, 0x7f, 0x80, 0x8f,
					       0x90, 0x9f, 0xa0, 0xbf, 0xc0,
					       0xc3, 0xe7, 0xf0, 0xff };
	const size_t nt = sizeof(tails);
	unsigned char b[4];

	for (unsigned a = 1; a < 256; a++) {
		b[0] = (unsigned char)a;
		expect_round_trip(b, 1);
		for (unsigned c = 1; c < 256; c++) {
			b[1] = (unsigned char)c;
			expect_round_trip(b, 2);
		}
	}
	for (unsigned a = 0xc0; a < 256; a++)
		for (size_t x = 0; x < nt; x++)
			for (size_t y = 0; y < nt; y++)
				for (size_t z = 0; z < nt; z++) {
					size_t n = 1;

					b[0] = (unsigned char)a;
					if (!tails[x])
						continue;
					b[n++] = tails[x];
					if (tails[y]) {
						b[n++] = tails[y];
						if (tails[z])
							b[n++] = tails[z];
					}
					expect_round_trip(b, n);
				}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_passes_valid_utf8_names_through_unchanged),
		cmocka_unit_test(test_json_escapes_quotes_backslashes_and_control_characters),
		cmocka_unit_test(test_json_writes_each_byte_that_is_not_utf8_as_a_low_surrogate),
		cmocka_unit_test(test_json_keys_are_escaped_like_values),
		cmocka_unit_test(test_json_any_bytes_read_back_exactly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
