/*
 * acme_challenge.h: the challenge answers an ACME order offers while the
 * CA validates it (acme_challenge.c): HTTP-01 key authorizations for the
 * plain listeners, TLS-ALPN-01 certificates for the TLS handshake.  The
 * client sets them on the main loop; any worker reads them.
 */
#ifndef CORRAL_PROTO_TLS_ACME_CHALLENGE_H
#define CORRAL_PROTO_TLS_ACME_CHALLENGE_H

#include <openssl/ssl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* The HTTP-01 answers being offered, shared by every worker: set by the
 * client on the main loop, looked up by the plain listeners.  Each
 * returns 0 or -ENOMEM. */
int acme_challenge_set(const char *token, const char *key_authorization);
void acme_challenge_remove(const char *token);

#define ACME_CHALLENGE_PREFIX "/.well-known/acme-challenge/"
/* Room for a key authorization: a token the parser bounds to 256
 * characters, a dot and a 43-character thumbprint. */
#define ACME_CHALLENGE_ANSWER_MAX 320

/* The key authorization to answer a request for `path` (`len` bytes, a
 * request path without query) with, copied to `out` (`cap` bytes, NUL-
 * terminated): its length, or -1 when the path is not the challenge of a
 * token being offered. */
long acme_challenge_lookup(const char *path, size_t len, char *out, size_t cap);

/* How many HTTP-01 and TLS-ALPN-01 answers are offered: read (relaxed)
 * on every request and handshake, so inline, without a call. */
extern atomic_size_t acme_challenge__http_count, acme_challenge__alpn_count;

/* Whether any HTTP-01 answer is offered. */
static inline bool acme_challenge_any(void)
{
    return atomic_load_explicit(&acme_challenge__http_count, memory_order_relaxed) > 0;
}

/* TLS-ALPN-01 (RFC 8737): the certificate (with its acmeIdentifier) and
 * key a handshake for `name` that offers ALPN acme-tls/1 gets, set by the
 * client (references taken), used by the TLS server side.  Set returns 0
 * or -ENOMEM. */
int acme_challenge_alpn_set(const char *name, X509 *cert, EVP_PKEY *key);
void acme_challenge_alpn_remove(const char *name);
static inline bool acme_challenge_alpn_any(void)
{
    return atomic_load_explicit(&acme_challenge__alpn_count, memory_order_relaxed) > 0;
}
/* Whether ALPN list `offered` (wire format, `len` bytes) holds acme-tls/1. */
bool acme_challenge_alpn_offered(const unsigned char *offered, unsigned len);
/* Gives `ssl` the challenge certificate for SNI `name` (`len` bytes):
 * false when there is none for it. */
bool acme_challenge_alpn_use(SSL *ssl, const char *name, size_t len);
#define ACME_TLS_ALPN "acme-tls/1"

#endif
