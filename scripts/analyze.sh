#!/usr/bin/env bash
# analyze.sh: runs the clang static analyzer over the sources in core/, proto/,
# conf/ and cmd/ (or over the .c files given) and exits non-zero on any report
# that tests/build/analyze.supp does not suppress, or on a suppression that
# matches nothing any more.  Two files at a time; each report is printed with
# the path that leads to it.
#
# Files known to be clean are skipped.  tests/build/analyze.clean lists, for
# each source the analyzer passed without a single report, the SHA-256 of
# what it analyzed: clang's version, the flags and checkers below, and the
# source as preprocessed (so that a change to any header it includes changes
# it).  The analyzer's verdict is a function of exactly that, so a file
# whose key is listed would pass again; every other file is analyzed.
# tests/build/analyze.known holds, the same way, what the analyzer said
# of each file it did report on (every report of which the suppressions
# must then account for): a "=== KEY FILE" line, then its output, which
# is read back instead of analyzing the file again, and goes through the
# suppressions as if just made.
# `scripts/analyze.sh --record` analyzes what is not listed and rewrites
# both lists for the current tree (commit them with the change);
# CORRAL_ANALYZE_ALL=1 ignores them.
set -uo pipefail
cd "$(dirname "$0")/.."

supp=tests/build/analyze.supp
# build.ninja's common_cflags, less the warnings (the build checks those) and
# with assert() on: the analyzer takes an assert as a fact about the state.
flags=(-w -std=c11 -D_GNU_SOURCE -DLLHTTP_STRICT_MODE=1 -pthread -I. -Icore/include -Icore
       -I/usr/share/include/llhttp -Ibuild/gen -DCORRAL_BUILDING)
# Checkers: the stable families, less the Annex K "use memcpy_s" advice of
# DeprecatedOrUnsafeBufferHandling, which flags every memcpy and snprintf;
# and the alpha checkers that are quiet on correct code here, for bounds,
# C string calls, locks and streams.  MallocOverflow is left out: it flags
# every n * size whose n it cannot bound, checked or not.  ModelPOSIX tells
# the analyzer what read(), accept() and the like return.
checkers=core,unix,deadcode,security,nullability,optin.portability,valist
checkers+=,alpha.security.ArrayBoundV2,alpha.security.ReturnPtrRange
checkers+=,alpha.unix.cstring.OutOfBounds,alpha.unix.cstring.BufferOverlap
checkers+=,alpha.unix.cstring.NotNullTerminated,alpha.unix.PthreadLock,alpha.unix.Stream
checkers+=,alpha.core.CastSize,alpha.core.SizeofPtr,alpha.core.BoolAssignment
checkers+=,alpha.core.TestAfterDivZero,alpha.unix.StdCLibraryFunctionArgs
analyzer=(-Xclang -analyzer-output=text
          -Xclang -analyzer-checker="$checkers"
          -Xclang -analyzer-disable-checker=security.insecureAPI.DeprecatedOrUnsafeBufferHandling
          -Xclang -analyzer-config -Xclang display-checker-name=true
          -Xclang -analyzer-config -Xclang apiModeling.StdCLibraryFunctions:ModelPOSIX=true)

record=0
if [ "${1:-}" = --record ]; then
  record=1
  shift
fi
clean_list=tests/build/analyze.clean
known_list=tests/build/analyze.known
if [ "${CORRAL_ANALYZE_ALL:-0}" = 1 ]; then
  clean_list=/dev/null
  known_list=/dev/null
fi

if (($# > 0)); then
  sources=("$@")
else
  mapfile -t sources < <(ls core/*.c proto/*.c proto/*/*.c conf/*.c cmd/*.c)
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# What every key starts with: the compiler and everything it is told.
{
  clang --version
  printf '%s\n' "${flags[@]}" "${analyzer[@]}"
} >"$out/prefix"

# Analyzes one file into $out/NAME.txt (one output file per source, named
# after it, so that the reports come out in a fixed order whatever the
# parallel runs' timing), unless its key is in the clean list or the known
# one.  A file with no report at all adds its key to $out/clean, one with
# reports to $out/known.
analyze_one() { # file flags... -- analyzer...
  local f=$1 name key
  shift
  name=$(echo "$f" | tr / _)
  local cflags=()
  while [ "$1" != -- ]; do
    cflags+=("$1")
    shift
  done
  shift
  key=$({ cat "$out/prefix" && clang -E "${cflags[@]}" "$f"; } | sha256sum) || key=
  key=${key%% *}
  if [ -n "$key" ] && grep -q "^$key " "$clean_list" 2>/dev/null; then
    : >"$out/$name.txt"
    echo "$key $f" >>"$out/clean"
    echo "$f" >>"$out/skipped"
    return 0
  fi
  if [ -n "$key" ] && grep -q "^=== $key " "$known_list" 2>/dev/null; then
    awk -v head="=== $key " 'index($0, head) == 1 { on = 1; next } /^=== / { on = 0 } on' \
      "$known_list" >"$out/$name.txt"
    echo "$key $f" >>"$out/known"
    echo "$f" >>"$out/skipped"
    return 0
  fi
  if ! clang --analyze "${cflags[@]}" "$@" -o /dev/null "$f" >"$out/$name.txt" 2>&1; then
    echo "$f" >>"$out/failed"
  elif [ -n "$key" ] && [ ! -s "$out/$name.txt" ]; then
    echo "$key $f" >>"$out/clean"
  elif [ -n "$key" ]; then
    echo "$key $f" >>"$out/known"
  fi
}
export -f analyze_one
export out clean_list known_list
printf '%s\n' "${sources[@]}" |
  xargs -P2 -I{} bash -c 'analyze_one "$@"' sh {} "${flags[@]}" -- "${analyzer[@]}"
status=0
if [ -f "$out/failed" ]; then
  echo "analyze: clang could not analyze: $(tr '\n' ' ' <"$out/failed")" >&2
  cat "$out"/*.txt >&2
  exit 1
fi

# The suppressions: "FILE CHECKER `TEXT` REASON", one a line.  A report is
# suppressed when it is in FILE, from CHECKER, and its line contains TEXT:
# code moving does not unsuppress it, but the line changing does, so it is
# looked at again.
supp_file=() supp_checker=() supp_text=() supp_used=()
lineno=0
while IFS= read -r line; do
  lineno=$((lineno + 1))
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  if [[ $line =~ ^([^[:space:]]+)[[:space:]]+([^[:space:]]+)[[:space:]]+\`([^\`]+)\`[[:space:]]+([^[:space:]].*)$ ]]; then
    supp_file+=("${BASH_REMATCH[1]}") supp_checker+=("${BASH_REMATCH[2]}")
    supp_text+=("${BASH_REMATCH[3]}") supp_used+=(0)
  else
    echo "$supp:$lineno: expected FILE CHECKER \`TEXT\` REASON" >&2
    status=1
  fi
done <"$supp"

reports=0 suppressed=0
report= keep=0
flush() {
  if [ -n "$report" ] && ((keep)); then printf '%s\n' "$report"; fi
  report=
}
for f in "${sources[@]}"; do
  while IFS= read -r line; do
    if [[ $line =~ ^([^:]+):([0-9]+):[0-9]+:\ warning:\ .*\[([^]]+)\]$ ]]; then
      flush
      file=${BASH_REMATCH[1]} at=${BASH_REMATCH[2]} checker=${BASH_REMATCH[3]}
      text=$(sed -n "${at}p" "$file")
      keep=1
      for i in "${!supp_file[@]}"; do
        if [ "${supp_file[i]}" = "$file" ] && [ "${supp_checker[i]}" = "$checker" ] &&
          [[ $text == *"${supp_text[i]}"* ]]; then
          keep=0 supp_used[i]=1
          break
        fi
      done
      reports=$((reports + 1))
      ((keep)) || suppressed=$((suppressed + 1))
      report=$line
    elif [[ $line =~ ^[0-9]+\ warnings?\ generated\.$ ]]; then
      flush
    elif [ -n "$report" ]; then
      report+=$'\n'$line
    fi
  done <"$out/$(echo "$f" | tr / _).txt"
  flush
done

# A suppression that matched nothing is stale when every file was analyzed.
if (($# == 0)); then
  for i in "${!supp_file[@]}"; do
    if ((supp_used[i] == 0)); then
      echo "$supp: matches no report any more, remove it: ${supp_file[i]} ${supp_checker[i]} \`${supp_text[i]}\`" >&2
      status=1
    fi
  done
fi
unsuppressed=$((reports - suppressed))
skipped=0
[ -f "$out/skipped" ] && skipped=$(wc -l <"$out/skipped")
echo "analyze: ${#sources[@]} files ($skipped known, not analyzed again), $reports reports," \
  "$suppressed suppressed, $unsuppressed left"
# The list holds the current tree's clean files only, in a fixed order.
if ((record)); then
  if (($# > 0)); then
    echo "analyze: --record needs the whole tree, not a list of files" >&2
    status=1
  else
    { [ -f "$out/clean" ] && sort -k2 "$out/clean"; } >tests/build/analyze.clean
    echo "analyze: $(wc -l <tests/build/analyze.clean) clean files recorded in tests/build/analyze.clean"
    { [ -f "$out/known" ] && sort -k2 "$out/known"; } | while read -r key f; do
      echo "=== $key $f"
      cat "$out/$(echo "$f" | tr / _).txt"
    done >tests/build/analyze.known
    echo "analyze: $(grep -c '^=== ' tests/build/analyze.known) files with reports recorded in" \
      "tests/build/analyze.known"
  fi
fi
((unsuppressed == 0)) || status=1
exit $status
