#!/usr/bin/env bash
# Raw-frame HTTP/2 tests (tests/proto/h2/h2frames.py): malformed requests and
# the known HTTP/2 attacks against build/corral, then build/asan/corral (whose
# sanitizer reports fail the run), each in front of a recording backend.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/proto/h2/both_daemons.sh

"$py" -c 'import h2, hpack' 2>/dev/null || fail "python3-h2 is not installed (scripts/deps.sh)"
# Each run bounds itself (~60 s); the timeouts are for a harness that
# hangs.  ASan's quarantine keeps freed memory resident: no RSS bounds
# there.
both_daemons tests/proto/h2/h2frames.py "raw-frame HTTP/2 cases" 300 --no-rss
