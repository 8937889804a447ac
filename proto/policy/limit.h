/*
 * limit.h: nginx's limit_req and limit_conn.  Zones of per-key state that
 * every worker shares (limit_zone.c), and the router's phase that checks a
 * location's limits before its handler gets the request (limit.c).
 */
#ifndef CORRAL_PROTO_LIMIT_H
#define CORRAL_PROTO_LIMIT_H

#include "conf/directive.h"
#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ zones */

/* A table of keys with bounded memory, one per zone name in the process:
 * split into shards, each with its own mutex, hash chains and
 * least-recently-used list, so that workers contend only when their keys
 * hash to the same shard. */
struct limit_zone;
struct limit_node;

enum limit_zone_kind {
    LIMIT_ZONE_REQ,  /* limit_req_zone: a leaky bucket per key */
    LIMIT_ZONE_CONN, /* limit_conn_zone: exchanges under way per key */
};

/* What an entry costs against the zone's size, its key aside: the node
 * and the allocator's own bytes. */
size_t limit_zone_entry_bytes(void);

/* Whether `len` bytes at `name` are a zone name: letters, digits, '_'
 * and '-' (so that a metrics label needs no escaping).  For conf/'s
 * limit_*_zone and the module's limit_req. */
bool limit_zone_name_valid(const char *name, size_t len);

/* The smallest size a zone may have. */
#define LIMIT_ZONE_MIN_SIZE (32u * 1024)
/* A key longer than this is not limited (as nginx does beyond its own). */
#define LIMIT_KEY_MAX 1024

/* The process's zone `name` of `kind` and `size` bytes, with a reference
 * for the caller: the one already there when its kind and size are the
 * same (a reload keeps its state), else a new one.  Returns 0 or -ENOMEM.
 * Main thread. */
int limit_zone_get(const char *name, enum limit_zone_kind kind, size_t size,
                   struct limit_zone **out);
/* Drops a reference; the last frees the zone (no exchange may hold one of
 * its entries then).  NULL: nothing. */
void limit_zone_put(struct limit_zone *zone);

/* How a zone's requests fared since it was made. */
struct limit_zone_counts {
    uint64_t passed, delayed, rejected;
};

/* Calls `fn` for every zone of the process, under the registry's lock. */
void limit_zone_each(void (*fn)(const char *name, enum limit_zone_kind kind,
                                const struct limit_zone_counts *counts, void *arg),
                     void *arg);

/* limit_req's leaky bucket for `key` at `now_ms`, `rate` milli-requests
 * per second, excess above `burst` (milli-requests) refused, above
 * `delay` delayed.  Returns -1 to refuse, else the milliseconds to delay
 * (0: pass now); the request is counted in the bucket unless refused.
 * Any thread. */
int64_t limit_zone_req(struct limit_zone *zone, const char *key, size_t key_len, uint64_t now_ms,
                       uint64_t rate, uint64_t burst, uint64_t delay);

/* Whether limit_zone_req() would refuse one more request for `key` at
 * `now_ms`, without counting one: auth_basic_fail_limit counts failures
 * only, and refuses a client whose failures are over the rate before it
 * checks a password.  Any thread. */
bool limit_zone_req_over(struct limit_zone *zone, const char *key, size_t key_len, uint64_t now_ms,
                         uint64_t rate, uint64_t burst);

/* limit_conn: counts one more exchange for `key` unless `max` are under
 * way.  Returns the entry to give back to limit_zone_conn_end(), or NULL
 * when refused (at `max`, or no room: every entry of its shard busy). */
struct limit_node *limit_zone_conn(struct limit_zone *zone, const char *key, size_t key_len,
                                   unsigned max);
void limit_zone_conn_end(struct limit_zone *zone, struct limit_node *node);

/* --------------------------------------------------------------- handler */

struct vars_template;

/* The value of a zone's key `t` for `req` in `buf` (LIMIT_KEY_MAX bytes):
 * its length, or SIZE_MAX when it is empty or longer (then it is not
 * limited, as in nginx). */
size_t limit_key(struct exchange *ex, const struct http_request *req, const struct vars_template *t,
                 char *buf);

/* limit_req zone=NAME [burst=N] [nodelay | delay=N], its zone's key and
 * rate. */
struct limit_req {
    struct limit_zone *zone;
    const struct vars_template *key;
    uint64_t rate;  /* milli-requests per second */
    uint64_t burst; /* milli-requests */
    uint64_t delay; /* milli-requests; UINT64_MAX: nodelay */
};

/* limit_conn NAME N, its zone's key. */
struct limit_conn {
    struct limit_zone *zone;
    const struct vars_template *key;
    unsigned max;
};

/* A location's limits, as the module builds them. */
struct limit_location {
    const struct limit_req *reqs;
    size_t req_count;
    const struct limit_conn *conns;
    size_t conn_count;
    unsigned req_status, conn_status;
};

/* limit_req zone=NAME [burst=N] [nodelay | delay=N] or limit_conn NAME
 * N as written, its zone by name: the zones are the config's top level's
 * (limit_req_zone, limit_conn_zone, conf/), shared by the workers and
 * kept across reloads by the process (cmd/); conf/ checks that each
 * name is a zone of its kind, and the build finds it
 * (http_module_build.limit_zone). */
struct limit_line {
    char *zone_name;       /* malloc'd */
    unsigned burst, delay; /* limit_req */
    bool nodelay;
    unsigned max; /* limit_conn */
    struct conf_pos pos;
};

/* One level's limits (top level, server, location).  A level with
 * limit_req (or limit_conn) of its own takes none of its parent's
 * (nginx's rule); else it takes them whole, which it then does not own
 * (`inherited_*`).  The statuses: 0 until merged, then the parent's, at
 * the top level 503. */
struct limit_conf {
    struct limit_line *reqs;
    size_t req_count;
    struct limit_line *conns;
    size_t conn_count;
    unsigned req_status, conn_status;
    bool inherited_reqs, inherited_conns;
};

/* The router's limits phase (router.h): checks the location's limit_req
 * (refusing, holding the exchange on a loop timer and then going on with
 * the walk, or passing), then its limit_conn. */
struct router_walk;
int limit_phase(struct router_walk *w);

/* Lets go of what the exchange holds (limit_conn counts, a delay): the
 * router calls it when the exchange ends or is redirected. */
void limit_release(struct exchange *ex);

/* The module (module.h): its directives (limit_req, limit_conn and
 * their _status), its struct per level, the limits it builds for each
 * location, the limits phase and what a delay holds. */
struct http_module;
extern struct http_module limit_module;

#endif
