#!/usr/bin/env bash
# The proxy benchmark with an operator's policy: corral with
# tests/bench/policy.conf against nginx with the same policy
# (tests/bench/policy-nginx.conf), HAProxy and h2o as the harness runs them,
# through a copy of ../shared/bench/peers whose nginx config is the ported
# one.  Arguments go to run.sh (e.g. -r 5).
#
# usage: tests/bench/policy.sh [run.sh options]
set -euo pipefail
cd "$(dirname "$0")/../.."
peers=${PEERS_DIR:-../shared/bench/peers}
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp "$peers"/* "$copy/"
cp tests/bench/policy-nginx.conf "$copy/proxy-nginx.conf"
ninja build/corral >/dev/null
"$copy/run.sh" -P "build/corral -c tests/bench/policy.conf" -p 18084 -w 1 "$@"
