/*
 * auth_request.h: nginx's auth_request and auth_request_set: access is
 * decided by a subrequest (subrequest.h) to a location, usually a
 * proxy_pass to an authentication service.  A 2xx lets the request
 * through; 401 goes back to the client with the service's
 * WWW-Authenticate, 403 as 403, anything else (or no answer) is a 500.
 * The request is held meanwhile (hold.h): its body, which the service
 * never sees, waits and then goes to the location's handler whole.
 * auth_request_set gives variables values read once the subrequest is
 * over, in its context: $upstream_status, $upstream_http_NAME.
 */
#ifndef CORRAL_PROTO_AUTH_REQUEST_H
#define CORRAL_PROTO_AUTH_REQUEST_H

#include "conf/directive.h"

#include <stdbool.h>
#include <stddef.h>

/* One auth_request_set line. */
struct auth_request_set_line {
    char *name;  /* "$var" */
    char *value; /* may hold variables */
    struct conf_pos name_pos, value_pos;
};

/* One level's settings (top level, server, location).  A level that
 * writes neither directive takes its parent's, which it does not own
 * (`inherited_*`); auth_request_set lines are inherited only by a level
 * that has none, as nginx's arrays are. */
struct auth_request_conf {
    char *uri;               /* NULL: off (or unset) */
    struct conf_pos uri_pos; /* file NULL: the level does not write auth_request */
    struct auth_request_set_line *sets;
    size_t set_count;
    bool inherited_uri, inherited_sets;
};

/* The module (module.h). */
struct http_module;
extern struct http_module auth_request_module;

#endif
