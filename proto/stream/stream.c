/*
 * stream.c: one stream session: a client connection, its PROXY header and
 * allow/deny, the connection to a server (the next one on a failed
 * connect, as proxy_next_upstream allows), then both directions moved
 * until each has ended, a half-close passed on as a half-close and a
 * reset as a reset.
 */
#include "proto/stream/stream.h"

#include "proto/counter.h"
#include "proto/http/proxy_protocol.h"
#include "proto/tls/tls.h"
#include "proto/tls/tls_preread.h"
#include "proto/upstream/balance.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A direction starts by copying and splices once this much has gone
 * through it: a pipe pair costs system calls of its own (and two
 * descriptors while it lasts), which a short exchange does not repay, as
 * HAProxy splices only past its first buffer. */
#define SPLICE_AFTER (64 * 1024)

/* A tls listen's client: the read that ends its handshake goes on, and
 * keeps what came with it (up to the loop's 64 KB read) until the server
 * is connected; its watermark is at least this much meanwhile, for the
 * kept bytes to be delivered then. */
#define TLS_KEPT_MAX (128 * 1024)

/* A direction: client to server ("up") or server to client ("down"). */
enum { UP, DOWN };

enum dir_mode {
    DIR_IDLE,   /* not started: the server is not connected yet */
    DIR_SPLICE, /* a splice moves it */
    DIR_COPY,   /* on_data writes what it reads to the other side */
    DIR_DONE,   /* its source ended and the end was passed on */
};

struct stream_session {
    struct stream_site *site;
    struct proxy_upstream *upstream; /* the site's, or the one its route picked */
    /* tls_preread: the ClientHello's parse while it comes (NULL once
     * read), and how many of the client's bytes it was fed. */
    struct tls_preread *preread;
    size_t preread_fed;
    char *preread_name, *preread_alpn; /* what it read, for the log: one allocation */
    const corral_worker *worker;
    /* limit_conn's counts of this session: the listener's server's, and
     * the one its SNI name picked (if another), each with its zone. */
    struct {
        struct limit_zone *zone;
        struct limit_node *node;
    } limits[2];
    struct stream_stats *stats;
    corral_conn *client;
    struct upstream_conn uc; /* uc.conn: the server's connection, NULL between attempts */
    struct upstream_tried tried;
    unsigned tries;
    bool server_held; /* upstream_server_acquire() counts uc.server */
    bool connected;
    bool header_pending; /* the client's PROXY header is still to come */
    bool handshaking;    /* a tls listen's handshake is still to end */
    bool client_ended;   /* its close_notify came with the handshake, before a server */
    bool wide;           /* the client's watermark is TLS_KEPT_MAX until its first copy */
    /* Inside the TLS layer's end-of-handshake callback, which must not
     * see its connection freed under it: an abort then is done by the
     * client's deadline (client_on_deadline()), with this error. */
    bool in_established;
    int deferred_error;
    /* A tls listen's facts for the log, taken while the client's TLS
     * lasts: OpenSSL's static names, and the SNI name (malloc'd). */
    const char *tls_protocol, *tls_cipher;
    char *tls_name;
    bool client_open, server_open;
    bool failed; /* ended before both directions did */
    /* For the log line: nginx's stream statuses (200; 400 a bad PROXY
     * header; 403 denied; 500 out of memory; 502 no server reached),
     * and when the session began (monotonic ns; 0: no log). */
    unsigned status;
    uint64_t began_ns;
    uint64_t started_ms; /* loop clock: proxy_next_upstream_timeout counts from here */
    uint32_t hash;
    enum dir_mode dir[2];
    uint64_t bytes[2];
    struct sockaddr_storage client_addr, local_addr;
    socklen_t client_len, local_len;
};

static const struct corral_conn_handler server_handler;

static corral_conn *dir_from(const struct stream_session *s, int d)
{
    return d == UP ? s->client : s->uc.conn;
}

static corral_conn *dir_to(const struct stream_session *s, int d)
{
    return d == UP ? s->uc.conn : s->client;
}

static int client_key_text(const struct stream_session *s, char *buf, size_t len);

/* The session's line in its access log. */
static void session_log(struct stream_session *s)
{
    if (s->site->log == NULL)
        return;
    char remote[INET6_ADDRSTRLEN];
    struct vars_stream facts = {
        .peer =
            s->client_addr.ss_family != AF_UNSPEC ? (const struct sockaddr *)&s->client_addr : NULL,
        .local =
            s->local_addr.ss_family != AF_UNSPEC ? (const struct sockaddr *)&s->local_addr : NULL,
        .upstream_addr = s->tries > 0 ? s->uc.upstream->servers[s->uc.server].address : NULL,
        .bytes_received = s->bytes[UP],
        .upstream_bytes_sent = s->bytes[UP],
        .upstream_bytes_received = s->bytes[DOWN],
        .session_ns = corral_monotonic_ns() - s->began_ns,
        .server_name = s->preread_name,
        .alpn = s->preread_alpn,
        .tls_protocol = s->tls_protocol,
        .tls_cipher = s->tls_cipher,
        .tls_server_name = s->tls_name,
    };
    struct vars_ctx ctx = {
        .remote_addr = client_key_text(s, remote, sizeof(remote)) == 0 ? remote : "",
        .status = s->status,
        .bytes_sent = s->bytes[DOWN],
        .stream = &facts,
    };
    access_log_write_ctx(s->site->log, s->worker, &ctx);
}

static void session_free_if_done(struct stream_session *s)
{
    if (s->client_open || s->server_open)
        return;
    if (s->began_ns != 0)
        session_log(s);
    for (size_t i = 0; i < 2; i++)
        if (s->limits[i].node != NULL)
            limit_zone_conn_end(s->limits[i].zone, s->limits[i].node);
    free(s->preread_name);
    free(s->tls_name);
    free(s->preread);
    counter_add(&s->stats->bytes_in, s->bytes[UP]);
    counter_add(&s->stats->bytes_out, s->bytes[DOWN]);
    stream_stats_end(s->stats, s->status);
    free(s);
}

/* Ends the session at once: both connections reset with `error` (a
 * negative errno), or closed with a FIN for 0. */
static void session_abort(struct stream_session *s, int error, unsigned status)
{
    if (s->status == 200)
        s->status = status;
    s->failed = true;
    if (s->client_open && s->in_established) {
        s->deferred_error = error;
        corral_conn_set_deadline(s->client, corral_loop_now(corral_conn_loop(s->client)));
    } else if (s->client_open) {
        corral_conn_abort(s->client, error);
    }
    if (s->server_open)
        corral_conn_abort(s->uc.conn, error);
}

/* Both directions have ended: the connections close gracefully. */
static void session_maybe_end(struct stream_session *s)
{
    if (s->dir[UP] != DIR_DONE || s->dir[DOWN] != DIR_DONE)
        return;
    if (s->client_open)
        corral_conn_close(s->client);
    if (s->server_open)
        corral_conn_close(s->uc.conn);
}

/* Direction `d`'s source ended: its destination is half-closed. */
static void dir_end(struct stream_session *s, int d)
{
    if (s->dir[d] == DIR_DONE)
        return;
    s->dir[d] = DIR_DONE;
    corral_conn *to = dir_to(s, d);
    if (to != NULL && (d == UP ? s->server_open : s->client_open))
        corral_conn_shutdown(to);
    session_maybe_end(s);
}

static void on_spliced(corral_conn *from, corral_conn *to, uint64_t moved, int error, void *arg)
{
    (void)from;
    (void)to;
    struct stream_session *s = arg;
    int d = from == s->client ? UP : DOWN;
    s->bytes[d] += moved;
    if (s->dir[d] != DIR_SPLICE)
        return;
    if (error == 0) {
        dir_end(s, d); /* the source's end of stream */
        return;
    }
    /* One of the two is closed already: its on_close passes the error on
     * to the other. */
    s->dir[d] = DIR_IDLE;
}

/* Has a splice move direction `d` from now on: true, or false when
 * either side cannot (a layered transport, or the loop's pipes all in
 * use) and the bytes are copied. */
static bool dir_splice(struct stream_session *s, int d)
{
    if (corral_conn_splice(dir_from(s, d), dir_to(s, d), UINT64_MAX, on_spliced, s) != 0)
        return false;
    s->dir[d] = DIR_SPLICE;
    counter_inc(&s->stats->spliced);
    return true;
}

/* Starts moving direction `d`: by copying at first (SPLICE_AFTER), then
 * by splice where both sides allow (not a layered transport, a pipe
 * free in the loop's pool). */
static void dir_start(struct stream_session *s, int d)
{
    corral_conn *from = dir_from(s, d), *to = dir_to(s, d);
    if (s->dir[d] != DIR_IDLE)
        return;
    (void)to;
    if (s->bytes[d] >= SPLICE_AFTER && corral_conn_kept_input(from) == 0 && dir_splice(s, d))
        return;
    /* Bytes already read go first, by copying; the splice is tried again
     * once they are written (copy_data()). */
    s->dir[d] = DIR_COPY;
    counter_inc(&s->stats->copied);
    corral_conn_resume_read(from);
}

/* Direction `d` in copy mode: writes what its source read, then, unless
 * the destination is backed up, and once SPLICE_AFTER bytes went, lets a
 * splice move the rest (from on_data, a splice starts once on_data has
 * returned all it was given). */
static size_t copy_data(struct stream_session *s, int d, const char *data, size_t len)
{
    corral_conn *from = dir_from(s, d), *to = dir_to(s, d);
    if (d == UP && s->wide) {
        /* What the handshake's read kept is being delivered: the
         * watermark goes back to proxy_buffer_size. */
        s->wide = false;
        corral_conn_set_watermarks(from, s->site->conf->buffer_size,
                                   s->site->conf->buffer_size / 4);
    }
    corral_conn_write(to, data, len);
    s->bytes[d] += len;
    if (corral_conn_backed_up(to))
        corral_conn_pause_read(from);
    else if (s->bytes[d] >= SPLICE_AFTER)
        (void)dir_splice(s, d);
    return len;
}

/* -------------------------------------------------------------- the server */

int stream_addr_text(const struct sockaddr_storage *addr, char *buf, size_t len)
{
    const struct sockaddr *sa = (const struct sockaddr *)addr;
    const void *bytes = sa->sa_family == AF_INET6
                            ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                            : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return -1;
    return inet_ntop(sa->sa_family, bytes, buf, (socklen_t)len) != NULL ? 0 : -1;
}

static int client_key_text(const struct stream_session *s, char *buf, size_t len)
{
    return stream_addr_text(&s->client_addr, buf, len);
}

/* Whether another server may be tried after a failed attempt. */
static bool may_retry(const struct stream_session *s, uint64_t now)
{
    const struct stream_conf *conf = s->site->conf;
    if (!conf->next_upstream || !s->client_open)
        return false;
    if (conf->next_upstream_tries != 0 && s->tries >= conf->next_upstream_tries)
        return false;
    return conf->next_upstream_timeout_ms == 0 ||
           now - s->started_ms < conf->next_upstream_timeout_ms;
}

/* Opens a connection to the next server; with none left, ends the
 * session. */
static void connect_next(struct stream_session *s)
{
    struct proxy_upstream *up = s->upstream;
    corral_loop *loop = corral_conn_loop(s->client);
    struct upstream_worker *worker = upstream_worker_of(up, corral_conn_worker(s->client));
    for (;;) {
        uint64_t now = corral_loop_now(loop);
        if (s->tries > 0 && !may_retry(s, now))
            break;
        int server = balance_pick_server(up, worker, &s->tried, s->hash, now);
        if (server < 0)
            break;
        upstream_tried_add(&s->tried, (size_t)server);
        if (!upstream_server_acquire(up, worker, (unsigned)server))
            continue; /* its max_conns filled meanwhile */
        s->tries++;
        s->uc =
            (struct upstream_conn){.upstream = up, .worker = worker, .server = (unsigned)server};
        int err = upstream_connect(&s->uc, loop, &server_handler, s);
        if (err != 0) {
            upstream_server_release(up, worker, (unsigned)server);
            s->uc.conn = NULL;
            atomic_fetch_add_explicit(&worker->errors[PROXY_ERROR_CONNECT], 1,
                                      memory_order_relaxed);
            if (upstream_local_error(err)) {
                corral_log(CORRAL_LOG_ERROR, "stream: connecting to %s: %s",
                           up->servers[server].address, strerror(-err));
                break;
            }
            upstream_server_failed(up, worker, (unsigned)server, now);
            continue;
        }
        s->server_held = true;
        s->server_open = true;
        corral_conn_set_deadline(s->uc.conn, now + s->site->conf->connect_timeout_ms);
        return;
    }
    counter_inc(&s->stats->failed);
    session_abort(s, 0, 502);
}

static void server_on_open(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    const struct stream_conf *conf = s->site->conf;
    struct proxy_upstream *up = s->upstream;
    s->connected = true;
    corral_conn_set_deadline(conn, 0);
    unsigned version = conf->proxy_protocol ? 1 : up->proxy_protocol;
    if (version != 0 && s->local_addr.ss_family == AF_UNSPEC) {
        /* The address the client connected to: asked for only here. */
        s->local_len = sizeof(s->local_addr);
        if (getsockname(corral_conn_fd(s->client), (struct sockaddr *)&s->local_addr,
                        &s->local_len) != 0)
            s->local_addr.ss_family = AF_UNSPEC;
    }
    if (version != 0) {
        char header[PROXY_PROTOCOL_SEND_MAX];
        ssize_t n =
            proxy_protocol_encode(version, (const struct sockaddr *)&s->client_addr,
                                  (const struct sockaddr *)&s->local_addr, header, sizeof(header));
        int err = n < 0 ? (int)n : upstream_send_preamble(conn, header, (size_t)n);
        if (err != 0) {
            corral_conn_abort(conn, err);
            return;
        }
    }
    corral_conn_set_watermarks(conn, conf->buffer_size, conf->buffer_size / 4);
    corral_conn_set_timeouts(conn, conf->timeout_ms, conf->timeout_ms);
    corral_conn_set_timeouts(s->client, conf->timeout_ms, conf->timeout_ms);
    dir_start(s, DOWN);
    if (s->client_ended)
        dir_end(s, UP);
    else if (s->server_open && s->client_open)
        dir_start(s, UP);
}

static size_t server_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s->dir[DOWN] != DIR_COPY || !s->client_open)
        return len; /* nowhere to go: the client is gone */
    return copy_data(s, DOWN, data, len);
}

static void server_on_eof(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    dir_end(s, DOWN);
}

static void server_on_drain(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s->dir[UP] == DIR_COPY && s->client_open)
        corral_conn_resume_read(s->client);
}

static void server_on_deadline(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    if (!s->connected)
        corral_conn_abort(conn, -ETIMEDOUT);
}

static void server_on_close(corral_conn *conn, int error)
{
    struct stream_session *s = corral_conn_data(conn);
    struct proxy_upstream *up = s->uc.upstream;
    struct upstream_worker *worker = s->uc.worker;
    upstream_count_open(worker, s->uc.server, -1);
    if (s->server_held)
        upstream_server_release(up, worker, s->uc.server);
    s->server_held = false;
    s->server_open = false;
    s->uc.conn = NULL;
    if (!s->connected) {
        /* The connect failed or timed out: the next server, if allowed. */
        enum proxy_error_kind kind =
            error == -ETIMEDOUT ? PROXY_ERROR_TIMEOUT : PROXY_ERROR_CONNECT;
        atomic_fetch_add_explicit(&worker->errors[kind], 1, memory_order_relaxed);
        uint64_t now = corral_loop_now(corral_conn_loop(conn));
        upstream_server_failed(up, worker, s->uc.server, now);
        if (s->client_open && !s->failed)
            connect_next(s);
        session_free_if_done(s);
        return;
    }
    if (s->client_open) {
        if (error != 0 && error != -ETIMEDOUT) {
            atomic_fetch_add_explicit(&worker->errors[PROXY_ERROR_RESET], 1, memory_order_relaxed);
            s->failed = true;
            corral_conn_abort(s->client, error); /* a reset passed on as a reset */
        } else if (s->dir[UP] != DIR_DONE || s->dir[DOWN] != DIR_DONE) {
            s->failed = true;
            corral_conn_close(s->client);
        }
    }
    session_free_if_done(s);
}

static const struct corral_conn_handler server_handler = {
    .on_open = server_on_open,
    .on_data = server_on_data,
    .on_eof = server_on_eof,
    .on_drain = server_on_drain,
    .on_deadline = server_on_deadline,
    .on_close = server_on_close,
};

/* -------------------------------------------------------------- the client */

/* The value of `var` for the session, NUL-terminated, in `buf` or the
 * preread's own storage. */
static const char *session_var(struct stream_session *s, enum stream_var var, char *buf, size_t len)
{
    switch (var) {
    case STREAM_VAR_SERVER_NAME: return s->preread != NULL ? s->preread->server_name : "";
    case STREAM_VAR_ALPN: return s->preread != NULL ? s->preread->alpn : "";
    case STREAM_VAR_REMOTE_ADDR: break;
    }
    return client_key_text(s, buf, len) == 0 ? buf : "";
}

/* What is known before a server is chosen is known: the upstream (the
 * site's, or its route's pick), then the first server. */
static void session_route(struct stream_session *s)
{
    s->upstream = s->site->upstream;
    const struct stream_route *route = s->site->route;
    if (route != NULL) {
        char text[INET6_ADDRSTRLEN];
        const char *value = session_var(s, route->source, text, sizeof(text));
        s->upstream = stream_route_pick(route, value, strlen(value));
    }
    if (s->preread != NULL && s->site->log != NULL) {
        size_t name = strlen(s->preread->server_name), alpn = strlen(s->preread->alpn);
        s->preread_name = malloc(name + alpn + 2);
        if (s->preread_name != NULL) {
            memcpy(s->preread_name, s->preread->server_name, name + 1);
            s->preread_alpn = s->preread_name + name + 1;
            memcpy(s->preread_alpn, s->preread->alpn, alpn + 1);
        }
    }
    free(s->preread);
    s->preread = NULL;
    if (s->upstream == NULL) {
        counter_inc(&s->stats->failed);
        session_abort(s, 0, 502);
        return;
    }
    struct proxy_upstream *up = s->upstream;
    if (up->balance == PROXY_BALANCE_IP_HASH || up->balance == PROXY_BALANCE_HASH) {
        char text[INET6_ADDRSTRLEN];
        s->hash =
            balance_key_hash(NULL, NULL, client_key_text(s, text, sizeof(text)) == 0 ? text : "");
    }
    /* Nothing is read until a server takes it. */
    corral_conn_pause_read(s->client);
    corral_conn_set_timeouts(s->client, 0, 0);
    s->started_ms = corral_loop_now(corral_conn_loop(s->client));
    connect_next(s);
}

/* limit_conn of the session's site: counts the session under its key's
 * value (the zone's key read with the session's variables) in
 * s->limits[slot]; false when `conn_max` are open. */
static bool session_count(struct stream_session *s, size_t slot)
{
    char remote[INET6_ADDRSTRLEN], key[LIMIT_KEY_MAX];
    struct vars_stream facts = {
        .peer =
            s->client_addr.ss_family != AF_UNSPEC ? (const struct sockaddr *)&s->client_addr : NULL,
    };
    struct vars_ctx ctx = {
        .remote_addr = client_key_text(s, remote, sizeof(remote)) == 0 ? remote : "",
        .stream = &facts,
        .escape = VARS_RAW,
    };
    size_t len = vars_eval_into(s->site->conn_key, &ctx, key, sizeof(key));
    if (len == 0 || len > sizeof(key))
        return true; /* an empty or too long key is not limited, as in nginx */
    s->limits[slot].zone = s->site->conn_zone;
    s->limits[slot].node = limit_zone_conn(s->site->conn_zone, key, len, s->site->conn_max);
    return s->limits[slot].node != NULL;
}

/* The rules and limit_conn of the session's site (the latter counted in
 * s->limits[slot]): true, or false with the session ended. */
static bool session_admit(struct stream_session *s, size_t slot)
{
    const struct stream_conf *conf = s->site->conf;
    if (conf->access.rule_count > 0 &&
        !access_rules_allow(&conf->access, s->client_addr.ss_family == AF_UNSPEC
                                               ? NULL
                                               : (const struct sockaddr *)&s->client_addr)) {
        counter_inc(&s->stats->denied);
        session_abort(s, 0, 403);
        return false;
    }
    if (s->site->conn_zone != NULL && !session_count(s, slot)) {
        counter_inc(&s->stats->denied);
        session_abort(s, 0, 503);
        return false;
    }
    return true;
}

/* The client's SNI name (`len` bytes; 0: none) is known: the session
 * goes on with the server of its address that the name picks, whose
 * rules and limit_conn apply too.  Returns false with the session
 * ended. */
static bool session_pick(struct stream_session *s, const char *name, size_t len)
{
    struct stream_site *picked = stream_site_select(s->site, name, len);
    if (picked == s->site)
        return true;
    s->site = picked;
    return session_admit(s, 1);
}

/* The client's address is known (its socket's, or its PROXY header's):
 * the rules, then the ClientHello (tls_preread), or the server. */
static void session_begin(struct stream_session *s)
{
    const struct stream_conf *conf = s->site->conf;
    if (!session_admit(s, 0))
        return;
    if (s->site->tls != NULL && !tls_established(s->client)) {
        /* Nothing more until the client's handshake ends
         * (client_established()): no server is taken for a client that
         * fails it, as nginx's handshake comes before its proxy. */
        s->handshaking = true;
        return;
    }
    if (!conf->preread) {
        session_route(s);
        return;
    }
    s->preread = malloc(sizeof(*s->preread));
    if (s->preread == NULL) {
        session_abort(s, -ENOMEM, 500);
        return;
    }
    tls_preread_init(s->preread);
    /* The hello is kept, to go to the server after it: room for all of
     * it, and it must come within proxy_connect_timeout. */
    if (conf->buffer_size < 2 * TLS_PREREAD_MAX)
        corral_conn_set_watermarks(s->client, 2 * TLS_PREREAD_MAX, TLS_PREREAD_MAX / 2);
    corral_conn_set_timeouts(s->client, conf->connect_timeout_ms, 0);
}

/* The client's TLS facts for the log, taken once, while its TLS lasts. */
static void session_tls_facts(struct stream_session *s)
{
    if (s->tls_protocol != NULL || s->site->log == NULL || !tls_established(s->client))
        return;
    s->tls_protocol = tls_conn_protocol(s->client);
    s->tls_cipher = tls_conn_cipher(s->client);
    const char *name = tls_conn_server_name(s->client);
    if (name != NULL)
        s->tls_name = strdup(name); /* none when out of memory: an empty variable */
}

/* A tls listen's handshake ended (from inside the client's read): the
 * session goes on to its server.  The read goes on too: bytes that came
 * with the handshake are kept until the server takes them (as a plain
 * client's first bytes), and its close_notify is remembered
 * (client_on_eof()). */
static void client_established(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s == NULL || !s->handshaking || s->failed)
        return;
    s->handshaking = false;
    assert(!s->site->conf->preread); /* the config refuses it on a tls listen */
    s->in_established = true;
    /* The server whose certificates the handshake used: the TLS server
     * picked them with stream_sni_select(). */
    const char *name = s->site->vhost_count > 0 ? tls_conn_server_name(conn) : NULL;
    if (session_pick(s, name != NULL ? name : "", name != NULL ? strlen(name) : 0)) {
        session_tls_facts(s);
        session_route(s);
    }
    s->in_established = false;
}

/* tls_preread: feeds the bytes not fed yet; once the hello is read (or
 * found not to be one, which leaves the variables empty, as nginx does),
 * the session goes on.  Keeps every byte for the server. */
static size_t client_preread(struct stream_session *s, const char *data, size_t len)
{
    int rc =
        tls_preread_feed(s->preread, (const uint8_t *)data + s->preread_fed, len - s->preread_fed);
    s->preread_fed = len;
    if (rc == 0)
        return 0;
    if (rc < 0)
        s->preread->server_name[0] = s->preread->alpn[0] = '\0';
    if (!session_pick(s, s->preread->server_name, strlen(s->preread->server_name)))
        return len;
    corral_conn_set_watermarks(s->client, s->site->conf->buffer_size,
                               s->site->conf->buffer_size / 4);
    session_route(s);
    return 0;
}

/* A tls listen: the client speaks TLS from here on (its handshake timed
 * by tls_handshake_timeout).  Returns 0, or -ENOMEM with the session
 * aborted. */
static int client_tls_start(struct stream_session *s)
{
    if (s->site->tls == NULL)
        return 0;
    int err = tls_server_accept(s->site->tls, s->client);
    if (err != 0) {
        session_abort(s, err, 500);
        return err;
    }
    tls_conn_on_established(s->client, client_established);
    if (s->site->conf->buffer_size < TLS_KEPT_MAX) {
        s->wide = true;
        corral_conn_set_watermarks(s->client, TLS_KEPT_MAX, TLS_KEPT_MAX / 4);
    }
    return 0;
}

static void client_on_open(corral_conn *conn)
{
    struct stream_site *site = corral_conn_listener_data(conn);
    corral_worker *worker = corral_conn_worker(conn);
    struct stream_stats *stats = &site->stats[worker != NULL ? corral_worker_index(worker) : 0];
    struct stream_session *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        corral_conn_set_data(conn, NULL);
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    s->site = site;
    s->stats = stats;
    s->worker = worker;
    s->client = conn;
    s->client_open = true;
    s->status = 200;
    if (site->log != NULL || site->vhost_count > 0) { /* a vhost's log, maybe */
        s->began_ns = corral_monotonic_ns();
        /* $server_addr and $server_port: asked for now, while the
         * descriptor is open, and only for a log. */
        s->local_len = sizeof(s->local_addr);
        if (getsockname(corral_conn_fd(conn), (struct sockaddr *)&s->local_addr, &s->local_len) !=
            0)
            s->local_addr.ss_family = AF_UNSPEC;
    }
    counter_inc(&stats->sessions);
    corral_conn_set_data(conn, s);
    corral_conn_set_watermarks(conn, site->conf->buffer_size, site->conf->buffer_size / 4);
    s->client_len = sizeof(s->client_addr);
    if (corral_conn_peer(conn, &s->client_addr, &s->client_len) != 0)
        s->client_addr.ss_family = AF_UNSPEC;
    if (site->proxy_protocol) {
        s->header_pending = true;
        corral_conn_set_transport(conn, &proxy_protocol_transport, NULL);
        /* The header comes within the connect timeout, or never. */
        corral_conn_set_timeouts(conn, site->conf->connect_timeout_ms, 0);
        return;
    }
    if (client_tls_start(s) == 0)
        session_begin(s);
}

/* The PROXY header, which proxy_protocol_transport delivers alone: its
 * source is the client from now on. */
static size_t client_header(struct stream_session *s, const char *data, size_t len)
{
    struct proxy_protocol_header header;
    ssize_t used = proxy_protocol_parse(data, len, &header);
    assert(used != 0); /* the transport delivers complete headers only */
    s->header_pending = false;
    if (used < 0) {
        session_abort(s, (int)used, 400);
        return len;
    }
    corral_conn_set_transport(s->client, &corral_plain_transport, NULL);
    if (client_tls_start(s) != 0)
        return len;
    if (header.has_address) {
        memcpy(&s->client_addr, &header.source, header.address_len);
        memcpy(&s->local_addr, &header.destination, header.address_len);
        s->client_len = s->local_len = header.address_len;
        (void)corral_conn_set_peer(s->client, &header.source.sa, header.address_len);
    }
    corral_conn_set_timeouts(s->client, 0, 0);
    session_begin(s);
    return (size_t)used;
}

static size_t client_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s == NULL || s->failed)
        return len;
    if (s->header_pending)
        return client_header(s, data, len);
    if (s->handshaking) {
        /* Bytes before a handshake: a client that speaks no TLS (which
         * the TLS layer passes on as plain text) is refused, as nginx
         * refuses it, not proxied unencrypted. */
        assert(tls_conn_plaintext(conn));
        session_abort(s, 0, 400);
        return len;
    }
    if (s->preread != NULL)
        return client_preread(s, data, len);
    if (s->dir[UP] == DIR_IDLE) {
        /* Read before the server took it (the bytes that came with the
         * accept): kept until then. */
        corral_conn_pause_read(conn);
        return 0;
    }
    if (s->dir[UP] != DIR_COPY || !s->server_open)
        return len;
    return copy_data(s, UP, data, len);
}

static void client_on_eof(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s == NULL)
        return;
    if (!s->connected && s->server_open && s->site->tls != NULL) {
        /* A TLS client's end read with its handshake (the read does not
         * stop there), while the server is being connected: passed on
         * once it is (server_on_open()). */
        s->client_ended = true;
        return;
    }
    if (!s->connected) {
        /* Gone before a server took it: nothing to pass on. */
        session_abort(s, 0, 200);
        return;
    }
    dir_end(s, UP);
}

/* An abort decided inside the handshake's callback (session_abort()). */
static void client_on_deadline(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s != NULL && s->failed)
        corral_conn_abort(conn, s->deferred_error);
}

static void client_on_drain(corral_conn *conn)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s != NULL && s->dir[DOWN] == DIR_COPY && s->server_open)
        corral_conn_resume_read(s->uc.conn);
}

static void client_on_close(corral_conn *conn, int error)
{
    struct stream_session *s = corral_conn_data(conn);
    if (s == NULL)
        return;
    if (s->handshaking && s->status == 200)
        s->status = 500; /* the handshake failed or timed out: nginx's status */
    s->client_open = false;
    if (s->server_open) {
        if (!s->connected)
            corral_conn_abort(s->uc.conn, 0); /* the attempt is not wanted any more */
        else if (error != 0 && error != -ETIMEDOUT)
            corral_conn_abort(s->uc.conn, error); /* a reset passed on as a reset */
        else if (s->dir[UP] != DIR_DONE || s->dir[DOWN] != DIR_DONE)
            corral_conn_close(s->uc.conn);
    }
    session_free_if_done(s);
}

const struct corral_conn_handler stream_handler = {
    .on_open = client_on_open,
    .on_data = client_on_data,
    .on_eof = client_on_eof,
    .on_drain = client_on_drain,
    .on_deadline = client_on_deadline,
    .on_close = client_on_close,
};

int stream_upstream_check(const struct proxy_upstream_conf *up)
{
    if (up->balance == PROXY_BALANCE_HASH && up->hash_key != NULL &&
        strcmp(up->hash_key, "$remote_addr") != 0 &&
        strcmp(up->hash_key, "$binary_remote_addr") != 0)
        return -EINVAL;
    return 0;
}
