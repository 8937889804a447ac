#!/usr/bin/env bash
# Memory per idle TLS + HTTP/2 connection: corral, nginx, HAProxy and h2o,
# one worker (thread) each, TLS with ALPN h2 on loopback, each answering
# GET / with the same 12-byte body ("hello world\n": nginx and corral
# `return 200`, HAProxy `http-request return`, h2o `file.file` of that
# body).  In every round each server is started afresh, alone, and gets
# WARM connections that each make one request and stay open (the warm-up:
# first buffers, TLS and HPACK set-up); then its whole process tree's
# memory is read (VmRSS summed over the tree, and Pss from smaps_rollup),
# N more connections each make one request and stay open, the tree is read
# again once its VmRSS has stopped moving, and the growth divided by N is
# the cost of one idle connection.  The client is
# tests/proto/h2/idle_rss.py --pid (Python's ssl, OpenSSL's defaults): TLS
# 1.3 with every server, nginx 1.22 told to offer it (its default stops at
# 1.2), each server's other TLS settings its own defaults.  Prints every
# round, then a table of the medians and one line per server.  A benchmark,
# not a test: it fails only when a server does not serve or a connection
# is refused.
#
# usage: tests/bench/h2-idle-peers.sh [-n CONNECTIONS] [-r ROUNDS] [-w WARM] [-i] [-s]
#                                     [-S 'SERVERS'] [-b PATH]
#   -n N       connections measured (1000)
#   -r R       rounds (3)
#   -w W       warm-up connections, kept open while measuring (20)
#   -i         the client indexes its request fields in the server's HPACK
#              table (literal with incremental indexing), as curl and
#              browsers do; without it no field is indexed
#   -s         also measure with each connection's one stream held open:
#              the client announces a stream window of 0, so the response
#              body cannot be sent and the stream stays open once the
#              response head has arrived; the difference to the idle figure
#              is the memory of one open stream with its response waiting
#   -S LIST    the servers to run, of "nginx haproxy h2o corral" (all)
#   -b PATH    the corral binary (default build/corral)
# Ports: free ephemeral ones, one per server start.
set -u
N=1000 R=3 W=20 INDEXED="" HOLD="" SERVERS="nginx haproxy h2o corral" BIN=""
while getopts "n:r:w:isS:b:" o; do
  case $o in n) N=$OPTARG;; r) R=$OPTARG;; w) W=$OPTARG;; i) INDEXED=--indexed;; s) HOLD=1;;
             S) SERVERS=$OPTARG;; b) BIN=$OPTARG;;
             *) sed -n "/^# usage:/,/^#   -b PATH/s/^# \{0,1\}//p" "$0" >&2; exit 2;; esac
done
cd "$(dirname "$0")/../.." || exit 2
. tests/bench/lib.sh
for s in $SERVERS; do
  case $s in
    nginx) bench_need h2-idle-peers nginx-light nginx;;
    haproxy) bench_need h2-idle-peers haproxy haproxy;;
    h2o) bench_need h2-idle-peers h2o h2o;;
    corral) BIN=$(bench_corral "$BIN") || exit 2;;
    *) echo "h2-idle-peers: no server $s (nginx haproxy h2o corral)" >&2; exit 2;;
  esac
done
bench_need h2-idle-peers "openssl curl" openssl curl
PY=/usr/bin/python3
$PY -c 'import h2, hpack' 2>/dev/null ||
  { echo "h2-idle-peers: needs $PY with h2 and hpack (apt-get install python3-h2)" >&2; exit 2; }
# Each server and the client hold N + W connections at once; HAProxy asks
# for two descriptors per connection of its maxconn.
FDS=$((2 * (N + W) + 1000))
ulimit -n "$FDS" 2>/dev/null ||
  { echo "h2-idle-peers: -n $N needs $FDS open files, the limit is $(ulimit -Hn)" >&2; exit 2; }
bench_tmp

bench_cert "$tmp"
printf 'hello world\n' >"$tmp/hello.txt"
MAXC=$((N + W + 100))

# config NAME PORT: writes NAME's configuration, listening on PORT, and prints
# the command that runs it in the foreground.  Every idle timeout is 300 s,
# far beyond a round, and so is every send timeout (a held stream's
# response waits for a window that never opens).
config() {
  local n=$1 port=$2
  case $n in
    nginx)
      cat >"$tmp/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile $FDS;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx.err warn;
events { worker_connections $MAXC; }
http {
  access_log off;
  keepalive_timeout 300s;
  send_timeout 300s;
  server {
    listen 127.0.0.1:$port ssl http2 backlog=4096;
    ssl_certificate $tmp/cert.pem;
    ssl_certificate_key $tmp/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / { return 200 "hello world\n"; }
  }
}
CONF
      echo nginx -c "$tmp/nginx.conf";;
    haproxy)
      cat >"$tmp/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn $MAXC
defaults
  mode http
  timeout client 300s
  timeout http-keep-alive 300s
  timeout connect 5s
  timeout server 5s
frontend fe
  bind 127.0.0.1:$port ssl crt $tmp/cert-key.pem alpn h2,http/1.1
  http-request return status 200 content-type text/plain string "hello world\n"
CONF
      echo haproxy -f "$tmp/haproxy.cfg" -db;;
    h2o)
      # OCSP stapling off: h2o would run its fetcher, a child process, for
      # a certificate that names no responder.
      cat >"$tmp/h2o.conf" <<CONF
num-threads: 1
max-connections: $MAXC
http2-idle-timeout: 300
error-log: $tmp/h2o.err
listen:
  host: 127.0.0.1
  port: $port
  ssl:
    certificate-file: $tmp/cert.pem
    key-file: $tmp/key.pem
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        file.file: $tmp/hello.txt
CONF
      echo h2o -c "$tmp/h2o.conf";;
    corral)
      cat >"$tmp/corral.conf" <<CONF
workers 1;
max_connections $MAXC;
access_log off;
send_timeout 300s;
http2_idle_timeout 300s;
server {
  listen 127.0.0.1:$port tls http2;
  tls_certificate $tmp/cert.pem;
  tls_certificate_key $tmp/key.pem;
  location / { return 200 "hello world\n"; }
}
CONF
      echo "$BIN" -c "$tmp/corral.conf";;
  esac
}

version() {
  case $1 in
    nginx) nginx -v 2>&1 | sed 's|.*nginx/|nginx |';;
    haproxy) haproxy -v | awk 'NR==1{print "HAProxy", $3}';;
    h2o) h2o --version | awk 'NR==1{print "h2o", $3}';;
    corral) echo "corral $("$BIN" -V 2>&1 | awk '{print $NF; exit}')";;
  esac
}

# stop PID: TERM, then KILL after 10 s; waits for it, and takes it off the
# list bench_cleanup stops at exit, where its number may be another's by then.
stop() {
  local p keep=()
  kill "$1" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}

# run NAME MODE ROUND: one server started alone and measured; MODE idle or
# held.  Prints the round's line and records bytes per connection.
declare -A rss pss how
run() {
  local n=$1 mode=$2 r=$3 port pid out hold=
  [ "$mode" = held ] && hold=--hold
  # A free port may be taken by another program before the server binds
  # it: then the server exits, and is started again on another.
  for attempt in 1 2 3; do
    port=$(bench_free_port)
    # shellcheck disable=SC2046  # config prints a command line of plain words
    bench_start $(config "$n" "$port") >"$tmp/$n.log" 2>&1
    pid=$started
    bench_wait "$port" https "$pid" && break
    kill -0 "$pid" 2>/dev/null && attempt=3   # running and not serving: no retry
    stop "$pid"
    echo "h2-idle-peers: $n does not serve https on $port (attempt $attempt)" >&2
    cat "$tmp/$n.log" "$tmp/$n.err" 2>/dev/null | tail -5 | sed "s/^/  /" >&2
    [ "$attempt" = 3 ] && exit 1
  done
  out=$(timeout --foreground 300 $PY tests/proto/h2/idle_rss.py --pid "$pid" --port "$port" -n "$N" --warm "$W" \
        --tls $INDEXED $hold --timeout 240 2>&1)
  local rc=$?
  stop "$pid"
  # rss BEFORE AFTER pss BEFORE AFTER TLS
  if [ $rc -ne 0 ] || [[ $out != rss\ * ]]; then
    echo "h2-idle-peers: $n ($mode): ${out:-the client failed ($rc)}" >&2
    exit 1
  fi
  read -r _ rb ra _ pb pa tls <<<"$out"
  how[$n]=${tls//\// }
  local kr kp
  kr=$(awk -v a="$rb" -v b="$ra" -v n="$N" 'BEGIN{printf "%.1f", (b - a) / n}')
  kp=$(awk -v a="$pb" -v b="$pa" -v n="$N" 'BEGIN{printf "%.1f", (b - a) / n}')
  printf "round %d %-7s %-4s VmRSS %7d -> %7d KB: %5s KB/conn  Pss %7d -> %7d KB: %5s KB/conn\n" \
    "$r" "$n" "$mode" "$rb" "$ra" "$kr" "$pb" "$pa" "$kp"
  rss[$n-$mode]+="$kr " pss[$n-$mode]+="$kp "
}

median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

modes=(idle); [ -n "$HOLD" ] && modes+=(held)
fields="no request field indexed"; [ -n "$INDEXED" ] && fields="request fields indexed"
echo "# $N TLS + HTTP/2 connections (and $W to warm up) per server and round, one request each," \
  "$fields, rounds: $R"
echo "# $(nproc) CPUs, $(bench_busy_pct)% busy in the second before the first server started"
for r in $(seq "$R"); do
  for n in $SERVERS; do
    for m in "${modes[@]}"; do run "$n" "$m" "$r"; done
  done
done

echo
if [ -n "$HOLD" ]; then
  echo "| server | TLS | KB per idle connection (VmRSS) | Pss | with its stream held open (VmRSS) | KB per open stream |"
  echo "|---|---|---|---|---|---|"
else
  echo "| server | TLS | KB per idle connection (VmRSS) | Pss |"
  echo "|---|---|---|---|"
fi
declare -A med
for n in $SERVERS; do
  med[$n]=$(median "${rss[$n-idle]}")
  line="| $(version "$n") | ${how[$n]} | ${med[$n]} (${rss[$n-idle]% }) | $(median "${pss[$n-idle]}") |"
  if [ -n "$HOLD" ]; then
    h=$(median "${rss[$n-held]}")
    line+=" $h (${rss[$n-held]% }) | $(awk -v a="${med[$n]}" -v b="$h" 'BEGIN{printf "%.1f", b - a}') |"
  fi
  echo "$line"
done
echo
for n in $SERVERS; do
  printf "%-7s %5s KB per idle TLS + HTTP/2 connection (median VmRSS growth of %d rounds)\n" \
    "$n" "${med[$n]}" "$R"
done
exit 0
