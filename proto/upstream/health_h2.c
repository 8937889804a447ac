/*
 * health_h2.c: an HTTP/2 health probe in memory (health_h2.h): the
 * client side of corral's HTTP/2 session (h2_session.h) for one request,
 * which checks the backend's frames and its response head (RFC 9113
 * 8.3.2), its answer gathered, and the bounded reading of
 * grpc.health.v1's HealthCheckResponse.
 */
#include "proto/upstream/health_h2.h"

#include "proto/http2/h2_session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A Check answer is a few bytes; more is not one. */
#define BODY_MAX 1024
/* The response's header list, and a field's name and value: a health
 * answer past this fails the probe (the session ends the connection). */
#define HEADER_LIST_MAX 16384
/* The most input the session may leave unconsumed: a header block (its
 * HEADERS and CONTINUATION frames, at most HEADER_LIST_MAX of fragments
 * and padding) or one other frame (at most the 16384 bytes of
 * SETTINGS_MAX_FRAME_SIZE announced), each with its frame headers and
 * HEADERS' prefix.  More is a session that broke its own bound. */
#define INPUT_MAX                                                                                  \
    (HEADER_LIST_MAX + H2_MIN_FRAME_SIZE + (H2_MAX_CONTINUATIONS + 1) * (H2_FRAME_HEADER_LEN + 6))

static _Thread_local uint8_t scratch[HEADER_LIST_MAX];

struct health_h2 {
    struct h2_session session;
    uint32_t stream;
    bool grpc, done, failed;
    struct health_h2_answer answer;
    uint8_t body[BODY_MAX];
    size_t body_len;
    bool body_over;
    uint8_t request[5 + 2 + 255]; /* the Check request's message */
    size_t request_len;
    /* The frames the session wrote, handed out by health_h2_output(). */
    uint8_t *out;
    size_t out_len, out_cap;
    bool out_given; /* out was handed out: dropped at the next call */
    /* The input the session left unconsumed (a frame not yet whole). */
    uint8_t *in;
    size_t in_len;
};

/* A varint of at most 10 bytes at *p; false past `end` or longer. */
static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

int health_h2_serving(const uint8_t *body, size_t len)
{
    if (len < 5 || body[0] != 0) /* compressed, or no prefix */
        return -1;
    uint32_t n = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 |
                 (uint32_t)body[4];
    if (n != len - 5)
        return -1;
    const uint8_t *p = body + 5, *end = body + len;
    int status = 0;
    while (p < end) {
        uint64_t key, value;
        if (!varint(&p, end, &key))
            return -1;
        switch (key & 7) {
        case 0: /* varint */
            if (!varint(&p, end, &value))
                return -1;
            if (key >> 3 == 1)
                status = value <= 3 ? (int)value : -1;
            break;
        case 1: /* 64 bits */
            if (end - p < 8)
                return -1;
            p += 8;
            break;
        case 2: /* length-delimited */
            if (!varint(&p, end, &value) || value > (uint64_t)(end - p))
                return -1;
            p += value;
            break;
        case 5: /* 32 bits */
            if (end - p < 4)
                return -1;
            p += 4;
            break;
        default: return -1;
        }
    }
    return status;
}

static void out_write(void *arg, const struct iovec *iov, int count)
{
    struct health_h2 *h = arg;
    if (h->out_given) {
        h->out_len = 0;
        h->out_given = false;
    }
    for (int i = 0; i < count; i++) {
        size_t n = iov[i].iov_len;
        if (h->out_len + n > h->out_cap) {
            size_t cap = (h->out_len + n) * 2;
            uint8_t *grown = realloc(h->out, cap);
            if (grown == NULL) {
                h->failed = h->done = true;
                return;
            }
            h->out = grown;
            h->out_cap = cap;
        }
        memcpy(h->out + h->out_len, iov[i].iov_base, n);
        h->out_len += n;
    }
}

static void on_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    struct health_h2 *h = arg;
    (void)kind;
    if (id != h->stream)
        return;
    unsigned v = 0;
    bool number = f->value_len > 0 && f->value_len <= 3;
    for (size_t i = 0; number && i < f->value_len; i++) {
        number = f->value[i] >= '0' && f->value[i] <= '9';
        v = v * 10 + (unsigned)(f->value[i] - '0');
    }
    if (f->name_len == 7 && memcmp(f->name, ":status", 7) == 0)
        h->answer.status = v; /* checked by the session: three digits */
    else if (f->name_len == 11 && memcmp(f->name, "grpc-status", 11) == 0)
        h->answer.grpc_status = number ? (int)v : 2; /* UNKNOWN */
}

static void on_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head, bool end)
{
    struct health_h2 *h = arg;
    (void)kind, (void)end;
    if (id == h->stream && head != H2_HEAD_OK) {
        /* Fields left out: no answer to judge. */
        h->done = h->failed = true;
        h2_session_reset(&h->session, id, H2_CANCEL);
    }
}

static void on_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end)
{
    struct health_h2 *h = arg;
    (void)end;
    h2_session_consume(&h->session, id, len);
    if (id != h->stream)
        return;
    if (h->body_len + len > BODY_MAX) {
        h->body_over = true;
        return;
    }
    memcpy(h->body + h->body_len, data, len);
    h->body_len += len;
}

/* Reset by the backend, by a GOAWAY that left it out, or as malformed. */
static void on_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    struct health_h2 *h = arg;
    (void)code, (void)by_peer;
    if (id == h->stream)
        h->done = h->failed = true;
}

static void on_window(void *arg, uint32_t id)
{
    (void)arg, (void)id;
}

static void on_closed(void *arg, uint32_t id)
{
    struct health_h2 *h = arg;
    if (id != h->stream || h->done)
        return;
    h->done = true;
    h->failed = h->answer.status < 200;
    if (h->grpc && !h->failed)
        h->answer.serving = h->body_over ? -1 : health_h2_serving(h->body, h->body_len);
}

static const struct h2_session_ops health_h2_ops = {
    .field = on_field,
    .headers = on_headers,
    .data = on_data,
    .reset = on_reset,
    .window = on_window,
    .closed = on_closed,
};

static struct hpack_field field(const char *name, const char *value)
{
    return (struct hpack_field){(const uint8_t *)name, strlen(name), (const uint8_t *)value,
                                strlen(value), false};
}

int health_h2_new(bool grpc, const char *scheme, const char *authority, const char *path,
                  const char *service, struct health_h2 **out)
{
    struct health_h2 *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    h->grpc = grpc;
    h->answer = (struct health_h2_answer){.grpc_status = -1, .serving = -1};
    size_t service_len = strlen(service);
    if (service_len > 255)
        service_len = 255;
    /* HealthCheckRequest { string service = 1; } after the 5-byte prefix */
    size_t message = service_len > 0 ? 2 + service_len : 0;
    h->request[4] = (uint8_t)message;
    if (service_len > 0) {
        h->request[5] = 0x0a;
        h->request[6] = (uint8_t)service_len;
        memcpy(h->request + 7, service, service_len);
    }
    h->request_len = 5 + message;
    /* One stream, whose window the probe gives back as the bytes come;
     * its limits are the server's own defaults. */
    const struct h2_session_conf conf = {
        .client = true,
        .initial_window_size = H2_DEFAULT_WINDOW,
        .conn_window_size = H2_DEFAULT_WINDOW,
        .max_header_list_size = HEADER_LIST_MAX,
        .max_resets = 100,
        .reset_interval_ms = 1000,
        .scratch = scratch,
        .scratch_size = sizeof(scratch),
    };
    const struct h2_sink sink = {out_write, h};
    h2_session_init(&h->session, &conf, &health_h2_ops, h, &sink, 0);
    const struct hpack_field get[] = {field(":method", "GET"), field(":scheme", scheme),
                                      field(":authority", authority), field(":path", path),
                                      field("user-agent", "corral-health-check")};
    const struct hpack_field check[] = {field(":method", "POST"),
                                        field(":scheme", scheme),
                                        field(":authority", authority),
                                        field(":path", "/grpc.health.v1.Health/Check"),
                                        field("content-type", "application/grpc"),
                                        field("te", "trailers"),
                                        field("user-agent", "corral-health-check")};
    h->stream = grpc ? h2_session_request(&h->session, check, NULL,
                                          sizeof(check) / sizeof(check[0]), false, false)
                     : h2_session_request(&h->session, get, NULL, sizeof(get) / sizeof(get[0]),
                                          true, false);
    /* A new stream's window (65535) takes the whole message. */
    struct iovec iov = {h->request, h->request_len};
    if (h->stream == 0 || h->failed ||
        (grpc && h2_session_send_data(&h->session, h->stream, &iov, 1, true) != 0)) {
        health_h2_free(h);
        return -ENOMEM;
    }
    *out = h;
    return 0;
}

void health_h2_free(struct health_h2 *h)
{
    if (h == NULL)
        return;
    h2_session_free(&h->session);
    free(h->out);
    free(h->in);
    free(h);
}

ssize_t health_h2_output(struct health_h2 *h, const uint8_t **data)
{
    if (h->out_given) {
        h->out_len = 0;
        h->out_given = false;
    }
    if (h->out_len == 0)
        return 0;
    h->out_given = true;
    *data = h->out;
    return (ssize_t)h->out_len;
}

int health_h2_input(struct health_h2 *h, const char *data, size_t len,
                    struct health_h2_answer *answer)
{
    /* The rest of the last input first, joined with this one. */
    const uint8_t *p = (const uint8_t *)data;
    size_t n = len;
    if (h->in_len > 0) {
        if (h->in_len + len > INPUT_MAX)
            return -1;
        uint8_t *joined = realloc(h->in, h->in_len + len);
        if (joined == NULL)
            return -1;
        memcpy(joined + h->in_len, data, len);
        h->in = joined;
        h->in_len += len;
        p = h->in;
        n = h->in_len;
    }
    size_t used = h2_session_recv(&h->session, p, n, 0);
    if (h->session.error != H2_NO_ERROR)
        return -1;
    if (used < n) {
        if (n - used > INPUT_MAX)
            return -1;
        if (p == h->in) {
            memmove(h->in, h->in + used, n - used);
        } else {
            uint8_t *kept = realloc(h->in, n - used);
            if (kept == NULL)
                return -1;
            h->in = kept;
            memcpy(h->in, p + used, n - used);
        }
    }
    h->in_len = n - used;
    if (!h->done)
        return 0;
    if (h->failed)
        return -1;
    *answer = h->answer;
    return 1;
}
