/*
 * add_header.c: applies a location's add_header rules when its response
 * begins: each value is evaluated (it may read $status, $upstream_* and
 * the exchange's other variables) and appended to the handler's header
 * lines, by a header filter (exchange.h); its state in the exchange's slots.
 * Its directive, its lines per level and their build are the module's too.
 */
#include "proto/policy/add_header.h"
#include "proto/http/module.h"
#include "proto/http/site.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nginx adds headers without `always` to these only. */
static bool status_takes_headers(unsigned status)
{
    switch (status) {
    case 200:
    case 201:
    case 204:
    case 206:
    case 301:
    case 302:
    case 303:
    case 304:
    case 307:
    case 308: return true;
    default: return false;
    }
}

const struct http_add_headers *add_header_rules(const struct exchange *ex)
{
    return exchange_ctx(ex, add_header_module.slot);
}

void add_header_forget_early(struct exchange *ex)
{
    exchange_set_ctx(ex, add_header_module.slot + 1, NULL);
}

void add_header_early(struct exchange *ex, const struct http_request *req, struct vars_buf *out)
{
    const struct http_add_headers *rules = add_header_rules(ex);
    add_header_forget_early(ex);
    if (rules == NULL || !rules->early)
        return;
    /* One value per rule, each ending in a NUL (header values hold none):
     * empty for those evaluated when the response begins. */
    struct vars_ctx ctx = {.ex = ex, .req = req, .escape = VARS_HEADER};
    for (size_t i = 0; i < rules->count; i++) {
        const struct vars_template *t = rules->items[i].value;
        if (vars_template_reads_request(t) && !vars_template_is_late(t))
            vars_eval(t, &ctx, out);
        vars_buf_add(out, "", 1);
    }
    if (!out->failed)
        exchange_set_ctx(ex, add_header_module.slot + 1, out->data);
}

/* add_header's header filter, on while the exchange has rules. */
static void begin_adding(struct exchange *ex, const struct exchange_filter *self,
                         const struct exchange_head *head)
{
    unsigned status = head->status;
    const struct http_add_headers *rules = add_header_rules(ex);
    char small[1024];
    struct vars_buf lines;
    vars_buf_init(&lines, small, sizeof(small));
    vars_buf_add(&lines, head->headers, head->headers_len);
    struct vars_ctx ctx = {.ex = ex, .status = status, .escape = VARS_HEADER};
    bool takes = status_takes_headers(status);
    const char *early = exchange_ctx(ex, add_header_module.slot + 1);
    for (size_t i = 0; i < rules->count; i++) {
        const struct http_add_header *h = &rules->items[i];
        const char *value = early;
        if (early != NULL)
            early += strlen(early) + 1;
        if (!takes && !h->always)
            continue;
        size_t start = lines.len;
        vars_buf_add(&lines, h->name.data, h->name.len);
        vars_buf_add(&lines, ": ", 2);
        size_t value_start = lines.len;
        if (value != NULL && vars_template_reads_request(h->value) &&
            !vars_template_is_late(h->value))
            vars_buf_add(&lines, value, strlen(value));
        else
            vars_eval(h->value, &ctx, &lines);
        if (lines.len == value_start) { /* empty: no line, as in nginx */
            lines.len = start;
            continue;
        }
        vars_buf_add(&lines, "\r\n", 2);
    }
    if (lines.failed) { /* out of memory: the handler's own lines only */
        exchange_filter_begin_next(ex, self, head);
    } else {
        struct exchange_head added = *head;
        added.headers = lines.data;
        added.headers_len = lines.len;
        exchange_filter_begin_next(ex, self, &added);
    }
    vars_buf_free(&lines);
}

static struct exchange_filter add_header_filter = {
    .name = "add_header",
    .begin = begin_adding,
};

void add_header_respond_error(struct exchange *ex, const struct http_request *req,
                              const struct http_add_headers *rules, unsigned status)
{
    if (rules == NULL) {
        exchange_respond_error(ex, status);
        return;
    }
    add_header_set_rules(ex, rules);
    char small[256];
    struct vars_buf early;
    vars_buf_init(&early, small, sizeof(small));
    if (req != NULL)
        add_header_early(ex, req, &early);
    else
        add_header_forget_early(ex);
    exchange_respond_error(ex, status);
    add_header_forget_early(ex); /* `early` goes with this frame */
    vars_buf_free(&early);
}

void add_header_set_rules(struct exchange *ex, const struct http_add_headers *rules)
{
    /* The slot holds any module's state; these rules stay the config's. */
    exchange_set_ctx(ex, add_header_module.slot, (void *)(uintptr_t)rules);
    if (rules != NULL)
        exchange_add_filter(ex, &add_header_filter);
    else
        exchange_remove_filter(ex, &add_header_filter);
}

void add_header_release(struct exchange *ex)
{
    add_header_set_rules(ex, NULL);
    add_header_forget_early(ex);
}

/* The router's own answers (403, 404...) get the add_header lines of
 * the location they answer for, else of its server, as in nginx. */
static void answer_with_rules(struct exchange *ex, const struct http_request *req, unsigned status)
{
    add_header_respond_error(
        ex, req, ex->loc != NULL ? ex->loc->add_headers : ex->vhost->add_headers, status);
}

/* ------------------------------------------------------- configuration */

/* add_header NAME VALUE [always] */
static int apply(void *conf, const struct conf_arg *args, size_t count,
                 struct conf_module_error *error)
{
    struct add_header_conf *c = conf;
    const struct conf_arg *name = &args[0], *value = &args[1];
    if (!http_is_token((struct http_str){name->text, strlen(name->text)}))
        return conf_module_fail(error, &name->pos, "invalid header name \"%s\"", name->text);
    for (const char *p = value->text; *p != '\0'; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
            return conf_module_fail(error, &value->pos, "%s",
                                    "header value contains a control character");
    if (count == 3 && strcmp(args[2].text, "always") != 0)
        return conf_module_fail(error, &args[2].pos,
                                "unknown add_header parameter \"%s\" (expected always)",
                                args[2].text);
    struct add_header_line *items = realloc(c->items, (c->count + 1) * sizeof(*items));
    if (items == NULL)
        return conf_module_fail(error, &name->pos, "%s", "out of memory");
    c->items = items;
    struct add_header_line *line = &items[c->count++]; /* freed with the rest, whole or not */
    *line = (struct add_header_line){.name = strdup(name->text),
                                     .value = strdup(value->text),
                                     .always = count == 3,
                                     .value_pos = value->pos};
    if (line->name == NULL || line->value == NULL)
        return conf_module_fail(error, &name->pos, "%s", "out of memory");
    return 0;
}

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct add_header_conf *c = conf;
    const struct add_header_conf *p = parent;
    if (c->count == 0 && p != NULL && p->count > 0)
        *c = (struct add_header_conf){p->items, p->count, true};
    return 0;
}

static void conf_free(void *conf)
{
    struct add_header_conf *c = conf;
    if (c->inherited)
        return;
    for (size_t i = 0; i < c->count; i++) {
        free(c->items[i].name);
        free(c->items[i].value);
    }
    free(c->items);
}

static const struct conf_directive add_header_directives[] = {
    {.name = "add_header",
     .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION | CONF_LOCATION_IF,
     .min_args = 2,
     .max_args = 3,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply},
    {.name = NULL},
};

/* A level's lines compiled (a value's $1... the location regex's
 * groups), and whether a value must be read while the request is there
 * (add_header_early()); none: nothing. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct add_header_conf *c = conf;
    *out = NULL;
    if (c->count == 0)
        return 0;
    struct http_add_headers *rules = b->calloc(b->arena, 1, sizeof(*rules));
    struct http_add_header *items = b->calloc(b->arena, c->count, sizeof(*items));
    if (rules == NULL || items == NULL)
        return -ENOMEM;
    bool early = false;
    for (size_t i = 0; i < c->count; i++) {
        const struct add_header_line *line = &c->items[i];
        const struct vars_template *value;
        int err = b->compile_with(b->arena, line->value, &line->value_pos, "add_header", NULL, true,
                                  &value);
        if (err != 0)
            return err;
        items[i] = (struct http_add_header){{line->name, strlen(line->name)}, value, line->always};
        early |= vars_template_reads_request(value) && !vars_template_is_late(value);
    }
    *rules = (struct http_add_headers){items, c->count, early};
    *out = rules;
    return 0;
}

struct http_module add_header_module = {
    .name = "add_header",
    .conf =
        {
            .name = "add_header",
            .directives = add_header_directives,
            .size = sizeof(struct add_header_conf),
            .merge = merge,
            .free = conf_free,
        },
    .build = build,
    .slots = 2, /* the rules; their values read early */
    .filter = &add_header_filter,
    .release = add_header_release,
    .release_on_redirect = true,
    .answer = answer_with_rules,
};
