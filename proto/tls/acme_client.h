/*
 * acme_client.h: the ACME client that runs on the main loop: one per
 * certificate (acme_certificate), ordering it from its issuer
 * (acme_issuer) when state_path has none that is due, and again at two
 * thirds of its lifetime; and the HTTP requests it makes (acme_http.c).
 */
#ifndef CORRAL_PROTO_TLS_ACME_CLIENT_H
#define CORRAL_PROTO_TLS_ACME_CLIENT_H

#include "proto/tls/acme.h"
#include "proto/tls/acme_challenge.h"
#include "proto/tls/tls.h"

#include <corral.h>
#include <stdatomic.h>
#include <sys/socket.h>

/* ---------------------------------------------------------- acme_http.c */

struct acme_http_response {
    unsigned status;
    char *location, *nonce, *content_type; /* NULL: not sent */
    unsigned retry_after_s;                /* 0: not sent (seconds only) */
    char *body;                            /* NUL-terminated; NULL: empty */
    size_t body_len;                       /* at most ACME_RESPONSE_LIMIT */
};

/* Called once per request: err 0 with the answer (owned by the request,
 * valid during the call), else -errno and NULL. */
typedef void (*acme_http_done_fn)(void *arg, int err, struct acme_http_response *response);

struct acme_http;

/* One request: `method` `url` (https://), with `body_len` bytes of
 * `body` of `content_type`, or no body when that is NULL; `accept` for
 * the Accept header. */
struct acme_http_msg {
    const char *method, *url, *accept, *content_type;
    const void *body;
    size_t body_len;
};

/* Sends `msg` over TLS (`tls`, for one server, the URL's host) to
 * `addr`, on `loop`; `done` gets the answer.  *out (may be NULL) lets
 * acme_http_cancel() stop it until `done` runs.  Returns 0 or -errno (then
 * `done` is not called).  OCSP stapling fetches https:// responders with
 * it too. */
int acme_http_send(corral_loop *loop, struct tls_client *tls, const struct sockaddr *addr,
                   socklen_t addr_len, const struct acme_http_msg *msg, acme_http_done_fn done,
                   void *arg, struct acme_http **out);

/* acme_http_send() of an ACME request: `method` `url` with the JOSE
 * `body` (NUL-terminated), or none, accepting JSON. */
int acme_http_request(corral_loop *loop, struct tls_client *tls, const struct sockaddr *addr,
                      socklen_t addr_len, const char *method, const char *url, const char *body,
                      acme_http_done_fn done, void *arg, struct acme_http **out);
void acme_http_cancel(struct acme_http *h);
void acme_http_response_clear(struct acme_http_response *r);

/* -------------------------------------------------------- acme_resolve.c */

struct acme_resolve;

/* Looks up `host`:`port` (getaddrinfo(), numeric port) on a thread of its
 * own.  Returns 0 with *out, or -errno. */
int acme_resolve_start(const char *host, const char *port, struct acme_resolve **out);
/* Whether the lookup is over: then *rc is getaddrinfo()'s result and, if
 * 0, the first address is in *addr.  Any thread; never waits. */
bool acme_resolve_done(struct acme_resolve *r, int *rc, struct sockaddr_storage *addr,
                       socklen_t *addr_len);
/* Lets the lookup go, over or not (then it ends by itself); NULL: none. */
void acme_resolve_release(struct acme_resolve *r);

/* --------------------------------------------------------- acme_client.c */

/* An acme_issuer block. */
struct acme_issuer_conf {
    const char *name;
    const char *uri;        /* the directory: https:// */
    const char *state_path; /* a directory, made if missing */
    const char *trusted_ca; /* ssl_trusted_certificate; NULL: the system's */
    const char *const *contacts;
    size_t contact_count;
    bool accept_terms_of_service;
    enum acme_key_type account_key;
    bool tls_alpn; /* challenge tls-alpn-01, else http-01 */
    /* The first wait after a failure, doubled each failure up to a day. */
    uint32_t retry_ms;
    /* External account binding: the key ID and MAC key (base64url) the
     * CA gave; NULL: none */
    const char *eab_kid, *eab_key;
};

/* An acme_certificate directive. */
struct acme_certificate_conf {
    const char *const *domains;
    size_t domain_count;
    enum acme_key_type key;
};

struct acme_client_stats {
    _Atomic uint64_t issued;   /* certificates stored */
    _Atomic uint64_t failures; /* orders that failed */
    /* The stored certificate's notAfter (Unix time); 0: none, or the
     * placeholder */
    _Atomic int64_t not_after;
};

struct acme_client;

/* A client for one certificate, its file <state_path>/<first domain>.pem
 * (the key, then the chain; mode 0600) for tls_certificate and
 * tls_certificate_key both.  With no certificate there yet it writes the
 * self-signed placeholder, so that the server starts and handshakes.
 * Does no network I/O.  Returns 0, or -errno with `why`. */
int acme_client_new(const struct acme_issuer_conf *issuer, const struct acme_certificate_conf *cert,
                    struct acme_client **out, char *why, size_t why_len);
/* The certificate file (for $acme_certificate and $acme_certificate_key). */
const char *acme_client_path(const struct acme_client *c);
/* Its first domain, which names the certificate. */
const char *acme_client_name(const struct acme_client *c);
/* Starts ordering on `loop` (the main loop) now if the certificate is
 * due, else at its renewal time, once the directory's host is looked up
 * (off the loop, acme_resolve.c; a name that does not resolve is logged
 * and looked up again later); the client's timers and requests stay on
 * that loop until acme_client_free(), called on its thread. */
int acme_client_start(struct acme_client *c, corral_loop *loop);
const struct acme_client_stats *acme_client_stats(const struct acme_client *c);
void acme_client_free(struct acme_client *c);

#endif
