# tools/python/python.mk - the Python package's one build step, included by
# the top Makefile: write batchfs/_version.py from engine/version.h, the one
# place the version is written.  pyproject.toml reads the package version
# from that file, batchfs.__version__ imports it, and libbatchfs_gpu.so
# reports the same BFS_VERSION (bfs_gpu_version).  The file is not tracked.
#
#   make python       (part of `make all`, `make tests`, `make gpu-python`)

PY_VERSION := tools/python/batchfs/_version.py

$(PY_VERSION): engine/version.h tools/python/python.mk
	@v=$$(sed -n 's/^#define BFS_VERSION "\([^"]*\)".*/\1/p' $<); \
	test -n "$$v" || { echo "$<: no BFS_VERSION" >&2; exit 1; }; \
	printf '%s\n%s\n' "# Written by make from engine/version.h: do not edit." \
		"__version__ = \"$$v\"" > $@.tmp && mv $@.tmp $@; \
	echo "python.mk: $@ = $$v"

python: $(PY_VERSION)
all: python
tests: python
gpu-python: python

python-clean:
	rm -f $(PY_VERSION)
clean: python-clean

.PHONY: python python-clean
