#!/usr/bin/env bash
# Checks what the docs say of libcorral's public API against
# core/include/corral.h: every corral_NAME(...) written in README.md or
# docs/*.md, with its arguments, is a function the header declares, with
# that many parameters (a bare corral_NAME() must be declared too); and
# the example programs in docs/examples/ compile against the header alone,
# warnings as errors, and link with build/libcorral.so.
# (tests/install/ builds echo.c against an installed tree as well.)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -e build/libcorral.so ] || { echo "test_docs_embedding: build/libcorral.so is missing (run ninja)" >&2; exit 1; }
python3 - <<'PY'
import glob, re, sys

header = open("core/include/corral.h").read()
header = re.sub(r'/\*.*?\*/', " ", header, flags=re.S)
declared = {}
for m in re.finditer(r'\bCORRAL_EXTERN\b[^;{]*?\b(corral_\w+)\s*\(', header):
    depth, i = 1, m.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(header[i], 0)
        i += 1
    params = " ".join(header[m.end():i - 1].split())
    count = 0 if params in ("", "void") else len(re.split(r',(?![^()]*\))', params))
    declared[m.group(1)] = (count, params)
if len(declared) < 50:
    sys.exit("read %d functions from corral.h: its form changed?" % len(declared))

problems = 0
for doc in ["README.md"] + sorted(glob.glob("docs/*.md")):
    text = open(doc).read()
    for m in re.finditer(r'\b(corral_[a-z0-9][a-z0-9_]*)\(([^()`]*)\)', text):
        name, args = m.group(1), " ".join(m.group(2).split())
        line = text.count("\n", 0, m.start()) + 1
        if name not in declared:
            print("%s:%d: %s() is not declared in corral.h" % (doc, line, name))
            problems += 1
        elif args not in ("", "void") and len(args.split(",")) != declared[name][0]:
            print("%s:%d: %s(%s), where corral.h declares %s(%s)" % (
                doc, line, name, args, name, declared[name][1]))
            problems += 1
print("%d functions declared; %d problems in the docs" % (len(declared), problems))
sys.exit(1 if problems else 0)
PY
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for example in docs/examples/*.c; do
  cc -std=c11 -Wall -Wextra -Werror -Icore/include -o "$tmp/example" "$example" \
    -L build -lcorral || { echo "$example does not build against corral.h" >&2; exit 1; }
done
echo "docs/examples/*.c build against corral.h"
