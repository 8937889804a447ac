/*
 * modules.c: the list of HTTP modules, the one place that names them all.
 * Adding a module is its file and a line here; where its line goes is
 * where its phase handlers run within their phases and where its filter
 * sits in the response filter chain.
 */
#include "proto/modules.h"

#include "proto/cache/cache.h"
#include "proto/compress/compress.h"
#include "proto/http/module.h"
#include "proto/policy/access.h"
#include "proto/policy/access_log_filter.h"
#include "proto/policy/add_header.h"
#include "proto/policy/auth_basic.h"
#include "proto/policy/auth_request.h"
#include "proto/policy/auth_jwt.h"
#include "proto/policy/error_page.h"
#include "proto/policy/limit.h"
#include "proto/policy/redirect.h"
#include "proto/policy/return.h"
#include "proto/policy/rewrite.h"
#include "proto/policy/satisfy.h"
#include "proto/policy/server_timing.h"
#include "proto/policy/stub_status.h"
#include "proto/policy/trace.h"
#include "proto/static/static_module.h"
#include "proto/upstream/proxy_module.h"

#include <pthread.h>

struct http_module *const modules_list[] = {
    /* content, before the handler: answers from the cache; filter, first
     * of all: stores the handler's (the backend's) response as it is,
     * before error_page, add_header and compression, so that one identity
     * copy serves every coding and a hit passes the same filters as a
     * miss */
    &cache_module,
    /* post-read: the connection's peer as the client's address */
    &access_peer_module,
    /* access: real_ip, then allow/deny */
    &access_module,
    /* access: Basic authentication, $remote_user */
    &auth_basic_module,
    /* access: JWT authentication, $jwt_claim_NAME */
    &auth_jwt_module,
    /* access: a subrequest decides; auth_request_set, $upstream_http_NAME */
    &auth_request_module,
    /* access, last: under satisfy any, the denial nothing overruled */
    &satisfy_module,
    /* server rewrite, find location: pages for what follows; its status
     * filter comes first, so that the filters after it see the final
     * status */
    &error_page_module,
    /* server rewrite, rewrite */
    &rewrite_module,
    /* limits */
    &limit_module,
    /* none: where the redirects of rewrite, return and static files point */
    &redirect_module,
    /* filter: the location's add_header lines; the router's own answers */
    &add_header_module,
    /* filter: Server-Timing, after add_header, timing the head as sent */
    &server_timing_module,
    /* filter: gzip, brotli, zstd.  After error_page's status, add_header's
     * lines (a Cache-Control: no-transform, a Content-Type) and the
     * handler's, as nginx's gzip filter runs after its headers filter:
     * it decides by the head as it goes out, and its Content-Encoding,
     * Vary and weak ETag are the last word.  A cache of responses would
     * sit after it, keeping what it coded, by its Vary. */
    &compress_module,
    /* post-read, find location: the trace context, put in the request
     * the handler gets; filter: the final status, after every filter
     * that may change it; the spans once the exchange is over */
    &trace_module,
    /* content: return CODE ["TEXT"] */
    &return_module,
    /* content: stub_status */
    &stub_status_module,
    /* content: proxy_pass, its add_header lines (add_header's build) */
    &proxy_module,
    /* content: static files, for a location that no module before it
     * answers (its build reads whether one did) */
    &static_module,
    /* observer: the access log's byte count, of whatever reached the
     * framer, spliced and sent from files included */
    &access_log_filter_module,
};
const size_t modules_count = sizeof(modules_list) / sizeof(modules_list[0]);

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
    http_module_init(modules_list, modules_count);
}

void modules_init(void)
{
    pthread_once(&once, init);
}
