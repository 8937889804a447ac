#!/usr/bin/env bash
# Memory per idle keep-alive client connection: corral and nginx, each with
# one worker answering `return 200`, get N connections that each made one
# request and then stay open; the server's RSS grows by N times the cost.
#
# usage: tests/bench/idle-rss.sh [-n CONNECTIONS]   (default 10000)
set -u
N=10000
while getopts "n:" o; do case $o in n) N=$OPTARG;; *) exit 2;; esac; done
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
bench_need idle-rss nginx-light nginx
BIN=$(bench_corral) || exit 2
ulimit -n 20000
bench_tmp

cat >"$tmp/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx.err warn;
events { worker_connections 16000; }
http {
  access_log off;
  keepalive_timeout 300s;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:18090 backlog=4096; location / { return 200 "hello world\n"; } }
}
CONF
cat >"$tmp/corral.conf" <<CONF
workers 1;
max_connections 16000;
keepalive_timeout 300s;
server { listen 127.0.0.1:18091; location / { return 200 "hello world\n"; } }
CONF
bench_start nginx -c "$tmp/nginx.conf"
bench_start "$BIN" -c "$tmp/corral.conf" 2>"$tmp/corral.log"
for p in 18090 18091; do bench_wait $p; done
nginx_worker=$(pgrep -f "nginx: worker process" -P "${pids[0]}")
rss_kb() { awk '/^VmRSS/{print $2}' "/proc/$1/status"; }

measure() { # name port pid
  local before after
  before=$(rss_kb "$3")
  python3 - "$2" "$N" <<'PY' &
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
conns = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conns.append(s)
for s in conns:
    data = b""
    while not data.endswith(b"hello world\n"):
        data += s.recv(4096)
print("ready", flush=True)
time.sleep(3)
PY
  local client=$!
  sleep 0.5
  for _ in $(seq 120); do [ "$(ls /proc/$client/fd 2>/dev/null | wc -l)" -ge "$N" ] && break; sleep 0.25; done
  sleep 1.5
  after=$(rss_kb "$3")
  wait $client
  awk -v n="$1" -v b="$before" -v a="$after" -v c="$N" \
    'BEGIN{printf "%-7s RSS %7d KB -> %7d KB: %.2f KB per idle connection\n", n, b, a, (a-b)/c}'
}
measure nginx 18090 "$nginx_worker"
measure corral 18091 "${pids[1]}"
