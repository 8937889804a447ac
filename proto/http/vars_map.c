/*
 * vars_map.c: `map $source $name { ... }`: a variable whose value is looked
 * up, when first read, from another's: exact keys (a hash of them would
 * pay off only for long maps), then PCRE2 regexes in order, else the
 * default.
 */
#include "proto/http/regex.h"
#include "proto/http/vars_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Maps reading maps: deep enough for any sensible config.  A map that
 * reads itself, through others or not, reads empty there, as nginx
 * refuses such a cycle; so evaluation goes at most this deep, through
 * distinct maps. */
#define MAP_DEPTH_MAX (sizeof(((struct vars_ctx *)0)->_open) / sizeof(struct vars_map *))

struct map_entry {
    char *key; /* NULL: a regex */
    size_t key_len;
    struct http_regex *re;
    struct vars_template *value;
};

struct vars_map {
    char *name;
    struct vars_template *source;
    struct map_entry *entries;
    size_t count;
    struct vars_template *fallback; /* default; NULL: empty */
};

struct vars_map *vars_map_new(const char *name)
{
    struct vars_map *map = calloc(1, sizeof(*map));
    if (map == NULL || (map->name = strdup(name)) == NULL) {
        free(map);
        return NULL;
    }
    return map;
}

void vars_map_free(struct vars_map *map)
{
    if (map == NULL)
        return;
    for (size_t i = 0; i < map->count; i++) {
        free(map->entries[i].key);
        regex_free(map->entries[i].re);
        vars_template_free(map->entries[i].value);
    }
    free(map->entries);
    vars_template_free(map->source);
    vars_template_free(map->fallback);
    free(map->name);
    free(map);
}

const char *vars_map_name(const struct vars_map *map)
{
    return map->name;
}

bool vars_map_is_late(const struct vars_map *map)
{
    return map->source != NULL && vars_template_is_late(map->source);
}

int vars_map_set_source(struct vars_map *map, const char *text, const struct vars_maps *maps,
                        struct vars_error *error)
{
    vars_template_free(map->source);
    map->source = NULL;
    return vars_compile(text, maps, &map->source, error);
}

/* Compiles a "~REGEX" or "~*REGEX" key. */
static int compile_regex(const char *key, struct http_regex **out, struct vars_error *error)
{
    bool caseless = key[1] == '*';
    const char *pattern = key + (caseless ? 2 : 1);
    char message[120];
    size_t offset;
    int err = regex_compile(pattern, caseless, out, message, sizeof(message), &offset);
    if (err == -EINVAL) {
        error->offset = (size_t)(pattern - key) + offset;
        snprintf(error->message, sizeof(error->message), "invalid regex \"%s\": %s at offset %zu",
                 pattern, message, offset);
    }
    return err;
}

int vars_map_add(struct vars_map *map, const char *key, const char *value,
                 const struct vars_maps *maps, struct vars_error *error, bool *in_value)
{
    *in_value = true;
    struct vars_template *t;
    int err = vars_compile(value, maps, &t, error);
    if (err != 0)
        return err;
    if (key == NULL) {
        vars_template_free(map->fallback);
        map->fallback = t;
        return 0;
    }
    struct map_entry entry = {.value = t};
    if (key[0] == '~') {
        *in_value = false;
        err = compile_regex(key, &entry.re, error);
    } else {
        entry.key_len = strlen(key);
        entry.key = strdup(key);
        err = entry.key == NULL ? -ENOMEM : 0;
    }
    struct map_entry *grown =
        err == 0 ? realloc(map->entries, (map->count + 1) * sizeof(*grown)) : NULL;
    if (grown == NULL) {
        free(entry.key);
        regex_free(entry.re);
        vars_template_free(t);
        return err != 0 ? err : -ENOMEM;
    }
    map->entries = grown;
    map->entries[map->count++] = entry;
    return 0;
}

void vars_map_eval(const struct vars_map *map, struct vars_ctx *ctx, struct vars_buf *out)
{
    if (map->source == NULL || ctx->_depth >= MAP_DEPTH_MAX)
        return;
    for (unsigned i = 0; i < ctx->_depth; i++)
        if (ctx->_open[i] == map)
            return;
    ctx->_open[ctx->_depth++] = map;
    /* The source as it is, whatever the caller's escaping: keys compare
     * with the value itself. */
    enum vars_escape escape = ctx->escape;
    ctx->escape = VARS_RAW;
    char small[256];
    struct vars_buf source;
    vars_buf_init(&source, small, sizeof(small));
    vars_eval(map->source, ctx, &source);
    const struct vars_template *result = map->fallback;
    if (!source.failed) {
        bool found = false;
        for (size_t i = 0; i < map->count && !found; i++) {
            const struct map_entry *e = &map->entries[i];
            if (e->key != NULL && e->key_len == source.len &&
                memcmp(e->key, source.data, source.len) == 0) {
                result = e->value;
                found = true;
            }
        }
        for (size_t i = 0; i < map->count && !found; i++) {
            const struct map_entry *e = &map->entries[i];
            size_t ovector[2 * HTTP_REGEX_PAIRS];
            int matched = e->re != NULL ? regex_match(e->re, source.data, source.len, ovector) : 0;
            if (matched == HTTP_REGEX_GAVE_UP)
                break; /* the default, as nginx gives: the later entries were not meant to see it */
            if (matched > 0) {
                result = e->value;
                found = true;
            }
        }
    }
    vars_buf_free(&source);
    ctx->escape = escape;
    if (result != NULL)
        vars_eval(result, ctx, out);
    ctx->_depth--;
}
