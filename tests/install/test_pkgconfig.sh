#!/usr/bin/env bash
# An out-of-tree program builds against an installed corral with nothing but
# pkg-config, and runs.  Also checks that DESTDIR stages the same tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

SYSCONFDIR=$tmp/etc PREFIX=$tmp/prefix ninja install >/dev/null
cp docs/examples/echo.c "$tmp/app.c"
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig
cc -o "$tmp/app" "$tmp/app.c" $(pkg-config --cflags --libs corral) || fail "build with pkg-config"

# The shared library: the file named for the full version, the soname
# (libcorral.so.MAJOR) and the link-time name as links to it, and a program
# linked with -lcorral records the soname.
version=$(scripts/version.sh)
major=$(scripts/version.sh major)
lib=$tmp/prefix/lib
[ -f "$lib/libcorral.so.$version" ] && [ ! -L "$lib/libcorral.so.$version" ] ||
  fail "no libcorral.so.$version file"
[ "$(readlink "$lib/libcorral.so.$major")" = "libcorral.so.$version" ] ||
  fail "libcorral.so.$major does not link to libcorral.so.$version"
[ "$(readlink "$lib/libcorral.so")" = "libcorral.so.$major" ] ||
  fail "libcorral.so does not link to libcorral.so.$major"
readelf -dW "$lib/libcorral.so.$version" | grep -q "(SONAME).*\[libcorral.so.$major\]" ||
  fail "soname is not libcorral.so.$major"
readelf -dW "$tmp/app" | grep -q "(NEEDED).*\[libcorral.so.$major\]" ||
  fail "the program does not record libcorral.so.$major"
[ "$(pkg-config --modversion corral)" = "$version" ] || fail "pkg-config version"

# The installed library reports the installed header's version.
cat >"$tmp/version.c" <<'C'
#include <corral.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    printf("%s %x\n", corral_version_string(), corral_version());
    return corral_version() == CORRAL_VERSION_HEX && strcmp(corral_version_string(), CORRAL_VERSION) == 0 ? 0 : 1;
}
C
cc -o "$tmp/version" "$tmp/version.c" $(pkg-config --cflags --libs corral) || fail "build version.c"
LD_LIBRARY_PATH=$lib "$tmp/version" >"$tmp/version.out" || fail "versions differ: $(cat "$tmp/version.out")"
grep -q "^$version " "$tmp/version.out" || fail "corral_version_string(): $(cat "$tmp/version.out")"

LD_LIBRARY_PATH=$tmp/prefix/lib "$tmp/app" 127.0.0.1:0 1 >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/out" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/out")
[ -n "$port" ] || fail "app did not start: $(cat "$tmp/out")"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'through pkg-config' >&3
reply=$(timeout 5 head -c 18 <&3) || true
exec 3>&-
[ "$reply" = "through pkg-config" ] || fail "echo reply was '$reply'"
kill -TERM "$pid"
wait "$pid" || fail "app exited with $?"
pid=

# The archive, linked as docs/embedding.md says: no libcorral.so needed.
cc -o "$tmp/app-static" "$tmp/app.c" $(pkg-config --cflags corral) \
  "$(pkg-config --variable=libdir corral)/libcorral.a" \
  $(pkg-config --static --libs corral | sed 's/-lcorral//') || fail "build with the archive"
if ldd "$tmp/app-static" | grep -q libcorral; then fail "the archive build links libcorral.so"; fi

# The sample configuration is valid, and a second install keeps an edited one.
"$tmp/prefix/sbin/corral" -t -c "$tmp/etc/corral/corral.conf" >/dev/null || fail "sample config"
echo "# edited" >>"$tmp/etc/corral/corral.conf"
SYSCONFDIR=$tmp/etc PREFIX=$tmp/prefix ninja install >/dev/null
grep -q '^# edited$' "$tmp/etc/corral/corral.conf" || fail "install overwrote corral.conf"

DESTDIR=$tmp/stage PREFIX=/usr ninja install >/dev/null
for f in usr/lib/libcorral.a usr/lib/libcorral.so "usr/lib/libcorral.so.$major" \
         "usr/lib/libcorral.so.$version" usr/include/corral.h usr/lib/pkgconfig/corral.pc \
         usr/sbin/corral usr/share/man/man8/corral.8 usr/lib/systemd/system/corral.service \
         usr/share/doc/corral/config.md etc/corral/corral.conf; do
  [ -e "$tmp/stage/$f" ] || fail "DESTDIR install lacks $f"
done
grep -q '^prefix=/usr$' "$tmp/stage/usr/lib/pkgconfig/corral.pc" || fail "corral.pc prefix"
grep -q '/usr/share/doc/corral/' "$tmp/stage/usr/share/man/man8/corral.8" || fail "man page doc path"
head -1 "$tmp/stage/usr/share/man/man8/corral.8" | grep -q "\"corral $version\"" || fail "man page version"
grep -q 'ExecStart=/usr/sbin/corral' "$tmp/stage/usr/lib/systemd/system/corral.service" || fail "unit path"
"$tmp/stage/usr/sbin/corral" -V | grep -q '^corral ' || fail "installed daemon does not run"
echo "PASS: pkg-config build and DESTDIR install (library, daemon, man page, unit, docs)"
