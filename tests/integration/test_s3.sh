#!/usr/bin/env bash
# s3:// and http:// sources against a real S3 server (SeaweedFS on
# loopback, with Signature V4 identities): every batch equal to the same
# shards mounted from a local directory, cold and warm; keys with spaces,
# '+', '%', '~' and UTF-8; a refused signature, a missing prefix and a
# server that is down give clear errors at once; a shard cache left
# half-written is never used; the secret key is written nowhere.
source "$(dirname "$0")/lib.sh"
t_begin
source "$HERE/s3lib.sh"
s3_start
D=$T_DIR
TOOLS=$(cd "$HERE/../tools" && pwd)
COMMON=(--batch 8 --size 40x48 --shuffle 3 --epochs 2 --threads 2)
# A local source's default order is the global shuffle; a remote one's
# (shards) blocks of 1/32 of its shards, at least 1: local mounts ask for
# that order to be compared with the remote ones (a folder's stays global).
BLOCK=(--shuffle-block 1)

"$MKJPEG" "$D/jpegs" --classes 3 --per-class 13 --seed 5 --min-size 30 \
	--max-size 90 >/dev/null || { not_ok mkjpeg; t_end; }
"$BATCHFS" mkshards "$D/jpegs" "$D/tfr" --per-shard 8 --quiet || { not_ok mkshards; t_end; }
$PY "$TOOLS/mkwds.py" "$D/jpegs" "$D/wds" --per-shard 9 >/dev/null || { not_ok mkwds; t_end; }
mkdir -p "$D/gz" && for f in "$D"/tfr/*.tfrecord; do gzip -c "$f" >"$D/gz/$(basename "$f").gz"; done
# A class-folder tree whose names need encoding.
mkdir -p "$D/odd"
i=0
for c in "$D"/jpegs/*/; do
	case $i in 0) n='a b+c' ;; 1) n='d%e~f' ;; *) n=$'g\xc3\xa9h' ;; esac
	cp -r "$c" "$D/odd/$n"
	i=$((i + 1))
done
for p in tfr wds gz odd; do
	s3_upload "$D/$p" train "set/$p" || { not_ok "upload $p"; t_end; }
done

# every_batch MNT: the bytes of both epochs, in order.
every_batch() { (cd "$1" && cat epoch-0000/* epoch-0001/*); }

for p in tfr wds gz odd; do
	blk=("${BLOCK[@]}")
	[ "$p" = odd ] && blk=()
	mount_fg "$D/$p" "$D/local-$p" "${COMMON[@]}" "${blk[@]}" --cache none || { not_ok "local mount $p"; continue; }
	mount_fg "s3://train/set/$p" "$D/s3-$p" "${COMMON[@]}" --cache "$D/lmdb" \
		--shard-cache "$D/shards" || { not_ok "s3 mount $p"; continue; }
	check "s3://: every batch of $p equals the local mount's, cold" \
		cmp <(every_batch "$D/local-$p") <(every_batch "$D/s3-$p")
	check "s3://: $p's dataset.json names the URL" \
		grep -q "\"source\": \"s3://train/set/$p\"" "$D/s3-$p/dataset.json"
	check "s3://: $p's default order is $([ $p = odd ] && echo 'the global shuffle (a folder)' || echo 'a block shuffle')" \
		grep -q "\"shuffle_block\": $([ $p = odd ] && echo '"global"' || echo 1)," "$D/s3-$p/dataset.json"
	check "s3://: batchfs status of $p shows the requests and the shard cache" \
		bash -c "'$BATCHFS' status '$D/s3-$p' | grep -q '^remote .* requests' &&
			'$BATCHFS' status '$D/s3-$p' | grep -q '^shard cache .* objects' &&
			'$BATCHFS' status --json '$D/s3-$p' | grep -q '\"remote\"'"
	unmount_wait "$D/s3-$p"
	mount_fg "s3://train/set/$p" "$D/s3w-$p" "${COMMON[@]}" --cache "$D/lmdb" \
		--shard-cache "$D/shards" || { not_ok "warm s3 mount $p"; continue; }
	check "s3://: every batch of $p equals the local mount's, warm (shard and sample caches)" \
		cmp <(every_batch "$D/local-$p") <(every_batch "$D/s3w-$p")
	check "s3://: the warm mount of $p fetched no object again (it found them whole)" \
		$PY -c 'import json,sys; r=json.load(open(sys.argv[1]))["remote"]; sys.exit(0 if r["fetched"] == 0 and r["range_reads"] == 0 else 1)' "$D/s3w-$p/stats.json"
	unmount_wait "$D/s3w-$p"
	unmount_wait "$D/local-$p"
done
# the four warm mounts (their indexes stored, or their tars whole in the
# shard cache) and the cold class-folder tree (an image is indexed by its
# name and size) fetched nothing to be indexed; the three cold shard sets did
check "s3://: the warm mounts fetched nothing to index (their indexes were stored)" \
	bash -c "grep -c ', 0 objects fetched to index them' '$D/mount.log' | grep -qx 5"

# http:// with WebDataset's braces, through SeaweedFS's filer (Range, ETag).
n=$(ls "$D/wds" | wc -l)
last=$(printf '%06d' $((n - 1)))
mount_fg "http://127.0.0.1:$FILER_PORT/buckets/train/set/wds/train-{000000..$last}.tar" \
	"$D/http" "${COMMON[@]}" --cache none --shard-cache "$D/shards" &&
	mount_fg "$D/wds" "$D/local-wds2" "${COMMON[@]}" "${BLOCK[@]}" --cache none &&
	check "http:// with braces: every batch equals the local mount's" \
		cmp <(every_batch "$D/local-wds2") <(every_batch "$D/http") ||
	not_ok "http:// mount"

# Clear errors at once, nothing mounted.
refused() { # NAME PATTERN ARGS...: the mount fails and says PATTERN
	local name=$1 pat=$2 out rc
	shift 2
	mkdir -p "$D/refused"
	T_MOUNTS+=("$D/refused")
	out=$(timeout 60 "$BATCHFS" mount "$1" "$D/refused" --cache none --shard-cache "$D/shards" "${@:2}" 2>&1)
	rc=$?
	if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q -- "$pat" &&
		! mountpoint -q "$D/refused"; then
		ok "$name"
	else
		not_ok "$name: rc $rc: $out"
	fi
}
AWS_SECRET_ACCESS_KEY=wrong refused "a wrong secret key: 403 names the cause and the fix" \
	"403.*check the credentials" s3://train/set/tfr
refused "a prefix with no objects is named" "no objects under this prefix" s3://train/nothing-here
AWS_ACCESS_KEY_ID= AWS_SECRET_ACCESS_KEY= refused "no credentials anywhere: what was looked at, and --s3-anonymous" \
	"no AWS credentials.*--s3-anonymous" s3://train/set/tfr
AWS_ENDPOINT_URL=http://127.0.0.1:1 refused "a server that is down: gave up after --s3-giveup, naming the object and the cause" \
	"gave up after .* attempts.*connection reset or refused" s3://train/set/tfr --s3-giveup 2
refused "an endpoint that is no URL" "is not an http:// or https:// URL" s3://train/set/tfr --s3-endpoint ftp://x

# A shard cache left as a kill -9 leaves it is never trusted.
sc=$(dirname "$(grep -l "s3://train/set/tfr/$" "$D"/shards/*/source)")
first=$(ls "$sc/data" | head -1)
second=$(ls "$sc/data" | sed -n 2p)
truncate -s 100 "$sc/data/$first"                     # cut short: its trailer gone
head -c 4096 /dev/urandom >"$sc/data/$second"         # no trailer of its identity
dd if=/dev/urandom of="$sc/tmp/0" bs=1k count=8 2>/dev/null   # a fetch in flight
mount_fg "s3://train/set/tfr" "$D/s3-again" "${COMMON[@]}" --cache none \
	--shard-cache "$D/shards" || not_ok "remount after damage"
mount_fg "$D/tfr" "$D/local-again" "${COMMON[@]}" "${BLOCK[@]}" --cache none || not_ok "local remount"
check "a cut object and one without its meta are fetched again: the bytes are right" \
	cmp <(every_batch "$D/local-again") <(every_batch "$D/s3-again")
check "a fetch in flight is not left in tmp/" bash -c "[ -z \"\$(ls '$sc/tmp')\" ]"
same_objects() { # each object of the cache is the bucket's, then its trailer
	local f
	for f in "$D"/tfr/*; do
		cmp -s "$f" <(head -c "$(stat -c %s "$f")" "$sc/data/$(basename "$f")") || return 1
	done
}
check "the shard cache's objects equal the bucket's" same_objects

# A network that fails: a proxy in front of the server spoils the first
# ranged GETs; the fetch retries and the bytes are the local mount's.
proxy() { # MODE COUNT [--down-seconds S]: starts it, sets PROXY_PORT
	rm -f "$D/proxy.port" "$D/proxy.port.log"
	$PY "$HERE/faultproxy.py" "$S3_PORT" "$D/proxy.port" "$@" 2>>"$D/proxy.err" &
	PROXY_PID=$!
	T_PIDS+=("$PROXY_PID")
	for _ in $(seq 1 100); do [ -s "$D/proxy.port" ] && break; sleep 0.1; done
	PROXY_PORT=$(cat "$D/proxy.port")
}
retries() { # CAUSE MNT: stats.json's retry count for CAUSE
	$PY -c 'import json,sys; print(json.load(open(sys.argv[2]))["remote"]["retries"][sys.argv[1]])' "$1" "$2/stats.json"
}
fault_case() { # NAME MODE COUNT CAUSE MIN [mount args...]
	local name=$1 mode=$2 count=$3 cause=$4 min=$5 n got
	shift 5
	proxy "$mode" "$count"
	n=$((n_case = ${n_case:-0} + 1))
	if mount_fg "s3://train/set/tfr" "$D/fault$n" "${COMMON[@]}" --cache none \
		--shard-cache "$D/fault-shards$n" --s3-endpoint "http://127.0.0.1:$PROXY_PORT" \
		--s3-connections 2 "$@"; then
		got=$(retries "$cause" "$D/fault$n")
		if cmp -s <(every_batch "$D/local-again") <(every_batch "$D/fault$n") &&
			[ "$got" -ge "$min" ] && [ "$(wc -l <"$D/proxy.port.log")" -ge "$count" ]; then
			ok "$name: retried ($cause $got), the bytes are right"
		else
			not_ok "$name: retries.$cause $got (want >= $min), spoiled $(wc -l <"$D/proxy.port.log" 2>/dev/null): $(tr -d '\n ' <"$D/fault$n/stats.json" | grep -o '"retries":{[^}]*}')"
		fi
		unmount_wait "$D/fault$n"
	else
		not_ok "$name: the mount failed: $(tail -2 "$D/mount.log")"
	fi
	kill "$PROXY_PID" 2>/dev/null
	wait "$PROXY_PID" 2>/dev/null
}
fault_case "a connection reset mid-body" reset 3 reset 3
check "a reset read resumes from where it broke (a Range that starts past 0)" \
	grep -q 'resumed' "$D/proxy.resumed"
fault_case "503 SlowDown with Retry-After" slowdown 3 throttled 3
fault_case "500 InternalError" error500 2 server_error 2
fault_case "a stalled server (no byte for --s3-timeout)" stall 1 timeout 1 --s3-timeout 1
fault_case "a body cut short of its Content-Length" truncate 2 reset 2
fault_case "a Content-Length one byte short of the range" shortlen 2 short_body 2
# The server down for 3 s while the objects are fetched.
proxy down 0 --down-seconds 3
if mount_fg "s3://train/set/tfr" "$D/down" "${COMMON[@]}" --cache none \
	--shard-cache "$D/down-shards" --s3-endpoint "http://127.0.0.1:$PROXY_PORT" --s3-giveup 60; then
	check "the server down for 3 s: the fetch waits it out, the bytes are right" \
		cmp <(every_batch "$D/local-again") <(every_batch "$D/down")
	unmount_wait "$D/down"
else
	not_ok "the server down for 3 s: the mount failed: $(tail -2 "$D/mount.log")"
fi
kill "$PROXY_PID" 2>/dev/null
# Down for longer than the give-up time: a clear error naming the object.
proxy down 0 --down-seconds 60
refused "the server down past --s3-giveup: the error names the object, the attempts and the cause" \
	"s3://train/set/tfr/train-.*gave up after .* attempts.*--s3-giveup 2 s" \
	s3://train/set/tfr --s3-endpoint "http://127.0.0.1:$PROXY_PORT" --s3-giveup 2 --shard-cache "$D/never"
kill "$PROXY_PID" 2>/dev/null

# An object replaced while it is fetched: If-Match fails it (412), the
# mount says so and uses nothing of it; a remount serves the new object.
mkdir -p "$D/repl"
cp "$D"/tfr/* "$D/repl/"
s3_upload "$D/repl" train repl || not_ok "upload repl"
first=$(ls "$D/repl" | head -1)
second=$(ls "$D/repl" | sed -n 2p)
proxy replace 1 --replace "$FILER_PORT" "$D/repl/$second"
refused "an object replaced mid-fetch fails with 412, named, and nothing of it is used" \
	"PreconditionFailed.*replaced while it was fetched" s3://train/repl \
	--s3-endpoint "http://127.0.0.1:$PROXY_PORT" --shard-cache "$D/repl-shards" --s3-connections 1
kill "$PROXY_PID" 2>/dev/null
cp "$D/repl/$second" "$D/repl/$first"
mount_fg "$D/repl" "$D/repl-local" "${COMMON[@]}" "${BLOCK[@]}" --cache none || not_ok "local mount of repl"
if mount_fg s3://train/repl "$D/repl-s3" "${COMMON[@]}" --cache none --shard-cache "$D/repl-shards"; then
	check "...and a remount indexes the new object: the bytes of the replaced shards" \
		cmp <(every_batch "$D/repl-local") <(every_batch "$D/repl-s3")
	unmount_wait "$D/repl-s3"
else
	not_ok "remount after the replacement: $(tail -2 "$D/mount.log")"
fi
unmount_wait "$D/repl-local"

# Credentials from each source the AWS tools read.
cred_mount() { # NAME ENV... : mount tfr with only that source of credentials
	local name=$1
	shift
	if env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$@" \
		"$BATCHFS" mount -f "s3://train/set/tfr" "$D/cred" "${COMMON[@]}" --cache none \
		--shard-cache "$D/cred-shards" >>"$D/mount.log" 2>&1 &
	then
		MOUNT_PID=$!
		T_PIDS+=("$MOUNT_PID")
		T_MOUNTS+=("$D/cred")
		for _ in $(seq 1 300); do
			[ -e "$D/cred/dataset.json" ] && break
			kill -0 "$MOUNT_PID" 2>/dev/null || break
			sleep 0.1
		done
	fi
	if [ -e "$D/cred/dataset.json" ] &&
		cmp -s <(every_batch "$D/local-again") <(every_batch "$D/cred"); then
		ok "$name"
	else
		not_ok "$name: $(tail -2 "$D/mount.log")"
	fi
	unmount_wait "$D/cred"
	rm -rf "$D/cred-shards"
}
mkdir -p "$D/cred" "$D/aws"
printf '[default]\naws_access_key_id = nobody\naws_secret_access_key = wrong\n\n[training]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$S3_KEY" "$S3_SECRET" >"$D/aws/credentials"
printf '[profile cfg]\nregion = us-east-1\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$S3_RO_KEY" "$S3_RO_SECRET" >"$D/aws/config"
cred_mount "credentials: AWS_PROFILE's section of AWS_SHARED_CREDENTIALS_FILE" \
	AWS_SHARED_CREDENTIALS_FILE="$D/aws/credentials" AWS_PROFILE=training
cred_mount "credentials: a [profile NAME] of AWS_CONFIG_FILE (a read-only identity)" \
	AWS_CONFIG_FILE="$D/aws/config" AWS_PROFILE=cfg
mkdir -p "$D/home/.aws" && cp "$D/aws/credentials" "$D/home/.aws/credentials"
cred_mount "credentials: ~/.aws/credentials, profile from AWS_PROFILE" \
	-u AWS_SHARED_CREDENTIALS_FILE HOME="$D/home" AWS_PROFILE=training
rm -f "$D/imds.port" "$D/imds.port.log"
# SeaweedFS takes a request with X-Amz-Security-Token for one of its STS
# sessions, not a static identity, so this service hands out no token.
$PY "$HERE/imds.py" "$D/imds.port" "$S3_KEY" "$S3_SECRET" 200 "" &
T_PIDS+=("$!")
for _ in $(seq 1 100); do [ -s "$D/imds.port" ] && break; sleep 0.1; done
cred_mount "credentials: IMDSv2 on AWS_EC2_METADATA_SERVICE_ENDPOINT, with its token" \
	-u AWS_EC2_METADATA_DISABLED AWS_EC2_METADATA_SERVICE_ENDPOINT="http://127.0.0.1:$(cat "$D/imds.port")"
check "IMDSv2: a token first, then the role, then its credentials" \
	grep -q 'GET /latest/meta-data/iam/security-credentials/bfs-role 200' "$D/imds.port.log"
check "IMDSv2: credentials that expire within 5 minutes are fetched again before use" \
	bash -c "[ \$(grep -c 'bfs-role 200' '$D/imds.port.log') -ge 3 ]"

# batchfs.Mount takes the URL as it is.
check "batchfs.Mount(\"s3://...\"): the same bytes as the local mount" \
	env PYTHONPATH="$HERE/../../tools/python${PYTHONPATH:+:$PYTHONPATH}" $PY - "$D" <<'PY'
import os, sys, batchfs
d = sys.argv[1]
with batchfs.Mount("s3://train/set/tfr", batch=8, size=(40, 48), shuffle=3, epochs=2,
                   threads=2, cache="none", shard_cache=d + "/py-shards") as m:
    assert m.info["source"] == "s3://train/set/tfr", m.info["source"]
    for e in ("epoch-0000", "epoch-0001"):
        for f in sorted(os.listdir(os.path.join(d, "local-again", e))):
            a = open(os.path.join(d, "local-again", e, f), "rb").read()
            b = open(os.path.join(m.rank_dir, e, f), "rb").read()
            assert a == b, (e, f)
PY

# mount(8)'s helper (what fstab and mount -t fuse.batchfs run) takes the URL.
ln -sf "$BATCHFS" "$D/mount.fuse.batchfs"
mkdir -p "$D/helper"
T_MOUNTS+=("$D/helper")
if "$D/mount.fuse.batchfs" s3://train/set/tfr "$D/helper" \
	-o batch=8,size=40x48,shuffle=3,epochs=2,threads=2,cache=none,shard_cache="$D/helper-shards" \
	>>"$D/mount.log" 2>&1; then
	check "the mount helper: s3:// as fstab gives it, the same bytes as the local mount" \
		cmp <(every_batch "$D/local-again") <(every_batch "$D/helper")
	"$BATCHFS" unmount "$D/helper" >/dev/null 2>&1
else
	not_ok "the mount helper with an s3:// source: $(tail -2 "$D/mount.log")"
fi

# mkshards writes to s3:// (staged, then uploaded), and --force replaces.
if "$BATCHFS" mkshards "$D/jpegs" s3://train/made --per-shard 8 --quiet; then
	mount_fg s3://train/made "$D/made" "${COMMON[@]}" --cache none --shard-cache "$D/made-shards" &&
		check "mkshards --out s3://: the uploaded shards mount to the local ones' bytes" \
			cmp <(every_batch "$D/local-again") <(every_batch "$D/made")
	unmount_wait "$D/made"
	out=$("$BATCHFS" mkshards "$D/jpegs" s3://train/made --per-shard 8 --quiet 2>&1)
	check "mkshards to s3:// refuses a rerun over an earlier run's shards" \
		bash -c "printf '%s' \"\$1\" | grep -q 'already holds 5 shard'" _ "$out"
	"$BATCHFS" mkshards "$D/jpegs" s3://train/made --per-shard 20 --quiet --force &&
		check "mkshards --force to s3:// leaves only the new run's shards" \
			bash -c "curl -sf 'http://127.0.0.1:$FILER_PORT/buckets/train/made/?limit=100' -H 'Accept: application/json' |
				$PY -c 'import json,sys; n=[e[\"FullPath\"] for e in json.load(sys.stdin)[\"Entries\"]]; print(n); sys.exit(0 if len(n)==2 and all(\"of-00002\" in x for x in n) else 1)'"
	check "mkshards leaves no staging folder behind" \
		bash -c "! ls -d \"\${TMPDIR:-/tmp}\"/batchfs-mkshards-* 2>/dev/null"
else
	not_ok "mkshards to s3://"
fi

# The secret is in no file, message or command line the mount wrote.
grep_secret() {
	! grep -rlF -- "$S3_SECRET" "$D/mount.log" "$D/shards" "$D/lmdb" "$D/xdg-cache" 2>/dev/null &&
	! grep -qF -- "$S3_SECRET" "$D/s3-again/dataset.json" "$D/s3-again/stats.json" &&
	! tr '\0' ' ' <"/proc/$MOUNT_PID/cmdline" | grep -qF -- "$S3_SECRET"
}
check "the secret key is in no log, JSON file, cache or command line" grep_secret
t_end
