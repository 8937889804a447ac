#!/usr/bin/env bash
# CPU time per proxied request against response size, for nginx, HAProxy, h2o
# and corral side by side: ../shared/bench/peers/run.sh once per body size
# (keep-alive, 16 connections, one worker each), then the chart.
#
# usage: tests/bench/sizes.sh OUTDIR [SIZE...]   (sizes in bytes; default 4 KB to 4 MB)
#        scripts/plot-sizes.py docs/proxy-sizes.svg OUTDIR/*.txt
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: tests/bench/sizes.sh OUTDIR [SIZE...]}
shift
sizes=("$@")
((${#sizes[@]})) || sizes=(4096 16384 65536 262144 1048576 4194304)
run=${PEERS_RUN:-../shared/bench/peers/run.sh}
mkdir -p "$out"
ninja build/corral >/dev/null
for size in "${sizes[@]}"; do
  "$run" -b "$size" -c 16 -r 3 -P 'build/corral -c tests/bench/proxy.conf' -p 18084 -w 1 \
    >"$out/$size.txt" 2>&1
  grep -E '^(cpu_us_per_req|paired)' "$out/$size.txt" | sed "s/^/$size: /"
done
scripts/plot-sizes.py "$out/chart.svg" "$out"/[0-9]*.txt
echo "chart: $out/chart.svg"
