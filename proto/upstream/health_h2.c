/*
 * health_h2.c: an HTTP/2 health probe in memory (health_h2.h): nghttp2's
 * client session for one request, its answer gathered, and the bounded
 * reading of grpc.health.v1's HealthCheckResponse, which is the one piece
 * of a backend's bytes parsed here rather than by nghttp2.
 */
#include "proto/upstream/health_h2.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

/* A Check answer is a few bytes; more is not one. */
#define BODY_MAX 1024

struct health_h2 {
    nghttp2_session *session;
    int32_t stream;
    bool grpc, done, failed;
    struct health_h2_answer answer;
    uint8_t body[BODY_MAX];
    size_t body_len;
    bool body_over;
    uint8_t request[5 + 2 + 255]; /* the Check request's message */
    size_t request_len, request_sent;
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

static ssize_t read_request(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                            size_t length, uint32_t *flags, nghttp2_data_source *source, void *user)
{
    (void)session, (void)stream_id, (void)source;
    struct health_h2 *h = user;
    size_t n = h->request_len - h->request_sent;
    if (n > length)
        n = length;
    memcpy(buf, h->request + h->request_sent, n);
    h->request_sent += n;
    if (h->request_sent == h->request_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    (void)session, (void)flags;
    struct health_h2 *h = user;
    if (frame->hd.stream_id != h->stream)
        return 0;
    unsigned v = 0;
    bool number = valuelen > 0 && valuelen <= 3;
    for (size_t i = 0; number && i < valuelen; i++) {
        number = value[i] >= '0' && value[i] <= '9';
        v = v * 10 + (unsigned)(value[i] - '0');
    }
    if (namelen == 7 && memcmp(name, ":status", 7) == 0 && number)
        h->answer.status = v;
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        h->answer.grpc_status = number ? (int)v : 2; /* UNKNOWN */
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user)
{
    (void)session, (void)flags;
    struct health_h2 *h = user;
    if (stream_id != h->stream)
        return 0;
    if (h->body_len + len > BODY_MAX) {
        h->body_over = true;
        return 0;
    }
    memcpy(h->body + h->body_len, data, len);
    h->body_len += len;
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    (void)session;
    struct health_h2 *h = user;
    if (stream_id != h->stream)
        return 0;
    h->done = true;
    h->failed = error_code != NGHTTP2_NO_ERROR || h->answer.status == 0;
    if (h->grpc && !h->failed)
        h->answer.serving = h->body_over ? -1 : health_h2_serving(h->body, h->body_len);
    return 0;
}

int health_h2_new(bool grpc, const char *scheme, const char *authority, const char *path,
                  const char *service, struct health_h2 **out)
{
    struct health_h2 *h = calloc(1, sizeof(*h));
    nghttp2_session_callbacks *cbs = NULL;
    if (h == NULL || nghttp2_session_callbacks_new(&cbs) != 0) {
        free(h);
        return -ENOMEM;
    }
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    int rc = nghttp2_session_client_new(&h->session, cbs, h);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0) {
        free(h);
        return -ENOMEM;
    }
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
#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE                 \
    }
    const nghttp2_nv get[] = {NV(":method", "GET"), NV(":scheme", scheme),
                              NV(":authority", authority), NV(":path", path),
                              NV("user-agent", "corral-health-check")};
    const nghttp2_nv check[] = {NV(":method", "POST"),
                                NV(":scheme", scheme),
                                NV(":authority", authority),
                                NV(":path", "/grpc.health.v1.Health/Check"),
                                NV("content-type", "application/grpc"),
                                NV("te", "trailers"),
                                NV("user-agent", "corral-health-check")};
#undef NV
    nghttp2_data_provider provider = {.read_callback = read_request};
    const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    if (nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, settings, 1) != 0 ||
        (h->stream = grpc
                         ? nghttp2_submit_request(h->session, NULL, check,
                                                  sizeof(check) / sizeof(check[0]), &provider, NULL)
                         : nghttp2_submit_request(h->session, NULL, get,
                                                  sizeof(get) / sizeof(get[0]), NULL, NULL)) < 0) {
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
    nghttp2_session_del(h->session);
    free(h);
}

ssize_t health_h2_output(struct health_h2 *h, const uint8_t **data)
{
    ssize_t n = nghttp2_session_mem_send(h->session, data);
    return n < 0 ? -1 : n;
}

int health_h2_input(struct health_h2 *h, const char *data, size_t len,
                    struct health_h2_answer *answer)
{
    if (nghttp2_session_mem_recv(h->session, (const uint8_t *)data, len) < 0)
        return -1;
    if (!h->done)
        return 0;
    if (h->failed)
        return -1;
    *answer = h->answer;
    return 1;
}
