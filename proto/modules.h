/*
 * modules.h: the HTTP modules this build serves with (modules.c, the one
 * file that names them all).
 */
#ifndef CORRAL_PROTO_MODULES_H
#define CORRAL_PROTO_MODULES_H

#include <stddef.h>

struct http_module;

/* Every module, in order: the order of their phase handlers within a
 * phase and of their response filters. */
extern struct http_module *const modules_list[];
extern const size_t modules_count;

/* Builds what the router and the filter chain walk from modules_list
 * (http_module_init()), once, whoever calls first: before the first
 * exchange, on any thread. */
void modules_init(void);

#endif
