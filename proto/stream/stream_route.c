/*
 * stream_route.c: the upstream a stream map's keys pick for a session
 * (proxy_pass $NAME).
 */
#include "proto/stream/stream.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

struct proxy_upstream *stream_route_pick(const struct stream_route *route, const char *value,
                                         size_t len)
{
    for (size_t i = 0; i < route->count; i++) {
        const struct stream_route_entry *e = &route->entries[i];
        if (e->key != NULL && strlen(e->key) == len && strncasecmp(e->key, value, len) == 0)
            return e->upstream;
    }
    for (size_t i = 0; i < route->count; i++) {
        const struct stream_route_entry *e = &route->entries[i];
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        /* A regex that gave up picks nothing: the session is closed
         * rather than sent where another key would send it. */
        int rc = e->regex != NULL ? regex_match(e->regex, value, len, ovector) : 0;
        if (rc == HTTP_REGEX_GAVE_UP)
            return NULL;
        if (rc > 0)
            return e->upstream;
    }
    return route->fallback;
}
