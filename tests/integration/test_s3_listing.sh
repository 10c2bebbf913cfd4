#!/usr/bin/env bash
# ListObjectsV2 over many pages against a real S3 server (SeaweedFS on
# loopback, Signature V4): 2,500 objects under a prefix, listed by the
# storage layer as a mount lists them (tests/tools/s3ls.c), come back
# every one, once, sorted bytewise as local names are (uppercase before
# lowercase, '-' before '.', UTF-8 after ASCII), in more than one page;
# objects beside the prefix (a longer prefix that starts the same) are not
# taken.  Then a mount of a class-folder tree of 2,500 images under a prefix
# serves every one of them.  Last, `batchfs cache stats|clear --source URL`
# on a TFRecord source: its shard indexes and samples in the LMDB cache,
# its objects in the shard cache; clear keeps what a mount holds, and says
# so.
source "$(dirname "$0")/lib.sh"
t_begin
source "$HERE/s3lib.sh"
s3_start
D=$T_DIR
S3LS="$(dirname "$BATCHFS")/tests/s3ls"
N=2500

# The names: four classes with names that sort differently under a locale
# than bytewise, and in each numbered images whose names vary the same way.
$PY - "$D/names" "$N" <<'EOF'
import sys
out, n = sys.argv[1], int(sys.argv[2])
classes = ["Zeta", "alpha", "b-c", "b.c", "\u00e9t\u00e9"]
names = []
for i in range(n):
    c = classes[i % len(classes)]
    stem = ("IMG" if i % 3 == 0 else "img") + "%s%05d" % ("-" if i % 2 else "_", i)
    names.append("%s/%s.jpg" % (c, stem))
with open(out, "wb") as f:
    for nm in sorted(x.encode() for x in names):  # bytewise
        f.write(nm + b"\n")
EOF
# One small JPEG, uploaded under every name (through the filer, over one
# keep-alive connection), and three objects beside the prefix.
"$MKJPEG" --one "$D/one.jpg" 24x20 --seed 3 || { not_ok mkjpeg; t_end; }
$PY - "$D/names" "$D/one.jpg" "$FILER_PORT" <<'EOF' || { not_ok "upload"; t_end; }
import http.client, sys, urllib.parse as u
names = open(sys.argv[1], "rb").read().decode().splitlines()
body = open(sys.argv[2], "rb").read()
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[3]), timeout=30)
def put(path):
    c.request("PUT", u.quote(path), body)
    r = c.getresponse(); r.read()
    if r.status not in (200, 201):
        sys.exit("PUT %s: %d" % (path, r.status))
for nm in names:
    put("/buckets/big/many/" + nm)
for nm in ("many-not/x.jpg", "manyx/y.jpg", "other/z.jpg"):
    put("/buckets/big/" + nm)
EOF

out=$("$S3LS" s3://big/many 2>&1)
rc=$?
check "the listing of $N objects succeeds" test "$rc" = 0
printf '%s\n' "$out" | grep -v '^# ' >"$D/listed"
check "every object is listed once, sorted bytewise as local names are" \
	cmp "$D/names" "$D/listed"
reqs=$(printf '%s\n' "$out" | sed -n 's/^# \([0-9]*\) objects, \([0-9]*\) requests$/\2/p')
count=$(printf '%s\n' "$out" | sed -n 's/^# \([0-9]*\) objects, .*/\1/p')
check "the listing says $N objects" test "${count:-0}" = "$N"
check "the listing took several pages (ListObjectsV2 gives at most 1,000 keys a page): $reqs requests" \
	test "${reqs:-0}" -ge 3
check "objects beside the prefix (many-not/, manyx/) are not listed" \
	bash -c "! grep -q -e '^many-not' -e '^manyx' -e '^x.jpg' -e '^y.jpg' '$D/listed'"

# A mount of the same tree: a folder layout of 2,500 images.
if mount_fg "s3://big/many" "$D/m" --batch 50 --size 16x16 --threads 2 \
	--cache none --shard-cache "$D/shards"; then
	check "a mount of the $N-image class-folder tree has every image" \
		grep -q "\"samples\": $N," "$D/m/dataset.json"
	check "its classes are the folder names in bytewise order" \
		$PY -c "import json, sys; d = json.load(open('$D/m/dataset.json'));
sys.exit(d['classes'] != sorted(['Zeta', 'alpha', 'b-c', 'b.c', '\u00e9t\u00e9'], key=str.encode))"
	check "its last batch reads" \
		$PY -c "import numpy as np; a = np.load('$D/m/epoch-0000/batch-000049.npy'); assert a.shape == (50, 16, 16, 3)"
	unmount_wait "$D/m"
else
	not_ok "mount s3://big/many"
fi
rm -rf "$D/shards"

# The cache commands on a URL.
"$MKJPEG" "$D/jpegs" --classes 2 --per-class 12 --seed 4 --min-size 30 \
	--max-size 60 >/dev/null && "$BATCHFS" mkshards "$D/jpegs" "$D/tfr" \
	--per-shard 6 --quiet && s3_upload "$D/tfr" big tfr || { not_ok "tfr shards"; t_end; }
SRC=s3://big/tfr
C=(--shard-cache "$D/sc")
if mount_fg "$SRC" "$D/t" --batch 6 --size 16x16 --threads 2 --cache "$D/lmdb" "${C[@]}"; then
	cat "$D"/t/epoch-0000/*.npy >/dev/null
	out=$("$BATCHFS" cache stats "$D/lmdb" --source "$SRC" "${C[@]}" 2>&1)
	check "cache stats --source s3://: its 4 shard indexes and 24 samples" \
		bash -c 'printf "%s" "$1" | grep -q "^source .*: 4 shard indexes (.*), 24 samples"' _ "$out"
	check "cache stats --source s3://: its 4 objects in the shard cache" \
		bash -c 'printf "%s" "$1" | grep -q "^shard cache .*/sc/[0-9a-f]\{16\}: 4 objects"' _ "$out"
	# An object a reader holds (open and flocked shared, as a mount holds
	# the shards it reads: shardfolder.h) stays; the others go.
	held=$(find "$D/sc" -path '*/data/*' -type f | sort | head -1)
	(exec 9<"$held" && flock -s 9 && exec sleep 30) &
	holder=$!
	T_PIDS+=("$holder")
	for _ in $(seq 1 50); do grep -q "$(stat -c %i "$held")" /proc/locks && break; sleep 0.1; done
	out=$("$BATCHFS" cache clear "$D/lmdb" --source "$SRC" "${C[@]}" 2>&1)
	check "cache clear --source s3:// while mounted: the entries go, an object held stays and is said" \
		bash -c 'printf "%s" "$1" | grep -q "removed 4 shard indexes" &&
			printf "%s" "$1" | grep -q "removed [0-3] files; [1-4] objects kept: a mount holds them"' _ "$out"
	check "...and the held object is still there" test -f "$held"
	kill "$holder" 2>/dev/null
	check "...and the mount still serves every batch" \
		bash -c "cat '$D'/t/epoch-0000/*.npy >/dev/null"
	unmount_wait "$D/t"
	out=$("$BATCHFS" cache clear "$D/lmdb" --source "$SRC" "${C[@]}" 2>&1)
	check "cache clear --source s3:// after the unmount removes every object left" \
		bash -c 'printf "%s" "$1" | grep -q "shard cache .*: removed [1-9][0-9]* files$"' _ "$out"
	out=$("$BATCHFS" cache stats "$D/lmdb" --source "$SRC/" "${C[@]}" 2>&1)
	check "cache stats --source (the same URL with a '/'): nothing is left" \
		bash -c 'printf "%s" "$1" | grep -q "0 shard indexes .*, 0 samples" &&
			printf "%s" "$1" | grep -q "^shard cache .*: 0 objects"' _ "$out"
else
	not_ok "mount $SRC"
fi
out=$("$BATCHFS" cache stats "$D/lmdb" --source s3://big/never "${C[@]}" 2>&1)
check "cache stats --source of a URL never mounted: no shard cache folder" \
	bash -c 'printf "%s" "$1" | grep -q "^shard cache .*: none"' _ "$out"
rm -rf "$D/sc" "$D/lmdb"
t_end
