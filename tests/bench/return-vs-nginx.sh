#!/usr/bin/env bash
# corral's `return 200` against nginx's, same machine, same run: one worker
# each, keep-alive, wrk with 64 connections, alternating rounds.  Prints the
# median requests/s of each, the server CPU time per request (on a 2-CPU
# machine wrk itself can be the limit, and then CPU per request is where the
# servers differ), and the ratios corral/nginx.
#
# usage: tests/bench/return-vs-nginx.sh [-d SECONDS] [-c CONNECTIONS] [-r ROUNDS] [-t WRK_THREADS] [-C]
#   -C   "Connection: close" on every request (a new connection per request)
set -u
D=5 C=64 R=3 T=1 CLOSE=
while getopts "d:c:r:t:C" o; do
  case $o in d) D=$OPTARG;; c) C=$OPTARG;; r) R=$OPTARG;; t) T=$OPTARG;; C) CLOSE=1;; *) exit 2;; esac
done
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
bench_need return-vs-nginx "nginx-light wrk" nginx wrk
BIN=$(bench_corral) || exit 2
bench_tmp

cat >"$tmp/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:18090 backlog=4096; location / { return 200 "hello world\n"; } }
}
CONF
cat >"$tmp/corral.conf" <<CONF
workers 1;
keepalive_requests 1000000;
server { listen 127.0.0.1:18091; location / { return 200 "hello world\n"; } }
CONF
bench_start nginx -c "$tmp/nginx.conf"
bench_start "$BIN" -c "$tmp/corral.conf" 2>"$tmp/corral.log"
corral_pid=$started
for p in 18090 18091; do bench_wait $p; done

nginx_pid=$(pgrep -f "nginx: worker process" -P "${pids[0]}")
cpu_ticks() { cat /proc/$1/task/*/stat 2>/dev/null | awk '{t += $14 + $15} END {print t}'; }
hz=$(getconf CLK_TCK)

declare -A all cpu
names=(nginx corral); ports=(18090 18091); server_pids=("$nginx_pid" "$corral_pid")
for r in $(seq "$R"); do
  for i in 0 1; do
    before=$(cpu_ticks "${server_pids[$i]}")
    out=$(wrk ${CLOSE:+-H "Connection: close"} -t"$T" -c"$C" -d"${D}s" --latency "http://127.0.0.1:${ports[$i]}/" 2>&1)
    after=$(cpu_ticks "${server_pids[$i]}")
    rps=$(awk '/Requests\/sec/{print $2}' <<<"$out"); p99=$(awk '$1=="99%"{print $2}' <<<"$out")
    total=$(awk '/requests in/{print $1}' <<<"$out")
    us=$(awk -v t=$((after - before)) -v hz="$hz" -v n="${total:-1}" 'BEGIN{printf "%.2f", t * 1e6 / hz / n}')
    bad=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr -s ' \n' ' ')
    printf "round %d %-7s rps=%-10s p99=%-8s cpu-us/req=%-6s %s\n" "$r" "${names[$i]}" "${rps:-0}" "${p99:--}" "$us" "$bad"
    all[${names[$i]}]+="${rps:-0} "
    cpu[${names[$i]}]+="$us "
  done
done
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
n=$(median "${all[nginx]}"); c=$(median "${all[corral]}")
nu=$(median "${cpu[nginx]}"); cu=$(median "${cpu[corral]}")
printf "median nginx  rps=%s cpu-us/req=%s\nmedian corral rps=%s cpu-us/req=%s\n" "$n" "$nu" "$c" "$cu"
awk -v c="$c" -v n="$n" -v cu="$cu" -v nu="$nu" \
  'BEGIN{printf "ratio corral/nginx: rps=%.3f  requests per CPU-second=%.3f\n", c/n, nu/cu}'
