/*
 * rewrite.c: the rewrite phases of the router (router.h): the server's
 * rewrite, set, break and if lines before the location search, the
 * location's after it, in the order written, an if a jump over its block
 * when its condition is false (in a location, when it holds, a move to
 * its block's location, as nginx's); a URI they change is the walk's
 * request's, and the router searches again while a location's rewrites
 * change it; a value `set` gives lasts the exchange (vars.h's user
 * variables).
 */
#include "proto/policy/rewrite.h"

#include "proto/http/regex.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/uri.h"
#include "proto/http/vars.h"
#include "proto/policy/redirect.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The URI being rewritten (router.h): path, then "?args" when it has
 * arguments. */
static struct vars_buf *uri_buf(struct router_uri *u)
{
    return &u->bufs[u->cur];
}

static struct http_str uri_path(struct router_uri *u)
{
    return (struct http_str){uri_buf(u)->data, u->path_len};
}

/* The arguments, without the "?"; empty when there are none. */
static struct http_str uri_args(struct router_uri *u)
{
    struct vars_buf *b = uri_buf(u);
    if (b->len <= u->path_len)
        return (struct http_str){"", 0};
    return (struct http_str){b->data + u->path_len + 1, b->len - u->path_len - 1};
}

/* Sets up the walk's URI buffers with its request's target, once. */
static bool uri_init(struct router_walk *w)
{
    struct router_uri *u = &w->uri;
    if (u->used)
        return true;
    u->used = true;
    u->cur = 0;
    vars_buf_init(&u->bufs[0], u->small[0], sizeof(u->small[0]));
    vars_buf_init(&u->bufs[1], u->small[1], sizeof(u->small[1]));
    vars_buf_add(&u->bufs[0], w->req.target.data, w->req.target.len);
    u->path_len = w->req.path.len;
    return !u->bufs[0].failed;
}

enum outcome {
    UNCHANGED,
    CHANGED,      /* on to a new search */
    CHANGED_STAY, /* break: this location */
    ANSWERED,     /* a redirect was sent */
    FAILED,       /* out of memory, or a regex that gave up: 500 */
};

/* Sends the redirect to `value`, with the request's arguments unless the
 * value has its own or ends with "?" (then that "?" is dropped). */
static bool redirect(struct router_walk *w, const struct http_rewrite *rule, struct vars_buf *value,
                     struct http_str args)
{
    char small[512];
    struct vars_buf line;
    vars_buf_init(&line, small, sizeof(small));
    char uri_small[512];
    struct vars_buf uri;
    vars_buf_init(&uri, uri_small, sizeof(uri_small));
    const char *q = memchr(value->data, '?', value->len);
    if (q != NULL && q == value->data + value->len - 1) {
        vars_buf_add(&uri, value->data, value->len - 1);
    } else {
        vars_buf_add(&uri, value->data, value->len);
        if (q == NULL && args.len > 0) {
            vars_buf_add(&uri, "?", 1);
            vars_buf_add(&uri, args.data, args.len);
        }
    }
    redirect_location(w->ex, w->req.host, uri.data, uri.len, &line); /* with its NUL */
    bool sent = !line.failed && !uri.failed;
    vars_buf_free(&uri);
    if (sent) {
        router_routed(w);
        exchange_respond(w->ex, rule->flag == HTTP_REWRITE_PERMANENT ? 301 : 302, line.data, "", 0);
    }
    vars_buf_free(&line);
    return sent;
}

/* Makes `value` the URI: its path, and its arguments if it has any (then
 * the old ones follow them, unless it ends with "?"). */
static bool replace_uri(struct router_uri *u, struct vars_buf *value)
{
    struct http_str old_args = uri_args(u);
    struct vars_buf *next = &u->bufs[1 - u->cur];
    next->len = 0;
    const char *q = memchr(value->data, '?', value->len);
    uri_add_bytes(next, value->data, q != NULL ? (size_t)(q - value->data) : value->len);
    size_t path_len = next->len;
    if (q == NULL && old_args.len > 0) {
        vars_buf_add(next, "?", 1);
        vars_buf_add(next, old_args.data, old_args.len);
    } else if (q != NULL && q + 1 < value->data + value->len) {
        vars_buf_add(next, "?", 1);
        uri_add_bytes(next, q + 1, (size_t)(value->data + value->len - q - 1));
        if (old_args.len > 0) {
            vars_buf_add(next, "&", 1);
            vars_buf_add(next, old_args.data, old_args.len);
        }
    }
    if (next->failed)
        return false;
    u->cur = 1 - u->cur;
    u->path_len = path_len;
    return true;
}

/* What the regex of the if being run matched: its groups, for the steps
 * of its block. */
struct if_match {
    struct vars_buf subject; /* the if's variable, evaluated */
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    size_t count; /* 0: no groups (no regex, or it did not match) */
    char small[256];
};

/* Sets the groups a step's values read: its if's, or its location's
 * regex matched against the path (`ovector` the caller's).  False when
 * that regex gave up. */
static bool step_captures(struct vars_ctx *ctx, const struct http_rewrite *rule,
                          const struct if_match *m, size_t *ovector)
{
    if (rule->if_groups) {
        if (m->count > 0) {
            ctx->subject = m->subject.data;
            ctx->ovector = m->ovector;
            ctx->capture_count = m->count;
        }
        return true;
    }
    return rule->captures == NULL || vars_set_captures(ctx, rule->captures, ovector);
}

/* A `set` line: its value, evaluated now, becomes its variable's for the
 * rest of the exchange. */
static bool set_value(struct router_walk *w, const struct http_rewrite *rule,
                      const struct if_match *m)
{
    struct vars_ctx ctx = {.ex = w->ex, .req = &w->req, .escape = VARS_RAW};
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    if (!step_captures(&ctx, rule, m, ovector))
        return false;
    char small[256];
    struct vars_buf value;
    vars_buf_init(&value, small, sizeof(small));
    vars_eval(rule->replacement, &ctx, &value);
    bool ok = !value.failed &&
              vars_user_set(w->ex, rewrite_module.slot, rule->set_index, value.data, value.len);
    vars_buf_free(&value);
    return ok;
}

/* -f, -d, -e, -x on `path` (its value; the file system is asked, as
 * nginx does, on the worker). */
static bool file_test(enum http_if_op op, struct vars_buf *path)
{
    if (path->len == 0 || memchr(path->data, '\0', path->len) != NULL)
        return false;
    vars_buf_add(path, "", 1); /* its NUL, for stat() */
    if (path->failed)
        return false;
    struct stat st;
    bool exists = stat(path->data, &st) == 0;
    path->len--;
    switch (op) {
    case HTTP_IF_FILE: return exists && S_ISREG(st.st_mode);
    case HTTP_IF_DIR: return exists && S_ISDIR(st.st_mode);
    case HTTP_IF_EXEC: return exists && (st.st_mode & S_IXUSR) != 0;
    default: return exists;
    }
}

/* Whether an if's condition holds (1) or not (0); -1: out of memory, or
 * a regex gave up (500, as nginx).  A regex that matches leaves its
 * groups in `m`. */
static int test(struct router_walk *w, const struct http_rewrite *rule, struct if_match *m)
{
    const struct http_if *cond = rule->cond;
    struct vars_ctx ctx = {.ex = w->ex, .req = &w->req, .escape = VARS_RAW};
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    if (!step_captures(&ctx, rule, m, ovector))
        return -1;
    m->count = 0;
    m->subject.len = 0;
    vars_eval(cond->subject, &ctx, &m->subject);
    if (m->subject.failed)
        return -1;
    const char *data = m->subject.data;
    size_t len = m->subject.len;
    bool holds;
    switch (cond->op) {
    case HTTP_IF_VALUE: holds = len > 0 && !(len == 1 && data[0] == '0'); break;
    case HTTP_IF_EQUAL: {
        char small[256];
        struct vars_buf value;
        vars_buf_init(&value, small, sizeof(small));
        vars_eval(cond->value, &ctx, &value);
        bool failed = value.failed;
        holds = value.len == len && (len == 0 || memcmp(value.data, data, len) == 0);
        vars_buf_free(&value);
        if (failed)
            return -1;
        break;
    }
    case HTTP_IF_MATCH: {
        int pairs = regex_match(cond->regex, data, len, m->ovector);
        if (pairs == HTTP_REGEX_GAVE_UP)
            return -1;
        holds = pairs > 0;
        if (holds && !cond->negate)
            m->count = (size_t)pairs;
        break;
    }
    default: holds = file_test(cond->op, &m->subject); break;
    }
    return holds != cond->negate;
}

/* Runs `rules` on the walk's URI, which becomes its request's. */
static enum outcome run_steps(struct router_walk *w, const struct http_rewrites *rules,
                              struct if_match *m)
{
    struct router_uri *u = &w->uri;
    enum outcome outcome = UNCHANGED;
    for (size_t i = 0; i < rules->count; i++) {
        const struct http_rewrite *rule = &rules->items[i];
        switch (rule->kind) {
        case HTTP_STEP_SET:
            if (!set_value(w, rule, m))
                return FAILED;
            continue;
        case HTTP_STEP_IF: {
            int holds = test(w, rule, m);
            if (holds < 0)
                return FAILED;
            assert(rule->cond->end > i && rule->cond->end <= rules->count);
            if (!holds)
                i = rule->cond->end - 1; /* the loop steps past the block */
            else if (rule->cond->loc != NULL)
                /* nginx's ngx_http_script_if_code: the request is the
                 * block's location's from here on, the rest of the
                 * location's steps included, until a search moves it. */
                w->ex->loc = rule->cond->loc;
            continue;
        }
        case HTTP_STEP_BREAK:
            /* As nginx's: a URI changed before it stays in this location. */
            return outcome == CHANGED ? CHANGED_STAY : outcome;
        case HTTP_STEP_RETURN: {
            struct vars_ctx ctx = {.ex = w->ex, .req = &w->req};
            size_t ovector[2 * HTTP_REGEX_PAIRS];
            if (!step_captures(&ctx, rule, m, ovector))
                return FAILED;
            return_answer(w, rule->answer, ctx.subject, ctx.ovector, ctx.capture_count);
            return ANSWERED;
        }
        case HTTP_STEP_REWRITE: break;
        }
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        struct vars_ctx ctx = {.ex = w->ex, .req = &w->req, .escape = VARS_HEADER};
        if (!vars_set_captures(&ctx, rule->regex, ovector))
            return FAILED; /* as nginx: a 500, never the next rule */
        if (ctx.capture_count == 0)
            continue;
        char small[512];
        struct vars_buf value;
        vars_buf_init(&value, small, sizeof(small));
        vars_eval(rule->replacement, &ctx, &value);
        enum outcome step = value.failed ? FAILED : CHANGED;
        if (step == CHANGED && (rule->absolute || rule->flag == HTTP_REWRITE_REDIRECT ||
                                rule->flag == HTTP_REWRITE_PERMANENT)) {
            step = redirect(w, rule, &value, uri_args(u)) ? ANSWERED : FAILED;
        } else if (step == CHANGED && !replace_uri(u, &value)) {
            step = FAILED;
        }
        vars_buf_free(&value);
        if (step != CHANGED)
            return step;
        w->req.target = (struct http_str){uri_buf(u)->data, uri_buf(u)->len};
        w->req.path = uri_path(u);
        outcome = CHANGED;
        if (rule->flag == HTTP_REWRITE_LAST)
            return CHANGED;
        if (rule->flag == HTTP_REWRITE_BREAK)
            return CHANGED_STAY;
    }
    return outcome;
}

static enum outcome run(struct router_walk *w, const struct http_rewrites *rules)
{
    if (!uri_init(w))
        return FAILED;
    struct if_match m;
    vars_buf_init(&m.subject, m.small, sizeof(m.small));
    m.count = 0;
    enum outcome outcome = run_steps(w, rules, &m);
    vars_buf_free(&m.subject);
    return outcome;
}

/* The server's rewrites run once, before the first search; a "last"
 * among them only ends them. */
int rewrite_server_phase(struct router_walk *w)
{
    const struct http_rewrites *rules = http_module_built(w->ex, &rewrite_module);
    if (rules == NULL)
        return ROUTER_NEXT;
    switch (run(w, rules)) {
    case ANSWERED: return ROUTER_DONE;
    case FAILED: return 500;
    default: return ROUTER_NEXT;
    }
}

int rewrite_location_phase(struct router_walk *w)
{
    const struct http_rewrites *rules =
        w->ex->loc != NULL ? http_module_built(w->ex, &rewrite_module) : NULL;
    if (rules == NULL)
        return ROUTER_NEXT;
    switch (run(w, rules)) {
    case ANSWERED: return ROUTER_DONE;
    case FAILED: return 500;
    case CHANGED: w->uri_changed = true; return ROUTER_NEXT;
    default: return ROUTER_NEXT;
    }
}

static const struct http_phase_handler rewrite_phases[] = {
    {ROUTER_SERVER_REWRITE, rewrite_server_phase},
    {ROUTER_REWRITE, rewrite_location_phase},
};

/* ------------------------------------------------------- configuration */

/* rewrite REGEX REPLACEMENT [last|break|redirect|permanent] */
static int apply(void *conf, const struct conf_arg *args, size_t count,
                 struct conf_module_error *error)
{
    struct rewrite_conf *c = conf;
    static const struct {
        const char *name;
        enum http_rewrite_flag flag;
    } flags[] = {
        {"last", HTTP_REWRITE_LAST},
        {"break", HTTP_REWRITE_BREAK},
        {"redirect", HTTP_REWRITE_REDIRECT},
        {"permanent", HTTP_REWRITE_PERMANENT},
    };
    enum http_rewrite_flag flag = HTTP_REWRITE_NEXT;
    if (count == 3) {
        size_t i = 0;
        while (i < sizeof(flags) / sizeof(flags[0]) && strcmp(args[2].text, flags[i].name) != 0)
            i++;
        if (i == sizeof(flags) / sizeof(flags[0])) {
            snprintf(error->message, sizeof(error->message),
                     "unknown rewrite flag \"%s\" (expected last, break, redirect or permanent)",
                     args[2].text);
            error->at = &args[2].pos;
            return -1;
        }
        flag = flags[i].flag;
    }
    const struct conf_arg *regex = &args[0], *replacement = &args[1];
    if (regex->text[0] == '\0')
        return conf_module_fail(error, &regex->pos, "%s", "empty rewrite regex");
    for (const char *p = replacement->text; *p != '\0'; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
            return conf_module_fail(error, &replacement->pos, "%s",
                                    "header value contains a control character");
    struct rewrite_line *items = realloc(c->items, (c->count + 1) * sizeof(*items));
    if (items == NULL)
        return conf_module_fail(error, &regex->pos, "%s", "out of memory");
    c->items = items;
    struct rewrite_line *line = &items[c->count];
    *line = (struct rewrite_line){.regex = strdup(regex->text),
                                  .replacement = strdup(replacement->text),
                                  .flag = flag,
                                  .regex_pos = regex->pos,
                                  .replacement_pos = replacement->pos};
    c->count++; /* freed with the rest, whole or not */
    if (line->regex == NULL || line->replacement == NULL)
        return conf_module_fail(error, &regex->pos, "%s", "out of memory");
    return 0;
}

/* set $name VALUE */
static int apply_set(void *conf, const struct conf_arg *args, size_t count,
                     struct conf_module_error *error)
{
    (void)count;
    struct rewrite_conf *c = conf;
    const char *name = args[0].text;
    size_t len = strlen(name);
    if (name[0] != '$' || len == 1 ||
        strspn(name + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                         "0123456789_") != len - 1) {
        snprintf(error->message, sizeof(error->message),
                 "invalid variable name \"%s\" (expected $ and letters, digits or _)", name);
        error->at = &args[0].pos;
        return -1;
    }
    if (vars_name_is_builtin(name + 1, len - 1)) {
        snprintf(error->message, sizeof(error->message),
                 "\"%s\" is corral's own variable: set another name", name);
        error->at = &args[0].pos;
        return -1;
    }
    struct rewrite_line *items = realloc(c->items, (c->count + 1) * sizeof(*items));
    if (items == NULL)
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    c->items = items;
    struct rewrite_line *line = &items[c->count];
    *line = (struct rewrite_line){.kind = HTTP_STEP_SET,
                                  .name = strdup(name),
                                  .replacement = strdup(args[1].text),
                                  .regex_pos = args[0].pos,
                                  .replacement_pos = args[1].pos};
    c->count++; /* freed with the rest, whole or not */
    if (line->name == NULL || line->replacement == NULL)
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    return 0;
}

/* A new line at the end of the level's, zeroed; NULL when out of
 * memory (reported at `at`). */
static struct rewrite_line *add_line(struct rewrite_conf *c, const struct conf_pos *at,
                                     struct conf_module_error *error)
{
    struct rewrite_line *items = realloc(c->items, (c->count + 1) * sizeof(*items));
    if (items == NULL) {
        conf_module_fail(error, at, "%s", "out of memory");
        return NULL;
    }
    c->items = items;
    items[c->count] = (struct rewrite_line){.kind = HTTP_STEP_REWRITE};
    return &items[c->count++]; /* freed with the rest, whole or not */
}

/* One word of an if's condition: part of an argument, nginx's "(" and
 * ")" taken off the first and the last. */
struct word {
    const char *text;
    size_t len;
    struct conf_pos pos;
};

static bool word_is(const struct word *w, const char *text)
{
    return w->len == strlen(text) && memcmp(w->text, text, w->len) == 0;
}

/* conf_module_fail() at `w`, whose position is gone once the apply
 * returns: error->at_inside keeps it. */
__attribute__((format(printf, 3, 4))) static int
word_fail(struct conf_module_error *error, const struct word *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error->message, sizeof(error->message), fmt, ap);
    va_end(ap);
    error->at_inside = w->pos;
    error->at = &error->at_inside;
    return -1;
}

static int invalid_condition(const struct word *w, struct conf_module_error *error)
{
    return word_fail(error, w, "invalid condition \"%.*s\"", (int)w->len, w->text);
}

/* Copies `w` into *out (malloc'd), with its position. */
static int word_copy(const struct word *w, char **out, struct conf_pos *pos,
                     struct conf_module_error *error)
{
    *out = strndup(w->text, w->len);
    *pos = w->pos;
    return *out != NULL ? 0 : word_fail(error, w, "%s", "out of memory");
}

/* The words of an if's condition into `line`. */
static int condition(struct rewrite_line *line, const struct word *words, size_t n,
                     struct conf_module_error *error)
{
    static const struct {
        const char *name;
        enum http_if_op op;
        bool negate;
    } files[] = {
        {"-f", HTTP_IF_FILE, false}, {"!-f", HTTP_IF_FILE, true},   {"-d", HTTP_IF_DIR, false},
        {"!-d", HTTP_IF_DIR, true},  {"-e", HTTP_IF_EXISTS, false}, {"!-e", HTTP_IF_EXISTS, true},
        {"-x", HTTP_IF_EXEC, false}, {"!-x", HTTP_IF_EXEC, true},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (!word_is(&words[0], files[i].name))
            continue;
        if (n != 2)
            return n < 2
                       ? word_fail(error, &words[0], "\"%s\" needs a path after it", files[i].name)
                       : invalid_condition(&words[2], error);
        line->op = files[i].op;
        line->negate = files[i].negate;
        return word_copy(&words[1], &line->name, &line->regex_pos, error);
    }
    if (words[0].text[0] != '$' || words[0].len < 2)
        return invalid_condition(&words[0], error);
    if (word_copy(&words[0], &line->name, &line->regex_pos, error) != 0)
        return -1;
    if (n == 1) {
        line->op = HTTP_IF_VALUE;
        return 0;
    }
    if (n != 3)
        return n == 2 ? word_fail(error, &words[1], "\"%.*s\" needs a value after it",
                                  (int)words[1].len, words[1].text)
                      : invalid_condition(&words[3], error);
    const struct word *op = &words[1], *value = &words[2];
    if (word_is(op, "=") || word_is(op, "!=")) {
        line->op = HTTP_IF_EQUAL;
        line->negate = op->text[0] == '!';
        return word_copy(value, &line->replacement, &line->replacement_pos, error);
    }
    if (word_is(op, "~") || word_is(op, "~*") || word_is(op, "!~") || word_is(op, "!~*")) {
        line->op = HTTP_IF_MATCH;
        line->negate = op->text[0] == '!';
        line->caseless = op->text[op->len - 1] == '*';
        if (value->len == 0)
            return word_fail(error, value, "%s", "empty regex in condition");
        return word_copy(value, &line->regex, &line->replacement_pos, error);
    }
    return word_fail(error, op,
                     "unexpected \"%.*s\" in condition (expected =, !=, ~, ~*, !~ or !~*)",
                     (int)op->len, op->text);
}

/* if (CONDITION) {: the condition, as nginx reads it:
 *     $var | $var = TEXT | $var != TEXT | $var ~ REGEX | $var ~* REGEX
 *     | $var !~ REGEX | $var !~* REGEX | -f PATH | !-f PATH | -d | -e | -x */
static int apply_if(void *conf, const struct conf_arg *args, size_t count,
                    struct conf_module_error *error)
{
    struct rewrite_conf *c = conf;
    assert(!c->in_if); /* not allowed inside one: conf/ refuses it */
    struct word words[4];
    size_t n = 0;
    const struct conf_arg *first = &args[0], *last = &args[count - 1];
    if (first->text[0] != '(')
        return conf_module_fail(error, &first->pos,
                                "invalid condition \"%s\" (expected \"(\" before it)", first->text);
    size_t last_len = strlen(last->text);
    if (last_len == 0 || last->text[last_len - 1] != ')' || (count == 1 && last_len == 1))
        return conf_module_fail(error, &last->pos,
                                "invalid condition \"%s\" (expected \")\" after it)", last->text);
    for (size_t i = 0; i < count; i++) {
        struct word w = {args[i].text, strlen(args[i].text), args[i].pos};
        if (i == 0) {
            w.text++;
            w.len--;
            w.pos.col++;
        }
        if (i == count - 1)
            w.len--;
        if (w.len == 0 && (i == 0 || i == count - 1))
            continue; /* "( $a )": the parentheses were words of their own */
        if (n == sizeof(words) / sizeof(words[0]))
            return conf_module_fail(error, &args[i].pos, "unexpected \"%s\" in condition",
                                    args[i].text);
        words[n++] = w;
    }
    if (n == 0)
        return conf_module_fail(error, &first->pos, "%s", "empty condition");
    struct rewrite_line *line = add_line(c, &first->pos, error);
    if (line == NULL)
        return -1;
    line->kind = HTTP_STEP_IF;
    line->end = c->count; /* until close_if(): an empty block */
    if (condition(line, words, n, error) != 0)
        return -1; /* its block is not applied, nor close_if() called */
    c->in_if = true;
    c->open_if = c->count - 1;
    return 0;
}

/* The if's block is applied: it ends before the next line. */
static void close_if(void *conf)
{
    struct rewrite_conf *c = conf;
    if (c->in_if)
        c->items[c->open_if].end = c->count;
    c->in_if = false;
}

/* break */
static int apply_break(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    (void)args, (void)count;
    struct rewrite_line *line = add_line(conf, error->where->pos, error);
    if (line == NULL)
        return -1;
    line->kind = HTTP_STEP_BREAK;
    return 0;
}

/* return CODE ["TEXT"] inside an if: a step, which answers when reached. */
static int apply_if_return(void *conf, const struct conf_arg *args, size_t count,
                           struct conf_module_error *error)
{
    struct rewrite_line *line = add_line(conf, &args[0].pos, error);
    if (line == NULL)
        return -1;
    line->kind = HTTP_STEP_RETURN;
    return return_parse(&line->ret, args, count, error);
}

static void conf_free(void *conf)
{
    struct rewrite_conf *c = conf;
    for (size_t i = 0; i < c->count; i++) {
        free(c->items[i].name);
        free(c->items[i].regex);
        free(c->items[i].replacement);
        free(c->items[i].ret.text);
    }
    free(c->items);
}

static const struct conf_directive rewrite_directives[] = {
    {.name = "rewrite",
     .contexts = CONF_SERVER | CONF_LOCATION | CONF_IF,
     .min_args = 2,
     .max_args = 3,
     .repeat = true,
     .passes = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply},
    {.name = "set",
     .contexts = CONF_SERVER | CONF_LOCATION | CONF_IF,
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_set},
    /* a jump over its block; its block holds the directives above and
     * return (conf/ refuses any other there) */
    {.name = "if",
     .contexts = CONF_SERVER | CONF_LOCATION,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .block = true,
     .repeat = true,
     .passes = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_if,
     .block_context = CONF_IF,
     .module_close = close_if},
    {.name = "break",
     .contexts = CONF_SERVER | CONF_LOCATION | CONF_IF,
     .min_args = 0,
     .max_args = 0,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_break},
    /* return inside an if: the return module's is a location's handler */
    {.name = "return",
     .contexts = CONF_IF,
     .min_args = 1,
     .max_args = 2,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_if_return},
    {.name = NULL},
};

/* A step's values read `captures`' groups: its if's (matched once, for
 * its block) or its location's (matched again against the path). */
static void set_groups(struct http_rewrite *rule, const struct http_regex *captures,
                       const struct http_regex *if_regex)
{
    if (captures != NULL && captures == if_regex)
        rule->if_groups = true;
    else
        rule->captures = captures;
}

/* An if's condition compiled: its variable (or path) and text read the
 * location's groups; its regex, a ~ one's groups for its block.  When
 * it holds, the exchange moves to `loc` (NULL: nowhere). */
static int build_if(const struct rewrite_line *line, const struct http_module_build *b,
                    const struct http_regex *loc_regex, const struct http_location *loc,
                    struct http_rewrite *rule)
{
    struct http_if *cond = b->calloc(b->arena, 1, sizeof(*cond));
    if (cond == NULL)
        return -ENOMEM;
    *cond = (struct http_if){.op = line->op, .negate = line->negate, .end = line->end, .loc = loc};
    int err = b->compile_with(b->arena, line->name, &line->regex_pos, "if", loc_regex, true,
                              &cond->subject);
    if (err == 0 && line->op == HTTP_IF_EQUAL)
        err = b->compile_with(b->arena, line->replacement, &line->replacement_pos, "if", loc_regex,
                              true, &cond->value);
    if (err == 0 && line->op == HTTP_IF_MATCH)
        err = b->regex(b->arena, line->regex, line->caseless, &line->replacement_pos, "if",
                       &cond->regex);
    if (err != 0)
        return err;
    if (vars_template_uses_captures(cond->subject) ||
        (cond->value != NULL && vars_template_uses_captures(cond->value)))
        rule->captures = loc_regex;
    rule->cond = cond;
    return 0;
}

/* A level's lines compiled: each regex, and its replacement, whose $1...
 * are that regex's groups.  None: nothing, and a site with none anywhere
 * walks without the rewrite phases. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct rewrite_conf *c = conf;
    *out = NULL;
    if (c->count == 0)
        return 0;
    struct http_rewrites *rules = b->calloc(b->arena, 1, sizeof(*rules));
    struct http_rewrite *items = b->calloc(b->arena, c->count, sizeof(*items));
    if (rules == NULL || items == NULL)
        return -ENOMEM;
    const struct http_regex *loc_regex = b->loc != NULL ? b->loc->regex : NULL;
    /* The if whose block the line is in, and its regex (whose groups its
     * lines read) when it matches one. */
    size_t if_end = 0;
    const struct http_regex *if_regex = NULL;
    size_t ifs = 0; /* a location's ifs so far: each one's location is nested[ifs] */
    for (size_t i = 0; i < c->count; i++) {
        const struct rewrite_line *line = &c->items[i];
        struct http_rewrite *rule = &items[i];
        rule->kind = line->kind;
        if (i >= if_end)
            if_regex = NULL;
        const struct http_regex *captures = if_regex != NULL ? if_regex : loc_regex;
        int err = 0;
        switch (line->kind) {
        case HTTP_STEP_BREAK: continue;
        case HTTP_STEP_IF:
            assert(b->loc == NULL || ifs < b->nested_count); /* one per if of a location */
            err = build_if(line, b, loc_regex, b->loc != NULL ? b->nested[ifs++] : NULL, rule);
            if (err != 0)
                return err;
            if_end = line->end;
            if_regex =
                rule->cond->op == HTTP_IF_MATCH && !rule->cond->negate ? rule->cond->regex : NULL;
            continue;
        case HTTP_STEP_RETURN: {
            struct http_return *answer;
            err = return_compile(&line->ret, b, captures, &answer);
            if (err != 0)
                return err;
            rule->answer = answer;
            if (answer->captures != NULL)
                set_groups(rule, captures, if_regex);
            continue;
        }
        case HTTP_STEP_SET: {
            /* Its variable's index: "$name" compiled is that variable. */
            const struct vars_template *target;
            err = b->compile(b->arena, line->name, &line->regex_pos, "set", &target);
            if (err != 0)
                return err;
            assert(target != NULL && vars_template_user_index(target) >= 0);
            rule->set_index = (unsigned)vars_template_user_index(target);
            err = b->compile_with(b->arena, line->replacement, &line->replacement_pos, "set",
                                  captures, true, &rule->replacement);
            if (err != 0)
                return err;
            if (vars_template_uses_captures(rule->replacement))
                set_groups(rule, captures, if_regex);
            continue;
        }
        case HTTP_STEP_REWRITE: break;
        }
        err = b->regex(b->arena, line->regex, false, &line->regex_pos, "rewrite", &rule->regex);
        if (err == 0)
            err = b->compile_with(b->arena, line->replacement, &line->replacement_pos, "rewrite",
                                  rule->regex, true, &rule->replacement);
        if (err != 0)
            return err;
        rule->flag = line->flag;
        /* A redirect (302 without a flag) when it names a scheme, as in
         * nginx. */
        rule->absolute = strncmp(line->replacement, "http://", 7) == 0 ||
                         strncmp(line->replacement, "https://", 8) == 0 ||
                         strncmp(line->replacement, "$scheme", 7) == 0;
    }
    *rules = (struct http_rewrites){items, c->count};
    *out = rules;
    return 0;
}

/* The variables a level's `set` lines define. */
static void variables(const void *conf,
                      void (*fn)(void *arg, const char *name, const struct conf_pos *pos),
                      void *arg)
{
    const struct rewrite_conf *c = conf;
    for (size_t i = 0; i < c->count; i++)
        if (c->items[i].kind == HTTP_STEP_SET)
            fn(arg, c->items[i].name + 1, &c->items[i].regex_pos);
}

/* The values `set` gave: they last the whole exchange, internal
 * redirects included, as in nginx. */
static void release(struct exchange *ex)
{
    vars_user_release(ex, rewrite_module.slot);
}

struct http_module rewrite_module = {
    .name = "rewrite",
    .conf =
        {
            .name = "rewrite",
            .directives = rewrite_directives,
            .size = sizeof(struct rewrite_conf),
            .free = conf_free,
        },
    .build = build,
    .phases = rewrite_phases,
    .phase_count = sizeof(rewrite_phases) / sizeof(rewrite_phases[0]),
    .slots = 1,
    .release = release,
    .variables = variables,
};
