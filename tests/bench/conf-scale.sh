#!/usr/bin/env bash
# How `corral -t` scales with the size of a configuration: generates large
# configurations (many locations, many server blocks, many listen
# addresses, upstreams, inherited error pages) and prints the wall-clock
# and CPU time and the peak memory of `corral -t` on each.
# Parsing and building should grow linearly: doubling a count should about
# double its time.
#
# usage: tests/bench/conf-scale.sh [-b BINARY] [CASE...]
#   CASE is NAME:COUNT with NAME one of locations, servers, listens,
#   listen-servers, upstreams, error-pages; default: the figures in
#   docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/corral
if [[ ${1:-} == -b ]]; then
  bin=$2
  shift 2
fi
cases=("$@")
((${#cases[@]})) || cases=(locations:50000 locations:100000 servers:10000 servers:20000
  listens:5000 listens:10000 listen-servers:10000 upstreams:10000 error-pages:20000)
[[ -x $bin ]] || ninja "$bin" >/dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# One server with COUNT prefix locations.
gen_locations() {
  echo 'server { listen 127.0.0.1:18500;'
  for ((i = 0; i < $1; i++)); do echo "  location /p$i { return 200 \"$i\"; }"; done
  echo '}'
}

# COUNT server blocks on one address, each with its own name.
gen_servers() {
  for ((i = 0; i < $1; i++)); do
    echo "server { listen 127.0.0.1:18500; server_name s$i.example; location / { return 200; } }"
  done
}

# One server block listening on COUNT addresses.
gen_listens() {
  echo 'server {'
  for ((i = 0; i < $1; i++)); do
    echo "  listen 127.$((i / 250 % 250)).$((i % 250)).1:18500;"
  done
  echo '  location / { return 200; } }'
}

# COUNT server blocks, each on an address of its own.
gen_listen-servers() {
  for ((i = 0; i < $1; i++)); do
    echo "server { listen 127.$((i / 250 % 250)).$((i % 250)).1:18500; location / { return 200; } }"
  done
}

# COUNT locations, each proxying to an upstream block of its own.
gen_upstreams() {
  for ((i = 0; i < $1; i++)); do echo "upstream u$i { server 127.0.0.1:$((20000 + i % 10000)); }"; done
  echo 'server { listen 127.0.0.1:18500;'
  for ((i = 0; i < $1; i++)); do echo "  location /p$i { proxy_pass http://u$i; }"; done
  echo '}'
}

# Wall-clock and CPU (user + system) seconds: on a shared machine the CPU
# time is the steadier figure.
# One server with COUNT locations that inherit an error_page to a named one.
gen_error-pages() {
  echo 'server { listen 127.0.0.1:18500; error_page 502 @down;'
  echo '  location @down { return 503; }'
  for ((i = 0; i < $1; i++)); do echo "  location /p$i { error_page 404 @down; return 200; }"; done
  echo '}'
}

printf '%-16s %8s %8s %8s %9s %9s\n' case count wall cpu max_rss status
for c in "${cases[@]}"; do
  name=${c%%:*} count=${c##*:}
  file=$dir/$name-$count.conf
  "gen_$name" "$count" >"$file"
  status=0
  /usr/bin/time -o "$dir/time" -f '%e %U %S %M' "$bin" -t -c "$file" >/dev/null 2>"$dir/err" ||
    status=$?
  read -r wall user sys rss <"$dir/time"
  printf '%-16s %8d %8.2f %8.2f %7dMB %9s\n' "$name" "$count" "$wall" \
    "$(echo "$user + $sys" | bc)" $((rss / 1024)) \
    "$([[ $status == 0 ]] && echo ok || echo "exit $status")"
  [[ $status == 0 ]] || head -3 "$dir/err" >&2
done
