#!/usr/bin/env bash
# The release binaries keep the hardening build.ninja asks for: PIE, full
# RELRO, stack canaries, FORTIFY, stack clash probes and CET markings.  A
# flag dropped from the build, or a new program linked without them, fails
# here instead of going unnoticed.
set -euo pipefail
cd "$(dirname "$0")/../.."
programs=(build/corral build/corral-wakebench build/examples/echo build/examples/udp_echo)
library=build/libcorral.so
ninja "${programs[@]}" "$library" >/dev/null

failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }

# The toolchain's own startup files decide whether a linked program can
# carry the CET note: the linker keeps IBT and SHSTK only if every input has
# them, and Debian 12's glibc objects do not.  Where they do, the binaries
# must too; everywhere, each compile unit of ours must record the flag.
crt=$(cc -print-file-name=Scrt1.o)
crt_cet=0
readelf -nW "$crt" 2>/dev/null | grep -q 'x86 feature:.*IBT.*SHSTK' && crt_cet=1

for f in "${programs[@]}" "$library"; do
  [ -f "$f" ] || { fail "$f was not built"; continue; }
  header=$(readelf -hW "$f")
  segments=$(readelf -lW "$f")
  dynamic=$(readelf -dW "$f")
  imports=$(readelf --dyn-syms -W "$f" | awk '$7 == "UND" { print $8 }')

  grep -q 'Type:[[:space:]]*DYN' <<<"$header" || fail "$f: not position-independent (ELF type is not DYN)"
  if [ "$f" != "$library" ]; then
    grep -q 'INTERP' <<<"$segments" || fail "$f: no PT_INTERP, so not a PIE"
    grep -q 'FLAGS_1).*PIE' <<<"$dynamic" || fail "$f: DF_1_PIE not set (linked without -pie)"
  fi
  grep -q 'GNU_RELRO' <<<"$segments" || fail "$f: no GNU_RELRO segment (-z relro)"
  grep -q 'BIND_NOW\|FLAGS_1).*NOW' <<<"$dynamic" || fail "$f: not BIND_NOW, so RELRO is partial (-z now)"
  grep -q '^__stack_chk_fail' <<<"$imports" || fail "$f: does not import __stack_chk_fail (-fstack-protector-strong)"
  grep -q '^__[a-z0-9_]*_chk@' <<<"$imports" ||
    fail "$f: imports no fortified *_chk function (-D_FORTIFY_SOURCE)"
  if ((crt_cet)); then
    readelf -nW "$f" | grep -q 'x86 feature:.*IBT.*SHSTK' || fail "$f: no IBT and SHSTK in .note.gnu.property"
  fi

  # Each compile unit of ours records its code-generation flags
  # (-grecord-gcc-switches, on by default): that is the one place where
  # stack clash protection, which leaves no symbol, can be seen.
  producers=$(readelf --debug-dump=info "$f" 2>/dev/null | sed -n 's/.*DW_AT_producer.*: \(GNU C.*\)/\1/p')
  [ -n "$producers" ] || { fail "$f: no compile units with recorded flags (built without -g?)"; continue; }
  for flag in -fstack-protector-strong -fstack-clash-protection -fcf-protection=full; do
    missing=$(grep -c -v -e " $flag\( \|$\)" <<<"$producers" || true)
    ((missing == 0)) || fail "$f: $missing compile units built without $flag"
  done
done

((failed == 0)) || exit 1
cet="CET flag on every compile unit"
((crt_cet)) && cet="CET note"
echo "PASS: ${#programs[@]} programs and $library are PIE with full RELRO, canaries, FORTIFY, stack clash probes, $cet"
