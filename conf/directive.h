/*
 * directive.h: what a directive table is (struct conf_directive, the
 * generic setter's kinds) and what a module's configuration is (struct
 * conf_module, created and merged per level as nginx's create_loc_conf
 * and merge_loc_conf), for conf/'s own tables and for the modules
 * outside conf/ that bring theirs (conf_module_register()).  It includes
 * nothing of proto/, so that a module there may declare its table.
 */
#ifndef CORRAL_CONF_DIRECTIVE_H
#define CORRAL_CONF_DIRECTIVE_H

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conf_node;

/* Where a directive or argument was written: for error messages. */
struct conf_pos {
    const char *file;   /* owned by the config (or the parse), never NULL */
    unsigned line, col; /* 1-based */
};

/* A word as written, unescaped, and where it starts. */
struct conf_arg {
    char *text;
    struct conf_pos pos;
};

/* Where a module's directive is applied, or a level of its struct is
 * checked (conf_module.check). */
struct conf_module_where {
    unsigned context; /* CONF_MAIN, CONF_SERVER or CONF_LOCATION */
    const char *name; /* the directive as written (an nginx spelling, say) */
    bool regex;       /* a regex location's */
    const char *path; /* a location's path as written; NULL: another level */
    /* For a location's check: whether it has a directive that gives it
     * its content (return, proxy_pass, stub_status), and one that may
     * hand its requests on (rewrite, if).  With neither, it serves
     * files, as nginx's location does. */
    bool content, passes;
    /* Inside a location's if block: the location nested in it (nginx's
     * noname location), whose settings inherit the location's. */
    bool nested;
    /* The directive's name; for a check, the level's block (the top
     * level's: the config file's start). */
    const struct conf_pos *pos;
    /* For a check only, once the whole config is known: whether it has an
     * upstream block `name`. */
    bool (*has_upstream)(const struct conf_module_where *where, const char *name);
    void *arg; /* has_upstream's */
};

/* What a module's own apply function (conf_directive.module_apply) or
 * check finds wrong: `message`, reported at `at` (one of its arguments'
 * positions; NULL: the directive's name, or for a check the level's
 * block).  `where` is filled in before the call. */
struct conf_module_error {
    char message[256];
    const struct conf_pos *at;
    const struct conf_module_where *where;
    /* A position inside an argument (its "value" after "name="), for `at`
     * to point at. */
    struct conf_pos at_inside;
};

/* Applies a directive of a module that sets more than one field, to the
 * module's struct at the level it is written at (`conf`), once the
 * generic checks passed (its form, its argument count, where it may be).
 * Returns 0, or -1 with `error` filled in. */
typedef int (*conf_module_apply_fn)(void *conf, const struct conf_arg *args, size_t count,
                                    struct conf_module_error *error);

/* The blocks a directive may appear in (bit set). */
enum {
    CONF_MAIN = 1u << 0,
    CONF_SERVER = 1u << 1,
    CONF_LOCATION = 1u << 2,
    CONF_UPSTREAM = 1u << 3,
    CONF_ADMIN = 1u << 4,
    CONF_EVENTS = 1u << 5, /* nginx's events { } (nginx_directives.c) */
    /* nginx's if (...) { } (rewrite.c): in a server, where it holds the
     * rewrite module's directives only (nginx's "if" context), and in a
     * location, where its block is a location of its own (nginx's "if in
     * location"), so that it may hold a few other directives too. */
    CONF_SERVER_IF = 1u << 6,
    CONF_LOCATION_IF = 1u << 7,
    CONF_IF = CONF_SERVER_IF | CONF_LOCATION_IF,
    CONF_OTEL_EXPORTER = 1u << 8,  /* otel_exporter { } at top level (trace.c) */
    CONF_STREAM = 1u << 9,         /* stream { } at top level (stream_directives.c) */
    CONF_STREAM_SERVER = 1u << 10, /* server { } in stream */
};

#define CONF_ARGS_MANY UINT_MAX

struct conf_state;
struct conf_directive;

/* Applies one directive that passed the generic checks.  Returns 0, or -1
 * with the error written (see conf__error_at()). */
typedef int (*conf_apply_fn)(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive);

/* An extra check of an argument before the generic setter reads it.
 * Returns 0, or -1 with the error written. */
typedef int (*conf_check_fn)(struct conf_state *state, const struct conf_arg *arg);

/* What a directive's argument is, for the generic setter; the field's C
 * type follows from it. */
enum conf_kind {
    CONF_KIND_NONE,     /* the entry has an apply function of its own */
    CONF_KIND_DURATION, /* uint32_t milliseconds, at least `min` */
    CONF_KIND_SIZE,     /* size_t bytes, from `min` to `max` */
    CONF_KIND_COUNT,    /* unsigned, from `min` to `max`; `zero_word` stands for 0 */
    CONF_KIND_SWITCH,   /* bool: on|off */
    CONF_KIND_KEYWORD,  /* an enum: the value of one of `keywords` */
    CONF_KIND_FLAGS,    /* unsigned: one or more of `keywords`, their values or'ed */
    CONF_KIND_STRING,   /* char *, malloc'd; empty refused when `what` is set */
    CONF_KIND_PATH,     /* char *, resolved against the directory of its file;
                           `zero_word` leaves it NULL */
};

/* The struct a field's offset is relative to; the block being applied
 * picks which one. */
enum conf_base {
    CONF_BASE_MAIN,     /* struct conf_config */
    CONF_BASE_LIMITS,   /* struct http_limits: the server's, else the top level's */
    CONF_BASE_HTTP2,    /* struct http2_conf: the server's, else the top level's */
    CONF_BASE_TLS,      /* struct conf_tls of the server */
    CONF_BASE_LOCATION, /* struct conf_location */
    CONF_BASE_UPSTREAM, /* struct conf_upstream */
    CONF_BASE_MODULE,   /* the struct of the module whose table has the entry
                           (struct conf_module), at the block's level */
};

/* One word a directive takes, and what it stands for. */
struct conf_keyword {
    const char *name;
    int value;
};

/*
 * A table entry.  The same name may appear in several entries with disjoint
 * contexts ("listen" in server and in admin, "server" at top level and in
 * upstream); the context picks the entry.  Each module's table ends with an
 * entry whose name is NULL.
 *
 * An entry that sets one field says which (base, offset) and what its
 * argument is (kind and bounds), and conf__apply_setting() sets it, as
 * nginx's ngx_command_t does.  A directive that builds structure (a block,
 * a list, several fields at once) has its own apply function.
 */
struct conf_directive {
    const char *name;
    unsigned contexts;           /* CONF_MAIN | ... */
    unsigned min_args, max_args; /* max CONF_ARGS_MANY: no limit */
    bool block;                  /* must be followed by "{ ... }"; otherwise by ";" */
    bool repeat;                 /* may appear more than once in one block */
    conf_apply_fn apply;         /* NULL: conf__apply_setting() */
    /* It gives a location its content handler (return, proxy_pass): one
     * of them per location, which conf_location.content names. */
    bool content;
    /* It may hand a location's requests on elsewhere (rewrite): a
     * location with it needs no content handler (conf_location.passes). */
    bool passes;
    /* CONF_BASE_MODULE entries that set several fields: the module's own
     * apply function, given its struct; NULL: the generic setter.  With a
     * `kind`, a check of its own before the generic setter, which sets
     * the field once it returns 0. */
    conf_module_apply_fn module_apply;
    /* A CONF_BASE_MODULE entry with `block` and a `module_apply` (nginx's
     * if): once module_apply took its arguments, the block's directives
     * are applied, in context `block_context` (CONF_SERVER_IF in a
     * server, CONF_LOCATION_IF in a location, of the bits it has), then
     * `module_close` gets the module's struct again.  The entries of the
     * module's own table set the level's structs, where the block is
     * written (an if's lines are steps of its level's list).  In a
     * location the block is a location of its own, nested in it (nginx's
     * noname location, conf_location.nested): the other modules' entries
     * set its structs, which inherit the location's. */
    unsigned block_context;
    void (*module_close)(void *conf);

    /* For conf__apply_setting(): */
    enum conf_kind kind;
    enum conf_base base;
    size_t offset;                       /* of the field in the base struct */
    bool keep_pos;                       /* the argument's position goes to pos_offset too */
    size_t pos_offset;                   /* of a struct conf_pos in the base struct */
    uint64_t min, max;                   /* bounds of a count or size; max 0: none */
    const char *what;                    /* the value's noun in messages ("worker count") */
    const char *zero_word;               /* a word that stands for 0 or none ("auto", "off") */
    const char *repeated;                /* CONF_KIND_FLAGS: the noun for a word given twice */
    const struct conf_keyword *keywords; /* CONF_KIND_KEYWORD, CONF_KIND_FLAGS */
    size_t keyword_count;
    conf_check_fn check; /* NULL: none */
};

/* Table entries for conf__apply_setting(), one field each. */
#define CONF_FIELD(type, field) .offset = offsetof(type, field)
#define CONF_KEYWORDS(list)     .keywords = list, .keyword_count = sizeof(list) / sizeof(list[0])

/*
 * A module's configuration, one struct of `size` bytes at each level (top
 * level, server, location), which the CONF_BASE_MODULE entries of its
 * table set at the level they are written at.  conf/ writes inheritance
 * once for every module: once the whole config is applied, the top
 * level's struct is merged with NULL (the module's defaults for what is
 * unset), each server's with the top level's, and each location's with
 * its server's.  A struct is there at every level of a parsed config.
 */
struct conf_module {
    const char *name;
    const struct conf_directive *directives; /* ends with a NULL name; NULL: none */
    size_t size;                             /* of its struct; 0: it has none */
    /* Marks every field unset, before a level's directives are applied
     * (the struct starts zeroed). */
    void (*init)(void *conf);
    /* Gives each field still unset `parent`'s value, or with `parent`
     * NULL (the top level) the module's default.  May check what the
     * level's fields say together: returns 0, or -1 with a message in
     * `error` (`len` bytes), reported at the level's block. */
    int (*merge)(void *conf, const void *parent, char *error, size_t len);
    /* Once every level is merged, checks what a level's struct says
     * against the rest of the config (error->where says which level) and
     * settles what depends on the level.  Returns 0, or -1 with `error`
     * filled in.  NULL: nothing to check. */
    int (*check)(void *conf, struct conf_module_error *error);
    /* For a location nested in a location by a block directive (nginx's
     * if: its noname location), once it is merged with the location's
     * struct (`location`, merged and checked): takes what a location
     * does not inherit from a server, the settings that make it answer
     * (proxy_pass's upstream, return), as nginx's merge does for a
     * noname location.  `content`: the nested location has a directive
     * with `content` of its own (proxy_pass inside the if), so it takes
     * none of the location's.  NULL: merge() is all. */
    void (*merge_nested)(void *conf, const void *location, bool content);
    /* Frees what the fields own; NULL: nothing. */
    void (*free)(void *conf);
};

/* Adds `module` to those every later parse knows: its directives are
 * accepted where their contexts say, and its struct is made at each
 * level.  Call before parsing, from one thread (the daemon's start);
 * registering one twice does nothing.  Returns 0, or -ENOSPC past
 * CONF_MODULES_MAX, -EEXIST when one of its directives has the name and a
 * context of a directive already known. */
#define CONF_MODULES_MAX 24
int conf_module_register(const struct conf_module *module);

/* Reads `text`, decimal digits only, into *out: for conf/'s own tables
 * and for a module's apply function (inline: a module outside conf/
 * links none of it).  Returns 0, or -1 with errno EINVAL (not digits) or
 * ERANGE (past UINT_MAX). */
static inline int conf_parse_uint(const char *text, unsigned *out)
{
    unsigned long long n = 0; /* past UINT_MAX it stops growing: no overflow */
    if (!(*text >= '0' && *text <= '9')) {
        errno = EINVAL;
        return -1;
    }
    for (; *text >= '0' && *text <= '9'; text++)
        if (n <= UINT_MAX)
            n = n * 10 + (unsigned)(*text - '0');
    if (*text != '\0') {
        errno = EINVAL;
        return -1;
    }
    if (n > UINT_MAX) {
        errno = ERANGE;
        return -1;
    }
    *out = (unsigned)n;
    return 0;
}

/* Reads the leading decimal digits of *p into *out and moves *p past
 * them; -1 when there are none.  A value beyond UINT64_MAX sets *overflow
 * and reading goes on, so that "99999999999999999999x" (bad syntax) and
 * "99999999999999999999" (too large) stay apart. */
static inline int conf_read_digits(const char **p, uint64_t *out, bool *overflow)
{
    const char *s = *p;
    uint64_t n = 0;
    *overflow = false;
    if (!(*s >= '0' && *s <= '9'))
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned digit = (unsigned)(*s - '0');
        if (n > (UINT64_MAX - digit) / 10)
            *overflow = true;
        else
            n = n * 10 + digit;
    }
    *p = s;
    *out = n;
    return 0;
}

/* n * unit into *out if it fits under `max`; the syntax was already checked. */
static inline int conf_scale(uint64_t n, bool overflow, uint64_t unit, uint64_t max, uint64_t *out)
{
    if (overflow || n > max / unit) {
        errno = ERANGE;
        return -1;
    }
    *out = n * unit;
    return 0;
}

/* The value syntax shared by directives, inline for modules' apply
 * functions (proto/ links nothing of conf/): a size (512, 16k, 10m, 1g)
 * and a duration (500ms, 30s, 5m, 1h, 2d; bare: seconds).  Return 0, or
 * -1 with errno EINVAL (not that syntax) or ERANGE (too large). */
static inline int conf_parse_size(const char *text, size_t *out)
{
    uint64_t n, unit;
    bool overflow;
    if (conf_read_digits(&text, &n, &overflow) != 0)
        goto invalid;
    if (text[0] == '\0')
        unit = 1;
    else if (text[1] != '\0')
        goto invalid;
    else if (text[0] == 'k' || text[0] == 'K')
        unit = 1024;
    else if (text[0] == 'm' || text[0] == 'M')
        unit = 1024 * 1024;
    else if (text[0] == 'g' || text[0] == 'G')
        unit = 1024 * 1024 * 1024;
    else
        goto invalid;
    if (conf_scale(n, overflow, unit, SIZE_MAX, &n) != 0)
        return -1;
    *out = (size_t)n;
    return 0;

invalid:
    errno = EINVAL;
    return -1;
}

static inline int conf_parse_duration(const char *text, uint32_t *out_ms)
{
    static const struct {
        const char *suffix;
        uint64_t ms;
    } units[] = {
        {"", 1000}, /* a bare number is seconds */
        {"ms", 1},
        {"s", 1000},
        {"m", 60 * 1000},
        {"h", 60 * 60 * 1000},
        {"d", 24 * 60 * 60 * 1000},
    };
    uint64_t n;
    bool overflow;
    if (conf_read_digits(&text, &n, &overflow) == 0) {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (strcmp(text, units[i].suffix) != 0)
                continue;
            if (conf_scale(n, overflow, units[i].ms, UINT32_MAX, &n) != 0)
                return -1;
            *out_ms = (uint32_t)n;
            return 0;
        }
    }
    errno = EINVAL;
    return -1;
}

/* Fills in `error` for a module's apply function: the message, and the
 * argument's position it is reported at (NULL: the directive's name).
 * Returns -1, for `return conf_module_fail(...)`. */
__attribute__((format(printf, 3, 4))) static inline int
conf_module_fail(struct conf_module_error *error, const struct conf_pos *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error->message, sizeof(error->message), fmt, ap);
    va_end(ap);
    error->at = at;
    return -1;
}

/* The part of `arg` from byte `offset` on, with its position: the value
 * of a "name=value" argument. */
static inline struct conf_arg conf_arg_tail(const struct conf_arg *arg, size_t offset)
{
    struct conf_arg tail = {.text = arg->text + offset, .pos = arg->pos};
    tail.pos.col += (unsigned)offset;
    return tail;
}

/* Whether `text` starts with `prefix`, a literal: a "name=value"
 * argument's name. */
#define conf_has_prefix(text, prefix) (strncmp(text, prefix, sizeof(prefix) - 1) == 0)

/* After a failure reported at `value` (a conf_arg_tail() of the caller's
 * frame): the position is kept in `error` itself, so that it outlives
 * the frame.  Returns -1. */
static inline int conf_module_fail_kept(struct conf_module_error *error,
                                        const struct conf_arg *value)
{
    if (error->at == &value->pos) {
        error->at_inside = value->pos;
        error->at = &error->at_inside;
    }
    return -1;
}

/* Reads `arg` as a number from `min` to `max` into *out, as conf/'s own
 * directives do.  Returns 0, or -1 with why in `error` (`what` names the
 * setting in range messages, e.g. "\"limit_conn\""). */
static inline int conf_arg_uint(const struct conf_arg *arg, const char *what, unsigned min,
                                unsigned max, unsigned *out, struct conf_module_error *error)
{
    unsigned n;
    int rc = conf_parse_uint(arg->text, &n);
    if (rc == 0 && n >= min && n <= max) {
        *out = n;
        return 0;
    }
    error->at = &arg->pos;
    if (rc != 0 && errno == EINVAL)
        snprintf(error->message, sizeof(error->message), "invalid number \"%s\"", arg->text);
    else if (max < UINT_MAX)
        snprintf(error->message, sizeof(error->message), "%s must be from %u to %u, got \"%s\"",
                 what, min, max, arg->text);
    else if (rc != 0)
        snprintf(error->message, sizeof(error->message), "number \"%s\" is too large", arg->text);
    else
        snprintf(error->message, sizeof(error->message), "%s must be at least %u, got \"%s\"", what,
                 min, arg->text);
    return -1;
}

/* `path` as written at `pos` in the config file `file`: an absolute path
 * as it is, a relative one joined to the file's directory, as the
 * CONF_KIND_PATH setter resolves (which then tidies "./" and "../").
 * Malloc'd; NULL when out of memory.  For a module's apply function that
 * reads a file when the config is loaded. */
static inline char *conf_path_join(const char *file, const char *path)
{
    const char *slash = strrchr(file, '/');
    size_t dir_len = path[0] == '/' || slash == NULL ? 0 : (size_t)(slash - file) + 1;
    size_t path_len = strlen(path);
    char *joined = malloc(dir_len + path_len + 1);
    if (joined == NULL)
        return NULL;
    memcpy(joined, file, dir_len);
    memcpy(joined + dir_len, path, path_len + 1);
    return joined;
}

/* The file `arg` names, resolved as conf_path_join() does, for an apply
 * function that reads it now: malloc'd, or NULL with why in `error` (an
 * empty name, out of memory). */
static inline char *conf_arg_file(const struct conf_arg *arg, struct conf_module_error *error)
{
    if (arg->text[0] == '\0') {
        conf_module_fail(error, &arg->pos, "%s", "empty file name");
        return NULL;
    }
    char *path = conf_path_join(arg->pos.file, arg->text);
    if (path == NULL)
        conf_module_fail(error, &arg->pos, "%s", "out of memory");
    return path;
}

/* Checks that `arg` is a URI on this server, as a directive naming a
 * subrequest's takes it: starting with "/", without space or control
 * bytes.  Returns 0, or -1 with why in `error`. */
static inline int conf_arg_uri(const struct conf_arg *arg, struct conf_module_error *error)
{
    if (arg->text[0] != '/')
        return conf_module_fail(error, &arg->pos, "\"%s\" is not a URI starting with \"/\"",
                                arg->text);
    for (const char *p = arg->text; *p != '\0'; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return conf_module_fail(error, &arg->pos, "%s", "space or control byte in the URI");
    return 0;
}

/* `module`'s struct in a level's block of module structs (conf_config,
 * conf_server and conf_location's `modules`), or NULL when the config was
 * parsed before `module` was registered. */
const void *conf_module_conf(const void *modules, const struct conf_module *module);

#endif
