/*
 * h3load.c: an HTTP/3 load client in h2load's spirit, on ngtcp2 (GnuTLS)
 * and nghttp3, because Debian's h2load has no HTTP/3.
 *
 *   h3load [-c N] [-m M] [-D SECONDS] [--sni NAME] [--drain SECONDS]
 *          [--ramp SECONDS] https://HOST:PORT/PATH
 *
 * opens N QUIC connections over UDP, keeps M GET requests in flight on
 * each for D seconds (a connection the server closes is opened again), and
 * prints requests/s, completed and failed requests, response bytes and the
 * latency percentiles.  After D seconds it waits up to --drain seconds (2)
 * for the requests in flight; those still unfinished then count as failed
 * (with H3LOAD_DEBUG set, each is listed on stderr: its status, whether
 * nghttp3 saw the response's end, the stream bytes ngtcp2 delivered and
 * whether the stream's FIN came).  --ramp opens the connections evenly
 * over its first SECONDS instead of all at once (under valgrind, N
 * handshakes at once can outlast QUIC's 10 s handshake timeout, and each
 * that fails is begun again).  One thread, one epoll loop.  The server's
 * certificate is not verified: it is for test certificates on loopback.
 *
 * Response bodies are counted and dropped, never buffered; headers other
 * than :status are ignored; datagrams are read into one fixed buffer with
 * its size as the bound.  Latencies are kept for at most MAX_SAMPLES
 * requests (the percentiles then describe the first ones).
 */
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <nghttp3/nghttp3.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES (4u << 20)
#define MAX_CONNS   10000
#define MAX_STREAMS 1000

struct h3load_conn;

struct h3load_req {
    struct h3load_conn *conn;
    struct h3load_req *prev, *next; /* the connection's requests in flight */
    uint64_t start;
    int status;
    bool ended;            /* nghttp3 saw the response's end */
    bool quic_fin;         /* ngtcp2 delivered the stream's FIN */
    uint64_t stream_bytes; /* what ngtcp2 delivered of the stream, in order */
};

struct h3load_conn {
    int fd;
    ngtcp2_conn *quic;
    nghttp3_conn *http;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    ngtcp2_path_storage path;
    struct h3load_req *reqs;
    int inflight;
    bool dead;
};

static struct {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char authority[300], path[2048], sni[300];
    int conns, streams;
    double seconds, drain, ramp;
    gnutls_certificate_credentials_t cred;
    bool running;
    uint64_t completed, failed, bytes, started, handshakes, conn_errors;
    uint32_t *samples;
    size_t nsamples;
} g;

static uint64_t h3load_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NGTCP2_SECONDS + (uint64_t)ts.tv_nsec;
}

static void h3load_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    (void)!gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

static int h3load_new_cid(ngtcp2_conn *quic, ngtcp2_cid *cid, uint8_t *token, size_t cidlen,
                          void *user)
{
    (void)quic;
    (void)user;
    if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen) != 0 ||
        gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    cid->datalen = cidlen;
    return 0;
}

static ngtcp2_conn *h3load_get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((struct h3load_conn *)ref->user_data)->quic;
}

/* ------------------------------------------------------------- requests */

static void h3load_req_unlink(struct h3load_req *req)
{
    struct h3load_conn *c = req->conn;
    if (req->prev != NULL)
        req->prev->next = req->next;
    else
        c->reqs = req->next;
    if (req->next != NULL)
        req->next->prev = req->prev;
    c->inflight--;
    free(req);
}

/* A finished request (the stream closed): counted and its latency kept. */
static void h3load_req_done(struct h3load_req *req, uint64_t code)
{
    bool ok = req->ended && code == NGHTTP3_H3_NO_ERROR && req->status >= 200 && req->status < 400;
    if (ok) {
        g.completed++;
        if (g.nsamples < MAX_SAMPLES)
            g.samples[g.nsamples++] = (uint32_t)((h3load_now() - req->start) / 1000);
    } else {
        g.failed++;
    }
    h3load_req_unlink(req);
}

/* Opens requests on `c` up to M in flight, as far as the peer's stream
 * limit allows. */
static int h3load_fill(struct h3load_conn *c)
{
    static const char ua[] = "h3load";
    while (g.running && c->http != NULL && c->inflight < g.streams &&
           ngtcp2_conn_get_streams_bidi_left(c->quic) > 0) {
        struct h3load_req *req = calloc(1, sizeof(*req));
        if (req == NULL)
            return -1;
        int64_t id;
        if (ngtcp2_conn_open_bidi_stream(c->quic, &id, req) != 0) {
            free(req);
            return 0;
        }
        const nghttp3_nv nva[] = {
            {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
            {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
            {(uint8_t *)":authority", (uint8_t *)g.authority, 10, strlen(g.authority), 0},
            {(uint8_t *)":path", (uint8_t *)g.path, 5, strlen(g.path), 0},
            {(uint8_t *)"user-agent", (uint8_t *)ua, 10, sizeof(ua) - 1, 0},
        };
        req->conn = c;
        req->start = h3load_now();
        if (nghttp3_conn_submit_request(c->http, id, nva, 5, NULL, req) != 0) {
            free(req);
            return -1;
        }
        req->next = c->reqs;
        if (c->reqs != NULL)
            c->reqs->prev = req;
        c->reqs = req;
        c->inflight++;
        g.started++;
    }
    return 0;
}

/* ------------------------------------------------ nghttp3's callbacks */

static int h3_stream_close(nghttp3_conn *h, int64_t id, uint64_t code, void *user, void *sdata)
{
    (void)h;
    (void)id;
    (void)user;
    if (sdata != NULL)
        h3load_req_done(sdata, code);
    return 0;
}

static int h3_recv_data(nghttp3_conn *h, int64_t id, const uint8_t *data, size_t len, void *user,
                        void *sdata)
{
    (void)h;
    (void)data;
    (void)sdata;
    struct h3load_conn *c = user;
    g.bytes += len;
    ngtcp2_conn_extend_max_stream_offset(c->quic, id, len);
    ngtcp2_conn_extend_max_offset(c->quic, len);
    return 0;
}

static int h3_deferred_consume(nghttp3_conn *h, int64_t id, size_t consumed, void *user,
                               void *sdata)
{
    (void)h;
    (void)sdata;
    struct h3load_conn *c = user;
    ngtcp2_conn_extend_max_stream_offset(c->quic, id, consumed);
    ngtcp2_conn_extend_max_offset(c->quic, consumed);
    return 0;
}

static int h3_recv_header(nghttp3_conn *h, int64_t id, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *user, void *sdata)
{
    (void)h;
    (void)id;
    (void)name;
    (void)flags;
    (void)user;
    struct h3load_req *req = sdata;
    if (req == NULL || token != NGHTTP3_QPACK_TOKEN__STATUS)
        return 0;
    nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
    int status = 0;
    for (size_t i = 0; i < v.len && i < 3 && v.base[i] >= '0' && v.base[i] <= '9'; i++)
        status = status * 10 + (v.base[i] - '0');
    req->status = status;
    return 0;
}

static int h3_end_stream(nghttp3_conn *h, int64_t id, void *user, void *sdata)
{
    (void)h;
    (void)id;
    (void)user;
    if (sdata != NULL)
        ((struct h3load_req *)sdata)->ended = true;
    return 0;
}

static int h3_stop(nghttp3_conn *h, int64_t id, uint64_t code, void *user, void *sdata)
{
    (void)h;
    (void)sdata;
    struct h3load_conn *c = user;
    ngtcp2_conn_shutdown_stream_write(c->quic, id, code);
    return 0;
}

/* --------------------------------------------------- ngtcp2's callbacks */

/* The handshake is done: HTTP/3 on top, its three streams, the first
 * requests. */
static int q_handshake_completed(ngtcp2_conn *quic, void *user)
{
    struct h3load_conn *c = user;
    nghttp3_callbacks cb = {
        .stream_close = h3_stream_close,
        .recv_data = h3_recv_data,
        .deferred_consume = h3_deferred_consume,
        .recv_header = h3_recv_header,
        .end_stream = h3_end_stream,
        .stop_sending = h3_stop,
        .reset_stream = h3_stop,
    };
    nghttp3_settings settings;
    nghttp3_settings_default(&settings);
    settings.qpack_max_dtable_capacity = 4096;
    settings.qpack_blocked_streams = 100;
    settings.max_field_section_size = 64 << 10; /* a peer's header block, bounded */
    if (nghttp3_conn_client_new(&c->http, &cb, &settings, NULL, c) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    int64_t ctrl, enc, dec;
    if (ngtcp2_conn_open_uni_stream(quic, &ctrl, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(quic, &enc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(quic, &dec, NULL) != 0 ||
        nghttp3_conn_bind_control_stream(c->http, ctrl) != 0 ||
        nghttp3_conn_bind_qpack_streams(c->http, enc, dec) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    g.handshakes++;
    return h3load_fill(c) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_recv_stream_data(ngtcp2_conn *quic, uint32_t flags, int64_t id, uint64_t offset,
                              const uint8_t *data, size_t len, void *user, void *sdata)
{
    (void)offset;
    struct h3load_conn *c = user;
    struct h3load_req *req = sdata;
    if (req != NULL) {
        req->stream_bytes += len;
        req->quic_fin |= (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0;
    }
    if (c->http == NULL)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    nghttp3_ssize used =
        nghttp3_conn_read_stream(c->http, id, data, len, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    if (used < 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    ngtcp2_conn_extend_max_stream_offset(quic, id, (uint64_t)used);
    ngtcp2_conn_extend_max_offset(quic, (uint64_t)used);
    return 0;
}

static int q_acked(ngtcp2_conn *quic, int64_t id, uint64_t offset, uint64_t len, void *user,
                   void *sdata)
{
    (void)quic;
    (void)offset;
    (void)sdata;
    struct h3load_conn *c = user;
    if (c->http != NULL && nghttp3_conn_add_ack_offset(c->http, id, len) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int q_stream_close(ngtcp2_conn *quic, uint32_t flags, int64_t id, uint64_t code, void *user,
                          void *sdata)
{
    (void)quic;
    (void)sdata;
    struct h3load_conn *c = user;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        code = NGHTTP3_H3_NO_ERROR;
    if (c->http == NULL)
        return 0;
    int rv = nghttp3_conn_close_stream(c->http, id, code);
    if (rv != 0 && rv != NGHTTP3_ERR_STREAM_NOT_FOUND)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int q_stream_reset(ngtcp2_conn *quic, int64_t id, uint64_t size, uint64_t code, void *user,
                          void *sdata)
{
    (void)quic;
    (void)size;
    (void)code;
    (void)sdata;
    struct h3load_conn *c = user;
    if (c->http != NULL && nghttp3_conn_shutdown_stream_read(c->http, id) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int q_stop_sending(ngtcp2_conn *quic, int64_t id, uint64_t code, void *user, void *sdata)
{
    return q_stream_reset(quic, id, 0, code, user, sdata);
}

static int q_extend_stream_data(ngtcp2_conn *quic, int64_t id, uint64_t max, void *user,
                                void *sdata)
{
    (void)quic;
    (void)max;
    (void)sdata;
    struct h3load_conn *c = user;
    if (c->http != NULL && nghttp3_conn_unblock_stream(c->http, id) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int q_extend_streams(ngtcp2_conn *quic, uint64_t max, void *user)
{
    (void)quic;
    (void)max;
    return h3load_fill(user) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

/* ------------------------------------------------------- connections */

/* Sends what `c` has to send: HTTP/3's stream data and QUIC's own frames,
 * one datagram at a time.  A datagram the socket cannot take now is
 * dropped: QUIC's loss recovery sends it again. */
static int h3load_write(struct h3load_conn *c)
{
    uint8_t buf[1500];
    uint64_t ts = h3load_now();
    for (int rounds = 0; rounds < 1000; rounds++) {
        int64_t id = -1;
        int fin = 0;
        nghttp3_vec vec[16];
        nghttp3_ssize nvec = 0;
        if (c->http != NULL && ngtcp2_conn_get_max_data_left(c->quic) > 0) {
            nvec = nghttp3_conn_writev_stream(c->http, &id, &fin, vec, 16);
            if (nvec < 0)
                return -1;
        }
        ngtcp2_ssize datalen = -1;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_pkt_info pi = {0};
        ngtcp2_ssize n =
            ngtcp2_conn_writev_stream(c->quic, &c->path.path, &pi, buf, sizeof(buf), &datalen,
                                      flags, id, (const ngtcp2_vec *)vec, (size_t)nvec, ts);
        if (n < 0) {
            if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                nghttp3_conn_block_stream(c->http, id);
                continue;
            }
            if (n == NGTCP2_ERR_STREAM_SHUT_WR) {
                nghttp3_conn_shutdown_stream_write(c->http, id);
                continue;
            }
            if (n == NGTCP2_ERR_WRITE_MORE) {
                if (nghttp3_conn_add_write_offset(c->http, id, (size_t)datalen) != 0)
                    return -1;
                continue;
            }
            return -1;
        }
        if (datalen >= 0 && nghttp3_conn_add_write_offset(c->http, id, (size_t)datalen) != 0)
            return -1;
        if (n == 0)
            return 0;
        (void)!send(c->fd, buf, (size_t)n, MSG_DONTWAIT);
    }
    return 0;
}

/* Tells the server `c` ends (CONNECTION_CLOSE, H3_NO_ERROR), as a client
 * that is done does: without it, the server keeps the connection until
 * its idle timeout, and a graceful stop waits for it (its drain_timeout). */
static void h3load_conn_say_close(struct h3load_conn *c)
{
    if (c->quic == NULL || ngtcp2_conn_is_in_closing_period(c->quic) ||
        ngtcp2_conn_is_in_draining_period(c->quic))
        return;
    ngtcp2_connection_close_error ccerr;
    ngtcp2_connection_close_error_set_application_error(&ccerr, NGHTTP3_H3_NO_ERROR, NULL, 0);
    uint8_t buf[1500];
    ngtcp2_pkt_info pi = {0};
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(c->quic, &c->path.path, &pi, buf,
                                                        sizeof(buf), &ccerr, h3load_now());
    if (n > 0)
        (void)!send(c->fd, buf, (size_t)n, MSG_DONTWAIT);
}

/* Forgets `c`'s QUIC and HTTP/3 state; its requests in flight fail. */
static void h3load_conn_close(struct h3load_conn *c, int epfd)
{
    if (c->http != NULL) {
        nghttp3_conn_del(c->http); /* its streams' data go with it */
        c->http = NULL;
    }
    g.failed += (uint64_t)c->inflight;
    while (c->reqs != NULL)
        h3load_req_unlink(c->reqs);
    if (c->quic != NULL)
        ngtcp2_conn_del(c->quic);
    c->quic = NULL;
    if (c->tls != NULL)
        gnutls_deinit(c->tls);
    c->tls = NULL;
    if (c->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
}

static int h3load_conn_open(struct h3load_conn *c, int epfd)
{
    memset(c, 0, sizeof(*c));
    c->fd = socket(g.addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&g.addr, g.addrlen) != 0)
        return -1;
    struct sockaddr_storage local;
    socklen_t locallen = sizeof(local);
    if (getsockname(c->fd, (struct sockaddr *)&local, &locallen) != 0)
        return -1;
    ngtcp2_path_storage_init(&c->path, (struct sockaddr *)&local, locallen,
                             (struct sockaddr *)&g.addr, g.addrlen, NULL);

    static const char prio[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:"
                               "+AES-256-GCM:+CHACHA20-POLY1305:-GROUP-ALL:+GROUP-X25519:"
                               "+GROUP-SECP256R1:+GROUP-SECP384R1";
    if (gnutls_init(&c->tls, GNUTLS_CLIENT | GNUTLS_NO_END_OF_EARLY_DATA) != 0 ||
        gnutls_priority_set_direct(c->tls, prio, NULL) != 0 ||
        ngtcp2_crypto_gnutls_configure_client_session(c->tls) != 0 ||
        gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, g.cred) != 0)
        return -1;
    gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
    if (g.sni[0] != '\0')
        gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, g.sni, strlen(g.sni));
    c->ref.get_conn = h3load_get_conn;
    c->ref.user_data = c;
    gnutls_session_set_ptr(c->tls, &c->ref);

    ngtcp2_callbacks cb = {
        .client_initial = ngtcp2_crypto_client_initial_cb,
        .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
        .encrypt = ngtcp2_crypto_encrypt_cb,
        .decrypt = ngtcp2_crypto_decrypt_cb,
        .hp_mask = ngtcp2_crypto_hp_mask_cb,
        .recv_retry = ngtcp2_crypto_recv_retry_cb,
        .update_key = ngtcp2_crypto_update_key_cb,
        .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
        .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
        .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
        .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
        .handshake_completed = q_handshake_completed,
        .recv_stream_data = q_recv_stream_data,
        .acked_stream_data_offset = q_acked,
        .stream_close = q_stream_close,
        .stream_reset = q_stream_reset,
        .stream_stop_sending = q_stop_sending,
        .extend_max_stream_data = q_extend_stream_data,
        .extend_max_local_streams_bidi = q_extend_streams,
        .rand = h3load_rand,
        .get_new_connection_id = h3load_new_cid,
    };
    ngtcp2_settings settings;
    ngtcp2_settings_default(&settings);
    settings.initial_ts = h3load_now();
    ngtcp2_transport_params params;
    ngtcp2_transport_params_default(&params);
    params.initial_max_streams_uni = 3;
    params.initial_max_stream_data_bidi_local = 1 << 20;
    params.initial_max_stream_data_uni = 1 << 20;
    params.initial_max_data = 16 << 20;
    params.max_idle_timeout = 30 * NGTCP2_SECONDS;
    ngtcp2_cid dcid = {.datalen = 18}, scid = {.datalen = 17};
    if (gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, dcid.datalen) != 0 ||
        gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen) != 0)
        return -1;
    if (ngtcp2_conn_client_new(&c->quic, &dcid, &scid, &c->path.path, NGTCP2_PROTO_VER_V1, &cb,
                               &settings, &params, NULL, c) != 0)
        return -1;
    ngtcp2_conn_set_tls_native_handle(c->quic, c->tls);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        return -1;
    return h3load_write(c);
}

/* Says on stderr why the first connection to end early ended: the peer's
 * CONNECTION_CLOSE code (0x100 + a TLS alert for a CRYPTO_ERROR) or
 * ngtcp2's error. */
static void h3load_tell_close(struct h3load_conn *c, int rv)
{
    static bool told;
    if (told || !g.running)
        return;
    told = true;
    ngtcp2_connection_close_error ccerr;
    ngtcp2_conn_get_connection_close_error(c->quic, &ccerr);
    fprintf(stderr, "h3load: a connection ended: %s, close code 0x%llx (%s)\n", ngtcp2_strerror(rv),
            (unsigned long long)ccerr.error_code,
            ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT ? "transport"
                                                                            : "application");
}

/* Reads what came for `c`; on a fatal error the connection is dropped
 * (and opened again later by the main loop). */
static void h3load_read(struct h3load_conn *c, int epfd)
{
    static uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0)
            break;
        ngtcp2_pkt_info pi = {0};
        int rv = ngtcp2_conn_read_pkt(c->quic, &c->path.path, &pi, buf, (size_t)n, h3load_now());
        if (rv != 0) {
            if (rv != NGTCP2_ERR_DRAINING)
                g.conn_errors++;
            h3load_tell_close(c, rv);
            c->dead = true;
            return;
        }
    }
    if (h3load_fill(c) != 0 || h3load_write(c) != 0) {
        g.conn_errors++;
        c->dead = true;
    }
    (void)epfd;
}

/* ------------------------------------------------------------- output */

static int h3load_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double h3load_pct(double p)
{
    if (g.nsamples == 0)
        return 0;
    size_t i = (size_t)(p / 100.0 * (double)(g.nsamples - 1) + 0.5);
    return g.samples[i] / 1000.0;
}

static void h3load_report(double elapsed)
{
    qsort(g.samples, g.nsamples, sizeof(*g.samples), h3load_cmp);
    printf("finished in %.2fs, %.2f req/s, %.2f MB/s\n", elapsed, g.completed / elapsed,
           g.bytes / elapsed / 1e6);
    printf("requests: %llu started, %llu completed, %llu failed\n", (unsigned long long)g.started,
           (unsigned long long)g.completed, (unsigned long long)g.failed);
    printf("connections: %llu handshakes, %llu errors\n", (unsigned long long)g.handshakes,
           (unsigned long long)g.conn_errors);
    printf("body bytes: %llu\n", (unsigned long long)g.bytes);
    printf("latency ms: p50 %.3f p90 %.3f p99 %.3f max %.3f\n", h3load_pct(50), h3load_pct(90),
           h3load_pct(99), h3load_pct(100));
}

/* ------------------------------------------------------------- startup */

/* https://HOST:PORT/PATH into g (HOST numeric, v4 or [v6]). */
static int h3load_parse_url(const char *url)
{
    if (strncmp(url, "https://", 8) != 0)
        return -1;
    const char *host = url + 8, *slash = strchr(host, '/');
    size_t hostlen = slash != NULL ? (size_t)(slash - host) : strlen(host);
    if (hostlen == 0 || hostlen >= sizeof(g.authority))
        return -1;
    memcpy(g.authority, host, hostlen);
    g.authority[hostlen] = '\0';
    snprintf(g.path, sizeof(g.path), "%s", slash != NULL ? slash : "/");
    char name[300];
    snprintf(name, sizeof(name), "%s", g.authority);
    char *port = "443", *h = name;
    if (name[0] == '[') {
        char *end = strchr(name, ']');
        if (end == NULL)
            return -1;
        *end = '\0';
        h = name + 1;
        if (end[1] == ':')
            port = end + 2;
    } else {
        char *colon = strrchr(name, ':');
        if (colon != NULL) {
            *colon = '\0';
            port = colon + 1;
        }
    }
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res;
    if (getaddrinfo(h, port, &hints, &res) != 0)
        return -1;
    memcpy(&g.addr, res->ai_addr, res->ai_addrlen);
    g.addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    struct in6_addr any;
    if (g.sni[0] == '\0' && inet_pton(AF_INET, h, &any) != 1 && inet_pton(AF_INET6, h, &any) != 1)
        snprintf(g.sni, sizeof(g.sni), "%s", h);
    return 0;
}

static void h3load_usage(void)
{
    fprintf(stderr, "usage: h3load [-c CONNS] [-m STREAMS] [-D SECONDS] [--sni NAME] "
                    "[--drain SECONDS] [--ramp SECONDS] https://HOST:PORT/PATH\n");
    exit(2);
}

int main(int argc, char **argv)
{
    g.conns = 1;
    g.streams = 1;
    g.seconds = 10;
    g.drain = 2;
    static const struct option longs[] = {{"sni", required_argument, NULL, 's'},
                                          {"drain", required_argument, NULL, 'd'},
                                          {"ramp", required_argument, NULL, 'r'},
                                          {0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "c:m:D:", longs, NULL)) != -1) {
        if (opt == 'c')
            g.conns = atoi(optarg);
        else if (opt == 'm')
            g.streams = atoi(optarg);
        else if (opt == 'D')
            g.seconds = atof(optarg);
        else if (opt == 'd')
            g.drain = atof(optarg);
        else if (opt == 'r')
            g.ramp = atof(optarg);
        else if (opt == 's')
            snprintf(g.sni, sizeof(g.sni), "%s", optarg);
        else
            h3load_usage();
    }
    if (optind + 1 != argc || g.conns < 1 || g.conns > MAX_CONNS || g.streams < 1 ||
        g.streams > MAX_STREAMS || !(g.seconds > 0) || !(g.drain >= 0) || !(g.ramp >= 0) ||
        h3load_parse_url(argv[optind]) != 0)
        h3load_usage();

    g.samples = malloc(MAX_SAMPLES * sizeof(*g.samples));
    struct h3load_conn *conns = calloc((size_t)g.conns, sizeof(*conns));
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (g.samples == NULL || conns == NULL || epfd < 0 ||
        gnutls_certificate_allocate_credentials(&g.cred) != 0) {
        perror("h3load");
        return 1;
    }
    g.running = true;
    /* Without --ramp all open before the clock starts (their first flights
     * cost the client a key share each); with it, connection i opens at
     * start + i * ramp / conns. */
    int opened = 0;
    for (; g.ramp == 0 && opened < g.conns; opened++) {
        if (h3load_conn_open(&conns[opened], epfd) != 0) {
            fprintf(stderr, "h3load: cannot open connection %d\n", opened);
            return 1;
        }
    }
    uint64_t start = h3load_now(), stop = start + (uint64_t)(g.seconds * 1e9);
    uint64_t drain = stop + (uint64_t)(g.drain * 1e9); /* for the requests in flight at the stop */
    uint64_t ramp = (uint64_t)(g.ramp * 1e9);
    for (;;) {
        uint64_t now = h3load_now();
        if (g.running && now >= stop)
            g.running = false;
        int busy = 0;
        uint64_t next = g.running ? stop : drain;
        for (; g.running && opened < g.conns; opened++) {
            uint64_t at = start + ramp * (uint64_t)opened / (uint64_t)g.conns;
            if (at > now) {
                next = at < next ? at : next;
                break;
            }
            if (h3load_conn_open(&conns[opened], epfd) != 0) {
                fprintf(stderr, "h3load: cannot open connection %d\n", opened);
                return 1;
            }
        }
        for (int i = 0; i < opened; i++) {
            struct h3load_conn *c = &conns[i];
            if (c->dead || (c->quic != NULL && (ngtcp2_conn_is_in_closing_period(c->quic) ||
                                                ngtcp2_conn_is_in_draining_period(c->quic)))) {
                h3load_conn_close(c, epfd);
                if (g.running && h3load_conn_open(c, epfd) != 0) {
                    g.conn_errors++;
                    h3load_conn_close(c, epfd);
                }
            }
            if (c->quic == NULL)
                continue;
            busy += c->inflight;
            uint64_t expiry = ngtcp2_conn_get_expiry(c->quic);
            if (expiry <= now) {
                if (ngtcp2_conn_handle_expiry(c->quic, now) != 0 || h3load_write(c) != 0) {
                    c->dead = true;
                    continue;
                }
                expiry = ngtcp2_conn_get_expiry(c->quic);
            }
            if (expiry < next)
                next = expiry;
        }
        if (!g.running && (busy == 0 || now >= drain))
            break;
        int wait = next > now ? (int)((next - now + 999999) / 1000000) : 0;
        struct epoll_event evs[64];
        int n = epoll_wait(epfd, evs, 64, wait);
        for (int i = 0; i < n; i++)
            h3load_read(evs[i].data.ptr, epfd);
    }
    double elapsed = (double)(h3load_now() - start) / 1e9;
    if (elapsed > g.seconds)
        elapsed = g.seconds; /* the rate over the load's time, not the drain */
    for (int i = 0; i < g.conns; i++)
        g.failed += (uint64_t)conns[i].inflight;
    h3load_report(elapsed);
    if (getenv("H3LOAD_DEBUG") != NULL)
        for (int i = 0; i < opened; i++)
            for (struct h3load_req *r = conns[i].reqs; r != NULL; r = r->next)
                fprintf(stderr,
                        "conn %d: unfinished request, status %d, end %d, stream bytes %llu, "
                        "stream FIN %d\n",
                        i, r->status, r->ended, (unsigned long long)r->stream_bytes, r->quic_fin);
    for (int i = 0; i < opened; i++) {
        h3load_conn_say_close(&conns[i]);
        h3load_conn_close(&conns[i], epfd);
    }
    free(conns);
    free(g.samples);
    gnutls_certificate_free_credentials(g.cred);
    close(epfd);
    return g.completed > 0 ? 0 : 1;
}
