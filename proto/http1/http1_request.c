/*
 * http1_request.c: the request side of the HTTP/1.1 framer: llhttp fed
 * with a complete head and then the body, its callbacks building the
 * struct http_request that handlers get, the checks llhttp leaves to its
 * caller, and the body handed on as it streams.
 */
#include "proto/http1/http1_internal.h"
#include "proto/policy/access_log.h"
#include "proto/policy/access_log_filter.h"
#include "proto/http/exchange_pool.h"
#include "proto/http/router.h"

#include <assert.h>
#include <errno.h>
#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
/* The end of the input llhttp is parsing (NULL outside http1_request_execute()), for
 * on_body to see that its bytes end it; per thread for the same reason. */
static _Thread_local const char *exec_end;

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

/* ------------------------------------------------- a request's trailers */

/* A chunked request's trailer section, "name: value\r\n" lines as llhttp
 * hands their pieces over, bounded by client_max_header_size: beyond it
 * the whole section is dropped, as HTTP/2's is. */
struct h1_trailers {
    size_t len, cap;
    bool in_value, over;
    char data[];
};

static void trailers_add(struct h1_exchange *ex, size_t max, const char *a, size_t alen,
                         const char *b, size_t blen)
{
    struct h1_trailers *t = ex->trailers;
    if (t != NULL && t->over)
        return;
    /* room for the CRLF trailers_finish() ends the last line with */
    size_t need = (t != NULL ? t->len : 0) + alen + blen + 2;
    if (need > max + 2) {
        if (t != NULL)
            t->over = true;
        return;
    }
    if (t == NULL || need > t->cap) {
        size_t cap = t != NULL ? t->cap * 2 : 256;
        while (cap < need)
            cap *= 2;
        struct h1_trailers *grown = realloc(t, sizeof(*t) + cap);
        if (grown == NULL) {
            if (t != NULL)
                t->over = true;
            return;
        }
        if (t == NULL)
            *grown = (struct h1_trailers){0};
        grown->cap = cap;
        ex->trailers = t = grown;
    }
    memcpy(t->data + t->len, a, alen);
    if (blen > 0) /* b may be NULL otherwise */
        memcpy(t->data + t->len + alen, b, blen);
    t->len += alen + blen;
}

/* A piece of a trailer field's name or value: the body has begun, so
 * llhttp's header callbacks are the trailer section's. */
static bool trailer_piece(struct h1_conn *h1, const char *at, size_t len, bool value)
{
    struct h1_exchange *ex = h1->ex;
    if (ex == NULL || ex->request_done)
        return false;
    size_t max = h1->vhost->limits.max_header_size;
    struct h1_trailers *t = ex->trailers;
    if (!value && t != NULL && t->in_value) /* a new field: end the last one */
        trailers_add(ex, max, "\r\n", 2, at, len);
    else if (value && (t == NULL || !t->in_value))
        trailers_add(ex, max, ": ", 2, at, len);
    else
        trailers_add(ex, max, at, len, NULL, 0);
    if (ex->trailers != NULL)
        ex->trailers->in_value = value;
    return true;
}

/* The complete section for on_body_trailers: the lines it may carry
 * (http_trailer_allowed()), values trimmed, in place.  Returns their
 * length; 0: none. */
static size_t trailers_finish(struct h1_trailers *t)
{
    if (t == NULL || t->over)
        return 0;
    memcpy(t->data + t->len, "\r\n", 2);
    size_t in = 0, out = 0, end = t->len + 2;
    while (in < end) {
        char *line = t->data + in;
        char *eol = memchr(line, '\n', end - in);
        size_t line_len = (size_t)(eol - line) + 1; /* every line ends in CRLF */
        in += line_len;
        char *colon = memchr(line, ':', line_len);
        if (colon == NULL || colon == line)
            continue;
        struct http_str name = {line, (size_t)(colon - line)};
        struct http_str value =
            http_trim((struct http_str){colon + 1, (size_t)(eol - 1 - colon - 1)});
        if (!http_trailer_allowed(name))
            continue;
        memmove(t->data + out, name.data, name.len);
        out += name.len;
        memcpy(t->data + out, ": ", 2);
        out += 2;
        memmove(t->data + out, value.data, value.len);
        out += value.len;
        memcpy(t->data + out, "\r\n", 2);
        out += 2;
    }
    return out;
}

static int on_header_field(llhttp_t *parser, const char *at, size_t len)
{
    struct h1_conn *h1 = parser->data;
    if (trailer_piece(h1, at, len, false))
        return 0;
    if (!http_headers_add_name(&scratch.list, at, len, h1->vhost->limits.max_headers)) {
        h1->error_status = 431;
        return -1;
    }
    return 0;
}

static int on_header_value(llhttp_t *parser, const char *at, size_t len)
{
    if (trailer_piece(parser->data, at, len, true))
        return 0;
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
        .http10 = parser->http_minor == 0,
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

void http1_request_log(struct h1_conn *h1, struct h1_exchange *ex, unsigned status)
{
    (void)h1; /* the exchange has its log (access_log_route()) */
    struct access_entry entry = {
        .ex = &ex->base,
        .protocol = ex->http10 ? "HTTP/1.0" : "HTTP/1.1",
        .status = status,
        .body_bytes_sent = access_log_filter_bytes(&ex->base),
        .request_ns = ex->started_ns ? corral_monotonic_ns() - ex->started_ns : 0,
    };
    access_log_entry_from_kept(&entry, ex->log_fields);
    if (ex->log != NULL)
        access_log_write(ex->log, &entry);
    free(ex->log_fields);
    ex->log_fields = NULL;
}

static int on_headers_complete(llhttp_t *parser)
{
    struct h1_conn *h1 = parser->data;
    corral_conn_set_deadline(h1->c.sock, 0);
    struct http_request req;
    unsigned status = build_request(h1, &req);
    if (status == 0) {
        h1->vhost = site_route_vhost(h1->c.site, h1->c.sock, req.host.data, req.host.len, &status);
        const struct http_limits *limits = &h1->vhost->limits;
        if (limits->max_body_size > 0 && req.content_length > limits->max_body_size)
            status = 413;
    }
    if (status != 0) {
        h1->error_status = status;
        return -1;
    }

    struct h1_exchange *ex = http1_exchange_begin(h1);
    if (ex == NULL) {
        h1->error_status = 503;
        return -1;
    }
    bool keep_alive = llhttp_should_keep_alive(parser); /* what the client asked for */
    ex->head = req.head;
    ex->keep_alive = keep_alive;
    ex->client_closes = !keep_alive;
    ex->http10 = parser->http_minor == 0;
    ex->upgrade = req.upgrade;
    ex->expect_continue = req.expect_continue && req.has_body && parser->http_minor >= 1;
    if (req.has_body)
        corral_conn_set_timeouts(h1->c.sock, h1->vhost->limits.body_timeout_ms,
                                 h1->vhost->limits.send_timeout_ms);
    router_start(&ex->base, h1->vhost, &req, 0);
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
    if (ex->handler != NULL && ex->handler->on_body != NULL && !ex->response_done &&
        !ex->body_dropped) {
        /* llhttp has counted these bytes off the body's (or the chunk's)
         * length already: what it still expects follows them raw. */
        ex->body_raw = at + len == exec_end && parser->content_length > 0;
        ex->handler->on_body(&ex->base, at, len);
        ex->body_raw = false;
    }
    return 0;
}

void http1_request_complete(struct h1_conn *h1)
{
    struct h1_exchange *ex = h1->ex;
    ex->request_done = true;
    corral_conn_set_timeouts(h1->c.sock, 0, h1->vhost->limits.send_timeout_ms);
    bool handler = ex->handler != NULL && !ex->response_done && !ex->body_dropped;
    if (ex->trailers != NULL) {
        size_t len = trailers_finish(ex->trailers);
        if (handler && len > 0 && ex->handler->on_body_trailers != NULL)
            ex->handler->on_body_trailers(&ex->base, ex->trailers->data, len);
        free(ex->trailers);
        ex->trailers = NULL;
        if (h1->ex != ex) /* the handler ended the exchange */
            return;
    }
    if (handler && ex->handler->on_body_end != NULL && !ex->response_done)
        ex->handler->on_body_end(&ex->base);
}

static int on_message_complete(llhttp_t *parser)
{
    http1_request_complete(parser->data);
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
bool http1_request_line_valid(const char *head, size_t len)
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

/* A parser lives from a head's arrival to its message's end: one per
 * request, from the thread's pool rather than malloc, whose cache a burst
 * of them outruns (exchange_pool.h). */
void http1_request_parser_free(struct h1_conn *h1)
{
    exchange_pool_put(h1->parser, sizeof(*h1->parser));
    h1->parser = NULL;
}

/* A head still arriving: its request line, once whole, is kept for the
 * log line of a 408 (its input is gone by then). */
void http1_request_keep_head_line(struct h1_conn *h1, const char *data, size_t len)
{
    if (h1->head_line != NULL || access_log_route(h1->c.site, h1->vhost, NULL) == NULL ||
        memchr(data, '\n', len) == NULL)
        return;
    char remote[64]; /* exchange_format_peer() writes at most this */
    exchange_format_peer(&h1->c, remote, sizeof(remote));
    h1->head_line = access_log_keep_line(data, len, remote);
}

/* Feeds llhttp; returns bytes consumed, or SIZE_MAX after refusing. */
size_t http1_request_execute(struct h1_conn *h1, const char *data, size_t len)
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
        http1_request_parser_free(h1);
        return used;
    }
    http1_request_parser_free(h1);
    /* A callback that refused the request said why; llhttp's own errors are
     * all malformed input. */
    unsigned status = h1->error_status != 0 ? h1->error_status : 400;
    if (h1->ex != NULL && !h1->ex->response_done) {
        h1->ex->keep_alive = false;
        /* Built-in, unless a response is already under way: no error page
         * can be served on a connection that closes now. */
        exchange_respond_builtin(&h1->ex->base, status);
        if (h1->ex->handler != NULL && h1->ex->handler->on_abort != NULL)
            h1->ex->handler->on_abort(&h1->ex->base);
    } else if (h1->ex == NULL) {
        http1_reject(h1, status, data, len); /* `data` starts the head */
    }
    http1_close(h1);
    return SIZE_MAX;
}

int http1_request_parser_new(struct h1_conn *h1)
{
    assert(h1->parser == NULL);
    h1->parser = exchange_pool_take(sizeof(*h1->parser));
    if (h1->parser == NULL)
        return -ENOMEM;
    llhttp_init(h1->parser, HTTP_REQUEST, &parser_settings);
    h1->parser->data = h1;
    return 0;
}
