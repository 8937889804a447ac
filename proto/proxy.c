/*
 * proxy.c: `proxy_pass`.  A request is forwarded on an upstream connection
 * taken from the worker's idle pool or opened for it; its body streams
 * through as it arrives and the response streams back, each side pausing
 * the other when its output backs up.  Nothing ambiguous is forwarded: the
 * client side has already refused every malformed request, and the request
 * head is rebuilt here from parsed fields, never copied raw.
 */
#include "proto/proxy.h"

#include <errno.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define MAX_SERVERS 64
#define RESPONSE_HEADERS_CAP 256
#define REPLAY_MAX (64 * 1024)
/* Interim (1xx) responses allowed before the final one: a few are normal
 * (100 Continue, 103 Early Hints); an endless stream would hold the
 * exchange forever, each one resetting the read timeout. */
#define MAX_INTERIM_RESPONSES 16
/* At most one log line a second per worker about local resource failures:
 * while descriptors run out, every request would log one. */
#define LOCAL_ERROR_LOG_MS 1000

const char *const proxy_error_kind_names[PROXY_ERROR_KINDS] = {
    [PROXY_ERROR_CONNECT] = "connect",
    [PROXY_ERROR_TIMEOUT] = "timeout",
    [PROXY_ERROR_RESET] = "reset",
    [PROXY_ERROR_INVALID] = "invalid_response",
    [PROXY_ERROR_TLS] = "tls",
};

struct upstream_server {
    char *address;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    unsigned weight, max_fails;
    uint32_t fail_timeout_ms;
};

struct upstream_conn;

/* A worker's view of one server: balancing, health and its idle pool. */
struct server_state {
    int current_weight; /* smooth weighted round robin */
    unsigned active;    /* requests in flight (least_conn) */
    unsigned fails;
    uint64_t down_until; /* loop clock ms */
    struct upstream_conn *idle;
};

struct upstream_worker {
    struct server_state servers[MAX_SERVERS];
    unsigned idle_count;
    uint64_t local_error_logged_ms; /* loop clock; 0: never */
    _Atomic uint64_t errors[PROXY_ERROR_KINDS];
} __attribute__((aligned(64)));

struct proxy_upstream {
    char *name;
    struct upstream_server *servers;
    size_t server_count;
    enum proxy_balance balance;
    unsigned keepalive;
    uint32_t idle_timeout_ms;
    unsigned worker_count;
    struct upstream_worker *workers;
    struct tls_client *tls; /* NULL: plain HTTP */
};

/* One upstream connection: serving an exchange, or idle in a pool. */
struct upstream_conn {
    corral_conn *conn;
    struct proxy_upstream *upstream;
    struct upstream_worker *worker;
    unsigned server;
    struct proxy_exchange *px; /* NULL while idle */
    llhttp_t parser;
    bool connected;
    bool reused;     /* served an earlier request */
    bool head_done;  /* the response head has been parsed */
    bool tunnel;     /* after 101: a byte pipe to the client */
    unsigned interim; /* 1xx responses to the current request */
    /* The response head, built and held back until the rest of the read
     * that completed it has parsed: up to then nothing has reached the
     * client, and an error still gets a clean 502 (see uc_on_data). */
    struct {
        bool set;
        unsigned status;
        char *headers;
        size_t headers_len;
        int64_t length;
        struct http_str codings; /* points into the input being read */
    } pending;
    struct upstream_conn *idle_next, *idle_prev;
};

struct proxy_exchange {
    struct http_exchange *ex;
    const struct proxy_location *loc;
    struct upstream_conn *uc;
    char *head; /* the request head as forwarded, kept for a retry */
    size_t head_len;
    char client[80]; /* the client's address, for X-Forwarded-For and hash */
    uint64_t tried; /* servers tried, as bits */
    bool idempotent;
    bool chunked;       /* the request body goes out chunked */
    bool body_started;  /* request body bytes went to the upstream: no retry */
    bool request_sent;  /* the whole request went to the upstream */
    bool head_request;
    bool upgrade;       /* the client asked to switch protocols (WebSocket) */
    /* Chunked, or longer than REPLAY_MAX: it could not be sent again, so it
     * goes on a new connection, which the upstream cannot have closed
     * already as it may a pooled one. */
    bool body_beyond_replay;
    uint64_t started_ms; /* loop clock, for $upstream_response_time */
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

/* ---------------------------------------------------------------- upstreams */

int proxy_upstream_new(const struct proxy_upstream_conf *conf, unsigned workers,
                       struct proxy_upstream **out)
{
    if (conf->server_count == 0 || conf->server_count > MAX_SERVERS)
        return -EINVAL;
    struct proxy_upstream *up = calloc(1, sizeof(*up));
    if (up == NULL)
        return -ENOMEM;
    *up = (struct proxy_upstream){
        .balance = conf->balance,
        .keepalive = conf->keepalive,
        .idle_timeout_ms = conf->idle_timeout_ms,
        .worker_count = workers,
    };
    up->name = strdup(conf->name);
    up->servers = calloc(conf->server_count, sizeof(*up->servers));
    up->workers = aligned_alloc(64, workers * sizeof(*up->workers));
    if (up->name == NULL || up->servers == NULL || up->workers == NULL)
        goto nomem;
    memset(up->workers, 0, workers * sizeof(*up->workers));
    for (size_t i = 0; i < conf->server_count; i++) {
        struct upstream_server *server = &up->servers[i];
        const struct proxy_server_conf *sc = &conf->servers[i];
        up->server_count++;
        server->address = strdup(sc->address);
        if (server->address == NULL)
            goto nomem;
        if (corral_parse_address(sc->address, &server->addr, &server->addrlen) != 0) {
            proxy_upstream_free(up);
            return -EINVAL;
        }
        server->weight = sc->weight > 0 ? sc->weight : 1;
        server->max_fails = sc->max_fails;
        server->fail_timeout_ms = sc->fail_timeout_ms;
    }
    up->tls = conf->tls;
    *out = up;
    return 0;

nomem:
    proxy_upstream_free(up);
    return -ENOMEM;
}

void proxy_upstream_free(struct proxy_upstream *upstream)
{
    if (upstream == NULL)
        return;
    for (size_t i = 0; i < upstream->server_count; i++)
        free(upstream->servers[i].address);
    free(upstream->servers);
    free(upstream->workers);
    free(upstream->name);
    tls_client_free(upstream->tls);
    free(upstream);
}

const char *proxy_upstream_name(const struct proxy_upstream *upstream)
{
    return upstream->name;
}

uint64_t proxy_upstream_errors(const struct proxy_upstream *upstream, enum proxy_error_kind kind)
{
    uint64_t sum = 0;
    for (unsigned w = 0; w < upstream->worker_count; w++)
        sum += atomic_load_explicit(&upstream->workers[w].errors[kind], memory_order_relaxed);
    return sum;
}

static void count_error(struct upstream_worker *worker, enum proxy_error_kind kind)
{
    _Atomic uint64_t *counter = &worker->errors[kind];
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* ---------------------------------------------------------------- balancing */

static uint32_t hash_text(const char *text)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *text != '\0'; text++)
        h = (h ^ (uint8_t)*text) * 16777619u;
    return h;
}

/* Picks a server not yet tried and not marked down, or -1. */
static int pick_server(struct proxy_upstream *up, struct upstream_worker *worker,
                       const struct proxy_exchange *px, uint64_t now)
{
    int best = -1;
    int total = 0;
    if (up->balance == PROXY_BALANCE_HASH) {
        /* The same client address lands on the same server while it is up;
         * otherwise the next one in weight order. */
        unsigned weights = 0;
        for (size_t i = 0; i < up->server_count; i++)
            weights += up->servers[i].weight;
        unsigned point = hash_text(px->client) % weights;
        size_t start = 0;
        for (; start < up->server_count && point >= up->servers[start].weight; start++)
            point -= up->servers[start].weight;
        for (size_t n = 0; n < up->server_count; n++) {
            size_t i = (start + n) % up->server_count;
            if (!(px->tried & (1ull << i)) && worker->servers[i].down_until <= now)
                return (int)i;
        }
        return -1;
    }
    for (size_t i = 0; i < up->server_count; i++) {
        struct server_state *state = &worker->servers[i];
        if ((px->tried & (1ull << i)) || state->down_until > now)
            continue;
        int weight = (int)up->servers[i].weight;
        state->current_weight += weight;
        total += weight;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        struct server_state *b = &worker->servers[best];
        if (up->balance == PROXY_BALANCE_LEAST_CONN) {
            /* Fewest requests in flight per unit of weight; ties go round robin. */
            uint64_t mine = (uint64_t)state->active * up->servers[best].weight;
            uint64_t theirs = (uint64_t)b->active * up->servers[i].weight;
            if (mine < theirs || (mine == theirs && state->current_weight > b->current_weight))
                best = (int)i;
        } else if (state->current_weight > b->current_weight) {
            best = (int)i;
        }
    }
    if (best >= 0)
        worker->servers[best].current_weight -= total;
    return best;
}

static void server_failed(struct proxy_upstream *up, struct upstream_worker *worker,
                          unsigned server, uint64_t now)
{
    struct server_state *state = &worker->servers[server];
    const struct upstream_server *conf = &up->servers[server];
    if (conf->max_fails == 0)
        return;
    if (++state->fails >= conf->max_fails) {
        state->down_until = now + conf->fail_timeout_ms;
        state->fails = 0;
    }
}

/* Out of descriptors, buffers, memory or local ports: this host's
 * trouble, not the upstream's, and no other server would fare better. */
static bool local_resource_error(int err)
{
    return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM ||
           err == -EADDRNOTAVAIL;
}

/* ------------------------------------------------------- upstream connections */

static void pool_remove(struct upstream_conn *uc)
{
    struct server_state *state = &uc->worker->servers[uc->server];
    if (uc->idle_prev != NULL)
        uc->idle_prev->idle_next = uc->idle_next;
    else if (state->idle == uc)
        state->idle = uc->idle_next;
    else
        return; /* not in the pool */
    if (uc->idle_next != NULL)
        uc->idle_next->idle_prev = uc->idle_prev;
    uc->idle_next = uc->idle_prev = NULL;
    uc->worker->idle_count--;
}

/* Returns a connection whose exchange finished cleanly to the pool, or
 * closes it when the pool is full or the worker is stopping.  Nothing more
 * is sent on a connection closed here and nothing it sends matters, so it
 * does not linger. */
static void pool_release(struct upstream_conn *uc)
{
    struct proxy_upstream *up = uc->upstream;
    uc->px = NULL;
    /* A stopping worker (a graceful stop or a reload) would wait its whole
     * drain timeout for pooled connections that have nothing left to do. */
    corral_worker *worker = corral_conn_worker(uc->conn);
    if ((worker != NULL && corral_worker_stopping(worker)) ||
        uc->worker->idle_count >= up->keepalive) {
        corral_conn_close_no_linger(uc->conn);
        return;
    }
    struct server_state *state = &uc->worker->servers[uc->server];
    uc->reused = true;
    uc->head_done = false;
    uc->interim = 0;
    uc->idle_prev = NULL;
    uc->idle_next = state->idle;
    if (state->idle != NULL)
        state->idle->idle_prev = uc;
    state->idle = uc;
    uc->worker->idle_count++;
    llhttp_reset(&uc->parser);
    corral_conn_resume_read(uc->conn); /* it may have been paused for a slow client */
    corral_conn_set_timeouts(uc->conn, up->idle_timeout_ms, 0);
}

/* Detaches the connection from its exchange for good.  A tunnel closes
 * gracefully, so what the other side sent last still arrives. */
static void uc_detach(struct upstream_conn *uc)
{
    if (uc->px != NULL) {
        uc->px->uc = NULL;
        uc->px = NULL;
    }
    if (uc->tunnel)
        corral_conn_close(uc->conn);
    else
        corral_conn_abort(uc->conn, 0);
}

/* Response headers, per thread: filled during one llhttp_execute over a
 * complete head. */
static _Thread_local struct http_header response_slots[RESPONSE_HEADERS_CAP];
static _Thread_local struct http_header_list response_headers;

static int rsp_on_message_begin(llhttp_t *parser)
{
    (void)parser;
    response_headers = (struct http_header_list){.headers = response_slots,
                                                 .cap = RESPONSE_HEADERS_CAP};
    return 0;
}

static int rsp_on_header_field(llhttp_t *parser, const char *at, size_t len)
{
    (void)parser;
    return http_headers_add_name(&response_headers, at, len, RESPONSE_HEADERS_CAP) ? 0 : -1;
}

static int rsp_on_header_value(llhttp_t *parser, const char *at, size_t len)
{
    (void)parser;
    http_headers_add_value(&response_headers, at, len);
    return 0;
}

/* Backpressure between the two sides: while `out` is over its own high
 * watermark, stop reading `in`; `out`'s drain resumes it. */
static void pause_if_backed_up(corral_conn *out, corral_conn *in)
{
    if (corral_conn_backed_up(out))
        corral_conn_pause_read(in);
}

/* RFC 9110 7.6.1: connection-specific fields never cross a proxy, nor do
 * the fields a Connection header lists.  The framing fields are dropped
 * always (the proxy frames each message itself); fields meant for every
 * recipient are never dropped for being listed, so that
 * "Connection: close, Host" cannot strip the Host the upstream routes on. */
static bool is_hop_by_hop(struct http_str name, const struct http_header *headers, size_t count)
{
    static const char *const hop[] = {"connection", "keep-alive",        "proxy-connection",
                                      "te",         "trailer",           "upgrade",
                                      "transfer-encoding", "content-length"};
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

struct text_buf {
    char *data;
    size_t len, cap;
    bool failed;
};

static void buf_add(struct text_buf *b, const char *data, size_t len)
{
    if (b->failed || len == 0) /* data may be NULL then */
        return;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + len)
            cap *= 2;
        char *grown = realloc(b->data, cap);
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

static void buf_add_str(struct text_buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

static void buf_add_header(struct text_buf *b, struct http_str name, struct http_str value)
{
    buf_add(b, name.data, name.len);
    buf_add(b, ": ", 2);
    buf_add(b, value.data, value.len);
    buf_add(b, "\r\n", 2);
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

/* RFC 9110 5.1: a field name is a token.  llhttp 8 lets a space inside
 * a name through ("X A: b"), which another hop may read otherwise. */
static bool field_name_valid(struct http_str name)
{
    if (name.len == 0)
        return false;
    for (size_t i = 0; i < name.len; i++) {
        unsigned char c = (unsigned char)name.data[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL)))
            return false;
    }
    return true;
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
    struct upstream_conn *uc = parser->data;
    struct proxy_exchange *px = uc->px;
    unsigned status = parser->status_code;
    for (size_t i = 0; i < response_headers.count; i++)
        if (!field_name_valid(response_headers.headers[i].name))
            return -1;
    if (status == 101) {
        /* A switch nobody asked for, or one that does not say to what (RFC
         * 9110 15.2.2 requires Upgrade): llhttp would not take it for an
         * upgrade either, and parse on as HTTP what the backend means as
         * tunnel bytes. */
        if (!px->upgrade || !has_upgrade_header())
            return -1;
        uc->tunnel = true; /* switching protocols: see uc_on_data */
    } else if (status < 200) {
        /* Interim (100 Continue): the client already had its own. */
        return ++uc->interim > MAX_INTERIM_RESPONSES ? -1 : 0;
    }
    uc->head_done = true;
    uc->worker->servers[uc->server].fails = 0;
    px_drop_replay(px);

    struct text_buf headers = {0};
    for (size_t i = 0; i < response_headers.count; i++) {
        const struct http_header *h = &response_headers.headers[i];
        bool tunnel_header = uc->tunnel && (http_str_equal_nocase(h->name, "upgrade") ||
                                            http_str_equal_nocase(h->name, "connection"));
        if (tunnel_header || (!is_hop_by_hop(h->name, response_headers.headers,
                                             response_headers.count) &&
                              !hidden(px->loc, h->name)))
            buf_add_header(&headers, h->name, h->value);
    }
    if (headers.failed) {
        free(headers.data);
        return -1;
    }
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
        struct http_str last = comma != NULL
                                   ? http_trim((struct http_str){comma + 1,
                                                                 (size_t)(codings.data + codings.len - comma - 1)})
                                   : codings;
        if (http_str_equal_nocase(last, "chunked"))
            codings = comma != NULL ? http_trim((struct http_str){codings.data,
                                                                  (size_t)(comma - codings.data)})
                                    : (struct http_str){NULL, 0};
    }
    uc->pending.set = true;
    uc->pending.status = status;
    uc->pending.headers = headers.data;
    uc->pending.headers_len = headers.len;
    uc->pending.length = length;
    uc->pending.codings = codings;
    corral_conn_set_timeouts(uc->conn, px->loc->read_timeout_ms, px->loc->send_timeout_ms);
    /* 1: no body, whatever the headers say, for the response to a HEAD and
     * for 204 and 304 (llhttp leaves that to its caller). */
    return px->head_request || status == 204 || status == 304 ? 1 : 0;
}

/* Sends the head held back by rsp_on_headers_complete to the client. */
static void pending_head_send(struct upstream_conn *uc)
{
    if (!uc->pending.set)
        return;
    http_response_begin_coded(uc->px->ex, uc->pending.status,
                              uc->pending.headers != NULL ? uc->pending.headers : "",
                              uc->pending.headers_len, uc->pending.length, uc->pending.codings);
    free(uc->pending.headers);
    uc->pending.set = false;
    uc->pending.headers = NULL;
}

static void pending_head_drop(struct upstream_conn *uc)
{
    free(uc->pending.headers);
    uc->pending.set = false;
    uc->pending.headers = NULL;
}

static int check_on_message_complete(llhttp_t *parser)
{
    (void)parser;
    return HPE_PAUSED;
}

/* Whether the body bytes after a head parse up to the end of this read or
 * of the message, on a copy of the parser (llhttp keeps all its state in
 * the struct) that calls nothing back. */
static bool rest_parses(const struct upstream_conn *uc, const char *data, size_t len)
{
    static const llhttp_settings_t check_settings = {
        .on_message_complete = check_on_message_complete,
    };
    llhttp_t copy = uc->parser;
    copy.settings = (void *)&check_settings;
    llhttp_errno_t err = llhttp_execute(&copy, data, len);
    return err == HPE_OK || err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE;
}

/* RFC 9112 4: "HTTP/1.x 3DIGIT reason": a version this proxy speaks, a code
 * a client can act on (100-599: llhttp takes any), and a reason of visible
 * characters, spaces and tabs.  `head` passed http_head_lines_valid(), so
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
    struct upstream_conn *uc = parser->data;
    struct http_exchange *ex = uc->px->ex;
    http_response_write(ex, at, len);
    pause_if_backed_up(http_exchange_conn(ex), uc->conn);
    return 0;
}

static int rsp_on_message_complete(llhttp_t *parser)
{
    struct upstream_conn *uc = parser->data;
    if (!uc->head_done)
        return 0; /* the end of a 1xx: the real response follows */
    return uc->tunnel ? 0 : HPE_PAUSED; /* llhttp pauses for an upgrade itself */
}

/* After 101: bytes pass through raw in both directions. */
static size_t tunnel_to_client(struct upstream_conn *uc, const char *data, size_t len)
{
    corral_conn *client = http_exchange_conn(uc->px->ex);
    corral_conn_write(client, data, len);
    pause_if_backed_up(client, uc->conn);
    return len;
}

static const llhttp_settings_t response_settings = {
    .on_message_begin = rsp_on_message_begin,
    .on_header_field = rsp_on_header_field,
    .on_header_value = rsp_on_header_value,
    .on_headers_complete = rsp_on_headers_complete,
    .on_body = rsp_on_body,
    .on_message_complete = rsp_on_message_complete,
};

static size_t uc_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct upstream_conn *uc = corral_conn_data(conn);
    struct proxy_exchange *px = uc->px;
    if (px == NULL) {
        corral_conn_abort(conn, 0); /* an idle connection must not talk */
        return len;
    }
    if (uc->tunnel && uc->parser.error == HPE_PAUSED_UPGRADE)
        return tunnel_to_client(uc, data, len);
    /* Heads are parsed only when complete, one at a time: an interim
     * response (100 Continue) may be followed by part of the final head. */
    size_t limit =
        px->loc->response_head_limit > 0 ? px->loc->response_head_limit : PROXY_RESPONSE_HEAD_LIMIT;
    size_t used = 0;
    llhttp_errno_t err = HPE_OK;
    while (!uc->head_done && err == HPE_OK) {
        size_t head = http_head_length(data + used, len - used);
        if (head == 0) {
            if (len - used > limit) {
                px_fail(px, PROXY_ERROR_INVALID);
                return len;
            }
            return used; /* wait for the whole head */
        }
        if (head > limit || !http_head_lines_valid(data + used, head) ||
            !status_line_valid(data + used, head)) {
            px_fail(px, PROXY_ERROR_INVALID);
            return len;
        }
        err = llhttp_execute(&uc->parser, data + used, head);
        if (uc->px == NULL)
            return len; /* the exchange failed inside a callback */
        if (err == HPE_OK)
            used += head;
    }
    if (uc->pending.set) {
        /* The head is still only here: if what follows it in this read is
         * malformed (a bad first chunk), the client gets a 502 rather than
         * a head and a reset. */
        if (err == HPE_OK && used < len && !rest_parses(uc, data + used, len - used)) {
            px_fail(px, PROXY_ERROR_INVALID);
            return len;
        }
        if (err == HPE_OK || err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE)
            pending_head_send(uc);
    }
    if (err == HPE_OK) {
        if (used == len)
            return len;
        err = llhttp_execute(&uc->parser, data + used, len - used);
        if (uc->px == NULL || err == HPE_OK)
            return len;
    }
    if (err == HPE_PAUSED_UPGRADE && uc->tunnel) {
        /* The 101 head went to the client; the client side turns raw too,
         * and whatever followed the head here is already tunnel data. */
        used = (size_t)(llhttp_get_error_pos(&uc->parser) - data);
        corral_conn_set_timeouts(conn, 0, 0);
        http_exchange_tunnel(px->ex);
        return used + tunnel_to_client(uc, data + used, len - used);
    }
    if (err == HPE_PAUSED) {
        used = (size_t)(llhttp_get_error_pos(&uc->parser) - data);
        bool reusable = llhttp_should_keep_alive(&uc->parser) && used == len && px->request_sent;
        llhttp_resume(&uc->parser);
        note_upstream_time(px);
        http_response_end(px->ex);
        px->uc = NULL;
        uc->worker->servers[uc->server].active--;
        if (reusable)
            pool_release(uc);
        else
            uc_detach(uc);
        px_finish(px);
        return len;
    }
    px_fail(px, PROXY_ERROR_INVALID);
    return len;
}

/* proxy_read_timeout counts once the whole request is out, as in nginx:
 * an upload that keeps moving is governed by the send timeout alone. */
static void uc_set_timeouts(struct upstream_conn *uc)
{
    const struct proxy_exchange *px = uc->px;
    if (px == NULL)
        return; /* pooled: the pool's idle timeout applies */
    corral_conn_set_timeouts(uc->conn, px->request_sent ? px->loc->read_timeout_ms : 0,
                             px->loc->send_timeout_ms);
}

static void uc_on_open(corral_conn *conn)
{
    struct upstream_conn *uc = corral_conn_data(conn);
    uc->connected = true;
    if (uc->upstream->tls != NULL && tls_client_connect(uc->upstream->tls, conn, uc->server) != 0) {
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    if (uc->px != NULL)
        px_drop_replay(uc->px); /* what was queued goes out now */
    uc_set_timeouts(uc);
}

static void uc_on_eof(corral_conn *conn)
{
    struct upstream_conn *uc = corral_conn_data(conn);
    struct proxy_exchange *px = uc->px;
    if (px != NULL && uc->tunnel) {
        /* The upstream ended the tunnel: the client's side ends after what
         * is queued for it. */
        corral_conn_close(http_exchange_conn(px->ex));
        corral_conn_close(conn);
        return;
    }
    if (px != NULL && uc->head_done && !(uc->parser.flags & (F_CHUNKED | F_CONTENT_LENGTH))) {
        /* A body delimited by the close: complete now. */
        llhttp_finish(&uc->parser);
        note_upstream_time(px);
        http_response_end(px->ex);
        px->uc = NULL;
        uc->worker->servers[uc->server].active--;
        uc->px = NULL;
        corral_conn_close(conn);
        px_finish(px);
        return;
    }
    corral_conn_abort(conn, px != NULL ? -ECONNRESET : 0);
}

static void uc_on_drain(corral_conn *conn)
{
    struct upstream_conn *uc = corral_conn_data(conn);
    if (uc->px != NULL)
        corral_conn_resume_read(http_exchange_conn(uc->px->ex));
}

static void uc_on_close(corral_conn *conn, int error)
{
    struct upstream_conn *uc = corral_conn_data(conn);
    pool_remove(uc);
    pending_head_drop(uc);
    struct proxy_exchange *px = uc->px;
    if (px != NULL && uc->tunnel) {
        px->uc = NULL;
        uc->worker->servers[uc->server].active--;
        corral_conn_close(http_exchange_conn(px->ex)); /* its on_abort frees px */
    } else if (px != NULL && local_resource_error(error)) {
        px_fail_local(px, error); /* detaches uc from px */
    } else if (px != NULL) {
        enum proxy_error_kind kind = error == -ETIMEDOUT ? PROXY_ERROR_TIMEOUT
                                     : !uc->connected   ? PROXY_ERROR_CONNECT
                                     : error == -EPROTO ? PROXY_ERROR_TLS
                                                        : PROXY_ERROR_RESET;
        px_fail(px, kind); /* detaches uc from px */
    }
    free(uc);
}

/* A stopping worker waits for its connections: idle pooled ones have
 * nothing to finish, and busy ones close once their exchange is done. */
static void uc_on_stop(corral_conn *conn)
{
    struct upstream_conn *uc = corral_conn_data(conn);
    if (uc->px == NULL)
        corral_conn_close_no_linger(conn);
}

static const struct corral_conn_handler upstream_handler = {
    .on_stop = uc_on_stop,
    .on_open = uc_on_open,
    .on_data = uc_on_data,
    .on_eof = uc_on_eof,
    .on_drain = uc_on_drain,
    .on_close = uc_on_close,
};

/* Whether an idle plain connection has nothing unread and no end of
 * stream waiting in the kernel, where the loop may not have seen it yet:
 * bytes there are a stray response, and would be read as the answer to the
 * next request.  (Over TLS the upstream may send records of its own, such as
 * session tickets, so only the loop's reads judge those.) */
static bool idle_conn_quiet(const struct upstream_conn *uc)
{
    if (uc->upstream->tls != NULL)
        return true;
    char byte;
    return recv(corral_conn_fd(uc->conn), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == -1 &&
           (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Sets *out to an idle pooled connection to `server` when `pooled` allows,
 * or to a new one for `loc`.  Returns 0 or corral_connect()'s -errno
 * (-ENOMEM if the connection's state cannot be allocated). */
static int uc_get(const struct proxy_location *loc, struct upstream_worker *worker, unsigned server,
                  bool pooled, corral_loop *loop, struct upstream_conn **out)
{
    struct proxy_upstream *up = loc->upstream;
    struct upstream_conn *uc;
    while (pooled && (uc = worker->servers[server].idle) != NULL) {
        pool_remove(uc);
        if (idle_conn_quiet(uc)) {
            *out = uc;
            return 0;
        }
        corral_conn_abort(uc->conn, 0);
    }
    uc = calloc(1, sizeof(*uc));
    if (uc == NULL)
        return -ENOMEM;
    *uc = (struct upstream_conn){.upstream = up, .worker = worker, .server = server};
    llhttp_init(&uc->parser, HTTP_RESPONSE, &response_settings);
    uc->parser.data = uc;
    const struct upstream_server *s = &up->servers[server];
    int err = corral_connect(loop, (const struct sockaddr *)&s->addr, s->addrlen, &upstream_handler,
                             uc, &uc->conn);
    if (err != 0) {
        free(uc);
        return err;
    }
    corral_conn_set_timeouts(uc->conn, loc->connect_timeout_ms, loc->send_timeout_ms);
    *out = uc;
    return 0;
}

/* ----------------------------------------------------------------- exchanges */

static struct upstream_worker *px_worker(const struct proxy_exchange *px)
{
    corral_worker *worker = corral_conn_worker(http_exchange_conn(px->ex));
    return &px->loc->upstream->workers[worker != NULL ? corral_worker_index(worker) : 0];
}

static void note_upstream_time(struct proxy_exchange *px)
{
    uint64_t now = corral_loop_now(corral_conn_loop(http_exchange_conn(px->ex)));
    http_exchange_note_upstream_time(px->ex, (now - px->started_ms) * 1000000u);
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
    corral_conn_writev(px->uc->conn, iov, count);
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

static void px_finish(struct proxy_exchange *px)
{
    http_exchange_set_data(px->ex, NULL);
    free(px->replay);
    free(px->head);
    free(px);
}

/* Logs a local resource failure (at most once a second per worker: while
 * descriptors run out, every request would log one). */
static void note_local_error(struct proxy_exchange *px, unsigned server, int err)
{
    struct upstream_worker *worker = px_worker(px);
    uint64_t now = corral_loop_now(corral_conn_loop(http_exchange_conn(px->ex)));
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
 * server is left; or a local resource error (see local_resource_error()),
 * logged here, which ends the attempts. */
static int px_send(struct proxy_exchange *px)
{
    struct proxy_upstream *up = px->loc->upstream;
    struct upstream_worker *worker = px_worker(px);
    corral_loop *loop = corral_conn_loop(http_exchange_conn(px->ex));
    for (;;) {
        int server = pick_server(up, worker, px, corral_loop_now(loop));
        if (server < 0)
            return -EHOSTUNREACH;
        px->tried |= 1ull << server;
        struct upstream_conn *uc = NULL;
        int err = uc_get(px->loc, worker, (unsigned)server, !px->body_beyond_replay, loop, &uc);
        if (err != 0 && local_resource_error(err)) {
            note_local_error(px, (unsigned)server, err);
            return err;
        }
        if (err != 0) {
            count_error(worker, PROXY_ERROR_CONNECT);
            server_failed(up, worker, (unsigned)server, corral_loop_now(loop));
            continue;
        }
        uc->px = px;
        px->uc = uc;
        worker->servers[server].active++;
        if (uc->connected)
            uc_set_timeouts(uc);
        corral_conn_write(uc->conn, px->head, px->head_len);
        if (px->replay_len > 0)
            corral_conn_write(uc->conn, px->replay, px->replay_len);
        /* The body is kept for a second attempt while nothing is known to
         * have reached the upstream: until a new connection is up, and
         * until a pooled one (possibly closed already) answers. */
        if (!uc->connected || uc->reused)
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
    return local_resource_error(err) ? 503 : 502;
}

/* This host failed the exchange (out of memory or descriptors): it is not
 * the upstream's fault, so nothing counts against the server. */
static void px_fail_local(struct proxy_exchange *px, int err)
{
    struct upstream_conn *uc = px->uc;
    if (uc != NULL) {
        note_local_error(px, uc->server, err);
        px_worker(px)->servers[uc->server].active--;
        uc_detach(uc);
    }
    if (http_exchange_response_started(px->ex)) {
        corral_conn_abort(http_exchange_conn(px->ex), -ECONNRESET);
    } else {
        note_upstream_time(px);
        http_respond_error(px->ex, 503);
    }
    px_finish(px);
}

/* The upstream failed this exchange: try another server when that is safe,
 * else answer 502/504, or cut the client off if its response had begun. */
static void px_fail(struct proxy_exchange *px, enum proxy_error_kind kind)
{
    struct proxy_upstream *up = px->loc->upstream;
    struct upstream_worker *worker = px_worker(px);
    corral_loop *loop = corral_conn_loop(http_exchange_conn(px->ex));
    struct upstream_conn *uc = px->uc;
    unsigned server = uc != NULL ? uc->server : 0;
    bool stale = uc != NULL && uc->reused && !uc->head_done && kind == PROXY_ERROR_RESET;
    if (uc != NULL) {
        worker->servers[uc->server].active--;
        uc_detach(uc);
    }
    if (!stale) {
        count_error(worker, kind);
        if (kind == PROXY_ERROR_CONNECT || kind == PROXY_ERROR_TIMEOUT || kind == PROXY_ERROR_TLS)
            server_failed(up, worker, server, corral_loop_now(loop));
    }
    if (http_exchange_response_started(px->ex)) {
        corral_conn_abort(http_exchange_conn(px->ex), -ECONNRESET);
        px_finish(px);
        return;
    }
    if (stale)
        px->tried &= ~(1ull << server);
    /* A connection that never opened, or a pooled one the upstream had
     * closed, received nothing: any request may go again, with its body if
     * that was kept.  Other failures are retried for idempotent requests. */
    bool nothing_sent = stale || kind == PROXY_ERROR_CONNECT;
    bool body_resendable = !px->body_started || (nothing_sent && px->replay_ok);
    int err = -EHOSTUNREACH;
    if ((nothing_sent || (px->idempotent && kind != PROXY_ERROR_INVALID)) && body_resendable) {
        err = px_send(px);
        if (err == 0)
            return;
    }
    note_upstream_time(px);
    http_respond_error(px->ex, kind == PROXY_ERROR_TIMEOUT ? 504 : send_failure_status(err));
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
    struct text_buf b = {0};
    buf_add(&b, req->method.data, req->method.len);
    buf_add(&b, " ", 1);
    buf_add(&b, req->target.data, req->target.len);
    buf_add(&b, " HTTP/1.1\r\n", 11);
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
                buf_add_header(&b, h->name, req->authority);
                continue;
            }
        }
        buf_add_header(&b, h->name, h->value);
    }
    for (size_t i = 0; i < loc->set_header_count; i++)
        if (loc->set_headers[i].value.len > 0)
            buf_add_header(&b, loc->set_headers[i].name, loc->set_headers[i].value);
    if (!has_host && set_header(loc, (struct http_str){"host", 4}) == NULL) {
        /* An HTTP/1.0 client may send none; HTTP/1.1 needs one: the name
         * proxy_pass gives (the upstream's name, or its address). */
        buf_add_str(&b, "Host: ");
        if (req->authority.len > 0)
            buf_add(&b, req->authority.data, req->authority.len);
        else
            buf_add_str(&b, loc->upstream->name);
        buf_add(&b, "\r\n", 2);
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
        buf_add_str(&b, chains[c].name);
        buf_add(&b, ": ", 2);
        for (size_t i = 0; i < req->header_count; i++) {
            if (!http_str_equal_nocase(req->headers[i].name, chains[c].lower))
                continue;
            struct http_str previous = http_trim(req->headers[i].value);
            buf_add(&b, previous.data, previous.len);
            buf_add(&b, ", ", 2);
        }
        buf_add_str(&b, chains[c].own != NULL ? chains[c].own : px->client);
        buf_add(&b, "\r\n", 2);
    }
    if (set_header(loc, (struct http_str){"x-forwarded-proto", 17}) == NULL)
        buf_add_str(&b, http_exchange_tls(px->ex) ? "X-Forwarded-Proto: https\r\n"
                                                  : "X-Forwarded-Proto: http\r\n");
    if (px->upgrade) {
        buf_add_str(&b, "Connection: upgrade\r\nUpgrade: ");
        buf_add(&b, req->upgrade_protocol.data, req->upgrade_protocol.len);
        buf_add(&b, "\r\n", 2);
    }
    if (px->chunked) {
        buf_add_str(&b, "Transfer-Encoding: chunked\r\n");
    } else if (req->has_body || req->has_content_length) {
        char length[48];
        int n = snprintf(length, sizeof(length), "Content-Length: %llu\r\n",
                         (unsigned long long)req->content_length);
        buf_add(&b, length, (size_t)n);
    }
    buf_add(&b, "\r\n", 2);
    if (b.failed) {
        free(b.data);
        return -ENOMEM;
    }
    px->head = b.data;
    px->head_len = b.len;
    return 0;
}

static void proxy_on_request(struct http_exchange *ex, const struct http_request *req, void *data)
{
    struct proxy_exchange *px = calloc(1, sizeof(*px));
    if (px == NULL) {
        http_respond_error(ex, 500);
        return;
    }
    px->ex = ex;
    px->loc = data;
    px->idempotent = method_idempotent(req->method);
    px->chunked = req->chunked;
    px->body_beyond_replay = req->chunked || req->content_length > REPLAY_MAX;
    px->head_request = req->head;
    px->upgrade = req->upgrade;
    px->started_ms = corral_loop_now(corral_conn_loop(http_exchange_conn(ex)));
    px->request_sent = !req->has_body;
    http_client_host(http_exchange_conn(ex), px->client, sizeof(px->client));
    if (build_request_head(px, req) != 0) {
        free(px);
        http_respond_error(ex, 500);
        return;
    }
    http_exchange_set_data(ex, px);
    int err = px_send(px);
    if (err != 0) {
        if (!local_resource_error(err))
            count_error(px_worker(px), PROXY_ERROR_CONNECT); /* every server is marked down */
        http_respond_error(ex, send_failure_status(err));
        px_finish(px);
    }
}

static void proxy_on_body(struct http_exchange *ex, const char *data, size_t len)
{
    struct proxy_exchange *px = http_exchange_data(ex);
    if (px == NULL || px->uc == NULL)
        return;
    corral_conn *upstream = px->uc->conn;
    px->body_started = true;
    if (px->chunked) {
        char size_line[24];
        int n = snprintf(size_line, sizeof(size_line), "%zx\r\n", len);
        struct iovec iov[3] = {{size_line, (size_t)n}, {(void *)data, len}, {"\r\n", 2}};
        px_write_body(px, iov, 3);
    } else {
        struct iovec iov = {(void *)data, len};
        px_write_body(px, &iov, 1);
    }
    pause_if_backed_up(upstream, http_exchange_conn(ex));
}

static void proxy_on_body_end(struct http_exchange *ex)
{
    struct proxy_exchange *px = http_exchange_data(ex);
    if (px == NULL)
        return;
    if (px->uc != NULL && px->chunked)
        px_write_body(px, &(struct iovec){"0\r\n\r\n", 5}, 1);
    px->request_sent = true;
    if (px->uc != NULL && px->uc->connected)
        uc_set_timeouts(px->uc);
}

static void proxy_on_drain(struct http_exchange *ex)
{
    struct proxy_exchange *px = http_exchange_data(ex);
    if (px != NULL && px->uc != NULL)
        corral_conn_resume_read(px->uc->conn);
}

static size_t proxy_on_tunnel_data(struct http_exchange *ex, const char *data, size_t len)
{
    struct proxy_exchange *px = http_exchange_data(ex);
    if (px == NULL || px->uc == NULL)
        return len;
    corral_conn_write(px->uc->conn, data, len);
    pause_if_backed_up(px->uc->conn, http_exchange_conn(ex));
    return len;
}

static void proxy_on_abort(struct http_exchange *ex)
{
    struct proxy_exchange *px = http_exchange_data(ex);
    if (px == NULL)
        return;
    if (px->uc != NULL) {
        px_worker(px)->servers[px->uc->server].active--;
        uc_detach(px->uc);
    }
    px_finish(px);
}

const struct http_handler proxy_handler = {
    .name = "proxy",
    .on_request = proxy_on_request,
    .on_body = proxy_on_body,
    .on_body_end = proxy_on_body_end,
    .on_abort = proxy_on_abort,
    .on_drain = proxy_on_drain,
    .on_tunnel_data = proxy_on_tunnel_data,
};
