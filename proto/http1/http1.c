/*
 * http1.c: HTTP/1.1 server connections, the framer that turns requests into
 * exchanges (proto/http/exchange.h).  A request head is parsed only once
 * it is complete in the input, so llhttp sees it in one piece and every
 * header is a slice of one buffer; the body streams through.  One exchange
 * runs at a time: pipelined requests wait, unconsumed, until the response
 * before them is complete, which keeps responses in order for free.
 */
#include "proto/http1/http1_internal.h"
#include "proto/policy/add_header.h"
#include "proto/http/exchange_pool.h"
#include "proto/http/router.h"
#include "proto/tls/tls.h"
#include "proto/policy/access_log.h"
#include "proto/policy/access_log_filter.h"

#include <assert.h>
#include <errno.h>
#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ------------------------------------------------- counters, connection steps */

static struct http_stats *worker_stats(const struct h1_conn *h1)
{
    corral_worker *worker = corral_conn_worker(h1->c.sock);
    if (worker == NULL || h1->c.site->stats == NULL)
        return NULL;
    return &h1->c.site->stats[corral_worker_index(worker)];
}

void http1_count_response(struct h1_conn *h1, unsigned status)
{
    uint64_t ns = h1->head_started_ns ? corral_monotonic_ns() - h1->head_started_ns : 0;
    site_stats_count(worker_stats(h1), h1->vhost, status, ns);
}

static void count_timeout(struct h1_conn *h1, enum http_timeout_kind kind)
{
    struct http_stats *stats = worker_stats(h1);
    if (stats != NULL)
        counter_inc(&stats->timeouts[kind]);
}

/* The header timeout, then the keep-alive idle timeout: the connection's
 * deadline (0 ms: none). */
static void h1_set_deadline(struct h1_conn *h1, uint32_t ms)
{
    uint64_t now = corral_loop_now(corral_conn_loop(h1->c.sock));
    corral_conn_set_deadline(h1->c.sock, ms == 0 ? 0 : now + ms);
}

/* ------------------------------------------------------------ exchanges */

/* A request head has arrived: its exchange, or NULL when out of memory. */
struct h1_exchange *http1_exchange_begin(struct h1_conn *h1)
{
    assert(h1->ex == NULL);
    struct h1_exchange *ex = exchange_pool_take(sizeof(*ex));
    if (ex == NULL)
        return NULL;
    *ex = (struct h1_exchange){.base = {._ops = &h1_exchange_ops, .conn = &h1->c},
                               .pipelined = h1->behind};
    h1->ex = ex;
    return ex;
}

static void h1_exchange_free(void *arg)
{
    struct h1_exchange *ex = arg;
    free(ex->log_fields);
    free(ex->trailers);
    exchange_pool_put(ex, sizeof(*ex));
}

/* The handler that ended the response may still use the exchange until it
 * returns (exchange.h), and so may the framer's frames below it: the
 * memory goes at the end of the loop's iteration, when none of them is
 * left. */
void http1_exchange_retire(struct h1_conn *h1)
{
    struct h1_exchange *ex = h1->ex;
    if (ex == NULL)
        return;
    router_end(&ex->base);
    h1->ex = NULL;
    if (corral_loop_defer(corral_conn_loop(h1->c.sock), h1_exchange_free, ex) != 0) {
        ex->retired_next = h1->retired;
        h1->retired = ex;
    }
}

void http1_set_handler(struct exchange *base, const struct http_handler *handler)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    assert(!ex->response_started);
    ex->handler = handler;
    if (base->redirected) {
        ex->body_dropped = true;
        /* A body the failed handler had paused is read on, and dropped. */
        if (!ex->request_done)
            corral_conn_resume_read(h1_exchange_conn(ex)->c.sock);
        return;
    }
    if (handler->on_request == NULL)
        return; /* it holds the exchange only: the handler after decides */
    if (ex->upgrade && handler->on_tunnel_data == NULL)
        ex->keep_alive = false; /* what follows the head will not be HTTP */
    /* Never to an HTTP/1.0 client, which need not understand a 1xx and
     * sends its body regardless (RFC 9110 10.1.1, 15.2). */
    if (ex->expect_continue && handler->on_body != NULL) {
        ex->expect_continue = false;
        corral_conn_write(h1_exchange_conn(ex)->c.sock, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    }
}

void http1_routed(struct exchange *base, const struct http_request *req)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    struct h1_conn *h1 = h1_exchange_conn(ex);
    ex->log = access_log_filter_route(base, h1->c.site, base->vhost, base->loc);
    if (ex->log == NULL)
        return;
    ex->started_ns = h1->head_started_ns;
    char remote[64]; /* exchange_client_host() writes at most this */
    exchange_client_host(base, remote, sizeof(remote));
    ex->log_fields = access_log_keep(req, remote);
}

/* Parses nothing more and closes.  `linger` unless the client asked to
 * close and so sends nothing more. */
void http1_end(struct h1_conn *h1, bool linger)
{
    h1->closed = true;
    corral_conn_set_deadline(h1->c.sock, 0);
    if (linger)
        corral_conn_close(h1->c.sock);
    else
        corral_conn_close_no_linger(h1->c.sock);
}

void http1_close(struct h1_conn *h1)
{
    http1_end(h1, true);
}

/* ------------------------------------------------------------- handover */

/* A stopping site's idle connections go on to its successor, if any. */
static http1_handover_fn handover;

void http1_set_handover(http1_handover_fn fn)
{
    handover = fn;
}

/* Whether the stop may hand the connection over instead of closing it. */
static bool h1_may_hand_over(struct h1_conn *h1)
{
    return handover != NULL && !h1->closed && !h1->tunnel &&
           handover(h1->c.site, h1->c.sock, false) == 0;
}

static void h1_on_detached(corral_conn *conn, void *arg)
{
    struct h1_conn *h1 = arg;
    if (handover(h1->c.site, conn, true) != 0)
        corral_conn_close_detached(conn, 0); /* the successor went away meanwhile */
}

/* Starts moving an idle connection to the successor.  Returns false when it
 * cannot move: a TLS handshake under way (its state is not at a record
 * boundary of its own making), a tunnel, a close already asked for. */
static bool h1_hand_over(struct h1_conn *h1)
{
    if (h1->closed || h1->tunnel || h1->ex != NULL || h1->partial_head)
        return false;
    if (corral_conn_transport_state(h1->c.sock) != NULL && !tls_established(h1->c.sock))
        return false;
    return corral_conn_detach(h1->c.sock, h1_on_detached, h1) == 0;
}

void http1_conn_rebind(corral_conn *conn, const struct http_site *site, unsigned worker)
{
    struct h1_conn *h1 = h1_conn_of(corral_conn_data(conn));
    if (tls_established(conn))
        tls_conn_rebind(conn, site->tls, worker);
    h1->c.site = site;
    h1->vhost = &site->vhosts[0];
    h1->handing_over = false;
}

/* The stop closes the connection here: now if it is idle, or after the
 * exchange under way (or its first), or at the drain timeout. */
static void h1_stop_here(struct h1_conn *h1)
{
    h1->stopping = true;
    if (h1->ex != NULL || h1->partial_head || h1->c.requests == 0)
        return;
    /* Idle, unless a request is already in the socket (or read ahead of
     * its event) and not yet handled: closing now would drop it
     * unanswered.  Let it be read; it is answered with "Connection:
     * close". */
    if (corral_conn_input_pending(h1->c.sock))
        return;
    http1_close(h1);
}

/* Both halves of the exchange are done: get ready for the next request. */
void http1_finish_exchange(struct h1_conn *h1)
{
    http1_exchange_retire(h1);
    h1->c.requests++;
    if (h1->stopping && !h1->closed)
        http1_close(h1); /* the stop began while this exchange ran */
    if (h1->closed)
        return;
    /* Idle under this request's server; the next head is read under the
     * default server's limits, since whose it is is known only once read. */
    corral_conn_set_timeouts(h1->c.sock, 0, h1->vhost->limits.send_timeout_ms);
    h1_set_deadline(h1, h1->vhost->limits.keepalive_timeout_ms);
    h1->vhost = &h1->c.site->vhosts[0];
    /* Pipelined requests waited unread while the response was pending. */
    corral_conn_resume_read(h1->c.sock);
    if (h1->handing_over && !h1_hand_over(h1)) {
        h1->handing_over = false; /* the stop began while this exchange ran */
        h1_stop_here(h1);
    }
}

/* Answers a request that never became an exchange (a malformed head),
 * whose input starts at `head` (`len` bytes; NULL: gone, but a partial
 * head's line may have been kept): its log line names the client and the
 * request line as received. */
static struct h1_exchange *reject_begin(struct h1_conn *h1, const char *head, size_t len)
{
    struct h1_exchange *ex = http1_exchange_begin(h1);
    if (ex != NULL) {
        ex->request_done = true;
        ex->http10 = true;
        ex->started_ns = h1->head_started_ns;
        ex->log = access_log_filter_route(&ex->base, h1->c.site, h1->vhost, NULL);
        if (ex->log != NULL) {
            char remote[64]; /* exchange_client_host() writes at most this */
            exchange_client_host(&ex->base, remote, sizeof(remote));
            ex->log_fields = head != NULL || h1->head_line == NULL
                                 ? access_log_keep_line(head, len, remote)
                                 : h1->head_line;
            if (ex->log_fields == h1->head_line)
                h1->head_line = NULL; /* the exchange's now */
        }
    }
    return ex;
}

static void reject_end(struct h1_conn *h1)
{
    free(h1->head_line);
    h1->head_line = NULL;
    http1_close(h1);
}

void http1_reject(struct h1_conn *h1, unsigned status, const char *head, size_t len)
{
    struct h1_exchange *ex = reject_begin(h1, head, len);
    if (ex != NULL)
        add_header_respond_error(&ex->base, NULL, h1->vhost->add_headers, status);
    reject_end(h1);
}

size_t http1_reject_plaintext(struct http_conn *c, const char *data, size_t len)
{
    static const char body[] = "The plain HTTP request was sent to HTTPS port\n";
    struct h1_conn *h1 = h1_conn_of(c);
    struct h1_exchange *ex = reject_begin(h1, data, len);
    if (ex != NULL)
        exchange_respond(&ex->base, 400, "Content-Type: text/plain\r\n", body, sizeof(body) - 1);
    reject_end(h1);
    return len;
}

static size_t h1_on_data(struct http_conn *c, const char *data, size_t len)
{
    struct h1_conn *h1 = h1_conn_of(c);
    corral_conn *conn = c->sock;
    if (h1->tunnel) {
        /* A tunnel's exchange never ends: it lasts until the close. */
        assert(h1->ex != NULL && h1->ex->handler != NULL);
        return h1->ex->handler->on_tunnel_data != NULL
                   ? h1->ex->handler->on_tunnel_data(&h1->ex->base, data, len)
                   : len;
    }
    size_t used = 0;
    /* Bytes held back while a request was answered, or read with the end of
     * one that is answered now, were sent before its answer: pipelined. */
    bool behind = h1->held;
    while (used < len && !h1->closed) {
        if (h1->ex != NULL && h1->ex->request_done)
            break;
        size_t n;
        if (h1->ex != NULL) {
            n = http1_request_execute(h1, data + used, len - used);
        } else {
            /* Empty lines before a request line are ignored (RFC 9112 2.2),
             * here, so that the checks below see the head itself. */
            while (len - used >= 2 && data[used] == '\r' && data[used + 1] == '\n')
                used += 2;
            if (used == len)
                break;
            const struct http_limits *limits = &h1->vhost->limits;
            if (!h1->partial_head) { /* for the access log and the metrics */
                h1->head_started_ns = corral_monotonic_ns();
                h1->behind = behind;
            }
            bool lines_valid = false;
            size_t head_len = http_head_length_valid(data + used, len - used, &lines_valid);
            if (head_len == 0) {
                if (len - used > limits->max_header_size) {
                    http1_reject(h1, 431, data + used, len - used);
                    return len;
                }
                if (!h1->partial_head) {
                    h1->partial_head = true;
                    h1_set_deadline(h1, limits->header_timeout_ms);
                }
                http1_request_keep_head_line(h1, data + used, len - used);
                break;
            }
            free(h1->head_line); /* the head is whole: not needed */
            h1->head_line = NULL;
            if (head_len > limits->max_header_size) {
                http1_reject(h1, 431, data + used, len - used);
                return len;
            }
            if (!lines_valid || !http1_request_line_valid(data + used, head_len)) {
                http1_reject(h1, 400, data + used, len - used);
                return len;
            }
            if (http1_request_parser_new(h1) != 0) {
                corral_conn_abort(conn, -ENOMEM);
                return len;
            }
            n = http1_request_execute(h1, data + used, len - used);
        }
        if (n == SIZE_MAX)
            return len;
        if (n == 0 && h1->ex == NULL) {
            /* No progress on a fresh head: never spin on it. */
            http1_reject(h1, 400, data + used, len - used);
            return len;
        }
        used += n;
        if (h1->ex != NULL && h1->ex->request_done && h1->ex->response_done && !h1->closed) {
            http1_finish_exchange(h1);
            behind = true;
        }
    }
    h1->held = used < len && h1->ex != NULL;
    /* A complete request waits for its response before anything more is
     * read: a pipelined request stays in the socket, and a connection whose
     * request came with the handshake needs no epoll registration at all.
     * A client that closes while the response is still to come (from an
     * upstream, say) is seen by h1_on_hangup(), which needs the socket in
     * the epoll set: a response given at once needs no registration. */
    if (h1->ex != NULL && h1->ex->request_done && !h1->closed) {
        corral_conn_pause_read(conn);
        if (!h1->ex->response_done && corral_conn_watch(conn) != 0)
            return len;
    }
    return used;
}

/* ------------------------------------------------------- connection events */

static void h1_on_deadline(struct http_conn *c)
{
    struct h1_conn *h1 = h1_conn_of(c);
    if (h1->partial_head && h1->ex == NULL) {
        count_timeout(h1, HTTP_TIMEOUT_HEADER);
        http1_reject(h1, 408, NULL, 0); /* slow or stalled request head */
    } else
        http1_close(h1); /* idle, or silent since it connected */
}

struct http_conn *http1_conn_new(corral_conn *conn, const struct http_site *site)
{
    struct h1_conn *h1 = calloc(1, sizeof(*h1));
    if (h1 == NULL)
        return NULL;
    h1->c = (struct http_conn){.sock = conn, .site = site, .framer = &http1_framer};
    h1->vhost = &site->vhosts[0];
    corral_conn_set_data(conn, &h1->c);
    corral_conn_set_timeouts(conn, 0, h1->vhost->limits.send_timeout_ms);
    h1_set_deadline(h1, h1->vhost->limits.header_timeout_ms);
    return &h1->c;
}

void http1_conn_free(struct http_conn *c)
{
    struct h1_conn *h1 = h1_conn_of(c);
    assert(h1->ex == NULL && h1->retired == NULL && h1->parser == NULL && h1->head_line == NULL);
    free(h1);
}

/* The client shut its sending side.  A complete request still gets its
 * response: reading stops once a request is complete, so its EOF is seen
 * only after that response. */
static void h1_on_eof(struct http_conn *c)
{
    http1_end(h1_conn_of(c), false);
}

static void h1_on_drain(struct http_conn *c)
{
    struct h1_conn *h1 = h1_conn_of(c);
    if (h1->ex != NULL)
        exchange_drained(&h1->ex->base, h1->ex->handler);
}

static void h1_on_stop(struct http_conn *c)
{
    struct h1_conn *h1 = h1_conn_of(c);
    if (h1_may_hand_over(h1)) {
        /* Served by the successor from the next request on; one under way
         * finishes here first, and is answered as keeping the connection. */
        h1->handing_over = true;
        if (h1->ex == NULL && !h1->partial_head && h1_hand_over(h1))
            return;
        if (h1->ex != NULL || h1->partial_head || h1->c.requests == 0)
            return; /* moves after this (or its first) exchange */
        h1->handing_over = false;
    }
    h1_stop_here(h1);
}

static void h1_on_close(struct http_conn *c, int error)
{
    struct h1_conn *h1 = h1_conn_of(c);
    /* The connection's own timeouts: reading a body, or sending. */
    if (error == -ETIMEDOUT)
        count_timeout(h1, h1->ex != NULL && !h1->ex->request_done ? HTTP_TIMEOUT_BODY
                                                                  : HTTP_TIMEOUT_SEND);
    if (h1->ex != NULL && !h1->ex->response_done) {
        if (h1->ex->handler != NULL && h1->ex->handler->on_abort != NULL)
            h1->ex->handler->on_abort(&h1->ex->base);
        if (h1->ex->log != NULL)
            http1_request_log(h1, h1->ex, h1->ex->response_started ? h1->ex->status : 499);
    }
    http1_exchange_retire(h1);
    while (h1->retired != NULL) { /* no handler is running at on_close */
        struct h1_exchange *next = h1->retired->retired_next;
        h1_exchange_free(h1->retired);
        h1->retired = next;
    }
    free(h1->head_line);
    http1_request_parser_free(h1);
    free(h1);
}

/* The client closed or reset while its request waited for the response
 * (reading is paused then, so that a pipelined request stays in the
 * socket): as nginx's broken-connection check does, the exchange ends
 * now, and its handler's on_abort lets go of what it waits on, an
 * upstream connection say, rather than holding it until the response
 * would have been written.  Not while input is still queued (a pipelined
 * request, a TLS close_notify): that end is read in its turn. */
static void h1_on_hangup(struct http_conn *c)
{
    struct h1_conn *h1 = h1_conn_of(c);
    if (h1->ex == NULL || h1->ex->response_done || h1->tunnel || h1->closed ||
        corral_conn_input_pending(c->sock))
        return;
    corral_conn_abort(c->sock, -ECONNRESET);
}

const struct http_framer http1_framer = {
    .name = "HTTP/1.1",
    .on_data = h1_on_data,
    .on_eof = h1_on_eof,
    .on_deadline = h1_on_deadline,
    .on_drain = h1_on_drain,
    .on_stop = h1_on_stop,
    .on_close = h1_on_close,
    .on_hangup = h1_on_hangup,
};
