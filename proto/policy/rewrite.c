/*
 * rewrite.c: the rewrite phases of the router (router.h): the server's
 * rewrite and set lines before the location search, the location's after
 * it, in the order written; a URI they change is the walk's request's,
 * and the router searches again while a location's rewrites change it;
 * a value `set` gives lasts the exchange (vars.h's user variables).
 */
#include "proto/policy/rewrite.h"

#include "proto/http/regex.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/uri.h"
#include "proto/http/vars.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    vars_buf_add(&line, "Location: ", 10);
    const char *q = memchr(value->data, '?', value->len);
    if (q != NULL && q == value->data + value->len - 1) {
        vars_buf_add(&line, value->data, value->len - 1);
    } else {
        vars_buf_add(&line, value->data, value->len);
        if (q == NULL && args.len > 0) {
            vars_buf_add(&line, "?", 1);
            vars_buf_add(&line, args.data, args.len);
        }
    }
    vars_buf_add(&line, "\r\n", 3); /* with its NUL */
    bool sent = !line.failed;
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

/* A `set` line: its value, evaluated now, becomes its variable's for the
 * rest of the exchange. */
static bool set_value(struct router_walk *w, const struct http_rewrite *rule)
{
    struct vars_ctx ctx = {.ex = w->ex, .req = &w->req, .escape = VARS_RAW};
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    if (rule->captures != NULL && !vars_set_captures(&ctx, rule->captures, ovector))
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

/* Runs `rules` on the walk's URI, which becomes its request's. */
static enum outcome run(struct router_walk *w, const struct http_rewrites *rules)
{
    struct router_uri *u = &w->uri;
    if (!uri_init(w))
        return FAILED;
    enum outcome outcome = UNCHANGED;
    for (size_t i = 0; i < rules->count; i++) {
        const struct http_rewrite *rule = &rules->items[i];
        if (rule->set) {
            if (!set_value(w, rule))
                return FAILED;
            continue;
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
    *line = (struct rewrite_line){.name = strdup(name),
                                  .replacement = strdup(args[1].text),
                                  .regex_pos = args[0].pos,
                                  .replacement_pos = args[1].pos};
    c->count++; /* freed with the rest, whole or not */
    if (line->name == NULL || line->replacement == NULL)
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    return 0;
}

static void conf_free(void *conf)
{
    struct rewrite_conf *c = conf;
    for (size_t i = 0; i < c->count; i++) {
        free(c->items[i].name);
        free(c->items[i].regex);
        free(c->items[i].replacement);
    }
    free(c->items);
}

static const struct conf_directive rewrite_directives[] = {
    {.name = "rewrite",
     .contexts = CONF_SERVER | CONF_LOCATION,
     .min_args = 2,
     .max_args = 3,
     .repeat = true,
     .passes = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply},
    {.name = "set",
     .contexts = CONF_SERVER | CONF_LOCATION,
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_set},
    {.name = NULL},
};

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
    for (size_t i = 0; i < c->count; i++) {
        const struct rewrite_line *line = &c->items[i];
        struct http_rewrite *rule = &items[i];
        if (line->name != NULL) {
            /* Its variable's index: "$name" compiled is that variable. */
            const struct vars_template *target;
            int err = b->compile(b->arena, line->name, &line->regex_pos, "set", &target);
            if (err != 0)
                return err;
            assert(target != NULL && vars_template_user_index(target) >= 0);
            rule->set = true;
            rule->set_index = (unsigned)vars_template_user_index(target);
            const struct http_regex *captures = b->loc != NULL ? b->loc->regex : NULL;
            err = b->compile_with(b->arena, line->replacement, &line->replacement_pos, "set",
                                  captures, true, &rule->replacement);
            if (err != 0)
                return err;
            if (vars_template_uses_captures(rule->replacement))
                rule->captures = captures;
            continue;
        }
        int err = b->regex(b->arena, line->regex, false, &line->regex_pos, "rewrite", &rule->regex);
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
        if (c->items[i].name != NULL)
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
