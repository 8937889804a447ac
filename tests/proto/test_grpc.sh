#!/usr/bin/env bash
# gRPC through grpc_pass (tests/proto/h2/grpc_cases.py): a python3-grpcio
# client and server around build/corral, then build/asan/corral (whose
# sanitizer reports fail the run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the tree
harness=tests/proto/h2/grpc_cases.py
fail() { echo "FAIL: $*" >&2; exit 1; }

"$py" -c 'import grpc' 2>/dev/null || fail "python3-grpcio is not installed (scripts/deps.sh)"
ninja build/corral build/asan/corral >/dev/null || fail "build"

# The two runs go side by side, each daemon and backend on ports of its
# own: most of a run's time is waiting, not CPU.  Each one's output goes
# to a file, printed whole once both have ended.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
timeout 120 "$py" "$harness" -v --daemon build/corral >"$out/release" 2>&1 &
release=$!
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  timeout 300 "$py" "$harness" -v --daemon build/asan/corral >"$out/asan" 2>&1 &
asan=$!
failed=0
wait $release || failed=1
wait $asan || failed=1
echo "=== build/corral"
cat "$out/release"
echo "=== build/asan/corral"
cat "$out/asan"
((failed == 0)) || fail "gRPC cases (above)"
echo "PASS: gRPC cases against build/corral and build/asan/corral"
