/*
 * redirect.h: where corral's own redirects point (the directory's 301 of
 * static files, `return 301 /path`, `rewrite ... redirect`): nginx's
 * absolute_redirect, server_name_in_redirect and port_in_redirect, which
 * make a Location that starts with "/" absolute, as nginx's header filter
 * does.
 */
#ifndef CORRAL_PROTO_REDIRECT_H
#define CORRAL_PROTO_REDIRECT_H

#include "conf/directive.h"
#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>

/* Its struct per level (top level, server, location), each switch
 * inherited from the enclosing level where its position is unset. */
struct redirect_conf {
    bool absolute, server_name, port; /* defaults: on, off, on (nginx's) */
    struct conf_pos absolute_pos, server_name_pos, port_pos;
};

/* The module (module.h). */
struct http_module;
extern struct http_module redirect_module;

struct vars_buf;

/* Adds to `line` "Location: ", `uri` (`len` bytes, header-safe) and CRLF
 * with a NUL after it (as exchange_respond() takes header lines).  When
 * `uri` starts with "/" and absolute_redirect is on for the exchange's
 * location: first the scheme the client used, then the server's first
 * server_name under server_name_in_redirect, else the request's `host`,
 * else the address the connection came to; then ":PORT" (the port it
 * came to) unless it is the scheme's default or port_in_redirect is
 * off.  Worker thread of the exchange. */
void redirect_location(struct exchange *ex, struct http_str host, const char *uri, size_t len,
                       struct vars_buf *line);

#endif
