/*
 * test_auth.c: authentication through build/corral: auth_basic in front
 * of proxy_pass over HTTP/1.1 and HTTP/2 (curl), with $remote_user passed
 * on; satisfy any and all with allow/deny; auth_basic_fail_limit;
 * auth_jwt with its variables, over both protocols, and a client that
 * leaves while its keys are fetched.  The user file is made by htpasswd
 * and openssl passwd in the case's directory; the JWTs and their keys are
 * jwt/vectors.h's.
 */
#include "tests/daemon.h"
#include "tests/helpers.h"

#include <check.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "jwt/vectors.h"

/* curl with `args` (-u, --http2-prior-knowledge...) for `path`: what it
 * prints, then " code=STATUS". */
static void curl(int port, const char *args, const char *path, char *out, size_t size)
{
    static char command[8192];
    snprintf(command, sizeof(command),
             "curl -s --max-time 20 %s -w ' code=%%{http_code}' http://127.0.0.1:%d%s", args, port,
             path);
    ck_assert_int_eq(test_run(command, out, size), 0);
}

/* The user file: alice (bcrypt), bob (apr1), carol (SHA-512-crypt). */
static void write_users(char *path, size_t size)
{
    test_daemon_file(path, size, "users");
    char command[3 * PATH_MAX + 256], out[256];
    snprintf(command, sizeof(command),
             "htpasswd -cbB -C 4 '%s' alice secret 2>&1 && htpasswd -bm '%s' bob 'b:pw' 2>&1 && "
             "printf 'carol:%%s\\n' \"$(openssl passwd -6 carolpw)\" >> '%s'",
             path, path, path);
    ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
}

static void start(struct test_daemon *d, const char *name, const char *text)
{
    test_daemon_init(d, name);
    test_daemon_write_config(d, text);
    test_daemon_start(d);
}

/* Basic auth in front of a proxied backend, over both protocols: the
 * backend sees $remote_user; without credentials or with wrong ones the
 * client gets 401 and the challenge, and the backend nothing. */
START_TEST(basic_auth_before_proxy_over_http1_and_http2)
{
    struct test_daemon backend, d;
    start(&backend, "backend",
          "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
          "server { listen 127.0.0.1:0; location / { return 200 \"user=$http_x_user\"; } }\n");
    char users[PATH_MAX], log[PATH_MAX], text[2 * PATH_MAX + 2048];
    write_users(users, sizeof(users));
    test_daemon_file(log, sizeof(log), "access.log");
    snprintf(text, sizeof(text),
             "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
             "access_log %s combined;\n"
             "auth_basic_user_file %s;\n"
             "server {\n  listen 127.0.0.1:0 http2;\n"
             "  auth_basic \"Area \\\"51\\\"\";\n"
             "  location / { proxy_pass http://127.0.0.1:%d;\n"
             "               proxy_set_header X-User $remote_user; }\n"
             "  location /open { auth_basic off; return 200 open; }\n"
             "}\n",
             log, users, backend.port);
    start(&d, "corral", text);
    char out[2048];
    static const char *const protocols[] = {"--http1.1", "--http2-prior-knowledge"};
    for (int i = 0; i < 2; i++) {
        char args[128];
        snprintf(args, sizeof(args), "%s -u alice:secret", protocols[i]);
        curl(d.port, args, "/x", out, sizeof(out));
        ck_assert_str_eq(out, "user=alice code=200");
        snprintf(args, sizeof(args), "%s -u bob:b:pw", protocols[i]);
        curl(d.port, args, "/x", out, sizeof(out));
        ck_assert_str_eq(out, "user=bob code=200");
        snprintf(args, sizeof(args), "%s -u carol:carolpw", protocols[i]);
        curl(d.port, args, "/x", out, sizeof(out));
        ck_assert_str_eq(out, "user=carol code=200");
        snprintf(args, sizeof(args), "%s -u alice:wrong", protocols[i]);
        curl(d.port, args, "/x", out, sizeof(out));
        ck_assert_str_eq(out, "401 Unauthorized\n code=401");
        snprintf(args, sizeof(args), "%s -u nobody:secret", protocols[i]);
        curl(d.port, args, "/x", out, sizeof(out));
        ck_assert_str_eq(out, "401 Unauthorized\n code=401");
        snprintf(args, sizeof(args), "%s -i", protocols[i]);
        curl(d.port, args, "/x", out, sizeof(out));
        ck_assert_msg(strcasestr(out, "\nwww-authenticate: Basic realm=\"Area \\\"51\\\"\"\r\n") !=
                          NULL,
                      "%s", out);
        curl(d.port, protocols[i], "/open", out, sizeof(out));
        ck_assert_str_eq(out, "open code=200");
    }
    test_daemon_stop(&d);
    test_daemon_stop(&backend);
    /* The combined format's user: who passed, "-" for the others. */
    char *lines = test_read_file(log);
    ck_assert_ptr_nonnull(lines);
    ck_assert_msg(strstr(lines, "127.0.0.1 - alice [") != NULL, "%s", lines);
    ck_assert_msg(strstr(lines, "127.0.0.1 - carol [") != NULL, "%s", lines);
    ck_assert_msg(strstr(lines, "127.0.0.1 - - [") != NULL, "%s", lines);
    ck_assert_msg(strstr(lines, "127.0.0.1 - nobody [") == NULL, "%s", lines);
    free(lines);
}
END_TEST

/* satisfy any: an allowed address needs no password, a denied one may
 * still log in; satisfy all: both must pass. */
START_TEST(satisfy_any_and_all)
{
    char users[PATH_MAX], text[PATH_MAX + 2048];
    write_users(users, sizeof(users));
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n  listen 127.0.0.1:0;\n"
             "  auth_basic_user_file %s;\n"
             "  location /any-allowed { satisfy any; allow 127.0.0.1; deny all;\n"
             "                          auth_basic a; return 200 in; }\n"
             "  location /any-denied { satisfy any; deny 127.0.0.1; allow all;\n"
             "                         auth_basic a; return 200 \"in $remote_user\"; }\n"
             "  location /any-no-auth { satisfy any; deny all; return 200 in; }\n"
             "  location /all-allowed { satisfy all; allow 127.0.0.1; deny all;\n"
             "                          auth_basic a; return 200 in; }\n"
             "  location /all-denied { deny all; auth_basic a; return 200 in; }\n"
             "}\n",
             users);
    struct test_daemon d;
    start(&d, "corral", text);
    char out[1024];
    curl(d.port, "", "/any-allowed", out, sizeof(out));
    ck_assert_str_eq(out, "in code=200");
    curl(d.port, "", "/any-denied", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    curl(d.port, "-u alice:secret", "/any-denied", out, sizeof(out));
    ck_assert_str_eq(out, "in alice code=200");
    curl(d.port, "-u alice:nope", "/any-denied", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    curl(d.port, "", "/any-no-auth", out, sizeof(out));
    ck_assert_str_eq(out, "403 Forbidden\n code=403");
    curl(d.port, "", "/all-allowed", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    curl(d.port, "-u alice:secret", "/all-allowed", out, sizeof(out));
    ck_assert_str_eq(out, "in code=200");
    curl(d.port, "-u alice:secret", "/all-denied", out, sizeof(out));
    ck_assert_str_eq(out, "403 Forbidden\n code=403");
    test_daemon_stop(&d);
}
END_TEST

/* Failures count in the zone; once one more would be over its rate, the
 * client is refused before any password check, the right one too.
 * Requests without credentials are not failures. */
START_TEST(failures_are_rate_limited)
{
    char users[PATH_MAX], text[PATH_MAX + 2048];
    write_users(users, sizeof(users));
    snprintf(text, sizeof(text),
             "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
             "limit_req_zone $binary_remote_addr zone=fails:1m rate=1r/m;\n"
             "server {\n  listen 127.0.0.1:0;\n"
             "  auth_basic a; auth_basic_user_file %s;\n"
             "  location / { auth_basic_fail_limit zone=fails burst=1; return 200 in; }\n"
             "  location /custom { auth_basic_fail_limit zone=fails status=503; return 200 in; }\n"
             "  location /unlimited { return 200 in; }\n"
             "}\n",
             users);
    struct test_daemon d;
    start(&d, "corral", text);
    char out[1024];
    for (int i = 0; i < 3; i++) {
        curl(d.port, "", "/", out, sizeof(out)); /* no credentials: not counted */
        ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    }
    curl(d.port, "-u alice:wrong1", "/", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    curl(d.port, "-u alice:secret", "/", out, sizeof(out));
    ck_assert_str_eq(out, "in code=200");
    curl(d.port, "-u alice:wrong2", "/", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    /* Two failures within the minute: burst=1 is used up. */
    curl(d.port, "-u alice:secret", "/", out, sizeof(out));
    ck_assert_str_eq(out, "429 Too Many Requests\n code=429");
    curl(d.port, "-u alice:wrong3", "/", out, sizeof(out));
    ck_assert_str_eq(out, "429 Too Many Requests\n code=429");
    curl(d.port, "-u alice:secret", "/custom", out, sizeof(out));
    ck_assert_str_eq(out, "503 Service Unavailable\n code=503");
    curl(d.port, "-u alice:secret", "/unlimited", out, sizeof(out));
    ck_assert_str_eq(out, "in code=200");
    test_daemon_stop(&d);
}
END_TEST

/* The file is read with the config: a bad entry fails the start, naming
 * the file and line; a location with auth_basic and no file too. */
START_TEST(bad_user_files_fail_the_config)
{
    char users[PATH_MAX], text[PATH_MAX + 2048], out[4096];
    test_daemon_file(users, sizeof(users), "users");
    test_write_file(users, "# users\nplain:secret\n");
    snprintf(text, sizeof(text),
             "server { listen 127.0.0.1:0; location / { auth_basic a; auth_basic_user_file %s; "
             "return 200; } }\n",
             users);
    char conf[PATH_MAX], args[PATH_MAX + 32];
    test_daemon_file(conf, sizeof(conf), "bad.conf");
    test_write_file(conf, text);
    snprintf(args, sizeof(args), "-t -c %s", conf);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, ":2: user \"plain\": plain-text") != NULL, "%s", out);
    test_write_file(conf,
                    "server { listen 127.0.0.1:0; location / { auth_basic a; return 200; } }\n");
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "no \"auth_basic_user_file\"") != NULL, "%s", out);
    /* The failure limit's zone must be a limit_req_zone. */
    test_write_file(users, "alice:$1$q1w2e3r4$rl1hveYwqCOI62HnfjoM7.\n");
    snprintf(text, sizeof(text),
             "limit_conn_zone $binary_remote_addr zone=conns:1m;\n"
             "server { listen 127.0.0.1:0; auth_basic a; auth_basic_user_file %s;\n"
             "  location / { auth_basic_fail_limit zone=nope; return 200; }\n"
             "  location /c { auth_basic_fail_limit zone=conns; return 200; } }\n",
             users);
    test_write_file(conf, text);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, ":3:38: auth_basic_fail_limit: unknown limit_req zone \"nope\"") !=
                      NULL,
                  "%s", out);
    snprintf(text, sizeof(text),
             "limit_conn_zone $binary_remote_addr zone=conns:1m;\n"
             "server { listen 127.0.0.1:0; auth_basic a; auth_basic_user_file %s;\n"
             "  location /c { auth_basic_fail_limit zone=conns; return 200; } }\n",
             users);
    test_write_file(conf, text);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "not a limit_req_zone") != NULL, "%s", out);
}
END_TEST

/* A bearer token in front of the handler, over HTTP/1.1 and HTTP/2: the
 * claims and header as variables; an expired, forged or missing token
 * is answered 401 with the Bearer challenge; token=$cookie_NAME; the
 * issuer and audience checks. */
START_TEST(jwt_over_http1_and_http2)
{
    char keys[PATH_MAX], text[PATH_MAX * 3 + 2048];
    test_daemon_file(keys, sizeof(keys), "jwks.json");
    test_write_file(keys, jwt_jwks);
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n  listen 127.0.0.1:0 http2;\n"
             "  auth_jwt_key_file %s;\n"
             "  location / { auth_jwt api; auth_jwt_audience web;\n"
             "    return 200 \"$jwt_claim_sub $jwt_claim_admin $jwt_claim_level $jwt_claim_groups "
             "$jwt_header_kid $jwt_claim_none.\"; }\n"
             "  location /cookie { auth_jwt api token=$cookie_auth; return 200 $jwt_claim_sub; }\n"
             "  location /issuer { auth_jwt api; auth_jwt_issuer https://other.example;\n"
             "                     return 200 in; }\n"
             "}\n",
             keys);
    struct test_daemon d;
    start(&d, "corral", text);
    static const char *const protocols[] = {"--http1.1", "--http2-prior-knowledge"};
    static char args[4096], out[4096];
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof(args), "%s -H 'Authorization: Bearer %s'", protocols[i], jwt_es256);
        curl(d.port, args, "/", out, sizeof(out));
        ck_assert_str_eq(out, "alice true 7 [\"a\",\"b\"] ec256 . code=200");
        snprintf(args, sizeof(args), "%s -H 'Authorization: Bearer %s'", protocols[i], jwt_rs256);
        curl(d.port, args, "/", out, sizeof(out));
        ck_assert_str_eq(out, "alice true 7 [\"a\",\"b\"] rsa1 . code=200");
        snprintf(args, sizeof(args), "%s -H 'Authorization: Bearer %s'", protocols[i], jwt_expired);
        curl(d.port, args, "/", out, sizeof(out));
        ck_assert_str_eq(out, "401 Unauthorized\n code=401");
        snprintf(args, sizeof(args), "%s -i -H 'Authorization: Bearer %s'", protocols[i],
                 jwt_confused);
        curl(d.port, args, "/", out, sizeof(out));
        ck_assert_msg(strcasestr(out, "\nwww-authenticate: Bearer realm=\"api\", "
                                      "error=\"invalid_token\"\r\n") != NULL,
                      "%s", out);
        snprintf(args, sizeof(args), "%s -i", protocols[i]);
        curl(d.port, args, "/", out, sizeof(out));
        ck_assert_msg(strcasestr(out, "\nwww-authenticate: Bearer realm=\"api\"\r\n") != NULL, "%s",
                      out);
        snprintf(args, sizeof(args), "%s -b 'auth=%s'", protocols[i], jwt_eddsa);
        curl(d.port, args, "/cookie", out, sizeof(out));
        ck_assert_str_eq(out, "alice code=200");
        snprintf(args, sizeof(args), "%s -H 'Authorization: Bearer %s'", protocols[i], jwt_hs256);
        curl(d.port, args, "/issuer", out, sizeof(out));
        ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    }
    /* No audience "web" in it. */
    snprintf(args, sizeof(args), "-H 'Authorization: Bearer %s'", jwt_no_times);
    curl(d.port, args, "/", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    test_daemon_stop(&d);
}
END_TEST

/* Lines in the file at `path` once it has `want` (a log line is written
 * just after its response went), or after TEST_WAIT_MS. */
static unsigned count_lines(const char *path, unsigned want)
{
    unsigned n = 0;
    for (int i = 0; i <= TEST_WAIT_MS / TEST_POLL_MS && n < want; i++) {
        if (i > 0)
            test_sleep_ms(TEST_POLL_MS);
        char *text = test_read_file(path);
        n = 0;
        for (const char *p = text; p != NULL && (p = strchr(p, '\n')) != NULL; p++)
            n++;
        free(text);
    }
    return n;
}

/* Keys fetched by a subrequest (auth_jwt_key_request) from a key server
 * (a second daemon serving jwks.json, which logs each fetch): fetched for
 * each request without auth_jwt_key_cache, once with it; a forged token
 * is still refused; a key server that is down or answers no key set
 * makes a 500; over HTTP/1.1 and HTTP/2. */
START_TEST(jwt_keys_fetched_by_subrequest)
{
    char keys[PATH_MAX], log[PATH_MAX], text[PATH_MAX * 3 + 2048];
    test_daemon_file(keys, sizeof(keys), "jwks.json");
    test_write_file(keys, jwt_jwks);
    test_daemon_file(log, sizeof(log), "fetches.log");
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", keys);
    *strrchr(dir, '/') = '\0';
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\naccess_log %s;\n"
             "server { listen 127.0.0.1:0; root %s;\n"
             "  location = /garbage.json { return 200 \"not a key set\"; } }\n",
             log, dir);
    struct test_daemon key_server, d;
    start(&key_server, "keys", text);
    int down;
    close(test_reserve_port(&down));
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n  listen 127.0.0.1:0 http2;\n"
             "  auth_jwt api;\n"
             "  location / { auth_jwt_key_request /_keys; return 200 $jwt_claim_sub; }\n"
             "  location /cached { auth_jwt_key_request /_keys; auth_jwt_key_cache 60s;\n"
             "    return 200 $jwt_claim_sub; }\n"
             "  location /down { auth_jwt_key_request /_down; return 200 never; }\n"
             "  location /garbage { auth_jwt_key_request /_garbage; return 200 never; }\n"
             "  location = /_keys { auth_jwt off; proxy_pass http://127.0.0.1:%d/jwks.json; }\n"
             "  location = /_down { auth_jwt off; proxy_pass http://127.0.0.1:%d/jwks.json; }\n"
             "  location = /_garbage { auth_jwt off;\n"
             "    proxy_pass http://127.0.0.1:%d/garbage.json; }\n"
             "}\n",
             key_server.port, down, key_server.port);
    start(&d, "corral", text);
    static char args[4096], out[4096];
    static const char *const protocols[] = {"--http1.1", "--http2-prior-knowledge"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof(args), "%s -H 'Authorization: Bearer %s'", protocols[i], jwt_es256);
        curl(d.port, args, "/", out, sizeof(out));
        ck_assert_str_eq(out, "alice code=200");
        snprintf(args, sizeof(args), "%s -H 'Authorization: Bearer %s'", protocols[i], jwt_bad_sig);
        curl(d.port, args, "/", out, sizeof(out));
        ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    }
    ck_assert_uint_eq(count_lines(log, 4), 4); /* each request fetched */
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof(args), "%s -H 'Authorization: Bearer %s'", protocols[i % 2],
                 jwt_rs256);
        curl(d.port, args, "/cached", out, sizeof(out));
        ck_assert_str_eq(out, "alice code=200");
    }
    ck_assert_uint_eq(count_lines(log, 5), 5); /* once, then kept */
    /* No token: refused before any fetch. */
    curl(d.port, "", "/", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    ck_assert_uint_eq(count_lines(log, 5), 5);
    snprintf(args, sizeof(args), "-o /dev/null -H 'Authorization: Bearer %s'", jwt_es256);
    curl(d.port, args, "/down", out, sizeof(out));
    ck_assert_str_eq(out, " code=500");
    curl(d.port, args, "/garbage", out, sizeof(out));
    ck_assert_str_eq(out, " code=500");
    char *errors = test_daemon_wait_log(&d, "auth_jwt_key_request /_garbage");
    free(errors);
    test_daemon_stop(&d);
    test_daemon_stop(&key_server);
}
END_TEST

/* A client that leaves, its body half sent, while the key server (it
 * accepts and never answers) has not given the keys: the daemon lets go
 * of the request and its fetch at once, and the stop does not wait. */
START_TEST(jwt_client_gone_while_keys_are_fetched)
{
    int silent_port;
    int silent = test_listen(&silent_port, 16);
    char text[2048];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n  listen 127.0.0.1:0;\n  auth_jwt api;\n"
             "  location / { auth_jwt_key_request /_keys; return 200 never; }\n"
             "  location = /_keys { auth_jwt off; proxy_pass http://127.0.0.1:%d; }\n}\n",
             silent_port);
    struct test_daemon d;
    start(&d, "corral", text);
    long active = -1, idle = 1; /* the one that asks */
    test_wait_for((active = test_daemon_connections_active(&d)) == idle, TEST_WAIT_MS,
                  "%ld connections, not %ld", active, idle);
    int fd = test_connect(d.port);
    static char request[4096];
    int n = snprintf(request, sizeof(request),
                     "POST / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                     "Content-Length: 10\r\n\r\n0123",
                     jwt_es256);
    ck_assert_int_lt(n, (int)sizeof(request));
    test_send_all(fd, request, (size_t)n);
    struct pollfd asked = {.fd = silent, .events = POLLIN};
    ck_assert_msg(poll(&asked, 1, TEST_WAIT_MS) == 1, "the key server was not asked");
    test_wait_for((active = test_daemon_connections_active(&d)) == idle + 1, TEST_WAIT_MS,
                  "%ld connections, not %ld", active, idle + 1);
    close(fd);
    test_wait_for((active = test_daemon_connections_active(&d)) == idle, 2000,
                  "the held request's connection is still open: %ld", active);
    uint64_t stop_ms = test_now_ms();
    test_daemon_stop(&d);
    /* Half the default drain_timeout (10 s): a loaded machine's stop may
     * take a second or two, one that waits for the drain takes 10. */
    ck_assert_msg(test_now_ms() - stop_ms < 5000, "the stop waited %llu ms",
                  (unsigned long long)(test_now_ms() - stop_ms));
    close(silent);
}
END_TEST

/* A reload reads the user file again: a changed password takes effect
 * at once, though the old one was in the workers' caches. */
START_TEST(reload_reads_the_user_file_again)
{
    char users[PATH_MAX], text[PATH_MAX + 2048], command[2 * PATH_MAX], out[1024];
    write_users(users, sizeof(users));
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "server { listen 127.0.0.1:0; auth_basic a; auth_basic_user_file %s;\n"
             "  location / { return 200 $remote_user; } }\n",
             users);
    struct test_daemon d;
    start(&d, "corral", text);
    curl(d.port, "-u alice:secret", "/", out, sizeof(out));
    ck_assert_str_eq(out, "alice code=200");
    curl(d.port, "-u alice:secret", "/", out, sizeof(out)); /* from the cache */
    ck_assert_str_eq(out, "alice code=200");
    snprintf(command, sizeof(command), "htpasswd -bB -C 4 '%s' alice changed 2>&1", users);
    ck_assert_int_eq(test_run(command, out, sizeof(out)), 0);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    test_daemon_wait_generation(&d, 2);
    curl(d.port, "-u alice:secret", "/", out, sizeof(out));
    ck_assert_str_eq(out, "401 Unauthorized\n code=401");
    curl(d.port, "-u alice:changed", "/", out, sizeof(out));
    ck_assert_str_eq(out, "alice code=200");
    test_daemon_stop(&d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/auth");
    TCase *tc = tcase_create("auth");
    tcase_set_timeout(tc, 60);
    test_daemon_fixture(tc);
    tcase_add_test(tc, basic_auth_before_proxy_over_http1_and_http2);
    tcase_add_test(tc, satisfy_any_and_all);
    tcase_add_test(tc, failures_are_rate_limited);
    tcase_add_test(tc, bad_user_files_fail_the_config);
    tcase_add_test(tc, jwt_over_http1_and_http2);
    tcase_add_test(tc, jwt_keys_fetched_by_subrequest);
    tcase_add_test(tc, jwt_client_gone_while_keys_are_fetched);
    tcase_add_test(tc, reload_reads_the_user_file_again);
    suite_add_tcase(suite, tc);
    return suite;
}
