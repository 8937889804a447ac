#!/usr/bin/env bash
# corral proxying HTTP/1.1 keep-alive clients to an nginx `return 200` over
# HTTP/1.1 keep-alive (tests/bench/proxy.conf, the configuration of
# ../shared/bench/peers/run.sh), counted over a fixed number of requests
# rather than timed.  A benchmark, not a test.
#
# Modes:
#   callgrind  corral under valgrind: user-space instructions per request,
#           the difference of a run of N and one of N/6 on fresh
#           connections over the difference of their requests, so that
#           start-up and connection set-up cancel out; the dump of the
#           longer run is kept as /tmp/h1-count.callgrind for
#           callgrind_annotate
#   strace  system calls per request by kind (strace -f -c of a run of N
#           requests after a warming run)
#
# usage: tests/bench/h1-count.sh [-m callgrind|strace] [-b CORRAL] [-n N] [-c CLIENTS]
# Ports: 18150 backend, 18151 corral.
set -u
MODE=callgrind BIN= N=60000 C=64
while getopts "m:b:n:c:" o; do
  case $o in m) MODE=$OPTARG;; b) BIN=$OPTARG;; n) N=$OPTARG;; c) C=$OPTARG;;
             *) sed -n "/^# usage:/p" "$0" >&2; exit 2;; esac
done
case $MODE in callgrind | strace) ;; *) echo "h1-count: -m callgrind or strace" >&2; exit 2 ;; esac
cd "$(dirname "$0")/../.." || exit 2
. tests/bench/lib.sh
bench_need h1-count "nginx-light nghttp2-client curl valgrind strace" nginx h2load curl "$(case $MODE in callgrind) echo valgrind ;; *) echo strace ;; esac)"
[ "$MODE" = callgrind ] && bench_need h1-count valgrind callgrind_control
BIN=$(bench_corral "$BIN") || exit 2
bench_tmp
bench_nginx_backend "$tmp/backend.conf" 18150
bench_start nginx -c "$tmp/backend.conf"
bench_wait 18150 || { echo "h1-count: the backend does not answer" >&2; exit 1; }
sed -e 's,18084,18151,' -e 's,127.0.0.1:18080,127.0.0.1:18150,' tests/bench/proxy.conf >"$tmp/corral.conf"
url=http://127.0.0.1:18151/

echo "# $C clients, $N requests, $MODE; machine busy $(bench_busy_pct)% before"
case $MODE in
  callgrind)
    bench_start valgrind --tool=callgrind --compress-strings=no --callgrind-out-file="$tmp/cg.out" \
      "$BIN" -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1
    ;;
  strace)
    bench_start "$BIN" -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1
    ;;
esac
pid=$started
for _ in 1 2 3 4 5 6; do bench_wait 18151 http "$pid" && break; done ||
  { echo "h1-count: corral does not answer" >&2; exit 1; }
# A first run opens the backend connections and warms the caches.
h2load --h1 -c "$C" -n $((N / 10)) "$url" >/dev/null 2>&1

# succeeded FILE: the requests h2load's output in FILE says succeeded.
succeeded() { awk '/^requests:/{print $8}' "$1"; }

if [ "$MODE" = strace ]; then
  strace -f -c -o "$tmp/trace" -p "$pid" &
  tracer=$!
  sleep 1
  h2load --h1 -c "$C" -n "$N" "$url" >"$tmp/h2load.out" 2>&1
  kill -INT "$tracer"
  wait "$tracer" 2>/dev/null
  n=$(succeeded "$tmp/h2load.out")
  echo "  $N requests ($n succeeded)"
  awk -v n="$n" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
      printf "  %-16s %8d %7.3f/req\n", $NF, $4, $4 / n; t += $4 }
    END{printf "system calls %.3f per request\n", t / n}' "$tmp/trace"
  exit 0
fi

total() { awk '/^(summary|totals):/{print $2; exit}' "$1"; }
declare -A ir
for k in $((N / 6)) "$N"; do
  callgrind_control -z "$pid" >/dev/null 2>&1
  h2load --h1 -c "$C" -n "$k" "$url" >"$tmp/h2load.out" 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  ir[$k]=$(total "$(ls -t "$tmp"/cg.out.* | head -1)")
  echo "  $k requests ($(succeeded "$tmp/h2load.out") succeeded): ${ir[$k]} Ir"
done
cp "$(ls -t "$tmp"/cg.out.* | head -1)" /tmp/h1-count.callgrind
awk -v c="$C" -v a="${ir[$N]}" -v b="${ir[$((N / 6))]}" -v n=$((N - N / 6)) \
  'BEGIN{printf "corral %d clients: %.0f instructions per request\n", c, (a - b) / n}'
