/*
 * server_timing.c: the Server-Timing module (server_timing.h), all of it:
 * its directive, its struct per level and how a level inherits it, the
 * phase handler that turns its filter on where a location (or its
 * server) says so, and the header filter that adds the line.
 */
#include "proto/policy/server_timing.h"

#include "proto/http/module.h"

#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------- configuration */

static const struct conf_directive server_timing_directives[] = {
    {.name = "server_timing",
     .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct server_timing_conf, on),
     .keep_pos = true,
     .pos_offset = offsetof(struct server_timing_conf, pos)},
    {.name = NULL},
};

/* A level that does not write server_timing takes its parent's; the top
 * level's default is off (the struct starts zeroed). */
static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct server_timing_conf *c = conf;
    const struct server_timing_conf *p = parent;
    if (c->pos.file == NULL && p != NULL)
        c->on = p->on;
    return 0;
}

/* Where it is off there is nothing to do: a site where it is on nowhere
 * leaves the module out of its steps. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    (void)b;
    *out = ((const struct server_timing_conf *)conf)->on ? conf : NULL;
    return 0;
}

/* ----------------------------------------------------------- per request */

/* The filter's header line: how long since the walk reached the module
 * (its slot holds that monotonic time, in ns), and the upstream's time to
 * its head when a proxied response is on its way. */
static void begin_timed(struct exchange *ex, const struct exchange_filter *self,
                        const struct exchange_head *head)
{
    uint64_t start = (uint64_t)(uintptr_t)exchange_ctx(ex, server_timing_module.slot);
    if (head->status < 200 || start == 0) { /* interim: the final head gets it */
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    uint64_t us = (corral_monotonic_ns() - start) / 1000;
    char line[128];
    int n = snprintf(line, sizeof(line), "Server-Timing: total;dur=%llu.%03llu",
                     (unsigned long long)(us / 1000), (unsigned long long)(us % 1000));
    const struct exchange_upstream_try *last =
        ex->upstream_try_count > 0 ? &ex->upstream_tries[ex->upstream_try_count - 1] : NULL;
    if (last != NULL && last->status != 0 && last->header_ms != EXCHANGE_UPSTREAM_UNKNOWN)
        n += snprintf(line + n, sizeof(line) - (size_t)n, ", upstream;dur=%llu",
                      (unsigned long long)last->header_ms);
    n += snprintf(line + n, sizeof(line) - (size_t)n, "\r\n");
    /* Two 20-digit numbers and the words fit in 128 bytes. */
    _Static_assert(sizeof("Server-Timing: total;dur=.000, upstream;dur=\r\n") + 3 * 20 < 128,
                   "the line's buffer");
    char small[1024];
    struct vars_buf lines;
    vars_buf_init(&lines, small, sizeof(small));
    vars_buf_add(&lines, head->headers, head->headers_len);
    vars_buf_add(&lines, line, (size_t)n);
    if (lines.failed) { /* out of memory: the head as it was */
        exchange_filter_begin_next(ex, self, head);
    } else {
        struct exchange_head timed = *head;
        timed.headers = lines.data;
        timed.headers_len = lines.len;
        exchange_filter_begin_next(ex, self, &timed);
    }
    vars_buf_free(&lines);
}

static struct exchange_filter server_timing_filter = {
    .name = "server_timing",
    .begin = begin_timed,
};

/* Once the location is known (or known to be none): the filter is on
 * where it says server_timing on, and the clock starts at the first walk
 * that turns it on (an internal redirect keeps it). */
static int server_timing_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct server_timing_conf *conf = http_module_built(ex, &server_timing_module);
    if (conf == NULL || !conf->on) {
        exchange_remove_filter(ex, &server_timing_filter);
        return ROUTER_DECLINED;
    }
    if (exchange_ctx(ex, server_timing_module.slot) == NULL)
        exchange_set_ctx(ex, server_timing_module.slot, (void *)(uintptr_t)corral_monotonic_ns());
    exchange_add_filter(ex, &server_timing_filter);
    return ROUTER_DECLINED;
}

static const struct http_phase_handler server_timing_phases[] = {
    {ROUTER_FIND_LOCATION, server_timing_phase},
};

struct http_module server_timing_module = {
    .name = "server_timing",
    .conf =
        {
            .name = "server_timing",
            .directives = server_timing_directives,
            .size = sizeof(struct server_timing_conf),
            .merge = merge,
        },
    .build = build,
    .slots = 1,
    .phases = server_timing_phases,
    .phase_count = 1,
    .filter = &server_timing_filter,
};
