/*
 * setting.c: the generic setter.  A table entry that sets one field names
 * its struct, offset and argument kind; this file parses the argument,
 * checks its bounds with the same messages everywhere, and stores it.
 */
#include "registry.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The struct the entry's offset is relative to, in the block being applied. */
static char *base_of(struct conf_state *state, enum conf_base base)
{
    switch (base) {
    case CONF_BASE_MAIN: return (char *)state->config;
    case CONF_BASE_LIMITS:
        return (char *)(state->server != NULL ? &state->server->http.limits
                                              : &state->config->http.limits);
    case CONF_BASE_HTTP2:
        return (char *)(state->server != NULL ? &state->server->http.http2
                                              : &state->config->http.http2);
    case CONF_BASE_TLS: return (char *)conf__block_tls(state);
    case CONF_BASE_LOCATION: return (char *)state->location;
    case CONF_BASE_UPSTREAM: return (char *)state->upstream;
    case CONF_BASE_MODULE: break; /* conf__apply_setting() asks module.c */
    }
    return NULL;
}

/* "1s", "1ms", "1k", "128k": a bound as a message shows it. */
static const char *show_duration(char *buf, size_t len, uint64_t ms)
{
    if (ms % 1000 == 0)
        snprintf(buf, len, "%us", (unsigned)(ms / 1000));
    else
        snprintf(buf, len, "%ums", (unsigned)ms);
    return buf;
}

static const char *show_size(char *buf, size_t len, uint64_t size)
{
    if (size != 0 && size % 1024 == 0)
        snprintf(buf, len, "%uk", (unsigned)(size / 1024));
    else
        snprintf(buf, len, "%u", (unsigned)size);
    return buf;
}

static int set_duration(struct conf_state *state, const struct conf_directive *directive,
                        const struct conf_arg *arg, char *field)
{
    uint32_t ms;
    if (conf__arg_duration(state, arg, &ms) != 0)
        return -1;
    if (ms < directive->min) {
        char least[32];
        return conf__error_at(state->error, &arg->pos, "\"%s\" must be at least %s, got \"%s\"",
                              directive->name, show_duration(least, sizeof(least), directive->min),
                              arg->text);
    }
    if (directive->max != 0 && ms > directive->max) {
        char most[32];
        return conf__error_at(state->error, &arg->pos, "\"%s\" must be at most %s, got \"%s\"",
                              directive->name, show_duration(most, sizeof(most), directive->max),
                              arg->text);
    }
    *(uint32_t *)(void *)field = ms;
    return 0;
}

static int set_size(struct conf_state *state, const struct conf_directive *directive,
                    const struct conf_arg *arg, char *field)
{
    size_t size;
    if (conf__arg_size(state, arg, &size) != 0)
        return -1;
    char least[32], most[32];
    if (directive->max != 0 && (size < directive->min || size > directive->max))
        return conf__error_at(state->error, &arg->pos,
                              "\"%s\" must be between %s and %s, got \"%s\"", directive->name,
                              show_size(least, sizeof(least), directive->min),
                              show_size(most, sizeof(most), directive->max), arg->text);
    if (size < directive->min)
        return conf__error_at(state->error, &arg->pos, "\"%s\" must be at least %s, got \"%s\"",
                              directive->name, show_size(least, sizeof(least), directive->min),
                              arg->text);
    *(size_t *)(void *)field = size;
    return 0;
}

static int set_count(struct conf_state *state, const struct conf_directive *directive,
                     const struct conf_arg *arg, char *field)
{
    unsigned *count = (unsigned *)(void *)field;
    if (directive->zero_word != NULL) {
        unsigned n;
        if (strcmp(arg->text, directive->zero_word) == 0) {
            *count = 0;
            return 0;
        }
        if (conf__parse_uint(arg->text, &n) != 0 && errno == EINVAL)
            return conf__error_at(state->error, &arg->pos,
                                  "invalid %s \"%s\" (expected a number or %s)", directive->what,
                                  arg->text, directive->zero_word);
    }
    char what[64];
    snprintf(what, sizeof(what), "\"%s\"", directive->name);
    return conf__arg_uint(state, arg, what, (unsigned)directive->min,
                          directive->max != 0 ? (unsigned)directive->max : UINT_MAX, count);
}

/* Every argument a keyword, each at most once; their values or'ed. */
static int set_flags(struct conf_state *state, const struct conf_directive *directive,
                     const struct conf_node *node, char *field)
{
    unsigned mask = 0;
    for (size_t i = 0; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        int bit;
        if (conf__arg_keyword(state, arg, directive->what, directive->keywords,
                              directive->keyword_count, &bit) != 0)
            return -1;
        if (mask & (unsigned)bit)
            return conf__error_at(state->error, &arg->pos, "duplicate %s \"%s\"",
                                  directive->repeated, arg->text);
        mask |= (unsigned)bit;
    }
    *(unsigned *)(void *)field = mask;
    return 0;
}

int conf__apply_setting(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    char *base = directive->base == CONF_BASE_MODULE ? conf__module_base(state, directive)
                                                     : base_of(state, directive->base);
    if (base == NULL)
        return conf__error_at(state->error, &node->name.pos, "out of memory");
    if (directive->module_apply != NULL) {
        const struct conf_module_where where = {
            .context = state->location != NULL ? CONF_LOCATION
                       : state->server != NULL ? CONF_SERVER
                                               : CONF_MAIN,
            .regex = state->location != NULL && state->location->regex,
            .nested = state->enclosing != NULL,
            .name = node->name.text,
            .pos = &node->name.pos,
        };
        struct conf_module_error error = {.at = NULL, .where = &where};
        if (directive->module_apply(base, node->args, node->arg_count, &error) != 0)
            return conf__error_at(state->error, error.at != NULL ? error.at : &node->name.pos, "%s",
                                  error.message);
        if (directive->block) {
            /* Its directives' errors are reported as they happen. */
            unsigned context = directive->block_context &
                               (state->location != NULL ? CONF_LOCATION_IF : CONF_SERVER_IF);
            int rc = state->location != NULL ? conf__apply_nested(state, node, directive, context)
                                             : conf__apply_block(state, node, context);
            if (directive->module_close != NULL)
                directive->module_close(base);
            return rc;
        }
        if (directive->kind == CONF_KIND_NONE)
            return 0;
    }
    char *field = base + directive->offset;
    const struct conf_arg *arg = &node->args[0];
    if (directive->check != NULL && directive->check(state, arg) != 0)
        return -1;
    if (directive->keep_pos)
        *(struct conf_pos *)(void *)(base + directive->pos_offset) = arg->pos;
    switch (directive->kind) {
    case CONF_KIND_NONE: break;
    case CONF_KIND_DURATION: return set_duration(state, directive, arg, field);
    case CONF_KIND_SIZE: return set_size(state, directive, arg, field);
    case CONF_KIND_COUNT: return set_count(state, directive, arg, field);
    case CONF_KIND_SWITCH: return conf__arg_switch(state, arg, (bool *)(void *)field);
    case CONF_KIND_KEYWORD:
        /* An enum is int-sized: the tables assert it of their fields. */
        return conf__arg_keyword(state, arg, directive->what, directive->keywords,
                                 directive->keyword_count, (int *)(void *)field);
    case CONF_KIND_FLAGS: return set_flags(state, directive, node, field);
    case CONF_KIND_STRING: {
        char **text = (char **)(void *)field;
        if (directive->what != NULL && arg->text[0] == '\0')
            return conf__error_at(state->error, &arg->pos, "empty %s", directive->what);
        *text = conf__strdup(state, &arg->pos, arg->text);
        return *text != NULL ? 0 : -1;
    }
    case CONF_KIND_PATH:
        if (directive->zero_word != NULL && strcmp(arg->text, directive->zero_word) == 0)
            return 0;
        return conf__arg_path(state, arg, (char **)(void *)field);
    }
    return conf__error_at(state->error, &node->name.pos, "\"%s\" has no setter", directive->name);
}

/* The bytes of a field of `kind`. */
static size_t field_size(enum conf_kind kind)
{
    switch (kind) {
    case CONF_KIND_DURATION: return sizeof(uint32_t);
    case CONF_KIND_SIZE: return sizeof(size_t);
    case CONF_KIND_COUNT:
    case CONF_KIND_FLAGS: return sizeof(unsigned);
    case CONF_KIND_SWITCH: return sizeof(bool);
    case CONF_KIND_KEYWORD: return sizeof(int);
    case CONF_KIND_NONE:
    case CONF_KIND_STRING:
    case CONF_KIND_PATH: break;
    }
    return 0;
}

void conf__inherit_settings(struct conf_state *state, size_t index)
{
    struct conf_server *server = &state->config->servers[index];
    const struct conf_node *node = state->server_nodes[index];
    for (size_t t = 0; t < conf__table_count; t++) {
        for (const struct conf_directive *d = conf__tables[t]; d->name != NULL; d++) {
            if ((d->contexts & (CONF_MAIN | CONF_SERVER)) != (CONF_MAIN | CONF_SERVER) ||
                conf__find_child(node, d->name) != NULL)
                continue;
            const char *from;
            char *to;
            if (d->base == CONF_BASE_LIMITS) {
                from = (const char *)&state->config->http.limits;
                to = (char *)&server->http.limits;
            } else if (d->base == CONF_BASE_HTTP2) {
                from = (const char *)&state->config->http.http2;
                to = (char *)&server->http.http2;
            } else {
                continue;
            }
            memcpy(to + d->offset, from + d->offset, field_size(d->kind));
        }
    }
}

const struct conf_node *conf__find_child(const struct conf_node *block, const char *name)
{
    for (size_t i = 0; i < block->child_count; i++)
        if (strcmp(block->children[i].name.text, name) == 0)
            return &block->children[i];
    return NULL;
}
