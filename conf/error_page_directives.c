/*
 * error_page_directives.c: `error_page CODE... [=[RESPONSE]] URI` at top
 * level, in server and in location, as nginx writes it, and the check that
 * each "@name" it names is a location.  The URI is kept as written; the
 * daemon compiles its variables with the generation.
 */
#include "registry.h"

#include <stdlib.h>
#include <string.h>

/* The list error_page appends to: the block being applied. */
static struct conf_error_pages *error_pages_here(struct conf_state *state)
{
    if (state->location != NULL)
        return &state->location->error_pages;
    if (state->server != NULL)
        return &state->server->error_pages;
    return &state->config->error_pages;
}

/* "=" (0) or "=RESPONSE" (200 to 599) into *out. */
static int parse_response(struct conf_state *state, const struct conf_arg *arg, int *out)
{
    *out = 0;
    if (arg->text[1] == '\0')
        return 0;
    unsigned code;
    if (conf__parse_uint(arg->text + 1, &code) != 0 || code < 200 || code > 599)
        return conf__error_at(state->error, &arg->pos,
                              "invalid response code \"%s\" (expected \"=\" or =200 to =599)",
                              arg->text);
    *out = (int)code;
    return 0;
}

/* The URI: a path of this server (internal redirect), or else the URL a
 * client is redirected to.  A control byte would split the request line
 * or the Location line it goes into. */
static int check_uri(struct conf_state *state, const struct conf_arg *arg)
{
    if (arg->text[0] == '\0')
        return conf__error_at(state->error, &arg->pos, "empty error_page URI");
    if (arg->text[0] == '=')
        return conf__error_at(state->error, &arg->pos, "error_page needs a URI after \"%s\"",
                              arg->text);
    if (arg->text[0] == '@' && arg->text[1] == '\0')
        return conf__error_at(state->error, &arg->pos, "empty location name \"@\"");
    for (const char *p = arg->text; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return conf__error_at(state->error, &arg->pos,
                                  "an error_page URI cannot hold control characters");
    return 0;
}

/* error_page CODE... [=[RESPONSE]] URI */
static int apply_error_page(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    (void)directive;
    size_t last = node->arg_count - 1, codes = last;
    const struct conf_arg *uri = &node->args[last];
    int response = -1;
    if (node->args[last - 1].text[0] == '=') {
        if (last - 1 == 0)
            return conf__error_at(state->error, &node->args[0].pos,
                                  "error_page needs a status code before \"%s\"",
                                  node->args[0].text);
        if (parse_response(state, &node->args[last - 1], &response) != 0)
            return -1;
        codes = last - 1;
    }
    if (check_uri(state, uri) != 0)
        return -1;
    struct conf_error_pages *list = error_pages_here(state);
    for (size_t i = 0; i < codes; i++) {
        const struct conf_arg *code = &node->args[i];
        unsigned status;
        if (conf__parse_uint(code->text, &status) != 0 || status < 300 || status > 599 ||
            status == 499)
            return conf__error_at(state->error, &code->pos,
                                  "invalid error_page code \"%s\" (expected 300 to 599, not 499)",
                                  code->text);
        struct conf_error_page *items =
            conf__grow(state, &code->pos, list->items, list->count, sizeof(*items));
        if (items == NULL)
            return -1;
        list->items = items;
        struct conf_error_page *page = &items[list->count++];
        page->status = status;
        page->response = response;
        page->uri_pos = uri->pos;
        page->uri = conf__strdup(state, &uri->pos, uri->text);
        if (page->uri == NULL)
            return -1;
    }
    return 0;
}

/* The server's named locations ("@name"), by index: a few, among what may
 * be many thousands of locations, each of which may have error_page lines
 * to check against them. */
struct named_locations {
    size_t *index;
    size_t count;
};

/* Each "@name" of `pages` is a location of `server`. */
static int check_named(struct conf_state *state, const struct conf_server *server,
                       const struct named_locations *named, const struct conf_error_pages *pages)
{
    for (size_t i = 0; i < pages->count; i++) {
        const struct conf_error_page *page = &pages->items[i];
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
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        /* The pages each level of the server uses (nginx's inheritance). */
        const struct conf_error_pages *own =
            server->error_pages.count > 0 ? &server->error_pages : &config->error_pages;
        struct named_locations named = {
            .index = malloc((server->location_count + 1) * sizeof(*named.index))};
        if (named.index == NULL)
            return conf__error_at(state->error, &server->pos, "out of memory");
        for (size_t l = 0; l < server->location_count; l++)
            if (server->locations[l].path[0] == '@')
                named.index[named.count++] = l;
        int rc = check_named(state, server, &named, own);
        for (size_t l = 0; l < server->location_count && rc == 0; l++)
            if (server->locations[l].error_pages.count > 0)
                rc = check_named(state, server, &named, &server->locations[l].error_pages);
        free(named.index);
        if (rc != 0)
            return -1;
    }
    return 0;
}

void conf__free_error_pages(struct conf_error_pages *pages)
{
    for (size_t i = 0; i < pages->count; i++)
        free(pages->items[i].uri);
    free(pages->items);
    *pages = (struct conf_error_pages){0};
}

/* clang-format off */
const struct conf_directive conf__error_page_directives[] = {
    {.name = "error_page", .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION, .min_args = 2,
     .max_args = CONF_ARGS_MANY, .repeat = true, .apply = apply_error_page},
    {.name = NULL},
};
/* clang-format on */
