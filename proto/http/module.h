/*
 * module.h: what an HTTP module declares, as nginx's ngx_module_t with its
 * ngx_http_module_t and h2o's handler and filter lists, in one struct: its
 * phase handlers (router.h), its response filter (exchange.h), what it
 * releases when an exchange ends, and the router's own error answers it
 * decorates; its configuration (its directive table and its struct per
 * level, created and merged by conf/) and the build step that turns a
 * level's struct into what its handlers read per request.
 * proto/modules.c holds the one list of modules; its order is
 * the order of the phase handlers within a phase and of the filters.
 */
#ifndef CORRAL_PROTO_MODULE_H
#define CORRAL_PROTO_MODULE_H

#include "conf/directive.h" /* struct conf_module: no proto/ type, no cycle */
#include "proto/http/exchange.h"
#include "proto/http/router.h"
#include "proto/http/site.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One phase handler of a module. */
struct http_phase_handler {
    enum router_phase phase;
    router_phase_fn fn;
};

/* One `types { }` entry of the config: the type of files with an
 * extension (nginx's mime.types). */
struct http_mime_type {
    const char *extension;
    const char *type;
};

/* What a build step gets besides its module's struct. */
struct vars_template;
struct http_regex;
struct tls_client_conf;
struct proxy_upstream;
struct limit_zone;
struct http_module_build {
    /* Memory that lives as long as the sites it builds for. */
    void *(*calloc)(void *arena, size_t count, size_t size);
    /* Compiles `text`, which may hold $variables, written at `pos` for
     * `directive` (its name in messages), its $1... the location regex's
     * groups: *out NULL when it holds none.  Returns 0 or -errno, the
     * problem logged at `pos`. */
    int (*compile)(void *arena, const char *text, const struct conf_pos *pos, const char *directive,
                   const struct vars_template **out);
    /* The same, its $1... the groups of `captures`, and *out never NULL
     * with `always`. */
    int (*compile_with)(void *arena, const char *text, const struct conf_pos *pos,
                        const char *directive, const struct http_regex *captures, bool always,
                        const struct vars_template **out);
    /* Compiles the regex `pattern`, as compile() a text. */
    int (*regex)(void *arena, const char *pattern, bool caseless, const struct conf_pos *pos,
                 const char *directive, const struct http_regex **out);
    /* The generation's upstream group for a proxy_pass `target`
     * ("http[s]://NAME", an upstream block, or "http[s]://HOST:PORT",
     * without its path) with, for https, `tls`: one per target and TLS
     * settings, shared by the locations that name it, as nginx shares an
     * upstream block's connections and health state.  A TLS problem is
     * logged at `tls_pos`.  Returns 0 or -errno, having logged why. */
    int (*upstream)(void *arena, const char *target, const struct tls_client_conf *tls,
                    const struct conf_pos *tls_pos, struct proxy_upstream **out);
    void *arena;
    /* The named location `name` ("@name") of the server being built;
     * NULL: it has none of that name. */
    const struct http_location *(*named)(void *arena, const char *name);
    /* The zone `name` the config's top level declares (limit_req_zone,
     * limit_conn_zone), which the process keeps across reloads, with its
     * key compiled and its rate (0 for limit_conn_zone).  Returns 0, or
     * -ENOENT when there is none of that name. */
    int (*limit_zone)(void *arena, const char *name, struct limit_zone **zone,
                      const struct vars_template **key, uint64_t *rate);
    /* The location being built, its regex set, and in its `modules` what
     * the modules before this one in the list built for it; NULL when a
     * server's own answers are. */
    const struct http_location *loc;
    /* The locations of `loc`'s if blocks, in the order written, which
     * an exchange moves to when the if's condition holds (nginx's noname
     * locations, built as any, found by no search); `loc` itself for an
     * if whose block holds only the rewrite module's lines, which would
     * inherit all of loc's.  None for a server's level. */
    const struct http_location *const *nested;
    size_t nested_count;
    /* What the modules before this one in the list built for the same
     * level, location or server (http_module_built_in(*built, module)). */
    const void *const *const *built;
    /* The config's `types { }`, sorted by extension (strcasecmp), as
     * long as the sites (count 0: none written), and its top level's
     * default_type (NULL: none written). */
    const struct http_mime_type *mime_types;
    size_t mime_type_count;
    const char *default_type;
};

struct http_module {
    const char *name;
    /* Its place in the list, given by http_module_init(): where its
     * build lands in http_location.modules and http_vhost.modules. */
    unsigned index;
    /* Its directives and its struct per level (conf/directive.h), which
     * the daemon registers with conf/ before parsing; conf.size 0: it
     * has no configuration. */
    struct conf_module conf;
    /* From the merged struct of a location (or, for the answers no
     * location gives, of a server) to what the module reads for its
     * requests, into *out (NULL: nothing to do there).  NULL: *out is
     * the struct itself, which the config keeps as long as the sites.
     * A module with a configuration for which no vhost or location of a
     * site builds anything is left out of that site's steps.
     * Returns 0 or -errno, having logged why. */
    int (*build)(const void *conf, const struct http_module_build *b, const void **out);
    /* Its content handler, or NULL: a location for which build gives
     * something gets it, with that as handler_data (one per location:
     * conf/ refuses a second directive with `content` in its entry). */
    const struct http_handler *content;
    /* The content handler for what build made of a location, when it
     * depends on it (proxy_pass: HTTP/1.1 or HTTP/2 to the backend); NULL:
     * `content` for every location. */
    const struct http_handler *(*content_of)(const void *built);
    /* Its phase handlers, in the order they run within their phase. */
    const struct http_phase_handler *phases;
    size_t phase_count;
    /* How many context slots it keeps state in per exchange
     * (exchange_ctx()), as nginx's ctx_index: http_module_init() gives it
     * `slots` of them from `slot` on, so that the exchange names no
     * module. */
    unsigned slots;
    unsigned slot;
    /* Its response filter, or NULL.  Its place in the chain (`order`) is
     * given by http_module_init(), from the module's place in the list:
     * the filter struct is the module's, written once, before any
     * exchange. */
    struct exchange_filter *filter;
    /* Releases what the module holds for an exchange (its context slot):
     * when the exchange ends and, if `release_on_redirect`, when an
     * internal redirect leaves its location.  NULL: nothing. */
    void (*release)(struct exchange *ex);
    bool release_on_redirect;
    /* The router's own answers with a status (a phase handler's 403,
     * the 404 of no location) go through this instead of
     * exchange_respond_error(), so that the module adds to them (the
     * location's add_header lines).  One module at most; NULL: none.
     * `req` is the request as the walk has it. */
    void (*answer)(struct exchange *ex, const struct http_request *req, unsigned status);
    /* The variables its struct at one level (`conf`) defines, nginx's
     * `set`: each given to `fn` with where it is written, before any
     * value of the config is compiled, so that every value may read them
     * (vars.h's user variables).  Several modules may define them (set,
     * auth_request_set); the values of all live in one context slot, the
     * last such module's in the list (rewrite's), which the compiled
     * "$name" knows (vars_template_assign()).  NULL: none. */
    void (*variables)(const void *conf,
                      void (*fn)(void *arg, const char *name, const struct conf_pos *pos),
                      void *arg);
    /* The variables it answers from its per-exchange state ($remote_user),
     * ending with a NULL name; http_module_init() adds them to those the
     * compiler knows (vars_module_add()).  NULL: none. */
    const struct vars_module_var *vars;
};

/* Gives each module its index (its place in `modules`), its context slot
 * if it wants one, and its filter its place in the chain; then builds
 * router_table (router.h) with every module (http_module_table()).  Call
 * once before any exchange (proto/modules.c does, under pthread_once). */
void http_module_init(struct http_module *const *modules, size_t count);

/* Builds into `t` the router's step list from the phase handlers of the
 * modules whose bit (by index) is set in `used`: phase by phase and,
 * within a phase, in the modules' order, framed by the router's own steps
 * (the location search first in its phase, the framer's refusal last in
 * it, the content handler last of all); their releases; the answer hook.
 * With every bit, router_table; with fewer, a site's own, without what
 * its config never turns on. */
void http_module_table(struct router_table *t, struct http_module *const *modules, size_t count,
                       uint32_t used);

/* What `module` built, in a location's or vhost's `modules` (NULL:
 * nothing built there); NULL: nothing. */
static inline const void *http_module_built_in(const void *const *built,
                                               const struct http_module *module)
{
    return built != NULL ? built[module->index] : NULL;
}

/* What `module` built for the exchange's location, else (none found
 * yet, or none) for its vhost; NULL: nothing. */
static inline const void *http_module_built(const struct exchange *ex,
                                            const struct http_module *module)
{
    return http_module_built_in(ex->loc != NULL ? ex->loc->modules : ex->vhost->modules, module);
}

#endif
