#!/usr/bin/env bash
# HTTP/3 on loopback: corral against Caddy 2.6 (quic-go, the only HTTP/3
# server in Debian), each proxying to the same HTTP/1.1 backend (nginx
# `return 200 "hello world\n"`), one worker for corral and GOMAXPROCS=1 for
# Caddy; and corral's HTTP/3 against its own HTTP/2 over TLS on the same
# loads.  One ECDSA P-256 certificate for all (generated for the run).  A
# benchmark, not a test: it never fails on the numbers.
#
# Loads: 100 connections x 1 stream, and 10 connections x 32 streams.  Each
# round runs every server once per load, in turn:
#   corral-h3   build/h3load against corral's `listen ... quic`
#   caddy-h3    build/h3load against Caddy's HTTP/3
#   corral-h2   h2load (over TLS, ALPN h2) against corral's `listen ... tls`
#   caddy-h2    h2load against Caddy's HTTP/2 (what HTTP/3 costs Caddy)
# and prints requests/s, p99 (h3load) and the server's CPU time per request:
# user + system time of the server's process tree over the round (from
# /proc/PID/stat) divided by the requests completed.  At the end, for each
# load, the medians, and the paired median (over rounds) of:
#   caddy-h3 CPU/req / corral-h3 CPU/req   (goal >= 2: requests per CPU-s)
#   corral-h3 CPU/req / corral-h2 CPU/req  (goal <= 1.5)
#   caddy-h3 CPU/req / caddy-h2 CPU/req    (the same for Caddy)
#
# h3load sends SNI `localhost`, the certificate's name: Caddy answers a
# handshake without SNI, or for a name it has no certificate for, with TLS
# alert 80 (internal_error), a QUIC CRYPTO_ERROR 0x150.  Caddy's site has
# no host name: a request whose Host no site matches gets an empty 200 from
# Caddy, without the backend.  Every h3load run checks the body bytes: 12
# a request ("hello world\n"), else the line says "BAD BODY".
#
# usage: tests/bench/h3-peers.sh [-d SECONDS] [-r ROUNDS] [-b CORRAL] [-l LOADS]
#   -d, -r    seconds per run (5) and rounds (3)
#   -b PATH   the corral binary (default build/corral)
#   -l LOADS  the loads, CxM separated by spaces (default "100x1 10x32")
# Ports: 18120 backend, 18121 corral (TCP: TLS, UDP: QUIC), 18122 Caddy.
set -u
D=5 R=3 BIN= LOADS="100x1 10x32"
while getopts "d:r:b:l:" o; do
  case $o in d) D=$OPTARG;; r) R=$OPTARG;; b) BIN=$OPTARG;; l) LOADS=$OPTARG;;
             *) sed -n "/^# usage:/,/^#   -l LOADS/s/^# \{0,1\}//p" "$0" >&2; exit 2;; esac
done
cd "$(dirname "$0")/../.." || exit 2
. tests/bench/lib.sh
bench_need h3-peers "nginx-light caddy nghttp2-client openssl curl" nginx caddy h2load openssl curl
BIN=$(bench_corral "$BIN") || exit 2
H3LOAD=$(bench_build h3load) || exit 2
bench_tmp

bench_cert "$tmp"
bench_nginx_backend "$tmp/backend.conf" 18120
cat >"$tmp/corral.conf" <<CONF
workers 1;
keepalive_requests 1000000;
access_log off;
upstream backend {
  server 127.0.0.1:18120;
  keepalive 64;
}
server {
  listen 127.0.0.1:18121 tls;
  listen 127.0.0.1:18121 quic reuseport;
  tls_certificate $tmp/cert.pem;
  tls_certificate_key $tmp/key.pem;
  location / { proxy_pass http://backend; }
}
CONF
cat >"$tmp/Caddyfile" <<CONF
{
  admin off
  auto_https off
  servers {
    protocols h1 h2 h3
  }
}
https://:18122 {
  bind 127.0.0.1
  tls $tmp/cert.pem $tmp/key.pem
  reverse_proxy 127.0.0.1:18120
}
CONF

tree() { local p=$1 c; echo "$p"; for c in $(pgrep -P "$p"); do tree "$c"; done; }
ticks() { # user+system clock ticks of a process and all its descendants (threads included)
  local t=0 p
  for p in $(tree "$1"); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$t"
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
hz=$(getconf CLK_TCK)

busy_pct=$(bench_busy_pct)

bench_start nginx -c "$tmp/backend.conf"
bench_start "$BIN" -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1; corral=$started
bench_start env HOME="$tmp" XDG_DATA_HOME="$tmp" XDG_CONFIG_HOME="$tmp" GOMAXPROCS=1 \
  caddy run --adapter caddyfile --config "$tmp/Caddyfile" >"$tmp/caddy.log" 2>&1; caddy=$started
for p in "18120 http" "18121 https" "18122 https"; do
  bench_wait $p || { echo "h3-peers: port ${p% *} does not answer" >&2; cat "$tmp/corral.log" "$tmp/caddy.log" >&2; exit 1; }
done

echo "# corral: $BIN (1 worker); Caddy $(caddy version | cut -d' ' -f1) (GOMAXPROCS=1); $R rounds of ${D}s"
echo "# $(nproc) CPUs, ${busy_pct}% busy in the second before the servers started"

# run NAME PID LOAD: one run; prints its line and sets rps and us (CPU us/req).
run() {
  local name=$1 pid=$2 c=${3%x*} m=${3#*x} out t0 t1 n p99=- bad= bytes fails
  t0=$(ticks "$pid")
  case $name in
    corral-h3) out=$("$H3LOAD" -c "$c" -m "$m" -D "$D" --sni localhost https://127.0.0.1:18121/ 2>&1) ;;
    caddy-h3) out=$("$H3LOAD" -c "$c" -m "$m" -D "$D" --sni localhost https://127.0.0.1:18122/ 2>&1) ;;
    corral-h2) out=$(h2load -c "$c" -m "$m" -D "$D" https://127.0.0.1:18121/ 2>&1) ;;
    caddy-h2) out=$(h2load -c "$c" -m "$m" -D "$D" --connect-to=127.0.0.1:18122 https://localhost:18122/ 2>&1) ;;
  esac
  t1=$(ticks "$pid")
  if [ "${name#*-}" = h3 ]; then
    n=$(awk '/^requests:/{print $4}' <<<"$out")
    rps=$(awk '/^finished in/{print $4}' <<<"$out")
    p99=$(awk '/^latency ms:/{print $8}' <<<"$out")
    fails=$(awk '/^requests:/{print $6}' <<<"$out")
    bytes=$(awk '/^body bytes:/{print $3}' <<<"$out")
    [ "${bytes:-0}" = $((12 * ${n:-0})) ] || bad=" BAD BODY ($bytes bytes)"
  else
    n=$(awk '/^requests:/{print $8}' <<<"$out")
    fails=$(awk '/^requests:/{print $10}' <<<"$out")
    rps=$(awk '/^finished in/{print $4}' <<<"$out")
  fi
  us=$(awk -v t=$((t1 - t0)) -v n="${n:-0}" -v hz="$hz" 'BEGIN{printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0)}')
  printf "%-6s %-10s rps=%-10s p99_ms=%-8s cpu_us/req=%-7s done=%s failed=%s%s\n" "$3" "$name" \
    "${rps:-0}" "$p99" "$us" "${n:-0}" "${fails:-?}" "$bad"
}

names=(corral-h3 caddy-h3 corral-h2 caddy-h2)
declare -A pidof=([corral-h3]=$corral [caddy-h3]=$caddy [corral-h2]=$corral [caddy-h2]=$caddy)
declare -A rpsall usall
for load in $LOADS; do
  ratio_caddy=() ratio_h2=() ratio_caddy_h2=()
  for r in $(seq "$R"); do
    declare -A u=()
    for n in "${names[@]}"; do
      run "$n" "${pidof[$n]}" "$load"
      rpsall[$load,$n]+="${rps:-0} "; usall[$load,$n]+="$us "; u[$n]=$us
    done
    ratio_caddy+=("$(awk -v a="${u[caddy-h3]}" -v b="${u[corral-h3]}" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')")
    ratio_h2+=("$(awk -v a="${u[corral-h3]}" -v b="${u[corral-h2]}" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')")
    ratio_caddy_h2+=("$(awk -v a="${u[caddy-h3]}" -v b="${u[caddy-h2]}" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')")
  done
  for n in "${names[@]}"; do
    printf "%-6s %-10s median rps=%-10s cpu_us/req=%s\n" "$load" "$n" \
      "$(median <<<"${rpsall[$load,$n]}")" "$(median <<<"${usall[$load,$n]}")"
  done
  echo "$load paired: caddy-h3/corral-h3 cpu per request=$(median <<<"${ratio_caddy[*]}") (rounds: ${ratio_caddy[*]});" \
    "corral-h3/corral-h2=$(median <<<"${ratio_h2[*]}") (rounds: ${ratio_h2[*]});" \
    "caddy-h3/caddy-h2=$(median <<<"${ratio_caddy_h2[*]}") (rounds: ${ratio_caddy_h2[*]})"
done
