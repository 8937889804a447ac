/*
 * tls_peer.h: what a TLS connection's client certificate says, as nginx's
 * $ssl_client_* variables give it: whether it verified, its subject and
 * issuer (RFC 2253), serial, SHA-1 fingerprint, the PEM URL-escaped, and
 * its validity.
 */
#ifndef CORRAL_PROTO_TLS_PEER_H
#define CORRAL_PROTO_TLS_PEER_H

#include <corral.h>

enum tls_peer_fact {
    TLS_PEER_VERIFY,       /* SUCCESS, FAILED:reason, NONE */
    TLS_PEER_SUBJECT,      /* the subject's DN, RFC 2253 */
    TLS_PEER_ISSUER,       /* the issuer's DN, RFC 2253 */
    TLS_PEER_SERIAL,       /* hexadecimal, uppercase */
    TLS_PEER_FINGERPRINT,  /* SHA-1 of the DER, hexadecimal, lowercase */
    TLS_PEER_ESCAPED_CERT, /* the PEM, URL-escaped */
    TLS_PEER_NOT_BEFORE,   /* "Jan  1 00:00:00 2026 GMT" */
    TLS_PEER_NOT_AFTER,
    TLS_PEER_DAYS_LEFT, /* whole days until it expires; 0 once it has */
    TLS_PEER_FACTS,
};

/* The fact about `conn`'s client certificate, as a malloc'd string (the
 * caller frees it); NULL when the connection is not TLS or out of
 * memory, and for every fact but TLS_PEER_VERIFY ("NONE") when the
 * client sent no certificate. */
char *tls_peer_fact(const corral_conn *conn, enum tls_peer_fact fact);

#endif
