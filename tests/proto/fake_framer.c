/*
 * fake_framer.c: the fake framer of fake_framer.h.
 */
#include "fake_framer.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

struct fake_seen fake_seen;
static size_t body_cap;

static void fake_begin(struct exchange *ex, unsigned status, const char *headers, size_t len,
                       int64_t content_length, struct http_str codings)
{
    (void)ex, (void)codings;
    fake_seen.status = status;
    fake_seen.begins++;
    ck_assert_uint_lt(len, sizeof(fake_seen.headers));
    memcpy(fake_seen.headers, headers, len);
    fake_seen.headers[len] = '\0';
    fake_seen.content_length = content_length;
}

static void fake_write(struct exchange *ex, const char *data, size_t len)
{
    if (len == 0)
        return;
    exchange_body_sent(ex, len);
    if (fake_seen.body_len + len >= body_cap) {
        while (fake_seen.body_len + len >= body_cap)
            body_cap *= 2;
        fake_seen.body = realloc(fake_seen.body, body_cap);
        ck_assert_ptr_nonnull(fake_seen.body);
    }
    memcpy(fake_seen.body + fake_seen.body_len, data, len);
    fake_seen.body_len += len;
    fake_seen.body[fake_seen.body_len] = '\0';
    fake_seen.writes++;
}

static void fake_writev(struct exchange *ex, const struct iovec *iov, int count)
{
    for (int i = 0; i < count; i++)
        fake_write(ex, iov[i].iov_base, iov[i].iov_len);
}

static void fake_end(struct exchange *ex, const char *trailers, size_t len)
{
    (void)ex;
    ck_assert_uint_lt(len, sizeof(fake_seen.trailers));
    memcpy(fake_seen.trailers, trailers != NULL ? trailers : "", len);
    fake_seen.trailers[len] = '\0';
    fake_seen.ends++;
}

static void fake_abort(struct exchange *ex)
{
    (void)ex;
    fake_seen.aborts++;
}

static int fake_splice(struct exchange *ex, corral_conn *from, uint64_t max, exchange_splice_cb cb,
                       void *arg)
{
    (void)from, (void)cb, (void)arg;
    fake_seen.splices++;
    exchange_body_sent(ex, max); /* as if it moved all it was asked to */
    return 0;
}

static bool fake_started(const struct exchange *ex)
{
    (void)ex;
    return fake_seen.status != 0;
}

static bool fake_backed_up(const struct exchange *ex)
{
    (void)ex;
    return fake_seen.backs_up_at != 0 && fake_seen.body_len >= fake_seen.backs_up_at;
}

static void fake_set_handler(struct exchange *ex, const struct http_handler *handler)
{
    (void)ex, (void)handler;
}

static void fake_routed(struct exchange *ex, const struct http_request *req)
{
    (void)ex, (void)req;
}

const struct exchange_ops fake_framer_ops = {
    .response_started = fake_started,
    .begin = fake_begin,
    .write = fake_write,
    .writev = fake_writev,
    .end = fake_end,
    .abort = fake_abort,
    .splice = fake_splice,
    .backed_up = fake_backed_up,
    .set_handler = fake_set_handler,
    .routed = fake_routed,
};

struct exchange fake_exchange(void)
{
    free(fake_seen.body);
    memset(&fake_seen, 0, sizeof(fake_seen));
    body_cap = 256;
    fake_seen.body = calloc(1, body_cap);
    ck_assert_ptr_nonnull(fake_seen.body);
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_framer_ops;
    return ex;
}
