#!/usr/bin/env bash
# Big machines: --threads auto is 16 or 64 there.  With the default --mem
# every worker keeps a share of the decoder scratch, and before, the share
# left for one image came out at 8 MiB: every real photo over ~1.9 Mpx
# failed its batch as "exceeds --max-pixels".  Now a worker that needs more
# borrows from the budget and waits for it; any image within --max-pixels
# decodes, with any thread count, and the bytes equal a one-thread mount's.
# Run here, on 2 cores, with 16 and 64 threads and images of 4000x3000
# and of the full default --max-pixels (8192x8192 = 64M).
source "$(dirname "$0")/lib.sh"
t_begin
D=$T_DIR

mkdir -p "$D/src/a"
for i in 1 2 3 4 5; do
	"$MKJPEG" --one "$D/src/a/photo$i.jpg" 4000x3000 --seed $i >/dev/null ||
		{ not_ok "mkjpeg 4000x3000"; t_end; }
done
"$MKJPEG" --one "$D/src/a/photo6.jpg" 4000x3000 --seed 6 --cmyk >/dev/null
"$MKJPEG" --one "$D/src/a/huge.jpg" 8192x8192 --seed 7 >/dev/null ||
	{ not_ok "mkjpeg 8192x8192"; t_end; }
"$MKJPEG" "$D/src/b" --classes 1 --per-class 5 --seed 8 >/dev/null
# folder layout: classes a and b, 12 images; batches of 4
OPTS=(--batch 4 --size 64x64 --cache none)

mount_fg "$D/src" "$D/one" "${OPTS[@]}" --threads 1 || { not_ok "mount --threads 1"; t_end; }
ref=$(cat "$D"/one/epoch-0000/*.npy | md5sum)
check "one thread, default --mem: every batch, the 64 Mpx image included" \
	bash -c "cat '$D'/one/epoch-0000/*.npy >/dev/null"
unmount_wait "$D/one"

for t in 16 64; do
	mount_fg "$D/src" "$D/t$t" "${OPTS[@]}" --threads $t ||
		{ not_ok "mount --threads $t"; continue; }
	out=$(cat "$D"/t$t/epoch-0000/*.npy 2>&1 | md5sum)
	check "--threads $t, default --mem: every batch, the same bytes as one thread" \
		test "$out" = "$ref"
	check "--threads $t: no sample error, memory within the budget" $PY - "$D/t$t" "$MOUNT_PID" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
assert s["errors_total"] == 0, s["errors"][:2]
assert s["threads"] == int(sys.argv[1][-2:]), s["threads"]
assert s["memory_bytes"] <= s["memory_budget"], (s["memory_bytes"], s["memory_budget"])
# the daemon's peak resident memory: the budget plus libfuse and code
hwm = [int(l.split()[1]) * 1024 for l in open(f"/proc/{sys.argv[2]}/status")
       if l.startswith("VmHWM")][0]
assert hwm <= s["memory_budget"] + (128 << 20), (hwm >> 20, s["memory_budget"] >> 20)
PY
	unmount_wait "$D/t$t"
done

# An explicit --mem too small for the default --max-pixels: the limit
# shrinks to what the budget decodes, the mount says so, and only the
# image over it fails (as over --max-pixels, named), the rest serve.
mkdir -p "$D/small"
out=$("$BATCHFS" mount "$D/src" "$D/small" "${OPTS[@]}" --threads 2 --mem 160M 2>&1)
T_MOUNTS+=("$D/small")
check "--mem 160M: the mount says which --max-pixels it decodes" \
	bash -c "printf '%s' \"\$1\" | grep -q -- '--max-pixels [0-9]*, the most --mem 160 MiB decodes with 2 threads'" _ "$out"
failed=0
for f in "$D"/small/epoch-0000/batch-*[0-9].npy; do
	cat "$f" >/dev/null 2>&1 || failed=$((failed + 1))
done
check "--mem 160M: exactly the batch with the 64 Mpx image fails" test "$failed" = 1
check "--mem 160M: its error is the pixel limit, naming the file" $PY - "$D/small" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/stats.json"))
e = s["errors"]
assert len(e) == 1 and "huge.jpg" in e[0]["shard"] and e[0]["error"] == "image exceeds --max-pixels", e
PY
"$BATCHFS" unmount "$D/small" >/dev/null 2>&1

# Both asked for and in conflict: refused, with the --mem that would do.
mkdir -p "$D/no"; T_MOUNTS+=("$D/no")
out=$("$BATCHFS" mount "$D/src" "$D/no" "${OPTS[@]}" --threads 2 --mem 160M --max-pixels 64M 2>&1)
rc=$?
check "--mem 160M --max-pixels 64M is refused with the --mem that would do" \
	bash -c "[ $rc = 1 ] && printf '%s' \"\$1\" | grep -q 'cannot decode an image of --max-pixels 67108864 with 2 threads.*use --mem [0-9]*M or more'" _ "$out"
check "nothing is mounted after the refusal" bash -c "! mountpoint -q '$D/no'"
t_end
