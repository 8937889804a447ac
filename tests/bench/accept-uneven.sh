#!/usr/bin/env bash
# How the daemon's accept modes hold up under uneven work, against nginx:
# two workers each in front of one nginx backend, one request per connection
# at a fixed rate, one in 50 on a path whose regex location backtracks for
# about 20 ms of CPU.  Servers take turns in each round; prints the cheap
# requests' p50/p99/p99.9 (ms, connect() to the answer) per server per round,
# then the medians.  Each server's CPU per heavy request is measured first.
#
# The regex is ^/a*a*a*a*a*$ against /aaa...ab: its cost grows as the fourth
# power of the length, so the length tunes it finely, and at 88 a's it stays
# below PCRE2's default match limit (10 million), which both servers keep; at
# about 110 the limit ends the match early (nginx then answers 500).
#
# usage: tests/bench/accept-uneven.sh [-r ROUNDS] [-d SECONDS] [-q RATE] [-n A_COUNT]
#   -q   connections per second in all (default 500; at 1000 a 2-CPU machine
#        shared with builds fell behind: p99 of 80 ms to 7 s); -n the heavy path's
#        length in a's (default 88, about 21 ms of CPU here)
set -u
R=3 D=10 Q=500 N=88
while getopts "r:d:q:n:" o; do
  case $o in r) R=$OPTARG;; d) D=$OPTARG;; q) Q=$OPTARG;; n) N=$OPTARG;; *) exit 2;; esac
done
cd "$(dirname "$0")/../.." || exit 2
command -v nginx >/dev/null || { echo "accept-uneven: needs nginx (apt-get install nginx-light)" >&2; exit 2; }
[ -x build/corral ] || ninja build/corral >/dev/null || exit 2
bench=tests/bench
heavy=/$(printf "%${N}s" "" | tr ' ' a)b
. tests/bench/lib.sh
bench_tmp

names=(corral-balanced corral-reuseport corral-roundrobin corral-exclusive nginx-reuseport nginx-default)
ports=(18141 18142 18143 18144 18145 18146)
sed "s,TMP,$tmp," $bench/accept-uneven-backend.conf >"$tmp/backend.conf"
bench_start nginx -c "$tmp/backend.conf"
server_pids=()
for i in "${!names[@]}"; do
  n=${names[$i]}
  if [ "${n%%-*}" = corral ]; then
    sed -e "s,WAKEUP,${n#corral-}," -e "s,PORT,${ports[$i]}," $bench/accept-uneven.conf >"$tmp/$n.conf"
    bench_start build/corral -c "$tmp/$n.conf" 2>"$tmp/$n.log"
  else
    opt=; [ "$n" = nginx-reuseport ] && opt=reuseport
    sed -e "s,TMP,$tmp," -e "s,PORT,${ports[$i]}," -e "s,REUSEPORT,$opt," \
      $bench/accept-uneven-nginx.conf >"$tmp/$n.conf"
    bench_start nginx -c "$tmp/$n.conf"
  fi
  server_pids+=("$started")
done
for p in 18140 "${ports[@]}"; do bench_wait "$p"; done
# A port still held by someone else would measure the wrong server.
for p in "${pids[@]}"; do
  kill -0 "$p" 2>/dev/null || { echo "accept-uneven: a server did not start (port in use?)" >&2; exit 2; }
done
for n in "${names[@]}"; do
  [ -f "$tmp/$n.log" ] && grep -o "resolved to .*" "$tmp/$n.log" | sed "s/^/$n: wakeup /"
done

# CPU time of a server's threads and worker processes, in ns.
cpu_ns() {
  local p
  for p in $1 $(pgrep -P "$1"); do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{t += $1} END {printf "%.0f\n", t}'
}
# What one request on PATH costs the server in CPU, over 20 of them.
cost_ms() {
  local before after
  before=$(cpu_ns "$1")
  for _ in $(seq 20); do curl -s -o /dev/null -H "Connection: close" "http://127.0.0.1:$2$3"; done
  after=$(cpu_ns "$1")
  awk -v n=$((after - before)) 'BEGIN {printf "%.2f", n / 20 / 1e6}'
}
for i in "${!names[@]}"; do
  h=$(cost_ms "${server_pids[$i]}" "${ports[$i]}" "$heavy")
  c=$(cost_ms "${server_pids[$i]}" "${ports[$i]}" /)
  printf "cpu per request %-18s heavy %s ms, cheap %s ms\n" "${names[$i]}" "$h" "$c"
done
grep -h "pcre2_match" "$tmp"/*.err 2>/dev/null | head -1 | sed 's/^/nginx error (match limit?): /'

declare -A p50 p99 p999
for r in $(seq "$R"); do
  # Rotate the order each round, so that no server always follows the same one.
  for k in "${!names[@]}"; do
    i=$(((k + r - 1) % ${#names[@]}))
    out=$(timeout $((D + 30)) python3 $bench/accept-uneven-client.py "${ports[$i]}" --rate "$Q" \
      --seconds "$D" --heavy-path "$heavy")
    load=$(cut -d' ' -f1 /proc/loadavg)
    printf "round %d %-18s %s load=%s\n" "$r" "${names[$i]}" "$out" "$load"
    p50[${names[$i]}]+="$(sed -n 's/.*cheap.* p50=\([^ ]*\).*heavy.*/\1/p' <<<"$out") "
    p99[${names[$i]}]+="$(sed -n 's/.* p99=\([^ ]*\).*/\1/p' <<<"$out") "
    p999[${names[$i]}]+="$(sed -n 's/.* p99\.9=\([^ ]*\).*/\1/p' <<<"$out") "
  done
done
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for n in "${names[@]}"; do
  printf "median %-18s cheap p50=%s p99=%s p99.9=%s ms\n" "$n" "$(median "${p50[$n]}")" \
    "$(median "${p99[$n]}")" "$(median "${p999[$n]}")"
done
