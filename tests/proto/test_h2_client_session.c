/*
 * test_h2_client_session.c: the client side of corral's HTTP/2 session
 * (h2_session.h, conf.client).  First against libnghttp2's server
 * session, the oracle, without sockets: requests with and without
 * bodies, responses with bodies and trailers through both windows.  Then
 * fed a hostile server's bytes, frame by frame: malformed response heads
 * (pseudo-headers, :status, content-length against DATA, 1xx misuse,
 * trailers), RST_STREAM, GOAWAY ending the streams above its last id as
 * refused, SETTINGS and WINDOW_UPDATE, frames on streams no client
 * opened, and the limits (header list, floods).
 */
#include "../helpers.h"
#include "h2/h2_frames.h"
#include "proto/http2/h2_session.h"
#include "proto/http2/hpack.h"

#include <malloc.h>
#include <nghttp2/nghttp2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const bool test_forkless = true;

struct t {
    struct h2_session c;
    struct h2_frames_buf out; /* the client's output */
    struct h2_frames_buf in;  /* the server's bytes, not yet fed */
    struct hpack_encoder enc; /* the raw server's */
    struct h2_sink in_sink;
    char log[16384];
    size_t used;
    uint64_t body; /* response body bytes */
    bool take;     /* give the windows back as bytes come */
    /* The oracle. */
    nghttp2_session *srv;
    struct h2_frames_buf upload;
    const uint8_t *resp_body;
    size_t resp_len, resp_sent;
};

static uint8_t scratch[4096];

static const struct h2_session_conf conf = {
    .client = true,
    .initial_window_size = 65536,
    .conn_window_size = 1 << 20,
    .max_header_list_size = 8192,
    .max_resets = UINT32_MAX,
    .reset_interval_ms = 1000,
    .scratch = scratch,
    .scratch_size = sizeof(scratch),
};

#define tlog(t, ...) test_appendf((t)->log, sizeof((t)->log), &(t)->used, __VA_ARGS__)

static const char *kind_name(enum h2_block_kind k)
{
    switch (k) {
    case H2_BLOCK_REQUEST: return "request";
    case H2_BLOCK_RESPONSE: return "response";
    case H2_BLOCK_TRAILERS: return "trailers";
    case H2_BLOCK_DISCARD: return "discard";
    }
    return "?";
}

static void c_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    (void)kind;
    tlog((struct t *)arg, "field %u %.*s=%.*s\n", id, (int)f->name_len, (const char *)f->name,
         (int)f->value_len, (const char *)f->value);
}

static void c_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head, bool end)
{
    struct t *t = arg;
    static const char *const heads[] = {"", " too large", " cut"};
    const struct h2_session_stream *st = h2_session_stream(&t->c, id);
    tlog(t, "%s %u %u%s%s\n", kind_name(kind), id, st != NULL ? st->msg.status : 0, heads[head],
         end ? " end" : "");
}

static void c_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end)
{
    struct t *t = arg;
    (void)data;
    t->body += len;
    if (t->take)
        h2_session_consume(&t->c, id, len);
    if (end)
        tlog(t, "body %u %llu end\n", id, (unsigned long long)t->body);
}

static void c_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    tlog((struct t *)arg, "reset %u %u%s\n", id, code, by_peer ? " by peer" : "");
}

static void c_window(void *arg, uint32_t id)
{
    (void)arg;
    (void)id;
}

static void c_goaway(void *arg, uint32_t last, uint32_t code)
{
    tlog((struct t *)arg, "goaway %u %u\n", last, code);
}

static void c_closed(void *arg, uint32_t id)
{
    tlog((struct t *)arg, "closed %u\n", id);
}

static const struct h2_session_ops ops = {
    .field = c_field,
    .headers = c_headers,
    .data = c_data,
    .reset = c_reset,
    .window = c_window,
    .goaway = c_goaway,
    .closed = c_closed,
};

static void t_init(struct t *t, const struct h2_session_conf *c)
{
    memset(t, 0, sizeof(*t));
    t->take = true;
    t->in_sink = (struct h2_sink){h2_frames_sink_write, &t->in};
    hpack_encoder_init(&t->enc, 0);
    struct h2_sink sink = {h2_frames_sink_write, &t->out};
    h2_session_init(&t->c, c != NULL ? c : &conf, &ops, t, &sink, 0);
}

static void t_end(struct t *t)
{
    h2_session_free(&t->c);
    hpack_encoder_free(&t->enc);
    if (t->srv != NULL)
        nghttp2_session_del(t->srv);
    free(t->out.p);
    free(t->in.p);
    free(t->upload.p);
}

/* Feeds what the raw server wrote; all of it is consumed, but after a
 * connection error. */
static void feed(struct t *t)
{
    size_t n = h2_session_recv(&t->c, t->in.p, t->in.len, 1);
    if (t->c.error == H2_NO_ERROR)
        ck_assert_uint_eq(n, t->in.len);
    t->in.len = 0;
}

/* A raw server's header block on `id`: fields "name", "value", ... */
static void srv_head(struct t *t, uint32_t id, bool end, size_t n, const char *const *nv)
{
    struct hpack_field f[16];
    ck_assert_uint_le(n, 16);
    for (size_t i = 0; i < n; i++)
        f[i] = h2_frames_field(nv[2 * i], nv[2 * i + 1]);
    uint8_t block[16384];
    ck_assert_uint_le(hpack_encode_bound(f, n), sizeof(block));
    size_t len = hpack_encode(&t->enc, f, NULL, n, block);
    h2_frame_write_headers(&t->in_sink, id, block, len, end, H2_MIN_FRAME_SIZE);
}

#define HEAD(t, id, end, ...)                                                                      \
    do {                                                                                           \
        static const char *const nv_[] = {__VA_ARGS__};                                            \
        srv_head(t, id, end, sizeof(nv_) / sizeof(nv_[0]) / 2, nv_);                               \
    } while (0)

static void srv_data(struct t *t, uint32_t id, const char *s, bool end)
{
    struct iovec iov = {(void *)s, strlen(s)};
    h2_frame_write_data(&t->in_sink, id, &iov, 1, end, H2_MIN_FRAME_SIZE);
}

static void srv_settings(struct t *t, size_t n, const uint16_t *ids, const uint32_t *values)
{
    h2_frame_write_settings(&t->in_sink, ids, values, n);
}

/* The raw server's SETTINGS (none) and its ACK of the client's. */
static void handshake(struct t *t)
{
    srv_settings(t, 0, NULL, NULL);
    h2_frame_write_settings_ack(&t->in_sink);
    feed(t);
    ck_assert_int_eq(t->c.error, H2_NO_ERROR);
    ck_assert(t->c.settings_acked);
}

/* A GET (HEAD when `head`) for `path`; its stream id. */
static uint32_t request(struct t *t, const char *path, bool head)
{
    struct hpack_field f[] = {
        h2_frames_field(":method", head ? "HEAD" : "GET"), h2_frames_field(":scheme", "https"),
        h2_frames_field(":authority", "backend"), h2_frames_field(":path", path)};
    return h2_session_request(&t->c, f, NULL, 4, true, head);
}

/* A client with the default conf, past the handshake. */
static void t_start(struct t *t)
{
    t_init(t, NULL);
    handshake(t);
}

/* What a raw server sends on one stream, after the client's request (HEAD
 * when `head`): up to three blocks, each a header block of the fields
 * `nv` ("name", "value", ...) or, where `data` is set, DATA. */
struct answer {
    bool head;
    struct {
        const char *nv[4];
        const char *data;
        bool end;
    } blocks[3];
};

/* Opens a stream for each of `n` answers, on 1, 3, 5..., and writes the
 * server's blocks on it; feed() passes them to the client. */
static void answer_each(struct t *t, const struct answer *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t id = request(t, "/", a[i].head);
        ck_assert_uint_eq(id, 1 + 2 * i);
        for (size_t b = 0; b < 3; b++) {
            const char *const *nv = a[i].blocks[b].nv;
            if (a[i].blocks[b].data != NULL)
                srv_data(t, id, a[i].blocks[b].data, a[i].blocks[b].end);
            else if (nv[0] != NULL)
                srv_head(t, id, a[i].blocks[b].end, nv[2] != NULL ? 2 : 1, nv);
        }
    }
}

#define LOG_IS(t, s) ck_assert_str_eq((t)->log, s)

static void log_clear(struct t *t)
{
    t->used = 0;
    t->log[0] = '\0';
}

/* ---------------------------------------------------- the frames it sends */

/* The connection begins with the preface and SETTINGS (push off), and a
 * request's HEADERS come on 1, 3, 5. */
START_TEST(preface_settings_and_stream_ids)
{
    static struct t t;
    t_init(&t, NULL);
    ck_assert_uint_ge(t.out.len, H2_PREFACE_LEN + H2_FRAME_HEADER_LEN);
    ck_assert_mem_eq(t.out.p, H2_PREFACE, H2_PREFACE_LEN);
    const uint8_t *f = t.out.p + H2_PREFACE_LEN;
    ck_assert_uint_eq(f[3], H2_SETTINGS);
    size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
    bool push_off = false, limit = false;
    for (size_t i = 0; i + 6 <= len; i += 6) {
        const uint8_t *e = f + H2_FRAME_HEADER_LEN + i;
        uint16_t id = (uint16_t)(e[0] << 8 | e[1]);
        uint32_t v = (uint32_t)e[2] << 24 | (uint32_t)e[3] << 16 | (uint32_t)e[4] << 8 | e[5];
        push_off |= id == H2_SETTINGS_ENABLE_PUSH && v == 0;
        limit |= id == H2_SETTINGS_MAX_CONCURRENT_STREAMS;
    }
    ck_assert(push_off);
    ck_assert(!limit);
    handshake(&t);
    ck_assert_uint_eq(request(&t, "/a", false), 1);
    ck_assert_uint_eq(request(&t, "/b", false), 3);
    ck_assert_uint_eq(request(&t, "/c", false), 5);
    ck_assert_uint_eq(t.c.stream_count, 3);
    t_end(&t);
}
END_TEST

/* ----------------------------------------------------------- the oracle */

static ssize_t o_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                      nghttp2_data_source *src, void *arg)
{
    (void)s;
    (void)src;
    struct t *t = arg;
    size_t n = t->resp_len - t->resp_sent < len ? t->resp_len - t->resp_sent : len;
    memcpy(buf, t->resp_body + t->resp_sent, n);
    t->resp_sent += n;
    if (t->resp_sent == t->resp_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv tr[] = {{(uint8_t *)"x-sum", (uint8_t *)"42", 5, 2, NGHTTP2_NV_FLAG_NONE}};
        ck_assert_int_eq(nghttp2_submit_trailer(s, id, tr, 1), 0);
    }
    return (ssize_t)n;
}

static int o_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
    struct t *t = arg;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
        char len[24];
        snprintf(len, sizeof(len), "%zu", t->resp_len);
        nghttp2_nv nva[] = {
            {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"content-length", (uint8_t *)len, 14, strlen(len), NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"x-upload", (uint8_t *)"yes", 8, 3, NGHTTP2_NV_FLAG_NONE},
        };
        nghttp2_data_provider p = {.read_callback = o_read};
        t->resp_sent = 0;
        ck_assert_int_eq(nghttp2_submit_response(s, f->hd.stream_id, nva, 3, &p), 0);
    }
    return 0;
}

static int o_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                  void *arg)
{
    (void)s;
    (void)flags;
    (void)id;
    h2_frames_put(&((struct t *)arg)->upload, data, len);
    return 0;
}

static void oracle_start(struct t *t)
{
    nghttp2_session_callbacks *cbs;
    ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, o_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, o_data);
    ck_assert_int_eq(nghttp2_session_server_new(&t->srv, cbs, t), 0);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 10},
                                  {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 20000}};
    ck_assert_int_eq(nghttp2_submit_settings(t->srv, NGHTTP2_FLAG_NONE, s, 2), 0);
}

static void oracle_pump(struct t *t)
{
    for (int round = 0; round < 10000; round++) {
        bool moved = false;
        if (t->out.len > 0) {
            ssize_t n = nghttp2_session_mem_recv(t->srv, t->out.p, t->out.len);
            ck_assert_msg(n == (ssize_t)t->out.len, "the server refused the client's bytes: %zd",
                          n);
            h2_session_flushed(&t->c, t->out.len);
            t->out.len = 0;
            moved = true;
        }
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(t->srv, &p)) > 0)
            h2_frames_put(&t->in, p, (size_t)n);
        ck_assert_int_ge(n, 0);
        if (t->in.len > 0) {
            size_t used = h2_session_recv(&t->c, t->in.p, t->in.len, 1);
            ck_assert_int_eq(t->c.error, H2_NO_ERROR);
            h2_frames_drop(&t->in, used);
            moved = true;
        }
        if (!moved)
            return;
    }
    ck_abort_msg("the two sides never went quiet");
}

/* A client and the oracle: the client's first request, a GET for `path`,
 * answered with the `len` bytes of `body` and pumped until both sides are
 * quiet; `take`: the caller takes the bytes as they come. */
static void oracle_get(struct t *t, const char *path, const uint8_t *body, size_t len, bool take)
{
    t_init(t, NULL);
    oracle_start(t);
    t->resp_body = body;
    t->resp_len = len;
    t->take = take;
    ck_assert_uint_eq(request(t, path, false), 1);
    oracle_pump(t);
}

/* A GET, then a POST of 300000 bytes through the server's windows of
 * 20000 bytes; the responses (head, 100000 bytes through the client's
 * windows, trailers) as the oracle sent them. */
START_TEST(oracle_requests_and_responses)
{
    static struct t t;
    static uint8_t body[300000];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)(i * 31);
    oracle_get(&t, "/get", body, 100000, true);
    ck_assert_uint_eq(t.c.peer_max_concurrent, 10);
    ck_assert_str_eq(t.log, "field 1 :status=200\nfield 1 content-length=100000\n"
                            "field 1 x-upload=yes\nresponse 1 200\n"
                            "field 1 x-sum=42\ntrailers 1 200 end\nclosed 1\n");
    ck_assert_uint_eq(t.body, 100000);
    log_clear(&t);
    t.body = 0;
    struct hpack_field f[] = {
        h2_frames_field(":method", "POST"), h2_frames_field(":scheme", "https"),
        h2_frames_field(":authority", "backend"), h2_frames_field(":path", "/post"),
        h2_frames_field("content-length", "300000")};
    uint32_t id = h2_session_request(&t.c, f, NULL, 5, false, false);
    ck_assert_uint_eq(id, 3);
    size_t sent = 0;
    for (int round = 0; sent < sizeof(body) && round < 1000; round++) {
        size_t w = h2_session_send_window(&t.c, id);
        ck_assert_uint_le(w, 20000);
        if (w > 0) {
            size_t n = sizeof(body) - sent < w ? sizeof(body) - sent : w;
            struct iovec iov = {body + sent, n};
            ck_assert_int_eq(h2_session_send_data(&t.c, id, &iov, 1, sent + n == sizeof(body)), 0);
            sent += n;
        }
        oracle_pump(&t);
    }
    ck_assert_uint_eq(sent, sizeof(body));
    ck_assert_uint_eq(t.upload.len, sizeof(body));
    ck_assert_mem_eq(t.upload.p, body, sizeof(body));
    ck_assert_ptr_nonnull(
        strstr(t.log, "response 3 200\nfield 3 x-sum=42\ntrailers 3 200 end\nclosed 3\n"));
    ck_assert_uint_eq(t.body, 100000);
    ck_assert_ptr_null(t.c.streams);
    t_end(&t);
}
END_TEST

/* The client's stream window holds the server back until the caller
 * takes the bytes (h2_session_consume()). */
START_TEST(oracle_window_waits_for_the_caller)
{
    static struct t t;
    static uint8_t body[200000];
    oracle_get(&t, "/", body, sizeof(body), false);
    ck_assert_uint_eq(t.body, 65536); /* conf.initial_window_size */
    t.take = true;
    h2_session_consume(&t.c, 1, 65536);
    oracle_pump(&t);
    ck_assert_uint_eq(t.body, sizeof(body));
    ck_assert_ptr_nonnull(strstr(t.log, "closed 1\n"));
    t_end(&t);
}
END_TEST

/* -------------------------------------------------- a hostile server */

START_TEST(response_valid)
{
    static struct t t;
    t_start(&t);
    ck_assert_uint_eq(request(&t, "/", false), 1);
    HEAD(&t, 1, false, ":status", "200", "content-length", "5", "host", "x");
    srv_data(&t, 1, "hel", false);
    srv_data(&t, 1, "lo", false);
    HEAD(&t, 1, true, "x-t", "1");
    feed(&t);
    LOG_IS(&t, "field 1 :status=200\nfield 1 content-length=5\nfield 1 host=x\nresponse 1 200\n"
               "field 1 x-t=1\ntrailers 1 200 end\nclosed 1\n");
    ck_assert_uint_eq(t.body, 5);
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    t_end(&t);
}
END_TEST

/* Interim heads, then the final one (8.1). */
START_TEST(response_interim_heads)
{
    static struct t t;
    t_start(&t);
    ck_assert_uint_eq(request(&t, "/", false), 1);
    HEAD(&t, 1, false, ":status", "100");
    HEAD(&t, 1, false, ":status", "103", "link", "</a>");
    HEAD(&t, 1, true, ":status", "204");
    feed(&t);
    LOG_IS(&t, "field 1 :status=100\nresponse 1 100\nfield 1 :status=103\nfield 1 link=</a>\n"
               "response 1 103\nfield 1 :status=204\nresponse 1 204 end\nclosed 1\n");
    t_end(&t);
}
END_TEST

/* Each head is malformed: the stream is reset PROTOCOL_ERROR, the
 * connection goes on. */
START_TEST(response_malformed_heads)
{
    static const char *const cases[][8] = {
        {":status", "200", ":path", "/"},          /* a request's pseudo-header */
        {":status", "200", ":status", "200"},      /* twice */
        {"x", "1"},                                /* none */
        {"x", "1", ":status", "200"},              /* after a regular field */
        {":status", "20"},                         /* not three digits */
        {":status", "2x0"},                        /* not digits */
        {":status", "101"},                        /* no upgrade in HTTP/2 */
        {":status", "099"},                        /* no such class */
        {":status", "200", "connection", "close"}, /* 8.2.2 */
        {":status", "200", "transfer-encoding", "chunked"},
        {":status", "200", "te", "gzip"},
        {":status", "200", "X-Upper", "1"}, /* names are lowercase */
        {":status", "200", "x", " padded"}, /* 8.2.1 */
        {":status", "200", "content-length", "1", "content-length", "1"},
        {":status", "200", "content-length", "-1"},
        {":status", "100", "content-length", "0"}, /* none in an interim head */
        {":status", "204", "content-length", "5"},
        {":status", "200", ":unknown", "x"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        static struct t t;
        t_start(&t);
        ck_assert_uint_eq(request(&t, "/", false), 1);
        size_t n = 0;
        while (n < 4 && cases[i][2 * n] != NULL)
            n++;
        srv_head(&t, 1, false, n, cases[i]);
        feed(&t);
        ck_assert_msg(strstr(t.log, "reset 1 1\n") != NULL, "case %zu: %s", i, t.log);
        ck_assert_msg(strstr(t.log, "response 1") == NULL, "case %zu: %s", i, t.log);
        ck_assert_int_eq(t.c.error, H2_NO_ERROR);
        ck_assert_ptr_null(t.c.streams);
        /* The server's late frames on it are dropped, not an error. */
        srv_data(&t, 1, "late", true);
        HEAD(&t, 1, true, "x", "1");
        feed(&t);
        ck_assert_int_eq(t.c.error, H2_NO_ERROR);
        t_end(&t);
    }
}
END_TEST

/* 8.1.1: DATA against content-length, more or less; a HEAD's and a
 * 304's body is empty whatever content-length says. */
START_TEST(response_content_length)
{
    static const struct answer answers[] = {
        {.blocks = {{.nv = {":status", "200", "content-length", "3"}},
                    {.data = "four", .end = true}}},
        {.blocks = {{.nv = {":status", "200", "content-length", "3"}},
                    {.data = "tw", .end = true}}},
        {.blocks = {{.nv = {":status", "200", "content-length", "3"}},
                    {.data = "tw"},
                    {.nv = {"x", "1"}, .end = true}}}, /* trailers end it short */
        {.head = true,
         .blocks = {{.nv = {":status", "200", "content-length", "100"}, .end = true}}},
        {.head = true,
         .blocks = {{.nv = {":status", "200", "content-length", "100"}},
                    {.data = "x", .end = true}}},
        {.blocks = {{.nv = {":status", "304", "content-length", "100"}, .end = true}}},
        {.blocks = {{.nv = {":status", "200", "content-length", "1"}, .end = true}}},
        /* dropped, as libnghttp2 does */
        {.blocks = {{.nv = {":status", "204", "content-length", "0"}, .end = true}}},
    };
    static struct t t;
    t_start(&t);
    answer_each(&t, answers, sizeof(answers) / sizeof(answers[0]));
    feed(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "reset 1 1\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "reset 3 1\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "reset 5 1\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "response 7 200 end\nclosed 7\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "reset 9 1\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "response 11 304 end\nclosed 11\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "reset 13 1\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "field 15 :status=204\nresponse 15 204 end\nclosed 15\n"));
    ck_assert_ptr_null(strstr(t.log, "body 1"));
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    t_end(&t);
}
END_TEST

/* 8.1: no body after an interim head, no end with one, trailers end
 * the stream and have no pseudo-header. */
START_TEST(response_misplaced_blocks)
{
    static const struct answer answers[] = {
        /* past its content-length */
        {.blocks = {{.nv = {":status", "200", "content-length", "0"}}, {.data = "x", .end = true}}},
        /* after an interim head */
        {.blocks = {{.nv = {":status", "100"}}, {.data = "x"}}},
        /* an interim head that ends it */
        {.blocks = {{.nv = {":status", "103"}, .end = true}}},
        /* trailers without END_STREAM */
        {.blocks = {{.nv = {":status", "200"}}, {.nv = {"x", "1"}}}},
        /* a pseudo-header in trailers */
        {.blocks = {{.nv = {":status", "200"}}, {.nv = {":status", "200"}, .end = true}}},
        /* framing in trailers */
        {.blocks = {{.nv = {":status", "200"}}, {.nv = {"content-length", "0"}, .end = true}}},
    };
    static struct t t;
    t_start(&t);
    answer_each(&t, answers, sizeof(answers) / sizeof(answers[0]));
    feed(&t);
    for (unsigned id = 1; id <= 11; id += 2) {
        char s[32];
        snprintf(s, sizeof(s), "reset %u 1\n", id);
        ck_assert_msg(strstr(t.log, s) != NULL, "stream %u: %s", id, t.log);
    }
    ck_assert_ptr_null(strstr(t.log, "trailers"));
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    ck_assert_ptr_null(t.c.streams);
    t_end(&t);
}
END_TEST

/* Frames on streams a client never opened: the connection's end. */
START_TEST(frames_on_streams_not_opened)
{
    for (int i = 0; i < 7; i++) {
        static struct t t;
        t_start(&t);
        ck_assert_uint_eq(request(&t, "/", false), 1);
        switch (i) {
        case 0: HEAD(&t, 2, false, ":status", "200"); break; /* even: no push */
        case 1: HEAD(&t, 3, false, ":status", "200"); break; /* odd, not yet opened */
        case 2: srv_data(&t, 5, "x", false); break;
        case 3: h2_frame_write_rst_stream(&t.in_sink, 4, H2_CANCEL); break;
        case 4: h2_frame_write_window_update(&t.in_sink, 7, 10); break;
        case 6: srv_data(&t, 1, "x", false); break; /* before any head: libnghttp2's choice */
        case 5: {
            /* PUSH_PROMISE for stream 2 on stream 1. */
            uint8_t f[H2_FRAME_HEADER_LEN + 5] = {0};
            h2_frame_header_put(f, 5, H2_PUSH_PROMISE, H2_FLAG_END_HEADERS, 1);
            f[H2_FRAME_HEADER_LEN + 3] = 2;
            f[H2_FRAME_HEADER_LEN + 4] = 0x82; /* :method GET */
            h2_frames_put(&t.in, f, sizeof(f));
            break;
        }
        }
        feed(&t);
        ck_assert_msg(t.c.error == H2_PROTOCOL_ERROR, "case %d: %d", i, t.c.error);
        /* GOAWAY names no stream the server opened: 0. */
        ck_assert_uint_eq(t.c.last_stream_id, 0);
        t_end(&t);
    }
}
END_TEST

START_TEST(rst_stream_from_the_server)
{
    static struct t t;
    t_start(&t);
    ck_assert_uint_eq(request(&t, "/", false), 1);
    ck_assert_uint_eq(request(&t, "/", false), 3);
    h2_frame_write_rst_stream(&t.in_sink, 1, H2_REFUSED_STREAM);
    HEAD(&t, 3, false, ":status", "200");
    h2_frame_write_rst_stream(&t.in_sink, 3, H2_INTERNAL_ERROR);
    h2_frame_write_rst_stream(&t.in_sink, 3, H2_INTERNAL_ERROR); /* closed now: ignored */
    feed(&t);
    LOG_IS(&t, "reset 1 7 by peer\nfield 3 :status=200\nresponse 3 200\nreset 3 2 by peer\n");
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    /* This side's reset: the server's frames that crossed it are dropped. */
    ck_assert_uint_eq(request(&t, "/", false), 5);
    h2_session_reset(&t.c, 5, H2_CANCEL);
    HEAD(&t, 5, false, ":status", "200");
    srv_data(&t, 5, "xx", true);
    log_clear(&t);
    feed(&t);
    LOG_IS(&t, "");
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    t_end(&t);
}
END_TEST

/* 6.8: the streams above the last id end as refused; those below go
 * on; no stream opens after; the id never goes up, and is odd. */
START_TEST(goaway_from_the_server)
{
    static struct t t;
    t_start(&t);
    for (unsigned i = 0; i < 4; i++)
        ck_assert_uint_eq(request(&t, "/", false), 1 + 2 * i);
    h2_frame_write_goaway(&t.in_sink, 3, H2_NO_ERROR, "bye", 3);
    feed(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "goaway 3 0\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "reset 5 7 by peer\n"));
    ck_assert_ptr_nonnull(strstr(t.log, "reset 7 7 by peer\n"));
    ck_assert_ptr_null(strstr(t.log, "reset 1"));
    ck_assert_ptr_null(strstr(t.log, "reset 3"));
    ck_assert_uint_eq(t.c.stream_count, 2);
    ck_assert_uint_eq(request(&t, "/", false), 0);
    HEAD(&t, 3, true, ":status", "200");
    feed(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "response 3 200 end\nclosed 3\n"));
    h2_frame_write_goaway(&t.in_sink, 1, H2_NO_ERROR, NULL, 0); /* lower: fine */
    feed(&t);
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    h2_frame_write_goaway(&t.in_sink, 3, H2_NO_ERROR, NULL, 0); /* higher */
    feed(&t);
    ck_assert_int_eq(t.c.error, H2_PROTOCOL_ERROR);
    t_end(&t);

    t_start(&t);
    ck_assert_uint_eq(request(&t, "/", false), 1);
    h2_frame_write_goaway(&t.in_sink, 0, H2_NO_ERROR, NULL, 0); /* none processed */
    feed(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "reset 1 7 by peer\n"));
    ck_assert_ptr_null(t.c.streams);
    t_end(&t);

    t_start(&t);
    h2_frame_write_goaway(&t.in_sink, 2, H2_NO_ERROR, NULL, 0); /* even */
    feed(&t);
    ck_assert_int_eq(t.c.error, H2_PROTOCOL_ERROR);
    t_end(&t);
}
END_TEST

/* SETTINGS: the stream limit, the initial window moving open streams'
 * windows, push refused; WINDOW_UPDATE opening and overflowing. */
START_TEST(settings_and_windows)
{
    static struct t t;
    t_init(&t, NULL);
    uint16_t ids[] = {H2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_SETTINGS_INITIAL_WINDOW_SIZE,
                      H2_SETTINGS_MAX_FRAME_SIZE};
    uint32_t values[] = {2, 100, 32768};
    srv_settings(&t, 3, ids, values);
    feed(&t);
    ck_assert_uint_eq(t.c.peer_max_frame_size, 32768);
    /* Its ACK went out. */
    static const uint8_t ack[] = {0, 0, 0, H2_SETTINGS, H2_FLAG_ACK, 0, 0, 0, 0};
    ck_assert_uint_ge(t.out.len, sizeof(ack));
    ck_assert_mem_eq(t.out.p + t.out.len - sizeof(ack), ack, sizeof(ack));
    struct hpack_field f[] = {h2_frames_field(":method", "POST"),
                              h2_frames_field(":scheme", "https"),
                              h2_frames_field(":authority", "b"), h2_frames_field(":path", "/")};
    ck_assert_uint_eq(h2_session_request(&t.c, f, NULL, 4, false, false), 1);
    ck_assert_uint_eq(h2_session_request(&t.c, f, NULL, 4, false, false), 3);
    ck_assert_uint_eq(h2_session_request(&t.c, f, NULL, 4, false, false), 0); /* the limit */
    ck_assert_uint_eq(h2_session_send_window(&t.c, 1), 100);
    uint16_t win[] = {H2_SETTINGS_INITIAL_WINDOW_SIZE};
    uint32_t w1000[] = {1000};
    srv_settings(&t, 1, win, w1000);
    feed(&t);
    ck_assert_uint_eq(h2_session_send_window(&t.c, 1), 1000);
    h2_frame_write_window_update(&t.in_sink, 1, 500);
    feed(&t);
    ck_assert_uint_eq(h2_session_send_window(&t.c, 1), 1500);
    ck_assert_uint_eq(h2_session_send_window(&t.c, 3), 1000);
    /* The connection's window (65535) bounds both. */
    static uint8_t body[1500];
    struct iovec iov = {body, sizeof(body)};
    ck_assert_int_eq(h2_session_send_data(&t.c, 1, &iov, 1, false), 0);
    ck_assert_uint_eq(h2_session_send_window(&t.c, 1), 0);
    ck_assert_int_eq(h2_session_send_data(&t.c, 1, &iov, 1, false), -1);
    h2_frame_write_window_update(&t.in_sink, 3, 0x7fffffff); /* past 2^31-1 */
    feed(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "reset 3 3\n"));
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    uint16_t push[] = {H2_SETTINGS_ENABLE_PUSH};
    uint32_t one[] = {1};
    srv_settings(&t, 1, push, one);
    feed(&t);
    ck_assert_int_eq(t.c.error, H2_PROTOCOL_ERROR);
    t_end(&t);
}
END_TEST

/* The limits hold against a server: the header list (its fields past
 * the limit not passed), a block longer than the limit (the
 * connection's end), PING and SETTINGS floods, a response body past the
 * windows. */
START_TEST(limits)
{
    static struct t t;
    static char a[3001];
    memset(a, 'a', 3000);
    t_start(&t);
    ck_assert_uint_eq(request(&t, "/", false), 1);
    const char *nv[] = {":status", "200", "x-1", a, "x-2", a, "x-3", a};
    srv_head(&t, 1, true, 4, nv);
    feed(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "response 1 200 too large end\n"));
    ck_assert_ptr_null(strstr(t.log, "x-3"));
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    t_end(&t);

    t_start(&t);
    ck_assert_uint_eq(request(&t, "/", false), 1);
    static char b[9001];
    for (size_t i = 0; i < 9000; i++)
        b[i] = (char)('!' + (i * 7919) % 90);
    const char *big[] = {":status", "200", "x-big", b};
    srv_head(&t, 1, true, 2, big);
    feed(&t);
    ck_assert_int_eq(t.c.error, H2_ENHANCE_YOUR_CALM);
    ck_assert_ptr_null(strstr(t.log, "response"));
    t_end(&t);

    t_start(&t);
    static const uint8_t ping[8] = {1};
    for (unsigned i = 0; i <= H2_SESSION_MAX_PING; i++)
        h2_frame_write_ping(&t.in_sink, ping, false);
    feed(&t);
    ck_assert_int_eq(t.c.error, H2_ENHANCE_YOUR_CALM);
    t_end(&t);

    t_start(&t);
    for (unsigned i = 0; i <= H2_SESSION_MAX_SETTINGS; i++)
        srv_settings(&t, 0, NULL, NULL);
    feed(&t);
    ck_assert_int_eq(t.c.error, H2_ENHANCE_YOUR_CALM);
    t_end(&t);

    /* A stream's window (65536 here) is not passed. */
    t_start(&t);
    t.take = false;
    ck_assert_uint_eq(request(&t, "/", false), 1);
    HEAD(&t, 1, false, ":status", "200");
    static char chunk[16385];
    memset(chunk, 'x', 16384);
    for (int i = 0; i < 5; i++)
        srv_data(&t, 1, chunk, false);
    feed(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "reset 1 3\n"));
    ck_assert_uint_eq(t.body, 65536);
    ck_assert_int_eq(t.c.error, H2_NO_ERROR);
    t_end(&t);
}
END_TEST

/* The memory an idle client connection's session holds once a response
 * came and its stream is gone: the struct, and the HPACK tables' blocks
 * (the decoder's after an indexed response; the encoder's none, as the
 * requests' fields are not indexed).  Printed for docs/benchmarks.md. */
/* libnghttp2's allocations, counted: the bytes live. */
static void *counted_malloc(size_t n, void *ud)
{
    size_t *p = malloc(n + 16);
    if (p == NULL)
        return NULL;
    p[0] = n;
    *(size_t *)ud += n;
    return (char *)p + 16;
}

static void counted_free(void *ptr, void *ud)
{
    if (ptr == NULL)
        return;
    size_t *p = (size_t *)((char *)ptr - 16);
    *(size_t *)ud -= p[0];
    free(p);
}

static void *counted_calloc(size_t n, size_t size, void *ud)
{
    void *p = counted_malloc(n * size, ud);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

static void *counted_realloc(void *ptr, size_t n, void *ud)
{
    void *p = counted_malloc(n, ud);
    if (p != NULL && ptr != NULL) {
        size_t old = *(size_t *)((char *)ptr - 16);
        memcpy(p, ptr, old < n ? old : n);
    }
    if (p != NULL)
        counted_free(ptr, ud);
    return p;
}

/* What the same idle connection held as libnghttp2's client session, set
 * up as the proxy's upstream side set it up (push off, 256 KiB stream
 * windows, a 16 MiB connection window, windows given back by hand), for
 * docs/benchmarks.md. */
static size_t nghttp2_idle_bytes(struct t *t)
{
    size_t live = 0;
    nghttp2_mem mem = {&live, counted_malloc, counted_free, counted_calloc, counted_realloc};
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    nghttp2_session *c;
    ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
    ck_assert_int_eq(nghttp2_option_new(&opt), 0);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_peer_max_concurrent_streams(opt, 1);
    ck_assert_int_eq(nghttp2_session_client_new3(&c, cbs, NULL, opt, &mem), 0);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                         {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 256 * 1024}};
    ck_assert_int_eq(nghttp2_submit_settings(c, NGHTTP2_FLAG_NONE, settings, 2), 0);
    ck_assert_int_eq(
        nghttp2_session_set_local_window_size(c, NGHTTP2_FLAG_NONE, 0, 16 * 1024 * 1024), 0);
    nghttp2_nv nv[] = {{(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
                       {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
                       {(uint8_t *)":authority", (uint8_t *)"backend", 10, 7, 0},
                       {(uint8_t *)":path", (uint8_t *)"/index.html", 5, 11, 0}};
    ck_assert_int_eq(nghttp2_submit_request(c, NULL, nv, 4, NULL, NULL), 1);
    for (int round = 0; round < 100; round++) {
        bool moved = false;
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(c, &p)) > 0) {
            ck_assert_int_eq(nghttp2_session_mem_recv(t->srv, p, (size_t)n), n);
            moved = true;
        }
        while ((n = nghttp2_session_mem_send(t->srv, &p)) > 0) {
            ck_assert_int_eq(nghttp2_session_mem_recv(c, p, (size_t)n), n);
            moved = true;
        }
        if (!moved)
            break;
    }
    ck_assert_ptr_null(nghttp2_session_find_stream(c, 1));
    size_t held = live;
    nghttp2_session_del(c);
    ck_assert_uint_eq(live, 0);
    return held;
}

START_TEST(idle_memory)
{
    static struct t t;
    static uint8_t body[10];
    oracle_get(&t, "/index.html", body, sizeof(body), true);
    ck_assert_ptr_null(t.c.streams);
    size_t held = 0;
    const struct hpack_table *tb[] = {&t.c.hpack.table, &t.c.hpack_out.table};
    for (size_t i = 0; i < 2; i++)
        if (tb[i]->entries != NULL)
            held += malloc_usable_size(tb[i]->entries);
    printf("h2_session idle (client): struct %zu bytes, heap %zu bytes; a stream open: %zu "
           "bytes each\n",
           sizeof(struct h2_session), held, sizeof(struct h2_session_stream));
    ck_assert_uint_le(sizeof(struct h2_session) + held, 2048);
    nghttp2_session_del(t.srv);
    t.srv = NULL;
    oracle_start(&t); /* a new server for libnghttp2's client */
    size_t theirs = nghttp2_idle_bytes(&t);
    printf("libnghttp2 client session idle, as the proxy set it up: %zu bytes\n", theirs);
    ck_assert_uint_gt(theirs, sizeof(struct h2_session) + held);
    t_end(&t);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/h2_client_session");
    TCase *tc = tcase_create("client");
    tcase_add_test(tc, preface_settings_and_stream_ids);
    tcase_add_test(tc, oracle_requests_and_responses);
    tcase_add_test(tc, oracle_window_waits_for_the_caller);
    tcase_add_test(tc, response_valid);
    tcase_add_test(tc, response_interim_heads);
    tcase_add_test(tc, response_malformed_heads);
    tcase_add_test(tc, response_content_length);
    tcase_add_test(tc, response_misplaced_blocks);
    tcase_add_test(tc, frames_on_streams_not_opened);
    tcase_add_test(tc, rst_stream_from_the_server);
    tcase_add_test(tc, goaway_from_the_server);
    tcase_add_test(tc, settings_and_windows);
    tcase_add_test(tc, limits);
    tcase_add_test(tc, idle_memory);
    suite_add_tcase(suite, tc);
    return suite;
}
