# tools/bench.mk - `make bench` and `make bench-quick` (tools/bench.py):
# the in-process ceiling, cold epochs through the mount, a consumer, the
# seed tf.data pipeline, memory, scale and FUSE serving, as one table.
# Included by the Makefile; benchmarks are never part of `make test`.

BENCH_PY      ?= python3
BENCH_ARGS    ?=
BENCH_CEILING := $(BUILD)/bench_ceiling
BENCH_SERVE   := $(BUILD)/bench_fuseserve
BENCH_DEPS    := $(BUILD)/batchfs $(BUILD)/tests/mkjpeg $(BENCH_CEILING) \
                 $(BENCH_SERVE)

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

# A bare FUSE server of in-memory files: serving choices without decoding.
$(BENCH_SERVE): tools/bench/fuseserve.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FUSE_CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# The full run (< 15 minutes on 2 cores); rewrites docs/BENCHMARKS.md and
# leaves every raw number in $(BUILD)/bench.json.
bench: $(BENCH_DEPS)
	$(BENCH_PY) tools/bench.py --build $(BUILD) --doc docs/BENCHMARKS.md \
		--json $(BUILD)/bench.json $(BENCH_ARGS)

# Smaller sizes for a fast check (about a minute); leaves docs/ alone.
bench-quick: $(BENCH_DEPS)
	$(BENCH_PY) tools/bench.py --build $(BUILD) --quick \
		--json $(BUILD)/bench-quick.json $(BENCH_ARGS)

.PHONY: bench bench-quick
