#!/usr/bin/env bash
# analyze.sh: runs the clang static analyzer over the sources in core/, proto/,
# conf/ and cmd/ (or over the .c files given) and exits non-zero on any report
# that tests/build/analyze.supp does not suppress, or on a suppression that
# matches nothing any more.  Two files at a time; each report is printed with
# the path that leads to it.
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

if (($# > 0)); then
  sources=("$@")
else
  mapfile -t sources < <(ls core/*.c proto/*.c proto/*/*.c conf/*.c cmd/*.c)
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One output file per source, named after it, so that the reports come out
# in a fixed order whatever the parallel runs' timing.
export out
printf '%s\n' "${sources[@]}" |
  xargs -P2 -I{} sh -c 'f={}; clang --analyze "$@" -o /dev/null "$f" >"$out/$(echo "$f" | tr / _).txt" 2>&1 || echo "$f" >>"$out/failed"' \
    sh "${flags[@]}" "${analyzer[@]}"
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
echo "analyze: ${#sources[@]} files, $reports reports, $suppressed suppressed, $unsuppressed left"
((unsuppressed == 0)) || status=1
exit $status
