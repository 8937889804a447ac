/*
 * balance.c: picking a server of an upstream: round robin, least_conn,
 * ip_hash, hash KEY [consistent] and random [two], over the usable servers
 * (backups only when no other is), with slow_start's ramped weights.
 */
#include "proto/upstream/balance.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Weights are scaled so that a slow start can ramp even a weight of 1. */
#define WEIGHT_SCALE 100

enum balance_key_kind {
    KEY_REMOTE_ADDR,
    KEY_REQUEST_URI,
    KEY_HOST,
    KEY_HEADER,
};

struct balance_key {
    enum balance_key_kind kind;
    char *header; /* KEY_HEADER: the field name, "_" read as "-" */
};

struct ring_point {
    uint32_t hash;
    unsigned server;
};

struct balance_ring {
    struct ring_point *points;
    size_t count;
};

/* ------------------------------------------------------------------ hashing */

static uint32_t fnv1a(uint32_t h, const char *data, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)data[i]) * 16777619u;
    return h;
}

/* MurmurHash3's finaliser: FNV-1a alone leaves close inputs ("a-1",
 * "a-2") on close points, which clusters a ring. */
static uint32_t mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static uint32_t hash_bytes(const char *data, size_t len)
{
    return mix(fnv1a(2166136261u, data, len));
}

static int parse_key(const char *text, enum balance_key_kind *kind, const char **header)
{
    *header = NULL;
    if (strcmp(text, "$remote_addr") == 0)
        *kind = KEY_REMOTE_ADDR;
    else if (strcmp(text, "$request_uri") == 0)
        *kind = KEY_REQUEST_URI;
    else if (strcmp(text, "$host") == 0)
        *kind = KEY_HOST;
    else if (strncmp(text, "$http_", 6) == 0 && text[6] != '\0') {
        *kind = KEY_HEADER;
        *header = text + 6;
        for (const char *p = *header; *p != '\0'; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
                return -EINVAL;
    } else
        return -EINVAL;
    return 0;
}

int balance_key_new(const char *text, struct balance_key **out)
{
    enum balance_key_kind kind;
    const char *header;
    if (parse_key(text, &kind, &header) != 0)
        return -EINVAL;
    struct balance_key *key = calloc(1, sizeof(*key));
    if (key == NULL)
        return -ENOMEM;
    key->kind = kind;
    if (header != NULL) {
        key->header = strdup(header);
        if (key->header == NULL) {
            free(key);
            return -ENOMEM;
        }
        for (char *p = key->header; *p != '\0'; p++)
            if (*p == '_')
                *p = '-';
    }
    *out = key;
    return 0;
}

void balance_key_free(struct balance_key *key)
{
    if (key == NULL)
        return;
    free(key->header);
    free(key);
}

uint32_t balance_key_hash(const struct balance_key *key, const struct http_request *req,
                          const char *client)
{
    enum balance_key_kind kind = key != NULL ? key->kind : KEY_REMOTE_ADDR;
    switch (kind) {
    case KEY_REMOTE_ADDR: break;
    case KEY_REQUEST_URI: return hash_bytes(req->target.data, req->target.len);
    case KEY_HOST: return hash_bytes(req->host.data, req->host.len);
    case KEY_HEADER:
        for (size_t i = 0; i < req->header_count; i++)
            if (http_str_equal_nocase(req->headers[i].name, key->header)) {
                struct http_str value = http_trim(req->headers[i].value);
                return hash_bytes(value.data, value.len);
            }
        return hash_bytes("", 0);
    }
    return hash_bytes(client, strlen(client));
}

/* -------------------------------------------------------------------- ring */

static int point_order(const void *a, const void *b)
{
    const struct ring_point *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->server < y->server ? -1 : x->server > y->server; /* a stable order for ties */
}

/* Points hash the server's address with the point's number, so a server
 * keeps its points whatever the other servers are. */
int balance_ring_new(const struct upstream_server *servers, size_t count, struct balance_ring **out)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        if (!atomic_load_explicit(&servers[i].backup, memory_order_relaxed))
            total += (size_t)servers[i].weight * BALANCE_RING_POINTS;
    struct balance_ring *ring = calloc(1, sizeof(*ring));
    if (ring == NULL)
        return -ENOMEM;
    ring->points = calloc(total > 0 ? total : 1, sizeof(*ring->points));
    if (ring->points == NULL) {
        free(ring);
        return -ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        if (atomic_load_explicit(&servers[i].backup, memory_order_relaxed))
            continue;
        uint32_t base = fnv1a(2166136261u, servers[i].address, strlen(servers[i].address));
        for (unsigned p = 0; p < servers[i].weight * BALANCE_RING_POINTS; p++) {
            char n[24];
            /* The slots of a `resolve` server share its name: the slot's
             * number tells their points apart. */
            int len = snprintf(n, sizeof(n), "%u#%u", servers[i].resolve_slot, p);
            assert(len > 0 && (size_t)len < sizeof(n) && ring->count < total);
            ring->points[ring->count++] = (struct ring_point){
                .hash = mix(fnv1a(base, n, (size_t)len)),
                .server = (unsigned)i,
            };
        }
    }
    qsort(ring->points, ring->count, sizeof(*ring->points), point_order);
    *out = ring;
    return 0;
}

void balance_ring_free(struct balance_ring *ring)
{
    if (ring == NULL)
        return;
    free(ring->points);
    free(ring);
}

/* ---------------------------------------------------------------- picking */

static bool usable(const struct proxy_upstream *up, const struct upstream_worker *worker, size_t i,
                   const struct upstream_tried *tried, uint64_t now)
{
    const struct upstream_server *s = &up->servers[i];
    return !upstream_tried_has(tried, i) && !s->disabled && worker->servers[i].down_until <= now &&
           atomic_load_explicit(&s->state, memory_order_relaxed) == UPSTREAM_SLOT_ACTIVE &&
           atomic_load_explicit(&s->api_state, memory_order_relaxed) == UPSTREAM_API_NONE &&
           !atomic_load_explicit(&s->checked_down, memory_order_relaxed) &&
           (s->max_conns == 0 ||
            atomic_load_explicit(&s->conns, memory_order_relaxed) < s->max_conns);
}

/* The server's weight (scaled), ramped up over slow_start after it came
 * back: from the health checks, or from this worker's passive marking. */
static unsigned weight_now(const struct proxy_upstream *up, const struct upstream_worker *worker,
                           size_t i, uint64_t now)
{
    const struct upstream_server *s = &up->servers[i];
    unsigned full = atomic_load_explicit(&s->weight, memory_order_relaxed) * WEIGHT_SCALE;
    if (s->slow_start_ms == 0)
        return full;
    uint64_t since = atomic_load_explicit(&s->recovered_ms, memory_order_relaxed);
    if (worker->servers[i].down_until > since)
        since = worker->servers[i].down_until;
    if (since == 0 || now >= since + s->slow_start_ms)
        return full;
    if (now <= since)
        return 1;
    uint64_t w = (uint64_t)full * (now - since) / s->slow_start_ms;
    return w > 0 ? (unsigned)w : 1;
}

/* Fewer requests in flight per unit of weight: whether `a` is less loaded
 * than `b`. */
static int load_order(const struct proxy_upstream *up, const struct upstream_worker *worker,
                      size_t a, size_t b, uint64_t now)
{
    uint64_t la = (uint64_t)atomic_load_explicit(&up->servers[a].conns, memory_order_relaxed) *
                  weight_now(up, worker, b, now);
    uint64_t lb = (uint64_t)atomic_load_explicit(&up->servers[b].conns, memory_order_relaxed) *
                  weight_now(up, worker, a, now);
    return la < lb ? -1 : la > lb;
}

/* Smooth weighted round robin (nginx's), or least_conn with ties going
 * round robin. */
static int pick_round_robin(struct proxy_upstream *up, struct upstream_worker *worker,
                            const struct upstream_tried *tried, bool backup, bool least_conn,
                            uint64_t now)
{
    int best = -1;
    int total = 0;
    for (size_t i = 0; i < up->server_count; i++) {
        struct server_state *state = &worker->servers[i];
        if (up->servers[i].backup != backup || !usable(up, worker, i, tried, now))
            continue;
        int weight = (int)weight_now(up, worker, i, now);
        state->current_weight += weight;
        total += weight;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        struct server_state *b = &worker->servers[best];
        int order = least_conn ? load_order(up, worker, i, (size_t)best, now) : 0;
        if (order < 0 || (order == 0 && state->current_weight > b->current_weight))
            best = (int)i;
    }
    if (best >= 0)
        worker->servers[best].current_weight -= total;
    return best;
}

/* The same key lands on the same server while it is usable; else on the
 * next one in weight order. */
static int pick_hash(struct proxy_upstream *up, struct upstream_worker *worker,
                     const struct upstream_tried *tried, uint32_t hash, uint64_t now)
{
    unsigned weights = 0;
    for (size_t i = 0; i < up->server_count; i++)
        if (!up->servers[i].backup)
            weights += up->servers[i].weight;
    if (weights == 0)
        return -1;
    unsigned point = hash % weights;
    size_t start = 0;
    for (; start < up->server_count; start++) {
        if (up->servers[start].backup)
            continue;
        if (point < up->servers[start].weight)
            break;
        point -= up->servers[start].weight;
    }
    for (size_t n = 0; n < up->server_count; n++) {
        size_t i = (start + n) % up->server_count;
        if (!up->servers[i].backup && usable(up, worker, i, tried, now))
            return (int)i;
    }
    return -1;
}

/* The first point at or after `hash`, then the following ones: a server
 * that is not usable passes its keys to the next servers on the ring. */
static int pick_ring(struct proxy_upstream *up, struct upstream_worker *worker,
                     const struct upstream_tried *tried, uint32_t hash, uint64_t now)
{
    const struct balance_ring *ring = up->ring;
    if (ring->count == 0)
        return -1;
    size_t lo = 0, hi = ring->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ring->points[mid].hash < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    struct upstream_tried seen = {{0}}; /* found not usable: their other points are skipped */
    for (size_t n = 0; n < ring->count; n++) {
        unsigned s = ring->points[(lo + n) % ring->count].server;
        if (upstream_tried_has(&seen, s))
            continue;
        if (usable(up, worker, s, tried, now))
            return (int)s;
        upstream_tried_add(&seen, s);
    }
    return -1;
}

static uint64_t next_random(struct upstream_worker *worker)
{
    if (worker->random == 0) /* xorshift64 must not start at 0 */
        worker->random = corral_monotonic_ns() | 1;
    uint64_t x = worker->random;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    worker->random = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* A random usable primary, by weight, other than `other` (-1: none). */
static int pick_one_random(struct proxy_upstream *up, struct upstream_worker *worker,
                           const struct upstream_tried *tried, int other, uint64_t now)
{
    uint64_t total = 0;
    for (size_t i = 0; i < up->server_count; i++)
        if (!up->servers[i].backup && (int)i != other && usable(up, worker, i, tried, now))
            total += weight_now(up, worker, i, now);
    if (total == 0)
        return -1;
    uint64_t point = (next_random(worker) >> 11) % total;
    for (size_t i = 0; i < up->server_count; i++) {
        if (up->servers[i].backup || (int)i == other || !usable(up, worker, i, tried, now))
            continue;
        unsigned w = weight_now(up, worker, i, now);
        if (point < w)
            return (int)i;
        point -= w;
    }
    return -1;
}

/* random two: the less loaded of two random picks, which spreads load
 * nearly as well as least_conn without every worker herding onto the
 * same least loaded server. */
static int pick_random(struct proxy_upstream *up, struct upstream_worker *worker,
                       const struct upstream_tried *tried, uint64_t now)
{
    int first = pick_one_random(up, worker, tried, -1, now);
    if (first < 0 || !up->random_two)
        return first;
    int second = pick_one_random(up, worker, tried, first, now);
    if (second < 0)
        return first;
    return load_order(up, worker, (size_t)second, (size_t)first, now) < 0 ? second : first;
}

int balance_pick_server(struct proxy_upstream *up, struct upstream_worker *worker,
                        const struct upstream_tried *tried, uint32_t hash, uint64_t now)
{
    int server;
    switch (up->balance) {
    case PROXY_BALANCE_IP_HASH:
    case PROXY_BALANCE_HASH:
        server = up->ring != NULL ? pick_ring(up, worker, tried, hash, now)
                                  : pick_hash(up, worker, tried, hash, now);
        break;
    case PROXY_BALANCE_RANDOM: server = pick_random(up, worker, tried, now); break;
    case PROXY_BALANCE_LEAST_CONN:
    case PROXY_BALANCE_ROUND_ROBIN:
    default:
        server = pick_round_robin(up, worker, tried, false, up->balance == PROXY_BALANCE_LEAST_CONN,
                                  now);
        break;
    }
    /* Backups share the load round robin, whatever the method. */
    if (server < 0 && up->has_backup)
        server =
            pick_round_robin(up, worker, tried, true, up->balance == PROXY_BALANCE_LEAST_CONN, now);
    return server;
}

bool balance_any_usable(const struct proxy_upstream *up, const struct upstream_worker *worker,
                        const struct upstream_tried *tried, uint64_t now)
{
    for (size_t i = 0; i < up->server_count; i++)
        if (usable(up, worker, i, tried, now))
            return true;
    return false;
}
