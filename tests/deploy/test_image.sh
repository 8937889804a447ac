#!/usr/bin/env bash
# The container image of docs/deploy/Containerfile builds from this tree with
# podman and runs: unprivileged, proxying to a backend on loopback, answering
# its probes, reloading on SIGHUP and draining on "podman stop" to exit 0.
#
# It takes minutes and root, so it runs only when asked for with
# CORRAL_TEST_IMAGE=1: scripts/test, which runs every tests/*/test_*.sh,
# gets a skip.  It skips (exit 0) too where podman is missing, or where the
# base image must be made and debootstrap is missing.
#
# The base is CORRAL_IMAGE_BASE if set (for example
# docker.io/library/debian:bookworm-slim where it can be pulled), otherwise
# localhost/bookworm-base, made once with debootstrap and kept for the next
# run (CORRAL_DEBIAN_MIRROR and CORRAL_DEBIAN_SECURITY choose where from).
# The image (CORRAL_IMAGE_TAG, default localhost/corral-test) is built from
# scratch, leaving no cached layers, and removed at the end unless
# CORRAL_IMAGE_KEEP=1.  CORRAL_PODMAN_OPTS replaces the global podman
# options (default: the vfs storage driver and cgroupfs, which work inside a
# container or a sandbox, and runc where the cgroups are hybrid).
set -euo pipefail
cd "$(dirname "$0")/../.."

skip() {
  echo "SKIP: $*"
  exit 0
}
[ "${CORRAL_TEST_IMAGE:-0}" = 1 ] ||
  skip "builds and runs the container image (minutes, as root): CORRAL_TEST_IMAGE=1 $0"
command -v podman >/dev/null || skip "podman is not installed (Debian: apt-get install podman)"
for tool in curl python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
default_opts="--storage-driver vfs --cgroup-manager cgroupfs"
# crun (podman's default runtime on Debian 12) refuses a hybrid cgroup
# hierarchy, v1 controllers beside a v2 mount; runc takes it.
if [ -z "${CORRAL_PODMAN_OPTS:-}" ] && [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
  command -v runc >/dev/null || skip "crun does not run on hybrid cgroups: install runc"
  default_opts+=" --runtime runc"
fi
read -r -a podman_opts <<<"${CORRAL_PODMAN_OPTS:-$default_opts}"
pm() { podman "${podman_opts[@]}" "$@"; }
# Not "pm logs | grep -q": grep's early exit fails the pipe (pipefail).
logs() { pm logs "$name" 2>&1; }
# Containers on the host's network (no port mapping needed), with limits
# below any host's: podman's defaults for root may be above what a sandbox
# allows, and lowering a limit needs no privilege.
prun() { pm run --network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 "$@"; }
base=${CORRAL_IMAGE_BASE:-localhost/bookworm-base}
tag=${CORRAL_IMAGE_TAG:-localhost/corral-test}
name=corral-test-$$
mirror=${CORRAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}

tmp=$(mktemp -d)
backend=
stopper=
slow=
cleanup() {
  local status=$?
  set +e # to the end: the test's status is what this returns
  if pm container exists "$name" 2>/dev/null; then
    if ((status != 0)); then
      echo "--- the container's log:" >&2
      pm logs "$name" >&2 || true
    fi
    pm rm -f -t 0 "$name" >/dev/null 2>&1 || true
  fi
  for pid in $backend $stopper $slow; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${CORRAL_IMAGE_KEEP:-0}" != 1 ] && pm image exists "$tag" 2>/dev/null; then
    pm rmi -f "$tag" >/dev/null 2>&1 || true
  fi
  # debootstrap mounts /proc and /sys in its target while it runs: never
  # delete through a mount it left behind.
  findmnt -rn -o TARGET | grep "^$tmp/" | sort -r | while read -r m; do umount -l "$m" || true; done
  rm -rf --one-file-system "$tmp"
  exit "$status"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# ---------------------------------------------------------------- the base
if ! pm image exists "$base"; then
  if [ -n "${CORRAL_IMAGE_BASE:-}" ]; then
    echo "pulling $base"
    pm pull "$base" >/dev/null || fail "could not pull $base"
  else
    command -v debootstrap >/dev/null || skip "no $base, and debootstrap is not installed to make it"
    [ "$(id -u)" -eq 0 ] || skip "no $base, and debootstrap needs root to make it"
    echo "making $base with debootstrap from $mirror"
    nice -n 19 debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
      fail "debootstrap: $(tail -5 "$tmp/debootstrap.log")"
    # Updates and security fixes too, as debian:bookworm-slim has them.
    printf 'deb %s %s main\n' "$mirror" bookworm "$mirror" bookworm-updates \
      "${CORRAL_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}" bookworm-security \
      >"$tmp/rootfs/etc/apt/sources.list"
    # Without the package lists and the downloaded packages (80 MB), as
    # the slim image has none either.
    rm -rf "$tmp/rootfs"/var/lib/apt/lists/* "$tmp/rootfs"/var/cache/apt/*.bin \
      "$tmp/rootfs"/var/cache/apt/archives/*.deb
    tar -C "$tmp/rootfs" -c . | pm import -q - "$base" >/dev/null || fail "podman import"
    rm -rf --one-file-system "$tmp/rootfs"
  fi
fi

# --------------------------------------------------------------- the image
echo "building $tag from $base"
started=$(date +%s)
nice -n 19 podman "${podman_opts[@]}" build --layers=false --network host \
  --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --build-arg "BASE=$base" \
  -f docs/deploy/Containerfile -t "$tag" . >"$tmp/build.log" 2>&1 ||
  fail "podman build: $(tail -20 "$tmp/build.log")"
size=$(pm image inspect -f '{{.Size}}' "$tag")
echo "built in $(($(date +%s) - started)) s: $((size / 1000000)) MB, $(podman --version)"

user=$(pm image inspect -f '{{.Config.User}}' "$tag")
[ "$user" = 65532:65532 ] || fail "the image runs as '$user', not 65532:65532"
# Every library the daemon links is in the image, and nothing of the build.
libs=$(prun --rm --entrypoint ldd "$tag" /usr/sbin/corral) || fail "ldd: $libs"
if grep -q "not found" <<<"$libs"; then fail "missing libraries: $(grep "not found" <<<"$libs")"; fi
prun --rm --entrypoint sh "$tag" -c \
  'test ! -e /src && ! command -v cc && ! command -v ninja' >/dev/null ||
  fail "the image holds build tools or the source tree"
# The configuration it ships is valid.
out=$(prun --rm "$tag" -t -c /etc/corral/corral.conf 2>&1) ||
  fail "corral -t of the shipped corral.conf: $out"

# ------------------------------------------------------------- the backend
# /hello answers at once; /slow writes slow.started, then answers after 5 s.
cat >"$tmp/backend.py" <<'EOF'
import http.server, sys, time
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/slow":
            open(sys.argv[1] + "/slow.started", "w").close()
            time.sleep(5)
        body = ("backend says %s\n" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + "/backend.port", "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
EOF
python3 "$tmp/backend.py" "$tmp" &
backend=$!
for _ in $(seq 100); do [ -s "$tmp/backend.port" ] && break; sleep 0.1; done
[ -s "$tmp/backend.port" ] || fail "the backend did not start"
backend_port=$(cat "$tmp/backend.port")

# ---------------------------------------------------------------- the run
# Loopback ports chosen by the kernel and read from the log.
cat >"$tmp/corral.conf" <<EOF
workers 2;
max_connections 1000;
shutdown_delay 3s;
drain_timeout 20s;
error_log stderr info;
admin {
    listen 127.0.0.2:0;
}
upstream app {
    server 127.0.0.1:$backend_port;
}
server {
    listen 127.0.0.1:0;
    location / {
        proxy_pass http://app;
    }
}
EOF
chmod 644 "$tmp/corral.conf"
# As docs/deploy/kubernetes.yaml's securityContext runs it: a read-only
# root, no capabilities, no privilege escalation.
prun -d --name "$name" --read-only --cap-drop all --security-opt no-new-privileges \
  -v "$tmp/corral.conf:/etc/corral/corral.conf:ro" "$tag" >/dev/null ||
  fail "podman run"
port=
admin=
for _ in $(seq 100); do
  log=$(logs)
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' <<<"$log" | tail -1)
  admin=$(sed -n 's/.*listening on 127\.0\.0\.2:\([0-9]*\) (admin)$/\1/p' <<<"$log" | tail -1)
  [ -n "$port" ] && [ -n "$admin" ] && break
  [ "$(pm inspect -f '{{.State.Running}}' "$name")" = true ] || fail "the daemon exited"
  sleep 0.1
done
[[ -n "$port" && -n "$admin" ]] || fail "the daemon did not start listening"

pid=$(pm inspect -f '{{.State.Pid}}' "$name")
uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
[ "$uids" = "65532 65532 65532 65532" ] || fail "the daemon runs with uids $uids"
caps=$(awk '/^CapEff:/ { print $2 }' "/proc/$pid/status")
[ "$caps" = 0000000000000000 ] || fail "the daemon has capabilities $caps"

get() { curl --noproxy "*" -sS --max-time 10 -o "$tmp/body" -w '%{http_code}' "$1" || true; }
[ "$(get "http://127.0.0.1:$port/hello")" = 200 ] || fail "proxied request: $(cat "$tmp/body" 2>/dev/null)"
[ "$(cat "$tmp/body")" = "backend says /hello" ] || fail "proxied body: $(cat "$tmp/body")"
[ "$(get "http://127.0.0.2:$admin/healthz")" = 200 ] || fail "/healthz"
[ "$(get "http://127.0.0.2:$admin/readyz")" = 200 ] || fail "/readyz before the stop"
[ "$(get "http://127.0.0.2:$admin/metrics")" = 200 ] || fail "/metrics"
grep -q '^corral_' "$tmp/body" || fail "/metrics has no corral_ metric"

# SIGHUP reloads in place (the daemon is the container's process 1).
pm kill --signal HUP "$name" >/dev/null
for _ in $(seq 100); do
  grep -q "generation 1: draining" <<<"$(logs)" && break
  sleep 0.1
done
grep -q "generation 1: draining" <<<"$(logs)" || fail "no new generation after SIGHUP"
if grep -q "reload failed" <<<"$(logs)"; then fail "the reload failed"; fi
[ "$(get "http://127.0.0.1:$port/hello")" = 200 ] || fail "proxied request after the reload"

# podman stop: /readyz turns 503 while requests are still served for
# shutdown_delay, a request in flight finishes, and the daemon exits 0 (a
# stop that timed out would be SIGKILL, 137).
curl --noproxy "*" -sS --max-time 30 -o "$tmp/slow.body" -w '%{http_code}' "http://127.0.0.1:$port/slow" >"$tmp/slow.code" 2>&1 &
slow=$!
for _ in $(seq 100); do [ -e "$tmp/slow.started" ] && break; sleep 0.1; done
[ -e "$tmp/slow.started" ] || fail "the slow request did not reach the backend"
started=$(date +%s%N)
pm stop -t 60 "$name" >/dev/null 2>"$tmp/stop.err" &
stopper=$!
ready=
for _ in $(seq 100); do
  ready=$(get "http://127.0.0.2:$admin/readyz")
  [ "$ready" = 503 ] && break
  sleep 0.05
done
[ "$ready" = 503 ] || fail "/readyz answered $ready after SIGTERM"
code=$(get "http://127.0.0.1:$port/hello")
elapsed=$((($(date +%s%N) - started) / 1000000))
# shutdown_delay is 3 s: well within it, new requests must still be served.
((elapsed < 2500)) || fail "the machine is too slow to check shutdown_delay (${elapsed} ms)"
[ "$code" = 200 ] || fail "a request during shutdown_delay got $code"
wait "$stopper" || fail "podman stop: $(cat "$tmp/stop.err")"
stopper=
wait "$slow" || true
slow=
[ "$(cat "$tmp/slow.code")" = 200 ] || fail "the request in flight got $(cat "$tmp/slow.code")"
[ "$(cat "$tmp/slow.body")" = "backend says /slow" ] || fail "the request in flight: $(cat "$tmp/slow.body")"
stopped_ms=$((($(date +%s%N) - started) / 1000000))
status=$(pm inspect -f '{{.State.ExitCode}}' "$name")
[ "$status" = 0 ] || fail "the daemon exited with $status"
log=$(logs)
grep -q "not ready; stopping in 3000 ms" <<<"$log" || fail "no shutdown_delay in the log"
[[ $(tail -n 1 <<<"$log") == *"] stopped" ]] || fail "the log does not end with the stop"
echo "stop: /readyz 503 at once, the request in flight answered, exit 0 after ${stopped_ms} ms"
echo "PASS: the image builds, runs as 65532, proxies, answers its probes, reloads and drains"
