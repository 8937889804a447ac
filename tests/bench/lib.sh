# tests/bench/lib.sh: the start-up the bench scripts share, sourced by them
# (`. "$(dirname "$0")/lib.sh"`) after reading their options: checking for
# the peers, the binaries of build/, a temporary directory, a certificate,
# starting peers that are stopped at exit, waiting for a port to answer, a
# free port, and the nginx `return 200 "hello world\n"` that most of them
# proxy to.

# bench_need SCRIPT PACKAGES COMMAND...: exits 2, naming the Debian
# PACKAGES to install, unless every COMMAND is on the PATH.
bench_need() {
  local script=$1 packages=$2 c
  shift 2
  for c in "$@"; do
    command -v "$c" >/dev/null ||
      { echo "$script: needs $c (apt-get install $packages)" >&2; exit 2; }
  done
}

# bench_build NAME [PATH]: the absolute path of a binary to run: PATH, else
# build/NAME (built first if missing).  Exits 2 when it cannot be.
bench_build() {
  local bin=${2:-}
  if [ -z "$bin" ]; then
    bin=build/$1
    [ -x "$bin" ] || ninja "$bin" >/dev/null || exit 2
  fi
  realpath "$bin" || exit 2
}

# bench_corral [PATH]: the corral binary to run, as bench_build gives it.
bench_corral() {
  bench_build corral "${1:-}"
}

# bench_tmp: a temporary directory in $tmp; at exit (an interrupt too) the
# processes bench_start started are stopped and the directory removed.
bench_tmp() {
  tmp=$(mktemp -d) || exit 2
  pids=()
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

bench_cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}

# bench_cert DIR [NAME [ec|rsa]]: a self-signed certificate for NAME
# (localhost) and 127.0.0.1, valid 2 days, in DIR/cert.pem, its key
# (ECDSA P-256, or RSA 2048 with rsa) in DIR/key.pem, and the two in one
# file (as HAProxy wants them) in DIR/cert-key.pem, readable by all (a
# peer's workers may run as another user).  Exits 2 when openssl fails.
bench_cert() {
  local dir=$1 name=${2:-localhost} newkey out
  case ${3:-ec} in
    ec) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
    rsa) newkey=(-newkey rsa:2048) ;;
    *) echo "bench_cert: key ec or rsa, not $3" >&2; exit 2 ;;
  esac
  out=$(openssl req -x509 "${newkey[@]}" -nodes -days 2 -keyout "$dir/key.pem" \
    -out "$dir/cert.pem" -subj "/CN=$name" -addext "subjectAltName=DNS:$name,IP:127.0.0.1" 2>&1) ||
    { echo "${0##*/}: openssl req failed: $out" >&2; exit 2; }
  cat "$dir/cert.pem" "$dir/key.pem" >"$dir/cert-key.pem" || exit 2
  chmod a+r "$dir/cert.pem" "$dir/key.pem" "$dir/cert-key.pem"
}

# bench_start COMMAND...: runs COMMAND in the background, to be stopped at
# exit; its pid in $started.  Redirections go around the call.
bench_start() {
  "$@" &
  started=$!
  pids+=("$started")
}

# bench_wait PORT [SCHEME [PID]]: waits until 127.0.0.1:PORT answers an
# HTTP request over SCHEME (http; https with SNI "localhost", which every
# peer has a certificate for), 5 s at most, or until PID has exited.
# Returns 0 once it answers, else 1.
bench_wait() {
  local port=$1 scheme=${2:-http} pid=${3:-}
  for _ in $(seq 50); do
    curl -sk -o /dev/null --max-time 2 --resolve "localhost:$port:127.0.0.1" \
      "$scheme://localhost:$port/" && return 0
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# bench_free_port [tcp|udp]: a port free now on 127.0.0.1.
bench_free_port() {
  python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "${1:-tcp}"
}

# bench_nginx_backend FILE PORT [WORKERS [LOCATIONS]]: writes to FILE the
# configuration of an nginx on 127.0.0.1:PORT answering
# `return 200 "hello world\n"` with WORKERS workers (1), in the foreground,
# keep-alive without limit, no access log; LOCATIONS are more of its
# server's lines.  Its pid and error log are FILE's name with .pid, .err.
bench_nginx_backend() {
  local file=$1 port=$2 workers=${3:-1} locations=${4:-}
  cat >"$file" <<CONF
worker_processes $workers;
daemon off;
pid ${file%.conf}.pid;
error_log ${file%.conf}.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  sendfile on;
  server {
    listen 127.0.0.1:$port backlog=4096;
    location / { return 200 "hello world\n"; }
$locations
  }
}
CONF
}

# bench_haproxy_h2 FILE PORT SERVER: writes to FILE the configuration of a
# one-thread HAProxy terminating TLS with ALPN h2 on 127.0.0.1:PORT (the
# certificate and key bench_cert made in FILE's directory, as
# cert-key.pem), keeping connections alive and reusing them towards the
# one SERVER line's backend (`127.0.0.1:18080`, `127.0.0.1:18080 proto h2`):
# the settings of ../shared/bench/peers/run-h2.sh.
bench_haproxy_h2() {
  local file=$1 port=$2 server=$3
  cat >"$file" <<CONF
global
  nbthread 1
  maxconn 8192
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:$port ssl crt $(dirname "$file")/cert-key.pem alpn h2,http/1.1
  default_backend be
backend be
  http-reuse always
  server s1 $server
CONF
}

# bench_busy_pct: how busy the machine's CPUs were over the next second, in
# percent: other work skews every number a bench prints.
bench_busy_pct() {
  local b0 b1
  b0=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat)
  sleep 1
  b1=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat)
  awk -v a="$b0" -v b="$b1" 'BEGIN{split(a, x, " "); split(b, y, " ");
    printf "%.0f\n", (y[2] > x[2]) ? 100 * (y[1] - x[1]) / (y[2] - x[2]) : 0}'
}
