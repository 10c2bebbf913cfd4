#!/usr/bin/env bash
# https:// with WebDataset's braces against nginx (Debian's) on loopback,
# with a certificate of a CA made in the test: every batch equals the same
# tars mounted from a local folder, also through a shard cache a quarter of
# the source's size; TLS is verified (AWS_CA_BUNDLE), a
# certificate that is not trusted is refused at once with what to do, and
# --no-verify-tls turns the check off by name; a URL of the pattern that
# the server does not have is named.
source "$(dirname "$0")/lib.sh"
t_begin
source "$HERE/httpslib.sh"
D=$T_DIR
TOOLS=$(cd "$HERE/../tools" && pwd)
COMMON=(--batch 8 --size 40x48 --shuffle 5 --cache none --shard-cache "$D/shards")

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 11 --seed 8 --min-size 30 \
	--max-size 90 >/dev/null || { not_ok mkjpeg; t_end; }
mkdir -p "$D/www"
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/www/wds" --per-shard 8 >/dev/null || { not_ok mkwds; t_end; }
n=$(ls "$D/www/wds" | wc -l)
last=$(printf '%06d' $((n - 1)))

https_start "$D/www"
port=$HTTPS_PORT
URL="https://127.0.0.1:$port/wds/train-{000000..$last}.tar"
every_batch() { (cd "$1" && cat epoch-0000/*); }

# (a remote source's default order: blocks of 1/32 of its shards, at least 1)
mount_fg "$D/www/wds" "$D/local" --batch 8 --size 40x48 --shuffle 5 --shuffle-block 1 --cache none ||
	{ not_ok "local mount"; t_end; }
if AWS_CA_BUNDLE="$HTTPS_CA" mount_fg "$URL" "$D/https" "${COMMON[@]}"; then
	check "https:// with braces and AWS_CA_BUNDLE: every batch equals the local mount's" \
		cmp <(every_batch "$D/local") <(every_batch "$D/https")
	check "https://: dataset.json names the pattern as given" \
		grep -qF "\"source\": \"$URL\"" "$D/https/dataset.json"
	unmount_wait "$D/https"
else
	not_ok "https:// mount with AWS_CA_BUNDLE: $(tail -2 "$D/mount.log")"
fi

# A source four times the shard cache: streamed through it, evicted in the
# epoch order, every batch still the local mount's.
"$MKJPEG" "$D/big-jpegs" --classes 4 --per-class 48 --seed 9 --min-size 200 \
	--max-size 400 >/dev/null || not_ok "mkjpeg big"
$PY "$TOOLS/mkwds.py" "$D/big-jpegs" "$D/www/big" --per-shard 12 >/dev/null || not_ok "mkwds big"
nb=$(ls "$D/www/big" | wc -l)
SIZE=$(cat "$D"/www/big/* | wc -c)
LIM=$((SIZE / 4))
BIG="https://127.0.0.1:$port/big/train-{000000..$(printf '%06d' $((nb - 1)))}.tar"
mount_fg "$D/www/big" "$D/local-big" --batch 8 --size 40x48 --shuffle 5 --shuffle-block 2 --cache none ||
	not_ok "local mount of the big set"
if [ "$LIM" -ge 1048576 ] && AWS_CA_BUNDLE="$HTTPS_CA" mount_fg "$BIG" "$D/https-big" --batch 8 \
	--size 40x48 --shuffle 5 --shuffle-block 2 --cache none --shard-cache "$D/big-shards" \
	--shard-cache-size "$LIM"; then
	check "https:// with braces through a shard cache a quarter of the source, blocks of 2 shards: every batch equals the local mount's" \
		cmp <(every_batch "$D/local-big") <(every_batch "$D/https-big")
	check "...and the cache holds no more than its limit" \
		$PY -c 'import json,sys; r=json.load(open(sys.argv[1]))["remote"]; sys.exit(0 if 0 < r["bytes_on_disk"] <= r["limit"] == int(sys.argv[2]) else 1)' \
		"$D/https-big/stats.json" "$LIM"
	unmount_wait "$D/https-big"
else
	not_ok "https:// mount through a quarter cache ($LIM bytes): $(tail -2 "$D/mount.log")"
fi
unmount_wait "$D/local-big"

refused() { # NAME PATTERN SRC ARGS...
	local name=$1 pat=$2 src=$3 out rc t0=$SECONDS
	shift 3
	mkdir -p "$D/refused"
	T_MOUNTS+=("$D/refused")
	out=$(env -u AWS_CA_BUNDLE timeout 60 "$BATCHFS" mount "$src" "$D/refused" "${COMMON[@]}" "$@" 2>&1)
	rc=$?
	if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q -- "$pat" &&
		! mountpoint -q "$D/refused"; then
		ok "$name ($((SECONDS - t0)) s)"
	else
		not_ok "$name: rc $rc: $out"
	fi
}
rm -rf "$D/shards"
refused "a certificate that is not trusted is refused at once, saying what to do" \
	"not trusted: AWS_CA_BUNDLE" "$URL" --s3-giveup 100
if mount_fg "$URL" "$D/noverify" "${COMMON[@]}" --no-verify-tls; then
	check "--no-verify-tls: served all the same" \
		cmp <(every_batch "$D/local") <(every_batch "$D/noverify")
	unmount_wait "$D/noverify"
else
	not_ok "--no-verify-tls mount: $(tail -2 "$D/mount.log")"
fi
AWS_CA_BUNDLE="$HTTPS_CA" refused "a URL of the pattern that the server lacks is named (404)" \
	"wds/train-[0-9]*.tar: HEAD: HTTP 404" "https://127.0.0.1:$port/wds/train-{000000..000099}.tar" \
	--no-verify-tls
refused "a malformed brace pattern" "brace pattern" "https://127.0.0.1:$port/wds/train-{000003..000001}.tar"
t_end
