#!/usr/bin/env bash
# Run libFuzzer targets for a bounded time each and print one summary line
# per target; exit 1 if any target crashed, leaked, timed out or broke a
# property (a CHECK in the target).  Called by `make fuzz`:
#   tests/fuzz/run.sh FUZZ_BUILD SECONDS TARGET...
# New inputs go to FUZZ_BUILD/corpus/TARGET (the committed seeds in
# tests/fuzz/corpus/TARGET are read, never written); a crashing input is
# saved as FUZZ_BUILD/artifacts/TARGET-crash-<sha1> and named in the output.
set -u
cd "$(dirname "$0")/../.."
build=$1 secs=$2
shift 2
failed=0

# Per-target limits: the largest input worth trying, and a dictionary.
max_len() {
	case $1 in
	tfrecord | tar) echo 65536 ;;   # > 16 KiB members: the small-pread path
	decode | image | gzindex) echo 65536 ;;
	example) echo 16384 ;;
	npy) echo 4096 ;;
	namespace) echo 1024 ;;
	*) echo 4096 ;;
	esac
}

# -malloc_limit_mb: no single allocation over this, so a size field that
# reaches malloc unchecked is a crash.  decode: 4M pixels * 4 bytes (CMYK)
# = 16 MiB is the most the pixel limit lets through.
malloc_limit() {
	case $1 in
	decode | image) echo 128 ;;
	*) echo 256 ;;
	esac
}

printf '%-10s %6s %12s %8s %6s %8s  %s\n' target secs executions exec/s cov corpus result
for t in "$@"; do
	bin=$build/fuzz_$t
	work=$build/corpus/$t
	log=$build/fuzz_$t.log
	mkdir -p "$work" "$build/artifacts"
	dict=()
	[ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
	"$bin" "$work" "tests/fuzz/corpus/$t" "${dict[@]+"${dict[@]}"}" \
		-max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=10 \
		-rss_limit_mb=2048 -malloc_limit_mb="$(malloc_limit "$t")" -print_final_stats=1 \
		-artifact_prefix="$build/artifacts/$t-" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	corp=$(ls "$work" | wc -l)
	if [ "$rc" -eq 0 ]; then
		result=ok
	else
		result="FAILED (exit $rc): $(sed -n "s/.*Test unit written to //p" "$log" | head -1)"
		failed=1
		grep -E 'ERROR|CHECK|SUMMARY|==[0-9]+==' "$log" | head -20
	fi
	printf '%-10s %6s %12s %8s %6s %8s  %s\n' "$t" "$secs" "${execs:-?}" \
		"${rate:-?}" "${cov:-?}" "$corp" "$result"
done
exit "$failed"
