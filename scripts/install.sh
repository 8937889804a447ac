#!/usr/bin/env bash
# install.sh: "ninja install".  Copies the release build into
# $DESTDIR$PREFIX (PREFIX defaults to /usr/local): the daemon, the benchmark,
# the library with its header and pkg-config file, the man page, the systemd
# unit and the documentation.
set -euo pipefail
prefix=${PREFIX:-/usr/local}
root=${DESTDIR:-}$prefix
libdir=$root/lib
# The version and the soname's major number, from corral.h.
version=$(scripts/version.sh)
major=$(scripts/version.sh major)

install -d "$libdir/pkgconfig" "$root/include" "$root/share/doc/corral/examples" \
  "$root/sbin" "$root/bin" "$root/share/man/man8" "$root/lib/systemd/system"
install -m 755 build/corral "$root/sbin/corral"
install -m 755 build/corral-wakebench "$root/bin/corral-wakebench"
# The man page names where the documentation went.
sed -e "s|/usr/local/share/doc|$prefix/share/doc|g" -e "1s|\"corral [0-9.]*\"|\"corral $version\"|" \
  docs/corral.8 >"$root/share/man/man8/corral.8"
chmod 644 "$root/share/man/man8/corral.8"
sed -e "s|/usr/local/sbin|$prefix/sbin|g" docs/corral.service >"$root/lib/systemd/system/corral.service"
install -m 644 docs/corral.socket "$root/lib/systemd/system/corral.socket"
install -m 644 build/libcorral.a "$libdir/libcorral.a"
# The file carries the full version; the soname (libcorral.so.MAJOR, what
# programs record and the loader looks for) and the link-time name
# (libcorral.so, what -lcorral finds) are links to it.
install -m 755 build/libcorral.so "$libdir/libcorral.so.$version"
ln -sf "libcorral.so.$version" "$libdir/libcorral.so.$major"
ln -sf "libcorral.so.$major" "$libdir/libcorral.so"
install -m 644 core/include/corral.h "$root/include/corral.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" core/corral.pc.in >"$libdir/pkgconfig/corral.pc"
# A sample configuration, never over one that exists: SYSCONFDIR (default
# /etc) is outside PREFIX, as nginx's and every distribution's is.
etc=${DESTDIR:-}${SYSCONFDIR:-/etc}/corral
install -d "$etc"
if [ -e "$etc/corral.conf" ]; then
  echo "kept the existing $etc/corral.conf"
else
  install -m 644 docs/examples/corral.conf "$etc/corral.conf"
fi
install -m 644 docs/*.md "$root/share/doc/corral/"
install -d "$root/share/doc/corral/deploy"
install -m 644 docs/deploy/* "$root/share/doc/corral/deploy/"
install -m 644 docs/examples/*.c docs/examples/corral.conf "$root/share/doc/corral/examples/"
echo "installed corral $version in $root"
