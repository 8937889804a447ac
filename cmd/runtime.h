/*
 * runtime.h: building the sites of a generation from a parsed configuration
 * (runtime.c), shared by the daemon and the config-to-runtime fuzzer.
 */
#ifndef CORRAL_CMD_RUNTIME_H
#define CORRAL_CMD_RUNTIME_H

#include "cmd/daemon.h"

/* Registers every module's configuration with conf/ (its directives, its
 * struct per level) and builds the router's lists: once, whoever calls
 * first, before the first config is parsed. */
void runtime_modules_init(void);

/* Builds into `gen` a site for every distinct listen address, then the
 * admin ones, with the upstreams their proxy locations use, for `workers`
 * workers: everything the configuration names is loaded (certificates,
 * keys, CA files, upstream addresses).  Nothing listens yet.  `config` must
 * outlive `gen`.  Returns 0 or -errno (the problem logged); on failure what
 * was built stays in `gen` for generation_free(). */
int sites_build(struct generation *gen, const struct conf_config *config, unsigned workers);

/* runtime_stream.c: fills `site` for a stream server's `listen`, whose
 * sessions go to `upstream` (the generation's, freed with it), or where
 * `route` (malloc'd, with its entries and regexes, which the site takes
 * over) says, with its limit_conn zone from `limits` (the server's, else
 * the `stream` block's), for `workers` workers.  `server` must outlive
 * the site.
 * Returns 0 or -ENOMEM, with what was allocated left for
 * stream_site_free(). */
struct runtime_limits;
struct runtime_vars;
int stream_site_build(struct site *site, const struct conf_stream_server *server,
                      const struct conf_stream_listen *listen, struct proxy_upstream *upstream,
                      struct stream_route *route, const struct runtime_limits *limits,
                      const struct conf_stream *stream, struct runtime_vars *vars,
                      unsigned workers);
/* Adds `server` (its `listen`) to the stream site `site` of the same
 * address, built by stream_site_build() for another server: a vhost
 * picked by SNI (stream.h), the listener's own if `listen` is its
 * default_server.  The rest as stream_site_build(); `vars` owns the
 * compiled "~" server names. */
int stream_vhost_add(struct site *site, const struct conf_stream_server *server,
                     const struct conf_stream_listen *listen, struct proxy_upstream *upstream,
                     struct stream_route *route, const struct runtime_limits *limits,
                     const struct conf_stream *stream, struct runtime_vars *vars);
/* Frees a route as stream_site_build() takes it (NULL: nothing). */
void stream_route_free(struct stream_route *route);
/* Frees what stream_site_build() allocated (nothing for an HTTP site). */
void stream_site_free(struct site *site);

/* Frees `gen` (NULL: nothing) with its server, sites, upstreams, access log
 * and config.  The server must be stopped or never started. */
void generation_free(struct generation *gen);

/* The site of `gen` (NULL: none) for `address`, or NULL. */
struct site *find_site(struct generation *gen, const char *address);
/* The same among its stream udp listens. */
struct site *find_udp_site(struct generation *gen, const char *address);

/* `-t`: builds what the configuration names, without listening, and frees
 * it.  Returns 0, -EINVAL (the problem logged) or -ENOMEM. */
int check_config(const struct conf_config *config);

/* Refuses, with the position, what the configuration language accepts but
 * the daemon cannot serve.  Returns 0 or -EINVAL (logged). */
int check_servable(const struct conf_config *config);

#endif
