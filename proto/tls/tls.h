/*
 * tls.h: TLS over OpenSSL as a libcorral transport.  The server side
 * terminates TLS for one listening address: a certificate set per virtual
 * host picked by SNI, ALPN http/1.1, session tickets whose keys every worker
 * shares and which rotate on a schedule, a session cache, kernel TLS, and
 * client certificates.  The client side speaks TLS to upstreams, verifying
 * them and reusing their sessions.
 */
#ifndef CORRAL_PROTO_TLS_H
#define CORRAL_PROTO_TLS_H

#include <corral.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tls_handshake_kind {
    TLS_HANDSHAKE_FULL,
    TLS_HANDSHAKE_RESUMED,
    TLS_HANDSHAKE_KINDS,
};
extern const char *const tls_handshake_kind_names[TLS_HANDSHAKE_KINDS];

enum tls_error_kind {
    TLS_ERROR_PROTOCOL, /* not TLS, a bad ClientHello, a refused client certificate */
    TLS_ERROR_TIMEOUT,  /* the handshake did not finish in time */
    TLS_ERROR_KINDS,
};
extern const char *const tls_error_kind_names[TLS_ERROR_KINDS];

/* Per-worker counters, written by the worker only. */
struct tls_stats {
    _Atomic uint64_t handshakes[TLS_HANDSHAKE_KINDS];
    _Atomic uint64_t errors[TLS_ERROR_KINDS];
    _Atomic uint64_t ktls; /* connections whose records the kernel encrypts */
} __attribute__((aligned(64)));

enum tls_protocol {
    TLS_PROTOCOL_1_2 = 1 << 0,
    TLS_PROTOCOL_1_3 = 1 << 1,
};

enum tls_verify_client {
    TLS_VERIFY_CLIENT_OFF,
    TLS_VERIFY_CLIENT_OPTIONAL,
    TLS_VERIFY_CLIENT_ON,
};

struct tls_certificate_files {
    const char *certificate; /* PEM: the leaf, then its chain */
    const char *key;
};

/* What differs between the virtual hosts of one address: their
 * certificates (the first is the default), how they verify clients', and
 * the versions and ciphers they speak. */
struct tls_vhost_conf {
    const struct tls_certificate_files *certificates;
    size_t certificate_count;
    const char *client_ca;                /* tls_client_certificate; NULL: no client certificates */
    enum tls_verify_client verify_client; /* tls_verify_client */
    bool watch;                           /* tls_certificate_watch: see tls_server_new() */
    unsigned protocols;                   /* tls_protocols: TLS_PROTOCOL_* bits */
    const char *ciphers, *ciphersuites;   /* tls_ciphers, tls_ciphersuites; NULL: the defaults */
    /* OCSP stapling: see tls_server_new() */
    bool stapling, stapling_verify; /* tls_stapling, tls_stapling_verify */
    const char *stapling_file;      /* tls_stapling_file: a DER response; NULL: fetched */
    const char *stapling_responder; /* tls_stapling_responder: http:// URL; NULL: AIA's */
    const char *trusted_ca;         /* tls_trusted_certificate; NULL: the system's store */
};

/* Picks the virtual host whose certificates answer a client that sent
 * `name` (len bytes, not NUL-terminated) as SNI: returns its index in the
 * server's vhosts, 0 for the default.  Called on the worker that handshakes,
 * as nginx's ngx_ssl_servername_pt is: the protocol above TLS knows how
 * names map to hosts. */
typedef size_t (*tls_sni_select_fn)(void *arg, const char *name, size_t len);

/* The settings of a server block's tls_* directives, and the SNI selector
 * the daemon wires in. */
struct tls_server_conf {
    tls_sni_select_fn sni_select; /* NULL: every client gets the first vhost's */
    void *sni_arg;
    unsigned protocols; /* tls_protocols: TLS_PROTOCOL_* bits */
    /* tls_ciphers (TLS 1.2, OpenSSL syntax) and tls_ciphersuites (TLS 1.3);
     * NULL: the defaults */
    const char *ciphers, *ciphersuites;
    bool session_tickets;            /* tls_session_tickets */
    uint32_t ticket_key_rotation_ms; /* tls_session_ticket_rotation */
    unsigned session_cache;          /* tls_session_cache: sessions; 0 = no cache */
    uint32_t session_timeout_ms;     /* tls_session_timeout: whole seconds, at least 1 */
    uint32_t handshake_timeout_ms;   /* tls_handshake_timeout */
    bool ktls;                       /* tls_ktls */
    bool certificate_watch;          /* tls_certificate_watch (each vhost's own) */
    /* tls_client_certificate (NULL: none) and tls_verify_client, as the
     * block set them; tls_server_new() takes these, protocols, ciphers and
     * ciphersuites from each vhost's tls_vhost_conf instead. */
    const char *client_ca;
    enum tls_verify_client verify_client;
    bool http2; /* ALPN offers h2 before http/1.1 (listen ... tls http2) */
    /* A stream listen's ALPN instead of HTTP's: with `stream`, ALPN
     * agrees on one of `alpn` (wire format: a length byte before each
     * name, alpn_len bytes; most preferred first) and refuses a client
     * that offers only others, as nginx's stream ssl_alpn does; NULL:
     * nothing is agreed. */
    bool stream;
    const unsigned char *alpn;
    size_t alpn_len;
    /* OCSP stapling, as the block set it; tls_server_new() takes each
     * vhost's from its tls_vhost_conf. */
    bool stapling, stapling_verify;
    const char *stapling_file, *stapling_responder, *trusted_ca;
};

/* The defaults.  verify_client's depends on client_ca: on with a CA file,
 * else off; the config settles it once the server block is read. */
#define TLS_SERVER_CONF_DEFAULT                                                                    \
    ((struct tls_server_conf){                                                                     \
        .protocols = TLS_PROTOCOL_1_2 | TLS_PROTOCOL_1_3,                                          \
        .session_tickets = true,                                                                   \
        .ticket_key_rotation_ms = 60 * 60 * 1000,                                                  \
        .session_cache = 20000,                                                                    \
        .session_timeout_ms = 5 * 60 * 1000,                                                       \
        .handshake_timeout_ms = 10 * 1000,                                                         \
        .ktls = false,                                                                             \
        .verify_client = TLS_VERIFY_CLIENT_OFF,                                                    \
    })

/* What a problem found while loading is about, for the caller to point at
 * the directive that set it. */
enum tls_conf_item {
    TLS_CONF_CERTIFICATE, /* vhost, index: which certificate */
    TLS_CONF_KEY,
    TLS_CONF_CIPHERS,
    TLS_CONF_CIPHERSUITES,
    TLS_CONF_CLIENT_CA,
    TLS_CONF_STAPLING_FILE,
    TLS_CONF_STAPLING_RESPONDER,
    TLS_CONF_TRUSTED_CERTIFICATE,
};

struct tls_report {
    void (*report)(void *arg, enum tls_conf_item item, size_t vhost, size_t index, bool warning,
                   const char *message);
    void *arg;
};

struct tls_server;

/* Loads the certificates and settings for one listening address with
 * `vhost_count` virtual hosts (`vhosts`, the first the default), served by
 * `workers` workers (each gets its counters).  A client gets the
 * certificates, client verification, protocols and ciphers of the vhost
 * its SNI selects, the first's without SNI; everything else in `conf` is
 * the same for all.  Problems go to `report`
 * (warnings too: an expired certificate); returns 0, -EINVAL after an error
 * report, or -ENOMEM.
 *
 * A vhost with `watch` has its certificate and key files looked at again,
 * at most once a second, when a connection is accepted: a file that
 * changed (a new inode, size or time: an atomic rename, or a write in
 * place) has the vhost's context built again from the files, in the
 * accepting worker, and new handshakes get it; a pair that does not load
 * is logged and the old one serves on.  Connections keep the context they
 * began with.
 *
 * A vhost with `stapling` staples an OCSP response to the handshakes of
 * clients that ask (status_request), for each certificate whose issuer is
 * in its chain or in `trusted_ca`: the response in `stapling_file`, or the
 * last good one fetched from the responder (`stapling_responder`, else the
 * certificate's AIA OCSP URL: plain http://, resolved now) once
 * tls_server_stapling_start() runs.  A response is stapled only while it
 * is successful, says the certificate is good, is about it, is current,
 * and (`stapling_verify`) verifies against the chain and `trusted_ca`.  A
 * certificate without issuer or responder is served unstapled (a warning).
 * A certificate loaded again by `watch` gets a staple of its own, fetched
 * on that loop (which also looks at the files once a second), and goes out
 * unstapled until its first good response: never with the response of the
 * certificate it replaced. */
int tls_server_new(const struct tls_server_conf *conf, const struct tls_vhost_conf *vhosts,
                   size_t vhost_count, unsigned workers, const struct tls_report *report,
                   struct tls_server **out);
void tls_server_free(struct tls_server *server);
/* Gives a server that is not serving yet the session ticket keys of one
 * that may be (the previous configuration's), so that its tickets resume. */
void tls_server_take_ticket_keys(struct tls_server *server, struct tls_server *from);

/* Counters of OCSP fetches, written by the loop that fetches. */
struct tls_stapling_stats {
    _Atomic uint64_t fetches;  /* responses fetched and stapled */
    _Atomic uint64_t failures; /* fetches that failed, or whose response was refused */
};

/* Starts fetching the OCSP responses of `server`'s stapled certificates
 * on `loop` (the main loop: one fetch per certificate for every worker),
 * now for those without a response, before expiry for the others.
 * Stops when the server is freed, which must then happen on that loop's
 * thread.  Returns 0 or -ENOMEM. */
int tls_server_stapling_start(struct tls_server *server, corral_loop *loop);
/* Stops those fetches (on that loop's thread): a configuration being
 * replaced leaves them to the next one.  Its responses serve on. */
void tls_server_stapling_stop(struct tls_server *server);
/* Gives a server not serving yet the OCSP responses `from` (the previous
 * configuration's) holds for the same certificates. */
void tls_server_take_staples(struct tls_server *server, struct tls_server *from);
const struct tls_stapling_stats *tls_server_stapling_stats(const struct tls_server *server);

/* OpenSSL writes to the socket with write(2): a process using TLS must
 * ignore SIGPIPE. */

/* Makes `conn`, just accepted, speak TLS as the server (from on_open).
 * Its counters go to its worker's tls_stats (none outside a worker, or for
 * a worker index past the count given to tls_server_new()).  Returns 0 or
 * -ENOMEM. */
int tls_server_accept(struct tls_server *server, corral_conn *conn);

/* Readies an established server-side TLS connection, detached from its
 * worker (corral_conn_detach()), for worker `worker` of `server` (NULL: a
 * site without TLS now): its counters go there, and it lets go of its old
 * loop.  The handshake is over and renegotiation is refused, so nothing of
 * the server it was accepted by is used again. */
void tls_conn_rebind(corral_conn *conn, struct tls_server *server, unsigned worker);

/* The counters of worker `worker` (NULL past the server's worker count).
 * Any thread may read them with relaxed atomic loads. */
const struct tls_stats *tls_server_stats(const struct tls_server *server, unsigned worker);

/* Whether kernel TLS can be used here: NULL, or why not. */
const char *tls_ktls_unavailable(void);

/* TLS towards an upstream: a location's proxy_tls_* directives. */
struct tls_client_conf {
    bool verify;             /* proxy_tls_verify */
    const char *ca_file;     /* proxy_tls_trusted_certificate; NULL: the system's
                                default store */
    const char *server_name; /* proxy_tls_name: SNI and the name verified; an IP
                                address is verified as one and sent no SNI */
    bool http2;              /* offer ALPN h2 (proxy_http_version 2, grpcs://),
                                else http/1.1 */
    /* proxy_tls_certificate and proxy_tls_certificate_key: the certificate
     * (PEM, the leaf then its chain) and key shown to an upstream that asks
     * for one; both NULL: none */
    const char *certificate, *certificate_key;
};

#define TLS_CLIENT_CONF_DEFAULT ((struct tls_client_conf){.verify = true})

struct tls_client;

/* TLS towards one upstream of `server_count` servers, for `workers`
 * workers (each keeps the last session of each server for resumption).
 * Returns 0, or -EINVAL with `error` set (an unreadable CA file, a client
 * certificate or key that does not load, or a key that is not the
 * certificate's). */
int tls_client_new(const struct tls_client_conf *conf, unsigned workers, size_t server_count,
                   struct tls_client **out, char *error, size_t error_len);
void tls_client_free(struct tls_client *client);

/* Makes `conn`, just connected to server `server` of the upstream, speak
 * TLS as the client (from on_open).  With `resume`, the connection offers
 * the session its worker kept for the server and keeps its own; without,
 * it does neither: the health checks, which run on the main loop beside
 * the workers, must not share a worker's slot.  Returns 0 or -ENOMEM. */
int tls_client_connect(struct tls_client *client, corral_conn *conn, size_t server, bool resume);

/* Has `fn` called when the handshake of `conn`, a server connection that
 * tls_server_accept() made, completes: from inside the read or write that
 * completed it, before any bytes are delivered, for a layer that waits for
 * the handshake before doing anything else (the stream proxy connects to
 * its server only then, as nginx does).  The read goes on after it: what
 * came with the handshake (bytes, or the peer's end) is delivered as
 * usual, unless `fn` paused the reads.  A handshake that fails calls
 * nothing: the connection closes with an error. */
void tls_conn_on_established(corral_conn *conn, void (*fn)(corral_conn *conn));

/* Whether `conn` (speaking TLS) has finished its handshake. */
bool tls_established(const corral_conn *conn);

/* Whether a certificate or key file name holds a variable
 * ($ssl_server_name: the pair is read by SNI name, tls_sni_certs.c). */
bool tls_sni_certs_template(const char *path);

/* The file a certificate or key `template` names for the SNI name `sni`:
 * the name made safe for a file name (a host name's letters, digits, '-'
 * and '.', lowercase, no empty label) in place of its variables.
 * Returns false for an unsafe name, another variable, or no room. */
bool tls_sni_certs_path(const char *template, const char *sni, char *out, size_t size);

/* Whether the client of a TLS server connection began with bytes that
 * cannot start a TLS record (plain HTTP to the TLS port): its bytes then
 * pass unencrypted both ways, so that the layer above can answer and
 * close, as nginx answers 400.  False for other connections. */
bool tls_conn_plaintext(const corral_conn *conn);

/* The protocol of `conn`'s TLS session ("TLSv1.3"), its cipher in
 * OpenSSL's name ("TLS_AES_128_GCM_SHA256") and the name the client sent
 * by SNI: NULL for a connection without TLS, before its handshake, or (the
 * name) when the client sent none.  For $ssl_protocol, $ssl_cipher and
 * $ssl_server_name. */
const char *tls_conn_protocol(const corral_conn *conn);
const char *tls_conn_cipher(const corral_conn *conn);
const char *tls_conn_server_name(const corral_conn *conn);

/* The ALPN protocol agreed for `conn`'s established TLS session, `*len`
 * bytes, not NUL-terminated: NULL without TLS, before the handshake, or
 * when none was agreed. */
const unsigned char *tls_conn_alpn(const corral_conn *conn, unsigned *len);

/* Whether the established TLS session of `conn` agreed on ALPN `name`
 * ("h2"): false without TLS, before the handshake, or when the client
 * offered nothing we speak. */
bool tls_conn_alpn_is(const corral_conn *conn, const char *name);

#endif
