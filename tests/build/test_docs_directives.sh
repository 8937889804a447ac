#!/usr/bin/env bash
# Compares the directive summary of docs/config.md ("Directive reference",
# "Summary": directive, context, default) with the directive tables the
# parser reads (conf/'s and each module's in proto/): every directive the
# code takes has a row, every row names a directive the code takes, and
# the contexts of a name's rows are those of its table entries.  nginx's
# spellings (conf/nginx_directives.c: its table and its aliases) are
# checked against the porting section instead, which must name each.
# The tables are read from the preprocessed sources, so that the macros
# their entries are written with (ONE_ARG(ANY_LEVEL), ...) are expanded.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import glob, re, subprocess, sys

CONTEXTS = {
    "CONF_MAIN": "top level", "CONF_SERVER": "server", "CONF_LOCATION": "location",
    "CONF_UPSTREAM": "upstream", "CONF_ADMIN": "admin", "CONF_EVENTS": "events",
    "CONF_SERVER_IF": "if in server", "CONF_LOCATION_IF": "if in location",
    "CONF_OTEL_EXPORTER": "otel_exporter", "CONF_STREAM": "stream",
    "CONF_STREAM_SERVER": "stream server",
}

def entries(path):
    """(table, name, contexts) of each entry of each directive table in `path`."""
    text = subprocess.run(
        ["cc", "-E", "-P", "-std=c11", "-D_GNU_SOURCE", "-DCORRAL_BUILDING", "-I.",
         "-Icore/include", "-Icore", "-I/usr/share/include/llhttp", path],
        stdout=subprocess.PIPE, check=True, text=True).stdout
    for table in re.finditer(r'struct conf_directive (\w+)\[\] *= *\{', text):
        i, depth, start = table.end(), 1, None
        while depth:
            if text[i] == "{":
                depth += 1
                start = i if depth == 2 else start
            elif text[i] == "}":
                depth -= 1
                if depth == 1:
                    entry = text[start:i + 1]
                    name = re.search(r'\.name\s*=\s*((?:"[^"]*"\s*)+)', entry)
                    if name:
                        name = "".join(re.findall(r'"([^"]*)"', name.group(1)))
                        where = re.search(r'\.contexts\s*=\s*([^,]+?)\s*,\s*\.', entry)
                        bits = set(re.findall(r'CONF_[A-Z_]+', where.group(1))) if where else set()
                        if "CONF_IF" in bits:
                            bits = (bits - {"CONF_IF"}) | {"CONF_SERVER_IF", "CONF_LOCATION_IF"}
                        unknown = bits - set(CONTEXTS)
                        if unknown:
                            sys.exit("%s: %s: unknown context %s" % (path, name, unknown))
                        yield table.group(1), name, {CONTEXTS[b] for b in bits}
            i += 1

sources = [f for f in sorted(glob.glob("conf/*.c") + glob.glob("proto/*/*.c"))
           if re.search(r'struct conf_directive \w+\[\] *=', open(f).read())]
code, nginx = {}, {}
for path in sources:
    for table, name, where in entries(path):
        (nginx if table == "conf__nginx_directives" else code).setdefault(name, set()).update(where)
if len(code) < 100:
    sys.exit("read %d directives from %d files: the tables' form changed?" % (len(code), len(sources)))
aliases = re.findall(r'\{"(\w+)", "(\w+)"\},', open("conf/nginx_directives.c").read())

doc = open("docs/config.md").read()
summary = doc.split("### Summary", 1)[1].split("\n### ", 1)[0]
documented = {}
problems = []
def context_of(text, name):
    """The contexts a summary row's second column says."""
    if text == "anywhere":
        return None
    if text == "as their `proxy_*` twins":
        twin = re.sub(r'^grpc_ssl_', "proxy_tls_", name).replace("grpc_", "proxy_", 1)
        return code.get(twin, set()) - {"stream", "stream server"}
    words = {w.strip() for w in text.split(",")}
    if "if" in words:
        words = (words - {"if"}) | {"if in server", "if in location"}
    return words
patterns = []
for row in re.findall(r'^\| (.*) \|$', summary, re.M):
    cells = [c.strip() for c in re.split(r'(?<!\\)\|', row)]
    if len(cells) != 4 or cells[0] == "directive" or cells[0].startswith("[nginx's"):
        continue
    names = re.findall(r'`([a-z0-9_*]+)`', cells[0].split("](")[0])
    for name in names:
        if "*" in name:
            patterns.append((re.compile(re.escape(name).replace(r"\*", r"\w*") + "$"), cells[1]))
            continue
        where = context_of(cells[1], name)
        if where is not None:
            documented.setdefault(name, set()).update(where)
        else:
            documented.setdefault(name, set())
for name in code:
    if name in documented:
        continue
    for pattern, where in patterns:
        if pattern.match(name):
            documented[name] = context_of(where, name)
            break

for name in sorted(set(code) - set(documented)):
    problems.append("%s (%s) has no row in the directive summary" % (name, ", ".join(sorted(code[name]))))
for name in sorted(set(documented) & set(nginx)):
    if name not in code and documented[name] != nginx[name]:
        problems.append("%s: the summary says %s, the code takes it in %s" % (
            name, ", ".join(sorted(documented[name])), ", ".join(sorted(nginx[name]))))
for name in sorted(set(documented) - set(code) - set(nginx)):
    if name == "include":
        continue  # the parser's own, in no table
    problems.append("the directive summary has %s, which no directive table has" % name)
for name in sorted(set(code) & set(documented)):
    if code[name] != documented[name]:
        problems.append("%s: the summary says %s, the code takes it in %s" % (
            name, ", ".join(sorted(documented[name])) or "nothing", ", ".join(sorted(code[name]))))
porting = doc.split("#### nginx's spellings and boilerplate", 1)[1].split("\n#### ", 1)[0]
said = set(re.findall(r'`([a-z0-9_*]+)', porting))
for name in sorted(set(nginx) | {a for a, _ in aliases}):
    if name in said or any(re.fullmatch(re.escape(s).replace(r"\*", r"\w*"), name)
                           for s in said if "*" in s):
        continue
    problems.append("nginx's %s is taken but the porting section does not name it" % name)
for p in problems:
    print(p)
print("%d directives in the code, %d in the summary: %d problems" % (
    len(code), len(documented), len(problems)))
sys.exit(1 if problems else 0)
PY
