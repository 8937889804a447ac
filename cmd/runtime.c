/*
 * runtime.c: a parsed configuration made into what the workers serve: a
 * site per listen address with its virtual hosts, locations, upstreams and
 * TLS contexts.  Nothing here listens or starts a thread, so `-t` and the
 * fuzzer build exactly what a start or a reload builds.
 */
#include "cmd/runtime.h"

#include "cmd/admin_upstreams.h"
#include "cmd/metrics.h"

#include "cmd/runtime_cache.h"
#include "cmd/runtime_acme.h"
#include "cmd/runtime_limit.h"
#include "cmd/runtime_vars.h"
#include "proto/http/module.h"
#include "proto/modules.h"
#include "proto/http3/http3.h"
#include "proto/policy/access.h"
#include "proto/policy/add_header.h"
#include "proto/tls/tls.h"
#include "proto/upstream/proxy_module.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---------------------------------------------------------- modules */

static void modules_register(void)
{
    modules_init();
    for (size_t m = 0; m < modules_count; m++) {
        int err = modules_list[m]->conf.size != 0 || modules_list[m]->conf.directives != NULL
                      ? conf_module_register(&modules_list[m]->conf)
                      : 0;
        /* The list is the build's: a clash is a mistake in it. */
        if (err != 0) {
            log_error("module %s: cannot register its configuration: %s", modules_list[m]->name,
                      strerror(-err));
            abort();
        }
    }
}

void runtime_modules_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, modules_register);
}

/* The generation's upstreams by proxy_pass target: in buckets by the
 * target's hash, the first of each chained through `next` to the others
 * of the bucket; SIZE_MAX ends a chain. */
struct upstream_chains {
    size_t *first, *next;
    size_t mask; /* buckets - 1, a power of two less one */
};

/* The named locations ("@name") of the server being built, by their
 * index in it: a few, among what may be many thousands of locations. */
struct named_locations {
    const struct conf_server *server;
    const struct http_vhost *vhost; /* its locations, where they will be */
    const size_t *index;
    size_t count;
};

/* What a module's build step allocates from, compiles with and takes
 * upstream groups, limit zones and named locations from: the generation's,
 * for the level being built (its location's regex groups are what $1...
 * read unless a build says otherwise). */
struct build_arena {
    struct runtime_vars *vars;
    const struct runtime_limits *limits;
    const struct http_regex *captures; /* the location's regex; NULL: none */
    struct generation *gen;
    const struct conf_config *config;
    struct upstream_chains *chains;
    unsigned workers;
    const struct named_locations *named;
    const struct http_mime_type *mime_types; /* the config's types { }, sorted */
    /* Alt-Svc for every response of the level being built, after its
     * add_header lines (a TLS listen of a server with a quic one); NULL:
     * none. */
    const struct http_add_header *alt_svc;
};

static int arena_upstream(void *arena, const char *target, const struct tls_client_conf *tls,
                          const struct conf_pos *tls_pos, struct proxy_upstream **out);

/* For the sorted copy of types { } that static files search. */
static int mime_type_cmp(const void *a, const void *b)
{
    return strcasecmp(((const struct http_mime_type *)a)->extension,
                      ((const struct http_mime_type *)b)->extension);
}

static const struct http_location *arena_named(void *arena, const char *name)
{
    const struct named_locations *named = ((struct build_arena *)arena)->named;
    for (size_t j = 0; j < named->count; j++)
        if (strcmp(named->server->locations[named->index[j]].path, name) == 0)
            return &named->vhost->locations[named->index[j]];
    return NULL;
}

static int arena_limit_zone(void *arena, const char *name, struct limit_zone **zone,
                            const struct vars_template **key, uint64_t *rate)
{
    return runtime_limits_find(((struct build_arena *)arena)->limits, name, zone, key, rate);
}

static void *arena_calloc(void *arena, size_t count, size_t size)
{
    return runtime_vars_calloc(((struct build_arena *)arena)->vars, count, size);
}

static int arena_compile_with(void *arena, const char *text, const struct conf_pos *pos,
                              const char *directive, const struct http_regex *captures, bool always,
                              const struct vars_template **out)
{
    struct build_arena *a = arena;
    runtime_vars_set_captures(a->vars, captures != NULL ? captures : a->captures);
    int err = always ? runtime_vars_compile_any(a->vars, text, pos, directive, out)
                     : runtime_vars_compile(a->vars, text, pos, directive, out);
    runtime_vars_set_captures(a->vars, a->captures);
    return err;
}

static int arena_compile(void *arena, const char *text, const struct conf_pos *pos,
                         const char *directive, const struct vars_template **out)
{
    return arena_compile_with(arena, text, pos, directive, NULL, false, out);
}

static int arena_regex(void *arena, const char *pattern, bool caseless, const struct conf_pos *pos,
                       const char *directive, const struct http_regex **out)
{
    return runtime_vars_regex(((struct build_arena *)arena)->vars, pattern, caseless, pos,
                              directive, out);
}

/* A server's "~REGEX" names compiled (caseless, as nginx's), in the order
 * written, for its vhost's search (site.h); from here to the server's
 * end, their groups are variables of its values. */
static int name_regexes_build(struct runtime_vars *vars, const struct conf_server *server,
                              struct http_vhost *vhost)
{
    int err = runtime_vars_name_regexes(vars, server->server_names, server->server_name_pos,
                                        server->server_name_count, &vhost->name_regexes,
                                        &vhost->name_regex_count);
    if (err != 0)
        return err;
    runtime_vars_set_host_regexes(vars, vhost->name_regexes, vhost->name_regex_count);
    return 0;
}

/* The level's add_header rules (`*rules`, NULL: none) with the arena's
 * Alt-Svc line after them, unless they have an Alt-Svc line of their own
 * (an empty one is how a level turns it off). */
static int alt_svc_add(const struct build_arena *arena, const struct http_add_headers **rules)
{
    const struct http_add_headers *own = *rules;
    size_t count = own != NULL ? own->count : 0;
    for (size_t i = 0; i < count; i++)
        if (own->items[i].name.len == arena->alt_svc->name.len &&
            strncasecmp(own->items[i].name.data, arena->alt_svc->name.data,
                        arena->alt_svc->name.len) == 0)
            return 0;
    struct http_add_headers *with = runtime_vars_calloc(arena->vars, 1, sizeof(*with));
    struct http_add_header *items = runtime_vars_calloc(arena->vars, count + 1, sizeof(*items));
    if (with == NULL || items == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++)
        items[i] = own->items[i];
    items[count] = *arena->alt_svc;
    *with = (struct http_add_headers){items, count + 1, own != NULL && own->early};
    *rules = with;
    return 0;
}

/* What each module builds for one level, a location (`loc`) or a
 * server's own answers (`loc` NULL), from its merged struct in `block`
 * (conf_module_conf()): by the module's build step, else the struct
 * itself, which the config keeps as long as the generation.  A module
 * with a content handler that builds something for a location gives it
 * its handler. */
static int modules_build(const struct build_arena *site, const void *block,
                         const void *const **modules, struct http_location *loc,
                         const struct http_location *const *nested, size_t nested_count,
                         uint32_t *used)
{
    struct runtime_vars *vars = site->vars;
    struct build_arena arena = *site;
    arena.captures = loc != NULL ? loc->regex : NULL;
    struct http_module_build b = {.calloc = arena_calloc,
                                  .compile = arena_compile,
                                  .compile_with = arena_compile_with,
                                  .regex = arena_regex,
                                  .upstream = arena_upstream,
                                  .arena = &arena,
                                  .named = arena_named,
                                  .limit_zone = arena_limit_zone,
                                  .loc = loc,
                                  .nested = nested,
                                  .nested_count = nested_count,
                                  .built = modules,
                                  .mime_types = site->mime_types,
                                  .mime_type_count = site->config->mime_type_count,
                                  .default_type = site->config->default_type};
    const void **out = NULL; /* made when a module first builds something */
    *modules = NULL;
    for (size_t m = 0; m < modules_count; m++) {
        const struct http_module *mod = modules_list[m];
        const void *conf = conf_module_conf(block, &mod->conf);
        const void *built = conf;
        int err = conf != NULL && mod->build != NULL ? mod->build(conf, &b, &built) : 0;
        if (err == 0 && mod == &add_header_module && site->alt_svc != NULL)
            err = alt_svc_add(site, (const struct http_add_headers **)&built);
        if (err != 0)
            return err;
        if (built == NULL)
            continue;
        if (out == NULL) {
            if ((out = runtime_vars_calloc(vars, modules_count, sizeof(*out))) == NULL)
                return -ENOMEM;
            *modules = out; /* the modules after this one see what it built */
        }
        out[mod->index] = built;
        *used |= UINT32_C(1) << mod->index;
        if (mod->content != NULL && loc != NULL) {
            assert(loc->handler == NULL); /* conf/ allows one content directive */
            loc->handler = mod->content_of != NULL ? mod->content_of(built) : mod->content;
            loc->handler_data = (void *)(uintptr_t)built;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ sites */

/* The admin endpoints.  The token guards what tells about the daemon;
 * /healthz and /readyz tell only that it lives, for load balancers' probes,
 * which cannot always send a header. */
static const struct {
    const char *path;
    const struct http_handler *handler;
    bool token;
    /* It changes the daemon's state: refused (403) where the listener
     * authenticates nobody (no token, no client certificates), whatever
     * its allow/deny. */
    bool changes;
    bool prefix; /* the path and every path under it */
} admin_endpoints[] = {
    {"/metrics", &admin_metrics_handler, true, false, false},
    {"/status", &admin_status_handler, true, false, false},
    {"/healthz", &admin_healthz_handler, false, false, false},
    {"/readyz", &admin_readyz_handler, false, false, false},
    {"/cache/purge", &admin_cache_purge_handler, true, true, false},
    /* reads too, as NGINX Plus's API: it tells the servers' addresses */
    {ADMIN_UPSTREAMS_PATH, &admin_upstreams_handler, true, true, true},
};
#define ADMIN_ENDPOINTS (sizeof(admin_endpoints) / sizeof(admin_endpoints[0]))

static void site_free(struct site *site)
{
    stream_site_free(site);
    h3_udp_site_free(site->quic);
    tls_server_free(site->http.tls);
    free(site->address);
    free(site->vhosts);
    free(site->locations);
    free(site->nested_parent);
}

/* The locations of `conf`'s if blocks that set something of their own
 * (the others are `conf` itself). */
static size_t nested_own(const struct conf_location *conf)
{
    size_t count = 0;
    for (size_t n = 0; n < conf->nested_count; n++)
        count += conf->nested[n].modules != NULL;
    return count;
}

/* The locations of the if blocks of `conf` (conf->nested_count of them,
 * into `nested`), each built as a location from `loc`'s path and regex:
 * one whose block set something of its own is the site's next nested
 * location (after its searched ones), `loc` (site->locations[parent])
 * its parent; the others are `loc` itself. */
static int nested_build(struct site *site, const struct build_arena *arena,
                        const struct conf_location *conf, struct http_location *loc, size_t parent,
                        const struct http_location **nested, uint32_t *used)
{
    for (size_t n = 0; n < conf->nested_count; n++) {
        const struct conf_location *own = &conf->nested[n];
        if (own->modules == NULL) {
            nested[n] = loc;
            continue;
        }
        struct http_location *in = &site->locations[site->location_count + site->nested_count];
        site->nested_parent[site->nested_count++] = parent;
        *in = *loc; /* its path, for proxy_pass's prefix, and its regex, for $1 */
        int err = modules_build(arena, own->modules, &in->modules, in, NULL, 0, used);
        if (err != 0)
            return err;
        in->add_headers = http_module_built_in(in->modules, &add_header_module);
        nested[n] = in;
    }
    return 0;
}

/* A server listening on a site's address: the server's index and its
 * listen there (a server has one listen per address). */
struct site_server {
    size_t server, listen;
};

static const struct conf_listen *site_listen(const struct conf_config *config,
                                             const struct site_server *entry)
{
    return &config->servers[entry->server].listens[entry->listen];
}

/* The socket options of the site: the library's defaults unless one of its
 * listen directives sets deferred or backlog (only one may).  A deferred
 * accept waits for the first bytes up to the header timeout, as the server
 * would close a silent connection then anyway. */
static void listen_options_from(const struct conf_config *config, const struct site_server *entries,
                                size_t count, struct corral_listen_options *options)
{
    corral_listen_options_init(options);
    for (size_t e = 0; e < count; e++) {
        const struct conf_listen *listen = site_listen(config, &entries[e]);
        if (!listen->has_socket_options)
            continue;
        if (listen->backlog != 0)
            options->backlog = (int)listen->backlog;
        if (listen->deferred)
            options->defer_accept_s =
                (config->servers[entries[e].server].http.limits.header_timeout_ms + 999) / 1000;
        return;
    }
}

/* TLS towards the upstream of an https:// proxy_pass.  The name checked in
 * its certificate (and sent as SNI) is proxy_tls_name, else the host that
 * proxy_pass names: the upstream block's name, or the address's host. */
static int upstream_tls_build(const struct tls_client_conf *tls, const struct conf_pos *tls_pos,
                              const char *target, unsigned workers, size_t slots,
                              struct tls_client **out)
{
    char host[256];
    if (target[0] == '[')
        snprintf(host, sizeof(host), "%.*s", (int)strcspn(target + 1, "]"), target + 1);
    else
        snprintf(host, sizeof(host), "%.*s", (int)strcspn(target, ":"), target);
    struct tls_client_conf conf = *tls;
    if (conf.server_name == NULL)
        conf.server_name = host;
    char error[512];
    int err = tls_client_new(&conf, workers, slots, out, error, sizeof(error));
    if (err == -EINVAL)
        log_error("%s:%u:%u: %s", tls_pos->file, tls_pos->line, tls_pos->col, error);
    return err;
}

static bool same_optional_text(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/* Whether a proxy_pass can share `shared`: the same target and, for https,
 * the same TLS settings. */
static bool same_upstream(const struct shared_upstream *shared, const char *target,
                          const struct tls_client_conf *tls)
{
    if (strcmp(shared->target, target) != 0)
        return false;
    return tls == NULL || (shared->tls->verify == tls->verify && shared->tls->http2 == tls->http2 &&
                           same_optional_text(shared->tls->ca_file, tls->ca_file) &&
                           same_optional_text(shared->tls->server_name, tls->server_name) &&
                           same_optional_text(shared->tls->certificate, tls->certificate) &&
                           same_optional_text(shared->tls->certificate_key, tls->certificate_key));
}

/* FNV-1a: a target's bucket. */
static size_t target_hash(const char *target)
{
    uint64_t h = 14695981039346656037u;
    for (const unsigned char *p = (const unsigned char *)target; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211u;
    return (size_t)h;
}

/* The upstream of a proxy_pass (http_module_build.upstream): the
 * generation's one for the same target, as nginx shares an upstream
 * block's connections and health state among the locations that name
 * it, or a new one: a named upstream block, or the single address
 * proxy_pass names. */
static int arena_upstream(void *arena, const char *url, const struct tls_client_conf *tls,
                          const struct conf_pos *tls_pos, struct proxy_upstream **out)
{
    const struct build_arena *a = arena;
    struct generation *gen = a->gen;
    struct upstream_chains *chains = a->chains;
    size_t bucket = target_hash(url) & chains->mask;
    for (size_t i = chains->first[bucket]; i != SIZE_MAX; i = chains->next[i]) {
        if (same_upstream(&gen->upstreams[i], url, tls)) {
            *out = gen->upstreams[i].upstream;
            return 0;
        }
    }
    bool https = strncmp(url, "https://", 8) == 0;
    assert(https == (tls != NULL));
    const char *target = url + (https ? strlen("https://") : strlen("http://"));
    const struct conf_upstream *named = NULL;
    for (size_t i = 0; strchr(target, ':') == NULL && i < a->config->upstream_count; i++)
        if (strcmp(a->config->upstreams[i].upstream.name, target) == 0)
            named = &a->config->upstreams[i];
    /* The parser checked the name (proxy_module.c): a config from elsewhere. */
    if (strchr(target, ':') == NULL && named == NULL) {
        log_error("no upstream named \"%s\"", target);
        return -EINVAL;
    }
    /* An address rather than an upstream block: a pool of that one server,
     * with the upstream module's defaults. */
    struct proxy_server_conf single = PROXY_SERVER_CONF_DEFAULT;
    single.address = target;
    struct proxy_upstream_conf conf = PROXY_UPSTREAM_CONF_DEFAULT;
    if (named != NULL) {
        conf = named->upstream;
    } else {
        conf.name = target;
        conf.servers = &single;
        conf.server_count = 1;
    }
    int err = https ? upstream_tls_build(tls, tls_pos, target, a->workers,
                                         upstream_conf_slots(&conf), &conf.tls)
                    : 0;
    if (err == 0)
        err = upstream_new(&conf, a->workers, out);
    if (err != 0) {
        tls_client_free(conf.tls);
        return err;
    }
    chains->next[gen->upstream_count] = chains->first[bucket];
    chains->first[bucket] = gen->upstream_count;
    gen->upstreams[gen->upstream_count++] = (struct shared_upstream){*out, url, tls};
    return 0;
}

/* Logs a TLS loading problem at the directive of `tls` behind it, else
 * (a built-in default) at `block`. */
static void log_tls_problem(const struct conf_tls *tls, const struct conf_pos *block,
                            enum tls_conf_item item, size_t index, bool warning,
                            const char *message)
{
    const struct conf_pos *pos =
        item == TLS_CONF_CERTIFICATE           ? &tls->certificates[index].certificate_pos
        : item == TLS_CONF_KEY                 ? &tls->certificates[index].key_pos
        : item == TLS_CONF_CIPHERS             ? &tls->ciphers_pos
        : item == TLS_CONF_CIPHERSUITES        ? &tls->ciphersuites_pos
        : item == TLS_CONF_STAPLING_FILE       ? &tls->stapling_file_pos
        : item == TLS_CONF_STAPLING_RESPONDER  ? &tls->stapling_responder_pos
        : item == TLS_CONF_TRUSTED_CERTIFICATE ? &tls->trusted_ca_pos
                                               : &tls->client_ca_pos;
    if (pos->file == NULL)
        pos = block;
    if (warning)
        log_warn("%s:%u:%u: %s", pos->file, pos->line, pos->col, message);
    else
        log_error("%s:%u:%u: %s", pos->file, pos->line, pos->col, message);
}

/* Points a TLS loading problem at the directive behind it. */
static void report_tls_problem(void *arg, enum tls_conf_item item, size_t vhost, size_t index,
                               bool warning, const char *message)
{
    const struct conf_server *const *servers = arg;
    log_tls_problem(&servers[vhost]->tls, &servers[vhost]->pos, item, index, warning, message);
}

/* The same in the admin block (`arg` is the config). */
static void report_admin_tls_problem(void *arg, enum tls_conf_item item, size_t vhost, size_t index,
                                     bool warning, const char *message)
{
    (void)vhost;
    const struct conf_admin *admin = &((const struct conf_config *)arg)->admin;
    log_tls_problem(&admin->tls, &admin->pos, item, index, warning, message);
}

/* Orders server blocks by their TLS settings, which give a vhost its TLS
 * group: the certificate and key files (as written, in order), the client
 * certificates' CA file, tls_verify_client, tls_protocols, tls_ciphers and
 * tls_ciphersuites (as written). */
struct tls_member {
    const struct conf_tls *tls;
    size_t vhost;
};

static int strcmp_null(const char *a, const char *b)
{
    return a == NULL || b == NULL ? (a != NULL) - (b != NULL) : strcmp(a, b);
}

static int tls_settings_compare(const struct conf_tls *a, const struct conf_tls *b)
{
    if (a->certificate_count != b->certificate_count)
        return a->certificate_count < b->certificate_count ? -1 : 1;
    for (size_t i = 0; i < a->certificate_count; i++) {
        int c = strcmp_null(a->certificates[i].certificate, b->certificates[i].certificate);
        if (c == 0)
            c = strcmp_null(a->certificates[i].key, b->certificates[i].key);
        if (c != 0)
            return c;
    }
    int c = strcmp_null(a->settings.client_ca, b->settings.client_ca);
    if (c != 0)
        return c;
    if (a->settings.verify_client != b->settings.verify_client)
        return a->settings.verify_client < b->settings.verify_client ? -1 : 1;
    if (a->settings.protocols != b->settings.protocols)
        return a->settings.protocols < b->settings.protocols ? -1 : 1;
    c = strcmp_null(a->settings.ciphers, b->settings.ciphers);
    return c != 0 ? c : strcmp_null(a->settings.ciphersuites, b->settings.ciphersuites);
}

/* By settings, then by vhost: a group's first member is its first vhost. */
static int tls_member_compare(const void *left, const void *right)
{
    const struct tls_member *a = left, *b = right;
    int c = tls_settings_compare(a->tls, b->tls);
    return c != 0 ? c : a->vhost < b->vhost ? -1 : a->vhost > b->vhost;
}

/* Gives each vhost of a TLS site its TLS group: the index of the first vhost
 * with the same settings.  Sorted, so that many server blocks on one
 * address cost n log n, not n squared. */
static int site_tls_groups(struct site *site, const struct conf_server **vhost_servers)
{
    size_t count = site->http.vhost_count;
    struct tls_member *members = calloc(count, sizeof(*members));
    if (members == NULL)
        return -ENOMEM;
    for (size_t v = 0; v < count; v++)
        members[v] = (struct tls_member){&vhost_servers[v]->tls, v};
    qsort(members, count, sizeof(*members), tls_member_compare);
    size_t first = 0;
    for (size_t i = 0; i < count; i++) {
        if (tls_settings_compare(members[i].tls, members[first].tls) != 0)
            first = i;
        site->vhosts[members[i].vhost].tls_group = (unsigned)members[first].vhost;
    }
    free(members);
    return 0;
}

/* What of a server block's TLS is its vhost's own, with its certificate
 * pairs at `files`. */
static struct tls_vhost_conf tls_vhost_of(const struct conf_tls *tls,
                                          const struct tls_certificate_files *files)
{
    const struct tls_server_conf *s = &tls->settings;
    return (struct tls_vhost_conf){.certificates = files,
                                   .certificate_count = tls->certificate_count,
                                   .client_ca = s->client_ca,
                                   .verify_client = s->verify_client,
                                   .watch = s->certificate_watch,
                                   .protocols = s->protocols,
                                   .ciphers = s->ciphers,
                                   .ciphersuites = s->ciphersuites,
                                   .stapling = s->stapling,
                                   .stapling_verify = s->stapling_verify,
                                   .stapling_file = s->stapling_file,
                                   .stapling_responder = s->stapling_responder,
                                   .trusted_ca = s->trusted_ca};
}

/* The site's TLS: each vhost's certificates, client verification,
 * protocols and ciphers, and the rest of the settings from its default
 * server (vhost 0). */
static int site_tls_build(struct site *site, const struct conf_server **vhost_servers, size_t count,
                          unsigned workers, const struct runtime_acme *acme)
{
    size_t files_count = 0;
    assert(count > 0 && count == site->http.vhost_count); /* a vhost per server listening */
    for (size_t v = 0; v < count; v++)
        files_count += vhost_servers[v]->tls.certificate_count;
    struct tls_vhost_conf *vhosts = calloc(count, sizeof(*vhosts));
    struct tls_certificate_files *files = calloc(files_count ? files_count : 1, sizeof(*files));
    if (vhosts == NULL || files == NULL) {
        free(vhosts);
        free(files);
        return -ENOMEM;
    }
    struct tls_certificate_files *next = files;
    for (size_t v = 0; v < count; v++) {
        const struct conf_tls *tls = &vhost_servers[v]->tls;
        vhosts[v] = tls_vhost_of(tls, next);
        /* $acme_certificate and $acme_certificate_key: the file its ACME
         * client keeps both in, watched so that a new one is taken up. */
        const char *acme_file = runtime_acme_path(acme, vhost_servers[v]);
        for (size_t i = 0; i < tls->certificate_count; i++) {
            assert(next < files + files_count);
            const char *cert = tls->certificates[i].certificate, *key = tls->certificates[i].key;
            if (acme_file != NULL && strcmp(cert, "$acme_certificate") == 0)
                cert = acme_file, vhosts[v].watch = true;
            if (acme_file != NULL && strcmp(key, "$acme_certificate_key") == 0)
                key = acme_file, vhosts[v].watch = true;
            *next++ = (struct tls_certificate_files){cert, key};
        }
    }
    struct tls_server_conf conf = vhost_servers[0]->tls.settings;
    conf.http2 = site->http.http2 != NULL;
    conf.sni_select = site_sni_select;
    conf.sni_arg = &site->http;
    struct tls_report report = {report_tls_problem, vhost_servers};
    int err = tls_server_new(&conf, vhosts, count, workers, &report, &site->http.tls);
    free(vhosts);
    free(files);
    return err;
}

/* The Alt-Svc line a TLS listen of `server` adds to its responses: its
 * first quic listen's port for HTTP/3, for a day (as Caddy's), when it
 * has one and http3 is on; NULL otherwise, and for a quic listen on port 0,
 * whose port is known only once bound. */
static int alt_svc_build(struct generation *gen, const struct conf_server *server,
                         const struct http_add_header **out)
{
    *out = NULL;
    if (server->http3_off)
        return 0;
    for (size_t i = 0; i < server->listen_count; i++) {
        const struct conf_listen *listen = &server->listens[i];
        struct sockaddr_storage addr;
        socklen_t len;
        if (!listen->quic || corral_parse_address(listen->address, &addr, &len) != 0)
            continue;
        unsigned port = addr.ss_family == AF_INET6
                            ? ntohs(((const struct sockaddr_in6 *)&addr)->sin6_port)
                            : ntohs(((const struct sockaddr_in *)&addr)->sin_port);
        if (port == 0)
            continue;
        char text[64];
        snprintf(text, sizeof(text), "h3=\":%u\"; ma=86400", port);
        struct http_add_header *line = runtime_vars_calloc(gen->vars, 1, sizeof(*line));
        char *value = runtime_vars_calloc(gen->vars, 1, strlen(text) + 1);
        if (line == NULL || value == NULL)
            return -ENOMEM;
        memcpy(value, text, strlen(text));
        const struct vars_template *compiled;
        int err = runtime_vars_compile_any(gen->vars, value, &listen->pos, "listen", &compiled);
        if (err != 0)
            return err;
        *line = (struct http_add_header){{"Alt-Svc", strlen("Alt-Svc")}, compiled, true};
        *out = line;
        return 0;
    }
    return 0;
}

/* quic_host_key's file into the token and reset keys.  Returns 0 or
 * -errno (logged). */
static int quic_host_key_read(const char *path, uint8_t token_secret[32], uint8_t reset_secret[32],
                              uint8_t ticket_key[H3_TICKET_KEY_LEN])
{
    uint8_t key[4096];
    ssize_t len = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        len = read(fd, key, sizeof(key));
        close(fd);
    }
    if (len < 0) {
        log_error("quic_host_key \"%s\": %s", path, strerror(errno));
        return -EINVAL;
    }
    int err = h3_host_key_derive(key, (size_t)len, token_secret, reset_secret);
    if (err == 0)
        err = h3_host_key_ticket_key(key, (size_t)len, ticket_key);
    explicit_bzero(key, sizeof(key));
    if (err != 0)
        log_error("quic_host_key \"%s\": %zd bytes, at least 32 needed", path, len);
    return err;
}

/* A quic listen's HTTP/3: every worker's endpoint serves `site` (built as
 * a TCP address's, from the servers listening there), each vhost with its
 * server's certificates and keys (all of them, the first pair in
 * `pairs`, the others linked after it: GnuTLS picks one by the client's
 * signature algorithms), the vhost picked by SNI; its TLS groups are made
 * as a TLS site's, for the misdirected-request check. */
static int quic_site_build(struct site *site, struct generation *gen,
                           const struct conf_config *conf, const struct conf_listen *listen,
                           unsigned workers)
{
    size_t count = site->http.vhost_count;
    struct h3_certificate *pairs = runtime_vars_calloc(gen->vars, count, sizeof(*pairs));
    const struct conf_server **servers = calloc(count, sizeof(*servers));
    if (pairs == NULL || servers == NULL) {
        free(servers);
        return -ENOMEM;
    }
    for (size_t v = 0; v < count; v++) {
        servers[v] = &conf->servers[site->vhosts[v].stats_slot];
        const struct conf_tls *tls = &servers[v]->tls;
        assert(tls->certificate_count > 0); /* conf/ refuses a quic listen without */
        struct h3_certificate *more =
            tls->certificate_count > 1
                ? runtime_vars_calloc(gen->vars, tls->certificate_count - 1, sizeof(*more))
                : NULL;
        if (tls->certificate_count > 1 && more == NULL) {
            free(servers);
            return -ENOMEM;
        }
        /* The pairs named by SNI ($ssl_server_name) are read per name
         * during the handshakes (proto/http3/h3_sni_certs.c). */
        struct h3_certificate *last = NULL;
        for (size_t c = 0; c < tls->certificate_count; c++) {
            const struct conf_tls_certificate *file = &tls->certificates[c];
            struct h3_certificate *pair = c == 0 ? &pairs[v] : &more[c - 1];
            *pair = (struct h3_certificate){.cert_file = file->certificate,
                                            .key_file = file->key,
                                            .by_name = tls_sni_certs_template(file->certificate) ||
                                                       tls_sni_certs_template(file->key)};
            if (last != NULL)
                last->next = pair;
            last = pair;
        }
    }
    int err = site_tls_groups(site, servers);
    free(servers);
    if (err != 0)
        return err;
    struct h3_endpoint_config config = {
        .site = &site->http,
        .cert_file = pairs[0].cert_file,
        .key_file = pairs[0].key_file,
        .vhost_certificates = pairs,
        .gso = conf->quic_gso,
        .retry = conf->quic_retry,
        .retry_threshold = conf->quic_retry_threshold,
        .early_data = conf->ssl_early_data,
        .max_concurrent_streams = conf->http3_max_concurrent_streams,
        .stream_buffer_size = conf->http3_stream_buffer_size,
    };
    uint8_t token_secret[32], reset_secret[32], ticket_key[H3_TICKET_KEY_LEN];
    if (conf->quic_host_key != NULL) {
        err = quic_host_key_read(conf->quic_host_key, token_secret, reset_secret, ticket_key);
        if (err != 0)
            return err;
        config.token_secret = token_secret;
        config.reset_secret = reset_secret;
        config.ticket_key = ticket_key;
    }
    err = h3_udp_site_new(&config, workers, &site->quic);
    if (err == -EINVAL)
        log_error("%s:%u:%u: listen \"%s\" quic: a certificate and key of its servers do not "
                  "load for QUIC (above)",
                  listen->pos.file, listen->pos.line, listen->pos.col, listen->address);
    return err;
}

/* Builds the site for `address` from the server blocks listening there
 * (`entries`, in the config's order); the default server (or the first)
 * becomes vhost 0.  The config makes every listen of an address agree on
 * tls, http2 and proxy_protocol. */
static int site_build(struct site *site, struct generation *gen, const struct conf_config *config,
                      const char *address, const struct site_server *entries, size_t entry_count,
                      struct upstream_chains *chains, unsigned workers)
{
    /* A vhost for each server listening here. */
    size_t vhost_count = entry_count, location_count = 0, nested_count = 0;
    for (size_t e = 0; e < entry_count; e++) {
        const struct conf_server *server = &config->servers[entries[e].server];
        location_count += server->location_count;
        for (size_t i = 0; i < server->location_count; i++)
            nested_count += nested_own(&server->locations[i]);
    }
    listen_options_from(config, entries, entry_count, &site->listen_options);
    site->address = strdup(address);
    assert(vhost_count > 0); /* `address` is one that a server listens on */
    site->vhosts = calloc(vhost_count, sizeof(*site->vhosts));
    site->locations = calloc(location_count + nested_count + 1, sizeof(*site->locations));
    site->location_count = location_count;
    site->nested_parent = calloc(nested_count + 1, sizeof(*site->nested_parent));
    if (site->address == NULL || site->vhosts == NULL || site->locations == NULL ||
        site->nested_parent == NULL)
        return -ENOMEM;

    const struct conf_server **vhost_servers = calloc(vhost_count, sizeof(*vhost_servers));
    size_t max_locations = 0;
    for (size_t e = 0; e < entry_count; e++)
        if (config->servers[entries[e].server].location_count > max_locations)
            max_locations = config->servers[entries[e].server].location_count;
    size_t *named = malloc((max_locations + 1) * sizeof(*named));
    if (vhost_servers == NULL || named == NULL) {
        free(vhost_servers);
        free(named);
        return -ENOMEM;
    }
    size_t v = 0, l = 0;
    int err = 0;
    struct http_mime_type *mime_types = NULL;
    if (config->mime_type_count > 0) {
        mime_types = runtime_vars_calloc(gen->vars, config->mime_type_count, sizeof(*mime_types));
        if (mime_types == NULL) {
            free(vhost_servers);
            free(named);
            return -ENOMEM;
        }
        for (size_t i = 0; i < config->mime_type_count; i++)
            mime_types[i] = (struct http_mime_type){config->mime_types[i].extension,
                                                    config->mime_types[i].type};
        qsort(mime_types, config->mime_type_count, sizeof(*mime_types), mime_type_cmp);
    }
    const struct build_arena arena = {.vars = gen->vars,
                                      .mime_types = mime_types,
                                      .limits = gen->limits,
                                      .gen = gen,
                                      .config = config,
                                      .chains = chains,
                                      .workers = workers};
    /* The modules in the site's steps: those without a configuration,
     * and those that build something for one of its vhosts or locations. */
    bool tls = site_listen(config, &entries[0])->tls;
    uint32_t used = 0;
    for (size_t m = 0; m < modules_count; m++)
        if (modules_list[m]->conf.size == 0)
            used |= UINT32_C(1) << m;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t e = 0; e < entry_count && err == 0; e++) {
            size_t s = entries[e].server;
            const struct conf_server *server = &config->servers[s];
            if (site_listen(config, &entries[e])->default_server != (pass == 0))
                continue;
            assert(v < vhost_count);
            vhost_servers[v] = server;
            struct http_vhost *vhost = &site->vhosts[v++];
            vhost->stats_slot = (unsigned)s; /* cmd/metrics.c labels it */
            vhost->names = (const char *const *)server->server_names;
            vhost->name_count = server->server_name_count;
            vhost->limits = server->http.limits;
            vhost->locations = &site->locations[l];
            vhost->location_count = server->location_count;
            struct named_locations named_here = {server, vhost, named, 0};
            struct build_arena here = arena;
            here.named = &named_here;
            if (tls)
                err = alt_svc_build(gen, server, &here.alt_svc);
            assert(server->location_count <= max_locations); /* `named`'s size */
            for (size_t i = 0; i < server->location_count; i++)
                if (server->locations[i].path[0] == '@')
                    named[named_here.count++] = i;
            if (err == 0)
                err = name_regexes_build(gen->vars, server, vhost);
            if (err == 0)
                err = modules_build(&here, server->modules, &vhost->modules, NULL, NULL, 0, &used);
            /* The framers answer with them before a location is known. */
            vhost->add_headers = http_module_built_in(vhost->modules, &add_header_module);
            /* A request that no location takes: the server's own content. */
            for (size_t m = 0; m < modules_count && vhost->handler == NULL; m++) {
                const void *built = http_module_built_in(vhost->modules, modules_list[m]);
                if (modules_list[m]->content != NULL && built != NULL) {
                    vhost->handler = modules_list[m]->content;
                    vhost->handler_data = (void *)(uintptr_t)built;
                }
            }
            for (size_t i = 0; i < server->location_count && err == 0; i++) {
                const struct conf_location *conf = &server->locations[i];
                struct http_location *loc = &site->locations[l++];
                *loc = (struct http_location){.path = conf->path,
                                              .path_len = strlen(conf->path),
                                              .exact = conf->exact,
                                              .no_regex = conf->no_regex,
                                              .named = conf->path[0] == '@'};
                if (conf->regex)
                    err = runtime_vars_regex(gen->vars, conf->path, conf->caseless, &conf->path_pos,
                                             "location", &loc->regex);
                runtime_vars_set_captures(gen->vars, loc->regex);
                const struct http_location **nested = NULL;
                if (err == 0 && conf->nested_count > 0) {
                    nested = runtime_vars_calloc(gen->vars, conf->nested_count, sizeof(*nested));
                    err = nested == NULL
                              ? -ENOMEM
                              : nested_build(site, &here, conf, loc, l - 1, nested, &used);
                }
                if (err == 0)
                    err = modules_build(&here, conf->modules, &loc->modules, loc, nested,
                                        conf->nested_count, &used);
                /* For the router's and the limits' own answers, and the proxy's. */
                loc->add_headers = http_module_built_in(loc->modules, &add_header_module);
            }
            runtime_vars_set_host_regexes(gen->vars, NULL, 0); /* the next server's own */
        }
    }
    assert(err != 0 || site->nested_count == nested_count); /* the array's size */
    http_module_table(&site->router, modules_list, modules_count, used);
    for (size_t i = 0; i < vhost_count; i++)
        site->vhosts[i].router = &site->router;
    const struct conf_listen *first = site_listen(config, &entries[0]);
    site->http = (struct http_site){.vhosts = site->vhosts,
                                    .vhost_count = vhost_count,
                                    .proxy_protocol = first->proxy_protocol};
    /* The connection's settings are its default server's: which vhost a
     * stream is for is known only from its :authority. */
    if (first->http2)
        site->http.http2 = &vhost_servers[0]->http.http2;
    if (err == 0 && first->tls)
        err = site_tls_build(site, vhost_servers, vhost_count, workers, gen->acme);
    assert(site->http.vhost_count == vhost_count); /* vhost_servers' length */
    if (err == 0 && first->tls)
        err = site_tls_groups(site, vhost_servers);
    free(vhost_servers);
    free(named);
    return err;
}

/* TLS for an admin `listen ... tls`: the admin block's certificates and
 * settings. */
static int admin_tls_build(struct site *site, const struct conf_config *config, unsigned workers)
{
    const struct conf_tls *tls = &config->admin.tls;
    struct tls_certificate_files *files = calloc(tls->certificate_count, sizeof(*files));
    if (files == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < tls->certificate_count; i++)
        files[i] = (struct tls_certificate_files){tls->certificates[i].certificate,
                                                  tls->certificates[i].key};
    struct tls_vhost_conf vhost = tls_vhost_of(tls, files);
    struct tls_report report = {report_admin_tls_problem, (void *)config};
    int err = tls_server_new(&tls->settings, &vhost, 1, workers, &report, &site->http.tls);
    free(files);
    return err;
}

/* Points a TLS loading problem of a stream server at its directive (`arg`
 * is the listener's struct stream_site, `vhost` the index of the server
 * among its vhosts). */
static void report_stream_tls_problem(void *arg, enum tls_conf_item item, size_t vhost,
                                      size_t index, bool warning, const char *message)
{
    const struct stream_site *st = arg;
    const struct conf_stream_server *server =
        vhost < st->vhost_count ? st->vhosts[vhost]->origin : st->origin;
    log_tls_problem(&server->tls, &server->pos, item, index, warning, message);
}

/* TLS for a stream `listen ... tls`: each server block's certificates and
 * verification (a vhost each, in the order of the site's vhosts, picked
 * by SNI as the session picks its server), and the rest of the settings
 * and ALPN the default server's.  Kept as the site's http.tls, so that a
 * reload hands its ticket keys on and the TLS counters count it, as an
 * HTTP site's. */
static int stream_tls_build(struct site *site, unsigned workers)
{
    struct stream_site *st = site->stream;
    size_t count = st->vhost_count > 0 ? st->vhost_count : 1;
    size_t pairs = 0;
    for (size_t v = 0; v < count; v++) {
        const struct conf_stream_server *server =
            st->vhost_count > 0 ? st->vhosts[v]->origin : st->origin;
        pairs += server->tls.certificate_count;
    }
    struct tls_certificate_files *files = calloc(pairs, sizeof(*files));
    struct tls_vhost_conf *vhosts = calloc(count, sizeof(*vhosts));
    int err = files == NULL || vhosts == NULL ? -ENOMEM : 0;
    for (size_t v = 0, f = 0; err == 0 && v < count; v++) {
        const struct conf_stream_server *server =
            st->vhost_count > 0 ? st->vhosts[v]->origin : st->origin;
        const struct conf_tls *tls = &server->tls;
        for (size_t i = 0; i < tls->certificate_count; i++)
            files[f + i] = (struct tls_certificate_files){tls->certificates[i].certificate,
                                                          tls->certificates[i].key};
        vhosts[v] = tls_vhost_of(tls, &files[f]);
        f += tls->certificate_count;
    }
    const struct conf_stream_server *server = st->origin;
    struct tls_server_conf conf = server->tls.settings;
    conf.stream = true;
    conf.alpn = server->alpn;
    conf.alpn_len = server->alpn_len;
    if (st->vhost_count > 0) {
        conf.sni_select = stream_sni_select;
        conf.sni_arg = st;
    }
    struct tls_report report = {report_stream_tls_problem, st};
    if (err == 0)
        err = tls_server_new(&conf, vhosts, count, workers, &report, &site->http.tls);
    free(files);
    free(vhosts);
    for (size_t v = 0; err == 0 && v < count; v++) {
        if (st->vhost_count > 0)
            st->vhosts[v]->tls = site->http.tls;
        else
            st->tls = site->http.tls;
    }
    return err;
}

/* Whether only this machine can reach `address`: a loopback address or a
 * unix socket. */
static bool admin_address_is_local(const char *address)
{
    struct sockaddr_storage addr;
    socklen_t len;
    if (corral_parse_address(address, &addr, &len) != 0)
        return false;
    if (addr.ss_family == AF_UNIX)
        return true;
    if (addr.ss_family == AF_INET)
        return ((const uint8_t *)&((const struct sockaddr_in *)&addr)->sin_addr)[0] == 127;
    const struct in6_addr *in6 = &((const struct sockaddr_in6 *)&addr)->sin6_addr;
    return addr.ss_family == AF_INET6 &&
           (IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127));
}

/* Admin listen `index`: its endpoints, each behind a gate with the admin
 * block's rules and `token` (NULL: none), and a last location that answers
 * 404 behind the rules, so that a refusal is counted whatever the path. */
static int admin_site_build(struct site *site, struct generation *gen,
                            const struct conf_config *config, size_t index, const char *token,
                            size_t token_len, unsigned workers)
{
    const char *address = config->admin_listens[index];
    const struct conf_admin *admin = &config->admin;
    const struct access_conf *access = admin->access.rule_count > 0 ? &admin->access : NULL;
    bool tls = admin->listens[index].tls;
    bool verified = tls && admin->tls.settings.verify_client == TLS_VERIFY_CLIENT_ON;
    if (access == NULL && token == NULL && !verified && !admin_address_is_local(address)) {
        const struct conf_pos *pos = &admin->listens[index].pos;
        log_warn("%s:%u:%u: admin listen \"%s\" is not a loopback address and has no access "
                 "control: whoever reaches it reads /metrics and /status (the pid, the config "
                 "path, the upstream addresses); add \"allow\" and \"deny\", "
                 "\"auth_token_file\", or \"listen ... tls\" with \"tls_verify_client on\" to "
                 "the admin block",
                 pos->file, pos->line, pos->col, address);
    }
    corral_listen_options_init(&site->listen_options);
    site->address = strdup(address);
    site->vhosts = calloc(1, sizeof(*site->vhosts));
    site->locations = calloc(ADMIN_ENDPOINTS + 1, sizeof(*site->locations));
    struct admin_gate *gates = runtime_vars_calloc(gen->vars, ADMIN_ENDPOINTS + 1, sizeof(*gates));
    if (site->address == NULL || site->vhosts == NULL || site->locations == NULL || gates == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < ADMIN_ENDPOINTS; i++) {
        bool refused = admin_endpoints[i].changes && token == NULL && !verified;
        gates[i] = (struct admin_gate){.next = refused ? &admin_refuse_handler
                                                       : admin_endpoints[i].handler,
                                       .access = access,
                                       .token = admin_endpoints[i].token ? token : NULL,
                                       .token_len = token_len};
        site->locations[i] = (struct http_location){.path = admin_endpoints[i].path,
                                                    .path_len = strlen(admin_endpoints[i].path),
                                                    .exact = !admin_endpoints[i].prefix,
                                                    .handler = &admin_gate_handler,
                                                    .handler_data = &gates[i]};
    }
    gates[ADMIN_ENDPOINTS] = (struct admin_gate){.access = access};
    site->locations[ADMIN_ENDPOINTS] =
        (struct http_location){.path = "/",
                               .path_len = 1,
                               .handler = &admin_gate_handler,
                               .handler_data = &gates[ADMIN_ENDPOINTS]};
    /* The rules for a path that is not one ("*"), as the access module
     * reads a vhost's. */
    const void **built = runtime_vars_calloc(gen->vars, modules_count, sizeof(*built));
    if (built == NULL)
        return -ENOMEM;
    built[access_module.index] = access;
    site->vhosts[0] = (struct http_vhost){
        .locations = site->locations,
        .location_count = ADMIN_ENDPOINTS + 1,
        .limits = config->http.limits,
        .stats_slot = (unsigned)config->server_count, /* after the server blocks' */
        .modules = built,
    };
    site->http = (struct http_site){.vhosts = site->vhosts, .vhost_count = 1};
    site->admin = true;
    return tls ? admin_tls_build(site, config, workers) : 0;
}

/* ------------------------------------------------------------ generations */

void generation_free(struct generation *gen)
{
    if (gen == NULL)
        return;
    corral_timer_free(gen->log_flush);
    corral_server_free(gen->server); /* its connections' last lines included */
    for (size_t i = 0; i < gen->site_count; i++)
        site_free(&gen->sites[i]);
    free(gen->sites);
    for (size_t i = 0; i < gen->udp_site_count; i++)
        site_free(&gen->udp_sites[i]);
    free(gen->udp_sites);
    for (size_t i = 0; i < gen->upstream_count; i++)
        upstream_free(gen->upstreams[i].upstream);
    free(gen->upstreams);
    metrics_detach(gen);
    free(gen->stats);
    access_log_free(gen->access_log);
    for (size_t i = 0; i < gen->tee_count; i++)
        access_log_free(gen->tees[i]);
    free(gen->tees);
    for (size_t i = 0; i < gen->log_count; i++)
        access_log_free(gen->logs[i]); /* what workers gathered, written */
    free(gen->logs);
    runtime_limits_free(gen->limits);
    runtime_acme_free(gen->acme);
    runtime_vars_free(gen->vars);
    conf_free(gen->config);
    free(gen);
}

struct site *find_site(struct generation *gen, const char *address)
{
    for (size_t i = 0; gen != NULL && i < gen->site_count; i++)
        if (conf_same_address(gen->sites[i].address, address))
            return &gen->sites[i];
    return NULL;
}

struct site *find_udp_site(struct generation *gen, const char *address)
{
    for (size_t i = 0; gen != NULL && i < gen->udp_site_count; i++)
        if (conf_same_address(gen->udp_sites[i].address, address))
            return &gen->udp_sites[i];
    return NULL;
}

/* A location's proxy_pass target, or NULL. */
static const char *proxy_pass_of(const struct conf_location *loc)
{
    const struct proxy_module_conf *proxy = conf_module_conf(loc->modules, &proxy_module.conf);
    return proxy != NULL ? proxy->pass : NULL;
}

/* The upstream a stream's proxy_pass or map value `target` names. */
static int stream_upstream_build(const struct build_arena *arena, const char *target,
                                 struct proxy_upstream **out)
{
    size_t len = strlen("http://") + strlen(target) + 1;
    char *url = runtime_vars_calloc(arena->gen->vars, 1, len);
    if (url == NULL)
        return -ENOMEM;
    snprintf(url, len, "http://%s", target);
    return arena_upstream((void *)arena, url, NULL, NULL, out);
}

static int stream_route_fill(const struct build_arena *arena, const struct conf_map *map,
                             struct stream_route *route);

/* proxy_pass $NAME: the route of the stream map `map`, each of its values
 * an upstream, each "~" key a regex. */
static int stream_route_build(const struct build_arena *arena, const struct conf_map *map,
                              struct stream_route **out)
{
    *out = NULL;
    if (map->entry_count >= SIZE_MAX / sizeof(struct stream_route_entry) - 1)
        return -ENOMEM; /* entry_count + 1 below cannot wrap to 0 */
    struct stream_route *route = calloc(1, sizeof(*route));
    if (route == NULL ||
        (route->entries = calloc(map->entry_count + 1, sizeof(*route->entries))) == NULL) {
        free(route);
        return -ENOMEM;
    }
    int err = stream_route_fill(arena, map, route);
    if (err != 0) {
        stream_route_free(route);
        return err;
    }
    *out = route;
    return 0;
}

/* The routes's entries from `map`'s (stream_route_build()). */
static int stream_route_fill(const struct build_arena *arena, const struct conf_map *map,
                             struct stream_route *route)
{
    if (stream_var_parse(map->source, &route->source) != 0) {
        log_error("%s:%u:%u: not a stream variable: \"%s\"", map->source_pos.file,
                  map->source_pos.line, map->source_pos.col, map->source);
        return -EINVAL;
    }
    for (size_t i = 0; i < map->entry_count; i++) {
        const struct conf_map_entry *e = &map->entries[i];
        struct proxy_upstream *upstream;
        int err = stream_upstream_build(arena, e->value, &upstream);
        if (err != 0)
            return err;
        if (e->key == NULL) {
            route->fallback = upstream;
            continue;
        }
        struct stream_route_entry *entry = &route->entries[route->count++];
        entry->upstream = upstream;
        if (e->key[0] != '~') {
            entry->key = e->key;
            continue;
        }
        bool caseless = e->key[1] == '*';
        char message[256];
        size_t offset;
        err = regex_compile(e->key + 1 + caseless, caseless, &entry->regex, message,
                            sizeof(message), &offset);
        if (err != 0) {
            log_error("%s:%u:%u: %s", e->key_pos.file, e->key_pos.line, e->key_pos.col,
                      err == -EINVAL ? message : strerror(-err));
            return err;
        }
    }
    return 0;
}

/* The sites of a stream server block's listens, with the upstream its
 * proxy_pass names: the generation's for the same target, shared with the
 * HTTP proxy's as an upstream block's state is among its users. */
static int stream_server_build(struct generation *gen, const struct conf_config *config,
                               const struct conf_stream_server *server,
                               struct upstream_chains *chains, unsigned workers)
{
    for (size_t i = 0; i < config->upstream_count; i++) {
        const struct proxy_upstream_conf *up = &config->upstreams[i].upstream;
        if (strcmp(up->name, server->pass) == 0 && stream_upstream_check(up) != 0) {
            log_error("%s:%u:%u: upstream \"%s\": a stream balances by \"hash $remote_addr\" "
                      "only, not by \"%s\"",
                      server->pass_pos.file, server->pass_pos.line, server->pass_pos.col, up->name,
                      up->hash_key);
            return -EINVAL;
        }
    }
    const struct build_arena arena = {.vars = gen->vars,
                                      .limits = gen->limits,
                                      .gen = gen,
                                      .config = config,
                                      .chains = chains,
                                      .workers = workers};
    const struct conf_map *map = NULL;
    for (size_t i = 0; server->pass[0] == '$' && i < config->stream.map_count; i++)
        if (strcmp(config->stream.maps[i].name, server->pass + 1) == 0)
            map = &config->stream.maps[i];
    if (server->pass[0] == '$' && map == NULL) {
        log_error("no stream map \"%s\"", server->pass); /* a config from elsewhere */
        return -EINVAL;
    }
    struct proxy_upstream *upstream = NULL;
    int err = map == NULL ? stream_upstream_build(&arena, server->pass, &upstream) : 0;
    for (size_t l = 0; err == 0 && l < server->listen_count; l++) {
        const struct conf_stream_listen *listen = &server->listens[l];
        struct stream_route *route = NULL;
        if (map != NULL)
            err = stream_route_build(&arena, map, &route);
        if (err != 0)
            break;
        /* Servers on one TCP address share its site (conf/ checked that
         * they listen alike): each a vhost of it. */
        struct site *shared = NULL;
        for (size_t i = 0; !listen->udp && i < gen->site_count; i++)
            if (gen->sites[i].stream != NULL &&
                conf_same_address(gen->sites[i].address, listen->address))
                shared = &gen->sites[i];
        if (shared != NULL) {
            err = stream_vhost_add(shared, server, listen, upstream, route, gen->limits,
                                   &config->stream, gen->vars);
            continue;
        }
        struct site *site =
            listen->udp ? &gen->udp_sites[gen->udp_site_count++] : &gen->sites[gen->site_count++];
        err = stream_site_build(site, server, listen, upstream, route, gen->limits, &config->stream,
                                gen->vars, workers);
    }
    return err;
}

/* Whether the stream site `site` is a tls listen (its default server's
 * listen on its address says; the others' agree, conf/ checked). */
static bool stream_site_tls(const struct site *site)
{
    const struct conf_stream_server *server = site->stream_server;
    for (size_t l = 0; l < server->listen_count; l++)
        if (!server->listens[l].udp && server->listens[l].tls &&
            conf_same_address(server->listens[l].address, site->address))
            return true;
    return false;
}

/* Builds a site for every distinct listen address, in the order they
 * first appear, then the admin ones: everything a configuration names is
 * loaded here (certificates, keys, CA files, upstream addresses), so `-t`
 * and a reload catch what a start would. */
int sites_build(struct generation *gen, const struct conf_config *config, unsigned workers)
{
    runtime_modules_init(); /* once: the router's steps, the filters' places */
    size_t addresses = config->listen_address_count, listens = 0;
    size_t max_upstreams = 0;
    for (size_t s = 0; s < config->server_count; s++) {
        listens += config->servers[s].listen_count;
        for (size_t l = 0; l < config->servers[s].location_count; l++) {
            const struct conf_location *loc = &config->servers[s].locations[l];
            max_upstreams += proxy_pass_of(loc) != NULL;
            for (size_t n = 0; n < loc->nested_count; n++)
                max_upstreams += proxy_pass_of(&loc->nested[n]) != NULL;
        }
    }
    size_t stream_listens = 0;
    for (size_t s = 0; s < config->stream.server_count; s++)
        stream_listens += config->stream.servers[s].listen_count;
    max_upstreams += config->stream.server_count; /* and each map value at most once: */
    for (size_t m = 0; m < config->stream.map_count; m++)
        max_upstreams += config->stream.maps[m].entry_count;
    size_t buckets = 1;
    while (buckets < 2 * max_upstreams)
        buckets *= 2;
    int vars_err = runtime_vars_new(config, &gen->vars);
    if (vars_err == 0)
        vars_err = runtime_limits_new(gen->vars, config, &gen->limits);
    /* Before the TLS: a certificate not issued yet has its placeholder. */
    if (vars_err == 0)
        vars_err = runtime_acme_new(config, &gen->acme);
    if (vars_err != 0)
        return vars_err;
    gen->sites =
        calloc(addresses + stream_listens + config->admin_listen_count + 1, sizeof(*gen->sites));
    gen->udp_sites = calloc(stream_listens + addresses + 1, sizeof(*gen->udp_sites));
    gen->upstreams = calloc(max_upstreams ? max_upstreams : 1, sizeof(*gen->upstreams));
    /* The servers of each address, grouped by a counting sort on the
     * address's index: each site is built from its own servers only. */
    size_t *ends = calloc(addresses ? addresses : 1, sizeof(*ends));
    struct site_server *entries = calloc(listens ? listens : 1, sizeof(*entries));
    struct upstream_chains chains = {
        .first = malloc(buckets * sizeof(size_t)),
        .next = malloc((max_upstreams + 1) * sizeof(size_t)),
        .mask = buckets - 1,
    };
    int err = gen->sites == NULL || gen->udp_sites == NULL || gen->upstreams == NULL ||
                      ends == NULL || entries == NULL || chains.first == NULL || chains.next == NULL
                  ? -ENOMEM
                  : 0;
    for (size_t b = 0; err == 0 && b < buckets; b++)
        chains.first[b] = SIZE_MAX;
    for (size_t s = 0; err == 0 && s < config->server_count; s++) {
        for (size_t i = 0; err == 0 && i < config->servers[s].listen_count; i++) {
            size_t a = config->servers[s].listens[i].address_index;
            if (a >= addresses)
                err = -EINVAL; /* not a config from the parser */
            else
                ends[a]++;
        }
    }
    /* Each address's count becomes where its entries start, then, once
     * they are placed, where they end. */
    for (size_t a = 0, sum = 0; err == 0 && a < addresses; a++) {
        size_t count = ends[a];
        ends[a] = sum;
        sum += count;
    }
    for (size_t s = 0; err == 0 && s < config->server_count; s++) {
        for (size_t i = 0; i < config->servers[s].listen_count; i++) {
            size_t a = config->servers[s].listens[i].address_index;
            entries[ends[a]++] = (struct site_server){s, i};
        }
    }
    for (size_t a = 0; err == 0 && a < addresses; a++) {
        size_t begin = a == 0 ? 0 : ends[a - 1], count = ends[a] - begin;
        assert(count > 0); /* an address has an index once a listen names it */
        const struct conf_listen *listen = site_listen(config, &entries[begin]);
        if (listen->quic) {
            /* A server with http3 off has no vhost there (and no Alt-Svc);
             * an address whose servers all have it off, no socket. */
            size_t kept = 0;
            for (size_t e = begin; e < begin + count; e++)
                if (!config->servers[entries[e].server].http3_off)
                    entries[begin + kept++] = entries[e];
            count = kept;
            if (count == 0)
                continue;
            listen = site_listen(config, &entries[begin]);
        }
        /* A quic address is a udp listen of its own. */
        struct site *site =
            listen->quic ? &gen->udp_sites[gen->udp_site_count++] : &gen->sites[gen->site_count++];
        err = site_build(site, gen, config, listen->address, &entries[begin], count, &chains,
                         workers);
        if (err == 0 && listen->quic)
            err = quic_site_build(site, gen, config, listen, workers);
    }
    size_t first_stream = gen->site_count;
    for (size_t s = 0; err == 0 && s < config->stream.server_count; s++)
        err = stream_server_build(gen, config, &config->stream.servers[s], &chains, workers);
    /* TLS once an address's servers are all known. */
    for (size_t i = first_stream; err == 0 && i < gen->site_count; i++)
        if (stream_site_tls(&gen->sites[i]))
            err = stream_tls_build(&gen->sites[i], workers);
    free(chains.first);
    free(chains.next);
    free(ends);
    free(entries);
    if (err != 0)
        return err;
    char *token = NULL;
    size_t token_len = 0;
    if (config->admin_listen_count > 0 && config->admin.token_file != NULL) {
        token = runtime_vars_calloc(gen->vars, 1, ADMIN_TOKEN_MAX + 1);
        if (token == NULL)
            return -ENOMEM;
        err = admin_token_read(config->admin.token_file, &config->admin.token_file_pos, token,
                               &token_len);
        if (err != 0)
            return err;
    }
    for (size_t i = 0; i < config->admin_listen_count; i++) {
        err = admin_site_build(&gen->sites[gen->site_count++], gen, config, i, token, token_len,
                               workers);
        if (err != 0)
            return err;
    }
    return 0;
}

/* `-t`: builds what the configuration names, without listening. */
int check_config(const struct conf_config *config)
{
    struct generation *trial = calloc(1, sizeof(*trial));
    if (trial == NULL)
        return -ENOMEM;
    int err = sites_build(trial, config, 1);
    generation_free(trial);
    return err;
}

/* What the configuration language accepts but this daemon cannot serve
 * yet: refused with the position, rather than failing on the first request. */
int check_servable(const struct conf_config *config)
{
    (void)config; /* log_format is compiled, with its position, by sites_build() */
    return 0;
}
