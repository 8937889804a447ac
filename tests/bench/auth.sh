#!/usr/bin/env bash
# Authentication and tracing on the 12 B keep-alive proxy load: corral's
# tests/bench/proxy.conf with one of them turned on, against the harness's
# peers (../shared/bench/peers/run.sh, copied), every wrk request carrying
# the credentials.  nginx gets the same auth_basic (the same bcrypt file);
# it has no JWT check or OpenTelemetry module in Debian, so for those modes
# it runs plain, as HAProxy and h2o always do: compare with `plain` for
# what the feature costs corral.
#
# usage: tests/bench/auth.sh MODE [run.sh options]
#   plain    no policy: the reference
#   basic    auth_basic, a bcrypt (cost 10) user file, Basic credentials
#   jwt      auth_jwt, an ES256 token checked against its JWK set
#   trace    OpenTelemetry spans at 100% (exported to the backend)
#   trace1   the same at 1% (otel_sampler ratio=0.01)
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:?usage: tests/bench/auth.sh plain|basic|jwt|trace|trace1 [run.sh options]}
shift
peers=${PEERS_DIR:-../shared/bench/peers}
work=$(mktemp -d)
chmod 755 "$work" # nginx's workers read the user file as www-data
trap 'rm -rf "$work"' EXIT
cp "$peers"/* "$work/"
ninja build/corral >/dev/null

policy= nginx_policy= header=
case $mode in
plain) ;;
basic)
  htpasswd -cbB -C 10 "$work/users" alice secret 2>/dev/null
  chmod 644 "$work/users"
  policy="auth_basic b; auth_basic_user_file $work/users;"
  nginx_policy="auth_basic b; auth_basic_user_file $work/users;"
  header="Authorization: Basic $(printf alice:secret | base64)"
  ;;
jwt)
  cp tests/proto/jwt/jwks.json "$work/jwks.json"
  token=$(python3 - <<'EOF'
import re
text = open("tests/proto/jwt/vectors.h").read()
m = re.search(r'jwt_es256\[\] =((?:\s*"[^"]*")+)', text)
print("".join(re.findall(r'"([^"]*)"', m.group(1))))
EOF
)
  policy="auth_jwt api; auth_jwt_key_file $work/jwks.json;"
  header="Authorization: Bearer $token"
  ;;
trace)
  policy="otel_trace on; otel_trace_context propagate;"
  ;;
trace1)
  policy="otel_trace on; otel_trace_context propagate;"
  ;;
*)
  echo "auth.sh: unknown mode $mode" >&2
  exit 2
  ;;
esac

otel=
[[ $mode == trace* ]] && otel="otel_exporter { endpoint 127.0.0.1:18080; }"
[[ $mode == trace1 ]] && otel+=" otel_sampler ratio=0.01;"
cat >"$work/corral.conf" <<EOF
workers 1;
keepalive_requests 1000000;
$otel
upstream backend {
    server 127.0.0.1:18080;
    keepalive 64;
}
server {
    listen 127.0.0.1:18084 deferred;
    location / { $policy proxy_pass http://backend; }
}
EOF
if [[ -n $nginx_policy ]]; then
  sed -i "s|location / { proxy_pass|location / { $nginx_policy proxy_pass|" "$work/proxy-nginx.conf"
fi
if [[ -n $header ]]; then
  # Every wrk request carries the credentials.
  sed -i "s|out=\$(wrk |out=\$(wrk -H \"$header\" |" "$work/run.sh"
fi
"$work/run.sh" -P "build/corral -c $work/corral.conf" -p 18084 -w 1 "$@"
