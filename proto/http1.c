/*
 * http1.c: HTTP/1.1 server connections, the framer that turns requests into
 * exchanges (proto/exchange.h).  A request head is parsed only once
 * it is complete in the input, so llhttp sees it in one piece and every
 * header is a slice of one buffer; the body streams through.  One exchange
 * runs at a time: pipelined requests wait, unconsumed, until the response
 * before them is complete, which keeps responses in order for free.
 */
#include "proto/http1_internal.h"
#include "proto/access.h"
#include "proto/add_header.h"
#include "proto/limit.h"
#include "proto/http2.h"
#include "proto/tls.h"
#include "proto/access_log.h"
#include "proto/proxy_protocol.h"

#include <assert.h>
#include <errno.h>
#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Header slots parsed per request at most, whatever the configured limit. */
#define HEADERS_CAP 1024

/* Head parsing runs inside one on_data call on one worker, so its scratch
 * space is per thread, not per connection: idle connections stay small. */
struct head_scratch {
    struct http_header slots[HEADERS_CAP]; /* http_headers_add_name() stops at cap */
    struct http_header_list list;
    struct http_str url;
};
static _Thread_local struct head_scratch scratch;
/* The end of the input llhttp is parsing (NULL outside h1_execute()), for
 * on_body to see that its bytes end it; per thread for the same reason. */
static _Thread_local const char *exec_end;

/* ------------------------------------------------- counters, connection steps */

static struct http_stats *worker_stats(const struct h1_conn *h1)
{
    corral_worker *worker = corral_conn_worker(h1->conn);
    if (worker == NULL || h1->site->stats == NULL)
        return NULL;
    return &h1->site->stats[corral_worker_index(worker)];
}

void h1_count_response(struct h1_conn *h1, unsigned status)
{
    uint64_t ns = h1->head_started_ns ? corral_monotonic_ns() - h1->head_started_ns : 0;
    http_stats_count(worker_stats(h1), h1->vhost, status, ns);
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
static struct h1_exchange *h1_exchange_begin(struct h1_conn *h1)
{
    assert(h1->ex == NULL);
    struct h1_exchange *ex = malloc(sizeof(*ex));
    if (ex == NULL)
        return NULL;
    *ex = (struct h1_exchange){.base = {._ops = &h1_exchange_ops}, .h1 = h1, .upstream_ns = -1};
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
void h1_exchange_retire(struct h1_conn *h1)
{
    struct h1_exchange *ex = h1->ex;
    if (ex == NULL)
        return;
    limit_exchange_end(&ex->base);
    h1->ex = NULL;
    if (corral_loop_defer(corral_conn_loop(h1->conn), h1_exchange_free, ex) != 0) {
        ex->retired_next = h1->retired;
        h1->retired = ex;
    }
}

/* Parses nothing more and closes.  `linger` unless the client asked to
 * close and so sends nothing more. */
void h1_end(struct h1_conn *h1, bool linger)
{
    h1->closed = true;
    corral_conn_set_deadline(h1->conn, 0);
    if (linger)
        corral_conn_close(h1->conn);
    else
        corral_conn_close_no_linger(h1->conn);
}

void h1_close(struct h1_conn *h1)
{
    h1_end(h1, true);
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
void h1_finish_exchange(struct h1_conn *h1)
{
    h1_exchange_retire(h1);
    h1->requests++;
    if (h1->stopping && !h1->closed)
        h1_close(h1); /* the stop began while this exchange ran */
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
        h1_close(h1); /* the stop began while this exchange ran */
}

/* Answers a request that never became an exchange (a malformed head),
 * whose input starts at `head` (`len` bytes; NULL: gone, but a partial
 * head's line may have been kept): its log line names the client and the
 * request line as received. */
static void h1_reject(struct h1_conn *h1, unsigned status, const char *head, size_t len)
{
    struct h1_exchange *ex = h1_exchange_begin(h1);
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
        exchange_respond_error_adding(&ex->base, NULL, h1->vhost->add_headers, status);
    }
    free(h1->head_line);
    h1->head_line = NULL;
    h1_close(h1);
}

/* ------------------------------------------------------- llhttp callbacks */

static int on_message_begin(llhttp_t *parser)
{
    struct h1_conn *h1 = parser->data;
    h1->error_status = 0;
    h1->partial_head = false;
    scratch.list = (struct http_header_list){.headers = scratch.slots, .cap = HEADERS_CAP};
    scratch.url = (struct http_str){NULL, 0};
    return 0;
}

static int on_url(llhttp_t *parser, const char *at, size_t len)
{
    (void)parser;
    http_str_extend(&scratch.url, at, len);
    return 0;
}

static int on_header_field(llhttp_t *parser, const char *at, size_t len)
{
    struct h1_conn *h1 = parser->data;
    if (!http_headers_add_name(&scratch.list, at, len, h1->vhost->limits.max_headers)) {
        h1->error_status = 431;
        return -1;
    }
    return 0;
}

static int on_header_value(llhttp_t *parser, const char *at, size_t len)
{
    (void)parser;
    http_headers_add_value(&scratch.list, at, len);
    return 0;
}

/* An absolute-form target ("http://host:port/path?query"), which servers
 * must accept (RFC 9112 3.2.2): its authority takes the place of Host, and
 * what follows is the target.  Userinfo is refused, as is a query without a
 * path.  Returns 0 or 400. */
static unsigned take_absolute_form(struct http_request *req)
{
    struct http_str t = req->target;
    size_t scheme = t.len > 7 && strncasecmp(t.data, "http://", 7) == 0    ? 7
                    : t.len > 8 && strncasecmp(t.data, "https://", 8) == 0 ? 8
                                                                           : 0;
    if (scheme == 0)
        return 400;
    const char *authority = t.data + scheme, *end = t.data + t.len, *path = authority;
    while (path < end && *path != '/' && *path != '?')
        path++;
    req->authority = (struct http_str){authority, (size_t)(path - authority)};
    struct http_str host;
    if (!http_authority_valid(req->authority, &host)) /* userinfo ('@') among others */
        return 400;
    if (host.len == 0 || (path < end && *path == '?'))
        return 400;
    req->target =
        path < end ? (struct http_str){path, (size_t)(end - path)} : (struct http_str){"/", 1};
    return 0;
}

/* Fills `req` from the scratch headers and checks what llhttp leaves to us.
 * Returns 0 or the status to refuse the request with. */
static unsigned build_request(struct h1_conn *h1, struct http_request *req)
{
    const llhttp_t *parser = h1->parser;
    *req = (struct http_request){
        .method = {llhttp_method_name((llhttp_method_t)parser->method), 0},
        .target = scratch.url,
        .headers = scratch.list.headers,
        .header_count = scratch.list.count,
        .head = parser->method == HTTP_HEAD,
    };
    req->method.len = strlen(req->method.data);
    if (parser->http_major != 1)
        return 505;
    if (req->target.len == 0)
        return 400;
    if (req->target.data[0] != '/' && req->target.data[0] != '*') {
        unsigned status = take_absolute_form(req);
        if (status != 0)
            return status;
    }
    const char *query = memchr(req->target.data, '?', req->target.len);
    req->path = (struct http_str){
        req->target.data, query != NULL ? (size_t)(query - req->target.data) : req->target.len};

    int hosts = 0, transfer_encodings = 0;
    bool chunked = false; /* Transfer-Encoding: chunked */
    for (size_t i = 0; i < scratch.list.count; i++) {
        const struct http_header *h = &scratch.list.headers[i];
        if (!http_is_token(h->name))
            return 400; /* llhttp lets a space inside a name through */
        if (http_str_equal_nocase(h->name, "host")) {
            hosts++;
            req->host = http_trim(h->value);
        } else if (http_str_equal_nocase(h->name, "transfer-encoding")) {
            if (++transfer_encodings > 1)
                return 400;
            unsigned status = http_check_transfer_encoding(h->value);
            if (status != 0)
                return status;
            chunked = true;
        } else if (http_str_equal_nocase(h->name, "upgrade")) {
            req->upgrade_protocol = http_trim(h->value);
        } else if (http_str_equal_nocase(h->name, "expect")) {
            if (!http_str_equal_nocase(http_trim(h->value), "100-continue"))
                return 417;
            req->expect_continue = true;
        }
    }
    /* Chunked framing does not exist in HTTP/1.0 (RFC 9112 6.1): the
     * framing is faulty, whatever a Content-Length says. */
    if (chunked && parser->http_minor == 0)
        return 400;
    /* HTTP/1.1 requires exactly one Host (RFC 9112 3.2). */
    if (hosts > 1 || (hosts == 0 && parser->http_minor >= 1))
        return 400;
    /* Host is checked even when an absolute-form target's authority takes
     * its place: RFC 9112 3.2 refuses any invalid Host value. */
    if (!http_authority_valid(req->host, &req->host))
        return 400;
    if (req->authority.len > 0 && !http_authority_valid(req->authority, &req->host))
        return 400;
    for (size_t i = 0; i < scratch.list.count && req->upgrade_protocol.len > 0; i++)
        if (http_str_equal_nocase(scratch.list.headers[i].name, "connection") &&
            http_header_lists(scratch.list.headers[i].value, (struct http_str){"upgrade", 7}))
            req->upgrade = true;
    req->content_length = chunked ? 0 : parser->content_length;
    req->has_content_length = !chunked && (parser->flags & F_CONTENT_LENGTH);
    req->has_body = chunked || req->content_length > 0;
    return 0;
}

void h1_log_exchange(struct h1_conn *h1, struct h1_exchange *ex, unsigned status)
{
    (void)h1; /* the exchange has its log (access_log_route()) */
    struct access_entry entry = {
        .ex = &ex->base,
        .protocol = ex->http10 ? "HTTP/1.0" : "HTTP/1.1",
        .status = status,
        .body_bytes_sent = ex->body_sent,
        .request_ns = ex->started_ns ? corral_monotonic_ns() - ex->started_ns : 0,
        .upstream_ns = ex->upstream_ns,
    };
    access_entry_from_kept(&entry, ex->log_fields);
    if (ex->log != NULL)
        access_log_write(ex->log, &entry);
    free(ex->log_fields);
    ex->log_fields = NULL;
}

static int on_headers_complete(llhttp_t *parser)
{
    struct h1_conn *h1 = parser->data;
    corral_conn_set_deadline(h1->conn, 0);
    struct http_request req;
    unsigned status = build_request(h1, &req);
    if (status == 0) {
        h1->vhost = http_find_vhost(h1->site, req.host.data, req.host.len);
        const struct http_limits *limits = &h1->vhost->limits;
        if (limits->max_body_size > 0 && req.content_length > limits->max_body_size)
            status = 413;
    }
    if (status != 0) {
        h1->error_status = status;
        return -1;
    }

    struct h1_exchange *ex = h1_exchange_begin(h1);
    if (ex == NULL) {
        h1->error_status = 503;
        return -1;
    }
    bool keep_alive = llhttp_should_keep_alive(parser); /* what the client asked for */
    ex->head = req.head;
    ex->keep_alive = keep_alive;
    ex->client_closes = !keep_alive;
    ex->http10 = parser->http_minor == 0;
    const struct http_location *loc = http_find_location(h1->vhost, req.path.data, req.path.len);
    unsigned refused =
        access_check(&ex->base, h1->conn, loc != NULL ? loc->access : h1->vhost->access, &req);
    ex->log = access_log_route(h1->site, h1->vhost, loc);
    if (ex->log != NULL) {
        ex->started_ns = h1->head_started_ns;
        char remote[64]; /* exchange_client_host() writes at most this */
        exchange_client_host(&ex->base, remote, sizeof(remote));
        ex->log_fields = access_log_keep(&req, remote);
    }
    if (req.has_body)
        corral_conn_set_timeouts(h1->conn, h1->vhost->limits.body_timeout_ms,
                                 h1->vhost->limits.send_timeout_ms);

    if (refused != 0 || loc == NULL) {
        exchange_respond_error_adding(&ex->base, &req,
                                      loc != NULL ? loc->add_headers : h1->vhost->add_headers,
                                      refused != 0 ? refused : 404);
        return 0;
    }
    ex->handler = loc->handler;
    ex->handler_data = loc->handler_data;
    if (req.upgrade && ex->handler->on_tunnel_data == NULL)
        ex->keep_alive = false; /* what follows the head will not be HTTP */
    /* Never to an HTTP/1.0 client, which need not understand a 1xx and
     * sends its body regardless (RFC 9110 10.1.1, 15.2). */
    if (req.expect_continue && req.has_body && parser->http_minor >= 1 &&
        ex->handler->on_body != NULL)
        corral_conn_write(h1->conn, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    ex->handler->on_request(&ex->base, &req, loc->handler_data);
    return 0;
}

static int on_body(llhttp_t *parser, const char *at, size_t len)
{
    struct h1_conn *h1 = parser->data;
    struct h1_exchange *ex = h1->ex;
    ex->body_received += len;
    size_t max = h1->vhost->limits.max_body_size;
    if (max > 0 && ex->body_received > max) {
        h1->error_status = 413; /* a chunked body grew past the limit */
        return -1;
    }
    if (ex->handler != NULL && ex->handler->on_body != NULL && !ex->response_done) {
        /* llhttp has counted these bytes off the body's (or the chunk's)
         * length already: what it still expects follows them raw. */
        ex->body_raw = at + len == exec_end && parser->content_length > 0;
        ex->handler->on_body(&ex->base, at, len);
        ex->body_raw = false;
    }
    return 0;
}

void h1_request_complete(struct h1_conn *h1)
{
    struct h1_exchange *ex = h1->ex;
    ex->request_done = true;
    corral_conn_set_timeouts(h1->conn, 0, h1->vhost->limits.send_timeout_ms);
    if (ex->handler != NULL && ex->handler->on_body_end != NULL && !ex->response_done)
        ex->handler->on_body_end(&ex->base);
}

static int on_message_complete(llhttp_t *parser)
{
    h1_request_complete(parser->data);
    /* Stop here: a pipelined request waits until this one is answered. */
    return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* --------------------------------------------------------------- framing */

/* One space around the request-target (RFC 9112 3), which llhttp does not
 * insist on: a request line that two parsers split differently is how a
 * target or version is smuggled past one of them.  `head` starts with the
 * request line and its lines are valid. */
static bool request_line_valid(const char *head, size_t len)
{
    const char *eol = memchr(head, '\r', len);
    if (eol == NULL)
        return false;
    const char *sp1 = memchr(head, ' ', (size_t)(eol - head));
    if (sp1 == NULL || sp1 == head)
        return false;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (sp2 == NULL || sp2 == sp1 + 1 || sp2 + 1 == eol)
        return false;
    return memchr(sp2 + 1, ' ', (size_t)(eol - sp2 - 1)) == NULL;
}

void h1_parser_free(struct h1_conn *h1)
{
    free(h1->parser);
    h1->parser = NULL;
}

/* A head still arriving: its request line, once whole, is kept for the
 * log line of a 408 (its input is gone by then). */
static void h1_keep_head_line(struct h1_conn *h1, const char *data, size_t len)
{
    if (h1->head_line != NULL || access_log_route(h1->site, h1->vhost, NULL) == NULL ||
        memchr(data, '\n', len) == NULL)
        return;
    char remote[64]; /* exchange_format_client() writes at most this */
    exchange_format_client(h1->conn, remote, sizeof(remote));
    h1->head_line = access_log_keep_line(data, len, remote);
}

/* Feeds llhttp; returns bytes consumed, or SIZE_MAX after refusing. */
static size_t h1_execute(struct h1_conn *h1, const char *data, size_t len)
{
    assert(h1->parser != NULL);       /* from a head's start to its message's end */
    const char *outer_end = exec_end; /* none: handlers parse nothing, but cheap to keep */
    exec_end = data + len;
    llhttp_errno_t err = llhttp_execute(h1->parser, data, len);
    exec_end = outer_end;
    if (err == HPE_OK)
        return len;
    if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) {
        /* The message is complete: the next one starts with a new parser. */
        size_t used = (size_t)(llhttp_get_error_pos(h1->parser) - data);
        if (err == HPE_PAUSED_UPGRADE || h1->parser->upgrade) {
            /* What follows is not HTTP: the connection ends with this
             * exchange, unless a 101 response turns it into a tunnel. */
            if (h1->ex != NULL) /* else its response ended it already */
                h1->ex->keep_alive = false;
        }
        h1_parser_free(h1);
        return used;
    }
    h1_parser_free(h1);
    /* A callback that refused the request said why; llhttp's own errors are
     * all malformed input. */
    unsigned status = h1->error_status != 0 ? h1->error_status : 400;
    if (h1->ex != NULL && !h1->ex->response_done) {
        h1->ex->keep_alive = false;
        exchange_respond_error(&h1->ex->base, status); /* unless a response is already under way */
        if (h1->ex->handler != NULL && h1->ex->handler->on_abort != NULL)
            h1->ex->handler->on_abort(&h1->ex->base);
    } else if (h1->ex == NULL) {
        h1_reject(h1, status, data, len); /* `data` starts the head */
    }
    h1_close(h1);
    return SIZE_MAX;
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
    if (header.has_address)
        corral_conn_set_peer(h1->conn, &header.source.sa, header.address_len);
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
    while (used < len && !h1->closed) {
        if (h1->ex != NULL && h1->ex->request_done)
            break;
        size_t n;
        if (h1->ex != NULL) {
            n = h1_execute(h1, data + used, len - used);
        } else {
            /* Empty lines before a request line are ignored (RFC 9112 2.2),
             * here, so that the checks below see the head itself. */
            while (len - used >= 2 && data[used] == '\r' && data[used + 1] == '\n')
                used += 2;
            if (used == len)
                break;
            const struct http_limits *limits = &h1->vhost->limits;
            if (!h1->partial_head) /* for the access log and the metrics */
                h1->head_started_ns = corral_monotonic_ns();
            size_t head_len = http_head_length(data + used, len - used);
            if (head_len == 0) {
                if (len - used > limits->max_header_size) {
                    h1_reject(h1, 431, data + used, len - used);
                    return len;
                }
                if (!h1->partial_head) {
                    h1->partial_head = true;
                    h1_set_deadline(h1, limits->header_timeout_ms);
                }
                h1_keep_head_line(h1, data + used, len - used);
                break;
            }
            free(h1->head_line); /* the head is whole: not needed */
            h1->head_line = NULL;
            if (head_len > limits->max_header_size) {
                h1_reject(h1, 431, data + used, len - used);
                return len;
            }
            if (!http_head_lines_valid(data + used, head_len) ||
                !request_line_valid(data + used, head_len)) {
                h1_reject(h1, 400, data + used, len - used);
                return len;
            }
            h1->parser = malloc(sizeof(*h1->parser));
            if (h1->parser == NULL) {
                corral_conn_abort(conn, -ENOMEM);
                return len;
            }
            llhttp_init(h1->parser, HTTP_REQUEST, &parser_settings);
            h1->parser->data = h1;
            n = h1_execute(h1, data + used, len - used);
        }
        if (n == SIZE_MAX)
            return len;
        if (n == 0 && h1->ex == NULL) {
            /* No progress on a fresh head: never spin on it. */
            h1_reject(h1, 400, data + used, len - used);
            return len;
        }
        used += n;
        if (h1->ex != NULL && h1->ex->request_done && h1->ex->response_done && !h1->closed)
            h1_finish_exchange(h1);
    }
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
        h1_end(h1, false);
    } else if (h1->partial_head && h1->ex == NULL) {
        count_timeout(h1, HTTP_TIMEOUT_HEADER);
        h1_reject(h1, 408, NULL, 0); /* slow or stalled request head */
    } else
        h1_close(h1); /* idle, or silent since it connected */
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
        h1_end(h1, false);
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
    h1_close(h1);
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
            h1_log_exchange(h1, h1->ex, h1->ex->response_started ? h1->ex->status : 499);
    }
    h1_exchange_retire(h1);
    while (h1->retired != NULL) { /* no handler is running at on_close */
        struct h1_exchange *next = h1->retired->retired_next;
        h1_exchange_free(h1->retired);
        h1->retired = next;
    }
    free(h1->head_line);
    h1_parser_free(h1);
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
