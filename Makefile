# batchfs - see README.md.  `make` builds build/batchfs, `make test` runs
# every test, `make demo` installs the packages, builds, installs batchfs (as
# root, or into a PREFIX of your own) and shows a mount on sample data.

CC      ?= cc
BUILD   ?= build
SAN     ?=
PKGS    := fuse3 libturbojpeg libjpeg lmdb spng libwebp zlib libcrypto libcurl expat
# webp (dwebp) is the reference the WebP tests compare against; libjpeg's
# own API (libjpeg62-turbo) decodes a RandomResizedCrop's box alone.
DEPS    := libfuse3-dev fuse3 libturbojpeg0-dev libjpeg62-turbo-dev liblmdb-dev \
           libcmocka-dev libspng-dev libwebp-dev webp zlib1g-dev pkg-config attr file \
           libssl-dev libcurl4-openssl-dev libexpat1-dev

CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -pthread -I. \
           -D_FILE_OFFSET_BITS=64 -D_GNU_SOURCE -MMD -MP -Wno-format-truncation
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SAN)
# ASan reports (leaks included) of every test process, the FUSE daemons
# too (a test throws their stderr away with its temp dir), go to
# $(SAN_LOGS), and `make test` fails if any is there.  UBSan stops the
# process at its first report (gcc's runtime writes UBSan reports to
# stderr whatever log_path says), which fails the test that ran it.
# Use a separate BUILD:  make test SAN=address,undefined BUILD=build-san
SAN_LOGS := $(abspath $(BUILD))/san-logs
export ASAN_OPTIONS  ?= log_path=$(SAN_LOGS)/asan:detect_leaks=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
endif

# The core (engine/, cache/) and the tools are compiled without fuse3's
# flags, so a FUSE header there does not even compile; only fs/ gets them.
# `make check-layers` (part of `make test`) also checks every include
# against the layering: engine <- cache <- fs, tools beside fs.
CORE_PKGS  := libturbojpeg libjpeg lmdb spng libwebp zlib libcrypto libcurl expat
CORE_CFLAGS := $(shell pkg-config --cflags $(CORE_PKGS) 2>/dev/null)
FUSE_CFLAGS := $(shell pkg-config --cflags fuse3 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS  += $(CORE_CFLAGS)
LDLIBS  += $(PKG_LIBS) -lm -pthread

# Everything except fs/main.c goes into one archive that tests link.
CORE_SRC := $(wildcard engine/*.c engine/*/*.c cache/*.c tools/*.c)
FS_SRC   := $(filter-out fs/main.c,$(wildcard fs/*.c))
LIB_SRC  := $(CORE_SRC) $(FS_SRC)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libbatchfs.a

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_AUX := $(patsubst tests/tools/%.c,$(BUILD)/tests/%,$(wildcard tests/tools/*.c))

all: $(BUILD)/batchfs
-include tools/gpu/gpu.mk
-include tools/python/python.mk
-include tests/fuzz/fuzz.mk
-include tools/bench.mk
-include tools/package.mk

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# fs/ alone sees FUSE (and the tests, which include fs/ headers)
$(BUILD)/fs/%.o: CFLAGS += $(FUSE_CFLAGS)
$(BUILD)/tests/%: CFLAGS += $(FUSE_CFLAGS)

# The resize kernel must round exactly as TensorFlow's does: no FMA contraction.
$(BUILD)/engine/pixels/resize.o: CFLAGS += -ffp-contract=off
$(BUILD)/engine/pixels/resize_pil.o: CFLAGS += -ffp-contract=off -O3

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/batchfs: $(BUILD)/fs/main.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lcmocka

$(BUILD)/tests/%: tests/tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# A preloaded library that fails chosen allocations (test_budget.sh):
# never built with the sanitizers, whose runtime must come first.
TEST_PRELOAD := $(BUILD)/tests/failmalloc.so
$(TEST_PRELOAD): tests/tools/preload/failmalloc.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -fPIC -shared -o $@ $<

tests: $(BUILD)/batchfs $(TEST_BIN) $(TEST_AUX) $(TEST_PRELOAD)

check-layers: $(LIB_OBJ)
	@BUILD=$(BUILD) bash tests/check_layers.sh

test: tests check-layers
	$(if $(SAN),@rm -rf $(SAN_LOGS) && mkdir -p $(SAN_LOGS) && chmod 1777 $(SAN_LOGS))
	BUILD=$(BUILD) bash tests/run.sh
	$(if $(SAN),@! ls $(SAN_LOGS)/* >/dev/null 2>&1 || { cat $(SAN_LOGS)/*; \
		echo "make test: sanitizer reports above (from $(SAN_LOGS))"; exit 1; })

unit: $(TEST_BIN)
	BUILD=$(BUILD) bash tests/run.sh unit

# Nothing to do (and no apt-get update, no root needed) when dpkg says every
# package is installed already.
deps:
	@if [ "$$(dpkg-query -W -f='$${db:Status-Status}\n' $(DEPS) 2>/dev/null | \
		grep -cx installed)" = "$(words $(DEPS))" ]; then \
		echo "make deps: every package is installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $(DEPS); \
	else \
		echo "make deps: not root; run:"; \
		echo "  sudo apt-get install -y $(DEPS)"; \
	fi

# What only the tests need beyond deps: nginx, curl and openssl (test_https's
# https:// server and its CA; test_s3 uploads with curl), the packaging tools
# (test_packages: tools/package.mk) and the wheel's (auditwheel).  The
# README's test command runs it.
TEST_DEPS := nginx-light curl openssl

test-deps: deps package-deps wheel-deps
	@if [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $(TEST_DEPS); \
	else \
		echo "make test-deps: not root; run:"; \
		echo "  sudo apt-get install -y $(TEST_DEPS)"; \
	fi

# make demo: the packages, the build, then `make install`, so that `batchfs`
# is a command after it: as root into the system PREFIX (/usr/local), and
# by anyone into a PREFIX of their own (make demo PREFIX=$$HOME/.local);
# otherwise it runs build/batchfs and says the command that installs it.
# tools/demo.sh says at its end where `batchfs` is, or how to get it.
DEMO_INSTALL = $(if $(filter /usr /usr/local,$(PREFIX)),$(filter 0,$(shell id -u)),yes)

demo: deps
	$(MAKE) $(BUILD)/batchfs $(BUILD)/tests/mkjpeg
	$(if $(DEMO_INSTALL),$(MAKE) --no-print-directory install DESTDIR=)
	BUILD=$(BUILD) $(if $(DEMO_INSTALL),DEMO_INSTALLED="$(BINDIR)/batchfs") \
		DEMO_PREFIX="$(PREFIX)" bash tools/demo.sh

clean:
	rm -rf $(BUILD)

# ---- install ---------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=]: batchfs, its mount(8) helper
# (mount.batchfs and mount.fuse.batchfs, links to batchfs), the man pages,
# bash completion, and when CUDA built them batchfs-gpu and
# libbatchfs_gpu.so with its header and pkg-config file.  mount(8) looks for
# helpers in /sbin only, so for the system prefixes the helper goes there.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(if $(filter /usr /usr/local,$(PREFIX)),/sbin,$(PREFIX)/sbin)
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL    ?= install
BFS_RELEASE := $(shell sed -n 's/^\#define BFS_VERSION "\(.*\)"/\1/p' engine/version.h)

install: all
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR)
	$(INSTALL) -m 755 $(BUILD)/batchfs $(DESTDIR)$(BINDIR)/batchfs
	ln -sfn $(BINDIR)/batchfs $(DESTDIR)$(SBINDIR)/mount.batchfs
	ln -sfn mount.batchfs $(DESTDIR)$(SBINDIR)/mount.fuse.batchfs
	$(INSTALL) -m 644 docs/man/batchfs.1 $(DESTDIR)$(MANDIR)/man1/batchfs.1
	$(INSTALL) -m 644 docs/man/mount.batchfs.8 $(DESTDIR)$(MANDIR)/man8/mount.batchfs.8
	$(INSTALL) -m 644 docs/completion/batchfs.bash $(DESTDIR)$(BASHCOMPDIR)/batchfs
ifneq ($(NVCC),)
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 755 $(GPU_CLI) $(DESTDIR)$(BINDIR)/batchfs-gpu
	$(INSTALL) -m 644 docs/man/batchfs-gpu.1 $(DESTDIR)$(MANDIR)/man1/batchfs-gpu.1
	$(INSTALL) -m 755 $(GPU_LIB) $(DESTDIR)$(LIBDIR)/$(GPU_SONAME)
	ln -sfn $(GPU_SONAME) $(DESTDIR)$(LIBDIR)/libbatchfs_gpu.so
	$(INSTALL) -m 644 tools/gpu/batchfs_gpu.h $(DESTDIR)$(INCLUDEDIR)/batchfs_gpu.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(BFS_RELEASE)|' \
	    tools/gpu/batchfs_gpu.pc.in >$(DESTDIR)$(PKGCONFIGDIR)/batchfs_gpu.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/batchfs_gpu.pc
	$(if $(DESTDIR),,-ldconfig)
else
	@echo "make install: no CUDA toolkit: batchfs-gpu and libbatchfs_gpu.so are not installed"
endif

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/batchfs $(DESTDIR)$(SBINDIR)/mount.batchfs \
	      $(DESTDIR)$(SBINDIR)/mount.fuse.batchfs \
	      $(DESTDIR)$(MANDIR)/man1/batchfs.1 $(DESTDIR)$(MANDIR)/man8/mount.batchfs.8 \
	      $(DESTDIR)$(BASHCOMPDIR)/batchfs $(DESTDIR)$(BINDIR)/batchfs-gpu \
	      $(DESTDIR)$(MANDIR)/man1/batchfs-gpu.1 \
	      $(DESTDIR)$(LIBDIR)/libbatchfs_gpu.so $(DESTDIR)$(LIBDIR)/libbatchfs_gpu.so.* \
	      $(DESTDIR)$(INCLUDEDIR)/batchfs_gpu.h $(DESTDIR)$(PKGCONFIGDIR)/batchfs_gpu.pc

.PHONY: all tests test unit deps test-deps demo clean check-layers install uninstall
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
