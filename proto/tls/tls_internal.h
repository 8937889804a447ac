/*
 * tls_internal.h: what tls.c (the transport and the server side) and
 * tls_client.c (the client side) share: a connection's TLS state, the
 * transport, and the ALPN list both offer.
 */
#ifndef CORRAL_PROTO_TLS_INTERNAL_H
#define CORRAL_PROTO_TLS_INTERNAL_H

#include "proto/tls/tls.h"

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

static const unsigned char alpn_http11[] = "\x08http/1.1";

struct tls_conn {
    SSL *ssl;
    corral_conn *conn;
    bool established;
    bool socket_drained; /* the last read of the socket came back short */
    bool socket_eof;     /* a read of the socket found its end */
    bool end_deferred;   /* the last read ended after bytes: the next one tells why */
    /* Server side */
    bool first_seen;         /* the client's first byte was looked at */
    bool plaintext;          /* it cannot start a TLS record: tls_conn_plaintext() */
    struct tls_stats *stats; /* may be NULL */
    corral_timer *handshake_timer;
    void (*on_established)(corral_conn *conn); /* tls_conn_on_established(); may be NULL */
    /* Client side */
    struct tls_client *client; /* NULL on the server side */
    SSL_SESSION **session;     /* where this worker keeps the server's last session; NULL: none */
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

/* Session ticket keys (tls_tickets.c). */
struct ticket_key {
    unsigned char name[16];       /* OpenSSL's key name size; RAND_bytes() fills each by sizeof */
    unsigned char cipher_key[32]; /* AES-256-CBC */
    unsigned char mac_key[32];    /* HMAC-SHA256 */
    uint64_t created_ms;
    bool valid;
};

/* Shared by every worker: the current key seals new tickets, and tickets
 * sealed by the one before still open (and are renewed), so a ticket lives
 * for one to two rotation periods. */
struct ticket_keys {
    pthread_mutex_t lock;
    struct ticket_key current, previous;
    uint64_t rotation_ms;
};

void tls_tickets_init(struct ticket_keys *keys, uint64_t rotation_ms);
void tls_tickets_free(struct ticket_keys *keys);
/* A new generation's server opens the tickets the previous one sealed. */
void tls_tickets_take(struct ticket_keys *keys, struct ticket_keys *from);
/* OpenSSL's ticket key callback (SSL_CTX_set_tlsext_ticket_key_evp_cb()),
 * on `keys`. */
int tls_tickets_key_cb(struct ticket_keys *keys, SSL *ssl, unsigned char key_name[16],
                       unsigned char *iv, EVP_CIPHER_CTX *cipher, EVP_MAC_CTX *mac, int encrypt);

/* OCSP stapling of one certificate (tls_stapling.c). */
struct tls_staple;
/* Whether `cert` is must-staple: its TLS Feature extension (RFC 7633)
 * lists status_request.  Such a certificate is stapled even without
 * tls_stapling. */
bool tls_staple_required(X509 *cert);
/* For the certificate `ctx` has just loaded (from file `name`), as `vhost` says; with `later`
 * (a certificate loaded while serving), a responder name not seen before is looked up by the
 * main loop's first fetch, off the loop, rather than now.  Returns 0 with *out (NULL and a
 * warning in `why` when it cannot be stapled), or -EINVAL with `item` and `why` set, or
 * -ENOMEM. */
int tls_staple_new(SSL_CTX *ctx, const struct tls_vhost_conf *vhost, const char *name, bool later,
                   struct tls_stapling_stats *stats, struct tls_staple **out,
                   enum tls_conf_item *item, char *why, size_t why_len);
/* The same for `cert` with `chain` (a certificate named by SNI): the
 * caller answers for it with tls_staple_answer(). */
int tls_staple_new_for(X509 *cert, STACK_OF(X509) * chain, const struct tls_vhost_conf *vhost,
                       const char *name, struct tls_stapling_stats *stats, struct tls_staple **out,
                       char *why, size_t why_len);
/* Staples `staple`'s response (NULL: none) to the handshake of `ssl`
 * while it is valid: SSL_TLSEXT_ERR_OK, else SSL_TLSEXT_ERR_NOACK. */
int tls_staple_answer(SSL *ssl, struct tls_staple *staple);
/* OpenSSL's status callback for certificates tls_staple_new() stapled. */
int tls_staple_status_cb(SSL *ssl, void *arg);
int tls_staple_start(struct tls_staple *staple, corral_loop *loop);
/* Stops fetching (on the loop's thread); the staple serves on. */
void tls_staple_stop(struct tls_staple *staple);
/* Takes `from`'s response if it is about the same certificate, valid,
 * and valid for longer than the one `staple` holds. */
void tls_staple_take(struct tls_staple *staple, struct tls_staple *from);
/* A copy of `from`'s response while it is valid, for a staple made
 * later (a certificate named by SNI, read again after a reload); NULL
 * without one. */
struct tls_staple_held;
struct tls_staple_held *tls_staple_hold(struct tls_staple *from);
/* tls_staple_take() from such a copy. */
void tls_staple_take_held(struct tls_staple *staple, const struct tls_staple_held *held);
/* The certificate it is about. */
X509 *tls_staple_held_cert(const struct tls_staple_held *held);
/* Another copy, NULL once it has expired (or without memory). */
struct tls_staple_held *tls_staple_held_copy(const struct tls_staple_held *held);
void tls_staple_held_free(struct tls_staple_held *held);
void tls_staple_free(struct tls_staple *staple);

/* Certificates named by SNI (tls_sni_certs.c): a vhost's tls_certificate
 * and key whose file names hold $tls_server_name (or $ssl_server_name). */
struct tls_sni_certs;
/* The pairs read and kept per vhost; the least recently used one goes. */
#define TLS_SNI_CERTS_CACHED 1000
/* With `vhost` (may be NULL) stapling, the pairs are stapled as it says,
 * counted in `stats`.  Returns 0, -ENOMEM, or -EINVAL with `why` (another
 * variable). */
int tls_sni_certs_new(const char *certificate, const char *key, const struct tls_vhost_conf *vhost,
                      struct tls_stapling_stats *stats, struct tls_sni_certs **out, char *why,
                      size_t why_len);
void tls_sni_certs_free(struct tls_sni_certs *certs);
/* Has `ctx` take its certificate from `certs` (and their staples). */
void tls_sni_certs_attach(struct tls_sni_certs *certs, SSL_CTX *ctx);
/* SSL_CTX_set_cert_cb()'s callback, `arg` the vhost's tls_sni_certs. */
int tls_sni_certs_select(SSL *ssl, void *arg);
/* The status callback of a context with such pairs (arg: them). */
int tls_sni_certs_status(SSL *ssl, void *arg);
/* Main loop, about once a second: makes and starts the staples of pairs
 * read since (a few at a time), and frees those of pairs let go. */
void tls_sni_certs_staple(struct tls_sni_certs *certs, corral_loop *loop);
/* Main loop: stops every fetch (the staples serve on). */
void tls_sni_certs_stop(struct tls_sni_certs *certs);
/* Main loop, before `certs` serves: keeps copies of the responses the
 * staples of `from` (the previous configuration's) hold, and of those it
 * kept itself, for the pairs `certs` reads later to take as their staples
 * are made. */
void tls_sni_certs_take_staples(struct tls_sni_certs *certs, struct tls_sni_certs *from);

/* The reason of OpenSSL's latest error, for messages. */
const char *tls_openssl_reason(void);
/* Empties the thread's OpenSSL error queue, as ERR_clear_error() does, but
 * cheaply when it is already empty: called before an OpenSSL call whose
 * failure SSL_get_error() or tls_openssl_reason() then reads, so that
 * neither sees an entry an earlier call (any OpenSSL user on the thread)
 * left behind. */
void tls_clear_errors(void);

#endif
