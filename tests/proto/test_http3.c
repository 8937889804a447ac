/*
 * test_http3.c: the HTTP/3 framer without sockets: an ngtcp2 + nghttp3
 * client in the same process, its datagrams carried to the endpoint (and
 * the endpoint's back) through in-memory queues that may drop some, all
 * on one corral loop that runs the server's timers.  The site's
 * locations are `return`'s, a handler that counts a request body
 * (pausing it at each piece) and one that streams a large response at
 * the pace of the exchange's backpressure.
 */
#include "../core/udp_burst.h"
#include "../helpers.h"
#include "internal.h" /* corral__udp_sendmmsg, to fill the socket */
#include "proto/http/site.h"
#include "proto/http3/http3.h"
#include "proto/modules.h"
#include "proto/policy/access_log.h"
#include "proto/policy/return.h"
#include "proto/upstream/proxy.h"
#include "proto/upstream/upstream.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <pthread.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ the site */

static struct http_return ret_hello = {.status = 200, .text = "hello\n", .text_len = 6};

/* POST /count: takes the body a piece at a time, pausing it after each
 * until the loop's next turn, and answers "len=N". */
struct counter {
    uint64_t bytes;
    unsigned pauses;
    struct exchange *paused; /* a resume is deferred for it */
    unsigned aborts;
};
static struct counter counted;

static void count_resume(void *arg)
{
    (void)arg;
    if (counted.paused == NULL) /* aborted meanwhile */
        return;
    struct exchange *ex = counted.paused;
    counted.paused = NULL;
    exchange_resume_body(ex);
}

static void count_on_abort(struct exchange *ex)
{
    (void)ex;
    counted.paused = NULL;
    counted.aborts++;
}

static void count_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    counted = (struct counter){0};
    if (!req->has_body) {
        exchange_respond(ex, 200, "", "len=0", 5);
    }
}

static void count_on_body(struct exchange *ex, const char *data, size_t len)
{
    (void)data;
    counted.bytes += len;
    counted.pauses++;
    exchange_pause_body(ex);
    counted.paused = ex;
    ck_assert_int_eq(corral_loop_defer(exchange_loop(ex), count_resume, NULL), 0);
}

static void count_on_body_end(struct exchange *ex)
{
    /* The end comes even while the body is paused: the exchange is over
     * once answered, so the deferred resume must not touch it. */
    counted.paused = NULL;
    char text[32];
    int n = snprintf(text, sizeof(text), "len=%llu", (unsigned long long)counted.bytes);
    exchange_respond(ex, 200, "", text, (size_t)n);
}

static const struct http_handler count_handler = {
    .name = "count",
    .on_request = count_on_request,
    .on_body = count_on_body,
    .on_body_end = count_on_body_end,
    .on_abort = count_on_abort,
};

/* GET /big: BIG_LEN bytes of a known pattern, written while the exchange
 * is not backed up and resumed by on_drain. */
#define BIG_LEN (1024 * 1024)
struct big {
    size_t sent;
    unsigned drains;
};
static struct big big;

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 + i / 251);
}

static void big_pump(struct exchange *ex)
{
    char piece[16384];
    while (big.sent < BIG_LEN && !exchange_backed_up(ex)) {
        size_t n = BIG_LEN - big.sent < sizeof(piece) ? BIG_LEN - big.sent : sizeof(piece);
        for (size_t i = 0; i < n; i++)
            piece[i] = (char)pattern(big.sent + i);
        exchange_write(ex, piece, n);
        big.sent += n;
    }
    if (big.sent == BIG_LEN)
        exchange_end(ex);
}

static void big_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    big = (struct big){0};
    exchange_begin(ex, 200, "Content-Type: application/octet-stream\r\n", 40, BIG_LEN);
    big_pump(ex);
}

static void big_on_drain(struct exchange *ex)
{
    big.drains++;
    big_pump(ex);
}

static const struct http_handler big_handler = {
    .name = "big",
    .on_request = big_on_request,
    .on_drain = big_on_drain,
};

/* GET /fields: a head of 40 fields of its own, past what a head's
 * fields take on the stack, and a 1 KB Connection field that HTTP/3 must
 * drop (RFC 9114 4.2). */
static void fields_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    char head[4096];
    size_t len = 0;
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(head + len, sizeof(head) - len, "X-H%d: value-%d\r\n", i, i);
    len += (size_t)snprintf(head + len, sizeof(head) - len, "Connection: ");
    memset(head + len, 'c', 1024);
    len += 1024;
    memcpy(head + len, "\r\n", 2);
    len += 2;
    exchange_begin(ex, 200, head, len, 2);
    exchange_write(ex, "ok", 2);
    exchange_end(ex);
}

static const struct http_handler fields_handler = {
    .name = "fields",
    .on_request = fields_on_request,
};

/* /echo-head: answers with the request's field count and its last
 * field, as the handler sees them. */
static void echo_head_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)data;
    char text[512];
    int n = snprintf(text, sizeof(text), "fields=%zu", req->header_count);
    if (req->header_count > 0) {
        const struct http_header *h = &req->headers[req->header_count - 1];
        n += snprintf(text + n, sizeof(text) - (size_t)n, " %.*s=%.*s", (int)h->name.len,
                      h->name.data, (int)h->value.len, h->value.data);
    }
    exchange_respond(ex, 200, "", text, (size_t)n);
}

static const struct http_handler echo_head_handler = {
    .name = "echo-head",
    .on_request = echo_head_on_request,
};

/* /p/: proxied to a backend thread (one HTTP/1.1 request per
 * connection) that answers with the request line and its body's
 * length. */
static struct proxy_location proxy = {.conf = PROXY_CONF_DEFAULT};

/* GET /later: answered from the loop's deferred callbacks, outside any
 * input, so that the connection's flush is deferred in turn. */
static bool later_answered;
static struct h3_endpoint *ep;
static corral_loop *loop;

static void later_answer(void *arg)
{
    exchange_respond(arg, 200, "", "later", 5);
    later_answered = true;
    /* The worker goes away in the same pass, before the flush the
     * answer deferred: the loop stops after it. */
    h3_endpoint_free(ep);
    ep = NULL;
    corral_loop_stop(loop);
}

static void later_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    ck_assert_int_eq(corral_loop_defer(exchange_loop(ex), later_answer, ex), 0);
}

static const struct http_handler later_handler = {
    .name = "later",
    .on_request = later_on_request,
};

/* GET /tail: TAIL_LEN bytes written at once, the body's end 50 ms later,
 * once the data has gone, so that the stream's FIN goes alone after it. */
#define TAIL_LEN 3000
static corral_timer *tail_timer;

static void tail_end(corral_timer *timer, void *arg)
{
    (void)timer;
    exchange_end(arg);
}

static void tail_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    char body[TAIL_LEN];
    for (size_t i = 0; i < TAIL_LEN; i++)
        body[i] = (char)pattern(i);
    exchange_begin(ex, 200, "", 0, TAIL_LEN);
    exchange_write(ex, body, TAIL_LEN);
    if (tail_timer != NULL)
        corral_timer_free(tail_timer);
    ck_assert_int_eq(corral_timer_new(exchange_loop(ex), tail_end, ex, &tail_timer), 0);
    corral_timer_start(tail_timer, 50);
}

static const struct http_handler tail_handler = {
    .name = "tail",
    .on_request = tail_on_request,
};

static const struct http_location locations[] = {
    {.path = "/tail", .path_len = 5, .exact = true, .handler = &tail_handler},
    {.path = "/later", .path_len = 6, .exact = true, .handler = &later_handler},
    {.path = "/p/", .path_len = 3, .handler = &proxy_handler, .handler_data = &proxy},
    {.path = "/fields", .path_len = 7, .exact = true, .handler = &fields_handler},
    {.path = "/echo-head", .path_len = 10, .exact = true, .handler = &echo_head_handler},
    {.path = "/count", .path_len = 6, .handler = &count_handler},
    {.path = "/big", .path_len = 4, .exact = true, .handler = &big_handler},
    {.path = "/", .path_len = 1, .handler = &http_return_handler, .handler_data = &ret_hello},
};
static struct http_vhost vhosts[3];
static struct http_stats stats[1];
static struct http_site site;

/* ------------------------------------------------------- the wire */

#define QUEUE_CAP 8192
#define DGRAM_MAX 1500

struct datagram {
    size_t len;
    uint8_t data[DGRAM_MAX];
};

struct queue {
    struct datagram *items;
    size_t head, count;
    unsigned drop_percent;
    uint64_t dropped, carried;
};

static struct queue to_server, to_client;
static uint32_t rng = 12345;

static unsigned roll(void)
{
    rng = rng * 1103515245u + 12345u;
    return (rng >> 16) % 100;
}

static void queue_push(struct queue *q, const uint8_t *data, size_t len)
{
    ck_assert_uint_le(len, DGRAM_MAX);
    if (q->drop_percent > 0 && roll() < q->drop_percent) {
        q->dropped++;
        return;
    }
    ck_assert_uint_lt(q->count, QUEUE_CAP);
    struct datagram *d = &q->items[(q->head + q->count++) % QUEUE_CAP];
    d->len = len;
    memcpy(d->data, data, len);
    q->carried++;
}

static struct sockaddr_in client_addr, server_addr;

/* Runs of datagrams the endpoint gave in one call (gso_segment > 0). */
static size_t gso_runs;
/* Every byte the endpoint sent. */
static uint64_t server_bytes_out;

/* The endpoint's output: to the client's queue, GSO batches split. */
static void server_output(void *arg, const struct sockaddr *local, socklen_t local_len,
                          const struct sockaddr *peer, socklen_t peer_len, const uint8_t *data,
                          size_t len, size_t gso_segment)
{
    (void)arg;
    (void)local;
    (void)local_len;
    ck_assert_uint_eq(peer_len, sizeof(client_addr));
    const struct sockaddr_in *to = (const struct sockaddr_in *)peer;
    ck_assert_int_eq(to->sin_family, AF_INET);
    ck_assert_uint_eq(to->sin_addr.s_addr, client_addr.sin_addr.s_addr);
    if (to->sin_port != client_addr.sin_port)
        return; /* a connection of a client gone before the case moved port */
    server_bytes_out += len;
    size_t step = gso_segment > 0 ? gso_segment : len;
    if (gso_segment > 0) {
        ck_assert_uint_lt(gso_segment, len); /* a run holds two datagrams at least */
        gso_runs++;
    }
    for (size_t off = 0; off < len; off += step)
        queue_push(&to_client, data + off, len - off < step ? len - off : step);
}

/* ------------------------------------------------------- the client */

struct request {
    int64_t id;
    const char *body; /* request body, or NULL */
    size_t body_len, body_sent;
    unsigned status;
    unsigned x_fields; /* x-h* fields in the response head */
    bool connection;   /* a Connection field came */
    char *response;
    size_t response_len;
    bool ended;         /* the response's FIN */
    bool closed;        /* the stream closed */
    uint64_t app_error; /* its close code */
    bool reset;         /* the server reset it */
};

struct client {
    ngtcp2_conn *quic;
    nghttp3_conn *h3;
    gnutls_session_t tls;
    gnutls_certificate_credentials_t cred;
    ngtcp2_crypto_conn_ref ref;
    ngtcp2_connection_close_error ccerr;
    bool handshake_done;
    bool failed;
    bool closed_by_server; /* its CONNECTION_CLOSE came (read: draining) */
    unsigned goaways;      /* GOAWAY frames read */
    int64_t goaway_id;     /* the last one's */
    uint64_t stream_bytes; /* received on all streams */
};

static struct client cl;
/* The client's connection window (initial_max_data), and whether it never
 * gives any back (no MAX_DATA). */
static uint64_t client_max_data;
static bool client_holds_max_data;

static ngtcp2_conn *client_get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((struct client *)ref->user_data)->quic;
}

static void client_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_RANDOM, dest, len), 0);
}

static int client_new_cid(ngtcp2_conn *quic, ngtcp2_cid *cid, uint8_t *token, size_t cidlen,
                          void *user)
{
    (void)quic;
    (void)user;
    cid->datalen = cidlen;
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen), 0);
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN), 0);
    return 0;
}

static int h3c_recv_header(nghttp3_conn *h3, int64_t stream_id, int32_t token, nghttp3_rcbuf *name,
                           nghttp3_rcbuf *value, uint8_t flags, void *user, void *stream_user)
{
    (void)h3;
    (void)stream_id;
    (void)token;
    (void)flags;
    (void)user;
    struct request *r = stream_user;
    nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);
    if (r != NULL && n.len == 7 && memcmp(n.base, ":status", 7) == 0 && v.len == 3)
        r->status = (unsigned)((v.base[0] - '0') * 100 + (v.base[1] - '0') * 10 + v.base[2] - '0');
    if (r != NULL && n.len >= 3 && memcmp(n.base, "x-h", 3) == 0)
        r->x_fields++;
    if (r != NULL && n.len == 10 && memcmp(n.base, "connection", 10) == 0)
        r->connection = true;
    return 0;
}

static int h3c_recv_data(nghttp3_conn *h3, int64_t stream_id, const uint8_t *data, size_t len,
                         void *user, void *stream_user)
{
    (void)h3;
    (void)user;
    struct request *r = stream_user;
    r->response = realloc(r->response, r->response_len + len + 1);
    ck_assert_ptr_nonnull(r->response);
    memcpy(r->response + r->response_len, data, len);
    r->response_len += len;
    r->response[r->response_len] = '\0';
    ngtcp2_conn_extend_max_stream_offset(cl.quic, stream_id, len);
    if (!client_holds_max_data)
        ngtcp2_conn_extend_max_offset(cl.quic, len);
    return 0;
}

static int h3c_deferred_consume(nghttp3_conn *h3, int64_t stream_id, size_t consumed, void *user,
                                void *stream_user)
{
    (void)h3;
    (void)user;
    (void)stream_user;
    ngtcp2_conn_extend_max_stream_offset(cl.quic, stream_id, consumed);
    if (!client_holds_max_data)
        ngtcp2_conn_extend_max_offset(cl.quic, consumed);
    return 0;
}

static int h3c_end_stream(nghttp3_conn *h3, int64_t stream_id, void *user, void *stream_user)
{
    (void)h3;
    (void)stream_id;
    (void)user;
    struct request *r = stream_user;
    if (r != NULL)
        r->ended = true;
    return 0;
}

static int h3c_stream_close(nghttp3_conn *h3, int64_t stream_id, uint64_t code, void *user,
                            void *stream_user)
{
    (void)h3;
    (void)stream_id;
    (void)user;
    struct request *r = stream_user;
    if (r != NULL) {
        r->closed = true;
        r->app_error = code;
    }
    return 0;
}

static int h3c_stop_sending(nghttp3_conn *h3, int64_t stream_id, uint64_t code, void *user,
                            void *stream_user)
{
    (void)h3;
    (void)user;
    (void)stream_user;
    ngtcp2_conn_shutdown_stream_read(cl.quic, stream_id, code);
    return 0;
}

static int h3c_reset_stream(nghttp3_conn *h3, int64_t stream_id, uint64_t code, void *user,
                            void *stream_user)
{
    (void)h3;
    (void)user;
    (void)stream_user;
    ngtcp2_conn_shutdown_stream_write(cl.quic, stream_id, code);
    return 0;
}

static int h3c_shutdown(nghttp3_conn *h3, int64_t id, void *user)
{
    (void)h3;
    (void)user;
    cl.goaways++;
    cl.goaway_id = id;
    return 0;
}

static const nghttp3_callbacks h3c_callbacks = {
    .shutdown = h3c_shutdown,
    .stream_close = h3c_stream_close,
    .recv_data = h3c_recv_data,
    .deferred_consume = h3c_deferred_consume,
    .recv_header = h3c_recv_header,
    .stop_sending = h3c_stop_sending,
    .end_stream = h3c_end_stream,
    .reset_stream = h3c_reset_stream,
};

/* The client's HTTP/3 session: at the handshake's end, or before it to
 * send requests in 0-RTT. */
static void client_setup_h3(ngtcp2_conn *quic)
{
    if (cl.h3 != NULL)
        return;
    nghttp3_settings settings;
    nghttp3_settings_default(&settings);
    ck_assert_int_eq(nghttp3_conn_client_new(&cl.h3, &h3c_callbacks, &settings, NULL, &cl), 0);
    int64_t control, qenc, qdec;
    ck_assert_int_eq(ngtcp2_conn_open_uni_stream(quic, &control, NULL), 0);
    ck_assert_int_eq(nghttp3_conn_bind_control_stream(cl.h3, control), 0);
    ck_assert_int_eq(ngtcp2_conn_open_uni_stream(quic, &qenc, NULL), 0);
    ck_assert_int_eq(ngtcp2_conn_open_uni_stream(quic, &qdec, NULL), 0);
    ck_assert_int_eq(nghttp3_conn_bind_qpack_streams(cl.h3, qenc, qdec), 0);
}

/* What a client keeps of a connection for its next one: the TLS session
 * (from the server's ticket) and the server's transport parameters,
 * which 0-RTT needs. */
static gnutls_datum_t saved_session;
static ngtcp2_transport_params saved_params;
static bool saved_params_set;
/* Whether the next client_start() resumes the saved session, and sends
 * its requests in 0-RTT (opened before its first write). */
static bool client_resume, client_early;

static int client_handshake_completed(ngtcp2_conn *quic, void *user)
{
    (void)user;
    client_setup_h3(quic);
    const ngtcp2_transport_params *params = ngtcp2_conn_get_remote_transport_params(quic);
    if (params != NULL) {
        saved_params = *params;
        /* Its versions point into the connection, which goes. */
        saved_params.version_info_present = 0;
        saved_params.version_info = (ngtcp2_version_info){0};
        saved_params_set = true;
    }
    cl.handshake_done = true;
    return 0;
}

static int client_ticket_hook(gnutls_session_t session, unsigned type, unsigned when,
                              unsigned incoming, const gnutls_datum_t *msg)
{
    (void)when;
    (void)incoming;
    (void)msg;
    if (type != GNUTLS_HANDSHAKE_NEW_SESSION_TICKET)
        return 0;
    gnutls_free(saved_session.data);
    saved_session = (gnutls_datum_t){NULL, 0};
    ck_assert_int_eq(gnutls_session_get_data2(session, &saved_session), 0);
    return 0;
}

static int client_recv_stream_data(ngtcp2_conn *quic, uint32_t flags, int64_t stream_id,
                                   uint64_t offset, const uint8_t *data, size_t len, void *user,
                                   void *stream_user)
{
    (void)offset;
    (void)user;
    (void)stream_user;
    if (cl.h3 == NULL)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    cl.stream_bytes += len;
    nghttp3_ssize used = nghttp3_conn_read_stream(cl.h3, stream_id, data, len,
                                                  (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0);
    if (used < 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    ngtcp2_conn_extend_max_stream_offset(quic, stream_id, (uint64_t)used);
    if (!client_holds_max_data)
        ngtcp2_conn_extend_max_offset(quic, (uint64_t)used);
    return 0;
}

static int client_acked(ngtcp2_conn *quic, int64_t stream_id, uint64_t offset, uint64_t len,
                        void *user, void *stream_user)
{
    (void)quic;
    (void)offset;
    (void)user;
    (void)stream_user;
    return cl.h3 == NULL || nghttp3_conn_add_ack_offset(cl.h3, stream_id, len) == 0
               ? 0
               : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int client_stream_close(ngtcp2_conn *quic, uint32_t flags, int64_t stream_id, uint64_t code,
                               void *user, void *stream_user)
{
    (void)quic;
    (void)user;
    (void)stream_user;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        code = NGHTTP3_H3_NO_ERROR;
    if (cl.h3 != NULL)
        nghttp3_conn_close_stream(cl.h3, stream_id, code);
    return 0;
}

static int client_stream_reset(ngtcp2_conn *quic, int64_t stream_id, uint64_t final_size,
                               uint64_t code, void *user, void *stream_user)
{
    (void)quic;
    (void)final_size;
    (void)code;
    (void)user;
    struct request *r = stream_user;
    if (r != NULL)
        r->reset = true;
    if (cl.h3 != NULL)
        nghttp3_conn_shutdown_stream_read(cl.h3, stream_id);
    return 0;
}

static int client_extend_max_stream_data(ngtcp2_conn *quic, int64_t stream_id, uint64_t max,
                                         void *user, void *stream_user)
{
    (void)quic;
    (void)max;
    (void)user;
    (void)stream_user;
    if (cl.h3 != NULL)
        nghttp3_conn_unblock_stream(cl.h3, stream_id);
    return 0;
}

/* The last NEW_TOKEN token the server sent the client, kept across its
 * connections as a client's store would. */
static uint8_t new_token[128];
static size_t new_token_len;

static int client_recv_new_token(ngtcp2_conn *quic, const ngtcp2_vec *token, void *user)
{
    (void)quic;
    (void)user;
    ck_assert_uint_le(token->len, sizeof(new_token));
    memcpy(new_token, token->base, token->len);
    new_token_len = token->len;
    return 0;
}

static const ngtcp2_callbacks client_callbacks = {
    .recv_new_token = client_recv_new_token,
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = client_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = client_recv_stream_data,
    .acked_stream_data_offset = client_acked,
    .stream_close = client_stream_close,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .rand = client_rand,
    .get_new_connection_id = client_new_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = client_stream_reset,
    .extend_max_stream_data = client_extend_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* A token the next client_start() puts in its Initials (none when empty). */
static uint8_t client_token[128];
static size_t client_token_len;

/* The name the client sends by SNI; NULL: none. */
static const char *client_sni = "localhost";

/* The client's GnuTLS priorities after TLS 1.3's (its signature
 * algorithms, say); "" for GnuTLS's own. */
static const char *client_priority = "";

static void client_start(const char *alpn_name)
{
    memset(&cl, 0, sizeof(cl));
    ngtcp2_cid dcid = {.datalen = 18}, scid = {.datalen = 17};
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, dcid.datalen), 0);
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen), 0);
    ngtcp2_path path = {
        .local = {(ngtcp2_sockaddr *)&client_addr, sizeof(client_addr)},
        .remote = {(ngtcp2_sockaddr *)&server_addr, sizeof(server_addr)},
    };
    ngtcp2_settings settings;
    ngtcp2_settings_default(&settings);
    settings.initial_ts = corral_monotonic_ns();
    settings.initial_rtt = 10 * NGTCP2_MILLISECONDS;
    settings.token = (ngtcp2_vec){client_token, client_token_len};
    ngtcp2_transport_params params;
    ngtcp2_transport_params_default(&params);
    params.initial_max_streams_uni = 3;
    params.initial_max_stream_data_bidi_local = 256 * 1024;
    params.initial_max_stream_data_uni = 256 * 1024;
    params.initial_max_data = client_max_data;
    ck_assert_int_eq(ngtcp2_conn_client_new(&cl.quic, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1,
                                            &client_callbacks, &settings, &params, NULL, &cl),
                     0);
    ck_assert_int_eq(gnutls_certificate_allocate_credentials(&cl.cred), 0);
    ck_assert_int_eq(gnutls_init(&cl.tls, GNUTLS_CLIENT | GNUTLS_ENABLE_EARLY_DATA |
                                              GNUTLS_NO_END_OF_EARLY_DATA),
                     0);
    gnutls_handshake_set_hook_function(cl.tls, GNUTLS_HANDSHAKE_NEW_SESSION_TICKET,
                                       GNUTLS_HOOK_POST, client_ticket_hook);
    char priority[256];
    snprintf(priority, sizeof(priority),
             "NORMAL:-VERS-ALL:+VERS-TLS1.3:%%DISABLE_TLS13_COMPAT_MODE%s", client_priority);
    ck_assert_int_eq(gnutls_priority_set_direct(cl.tls, priority, NULL), 0);
    ck_assert_int_eq(ngtcp2_crypto_gnutls_configure_client_session(cl.tls), 0);
    cl.ref = (ngtcp2_crypto_conn_ref){.get_conn = client_get_conn, .user_data = &cl};
    gnutls_session_set_ptr(cl.tls, &cl.ref);
    ck_assert_int_eq(gnutls_credentials_set(cl.tls, GNUTLS_CRD_CERTIFICATE, cl.cred), 0);
    gnutls_datum_t alpn = {(unsigned char *)alpn_name, (unsigned)strlen(alpn_name)};
    ck_assert_int_eq(gnutls_alpn_set_protocols(cl.tls, &alpn, 1, 0), 0);
    if (client_sni != NULL)
        ck_assert_int_eq(
            gnutls_server_name_set(cl.tls, GNUTLS_NAME_DNS, client_sni, strlen(client_sni)), 0);
    ngtcp2_conn_set_tls_native_handle(cl.quic, cl.tls);
    if (client_resume) {
        ck_assert_uint_gt(saved_session.size, 0);
        ck_assert_int_eq(gnutls_session_set_data(cl.tls, saved_session.data, saved_session.size),
                         0);
    }
    if (client_early) {
        ck_assert(saved_params_set);
        ngtcp2_conn_set_early_remote_transport_params(cl.quic, &saved_params);
        client_setup_h3(cl.quic);
    }
}

static void client_free(void)
{
    if (cl.h3 != NULL)
        nghttp3_conn_del(cl.h3);
    ngtcp2_conn_del(cl.quic);
    gnutls_deinit(cl.tls);
    gnutls_certificate_free_credentials(cl.cred);
    memset(&cl, 0, sizeof(cl));
}

static nghttp3_ssize client_read_body(nghttp3_conn *h3, int64_t stream_id, nghttp3_vec *vec,
                                      size_t veccnt, uint32_t *flags, void *user, void *stream_user)
{
    (void)h3;
    (void)stream_id;
    (void)veccnt;
    (void)user;
    struct request *r = stream_user;
    size_t n = r->body_len - r->body_sent;
    if (n > 16384)
        n = 16384;
    vec[0] = (nghttp3_vec){(uint8_t *)r->body + r->body_sent, n};
    r->body_sent += n;
    if (r->body_sent == r->body_len)
        *flags |= NGHTTP3_DATA_FLAG_EOF;
    return 1;
}

/* Opens a request stream with these fields (name, value pairs, ending in
 * NULL). */
static void client_request(struct request *r, const char *const *fields)
{
    nghttp3_nv nv[160];
    size_t n = 0;
    for (; fields[2 * n] != NULL && n < 160; n++)
        nv[n] = (nghttp3_nv){(uint8_t *)fields[2 * n], (uint8_t *)fields[2 * n + 1],
                             strlen(fields[2 * n]), strlen(fields[2 * n + 1]), 0};
    ck_assert_int_eq(ngtcp2_conn_open_bidi_stream(cl.quic, &r->id, r), 0);
    static const nghttp3_data_reader reader = {.read_data = client_read_body};
    ck_assert_int_eq(
        nghttp3_conn_submit_request(cl.h3, r->id, nv, n, r->body != NULL ? &reader : NULL, r), 0);
}

static void get(struct request *r, const char *path)
{
    const char *fields[] = {":method",   "GET",   ":scheme", "https", ":authority",
                            "localhost", ":path", path,      NULL};
    client_request(r, fields);
}

/* Writes what the client has to send into the server's queue. */
static void client_write(void)
{
    uint8_t buf[DGRAM_MAX];
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    uint64_t ts = corral_monotonic_ns();
    for (int packets = 0; packets < 64; packets++) {
        int64_t stream_id = -1;
        int fin = 0;
        nghttp3_vec vec[16];
        nghttp3_ssize count = 0;
        if (cl.h3 != NULL && ngtcp2_conn_get_max_data_left(cl.quic) > 0) {
            count = nghttp3_conn_writev_stream(cl.h3, &stream_id, &fin, vec, 16);
            ck_assert_int_ge(count, 0);
        }
        ngtcp2_ssize taken = -1;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_pkt_info pi;
        ngtcp2_ssize n =
            ngtcp2_conn_writev_stream(cl.quic, &ps.path, &pi, buf, 1200, &taken, flags, stream_id,
                                      (const ngtcp2_vec *)vec, (size_t)count, ts);
        if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
            nghttp3_conn_block_stream(cl.h3, stream_id);
            continue;
        }
        if (n == NGTCP2_ERR_STREAM_SHUT_WR) {
            nghttp3_conn_shutdown_stream_write(cl.h3, stream_id);
            continue;
        }
        if (n == NGTCP2_ERR_WRITE_MORE) {
            ck_assert_int_eq(nghttp3_conn_add_write_offset(cl.h3, stream_id, (size_t)taken), 0);
            continue;
        }
        if (n < 0) {
            cl.failed = true;
            return;
        }
        if (taken >= 0)
            ck_assert_int_eq(nghttp3_conn_add_write_offset(cl.h3, stream_id, (size_t)taken), 0);
        if (n == 0)
            break;
        queue_push(&to_server, buf, (size_t)n);
    }
    ngtcp2_conn_update_pkt_tx_time(cl.quic, ts);
}

/* ------------------------------------------------------------- the run */

static char dir[64];
static bool (*done_cond)(void);
static uint64_t deadline_ms;
static bool timed_out;

static void pump_again(void *arg);

/* One step of the wire: the client writes, every datagram in flight is
 * delivered, the client's timer is served; the loop runs the server's
 * timers and deferred flushes between steps. */
static void pump(corral_timer *timer, void *arg)
{
    (void)timer;
    (void)arg;
    if (!cl.failed)
        client_write();
    while (to_server.count > 0 && ep != NULL) { /* NULL: a case freed it */
        struct datagram *d = &to_server.items[to_server.head];
        to_server.head = (to_server.head + 1) % QUEUE_CAP;
        to_server.count--;
        h3_endpoint_input(ep, (struct sockaddr *)&server_addr, sizeof(server_addr),
                          (struct sockaddr *)&client_addr, sizeof(client_addr), d->data, d->len, 0);
    }
    while (to_client.count > 0 && !cl.failed) {
        struct datagram *d = &to_client.items[to_client.head];
        to_client.head = (to_client.head + 1) % QUEUE_CAP;
        to_client.count--;
        ngtcp2_path path = {
            .local = {(ngtcp2_sockaddr *)&client_addr, sizeof(client_addr)},
            .remote = {(ngtcp2_sockaddr *)&server_addr, sizeof(server_addr)},
        };
        ngtcp2_pkt_info pi = {0};
        int rc = ngtcp2_conn_read_pkt(cl.quic, &path, &pi, d->data, d->len, corral_monotonic_ns());
        cl.closed_by_server |= rc == NGTCP2_ERR_DRAINING;
        if (rc != 0)
            cl.failed = true;
    }
    if (!cl.failed && ngtcp2_conn_get_expiry(cl.quic) <= corral_monotonic_ns() &&
        ngtcp2_conn_handle_expiry(cl.quic, corral_monotonic_ns()) != 0)
        cl.failed = true;
    if ((cl.handshake_done || cl.failed) && done_cond != NULL && done_cond()) {
        corral_loop_stop(loop);
        return;
    }
    if (test_now_ms() > deadline_ms) {
        timed_out = true;
        corral_loop_stop(loop);
        return;
    }
    ck_assert_int_eq(corral_loop_defer(loop, pump_again, NULL), 0);
}

/* The next step at the loop's next turn: with no sleep in between (a
 * timer's millisecond would be paid for every step, and a loaded machine
 * stretches each to several), but after the server's timers and
 * deferred flushes. */
static void pump_again(void *arg)
{
    pump(NULL, arg);
}

static void pump_stop(corral_timer *timer, void *arg)
{
    (void)timer;
    (void)arg;
    corral_loop_stop(loop);
}

/* Runs the wire until `cond` holds (checked once the handshake is done,
 * or the client failed), or `ms` pass. */
static bool run_until(bool (*cond)(void), int ms)
{
    corral_timer *timer;
    ck_assert_int_eq(corral_timer_new(loop, pump, NULL, &timer), 0);
    done_cond = cond;
    deadline_ms = test_now_ms() + (uint64_t)ms;
    timed_out = false;
    corral_timer_start(timer, 0);
    ck_assert_int_eq(corral_loop_run(loop), 0);
    corral_timer_free(timer);
    return !timed_out;
}

static bool handshake_done(void)
{
    return cl.handshake_done || cl.failed;
}

static void setup(void)
{
    modules_init();
    client_sni = "localhost";
    client_priority = "";
    client_max_data = 4 * 1024 * 1024;
    client_holds_max_data = false;
    vhosts[0] = (struct http_vhost){.locations = locations,
                                    .location_count = sizeof(locations) / sizeof(locations[0]),
                                    .limits = HTTP_LIMITS_DEFAULT};
    site = (struct http_site){.vhosts = vhosts, .vhost_count = 1, .stats = stats};
    snprintf(dir, sizeof(dir), "/tmp/corral-h3-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char command[512], out[256];
    snprintf(command, sizeof(command),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout key.pem -out cert.pem -subj /CN=localhost -days 1 2>&1",
             dir);
    ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    char cert[128], key[128];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    struct h3_endpoint_config config = {
        .site = &site,
        .loop = loop,
        .worker_index = 0x1234,
        .cert_file = cert,
        .key_file = key,
        .output = server_output,
    };
    ck_assert_int_eq(h3_endpoint_new(&config, &ep), 0);
    to_server = (struct queue){.items = calloc(QUEUE_CAP, sizeof(struct datagram))};
    to_client = (struct queue){.items = calloc(QUEUE_CAP, sizeof(struct datagram))};
    ck_assert_ptr_nonnull(to_server.items);
    ck_assert_ptr_nonnull(to_client.items);
    client_addr = (struct sockaddr_in){
        .sin_family = AF_INET, .sin_port = htons(40000), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    server_addr = client_addr;
    server_addr.sin_port = htons(443);
}

static void teardown(void)
{
    if (tail_timer != NULL)
        corral_timer_free(tail_timer);
    tail_timer = NULL;
    if (cl.quic != NULL)
        client_free();
    h3_endpoint_free(ep);
    corral_loop_free(loop);
    free(to_server.items);
    free(to_client.items);
    char command[128], out[64];
    snprintf(command, sizeof(command), "rm -rf %s", dir);
    test_run(command, out, sizeof(out));
}

/* Connects, then checks that the server's ID names its worker. */
static void connect_client(void)
{
    client_start("h3");
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(!cl.failed);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 1);
    const ngtcp2_cid *dcid = ngtcp2_conn_get_dcid(cl.quic);
    ck_assert_int_eq(h3_endpoint_cid_worker(dcid->data, dcid->datalen), 0x1234);
}

/* ------------------------------------------------------------- the cases */

static struct request *waited;
static size_t waited_count;

static bool all_ended(void)
{
    for (size_t i = 0; i < waited_count; i++)
        if (!waited[i].ended && !waited[i].closed)
            return cl.failed;
    return true;
}

static void wait_for(struct request *r, size_t count, int ms)
{
    waited = r;
    waited_count = count;
    ck_assert_msg(run_until(all_ended, ms), "timed out");
    ck_assert(!cl.failed);
}

START_TEST(get_return)
{
    connect_client();
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    /* A small certificate's first flight is under 3 times the client's
     * Initial: the limit was never reached. */
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_AMPLIFICATION_LIMITED], 0);
    ck_assert(r.ended);
    ck_assert_str_eq(r.response, "hello\n");
    free(r.response);
}
END_TEST

/* ----------------------------------------------------- SNI */

static struct http_return ret_a = {.status = 200, .text = "a\n", .text_len = 2},
                          ret_b = {.status = 200, .text = "b\n", .text_len = 2};
static const struct http_location locations_a[] = {
    {.path = "/", .path_len = 1, .handler = &http_return_handler, .handler_data = &ret_a},
};
static const struct http_location locations_b[] = {
    {.path = "/", .path_len = 1, .handler = &http_return_handler, .handler_data = &ret_b},
};
static const char *const names_a[] = {"a.test"}, *const names_b[] = {"*.b.test"};

static void endpoint_again(struct h3_endpoint_config *config);

/* A certificate for `name` as DIR/<file>.pem and DIR/<file>.key. */
static void make_named_certificate(const char *file, const char *name)
{
    char command[512], out[256];
    snprintf(command, sizeof(command),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout %s.key -out %s.pem -subj /CN=%s -days 1 2>&1",
             dir, file, file, name);
    ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
}

/* The site's three vhosts: the default one (localhost's certificate),
 * a.test and *.b.test, each with its own certificate, each in a TLS group
 * of its own. */
static void endpoint_with_three_servers(void)
{
    make_named_certificate("a", "a.test");
    make_named_certificate("b", "b.test");
    vhosts[1] = (struct http_vhost){.names = names_a,
                                    .name_count = 1,
                                    .locations = locations_a,
                                    .location_count = 1,
                                    .limits = HTTP_LIMITS_DEFAULT,
                                    .tls_group = 1};
    vhosts[2] = (struct http_vhost){.names = names_b,
                                    .name_count = 1,
                                    .locations = locations_b,
                                    .location_count = 1,
                                    .limits = HTTP_LIMITS_DEFAULT,
                                    .tls_group = 2};
    site.vhost_count = 3;
    static char files[6][128];
    snprintf(files[0], sizeof(files[0]), "%s/cert.pem", dir);
    snprintf(files[1], sizeof(files[1]), "%s/key.pem", dir);
    snprintf(files[2], sizeof(files[2]), "%s/a.pem", dir);
    snprintf(files[3], sizeof(files[3]), "%s/a.key", dir);
    snprintf(files[4], sizeof(files[4]), "%s/b.pem", dir);
    snprintf(files[5], sizeof(files[5]), "%s/b.key", dir);
    static struct h3_certificate pairs[3];
    for (int v = 0; v < 3; v++)
        pairs[v] = (struct h3_certificate){.cert_file = files[2 * v], .key_file = files[2 * v + 1]};
    struct h3_endpoint_config config = {.vhost_certificates = pairs};
    endpoint_again(&config);
}

/* Connects with client_sni (connect_client() for a second connection:
 * the endpoint keeps the first ones until they time out). */
static void sni_connect(void)
{
    client_start("h3");
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(!cl.failed);
}

/* The common name of the certificate the server presented. */
static void peer_common_name(char *out, size_t size)
{
    unsigned count = 0;
    const gnutls_datum_t *chain = gnutls_certificate_get_peers(cl.tls, &count);
    ck_assert_ptr_nonnull(chain);
    ck_assert_uint_ge(count, 1);
    gnutls_x509_crt_t crt;
    ck_assert_int_eq(gnutls_x509_crt_init(&crt), 0);
    ck_assert_int_eq(gnutls_x509_crt_import(crt, &chain[0], GNUTLS_X509_FMT_DER), 0);
    ck_assert_int_eq(
        gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, out, &size), 0);
    gnutls_x509_crt_deinit(crt);
}

/* A GET of "/" for `authority`: its status, and its body in `body` (a
 * copy, at most 15 bytes). */
static bool waited_closed(void)
{
    return waited[0].closed || cl.failed;
}

static unsigned get_authority(const char *authority, char body[16])
{
    const char *fields[] = {":method", "GET",   ":scheme", "https", ":authority",
                            authority, ":path", "/",       NULL};
    struct request r = {0};
    client_request(&r, fields);
    wait_for(&r, 1, 5000);
    /* The stream's close comes after its end: waited for, so that it
     * does not land in the next call's request, at the same address. */
    ck_assert(run_until(waited_closed, 5000));
    snprintf(body, 16, "%s", r.response != NULL ? r.response : "");
    free(r.response);
    return r.status;
}

/* SNI picks the certificate as a TLS listen does: a.test's for a.test,
 * *.b.test's for x.b.test, the default server's for a name no server
 * has and for no name; requests go to :authority's vhost, and one for a
 * vhost of another certificate than SNI's is misdirected (421). */
/* A vhost whose certificate is named by $ssl_server_name (and one pair
 * that is not, or none): each client gets the certificate read for its
 * SNI name, a.test's and b.test's (checked by their common names, twice
 * each: the second from the cache); a name without files gets the other
 * pair, or, without one, no handshake. */
static void certificates_by_name(bool with_static)
{
    make_named_certificate("a.test", "a.test");
    make_named_certificate("b.test", "b.test");
    static char files[4][128];
    snprintf(files[0], sizeof(files[0]), "%s/$ssl_server_name.pem", dir);
    snprintf(files[1], sizeof(files[1]), "%s/${ssl_server_name}.key", dir);
    snprintf(files[2], sizeof(files[2]), "%s/cert.pem", dir);
    snprintf(files[3], sizeof(files[3]), "%s/key.pem", dir);
    static struct h3_certificate pairs[1], other;
    other = (struct h3_certificate){.cert_file = files[2], .key_file = files[3]};
    pairs[0] = (struct h3_certificate){.cert_file = files[0],
                                       .key_file = files[1],
                                       .by_name = true,
                                       .next = with_static ? &other : NULL};
    endpoint_again(&(struct h3_endpoint_config){.vhost_certificates = pairs});
    static const char *const names[] = {"a.test", "b.test", "A.Test", "b.test"};
    static const char *const cns[] = {"a.test", "b.test", "a.test", "b.test"};
    char cn[128];
    for (size_t i = 0; i < 4; i++) {
        client_sni = names[i];
        sni_connect();
        peer_common_name(cn, sizeof(cn));
        ck_assert_str_eq(cn, cns[i]);
        client_free();
    }
    client_sni = "c.test"; /* no files */
    client_start("h3");
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(cl.failed == !with_static);
    if (with_static) {
        peer_common_name(cn, sizeof(cn));
        ck_assert_str_eq(cn, "localhost");
    }
}

START_TEST(certificate_named_by_sni)
{
    certificates_by_name(false);
}
END_TEST

START_TEST(certificate_named_by_sni_or_another)
{
    certificates_by_name(true);
}
END_TEST

START_TEST(sni_picks_the_server)
{
    endpoint_with_three_servers();
    char cn[128], body[16];

    client_sni = "a.test";
    sni_connect();
    peer_common_name(cn, sizeof(cn));
    ck_assert_str_eq(cn, "a.test");
    ck_assert_uint_eq(get_authority("a.test", body), 200);
    ck_assert_str_eq(body, "a\n");
    ck_assert_uint_eq(get_authority("x.b.test", body), 421);
    ck_assert_uint_eq(get_authority("localhost", body), 421);
    client_free();

    client_sni = "x.b.test";
    sni_connect();
    peer_common_name(cn, sizeof(cn));
    ck_assert_str_eq(cn, "b.test");
    ck_assert_uint_eq(get_authority("y.b.test", body), 200);
    ck_assert_str_eq(body, "b\n");
    client_free();

    client_sni = "nobody.test";
    sni_connect();
    peer_common_name(cn, sizeof(cn));
    ck_assert_str_eq(cn, "localhost");
    ck_assert_uint_eq(get_authority("localhost", body), 200);
    ck_assert_str_eq(body, "hello\n");
    ck_assert_uint_eq(get_authority("a.test", body), 421);
    client_free();

    /* The longest name the buffer takes (255 bytes; GnuTLS sends no
     * longer one): still a name, *.b.test's. */
    static char long_name[256];
    memset(long_name, 'a', 255);
    memcpy(long_name + 255 - 7, ".b.test", 7);
    client_sni = long_name;
    sni_connect();
    peer_common_name(cn, sizeof(cn));
    ck_assert_str_eq(cn, "b.test");
    ck_assert_uint_eq(get_authority("y.b.test", body), 200);
    ck_assert_str_eq(body, "b\n");
    client_free();

    /* Without SNI: the default server's certificate, and no check (as
     * over TCP, and in nginx). */
    client_sni = NULL;
    sni_connect();
    peer_common_name(cn, sizeof(cn));
    ck_assert_str_eq(cn, "localhost");
    ck_assert_uint_eq(get_authority("a.test", body), 200);
    ck_assert_str_eq(body, "a\n");
}
END_TEST

/* A server with an RSA certificate and an ECDSA one offers the one whose
 * key suits the client's signature algorithms: RSA to a client that
 * takes only RSA-PSS, ECDSA to one that takes only ECDSA (one that takes
 * both gets whichever GnuTLS prefers, ECDSA here, not checked). */
START_TEST(certificate_by_signature_algorithms)
{
    char command[512], out[256];
    snprintf(command, sizeof(command),
             "cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.pem "
             "-subj /CN=rsa.test -days 1 2>&1",
             dir);
    ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
    static char files[4][128];
    snprintf(files[0], sizeof(files[0]), "%s/rsa.pem", dir);
    snprintf(files[1], sizeof(files[1]), "%s/rsa.key", dir);
    snprintf(files[2], sizeof(files[2]), "%s/cert.pem", dir);
    snprintf(files[3], sizeof(files[3]), "%s/key.pem", dir);
    static struct h3_certificate ecdsa, pairs[1];
    ecdsa = (struct h3_certificate){.cert_file = files[2], .key_file = files[3]};
    pairs[0] = (struct h3_certificate){.cert_file = files[0], .key_file = files[1], .next = &ecdsa};
    struct h3_endpoint_config config = {.vhost_certificates = pairs};
    endpoint_again(&config);
    char cn[128], body[16];

    client_priority = ":-SIGN-ALL:+SIGN-ECDSA-SECP256R1-SHA256";
    sni_connect();
    peer_common_name(cn, sizeof(cn));
    ck_assert_str_eq(cn, "localhost");
    ck_assert_uint_eq(get_authority("localhost", body), 200);
    client_free();

    client_priority = ":-SIGN-ALL:+SIGN-RSA-PSS-RSAE-SHA256";
    sni_connect();
    peer_common_name(cn, sizeof(cn));
    ck_assert_str_eq(cn, "rsa.test");
    ck_assert_uint_eq(get_authority("localhost", body), 200);
}
END_TEST

/* The worker a datagram's destination ID names, as the hand-off between
 * workers reads it: the client's packets once it has the server's ID
 * name the endpoint's worker; made-up long headers too; a
 * client's own 18-byte ID and datagrams too short for an ID name none. */
START_TEST(packets_name_their_worker)
{
    client_start("h3");
    client_write();
    ck_assert_uint_ge(to_server.count, 1);
    struct datagram *first = &to_server.items[to_server.head];
    ck_assert_int_eq(h3_endpoint_packet_worker(first->data, first->len), -1);
    ck_assert(run_until(handshake_done, 5000));
    struct request r = {0};
    get(&r, "/");
    client_write();
    /* Its Handshake packets (long headers) and 1-RTT ones (short) carry
     * the server's ID by now. */
    ck_assert_uint_ge(to_server.count, 1);
    for (size_t i = 0; i < to_server.count; i++) {
        struct datagram *d = &to_server.items[(to_server.head + i) % QUEUE_CAP];
        ck_assert_int_eq(h3_endpoint_packet_worker(d->data, d->len), 0x1234);
    }
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
    ck_assert_uint_eq(h3_endpoint_handshakes(ep), 1);

    uint8_t pkt[64] = {0xc0, 0, 0, 0, 1, 16, 0x01, 0xab, 0xcd};
    ck_assert_int_eq(h3_endpoint_packet_worker(pkt, sizeof(pkt)), 0xabcd);
    ck_assert_int_eq(h3_endpoint_packet_worker(pkt, 6 + 16), 0xabcd);
    ck_assert_int_eq(h3_endpoint_packet_worker(pkt, 6 + 15), -1); /* the ID cut */
    ck_assert_int_eq(h3_endpoint_packet_worker(pkt, 5), -1);
    ck_assert_int_eq(h3_endpoint_packet_worker(pkt, 0), -1);
    pkt[5] = 8; /* an ID of another length is not ours */
    ck_assert_int_eq(h3_endpoint_packet_worker(pkt, sizeof(pkt)), -1);
    uint8_t short_pkt[17] = {0x40, 0x01, 0x00, 0x07};
    ck_assert_int_eq(h3_endpoint_packet_worker(short_pkt, sizeof(short_pkt)), 7);
    ck_assert_int_eq(h3_endpoint_packet_worker(short_pkt, 16), -1);
    short_pkt[1] = 0x02; /* another layout version */
    ck_assert_int_eq(h3_endpoint_packet_worker(short_pkt, sizeof(short_pkt)), -1);
}
END_TEST

static bool drain_done;
static void on_drained(void *arg)
{
    *(bool *)arg = true;
}

static bool drained_and_closed(void)
{
    return drain_done && cl.closed_by_server;
}

static bool response_begun(void)
{
    return waited->status != 0;
}

/* A drain (a reload or a graceful stop): the IDs carry the endpoint's
 * generation tag after the worker index; a 1 MB response under way when
 * the drain begins is finished, every byte, after GOAWAY's notice and its
 * final ID (the request's stream + 4); then the connection is closed by
 * the server and the drain is done.  A new client is refused meanwhile.
 * An endpoint without connections is drained at once. */
START_TEST(drain_sends_goaway_then_closes)
{
    struct h3_endpoint_config config = {.generation = 0x5a};
    endpoint_again(&config);
    connect_client();
    const ngtcp2_cid *dcid = ngtcp2_conn_get_dcid(cl.quic);
    ck_assert_int_eq(h3_endpoint_cid_generation(dcid->data, dcid->datalen), 0x5a);
    struct request r = {0};
    get(&r, "/big");
    client_write();
    ck_assert_uint_eq(to_server.count > 0, 1);
    ck_assert_int_eq(h3_endpoint_packet_generation(to_server.items[to_server.head].data,
                                                   to_server.items[to_server.head].len),
                     0x5a);
    waited = &r;
    ck_assert(run_until(response_begun, 5000));
    drain_done = false;
    h3_endpoint_drain(ep, on_drained, &drain_done);
    ck_assert(!drain_done);
    ck_assert(run_until(drained_and_closed, 20000));
    ck_assert(r.ended);
    ck_assert_uint_eq(r.status, 200);
    ck_assert_uint_eq(r.response_len, BIG_LEN);
    for (size_t i = 0; i < BIG_LEN; i++)
        if ((uint8_t)r.response[i] != pattern(i))
            ck_abort_msg("byte %zu differs", i);
    free(r.response);
    ck_assert_uint_ge(cl.goaways, 2);
    ck_assert_int_eq(cl.goaway_id, r.id + 4);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);

    client_free();
    client_start("h3");
    ck_assert(!run_until(handshake_done, 300));
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);

    endpoint_again(&config);
    drain_done = false;
    h3_endpoint_drain(ep, on_drained, &drain_done);
    ck_assert(drain_done);
}
END_TEST

START_TEST(large_response_head)
{
    connect_client();
    struct request r = {0};
    get(&r, "/fields");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    ck_assert_uint_eq(r.x_fields, 40);
    ck_assert(!r.connection);
    ck_assert_str_eq(r.response, "ok");
    free(r.response);
}
END_TEST

static char *post_body(size_t len)
{
    char *body = malloc(len);
    ck_assert_ptr_nonnull(body);
    for (size_t i = 0; i < len; i++)
        body[i] = (char)('a' + i % 26);
    return body;
}

/* 300 KB, past the 64 KiB stream window several times: the body gets
 * through only as the handler takes it (it pauses at each piece). */
START_TEST(post_counted)
{
    connect_client();
    size_t len = 300 * 1024;
    char *body = post_body(len);
    struct request r = {.body = body, .body_len = len};
    char length[16];
    snprintf(length, sizeof(length), "%zu", len);
    const char *fields[] = {":method",        "POST",      ":scheme", "https",
                            ":authority",     "localhost", ":path",   "/count",
                            "content-length", length,      NULL};
    client_request(&r, fields);
    wait_for(&r, 1, 30000);
    ck_assert_uint_eq(r.status, 200);
    ck_assert_str_eq(r.response, "len=307200");
    ck_assert_uint_eq(counted.bytes, len);
    ck_assert_uint_gt(counted.pauses, 4);
    free(r.response);
    free(body);
}
END_TEST

/* Twenty requests at once on one connection, and a large response that
 * goes at the pace of the acknowledgements (on_drain). */
START_TEST(many_streams)
{
    gso_runs = 0;
    connect_client();
    struct request r[21] = {{0}};
    for (int i = 0; i < 20; i++)
        get(&r[i], "/x");
    get(&r[20], "/big");
    wait_for(r, 21, 20000);
    for (int i = 0; i < 20; i++) {
        ck_assert_uint_eq(r[i].status, 200);
        ck_assert_str_eq(r[i].response, "hello\n");
        free(r[i].response);
    }
    ck_assert_uint_eq(r[20].status, 200);
    ck_assert_uint_eq(r[20].response_len, BIG_LEN);
    for (size_t i = 0; i < BIG_LEN; i++)
        if ((uint8_t)r[20].response[i] != pattern(i))
            ck_abort_msg("byte %zu differs", i);
    ck_assert_uint_gt(big.drains, 0);
    free(r[20].response);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 1);
    ck_assert_uint_eq(gso_runs, 0); /* the endpoint's gso is off */
}
END_TEST

/* Replaces the case's endpoint with one of `config`'s options (its
 * site, loop, files and output are the usual ones). */
static void endpoint_again(struct h3_endpoint_config *config)
{
    h3_endpoint_free(ep);
    static char cert[128], key[128];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    config->site = &site;
    config->loop = loop;
    config->worker_index = 0x1234;
    config->cert_file = cert;
    config->key_file = key;
    config->output = server_output;
    ck_assert_int_eq(h3_endpoint_new(config, &ep), 0);
}

static bool token_refused(void)
{
    uint64_t retry[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, retry);
    return retry[H3_TOKENS_REFUSED] > 0;
}

static bool client_failed(void);

/* A client whose Retry token the endpoint refuses is told so at once
 * (RFC 9000 8.1.2): its connection ends with INVALID_TOKEN, counted, and
 * the endpoint keeps no connection. */
static void closed_with_invalid_token(void)
{
    cl.handshake_done = true; /* so that run_until() looks at its condition */
    ck_assert(run_until(client_failed, 3000));
    ngtcp2_connection_close_error ccerr;
    ngtcp2_conn_get_connection_close_error(cl.quic, &ccerr);
    ck_assert_int_eq(ccerr.type, NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT);
    ck_assert_uint_eq(ccerr.error_code, NGTCP2_INVALID_TOKEN);
    ck_assert(token_refused());
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
}

/* quic_retry: a client's first Initial is answered with a Retry; its
 * next, with the token, opens the connection (ngtcp2's client follows
 * the Retry and checks the IDs the server's transport parameters name),
 * and a request goes through. */
START_TEST(retry_valid_token)
{
    endpoint_again(&(struct h3_endpoint_config){.retry = true});
    connect_client();
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
    uint64_t retry[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, retry);
    ck_assert_uint_eq(retry[H3_RETRIES], 1);
    ck_assert_uint_eq(retry[H3_TOKENS_REFUSED], 0);
}
END_TEST

/* A token the server never made (Retry's magic byte, the rest random):
 * no Retry, no connection, counted. */
START_TEST(retry_forged_token)
{
    endpoint_again(&(struct h3_endpoint_config){.retry = true});
    client_token_len = 80;
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_RANDOM, client_token, client_token_len), 0);
    client_token[0] = NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY;
    client_start("h3");
    closed_with_invalid_token();
    uint64_t retry[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, retry);
    ck_assert_uint_eq(retry[H3_RETRIES], 0);
}
END_TEST

/* A token of the server's own that comes back after its lifetime (here
 * 50 ms): the Retry is held back from the client 150 ms, then its
 * Initial with the token is dropped, counted, and no connection opens. */
START_TEST(retry_expired_token)
{
    endpoint_again(&(struct h3_endpoint_config){.retry = true, .retry_token_timeout_ms = 50});
    client_start("h3");
    client_write();
    ck_assert_uint_eq(to_server.count, 1);
    struct datagram *d = &to_server.items[to_server.head];
    ck_assert_int_eq(h3_endpoint_input(ep, (struct sockaddr *)&server_addr, sizeof(server_addr),
                                       (struct sockaddr *)&client_addr, sizeof(client_addr),
                                       d->data, d->len, 0),
                     0);
    to_server.count = 0;
    ck_assert_uint_eq(to_client.count, 1); /* the Retry */
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
    uint64_t until = test_now_ms() + 150;
    while (test_now_ms() < until) /* the token's age is the point here */
        usleep(10 * 1000);
    closed_with_invalid_token();
}
END_TEST

/* quic_host_key: a Retry made by one endpoint, and the client's token
 * taken by another endpoint (another worker, or the next generation
 * after a reload) whose keys come from the same host key; from another
 * host key, refused. */
static void token_across_endpoints(bool same_key)
{
    uint8_t key[32], token_secret[32], reset_secret[32];
    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (uint8_t)(i * 7 + 1);
    ck_assert_int_eq(h3_host_key_derive(key, 31, token_secret, reset_secret), -EINVAL);
    ck_assert_int_eq(h3_host_key_derive(key, sizeof(key), token_secret, reset_secret), 0);
    endpoint_again(&(struct h3_endpoint_config){
        .retry = true, .token_secret = token_secret, .reset_secret = reset_secret});
    client_start("h3");
    client_write();
    ck_assert_uint_eq(to_server.count, 1);
    struct datagram *d = &to_server.items[to_server.head];
    ck_assert_int_eq(h3_endpoint_input(ep, (struct sockaddr *)&server_addr, sizeof(server_addr),
                                       (struct sockaddr *)&client_addr, sizeof(client_addr),
                                       d->data, d->len, 0),
                     0);
    to_server.count = 0;
    ck_assert_uint_eq(to_client.count, 1); /* the Retry */
    if (!same_key)
        key[0] ^= 1;
    ck_assert_int_eq(h3_host_key_derive(key, sizeof(key), token_secret, reset_secret), 0);
    endpoint_again(&(struct h3_endpoint_config){
        .retry = true, .token_secret = token_secret, .reset_secret = reset_secret});
    uint64_t retry[H3_COUNTER_COUNT];
    if (!same_key) {
        closed_with_invalid_token();
        return;
    }
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(!cl.failed);
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
    h3_endpoint_counters(ep, retry);
    ck_assert_uint_eq(retry[H3_RETRIES], 0);
    ck_assert_uint_eq(retry[H3_TOKENS_REFUSED], 0);
}

START_TEST(host_key_token_taken_elsewhere)
{
    token_across_endpoints(true);
}
END_TEST

START_TEST(other_host_key_token_refused)
{
    token_across_endpoints(false);
}
END_TEST

static bool client_failed(void)
{
    return cl.failed;
}

/* A client's first Initial given to the endpoint by hand, its answers
 * left unread; returns how many datagrams it was answered with, the
 * first in *first_byte. */
static size_t initial_only(uint8_t *first_byte)
{
    client_start("h3");
    client_write();
    ck_assert_uint_eq(to_server.count, 1);
    struct datagram *d = &to_server.items[to_server.head];
    to_client.count = 0;
    h3_endpoint_input(ep, (struct sockaddr *)&server_addr, sizeof(server_addr),
                      (struct sockaddr *)&client_addr, sizeof(client_addr), d->data, d->len, 0);
    to_server.count = 0;
    size_t answers = to_client.count;
    if (answers > 0)
        *first_byte = to_client.items[to_client.head].data[0];
    to_client.count = 0;
    client_free();
    return answers;
}

/* A Retry packet's first byte (RFC 9000 17.2.5: long header, type 3). */
static bool is_retry(uint8_t byte)
{
    return (byte & 0xf0) == 0xf0;
}

/* quic_retry_threshold without quic_retry: while fewer handshakes than
 * the threshold are in progress, a client's Initial opens a connection
 * and is answered by the handshake; from the threshold on, with a Retry
 * (counted as a flood Retry), and the client that follows it is served. */
START_TEST(retry_over_threshold)
{
    endpoint_again(&(struct h3_endpoint_config){.retry_threshold = 3});
    uint8_t byte = 0;
    for (unsigned i = 0; i < 3; i++) { /* three handshakes left hanging */
        ck_assert_uint_ge(initial_only(&byte), 1);
        ck_assert(!is_retry(byte));
        ck_assert_uint_eq(h3_endpoint_conn_count(ep), i + 1);
    }
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 0);
    ck_assert_uint_eq(c[H3_HANDSHAKING], 3);
    ck_assert_uint_eq(initial_only(&byte), 1);
    ck_assert(is_retry(byte));
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 3);
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 1);
    ck_assert_uint_eq(c[H3_FLOOD_RETRIES], 1);
    /* A whole client now: Retry, then its connection and a request. */
    client_start("h3");
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(!cl.failed);
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 2);
    ck_assert_uint_eq(c[H3_FLOOD_RETRIES], 2);
    ck_assert_uint_eq(c[H3_HANDSHAKING], 3); /* its own handshake completed */
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 4);
}
END_TEST

/* The 3x amplification limit (RFC 9000 8.1): with a certificate of some
 * 5 KB, the server's first flight is more than 3 times the client's
 * Initial.  A client that sends its Initial and then nothing, no
 * acknowledgement, no Handshake packet, gets at most 3 times what it
 * sent from the server, over the whole life of the connection (to its
 * handshake timeout, through the server's retransmissions); the limit
 * reached is counted.  A client that goes on acknowledging gets the
 * rest and completes. */
static bool no_connection(void);

START_TEST(amplification_limit_without_acks)
{
    char command[8192], out[256];
    int n = snprintf(command, sizeof(command),
                     "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                     "-nodes -keyout key.pem -out cert.pem -subj /CN=localhost -days 1 "
                     "-addext subjectAltName=DNS:localhost",
                     dir);
    for (int i = 0; i < 80; i++) /* about 5 KB of names */
        n += snprintf(command + n, sizeof(command) - (size_t)n,
                      ",DNS:name-%02d.a-rather-long-domain-to-fill-the-certificate.test", i);
    snprintf(command + n, sizeof(command) - (size_t)n, " 2>&1");
    ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
    endpoint_again(&(struct h3_endpoint_config){.handshake_timeout_ms = 1500});
    client_start("h3");
    client_write();
    ck_assert_uint_eq(to_server.count, 1);
    struct datagram *d = &to_server.items[to_server.head];
    uint64_t sent_by_client = d->len;
    ck_assert_int_eq(h3_endpoint_input(ep, (struct sockaddr *)&server_addr, sizeof(server_addr),
                                       (struct sockaddr *)&client_addr, sizeof(client_addr),
                                       d->data, d->len, 0),
                     0);
    to_server.count = 0;
    to_server.drop_percent = 100; /* the client says nothing more */
    cl.handshake_done = true;     /* so that run_until() looks at its condition */
    ck_assert(run_until(no_connection, 5000));
    ck_assert_uint_gt(server_bytes_out, 2 * sent_by_client); /* it sent what it could */
    ck_assert_uint_le(server_bytes_out, 3 * sent_by_client);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_AMPLIFICATION_LIMITED], 1);
    client_free();
    /* A client that acknowledges: the same certificate, served. */
    to_server.drop_percent = 0;
    to_client.count = 0;
    client_start("h3");
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(!cl.failed);
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
}
END_TEST

static bool have_ticket(void);

/* A first connection that leaves the client a session ticket and the
 * server's transport parameters. */
static void connection_for_a_ticket(void)
{
    client_resume = client_early = false;
    connect_client();
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
    ck_assert(run_until(have_ticket, 3000));
    ck_assert(!gnutls_session_is_resumed(cl.tls));
    client_free();
}

/* Session tickets: a client resumes its session on its next
 * connection, also on another endpoint whose ticket key is the same (as
 * another worker's, or, from quic_host_key, the next generation's);
 * under another key, it falls back to a full handshake. */
START_TEST(session_resumed_by_ticket)
{
    uint8_t host_key[32], ticket_key[H3_TICKET_KEY_LEN];
    memset(host_key, 0x3c, sizeof(host_key));
    ck_assert_int_eq(h3_host_key_ticket_key(host_key, 31, ticket_key), -EINVAL);
    ck_assert_int_eq(h3_host_key_ticket_key(host_key, sizeof(host_key), ticket_key), 0);
    endpoint_again(&(struct h3_endpoint_config){.ticket_key = ticket_key});
    connection_for_a_ticket();
    for (int round = 0; round < 3; round++) {
        if (round > 0) { /* another endpoint: the same key, then another */
            host_key[0] ^= (uint8_t)(round == 2);
            ck_assert_int_eq(h3_host_key_ticket_key(host_key, sizeof(host_key), ticket_key), 0);
            endpoint_again(&(struct h3_endpoint_config){.ticket_key = ticket_key});
        }
        client_resume = true;
        client_addr.sin_port = htons(ntohs(client_addr.sin_port) + 1);
        client_start("h3");
        ck_assert(run_until(handshake_done, 5000));
        ck_assert(!cl.failed);
        ck_assert_int_eq(gnutls_session_is_resumed(cl.tls) != 0, round < 2);
        struct request r = {0};
        get(&r, "/");
        wait_for(&r, 1, 5000);
        ck_assert_uint_eq(r.status, 200);
        free(r.response);
        client_free();
    }
}
END_TEST

static struct request early[2];

/* 0-RTT with ssl_early_data: a client resuming its session sends a GET
 * and a POST in early data, before its handshake completes.  The GET is
 * served from it (counted); the POST, not replay-safe, is answered 425
 * Too Early (RFC 8470).  With early data off (the default), the ticket
 * allows none: the same two requests wait for the handshake and both
 * are served. */
static void early_requests(bool on)
{
    endpoint_again(&(struct h3_endpoint_config){.early_data = on});
    connection_for_a_ticket();
    client_resume = client_early = true;
    client_addr.sin_port = htons(ntohs(client_addr.sin_port) + 1);
    client_start("h3");
    memset(early, 0, sizeof(early));
    get(&early[0], "/");
    const char *fields[] = {":method",   "POST",  ":scheme", "https", ":authority",
                            "localhost", ":path", "/",       NULL};
    early[1].body = "x=1";
    early[1].body_len = 3;
    client_request(&early[1], fields);
    wait_for(early, 2, 5000);
    ck_assert(gnutls_session_is_resumed(cl.tls));
    ck_assert_int_eq((gnutls_session_get_flags(cl.tls) & GNUTLS_SFLAGS_EARLY_DATA) != 0, on);
    ck_assert_uint_eq(early[0].status, 200);
    ck_assert_uint_eq(early[1].status, on ? 425 : 200);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_EARLY_REQUESTS], on ? 1 : 0);
    ck_assert_uint_eq(c[H3_TOO_EARLY], on ? 1 : 0);
    ck_assert_uint_eq(c[H3_REPLAYS], 0);
    free(early[0].response);
    free(early[1].response);
}

START_TEST(early_data_replay_safe_only)
{
    early_requests(true);
}
END_TEST

START_TEST(early_data_off_by_default)
{
    early_requests(false);
}
END_TEST

/* A resuming client's 0-RTT first flight, from a port of its own (its
 * Initial with the ClientHello, its 0-RTT packet with a GET): the
 * datagrams as they left, copied (*count of them, to free), once the
 * GET has been answered 200. */
static struct datagram *early_flight(size_t *count)
{
    client_resume = client_early = true;
    client_addr.sin_port = htons(ntohs(client_addr.sin_port) + 1);
    client_start("h3");
    struct request r = {0};
    get(&r, "/");
    client_write();
    *count = to_server.count;
    ck_assert_uint_ge(*count, 1);
    struct datagram *flight = calloc(*count, sizeof(*flight));
    ck_assert_ptr_nonnull(flight);
    for (size_t i = 0; i < *count; i++)
        flight[i] = to_server.items[(to_server.head + i) % QUEUE_CAP];
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
    return flight;
}

/* Feeds `flight` (freed) to `to` as if sent again from another port. */
static void replay_flight(struct h3_endpoint *to, struct datagram *flight, size_t count)
{
    client_addr.sin_port = htons(ntohs(client_addr.sin_port) + 1);
    for (size_t i = 0; i < count; i++)
        h3_endpoint_input(to, (struct sockaddr *)&server_addr, sizeof(server_addr),
                          (struct sockaddr *)&client_addr, sizeof(client_addr), flight[i].data,
                          flight[i].len, 0);
    free(flight);
}

/* A replay: the datagrams of a client's 0-RTT first flight (Initial with
 * its ClientHello, 0-RTT with a GET) sent again, from another port, once
 * the first connection is gone.  GnuTLS's anti-replay finds the
 * ClientHello already seen: no early data, the GET it carried is not
 * served (no client answers the handshake), and the replay is counted. */
START_TEST(early_data_replay_refused)
{
    endpoint_again(&(struct h3_endpoint_config){.early_data = true, .idle_timeout_ms = 300});
    connection_for_a_ticket();
    size_t count;
    struct datagram *flight = early_flight(&count);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_EARLY_REQUESTS], 1);
    client_free();
    cl.failed = true;                          /* no client on the wire from here */
    ck_assert(run_until(no_connection, 5000)); /* both idle out */
    replay_flight(ep, flight, count);          /* the same bytes again, from elsewhere */
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_REPLAYS], 1);
    ck_assert_uint_eq(c[H3_EARLY_REQUESTS], 1);
}
END_TEST

/* Two endpoints of one replay store and ticket key, as two workers of a
 * listen: a client given a ticket by the first resumes on the second,
 * made after the ticket, and its GET is served from 0-RTT (the second's
 * anti-replay record began with the store, before the ticket); its
 * first flight replayed to the first endpoint, from another port, is
 * found in the shared record: no early data there, one replay counted.
 * With a record per endpoint, the second refuses the early data and the
 * first takes the replay. */
START_TEST(early_data_across_workers)
{
    struct h3_replay_store *store;
    ck_assert_int_eq(h3_replay_store_new(2, &store), 0);
    uint8_t ticket_key[H3_TICKET_KEY_LEN];
    memset(ticket_key, 0x5a, sizeof(ticket_key));
    endpoint_again(&(struct h3_endpoint_config){
        .early_data = true, .ticket_key = ticket_key, .replay_store = store, .replay_worker = 0});
    connection_for_a_ticket();
    struct h3_endpoint *first = ep;
    ep = NULL; /* endpoint_again() frees nothing */
    endpoint_again(&(struct h3_endpoint_config){
        .early_data = true, .ticket_key = ticket_key, .replay_store = store, .replay_worker = 1});
    size_t count;
    struct datagram *flight = early_flight(&count);
    ck_assert(gnutls_session_get_flags(cl.tls) & GNUTLS_SFLAGS_EARLY_DATA);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_EARLY_REQUESTS], 1);
    replay_flight(first, flight, count);
    h3_endpoint_counters(first, c);
    ck_assert_uint_eq(c[H3_REPLAYS], 1);
    ck_assert_uint_eq(c[H3_EARLY_REQUESTS], 0);
    client_free();
    h3_endpoint_free(first);
    h3_endpoint_free(ep);
    ep = NULL;
    h3_replay_store_free(store);
}
END_TEST

static size_t input_bytes(const uint8_t *pkt, size_t len)
{
    to_client.count = 0;
    h3_endpoint_input(ep, (struct sockaddr *)&server_addr, sizeof(server_addr),
                      (struct sockaddr *)&client_addr, sizeof(client_addr), pkt, len, 0);
    return to_client.count;
}

/* A client Initial of a version not spoken here (a greasing one): a
 * datagram of 1200 bytes is answered with a Version Negotiation packet
 * (version 0, the client's IDs swapped, QUIC v1 offered), counted, and
 * no connection; one under 1200 bytes is not answered. */
START_TEST(unknown_version_negotiated)
{
    uint8_t pkt[1200] = {0xc0, 0x1a, 0x2a, 0x3a, 0x4a, 8, 1, 2, 3, 4, 5, 6, 7, 8, 5, 9, 9, 9, 9, 9};
    ck_assert_uint_eq(input_bytes(pkt, 1199), 0);
    ck_assert_uint_eq(input_bytes(pkt, sizeof(pkt)), 1);
    const struct datagram *d = &to_client.items[to_client.head];
    ck_assert_uint_eq(d->len, 1 + 4 + 1 + 5 + 1 + 8 + 4);
    ck_assert(d->data[0] & 0x80);
    static const uint8_t tail[] = {0, 0, 0, 0, 5, 9, 9, 9, 9, 9, 8, 1,
                                   2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1};
    ck_assert_int_eq(memcmp(d->data + 1, tail, sizeof(tail)), 0);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_VERSION_NEGOTIATIONS], 1);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
}
END_TEST

/* Stateless resets are bounded per second (here 3): ten short-header
 * packets for IDs of our layout that no connection has get three
 * resets, the other seven are counted and dropped; the next second
 * answers again. */
START_TEST(stateless_resets_limited_per_second)
{
    endpoint_again(&(struct h3_endpoint_config){.max_resets_per_second = 3});
    uint8_t pkt[100];
    size_t answered = 0;
    uint64_t start = test_now_ms();
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_NONCE, pkt, sizeof(pkt)), 0);
        pkt[0] = 0x40; /* short header */
        pkt[1] = 0x01; /* our layout, worker 0x1234 */
        pkt[2] = 0x12;
        pkt[3] = 0x34;
        answered += input_bytes(pkt, sizeof(pkt));
    }
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    if (test_now_ms() - start < 500) { /* all within one second, most likely */
        ck_assert_uint_le(answered, 6);
        ck_assert_uint_ge(c[H3_RESETS_LIMITED], 4);
    }
    ck_assert_uint_eq(c[H3_RESETS], answered);
    ck_assert_uint_eq(c[H3_RESETS] + c[H3_RESETS_LIMITED], 10);
    test_sleep_ms(1100);
    ck_assert_uint_eq(input_bytes(pkt, sizeof(pkt)), 1);
}
END_TEST

/* ------------------------------------------ closing and draining periods */

/* A short-header datagram for the server's ID `cid`, the rest random (60
 * bytes: long enough to earn a stateless reset).  Returns how many
 * datagrams answered it, the first in *out (when not NULL). */
static size_t input_for_cid(const ngtcp2_cid *cid, struct datagram *out)
{
    uint8_t pkt[60];
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_NONCE, pkt, sizeof(pkt)), 0);
    pkt[0] = 0x40; /* short header */
    memcpy(pkt + 1, cid->data, cid->datalen);
    size_t n = input_bytes(pkt, sizeof(pkt));
    if (n > 0 && out != NULL)
        *out = to_client.items[to_client.head];
    return n;
}

static bool same_datagram(const struct datagram *a, const struct datagram *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/* Connects a client, then the server closes its connection (as a
 * drain's end or an error does): its ID in *cid, its CONNECTION_CLOSE
 * datagram in *close. */
static void server_closes(ngtcp2_cid *cid, struct datagram *close)
{
    connect_client();
    *cid = *ngtcp2_conn_get_dcid(cl.quic);
    to_client.count = 0;
    h3_endpoint_close(ep);
    ck_assert_uint_eq(to_client.count, 1);
    *close = to_client.items[to_client.head];
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
}

/* RFC 9000 10.2: after the server closed a connection, a packet for its
 * ID gets the same CONNECTION_CLOSE again (the 1st, 2nd and 4th, not the
 * 3rd), not a stateless reset; three PTOs on, the period is over and a
 * stateless reset answers. */
START_TEST(closing_period_repeats_the_close)
{
    ngtcp2_cid cid;
    struct datagram close, got;
    server_closes(&cid, &close);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_CLOSING], 1);
    for (unsigned i = 1; i <= 4; i++) {
        size_t n = input_for_cid(&cid, &got);
        ck_assert_uint_eq(n, (i & (i - 1)) == 0 ? 1 : 0);
        if (n > 0)
            ck_assert(same_datagram(&got, &close));
    }
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_CLOSES_REPEATED], 3);
    ck_assert_uint_eq(c[H3_RESETS], 0);
    uint64_t start = test_now_ms();
    for (;;) {
        if (input_for_cid(&cid, &got) == 1 && !same_datagram(&got, &close))
            break;
        ck_assert_msg(test_now_ms() - start < 5000, "the closing period did not end");
        test_sleep_ms(5);
    }
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RESETS], 1);
    ck_assert_uint_eq(c[H3_CLOSING], 0);
}
END_TEST

/* After the client closed the connection, the server is in its draining
 * period: a packet for the connection's ID gets nothing, not even a
 * stateless reset. */
START_TEST(draining_period_sends_nothing)
{
    connect_client();
    ngtcp2_cid cid = *ngtcp2_conn_get_dcid(cl.quic);
    uint8_t buf[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    ngtcp2_connection_close_error err;
    ngtcp2_connection_close_error_default(&err);
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(cl.quic, &ps.path, &pi, buf, sizeof(buf),
                                                        &err, corral_monotonic_ns());
    ck_assert_int_gt(n, 0);
    ck_assert_uint_eq(input_bytes(buf, (size_t)n), 0);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
    ck_assert_uint_eq(input_for_cid(&cid, NULL), 0);
    ck_assert_uint_eq(input_for_cid(&cid, NULL), 0);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_CLOSING], 1);
    ck_assert_uint_eq(c[H3_RESETS], 0);
    ck_assert_uint_eq(c[H3_CLOSES_REPEATED], 0);
}
END_TEST

/* With room for one closed connection, a second close ends the first's
 * period early (counted): its ID earns a stateless reset, the second's
 * its CONNECTION_CLOSE. */
START_TEST(closing_periods_bounded)
{
    endpoint_again(&(struct h3_endpoint_config){.max_closing = 1});
    ngtcp2_cid first, second;
    struct datagram close_first, close_second, got;
    server_closes(&first, &close_first);
    client_free();
    server_closes(&second, &close_second);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_CLOSING], 1);
    ck_assert_uint_eq(c[H3_CLOSING_EVICTED], 1);
    ck_assert_uint_eq(input_for_cid(&second, &got), 1);
    ck_assert(same_datagram(&got, &close_second));
    ck_assert_uint_eq(input_for_cid(&first, &got), 1);
    ck_assert(!same_datagram(&got, &close_first));
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RESETS], 1);
}
END_TEST

/* The same handshakes in progress under a threshold of 0 (off): no
 * Retry however many. */
START_TEST(no_retry_without_threshold)
{
    uint8_t byte = 0;
    for (unsigned i = 0; i < 5; i++) {
        ck_assert_uint_ge(initial_only(&byte), 1);
        ck_assert(!is_retry(byte));
    }
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 0);
    ck_assert_uint_eq(c[H3_HANDSHAKING], 5);
}
END_TEST

/* NEW_TOKEN: a client's first connection gets a token after its
 * handshake; its next connection, from another port, with the token,
 * skips Retry under quic_retry (its address is validated), and is
 * served. */
static bool have_ticket(void)
{
    return saved_session.size > 0;
}

static void connect_with(const uint8_t *token, size_t len)
{
    memcpy(client_token, token, len);
    client_token_len = len;
    client_addr.sin_port = htons(ntohs(client_addr.sin_port) + 1);
    client_start("h3");
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(!cl.failed);
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
}

static void first_connection_for_a_token(void)
{
    connect_client();
    struct request r = {0};
    get(&r, "/");
    wait_for(&r, 1, 5000);
    ck_assert_uint_eq(r.status, 200);
    free(r.response);
    ck_assert_uint_gt(new_token_len, 0);
    ck_assert_uint_eq(new_token[0], NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR);
    client_free();
}

START_TEST(new_token_skips_retry)
{
    endpoint_again(&(struct h3_endpoint_config){.retry = true});
    first_connection_for_a_token();
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 1);
    ck_assert_uint_eq(c[H3_NEW_TOKENS_SENT], 1);
    ck_assert_uint_eq(c[H3_NEW_TOKENS_TAKEN], 0);
    connect_with(new_token, new_token_len);
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 1); /* no second Retry */
    ck_assert_uint_eq(c[H3_NEW_TOKENS_TAKEN], 1);
    ck_assert_uint_eq(c[H3_TOKENS_REFUSED], 0);
}
END_TEST

/* A NEW_TOKEN token past its lifetime (here 50 ms), or forged (its
 * magic byte, the rest random), validates nothing: the client gets a
 * Retry as one without a token, and is served after it. */
START_TEST(new_token_expired_or_forged)
{
    endpoint_again(&(struct h3_endpoint_config){.retry = true, .new_token_timeout_ms = 50});
    first_connection_for_a_token();
    uint64_t until = test_now_ms() + 150;
    while (test_now_ms() < until) /* the token's age is the point here */
        usleep(10 * 1000);
    connect_with(new_token, new_token_len);
    uint64_t c[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 2);
    ck_assert_uint_eq(c[H3_NEW_TOKENS_TAKEN], 0);
    client_free();
    uint8_t forged[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_RANDOM, forged, sizeof(forged)), 0);
    forged[0] = NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR;
    connect_with(forged, sizeof(forged));
    h3_endpoint_counters(ep, c);
    ck_assert_uint_eq(c[H3_RETRIES], 3);
    ck_assert_uint_eq(c[H3_NEW_TOKENS_TAKEN], 0);
    ck_assert_uint_eq(c[H3_TOKENS_REFUSED], 0);
}
END_TEST

/* A connection's packets reaching an endpoint that does not know it (the
 * next generation after a reload, here a new endpoint): it sends a
 * stateless reset, which the client recognises when the endpoint's keys
 * come from the same host key as the one that issued its IDs, and then
 * drops the connection at once; under another key it is sent, and not
 * recognised. */
static void reset_by_next_endpoint(bool same_key)
{
    uint8_t key[32], token_secret[32], reset_secret[32];
    memset(key, 0x5a, sizeof(key));
    ck_assert_int_eq(h3_host_key_derive(key, sizeof(key), token_secret, reset_secret), 0);
    endpoint_again(
        &(struct h3_endpoint_config){.token_secret = token_secret, .reset_secret = reset_secret});
    connect_client();
    struct request first = {0}; /* confirms the handshake: short headers from now */
    get(&first, "/");
    wait_for(&first, 1, 5000);
    ck_assert_uint_eq(first.status, 200);
    free(first.response);
    if (!same_key)
        key[0] ^= 1;
    ck_assert_int_eq(h3_host_key_derive(key, sizeof(key), token_secret, reset_secret), 0);
    endpoint_again(
        &(struct h3_endpoint_config){.token_secret = token_secret, .reset_secret = reset_secret});
    struct request r = {0};
    get(&r, "/");
    bool failed = run_until(client_failed, same_key ? 3000 : 500);
    ck_assert(failed == same_key);
    uint64_t counters[H3_COUNTER_COUNT];
    h3_endpoint_counters(ep, counters);
    ck_assert_uint_ge(counters[H3_RESETS], 1);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
    free(r.response);
}

START_TEST(stateless_reset_recognised)
{
    reset_by_next_endpoint(true);
}
END_TEST

START_TEST(stateless_reset_of_another_key_ignored)
{
    reset_by_next_endpoint(false);
}
END_TEST

/* With gso on, the endpoint hands its datagrams out in runs of equal
 * size (server_output() splits them at gso_segment, as the kernel
 * would): a 1 MB response goes mostly in runs, every byte as sent. */
START_TEST(gso_runs_carry_a_response)
{
    endpoint_again(&(struct h3_endpoint_config){.gso = true});
    gso_runs = 0;
    connect_client();
    struct request r = {0};
    get(&r, "/big");
    wait_for(&r, 1, 20000);
    ck_assert_uint_eq(r.status, 200);
    ck_assert_uint_eq(r.response_len, BIG_LEN);
    for (size_t i = 0; i < BIG_LEN; i++)
        if ((uint8_t)r.response[i] != pattern(i))
            ck_abort_msg("byte %zu differs", i);
    free(r.response);
    /* 1 MB is at least 700 datagrams; runs of up to 16 */
    ck_assert_uint_ge(gso_runs, 700 / 16);
}
END_TEST

/* A response whose data ends exactly where the client's connection
 * window does, and whose end comes after its data: the FIN alone needs
 * no window, and goes without waiting for a MAX_DATA that never comes. */
START_TEST(fin_at_the_end_of_the_connection_window)
{
    /* What the server sends on all its streams for it (its control and
     * QPACK streams too), counted by a client with room to spare. */
    connect_client();
    struct request r = {0};
    get(&r, "/tail");
    wait_for(&r, 1, 5000);
    ck_assert(r.ended);
    ck_assert_uint_eq(r.response_len, TAIL_LEN);
    uint64_t total = cl.stream_bytes;
    free(r.response);
    client_free();

    /* The same from a client whose window is just that. */
    client_max_data = total;
    client_holds_max_data = true;
    client_start("h3"); /* the first connection stays open on the endpoint */
    ck_assert(run_until(handshake_done, 5000));
    ck_assert(!cl.failed);
    r = (struct request){0};
    get(&r, "/tail");
    wait_for(&r, 1, 3000);
    ck_assert_uint_eq(cl.stream_bytes, total);
    ck_assert_msg(r.ended, "the FIN never came");
    ck_assert_uint_eq(r.status, 200);
    ck_assert_uint_eq(r.response_len, TAIL_LEN);
    for (size_t i = 0; i < TAIL_LEN; i++)
        ck_assert_uint_eq((uint8_t)r.response[i], pattern(i));
    free(r.response);
}
END_TEST

/* A request without :path (nghttp3's check) and one with a target that is
 * not origin-form (the framer's): each stream is reset with
 * H3_MESSAGE_ERROR, and the connection goes on. */
START_TEST(malformed_request)
{
    connect_client();
    struct request r[3] = {{0}};
    const char *no_path[] = {":method", "GET", ":scheme", "https", ":authority", "localhost", NULL};
    client_request(&r[0], no_path);
    const char *bad_target[] = {":method",   "GET",   ":scheme", "https", ":authority",
                                "localhost", ":path", "x",       NULL};
    client_request(&r[1], bad_target);
    get(&r[2], "/");
    wait_for(r, 3, 5000);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(r[i].reset, "request %d not reset", i);
        ck_assert_uint_eq(r[i].status, 0);
        ck_assert_uint_eq(r[i].app_error, NGHTTP3_H3_MESSAGE_ERROR);
    }
    ck_assert_uint_eq(r[2].status, 200);
    ck_assert_str_eq(r[2].response, "hello\n");
    free(r[2].response);
}
END_TEST

/* 5% of the datagrams lost each way, handshake included: a GET and a
 * POST still complete, every byte right. */
START_TEST(lossy_wire)
{
    to_server.drop_percent = to_client.drop_percent = 5;
    connect_client();
    size_t len = 100 * 1024;
    char *body = post_body(len);
    struct request r[2] = {{0}, {.body = body, .body_len = len}};
    get(&r[0], "/");
    const char *fields[] = {":method",   "POST",  ":scheme", "https", ":authority",
                            "localhost", ":path", "/count",  NULL};
    client_request(&r[1], fields);
    wait_for(r, 2, 20000);
    ck_assert_uint_eq(r[0].status, 200);
    ck_assert_str_eq(r[0].response, "hello\n");
    ck_assert_uint_eq(r[1].status, 200);
    ck_assert_str_eq(r[1].response, "len=102400");
    ck_assert_uint_gt(to_server.dropped + to_client.dropped, 0);
    free(r[0].response);
    free(r[1].response);
    free(body);
}
END_TEST

/* Each request's line names HTTP/3.0, its status and body bytes, and
 * the client's address; a request the client reset before its answer
 * is none of them. */
START_TEST(access_log_names_http3)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/access.log", dir);
    const char *bad = NULL;
    ck_assert_int_eq(access_log_open(path, "$request $status $body_bytes_sent $remote_addr",
                                     &site.access_log, &bad),
                     0);
    connect_client();
    struct request r[2] = {{0}};
    get(&r[0], "/");
    get(&r[1], "/big");
    wait_for(r, 2, 30000);
    ck_assert_uint_eq(r[1].response_len, BIG_LEN);
    access_log_flush(site.access_log);
    access_log_free(site.access_log);
    site.access_log = NULL;
    char *written = test_read_file(path);
    ck_assert_ptr_nonnull(written);
    ck_assert_ptr_nonnull(strstr(written, "GET / HTTP/3.0 200 6 127.0.0.1\n"));
    ck_assert_ptr_nonnull(strstr(written, "GET /big HTTP/3.0 200 1048576 127.0.0.1\n"));
    free(written);
    free(r[0].response);
    free(r[1].response);
}
END_TEST

struct backend {
    int fd;
    pthread_t thread;
};

static void *backend_run(void *arg)
{
    struct backend *b = arg;
    int fd = accept(b->fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char head[8192];
    size_t have = 0;
    char *end = NULL;
    while (end == NULL && have < sizeof(head) - 1) {
        ssize_t n = recv(fd, head + have, sizeof(head) - 1 - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
        head[have] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    size_t length = 0, got = 0;
    if (end != NULL) {
        const char *field = strcasestr(head, "\r\ncontent-length: ");
        if (field != NULL)
            length = strtoul(field + 18, NULL, 10);
        got = have - (size_t)(end + 4 - head);
        char buf[16384];
        while (got < length) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        *strstr(head, "\r\n") = '\0';
    }
    char answer[9000];
    char text[8300];
    int text_len = snprintf(text, sizeof(text), "%s body=%zu", head, got);
    int len = snprintf(answer, sizeof(answer),
                       "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Backend: 1\r\n"
                       "Connection: close\r\n\r\n%s",
                       text_len, text);
    test_send_all(fd, answer, (size_t)len);
    close(fd);
    return NULL;
}

/* A request to a proxy_pass location goes to the backend and its answer
 * back, the body both ways, as over HTTP/1.1 and HTTP/2. */
START_TEST(proxy_pass_works)
{
    struct backend b;
    int port;
    b.fd = test_listen(&port, 4);
    char address[64];
    snprintf(address, sizeof(address), "127.0.0.1:%d", port);
    struct proxy_server_conf server = PROXY_SERVER_CONF_DEFAULT;
    server.address = address;
    struct proxy_upstream_conf upstream = {.name = "back", .servers = &server, .server_count = 1};
    ck_assert_int_eq(upstream_new(&upstream, 1, &proxy.upstream), 0);
    ck_assert_int_eq(pthread_create(&b.thread, NULL, backend_run, &b), 0);

    connect_client();
    size_t len = 50 * 1024;
    char *body = post_body(len);
    struct request r = {.body = body, .body_len = len};
    const char *fields[] = {":method",        "POST",      ":scheme", "https",
                            ":authority",     "localhost", ":path",   "/p/echo?x=1",
                            "content-length", "51200",     NULL};
    client_request(&r, fields);
    wait_for(&r, 1, 30000);
    pthread_join(b.thread, NULL);
    close(b.fd);
    upstream_free(proxy.upstream);
    proxy.upstream = NULL;
    ck_assert_uint_eq(r.status, 200);
    ck_assert_ptr_nonnull(r.response);
    ck_assert_str_eq(r.response, "POST /p/echo?x=1 HTTP/1.1 body=51200");
    free(r.response);
    free(body);
}
END_TEST

/* client_max_body_size (here 1000 bytes) refuses a body that says it is
 * longer with 413 before the handler, and one of unknown length once it
 * goes past; over client_max_headers fields (100) get 431.  The
 * connection serves on. */
START_TEST(limits_answer_413_and_431)
{
    vhosts[0].limits.max_body_size = 1000;
    connect_client();
    size_t len = 5000;
    char *body = post_body(len);
    struct request r[4] = {{.body = body, .body_len = len}, {.body = body, .body_len = len}};
    const char *declared[] = {":method",        "POST",      ":scheme", "https",
                              ":authority",     "localhost", ":path",   "/count",
                              "content-length", "5000",      NULL};
    client_request(&r[0], declared);
    const char *unknown[] = {":method",   "POST",  ":scheme", "https", ":authority",
                             "localhost", ":path", "/count",  NULL};
    client_request(&r[1], unknown);
    static char names[120][16];
    const char *many[2 * 124 + 1] = {":method",    "GET",       ":scheme", "https",
                                     ":authority", "localhost", ":path",   "/"};
    for (int i = 0; i < 120; i++) {
        snprintf(names[i], sizeof(names[i]), "x-%d", i);
        many[8 + 2 * i] = names[i];
        many[9 + 2 * i] = "v";
    }
    many[8 + 2 * 120] = NULL;
    client_request(&r[2], many);
    get(&r[3], "/");
    wait_for(r, 4, 5000);
    ck_assert_uint_eq(r[0].status, 413);
    ck_assert_uint_eq(r[1].status, 413);
    ck_assert_uint_le(counted.bytes, 1000);
    ck_assert_uint_eq(r[2].status, 431);
    ck_assert_uint_eq(r[3].status, 200);
    for (int i = 0; i < 4; i++)
        free(r[i].response);
    free(body);
}
END_TEST

/* A request head past what a stream record holds itself (40 fields,
 * 2 KB) reaches the handler whole, as does a small one after it on the
 * same connection. */
START_TEST(large_request_head)
{
    connect_client();
    static char names[40][16], values[40][64];
    const char *many[2 * 44 + 1] = {":method",    "GET",       ":scheme", "https",
                                    ":authority", "localhost", ":path",   "/echo-head"};
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof(names[i]), "x-%d", i);
        snprintf(values[i], sizeof(values[i]), "%048d", i);
        many[8 + 2 * i] = names[i];
        many[9 + 2 * i] = values[i];
    }
    many[8 + 2 * 40] = NULL;
    struct request r[2] = {{0}};
    client_request(&r[0], many);
    wait_for(r, 1, 5000);
    const char *small[] = {":method", "GET",        ":scheme", "https", ":authority", "localhost",
                           ":path",   "/echo-head", "x-small", "s",     NULL};
    client_request(&r[1], small);
    wait_for(&r[1], 1, 5000);
    ck_assert_uint_eq(r[0].status, 200);
    ck_assert_ptr_nonnull(r[0].response);
    char want[128];
    snprintf(want, sizeof(want), "fields=41 x-39=%048d", 39); /* and Host */
    ck_assert_str_eq(r[0].response, want);
    ck_assert_uint_eq(r[1].status, 200);
    ck_assert_str_eq(r[1].response, "fields=2 x-small=s");
    free(r[0].response);
    free(r[1].response);
}
END_TEST

/* A client that offers another ALPN than h3 gets no connection. */
START_TEST(alpn_must_be_h3)
{
    client_start("h2");
    run_until(handshake_done, 3000);
    ck_assert(!cl.handshake_done);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
}
END_TEST

static bool no_connection(void)
{
    return h3_endpoint_conn_count(ep) == 0;
}

/* A client that sends its first Initial and is then never heard again
 * leaves no connection behind once the handshake timeout (here 200 ms)
 * passes. */
START_TEST(unfinished_handshake_is_dropped)
{
    h3_endpoint_free(ep);
    char cert[128], key[128];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    struct h3_endpoint_config config = {.site = &site,
                                        .loop = loop,
                                        .cert_file = cert,
                                        .key_file = key,
                                        .output = server_output,
                                        .handshake_timeout_ms = 200};
    ck_assert_int_eq(h3_endpoint_new(&config, &ep), 0);
    client_start("h3");
    client_write();
    ck_assert_uint_eq(to_server.count, 1);
    struct datagram *d = &to_server.items[to_server.head];
    /* The timeout runs from the connection's creation, inside the input:
     * measured from after it, a slow handshake step (ASan on a loaded
     * machine) would look like an early drop. */
    uint64_t start = test_now_ms();
    ck_assert_int_eq(h3_endpoint_input(ep, (struct sockaddr *)&server_addr, sizeof(server_addr),
                                       (struct sockaddr *)&client_addr, sizeof(client_addr),
                                       d->data, d->len, 0),
                     0);
    to_server.count = 0;
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 1);
    to_server.drop_percent = 100; /* the client is gone */
    cl.handshake_done = true;     /* so that run_until() looks at its condition */
    ck_assert(run_until(no_connection, 5000));
    ck_assert_uint_ge(test_now_ms() - start, 150);
}
END_TEST

static bool answered_later(void)
{
    return later_answered;
}

/* An answer given outside an input defers the connection's flush to
 * the loop's next pass; an endpoint freed before it (a worker going
 * away) leaves that flush to free what is left of the connection, and
 * nothing leaks or is used after its free (ASan). */
START_TEST(endpoint_freed_with_a_flush_pending)
{
    connect_client();
    struct request r = {0};
    later_answered = false;
    get(&r, "/later");
    ck_assert(run_until(answered_later, 5000));
    ck_assert_ptr_null(ep);
    /* The answer's flush waits for the loop's next pass, on what is left
     * of its connection. */
    corral_timer *timer;
    ck_assert_int_eq(corral_timer_new(loop, pump_stop, NULL, &timer), 0);
    corral_timer_start(timer, 0);
    ck_assert_int_eq(corral_loop_run(loop), 0); /* runs the deferred flush */
    corral_timer_free(timer);
    ck_assert_uint_eq(r.status, 0); /* nothing was sent */
}
END_TEST

/* Datagrams that are no client Initial open nothing. */
START_TEST(stray_datagrams_dropped)
{
    uint8_t junk[1200];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 31);
    const struct sockaddr *s = (struct sockaddr *)&server_addr,
                          *c = (struct sockaddr *)&client_addr;
    ck_assert_int_eq(h3_endpoint_input(ep, s, sizeof(server_addr), c, sizeof(client_addr), junk,
                                       sizeof(junk), 0),
                     -ENOENT);
    /* An empty datagram (ngtcp2 would assert on it). */
    ck_assert_int_eq(
        h3_endpoint_input(ep, s, sizeof(server_addr), c, sizeof(client_addr), junk, 0, 0), -ENOENT);
    /* A short-header packet for an ID no connection has. */
    junk[0] = 0x40;
    ck_assert_int_eq(
        h3_endpoint_input(ep, s, sizeof(server_addr), c, sizeof(client_addr), junk, 100, 0),
        -ENOENT);
    /* A client's first Initial, cut below 1200 bytes (RFC 9000 14.1). */
    client_start("h3");
    client_write();
    ck_assert_uint_eq(to_server.count, 1);
    struct datagram *d = &to_server.items[to_server.head];
    ck_assert_uint_ge(d->len, 1200);
    ck_assert_int_eq(
        h3_endpoint_input(ep, s, sizeof(server_addr), c, sizeof(client_addr), d->data, 1100, 0),
        -ENOENT);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 0);
    ck_assert_int_eq(
        h3_endpoint_input(ep, s, sizeof(server_addr), c, sizeof(client_addr), d->data, d->len, 0),
        0);
    ck_assert_uint_eq(h3_endpoint_conn_count(ep), 1);
    ck_assert_int_eq(h3_endpoint_cid_worker(junk, 16), -1);
}
END_TEST

/* --------------------------------------------- an independent client */

/* A UDP socket of the test's own (the daemon's UDP listener is not
 * there yet), its datagrams handed to an endpoint of their own, and
 * Debian's gtlsclient (ngtcp2's GnuTLS example client) as the peer. */
static int udp_fd;
static pid_t client_pid;
static int client_status = -1;

static void udp_output(void *arg, const struct sockaddr *local, socklen_t local_len,
                       const struct sockaddr *peer, socklen_t peer_len, const uint8_t *data,
                       size_t len, size_t gso_segment)
{
    (void)arg;
    (void)local;
    (void)local_len;
    server_bytes_out += len;
    size_t step = gso_segment > 0 ? gso_segment : len;
    if (gso_segment > 0) {
        ck_assert_uint_lt(gso_segment, len); /* a run holds two datagrams at least */
        gso_runs++;
    }
    for (size_t off = 0; off < len; off += step)
        sendto(udp_fd, data + off, len - off < step ? len - off : step, 0, peer, peer_len);
}

static void udp_readable(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    struct h3_endpoint *udp_ep = arg;
    struct sockaddr_in local;
    socklen_t local_len = sizeof(local);
    ck_assert_int_eq(getsockname(udp_fd, (struct sockaddr *)&local, &local_len), 0);
    for (;;) {
        uint8_t buf[65536];
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);
        ssize_t n =
            recvfrom(udp_fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&peer, &peer_len);
        if (n < 0)
            return;
        h3_endpoint_input(udp_ep, (struct sockaddr *)&local, local_len, (struct sockaddr *)&peer,
                          peer_len, buf, (size_t)n, 0);
    }
}

static void watch_client(corral_timer *timer, void *arg)
{
    (void)arg;
    int status;
    if (waitpid(client_pid, &status, WNOHANG) == client_pid) {
        client_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        corral_loop_stop(loop);
        return;
    }
    if (test_now_ms() > deadline_ms) {
        kill(client_pid, SIGKILL);
        waitpid(client_pid, &status, 0);
        client_status = -1;
        corral_loop_stop(loop);
        return;
    }
    corral_timer_start(timer, 10);
}

/* Runs gtlsclient with `args` (after its own) against a UDP endpoint
 * until it exits; returns its status. */
static int run_gtlsclient(const char *const *args)
{
    int udp_port;
    udp_fd = test_bind_udp(&udp_port);
    ck_assert_int_eq(fcntl(udp_fd, F_SETFL, O_NONBLOCK), 0);
    char cert[128], key[128], port[16];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(port, sizeof(port), "%d", udp_port);
    struct h3_endpoint *udp_ep;
    struct h3_endpoint_config config = {
        .site = &site, .loop = loop, .cert_file = cert, .key_file = key, .output = udp_output};
    ck_assert_int_eq(h3_endpoint_new(&config, &udp_ep), 0);
    corral_io *io;
    ck_assert_int_eq(corral_io_new(loop, udp_fd, CORRAL_READABLE, udp_readable, udp_ep, &io), 0);

    const char *argv[32] = {"gtlsclient", "-q", "--exit-on-all-streams-close", "--timeout=10s"};
    size_t argc = 4;
    for (size_t i = 0; args[i] != NULL && argc < 28; i++)
        argv[argc++] = strcmp(args[i], "PORT") == 0 ? port : args[i];
    argv[argc] = NULL;
    client_pid = fork();
    ck_assert_int_ge(client_pid, 0);
    if (client_pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execvp("gtlsclient", (char *const *)argv);
        _exit(127);
    }
    corral_timer *timer;
    ck_assert_int_eq(corral_timer_new(loop, watch_client, NULL, &timer), 0);
    deadline_ms = test_now_ms() + 20000;
    corral_timer_start(timer, 10);
    ck_assert_int_eq(corral_loop_run(loop), 0);
    corral_timer_free(timer);
    corral_io_free(io);
    h3_endpoint_free(udp_ep);
    close(udp_fd);
    return client_status;
}

/* A GET of 1 MB and a POST of 200 KB from gtlsclient over real UDP,
 * each byte checked, with 5% of the datagrams lost each way in the
 * second run. */
START_TEST(gtlsclient_interop)
{
    char out[64];
    if (test_run("command -v gtlsclient", out, sizeof(out)) != 0) {
        printf("gtlsclient_interop: skipped, no gtlsclient (ngtcp2-client)\n");
        return;
    }
    char downloads[128], big_path[160], data[128];
    snprintf(downloads, sizeof(downloads), "%s/dl", dir);
    ck_assert_int_eq(mkdir(downloads, 0700), 0);
    const char *get_args[] = {"--download", downloads, "127.0.0.1", "PORT", "https://localhost/big",
                              NULL};
    ck_assert_int_eq(run_gtlsclient(get_args), 0);
    snprintf(big_path, sizeof(big_path), "%s/big", downloads);
    FILE *f = fopen(big_path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = 0;
    for (int ch; (ch = fgetc(f)) != EOF; n++)
        if ((uint8_t)ch != pattern(n))
            ck_abort_msg("byte %zu differs", n);
    fclose(f);
    ck_assert_uint_eq(n, BIG_LEN);

    snprintf(data, sizeof(data), "%s/body", dir);
    size_t len = 200 * 1024;
    char *body = post_body(len);
    f = fopen(data, "wb");
    ck_assert_uint_eq(fwrite(body, 1, len, f), len);
    fclose(f);
    free(body);
    const char *post_args[] = {"-t",
                               "0.05",
                               "-r",
                               "0.05",
                               "--download",
                               downloads,
                               "-d",
                               data,
                               "127.0.0.1",
                               "PORT",
                               "https://localhost/count",
                               NULL};
    ck_assert_int_eq(run_gtlsclient(post_args), 0);
    char count_path[160];
    snprintf(count_path, sizeof(count_path), "%s/count", downloads);
    char *answer = test_read_file(count_path);
    ck_assert_ptr_nonnull(answer);
    ck_assert_str_eq(answer, "len=204800");
    free(answer);
    ck_assert_uint_eq(counted.bytes, len);
}
END_TEST

/* A one-worker server, not started, with h3_udp_handler on a UDP listen
 * of 127.0.0.1 (`options` may be NULL) serving `site` with the case's
 * certificate.  The case starts it, and after its stop frees the server,
 * then `*h3site`. */
static corral_server *udp_listen_new(const struct corral_udp_options *options,
                                     struct h3_udp_site **h3site, corral_udp **udp)
{
    /* The site keeps the file names: they outlive the case. */
    static char cert[128], key[128];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    struct h3_endpoint_config config = {.site = &site, .cert_file = cert, .key_file = key};
    ck_assert_int_eq(h3_udp_site_new(&config, 1, h3site), 0);
    struct corral_server_config server_config;
    corral_server_config_init(&server_config);
    server_config.workers = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&server_config, &server), 0);
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", options, &h3_udp_handler, *h3site, udp), 0);
    return server;
}

/* Every third sendmmsg() finds the socket full (EAGAIN).  What it
 * refused is remembered by a hash of its bytes, and crossed off when
 * those same bytes are sent later: QUIC's own recovery would send its
 * frames again in a new packet, never the same bytes.  The worker's
 * thread only, read once the server has stopped. */
#define REFUSED_MAX 4096
static unsigned send_calls, refused_count, refused_resent;
static uint64_t refused[REFUSED_MAX];

static uint64_t message_hash(const struct msghdr *m)
{
    uint64_t h = 14695981039346656037u;
    for (size_t v = 0; v < m->msg_iovlen; v++)
        for (size_t i = 0; i < m->msg_iov[v].iov_len; i++)
            h = (h ^ ((const uint8_t *)m->msg_iov[v].iov_base)[i]) * 1099511628211u;
    return h;
}

static int flaky_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int count, int flags)
{
    if (send_calls++ % 3 == 2) {
        if (refused_count < REFUSED_MAX)
            refused[refused_count++] = message_hash(&msgs[0].msg_hdr);
        errno = EAGAIN;
        return -1;
    }
    int sent = sendmmsg(fd, msgs, count, flags);
    for (int k = 0; k < sent; k++) {
        uint64_t h = message_hash(&msgs[k].msg_hdr);
        for (unsigned r = 0; r < refused_count; r++) {
            if (refused[r] == h) {
                refused[r] = 0; /* once */
                refused_resent++;
                break;
            }
        }
    }
    return sent;
}

/* h3_udp_handler on a libcorral UDP listen, as the daemon serves quic
 * listens: gtlsclient's 1 MB GET completes, every byte checked, while a
 * third of the sends find the socket full: each datagram refused waits
 * for on_writable and goes then, the same bytes; the worker's stop frees
 * its endpoint (ASan: nothing leaks). */
START_TEST(udp_listen_waits_for_a_full_socket)
{
    char out[64];
    if (test_run("command -v gtlsclient", out, sizeof(out)) != 0) {
        printf("udp_listen_waits_for_a_full_socket: skipped, no gtlsclient (ngtcp2-client)\n");
        return;
    }
    struct h3_udp_site *h3site;
    corral_udp *udp;
    corral_server *server = udp_listen_new(NULL, &h3site, &udp);
    send_calls = refused_count = refused_resent = 0;
    corral__udp_sendmmsg = flaky_sendmmsg;
    ck_assert_int_eq(corral_server_start(server), 0);

    char cmd[512], downloads[160], path[200];
    snprintf(downloads, sizeof(downloads), "%s/full", dir);
    ck_assert_int_eq(mkdir(downloads, 0700), 0);
    snprintf(cmd, sizeof(cmd),
             "timeout 30 gtlsclient -q --exit-on-all-streams-close --timeout=10s --download %s "
             "127.0.0.1 %d https://localhost/big >/dev/null 2>&1",
             downloads, corral_udp_port(udp));
    ck_assert_int_eq(test_run(cmd, out, sizeof(out)), 0);
    struct corral_udp_stats udp_stats;
    ck_assert_int_eq(corral_udp_stats(udp, 0, &udp_stats), 0);
    corral_server_stop(server, 0);
    corral_server_wait(server);
    corral_server_free(server);
    corral__udp_sendmmsg = sendmmsg;
    h3_udp_site_free(h3site);
    ck_assert_uint_gt(udp_stats.send_full, 0);
    ck_assert_uint_gt(refused_count, 0);
    ck_assert_uint_lt(refused_count, REFUSED_MAX);
    ck_assert_uint_eq(refused_resent, refused_count); /* each waited and went */

    snprintf(path, sizeof(path), "%s/big", downloads);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = 0;
    for (int ch; (ch = fgetc(f)) != EOF; n++)
        if ((uint8_t)ch != pattern(n))
            ck_abort_msg("byte %zu differs", n);
    fclose(f);
    ck_assert_uint_eq(n, BIG_LEN);
}
END_TEST

/* What the connections write outside a read of datagrams leaves at the
 * loop's next deferred pass, in one sendmmsg(): four clients' Initials
 * open four connections (in their handshakes), and the worker's stop
 * closes them all at once, outside any read: the four CONNECTION_CLOSEs
 * go in one call, not one each.  The worker is freed by that pass, as
 * the loop ends (ASan: nothing leaks). */
START_TEST(udp_listen_batches_writes_outside_reads)
{
    struct h3_udp_site *h3site;
    corral_udp *udp;
    corral_server *server = udp_listen_new(NULL, &h3site, &udp);
    ck_assert_int_eq(corral_server_start(server), 0);

    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)corral_udp_port(udp)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    enum { CONNS = 4 };
    for (int i = 0; i < CONNS; i++) {
        client_start("h3");
        client_write();
        ck_assert_uint_eq(to_server.count, 1);
        const struct datagram *d = &to_server.items[to_server.head];
        ck_assert_int_eq(send(fd, d->data, d->len, 0), (ssize_t)d->len);
        to_server.count = 0;
        client_free();
    }
    struct h3_udp_stats h3;
    test_wait_for(h3_udp_site_stats(h3site, 0, &h3) == 0 && h3.v[H3_CONNECTIONS] == CONNS,
                  TEST_WAIT_MS, "the connections were not opened");
    struct corral_udp_stats before, after;
    ck_assert_int_eq(corral_udp_stats(udp, 0, &before), 0);
    corral_server_stop(server, 0);
    corral_server_wait(server);
    ck_assert_int_eq(corral_udp_stats(udp, 0, &after), 0);
    corral_server_free(server);
    h3_udp_site_free(h3site);
    close(fd);
    ck_assert_uint_eq(after.sent - before.sent, CONNS);
    ck_assert_uint_eq(after.send_calls - before.send_calls, 1);
}
END_TEST

/* With GRO on the listen (as the daemon's quic listens have it), a burst
 * sent in one UDP_SEGMENT call reaches h3_udp_handler as one coalesced
 * run: each of its eight datagrams (short headers for IDs of our layout
 * that no connection has) is read on its own and earns its own
 * stateless reset; the eight resets leave in one sendmmsg(). */
START_TEST(udp_listen_splits_a_gro_run)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (!caps.udp_gro || !caps.udp_gso) {
        printf("udp_listen_splits_a_gro_run: skipped, no UDP GRO or GSO\n");
        return;
    }
    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.gro = true;
    options.max_datagram = 65535;
    struct h3_udp_site *h3site;
    corral_udp *udp;
    corral_server *server = udp_listen_new(&options, &h3site, &udp);
    ck_assert_int_eq(corral_server_start(server), 0);

    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)corral_udp_port(udp)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    enum { COUNT = 8, SIZE = 100 };
    uint8_t burst[COUNT * SIZE];
    ck_assert_int_eq(gnutls_rnd(GNUTLS_RND_NONCE, burst, sizeof(burst)), 0);
    for (int i = 0; i < COUNT; i++) {
        uint8_t *pkt = burst + i * SIZE;
        pkt[0] = 0x40; /* short header */
        pkt[1] = 0x01; /* our layout, worker 0, generation 0 */
        pkt[2] = pkt[3] = pkt[4] = 0;
    }
    udp_burst_send(fd, burst, sizeof(burst), SIZE);
    for (int i = 0; i < COUNT; i++) {
        uint8_t got[200];
        ssize_t n = recv(fd, got, sizeof(got), 0);
        ck_assert_int_gt(n, 0);
        ck_assert_int_lt(n, SIZE); /* a reset, shorter than what came */
        ck_assert_uint_eq(got[0] & 0xc0, 0x40);
    }
    close(fd);
    corral_server_stop(server, 0);
    corral_server_wait(server);
    struct h3_udp_stats h3; /* the worker has published all it read and sent */
    ck_assert_int_eq(h3_udp_site_stats(h3site, 0, &h3), 0);
    struct corral_udp_stats udp_stats;
    ck_assert_int_eq(corral_udp_stats(udp, 0, &udp_stats), 0);
    corral_server_free(server);
    h3_udp_site_free(h3site);
    ck_assert(udp_stats.gro);
    ck_assert_uint_eq(udp_stats.received, COUNT);
    /* The answers to one batch read leave together, in one sendmmsg(). */
    ck_assert_uint_eq(udp_stats.sent, COUNT);
    ck_assert_uint_eq(udp_stats.send_calls, 1);
    ck_assert_uint_eq(h3.v[H3_DATAGRAMS_IN], COUNT);
    ck_assert_uint_eq(h3.v[H3_RESETS], COUNT);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("proto/http3");
    TCase *tc = tcase_create("framer");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, get_return);
    tcase_add_test(tc, packets_name_their_worker);
    tcase_add_test(tc, large_response_head);
    tcase_add_test(tc, post_counted);
    tcase_add_test(tc, many_streams);
    tcase_add_test(tc, drain_sends_goaway_then_closes);
    tcase_add_test(tc, gso_runs_carry_a_response);
    tcase_add_test(tc, fin_at_the_end_of_the_connection_window);
    tcase_add_test(tc, retry_valid_token);
    tcase_add_test(tc, retry_forged_token);
    tcase_add_test(tc, retry_expired_token);
    tcase_add_test(tc, host_key_token_taken_elsewhere);
    tcase_add_test(tc, other_host_key_token_refused);
    tcase_add_test(tc, retry_over_threshold);
    tcase_add_test(tc, amplification_limit_without_acks);
    tcase_add_test(tc, unknown_version_negotiated);
    tcase_add_test(tc, stateless_resets_limited_per_second);
    tcase_add_test(tc, closing_period_repeats_the_close);
    tcase_add_test(tc, draining_period_sends_nothing);
    tcase_add_test(tc, closing_periods_bounded);
    tcase_add_test(tc, early_data_across_workers);
    tcase_add_test(tc, session_resumed_by_ticket);
    tcase_add_test(tc, early_data_replay_safe_only);
    tcase_add_test(tc, early_data_off_by_default);
    tcase_add_test(tc, early_data_replay_refused);
    tcase_add_test(tc, no_retry_without_threshold);
    tcase_add_test(tc, new_token_skips_retry);
    tcase_add_test(tc, new_token_expired_or_forged);
    tcase_add_test(tc, stateless_reset_recognised);
    tcase_add_test(tc, stateless_reset_of_another_key_ignored);
    tcase_add_test(tc, malformed_request);
    tcase_add_test(tc, lossy_wire);
    tcase_add_test(tc, access_log_names_http3);
    tcase_add_test(tc, proxy_pass_works);
    tcase_add_test(tc, limits_answer_413_and_431);
    tcase_add_test(tc, large_request_head);
    tcase_add_test(tc, alpn_must_be_h3);
    tcase_add_test(tc, stray_datagrams_dropped);
    tcase_add_test(tc, unfinished_handshake_is_dropped);
    tcase_add_test(tc, endpoint_freed_with_a_flush_pending);
    tcase_add_test(tc, sni_picks_the_server);
    tcase_add_test(tc, certificate_named_by_sni);
    tcase_add_test(tc, certificate_named_by_sni_or_another);
    tcase_add_test(tc, certificate_by_signature_algorithms);
    tcase_add_test(tc, gtlsclient_interop);
    tcase_add_test(tc, udp_listen_waits_for_a_full_socket);
    tcase_add_test(tc, udp_listen_splits_a_gro_run);
    tcase_add_test(tc, udp_listen_batches_writes_outside_reads);
    suite_add_tcase(s, tc);
    return s;
}
