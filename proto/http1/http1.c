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
#include "proto/http2/http2.h"
#include "proto/http/router.h"
#include "proto/tls/tls.h"
#include "proto/policy/access_log.h"
#include "proto/http/proxy_protocol.h"

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
    corral_worker *worker = corral_conn_worker(h1->conn);
    if (worker == NULL || h1->site->stats == NULL)
        return NULL;
    return &h1->site->stats[corral_worker_index(worker)];
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
    uint64_t now = corral_loop_now(corral_conn_loop(h1->conn));
    corral_conn_set_deadline(h1->conn, ms == 0 ? 0 : now + ms);
}

/* ------------------------------------------------------------ exchanges */

/* A request head has arrived: its exchange, or NULL when out of memory. */
struct h1_exchange *http1_exchange_begin(struct h1_conn *h1)
{
    assert(h1->ex == NULL);
    struct h1_exchange *ex = malloc(sizeof(*ex));
    if (ex == NULL)
        return NULL;
    *ex = (struct h1_exchange){
        .base = {._ops = &h1_exchange_ops}, .h1 = h1, .upstream_ns = -1, .pipelined = h1->behind};
    h1->ex = ex;
    return ex;
}

static void h1_exchange_free(void *arg)
{
    struct h1_exchange *ex = arg;
    free(ex->log_fields);
    free(ex);
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
    if (corral_loop_defer(corral_conn_loop(h1->conn), h1_exchange_free, ex) != 0) {
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
            corral_conn_resume_read(ex->h1->conn);
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
        corral_conn_write(ex->h1->conn, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    }
}

void http1_routed(struct exchange *base, const struct http_request *req)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    struct h1_conn *h1 = ex->h1;
    ex->log = access_log_route(h1->site, base->vhost, base->loc);
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
    corral_conn_set_deadline(h1->conn, 0);
    if (linger)
        corral_conn_close(h1->conn);
    else
        corral_conn_close_no_linger(h1->conn);
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
           handover(h1->site, h1->conn, false) == 0;
}

static void h1_on_detached(corral_conn *conn, void *arg)
{
    struct h1_conn *h1 = arg;
    if (handover(h1->site, conn, true) != 0)
        corral_conn_close_detached(conn, 0); /* the successor went away meanwhile */
}

/* Starts moving an idle connection to the successor.  Returns false when it
 * cannot move: a TLS handshake under way (its state is not at a record
 * boundary of its own making), a tunnel, a close already asked for. */
static bool h1_hand_over(struct h1_conn *h1)
{
    if (h1->closed || h1->tunnel || h1->h2 != NULL || h1->ex != NULL || h1->partial_head)
        return false;
    if (corral_conn_transport_state(h1->conn) != NULL && !tls_established(h1->conn))
        return false;
    return corral_conn_detach(h1->conn, h1_on_detached, h1) == 0;
}

void http1_conn_rebind(corral_conn *conn, const struct http_site *site, unsigned worker)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (tls_established(conn))
        tls_conn_rebind(conn, site->tls, worker);
    h1->site = site;
    h1->vhost = &site->vhosts[0];
    h1->handing_over = false;
}

/* Both halves of the exchange are done: get ready for the next request. */
void http1_finish_exchange(struct h1_conn *h1)
{
    http1_exchange_retire(h1);
    h1->requests++;
    if (h1->stopping && !h1->closed)
        http1_close(h1); /* the stop began while this exchange ran */
    if (h1->closed)
        return;
    /* Idle under this request's server; the next head is read under the
     * default server's limits, since whose it is is known only once read. */
    corral_conn_set_timeouts(h1->conn, 0, h1->vhost->limits.send_timeout_ms);
    h1_set_deadline(h1, h1->vhost->limits.keepalive_timeout_ms);
    h1->vhost = &h1->site->vhosts[0];
    /* Pipelined requests waited unread while the response was pending. */
    corral_conn_resume_read(h1->conn);
    if (h1->handing_over && !h1_hand_over(h1))
        http1_close(h1); /* the stop began while this exchange ran */
}

/* Answers a request that never became an exchange (a malformed head),
 * whose input starts at `head` (`len` bytes; NULL: gone, but a partial
 * head's line may have been kept): its log line names the client and the
 * request line as received. */
void http1_reject(struct h1_conn *h1, unsigned status, const char *head, size_t len)
{
    struct h1_exchange *ex = http1_exchange_begin(h1);
    if (ex != NULL) {
        ex->request_done = true;
        ex->http10 = true;
        ex->started_ns = h1->head_started_ns;
        ex->log = access_log_route(h1->site, h1->vhost, NULL);
        if (ex->log != NULL) {
            char remote[64]; /* exchange_client_host() writes at most this */
            exchange_client_host(&ex->base, remote, sizeof(remote));
            ex->log_fields = head != NULL || h1->head_line == NULL
                                 ? access_log_keep_line(head, len, remote)
                                 : h1->head_line;
            if (ex->log_fields == h1->head_line)
                h1->head_line = NULL; /* the exchange's now */
        }
        add_header_respond_error(&ex->base, NULL, h1->vhost->add_headers, status);
    }
    free(h1->head_line);
    h1->head_line = NULL;
    http1_close(h1);
}

/* HTTP/2 with prior knowledge (or after ALPN h2) starts with its preface
 * (RFC 9113 3.4), which no HTTP/1.1 request line matches: on a site that
 * speaks both, the first bytes of a connection decide.  Returns SIZE_MAX
 * for HTTP/1.1, 0 to wait for the rest of the preface, else what HTTP/2
 * consumed. */
static size_t h1_detect_http2(struct h1_conn *h1, const char *data, size_t len)
{
    size_t n = len < HTTP2_PREFACE_LEN ? len : HTTP2_PREFACE_LEN;
    if (memcmp(data, HTTP2_PREFACE, n) != 0)
        return SIZE_MAX;
    if (n < HTTP2_PREFACE_LEN)
        return 0;
    h1->h2 = http2_conn_new(h1->conn, h1->site);
    if (h1->h2 != NULL && h1->proxy_address)
        http2_conn_note_proxy_address(h1->h2);
    if (h1->h2 == NULL) {
        corral_conn_abort(h1->conn, -ENOMEM);
        return len;
    }
    return http2_on_data(h1->h2, data, len);
}

/* A connection's PROXY header was refused: logged and counted. */
static void h1_proxy_header_failed(struct h1_conn *h1, enum proxy_protocol_failure why)
{
    struct http_stats *stats = worker_stats(h1);
    if (stats != NULL)
        counter_inc(&stats->proxy_protocol[why]);
    char peer[64]; /* exchange_format_client() writes at most this */
    exchange_format_client(h1->conn, peer, sizeof(peer));
    corral_log(CORRAL_LOG_INFO, "PROXY header from %s: %s, connection closed", peer,
               proxy_protocol_failure_names[why]);
}

/* The PROXY header, which proxy_protocol_transport delivers alone: its
 * source becomes the connection's peer, then TLS or HTTP begins on the
 * bytes still in the socket. */
static size_t h1_take_proxy_header(struct h1_conn *h1, const char *data, size_t len)
{
    struct proxy_protocol_header header;
    ssize_t used = proxy_protocol_parse(data, len, &header);
    assert(used != 0); /* the transport delivers complete headers only */
    h1->proxy_header = false;
    if (used <= 0) {
        h1_proxy_header_failed(h1, PROXY_PROTOCOL_MALFORMED);
        corral_conn_abort(h1->conn, (int)used);
        return len;
    }
    if (header.has_address) {
        corral_conn_set_peer(h1->conn, &header.source.sa, header.address_len);
        h1->proxy_address = true;
    }
    if (h1->site->tls == NULL)
        corral_conn_set_transport(h1->conn, &corral_plain_transport, NULL);
    else if (tls_server_accept(h1->site->tls, h1->conn) != 0)
        corral_conn_abort(h1->conn, -ENOMEM);
    return (size_t)used;
}

static size_t h1_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->proxy_header)
        return h1_take_proxy_header(h1, data, len);
    if (h1->h2 != NULL)
        return http2_on_data(h1->h2, data, len);
    if (h1->site->http2 != NULL && h1->requests == 0 && h1->ex == NULL && !h1->partial_head &&
        !h1->closed) {
        size_t used = h1_detect_http2(h1, data, len);
        if (used != SIZE_MAX)
            return used;
    }
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
            size_t head_len = http_head_length(data + used, len - used);
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
            if (!http_head_lines_valid(data + used, head_len) ||
                !http1_request_line_valid(data + used, head_len)) {
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
     * A client that closes meanwhile is seen once the response is written. */
    if (h1->ex != NULL && h1->ex->request_done && !h1->closed)
        corral_conn_pause_read(conn);
    return used;
}

/* ------------------------------------------------------- connection events */

static void h1_on_deadline(corral_conn *conn)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->h2 != NULL) {
        http2_on_deadline(h1->h2);
        return;
    }
    if (h1->proxy_header) {
        h1_proxy_header_failed(h1, PROXY_PROTOCOL_TIMEOUT);
        http1_end(h1, false);
    } else if (h1->partial_head && h1->ex == NULL) {
        count_timeout(h1, HTTP_TIMEOUT_HEADER);
        http1_reject(h1, 408, NULL, 0); /* slow or stalled request head */
    } else
        http1_close(h1); /* idle, or silent since it connected */
}

static void h1_on_open(corral_conn *conn)
{
    const struct http_site *site = corral_conn_listener_data(conn);
    struct h1_conn *h1 = calloc(1, sizeof(*h1));
    if (h1 == NULL) {
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    h1->conn = conn;
    h1->site = site;
    h1->vhost = &site->vhosts[0];
    corral_conn_set_data(conn, h1);
    /* A PROXY header comes first, before a TLS ClientHello too. */
    h1->proxy_header = site->proxy_protocol;
    if (h1->proxy_header)
        corral_conn_set_transport(conn, &proxy_protocol_transport, NULL);
    else if (site->tls != NULL && tls_server_accept(site->tls, conn) != 0) {
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    corral_conn_set_timeouts(conn, 0, h1->vhost->limits.send_timeout_ms);
    h1_set_deadline(h1, h1->vhost->limits.header_timeout_ms);
}

/* The client shut its sending side.  A complete request still gets its
 * response: reading stops once a request is complete, so its EOF is seen
 * only after that response. */
static void h1_on_eof(corral_conn *conn)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->h2 != NULL)
        http2_on_eof(h1->h2);
    else
        http1_end(h1, false);
}

static void h1_on_drain(corral_conn *conn)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->h2 != NULL) {
        http2_on_drain(h1->h2);
        return;
    }
    if (h1->ex != NULL && h1->ex->handler != NULL && h1->ex->handler->on_drain != NULL)
        h1->ex->handler->on_drain(&h1->ex->base);
}

static void h1_on_stop(corral_conn *conn)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->h2 != NULL) {
        http2_on_stop(h1->h2);
        return;
    }
    if (h1_may_hand_over(h1)) {
        /* Served by the successor from the next request on; one under way
         * finishes here first, and is answered as keeping the connection. */
        h1->handing_over = true;
        if (h1->ex == NULL && !h1->partial_head && h1_hand_over(h1))
            return;
        if (h1->ex != NULL || h1->partial_head || h1->requests == 0)
            return; /* moves after this (or its first) exchange */
        h1->handing_over = false;
    }
    h1->stopping = true;
    if (h1->ex != NULL || h1->partial_head || h1->requests == 0)
        return; /* closes after this (or its first) exchange, or at the drain timeout */
    /* Idle, unless a request is already in the socket and its event not yet
     * handled: closing now would drop it unanswered.  Let it be read; it is
     * answered with "Connection: close". */
    if (corral_conn_input_pending(conn))
        return;
    http1_close(h1);
}

static void h1_on_close(corral_conn *conn, int error)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1 == NULL)
        return;
    if (h1->proxy_header && (error == -EPROTO || error == -EMSGSIZE))
        h1_proxy_header_failed(h1, PROXY_PROTOCOL_MALFORMED);
    if (h1->h2 != NULL) {
        http2_on_close(h1->h2, error);
        free(h1);
        return;
    }
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

const struct corral_conn_handler http1_server_handler = {
    .on_open = h1_on_open,
    .on_data = h1_on_data,
    .on_eof = h1_on_eof,
    .on_deadline = h1_on_deadline,
    .on_drain = h1_on_drain,
    .on_stop = h1_on_stop,
    .on_close = h1_on_close,
};
