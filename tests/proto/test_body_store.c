/*
 * test_body_store.c: a request body kept in memory, then in a temporary
 * file, and the bound on the disk all those files take at once
 * (client_body_temp_max_size): in memory first, then through the daemon.
 */
#include "../daemon.h"
#include "../helpers.h"
#include "proto/http/body_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct body_store store_in(const char *dir, size_t mem_max, uint64_t disk_max)
{
    struct body_store s = BODY_STORE_INIT;
    s.mem_max = mem_max;
    s.temp_path = dir;
    s.disk_max = disk_max;
    return s;
}

/* Two stores spill to files under one bound: the second is refused what
 * would pass it, and gets it once the first is freed. */
START_TEST(temporary_files_share_one_bound)
{
    char chunk[1000];
    memset(chunk, 'x', sizeof(chunk));
    uint64_t base = body_store_disk_bytes();
    struct body_store a = store_in(test_daemon_dir(), 1000, base + 5000);
    struct body_store b = store_in(test_daemon_dir(), 1000, base + 5000);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(body_store_append(&a, chunk, sizeof(chunk)), 0);
    ck_assert(a.in_file);
    ck_assert_uint_eq(body_store_disk_bytes(), base + 3000); /* the first 1000 spilled, and more */
    ck_assert_int_eq(body_store_append(&b, chunk, sizeof(chunk)), 0); /* in memory */
    ck_assert_int_eq(body_store_append(&b, chunk, sizeof(chunk)), 0); /* spills 1000 */
    ck_assert(b.in_file);
    ck_assert_uint_eq(body_store_disk_bytes(), base + 5000);
    ck_assert_int_eq(body_store_append(&b, chunk, 1), -EDQUOT);
    ck_assert_int_eq(body_store_append(&a, chunk, 1), -EDQUOT);
    ck_assert_uint_eq(b.len, 2000);
    /* what was stored still reads back */
    char scratch[4096];
    const char *data;
    ck_assert_int_eq(body_store_read(&b, 0, scratch, sizeof(scratch), &data), 2000);
    ck_assert_int_eq(data[1999], 'x');
    body_store_free(&a);
    ck_assert_uint_eq(body_store_disk_bytes(), base + 2000);
    ck_assert_int_eq(body_store_append(&b, chunk, sizeof(chunk)), 0);
    body_store_free(&b);
    ck_assert_uint_eq(body_store_disk_bytes(), base);
}
END_TEST

/* disk_max 0: no bound; a store that stays in memory counts nothing. */
START_TEST(no_bound_and_memory_count_nothing)
{
    char chunk[1000];
    memset(chunk, 'y', sizeof(chunk));
    uint64_t base = body_store_disk_bytes();
    struct body_store m = store_in(test_daemon_dir(), 4000, 1);
    ck_assert_int_eq(body_store_append(&m, chunk, sizeof(chunk)), 0);
    ck_assert(!m.in_file);
    ck_assert_uint_eq(body_store_disk_bytes(), base);
    struct body_store f = store_in(test_daemon_dir(), 100, 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(body_store_append(&f, chunk, sizeof(chunk)), 0);
    ck_assert_uint_eq(body_store_disk_bytes(), base + 5000);
    /* a spill the bound refuses leaves the body in memory, uncounted */
    struct body_store r = store_in(test_daemon_dir(), 1000, base + 5500);
    ck_assert_int_eq(body_store_append(&r, chunk, sizeof(chunk)), 0);
    ck_assert_int_eq(body_store_append(&r, chunk, 1), -EDQUOT);
    ck_assert(!r.in_file);
    ck_assert_uint_eq(body_store_disk_bytes(), base + 5000);
    body_store_free(&m);
    body_store_free(&f);
    body_store_free(&r);
    ck_assert_uint_eq(body_store_disk_bytes(), base);
}
END_TEST

/* POSTs a body of `size` bytes to the daemon; returns the status. */
static int post(int port, size_t size)
{
    int fd = test_connect(port);
    char head[256];
    int n = snprintf(
        head, sizeof(head),
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", size);
    test_send_all(fd, head, (size_t)n);
    char *body = malloc(size);
    ck_assert_ptr_nonnull(body);
    memset(body, 'z', size);
    test_send_all(fd, body, size);
    free(body);
    char reply[4096];
    size_t len = 0;
    for (ssize_t got;
         len < sizeof(reply) - 1 && (got = recv(fd, reply + len, sizeof(reply) - 1 - len, 0)) > 0;)
        len += (size_t)got;
    reply[len] = '\0';
    close(fd);
    int status = 0;
    sscanf(reply, "HTTP/1.1 %d", &status);
    return status;
}

/* With client_body_temp_max_size 8k, a buffered body that would pass it
 * is refused with 503 and logged; one under it goes on to the backend
 * (here a refused port: 502). */
START_TEST(a_body_past_the_bound_is_refused_and_logged)
{
    int port;
    int reserved = test_reserve_port(&port); /* nothing listens there */
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[PATH_MAX + 512];
    snprintf(conf, sizeof(conf),
             "workers 1;\ndrain_timeout 100ms;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.1:0;\n    location / {\n"
             "        proxy_pass http://127.0.0.1:%d;\n        proxy_request_buffering on;\n"
             "        client_body_buffer_size 1k;\n        client_body_temp_path %s;\n"
             "        client_body_temp_max_size 8k;\n    }\n}\n",
             port, test_daemon_dir());
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    ck_assert_int_eq(post(d.port, 20000), 503);
    free(test_daemon_wait_log(&d, "client_body_temp_max_size is 8192 (answering 503)"));
    ck_assert_int_eq(post(d.port, 5000), 502);
    free(test_daemon_wait_log(&d, "the temporary files hold"));
    test_daemon_stop(&d);
    close(reserved);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("proto/body_store");
    TCase *tc = tcase_create("store");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, temporary_files_share_one_bound);
    tcase_add_test(tc, no_bound_and_memory_count_nothing);
    tcase_add_test(tc, a_body_past_the_bound_is_refused_and_logged);
    suite_add_tcase(s, tc);
    return s;
}
