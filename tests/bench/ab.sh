#!/usr/bin/env bash
# Two builds of corral against each other, as a proxy in front of the same
# nginx backend, in alternating rounds: for a change that must not cost CPU.
# Prints, per round and as medians, each build's requests/s and its CPU time
# per request (user+system of its process over the round / requests), then
# the ratio B/A of CPU per request as the median of the per-round ratios,
# which holds better than either median when the machine's speed drifts.
#
# usage: tests/bench/ab.sh [-d SECONDS] [-c CONNECTIONS] [-r ROUNDS] [-C] [-b BYTES] CORRAL_A CORRAL_B
#   -C         "Connection: close" on every request (a new connection per request)
#   -b BYTES   the backend answers with a file of BYTES random bytes
#   -B CONF    build B runs with CONF instead (its ports 18080 and 18084 become
#              18180 and 18182): two configurations of one build, with the
#              same build given twice, e.g. -B tests/bench/policy.conf
# Ports: 18180 backend, 18181 build A, 18182 build B.
set -u
D=5 C=64 R=5 CLOSE= BYTES= CONF_B=
while getopts "d:c:r:Cb:B:" o; do
  case $o in d) D=$OPTARG;; c) C=$OPTARG;; r) R=$OPTARG;; C) CLOSE=1;; b) BYTES=$OPTARG;; B) CONF_B=$OPTARG;;
  *) exit 2;; esac
done
shift $((OPTIND - 1))
(($# == 2)) || { echo "usage: $0 [options] CORRAL_A CORRAL_B" >&2; exit 2; }
. "$(dirname "$0")/lib.sh"
bench_need ab "nginx-light wrk" nginx wrk
builds=("$1" "$2")
bench_tmp

mkdir -p "$tmp/root/files"
chmod -R a+rX "$tmp" # nginx workers run unprivileged
path=/
if [ -n "$BYTES" ]; then
  head -c "$BYTES" /dev/urandom >"$tmp/root/files/body.bin" && chmod a+r "$tmp/root/files/body.bin"
  path=/files/body.bin
fi
bench_nginx_backend "$tmp/backend.conf" 18180 1 "    location /files/ { root $tmp/root; }"
bench_start nginx -c "$tmp/backend.conf"
for i in 0 1; do
  cat >"$tmp/corral$i.conf" <<CONF
workers 1;
keepalive_requests 1000000;
upstream backend { server 127.0.0.1:18180; keepalive 64; }
server {
    listen 127.0.0.1:$((18181 + i)) deferred;
    location / { proxy_pass http://backend; }
}
CONF
  if [ "$i" = 1 ] && [ -n "$CONF_B" ]; then
    sed -e 's/127\.0\.0\.1:18080/127.0.0.1:18180/' -e 's/127\.0\.0\.1:18084/127.0.0.1:18182/' \
      "$CONF_B" >"$tmp/corral1.conf"
  fi
  bench_start "${builds[$i]}" -c "$tmp/corral$i.conf" >"$tmp/corral$i.log" 2>&1
  roots[$i]=$started
done
for p in 18180 18181 18182; do bench_wait $p; done
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
hz=$(getconf CLK_TCK)
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
declare -a rps_all cpu_all
ratios=
for r in $(seq "$R"); do
  for i in 0 1; do
    t0=$(ticks "${roots[$i]}")
    out=$(wrk ${CLOSE:+-H "Connection: close"} -t1 -c"$C" -d"${D}s" "http://127.0.0.1:$((18181 + i))$path" 2>&1)
    t1=$(ticks "${roots[$i]}")
    rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
    n=$(awk '/requests in/{print $1}' <<<"$out")
    us[$i]=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="${n:-0}" 'BEGIN{ if (n>0) printf "%.2f", d/hz*1e6/n; else print 0 }')
    bad=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr -s ' \n' ' ')
    printf "round %d %s rps=%-10s cpu_us/req=%-6s %s\n" "$r" "$([ $i = 0 ] && echo A || echo B)" "${rps:-0}" "${us[$i]}" "$bad"
    rps_all[$i]+="${rps:-0} "
    cpu_all[$i]+="${us[$i]} "
  done
  ratios+="$(awk -v a="${us[0]}" -v b="${us[1]}" 'BEGIN{printf "%.3f", (a>0 ? b/a : 0)}') "
done
for i in 0 1; do
  printf "median %s rps=%s cpu_us/req=%s (%s)\n" "$([ $i = 0 ] && echo A || echo B)" \
    "$(median "${rps_all[$i]}")" "$(median "${cpu_all[$i]}")" "${builds[$i]}"
done
echo "paired cpu_us/req B/A=$(median "$ratios") (per round: $ratios)"
