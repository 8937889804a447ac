#!/usr/bin/env bash
# 1 GB each way through corral's stream proxy to an echo backend, at
# once, checked by SHA-256 on both ends (the Check suite moves 48 MB;
# this is the long run), with the wall time and corral's CPU time.
#
# usage: tests/bench/stream-1gb.sh [-m MEGABYTES]   (default 1024)
set -euo pipefail
MB=1024
while getopts "m:" o; do
  case $o in m) MB=$OPTARG;; *) exit 2;; esac
done
cd "$(dirname "$0")/../.."
ninja build/corral >/dev/null
. tests/bench/lib.sh
bench_tmp
cat >"$tmp/echo.py" <<'PY'
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 15501)); s.listen(16)
while True:
    c, _ = s.accept()
    def run(c=c):
        while True:
            d = c.recv(1 << 20)
            if not d:
                break
            c.sendall(d)
        c.shutdown(socket.SHUT_WR); c.close()
    threading.Thread(target=run, daemon=True).start()
PY
cat >"$tmp/client.py" <<'PY'
import hashlib, socket, sys, threading, time
mb = int(sys.argv[1]); total = mb << 20
c = socket.create_connection(("127.0.0.1", 15502))
block = bytes((i * 131 >> 3) & 0xff for i in range(1 << 20))
sent = hashlib.sha256(); got = hashlib.sha256(); n = [0]
def receive():
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        got.update(d); n[0] += len(d)
t = threading.Thread(target=receive); t.start()
t0 = time.time()
for _ in range(mb):
    sent.update(block); c.sendall(block)
c.shutdown(socket.SHUT_WR); t.join()
ok = n[0] == total and got.digest() == sent.digest()
print(f"{mb} MB each way in {time.time() - t0:.2f} s: {'intact (SHA-256)' if ok else 'CORRUPT'}")
sys.exit(0 if ok else 1)
PY
cat >"$tmp/corral.conf" <<CONF
workers 1;
stream { server { listen 127.0.0.1:15502; proxy_pass 127.0.0.1:15501; } }
CONF
bench_start python3 "$tmp/echo.py"
bench_start build/corral -c "$tmp/corral.conf" 2>"$tmp/corral.log"; corral="$started"
sleep 1
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
c0=$(ticks $corral)
python3 "$tmp/client.py" "$MB"
c1=$(ticks $corral)
awk -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v mb="$MB" \
  'BEGIN{printf "corral: %.2f CPU-s for %d MB each way (%.0f MB per CPU-second)\n", c/hz, mb, c ? 2*mb*hz/c : 0}'
