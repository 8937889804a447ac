/*
 * http_conn.c: what a client connection tells of its TLS session, asked of
 * the TLS layer (the rest is inline in http_conn.h).
 */
#include "proto/http/http_conn.h"
#include "proto/tls/tls.h"

#include <stdlib.h>

const char *http_conn_tls_protocol(const struct http_conn *c)
{
    return c->tls && c->sock != NULL ? tls_conn_protocol(c->sock) : NULL;
}

const char *http_conn_tls_cipher(const struct http_conn *c)
{
    return c->tls && c->sock != NULL ? tls_conn_cipher(c->sock) : NULL;
}

const char *http_conn_server_name(const struct http_conn *c)
{
    if (c->dgram != NULL) /* QUIC's handshake is its framer's */
        return c->dgram->server_name;
    return c->tls && c->sock != NULL ? tls_conn_server_name(c->sock) : NULL;
}

char *http_conn_tls_peer(const struct http_conn *c, enum tls_peer_fact fact)
{
    return c->tls && c->sock != NULL ? tls_peer_fact(c->sock, fact) : NULL;
}
