/*
 * upstream.c: upstream groups: servers and their addresses, what workers
 * share of each server (requests in flight, health), passive health
 * (max_fails and fail_timeout), the per-worker pools of idle connections,
 * error counters.  Balancing is in balance.c, active checks in health.c.
 */
#include "proto/upstream/upstream.h"

#include "proto/upstream/balance.h"
#include "proto/upstream/health.h"
#include "proto/upstream/resolve.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

const char *const proxy_error_kind_names[PROXY_ERROR_KINDS] = {
    [PROXY_ERROR_CONNECT] = "connect", [PROXY_ERROR_TIMEOUT] = "timeout",
    [PROXY_ERROR_RESET] = "reset",     [PROXY_ERROR_INVALID] = "invalid_response",
    [PROXY_ERROR_TLS] = "tls",
};

size_t upstream_conf_slots(const struct proxy_upstream_conf *conf)
{
    size_t n = 0;
    for (size_t i = 0; i < conf->server_count; i++)
        n += upstream_server_conf_slots(&conf->servers[i]);
    return n + conf->api_servers;
}

/* FNV-1a of `len` bytes into `h`. */
static uint64_t digest_add(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* `v`'s eight bytes into `h`. */
static uint64_t digest_num(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    return h;
}

static uint64_t digest_nums(uint64_t h, const unsigned *numbers, size_t count)
{
    for (size_t i = 0; i < count; i++)
        h = digest_num(h, numbers[i]);
    return h;
}

static uint64_t digest_str(uint64_t h, const char *text)
{
    return text != NULL ? digest_add(h, text, strlen(text) + 1) : digest_add(h, "", 0);
}

/* What makes two configs' upstreams the same for the admin API's
 * changes: the server lines, the balancing and the api_servers. */
static uint64_t conf_digest(const struct proxy_upstream_conf *conf)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < conf->server_count; i++) {
        const struct proxy_server_conf *sc = &conf->servers[i];
        unsigned numbers[] = {sc->weight,        sc->max_fails, sc->fail_timeout_ms,
                              sc->backup,        sc->down,      sc->max_conns,
                              sc->slow_start_ms, sc->resolve,   sc->resolve_slots};
        h = digest_str(h, sc->address);
        h = digest_str(h, sc->service);
        h = digest_nums(h, numbers, sizeof(numbers) / sizeof(numbers[0]));
    }
    unsigned numbers[] = {conf->balance, conf->hash_consistent, conf->random_two,
                          conf->api_servers};
    h = digest_str(h, conf->hash_key);
    return digest_nums(h, numbers, sizeof(numbers) / sizeof(numbers[0]));
}

int upstream_srv_name(const char *name, const char *service, char *out, size_t size)
{
    int n = strchr(service, '.') != NULL ? snprintf(out, size, "%s.%s", service, name)
                                         : snprintf(out, size, "_%s._tcp.%s", service, name);
    return n < 0 || (size_t)n >= size || (size_t)n > UPSTREAM_SRV_NAME_MAX ? -ENAMETOOLONG : 0;
}

/* A `resolve` server's NAME:PORT into its slot, which stays empty until
 * the resolver's first answer; with service=, its SRV record's name. */
static int resolve_slot_init(struct upstream_server *server, const char *address,
                             const char *service, unsigned slot)
{
    server->resolve_slot = slot;
    atomic_init(&server->state, UPSTREAM_SLOT_EMPTY);
    if (service != NULL) {
        char record[UPSTREAM_SRV_NAME_MAX + 1];
        if (upstream_srv_name(address, service, record, sizeof(record)) != 0)
            return -EINVAL;
        server->resolve_name = strdup(record);
        server->resolve_srv = true;
        return server->resolve_name != NULL ? 0 : -ENOMEM;
    }
    const char *colon = strrchr(address, ':');
    char *end;
    unsigned long port = colon != NULL ? strtoul(colon + 1, &end, 10) : 0;
    if (colon == NULL || colon == address || *end != '\0' || port == 0 || port > 65535)
        return -EINVAL;
    server->resolve_name = strndup(address, (size_t)(colon - address));
    if (server->resolve_name == NULL)
        return -ENOMEM;
    server->resolve_port = (uint16_t)port;
    return 0;
}

/* A resolver's ADDRESS[:PORT], port 53 by default. */
static int resolver_init(struct proxy_upstream *up, const char *text)
{
    char with_port[128];
    if (strchr(text, ':') == NULL) {
        if ((size_t)snprintf(with_port, sizeof(with_port), "%s:53", text) >= sizeof(with_port))
            return -EINVAL;
        text = with_port;
    }
    size_t i = up->resolver_count;
    if (i == UPSTREAM_MAX_RESOLVERS ||
        corral_parse_address(text, &up->resolvers[i], &up->resolver_lens[i]) != 0)
        return -EINVAL;
    up->resolver_count++;
    return 0;
}

int upstream_new(const struct proxy_upstream_conf *conf, unsigned workers,
                 struct proxy_upstream **out)
{
    size_t slots = upstream_conf_slots(conf);
    if (conf->server_count == 0 || slots > UPSTREAM_MAX_SERVERS)
        return -EINVAL;
    struct proxy_upstream *up = calloc(1, sizeof(*up));
    if (up == NULL)
        return -ENOMEM;
    *up = (struct proxy_upstream){
        .balance = conf->balance,
        .keepalive = conf->keepalive,
        .idle_timeout_ms = conf->idle_timeout_ms,
        .worker_count = workers,
        .resolve_valid_ms = conf->resolve_valid_ms,
        .resolve_ipv4_only = conf->resolve_ipv4_only,
    };
    up->name = strdup(conf->name);
    up->servers = calloc(slots, sizeof(*up->servers));
    up->workers = aligned_alloc(64, workers * sizeof(*up->workers));
    if (up->workers != NULL)
        memset(up->workers, 0, workers * sizeof(*up->workers));
    if (up->name == NULL || up->servers == NULL || up->workers == NULL)
        goto nomem;
    /* Each worker's view of the servers, as many as this upstream has: an
     * upstream of one server costs a few hundred bytes per worker, not
     * the most an upstream may hold.  Cache-line aligned, as other threads
     * read the stats. */
    for (unsigned w = 0; w < workers; w++) {
        struct upstream_worker *uw = &up->workers[w];
        size_t servers_size = (slots * sizeof(*uw->servers) + 63) & ~(size_t)63;
        size_t stats_size = (slots * sizeof(*uw->stats) + 63) & ~(size_t)63;
        uw->servers = aligned_alloc(64, servers_size);
        uw->stats = aligned_alloc(64, stats_size);
        if (uw->servers == NULL || uw->stats == NULL)
            goto nomem;
        memset(uw->servers, 0, servers_size);
        memset(uw->stats, 0, stats_size);
    }
    for (size_t i = 0; i < conf->server_count; i++) {
        const struct proxy_server_conf *sc = &conf->servers[i];
        size_t name_slots = upstream_server_conf_slots(sc);
        for (unsigned k = 0; k < name_slots; k++) {
            struct upstream_server *server = &up->servers[up->server_count++];
            server->address = strdup(sc->address);
            if (server->address == NULL)
                goto nomem;
            int err = sc->resolve ? resolve_slot_init(server, sc->address, sc->service, k)
                      : corral_parse_address(sc->address, &server->addr, &server->addrlen) != 0
                          ? -EINVAL
                          : 0;
            if (err != 0) {
                upstream_free(up);
                return err;
            }
            server->resolve_slots = (unsigned)name_slots;
            server->weight = sc->weight > 0 ? sc->weight : 1;
            server->conf_weight = server->weight;
            server->max_fails = sc->max_fails;
            server->fail_timeout_ms = sc->fail_timeout_ms;
            server->backup = sc->backup;
            server->resolve_backup = sc->backup;
            server->disabled = sc->down;
            server->max_conns = sc->max_conns;
            server->slow_start_ms = sc->slow_start_ms;
            /* an SRV name's lower priorities are backups */
            up->has_backup = up->has_backup || sc->backup || sc->service != NULL;
            up->has_resolve = up->has_resolve || sc->resolve;
        }
    }
    for (unsigned k = 0; k < conf->api_servers; k++) {
        struct upstream_server *server = &up->servers[up->server_count++];
        server->address = calloc(1, UPSTREAM_API_ADDRESS_MAX);
        if (server->address == NULL)
            goto nomem;
        const struct proxy_server_conf defaults = PROXY_SERVER_CONF_DEFAULT;
        server->api_slot = true;
        atomic_init(&server->state, UPSTREAM_SLOT_EMPTY);
        server->resolve_slots = 1;
        server->weight = server->conf_weight = defaults.weight;
        server->max_fails = defaults.max_fails;
        server->fail_timeout_ms = defaults.fail_timeout_ms;
    }
    up->conf_digest = conf_digest(conf);
    for (size_t i = 0; i < conf->resolver_count; i++) {
        if (resolver_init(up, conf->resolvers[i]) != 0) {
            upstream_free(up);
            return -EINVAL;
        }
    }
    if (up->has_resolve && up->resolver_count == 0) {
        upstream_free(up);
        return -EINVAL;
    }
    up->random_two = conf->random_two;
    up->health = conf->health;
    if (conf->health.enabled) {
        up->health_uri = strdup(conf->health.uri != NULL ? conf->health.uri : "/");
        if (up->health_uri == NULL)
            goto nomem;
        up->health.uri = up->health_uri;
        up->health_service =
            strdup(conf->health.grpc_service != NULL ? conf->health.grpc_service : "");
        if (up->health_service == NULL)
            goto nomem;
        up->health.grpc_service = up->health_service;
        if (health_expect_copy(up, &conf->health) != 0) {
            upstream_free(up);
            return -EINVAL;
        }
    }
    if (conf->balance == PROXY_BALANCE_HASH) {
        int err =
            balance_key_new(conf->hash_key != NULL ? conf->hash_key : "$remote_addr", &up->key);
        if (err != 0) {
            upstream_free(up);
            return err;
        }
    }
    if ((conf->balance == PROXY_BALANCE_HASH || conf->balance == PROXY_BALANCE_IP_HASH) &&
        conf->hash_consistent && balance_ring_new(up->servers, up->server_count, &up->ring) != 0)
        goto nomem;
    up->tls = conf->tls;
    up->proxy_protocol = conf->proxy_protocol ? conf->proxy_protocol_version : 0;
    assert(up->proxy_protocol <= 2);
    *out = up;
    return 0;

nomem:
    upstream_free(up);
    return -ENOMEM;
}

void upstream_free(struct proxy_upstream *upstream)
{
    if (upstream == NULL)
        return;
    health_stop(upstream);
    resolve_stop(upstream);
    balance_key_free(upstream->key);
    balance_ring_free(upstream->ring);
    free(upstream->health_uri);
    free(upstream->health_service);
    health_expect_free(upstream);
    for (size_t i = 0; i < upstream->server_count; i++) {
        free(upstream->servers[i].address);
        free(upstream->servers[i].resolve_name);
    }
    free(upstream->servers);
    for (unsigned w = 0; upstream->workers != NULL && w < upstream->worker_count; w++) {
        free(upstream->workers[w].servers);
        free(upstream->workers[w].stats);
    }
    free(upstream->workers);
    free(upstream->name);
    tls_client_free(upstream->tls);
    free(upstream);
}

const char *upstream_name(const struct proxy_upstream *upstream)
{
    return upstream->name;
}

uint64_t upstream_errors(const struct proxy_upstream *upstream, enum proxy_error_kind kind)
{
    uint64_t sum = 0;
    for (unsigned w = 0; w < upstream->worker_count; w++)
        sum += atomic_load_explicit(&upstream->workers[w].errors[kind], memory_order_relaxed);
    return sum;
}

struct upstream_worker *upstream_worker_of(const struct proxy_upstream *upstream,
                                           const corral_worker *worker)
{
    return &upstream->workers[worker != NULL ? corral_worker_index(worker) : 0];
}

/* ----------------------------------------------------------- per server */

bool upstream_server_acquire(struct proxy_upstream *up, struct upstream_worker *worker,
                             unsigned server)
{
    struct upstream_server *s = &up->servers[server];
    if (s->max_conns == 0) {
        atomic_fetch_add(&s->conns, 1);
    } else {
        /* A compare-exchange: the limit holds across workers even when two
         * of them pick the server with one slot left. */
        unsigned n = atomic_load_explicit(&s->conns, memory_order_relaxed);
        do {
            if (n >= s->max_conns)
                return false;
        } while (!atomic_compare_exchange_weak(&s->conns, &n, n + 1));
    }
    /* A slot that drains meanwhile is not used: the resolver rewrites a
     * slot's address only once it drained and no request holds it, and
     * this order (count, then look) is what makes that check safe. */
    if (atomic_load(&s->state) != UPSTREAM_SLOT_ACTIVE) {
        atomic_fetch_sub_explicit(&s->conns, 1, memory_order_relaxed);
        return false;
    }
    worker->servers[server].active++;
    return true;
}

void upstream_server_release(struct proxy_upstream *up, struct upstream_worker *worker,
                             unsigned server)
{
    assert(worker->servers[server].active > 0);
    worker->servers[server].active--;
    /* Release: the resolver that sees the count reach zero may rewrite
     * the slot's address, which this request has read. */
    unsigned before =
        atomic_fetch_sub_explicit(&up->servers[server].conns, 1, memory_order_release);
    assert(before > 0);
    (void)before;
}

size_t upstream_server_count(const struct proxy_upstream *upstream)
{
    return upstream->server_count;
}

const char *upstream_server_address(const struct proxy_upstream *upstream, size_t index)
{
    return upstream->servers[index].address;
}

bool upstream_server_backup(const struct proxy_upstream *upstream, size_t index)
{
    return upstream->servers[index].backup;
}

enum proxy_server_state upstream_server_state(const struct proxy_upstream *upstream, size_t index)
{
    const struct upstream_server *s = &upstream->servers[index];
    if (s->disabled ||
        atomic_load_explicit(&s->state, memory_order_relaxed) != UPSTREAM_SLOT_ACTIVE ||
        atomic_load_explicit(&s->api_state, memory_order_relaxed) != UPSTREAM_API_NONE)
        return PROXY_SERVER_DISABLED;
    return atomic_load_explicit(&s->checked_down, memory_order_relaxed) ? PROXY_SERVER_DOWN
                                                                        : PROXY_SERVER_UP;
}

unsigned upstream_server_slot(const struct proxy_upstream *upstream, size_t index)
{
    return upstream->servers[index].resolve_slot;
}

unsigned upstream_server_conns(const struct proxy_upstream *upstream, size_t index)
{
    return atomic_load_explicit(&upstream->servers[index].conns, memory_order_relaxed);
}

/* The servers the admin API added to `previous`, into the same slots of
 * `upstream`, whose config is the same. */
static void take_api_servers(struct proxy_upstream *upstream, const struct proxy_upstream *previous)
{
    assert(upstream->server_count == previous->server_count);
    for (size_t i = 0; i < upstream->server_count; i++) {
        struct upstream_server *s = &upstream->servers[i];
        const struct upstream_server *old = &previous->servers[i];
        if (!s->api_slot || atomic_load(&old->state) != UPSTREAM_SLOT_ACTIVE)
            continue;
        memcpy(s->address, old->address, UPSTREAM_API_ADDRESS_MAX);
        s->addr = old->addr;
        s->addrlen = old->addrlen;
        atomic_store(&s->weight, atomic_load(&old->weight));
        atomic_store(&s->api_state, atomic_load(&old->api_state));
        atomic_store(&s->checked_down, atomic_load(&old->checked_down));
        atomic_store(&s->recovered_ms, atomic_load(&old->recovered_ms));
        atomic_store(&s->state, UPSTREAM_SLOT_ACTIVE);
    }
}

void upstream_take_health(struct proxy_upstream *upstream, const struct proxy_upstream *previous)
{
    if (upstream->conf_digest == previous->conf_digest)
        take_api_servers(upstream, previous);
    for (size_t i = 0; i < upstream->server_count; i++) {
        struct upstream_server *s = &upstream->servers[i];
        if (s->api_slot)
            continue;
        for (size_t j = 0; j < previous->server_count; j++) {
            const struct upstream_server *old = &previous->servers[j];
            if (old->api_slot)
                continue;
            if (strcmp(s->address, old->address) != 0 || s->resolve_slot != old->resolve_slot)
                continue;
            /* A `resolve` slot keeps its address until the next answer. */
            if (s->resolve_name != NULL && old->resolve_name != NULL &&
                atomic_load(&old->state) == UPSTREAM_SLOT_ACTIVE) {
                s->addr = old->addr;
                s->addrlen = old->addrlen;
                if (s->resolve_srv) { /* what its record said, until the next answer */
                    s->resolve_port = old->resolve_port;
                    atomic_store(&s->weight, atomic_load(&old->weight));
                    atomic_store(&s->backup, atomic_load(&old->backup));
                }
                atomic_store(&s->state, UPSTREAM_SLOT_ACTIVE);
            } else if ((s->resolve_name == NULL) != (old->resolve_name == NULL)) {
                break;
            }
            atomic_store(&s->checked_down, atomic_load(&old->checked_down));
            atomic_store(&s->recovered_ms, atomic_load(&old->recovered_ms));
            if (s->conf_weight == old->conf_weight && s->disabled == old->disabled) {
                atomic_store(&s->api_state, atomic_load(&old->api_state));
                if (!s->resolve_srv)
                    atomic_store(&s->weight, atomic_load(&old->weight));
            }
            break;
        }
    }
}

/* A removed server's slot is free once no request holds it: the
 * acquire-then-look order of upstream_server_acquire() makes the count
 * safe to trust. */
static bool api_slot_free(struct upstream_server *s)
{
    int state = atomic_load(&s->state);
    if (state == UPSTREAM_SLOT_DRAINING && atomic_load(&s->conns) == 0) {
        atomic_store(&s->state, UPSTREAM_SLOT_EMPTY);
        state = UPSTREAM_SLOT_EMPTY;
    }
    return state == UPSTREAM_SLOT_EMPTY;
}

int upstream_api_add(struct proxy_upstream *up, const char *address, unsigned weight,
                     unsigned char state)
{
    struct sockaddr_storage addr;
    socklen_t addrlen;
    if (strlen(address) >= UPSTREAM_API_ADDRESS_MAX ||
        corral_parse_address(address, &addr, &addrlen) != 0 ||
        (addr.ss_family != AF_INET && addr.ss_family != AF_INET6))
        return -EINVAL;
    if (up->ring != NULL)
        return -ENOTSUP;
    size_t free_slot = up->server_count;
    for (size_t i = 0; i < up->server_count; i++) {
        struct upstream_server *s = &up->servers[i];
        if (s->api_slot && api_slot_free(s)) {
            if (free_slot == up->server_count)
                free_slot = i;
        } else if (atomic_load(&s->state) == UPSTREAM_SLOT_ACTIVE &&
                   strcmp(s->address, address) == 0) {
            return -EEXIST;
        }
    }
    if (free_slot == up->server_count)
        return -ENOSPC;
    /* Empty and unheld: no worker reads its address until `state` says. */
    struct upstream_server *s = &up->servers[free_slot];
    snprintf(s->address, UPSTREAM_API_ADDRESS_MAX, "%s", address);
    s->addr = addr;
    s->addrlen = addrlen;
    atomic_store(&s->weight, weight);
    atomic_store(&s->api_state, state);
    atomic_store(&s->checked_down, false);
    atomic_store(&s->recovered_ms, 0);
    atomic_fetch_add(&s->gen, 1); /* no pooled connection to the last server reused */
    atomic_store(&s->state, UPSTREAM_SLOT_ACTIVE);
    return (int)free_slot;
}

int upstream_api_remove(struct proxy_upstream *up, size_t i)
{
    if (i >= up->server_count)
        return -ENOENT;
    struct upstream_server *s = &up->servers[i];
    if (!s->api_slot || atomic_load(&s->state) != UPSTREAM_SLOT_ACTIVE)
        return -ENOENT;
    atomic_store(&s->state, UPSTREAM_SLOT_DRAINING);
    api_slot_free(s);
    return 0;
}

void upstream_server_failed(struct proxy_upstream *up, struct upstream_worker *worker,
                            unsigned server, uint64_t now)
{
    struct server_state *state = &worker->servers[server];
    const struct upstream_server *conf = &up->servers[server];
    if (conf->max_fails == 0)
        return;
    if (++state->fails >= conf->max_fails) {
        /* Once per fail_timeout at most: the 502s that follow say nothing. */
        corral_log(CORRAL_LOG_WARN,
                   "upstream \"%s\": %s marked down for %u ms by this worker after %u failed "
                   "attempt(s)",
                   up->name, conf->address, conf->fail_timeout_ms, conf->max_fails);
        state->down_until = now + conf->fail_timeout_ms;
        atomic_store_explicit(&worker->stats[server].down_until, state->down_until,
                              memory_order_relaxed);
        state->fails = 0;
    }
}

/* Error lines about a server (proxy_next.c), at most one a second. */
#define LOG_INTERVAL_MS 1000

bool upstream_log_turn(struct proxy_upstream *up, unsigned server, uint64_t now, unsigned *skipped)
{
    struct upstream_server *s = &up->servers[server];
    uint64_t last = atomic_load_explicit(&s->log_ms, memory_order_relaxed);
    if ((last != 0 && now - last < LOG_INTERVAL_MS) ||
        !atomic_compare_exchange_strong_explicit(&s->log_ms, &last, now != 0 ? now : 1,
                                                 memory_order_relaxed, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&s->log_skipped, 1, memory_order_relaxed);
        return false;
    }
    *skipped = atomic_exchange_explicit(&s->log_skipped, 0, memory_order_relaxed);
    return true;
}

/* Out of descriptors, buffers, memory or local ports: this host's
 * trouble, not the upstream's, and no other server would fare better. */
bool upstream_local_error(int err)
{
    return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM ||
           err == -EADDRNOTAVAIL;
}

/* ------------------------------------------------------------------ pools */

/* Takes a busy `uc` out of the busy count. */
static void pool_not_busy(struct upstream_conn *uc)
{
    if (uc->busy) {
        uc->busy = false;
        assert(uc->worker->busy_count > 0);
        uc->worker->busy_count--;
    }
}

/* Starts a new window of the busy peak when the current one has lasted
 * keepalive_timeout.  Two windows, so that a peak just before a window
 * ends still counts for a whole window after it. */
static void pool_roll(struct upstream_worker *w, uint32_t window_ms, uint64_t now)
{
    if (now - w->busy_window_ms < window_ms)
        return;
    w->busy_peak_last = now - w->busy_window_ms >= 2ull * window_ms ? 0 : w->busy_peak;
    w->busy_peak = 0;
    w->busy_window_ms = now;
}

void upstream_pool_busy(struct upstream_conn *uc, uint64_t now)
{
    struct upstream_worker *w = uc->worker;
    assert(!uc->busy);
    uc->busy = true;
    w->busy_count++;
    pool_roll(w, uc->upstream->idle_timeout_ms, now);
    if (w->busy_count > w->busy_peak)
        w->busy_peak = w->busy_count;
}

void upstream_pool_remove(struct upstream_conn *uc)
{
    struct server_state *state = &uc->worker->servers[uc->server];
    if (uc->idle_prev != NULL) {
        uc->idle_prev->idle_next = uc->idle_next;
    } else if (state->idle == uc) {
        state->idle = uc->idle_next;
    } else {
        pool_not_busy(uc); /* not in the pool */
        return;
    }
    if (uc->idle_next != NULL)
        uc->idle_next->idle_prev = uc->idle_prev;
    uc->idle_next = uc->idle_prev = NULL;
    uc->worker->idle_count--;
    upstream_count_idle(uc->worker, uc->server, -1);
}

int upstream_send_preamble(corral_conn *conn, const char *data, size_t len)
{
    if (len == 0)
        return 0;
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    ssize_t n = corral_plain_transport.writev(conn, &iov, 1);
    return n == (ssize_t)len ? 0 : n < 0 && n != -EAGAIN ? (int)n : -EIO;
}

/* The connection of `state`'s pool released longest ago, or NULL. */
static struct upstream_conn *pool_oldest(const struct server_state *state)
{
    struct upstream_conn *uc = state->idle;
    while (uc != NULL && uc->idle_next != NULL)
        uc = uc->idle_next;
    return uc;
}

/* Nothing more is sent on a connection closed here and nothing it sends
 * matters, so it does not linger. */
void upstream_pool_release(struct upstream_conn *uc)
{
    struct proxy_upstream *up = uc->upstream;
    struct upstream_worker *w = uc->worker;
    struct server_state *state = &w->servers[uc->server];
    pool_not_busy(uc);
    pool_roll(w, up->idle_timeout_ms, corral_loop_now(corral_conn_loop(uc->conn)));
    /* A stopping worker (a graceful stop or a reload) would wait its whole
     * drain timeout for pooled connections that have nothing left to do. */
    corral_worker *worker = corral_conn_worker(uc->conn);
    if (worker != NULL && corral_worker_stopping(worker)) {
        corral_conn_close_no_linger(uc->conn);
        return;
    }
    /* nginx closes a connection once `keepalive` others idle, and a load
     * with more requests in flight than that then closes and reopens
     * connections all the time: a few responses that end together fill
     * the pool, and the next requests find it empty.  As HAProxy does, the
     * connections that the recent load had busy at once stay (the two
     * windows' peak), and `keepalive` more; LIFO reuse leaves the ones a
     * lighter load does not need to their keepalive_timeout. */
    unsigned peak = w->busy_peak > w->busy_peak_last ? w->busy_peak : w->busy_peak_last;
    if (w->idle_count >= up->keepalive &&
        (up->keepalive == 0 || w->busy_count + w->idle_count + 1 > peak + up->keepalive)) {
        /* With proxy_protocol an idle connection serves only the client
         * it was opened for, who may be gone for good: the server's
         * oldest makes room for this one, whose client was here just now. */
        struct upstream_conn *oldest = up->proxy_protocol != 0 ? pool_oldest(state) : NULL;
        if (oldest == NULL) {
            corral_conn_close_no_linger(uc->conn);
            return;
        }
        upstream_pool_remove(oldest);
        corral_conn_close_no_linger(oldest->conn);
    }
    uc->reused = true;
    uc->idle_prev = NULL;
    uc->idle_next = state->idle;
    if (state->idle != NULL)
        state->idle->idle_prev = uc;
    state->idle = uc;
    uc->worker->idle_count++;
    upstream_count_idle(uc->worker, uc->server, 1);
    corral_conn_resume_read(uc->conn); /* it may have been paused for a slow client */
    corral_conn_set_timeouts(uc->conn, up->idle_timeout_ms, 0);
}

/* An idle connection that received anything was closed by the loop when
 * it read it (a stray response must not answer the next request).  Bytes
 * that reach the kernel within the loop iteration that reuses it are not
 * seen, as in any proxy: a peek here would narrow that window only to the
 * next one, before the backend reads the request, for a system call on
 * every proxied request (about 6% more CPU per request, measured with a
 * new client connection per request).
 *
 * With proxy_protocol, a connection told the server once, in its PROXY
 * header, which client it carries: it may serve only requests whose
 * header would be the same bytes (the same client address and port, to
 * the same local address), or one client's requests would reach the
 * server as another's.  Without it, every preamble is empty and the first
 * connection matches.  The pool is a list walked for a match rather than
 * a table keyed by header: it holds `keepalive` connections at most, and
 * a comparison of a few dozen bytes each costs less than the upkeep of a
 * table on every release and close. */
struct upstream_conn *upstream_pool_take(struct upstream_worker *worker, unsigned server,
                                         const struct upstream_preamble *preamble)
{
    struct upstream_conn *next;
    for (struct upstream_conn *uc = worker->servers[server].idle; uc != NULL; uc = next) {
        next = uc->idle_next;
        /* Connected to an address the resolver has replaced since. */
        if (uc->gen !=
            atomic_load_explicit(&uc->upstream->servers[server].gen, memory_order_relaxed)) {
            upstream_pool_remove(uc);
            corral_conn_close_no_linger(uc->conn);
            continue;
        }
        if (uc->preamble.len == preamble->len &&
            memcmp(uc->preamble.data, preamble->data, preamble->len) == 0) {
            upstream_pool_remove(uc);
            upstream_pool_busy(uc, corral_loop_now(corral_conn_loop(uc->conn)));
            return uc;
        }
    }
    return NULL;
}

int upstream_connect(struct upstream_conn *uc, corral_loop *loop,
                     const struct corral_conn_handler *handler, void *data)
{
    const struct upstream_server *s = &uc->upstream->servers[uc->server];
    uc->gen = atomic_load_explicit(&s->gen, memory_order_relaxed);
    int err = corral_connect(loop, (const struct sockaddr *)&s->addr, s->addrlen, handler, data,
                             &uc->conn);
    if (err == 0)
        upstream_count_open(uc->worker, uc->server, 1);
    return err;
}
