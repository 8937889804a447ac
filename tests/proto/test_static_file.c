/*
 * test_static_file.c: opening served files (proto/static/static_file.c),
 * without sockets: the flags they open with, symbolic links refused
 * anywhere on the path under disable_symlinks, and the per-thread cache
 * of descriptors: reuse, revalidation after a change, its bound and its
 * inactive time.
 */
#include "../helpers.h"
#include "proto/static/static_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static void write_file(const char *name, const char *text)
{
    char p[128];
    path_of(p, sizeof(p), name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/corral-static-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char p[128], q[128];
    path_of(p, sizeof(p), "d");
    ck_assert_int_eq(mkdir(p, 0755), 0);
    write_file("d/f.txt", "hello");
    write_file("g.txt", "g");
    path_of(p, sizeof(p), "link.txt");
    ck_assert_int_eq(symlink("d/f.txt", p), 0);
    path_of(q, sizeof(q), "dlink");
    ck_assert_int_eq(symlink("d", q), 0);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static int try_open(const char *name, bool no_symlinks)
{
    char p[128];
    path_of(p, sizeof(p), name);
    struct static_file f;
    int err = static_file_open(p, no_symlinks, NULL, 0, &f);
    if (err == 0)
        static_file_close(&f);
    return err;
}

START_TEST(opens_read_only_nonblocking_cloexec)
{
    char p[128];
    path_of(p, sizeof(p), "d/f.txt");
    for (int no_symlinks = 0; no_symlinks < 2; no_symlinks++) {
        struct static_file f;
        ck_assert_int_eq(static_file_open(p, no_symlinks, NULL, 0, &f), 0);
        int fl = fcntl(f.fd, F_GETFL);
        ck_assert_int_eq(fl & O_ACCMODE, O_RDONLY);
        ck_assert(fl & O_NONBLOCK);
        ck_assert(fcntl(f.fd, F_GETFD) & FD_CLOEXEC);
        ck_assert(S_ISREG(f.st.st_mode));
        ck_assert_int_eq(f.st.st_size, 5);
        static_file_close(&f);
        ck_assert_int_eq(f.fd, -1);
    }
}
END_TEST

START_TEST(missing_and_not_a_directory)
{
    ck_assert_int_eq(try_open("nope", false), -ENOENT);
    ck_assert_int_eq(try_open("nope", true), -ENOENT);
    ck_assert_int_eq(try_open("g.txt/x", false), -ENOTDIR);
    ck_assert_int_eq(try_open("g.txt/x", true), -ENOTDIR);
    ck_assert_int_eq(try_open("d/", true), 0); /* a directory, to be read */
}
END_TEST

START_TEST(symlinks_followed_unless_refused)
{
    ck_assert_int_eq(try_open("link.txt", false), 0);
    ck_assert_int_eq(try_open("dlink/f.txt", false), 0);
    ck_assert_int_eq(try_open("link.txt", true), -ELOOP);
    ck_assert_int_eq(try_open("dlink/f.txt", true), -ELOOP);
    ck_assert_int_eq(try_open("dlink/", true), -ELOOP);
    ck_assert_int_eq(try_open("d/f.txt", true), 0);
}
END_TEST

START_TEST(cache_reuses_and_revalidates)
{
    struct static_file_cache_conf conf = {.max = 4, .inactive_ms = 60000};
    char p[128];
    path_of(p, sizeof(p), "d/f.txt");
    struct static_file a, b;
    ck_assert_int_eq(static_file_open(p, false, &conf, 1000, &a), 0);
    int fd = a.fd;
    static_file_close(&a);
    ck_assert_uint_eq(static_file_cached(), 1);
    /* the same descriptor, still open after its close */
    ck_assert_int_ne(fcntl(fd, F_GETFD), -1);
    ck_assert_int_eq(static_file_open(p, false, &conf, 2000, &b), 0);
    ck_assert_int_eq(b.fd, fd);
    /* a change to the file, here its size, opens it again */
    write_file("d/f.txt", "hello, again");
    struct static_file c;
    ck_assert_int_eq(static_file_open(p, false, &conf, 3000, &c), 0);
    ck_assert_int_eq(c.st.st_size, 12);
    ck_assert_uint_eq(static_file_cached(), 1);
    /* the old one stays open while `b` holds it */
    ck_assert_int_ne(fcntl(b.fd, F_GETFD), -1);
    char buf[8];
    ck_assert_int_eq(pread(b.fd, buf, 5, 0), 5);
    static_file_close(&b);
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1); /* closed with its last user */
    static_file_close(&c);
    /* another file at the same path (renamed over it) is opened anew */
    write_file("g.txt", "hello, again");
    char g[128];
    path_of(g, sizeof(g), "g.txt");
    ck_assert_int_eq(rename(g, p), 0);
    ck_assert_int_eq(static_file_open(p, false, &conf, 4000, &c), 0);
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_uint_eq(c.st.st_ino, st.st_ino);
    static_file_close(&c);
}
END_TEST

/* open_file_cache_valid: within it the entry is taken on trust, past it
 * checked again; a small file's bytes are kept with its entry and go
 * with it. */
START_TEST(cache_valid_window_and_kept_bytes)
{
    struct static_file_cache_conf conf = {.max = 4, .inactive_ms = 60000, .valid_ms = 1000};
    char p[128];
    path_of(p, sizeof(p), "d/f.txt");
    struct static_file a;
    ck_assert_int_eq(static_file_open(p, false, &conf, 10000, &a), 0);
    const char *kept = static_file_small(&a);
    ck_assert_ptr_nonnull(kept);
    ck_assert_int_eq(memcmp(kept, "hello", 5), 0);
    ck_assert_ptr_eq(static_file_small(&a), kept); /* read once */
    int fd = a.fd;
    static_file_close(&a);
    write_file("d/f.txt", "hello, again");
    /* 999 ms later: not checked, the old file and its bytes */
    ck_assert_int_eq(static_file_open(p, false, &conf, 10999, &a), 0);
    ck_assert_int_eq(a.fd, fd);
    ck_assert_int_eq(a.st.st_size, 5);
    ck_assert_ptr_eq(static_file_small(&a), kept);
    static_file_close(&a);
    /* a second after the check: checked, the new file */
    ck_assert_int_eq(static_file_open(p, false, &conf, 11000, &a), 0);
    ck_assert_int_eq(a.st.st_size, 12);
    kept = static_file_small(&a);
    ck_assert_ptr_nonnull(kept);
    ck_assert_int_eq(memcmp(kept, "hello, again", 12), 0);
    static_file_close(&a);
    /* uncached, or too large: nothing kept */
    ck_assert_int_eq(static_file_open(p, false, NULL, 0, &a), 0);
    ck_assert_ptr_null(static_file_small(&a));
    static_file_close(&a);
    char big[STATIC_FILE_SMALL + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    write_file("big.txt", big);
    path_of(p, sizeof(p), "big.txt");
    ck_assert_int_eq(static_file_open(p, false, &conf, 12000, &a), 0);
    ck_assert_ptr_null(static_file_small(&a));
    static_file_close(&a);
}
END_TEST

START_TEST(cache_bounded_and_inactive)
{
    struct static_file_cache_conf conf = {.max = 2, .inactive_ms = 5000};
    int before = test_fd_count();
    const char *names[] = {"d/f.txt", "g.txt", "link.txt"};
    for (int i = 0; i < 3; i++) {
        char p[128];
        path_of(p, sizeof(p), names[i]);
        struct static_file f;
        ck_assert_int_eq(static_file_open(p, false, &conf, 1000, &f), 0);
        static_file_close(&f);
        ck_assert_uint_le(static_file_cached(), 2);
    }
    ck_assert_uint_eq(static_file_cached(), 2);
    ck_assert_int_eq(test_fd_count(), before + 2);
    /* unused for longer than inactive: opened anew, not reused */
    char p[128];
    path_of(p, sizeof(p), "link.txt");
    struct static_file f;
    ck_assert_int_eq(static_file_open(p, false, &conf, 1000 + 5000, &f), 0);
    static_file_close(&f);
    ck_assert_int_eq(test_fd_count(), before + 2);
    /* a directory is never cached */
    path_of(p, sizeof(p), "d/");
    ck_assert_int_eq(static_file_open(p, false, &conf, 7000, &f), 0);
    ck_assert_ptr_null(f._entry);
    static_file_close(&f);
}
END_TEST

START_TEST(cache_keeps_refusing_symlinks)
{
    struct static_file_cache_conf conf = {.max = 4, .inactive_ms = 60000};
    char p[128];
    path_of(p, sizeof(p), "d/f.txt");
    struct static_file f;
    ck_assert_int_eq(static_file_open(p, true, &conf, 1000, &f), 0);
    static_file_close(&f);
    /* the file becomes a link to another: the cache does not vouch for it */
    char g[128];
    path_of(g, sizeof(g), "g.txt");
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(symlink(g, p), 0);
    ck_assert_int_eq(static_file_open(p, true, &conf, 2000, &f), -ELOOP);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/static_file");
    TCase *tc = tcase_create("file");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, opens_read_only_nonblocking_cloexec);
    tcase_add_test(tc, missing_and_not_a_directory);
    tcase_add_test(tc, symlinks_followed_unless_refused);
    tcase_add_test(tc, cache_reuses_and_revalidates);
    tcase_add_test(tc, cache_valid_window_and_kept_bytes);
    tcase_add_test(tc, cache_bounded_and_inactive);
    tcase_add_test(tc, cache_keeps_refusing_symlinks);
    suite_add_tcase(suite, tc);
    return suite;
}
