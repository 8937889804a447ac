/*
 * access_log_filter.c: the access log's byte count as an observer filter
 * (access_log_filter.h).  The count lives in the module's context slot
 * itself, so a logged exchange costs no allocation.
 */
#include "proto/policy/access_log_filter.h"

#include "proto/http/module.h"
#include "proto/policy/access_log.h"

#include <stdint.h>

_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "the count is kept in a context slot");

static void count_sent(struct exchange *ex, const struct exchange_filter *self, uint64_t bytes)
{
    (void)self;
    unsigned slot = access_log_filter_module.slot;
    uint64_t sent = (uint64_t)(uintptr_t)exchange_ctx(ex, slot);
    exchange_set_ctx(ex, slot, (void *)(uintptr_t)(sent + bytes));
}

static struct exchange_filter access_log_filter = {
    .name = "access_log",
    .sent = count_sent,
};

struct access_log *access_log_filter_route(struct exchange *ex, const struct http_site *site,
                                           const struct http_vhost *vhost,
                                           const struct http_location *loc)
{
    struct access_log *log = access_log_route(site, vhost, loc);
    if (log != NULL)
        exchange_add_filter(ex, &access_log_filter);
    else
        exchange_remove_filter(ex, &access_log_filter);
    return log;
}

uint64_t access_log_filter_bytes(const struct exchange *ex)
{
    return (uint64_t)(uintptr_t)exchange_ctx(ex, access_log_filter_module.slot);
}

/* No configuration (access_log and log_format are the site's, read by
 * access_log_route()): a slot for the count and the observer. */
struct http_module access_log_filter_module = {
    .name = "access_log",
    .slots = 1,
    .filter = &access_log_filter,
};
