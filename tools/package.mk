# tools/package.mk - Debian packages, included by the top Makefile.
#
#   make deb            build/deb/batchfs_VERSION_ARCH.deb (and, when a CUDA
#                       toolkit is found, libbatchfs-gpu2 and
#                       libbatchfs-gpu-dev), with dpkg-buildpackage and
#                       debhelper from debian/, then lintian on them
#   make deb GPU=0      without the GPU packages even where CUDA is
#   make package-deps   what building and testing the packages needs
#                       (.ci/run runs it): debhelper, dpkg-dev, fakeroot,
#                       lintian, debootstrap
#
# dpkg-buildpackage writes its results next to the source tree, so it runs
# in a copy of the tree under build/deb (the files git knows, or without
# git everything but the build folders); the checkout is left as it was.
# The version is engine/version.h's BFS_VERSION; debian/changelog's newest
# entry must say the same (Debian's tools read it from there), which is
# checked first.

DEB_DIR     := $(BUILD)/deb
GPU         ?= 1
DEB_SRC      = $(DEB_DIR)/batchfs-$(BFS_RELEASE)
DEB_PROFILE  = $(if $(and $(NVCC),$(filter-out 0,$(GPU))),pkg.batchfs.cuda)
PKG_DEPS    := debhelper dpkg-dev fakeroot lintian debootstrap

deb:
	@v=$$(dpkg-parsechangelog -l debian/changelog -S Version); \
	test "$$v" = "$(BFS_RELEASE)" || { echo "make deb: debian/changelog is at $$v," \
		"engine/version.h at $(BFS_RELEASE): add a changelog entry (dch -v $(BFS_RELEASE))" >&2; exit 1; }
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_SRC)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git ls-files -co --exclude-standard -z | \
			tar --null -T - -cf - | tar -xf - -C $(DEB_SRC); \
	else \
		tar --exclude='./build*' --exclude=./obj -cf - . | tar -xf - -C $(DEB_SRC); \
	fi
	cd $(DEB_SRC) && dpkg-buildpackage -b -us -uc \
		$(if $(DEB_PROFILE),-P$(DEB_PROFILE)) >../build.log 2>&1 || \
		{ tail -30 ../build.log; echo "make deb: dpkg-buildpackage failed ($(DEB_DIR)/build.log)" >&2; exit 1; }
	rm -rf $(DEB_SRC)
	@ls -1 $(DEB_DIR)/*.deb
	@if command -v lintian >/dev/null; then \
		lintian --info $(DEB_DIR)/*.changes | tee $(DEB_DIR)/lintian.txt; \
		! grep -q '^E:' $(DEB_DIR)/lintian.txt || { echo "make deb: lintian errors above" >&2; exit 1; }; \
	else echo "make deb: no lintian here (make package-deps): packages not checked"; fi

package-deps:
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $(PKG_DEPS); \
	else \
		echo "make package-deps: not root; run:"; \
		echo "  sudo apt-get install -y $(PKG_DEPS)"; \
	fi

.PHONY: deb package-deps
