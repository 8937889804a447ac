/*
 * http1.c: HTTP/1.1 server connections.  A request head is parsed only once
 * it is complete in the input, so llhttp sees it in one piece and every
 * header is a slice of one buffer; the body streams through.  One exchange
 * runs at a time: pipelined requests wait, unconsumed, until the response
 * before them is complete, which keeps responses in order for free.
 */
#include "proto/http1.h"
#include "proto/access_log.h"

#include <assert.h>
#include <errno.h>
#include <llhttp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>

/* Header slots parsed per request at most, whatever the configured limit. */
#define HEADERS_CAP 1024

struct http_exchange {
    struct h1_conn *h1;
    const struct http_handler *handler;
    void *handler_data;
    void *data;
    bool head;          /* HEAD request: responses carry no body */
    bool keep_alive;    /* the client allows reusing the connection */
    bool http10;        /* an HTTP/1.0 client: no chunked responses */
    bool client_closes; /* the client asked to close after this request */
    bool request_done;  /* message complete */
    bool response_started;
    bool response_body;    /* the response being sent has a body */
    bool response_chunked; /* ...sent in chunks, its length unknown */
    bool response_keep;    /* the connection stays open after it */
    bool response_done;
    unsigned status;
    uint64_t body_received;
    uint64_t body_sent;
    uint64_t started_ns;  /* when its head was parsed */
    int64_t upstream_ns;  /* -1: no upstream */
    char *log_fields;     /* with an access log: the request's text, copied */
};

struct h1_conn {
    corral_conn *conn;
    const struct http_site *site;
    const struct http_vhost *vhost; /* whose limits apply */
    llhttp_t *parser; /* only from a head's start to its message's end: idle
                       * connections hold none */
    struct http_exchange ex;
    bool in_exchange;
    bool stopping;      /* graceful stop: close after the current response */
    bool partial_head;  /* part of a request head has arrived */
    bool tunnel;        /* switched protocols: bytes pass through raw */
    uint64_t head_started_ns; /* with an access log: when this head began */
    bool closed;        /* close requested: parse nothing more */
    unsigned requests;  /* completed on this connection */
    unsigned error_status; /* set by a callback that fails the request */
};

/* Head parsing runs inside one on_data call on one worker, so its scratch
 * space is per thread, not per connection: idle connections stay small. */
struct head_scratch {
    struct http_header slots[HEADERS_CAP]; /* http_headers_add_name() stops at cap */
    struct http_header_list list;
    struct http_str url;
};
static _Thread_local struct head_scratch scratch;

/* ------------------------------------------------------------ reason text */

const char *http_reason(unsigned status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    }
    return "Unknown";
}

void http_limits_init(struct http_limits *limits)
{
    *limits = (struct http_limits){
        .header_timeout_ms = 60000,
        .body_timeout_ms = 60000,
        .send_timeout_ms = 60000,
        .keepalive_timeout_ms = 75000,
        .keepalive_requests = 1000,
        .max_header_size = 8192,
        .max_headers = 100,
        .max_body_size = 1024 * 1024,
    };
}

/* ---------------------------------------------------------------- routing */

static bool host_matches(const char *name, const char *host, size_t len)
{
    size_t name_len = strlen(name);
    if (name[0] == '*' && name[1] == '.') {
        /* "*.example.com" matches "a.example.com", not "example.com". */
        size_t suffix = name_len - 1;
        return len > suffix && strncasecmp(host + len - suffix, name + 1, suffix) == 0;
    }
    return name_len == len && strncasecmp(name, host, len) == 0;
}

const struct http_vhost *http_find_vhost(const struct http_site *site, const char *host, size_t len)
{
    const struct http_vhost *wildcard = NULL;
    size_t wildcard_len = 0;
    for (size_t i = 0; i < site->vhost_count; i++) {
        const struct http_vhost *vhost = &site->vhosts[i];
        for (size_t n = 0; n < vhost->name_count; n++) {
            const char *name = vhost->names[n];
            if (!host_matches(name, host, len))
                continue;
            if (name[0] != '*')
                return vhost;
            if (strlen(name) > wildcard_len) {
                wildcard = vhost;
                wildcard_len = strlen(name);
            }
        }
    }
    return wildcard != NULL ? wildcard : &site->vhosts[0];
}

size_t http_site_sni_select(void *site, const char *name, size_t len)
{
    const struct http_site *s = site;
    return (size_t)(http_find_vhost(s, name, len) - s->vhosts);
}

const struct http_location *http_find_location(const struct http_vhost *vhost, const char *path,
                                               size_t len)
{
    const struct http_location *best = NULL;
    for (size_t i = 0; i < vhost->location_count; i++) {
        const struct http_location *loc = &vhost->locations[i];
        if (loc->exact) {
            if (loc->path_len == len && memcmp(loc->path, path, len) == 0)
                return loc;
        } else if (loc->path_len <= len && memcmp(loc->path, path, loc->path_len) == 0 &&
                   (best == NULL || loc->path_len > best->path_len)) {
            best = loc;
        }
    }
    return best;
}

/* ------------------------------------------------------------- responses */

const char *const http_timeout_kind_names[HTTP_TIMEOUT_KINDS] = {
    [HTTP_TIMEOUT_HEADER] = "header",
    [HTTP_TIMEOUT_BODY] = "body",
    [HTTP_TIMEOUT_SEND] = "send",
};

static struct http_stats *worker_stats(const struct h1_conn *h1)
{
    corral_worker *worker = corral_conn_worker(h1->conn);
    if (worker == NULL || h1->site->stats == NULL)
        return NULL;
    return &h1->site->stats[corral_worker_index(worker)];
}

static void count_response(struct h1_conn *h1, unsigned status)
{
    struct http_stats *stats = worker_stats(h1);
    if (stats != NULL && status < HTTP_MAX_STATUS) /* a backend may send any number */
        http_count(&stats->responses[status]);
}

static void count_timeout(struct h1_conn *h1, enum http_timeout_kind kind)
{
    struct http_stats *stats = worker_stats(h1);
    if (stats != NULL)
        http_count(&stats->timeouts[kind]);
}

/* "Date: Thu, 03 Dec 2026 04:10:00 GMT", formatted once per second per thread. */
static const char *date_header(void)
{
    static _Thread_local char text[48]; /* 37 bytes of fixed-width fields */
    static _Thread_local time_t formatted_at = -1;
    time_t now = time(NULL);
    if (now != formatted_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(text, sizeof(text), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        formatted_at = now;
    }
    return text;
}

/* The header timeout, then the keep-alive idle timeout: the connection's
 * deadline (0 ms: none). */
static void h1_set_deadline(struct h1_conn *h1, uint32_t ms)
{
    uint64_t now = corral_loop_now(corral_conn_loop(h1->conn));
    corral_conn_set_deadline(h1->conn, ms == 0 ? 0 : now + ms);
}

static void log_exchange(struct h1_conn *h1, struct http_exchange *ex, unsigned status);

/* Parses nothing more and closes.  `linger` unless the client asked to
 * close and so sends nothing more. */
static void h1_end(struct h1_conn *h1, bool linger)
{
    h1->closed = true;
    corral_conn_set_deadline(h1->conn, 0);
    if (linger)
        corral_conn_close(h1->conn);
    else
        corral_conn_close_no_linger(h1->conn);
}

static void h1_close(struct h1_conn *h1)
{
    h1_end(h1, true);
}

/* Both halves of the exchange are done: get ready for the next request. */
static void h1_finish_exchange(struct h1_conn *h1)
{
    h1->in_exchange = false;
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
}

static bool h1_keep_alive(const struct h1_conn *h1, const struct http_exchange *ex)
{
    const struct http_limits *limits = &h1->vhost->limits;
    return ex->keep_alive && !h1->stopping && limits->keepalive_timeout_ms > 0 &&
           h1->requests + 1 < limits->keepalive_requests;
}

static char *append(char *p, const char *text, size_t len)
{
    memcpy(p, text, len);
    return p + len;
}

static char *append_str(char *p, const char *text)
{
    return append(p, text, strlen(text));
}

/* The most digits append_uint() writes. */
#define UINT64_DIGITS 20

static char *append_uint(char *p, uint64_t value)
{
    char digits[UINT64_DIGITS]; /* UINT64_MAX has 20 */
    size_t n = 0;
    do
        digits[n++] = (char)('0' + value % 10);
    while ((value /= 10) > 0);
    while (n > 0)
        *p++ = digits[--n];
    return p;
}

void http_response_begin(struct http_exchange *ex, unsigned status, const char *headers,
                         size_t headers_len, int64_t content_length)
{
    http_response_begin_coded(ex, status, headers, headers_len, content_length,
                              (struct http_str){NULL, 0});
}

void http_response_begin_coded(struct http_exchange *ex, unsigned status, const char *headers,
                               size_t headers_len, int64_t content_length, struct http_str codings)
{
    struct h1_conn *h1 = ex->h1;
    if (ex->response_started)
        return;
    ex->response_started = true;
    ex->status = status;
    bool bodiless_status = status < 200 || status == 204 || status == 304;
    ex->response_body = !ex->head && !bodiless_status;
    if (codings.len > 0)
        content_length = -1; /* a coded body is sent chunked, never with a length */
    ex->response_chunked = ex->response_body && content_length < 0 && !ex->http10;
    /* A body of unknown length to an HTTP/1.0 client ends with the connection;
     * after 101 the connection belongs to another protocol. */
    ex->response_keep = status == 101 || (h1_keep_alive(h1, ex) &&
                                          !(ex->response_body && content_length < 0 && ex->http10));

    /* Built by hand: this runs once per request, and snprintf showed up in
     * the profile.  Sized from its inputs, since the header lines and the
     * codings come from the producer (a backend) and have any length: on
     * the stack when that fits, which is the common case, else on the heap.
     * The lengths are of objects in memory, so their sum cannot wrap. */
    const char *reason = http_reason(status), *date = date_header();
    size_t need = sizeof("HTTP/1.1  \r\nServer: corral\r\n") + UINT64_DIGITS + strlen(reason) +
                  strlen(date) + sizeof("Content-Length: \r\n") + UINT64_DIGITS +
                  sizeof("Transfer-Encoding: , chunked\r\n") + codings.len +
                  sizeof("Connection: close\r\n") + headers_len + sizeof("\r\n");
    char small[512], *head = small;
    if (need > sizeof(small) && (head = malloc(need)) == NULL) {
        corral_conn_abort(h1->conn, -ENOMEM);
        return;
    }
    char *p = append(head, "HTTP/1.1 ", 9);
    p = append_uint(p, status);
    *p++ = ' ';
    p = append_str(p, reason);
    p = append(p, "\r\nServer: corral\r\n", 18);
    p = append_str(p, date);
    if (content_length >= 0 && !bodiless_status) {
        p = append(p, "Content-Length: ", 16);
        p = append_uint(p, (uint64_t)content_length);
        p = append(p, "\r\n", 2);
    } else if (ex->response_chunked) {
        p = append(p, "Transfer-Encoding: ", 19);
        if (codings.len > 0) {
            p = append(p, codings.data, codings.len);
            p = append(p, ", ", 2);
        }
        p = append(p, "chunked\r\n", 9);
    }
    if (!ex->response_keep)
        p = append(p, "Connection: close\r\n", 19);
    p = append(p, headers, headers_len);
    p = append(p, "\r\n", 2);
    assert((size_t)(p - head) <= need);
    corral_conn_write(h1->conn, head, (size_t)(p - head));
    if (head != small)
        free(head);
}

void http_response_write(struct http_exchange *ex, const char *data, size_t len)
{
    if (!ex->response_body || len == 0 || ex->response_done)
        return;
    ex->body_sent += len;
    if (!ex->response_chunked) {
        corral_conn_write(ex->h1->conn, data, len);
        return;
    }
    char size_line[24]; /* at most 16 hex digits and CRLF */
    char *p = size_line;
    static const char hex[] = "0123456789abcdef";
    int shift = 60;
    while (shift > 0 && ((len >> shift) & 0xf) == 0)
        shift -= 4;
    for (; shift >= 0; shift -= 4)
        *p++ = hex[(len >> shift) & 0xf];
    p = append(p, "\r\n", 2);
    struct iovec iov[3] = {{size_line, (size_t)(p - size_line)}, {(void *)data, len}, {"\r\n", 2}};
    corral_conn_writev(ex->h1->conn, iov, 3);
}

void http_response_end(struct http_exchange *ex)
{
    struct h1_conn *h1 = ex->h1;
    if (ex->response_done || !ex->response_started)
        return;
    if (ex->response_chunked)
        corral_conn_write(h1->conn, "0\r\n\r\n", 5);
    ex->response_done = true;
    count_response(h1, ex->status);
    if (h1->site->access_log != NULL)
        log_exchange(h1, ex, ex->status);
    if (ex->response_keep) {
        if (ex->request_done)
            h1_finish_exchange(h1);
    } else if (ex->client_closes && ex->request_done) {
        h1_end(h1, false);
    } else {
        h1_close(h1);
    }
}

void http_respond(struct http_exchange *ex, unsigned status, const char *headers,
                  const char *body, size_t body_len)
{
    if (ex->response_started)
        return;
    http_response_begin(ex, status, headers, strlen(headers), (int64_t)body_len);
    http_response_write(ex, body, body_len);
    http_response_end(ex);
}

void http_respond_error(struct http_exchange *ex, unsigned status)
{
    /* 10 digits and a reason of 31 characters at most; cut, never overrun */
    char body[64];
    int n = snprintf(body, sizeof(body), "%u %s\n", status, http_reason(status));
    if (n < 0 || (size_t)n >= sizeof(body))
        n = (int)sizeof(body) - 1;
    http_respond(ex, status, "Content-Type: text/plain\r\n", body, (size_t)n);
}

/* Answers a request that never became an exchange (a malformed head). */
static void h1_reject(struct h1_conn *h1, unsigned status)
{
    h1->in_exchange = true;
    h1->ex = (struct http_exchange){.h1 = h1, .request_done = true, .http10 = true,
                                    .upstream_ns = -1};
    http_respond_error(&h1->ex, status);
    h1_close(h1);
}

void http_exchange_set_data(struct http_exchange *ex, void *data)
{
    ex->data = data;
}

void *http_exchange_data(const struct http_exchange *ex)
{
    return ex->data;
}

bool http_exchange_tls(const struct http_exchange *ex)
{
    return ex->h1->site->tls != NULL;
}

corral_conn *http_exchange_conn(const struct http_exchange *ex)
{
    return ex->h1->conn;
}

bool http_exchange_response_started(const struct http_exchange *ex)
{
    return ex->response_started;
}

/* inet_ntop() formats IPv4 with sprintf, and the proxy needs the address
 * for every request.  `buf` holds INET_ADDRSTRLEN bytes. */
static void format_ipv4(const struct in_addr *in, char *buf)
{
    const unsigned char *octets = (const unsigned char *)&in->s_addr;
    for (int i = 0; i < 4; i++) {
        unsigned octet = octets[i];
        if (octet >= 100)
            *buf++ = (char)('0' + octet / 100);
        if (octet >= 10)
            *buf++ = (char)('0' + octet / 10 % 10);
        *buf++ = (char)('0' + octet % 10);
        *buf++ = i < 3 ? '.' : '\0';
    }
}

void http_client_host(const corral_conn *conn, char *buf, size_t len)
{
    struct sockaddr_storage addr;
    socklen_t addrlen;
    if (len >= 2)
        memcpy(buf, "-", 2);
    if (corral_conn_peer(conn, &addr, &addrlen) != 0)
        return;
    if (addr.ss_family == AF_INET && len >= INET_ADDRSTRLEN)
        format_ipv4(&((struct sockaddr_in *)&addr)->sin_addr, buf);
    else if (addr.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&addr)->sin6_addr, buf, (socklen_t)len);
}

void http_exchange_note_upstream_time(struct http_exchange *ex, uint64_t ns)
{
    ex->upstream_ns = (int64_t)ns;
}

void http_exchange_tunnel(struct http_exchange *ex)
{
    struct h1_conn *h1 = ex->h1;
    h1->tunnel = true;
    corral_conn_set_deadline(h1->conn, 0);
    corral_conn_set_timeouts(h1->conn, 0, 0); /* the protocol inside has its own */
    corral_conn_resume_read(h1->conn);        /* bytes that came early are waiting */
}

/* ------------------------------------------------------- llhttp callbacks */

void http_str_extend(struct http_str *str, const char *at, size_t len)
{
    if (str->data == NULL)
        str->data = at;
    str->len = (size_t)(at + len - str->data);
}

void http_headers_reset(struct http_header_list *list)
{
    list->count = 0;
    list->in_value = false;
}

bool http_headers_add_name(struct http_header_list *list, const char *at, size_t len, size_t limit)
{
    if (list->in_value || list->count == 0) {
        if (list->count == list->cap || list->count == limit)
            return false;
        list->headers[list->count++] = (struct http_header){{NULL, 0}, {NULL, 0}};
        list->in_value = false;
    }
    http_str_extend(&list->headers[list->count - 1].name, at, len);
    return true;
}

void http_headers_add_value(struct http_header_list *list, const char *at, size_t len)
{
    list->in_value = true;
    http_str_extend(&list->headers[list->count - 1].value, at, len);
}

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

bool http_header_lists(struct http_str list, struct http_str token)
{
    const char *p = list.data, *end = list.data + list.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        struct http_str item = http_trim((struct http_str){p, (size_t)(stop - p)});
        if (item.len == token.len && strncasecmp(item.data, token.data, token.len) == 0)
            return true;
        p = stop + 1;
    }
    return false;
}

struct http_str http_trim(struct http_str s)
{
    while (s.len > 0 && (s.data[0] == ' ' || s.data[0] == '\t')) {
        s.data++;
        s.len--;
    }
    while (s.len > 0 && (s.data[s.len - 1] == ' ' || s.data[s.len - 1] == '\t'))
        s.len--;
    return s;
}

/* Transfer-Encoding: only "chunked" is accepted.  A list whose last coding
 * is not chunked leaves the body length unknowable: 400.  Other codings
 * before chunked are valid HTTP but not something to pass on blindly: 501. */
static unsigned check_transfer_encoding(struct http_str value)
{
    struct http_str last = http_trim(value);
    const char *comma = memrchr(value.data, ',', value.len);
    if (comma != NULL)
        last = http_trim((struct http_str){comma + 1, (size_t)(value.data + value.len - comma - 1)});
    if (!http_str_equal_nocase(last, "chunked"))
        return 400;
    return comma != NULL ? 501 : 0;
}

/* RFC 9110 5.6.2: a field name is a token. */
static bool is_token(struct http_str s)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";
    if (s.len == 0)
        return false;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.data[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c != '\0' && strchr(extra, c) != NULL)))
            return false;
    }
    return true;
}

/* RFC 3986 3.2.2: a reg-name's characters (unreserved and sub-delims),
 * without pct-encoded: a percent-encoded host means something different to
 * each reader of it, and no DNS name needs one. */
static bool reg_name_char(char c)
{
    static const char extra[] = "-._~!$&'()*+,;=";
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr(extra, c) != NULL);
}

/* uri-host [":" port] (RFC 9110 7.2, RFC 3986 3.2.2-3.2.3), the form of a
 * Host value and of an absolute-form target's authority, which must be
 * refused with 400 when invalid (RFC 9112 3.2).  The host is a reg-name or
 * an IPv6 address in brackets (no zone, no IPvFuture); the port, digits up
 * to 65535, possibly none.  Sets *host to the host without the port. */
static bool authority_valid(struct http_str authority, struct http_str *host)
{
    if (authority.len == 0) { /* an empty Host: no authority (RFC 9110 7.2) */
        *host = authority;
        return true;
    }
    const char *p = authority.data, *end = p + authority.len;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(end - p));
        /* inet_pton() needs a string: an address longer than any IPv6
         * address's text is refused before it is copied. */
        char address[INET6_ADDRSTRLEN];
        struct in6_addr in6;
        if (close == NULL || (size_t)(close - p - 1) >= sizeof(address))
            return false;
        memcpy(address, p + 1, (size_t)(close - p - 1));
        address[close - p - 1] = '\0';
        if (inet_pton(AF_INET6, address, &in6) != 1)
            return false;
        p = close + 1;
    } else {
        while (p < end && reg_name_char(*p))
            p++;
    }
    *host = (struct http_str){authority.data, (size_t)(p - authority.data)};
    if (p == end)
        return true;
    if (*p != ':' || host->len == 0)
        return false;
    unsigned port = 0;
    for (p++; p < end; p++) {
        if (*p < '0' || *p > '9' || (port = port * 10 + (unsigned)(*p - '0')) > 65535)
            return false;
    }
    return true;
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
    if (!authority_valid(req->authority, &host)) /* userinfo ('@') among others */
        return 400;
    if (host.len == 0 || (path < end && *path == '?'))
        return 400;
    req->target = path < end ? (struct http_str){path, (size_t)(end - path)}
                             : (struct http_str){"/", 1};
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
        .version_minor = parser->http_minor,
        .headers = scratch.list.headers,
        .header_count = scratch.list.count,
        .head = parser->method == HTTP_HEAD,
        .keep_alive = llhttp_should_keep_alive(parser),
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
    req->path = (struct http_str){req->target.data,
                                  query != NULL ? (size_t)(query - req->target.data) : req->target.len};

    int hosts = 0, transfer_encodings = 0;
    for (size_t i = 0; i < scratch.list.count; i++) {
        const struct http_header *h = &scratch.list.headers[i];
        if (!is_token(h->name))
            return 400; /* llhttp lets a space inside a name through */
        if (http_str_equal_nocase(h->name, "host")) {
            hosts++;
            req->host = http_trim(h->value);
        } else if (http_str_equal_nocase(h->name, "transfer-encoding")) {
            if (++transfer_encodings > 1)
                return 400;
            unsigned status = check_transfer_encoding(h->value);
            if (status != 0)
                return status;
            req->chunked = true;
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
    if (req->chunked && req->version_minor == 0)
        return 400;
    /* HTTP/1.1 requires exactly one Host (RFC 9112 3.2). */
    if (hosts > 1 || (hosts == 0 && req->version_minor >= 1))
        return 400;
    /* Host is checked even when an absolute-form target's authority takes
     * its place: RFC 9112 3.2 refuses any invalid Host value. */
    if (!authority_valid(req->host, &req->host))
        return 400;
    if (req->authority.len > 0 && !authority_valid(req->authority, &req->host))
        return 400;
    for (size_t i = 0; i < scratch.list.count && req->upgrade_protocol.len > 0; i++)
        if (http_str_equal_nocase(scratch.list.headers[i].name, "connection") &&
            http_header_lists(scratch.list.headers[i].value, (struct http_str){"upgrade", 7}))
            req->upgrade = true;
    req->content_length = req->chunked ? 0 : parser->content_length;
    req->has_content_length = !req->chunked && (parser->flags & F_CONTENT_LENGTH);
    req->has_body = req->chunked || req->content_length > 0;
    return 0;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The request's strings die with on_request; the log line comes later.
 * Copies them, NUL-separated: remote address, method, target, host, referer,
 * user agent. */
static void log_fields_keep(struct h1_conn *h1, struct http_exchange *ex,
                            const struct http_request *req)
{
    struct http_str referer = {NULL, 0}, agent = {NULL, 0};
    for (size_t i = 0; i < req->header_count; i++) {
        if (http_str_equal_nocase(req->headers[i].name, "referer"))
            referer = req->headers[i].value;
        else if (http_str_equal_nocase(req->headers[i].name, "user-agent"))
            agent = req->headers[i].value;
    }
    char remote[64]; /* http_client_host() writes at most sizeof(remote) */
    http_client_host(h1->conn, remote, sizeof(remote));
    const struct http_str fields[] = {{remote, strlen(remote)}, req->method, req->target,
                                      req->host,                referer,     agent};
    size_t total = 0;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        total += fields[i].len + 1;
    ex->log_fields = malloc(total);
    if (ex->log_fields == NULL)
        return;
    char *p = ex->log_fields;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        memcpy(p, fields[i].data != NULL ? fields[i].data : "", fields[i].len);
        p += fields[i].len;
        *p++ = '\0';
    }
}

static void log_exchange(struct h1_conn *h1, struct http_exchange *ex, unsigned status)
{
    const char *field[6] = {NULL}; /* the six log_fields_keep() copies */
    if (ex->log_fields != NULL) {
        const char *p = ex->log_fields;
        for (int i = 0; i < 6; i++, p += strlen(p) + 1)
            field[i] = p;
    }
    struct access_entry entry = {
        .remote_addr = field[0],
        .method = field[1],
        .target = field[2],
        .host = field[3],
        .referer = field[4],
        .user_agent = field[5],
        .version_minor = ex->http10 ? 0 : 1,
        .status = status,
        .body_bytes_sent = ex->body_sent,
        .request_ns = ex->started_ns ? monotonic_ns() - ex->started_ns : 0,
        .upstream_ns = ex->upstream_ns,
    };
    access_log_write(h1->site->access_log, &entry);
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

    struct http_exchange *ex = &h1->ex;
    *ex = (struct http_exchange){.h1 = h1, .head = req.head, .keep_alive = req.keep_alive,
                                 .client_closes = !req.keep_alive,
                                 .http10 = req.version_minor == 0};
    h1->in_exchange = true;
    ex->upstream_ns = -1;
    if (h1->site->access_log != NULL) {
        ex->started_ns = h1->head_started_ns;
        log_fields_keep(h1, ex, &req);
    }
    if (req.has_body)
        corral_conn_set_timeouts(h1->conn, h1->vhost->limits.body_timeout_ms,
                                 h1->vhost->limits.send_timeout_ms);

    const struct http_location *loc = http_find_location(h1->vhost, req.path.data, req.path.len);
    if (loc == NULL) {
        http_respond_error(ex, 404);
        return 0;
    }
    ex->handler = loc->handler;
    ex->handler_data = loc->handler_data;
    if (req.upgrade && ex->handler->on_tunnel_data == NULL)
        ex->keep_alive = false; /* what follows the head will not be HTTP */
    /* Never to an HTTP/1.0 client, which need not understand a 1xx and
     * sends its body regardless (RFC 9110 10.1.1, 15.2). */
    if (req.expect_continue && req.has_body && req.version_minor >= 1 &&
        ex->handler->on_body != NULL)
        corral_conn_write(h1->conn, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    ex->handler->on_request(ex, &req, loc->handler_data);
    return 0;
}

static int on_body(llhttp_t *parser, const char *at, size_t len)
{
    struct h1_conn *h1 = parser->data;
    struct http_exchange *ex = &h1->ex;
    ex->body_received += len;
    size_t max = h1->vhost->limits.max_body_size;
    if (max > 0 && ex->body_received > max) {
        h1->error_status = 413; /* a chunked body grew past the limit */
        return -1;
    }
    if (ex->handler != NULL && ex->handler->on_body != NULL && !ex->response_done)
        ex->handler->on_body(ex, at, len);
    return 0;
}

static int on_message_complete(llhttp_t *parser)
{
    struct h1_conn *h1 = parser->data;
    struct http_exchange *ex = &h1->ex;
    ex->request_done = true;
    corral_conn_set_timeouts(h1->conn, 0, h1->vhost->limits.send_timeout_ms);
    if (ex->handler != NULL && ex->handler->on_body_end != NULL && !ex->response_done)
        ex->handler->on_body_end(ex);
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

size_t http_head_length(const char *data, size_t len)
{
    const char *p = data, *end = data + len;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        p++;
        if (p < end && *p == '\n')
            return (size_t)(p + 1 - data);
        if (p + 1 < end && p[0] == '\r' && p[1] == '\n')
            return (size_t)(p + 2 - data);
    }
    return 0;
}

/* Every line must end in CRLF, and no line may continue the one before
 * (obs-fold, which llhttp accepts): bare CRs, bare LFs and folded lines are
 * how request smuggling hides a header from one of two parsers. */
bool http_head_lines_valid(const char *head, size_t len)
{
    /* Each CR must start a CRLF not followed by a fold; then the LFs are all
     * the ones those CRLFs end exactly when there are as many LFs as CRs.
     * memchr, because this scans every head byte. */
    const char *end = head + len;
    size_t crs = 0, lfs = 0;
    for (const char *p = head; (p = memchr(p, '\r', (size_t)(end - p))) != NULL; p += 2, crs++) {
        if (p + 1 == end || p[1] != '\n')
            return false;
        if (p + 2 < end && (p[2] == ' ' || p[2] == '\t'))
            return false;
    }
    for (const char *p = head; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
        lfs++;
    return lfs == crs;
}

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

static void h1_parser_free(struct h1_conn *h1)
{
    free(h1->parser);
    h1->parser = NULL;
}

/* Feeds llhttp; returns bytes consumed, or SIZE_MAX after refusing. */
static size_t h1_execute(struct h1_conn *h1, const char *data, size_t len)
{
    llhttp_errno_t err = llhttp_execute(h1->parser, data, len);
    if (err == HPE_OK)
        return len;
    if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) {
        /* The message is complete: the next one starts with a new parser. */
        size_t used = (size_t)(llhttp_get_error_pos(h1->parser) - data);
        if (err == HPE_PAUSED_UPGRADE || h1->parser->upgrade) {
            /* What follows is not HTTP: the connection ends with this
             * exchange, unless a 101 response turns it into a tunnel. */
            h1->ex.keep_alive = false;
        }
        h1_parser_free(h1);
        return used;
    }
    h1_parser_free(h1);
    /* A callback that refused the request said why; llhttp's own errors are
     * all malformed input. */
    unsigned status = h1->error_status != 0 ? h1->error_status : 400;
    if (h1->in_exchange && !h1->ex.response_done) {
        h1->ex.keep_alive = false;
        http_respond_error(&h1->ex, status); /* unless a response is already under way */
        if (h1->ex.handler != NULL && h1->ex.handler->on_abort != NULL)
            h1->ex.handler->on_abort(&h1->ex);
    } else if (!h1->in_exchange) {
        h1_reject(h1, status);
    }
    h1_close(h1);
    return SIZE_MAX;
}

static size_t h1_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->tunnel)
        return h1->ex.handler->on_tunnel_data != NULL
                   ? h1->ex.handler->on_tunnel_data(&h1->ex, data, len)
                   : len;
    size_t used = 0;
    while (used < len && !h1->closed) {
        if (h1->in_exchange && h1->ex.request_done)
            break;
        size_t n;
        if (h1->in_exchange) {
            n = h1_execute(h1, data + used, len - used);
        } else {
            /* Empty lines before a request line are ignored (RFC 9112 2.2),
             * here, so that the checks below see the head itself. */
            while (len - used >= 2 && data[used] == '\r' && data[used + 1] == '\n')
                used += 2;
            if (used == len)
                break;
            const struct http_limits *limits = &h1->vhost->limits;
            if (h1->site->access_log != NULL && !h1->partial_head)
                h1->head_started_ns = monotonic_ns();
            size_t head_len = http_head_length(data + used, len - used);
            if (head_len == 0) {
                if (len - used > limits->max_header_size) {
                    h1_reject(h1, 431);
                    return len;
                }
                if (!h1->partial_head) {
                    h1->partial_head = true;
                    h1_set_deadline(h1, limits->header_timeout_ms);
                }
                break;
            }
            if (head_len > limits->max_header_size) {
                h1_reject(h1, 431);
                return len;
            }
            if (!http_head_lines_valid(data + used, head_len) ||
                !request_line_valid(data + used, head_len)) {
                h1_reject(h1, 400);
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
        if (n == 0 && !h1->in_exchange) {
            /* No progress on a fresh head: never spin on it. */
            h1_reject(h1, 400);
            return len;
        }
        used += n;
        if (h1->in_exchange && h1->ex.request_done && h1->ex.response_done && !h1->closed)
            h1_finish_exchange(h1);
    }
    /* A complete request waits for its response before anything more is
     * read: a pipelined request stays in the socket, and a connection whose
     * request came with the handshake needs no epoll registration at all.
     * A client that closes meanwhile is seen once the response is written. */
    if (h1->in_exchange && h1->ex.request_done && !h1->closed)
        corral_conn_pause_read(conn);
    return used;
}

/* ------------------------------------------------------- connection events */

static void h1_on_deadline(corral_conn *conn)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->partial_head && !h1->in_exchange) {
        count_timeout(h1, HTTP_TIMEOUT_HEADER);
        h1_reject(h1, 408); /* slow or stalled request head */
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
    if (site->tls != NULL && tls_server_accept(site->tls, conn) != 0) {
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
    h1_end(corral_conn_data(conn), false);
}

static void h1_on_drain(corral_conn *conn)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    if (h1->in_exchange && h1->ex.handler != NULL && h1->ex.handler->on_drain != NULL)
        h1->ex.handler->on_drain(&h1->ex);
}

static void h1_on_stop(corral_conn *conn)
{
    struct h1_conn *h1 = corral_conn_data(conn);
    h1->stopping = true;
    if (h1->in_exchange || h1->partial_head || h1->requests == 0)
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
    /* The connection's own timeouts: reading a body, or sending. */
    if (error == -ETIMEDOUT)
        count_timeout(h1, h1->in_exchange && !h1->ex.request_done ? HTTP_TIMEOUT_BODY
                                                                   : HTTP_TIMEOUT_SEND);
    if (h1->in_exchange && !h1->ex.response_done) {
        if (h1->ex.handler != NULL && h1->ex.handler->on_abort != NULL)
            h1->ex.handler->on_abort(&h1->ex);
        if (h1->site->access_log != NULL)
            log_exchange(h1, &h1->ex, h1->ex.response_started ? h1->ex.status : 499);
    }
    free(h1->ex.log_fields);
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

/* ------------------------------------------------------------- handlers */

static void return_on_request(struct http_exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    const struct http_return *ret = data;
    bool redirect = ret->status == 301 || ret->status == 302 || ret->status == 303 ||
                    ret->status == 307 || ret->status == 308;
    if (redirect && ret->text_len > 0) {
        /* As in nginx: a redirect's text is where it points.  The config
         * allows any length: the line is sized from it, on the stack when
         * that fits. */
        char small[512], *location = small;
        size_t len = ret->text_len;
        if (len + sizeof("Location: \r\n") > sizeof(small) &&
            (location = malloc(len + sizeof("Location: \r\n"))) == NULL) {
            http_respond_error(ex, 500);
            return;
        }
        memcpy(location, "Location: ", 10);
        memcpy(location + 10, ret->text, len);
        memcpy(location + 10 + len, "\r\n", 3);
        http_respond(ex, ret->status, location, "", 0);
        if (location != small)
            free(location);
        return;
    }
    http_respond(ex, ret->status, ret->text_len > 0 ? "Content-Type: text/plain\r\n" : "",
                 ret->text, ret->text_len);
}

const struct http_handler http_return_handler = {
    .name = "return",
    .on_request = return_on_request,
};
