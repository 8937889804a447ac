/*
 * server_timing.h: `server_timing on|off`, a Server-Timing response
 * header (W3C Server Timing) saying how long corral took to the response
 * head and, for a proxied response, how long its upstream took to send
 * its head.  The whole module is server_timing.c and its line in
 * proto/modules.c: the worked example of docs/architecture.md.
 */
#ifndef CORRAL_PROTO_SERVER_TIMING_H
#define CORRAL_PROTO_SERVER_TIMING_H

#include "conf/directive.h"

#include <stdbool.h>

/* Its struct per level (top level, server, location), as conf/ makes and
 * merges it: `on` inherited from the enclosing level where `pos` is
 * unset (file NULL); off by default. */
struct server_timing_conf {
    bool on;
    struct conf_pos pos; /* where this level's server_timing is written */
};

/* The module (module.h). */
struct http_module;
extern struct http_module server_timing_module;

#endif
