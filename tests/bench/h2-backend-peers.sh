#!/usr/bin/env bash
# HTTP/2 to the backend, side by side on loopback: h2load over TLS (ALPN h2)
# to each proxy, and each proxy speaking h2c (HTTP/2 with prior knowledge)
# to the same backend, nginx "return 200" on a plain `listen ... http2`.
# One worker each, alternating rounds.  A benchmark, not a test: it never
# fails on the numbers.
#
#   nginx    grpc_pass grpc://be (nginx 1.22 has no proxy_http_version 2;
#            grpc_pass forwards any HTTP/2 request), upstream keepalive 64
#   HAProxy  server ... proto h2
#   h2o      proxy.http2.ratio: 100 needs h2o 2.3; Debian's h2o is older and
#            speaks only HTTP/1.1 to backends: it is left out (the script
#            says so when its version lacks the setting)
#   corral   tests/bench/proxy-h2up.conf: proxy_pass with proxy_http_version 2
#
# Prints per round req/s and each proxy's CPU time per request (user+system
# of its process tree over the round / requests), the medians, and the
# paired line: corral against the best peer of each round, median of the
# per-round ratios, for req/s and for requests per CPU-second.
#
# usage: tests/bench/h2-backend-peers.sh [-d SECONDS] [-r ROUNDS] [-c CLIENTS] [-m STREAMS]
set -u
D=5 R=3 C=100 M=1
while getopts "d:r:c:m:" o; do
  case $o in d) D=$OPTARG ;; r) R=$OPTARG ;; c) C=$OPTARG ;; m) M=$OPTARG ;; *) exit 2 ;; esac
done
cd "$(dirname "$0")/../.." || exit 1
for b in nginx haproxy h2load; do
  command -v $b >/dev/null || { echo "h2-backend-peers.sh: $b missing (scripts/deps.sh corral_bench_packages)" >&2; exit 2; }
done
[ -x build/corral ] || { echo "h2-backend-peers.sh: build/corral missing (ninja)" >&2; exit 2; }
. tests/bench/lib.sh
bench_tmp
chmod 755 "$tmp"
bench_cert "$tmp"
cat >"$tmp/backend.conf" <<EOF
worker_processes 1; daemon off; pid $tmp/b.pid; error_log $tmp/b.err warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  http2_max_concurrent_streams 1024;
  server { listen 127.0.0.1:18180 http2 backlog=4096;
    location / { return 200 "hello world\n"; } } }
EOF
cat >"$tmp/nginx.conf" <<EOF
worker_processes 1; daemon off; pid $tmp/n.pid; error_log $tmp/n.err warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream be { server 127.0.0.1:18180; keepalive 64; keepalive_requests 1000000; }
  server { listen 127.0.0.1:18191 ssl http2 backlog=4096;
    ssl_certificate $tmp/cert.pem; ssl_certificate_key $tmp/key.pem;
    location / { grpc_pass grpc://be; } } }
EOF
bench_haproxy_h2 "$tmp/haproxy.cfg" 18192 "127.0.0.1:18180 proto h2"
sed -e "s,CRT,$tmp/cert.pem," -e "s,KEY,$tmp/key.pem," tests/bench/proxy-h2up.conf >"$tmp/corral.conf"
bench_start nginx -c "$tmp/backend.conf"
bench_start nginx -c "$tmp/nginx.conf"; roots=("$started")
bench_start haproxy -f "$tmp/haproxy.cfg" -db >"$tmp/haproxy.log" 2>&1; roots+=("$started")
bench_start build/corral -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1; roots+=("$started")
names=(nginx haproxy corral) ports=(18191 18192 18194)
if command -v h2o >/dev/null && h2o --version | awk 'NR==1{split($3,v,"."); exit !(v[1]>2 || (v[1]==2 && v[2]>=3))}'; then
  cat >"$tmp/h2o.conf" <<EOF
num-threads: 1
error-log: $tmp/h2o.err
listen:
  host: 127.0.0.1
  port: 18193
  ssl:
    certificate-file: $tmp/cert.pem
    key-file: $tmp/key.pem
proxy.http2.ratio: 100
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:18180/
EOF
  bench_start h2o -c "$tmp/h2o.conf" >"$tmp/h2o.log" 2>&1; roots+=("$started")
  names+=(h2o); ports+=(18193)
else
  echo "h2o: $(h2o --version 2>/dev/null | head -1 || echo missing) has no proxy.http2.ratio (h2o 2.3+): left out"
fi
for p in "${ports[@]}"; do
  bench_wait "$p" https
  curl -sk --http2 -o /dev/null -w "port $p: %{http_code} over HTTP/%{http_version}\n" "https://127.0.0.1:$p/"
done
tree() { local p=$1 c; echo "$p"; for c in $(pgrep -P "$p"); do tree "$c"; done; }
ticks() { local t=0 p; for p in $(tree "$1"); do
  [ -r "/proc/$p/stat" ] && t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'))); done; echo "$t"; }
hz=$(getconf CLK_TCK)
declare -A all cpu round_rps round_cpu
for r in $(seq "$R"); do
  for i in "${!names[@]}"; do
    t0=$(ticks "${roots[$i]}")
    out=$(h2load -c "$C" -m "$M" -D "$D" --warm-up-time=1 "https://127.0.0.1:${ports[$i]}/" 2>&1)
    t1=$(ticks "${roots[$i]}")
    rps=$(awk '/^finished in/{gsub(",","",$4); print $4}' <<<"$out")
    n=$(awk '/^requests:/{print $8}' <<<"$out")
    bad=$(awk '/^requests:/{if ($10+$12>0) print "failed=" $10 " errored=" $12}' <<<"$out")
    us=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="${n:-0}" 'BEGIN{ if (n>0) printf "%.2f", d/hz*1e6/n; else print 0 }')
    printf "round %d %-8s rps=%-10s cpu_us/req=%-7s %s\n" "$r" "${names[$i]}" "${rps:-0}" "$us" "$bad"
    all[${names[$i]}]+="${rps:-0} "
    cpu[${names[$i]}]+="$us "
    round_rps[$r,${names[$i]}]=${rps:-0}
    round_cpu[$r,${names[$i]}]=$us
  done
done
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for n in "${names[@]}"; do
  printf "median %-8s rps=%s cpu_us/req=%s\n" "$n" "$(median "${all[$n]}")" "$(median "${cpu[$n]}")"
done
pr=() pc=()
for r in $(seq "$R"); do
  br=0 bc=0
  for n in "${names[@]}"; do
    [ "$n" = corral ] && continue
    awk -v m="${round_rps[$r,$n]}" -v b="$br" 'BEGIN{exit !(m>b)}' && br=${round_rps[$r,$n]}
    awk -v u="${round_cpu[$r,$n]}" -v b="$bc" 'BEGIN{exit !(u>0 && (b==0 || u<b))}' && bc=${round_cpu[$r,$n]}
  done
  pr+=("$(awk -v p="${round_rps[$r,corral]}" -v b="$br" 'BEGIN{printf "%.3f", (b>0 ? p/b : 0)}')")
  pc+=("$(awk -v u="${round_cpu[$r,corral]}" -v b="$bc" 'BEGIN{printf "%.3f", (u>0 ? b/u : 0)}')")
done
echo "paired corral/best-peer=$(median "${pr[*]}") cpu-efficiency corral/best-peer=$(median "${pc[*]}") (median of per-round ratios: ${pr[*]} / ${pc[*]})"
echo "--- corral log (tail)"
tail -3 "$tmp/corral.log"
