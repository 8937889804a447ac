/*
 * test_filter.c: the response filter chain (exchange.h), without sockets:
 * a fake framer records the head, body and end that reach it, through
 * filters turned on in another order than theirs, a filter that steps
 * aside, body filters that change and hold back the body, and flushes.
 */
#include "../helpers.h"
#include "fake_framer.h"
#include "proto/modules.h"
#include "proto/policy/add_header.h"
#include "proto/policy/error_page.h"
#include "proto/http/module.h"
#include "proto/http/exchange.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- filters */

/* Header filters that each add a line naming themselves and the status
 * they saw; `first` also turns the status 200 into 203. */
static void add_line(struct exchange *ex, const struct exchange_filter *self,
                     const struct exchange_head *head, unsigned status)
{
    char lines[256];
    int n = snprintf(lines, sizeof(lines), "%.*sX-%s: %u\r\n", (int)head->headers_len,
                     head->headers, self->name, head->status);
    ck_assert_int_gt(n, 0);
    ck_assert_int_lt(n, (int)sizeof(lines));
    struct exchange_head h = *head;
    h.status = status;
    h.headers = lines;
    h.headers_len = (size_t)n;
    exchange_filter_begin_next(ex, self, &h);
}

static void first_begin(struct exchange *ex, const struct exchange_filter *self,
                        const struct exchange_head *head)
{
    add_line(ex, self, head, head->status == 200 ? 203 : head->status);
}

static void second_begin(struct exchange *ex, const struct exchange_filter *self,
                         const struct exchange_head *head)
{
    add_line(ex, self, head, head->status);
}

static const struct exchange_filter first = {.name = "First", .order = 2, .begin = first_begin};
static const struct exchange_filter second = {.name = "Second", .order = 5, .begin = second_begin};

/* A body filter that upper-cases the body and stamps the trailers. */
static void upper_write(struct exchange *ex, const struct exchange_filter *self, const char *data,
                        size_t len)
{
    char out[64];
    ck_assert_uint_le(len, sizeof(out));
    for (size_t i = 0; i < len; i++)
        out[i] = (char)toupper((unsigned char)data[i]);
    exchange_filter_write_next(ex, self, out, len);
}

static void upper_end(struct exchange *ex, const struct exchange_filter *self, const char *trailers,
                      size_t len)
{
    char out[128];
    int n = snprintf(out, sizeof(out), "%.*sX-Upper: 1\r\n", (int)len,
                     trailers != NULL ? trailers : "");
    ck_assert_int_gt(n, 0);
    exchange_filter_end_next(ex, self, out, (size_t)n);
}

static const struct exchange_filter upper = {
    .name = "upper", .order = 3, .write = upper_write, .end = upper_end};

/* A body filter that holds the body back and writes it whole, framed in
 * brackets, at the end: the end passes on after it. */
static char held[128];
static size_t held_len;

static void hold_write(struct exchange *ex, const struct exchange_filter *self, const char *data,
                       size_t len)
{
    (void)ex, (void)self;
    ck_assert_uint_lt(held_len + len, sizeof(held));
    memcpy(held + held_len, data, len);
    held_len += len;
}

static void hold_end(struct exchange *ex, const struct exchange_filter *self, const char *trailers,
                     size_t len)
{
    exchange_filter_write_next(ex, self, "[", 1);
    exchange_filter_write_next(ex, self, held, held_len);
    exchange_filter_write_next(ex, self, "]", 1);
    held_len = 0;
    exchange_filter_end_next(ex, self, trailers, len);
}

static const struct exchange_filter hold = {
    .name = "hold", .order = 6, .write = hold_write, .end = hold_end};

/* A header filter that decides from the head that it has nothing to do
 * with this response: it turns its body half off and steps aside. */
static int aside_bodies;

static void aside_begin(struct exchange *ex, const struct exchange_filter *self,
                        const struct exchange_head *head)
{
    if (head->status != 200)
        exchange_remove_filter(ex, self);
    exchange_filter_begin_next(ex, self, head);
}

static void aside_write(struct exchange *ex, const struct exchange_filter *self, const char *data,
                        size_t len)
{
    aside_bodies++;
    exchange_filter_write_next(ex, self, data, len);
}

static const struct exchange_filter aside = {
    .name = "aside", .order = 1, .begin = aside_begin, .write = aside_write};

/* ------------------------------------------------------------------ tests */

/* With no filter the response goes to the framer as it is, and may be
 * spliced. */
START_TEST(no_filter_goes_straight)
{
    struct exchange ex = fake_exchange();
    exchange_begin(&ex, 200, "A: b\r\n", 6, 5);
    exchange_write(&ex, "hello", 5);
    ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), 0);
    exchange_end(&ex);
    ck_assert_uint_eq(fake_seen.status, 200);
    ck_assert_str_eq(fake_seen.headers, "A: b\r\n");
    ck_assert_int_eq(fake_seen.content_length, 5);
    ck_assert_int_eq(fake_seen.body_len, 5);
    ck_assert_int_eq(fake_seen.splices, 1);
    ck_assert_int_eq(fake_seen.ends, 1);
}
END_TEST

/* Header filters run in their places' order, whatever order they were
 * turned on in; each sees what the one before made of the head. */
START_TEST(header_filters_run_in_order)
{
    struct exchange ex = fake_exchange();
    exchange_add_filter(&ex, &second);
    exchange_add_filter(&ex, &first);
    ck_assert(exchange_has_filter(&ex, 2));
    ck_assert(exchange_has_filter(&ex, 5));
    ck_assert_int_eq(ex.body_filters, 0);
    exchange_begin(&ex, 200, "A: b\r\n", 6, -1);
    ck_assert_uint_eq(fake_seen.status, 203);
    ck_assert_str_eq(fake_seen.headers, "A: b\r\nX-First: 200\r\nX-Second: 203\r\n");
    ck_assert_int_eq(fake_seen.content_length, -1);
    /* Header filters alone leave the body path alone: splice as before. */
    exchange_write(&ex, "x", 1);
    ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), 0);
    exchange_end(&ex);
    ck_assert_int_eq(fake_seen.body_len, 1);
    ck_assert_int_eq(fake_seen.ends, 1);
    /* Off again: straight to the framer. */
    exchange_remove_filter(&ex, &first);
    exchange_remove_filter(&ex, &second);
    ck_assert_int_eq(ex.head_filters, 0);
    ck_assert(!exchange_has_filter(&ex, 2));
}
END_TEST

/* The modules' filters take their places in the order of the list of
 * modules, each its own, within the chain. */
START_TEST(module_order_is_documented)
{
    unsigned places = 0;
    for (size_t i = 0; i < modules_count; i++) {
        const struct exchange_filter *f = modules_list[i]->filter;
        if (f == NULL)
            continue;
        ck_assert_uint_eq(f->order, places);
        places++;
    }
    ck_assert_uint_le(places, EXCHANGE_FILTER_MAX);
    ck_assert_uint_lt(error_page_module.filter->order, add_header_module.filter->order);
    /* add_header's filter is on exactly while the exchange has rules. */
    struct exchange ex = fake_exchange();
    static const struct http_add_headers none = {.count = 0};
    add_header_set_rules(&ex, &none);
    ck_assert(exchange_has_filter(&ex, add_header_module.filter->order));
    exchange_respond(&ex, 404, "", "gone", 4);
    ck_assert_uint_eq(fake_seen.status, 404);
    ck_assert_str_eq(fake_seen.headers, "");
    ck_assert_str_eq(fake_seen.body, "gone");
    add_header_release(&ex);
    ck_assert(!exchange_has_filter(&ex, add_header_module.filter->order));
    ck_assert_int_eq(ex.head_filters, 0);
}
END_TEST

/* A filter that has nothing to do with a response turns itself off from
 * its header filter: the body goes past it, and may be spliced again. */
START_TEST(filter_steps_aside)
{
    struct exchange ex = fake_exchange();
    aside_bodies = 0;
    exchange_add_filter(&ex, &aside);
    ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), -EOPNOTSUPP);
    exchange_begin(&ex, 304, "", 0, 0);
    ck_assert_uint_eq(fake_seen.status, 304);
    ck_assert_int_eq(ex.head_filters, 0);
    ck_assert_int_eq(ex.body_filters, 0);
    exchange_write(&ex, "abc", 3);
    ck_assert_int_eq(aside_bodies, 0);
    ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), 0);
    exchange_end(&ex);
    ck_assert_int_eq(fake_seen.ends, 1);
    /* And one that keeps on sees the body. */
    ex = fake_exchange();
    exchange_add_filter(&ex, &aside);
    exchange_begin(&ex, 200, "", 0, 3);
    exchange_write(&ex, "abc", 3);
    ck_assert_int_eq(aside_bodies, 1);
    ck_assert_int_eq(fake_seen.body_len, 3);
}
END_TEST

/* Body filters change each piece in turn (writev's buffers one by one),
 * may hold pieces back until the end, and pass the end and its trailers
 * on after what they held. */
START_TEST(body_filters_transform_and_pass_the_end)
{
    struct exchange ex = fake_exchange();
    held_len = 0;
    exchange_add_filter(&ex, &hold);
    exchange_add_filter(&ex, &upper);
    ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), -EOPNOTSUPP);
    ck_assert_int_eq(fake_seen.splices, 0);
    exchange_begin(&ex, 200, "", 0, -1); /* no header filter: straight on */
    ck_assert_uint_eq(fake_seen.status, 200);
    exchange_write(&ex, "ab", 2);
    exchange_write(&ex, "", 0);
    struct iovec iov[3] = {{(void *)"cd", 2}, {(void *)"", 0}, {(void *)"ef", 2}};
    exchange_writev(&ex, iov, 3);
    ck_assert_int_eq(fake_seen.writes, 0); /* all held back */
    exchange_end_trailers(&ex, "T: 1\r\n", 6);
    fake_seen.body[fake_seen.body_len] = '\0';
    ck_assert_str_eq(fake_seen.body, "[ABCDEF]");
    ck_assert_str_eq(fake_seen.trailers, "T: 1\r\nX-Upper: 1\r\n");
    ck_assert_int_eq(fake_seen.ends, 1);
    /* A plain end passes too, with the trailers a filter adds. */
    ex = fake_exchange();
    exchange_add_filter(&ex, &upper);
    exchange_write(&ex, "xy", 2);
    exchange_end(&ex);
    ck_assert_int_eq(fake_seen.body_len, 2);
    ck_assert_int_eq(memcmp(fake_seen.body, "XY", 2), 0);
    ck_assert_str_eq(fake_seen.trailers, "X-Upper: 1\r\n");
    ck_assert_int_eq(fake_seen.ends, 1);
}
END_TEST

/* A filter that holds the body back until a flush or the end, then
 * writes it on framed in braces; and one that only counts flushes. */
static char kept[64];
static size_t kept_len;
static int counted_flushes;

static void keep_write(struct exchange *ex, const struct exchange_filter *self, const char *data,
                       size_t len)
{
    (void)ex, (void)self;
    ck_assert_uint_lt(kept_len + len, sizeof(kept));
    memcpy(kept + kept_len, data, len);
    kept_len += len;
}

static void keep_flush(struct exchange *ex, const struct exchange_filter *self)
{
    exchange_filter_write_next(ex, self, "{", 1);
    exchange_filter_write_next(ex, self, kept, kept_len);
    exchange_filter_write_next(ex, self, "}", 1);
    kept_len = 0;
    exchange_filter_flush_next(ex, self);
}

static void count_flush(struct exchange *ex, const struct exchange_filter *self)
{
    counted_flushes++;
    exchange_filter_flush_next(ex, self);
}

static const struct exchange_filter keep = {
    .name = "keep", .order = 2, .write = keep_write, .flush = keep_flush};
static const struct exchange_filter counter = {.name = "counter", .order = 7, .flush = count_flush};

/* A flush goes through the filters that have one, in order, past those
 * that have none (upper, after keep), and ends there; with none that
 * wants it, it does nothing and the producer is told not to ask. */
START_TEST(flush_reaches_the_filters_that_hold)
{
    struct exchange ex = fake_exchange();
    kept_len = 0;
    counted_flushes = 0;
    ck_assert(!exchange_wants_flush(&ex));
    exchange_flush(&ex);
    exchange_add_filter(&ex, &upper);
    ck_assert(!exchange_wants_flush(&ex));
    exchange_add_filter(&ex, &keep);
    exchange_add_filter(&ex, &counter);
    ck_assert(exchange_wants_flush(&ex));
    exchange_begin(&ex, 200, "", 0, -1);
    exchange_write(&ex, "ab", 2);
    exchange_write(&ex, "c", 1);
    ck_assert_uint_eq(fake_seen.body_len, 0);
    exchange_flush(&ex);
    ck_assert_str_eq(fake_seen.body, "{ABC}");
    ck_assert_int_eq(counted_flushes, 1);
    exchange_flush(&ex); /* nothing new: an empty pair, and the flush goes on */
    ck_assert_str_eq(fake_seen.body, "{ABC}{}");
    ck_assert_int_eq(counted_flushes, 2);
    exchange_remove_filter(&ex, &keep);
    exchange_remove_filter(&ex, &counter);
    ck_assert(!exchange_wants_flush(&ex));
    exchange_flush(&ex);
    ck_assert_int_eq(counted_flushes, 2);
}
END_TEST

/* A drain (exchange_drained()) goes to each body filter that has a
 * `drain`, in order, then to the handler, unless one of them says it
 * still holds output: then neither a later filter nor the handler hears
 * of it.  With no such filter it is the handler's alone. */
static int drains_seen, handler_drains;
static bool holding;

static bool hold_drain(struct exchange *ex, const struct exchange_filter *self)
{
    (void)ex, (void)self;
    drains_seen++;
    return !holding;
}

static bool later_drain(struct exchange *ex, const struct exchange_filter *self)
{
    (void)ex, (void)self;
    drains_seen += 100;
    return true;
}

static void handler_on_drain(struct exchange *ex)
{
    (void)ex;
    handler_drains++;
}

static const struct exchange_filter holder = {
    .name = "holder", .order = 2, .write = keep_write, .drain = hold_drain};
static const struct exchange_filter later = {
    .name = "later", .order = 4, .write = keep_write, .drain = later_drain};

START_TEST(drain_waits_for_the_filters_that_hold)
{
    static const struct http_handler handler = {.name = "h", .on_drain = handler_on_drain};
    struct exchange ex = fake_exchange();
    drains_seen = handler_drains = 0;
    exchange_drained(&ex, &handler);
    ck_assert_int_eq(handler_drains, 1);
    exchange_drained(&ex, NULL);      /* a handler without one */
    exchange_add_filter(&ex, &upper); /* a body filter without a drain */
    exchange_add_filter(&ex, &later);
    exchange_add_filter(&ex, &holder);
    holding = true;
    exchange_drained(&ex, &handler);
    ck_assert_int_eq(drains_seen, 1);
    ck_assert_int_eq(handler_drains, 1);
    holding = false;
    exchange_drained(&ex, &handler);
    ck_assert_int_eq(drains_seen, 102);
    ck_assert_int_eq(handler_drains, 2);
}
END_TEST

/* An observer (a `sent` only, as the access log's byte count) wants no
 * body: the body is still spliced past it, and it is told each byte the
 * framer took, written or spliced, as the body filters before it made
 * them; turned off, it hears nothing more. */
static uint64_t observed;

static void observe_sent(struct exchange *ex, const struct exchange_filter *self, uint64_t bytes)
{
    (void)ex, (void)self;
    observed += bytes;
}

static const struct exchange_filter observer = {
    .name = "observer", .order = 7, .sent = observe_sent};

START_TEST(observer_counts_without_taking_the_body)
{
    struct exchange ex = fake_exchange();
    observed = 0;
    held_len = 0;
    exchange_add_filter(&ex, &observer);
    ck_assert_int_eq(ex.head_filters, 0);
    ck_assert_int_eq(ex.body_filters, 0);
    exchange_begin(&ex, 200, "", 0, 15);
    exchange_write(&ex, "hello", 5);
    ck_assert_uint_eq(observed, 5);
    ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), 0);
    ck_assert_int_eq(fake_seen.splices, 1);
    ck_assert_uint_eq(observed, 15);
    /* Behind a body filter it counts what reached the framer: the held
     * body and its two brackets, at the end. */
    ex = fake_exchange();
    observed = 0;
    exchange_add_filter(&ex, &observer);
    exchange_add_filter(&ex, &hold);
    exchange_begin(&ex, 200, "", 0, -1);
    exchange_write(&ex, "abc", 3);
    ck_assert_uint_eq(observed, 0);
    exchange_end(&ex);
    ck_assert_str_eq(fake_seen.body, "[abc]");
    ck_assert_uint_eq(observed, 5);
    exchange_remove_filter(&ex, &observer);
    ck_assert_int_eq(ex.sent_filters, 0);
    exchange_remove_filter(&ex, &hold);
    exchange_write(&ex, "x", 1);
    ck_assert_uint_eq(observed, 5);
}
END_TEST

Suite *test_suite(void)
{
    modules_init(); /* the router's steps and the filters' places, before the forks */
    Suite *suite = suite_create("proto/filter");
    TCase *tc = tcase_create("chain");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, no_filter_goes_straight);
    tcase_add_test(tc, header_filters_run_in_order);
    tcase_add_test(tc, module_order_is_documented);
    tcase_add_test(tc, filter_steps_aside);
    tcase_add_test(tc, body_filters_transform_and_pass_the_end);
    tcase_add_test(tc, flush_reaches_the_filters_that_hold);
    tcase_add_test(tc, observer_counts_without_taking_the_body);
    tcase_add_test(tc, drain_waits_for_the_filters_that_hold);
    suite_add_tcase(suite, tc);
    return suite;
}
