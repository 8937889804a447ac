/*
 * h3_conn.c: one QUIC connection and its HTTP/3 session: ngtcp2 fed with
 * the datagrams the endpoint routes to it, GnuTLS for the handshake
 * (ALPN h3 only), nghttp3 over its streams, the datagrams it makes handed
 * to the endpoint's output, and its timer (loss recovery, idle, pacing)
 * on the worker's loop.
 */
#include "proto/http3/http3_internal.h"
#include "proto/small_mem.h"

#include <assert.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdlib.h>
#include <string.h>

/* TLS 1.3 only, with the ciphers QUIC allows (RFC 9001 5.3: not
 * CCM_8), and no middlebox compatibility mode (RFC 9001 8.4). */
#define H3_PRIORITY                                                                                \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"      \
    "%DISABLE_TLS13_COMPAT_MODE"

/* Datagrams one flush sends at most before it yields the loop. */
#define H3_FLUSH_PACKETS 64

/* Datagrams sent in one UDP GSO run at most (the kernel takes 64). */
#define H3_GSO_SEGMENTS 16

static const struct http_framer h3_framer = {.name = "HTTP/3"};

/* ngtcp2 and nghttp3 allocate and free a few small blocks for every
 * request (stream records, frames, QPACK fields, acknowledged ranges):
 * kept per worker thread rather than malloc's (small_mem.h). */
static const ngtcp2_mem quic_mem = {
    .malloc = small_mem_malloc,
    .free = small_mem_free,
    .calloc = small_mem_calloc,
    .realloc = small_mem_realloc,
};
static const nghttp3_mem http_mem = {
    .malloc = small_mem_malloc,
    .free = small_mem_free,
    .calloc = small_mem_calloc,
    .realloc = small_mem_realloc,
};

uint64_t h3_conn_now(void)
{
    return corral_monotonic_ns();
}

/* ----------------------------------------------------- ngtcp2 callbacks */

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((struct h3_conn *)ref->user_data)->quic;
}

static void on_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    /* ngtcp2 uses it for packet-number skips and PATH_CHALLENGE: a
     * failure leaves the bytes as they were, which only costs entropy. */
    (void)gnutls_rnd(GNUTLS_RND_NONCE, dest, len);
}

static int on_new_cid(ngtcp2_conn *quic, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *user)
{
    (void)quic;
    (void)cidlen; /* ours are all H3_CID_LEN */
    struct h3_conn *conn = user;
    if (h3_endpoint_new_cid(conn->ep, cid, token) != 0 ||
        h3_endpoint_add_cid(conn->ep, cid, conn) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_remove_cid(ngtcp2_conn *quic, const ngtcp2_cid *cid, void *user)
{
    (void)quic;
    struct h3_conn *conn = user;
    h3_endpoint_remove_cid(conn->ep, cid);
    return 0;
}

static int setup_http(struct h3_conn *conn);

/* The connection leaves the endpoint's count of handshakes in progress
 * (Retry's threshold): completed, or freed. */
static void handshake_over(struct h3_conn *conn)
{
    if (!conn->handshaking)
        return;
    conn->handshaking = false;
    assert(conn->ep->handshaking > 0);
    conn->ep->handshaking--;
}

static int on_handshake_completed(ngtcp2_conn *quic, void *user)
{
    (void)quic;
    struct h3_conn *conn = user;
    /* The ALPN was offered as mandatory; check what was chosen anyway:
     * nothing but h3 is spoken here. */
    gnutls_datum_t alpn;
    if (gnutls_alpn_get_selected_protocol(conn->tls, &alpn) != 0 || alpn.size != 2 ||
        memcmp(alpn.data, "h3", 2) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    conn->ep->count[H3_HANDSHAKES]++;
    if (gnutls_session_is_resumed(conn->tls))
        conn->ep->count[H3_RESUMED]++;
    handshake_over(conn);
    conn->validated = true;
    /* A token for the client's next connections (RFC 9000 8.1.3): its
     * address is validated now, and a later Initial with the token skips
     * Retry and the amplification limit.  Not having one costs the client
     * only that. */
    uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
    int len = h3_endpoint_new_token(conn->ep, (const struct sockaddr *)&conn->dgram.peer,
                                    conn->dgram.peer_len, token);
    if (len > 0)
        (void)ngtcp2_conn_submit_new_token(conn->quic, token, (size_t)len);
    /* A session ticket, for resumption (and 0-RTT when the endpoint
     * allows early data), sealed with the endpoint's ticket key.  Sent
     * here rather than by GnuTLS at its own time, so that it leaves with
     * the handshake's last flight at the application level.  Without
     * one, the client only misses resumption. */
    (void)gnutls_session_ticket_send(conn->tls, 1, 0);
    return setup_http(conn);
}

static int on_recv_stream_data(ngtcp2_conn *quic, uint32_t flags, int64_t stream_id,
                               uint64_t offset, const uint8_t *data, size_t len, void *user,
                               void *stream_user)
{
    (void)offset;
    (void)stream_user;
    struct h3_conn *conn = user;
    if (conn->h3 == NULL && setup_http(conn) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    nghttp3_ssize used = nghttp3_conn_read_stream(conn->h3, stream_id, data, len,
                                                  (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0);
    if (used < 0) {
        ngtcp2_connection_close_error_set_application_error(
            &conn->ccerr, nghttp3_err_infer_quic_app_error_code((int)used), NULL, 0);
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    /* What nghttp3 took as framing is consumed now; body bytes are given
     * back as the exchange takes them (h3_stream.c). */
    ngtcp2_conn_extend_max_stream_offset(quic, stream_id, (uint64_t)used);
    ngtcp2_conn_extend_max_offset(quic, (uint64_t)used);
    return 0;
}

static int on_acked_stream_data(ngtcp2_conn *quic, int64_t stream_id, uint64_t offset, uint64_t len,
                                void *user, void *stream_user)
{
    (void)quic;
    (void)offset;
    (void)stream_user;
    struct h3_conn *conn = user;
    if (conn->h3 != NULL && nghttp3_conn_add_ack_offset(conn->h3, stream_id, len) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_stream_close(ngtcp2_conn *quic, uint32_t flags, int64_t stream_id,
                           uint64_t app_error_code, void *user, void *stream_user)
{
    (void)stream_user;
    struct h3_conn *conn = user;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        app_error_code = NGHTTP3_H3_NO_ERROR;
    if (conn->h3 != NULL) {
        int rc = nghttp3_conn_close_stream(conn->h3, stream_id, app_error_code);
        if (rc != 0 && rc != NGHTTP3_ERR_STREAM_NOT_FOUND) {
            ngtcp2_connection_close_error_set_application_error(
                &conn->ccerr, nghttp3_err_infer_quic_app_error_code(rc), NULL, 0);
            return NGTCP2_ERR_CALLBACK_FAILURE;
        }
    }
    /* A client's request stream is over: it may open another. */
    if (!ngtcp2_conn_is_local_stream(quic, stream_id) && ngtcp2_is_bidi_stream(stream_id))
        ngtcp2_conn_extend_max_streams_bidi(quic, 1);
    return 0;
}

static int on_stream_reset(ngtcp2_conn *quic, int64_t stream_id, uint64_t final_size,
                           uint64_t app_error_code, void *user, void *stream_user)
{
    (void)quic;
    (void)final_size;
    (void)app_error_code;
    (void)stream_user;
    struct h3_conn *conn = user;
    if (conn->h3 != NULL && nghttp3_conn_shutdown_stream_read(conn->h3, stream_id) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_stream_stop_sending(ngtcp2_conn *quic, int64_t stream_id, uint64_t app_error_code,
                                  void *user, void *stream_user)
{
    return on_stream_reset(quic, stream_id, 0, app_error_code, user, stream_user);
}

static int on_extend_max_remote_streams_bidi(ngtcp2_conn *quic, uint64_t max_streams, void *user)
{
    (void)quic;
    struct h3_conn *conn = user;
    if (conn->h3 != NULL)
        nghttp3_conn_set_max_client_streams_bidi(conn->h3, max_streams);
    return 0;
}

static int on_extend_max_stream_data(ngtcp2_conn *quic, int64_t stream_id, uint64_t max_data,
                                     void *user, void *stream_user)
{
    (void)quic;
    (void)max_data;
    (void)stream_user;
    struct h3_conn *conn = user;
    if (conn->h3 != NULL && nghttp3_conn_unblock_stream(conn->h3, stream_id) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static const ngtcp2_callbacks quic_callbacks = {
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = on_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = on_recv_stream_data,
    .acked_stream_data_offset = on_acked_stream_data,
    .stream_close = on_stream_close,
    .rand = on_rand,
    .get_new_connection_id = on_new_cid,
    .remove_connection_id = on_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = on_stream_reset,
    .extend_max_remote_streams_bidi = on_extend_max_remote_streams_bidi,
    .extend_max_stream_data = on_extend_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .stream_stop_sending = on_stream_stop_sending,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* ------------------------------------------------------------ HTTP/3 */

/* The HTTP/3 session, once the handshake has told the client's limits:
 * its control stream and the two QPACK streams (RFC 9114 6.2). */
static int setup_http(struct h3_conn *conn)
{
    if (conn->h3 != NULL)
        return 0;
    nghttp3_settings settings;
    nghttp3_settings_default(&settings);
    settings.qpack_max_dtable_capacity = 4096;
    settings.qpack_blocked_streams = 100;
    settings.max_field_section_size = H3_MAX_FIELD_SECTION;
    if (nghttp3_conn_server_new(&conn->h3, &h3_stream_callbacks, &settings, &http_mem, conn) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    nghttp3_conn_set_max_client_streams_bidi(conn->h3, conn->ep->config.max_concurrent_streams);
    int64_t control, qenc, qdec;
    if (ngtcp2_conn_open_uni_stream(conn->quic, &control, NULL) != 0 ||
        nghttp3_conn_bind_control_stream(conn->h3, control) != 0 ||
        ngtcp2_conn_open_uni_stream(conn->quic, &qenc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(conn->quic, &qdec, NULL) != 0 ||
        nghttp3_conn_bind_qpack_streams(conn->h3, qenc, qdec) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    /* A handshake that completes while the endpoint drains: the client
     * learns at once that it is to go elsewhere for new requests. */
    if (conn->ep->draining)
        h3_conn_goaway(conn);
    return 0;
}

bool h3_conn_goaway(struct h3_conn *conn)
{
    if (conn->closed)
        return true;
    if (conn->h3 == NULL) /* its handshake: setup_http() begins it */
        return false;
    /* RFC 9114 5.2: first a GOAWAY with the largest ID, so that requests
     * already on their way are not refused, then, a couple of RTTs on,
     * one with the ID of the last request taken. */
    if (conn->goaway == 0 && nghttp3_conn_submit_shutdown_notice(conn->h3) == 0)
        conn->goaway = 1;
    else if (conn->goaway == 1 && nghttp3_conn_shutdown(conn->h3) == 0)
        conn->goaway = 2;
    h3_conn_schedule(conn);
    return conn->goaway == 2;
}

/* ---------------------------------------------------------- the timer */

/* Re-armed only when ngtcp2's expiry moved: most flushes leave it where
 * it was (a loss-recovery or idle deadline), and re-arming costs a heap
 * removal and insertion in the loop's timers each time. */
static void arm_timer(struct h3_conn *conn)
{
    uint64_t expiry = ngtcp2_conn_get_expiry(conn->quic);
    if (expiry == conn->timer_expiry)
        return;
    conn->timer_expiry = expiry;
    if (expiry == UINT64_MAX) {
        corral_timer_stop(conn->timer);
        return;
    }
    uint64_t now = h3_conn_now();
    uint64_t ms = expiry > now ? (expiry - now + NGTCP2_MILLISECONDS - 1) / NGTCP2_MILLISECONDS : 0;
    corral_timer_start(conn->timer, ms);
}

static void flush(struct h3_conn *conn);

static void on_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    struct h3_conn *conn = arg;
    conn->timer_expiry = UINT64_MAX; /* not armed now: the next flush arms it */
    int rc = ngtcp2_conn_handle_expiry(conn->quic, h3_conn_now());
    if (rc != 0) {
        /* The idle timeout (RFC 9000 10.1: the connection is silently
         * closed), or a handshake that took too long: nothing to tell
         * the peer. */
        h3_conn_free(conn);
        return;
    }
    flush(conn);
}

/* -------------------------------------------------------------- output */

static void send_packet(struct h3_conn *conn, const ngtcp2_path *path, const uint8_t *data,
                        size_t len)
{
    conn->unvalidated_out += conn->validated ? 0 : len;
    conn->ep->config.output(conn->ep->config.output_arg, (const struct sockaddr *)path->local.addr,
                            path->local.addrlen, (const struct sockaddr *)path->remote.addr,
                            path->remote.addrlen, data, len, 0);
}

/* Sends the connection's CONNECTION_CLOSE with conn->ccerr, once. */
static void send_close(struct h3_conn *conn)
{
    if (ngtcp2_conn_is_in_closing_period(conn->quic) ||
        ngtcp2_conn_is_in_draining_period(conn->quic))
        return;
    uint8_t buf[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(conn->quic, &ps.path, &pi, buf, sizeof(buf),
                                                        &conn->ccerr, h3_conn_now());
    if (n <= 0)
        return;
    send_packet(conn, &ps.path, buf, (size_t)n);
    h3_closing_begin(conn, buf, (size_t)n);
}

/* Datagrams written one after the other into one buffer, sent as one
 * UDP GSO run while they go to the same path and each is as long as the
 * first (the last may be shorter). */
struct gso_run {
    uint8_t buf[H3_GSO_SEGMENTS * 1500];
    size_t used, segment, count, max_count;
    bool closed; /* a shorter datagram ended it */
    ngtcp2_path_storage path;
};

static bool same_path(const ngtcp2_path *a, const ngtcp2_path *b)
{
    return a->local.addrlen == b->local.addrlen && a->remote.addrlen == b->remote.addrlen &&
           memcmp(a->local.addr, b->local.addr, a->local.addrlen) == 0 &&
           memcmp(a->remote.addr, b->remote.addr, a->remote.addrlen) == 0;
}

static void run_send(struct h3_conn *conn, struct gso_run *run)
{
    if (run->used == 0)
        return;
    const ngtcp2_path *path = &run->path.path;
    conn->unvalidated_out += conn->validated ? 0 : run->used;
    conn->ep->config.output(conn->ep->config.output_arg, (const struct sockaddr *)path->local.addr,
                            path->local.addrlen, (const struct sockaddr *)path->remote.addr,
                            path->remote.addrlen, run->buf, run->used,
                            run->count > 1 ? run->segment : 0);
    run->used = run->count = 0;
    run->closed = false;
}

/* Adds the datagram of `len` bytes just written at run->buf + run->used
 * for `path`: joins the run, or the run goes first and it starts the
 * next.  Sends a run that cannot grow. */
static void run_add(struct h3_conn *conn, struct gso_run *run, const ngtcp2_path *path, size_t len)
{
    if (run->count > 0 &&
        (run->closed || len > run->segment || !same_path(path, &run->path.path))) {
        size_t at = run->used;
        run_send(conn, run);
        memmove(run->buf, run->buf + at, len);
    }
    if (run->count == 0) {
        ngtcp2_path_storage_init(&run->path, path->local.addr, path->local.addrlen,
                                 path->remote.addr, path->remote.addrlen, NULL);
        run->segment = len;
    }
    run->used += len;
    run->count++;
    run->closed = len < run->segment;
    if (run->count == run->max_count || sizeof(run->buf) - run->used < 1500)
        run_send(conn, run);
}

/* Writes packets while ngtcp2 and nghttp3 have something: stream data
 * from nghttp3, then ACKs and the rest from ngtcp2, in GSO runs when the
 * endpoint's config says so.  Returns 0, or -1 when the connection
 * failed (closed and freed then; what was written is sent first). */
static int write_packets(struct h3_conn *conn)
{
    /* Its fields only: an initializer would zero the 24 KiB buffer at
     * every flush, most of which write one datagram or none. */
    struct gso_run run;
    run.used = run.segment = run.count = 0;
    run.max_count = conn->ep->config.gso ? H3_GSO_SEGMENTS : 1;
    run.closed = false;
    int rc = 0;
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    uint64_t ts = h3_conn_now();
    for (size_t packets = 0; packets < H3_FLUSH_PACKETS;) {
        uint8_t *buf = run.buf + run.used;
        size_t room = sizeof(run.buf) - run.used;
        size_t max = conn->max_udp < room ? conn->max_udp : room;
        int64_t stream_id = -1;
        int fin = 0;
        nghttp3_vec vec[16];
        nghttp3_ssize count = 0;
        /* Asked also when the connection's window is spent: a FIN with
         * no data behind it needs none, and would otherwise wait for a
         * MAX_DATA the peer has no reason to send.  Data the window does
         * not take, ngtcp2 leaves out of the packet (taken stays -1). */
        if (conn->h3 != NULL) {
            count = nghttp3_conn_writev_stream(conn->h3, &stream_id, &fin, vec, 16);
            if (count < 0) {
                ngtcp2_connection_close_error_set_application_error(
                    &conn->ccerr, nghttp3_err_infer_quic_app_error_code((int)count), NULL, 0);
                rc = -1;
                break;
            }
        }
        ngtcp2_ssize taken = -1;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_pkt_info pi;
        ngtcp2_ssize n =
            ngtcp2_conn_writev_stream(conn->quic, &ps.path, &pi, buf, max, &taken, flags, stream_id,
                                      (const ngtcp2_vec *)vec, (size_t)count, ts);
        if (n < 0) {
            switch (n) {
            case NGTCP2_ERR_STREAM_DATA_BLOCKED:
                assert(conn->h3 != NULL);
                nghttp3_conn_block_stream(conn->h3, stream_id);
                continue;
            case NGTCP2_ERR_STREAM_SHUT_WR:
                assert(conn->h3 != NULL);
                nghttp3_conn_shutdown_stream_write(conn->h3, stream_id);
                continue;
            case NGTCP2_ERR_WRITE_MORE:
                assert(taken >= 0);
                if (nghttp3_conn_add_write_offset(conn->h3, stream_id, (size_t)taken) != 0) {
                    rc = -1;
                    break;
                }
                continue;
            default:
                ngtcp2_connection_close_error_set_transport_error_liberr(&conn->ccerr, (int)n, NULL,
                                                                         0);
                rc = -1;
            }
            if (rc != 0)
                break;
        }
        if (taken >= 0 && nghttp3_conn_add_write_offset(conn->h3, stream_id, (size_t)taken) != 0) {
            rc = -1;
            break;
        }
        if (n == 0)
            break;
        run_add(conn, &run, &ps.path, (size_t)n);
        packets++;
        if (packets == H3_FLUSH_PACKETS) /* the rest in the next turn */
            h3_conn_schedule(conn);
    }
    run_send(conn, &run);
    if (rc == 0)
        ngtcp2_conn_update_pkt_tx_time(conn->quic, ts);
    return rc;
}

/* Whether what the server sent reached its 3x limit before the
 * client's address was validated (RFC 9000 8.1): ngtcp2 enforces it but
 * does not tell, so it is counted here, once per connection, when a
 * flush leaves less than one full datagram of the budget (an
 * ack-eliciting Initial must be padded to 1200 bytes). */
static void check_amplification(struct h3_conn *conn)
{
    if (conn->validated || conn->amplification_limited)
        return;
    uint64_t budget = 3 * conn->unvalidated_in;
    if (conn->unvalidated_out + NGTCP2_MAX_UDP_PAYLOAD_SIZE > budget) {
        conn->amplification_limited = true;
        conn->ep->count[H3_AMPLIFICATION_LIMITED]++;
    }
}

/* What a stream's output owes its handler, then the packets. */
static void flush(struct h3_conn *conn)
{
    if (!conn->closed && write_packets(conn) != 0) {
        conn->closed = true;
    } else if (!conn->closed && conn->goaway == 2 && conn->stream_count == 0) {
        /* Drained: its last request stream has ended (every byte of its
         * response acknowledged) after the final GOAWAY. */
        ngtcp2_connection_close_error_set_application_error(&conn->ccerr, NGHTTP3_H3_NO_ERROR, NULL,
                                                            0);
        conn->closed = true;
    }
    if (conn->closed) {
        send_close(conn);
        h3_conn_free(conn);
        return;
    }
    check_amplification(conn);
    arm_timer(conn);
}

void h3_conn_close_now(struct h3_conn *conn)
{
    if (!conn->closed && conn->h3 != NULL)
        ngtcp2_connection_close_error_set_application_error(&conn->ccerr, NGHTTP3_H3_NO_ERROR, NULL,
                                                            0);
    conn->closed = true;
    send_close(conn);
    h3_conn_free(conn);
}

static void flush_deferred(void *arg)
{
    struct h3_conn *conn = arg;
    conn->flush_scheduled = false;
    if (conn->gone) {
        free(conn);
        return;
    }
    flush(conn);
}

void h3_conn_schedule(struct h3_conn *conn)
{
    if (conn->in_input || conn->flush_scheduled)
        return; /* h3_conn_input() flushes on its way out */
    if (corral_loop_defer(conn->c.loop, flush_deferred, conn) == 0)
        conn->flush_scheduled = true;
}

/* ------------------------------------------------------------- input */

/* Counts a datagram from a client whose address is not validated yet,
 * and sees whether it validates it: ngtcp2 takes a Handshake packet (or
 * one protected with later keys) from the client as proof of its address
 * (RFC 9000 8.1), whose keys a spoofer cannot have.  The coalesced long
 * headers are walked by their length fields; their protection is not
 * checked here, which a made-up header could only use to stop the count:
 * ngtcp2 enforces the limit on what it decrypts. */
static void account_unvalidated(struct h3_conn *conn, const uint8_t *pkt, size_t len)
{
    conn->unvalidated_in += len;
    size_t off = 0;
    while (off < len) {
        if ((pkt[off] & 0x80) == 0) {
            conn->validated = true;
            return;
        }
        ngtcp2_pkt_hd hd;
        ngtcp2_ssize n = ngtcp2_pkt_decode_hd_long(&hd, pkt + off, len - off);
        if (n < 0)
            return;
        if (hd.type == NGTCP2_PKT_HANDSHAKE) {
            conn->validated = true;
            return;
        }
        if (hd.len > len - off - (size_t)n)
            return;
        off += (size_t)n + hd.len;
    }
}

void h3_conn_input(struct h3_conn *conn, const struct sockaddr *local, socklen_t local_len,
                   const struct sockaddr *peer, socklen_t peer_len, const uint8_t *pkt, size_t len,
                   unsigned ecn)
{
    if (conn->closed || len == 0) /* ngtcp2 asserts a datagram has a byte */
        return;
    ngtcp2_path path = {
        .local = {(ngtcp2_sockaddr *)local, (ngtcp2_socklen)local_len},
        .remote = {(ngtcp2_sockaddr *)peer, (ngtcp2_socklen)peer_len},
    };
    ngtcp2_pkt_info pi = {.ecn = (uint8_t)(ecn & NGTCP2_ECN_MASK)};
    if (!conn->validated)
        account_unvalidated(conn, pkt, len);
    conn->in_input = true;
    int rc = ngtcp2_conn_read_pkt(conn->quic, &path, &pi, pkt, len, h3_conn_now());
    conn->in_input = false;
    if (rc != 0) {
        switch (rc) {
        case NGTCP2_ERR_DRAINING: /* the peer closed: nothing more to say */
            h3_closing_begin(conn, NULL, 0);
            h3_conn_free(conn);
            return;
        case NGTCP2_ERR_DROP_CONN:
        case NGTCP2_ERR_RETRY: h3_conn_free(conn); return;
        case NGTCP2_ERR_CRYPTO:
            if (conn->ccerr.error_code == 0)
                ngtcp2_connection_close_error_set_transport_error_tls_alert(
                    &conn->ccerr, ngtcp2_conn_get_tls_alert(conn->quic), NULL, 0);
            break;
        case NGTCP2_ERR_CALLBACK_FAILURE:
            if (conn->ccerr.error_code == 0)
                ngtcp2_connection_close_error_set_transport_error_liberr(&conn->ccerr, rc, NULL, 0);
            break;
        default:
            ngtcp2_connection_close_error_set_transport_error_liberr(&conn->ccerr, rc, NULL, 0);
            break;
        }
        conn->closed = true;
    }
    /* The client's peer address may have changed (NAT rebinding,
     * migration): the exchanges read the one it last came from. */
    if (peer_len <= sizeof(conn->dgram.peer)) {
        memcpy(&conn->dgram.peer, peer, peer_len);
        conn->dgram.peer_len = peer_len;
    }
    h3_stream_drains(conn);
    flush(conn);
}

/* --------------------------------------------------------- life */

/* After the ClientHello is read: its SNI name picks the certificate, as
 * a TCP listen's does (site_sni_select()), and is kept for the requests'
 * routing and $ssl_server_name.  A name too long or with a NUL is no
 * name: the default server's certificate. */
static int on_client_hello(gnutls_session_t session)
{
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(session);
    struct h3_conn *conn = ref->user_data;
    size_t len = sizeof(conn->server_name);
    unsigned type;
    if (gnutls_server_name_get(session, conn->server_name, &len, &type, 0) == GNUTLS_E_SUCCESS &&
        type == GNUTLS_NAME_DNS && len > 0 && len < sizeof(conn->server_name) &&
        memchr(conn->server_name, '\0', len) == NULL) {
        conn->server_name[len] = '\0';
        conn->dgram.server_name = conn->server_name;
        gnutls_certificate_credentials_t cred =
            h3_endpoint_credentials(conn->ep, conn->server_name, len, &conn->sni_cred);
        if (cred == NULL ||
            gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, cred) != GNUTLS_E_SUCCESS)
            return GNUTLS_E_INTERNAL_ERROR;
    }
    return 0;
}

struct h3_conn *h3_conn_accept(struct h3_endpoint *ep, const ngtcp2_pkt_hd *hd,
                               const ngtcp2_cid *odcid, bool validated,
                               const struct sockaddr *local, socklen_t local_len,
                               const struct sockaddr *peer, socklen_t peer_len)
{
    if (local_len > sizeof(struct sockaddr_storage) || peer_len > sizeof(struct sockaddr_storage))
        return NULL;
    struct h3_conn *conn = calloc(1, sizeof(*conn));
    if (conn == NULL)
        return NULL;
    conn->ep = ep;
    memcpy(&conn->dgram.local, local, local_len);
    conn->dgram.local_len = local_len;
    memcpy(&conn->dgram.peer, peer, peer_len);
    conn->dgram.peer_len = peer_len;
    conn->c = (struct http_conn){.dgram = &conn->dgram,
                                 .site = ep->site,
                                 .framer = &h3_framer,
                                 .tls = true,
                                 .loop = ep->config.loop,
                                 .worker = ep->config.worker};
    ngtcp2_connection_close_error_default(&conn->ccerr);
    conn->conn_ref = (ngtcp2_crypto_conn_ref){.get_conn = get_conn, .user_data = conn};
    conn->client_dcid = hd->dcid;
    conn->max_udp = NGTCP2_MAX_UDP_PAYLOAD_SIZE;
    conn->timer_expiry = UINT64_MAX; /* not armed */

    ngtcp2_cid scid;
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN];
    if (corral_timer_new(ep->config.loop, on_timer, conn, &conn->timer) != 0 ||
        h3_endpoint_new_cid(ep, &scid, token) != 0)
        goto fail;

    ngtcp2_settings settings;
    ngtcp2_settings_default(&settings);
    settings.initial_ts = h3_conn_now();
    settings.max_stream_window = ep->config.stream_buffer_size;
    settings.max_window = ep->config.stream_buffer_size * 16;
    if (ep->config.handshake_timeout_ms > 0)
        settings.handshake_timeout = ep->config.handshake_timeout_ms * NGTCP2_MILLISECONDS;
    ngtcp2_transport_params params;
    ngtcp2_transport_params_default(&params);
    params.initial_max_stream_data_bidi_remote = ep->config.stream_buffer_size;
    params.initial_max_stream_data_uni = 64 * 1024;
    params.initial_max_data = ep->config.stream_buffer_size * 16;
    params.initial_max_streams_bidi = ep->config.max_concurrent_streams;
    params.initial_max_streams_uni = 3; /* control, QPACK encoder and decoder */
    params.max_idle_timeout = ep->config.idle_timeout_ms * NGTCP2_MILLISECONDS;
    params.stateless_reset_token_present = 1;
    memcpy(params.stateless_reset_token, token, sizeof(token));
    params.original_dcid = hd->dcid;
    if (odcid != NULL) { /* RFC 9000 7.3: the IDs of the exchange with the Retry */
        params.original_dcid = *odcid;
        params.retry_scid = hd->dcid;
        params.retry_scid_present = 1;
    }
    if (validated) { /* ngtcp2 then lifts the amplification limit */
        settings.token = hd->token;
        conn->validated = true;
    }
    ngtcp2_path path = {
        .local = {(ngtcp2_sockaddr *)&conn->dgram.local, (ngtcp2_socklen)local_len},
        .remote = {(ngtcp2_sockaddr *)&conn->dgram.peer, (ngtcp2_socklen)peer_len},
    };
    if (ngtcp2_conn_server_new(&conn->quic, &hd->scid, &scid, &path, hd->version, &quic_callbacks,
                               &settings, &params, &quic_mem, conn) != 0)
        goto fail;

    static const gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    /* QUIC has no EndOfEarlyData (RFC 9001 8.3). */
    unsigned flags =
        GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET |
        (ep->config.early_data ? GNUTLS_ENABLE_EARLY_DATA | GNUTLS_NO_END_OF_EARLY_DATA : 0);
    if (gnutls_init(&conn->tls, flags) != GNUTLS_E_SUCCESS) {
        conn->tls = NULL;
        goto fail;
    }
    if (ep->config.early_data) {
        /* QUIC's early data has no size limit of TLS's own: flow
         * control bounds it (RFC 9001 4.6.1 asks for 0xffffffff). */
        gnutls_anti_replay_enable(conn->tls, ep->anti_replay);
        if (gnutls_record_set_max_early_data_size(conn->tls, 0xffffffffu) != GNUTLS_E_SUCCESS)
            goto fail;
    }
    if (gnutls_priority_set_direct(conn->tls, H3_PRIORITY, NULL) != GNUTLS_E_SUCCESS ||
        gnutls_session_ticket_enable_server(conn->tls, &ep->ticket_datum) != GNUTLS_E_SUCCESS ||
        ngtcp2_crypto_gnutls_configure_server_session(conn->tls) != 0 ||
        gnutls_credentials_set(conn->tls, GNUTLS_CRD_CERTIFICATE, ep->cred) != GNUTLS_E_SUCCESS ||
        gnutls_alpn_set_protocols(conn->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) != GNUTLS_E_SUCCESS)
        goto fail;
    gnutls_session_set_ptr(conn->tls, &conn->conn_ref);
    gnutls_handshake_set_post_client_hello_function(conn->tls, on_client_hello);
    ngtcp2_conn_set_tls_native_handle(conn->quic, conn->tls);

    /* Both IDs lead here: ours, and the one the client chose, which its
     * Initials carry until it has read ours. */
    if (h3_endpoint_add_cid(ep, &scid, conn) != 0 ||
        h3_endpoint_add_cid(ep, &conn->client_dcid, conn) != 0)
        goto fail;
    conn->next = ep->conns;
    if (ep->conns != NULL)
        ep->conns->prev = conn;
    ep->conns = conn;
    ep->conn_count++;
    conn->listed = true;
    conn->handshaking = true;
    ep->handshaking++;
    return conn;
fail:
    h3_endpoint_remove_conn(ep, conn);
    if (conn->tls != NULL)
        gnutls_deinit(conn->tls);
    if (conn->quic != NULL)
        ngtcp2_conn_del(conn->quic);
    if (conn->timer != NULL)
        corral_timer_free(conn->timer);
    free(conn);
    return NULL;
}

void h3_conn_free(struct h3_conn *conn)
{
    assert(!conn->gone);
    struct h3_endpoint *ep = conn->ep;
    while (conn->streams != NULL)
        h3_stream_free(conn->streams);
    h3_endpoint_remove_conn(ep, conn);
    handshake_over(conn);
    if (conn->listed) {
        if (conn->prev != NULL)
            conn->prev->next = conn->next;
        else
            ep->conns = conn->next;
        if (conn->next != NULL)
            conn->next->prev = conn->prev;
        ep->conn_count--;
    }
    corral_timer_free(conn->timer);
    if (conn->h3 != NULL)
        nghttp3_conn_del(conn->h3);
    ngtcp2_conn_del(conn->quic);
    gnutls_deinit(conn->tls);
    h3_sni_certs_release(conn->sni_cred); /* after the session that used them */
    conn->sni_cred = NULL;
    h3_endpoint_conn_gone(ep);
    /* A flush deferred to the loop's turn still points here: it frees
     * what is left. */
    if (conn->flush_scheduled) {
        conn->gone = true;
        return;
    }
    free(conn);
}
