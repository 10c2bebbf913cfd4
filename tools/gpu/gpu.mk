# tools/gpu/gpu.mk - the GPU companion (issue 5), included by the top
# Makefile.  Builds $(BUILD)/libbatchfs_gpu.so and $(BUILD)/batchfs-gpu when a
# CUDA toolkit is found (CUDA_HOME, else /usr/local/cuda); otherwise says so
# and skips them, and `make` still succeeds.  The CUDA-free unit test of the
# folder/header logic builds either way.
#
#   make gpu          library + CLI (part of `make all`)
#   make gpu-tests    test binaries under $(BUILD)/tests/gpu (part of `tests`)
#   make gpu-python   copy the library next to tools/python/batchfs for pip
#
# The library and CLI are built without SAN (CUDA and ASan do not mix well);
# the unit test honours SAN like the rest of the tree.

CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda))
NVCC      := $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc))
# sm_90 machine code for Hopper (H100/H200) plus compute_90 PTX that newer
# GPUs JIT-compile.  Override for other cards, e.g. GPU_ARCH=-arch=native.
GPU_ARCH  ?= -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90

GPU_DIR   := $(BUILD)/gpu
GPU_LIB   := $(BUILD)/libbatchfs_gpu.so
# The SONAME's number is the library's ABI version (batchfs_gpu.h), which
# changes whenever a caller built against the old one could break.
GPU_ABI   := $(shell sed -n 's/^\#define BFS_GPU_ABI_VERSION \([0-9]*\).*/\1/p' tools/gpu/batchfs_gpu.h)
GPU_SONAME := libbatchfs_gpu.so.$(GPU_ABI)
GPU_CLI   := $(BUILD)/batchfs-gpu
GPU_HDRS  := tools/gpu/batchfs_gpu.h tools/gpu/batchdir.h tools/gpu/convert.h \
             engine/base/npy.h engine/base/error.h engine/version.h
# CUDA-free sources and objects, shared by the library, the CLI, the unit
# test and the host-reference tool.
GPU_CSRC  := tools/gpu/batchdir.c tools/gpu/convert.c tools/gpu/info.c \
             engine/base/npy.c engine/base/error.c
GPU_COBJ  := $(GPU_DIR)/batchdir.o $(GPU_DIR)/convert.o $(GPU_DIR)/info.o \
             $(GPU_DIR)/npy.o $(GPU_DIR)/error.o
GPU_CFLAGS = $(filter-out -fsanitize=%,$(CFLAGS)) -fPIC -fvisibility=hidden
GPU_NVFLAGS = -O3 -std=c++17 -lineinfo $(GPU_ARCH) -I. \
              -Xcompiler -fPIC,-fvisibility=hidden
# tests/run.sh runs every $(BUILD)/tests/test_* binary as a unit test.
GPU_TEST_UNIT := $(BUILD)/tests/test_gpu_batchdir
GPU_TEST_DEV  := $(BUILD)/tests/gpu/test_gpu_device
# What the loader would deliver, computed on the CPU (tests/gpu/hostref.c).
GPU_HOSTREF   := $(BUILD)/tests/gpu/hostref

$(GPU_DIR)/batchdir.o: tools/gpu/batchdir.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -c $< -o $@
$(GPU_DIR)/convert.o: tools/gpu/convert.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -c $< -o $@
$(GPU_DIR)/info.o: tools/gpu/info.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -c $< -o $@
$(GPU_DIR)/npy.o: engine/base/npy.c engine/base/npy.h engine/base/error.h
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -c $< -o $@
$(GPU_DIR)/error.o: engine/base/error.c engine/base/error.h
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -c $< -o $@

# The unit test and the host-reference tool compile the same sources
# themselves so that SAN applies.
$(GPU_TEST_UNIT): tests/gpu/test_batchdir.c $(GPU_CSRC) $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ tests/gpu/test_batchdir.c \
		$(GPU_CSRC) -lcmocka -lm
$(GPU_HOSTREF): tests/gpu/hostref.c $(GPU_CSRC) $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ tests/gpu/hostref.c $(GPU_CSRC)

ifneq ($(NVCC),)

GPU_OBJ := $(GPU_COBJ) $(GPU_DIR)/loader.o $(GPU_DIR)/normalize.o

$(GPU_DIR)/loader.o: tools/gpu/loader.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -I$(CUDA_HOME)/include -c $< -o $@
$(GPU_DIR)/cli.o: tools/gpu/cli.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(GPU_CFLAGS) -I$(CUDA_HOME)/include -c $< -o $@
$(GPU_DIR)/normalize.o: tools/gpu/normalize.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(GPU_NVFLAGS) -c $< -o $@

# CUDA runtime linked statically and hidden: only bfs_gpu_* is exported, so
# the library loads next to PyTorch's own runtime without clashes.
$(GPU_LIB): $(GPU_OBJ) tools/gpu/exports.map tools/gpu/gpu.mk
	$(NVCC) -shared -cudart static -o $@ $(GPU_OBJ) \
		-Xlinker --version-script=tools/gpu/exports.map \
		-Xlinker -soname=$(GPU_SONAME) -lpthread

$(GPU_CLI): $(GPU_DIR)/cli.o $(GPU_OBJ)
	$(NVCC) -cudart static -o $@ $^ -lpthread

$(GPU_TEST_DEV): tests/gpu/test_gpu_device.cu $(GPU_OBJ) $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(GPU_NVFLAGS) -cudart static -o $@ $< $(GPU_OBJ) -lpthread

gpu: $(GPU_LIB) $(GPU_CLI)
gpu-tests: $(GPU_TEST_UNIT) $(GPU_HOSTREF) $(GPU_TEST_DEV) gpu
gpu-python: $(GPU_LIB)
	cp $(GPU_LIB) tools/python/batchfs/

else

gpu:
	@echo "gpu.mk: no CUDA toolkit (set CUDA_HOME or install /usr/local/cuda);" \
	      "skipping libbatchfs_gpu.so and batchfs-gpu"
gpu-tests: $(GPU_TEST_UNIT) $(GPU_HOSTREF) gpu
gpu-python: gpu

endif

all: gpu
tests: gpu-tests

.PHONY: gpu gpu-tests gpu-python
