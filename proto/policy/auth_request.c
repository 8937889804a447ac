/*
 * auth_request.c: authentication by subrequest (auth_request.h): the
 * access phase handler that holds the request and asks, the answer when
 * the subrequest is over, auth_request_set, $upstream_http_NAME, and the
 * module's directives, struct per level and build.
 */
#include "proto/policy/auth_request.h"

#include "proto/http/hold.h"
#include "proto/http/module.h"
#include "proto/http/subrequest.h"
#include "proto/policy/add_header.h"
#include "proto/policy/satisfy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the phase reads for a location. */
struct auth_request_var {
    const struct vars_template *target; /* "$var" compiled: a user variable */
    const struct vars_template *value;
};

struct auth_request_loc {
    const char *uri;
    size_t uri_len;
    const struct auth_request_var *sets;
    size_t set_count;
};

/* An exchange's state, in the module's slot. */
struct auth_request_state {
    struct http_hold hold;
    struct subrequest *sr;            /* while it runs */
    const struct auth_request_loc *a; /* what it was asked for */
    unsigned status;                  /* the subrequest's, once over (0: none) */
    bool done;                        /* over: the walk came back to the phase */
    char *challenge;                  /* a 401's WWW-Authenticate line; NULL: none */
    size_t challenge_len;
    bool user_values; /* auth_request_set gave some: their slot to release */
    unsigned user_slot;
};

/* ----------------------------------------------------------- per request */

static void state_free(struct auth_request_state *st)
{
    subrequest_free(st->sr);
    st->sr = NULL;
    free(st->challenge);
    st->challenge = NULL;
}

/* The held request cannot wait on (hold.h): answered as the router
 * answers, with the location's add_header lines. */
static void give_up(struct exchange *ex, unsigned status)
{
    struct auth_request_state *st = exchange_ctx(ex, auth_request_module.slot);
    if (st != NULL)
        state_free(st);
    add_header_respond_error(ex, NULL, ex->loc->add_headers, status);
}

/* auth_request_set, in the subrequest's context, for the exchange. */
static void set_values(struct exchange *ex, struct auth_request_state *st)
{
    struct exchange *sub = subrequest_exchange(st->sr);
    for (size_t i = 0; i < st->a->set_count; i++) {
        const struct auth_request_var *v = &st->a->sets[i];
        char small[256];
        struct vars_buf value;
        vars_buf_init(&value, small, sizeof(small));
        struct vars_ctx ctx = {.ex = sub, .req = &st->hold.req, .escape = VARS_RAW};
        vars_eval(v->value, &ctx, &value);
        if (!value.failed &&
            vars_template_assign(ex, v->target, value.data, value.len, &st->user_slot))
            st->user_values = true;
        vars_buf_free(&value);
    }
}

/* A 401's WWW-Authenticate goes to the client, as nginx passes it. */
static void keep_challenge(struct auth_request_state *st)
{
    struct http_str value;
    if (st->status != 401 || !subrequest_header(st->sr, "www_authenticate", 16, &value))
        return;
    static const char name[] = "WWW-Authenticate: ";
    size_t len = sizeof(name) - 1 + value.len + 2;
    st->challenge = malloc(len + 1);
    if (st->challenge == NULL)
        return;
    snprintf(st->challenge, len + 1, "%s%.*s\r\n", name, (int)value.len, value.data);
    st->challenge_len = len;
}

static int auth_request_phase(struct router_walk *w);

static void on_done(struct subrequest *sr, void *arg)
{
    struct exchange *ex = arg;
    struct auth_request_state *st = exchange_ctx(ex, auth_request_module.slot);
    st->status = subrequest_status(sr);
    set_values(ex, st);
    keep_challenge(st);
    subrequest_free(sr);
    st->sr = NULL;
    st->done = true;
    if (!hold_resume(&st->hold, ex, auth_request_phase, ROUTER_ACCESS)) {
        state_free(st); /* the exchange ended meanwhile: release() left it */
        free(st);
    }
}

/* The verdict once the subrequest is over. */
static int verdict(struct router_walk *w, struct auth_request_state *st)
{
    struct exchange *ex = w->ex;
    if (st->status >= 200 && st->status < 300)
        return satisfy_any(ex) ? ROUTER_NEXT : ROUTER_DECLINED; /* satisfy.h */
    if (st->status == 403)
        return 403;
    if (st->status != 401)
        return 500;
    if (st->challenge == NULL)
        return 401;
    static const char body[] = "401 Unauthorized\n";
    char small[512];
    struct vars_buf headers;
    vars_buf_init(&headers, small, sizeof(small));
    vars_buf_add(&headers, st->challenge, st->challenge_len);
    vars_buf_add(&headers, "Content-Type: text/plain\r\n", 27); /* with its NUL: a string */
    if (headers.failed) {
        vars_buf_free(&headers);
        return 500;
    }
    router_routed(w);
    exchange_respond(ex, 401, headers.data, body, sizeof(body) - 1);
    vars_buf_free(&headers);
    return ROUTER_DONE;
}

static int auth_request_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct auth_request_loc *a =
        ex->loc != NULL ? http_module_built_in(ex->loc->modules, &auth_request_module) : NULL;
    if (a == NULL)
        return ROUTER_DECLINED;
    struct auth_request_state *st = exchange_ctx(ex, auth_request_module.slot);
    if (st != NULL && st->done && st->a == a)
        return verdict(w, st);
    if (st == NULL) {
        st = calloc(1, sizeof(*st));
        if (st == NULL)
            return 500;
        exchange_set_ctx(ex, auth_request_module.slot, st);
    }
    /* A first ask, or another location's (after a redirect). */
    state_free(st);
    st->a = a;
    st->done = false;
    st->status = 0;
    int held = hold_begin(&st->hold, w, give_up);
    if (held != ROUTER_DONE)
        return held;
    st->sr = subrequest_start(ex, &st->hold.req, a->uri, a->uri_len, 0, on_done, ex);
    if (st->sr == NULL) {
        hold_release(&st->hold);
        return 500;
    }
    return ROUTER_DONE;
}

/* The state lasts the exchange: an internal redirect to another location
 * asks again (auth_request_phase()); the values auth_request_set gave stay
 * as `set`'s do. */
static void release(struct exchange *ex)
{
    struct auth_request_state *st = exchange_ctx(ex, auth_request_module.slot);
    if (st == NULL)
        return;
    exchange_set_ctx(ex, auth_request_module.slot, NULL);
    if (st->user_values)
        vars_user_release(ex, st->user_slot);
    state_free(st);
    if (hold_release(&st->hold))
        free(st); /* else on_done() frees it once the walk is back */
}

/* $upstream_http_NAME: a field of the subrequest's response, read where
 * auth_request_set evaluates (empty elsewhere). */
static bool upstream_http(const struct exchange *ex, const char *suffix, size_t len,
                          struct http_str *out)
{
    const struct subrequest *sr = subrequest_of(ex);
    return sr != NULL && subrequest_header(sr, suffix, len, out);
}

/* ------------------------------------------------------- configuration */

/* auth_request URI | off; */
static int apply_auth_request(void *conf, const struct conf_arg *args, size_t count,
                              struct conf_module_error *error)
{
    (void)count;
    struct auth_request_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    c->uri_pos = arg->pos;
    if (strcmp(arg->text, "off") == 0)
        return 0;
    if (conf_arg_uri(arg, error) != 0)
        return -1;
    c->uri = strdup(arg->text);
    return c->uri != NULL ? 0 : conf_module_fail(error, &arg->pos, "%s", "out of memory");
}

/* auth_request_set $variable value; */
static int apply_set(void *conf, const struct conf_arg *args, size_t count,
                     struct conf_module_error *error)
{
    (void)count;
    struct auth_request_conf *c = conf;
    const char *name = args[0].text;
    if (name[0] != '$' || name[1] == '\0')
        return conf_module_fail(error, &args[0].pos, "invalid variable name \"%s\"", name);
    for (const char *p = name + 1; *p != '\0'; p++)
        if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9')))
            return conf_module_fail(error, &args[0].pos, "invalid variable name \"%s\"", name);
    if (vars_name_is_builtin(name + 1, strlen(name + 1)))
        return conf_module_fail(error, &args[0].pos, "\"%s\" is a built-in variable", name);
    struct auth_request_set_line *grown = realloc(c->sets, (c->set_count + 1) * sizeof(*c->sets));
    if (grown == NULL)
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    c->sets = grown;
    struct auth_request_set_line *line = &c->sets[c->set_count];
    *line = (struct auth_request_set_line){strdup(name), strdup(args[1].text), args[0].pos,
                                           args[1].pos};
    if (line->name == NULL || line->value == NULL) {
        free(line->name);
        free(line->value);
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    }
    c->set_count++;
    return 0;
}

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct auth_request_conf *c = conf;
    const struct auth_request_conf *p = parent;
    if (p == NULL)
        return 0;
    if (c->uri_pos.file == NULL && p->uri_pos.file != NULL) {
        c->uri_pos = p->uri_pos;
        c->uri = p->uri;
        c->inherited_uri = true;
    }
    if (c->set_count == 0 && p->set_count > 0) {
        c->sets = p->sets;
        c->set_count = p->set_count;
        c->inherited_sets = true;
    }
    return 0;
}

static void conf_free(void *conf)
{
    struct auth_request_conf *c = conf;
    if (!c->inherited_uri)
        free(c->uri);
    if (!c->inherited_sets) {
        for (size_t i = 0; i < c->set_count; i++) {
            free(c->sets[i].name);
            free(c->sets[i].value);
        }
        free(c->sets);
    }
}

/* The variables auth_request_set defines, as `set` does. */
static void variables(const void *conf,
                      void (*fn)(void *arg, const char *name, const struct conf_pos *pos),
                      void *arg)
{
    const struct auth_request_conf *c = conf;
    if (c->inherited_sets)
        return; /* its parent's level names them */
    for (size_t i = 0; i < c->set_count; i++)
        fn(arg, c->sets[i].name + 1, &c->sets[i].name_pos);
}

static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct auth_request_conf *c = conf;
    *out = NULL;
    if (b->loc == NULL || c->uri == NULL)
        return 0;
    struct auth_request_loc *a = b->calloc(b->arena, 1, sizeof(*a));
    struct auth_request_var *sets =
        b->calloc(b->arena, c->set_count > 0 ? c->set_count : 1, sizeof(*sets));
    if (a == NULL || sets == NULL)
        return -ENOMEM;
    a->uri = c->uri;
    a->uri_len = strlen(c->uri);
    for (size_t i = 0; i < c->set_count; i++) {
        const struct auth_request_set_line *line = &c->sets[i];
        int err =
            b->compile(b->arena, line->name, &line->name_pos, "auth_request_set", &sets[i].target);
        if (err == 0)
            err = b->compile_with(b->arena, line->value, &line->value_pos, "auth_request_set", NULL,
                                  true, &sets[i].value);
        if (err != 0)
            return err;
    }
    a->sets = sets;
    a->set_count = c->set_count;
    *out = a;
    return 0;
}

#define AUTH_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

static const struct conf_directive auth_request_directives[] = {
    {.name = "auth_request",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_auth_request},
    {.name = "auth_request_set",
     .contexts = AUTH_CONTEXTS,
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_set},
    {.name = NULL},
};

static const struct http_phase_handler auth_request_phases[] = {
    {ROUTER_ACCESS, auth_request_phase},
};

static const struct vars_module_var auth_request_vars[] = {
    {.name = "upstream_http_", .prefix = true, .get = upstream_http},
    {.name = NULL},
};

struct http_module auth_request_module = {
    .name = "auth_request",
    .conf =
        {
            .name = "auth_request",
            .directives = auth_request_directives,
            .size = sizeof(struct auth_request_conf),
            .merge = merge,
            .free = conf_free,
        },
    .build = build,
    .phases = auth_request_phases,
    .phase_count = 1,
    .slots = 1,
    .release = release,
    .variables = variables,
    .vars = auth_request_vars,
};
