/*
 * proxy.c: `proxy_pass`, the proxy's semantics.  A request is forwarded on
 * an upstream connection (proto/http1_client.c) taken from the worker's idle
 * pool or opened for it (proto/upstream.c), whatever protocol the client
 * speaks: it sees only the exchange (proto/exchange.h).  Its body streams
 * through as it arrives and the response streams back, each side pausing
 * the other when its output backs up.  Nothing ambiguous is forwarded: the client side has
 * already refused every malformed request, and the request head is rebuilt
 * here from parsed fields, never copied raw.
 */
#include "proto/proxy.h"

#include "proto/balance.h"
#include "proto/counter.h"
#include "proto/http1_client.h"
#include "proto/add_header.h"
#include "proto/proxy_next.h"
#include "proto/regex.h"
#include "proto/rewrite.h"
#include "proto/vars.h"

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
    char client[80]; /* the client's address, for X-Forwarded-For and hash */
    uint64_t tried;  /* servers tried, as bits */
    uint32_t hash;   /* of the balancing key (hash, ip_hash) */
    unsigned tries;  /* servers asked, for proxy_next_upstream_tries */
    /* A response status proxy_next_upstream lists, while px_fail() sends
     * the request on; 0 otherwise. */
    unsigned next_status;
    int error; /* the -errno of the upstream connection's close, for the log */
    bool idempotent;
    bool chunked;      /* the request body goes out chunked */
    bool trailers;     /* its last chunk went with the client's trailers */
    bool body_started; /* request body bytes went to the upstream: no retry */
    /* The response body is being spliced: px_on_spliced() runs once, and
     * frees the exchange if the client went away meanwhile (ex NULL). */
    bool splicing;
    /* What the response may be; rq.sent: the whole request went to the
     * upstream; rq.upgrade: the client asked to switch protocols
     * (WebSocket). */
    struct http1_client_request rq;
    /* Chunked, or longer than REPLAY_MAX: it could not be sent again, so it
     * goes on a new connection, which the upstream cannot have closed
     * already as it may a pooled one. */
    bool body_beyond_replay;
    uint64_t started_ms;       /* loop clock, for $upstream_response_time */
    uint64_t attempt_ns;       /* when the current server got the request */
    unsigned status;           /* the current server's response status */
    struct vars_buf add_early; /* exchange_add_headers_early()'s values */
    /* The body bytes sent on a pooled connection, kept (up to REPLAY_MAX)
     * until the response starts: if the upstream had closed that connection
     * meanwhile, the request is sent again, body and all. */
    char *replay;
    size_t replay_len;
    bool replay_ok;
};

static void px_finish(struct proxy_exchange *px);
static void px_drop_replay(struct proxy_exchange *px);
static void note_upstream_time(struct proxy_exchange *px);
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

/* RFC 9110 7.6.1: connection-specific fields never cross a proxy, nor do
 * the fields a Connection header lists.  The framing fields are dropped
 * always (the proxy frames each message itself); fields meant for every
 * recipient are never dropped for being listed, so that
 * "Connection: close, Host" cannot strip the Host the upstream routes on. */
static bool is_hop_by_hop(struct http_str name, const struct http_header *headers, size_t count)
{
    static const char *const hop[] = {
        "connection", "keep-alive", "proxy-connection",  "te",
        "trailer",    "upgrade",    "transfer-encoding", "content-length"};
    static const char *const end_to_end[] = {"host", "cache-control", "content-type",
                                             "content-encoding", "content-range"};
    for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
        if (http_str_equal_nocase(name, hop[i]))
            return true;
    for (size_t i = 0; i < sizeof(end_to_end) / sizeof(end_to_end[0]); i++)
        if (http_str_equal_nocase(name, end_to_end[i]))
            return false;
    for (size_t i = 0; i < count; i++)
        if (http_str_equal_nocase(headers[i].name, "connection") &&
            http_header_lists(headers[i].value, name))
            return true;
    return false;
}

static bool hidden(const struct proxy_location *loc, struct http_str name)
{
    static const char *const replaced[] = {"date", "server"}; /* the proxy sends its own */
    for (size_t i = 0; i < sizeof(replaced) / sizeof(replaced[0]); i++)
        if (http_str_equal_nocase(name, replaced[i]))
            return true;
    for (size_t i = 0; i < loc->hide_header_count; i++)
        if (name.len == loc->hide_headers[i].len &&
            strncasecmp(name.data, loc->hide_headers[i].data, name.len) == 0)
            return true;
    return false;
}

/* The retry policy's view of the exchange; `sent`: its bytes may have
 * reached the server. */
static bool px_may_retry(const struct proxy_exchange *px, unsigned condition, bool sent)
{
    const struct proxy_attempt attempt = {
        .sent = sent,
        .idempotent = px->idempotent,
        .tries = px->tries,
        .elapsed_ms = corral_loop_now(exchange_loop(px->ex)) - px->started_ms,
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
           upstream_any_usable(px->loc->upstream, px_worker(px), px->tried,
                               corral_loop_now(exchange_loop(px->ex)));
}

static void px_log_failure(struct proxy_exchange *px, unsigned server, enum proxy_error_kind kind)
{
    proxy_log_failure(px->loc->upstream, server, corral_loop_now(exchange_loop(px->ex)), kind,
                      px->error, px->next_status, px->client, px->head, px->head_len);
    px->error = 0;
}

/* ------------------------------------------- the upstream connection's reports */

static void px_on_open(void *owner)
{
    px_drop_replay(owner); /* what was queued goes out now */
}

/* The response head for the client: the upstream's headers less the
 * hop-by-hop and hidden ones (a 101 keeps its Upgrade and Connection). */
static int px_on_head(void *owner, const struct http1_client_head *head)
{
    struct proxy_exchange *px = owner;
    if (px_retry_status(px, head->status)) {
        px->next_status = head->status;
        return -EAGAIN; /* px_fail() goes on to the next server */
    }
    px_drop_replay(px);
    px->status = head->status;
    struct h1_head_buf headers = {0};
    for (size_t i = 0; i < head->header_count; i++) {
        const struct http_header *h = &head->headers[i];
        bool tunnel_header = head->tunnel && (http_str_equal_nocase(h->name, "upgrade") ||
                                              http_str_equal_nocase(h->name, "connection"));
        if (tunnel_header || (!is_hop_by_hop(h->name, head->headers, head->header_count) &&
                              !hidden(px->loc, h->name)))
            h1_head_add_header(&headers, h->name, h->value);
    }
    if (headers.failed) {
        free(headers.data);
        return -ENOMEM;
    }
    px->ex->upstream_status = head->status; /* $upstream_status */
    exchange_begin_coded(px->ex, head->status, headers.data != NULL ? headers.data : "",
                         headers.len, head->content_length, head->codings);
    free(headers.data);
    return 0;
}

static void px_on_body(void *owner, const char *data, size_t len)
{
    struct proxy_exchange *px = owner;
    exchange_write(px->ex, data, len);
    pause_upstream_if_backed_up(px);
}

static void px_on_end(void *owner)
{
    struct proxy_exchange *px = owner;
    note_upstream_time(px);
    exchange_end(px->ex);
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

static void px_on_upstream_drain(void *owner)
{
    struct proxy_exchange *px = owner;
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
};

/* ----------------------------------------------------------------- exchanges */

static struct upstream_worker *px_worker(const struct proxy_exchange *px)
{
    return upstream_worker_of(px->loc->upstream, exchange_worker(px->ex));
}

static void note_upstream_time(struct proxy_exchange *px)
{
    uint64_t now = corral_loop_now(exchange_loop(px->ex));
    exchange_note_upstream_time(px->ex, (now - px->started_ms) * 1000000u);
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
        exchange_set_data(px->ex, NULL);
        px->ex->add_early = NULL;
    }
    vars_buf_free(&px->add_early);
    free(px->replay);
    free(px->head);
    free(px);
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

/* Sends the request to the next server.  Returns 0; -EHOSTUNREACH when no
 * server is left; or a local resource error (see upstream_local_error()),
 * logged here, which ends the attempts. */
static int px_send(struct proxy_exchange *px)
{
    struct proxy_upstream *up = px->loc->upstream;
    struct upstream_worker *worker = px_worker(px);
    corral_loop *loop = exchange_loop(px->ex);
    for (;;) {
        int server = upstream_pick_server(up, worker, px->tried, px->hash, corral_loop_now(loop));
        if (server < 0)
            return -EHOSTUNREACH;
        px->tried |= 1ull << server;
        if (!upstream_server_acquire(up, worker, (unsigned)server))
            continue; /* its max_conns filled meanwhile */
        px->tries++;
        struct http1_client *uc = NULL;
        int err =
            http1_client_get(up, worker, (unsigned)server, !px->body_beyond_replay, loop,
                             px->loc->conf.connect_timeout_ms, px->loc->conf.send_timeout_ms, &uc);
        if (err != 0)
            upstream_server_release(up, worker, (unsigned)server);
        if (err != 0 && upstream_local_error(err)) {
            note_local_error(px, (unsigned)server, err);
            return err;
        }
        if (err != 0) {
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
        px->attempt_ns = corral_monotonic_ns();
        px->ex->upstream_addr = up->servers[server].address; /* $upstream_addr */
        if (uc->base.connected)
            http1_client_set_timeouts(uc);
        corral_conn_write(uc->base.conn, px->head, px->head_len);
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
        note_upstream_time(px);
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
        px->tried &= ~(1ull << server);
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
    note_upstream_time(px);
    exchange_respond_error(px->ex, kind == PROXY_ERROR_TIMEOUT ? 504 : send_failure_status(err));
    px_finish(px);
}

static bool method_idempotent(struct http_str method)
{
    static const char *const safe[] = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"};
    for (size_t i = 0; i < sizeof(safe) / sizeof(safe[0]); i++)
        if (method.len == strlen(safe[i]) && memcmp(method.data, safe[i], method.len) == 0)
            return true;
    return false;
}

static const struct http_header *set_header(const struct proxy_location *loc, struct http_str name)
{
    for (size_t i = 0; i < loc->set_header_count; i++)
        if (http_str_equal_nocase(name, loc->set_headers[i].name.data))
            return &loc->set_headers[i];
    return NULL;
}

/* The request head for the upstream, rebuilt from parsed fields. */
static int build_request_head(struct proxy_exchange *px, const struct http_request *req)
{
    const struct proxy_location *loc = px->loc;
    struct h1_head_buf b = {0};
    char target_small[512];
    struct vars_buf target;
    vars_buf_init(&target, target_small, sizeof(target_small));
    http_replace_prefix(req, loc->strip, loc->uri, &target);
    b.failed |= target.failed;
    h1_head_request_line(&b, req->method, (struct http_str){target.data, target.len});
    vars_buf_free(&target);
    bool has_host = false;
    for (size_t i = 0; i < req->header_count; i++) {
        const struct http_header *h = &req->headers[i];
        if (is_hop_by_hop(h->name, req->headers, req->header_count) ||
            http_str_equal_nocase(h->name, "expect") ||
            http_str_equal_nocase(h->name, "x-forwarded-proto") ||
            http_str_equal_nocase(h->name, "x-forwarded-for") ||
            http_str_equal_nocase(h->name, "via") || set_header(loc, h->name) != NULL)
            continue;
        if (http_str_equal_nocase(h->name, "host")) {
            has_host = true;
            if (req->authority.len > 0) { /* the target's authority wins */
                h1_head_add_header(&b, h->name, req->authority);
                continue;
            }
        }
        h1_head_add_header(&b, h->name, h->value);
    }
    struct vars_ctx ctx = {.ex = px->ex, .req = req, .escape = VARS_HEADER};
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    if (loc->captures != NULL)
        vars_set_captures(&ctx, loc->captures, ovector);
    for (size_t i = 0; i < loc->set_header_count; i++) {
        struct http_str v = loc->set_headers[i].value;
        char small[256];
        struct vars_buf value;
        vars_buf_init(&value, small, sizeof(small));
        if (loc->set_values != NULL && loc->set_values[i] != NULL) {
            vars_eval(loc->set_values[i], &ctx, &value);
            v = (struct http_str){value.data, value.len};
        }
        b.failed |= value.failed;
        if (v.len > 0) /* as in nginx: an empty value sends no header */
            h1_head_add_header(&b, loc->set_headers[i].name, v);
        vars_buf_free(&value);
    }
    if (!has_host && set_header(loc, (struct http_str){"host", 4}) == NULL) {
        /* An HTTP/1.0 client may send none; HTTP/1.1 needs one: the name
         * proxy_pass gives (the upstream's name, or its address). */
        h1_head_add_str(&b, "Host: ");
        if (req->authority.len > 0)
            h1_head_add(&b, req->authority.data, req->authority.len);
        else
            h1_head_add_str(&b, loc->upstream->name);
        h1_head_add(&b, "\r\n", 2);
    }
    /* proxy_set_header wins over the proxy's own forwarding headers; else
     * the client's hops (every such header, in order) are kept and this
     * one appended. */
    static const struct {
        const char *lower, *name, *own;
    } chains[] = {{"x-forwarded-for", "X-Forwarded-For", NULL}, {"via", "Via", "1.1 corral"}};
    for (size_t c = 0; c < sizeof(chains) / sizeof(chains[0]); c++) {
        struct http_str lower = {chains[c].lower, strlen(chains[c].lower)};
        if (set_header(loc, lower) != NULL)
            continue;
        h1_head_add_str(&b, chains[c].name);
        h1_head_add(&b, ": ", 2);
        for (size_t i = 0; i < req->header_count; i++) {
            if (!http_str_equal_nocase(req->headers[i].name, chains[c].lower))
                continue;
            struct http_str previous = http_trim(req->headers[i].value);
            h1_head_add(&b, previous.data, previous.len);
            h1_head_add(&b, ", ", 2);
        }
        h1_head_add_str(&b, chains[c].own != NULL ? chains[c].own : px->client);
        h1_head_add(&b, "\r\n", 2);
    }
    if (set_header(loc, (struct http_str){"x-forwarded-proto", 17}) == NULL)
        h1_head_add_str(&b, exchange_tls(px->ex) ? "X-Forwarded-Proto: https\r\n"
                                                 : "X-Forwarded-Proto: http\r\n");
    h1_head_request_end(&b, px->rq.upgrade ? &req->upgrade_protocol : NULL, px->chunked,
                        req->has_body || req->has_content_length, req->content_length);
    if (b.failed) {
        free(b.data);
        return -ENOMEM;
    }
    px->head = b.data;
    px->head_len = b.len;
    return 0;
}

static void proxy_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    struct proxy_exchange *px = calloc(1, sizeof(*px));
    if (px == NULL) {
        exchange_respond_error(ex, 500);
        return;
    }
    px->ex = ex;
    px->loc = data;
    exchange_set_add_headers(ex, px->loc->add_headers);
    px->idempotent = method_idempotent(req->method);
    px->chunked = req->has_body && !req->has_content_length; /* its length known at its end */
    px->body_beyond_replay = px->chunked || req->content_length > REPLAY_MAX;
    px->rq = (struct http1_client_request){
        .read_timeout_ms = px->loc->conf.read_timeout_ms,
        .send_timeout_ms = px->loc->conf.send_timeout_ms,
        .head_limit = px->loc->conf.response_head_limit > 0 ? px->loc->conf.response_head_limit
                                                            : PROXY_RESPONSE_HEAD_LIMIT,
        .head = req->head,
        .upgrade = req->upgrade,
        .sent = !req->has_body,
    };
    px->started_ms = corral_loop_now(exchange_loop(ex));
    exchange_client_host(ex, px->client, sizeof(px->client));
    enum proxy_balance balance = px->loc->upstream->balance;
    if (balance == PROXY_BALANCE_HASH || balance == PROXY_BALANCE_IP_HASH)
        px->hash = balance_key_hash(px->loc->upstream->key, req, px->client);
    if (build_request_head(px, req) != 0) {
        free(px);
        exchange_respond_error(ex, 500);
        return;
    }
    exchange_set_data(ex, px);
    exchange_add_headers_early(ex, req, &px->add_early);
    int err = px_send(px);
    if (err != 0) {
        if (!upstream_local_error(err))
            count_error(px_worker(px), PROXY_ERROR_CONNECT); /* every server is marked down */
        exchange_respond_error(ex, send_failure_status(err));
        px_finish(px);
    }
}

static void proxy_on_body(struct exchange *ex, const char *data, size_t len)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px == NULL || px->uc == NULL || len == 0) /* an empty chunk would end the body */
        return;
    corral_conn *upstream = px->uc->base.conn;
    px->body_started = true;
    if (px->chunked) {
        char size_line[HTTP_CHUNK_SIZE_LINE];
        struct iovec iov[3];
        http_chunk_iov(size_line, data, len, iov);
        px_write_body(px, iov, 3);
    } else {
        struct iovec iov = {(void *)data, len};
        px_write_body(px, &iov, 1);
    }
    pause_client_if_backed_up(px, upstream);
}

/* Only a chunked body can carry them; one of known length drops them. */
static void proxy_on_body_trailers(struct exchange *ex, const char *lines, size_t len)
{
    struct proxy_exchange *px = exchange_data(ex);
    if (px == NULL || px->uc == NULL || !px->chunked || px->trailers)
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
    if (px->splicing) {
        /* Its callback still runs, with px: it frees px then.  The
         * exchange is the framer's again. */
        exchange_set_data(ex, NULL);
        px->ex = NULL;
        return;
    }
    px_finish(px);
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
