/*
 * h3_udp.c: an HTTP/3 endpoint per worker on a libcorral UDP listen.
 * Each worker's socket feeds its own endpoint (made on its first
 * datagram, freed when its loop ends), and the endpoint's datagrams leave
 * by the same socket; those the socket cannot take now wait for it,
 * within a bound, as a full network would drop the rest.  A datagram
 * whose connection ID names another worker (the kernel's 4-tuple hash
 * sent it here: the client's address changed) is handed to that worker
 * through its post queue, and counted.  So is one whose ID names an
 * older generation of the same sockets (a connection open across a
 * reload): to that generation's worker, which drains on its own loop.
 */
#include "proto/http/site.h"
#include "proto/http3/http3.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of datagrams a worker keeps for a full socket; beyond them a
 * datagram is dropped (QUIC's loss recovery sends it again). */
#define PENDING_MAX (1024 * 1024)

struct pending {
    struct pending *next;
    struct corral_udp_msg msg; /* its data: `bytes` */
    uint8_t bytes[];
};

/* What the connections write while one batch of received datagrams is
 * read (on_recv) is gathered and sent at its end with one sendmmsg(),
 * rather than a call per datagram: up to this many messages and bytes
 * (a GSO run is one message).  So is what they write at other times (a
 * response that was not ready during the read, a timer): gathered until
 * the loop's next deferred pass, or the end of the next read if that
 * comes first, so that the connections flushed in one pass of the loop
 * share a call too. */
#define BATCH_MSGS  32
#define BATCH_BYTES (64 * 1024)

struct h3_udp_worker {
    struct h3_udp_site *site;
    unsigned index; /* its worker's */
    corral_udp_socket *sock;
    struct h3_endpoint *ep;
    struct pending *head, **tail;
    size_t pending_bytes;
    bool held;           /* it holds its worker while its endpoint drains */
    bool batching;       /* inside on_recv: its end sends the batch */
    bool flush_deferred; /* outside it: batch_deferred() will send the batch */
    bool stopped;        /* on_stop ran: output() sends at once, batch_deferred() frees */
    size_t batch_count, batch_used;
    struct corral_udp_msg batch[BATCH_MSGS];
    uint8_t batch_bytes[BATCH_BYTES];
};

/* Per worker, written by its worker only, read by anyone
 * (h3_udp_site_stats()). */
struct counters {
    alignas(64) _Atomic uint64_t v[H3_COUNTER_COUNT]; /* by enum h3_counter */
    /* on_stop ran: a hand-off that comes later makes no endpoint.  Set
     * under chain_lock, which a newer generation's hand-off reads it under. */
    bool stopped;
};

struct h3_udp_site {
    struct h3_endpoint_config config;           /* loop, worker, index and output set per worker */
    uint8_t token_secret[32], reset_secret[32]; /* the workers' keys, if not the config's */
    uint8_t ticket_key[H3_TICKET_KEY_LEN];
    unsigned worker_count;
    /* By corral_worker_index(); an entry is set and cleared by its worker
     * under chain_lock, as a newer generation's workers read it. */
    struct h3_udp_worker **workers;
    struct counters *counters;            /* by corral_worker_index() */
    uint8_t generation;                   /* the tag in its connection IDs */
    struct h3_replay_store *replay_store; /* made for it, with early data */
    bool close_on_stop;                   /* h3_udp_site_close_on_stop() */
    /* The generations of the same sockets (h3_udp_site_follow()), under
     * chain_lock: the one before, still running, and the one after. */
    struct h3_udp_site *older, *newer;
};

/* Guards every site's older/newer links, its workers[] entries and their
 * `stopped` flags against the other generations' threads.  Taken only to
 * link, unlink, make or end a worker's endpoint, and per datagram handed
 * to an older generation (a reload's drain): never on a datagram of the
 * worker's own connections.  One for the process, as a chain of sites
 * spans generations that know nothing of each other. */
static pthread_mutex_t chain_lock = PTHREAD_MUTEX_INITIALIZER;

/* A datagram on its way to the worker that owns its connection. */
struct handoff {
    struct h3_udp_site *site;
    corral_udp_socket *owner; /* the owner's socket of the same listen */
    uint64_t posted_ns;       /* when the worker that read it posted it */
    struct corral_udp_msg msg;
    uint8_t bytes[];
};

int h3_udp_site_new(const struct h3_endpoint_config *config, unsigned workers,
                    struct h3_udp_site **out)
{
    *out = NULL;
    /* Every worker loads them again, on its first datagram: a file that
     * does not load must be refused now, not then. */
    const struct h3_certificate *pairs = config->vhost_certificates;
    size_t count = pairs != NULL ? config->site->vhost_count : 1;
    for (size_t v = 0; v < count; v++) {
        int err = pairs == NULL ? h3_credentials_check(config->cert_file, config->key_file) : 0;
        for (const struct h3_certificate *p = pairs != NULL ? &pairs[v] : NULL;
             p != NULL && err == 0; p = p->next)
            err = p->by_name ? 0 : h3_credentials_check(p->cert_file, p->key_file);
        if (err != 0)
            return err;
    }
    struct h3_udp_site *site = calloc(1, sizeof(*site));
    if (site == NULL || (site->workers = calloc(workers, sizeof(*site->workers))) == NULL ||
        (site->counters = aligned_alloc(64, workers * sizeof(*site->counters))) == NULL) {
        if (site != NULL)
            free(site->workers);
        free(site);
        return -ENOMEM;
    }
    memset(site->counters, 0, workers * sizeof(*site->counters));
    site->config = *config;
    site->worker_count = workers;
    /* One key for all the workers, so that any of them takes a token
     * another made (a config's, from quic_host_key, outlives reloads);
     * copied, the config's need not outlive this call. */
    if (config->token_secret != NULL)
        memcpy(site->token_secret, config->token_secret, sizeof(site->token_secret));
    if (config->reset_secret != NULL)
        memcpy(site->reset_secret, config->reset_secret, sizeof(site->reset_secret));
    if (config->ticket_key != NULL)
        memcpy(site->ticket_key, config->ticket_key, sizeof(site->ticket_key));
    if ((config->token_secret == NULL &&
         gnutls_rnd(GNUTLS_RND_KEY, site->token_secret, sizeof(site->token_secret)) != 0) ||
        (config->reset_secret == NULL &&
         gnutls_rnd(GNUTLS_RND_KEY, site->reset_secret, sizeof(site->reset_secret)) != 0) ||
        (config->ticket_key == NULL &&
         gnutls_rnd(GNUTLS_RND_KEY, site->ticket_key, sizeof(site->ticket_key)) != 0)) {
        h3_udp_site_free(site);
        return -EIO;
    }
    site->config.token_secret = site->token_secret;
    site->config.reset_secret = site->reset_secret;
    site->config.ticket_key = site->ticket_key;
    /* One record of 0-RTT ClientHellos for the workers: a replay sent to
     * another worker is refused too (h3_replay.c). */
    if (config->early_data && config->replay_store == NULL) {
        int err = h3_replay_store_new(workers, &site->replay_store);
        if (err != 0) {
            h3_udp_site_free(site);
            return err;
        }
        site->config.replay_store = site->replay_store;
    }
    *out = site;
    return 0;
}

void h3_udp_site_follow(struct h3_udp_site *site, struct h3_udp_site *previous)
{
    pthread_mutex_lock(&chain_lock);
    site->generation = (uint8_t)(previous->generation + 1);
    site->config.generation = site->generation;
    site->older = previous;
    previous->newer = site;
    pthread_mutex_unlock(&chain_lock);
}

void h3_udp_site_close_on_stop(struct h3_udp_site *site)
{
    site->close_on_stop = true;
}

void h3_udp_site_free(struct h3_udp_site *site)
{
    if (site == NULL)
        return;
    pthread_mutex_lock(&chain_lock);
    if (site->newer != NULL)
        site->newer->older = site->older;
    if (site->older != NULL)
        site->older->newer = site->newer;
    pthread_mutex_unlock(&chain_lock);
    free(site->workers); /* each worker's freed by its on_stop */
    free(site->counters);
    h3_replay_store_free(site->replay_store);
    free(site);
}

/* Sends what waits, in order, until the socket is full again. */
static void flush_pending(struct h3_udp_worker *w)
{
    while (w->head != NULL) {
        struct pending *p = w->head;
        if (corral_udp_send(w->sock, &p->msg, 1) == 0) {
            /* -EBADF: a reload took the socket; what waits is lost. */
            if (corral_udp_wait_writable(w->sock) == 0)
                return;
        }
        w->head = p->next;
        if (w->head == NULL)
            w->tail = &w->head;
        w->pending_bytes -= p->msg.len;
        free(p);
    }
}

/* Keeps a copy of `msg` until the socket can take it, behind those
 * already waiting; beyond PENDING_MAX it is dropped (a lost packet). */
static void queue_pending(struct h3_udp_worker *w, const struct corral_udp_msg *msg)
{
    if (w->pending_bytes + msg->len > PENDING_MAX)
        return;
    struct pending *p = malloc(sizeof(*p) + msg->len);
    if (p == NULL)
        return;
    p->next = NULL;
    p->msg = *msg;
    memcpy(p->bytes, msg->data, msg->len);
    p->msg.data = p->bytes;
    bool first = w->head == NULL;
    *w->tail = p;
    w->tail = &p->next;
    w->pending_bytes += msg->len;
    if (first && corral_udp_wait_writable(w->sock) != 0)
        flush_pending(w); /* no loop watches it: drops what cannot go now */
}

/* Sends what a batch gathered, in order; what the socket cannot take
 * now waits with the rest. */
static void batch_flush(struct h3_udp_worker *w)
{
    size_t sent = w->head == NULL ? corral_udp_send(w->sock, w->batch, w->batch_count) : 0;
    for (size_t i = sent; i < w->batch_count; i++)
        queue_pending(w, &w->batch[i]);
    w->batch_count = w->batch_used = 0;
}

/* On the loop's deferred pass: what was gathered outside a read goes. */
static void batch_deferred(void *arg)
{
    struct h3_udp_worker *w = arg;
    w->flush_deferred = false;
    if (w->stopped) { /* on_stop sent the batch, and left the worker to be freed here */
        free(w);
        return;
    }
    batch_flush(w);
}

static void output(void *arg, const struct sockaddr *local, socklen_t local_len,
                   const struct sockaddr *peer, socklen_t peer_len, const uint8_t *data, size_t len,
                   size_t gso_segment)
{
    struct h3_udp_worker *w = arg;
    struct corral_udp_msg msg = {.data = (void *)data, .len = len, .peer_len = peer_len};
    if (peer_len > sizeof(msg.peer) || local_len > sizeof(msg.local))
        return;
    memcpy(&msg.peer, peer, peer_len);
    if (local != NULL && local_len > 0) {
        memcpy(&msg.local, local, local_len);
        msg.local_len = local_len;
    }
    if (gso_segment > 0 && gso_segment < len && gso_segment <= UINT16_MAX)
        msg.segment_size = (uint16_t)gso_segment;
    size_t datagrams = msg.segment_size > 0 ? (len + msg.segment_size - 1) / msg.segment_size : 1;
    atomic_fetch_add_explicit(&w->site->counters[w->index].v[H3_DATAGRAMS_OUT], datagrams,
                              memory_order_relaxed);
    if (!w->stopped && len <= BATCH_BYTES) {
        if (w->batch_count == BATCH_MSGS || w->batch_used + len > BATCH_BYTES)
            batch_flush(w);
        memcpy(w->batch_bytes + w->batch_used, data, len);
        msg.data = w->batch_bytes + w->batch_used;
        w->batch_used += len;
        w->batch[w->batch_count++] = msg;
        if (w->batching || w->flush_deferred)
            return;
        corral_loop *loop = corral_worker_loop(corral_udp_socket_worker(w->sock));
        if (corral_loop_defer(loop, batch_deferred, w) == 0)
            w->flush_deferred = true;
        else
            batch_flush(w); /* no memory to defer: at once */
        return;
    }
    if (w->head == NULL && corral_udp_send(w->sock, &msg, 1) == 1)
        return;
    queue_pending(w, &msg);
}

/* The worker's endpoint, made on its first datagram. */
static struct h3_udp_worker *worker_of(corral_udp_socket *sock)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    corral_worker *worker = corral_udp_socket_worker(sock);
    unsigned index = corral_worker_index(worker);
    if (index >= site->worker_count)
        return NULL;
    struct h3_udp_worker *w = site->workers[index];
    if (w != NULL)
        return w->ep != NULL ? w : NULL;
    /* A stopping worker takes no new connection: no endpoint for it. */
    if (site->counters[index].stopped || corral_worker_stopping(worker))
        return NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->site = site;
    w->index = index;
    w->sock = sock;
    w->tail = &w->head;
    struct h3_endpoint_config config = site->config;
    config.loop = corral_worker_loop(worker);
    config.worker = worker;
    config.worker_index = (uint16_t)index;
    config.replay_worker = index;
    config.output = output;
    config.output_arg = w;
    /* A failure is logged once; the worker drops its datagrams after it. */
    if (h3_endpoint_new(&config, &w->ep) != 0)
        w->ep = NULL;
    /* Whole before a newer generation's worker can see it. */
    pthread_mutex_lock(&chain_lock);
    site->workers[index] = w;
    pthread_mutex_unlock(&chain_lock);
    return w->ep != NULL ? w : NULL;
}

/* The endpoint's facts, copied for readers on other threads after each
 * input (a handshake completes, a connection opens, on an input; one that
 * closes on a timer is seen at the next). */
static void publish(struct h3_udp_worker *w, unsigned index)
{
    struct counters *c = &w->site->counters[index];
    uint64_t now[H3_COUNTER_COUNT];
    h3_endpoint_counters(w->ep, now);
    for (unsigned i = H3_FIRST_ENDPOINT_COUNTER; i < H3_COUNTER_COUNT; i++)
        atomic_store_explicit(&c->v[i], now[i], memory_order_relaxed);
    corral_udp_publish_load(w->sock, now[H3_CONNECTIONS]); /* what eBPF's balanced weighs */
}

/* On the owner's loop: the datagram as if its own socket had read it. */
static void handoff_run(void *arg)
{
    struct handoff *h = arg;
    struct h3_udp_worker *w = worker_of(h->owner);
    if (w != NULL) {
        unsigned index = w->index;
        struct counters *c = &h->site->counters[index];
        atomic_fetch_add_explicit(&c->v[H3_HANDED_IN], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->v[H3_HANDOFF_NS], corral_monotonic_ns() - h->posted_ns,
                                  memory_order_relaxed);
        h3_endpoint_input(w->ep, (const struct sockaddr *)&h->msg.local, h->msg.local_len,
                          (const struct sockaddr *)&h->msg.peer, h->msg.peer_len, h->bytes,
                          h->msg.len, h->msg.ecn);
        publish(w, index);
    } /* else the owner's loop has ended: the datagram is lost */
    free(h);
}

/* Passes one datagram to worker `owner`'s endpoint.  Returns false when
 * it cannot (then it is dropped: QUIC sends it again). */
static bool hand_off(corral_udp_socket *sock, unsigned owner, const struct corral_udp_msg *m,
                     const uint8_t *data, size_t len)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    corral_udp_socket *to = corral_udp_socket_of(corral_udp_socket_udp(sock), owner);
    if (to == NULL)
        return false;
    struct handoff *h = malloc(sizeof(*h) + len);
    if (h == NULL)
        return false;
    h->site = site;
    h->owner = to;
    h->msg = *m;
    h->msg.data = h->bytes;
    h->msg.len = len;
    h->msg.segment_size = 0;
    memcpy(h->bytes, data, len);
    h->posted_ns = corral_monotonic_ns();
    if (corral_worker_post(corral_udp_socket_worker(to), handoff_run, h) != 0) {
        free(h);
        return false;
    }
    unsigned self = corral_worker_index(corral_udp_socket_worker(sock));
    atomic_fetch_add_explicit(&site->counters[self].v[H3_HANDED_OFF], 1, memory_order_relaxed);
    return true;
}

/* Passes a datagram of an older generation's connection (its ID's tag is
 * `tag`) to the worker of that generation that the ID names.  Returns
 * false when no running generation before this one has that tag, or its
 * worker has stopped: the datagram is then this worker's (a stateless
 * reset answers it). */
static bool hand_to_older(struct h3_udp_worker *w, unsigned self, int tag,
                          const struct corral_udp_msg *m, const uint8_t *data, size_t len)
{
    int owner = h3_endpoint_packet_worker(data, len);
    if (owner < 0)
        return false;
    bool sent = false;
    pthread_mutex_lock(&chain_lock);
    struct h3_udp_site *old = w->site->older;
    while (old != NULL && old->generation != (uint8_t)tag)
        old = old->older;
    struct h3_udp_worker *to =
        old != NULL && (unsigned)owner < old->worker_count ? old->workers[owner] : NULL;
    /* Under the lock: its on_stop cannot run meanwhile, so its loop is
     * there to take the post (one posted before on_stop is run when the
     * loop is freed, and finds it stopped). */
    if (to != NULL && to->ep != NULL && !old->counters[owner].stopped) {
        struct handoff *h = malloc(sizeof(*h) + len);
        if (h != NULL) {
            h->site = old;
            h->owner = to->sock;
            h->msg = *m;
            h->msg.data = h->bytes;
            h->msg.len = len;
            h->msg.segment_size = 0;
            memcpy(h->bytes, data, len);
            if (corral_worker_post(corral_udp_socket_worker(to->sock), handoff_run, h) == 0)
                sent = true;
            else
                free(h);
        }
    }
    pthread_mutex_unlock(&chain_lock);
    if (sent)
        atomic_fetch_add_explicit(&w->site->counters[self].v[H3_HANDED_TO_OLDER], 1,
                                  memory_order_relaxed);
    return sent || to != NULL; /* an older connection's: never this worker's */
}

static void on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    struct h3_udp_worker *w = worker_of(sock);
    if (w == NULL)
        return;
    unsigned self = corral_worker_index(corral_udp_socket_worker(sock));
    uint64_t datagrams = 0;
    w->batching = true;
    for (size_t i = 0; i < count; i++) {
        const struct corral_udp_msg *m = &msgs[i];
        size_t step = m->segment_size > 0 ? m->segment_size : m->len;
        /* ngtcp2 asserts on an empty datagram: it never reaches it. */
        for (size_t off = 0; step > 0 && off < m->len; off += step) {
            size_t len = m->len - off < step ? m->len - off : step;
            const uint8_t *data = (const uint8_t *)m->data + off;
            datagrams++;
            int tag = h3_endpoint_packet_generation(data, len);
            if (tag >= 0 && (uint8_t)tag != w->site->generation &&
                hand_to_older(w, self, tag, m, data, len))
                continue;
            int owner = h3_endpoint_packet_worker(data, len);
            if (owner >= 0 && (unsigned)owner != self && (unsigned)owner < w->site->worker_count) {
                hand_off(sock, (unsigned)owner, m, data, len);
                continue;
            }
            h3_endpoint_input(w->ep, (const struct sockaddr *)&m->local, m->local_len,
                              (const struct sockaddr *)&m->peer, m->peer_len, data, len, m->ecn);
        }
    }
    w->batching = false;
    batch_flush(w);
    atomic_fetch_add_explicit(&w->site->counters[self].v[H3_DATAGRAMS_IN], datagrams,
                              memory_order_relaxed);
    publish(w, self);
}

static void on_writable(corral_udp_socket *sock)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    unsigned index = corral_worker_index(corral_udp_socket_worker(sock));
    if (index < site->worker_count && site->workers[index] != NULL)
        flush_pending(site->workers[index]);
}

/* A drain's end: the worker may stop. */
static void drained(void *arg)
{
    struct h3_udp_worker *w = arg;
    if (!w->held)
        return;
    w->held = false;
    corral_worker_release(corral_udp_socket_worker(w->sock));
}

/* A graceful stop or a reload began: the endpoint sends GOAWAY and
 * finishes its requests, holding the worker until its connections are
 * gone (the grace bounds it).  One whose datagrams no one will read any
 * more closes them at once. */
static void on_stopping(corral_udp_socket *sock)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    unsigned index = corral_worker_index(corral_udp_socket_worker(sock));
    if (index >= site->worker_count || site->workers[index] == NULL ||
        site->workers[index]->ep == NULL)
        return;
    struct h3_udp_worker *w = site->workers[index];
    if (site->close_on_stop) {
        h3_endpoint_close(w->ep);
    } else {
        corral_worker_hold(corral_udp_socket_worker(sock));
        w->held = true;
        h3_endpoint_drain(w->ep, drained, w);
    }
    publish(w, index);
}

/* The worker's loop ended: the connections left are sent their
 * CONNECTION_CLOSE and end, and its endpoint goes. */
static void on_stop(corral_udp_socket *sock)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    unsigned index = corral_worker_index(corral_udp_socket_worker(sock));
    if (index >= site->worker_count)
        return;
    pthread_mutex_lock(&chain_lock);
    site->counters[index].stopped = true;
    struct h3_udp_worker *w = site->workers[index];
    site->workers[index] = NULL;
    pthread_mutex_unlock(&chain_lock);
    atomic_store_explicit(&site->counters[index].v[H3_CONNECTIONS], 0, memory_order_relaxed);
    if (w == NULL)
        return;
    if (w->ep != NULL) {
        /* The grace is over (or there was none): the connections still
         * open are told, rather than left to their idle timeout. */
        h3_endpoint_close(w->ep);
        h3_endpoint_free(w->ep);
    }
    batch_flush(w); /* the closes, and what waited for a deferred pass */
    while (w->head != NULL) {
        struct pending *p = w->head;
        w->head = p->next;
        free(p);
    }
    w->stopped = true;
    if (!w->flush_deferred) /* else batch_deferred() frees it, as the loop ends */
        free(w);
}

int h3_udp_site_stats(const struct h3_udp_site *site, unsigned index, struct h3_udp_stats *out)
{
    if (index >= site->worker_count)
        return -EINVAL;
    const struct counters *c = &site->counters[index];
    for (unsigned i = 0; i < H3_COUNTER_COUNT; i++)
        out->v[i] = atomic_load_explicit(&c->v[i], memory_order_relaxed);
    return 0;
}

const struct corral_udp_handler h3_udp_handler = {
    .on_recv = on_recv,
    .on_writable = on_writable,
    .on_stop = on_stop,
    .on_stopping = on_stopping,
};
