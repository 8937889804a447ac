#!/usr/bin/env bash
# Checks the defaults docs/config.md gives its directives, mechanically:
#  a. the directive summary's default of each directive ("Directive
#     reference", "Summary") is the one its section says (its
#     **Default:**, a "(default X)" after its syntax, a table's default
#     column), backticks and spacing aside;
#  b. the code does what the summary says: each value default is in the
#     list of tests/conf/test_conf.c's documented_defaults case, which
#     parses a config without the directive and one that writes it with
#     that value and compares what each leaves, or, where the parse
#     leaves the field unset and the code applies the default later, is
#     the literal the code applies (SOURCE below); a documented default
#     that is neither, and not "none" (nothing set), is named on
#     NOT_A_VALUE below with the reason it is no value, or the check
#     fails.
# The summary's defaults are the reference: the sections and the C list
# must say the same, and every name on a list here must be documented.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import re, sys

doc = open("docs/config.md").read()
summary = doc.split("### Summary", 1)[1].split("\n### ", 1)[0]
problems = []

# Where the code applies a default once the config is parsed (the parse
# leaves the field unset): the file, and a pattern whose group is the
# default it applies.
SOURCE = {
    "tls_ciphers": ("proto/tls/tls.c", r'#define DEFAULT_CIPHERS "([^"]*)"'),
    "real_ip_header": ("proto/policy/access.c", r'real_ip_header : "([^"]*)"'),
    "index": ("proto/static/static_module.c", r'default_index\[\] = \{"([^"]*)"\}'),
    "proxy_upgrade": ("proto/upstream/proxy_head.c", r'proxy_upgrade_default\[1\] = \{"([^"]*)"\}'),
    # text/html is always compressed; the *_types lists hold the others
    "gzip_types": ("proto/compress/compress_conf.c", r'strncasecmp\(type, "([^"]*)"'),
    "brotli_types": ("proto/compress/compress_conf.c", r'strncasecmp\(type, "([^"]*)"'),
    "zstd_types": ("proto/compress/compress_conf.c", r'strncasecmp\(type, "([^"]*)"'),
}

# Documented defaults that are no value a parse could show, by the anchor
# of their summary row, with the reason.  A default of "none" (nothing
# set, so nothing to compare) needs no place here.
NOT_A_VALUE = {
    ("user", "user-group"): "the user corral was started as: nothing to write",
    ("group", "user-group"): "the user corral was started as: nothing to write",
    ("allow", "admin-access"): "no rule: an empty list",
    ("deny", "admin-access"): "no rule: an empty list",
    ("allow", "allow-deny"): "no rule: an empty list",
    ("deny", "allow-deny"): "no rule: an empty list",
    ("allow", "stream-allow-deny"): "no rule: an empty list",
    ("deny", "stream-allow-deny"): "no rule: an empty list",
    ("proxy_redirect", "proxy_redirect"): "`default` is a rule made of proxy_pass and the "
        "location when a request is sent, not a value a field holds",
    ("tls_ciphersuites", "tls_ciphersuites"): "OpenSSL's own list: corral sets none",
    ("tls_verify_client", "tls_verify_client"): "follows tls_client_certificate "
        "(field_cases in tests/conf/test_conf.c check both)",
    ("tls_stapling_responder", "tls_stapling_responder"): "read from the certificate",
    ("tls_trusted_certificate", "tls_trusted_certificate"): "the system's store: OpenSSL's",
    ("proxy_tls_trusted_certificate", "proxy_tls_trusted_certificate"): "the system's store: "
        "OpenSSL's",
    ("proxy_tls_name", "proxy_tls_name"): "the host in proxy_pass, when a request is sent",
    ("log_format", "access_log-log_format"): "a format built into the access log, not a field",
    ("otel_span_name", "otel_span_name"): "each location's own path",
    ("health_check", "health_check"): "off: no health_check line, no probe",
    ("proxy_responses", "stream-udp-sessions"): "not limited: no value says so",
}


def slug(heading):
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


# Each anchor's text: a heading's up to the next heading (of any level) or
# anchor, an <a id> anchor's likewise.
lines = doc.split("\n")
marks = []
for i, line in enumerate(lines):
    heading = re.match(r'^#{2,6} (.*)$', line)
    if heading:
        marks.append((i, slug(heading.group(1))))
    for anchor in re.findall(r'<a id="([^"]+)"></a>', line):
        marks.append((i, anchor))
sections = {}
for k, (i, anchor) in enumerate(marks):
    end = next((j for j, _ in marks[k + 1:] if j > i), len(lines))
    sections.setdefault(anchor, "\n".join(lines[i:end]))


def flat(text):
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)
    return re.sub(r'\s+', ' ', text).strip()


def split_top(text):
    """The parts of `text` between ", " and "; " outside code spans."""
    parts, part, code = [], "", False
    i = 0
    while i < len(text):
        c = text[i]
        code = not code if c == "`" else code
        if not code and c in ",;" and text[i + 1:i + 2] == " ":
            parts.append(part.strip())
            part, i = "", i + 2
            continue
        part += c
        i += 1
    parts.append(part.strip())
    return [p for p in parts if p]


def value(name, text):
    """What a default's text says: its leading code span (without the
    name written before the value), else the words of its first part,
    without a remark in parentheses after them; "none" for the words
    that say nothing is set ("no file", "not checked")."""
    text = flat(text).rstrip(" ·")
    span = re.match(r'`([^`]*)`', text)
    if span:
        v = span.group(1).strip().rstrip(";").strip()
        return v[len(name) + 1:].strip() if v.startswith(name + " ") else v
    text = re.sub(r'\s*\((?:[^()]|\([^()]*\))*\)$', '', text.rstrip(".;")).strip()
    text = split_top(text)[0] if text else text
    return "none" if text == "not checked" or re.match(r'(none|no) ', text + " ") else text


def assign(names, text):
    """Each of `names`'s value in a default's text that may say several:
    "`NAME VALUE`" names its own; the other parts go in order to the
    other names (one part left: to all of them)."""
    parts = split_top(text)
    if len(names) == 1 and not re.search(r'`%s ' % re.escape(names[0]), text):
        return {names[0]: value(names[0], text)}
    found, rest = {}, []
    for part in parts:
        for span in re.findall(r'`([^`]*)`', part):
            for name in names:
                m = re.search(r'(?:^|; )%s ([^;]+)' % re.escape(name), span)
                if m:
                    found[name] = m.group(1).strip()
        if not any(re.search(r'`[^`]*\b%s ' % re.escape(n), part) for n in names):
            rest.append(part)
    left = [n for n in names if n not in found]
    if len(rest) == len(left):
        found.update((n, value(n, p)) for n, p in zip(left, rest))
    elif len(rest) == 1:
        found.update((n, value(n, rest[0])) for n in left)
    elif left and len(parts) == 1:
        found.update((n, value(n, parts[0])) for n in left)
    return found


def section_default(name, section):
    """What the section says `name`'s default is, or None."""
    # a table with a "default" column
    for table in re.findall(r'((?:^\|.*\|\n)+)', section + "\n", re.M):
        rows = [[c.strip() for c in re.split(r'(?<!\\)\|', r)[1:-1]]
                for r in table.strip().split("\n")]
        if "default" not in rows[0]:
            continue
        column = rows[0].index("default")
        for row in rows[2:]:
            names = [re.match(r'[\w*]+', s).group(0) for s in re.findall(r'`([^`]*)`', row[0])]
            if name in names:
                return assign(names, row[column]).get(name)
    paragraphs = [flat(p) for p in re.split(r'\n\s*\n', section) if "**Default:**" in p]
    for p in paragraphs:
        head, text = p.split("**Default:**", 1)
        text = re.split(r' · \*\*Context| · repeatable', text)[0].strip().rstrip(" ·")
        said = []
        for word in re.findall(r'`(\w+)[ ;`]', head):
            if word not in said:
                said.append(word)
        if name in said:
            return assign(said, text).get(name)
    text = flat(section)
    # "`NAME ...;` (... default X)", possibly after a few words
    m = re.search(r'`%s[ ;][^`]*`[^.()`]*(?:`[^`]*`[^.()`]*)?\(((?:[^()]|\([^()]*\))*)\)'
                  % re.escape(name), text)
    if m and re.search(r'default:? ', m.group(1)):
        return value(name, split_top(re.split(r'default:? ', m.group(1), 1)[1])[0])
    # "* `NAME` (X...): ..."
    m = re.search(r'^\* `%s` \((`[^`]*`[^)]*)\)' % re.escape(name), section, re.M)
    if m:
        return value(name, split_top(m.group(1))[0])
    return None


# The summary: each name's default and contexts, by the anchor its row
# links to.
rows = []
for line in re.findall(r'^\| (.*) \|$', summary, re.M):
    cells = [c.strip() for c in re.split(r'(?<!\\)\|', line)]
    link = re.search(r'\]\(#([^)]+)\)', cells[0])
    if len(cells) != 4 or not link or cells[0].startswith("[nginx's"):
        continue
    names = re.findall(r'`([a-z0-9_*]+)`', cells[0].split("](")[0])
    parts = split_top(cells[2])
    for i, name in enumerate(names):
        said = parts[i] if len(parts) == len(names) else cells[2]
        rows.append({"name": name, "anchor": link.group(1), "contexts": cells[1],
                     "text": said, "value": value(name, said) if said else ""})
by_name = {}
for row in rows:
    by_name.setdefault(row["name"], []).append(row)


def resolved(row):
    """The row's value, "as their proxy_* twins" and "as for HTTP" read
    from the row they point at."""
    if row["text"] == "as their `proxy_*` twins":
        twin = re.sub(r'^grpc_ssl_', "proxy_tls_", row["name"]).replace("grpc_", "proxy_", 1)
        return resolved(by_name[twin][0]) if twin in by_name else None
    if row["text"] == "as for HTTP":
        http = [r for r in by_name[row["name"]] if r is not row and r["text"] != "as for HTTP"]
        return resolved(http[0]) if http else None
    return row["value"]


# a. the summary against the sections
for row in rows:
    name = row["name"]
    if "*" in name:
        continue
    section = sections.get(row["anchor"])
    if section is None:
        problems.append("%s: the summary links #%s, which no heading or anchor has"
                        % (name, row["anchor"]))
        continue
    said = section_default(name, section)
    want = resolved(row)
    if said is None:
        # a section need not say that nothing is set, nor repeat what
        # the row it points at says
        if want and want != "none" and not row["text"].startswith("as "):
            problems.append("%s: the summary says its default is \"%s\"; its section (#%s) "
                            "says none" % (name, want, row["anchor"]))
        continue
    if said != want and {said, want} != {"", "none"}:  # "" says nothing is set too
        problems.append("%s: the summary says its default is \"%s\", its section (#%s) \"%s\""
                        % (name, want, row["anchor"], said))

# b. the summary against the code's checks: documented_defaults' rows,
# DEFAULT*("name", CONF_..., "value", ...) and STREAM_DEFAULT("name",
# "value", ...) (written in the stream block)
CONTEXTS = {"CONF_MAIN": "top level", "CONF_SERVER": "server", "CONF_LOCATION": "location",
            "CONF_UPSTREAM": "upstream", "CONF_ADMIN": "admin", "CONF_STREAM": "stream",
            "CONF_STREAM_SERVER": "stream server", "CONF_OTEL_EXPORTER": "otel_exporter"}
listed = re.findall(r'^\s*(DEFAULT\w*|STREAM_DEFAULT)\(\s*"(\w+)",\s*(?:(CONF_\w+),\s*)?'
                    r'"((?:[^"\\]|\\.)*)"', open("tests/conf/test_conf.c").read(), re.M)
if len(listed) < 100:
    sys.exit("read %d rows of documented_defaults in tests/conf/test_conf.c: its form changed?"
             % len(listed))
checked = set()
for macro, name, context, text in listed:
    where = CONTEXTS["CONF_STREAM" if macro == "STREAM_DEFAULT" else context]
    text = text.replace('\\"', '"')
    matches = [r for r in by_name.get(name, [])
               if where in [w.strip() for w in r["contexts"].split(",")]
               or (r["contexts"] == "as their `proxy_*` twins")]
    if not matches:
        problems.append("tests/conf/test_conf.c checks %s in %s, which the summary does not "
                        "document" % (name, where))
    for row in matches:
        checked.add((name, row["anchor"]))
        if resolved(row) != text:
            problems.append("%s in %s: the summary says its default is \"%s\", "
                            "tests/conf/test_conf.c checks \"%s\""
                            % (name, where, resolved(row), text))
for name, (path, pattern) in SOURCE.items():
    found = re.search(pattern, open(path).read())
    for row in by_name.get(name, []):
        checked.add((name, row["anchor"]))
        if found is None:
            problems.append("%s (#%s): no %s in %s" % (name, row["anchor"], pattern, path))
        elif found.group(1).lower() != resolved(row).lower():
            problems.append("%s (#%s): the summary says its default is \"%s\", %s applies \"%s\""
                            % (name, row["anchor"], resolved(row), path, found.group(1)))
    if name not in by_name:
        problems.append("SOURCE names %s, which the summary does not document" % name)
for key, why in sorted(NOT_A_VALUE.items()):
    if key in checked:
        problems.append("%s (#%s) is checked: it needs no place on NOT_A_VALUE" % key)
    elif not any(r["anchor"] == key[1] for r in by_name.get(key[0], [])):
        problems.append("NOT_A_VALUE names %s (#%s), which the summary does not document" % key)
for row in rows:
    key = (row["name"], row["anchor"])
    value_ = resolved(row)
    if "*" in row["name"] or not value_ or key in checked or key in NOT_A_VALUE:
        continue
    if value_ == "none":
        continue  # an absence: nothing set, so no value to check
    problems.append("%s (#%s): its default \"%s\" is checked nowhere: add it to "
                    "documented_defaults in tests/conf/test_conf.c, or to SOURCE or NOT_A_VALUE "
                    "here" % (row["name"], row["anchor"], value_))

for p in problems:
    print(p)
print("%d summary defaults, %d checked against the code (%d in tests/conf/test_conf.c), "
      "%d not values: %d problems" % (len(rows), len(checked), len(listed), len(NOT_A_VALUE),
                                     len(problems)))
sys.exit(1 if problems else 0)
PY
