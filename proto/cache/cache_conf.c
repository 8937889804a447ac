/*
 * cache_conf.c: the cache module's directives (nginx's proxy_cache_path,
 * proxy_cache, proxy_cache_key, proxy_cache_valid...), their defaults and
 * inheritance, and the build of a location's `struct cache_loc`, which
 * finds (or makes) the process's zone of the name it uses.
 */
#include "proto/cache/cache_conf.h"

#include "proto/cache/cache_policy.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_KEY        "$scheme$host$request_uri"
#define DEFAULT_INACTIVE_S 600
#define DEFAULT_LOCK_MS    5000
#define VALID_MAX          1000 /* proxy_cache_valid codes, or values of a list, per level */

void cache_conf_init(void *conf)
{
    struct cache_conf *c = conf;
    c->methods = UINT_MAX;
    c->min_uses = UINT_MAX;
    c->ignore = UINT_MAX;
    c->use_stale = UINT_MAX;
    c->lock_timeout_ms = UINT32_MAX;
}

/* "1:2": one to three levels of one or two hex digits, as nginx. */
static int parse_levels(const struct conf_arg *value, unsigned *levels,
                        struct conf_module_error *error)
{
    const char *p = value->text;
    for (int i = 0; i < CACHE_LEVELS; i++) {
        if (*p != '1' && *p != '2')
            break;
        levels[i] = (unsigned)(*p - '0');
        p++;
        if (*p == '\0')
            return 0;
        if (*p != ':')
            break;
        p++;
    }
    conf_module_fail(error, &value->pos,
                     "invalid levels \"%s\" (expected up to three of 1 or 2, "
                     "such as 1:2)",
                     value->text);
    return conf_module_fail_kept(error, value);
}

/* proxy_cache_path PATH [levels=L] keys_zone=NAME:SIZE [max_size=SIZE]
 * [inactive=TIME] [use_temp_path=...] */
static int apply_path(void *conf, const struct conf_arg *args, size_t count,
                      struct conf_module_error *error)
{
    struct cache_conf *c = conf;
    struct cache_path *paths = realloc(c->paths, (c->path_count + 1) * sizeof(*paths));
    if (paths == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    c->paths = paths;
    struct cache_path *p = &paths[c->path_count];
    memset(p, 0, sizeof(*p));
    p->pos = args[0].pos;
    p->zone.inactive_s = DEFAULT_INACTIVE_S;
    char *path = conf_arg_file(&args[0], error);
    if (path == NULL)
        return -1;
    size_t plen = strlen(path);
    while (plen > 1 && path[plen - 1] == '/')
        path[--plen] = '\0';
    p->zone.path = path;
    c->path_count++; /* freed with the level from here on */
    for (size_t i = 1; i < count; i++) {
        const char *t = args[i].text;
        struct conf_arg v;
        if (conf_has_prefix(t, "levels=")) {
            v = conf_arg_tail(&args[i], 7);
            memset(p->zone.levels, 0, sizeof(p->zone.levels));
            if (parse_levels(&v, p->zone.levels, error) != 0)
                return -1;
        } else if (conf_has_prefix(t, "keys_zone=")) {
            v = conf_arg_tail(&args[i], 10);
            const char *colon = strrchr(v.text, ':');
            size_t size;
            if (colon == NULL || colon == v.text || conf_parse_size(colon + 1, &size) != 0) {
                conf_module_fail(error, &v.pos, "invalid keys_zone \"%s\" (expected NAME:SIZE)",
                                 v.text);
                return conf_module_fail_kept(error, &v);
            }
            if (cache_zone_capacity(size) < 16) {
                conf_module_fail(error, &v.pos, "keys_zone \"%s\" is too small", v.text);
                return conf_module_fail_kept(error, &v);
            }
            for (const char *ch = v.text; ch < colon; ch++)
                if (!((*ch >= 'a' && *ch <= 'z') || (*ch >= 'A' && *ch <= 'Z') ||
                      (*ch >= '0' && *ch <= '9') || *ch == '_' || *ch == '-')) {
                    conf_module_fail(error, &v.pos,
                                     "invalid keys_zone name in \"%s\" (letters, digits, _ and -)",
                                     v.text);
                    return conf_module_fail_kept(error, &v);
                }
            char *name = strndup(v.text, (size_t)(colon - v.text));
            if (name == NULL)
                return conf_module_fail(error, NULL, "%s", "out of memory");
            free((char *)p->zone.name);
            p->zone.name = name;
            p->zone.keys_size = size;
        } else if (conf_has_prefix(t, "max_size=")) {
            v = conf_arg_tail(&args[i], 9);
            size_t size;
            if (conf_parse_size(v.text, &size) != 0) {
                conf_module_fail(error, &v.pos, "invalid max_size \"%s\"", v.text);
                return conf_module_fail_kept(error, &v);
            }
            p->zone.max_size = size;
        } else if (conf_has_prefix(t, "inactive=")) {
            v = conf_arg_tail(&args[i], 9);
            uint32_t ms;
            if (conf_parse_duration(v.text, &ms) != 0 || ms < 1000) {
                conf_module_fail(error, &v.pos, "invalid inactive \"%s\" (at least 1s)", v.text);
                return conf_module_fail_kept(error, &v);
            }
            p->zone.inactive_s = ms / 1000;
        } else if (conf_has_prefix(t, "use_temp_path=") || conf_has_prefix(t, "loader_") ||
                   conf_has_prefix(t, "manager_")) {
            /* nginx's tuning of where and how fast: corral writes its
             * temporary files in the zone's own directory and loads and
             * sweeps from one thread per zone (docs/config.md). */
        } else {
            return conf_module_fail(error, &args[i].pos,
                                    "invalid parameter \"%s\" of \"proxy_cache_path\"", t);
        }
    }
    if (p->zone.name == NULL)
        return conf_module_fail(error, NULL, "%s",
                                "\"proxy_cache_path\" needs keys_zone=NAME:SIZE");
    for (size_t i = 0; i + 1 < c->path_count; i++)
        if (strcmp(c->paths[i].zone.name, p->zone.name) == 0)
            return conf_module_fail(error, &args[0].pos, "duplicate zone \"%s\"", p->zone.name);
    return 0;
}

static int apply_cache(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    (void)count;
    struct cache_conf *c = conf;
    c->zone_set = true;
    c->zone_pos = args[0].pos;
    if (strcmp(args[0].text, "off") == 0)
        return 0;
    if ((c->zone = strdup(args[0].text)) == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    return 0;
}

static int apply_key(void *conf, const struct conf_arg *args, size_t count,
                     struct conf_module_error *error)
{
    (void)count;
    struct cache_conf *c = conf;
    if (args[0].text[0] == '\0')
        return conf_module_fail(error, &args[0].pos, "%s", "empty cache key");
    if ((c->key = strdup(args[0].text)) == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    c->key_pos = args[0].pos;
    return 0;
}

/* proxy_cache_valid [CODE...|any] TIME */
static int apply_valid(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    struct cache_conf *c = conf;
    const struct conf_arg *time_arg = &args[count - 1];
    uint32_t ms;
    if (conf_parse_duration(time_arg->text, &ms) != 0)
        return conf_module_fail(error, &time_arg->pos, "invalid time \"%s\"", time_arg->text);
    static const unsigned defaults[] = {200, 301, 302};
    size_t add = count == 1 ? 3 : count - 1, have = c->valid_count;
    if (have > VALID_MAX || add > VALID_MAX - have)
        return conf_module_fail(error, NULL, "more than %d proxy_cache_valid codes", VALID_MAX);
    struct cache_valid *v = realloc(c->valid, (have + add) * sizeof(*v));
    if (v == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    c->valid = v;
    for (size_t i = 0; i < add; i++) {
        unsigned status = 0;
        if (count == 1)
            status = defaults[i];
        else if (strcmp(args[i].text, "any") != 0 &&
                 conf_arg_uint(&args[i], "status", 100, 599, &status, error) != 0)
            return -1;
        v[have + i] = (struct cache_valid){status, ms / 1000};
        c->valid_count = have + i + 1;
    }
    return 0;
}

static int add_condition(struct cache_conditions *list, const struct conf_arg *args, size_t count,
                         struct conf_module_error *error)
{
    size_t have = list->count;
    if (have > VALID_MAX || count > VALID_MAX - have)
        return conf_module_fail(error, NULL, "more than %d values", VALID_MAX);
    char **texts = realloc(list->texts, (have + count) * sizeof(*texts));
    if (texts != NULL)
        list->texts = texts;
    struct conf_pos *pos = realloc(list->pos, (have + count) * sizeof(*pos));
    if (pos != NULL)
        list->pos = pos;
    if (texts == NULL || pos == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    for (size_t i = 0; i < count; i++) {
        if ((texts[have + i] = strdup(args[i].text)) == NULL)
            return conf_module_fail(error, NULL, "%s", "out of memory");
        pos[have + i] = args[i].pos;
        list->count = have + i + 1;
    }
    return 0;
}

static int apply_bypass(void *conf, const struct conf_arg *args, size_t count,
                        struct conf_module_error *error)
{
    return add_condition(&((struct cache_conf *)conf)->bypass, args, count, error);
}

static int apply_no_cache(void *conf, const struct conf_arg *args, size_t count,
                          struct conf_module_error *error)
{
    return add_condition(&((struct cache_conf *)conf)->no_cache, args, count, error);
}

static const struct conf_keyword method_words[] = {
    {"GET", CACHE_METHOD_GET},
    {"HEAD", CACHE_METHOD_HEAD},
    {"POST", CACHE_METHOD_POST},
};

static const struct conf_keyword ignore_words[] = {
    {"Cache-Control", CACHE_IGNORE_CACHE_CONTROL},     {"Expires", CACHE_IGNORE_EXPIRES},
    {"Set-Cookie", CACHE_IGNORE_SET_COOKIE},           {"Vary", CACHE_IGNORE_VARY},
    {"X-Accel-Expires", CACHE_IGNORE_X_ACCEL_EXPIRES}, {"X-Accel-Redirect", CACHE_IGNORE_X_ACCEL},
    {"X-Accel-Limit-Rate", CACHE_IGNORE_X_ACCEL},      {"X-Accel-Buffering", CACHE_IGNORE_X_ACCEL},
    {"X-Accel-Charset", CACHE_IGNORE_X_ACCEL},
};

static const struct conf_keyword stale_words[] = {
    {"off", 0},
    {"error", CACHE_STALE_ERROR},
    {"timeout", CACHE_STALE_TIMEOUT},
    {"invalid_header", CACHE_STALE_INVALID_HEADER},
    {"updating", CACHE_STALE_UPDATING},
    {"http_500", CACHE_STALE_500},
    {"http_502", CACHE_STALE_502},
    {"http_503", CACHE_STALE_503},
    {"http_504", CACHE_STALE_504},
    {"http_403", CACHE_STALE_403},
    {"http_404", CACHE_STALE_404},
    {"http_429", CACHE_STALE_429},
};

#define LEVELS CONF_MAIN | CONF_SERVER | CONF_LOCATION

#define SWITCH(NAME, FIELD)                                                                        \
    {                                                                                              \
        .name = NAME, .contexts = LEVELS, .min_args = 1, .max_args = 1, .kind = CONF_KIND_SWITCH,  \
        .base = CONF_BASE_MODULE, CONF_FIELD(struct cache_conf, FIELD), .keep_pos = true,          \
        .pos_offset = offsetof(struct cache_conf, FIELD##_pos)                                     \
    }

const struct conf_directive cache_directives[] = {
    {.name = "proxy_cache_path",
     .contexts = CONF_MAIN,
     .min_args = 2,
     .max_args = CONF_ARGS_MANY,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_path},
    {.name = "proxy_cache",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_cache},
    {.name = "proxy_cache_key",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_key},
    {.name = "proxy_cache_valid",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_valid},
    {.name = "proxy_cache_methods",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .kind = CONF_KIND_FLAGS,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct cache_conf, methods),
     .what = "proxy_cache_methods value",
     .repeated = "method",
     CONF_KEYWORDS(method_words)},
    {.name = "proxy_cache_bypass",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_bypass},
    {.name = "proxy_no_cache",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .repeat = true,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_no_cache},
    {.name = "proxy_cache_min_uses",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_COUNT,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct cache_conf, min_uses),
     .min = 1,
     .max = 1000000,
     .what = "proxy_cache_min_uses"},
    {.name = "proxy_ignore_headers",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .kind = CONF_KIND_FLAGS,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct cache_conf, ignore),
     .what = "proxy_ignore_headers field",
     .repeated = "field",
     CONF_KEYWORDS(ignore_words)},
    {.name = "proxy_cache_use_stale",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .kind = CONF_KIND_FLAGS,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct cache_conf, use_stale),
     .what = "proxy_cache_use_stale value",
     .repeated = "value",
     CONF_KEYWORDS(stale_words)},
    SWITCH("proxy_cache_lock", lock),
    SWITCH("proxy_cache_revalidate", revalidate),
    SWITCH("proxy_cache_background_update", background_update),
    {.name = "proxy_cache_lock_timeout",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_DURATION,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct cache_conf, lock_timeout_ms),
     .min = 1},
    {.name = NULL},
};

static void take_conditions(struct cache_conditions *c, const struct cache_conditions *p,
                            bool *inherited)
{
    if (c->count == 0 && p->count > 0) {
        *c = *p;
        *inherited = true;
    }
}

int cache_conf_merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct cache_conf *c = conf;
    const struct cache_conf *p = parent;
    if (p == NULL) {
        if (c->key == NULL) {
            c->key = strdup(DEFAULT_KEY);
            if (c->key == NULL) {
                snprintf(error, len, "%s", "out of memory");
                return -1;
            }
        }
        if (c->methods == UINT_MAX)
            c->methods = CACHE_METHOD_GET | CACHE_METHOD_HEAD;
        if (c->min_uses == UINT_MAX)
            c->min_uses = 1;
        if (c->ignore == UINT_MAX)
            c->ignore = 0;
        if (c->use_stale == UINT_MAX)
            c->use_stale = 0;
        if (c->lock_timeout_ms == UINT32_MAX)
            c->lock_timeout_ms = DEFAULT_LOCK_MS;
        return 0;
    }
    if (c->path_count == 0 && p->path_count > 0) {
        c->paths = p->paths;
        c->path_count = p->path_count;
        c->paths_inherited = true;
    }
    if (!c->zone_set) {
        c->zone = p->zone; /* shared: freed by the level that wrote it */
        c->zone_set = p->zone_set;
        c->zone_pos = p->zone_pos;
        c->zone_inherited = true;
    }
    if (c->key == NULL) {
        c->key = p->key;
        c->key_pos = p->key_pos;
        c->key_inherited = true;
    }
    if (c->valid_count == 0 && p->valid_count > 0) {
        c->valid = p->valid;
        c->valid_count = p->valid_count;
        c->valid_inherited = true;
    }
    if (c->methods == UINT_MAX)
        c->methods = p->methods;
    if (c->min_uses == UINT_MAX)
        c->min_uses = p->min_uses;
    if (c->ignore == UINT_MAX)
        c->ignore = p->ignore;
    if (c->use_stale == UINT_MAX)
        c->use_stale = p->use_stale;
    if (c->lock_timeout_ms == UINT32_MAX)
        c->lock_timeout_ms = p->lock_timeout_ms;
    if (c->lock_pos.file == NULL)
        c->lock = p->lock;
    if (c->revalidate_pos.file == NULL)
        c->revalidate = p->revalidate;
    if (c->background_update_pos.file == NULL)
        c->background_update = p->background_update;
    take_conditions(&c->bypass, &p->bypass, &c->bypass_inherited);
    take_conditions(&c->no_cache, &p->no_cache, &c->no_cache_inherited);
    return 0;
}

static const struct cache_path *find_path(const struct cache_conf *c, const char *name)
{
    for (size_t i = 0; i < c->path_count; i++)
        if (strcmp(c->paths[i].zone.name, name) == 0)
            return &c->paths[i];
    return NULL;
}

int cache_conf_check(void *conf, struct conf_module_error *error)
{
    const struct cache_conf *c = conf;
    if (c->zone != NULL && find_path(c, c->zone) == NULL)
        return conf_module_fail(error, &c->zone_pos, "unknown cache zone \"%s\"", c->zone);
    return 0;
}

static void free_conditions(struct cache_conditions *c)
{
    for (size_t i = 0; i < c->count; i++)
        free(c->texts[i]);
    free(c->texts);
    free(c->pos);
}

void cache_conf_free(void *conf)
{
    struct cache_conf *c = conf;
    if (!c->paths_inherited) {
        for (size_t i = 0; i < c->path_count; i++) {
            free((char *)c->paths[i].zone.name);
            free((char *)c->paths[i].zone.path);
        }
        free(c->paths);
    }
    /* A level that did not write proxy_cache shares its parent's name. */
    if (!c->zone_inherited)
        free(c->zone);
    if (!c->valid_inherited)
        free(c->valid);
    if (!c->key_inherited)
        free(c->key);
    if (!c->bypass_inherited)
        free_conditions(&c->bypass);
    if (!c->no_cache_inherited)
        free_conditions(&c->no_cache);
}

static int compile_conditions(const struct cache_conditions *list, const char *directive,
                              const struct http_module_build *b, const struct vars_template ***out,
                              size_t *count)
{
    *count = list->count;
    if (list->count == 0)
        return 0;
    *out = b->calloc(b->arena, list->count, sizeof(**out));
    if (*out == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < list->count; i++) {
        int err = b->compile_with(b->arena, list->texts[i], &list->pos[i], directive, NULL, true,
                                  &(*out)[i]);
        if (err != 0)
            return err;
    }
    return 0;
}

int cache_conf_build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct cache_conf *c = conf;
    *out = NULL;
    if (c->zone == NULL)
        return 0;
    const struct cache_path *path = find_path(c, c->zone);
    if (path == NULL)
        return -ENOENT; /* cache_conf_check() reported it */
    struct cache_loc *loc = b->calloc(b->arena, 1, sizeof(*loc));
    if (loc == NULL)
        return -ENOMEM;
    int err = cache_zone_get(&path->zone, &loc->zone);
    if (err != 0) {
        corral_log(CORRAL_LOG_ERROR, "%s:%u: proxy_cache_path \"%s\": %s", path->pos.file,
                   path->pos.line, path->zone.path,
                   err == -EEXIST ? "zone of that name has another path or levels"
                                  : strerror(-err));
        return err;
    }
    err = b->compile_with(b->arena, c->key, &c->key_pos, "proxy_cache_key", NULL, true, &loc->key);
    if (err == 0)
        err = compile_conditions(&c->bypass, "proxy_cache_bypass", b, &loc->bypass,
                                 &loc->bypass_count);
    if (err == 0)
        err = compile_conditions(&c->no_cache, "proxy_no_cache", b, &loc->no_cache,
                                 &loc->no_cache_count);
    if (err != 0)
        return err;
    loc->valid = c->valid;
    loc->valid_count = c->valid_count;
    loc->methods = c->methods;
    loc->min_uses = c->min_uses;
    loc->ignore = c->ignore;
    loc->use_stale = c->use_stale;
    loc->lock = c->lock;
    loc->lock_timeout_ms = c->lock_timeout_ms;
    loc->revalidate = c->revalidate;
    loc->background_update = c->background_update;
    *out = loc;
    return 0;
}

int64_t cache_conf_valid(const struct cache_loc *loc, unsigned status)
{
    int64_t any = -1;
    for (size_t i = 0; i < loc->valid_count; i++) {
        if (loc->valid[i].status == status)
            return loc->valid[i].seconds;
        if (loc->valid[i].status == 0 && any < 0)
            any = loc->valid[i].seconds;
    }
    return any;
}
