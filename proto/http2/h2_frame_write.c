/*
 * h2_frame_write.c: the frame writer (h2_frame.h).  Frame headers and the
 * small fixed payloads are built on the stack and handed to the sink with
 * the payload's own buffers, so that nothing is copied here: the sink
 * (corral_conn_writev() in the daemon) copies small writes into pooled
 * output buffers once, and sends large ones from where they are.
 */
#include "proto/http2/h2_frame.h"

#include <assert.h>
#include <string.h>

/* DATA frames gathered into one call to the sink at most: each takes a
 * header and, at worst, every buffer of the caller's list. */
#define H2_WRITE_IOV_MAX 64

void h2_frame_header_put(uint8_t out[H2_FRAME_HEADER_LEN], uint32_t length, uint8_t type,
                         uint8_t flags, uint32_t stream_id)
{
    assert(length <= H2_MAX_FRAME_SIZE && stream_id <= 0x7fffffff);
    out[0] = (uint8_t)(length >> 16);
    out[1] = (uint8_t)(length >> 8);
    out[2] = (uint8_t)length;
    out[3] = type;
    out[4] = flags;
    out[5] = (uint8_t)(stream_id >> 24);
    out[6] = (uint8_t)(stream_id >> 16);
    out[7] = (uint8_t)(stream_id >> 8);
    out[8] = (uint8_t)stream_id;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void write_one(const struct h2_sink *s, const uint8_t *frame, size_t len)
{
    struct iovec iov = {(void *)frame, len};
    s->write(s->arg, &iov, 1);
}

void h2_frame_write_settings(const struct h2_sink *s, const uint16_t *ids, const uint32_t *values,
                             size_t count)
{
    assert(count <= H2_MAX_SETTINGS_ENTRIES);
    uint8_t frame[H2_FRAME_HEADER_LEN + 6 * H2_MAX_SETTINGS_ENTRIES];
    h2_frame_header_put(frame, (uint32_t)(6 * count), H2_SETTINGS, 0, 0);
    uint8_t *p = frame + H2_FRAME_HEADER_LEN;
    for (size_t i = 0; i < count; i++, p += 6) {
        p[0] = (uint8_t)(ids[i] >> 8);
        p[1] = (uint8_t)ids[i];
        put32(p + 2, values[i]);
    }
    write_one(s, frame, (size_t)(p - frame));
}

void h2_frame_write_settings_ack(const struct h2_sink *s)
{
    uint8_t frame[H2_FRAME_HEADER_LEN];
    h2_frame_header_put(frame, 0, H2_SETTINGS, H2_FLAG_ACK, 0);
    write_one(s, frame, sizeof(frame));
}

void h2_frame_write_ping(const struct h2_sink *s, const uint8_t data[8], bool ack)
{
    uint8_t frame[H2_FRAME_HEADER_LEN + 8];
    h2_frame_header_put(frame, 8, H2_PING, ack ? H2_FLAG_ACK : 0, 0);
    memcpy(frame + H2_FRAME_HEADER_LEN, data, 8);
    write_one(s, frame, sizeof(frame));
}

void h2_frame_write_goaway(const struct h2_sink *s, uint32_t last_stream_id, enum h2_error code,
                           const void *debug, size_t debug_len)
{
    assert(debug_len <= H2_MIN_FRAME_SIZE - 8);
    uint8_t frame[H2_FRAME_HEADER_LEN + 8];
    h2_frame_header_put(frame, (uint32_t)(8 + debug_len), H2_GOAWAY, 0, 0);
    put32(frame + H2_FRAME_HEADER_LEN, last_stream_id & 0x7fffffff);
    put32(frame + H2_FRAME_HEADER_LEN + 4, (uint32_t)code);
    struct iovec iov[2] = {{frame, sizeof(frame)}, {(void *)debug, debug_len}};
    s->write(s->arg, iov, debug_len > 0 ? 2 : 1);
}

void h2_frame_write_rst_stream(const struct h2_sink *s, uint32_t stream_id, enum h2_error code)
{
    assert(stream_id != 0);
    uint8_t frame[H2_FRAME_HEADER_LEN + 4];
    h2_frame_header_put(frame, 4, H2_RST_STREAM, 0, stream_id);
    put32(frame + H2_FRAME_HEADER_LEN, (uint32_t)code);
    write_one(s, frame, sizeof(frame));
}

void h2_frame_write_window_update(const struct h2_sink *s, uint32_t stream_id, uint32_t increment)
{
    assert(increment > 0 && increment <= H2_MAX_WINDOW);
    uint8_t frame[H2_FRAME_HEADER_LEN + 4];
    h2_frame_header_put(frame, 4, H2_WINDOW_UPDATE, 0, stream_id);
    put32(frame + H2_FRAME_HEADER_LEN, increment);
    write_one(s, frame, sizeof(frame));
}

size_t h2_frame_write_data(const struct h2_sink *s, uint32_t stream_id, const struct iovec *iov,
                           int count, bool end_stream, uint32_t max_frame)
{
    assert(stream_id != 0 && max_frame >= H2_MIN_FRAME_SIZE && max_frame <= H2_MAX_FRAME_SIZE);
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += iov[i].iov_len;
    if (total == 0) {
        if (end_stream) {
            uint8_t frame[H2_FRAME_HEADER_LEN];
            h2_frame_header_put(frame, 0, H2_DATA, H2_FLAG_END_STREAM, stream_id);
            write_one(s, frame, sizeof(frame));
            return 1;
        }
        return 0;
    }
    /* Headers for the frames of one call to the sink, and the list. */
    uint8_t heads[H2_WRITE_IOV_MAX / 2][H2_FRAME_HEADER_LEN];
    struct iovec out[H2_WRITE_IOV_MAX];
    int n = 0, frames = 0;
    size_t written = 0;
    int i = 0;
    size_t off = 0; /* into iov[i] */
    while (total > 0) {
        while (off == iov[i].iov_len) { /* empty buffers, or one used up */
            i++;
            off = 0;
        }
        assert(i < count);
        /* The buffers this frame spans: a frame ends early rather than
         * span more than one call to the sink takes. */
        size_t len = total < max_frame ? total : max_frame;
        int spans = 1;
        size_t seen = iov[i].iov_len - off;
        while (seen < len && spans < H2_WRITE_IOV_MAX - 1) {
            seen += iov[i + spans].iov_len;
            spans++;
        }
        if (seen < len)
            len = seen;
        if (n + 1 + spans > H2_WRITE_IOV_MAX || frames == H2_WRITE_IOV_MAX / 2) {
            s->write(s->arg, out, n);
            n = frames = 0;
        }
        assert(1 + spans <= H2_WRITE_IOV_MAX);
        total -= len;
        h2_frame_header_put(heads[frames], (uint32_t)len, H2_DATA,
                            total == 0 && end_stream ? H2_FLAG_END_STREAM : 0, stream_id);
        out[n++] = (struct iovec){heads[frames++], H2_FRAME_HEADER_LEN};
        written++;
        while (len > 0) {
            size_t take = iov[i].iov_len - off;
            if (take > len)
                take = len;
            if (take > 0)
                out[n++] = (struct iovec){(uint8_t *)iov[i].iov_base + off, take};
            off += take;
            len -= take;
            if (off == iov[i].iov_len) {
                i++;
                off = 0;
            }
        }
    }
    if (n > 0)
        s->write(s->arg, out, n);
    return written;
}

void h2_frame_write_headers(const struct h2_sink *s, uint32_t stream_id, const uint8_t *block,
                            size_t len, bool end_stream, uint32_t max_frame)
{
    assert(stream_id != 0 && max_frame >= H2_MIN_FRAME_SIZE && max_frame <= H2_MAX_FRAME_SIZE);
    uint8_t type = H2_HEADERS;
    uint8_t flags = end_stream ? H2_FLAG_END_STREAM : 0;
    do {
        size_t n = len < max_frame ? len : max_frame;
        uint8_t head[H2_FRAME_HEADER_LEN];
        h2_frame_header_put(head, (uint32_t)n, type,
                            (uint8_t)(flags | (n == len ? H2_FLAG_END_HEADERS : 0)), stream_id);
        struct iovec iov[2] = {{head, sizeof(head)}, {(void *)block, n}};
        s->write(s->arg, iov, n > 0 ? 2 : 1);
        block += n;
        len -= n;
        type = H2_CONTINUATION;
        flags = 0;
    } while (len > 0);
}
