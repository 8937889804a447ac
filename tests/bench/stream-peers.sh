#!/usr/bin/env bash
# corral's stream proxy against nginx's stream module and HAProxy's mode
# tcp, one worker each, in front of the same backends: what each proxy
# spends in CPU time (user + system, from /proc) for
#   bulk    iperf3 through the proxy, each way: bytes per CPU-second
#   conn    a new connection per 1 KB answer (ab without keep-alive to an
#           nginx that answers 1 KB and closes): connections per CPU-second
#   tls     the same over TLS, passed through with the ClientHello read
#           (ssl_preread and a map; HAProxy: req_ssl_sni): connections per
#           CPU-second
# Figures, not a pass/fail test.  Needs nginx with ngx_stream_module
# (libnginx-mod-stream), haproxy, iperf3, ab, openssl (scripts/deps.sh).
#
# usage: tests/bench/stream-peers.sh [-t SECONDS] [-n CONNECTIONS] [-c CONCURRENCY]
#        (defaults: 5 s of iperf3 each way, 20000 connections, 32 at once)
set -euo pipefail
T=5 N=20000 C=32
while getopts "t:n:c:" o; do
  case $o in t) T=$OPTARG;; n) N=$OPTARG;; c) C=$OPTARG;; *) exit 2;; esac
done
cd "$(dirname "$0")/../.."
module=/usr/lib/nginx/modules/ngx_stream_module.so
for b in nginx haproxy iperf3 ab openssl; do
  command -v $b >/dev/null || { echo "stream-peers: needs $b (scripts/deps.sh)" >&2; exit 2; }
done
[ -r $module ] || { echo "stream-peers: needs $module (libnginx-mod-stream)" >&2; exit 2; }
ninja build/corral >/dev/null
. tests/bench/lib.sh
bench_tmp
chmod a+rx "$tmp"

bench_cert "$tmp" bench.example
kb=$(head -c 1024 /dev/zero | tr '\0' x)

cat >"$tmp/backend.conf" <<CONF
worker_processes 1;
daemon off;
pid $tmp/backend.pid;
error_log $tmp/backend.err;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_timeout 0;
  server { listen 127.0.0.1:15301; location / { return 200 "$kb"; } }
  server {
    listen 127.0.0.1:15302 ssl;
    ssl_certificate $tmp/cert.pem;
    ssl_certificate_key $tmp/key.pem;
    location / { return 200 "$kb"; }
  }
}
CONF
cat >"$tmp/nginx.conf" <<CONF
load_module $module;
worker_processes 1;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx.err;
events { worker_connections 4096; }
stream {
  map \$ssl_preread_server_name \$tls { bench.example 127.0.0.1:15302; default 127.0.0.1:15302; }
  server { listen 127.0.0.1:15211; proxy_pass 127.0.0.1:15201; }
  server { listen 127.0.0.1:15311; proxy_pass 127.0.0.1:15301; }
  server { listen 127.0.0.1:15411; ssl_preread on; proxy_pass \$tls; }
}
CONF
cat >"$tmp/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 8192
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
listen bulk
  bind 127.0.0.1:15212
  server s 127.0.0.1:15201
listen conn
  bind 127.0.0.1:15312
  server s 127.0.0.1:15301
frontend tls
  bind 127.0.0.1:15412
  tcp-request inspect-delay 5s
  tcp-request content accept if { req_ssl_hello_type 1 }
  use_backend tlsb if { req_ssl_sni -i bench.example }
  default_backend tlsb
backend tlsb
  server s 127.0.0.1:15302
CONF
cat >"$tmp/corral.conf" <<CONF
workers 1;
stream {
  upstream tlsb { server 127.0.0.1:15302; }
  map \$ssl_preread_server_name \$tls { bench.example tlsb; default tlsb; }
  server { listen 127.0.0.1:15213; proxy_pass 127.0.0.1:15201; }
  server { listen 127.0.0.1:15313; proxy_pass 127.0.0.1:15301; }
  server { listen 127.0.0.1:15413; ssl_preread on; proxy_pass \$tls; }
}
CONF
bench_start iperf3 -s -B 127.0.0.1 -p 15201 >/dev/null 2>&1
bench_start nginx -c "$tmp/backend.conf"
bench_start nginx -c "$tmp/nginx.conf"; roots=("$started")
bench_start haproxy -f "$tmp/haproxy.cfg" -db >"$tmp/haproxy.log" 2>&1; roots+=("$started")
bench_start build/corral -c "$tmp/corral.conf" 2>"$tmp/corral.log"; roots+=("$started")
names=(nginx haproxy corral) last=(1 2 3)
sleep 1
tree() { local p=$1 c; echo "$p"; for c in $(pgrep -P "$p"); do tree "$c"; done; }
ticks() { # user+system clock ticks of a process and its children
  local t=0 p
  for p in $(tree "$1"); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
declare -A result
measure() { # case index command...: sets result[case,index] = units per CPU-second
  local case=$1 i=$2 c0 c1 out units
  shift 2
  c0=$(ticks "${roots[$i]}")
  out=$("$@")
  c1=$(ticks "${roots[$i]}")
  case $case in
    bulk-up|bulk-down) units=$(echo "$out" | python3 -c \
        'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bytes"])') ;;
    *) units=$(echo "$out" | awk '/^Complete requests:/{print $3}')
       echo "$out" | grep -q '^Failed requests: *0' || echo "  ${names[$i]} $case: $(echo "$out" | grep '^Failed requests')" >&2 ;;
  esac
  result[$case,$i]=$(awk -v u="$units" -v c=$((c1 - c0)) -v hz="$hz" 'BEGIN{printf "%.0f", c ? u*hz/c : 0}')
  printf "%-10s %-8s %14s units in %5.2f CPU-s: %14s per CPU-second\n" "$case" "${names[$i]}" \
    "$units" "$(awk -v c=$((c1 - c0)) -v hz="$hz" 'BEGIN{print c/hz}')" "${result[$case,$i]}"
}
for i in 0 1 2; do
  p=$((15210 + ${last[$i]}))
  measure bulk-up "$i" iperf3 -c 127.0.0.1 -p $p -t "$T" -J
  measure bulk-down "$i" iperf3 -c 127.0.0.1 -p $p -t "$T" -R -J
  measure conn "$i" ab -q -n "$N" -c "$C" "http://127.0.0.1:$((15310 + ${last[$i]}))/"
  measure tls "$i" ab -q -n "$((N / 4))" -c "$C" "https://127.0.0.1:$((15410 + ${last[$i]}))/"
done
echo
printf "%-10s %16s %16s %16s %8s\n" case nginx haproxy corral "corral/best"
for case in bulk-up bulk-down conn tls; do
  printf "%-10s %16s %16s %16s %8s\n" "$case" "${result[$case,0]}" "${result[$case,1]}" \
    "${result[$case,2]}" "$(awk -v a="${result[$case,0]}" -v b="${result[$case,1]}" \
      -v c="${result[$case,2]}" 'BEGIN{m = a > b ? a : b; printf "%.2f", m ? c/m : 0}')"
done
