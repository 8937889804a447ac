/*
 * router_phases.c: the phase handlers of every module, in the order the
 * router runs them (router.h), and what each module holds per exchange.
 * The one file that names the modules the router walks through.
 */
#include "proto/http/router.h"

#include "proto/policy/access.h"
#include "proto/policy/add_header.h"
#include "proto/policy/error_page.h"
#include "proto/policy/limit.h"
#include "proto/policy/rewrite.h"

const struct router_step router_steps[] = {
    {ROUTER_POST_READ, access_peer_phase},
    /* Error pages for what the server's rewrites answer. */
    {ROUTER_SERVER_REWRITE, error_page_phase},
    {ROUTER_SERVER_REWRITE, rewrite_server_phase},
    {ROUTER_FIND_LOCATION, router_find_location},
    /* And for the location's answers. */
    {ROUTER_FIND_LOCATION, error_page_phase},
    {ROUTER_FIND_LOCATION, router_refuse},
    {ROUTER_REWRITE, rewrite_location_phase},
    {ROUTER_ACCESS, access_phase},
    {ROUTER_LIMITS, limit_phase},
    {ROUTER_CONTENT, router_content},
};
const size_t router_step_count = sizeof(router_steps) / sizeof(router_steps[0]);

const struct router_release router_releases[] = {
    {limit_release, true},
    {add_header_release, true},
    {error_page_release, false},
};
const size_t router_release_count = sizeof(router_releases) / sizeof(router_releases[0]);
