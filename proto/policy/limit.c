/*
 * limit.c: the limits phase of the router (router.h), for a location with
 * limit_req or limit_conn: refuses, delays on a loop timer (the request
 * kept, its body held) and then goes on with the walk, or counts the
 * exchange in.  Its directives, its struct per level and its build are
 * the module's too; the zones they name are the config's top level's.
 */
#include "proto/policy/limit.h"
#include "proto/policy/add_header.h"
#include "proto/http/hold.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/vars.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct limit_hold {
    struct limit_zone *zone;
    struct limit_node *node;
};

struct limit_exchange {
    const struct limit_location *loc;
    /* While a delayed request waits: its timer and the held walk. */
    corral_timer *timer;
    struct http_hold hold;
    bool req_checked; /* limit_req passed it (after its delay) */
    size_t hold_count;
    struct limit_hold holds[];
};

size_t limit_key(struct exchange *ex, const struct http_request *req, const struct vars_template *t,
                 char *buf)
{
    struct vars_ctx ctx = {.ex = ex, .req = req, .escape = VARS_RAW};
    size_t len = vars_eval_into(t, &ctx, buf, LIMIT_KEY_MAX);
    return len == 0 || len > LIMIT_KEY_MAX ? SIZE_MAX : len;
}

static struct limit_exchange *state_of(struct exchange *ex, const struct limit_location *loc)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le == NULL) {
        le = calloc(1, sizeof(*le) + loc->conn_count * sizeof(struct limit_hold));
        if (le != NULL)
            le->loc = loc;
        exchange_set_ctx(ex, limit_module.slot, le);
    }
    return le;
}

static void release_holds(struct limit_exchange *le)
{
    for (size_t i = 0; i < le->hold_count; i++)
        limit_zone_conn_end(le->holds[i].zone, le->holds[i].node);
    le->hold_count = 0;
}

/* limit_conn: on to the next phase, or a refusal. */
static int count_in(struct router_walk *w, const struct limit_location *loc)
{
    struct exchange *ex = w->ex;
    char key[LIMIT_KEY_MAX];
    for (size_t i = 0; i < loc->conn_count; i++) {
        const struct limit_conn *c = &loc->conns[i];
        size_t len = limit_key(ex, &w->req, c->key, key);
        if (len == SIZE_MAX)
            continue;
        struct limit_exchange *le = state_of(ex, loc);
        if (le == NULL)
            return 500;
        struct limit_node *node = limit_zone_conn(c->zone, key, len, c->max);
        if (node == NULL) {
            release_holds(le);
            return (int)loc->conn_status;
        }
        le->holds[le->hold_count++] = (struct limit_hold){c->zone, node};
    }
    return ROUTER_NEXT;
}

static void stop_timer(struct limit_exchange *le)
{
    if (le->timer != NULL)
        corral_timer_free(le->timer);
    le->timer = NULL;
}

static void on_waited(corral_timer *timer, void *arg)
{
    (void)timer;
    struct exchange *ex = arg;
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    stop_timer(le); /* safe inside its own callback */
    if (!hold_resume(&le->hold, ex, limit_phase, ROUTER_LIMITS))
        free(le); /* limit_release() came meanwhile */
}

/* A waiting request that cannot wait on: answered with `status`. */
static void give_up(struct exchange *ex, unsigned status)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le != NULL)
        stop_timer(le);
    add_header_respond_error(ex, NULL, ex->loc->add_headers, status);
}

/* Holds the request for `ms`: a timer on the exchange's loop, the walk
 * held (hold.h). */
static int wait_for(struct router_walk *w, const struct limit_location *loc, uint64_t ms)
{
    struct exchange *ex = w->ex;
    struct limit_exchange *le = state_of(ex, loc);
    if (le == NULL || corral_timer_new(exchange_loop(ex), on_waited, ex, &le->timer) != 0)
        return 500;
    int verdict = hold_begin(&le->hold, w, give_up);
    if (verdict != ROUTER_DONE) {
        stop_timer(le);
        return verdict;
    }
    le->req_checked = true;
    corral_timer_start(le->timer, ms);
    return ROUTER_DONE;
}

int limit_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct limit_location *loc =
        ex->loc != NULL ? http_module_built_in(ex->loc->modules, &limit_module) : NULL;
    if (loc == NULL || ex->loc->handler == NULL)
        return ROUTER_NEXT;
    const struct limit_exchange *held = exchange_ctx(ex, limit_module.slot);
    if (held != NULL && held->req_checked)
        return count_in(w, loc); /* back from its delay */
    uint64_t now_ms = corral_monotonic_ns() / 1000000;
    int64_t delay = 0;
    char key[LIMIT_KEY_MAX];
    for (size_t i = 0; i < loc->req_count; i++) {
        const struct limit_req *r = &loc->reqs[i];
        size_t len = limit_key(ex, &w->req, r->key, key);
        if (len == SIZE_MAX)
            continue;
        int64_t ms = limit_zone_req(r->zone, key, len, now_ms, r->rate, r->burst, r->delay);
        if (ms < 0)
            return (int)loc->req_status;
        if (ms > delay)
            delay = ms;
    }
    if (delay > 0)
        return wait_for(w, loc, (uint64_t)delay);
    return count_in(w, loc);
}

void limit_release(struct exchange *ex)
{
    struct limit_exchange *le = exchange_ctx(ex, limit_module.slot);
    if (le == NULL)
        return;
    exchange_set_ctx(ex, limit_module.slot, NULL);
    release_holds(le);
    stop_timer(le);
    if (hold_release(&le->hold))
        free(le); /* else on_waited() frees it once the walk is back */
}

/* ------------------------------------------------------- configuration */

#define BURST_MAX 1000000u

/* Adds `limit` to `list`, refusing a zone it names already (at `at`,
 * where its name is written); `limit`'s name is the list's, or freed. */
static int add_limit(struct limit_line **list, size_t *count, struct limit_line *limit,
                     const struct conf_pos *at, struct conf_module_error *error)
{
    for (size_t i = 0; i < *count; i++)
        if (strcmp((*list)[i].zone_name, limit->zone_name) == 0) {
            conf_module_fail(error, at, "zone \"%s\" is limited twice in this block",
                             limit->zone_name);
            goto fail;
        }
    struct limit_line *grown = realloc(*list, (*count + 1) * sizeof(**list));
    if (grown == NULL) {
        conf_module_fail(error, at, "%s", "out of memory");
        goto fail;
    }
    *list = grown;
    grown[(*count)++] = *limit;
    return 0;
fail:
    free(limit->zone_name);
    return -1;
}

/* limit_req zone=NAME [burst=N] [nodelay | delay=N]; */
static int apply_limit_req(void *conf, const struct conf_arg *args, size_t count,
                           struct conf_module_error *error)
{
    struct limit_conf *c = conf;
    struct limit_line limit = {0};
    bool has_delay = false;
    const struct conf_arg *zone_arg = NULL;
    for (size_t i = 0; i < count; i++) {
        const struct conf_arg *arg = &args[i];
        size_t eq = strcspn(arg->text, "=");
        struct conf_arg value = conf_arg_tail(arg, arg->text[eq] == '=' ? eq + 1 : eq);
        int rc = 0;
        if (conf_has_prefix(arg->text, "zone=") && zone_arg == NULL) {
            zone_arg = arg;
            if (!limit_zone_name_valid(value.text, strlen(value.text)))
                rc = conf_module_fail(error, &arg->pos, "invalid zone name in \"%s\"", arg->text);
        } else if (conf_has_prefix(arg->text, "burst=")) {
            rc = conf_arg_uint(&value, "burst", 0, BURST_MAX, &limit.burst, error);
        } else if (conf_has_prefix(arg->text, "delay=") && !has_delay) {
            has_delay = true;
            rc = conf_arg_uint(&value, "delay", 0, BURST_MAX, &limit.delay, error);
        } else if (strcmp(arg->text, "nodelay") == 0 && !has_delay) {
            has_delay = true;
            limit.nodelay = true;
        } else {
            rc = conf_module_fail(error, &arg->pos, "invalid parameter \"%s\"", arg->text);
        }
        if (rc != 0)
            return conf_module_fail_kept(error, &value); /* `value` goes with this frame */
    }
    if (zone_arg == NULL)
        return conf_module_fail(error, NULL, "%s", "\"limit_req\" needs zone=NAME");
    limit.pos = zone_arg->pos;
    limit.zone_name = strdup(zone_arg->text + 5);
    if (limit.zone_name == NULL)
        return conf_module_fail(error, &zone_arg->pos, "%s", "out of memory");
    return add_limit(&c->reqs, &c->req_count, &limit, &zone_arg->pos, error);
}

/* limit_conn NAME N; */
static int apply_limit_conn(void *conf, const struct conf_arg *args, size_t count,
                            struct conf_module_error *error)
{
    (void)count;
    struct limit_conf *c = conf;
    struct limit_line limit = {.pos = args[0].pos};
    if (conf_arg_uint(&args[1], "\"limit_conn\"", 1, 65535, &limit.max, error) != 0)
        return -1;
    limit.zone_name = strdup(args[0].text);
    if (limit.zone_name == NULL)
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    return add_limit(&c->conns, &c->conn_count, &limit, &args[0].pos, error);
}

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct limit_conf *c = conf;
    const struct limit_conf *p = parent;
    if (p == NULL) { /* the top level: the defaults */
        if (c->req_status == 0)
            c->req_status = 503;
        if (c->conn_status == 0)
            c->conn_status = 503;
        return 0;
    }
    if (c->req_count == 0 && p->req_count > 0) {
        c->reqs = p->reqs;
        c->req_count = p->req_count;
        c->inherited_reqs = true;
    }
    if (c->conn_count == 0 && p->conn_count > 0) {
        c->conns = p->conns;
        c->conn_count = p->conn_count;
        c->inherited_conns = true;
    }
    if (c->req_status == 0)
        c->req_status = p->req_status;
    if (c->conn_status == 0)
        c->conn_status = p->conn_status;
    return 0;
}

static void lines_free(struct limit_line *lines, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(lines[i].zone_name);
    free(lines);
}

static void conf_free(void *conf)
{
    struct limit_conf *c = conf;
    if (!c->inherited_reqs)
        lines_free(c->reqs, c->req_count);
    if (!c->inherited_conns)
        lines_free(c->conns, c->conn_count);
}

/* A location's limits with their zones (the phase reads a location's
 * only); none: nothing. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct limit_conf *c = conf;
    *out = NULL;
    if (b->loc == NULL || (c->req_count == 0 && c->conn_count == 0))
        return 0;
    struct limit_location *ll = b->calloc(b->arena, 1, sizeof(*ll));
    struct limit_req *reqs = b->calloc(b->arena, c->req_count + 1, sizeof(*reqs));
    struct limit_conn *conns = b->calloc(b->arena, c->conn_count + 1, sizeof(*conns));
    if (ll == NULL || reqs == NULL || conns == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < c->req_count; i++) {
        const struct limit_line *r = &c->reqs[i];
        struct limit_req *req = &reqs[i];
        int err = b->limit_zone(b->arena, r->zone_name, &req->zone, &req->key, &req->rate);
        if (err != 0)
            return err; /* conf/ checked: never */
        req->burst = (uint64_t)r->burst * 1000;
        req->delay = r->nodelay ? UINT64_MAX : (uint64_t)r->delay * 1000;
    }
    for (size_t i = 0; i < c->conn_count; i++) {
        const struct limit_line *n = &c->conns[i];
        uint64_t rate;
        int err = b->limit_zone(b->arena, n->zone_name, &conns[i].zone, &conns[i].key, &rate);
        if (err != 0)
            return err;
        conns[i].max = n->max;
    }
    *ll = (struct limit_location){.reqs = reqs,
                                  .req_count = c->req_count,
                                  .conns = conns,
                                  .conn_count = c->conn_count,
                                  .req_status = c->req_status,
                                  .conn_status = c->conn_status};
    *out = ll;
    return 0;
}

#define LIMIT_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

/* limit_req_zone and limit_conn_zone are conf/'s (limit_directives.c):
 * top level only, and the process's. */
static const struct conf_directive limit_directives[] = {
    {.name = "limit_req",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 1,
     .max_args = 3,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_limit_req},
    {.name = "limit_conn",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_limit_conn},
    /* 400 to 599, as nginx */
    {.name = "limit_req_status",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_COUNT,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct limit_conf, req_status),
     .min = 400,
     .max = 599},
    {.name = "limit_conn_status",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_COUNT,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct limit_conf, conn_status),
     .min = 400,
     .max = 599},
    {.name = NULL},
};

static const struct http_phase_handler limit_phases[] = {
    {ROUTER_LIMITS, limit_phase},
};

struct http_module limit_module = {
    .name = "limit",
    .conf =
        {
            .name = "limit",
            .directives = limit_directives,
            .size = sizeof(struct limit_conf),
            .merge = merge,
            .free = conf_free,
        },
    .build = build,
    .phases = limit_phases,
    .phase_count = 1,
    .slots = 1,
    .release = limit_release,
    .release_on_redirect = true,
};
