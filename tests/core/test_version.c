/*
 * test_version.c: the version macros agree with each other and with what
 * the library reports at run time; the public structs keep their size,
 * and their reserved space is zero where the library fills them and
 * refused where it is not.
 */
#include "../helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The macros are usable in #if, as CORRAL_VERSION_HEX's comment says. */
#if CORRAL_VERSION_HEX < 0 || CORRAL_VERSION_HEX > 0xffffff
#error "CORRAL_VERSION_HEX is out of range"
#endif

START_TEST(hex_packs_major_minor_patch)
{
    ck_assert_int_ge(CORRAL_VERSION_MAJOR, 0);
    ck_assert_int_lt(CORRAL_VERSION_MAJOR, 256);
    ck_assert_int_ge(CORRAL_VERSION_MINOR, 0);
    ck_assert_int_lt(CORRAL_VERSION_MINOR, 256);
    ck_assert_int_ge(CORRAL_VERSION_PATCH, 0);
    ck_assert_int_lt(CORRAL_VERSION_PATCH, 256);
    ck_assert_int_eq(CORRAL_VERSION_HEX, CORRAL_VERSION_MAJOR * 65536 + CORRAL_VERSION_MINOR * 256 +
                                             CORRAL_VERSION_PATCH);
}
END_TEST

START_TEST(string_spells_the_numbers)
{
    char expected[32];
    snprintf(expected, sizeof(expected), "%d.%d.%d", CORRAL_VERSION_MAJOR, CORRAL_VERSION_MINOR,
             CORRAL_VERSION_PATCH);
    ck_assert_str_eq(CORRAL_VERSION, expected);
    /* A string literal, so that it joins others, as `corral -V` does. */
    static const char joined[] = "corral " CORRAL_VERSION;
    ck_assert_str_eq(joined + strlen("corral "), expected);
}
END_TEST

START_TEST(library_reports_the_header_version)
{
    ck_assert_uint_eq(corral_version(), CORRAL_VERSION_HEX);
    ck_assert_str_eq(corral_version_string(), CORRAL_VERSION);
    /* Static storage: the same pointer every time. */
    ck_assert_ptr_eq(corral_version_string(), corral_version_string());
}
END_TEST

/* ---------------------------------------------------------------- the ABI */

/* The sizes of the public structs a program allocates, on LP64.  A member
 * is added by taking reserved space (corral.h, "How public structs grow"),
 * so these change only with a new CORRAL_VERSION_MAJOR: a struct that grew
 * within one would break every program built against the older header. */
START_TEST(public_structs_keep_their_size)
{
#if UINTPTR_MAX == UINT64_MAX
    ck_assert_uint_eq(CORRAL_VERSION_MAJOR, 0);
    ck_assert_uint_eq(sizeof(struct corral_conn_handler), 88);
    ck_assert_uint_eq(sizeof(struct corral_transport), 96);
    ck_assert_uint_eq(sizeof(struct corral_wakeup_info), 56);
    ck_assert_uint_eq(sizeof(struct corral_kernel_caps), 2096);
    ck_assert_uint_eq(sizeof(struct corral_server_config), 96);
    ck_assert_uint_eq(sizeof(struct corral_listen_options), 96);
    ck_assert_uint_eq(sizeof(struct corral_worker_stats), 160);
    ck_assert_uint_eq(sizeof(struct corral_steer_stats), 80);
    ck_assert_uint_eq(sizeof(struct corral_udp_msg), 312);
    ck_assert_uint_eq(sizeof(struct corral_udp_handler), 48);
    ck_assert_uint_eq(sizeof(struct corral_udp_options), 104);
    ck_assert_uint_eq(sizeof(struct corral_udp_stats), 160);
#endif
}
END_TEST

#define ASSERT_ZERO(array)                                                                         \
    do {                                                                                           \
        for (size_t i_ = 0; i_ < sizeof(array) / sizeof((array)[0]); i_++)                         \
            ck_assert_msg((array)[i_] == 0, #array "[%zu] is not zero", i_);                       \
    } while (0)

START_TEST(init_functions_zero_reserved_space)
{
    struct corral_server_config config;
    memset(&config, 0xa5, sizeof(config));
    corral_server_config_init(&config);
    ASSERT_ZERO(config.reserved);
    struct corral_listen_options options;
    memset(&options, 0xa5, sizeof(options));
    corral_listen_options_init(&options);
    ASSERT_ZERO(options.reserved);
    struct corral_udp_options udp;
    memset(&udp, 0xa5, sizeof(udp));
    corral_udp_options_init(&udp);
    ASSERT_ZERO(udp.reserved);
}
END_TEST

START_TEST(results_have_reserved_space_zeroed)
{
    struct corral_kernel_caps caps;
    memset(&caps, 0xa5, sizeof(caps));
    corral_probe(&caps);
    ASSERT_ZERO(caps.reserved);
    ASSERT_ZERO(caps.reserved_bytes);
    struct corral_wakeup_info info;
    memset(&info, 0xa5, sizeof(info));
    corral_wakeup_resolve(CORRAL_WAKEUP_AUTO, NULL, &info);
    ASSERT_ZERO(info.reserved);

    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    struct corral_worker_stats stats;
    memset(&stats, 0xa5, sizeof(stats));
    corral_server_stats(server, 0, &stats);
    ASSERT_ZERO(stats.reserved);
    corral_server_free(server);
}
END_TEST

static void a_callback(void)
{
}

static size_t on_data(corral_conn *conn, const char *data, size_t len)
{
    (void)conn;
    (void)data;
    return len;
}

/* A program built against a later header that sets a member placed in
 * today's reserved space is told so, not ignored. */
START_TEST(reserved_space_in_what_a_program_fills_is_refused)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    config.reserved[6] = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), -EINVAL);
    config.reserved[6] = 0;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);

    struct corral_conn_handler handler = {.on_data = on_data};
    struct corral_conn_handler later = {.on_data = on_data, .reserved[0] = a_callback};
    struct corral_listen_options options;
    corral_listen_options_init(&options);
    options.reserved[0] = 1;
    corral_listener *listener;
    ck_assert_int_eq(
        corral_server_listen(server, "127.0.0.1:0", &options, &handler, NULL, &listener), -EINVAL);
    ck_assert_int_eq(corral_server_listen(server, "127.0.0.1:0", NULL, &later, NULL, &listener),
                     -EINVAL);

    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, len), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    ck_assert_int_eq(corral_server_listen_fds(server, &fd, 1, &options, &handler, NULL, &listener),
                     -EINVAL);
    ck_assert_int_eq(corral_server_listen_fds(server, &fd, 1, NULL, &later, NULL, &listener),
                     -EINVAL);
    ck_assert_int_eq(corral_server_listen_fds(server, &fd, 1, NULL, &handler, NULL, &listener), 0);

    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    corral_conn *conn;
    ck_assert_int_eq(corral_connect(loop, (struct sockaddr *)&addr, len, &later, NULL, &conn),
                     -EINVAL);
    corral_loop_free(loop);
    corral_server_free(server);
    close(fd);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/version");
    TCase *tc = tcase_create("version");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, hex_packs_major_minor_patch);
    tcase_add_test(tc, string_spells_the_numbers);
    tcase_add_test(tc, library_reports_the_header_version);
    suite_add_tcase(suite, tc);
    tc = tcase_create("abi");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, public_structs_keep_their_size);
    tcase_add_test(tc, init_functions_zero_reserved_space);
    tcase_add_test(tc, results_have_reserved_space_zeroed);
    tcase_add_test(tc, reserved_space_in_what_a_program_fills_is_refused);
    suite_add_tcase(suite, tc);
    return suite;
}
