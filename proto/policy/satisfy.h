/*
 * satisfy.h: nginx's `satisfy all | any`: whether a request must pass
 * both allow/deny and authentication (all, the default) or either (any).
 * The access phase's handlers consult it: allow/deny (access.c) grants
 * at once or notes its denial here; an authentication module grants, or
 * answers 401; this module's own handler, last in the phase, answers the
 * noted denial when nothing granted.
 */
#ifndef CORRAL_PROTO_SATISFY_H
#define CORRAL_PROTO_SATISFY_H

#include "conf/directive.h"

#include <stdbool.h>

/* Its struct per level: `any` inherited where `pos` is unset. */
struct satisfy_conf {
    int any;             /* 0: all, 1: any (the generic setter writes an int) */
    struct conf_pos pos; /* where this level's satisfy is written */
};

struct exchange;
struct router_walk;

/* Whether the exchange's location says `satisfy any`. */
bool satisfy_any(const struct exchange *ex);

/* Under `satisfy any`: allow/deny denied the client, which an
 * authentication module may still let in. */
void satisfy_note_denied(struct exchange *ex);

/* The router's phase handler (access, after the authentication modules):
 * 403 when allow/deny denied and nothing granted. */
int satisfy_phase(struct router_walk *w);

/* The module (module.h): in a site's steps only where some location
 * says `satisfy any`. */
struct http_module;
extern struct http_module satisfy_module;

#endif
