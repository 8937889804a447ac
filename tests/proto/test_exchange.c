/*
 * test_exchange.c: the handlers that stand in front of a location's own
 * (rewrite, limit_req and limit_conn): every callback but on_request goes
 * on to the handler the exchange was routed to, with its arguments, and
 * nowhere when there is none or it leaves that callback NULL.
 */
#include "../helpers.h"
#include "proto/exchange.h"
#include "proto/limit.h"
#include "proto/rewrite.h"

#include <string.h>

/* What the handler behind got: a count per callback, and the last bytes. */
static struct {
    int body, body_end, trailers, abort, drain, tunnel;
    const char *data;
    size_t len;
} got;

static void inner_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)ex;
    (void)req;
    (void)data;
    ck_abort_msg("on_request is the front handler's own");
}

static void inner_on_body(struct exchange *ex, const char *data, size_t len)
{
    (void)ex;
    got.body++;
    got.data = data;
    got.len = len;
}

static void inner_on_body_end(struct exchange *ex)
{
    (void)ex;
    got.body_end++;
}

static void inner_on_body_trailers(struct exchange *ex, const char *lines, size_t len)
{
    (void)ex;
    got.trailers++;
    got.data = lines;
    got.len = len;
}

static void inner_on_abort(struct exchange *ex)
{
    (void)ex;
    got.abort++;
}

static void inner_on_drain(struct exchange *ex)
{
    (void)ex;
    got.drain++;
}

static size_t inner_on_tunnel_data(struct exchange *ex, const char *data, size_t len)
{
    (void)ex;
    got.tunnel++;
    got.data = data;
    got.len = len;
    return len - 1; /* the last byte comes again */
}

static const struct http_handler inner = {
    .name = "inner",
    .on_request = inner_on_request,
    .on_body = inner_on_body,
    .on_body_end = inner_on_body_end,
    .on_body_trailers = inner_on_body_trailers,
    .on_abort = inner_on_abort,
    .on_drain = inner_on_drain,
    .on_tunnel_data = inner_on_tunnel_data,
};

/* A handler that takes nothing but the request, as `return` does. */
static const struct http_handler bare = {.name = "bare", .on_request = inner_on_request};

/* Calls every callback of `front` but on_request, the exchange routed to
 * `inner`, then to no handler, then to `bare`. */
static void check_forwards(const struct http_handler *front)
{
    ck_assert_ptr_nonnull(front->on_request);
    ck_assert_ptr_nonnull(front->on_body);
    ck_assert_ptr_nonnull(front->on_body_end);
    ck_assert_ptr_nonnull(front->on_body_trailers);
    ck_assert_ptr_nonnull(front->on_abort);
    ck_assert_ptr_nonnull(front->on_drain);
    ck_assert_ptr_nonnull(front->on_tunnel_data);
    static const char body[] = "hello", trailers[] = "X-Checksum: abc\r\n", tunnel[] = "raw";
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    memset(&got, 0, sizeof(got));
    ex.routed = &inner;
    front->on_body(&ex, body, 5);
    ck_assert_int_eq(got.body, 1);
    ck_assert(got.data == body && got.len == 5);
    front->on_body_trailers(&ex, trailers, 17);
    ck_assert_int_eq(got.trailers, 1);
    ck_assert(got.data == trailers && got.len == 17);
    front->on_body_end(&ex);
    ck_assert_int_eq(got.body_end, 1);
    front->on_drain(&ex);
    ck_assert_int_eq(got.drain, 1);
    ck_assert_uint_eq(front->on_tunnel_data(&ex, tunnel, 3), 2);
    ck_assert_int_eq(got.tunnel, 1);
    ck_assert(got.data == tunnel && got.len == 3);
    front->on_abort(&ex);
    ck_assert_int_eq(got.abort, 1);

    /* Routed nowhere (refused, or not yet), or to a handler without them:
     * nothing goes on, and tunnel bytes are taken. */
    const struct http_handler *nowhere[] = {NULL, &bare};
    for (int i = 0; i < 2; i++) {
        ex.routed = nowhere[i];
        front->on_body(&ex, body, 5);
        front->on_body_trailers(&ex, trailers, 17);
        front->on_body_end(&ex);
        front->on_drain(&ex);
        ck_assert_uint_eq(front->on_tunnel_data(&ex, tunnel, 3), 3);
        front->on_abort(&ex);
    }
    ck_assert(got.body == 1 && got.trailers == 1 && got.body_end == 1 && got.drain == 1 &&
              got.tunnel == 1 && got.abort == 1);
}

START_TEST(rewrite_forwards_every_callback)
{
    check_forwards(&http_rewrite_handler);
}
END_TEST

START_TEST(limits_forward_every_callback)
{
    check_forwards(&limit_handler);
    struct http_handler before;
    limit_handler_for(&inner, &before);
    check_forwards(&before);
}
END_TEST

/* Limits before a handler that takes no body leave the body's callbacks
 * out as it does, so that a framer drops the body (and sends no 100
 * Continue); on_abort stays, for what the limits hold. */
START_TEST(limits_take_what_their_handler_takes)
{
    struct http_handler before;
    limit_handler_for(&bare, &before);
    ck_assert_ptr_eq(before.on_request, limit_handler.on_request);
    ck_assert_ptr_null(before.on_body);
    ck_assert_ptr_null(before.on_body_end);
    ck_assert_ptr_null(before.on_body_trailers);
    ck_assert_ptr_null(before.on_drain);
    ck_assert_ptr_null(before.on_tunnel_data);
    ck_assert_ptr_nonnull(before.on_abort);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/exchange");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, rewrite_forwards_every_callback);
    tcase_add_test(tc, limits_forward_every_callback);
    tcase_add_test(tc, limits_take_what_their_handler_takes);
    suite_add_tcase(suite, tc);
    return suite;
}
