/*
 * proxy_h2.c: proxy_pass with proxy_http_version 2, and grpc_pass: the
 * same semantics as proxy.c (the head rebuilt from parsed fields, the
 * balancing, proxy_next_upstream, the $upstream_* record), each request a
 * stream on a connection its worker shares with others to the same
 * server (h2_client.c).  Request bodies and trailers stream to the
 * backend; the response, its trailers included, streams back, its window
 * opening only as the client takes it.  For a gRPC call, corral's own
 * failures are grpc-status answers (grpc_status.h).
 */
#include "proto/upstream/proxy_h2.h"

#include "proto/counter.h"
#include "proto/http/vars.h"
#include "proto/policy/add_header.h"
#include "proto/upstream/balance.h"
#include "proto/upstream/grpc_status.h"
#include "proto/upstream/h2_client.h"
#include "proto/upstream/proxy_buffer.h"
#include "proto/upstream/proxy_head.h"
#include "proto/upstream/proxy_next.h"
#include "proto/upstream/proxy_start.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct proxy_h2_exchange {
    struct exchange *ex;
    const struct proxy_location *loc;
    struct h2_client_stream st;
    bool on_stream;  /* st is on a connection: the server is held */
    unsigned server; /* while on_stream */
    char *head;      /* the request head as built, which nv points into */
    size_t head_len;
    struct hpack_field *nv;
    struct proxy_start start;
    struct upstream_tried tried;
    unsigned tries;
    unsigned status;
    unsigned next_status; /* a status proxy_next_upstream lists, while failing over */
    bool grpc;            /* a gRPC call: corral's errors are grpc-status answers */
    uint64_t attempt_ns;
    struct exchange_upstream_try *attempt;
    struct vars_buf add_early;
    /* proxy_request_buffering: the body read whole before a server is
     * asked (NULL: it streams); `buffered`: it came whole; `pumped`: how
     * much of it went to the current stream. */
    struct proxy_buffer *buffer;
    bool buffered;
    uint64_t pumped;
};

static void ph_fail(struct proxy_h2_exchange *px, enum proxy_error_kind kind, bool processed);

static struct upstream_worker *ph_worker(const struct proxy_h2_exchange *px)
{
    return upstream_worker_of(px->loc->upstream, exchange_worker(px->ex));
}

static void ph_attempt_end(struct proxy_h2_exchange *px, unsigned status)
{
    exchange_upstream_try_end(px->attempt, px->attempt_ns, status);
}

/* The server the stream was on is done with this request. */
static void ph_release(struct proxy_h2_exchange *px)
{
    if (!px->on_stream)
        return;
    px->on_stream = false;
    upstream_server_release(px->loc->upstream, ph_worker(px), px->server);
}

static void ph_finish(struct proxy_h2_exchange *px)
{
    if (px->on_stream) {
        h2_client_stream_cancel(&px->st);
        ph_release(px);
    }
    if (px->ex != NULL) {
        ph_attempt_end(px, 0);
        exchange_set_data(px->ex, NULL);
        add_header_forget_early(px->ex);
    }
    free(px->st.data);
    free(px->st.trailers);
    free(px->st.in.data);
    vars_buf_free(&px->add_early);
    free(px->nv);
    proxy_head_free(px->head);
    proxy_buffer_free(px->buffer);
    free(px);
}

/* corral's own answer: a grpc-status for a gRPC call, else the page. */
static void ph_respond_error(struct proxy_h2_exchange *px, unsigned status, enum grpc_status code)
{
    exchange_resume_body(px->ex); /* what is left of the body is read and dropped */
    if (px->grpc)
        grpc_status_respond(px->ex, code, http_reason(status));
    else
        exchange_respond_error(px->ex, status);
}

static bool ph_may_retry(const struct proxy_h2_exchange *px, unsigned condition, bool sent)
{
    const struct proxy_attempt attempt = {
        .sent = sent,
        .idempotent = px->start.idempotent,
        .tries = px->tries,
        .elapsed_ms = corral_loop_now(exchange_loop(px->ex)) - px->start.started_ms,
    };
    return proxy_next_allowed(&px->loc->conf, condition, &attempt);
}

/* ------------------------------------------------------ the stream's reports */

static void ph_on_open(void *owner)
{
    struct proxy_h2_exchange *px = owner;
    if (px->attempt != NULL && px->attempt->connect_ms == EXCHANGE_UPSTREAM_UNKNOWN)
        px->attempt->connect_ms = exchange_upstream_ms_since(px->attempt_ns);
}

static void ph_on_head(void *owner, const struct http1_client_head *head)
{
    struct proxy_h2_exchange *px = owner;
    px->attempt->header_ms = exchange_upstream_ms_since(px->attempt_ns);
    px->attempt->status = (uint16_t)head->status;
    unsigned condition = proxy_next_status_condition(head->status);
    if (condition != 0 && (px->st.replayable || px->buffer != NULL) &&
        ph_may_retry(px, condition, true) &&
        balance_any_usable(px->loc->upstream, ph_worker(px), &px->tried,
                           corral_loop_now(exchange_loop(px->ex)))) {
        px->next_status = head->status;
        h2_client_stream_cancel(&px->st);
        ph_fail(px, PROXY_ERROR_INVALID, true);
        return;
    }
    if (px->loc->conf.intercept_errors && head->status >= 300 &&
        exchange_error_page(px->ex, head->status)) {
        ph_attempt_end(px, 0);
        upstream_count_response(ph_worker(px), px->server, head->status,
                                corral_monotonic_ns() - px->attempt_ns);
        exchange_resume_body(px->ex);
        ph_finish(px); /* resets the stream */
        return;
    }
    px->status = head->status;
    char small[1024];
    struct h1_head_buf headers;
    http1_client_head_init(&headers, small, sizeof(small));
    struct vars_ctx ctx = {.ex = px->ex};
    if (proxy_head_response(px->loc, head, &ctx, &headers) != 0) {
        http1_client_head_free(&headers);
        h2_client_stream_cancel(&px->st);
        ph_fail(px, PROXY_ERROR_INVALID, true);
        return;
    }
    exchange_begin(px->ex, head->status, headers.data, headers.len, head->content_length);
    http1_client_head_free(&headers);
}

static void ph_on_body(void *owner, const char *data, size_t len)
{
    struct proxy_h2_exchange *px = owner;
    exchange_write(px->ex, data, len);
    exchange_flush(px->ex); /* a stream's messages reach the client as they come */
    /* The backend's window for this stream opens again only once the
     * client's output has room (proxy_h2_on_drain()). */
    if (!exchange_backed_up(px->ex))
        h2_client_stream_consume(&px->st, len);
}

static void ph_on_end(void *owner, const char *trailers, size_t len)
{
    struct proxy_h2_exchange *px = owner;
    ph_attempt_end(px, 0);
    upstream_count_response(ph_worker(px), px->server, px->status,
                            corral_monotonic_ns() - px->attempt_ns);
    ph_release(px);
    exchange_end_trailers(px->ex, trailers, len);
    ph_finish(px);
}

static void ph_on_error(void *owner, enum proxy_error_kind kind, bool processed)
{
    ph_fail(owner, kind, processed);
}

static void ph_pump(struct proxy_h2_exchange *px);

static void ph_on_send_drain(void *owner)
{
    struct proxy_h2_exchange *px = owner;
    if (px->buffer != NULL)
        ph_pump(px);
    else
        exchange_resume_body(px->ex);
}

static const struct h2_client_ops ph_ops = {
    .on_open = ph_on_open,
    .on_head = ph_on_head,
    .on_body = ph_on_body,
    .on_end = ph_on_end,
    .on_error = ph_on_error,
    .on_send_drain = ph_on_send_drain,
};

/* ----------------------------------------------------------------- sending */

/* Puts the request on a stream to the next server.  Returns 0, or
 * -EHOSTUNREACH when no server is left, or a local resource error. */
static int ph_send(struct proxy_h2_exchange *px)
{
    struct proxy_upstream *up = px->loc->upstream;
    struct upstream_worker *worker = ph_worker(px);
    corral_loop *loop = exchange_loop(px->ex);
    for (;;) {
        int server =
            balance_pick_server(up, worker, &px->tried, px->start.hash, corral_loop_now(loop));
        if (server < 0)
            return -EHOSTUNREACH;
        upstream_tried_add(&px->tried, (size_t)server);
        if (!upstream_server_acquire(up, worker, (unsigned)server))
            continue;
        px->tries++;
        uint64_t asked_ns = corral_monotonic_ns();
        if (px->buffer != NULL) { /* the whole body goes again, from the buffer */
            free(px->st.data);
            px->st.data = NULL;
            px->st.len = px->st.sent = px->st.cap = 0;
            px->st.body_end = px->st.paused = false;
            px->st.replayable = true;
            px->pumped = 0;
        }
        int err =
            h2_client_submit(up, worker, (unsigned)server, loop, px->loc->conf.connect_timeout_ms,
                             px->loc->conf.send_timeout_ms, &px->st);
        if (err != 0)
            upstream_server_release(up, worker, (unsigned)server);
        if (err != 0 && upstream_local_error(err))
            return err;
        px->attempt =
            exchange_upstream_ask(px->ex, up->servers[server].address, px->attempt == NULL);
        px->attempt_ns = asked_ns;
        px->attempt->asked_ns = asked_ns;
        if (err != 0) {
            ph_attempt_end(px, 502);
            counter_inc(&worker->errors[PROXY_ERROR_CONNECT]);
            upstream_server_failed(up, worker, (unsigned)server, corral_loop_now(loop));
            proxy_next_log_failure(up, (unsigned)server, corral_loop_now(loop), PROXY_ERROR_CONNECT,
                                   err, 0, px->start.client, px->head, px->head_len);
            if (!ph_may_retry(px, PROXY_NEXT_ERROR, false))
                return -EHOSTUNREACH;
            continue;
        }
        px->on_stream = true;
        px->server = (unsigned)server;
        if (px->st.conn->base.connected)
            px->attempt->connect_ms = exchange_upstream_ms_since(asked_ns);
        if (px->buffer != NULL)
            ph_pump(px);
        return 0;
    }
}

/* A buffered body goes on the stream as the stream takes it; then the
 * stream ends (the trailers stay behind, as with HTTP/1.1). */
static void ph_pump(struct proxy_h2_exchange *px)
{
    const struct body_store *body = &px->buffer->body;
    char scratch[16 * 1024];
    while (px->on_stream && px->pumped < body->len) {
        const char *data = NULL;
        ssize_t n = body_store_read(body, px->pumped, scratch, sizeof(scratch), &data);
        if (n <= 0) {
            ph_respond_error(px, 500, GRPC_STATUS_INTERNAL);
            ph_finish(px); /* resets the stream */
            return;
        }
        /* a stream holds what it was given: a piece at a time */
        size_t len = (size_t)n < H2_CLIENT_SEND_BUFFER ? (size_t)n : H2_CLIENT_SEND_BUFFER;
        px->pumped += len;
        if (h2_client_stream_write(&px->st, data, len))
            return; /* on_send_drain goes on */
    }
    if (px->on_stream && px->st.has_body && px->pumped == body->len)
        h2_client_stream_end(&px->st, NULL, 0);
}

/* The stream failed (it is off its connection), or its response is one
 * proxy_next_upstream lists: the next server when the policy allows and
 * the request can go again whole, else an error answer, or a cut if the
 * response had begun. */
static void ph_fail(struct proxy_h2_exchange *px, enum proxy_error_kind kind, bool processed)
{
    struct proxy_upstream *up = px->loc->upstream;
    struct upstream_worker *worker = ph_worker(px);
    uint64_t now = corral_loop_now(exchange_loop(px->ex));
    unsigned server = px->server;
    unsigned status = px->next_status;
    px->next_status = 0;
    ph_release(px);
    ph_attempt_end(px, kind == PROXY_ERROR_TIMEOUT ? 504 : 502);
    proxy_next_log_failure(up, server, now, kind, 0, status, px->start.client, px->head,
                           px->head_len);
    if (status != 0) {
        upstream_server_failed(up, worker, server, now);
    } else {
        counter_inc(&worker->errors[kind]);
        if (kind == PROXY_ERROR_CONNECT || kind == PROXY_ERROR_TIMEOUT || kind == PROXY_ERROR_TLS)
            upstream_server_failed(up, worker, server, now);
    }
    if (exchange_response_started(px->ex)) {
        exchange_abort(px->ex);
        ph_finish(px);
        return;
    }
    unsigned condition =
        status != 0 ? proxy_next_status_condition(status) : proxy_next_condition(kind);
    int err = -EHOSTUNREACH;
    if ((px->st.replayable || px->buffer != NULL) && ph_may_retry(px, condition, processed)) {
        err = ph_send(px);
        if (err == 0)
            return;
    }
    if (kind == PROXY_ERROR_TIMEOUT)
        ph_respond_error(px, 504, GRPC_STATUS_DEADLINE_EXCEEDED);
    else if (upstream_local_error(err))
        ph_respond_error(px, 503, GRPC_STATUS_RESOURCE_EXHAUSTED);
    else
        ph_respond_error(px, 502, GRPC_STATUS_UNAVAILABLE);
    ph_finish(px);
}

/* ------------------------------------------------------------- the handler */

/* Asks the first server for `req`, as it came or, buffered, whole. */
static void ph_start(struct proxy_h2_exchange *px, const struct http_request *req)
{
    struct exchange *ex = px->ex;
    proxy_start_init(&px->start, ex, px->loc->add_headers, px->loc->upstream, req);
    /* A body whose length comes at its end goes without one (the head's
     * Transfer-Encoding, which HTTP/2 has no use for, is dropped from the
     * fields). */
    const struct proxy_head_request how = {.client = px->start.client,
                                           .tls = exchange_tls(ex),
                                           .chunked = req->has_body && !req->has_content_length,
                                           .ex = ex};
    size_t max = 8;
    if (proxy_head_build(px->loc, req, &how, &px->head, &px->head_len) == 0) {
        for (size_t i = 0; i < px->head_len; i++)
            max += px->head[i] == '\n';
        px->nv = calloc(max, sizeof(*px->nv));
    }
    size_t nvlen =
        px->nv != NULL
            ? h2_client_head_nv(px->head, px->head_len,
                                px->loc->upstream->tls != NULL ? "https" : "http", px->nv, max)
            : 0;
    if (nvlen == 0) {
        exchange_respond_error(ex, 500);
        ph_finish(px);
        return;
    }
    px->st = (struct h2_client_stream){
        .ops = &ph_ops,
        .owner = px,
        .nv = px->nv,
        .nvlen = nvlen,
        .has_body = req->has_body,
        .read_timeout_ms = px->loc->conf.read_timeout_ms,
        .send_timeout_ms = px->loc->conf.send_timeout_ms,
        .head_limit = px->loc->conf.response_head_limit > 0 ? px->loc->conf.response_head_limit
                                                            : PROXY_RESPONSE_HEAD_LIMIT,
        .head_method = req->head,
        .replayable = true,
    };
    exchange_set_data(ex, px);
    add_header_early(ex, req, &px->add_early);
    int err = ph_send(px);
    if (err != 0) {
        if (!upstream_local_error(err))
            counter_inc(&ph_worker(px)->errors[PROXY_ERROR_CONNECT]);
        if (upstream_local_error(err))
            ph_respond_error(px, 503, GRPC_STATUS_RESOURCE_EXHAUSTED);
        else
            ph_respond_error(px, 502, GRPC_STATUS_UNAVAILABLE);
        ph_finish(px);
    }
}

static void proxy_h2_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    struct proxy_h2_exchange *px = calloc(1, sizeof(*px));
    if (px == NULL) {
        exchange_respond_error(ex, 500);
        return;
    }
    px->ex = ex;
    px->loc = data;
    px->grpc = px->loc->grpc && grpc_status_call(req);
    if (!proxy_buffer_wanted(&px->loc->conf, px->loc->grpc, req)) {
        ph_start(px, req);
        return;
    }
    /* The body first: proxy_h2_on_body() keeps it, proxy_h2_on_body_end()
     * starts. */
    px->buffer = proxy_buffer_new(&px->loc->conf, req);
    if (px->buffer == NULL) {
        free(px);
        exchange_respond_error(ex, 500);
        return;
    }
    exchange_set_data(ex, px);
}

static void proxy_h2_on_body(struct exchange *ex, const char *data, size_t len)
{
    struct proxy_h2_exchange *px = exchange_data(ex);
    if (px != NULL && px->buffer != NULL) {
        unsigned status =
            px->buffered ? 0 : proxy_buffer_add(px->buffer, px->loc->upstream->name, data, len);
        if (status != 0) {
            ph_respond_error(px, status, GRPC_STATUS_INTERNAL);
            ph_finish(px);
        }
        return;
    }
    if (px == NULL || !px->on_stream)
        return;
    if (h2_client_stream_write(&px->st, data, len))
        exchange_pause_body(ex); /* on_send_drain resumes it */
}

static void proxy_h2_on_body_trailers(struct exchange *ex, const char *lines, size_t len)
{
    struct proxy_h2_exchange *px = exchange_data(ex);
    if (px != NULL && px->buffer == NULL && px->on_stream)
        h2_client_stream_end(&px->st, lines, len);
}

static void proxy_h2_on_body_end(struct exchange *ex)
{
    struct proxy_h2_exchange *px = exchange_data(ex);
    if (px != NULL && px->buffer != NULL) {
        if (!px->buffered) {
            px->buffered = true;
            ph_start(px, proxy_buffer_end(px->buffer));
        }
        return;
    }
    if (px != NULL && px->on_stream)
        h2_client_stream_end(&px->st, NULL, 0);
}

/* The client took what was queued for it: the stream's window opens by
 * what the backend sent meanwhile. */
static void proxy_h2_on_drain(struct exchange *ex)
{
    struct proxy_h2_exchange *px = exchange_data(ex);
    if (px != NULL && px->on_stream)
        h2_client_stream_consume(&px->st, px->st.held);
}

static void proxy_h2_on_abort(struct exchange *ex)
{
    struct proxy_h2_exchange *px = exchange_data(ex);
    if (px == NULL)
        return;
    ph_finish(px); /* the stream is reset (CANCEL) */
}

const struct http_handler proxy_h2_handler = {
    .name = "proxy_h2",
    .on_request = proxy_h2_on_request,
    .on_body = proxy_h2_on_body,
    .on_body_end = proxy_h2_on_body_end,
    .on_body_trailers = proxy_h2_on_body_trailers,
    .on_abort = proxy_h2_on_abort,
    .on_drain = proxy_h2_on_drain,
};
