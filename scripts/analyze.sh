#!/usr/bin/env bash
# analyze.sh: runs the clang static analyzer over the sources in core/, proto/,
# conf/ and cmd/ (or over the .c files given) and exits non-zero on any report
# that tests/build/analyze.supp does not suppress, or on a suppression that
# matches nothing any more.  Two files at a time; each report is printed with
# the path that leads to it.
#
# Files known to be clean are skipped.  tests/build/analyze.clean lists, for
# each source the analyzer passed without a single report, two keys: SHA-256
# digests of what it analyzed, either of which, when it is what the file
# gives now, says that the analyzer's verdict would be the same (that
# verdict is a function of exactly what the key covers).  Both cover clang's
# version and the flags and checkers below; the first, the dependency key,
# covers the source and every project header it includes, each by path and
# content, as the release build's dependency record (`ninja -t deps`) lists
# them, and the content of every system header any source includes
# (tests/build/analyze.system lists them): computing it reads a few files,
# not the preprocessor's output, so the common run, in which nearly every
# file is known, costs a second or two instead of a preprocessing of every
# source.  The second, the preprocessed key, covers the source as
# preprocessed; it is the fallback for a file whose object the release build
# has not made (no dependency record), and costs a run of the preprocessor.
# A header that changes, project or system, changes the first key; a
# changed include changes the includer, so the record, however old, lists
# every header the file reads as long as the file's key matches.
# tests/build/analyze.known holds, the same way, what the analyzer said
# of each file it did report on (every report of which the suppressions
# must then account for): a "=== KEYS FILE" line, then its output, which
# is read back instead of analyzing the file again, and goes through the
# suppressions as if just made.
# `scripts/analyze.sh --record` analyzes what is not listed and rewrites
# the lists for the current tree (commit them with the change): it
# preprocesses every file, for its second key and for the list of what it
# includes, and gives a file its dependency key only if the release build's
# record of it lists every project header that clang includes (else it
# would say "unchanged" of a file whose header changed).
# CORRAL_ANALYZE_ALL=1 ignores the lists.
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
mkdir "$out/depkey" "$out/includes"
# What every key starts with: the compiler and everything it is told.
{
  clang --version
  printf '%s\n' "${flags[@]}" "${analyzer[@]}"
} >"$out/prefix"

# In --record, what each source includes as clang sees it, one path a line
# ($out/includes/NAME): the system headers among them, all sources' together,
# become the new tests/build/analyze.system, and the project headers check
# the release build's record of the file.
includes_of() { # file flags...
  local f=$1
  shift
  clang -M "$@" "$f" | sed '1s/^[^:]*://; s/\\$//' | tr -s ' ' '\n' | sed '/^$/d; s|^\./||' \
    >"$out/includes/${f//\//_}"
}
export -f includes_of
export out
system_list=tests/build/analyze.system
if ((record)); then
  printf '%s\n' "${sources[@]}" |
    xargs -P2 -I{} bash -c 'includes_of "$@"' sh {} "${flags[@]}" || {
    echo "analyze: clang could not list what the sources include" >&2
    exit 1
  }
  cat "$out"/includes/* | grep '^/' | sort -u >"$out/system"
else
  cp "$system_list" "$out/system" 2>/dev/null || : >"$out/system"
fi

# The dependency keys, $out/depkey/NAME, of the sources whose release object
# has a dependency record that starts with the source.  A listed system
# header that is gone leaves its line out of the digest, which then differs.
system_digest=$(xargs -r -d '\n' sha256sum -- <"$out/system" 2>/dev/null | sha256sum)
prefix_digest=$(sha256sum <"$out/prefix")
objects=()
for f in "${sources[@]}"; do
  objects+=("build/obj/${f%.c}.o")
done
# One ninja for all (it stops at a target it does not know: then one each).
if ! ninja -t deps "${objects[@]}" >"$out/ninja-deps" 2>/dev/null; then
  for o in "${objects[@]}"; do
    ninja -t deps "$o" 2>/dev/null
  done >"$out/ninja-deps"
fi
awk '/^[^ ]/ { src = ""; if ($2 == "#deps") { src = $1; sub(/^build\/obj\//, "", src); sub(/\.o:$/, ".c", src); first = 1 } next }
  /^    [^ ]/ && src != "" { if (first && $1 != src) src = ""; else print src, $1; first = 0 }' \
  "$out/ninja-deps" >"$out/deps"
cut -d' ' -f2 "$out/deps" | sort -u | xargs -r -d '\n' sha256sum -- >"$out/hashes" 2>/dev/null
awk -v dir="$out/depkey" -v head="prefix ${prefix_digest%% *}"$'\n'"system ${system_digest%% *}" '
  FNR == NR { hash[substr($0, 67)] = $1; next }
  { file = $1; gsub(/\//, "_", file); file = dir "/" file }
  !(file in seen) { seen[file] = 1; print head >file }
  { print ($2 in hash ? hash[$2] : "missing"), $2 >>file; close(file) }' \
  "$out/hashes" "$out/deps"
for k in "$out"/depkey/*; do
  [ -f "$k" ] || continue
  sum=$(sha256sum <"$k")
  echo "${sum%% *}" >"$k"
done

# Analyzes one file into $out/NAME.txt (one output file per source, named
# after it, so that the reports come out in a fixed order whatever the
# parallel runs' timing), unless one of its keys is in the clean list or
# the known one.  A file with no report at all adds its keys to $out/clean,
# one with reports to $out/known, as "DEPKEY PPKEY FILE" ("-" for a key
# it has none of).  The preprocessed key is only made when the dependency
# key is not listed, or in --record.
analyze_one() { # file flags... -- analyzer...
  local f=$1 name depkey=- ppkey=-
  shift
  name=${f//\//_}
  local cflags=()
  while [ "$1" != -- ]; do
    cflags+=("$1")
    shift
  done
  shift
  [ -f "$out/depkey/$name" ] && depkey=$(<"$out/depkey/$name")
  if ((record)) && [ "$depkey" != - ]; then
    # Kept only if the release build's record has every project header
    # clang includes: else a change to one would leave the key as it was.
    if grep -v '^/' "$out/includes/$name" | grep -qvxFf <(awk -v f="$f" '$1 == f { print $2 }' "$out/deps"); then
      depkey=-
    fi
  fi
  # Whether a key is in the clean list (a line "DEPKEY PPKEY FILE") or
  # the known one (a line "=== DEPKEY PPKEY FILE").
  listed() { # key list
    [ "$1" != - ] && awk -v k="$1" '{ i = $1 == "===" ? 2 : 1 } $i == k || $(i + 1) == k { found = 1; exit }
      END { exit !found }' "$2" 2>/dev/null
  }
  local key
  for key in depkey ppkey; do
    if [ $key = ppkey ]; then
      ppkey=$({ cat "$out/prefix" && clang -E "${cflags[@]}" "$f"; } | sha256sum) || ppkey=-
      ppkey=${ppkey%% *}
    elif ((record)); then
      continue
    fi
    if listed "${!key}" "$clean_list"; then
      : >"$out/$name.txt"
      echo "$f" >>"$out/skipped"
      break
    fi
    if listed "${!key}" "$known_list"; then
      awk -v k="${!key}" '$1 == "===" { on = $2 == k || $3 == k; next } on' \
        "$known_list" >"$out/$name.txt"
      echo "$f" >>"$out/skipped"
      break
    fi
    key=
  done
  if [ -n "$key" ]; then
    [ -s "$out/$name.txt" ] && echo "$depkey $ppkey $f" >>"$out/known"
    [ -s "$out/$name.txt" ] || echo "$depkey $ppkey $f" >>"$out/clean"
    return 0
  fi
  if ((record)) && [ "$ppkey" = - ]; then
    echo "$f" >>"$out/failed"
    return 0
  fi
  if ! clang --analyze "${cflags[@]}" "$@" -o /dev/null "$f" >"$out/$name.txt" 2>&1; then
    echo "$f" >>"$out/failed"
  elif [ ! -s "$out/$name.txt" ]; then
    echo "$depkey $ppkey $f" >>"$out/clean"
  else
    echo "$depkey $ppkey $f" >>"$out/known"
  fi
}
export -f analyze_one
export clean_list known_list record

# Outside --record, the files whose dependency key is listed are settled
# here, without a process each: the common run settles all but the few that
# changed.
mkdir "$out/blocks"
declare -A clean_key=()
rest=("${sources[@]}")
if ((!record)); then
  while read -r depkey _; do
    clean_key[$depkey]=1
  done <"$clean_list"
  # Each file's known output, under each of its keys.
  awk -v dir="$out/blocks" '$1 == "===" { a = dir "/" $2; b = dir "/" $3; printf "" >a; printf "" >b; next }
    { print >>a; print >>b }' "$known_list"
  rest=()
  for f in "${sources[@]}"; do
    name=${f//\//_} depkey=-
    [ -f "$out/depkey/$name" ] && read -r depkey <"$out/depkey/$name"
    if [ "$depkey" != - ] && [ -n "${clean_key[$depkey]:-}" ]; then
      : >"$out/$name.txt"
    elif [ "$depkey" != - ] && [ -f "$out/blocks/$depkey" ]; then
      cp "$out/blocks/$depkey" "$out/$name.txt"
    else
      rest+=("$f")
      continue
    fi
    echo "$f" >>"$out/skipped"
  done
fi
((${#rest[@]} == 0)) || printf '%s\n' "${rest[@]}" |
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
  done <"$out/${f//\//_}.txt"
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
    { [ -f "$out/clean" ] && sort -k3 "$out/clean"; } >tests/build/analyze.clean
    echo "analyze: $(wc -l <tests/build/analyze.clean) clean files recorded in tests/build/analyze.clean"
    { [ -f "$out/known" ] && sort -k3 "$out/known"; } | while read -r depkey ppkey f; do
      echo "=== $depkey $ppkey $f"
      cat "$out/${f//\//_}.txt"
    done >tests/build/analyze.known
    cp "$out/system" "$system_list"
    echo "analyze: $(grep -c '^- ' tests/build/analyze.clean) clean files without a dependency key;" \
      "$(wc -l <"$system_list") system headers recorded in $system_list"
    echo "analyze: $(grep -c '^=== ' tests/build/analyze.known) files with reports recorded in" \
      "tests/build/analyze.known"
  fi
fi
((unsuppressed == 0)) || status=1
exit $status
