# tests/fuzz/fuzz.mk - fuzz targets for every parser of outside bytes
# (included by the Makefile).  See docs/RELIABILITY.md.
#
#   make fuzz              build the libFuzzer targets with clang (ASan +
#                          UBSan) into $(FUZZ_BUILD) and run each for
#                          FUZZ_SECONDS (60); fails on any crash
#   make fuzz FUZZ_TARGETS=npy FUZZ_SECONDS=600   one target, longer
#   make fuzz-build        only build them
#   make fuzz-deps         install clang, libFuzzer and valgrind (Debian)
#   make valgrind          the unit tests under valgrind memcheck
#   make known-bugs        reproducers of reported bugs in files we do not
#                          own; fails while one reproduces (not in `make test`)
#
# `make test` replays the committed corpora (tests/fuzz/corpus/) through the
# same targets built with $(CC) and SAN: $(BUILD)/tests/test_fuzz_corpus.

FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= tfrecord example npy decode namespace tar image gzindex sidecar
FUZZ_DEPS    := clang libclang-rt-dev valgrind
FUZZ_CFLAGS  := -g -O1 -std=gnu11 -I. -D_FILE_OFFSET_BITS=64 -D_GNU_SOURCE \
                -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=all -fno-omit-frame-pointer

# The sources each target needs, compiled into it with the fuzzer's flags.
FUZZ_SRC_tfrecord  := engine/formats/tfrecord.c engine/base/crc32c.c engine/base/error.c engine/formats/filekind.c \
                      engine/formats/example.c
FUZZ_SRC_example   := engine/formats/example.c engine/base/error.c
FUZZ_SRC_npy       := engine/base/npy.c engine/base/error.c fs/inspect.c fs/jsonread.c
FUZZ_SRC_decode    := engine/pixels/decode.c engine/base/error.c engine/formats/filekind.c engine/base/crc32c.c
FUZZ_SRC_namespace := fs/namespace.c
FUZZ_SRC_tar       := engine/formats/tar.c engine/base/error.c engine/formats/filekind.c engine/base/crc32c.c \
                      engine/formats/label.c
FUZZ_SRC_image     := engine/pixels/image.c engine/pixels/png.c engine/pixels/webp.c engine/pixels/decode.c \
                      engine/base/error.c engine/formats/filekind.c engine/base/crc32c.c
FUZZ_SRC_gzindex   := engine/formats/gzindex.c engine/base/error.c
# the source reads remote shards through the storage layer (its shard
# cache, and the ETag's hash for a remote shard's stamp): linked whole
FUZZ_SRC_sidecar   := $(wildcard engine/source*.c engine/formats/*.c engine/storage/*.c) \
                      engine/base/crc32c.c engine/base/error.c
FUZZ_LIBS_decode   := $(shell pkg-config --libs libturbojpeg libjpeg 2>/dev/null || echo -lturbojpeg -ljpeg)
FUZZ_LIBS_decode   += -pthread
FUZZ_LIBS_tfrecord := -pthread
FUZZ_LIBS_tar      := -pthread
FUZZ_LIBS_npy      := -lm
FUZZ_LIBS_image    := $(shell pkg-config --libs libturbojpeg libjpeg spng libwebp zlib 2>/dev/null || echo -lturbojpeg -ljpeg -lspng -lwebp -lz) -pthread
FUZZ_LIBS_gzindex  := $(shell pkg-config --libs zlib 2>/dev/null || echo -lz)
FUZZ_LIBS_sidecar  := $(shell pkg-config --libs zlib libcurl expat libcrypto 2>/dev/null || \
                        echo -lz -lcurl -lexpat -lcrypto) -pthread

define FUZZ_TARGET_RULE
$(FUZZ_BUILD)/fuzz_$(1): tests/fuzz/fuzz_$(1).c tests/fuzz/fuzz.h $(FUZZ_SRC_$(1))
	@mkdir -p $$(dir $$@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $$@ tests/fuzz/fuzz_$(1).c $(FUZZ_SRC_$(1)) $(FUZZ_LIBS_$(1))
endef
$(foreach t,tfrecord example npy decode namespace tar image gzindex sidecar,$(eval $(call FUZZ_TARGET_RULE,$(t))))

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

fuzz: fuzz-build
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-deps:
	@if [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends $(FUZZ_DEPS); \
	else \
		echo "make fuzz-deps: not root; run:"; \
		echo "  sudo apt-get install -y $(FUZZ_DEPS)"; \
	fi

# The corpus replay: the same targets, entry points renamed, $(CC) + SAN.
FUZZ_REPLAY_OBJ := $(patsubst %,$(BUILD)/fuzz-replay/fuzz_%.o,tfrecord example npy decode namespace tar image gzindex sidecar)

$(BUILD)/fuzz-replay/fuzz_%.o: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DFUZZ_REPLAY_NAME=$* -c $< -o $@

$(BUILD)/tests/test_fuzz_corpus: tests/fuzz/test_fuzz_corpus.c $(FUZZ_REPLAY_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(FUZZ_REPLAY_OBJ) $(LIB) $(LDLIBS) -lcmocka

tests: $(BUILD)/tests/test_fuzz_corpus

# valgrind memcheck over every unit test binary (not the FUSE mounts).
valgrind: $(TEST_BIN) $(BUILD)/tests/test_fuzz_corpus
	bash tests/fuzz/valgrind.sh $(BUILD)

$(BUILD)/tests/known_bugs: tests/fuzz/known_bugs.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

known-bugs: $(BUILD)/tests/known_bugs
	$(BUILD)/tests/known_bugs

.PHONY: fuzz fuzz-build fuzz-deps valgrind known-bugs
