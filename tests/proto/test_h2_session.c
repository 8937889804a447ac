/*
 * test_h2_session.c: corral's own HTTP/2 server session (h2_session.h)
 * talking to libnghttp2's client session, without sockets: requests and
 * bodies from the client, responses (HEADERS with CONTINUATION, DATA
 * from the caller's buffers, trailers) from the session, both flow-control
 * windows, the output bound, RST_STREAM and GOAWAY each way, and the
 * HPACK encoder's table as the client sizes it.  libnghttp2 is the oracle:
 * whatever the session writes, it must read without complaint.
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

/* What the client saw of one stream. */
struct cstream {
    int32_t id;
    char status[4];
    struct h2_frames_buf fields; /* "name: value\n" of the response head */
    struct h2_frames_buf trailers;
    struct h2_frames_buf body;
    bool closed;
    uint32_t close_code;
};

struct pair {
    nghttp2_session *client;
    struct h2_session server;
    struct h2_frames_buf to_server; /* the client's bytes the server did not consume */
    struct h2_frames_buf to_client; /* the server's output */
    size_t headers_frames, continuation_frames, data_frames;
    struct cstream cs[8];
    bool goaway;
    int32_t goaway_last;
    uint32_t goaway_code;
    /* The server's side. */
    char log[8192];
    size_t used;
    struct h2_frames_buf upload; /* request body bytes */
    bool take_body;              /* consume request body bytes as they come */
    bool answer_431;             /* a request over the limits is answered 431 */
};

static uint8_t scratch[4096];

static const struct h2_session_conf conf = {
    .max_concurrent_streams = 8,
    .initial_window_size = 16384,
    .conn_window_size = 65535,
    .max_header_list_size = 8192,
    .max_resets = 100,
    .reset_interval_ms = 1000,
    .scratch = scratch,
    .scratch_size = sizeof(scratch),
    .encoder_table_size = 4096,
};

#define slog(t, ...) test_appendf((t)->log, sizeof((t)->log), &(t)->used, __VA_ARGS__)

/* ------------------------------------------------------------- server */

static void sv_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    (void)kind;
    slog((struct pair *)arg, "field %u %.*s=%.*s\n", id, (int)f->name_len, (const char *)f->name,
         (int)f->value_len, (const char *)f->value);
}

static void sv_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head, bool end)
{
    struct pair *t = arg;
    static const char *const heads[] = {"", " too large", " cut"};
    slog(t, "%s %u%s%s\n", kind == H2_BLOCK_REQUEST ? "request" : "trailers", id, heads[head],
         end ? " end" : "");
    if (t->answer_431 && head != H2_HEAD_OK && kind == H2_BLOCK_REQUEST) {
        struct hpack_field f = {(const uint8_t *)":status", 7, (const uint8_t *)"431", 3, false};
        ck_assert_int_eq(h2_session_send_fields(&t->server, id, &f, NULL, 1, true), 0);
    }
}

static void sv_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end)
{
    struct pair *t = arg;
    h2_frames_put(&t->upload, data, len);
    if (t->take_body)
        h2_session_consume(&t->server, id, len);
    if (end)
        slog(t, "body %u end %zu\n", id, t->upload.len);
}

static void sv_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    slog((struct pair *)arg, "reset %u %u%s\n", id, code, by_peer ? " by peer" : "");
}

static void sv_window(void *arg, uint32_t id)
{
    (void)arg;
    (void)id;
}

static const struct h2_session_ops sv_ops = {
    .field = sv_field,
    .headers = sv_headers,
    .data = sv_data,
    .reset = sv_reset,
    .window = sv_window,
};

/* ------------------------------------------------------------- client */

static struct cstream *cstream(struct pair *t, int32_t id)
{
    for (size_t i = 0; i < sizeof(t->cs) / sizeof(t->cs[0]); i++)
        if (t->cs[i].id == id)
            return &t->cs[i];
    for (size_t i = 0; i < sizeof(t->cs) / sizeof(t->cs[0]); i++)
        if (t->cs[i].id == 0) {
            t->cs[i].id = id;
            return &t->cs[i];
        }
    ck_abort_msg("too many streams");
    return NULL;
}

static int cl_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    (void)s;
    (void)flags;
    struct cstream *c = cstream(arg, f->hd.stream_id);
    if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
        ck_assert_uint_eq(vlen, 3);
        memcpy(c->status, value, 3);
        return 0;
    }
    struct h2_frames_buf *b = f->headers.cat == NGHTTP2_HCAT_HEADERS ? &c->trailers : &c->fields;
    h2_frames_put(b, name, nlen);
    h2_frames_put(b, ": ", 2);
    h2_frames_put(b, value, vlen);
    h2_frames_put(b, "\n", 1);
    return 0;
}

static int cl_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *arg)
{
    (void)s;
    (void)flags;
    h2_frames_put(&cstream(arg, id)->body, data, len);
    return 0;
}

static int cl_close(nghttp2_session *s, int32_t id, uint32_t code, void *arg)
{
    (void)s;
    struct cstream *c = cstream(arg, id);
    c->closed = true;
    c->close_code = code;
    return 0;
}

static int cl_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
    (void)s;
    struct pair *t = arg;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        t->goaway = true;
        t->goaway_last = f->goaway.last_stream_id;
        t->goaway_code = f->goaway.error_code;
    }
    return 0;
}

static int cl_begin_frame(nghttp2_session *s, const nghttp2_frame_hd *hd, void *arg)
{
    (void)s;
    struct pair *t = arg;
    if (hd->type == NGHTTP2_HEADERS)
        t->headers_frames++;
    else if (hd->type == NGHTTP2_CONTINUATION)
        t->continuation_frames++;
    else if (hd->type == NGHTTP2_DATA)
        t->data_frames++;
    return 0;
}

/* The client, with `settings` (may be none), and the server. */
static void pair_start(struct pair *t, const nghttp2_settings_entry *settings, size_t n,
                       const struct h2_session_conf *c)
{
    memset(t, 0, sizeof(*t));
    nghttp2_session_callbacks *cbs;
    ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
    nghttp2_session_callbacks_set_on_header_callback(cbs, cl_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cl_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cl_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cl_frame_recv);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, cl_begin_frame);
    ck_assert_int_eq(nghttp2_session_client_new(&t->client, cbs, t), 0);
    nghttp2_session_callbacks_del(cbs);
    ck_assert_int_eq(nghttp2_submit_settings(t->client, NGHTTP2_FLAG_NONE, settings, n), 0);
    struct h2_sink sink = {h2_frames_sink_write, &t->to_client};
    h2_session_init(&t->server, c != NULL ? c : &conf, &sv_ops, t, &sink, 0);
}

/* Moves bytes both ways until neither side has more to say. */
static void pump(struct pair *t)
{
    for (int round = 0; round < 1000; round++) {
        bool moved = false;
        for (;;) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(t->client, &p);
            ck_assert_int_ge(n, 0);
            if (n == 0)
                break;
            h2_frames_put(&t->to_server, p, (size_t)n);
            moved = true;
        }
        if (t->to_server.len > 0 && t->server.error == H2_NO_ERROR) {
            size_t used = h2_session_recv(&t->server, t->to_server.p, t->to_server.len, 1);
            h2_frames_drop(&t->to_server, used);
        }
        if (t->to_client.len > 0) {
            ssize_t n = nghttp2_session_mem_recv(t->client, t->to_client.p, t->to_client.len);
            ck_assert_msg(n == (ssize_t)t->to_client.len,
                          "the client refused the server's "
                          "bytes: %zd",
                          n);
            h2_session_flushed(&t->server, t->to_client.len);
            t->to_client.len = 0;
            moved = true;
        }
        if (!moved)
            return;
    }
    ck_abort_msg("the two sides never went quiet");
}

static void pair_end(struct pair *t)
{
    nghttp2_session_del(t->client);
    h2_session_free(&t->server);
    free(t->to_server.p);
    free(t->to_client.p);
    free(t->upload.p);
    for (size_t i = 0; i < sizeof(t->cs) / sizeof(t->cs[0]); i++) {
        free(t->cs[i].fields.p);
        free(t->cs[i].trailers.p);
        free(t->cs[i].body.p);
    }
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE         \
    }

static int32_t get(struct pair *t, const char *path)
{
    nghttp2_nv nva[] = {NV(":method", "GET"),
                        NV(":scheme", "https"),
                        NV(":authority", "a"),
                        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0}};
    int32_t id = nghttp2_submit_request(t->client, NULL, nva, 4, NULL, NULL);
    ck_assert_int_gt(id, 0);
    return id;
}

/* Sends `len` bytes of `body` as the windows allow, pumping between;
 * `end` ends the stream with the last. */
static void send_body(struct pair *t, uint32_t id, const uint8_t *body, size_t len, bool end,
                      size_t *most)
{
    size_t sent = 0;
    while (sent < len) {
        size_t w = h2_session_send_window(&t->server, id);
        if (most != NULL && w > *most)
            *most = w;
        if (w == 0) {
            pump(t);
            ck_assert_uint_gt(h2_session_send_window(&t->server, id), 0);
            continue;
        }
        size_t n = len - sent < w ? len - sent : w;
        /* Three buffers, to cut frames across them. */
        size_t a = n / 3, b = n / 3;
        struct iovec iov[3] = {{(void *)(body + sent), a},
                               {(void *)(body + sent + a), b},
                               {(void *)(body + sent + a + b), n - a - b}};
        ck_assert_int_eq(h2_session_send_data(&t->server, id, iov, 3, end && sent + n == len), 0);
        sent += n;
    }
    pump(t);
}

/* ------------------------------------------------------------- tests */

START_TEST(response_head_body_trailers)
{
    static struct pair t;
    pair_start(&t, NULL, 0, NULL);
    int32_t id = get(&t, "/hello");
    pump(&t);
    ck_assert_str_eq(t.log, "field 1 :method=GET\nfield 1 :scheme=https\nfield 1 :authority=a\n"
                            "field 1 :path=/hello\nrequest 1 end\n");
    struct hpack_field head[] = {h2_frames_field(":status", "200"),
                                 h2_frames_field("content-type", "text/plain"),
                                 h2_frames_field("x-a", "1")};
    ck_assert_int_eq(h2_session_send_fields(&t.server, 1, head, NULL, 3, false), 0);
    static const uint8_t body[] = "hello, world";
    send_body(&t, 1, body, 12, false, NULL);
    /* Not ended yet: trailers end it. */
    struct iovec none = {NULL, 0};
    ck_assert_int_eq(h2_session_send_data(&t.server, 1, &none, 1, false), 0);
    struct hpack_field trl[] = {h2_frames_field("x-checksum", "abc")};
    ck_assert_int_eq(h2_session_send_fields(&t.server, 1, trl, NULL, 1, true), 0);
    pump(&t);
    struct cstream *c = cstream(&t, id);
    ck_assert_str_eq(c->status, "200");
    h2_frames_put(&c->fields, "", 1);
    ck_assert_str_eq((char *)c->fields.p, "content-type: text/plain\nx-a: 1\n");
    ck_assert_uint_eq(c->body.len, 12);
    ck_assert_int_eq(memcmp(c->body.p, body, 12), 0);
    h2_frames_put(&c->trailers, "", 1);
    ck_assert_str_eq((char *)c->trailers.p, "x-checksum: abc\n");
    ck_assert(c->closed);
    ck_assert_uint_eq(c->close_code, NGHTTP2_NO_ERROR);
    /* Both halves ended: the server forgot the stream. */
    ck_assert_ptr_null(h2_session_stream(&t.server, 1));
    ck_assert_int_eq(h2_session_send_fields(&t.server, 1, trl, NULL, 1, true), -1);
    pair_end(&t);
}
END_TEST

/* A head larger than the client's frame size goes out in CONTINUATION
 * frames; one larger than the scratch is encoded in memory of its own. */
START_TEST(response_head_in_continuations)
{
    static struct pair t;
    pair_start(&t, NULL, 0, NULL);
    get(&t, "/");
    pump(&t);
    static char big[40001];
    for (size_t i = 0; i < 40000; i++)
        big[i] = (char)('!' + (i * 7919) % 90); /* little for Huffman to take */
    struct hpack_field head[] = {h2_frames_field(":status", "204"), h2_frames_field("x-big", big)};
    ck_assert_uint_gt(hpack_encode_bound(head, 2), sizeof(scratch));
    ck_assert_int_eq(h2_session_send_fields(&t.server, 1, head, NULL, 2, true), 0);
    pump(&t);
    struct cstream *c = cstream(&t, 1);
    ck_assert_str_eq(c->status, "204");
    ck_assert_uint_eq(t.headers_frames, 1);
    ck_assert_uint_ge(t.continuation_frames, 1);
    ck_assert_uint_eq(c->fields.len, strlen("x-big: \n") + 40000);
    ck_assert_int_eq(memcmp(c->fields.p + 7, big, 40000), 0);
    ck_assert(c->closed);
    pair_end(&t);
}
END_TEST

/* The client's stream window of 1000 bytes and the connection's default:
 * the session never passes either, and goes on as WINDOW_UPDATEs come. */
START_TEST(response_body_follows_both_windows)
{
    static struct pair t;
    nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1000}};
    pair_start(&t, s, 1, NULL);
    get(&t, "/a");
    get(&t, "/b");
    pump(&t);
    struct hpack_field head[] = {h2_frames_field(":status", "200")};
    static uint8_t body[200000];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)(i * 31);
    size_t most = 0;
    for (uint32_t id = 1; id <= 3; id += 2) {
        ck_assert_int_eq(h2_session_send_fields(&t.server, id, head, NULL, 1, false), 0);
        send_body(&t, id, body, sizeof(body), true, &most);
    }
    ck_assert_uint_le(most, 1000);
    for (int32_t id = 1; id <= 3; id += 2) {
        struct cstream *c = cstream(&t, id);
        ck_assert_uint_eq(c->body.len, sizeof(body));
        ck_assert_int_eq(memcmp(c->body.p, body, sizeof(body)), 0);
        ck_assert(c->closed);
        ck_assert_uint_eq(c->close_code, 0);
    }
    ck_assert_uint_ge(t.data_frames, 2 * sizeof(body) / 1000);
    /* The connection's window: 65535 at most in flight, taken back. */
    ck_assert_int_le(t.server.send_window, 65535);
    pair_end(&t);
}
END_TEST

/* The client lowers the window below what a stream already sent: the
 * stream waits until WINDOW_UPDATEs bring it back above 0. */
START_TEST(response_window_lowered_midway)
{
    static struct pair t;
    pair_start(&t, NULL, 0, NULL);
    get(&t, "/");
    pump(&t);
    struct hpack_field head[] = {h2_frames_field(":status", "200")};
    ck_assert_int_eq(h2_session_send_fields(&t.server, 1, head, NULL, 1, false), 0);
    static uint8_t body[30000];
    struct iovec iov = {body, 30000};
    ck_assert_int_eq(h2_session_send_data(&t.server, 1, &iov, 1, false), 0);
    /* Before the client reads it, it lowers its setting to 10000. */
    nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 10000}};
    ck_assert_int_eq(nghttp2_submit_settings(t.client, NGHTTP2_FLAG_NONE, s, 1), 0);
    const uint8_t *p;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(t.client, &p)) > 0)
        ck_assert_uint_eq(h2_session_recv(&t.server, p, (size_t)n, 1), (size_t)n);
    ck_assert_int_eq(h2_session_stream(&t.server, 1)->send_window, 10000 - 30000);
    ck_assert_uint_eq(h2_session_send_window(&t.server, 1), 0);
    send_body(&t, 1, body, 20000, true, NULL);
    struct cstream *c = cstream(&t, 1);
    ck_assert_uint_eq(c->body.len, 50000);
    ck_assert(c->closed);
    pair_end(&t);
}
END_TEST

/* The output bound: DATA waits for what the sink holds to be flushed. */
START_TEST(output_bound)
{
    static struct pair t;
    struct h2_session_conf c = conf;
    c.max_output = 3000;
    pair_start(&t, NULL, 0, &c);
    get(&t, "/");
    pump(&t);
    struct hpack_field head[] = {h2_frames_field(":status", "200")};
    ck_assert_int_eq(h2_session_send_fields(&t.server, 1, head, NULL, 1, false), 0);
    size_t held = t.to_client.len;
    ck_assert_uint_eq(t.server.output, held);
    ck_assert_uint_eq(h2_session_send_window(&t.server, 1), 3000 - held);
    static uint8_t body[3000];
    struct iovec iov = {body, 3000 - held};
    ck_assert_int_eq(h2_session_send_data(&t.server, 1, &iov, 1, false), 0);
    ck_assert_uint_eq(h2_session_send_window(&t.server, 1), 0);
    iov.iov_len = 1;
    ck_assert_int_eq(h2_session_send_data(&t.server, 1, &iov, 1, false), -1);
    pump(&t); /* flushed */
    ck_assert_uint_eq(t.server.output, 0);
    ck_assert_uint_eq(h2_session_send_window(&t.server, 1), 3000);
    send_body(&t, 1, body, 3000, true, NULL);
    ck_assert(cstream(&t, 1)->closed);
    pair_end(&t);
}
END_TEST

/* Fields indexed in the encoder's table: the client decodes the second
 * response from references; a client that allows no table gets none,
 * told by a size update, and its memory is freed. */
START_TEST(encoder_table_as_the_client_sizes_it)
{
    static struct pair t;
    for (int zero = 0; zero <= 1; zero++) {
        nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0}};
        pair_start(&t, s, zero ? 1 : 0, NULL);
        get(&t, "/1");
        get(&t, "/2");
        pump(&t);
        struct hpack_field head[] = {h2_frames_field(":status", "200"),
                                     h2_frames_field("x-session", "0123456789abcdef")};
        static const uint8_t how[] = {HPACK_INDEX, HPACK_INDEX};
        size_t before = t.to_client.len;
        ck_assert_int_eq(h2_session_send_fields(&t.server, 1, head, how, 2, true), 0);
        size_t first = t.to_client.len - before;
        before = t.to_client.len;
        ck_assert_int_eq(h2_session_send_fields(&t.server, 3, head, how, 2, true), 0);
        size_t second = t.to_client.len - before;
        pump(&t);
        for (int32_t id = 1; id <= 3; id += 2) {
            struct cstream *c = cstream(&t, id);
            ck_assert_str_eq(c->status, "200");
            h2_frames_put(&c->fields, "", 1);
            ck_assert_str_eq((char *)c->fields.p, "x-session: 0123456789abcdef\n");
        }
        if (zero) {
            ck_assert_uint_eq(second + 1, first); /* the first has a size update */
            ck_assert_ptr_null(t.server.hpack_out.table.buf);
        } else {
            ck_assert_uint_lt(second, first); /* references */
            ck_assert_ptr_nonnull(t.server.hpack_out.table.buf);
        }
        pair_end(&t);
    }
}
END_TEST

/* An upload read from memory by libnghttp2's data provider. */
struct upload_src {
    const uint8_t *p;
    size_t len, off;
};

static ssize_t upload_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
                           uint32_t *flags, nghttp2_data_source *src, void *arg)
{
    (void)s;
    (void)id;
    (void)arg;
    struct upload_src *u = src->ptr;
    size_t n = u->len - u->off < len ? u->len - u->off : len;
    memcpy(buf, u->p + u->off, n);
    u->off += n;
    if (u->off == u->len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* A request body: the session passes it, and gives the windows back as
 * the caller takes it, so an upload past both windows completes; one the
 * caller does not take stalls at the stream's window. */
START_TEST(request_body_and_windows)
{
    static struct pair t;
    static uint8_t up[300000];
    for (size_t i = 0; i < sizeof(up); i++)
        up[i] = (uint8_t)(i * 13);
    for (int take = 1; take >= 0; take--) {
        struct h2_session_conf c = conf;
        c.conn_window_size = 1 << 20; /* the stream's window is the bound */
        pair_start(&t, NULL, 0, &c);
        pump(&t); /* the SETTINGS both ways, acknowledged */
        t.take_body = take;
        struct upload_src src = {up, sizeof(up), 0};
        nghttp2_data_provider dp = {.source.ptr = &src, .read_callback = upload_read};
        nghttp2_nv nva[] = {NV(":method", "POST"), NV(":scheme", "https"), NV(":authority", "a"),
                            NV(":path", "/up")};
        ck_assert_int_eq(nghttp2_submit_request(t.client, NULL, nva, 4, &dp, NULL), 1);
        pump(&t);
        if (take) {
            ck_assert_uint_eq(t.upload.len, sizeof(up));
            ck_assert_int_eq(memcmp(t.upload.p, up, sizeof(up)), 0);
            ck_assert_ptr_nonnull(strstr(t.log, "body 1 end 300000\n"));
        } else {
            /* Nothing given back: the stream's window, as our
             * SETTINGS announced it, is all that came. */
            ck_assert_uint_eq(t.upload.len, conf.initial_window_size);
            ck_assert_ptr_null(strstr(t.log, "body 1 end"));
        }
        pair_end(&t);
    }
}
END_TEST

/* Resets and GOAWAY each way. */
START_TEST(reset_and_goaway)
{
    static struct pair t;
    pair_start(&t, NULL, 0, NULL);
    get(&t, "/1");
    get(&t, "/2");
    pump(&t);
    h2_session_reset(&t.server, 1, H2_CANCEL);
    pump(&t);
    ck_assert(cstream(&t, 1)->closed);
    ck_assert_uint_eq(cstream(&t, 1)->close_code, NGHTTP2_CANCEL);
    ck_assert_int_eq(nghttp2_submit_rst_stream(t.client, NGHTTP2_FLAG_NONE, 3, NGHTTP2_CANCEL), 0);
    pump(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "reset 3 8 by peer\n"));
    ck_assert_ptr_null(t.server.streams);
    get(&t, "/3");
    pump(&t);
    h2_session_goaway(&t.server, H2_NO_ERROR);
    pump(&t);
    ck_assert(t.goaway);
    ck_assert_int_eq(t.goaway_last, 5);
    ck_assert_uint_eq(t.goaway_code, 0);
    /* Stream 5 is still served. */
    struct hpack_field head[] = {h2_frames_field(":status", "200")};
    ck_assert_int_eq(h2_session_send_fields(&t.server, 5, head, NULL, 1, true), 0);
    pump(&t);
    ck_assert_str_eq(cstream(&t, 5)->status, "200");
    ck_assert(cstream(&t, 5)->closed);
    pair_end(&t);
}
END_TEST

/* A header list over http2_max_header_list_size (8192 here): a block
 * shorter than the limit is decoded whole and its request answered 431,
 * the connection going on; a longer block is cut before it is decoded,
 * its request answered 431 all the same, then GOAWAY ENHANCE_YOUR_CALM. */
START_TEST(header_list_over_the_limit_answered_431)
{
    static struct pair t;
    pair_start(&t, NULL, 0, NULL);
    t.answer_431 = true;
    static char a[2501];
    memset(a, 'a', 2500); /* Huffman: 5 bits each */
    nghttp2_nv nva[] = {
        NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", "a"), NV(":path", "/"),
        NV("x-1", a),         NV("x-2", a),           NV("x-3", a),          NV("x-4", a)};
    for (size_t i = 4; i < 8; i++)
        nva[i].valuelen = 2500;
    ck_assert_int_eq(nghttp2_submit_request(t.client, NULL, nva, 8, NULL, NULL), 1);
    pump(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "request 1 too large end\n"));
    ck_assert_ptr_null(strstr(t.log, "x-4"));
    ck_assert_str_eq(cstream(&t, 1)->status, "431");
    ck_assert(cstream(&t, 1)->closed);
    ck_assert_int_eq(t.server.error, H2_NO_ERROR);
    /* Now a block of 9000 bytes that Huffman cannot shrink. */
    static char b[9001];
    for (size_t i = 0; i < 9000; i++)
        b[i] = (char)('!' + (i * 7919) % 90);
    nghttp2_nv big[] = {NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", "a"),
                        NV(":path", "/"), NV("x-big", b)};
    big[4].valuelen = 9000;
    ck_assert_int_eq(nghttp2_submit_request(t.client, NULL, big, 5, NULL, NULL), 3);
    pump(&t);
    ck_assert_ptr_nonnull(strstr(t.log, "request 3 cut\n"));
    ck_assert_str_eq(cstream(&t, 3)->status, "431");
    ck_assert(t.goaway);
    ck_assert_uint_eq(t.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    ck_assert_int_eq(t.goaway_last, 3);
    pair_end(&t);
}
END_TEST

/* The memory an idle connection's session holds: the struct, and what
 * stays allocated once a browser-like request was answered and its
 * stream is gone: its only heap blocks are the stream array (freed when
 * no stream is open) and the HPACK tables' blocks, whose sizes the heap
 * gives (malloc_usable_size()).  Printed for docs/http2.md. */
START_TEST(idle_memory)
{
    static struct pair t;
    for (int indexed = 0; indexed <= 1; indexed++) {
        pair_start(&t, NULL, 0, NULL);
        nghttp2_nv nva[] = {
            NV(":method", "GET"),
            NV(":scheme", "https"),
            NV(":authority", "www.example.com"),
            NV(":path", "/index.html"),
            NV("user-agent",
               "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"),
            NV("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            NV("accept-language", "en-US,en;q=0.5"),
            NV("accept-encoding", "gzip, deflate, br, zstd"),
            NV("cookie", "session=0123456789abcdef0123456789abcdef"),
        };
        ck_assert_int_eq(nghttp2_submit_request(t.client, NULL, nva, 9, NULL, NULL), 1);
        struct h2_frames_buf in = {0};
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(t.client, &p)) > 0)
            h2_frames_put(&in, p, (size_t)n);
        h2_session_free(&t.server); /* pair_start's: measured afresh below */
        t.to_client.len = 0;
        static uint8_t room[65536]; /* the sink's room, reserved */
        h2_frames_put(&t.to_client, room, sizeof(room));
        t.to_client.len = 0;
        struct hpack_field head[] = {
            h2_frames_field(":status", "200"), h2_frames_field("content-type", "text/html"),
            h2_frames_field("content-length", "0"), h2_frames_field("server", "corral")};
        static const uint8_t how[] = {HPACK_NO_INDEX, HPACK_INDEX, HPACK_NO_INDEX, HPACK_INDEX};

        struct h2_sink sink = {h2_frames_sink_write, &t.to_client};
        h2_session_init(&t.server, &conf, &sv_ops, &t, &sink, 0);
        ck_assert_uint_eq(h2_session_recv(&t.server, in.p, in.len, 1), in.len);
        ck_assert_int_eq(h2_session_send_fields(&t.server, 1, head, indexed ? how : NULL, 4, true),
                         0);
        ck_assert_ptr_null(t.server.streams); /* both halves ended */
        size_t held = 0, tables = 0;
        const struct hpack_table *tb[] = {&t.server.hpack.table, &t.server.hpack_out.table};
        for (size_t i = 0; i < 2; i++) {
            if (tb[i]->entries == NULL)
                continue;
            tables += tb[i]->slots * sizeof(struct hpack_entry) + tb[i]->cap;
            held += malloc_usable_size(tb[i]->entries);
        }
        ck_assert_uint_ge(held, tables);
        ck_assert_uint_le(held, tables + 2 * 32);
        /* The client indexed its fields: the decoder's table is in use. */
        ck_assert_ptr_nonnull(t.server.hpack.table.entries);
        ck_assert_uint_eq(t.server.hpack_out.table.entries != NULL, indexed);
        printf("h2_session idle (%s response fields): struct %zu bytes, heap %zu bytes "
               "(HPACK tables %zu); a stream open: %zu bytes each\n",
               indexed ? "indexed" : "unindexed", sizeof(struct h2_session), held, tables,
               sizeof(struct h2_session_stream));
        /* The budget of docs/http2.md: the struct and the tables grown to
         * what this request and response index, well under one 4 KB
         * table's 5.5 KiB. */
        ck_assert_uint_le(sizeof(struct h2_session) + held, 2048);
        free(in.p);
        pump(&t); /* the client reads the answer: the bytes made sense */
        ck_assert_str_eq(cstream(&t, 1)->status, "200");
        pair_end(&t);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/h2_session");
    TCase *tc = tcase_create("nghttp2_client");
    tcase_add_test(tc, response_head_body_trailers);
    tcase_add_test(tc, response_head_in_continuations);
    tcase_add_test(tc, response_body_follows_both_windows);
    tcase_add_test(tc, response_window_lowered_midway);
    tcase_add_test(tc, output_bound);
    tcase_add_test(tc, encoder_table_as_the_client_sizes_it);
    tcase_add_test(tc, request_body_and_windows);
    tcase_add_test(tc, reset_and_goaway);
    tcase_add_test(tc, header_list_over_the_limit_answered_431);
    tcase_add_test(tc, idle_memory);
    suite_add_tcase(suite, tc);
    return suite;
}
