#!/usr/bin/env bash
# A program linked with -L build -lcorral runs from the build tree: the
# soname link (libcorral.so.MAJOR) sits beside build/libcorral.so, as the
# install puts it beside the installed library.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

ninja build/libcorral.so >/dev/null
major=$(scripts/version.sh major)
ninja "build/libcorral.so.$major" >/dev/null || fail "no build rule for build/libcorral.so.$major"
[ "$(readlink "build/libcorral.so.$major")" = "libcorral.so" ] ||
  fail "build/libcorral.so.$major does not link to libcorral.so"

cc -o "$tmp/app" docs/examples/echo.c -Icore/include -L build -lcorral || fail "link with -lcorral"
readelf -dW "$tmp/app" | grep -q "(NEEDED).*\[libcorral.so.$major\]" ||
  fail "the program does not record libcorral.so.$major"
LD_LIBRARY_PATH=build "$tmp/app" 127.0.0.1:0 1 >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/out" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/out")
[ -n "$port" ] || fail "the program did not start from the build tree: $(cat "$tmp/out")"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'from the build tree' >&3
reply=$(timeout 5 head -c 19 <&3) || true
exec 3>&-
[ "$reply" = "from the build tree" ] || fail "echo reply was '$reply'"
kill -TERM "$pid"
wait "$pid" || fail "the program exited with $?"
pid=
echo "PASS: a program linked with -L build -lcorral runs from the build tree"
