/*
 * test_url.c: url_split() (proto/url.c), the one parser of the http://
 * and https:// URLs the ACME client and OCSP stapling connect to: hosts,
 * IPv6 literals, default and explicit ports, paths, and the URLs it must
 * refuse because their bytes would reach a request line or a header.
 */
#include "../helpers.h"
#include "proto/url.h"

#include <errno.h>
#include <string.h>

static void expect(const char *text, bool https, const char *host, const char *port,
                   const char *authority, const char *path)
{
    struct url u;
    ck_assert_msg(url_split(text, &u) == 0, "\"%s\" refused", text);
    ck_assert_msg(u.https == https, "%s", text);
    ck_assert_str_eq(u.host, host);
    ck_assert_str_eq(u.port, port);
    ck_assert_int_eq((int)u.authority_len, (int)strlen(authority));
    ck_assert_msg(memcmp(u.authority, authority, u.authority_len) == 0, "%s", text);
    ck_assert_int_eq((int)u.path_len, (int)strlen(path));
    ck_assert_msg(memcmp(u.path, path, u.path_len) == 0, "%s: %.*s", text, (int)u.path_len, u.path);
}

START_TEST(url_accepted)
{
    expect("https://acme.example.com/dir", true, "acme.example.com", "443", "acme.example.com",
           "/dir");
    expect("https://localhost:14000/dir", true, "localhost", "14000", "localhost:14000", "/dir");
    expect("http://ocsp.example.com", false, "ocsp.example.com", "80", "ocsp.example.com", "/");
    expect("HTTP://Ocsp.Example.com:8080/a/b?x=1#frag", false, "Ocsp.Example.com", "8080",
           "Ocsp.Example.com:8080", "/a/b?x=1");
    expect("https://[::1]:14000/dir", true, "::1", "14000", "[::1]:14000", "/dir");
    expect("http://[2001:db8::1]", false, "2001:db8::1", "80", "[2001:db8::1]", "/");
    expect("http://[::ffff:127.0.0.1]/", false, "::ffff:127.0.0.1", "80", "[::ffff:127.0.0.1]",
           "/");
    expect("http://127.0.0.1:65535#x", false, "127.0.0.1", "65535", "127.0.0.1:65535", "/");
    expect("http://under_score-x.internal/", false, "under_score-x.internal", "80",
           "under_score-x.internal", "/");
}
END_TEST

START_TEST(url_refused)
{
    char long_host[300];
    memset(long_host, 'a', sizeof(long_host));
    memcpy(long_host, "http://", 7);
    long_host[sizeof(long_host) - 1] = '\0';
    const char *bad[] = {
        "ftp://example.com/",
        "example.com/dir",
        "https:/example.com",
        "https://",
        "https:///dir",
        "https://:443/",
        "https://host:/",
        "https://host:0/",
        "https://host:65536/",
        "https://host:123456/",
        "https://host:12a/",
        "https://host:1:2/",
        "https://user:pw@host/",
        "https://host dir/",
        "https://host/a b",
        "https://host/a\r\nX-Injected: 1",
        "https://ho\x01st/",
        "https://h\xc3\xa9/",
        "https://host?query",
        "https://[::1/",
        "https://[::1]x/",
        "https://[::1]:/",
        "https://[]/",
        "https://[1.2.3.4]/",
        "https://[::g]/",
        "https://[::1%eth0]/",
        long_host,
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct url u;
        ck_assert_msg(url_split(bad[i], &u) == -EINVAL, "\"%s\" accepted", bad[i]);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("url");
    TCase *tc = tcase_create("split");
    tcase_add_test(tc, url_accepted);
    tcase_add_test(tc, url_refused);
    suite_add_tcase(s, tc);
    return s;
}
