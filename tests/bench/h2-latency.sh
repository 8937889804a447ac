#!/usr/bin/env bash
# HTTP/2 latency percentiles next to ../shared/bench/peers/run-h2.sh's CPU
# figures.  h2load prints no percentile, but it can log every request's time
# (--log-file): a stand-in `h2load` first on PATH adds that flag, and each
# run's log is reduced to p50/p99/p99.9 per proxy, told apart by port.
#
# usage: tests/bench/h2-latency.sh [run-h2.sh options, e.g. -r 3 -c 10 -m 32]
#        (corral's side, -P, is added from tests/bench/proxy-h2.conf)
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${PEERS_RUN_H2:-../shared/bench/peers/run-h2.sh}
real=$(command -v h2load) || { echo "h2-latency.sh: h2load is missing (nghttp2-client)" >&2; exit 2; }
ninja build/corral >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/logs"
# The stand-in names each log after the URL's port and a sequence number, so
# rounds stay apart.
cat >"$tmp/bin/h2load" <<EOF
#!/usr/bin/env bash
url=\${!#}
port=\${url##*:}; port=\${port%%/*}
n=\$(ls "$tmp/logs" | grep -c "^\$port\\." || true)
exec "$real" --log-file="$tmp/logs/\$port.\$n" "\$@"
EOF
chmod +x "$tmp/bin/h2load"
P="sh -c 'sed -e s,CRT,{crt}, -e s,KEY,{key}, tests/bench/proxy-h2.conf > $tmp/corral-h2.conf && exec build/corral -c $tmp/corral-h2.conf'"
PATH="$tmp/bin:$PATH" "$run" -P "$P" "$@"
# Rows: start (µs since epoch), status, time to the end of the response (µs).
declare -A name=([18091]=nginx [18092]=haproxy [18093]=h2o [18094]=corral)
for port in 18091 18092 18093 18094; do
  for log in "$tmp/logs/$port".*; do
    [ -s "$log" ] || continue
    sort -t$'\t' -k3,3n "$log" | awk -F'\t' -v who="${name[$port]}" -v round="${log##*.}" '
      { t[NR] = $3; if ($2 != 200) bad++ }
      END {
        if (NR == 0) exit
        printf "latency round %d %-8s n=%d p50=%.0fus p99=%.0fus p99.9=%.0fus non200=%d\n",
          round + 1, who, NR, t[int(NR * 0.5) + 1], t[int(NR * 0.99) + 1], t[int(NR * 0.999) + 1], bad
      }'
  done
done
