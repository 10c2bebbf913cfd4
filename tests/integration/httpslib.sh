# nginx (Debian's) serving a folder over https on loopback, with a
# certificate of a CA made in the test, for the https:// tests.  Source
# after lib.sh and t_begin; then `https_start ROOT` (or skip the test when
# there is no nginx).
#
# Sets HTTPS_PORT and HTTPS_CA (the CA's certificate: AWS_CA_BUNDLE for a
# mount that verifies TLS); every request nginx answers goes to
# HTTPS_LOG ("METHOD PATH STATUS BYTES" a line), so that a test can count
# what a mount asked for.

https_start() {
	local root=$1 d=$T_DIR/nginx p
	if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
		echo "skip $(basename "$0" .sh): no nginx (apt-get install nginx-light; make deps installs it)"
		exit 0
	fi
	local nginx
	nginx=$(command -v nginx || echo /usr/sbin/nginx)
	mkdir -p "$d"
	# A CA, and a certificate it signs for 127.0.0.1.
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=batchfs test CA" \
		-keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null &&
		openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
			-keyout "$d/srv.key" -out "$d/srv.csr" 2>/dev/null &&
		printf 'subjectAltName=IP:127.0.0.1\n' >"$d/ext" &&
		openssl x509 -req -in "$d/srv.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
			-CAcreateserial -days 2 -extfile "$d/ext" -out "$d/srv.pem" 2>/dev/null ||
		{ not_ok "openssl: make the test CA"; t_end; }
	HTTPS_CA=$d/ca.pem
	HTTPS_LOG=$d/access.log
	HTTPS_PORT=
	for _ in $(seq 1 50); do
		p=$((30000 + RANDOM % 20000))
		ss -ltn "( sport = :$p )" | grep -q LISTEN || { HTTPS_PORT=$p; break; }
	done
	[ -n "$HTTPS_PORT" ] || { not_ok "no free port for nginx"; t_end; }
	cat >"$d/nginx.conf" <<CONF
daemon off;
user root;
worker_processes 1;
pid $d/pid;
error_log $d/error.log;
events { worker_connections 64; }
http {
	log_format bfs '\$request_method \$uri \$status \$body_bytes_sent';
	access_log $HTTPS_LOG bfs;
	client_body_temp_path $d/body;
	proxy_temp_path $d/proxy;
	fastcgi_temp_path $d/fcgi;
	uwsgi_temp_path $d/uwsgi;
	scgi_temp_path $d/scgi;
	server {
		listen 127.0.0.1:$HTTPS_PORT ssl;
		ssl_certificate $d/srv.pem;
		ssl_certificate_key $d/srv.key;
		root $root;
	}
}
CONF
	"$nginx" -c "$d/nginx.conf" -p "$d" 2>>"$d/error.log" &
	T_PIDS+=("$!")
	for _ in $(seq 1 100); do
		curl -s --cacert "$HTTPS_CA" -o /dev/null "https://127.0.0.1:$HTTPS_PORT/" && return 0
		sleep 0.1
	done
	not_ok "nginx did not answer: $(tail -3 "$d/error.log")"
	t_end
}
