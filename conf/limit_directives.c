/*
 * limit_directives.c: the zones of nginx's rate and connection limits,
 * limit_req_zone and limit_conn_zone, at the top level: shared by the
 * workers and kept by the process across reloads (cmd/runtime_limit.c),
 * so the config's, not a level's.  limit_req, limit_conn and their
 * _status are the limit module's (proto/policy/limit.c); the check that
 * each names a zone of its kind is here, where the zones are known.
 */
#include "registry.h"

#include "proto/http/module.h"
#include "proto/policy/limit.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define RATE_MAX 1000000u /* requests a second or a minute */

static bool has_prefix(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
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
    if (!limit_zone_name_valid(spec, name_len))
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
    struct conf_arg size = conf_arg_tail(arg, 5 + name_len + 1);
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

const struct conf_directive conf__limit_directives[] = {
    {.name = "limit_req_zone",
     .contexts = CONF_MAIN,
     .min_args = 3,
     .max_args = 3,
     .repeat = true,
     .apply = apply_zone},
    {.name = "limit_conn_zone",
     .contexts = CONF_MAIN | CONF_STREAM, /* one list: a stream's zones are the config's */
     .min_args = 2,
     .max_args = 2,
     .repeat = true,
     .apply = apply_zone},
    {.name = NULL},
};

/* ------------------------------------------------------------ finishing */

/* Each limit of `list` names a zone of its kind. */
static int check(struct conf_state *state, const struct limit_line *list, size_t count, bool conn)
{
    const struct conf_config *config = state->config;
    for (size_t i = 0; i < count; i++) {
        const struct limit_line *limit = &list[i];
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
    }
    return 0;
}

/* The limits a level writes (its block of module structs), before they
 * are merged. */
static int check_level(struct conf_state *state, const void *modules)
{
    const struct limit_conf *c = conf_module_conf(modules, &limit_module.conf);
    if (c == NULL)
        return 0;
    if (check(state, c->reqs, c->req_count, false) != 0)
        return -1;
    return check(state, c->conns, c->conn_count, true);
}

int conf__limit_finish(struct conf_state *state)
{
    const struct conf_config *config = state->config;
    if (check_level(state, config->modules) != 0)
        return -1;
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        if (check_level(state, server->modules) != 0)
            return -1;
        for (size_t l = 0; l < server->location_count; l++)
            if (check_level(state, server->locations[l].modules) != 0)
                return -1;
    }
    return 0;
}

void conf__limit_zones_free(struct conf_config *config)
{
    for (size_t i = 0; i < config->limit_zone_count; i++) {
        free(config->limit_zones[i].name);
        free(config->limit_zones[i].key);
    }
    free(config->limit_zones);
}
