/*
 * http_conn.h: one client connection of an HTTP site, whatever protocol it
 * speaks: what is true of the connection, not of one request on it (its
 * addresses, TLS, loop and worker, counters), as h2o's h2o_conn_t beside
 * h2o_req_t.  Every exchange points to its connection (exchange.h); the
 * framer that serves the connection (HTTP/1.1, HTTP/2, HTTP/3) embeds it
 * at the start of its own state, so it costs no allocation of its own.
 */
#ifndef CORRAL_PROTO_HTTP_CONN_H
#define CORRAL_PROTO_HTTP_CONN_H

#include "proto/tls/tls_peer.h"

#include <corral.h>

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct http_site;
struct http_conn;

/* The addresses of a connection without a transport connection of its
 * own (HTTP/3: a QUIC connection, whose datagrams share a UDP socket with
 * others): its framer keeps them and points the http_conn to them. */
struct http_conn_datagram {
    struct sockaddr_storage peer, local;
    socklen_t peer_len, local_len;
    /* The name the client sent by SNI in its handshake, or NULL. */
    const char *server_name;
};

/* What serves a connection once its protocol is chosen (proto/serve/):
 * the events of struct corral_conn_handler, for that protocol.  Each
 * framer has one table; a connection's events go to its table's
 * functions from its choice to its on_close. */
struct http_framer {
    const char *name; /* "HTTP/1.1", "HTTP/2" */
    size_t (*on_data)(struct http_conn *c, const char *data, size_t len);
    void (*on_eof)(struct http_conn *c);
    void (*on_drain)(struct http_conn *c);
    void (*on_deadline)(struct http_conn *c);
    void (*on_stop)(struct http_conn *c);
    /* The last one: the framer frees its state, `c` with it. */
    void (*on_close)(struct http_conn *c, int error);
    /* The peer ended while reading was paused (corral_conn_handler's
     * on_hangup).  NULL: its end is read when reading resumes. */
    void (*on_hangup)(struct http_conn *c);
};

/* The connection.  Made by the framer that first serves it, on the
 * connection's worker; that worker's thread alone uses it. */
struct http_conn {
    corral_conn *sock; /* its transport connection (NULL: a datagram one, or a test's fake) */
    /* HTTP/3's QUIC connection, which has no `sock`: its addresses.  NULL
     * for every other. */
    const struct http_conn_datagram *dgram;
    const struct http_site *site; /* what its address serves: a reload's handover changes it */
    const struct http_framer *framer;
    /* It speaks TLS (its transport is proto/tls's): its SNI and protocol
     * are the TLS layer's to tell (http_conn_server_name()). */
    bool tls;
    bool proxy_header;  /* its PROXY header is still to come: the peer is the balancer */
    bool proxy_address; /* its peer is its PROXY header's source ($proxy_protocol_addr) */
    /* Its protocol is still to be chosen (proto/serve/): events go to
     * `framer`, HTTP/1.1's, as for an idle connection, but its input goes
     * first to the choice. */
    bool choosing;
    unsigned requests; /* exchanges completed on it */
    /* A connection with no transport (`sock` NULL): HTTP/3's, or corral's
     * own for a detached subrequest (subrequest.h), which outlives its
     * client's.  Its loop and worker (NULL on a bare loop) are these; a
     * TCP client's are its transport's. */
    corral_loop *loop;
    corral_worker *worker;
};

/* The loop of the worker the connection belongs to: for its clock, its
 * timers and the connections a handler opens. */
static inline corral_loop *http_conn_loop(const struct http_conn *c)
{
    return c->sock != NULL ? corral_conn_loop(c->sock) : c->loop;
}

/* Its worker; NULL when it runs on a bare loop. */
static inline corral_worker *http_conn_worker(const struct http_conn *c)
{
    return c->sock != NULL ? corral_conn_worker(c->sock) : c->worker;
}

/* The client's address (its PROXY header's source, if it sent one) into
 * *addr: true, or false when unknown (a fake connection). */
static inline bool http_conn_peer(const struct http_conn *c, struct sockaddr_storage *addr,
                                  socklen_t *len)
{
    if (c->dgram != NULL) {
        *addr = c->dgram->peer;
        *len = c->dgram->peer_len;
        return true;
    }
    *len = sizeof(*addr);
    return c->sock != NULL && corral_conn_peer(c->sock, addr, len) == 0;
}

/* Our address, the same way.  A system call each time: only
 * $server_addr, $server_port and a PROXY header sent upstream ask, and an
 * idle connection keeps no copy. */
static inline bool http_conn_local(const struct http_conn *c, struct sockaddr_storage *addr,
                                   socklen_t *len)
{
    if (c->dgram != NULL) {
        *addr = c->dgram->local;
        *len = c->dgram->local_len;
        return true;
    }
    *len = sizeof(*addr);
    return c->sock != NULL &&
           getsockname(corral_conn_fd(c->sock), (struct sockaddr *)addr, len) == 0;
}

/* The protocol of its TLS session ("TLSv1.3"), its cipher in OpenSSL's
 * name, and the name the client sent by SNI: NULL without TLS, before the
 * handshake, or (the name) when the client sent none. */
const char *http_conn_tls_protocol(const struct http_conn *c);
const char *http_conn_tls_cipher(const struct http_conn *c);

/* A fact of the client's certificate (tls_peer.h), malloc'd: the caller
 * frees it; NULL without TLS (or, but for the verification, without a
 * certificate). */
char *http_conn_tls_peer(const struct http_conn *c, enum tls_peer_fact fact);
const char *http_conn_server_name(const struct http_conn *c);

#endif
