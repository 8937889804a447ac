#!/usr/bin/env bash
# The HTTP cache against its peers, on loopback, in front of the same nginx
# backend, one worker each where the peer allows it: nginx (proxy_cache,
# worker_processes 1), HAProxy (its cache section, nbthread 1), Varnish
# (malloc storage, one thread pool: Varnish runs a thread per connection
# and cannot be held to one) and corral (proxy_cache, workers 1).  A
# benchmark, not a test: it prints numbers and never fails on them.
#
#   hits: one object of BYTES (-b; 12, 65536, 1048576...) stored by every
#     cache first, then wrk -t1 -cC keep-alive for D seconds per round,
#     alternating servers, R rounds: req/s and the server's CPU time per
#     request (user+system ticks of its process tree over the round divided
#     by the requests served), the medians, and "paired", the median of
#     the per-round ratios corral/best peer in requests per CPU-second.
#   -z: 10,000 keys (/k/1 .. /k/10000, 1 KB each) drawn from a Zipf
#     distribution by tests/bench/cache-zipf.lua, each cache cold at the
#     start: its hit ratio (1 - the backend's requests / the requests
#     served) and CPU per request, side by side.
#
# usage: tests/bench/cache-peers.sh [-b BYTES] [-z] [-d SECONDS] [-c CONNECTIONS] [-r ROUNDS]
set -u
D=5 C=64 R=3 BYTES=12 ZIPF=
while getopts "b:zd:c:r:" o; do
  case $o in b) BYTES=$OPTARG;; z) ZIPF=1;; d) D=$OPTARG;; c) C=$OPTARG;; r) R=$OPTARG;; *) exit 2;; esac
done
cd "$(dirname "$0")/../.."
for b in nginx:nginx-light haproxy:haproxy varnishd:varnish wrk:wrk curl:curl; do
  command -v "${b%%:*}" >/dev/null || PATH=$PATH:/usr/sbin command -v "${b%%:*}" >/dev/null ||
    { echo "cache-peers: needs ${b#*:} (apt-get install ${b#*:})" >&2; exit 2; }
done
PATH=$PATH:/usr/sbin
[ -x build/corral ] || ninja build/corral >/dev/null || exit 2
. tests/bench/lib.sh
bench_tmp
chmod a+rx "$tmp"
mkdir -p "$tmp/root" "$tmp/ncache" "$tmp/ccache"
head -c "$BYTES" /dev/urandom >"$tmp/root/obj.bin"
head -c 1024 /dev/urandom >"$tmp/root/k.bin"

# Ports: 18120 backend, 18121 nginx, 18122 HAProxy, 18123 Varnish, 18124 corral.
cat >"$tmp/backend.conf" <<CONF
worker_processes 1; daemon off; pid $tmp/backend.pid; error_log $tmp/backend.err warn;
events { worker_connections 4096; }
http {
  access_log $tmp/backend.access; keepalive_requests 1000000;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:18120 backlog=4096; root $tmp/root;
    add_header Cache-Control "max-age=3600";
    location /k/ { try_files /k.bin =404; }
  }
}
CONF
bench_start nginx -c "$tmp/backend.conf" >"$tmp/backend.log" 2>&1

names=() ports=() roots=()
start() { # NAME PORT CMD...: starts a server in the background
  local name=$1 port=$2
  shift 2
  bench_start "$@" >"$tmp/$name.log" 2>&1
  roots+=("$started"); names+=("$name"); ports+=("$port")
}
cat >"$tmp/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $tmp/nginx.pid; error_log $tmp/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; sendfile on; tcp_nopush on;
  upstream backend { server 127.0.0.1:18120; keepalive 64; }
  proxy_cache_path $tmp/ncache levels=1:2 keys_zone=n:10m max_size=1g;
  server {
    listen 127.0.0.1:18121 backlog=4096;
    location / { proxy_pass http://backend; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_cache n; }
  }
}
CONF
cat >"$tmp/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
cache c
  total-max-size 1024
  max-object-size 2000000
  max-age 3600
frontend f
  bind 127.0.0.1:18122
  default_backend b
backend b
  http-request cache-use c
  http-response cache-store c
  server s 127.0.0.1:18120
CONF
cat >"$tmp/corral.conf" <<CONF
workers 1;
keepalive_requests 1000000;
access_log off;
upstream backend { server 127.0.0.1:18120; keepalive 64; }
proxy_cache_path $tmp/ccache levels=1:2 keys_zone=c:10m max_size=1g;
server {
  listen 127.0.0.1:18124;
  location / { proxy_pass http://backend; proxy_cache c; }
}
CONF
start nginx 18121 nginx -c "$tmp/nginx.conf"
start haproxy 18122 haproxy -f "$tmp/haproxy.cfg"
start varnish 18123 varnishd -F -n "$tmp/varnish" -a 127.0.0.1:18123 -b 127.0.0.1:18120 \
  -s malloc,1g -p thread_pools=1
start corral 18124 build/corral -c "$tmp/corral.conf"

for i in "${!ports[@]}"; do # wait until each answers, and store the object
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${ports[$i]}/obj.bin" && break; sleep 0.1; done
  for _ in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:${ports[$i]}/obj.bin"; done
done

tree() { local p=$1 c; echo "$p"; for c in $(pgrep -P "$p"); do tree "$c"; done; }
ticks() { # user+system clock ticks of a process and its descendants
  local t=0 p
  for p in $(tree "$1"); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
backend_requests() { wc -l <"$tmp/backend.access"; }

if [ -n "$ZIPF" ]; then
  for i in "${!names[@]}"; do
    b0=$(backend_requests); t0=$(ticks "${roots[$i]}")
    out=$(wrk -t1 -c"$C" -d"${D}s" -s tests/bench/cache-zipf.lua "http://127.0.0.1:${ports[$i]}" 2>&1)
    t1=$(ticks "${roots[$i]}"); b1=$(backend_requests)
    n=$(awk '/requests in/{print $1}' <<<"$out"); rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
    awk -v n="${n:-0}" -v b=$((b1 - b0)) -v d=$((t1 - t0)) -v hz="$hz" -v name="${names[$i]}" -v rps="$rps" \
      'BEGIN{ if (n > 0) printf "zipf %-8s rps=%-10s hit-ratio=%.3f backend=%d cpu_us/req=%.2f\n", name, rps, 1 - b / n, b, d / hz * 1e6 / n }'
  done
  exit 0
fi

declare -A rps_of cpu_of round_rps round_cpu
for r in $(seq "$R"); do
  for i in "${!names[@]}"; do
    b0=$(backend_requests); t0=$(ticks "${roots[$i]}")
    out=$(wrk -t1 -c"$C" -d"${D}s" --latency "http://127.0.0.1:${ports[$i]}/obj.bin" 2>&1)
    t1=$(ticks "${roots[$i]}"); b1=$(backend_requests)
    rps=$(awk '/Requests\/sec/{print $2}' <<<"$out"); p99=$(awk '$1=="99%"{print $2}' <<<"$out")
    n=$(awk '/requests in/{print $1}' <<<"$out")
    us=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="${n:-0}" 'BEGIN{ if (n>0) printf "%.2f", d/hz*1e6/n; else print 0 }')
    bad=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr -s ' \n' ' ')
    printf "round %d %-8s rps=%-10s p99=%-8s cpu_us/req=%-7s backend=%d %s\n" "$r" "${names[$i]}" "${rps:-0}" \
      "${p99:--}" "$us" $((b1 - b0)) "$bad"
    rps_of[${names[$i]}]+="${rps:-0} "; cpu_of[${names[$i]}]+="$us "
    round_rps[$r,${names[$i]}]=${rps:-0}; round_cpu[$r,${names[$i]}]=$us
  done
done
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for n in "${names[@]}"; do
  printf "median %-8s rps=%s cpu_us/req=%s\n" "$n" "$(median "${rps_of[$n]}")" "$(median "${cpu_of[$n]}")"
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
echo "paired corral/best-peer rps=$(median "${pr[*]}") requests-per-cpu-second=$(median "${pc[*]}") (per round: ${pr[*]} / ${pc[*]})"
