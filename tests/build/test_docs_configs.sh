#!/usr/bin/env bash
# Checks every configuration example of README.md and docs/*.md with
# `build/corral -t`, so that what a reader copies works.  The examples are
# the fenced blocks whose info string starts with `nginx`:
#
#   ```nginx                a whole configuration: -t must accept it;
#   ```nginx server         a part of one, as it goes inside a server
#                           block: the test wraps it in a server that
#                           listens on loopback;
#   ```nginx main           a top level that names upstreams it does not
#                           define (they are elsewhere on the page).
#
# For both, the test adds an upstream for each name a proxy_pass or
# grpc_pass uses without defining it.
#
# Renderers show the first word only.  A block whose first line is a
# comment naming a file (`# conf.d/workers.conf`) is also written under
# that name, for the include examples; a ```console block of the same page
# that runs `corral -t -c FILE` on such a file is run, and its output must
# be the one the page shows (the error message examples).  The files the
# directives name (certificates, keys, password and key files, state
# directories) are made, throwaway, in a scratch directory; an absolute
# path is moved under it.  -t binds nothing, so the ports the examples
# write are never opened.  The files docs/ ships (docs/examples/*.conf,
# docs/deploy/corral.conf, the Kubernetes manifest's corral.conf) are
# checked too, and the built-in configuration config.md shows must be
# conf/default.c's.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/corral ] || { echo "test_docs_configs: build/corral is missing (run ninja)" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# One ECDSA and one RSA certificate with their keys, for the certificate
# directives (an RSA one where the example's file name says rsa).
for kind in ec rsa; do
  if [ $kind = ec ]; then key_opts=(-newkey ec -pkeyopt ec_paramgen_curve:P-256)
  else key_opts=(-newkey rsa:2048); fi
  openssl req -x509 "${key_opts[@]}" -nodes -days 2 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,DNS:example.com,IP:127.0.0.1 \
    -keyout "$scratch/$kind.key" -out "$scratch/$kind.pem" 2>/dev/null
done
openssl passwd -apr1 secret | sed 's/^/alice:/' >"$scratch/htpasswd"
python3 - "$scratch" <<'PY'
import ast, concurrent.futures, glob, os, re, shutil, subprocess, sys

scratch = sys.argv[1]
corral = os.path.abspath("build/corral")

# Directives whose first argument names a file, and what the file is.
FILE_ARGS = {
    "certificate": ["tls_certificate", "ssl_certificate", "proxy_tls_certificate",
                    "proxy_ssl_certificate", "grpc_ssl_certificate"],
    "key": ["tls_certificate_key", "ssl_certificate_key", "proxy_tls_certificate_key",
            "proxy_ssl_certificate_key", "grpc_ssl_certificate_key"],
    "ca": ["tls_client_certificate", "ssl_client_certificate", "tls_trusted_certificate",
           "ssl_trusted_certificate", "proxy_tls_trusted_certificate",
           "proxy_ssl_trusted_certificate", "grpc_ssl_trusted_certificate", "ca_certificate"],
    "htpasswd": ["auth_basic_user_file"],
    "jwks": ["auth_jwt_key_file"],
    "secret": ["auth_token_file", "quic_host_key"],
    "dir": ["root", "alias", "client_body_temp_path", "proxy_cache_path", "state_path"],
}
KIND_OF = {d: kind for kind, names in FILE_ARGS.items() for d in names}
# name=VALUE parameters that name a file.
PARAM_KIND = {"state_path": "dir"}

def make(path, kind):
    """Creates the throwaway file or directory `path` of `kind`."""
    if os.path.lexists(path):
        return
    if kind == "dir":
        os.makedirs(path, exist_ok=True)
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pair = "rsa" if "rsa" in os.path.basename(path) else "ec"
    if kind in ("certificate", "ca"):
        shutil.copy(os.path.join(scratch, pair + ".pem"), path)
    elif kind == "key":
        shutil.copy(os.path.join(scratch, pair + ".key"), path)
    elif kind == "htpasswd":
        shutil.copy(os.path.join(scratch, "htpasswd"), path)
    elif kind == "jwks":
        shutil.copy("tests/proto/jwt/jwks.json", path)
    elif kind == "secret":
        with open(path, "w") as f:
            f.write("0123456789abcdef0123456789abcdef0123456789abcdef\n")
    elif kind == "eab":
        with open(path, "w") as f:
            f.write("c2VjcmV0LW1hYy1rZXktb2YtdGhlLWNhLWZvci10ZXN0cw\n")

def localise(text, dir):
    """The config `text` with each file it names made under `dir`, and each
    absolute path among them moved under `dir`/abs.  Lines keep their
    numbers."""
    def place(path, kind):
        if "$" in path or path.startswith("data:"):
            return path
        if path.startswith("/"):
            local = os.path.join(dir, "abs", path.lstrip("/"))
        else:
            local = os.path.join(dir, path)
        make(local, kind)
        return local if path.startswith("/") else path
    out = []
    for line in text.split("\n"):
        m = re.match(r'(\s*)([a-z_]+)(\s+)("[^"]*"|\'[^\']*\'|[^\s;]+)', line)
        if m and m.group(2) in KIND_OF:
            quote = m.group(4)[0] if m.group(4)[0] in "\"'" else ""
            path = m.group(4).strip("\"'")
            new = place(path, KIND_OF[m.group(2)])
            line = line[:m.start(4)] + quote + new + quote + line[m.end(4):]
        m = re.match(r'(\s*external_account_key\s+\S+\s+)([^\s;]+)', line)
        if m:
            line = m.group(1) + place(m.group(2), "eab") + line[m.end(2):]
        # A backend's host name (a placeholder such as app.internal:8080)
        # would be looked up by -t: loopback's name stands in for it.
        if re.match(r'\s*(proxy_pass|grpc_pass|server)\s+[^{]*;', line) and " resolve" not in line:
            line = re.sub(r'(?<=[\s/])(?!\d+\.\d+\.)[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(?=:\d)',
                          "localhost", line)
        for param, kind in PARAM_KIND.items():
            line = re.sub(r'\b%s=([^\s;]+)' % param,
                          lambda m: "%s=%s" % (param, place(m.group(1), kind)), line)
        out.append(line)
    return "\n".join(out)

UPSTREAM_USE = re.compile(r'\b(?:proxy_pass|grpc_pass)\s+(?:(?:https?|grpcs?)://)?'
                          r'([A-Za-z_][\w-]*)(?=[/;\s])')

def wrap(body, context):
    """A whole configuration holding `body`, written for `context`.  The
    upstreams added go first, on one line, so that the example's own lines
    keep their numbers in a server block's (one line more)."""
    defined = set(re.findall(r'^\s*upstream\s+([\w-]+)', body, re.M))
    used = [n for n in dict.fromkeys(UPSTREAM_USE.findall(body)) if n not in defined]
    ups = " ".join("upstream %s { server 127.0.0.1:1; }" % n for n in used)
    if context == "main":
        return ups + "\n" + body
    if context == "server":
        return ups + " server { listen 127.0.0.1:0;\n" + body + "\n}"
    raise ValueError("unknown context %r (server or main)" % context)

def blocks(path):
    """Each fenced block of a markdown file: (line, info words, lines)."""
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r'^(\s*)(```+)(.*)$', lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        j = i + 1
        while j < len(lines) and not re.match(r'^\s*' + fence + r'\s*$', lines[j]):
            j += 1
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j]]
        yield i + 1, info.split(), body
        i = j + 1

def run(conf, cwd):
    r = subprocess.run([corral, "-t", "-c", conf], cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20, text=True)
    return r.returncode, r.stdout

# The checks of whole examples, run a few at a time once all are written
# (each -t is a process start, most of its time): (where, what, file, its
# directory, how its lines map to the page's).
checks = []
failures = checked = 0
def fail(where, message, output=""):
    global failures
    failures += 1
    print("%s: %s" % (where, message))
    for l in output.rstrip("\n").split("\n")[:5]:
        print("    " + l)

for doc in ["README.md"] + sorted(glob.glob("docs/*.md")):
    page = os.path.join(scratch, "pages", os.path.basename(doc))
    os.makedirs(page)
    examples, named, consoles = [], {}, []
    for line, info, body in blocks(doc):
        if info[:1] == ["nginx"]:
            context = info[1] if len(info) > 1 else None
            m = re.match(r'#\s*(\S+\.conf)\s*$', body[0]) if body else None
            examples.append((line, context, "\n".join(body) + "\n", m and m.group(1)))
        elif info[:1] == ["console"]:
            consoles.append((line, body))
    # The named files first, each where the include examples look for it.
    for line, context, text, name in examples:
        if name:
            named[name] = line
            os.makedirs(os.path.dirname(os.path.join(page, name)) or page, exist_ok=True)
            with open(os.path.join(page, name), "w") as f:
                f.write(localise(text, page))
    # The console blocks that check a named file: their output as shown.
    shown = set()
    for line, body in consoles:
        for k, l in enumerate(body):
            m = re.match(r'\$ (?:build/)?corral -t -c (\S+)$', l)
            if not m or m.group(1) not in named:
                continue
            expected = []
            for e in body[k + 1:]:
                if e.startswith("$ "):
                    break
                expected.append(e)
            shown.add(m.group(1))
            checked += 1
            status, output = run(m.group(1), page)
            want = "\n".join(expected).rstrip("\n")
            if output.rstrip("\n") != want:
                fail("%s:%d" % (doc, line + 1 + k),
                     "corral -t -c %s printed, where the page shows %r:" % (m.group(1), want),
                     output)
    # Every other example alone.
    for n, (line, context, text, name) in enumerate(examples):
        if name in shown:
            continue
        where = "%s:%d" % (doc, line)
        conf = os.path.join(page, "example-%d.conf" % n)
        try:
            text = wrap(text, context) if context else text
        except ValueError as e:
            checked += 1
            fail(where, str(e))
            continue
        with open(conf, "w") as f:
            f.write(localise(text, page))
        # Positions as the page's lines: the example's first line is the
        # line after the fence, and a wrapped one's is the file's second.
        checks.append((where, "corral -t refuses this example%s:" %
                       (" (%s)" % context if context else ""), conf, page,
                       (doc, line - 1 if context else line)))

# The configuration files docs/ ships whole, and the one in the Kubernetes
# manifest's ConfigMap.
files = sorted(glob.glob("docs/examples/*.conf") + glob.glob("docs/deploy/corral*.conf"))
for yaml in sorted(glob.glob("docs/deploy/*.yaml")):
    lines = open(yaml).read().split("\n")
    for i, l in enumerate(lines):
        if re.match(r'\s*corral\.conf:\s*\|\s*$', l):
            indent = len(lines[i + 1]) - len(lines[i + 1].lstrip())
            body = []
            for b in lines[i + 1:]:
                if b.strip() and len(b) - len(b.lstrip()) < indent:
                    break
                body.append(b[indent:])
            files.append((yaml, i + 2, "\n".join(body)))
page = os.path.join(scratch, "files")
os.makedirs(page)
for n, f in enumerate(files):
    where, text = (f, open(f).read()) if isinstance(f, str) else ("%s:%d" % f[:2], f[2])
    conf = os.path.join(page, "file-%d.conf" % n)
    with open(conf, "w") as out:
        out.write(localise(text, page))
    checks.append((where, "corral -t refuses this file:", conf, page, None))

with concurrent.futures.ThreadPoolExecutor(4) as pool:
    results = list(pool.map(lambda c: run(os.path.basename(c[2]), c[3]), checks))
for (where, message, conf, page, lines), (status, output) in zip(checks, results):
    checked += 1
    if status == 0:
        continue
    if lines is not None:
        output = re.sub(re.escape(os.path.basename(conf)) + r':(\d+):',
                        lambda m: "%s:%d:" % (lines[0], int(m.group(1)) + lines[1]), output)
    fail(where, message, output)

# The built-in configuration config.md shows is the one corral runs.
checked += 1
source = open("conf/default.c").read().split("conf_default_text[] =", 1)[1]
builtin = "".join(ast.literal_eval(s) for s in re.findall(r'^\s*("(?:[^"\\]|\\.)*")', source, re.M))
section = open("docs/config.md").read().split("\n## The built-in configuration\n", 1)[1]
shown = re.search(r'```nginx\n(.*?)```', section, re.S).group(1)
if shown != builtin:
    fail("docs/config.md", "the built-in configuration shown is not conf/default.c's")

print("%d of %d configuration examples failed" % (failures, checked))
sys.exit(1 if failures else 0)
PY
