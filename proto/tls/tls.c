/*
 * tls.c: TLS over OpenSSL as a libcorral transport.  OpenSSL reads and
 * writes the non-blocking socket itself (socket BIOs, which are what let it
 * hand record encryption to the kernel); the handshake is driven from
 * whichever of read or write the connection tries first, and WANT_READ or
 * WANT_WRITE become -EAGAIN, so the connection simply waits for the socket
 * like it would for plain bytes.  The transport and the server side are
 * here; the client side is in tls_client.c.
 */
#include "proto/tls/tls_internal.h"
#include "proto/tls/acme_challenge.h"
#include "proto/counter.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const tls_handshake_kind_names[TLS_HANDSHAKE_KINDS] = {"full", "resumed"};
const char *const tls_error_kind_names[TLS_ERROR_KINDS] = {"protocol", "timeout"};

/* TLS 1.2 suites with forward secrecy and AEAD only. */
#define DEFAULT_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20"

const char *tls_openssl_reason(void)
{
    const char *reason = ERR_reason_error_string(ERR_peek_last_error());
    return reason != NULL ? reason : "unknown error";
}

void tls_clear_errors(void)
{
    /* ERR_clear_error() wipes every slot of the thread's queue (some 800
     * instructions in OpenSSL 3.0) even when it is empty, as it nearly
     * always is: twice a request on the transport.  ERR_peek_error(), the
     * test SSL_get_error() itself makes, costs a fraction of that. */
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

struct tls_watch;

struct tls_server {
    tls_sni_select_fn sni_select; /* may be NULL */
    void *sni_arg;
    SSL_CTX **contexts; /* one per vhost */
    size_t context_count;
    /* NULL: no vhost has tls_certificate_watch on, and the contexts never
     * change; else a watched vhost's may be replaced (server_context()). */
    struct tls_watch *watch;
    struct tls_stats *stats; /* one per worker */
    unsigned workers;
    uint32_t handshake_timeout_ms;
    struct ticket_keys ticket_keys;
    struct tls_sni_certs **sni_certs; /* per vhost: NULL, or its certificates named by SNI */
    corral_timer *sni_timer;          /* the main loop's: tls_sni_certs_staple() */
    corral_loop *sni_loop;
    struct tls_staple **staples; /* tls_stapling: one per certificate stapled */
    size_t staple_count;
    struct tls_stapling_stats stapling_stats;
    bool stream;         /* a stream listen: `alpn`, not HTTP's */
    unsigned char *alpn; /* tls_server_conf.alpn, copied; NULL: none */
    unsigned alpn_len;
};

void tls_server_take_ticket_keys(struct tls_server *server, struct tls_server *from)
{
    tls_tickets_take(&server->ticket_keys, &from->ticket_keys);
}

static int on_ticket_key(SSL *ssl, unsigned char key_name[16], unsigned char *iv,
                         EVP_CIPHER_CTX *cipher, EVP_MAC_CTX *mac, int encrypt)
{
    struct tls_server *server = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    return tls_tickets_key_cb(&server->ticket_keys, ssl, key_name, iv, cipher, mac, encrypt);
}

/* -------------------------------------------------------------- transport */

/* Maps a failed OpenSSL call to the transport's return values. */
static ssize_t tls_result(struct tls_conn *tc, int ret)
{
    int saved_errno = errno;
    switch (SSL_get_error(tc->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN: return 0;
    case SSL_ERROR_SYSCALL: return saved_errno != 0 ? -saved_errno : -ECONNRESET;
    default: return -EPROTO;
    }
}

static void tls_on_established(struct tls_conn *tc)
{
    tc->established = true;
    if (tc->client != NULL)
        return;
    corral_timer_stop(tc->handshake_timer);
    if (tc->stats != NULL) {
        counter_inc(&tc->stats->handshakes[SSL_session_reused(tc->ssl) ? TLS_HANDSHAKE_RESUMED
                                                                       : TLS_HANDSHAKE_FULL]);
        if (BIO_get_ktls_send(SSL_get_wbio(tc->ssl)))
            counter_inc(&tc->stats->ktls);
    }
    if (tc->on_established != NULL)
        tc->on_established(tc->conn);
}

static void tls_on_handshake_failed(struct tls_conn *tc)
{
    if (tc->client == NULL) {
        if (tc->stats != NULL)
            counter_inc(&tc->stats->errors[TLS_ERROR_PROTOCOL]);
        corral_log(CORRAL_LOG_DEBUG, "TLS handshake failed: %s", tls_openssl_reason());
        return;
    }
    const char *name = tc->client->server_name;
    long verify = SSL_get_verify_result(tc->ssl);
    if (verify != X509_V_OK)
        corral_log(CORRAL_LOG_ERROR, "upstream TLS: certificate verify failed for \"%s\": %s", name,
                   X509_verify_cert_error_string(verify));
    else
        corral_log(CORRAL_LOG_ERROR, "upstream TLS handshake with \"%s\" failed: %s", name,
                   tls_openssl_reason());
}

/* 0 once established, -EAGAIN while it waits for the socket, or an error
 * (never 0 for end of stream: a peer gone mid-handshake is a reset). */
static ssize_t tls_handshake(struct tls_conn *tc)
{
    tc->first_seen = true; /* OpenSSL reads from here on */
    tls_clear_errors();
    errno = 0;
    int ret = SSL_do_handshake(tc->ssl);
    if (ret == 1) {
        tls_on_established(tc);
        return 0;
    }
    ssize_t result = tls_result(tc, ret);
    if (result == -EAGAIN)
        return result;
    if (result == -EPROTO)
        tls_on_handshake_failed(tc);
    return result == 0 ? -ECONNRESET : result;
}

/* Looks at the client's first byte, still in the socket, before OpenSSL
 * reads anything: a handshake record (0x16) or an SSLv2-style hello (high
 * bit set) is TLS, anything else (a method's first letter) is plain text,
 * as nginx tells them apart.  Returns -EAGAIN while there is no byte yet:
 * OpenSSL must not read past it meanwhile, or a later record's first byte
 * would be the one looked at. */
static int look_at_first_byte(struct tls_conn *tc)
{
    unsigned char first;
    ssize_t n;
    while ((n = recv(corral_conn_fd(tc->conn), &first, 1, MSG_PEEK)) == -1 && errno == EINTR)
        ;
    if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return -EAGAIN;
    tc->first_seen = true;
    if (n != 1 || first == 0x16 || (first & 0x80) != 0)
        return 0; /* TLS, or gone: the handshake tells */
    tc->plaintext = true;
    corral_timer_stop(tc->handshake_timer); /* the layer above times it now */
    if (tc->stats != NULL)
        counter_inc(&tc->stats->errors[TLS_ERROR_PROTOCOL]);
    return 0;
}

static ssize_t tls_read(corral_conn *conn, void *buf, size_t len)
{
    struct tls_conn *tc = corral_conn_transport_state(conn);
    if (!tc->first_seen && tc->client == NULL) {
        int err = look_at_first_byte(tc);
        if (err != 0)
            return err;
    }
    if (tc->plaintext)
        return corral_plain_transport.read(conn, buf, len);
    if (!tc->established) {
        ssize_t result = tls_handshake(tc);
        if (result != 0)
            return result;
    }
    /* A record at a time holds at most 16 KiB: the buffer is filled with
     * as many as are there, so that the caller forwards one large piece
     * (a direct write from this buffer, see corral_conn_writev()) rather
     * than small ones it would copy to batch; it stops where the socket
     * came back short with nothing left buffered (see tls_drained()), not
     * at a read that would only say EAGAIN.  What ends the stream, or
     * fails, after some bytes comes again with the next read. */
    size_t total = 0;
    tc->end_deferred = false;
    while (total < len) {
        size_t n;
        tls_clear_errors();
        errno = 0;
        int ret = SSL_read_ex(tc->ssl, (char *)buf + total, len - total, &n);
        if (ret != 1) {
            ssize_t result = tls_result(tc, ret);
            /* An end or a failure after bytes is told by the next read,
             * which must come even though the socket is empty: OpenSSL
             * has taken the record that said it (tls_drained()). */
            tc->end_deferred = total > 0 && result != -EAGAIN;
            return total > 0 ? (ssize_t)total : result;
        }
        total += n;
        if (tc->socket_drained && !SSL_has_pending(tc->ssl))
            break;
    }
    return (ssize_t)total;
}

/* With kTLS, watches the reads of OpenSSL's socket BIO: one that returned
 * fewer bytes than OpenSSL asked for (with read-ahead, the room left in
 * its record buffer) emptied the socket, as socket_read() notes without. */
static long tls_observe_bio(BIO *bio, int oper, const char *argp, size_t len, int argi, long argl,
                            int ret, size_t *processed)
{
    (void)argp;
    (void)argi;
    (void)argl;
    if (oper == (BIO_CB_READ | BIO_CB_RETURN)) {
        struct tls_conn *tc = (struct tls_conn *)BIO_get_callback_arg(bio);
        tc->socket_drained = ret > 0 && processed != NULL && *processed < len;
    }
    return ret;
}

static ssize_t tls_writev(corral_conn *conn, const struct iovec *iov, int iovcnt)
{
    struct tls_conn *tc = corral_conn_transport_state(conn);
    if (tc->plaintext)
        return corral_plain_transport.writev(conn, iov, iovcnt);
    if (!tc->established) {
        ssize_t result = tls_handshake(tc);
        if (result != 0)
            return result;
    }
    /* With SSL_MODE_ENABLE_PARTIAL_WRITE, SSL_write_ex() returns after
     * each record (16 KiB): it is called again until the socket is full,
     * so that a large write leaves from the caller's memory instead of
     * having the rest copied into the connection's output buffer.  After a
     * refusal the same bytes come again (from that buffer: see
     * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), as OpenSSL requires. */
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++) {
        const char *base = iov[i].iov_base;
        for (size_t off = 0; off < iov[i].iov_len;) {
            size_t n;
            tls_clear_errors();
            errno = 0;
            int ret = SSL_write_ex(tc->ssl, base + off, iov[i].iov_len - off, &n);
            if (ret != 1) {
                ssize_t result = tls_result(tc, ret);
                if (total > 0 && result == -EAGAIN)
                    return (ssize_t)total;
                return result == 0 ? -EPIPE : result;
            }
            off += n;
            total += n;
        }
    }
    return (ssize_t)total;
}

/* close_notify, then the TCP half-close; the peer's close_notify is not
 * waited for. */
static int tls_shutdown(corral_conn *conn)
{
    struct tls_conn *tc = corral_conn_transport_state(conn);
    if (tc->established) {
        tls_clear_errors();
        SSL_shutdown(tc->ssl);
    }
    return corral_plain_transport.shutdown(conn);
}

static void tls_destroy(corral_conn *conn)
{
    struct tls_conn *tc = corral_conn_transport_state(conn);
    /* A connection closed without close_notify (the peer left first, or a
     * close without lingering) is still a good session: OpenSSL would drop
     * it from the cache, and stop a client from resuming it, unless told
     * the shutdown happened. */
    if (tc->established)
        SSL_set_shutdown(tc->ssl, SSL_get_shutdown(tc->ssl) | SSL_SENT_SHUTDOWN);
    SSL_free(tc->ssl);
    corral_timer_free(tc->handshake_timer);
    free(tc);
}

/* Records OpenSSL has read but not yet returned count as input: the socket
 * may be empty while a whole request waits decrypted. */
static bool tls_input_pending(const corral_conn *conn)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    return SSL_has_pending(tc->ssl) || corral_plain_transport.input_pending(conn);
}

/* Nothing decrypted or buffered is left and the socket came back short:
 * another SSL_read would only read EAGAIN from it. */
static bool tls_drained(const corral_conn *conn)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    return tc->socket_drained && !SSL_has_pending(tc->ssl) && !tc->end_deferred;
}

const struct corral_transport tls_transport = {
    .name = "tls",
    .layered = true,
    .read = tls_read,
    .writev = tls_writev,
    .shutdown = tls_shutdown,
    .destroy = tls_destroy,
    .input_pending = tls_input_pending,
    .drained = tls_drained,
};

/* Without kTLS, OpenSSL reads and writes the socket through a BIO method
 * of the transport's own, which does what OpenSSL's socket BIO does on a
 * connected socket and notes a short read itself (see tls_drained()).
 * OpenSSL's would need a callback for that, which OpenSSL then calls
 * around every BIO_ctrl() it makes on the BIO as well, several a record.
 * kTLS needs OpenSSL's socket BIO, which tls_observe_bio() watches. */
static int socket_read(BIO *bio, char *buf, int len)
{
    struct tls_conn *tc = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    errno = 0;
    ssize_t n = read(corral_conn_fd(tc->conn), buf, (size_t)len);
    tc->socket_drained = n > 0 && n < len;
    if (n <= 0 && BIO_sock_should_retry((int)n))
        BIO_set_retry_read(bio);
    else if (n == 0)
        tc->socket_eof = true;
    return (int)n;
}

static int socket_write(BIO *bio, const char *buf, int len)
{
    struct tls_conn *tc = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    errno = 0;
    ssize_t n = write(corral_conn_fd(tc->conn), buf, (size_t)len);
    if (n <= 0 && BIO_sock_should_retry((int)n))
        BIO_set_retry_write(bio);
    return (int)n;
}

/* Answers what OpenSSL asks a socket BIO on the way; anything else (kTLS,
 * pending bytes) is 0, as a socket BIO without kTLS answers it. */
static long socket_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
    (void)num;
    const struct tls_conn *tc = BIO_get_data(bio);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
    case BIO_CTRL_DUP: return 1;
    case BIO_CTRL_EOF: return tc->socket_eof;
    case BIO_C_GET_FD: {
        int fd = corral_conn_fd(tc->conn);
        if (ptr != NULL)
            *(int *)ptr = fd;
        return fd;
    }
    default: return 0;
    }
}

static BIO_METHOD *socket_method;
static pthread_once_t socket_method_once = PTHREAD_ONCE_INIT;

/* Made once for the process and never freed: every connection's BIO
 * points to it. */
static void socket_method_make(void)
{
    BIO_METHOD *method = BIO_meth_new(
        BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "corral socket");
    if (method != NULL && (BIO_meth_set_read(method, socket_read) != 1 ||
                           BIO_meth_set_write(method, socket_write) != 1 ||
                           BIO_meth_set_ctrl(method, socket_ctrl) != 1)) {
        BIO_meth_free(method);
        method = NULL;
    }
    socket_method = method;
}

/* Gives OpenSSL the connection's socket.  False when out of memory. */
static bool attach_socket(struct tls_conn *tc)
{
    if ((SSL_get_options(tc->ssl) & SSL_OP_ENABLE_KTLS) != 0) {
        if (SSL_set_fd(tc->ssl, corral_conn_fd(tc->conn)) != 1)
            return false;
        BIO *rbio = SSL_get_rbio(tc->ssl);
        BIO_set_callback_arg(rbio, (char *)tc);
        BIO_set_callback_ex(rbio, tls_observe_bio);
        return true;
    }
    pthread_once(&socket_method_once, socket_method_make);
    BIO *bio = socket_method != NULL ? BIO_new(socket_method) : NULL;
    if (bio == NULL)
        return false;
    BIO_set_data(bio, tc);
    BIO_set_init(bio, 1);
    SSL_set_bio(tc->ssl, bio, bio); /* takes its one reference for both */
    return true;
}

struct tls_conn *tls_conn_new(SSL_CTX *ctx, corral_conn *conn)
{
    struct tls_conn *tc = calloc(1, sizeof(*tc));
    if (tc == NULL)
        return NULL;
    tc->conn = conn;
    tc->ssl = SSL_new(ctx);
    if (tc->ssl == NULL || !attach_socket(tc)) {
        SSL_free(tc->ssl);
        free(tc);
        return NULL;
    }
    SSL_set_app_data(tc->ssl, tc);
    return tc;
}

void tls_conn_on_established(corral_conn *conn, void (*fn)(corral_conn *conn))
{
    struct tls_conn *tc = corral_conn_transport_state(conn);
    assert(tc != NULL && tc->client == NULL); /* a server connection tls_server_accept() made */
    tc->on_established = fn;
}

bool tls_conn_plaintext(const corral_conn *conn)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    return tc != NULL && tc->plaintext;
}

bool tls_established(const corral_conn *conn)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    return tc != NULL && tc->established;
}

const char *tls_conn_protocol(const corral_conn *conn)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    return tc != NULL && tc->established ? SSL_get_version(tc->ssl) : NULL;
}

const char *tls_conn_cipher(const corral_conn *conn)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    return tc != NULL && tc->established ? SSL_get_cipher_name(tc->ssl) : NULL;
}

const char *tls_conn_server_name(const corral_conn *conn)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    return tc != NULL && tc->established ? SSL_get_servername(tc->ssl, TLSEXT_NAMETYPE_host_name)
                                         : NULL;
}

const unsigned char *tls_conn_alpn(const corral_conn *conn, unsigned *len)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    if (tc == NULL || !tc->established)
        return NULL;
    const unsigned char *alpn;
    SSL_get0_alpn_selected(tc->ssl, &alpn, len);
    return alpn != NULL && *len > 0 ? alpn : NULL;
}

bool tls_conn_alpn_is(const corral_conn *conn, const char *name)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    if (tc == NULL || !tc->established)
        return false;
    const unsigned char *alpn;
    unsigned len;
    SSL_get0_alpn_selected(tc->ssl, &alpn, &len);
    return alpn != NULL && len == strlen(name) && memcmp(alpn, name, len) == 0;
}

/* ----------------------------------------------------------------- server */

static void on_handshake_timeout(corral_timer *timer, void *arg)
{
    (void)timer;
    struct tls_conn *tc = arg;
    if (tc->stats != NULL)
        counter_inc(&tc->stats->errors[TLS_ERROR_TIMEOUT]);
    corral_conn_abort(tc->conn, -ECONNABORTED);
}

const struct tls_stats *tls_server_stats(const struct tls_server *server, unsigned worker)
{
    return worker < server->workers ? &server->stats[worker] : NULL;
}

static void watch_poll(struct tls_server *server);

/* Vhost `index`'s context: a watched one may be replaced by another
 * worker at any time (the old one lives as long as the server). */
static SSL_CTX *server_context(const struct tls_server *server, size_t index)
{
    return __atomic_load_n(&server->contexts[index], __ATOMIC_ACQUIRE);
}

int tls_server_accept(struct tls_server *server, corral_conn *conn)
{
    if (server->watch != NULL)
        watch_poll(server);
    struct tls_conn *tc = tls_conn_new(server_context(server, 0), conn);
    if (tc == NULL)
        return -ENOMEM;
    if (corral_timer_new(corral_conn_loop(conn), on_handshake_timeout, tc, &tc->handshake_timer) !=
        0) {
        SSL_free(tc->ssl);
        free(tc);
        return -ENOMEM;
    }
    corral_worker *worker = corral_conn_worker(conn);
    if (worker != NULL && corral_worker_index(worker) < server->workers)
        tc->stats = &server->stats[corral_worker_index(worker)];
    SSL_set_accept_state(tc->ssl);
    corral_timer_start(tc->handshake_timer, server->handshake_timeout_ms);
    corral_conn_set_transport(conn, &tls_transport, tc);
    return 0;
}

void tls_conn_rebind(corral_conn *conn, struct tls_server *server, unsigned worker)
{
    struct tls_conn *tc = corral_conn_transport_state(conn);
    assert(tc->established && tc->client == NULL);
    /* Stopped at the handshake's end; it belongs to the loop left behind. */
    corral_timer_free(tc->handshake_timer);
    tc->handshake_timer = NULL;
    tc->stats = server != NULL && worker < server->workers ? &server->stats[worker] : NULL;
}

/* The host_name in a ClientHello's server_name extension (RFC 6066 §3), or
 * false when there is none or it is malformed (the default vhost's; OpenSSL
 * refuses a malformed one when it parses the extension itself). */
static bool client_hello_server_name(SSL *ssl, const char **name, size_t *len)
{
    const unsigned char *p;
    size_t left;
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &left) != 1 || left < 2)
        return false;
    size_t list = (size_t)p[0] << 8 | p[1];
    if (list != left - 2)
        return false;
    p += 2;
    left -= 2;
    while (left >= 3) {
        size_t n = (size_t)p[1] << 8 | p[2];
        if (n > left - 3)
            return false;
        if (p[0] == TLSEXT_NAMETYPE_host_name) {
            *name = (const char *)p + 3;
            *len = n;
            return n > 0;
        }
        p += 3 + n;
        left -= 3 + n;
    }
    return false;
}

/* SNI picks the virtual host's certificates, client verification,
 * protocols and ciphers, by the selector's rules.  This runs on the ClientHello before OpenSSL
 * looks at the session it offers (the servername callback runs after), and SSL_set_SSL_CTX() gives
 * the SSL the new context's session id context: a session resumes only if it was made under the
 * picked vhost's (see session_id_context()). */
static void acme_tls_alpn_hello(SSL *ssl, const char *name, size_t len);

static int on_client_hello(SSL *ssl, int *alert, void *arg)
{
    struct tls_server *server = arg;
    const char *name;
    size_t len, index = 0;
    if (server->sni_select != NULL && client_hello_server_name(ssl, &name, &len))
        index = server->sni_select(server->sni_arg, name, len);
    if (index >= server->context_count)
        index = 0; /* a selector's mistake gets the default, not a crash */
    SSL_CTX *ctx = server_context(server, index);
    /* Called again after a HelloRetryRequest, with the same name. */
    if (SSL_get_SSL_CTX(ssl) != ctx && SSL_set_SSL_CTX(ssl, ctx) == NULL) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    /* SSL_set_SSL_CTX() takes the certificates, the CA store that verifies
     * the client's, the CA list sent to it and the cipher list (the SSL
     * has none of its own) from the new context, but not the verify mode
     * or the versions, which the SSL copied from the first when it was
     * made.  The version is chosen after this callback returns. */
    SSL_set_verify(ssl, SSL_CTX_get_verify_mode(ctx), SSL_CTX_get_verify_callback(ctx));
    SSL_set_verify_depth(ssl, SSL_CTX_get_verify_depth(ctx));
    if (SSL_set_min_proto_version(ssl, SSL_CTX_get_min_proto_version(ctx)) != 1 ||
        SSL_set_max_proto_version(ssl, SSL_CTX_get_max_proto_version(ctx)) != 1) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    /* An ACME CA validating TLS-ALPN-01 (RFC 8737) gets the challenge
     * certificate for its name; otherwise one relaxed load. */
    if (acme_challenge_alpn_any() && client_hello_server_name(ssl, &name, &len))
        acme_tls_alpn_hello(ssl, name, len);
    return SSL_CLIENT_HELLO_SUCCESS;
}

/* The ClientHello offers ALPN acme-tls/1: the challenge certificate for
 * `name`, if one is being validated. */
static void acme_tls_alpn_hello(SSL *ssl, const char *name, size_t len)
{
    const unsigned char *p;
    size_t left;
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &p,
                                  &left) != 1 ||
        left < 2 || ((size_t)p[0] << 8 | p[1]) != left - 2 || left - 2 > UINT_MAX)
        return;
    if (acme_challenge_alpn_offered(p + 2, (unsigned)(left - 2)))
        acme_challenge_alpn_use(ssl, name, len);
}

/* The vhost was chosen on the ClientHello; this only accepts the name, so
 * that the client is told and a TLS 1.2 session keeps it (for
 * SSL_get_servername()). */
static int on_server_name(SSL *ssl, int *alert, void *arg)
{
    (void)ssl;
    (void)alert;
    (void)arg;
    return SSL_TLSEXT_ERR_OK;
}

/* What the server offers, most preferred first: `arg` is one of these. */
static const unsigned char alpn_h2_http11[] = "\x02h2\x08http/1.1";

static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *out_len,
                   const unsigned char *offered, unsigned int offered_len, void *arg)
{
    (void)ssl;
    const unsigned char *ours = arg != NULL ? alpn_h2_http11 : alpn_http11;
    unsigned ours_len = arg != NULL ? sizeof(alpn_h2_http11) - 1 : sizeof(alpn_http11) - 1;
    /* The CA validating TLS-ALPN-01 offers acme-tls/1 alone (RFC 8737). */
    if (acme_challenge_alpn_any() && acme_challenge_alpn_offered(offered, offered_len)) {
        ours = (const unsigned char *)"\x0a" ACME_TLS_ALPN;
        ours_len = 11;
    }
    unsigned char *selected;
    if (SSL_select_next_proto(&selected, out_len, ours, ours_len, offered, offered_len) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK; /* go on without ALPN, as HTTP/1.1 */
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
}

/* A stream listen's ALPN (tls_alpn): the server's order, and no
 * protocol outside its list: a client that offers only others is refused
 * with no_application_protocol, as nginx's stream module does. */
static int on_stream_alpn(SSL *ssl, const unsigned char **out, unsigned char *out_len,
                          const unsigned char *offered, unsigned int offered_len, void *arg)
{
    (void)ssl;
    const struct tls_server *server = arg;
    unsigned char *selected;
    if (SSL_select_next_proto(&selected, out_len, server->alpn, server->alpn_len, offered,
                              offered_len) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
}

struct loader {
    const struct tls_report *report;
    size_t vhost, index;
};

static void report(const struct loader *loader, enum tls_conf_item item, bool warning,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void report(const struct loader *loader, enum tls_conf_item item, bool warning,
                   const char *fmt, ...)
{
    char message[512]; /* vsnprintf() cuts a long path in it, never overruns */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    loader->report->report(loader->report->arg, item, loader->vhost, loader->index, warning,
                           message);
}

/* Opened, not access(): access() judges by the real uid without the
 * capabilities a reload reads with after a privilege drop. */
static bool readable(const struct loader *loader, enum tls_conf_item item, const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd != -1) {
        close(fd);
        return true;
    }
    report(loader, item, false, "cannot read \"%s\": %s", path, strerror(errno));
    return false;
}

static void check_validity(const struct loader *loader, X509 *cert, const char *path)
{
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0)
        report(loader, TLS_CONF_CERTIFICATE, true, "certificate \"%s\" has expired", path);
    else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0)
        report(loader, TLS_CONF_CERTIFICATE, true, "certificate \"%s\" is not valid yet", path);
}

static EVP_PKEY *read_key(const char *path)
{
    BIO *bio = BIO_new_file(path, "r");
    if (bio == NULL)
        return NULL;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
    BIO_free(bio);
    return key;
}

static int load_certificate(SSL_CTX *ctx, const struct loader *loader,
                            const struct tls_certificate_files *files)
{
    if (!readable(loader, TLS_CONF_CERTIFICATE, files->certificate))
        return -EINVAL;
    tls_clear_errors();
    if (SSL_CTX_use_certificate_chain_file(ctx, files->certificate) != 1) {
        report(loader, TLS_CONF_CERTIFICATE, false, "cannot load certificate \"%s\": %s",
               files->certificate, tls_openssl_reason());
        return -EINVAL;
    }
    X509 *cert = SSL_CTX_get0_certificate(ctx);
    check_validity(loader, cert, files->certificate);
    if (!readable(loader, TLS_CONF_KEY, files->key))
        return -EINVAL;
    tls_clear_errors();
    EVP_PKEY *key = read_key(files->key);
    if (key == NULL) {
        report(loader, TLS_CONF_KEY, false, "cannot load key \"%s\": %s", files->key,
               tls_openssl_reason());
        return -EINVAL;
    }
    int err = 0;
    if (X509_check_private_key(cert, key) != 1) {
        report(loader, TLS_CONF_KEY, false, "key \"%s\" does not match certificate \"%s\"",
               files->key, files->certificate);
        err = -EINVAL;
    } else if (SSL_CTX_use_PrivateKey(ctx, key) != 1) {
        report(loader, TLS_CONF_KEY, false, "cannot use key \"%s\": %s", files->key,
               tls_openssl_reason());
        err = -EINVAL;
    }
    EVP_PKEY_free(key);
    return err;
}

/* Sessions resume only where they were made with the same client
 * verification: a session from a vhost that asks for no certificate must
 * not let a client into one that does (a resumption asks for none).  The
 * id is "corral" without verification, the one every context had before
 * there was any, else a SHA-256 of the mode and the CA certificates, so
 * that it stays the same across a reload that keeps them. */
static int session_id_context(SSL_CTX *ctx)
{
    int mode = SSL_CTX_get_verify_mode(ctx);
    if (mode == SSL_VERIFY_NONE)
        return SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"corral", 6) == 1
                   ? 0
                   : -EINVAL;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char digest[EVP_MAX_MD_SIZE], mode_byte = (unsigned char)mode;
    unsigned digest_len = 0;
    int err = md != NULL && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
                      EVP_DigestUpdate(md, &mode_byte, 1) == 1
                  ? 0
                  : -EINVAL;
    /* The store's objects are sorted, so the same certificates hash alike. */
    STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
    for (int i = 0; err == 0 && i < sk_X509_OBJECT_num(objects); i++) {
        X509 *cert = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i));
        unsigned char *der = NULL;
        int len = cert != NULL ? i2d_X509(cert, &der) : 0;
        if (len < 0 || EVP_DigestUpdate(md, der, (size_t)len) != 1)
            err = -EINVAL;
        OPENSSL_free(der);
    }
    if (err == 0 &&
        (EVP_DigestFinal_ex(md, digest, &digest_len) != 1 || digest_len > SSL_MAX_SID_CTX_LENGTH ||
         SSL_CTX_set_session_id_context(ctx, digest, digest_len) != 1))
        err = -EINVAL;
    EVP_MD_CTX_free(md);
    return err;
}

/* Everything but the certificates, client verification, versions and
 * ciphers is the same in every context of an address: OpenSSL takes some
 * settings from the context the handshake began with and others from the
 * one SNI switched to (on_client_hello() copies the rest). */
static SSL_CTX *server_context_new(struct tls_server *server, const struct tls_server_conf *conf,
                                   const struct tls_vhost_conf *vhost, const struct loader *loader)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_app_data(ctx, server);
    SSL_CTX_set_min_proto_version(ctx, vhost->protocols & TLS_PROTOCOL_1_2 ? TLS1_2_VERSION
                                                                           : TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, vhost->protocols & TLS_PROTOCOL_1_3 ? TLS1_3_VERSION
                                                                           : TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                                 (conf->ktls ? SSL_OP_ENABLE_KTLS : 0) |
                                 (conf->session_tickets ? 0 : SSL_OP_NO_TICKET));
    /* The connection retries a write with its buffer wherever it then is;
     * idle connections give their record buffers back.  Read-ahead takes
     * whatever the socket holds in one read instead of a record header and
     * then its body, and a short read then says the socket is empty. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_client_hello_cb(ctx, on_client_hello, server);
    SSL_CTX_set_tlsext_servername_callback(ctx, on_server_name);
    /* The argument only says whether h2 is offered too. */
    if (server->stream) {
        if (server->alpn != NULL)
            SSL_CTX_set_alpn_select_cb(ctx, on_stream_alpn, server);
    } else
        SSL_CTX_set_alpn_select_cb(ctx, on_alpn, conf->http2 ? (void *)alpn_h2_http11 : NULL);
    if (conf->session_cache > 0) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_sess_set_cache_size(ctx, conf->session_cache);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    SSL_CTX_set_timeout(ctx,
                        conf->session_timeout_ms >= 1000 ? conf->session_timeout_ms / 1000 : 1);
    if (conf->session_tickets)
        SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, on_ticket_key);
    else if (conf->session_cache == 0)
        SSL_CTX_set_num_tickets(ctx, 0);

    tls_clear_errors();
    if (SSL_CTX_set_cipher_list(ctx, vhost->ciphers != NULL ? vhost->ciphers : DEFAULT_CIPHERS) !=
        1) {
        report(loader, TLS_CONF_CIPHERS, false, "no usable cipher in \"%s\"", vhost->ciphers);
        goto fail;
    }
    if (vhost->ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx, vhost->ciphersuites) != 1) {
        report(loader, TLS_CONF_CIPHERSUITES, false, "no usable TLS 1.3 cipher suite in \"%s\"",
               vhost->ciphersuites);
        goto fail;
    }
    if (vhost->client_ca != NULL) {
        if (!readable(loader, TLS_CONF_CLIENT_CA, vhost->client_ca))
            goto fail;
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(vhost->client_ca);
        if (names == NULL || SSL_CTX_load_verify_locations(ctx, vhost->client_ca, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            report(loader, TLS_CONF_CLIENT_CA, false, "cannot load CA certificates from \"%s\": %s",
                   vhost->client_ca, tls_openssl_reason());
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        if (vhost->verify_client != TLS_VERIFY_CLIENT_OFF)
            SSL_CTX_set_verify(ctx,
                               SSL_VERIFY_PEER | (vhost->verify_client == TLS_VERIFY_CLIENT_ON
                                                      ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                                      : 0),
                               NULL);
    }
    if (session_id_context(ctx) != 0) {
        report(loader, TLS_CONF_CLIENT_CA, false, "cannot hash the CA certificates of \"%s\": %s",
               vhost->client_ca != NULL ? vhost->client_ca : "", tls_openssl_reason());
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* ------------------------------------------- certificates changed on disk */

/* What says a file changed: an atomic rename gives it a new inode, a
 * write in place a new size or time. */
struct file_sig {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
};

/* A watched vhost: its own copy of what its context is built from, and
 * the files' signatures (certificate and key of each pair) when it was. */
struct watch_vhost {
    size_t index; /* in server->contexts */
    struct tls_vhost_conf conf;
    struct tls_certificate_files *files;
    struct file_sig *sigs;
    /* tls_stapling: the staples of the context serving (one per
     * certificate at most), set by whoever built it; and those the main
     * loop fetches for, which it swaps for them (watch_staples_start()) */
    struct tls_staple **staples, **fetching;
    size_t staple_count, fetching_count;
};

struct tls_watch {
    pthread_mutex_t polling; /* one worker looks at the files at a time */
    /* The contexts replaced: a handshake may still be taking one, so they
     * are freed with the server (one per change, until the next reload). */
    SSL_CTX **retired;
    size_t retired_count;
    struct tls_server_conf conf; /* a copy: the config is gone by then */
    struct watch_vhost *vhosts;
    size_t count;
    _Atomic uint64_t checked_ms; /* the last look: one a second, by one worker */
    /* The staples of certificates loaded again, freed with the server;
     * and the main loop's look at the files and their staples. */
    struct tls_staple **made;
    size_t made_count;
    corral_timer *timer;
    corral_loop *loop;
};

#define WATCH_INTERVAL_MS 1000

static void file_sig(const char *path, struct file_sig *out)
{
    struct stat st;
    *out = (struct file_sig){0};
    if (stat(path, &st) == 0)
        *out = (struct file_sig){st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
}

static bool file_sig_equal(const struct file_sig *a, const struct file_sig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* A problem while serving goes to the log: there is no config to point
 * at, and the old pair serves on. */
static void watch_report(void *arg, enum tls_conf_item item, size_t vhost, size_t index,
                         bool warning, const char *message)
{
    (void)arg, (void)item, (void)vhost, (void)index;
    corral_log(warning ? CORRAL_LOG_WARN : CORRAL_LOG_ERROR, "tls_certificate_watch: %s%s", message,
               warning ? "" : "; the certificate loaded before serves on");
}

/* Whether the certificate `ctx` has just loaded is to be stapled: with
 * tls_stapling, or when it is must-staple, as a client would refuse it
 * without a response (said in the log). */
static bool staple_wanted(const struct tls_vhost_conf *vhost, SSL_CTX *ctx,
                          const struct loader *loader, const struct tls_certificate_files *files)
{
    if (vhost->stapling)
        return true;
    if (!tls_staple_required(SSL_CTX_get0_certificate(ctx)))
        return false;
    report(loader, TLS_CONF_CERTIFICATE, true,
           "\"%s\" is a must-staple certificate (TLS Feature status_request): OCSP stapling is "
           "turned on for it although tls_stapling is off",
           files->certificate);
    return true;
}

/* A staple for the certificate `ctx` has just loaded again: its own, as
 * a response for the one before is not about it.  One that cannot be
 * made leaves the certificate unstapled (logged), not refused. */
static void watch_staple(struct tls_server *server, struct watch_vhost *w, SSL_CTX *ctx,
                         const struct tls_certificate_files *files, struct tls_staple **out)
{
    enum tls_conf_item item;
    char why[512];
    *out = NULL;
    int err = tls_staple_new(ctx, &w->conf, files->certificate, true, &server->stapling_stats, out,
                             &item, why, sizeof(why));
    if (err != 0 || why[0] != '\0')
        corral_log(CORRAL_LOG_WARN, "tls_certificate_watch: %s%s",
                   err == -ENOMEM ? "out of memory" : why,
                   err != 0 ? "; the new certificate is not stapled" : "");
}

/* Builds `w`'s context again from its files; true once it serves. */
static bool watch_rebuild(struct tls_server *server, struct watch_vhost *w)
{
    struct tls_report to_log = {watch_report, NULL};
    struct loader loader = {.report = &to_log, .vhost = w->index};
    SSL_CTX *ctx = server_context_new(server, &server->watch->conf, &w->conf, &loader);
    int err = ctx != NULL ? 0 : -EINVAL;
    struct tls_staple **staples = calloc(w->conf.certificate_count + 1, sizeof(*staples));
    size_t staple_count = 0;
    if (staples == NULL)
        err = -ENOMEM;
    for (size_t i = 0; i < w->conf.certificate_count && err == 0; i++) {
        loader.index = i;
        if (tls_sni_certs_template(w->files[i].certificate) ||
            tls_sni_certs_template(w->files[i].key)) {
            tls_sni_certs_attach(server->sni_certs[w->index], ctx);
            continue;
        }
        err = load_certificate(ctx, &loader, &w->files[i]);
        if (err == 0 && staple_wanted(&w->conf, ctx, &loader, &w->files[i])) {
            watch_staple(server, w, ctx, &w->files[i], &staples[staple_count]);
            /* The same certificate again (its file touched, or rewritten
             * unchanged) keeps the response it had. */
            for (size_t j = 0; staples[staple_count] != NULL && j < w->staple_count; j++)
                tls_staple_take(staples[staple_count], w->staples[j]);
            staple_count += staples[staple_count] != NULL;
        }
    }
    struct tls_watch *watch = server->watch;
    SSL_CTX **retired =
        err == 0 ? realloc(watch->retired, (watch->retired_count + 1) * sizeof(*retired)) : NULL;
    if (retired != NULL)
        watch->retired = retired;
    struct tls_staple **made =
        retired != NULL
            ? realloc(watch->made, (watch->made_count + staple_count + 1) * sizeof(*made))
            : NULL;
    if (made == NULL) {
        for (size_t i = 0; i < staple_count; i++)
            tls_staple_free(staples[i]);
        free(staples);
        SSL_CTX_free(ctx);
        return false;
    }
    watch->made = made;
    memcpy(made + watch->made_count, staples, staple_count * sizeof(*staples));
    watch->made_count += staple_count;
    retired[watch->retired_count++] = server->contexts[w->index];
    __atomic_store_n(&server->contexts[w->index], ctx, __ATOMIC_RELEASE);
    /* The main loop fetches for these from its next look on. */
    memcpy(w->staples, staples, staple_count * sizeof(*staples));
    w->staple_count = staple_count;
    free(staples);
    return true;
}

static void watch_poll(struct tls_server *server)
{
    struct tls_watch *watch = server->watch;
    uint64_t now = corral_monotonic_ns() / 1000000;
    uint64_t last = atomic_load_explicit(&watch->checked_ms, memory_order_relaxed);
    if (now - last < WATCH_INTERVAL_MS || pthread_mutex_trylock(&watch->polling) != 0)
        return;
    if (!atomic_compare_exchange_strong(&watch->checked_ms, &last, now)) {
        pthread_mutex_unlock(&watch->polling);
        return;
    }
    for (size_t v = 0; v < watch->count; v++) {
        struct watch_vhost *w = &watch->vhosts[v];
        bool changed = false;
        for (size_t i = 0; i < 2 * w->conf.certificate_count; i++) {
            struct file_sig sig;
            const struct tls_certificate_files *f = &w->files[i / 2];
            file_sig(i % 2 == 0 ? f->certificate : f->key, &sig);
            if (!file_sig_equal(&sig, &w->sigs[i])) {
                w->sigs[i] = sig; /* tried once per change, loaded or not */
                changed = true;
            }
        }
        if (changed && watch_rebuild(server, w))
            corral_log(CORRAL_LOG_INFO, "tls_certificate_watch: \"%s\" loaded again",
                       w->files[0].certificate);
    }
    pthread_mutex_unlock(&watch->polling);
}

static void watch_free(struct tls_watch *watch)
{
    if (watch == NULL)
        return;
    for (size_t v = 0; v < watch->count; v++) {
        struct watch_vhost *w = &watch->vhosts[v];
        for (size_t i = 0; w->files != NULL && i < w->conf.certificate_count; i++) {
            free((char *)w->files[i].certificate);
            free((char *)w->files[i].key);
        }
        free(w->files);
        free(w->sigs);
        free(w->staples);
        free(w->fetching);
        free((char *)w->conf.client_ca);
        free((char *)w->conf.ciphers);
        free((char *)w->conf.ciphersuites);
        free((char *)w->conf.stapling_file);
        free((char *)w->conf.stapling_responder);
        free((char *)w->conf.trusted_ca);
    }
    corral_timer_free(watch->timer);
    for (size_t i = 0; i < watch->made_count; i++)
        tls_staple_free(watch->made[i]);
    free(watch->made);
    free(watch->vhosts);
    free((char *)watch->conf.ciphers);
    free((char *)watch->conf.ciphersuites);
    free((char *)watch->conf.client_ca);
    for (size_t i = 0; i < watch->retired_count; i++)
        SSL_CTX_free(watch->retired[i]);
    free(watch->retired);
    pthread_mutex_destroy(&watch->polling);
    free(watch);
}

static char *dup_or_null(const char *s, bool *failed)
{
    char *copy = s != NULL ? strdup(s) : NULL;
    if (s != NULL && copy == NULL)
        *failed = true;
    return copy;
}

/* The copies the watched vhosts of `vhosts` need, with their files'
 * signatures now; NULL in *out when none is watched. */
static int watch_new(const struct tls_server_conf *conf, const struct tls_vhost_conf *vhosts,
                     size_t count, struct tls_watch **out)
{
    *out = NULL;
    size_t watched = 0;
    for (size_t v = 0; v < count; v++)
        watched += vhosts[v].watch;
    if (watched == 0)
        return 0;
    struct tls_watch *watch = calloc(1, sizeof(*watch));
    if (watch == NULL || (watch->vhosts = calloc(watched, sizeof(*watch->vhosts))) == NULL) {
        free(watch);
        return -ENOMEM;
    }
    pthread_mutex_init(&watch->polling, NULL);
    bool failed = false;
    watch->conf = *conf;
    watch->conf.ciphers = dup_or_null(conf->ciphers, &failed);
    watch->conf.ciphersuites = dup_or_null(conf->ciphersuites, &failed);
    watch->conf.client_ca = dup_or_null(conf->client_ca, &failed);
    atomic_init(&watch->checked_ms, corral_monotonic_ns() / 1000000);
    for (size_t v = 0; v < count && !failed; v++) {
        if (!vhosts[v].watch)
            continue;
        struct watch_vhost *w = &watch->vhosts[watch->count++];
        size_t n = vhosts[v].certificate_count;
        w->index = v;
        w->conf = vhosts[v];
        w->conf.client_ca = dup_or_null(vhosts[v].client_ca, &failed);
        w->conf.ciphers = dup_or_null(vhosts[v].ciphers, &failed);
        w->conf.ciphersuites = dup_or_null(vhosts[v].ciphersuites, &failed);
        w->conf.stapling_file = dup_or_null(vhosts[v].stapling_file, &failed);
        w->conf.stapling_responder = dup_or_null(vhosts[v].stapling_responder, &failed);
        w->conf.trusted_ca = dup_or_null(vhosts[v].trusted_ca, &failed);
        w->files = calloc(n ? n : 1, sizeof(*w->files));
        w->sigs = calloc(n ? 2 * n : 1, sizeof(*w->sigs));
        w->staples = calloc(n ? n : 1, sizeof(*w->staples));
        w->fetching = calloc(n ? n : 1, sizeof(*w->fetching));
        if (w->files == NULL || w->sigs == NULL || w->staples == NULL || w->fetching == NULL) {
            failed = true;
            break;
        }
        w->conf.certificates = w->files;
        for (size_t i = 0; i < n; i++) {
            w->files[i].certificate = dup_or_null(vhosts[v].certificates[i].certificate, &failed);
            w->files[i].key = dup_or_null(vhosts[v].certificates[i].key, &failed);
            file_sig(vhosts[v].certificates[i].certificate, &w->sigs[2 * i]);
            file_sig(vhosts[v].certificates[i].key, &w->sigs[2 * i + 1]);
        }
    }
    if (failed) {
        watch_free(watch);
        return -ENOMEM;
    }
    *out = watch;
    return 0;
}

/* A pair whose file names hold the SNI name: read in the handshake. */
static int sni_certs_add(struct tls_server *server, SSL_CTX *ctx, size_t vhost,
                         const struct tls_vhost_conf *conf, const struct loader *loader,
                         const struct tls_certificate_files *files)
{
    if (server->sni_certs[vhost] != NULL) {
        report(loader, TLS_CONF_CERTIFICATE, false,
               "a server takes one \"tls_certificate\" with variables");
        return -EINVAL;
    }
    char why[512];
    int err = tls_sni_certs_new(files->certificate, files->key, conf, &server->stapling_stats,
                                &server->sni_certs[vhost], why, sizeof(why));
    if (err == -EINVAL)
        report(loader, TLS_CONF_CERTIFICATE, false, "%s", why);
    if (err == 0)
        tls_sni_certs_attach(server->sni_certs[vhost], ctx);
    return err;
}

/* Staples the certificate `ctx` has just loaded, if it can be. */
static int staple_add(struct tls_server *server, SSL_CTX *ctx, const struct tls_vhost_conf *vhost,
                      const struct loader *loader, const struct tls_certificate_files *files)
{
    struct tls_staple **grown =
        realloc(server->staples, (server->staple_count + 1) * sizeof(*grown));
    if (grown == NULL)
        return -ENOMEM;
    server->staples = grown;
    struct tls_staple *staple;
    enum tls_conf_item item = TLS_CONF_CERTIFICATE;
    char why[512];
    int err = tls_staple_new(ctx, vhost, files->certificate, false, &server->stapling_stats,
                             &staple, &item, why, sizeof(why));
    if (err == -ENOMEM)
        return err;
    if (err != 0 || why[0] != '\0')
        report(loader, item, err == 0, "%s", why);
    if (err == 0 && staple != NULL)
        grown[server->staple_count++] = staple;
    return err;
}

/* The watched vhost of context `index`, if it is one. */
static struct watch_vhost *watch_vhost_of(struct tls_watch *watch, size_t index)
{
    for (size_t v = 0; watch != NULL && v < watch->count; v++)
        if (watch->vhosts[v].index == index)
            return &watch->vhosts[v];
    return NULL;
}

/* Main loop: the staples of certificates loaded again are fetched for
 * from now on, and those of the certificates they replace no longer. */
static void watch_staples_start(struct tls_server *server)
{
    struct tls_watch *watch = server->watch;
    pthread_mutex_lock(&watch->polling);
    for (size_t v = 0; v < watch->count; v++) {
        struct watch_vhost *w = &watch->vhosts[v];
        if (w->fetching_count == w->staple_count &&
            memcmp(w->fetching, w->staples, w->staple_count * sizeof(*w->staples)) == 0)
            continue;
        for (size_t i = 0; i < w->fetching_count; i++)
            tls_staple_stop(w->fetching[i]);
        for (size_t i = 0; i < w->staple_count; i++) {
            int err = tls_staple_start(w->staples[i], watch->loop);
            if (err != 0)
                corral_log(CORRAL_LOG_WARN, "tls_stapling: \"%s\": %s; not fetched",
                           w->files[0].certificate, strerror(-err));
        }
        memcpy(w->fetching, w->staples, w->staple_count * sizeof(*w->staples));
        w->fetching_count = w->staple_count;
    }
    pthread_mutex_unlock(&watch->polling);
}

/* The main loop looks at the files too, so that a new certificate is
 * stapled before its first handshake, and starts the new staples. */
static void on_watch_timer(corral_timer *timer, void *arg)
{
    struct tls_server *server = arg;
    watch_poll(server);
    watch_staples_start(server);
    corral_timer_start(timer, WATCH_INTERVAL_MS);
}

/* Pairs named by SNI are read by the workers; their staples are made
 * here, on the main loop, a second at most after. */
static void on_sni_timer(corral_timer *timer, void *arg)
{
    struct tls_server *server = arg;
    for (size_t i = 0; i < server->context_count; i++)
        if (server->sni_certs[i] != NULL)
            tls_sni_certs_staple(server->sni_certs[i], server->sni_loop);
    corral_timer_start(timer, WATCH_INTERVAL_MS);
}

int tls_server_stapling_start(struct tls_server *server, corral_loop *loop)
{
    for (size_t i = 0; i < server->staple_count; i++) {
        int err = tls_staple_start(server->staples[i], loop);
        if (err != 0)
            return err;
    }
    bool sni = false;
    for (size_t i = 0; i < server->context_count; i++)
        sni |= server->sni_certs[i] != NULL;
    if (sni && server->sni_timer == NULL) {
        server->sni_loop = loop;
        int err = corral_timer_new(loop, on_sni_timer, server, &server->sni_timer);
        if (err != 0)
            return err;
        corral_timer_start(server->sni_timer, WATCH_INTERVAL_MS);
    }
    /* Every watch is looked at: a certificate loaded again may be
     * must-staple even where tls_stapling is off. */
    struct tls_watch *watch = server->watch;
    if (watch == NULL || watch->timer != NULL)
        return 0;
    watch->loop = loop;
    int err = corral_timer_new(loop, on_watch_timer, server, &watch->timer);
    if (err == 0)
        corral_timer_start(watch->timer, WATCH_INTERVAL_MS);
    return err;
}

void tls_server_stapling_stop(struct tls_server *server)
{
    for (size_t i = 0; i < server->staple_count; i++)
        tls_staple_stop(server->staples[i]);
    corral_timer_free(server->sni_timer);
    server->sni_timer = NULL;
    for (size_t i = 0; i < server->context_count; i++)
        if (server->sni_certs[i] != NULL)
            tls_sni_certs_stop(server->sni_certs[i]);
    struct tls_watch *watch = server->watch;
    if (watch == NULL)
        return;
    corral_timer_free(watch->timer);
    watch->timer = NULL;
    pthread_mutex_lock(&watch->polling);
    for (size_t v = 0; v < watch->count; v++) {
        struct watch_vhost *w = &watch->vhosts[v];
        for (size_t i = 0; i < w->fetching_count; i++)
            tls_staple_stop(w->fetching[i]);
        w->fetching_count = 0;
    }
    pthread_mutex_unlock(&watch->polling);
}

void tls_server_take_staples(struct tls_server *server, struct tls_server *from)
{
    for (size_t i = 0; i < server->staple_count; i++) {
        for (size_t j = 0; j < from->staple_count; j++)
            tls_staple_take(server->staples[i], from->staples[j]);
        /* and those of certificates `from` loaded again */
        struct tls_watch *watch = from->watch;
        if (watch == NULL)
            continue;
        pthread_mutex_lock(&watch->polling);
        for (size_t v = 0; v < watch->count; v++)
            for (size_t j = 0; j < watch->vhosts[v].staple_count; j++)
                tls_staple_take(server->staples[i], watch->vhosts[v].staples[j]);
        pthread_mutex_unlock(&watch->polling);
    }
    /* Certificates named by SNI are read again when asked for: what their
     * staples held is kept for then. */
    for (size_t i = 0; i < server->context_count; i++)
        for (size_t j = 0; server->sni_certs[i] != NULL && j < from->context_count; j++)
            if (from->sni_certs[j] != NULL)
                tls_sni_certs_take_staples(server->sni_certs[i], from->sni_certs[j]);
}

const struct tls_stapling_stats *tls_server_stapling_stats(const struct tls_server *server)
{
    return &server->stapling_stats;
}

int tls_server_new(const struct tls_server_conf *conf, const struct tls_vhost_conf *vhosts,
                   size_t vhost_count, unsigned workers, const struct tls_report *report_to,
                   struct tls_server **out)
{
    struct tls_server *server = calloc(1, sizeof(*server));
    if (server == NULL)
        return -ENOMEM;
    server->sni_select = conf->sni_select;
    server->sni_arg = conf->sni_arg;
    server->handshake_timeout_ms = conf->handshake_timeout_ms;
    server->stream = conf->stream;
    if (conf->stream && conf->alpn != NULL) {
        assert(conf->alpn_len > 0 && conf->alpn_len <= UINT_MAX); /* the config's list */
        server->alpn = malloc(conf->alpn_len);
        if (server->alpn == NULL) {
            free(server);
            return -ENOMEM;
        }
        memcpy(server->alpn, conf->alpn, conf->alpn_len);
        server->alpn_len = (unsigned)conf->alpn_len;
    }
    tls_tickets_init(&server->ticket_keys, conf->ticket_key_rotation_ms);
    server->contexts = calloc(vhost_count ? vhost_count : 1, sizeof(*server->contexts));
    server->sni_certs = calloc(vhost_count ? vhost_count : 1, sizeof(*server->sni_certs));
    /* Cache-line aligned, so that workers counting do not share lines. */
    server->stats =
        aligned_alloc(_Alignof(struct tls_stats), (workers ? workers : 1) * sizeof(*server->stats));
    if (server->contexts == NULL || server->sni_certs == NULL || server->stats == NULL) {
        tls_server_free(server);
        return -ENOMEM;
    }
    memset(server->stats, 0, (workers ? workers : 1) * sizeof(*server->stats));
    server->workers = workers;
    int err = watch_new(conf, vhosts, vhost_count, &server->watch);
    for (size_t v = 0; v < vhost_count && err == 0; v++) {
        struct loader loader = {.report = report_to, .vhost = v};
        SSL_CTX *ctx = server_context_new(server, conf, &vhosts[v], &loader);
        if (ctx == NULL) {
            err = -EINVAL;
            break;
        }
        server->contexts[server->context_count++] = ctx;
        for (size_t i = 0; i < vhosts[v].certificate_count && err == 0; i++) {
            loader.index = i;
            const struct tls_certificate_files *files = &vhosts[v].certificates[i];
            if (tls_sni_certs_template(files->certificate) || tls_sni_certs_template(files->key)) {
                err = sni_certs_add(server, ctx, v, &vhosts[v], &loader, files);
                continue;
            }
            err = load_certificate(ctx, &loader, files);
            size_t stapled = server->staple_count;
            if (err == 0 && staple_wanted(&vhosts[v], ctx, &loader, files))
                err = staple_add(server, ctx, &vhosts[v], &loader, &vhosts[v].certificates[i]);
            /* A watched vhost's first staples, which a change replaces */
            struct watch_vhost *w = watch_vhost_of(server->watch, v);
            if (err == 0 && w != NULL && server->staple_count > stapled) {
                w->staples[w->staple_count++] = server->staples[stapled];
                w->fetching[w->fetching_count++] = server->staples[stapled];
            }
        }
    }
    if (err != 0) {
        tls_server_free(server);
        return err;
    }
    if (conf->ktls) {
        const char *why = tls_ktls_unavailable();
        if (why != NULL)
            corral_log(CORRAL_LOG_WARN,
                       "tls_ktls on: kernel TLS is unavailable (%s); OpenSSL encrypts records",
                       why);
    }
    *out = server;
    return 0;
}

void tls_server_free(struct tls_server *server)
{
    if (server == NULL)
        return;
    for (size_t i = 0; i < server->staple_count; i++)
        tls_staple_free(server->staples[i]);
    free(server->staples);
    for (size_t i = 0; i < server->context_count; i++)
        SSL_CTX_free(server->contexts[i]);
    free(server->contexts);
    for (size_t i = 0; server->sni_certs != NULL && i < server->context_count; i++)
        tls_sni_certs_free(server->sni_certs[i]);
    free(server->sni_certs);
    free(server->stats);
    tls_tickets_free(&server->ticket_keys);
    watch_free(server->watch);
    free(server->alpn);
    free(server);
}

const char *tls_ktls_unavailable(void)
{
#ifdef OPENSSL_NO_KTLS
    return "OpenSSL was built without it";
#else
    /* Asking for the TLS upper layer on a socket that is not connected loads
     * the kernel module if it can, then fails with ENOTCONN if it exists. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return "no socket to probe with";
    int rc = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls"));
    int err = errno;
    close(fd);
    if (rc == 0 || err == ENOTCONN)
        return NULL;
    return err == ENOENT ? "the kernel has no tls module" : "the kernel refused the tls layer";
#endif
}
