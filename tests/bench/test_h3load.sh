#!/usr/bin/env bash
# build/h3load (the HTTP/3 load client of tests/bench/h3-peers.sh) against
# build/corral's `listen ... quic` on loopback, one second a case:
#   - `return 200 "hello h3\n"` with 4 connections x 8 streams: requests
#     complete, none fails, and the body bytes are 9 a request;
#   - --ramp 0.8 with 4 connections: each opened once, requests complete;
#   - a 404: no request counts as completed, h3load exits 1.
# (--sni is not checked here: corral's $ssl_server_name is empty over
# HTTP/3 for now; Caddy refuses a handshake without it, docs/benchmarks.md.)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }
for b in openssl python3; do
  command -v $b >/dev/null || { echo "skipped: needs $b"; exit 0; }
done
ninja build/corral build/h3load >/dev/null || fail "build"
. tests/bench/lib.sh
bench_tmp

bench_cert "$tmp"
# The quic listen needs a port known here.
port=$(bench_free_port udp)
cat >"$tmp/corral.conf" <<CONF
workers 1;
server {
  listen 127.0.0.1:$port quic reuseport;
  tls_certificate $tmp/cert.pem;
  tls_certificate_key $tmp/key.pem;
  location / { return 200 "hello h3\n"; }
  location /missing { return 404; }
}
CONF
bench_start build/corral -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1
pid=$started
for _ in $(seq 100); do
  grep -q "listening on 127.0.0.1:$port quic" "$tmp/corral.log" && break
  kill -0 "$pid" 2>/dev/null || fail "corral exited: $(cat "$tmp/corral.log")"
  sleep 0.05
done

field() { awk -v k="$1" -v n="$2" '$0 ~ "^" k {print $n}' <<<"$out"; }

out=$(timeout 20 build/h3load -c 4 -m 8 -D 1 "https://127.0.0.1:$port/") || fail "h3load: $out"
completed=$(field requests: 4) failed=$(field requests: 6) bytes=$(field "body bytes:" 3)
((completed > 100)) || fail "completed $completed: $out"
((failed == 0)) || fail "failed $failed: $out"
((bytes == 9 * completed)) || fail "body bytes $bytes for $completed requests: $out"
[ "$(field connections: 2)" = 4 ] || fail "handshakes: $out"

# --ramp: the 4 connections open over the first 0.8 s, each one once.
out=$(timeout 20 build/h3load -c 4 -m 2 -D 1.5 --ramp 0.8 "https://127.0.0.1:$port/") ||
  fail "h3load --ramp: $out"
[ "$(field connections: 2)" = 4 ] || fail "handshakes with --ramp: $out"
(($(field requests: 4) > 100 && $(field requests: 6) == 0)) || fail "--ramp: $out"

out=$(timeout 20 build/h3load -c 1 -m 2 -D 1 "https://127.0.0.1:$port/missing")
status=$?
((status == 1)) || fail "exit $status for 404s: $out"
[ "$(field requests: 4)" = 0 ] && (($(field requests: 6) > 0)) || fail "404s: $out"

echo "PASS: h3load against build/corral: completed, failed, and body bytes"
