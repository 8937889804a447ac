/*
 * cache_conf.h: the cache module's configuration, nginx's proxy_cache_*
 * directives: its struct per level, with inheritance (a level that does
 * not write a setting takes its parent's), and what its build makes of a
 * location's: `struct cache_loc`, which the phase handler and the store
 * filter read per request.
 */
#ifndef CORRAL_PROTO_CACHE_CONF_H
#define CORRAL_PROTO_CACHE_CONF_H

#include "conf/directive.h"
#include "proto/cache/cache_zone.h"
#include "proto/http/module.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* proxy_cache_methods. */
enum {
    CACHE_METHOD_GET = 1u << 0,
    CACHE_METHOD_HEAD = 1u << 1,
    CACHE_METHOD_POST = 1u << 2,
};

/* proxy_cache_use_stale. */
enum {
    CACHE_STALE_ERROR = 1u << 0,
    CACHE_STALE_TIMEOUT = 1u << 1,
    CACHE_STALE_INVALID_HEADER = 1u << 2,
    CACHE_STALE_UPDATING = 1u << 3,
    CACHE_STALE_500 = 1u << 4,
    CACHE_STALE_502 = 1u << 5,
    CACHE_STALE_503 = 1u << 6,
    CACHE_STALE_504 = 1u << 7,
    CACHE_STALE_403 = 1u << 8,
    CACHE_STALE_404 = 1u << 9,
    CACHE_STALE_429 = 1u << 10,
};

/* One proxy_cache_valid: how long responses of `status` (0: any) stay
 * fresh when they say nothing themselves. */
struct cache_valid {
    unsigned status;
    uint32_t seconds;
};

/* One proxy_cache_path, at the top level. */
struct cache_path {
    struct cache_zone_conf zone;
    struct conf_pos pos;
};

/* A list of values with $variables (proxy_cache_bypass, proxy_no_cache). */
struct cache_conditions {
    char **texts;
    struct conf_pos *pos;
    size_t count;
};

struct cache_conf {
    /* The top level's proxy_cache_path lines, shared by every level. */
    struct cache_path *paths;
    size_t path_count;
    bool paths_inherited;
    char *zone; /* proxy_cache NAME; NULL: none (or off) */
    bool zone_set, zone_inherited;
    struct conf_pos zone_pos;
    char *key; /* proxy_cache_key */
    struct conf_pos key_pos;
    bool key_inherited;
    struct cache_valid *valid;
    size_t valid_count;
    bool valid_inherited;
    unsigned methods;   /* CACHE_METHOD_*; UINT_MAX: unset */
    unsigned min_uses;  /* UINT_MAX: unset */
    unsigned ignore;    /* CACHE_IGNORE_*; UINT_MAX: unset */
    unsigned use_stale; /* CACHE_STALE_*; UINT_MAX: unset */
    struct cache_conditions bypass, no_cache;
    bool bypass_inherited, no_cache_inherited;
    bool lock, revalidate, background_update;
    struct conf_pos lock_pos, revalidate_pos, background_update_pos;
    uint32_t lock_timeout_ms; /* UINT32_MAX: unset */
};

/* What a location with a cache reads per request. */
struct cache_loc {
    struct cache_zone *zone;
    const struct vars_template *key;
    const struct cache_valid *valid;
    size_t valid_count;
    unsigned methods, min_uses, ignore, use_stale;
    const struct vars_template **bypass;
    size_t bypass_count;
    const struct vars_template **no_cache;
    size_t no_cache_count;
    bool lock, revalidate;
    /* proxy_cache_background_update: a stale entry that may be served
     * while updating is served at once, and refreshed by a detached
     * subrequest. */
    bool background_update;
    uint32_t lock_timeout_ms;
};

extern const struct conf_directive cache_directives[];
void cache_conf_init(void *conf);
int cache_conf_merge(void *conf, const void *parent, char *error, size_t len);
int cache_conf_check(void *conf, struct conf_module_error *error);
void cache_conf_free(void *conf);
int cache_conf_build(const void *conf, const struct http_module_build *b, const void **out);

/* proxy_cache_valid's time for `status` in `loc`, seconds; -1: none. */
int64_t cache_conf_valid(const struct cache_loc *loc, unsigned status);

#endif
