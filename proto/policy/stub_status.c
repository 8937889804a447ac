/*
 * stub_status.c: the stub_status module (stub_status.h): its directive,
 * and the content handler that writes nginx's status page from the
 * counts the daemon gives.
 */
#include "proto/policy/stub_status.h"

#include "proto/http/module.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Written once by the daemon before it serves, read by every worker. */
static _Atomic(stub_status_source_fn) source;

void stub_status_set_source(stub_status_source_fn fn)
{
    atomic_store(&source, fn);
}

size_t stub_status_format(const struct stub_status_counts *c, char *buf, size_t cap)
{
    /* nginx's ngx_http_stub_status_handler(), trailing spaces included:
     * scripts split these lines on spaces. */
    int n = snprintf(buf, cap,
                     "Active connections: %llu \n"
                     "server accepts handled requests\n"
                     " %llu %llu %llu \n"
                     "Reading: %llu Writing: %llu Waiting: %llu \n",
                     (unsigned long long)c->active, (unsigned long long)c->accepts,
                     (unsigned long long)c->handled, (unsigned long long)c->requests,
                     (unsigned long long)c->reading, (unsigned long long)c->writing,
                     (unsigned long long)c->waiting);
    return n > 0 ? (size_t)n : 0;
}

static bool method_is(struct http_str method, const char *name)
{
    return method.len == strlen(name) && memcmp(method.data, name, method.len) == 0;
}

static void stub_status_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)data;
    /* As nginx: GET and HEAD only. */
    if (!method_is(req->method, "GET") && !method_is(req->method, "HEAD")) {
        exchange_respond(ex, 405, "Allow: GET, HEAD\r\n", "", 0);
        return;
    }
    stub_status_source_fn fn = atomic_load(&source);
    struct stub_status_counts counts;
    if (fn == NULL || !fn(&counts)) {
        exchange_respond_error(ex, 503);
        return;
    }
    /* Seven 20-digit numbers and the text: 256 bytes always hold it. */
    char page[256];
    size_t len = stub_status_format(&counts, page, sizeof(page));
    if (len >= sizeof(page)) {
        exchange_respond_error(ex, 500);
        return;
    }
    exchange_respond(ex, 200, "Content-Type: text/plain\r\n", page, len);
}

static const struct http_handler stub_status_handler = {
    .name = "stub_status",
    .on_request = stub_status_on_request,
};

/* ------------------------------------------------------- configuration */

/* `stub_status;`, or nginx's older `stub_status on;` */
static int apply(void *conf, const struct conf_arg *args, size_t count,
                 struct conf_module_error *error)
{
    if (count == 1 && strcmp(args[0].text, "on") != 0) {
        snprintf(error->message, sizeof(error->message),
                 "invalid value \"%s\" (stub_status takes no argument, or \"on\")", args[0].text);
        error->at = &args[0].pos;
        return -1;
    }
    ((struct stub_status_conf *)conf)->on = true;
    return 0;
}

static const struct conf_directive stub_status_directives[] = {
    {.name = "stub_status",
     .contexts = CONF_LOCATION,
     .min_args = 0,
     .max_args = 1,
     .content = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply},
    {.name = NULL},
};

/* A location's page; nothing is inherited: merge() leaves a location's
 * struct as its own lines made it. */
static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)conf, (void)parent, (void)error, (void)len;
    return 0;
}

/* An if's location (nginx's noname one) without a handler of its own
 * shows its location's page. */
static void merge_nested(void *conf, const void *location, bool content)
{
    if (!content)
        *(struct stub_status_conf *)conf = *(const struct stub_status_conf *)location;
}

static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct stub_status_conf *c = conf;
    *out = c->on && b->loc != NULL ? c : NULL;
    return 0;
}

struct http_module stub_status_module = {
    .name = "stub_status",
    .conf =
        {
            .name = "stub_status",
            .directives = stub_status_directives,
            .size = sizeof(struct stub_status_conf),
            .merge = merge,
            .merge_nested = merge_nested,
        },
    .build = build,
    .content = &stub_status_handler,
};
