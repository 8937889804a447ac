/*
 * corral.c: the daemon.  Loads the configuration, builds a generation (a
 * libcorral server with its HTTP sites) on the configured addresses, and runs
 * the main thread's loop for signals: SIGHUP reloads without closing the
 * listening sockets, SIGTERM/SIGINT stop gracefully, SIGQUIT at once, SIGUSR1
 * reopens the log.
 */
#include "cmd/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct daemon_state daemon_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

static corral_loop *main_loop;
static bool stopping;

/* Sockets passed by systemd (LISTEN_FDS), by bound address. */
struct activated_socket {
    char address[128];
    int fd;
};
static struct activated_socket *activated;
static size_t activated_count;

/* ------------------------------------------------------------ sites */

static const struct http_location admin_locations[] = {
    {.path = "/metrics", .path_len = 8, .exact = true, .handler = &admin_metrics_handler},
    {.path = "/status", .path_len = 7, .exact = true, .handler = &admin_status_handler},
};

static void site_free(struct site *site)
{
    tls_server_free(site->http.tls);
    free(site->proxies);
    free(site->proxy_headers);
    free(site->proxy_hides);
    free(site->address);
    free(site->vhosts);
    free(site->locations);
    free(site->returns);
}

static struct http_limits limits_from(const struct conf_http *http)
{
    return (struct http_limits){
        .header_timeout_ms = http->client_header_timeout_ms,
        .body_timeout_ms = http->client_body_timeout_ms,
        .send_timeout_ms = http->send_timeout_ms,
        .keepalive_timeout_ms = http->keepalive_timeout_ms,
        .keepalive_requests = http->keepalive_requests,
        .max_header_size = http->client_max_header_size,
        .max_headers = http->client_max_headers,
        .max_body_size = http->client_max_body_size,
    };
}

/* The same address, as the kernel reports it, whatever the spelling. */
static bool same_address(const char *a, const char *b)
{
    struct sockaddr_storage x, y;
    socklen_t xl, yl;
    char ta[128], tb[128];
    if (corral_parse_address(a, &x, &xl) != 0 || corral_parse_address(b, &y, &yl) != 0)
        return strcmp(a, b) == 0;
    corral_format_address((struct sockaddr *)&x, xl, ta, sizeof(ta));
    corral_format_address((struct sockaddr *)&y, yl, tb, sizeof(tb));
    return strcmp(ta, tb) == 0;
}

static bool server_listens_on(const struct conf_server *server, const char *address)
{
    for (size_t i = 0; i < server->listen_count; i++)
        if (same_address(server->listens[i].address, address))
            return true;
    return false;
}

static bool server_is_default_on(const struct conf_server *server, const char *address)
{
    for (size_t i = 0; i < server->listen_count; i++)
        if (server->listens[i].default_server && same_address(server->listens[i].address, address))
            return true;
    return false;
}

/* The socket options of `address`: the library's defaults unless one of its
 * listen directives sets deferred or backlog (only one may).  A deferred
 * accept waits for the first bytes up to the header timeout, as the server
 * would close a silent connection then anyway. */
static void listen_options_from(const struct conf_config *config, const char *address,
                                struct corral_listen_options *options)
{
    corral_listen_options_init(options);
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        for (size_t i = 0; i < server->listen_count; i++) {
            const struct conf_listen *listen = &server->listens[i];
            if (!listen->has_socket_options || !same_address(listen->address, address))
                continue;
            if (listen->backlog != 0)
                options->backlog = (int)listen->backlog;
            if (listen->deferred)
                options->defer_accept_s = (server->http.client_header_timeout_ms + 999) / 1000;
            return;
        }
    }
}

static const struct conf_upstream *find_upstream(const struct conf_config *config,
                                                  const char *name)
{
    for (size_t i = 0; i < config->upstream_count; i++)
        if (strcmp(config->upstreams[i].name, name) == 0)
            return &config->upstreams[i];
    return NULL;
}

/* TLS towards the upstream of an https:// proxy_pass.  The name checked in
 * its certificate (and sent as SNI) is proxy_tls_name, else the host that
 * proxy_pass names: the upstream block's name, or the address's host. */
static int upstream_tls_build(const struct conf_location *loc, const char *target,
                              unsigned workers, size_t server_count, struct tls_client **out)
{
    char host[256];
    if (target[0] == '[')
        snprintf(host, sizeof(host), "%.*s", (int)strcspn(target + 1, "]"), target + 1);
    else
        snprintf(host, sizeof(host), "%.*s", (int)strcspn(target, ":"), target);
    struct tls_client_conf conf = {
        .verify = loc->proxy_tls.verify,
        .ca_file = loc->proxy_tls.trusted_certificate,
        .server_name = loc->proxy_tls.server_name != NULL ? loc->proxy_tls.server_name : host,
    };
    char error[512];
    int err = tls_client_new(&conf, workers, server_count, out, error, sizeof(error));
    if (err == -EINVAL) {
        const struct conf_pos *pos = loc->proxy_tls.trusted_certificate != NULL
                                         ? &loc->proxy_tls.trusted_certificate_pos
                                         : &loc->pos;
        log_error("%s:%u:%u: %s", pos->file, pos->line, pos->col, error);
    }
    return err;
}

static bool same_optional_text(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/* Whether two proxy_pass locations can share an upstream: the same target
 * and, for https, the same TLS settings. */
static bool same_upstream(const struct conf_location *a, const struct conf_location *b)
{
    if (strcmp(a->proxy_pass, b->proxy_pass) != 0)
        return false;
    return strncmp(a->proxy_pass, "https://", 8) != 0 ||
           (a->proxy_tls.verify == b->proxy_tls.verify &&
            same_optional_text(a->proxy_tls.trusted_certificate,
                               b->proxy_tls.trusted_certificate) &&
            same_optional_text(a->proxy_tls.server_name, b->proxy_tls.server_name));
}

/* The upstream for a proxy_pass location: the generation's one for the same
 * target, as nginx shares an upstream block's connections and health state
 * among the locations that name it, or a new one: a named upstream block,
 * or the single address proxy_pass names. */
static int upstream_get(struct generation *gen, const struct conf_config *config,
                        const struct conf_location *loc, unsigned workers,
                        struct proxy_upstream **out)
{
    static const enum proxy_balance balances[] = {
        [CONF_BALANCE_ROUND_ROBIN] = PROXY_BALANCE_ROUND_ROBIN,
        [CONF_BALANCE_LEAST_CONN] = PROXY_BALANCE_LEAST_CONN,
        [CONF_BALANCE_HASH] = PROXY_BALANCE_HASH,
    };
    for (size_t i = 0; i < gen->upstream_count; i++) {
        if (same_upstream(gen->upstreams[i].first, loc)) {
            *out = gen->upstreams[i].upstream;
            return 0;
        }
    }
    bool https = strncmp(loc->proxy_pass, "https://", 8) == 0;
    const char *target = loc->proxy_pass + (https ? strlen("https://") : strlen("http://"));
    const struct conf_upstream *named = find_upstream(config, target);
    size_t count = named != NULL ? named->server_count : 1;
    struct proxy_server_conf *servers = calloc(count, sizeof(*servers));
    if (servers == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++) {
        servers[i] = named != NULL
                         ? (struct proxy_server_conf){named->servers[i].address,
                                                      named->servers[i].weight,
                                                      named->servers[i].max_fails,
                                                      named->servers[i].fail_timeout_ms}
                         : (struct proxy_server_conf){target, 1, 1, 10000};
    }
    struct proxy_upstream_conf conf = {
        .name = named != NULL ? named->name : target,
        .servers = servers,
        .server_count = count,
        .balance = named != NULL ? balances[named->balance] : PROXY_BALANCE_ROUND_ROBIN,
        .keepalive = named != NULL ? named->keepalive : 32,
        .idle_timeout_ms = named != NULL ? named->keepalive_timeout_ms : 60000,
    };
    int err = https ? upstream_tls_build(loc, target, workers, count, &conf.tls) : 0;
    if (err == 0)
        err = proxy_upstream_new(&conf, workers, out);
    free(servers);
    if (err != 0) {
        tls_client_free(conf.tls);
        return err;
    }
    gen->upstreams[gen->upstream_count++] = (struct shared_upstream){*out, loc};
    return 0;
}

/* One proxy_pass location on `upstream`, with the timeouts of its server
 * block and its own header rewriting. */
static void proxy_build(struct site *site, size_t index, const struct conf_server *server,
                        const struct conf_location *loc, struct proxy_upstream *upstream,
                        size_t *headers_used, size_t *hides_used)
{
    struct http_header *headers = &site->proxy_headers[*headers_used];
    for (size_t i = 0; i < loc->set_header_count; i++)
        headers[i] = (struct http_header){
            {loc->set_headers[i].name, strlen(loc->set_headers[i].name)},
            {loc->set_headers[i].value, strlen(loc->set_headers[i].value)}};
    struct http_str *hides = &site->proxy_hides[*hides_used];
    for (size_t i = 0; i < loc->hide_header_count; i++)
        hides[i] = (struct http_str){loc->hide_headers[i], strlen(loc->hide_headers[i])};
    *headers_used += loc->set_header_count;
    *hides_used += loc->hide_header_count;
    site->proxies[index] = (struct proxy_location){
        .upstream = upstream,
        .connect_timeout_ms = server->http.proxy_connect_timeout_ms,
        .read_timeout_ms = server->http.proxy_read_timeout_ms,
        .send_timeout_ms = server->http.proxy_send_timeout_ms,
        .set_headers = headers,
        .set_header_count = loc->set_header_count,
        .hide_headers = hides,
        .hide_header_count = loc->hide_header_count,
    };
}

static bool site_is_tls(const struct conf_config *config, const char *address)
{
    for (size_t s = 0; s < config->server_count; s++)
        for (size_t i = 0; i < config->servers[s].listen_count; i++)
            if (config->servers[s].listens[i].tls &&
                same_address(config->servers[s].listens[i].address, address))
                return true;
    return false;
}

/* Points a TLS loading problem at the directive behind it. */
static void report_tls_problem(void *arg, enum tls_conf_item item, size_t vhost, size_t index,
                               bool warning, const char *message)
{
    const struct conf_server *const *servers = arg;
    const struct conf_tls *tls = &servers[vhost]->tls;
    const struct conf_pos *pos = item == TLS_CONF_CERTIFICATE ? &tls->certificates[index].certificate_pos
                                 : item == TLS_CONF_KEY       ? &tls->certificates[index].key_pos
                                 : item == TLS_CONF_CIPHERS   ? &tls->ciphers_pos
                                 : item == TLS_CONF_CIPHERSUITES ? &tls->ciphersuites_pos
                                                                 : &tls->client_certificate_pos;
    if (pos->file == NULL) /* a built-in default: point at the server block */
        pos = &servers[vhost]->pos;
    if (warning)
        log_warn("%s:%u:%u: %s", pos->file, pos->line, pos->col, message);
    else
        log_error("%s:%u:%u: %s", pos->file, pos->line, pos->col, message);
}

/* The site's TLS: each vhost's certificates, and the rest of the settings
 * from its default server (vhost 0). */
static int site_tls_build(struct site *site, const struct conf_server **vhost_servers)
{
    static const enum tls_verify_client verify_modes[] = {
        [CONF_TLS_VERIFY_CLIENT_OFF] = TLS_VERIFY_CLIENT_OFF,
        [CONF_TLS_VERIFY_CLIENT_OPTIONAL] = TLS_VERIFY_CLIENT_OPTIONAL,
        [CONF_TLS_VERIFY_CLIENT_ON] = TLS_VERIFY_CLIENT_ON,
    };
    size_t count = site->http.vhost_count, files_count = 0;
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
        vhosts[v] = (struct tls_vhost_conf){next, tls->certificate_count};
        for (size_t i = 0; i < tls->certificate_count; i++)
            *next++ = (struct tls_certificate_files){tls->certificates[i].certificate,
                                                     tls->certificates[i].key};
    }
    const struct conf_tls *tls = &vhost_servers[0]->tls;
    struct tls_server_conf conf = {
        .protocols = (tls->protocols & CONF_TLS_1_2 ? TLS_PROTOCOL_1_2 : 0) |
                     (tls->protocols & CONF_TLS_1_3 ? TLS_PROTOCOL_1_3 : 0),
        .ciphers = tls->ciphers,
        .ciphersuites = tls->ciphersuites,
        .session_tickets = tls->session_tickets,
        .ticket_key_rotation_ms = tls->ticket_key_rotation_ms,
        .session_cache = tls->session_cache,
        .session_timeout_ms = tls->session_timeout_ms,
        .handshake_timeout_ms = tls->handshake_timeout_ms,
        .ktls = tls->ktls,
        .client_ca = tls->client_certificate,
        .verify_client = verify_modes[tls->verify_client],
    };
    struct tls_report report = {report_tls_problem, vhost_servers};
    int err = tls_server_new(&conf, &site->http, vhosts, &report, &site->http.tls);
    free(vhosts);
    free(files);
    return err;
}

/* Builds the site for `address` from every server block listening there;
 * the default server (or the first) becomes vhost 0. */
static int site_build(struct site *site, struct generation *gen, const struct conf_config *config,
                      const char *address, unsigned workers)
{
    size_t vhost_count = 0, location_count = 0, return_count = 0, proxy_count = 0;
    size_t header_count = 0, hide_count = 0;
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        if (!server_listens_on(server, address))
            continue;
        vhost_count++;
        location_count += server->location_count;
        for (size_t l = 0; l < server->location_count; l++) {
            const struct conf_location *loc = &server->locations[l];
            return_count += loc->handler == CONF_HANDLER_RETURN;
            proxy_count += loc->handler == CONF_HANDLER_PROXY;
            header_count += loc->set_header_count;
            hide_count += loc->hide_header_count;
        }
    }
    listen_options_from(config, address, &site->listen_options);
    site->address = strdup(address);
    site->vhosts = calloc(vhost_count, sizeof(*site->vhosts));
    site->locations = calloc(location_count ? location_count : 1, sizeof(*site->locations));
    site->returns = calloc(return_count ? return_count : 1, sizeof(*site->returns));
    site->proxies = calloc(proxy_count ? proxy_count : 1, sizeof(*site->proxies));
    site->proxy_headers = calloc(header_count ? header_count : 1, sizeof(*site->proxy_headers));
    site->proxy_hides = calloc(hide_count ? hide_count : 1, sizeof(*site->proxy_hides));
    if (site->address == NULL || site->vhosts == NULL || site->locations == NULL ||
        site->returns == NULL || site->proxies == NULL ||
        site->proxy_headers == NULL || site->proxy_hides == NULL)
        return -ENOMEM;

    const struct conf_server **vhost_servers = calloc(vhost_count, sizeof(*vhost_servers));
    if (vhost_servers == NULL)
        return -ENOMEM;
    size_t v = 0, l = 0, r = 0, p = 0, headers_used = 0, hides_used = 0;
    int err = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t s = 0; s < config->server_count && err == 0; s++) {
            const struct conf_server *server = &config->servers[s];
            bool is_default = server_is_default_on(server, address);
            if (!server_listens_on(server, address) || is_default != (pass == 0))
                continue;
            vhost_servers[v] = server;
            struct http_vhost *vhost = &site->vhosts[v++];
            vhost->names = (const char *const *)server->server_names;
            vhost->name_count = server->server_name_count;
            vhost->limits = limits_from(&server->http);
            vhost->locations = &site->locations[l];
            vhost->location_count = server->location_count;
            for (size_t i = 0; i < server->location_count && err == 0; i++) {
                const struct conf_location *conf = &server->locations[i];
                struct http_location *loc = &site->locations[l++];
                *loc = (struct http_location){.path = conf->path, .path_len = strlen(conf->path),
                                              .exact = conf->exact};
                if (conf->handler == CONF_HANDLER_RETURN) {
                    struct http_return *ret = &site->returns[r++];
                    *ret = (struct http_return){conf->return_code, conf->return_text,
                                                conf->return_text ? strlen(conf->return_text) : 0};
                    loc->handler = &http_return_handler;
                    loc->handler_data = ret;
                } else if (conf->handler == CONF_HANDLER_PROXY) {
                    struct proxy_upstream *upstream;
                    err = upstream_get(gen, config, conf, workers, &upstream);
                    if (err == 0)
                        proxy_build(site, p, server, conf, upstream, &headers_used, &hides_used);
                    loc->handler = &proxy_handler;
                    loc->handler_data = &site->proxies[p++];
                }
            }
        }
    }
    site->http = (struct http_site){.vhosts = site->vhosts, .vhost_count = vhost_count};
    if (err == 0 && site_is_tls(config, address))
        err = site_tls_build(site, vhost_servers);
    free(vhost_servers);
    return err;
}

static int admin_site_build(struct site *site, const struct conf_config *config, const char *address)
{
    corral_listen_options_init(&site->listen_options);
    site->address = strdup(address);
    site->vhosts = calloc(1, sizeof(*site->vhosts));
    if (site->address == NULL || site->vhosts == NULL)
        return -ENOMEM;
    site->vhosts[0] = (struct http_vhost){
        .locations = admin_locations,
        .location_count = sizeof(admin_locations) / sizeof(admin_locations[0]),
        .limits = limits_from(&config->http),
    };
    site->http = (struct http_site){.vhosts = site->vhosts, .vhost_count = 1, .admin = true};
    return 0;
}

/* ------------------------------------------------------------ generations */

static void generation_free(struct generation *gen)
{
    if (gen == NULL)
        return;
    corral_server_free(gen->server);
    for (size_t i = 0; i < gen->site_count; i++)
        site_free(&gen->sites[i]);
    free(gen->sites);
    for (size_t i = 0; i < gen->upstream_count; i++)
        proxy_upstream_free(gen->upstreams[i].upstream);
    free(gen->upstreams);
    free(gen->stats);
    access_log_free(gen->access_log);
    conf_free(gen->config);
    free(gen);
}

static struct site *find_site(struct generation *gen, const char *address)
{
    for (size_t i = 0; gen != NULL && i < gen->site_count; i++)
        if (same_address(gen->sites[i].address, address))
            return &gen->sites[i];
    return NULL;
}

/* Builds a site for every distinct listen address, then the admin ones:
 * everything a configuration names is loaded here (certificates, keys, CA
 * files, upstream addresses), so `-t` and a reload catch what a start would. */
static int sites_build(struct generation *gen, const struct conf_config *config, unsigned workers)
{
    size_t max_sites = config->admin_listen_count;
    for (size_t s = 0; s < config->server_count; s++)
        max_sites += config->servers[s].listen_count;
    size_t max_upstreams = 0;
    for (size_t s = 0; s < config->server_count; s++)
        for (size_t l = 0; l < config->servers[s].location_count; l++)
            max_upstreams += config->servers[s].locations[l].handler == CONF_HANDLER_PROXY;
    gen->sites = calloc(max_sites ? max_sites : 1, sizeof(*gen->sites));
    gen->upstreams = calloc(max_upstreams ? max_upstreams : 1, sizeof(*gen->upstreams));
    if (gen->sites == NULL || gen->upstreams == NULL)
        return -ENOMEM;
    for (size_t s = 0; s < config->server_count; s++) {
        for (size_t i = 0; i < config->servers[s].listen_count; i++) {
            const char *address = config->servers[s].listens[i].address;
            if (find_site(gen, address) != NULL)
                continue;
            int err = site_build(&gen->sites[gen->site_count++], gen, config, address, workers);
            if (err != 0)
                return err;
        }
    }
    for (size_t i = 0; i < config->admin_listen_count; i++) {
        int err = admin_site_build(&gen->sites[gen->site_count++], config, config->admin_listens[i]);
        if (err != 0)
            return err;
    }
    return 0;
}

/* `-t`: builds what the configuration names, without listening. */
static int check_config(const struct conf_config *config)
{
    struct generation *trial = calloc(1, sizeof(*trial));
    if (trial == NULL)
        return -ENOMEM;
    int err = sites_build(trial, config, 1);
    generation_free(trial);
    return err;
}

/* Listens for `site` in `gen`: on the previous generation's sockets when it
 * had the same address with the same socket layout, on a socket passed by
 * systemd, else on a new one.  Returns -EADDRINUSE when the previous
 * generation holds the address with another layout. */
static int site_listen(struct generation *gen, struct site *site, struct generation *previous)
{
    struct site *old = find_site(previous, site->address);
    if (old != NULL && old->listener != NULL) {
        const int *fds;
        unsigned count = corral_listener_fds(old->listener, &fds);
        if (count != corral_server_sockets_per_listener(gen->server))
            return -EADDRINUSE;
        return corral_server_listen_fds(gen->server, fds, count, &site->listen_options,
                                        &http1_server_handler, &site->http, &site->listener);
    }
    for (size_t i = 0; i < activated_count; i++)
        if (same_address(activated[i].address, site->address))
            return corral_server_listen_fds(gen->server, &activated[i].fd, 1, &site->listen_options,
                                            &http1_server_handler, &site->http, &site->listener);
    return corral_server_listen(gen->server, site->address, &site->listen_options,
                                &http1_server_handler, &site->http, &site->listener);
}

/* After the previous generation closed its sockets: new ones on the very
 * address it had bound (the same port even where the config says 0). */
static int site_relisten(struct generation *gen, struct site *site, struct generation *previous)
{
    char bound[128];
    struct site *old = find_site(previous, site->address);
    if (old == NULL || corral_listener_address(old->listener, bound, sizeof(bound)) != 0)
        return site_listen(gen, site, NULL);
    return corral_server_listen(gen->server, bound, &site->listen_options, &http1_server_handler,
                                &site->http, &site->listener);
}

static void on_generation_exit(void *arg);

static int generation_start(struct conf_config *config, struct generation *previous,
                            struct generation **out)
{
    int err;
    struct generation *gen = calloc(1, sizeof(*gen));
    if (gen == NULL) {
        conf_free(config);
        return -ENOMEM;
    }
    gen->config = config;
    struct corral_server_config server_config;
    corral_server_config_init(&server_config);
    server_config.workers = config->workers;
    server_config.wakeup = config->wakeup;
    server_config.max_connections = config->max_connections;
    server_config.busy_poll_usecs = config->busy_poll_usecs;
    err = corral_server_new(&server_config, &gen->server);
    if (err != 0)
        goto fail;
    unsigned workers = corral_server_worker_count(gen->server);
    if (workers > DAEMON_MAX_WORKERS) {
        log_error("workers %u: at most %d are supported", workers, DAEMON_MAX_WORKERS);
        err = -EINVAL;
        goto fail;
    }
    gen->stats = aligned_alloc(64, workers * sizeof(*gen->stats));
    if (gen->stats == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    memset(gen->stats, 0, workers * sizeof(*gen->stats));

    err = sites_build(gen, config, workers);
    if (err != 0)
        goto fail;
    if (config->access_log != NULL) {
        const char *bad;
        err = access_log_open(config->access_log, config->log_format, &gen->access_log, &bad);
        if (err != 0) {
            log_error("access_log %s: %s", config->access_log, strerror(-err));
            goto fail;
        }
    }
    for (size_t i = 0; i < gen->site_count; i++) {
        struct site *site = &gen->sites[i];
        site->http.stats = gen->stats;
        if (!site->http.admin)
            site->http.access_log = gen->access_log;
        /* Tickets issued before a reload keep resuming after it. */
        struct site *old = find_site(previous, site->address);
        if (site->http.tls != NULL && old != NULL && old->http.tls != NULL)
            tls_server_take_ticket_keys(site->http.tls, old->http.tls);
    }

    /* Inherit what can be inherited first, so that closing the previous
     * generation's sockets (for a layout change) cannot pull any we need. */
    bool layout_changed = false;
    for (size_t i = 0; i < gen->site_count; i++) {
        struct site *site = &gen->sites[i];
        err = site_listen(gen, site, previous);
        if (err == -EADDRINUSE && previous != NULL) {
            layout_changed = true;
            continue;
        }
        if (err != 0) {
            log_error("listen %s: %s", site->address, strerror(-err));
            goto fail;
        }
    }
    if (layout_changed) {
        /* Switching between shared and per-worker sockets needs new sockets
         * on the same ports, which the old ones block. */
        log_warn("the listening socket layout changes (wakeup or workers): re-creating the "
                 "sockets; connections queued at this instant may be reset");
        corral_server_close_listeners(previous->server);
        for (size_t i = 0; i < gen->site_count; i++) {
            struct site *site = &gen->sites[i];
            if (site->listener != NULL)
                continue;
            err = site_relisten(gen, site, previous);
            if (err != 0) {
                log_error("listen %s: %s; generation %u no longer accepts", site->address,
                          strerror(-err), previous->number);
                goto fail;
            }
        }
    }
    corral_server_on_exit(gen->server, main_loop, on_generation_exit, gen);
    err = corral_server_start(gen->server);
    if (err != 0)
        goto fail;
    gen->number = ++daemon_state.generation_count;
    *out = gen;
    return 0;

fail:
    generation_free(gen);
    return err;
}

/* Adds an exited generation's counters to the retired totals. */
static void retire_counters(struct generation *gen)
{
    struct retired_totals *retired = &daemon_state.retired;
    for (unsigned i = 0; i < corral_server_worker_count(gen->server); i++) {
        struct corral_worker_stats stats;
        corral_server_stats(gen->server, i, &stats);
        retired->accepts[i] += stats.accepts;
        retired->accept_wakeups[i] += stats.accept_wakeups;
        retired->accept_wasted[i] += stats.accept_wasted;
        retired->accepts_local[i] += stats.accepts_local;
        for (unsigned s = 0; s < HTTP_MAX_STATUS; s++)
            retired->responses[s] += atomic_load(&gen->stats[i].responses[s]);
        for (unsigned k = 0; k < HTTP_TIMEOUT_KINDS; k++)
            retired->timeouts[k] += atomic_load(&gen->stats[i].timeouts[k]);
        tls_totals_add(&retired->tls, &gen->stats[i].tls);
    }
    for (size_t i = 0; i < gen->upstream_count; i++)
        upstream_errors_add(retired->upstreams, &retired->upstream_count,
                            gen->upstreams[i].upstream);
}

/* Main loop: the last worker of `arg` has exited. */
static void on_generation_exit(void *arg)
{
    struct generation *gen = arg;
    corral_server_wait(gen->server);
    pthread_mutex_lock(&daemon_state.lock);
    struct generation **link = &daemon_state.generations;
    while (*link != gen)
        link = &(*link)->next;
    *link = gen->next;
    retire_counters(gen);
    bool none_left = daemon_state.generations == NULL;
    pthread_mutex_unlock(&daemon_state.lock);
    log_info("generation %u finished", gen->number);
    generation_free(gen);
    if (none_left && stopping)
        corral_loop_stop(main_loop);
}

static void log_wakeup(const struct generation *gen)
{
    struct corral_wakeup_info info;
    corral_server_wakeup(gen->server, &info);
    log_info("generation %u: %u workers, wakeup %s resolved to %s (%s)", gen->number,
             corral_server_worker_count(gen->server), corral_wakeup_mode_name(info.requested),
             corral_wakeup_mode_name(info.mode), info.impl);
}

/* What the configuration language accepts but this daemon cannot serve
 * yet: refused with the position, rather than failing on the first request. */
static int check_servable(const struct conf_config *config)
{
    const char *bad;
    if (config->log_format != NULL && access_log_check_format(config->log_format, &bad) != 0) {
        log_error("%s: log_format: unknown variable \"%.*s\"", config->path,
                  (int)strcspn(bad + 1, " \"'[]()") + 1, bad);
        return -EINVAL;
    }
    return 0;
}

static int load_config(const char *path, struct conf_config **out)
{
    struct conf_error error;
    int rc = path != NULL ? conf_load(path, out, &error)
                          : conf_parse("<built-in>", conf_default_text, strlen(conf_default_text),
                                       NULL, NULL, out, &error);
    if (rc != 0) {
        log_error("%s", error.text);
        return -EINVAL;
    }
    if (check_servable(*out) != 0) {
        conf_free(*out);
        *out = NULL;
        return -EINVAL;
    }
    return 0;
}

static void reload(void)
{
    if (stopping)
        return;
    struct conf_config *config;
    log_info("SIGHUP: reloading %s", daemon_state.config_path ? daemon_state.config_path
                                                               : "the built-in configuration");
    if (load_config(daemon_state.config_path, &config) != 0) {
        log_error("reload failed; generation %u keeps serving", daemon_state.generations->number);
        return;
    }
    struct generation *previous = daemon_state.generations, *gen;
    int err = generation_start(config, previous, &gen);
    if (err != 0) {
        log_error("reload failed (%s); generation %u keeps serving", strerror(-err),
                  previous->number);
        return;
    }
    pthread_mutex_lock(&daemon_state.lock);
    gen->next = daemon_state.generations;
    daemon_state.generations = gen;
    pthread_mutex_unlock(&daemon_state.lock);
    log_wakeup(gen);
    for (size_t i = 0; i < gen->site_count; i++) {
        if (find_site(previous, gen->sites[i].address) != NULL)
            continue;
        char bound[128];
        corral_listener_address(gen->sites[i].listener, bound, sizeof(bound));
        log_info("listening on %s%s", bound, gen->sites[i].http.admin ? " (admin)" : "");
    }
    corral_set_log_level(config->log_level);
    /* The old generation stops accepting (its sockets live on in the new
     * one), finishes what is in flight, and exits within the drain timeout. */
    log_info("generation %u: draining (up to %u ms)", previous->number,
             previous->config->drain_timeout_ms);
    corral_server_stop(previous->server, previous->config->drain_timeout_ms);
}

static void stop_all(uint32_t graceful_ms)
{
    stopping = true;
    pthread_mutex_lock(&daemon_state.lock);
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next)
        corral_server_stop(g->server, graceful_ms);
    pthread_mutex_unlock(&daemon_state.lock);
}

static void on_signal(int signo, void *arg)
{
    (void)arg;
    switch (signo) {
    case SIGHUP:
        reload();
        break;
    case SIGUSR1: {
        int err = daemon_log_reopen();
        struct generation *gen = daemon_state.generations;
        if (err == 0 && gen != NULL && gen->access_log != NULL)
            err = access_log_reopen(gen->access_log);
        if (err != 0)
            log_error("SIGUSR1: reopening the logs failed: %s", strerror(-err));
        else
            log_info("SIGUSR1: log reopened");
        break;
    }
    case SIGQUIT:
        log_info("SIGQUIT: stopping now");
        stop_all(0);
        break;
    default: {
        uint32_t drain = daemon_state.generations->config->drain_timeout_ms;
        log_info("%s: stopping gracefully (up to %u ms)", strsignal(signo), drain);
        stop_all(drain);
    }
    }
}

/* ------------------------------------------------------------- start-up */

/* systemd socket activation: LISTEN_PID is us, LISTEN_FDS sockets from 3. */
static void collect_activated_sockets(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (pid == NULL || fds == NULL || atol(pid) != (long)getpid())
        return;
    int count = atoi(fds);
    activated = calloc((size_t)(count > 0 ? count : 1), sizeof(*activated));
    for (int i = 0; activated != NULL && i < count; i++) {
        int fd = 3 + i;
        struct sockaddr_storage addr;
        socklen_t len = sizeof(addr);
        if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0 ||
            corral_format_address((struct sockaddr *)&addr, len, activated[activated_count].address,
                                  sizeof(activated[activated_count].address)) != 0)
            continue;
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        activated[activated_count++].fd = fd;
        log_info("socket activation: %s (fd %d)", activated[activated_count - 1].address, fd);
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* Enough descriptors for every worker's connections, twice over for
 * proxied ones, within the hard limit. */
static void raise_fd_limit(const struct conf_config *config, unsigned workers)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return;
    rlim_t clients = (rlim_t)workers * (config->max_connections ? config->max_connections : 1024);
    rlim_t wanted = clients * 2 + 256;
    if (limit.rlim_cur >= wanted)
        return;
    rlim_t target = wanted < limit.rlim_max ? wanted : limit.rlim_max;
    limit.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
        log_warn("setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)target, strerror(errno));
    else if (target < clients)
        log_warn("open files limited to %llu (the hard limit), below max_connections %u x %u "
                 "workers; accepting pauses when it is reached",
                 (unsigned long long)target, config->max_connections, workers);
}

static int drop_privileges(const struct conf_config *config)
{
    if (config->user == NULL && config->group == NULL)
        return 0;
    gid_t gid = getgid();
    uid_t uid = getuid();
    if (config->user != NULL) {
        struct passwd *pw = getpwnam(config->user);
        if (pw == NULL) {
            log_error("user \"%s\": no such user", config->user);
            return -1;
        }
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    }
    if (config->group != NULL) {
        struct group *gr = getgrnam(config->group);
        if (gr == NULL) {
            log_error("group \"%s\": no such group", config->group);
            return -1;
        }
        gid = gr->gr_gid;
    }
    /* Group first: once the user changes, the group can no longer be. */
    if (setgroups(0, NULL) != 0 && errno != EPERM) {
        log_error("setgroups: %s", strerror(errno));
        return -1;
    }
    if (setgid(gid) != 0 || setuid(uid) != 0) {
        log_error("dropping privileges to %s:%s: %s", config->user ? config->user : "-",
                  config->group ? config->group : "-", strerror(errno));
        return -1;
    }
    log_info("running as uid %u gid %u", (unsigned)uid, (unsigned)gid);
    return 0;
}

static int write_pid_file(const char *path)
{
    FILE *f = fopen(path, "we");
    if (f == NULL) {
        log_error("pid_file %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    return 0;
}

static void print_probe(void)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    static const struct {
        const char *name;
        size_t offset;
        const char *what;
    } flags[] = {
        {"epoll_exclusive", offsetof(struct corral_kernel_caps, epoll_exclusive),
         "EPOLLEXCLUSIVE wake-one (Linux 4.5)"},
        {"epoll_rotate", offsetof(struct corral_kernel_caps, epoll_rotate),
         "native round-robin epoll set"},
        {"epoll_affinity", offsetof(struct corral_kernel_caps, epoll_affinity),
         "native CPU-affinity epoll set"},
        {"reuseport", offsetof(struct corral_kernel_caps, reuseport), "SO_REUSEPORT (Linux 3.9)"},
        {"reuseport_cbpf", offsetof(struct corral_kernel_caps, reuseport_cbpf),
         "SO_ATTACH_REUSEPORT_CBPF (Linux 4.5)"},
        {"incoming_cpu", offsetof(struct corral_kernel_caps, incoming_cpu),
         "SO_INCOMING_CPU (Linux 4.4)"},
        {"busy_poll", offsetof(struct corral_kernel_caps, busy_poll),
         "per-epoll busy poll, EPIOCSPARAMS (Linux 6.9)"},
    };
    printf("kernel capabilities:\n");
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        printf("  %-16s %-4s %s\n", flags[i].name,
               *(const bool *)((const char *)&caps + flags[i].offset) ? "yes" : "no",
               flags[i].what);
    printf("  %-16s %u:", "cpus", caps.cpu_count);
    for (unsigned i = 0; i < caps.cpu_count; i++)
        printf(" %u", caps.cpus[i]);
    printf("\nwakeup modes:\n");
    for (int m = CORRAL_WAKEUP_AUTO; m <= CORRAL_WAKEUP_HERD; m++) {
        struct corral_wakeup_info info;
        corral_wakeup_resolve((enum corral_wakeup_mode)m, &caps, &info);
        printf("  %-11s -> %-10s (%s)%s%s\n", corral_wakeup_mode_name(info.requested),
               corral_wakeup_mode_name(info.mode), info.impl, info.reason[0] ? ": " : "",
               info.reason);
    }
}

static void usage(FILE *to)
{
    fprintf(to, "usage: corral [-c FILE] [-t] [--probe] [-V] [-h]\n"
                "  -c FILE    configuration file (default: the built-in configuration:\n"
                "             127.0.0.1:8080 answers \"corral is running\", metrics on\n"
                "             127.0.0.1:9090)\n"
                "  -t         check the configuration and exit (0 if valid)\n"
                "  --probe    print the kernel's capabilities and each wakeup mode's resolution\n"
                "  -V         print the version\n"
                "signals: HUP reload, TERM/INT graceful stop, QUIT fast stop, USR1 reopen log\n");
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"probe", no_argument, NULL, 'P'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *path = NULL;
    bool test_only = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:tVh", longs, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 't': test_only = true; break;
        case 'V': printf("corral %s\n", CORRAL_VERSION); return 0;
        case 'P': print_probe(); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    /* OpenSSL writes to sockets with write(2): a reset connection must be
     * an error, not SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    daemon_state.config_path = path;
    daemon_log_open(NULL);
    daemon_log_plain(test_only);

    struct conf_config *config;
    if (load_config(path, &config) != 0)
        return 1;
    if (test_only) {
        int err = check_config(config);
        if (err == 0)
            printf("corral: configuration %s is valid\n", config->path);
        else if (err == -ENOMEM)
            log_error("out of memory");
        conf_free(config);
        return err == 0 ? 0 : 1;
    }
    if (config->error_log != NULL && daemon_log_open(config->error_log) != 0) {
        log_error("error_log %s: %s", config->error_log, strerror(errno));
        conf_free(config);
        return 1;
    }
    corral_set_log_level(config->log_level);
    daemon_state.started_at = (uint64_t)time(NULL);

    int status = 1;
    static const int signals[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, 0};
    corral_signals *signal_watch = NULL;
    if (corral_loop_new(&main_loop) != 0 ||
        corral_signals_new(main_loop, signals, on_signal, NULL, &signal_watch) != 0) {
        conf_free(config);
        goto out;
    }
    collect_activated_sockets();
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    raise_fd_limit(config, config->workers ? config->workers : caps.cpu_count);
    char *pid_file = config->pid_file != NULL ? strdup(config->pid_file) : NULL;

    struct generation *gen;
    int err = generation_start(config, NULL, &gen);
    if (err != 0) {
        log_error("cannot start: %s", strerror(-err));
        free(pid_file);
        goto out;
    }
    /* The workers already run, and the admin endpoints read the list. */
    pthread_mutex_lock(&daemon_state.lock);
    daemon_state.generations = gen;
    pthread_mutex_unlock(&daemon_state.lock);
    log_wakeup(gen);
    for (size_t i = 0; i < gen->site_count; i++) {
        char bound[128];
        corral_listener_address(gen->sites[i].listener, bound, sizeof(bound));
        log_info("listening on %s%s", bound, gen->sites[i].http.admin ? " (admin)" : "");
    }
    bool started = (pid_file == NULL || write_pid_file(pid_file) == 0) &&
                   drop_privileges(gen->config) == 0;
    if (!started)
        stop_all(0);
    corral_loop_run(main_loop);
    status = started ? 0 : 1;
    if (pid_file != NULL)
        unlink(pid_file);
    free(pid_file);
    log_info("stopped");

out:
    corral_signals_free(signal_watch);
    corral_loop_free(main_loop);
    for (size_t i = 0; i < activated_count; i++)
        close(activated[i].fd);
    free(activated);
    return status;
}
