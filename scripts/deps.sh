# deps.sh: sourced by scripts/run and scripts/test.  Installs the Debian
# packages corral needs that are missing, then nothing else.
# openssl: the TLS tests make their certificates with it; binutils: readelf,
# with which tests/build/test_hardening.sh reads the binaries.  zlib1g-dev,
# libbrotli-dev, libzstd-dev: response compression; brotli, zstd and
# python3-brotli decode it in the tests.  libcrypt-dev (libxcrypt) and
# libjansson-dev: auth_basic's hashes and auth_jwt's JSON; apache2-utils:
# htpasswd, with which the auth tests make their files.  libngtcp2-dev,
# libngtcp2-crypto-gnutls-dev, libnghttp3-dev and libgnutls28-dev: HTTP/3
# (proto/http3/); ngtcp2-client: gtlsclient, its tests' independent client.
# liburing-dev: the ring through which a loop batches its sends and reads
# (core/io_batch.c).
corral_packages=(ninja-build pkg-config gcc clang libclang-rt-14-dev libssl-dev check node-llhttp
                 libnghttp2-dev libpcre2-dev nghttp2-client curl wrk openssl binutils clang-format
                 python3-h2 libbpf-dev bpftool zlib1g-dev libbrotli-dev libzstd-dev brotli zstd
                 python3-brotli libcrypt-dev libjansson-dev apache2-utils python3-grpcio
                 libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev libgnutls28-dev
                 ngtcp2-client liburing-dev)

# The peers and load generators of the benchmarks (tests/bench/ and
# ../shared/bench/peers/): not needed by the tests.
corral_bench_packages=(nginx-light libnginx-mod-stream haproxy h2o wrk nghttp2-client curl iperf3
                        apache2-utils varnish)

corral_install_deps() { # [package...]: corral_packages by default
  local missing=()
  local wanted=("$@")
  ((${#wanted[@]} > 0)) || wanted=("${corral_packages[@]}")
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  local sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
