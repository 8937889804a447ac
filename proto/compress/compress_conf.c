/*
 * compress_conf.c: the compress module's directives, their defaults and
 * inheritance (nginx's: a level that does not write a setting takes its
 * parent's), and its build: nothing where every coding is off, so that a
 * site that compresses nowhere leaves the module out of its steps.
 */
#include "proto/compress/compress.h"

#include "proto/http/module.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Each coding's defaults: the modules' (nginx's gzip, ngx_brotli,
 * zstd-nginx-module), but brotli's level, which is 6 there and 3 here:
 * from level 4 on libbrotlienc holds 1.7 MB a stream (docs/config.md). */
static const unsigned default_level[COMPRESS_CODINGS] = {
    [COMPRESS_GZIP] = 1, [COMPRESS_BR] = 3, [COMPRESS_ZSTD] = 1};
#define DEFAULT_MIN_LENGTH 20

void compress_conf_init(void *conf)
{
    struct compress_conf *c = conf;
    for (int i = 0; i < COMPRESS_CODINGS; i++) {
        c->coding[i].level = COMPRESS_UNSET_LEVEL;
        c->coding[i].min_length = COMPRESS_UNSET_LENGTH;
    }
    c->proxied = UINT_MAX;
}

/* gzip_types TYPE... (brotli_types, zstd_types: each has an apply of its
 * own below, which hands this its coding's struct). */
static int apply_types(struct compress_coding_conf *c, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    c->types_set = true; /* once per level: conf/ refuses a second */
    char **types = calloc(count, sizeof(*types));
    if (types == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    c->types = types; /* freed with the level, whole or not */
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        const char *t = args[i].text;
        if (strcmp(t, "*") == 0) {
            c->any_type = true;
            continue;
        }
        const char *slash = strchr(t, '/');
        if (slash == NULL || slash == t || slash[1] == '\0' || strchr(t, ';') != NULL)
            return conf_module_fail(error, &args[i].pos, "invalid MIME type \"%s\"", t);
        char *copy = strdup(t);
        if (copy == NULL)
            return conf_module_fail(error, &args[i].pos, "%s", "out of memory");
        for (char *p = copy; *p != '\0'; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        types[n++] = copy;
        c->type_count = n;
    }
    return 0;
}

static int apply_gzip_types(void *conf, const struct conf_arg *args, size_t count,
                            struct conf_module_error *error)
{
    return apply_types(&((struct compress_conf *)conf)->coding[COMPRESS_GZIP], args, count, error);
}

static int apply_brotli_types(void *conf, const struct conf_arg *args, size_t count,
                              struct conf_module_error *error)
{
    return apply_types(&((struct compress_conf *)conf)->coding[COMPRESS_BR], args, count, error);
}

static int apply_zstd_types(void *conf, const struct conf_arg *args, size_t count,
                            struct conf_module_error *error)
{
    return apply_types(&((struct compress_conf *)conf)->coding[COMPRESS_ZSTD], args, count, error);
}

/* The largest gunzip_buffers SIZE: one piece of it per response. */
#define GUNZIP_PIECE_MAX     (1024 * 1024)
#define GUNZIP_PIECE_DEFAULT 4096 /* nginx's 32 4k */

/* NUMBER SIZE, gzip_buffers' and gunzip_buffers' form: the size in *size
 * (a count of bytes, k or m), up to `max`. */
static int read_buffers(const struct conf_arg *args, const char *what, size_t max, size_t *size,
                        struct conf_module_error *error)
{
    unsigned n;
    if (conf_arg_uint(&args[0], what, 1, UINT_MAX, &n, error) != 0)
        return -1;
    const char *p = args[1].text;
    size_t v = 0;
    while (*p >= '0' && *p <= '9') {
        if (v > max / 10)
            return conf_module_fail(error, &args[1].pos, "size \"%s\" too large (at most %zu)",
                                    args[1].text, max);
        v = v * 10 + (size_t)(*p++ - '0');
    }
    size_t unit = *p == '\0'                ? 1
                  : strcasecmp(p, "k") == 0 ? 1024
                  : strcasecmp(p, "m") == 0 ? 1024 * 1024
                                            : 0;
    if (p == args[1].text || unit == 0 || v == 0)
        return conf_module_fail(error, &args[1].pos, "invalid size \"%s\"", args[1].text);
    if (v > max / unit)
        return conf_module_fail(error, &args[1].pos, "size \"%s\" too large (at most %zu)",
                                args[1].text, max);
    *size = v * unit;
    return 0;
}

/* gzip_buffers NUMBER SIZE: accepted for nginx's configs, with no effect
 * (docs/config.md says why); its form is checked all the same. */
static int apply_buffers(void *conf, const struct conf_arg *args, size_t count,
                         struct conf_module_error *error)
{
    (void)conf, (void)count;
    size_t size;
    return read_buffers(args, "\"gzip_buffers\" number", SIZE_MAX / 2, &size, error);
}

/* gunzip_buffers NUMBER SIZE: the size of the pieces decoded at a time;
 * the number has no effect (docs/config.md). */
static int apply_gunzip_buffers(void *conf, const struct conf_arg *args, size_t count,
                                struct conf_module_error *error)
{
    (void)count;
    struct compress_conf *c = conf;
    return read_buffers(args, "\"gunzip_buffers\" number", GUNZIP_PIECE_MAX, &c->gunzip_piece,
                        error);
}

/* gzip_http_version 1.0|1.1: the oldest HTTP version that gets a coded
 * response (nginx's; HTTP/2 is newer than both). */
static int apply_http_version(void *conf, const struct conf_arg *args, size_t count,
                              struct conf_module_error *error)
{
    (void)count;
    struct compress_conf *c = conf;
    if (strcmp(args[0].text, "1.0") == 0)
        c->http_version = 10;
    else if (strcmp(args[0].text, "1.1") == 0)
        c->http_version = 11;
    else
        return conf_module_fail(error, &args[0].pos, "invalid value \"%s\" (expected 1.0 or 1.1)",
                                args[0].text);
    return 0;
}

/* gzip_disable REGEX...: compiled by the build, where a bad one is
 * reported at its position. */
static int apply_disable(void *conf, const struct conf_arg *args, size_t count,
                         struct conf_module_error *error)
{
    struct compress_conf *c = conf;
    char **list = calloc(count, sizeof(*list));
    struct conf_pos *pos = calloc(count, sizeof(*pos));
    c->disable = list; /* freed with the level, whole or not */
    c->disable_pos = pos;
    if (list == NULL || pos == NULL)
        return conf_module_fail(error, NULL, "%s", "out of memory");
    for (size_t i = 0; i < count; i++) {
        list[i] = strdup(args[i].text);
        if (list[i] == NULL)
            return conf_module_fail(error, &args[i].pos, "%s", "out of memory");
        pos[i] = args[i].pos;
        c->disable_count = i + 1;
    }
    return 0;
}

static const struct conf_keyword proxied_words[] = {
    {"off", COMPRESS_PROXIED_OFF},           {"expired", COMPRESS_PROXIED_EXPIRED},
    {"no-cache", COMPRESS_PROXIED_NO_CACHE}, {"no-store", COMPRESS_PROXIED_NO_STORE},
    {"private", COMPRESS_PROXIED_PRIVATE},   {"no_last_modified", COMPRESS_PROXIED_NO_LM},
    {"no_etag", COMPRESS_PROXIED_NO_ETAG},   {"auth", COMPRESS_PROXIED_AUTH},
    {"any", COMPRESS_PROXIED_ANY},
};

#define LEVELS CONF_MAIN | CONF_SERVER | CONF_LOCATION

/* One coding's four directives. */
#define CODING_DIRECTIVES(NAME, CODING, MIN, MAX, TYPES)                                           \
    {.name = NAME,                                                                                 \
     .contexts = LEVELS,                                                                           \
     .min_args = 1,                                                                                \
     .max_args = 1,                                                                                \
     .kind = CONF_KIND_SWITCH,                                                                     \
     .base = CONF_BASE_MODULE,                                                                     \
     CONF_FIELD(struct compress_conf, coding[CODING].on),                                          \
     .keep_pos = true,                                                                             \
     .pos_offset = offsetof(struct compress_conf, coding[CODING].on_pos)},                         \
        {.name = NAME "_types",                                                                    \
         .contexts = LEVELS,                                                                       \
         .min_args = 1,                                                                            \
         .max_args = CONF_ARGS_MANY,                                                               \
         .base = CONF_BASE_MODULE,                                                                 \
         .module_apply = TYPES},                                                                   \
        {.name = NAME "_min_length",                                                               \
         .contexts = LEVELS,                                                                       \
         .min_args = 1,                                                                            \
         .max_args = 1,                                                                            \
         .kind = CONF_KIND_SIZE,                                                                   \
         .base = CONF_BASE_MODULE,                                                                 \
         CONF_FIELD(struct compress_conf, coding[CODING].min_length)},                             \
    {                                                                                              \
        .name = NAME "_comp_level", .contexts = LEVELS, .min_args = 1, .max_args = 1,              \
        .kind = CONF_KIND_COUNT, .base = CONF_BASE_MODULE,                                         \
        CONF_FIELD(struct compress_conf, coding[CODING].level), .min = MIN, .max = MAX             \
    }

const struct conf_directive compress_directives[] = {
    CODING_DIRECTIVES("gzip", COMPRESS_GZIP, 1, 9, apply_gzip_types),
    CODING_DIRECTIVES("brotli", COMPRESS_BR, 0, 11, apply_brotli_types),
    CODING_DIRECTIVES("zstd", COMPRESS_ZSTD, 1, 19, apply_zstd_types),
    {.name = "gzip_vary",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct compress_conf, vary),
     .keep_pos = true,
     .pos_offset = offsetof(struct compress_conf, vary_pos)},
    {.name = "gzip_proxied",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .kind = CONF_KIND_FLAGS,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct compress_conf, proxied),
     .what = "gzip_proxied value",
     .repeated = "gzip_proxied value",
     CONF_KEYWORDS(proxied_words)},
    {.name = "gzip_buffers",
     .contexts = LEVELS,
     .min_args = 2,
     .max_args = 2,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_buffers},
    {.name = "gunzip",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct compress_conf, gunzip),
     .keep_pos = true,
     .pos_offset = offsetof(struct compress_conf, gunzip_pos)},
    {.name = "gunzip_buffers",
     .contexts = LEVELS,
     .min_args = 2,
     .max_args = 2,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_gunzip_buffers},
    {.name = "gzip_http_version",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_http_version},
    {.name = "gzip_disable",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = CONF_ARGS_MANY,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_disable},
    {.name = NULL},
};

int compress_conf_merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct compress_conf *c = conf;
    const struct compress_conf *p = parent;
    for (int i = 0; i < COMPRESS_CODINGS; i++) {
        struct compress_coding_conf *k = &c->coding[i];
        const struct compress_coding_conf *pk = p != NULL ? &p->coding[i] : NULL;
        if (k->on_pos.file == NULL && pk != NULL)
            k->on = pk->on;
        if (k->level == COMPRESS_UNSET_LEVEL)
            k->level = pk != NULL ? pk->level : default_level[i];
        if (k->min_length == COMPRESS_UNSET_LENGTH)
            k->min_length = pk != NULL ? pk->min_length : DEFAULT_MIN_LENGTH;
        if (!k->types_set && pk != NULL) {
            k->types = pk->types;
            k->type_count = pk->type_count;
            k->any_type = pk->any_type;
            k->types_inherited = true;
        }
    }
    if (c->vary_pos.file == NULL && p != NULL)
        c->vary = p->vary;
    if (c->proxied == UINT_MAX)
        c->proxied = p != NULL ? p->proxied : COMPRESS_PROXIED_OFF;
    if (c->gunzip_pos.file == NULL && p != NULL)
        c->gunzip = p->gunzip;
    if (c->gunzip_piece == 0)
        c->gunzip_piece = p != NULL ? p->gunzip_piece : GUNZIP_PIECE_DEFAULT;
    if (c->http_version == 0)
        c->http_version = p != NULL ? p->http_version : 11;
    if (c->disable == NULL && p != NULL && p->disable_count > 0) {
        c->disable = p->disable;
        c->disable_pos = p->disable_pos;
        c->disable_count = p->disable_count;
        c->disable_inherited = true;
    }
    return 0;
}

void compress_conf_free(void *conf)
{
    struct compress_conf *c = conf;
    for (int i = 0; i < COMPRESS_CODINGS; i++) {
        struct compress_coding_conf *k = &c->coding[i];
        if (k->types_inherited)
            continue;
        for (size_t t = 0; t < k->type_count; t++)
            free(k->types[t]);
        free(k->types);
    }
    if (c->disable_inherited)
        return;
    for (size_t i = 0; i < c->disable_count; i++)
        free(c->disable[i]);
    free(c->disable);
    free(c->disable_pos);
}

/* nginx's "msie6" (ngx_http_request.c): MSIE 4 and 5, and 6 but for
 * its SV1 builds, which decode gzip. */
#define MSIE6 "MSIE [45]\\.|MSIE 6\\.(?!.*SV1)"

int compress_conf_build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct compress_conf *c = conf;
    *out = NULL;
    bool on = false;
    for (int i = 0; i < COMPRESS_CODINGS; i++)
        on |= c->coding[i].on;
    on |= c->gunzip;
    /* Off, nothing to build, unless gzip_static needs to know that
     * HTTP/1.0 clients may have coded files (gzip_http_version 1.0). */
    if (!on && c->http_version != 10)
        return 0;
    struct compress_built *built = b->calloc(b->arena, 1, sizeof(*built));
    if (built == NULL)
        return -ENOMEM;
    built->conf = c;
    built->on = on;
    if (!on)
        goto done;
    if (c->disable_count > 0) {
        built->disable = b->calloc(b->arena, c->disable_count, sizeof(*built->disable));
        if (built->disable == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < c->disable_count; i++) {
            const char *pattern = strcmp(c->disable[i], "msie6") == 0 ? MSIE6 : c->disable[i];
            int err = b->regex(b->arena, pattern, true, &c->disable_pos[i], "gzip_disable",
                               &built->disable[i]);
            if (err != 0)
                return err;
        }
        built->disable_count = c->disable_count;
    }
done:
    *out = built;
    return 0;
}

bool compress_conf_takes(const struct compress_coding_conf *c, const char *type, size_t len)
{
    if (c->any_type || (len == 9 && strncasecmp(type, "text/html", 9) == 0))
        return true;
    for (size_t i = 0; i < c->type_count; i++)
        if (strlen(c->types[i]) == len && strncasecmp(c->types[i], type, len) == 0)
            return true;
    return false;
}
