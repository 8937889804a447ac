/*
 * proxy.c: `proxy_pass`, the proxy's semantics.  A request is forwarded on
 * an upstream connection (proto/upstream/http1_client.c) taken from the worker's idle
 * pool or opened for it (proto/upstream/upstream.c), whatever protocol the client
 * speaks: it sees only the exchange (proto/http/exchange.h).  Its body streams
 * through as it arrives and the response streams back, each side pausing
 * the other when its output backs up.  Nothing ambiguous is forwarded: the client side has
 * already refused every malformed request, and the request head is rebuilt
 * here from parsed fields, never copied raw.
 */
#include "proto/upstream/proxy.h"

#include "proto/policy/add_header.h"
#include "proto/upstream/balance.h"
#include "proto/counter.h"
#include "proto/upstream/http1_client.h"
#include "proto/upstream/proxy_buffer.h"
#include "proto/upstream/proxy_head.h"
#include "proto/upstream/proxy_next.h"
#include "proto/upstream/proxy_start.h"
#include "proto/http/exchange_pool.h"
#include "proto/http/vars.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REPLAY_MAX (64 * 1024)
/* At most one log line a second per worker about local resource failures:
 * while descriptors run out, every request would log one. */
#define LOCAL_ERROR_LOG_MS 1000

struct proxy_exchange {
    struct exchange *ex;
    const struct proxy_location *loc;
    struct http1_client *uc;
    char *head; /* the request head as forwarded, kept for a retry */
    size_t head_len;
    struct proxy_start start; /* the client, the balancing key's hash... */
    struct upstream_tried tried;
    unsigned tries; /* servers asked, for proxy_next_upstream_tries */
    /* A response status proxy_next_upstream lists, while px_fail() sends
     * the request on; 0 otherwise. */
    unsigned next_status;
    int error;         /* the -errno of the upstream connection's close, for the log */
    bool chunked;      /* the request body goes out chunked */
    bool trailers;     /* its last chunk went with the client's trailers */
    bool body_started; /* request body bytes went to the upstream: no retry */
    /* The response body, or the request body, is being spliced: its
     * callback runs once, and frees the exchange if it finished meanwhile
     * (ex NULL). */
    bool splicing, upload_splicing;
    bool unflushed; /* body went to the exchange since its last exchange_flush() */
    /* Of a request chunk whose size line went to the upstream: the bytes
     * still to send before its CRLF (px_splice_upload()). */
    uint64_t upload_chunk_left;
    /* What the response may be; rq.sent: the whole request went to the
     * upstream; rq.upgrade: the client asked to switch protocols
     * (WebSocket). */
    struct http1_client_request rq;
    /* Chunked, or longer than REPLAY_MAX: it could not be sent again, so it
     * goes on a new connection, which the upstream cannot have closed
     * already as it may a pooled one. */
    bool body_beyond_replay;
    uint64_t attempt_ns; /* when the current server was asked */
    /* The current server's entry in the exchange's list, for the
     * $upstream_* variables; NULL before the first. */
    struct exchange_upstream_try *attempt;
    unsigned status;           /* the current server's response status */
    struct vars_buf add_early; /* add_header_early()'s values */
    /* The body bytes sent on a pooled connection, kept (up to REPLAY_MAX)
     * until the response starts: if the upstream had closed that connection
     * meanwhile, the request is sent again, body and all. */
    char *replay;
    size_t replay_len;
    bool replay_ok;
    /* The request, kept for proxy_redirect values that read it (the
     * location says so): it is gone once on_request returns. */
    struct http_request req;
    char *req_block;
    /* proxy_request_buffering: the body read whole before a server is
     * asked (NULL: it streams); `buffered`: it came whole and went to
     * px_start(); `pumped`: how much of it went to the current server. */
    struct proxy_buffer *buffer;
    bool buffered;
    uint64_t pumped;
};

static void px_finish(struct proxy_exchange *px);
static void px_drop_replay(struct proxy_exchange *px);
static void px_attempt_end(struct proxy_exchange *px, unsigned status);
static void px_fail(struct proxy_exchange *px, enum proxy_error_kind kind);
static void px_fail_local(struct proxy_exchange *px, int err);
static int px_send(struct proxy_exchange *px);
static void px_detach(struct proxy_exchange *px);
static struct upstream_worker *px_worker(const struct proxy_exchange *px);

static void count_error(struct upstream_worker *worker, enum proxy_error_kind kind)
{
    counter_inc(&worker->errors[kind]);
}

/* Backpressure between the two sides: while one side's output is over its
 * own high watermark, stop reading the other; the drain resumes it.  The
 * client's output backed up: stop reading the upstream. */
static void pause_upstream_if_backed_up(struct proxy_exchange *px)
{
    if (exchange_backed_up(px->ex))
        corral_conn_pause_read(px->uc->base.conn);
}

/* The output to the upstream backed up: stop reading the client. */
static void pause_client_if_backed_up(struct proxy_exchange *px, corral_conn *upstream)
{
    if (corral_conn_backed_up(upstream))
        exchange_pause_body(px->ex);
}

/* The retry policy's view of the exchange; `sent`: its bytes may have
 * reached the server. */
static bool px_may_retry(const struct proxy_exchange *px, unsigned condition, bool sent)
{
    const struct proxy_attempt attempt = {
        .sent = sent,
        .idempotent = px->start.idempotent,
        .tries = px->tries,
        .elapsed_ms = corral_loop_now(exchange_loop(px->ex)) - px->start.started_ms,
    };
    return proxy_next_allowed(&px->loc->conf, condition, &attempt);
}

/* Whether a response with `status` is dropped for the next server's: the
 * policy lists it and allows another try, the request can be sent again,
 * and a server is left to take it (else the client gets this response). */
static bool px_retry_status(struct proxy_exchange *px, unsigned status)
{
    return proxy_next_status_condition(status) != 0 && !px->body_started &&
           px_may_retry(px, proxy_next_status_condition(status), true) &&
           balance_any_usable(px->loc->upstream, px_worker(px), &px->tried,
                              corral_loop_now(exchange_loop(px->ex)));
}

static void px_log_failure(struct proxy_exchange *px, unsigned server, enum proxy_error_kind kind)
{
    proxy_next_log_failure(px->loc->upstream, server, corral_loop_now(exchange_loop(px->ex)), kind,
                           px->error, px->next_status, px->start.client, px->head, px->head_len);
    px->error = 0;
}

/* ------------------------------------------- the upstream connection's reports */

static void px_on_open(void *owner)
{
    struct proxy_exchange *px = owner;
    px->attempt->connect_ms = exchange_upstream_ms_since(px->attempt_ns);
    px_drop_replay(px); /* what was queued goes out now */
}

/* The location's error page took the response (proxy_intercept_errors),
 * as nginx's: the backend's body is never read, and its connection, which
 * still holds it, is closed rather than pooled.  What is left of the
 * request body is read and dropped. */
static void px_intercepted(struct proxy_exchange *px, unsigned status)
{
    px_drop_replay(px);
    px_attempt_end(px, 0);
    struct upstream_conn *uc = &px->uc->base;
    upstream_server_release(uc->upstream, uc->worker, uc->server);
    upstream_count_response(uc->worker, uc->server, status, corral_monotonic_ns() - px->attempt_ns);
    px_detach(px);
    exchange_resume_body(px->ex);
    px_finish(px);
}

/* The response head for the client: the upstream's headers less the
 * hop-by-hop and hidden ones (a 101 keeps its Upgrade and Connection);
 * or, with proxy_intercept_errors, the location's error page for it. */
static int px_on_head(void *owner, const struct http1_client_head *head)
{
    struct proxy_exchange *px = owner;
    px->attempt->header_ms = exchange_upstream_ms_since(px->attempt_ns);
    px->attempt->status = (uint16_t)head->status; /* $upstream_status */
    if (px_retry_status(px, head->status)) {
        px->next_status = head->status;
        return -EAGAIN; /* px_fail() goes on to the next server */
    }
    if (px->loc->conf.intercept_errors && head->status >= 300 && !head->tunnel &&
        exchange_error_page(px->ex, head->status)) {
        px_intercepted(px, head->status);
        return 0;
    }
    px_drop_replay(px);
    px->status = head->status;
    char small[1024];
    struct h1_head_buf headers;
    http1_client_head_init(&headers, small, sizeof(small));
    struct vars_ctx ctx = {.ex = px->ex, .req = px->req_block != NULL ? &px->req : NULL};
    if (proxy_head_response(px->loc, head, &ctx, &headers) != 0) {
        http1_client_head_free(&headers);
        return -ENOMEM;
    }
    exchange_begin_coded(px->ex, head->status, headers.data, headers.len, head->content_length,
                         head->codings);
    http1_client_head_free(&headers);
    /* A filter that holds body bytes back (compression) is flushed when
     * the upstream pauses, so that a slow or streaming backend's bytes
     * reach the client as they come: only then is the pause watched. */
    px->uc->watch_pauses = exchange_wants_flush(px->ex);
    return 0;
}

static void px_on_body(void *owner, const char *data, size_t len)
{
    struct proxy_exchange *px = owner;
    exchange_write(px->ex, data, len);
    px->unflushed = true;
    pause_upstream_if_backed_up(px);
}

/* After a read with body bytes, when the upstream's socket has nothing
 * more (it paused): what the filters hold goes to the client. */
static void px_on_read_done(void *owner, corral_conn *conn)
{
    struct proxy_exchange *px = owner;
    if (!px->unflushed || corral_conn_input_pending(conn))
        return;
    px->unflushed = false;
    exchange_flush(px->ex);
}

static void px_on_end(void *owner, const char *trailers, size_t len)
{
    struct proxy_exchange *px = owner;
    px_attempt_end(px, 0);
    exchange_end_trailers(px->ex, trailers, len);
    struct upstream_conn *uc = &px->uc->base;
    px->uc = NULL;
    upstream_server_release(uc->upstream, uc->worker, uc->server);
    upstream_count_response(uc->worker, uc->server, px->status,
                            corral_monotonic_ns() - px->attempt_ns);
    px_finish(px);
}

static void px_on_spliced(struct exchange *ex, uint64_t moved, int error, void *arg)
{
    (void)ex;
    struct proxy_exchange *px = arg;
    px->splicing = false;
    if (px->ex == NULL) { /* proxy_on_abort ran meanwhile */
        px_finish(px);
        return;
    }
    struct http1_client *uc = px->uc;
    if (error == 0 && http1_client_spliced(uc, moved))
        return; /* the body goes on, or px_on_end ran */
    if (error != 0 && corral_conn_fd(uc->base.conn) >= 0) {
        /* The client's side failed (the upstream's would be closed):
         * nothing to hold against the server, as in proxy_on_abort. */
        upstream_server_release(uc->base.upstream, uc->base.worker, uc->base.server);
        px_detach(px);
        exchange_abort(px->ex);
        px_finish(px);
        return;
    }
    /* The upstream failed, or closed short of the length it announced. */
    px_fail(px, error == -ETIMEDOUT ? PROXY_ERROR_TIMEOUT : PROXY_ERROR_RESET);
}

/* The rest of the response body, or of its current chunk, moves inside
 * the kernel when that pays: proxy_splice is on and the rest is long
 * enough (or ends with the connection).  Not while the client's output
 * is backed up: the upstream is paused then, and the offer comes again
 * with its next read. */
static int px_on_splice(void *owner, corral_conn *conn, uint64_t len)
{
    struct proxy_exchange *px = owner;
    if (!px->loc->conf.splice || px->loc->upstream->tls != NULL ||
        (len != UINT64_MAX && len < PROXY_SPLICE_MIN) || exchange_backed_up(px->ex))
        return -EAGAIN;
    int err = exchange_splice(px->ex, conn, len, px_on_spliced, px);
    px->splicing = err == 0;
    return err;
}

static void px_on_error(void *owner, enum proxy_error_kind kind)
{
    px_fail(owner, kind);
}

static void px_on_close(void *owner, int error, enum proxy_error_kind kind)
{
    struct proxy_exchange *px = owner;
    if (px->uc->tunnel) {
        struct upstream_conn *uc = &px->uc->base;
        px->uc = NULL;
        upstream_server_release(uc->upstream, uc->worker, uc->server);
        exchange_tunnel_close(px->ex); /* its on_abort frees px */
    } else if (upstream_local_error(error)) {
        px_fail_local(px, error); /* detaches uc from px */
    } else {
        px->error = error;
        px_fail(px, kind); /* detaches uc from px */
    }
}

static void px_on_tunnel(void *owner)
{
    struct proxy_exchange *px = owner;
    exchange_tunnel(px->ex);
}

/* After 101: bytes pass through raw in both directions. */
static size_t px_on_tunnel_data(void *owner, const char *data, size_t len)
{
    struct proxy_exchange *px = owner;
    exchange_tunnel_write(px->ex, data, len);
    pause_upstream_if_backed_up(px);
    return len;
}

static void px_on_tunnel_end(void *owner)
{
    struct proxy_exchange *px = owner;
    exchange_tunnel_close(px->ex);
}

static void px_pump(struct proxy_exchange *px);

static void px_on_upstream_drain(void *owner)
{
    struct proxy_exchange *px = owner;
    if (px->buffer != NULL)
        px_pump(px);
    else
        exchange_resume_body(px->ex);
}

static const struct http1_client_ops px_client_ops = {
    .on_open = px_on_open,
    .on_head = px_on_head,
    .on_body = px_on_body,
    .on_end = px_on_end,
    .on_error = px_on_error,
    .on_close = px_on_close,
    .on_tunnel = px_on_tunnel,
    .on_tunnel_data = px_on_tunnel_data,
    .on_tunnel_end = px_on_tunnel_end,
    .on_drain = px_on_upstream_drain,
    .on_splice = px_on_splice,
    .on_read_done = px_on_read_done,
};

/* ----------------------------------------------------------------- exchanges */

static struct upstream_worker *px_worker(const struct proxy_exchange *px)
{
    return upstream_worker_of(px->loc->upstream, exchange_worker(px->ex));
}

/* The current server is done with: its entry gets `status` if it has none
 * (its response's, or 502/504 for a failure, as nginx logs it) and the
 * time its response took. */
static void px_attempt_end(struct proxy_exchange *px, unsigned status)
{
    exchange_upstream_try_end(px->attempt, px->attempt_ns, status);
}

static void px_drop_replay(struct proxy_exchange *px)
{
    free(px->replay);
    px->replay = NULL;
    px->replay_len = 0;
    px->replay_ok = false;
}

/* Sends body bytes to the upstream, keeping a copy while a replay is
 * possible. */
static void px_write_body(struct proxy_exchange *px, const struct iovec *iov, int count)
{
    corral_conn_writev(px->uc->base.conn, iov, count);
    if (!px->replay_ok)
        return;
    for (int i = 0; i < count; i++) {
        if (px->replay_len + iov[i].iov_len > REPLAY_MAX) {
            px_drop_replay(px);
            return;
        }
        char *grown = realloc(px->replay, px->replay_len + iov[i].iov_len);
        if (grown == NULL) {
            px_drop_replay(px);
            return;
        }
        px->replay = grown;
        memcpy(px->replay + px->replay_len, iov[i].iov_base, iov[i].iov_len);
        px->replay_len += iov[i].iov_len;
    }
}

/* Lets go of the upstream connection for good (see http1_client_detach()). */
static void px_detach(struct proxy_exchange *px)
{
    struct http1_client *uc = px->uc;
    px->uc = NULL;
    http1_client_detach(uc);
}

static void px_finish(struct proxy_exchange *px)
{
    if (px->ex != NULL) {
        px_attempt_end(px, 0); /* the client went away: nginx logs "-" for its status */
        exchange_set_data(px->ex, NULL);
        add_header_forget_early(px->ex);
    }
    px->ex = NULL;
    if (px->splicing || px->upload_splicing)
        return; /* the exchange is the framer's again; the callback frees px */
    vars_buf_free(&px->add_early);
    proxy_buffer_free(px->buffer);
    free(px->replay);
    proxy_head_free(px->head);
    free(px->req_block);
    exchange_pool_put(px, sizeof(*px));
}

/* Logs a local resource failure (at most once a second per worker: while
 * descriptors run out, every request would log one). */
static void note_local_error(struct proxy_exchange *px, unsigned server, int err)
{
    struct upstream_worker *worker = px_worker(px);
    uint64_t now = corral_loop_now(exchange_loop(px->ex));
    if (worker->local_error_logged_ms != 0 &&
        now - worker->local_error_logged_ms < LOCAL_ERROR_LOG_MS)
        return;
    worker->local_error_logged_ms = now != 0 ? now : 1;
    corral_log(CORRAL_LOG_ERROR,
               "upstream \"%s\": connection to %s: %s (a local limit: answering 503, the "
               "server is not marked down)",
               px->loc->upstream->name, px->loc->upstream->servers[server].address, strerror(-err));
}

/* A buffered body goes to the upstream as its output drains; once all of
 * it is queued the request is sent, and the read timeout counts. */
static void px_pump(struct proxy_exchange *px)
{
    const struct body_store *body = &px->buffer->body;
    corral_conn *conn = px->uc->base.conn;
    char scratch[16 * 1024];
    while (px->pumped < body->len && !corral_conn_backed_up(conn)) {
        const char *data = NULL;
        ssize_t n = body_store_read(body, px->pumped, scratch, sizeof(scratch), &data);
        if (n <= 0) {
            px_fail_local(px, n < 0 ? (int)n : -EIO);
            return;
        }
        /* in pieces, so that the output's watermark is heard */
        size_t len = (size_t)n < sizeof(scratch) ? (size_t)n : sizeof(scratch);
        corral_conn_write(conn, data, len);
        px->pumped += len;
    }
    if (px->pumped == body->len && !px->rq.sent) {
        px->rq.sent = true;
        if (px->uc->base.connected)
            http1_client_set_timeouts(px->uc);
    }
}

/* Sends the request to the next server.  Returns 0; -EHOSTUNREACH when no
 * server is left; or a local resource error (see upstream_local_error()),
 * logged here, which ends the attempts. */
static int px_send(struct proxy_exchange *px)
{
    struct proxy_upstream *up = px->loc->upstream;
    struct upstream_worker *worker = px_worker(px);
    corral_loop *loop = exchange_loop(px->ex);
    struct upstream_preamble pp = {.len = 0}; /* proxy_protocol: see upstream_pool_take() */
    if (up->proxy_protocol != 0)
        pp.len = proxy_protocol_encode_exchange(px->ex, up->proxy_protocol, pp.data);
    for (;;) {
        int server =
            balance_pick_server(up, worker, &px->tried, px->start.hash, corral_loop_now(loop));
        if (server < 0)
            return -EHOSTUNREACH;
        upstream_tried_add(&px->tried, (size_t)server);
        if (!upstream_server_acquire(up, worker, (unsigned)server))
            continue; /* its max_conns filled meanwhile */
        px->tries++;
        struct http1_client *uc = NULL;
        uint64_t asked_ns = corral_monotonic_ns();
        int err =
            http1_client_get(up, worker, (unsigned)server, !px->body_beyond_replay, &pp, loop,
                             px->loc->conf.connect_timeout_ms, px->loc->conf.send_timeout_ms, &uc);
        if (err != 0)
            upstream_server_release(up, worker, (unsigned)server);
        if (err != 0 && upstream_local_error(err)) {
            note_local_error(px, (unsigned)server, err);
            return err;
        }
        px->attempt =
            exchange_upstream_ask(px->ex, up->servers[server].address, px->attempt == NULL);
        px->attempt_ns = asked_ns;
        px->attempt->asked_ns = asked_ns;
        if (err != 0) {
            px_attempt_end(px, 502);
            count_error(worker, PROXY_ERROR_CONNECT);
            upstream_server_failed(up, worker, (unsigned)server, corral_loop_now(loop));
            px->error = err;
            px_log_failure(px, (unsigned)server, PROXY_ERROR_CONNECT);
            if (!px_may_retry(px, PROXY_NEXT_ERROR, false))
                return -EHOSTUNREACH;
            continue;
        }
        http1_client_attach(uc, &px_client_ops, px, &px->rq);
        px->uc = uc;
        if (uc->base.connected) {
            px->attempt->connect_ms = exchange_upstream_ms_since(asked_ns);
            http1_client_set_timeouts(uc);
        }
        corral_conn_write(uc->base.conn, px->head, px->head_len);
        if (px->buffer != NULL) { /* the whole body, each time */
            px->pumped = 0;
            px->rq.sent = px->buffer->body.len == 0;
            px_pump(px);
            return 0;
        }
        if (px->replay_len > 0)
            corral_conn_write(uc->base.conn, px->replay, px->replay_len);
        /* The body is kept for a second attempt while nothing is known to
         * have reached the upstream: until a new connection is up, and
         * until a pooled one (possibly closed already) answers. */
        if (!uc->base.connected || uc->base.reused)
            px->replay_ok = px->replay_ok || !px->body_started;
        else
            px_drop_replay(px);
        return 0;
    }
}

/* The answer when no upstream could be asked: 503 when this host ran out
 * of something, else 502. */
static unsigned send_failure_status(int err)
{
    return upstream_local_error(err) ? 503 : 502;
}

/* This host failed the exchange (out of memory or descriptors): it is not
 * the upstream's fault, so nothing counts against the server. */
static void px_fail_local(struct proxy_exchange *px, int err)
{
    struct http1_client *uc = px->uc;
    if (uc != NULL) {
        note_local_error(px, uc->base.server, err);
        upstream_server_release(uc->base.upstream, uc->base.worker, uc->base.server);
        px_detach(px);
    }
    if (exchange_response_started(px->ex)) {
        exchange_abort(px->ex);
    } else {
        exchange_resume_body(px->ex); /* as in px_fail */
        exchange_respond_error(px->ex, 503);
    }
    px_finish(px);
}

/* The upstream failed this exchange, or answered with a status the retry
 * policy lists: try another server when the policy allows and it is safe,
 * else answer 502/504, or cut the client off if its response had begun. */
static void px_fail(struct proxy_exchange *px, enum proxy_error_kind kind)
{
    struct proxy_upstream *up = px->loc->upstream;
    struct upstream_worker *worker = px_worker(px);
    corral_loop *loop = exchange_loop(px->ex);
    struct http1_client *uc = px->uc;
    unsigned server = uc != NULL ? uc->base.server : 0;
    bool stale = uc != NULL && uc->base.reused && !uc->head_done && kind == PROXY_ERROR_RESET;
    if (uc != NULL) {
        upstream_server_release(up, worker, uc->base.server);
        px_detach(px);
    }
    unsigned status = px->next_status;
    px_attempt_end(px, kind == PROXY_ERROR_TIMEOUT ? 504 : 502);
    if (!stale && uc != NULL)
        px_log_failure(px, server, kind);
    px->next_status = 0;
    if (status != 0) {
        upstream_server_failed(up, worker, server, corral_loop_now(loop));
    } else if (!stale) {
        count_error(worker, kind);
        if (kind == PROXY_ERROR_CONNECT || kind == PROXY_ERROR_TIMEOUT || kind == PROXY_ERROR_TLS)
            upstream_server_failed(up, worker, server, corral_loop_now(loop));
    }
    if (exchange_response_started(px->ex)) {
        exchange_abort(px->ex);
        px_finish(px);
        return;
    }
    if (stale) { /* not a try: the pooled connection was dead already */
        upstream_tried_remove(&px->tried, server);
        px->tries--;
    }
    /* A connection that never opened, or a pooled one the upstream had
     * closed, received nothing: any request may go again, with its body if
     * that was kept.  Other failures go again as the policy says. */
    bool nothing_sent = stale || (kind == PROXY_ERROR_CONNECT && status == 0);
    bool body_resendable = !px->body_started || (nothing_sent && px->replay_ok);
    unsigned condition =
        status != 0 ? proxy_next_status_condition(status) : proxy_next_condition(kind);
    int err = -EHOSTUNREACH;
    if ((stale || px_may_retry(px, condition, !nothing_sent)) && body_resendable) {
        err = px_send(px);
        if (err == 0)
            return;
    }
    /* The rest of the request body, which nothing reads now if the
     * upstream's backpressure had paused it, is read and dropped. */
    exchange_resume_body(px->ex);
    exchange_respond_error(px->ex, kind == PROXY_ERROR_TIMEOUT ? 504 : send_failure_status(err));
    px_finish(px);
}

/* Asks the first server for `req`, as it came or, buffered, whole. */
static void px_start(struct proxy_exchange *px, const struct http_request *req)
{
    struct exchange *ex = px->ex;
    proxy_start_init(&px->start, ex, px->loc->add_headers, px->loc->upstream, req);
    px->chunked = req->has_body && !req->has_content_length; /* its length known at its end */
    /* A buffered body can always go again. */
    px->body_beyond_replay =
        px->buffer == NULL && (px->chunked || req->content_length > REPLAY_MAX);
    px->rq = (struct http1_client_request){
        .read_timeout_ms = px->loc->conf.read_timeout_ms,
        .send_timeout_ms = px->loc->conf.send_timeout_ms,
        .head_limit = px->loc->conf.response_head_limit > 0 ? px->loc->conf.response_head_limit
                                                            : PROXY_RESPONSE_HEAD_LIMIT,
        .head = req->head,
        /* Else the request goes on as an ordinary one, its Upgrade
         * dropped, and a 101 for it is refused as unasked for. */
        .upgrade = req->upgrade && proxy_head_upgrade_allowed(px->loc, req->upgrade_protocol),
        .sent = !req->has_body,
    };
    const struct proxy_head_request how = {
        .client = px->start.client,
        .tls = exchange_tls(ex),
        .chunked = px->chunked,
        .upgrade = px->rq.upgrade,
        .ex = ex,
    };
    if (proxy_head_build(px->loc, req, &how, &px->head, &px->head_len) != 0 ||
        (px->loc->redirects_read_request &&
         (px->req_block = exchange_request_copy(req, &px->req)) == NULL)) {
        exchange_set_data(ex, NULL);
        proxy_buffer_free(px->buffer);
        proxy_head_free(px->head);
        exchange_pool_put(px, sizeof(*px));
        exchange_respond_error(ex, 500);
        return;
    }
    exchange_set_data(ex, px);
    add_header_early(ex, req, &px->add_early);
    int err = px_send(px);
    if (err != 0) {
        if (!upstream_local_error(err))
            count_error(px_worker(px), PROXY_ERROR_CONNECT); /* every server is marked down */
        exchange_respond_error(ex, send_failure_status(err));
        px_finish(px);
    }
}

static void proxy_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    struct proxy_exchange *px = exchange_pool_take(sizeof(*px));
    if (px == NULL) {
        exchange_respond_error(ex, 500);
        return;
    }
    memset(px, 0, sizeof(*px));
    px->ex = ex;
    px->loc = data;
    if (!proxy_buffer_wanted(&px->loc->conf, px->loc->grpc, req)) {
        px_start(px, req);
        return;
    }
    /* The body first: proxy_on_body() keeps it, proxy_on_body_end()
     * starts. */
    px->buffer = proxy_buffer_new(&px->loc->conf, req);
    if (px->buffer == NULL) {
        exchange_pool_put(px, sizeof(*px));
        exchange_respond_error(ex, 500);
        return;
    }
    exchange_set_data(ex, px);
}

static void px_on_upload_spliced(struct exchange *ex, uint64_t moved, int error, void *arg)
{
    (void)ex;
    struct proxy_exchange *px = arg;
    px->upload_splicing = false;
    if (px->ex == NULL) { /* the exchange finished meanwhile */
        px_finish(px);
        return;
    }
    /* A failed side is closed: its on_close (the upstream's, or the
     * client's on_abort) ends the exchange. */
    if (error != 0 || px->uc == NULL)
        return;
    if (px->chunked) {
        px->upload_chunk_left -= moved; /* at most what was asked for */
        if (px->upload_chunk_left == 0)
            corral_conn_write(px->uc->base.conn, "\r\n", 2);
    }
    pause_client_if_backed_up(px, px->uc->base.conn);
}

/* The rest of the request body, or of its current chunk, moves inside the
 * kernel when that pays, as the response's does (px_on_splice()): a chunk
 * gets its size line first.  Called from on_body, once its bytes went. */
static void px_splice_upload(struct proxy_exchange *px)
{
    struct http1_client *uc = px->uc;
    if (!px->loc->conf.splice || px->loc->upstream->tls != NULL || uc == NULL ||
        !uc->base.connected || px->upload_chunk_left > 0 || corral_conn_backed_up(uc->base.conn))
        return;
    uint64_t len = exchange_request_spliceable(px->ex);
    if (len < PROXY_SPLICE_MIN || len > SIZE_MAX)
        return;
    if (px->chunked) {
        /* If the splice does not start, the chunk stays open and
         * proxy_on_body fills it. */
        char size_line[HTTP_CHUNK_SIZE_LINE];
        struct iovec iov[3];
        http_chunk_iov(size_line, NULL, (size_t)len, iov);
        corral_conn_write(uc->base.conn, iov[0].iov_base, iov[0].iov_len);
        px->upload_chunk_left = len;
    }
    px_drop_replay(px); /* these bytes could not be sent again */
    px->upload_splicing =
        exchange_request_splice(px->ex, uc->base.conn, len, px_on_upload_spliced, px) == 0;
}

static void proxy_on_body(struct exchange *ex, const char *data, size_t len)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px != NULL && px->buffer != NULL) {
        unsigned status =
            px->buffered ? 0 : proxy_buffer_add(px->buffer, px->loc->upstream->name, data, len);
        if (status != 0) {
            exchange_respond_error(ex, status);
            px_finish(px);
        }
        return;
    }
    if (px == NULL || px->uc == NULL || len == 0) /* an empty chunk would end the body */
        return;
    corral_conn *upstream = px->uc->base.conn;
    px->body_started = true;
    if (px->upload_chunk_left > 0) {
        /* The rest of a chunk whose splice did not start. */
        size_t n = len < px->upload_chunk_left ? len : (size_t)px->upload_chunk_left;
        px->upload_chunk_left -= n;
        struct iovec iov[2] = {{(void *)data, n}, {"\r\n", 2}};
        px_write_body(px, iov, px->upload_chunk_left == 0 ? 2 : 1);
        data += n;
        len -= n;
    }
    if (len > 0 && px->chunked) {
        char size_line[HTTP_CHUNK_SIZE_LINE];
        struct iovec iov[3];
        http_chunk_iov(size_line, data, len, iov);
        px_write_body(px, iov, 3);
    } else if (len > 0) {
        struct iovec iov = {(void *)data, len};
        px_write_body(px, &iov, 1);
    }
    pause_client_if_backed_up(px, upstream);
    px_splice_upload(px);
}

/* Only a chunked body can carry them; one of known length drops them. */
static void proxy_on_body_trailers(struct exchange *ex, const char *lines, size_t len)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px == NULL || px->buffer != NULL || px->uc == NULL || !px->chunked || px->trailers)
        return;
    px->trailers = true;
    struct iovec iov[3] = {{"0\r\n", 3}, {(void *)lines, len}, {"\r\n", 2}};
    px_write_body(px, iov, 3);
}

static void proxy_on_body_end(struct exchange *ex)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px == NULL)
        return;
    if (px->buffer != NULL) {
        if (!px->buffered) {
            px->buffered = true;
            px_start(px, proxy_buffer_end(px->buffer));
        }
        return;
    }
    if (px->uc != NULL && px->chunked && !px->trailers)
        px_write_body(px, &(struct iovec){H1_LAST_CHUNK, sizeof(H1_LAST_CHUNK) - 1}, 1);
    px->rq.sent = true;
    if (px->uc != NULL && px->uc->base.connected)
        http1_client_set_timeouts(px->uc);
}

static void proxy_on_drain(struct exchange *ex)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px != NULL && px->uc != NULL)
        corral_conn_resume_read(px->uc->base.conn);
}

static size_t proxy_on_tunnel_data(struct exchange *ex, const char *data, size_t len)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px == NULL || px->uc == NULL)
        return len;
    corral_conn_write(px->uc->base.conn, data, len);
    pause_client_if_backed_up(px, px->uc->base.conn);
    return len;
}

static void proxy_on_abort(struct exchange *ex)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px == NULL)
        return;
    if (px->uc != NULL) {
        upstream_server_release(px->uc->base.upstream, px->uc->base.worker, px->uc->base.server);
        px_detach(px); /* ends a splice too */
    }
    px_finish(px); /* a splice's callback still runs, with px, and frees it */
}

const struct http_handler proxy_handler = {
    .name = "proxy",
    .on_request = proxy_on_request,
    .on_body = proxy_on_body,
    .on_body_end = proxy_on_body_end,
    .on_body_trailers = proxy_on_body_trailers,
    .on_abort = proxy_on_abort,
    .on_drain = proxy_on_drain,
    .on_tunnel_data = proxy_on_tunnel_data,
};
