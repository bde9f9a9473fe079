#!/usr/bin/env bash
# Crawls the PostgreSQL 15 HTML documentation, served by Debian's nginx on a
# loopback address, with micra's crawler and with colly v2 side by side: each
# crawler in its own process, same concurrency, same pages, in one run.
#
# Usage: bench/crawlcmp/run.sh [-c CONCURRENCY] [-runs N] [-gzip]
# Environment: ADDR (default 127.0.0.80), PORT (default 18080), OUT (results
# directory, default a new temporary directory).
#
# It installs nginx and postgresql-doc-15 with apt if they are missing, starts
# nginx with its own configuration (bound to ADDR:PORT only), runs the
# comparison and stops nginx again.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
addr="${ADDR:-127.0.0.80}"
port="${PORT:-18080}"
docroot=/usr/share/doc/postgresql-doc-15/html
gzip=off
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	-gzip) gzip=on ;;
	*) args+=("$1") ;;
	esac
	shift
done

case "$addr" in
127.*) ;;
*) echo "ADDR must be a loopback address" >&2; exit 2 ;;
esac

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ] || [ ! -f "$docroot/index.html" ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends nginx postgresql-doc-15 >/dev/null
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

out="${OUT:-$(mktemp -d /tmp/crawlcmp.XXXXXX)}"
mkdir -p "$out/nginx"
cat >"$out/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $out/nginx/nginx.pid;
error_log $out/nginx/error.log warn;
events { worker_connections 256; }
http {
	include /etc/nginx/mime.types;
	default_type application/octet-stream;
	client_body_temp_path $out/nginx/body;
	proxy_temp_path $out/nginx/proxy;
	fastcgi_temp_path $out/nginx/fastcgi;
	uwsgi_temp_path $out/nginx/uwsgi;
	scgi_temp_path $out/nginx/scgi;
	log_format crawl '\$http_user_agent\t\$status\t\$request_uri\t\$body_bytes_sent';
	access_log $out/nginx/access.log crawl;
	sendfile on;
	keepalive_requests 100000;
	gzip $gzip;
	server {
		listen $addr:$port;
		root $docroot;
		index index.html;
	}
}
EOF

"$nginx_bin" -c "$out/nginx/nginx.conf" -e "$out/nginx/error.log" &
nginx_pid=$!
trap 'kill "$nginx_pid" 2>/dev/null || true; wait "$nginx_pid" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
	if (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null; then break; fi
	sleep 0.1
done

cd "$here/.."
go build -o "$out/bin/crawlcmp" ./crawlcmp
go build -o "$out/bin/micra" ./crawlcmp/micra
go build -o "$out/bin/colly" ./crawlcmp/colly
"$out/bin/crawlcmp" -bin "$out/bin" -url "http://$addr:$port/index.html" -out "$out" -nginxlog "$out/nginx/access.log" "${args[@]}"
echo "results in $out"
