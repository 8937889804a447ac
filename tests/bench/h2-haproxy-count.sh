#!/usr/bin/env bash
# corral against HAProxy proxying HTTP/2 over TLS to an nginx `return 200`
# over HTTP/1.1 keep-alive, counted over a fixed number of requests rather
# than timed: the configurations of ../shared/bench/peers/run-h2.sh (one
# worker or thread each; corral's tests/bench/proxy-h2.conf, HAProxy's
# `http-reuse always`).  A benchmark, not a test.
#
# Modes, each over one h2load run of N requests on the same connections:
#   cpu     user and system CPU per request (/proc/PID/stat, all threads)
#   strace  system calls per request by kind, bytes per read and write,
#           epoll_wait calls and events per call, backend connections
#           opened (strace -f of the whole run, then counted)
#   perf    perf record -e cpu-clock -g: the top kernel and user symbols
#   callgrind  corral only, under valgrind: user-space instructions per
#           request, the difference of a run of N and one of N/6 on fresh
#           connections over the difference of their requests, so that
#           start-up and handshakes cancel out; the dump of the longer
#           run is kept as /tmp/h2-haproxy-count.callgrind for
#           callgrind_annotate
#
# usage: tests/bench/h2-haproxy-count.sh [-m cpu|strace|perf] [-b CORRAL] [-n N] [-l CxM] [-p 'corral haproxy']
# Ports: 18140 backend, 18141 corral, 18142 HAProxy.
set -u
MODE=cpu BIN= N=200000 LOAD=10x32 PROXIES="corral haproxy"
while getopts "m:b:n:l:p:" o; do
  case $o in m) MODE=$OPTARG;; b) BIN=$OPTARG;; n) N=$OPTARG;; l) LOAD=$OPTARG;;
             p) PROXIES=$OPTARG;;
             *) sed -n "/^# usage:/p" "$0" >&2; exit 2;; esac
done
case $MODE in cpu | strace | perf | callgrind) ;; *) echo "h2-haproxy-count: -m cpu, strace, perf or callgrind" >&2; exit 2 ;; esac
cd "$(dirname "$0")/../.." || exit 2
. tests/bench/lib.sh
bench_need h2-haproxy-count "nginx-light haproxy nghttp2-client openssl curl strace linux-perf" \
  nginx haproxy h2load openssl curl "$(case $MODE in cpu) echo awk ;; callgrind) echo valgrind ;; *) echo "$MODE" ;; esac)"
[ "$MODE" = callgrind ] && PROXIES=corral
BIN=$(bench_corral "$BIN") || exit 2
bench_tmp
bench_cert "$tmp"
bench_nginx_backend "$tmp/backend.conf" 18140
bench_start nginx -c "$tmp/backend.conf"
bench_wait 18140 || { echo "h2-haproxy-count: the backend does not answer" >&2; exit 1; }

sed -e "s,CRT,$tmp/cert.pem," -e "s,KEY,$tmp/key.pem," -e 's,18094,18141,' \
  -e 's,127.0.0.1:18080,127.0.0.1:18140,' tests/bench/proxy-h2.conf >"$tmp/corral.conf"
bench_haproxy_h2 "$tmp/haproxy.cfg" 18142 "127.0.0.1:18140"

# syscalls PID: "reads writes", the read() and write() family calls of
# PID (/proc/PID/io: corral's TLS reads and writes to the clients; the
# backend's recvfrom() and sendto() are not counted there), without a
# tracer that slows the process and so changes how much each call carries.
syscalls() { awk '/^syscr:/{r = $2} /^syscw:/{w = $2} END{print r, w}' "/proc/$1/io"; }

# ticks PID: "user system" clock ticks of PID, all its threads.
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12, $13}'; }
hz=$(getconf CLK_TCK)
c=${LOAD%x*} m=${LOAD#*x}

echo "# $LOAD, $N requests, $MODE; machine busy $(bench_busy_pct)% before"
if [ "$MODE" = callgrind ]; then
  bench_start valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$BIN" -c "$tmp/corral.conf" \
    >"$tmp/corral.log" 2>&1
  pid=$started
  for _ in 1 2 3 4 5 6; do bench_wait 18141 https "$pid" && break; done ||
    { echo "h2-haproxy-count: corral does not answer" >&2; exit 1; }
  h2load -c "$c" -m "$m" -n $((N / 10)) https://127.0.0.1:18141/ >/dev/null 2>&1
  total() { awk '/^(summary|totals):/{print $2; exit}' "$1"; }
  declare -A ir
  for k in $((N / 6)) "$N"; do
    callgrind_control -z "$pid" >/dev/null 2>&1
    h2load -c "$c" -m "$m" -n "$k" https://127.0.0.1:18141/ >"$tmp/h2load.out" 2>&1
    callgrind_control -d "$pid" >/dev/null 2>&1
    ir[$k]=$(total "$(ls -t "$tmp"/cg.out.* | head -1)")
    echo "  $k requests ($(awk '/^requests:/{print $8}' "$tmp/h2load.out") succeeded): ${ir[$k]} Ir"
  done
  cp "$(ls -t "$tmp"/cg.out.* | head -1)" /tmp/h2-haproxy-count.callgrind
  awk -v l="$LOAD" -v a="${ir[$N]}" -v b="${ir[$((N / 6))]}" -v n=$((N - N / 6)) \
    'BEGIN{printf "corral %s: %.0f instructions per request\n", l, (a - b) / n}'
  exit 0
fi
for p in $PROXIES; do
  case $p in
    corral) bench_start "$BIN" -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1; port=18141 ;;
    haproxy) bench_start haproxy -f "$tmp/haproxy.cfg" -db >"$tmp/haproxy.log" 2>&1; port=18142 ;;
    *) echo "h2-haproxy-count: corral or haproxy, not $p" >&2; exit 2 ;;
  esac
  pid=$started
  bench_wait "$port" https "$pid" || { echo "h2-haproxy-count: $p does not answer" >&2; exit 1; }
  # A first run opens the backend connections and warms the caches.
  h2load -c "$c" -m "$m" -n $((N / 10)) "https://127.0.0.1:$port/" >/dev/null 2>&1
  case $MODE in
    strace)
      strace -f -qq -e trace=all -e signal=none -o "$tmp/trace" -p "$pid" &
      tracer=$!
      sleep 1
      ;;
    perf)
      perf record -q -e cpu-clock -g -o "$tmp/perf.data" -p "$pid" 2>/dev/null &
      tracer=$!
      sleep 1
      ;;
  esac
  nstat -n >/dev/null
  read -r r0 w0 < <(syscalls "$pid")
  read -r u0 s0 < <(ticks "$pid")
  out=$(h2load -c "$c" -m "$m" -n "$N" "https://127.0.0.1:$port/" 2>&1)
  read -r u1 s1 < <(ticks "$pid")
  read -r r1 w1 < <(syscalls "$pid")
  n=$(awk '/^requests:/{print $8}' <<<"$out")
  [ "$MODE" = cpu ] || { kill -INT "$tracer"; wait "$tracer" 2>/dev/null; }
  printf "%-8s %d requests: user %.2f us/req, system %.2f us/req, total %.2f\n" "$p" "$n" \
    "$(awk -v t=$((u1 - u0)) -v n="$n" -v hz="$hz" 'BEGIN{print t * 1e6 / hz / n}')" \
    "$(awk -v t=$((s1 - s0)) -v n="$n" -v hz="$hz" 'BEGIN{print t * 1e6 / hz / n}')" \
    "$(awk -v t=$((u1 - u0 + s1 - s0)) -v n="$n" -v hz="$hz" 'BEGIN{print t * 1e6 / hz / n}')"
  awk -v r=$((r1 - r0)) -v w=$((w1 - w0)) -v n="$n" \
    'BEGIN{printf "  read() family %.3f, write() family %.3f per request (/proc/PID/io)\n", r / n, w / n}'
  # Segments on loopback (both directions, the machine's whole network
  # namespace: other traffic adds to it) over the requests.
  nstat 2>/dev/null | awk -v n="$n" '$1 ~ /^(TcpInSegs|TcpOutSegs|TcpExtDelayedACKs|TcpExtTCPPureAcks|TcpExtTCPHPAcks|TcpExtTCPHPHits)$/ {
    printf "  %-18s %.3f per request\n", $1, $2 / n}'
  case $MODE in
    strace)
      # One line per call ("PID name(args) = ret"); calls cut in two by
      # another thread's ("<unfinished ...>", "<... name resumed>") are
      # counted at their end.
      python3 - "$tmp/trace" "$n" <<'PY'
import re, sys, collections
n = int(sys.argv[2])
calls, bytes_, eagain, zero = collections.Counter(), collections.Counter(), collections.Counter(), collections.Counter()
events = 0
line_re = re.compile(r"^\d+\s+(?:<\.\.\. (\w+) resumed>|(\w+)\().*\)\s+= (-?\d+|\?)(.*)$")
for line in open(sys.argv[1], errors="replace"):
    mt = line_re.match(line)
    if not mt:
        continue
    name = mt.group(1) or mt.group(2)
    ret = mt.group(3)
    calls[name] += 1
    if ret == "?":
        continue
    r = int(ret)
    if "EAGAIN" in mt.group(4):
        eagain[name] += 1
    elif name.startswith("epoll"):
        events += r
        zero[name] += r == 0
    elif r > 0 and name in ("read", "write", "readv", "writev", "sendto", "recvfrom", "sendmsg", "recvmsg"):
        bytes_[name] += r
total = sum(calls.values())
print(f"  system calls {total / n:.3f} per request")
for name, k in calls.most_common():
    extra = ""
    if bytes_[name]:
        extra = f", {bytes_[name] / max(k - eagain[name], 1):.0f} bytes per call that moved some"
    if eagain[name]:
        extra += f", {eagain[name]} EAGAIN"
    if name.startswith("epoll_wait") or name == "epoll_pwait":
        extra = f", {events / k:.2f} events per call, {zero[name]} returned none"
    print(f"  {name:16s} {k:8d} {k / n:7.3f}/req{extra}")
PY
      ;;
    perf)
      perf report -i "$tmp/perf.data" --no-children -g none --sort dso --stdio 2>/dev/null |
        grep -v '^#' | grep -v '^$' | head -6
      perf report -i "$tmp/perf.data" --no-children -g none --sort sym --stdio 2>/dev/null |
        grep -v '^#' | grep -v '^$' | head -40
      ;;
  esac
  echo "  backend connections: $(ss -Htn state established "dst 127.0.0.1:18140" | wc -l)"
  kill "$pid"; wait "$pid" 2>/dev/null
done
