#!/usr/bin/env bash
# install.sh: "ninja install".  Copies the release build into
# $DESTDIR$PREFIX (PREFIX defaults to /usr/local).
set -euo pipefail
prefix=${PREFIX:-/usr/local}
root=${DESTDIR:-}$prefix
libdir=$root/lib
version=$(sed -n 's/^#define CORRAL_VERSION "\(.*\)"/\1/p' core/include/corral.h)

install -d "$libdir/pkgconfig" "$root/include" "$root/share/doc/corral/examples"
install -m 644 build/libcorral.a "$libdir/libcorral.a"
install -m 755 build/libcorral.so "$libdir/libcorral.so.$version"
ln -sf "libcorral.so.$version" "$libdir/libcorral.so.0"
ln -sf "libcorral.so.0" "$libdir/libcorral.so"
install -m 644 core/include/corral.h "$root/include/corral.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" core/corral.pc.in >"$libdir/pkgconfig/corral.pc"
install -m 644 docs/*.md "$root/share/doc/corral/"
install -m 644 docs/examples/*.c "$root/share/doc/corral/examples/"
echo "installed corral $version in $root"
