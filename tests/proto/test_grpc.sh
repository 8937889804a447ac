#!/usr/bin/env bash
# gRPC through grpc_pass (tests/proto/h2/grpc_cases.py): a python3-grpcio
# client and server around build/corral, then build/asan/corral (whose
# sanitizer reports fail the run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/proto/h2/both_daemons.sh

"$py" -c 'import grpc' 2>/dev/null || fail "python3-grpcio is not installed (scripts/deps.sh)"
both_daemons tests/proto/h2/grpc_cases.py "gRPC cases" 120
