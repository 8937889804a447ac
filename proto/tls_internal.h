/*
 * tls_internal.h: what tls.c (the transport and the server side) and
 * tls_client.c (the client side) share: a connection's TLS state, the
 * transport, and the ALPN list both offer.
 */
#ifndef CORRAL_PROTO_TLS_INTERNAL_H
#define CORRAL_PROTO_TLS_INTERNAL_H

#include "proto/tls.h"

#include <openssl/ssl.h>

static const unsigned char alpn_http11[] = "\x08http/1.1";

struct tls_conn {
    SSL *ssl;
    corral_conn *conn;
    bool established;
    bool socket_drained; /* the last read of the socket came back short */
    /* Server side */
    struct tls_stats *stats; /* may be NULL */
    corral_timer *handshake_timer;
    /* Client side */
    struct tls_client *client; /* NULL on the server side */
    SSL_SESSION **session;     /* where this worker keeps the server's last session */
};

struct tls_client {
    SSL_CTX *ctx;
    char *server_name;
    bool name_is_address;
    size_t server_count;
    unsigned workers;
    SSL_SESSION **sessions; /* [worker][server] */
};

/* The transport of a connection speaking TLS; its state is a tls_conn. */
extern const struct corral_transport tls_transport;

/* A TLS connection over `conn`'s socket with the settings of `ctx`, not yet
 * set as its transport.  NULL when out of memory. */
struct tls_conn *tls_conn_new(SSL_CTX *ctx, corral_conn *conn);

/* The reason of OpenSSL's latest error, for messages. */
const char *tls_openssl_reason(void);

#endif
