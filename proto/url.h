/*
 * url.h: splitting an absolute http:// or https:// URL into the parts a
 * client needs to send a request: the host to resolve and verify, the
 * port, the authority for the Host header and the path for the request
 * line.  One parser for the ACME client (its directory and every URL the
 * ACME server names) and OCSP stapling (a certificate's responder, or
 * tls_stapling_responder): both read URLs a peer or a certificate chose.
 */
#ifndef CORRAL_PROTO_URL_H
#define CORRAL_PROTO_URL_H

#include <stdbool.h>
#include <stddef.h>

struct url {
    bool https;
    /* A name or an address; an IPv6 literal without its brackets */
    char host[256];
    /* Digits, 1 to 65535; the scheme's (80 or 443) when none is written */
    char port[6];
    /* Into the URL: the authority as written, for the Host header, and
     * the path with its query up to any fragment ("/" when empty) */
    const char *authority, *path;
    size_t authority_len, path_len;
};

/* Splits NUL-terminated `url`, of the form SCHEME://HOST[:PORT][/PATH],
 * HOST a name or [IPV6]: returns 0, or -EINVAL for another scheme, user
 * information, a byte a request line or header cannot carry (space,
 * control or non-ASCII), a query without a path, or a malformed host or
 * port.  `out` points into `url`. */
int url_split(const char *url, struct url *out);

#endif
