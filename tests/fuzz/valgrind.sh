#!/usr/bin/env bash
# Run every unit test binary (BUILD/tests/test_*) under valgrind memcheck,
# failing on any error or definite/indirect/possible leak (of the test
# process itself: children a test forks are not checked).  Called by
# `make valgrind`; BUILD must be a build without SAN.
#   tests/fuzz/valgrind.sh [BUILD]
set -u
cd "$(dirname "$0")/../.."
build=${1:-build}
failed=0
for t in "$build"/tests/test_*; do
	[ -x "$t" ] || continue
	log=$(mktemp)
	valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
		--child-silent-after-fork=yes \
		--errors-for-leak-kinds=definite,indirect,possible \
		--show-leak-kinds=definite,indirect,possible \
		--track-origins=yes --quiet "$t" >"$log" 2>&1
	rc=$?
	errs=$(grep -c '^==[0-9]*== ' "$log")
	if [ "$rc" -eq 0 ]; then
		printf '%-28s ok (%s)\n' "$(basename "$t")" \
			"$(grep -o 'PASSED  \] [0-9]* test' "$log" | tail -1 | grep -o '[0-9]*') tests"
	else
		failed=1
		printf '%-28s FAILED (exit %d, %d valgrind lines)\n' "$(basename "$t")" "$rc" "$errs"
		grep '^==[0-9]*==' "$log" | head -40
	fi
	rm -f "$log"
done
exit "$failed"
