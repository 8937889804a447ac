/*
 * static_send.c: a static file's body (static_send.h).  Each range goes by
 * exchange_sendfile() when the framer can (plain HTTP/1.1, no body
 * filter), else the file is read with pread() at 64-bit offsets into one
 * buffer per response and written through exchange_write(), so that body
 * filters see every byte; the framers count both.  Output beyond the
 * connection's watermark waits for on_drain, and a turn of the loop sends
 * at most SEND_TURN_MAX bytes before posting the rest, so that one fast
 * client of a large file does not hold the worker.  A small body goes
 * with the head in one write instead (send_small()).
 */
#include "proto/static/static_send.h"

#include "proto/http/block_pool.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEND_BUF      (64 * 1024)
#define SEND_TURN_MAX (1024 * 1024)

struct static_send {
    struct exchange *ex;
    struct static_file file;
    struct static_range ranges[STATIC_RANGES_MAX];
    size_t count, cur; /* count 0: the whole file as ranges[0] */
    bool multipart;
    bool part_started; /* the current part's head is written */
    uint64_t off;      /* the next byte of the current range */
    uint64_t size;
    uint64_t base; /* the body's first byte in the file */
    const char *type;
    char boundary[33];
    bool in_pump, posted;
    bool sendfile;  /* try exchange_sendfile() for each range */
    bool in_flight; /* a sendfile is under way: its callback is to come */
    bool aborted;   /* on_abort came: the exchange is gone */
    bool over;      /* ended or cut off by us: only freeing is left */
    char *buf;      /* SEND_BUF bytes or more, taken when a range is first copied */
    size_t buf_cap; /* what `buf` holds (block_pool.h) */
};

/* A part's head: its boundary, type and range. */
static int part_head(char *out, size_t cap, const char *boundary, const char *type,
                     const struct static_range *r, uint64_t size)
{
    return snprintf(out, cap,
                    "\r\n--%s\r\nContent-Type: %s\r\nContent-Range: bytes %llu-%llu/%llu\r\n\r\n",
                    boundary, type, (unsigned long long)r->first, (unsigned long long)r->last,
                    (unsigned long long)size);
}

static int closing(char *out, size_t cap, const char *boundary)
{
    return snprintf(out, cap, "\r\n--%s--\r\n", boundary);
}

uint64_t static_send_length(const struct static_send_plan *plan)
{
    if (plan->count == 0)
        return plan->size;
    if (plan->count == 1)
        return plan->ranges[0].last - plan->ranges[0].first + 1;
    uint64_t total = (uint64_t)closing(NULL, 0, plan->boundary);
    for (size_t i = 0; i < plan->count; i++) {
        const struct static_range *r = &plan->ranges[i];
        total += (uint64_t)part_head(NULL, 0, plan->boundary, plan->type, r, plan->size) +
                 (r->last - r->first + 1);
    }
    return total;
}

/* The read buffer: one the worker kept from an earlier response, else a
 * new one (given back to the worker's pool with the response). */
static char *take_buffer(size_t *cap)
{
    char *buf = block_pool_take(SEND_BUF, cap);
    if (buf == NULL && (buf = malloc(SEND_BUF)) != NULL)
        *cap = SEND_BUF;
    return buf;
}

static void send_free(struct static_send *s)
{
    static_file_close(&s->file);
    block_pool_put(s->buf, s->buf_cap);
    free(s);
}

/* Frees `s` once nobody will call it again: not inside its pump, no post
 * pending, and the exchange ended or gone. */
static void maybe_free(struct static_send *s)
{
    if (!s->in_pump && !s->posted && !s->in_flight && (s->aborted || s->over))
        send_free(s);
}

static void cut_off(struct static_send *s)
{
    static_file_close(&s->file);
    s->over = true;
    /* The on_abort that follows finds nothing: `s` goes with this pump. */
    exchange_set_data(s->ex, NULL);
    exchange_abort(s->ex);
}

static void finish(struct static_send *s)
{
    struct exchange *ex = s->ex;
    if (s->multipart) {
        char tail[48];
        int n = closing(tail, sizeof(tail), s->boundary);
        exchange_write(ex, tail, (size_t)n);
    }
    s->over = true;
    exchange_set_data(ex, NULL);
    exchange_end(ex);
}

static void posted(void *arg);
static void pump(struct static_send *s);

/* A range sent by the framer from the file: on to the next, unless it
 * stopped short (the file shrank, or the client went). */
static void range_sent(struct exchange *ex, uint64_t moved, int error, void *arg)
{
    (void)ex;
    struct static_send *s = arg;
    s->in_flight = false;
    if (s->aborted || s->over) {
        maybe_free(s);
        return;
    }
    s->off += moved;
    if (error != 0 || s->off <= s->ranges[s->cur].last) {
        s->in_pump = true; /* cut_off() must not free `s` under it */
        cut_off(s);
        s->in_pump = false;
        maybe_free(s);
        return;
    }
    pump(s);
}

/* Writes what the client takes, up to SEND_TURN_MAX bytes this turn. */
static void pump(struct static_send *s)
{
    struct exchange *ex = s->ex;
    size_t sent = 0;
    s->in_pump = true;
    while (!s->aborted && !s->over && !exchange_backed_up(ex)) {
        if (s->cur == s->count) {
            finish(s);
            break;
        }
        const struct static_range *r = &s->ranges[s->cur];
        if (s->multipart && !s->part_started) {
            char head[256];
            int n = part_head(head, sizeof(head), s->boundary, s->type, r, s->size);
            if (n < 0 || (size_t)n >= sizeof(head)) {
                cut_off(s);
                break;
            }
            exchange_write(ex, head, (size_t)n);
            s->part_started = true;
            s->off = r->first;
        }
        if (s->off > r->last) {
            s->cur++;
            s->part_started = false;
            if (s->cur < s->count)
                s->off = s->ranges[s->cur].first;
            continue;
        }
        if (sent >= SEND_TURN_MAX) {
            if (corral_loop_post(exchange_loop(ex), posted, s) == 0) {
                s->posted = true;
                break;
            }
            sent = 0; /* no memory to wait with: go on now */
        }
        uint64_t left = r->last - s->off + 1;
        if (s->sendfile) {
            if (exchange_sendfile(ex, s->file.fd, s->base + s->off, left, range_sent, s) == 0) {
                s->in_flight = true;
                break;
            }
            s->sendfile = false; /* the framer cannot: copy the rest */
        }
        if (s->buf == NULL && (s->buf = take_buffer(&s->buf_cap)) == NULL) {
            cut_off(s);
            break;
        }
        size_t want = left < SEND_BUF ? (size_t)left : SEND_BUF;
        ssize_t n;
        do
            n = pread(s->file.fd, s->buf, want, (off_t)(s->base + s->off));
        while (n == -1 && errno == EINTR);
        if (n <= 0) {
            /* The file shrank (or failed) under the length announced:
             * nothing else may stand in for its bytes. */
            cut_off(s);
            break;
        }
        s->off += (uint64_t)n;
        sent += (size_t)n;
        exchange_write(ex, s->buf, (size_t)n);
    }
    s->in_pump = false;
    maybe_free(s);
}

static void posted(void *arg)
{
    struct static_send *s = arg;
    s->posted = false;
    if (s->aborted || s->over) {
        maybe_free(s);
        return;
    }
    pump(s);
}

/* A small body, a whole file or one range of at most STATIC_FILE_SMALL
 * bytes, goes at once: from the bytes the descriptor cache keeps, else
 * read, then written after the head, so that the framer sends both in
 * one write (sendfile would cost a second call, and its own set-up), and
 * nothing is kept for later.  Returns false for a larger one. */
static bool send_small(struct exchange *ex, struct static_file *file,
                       const struct static_send_plan *plan)
{
    uint64_t len = static_send_length(plan);
    if (plan->count > 1 || len > STATIC_FILE_SMALL)
        return false;
    uint64_t first = plan->count == 1 ? plan->ranges[0].first : 0;
    const char *kept = plan->base == 0 ? static_file_small(file) : NULL;
    char buf[STATIC_FILE_SMALL];
    const char *data = kept != NULL ? kept + first : buf;
    if (kept == NULL) {
        ssize_t n;
        do
            n = pread(file->fd, buf, (size_t)len, (off_t)(plan->base + first));
        while (n == -1 && errno == EINTR);
        if (n != (ssize_t)len) {
            /* Shrunk (or failed) under the length announced. */
            static_file_close(file);
            exchange_abort(ex);
            return true;
        }
    }
    exchange_write(ex, data, (size_t)len);
    static_file_close(file);
    exchange_end(ex);
    return true;
}

void static_send_start(struct exchange *ex, struct static_file *file,
                       const struct static_send_plan *plan)
{
    if (send_small(ex, file, plan))
        return;
    struct static_send *s = malloc(sizeof(*s));
    if (s == NULL) {
        static_file_close(file);
        exchange_abort(ex);
        return;
    }
    s->ex = ex;
    s->file = *file;
    s->size = plan->size;
    s->base = plan->base;
    s->type = plan->type;
    s->multipart = plan->count > 1;
    if (plan->count == 0) {
        s->ranges[0] = (struct static_range){0, plan->size - 1};
        s->count = 1;
    } else {
        memcpy(s->ranges, plan->ranges, plan->count * sizeof(*s->ranges));
        s->count = plan->count;
    }
    snprintf(s->boundary, sizeof(s->boundary), "%s", plan->boundary != NULL ? plan->boundary : "");
    s->cur = 0;
    s->off = s->ranges[0].first;
    s->part_started = false;
    s->in_pump = s->posted = s->aborted = s->over = s->in_flight = false;
    s->sendfile = plan->sendfile;
    s->buf = NULL;
    s->buf_cap = 0;
    exchange_set_data(ex, s);
    pump(s);
}

void static_send_on_drain(struct exchange *ex)
{
    struct static_send *s = exchange_data(ex);
    if (s != NULL && !s->in_pump && !s->in_flight && !s->over && !s->aborted)
        pump(s);
}

void static_send_on_abort(struct exchange *ex)
{
    struct static_send *s = exchange_data(ex);
    if (s == NULL)
        return;
    exchange_set_data(ex, NULL);
    s->aborted = true;
    maybe_free(s);
}
