/*
 * test_h2_frame.c: corral's own HTTP/2 frame layer without sockets: the
 * reader (each frame type, each error, input fed whole, byte by byte and
 * in random splits as a connection presents its unconsumed input), the
 * writer (exact bytes, DATA referencing the caller's buffers, read back
 * by the reader) and the session (settings, windows, stream states and
 * each flood limit).
 */
#include "../helpers.h"
#include "h2/h2_frames.h"
#include "proto/http2/h2_frame.h"
#include "proto/http2/h2_session.h"
#include "proto/http2/hpack.h"
#include "proto/http2/hpack_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const bool test_forkless = true;

/* ------------------------------------------------------------- reading */

/* The events read, as text; DATA pieces joined into one line per frame,
 * so that any split of the input gives the same text. */
struct rec {
    char log[8192];
    size_t used;
    uint8_t data[70000];
    size_t data_len;
    bool data_open;
};

#define logf_(r, ...) test_appendf((r)->log, sizeof((r)->log), &(r)->used, __VA_ARGS__)

static int rec_event(void *arg, const struct h2_event *ev)
{
    struct rec *r = arg;
    switch (ev->kind) {
    case H2_EV_DATA:
        ck_assert(ev->data.first == !r->data_open);
        r->data_open = true;
        ck_assert(r->data_len + ev->data.len <= sizeof(r->data));
        memcpy(r->data + r->data_len, ev->data.data, ev->data.len);
        r->data_len += ev->data.len;
        if (ev->data.last) {
            logf_(r, "DATA %u f%x len%u '%.*s'\n", ev->hd.stream_id, ev->hd.flags, ev->hd.length,
                  (int)(r->data_len < 40 ? r->data_len : 40), (const char *)r->data);
            r->data_len = 0;
            r->data_open = false;
        }
        break;
    case H2_EV_HEADERS:
        logf_(r, "HEADERS %u f%x '%.*s' pad%u cont%u empty%u\n", ev->hd.stream_id, ev->hd.flags,
              (int)(ev->headers.len < 40 ? ev->headers.len : 40), (const char *)ev->headers.block,
              ev->headers.pad_bytes, ev->headers.continuations, ev->headers.empty_frames);
        ck_assert_uint_eq(ev->hd.length, ev->headers.len);
        break;
    case H2_EV_PRIORITY: logf_(r, "PRIORITY %u\n", ev->hd.stream_id); break;
    case H2_EV_RST_STREAM: logf_(r, "RST_STREAM %u %u\n", ev->hd.stream_id, ev->code); break;
    case H2_EV_SETTINGS:
        logf_(r, "SETTINGS f%x", ev->hd.flags);
        for (size_t i = 0; i < ev->settings.count; i++) {
            uint16_t id;
            uint32_t v;
            h2_frame_setting(ev, i, &id, &v);
            logf_(r, " %u=%u", id, v);
        }
        logf_(r, "\n");
        break;
    case H2_EV_PING: logf_(r, "PING f%x %.8s\n", ev->hd.flags, (const char *)ev->ping); break;
    case H2_EV_GOAWAY:
        logf_(r, "GOAWAY %u %u '%.*s'\n", ev->goaway.last_stream_id, ev->goaway.code,
              (int)ev->goaway.debug_len, (const char *)ev->goaway.debug);
        break;
    case H2_EV_WINDOW_UPDATE:
        logf_(r, "WINDOW_UPDATE %u %u\n", ev->hd.stream_id, ev->increment);
        break;
    case H2_EV_UNKNOWN: logf_(r, "UNKNOWN %u type%u\n", ev->hd.stream_id, ev->hd.type); break;
    case H2_EV_STREAM_ERROR: logf_(r, "STREAM_ERROR %u %u\n", ev->hd.stream_id, ev->code); break;
    }
    return 0;
}

/* Feeds `in` to a fresh reader in pieces of `step` bytes (0: random
 * pieces), as a connection does: what was not consumed is presented again
 * with the next piece.  Returns the log; "ERROR code" ends it on a
 * connection error; "PENDING n" says n bytes were never consumed. */
static const char *read_in(const uint8_t *in, size_t len, size_t step, uint32_t max_block,
                           struct rec *r)
{
    memset(r, 0, sizeof(*r));
    struct h2_frame_reader rd;
    h2_frame_reader_init(&rd, max_block);
    uint8_t *buf = malloc(len + 1);
    ck_assert_ptr_nonnull(buf);
    size_t have = 0, fed = 0;
    while (fed < len) {
        size_t n = step != 0 ? step : (size_t)(random() % 23) + 1;
        if (n > len - fed)
            n = len - fed;
        memcpy(buf + have, in + fed, n);
        have += n;
        fed += n;
        struct h2_frame_error err;
        size_t used = h2_frame_read(&rd, buf, have, rec_event, r, &err);
        ck_assert(used <= have);
        if (err.code != H2_NO_ERROR) {
            logf_(r, "ERROR %u\n", err.code);
            free(buf);
            return r->log;
        }
        memmove(buf, buf + used, have - used);
        have -= used;
    }
    if (have > 0)
        logf_(r, "PENDING %zu\n", have);
    free(buf);
    return r->log;
}

/* The same log however the input is split. */
static void reads_as(const struct h2_frames_buf *b, uint32_t max_block, const char *want)
{
    static struct rec r;
    size_t steps[] = {b->len, 1, 7, 0, 0, 0};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        const char *got = read_in(b->p, b->len, steps[i], max_block, &r);
        if (strcmp(got, want) != 0)
            ck_abort_msg("step %zu: got\n%s\nwant\n%s", steps[i], got, want);
    }
}

START_TEST(preface_and_first_settings)
{
    struct h2_frames_buf b = {0};
    h2_frames_put(&b, H2_PREFACE, H2_PREFACE_LEN);
    h2_frames_setting(&b, 0, 0); /* placeholder replaced below */
    b.len = H2_PREFACE_LEN;
    uint8_t s[12];
    memcpy(s, "\0\x03\0\0\0\x64\0\x04\0\x01\0\0", 12);
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, s, 12);
    reads_as(&b, 1000, "SETTINGS f0 3=100 4=65536\n");

    struct h2_frames_buf bad = {0};
    h2_frames_put(&bad, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r!", H2_PREFACE_LEN);
    reads_as(&bad, 1000, "ERROR 1\n");
    bad.len = 0;
    h2_frames_put(&bad, "GET / HTTP/1.1\r\n", 16);
    reads_as(&bad, 1000, "ERROR 1\n");

    /* The first frame must be SETTINGS, and not an ACK (3.4). */
    struct h2_frames_buf ping = {0};
    h2_frames_put(&ping, H2_PREFACE, H2_PREFACE_LEN);
    h2_frames_frame(&ping, H2_PING, 0, 0, "12345678", 8);
    reads_as(&ping, 1000, "ERROR 1\n");
    ping.len = H2_PREFACE_LEN;
    h2_frames_frame(&ping, H2_SETTINGS, H2_FLAG_ACK, 0, NULL, 0);
    reads_as(&ping, 1000, "ERROR 1\n");
    /* Half a preface is waited for. */
    ping.len = 10;
    reads_as(&ping, 1000, "PENDING 10\n");
    free(b.p);
    free(bad.p);
    free(ping.p);
}
END_TEST

START_TEST(every_frame_type)
{
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, "abc", 3);
    h2_frames_frame(&b, H2_DATA, 0, 1, "hello", 5);
    uint8_t padded[] = {3, 'x', 'y', 0, 0, 0};
    h2_frames_frame(&b, H2_DATA, H2_FLAG_PADDED | H2_FLAG_END_STREAM, 1, padded, sizeof(padded));
    h2_frames_frame(&b, H2_DATA, 0, 3, NULL, 0);
    /* HEADERS with padding and priority: the fragment between them. */
    uint8_t hp[] = {2, 0x80, 0, 0, 1, 16, 'h', 'p', 0, 0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_PADDED | H2_FLAG_PRIORITY, 5, hp,
                    sizeof(hp));
    uint8_t pri[] = {0, 0, 0, 1, 200};
    h2_frames_frame(&b, H2_PRIORITY, 0, 7, pri, sizeof(pri));
    h2_frames_u32_frame(&b, H2_RST_STREAM, 5, H2_CANCEL);
    h2_frames_frame(&b, H2_SETTINGS, H2_FLAG_ACK, 0, NULL, 0);
    h2_frames_frame(&b, H2_PING, 0, 0, "pingpong", 8);
    h2_frames_frame(&b, H2_PING, H2_FLAG_ACK, 0, "pongping", 8);
    uint8_t ga[] = {0x80, 0, 0, 9, 0, 0, 0, 2, 'b', 'y', 'e'};
    h2_frames_frame(&b, H2_GOAWAY, 0, 0, ga, sizeof(ga));
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 0, 1000);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 1, 0x80000001u); /* the reserved bit dropped */
    h2_frames_frame(&b, 0x42, 0xff, 9, "whatever", 8);
    h2_frames_frame(&b, 0xfa, 0, 0, NULL, 0);
    /* A DATA frame of the largest size the reader allows. */
    static uint8_t big[H2_MIN_FRAME_SIZE];
    memset(big, 'z', sizeof(big));
    h2_frames_frame(&b, H2_DATA, H2_FLAG_END_STREAM, 3, big, sizeof(big));
    reads_as(&b, 1000,
             "SETTINGS f0\n"
             "HEADERS 1 f4 'abc' pad0 cont0 empty0\n"
             "DATA 1 f0 len5 'hello'\n"
             "DATA 1 f9 len6 'xy'\n"
             "DATA 3 f0 len0 ''\n"
             "HEADERS 5 f2c 'hp' pad3 cont0 empty0\n"
             "PRIORITY 7\n"
             "RST_STREAM 5 8\n"
             "SETTINGS f1\n"
             "PING f0 pingpong\n"
             "PING f1 pongping\n"
             "GOAWAY 9 2 'bye'\n"
             "WINDOW_UPDATE 0 1000\n"
             "WINDOW_UPDATE 1 1\n"
             "UNKNOWN 9 type66\n"
             "UNKNOWN 0 type250\n"
             "DATA 3 f1 len16384 'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz'\n");
    free(b.p);
}
END_TEST

/* A frame after the preface and SETTINGS that ends the connection. */
struct bad_case {
    const char *what;
    uint8_t type, flags;
    uint32_t sid;
    const char *payload;
    size_t len;
    unsigned code;
};

START_TEST(each_connection_error)
{
    static const struct bad_case cases[] = {
        {"DATA on stream 0", H2_DATA, 0, 0, "x", 1, H2_PROTOCOL_ERROR},
        {"DATA padded, empty", H2_DATA, H2_FLAG_PADDED, 1, "", 0, H2_PROTOCOL_ERROR},
        {"DATA padding = length", H2_DATA, H2_FLAG_PADDED, 1, "\x03xy", 3, H2_PROTOCOL_ERROR},
        {"HEADERS on stream 0", H2_HEADERS, 4, 0, "x", 1, H2_PROTOCOL_ERROR},
        {"HEADERS short for priority", H2_HEADERS, 0x24, 1, "\0\0\0", 3, H2_FRAME_SIZE_ERROR},
        {"HEADERS short for padding", H2_HEADERS, 0x0c, 1, "", 0, H2_PROTOCOL_ERROR},
        {"HEADERS short for padding and priority", H2_HEADERS, 0x2c, 1, "\0\0\0", 3,
         H2_PROTOCOL_ERROR},
        {"HEADERS padding too long", H2_HEADERS, 0x0c, 1, "\x03xy", 3, H2_PROTOCOL_ERROR},
        {"HEADERS depends on itself", H2_HEADERS, 0x24, 3, "\0\0\0\x03\x10", 5, H2_PROTOCOL_ERROR},
        {"PRIORITY on stream 0", H2_PRIORITY, 0, 0, "\0\0\0\x01\x10", 5, H2_PROTOCOL_ERROR},
        {"PRIORITY of 4", H2_PRIORITY, 0, 1, "\0\0\0\x03", 4, H2_FRAME_SIZE_ERROR},
        {"PRIORITY on itself", H2_PRIORITY, 0, 3, "\0\0\0\x03\x10", 5, H2_PROTOCOL_ERROR},
        {"RST_STREAM on 0", H2_RST_STREAM, 0, 0, "\0\0\0\0", 4, H2_PROTOCOL_ERROR},
        {"RST_STREAM of 3", H2_RST_STREAM, 0, 1, "\0\0\0", 3, H2_FRAME_SIZE_ERROR},
        {"SETTINGS on a stream", H2_SETTINGS, 0, 1, "", 0, H2_PROTOCOL_ERROR},
        {"SETTINGS ACK with payload", H2_SETTINGS, 1, 0, "\0\x01\0\0\0\0", 6, H2_FRAME_SIZE_ERROR},
        {"SETTINGS of 5", H2_SETTINGS, 0, 0, "\0\x01\0\0\0", 5, H2_FRAME_SIZE_ERROR},
        {"ENABLE_PUSH 2", H2_SETTINGS, 0, 0, "\0\x02\0\0\0\x02", 6, H2_PROTOCOL_ERROR},
        {"NO_RFC7540_PRIORITIES 2", H2_SETTINGS, 0, 0, "\0\x09\0\0\0\x02", 6, H2_PROTOCOL_ERROR},
        {"ENABLE_CONNECT_PROTOCOL 2", H2_SETTINGS, 0, 0, "\0\x08\0\0\0\x02", 6, H2_PROTOCOL_ERROR},
        {"INITIAL_WINDOW_SIZE 2^31", H2_SETTINGS, 0, 0, "\0\x04\x80\0\0\0", 6,
         H2_FLOW_CONTROL_ERROR},
        {"MAX_FRAME_SIZE 16383", H2_SETTINGS, 0, 0, "\0\x05\0\0\x3f\xff", 6, H2_PROTOCOL_ERROR},
        {"MAX_FRAME_SIZE 2^24", H2_SETTINGS, 0, 0, "\0\x05\x01\0\0\0", 6, H2_PROTOCOL_ERROR},
        {"PUSH_PROMISE", H2_PUSH_PROMISE, 4, 1, "\0\0\0\x02", 4, H2_PROTOCOL_ERROR},
        {"PING on a stream", H2_PING, 0, 1, "12345678", 8, H2_PROTOCOL_ERROR},
        {"PING of 7", H2_PING, 0, 0, "1234567", 7, H2_FRAME_SIZE_ERROR},
        {"GOAWAY on a stream", H2_GOAWAY, 0, 1, "\0\0\0\0\0\0\0\0", 8, H2_PROTOCOL_ERROR},
        {"GOAWAY of 7", H2_GOAWAY, 0, 0, "\0\0\0\0\0\0\0", 7, H2_FRAME_SIZE_ERROR},
        {"WINDOW_UPDATE of 3", H2_WINDOW_UPDATE, 0, 0, "\0\0\x01", 3, H2_FRAME_SIZE_ERROR},
        {"WINDOW_UPDATE 0 on 0", H2_WINDOW_UPDATE, 0, 0, "\0\0\0\0", 4, H2_PROTOCOL_ERROR},
        {"CONTINUATION alone", H2_CONTINUATION, 4, 1, "x", 1, H2_PROTOCOL_ERROR},
    };
    static struct rec r;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct bad_case *c = &cases[i];
        struct h2_frames_buf b = {0};
        h2_frames_start(&b);
        h2_frames_frame(&b, c->type, c->flags, c->sid, c->payload, c->len);
        char want[64];
        snprintf(want, sizeof(want), "SETTINGS f0\nERROR %u\n", c->code);
        for (size_t step = 0; step < 2; step++) {
            const char *got = read_in(b.p, b.len, step == 0 ? b.len : 1, 1000, &r);
            if (strcmp(got, want) != 0)
                ck_abort_msg("%s: got\n%s", c->what, got);
        }
        free(b.p);
    }
}
END_TEST

START_TEST(frame_too_large_refused_at_its_header)
{
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    uint8_t hd[H2_FRAME_HEADER_LEN] = {0, 0x40, 0x01, H2_DATA, 0, 0, 0, 0, 1};
    h2_frames_put(&b, hd, sizeof(hd)); /* 16385 bytes announced, none sent */
    reads_as(&b, 1000, "SETTINGS f0\nERROR 6\n");
    free(b.p);
}
END_TEST

START_TEST(window_update_zero_on_a_stream)
{
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 3, 0);
    h2_frames_frame(&b, H2_PING, 0, 0, "stillok!", 8);
    reads_as(&b, 1000, "SETTINGS f0\nSTREAM_ERROR 3 1\nPING f0 stillok!\n");
    free(b.p);
}
END_TEST

START_TEST(continuation_sequencing)
{
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    uint8_t padded[] = {1, 'a', 'b', 0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_PADDED | H2_FLAG_END_STREAM, 1, padded, sizeof(padded));
    h2_frames_frame(&b, H2_CONTINUATION, 0, 1, NULL, 0);
    h2_frames_frame(&b, H2_CONTINUATION, 0, 1, "cd", 2);
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 1, "ef", 2);
    h2_frames_frame(&b, H2_PING, 0, 0, "afterall", 8);
    reads_as(&b, 1000, "SETTINGS f0\nHEADERS 1 fd 'abcdef' pad2 cont3 empty1\nPING f0 afterall\n");

    /* Any other frame, or a CONTINUATION for another stream, inside. */
    struct h2_frames_buf c = {0};
    h2_frames_start(&c);
    h2_frames_frame(&c, H2_HEADERS, 0, 1, "ab", 2);
    size_t mark = c.len;
    h2_frames_frame(&c, H2_PING, 0, 0, "12345678", 8);
    reads_as(&c, 1000, "SETTINGS f0\nERROR 1\n");
    c.len = mark;
    h2_frames_frame(&c, H2_DATA, 0, 1, "x", 1);
    reads_as(&c, 1000, "SETTINGS f0\nERROR 1\n");
    c.len = mark;
    h2_frames_frame(&c, H2_CONTINUATION, H2_FLAG_END_HEADERS, 3, "x", 1);
    reads_as(&c, 1000, "SETTINGS f0\nERROR 1\n");
    c.len = mark;
    h2_frames_frame(&c, 0x42, 0, 0, NULL, 0); /* even an unknown one (6.10) */
    reads_as(&c, 1000, "SETTINGS f0\nERROR 1\n");
    /* An unfinished block stays in the input, unconsumed. */
    c.len = mark;
    h2_frames_frame(&c, H2_CONTINUATION, 0, 1, "cd", 2);
    reads_as(&c, 1000, "SETTINGS f0\nPENDING 22\n");
    free(b.p);
    free(c.p);
}
END_TEST

START_TEST(continuation_flood_and_block_limit)
{
    /* Eight CONTINUATION frames pass; the ninth ends the connection. */
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    h2_frames_frame(&b, H2_HEADERS, 0, 1, "a", 1);
    for (int i = 0; i < 7; i++)
        h2_frames_frame(&b, H2_CONTINUATION, 0, 1, "b", 1);
    size_t mark = b.len;
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 1, "c", 1);
    reads_as(&b, 1000, "SETTINGS f0\nHEADERS 1 f4 'abbbbbbbc' pad0 cont8 empty0\n");
    b.len = mark;
    h2_frames_frame(&b, H2_CONTINUATION, 0, 1, "c", 1);
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 1, "d", 1);
    reads_as(&b, 1000, "SETTINGS f0\nERROR 11\n");

    /* A block is cut once its fragments and padding pass the limit: at
     * the header of the frame that would pass it, before its payload. */
    struct h2_frames_buf c = {0};
    h2_frames_start(&c);
    static uint8_t block[200];
    memset(block, 'h', sizeof(block));
    h2_frames_frame(&c, H2_HEADERS, H2_FLAG_END_HEADERS, 1, block, 100);
    reads_as(&c, 100,
             "SETTINGS f0\nHEADERS 1 f4 'hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh' pad0 "
             "cont0 empty0\n");
    c.len = 0;
    h2_frames_start(&c);
    uint8_t hd[H2_FRAME_HEADER_LEN] = {0, 0, 101, H2_HEADERS, H2_FLAG_END_HEADERS, 0, 0, 0, 1};
    h2_frames_put(&c, hd, sizeof(hd));
    reads_as(&c, 100, "SETTINGS f0\nERROR 11\n");
    c.len = 0;
    h2_frames_start(&c);
    h2_frames_frame(&c, H2_HEADERS, 0, 1, block, 60);
    uint8_t hc[H2_FRAME_HEADER_LEN] = {0, 0, 41, H2_CONTINUATION, H2_FLAG_END_HEADERS, 0, 0, 0, 1};
    h2_frames_put(&c, hc, sizeof(hc));
    reads_as(&c, 100, "SETTINGS f0\nERROR 11\n");
    /* Padding counts: 60 + 40 bytes of padding pass 99. */
    c.len = 0;
    h2_frames_start(&c);
    uint8_t pad[101] = {40};
    h2_frames_frame(&c, H2_HEADERS, H2_FLAG_PADDED | H2_FLAG_END_HEADERS, 1, pad, 101);
    reads_as(&c, 99, "SETTINGS f0\nERROR 11\n");
    free(b.p);
    free(c.p);
}
END_TEST

/* A string whose announced length passes the block's limit (or 64 KiB)
 * cuts the block at the bytes that say so: the rest of its frame is not
 * waited for, whether the frame ends the block or not. */
START_TEST(field_announced_too_long_cut_at_its_length)
{
    /* :method GET, then a literal with a new name "a" and a value of 200
     * bytes (127 + 73) in a frame that says 90: nothing more is sent. */
    static const uint8_t head[] = {0x82, 0x00, 0x01, 'a', 0x7f, 0x49};
    static const uint8_t flags[] = {0, H2_FLAG_END_HEADERS, H2_FLAG_PADDED | H2_FLAG_PRIORITY};
    for (size_t i = 0; i < sizeof(flags); i++) {
        struct h2_frames_buf b = {0};
        h2_frames_start(&b);
        uint8_t hd[H2_FRAME_HEADER_LEN] = {0, 0, 90, H2_HEADERS, flags[i], 0, 0, 0, 1};
        h2_frames_put(&b, hd, sizeof(hd));
        if ((flags[i] & H2_FLAG_PADDED) != 0)
            h2_frames_put(&b, "\x04\0\0\0\0\x10", 6); /* pad length, priority */
        h2_frames_put(&b, head, sizeof(head));
        reads_as(&b, 100, "SETTINGS f0\nERROR 11\n");
        b.len -= 1; /* the length's last byte not in: not yet */
        reads_as(&b, 100,
                 (flags[i] & H2_FLAG_PADDED) != 0 ? "SETTINGS f0\nPENDING 20\n"
                                                  : "SETTINGS f0\nPENDING 14\n");
        free(b.p);
    }
    /* Within the limit: waited for.  In a CONTINUATION, the walk goes on
     * from the HEADERS frame, a string cut across the frames. */
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    h2_frames_frame(&b, H2_HEADERS, 0, 1,
                    "\x82\x00\x01"
                    "a\x08"
                    "bbbb",
                    9);
    uint8_t hd[H2_FRAME_HEADER_LEN] = {0, 0, 100, H2_CONTINUATION, H2_FLAG_END_HEADERS, 0, 0, 0, 1};
    h2_frames_put(&b, hd, sizeof(hd));
    h2_frames_put(&b,
                  "bbbb\x00\x01"
                  "c\x7f\x49",
                  9);
    reads_as(&b, 300, "SETTINGS f0\nPENDING 36\n");
    reads_as(&b, 150, "SETTINGS f0\nERROR 11\n");
    /* 64 KiB at most, whatever the limit. */
    b.len = 0;
    h2_frames_start(&b);
    h2_frames_frame(&b, H2_HEADERS, 0, 1,
                    "\x82\x00\x01"
                    "a\x7f\x81\xff\x03",
                    8); /* 65536 */
    reads_as(&b, 1u << 20, "SETTINGS f0\nPENDING 17\n");
    b.len -= 1;
    h2_frames_put(&b, "\x04", 1); /* 65536 + 16384 */
    reads_as(&b, 1u << 20, "SETTINGS f0\nERROR 11\n");
    free(b.p);
    /* The session: the request opens, to be answered 431, before the
     * GOAWAY. */
    struct h2_frame_reader rd;
    h2_frame_reader_init(&rd, 100);
    struct h2_frames_buf c = {0};
    h2_frames_start(&c);
    h2_frames_put(&c, (uint8_t[]){0, 0, 90, H2_HEADERS, H2_FLAG_END_STREAM, 0, 0, 0, 3}, 9);
    h2_frames_put(&c, head, sizeof(head));
    struct h2_frame_error err;
    static struct rec r;
    memset(&r, 0, sizeof(r));
    ck_assert_uint_eq(h2_frame_read(&rd, c.p, c.len, rec_event, &r, &err), H2_PREFACE_LEN + 9);
    ck_assert_int_eq(err.code, H2_ENHANCE_YOUR_CALM);
    ck_assert(err.block_cut);
    ck_assert_uint_eq(err.stream_id, 3);
    ck_assert_str_eq(err.why, "a header field announced too long");
    free(c.p);
}
END_TEST

START_TEST(data_consumed_in_pieces)
{
    struct h2_frame_reader rd;
    h2_frame_reader_init(&rd, 100);
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    size_t head = b.len;
    uint8_t payload[1000];
    memset(payload, 'd', sizeof(payload));
    payload[0] = 10; /* padded: 989 bytes of data, 10 of padding */
    h2_frames_frame(&b, H2_DATA, H2_FLAG_PADDED, 1, payload, sizeof(payload));
    static struct rec r;
    memset(&r, 0, sizeof(r));
    struct h2_frame_error err;
    /* The frame's header and pad length byte, and 100 of its data. */
    size_t used = h2_frame_read(&rd, b.p, head + 9 + 1 + 100, rec_event, &r, &err);
    ck_assert_uint_eq(err.code, 0);
    ck_assert_uint_eq(used, head + 9 + 1 + 100);
    ck_assert_uint_eq(r.data_len, 100);
    /* The rest of its data and half its padding: all consumed. */
    used = h2_frame_read(&rd, b.p + head + 110, 889 + 5, rec_event, &r, &err);
    ck_assert_uint_eq(used, 889 + 5);
    ck_assert(r.data_open);
    used = h2_frame_read(&rd, b.p + head + 110 + 894, 5, rec_event, &r, &err);
    ck_assert_uint_eq(used, 5);
    ck_assert(!r.data_open);
    ck_assert_str_eq(r.log, "SETTINGS f0\nDATA 1 f8 len1000 "
                            "'dddddddddddddddddddddddddddddddddddddddd'\n");
    free(b.p);
}
END_TEST

/* ------------------------------------------------------------- writing */

/* A sink that keeps what it is given, and where it came from. */

/* A connection's input: what the reader did not consume is presented
 * again with the next bytes. */
struct conn_in {
    uint8_t buf[512];
    size_t have;
};

static size_t conn_in_add(struct conn_in *c, const struct h2_frames_buf *b, size_t from, size_t n)
{
    ck_assert_uint_le(c->have + n, sizeof(c->buf));
    memcpy(c->buf + c->have, b->p + from, n);
    c->have += n;
    return from + n;
}

static void conn_in_used(struct conn_in *c, size_t used)
{
    ck_assert_uint_le(used, c->have);
    memmove(c->buf, c->buf + used, c->have - used);
    c->have -= used;
}

/* After each read: what waits at the front of the input, and the frames
 * consumed whole so far. */
START_TEST(reader_says_what_waits)
{
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);                                              /* preface, 24; SETTINGS, 9 */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_STREAM, 1, "abc", 3); /* 12 */
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 1, "d", 1); /* 10 */
    h2_frames_frame(&b, H2_PING, 0, 0, "12345678", 8);                    /* 17 */
    h2_frames_frame(&b, H2_DATA, 0, 1, "hello", 5);                       /* 14 */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, "x", 1);      /* 10 */
    static const struct {
        size_t upto;
        uint8_t wait;
        uint32_t frames;
    } steps[] = {
        {0, H2_WAIT_NONE, 0},     {10, H2_WAIT_PAYLOAD, 0}, /* the preface, begun */
        {28, H2_WAIT_HEADER, 1},                            /* 4 bytes of SETTINGS' header */
        {33, H2_WAIT_NONE, 2},                              /* SETTINGS whole */
        {40, H2_WAIT_HEADER, 2},                            /* HEADERS' header, begun */
        {42, H2_WAIT_BLOCK, 2},                             /* ...whole: a block has begun */
        {45, H2_WAIT_BLOCK, 2},                             /* HEADERS whole, without END_HEADERS */
        {50, H2_WAIT_BLOCK, 2},                             /* CONTINUATION's header, begun */
        {55, H2_WAIT_NONE, 3},                              /* the block ended */
        {64, H2_WAIT_PAYLOAD, 3},                           /* PING's header */
        {72, H2_WAIT_NONE, 4},                              /* PING */
        {83, H2_WAIT_PAYLOAD, 4},                           /* DATA's header and 2 bytes */
        {88, H2_WAIT_HEADER, 5}, /* DATA whole, 2 bytes of HEADERS' header */
        {95, H2_WAIT_BLOCK, 5},  /* HEADERS' header, its fragment to come */
        {96, H2_WAIT_NONE, 6},
    };
    ck_assert_uint_eq(b.len, 96);
    struct h2_frame_reader rd;
    h2_frame_reader_init(&rd, 100);
    static struct rec r;
    memset(&r, 0, sizeof(r));
    struct conn_in c = {.have = 0};
    size_t fed = 0;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        fed = conn_in_add(&c, &b, fed, steps[i].upto - fed);
        struct h2_frame_error err;
        conn_in_used(&c, h2_frame_read(&rd, c.buf, c.have, rec_event, &r, &err));
        ck_assert_int_eq(err.code, H2_NO_ERROR);
        if (rd.wait != steps[i].wait || rd.frames != steps[i].frames)
            ck_abort_msg("at %zu: wait %u frames %u", steps[i].upto, rd.wait, rd.frames);
    }
    ck_assert_uint_eq(c.have, 0);
    free(b.p);
}
END_TEST

struct out {
    struct h2_frames_buf b;
    int calls;
    const uint8_t *lo, *hi; /* a caller's buffer: how many iovecs pointed into it */
    int refs;
};

static void out_write(void *arg, const struct iovec *iov, int count)
{
    struct out *o = arg;
    o->calls++;
    for (int i = 0; i < count; i++) {
        const uint8_t *p = iov[i].iov_base;
        if (o->lo != NULL && p >= o->lo && p < o->hi)
            o->refs++;
        h2_frames_put(&o->b, iov[i].iov_base, iov[i].iov_len);
    }
}

static void out_hex_is(const struct out *o, const char *hex)
{
    char got[512] = "";
    size_t n = 0;
    for (size_t i = 0; i < o->b.len && n + 3 < sizeof(got); i++)
        n += (size_t)snprintf(got + n, sizeof(got) - n, "%02x", o->b.p[i]);
    ck_assert_str_eq(got, hex);
}

START_TEST(control_frames_written)
{
    struct out o = {0};
    struct h2_sink s = {out_write, &o};
    uint16_t ids[] = {3, 4};
    uint32_t values[] = {100, 0x7fffffff};
    h2_frame_write_settings(&s, ids, values, 2);
    out_hex_is(&o, "00000c040000000000000300000064000"
                   "47fffffff");
    o.b.len = 0;
    h2_frame_write_settings_ack(&s);
    out_hex_is(&o, "000000040100000000");
    o.b.len = 0;
    h2_frame_write_ping(&s, (const uint8_t *)"abcdefgh", true);
    out_hex_is(&o, "0000080601000000006162636465666768");
    o.b.len = 0;
    h2_frame_write_goaway(&s, 7, H2_ENHANCE_YOUR_CALM, "no", 2);
    out_hex_is(&o, "00000a070000000000000000070000000b6e6f");
    o.b.len = 0;
    h2_frame_write_rst_stream(&s, 5, H2_REFUSED_STREAM);
    out_hex_is(&o, "00000403000000000500000007");
    o.b.len = 0;
    h2_frame_write_window_update(&s, 0, 0x7fffffff);
    out_hex_is(&o, "000004080000000000"
                   "7fffffff");
    free(o.b.p);
}
END_TEST

START_TEST(data_references_the_callers_buffers)
{
    static uint8_t body[40000];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)('a' + i % 26);
    struct out o = {.lo = body, .hi = body + sizeof(body)};
    struct h2_sink s = {out_write, &o};
    /* Three buffers, cut into frames of 16384 across their edges. */
    struct iovec iov[3] = {{body, 10000}, {body + 10000, 20000}, {body + 30000, 10000}};
    size_t frames = h2_frame_write_data(&s, 3, iov, 3, true, H2_MIN_FRAME_SIZE);
    ck_assert_uint_eq(frames, 3);
    ck_assert_int_eq(o.calls, 1);
    /* Frame one: 10000 + 6384; two: 13616 + 2768; three: 7232. */
    ck_assert_int_eq(o.refs, 5);
    ck_assert_uint_eq(o.b.len, sizeof(body) + 3 * H2_FRAME_HEADER_LEN);
    /* Read back: the same bytes, END_STREAM on the last frame only. */
    struct h2_frames_buf in = {0};
    h2_frames_start(&in);
    h2_frames_put(&in, o.b.p, o.b.len);
    static struct rec r;
    read_in(in.p, in.len, 4096, 100, &r);
    ck_assert_str_eq(r.log, "SETTINGS f0\n"
                            "DATA 3 f0 len16384 'abcdefghijklmnopqrstuvwxyzabcdefghijklmn'\n"
                            "DATA 3 f0 len16384 'efghijklmnopqrstuvwxyzabcdefghijklmnopqr'\n"
                            "DATA 3 f1 len7232 'ijklmnopqrstuvwxyzabcdefghijklmnopqrstuv'\n");
    ck_assert_mem_eq(o.b.p + 9, body, 16384);
    ck_assert_mem_eq(o.b.p + 9 + 16384 + 9, body + 16384, 16384);

    /* Many small buffers: one call to the sink never passes its list. */
    free(o.b.p);
    o = (struct out){.lo = body, .hi = body + sizeof(body)};
    struct iovec many[200];
    for (int i = 0; i < 200; i++)
        many[i] = (struct iovec){body + 100 * i, i % 3 == 0 ? 0 : 100};
    frames = h2_frame_write_data(&s, 5, many, 200, false, H2_MIN_FRAME_SIZE);
    ck_assert_uint_eq(o.b.len, frames * H2_FRAME_HEADER_LEN + 133 * 100);
    ck_assert_int_eq(o.refs, 133);
    ck_assert_uint_ge(frames, 3); /* at most 62 buffers a frame */

    /* No bytes: an empty END_STREAM frame, or nothing. */
    free(o.b.p);
    o = (struct out){0};
    ck_assert_uint_eq(h2_frame_write_data(&s, 1, NULL, 0, true, H2_MIN_FRAME_SIZE), 1);
    out_hex_is(&o, "000000000100000001");
    o.b.len = 0;
    ck_assert_uint_eq(h2_frame_write_data(&s, 1, NULL, 0, false, H2_MIN_FRAME_SIZE), 0);
    ck_assert_uint_eq(o.b.len, 0);
    free(o.b.p);
    free(in.p);
}
END_TEST

START_TEST(headers_split_into_continuations)
{
    static uint8_t block[40000];
    memset(block, 'k', sizeof(block));
    struct out o = {0};
    struct h2_sink s = {out_write, &o};
    h2_frame_write_headers(&s, 1, block, sizeof(block), true, H2_MIN_FRAME_SIZE);
    struct h2_frames_buf in = {0};
    h2_frames_start(&in);
    h2_frames_put(&in, o.b.p, o.b.len);
    static struct rec r;
    read_in(in.p, in.len, 0, 65536, &r);
    ck_assert_str_eq(r.log, "SETTINGS f0\nHEADERS 1 f5 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk' "
                            "pad0 cont2 empty0\n");
    o.b.len = 0;
    h2_frame_write_headers(&s, 3, (const uint8_t *)"\x88", 1, false, H2_MIN_FRAME_SIZE);
    out_hex_is(&o, "0000010104000000"
                   "0388");
    free(o.b.p);
    free(in.p);
}
END_TEST

/* ------------------------------------------------------------- session */

struct sess {
    struct h2_session s;
    struct out o;
    char log[65536];
    size_t used;
    char fields[1024]; /* of the block being passed: a summary */
    size_t fields_used;
    uint64_t field_bytes; /* name + value + 32 of every field passed */
};

#define slog(t, ...) test_appendf((t)->log, sizeof((t)->log), &(t)->used, __VA_ARGS__)

/* A request block as REQ: ":method GET ...", summed up by its method;
 * regular fields as "name=value". */
#define REQ                                                                                        \
    "\x82\x86\x84\x01\x01"                                                                         \
    "a"
#define TRL     "\x00\x01x\x01y"
#define REQ_LEN (sizeof(REQ) - 1)

static void s_field(void *arg, uint32_t id, enum h2_block_kind kind, const struct hpack_field *f)
{
    struct sess *t = arg;
    (void)id;
    ck_assert_int_ne(kind, H2_BLOCK_DISCARD);
    t->field_bytes += f->name_len + f->value_len + 32;
    bool method = f->name_len == 7 && memcmp(f->name, ":method", 7) == 0;
    if (f->name_len > 0 && f->name[0] == ':' && !method)
        return;
    int n = method
                ? snprintf(t->fields + t->fields_used, sizeof(t->fields) - t->fields_used, "%s%.*s",
                           t->fields_used > 0 ? " " : "", (int)f->value_len, (const char *)f->value)
                : snprintf(t->fields + t->fields_used, sizeof(t->fields) - t->fields_used,
                           "%s%.*s=%.*s", t->fields_used > 0 ? " " : "", (int)f->name_len,
                           (const char *)f->name, (int)f->value_len, (const char *)f->value);
    ck_assert(n >= 0 && (size_t)n < sizeof(t->fields) - t->fields_used);
    t->fields_used += (size_t)n;
}

static void s_headers(void *arg, uint32_t id, enum h2_block_kind kind, enum h2_head head, bool end)
{
    struct sess *t = arg;
    static const char *const kinds[] = {"request", "trailers", "discard"};
    static const char *const heads[] = {"", " too large", " cut"};
    slog(t, "headers %u %s %s%s%s\n", id, kinds[kind], t->fields, heads[head], end ? " end" : "");
    t->fields_used = 0;
    t->fields[0] = '\0';
}

static void s_data(void *arg, uint32_t id, const uint8_t *data, size_t len, bool end)
{
    struct sess *t = arg;
    slog(t, "data %u %zu%s\n", id, len, end ? " end" : "");
    (void)data;
}

static void s_reset(void *arg, uint32_t id, uint32_t code, bool by_peer)
{
    struct sess *t = arg;
    t->fields_used = 0; /* what a malformed block passed is dropped */
    t->fields[0] = '\0';
    slog((struct sess *)arg, "reset %u %u%s\n", id, code, by_peer ? " by peer" : "");
}

static void s_window(void *arg, uint32_t id)
{
    slog((struct sess *)arg, "window %u\n", id);
}

static void s_goaway(void *arg, uint32_t last, uint32_t code)
{
    slog((struct sess *)arg, "goaway %u %u\n", last, code);
}

static const struct h2_session_ops s_ops = {
    .field = s_field,
    .headers = s_headers,
    .data = s_data,
    .reset = s_reset,
    .window = s_window,
    .goaway = s_goaway,
};

static uint8_t s_scratch[600];

static const struct h2_session_conf s_conf = {
    .max_concurrent_streams = 2,
    .initial_window_size = 1000,
    .conn_window_size = 100000,
    .max_header_list_size = 1000,
    .max_resets = 3,
    .reset_interval_ms = 1000,
    .scratch = s_scratch,
    .scratch_size = sizeof(s_scratch),
};

/* The frames the session wrote since the last call, as text. */
static const char *written(struct sess *t)
{
    static char text[4096];
    size_t n = 0;
    text[0] = '\0';
    const uint8_t *p = t->o.b.p;
    size_t left = t->o.b.len;
    while (left >= H2_FRAME_HEADER_LEN) {
        uint32_t len = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        uint32_t sid = (uint32_t)p[5] << 24 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 8 | p[8];
        ck_assert_uint_ge(left, H2_FRAME_HEADER_LEN + len);
        const uint8_t *q = p + H2_FRAME_HEADER_LEN;
        uint32_t v =
            len >= 4 ? (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3] : 0;
        switch (p[3]) {
        case H2_SETTINGS:
            n += (size_t)snprintf(text + n, sizeof(text) - n, "SETTINGS%s/%u ",
                                  p[4] != 0 ? "+ACK" : "", len / 6);
            break;
        case H2_WINDOW_UPDATE:
            n += (size_t)snprintf(text + n, sizeof(text) - n, "WU %u %u ", sid, v);
            break;
        case H2_RST_STREAM:
            n += (size_t)snprintf(text + n, sizeof(text) - n, "RST %u %u ", sid, v);
            break;
        case H2_GOAWAY: {
            uint32_t code =
                (uint32_t)q[4] << 24 | (uint32_t)q[5] << 16 | (uint32_t)q[6] << 8 | q[7];
            n += (size_t)snprintf(text + n, sizeof(text) - n, "GOAWAY %u %u ", v, code);
            break;
        }
        case H2_PING:
            n += (size_t)snprintf(text + n, sizeof(text) - n, "PING%s ", p[4] != 0 ? "+ACK" : "");
            break;
        default:
            n += (size_t)snprintf(text + n, sizeof(text) - n, "T%u %u f%x len%u ", p[3], sid, p[4],
                                  len);
            break;
        }
        p += H2_FRAME_HEADER_LEN + len;
        left -= H2_FRAME_HEADER_LEN + len;
    }
    ck_assert_uint_eq(left, 0);
    if (n > 0)
        text[n - 1] = '\0';
    t->o.b.len = 0;
    return text;
}

static void s_start(struct sess *t)
{
    memset(t, 0, sizeof(*t));
    struct h2_sink sink = {out_write, &t->o};
    h2_session_init(&t->s, &s_conf, &s_ops, t, &sink, 0);
    ck_assert_str_eq(written(t), "SETTINGS/5 WU 0 34465");
    struct h2_frames_buf b = {0};
    h2_frames_start(&b);
    h2_frames_frame(&b, H2_SETTINGS, H2_FLAG_ACK, 0, NULL, 0);
    ck_assert_uint_eq(h2_session_recv(&t->s, b.p, b.len, 0), b.len);
    ck_assert_str_eq(written(t), "SETTINGS+ACK/0");
    free(b.p);
}

/* Feeds frames at `now`, all of them consumed unless the connection ended. */
static void s_feed(struct sess *t, struct h2_frames_buf *b, uint64_t now)
{
    size_t n = h2_session_recv(&t->s, b->p, b->len, now);
    if (t->s.error == H2_NO_ERROR)
        ck_assert_uint_eq(n, b->len);
    b->len = 0;
}

static void s_end(struct sess *t)
{
    h2_session_free(&t->s);
    ck_assert_ptr_null(t->s.streams);
    free(t->o.b.p);
}

START_TEST(session_request_and_response)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_DATA, 0, 1, "body", 4);
    uint8_t padded[] = {4, 'x', 0, 0, 0, 0};
    h2_frames_frame(&b, H2_DATA, H2_FLAG_PADDED, 1, padded, sizeof(padded));
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, TRL,
                    sizeof(TRL) - 1);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 1 request GET\ndata 1 4\ndata 1 1\nheaders 1 trailers x=y "
                            "end\n");
    ck_assert_ptr_nonnull(h2_session_stream(&t.s, 1));
    ck_assert_int_eq(h2_session_stream(&t.s, 1)->state, H2_STREAM_HALF_CLOSED_REMOTE);
    /* The windows: 10 bytes counted, 5 of them padding given back. */
    ck_assert_int_eq(t.s.recv_window, 100000 - 10);
    ck_assert_uint_eq(t.s.recv_unacked, 5);
    /* The response: as far as the windows let it. */
    ck_assert_uint_eq(h2_session_send_window(&t.s, 1), 65535);
    ck_assert_int_eq(h2_session_send_headers(&t.s, 1, (const uint8_t *)"\x88", 1, false), 0);
    static uint8_t body[70000];
    struct iovec iov = {body, 65536};
    ck_assert_int_eq(h2_session_send_data(&t.s, 1, &iov, 1, false), -1);
    iov.iov_len = 65535;
    ck_assert_int_eq(h2_session_send_data(&t.s, 1, &iov, 1, false), 0);
    ck_assert_str_eq(written(&t), "T1 1 f4 len1 T0 1 f0 len16384 T0 1 f0 len16384 T0 1 f0 "
                                  "len16384 T0 1 f0 len16383");
    ck_assert_uint_eq(h2_session_send_window(&t.s, 1), 0);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 1, 100);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 0, 50);
    s_feed(&t, &b, 2);
    ck_assert_uint_eq(h2_session_send_window(&t.s, 1), 50);
    iov.iov_len = 50;
    ck_assert_int_eq(h2_session_send_data(&t.s, 1, &iov, 1, true), 0);
    ck_assert_str_eq(written(&t), "T0 1 f1 len50");
    /* Both halves ended: the stream is gone, and its memory. */
    ck_assert_ptr_null(h2_session_stream(&t.s, 1));
    ck_assert_ptr_null(t.s.streams);
    ck_assert_int_eq(h2_session_send_data(&t.s, 1, &iov, 1, true), -1);
    free(b.p);
    s_end(&t);
}
END_TEST

START_TEST(session_settings_and_ping)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    uint8_t set[12];
    memcpy(set, "\0\x04\0\0\0\x0a\0\x05\0\0\x40\x01", 12); /* window 10, frame 16385 */
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, set, 12);
    h2_frames_frame(&b, H2_PING, 0, 0, "12345678", 8);
    h2_frames_frame(&b, H2_PING, H2_FLAG_ACK, 0, "12345678", 8);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "SETTINGS+ACK/0 PING+ACK");
    ck_assert_uint_eq(h2_session_send_window(&t.s, 1), 10);
    ck_assert_uint_eq(t.s.peer_max_frame_size, 16385);
    /* A second ACK acknowledges nothing. */
    h2_frames_frame(&b, H2_SETTINGS, H2_FLAG_ACK, 0, NULL, 0);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 1 1");
    ck_assert_int_eq(t.s.error, H2_PROTOCOL_ERROR);
    /* Nothing is read after a connection error. */
    h2_frames_frame(&b, H2_PING, 0, 0, "12345678", 8);
    ck_assert_uint_eq(h2_session_recv(&t.s, b.p, b.len, 1), 0);
    b.len = 0;
    s_end(&t);
    /* SETTINGS_NO_RFC7540_PRIORITIES is fixed by the first SETTINGS
     * (RFC 9218 2.1), 0 when it does not say: the same again passes, a
     * change not. */
    s_start(&t); /* its SETTINGS said nothing */
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, "\0\x09\0\0\0\x01", 6);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 0 1");
    s_end(&t);
    s_start(&t);
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, "\0\x09\0\0\0\0", 6);
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, "\0\x09\0\0\0\0", 6);
    /* Within a frame, the last value is the one sent. */
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, "\0\x09\0\0\0\x01\0\x09\0\0\0\0", 12);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "SETTINGS+ACK/0 SETTINGS+ACK/0 SETTINGS+ACK/0");
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, "\0\x09\0\0\0\x01", 6);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 0 1");
    free(b.p);
    s_end(&t);
}
END_TEST

START_TEST(session_initial_window_change)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 1, 0x7fffffff - 65535);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(h2_session_stream(&t.s, 1)->send_window, 0x7fffffff);
    /* Lowering is allowed (the window goes negative if need be)... */
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, "\0\x04\0\0\0\0", 6);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(h2_session_stream(&t.s, 1)->send_window, 0x7fffffff - 65535);
    /* ...raising past 2^31-1 is not. */
    h2_frames_frame(&b, H2_SETTINGS, 0, 0, "\0\x04\0\x01\0\0", 6);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "SETTINGS+ACK/0 GOAWAY 1 3");
    free(b.p);
    s_end(&t);
}
END_TEST

START_TEST(session_flow_control_errors)
{
    static struct sess t;
    s_start(&t);
    static uint8_t big[H2_MIN_FRAME_SIZE];
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_DATA, 0, 1, big, 1000); /* the stream's whole window */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_DATA, 0, 3, big, 1001); /* past it */
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log,
                     "headers 1 request GET\ndata 1 1000\nheaders 3 request GET\nreset 3 3\n");
    ck_assert_str_eq(written(&t), "RST 3 3");
    /* Consumed: the window comes back once half of it is owed. */
    h2_session_consume(&t.s, 1, 400);
    ck_assert_str_eq(written(&t), "");
    h2_session_consume(&t.s, 1, 100);
    ck_assert_str_eq(written(&t), "WU 1 500");
    h2_frames_frame(&b, H2_DATA, 0, 1, big, 500);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    /* The connection's window: 100000, of which 2501 are used so far. */
    h2_frames_frame(&b, H2_DATA, 0, 1, big, 501); /* past the stream's */
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "RST 1 3");
    /* A window past 2^31-1. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 5, REQ, REQ_LEN);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 5, 0x7fffffff);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "RST 5 3");
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 0, 0x7fffffff);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 5 3");
    s_end(&t);

    /* DATA past the connection's window ends the connection. */
    s_start(&t);
    for (uint32_t id = 1; id < 14; id += 2) {
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, id, REQ, REQ_LEN);
        for (int i = 0; i < 2; i++)
            h2_frames_frame(&b, H2_DATA, 0, id, big, 500);
        h2_frames_frame(&b, H2_RST_STREAM, 0, id, "\0\0\0\x08", 4);
        s_feed(&t, &b, (uint64_t)id * 1000); /* apart: no rapid reset */
    }
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert_int_eq(t.s.recv_window, 100000 - 7000);
    /* The stream is closed: its DATA is dropped but counted. */
    for (int i = 0; i < 6; i++)
        h2_frames_frame(&b, H2_DATA, 0, 13, big, H2_MIN_FRAME_SIZE);
    s_feed(&t, &b, 20000);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert_str_eq(written(&t), "WU 0 65536"); /* once 50000 were owed */
    t.s.recv_unacked = 0;                        /* no more given back */
    t.s.recv_window = 100;
    h2_frames_frame(&b, H2_DATA, 0, 13, big, 101);
    s_feed(&t, &b, 20000);
    ck_assert_str_eq(written(&t), "GOAWAY 13 3");
    free(b.p);
    s_end(&t);
}
END_TEST

START_TEST(session_stream_states)
{
    static struct sess t;
    struct h2_frames_buf b = {0};
    /* Each frame on an idle stream ends the connection. */
    static const uint8_t kinds[] = {H2_DATA, H2_RST_STREAM, H2_WINDOW_UPDATE};
    for (size_t i = 0; i < sizeof(kinds); i++) {
        s_start(&t);
        h2_frames_frame(&b, kinds[i], 0, 1, "\0\0\0\x01", 4);
        s_feed(&t, &b, 1);
        ck_assert_str_eq(written(&t), "GOAWAY 0 1");
        s_end(&t);
    }
    /* HEADERS on an even stream, or on a stream closed and not reset. */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 2, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 0 1");
    s_end(&t);
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 5, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 5 1");
    s_end(&t);
    /* DATA or HEADERS after the stream's end: the connection's error (as
     * libnghttp2 makes it). */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_DATA, 0, 1, "x", 1);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 1 5");
    s_end(&t);
    /* Trailers of a stream reset here, sent before the client saw the
     * reset: skipped (but decoded, for HPACK's table). */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    h2_session_reset(&t.s, 1, H2_CANCEL);
    ck_assert_str_eq(written(&t), "RST 1 8");
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, TRL,
                    sizeof(TRL) - 1);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert_ptr_null(strstr(t.log, "headers 1 trailers"));
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 3, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, "again", 5);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 3 5");
    s_end(&t);
    /* Trailers that do not end the stream: malformed (8.1), the stream
     * is reset. */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, TRL, sizeof(TRL) - 1);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 1 request GET\nreset 1 1\n");
    ck_assert_str_eq(written(&t), "RST 1 1");
    /* A WINDOW_UPDATE of 0 on an open stream resets it. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 3, 0);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "RST 3 1");
    /* A reset by the client. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 5, REQ, REQ_LEN);
    h2_frames_u32_frame(&b, H2_RST_STREAM, 5, H2_CANCEL);
    s_feed(&t, &b, 1);
    ck_assert_ptr_nonnull(strstr(t.log, "reset 5 8 by peer\n"));
    ck_assert_ptr_null(t.s.streams);
    s_end(&t);
    /* A block HPACK cannot decode. */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, "\x80", 1); /* index 0 */
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 1 9");
    s_end(&t);
    free(b.p);
}
END_TEST

START_TEST(session_refuses_streams_past_the_limit)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 5, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "RST 5 7");
    ck_assert_str_eq(t.log, "headers 1 request GET\nheaders 3 request GET\n");
    ck_assert_uint_eq(t.s.stream_count, 2);
    /* Refused streams count as resets: 3 an interval pass, the 4th not. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 7, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 9, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "RST 7 7 RST 9 7");
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 11, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "RST 11 7 GOAWAY 11 11");
    ck_assert_str_eq(t.s.why, "rapid_reset");
    free(b.p);
    s_end(&t);
}
END_TEST

START_TEST(session_rapid_reset)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    for (uint32_t id = 1; id <= 7; id += 2) {
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, id, REQ, REQ_LEN);
        h2_frames_u32_frame(&b, H2_RST_STREAM, id, H2_CANCEL);
        s_feed(&t, &b, id == 7 ? 1999 : 1000 + id);
    }
    /* Three in the interval from 1001 pass; the fourth, at 1999, not. */
    ck_assert_str_eq(written(&t), "GOAWAY 7 11");
    s_end(&t);
    s_start(&t);
    for (uint32_t id = 1; id <= 7; id += 2) {
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, id, REQ, REQ_LEN);
        h2_frames_u32_frame(&b, H2_RST_STREAM, id, H2_CANCEL);
        s_feed(&t, &b, id == 7 ? 2001 : 1000 + id);
    }
    ck_assert_int_eq(t.s.error, H2_NO_ERROR); /* a new interval */
    free(b.p);
    s_end(&t);
}
END_TEST

/* `count` frames of one kind at `now`, then whether the session ended the
 * connection with ENHANCE_YOUR_CALM for `why`. */
static bool floods_at(struct sess *t, uint8_t type, uint8_t flags, uint32_t sid,
                      const char *payload, size_t len, unsigned count, uint64_t now,
                      const char *why)
{
    struct h2_frames_buf b = {0};
    for (unsigned i = 0; i < count; i++)
        h2_frames_frame(&b, type, flags, sid, payload, len);
    s_feed(t, &b, now);
    free(b.p);
    t->o.b.len = 0;
    if (t->s.error == H2_NO_ERROR)
        return false;
    ck_assert_int_eq(t->s.error, H2_ENHANCE_YOUR_CALM);
    ck_assert_str_eq(t->s.why, why);
    return true;
}

START_TEST(session_floods)
{
    static struct sess t;
    /* SETTINGS: 100 in 10 s; the first counts.  A new interval starts
     * afresh. */
    s_start(&t);
    ck_assert(!floods_at(&t, H2_SETTINGS, 0, 0, NULL, 0, 99, 1, "settings_flood"));
    ck_assert(!floods_at(&t, H2_SETTINGS, 0, 0, NULL, 0, 100, 10001, "settings_flood"));
    ck_assert(floods_at(&t, H2_SETTINGS, 0, 0, NULL, 0, 1, 10002, "settings_flood"));
    s_end(&t);
    s_start(&t);
    ck_assert(!floods_at(&t, H2_PING, 0, 0, "12345678", 8, 1000, 1, "ping_flood"));
    ck_assert(floods_at(&t, H2_PING, 0, 0, "12345678", 8, 1, 2, "ping_flood"));
    s_end(&t);
    /* PING ACKs cost nothing. */
    s_start(&t);
    ck_assert(!floods_at(&t, H2_PING, H2_FLAG_ACK, 0, "12345678", 8, 2000, 1, "ping_flood"));
    s_end(&t);
    /* Empty frames: DATA without payload or with padding only, PRIORITY,
     * and empty HEADERS/CONTINUATION frames inside a block. */
    s_start(&t);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert(!floods_at(&t, H2_DATA, 0, 1, NULL, 0, 500, 1, "empty_frame_flood"));
    ck_assert(
        !floods_at(&t, H2_DATA, H2_FLAG_PADDED, 1, "\x02\0\0", 3, 300, 1, "empty_frame_flood"));
    ck_assert(!floods_at(&t, H2_PRIORITY, 0, 3, "\0\0\0\x01\x10", 5, 190, 1, "empty_frame_flood"));
    /* Trailers in an empty HEADERS and 8 empty CONTINUATION frames: the
     * last ends the block, so 8 count. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_STREAM, 1, NULL, 0);
    for (int i = 0; i < 7; i++)
        h2_frames_frame(&b, H2_CONTINUATION, 0, 1, NULL, 0);
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 1, NULL, 0);
    /* 990 counted + 8 empty frames in the block = 998: still fine. */
    s_feed(&t, &b, 1);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert(!floods_at(&t, H2_PRIORITY, 0, 3, "\0\0\0\x01\x10", 5, 2, 1, "empty_frame_flood"));
    ck_assert(floods_at(&t, H2_PRIORITY, 0, 3, "\0\0\0\x01\x10", 5, 1, 1, "empty_frame_flood"));
    s_end(&t);
    /* WINDOW_UPDATE: 1000, plus 4 for each DATA frame sent. */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert(
        !floods_at(&t, H2_WINDOW_UPDATE, 0, 1, "\0\0\0\x01", 4, 1000, 1, "window_update_flood"));
    uint8_t x = 'x';
    struct iovec iov = {&x, 1};
    ck_assert_int_eq(h2_session_send_data(&t.s, 1, &iov, 1, false), 0);
    ck_assert(!floods_at(&t, H2_WINDOW_UPDATE, 0, 1, "\0\0\0\x01", 4, 4, 1, "window_update_flood"));
    ck_assert(floods_at(&t, H2_WINDOW_UPDATE, 0, 1, "\0\0\0\x01", 4, 1, 1, "window_update_flood"));
    free(b.p);
    s_end(&t);
}
END_TEST

START_TEST(session_goaway)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    h2_session_goaway(&t.s, H2_NO_ERROR);
    ck_assert_str_eq(written(&t), "GOAWAY 1 0");
    /* Streams past it are decoded and dropped; the one before goes on. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_DATA, H2_FLAG_END_STREAM, 1, "x", 1);
    uint8_t ga[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    h2_frames_frame(&b, H2_GOAWAY, 0, 0, ga, 8);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert_str_eq(t.log, "headers 1 request GET\ndata 1 1 end\ngoaway 0 0\n");
    ck_assert(t.s.goaway_received);
    h2_session_reset(&t.s, 1, H2_CANCEL);
    ck_assert_str_eq(written(&t), "RST 1 8");
    ck_assert_ptr_null(t.s.streams);
    /* A GOAWAY may name no stream a client opens, nor a higher one than
     * before. */
    ga[3] = 2;
    h2_frames_frame(&b, H2_GOAWAY, 0, 0, ga, 8);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 3 1");
    s_end(&t);
    s_start(&t);
    ga[3] = 1;
    h2_frames_frame(&b, H2_GOAWAY, 0, 0, ga, 8);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "GOAWAY 0 1");
    free(b.p);
    s_end(&t);
}
END_TEST

/* The session with the optional callbacks too. */
static void s_closed(void *arg, uint32_t id)
{
    slog((struct sess *)arg, "closed %u\n", id);
}

static void s_refused(void *arg, uint32_t id)
{
    slog((struct sess *)arg, "refused %u\n", id);
}

static void s_ping_ack(void *arg, const uint8_t data[8])
{
    slog((struct sess *)arg, "ping ack %.8s\n", (const char *)data);
}

static const struct h2_session_ops s_ops_all = {
    .field = s_field,
    .headers = s_headers,
    .data = s_data,
    .reset = s_reset,
    .window = s_window,
    .goaway = s_goaway,
    .ping_ack = s_ping_ack,
    .closed = s_closed,
    .refused = s_refused,
};

START_TEST(session_tells_closed_and_refused_streams)
{
    static struct sess t;
    s_start(&t);
    t.s.ops = &s_ops_all;
    struct h2_frames_buf b = {0};
    /* The client's half ends first: the response's END_STREAM closes. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(h2_session_send_headers(&t.s, 1, (const uint8_t *)"\x88", 1, true), 0);
    ck_assert_str_eq(t.log, "headers 1 request GET end\nclosed 1\n");
    t.used = 0;
    /* Ours first: the client's END_STREAM closes, after its bytes; and
     * after its trailers. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 5, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(h2_session_send_headers(&t.s, 3, (const uint8_t *)"\x88", 1, true), 0);
    ck_assert_int_eq(h2_session_send_headers(&t.s, 5, (const uint8_t *)"\x88", 1, true), 0);
    h2_frames_frame(&b, H2_DATA, H2_FLAG_END_STREAM, 3, "x", 1);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 5, TRL,
                    sizeof(TRL) - 1);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 3 request GET\nheaders 5 request GET\ndata 3 1 end\n"
                            "closed 3\nheaders 5 trailers x=y end\nclosed 5\n");
    t.used = 0;
    /* Resets are not closes; refusals are told. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 7, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 9, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 11, REQ, REQ_LEN);
    h2_frames_u32_frame(&b, H2_RST_STREAM, 7, H2_CANCEL);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 7 request GET\nheaders 9 request GET\nrefused 11\n"
                            "reset 7 8 by peer\n");
    free(b.p);
    s_end(&t);
}
END_TEST

START_TEST(session_graceful_shutdown)
{
    static struct sess t;
    s_start(&t);
    t.s.ops = &s_ops_all;
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    h2_session_shutdown(&t.s);
    ck_assert_str_eq(written(&t), "GOAWAY 2147483647 0 PING");
    h2_session_shutdown(&t.s); /* once */
    ck_assert_str_eq(written(&t), "");
    ck_assert(!h2_session_done(&t.s));
    /* A stream the client sent before it read the notice is taken. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 3, REQ, REQ_LEN);
    s_feed(&t, &b, 2);
    ck_assert_str_eq(written(&t), "");
    /* The PING's answer: the final GOAWAY names the last stream taken. */
    h2_frames_frame(&b, H2_PING, H2_FLAG_ACK, 0, "\0\0\0\0\0\0\0\0", 8);
    s_feed(&t, &b, 3);
    ck_assert_str_eq(written(&t), "GOAWAY 3 0");
    /* Later streams are dropped; the two taken run to their end. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 5, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_PING, H2_FLAG_ACK, 0, "\0\0\0\0\0\0\0\0", 8); /* no third GOAWAY */
    s_feed(&t, &b, 4);
    ck_assert_str_eq(written(&t), "");
    ck_assert_str_eq(t.log, "headers 1 request GET\nheaders 3 request GET end\nping ack \n"
                            "ping ack \n");
    ck_assert(!h2_session_done(&t.s));
    ck_assert_int_eq(h2_session_send_headers(&t.s, 3, (const uint8_t *)"\x88", 1, true), 0);
    ck_assert(!h2_session_done(&t.s));
    h2_session_reset(&t.s, 1, H2_CANCEL);
    ck_assert(h2_session_done(&t.s));
    s_end(&t);
    /* No answer in time: the caller sends the final GOAWAY itself. */
    s_start(&t);
    h2_session_shutdown(&t.s);
    h2_session_goaway(&t.s, H2_NO_ERROR);
    ck_assert_str_eq(written(&t), "GOAWAY 2147483647 0 PING GOAWAY 0 0");
    ck_assert(h2_session_done(&t.s));
    h2_frames_frame(&b, H2_PING, H2_FLAG_ACK, 0, "\0\0\0\0\0\0\0\0", 8);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(written(&t), "");
    s_end(&t);
    /* After a connection error, nothing. */
    s_start(&t);
    h2_frames_frame(&b, H2_PING, 0, 0, "1234567", 7);
    s_feed(&t, &b, 1);
    ck_assert(h2_session_done(&t.s));
    written(&t);
    h2_session_shutdown(&t.s);
    ck_assert_str_eq(written(&t), "");
    free(b.p);
    s_end(&t);
}
END_TEST

/* The streams whose bodies wait take turns, each as its window allows. */
START_TEST(session_round_robin_between_streams)
{
    static struct sess t;
    s_start(&t);
    t.s.conf.max_concurrent_streams = 3;
    struct h2_frames_buf b = {0};
    for (uint32_t id = 1; id <= 5; id += 2)
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, id, REQ, REQ_LEN);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 0, 1000000);
    s_feed(&t, &b, 1);
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 0); /* none wants to */
    h2_session_want_send(&t.s, 5, true);
    h2_session_want_send(&t.s, 1, true);
    h2_session_want_send(&t.s, 3, true);
    h2_session_want_send(&t.s, 7, true); /* no such stream: nothing */
    uint32_t order[7];
    for (int i = 0; i < 7; i++)
        order[i] = h2_session_next_sender(&t.s);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[1], 3);
    ck_assert_uint_eq(order[2], 5);
    ck_assert_uint_eq(order[3], 1);
    ck_assert_uint_eq(order[6], 1);
    /* A stream whose window is shut waits; the others go on. */
    static uint8_t body[65535];
    struct iovec iov = {body, 65535 - 10};
    ck_assert_int_eq(h2_session_send_headers(&t.s, 3, (const uint8_t *)"\x88", 1, false), 0);
    ck_assert_int_eq(h2_session_send_data(&t.s, 3, &iov, 1, false), 0);
    t.o.b.len = 0;
    ck_assert_uint_eq(h2_session_send_window(&t.s, 3), 10);
    iov.iov_len = 10;
    ck_assert_int_eq(h2_session_send_data(&t.s, 3, &iov, 1, false), 0);
    t.o.b.len = 0;
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 5); /* after 1 */
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 1);
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 5);
    /* The connection's window shut: none. */
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 3, 100);
    s_feed(&t, &b, 1);
    t.s.send_window = 0;
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 0);
    h2_frames_u32_frame(&b, H2_WINDOW_UPDATE, 0, 100);
    s_feed(&t, &b, 1);
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 1);
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 3);
    /* One that has nothing more, or is gone, is passed over. */
    h2_session_want_send(&t.s, 5, false);
    h2_session_reset(&t.s, 1, H2_CANCEL);
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 3);
    ck_assert_uint_eq(h2_session_next_sender(&t.s), 3);
    free(b.p);
    s_end(&t);
}
END_TEST

/* The stream's window alone, for a caller that gave the connection's
 * back as the bytes came. */
START_TEST(session_consume_stream_alone)
{
    static struct sess t;
    s_start(&t);
    static uint8_t big[600];
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_DATA, 0, 1, big, sizeof(big));
    s_feed(&t, &b, 1);
    h2_session_consume(&t.s, 0, sizeof(big)); /* the connection's: owed, not yet due */
    ck_assert_str_eq(written(&t), "");
    ck_assert_uint_eq(t.s.recv_unacked, 600);
    h2_session_consume_stream(&t.s, 1, sizeof(big)); /* half the stream's window */
    ck_assert_str_eq(written(&t), "WU 1 600");
    ck_assert_uint_eq(t.s.recv_unacked, 600); /* the connection's unchanged */
    ck_assert_int_eq(h2_session_stream(&t.s, 1)->recv_window, 1000);
    /* A stream whose client ended its half is sent nothing more. */
    h2_frames_frame(&b, H2_DATA, H2_FLAG_END_STREAM, 1, big, sizeof(big));
    s_feed(&t, &b, 1);
    h2_session_consume_stream(&t.s, 1, sizeof(big));
    ck_assert_str_eq(written(&t), "");
    free(b.p);
    s_end(&t);
}
END_TEST

/* Feeds `b` from `from` up to `upto` into the connection's input `c` at
 * `now`, as a connection does; returns `upto`. */
static size_t s_trickle(struct sess *t, struct conn_in *c, const struct h2_frames_buf *b,
                        size_t from, size_t upto, uint64_t now)
{
    conn_in_add(c, b, from, upto - from);
    conn_in_used(c, h2_session_recv(&t->s, c->buf, c->have, now));
    ck_assert_int_eq(t->s.error, H2_NO_ERROR);
    return upto;
}

/* The times a caller's timeouts need: the last whole frame, and since
 * when what waits unfinished has waited. */
START_TEST(session_times_what_waits)
{
    static struct sess t;
    s_start(&t); /* at 0 */
    ck_assert_uint_eq(t.s.frame_done_ms, 0);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_PING, 0, 0, "12345678", 8);                                  /* 0..17 */
    h2_frames_frame(&b, H2_HEADERS, 0, 1, REQ, 3);                                      /* 17..29 */
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 1, &REQ[3], REQ_LEN - 3); /* 29..41 */
    h2_frames_frame(&b, H2_PING, 0, 0, "12345678", 8);                                  /* 41..58 */
    h2_frames_frame(&b, H2_PING, 0, 0, "12345678", 8);                                  /* 58..75 */
    ck_assert_uint_eq(b.len, 75);
    struct conn_in c = {.have = 0};
    size_t at = s_trickle(&t, &c, &b, 0, 4, 10);
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_HEADER);
    ck_assert_uint_eq(t.s.wait_since_ms, 10);
    at = s_trickle(&t, &c, &b, at, 12, 20); /* the same frame: its time stays */
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_PAYLOAD);
    ck_assert_uint_eq(t.s.wait_since_ms, 10);
    at = s_trickle(&t, &c, &b, at, 20, 30); /* PING whole, HEADERS begun */
    ck_assert_uint_eq(t.s.frame_done_ms, 30);
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_HEADER);
    ck_assert_uint_eq(t.s.wait_since_ms, 30);
    at = s_trickle(&t, &c, &b, at, 35, 40); /* the block: from its first byte */
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_BLOCK);
    ck_assert_uint_eq(t.s.wait_since_ms, 30);
    at = s_trickle(&t, &c, &b, at, 40, 50); /* its CONTINUATION, all but a byte */
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_BLOCK);
    ck_assert_uint_eq(t.s.wait_since_ms, 30);
    ck_assert_uint_eq(t.s.frame_done_ms, 30);
    at = s_trickle(&t, &c, &b, at, 41, 60); /* the block ends with its frame */
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_NONE);
    ck_assert_uint_eq(t.s.frame_done_ms, 60);
    ck_assert_str_eq(t.log, "headers 1 request GET\n");
    at = s_trickle(&t, &c, &b, at, 45, 70);
    ck_assert_uint_eq(t.s.wait_since_ms, 70);
    at = s_trickle(&t, &c, &b, at, 62, 80); /* a PING ends, another begins */
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_HEADER);
    ck_assert_uint_eq(t.s.wait_since_ms, 80);
    ck_assert_uint_eq(t.s.frame_done_ms, 80);
    at = s_trickle(&t, &c, &b, at, 75, 90);
    ck_assert_uint_eq(t.s.reader.wait, H2_WAIT_NONE);
    ck_assert_uint_eq(t.s.frame_done_ms, 90);
    ck_assert_uint_eq(c.have, 0);
    free(b.p);
    s_end(&t);
}
END_TEST

/* ------------------------------------------------------------- message */

/* A header block of "name", "value" pairs (NULL ends them), literals
 * without indexing. */
static size_t block_of(uint8_t *out, size_t room, const char *const *nv)
{
    struct hpack_field f[32];
    size_t n = 0;
    for (; nv[2 * n] != NULL; n++) {
        ck_assert_uint_lt(n, 32);
        f[n] = (struct hpack_field){(const uint8_t *)nv[2 * n], strlen(nv[2 * n]),
                                    (const uint8_t *)nv[2 * n + 1], strlen(nv[2 * n + 1]), false};
    }
    ck_assert_uint_le(hpack_encode_bound(f, n), room);
    struct hpack_encoder e;
    hpack_encoder_init(&e, 0);
    size_t len = hpack_encode(&e, f, NULL, n, out);
    hpack_encoder_free(&e);
    return len;
}

/* One request head, END_STREAM set: what the session made of it. */
struct msg_case {
    const char *name;
    const char *nv[24];
    const char *log; /* of the session; NULL: reset (RST_STREAM PROTOCOL_ERROR) */
};

#define BASE ":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a"

static const struct msg_case msg_cases[] = {
    {"valid", {BASE, "x-a", "1", NULL}, "headers 1 request GET x-a=1 end\n"},
    {"connection", {BASE, "connection", "keep-alive", NULL}, NULL},
    {"keep-alive", {BASE, "keep-alive", "timeout=5", NULL}, NULL},
    {"proxy-connection", {BASE, "proxy-connection", "keep-alive", NULL}, NULL},
    {"transfer-encoding", {BASE, "transfer-encoding", "chunked", NULL}, NULL},
    {"upgrade", {BASE, "upgrade", "websocket", NULL}, NULL},
    {"te-gzip", {BASE, "te", "gzip", NULL}, NULL},
    {"te-list", {BASE, "te", "trailers, gzip", NULL}, NULL},
    {"te-trailers", {BASE, "te", "Trailers", NULL}, "headers 1 request GET te=Trailers end\n"},
    {"name-uppercase", {BASE, "X-Upper", "1", NULL}, NULL},
    {"pseudo-uppercase",
     {":Method", "GET", ":scheme", "https", ":path", "/", ":authority", "a", NULL},
     NULL},
    /* Regular fields with a byte they may not have: malformed too, as
     * libnghttp2 makes them without an invalid-header callback. */
    {"name-space", {BASE, "x y", "1", NULL}, NULL},
    {"name-empty", {BASE, "", "1", NULL}, NULL},
    {"name-colon-inside", {BASE, "x:y", "1", NULL}, NULL},
    {"value-leading-space", {BASE, "x-a", " 1", NULL}, NULL},
    {"value-trailing-tab", {BASE, "x-a", "1\t", NULL}, NULL},
    {"value-cr", {BASE, "x-a", "1\r2", NULL}, NULL},
    {"value-lf", {BASE, "x-a", "a\nb", NULL}, NULL},
    {"value-del", {BASE, "x-a", "a\177", NULL}, NULL},
    /* The rest of the raw-frame suite's malformed table
     * (tests/proto/h2/h2frames.py), which the daemon refuses today. */
    {"name-trailing-space", {BASE, "x-a ", "1", NULL}, NULL},
    {"name-tab", {BASE, "x\tname", "1", NULL}, NULL},
    {"name-cr", {BASE, "x\rname", "1", NULL}, NULL},
    {"name-lf", {BASE, "x\nname", "1", NULL}, NULL},
    {"value-crlf-injection", {BASE, "x-v", "a\r\nx-injected: 1", NULL}, NULL},
    {"pseudo-method-crlf",
     {":method", "GET /x HTTP/1.1\r\nx: y", ":scheme", "https", ":path", "/", ":authority", "a",
      NULL},
     NULL},
    {"path-absolute-form",
     {":method", "GET", ":scheme", "http", ":path", "http://a/x", ":authority", "a", NULL},
     NULL},
    {"value-inner-space", {BASE, "x-a", "1 \t2", NULL}, "headers 1 request GET x-a=1 \t2 end\n"},
    {"value-obs-text", {BASE, "x-a", "\xc3\xa9", NULL}, "headers 1 request GET x-a=\xc3\xa9 end\n"},
    {"value-empty", {BASE, "x-a", "", NULL}, "headers 1 request GET x-a= end\n"},
    {"pseudo-after-regular",
     {":method", "GET", "x-a", "1", ":scheme", "https", ":path", "/", ":authority", "a", NULL},
     NULL},
    {"path-crlf",
     {":method", "GET", ":scheme", "https", ":path", "/a\r\nx: 1", ":authority", "a", NULL},
     NULL},
    {"path-space",
     {":method", "GET", ":scheme", "https", ":path", "/a b", ":authority", "a", NULL},
     NULL},
    {"authority-crlf",
     {":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a\r\nx: 1", NULL},
     NULL},
    {"authority-slash",
     {":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a/b", NULL},
     NULL},
    {"scheme-lf",
     {":method", "GET", ":scheme", "ht\ntp", ":path", "/", ":authority", "a", NULL},
     NULL},
    {"scheme-digit-first",
     {":method", "GET", ":scheme", "1http", ":path", "/", ":authority", "a", NULL},
     NULL},
    {"method-space",
     {":method", "G T", ":scheme", "https", ":path", "/", ":authority", "a", NULL},
     NULL},
    {"method-empty",
     {":method", "", ":scheme", "https", ":path", "/", ":authority", "a", NULL},
     NULL},
    {"duplicate-path", {BASE, ":path", "/x", NULL}, NULL},
    {"duplicate-method", {":method", "GET", BASE, NULL}, NULL},
    {"duplicate-authority", {BASE, ":authority", "b", NULL}, NULL},
    {"unknown-pseudo", {BASE, ":foo", "1", NULL}, NULL},
    {"status-in-request", {BASE, ":status", "200", NULL}, NULL},
    {"protocol-not-offered", {BASE, ":protocol", "websocket", NULL}, NULL},
    {"missing-method", {":scheme", "https", ":path", "/", ":authority", "a", NULL}, NULL},
    {"missing-scheme", {":method", "GET", ":path", "/", ":authority", "a", NULL}, NULL},
    {"missing-path", {":method", "GET", ":scheme", "https", ":authority", "a", NULL}, NULL},
    {"path-empty",
     {":method", "GET", ":scheme", "https", ":path", "", ":authority", "a", NULL},
     NULL},
    {"path-relative",
     {":method", "GET", ":scheme", "https", ":path", "x", ":authority", "a", NULL},
     NULL},
    {"path-star-get",
     {":method", "GET", ":scheme", "https", ":path", "*", ":authority", "a", NULL},
     NULL},
    {"path-star-options",
     {":method", "OPTIONS", ":scheme", "http", ":path", "*", ":authority", "a", NULL},
     "headers 1 request OPTIONS end\n"},
    /* Another scheme's path is not held to "/" (8.3.1). */
    {"path-other-scheme",
     {":method", "GET", ":scheme", "foo", ":path", "x", ":authority", "a", NULL},
     "headers 1 request GET end\n"},
    {"no-authority-no-host", {":method", "GET", ":scheme", "https", ":path", "/", NULL}, NULL},
    {"host-only",
     {":method", "GET", ":scheme", "https", ":path", "/", "host", "a", NULL},
     "headers 1 request GET host=a end\n"},
    {"host-twice", {BASE, "host", "a", "host", "a", NULL}, NULL},
    {"host-empty", {BASE, "host", "", NULL}, NULL},
    {"authority-empty",
     {":method", "GET", ":scheme", "https", ":path", "/", ":authority", "", NULL},
     NULL},
    {"connect",
     {":method", "CONNECT", ":authority", "a:443", NULL},
     "headers 1 request CONNECT end\n"},
    {"connect-with-path", {":method", "CONNECT", ":authority", "a:443", ":path", "/", NULL}, NULL},
    {"connect-with-scheme",
     {":method", "CONNECT", ":scheme", "https", ":authority", "a:443", NULL},
     NULL},
    {"connect-no-authority", {":method", "CONNECT", "host", "a:443", NULL}, NULL},
    {"content-length-zero",
     {BASE, "content-length", "0", NULL},
     "headers 1 request GET content-length=0 end\n"},
    {"content-length-twice", {BASE, "content-length", "0", "content-length", "0", NULL}, NULL},
    {"content-length-list", {BASE, "content-length", "5, 6", NULL}, NULL},
    {"content-length-sign", {BASE, "content-length", "+0", NULL}, NULL},
    {"content-length-overflow", {BASE, "content-length", "99999999999999999999", NULL}, NULL},
    /* END_STREAM with no body: a length that is not 0 is a lie. */
    {"content-length-no-data", {BASE, "content-length", "5", NULL}, NULL},
};

START_TEST(message_request_heads)
{
    const struct msg_case *c = &msg_cases[_i];
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    uint8_t blk[2048];
    size_t len = block_of(blk, sizeof(blk), c->nv);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, blk, len);
    s_feed(&t, &b, 1);
    ck_assert_msg(t.s.error == H2_NO_ERROR, "%s: the connection ended", c->name);
    const char *w = written(&t);
    if (c->log == NULL) {
        ck_assert_msg(strcmp(w, "RST 1 1") == 0, "%s: wrote %s, not a reset", c->name, w);
        ck_assert_msg(strcmp(t.log, "reset 1 1\n") == 0, "%s: %s", c->name, t.log);
        ck_assert_ptr_null(h2_session_stream(&t.s, 1));
    } else {
        ck_assert_msg(strcmp(w, "") == 0, "%s: wrote %s", c->name, w);
        ck_assert_msg(strcmp(t.log, c->log) == 0, "%s: %s", c->name, t.log);
    }
    /* The connection goes on, its HPACK state whole. */
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 3, REQ, REQ_LEN);
    s_feed(&t, &b, 1);
    ck_assert_ptr_nonnull(strstr(t.log, "headers 3 request GET end\n"));
    free(b.p);
    s_end(&t);
}
END_TEST

/* A request with a body: its head, DATA frames, and END_STREAM on the
 * last DATA or on trailers. */
static void post(struct sess *t, const char *length, const char *const *data, size_t count,
                 bool trailers)
{
    s_start(t);
    struct h2_frames_buf b = {0};
    uint8_t blk[256];
    const char *nv[] = {":method",    "POST",  ":scheme",
                        "https",      ":path", "/",
                        ":authority", "a",     length != NULL ? "content-length" : NULL,
                        length,       NULL};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, blk, block_of(blk, sizeof(blk), nv));
    for (size_t i = 0; i < count; i++)
        h2_frames_frame(&b, H2_DATA, i + 1 == count && !trailers ? H2_FLAG_END_STREAM : 0, 1,
                        data[i], strlen(data[i]));
    if (trailers) {
        const char *tnv[] = {"x-sum", "1", NULL};
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, blk,
                        block_of(blk, sizeof(blk), tnv));
    }
    s_feed(t, &b, 1);
    free(b.p);
}

START_TEST(message_content_length_and_body)
{
    static struct sess t;
    /* As long as it said: passed whole. */
    const char *five[] = {"01", "234"};
    post(&t, "5", five, 2, false);
    ck_assert_str_eq(t.log, "headers 1 request POST content-length=5\ndata 1 2\ndata 1 3 end\n");
    ck_assert_str_eq(written(&t), "");
    s_end(&t);
    /* Longer: reset at the DATA that passes it, which is not passed, its
     * window given back to the connection at once. */
    const char *ten[] = {"0123", "456789"};
    post(&t, "5", ten, 2, false);
    ck_assert_str_eq(t.log, "headers 1 request POST content-length=5\ndata 1 4\nreset 1 1\n");
    ck_assert_str_eq(written(&t), "RST 1 1");
    ck_assert_int_eq(t.s.recv_window, 100000 - 10);
    ck_assert_uint_eq(t.s.recv_unacked, 6);
    s_end(&t);
    /* Shorter: reset at the end, after the bytes that came. */
    const char *three[] = {"012"};
    post(&t, "5", three, 1, false);
    ck_assert_str_eq(t.log, "headers 1 request POST content-length=5\ndata 1 3\nreset 1 1\n");
    ck_assert_str_eq(written(&t), "RST 1 1");
    s_end(&t);
    /* content-length 0 with a body. */
    const char *one[] = {"x"};
    post(&t, "0", one, 1, false);
    ck_assert_str_eq(t.log, "headers 1 request POST content-length=0\nreset 1 1\n");
    s_end(&t);
    /* Ended by trailers: the length is checked there too. */
    post(&t, "5", three, 1, true);
    ck_assert_str_eq(t.log, "headers 1 request POST content-length=5\ndata 1 3\nreset 1 1\n");
    s_end(&t);
    post(&t, "3", three, 1, true);
    ck_assert_str_eq(t.log, "headers 1 request POST content-length=3\ndata 1 3\nheaders 1 trailers "
                            "x-sum=1 end\n");
    s_end(&t);
    /* No length: any body. */
    post(&t, NULL, ten, 2, true);
    ck_assert_str_eq(t.log, "headers 1 request POST\ndata 1 4\ndata 1 6\nheaders 1 trailers "
                            "x-sum=1 end\n");
    s_end(&t);
}
END_TEST

/* A NUL anywhere (a name, a value, :path, :method) is malformed. */
START_TEST(message_nul_bytes)
{
    static struct sess t;
    struct h2_frames_buf b = {0};
    static const struct {
        const char *name;
        size_t name_len;
        const char *value;
        size_t value_len;
    } nul[] = {
        {"x\0name", 6, "1", 1},
        {"x-v", 3, "a\0b", 3},
        {":path", 5, "/x\0", 3},
        {":method", 7, "GE\0T", 4},
    };
    for (size_t i = 0; i < sizeof(nul) / sizeof(nul[0]); i++) {
        struct hpack_field f[5] = {
            {(const uint8_t *)":method", 7, (const uint8_t *)"GET", 3, false},
            {(const uint8_t *)":scheme", 7, (const uint8_t *)"https", 5, false},
            {(const uint8_t *)":authority", 10, (const uint8_t *)"a", 1, false},
            {(const uint8_t *)":path", 5, (const uint8_t *)"/", 1, false},
            {(const uint8_t *)"x-ok", 4, (const uint8_t *)"1", 1, false},
        };
        /* The field replaces its namesake, or the last regular one. */
        size_t at = nul[i].name[0] == ':' ? (nul[i].name[1] == 'p' ? 3 : 0) : 4;
        f[at] = (struct hpack_field){(const uint8_t *)nul[i].name, nul[i].name_len,
                                     (const uint8_t *)nul[i].value, nul[i].value_len, false};
        uint8_t blk[256];
        struct hpack_encoder e;
        hpack_encoder_init(&e, 0);
        ck_assert_uint_le(hpack_encode_bound(f, 5), sizeof(blk));
        size_t len = hpack_encode(&e, f, NULL, 5, blk);
        hpack_encoder_free(&e);
        s_start(&t);
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, blk, len);
        s_feed(&t, &b, 1);
        ck_assert_msg(strcmp(t.log, "reset 1 1\n") == 0, "%zu: %s", i, t.log);
        ck_assert_str_eq(written(&t), "RST 1 1");
        s_end(&t);
    }
    free(b.p);
}
END_TEST

START_TEST(message_trailers)
{
    static struct sess t;
    struct h2_frames_buf b = {0};
    uint8_t blk[256];
    static const char *const bad[][5] = {
        {":path", "/", NULL},                                 /* pseudo in trailers */
        {"connection", "close", NULL},                        /* connection-specific */
        {"content-length", "1", "content-length", "1", NULL}, /* twice */
        {"X-Sum", "1", NULL},                                 /* uppercase */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        s_start(&t);
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
        h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, blk,
                        block_of(blk, sizeof(blk), bad[i]));
        s_feed(&t, &b, 1);
        ck_assert_msg(strcmp(t.log, "headers 1 request GET\nreset 1 1\n") == 0, "%zu: %s", i,
                      t.log);
        ck_assert_str_eq(written(&t), "RST 1 1");
        s_end(&t);
    }
    free(b.p);
}
END_TEST

START_TEST(message_header_list_limit)
{
    static struct sess t;
    struct h2_frames_buf b = {0};
    uint8_t blk[2048];
    char v[401];
    memset(v, 'v', 400);
    v[400] = '\0';
    /* RFC 9113 6.5.2 counts name, value and 32 per field: 4 pseudo-headers
     * (167) and x-1 (435) pass the 1000 bytes, x-2 (435) not: decoded to
     * its end, x-2 and x-3 not passed, and told. */
    const char *nv[] = {BASE, "x-1", v, "x-2", v, "x-3", "3", NULL};
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, blk,
                    block_of(blk, sizeof(blk), nv));
    s_feed(&t, &b, 1);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert_uint_eq(t.field_bytes, 167 + 435);
    ck_assert_ptr_nonnull(strstr(t.log, "headers 1 request GET x-1="));
    ck_assert_ptr_nonnull(strstr(t.log, " too large end\n"));
    ck_assert_ptr_null(strstr(t.log, "x-2"));
    /* A malformed field past the limit still resets the stream. */
    const char *bad[] = {BASE, "x-1", v, "x-2", v, "connection", "close", NULL};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 3, blk,
                    block_of(blk, sizeof(blk), bad));
    s_feed(&t, &b, 1);
    ck_assert_ptr_nonnull(strstr(t.log, "reset 3 1\n"));
    ck_assert_str_eq(written(&t), "RST 3 1");
    s_end(&t);
    /* A field longer than the scratch (600 bytes here): the block is cut,
     * the request told so (for its 431), the connection ended. */
    char big[701];
    memset(big, 'b', 700);
    big[700] = '\0';
    const char *huge[] = {BASE, "x-big", big, NULL};
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, blk,
                    block_of(blk, sizeof(blk), huge));
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 1 request GET cut\n");
    ck_assert_str_eq(written(&t), "GOAWAY 1 11");
    ck_assert_int_eq(t.s.error, H2_ENHANCE_YOUR_CALM);
    s_end(&t);
    /* A block longer than the limit, cut by the reader before it is
     * whole: its new stream opens to be told, then GOAWAY. */
    s_start(&t);
    uint8_t pad[1001];
    memset(pad, 0x82, sizeof(pad));
    h2_frames_frame(&b, H2_HEADERS, 0, 1, pad, 600);
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 1, pad, 401);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 1 request  cut\n");
    ck_assert_str_eq(written(&t), "GOAWAY 1 11");
    s_end(&t);
    /* A cut block no request would take (an even stream, one past the
     * stream limit): told to no one, the reader's code kept. */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, 0, 2, pad, 600);
    h2_frames_frame(&b, H2_CONTINUATION, H2_FLAG_END_HEADERS, 2, pad, 401);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "");
    ck_assert_str_eq(written(&t), "GOAWAY 0 11");
    s_end(&t);
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 5, pad, 1001);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 1 request GET\nheaders 3 request GET\n");
    ck_assert_str_eq(written(&t), "GOAWAY 3 11");
    s_end(&t);
    /* The same for trailers: no answer, the connection ends. */
    s_start(&t);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, pad, 1001);
    s_feed(&t, &b, 1);
    ck_assert_str_eq(t.log, "headers 1 request GET\n");
    ck_assert_str_eq(written(&t), "GOAWAY 1 11");
    s_end(&t);
    free(b.p);
}
END_TEST

/* Blocks for no stream are decoded all the same: the dynamic table stays
 * the client's. */
START_TEST(message_discarded_blocks_keep_hpack_in_step)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 1, REQ, REQ_LEN);
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS, 3, REQ, REQ_LEN);
    /* Stream 5 is refused (2 at most); its block indexes x-k: v. */
    static const char idx[] = "\x82\x86\x84\x01\x01"
                              "a"
                              "\x40\x03x-k\x01v";
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 5, idx,
                    sizeof(idx) - 1);
    h2_frames_u32_frame(&b, H2_RST_STREAM, 1, H2_CANCEL);
    /* Stream 7 names it by its index, 62. */
    static const char ref[] = "\x82\x86\x84\x01\x01"
                              "a"
                              "\xbe";
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 7, ref,
                    sizeof(ref) - 1);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert_str_eq(t.log, "headers 1 request GET\nheaders 3 request GET\nreset 1 8 by peer\n"
                            "headers 7 request GET x-k=v end\n");
    free(b.p);
    s_end(&t);
}
END_TEST

/* A field's bytes are checked once while its entry stays in the table:
 * an entry whose bytes passed is marked (a field refused for what it
 * means, not its bytes, too: that is checked again), one whose bytes
 * failed or were never checked is not, and its later uses are checked
 * and refused again. */
START_TEST(message_checked_bytes_marked_in_the_table)
{
    static struct sess t;
    s_start(&t);
    struct h2_frames_buf b = {0};
    /* x-ok passes; connection is refused (8.2.2); x-bad, after, is not
     * checked; all three indexed: x-bad 62, connection 63, x-ok 64. */
    static const char idx[] = "\x82\x86\x84\x01\x01"
                              "a"
                              "\x40\x04x-ok\x01"
                              "1"
                              "\x40\x0a"
                              "connection\x05"
                              "close"
                              "\x40\x05x-bad\x03"
                              "a\x01"
                              "b";
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 1, idx,
                    sizeof(idx) - 1);
    static const char bad[] = "\x82\x86\x84\x01\x01"
                              "a"
                              "\xbe";
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 3, bad,
                    sizeof(bad) - 1);
    static const char conn[] = "\x82\x86\x84\x01\x01"
                               "a"
                               "\xbf";
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 5, conn,
                    sizeof(conn) - 1);
    static const char ok[] = "\x82\x86\x84\x01\x01"
                             "a"
                             "\xc0";
    h2_frames_frame(&b, H2_HEADERS, H2_FLAG_END_HEADERS | H2_FLAG_END_STREAM, 7, ok,
                    sizeof(ok) - 1);
    s_feed(&t, &b, 1);
    ck_assert_int_eq(t.s.error, H2_NO_ERROR);
    ck_assert_str_eq(t.log, "reset 1 1\nreset 3 1\nreset 5 1\nheaders 7 request GET x-ok=1 end\n");
    ck_assert(hpack_table_marked(&t.s.hpack.table, 64));  /* x-ok */
    ck_assert(hpack_table_marked(&t.s.hpack.table, 63));  /* connection */
    ck_assert(!hpack_table_marked(&t.s.hpack.table, 62)); /* x-bad */
    free(b.p);
    s_end(&t);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/h2_frame");
    TCase *tc = tcase_create("reader");
    tcase_add_test(tc, preface_and_first_settings);
    tcase_add_test(tc, every_frame_type);
    tcase_add_test(tc, each_connection_error);
    tcase_add_test(tc, frame_too_large_refused_at_its_header);
    tcase_add_test(tc, window_update_zero_on_a_stream);
    tcase_add_test(tc, continuation_sequencing);
    tcase_add_test(tc, continuation_flood_and_block_limit);
    tcase_add_test(tc, field_announced_too_long_cut_at_its_length);
    tcase_add_test(tc, data_consumed_in_pieces);
    tcase_add_test(tc, reader_says_what_waits);
    suite_add_tcase(suite, tc);
    tc = tcase_create("writer");
    tcase_add_test(tc, control_frames_written);
    tcase_add_test(tc, data_references_the_callers_buffers);
    tcase_add_test(tc, headers_split_into_continuations);
    suite_add_tcase(suite, tc);
    tc = tcase_create("session");
    tcase_add_test(tc, session_request_and_response);
    tcase_add_test(tc, session_settings_and_ping);
    tcase_add_test(tc, session_initial_window_change);
    tcase_add_test(tc, session_flow_control_errors);
    tcase_add_test(tc, session_stream_states);
    tcase_add_test(tc, session_refuses_streams_past_the_limit);
    tcase_add_test(tc, session_rapid_reset);
    tcase_add_test(tc, session_floods);
    tcase_add_test(tc, session_goaway);
    tcase_add_test(tc, session_tells_closed_and_refused_streams);
    tcase_add_test(tc, session_graceful_shutdown);
    tcase_add_test(tc, session_times_what_waits);
    tcase_add_test(tc, session_round_robin_between_streams);
    tcase_add_test(tc, session_consume_stream_alone);
    suite_add_tcase(suite, tc);
    tc = tcase_create("message");
    tcase_add_loop_test(tc, message_request_heads, 0, sizeof(msg_cases) / sizeof(msg_cases[0]));
    tcase_add_test(tc, message_content_length_and_body);
    tcase_add_test(tc, message_nul_bytes);
    tcase_add_test(tc, message_trailers);
    tcase_add_test(tc, message_header_list_limit);
    tcase_add_test(tc, message_discarded_blocks_keep_hpack_in_step);
    tcase_add_test(tc, message_checked_bytes_marked_in_the_table);
    suite_add_tcase(suite, tc);
    return suite;
}
