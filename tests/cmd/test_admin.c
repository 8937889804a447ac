/*
 * test_admin.c: who may read the admin listener: the warning for one that
 * anyone can reach, allow/deny by client address (IPv4 and IPv6), the
 * bearer token from auth_token_file (right, wrong, missing, rotated by a
 * reload, and the file's own problems), and the refusals on /metrics.
 * Client certificates on a TLS admin listener are in tests/proto/test_tls.c,
 * which has the certificates.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SERVER "server {\n    listen 127.0.0.1:0;\n    location / { return 200 \"ok\"; }\n}\n"

/* One request to `host`:`port` from the source address `source` (which
 * picks the client address the rules see; any address of 127/8 is this
 * machine's), with the lines `headers` ("" or "Name: value\r\n" each):
 * the status, and the whole response in `response`. */
static int request_from(const char *source, const char *host, int port, const char *path,
                        const char *headers, char *response, size_t size)
{
    bool v6 = strchr(host, ':') != NULL;
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval timeout = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } from = {0}, to = {0};
    socklen_t len;
    if (v6) {
        from.in6.sin6_family = to.in6.sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, source, &from.in6.sin6_addr), 1);
        ck_assert_int_eq(inet_pton(AF_INET6, host, &to.in6.sin6_addr), 1);
        to.in6.sin6_port = htons((uint16_t)port);
        len = sizeof(from.in6);
    } else {
        from.in.sin_family = to.in.sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, source, &from.in.sin_addr), 1);
        ck_assert_int_eq(inet_pton(AF_INET, host, &to.in.sin_addr), 1);
        to.in.sin_port = htons((uint16_t)port);
        len = sizeof(from.in);
    }
    ck_assert_int_eq(bind(fd, &from.sa, len), 0);
    ck_assert_msg(connect(fd, &to.sa, len) == 0, "connect %s:%d: %m", host, port);
    char req[1024];
    int n =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: admin\r\n%sConnection: close\r\n\r\n",
                 path, headers);
    ck_assert_int_lt(n, (int)sizeof(req));
    test_send_all(fd, req, (size_t)n);
    size_t got = test_recv_all(fd, response, size - 1);
    response[got] = '\0';
    close(fd);
    int status = 0;
    if (sscanf(response, "HTTP/1.1 %d", &status) != 1)
        return 0;
    return status;
}

/* request_from() to d's admin listener on 127.0.0.2. */
static int admin_from(const struct test_daemon *d, const char *source, const char *path,
                      const char *headers, char *response, size_t size)
{
    return request_from(source, "127.0.0.2", d->admin_port, path, headers, response, size);
}

/* The value of the series `name{labels}` on /metrics, read from 127.0.0.1
 * with `headers`; -1 if there is no such line. */
static long long metric(const struct test_daemon *d, const char *series, const char *headers)
{
    static char page[1 << 17];
    ck_assert_int_eq(admin_from(d, "127.0.0.1", "/metrics", headers, page, sizeof(page)), 200);
    size_t len = strlen(series);
    for (const char *line = page; line != NULL; line = strchr(line, '\n')) {
        line += *line == '\n';
        if (strncmp(line, series, len) == 0 && line[len] == ' ')
            return strtoll(line + len + 1, NULL, 10);
    }
    return -1;
}

/* Runs `corral -t` on `conf` written as DIR/check.conf: its exit status,
 * its output in `out`. */
static int check(const char *conf, char *out, size_t size)
{
    char path[PATH_MAX], args[PATH_MAX + 16];
    test_daemon_file(path, sizeof(path), "check.conf");
    test_write_file(path, conf);
    snprintf(args, sizeof(args), "-t -c '%s'", path);
    return test_daemon_run(args, out, size);
}

/* DIR/name with `text` and `mode`. */
static void write_secret(const char *name, const char *text, mode_t mode)
{
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), name);
    test_write_file(path, text);
    ck_assert_int_eq(chmod(path, mode), 0);
}

/* ------------------------------------------------------------ the warning */

static const struct {
    const char *block;  /* the admin block's lines */
    const char *warned; /* the address named in the warning; NULL: no warning */
} exposure_cases[] = {
    {"listen *:9100;", "*:9100"},
    {"listen 0.0.0.0:9100;", "0.0.0.0:9100"},
    {"listen 9100;", "9100"},
    {"listen [::]:9100;", "[::]:9100"},
    {"listen 192.0.2.1:9100;", "192.0.2.1:9100"},
    {"listen 127.0.0.1:9100; listen *:9101;", "*:9101"},
    {"listen 127.0.0.1:9100;", NULL},
    {"listen 127.3.4.5:9100;", NULL},
    {"listen [::1]:9100;", NULL},
    {"listen localhost:9100;", NULL},
    {"listen unix:/run/corral-admin.sock;", NULL},
    {"listen *:9100; allow 10.0.0.0/8; deny all;", NULL},
    {"listen *:9100; deny all;", NULL},
    {"listen *:9100; auth_token_file token;", NULL},
};

/* A start, a reload and -t build the admin listener the same way
 * (sites_build), so -t shows what the error log says then, without
 * binding an address that is not loopback. */
START_TEST(an_admin_listener_anyone_can_reach_is_warned)
{
    write_secret("token", "t0ken\n", 0600);
    for (size_t i = 0; i < sizeof(exposure_cases) / sizeof(exposure_cases[0]); i++) {
        char conf[512], out[4096];
        snprintf(conf, sizeof(conf), "admin { %s }\n", exposure_cases[i].block);
        ck_assert_msg(check(conf, out, sizeof(out)) == 0, "%s: %s", conf, out);
        const char *warning = strstr(out, "is not a loopback address and has no access control");
        if (exposure_cases[i].warned == NULL) {
            ck_assert_msg(warning == NULL, "%s: warned: %s", conf, out);
            continue;
        }
        char expected[256];
        snprintf(expected, sizeof(expected), "admin listen \"%s\" is not a loopback address",
                 exposure_cases[i].warned);
        ck_assert_msg(strstr(out, expected) != NULL, "%s: no %s in: %s", conf, expected, out);
        ck_assert_msg(strstr(out, "warn") != NULL && strstr(out, "check.conf:1:") != NULL &&
                          strstr(out, "\"allow\"") != NULL &&
                          strstr(out, "\"auth_token_file\"") != NULL &&
                          strstr(out, "\"tls_verify_client on\"") != NULL,
                      "%s: the warning says neither where nor what to add: %s", conf, out);
        ck_assert_msg(strstr(warning + 1, "is not a loopback address") == NULL, "%s: twice: %s",
                      conf, out);
    }
}
END_TEST

/* A running daemon with a loopback admin listener says nothing of it. */
START_TEST(a_loopback_admin_listener_is_not_warned)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n" SERVER);
    test_daemon_start(&d);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    char *log = test_daemon_wait_log(&d, "generation 1: draining"); /* the reload's listeners */
    ck_assert_msg(strstr(log, "access control") == NULL, "%s", log);
    free(log);
    test_daemon_stop(&d);
}
END_TEST

/* ------------------------------------------------------------ allow, deny */

/* The first rule that matches decides, for every path of the listener;
 * each refusal is a 403 counted on /metrics. */
START_TEST(allow_and_deny_take_the_first_rule_that_matches)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 2;\n"
                                 "admin {\n    listen 127.0.0.2:0;\n    deny 127.0.0.4;\n"
                                 "    allow 127.0.0.0/24;\n    deny all;\n}\n" SERVER);
    test_daemon_start(&d);
    static char response[1 << 17];
    static const char *const paths[] = {"/metrics", "/status", "/healthz", "/readyz"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(admin_from(&d, "127.0.0.3", paths[i], "", response, sizeof(response)),
                         200);
        ck_assert_msg(admin_from(&d, "127.0.0.4", paths[i], "", response, sizeof(response)) == 403,
                      "127.0.0.4 %s: %s", paths[i], response);
        ck_assert_msg(admin_from(&d, "127.0.1.1", paths[i], "", response, sizeof(response)) == 403,
                      "127.0.1.1 %s: %s", paths[i], response);
    }
    ck_assert_int_eq(admin_from(&d, "127.0.0.3", "/nothing", "", response, sizeof(response)), 404);
    ck_assert_int_eq(admin_from(&d, "127.0.0.4", "/nothing", "", response, sizeof(response)), 403);
    ck_assert_int_eq(metric(&d, "corral_admin_denied_total{reason=\"address\"}", ""), 9);
    ck_assert_int_eq(metric(&d, "corral_admin_denied_total{reason=\"token\"}", ""), 0);
    /* The server listener is not the admin block's business. */
    ck_assert_int_eq(
        request_from("127.0.0.4", "127.0.0.1", d.port, "/", "", response, sizeof(response)), 200);
    test_daemon_stop(&d);
}
END_TEST

/* The port of the admin listener on [::1] from the log; 0 if none. */
static int ipv6_admin_port(const struct test_daemon *d)
{
    char *log = test_daemon_log(d);
    const char *at = strstr(log, "listening on [::1]:");
    int port = 0;
    if (at != NULL && strstr(at, "(admin)") != NULL)
        port = atoi(at + strlen("listening on [::1]:"));
    free(log);
    return port;
}

START_TEST(ipv6_rules_apply_to_ipv6_clients)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d,
                             "workers 1;\n"
                             "admin {\n    listen [::1]:0;\n    listen 127.0.0.2:0;\n"
                             "    deny ::2/127;\n    allow ::1/128;\n    deny all;\n}\n" SERVER);
    test_daemon_start(&d);
    int port = ipv6_admin_port(&d);
    ck_assert_int_gt(port, 0);
    char response[8192];
    ck_assert_int_eq(request_from("::1", "::1", port, "/status", "", response, sizeof(response)),
                     200);
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/healthz", "", response, sizeof(response)), 403);
    test_daemon_stop(&d);
}
END_TEST

/* ------------------------------------------------------------ the token */

#define TOKEN "c29tZSByYW5kb20gYnl0ZXM-._~+/=="

/* /metrics and /status need `Authorization: Bearer TOKEN`: missing or
 * wrong, a 401 that says Bearer, counted; /healthz and /readyz are for
 * load balancers' probes and stay open. */
START_TEST(a_bearer_token_guards_metrics_and_status)
{
    write_secret("admin.token", TOKEN "\n", 0600);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 2;\nadmin {\n    listen 127.0.0.2:0;\n"
                                 "    auth_token_file admin.token;\n}\n" SERVER);
    test_daemon_start(&d);
    static char response[1 << 17];
    static const char *const refused[] = {
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: Bearer " TOKEN "x\r\n",
        "Authorization: Bearer c29tZSByYW5kb20gYnl0ZXM-._~+/=\r\n", /* one byte short */
        "Authorization: Bearer\r\n",
        "Authorization: Basic " TOKEN "\r\n",
        "Authorization: " TOKEN "\r\n",
        "X-Token: " TOKEN "\r\n",
    };
    size_t count = sizeof(refused) / sizeof(refused[0]);
    for (size_t i = 0; i < count; i++) {
        const char *path = i % 2 == 0 ? "/metrics" : "/status";
        ck_assert_msg(admin_from(&d, "127.0.0.1", path, refused[i], response, sizeof(response)) ==
                          401,
                      "%s with \"%s\": %s", path, refused[i], response);
        ck_assert_msg(strstr(response, "\r\nWWW-Authenticate: Bearer") != NULL, "%s", response);
        ck_assert_msg(strstr(response, "corral_") == NULL && strstr(response, "\"pid\"") == NULL,
                      "%s", response);
    }
    /* A token that is wrong, rather than missing, is told so (RFC 6750 3.1). */
    admin_from(&d, "127.0.0.1", "/metrics", refused[1], response, sizeof(response));
    ck_assert_msg(strstr(response, "error=\"invalid_token\"") != NULL, "%s", response);
    const char *right = "Authorization: Bearer " TOKEN "\r\n";
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/status", right, response, sizeof(response)),
                     200);
    ck_assert_msg(strstr(response, "\"pid\"") != NULL, "%s", response);
    /* The scheme is case-insensitive (RFC 9110 11.1), the token is not. */
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/status", "Authorization: bEARER   " TOKEN "\r\n",
                                response, sizeof(response)),
                     200);
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/healthz", "", response, sizeof(response)), 200);
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/readyz", "", response, sizeof(response)), 200);
    ck_assert_int_eq(metric(&d, "corral_admin_denied_total{reason=\"token\"}", right),
                     (long long)count + 1);
    ck_assert_int_eq(metric(&d, "corral_admin_denied_total{reason=\"address\"}", right), 0);
    test_daemon_stop(&d);
}
END_TEST

/* Both checks: the address first (403), then the token (401). */
START_TEST(the_address_is_checked_before_the_token)
{
    write_secret("admin.token", TOKEN, 0640);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 1;\nadmin {\n    listen 127.0.0.2:0;\n"
                                 "    auth_token_file admin.token;\n"
                                 "    allow 127.0.0.1;\n    deny all;\n}\n" SERVER);
    test_daemon_start(&d);
    char response[8192];
    const char *right = "Authorization: Bearer " TOKEN "\r\n";
    ck_assert_int_eq(admin_from(&d, "127.0.0.9", "/status", right, response, sizeof(response)),
                     403);
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/status", "", response, sizeof(response)), 401);
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/status", right, response, sizeof(response)),
                     200);
    test_daemon_stop(&d);
}
END_TEST

/* A reload reads the file again: the new token works, the old one no
 * longer does. */
START_TEST(a_reload_rotates_the_token)
{
    write_secret("admin.token", "old-token\n", 0600);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 1;\nadmin {\n    listen 127.0.0.2:0;\n"
                                 "    auth_token_file admin.token;\n}\n" SERVER);
    test_daemon_start(&d);
    char response[8192];
    ck_assert_int_eq(admin_from(&d, "127.0.0.1", "/status", "Authorization: Bearer old-token\r\n",
                                response, sizeof(response)),
                     200);
    write_secret("admin.token", "new-token\n", 0600);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    int status = 0;
    test_wait_for(
        (status = admin_from(&d, "127.0.0.1", "/status", "Authorization: Bearer new-token\r\n",
                             response, sizeof(response))) == 200,
        TEST_WAIT_MS, "status %d with the new token", status);
    /* The old generation may answer a moment longer, with its token. */
    test_wait_for(
        (status = admin_from(&d, "127.0.0.1", "/status", "Authorization: Bearer old-token\r\n",
                             response, sizeof(response))) == 401,
        TEST_WAIT_MS, "status %d with the old token", status);
    test_daemon_stop(&d);
}
END_TEST

static const struct {
    const char *content; /* NULL: no file; "fifo": a FIFO */
    mode_t mode;
    const char *error; /* NULL: valid */
    const char *warning;
} token_file_cases[] = {
    {NULL, 0600, "admin.token: No such file or directory", NULL},
    {"fifo", 0600, "admin.token: not a regular file", NULL},
    {"", 0600, "admin.token: no token in the file", NULL},
    {"\n \n", 0600, "admin.token: no token in the file", NULL},
    {"two words\n", 0600,
     "admin.token: a token is one word of A-Z a-z 0-9 - . _ ~ + / then =", NULL},
    {"t\x01ken", 0600, "admin.token: a token is one word", NULL},
    {"=abc", 0600, "admin.token: a token is one word", NULL},
    {"token\n", 0644, NULL, "admin.token is readable by any user"},
    {"token\r\n", 0600, NULL, NULL},
};

/* What -t says of the token file: errors at the directive, with the file's
 * path; a FIFO is refused rather than waited on. */
START_TEST(token_file_problems_are_named)
{
    int i = _i;
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "admin.token");
    if (token_file_cases[i].content != NULL && strcmp(token_file_cases[i].content, "fifo") == 0)
        ck_assert_int_eq(mkfifo(path, token_file_cases[i].mode), 0);
    else if (token_file_cases[i].content != NULL)
        write_secret("admin.token", token_file_cases[i].content, token_file_cases[i].mode);
    char out[4096];
    uint64_t started = test_now_ms();
    int rc = check("admin {\n    listen 127.0.0.1:9100;\n    auth_token_file admin.token;\n}\n",
                   out, sizeof(out));
    ck_assert_uint_lt(test_now_ms() - started, 3000);
    if (token_file_cases[i].error != NULL) {
        ck_assert_msg(rc == 1, "case %d: %d: %s", i, rc, out);
        ck_assert_msg(
            strstr(out, token_file_cases[i].error) != NULL && strstr(out, "check.conf:3:") != NULL,
            "case %d: no \"%s\" at check.conf:3 in: %s", i, token_file_cases[i].error, out);
        ck_assert_msg(strstr(out, "two words") == NULL, "the token is shown: %s", out);
    } else {
        ck_assert_msg(rc == 0, "case %d: %d: %s", i, rc, out);
    }
    if (token_file_cases[i].warning != NULL)
        ck_assert_msg(strstr(out, token_file_cases[i].warning) != NULL, "case %d: no \"%s\" in %s",
                      i, token_file_cases[i].warning, out);
    else
        ck_assert_msg(strstr(out, "warn") == NULL, "case %d: %s", i, out);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("cmd/admin");
    TCase *tc = tcase_create("admin");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, an_admin_listener_anyone_can_reach_is_warned);
    tcase_add_test(tc, a_loopback_admin_listener_is_not_warned);
    tcase_add_test(tc, allow_and_deny_take_the_first_rule_that_matches);
    tcase_add_test(tc, ipv6_rules_apply_to_ipv6_clients);
    tcase_add_test(tc, a_bearer_token_guards_metrics_and_status);
    tcase_add_test(tc, the_address_is_checked_before_the_token);
    tcase_add_test(tc, a_reload_rotates_the_token);
    tcase_add_loop_test(tc, token_file_problems_are_named, 0,
                        (int)(sizeof(token_file_cases) / sizeof(token_file_cases[0])));
    suite_add_tcase(suite, tc);
    return suite;
}
