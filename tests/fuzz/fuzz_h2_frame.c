/*
 * fuzz_h2_frame.c: libFuzzer, differential, over corral's own HTTP/2
 * frame layer (proto/http2/h2_frame.h, h2_session.h) with a libnghttp2
 * server session as the oracle.  An input is what a client sends, preface
 * included; ours reads it in three pieces (cut at a third and at two
 * thirds), libnghttp2 in the same pieces cut again at each frame's end,
 * its output sent after each (so that a RST_STREAM it queues goes out,
 * its stream gone, before the next frame, as ours does).  Both must end
 * the connection alike (no error, or GOAWAY with the same code) and, up
 * to that end, deliver the same request events: each header block
 * decoded (ours by the session) to the same fields, each stream's body
 * bytes and END_STREAM, each RST_STREAM the server sent with its code.
 * So the HTTP message checks (RFC 9113 8.1-8.3: h2_message.h against
 * libnghttp2's) are compared too: a stream one side resets as malformed
 * and the other takes differs.
 *
 * libnghttp2 is set up with the daemon's options; limits this
 * layer adds in front of it (the flood counters; the header-block cut,
 * which this harness sets past any input) would end a connection that
 * libnghttp2 keeps: when ours ends for such a defence, only the events
 * before it are compared.
 */
#include "h2_pieces.h"
#include "proto/http2/h2_session.h"
#include "proto/http2/hpack.h"

#include <nghttp2/nghttp2.h>

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The events of one side, as text lines. */
struct trace {
    char *buf;
    size_t len, cap;
    uint32_t error; /* the GOAWAY code sent, or UINT32_MAX: none */
    bool calm;      /* ended by a defence libnghttp2 does not have */
    /* The RST_STREAM frames sent, apart: ours go out as the stream
     * fails, libnghttp2's once the input read is done, and not at all
     * once it ended the connection in that read. */
    struct trace *resets;
};

static void trace_add(struct trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void trace_add(struct trace *t, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    assert(n >= 0);
    size_t m = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if (t->len + m + 1 > t->cap) {
        t->cap = (t->len + m + 1) * 2;
        t->buf = realloc(t->buf, t->cap);
        assert(t->buf != NULL);
    }
    memcpy(t->buf + t->len, line, m);
    t->len += m;
    t->buf[t->len] = '\0';
}

/* A field as text: escapes keep lines apart. */
static void trace_field(struct trace *t, const uint8_t *name, size_t nlen, const uint8_t *value,
                        size_t vlen)
{
    trace_add(t, " [");
    for (size_t i = 0; i < nlen + vlen; i++) {
        uint8_t c = i < nlen ? name[i] : value[i - nlen];
        if (i == nlen)
            trace_add(t, ":");
        trace_add(t, c >= 0x20 && c < 0x7f && c != '[' && c != ']' ? "%c" : "\\%02x", c);
    }
    trace_add(t, "]");
}

/* The server's frames written: RST_STREAM and GOAWAY go in the trace. */
static void trace_output(struct trace *t, const uint8_t *p, size_t n)
{
    while (n >= 9) {
        uint32_t len = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        assert(n >= 9 + len);
        uint32_t sid = ((uint32_t)p[5] << 24 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 8 | p[8]);
        const uint8_t *q = p + 9;
        if (p[3] == H2_RST_STREAM)
            trace_add(t->resets, "rst %u %u\n", sid, q[3]);
        if (p[3] == H2_GOAWAY && t->error == UINT32_MAX) {
            uint32_t code =
                (uint32_t)q[4] << 24 | (uint32_t)q[5] << 16 | (uint32_t)q[6] << 8 | q[7];
            if (code != 0)
                t->error = code;
        }
        p += 9 + len;
        n -= 9 + len;
    }
}

/* Drops from `t` the client's resets of streams the server reset as
 * malformed (`resets` has "rst <id> 1"): libnghttp2 sends its RST_STREAM
 * only after the read, so a client's in the same read still finds the
 * stream there; on the wire both ends reset it, and nothing differs. */
static void drop_peer_resets(struct trace *t, const char *resets)
{
    if (t->buf == NULL)
        return;
    size_t out = 0;
    for (size_t at = 0; at < t->len;) {
        const char *line = t->buf + at;
        const char *nl = memchr(line, '\n', t->len - at);
        size_t n = nl != NULL ? (size_t)(nl - line) + 1 : t->len - at;
        unsigned id, code;
        char want[32];
        bool drop = false;
        if (sscanf(line, "reset %u %u\n", &id, &code) == 2) {
            snprintf(want, sizeof(want), "rst %u 1\n", id);
            for (const char *p = resets; (p = strstr(p, want)) != NULL; p++)
                if (p == resets || p[-1] == '\n')
                    drop = true;
        }
        if (!drop) {
            memmove(t->buf + out, line, n);
            out += n;
        }
        at += n;
    }
    t->len = out;
    t->buf[out] = '\0';
}

/* ---------------------------------------------------------------- ours */

struct ours {
    struct h2_session s;
    struct trace t;
    struct trace fields; /* of the header block being passed */
    bool ended;          /* after an error: no more events */
};

static void ours_write(void *arg, const struct iovec *iov, int count)
{
    struct ours *o = arg;
    size_t n = 0;
    for (int i = 0; i < count; i++)
        n += iov[i].iov_len;
    uint8_t *flat = malloc(n + 1);
    assert(flat != NULL);
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    trace_output(&o->t, flat, n);
    free(flat);
}

static void fields_clear(struct trace *t)
{
    t->len = 0;
    if (t->buf != NULL)
        t->buf[0] = '\0';
}

static void ours_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    struct ours *o = arg;
    (void)id;
    (void)kind;
    trace_field(&o->fields, f->name, f->name_len, f->value, f->value_len);
}

static void ours_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head,
                         bool end)
{
    struct ours *o = arg;
    (void)kind;
    /* The header-list limit is past any input here; a block is cut only
     * at a string announced longer than 64 KiB, which ends the
     * connection, as the daemon's own defence (ours_only()). */
    assert(head == H2_HEAD_OK || head == H2_HEAD_CUT);
    if (head == H2_HEAD_CUT) {
        fields_clear(&o->fields);
        return;
    }
    trace_add(&o->t, "headers %u%s%s\n", id, end ? " end" : "",
              o->fields.buf != NULL ? o->fields.buf : "");
    fields_clear(&o->fields);
}

static void ours_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end)
{
    struct ours *o = arg;
    (void)data;
    if (len > 0)
        trace_add(&o->t, "data %u %zu\n", id, len);
    if (end)
        trace_add(&o->t, "end %u\n", id);
}

static void ours_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    fields_clear(&((struct ours *)arg)->fields); /* a malformed block's */
    if (by_peer)
        trace_add(&((struct ours *)arg)->t, "reset %u %u\n", id, code);
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

static uint8_t scratch[1 << 17];

/* The daemon's defaults, but a header-block cut and stream limits past
 * anything a fuzz input can reach. */
static const struct h2_session_conf conf = {
    .max_concurrent_streams = 1000,
    .initial_window_size = 65536,
    .conn_window_size = 65536 * 16,
    .max_header_list_size = 1 << 20,
    .max_resets = 100000,
    .reset_interval_ms = 10000,
    .scratch = scratch,
    .scratch_size = sizeof(scratch),
};

/* -------------------------------------------------------------- theirs */

struct theirs {
    nghttp2_session *s;
    ssize_t fatal;    /* what nghttp2_session_mem_recv() failed with */
    bool reset_open;  /* the RST_STREAM being read names an open stream */
    bool zero_window; /* ended at a stream's WINDOW_UPDATE of 0 */
    struct trace t;
    struct trace fields; /* of the header block being decoded */
};

static int th_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
    struct theirs *th = arg;
    (void)s;
    (void)f;
    th->fields.len = 0;
    if (th->fields.buf != NULL)
        th->fields.buf[0] = '\0';
    return 0;
}

static int th_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    struct theirs *th = arg;
    (void)s;
    (void)f;
    (void)flags;
    trace_field(&th->fields, name, nlen, value, vlen);
    return 0;
}

static int th_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
    struct theirs *th = arg;
    (void)s;
    bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        trace_add(&th->t, "headers %d%s%s\n", f->hd.stream_id, end ? " end" : "",
                  th->fields.buf != NULL ? th->fields.buf : "");
        th->fields.len = 0;
        if (th->fields.buf != NULL)
            th->fields.buf[0] = '\0';
        break;
    case NGHTTP2_DATA:
        if (end)
            trace_add(&th->t, "end %d\n", f->hd.stream_id);
        break;
    case NGHTTP2_RST_STREAM: /* one for a closed stream is no event */
        if (th->reset_open)
            trace_add(&th->t, "reset %d %u\n", f->hd.stream_id, f->rst_stream.error_code);
        break;
    default: break;
    }
    return 0;
}

static int th_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *arg)
{
    struct theirs *th = arg;
    (void)s;
    (void)flags;
    (void)data;
    if (len > 0)
        trace_add(&th->t, "data %d %zu\n", id, len);
    return 0;
}

static int th_begin_frame(nghttp2_session *s, const nghttp2_frame_hd *hd, void *arg)
{
    struct theirs *th = arg;
    if (hd->type == NGHTTP2_RST_STREAM)
        th->reset_open = nghttp2_session_find_stream(s, hd->stream_id) != NULL;
    return 0;
}

/* A WINDOW_UPDATE of 0 on a stream is a stream error (RFC 9113 6.9);
 * libnghttp2 1.52 makes it a connection error, as 5.4.1 lets it. */
static int th_invalid_frame(nghttp2_session *s, const nghttp2_frame *f, int error, void *arg)
{
    struct theirs *th = arg;
    (void)s;
    if (f->hd.type == NGHTTP2_WINDOW_UPDATE && f->hd.stream_id != 0 &&
        f->window_update.window_size_increment == 0 && error == NGHTTP2_ERR_PROTO)
        th->zero_window = true;
    return 0;
}

/* A GOAWAY libnghttp2 queued but did not send (once the client sent its
 * own GOAWAY and no stream is open, it sends nothing more): its code is
 * the verdict all the same. */
static int th_not_sent(nghttp2_session *s, const nghttp2_frame *f, int error, void *arg)
{
    struct theirs *th = arg;
    (void)s;
    (void)error;
    if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != 0 && th->t.error == UINT32_MAX)
        th->t.error = f->goaway.error_code;
    return 0;
}

/* What libnghttp2 has to send, into the trace. */
static void th_flush(struct theirs *th)
{
    for (;;) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(th->s, &p);
        assert(n >= 0);
        if (n == 0)
            return;
        trace_output(&th->t, p, (size_t)n);
    }
}

static bool th_new(struct theirs *th)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return false;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, th_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, th_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, th_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, th_data);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, th_begin_frame);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, th_not_sent);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, th_invalid_frame);
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cbs);
        return false;
    }
    /* As the daemon sets it up (proto/http2/http2.c). */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_settings(opt, H2_MAX_SETTINGS_ENTRIES);
    nghttp2_option_set_max_continuations(opt, H2_MAX_CONTINUATIONS);
    int rv = nghttp2_session_server_new2(&th->s, cbs, th, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0)
        return false;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, conf.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, conf.initial_window_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, conf.max_header_list_size},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    rv = nghttp2_submit_settings(th->s, NGHTTP2_FLAG_NONE, settings, 5);
    assert(rv == 0);
    rv = nghttp2_session_set_local_window_size(th->s, NGHTTP2_FLAG_NONE, 0,
                                               (int32_t)conf.conn_window_size);
    assert(rv == 0);
    th_flush(th);
    return true;
}

/* libnghttp2's fatal errors that it reports without a GOAWAY, as the
 * daemon answers them (a CONTINUATION flood: ENHANCE_YOUR_CALM, which
 * proto/http2/http2.c sends itself before libnghttp2 would fail). */
static uint32_t th_fatal_code(ssize_t rv)
{
    switch (rv) {
    case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS:
    case NGHTTP2_ERR_FLOODED: return H2_ENHANCE_YOUR_CALM;
    case NGHTTP2_ERR_NOMEM:
    case NGHTTP2_ERR_CALLBACK_FAILURE: return H2_INTERNAL_ERROR;
    default: /* NGHTTP2_ERR_BAD_CLIENT_MAGIC and the rest */ return H2_PROTOCOL_ERROR;
    }
}

/* ---------------------------------------------------------------- both */

/* The connection errors of defences the daemon adds in front of
 * libnghttp2 (proto/http2/http2.c), and of one check libnghttp2 lacks:
 * libnghttp2 alone goes on. */
static bool ours_only(const char *why)
{
    static const char *const defences[] = {
        "settings_flood",
        "ping_flood",
        "empty_frame_flood",
        "window_update_flood",
        "rapid_reset",
        "HEADERS on a closed stream",
        /* RFC 9113 4.2, which libnghttp2 1.52 leaves unchecked there */
        "CONTINUATION larger than SETTINGS_MAX_FRAME_SIZE",
        /* 6.1, which libnghttp2 skips for DATA on a closed stream */
        "DATA padding as long as the frame",
        "DATA too short for its padding",
        /* RFC 8441 3 and RFC 9218 2.1, which libnghttp2 1.52 does not check */
        "an extension's boolean setting not 0 or 1",
        /* 5.3.1 and 6.3, which libnghttp2 skips once
         * SETTINGS_NO_RFC7540_PRIORITIES is acknowledged */
        "PRIORITY: stream depends on itself",
        "PRIORITY on stream 0",
        "HEADERS: stream depends on itself",
        /* 6.5.2 for each value: libnghttp2 1.52 does not check every
         * value of a setting a frame repeats */
        "SETTINGS_INITIAL_WINDOW_SIZE too large",
        "SETTINGS_MAX_FRAME_SIZE out of range",
        "SETTINGS_ENABLE_PUSH not 0 or 1",
        /* the daemon's cut at a string announced longer than 64 KiB,
         * before libnghttp2's COMPRESSION_ERROR */
        "a header field announced too long",
    };
    for (size_t i = 0; i < sizeof(defences) / sizeof(defences[0]); i++)
        if (strcmp(why, defences[i]) == 0)
            return true;
    return false;
}

/* Where the frame the input's byte `at` is in ends (past the preface,
 * which is one piece; the input taken as a client's, frame after frame). */
static size_t frame_end(const uint8_t *data, size_t size, size_t at)
{
    size_t pos = size < H2_PREFACE_LEN ? size : H2_PREFACE_LEN;
    if (at < pos)
        return pos;
    while (pos + H2_FRAME_HEADER_LEN <= size) {
        size_t next = pos + H2_FRAME_HEADER_LEN +
                      ((size_t)data[pos] << 16 | (size_t)data[pos + 1] << 8 | data[pos + 2]);
        if (at < next)
            return next < size ? next : size;
        pos = next;
    }
    return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ours o;
    struct trace our_resets = {0}, their_resets = {0};
    struct theirs th = {.t = {.error = UINT32_MAX, .resets = &their_resets}};
    o = (struct ours){.t = {.error = UINT32_MAX, .resets = &our_resets}};
    if (!th_new(&th))
        return 0;
    struct h2_sink sink = {ours_write, &o};
    h2_session_init(&o.s, &conf, &ours_ops, &o, &sink, 0);

    struct h2_pieces pieces;
    h2_pieces_init(&pieces, data, size);
    const size_t *cuts = pieces.cuts;
    uint64_t now = 0;
    for (size_t c = 0; c < H2_PIECES; c++) {
        /* Theirs, a frame at a time (cut where the piece ends too), its
         * output sent after each: a RST_STREAM goes out, and its stream
         * is gone, before the next frame, as ours does. */
        for (size_t at = pieces.from; th.t.error == UINT32_MAX && at < cuts[c];) {
            size_t end = frame_end(data, size, at);
            if (end > cuts[c])
                end = cuts[c];
            ssize_t rv = nghttp2_session_mem_recv(th.s, data + at, end - at);
            if (rv < 0) {
                th.t.error = th_fatal_code(rv);
                th.fatal = rv;
            } else
                th_flush(&th);
            at = end;
        }
        /* Ours: what it did not consume comes again with the rest. */
        h2_pieces_feed(&pieces, c, &o.s, now);
        now += 1;
    }
    if (o.s.why != NULL && ours_only(o.s.why))
        o.t.calm = true;
    drop_peer_resets(&o.t, our_resets.buf != NULL ? our_resets.buf : "");
    drop_peer_resets(&th.t, our_resets.buf != NULL ? our_resets.buf : "");

    const char *mine = o.t.buf != NULL ? o.t.buf : "";
    const char *theirs = th.t.buf != NULL ? th.t.buf : "";
    bool same = o.t.calm ? strncmp(theirs, mine, strlen(mine)) == 0
                         : strcmp(mine, theirs) == 0 && o.t.error == th.t.error;
    /* libnghttp2 judges a header block's stream, and decodes its fields,
     * as its bytes arrive; ours once the block is whole: when ours stopped
     * inside a block (the input ended there, or a frame broke it), an
     * error libnghttp2 found in the block first is only theirs to see. */
    bool in_block = o.s.reader.in_block || (o.t.error == UINT32_MAX && pieces.have >= 9 &&
                                            !o.s.reader.in_data && pieces.pending[3] == H2_HEADERS);
    if (!same && in_block && th.t.error != UINT32_MAX && strcmp(mine, theirs) == 0)
        same = true;
    /* libnghttp2 1.52 counts a CONTINUATION frame again for each read
     * its frame header is split across: cut there, eight of them can
     * pass its limit of eight, and it stops there.  Ours counts frames. */
    if (!same && th.fatal == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS &&
        strncmp(mine, theirs, strlen(theirs)) == 0)
        same = true;
    /* Once the client sent GOAWAY and no stream is open, libnghttp2
     * closes quietly and reads nothing more: the streams the client
     * opens after that (RFC 9113 6.8 lets it), and an error of its, are
     * ours alone to answer. */
    if (!same && o.s.goaway_received && th.t.error == UINT32_MAX &&
        strncmp(mine, theirs, strlen(theirs)) == 0)
        same = true;
    /* A client's PUSH_PROMISE: libnghttp2 names PROTOCOL_ERROR or,
     * before our SETTINGS are acknowledged, its length's error first, and
     * only once its payload is in; ours at its header. */
    if (!same && o.s.why != NULL && strncmp(o.s.why, "PUSH_PROMISE", 12) == 0 &&
        (th.t.error == H2_PROTOCOL_ERROR || th.t.error == H2_FRAME_SIZE_ERROR ||
         th.t.error == UINT32_MAX) &&
        strcmp(mine, theirs) == 0)
        same = true;
    /* A stream reset as malformed whose client half had ended: libnghttp2
     * keeps it until its RST_STREAM is sent, after the read, and takes a
     * frame for it in the same read for one after END_STREAM (the
     * connection's STREAM_CLOSED); ours has forgotten it and drops the
     * frame, as for any stream it reset.  Both are RFC 9113 5.1's. */
    bool malformed = our_resets.buf != NULL && strstr(our_resets.buf, " 1\n") != NULL;
    if (!same && malformed && th.t.error == H2_STREAM_CLOSED && o.t.error != H2_STREAM_CLOSED &&
        strncmp(mine, theirs, strlen(theirs)) == 0)
        same = true;
    /* A stream's WINDOW_UPDATE of 0: ours resets the stream and goes
     * on, libnghttp2 ends the connection there. */
    if (!same && th.zero_window && th.t.error == H2_PROTOCOL_ERROR &&
        strncmp(mine, theirs, strlen(theirs)) == 0)
        same = true;
    /* The streams reset, in order: the same, or where one side stopped
     * early (the cases above, and libnghttp2 judging a block still
     * incomplete), the one's a start of the other's. */
    const char *mr = our_resets.buf != NULL ? our_resets.buf : "";
    const char *tr = their_resets.buf != NULL ? their_resets.buf : "";
    bool strict = !o.t.calm && strcmp(mine, theirs) == 0 && o.t.error == th.t.error &&
                  th.t.error == UINT32_MAX && !in_block;
    if (same && strcmp(mr, tr) != 0 &&
        (strict || (strncmp(mr, tr, strlen(tr)) != 0 && strncmp(tr, mr, strlen(mr)) != 0)))
        same = false;
    if (!same) {
        fprintf(stderr, "ours (error %d, %s):\n%s%s\ntheirs (error %d, %s):\n%s%s\n",
                (int)o.t.error, o.s.why != NULL ? o.s.why : "-", mine, mr, (int)th.t.error,
                th.fatal != 0 ? nghttp2_strerror((int)th.fatal) : "-", theirs, tr);
        abort();
    }
    free(our_resets.buf);
    free(their_resets.buf);
    h2_pieces_free(&pieces);
    free(o.t.buf);
    free(th.t.buf);
    free(th.fields.buf);
    h2_session_free(&o.s);
    free(o.fields.buf);
    nghttp2_session_del(th.s);
    return 0;
}
