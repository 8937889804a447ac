/*
 * runtime_vars.c: compiles a generation's maps and the values with
 * $variables its sites use, and keeps them for the generation's life.
 */
#include "cmd/runtime_vars.h"

#include "cmd/daemon.h"
#include "proto/http/module.h"
#include "proto/modules.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct runtime_vars {
    struct vars_map **maps;
    char **user_names; /* the variables `set` defines */
    size_t user_count;
    int user_err;
    const struct conf_config *config;
    struct vars_maps lookup;
    struct vars_template *log_format;
    enum vars_escape log_escape;
    struct owned *owned; /* freed with the generation */
};

/* A template, an array or a regex the generation keeps. */
struct owned {
    struct owned *next;
    void *p;
    bool regex; /* regex_free() it; else free() */
};

static int own_as(struct runtime_vars *vars, void *p, bool regex)
{
    struct owned *o = malloc(sizeof(*o));
    if (o == NULL)
        return -ENOMEM;
    *o = (struct owned){vars->owned, p, regex};
    vars->owned = o;
    return 0;
}

static int own(struct runtime_vars *vars, void *p)
{
    return own_as(vars, p, false);
}

void *runtime_vars_calloc(struct runtime_vars *vars, size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size);
    if (p != NULL && own(vars, p) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

int runtime_vars_name_regexes(struct runtime_vars *vars, char *const *names,
                              const struct conf_pos *pos, size_t count,
                              const struct http_regex *const **out, size_t *out_count)
{
    *out = NULL;
    *out_count = 0;
    size_t regexes = 0;
    for (size_t n = 0; n < count; n++)
        regexes += names[n][0] == '~';
    if (regexes == 0)
        return 0;
    const struct http_regex **items = runtime_vars_calloc(vars, regexes, sizeof(*items));
    if (items == NULL)
        return -ENOMEM;
    for (size_t n = 0, k = 0; n < count; n++) {
        if (names[n][0] != '~')
            continue;
        int err = runtime_vars_regex(vars, names[n] + 1, true, &pos[n], "server_name", &items[k++]);
        if (err != 0)
            return err;
    }
    *out = items;
    *out_count = regexes;
    return 0;
}

/* Reports a compile error of a value written at `pos`.  The column is the
 * argument's: escapes in a quoted string make an offset inside it
 * uncertain. */
static int report(int err, const struct conf_pos *pos, const char *directive,
                  const struct vars_error *error)
{
    if (err != -EINVAL)
        return err;
    /* An nginx variable corral lacks: say what to write instead. */
    static const char unknown[] = "unknown variable \"$";
    char name[64], note[400];
    const char *start = error->message + sizeof(unknown) - 1;
    size_t len = strncmp(error->message, unknown, sizeof(unknown) - 1) == 0 ? strcspn(start, "\"")
                                                                            : sizeof(name);
    if (len < sizeof(name)) {
        memcpy(name, start, len);
        name[len] = '\0';
        if (conf_nginx_variable_note(name, note, sizeof(note)) != NULL) {
            log_error("%s:%u:%u: %s: %s", pos->file, pos->line, pos->col, directive, note);
            return err;
        }
    }
    log_error("%s:%u:%u: %s: %s", pos->file, pos->line, pos->col, directive, error->message);
    return err;
}

int runtime_vars_compile_any(struct runtime_vars *vars, const char *text,
                             const struct conf_pos *pos, const char *directive,
                             const struct vars_template **out)
{
    struct vars_template *t;
    struct vars_error error;
    int err = vars_compile(text, &vars->lookup, &t, &error);
    if (err != 0)
        return report(err, pos, directive, &error);
    if (own(vars, t) != 0) {
        vars_template_free(t);
        return -ENOMEM;
    }
    *out = t;
    return 0;
}

int runtime_vars_compile(struct runtime_vars *vars, const char *text, const struct conf_pos *pos,
                         const char *directive, const struct vars_template **out)
{
    *out = NULL;
    if (strchr(text, '$') == NULL)
        return 0;
    return runtime_vars_compile_any(vars, text, pos, directive, out);
}

static int map_build(struct runtime_vars *vars, const struct conf_map *conf, struct vars_map *map)
{
    struct vars_error error;
    int err = vars_map_set_source(map, conf->source, &vars->lookup, &error);
    if (err != 0)
        return report(err, &conf->source_pos, "map", &error);
    for (size_t i = 0; i < conf->entry_count; i++) {
        const struct conf_map_entry *e = &conf->entries[i];
        bool in_value;
        err = vars_map_add(map, e->key, e->value, &vars->lookup, &error, &in_value);
        if (err != 0)
            return report(err, in_value ? &e->value_pos : &e->key_pos, "map", &error);
    }
    return 0;
}

static enum vars_escape log_escape(enum conf_log_escape escape)
{
    switch (escape) {
    case CONF_LOG_ESCAPE_JSON: return VARS_JSON;
    case CONF_LOG_ESCAPE_NONE: return VARS_RAW;
    case CONF_LOG_ESCAPE_DEFAULT: break;
    }
    return VARS_LOG;
}

/* Whether `name` is a log_format of `config` (or the built-in combined). */
static bool log_format_known(const struct conf_config *config, const char *name)
{
    if (strcmp(name, "combined") == 0)
        return true;
    for (size_t i = 0; i < config->log_format_count; i++)
        if (strcmp(config->log_formats[i].name, name) == 0)
            return true;
    return false;
}

/* Checks the format names of one level's access_log lines. */
static int log_names_check(const struct conf_config *config, const struct conf_access_logs *logs)
{
    for (size_t i = 0; i < logs->count; i++) {
        const struct conf_access_log *log = &logs->items[i];
        if (log->format == NULL || log_format_known(config, log->format))
            continue;
        const struct conf_pos *pos = &log->format_pos;
        log_error("%s:%u:%u: access_log: unknown log_format \"%s\"", pos->file, pos->line, pos->col,
                  log->format);
        return -EINVAL;
    }
    return 0;
}

/* Compiles the format access_log names (without a name: log_format's one
 * string, else the default) and picks its escaping.  Every named format is
 * compiled, so that a bad variable is found in one no log uses yet. */
static int log_format_build(struct runtime_vars *vars, const struct conf_config *config)
{
    const char *want = config->access_log_format;
    const char *text = config->log_format;
    const struct conf_pos *pos = &config->log_format_pos;
    struct vars_error error;
    vars->log_escape = VARS_LOG;
    bool found = want == NULL;
    if (want != NULL && strcmp(want, "combined") == 0) {
        text = ACCESS_LOG_COMBINED;
        found = true;
    }
    for (size_t i = 0; i < config->log_format_count; i++) {
        const struct conf_log_format *f = &config->log_formats[i];
        struct vars_template *t;
        int err = vars_compile(f->format, &vars->lookup, &t, &error);
        if (err != 0)
            return report(err, &f->format_pos, "log_format", &error);
        vars_template_free(t);
        if (want != NULL && strcmp(f->name, want) == 0) {
            text = f->format;
            pos = &f->format_pos;
            vars->log_escape = log_escape(f->escape);
            found = true;
        }
    }
    if (!found) {
        pos = &config->access_log_format_pos;
        log_error("%s:%u:%u: access_log: unknown log_format \"%s\"", pos->file, pos->line, pos->col,
                  want);
        return -EINVAL;
    }
    int checked = log_names_check(config, &config->access_logs);
    for (size_t s = 0; s < config->server_count && checked == 0; s++) {
        const struct conf_server *server = &config->servers[s];
        checked = log_names_check(config, &server->access_logs);
        for (size_t l = 0; l < server->location_count && checked == 0; l++)
            checked = log_names_check(config, &server->locations[l].access_logs);
    }
    if (checked != 0)
        return checked;
    if (config->log_format != NULL && text != config->log_format) {
        /* log_format's one string is checked even when unused. */
        struct vars_template *t;
        int err = vars_compile(config->log_format, &vars->lookup, &t, &error);
        if (err != 0)
            return report(err, &config->log_format_pos, "log_format", &error);
        vars_template_free(t);
    }
    if (text == NULL)
        return 0;
    int err = vars_compile(text, &vars->lookup, &vars->log_format, &error);
    return err != 0 ? report(err, pos, "log_format", &error) : 0;
}

int runtime_vars_log_format_for(struct runtime_vars *vars, const struct conf_config *config,
                                const char *name, const struct vars_template **out,
                                enum vars_escape *escape)
{
    const char *text = config->log_format;
    const struct conf_pos *pos = &config->log_format_pos;
    *escape = VARS_LOG;
    if (name != NULL && strcmp(name, "combined") == 0)
        text = ACCESS_LOG_COMBINED;
    for (size_t i = 0; name != NULL && i < config->log_format_count; i++) {
        const struct conf_log_format *f = &config->log_formats[i];
        if (strcmp(f->name, name) == 0) {
            text = f->format;
            pos = &f->format_pos;
            *escape = log_escape(f->escape);
        }
    }
    if (text == NULL)
        text = ACCESS_LOG_COMBINED_TIMED;
    return runtime_vars_compile_any(vars, text, pos, "log_format", out);
}

/* One variable a `set` line defines: once, whatever its case and however
 * many lines set it; never a map's name. */
static void user_variable(void *arg, const char *name, const struct conf_pos *pos)
{
    struct runtime_vars *vars = arg;
    if (vars->user_err != 0)
        return;
    for (size_t i = 0; i < vars->config->map_count; i++)
        if (strcasecmp(vars->config->maps[i].name, name) == 0) {
            const struct conf_pos *map = &vars->config->maps[i].pos;
            bool here = strcmp(map->file, pos->file) == 0;
            log_error("%s:%u:%u: set: \"$%s\" is a map's variable (map at %s%s%u)", pos->file,
                      pos->line, pos->col, name, here ? "line " : map->file, here ? "" : ":",
                      map->line);
            vars->user_err = -EINVAL;
            return;
        }
    for (size_t i = 0; i < vars->user_count; i++)
        if (strcasecmp(vars->user_names[i], name) == 0)
            return;
    char **names = realloc(vars->user_names, (vars->user_count + 1) * sizeof(*names));
    char *copy = strdup(name);
    if (names == NULL || copy == NULL) {
        free(copy);
        vars->user_err = -ENOMEM;
        if (names != NULL)
            vars->user_names = names;
        return;
    }
    vars->user_names = names;
    vars->user_names[vars->user_count++] = copy;
}

/* Every variable a module defines (`set`), at every level, before any
 * value is compiled: a value may read one set anywhere, as in nginx. */
static int user_variables(struct runtime_vars *vars, const struct conf_config *config)
{
    vars->config = config;
    for (size_t m = 0; m < modules_count; m++) {
        const struct http_module *module = modules_list[m];
        if (module->variables == NULL)
            continue;
        const void *c = conf_module_conf(config->modules, &module->conf);
        if (c != NULL)
            module->variables(c, user_variable, vars);
        for (size_t s = 0; s < config->server_count; s++) {
            const struct conf_server *server = &config->servers[s];
            if ((c = conf_module_conf(server->modules, &module->conf)) != NULL)
                module->variables(c, user_variable, vars);
            for (size_t l = 0; l < server->location_count; l++)
                if ((c = conf_module_conf(server->locations[l].modules, &module->conf)) != NULL)
                    module->variables(c, user_variable, vars);
        }
        vars->lookup.user_names = (const char *const *)vars->user_names;
        vars->lookup.user_count = vars->user_count;
        vars->lookup.user_slot = module->slot;
    }
    vars->config = NULL;
    return vars->user_err;
}

int runtime_vars_new(const struct conf_config *config, struct runtime_vars **out)
{
    struct runtime_vars *vars = calloc(1, sizeof(*vars));
    *out = vars;
    if (vars == NULL)
        return -ENOMEM;
    vars->maps = calloc(config->map_count ? config->map_count : 1, sizeof(*vars->maps));
    if (vars->maps == NULL)
        return -ENOMEM;
    /* Every name first: a map's values may read maps defined after it,
     * and variables set anywhere. */
    for (size_t i = 0; i < config->map_count; i++) {
        vars->maps[i] = vars_map_new(config->maps[i].name);
        if (vars->maps[i] == NULL)
            return -ENOMEM;
        vars->lookup.maps = vars->maps;
        vars->lookup.count = i + 1;
    }
    int users = user_variables(vars, config);
    if (users != 0)
        return users;
    for (size_t i = 0; i < config->map_count; i++) {
        int err = map_build(vars, &config->maps[i], vars->maps[i]);
        if (err != 0)
            return err;
    }
    return log_format_build(vars, config);
}

void runtime_vars_free(struct runtime_vars *vars)
{
    if (vars == NULL)
        return;
    while (vars->owned != NULL) {
        struct owned *o = vars->owned;
        vars->owned = o->next;
        if (o->regex)
            regex_free(o->p);
        else
            free(o->p); /* a template is one allocation */
        free(o);
    }
    for (size_t i = 0; vars->maps != NULL && i < vars->lookup.count; i++)
        vars_map_free(vars->maps[i]);
    for (size_t i = 0; i < vars->user_count; i++)
        free(vars->user_names[i]);
    free(vars->user_names);
    free(vars->maps);
    vars_template_free(vars->log_format);
    free(vars);
}

int runtime_vars_regex(struct runtime_vars *vars, const char *pattern, bool caseless,
                       const struct conf_pos *pos, const char *directive,
                       const struct http_regex **out)
{
    char message[120];
    size_t offset;
    struct http_regex *re;
    int err = regex_compile(pattern, caseless, &re, message, sizeof(message), &offset);
    if (err == -EINVAL)
        log_error("%s:%u:%u: %s: invalid regex \"%s\": %s at offset %zu", pos->file, pos->line,
                  pos->col, directive, pattern, message, offset);
    if (err != 0)
        return err;
    if (own_as(vars, re, true) != 0) {
        regex_free(re);
        return -ENOMEM;
    }
    *out = re;
    return 0;
}

void runtime_vars_set_captures(struct runtime_vars *vars, const struct http_regex *re)
{
    vars->lookup.captures = re;
}

void runtime_vars_set_host_regexes(struct runtime_vars *vars, const struct http_regex *const *res,
                                   size_t count)
{
    vars->lookup.host_regexes = res;
    vars->lookup.host_regex_count = count;
}

const struct vars_template *runtime_vars_log_format(const struct runtime_vars *vars)
{
    return vars != NULL ? vars->log_format : NULL;
}

enum vars_escape runtime_vars_log_escape(const struct runtime_vars *vars)
{
    return vars != NULL ? vars->log_escape : VARS_LOG;
}
