#!/usr/bin/env bash
# The upstream pool under more requests in flight than `keepalive`: h2load
# over TLS (ALPN h2) to corral, HTTP/1.1 to an nginx "return 200" backend,
# with the upstream's keepalive at each value given, in alternating rounds.
# Prints per round req/s, corral's CPU time per request (user+system over
# the round / requests) and the connections the backend accepted during the
# round (its stub_status), then the medians.  A benchmark, not a test.
#
# usage: tests/bench/upstream-keepalive.sh [-d SECONDS] [-r ROUNDS] [-c CLIENTS] [-m STREAMS]
#            [-b CORRAL_BINARY] [KEEPALIVE...]      (default: 64 512, 10 x 32)
set -u
D=5 R=3 C=10 M=32 BIN=build/corral
while getopts "d:r:c:m:b:" o; do
  case $o in d) D=$OPTARG ;; r) R=$OPTARG ;; c) C=$OPTARG ;; m) M=$OPTARG ;; b) BIN=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
values=("$@")
((${#values[@]})) || values=(64 512)
cd "$(dirname "$0")/../.." || exit 1
. tests/bench/lib.sh
bench_need upstream-keepalive "nginx-light nghttp2-client openssl curl" nginx h2load openssl curl
bench_tmp
bench_cert "$tmp"
be=18180 px=18194
cat >"$tmp/backend.conf" <<EOF
worker_processes 1; daemon off; pid $tmp/b.pid; error_log $tmp/b.err warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$be backlog=4096;
    location / { return 200 "hello world\n"; }
    location = /stub { stub_status; } } }
EOF
bench_start nginx -c "$tmp/backend.conf"
bench_wait $be
accepts() { curl -s "http://127.0.0.1:$be/stub" | awk 'NR==3{print $1}'; }
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
hz=$(getconf CLK_TCK)
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
declare -A rps cpu conns
for r in $(seq "$R"); do
  for k in "${values[@]}"; do
    cat >"$tmp/corral.conf" <<EOF
workers 1;
keepalive_requests 1000000;
error_log $tmp/corral.err warn;
upstream backend { server 127.0.0.1:$be; keepalive $k; }
server { listen 127.0.0.1:$px tls http2; tls_certificate $tmp/cert.pem; tls_certificate_key $tmp/key.pem;
  location / { proxy_pass http://backend; } }
EOF
    bench_start "$BIN" -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1
    cp=$started
    bench_wait $px https
    a0=$(accepts) t0=$(ticks $cp)
    out=$(h2load -c "$C" -m "$M" -D "$D" --warm-up-time=1 "https://127.0.0.1:$px/" 2>&1)
    a1=$(accepts) t1=$(ticks $cp)
    kill $cp; wait $cp 2>/dev/null
    n=$(awk '/^requests:/{print $8}' <<<"$out")
    s=$(awk '/^finished in/{gsub(",","",$4); print $4}' <<<"$out")
    us=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="${n:-0}" 'BEGIN{ if (n>0) printf "%.2f", d/hz*1e6/n; else print 0 }')
    printf "round %d keepalive %-4s rps=%-10s cpu_us/req=%-7s backend_connects=%s (of %s requests)\n" \
      "$r" "$k" "${s:-0}" "$us" "$((a1 - a0))" "${n:-0}"
    rps[$k]+="${s:-0} " cpu[$k]+="$us " conns[$k]+="$((a1 - a0)) "
  done
done
for k in "${values[@]}"; do
  printf "median keepalive %-4s rps=%s cpu_us/req=%s backend_connects=%s\n" "$k" \
    "$(median "${rps[$k]}")" "$(median "${cpu[$k]}")" "$(median "${conns[$k]}")"
done
