/*
 * http1_client.c: the HTTP/1.1 client side of one upstream connection:
 * request head framing, and the response parsed strictly (status line, head
 * limit, framing, interim responses, 101), passed up to its owner.
 */
#include "proto/upstream/http1_client.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESPONSE_HEADERS_CAP 256
/* Interim (1xx) responses allowed before the final one: a few are normal
 * (100 Continue, 103 Early Hints); an endless stream would hold the
 * exchange forever, each one resetting the read timeout. */
#define MAX_INTERIM_RESPONSES 16

/* ------------------------------------------------------------- request heads */

void http1_client_head_add_grow(struct h1_head_buf *b, const char *data, size_t len)
{
    if (b->failed || len == 0) /* data may be NULL then */
        return;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + len)
            cap *= 2;
        char *grown;
        if (b->data != NULL && b->data == b->small) { /* out of the caller's memory */
            grown = malloc(cap);
            if (grown != NULL)
                memcpy(grown, b->data, b->len);
        } else {
            grown = realloc(b->data, cap);
        }
        if (grown == NULL) {
            b->failed = true;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
}

void http1_client_head_init(struct h1_head_buf *b, char *small, size_t size)
{
    *b = (struct h1_head_buf){.data = small, .cap = size, .small = small};
}

void http1_client_head_free(struct h1_head_buf *b)
{
    if (b->data != b->small)
        free(b->data);
    *b = (struct h1_head_buf){0};
}

void http1_client_head_add_header(struct h1_head_buf *b, struct http_str name,
                                  struct http_str value)
{
    /* Room for the whole line first, then four copies into it: the
     * request's every field comes here, and four appends checked the
     * room four times. */
    size_t line = name.len + 2 + value.len + 2;
    if (b->failed || b->len + line > b->cap) {
        http1_client_head_add(b, name.data, name.len);
        http1_client_head_add(b, ": ", 2);
        http1_client_head_add(b, value.data, value.len);
        http1_client_head_add(b, "\r\n", 2);
        return;
    }
    char *p = b->data + b->len;
    if (name.len > 0)
        memcpy(p, name.data, name.len);
    p += name.len;
    *p++ = ':';
    *p++ = ' ';
    if (value.len > 0)
        memcpy(p, value.data, value.len);
    p += value.len;
    *p++ = '\r';
    *p = '\n';
    b->len += line;
}

void http1_client_head_request_line(struct h1_head_buf *b, struct http_str method,
                                    struct http_str target)
{
    http1_client_head_add(b, method.data, method.len);
    http1_client_head_add(b, " ", 1);
    http1_client_head_add(b, target.data, target.len);
    http1_client_head_add(b, " HTTP/1.1\r\n", 11);
}

void http1_client_head_end(struct h1_head_buf *b, const struct http_str *upgrade, bool chunked,
                           bool has_length, uint64_t length)
{
    if (upgrade != NULL) {
        http1_client_head_add_str(b, "Connection: upgrade\r\nUpgrade: ");
        http1_client_head_add(b, upgrade->data, upgrade->len);
        http1_client_head_add(b, "\r\n", 2);
    }
    if (chunked) {
        http1_client_head_add_str(b, "Transfer-Encoding: chunked\r\n");
    } else if (has_length) {
        char line[48];
        int n =
            snprintf(line, sizeof(line), "Content-Length: %llu\r\n", (unsigned long long)length);
        http1_client_head_add(b, line, (size_t)n);
    }
    http1_client_head_add(b, "\r\n", 2);
}

/* ---------------------------------------------------------------- responses */

/* Response headers, per thread: filled during one llhttp_execute over a
 * complete head. */
static _Thread_local struct http_header response_slots[RESPONSE_HEADERS_CAP];
static _Thread_local struct http_header_list response_headers;

static int rsp_on_message_begin(llhttp_t *parser)
{
    (void)parser;
    response_headers =
        (struct http_header_list){.headers = response_slots, .cap = RESPONSE_HEADERS_CAP};
    return 0;
}

/* --------------------------------------------------------------- trailers */

/* The trailer section of a chunked response (RFC 9112 7.1.2) arrives in
 * pieces that may span reads: each field is copied into c->trailers as a
 * header line and checked once its value is complete. */

/* Appends to the trailers; -1 past the head limit, or out of memory. */
static int trailer_add(struct http1_client *c, const char *data, size_t len)
{
    if (c->trailers.len + len + 2 > c->req->head_limit) /* and the line's CRLF */
        return -1;
    http1_client_head_add(&c->trailers, data, len);
    return c->trailers.failed ? -1 : 0;
}

/* A field value: visible characters, spaces, tabs and obs-text only, so
 * neither CR, LF nor NUL (RFC 9110 5.5). */
static bool field_value_valid(struct http_str value)
{
    for (size_t i = 0; i < value.len; i++) {
        unsigned char c = (unsigned char)value.data[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static int trailer_on_name(struct http1_client *c, const char *at, size_t len)
{
    if (!c->trailer_in_name) {
        c->trailer_start = c->trailers.len;
        c->trailer_in_name = true;
    }
    return trailer_add(c, at, len);
}

static int trailer_on_name_end(struct http1_client *c)
{
    if (!c->trailer_in_name)
        c->trailer_start = c->trailers.len; /* an empty name: refused below */
    c->trailer_in_name = false;
    return trailer_add(c, ": ", 2);
}

/* The field is complete: kept as a line, dropped, or it fails the
 * response (a name or value no HTTP/1.1 head could carry). */
static int trailer_on_value_end(struct http1_client *c)
{
    const char *line = c->trailers.data + c->trailer_start;
    size_t len = c->trailers.len - c->trailer_start;
    const char *colon = memchr(line, ':', len);
    assert(colon != NULL); /* trailer_on_name_end() wrote ": " */
    struct http_str name = {line, (size_t)(colon - line)};
    struct http_str value = {colon + 2, len - name.len - 2};
    if (!http_is_token(name) || !field_value_valid(value)) /* as in the head */
        return -1;
    if (!http_trailer_allowed(name)) {
        c->trailers.len = c->trailer_start;
        return 0;
    }
    return trailer_add(c, "\r\n", 2);
}

static void trailers_free(struct http1_client *c)
{
    free(c->trailers.data);
    c->trailers = (struct h1_head_buf){0};
    c->trailer_in_name = false;
}

/* ------------------------------------------------------- response callbacks */

static int rsp_on_header_field(llhttp_t *parser, const char *at, size_t len)
{
    if (parser->flags & F_TRAILING)
        return trailer_on_name(parser->data, at, len);
    return http_headers_add_name(&response_headers, at, len, RESPONSE_HEADERS_CAP) ? 0 : -1;
}

static int rsp_on_header_field_complete(llhttp_t *parser)
{
    return parser->flags & F_TRAILING ? trailer_on_name_end(parser->data) : 0;
}

static int rsp_on_header_value(llhttp_t *parser, const char *at, size_t len)
{
    if (parser->flags & F_TRAILING)
        return trailer_add(parser->data, at, len);
    http_headers_add_value(&response_headers, at, len);
    return 0;
}

static int rsp_on_header_value_complete(llhttp_t *parser)
{
    return parser->flags & F_TRAILING ? trailer_on_value_end(parser->data) : 0;
}

static bool has_upgrade_header(void)
{
    for (size_t i = 0; i < response_headers.count; i++)
        if (http_str_equal_nocase(response_headers.headers[i].name, "upgrade") &&
            http_trim(response_headers.headers[i].value).len > 0)
            return true;
    return false;
}

static int rsp_on_headers_complete(llhttp_t *parser)
{
    struct http1_client *c = parser->data;
    const struct http1_client_request *req = c->req;
    unsigned status = parser->status_code;
    /* RFC 9110 5.1: a field name is a token.  llhttp 8 lets a space inside
     * a name through ("X A: b"), which another hop may read otherwise. */
    for (size_t i = 0; i < response_headers.count; i++)
        if (!http_is_token(response_headers.headers[i].name))
            return -1;
    if (status == 101) {
        /* A switch nobody asked for, or one that does not say to what (RFC
         * 9110 15.2.2 requires Upgrade): llhttp would not take it for an
         * upgrade either, and parse on as HTTP what the backend means as
         * tunnel bytes. */
        if (!req->upgrade || !has_upgrade_header())
            return -1;
        c->tunnel = true; /* switching protocols: see h1c_on_data */
    } else if (status < 200) {
        /* Interim (100 Continue): the client already had its own. */
        return ++c->interim > MAX_INTERIM_RESPONSES ? -1 : 0;
    }
    c->head_done = true;
    c->base.worker->servers[c->base.server].fails = 0;

    int64_t length = -1;
    if ((parser->flags & F_CONTENT_LENGTH) && !(parser->flags & F_CHUNKED))
        length = (int64_t)parser->content_length;
    /* Transfer codings other than chunked ("gzip, chunked") describe the
     * body corral passes on: they must reach the client, ahead of the
     * chunked coding corral applies itself. */
    struct http_str codings = {NULL, 0};
    for (size_t i = 0; i < response_headers.count; i++) {
        if (!http_str_equal_nocase(response_headers.headers[i].name, "transfer-encoding"))
            continue;
        codings = http_trim(response_headers.headers[i].value);
        const char *comma = codings.len > 0 ? memrchr(codings.data, ',', codings.len) : NULL;
        struct http_str last =
            comma != NULL ? http_trim((struct http_str){
                                comma + 1, (size_t)(codings.data + codings.len - comma - 1)})
                          : codings;
        if (http_str_equal_nocase(last, "chunked"))
            codings =
                comma != NULL
                    ? http_trim((struct http_str){codings.data, (size_t)(comma - codings.data)})
                    : (struct http_str){NULL, 0};
    }
    c->pending.set = true;
    c->pending.status = status;
    c->pending.length = length;
    c->pending.codings = codings;
    corral_conn_set_timeouts(c->base.conn, req->read_timeout_ms, req->send_timeout_ms);
    /* 1: no body, whatever the headers say, for the response to a HEAD and
     * for 204 and 304 (llhttp leaves that to its caller). */
    return req->head || status == 204 || status == 304 ? 1 : 0;
}

/* Passes the head held back by rsp_on_headers_complete to the owner, while
 * the headers it parsed are still in response_headers.  Returns its answer. */
static int pending_head_send(struct http1_client *c)
{
    if (!c->pending.set)
        return 0;
    c->pending.set = false;
    const struct http1_client_head head = {
        .status = c->pending.status,
        .headers = response_headers.headers,
        .header_count = response_headers.count,
        .tunnel = c->tunnel,
        .content_length = c->pending.length,
        .codings = c->pending.codings,
    };
    return c->ops->on_head(c->owner, &head);
}

static int check_on_message_complete(llhttp_t *parser)
{
    (void)parser;
    return HPE_PAUSED;
}

/* Whether the body bytes after a head parse up to the end of this read or
 * of the message, on a copy of the parser (llhttp keeps all its state in
 * the struct) that calls nothing back. */
static bool rest_parses(const struct http1_client *c, const char *data, size_t len)
{
    /* Only chunked framing can be malformed: the rest of a body with a
     * length, or of one that ends with the connection, is body bytes up to
     * its end, where the copy would pause.  Most responses are such, and
     * went through llhttp twice. */
    if (!(c->parser.flags & F_CHUNKED))
        return true;
    static const llhttp_settings_t check_settings = {
        .on_message_complete = check_on_message_complete,
    };
    llhttp_t copy = c->parser;
    copy.settings = (void *)&check_settings;
    llhttp_errno_t err = llhttp_execute(&copy, data, len);
    return err == HPE_OK || err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE;
}

/* RFC 9112 4: "HTTP/1.x 3DIGIT reason": a version this proxy speaks, a code
 * a client can act on (100-599: llhttp takes any), and a reason of visible
 * characters, spaces and tabs.  `head` passed http_head_length_valid(), so
 * its first CR ends the status line. */
static bool status_line_valid(const char *head, size_t len)
{
    const char *cr = memchr(head, '\r', len);
    size_t n = cr != NULL ? (size_t)(cr - head) : 0;
    if (n < 12 || (memcmp(head, "HTTP/1.1 ", 9) != 0 && memcmp(head, "HTTP/1.0 ", 9) != 0))
        return false;
    if (head[9] < '1' || head[9] > '5' || head[10] < '0' || head[10] > '9' || head[11] < '0' ||
        head[11] > '9')
        return false;
    if (n > 12 && head[12] != ' ')
        return false;
    for (size_t i = 13; i < n; i++) {
        unsigned char c = (unsigned char)head[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static int rsp_on_body(llhttp_t *parser, const char *at, size_t len)
{
    struct http1_client *c = parser->data;
    c->ops->on_body(c->owner, at, len);
    return 0;
}

/* Between a chunk's size line and its data's end, the rest of the chunk
 * is only data: see h1c_offer_splice(). */
static int rsp_on_chunk_header(llhttp_t *parser)
{
    struct http1_client *c = parser->data;
    c->in_chunk = parser->content_length > 0;
    return 0;
}

static int rsp_on_chunk_complete(llhttp_t *parser)
{
    struct http1_client *c = parser->data;
    c->in_chunk = false;
    return 0;
}

static int rsp_on_message_complete(llhttp_t *parser)
{
    struct http1_client *c = parser->data;
    if (!c->head_done)
        return 0;                      /* the end of a 1xx: the real response follows */
    return c->tunnel ? 0 : HPE_PAUSED; /* llhttp pauses for an upgrade itself */
}

static const llhttp_settings_t response_settings = {
    .on_message_begin = rsp_on_message_begin,
    .on_header_field = rsp_on_header_field,
    .on_header_field_complete = rsp_on_header_field_complete,
    .on_header_value = rsp_on_header_value,
    .on_header_value_complete = rsp_on_header_value_complete,
    .on_headers_complete = rsp_on_headers_complete,
    .on_body = rsp_on_body,
    .on_chunk_header = rsp_on_chunk_header,
    .on_chunk_complete = rsp_on_chunk_complete,
    .on_message_complete = rsp_on_message_complete,
};

/* ------------------------------------------------------------- the connection */

/* Returns a connection whose exchange finished cleanly to the pool (which
 * may close it instead). */
static void h1c_release(struct http1_client *c)
{
    c->owner = NULL;
    c->req = NULL;
    c->head_done = false;
    c->interim = 0;
    c->in_chunk = false;
    trailers_free(c);
    llhttp_reset(&c->parser);
    upstream_pool_release(&c->base);
}

/* The response is complete: the owner finishes, then the connection goes
 * back to the pool when `reusable`, else closes. */
static void h1c_end(struct http1_client *c, bool reusable)
{
    c->ops->on_end(c->owner, c->trailers.data, c->trailers.len);
    if (reusable)
        h1c_release(c);
    else
        http1_client_detach(c);
}

static void h1c_fail(struct http1_client *c, enum proxy_error_kind kind)
{
    c->ops->on_error(c->owner, kind);
}

/* In the middle of a body whose rest (or the rest of whose current chunk)
 * is known to be nothing but body bytes: a length's or a chunk's
 * remainder, or everything up to the close. */
static void h1c_offer_splice(struct http1_client *c)
{
    if (c->ops->on_splice == NULL || !c->head_done || c->tunnel)
        return;
    uint64_t rest = UINT64_MAX;
    if (c->parser.flags & F_CHUNKED) {
        if (!c->in_chunk)
            return;
        rest = c->parser.content_length; /* llhttp counts the chunk down */
    } else if (c->parser.flags & F_CONTENT_LENGTH) {
        rest = c->parser.content_length; /* llhttp counts it down */
    }
    if (rest == 0)
        return;
    c->splice_len = rest;
    (void)c->ops->on_splice(c->owner, c->base.conn, rest); /* else read as usual */
}

bool http1_client_spliced(struct http1_client *c, uint64_t moved)
{
    if (c->splice_len == UINT64_MAX) {
        /* The upstream closed: the end of a body delimited by the close,
         * as h1c_on_eof sees it. */
        c->ops->on_end(c->owner, NULL, 0);
        c->owner = NULL;
        c->req = NULL;
        corral_conn_close(c->base.conn);
        return true;
    }
    if (moved != c->splice_len)
        return false;
    if (c->parser.flags & F_CHUNKED) {
        /* The chunk's data went by: llhttp, told it has none left, goes on
         * with the CRLF that ends it. */
        c->parser.content_length = 0;
        return true;
    }
    h1c_end(c, llhttp_should_keep_alive(&c->parser) && c->req->sent);
    return true;
}

static size_t h1c_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct http1_client *c = corral_conn_data(conn);
    if (c->owner == NULL) {
        corral_conn_abort(conn, 0); /* an idle connection must not talk */
        return len;
    }
    if (c->tunnel && c->parser.error == HPE_PAUSED_UPGRADE)
        return c->ops->on_tunnel_data(c->owner, data, len);
    /* Heads are parsed only when complete, one at a time: an interim
     * response (100 Continue) may be followed by part of the final head. */
    size_t limit = c->req->head_limit;
    size_t used = 0;
    llhttp_errno_t err = HPE_OK;
    while (!c->head_done && err == HPE_OK) {
        bool valid = false;
        size_t head = http_head_length_valid(data + used, len - used, &valid);
        if (head == 0) {
            if (len - used > limit) {
                h1c_fail(c, PROXY_ERROR_INVALID);
                return len;
            }
            return used; /* wait for the whole head */
        }
        if (head > limit || !valid || !status_line_valid(data + used, head)) {
            h1c_fail(c, PROXY_ERROR_INVALID);
            return len;
        }
        err = llhttp_execute(&c->parser, data + used, head);
        if (c->owner == NULL)
            return len; /* the exchange failed inside a callback */
        if (err == HPE_OK)
            used += head;
    }
    if (c->pending.set) {
        /* The head is still only here: if what follows it in this read is
         * malformed (a bad first chunk), the client gets a 502 rather than
         * a head and a reset. */
        if (err == HPE_OK && used < len && !rest_parses(c, data + used, len - used)) {
            h1c_fail(c, PROXY_ERROR_INVALID);
            return len;
        }
        if ((err == HPE_OK || err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) &&
            pending_head_send(c) != 0) {
            h1c_fail(c, PROXY_ERROR_INVALID);
            return len;
        }
        if (c->owner == NULL)
            return len; /* the owner let go in on_head: the connection is closing */
    }
    if (err == HPE_OK) {
        if (used < len)
            err = llhttp_execute(&c->parser, data + used, len - used);
        if (c->owner != NULL && err == HPE_OK && c->watch_pauses && c->head_done)
            c->ops->on_read_done(c->owner, conn);
        if (c->owner != NULL && err == HPE_OK)
            h1c_offer_splice(c);
        if (c->owner == NULL || err == HPE_OK)
            return len;
    }
    if (err == HPE_PAUSED_UPGRADE && c->tunnel) {
        /* The 101 head went to the client; the client side turns raw too,
         * and whatever followed the head here is already tunnel data. */
        used = (size_t)(llhttp_get_error_pos(&c->parser) - data);
        corral_conn_set_timeouts(conn, 0, 0);
        c->ops->on_tunnel(c->owner);
        return used + c->ops->on_tunnel_data(c->owner, data + used, len - used);
    }
    if (err == HPE_PAUSED) {
        used = (size_t)(llhttp_get_error_pos(&c->parser) - data);
        bool reusable = llhttp_should_keep_alive(&c->parser) && used == len && c->req->sent;
        llhttp_resume(&c->parser);
        h1c_end(c, reusable);
        return len;
    }
    h1c_fail(c, PROXY_ERROR_INVALID);
    return len;
}

void http1_client_set_timeouts(struct http1_client *c)
{
    const struct http1_client_request *req = c->req;
    if (req == NULL)
        return; /* pooled: the pool's idle timeout applies */
    corral_conn_set_timeouts(c->base.conn, req->sent ? req->read_timeout_ms : 0,
                             req->send_timeout_ms);
}

static void h1c_on_open(corral_conn *conn)
{
    struct http1_client *c = corral_conn_data(conn);
    struct proxy_upstream *up = c->base.upstream;
    c->base.connected = true;
    int err = upstream_send_preamble(conn, c->base.preamble.data, c->base.preamble.len);
    if (err != 0) {
        corral_conn_abort(conn, err);
        return;
    }
    if (up->tls != NULL && tls_client_connect(up->tls, conn, c->base.server, true) != 0) {
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    if (c->owner != NULL)
        c->ops->on_open(c->owner);
    http1_client_set_timeouts(c);
}

static void h1c_on_eof(corral_conn *conn)
{
    struct http1_client *c = corral_conn_data(conn);
    if (c->owner != NULL && c->tunnel) {
        /* The upstream ended the tunnel: the client's side ends after what
         * is queued for it. */
        c->ops->on_tunnel_end(c->owner);
        corral_conn_close(conn);
        return;
    }
    if (c->owner != NULL && c->head_done && !(c->parser.flags & (F_CHUNKED | F_CONTENT_LENGTH))) {
        /* A body delimited by the close: complete now. */
        llhttp_finish(&c->parser);
        c->ops->on_end(c->owner, NULL, 0);
        c->owner = NULL;
        c->req = NULL;
        corral_conn_close(conn);
        return;
    }
    corral_conn_abort(conn, c->owner != NULL ? -ECONNRESET : 0);
}

static void h1c_on_drain(corral_conn *conn)
{
    struct http1_client *c = corral_conn_data(conn);
    if (c->owner != NULL)
        c->ops->on_drain(c->owner);
}

static void h1c_on_close(corral_conn *conn, int error)
{
    struct http1_client *c = corral_conn_data(conn);
    upstream_pool_remove(&c->base);
    upstream_count_open(c->base.worker, c->base.server, -1);
    c->pending.set = false;
    if (c->owner != NULL) {
        enum proxy_error_kind kind = error == -ETIMEDOUT  ? PROXY_ERROR_TIMEOUT
                                     : !c->base.connected ? PROXY_ERROR_CONNECT
                                     : error == -EPROTO   ? PROXY_ERROR_TLS
                                                          : PROXY_ERROR_RESET;
        c->ops->on_close(c->owner, error, kind); /* detaches c from its owner */
    }
    trailers_free(c);
    free(c);
}

/* A stopping worker waits for its connections: idle pooled ones have
 * nothing to finish, and busy ones close once their exchange is done. */
static void h1c_on_stop(corral_conn *conn)
{
    struct http1_client *c = corral_conn_data(conn);
    if (c->owner == NULL)
        corral_conn_close_no_linger(conn);
}

static const struct corral_conn_handler http1_client_handler = {
    .on_stop = h1c_on_stop,
    .on_open = h1c_on_open,
    .on_data = h1c_on_data,
    .on_eof = h1c_on_eof,
    .on_drain = h1c_on_drain,
    .on_close = h1c_on_close,
};

void http1_client_detach(struct http1_client *c)
{
    c->owner = NULL;
    c->req = NULL;
    if (c->tunnel)
        corral_conn_close(c->base.conn);
    else
        corral_conn_abort(c->base.conn, 0);
}

void http1_client_attach(struct http1_client *c, const struct http1_client_ops *ops, void *owner,
                         const struct http1_client_request *req)
{
    c->ops = ops;
    c->owner = owner;
    c->req = req;
    c->watch_pauses = false;
}

int http1_client_get(struct proxy_upstream *up, struct upstream_worker *worker, unsigned server,
                     bool pooled, const struct upstream_preamble *preamble, corral_loop *loop,
                     uint32_t connect_timeout_ms, uint32_t send_timeout_ms,
                     struct http1_client **out)
{
    struct upstream_conn *idle = pooled ? upstream_pool_take(worker, server, preamble) : NULL;
    if (idle != NULL) {
        *out = (struct http1_client *)((char *)idle - offsetof(struct http1_client, base));
        return 0;
    }
    struct http1_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->base = (struct upstream_conn){
        .upstream = up, .worker = worker, .server = server, .preamble = *preamble};
    llhttp_init(&c->parser, HTTP_RESPONSE, &response_settings);
    c->parser.data = c;
    int err = upstream_connect(&c->base, loop, &http1_client_handler, c);
    if (err != 0) {
        free(c);
        return err;
    }
    corral_conn_set_timeouts(c->base.conn, connect_timeout_ms, send_timeout_ms);
    upstream_pool_busy(&c->base, corral_loop_now(loop));
    *out = c;
    return 0;
}
