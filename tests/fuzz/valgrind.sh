#!/usr/bin/env bash
# Run every unit test binary (BUILD/tests/test_*) under valgrind memcheck.
# A test fails on any memcheck error or definite/indirect/possible leak of
# the test process, on any memory error (invalid access, uninitialised
# value, bad free) in a child it forks, or when the test itself fails.
# Leaks of forked children are not counted: a child that _exit()s holds
# the parent's whole heap, which memcheck would call lost.  Called by
# `make valgrind`; BUILD must be a build without SAN.
#   tests/fuzz/valgrind.sh [BUILD]
set -u
cd "$(dirname "$0")/../.."
build=${1:-build}
failed=0
for t in "$build"/tests/test_*; do
	[ -x "$t" ] || continue
	logs=$(mktemp -d)
	valgrind --tool=memcheck --leak-check=full \
		--errors-for-leak-kinds=definite,indirect,possible \
		--show-leak-kinds=definite,indirect,possible \
		--track-origins=yes --log-file="$logs/vg.%p" "$t" >"$logs/out" 2>&1 &
	vpid=$!
	wait "$vpid"
	rc=$?
	main=$logs/vg.$vpid
	errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$main" | tail -1)
	child=$(cat /dev/null $(ls "$logs"/vg.* | grep -vx "$main") |
		grep -cE 'Invalid (read|write|free)|uninitialised|Mismatched free|overlap|Syscall param')
	tests=$(grep -o 'PASSED  \] [0-9]* test' "$logs/out" | tail -1 | grep -o '[0-9]*')
	if [ "$rc" -eq 0 ] && [ "${errs:-1}" -eq 0 ] && [ "$child" -eq 0 ]; then
		printf '%-28s ok (%s tests, 0 errors)\n' "$(basename "$t")" "${tests:-?}"
	else
		failed=1
		printf '%-28s FAILED (exit %d, %s memcheck errors, %d in children)\n' \
			"$(basename "$t")" "$rc" "${errs:-?}" "$child"
		grep -E '^\[  (FAILED|ERROR) |^\[   LINE' "$logs/out" | head -10
		grep -A12 -E 'Invalid|uninitialised|lost in loss record' "$main" | head -60
	fi
	rm -rf "$logs"
done
exit "$failed"
