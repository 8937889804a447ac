/*
 * runtime_limit.c: a generation's limit zones, taken from the process's
 * (so that a reload keeps their state), found by name for the limit
 * module's build step, and the zones' metrics.
 */
#include "cmd/runtime_limit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct runtime_limits {
    struct limit_zone **zones; /* by index in conf_config.limit_zones */
    const struct vars_template **keys;
    const struct conf_config *config;
    size_t count;
};

int runtime_limits_new(struct runtime_vars *vars, const struct conf_config *config,
                       struct runtime_limits **out)
{
    struct runtime_limits *limits = calloc(1, sizeof(*limits));
    *out = limits;
    if (limits == NULL)
        return -ENOMEM;
    limits->config = config;
    size_t n = config->limit_zone_count;
    limits->zones = calloc(n ? n : 1, sizeof(*limits->zones));
    limits->keys = calloc(n ? n : 1, sizeof(*limits->keys));
    if (limits->zones == NULL || limits->keys == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct conf_limit_zone *zone = &config->limit_zones[i];
        const char *directive = zone->conn ? "limit_conn_zone" : "limit_req_zone";
        int err =
            runtime_vars_compile_any(vars, zone->key, &zone->key_pos, directive, &limits->keys[i]);
        if (err != 0)
            return err;
        err = limit_zone_get(zone->name, zone->conn ? LIMIT_ZONE_CONN : LIMIT_ZONE_REQ, zone->size,
                             &limits->zones[i]);
        if (err != 0)
            return err;
        limits->count = i + 1;
    }
    return 0;
}

void runtime_limits_free(struct runtime_limits *limits)
{
    if (limits == NULL)
        return;
    for (size_t i = 0; i < limits->count; i++)
        limit_zone_put(limits->zones[i]);
    free(limits->zones);
    free(limits->keys);
    free(limits);
}

int runtime_limits_find(const struct runtime_limits *limits, const char *name,
                        struct limit_zone **zone, const struct vars_template **key, uint64_t *rate)
{
    const struct conf_limit_zone *zones = limits->config->limit_zones;
    for (size_t i = 0; i < limits->count; i++) {
        if (strcmp(zones[i].name, name) != 0)
            continue;
        *zone = limits->zones[i];
        *key = limits->keys[i];
        *rate = zones[i].rate;
        return 0;
    }
    return -ENOENT;
}

/* ----------------------------------------------------------------- metrics */

struct metrics_pass {
    struct text *t;
    enum limit_zone_kind kind;
};

/* Zone names are letters, digits, '_' and '-' (the config checks): no
 * escaping in the label. */
static void write_zone(const char *name, enum limit_zone_kind kind,
                       const struct limit_zone_counts *counts, void *arg)
{
    const struct metrics_pass *pass = arg;
    if (kind != pass->kind)
        return;
    const char *metric = kind == LIMIT_ZONE_REQ ? "corral_limit_req_requests_total"
                                                : "corral_limit_conn_requests_total";
    text_printf(pass->t, "%s{zone=\"%s\",result=\"passed\"} %llu\n", metric, name,
                (unsigned long long)counts->passed);
    if (kind == LIMIT_ZONE_REQ)
        text_printf(pass->t, "%s{zone=\"%s\",result=\"delayed\"} %llu\n", metric, name,
                    (unsigned long long)counts->delayed);
    text_printf(pass->t, "%s{zone=\"%s\",result=\"rejected\"} %llu\n", metric, name,
                (unsigned long long)counts->rejected);
}

void runtime_limits_metrics(struct text *t)
{
    text_printf(t, "# HELP corral_limit_req_requests_total Requests checked against each "
                   "limit_req zone: passed at once, delayed, or rejected.\n"
                   "# TYPE corral_limit_req_requests_total counter\n");
    struct metrics_pass pass = {t, LIMIT_ZONE_REQ};
    limit_zone_each(write_zone, &pass);
    text_printf(t, "# HELP corral_limit_conn_requests_total Requests checked against each "
                   "limit_conn zone: passed, or rejected at the limit.\n"
                   "# TYPE corral_limit_conn_requests_total counter\n");
    pass.kind = LIMIT_ZONE_CONN;
    limit_zone_each(write_zone, &pass);
}
