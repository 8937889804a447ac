# tests/proto/h2/both_daemons.sh: sourced by the HTTP/2 script tests (test_grpc.sh,
# test_h2_upstream.sh, test_http2_frames.sh) from the top of the tree:
# $py, fail(), and both_daemons(), which runs a python3 harness against
# build/corral and build/asan/corral (whose sanitizer reports fail the
# run).
# shellcheck shell=bash
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the tree
fail() { echo "FAIL: $*" >&2; exit 1; }

# both_daemons HARNESS WHAT RELEASE_SECONDS [ASAN_ARG...]: the harness's
# `-v --daemon` runs, bounded in time (the ASan one to 300 s), `WHAT`
# naming them in the verdict.  The two runs go side by side, each daemon
# and backend on ports of its own: most of a run's time is waiting, not
# CPU.  Each one's output goes to a file, printed whole once both have
# ended.
both_daemons() {
  local harness=$1 what=$2 release_seconds=$3
  shift 3
  ninja build/corral build/asan/corral >/dev/null || fail "build"
  both_daemons_out=$(mktemp -d)
  trap 'rm -rf "$both_daemons_out"' EXIT
  local out=$both_daemons_out
  timeout "$release_seconds" "$py" "$harness" -v --daemon build/corral >"$out/release" 2>&1 &
  local release=$!
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    timeout 300 "$py" "$harness" -v --daemon build/asan/corral "$@" >"$out/asan" 2>&1 &
  local asan=$!
  local failed=0
  wait $release || failed=1
  wait $asan || failed=1
  echo "=== build/corral"
  cat "$out/release"
  echo "=== build/asan/corral"
  cat "$out/asan"
  ((failed == 0)) || fail "$what (above)"
  echo "PASS: $what against build/corral and build/asan/corral"
}
