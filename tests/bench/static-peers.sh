#!/usr/bin/env bash
# Static files and on-the-fly compression, side by side on loopback, one
# worker each, keep-alive, wrk -t1, alternating rounds.  A benchmark, not a
# test: it prints numbers and never fails on them.
#
#   files mode (default): one file of BYTES random bytes, served from the
#     same directory by nginx (sendfile, open_file_cache), h2o (file.dir),
#     Caddy (file_server, GOMAXPROCS=1) and corral (root, open_file_cache).
#   -o BINARY: also runs BINARY (an older build/corral) as "before" beside
#     corral, with the same configuration, and prints corral against it.
#   -z gzip|br|zstd: a 100 KB JSON document (repetitive, as API answers are)
#     from an nginx backend, compressed on the fly by the proxy in front of it
#     at level -l: nginx (gzip only) and corral; Caddy's `encode` for gzip and
#     zstd (its level is fixed).  Each proxy's compressed size is printed
#     too: the sizes must agree within 1% for the CPU figures to compare.
#
# Prints one line per server per round (req/s, p99 and the server's CPU time
# per request: user+system ticks of its process tree over the round divided
# by the requests served), the medians, and the line "paired": the median of
# the per-round ratios corral/best peer, steadier when the machine drifts.
#
# usage: tests/bench/static-peers.sh [-b BYTES] [-z CODING] [-l LEVEL] [-d SECONDS]
#                                    [-c CONNECTIONS] [-r ROUNDS] [-o BINARY]
set -u
D=5 C=64 R=3 BYTES=1024 CODING= LEVEL=1 OLD=
while getopts "b:z:l:d:c:r:o:" o; do
  case $o in b) BYTES=$OPTARG;; z) CODING=$OPTARG;; l) LEVEL=$OPTARG;; d) D=$OPTARG;;
             c) C=$OPTARG;; r) R=$OPTARG;; o) OLD=$(realpath "$OPTARG");; *) exit 2;; esac
done
cd "$(dirname "$0")/../.."
for b in nginx:nginx-light h2o:h2o caddy:caddy wrk:wrk curl:curl; do
  command -v "${b%%:*}" >/dev/null || { echo "static-peers: needs ${b#*:} (apt-get install ${b#*:})" >&2; exit 2; }
done
[ -x build/corral ] || ninja build/corral >/dev/null || exit 2
. tests/bench/lib.sh
bench_tmp
chmod a+rx "$tmp"
mkdir -p "$tmp/root"

# Ports: 18110 backend, 18111 nginx, 18112 h2o, 18113 Caddy, 18114 corral.
names=() ports=() roots=()
start() { # NAME PORT CMD...: starts a server in the background
  local name=$1 port=$2
  shift 2
  bench_start "$@" >"$tmp/$name.log" 2>&1
  roots+=("$started"); names+=("$name"); ports+=("$port")
}

if [ -z "$CODING" ]; then
  head -c "$BYTES" /dev/urandom >"$tmp/root/file.bin"
  path=/file.bin accept=
  cat >"$tmp/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $tmp/nginx.pid; error_log $tmp/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; sendfile on; tcp_nopush on;
  open_file_cache max=1000 inactive=60s;
  server { listen 127.0.0.1:18111 backlog=4096; root $tmp/root; }
}
CONF
  cat >"$tmp/h2o.conf" <<CONF
num-threads: 1
error-log: $tmp/h2o.err
listen: {host: 127.0.0.1, port: 18112}
hosts:
  default:
    paths:
      /: {file.dir: $tmp/root}
CONF
  cat >"$tmp/Caddyfile" <<CONF
{
  admin off
  auto_https off
}
http://127.0.0.1:18113 {
  root * $tmp/root
  file_server
}
CONF
  cat >"$tmp/corral.conf" <<CONF
workers 1;
keepalive_requests 1000000;
access_log off;
server {
  listen 127.0.0.1:18114;
  location / { root $tmp/root; open_file_cache max=1000 inactive=60s; }
}
CONF
  start nginx 18111 nginx -c "$tmp/nginx.conf"
  start h2o 18112 h2o -c "$tmp/h2o.conf"
  GOMAXPROCS=1 start caddy 18113 caddy run --adapter caddyfile --config "$tmp/Caddyfile"
else
  # A JSON array of records, as an API answers: compressible as real ones
  # are (about 5:1 with gzip -6), not a run of one byte.
  python3 - "$tmp/root/data.json" <<'PY'
import json, random, sys
random.seed(7)
words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
rows, size = [], 0
while size < 100 * 1024:
    row = {"id": len(rows), "name": " ".join(random.choice(words) for _ in range(3)),
           "score": round(random.random() * 1000, 3), "tags": random.sample(words, 3),
           "active": random.random() < 0.5}
    rows.append(row); size += len(json.dumps(row)) + 2
open(sys.argv[1], "w").write(json.dumps(rows, indent=1)[: 100 * 1024 - 2] + "\n]")
PY
  path=/data.json
  case $CODING in gzip) accept=gzip;; br) accept=br;; zstd) accept=zstd;; *) echo "static-peers: -z gzip|br|zstd" >&2; exit 2;; esac
  cat >"$tmp/backend.conf" <<CONF
worker_processes 1; daemon off; pid $tmp/backend.pid; error_log $tmp/backend.err warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; default_type application/json;
  server { listen 127.0.0.1:18110 backlog=4096; root $tmp/root; }
}
CONF
  bench_start nginx -c "$tmp/backend.conf" >"$tmp/backend.log" 2>&1
  if [ "$CODING" = gzip ]; then
    cat >"$tmp/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $tmp/nginx.pid; error_log $tmp/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:18110; keepalive 64; }
  gzip on; gzip_comp_level $LEVEL; gzip_types application/json; gzip_proxied any;
  server {
    listen 127.0.0.1:18111 backlog=4096;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
    start nginx 18111 nginx -c "$tmp/nginx.conf"
  fi
  if [ "$CODING" != br ]; then
    cat >"$tmp/Caddyfile" <<CONF
{
  admin off
  auto_https off
}
http://127.0.0.1:18113 {
  encode $CODING
  reverse_proxy 127.0.0.1:18110
}
CONF
    GOMAXPROCS=1 start caddy 18113 caddy run --adapter caddyfile --config "$tmp/Caddyfile"
  fi
  prefix=$CODING; [ "$CODING" = br ] && prefix=brotli   # the directives' names
  cat >"$tmp/corral.conf" <<CONF
workers 1;
keepalive_requests 1000000;
access_log off;
upstream backend { server 127.0.0.1:18110; keepalive 64; }
server {
  listen 127.0.0.1:18114;
  $prefix on; ${prefix}_comp_level $LEVEL; ${prefix}_types application/json;
  location / { proxy_pass http://backend; }
}
CONF
fi
start corral 18114 build/corral -c "$tmp/corral.conf"
if [ -n "$OLD" ]; then
  sed 's/127.0.0.1:18114/127.0.0.1:18115/' "$tmp/corral.conf" >"$tmp/before.conf"
  start before 18115 "$OLD" -c "$tmp/before.conf"
fi

for i in "${!ports[@]}"; do # wait until each answers
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${ports[$i]}$path" && break; sleep 0.1; done
  if [ -n "$accept" ]; then
    size=$(curl -s -H "Accept-Encoding: $accept" -o "$tmp/out" -w '%{size_download}' "http://127.0.0.1:${ports[$i]}$path")
    enc=$(curl -s -H "Accept-Encoding: $accept" -o /dev/null -D - "http://127.0.0.1:${ports[$i]}$path" |
          awk -F': ' 'tolower($1)=="content-encoding"{print $2}' | tr -d '\r')
    printf "size %-7s %s bytes (%s) of %s\n" "${names[$i]}" "$size" "${enc:-identity}" "$(stat -c %s "$tmp/root/data.json")"
  fi
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
declare -A rps_of cpu_of round_rps round_cpu
for r in $(seq "$R"); do
  for i in "${!names[@]}"; do
    t0=$(ticks "${roots[$i]}")
    out=$(wrk ${accept:+-H "Accept-Encoding: $accept"} -t1 -c"$C" -d"${D}s" --latency \
              "http://127.0.0.1:${ports[$i]}$path" 2>&1)
    t1=$(ticks "${roots[$i]}")
    rps=$(awk '/Requests\/sec/{print $2}' <<<"$out"); p99=$(awk '$1=="99%"{print $2}' <<<"$out")
    n=$(awk '/requests in/{print $1}' <<<"$out")
    us=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="${n:-0}" 'BEGIN{ if (n>0) printf "%.2f", d/hz*1e6/n; else print 0 }')
    bad=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr -s ' \n' ' ')
    printf "round %d %-7s rps=%-10s p99=%-8s cpu_us/req=%-7s %s\n" "$r" "${names[$i]}" "${rps:-0}" "${p99:--}" "$us" "$bad"
    rps_of[${names[$i]}]+="${rps:-0} "; cpu_of[${names[$i]}]+="$us "
    round_rps[$r,${names[$i]}]=${rps:-0}; round_cpu[$r,${names[$i]}]=$us
  done
done
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for n in "${names[@]}"; do
  printf "median %-7s rps=%s cpu_us/req=%s\n" "$n" "$(median "${rps_of[$n]}")" "$(median "${cpu_of[$n]}")"
done
((${#names[@]} > 1)) || exit 0
pr=() pc=()
for r in $(seq "$R"); do
  br=0 bc=0
  for n in "${names[@]}"; do
    [ "$n" = corral ] || [ "$n" = before ] && continue
    awk -v m="${round_rps[$r,$n]}" -v b="$br" 'BEGIN{exit !(m>b)}' && br=${round_rps[$r,$n]}
    awk -v u="${round_cpu[$r,$n]}" -v b="$bc" 'BEGIN{exit !(u>0 && (b==0 || u<b))}' && bc=${round_cpu[$r,$n]}
  done
  pr+=("$(awk -v p="${round_rps[$r,corral]}" -v b="$br" 'BEGIN{printf "%.3f", (b>0 ? p/b : 0)}')")
  pc+=("$(awk -v u="${round_cpu[$r,corral]}" -v b="$bc" 'BEGIN{printf "%.3f", (u>0 ? b/u : 0)}')")
done
echo "paired corral/best-peer rps=$(median "${pr[*]}") cpu-efficiency=$(median "${pc[*]}") (per round: ${pr[*]} / ${pc[*]})"
[ -n "$OLD" ] || exit 0
pr=() pc=()
for r in $(seq "$R"); do
  pr+=("$(awk -v p="${round_rps[$r,corral]}" -v b="${round_rps[$r,before]}" 'BEGIN{printf "%.3f", (b>0 ? p/b : 0)}')")
  pc+=("$(awk -v u="${round_cpu[$r,corral]}" -v b="${round_cpu[$r,before]}" 'BEGIN{printf "%.3f", (u>0 ? b/u : 0)}')")
done
echo "paired corral/before rps=$(median "${pr[*]}") cpu-efficiency=$(median "${pc[*]}") (per round: ${pr[*]} / ${pc[*]})"
