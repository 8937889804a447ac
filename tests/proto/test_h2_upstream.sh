#!/usr/bin/env bash
# HTTP/2 to misbehaving backends (tests/proto/h2/h2_backend_cases.py):
# GOAWAY mid-load, SETTINGS_MAX_CONCURRENT_STREAMS 1, REFUSED_STREAM, a window
# stalled at zero, a client that stops reading, a backend that dies, around
# build/corral, then build/asan/corral (whose sanitizer reports fail the
# run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/proto/h2/both_daemons.sh

"$py" -c 'import h2' 2>/dev/null || fail "python3-h2 is not installed (scripts/deps.sh)"
both_daemons tests/proto/h2/h2_backend_cases.py "HTTP/2 backend cases" 120
