/*
 * nginx_translate.c: `corral --from-nginx FILE`.  Rewrites an nginx config
 * into corral's own spelling, line by line, keeping the file's comments and
 * layout: nginx's names become corral's, the http { } and events { }
 * wrappers go, what has no effect in corral is commented out, and what
 * corral lacks is commented out with the porting message.  Each change gets
 * a "# corral: ..." line above it, so that the output, translated again, is
 * the same.
 */
#include "lex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* nginx directives that do nothing in corral, and why (docs/config.md,
 * "nginx's spellings and boilerplate"). */
static const struct {
    const char *name;
    const char *why;
} no_effect[] = {
    {"tcp_nopush", "corral does not cork its sockets"},
    {"tcp_nodelay", "corral always sets TCP_NODELAY"},
    {"server_tokens", "corral never sends its version"},
    {"types_hash_max_size", "corral sizes its tables itself"},
    {"types_hash_bucket_size", "corral sizes its tables itself"},
    {"server_names_hash_max_size", "corral sizes its tables itself"},
    {"server_names_hash_bucket_size", "corral sizes its tables itself"},
    {"variables_hash_max_size", "corral sizes its tables itself"},
    {"variables_hash_bucket_size", "corral sizes its tables itself"},
    {"map_hash_max_size", "corral sizes its tables itself"},
    {"map_hash_bucket_size", "corral sizes its tables itself"},
    {"proxy_headers_hash_max_size", "corral sizes its tables itself"},
    {"proxy_headers_hash_bucket_size", "corral sizes its tables itself"},
    {"client_header_buffer_size", "client_max_header_size bounds a request head"},
    {"proxy_buffering", "corral streams responses as they arrive"},
    {"proxy_buffers", "corral streams responses as they arrive"},
    {"proxy_busy_buffers_size", "corral streams responses as they arrive"},
    {"ssl_prefer_server_ciphers", "corral always prefers its own cipher order"},
    {"load_module", "corral has no modules to load"},
    {"worker_rlimit_nofile", "corral raises its descriptor limit itself"},
    {"use", "corral uses epoll; \"wakeup\" says how workers share connections"},
    {"multi_accept", "\"wakeup\" says how workers share connections"},
};

/* Changes to one line of the input. */
struct line_edit {
    char **notes; /* "# corral: ..." lines written before it */
    size_t note_count;
    bool comment_out;
    /* One replacement of bytes within the line at most per word; kept in
     * the order made, which is the order of the words. */
    struct {
        unsigned col; /* 1-based, bytes */
        size_t len;
        char *text;
    } * swaps;
    size_t swap_count;
};

struct translator {
    const char *path, *text;
    size_t len;
    size_t *line_starts; /* offset of each line's first byte */
    unsigned line_count;
    struct line_edit *lines; /* [line_count + 1], 1-based */
    struct conf_error *error;
    conf_report_fn report;
    void *report_arg;
    unsigned failed; /* statements that could not be translated */
    bool oom;
    /* events' worker_connections, renamed once it is known that the
     * events wrapper goes (max_connections belongs at top level) */
    struct token worker_connections;
};

/* A statement as read: its name, words and where it ends. */
struct statement {
    struct token name;
    struct token *args;
    size_t arg_count;
    bool block;
    struct conf_pos open, end; /* "{" (block); ";" or the closing "}" */
};

static void statement_free(struct statement *st)
{
    free(st->name.text);
    for (size_t i = 0; i < st->arg_count; i++)
        free(st->args[i].text);
    free(st->args);
}

static const char *line_at(const struct translator *tr, unsigned line, size_t *len)
{
    size_t start = tr->line_starts[line - 1];
    size_t end = line < tr->line_count ? tr->line_starts[line] : tr->len;
    if (end > start && tr->text[end - 1] == '\n')
        end--;
    *len = end - start;
    return tr->text + start;
}

/* Whether only blanks stand before `col` on its line. */
static bool first_on_line(const struct translator *tr, const struct conf_pos *pos)
{
    size_t len;
    const char *line = line_at(tr, pos->line, &len);
    for (unsigned i = 0; i + 1 < pos->col && i < len; i++)
        if (line[i] != ' ' && line[i] != '\t')
            return false;
    return true;
}

/* Whether only blanks or a comment follow the byte at `pos` on its line. */
static bool last_on_line(const struct translator *tr, const struct conf_pos *pos)
{
    size_t len;
    const char *line = line_at(tr, pos->line, &len);
    for (size_t i = pos->col; i < len; i++) {
        if (line[i] == '#')
            return true;
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            return false;
    }
    return true;
}

static void note(struct translator *tr, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Adds a line to write before `line`. */
static void note(struct translator *tr, unsigned line, const char *fmt, ...)
{
    struct line_edit *edit = &tr->lines[line];
    char **notes = realloc(edit->notes, (edit->note_count + 1) * sizeof(*notes));
    if (notes == NULL) {
        tr->oom = true;
        return;
    }
    edit->notes = notes;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&edit->notes[edit->note_count], fmt, ap);
    va_end(ap);
    if (n < 0)
        tr->oom = true;
    else
        edit->note_count++;
}

/* Replaces the word `tok` with `text`, when it is written bare (a quoted
 * word's bytes differ from its text).  Returns false when it is not. */
static bool swap_word(struct translator *tr, const struct token *tok, const char *text)
{
    size_t len = strlen(tok->text), line_len;
    const char *line = line_at(tr, tok->pos.line, &line_len);
    if (tok->pos.col - 1 + len > line_len || memcmp(line + tok->pos.col - 1, tok->text, len) != 0)
        return false;
    struct line_edit *edit = &tr->lines[tok->pos.line];
    void *swaps = realloc(edit->swaps, (edit->swap_count + 1) * sizeof(*edit->swaps));
    char *copy = strdup(text);
    if (swaps == NULL || copy == NULL) {
        if (swaps != NULL)
            edit->swaps = swaps;
        free(copy);
        tr->oom = true;
        return true;
    }
    edit->swaps = swaps;
    edit->swaps[edit->swap_count].col = tok->pos.col;
    edit->swaps[edit->swap_count].len = len;
    edit->swaps[edit->swap_count].text = copy;
    edit->swap_count++;
    return true;
}

/* Whether the statement can be commented out as whole lines: it starts a
 * line and nothing but a comment follows its end. */
static bool own_lines(const struct translator *tr, const struct statement *st)
{
    return first_on_line(tr, &st->name.pos) && last_on_line(tr, &st->end);
}

static void comment_out(struct translator *tr, const struct statement *st)
{
    for (unsigned line = st->name.pos.line; line <= st->end.line; line++)
        tr->lines[line].comment_out = true;
}

/* A statement corral lacks: commented out with its message when it has
 * lines of its own and `remove` allows, else the message only (corral -t
 * then stops on it), which is not repeated when the line above says it
 * already. */
static void untranslatable(struct translator *tr, const struct statement *st, const char *why,
                           bool remove)
{
    tr->failed++;
    if (tr->report != NULL) {
        char where[600];
        snprintf(where, sizeof(where), "%s:%u:%u: %s", tr->path, st->name.pos.line,
                 st->name.pos.col, why);
        tr->report(tr->report_arg, where);
    }
    if (remove && own_lines(tr, st)) {
        note(tr, st->name.pos.line, "# corral: NOT TRANSLATED: %s", why);
        comment_out(tr, st);
        return;
    }
    char text[600];
    snprintf(text, sizeof(text), "# corral: NOT TRANSLATED: %s", why);
    size_t len;
    const char *above = st->name.pos.line > 1 ? line_at(tr, st->name.pos.line - 1, &len) : NULL;
    while (above != NULL && len > 0 && (*above == ' ' || *above == '\t')) {
        above++;
        len--;
    }
    if (above == NULL || len != strlen(text) || memcmp(above, text, len) != 0)
        note(tr, st->name.pos.line, "%s", text);
}

/* ---------------------------------------------------------------- reading */

static int read_statements(struct translator *tr, struct lexer *lx, const char *context, bool skip,
                           const struct statement *open, struct conf_pos *close);

/* Reads the rest of the statement whose name is read. */
static int read_statement(struct translator *tr, struct lexer *lx, struct statement *st)
{
    for (;;) {
        struct token tok;
        if (conf__next_token(tr->error, lx, &tok) != 0)
            return -1;
        if (tok.type == TOKEN_WORD) {
            struct token *args = realloc(st->args, (st->arg_count + 1) * sizeof(*args));
            if (args == NULL) {
                free(tok.text);
                return conf__error_at(tr->error, &tok.pos, "out of memory");
            }
            st->args = args;
            st->args[st->arg_count++] = tok;
            continue;
        }
        if (tok.type == TOKEN_SEMICOLON) {
            st->end = tok.pos;
            return 0;
        }
        if (tok.type == TOKEN_OPEN) {
            st->block = true;
            st->open = tok.pos;
            return 0;
        }
        if (tok.type == TOKEN_CLOSE)
            return conf__error_at(tr->error, &tok.pos, "unexpected \"}\"");
        return conf__error_at(tr->error, &tok.pos,
                              "unexpected end of file, expecting \";\" or \"}\"");
    }
}

/* ------------------------------------------------------------ translating */

static const char *no_effect_reason(const char *name)
{
    for (size_t i = 0; i < sizeof(no_effect) / sizeof(no_effect[0]); i++)
        if (strcmp(no_effect[i].name, name) == 0)
            return no_effect[i].why;
    return NULL;
}

/* ssl_protocols: tls_protocols, without the versions corral never
 * speaks. */
static void translate_ssl_protocols(struct translator *tr, const struct statement *st)
{
    bool any = false;
    for (size_t i = 0; i < st->arg_count; i++)
        any |= strcmp(st->args[i].text, "TLSv1.2") == 0 || strcmp(st->args[i].text, "TLSv1.3") == 0;
    if (!any) {
        untranslatable(tr, st, "no TLS version corral speaks (TLSv1.2, TLSv1.3)", true);
        return;
    }
    if (!swap_word(tr, &st->name, "tls_protocols"))
        return;
    for (size_t i = 0; i < st->arg_count; i++) {
        const char *v = st->args[i].text;
        if (strcmp(v, "TLSv1.2") != 0 && strcmp(v, "TLSv1.3") != 0)
            swap_word(tr, &st->args[i], "");
    }
    note(tr, st->name.pos.line,
         "# corral: nginx's \"ssl_protocols\"; corral speaks TLSv1.2 and TLSv1.3 only");
}

/* Whether the statement is a wrapper (http, events) whose "{" and "}"
 * have lines of their own, so that both lines can go. */
static bool removable_wrapper(const struct translator *tr, const struct statement *st,
                              const struct conf_pos *close)
{
    return st->arg_count == 0 && st->open.line == st->name.pos.line &&
           first_on_line(tr, &st->name.pos) && last_on_line(tr, &st->open) &&
           first_on_line(tr, close) && last_on_line(tr, close) && close->line != st->open.line;
}

/* Translates one simple statement (or a block's head) in `context`. */
static void translate(struct translator *tr, const struct statement *st, const char *context)
{
    const char *name = st->name.text;
    char message[400];
    if (strcmp(context, "map") == 0 || strcmp(context, "types") == 0) {
        /* data, but for map's hostnames: without it, "*.example.com"
         * would be a name like any other, so it stays for -t to refuse */
        if (strcmp(context, "map") == 0 && strcmp(name, "hostnames") == 0 && st->arg_count == 0)
            untranslatable(tr, st,
                           "\"hostnames\": corral's map has no host name patterns; list the "
                           "names, or write a regex such as ~^(.+\\.)?example\\.com$",
                           false);
        return;
    }
    const char *why = no_effect_reason(name);
    if (why != NULL && (strcmp(context, "events") == 0) ==
                           (strcmp(name, "use") == 0 || strcmp(name, "multi_accept") == 0)) {
        if (!own_lines(tr, st))
            return;
        note(tr, st->name.pos.line, "# corral: no effect here: %s", why);
        comment_out(tr, st);
        return;
    }
    if (strcmp(name, "worker_connections") == 0 && strcmp(context, "events") == 0) {
        free(tr->worker_connections.text);
        tr->worker_connections = st->name;
        tr->worker_connections.text = strdup(name);
        tr->oom |= tr->worker_connections.text == NULL;
        return;
    }
    if (strcmp(name, "ssl_protocols") == 0) {
        translate_ssl_protocols(tr, st);
        return;
    }
    if (strcmp(name, "listen") == 0) {
        for (size_t i = 1; i < st->arg_count; i++)
            if (strcmp(st->args[i].text, "ssl") == 0 && swap_word(tr, &st->args[i], "tls"))
                note(tr, st->name.pos.line, "# corral: \"listen ... ssl\" is \"tls\"");
        return;
    }
    if (strcmp(name, "proxy_set_header") == 0 && st->arg_count == 2 && own_lines(tr, st)) {
        const char *header = st->args[0].text, *value = st->args[1].text;
        if ((strcasecmp(header, "X-Forwarded-For") == 0 &&
             strcmp(value, "$proxy_add_x_forwarded_for") == 0) ||
            (strcasecmp(header, "Connection") == 0 && value[0] == '\0')) {
            note(tr, st->name.pos.line, "# corral: does this by itself: %s %s", header,
                 value[0] != '\0' ? value : "\"\"");
            comment_out(tr, st);
        }
        return;
    }
    if (strcmp(context, "upstream") == 0 &&
        (strcmp(name, "least_conn") == 0 || strcmp(name, "ip_hash") == 0 ||
         strcmp(name, "hash") == 0 || strcmp(name, "random") == 0)) {
        char balance[64];
        snprintf(balance, sizeof(balance), "balance %s", name);
        if (swap_word(tr, &st->name, balance))
            note(tr, st->name.pos.line, "# corral: nginx's \"%s\" is \"%s\"", name, balance);
        return;
    }
    const char *alias = conf__nginx_alias(name);
    if (alias != NULL) {
        if (swap_word(tr, &st->name, alias))
            note(tr, st->name.pos.line, "# corral: nginx's \"%s\" is \"%s\"", name, alias);
        return;
    }
    if (strcmp(name, "http") != 0 && conf__nginx_directive_note(name, message, sizeof(message)))
        untranslatable(tr, st, message, true);
}

/* Reads and translates the statements of a block, up to the "}" that
 * closes `open` (its position in *close), or of the file (`open` NULL).
 * With `skip`, they are read only. */
static int read_statements(struct translator *tr, struct lexer *lx, const char *context, bool skip,
                           const struct statement *open, struct conf_pos *close)
{
    /* ssl_client_certificate lines of this block, to keep nginx's meaning */
    struct conf_pos ca_pos = {0};
    bool has_ca = false, has_verify = false;
    for (;;) {
        struct token tok;
        if (conf__next_token(tr->error, lx, &tok) != 0)
            return -1;
        if (tok.type == TOKEN_END) {
            if (open == NULL)
                break;
            return conf__error_at(tr->error, &tok.pos,
                                  "unexpected end of file, expecting \"}\" to close \"%s\"",
                                  open->name.text);
        }
        if (tok.type == TOKEN_CLOSE) {
            if (open == NULL)
                return conf__error_at(tr->error, &tok.pos, "unexpected \"}\"");
            *close = tok.pos;
            break;
        }
        if (tok.type != TOKEN_WORD)
            return conf__error_at(tr->error, &tok.pos, "unexpected \"%s\"",
                                  tok.type == TOKEN_SEMICOLON ? ";" : "{");
        struct statement st = {.name = tok};
        if (read_statement(tr, lx, &st) != 0) {
            statement_free(&st);
            return -1;
        }
        if (!st.block) {
            if (!skip) {
                translate(tr, &st, context);
                if (strcmp(st.name.text, "ssl_client_certificate") == 0) {
                    has_ca = true;
                    ca_pos = st.name.pos;
                }
                has_verify |= strcmp(st.name.text, "ssl_verify_client") == 0 ||
                              strcmp(st.name.text, "tls_verify_client") == 0;
            }
            statement_free(&st);
            continue;
        }
        /* A block: what its children are depends on its name. */
        const char *name = st.name.text;
        char message[400];
        bool lacking = !skip && strcmp(name, "http") != 0 && strcmp(name, "events") != 0 &&
                       conf__nginx_directive_note(name, message, sizeof(message)) != NULL;
        const char *inner = strcmp(name, "http") == 0 ? context : name;
        struct conf_pos end = {0};
        int rc = read_statements(tr, lx, inner, skip || lacking, &st, &end);
        st.end = end;
        if (rc == 0 && !skip) {
            if (lacking) {
                untranslatable(tr, &st, message, true);
            } else if ((strcmp(name, "http") == 0 || strcmp(name, "events") == 0) &&
                       strcmp(context, "main") == 0 && removable_wrapper(tr, &st, &end)) {
                note(tr, st.name.pos.line, "# corral: nginx's \"%s { }\": its lines are %s", name,
                     "corral's top level");
                tr->lines[st.name.pos.line].comment_out = true;
                note(tr, end.line, "# corral: the end of \"%s { }\"", name);
                tr->lines[end.line].comment_out = true;
                if (strcmp(name, "events") == 0 && tr->worker_connections.text != NULL &&
                    swap_word(tr, &tr->worker_connections, "max_connections"))
                    note(tr, tr->worker_connections.pos.line,
                         "# corral: nginx's \"worker_connections\" (per worker)");
            }
        }
        if (strcmp(name, "events") == 0) {
            free(tr->worker_connections.text);
            tr->worker_connections.text = NULL;
        }
        statement_free(&st);
        if (rc != 0)
            return -1;
    }
    if (has_ca && !has_verify) {
        /* corral's tls_client_certificate alone would verify clients */
        note(tr, ca_pos.line, "# corral: nginx verifies no client with this line alone:");
        note(tr, ca_pos.line, "tls_verify_client off;");
    }
    return 0;
}

/* ---------------------------------------------------------------- writing */

static void write_line(const struct translator *tr, unsigned number, FILE *out)
{
    const struct line_edit *edit = &tr->lines[number];
    size_t len;
    const char *line = line_at(tr, number, &len);
    size_t indent = 0;
    while (indent < len && (line[indent] == ' ' || line[indent] == '\t'))
        indent++;
    for (size_t i = 0; i < edit->note_count; i++) {
        /* a note that is a directive (tls_verify_client) keeps its own
         * text; the others are comments at the line's indentation */
        fprintf(out, "%.*s%s\n", (int)indent, line, edit->notes[i]);
    }
    if (edit->comment_out) {
        fprintf(out, "%.*s# %.*s\n", (int)indent, line, (int)(len - indent), line + indent);
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i < edit->swap_count; i++) {
        size_t col = edit->swaps[i].col - 1;
        fwrite(line + at, 1, col - at, out);
        fputs(edit->swaps[i].text, out);
        at = col + edit->swaps[i].len;
    }
    fwrite(line + at, 1, len - at, out);
    fputc('\n', out);
}

int conf_from_nginx(const char *path, const char *text, size_t len, FILE *out,
                    conf_report_fn report, void *report_arg, struct conf_error *error)
{
    struct translator tr = {.path = path,
                            .text = text,
                            .len = len,
                            .error = error,
                            .report = report,
                            .report_arg = report_arg};
    unsigned lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n' && i + 1 < len;
    tr.line_count = lines;
    tr.line_starts = calloc(lines, sizeof(*tr.line_starts));
    tr.lines = calloc(lines + 1, sizeof(*tr.lines));
    int rc = -1;
    if (tr.line_starts == NULL || tr.lines == NULL) {
        struct conf_pos start = {.file = path, .line = 1, .col = 1};
        conf__error_at(error, &start, "out of memory");
        goto out;
    }
    for (size_t i = 0, line = 1; i < len && line < lines; i++)
        if (text[i] == '\n')
            tr.line_starts[line++] = i + 1;
    struct lexer lx = {.p = text, .end = text + len, .pos = {.file = path, .line = 1, .col = 1}};
    if (read_statements(&tr, &lx, "main", false, NULL, NULL) != 0)
        goto out;
    if (tr.oom) {
        struct conf_pos start = {.file = path, .line = 1, .col = 1};
        conf__error_at(error, &start, "out of memory");
        goto out;
    }
    for (unsigned line = 1; line <= tr.line_count && len > 0; line++)
        write_line(&tr, line, out);
    rc = (int)tr.failed;
out:
    for (unsigned line = 0; tr.lines != NULL && line <= tr.line_count; line++) {
        struct line_edit *edit = &tr.lines[line];
        for (size_t i = 0; i < edit->note_count; i++)
            free(edit->notes[i]);
        free(edit->notes);
        for (size_t i = 0; i < edit->swap_count; i++)
            free(edit->swaps[i].text);
        free(edit->swaps);
    }
    free(tr.lines);
    free(tr.line_starts);
    free(tr.worker_connections.text);
    return rc;
}

int conf_from_nginx_file(const char *path, FILE *out, conf_report_fn report, void *report_arg,
                         struct conf_error *error)
{
    size_t len;
    char *text = conf__read_file(path, &len);
    if (text == NULL) {
        struct conf_pos start = {.file = path, .line = 1, .col = 1};
        return conf__error_at(error, &start, "cannot read: %s", strerror(errno));
    }
    int rc = conf_from_nginx(path, text, len, out, report, report_arg, error);
    free(text);
    return rc;
}
