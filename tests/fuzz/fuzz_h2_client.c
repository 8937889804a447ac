/*
 * fuzz_h2_client.c: libFuzzer, differential, over the client side of
 * corral's HTTP/2 session (h2_session.h, conf.client) with a libnghttp2
 * client session as the oracle.  Both open the same three requests (a
 * GET on stream 1, a HEAD on 3, a POST with a body on 5); an input is
 * what a server sends back.  Ours reads it in three pieces (cut at a
 * third and at two thirds), libnghttp2 a frame at a time, its output
 * sent after each.
 *
 * The check goes one way, the way that matters for a proxy: a response
 * ours passes on whole (its stream ended by the server, not reset) must
 * be one libnghttp2 took whole too, with the same status, fields, body
 * and trailers.  Ours may refuse more (its flood counters, its
 * header-list cut, its stricter reading of a few rules): a response it
 * resets that libnghttp2 takes is not a failure.  Besides, the session's
 * own invariants hold (AddressSanitizer, asserts), whatever the input.
 */
#include "h2_pieces.h"
#include "proto/http2/h2_session.h"
#include "proto/http2/hpack.h"

#include <nghttp2/nghttp2.h>

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAMS 3

/* One side's view of a stream: its events as text, and how it ended. */
struct stream_trace {
    char text[2048];
    size_t len;
    bool overflow; /* more than the text holds: not compared */
    bool ended;    /* the server's half ended, the response whole */
    bool reset;
    /* Body bytes since the last other event, and their FNV-1a hash:
     * traced as one line, however the pieces were cut. */
    uint64_t body, hash;
};

struct side {
    struct stream_trace st[STREAMS];
};

static struct stream_trace *trace_of(struct side *s, uint32_t id)
{
    if (id == 0 || id % 2 == 0 || id > 2 * STREAMS - 1)
        return NULL;
    return &s->st[id / 2];
}

static void trace_vput(struct stream_trace *t, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void trace_vput(struct stream_trace *t, const char *fmt, va_list ap)
{
    if (t->overflow)
        return;
    int n = vsnprintf(t->text + t->len, sizeof(t->text) - t->len, fmt, ap);
    if (n < 0 || (size_t)n >= sizeof(t->text) - t->len) {
        t->overflow = true;
        return;
    }
    t->len += (size_t)n;
}

static void trace_put(struct stream_trace *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void trace_put(struct stream_trace *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    trace_vput(t, fmt, ap);
    va_end(ap);
}

static void trace_body_flush(struct stream_trace *t)
{
    if (t == NULL || t->body == 0)
        return;
    trace_put(t, "data %llu %016llx\n", (unsigned long long)t->body, (unsigned long long)t->hash);
    t->body = 0;
}

/* An event: after the body bytes that came before it. */
static void trace_add(struct stream_trace *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void trace_add(struct stream_trace *t, const char *fmt, ...)
{
    if (t == NULL)
        return;
    trace_body_flush(t);
    va_list ap;
    va_start(ap, fmt);
    trace_vput(t, fmt, ap);
    va_end(ap);
}

static void trace_body(struct stream_trace *t, const uint8_t *data, size_t len)
{
    if (t == NULL)
        return;
    if (t->body == 0)
        t->hash = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        t->hash = (t->hash ^ data[i]) * 1099511628211ull;
    t->body += len;
}

static void trace_field(struct stream_trace *t, const uint8_t *name, size_t nlen,
                        const uint8_t *value, size_t vlen)
{
    trace_add(t, "%.*s: ", (int)nlen, (const char *)name);
    for (size_t i = 0; i < vlen; i++)
        trace_add(t, "%02x", value[i]);
    trace_add(t, "\n");
}

/* ------------------------------------------------------------------ ours */

static uint8_t scratch[16384];

static const struct h2_session_conf conf = {
    .client = true,
    .initial_window_size = 65535,
    .conn_window_size = 65535,
    .max_header_list_size = 65536,
    .max_resets = UINT32_MAX,
    .reset_interval_ms = 1000,
    .scratch = scratch,
    .scratch_size = sizeof(scratch),
};

struct ours {
    struct h2_session s;
    struct side side;
};

static void ours_write(void *arg, const struct iovec *iov, int count)
{
    (void)arg;
    (void)iov;
    (void)count;
}

static void ours_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    struct ours *o = arg;
    (void)kind;
    trace_field(trace_of(&o->side, id), f->name, f->name_len, f->value, f->value_len);
}

static void ours_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head,
                         bool end)
{
    struct ours *o = arg;
    struct stream_trace *t = trace_of(&o->side, id);
    assert(t != NULL && (kind == H2_BLOCK_RESPONSE || kind == H2_BLOCK_TRAILERS));
    if (head != H2_HEAD_OK && t != NULL)
        t->overflow = true; /* fields left out: not compared */
    trace_add(t, "end of block%s\n", end ? ", stream" : "");
    if (end)
        t->ended = true;
}

static void ours_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end)
{
    struct ours *o = arg;
    struct stream_trace *t = trace_of(&o->side, id);
    assert(t != NULL);
    trace_body(t, data, len);
    h2_session_consume(&o->s, id, len);
    if (end) {
        trace_add(t, "end of data\n");
        t->ended = true;
    }
}

static void ours_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    struct ours *o = arg;
    (void)code;
    (void)by_peer;
    struct stream_trace *t = trace_of(&o->side, id);
    assert(t != NULL);
    t->reset = true;
}

static void ours_window(void *arg, uint32_t id)
{
    (void)arg;
    (void)id;
}

static const struct h2_session_ops ours_ops = {
    .field = ours_field,
    .headers = ours_headers,
    .data = ours_data,
    .reset = ours_reset,
    .window = ours_window,
};

static struct hpack_field fld(const char *n, const char *v)
{
    return (struct hpack_field){(const uint8_t *)n, strlen(n), (const uint8_t *)v, strlen(v),
                                false};
}

static void ours_requests(struct ours *o)
{
    static const char *const methods[STREAMS] = {"GET", "HEAD", "POST"};
    for (int i = 0; i < STREAMS; i++) {
        struct hpack_field f[] = {fld(":method", methods[i]), fld(":scheme", "https"),
                                  fld(":authority", "backend"), fld(":path", "/")};
        uint32_t id = h2_session_request(&o->s, f, NULL, 4, i < 2, i == 1);
        assert(id == (uint32_t)(2 * i + 1));
    }
    static const uint8_t body[] = "body";
    struct iovec iov = {(void *)body, 4};
    assert(h2_session_send_data(&o->s, 5, &iov, 1, true) == 0);
}

/* ---------------------------------------------------------------- theirs */

struct theirs {
    nghttp2_session *s;
    struct side side;
    bool fatal;
};

static int th_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    (void)s;
    (void)flags;
    struct theirs *th = arg;
    trace_field(trace_of(&th->side, (uint32_t)f->hd.stream_id), name, nlen, value, vlen);
    return 0;
}

static int th_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
    (void)s;
    struct theirs *th = arg;
    struct stream_trace *t = trace_of(&th->side, (uint32_t)f->hd.stream_id);
    bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (t == NULL)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS) {
        trace_add(t, "end of block%s\n", end ? ", stream" : "");
        t->ended |= end;
    } else if (f->hd.type == NGHTTP2_DATA && end) {
        trace_add(t, "end of data\n");
        t->ended = true;
    }
    return 0;
}

static int th_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *arg)
{
    (void)s;
    (void)flags;
    struct theirs *th = arg;
    trace_body(trace_of(&th->side, (uint32_t)id), data, len);
    return 0;
}

static int th_close(nghttp2_session *s, int32_t id, uint32_t code, void *arg)
{
    (void)s;
    struct theirs *th = arg;
    struct stream_trace *t = trace_of(&th->side, (uint32_t)id);
    if (t != NULL && (code != NGHTTP2_NO_ERROR || !t->ended))
        t->reset = true;
    return 0;
}

static ssize_t th_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *arg)
{
    (void)s;
    (void)id;
    (void)src;
    (void)arg;
    assert(len >= 4);
    memcpy(buf, "body", 4);
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 4;
}

static nghttp2_session_callbacks *th_cbs;

/* What libnghttp2 has to send, sent (to no one). */
static void th_flush(struct theirs *th)
{
    const uint8_t *out;
    while (nghttp2_session_mem_send(th->s, &out) > 0)
        ;
}

static bool th_new(struct theirs *th)
{
    if (th_cbs == NULL) {
        if (nghttp2_session_callbacks_new(&th_cbs) != 0)
            return false;
        nghttp2_session_callbacks_set_on_header_callback(th_cbs, th_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(th_cbs, th_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(th_cbs, th_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(th_cbs, th_close);
    }
    if (nghttp2_session_client_new(&th->s, th_cbs, th) != 0)
        return false;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, conf.initial_window_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, conf.max_header_list_size},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    if (nghttp2_submit_settings(th->s, NGHTTP2_FLAG_NONE, settings, 4) != 0)
        return false;
    static const char *const methods[STREAMS] = {"GET", "HEAD", "POST"};
    for (int i = 0; i < STREAMS; i++) {
        nghttp2_nv nv[] = {
            {(uint8_t *)":method", (uint8_t *)methods[i], 7, strlen(methods[i]), 0},
            {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
            {(uint8_t *)":authority", (uint8_t *)"backend", 10, 7, 0},
            {(uint8_t *)":path", (uint8_t *)"/", 5, 1, 0},
        };
        nghttp2_data_provider p = {.read_callback = th_read};
        if (nghttp2_submit_request(th->s, NULL, nv, 4, i == 2 ? &p : NULL, NULL) != 2 * i + 1)
            return false;
    }
    th_flush(th);
    return true;
}

/* The server's bytes, a frame at a time, libnghttp2's output sent after
 * each: a RST_STREAM it queues goes out, and its stream is gone, before
 * the next frame, as ours does.  Read whole, a frame for a stream it had
 * reset as malformed after the server's END_STREAM, in the same read,
 * would find the stream still there, half closed, and end the connection
 * (STREAM_CLOSED), where ours, as RFC 9113 5.1 asks once RST_STREAM is
 * sent, ignores the frame. */
static void th_recv(struct theirs *th, const uint8_t *data, size_t size)
{
    for (size_t at = 0; at < size;) {
        size_t end = size;
        if (size - at >= 9) {
            size_t len = (size_t)data[at] << 16 | (size_t)data[at + 1] << 8 | data[at + 2];
            if (len + 9 < size - at)
                end = at + 9 + len;
        }
        if (nghttp2_session_mem_recv(th->s, data + at, end - at) < 0) {
            th->fatal = true;
            return;
        }
        th_flush(th);
        at = end;
    }
}

/* -------------------------------------------------------------- the run */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ours o;
    static struct theirs th;
    o = (struct ours){0};
    th = (struct theirs){0};
    if (!th_new(&th))
        return 0;
    struct h2_sink sink = {ours_write, &o};
    h2_session_init(&o.s, &conf, &ours_ops, &o, &sink, 0);
    ours_requests(&o);

    th_recv(&th, data, size);

    struct h2_pieces pieces;
    h2_pieces_init(&pieces, data, size);
    for (size_t c = 0; c < H2_PIECES && o.s.error == H2_NO_ERROR; c++)
        h2_pieces_feed(&pieces, c, &o.s, c);
    h2_pieces_free(&pieces);

    for (int i = 0; i < STREAMS; i++) {
        const struct stream_trace *a = &o.side.st[i], *b = &th.side.st[i];
        if (!a->ended || a->reset || a->overflow || b->overflow)
            continue;
        if (!b->ended || b->reset || a->len != b->len || memcmp(a->text, b->text, a->len) != 0) {
            fprintf(stderr,
                    "stream %d: ours took the response whole, libnghttp2 %s%s\n"
                    "--- ours\n%.*s--- theirs\n%.*s",
                    2 * i + 1,
                    b->reset   ? "reset it"
                    : b->ended ? "saw another"
                               : "did not end it",
                    th.fatal ? " (after a connection error)" : "", (int)a->len, a->text,
                    (int)b->len, b->text);
            abort();
        }
    }
    h2_session_free(&o.s);
    nghttp2_session_del(th.s);
    return 0;
}
