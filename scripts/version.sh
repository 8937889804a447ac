#!/bin/sh
# version.sh: prints corral's version as core/include/corral.h defines it,
# the one place it is written: MAJOR.MINOR.PATCH, or with "major" the major
# number alone (the shared library's soname, libcorral.so.MAJOR).  Used by
# the build and by scripts/install.sh.
set -eu
cd "$(dirname "$0")/.."
get() { sed -n "s/^#define CORRAL_VERSION_$1 \([0-9][0-9]*\)\$/\1/p" core/include/corral.h; }
major=$(get MAJOR)
minor=$(get MINOR)
patch=$(get PATCH)
if [ -z "$major" ] || [ -z "$minor" ] || [ -z "$patch" ]; then
  echo "version.sh: no CORRAL_VERSION_MAJOR/MINOR/PATCH in core/include/corral.h" >&2
  exit 1
fi
case "${1:-}" in
  "") echo "$major.$minor.$patch" ;;
  major) echo "$major" ;;
  *) echo "usage: scripts/version.sh [major]" >&2; exit 2 ;;
esac
