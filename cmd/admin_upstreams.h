/*
 * admin_upstreams.h: the runtime upstream API on the admin listener, in
 * the style of NGINX Plus's /api/N/http/upstreams/NAME/servers:
 *
 *   GET   /api/upstreams/NAME/servers       every server of NAME, in JSON
 *   GET   /api/upstreams/NAME/servers/ID    one of them
 *   PATCH /api/upstreams/NAME/servers/ID    {"weight": N, "drain": B, "down": B}
 *   POST  /api/upstreams/NAME/servers       {"server": "IP:PORT", "weight": N, ...}
 *   DELETE /api/upstreams/NAME/servers/ID   a server POST added
 *
 * A change applies to the running configuration's upstream at once, in
 * every worker (the servers' state is shared), and is logged.  A POST
 * takes one of the upstream's `api_servers` slots; a reload that leaves
 * the upstream's config as it was carries the servers added.
 */
#ifndef CORRAL_CMD_ADMIN_UPSTREAMS_H
#define CORRAL_CMD_ADMIN_UPSTREAMS_H

#include "proto/http/exchange.h"

/* The prefix it answers under. */
#define ADMIN_UPSTREAMS_PATH "/api/upstreams/"

/* The most bytes a PATCH body may take: more is a 413. */
#define ADMIN_UPSTREAMS_BODY_MAX 4096

extern const struct http_handler admin_upstreams_handler;

#endif
