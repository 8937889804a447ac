#!/usr/bin/env bash
# Raw-frame HTTP/2 tests (tests/proto/h2/h2frames.py): malformed requests and
# the known HTTP/2 attacks against build/corral, then build/asan/corral (whose
# sanitizer reports fail the run), each in front of a recording backend.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the tree
harness=tests/proto/h2/h2frames.py
fail() { echo "FAIL: $*" >&2; exit 1; }

"$py" -c 'import h2, hpack' 2>/dev/null || fail "python3-h2 is not installed (scripts/deps.sh)"
ninja build/corral build/asan/corral >/dev/null || fail "build"

# The two runs go side by side, each daemon on ports of its own: most of a
# run's time is the daemon's timeouts and the harness's waits, not CPU.
# Each one's output goes to a file, printed whole once both have ended.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Each run bounds itself (~60 s); the timeout is for a harness that hangs.
timeout 300 "$py" "$harness" -v --daemon build/corral >"$out/release" 2>&1 &
release=$!
# ASan's quarantine keeps freed memory resident: no RSS bounds there.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  timeout 300 "$py" "$harness" -v --daemon build/asan/corral --no-rss >"$out/asan" 2>&1 &
asan=$!
failed=0
wait $release || failed=1
wait $asan || failed=1
echo "=== build/corral"
cat "$out/release"
echo "=== build/asan/corral"
cat "$out/asan"
((failed == 0)) || fail "raw-frame HTTP/2 cases (above)"
echo "PASS: raw-frame HTTP/2 cases against build/corral and build/asan/corral"
