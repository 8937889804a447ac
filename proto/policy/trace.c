/*
 * trace.c: the tracing module (trace.h): its directives, their
 * inheritance and build; per exchange, the trace context taken from the
 * request or made, the traceparent and tracestate put in the request the
 * handler gets (which the proxy forwards as any other header), the
 * response's status, and at the exchange's end its server span and a
 * client span per upstream attempt, handed to the worker's exporter.
 */
#include "proto/policy/trace.h"

#include "proto/http/module.h"
#include "proto/policy/trace_context.h"
#include "proto/policy/trace_span.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------- configuration */

#define TRACE_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)
/* otel_span_attr lines one level may have: the span's own attributes
 * leave the rest of TRACE_SPAN_ATTRS_MAX. */
#define TRACE_USER_ATTRS_MAX 16
/* The most spans a worker's exporter may queue (batch_size * batch_count). */
#define TRACE_QUEUE_MAX (1u << 20)

static const struct conf_keyword context_words[] = {
    {"ignore", TRACE_CONTEXT_IGNORE},
    {"extract", TRACE_CONTEXT_EXTRACT},
    {"inject", TRACE_CONTEXT_INJECT},
    {"propagate", TRACE_CONTEXT_PROPAGATE},
};
_Static_assert(sizeof(enum trace_context_mode) == sizeof(int), "a keyword field is an int");

static int apply_trace(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    (void)count;
    struct trace_conf *c = conf;
    const char *text = args[0].text;
    if (c->trace_pos.file != NULL)
        return conf_module_fail(error, NULL, "\"otel_trace\" is duplicate");
    if (strcmp(text, "on") == 0) {
        c->trace = TRACE_ON;
    } else if (strcmp(text, "off") == 0) {
        c->trace = TRACE_OFF;
    } else if (text[0] == '$' && text[1] != '\0') {
        c->trace = TRACE_VARIABLE;
        c->trace_variable = strdup(text);
        if (c->trace_variable == NULL)
            return conf_module_fail(error, &args[0].pos, "out of memory");
    } else {
        return conf_module_fail(error, &args[0].pos,
                                "invalid value \"%s\" (expected on, off or a $variable)", text);
    }
    c->trace_pos = args[0].pos;
    return 0;
}

static int apply_span_attr(void *conf, const struct conf_arg *args, size_t count,
                           struct conf_module_error *error)
{
    (void)count;
    struct trace_conf *c = conf;
    if (c->attr_count == TRACE_USER_ATTRS_MAX)
        return conf_module_fail(error, NULL, "more than %d \"otel_span_attr\" in one block",
                                TRACE_USER_ATTRS_MAX);
    if (args[0].text[0] == '\0')
        return conf_module_fail(error, &args[0].pos, "empty attribute name");
    struct trace_attr_conf *grown = realloc(c->attrs, (c->attr_count + 1) * sizeof(*grown));
    if (grown == NULL)
        return conf_module_fail(error, NULL, "out of memory");
    c->attrs = grown;
    struct trace_attr_conf *a = &c->attrs[c->attr_count];
    *a = (struct trace_attr_conf){strdup(args[0].text), strdup(args[1].text), args[0].pos};
    if (a->name == NULL || a->value == NULL) {
        free(a->name);
        free(a->value);
        return conf_module_fail(error, NULL, "out of memory");
    }
    c->attr_count++;
    return 0;
}

/* otel_sampler [parent_based] ratio=R, R from 0 to 1. */
static int apply_sampler(void *conf, const struct conf_arg *args, size_t count,
                         struct conf_module_error *error)
{
    struct trace_conf *c = conf;
    bool parent = false, have_ratio = false;
    double ratio = 1.0;
    for (size_t i = 0; i < count; i++) {
        const char *text = args[i].text;
        if (strcmp(text, "parent_based") == 0 && !parent) {
            parent = true;
        } else if (strncmp(text, "ratio=", 6) == 0 && !have_ratio) {
            char *end;
            ratio = strtod(text + 6, &end);
            if (text[6] == '\0' || *end != '\0' || !(ratio >= 0.0 && ratio <= 1.0))
                return conf_module_fail(error, &args[i].pos,
                                        "invalid ratio \"%s\" (expected 0 to 1)", text + 6);
            have_ratio = true;
        } else {
            return conf_module_fail(
                error, &args[i].pos,
                "invalid parameter \"%s\" (expected parent_based or ratio=R, once each)", text);
        }
    }
    c->sampler = trace_sampler_ratio(ratio, parent);
    c->sampler_pos = args[0].pos;
    return 0;
}

static int apply_exporter(void *conf, const struct conf_arg *args, size_t count,
                          struct conf_module_error *error)
{
    (void)args, (void)count;
    struct trace_conf *c = conf;
    if (c->has_exporter)
        return conf_module_fail(error, NULL, "\"otel_exporter\" is duplicate");
    c->has_exporter = true;
    c->exporter.pos = *error->where->pos;
    return 0;
}

/* Inside otel_exporter { }. */
#define CONF_OTEL CONF_OTEL_EXPORTER

static const struct conf_directive trace_directives[] = {
    {.name = "otel_trace",
     .contexts = TRACE_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_trace},
    {.name = "otel_trace_context",
     .contexts = TRACE_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_KEYWORD,
     .what = "trace context mode",
     CONF_KEYWORDS(context_words),
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct trace_conf, context),
     .keep_pos = true,
     .pos_offset = offsetof(struct trace_conf, context_pos)},
    {.name = "otel_span_name",
     .contexts = TRACE_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_STRING,
     .what = "span name",
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct trace_conf, span_name),
     .keep_pos = true,
     .pos_offset = offsetof(struct trace_conf, span_name_pos)},
    {.name = "otel_span_attr",
     .contexts = TRACE_CONTEXTS,
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_span_attr},
    {.name = "otel_sampler",
     .contexts = TRACE_CONTEXTS,
     .min_args = 1,
     .max_args = 2,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_sampler},
    {.name = "otel_service_name",
     .contexts = CONF_MAIN,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_STRING,
     .what = "service name",
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct trace_conf, exporter.service_name)},
    {.name = "otel_exporter",
     .contexts = CONF_MAIN,
     .min_args = 0,
     .max_args = 0,
     .block = true,
     .block_context = CONF_OTEL,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_exporter},
    {.name = "endpoint",
     .contexts = CONF_OTEL,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_STRING,
     .what = "endpoint",
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct trace_conf, exporter.endpoint)},
    {.name = "interval",
     .contexts = CONF_OTEL,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_DURATION,
     .min = 1,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct trace_conf, exporter.interval_ms)},
    {.name = "batch_size",
     .contexts = CONF_OTEL,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_COUNT,
     .min = 1,
     .max = 65536,
     .what = "batch size",
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct trace_conf, exporter.batch_size)},
    {.name = "batch_count",
     .contexts = CONF_OTEL,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_COUNT,
     .min = 1,
     .max = 1024,
     .what = "batch count",
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct trace_conf, exporter.batch_count)},
    {.name = NULL},
};

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct trace_conf *c = conf;
    const struct trace_conf *p = parent;
    if (p == NULL) { /* the top level: the defaults, nginx's where it has them */
        if (c->sampler_pos.file == NULL)
            c->sampler = trace_sampler_ratio(1.0, false);
        struct trace_exporter_conf *e = &c->exporter;
        if (e->interval_ms == 0)
            e->interval_ms = 5000;
        if (e->batch_size == 0)
            e->batch_size = 512;
        if (e->batch_count == 0)
            e->batch_count = 4;
        if (e->service_name == NULL)
            e->service_name = strdup("unknown_service:corral");
        c->export = c->has_exporter ? e : NULL;
        return e->service_name != NULL ? 0 : -1;
    }
    c->export = p->export;
    if (c->trace_pos.file == NULL) {
        c->trace = p->trace;
        c->trace_variable = p->trace_variable;
        c->inherited_trace_variable = true;
    }
    if (c->context_pos.file == NULL)
        c->context = p->context;
    if (c->span_name_pos.file == NULL) {
        c->span_name = p->span_name;
        c->inherited_span_name = true;
    }
    if (c->attr_count == 0 && !c->inherited_attrs) {
        c->attrs = p->attrs;
        c->attr_count = p->attr_count;
        c->inherited_attrs = true;
    }
    if (c->sampler_pos.file == NULL)
        c->sampler = p->sampler;
    return 0;
}

static int check(void *conf, struct conf_module_error *error)
{
    struct trace_conf *c = conf;
    if (error->where->context == CONF_MAIN && c->has_exporter) {
        struct trace_exporter_conf *e = &c->exporter;
        if (e->endpoint == NULL)
            return conf_module_fail(error, &e->pos, "\"otel_exporter\" has no \"endpoint\"");
        /* The queue is allocated whole per worker: bounded here. */
        if ((uint64_t)e->batch_size * e->batch_count > TRACE_QUEUE_MAX)
            return conf_module_fail(error, &e->pos,
                                    "\"otel_exporter\" queues batch_size * batch_count = %llu "
                                    "spans per worker, more than %u",
                                    (unsigned long long)e->batch_size * e->batch_count,
                                    TRACE_QUEUE_MAX);
        int err = corral_parse_address(e->endpoint, &e->addr, &e->addrlen);
        if (err != 0 || e->addr.ss_family == AF_UNIX)
            return conf_module_fail(error, &e->pos, "invalid otel_exporter endpoint \"%s\"%s",
                                    e->endpoint,
                                    err == -ENOENT ? " (the host does not resolve)" : "");
    }
    if (c->trace != TRACE_OFF && c->export == NULL)
        return conf_module_fail(error, c->trace_pos.file != NULL ? &c->trace_pos : NULL,
                                "\"otel_trace\" needs an \"otel_exporter\" block at top level");
    return 0;
}

static void conf_free(void *conf)
{
    struct trace_conf *c = conf;
    if (!c->inherited_trace_variable)
        free(c->trace_variable);
    if (!c->inherited_span_name)
        free(c->span_name);
    if (!c->inherited_attrs) {
        for (size_t i = 0; i < c->attr_count; i++) {
            free(c->attrs[i].name);
            free(c->attrs[i].value);
        }
        free(c->attrs);
    }
    free(c->exporter.endpoint);
    free(c->exporter.service_name);
}

/* What a location (or a server's own answers) reads per request. */
struct trace_loc {
    int trace;
    const struct vars_template *trace_variable;
    int context;
    struct trace_sampler sampler;
    const char *span_name; /* NULL: the location's name */
    const struct vars_template *span_name_value;
    const char *route; /* the location as written; NULL: none */
    size_t attr_count;
    const struct trace_attr_conf *attrs;
    const struct vars_template **attr_values; /* NULL entries: the literal value */
    const struct trace_exporter_conf *export;
};

/* Where nothing is traced and no context goes anywhere there is nothing
 * to do: a site with no such level leaves the module out of its steps. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct trace_conf *c = conf;
    *out = NULL;
    if (c->trace == TRACE_OFF && c->context == TRACE_CONTEXT_IGNORE)
        return 0;
    struct trace_loc *l = b->calloc(b->arena, 1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->trace = c->trace;
    l->context = c->context;
    l->sampler = c->sampler;
    l->export = c->export;
    l->route = b->loc != NULL ? b->loc->path : NULL;
    int err = 0;
    if (c->trace == TRACE_VARIABLE)
        err = b->compile(b->arena, c->trace_variable, &c->trace_pos, "otel_trace",
                         &l->trace_variable);
    if (err == 0 && c->span_name != NULL) {
        l->span_name = c->span_name;
        err = b->compile(b->arena, c->span_name, &c->span_name_pos, "otel_span_name",
                         &l->span_name_value);
    }
    l->attr_count = c->attr_count;
    l->attrs = c->attrs;
    if (err == 0 && c->attr_count > 0) {
        l->attr_values = b->calloc(b->arena, c->attr_count, sizeof(*l->attr_values));
        if (l->attr_values == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < c->attr_count && err == 0; i++)
            err = b->compile(b->arena, c->attrs[i].value, &c->attrs[i].pos, "otel_span_attr",
                             &l->attr_values[i]);
    }
    if (err != 0)
        return err;
    *out = l;
    return 0;
}

/* ----------------------------------------------------------- per request */

/* Bounded copies of what the span says of the request, taken while the
 * request's strings live. */
#define TRACE_METHOD_MAX 32

struct trace_state {
    uint64_t start_mono, start_unix; /* ns, at the first phase */
    const struct trace_loc *loc;     /* the location's; NULL: nothing to do */
    struct trace_context ctx;        /* the trace, our server span, our flags */
    uint8_t parent_id[8];
    bool has_parent, parent_sampled;
    bool ids;     /* ctx and parent are set */
    bool sampled; /* the spans are recorded and exported */
    unsigned status;
    char trace_hex[33], span_hex[17], parent_hex[17];
    char traceparent[TRACEPARENT_LEN + 1];
    char tracestate[TRACESTATE_MAX];
    size_t tracestate_len;
    bool has_tracestate;
    struct http_header *headers; /* the request's, with ours: what the handler got */
    char method[TRACE_METHOD_MAX];
    size_t method_len;
    char path[TRACE_SPAN_STRING_MAX];
    size_t path_len;
    char host[TRACE_SPAN_STRING_MAX];
    size_t host_len;
    /* The span name and otel_span_attr values, evaluated with the request. */
    struct vars_buf strings;
    size_t name_end;
    size_t attr_end[TRACE_USER_ATTRS_MAX];
};

static struct trace_state *state_of(const struct exchange *ex)
{
    return exchange_ctx(ex, trace_module.slot);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The first phase: the server span starts here. */
static int trace_start_phase(struct router_walk *w)
{
    if (state_of(w->ex) != NULL)
        return ROUTER_DECLINED;
    struct trace_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return ROUTER_DECLINED; /* no trace for it: nothing else depends on it */
    st->start_mono = corral_monotonic_ns();
    st->start_unix = realtime_ns();
    vars_buf_init(&st->strings, NULL, 0);
    exchange_set_ctx(w->ex, trace_module.slot, st);
    return ROUTER_DECLINED;
}

static void copy_bounded(char *to, size_t *to_len, size_t cap, struct http_str from)
{
    *to_len = from.len < cap ? from.len : cap;
    memcpy(to, from.data, *to_len);
}

/* The incoming traceparent (exactly one, valid) and tracestate (every
 * line, joined with commas; dropped when malformed or too long). */
static void extract(struct trace_state *st, const struct http_request *req)
{
    const struct http_header *parent = NULL;
    for (size_t i = 0; i < req->header_count; i++) {
        if (!http_str_equal_nocase(req->headers[i].name, "traceparent"))
            continue;
        if (parent != NULL)
            return; /* two: neither counts (section 3.2) */
        parent = &req->headers[i];
    }
    struct trace_context in;
    if (parent == NULL)
        return;
    struct http_str value = http_trim(parent->value);
    if (!traceparent_parse(value.data, value.len, &in))
        return;
    memcpy(st->ctx.trace_id, in.trace_id, 16);
    memcpy(st->parent_id, in.span_id, 8);
    st->has_parent = true;
    st->parent_sampled = (in.flags & TRACE_FLAG_SAMPLED) != 0;
    size_t len = 0;
    bool fits = true;
    for (size_t i = 0; i < req->header_count && fits; i++) {
        if (!http_str_equal_nocase(req->headers[i].name, "tracestate"))
            continue;
        struct http_str v = http_trim(req->headers[i].value);
        size_t need = v.len + (len > 0 ? 1 : 0);
        if (len + need > sizeof(st->tracestate)) {
            fits = false;
            break;
        }
        if (len > 0)
            st->tracestate[len++] = ',';
        memcpy(st->tracestate + len, v.data, v.len);
        len += v.len;
    }
    if (fits && len > 0 && tracestate_valid(st->tracestate, len)) {
        st->tracestate_len = len;
        st->has_tracestate = true;
    }
}

/* A fresh span id, never all zero. */
static void new_span_id(uint8_t out[8])
{
    uint64_t r[2] = {0, 0};
    while (r[0] == 0)
        vars_random_128(r);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(r[0] >> (56 - 8 * i));
}

/* The trace id, the server span's and the parent's, once per exchange:
 * the incoming ones where the location extracts and the request has a
 * valid traceparent, else a new trace whose id is $request_id's. */
static void set_ids(struct trace_state *st, struct exchange *ex, const struct http_request *req)
{
    if (st->loc->context & TRACE_CONTEXT_EXTRACT)
        extract(st, req);
    if (!st->has_parent) {
        char id[33];
        vars_request_id(ex, id);
        for (int i = 0; i < 16; i++)
            st->ctx.trace_id[i] = (uint8_t)(ex->request_id[i / 8] >> (56 - 8 * (i % 8)));
    }
    new_span_id(st->ctx.span_id);
    trace_hex(st->ctx.trace_id, 16, st->trace_hex);
    trace_hex(st->ctx.span_id, 8, st->span_hex);
    if (st->has_parent)
        trace_hex(st->parent_id, 8, st->parent_hex);
    st->ids = true;
}

/* Whether otel_trace says on for this request. */
static bool trace_wanted(const struct trace_loc *l, struct exchange *ex,
                         const struct http_request *req)
{
    if (l->trace != TRACE_VARIABLE)
        return l->trace == TRACE_ON;
    char small[16];
    struct vars_ctx ctx = {.ex = ex, .req = req, .escape = VARS_RAW};
    size_t n = vars_eval_into(l->trace_variable, &ctx, small, sizeof(small));
    return (n == 1 && small[0] == '1') || (n == 2 && memcmp(small, "on", 2) == 0);
}

/* The request the handler gets carries our traceparent (and the incoming
 * tracestate), in place of any the client sent: the proxy forwards them
 * as it forwards every end-to-end field. */
static void inject(struct trace_state *st, struct router_walk *w)
{
    const struct http_request *req = &w->req;
    struct http_header *headers = malloc((req->header_count + 2) * sizeof(*headers));
    if (headers == NULL)
        return;
    size_t n = 0;
    for (size_t i = 0; i < req->header_count; i++)
        if (!http_str_equal_nocase(req->headers[i].name, "traceparent") &&
            !http_str_equal_nocase(req->headers[i].name, "tracestate"))
            headers[n++] = req->headers[i];
    traceparent_format(&st->ctx, st->traceparent);
    headers[n++] = (struct http_header){{"traceparent", 11}, {st->traceparent, TRACEPARENT_LEN}};
    if (st->has_tracestate)
        headers[n++] =
            (struct http_header){{"tracestate", 10}, {st->tracestate, st->tracestate_len}};
    free(st->headers); /* a second walk's: what it pointed to is copied */
    st->headers = headers;
    w->req.headers = headers;
    w->req.header_count = n;
}

/* The span name and otel_span_attr values, while the request is there. */
static void evaluate_strings(struct trace_state *st, struct exchange *ex,
                             const struct http_request *req)
{
    const struct trace_loc *l = st->loc;
    struct vars_ctx ctx = {.ex = ex, .req = req, .escape = VARS_RAW};
    st->strings.len = 0;
    if (l->span_name_value != NULL)
        vars_eval(l->span_name_value, &ctx, &st->strings);
    else if (l->span_name != NULL)
        vars_buf_add(&st->strings, l->span_name, strlen(l->span_name));
    st->name_end = st->strings.len;
    for (size_t i = 0; i < l->attr_count; i++) {
        if (l->attr_values[i] != NULL)
            vars_eval(l->attr_values[i], &ctx, &st->strings);
        else
            vars_buf_add(&st->strings, l->attrs[i].value, strlen(l->attrs[i].value));
        st->attr_end[i] = st->strings.len;
    }
}

static void capture_status(struct exchange *ex, const struct exchange_filter *self,
                           const struct exchange_head *head)
{
    struct trace_state *st = state_of(ex);
    if (st != NULL && head->status >= 200)
        st->status = head->status;
    exchange_filter_begin_next(ex, self, head);
}

static struct exchange_filter trace_filter = {
    .name = "trace",
    .begin = capture_status,
};

/* Once the location is known (again after a rewrite or a redirect): what
 * it says of tracing and of the context. */
static int trace_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    struct trace_state *st = state_of(ex);
    if (st == NULL)
        return ROUTER_DECLINED;
    st->loc = http_module_built(ex, &trace_module);
    if (st->loc == NULL) {
        st->sampled = false;
        exchange_remove_filter(ex, &trace_filter);
        return ROUTER_DECLINED;
    }
    const struct trace_loc *l = st->loc;
    if (!st->ids)
        set_ids(st, ex, &w->req);
    st->sampled = l->export != NULL && trace_wanted(l, ex, &w->req) &&
                  trace_sample(&l->sampler, st->ctx.trace_id, st->has_parent, st->parent_sampled);
    /* Recorded or not, downstream hears the decision; where this hop
     * records nothing the parent's decision passes through. */
    bool flag = l->trace != TRACE_OFF ? st->sampled : st->has_parent && st->parent_sampled;
    st->ctx.flags = flag ? TRACE_FLAG_SAMPLED : 0;
    if (l->context & TRACE_CONTEXT_INJECT)
        inject(st, w);
    if (st->sampled) {
        copy_bounded(st->method, &st->method_len, sizeof(st->method), w->req.method);
        copy_bounded(st->path, &st->path_len, sizeof(st->path), w->req.path);
        copy_bounded(st->host, &st->host_len, sizeof(st->host), w->req.host);
        evaluate_strings(st, ex, &w->req);
        exchange_add_filter(ex, &trace_filter);
    } else {
        exchange_remove_filter(ex, &trace_filter);
    }
    return ROUTER_DECLINED;
}

/* ------------------------------------------------------------ the spans */

static struct http_str str_of(const char *text)
{
    return (struct http_str){text, strlen(text)};
}

static void add_str_attr(struct trace_attr *attrs, size_t *n, const char *key, struct http_str v)
{
    attrs[(*n)++] = (struct trace_attr){.key = key, .str = v};
}

static void add_int_attr(struct trace_attr *attrs, size_t *n, const char *key, int64_t v)
{
    attrs[(*n)++] = (struct trace_attr){.key = key, .is_int = true, .num = v};
}

/* Encodes `span` and queues it on the worker's exporter. */
static void emit(struct exchange *ex, const struct trace_exporter_conf *export,
                 const struct trace_span *span)
{
    /* A span's text is about 1 KB: written on the stack, then copied
     * once to a block of its size, rather than grown by doubling. */
    char small[2048];
    struct vars_buf json;
    vars_buf_init(&json, small, sizeof(small));
    trace_span_json(span, &json);
    char *copy = json.failed ? NULL : malloc(json.len);
    if (copy != NULL) {
        memcpy(copy, json.data, json.len);
        /* It owns the copy now. */
        trace_export_span(exchange_loop(ex), exchange_worker(ex), export, copy, json.len);
    }
    vars_buf_free(&json);
}

/* "10.0.0.1:8080", "[::1]:8080" or "name:8080" as host and port (0: none). */
static struct http_str split_addr(const char *addr, int64_t *port)
{
    const char *colon = strrchr(addr, ':');
    const char *bracket = strrchr(addr, ']');
    *port = 0;
    if (colon == NULL || (bracket != NULL && colon < bracket))
        return str_of(addr);
    *port = strtol(colon + 1, NULL, 10);
    if (addr[0] == '[' && bracket != NULL && bracket < colon)
        return (struct http_str){addr + 1, (size_t)(bracket - addr - 1)};
    return (struct http_str){addr, (size_t)(colon - addr)};
}

static uint32_t try_ms(const struct exchange_upstream_try *t)
{
    if (t->response_ms != EXCHANGE_UPSTREAM_UNKNOWN)
        return t->response_ms;
    if (t->header_ms != EXCHANGE_UPSTREAM_UNKNOWN)
        return t->header_ms;
    return t->connect_ms != EXCHANGE_UPSTREAM_UNKNOWN ? t->connect_ms : 0;
}

/* A client span per server the proxy asked, children of the server span:
 * retries are so many spans, with http.request.resend_count. */
static void emit_client_spans(struct exchange *ex, const struct trace_state *st, uint64_t end_unix)
{
    struct http_str method = {st->method, st->method_len};
    for (unsigned i = 0; i < ex->upstream_try_count; i++) {
        const struct exchange_upstream_try *t = &ex->upstream_tries[i];
        struct trace_span span = {.kind = TRACE_SPAN_CLIENT, .name = method, .has_parent = true};
        memcpy(span.trace_id, st->ctx.trace_id, 16);
        memcpy(span.parent_id, st->ctx.span_id, 8);
        new_span_id(span.span_id);
        span.start_ns = t->asked_ns >= st->start_mono
                            ? st->start_unix + (t->asked_ns - st->start_mono)
                            : st->start_unix;
        span.end_ns = t->status != 0 ? span.start_ns + (uint64_t)try_ms(t) * 1000000u : end_unix;
        span.error = t->status == 0 || t->status >= 500;
        struct trace_attr attrs[6];
        size_t n = 0;
        int64_t port;
        add_str_attr(attrs, &n, "http.request.method", method);
        add_str_attr(attrs, &n, "server.address", split_addr(t->addr, &port));
        if (port != 0)
            add_int_attr(attrs, &n, "server.port", port);
        if (t->status != 0)
            add_int_attr(attrs, &n, "http.response.status_code", t->status);
        if (i > 0)
            add_int_attr(attrs, &n, "http.request.resend_count", i);
        span.attrs = attrs;
        span.attr_count = n;
        emit(ex, st->loc->export, &span);
    }
}

static void emit_server_span(struct exchange *ex, const struct trace_state *st, uint64_t end_unix)
{
    const struct trace_loc *l = st->loc;
    struct trace_span span = {.kind = TRACE_SPAN_SERVER, .has_parent = st->has_parent};
    memcpy(span.trace_id, st->ctx.trace_id, 16);
    memcpy(span.span_id, st->ctx.span_id, 8);
    memcpy(span.parent_id, st->parent_id, 8);
    span.start_ns = st->start_unix;
    span.end_ns = end_unix;
    span.error = st->status >= 500 || st->status == 0;
    /* nginx's default name: the location's; a server's own answer has
     * none, and takes the method. */
    if (l->span_name != NULL)
        span.name = (struct http_str){st->strings.data, st->name_end};
    else if (l->route != NULL)
        span.name = str_of(l->route);
    else
        span.name = (struct http_str){st->method, st->method_len};
    struct trace_attr attrs[TRACE_SPAN_ATTRS_MAX];
    size_t n = 0;
    char client[INET6_ADDRSTRLEN];
    exchange_client_host(ex, client, sizeof(client));
    add_str_attr(attrs, &n, "http.request.method", (struct http_str){st->method, st->method_len});
    add_str_attr(attrs, &n, "url.path", (struct http_str){st->path, st->path_len});
    add_str_attr(attrs, &n, "url.scheme", str_of(exchange_tls(ex) ? "https" : "http"));
    if (l->route != NULL)
        add_str_attr(attrs, &n, "http.route", str_of(l->route));
    if (st->status != 0)
        add_int_attr(attrs, &n, "http.response.status_code", st->status);
    if (st->host_len > 0)
        add_str_attr(attrs, &n, "server.address", (struct http_str){st->host, st->host_len});
    add_str_attr(attrs, &n, "client.address", str_of(client));
    const char *framer = ex->conn != NULL && ex->conn->framer != NULL ? ex->conn->framer->name : "";
    if (strncmp(framer, "HTTP/", 5) == 0)
        add_str_attr(attrs, &n, "network.protocol.version", str_of(framer + 5));
    size_t from = st->name_end;
    for (size_t i = 0; i < l->attr_count && n < TRACE_SPAN_ATTRS_MAX; i++) {
        add_str_attr(attrs, &n, l->attrs[i].name,
                     (struct http_str){st->strings.data + from, st->attr_end[i] - from});
        from = st->attr_end[i];
    }
    span.attrs = attrs;
    span.attr_count = n;
    emit(ex, l->export, &span);
}

/* The exchange is over: its spans go to the exporter. */
static void release(struct exchange *ex)
{
    struct trace_state *st = state_of(ex);
    if (st == NULL)
        return;
    exchange_set_ctx(ex, trace_module.slot, NULL);
    if (st->sampled && !st->strings.failed) {
        uint64_t end_unix = st->start_unix + (corral_monotonic_ns() - st->start_mono);
        emit_client_spans(ex, st, end_unix);
        emit_server_span(ex, st, end_unix);
    }
    vars_buf_free(&st->strings);
    free(st->headers);
    free(st);
}

/* ------------------------------------------------------------ variables */

enum trace_var { TRACE_VAR_TRACE_ID, TRACE_VAR_SPAN_ID, TRACE_VAR_PARENT_ID, TRACE_VAR_SAMPLED };

/* The value of one of the module's variables: none before the location
 * set the ids (a parent is only ever set with them), and the parent's
 * none without a parent. */
static bool var_value(const struct exchange *ex, enum trace_var which, struct http_str *out)
{
    const struct trace_state *st = state_of(ex);
    if (st == NULL || !st->ids)
        return false;
    switch (which) {
    case TRACE_VAR_TRACE_ID: *out = (struct http_str){st->trace_hex, 32}; return true;
    case TRACE_VAR_SPAN_ID: *out = (struct http_str){st->span_hex, 16}; return true;
    case TRACE_VAR_PARENT_ID:
        if (!st->has_parent)
            return false;
        *out = (struct http_str){st->parent_hex, 16};
        return true;
    case TRACE_VAR_SAMPLED:
        *out = str_of(st->has_parent && st->parent_sampled ? "1" : "0");
        return true;
    }
    return false;
}

static bool var_trace_id(const struct exchange *ex, const char *suffix, size_t len,
                         struct http_str *out)
{
    (void)suffix, (void)len;
    return var_value(ex, TRACE_VAR_TRACE_ID, out);
}

static bool var_span_id(const struct exchange *ex, const char *suffix, size_t len,
                        struct http_str *out)
{
    (void)suffix, (void)len;
    return var_value(ex, TRACE_VAR_SPAN_ID, out);
}

static bool var_parent_id(const struct exchange *ex, const char *suffix, size_t len,
                          struct http_str *out)
{
    (void)suffix, (void)len;
    return var_value(ex, TRACE_VAR_PARENT_ID, out);
}

static bool var_parent_sampled(const struct exchange *ex, const char *suffix, size_t len,
                               struct http_str *out)
{
    (void)suffix, (void)len;
    return var_value(ex, TRACE_VAR_SAMPLED, out);
}

static const struct vars_module_var trace_vars[] = {
    {.name = "otel_trace_id", .get = var_trace_id},
    {.name = "otel_span_id", .get = var_span_id},
    {.name = "otel_parent_id", .get = var_parent_id},
    {.name = "otel_parent_sampled", .get = var_parent_sampled},
    {.name = "trace_id", .get = var_trace_id},
    {.name = "span_id", .get = var_span_id},
    {.name = NULL},
};

static const struct http_phase_handler trace_phases[] = {
    {ROUTER_POST_READ, trace_start_phase},
    {ROUTER_FIND_LOCATION, trace_phase},
};

struct http_module trace_module = {
    .name = "trace",
    .conf =
        {
            .name = "trace",
            .directives = trace_directives,
            .size = sizeof(struct trace_conf),
            .merge = merge,
            .check = check,
            .free = conf_free,
        },
    .build = build,
    .slots = 1,
    .phases = trace_phases,
    .phase_count = 2,
    .filter = &trace_filter,
    .release = release,
    .vars = trace_vars,
};
