/*
 * module.c: the modules registered from outside conf/ (directive.h): their
 * directive tables, searched after conf/'s own, and their structs, one
 * block per level holding every module's, made when a level's directive
 * first needs it and merged top level -> server -> location once the
 * whole config is applied.  Inheritance is written here once, for every
 * module.
 */
#include "registry.h"

#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

static const struct conf_module *modules[CONF_MODULES_MAX];
static size_t offsets[CONF_MODULES_MAX];
static size_t module_count;
static size_t block_size = sizeof(size_t); /* the block's module count first */

/* A block starts with how many modules it holds: one made before a later
 * registration is never read past its end. */
static size_t block_count(const void *block)
{
    return *(const size_t *)block;
}

static bool contexts_clash(const struct conf_directive *a, const struct conf_directive *b)
{
    return strcmp(a->name, b->name) == 0 && (a->contexts & b->contexts) != 0;
}

static bool clashes(const struct conf_directive *d)
{
    for (size_t t = 0; t < conf__table_count; t++)
        for (const struct conf_directive *e = conf__tables[t]; e->name != NULL; e++)
            if (contexts_clash(d, e))
                return true;
    for (size_t m = 0; m < module_count; m++)
        for (const struct conf_directive *e = modules[m]->directives; e != NULL && e->name != NULL;
             e++)
            if (contexts_clash(d, e))
                return true;
    return false;
}

int conf_module_register(const struct conf_module *module)
{
    for (size_t m = 0; m < module_count; m++)
        if (modules[m] == module)
            return 0;
    if (module_count == CONF_MODULES_MAX)
        return -ENOSPC;
    for (const struct conf_directive *d = module->directives; d != NULL && d->name != NULL; d++)
        if (clashes(d))
            return -EEXIST;
    size_t align = alignof(max_align_t);
    size_t offset = (block_size + align - 1) / align * align;
    offsets[module_count] = offset;
    block_size = offset + module->size;
    modules[module_count++] = module;
    return 0;
}

const void *conf_module_conf(const void *block, const struct conf_module *module)
{
    if (block == NULL)
        return NULL;
    for (size_t m = 0; m < block_count(block); m++)
        if (modules[m] == module)
            return module->size != 0 ? (const char *)block + offsets[m] : NULL;
    return NULL;
}

size_t conf__module_table_count(void)
{
    return module_count;
}

const struct conf_directive *conf__module_table(size_t index)
{
    static const struct conf_directive none = {0};
    return modules[index]->directives != NULL ? modules[index]->directives : &none;
}

/* A new block with every registered module's struct initialised, or NULL
 * when out of memory. */
static void *block_new(void)
{
    char *block = calloc(1, block_size);
    if (block == NULL)
        return NULL;
    *(size_t *)(void *)block = module_count;
    for (size_t m = 0; m < module_count; m++)
        if (modules[m]->init != NULL)
            modules[m]->init(block + offsets[m]);
    return block;
}

/* The level's block (`*slot`), made if need be; NULL when out of memory. */
static char *block_of(void **slot)
{
    if (*slot == NULL)
        *slot = block_new();
    return *slot;
}

/* Whether `directive` is an entry of module `m`'s table. */
static bool in_table(size_t m, const struct conf_directive *directive)
{
    for (const struct conf_directive *d = modules[m]->directives; d != NULL && d->name != NULL; d++)
        if (d == directive)
            return true;
    return false;
}

char *conf__module_base(struct conf_state *state, const struct conf_directive *directive)
{
    void **slot = state->location != NULL ? &state->location->modules
                  : state->server != NULL ? &state->server->modules
                                          : &state->config->modules;
    for (size_t m = 0; m < module_count; m++) {
        if (!in_table(m, directive))
            continue;
        /* Inside a location's if: the if's own module's lines are steps
         * of the location's list (directive.h). */
        if (state->enclosing != NULL && in_table(m, state->block))
            slot = &state->enclosing->modules;
        char *block = block_of(slot);
        return block != NULL ? block + offsets[m] : NULL;
    }
    return NULL; /* not a registered module's entry: a table's mistake */
}

/* Merges each module's struct of the block at `slot` with `parent`'s
 * (NULL: defaults); a module's complaint is reported at `pos`. */
static int merge(struct conf_state *state, const struct conf_pos *pos, void *slot,
                 const void *parent_slot)
{
    char *block = block_of(slot);
    if (block == NULL)
        return conf__error_at(state->error, pos, "out of memory");
    const char *parent = parent_slot != NULL ? *(char *const *)parent_slot : NULL;
    for (size_t m = 0; m < block_count(block); m++) {
        if (modules[m]->merge == NULL)
            continue;
        char message[256] = "";
        const char *from = parent != NULL ? parent + offsets[m] : NULL;
        if (modules[m]->merge(block + offsets[m], from, message, sizeof(message)) != 0)
            return conf__error_at(state->error, pos, "%s", message);
    }
    return 0;
}

static bool has_upstream(const struct conf_module_where *where, const char *name)
{
    const struct conf_state *state = where->arg;
    size_t index;
    return conf__index_find(&state->upstream_names, name, strlen(name), &index);
}

/* Runs each module's check on its struct in `block`, a level's merged
 * block, as `where` says. */
static int check(struct conf_state *state, void *block, const struct conf_module_where *where)
{
    for (size_t m = 0; block != NULL && m < block_count(block); m++) {
        if (modules[m]->check == NULL)
            continue;
        struct conf_module_error error = {.at = NULL, .where = where};
        if (modules[m]->check((char *)block + offsets[m], &error) != 0)
            return conf__error_at(state->error, error.at != NULL ? error.at : where->pos, "%s",
                                  error.message);
    }
    return 0;
}

/* The locations nested in `location` (its if blocks), once it is merged
 * and checked: each merged with it, given what a noname location takes
 * (merge_nested), then checked as a location.  One whose block set none
 * of their structs stays without: it is the location itself. */
static int nested_finish(struct conf_state *state, struct conf_location *location)
{
    for (size_t n = 0; n < location->nested_count; n++) {
        struct conf_location *nested = &location->nested[n];
        if (nested->modules == NULL)
            continue;
        if (merge(state, &nested->pos, &nested->modules, &location->modules) != 0)
            return -1;
        char *block = nested->modules;
        const char *from = location->modules;
        for (size_t m = 0; m < block_count(block); m++)
            if (modules[m]->merge_nested != NULL)
                modules[m]->merge_nested(block + offsets[m], from + offsets[m],
                                         nested->content != NULL);
        struct conf_module_where where = {.context = CONF_LOCATION,
                                          .regex = nested->regex,
                                          .nested = true,
                                          .pos = &nested->pos,
                                          .has_upstream = has_upstream,
                                          .arg = state};
        if (check(state, block, &where) != 0)
            return -1;
    }
    return 0;
}

/* Every level's check, once every level is merged. */
static int check_levels(struct conf_state *state, const struct conf_pos *top)
{
    struct conf_config *config = state->config;
    struct conf_module_where where = {
        .context = CONF_MAIN, .pos = top, .has_upstream = has_upstream, .arg = state};
    if (check(state, config->modules, &where) != 0)
        return -1;
    for (size_t s = 0; s < config->server_count; s++) {
        struct conf_server *server = &config->servers[s];
        where = (struct conf_module_where){.context = CONF_SERVER,
                                           .pos = &server->pos,
                                           .has_upstream = has_upstream,
                                           .arg = state};
        if (check(state, server->modules, &where) != 0)
            return -1;
        for (size_t l = 0; l < server->location_count; l++) {
            struct conf_location *location = &server->locations[l];
            where = (struct conf_module_where){.context = CONF_LOCATION,
                                               .regex = location->regex,
                                               .path = location->path,
                                               .content = location->content != NULL,
                                               .passes = location->passes,
                                               .pos = &location->pos,
                                               .has_upstream = has_upstream,
                                               .arg = state};
            if (check(state, location->modules, &where) != 0 || nested_finish(state, location) != 0)
                return -1;
        }
    }
    return 0;
}

int conf__modules_finish(struct conf_state *state)
{
    struct conf_config *config = state->config;
    if (module_count == 0)
        return 0;
    struct conf_pos top = {config->path != NULL ? config->path : "<config>", 1, 1};
    if (merge(state, &top, &config->modules, NULL) != 0)
        return -1;
    static const struct conf_levels levels = {
        offsetof(struct conf_config, modules),
        offsetof(struct conf_server, modules),
        offsetof(struct conf_location, modules),
        merge,
    };
    if (conf__levels_merge(state, &levels) != 0)
        return -1;
    return check_levels(state, &top);
}

static void block_free(void *block)
{
    if (block == NULL)
        return;
    for (size_t m = 0; m < block_count(block); m++)
        if (modules[m]->free != NULL)
            modules[m]->free((char *)block + offsets[m]);
    free(block);
}

void conf__modules_free(struct conf_config *config)
{
    block_free(config->modules);
    for (size_t s = 0; s < config->server_count; s++) {
        block_free(config->servers[s].modules);
        for (size_t l = 0; l < config->servers[s].location_count; l++) {
            const struct conf_location *location = &config->servers[s].locations[l];
            /* Before the location's: what they inherit, they borrow. */
            for (size_t n = 0; n < location->nested_count; n++)
                block_free(location->nested[n].modules);
            block_free(location->modules);
        }
    }
}
