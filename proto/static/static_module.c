/*
 * static_module.c: the static files module (static_module.h): nginx's
 * directives for serving files, their inheritance, and the build of a
 * location's settings into what static_handler.c reads per request.
 */
#include "proto/static/static_module.h"

#include "proto/http/module.h"
#include "proto/http/site.h"
#include "proto/http/vars.h"
#include "proto/policy/add_header.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- parsing */

/* nginx's time: numbers with units (ms s m h d w M y), "1h 30m" or
 * "1h30m"; a bare number is seconds.  Into whole seconds. */
static int parse_time(const char *text, int64_t *out)
{
    int64_t total = 0;
    const char *p = text;
    if (*p == '\0')
        return -1;
    while (*p != '\0') {
        if (*p == ' ') {
            p++;
            continue;
        }
        if (*p < '0' || *p > '9')
            return -1;
        int64_t n = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (n > (INT64_C(1) << 40))
                return -1;
            n = n * 10 + (*p - '0');
        }
        int64_t unit = 1;
        bool ms = false;
        if (p[0] == 'm' && p[1] == 's') {
            ms = true;
            p += 2;
        } else if (*p != '\0' && *p != ' ') {
            switch (*p++) {
            case 's': unit = 1; break;
            case 'm': unit = 60; break;
            case 'h': unit = 3600; break;
            case 'd': unit = 86400; break;
            case 'w': unit = 7 * 86400; break;
            case 'M': unit = 30 * 86400; break;
            case 'y': unit = 365 * 86400; break;
            default: return -1;
            }
        }
        total += ms ? n / 1000 : n * unit;
        if (total > (INT64_C(1) << 40))
            return -1;
    }
    *out = total;
    return 0;
}

/* alias PATH: kept as written, its trailing slash too, since it replaces
 * the location's prefix as text ("/i/" by "/data/img/"); a relative one
 * is resolved against the directory of the file it is written in, as
 * root is. */
static int apply_alias(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    (void)count;
    struct static_conf *c = conf;
    const char *text = args[0].text;
    if (text[0] == '\0')
        return conf_module_fail(error, &args[0].pos, "%s", "empty alias");
    size_t dir_len = 0;
    if (text[0] != '/') {
        const char *slash = strrchr(args[0].pos.file, '/');
        dir_len = slash != NULL ? (size_t)(slash - args[0].pos.file) + 1 : 0;
    }
    size_t text_len = strlen(text);
    char *alias = malloc(dir_len + text_len + 1);
    if (alias == NULL)
        return conf_module_fail(error, &args[0].pos, "%s", "out of memory");
    memcpy(alias, args[0].pos.file, dir_len);
    memcpy(alias + dir_len, text, text_len + 1);
    free(c->alias);
    c->alias = alias;
    c->alias_pos = args[0].pos;
    return 0;
}

/* index NAME...: file names, tried in order in a directory. */
static int apply_index(void *conf, const struct conf_arg *args, size_t count,
                       struct conf_module_error *error)
{
    struct static_conf *c = conf;
    for (size_t i = 0; i < count; i++) {
        const char *name = args[i].text;
        if (name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, ".") == 0 ||
            strcmp(name, "..") == 0 || strchr(name, '$') != NULL)
            return conf_module_fail(error, &args[i].pos,
                                    "invalid index \"%s\" (a file name, without '/' or "
                                    "variables)",
                                    name);
    }
    for (size_t i = 0; i < count; i++) {
        if ((c->index[i] = strdup(args[i].text)) == NULL)
            return conf_module_fail(error, &args[i].pos, "%s", "out of memory");
        c->index_count = i + 1;
    }
    c->index_pos = args[0].pos;
    return 0;
}

/* try_files FILE... LAST: LAST is =CODE, @name or a URI. */
static int apply_try_files(void *conf, const struct conf_arg *args, size_t count,
                           struct conf_module_error *error)
{
    struct static_conf *c = conf;
    const char *last = args[count - 1].text;
    if (last[0] == '=') {
        unsigned code;
        if (conf_parse_uint(last + 1, &code) != 0 || code < 200 || code > 599)
            return conf_module_fail(error, &args[count - 1].pos,
                                    "invalid code \"%s\" (expected =200 to =599)", last);
    } else if (last[0] != '@' && last[0] != '/' && last[0] != '$') {
        return conf_module_fail(error, &args[count - 1].pos,
                                "invalid fallback \"%s\" (expected =CODE, @name or a URI)", last);
    }
    for (size_t i = 0; i < count; i++) {
        if ((c->try_files[i] = strdup(args[i].text)) == NULL)
            return conf_module_fail(error, &args[i].pos, "%s", "out of memory");
        c->try_args[i] = args[i].pos;
        c->try_count = i + 1;
    }
    return 0;
}

/* expires off | epoch | max | [-]TIME */
static int apply_expires(void *conf, const struct conf_arg *args, size_t count,
                         struct conf_module_error *error)
{
    (void)count;
    struct static_conf *c = conf;
    const char *v = args[0].text;
    c->expires_s = 0;
    if (strcmp(v, "off") == 0) {
        c->expires = STATIC_EXPIRES_OFF;
    } else if (strcmp(v, "epoch") == 0) {
        c->expires = STATIC_EXPIRES_EPOCH;
    } else if (strcmp(v, "max") == 0) {
        c->expires = STATIC_EXPIRES_MAX;
    } else {
        bool negative = v[0] == '-';
        int64_t s;
        if (parse_time(v + (negative || v[0] == '+'), &s) != 0)
            return conf_module_fail(error, &args[0].pos,
                                    "invalid value \"%s\" (expected off, epoch, max or a time)", v);
        c->expires = STATIC_EXPIRES_TIME;
        c->expires_s = negative ? -s : s;
    }
    c->expires_pos = args[0].pos;
    return 0;
}

/* open_file_cache off | max=N [inactive=TIME] */
static int apply_open_file_cache(void *conf, const struct conf_arg *args, size_t count,
                                 struct conf_module_error *error)
{
    struct static_conf *c = conf;
    c->cache = (struct static_file_cache_conf){.max = 0, .inactive_ms = 60000};
    c->cache_pos = args[0].pos;
    if (strcmp(args[0].text, "off") == 0) {
        if (count > 1)
            return conf_module_fail(error, &args[1].pos, "%s", "\"off\" takes nothing after it");
        return 0;
    }
    bool have_max = false;
    for (size_t i = 0; i < count; i++) {
        const char *a = args[i].text;
        if (strncmp(a, "max=", 4) == 0) {
            struct conf_arg tail = conf_arg_tail(&args[i], 4);
            if (conf_arg_uint(&tail, "open_file_cache max", 1, 1000000, &c->cache.max, error) != 0)
                return -1;
            have_max = true;
        } else if (strncmp(a, "inactive=", 9) == 0) {
            int64_t s;
            if (parse_time(a + 9, &s) != 0 || s < 1 || s > 86400 * 365)
                return conf_module_fail(error, &args[i].pos, "invalid inactive time \"%s\"", a + 9);
            c->cache.inactive_ms = (uint32_t)(s * 1000);
        } else {
            return conf_module_fail(error, &args[i].pos,
                                    "invalid parameter \"%s\" (expected max=N, inactive=TIME)", a);
        }
    }
    if (!have_max)
        return conf_module_fail(error, &args[0].pos, "%s", "open_file_cache needs max=N or off");
    return 0;
}

static const struct conf_keyword ims_words[] = {
    {"exact", STATIC_IMS_EXACT},
    {"before", STATIC_IMS_BEFORE},
    {"off", STATIC_IMS_OFF},
};

#define ANYWHERE (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

static const struct conf_keyword precompressed_words[] = {
    {"off", STATIC_PRECOMPRESSED_OFF},
    {"on", STATIC_PRECOMPRESSED_ON},
    {"always", STATIC_PRECOMPRESSED_ALWAYS},
};

/* gzip_static, brotli_static, zstd_static: one keyword each. */
#define PRECOMPRESSED(NAME, CODING)                                                                \
    {                                                                                              \
        .name = NAME, .contexts = ANYWHERE, .min_args = 1, .max_args = 1,                          \
        .kind = CONF_KIND_KEYWORD, .base = CONF_BASE_MODULE,                                       \
        CONF_FIELD(struct static_conf, precompressed[CODING]), CONF_KEYWORDS(precompressed_words), \
        .what = NAME, .keep_pos = true,                                                            \
        .pos_offset = offsetof(struct static_conf, precompressed_pos[CODING])                      \
    }

/* A location with none of return, proxy_pass and rewrite serves files,
 * as nginx's: these say how, and need not be written there. */
static const struct conf_directive static_directives[] = {
    {.name = "root",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_PATH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct static_conf, root),
     .keep_pos = true,
     .pos_offset = offsetof(struct static_conf, root_pos)},
    {.name = "alias",
     .contexts = CONF_LOCATION,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_alias},
    {.name = "index",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = STATIC_INDEX_MAX,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_index},
    {.name = "try_files",
     .contexts = CONF_SERVER | CONF_LOCATION,
     .min_args = 2,
     .max_args = STATIC_TRY_FILES_MAX,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_try_files},
    {.name = "expires",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_expires},
    {.name = "etag",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct static_conf, etag),
     .keep_pos = true,
     .pos_offset = offsetof(struct static_conf, etag_pos)},
    {.name = "if_modified_since",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_KEYWORD,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct static_conf, ims),
     CONF_KEYWORDS(ims_words),
     .what = "if_modified_since",
     .keep_pos = true,
     .pos_offset = offsetof(struct static_conf, ims_pos)},
    {.name = "disable_symlinks",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct static_conf, no_symlinks),
     .keep_pos = true,
     .pos_offset = offsetof(struct static_conf, no_symlinks_pos)},
    {.name = "sendfile",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct static_conf, sendfile),
     .keep_pos = true,
     .pos_offset = offsetof(struct static_conf, sendfile_pos)},
    {.name = "autoindex",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct static_conf, autoindex),
     .keep_pos = true,
     .pos_offset = offsetof(struct static_conf, autoindex_pos)},
    {.name = "open_file_cache",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 2,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_open_file_cache},
    {.name = "open_file_cache_valid",
     .contexts = ANYWHERE,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_DURATION,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct static_conf, cache_valid_ms),
     .keep_pos = true,
     .pos_offset = offsetof(struct static_conf, cache_valid_pos)},
    PRECOMPRESSED("gzip_static", COMPRESS_GZIP),
    PRECOMPRESSED("brotli_static", COMPRESS_BR),
    PRECOMPRESSED("zstd_static", COMPRESS_ZSTD),
    {.name = NULL},
};

/* --------------------------------------------------------- inheritance */

/* open_file_cache_valid's default: a second, not nginx's minute, so that
 * a file replaced is served within a second. */
#define STATIC_CACHE_VALID_MS 1000

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct static_conf *c = conf;
    const struct static_conf *p = parent;
    if (p == NULL) {
        if (c->etag_pos.file == NULL)
            c->etag = true;
        if (c->ims_pos.file == NULL)
            c->ims = STATIC_IMS_EXACT;
        if (c->cache_pos.file == NULL)
            c->cache = (struct static_file_cache_conf){.max = 0, .inactive_ms = 60000};
        if (c->sendfile_pos.file == NULL)
            c->sendfile = true;
        if (c->cache_valid_pos.file == NULL)
            c->cache_valid_ms = STATIC_CACHE_VALID_MS;
        return 0;
    }
    /* Strings taken from the parent stay the parent's to free. */
    if (c->root == NULL && p->root != NULL) {
        c->root = p->root;
        c->root_pos = p->root_pos;
        c->root_inherited = true;
    }
    if (c->index_count == 0 && p->index_count > 0) {
        memcpy(c->index, p->index, p->index_count * sizeof(*c->index));
        c->index_count = p->index_count;
        c->index_pos = p->index_pos;
        c->index_inherited = true;
    }
    if (c->expires_pos.file == NULL) {
        c->expires = p->expires;
        c->expires_s = p->expires_s;
        c->expires_pos = p->expires_pos;
    }
    if (c->etag_pos.file == NULL) {
        c->etag = p->etag;
        c->etag_pos = p->etag_pos;
    }
    if (c->ims_pos.file == NULL) {
        c->ims = p->ims;
        c->ims_pos = p->ims_pos;
    }
    if (c->no_symlinks_pos.file == NULL) {
        c->no_symlinks = p->no_symlinks;
        c->no_symlinks_pos = p->no_symlinks_pos;
    }
    if (c->cache_pos.file == NULL) {
        c->cache = p->cache;
        c->cache_pos = p->cache_pos;
    }
    if (c->cache_valid_pos.file == NULL) {
        c->cache_valid_ms = p->cache_valid_ms;
        c->cache_valid_pos = p->cache_valid_pos;
    }
    if (c->sendfile_pos.file == NULL) {
        c->sendfile = p->sendfile;
        c->sendfile_pos = p->sendfile_pos;
    }
    if (c->autoindex_pos.file == NULL) {
        c->autoindex = p->autoindex;
        c->autoindex_pos = p->autoindex_pos;
    }
    for (int i = 0; i < COMPRESS_CODINGS; i++)
        if (c->precompressed_pos[i].file == NULL) {
            c->precompressed[i] = p->precompressed[i];
            c->precompressed_pos[i] = p->precompressed_pos[i];
        }
    return 0;
}

static void conf_free(void *conf)
{
    struct static_conf *c = conf;
    if (!c->root_inherited)
        free(c->root);
    free(c->alias);
    if (!c->index_inherited)
        for (size_t i = 0; i < c->index_count; i++)
            free(c->index[i]);
    for (size_t i = 0; i < c->try_count; i++)
        free(c->try_files[i]);
}

static int check(void *conf, struct conf_module_error *error)
{
    struct static_conf *c = conf;
    if (c->alias != NULL && c->root != NULL && !c->root_inherited)
        return conf_module_fail(error, &c->alias_pos, "%s",
                                "\"alias\" cannot be combined with \"root\" in one location");
    if (c->alias != NULL && error->where->regex && c->try_count > 0)
        return conf_module_fail(error, &c->alias_pos, "%s",
                                "\"alias\" in a regex location cannot be combined with "
                                "\"try_files\"");
    /* nginx serves such a location from its default root ("html" under
     * its prefix); corral has no prefix, so a root must be written.  An
     * if's location answers as its location does, which is checked. */
    const struct conf_module_where *w = error->where;
    if (w->context == CONF_LOCATION && !w->nested && !w->content && !w->passes && c->root == NULL &&
        c->alias == NULL && c->try_count == 0)
        return conf_module_fail(error, NULL,
                                "location \"%s\" serves files (it has no \"return\", "
                                "\"proxy_pass\" or \"rewrite\") but no \"root\" is set "
                                "for it, in it, its server or at top level",
                                w->path != NULL ? w->path : "");
    return 0;
}

/* --------------------------------------------------------------- build */

static const char *trim_slashes(const char *path, size_t *len)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (n == 1 && path[0] == '/')
        n = 0; /* root "/": the URI's own slash joins it */
    *len = n;
    return path;
}

static int build_tries(const struct static_conf *c, const struct http_module_build *b,
                       struct static_location *sl)
{
    struct static_try *tries = b->calloc(b->arena, c->try_count, sizeof(*tries));
    if (tries == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < c->try_count; i++) {
        struct static_try *t = &tries[i];
        const char *text = c->try_files[i];
        t->text = text;
        bool last = i + 1 == c->try_count;
        if (last && text[0] == '=') {
            t->kind = STATIC_TRY_CODE;
            t->code = (unsigned)strtoul(text + 1, NULL, 10);
            continue;
        }
        if (last && text[0] == '@') {
            t->kind = STATIC_TRY_NAMED;
            if ((t->named = b->named(b->arena, text)) == NULL) {
                /* Only the build knows the server's named locations. */
                corral_log(CORRAL_LOG_ERROR, "%s:%u:%u: no location \"%s\" in this server",
                           c->try_args[i].file, c->try_args[i].line, c->try_args[i].col, text);
                return -ENOENT;
            }
            continue;
        }
        t->kind = last ? STATIC_TRY_URI : STATIC_TRY_FILE;
        int err = b->compile(b->arena, text, &c->try_args[i], "try_files", &t->value);
        if (err != 0)
            return err;
    }
    sl->tries = tries;
    sl->try_count = c->try_count;
    return 0;
}

static const char *const default_index[] = {"index.html"};

static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct static_conf *c = conf;
    *out = NULL;
    /* A location that another module answers (return, proxy_pass) keeps
     * its handler: root there serves nothing, as nginx's.  A server's
     * own (b->loc NULL) serves the requests that no location takes, as
     * nginx's server-level configuration does. */
    if (b->loc != NULL && b->loc->handler != NULL)
        return 0;
    const char *base = c->alias != NULL ? c->alias : c->root;
    if (base == NULL && c->try_count == 0)
        return 0;
    struct static_location *sl = b->calloc(b->arena, 1, sizeof(*sl));
    if (sl == NULL)
        return -ENOMEM;
    if (base == NULL)
        base = "";
    sl->alias = c->alias != NULL; /* a location's only */
    assert(!sl->alias || b->loc != NULL);
    if (sl->alias && b->loc != NULL && b->loc->regex != NULL) {
        /* The whole path, $1... from the regex: it must stay under the
         * directory its text names before its first variable. */
        int err = b->compile(b->arena, c->alias, &c->alias_pos, "alias", &sl->alias_value);
        if (err != 0)
            return err;
        if (sl->alias_value == NULL) {
            err = b->compile_with(b->arena, c->alias, &c->alias_pos, "alias", NULL, true,
                                  &sl->alias_value);
            if (err != 0)
                return err;
        }
        if (vars_template_uses_captures(sl->alias_value))
            sl->captures = b->loc->regex;
        size_t fixed = strcspn(c->alias, "$");
        while (fixed > 0 && c->alias[fixed - 1] != '/')
            fixed--;
        sl->base = c->alias;
        sl->base_len = fixed;
    } else if (sl->alias) {
        /* nginx's alias replaces the prefix as text: "/i/" by "/data/i/";
         * what that makes is checked for dot segments per request. */
        sl->base = base;
        sl->base_len = strlen(base);
        sl->prefix = b->loc->path;
        sl->prefix_len = b->loc->path_len;
    } else {
        sl->base = trim_slashes(base, &sl->base_len);
    }
    if (c->index_count > 0) {
        sl->index = (const char *const *)c->index;
        sl->index_count = c->index_count;
    } else {
        sl->index = default_index;
        sl->index_count = 1;
    }
    sl->expires = c->expires;
    sl->expires_s = c->expires_s;
    sl->etag = c->etag;
    sl->ims = (enum static_ims)c->ims;
    sl->no_symlinks = c->no_symlinks;
    sl->cache = c->cache;
    sl->cache.valid_ms = c->cache_valid_ms;
    sl->sendfile = c->sendfile;
    sl->autoindex = c->autoindex;
    for (int i = 0; i < COMPRESS_CODINGS; i++) {
        sl->precompressed[i] = (uint8_t)c->precompressed[i];
        sl->any_precompressed |= c->precompressed[i] != STATIC_PRECOMPRESSED_OFF;
    }
    sl->mime = (struct static_mime){
        .types = b->mime_type_count > 0 ? b->mime_types : NULL,
        .count = b->mime_type_count,
        .default_type = b->default_type != NULL ? b->default_type : "text/plain",
    };
    sl->add_headers = http_module_built_in(*b->built, &add_header_module);
    if (c->try_count > 0) {
        int err = build_tries(c, b, sl);
        if (err != 0)
            return err;
    }
    *out = sl;
    return 0;
}

static const struct vars_module_var static_vars[] = {
    {.name = "request_filename", .make = static_request_filename},
    {.name = NULL},
};

struct http_module static_module = {
    .name = "static",
    .conf =
        {
            .name = "static",
            .directives = static_directives,
            .size = sizeof(struct static_conf),
            .merge = merge,
            .check = check,
            .free = conf_free,
        },
    .build = build,
    .content = &static_handler,
    .vars = static_vars,
};
