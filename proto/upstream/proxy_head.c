/*
 * proxy_head.c: the heads the proxy forwards: the request head for the
 * upstream, rebuilt from the parsed request (never copied raw), and the
 * fields of the upstream's response head that reach the client.
 */
#include "proto/upstream/proxy_head.h"
#include "proto/upstream/proxy_redirect.h"
#include "proto/http/regex.h"
#include "proto/http/uri.h"
#include "proto/http/vars.h"
#include "proto/small_mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The field names the proxy treats apart, each a kind of its own where
 * its rules differ.  Every field of every proxied head is classified once,
 * by its length and then one comparison, rather than compared with each
 * list of names in turn (a dozen comparisons a field). */
enum field {
    FIELD_OTHER,
    FIELD_CONNECTION,
    FIELD_TE,
    FIELD_UPGRADE,
    FIELD_HOP, /* the other connection-specific and framing fields */
    FIELD_HOST,
    FIELD_END_TO_END, /* the other fields never dropped for being listed */
    FIELD_TRAILER,
    FIELD_EXPECT,
    FIELD_X_FORWARDED_FOR,
    FIELD_X_FORWARDED_PROTO,
    FIELD_VIA,
    FIELD_DATE,
    FIELD_SERVER,
};

/* The names of each kind but FIELD_OTHER, by length: at most two share
 * one, and "x-forwarded-proto" (17) is the longest. */
#define FIELD_NAME_MAX 17
static const struct {
    struct http_str name;
    enum field field;
} field_names[FIELD_NAME_MAX + 1][2] = {
    [2] = {{HTTP_STR_LIT("te"), FIELD_TE}},
    [3] = {{HTTP_STR_LIT("via"), FIELD_VIA}},
    [4] = {{HTTP_STR_LIT("host"), FIELD_HOST}, {HTTP_STR_LIT("date"), FIELD_DATE}},
    [6] = {{HTTP_STR_LIT("expect"), FIELD_EXPECT}, {HTTP_STR_LIT("server"), FIELD_SERVER}},
    [7] = {{HTTP_STR_LIT("upgrade"), FIELD_UPGRADE}, {HTTP_STR_LIT("trailer"), FIELD_TRAILER}},
    [10] = {{HTTP_STR_LIT("connection"), FIELD_CONNECTION},
            {HTTP_STR_LIT("keep-alive"), FIELD_HOP}},
    [12] = {{HTTP_STR_LIT("content-type"), FIELD_END_TO_END}},
    [13] = {{HTTP_STR_LIT("cache-control"), FIELD_END_TO_END},
            {HTTP_STR_LIT("content-range"), FIELD_END_TO_END}},
    [14] = {{HTTP_STR_LIT("content-length"), FIELD_HOP},
            {HTTP_STR_LIT("http2-settings"), FIELD_HOP}},
    [15] = {{HTTP_STR_LIT("x-forwarded-for"), FIELD_X_FORWARDED_FOR}},
    [16] = {{HTTP_STR_LIT("proxy-connection"), FIELD_HOP},
            {HTTP_STR_LIT("content-encoding"), FIELD_END_TO_END}},
    [17] = {{HTTP_STR_LIT("transfer-encoding"), FIELD_HOP},
            {HTTP_STR_LIT("x-forwarded-proto"), FIELD_X_FORWARDED_PROTO}},
};

static enum field field_of(struct http_str name)
{
    if (name.len == 0 || name.len > FIELD_NAME_MAX)
        return FIELD_OTHER;
    for (size_t i = 0; i < 2; i++)
        if (http_str_in_nocase(name, &field_names[name.len][i].name, 1))
            return field_names[name.len][i].field;
    return FIELD_OTHER;
}

/* RFC 9110 7.6.1: connection-specific fields never cross a proxy, nor do
 * the fields a Connection header lists.  HTTP2-Settings belongs to an
 * Upgrade to h2c, which never goes on, listed or not (RFC 7540 3.2.1).  The framing fields are
 * dropped always (the proxy frames each message itself); fields meant for every recipient are never
 * dropped for being listed, so that "Connection: close, Host" cannot strip the Host the upstream
 * routes on. Trailer is end to end (RFC 9110 6.6.2): a response's goes on, since the proxy passes
 * the trailer section it announces.  The head's Connection fields are from index `from` on
 * (first_connection()); `field` is field_of(name). */
static bool is_hop_by_hop(struct http_str name, enum field field, const struct http_header *headers,
                          size_t count, size_t from)
{
    switch (field) {
    case FIELD_CONNECTION:
    case FIELD_TE:
    case FIELD_UPGRADE:
    case FIELD_HOP: return true;
    case FIELD_HOST:
    case FIELD_END_TO_END: return false;
    default: break;
    }
    for (size_t i = from; i < count; i++) /* headers[from] is one, when there is one */
        if ((i == from || http_str_equal_nocase(headers[i].name, "connection")) &&
            http_header_lists(headers[i].value, name))
            return true;
    return false;
}

/* Where is_hop_by_hop() starts looking for the Connection fields of a
 * head: the first one's index, or `count` when there is none. */
static size_t first_connection(const struct http_header *headers, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (http_str_equal_nocase(headers[i].name, "connection"))
            return i;
    return count;
}

const char *const proxy_upgrade_default[1] = {"websocket"};

/* One protocol of an Upgrade list, its version aside. */
static bool upgrade_protocol_allowed(const struct proxy_location *loc, struct http_str protocol)
{
    const char *slash = memchr(protocol.data, '/', protocol.len);
    struct http_str name = {protocol.data,
                            slash != NULL ? (size_t)(slash - protocol.data) : protocol.len};
    /* An HTTP version through a tunnel is requests the proxy never reads:
     * h2c smuggling.  No setting lets it through. */
    if (http_str_equal_nocase(name, "h2c") || http_str_equal_nocase(name, "h2") ||
        http_str_equal_nocase(name, "http"))
        return false;
    if (loc->upgrade_any)
        return true;
    for (size_t i = 0; i < loc->upgrade_count; i++)
        if (http_str_equal_nocase(name, loc->upgrades[i]))
            return true;
    return false;
}

bool proxy_head_upgrade_allowed(const struct proxy_location *loc, struct http_str upgrade)
{
    size_t protocols = 0;
    const char *p = upgrade.data, *end = upgrade.data + upgrade.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        struct http_str protocol = http_trim((struct http_str){p, (size_t)(stop - p)});
        p = comma != NULL ? comma + 1 : end;
        if (protocol.len == 0) /* an empty list element (RFC 9110 5.6.1) */
            continue;
        if (!upgrade_protocol_allowed(loc, protocol))
            return false;
        protocols++;
    }
    return protocols > 0;
}

/* `field` is field_of(name). */
static bool hidden(const struct proxy_location *loc, struct http_str name, enum field field)
{
    if (field == FIELD_DATE || field == FIELD_SERVER) /* the proxy sends its own */
        return true;
    for (size_t i = 0; i < loc->hide_header_count; i++)
        if (name.len == loc->hide_headers[i].len &&
            strncasecmp(name.data, loc->hide_headers[i].data, name.len) == 0)
            return true;
    return false;
}

static const struct http_header *set_header(const struct proxy_location *loc, struct http_str name)
{
    for (size_t i = 0; i < loc->set_header_count; i++)
        if (name.len == loc->set_headers[i].name.len &&
            strncasecmp(name.data, loc->set_headers[i].name.data, name.len) == 0)
            return &loc->set_headers[i];
    return NULL;
}

int proxy_head_build(const struct proxy_location *loc, const struct http_request *req,
                     const struct proxy_head_request *how, char **head, size_t *len)
{
    /* Built on the stack, then copied to a block of its size from the
     * thread's small blocks: a buffer grown from nothing went to malloc's
     * arena on every request (realloc and free, 350 instructions). */
    char head_small[1024];
    struct h1_head_buf b;
    http1_client_head_init(&b, head_small, sizeof(head_small));
    char target_small[512];
    struct vars_buf target;
    vars_buf_init(&target, target_small, sizeof(target_small));
    uri_replace_prefix(req, loc->strip, loc->uri, &target);
    b.failed |= target.failed;
    http1_client_head_request_line(&b, req->method, (struct http_str){target.data, target.len});
    vars_buf_free(&target);
    bool has_host = false, te_trailers = false;
    unsigned seen = 0; /* 1 << each field kind the request has */
    size_t connection = first_connection(req->headers, req->header_count);
    for (size_t i = 0; i < req->header_count; i++) {
        const struct http_header *h = &req->headers[i];
        enum field field = field_of(h->name);
        seen |= 1u << field;
        if (field == FIELD_TE && http_header_lists(h->value, (struct http_str){"trailers", 8}))
            te_trailers = true;
        /* A request's trailer section is not passed on (an HTTP/2
         * client's aside, which goes as chunked trailers without this
         * announcement), so neither is the field that announces it. */
        if (is_hop_by_hop(h->name, field, req->headers, req->header_count, connection) ||
            field == FIELD_TRAILER || field == FIELD_EXPECT || field == FIELD_X_FORWARDED_PROTO ||
            field == FIELD_X_FORWARDED_FOR || field == FIELD_VIA ||
            set_header(loc, h->name) != NULL)
            continue;
        if (field == FIELD_HOST) {
            has_host = true;
            if (req->authority.len > 0) { /* the target's authority wins */
                http1_client_head_add_header(&b, h->name, req->authority);
                continue;
            }
        }
        http1_client_head_add_header(&b, h->name, h->value);
    }
    struct vars_ctx ctx = {.ex = how->ex, .req = req, .escape = VARS_HEADER};
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
            http1_client_head_add_header(&b, loc->set_headers[i].name, v);
        vars_buf_free(&value);
    }
    if (!has_host && set_header(loc, (struct http_str){"host", 4}) == NULL) {
        /* An HTTP/1.0 client may send none; HTTP/1.1 needs one: the name
         * proxy_pass gives (the upstream's name, or its address). */
        http1_client_head_add_str(&b, "Host: ");
        if (req->authority.len > 0)
            http1_client_head_add(&b, req->authority.data, req->authority.len);
        else
            http1_client_head_add_str(&b, loc->upstream->name);
        http1_client_head_add(&b, "\r\n", 2);
    }
    /* proxy_set_header wins over the proxy's own forwarding headers; else
     * the client's hops (every such header, in order) are kept and this
     * one appended.  Without proxy_via, the client's Via goes on as it is,
     * as nginx passes it. */
    static const struct {
        struct http_str lower;
        enum field field;
        const char *name, *own;
    } chains[] = {{HTTP_STR_LIT("x-forwarded-for"), FIELD_X_FORWARDED_FOR, "X-Forwarded-For", NULL},
                  {HTTP_STR_LIT("via"), FIELD_VIA, "Via", "1.1 corral"}};
    for (size_t c = 0; c < sizeof(chains) / sizeof(chains[0]); c++) {
        if (set_header(loc, chains[c].lower) != NULL)
            continue;
        /* The client's hops are looked for only when the request has some. */
        size_t hops = seen & (1u << chains[c].field) ? req->header_count : 0;
        if (chains[c].own != NULL && !loc->conf.via) {
            for (size_t i = 0; i < hops; i++)
                if (field_of(req->headers[i].name) == chains[c].field)
                    http1_client_head_add_header(&b, req->headers[i].name, req->headers[i].value);
            continue;
        }
        http1_client_head_add_str(&b, chains[c].name);
        http1_client_head_add(&b, ": ", 2);
        for (size_t i = 0; i < hops; i++) {
            if (field_of(req->headers[i].name) != chains[c].field)
                continue;
            struct http_str previous = http_trim(req->headers[i].value);
            http1_client_head_add(&b, previous.data, previous.len);
            http1_client_head_add(&b, ", ", 2);
        }
        http1_client_head_add_str(&b, chains[c].own != NULL ? chains[c].own : how->client);
        http1_client_head_add(&b, "\r\n", 2);
    }
    /* TE is hop-by-hop, but "trailers" holds for the whole path: the
     * client takes a trailer section and the proxy passes one on, which is
     * what a gRPC backend waits to hear before it sends its status in one.
     * Codings are the proxy's own business and are not passed. */
    if (te_trailers && !how->upgrade)
        http1_client_head_add_str(&b, "TE: trailers\r\nConnection: TE\r\n");
    if (set_header(loc, (struct http_str){"x-forwarded-proto", 17}) == NULL)
        http1_client_head_add_str(&b, how->tls ? "X-Forwarded-Proto: https\r\n"
                                               : "X-Forwarded-Proto: http\r\n");
    http1_client_head_end(&b, how->upgrade ? &req->upgrade_protocol : NULL, how->chunked,
                          req->has_body || req->has_content_length, req->content_length);
    size_t n = b.len;
    char *copy = b.failed ? NULL : small_mem_malloc(n, NULL);
    if (copy != NULL)
        memcpy(copy, b.data, n);
    http1_client_head_free(&b);
    if (copy == NULL)
        return -ENOMEM;
    *head = copy;
    *len = n;
    return 0;
}

void proxy_head_free(char *head)
{
    small_mem_free(head, NULL);
}

/* Whether `name` may be one that proxy_redirect rewrites: a first look
 * that keeps the full comparison off most headers. */
static bool may_redirect(struct http_str name)
{
    return name.len > 0 && (name.data[0] == 'l' || name.data[0] == 'L' || name.data[0] == 'r' ||
                            name.data[0] == 'R');
}

int proxy_head_response(const struct proxy_location *loc, const struct http1_client_head *head,
                        struct vars_ctx *ctx, struct h1_head_buf *out)
{
    struct h1_head_buf b = *out;
    size_t connection = first_connection(head->headers, head->header_count);
    for (size_t i = 0; i < head->header_count; i++) {
        const struct http_header *h = &head->headers[i];
        enum field field = field_of(h->name);
        bool tunnel_header = head->tunnel && (field == FIELD_UPGRADE || field == FIELD_CONNECTION);
        /* hidden() first: it knows Date and Server without reading the
         * Connection fields, which every backend's response has. */
        if (!tunnel_header &&
            (hidden(loc, h->name, field) ||
             is_hop_by_hop(h->name, field, head->headers, head->header_count, connection)))
            continue;
        if (loc->redirects != NULL && may_redirect(h->name)) {
            char small[512];
            struct vars_buf value;
            vars_buf_init(&value, small, sizeof(small));
            /* Header-escaped: a value cannot start a line of its own. */
            enum vars_escape escape = ctx->escape;
            ctx->escape = VARS_HEADER;
            bool rewritten = proxy_redirect_header(loc->redirects, h->name, h->value, ctx, &value);
            ctx->escape = escape;
            b.failed |= value.failed;
            if (rewritten)
                http1_client_head_add_header(&b, h->name, (struct http_str){value.data, value.len});
            vars_buf_free(&value);
            if (rewritten)
                continue;
        }
        http1_client_head_add_header(&b, h->name, h->value);
    }
    *out = b;
    return b.failed ? -ENOMEM : 0;
}
