/*
 * vars_directives.c: `map` blocks (top level, and the stream block's
 * through conf__map_apply()), whose values hold
 * variables: kept as written; the daemon compiles them, with every
 * $variable resolved, when it builds a generation.  `add_header` and
 * `rewrite` are their modules' (proto/policy/).
 */
#include "registry.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------------- map */

static bool valid_name(const char *name)
{
    if (*name == '\0')
        return false;
    for (const char *p = name; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return false;
    return true;
}

/* One line of a map block: KEY VALUE or default VALUE. */
static int map_entry(struct conf_state *state, struct conf_map *map, const struct conf_node *line)
{
    if (line->block)
        return conf__error_at(state->error, &line->block_pos, "unexpected \"{\" in a map");
    /* nginx's map parameters, which are single words */
    if (line->arg_count == 0 && strcmp(line->name.text, "volatile") == 0)
        return 0; /* corral evaluates a map each time it is read, as volatile asks */
    if (line->arg_count == 0 && strcmp(line->name.text, "hostnames") == 0)
        return conf__error_at(state->error, &line->name.pos,
                              "\"hostnames\" is nginx's: corral's map has no host name patterns; "
                              "list the names, or write a regex such as ~^(.+\\.)?example\\.com$");
    if (line->arg_count != 1)
        return conf__error_at(state->error, &line->name.pos,
                              "a map entry is KEY VALUE (got %zu words)", line->arg_count + 1);
    const char *key = line->name.text;
    bool fallback = strcmp(key, "default") == 0;
    static const char *const unsupported[] = {"hostnames", "volatile", "include"};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
        if (strcmp(key, unsupported[i]) == 0)
            return conf__error_at(state->error, &line->name.pos,
                                  "map parameter \"%s\" is not supported", key);
    for (size_t i = 0; i < map->entry_count; i++) {
        const struct conf_map_entry *other = &map->entries[i];
        if (fallback ? other->key != NULL : other->key == NULL || strcmp(other->key, key) != 0)
            continue;
        char where[300];
        return conf__error_at(state->error, &line->name.pos,
                              "duplicate map key \"%s\" (first at %s)", key,
                              conf__where(where, sizeof(where), &line->name.pos, &other->key_pos));
    }
    struct conf_map_entry *entries =
        conf__grow(state, &line->name.pos, map->entries, map->entry_count, sizeof(*entries));
    if (entries == NULL)
        return -1;
    map->entries = entries;
    struct conf_map_entry *e = &entries[map->entry_count++];
    e->key_pos = line->name.pos;
    e->value_pos = line->args[0].pos;
    if (!fallback && (e->key = conf__strdup(state, &line->name.pos, key)) == NULL)
        return -1;
    e->value = conf__strdup(state, &line->args[0].pos, line->args[0].text);
    return e->value != NULL ? 0 : -1;
}

int conf__map_apply(struct conf_state *state, const struct conf_node *node, struct conf_map **list,
                    size_t *count)
{
    const struct conf_arg *source = &node->args[0], *name = &node->args[1];
    if (name->text[0] != '$' || !valid_name(name->text + 1))
        return conf__error_at(state->error, &name->pos,
                              "invalid map variable \"%s\" (expected $name)", name->text);
    for (size_t i = 0; i < *count; i++) {
        if (strcasecmp((*list)[i].name, name->text + 1) != 0)
            continue;
        char where[300];
        return conf__error_at(state->error, &name->pos, "duplicate map \"%s\" (first at %s)",
                              name->text,
                              conf__where(where, sizeof(where), &name->pos, &(*list)[i].pos));
    }
    struct conf_map *maps = conf__grow(state, &node->name.pos, *list, *count, sizeof(*maps));
    if (maps == NULL)
        return -1;
    *list = maps;
    struct conf_map *map = &maps[(*count)++];
    map->pos = name->pos;
    map->source_pos = source->pos;
    map->source = conf__strdup(state, &source->pos, source->text);
    map->name = conf__strdup(state, &name->pos, name->text + 1);
    if (map->source == NULL || map->name == NULL)
        return -1;
    for (size_t i = 0; i < node->child_count; i++)
        if (map_entry(state, map, &node->children[i]) != 0)
            return -1;
    return 0;
}

/* map $SOURCE $NAME { ... } */
static int apply_map(struct conf_state *state, const struct conf_node *node,
                     const struct conf_directive *directive)
{
    (void)directive;
    return conf__map_apply(state, node, &state->config->maps, &state->config->map_count);
}

void conf__maps_free(struct conf_map *maps, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        struct conf_map *map = &maps[i];
        for (size_t j = 0; j < map->entry_count; j++) {
            free(map->entries[j].key);
            free(map->entries[j].value);
        }
        free(map->entries);
        free(map->source);
        free(map->name);
    }
    free(maps);
}

void conf__free_maps(struct conf_config *config)
{
    conf__maps_free(config->maps, config->map_count);
    config->maps = NULL;
    config->map_count = 0;
}

/* clang-format off */
const struct conf_directive conf__vars_directives[] = {
    {.name = "map", .contexts = CONF_MAIN, .min_args = 2, .max_args = 2, .block = true,
     .repeat = true, .apply = apply_map},
    {.name = NULL},
};
/* clang-format on */
