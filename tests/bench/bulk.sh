#!/usr/bin/env bash
# 100 MB downloads and uploads with curl through nginx, HAProxy, h2o and
# corral, each proxying to the same nginx backend with one worker: the wall
# time and each proxy's CPU time per transfer.  The peers run with
# ../shared/bench/peers' configs, plus what a 100 MB upload needs (nginx:
# client_max_body_size 0 and proxy_request_buffering off, so that it
# streams as the others do).
#
# usage: tests/bench/bulk.sh [-n TRANSFERS] [-m MEGABYTES] [-s on|off]
#        (default 3 transfers of 100 MB; -s: corral's proxy_splice, default on)
set -euo pipefail
N=3 MB=100 SPLICE=on
while getopts "n:m:s:" o; do
  case $o in n) N=$OPTARG;; m) MB=$OPTARG;; s) SPLICE=$OPTARG;; *) exit 2;; esac
done
cd "$(dirname "$0")/../.."
peers=${PEERS_DIR:-../shared/bench/peers}
. tests/bench/lib.sh
bench_need bulk "nginx-light haproxy h2o curl" nginx haproxy h2o curl
ninja build/corral >/dev/null
bench_tmp
for f in backend-nginx.conf proxy-nginx.conf proxy-haproxy.cfg proxy-h2o.conf; do
  sed -e "s|/tmp/lab-|$tmp/|g" "$peers/$f" >"$tmp/$f"
done
sed -i 's|^http {|http {\n  client_max_body_size 0;|' "$tmp/backend-nginx.conf"
sed -i 's|^http {|http {\n  client_max_body_size 0; proxy_request_buffering off;|' \
  "$tmp/proxy-nginx.conf"
mkdir -p "$tmp/root/files"
head -c $((MB * 1048576)) /dev/urandom >"$tmp/root/files/body.bin"
chmod -R a+rX "$tmp" # nginx workers run unprivileged
cat >"$tmp/corral.conf" <<CONF
workers 1;
proxy_splice $SPLICE;
client_max_body_size 0;
upstream backend { server 127.0.0.1:18080; keepalive 64; }
server { listen 127.0.0.1:18084; location / { proxy_pass http://backend; } }
CONF
bench_start nginx -c "$tmp/backend-nginx.conf"
bench_start nginx -c "$tmp/proxy-nginx.conf"; roots=("$started")
bench_start haproxy -f "$tmp/proxy-haproxy.cfg" -db >"$tmp/haproxy.log" 2>&1; roots+=("$started")
bench_start h2o -c "$tmp/proxy-h2o.conf" >"$tmp/h2o.log" 2>&1; roots+=("$started")
bench_start build/corral -c "$tmp/corral.conf" 2>"$tmp/corral.log"; roots+=("$started")
names=(nginx haproxy h2o corral) ports=(18081 18082 18083 18084)
for p in 18080 "${ports[@]}"; do bench_wait "$p"; done
tree() { local p=$1 c; echo "$p"; for c in $(pgrep -P "$p"); do tree "$c"; done; }
ticks() { # user+system clock ticks of a process and its children
  local t=0 p
  for p in $(tree "$1"); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
run() { # name root-pid port kind
  # Downloads fetch the file; uploads go to the backend's "return 200",
  # which reads and drops the body.
  local t0 c0 t1 c1 url="http://127.0.0.1:$3/files/body.bin" up="http://127.0.0.1:$3/"
  c0=$(ticks "$2"); t0=$(date +%s%N)
  for _ in $(seq "$N"); do
    if [ "$4" = download ]; then
      curl -sf -o /dev/null "$url"
    else
      curl -sf -o /dev/null --data-binary @"$tmp/root/files/body.bin" -H 'Expect:' "$up"
    fi
  done
  t1=$(date +%s%N); c1=$(ticks "$2")
  awk -v n="$1" -v k="$4" -v w=$((t1 - t0)) -v c=$((c1 - c0)) -v hz="$hz" -v N="$N" -v mb="$MB" \
    'BEGIN{printf "%-8s %-8s %5d MB: %7.0f ms wall  %6.0f ms CPU per transfer\n", k, n, mb, w/1e6/N, c*1000/hz/N}'
}
for kind in download upload; do
  for i in 0 1 2 3; do run "${names[$i]}" "${roots[$i]}" "${ports[$i]}" "$kind"; done
done
