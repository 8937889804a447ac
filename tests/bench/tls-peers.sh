#!/usr/bin/env bash
# TLS termination on loopback: corral, nginx and HAProxy each terminate TLS in
# front of the same plain-HTTP backend (nginx `return 200 "hello world\n"`),
# one worker each, one certificate for all (generated for the run).  Three
# scenarios, each as alternating rounds; prints every round, the median
# requests/s and server CPU time per request of each server, and the ratios
# corral/nginx and corral/haproxy.  A benchmark, not a test: it never fails on
# the numbers.
#
#   1. keep-alive        wrk -t1 -c64 over https
#   2. full handshakes   wrk -H "Connection: close" against servers with
#                        session tickets and the session cache off: a new
#                        connection and a full handshake per request
#   3. resumed           wrk -H "Connection: close" against servers with
#                        tickets and the cache on: wrk keeps each connection's
#                        SSL object across its reconnects (SSL_shutdown, then
#                        SSL_clear, which keeps the session) and offers that
#                        session again, so a reconnect resumes whenever the
#                        session it holds is resumable
#
# wrk reconnects as soon as it has parsed a response, without reading what
# follows it: with TLS 1.3 it resumes only with a ticket that arrived before
# the response's end.  So every round also shows "resumed=R/N": of the N
# handshakes the server completed in the round, R were resumptions, as the
# server counts them (nginx: a log line for each connection's first request,
# with $ssl_session_reused; HAProxy: a stick table keyed by ssl_fc_is_resumed;
# corral: corral_tls_handshakes_total on its admin listener).  Those cost each
# server a little per connection, nothing per request.
#
# Before the rounds, `openssl s_client` connects twice to each server and
# prints the protocol, cipher, key exchange, and whether the second connection
# resumed the first's session (s_client reads to the end, tickets included).
#
# On a 2-CPU machine one wrk thread doing handshakes is itself the limit
# (OpenSSL's client side of a handshake costs more than the server's), so in
# scenarios 2 and 3 the requests/s of the servers are close and the server
# CPU time per request (user + system time of the server's processes over the
# round, divided by the requests served) is where they differ.
#
# usage: tests/bench/tls-peers.sh [-d SECONDS] [-r ROUNDS] [-c CONNECTIONS] [-t WRK_THREADS]
#                                 [-w WORKERS] [-k ec|rsa] [-V 1.2|1.3] [-s SCENARIOS]
#                                 [-S INSTANCES] [-b PATH]
#   -d, -r    seconds per round (5) and rounds (3)
#   -c, -t    wrk connections (64) and threads (1)
#   -w N      workers/threads of every server, the backend's included (1)
#   -k rsa    an RSA 2048 certificate instead of ECDSA P-256
#   -V 1.2    only TLS 1.2 (or only 1.3) on every server; default both
#   -s 13     the scenarios to run (default 123)
#   -S N      scenarios 2 and 3 with N parallel `openssl s_time -new` (full)
#             and `-reuse` (resumed) against the servers with resumption on,
#             instead of wrk; their connections/s summed.  s_time connects
#             one connection at a time, sends HTTP/1.0 requests and reads
#             each response to the end: a server that closes without a
#             close_notify loses its resumptions, as OpenSSL then drops the
#             session
#   -b PATH   the corral binary (default build/corral)
# Ports: 18100 backend; resumption on: 18101 nginx, 18102 haproxy, 18103
# corral; resumption off: 18104 nginx, 18105 haproxy, 18106 corral; the
# handshake counters of the server on port P are on P+10.
set -u
D=5 R=3 C=64 T=1 W=1 KEY=ec VER= SCEN=123 STIME= BIN=
while getopts "d:r:c:t:w:k:V:s:S:b:" o; do
  case $o in d) D=$OPTARG;; r) R=$OPTARG;; c) C=$OPTARG;; t) T=$OPTARG;; w) W=$OPTARG;;
             k) KEY=$OPTARG;; V) VER=$OPTARG;; s) SCEN=$OPTARG;; S) STIME=$OPTARG;;
             b) BIN=$OPTARG;; *) sed -n "/^# usage:/,/^#   -b PATH/s/^# \{0,1\}//p" "$0" >&2; exit 2;; esac
done
case $KEY in ec|rsa) ;; *) echo "tls-peers: -k ec or -k rsa" >&2; exit 2;; esac
case $VER in "") protos="TLSv1.2 TLSv1.3" hap_vers="ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.3";;
             1.2|1.3) protos="TLSv$VER" hap_vers="ssl-min-ver TLSv$VER ssl-max-ver TLSv$VER";;
             *) echo "tls-peers: -V 1.2 or -V 1.3" >&2; exit 2;; esac
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
bench_need tls-peers "nginx-light haproxy wrk openssl curl" nginx haproxy wrk openssl curl
BIN=$(bench_corral "$BIN") || exit 2
bench_tmp

if [ "$KEY" = rsa ]; then keydesc="RSA 2048"; else keydesc="ECDSA P-256"; fi
bench_cert "$tmp" localhost "$KEY"

bench_nginx_backend "$tmp/backend.conf" 18100 "$W"
# write_configs MODE PORT_BASE: MODE "on" has session tickets and the session
# cache on (every server's default), "off" has both off.
write_configs() {
  local m=$1 base=$2 ngx_cache="shared:SSL:10m" ngx_tickets=on hap_global= hap_bind= corral_off=
  if [ "$m" = off ]; then
    ngx_cache=off ngx_tickets=off hap_global="  tune.ssl.cachesize 0" hap_bind=" no-tls-tickets"
    corral_off="    tls_session_tickets off;
    tls_session_cache off;"
  fi
  cat >"$tmp/nginx-$m.conf" <<CONF
worker_processes $W;
daemon off;
pid $tmp/nginx-$m.pid;
error_log $tmp/nginx-$m.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  map \$connection_requests \$tls_first { 1 1; default ""; }
  log_format tls_resumed "\$ssl_session_reused";
  upstream be { server 127.0.0.1:18100; keepalive 64; }
  server {
    listen 127.0.0.1:$((base + 1)) ssl backlog=4096;
    ssl_certificate $tmp/cert.pem;
    ssl_certificate_key $tmp/key.pem;
    ssl_protocols $protos;
    ssl_session_cache $ngx_cache;
    ssl_session_tickets $ngx_tickets;
    access_log $tmp/nginx-$m.handshakes tls_resumed buffer=16k flush=100ms if=\$tls_first;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
  cat >"$tmp/haproxy-$m.cfg" <<CONF
global
  nbthread $W
  maxconn 8192
  stats socket ipv4@127.0.0.1:$((base + 12)) level operator
$hap_global
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:$((base + 2)) ssl crt $tmp/cert-key.pem $hap_vers$hap_bind
  tcp-request session track-sc0 ssl_fc_is_resumed table tls_resumed
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:18100
backend tls_resumed
  stick-table type integer size 4 store conn_cnt
CONF
  cat >"$tmp/corral-$m.conf" <<CONF
workers $W;
keepalive_requests 1000000;
admin { listen 127.0.0.1:$((base + 13)); }
upstream backend { server 127.0.0.1:18100; keepalive 64; }
server {
    listen 127.0.0.1:$((base + 3)) tls;
    tls_certificate cert.pem;
    tls_certificate_key key.pem;
    tls_protocols $protos;
$corral_off
    location / { proxy_pass http://backend; }
}
CONF
}

# handshakes NAME MODE: "FULL RESUMED", the handshakes the server completed so far.
handshakes() {
  local p=${port[$1-$2]}
  case $1 in
    nginx) sleep 0.3   # the log buffer is flushed every 100 ms
           awk '{n[$1]++} END{print n["."] + 0, n["r"] + 0}' "$tmp/nginx-$2.handshakes" 2>/dev/null ||
             echo "0 0";;
    haproxy) { exec 3<>"/dev/tcp/127.0.0.1/$((p + 10))" && echo "show table tls_resumed" >&3 &&
               timeout 2 cat <&3; exec 3<&-; } 2>/dev/null |
             awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); f[kv[1]] = kv[2]}
                   if ("key" in f) n[f["key"]] = f["conn_cnt"]; delete f}
                  END{print n[0] + 0, n[1] + 0}';;
    corral) curl -s --max-time 2 "http://127.0.0.1:$((p + 10))/metrics" |
            awk -F'[ "]' '/^corral_tls_handshakes_total/{n[$2] = $NF} END{print n["full"] + 0, n["resumed"] + 0}';;
  esac
}

# probe PORT: the first connection's protocol, cipher and key exchange, and
# whether a second connection that offers the first's session resumes it.  The
# SNI is the load client's: wrk sends the URL's host, s_time sends none.
probe() {
  local req='GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' sni=(-servername 127.0.0.1)
  local s1 s2 proto temp
  [ -n "$STIME" ] && sni=(-noservername)
  s1=$(printf "$req" | timeout 5 openssl s_client -connect "127.0.0.1:$1" "${sni[@]}" \
       -sess_out "$tmp/sess.$1" -ign_eof 2>&1)
  s2=$(printf "$req" | timeout 5 openssl s_client -connect "127.0.0.1:$1" "${sni[@]}" \
       -sess_in "$tmp/sess.$1" -ign_eof 2>&1)
  proto=$(awk -F', ' '/^New, /{print $2, $3; exit}' <<<"$s1" | sed 's/Cipher is //')
  temp=$(awk -F': ' '/^Server Temp Key/{print $2; exit}' <<<"$s1" | cut -d, -f1)
  printf "%s %s, 2nd connection: %s" "${proto:-no handshake}" "$temp" \
    "$(grep -qE '^Reused, ' <<<"$s2" && echo resumed || echo full handshake)"
}

busy_pct=$(bench_busy_pct)

names=(nginx haproxy corral)
declare -A port pid
bench_start nginx -c "$tmp/backend.conf"
bench_wait 18100 http $started || { echo "tls-peers: the backend does not answer" >&2; exit 1; }
modes=(on)
[[ $SCEN == *2* && -z $STIME ]] && modes+=(off)
for m in "${modes[@]}"; do
  base=18100; [ "$m" = off ] && base=18103
  write_configs "$m" "$base"
  bench_start nginx -c "$tmp/nginx-$m.conf"; pid[nginx-$m]=$started; port[nginx-$m]=$((base + 1))
  bench_start haproxy -f "$tmp/haproxy-$m.cfg" -db >"$tmp/haproxy-$m.log" 2>&1
  pid[haproxy-$m]=$started; port[haproxy-$m]=$((base + 2))
  bench_start "$BIN" -c "$tmp/corral-$m.conf" >"$tmp/corral-$m.log" 2>&1
  pid[corral-$m]=$started; port[corral-$m]=$((base + 3))
done
echo "# $keydesc certificate, ${protos// / + }, $W worker(s) each, $R rounds of ${D}s, corral: $BIN"
echo "# $(nproc) CPUs, ${busy_pct}% busy in the second before the servers started"
serving=()
for n in "${names[@]}"; do
  ok=1
  for m in "${modes[@]}"; do bench_wait "${port[$n-$m]}" https "${pid[$n-$m]}" || ok=; done
  if [ -n "$ok" ]; then serving+=("$n"); continue; fi
  echo "$n: not serving"
  for m in "${modes[@]}"; do
    log=$tmp/$n-$m.log; [ "$n" = nginx ] && log=$tmp/nginx-$m.err
    [ -s "$log" ] && sed "s/^/  $n-$m: /" "$log" | tail -3
  done
done
names=("${serving[@]}")

for m in "${modes[@]}"; do
  for n in "${names[@]}"; do
    printf "probe %-7s resumption %-3s: %s\n" "$n" "$m" "$(probe "${port[$n-$m]}")"
  done
done

cpu_ticks() { # user + system ticks of PID and its children
  for p in "$1" $(pgrep -P "$1"); do sed 's/.*) //' "/proc/$p/stat" 2>/dev/null; done |
    awk '{t += $12 + $13} END {print t + 0}'
}
hz=$(getconf CLK_TCK)
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
declare -A rps cpu hs

# load KIND NAME MODE ROUND: one round against one server, printed and recorded.
load() {
  local kind=$1 n=$2 m=$3 r=$4 p=${port[$2-$3]} out rate total p99= extra= before after t0 t1 h0 h1
  h0=$(handshakes "$n" "$m")
  before=$(cpu_ticks "${pid[$n-$m]}")
  case $kind in
    wrk-keepalive|wrk-close)
      local hdr=(); [ "$kind" = wrk-close ] && hdr=(-H "Connection: close")
      out=$(wrk "${hdr[@]}" -t"$T" -c"$C" -d"${D}s" --latency "https://127.0.0.1:$p/" 2>&1)
      rate=$(awk '/Requests\/sec/{print $2}' <<<"$out"); p99=$(awk '$1=="99%"{print $2}' <<<"$out")
      total=$(awk '/requests in/{print $1}' <<<"$out")
      extra=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr -s ' \n' ' ');;
    stime-new|stime-reuse)
      # s_time sends "GET <path> HTTP/1.0" and a blank line; the path carries a
      # Host header, and the " HTTP/1.0" after it becomes another header's value.
      local www=$'/ HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Pad:' st=()
      t0=$(date +%s.%N)
      for i in $(seq "$STIME"); do
        openssl s_time -connect "127.0.0.1:$p" -www "$www" "-${kind#stime-}" -time "$D" >"$tmp/st.$i" 2>&1 &
        st+=($!)
      done
      wait "${st[@]}"
      t1=$(date +%s.%N)
      total=$(cat "$tmp"/st.* | awk '/connections in .* real seconds/{s += $1} END{print s + 0}')
      rate=$(awk -v n="$total" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", n / (b - a)}')
      extra="bytes/conn=$(cat "$tmp"/st.* | awk '/bytes read per connection/{print $(NF-4); exit}')"
      rm -f "$tmp"/st.*;;
  esac
  after=$(cpu_ticks "${pid[$n-$m]}")
  h1=$(handshakes "$n" "$m")
  local us res
  us=$(awk -v t=$((after - before)) -v hz="$hz" -v n="${total:-0}" \
         'BEGIN{if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print "-"}')
  res=$(awk -v a="$h0" -v b="$h1" 'BEGIN{split(a, x, " "); split(b, y, " ");
          f = y[1] - x[1]; r = y[2] - x[2]; printf "%d/%d", r, f + r}')
  printf "round %d %-7s rps=%-10s p99=%-8s cpu-us/req=%-6s resumed=%-13s %s\n" \
    "$r" "$n" "${rate:-0}" "${p99:--}" "$us" "$res" "$extra"
  rps[$n]+="${rate:-0} "; cpu[$n]+="$us "; hs[$n]+="$res "
}

scenario() { # TITLE KIND MODE
  echo "== $1"
  rps=(); cpu=(); hs=()
  for r in $(seq "$R"); do
    for n in "${names[@]}"; do load "$2" "$n" "$3" "$r"; done
  done
  declare -A mr mc
  for n in "${names[@]}"; do
    mr[$n]=$(median "${rps[$n]}"); mc[$n]=$(median "${cpu[$n]}")
    printf "median %-7s rps=%-10s cpu-us/req=%-6s resumed=%s (all rounds)\n" "$n" "${mr[$n]}" "${mc[$n]}" \
      "$(tr ' ' '\n' <<<"${hs[$n]}" | awk -F/ 'NF == 2 {r += $1; n += $2}
                                              END{printf (n ? "%.1f%%" : "-"), n ? 100 * r / n : 0}')"
  done
  [ -n "${mr[corral]:-}" ] || { echo "ratio  -: corral not serving"; return 0; }
  local line="ratio"
  for peer in nginx haproxy; do
    [ -n "${mr[$peer]:-}" ] || continue
    line+=$(awk -v c="${mr[corral]}" -v p="${mr[$peer]}" -v cc="${mc[corral]}" -v pc="${mc[$peer]}" -v n="$peer" \
      'BEGIN{printf "  corral/%s: rps=%.3f requests-per-cpu-second=%.3f", n, c/p, (cc > 0 ? pc/cc : 0)}')
  done
  echo "$line"
}

wrkdesc="wrk -t$T -c$C"
[[ $SCEN == *1* ]] && scenario "1. keep-alive: $wrkdesc over https" wrk-keepalive on
if [ -n "$STIME" ]; then
  [[ $SCEN == *2* ]] && scenario "2. full handshakes: $STIME x openssl s_time -new, resumption on" stime-new on
  [[ $SCEN == *3* ]] && scenario "3. resumed: $STIME x openssl s_time -reuse, resumption on" stime-reuse on
else
  [[ $SCEN == *2* ]] && scenario "2. full handshakes: $wrkdesc -H 'Connection: close', resumption off" wrk-close off
  [[ $SCEN == *3* ]] && scenario "3. resumed: $wrkdesc -H 'Connection: close', resumption on" wrk-close on
fi
if [[ " ${names[*]} " == *" corral "* ]]; then
  for m in "${modes[@]}"; do
    grep -v '\[info\]' "$tmp/corral-$m.log" | tail -5 | sed "s/^/corral-$m log: /"
  done
fi
exit 0
