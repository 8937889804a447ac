/*
 * levels.c: inheritance, written once: a struct that the top level, each
 * server and each location hold (access, limits, the
 * registered modules' block) is merged level by level, each server's
 * with the top level's and each location's with its server's, by the
 * merge function of its owner.
 */
#include "registry.h"

#include <stdint.h>

int conf__levels_merge(struct conf_state *state, const struct conf_levels *levels)
{
    struct conf_config *config = state->config;
    const char *top =
        levels->in_config != SIZE_MAX ? (const char *)config + levels->in_config : NULL;
    for (size_t s = 0; s < config->server_count; s++) {
        struct conf_server *server = &config->servers[s];
        char *own = (char *)server + levels->in_server;
        if (top != NULL && levels->merge(state, &server->pos, own, top) != 0)
            return -1;
        for (size_t l = 0; l < server->location_count; l++) {
            struct conf_location *location = &server->locations[l];
            if (levels->merge(state, &location->pos, (char *)location + levels->in_location, own) !=
                0)
                return -1;
        }
    }
    return 0;
}
