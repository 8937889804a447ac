/*
 * serve.c: the connection handler of HTTP sites.  A connection starts
 * served by HTTP/1.1, whose state holds the connection object; it goes to
 * HTTP/2 only when it chooses it, before anything was read as HTTP/1.1.
 * Each event then goes to its framer's table, one call through a pointer.
 */
#include "proto/serve/serve.h"
#include "proto/http1/http1.h"
#include "proto/http2/http2.h"
#include "proto/http/http_conn.h"
#include "proto/http/proxy_protocol.h"
#include "proto/http/site.h"
#include "proto/tls/tls.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

/* A connection's PROXY header was refused: logged and counted. */
static void serve_proxy_header_failed(struct http_conn *c, enum proxy_protocol_failure why)
{
    corral_worker *worker = http_conn_worker(c);
    if (worker != NULL && c->site->stats != NULL)
        counter_inc(&c->site->stats[corral_worker_index(worker)].proxy_protocol[why]);
    char peer[64]; /* exchange_format_peer() writes at most this */
    exchange_format_peer(c, peer, sizeof(peer));
    corral_log(CORRAL_LOG_INFO, "PROXY header from %s: %s, connection closed", peer,
               proxy_protocol_failure_names[why]);
}

/* Starts what the client speaks inside the connection: TLS, or nothing.
 * Returns 0 or -ENOMEM. */
static int serve_start_transport(struct http_conn *c)
{
    if (c->site->tls == NULL)
        return 0;
    c->tls = true;
    return tls_server_accept(c->site->tls, c->sock);
}

/* Whether the site offers HTTP/2 beside HTTP/1.1. */
static bool serve_has_choice(const struct http_conn *c)
{
    return c->site->http2 != NULL;
}

/* Whether the connection's first input decides something, once what comes
 * before HTTP (a PROXY header) is past: the protocol, when the site offers
 * HTTP/2; over TLS also whether the client spoke TLS at all (plain HTTP
 * sent to a TLS port gets an answer, not a reset). */
static bool serve_first_input_decides(const struct http_conn *c)
{
    return c->tls || serve_has_choice(c);
}

static void serve_on_open(corral_conn *conn)
{
    const struct http_site *site = corral_conn_listener_data(conn);
    struct http_conn *c = http1_conn_new(conn, site);
    if (c == NULL) {
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    /* A PROXY header comes first, before a TLS ClientHello too. */
    c->proxy_header = site->proxy_protocol;
    if (c->proxy_header)
        corral_conn_set_transport(conn, &proxy_protocol_transport, NULL);
    else if (serve_start_transport(c) != 0) {
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    c->choosing = c->proxy_header || serve_first_input_decides(c);
}

/* The PROXY header, which proxy_protocol_transport delivers alone: its
 * source becomes the connection's peer, then TLS or HTTP begins on the
 * bytes still in the socket. */
static size_t serve_take_proxy_header(struct http_conn *c, const char *data, size_t len)
{
    struct proxy_protocol_header header;
    ssize_t used = proxy_protocol_parse(data, len, &header);
    assert(used != 0); /* the transport delivers complete headers only */
    c->proxy_header = false;
    if (used <= 0) {
        serve_proxy_header_failed(c, PROXY_PROTOCOL_MALFORMED);
        corral_conn_abort(c->sock, (int)used);
        return len;
    }
    if (header.has_address) {
        corral_conn_set_peer(c->sock, &header.source.sa, header.address_len);
        c->proxy_address = true;
    }
    if (c->site->tls == NULL)
        corral_conn_set_transport(c->sock, &corral_plain_transport, NULL);
    else if (serve_start_transport(c) != 0)
        corral_conn_abort(c->sock, -ENOMEM);
    c->choosing = serve_first_input_decides(c);
    return (size_t)used;
}

/* Hands the connection to HTTP/2, which gets `data` next. */
static size_t serve_http2(struct http_conn *c, const char *data, size_t len)
{
    struct http_conn *h2 = http2_conn_new(c);
    if (h2 == NULL) {
        corral_conn_abort(c->sock, -ENOMEM);
        return len;
    }
    http1_conn_free(c);
    return h2->framer->on_data(h2, data, len);
}

/* The first input of a connection that has a choice: over TLS, ALPN has
 * chosen (the handshake is over once application data comes); without,
 * HTTP/2 with prior knowledge starts with its preface (RFC 9113 3.4),
 * which no HTTP/1.1 request line matches.  `Upgrade: h2c` is not offered:
 * such a request is HTTP/1.1's. */
static size_t serve_choose(struct http_conn *c, const char *data, size_t len)
{
    if (c->proxy_header)
        return serve_take_proxy_header(c, data, len);
    if (c->tls) {
        c->choosing = false;
        if (tls_conn_plaintext(c->sock))
            return http1_reject_plaintext(c, data, len);
        if (serve_has_choice(c) && tls_conn_alpn_is(c->sock, "h2"))
            return serve_http2(c, data, len);
        return c->framer->on_data(c, data, len);
    }
    if (!serve_has_choice(c)) {
        /* Handed over (a reload) to a site without HTTP/2 before it spoke. */
        c->choosing = false;
        return c->framer->on_data(c, data, len);
    }
    size_t n = len < HTTP2_PREFACE_LEN ? len : HTTP2_PREFACE_LEN;
    if (memcmp(data, HTTP2_PREFACE, n) != 0) {
        c->choosing = false;
        return c->framer->on_data(c, data, len);
    }
    if (n < HTTP2_PREFACE_LEN)
        return 0; /* the rest of the preface decides */
    c->choosing = false;
    return serve_http2(c, data, len);
}

static size_t serve_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct http_conn *c = corral_conn_data(conn);
    if (c->choosing)
        return serve_choose(c, data, len);
    return c->framer->on_data(c, data, len);
}

static void serve_on_eof(corral_conn *conn)
{
    struct http_conn *c = corral_conn_data(conn);
    c->framer->on_eof(c);
}

static void serve_on_drain(corral_conn *conn)
{
    struct http_conn *c = corral_conn_data(conn);
    c->framer->on_drain(c);
}

static void serve_on_deadline(corral_conn *conn)
{
    struct http_conn *c = corral_conn_data(conn);
    if (c->proxy_header) {
        serve_proxy_header_failed(c, PROXY_PROTOCOL_TIMEOUT);
        corral_conn_set_deadline(conn, 0);
        corral_conn_close_no_linger(conn);
        return;
    }
    c->framer->on_deadline(c);
}

static void serve_on_stop(corral_conn *conn)
{
    struct http_conn *c = corral_conn_data(conn);
    c->framer->on_stop(c);
}

static void serve_on_hangup(corral_conn *conn)
{
    struct http_conn *c = corral_conn_data(conn);
    if (c != NULL && !c->choosing && c->framer->on_hangup != NULL)
        c->framer->on_hangup(c);
}

static void serve_on_close(corral_conn *conn, int error)
{
    struct http_conn *c = corral_conn_data(conn);
    if (c == NULL)
        return; /* on_open ran out of memory */
    if (c->proxy_header && (error == -EPROTO || error == -EMSGSIZE))
        serve_proxy_header_failed(c, PROXY_PROTOCOL_MALFORMED);
    c->framer->on_close(c, error);
}

const struct corral_conn_handler serve_handler = {
    .on_open = serve_on_open,
    .on_data = serve_on_data,
    .on_eof = serve_on_eof,
    .on_deadline = serve_on_deadline,
    .on_drain = serve_on_drain,
    .on_stop = serve_on_stop,
    .on_hangup = serve_on_hangup,
    .on_close = serve_on_close,
};
