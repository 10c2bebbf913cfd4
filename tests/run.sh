#!/usr/bin/env bash
# Run every test of batchfs and print one closing line "N passed, N failed".
#   tests/run.sh            unit tests (cmocka) then integration tests
#   tests/run.sh unit       unit tests only
#   tests/run.sh integration [NAME...]
# Integration tests mount for real; they need /dev/fuse and fusermount3.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD BATCHFS="$PWD/$BUILD/batchfs" MKJPEG="$PWD/$BUILD/tests/mkjpeg"
mode=${1:-all}
[ $# -gt 0 ] && shift
passed=0 failed=0 skipped=0
failures=()

run_unit() {
	local t out p f
	for t in "$BUILD"/tests/test_*; do
		[ -x "$t" ] || continue
		# a hang is a failure with its output, not a stalled run
		out=$(timeout -k 10 1200 "$t" 2>&1)
		local rc=$?
		[ "$rc" -eq 124 ] && out+=$'\n'"$(basename "$t"): still running after 1200 s, killed"
		p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
		f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
		p=${p:-0} f=${f:-0}
		if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
		passed=$((passed + p)) failed=$((failed + f))
		if [ "$f" -ne 0 ]; then
			failures+=("unit: $(basename "$t")")
			printf '%s\n' "$out"
		fi
		printf '%-28s %3d passed, %d failed\n' "$(basename "$t")" "$p" "$f"
	done
}

# Each integration script prints "ok NAME", "not ok NAME: why" or
# "skip NAME: why" lines; its exit status must agree.
run_integration() {
	local s name line
	for s in tests/integration/test_*.sh tests/gpu/test_*.sh; do
		[ -f "$s" ] || continue
		name=$(basename "$s" .sh)
		if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then
			continue
		fi
		echo "== $name"
		local log
		log=$(mktemp)
		timeout 1200 bash "$s" >"$log" 2>&1
		local rc=$?
		cat "$log"
		local p f k
		p=$(grep -c '^ok ' "$log")
		f=$(grep -c '^not ok ' "$log")
		k=$(grep -c '^skip ' "$log")
		if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
			f=1
			echo "not ok $name: exited with status $rc"
		fi
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + k))
		[ "$f" -ne 0 ] && failures+=("integration: $name")
		rm -f "$log"
	done
}

case "$mode" in
unit) run_unit ;;
integration) run_integration "$@" ;;
all) run_unit; run_integration ;;
*) echo "usage: tests/run.sh [unit|integration [NAME...]]" >&2; exit 2 ;;
esac

for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
