/*
 * test_static_send.c: the body of a static file's response
 * (proto/static/static_send.c), without sockets: a fake framer that
 * records what reaches it, with and without a sendfile slot.  The file
 * goes by exchange_sendfile() when the framer can and no body filter is
 * on, else through exchange_write() (and so through the filter); output
 * that backs up waits for on_drain; a file shorter than announced, read
 * or sent, cuts the exchange off with nothing in its stead; a small body
 * is written at once, from the bytes the descriptor cache keeps.
 */
#include "../helpers.h"
#include "proto/http/block_pool.h"
#include "proto/http/exchange.h"
#include "proto/modules.h"
#include "proto/static/static_send.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ fake framer */

static struct {
    char body[1 << 20];
    size_t body_len;
    int writes, ends, aborts;
    bool backed_up;
    bool back_up_on_write; /* each write fills the output */
    bool can_sendfile;
    int sendfiles;
    uint64_t sf_offset, sf_len;
    exchange_splice_cb sf_cb;
    void *sf_arg;
} seen;

static void fake_write(struct exchange *ex, const char *data, size_t len)
{
    (void)ex;
    ck_assert_uint_le(seen.body_len + len, sizeof(seen.body));
    memcpy(seen.body + seen.body_len, data, len);
    seen.body_len += len;
    seen.writes++;
    if (seen.back_up_on_write)
        seen.backed_up = true;
}

static void fake_writev(struct exchange *ex, const struct iovec *iov, int count)
{
    for (int i = 0; i < count; i++)
        fake_write(ex, iov[i].iov_base, iov[i].iov_len);
}

static void fake_end(struct exchange *ex, const char *trailers, size_t len)
{
    (void)ex, (void)trailers, (void)len;
    seen.ends++;
}

static void fake_abort(struct exchange *ex)
{
    (void)ex;
    seen.aborts++;
}

static bool fake_backed_up(const struct exchange *ex)
{
    (void)ex;
    return seen.backed_up;
}

static int fake_sendfile(struct exchange *ex, int fd, uint64_t offset, uint64_t len,
                         exchange_splice_cb cb, void *arg)
{
    (void)ex;
    if (!seen.can_sendfile)
        return -EOPNOTSUPP;
    ck_assert_int_ge(fcntl(fd, F_GETFD), 0);
    ck_assert_ptr_null(seen.sf_cb); /* one at a time */
    seen.sendfiles++;
    seen.sf_offset = offset;
    seen.sf_len = len;
    seen.sf_cb = cb;
    seen.sf_arg = arg;
    return 0;
}

static const struct exchange_ops fake_ops = {
    .write = fake_write,
    .writev = fake_writev,
    .end = fake_end,
    .abort = fake_abort,
    .backed_up = fake_backed_up,
    .sendfile = fake_sendfile,
};

/* The framer finishes the send it was given: `moved` bytes, then the
 * callback, as the loop would run it. */
static void finish_sendfile(struct exchange *ex, uint64_t moved, int error)
{
    exchange_splice_cb cb = seen.sf_cb;
    ck_assert_ptr_nonnull(cb);
    seen.sf_cb = NULL;
    cb(ex, moved, error, seen.sf_arg);
}

/* A body filter that passes everything on, counting. */
static int filtered;

static void count_write(struct exchange *ex, const struct exchange_filter *self, const char *data,
                        size_t len)
{
    filtered += (int)len;
    exchange_filter_write_next(ex, self, data, len);
}

static const struct exchange_filter counter = {.name = "counter", .order = 7, .write = count_write};

/* ---------------------------------------------------------------- helpers */

static char path[64];
static char content[300000];

static void setup(void)
{
    memset(&seen, 0, sizeof(seen));
    filtered = 0;
    snprintf(path, sizeof(path), "/tmp/corral-send-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    for (size_t i = 0; i < sizeof(content); i++)
        content[i] = (char)('a' + i * 7 % 26);
    ck_assert_int_eq(write(fd, content, sizeof(content)), (ssize_t)sizeof(content));
    close(fd);
}

static void teardown(void)
{
    unlink(path);
}

static struct exchange fresh(void)
{
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    return ex;
}

static void start(struct exchange *ex, const struct static_range *ranges, size_t count,
                  uint64_t size)
{
    struct static_file f;
    ck_assert_int_eq(static_file_open(path, false, NULL, 0, &f), 0);
    struct static_send_plan plan = {.size = size,
                                    .ranges = ranges,
                                    .count = count,
                                    .type = "text/plain",
                                    .boundary = "B",
                                    .sendfile = true};
    static_send_start(ex, &f, &plan);
}

/* ------------------------------------------------------------------ cases */

START_TEST(whole_file_by_sendfile)
{
    seen.can_sendfile = true;
    struct exchange ex = fresh();
    int fds = test_fd_count();
    start(&ex, NULL, 0, sizeof(content));
    ck_assert_int_eq(seen.sendfiles, 1);
    ck_assert_uint_eq(seen.sf_offset, 0);
    ck_assert_uint_eq(seen.sf_len, sizeof(content));
    ck_assert_int_eq(seen.writes, 0);
    ck_assert_int_eq(seen.ends, 0);
    static_send_on_drain(&ex); /* nothing to do while the framer sends */
    ck_assert_int_eq(seen.sendfiles, 1);
    finish_sendfile(&ex, sizeof(content), 0);
    ck_assert_int_eq(seen.ends, 1);
    ck_assert_int_eq(seen.aborts, 0);
    ck_assert_ptr_null(exchange_data(&ex));
    ck_assert_int_eq(test_fd_count(), fds); /* the file closed */
}
END_TEST

START_TEST(a_body_filter_sees_every_byte)
{
    seen.can_sendfile = true;
    struct exchange ex = fresh();
    exchange_add_filter(&ex, &counter);
    start(&ex, NULL, 0, sizeof(content));
    ck_assert_int_eq(seen.sendfiles, 0);
    ck_assert_int_eq(filtered, (int)sizeof(content));
    ck_assert_uint_eq(seen.body_len, sizeof(content));
    ck_assert(memcmp(seen.body, content, sizeof(content)) == 0);
    ck_assert_int_eq(seen.ends, 1);
}
END_TEST

START_TEST(copied_where_the_framer_cannot_send)
{
    struct exchange ex = fresh();
    struct static_range r = {1000, 200999};
    size_t before = block_pool_bytes();
    start(&ex, &r, 1, sizeof(content));
    ck_assert_int_eq(seen.sendfiles, 0);
    ck_assert_uint_eq(seen.body_len, 200000);
    ck_assert(memcmp(seen.body, content + 1000, 200000) == 0);
    ck_assert_int_eq(seen.ends, 1);
    /* the read buffer went back to the worker's pool, and the next
     * response reads into it */
    size_t kept = block_pool_bytes();
    ck_assert_uint_ge(kept, before + 64 * 1024);
    struct exchange again = fresh();
    seen.body_len = 0;
    start(&again, &r, 1, sizeof(content));
    ck_assert_uint_eq(seen.body_len, 200000);
    ck_assert(memcmp(seen.body, content + 1000, 200000) == 0);
    ck_assert_uint_eq(block_pool_bytes(), kept);
}
END_TEST

START_TEST(backed_up_output_waits_for_on_drain)
{
    struct exchange ex = fresh();
    seen.back_up_on_write = true;
    start(&ex, NULL, 0, sizeof(content));
    ck_assert_int_eq(seen.writes, 1); /* one buffer, then it backed up */
    static_send_on_drain(&ex);        /* still backed up: nothing */
    ck_assert_int_eq(seen.writes, 1);
    int drains = 0;
    while (seen.ends == 0) {
        ck_assert_int_lt(drains++, 100);
        seen.backed_up = false;
        static_send_on_drain(&ex);
    }
    /* 300000 bytes in 64 KiB buffers: five writes, the last ending it */
    ck_assert_int_eq(seen.writes, 5);
    ck_assert_uint_eq(seen.body_len, sizeof(content));
    ck_assert(memcmp(seen.body, content, sizeof(content)) == 0);
}
END_TEST

START_TEST(multipart_by_sendfile_between_part_heads)
{
    seen.can_sendfile = true;
    struct exchange ex = fresh();
    struct static_range r[2] = {{0, 1}, {10, 12}};
    struct static_send_plan plan = {
        .size = sizeof(content), .ranges = r, .count = 2, .type = "text/plain", .boundary = "B"};
    const char *head1 =
        "\r\n--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/300000\r\n\r\n";
    const char *head2 =
        "\r\n--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-12/300000\r\n\r\n";
    const char *tail = "\r\n--B--\r\n";
    ck_assert_uint_eq(static_send_length(&plan),
                      strlen(head1) + 2 + strlen(head2) + 3 + strlen(tail));
    start(&ex, r, 2, sizeof(content));
    ck_assert_int_eq(seen.sendfiles, 1);
    ck_assert_uint_eq(seen.sf_offset, 0);
    ck_assert_uint_eq(seen.sf_len, 2);
    ck_assert_uint_eq(seen.body_len, strlen(head1));
    finish_sendfile(&ex, 2, 0);
    ck_assert_int_eq(seen.sendfiles, 2);
    ck_assert_uint_eq(seen.sf_offset, 10);
    ck_assert_uint_eq(seen.sf_len, 3);
    finish_sendfile(&ex, 3, 0);
    ck_assert_int_eq(seen.ends, 1);
    char want[512];
    snprintf(want, sizeof(want), "%s%s%s", head1, head2, tail);
    seen.body[seen.body_len] = '\0';
    ck_assert_str_eq(seen.body, want);
}
END_TEST

START_TEST(a_shrunk_file_read_cuts_the_exchange_off)
{
    struct exchange ex = fresh();
    ck_assert_int_eq(truncate(path, 100000), 0);
    start(&ex, NULL, 0, sizeof(content)); /* announced before it shrank */
    ck_assert_int_eq(seen.aborts, 1);
    ck_assert_int_eq(seen.ends, 0);
    ck_assert_uint_eq(seen.body_len, 100000); /* what it had, nothing else */
    ck_assert(memcmp(seen.body, content, 100000) == 0);
    ck_assert_ptr_null(exchange_data(&ex));
    static_send_on_abort(&ex); /* the framer's, later: nothing left to free */
}
END_TEST

START_TEST(a_shrunk_file_sent_cuts_the_exchange_off)
{
    seen.can_sendfile = true;
    struct exchange ex = fresh();
    start(&ex, NULL, 0, sizeof(content));
    finish_sendfile(&ex, 1000, 0); /* the file ended after 1000 bytes */
    ck_assert_int_eq(seen.aborts, 1);
    ck_assert_int_eq(seen.ends, 0);
    ck_assert_ptr_null(exchange_data(&ex));
    static_send_on_abort(&ex);
}
END_TEST

START_TEST(the_client_gone_during_a_send)
{
    seen.can_sendfile = true;
    struct exchange ex = fresh();
    int fds = test_fd_count();
    start(&ex, NULL, 0, sizeof(content));
    /* The connection closed: on_abort, then the send's own end; the
     * state goes with the last, the exchange untouched (ASan). */
    static_send_on_abort(&ex);
    ck_assert_ptr_null(exchange_data(&ex));
    finish_sendfile(&ex, 5, -ECONNRESET);
    ck_assert_int_eq(seen.aborts, 0);
    ck_assert_int_eq(seen.ends, 0);
    ck_assert_int_eq(test_fd_count(), fds);
}
END_TEST

/* A small body goes at once, written with no sendfile even where the
 * framer could, and nothing kept: one range of a large file, or a small
 * file whole from the bytes the descriptor cache keeps. */
START_TEST(a_small_body_is_written_at_once)
{
    seen.can_sendfile = true;
    struct exchange ex = fresh();
    int fds = test_fd_count();
    struct static_range r = {5000, 5000 + STATIC_FILE_SMALL - 1};
    start(&ex, &r, 1, sizeof(content));
    ck_assert_int_eq(seen.sendfiles, 0);
    ck_assert_int_eq(seen.writes, 1);
    ck_assert_uint_eq(seen.body_len, STATIC_FILE_SMALL);
    ck_assert(memcmp(seen.body, content + 5000, STATIC_FILE_SMALL) == 0);
    ck_assert_int_eq(seen.ends, 1);
    ck_assert_ptr_null(exchange_data(&ex));
    ck_assert_int_eq(test_fd_count(), fds);
    /* one byte more: by sendfile, as before */
    memset(&seen, 0, sizeof(seen));
    seen.can_sendfile = true;
    r.last++;
    start(&ex, &r, 1, sizeof(content));
    ck_assert_int_eq(seen.sendfiles, 1);
    finish_sendfile(&ex, STATIC_FILE_SMALL + 1, 0);
    ck_assert_int_eq(seen.ends, 1);
    /* a small file through the cache: its kept bytes */
    ck_assert_int_eq(truncate(path, 1000), 0);
    memset(&seen, 0, sizeof(seen));
    seen.can_sendfile = true;
    struct static_file_cache_conf cache = {.max = 4, .inactive_ms = 60000, .valid_ms = 60000};
    struct static_file f;
    ck_assert_int_eq(static_file_open(path, false, &cache, 1, &f), 0);
    ck_assert_ptr_nonnull(static_file_small(&f));
    struct static_send_plan plan = {.size = 1000, .type = "text/plain", .sendfile = true};
    static_send_start(&ex, &f, &plan);
    ck_assert_int_eq(seen.sendfiles, 0);
    ck_assert_uint_eq(seen.body_len, 1000);
    ck_assert(memcmp(seen.body, content, 1000) == 0);
    ck_assert_int_eq(seen.ends, 1);
}
END_TEST

START_TEST(a_small_body_shrunk_cuts_the_exchange_off)
{
    struct exchange ex = fresh();
    ck_assert_int_eq(truncate(path, 100), 0);
    start(&ex, NULL, 0, 1000); /* announced before it shrank */
    ck_assert_int_eq(seen.aborts, 1);
    ck_assert_int_eq(seen.ends, 0);
    ck_assert_uint_eq(seen.body_len, 0);
    ck_assert_ptr_null(exchange_data(&ex));
}
END_TEST

Suite *test_suite(void)
{
    modules_init();
    Suite *suite = suite_create("proto/static_send");
    TCase *tc = tcase_create("send");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, whole_file_by_sendfile);
    tcase_add_test(tc, a_body_filter_sees_every_byte);
    tcase_add_test(tc, copied_where_the_framer_cannot_send);
    tcase_add_test(tc, backed_up_output_waits_for_on_drain);
    tcase_add_test(tc, multipart_by_sendfile_between_part_heads);
    tcase_add_test(tc, a_shrunk_file_read_cuts_the_exchange_off);
    tcase_add_test(tc, a_shrunk_file_sent_cuts_the_exchange_off);
    tcase_add_test(tc, the_client_gone_during_a_send);
    tcase_add_test(tc, a_small_body_is_written_at_once);
    tcase_add_test(tc, a_small_body_shrunk_cuts_the_exchange_off);
    suite_add_tcase(suite, tc);
    return suite;
}
