/*
 * runtime_cache.c: the cache zones' metrics and the admin API's purge
 * (runtime_cache.h).  The zones are the process's (proto/cache/
 * cache_zone.c), kept across reloads: both read them by name.
 */
#include "cmd/runtime_cache.h"

#include "proto/cache/cache_zone.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- metrics */

static const struct {
    const char *name;
    size_t offset;
} statuses[] = {
    {"hit", offsetof(struct cache_zone_counters, hits)},
    {"miss", offsetof(struct cache_zone_counters, misses)},
    {"expired", offsetof(struct cache_zone_counters, expired)},
    {"stale", offsetof(struct cache_zone_counters, stale)},
    {"updating", offsetof(struct cache_zone_counters, updating)},
    {"revalidated", offsetof(struct cache_zone_counters, revalidated)},
    {"bypass", offsetof(struct cache_zone_counters, bypass)},
};

static uint64_t load(const struct cache_zone_counters *c, size_t offset)
{
    const atomic_uint_fast64_t *v = (const atomic_uint_fast64_t *)((const char *)c + offset);
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* Zone names are letters, digits, '_' and '-' (the config checks): no
 * escaping in the label. */
static void write_requests(struct cache_zone *zone, void *arg)
{
    struct text *t = arg;
    const struct cache_zone_counters *c = cache_zone_counters(zone);
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
        text_printf(t, "corral_cache_requests_total{zone=\"%s\",status=\"%s\"} %llu\n",
                    cache_zone_name(zone), statuses[i].name,
                    (unsigned long long)load(c, statuses[i].offset));
}

#define ZONE_METRIC(NAME, FIELD)                                                                   \
    static void write_##NAME(struct cache_zone *zone, void *arg)                                   \
    {                                                                                              \
        text_printf(arg, "corral_cache_" #NAME "{zone=\"%s\"} %llu\n", cache_zone_name(zone),      \
                    (unsigned long long)load(cache_zone_counters(zone),                            \
                                             offsetof(struct cache_zone_counters, FIELD)));        \
    }
ZONE_METRIC(stored_total, stored)
ZONE_METRIC(store_errors_total, store_errors)
ZONE_METRIC(evictions_total, evictions)
ZONE_METRIC(corrupt_total, corrupt)
ZONE_METRIC(loader_files_total, loader_files)

static void write_size(struct cache_zone *zone, void *arg)
{
    text_printf(arg, "corral_cache_size_bytes{zone=\"%s\"} %llu\n", cache_zone_name(zone),
                (unsigned long long)cache_zone_size(zone));
}

static void write_entries(struct cache_zone *zone, void *arg)
{
    text_printf(arg, "corral_cache_entries{zone=\"%s\"} %zu\n", cache_zone_name(zone),
                cache_zone_count(zone));
}

static void write_loaded(struct cache_zone *zone, void *arg)
{
    text_printf(arg, "corral_cache_loader_done{zone=\"%s\"} %d\n", cache_zone_name(zone),
                atomic_load(&cache_zone_counters(zone)->loader_done) ? 1 : 0);
}

void runtime_cache_metrics(struct text *t)
{
    static const struct {
        const char *help;
        void (*fn)(struct cache_zone *, void *);
    } metrics[] = {
        {"# HELP corral_cache_requests_total Requests to each cache zone, by "
         "$upstream_cache_status.\n# TYPE corral_cache_requests_total counter\n",
         write_requests},
        {"# HELP corral_cache_stored_total Responses stored in each zone.\n"
         "# TYPE corral_cache_stored_total counter\n",
         write_stored_total},
        {"# HELP corral_cache_store_errors_total Responses that could not be stored (a full "
         "disk, EIO): served uncached.\n# TYPE corral_cache_store_errors_total counter\n",
         write_store_errors_total},
        {"# HELP corral_cache_evictions_total Entries dropped for max_size, keys_zone or "
         "inactive.\n# TYPE corral_cache_evictions_total counter\n",
         write_evictions_total},
        {"# HELP corral_cache_corrupt_total Entry files that did not check out (CRC, length, "
         "key): removed, never served.\n# TYPE corral_cache_corrupt_total counter\n",
         write_corrupt_total},
        {"# HELP corral_cache_size_bytes Bytes of the entries on disk.\n"
         "# TYPE corral_cache_size_bytes gauge\n",
         write_size},
        {"# HELP corral_cache_entries Keys the zone's index holds.\n"
         "# TYPE corral_cache_entries gauge\n",
         write_entries},
        {"# HELP corral_cache_loader_files_total Entries the loader indexed from the "
         "directory at start.\n# TYPE corral_cache_loader_files_total counter\n",
         write_loader_files_total},
        {"# HELP corral_cache_loader_done Whether the loader has indexed the whole directory.\n"
         "# TYPE corral_cache_loader_done gauge\n",
         write_loaded},
    };
    for (size_t i = 0; i < sizeof(metrics) / sizeof(metrics[0]); i++) {
        text_printf(t, "%s", metrics[i].help);
        cache_zone_each(metrics[i].fn, t);
    }
}

/* ------------------------------------------------------------------ purge */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Query argument `name` of `query`, percent-decoded into `out` (`cap`
 * bytes, NUL-terminated).  Returns its length, or -1: absent, malformed
 * or too long. */
static ssize_t query_arg(struct http_str query, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    const char *p = query.data, *end = query.data + query.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        if ((size_t)(stop - p) > nlen && memcmp(p, name, nlen) == 0 && p[nlen] == '=') {
            size_t n = 0;
            for (const char *v = p + nlen + 1; v < stop; v++) {
                char c = *v;
                if (c == '%') {
                    int hi = v + 2 < stop ? hex_digit(v[1]) : -1;
                    int lo = hi >= 0 ? hex_digit(v[2]) : -1;
                    if (lo < 0)
                        return -1;
                    c = (char)(hi * 16 + lo);
                    v += 2;
                } else if (c == '+') {
                    c = ' ';
                }
                if (n + 1 >= cap)
                    return -1;
                out[n++] = c;
            }
            out[n] = '\0';
            return (ssize_t)n;
        }
        p = stop + 1;
    }
    return -1;
}

static void purge_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)data;
    if (!http_str_equal_nocase(req->method, "POST") &&
        !http_str_equal_nocase(req->method, "PURGE") &&
        !http_str_equal_nocase(req->method, "DELETE")) {
        exchange_respond(ex, 405, "Allow: POST, PURGE, DELETE\r\nContent-Type: text/plain\r\n",
                         "405 Method Not Allowed\n", 23);
        return;
    }
    struct http_str query = {req->target.data + req->path.len, req->target.len - req->path.len};
    if (query.len > 0) { /* past the '?' */
        query.data++;
        query.len--;
    }
    char zone_name[128], key[4096];
    ssize_t zlen = query_arg(query, "zone", zone_name, sizeof(zone_name));
    ssize_t klen = query_arg(query, "key", key, sizeof(key));
    if (zlen <= 0 || klen <= 0) {
        static const char msg[] = "400 Bad Request: zone=NAME&key=KEY (KEY* for a prefix)\n";
        exchange_respond(ex, 400, "Content-Type: text/plain\r\n", msg, sizeof(msg) - 1);
        return;
    }
    struct cache_zone *zone = cache_zone_find(zone_name);
    if (zone == NULL) {
        exchange_respond(ex, 404, "Content-Type: text/plain\r\n", "no such cache zone\n", 19);
        return;
    }
    bool prefix = key[klen - 1] == '*';
    size_t purged = cache_zone_purge(zone, key, (size_t)klen - prefix, prefix);
    char body[64];
    int n = snprintf(body, sizeof(body), "{\"purged\": %zu}\n", purged);
    exchange_respond(ex, 200, "Content-Type: application/json\r\n", body, (size_t)n);
}

const struct http_handler admin_cache_purge_handler = {
    .name = "cache purge",
    .on_request = purge_on_request,
};

static void refuse_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req, (void)data;
    static const char msg[] = "403 Forbidden: the admin listener authenticates nobody; set "
                              "\"auth_token_file\" or \"tls_verify_client on\" in the admin "
                              "block\n";
    exchange_respond(ex, 403, "Content-Type: text/plain\r\n", msg, sizeof(msg) - 1);
}

const struct http_handler admin_refuse_handler = {
    .name = "refused",
    .on_request = refuse_on_request,
};
