/*
 * upstream.c: upstream groups: servers and their addresses, balancing
 * (round robin, least_conn, hash), passive health (max_fails and
 * fail_timeout), the per-worker pools of idle connections, error counters.
 */
#include "proto/upstream.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *const proxy_error_kind_names[PROXY_ERROR_KINDS] = {
    [PROXY_ERROR_CONNECT] = "connect", [PROXY_ERROR_TIMEOUT] = "timeout",
    [PROXY_ERROR_RESET] = "reset",     [PROXY_ERROR_INVALID] = "invalid_response",
    [PROXY_ERROR_TLS] = "tls",
};

int proxy_upstream_new(const struct proxy_upstream_conf *conf, unsigned workers,
                       struct proxy_upstream **out)
{
    if (conf->server_count == 0 || conf->server_count > UPSTREAM_MAX_SERVERS)
        return -EINVAL;
    struct proxy_upstream *up = calloc(1, sizeof(*up));
    if (up == NULL)
        return -ENOMEM;
    *up = (struct proxy_upstream){
        .balance = conf->balance,
        .keepalive = conf->keepalive,
        .idle_timeout_ms = conf->idle_timeout_ms,
        .worker_count = workers,
    };
    up->name = strdup(conf->name);
    up->servers = calloc(conf->server_count, sizeof(*up->servers));
    up->workers = aligned_alloc(64, workers * sizeof(*up->workers));
    if (up->name == NULL || up->servers == NULL || up->workers == NULL)
        goto nomem;
    memset(up->workers, 0, workers * sizeof(*up->workers));
    for (size_t i = 0; i < conf->server_count; i++) {
        struct upstream_server *server = &up->servers[i];
        const struct proxy_server_conf *sc = &conf->servers[i];
        up->server_count++;
        server->address = strdup(sc->address);
        if (server->address == NULL)
            goto nomem;
        if (corral_parse_address(sc->address, &server->addr, &server->addrlen) != 0) {
            proxy_upstream_free(up);
            return -EINVAL;
        }
        server->weight = sc->weight > 0 ? sc->weight : 1;
        server->max_fails = sc->max_fails;
        server->fail_timeout_ms = sc->fail_timeout_ms;
    }
    up->tls = conf->tls;
    *out = up;
    return 0;

nomem:
    proxy_upstream_free(up);
    return -ENOMEM;
}

void proxy_upstream_free(struct proxy_upstream *upstream)
{
    if (upstream == NULL)
        return;
    for (size_t i = 0; i < upstream->server_count; i++)
        free(upstream->servers[i].address);
    free(upstream->servers);
    free(upstream->workers);
    free(upstream->name);
    tls_client_free(upstream->tls);
    free(upstream);
}

const char *proxy_upstream_name(const struct proxy_upstream *upstream)
{
    return upstream->name;
}

uint64_t proxy_upstream_errors(const struct proxy_upstream *upstream, enum proxy_error_kind kind)
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

/* ---------------------------------------------------------------- balancing */

static uint32_t hash_text(const char *text)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *text != '\0'; text++)
        h = (h ^ (uint8_t)*text) * 16777619u;
    return h;
}

int upstream_pick_server(struct proxy_upstream *up, struct upstream_worker *worker, uint64_t tried,
                         const char *client, uint64_t now)
{
    int best = -1;
    int total = 0;
    if (up->balance == PROXY_BALANCE_HASH) {
        /* The same client address lands on the same server while it is up;
         * otherwise the next one in weight order. */
        unsigned weights = 0;
        for (size_t i = 0; i < up->server_count; i++)
            weights += up->servers[i].weight;
        assert(weights > 0); /* conf: one server at least, weights from 1 */
        unsigned point = hash_text(client) % weights;
        size_t start = 0;
        for (; start < up->server_count && point >= up->servers[start].weight; start++)
            point -= up->servers[start].weight;
        for (size_t n = 0; n < up->server_count; n++) {
            size_t i = (start + n) % up->server_count;
            if (!(tried & (1ull << i)) && worker->servers[i].down_until <= now)
                return (int)i;
        }
        return -1;
    }
    for (size_t i = 0; i < up->server_count; i++) {
        struct server_state *state = &worker->servers[i];
        if ((tried & (1ull << i)) || state->down_until > now)
            continue;
        int weight = (int)up->servers[i].weight;
        state->current_weight += weight;
        total += weight;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        struct server_state *b = &worker->servers[best];
        if (up->balance == PROXY_BALANCE_LEAST_CONN) {
            /* Fewest requests in flight per unit of weight; ties go round robin. */
            uint64_t mine = (uint64_t)state->active * up->servers[best].weight;
            uint64_t theirs = (uint64_t)b->active * up->servers[i].weight;
            if (mine < theirs || (mine == theirs && state->current_weight > b->current_weight))
                best = (int)i;
        } else if (state->current_weight > b->current_weight) {
            best = (int)i;
        }
    }
    if (best >= 0)
        worker->servers[best].current_weight -= total;
    return best;
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

/* Out of descriptors, buffers, memory or local ports: this host's
 * trouble, not the upstream's, and no other server would fare better. */
bool upstream_local_error(int err)
{
    return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM ||
           err == -EADDRNOTAVAIL;
}

/* ------------------------------------------------------------------ pools */

void upstream_pool_remove(struct upstream_conn *uc)
{
    struct server_state *state = &uc->worker->servers[uc->server];
    if (uc->idle_prev != NULL)
        uc->idle_prev->idle_next = uc->idle_next;
    else if (state->idle == uc)
        state->idle = uc->idle_next;
    else
        return; /* not in the pool */
    if (uc->idle_next != NULL)
        uc->idle_next->idle_prev = uc->idle_prev;
    uc->idle_next = uc->idle_prev = NULL;
    uc->worker->idle_count--;
    upstream_count_idle(uc->worker, uc->server, -1);
}

/* Nothing more is sent on a connection closed here and nothing it sends
 * matters, so it does not linger. */
void upstream_pool_release(struct upstream_conn *uc)
{
    struct proxy_upstream *up = uc->upstream;
    /* A stopping worker (a graceful stop or a reload) would wait its whole
     * drain timeout for pooled connections that have nothing left to do. */
    corral_worker *worker = corral_conn_worker(uc->conn);
    if ((worker != NULL && corral_worker_stopping(worker)) ||
        uc->worker->idle_count >= up->keepalive) {
        corral_conn_close_no_linger(uc->conn);
        return;
    }
    struct server_state *state = &uc->worker->servers[uc->server];
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
 * new client connection per request). */
struct upstream_conn *upstream_pool_take(struct upstream_worker *worker, unsigned server)
{
    struct upstream_conn *uc = worker->servers[server].idle;
    if (uc != NULL)
        upstream_pool_remove(uc);
    return uc;
}

int upstream_connect(struct upstream_conn *uc, corral_loop *loop,
                     const struct corral_conn_handler *handler, void *data)
{
    const struct upstream_server *s = &uc->upstream->servers[uc->server];
    int err = corral_connect(loop, (const struct sockaddr *)&s->addr, s->addrlen, handler, data,
                             &uc->conn);
    if (err == 0)
        upstream_count_open(uc->worker, uc->server, 1);
    return err;
}
