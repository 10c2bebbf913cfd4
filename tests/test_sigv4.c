/*
 * test_sigv4.c - Signature Version 4 against published vectors: the AWS
 * SigV4 test suite (service "service", us-east-1, AKIDEXAMPLE, 2015-08-30)
 * and the S3 developer guide's examples (examplebucket, 2013-05-24).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/storage/sigv4.h"

#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SUITE_DATE "20150830T123600Z"
#define SUITE_SCOPE "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "

static const bfs_sigv4_key suite_key = {
	"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1",
	"service",
};

typedef struct {
	const char *name, *method, *path;
	bfs_sigv4_param params[3];
	size_t nparams;
	bfs_sigv4_header headers[6];
	size_t nheaders;
	const char *body;
	const char *creq; /* expected canonical request */
	const char *authz_tail; /* SignedHeaders=..., Signature=... */
} vector;

#define HOST { "Host", "example.amazonaws.com" }
#define DATE { "X-Amz-Date", SUITE_DATE }

static const vector suite[] = {
	{ "get-vanilla", "GET", "/", { { 0 } }, 0, { HOST, DATE }, 2, "",
	  "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
	{ "get-vanilla-empty-query-key", "GET", "/", { { "Param1", "value1" } }, 1,
	  { HOST, DATE }, 2, "",
	  "GET\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb" },
	{ "get-vanilla-query-order-key", "GET", "/",
	  { { "Param1", "value2" }, { "Param1", "Value1" } }, 2, { HOST, DATE }, 2, "",
	  "GET\n/\nParam1=Value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1" },
	{ "get-vanilla-query-order-key-case", "GET", "/",
	  { { "Param2", "value2" }, { "Param1", "value1" } }, 2, { HOST, DATE }, 2, "",
	  "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500" },
	{ "get-vanilla-query-order-value", "GET", "/",
	  { { "Param1", "value2" }, { "Param1", "value1" } }, 2, { HOST, DATE }, 2, "",
	  "GET\n/\nParam1=value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694" },
	{ "get-vanilla-query-unreserved", "GET", "/",
	  { { "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
	      "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" } }, 1,
	  { HOST, DATE }, 2, "",
	  "GET\n/\n-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197" },
	{ "get-vanilla-utf8-query", "GET", "/", { { "\xe1\x88\xb4", "bar" } }, 1,
	  { HOST, DATE }, 2, "",
	  "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04" },
	{ "get-unreserved", "GET",
	  "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
	  { { 0 } }, 0, { HOST, DATE }, 2, "",
	  "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f" },
	{ "get-header-key-duplicate", "GET", "/", { { 0 } }, 0,
	  { HOST, { "My-Header1", "value2" }, { "My-Header1", "value2" },
	    { "My-Header1", "value1" }, DATE }, 5, "",
	  "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;my-header1;x-amz-date, Signature=c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea" },
	{ "get-header-value-order", "GET", "/", { { 0 } }, 0,
	  { HOST, { "My-Header1", "value4" }, { "My-Header1", "value1" },
	    { "My-Header1", "value3" }, { "My-Header1", "value2" }, DATE }, 6, "",
	  "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;my-header1;x-amz-date, Signature=08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01" },
	{ "get-header-value-trim", "GET", "/", { { 0 } }, 0,
	  { HOST, { "My-Header1", " value1" }, { "My-Header2", " \"a   b   c\"" }, DATE }, 4, "",
	  "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;my-header1;my-header2;x-amz-date, Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736" },
	{ "post-vanilla", "POST", "/", { { 0 } }, 0, { HOST, DATE }, 2, "",
	  "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b" },
	{ "post-header-value-case", "POST", "/", { { 0 } }, 0,
	  { HOST, { "My-Header1", "VALUE1" }, DATE }, 3, "",
	  "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:VALUE1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;my-header1;x-amz-date, Signature=cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d" },
	{ "post-vanilla-query", "POST", "/", { { "Param1", "value1" } }, 1,
	  { HOST, DATE }, 2, "",
	  "POST\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" EMPTY_SHA,
	  "SignedHeaders=host;x-amz-date, Signature=28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11" },
};

static void sign_vector(const vector *v)
{
	char authz[BFS_SIGV4_AUTH_MAX], creq[4096], sha[65], want[BFS_SIGV4_AUTH_MAX];
	bfs_sigv4_request r = {
		.method = v->method, .path = v->path, .params = v->params,
		.nparams = v->nparams, .headers = v->headers,
		.nheaders = v->nheaders, .payload_sha256 = sha,
		.amz_date = SUITE_DATE,
	};

	bfs_sigv4_sha256_hex(v->body, strlen(v->body), sha);
	assert_int_equal(bfs_sigv4_sign(&suite_key, &r, authz, creq, sizeof(creq)), 0);
	print_message("%s\n", v->name);
	assert_string_equal(creq, v->creq);
	snprintf(want, sizeof(want), SUITE_SCOPE "%s", v->authz_tail);
	assert_string_equal(authz, want);
}

static void test_sigv4_signs_every_vector_of_the_aws_suite(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(suite) / sizeof(suite[0]); i++)
		sign_vector(&suite[i]);
}

/* The S3 developer guide's "GET Object" example: a Range header, the
 * x-amz-content-sha256 header S3 requires. */
static void test_sigv4_signs_the_s3_guides_ranged_get(void **state)
{
	static const bfs_sigv4_key k = {
		"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"us-east-1", "s3",
	};
	const bfs_sigv4_header h[] = {
		{ "Host", "examplebucket.s3.amazonaws.com" },
		{ "Range", "bytes=0-9" },
		{ "x-amz-content-sha256", EMPTY_SHA },
		{ "x-amz-date", "20130524T000000Z" },
	};
	bfs_sigv4_request r = {
		.method = "GET", .path = "/test.txt", .headers = h, .nheaders = 4,
		.payload_sha256 = EMPTY_SHA, .amz_date = "20130524T000000Z",
	};
	char authz[BFS_SIGV4_AUTH_MAX];

	(void)state;
	assert_int_equal(bfs_sigv4_sign(&k, &r, authz, NULL, 0), 0);
	assert_string_equal(authz,
		"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
		"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
		"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

/* The guide's "GET Bucket (List Objects)" example: two query parameters. */
static void test_sigv4_signs_the_s3_guides_listing(void **state)
{
	static const bfs_sigv4_key k = {
		"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"us-east-1", "s3",
	};
	const bfs_sigv4_header h[] = {
		{ "Host", "examplebucket.s3.amazonaws.com" },
		{ "x-amz-content-sha256", EMPTY_SHA },
		{ "x-amz-date", "20130524T000000Z" },
	};
	const bfs_sigv4_param p[] = { { "prefix", "J" }, { "max-keys", "2" } };
	bfs_sigv4_request r = {
		.method = "GET", .path = "/", .params = p, .nparams = 2,
		.headers = h, .nheaders = 3, .payload_sha256 = EMPTY_SHA,
		.amz_date = "20130524T000000Z",
	};
	char authz[BFS_SIGV4_AUTH_MAX];

	(void)state;
	assert_int_equal(bfs_sigv4_sign(&k, &r, authz, NULL, 0), 0);
	assert_string_equal(authz,
		"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
		"SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
		"Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

/* Object keys with spaces, '+', '%', '~' and UTF-8 are encoded once, '/'
 * kept: the forms curl 7.88 got wrong. */
static void test_sigv4_encodes_keys_once_keeping_slashes(void **state)
{
	char out[128];
	const char *key = "/b/a b+c%d~e/\xc3\xa9";

	(void)state;
	assert_int_equal(bfs_sigv4_uri_encode(key, strlen(key), 1, out, sizeof(out)), 25);
	assert_string_equal(out, "/b/a%20b%2Bc%25d~e/%C3%A9");
	assert_int_equal(bfs_sigv4_uri_encode("a/b=c&", 6, 0, out, sizeof(out)), 12);
	assert_string_equal(out, "a%2Fb%3Dc%26");
	assert_int_equal(bfs_sigv4_uri_encode("abc", 3, 0, out, 3), -ENAMETOOLONG);
}

static void test_sigv4_refuses_a_malformed_date_and_missing_fields(void **state)
{
	const bfs_sigv4_header h[] = { HOST, DATE };
	bfs_sigv4_request r = {
		.method = "GET", .path = "/", .headers = h, .nheaders = 2,
		.payload_sha256 = EMPTY_SHA, .amz_date = "2015-08-30",
	};
	char authz[BFS_SIGV4_AUTH_MAX];
	bfs_sigv4_key k = suite_key;

	(void)state;
	assert_int_equal(bfs_sigv4_sign(&suite_key, &r, authz, NULL, 0), -EINVAL);
	r.amz_date = SUITE_DATE;
	k.secret_key = NULL;
	assert_int_equal(bfs_sigv4_sign(&k, &r, authz, NULL, 0), -EINVAL);
	assert_int_equal(bfs_sigv4_sign(&suite_key, &r, authz, NULL, 0), 0);
}

/* The Authorization value never holds the secret key. */
static void test_sigv4_output_never_holds_the_secret(void **state)
{
	const bfs_sigv4_header h[] = { HOST, DATE };
	bfs_sigv4_request r = {
		.method = "GET", .path = "/", .headers = h, .nheaders = 2,
		.payload_sha256 = EMPTY_SHA, .amz_date = SUITE_DATE,
	};
	char authz[BFS_SIGV4_AUTH_MAX], creq[1024];

	(void)state;
	assert_int_equal(bfs_sigv4_sign(&suite_key, &r, authz, creq, sizeof(creq)), 0);
	assert_null(strstr(authz, suite_key.secret_key));
	assert_null(strstr(creq, suite_key.secret_key));
	assert_null(strstr(authz, "EXAMPLEKEY"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigv4_signs_every_vector_of_the_aws_suite),
		cmocka_unit_test(test_sigv4_signs_the_s3_guides_ranged_get),
		cmocka_unit_test(test_sigv4_signs_the_s3_guides_listing),
		cmocka_unit_test(test_sigv4_encodes_keys_once_keeping_slashes),
		cmocka_unit_test(test_sigv4_refuses_a_malformed_date_and_missing_fields),
		cmocka_unit_test(test_sigv4_output_never_holds_the_secret),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
