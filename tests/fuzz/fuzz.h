/*
 * fuzz.h - what every fuzz target shares: the libFuzzer entry point and a
 * CHECK that aborts (so libFuzzer, and the corpus replay under `make test`,
 * report a broken property as a crash with the input that broke it).
 *
 * Each tests/fuzz/fuzz_<name>.c defines LLVMFuzzerTestOneInput.  Built with
 * clang -fsanitize=fuzzer it is a libFuzzer binary (`make fuzz`); built with
 * -DFUZZ_REPLAY_NAME=<name> the entry point is renamed fuzz_<name>_one and
 * tests/fuzz/test_fuzz_corpus.c replays the committed corpus through it.
 */
#ifndef BFS_FUZZ_H
#define BFS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef FUZZ_REPLAY_NAME
#define FUZZ_CAT2(a, b, c) a##b##c
#define FUZZ_CAT(a, b, c) FUZZ_CAT2(a, b, c)
#define LLVMFuzzerTestOneInput FUZZ_CAT(fuzz_, FUZZ_REPLAY_NAME, _one)
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, \
				__LINE__, #cond);                            \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			abort();                                             \
		}                                                            \
	} while (0)

/* errmsg buffers must come back NUL-terminated within BFS_ERRMSG_MAX. */
#define CHECK_MSG(msg)                                                       \
	CHECK(memchr((msg), '\0', BFS_ERRMSG_MAX) != NULL,                   \
	      "errmsg not terminated")

#endif
