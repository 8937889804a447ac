/*
 * limit_directives.c: rate and connection limits as nginx spells them:
 * limit_req_zone and limit_conn_zone at the top level; limit_req,
 * limit_conn and their _status at the top level, in a server and in a
 * location, each block inheriting what it does not set.
 */
#include "registry.h"

#include "proto/policy/limit.h" /* LIMIT_ZONE_MIN_SIZE */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RATE_MAX  1000000u /* requests a second or a minute */
#define BURST_MAX 1000000u

static struct conf_limits *block_limits(struct conf_state *state)
{
    if (state->location != NULL)
        return &state->location->limits;
    if (state->server != NULL)
        return &state->server->limits;
    return &state->config->limits;
}

/* The part of `arg` from byte `offset` on, with its position. */
static struct conf_arg sub_arg(const struct conf_arg *arg, size_t offset)
{
    struct conf_arg sub = {.text = arg->text + offset, .pos = arg->pos};
    sub.pos.col += (unsigned)offset;
    return sub;
}

static bool has_prefix(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

static bool valid_zone_name(const char *name, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* zone=NAME:SIZE */
static int arg_zone(struct conf_state *state, const struct conf_arg *arg,
                    struct conf_limit_zone *zone)
{
    const char *spec = arg->text + 5;
    const char *colon = strchr(spec, ':');
    if (colon == NULL)
        return conf__error_at(state->error, &arg->pos,
                              "invalid zone \"%s\" (expected zone=NAME:SIZE)", arg->text);
    size_t name_len = (size_t)(colon - spec);
    if (!valid_zone_name(spec, name_len))
        return conf__error_at(state->error, &arg->pos,
                              "invalid zone name in \"%s\" (letters, digits, \"_\" and \"-\")",
                              arg->text);
    for (size_t i = 0; i < state->config->limit_zone_count; i++) {
        const struct conf_limit_zone *other = &state->config->limit_zones[i];
        if (strlen(other->name) == name_len && memcmp(other->name, spec, name_len) == 0) {
            char where[300];
            return conf__error_at(state->error, &arg->pos, "zone \"%s\" is already declared (%s)",
                                  other->name,
                                  conf__where(where, sizeof(where), &arg->pos, &other->pos));
        }
    }
    struct conf_arg size = sub_arg(arg, 5 + name_len + 1);
    if (conf__arg_size(state, &size, &zone->size) != 0)
        return -1;
    if (zone->size < LIMIT_ZONE_MIN_SIZE)
        return conf__error_at(state->error, &size.pos, "zone \"%.*s\" is too small (at least %uk)",
                              (int)name_len, spec, LIMIT_ZONE_MIN_SIZE / 1024);
    /* A zone fills up to its size under a flood of new keys: more than the
     * machine has would end in the kernel's OOM killer, not in evictions.
     * The zones together are bounded the same way. */
    uint64_t memory = conf__physical_memory(), total = zone->size;
    for (size_t i = 0; i < state->config->limit_zone_count; i++)
        total += state->config->limit_zones[i].size;
    if (zone->size > memory)
        return conf__error_at(state->error, &size.pos,
                              "zone \"%.*s\" of %s is larger than this machine's memory "
                              "(%" PRIu64 "k)",
                              (int)name_len, spec, size.text, memory / 1024);
    if (total > memory)
        return conf__error_at(state->error, &size.pos,
                              "zones of %" PRIu64 "k in all are more than this machine's memory "
                              "(%" PRIu64 "k)",
                              total / 1024, memory / 1024);
    zone->name = strndup(spec, name_len);
    if (zone->name == NULL)
        return conf__error_at(state->error, &arg->pos, "out of memory");
    return 0;
}

/* rate=Nr/s or rate=Nr/m, in milli-requests a second. */
static int arg_rate(struct conf_state *state, const struct conf_arg *arg, uint64_t *out)
{
    const char *p = arg->text + 5;
    uint64_t n = 0;
    const char *digits = p;
    while (*p >= '0' && *p <= '9' && n <= RATE_MAX)
        n = n * 10 + (uint64_t)(*p++ - '0');
    unsigned per;
    if (strcmp(p, "r/s") == 0)
        per = 1;
    else if (strcmp(p, "r/m") == 0)
        per = 60;
    else
        return conf__error_at(state->error, &arg->pos,
                              "invalid rate \"%s\" (expected rate=Nr/s or rate=Nr/m)", arg->text);
    if (p == digits || n == 0 || n > RATE_MAX)
        return conf__error_at(state->error, &arg->pos, "rate must be from 1 to %u, got \"%s\"",
                              RATE_MAX, arg->text);
    *out = n * 1000 / per;
    if (*out == 0)
        *out = 1;
    return 0;
}

/* limit_req_zone KEY zone=NAME:SIZE rate=RATE; limit_conn_zone KEY zone=NAME:SIZE; */
static int apply_zone(struct conf_state *state, const struct conf_node *node,
                      const struct conf_directive *directive)
{
    struct conf_limit_zone zone = {.conn = strcmp(directive->name, "limit_conn_zone") == 0,
                                   .pos = node->name.pos};
    bool has_zone = false, has_rate = false;
    const struct conf_arg *key = NULL;
    int rc = 0;
    for (size_t i = 0; i < node->arg_count && rc == 0; i++) {
        const struct conf_arg *arg = &node->args[i];
        if (has_prefix(arg->text, "zone=") && !has_zone) {
            has_zone = true;
            zone.pos = arg->pos;
            rc = arg_zone(state, arg, &zone);
        } else if (has_prefix(arg->text, "rate=") && !zone.conn && !has_rate) {
            has_rate = true;
            rc = arg_rate(state, arg, &zone.rate);
        } else if (key == NULL && strchr(arg->text, '=') == NULL && arg->text[0] != '\0') {
            key = arg;
        } else {
            rc = conf__error_at(state->error, &arg->pos, "invalid parameter \"%s\"", arg->text);
        }
    }
    if (rc == 0 && (!has_zone || key == NULL || (!zone.conn && !has_rate)))
        rc = conf__error_at(state->error, &node->name.pos, "\"%s\" needs %s", directive->name,
                            key == NULL ? "a key"
                            : !has_zone ? "zone=NAME:SIZE"
                                        : "rate=Nr/s or rate=Nr/m");
    if (rc == 0) {
        zone.key_pos = key->pos;
        zone.key = conf__strdup(state, &key->pos, key->text);
        rc = zone.key != NULL ? 0 : -1;
    }
    struct conf_config *config = state->config;
    struct conf_limit_zone *zones = NULL;
    if (rc == 0)
        zones = conf__grow(state, &node->name.pos, config->limit_zones, config->limit_zone_count,
                           sizeof(*zones));
    if (zones == NULL) {
        free(zone.name);
        free(zone.key);
        return -1;
    }
    config->limit_zones = zones;
    zones[config->limit_zone_count++] = zone;
    return 0;
}

/* Adds `limit` to `list`, refusing a zone it names already. */
static int add_limit(struct conf_state *state, const struct conf_node *node,
                     struct conf_limit **list, size_t *count, struct conf_limit *limit)
{
    for (size_t i = 0; i < *count; i++)
        if (strcmp((*list)[i].zone_name, limit->zone_name) == 0) {
            conf__error_at(state->error, &limit->pos, "zone \"%s\" is limited twice in this block",
                           limit->zone_name);
            goto fail;
        }
    struct conf_limit *grown = conf__grow(state, &node->name.pos, *list, *count, sizeof(**list));
    if (grown == NULL)
        goto fail;
    *list = grown;
    grown[(*count)++] = *limit;
    return 0;
fail:
    free(limit->zone_name);
    return -1;
}

/* limit_req zone=NAME [burst=N] [nodelay | delay=N]; */
static int apply_limit_req(struct conf_state *state, const struct conf_node *node,
                           const struct conf_directive *directive)
{
    (void)directive;
    struct conf_limit limit = {0};
    bool has_delay = false;
    const struct conf_arg *zone_arg = NULL;
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        size_t eq = strcspn(arg->text, "=");
        struct conf_arg value = sub_arg(arg, arg->text[eq] == '=' ? eq + 1 : eq);
        int rc = 0;
        if (has_prefix(arg->text, "zone=") && zone_arg == NULL) {
            zone_arg = arg;
            if (!valid_zone_name(value.text, strlen(value.text)))
                rc = conf__error_at(state->error, &arg->pos, "invalid zone name in \"%s\"",
                                    arg->text);
        } else if (has_prefix(arg->text, "burst=")) {
            rc = conf__arg_uint(state, &value, "burst", 0, BURST_MAX, &limit.burst);
        } else if (has_prefix(arg->text, "delay=") && !has_delay) {
            has_delay = true;
            rc = conf__arg_uint(state, &value, "delay", 0, BURST_MAX, &limit.delay);
        } else if (strcmp(arg->text, "nodelay") == 0 && !has_delay) {
            has_delay = true;
            limit.nodelay = true;
        } else {
            rc = conf__error_at(state->error, &arg->pos, "invalid parameter \"%s\"", arg->text);
        }
        if (rc != 0)
            return -1;
    }
    if (zone_arg == NULL)
        return conf__error_at(state->error, &node->name.pos, "\"limit_req\" needs zone=NAME");
    limit.pos = zone_arg->pos;
    limit.zone_name = conf__strdup(state, &zone_arg->pos, zone_arg->text + 5);
    if (limit.zone_name == NULL)
        return -1;
    struct conf_limits *limits = block_limits(state);
    return add_limit(state, node, &limits->reqs, &limits->req_count, &limit);
}

/* limit_conn NAME N; */
static int apply_limit_conn(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    (void)directive;
    struct conf_limit limit = {.pos = node->args[0].pos};
    if (conf__arg_uint(state, &node->args[1], "\"limit_conn\"", 1, 65535, &limit.max) != 0)
        return -1;
    limit.zone_name = conf__strdup(state, &node->args[0].pos, node->args[0].text);
    if (limit.zone_name == NULL)
        return -1;
    struct conf_limits *limits = block_limits(state);
    return add_limit(state, node, &limits->conns, &limits->conn_count, &limit);
}

/* limit_req_status CODE; limit_conn_status CODE; (400 to 599, as nginx) */
static int apply_status(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    struct conf_limits *limits = block_limits(state);
    bool req = strcmp(directive->name, "limit_req_status") == 0;
    char what[32];
    snprintf(what, sizeof(what), "\"%s\"", directive->name);
    return conf__arg_uint(state, &node->args[0], what, 400, 599,
                          req ? &limits->req_status : &limits->conn_status);
}

#define LIMIT_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

const struct conf_directive conf__limit_directives[] = {
    {.name = "limit_req_zone",
     .contexts = CONF_MAIN,
     .min_args = 3,
     .max_args = 3,
     .repeat = true,
     .apply = apply_zone},
    {.name = "limit_conn_zone",
     .contexts = CONF_MAIN,
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .apply = apply_zone},
    {.name = "limit_req",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 1,
     .max_args = 3,
     .repeat = true,
     .apply = apply_limit_req},
    {.name = "limit_conn",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .apply = apply_limit_conn},
    {.name = "limit_req_status",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .apply = apply_status},
    {.name = "limit_conn_status",
     .contexts = LIMIT_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .apply = apply_status},
    {.name = NULL},
};

/* ------------------------------------------------------------ finishing */

/* Each limit names a zone of its kind: its index goes in `zone`. */
static int resolve(struct conf_state *state, struct conf_limit *list, size_t count, bool conn)
{
    const struct conf_config *config = state->config;
    for (size_t i = 0; i < count; i++) {
        struct conf_limit *limit = &list[i];
        size_t z = 0;
        while (z < config->limit_zone_count &&
               strcmp(config->limit_zones[z].name, limit->zone_name) != 0)
            z++;
        if (z == config->limit_zone_count)
            return conf__error_at(state->error, &limit->pos, "unknown %s zone \"%s\"",
                                  conn ? "limit_conn" : "limit_req", limit->zone_name);
        if (config->limit_zones[z].conn != conn)
            return conf__error_at(state->error, &limit->pos, "zone \"%s\" is a %s, not a %s",
                                  limit->zone_name, conn ? "limit_req_zone" : "limit_conn_zone",
                                  conn ? "limit_conn_zone" : "limit_req_zone");
        limit->zone = z;
    }
    return 0;
}

static int resolve_block(struct conf_state *state, struct conf_limits *limits)
{
    if (resolve(state, limits->reqs, limits->req_count, false) != 0)
        return -1;
    return resolve(state, limits->conns, limits->conn_count, true);
}

/* A copy of `count` limits without their names (resolved already). */
static int copy_limits(struct conf_state *state, const struct conf_pos *pos,
                       struct conf_limit **out, size_t *out_count, const struct conf_limit *list,
                       size_t count)
{
    if (count == 0)
        return 0;
    *out = calloc(count, sizeof(**out));
    if (*out == NULL)
        return conf__error_at(state->error, pos, "out of memory");
    for (size_t i = 0; i < count; i++) {
        (*out)[i] = list[i];
        (*out)[i].zone_name = NULL;
    }
    *out_count = count;
    return 0;
}

static int inherit(struct conf_state *state, const struct conf_pos *pos, void *own,
                   const void *from)
{
    struct conf_limits *child = own;
    const struct conf_limits *parent = from;
    if (resolve_block(state, child) != 0)
        return -1;
    if (child->req_count == 0 && copy_limits(state, pos, &child->reqs, &child->req_count,
                                             parent->reqs, parent->req_count) != 0)
        return -1;
    if (child->conn_count == 0 && copy_limits(state, pos, &child->conns, &child->conn_count,
                                              parent->conns, parent->conn_count) != 0)
        return -1;
    if (child->req_status == 0)
        child->req_status = parent->req_status;
    if (child->conn_status == 0)
        child->conn_status = parent->conn_status;
    return 0;
}

int conf__limit_finish(struct conf_state *state)
{
    struct conf_config *config = state->config;
    if (resolve_block(state, &config->limits) != 0)
        return -1;
    if (config->limits.req_status == 0)
        config->limits.req_status = 503;
    if (config->limits.conn_status == 0)
        config->limits.conn_status = 503;
    static const struct conf_levels levels = {
        offsetof(struct conf_config, limits),
        offsetof(struct conf_server, limits),
        offsetof(struct conf_location, limits),
        inherit,
    };
    return conf__levels_merge(state, &levels);
}

void conf__limits_free(struct conf_limits *limits)
{
    for (size_t i = 0; i < limits->req_count; i++)
        free(limits->reqs[i].zone_name);
    free(limits->reqs);
    for (size_t i = 0; i < limits->conn_count; i++)
        free(limits->conns[i].zone_name);
    free(limits->conns);
}

void conf__limit_zones_free(struct conf_config *config)
{
    for (size_t i = 0; i < config->limit_zone_count; i++) {
        free(config->limit_zones[i].name);
        free(config->limit_zones[i].key);
    }
    free(config->limit_zones);
}
