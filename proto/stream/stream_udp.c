/*
 * stream_udp.c: the stream proxy's UDP sessions, as nginx's: a session is
 * one client address on one worker, with a socket connected to the
 * server its upstream's balancing picked.  The client's datagrams go to
 * the server; the server's go back to the client from the address the
 * client wrote to.  A session ends when the server has sent the answers
 * it owes (proxy_responses per client datagram), when proxy_timeout
 * passes without a datagram either way, or when the server refuses its
 * datagrams; proxy_requests ends its taking of client datagrams, so that
 * the next one from that client begins a new session.
 */
#include "proto/stream/stream.h"

#include "proto/counter.h"
#include "proto/upstream/balance.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Buckets of a worker's session table, by client address: a power of two,
 * for STREAM_UDP_SESSIONS_MAX sessions at most. */
#define BUCKETS 1024
/* Datagrams read from a server's socket per readiness event. */
#define SERVER_READS 32
/* The largest datagram a server may send: UDP's own bound. */
#define DATAGRAM_MAX 65535

struct udp_session {
    struct stream_udp_worker *w;
    struct udp_session *bucket_next; /* in the table while it takes client datagrams */
    struct udp_session *prev, *next; /* every session of the worker */
    bool in_table;
    struct sockaddr_storage client, local; /* local: where the client wrote to */
    socklen_t client_len, local_len;
    unsigned ifindex;
    int fd; /* connected to the server */
    corral_io *io;
    corral_timer *timer;
    struct proxy_upstream *upstream;
    struct upstream_worker *uw;
    unsigned server;
    unsigned requests, responses;
    uint64_t bytes_in, bytes_out; /* from the client, to the client */
    uint64_t began_ns;
};

struct stream_udp_worker {
    struct stream_site *site;
    corral_udp_socket *sock;
    corral_loop *loop;
    struct stream_stats *stats;
    struct udp_session *buckets[BUCKETS];
    struct udp_session *all;
    unsigned count;
    char buffer[DATAGRAM_MAX]; /* a server's datagram, on its way to the client */
};

static uint32_t fnv1a(uint32_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* FNV-1a over the address and port (what same_address() compares): the
 * table is the worker's own, and a client picks only its own address, so
 * no keyed hash is needed against collisions aimed at one bucket beyond
 * its own. */
static uint32_t address_hash(const struct sockaddr_storage *addr)
{
    uint32_t h = 2166136261u;
    if (addr->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        h = fnv1a(h, &a->sin6_port, sizeof(a->sin6_port));
        return fnv1a(h, &a->sin6_addr, sizeof(a->sin6_addr));
    }
    const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
    h = fnv1a(h, &a->sin_port, sizeof(a->sin_port));
    return fnv1a(h, &a->sin_addr, sizeof(a->sin_addr));
}

static bool same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
}

static struct udp_session **bucket_of(struct stream_udp_worker *w,
                                      const struct sockaddr_storage *client)
{
    return &w->buckets[address_hash(client) & (BUCKETS - 1)];
}

static struct udp_session *session_find(struct stream_udp_worker *w,
                                        const struct sockaddr_storage *client)
{
    for (struct udp_session *s = *bucket_of(w, client); s != NULL; s = s->bucket_next)
        if (same_address(&s->client, client))
            return s;
    return NULL;
}

/* The session takes no more client datagrams: the next from its client
 * begins another. */
static void session_unlist(struct udp_session *s)
{
    if (!s->in_table)
        return;
    struct udp_session **p = bucket_of(s->w, &s->client);
    while (*p != s)
        p = &(*p)->bucket_next;
    *p = s->bucket_next;
    s->in_table = false;
}

/* Whether the server has sent every answer the session expects. */
static bool answered(const struct udp_session *s)
{
    unsigned expected = s->w->site->conf->responses;
    return expected == STREAM_UNLIMITED ||
           (uint64_t)s->responses >= (uint64_t)expected * s->requests;
}

/* Whether the session has ended well: proxy_responses set, and every
 * answer it owes sent (nginx ends it then, whatever proxy_requests). */
static bool done(const struct udp_session *s)
{
    return s->w->site->conf->responses != STREAM_UNLIMITED && answered(s);
}

static void session_log(const struct udp_session *s, unsigned status)
{
    char remote[INET6_ADDRSTRLEN];
    struct vars_stream facts = {
        .peer = (const struct sockaddr *)&s->client,
        .local = s->local_len > 0 ? (const struct sockaddr *)&s->local : NULL,
        .upstream_addr = s->upstream != NULL ? s->upstream->servers[s->server].address : NULL,
        .bytes_received = s->bytes_in,
        .upstream_bytes_sent = s->bytes_in,
        .upstream_bytes_received = s->bytes_out,
        .session_ns = corral_monotonic_ns() - s->began_ns,
    };
    struct vars_ctx ctx = {
        .remote_addr = stream_addr_text(&s->client, remote, sizeof(remote)) == 0 ? remote : "",
        .status = status,
        .bytes_sent = s->bytes_out,
        .stream = &facts,
    };
    access_log_write_ctx(s->w->site->log, corral_udp_socket_worker(s->w->sock), &ctx);
}

/* Ends the session with nginx's stream status (200; 502: the server
 * refused, or did not answer in time what it owed), logged. */
static void session_end(struct udp_session *s, unsigned status)
{
    struct stream_udp_worker *w = s->w;
    if (w->site->log != NULL)
        session_log(s, status);
    stream_stats_end(w->stats, status);
    session_unlist(s);
    assert((s->prev == NULL) == (w->all == s)); /* the list's head has no prev */
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        w->all = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    w->count--;
    if (s->io != NULL)
        corral_io_free(s->io);
    corral_timer_free(s->timer);
    if (s->fd != -1)
        close(s->fd);
    if (s->upstream != NULL) {
        upstream_count_open(s->uw, s->server, -1);
        upstream_server_release(s->upstream, s->uw, s->server);
    }
    counter_add(&w->stats->bytes_in, s->bytes_in);
    counter_add(&w->stats->bytes_out, s->bytes_out);
    free(s);
}

static void session_on_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    struct udp_session *s = arg;
    if (answered(s)) {
        session_end(s, 200); /* a timed out session that owes nothing ended well */
        return;
    }
    atomic_fetch_add_explicit(&s->uw->errors[PROXY_ERROR_TIMEOUT], 1, memory_order_relaxed);
    session_end(s, 502);
}

/* The server refused the session's datagrams (an ICMP port unreachable):
 * a failure of that server. */
static void session_refused(struct udp_session *s)
{
    atomic_fetch_add_explicit(&s->uw->errors[PROXY_ERROR_CONNECT], 1, memory_order_relaxed);
    upstream_server_failed(s->upstream, s->uw, s->server, corral_loop_now(s->w->loop));
    session_end(s, 502);
}

static void session_on_server(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    struct udp_session *s = arg;
    struct stream_udp_worker *w = s->w;
    for (int i = 0; i < SERVER_READS; i++) {
        ssize_t n = recv(s->fd, w->buffer, sizeof(w->buffer), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == ECONNREFUSED)
                session_refused(s);
            return; /* EAGAIN: all read; another error: the timeout ends it */
        }
        struct corral_udp_msg msg = {
            .data = w->buffer,
            .len = (size_t)n,
            .peer_len = s->client_len,
            .local_len = s->local_len,
            .ifindex = s->ifindex,
        };
        memcpy(&msg.peer, &s->client, s->client_len);
        memcpy(&msg.local, &s->local, s->local_len);
        /* A full socket drops the datagram, as a full network would. */
        if (corral_udp_send(w->sock, &msg, 1) == 1)
            s->bytes_out += (size_t)n;
        else
            counter_inc(&w->stats->udp_dropped_out);
        s->responses++;
        corral_timer_start(s->timer, w->site->conf->timeout_ms);
        if (done(s)) {
            session_end(s, 200);
            return;
        }
    }
}

/* The upstream a new session goes to: the site's, or its route's pick
 * for the client's address. */
static struct proxy_upstream *session_upstream(const struct stream_site *site,
                                               const struct sockaddr_storage *client)
{
    if (site->route == NULL)
        return site->upstream;
    char text[INET6_ADDRSTRLEN] = "";
    if (site->route->source == STREAM_VAR_REMOTE_ADDR)
        (void)stream_addr_text(client, text, sizeof(text));
    return stream_route_pick(site->route, text, strlen(text));
}

/* Opens the session's socket to a server of its upstream: the next one
 * the balancing gives while a socket cannot be made.  Returns 0, or -1
 * when no server could be had. */
static int session_connect(struct udp_session *s)
{
    struct stream_udp_worker *w = s->w;
    struct proxy_upstream *up = session_upstream(w->site, &s->client);
    if (up == NULL)
        return -1;
    struct upstream_worker *uw = upstream_worker_of(up, corral_udp_socket_worker(w->sock));
    uint32_t hash = 0;
    if (up->balance == PROXY_BALANCE_IP_HASH || up->balance == PROXY_BALANCE_HASH) {
        char text[INET6_ADDRSTRLEN];
        hash = balance_key_hash(NULL, NULL,
                                stream_addr_text(&s->client, text, sizeof(text)) == 0 ? text : "");
    }
    struct upstream_tried tried = {0};
    uint64_t now = corral_loop_now(w->loop);
    for (;;) {
        int server = balance_pick_server(up, uw, &tried, hash, now);
        if (server < 0)
            return -1;
        upstream_tried_add(&tried, (size_t)server);
        if (!upstream_server_acquire(up, uw, (unsigned)server))
            continue;
        const struct upstream_server *srv = &up->servers[server];
        int fd = socket(srv->addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd != -1 && connect(fd, (const struct sockaddr *)&srv->addr, srv->addrlen) == 0) {
            s->fd = fd;
            s->upstream = up;
            s->uw = uw;
            s->server = (unsigned)server;
            upstream_count_open(uw, s->server, 1);
            return 0;
        }
        int err = errno;
        if (fd != -1)
            close(fd);
        upstream_server_release(up, uw, (unsigned)server);
        atomic_fetch_add_explicit(&uw->errors[PROXY_ERROR_CONNECT], 1, memory_order_relaxed);
        corral_log(CORRAL_LOG_ERROR, "stream udp: connecting to %s: %s", srv->address,
                   strerror(err));
        if (err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS)
            return -1; /* this process's shortage: another server would fare no better */
        upstream_server_failed(up, uw, (unsigned)server, now);
    }
}

/* A datagram from a client with no session: one is begun, unless the
 * rules deny the client (logged, 403) or none can be had. */
static struct udp_session *session_begin(struct stream_udp_worker *w,
                                         const struct corral_udp_msg *msg)
{
    const struct stream_conf *conf = w->site->conf;
    if (w->count >= STREAM_UDP_SESSIONS_MAX) {
        counter_inc(&w->stats->udp_dropped_in);
        return NULL;
    }
    struct udp_session *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        counter_inc(&w->stats->udp_dropped_in);
        return NULL;
    }
    s->w = w;
    s->fd = -1;
    memcpy(&s->client, &msg->peer, msg->peer_len);
    s->client_len = msg->peer_len;
    memcpy(&s->local, &msg->local, msg->local_len);
    s->local_len = msg->local_len;
    s->ifindex = msg->ifindex;
    s->began_ns = corral_monotonic_ns();
    s->next = w->all;
    if (w->all != NULL)
        w->all->prev = s;
    w->all = s;
    w->count++;
    counter_inc(&w->stats->sessions);
    if (corral_timer_new(w->loop, session_on_timer, s, &s->timer) != 0) {
        counter_inc(&w->stats->udp_dropped_in);
        s->timer = NULL;
        session_end(s, 500);
        return NULL;
    }
    if (conf->access.rule_count > 0 &&
        !access_rules_allow(&conf->access, (const struct sockaddr *)&s->client)) {
        counter_inc(&w->stats->denied);
        session_end(s, 403);
        return NULL;
    }
    if (session_connect(s) != 0) {
        counter_inc(&w->stats->failed);
        session_end(s, 502);
        return NULL;
    }
    if (corral_io_new(w->loop, s->fd, CORRAL_READABLE, session_on_server, s, &s->io) != 0) {
        s->io = NULL;
        session_end(s, 500);
        return NULL;
    }
    struct udp_session **bucket = bucket_of(w, &s->client);
    s->bucket_next = *bucket;
    *bucket = s;
    s->in_table = true;
    return s;
}

/* The worker's sessions of the site, made on its first datagram. */
static struct stream_udp_worker *worker_of(corral_udp_socket *sock)
{
    struct stream_site *site = corral_udp_data(sock);
    unsigned index = corral_worker_index(corral_udp_socket_worker(sock));
    struct stream_udp_worker *w = site->udp_workers[index];
    if (w != NULL)
        return w;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->site = site;
    w->sock = sock;
    w->loop = corral_worker_loop(corral_udp_socket_worker(sock));
    w->stats = &site->stats[index];
    site->udp_workers[index] = w;
    return w;
}

static void udp_on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    struct stream_udp_worker *w = worker_of(sock);
    if (w == NULL)
        return; /* out of memory: the datagrams are lost, as on a full socket */
    const struct stream_conf *conf = w->site->conf;
    for (size_t i = 0; i < count; i++) {
        const struct corral_udp_msg *msg = &msgs[i];
        struct udp_session *s = session_find(w, &msg->peer);
        if (s == NULL && (s = session_begin(w, msg)) == NULL)
            continue;
        /* proxy_requests counts every datagram the session took, sent or
         * dropped on a full socket, as nginx counts what it read. */
        s->requests++;
        if (conf->requests != 0 && s->requests >= conf->requests)
            session_unlist(s);
        ssize_t sent = send(s->fd, msg->data, msg->len, MSG_DONTWAIT);
        if (sent >= 0) {
            s->bytes_in += msg->len;
        } else if (errno == ECONNREFUSED) {
            session_refused(s);
            continue;
        } else {
            counter_inc(&w->stats->udp_dropped_in);
        }
        corral_timer_start(s->timer, conf->timeout_ms);
        if (done(s)) /* proxy_responses 0: nothing is owed */
            session_end(s, 200);
    }
}

/* The worker's loop ended: its sessions end (logged), and their state
 * goes. */
static void udp_on_stop(corral_udp_socket *sock)
{
    struct stream_site *site = corral_udp_data(sock);
    unsigned index = corral_worker_index(corral_udp_socket_worker(sock));
    struct stream_udp_worker *w = site->udp_workers[index];
    if (w == NULL)
        return;
    while (w->all != NULL) {
        struct udp_session *first = w->all;
        assert(first->w == w);
        session_end(first, answered(first) ? 200 : 502);
    }
    free(w);
    site->udp_workers[index] = NULL;
}

const struct corral_udp_handler stream_udp_handler = {
    .on_recv = udp_on_recv,
    .on_stop = udp_on_stop,
};
