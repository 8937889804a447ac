/*
 * test_log.c: the log line's prefix (UTC time to the millisecond and the
 * level) and the default logger, which writes it before each message.
 */
#include "../helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const enum corral_log_level levels[] = {CORRAL_LOG_ERROR, CORRAL_LOG_WARN, CORRAL_LOG_INFO,
                                               CORRAL_LOG_DEBUG};
#define LEVEL_COUNT (sizeof(levels) / sizeof(levels[0]))

/* Checks that `text` starts with "YYYY-MM-DDTHH:MM:SS.mmmZ [level] " for a
 * time within [before, after] (whole seconds from time(), which may lag the
 * precise clock by a tick, hence a second's margin) and returns the
 * prefix's length. */
static size_t check_prefix(const char *text, enum corral_log_level level, time_t before,
                           time_t after)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ [";
    for (size_t i = 0; i < sizeof(shape) - 1; i++) {
        if (shape[i] == 'd')
            ck_assert_msg(text[i] >= '0' && text[i] <= '9', "no digit at %zu in \"%s\"", i, text);
        else
            ck_assert_msg(text[i] == shape[i], "no '%c' at %zu in \"%s\"", shape[i], i, text);
    }
    const char *name = corral_log_level_name(level);
    size_t at = sizeof(shape) - 1;
    ck_assert_msg(strncmp(text + at, name, strlen(name)) == 0 &&
                      strncmp(text + at + strlen(name), "] ", 2) == 0,
                  "no \"%s] \" after the time in \"%s\"", name, text);

    struct tm tm = {0};
    ck_assert_ptr_nonnull(strptime(text, "%Y-%m-%dT%H:%M:%S", &tm));
    time_t stamp = timegm(&tm);
    ck_assert_msg(stamp >= before - 1 && stamp <= after + 1, "time %lld not within [%lld, %lld]",
                  (long long)stamp, (long long)before, (long long)after);
    return at + strlen(name) + 2;
}

START_TEST(prefix_is_utc_time_to_the_millisecond_and_the_level)
{
    for (size_t i = 0; i < LEVEL_COUNT; i++) {
        char buf[CORRAL_LOG_PREFIX_MAX];
        memset(buf, 'x', sizeof(buf));
        time_t before = time(NULL);
        size_t len = corral_log_prefix(levels[i], buf, sizeof(buf));
        time_t after = time(NULL);
        ck_assert_uint_lt(len, sizeof(buf));
        ck_assert_uint_eq(strlen(buf), len);
        ck_assert_uint_eq(check_prefix(buf, levels[i], before, after), len);
    }
}
END_TEST

START_TEST(prefix_is_cut_to_the_buffer)
{
    char full[CORRAL_LOG_PREFIX_MAX];
    size_t full_len = corral_log_prefix(CORRAL_LOG_WARN, full, sizeof(full));
    for (size_t size = 1; size <= full_len + 1; size++) {
        char buf[CORRAL_LOG_PREFIX_MAX + 1];
        memset(buf, 'x', sizeof(buf));
        size_t len = corral_log_prefix(CORRAL_LOG_WARN, buf, size);
        ck_assert_uint_eq(len, size - 1);
        ck_assert_uint_eq(strlen(buf), len);
        ck_assert_int_eq(buf[size], 'x'); /* nothing written past `size` */
    }
    char untouched = 'x';
    ck_assert_uint_eq(corral_log_prefix(CORRAL_LOG_WARN, &untouched, 0), 0);
    ck_assert_int_eq(untouched, 'x');
}
END_TEST

START_TEST(default_logger_writes_prefix_and_message_as_one_line)
{
    char path[] = "/tmp/corral-test-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);

    corral_set_logger(NULL, NULL);
    corral_set_log_level(CORRAL_LOG_DEBUG);
    time_t before = time(NULL);
    for (size_t i = 0; i < LEVEL_COUNT; i++)
        corral_log(levels[i], "line %zu", i);
    time_t after = time(NULL);
    fflush(stderr);
    ck_assert_int_eq(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);

    char text[1024];
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    ck_assert_int_gt(n, 0);
    text[n] = '\0';
    const char *line = text;
    for (size_t i = 0; i < LEVEL_COUNT; i++) {
        const char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        size_t at = check_prefix(line, levels[i], before, after);
        char message[32];
        snprintf(message, sizeof(message), "line %zu", i);
        ck_assert_uint_eq((size_t)(end - line), at + strlen(message));
        ck_assert(strncmp(line + at, message, strlen(message)) == 0);
        line = end + 1;
    }
    ck_assert_str_eq(line, "");
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/log");
    TCase *tc = tcase_create("log");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, prefix_is_utc_time_to_the_millisecond_and_the_level);
    tcase_add_test(tc, prefix_is_cut_to_the_buffer);
    tcase_add_test(tc, default_logger_writes_prefix_and_message_as_one_line);
    suite_add_tcase(suite, tc);
    return suite;
}
