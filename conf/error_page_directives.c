/*
 * error_page_directives.c: the check that each "@name" an error_page
 * names is a location of every server whose pages they are, reported at
 * -t with the error_page's position.  The directive, its struct per level
 * and its inheritance are the error_page module's
 * (proto/policy/error_page.c); the check is here because it needs each
 * server's locations, which conf/ knows, and runs where conf/'s
 * whole-config checks run, before the levels are merged: so a server's
 * pages are its own, else the top level's, and a location's its own.
 */
#include "registry.h"

#include "proto/http/module.h"
#include "proto/policy/error_page.h"

#include <stdlib.h>
#include <string.h>

/* The server's named locations ("@name"), by index: a few, among what may
 * be many thousands of locations, each of which may have error_page lines
 * to check against them. */
struct named_locations {
    size_t *index;
    size_t count;
};

/* A level's own pages (conf_module_conf() of its block); NULL: none. */
static const struct error_page_conf *pages_of(const void *modules)
{
    const struct error_page_conf *pages = conf_module_conf(modules, &error_page_module.conf);
    return pages != NULL && pages->count > 0 ? pages : NULL;
}

/* Each "@name" of `pages` is a location of `server`. */
static int check_named(struct conf_state *state, const struct conf_server *server,
                       const struct named_locations *named, const struct error_page_conf *pages)
{
    for (size_t i = 0; pages != NULL && i < pages->count; i++) {
        const struct error_page_line *page = &pages->items[i];
        if (page->uri[0] != '@')
            continue;
        bool found = false;
        for (size_t j = 0; j < named->count && !found; j++)
            found = strcmp(server->locations[named->index[j]].path, page->uri) == 0;
        if (!found) {
            char where[300];
            return conf__error_at(state->error, &page->uri_pos,
                                  "no location \"%s\" in the server at %s", page->uri,
                                  conf__where(where, sizeof(where), &page->uri_pos, &server->pos));
        }
    }
    return 0;
}

int conf__error_pages_check(struct conf_state *state)
{
    const struct conf_config *config = state->config;
    const struct error_page_conf *top = pages_of(config->modules);
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        /* The pages each level of the server uses (nginx's inheritance). */
        const struct error_page_conf *own = pages_of(server->modules);
        struct named_locations named = {
            .index = malloc((server->location_count + 1) * sizeof(*named.index))};
        if (named.index == NULL)
            return conf__error_at(state->error, &server->pos, "out of memory");
        for (size_t l = 0; l < server->location_count; l++)
            if (server->locations[l].path[0] == '@')
                named.index[named.count++] = l;
        int rc = check_named(state, server, &named, own != NULL ? own : top);
        for (size_t l = 0; l < server->location_count && rc == 0; l++)
            rc = check_named(state, server, &named, pages_of(server->locations[l].modules));
        free(named.index);
        if (rc != 0)
            return -1;
    }
    return 0;
}
