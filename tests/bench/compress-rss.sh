#!/usr/bin/env bash
# Memory per compressed stream: N clients (default 1000) each hold one
# response open through the proxy, from a backend that sends a first chunk
# of JSON and then pauses.  Each proxy (corral, and nginx for gzip) is
# measured twice: with Accept-Encoding for CODING (the coder's state is held
# for every stream) and without it (the same streams, passed through).  The
# difference of the proxy's RSS, divided by N, is what one compressed stream
# costs.  A benchmark, not a test: it prints numbers.
#
# usage: tests/bench/compress-rss.sh [-n STREAMS] [-z gzip|br|zstd] [-l LEVEL]
set -u
N=1000 CODING=gzip LEVEL=
while getopts "n:z:l:" o; do
  case $o in n) N=$OPTARG;; z) CODING=$OPTARG;; l) LEVEL=$OPTARG;; *) exit 2;; esac
done
cd "$(dirname "$0")/../.."
[ -x build/corral ] || ninja build/corral >/dev/null || exit 2
command -v nginx >/dev/null || { echo "compress-rss: needs nginx (apt-get install nginx-light)" >&2; exit 2; }
. tests/bench/lib.sh
bench_tmp
chmod a+rx "$tmp"
ulimit -n $((N * 4 + 256))

# The backend: each request gets its head and a 4 KB chunk of JSON, then
# nothing until the client side is done measuring (it closes).
cat >"$tmp/backend.py" <<'PY'
import asyncio, json, sys
chunk = (json.dumps([{"id": i, "name": "record %d" % i, "tags": ["a", "b"]} for i in range(60)]) + "\n").encode()[:4096]
async def serve(reader, writer):
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
        await reader.read()          # until the proxy closes
    except Exception:
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    async with server:
        await server.serve_forever()
asyncio.run(main())
PY
# The clients: N requests held open, each until its first body bytes
# arrived; then prints "ready" and waits for stdin to close.
cat >"$tmp/clients.py" <<'PY'
import asyncio, sys
port, n, accept = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
async def one(sem, held):
    async with sem:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = "GET /data HTTP/1.1\r\nHost: x\r\n" + ("Accept-Encoding: %s\r\n" % accept if accept != "-" else "") + "\r\n"
        writer.write(head.encode())
        await writer.drain()
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) == 0:
            more = await asyncio.wait_for(reader.read(65536), 20)
            if not more:
                raise SystemExit("closed early")
            data += more
        held.append(writer)
async def main():
    held, sem = [], asyncio.Semaphore(200)
    await asyncio.gather(*(one(sem, held) for _ in range(n)))
    print("ready %d" % len(held), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
PY
bench_start python3 "$tmp/backend.py" 18120

prefix=$CODING; [ "$CODING" = br ] && prefix=brotli   # the directives' names
level_corral=${LEVEL:+"${prefix}_comp_level $LEVEL;"}
cat >"$tmp/corral.conf" <<CONF
workers 1;
max_connections $((N * 2 + 100));
upstream backend { server 127.0.0.1:18120; keepalive 16; }
server {
  listen 127.0.0.1:18121;
  $prefix on; $level_corral ${prefix}_types application/json; ${prefix}_min_length 1;
  location / { proxy_pass http://backend; proxy_read_timeout 120s; }
}
CONF
cat >"$tmp/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $tmp/nginx.pid; error_log $tmp/nginx.err warn;
worker_rlimit_nofile $((N * 4 + 256));
events { worker_connections $((N * 2 + 100)); }
http {
  access_log off;
  upstream backend { server 127.0.0.1:18120; }
  gzip on; ${LEVEL:+gzip_comp_level $LEVEL;} gzip_types application/json; gzip_min_length 1; gzip_proxied any;
  server {
    listen 127.0.0.1:18122;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_buffering off; proxy_read_timeout 120s; }
  }
}
CONF
bench_start build/corral -c "$tmp/corral.conf" >"$tmp/corral.log" 2>&1; corral_pid="$started"
servers=("corral:18121:$corral_pid")
if [ "$CODING" = gzip ]; then
  bench_start nginx -c "$tmp/nginx.conf" >"$tmp/nginx.log" 2>&1
  servers+=("nginx:18122:$started")
fi
for s in "${servers[@]}"; do
  IFS=: read -r _ port _ <<<"$s"
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
done

rss_kb() { # RSS of a process and its children, in KB
  local t=0 p
  for p in $1 $(pgrep -P "$1"); do
    t=$((t + $(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
measure() { # NAME PORT PID ACCEPT: RSS with N streams held, in KB
  local fifo="$tmp/fifo.$RANDOM" out
  mkfifo "$fifo"
  python3 "$tmp/clients.py" "$2" "$N" "$4" <"$fifo" >"$tmp/clients.out" 2>&1 &
  local cp=$!
  exec 4>"$fifo"
  for _ in $(seq 600); do grep -q ready "$tmp/clients.out" 2>/dev/null && break; sleep 0.1; done
  out=$(rss_kb "$3")
  grep -q ready "$tmp/clients.out" ||
    { echo "compress-rss: $1: the clients did not get their streams: $(tail -2 "$tmp/clients.out"; grep -v "marked down" "$tmp/$1.log" | tail -4)" >&2; out=0; }
  exec 4>&-
  wait "$cp" 2>/dev/null
  rm -f "$fifo"
  sleep 1 # the proxy closes the streams and frees them
  echo "$out"
}
for s in "${servers[@]}"; do
  IFS=: read -r name port pid <<<"$s"
  idle=$(rss_kb "$pid")
  plain=$(measure "$name" "$port" "$pid" -)
  coded=$(measure "$name" "$port" "$pid" "$CODING")
  awk -v n="$name" -v i="$idle" -v p="$plain" -v c="$coded" -v s="$N" -v z="$CODING" 'BEGIN{
    printf "%-7s idle=%d KB  %d streams: plain=%d KB  %s=%d KB  per %s stream: %.1f KB (plain stream: %.1f KB)\n",
           n, i, s, p, z, c, z, (c - p) / s, (p - i) / s }'
done
