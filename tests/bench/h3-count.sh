#!/usr/bin/env bash
# HTTP/3 against HTTP/2 on corral, counted rather than timed: user-space
# instructions per request (callgrind), system calls per request
# (strace -c -f), or where the CPU goes (perf -e cpu-clock -g, by DSO).
# The configurations of tests/bench/h3-peers.sh (one worker, a `listen
# ... tls` and a `listen ... quic` on one port, proxying to an nginx
# `return 200 "hello world\n"`), or the same without the backend (-n:
# `return 200` in corral).  A benchmark, not a test.
#
# Instructions are the whole process's (every thread, the kernel's work
# not included), counted from SHORT seconds into a client's run (its
# handshakes done) for LONG seconds, over the requests begun meanwhile
# (calls to router_start() in the dump): start-up and handshakes are
# left out (gnutls_handshake()'s cost too, should a client reconnect
# meanwhile).  System calls are one run of LONG seconds, handshakes
# included, over its requests; so are perf's samples, which come with
# the CPU time per request (/proc/PID/stat).
#
# usage: tests/bench/h3-count.sh [-m callgrind|strace|perf] [-b CORRAL] [-l LOADS] [-s SHORT] [-L LONG] [-n]
#   -m MODE    what to count (callgrind)
#   -b PATH    the corral binary (default build/corral)
#   -l LOADS   CxM separated by spaces (default "100x1 10x32")
#   -s, -L     callgrind: seconds before counting (25) and of counting (10);
#              strace and perf: -L, the seconds of the run (3)
#   -n         no backend: corral answers `return 200` itself
# Ports: 18130 backend, 18131 corral (TCP: TLS, UDP: QUIC).
set -u
MODE=callgrind BIN= LOADS="100x1 10x32" SHORT= LONG= NOBACKEND=
while getopts "m:b:l:s:L:n" o; do
  case $o in m) MODE=$OPTARG;; b) BIN=$OPTARG;; l) LOADS=$OPTARG;; s) SHORT=$OPTARG;;
             L) LONG=$OPTARG;; n) NOBACKEND=1;;
             *) sed -n "/^# usage:/,/^#   -n /s/^# \{0,1\}//p" "$0" >&2; exit 2;; esac
done
case $MODE in
  callgrind) SHORT=${SHORT:-25} LONG=${LONG:-10} ;;
  strace | perf) LONG=${LONG:-3} ;;
  *) echo "h3-count: -m callgrind, strace or perf" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.." || exit 2
. tests/bench/lib.sh
bench_need h3-count "nginx-light nghttp2-client openssl curl valgrind strace linux-perf" \
  nginx h2load openssl curl "$([ "$MODE" = callgrind ] && echo valgrind || echo "$MODE")"
BIN=$(bench_corral "$BIN") || exit 2
H3LOAD=$(bench_build h3load) || exit 2
bench_tmp

bench_cert "$tmp"
if [ -n "$NOBACKEND" ]; then
  location='return 200 "hello world\n";' upstream=
else
  location='proxy_pass http://backend;'
  upstream='upstream backend { server 127.0.0.1:18130; keepalive 64; }'
  bench_nginx_backend "$tmp/backend.conf" 18130
  bench_start nginx -c "$tmp/backend.conf"
  bench_wait 18130 || { echo "h3-count: the backend does not answer" >&2; exit 1; }
fi
cat >"$tmp/corral.conf" <<CONF
workers 1;
keepalive_requests 1000000;
access_log off;
$upstream
server {
  listen 127.0.0.1:18131 tls;
  listen 127.0.0.1:18131 quic reuseport;
  tls_certificate $tmp/cert.pem;
  tls_certificate_key $tmp/key.pem;
  location / { $location }
}
CONF

if [ "$MODE" = callgrind ]; then
  bench_start valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$BIN" -c "$tmp/corral.conf" \
    >"$tmp/corral.log" 2>&1
else
  bench_start "$BIN" -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1
fi
corral=$started
for _ in 1 2 3 4 5 6; do bench_wait 18131 https "$corral" && break; done ||
  { echo "h3-count: corral does not answer" >&2; cat "$tmp/corral.log" >&2; exit 1; }

# load PROTO LOAD SECONDS [RAMP]: one client run, HTTP/3's connections
# opened over its first RAMP seconds; prints the requests that succeeded.
load() {
  local c=${2%x*} m=${2#*x} out
  if [ "$1" = h3 ]; then
    out=$("$H3LOAD" -c "$c" -m "$m" -D "$3" --ramp "${4:-0}" --sni localhost https://127.0.0.1:18131/ 2>&1)
    awk '/^requests:/{print $4}' <<<"$out" # completed
  else
    out=$(h2load -c "$c" -m "$m" -D "$3" https://127.0.0.1:18131/ 2>&1)
    awk '/^requests:/{print $8}' <<<"$out" # succeeded
  fi
}

# ticks PID: the user + system clock ticks of PID, all its threads.
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

echo "# corral: $BIN (1 worker)$([ -n "$NOBACKEND" ] && echo ", return 200" || echo ", proxy to nginx"); $MODE"
for l in $LOADS; do
  for p in h3 h2; do
    case $MODE in
      callgrind)
        # Under callgrind a hundred handshakes at once outlast QUIC's 10 s
        # handshake timeout: h3load's are spread over the warm-up.
        load $p "$l" $((SHORT + LONG + 1)) $((SHORT * 2 / 3)) >/dev/null &
        lp=$!
        sleep "$SHORT"
        callgrind_control -z "$corral" >/dev/null 2>&1
        sleep "$LONG"
        callgrind_control -d "$corral" >/dev/null 2>&1
        wait $lp
        python3 - "$(ls -t "$tmp"/cg.out.* | head -1)" "$p $l" <<'PY'
import re, sys
# The dump's total, its calls to router_start() (one a request, whichever
# protocol brought it), and the inclusive cost of gnutls_handshake(),
# left out: a client that reconnects during the count (under callgrind
# a handshake can outlast a client's timeout) would add its handshakes.
names, requests, total, hs_calls, hs_ir, callee, after_call = {}, 0, 0, 0, 0, None, False
ref = re.compile(r"^(c?fn)=\((\d+)\)(?: (.*))?$")
for line in open(sys.argv[1], errors="replace"):
    if after_call:  # the call's inclusive cost: "position Ir"
        after_call = False
        if callee == "gnutls_handshake":
            hs_ir += int(line.split()[1])
        continue
    m = ref.match(line)
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3)
        if m.group(1) == "cfn":
            callee = names.get(m.group(2))
    elif line.startswith("calls="):
        n = int(line[6:].split()[0])
        requests += n if callee == "router_start" else 0
        hs_calls += n if callee == "gnutls_handshake" else 0
        after_call = True
    elif line.startswith(("summary:", "totals:")):
        total = int(line.split()[1])
print(f"{sys.argv[2]}: {requests} requests, {total} Ir, {hs_ir} of them in {hs_calls} "
      f"gnutls_handshake() calls: {(total - hs_ir) / max(requests, 1):.0f} Ir/request")
PY
        ;;
      strace)
        strace -c -f -o "$tmp/strace.out" -p "$corral" &
        st=$!
        sleep 0.5
        n=$(load $p "$l" "$LONG")
        kill -INT $st; wait $st
        echo "$p $l: $n requests"
        awk -v n="$n" '$1 ~ /^[0-9.]+$/ && NF >= 5 {printf "  %-16s %8.3f\n", $NF, $4 / n}' "$tmp/strace.out"
        ;;
      perf)
        perf record -q -e cpu-clock -g -o "$tmp/perf.data" -p "$corral" 2>/dev/null &
        pf=$!
        sleep 0.5
        t0=$(ticks "$corral")
        n=$(load $p "$l" "$LONG")
        t1=$(ticks "$corral")
        kill -INT $pf; wait $pf
        echo "$p $l: $n requests, $(awk -v t=$((t1 - t0)) -v n="$n" -v hz="$(getconf CLK_TCK)" \
          'BEGIN{printf "%.2f", t * 1e6 / hz / n}') CPU us/request (utime + stime, handshakes included)"
        perf report -i "$tmp/perf.data" --no-children -g none --sort dso --stdio 2>/dev/null |
          grep -v '^#' | grep -v '^$' | head -8
        ;;
    esac
  done
done
