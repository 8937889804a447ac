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

failed=0
echo "=== build/corral"
timeout 120 "$py" "$harness" -v --daemon build/corral || failed=1
echo "=== build/asan/corral"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  timeout 300 "$py" "$harness" -v --daemon build/asan/corral || failed=1
((failed == 0)) || fail "gRPC cases (above)"
echo "PASS: gRPC cases against build/corral and build/asan/corral"
