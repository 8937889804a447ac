/*
 * test_daemon.c: build/corral as a user runs it: temporary configs on
 * ephemeral loopback ports, -t, --probe, serving, reloads (good, bad, under
 * load), graceful stop with a request in flight, and the wakeup mode on
 * /metrics.  The daemon binary is the one next to this test's build
 * directory (build/corral or build/asan/corral).
 */
#include "../daemon.h"
#include "../helpers.h"
#include "cmd/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A config on ephemeral ports answering `text` on /. */
static void write_config(struct test_daemon *d, const char *extra, const char *text)
{
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 2;\n%s\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { return 200 \"%s\"; }\n"
             "    location = /exact { return 201 \"exact\"; }\n}\n",
             extra, text);
    test_daemon_write_config(d, conf);
}

static int http_get(int port, const char *path, char *body, size_t size)
{
    return test_daemon_http_get("127.0.0.1", port, path, body, size);
}

START_TEST(check_config_exit_codes)
{
    struct test_daemon d;
    test_daemon_init(&d, "good");
    write_config(&d, "", "ok");
    char out[4096], args[PATH_MAX + 8];
    snprintf(args, sizeof(args), "-t -c %s", d.conf);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_int_eq(test_daemon_run("-t", out, sizeof(out)), 0); /* the built-in config */

    char bad[PATH_MAX];
    test_daemon_file(bad, sizeof(bad), "bad.conf");
    test_write_file(bad, "workers 2;\nwakeup sideways;\n");
    snprintf(args, sizeof(args), "-t -c %s", bad);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    char expected[PATH_MAX + 32];
    snprintf(expected, sizeof(expected), "%s:2:8: ", bad);
    ck_assert_msg(strstr(out, expected) != NULL, "no \"%s\" in:\n%s", expected, out);

    /* Every error, not the first only, then how many. */
    test_write_file(bad, "workers 2;\nwakeup sideways;\nserver {\n    lisen x;\n}\n");
    snprintf(args, sizeof(args), "-t -c %s", bad);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    snprintf(expected, sizeof(expected), "%s:4:5: unknown directive \"lisen\"", bad);
    ck_assert_msg(strstr(out, ":2:8: ") != NULL && strstr(out, expected) != NULL &&
                      strstr(out, ": 2 errors") != NULL,
                  "not every error in:\n%s", out);

    /* An nginx variable corral lacks says what to do. */
    test_write_file(bad, "server {\n    listen 127.0.0.1:0;\n"
                         "    location / { return 200 \"$ssl_client_raw_cert\"; }\n}\n");
    snprintf(args, sizeof(args), "-t -c %s", bad);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, ":3:29: return: \"$ssl_client_raw_cert\": not in corral yet: "
                              "client certificate variables (see \"auth and tracing\" in the "
                              "roadmap") != NULL,
                  "%s", out);

    snprintf(args, sizeof(args), "-t -c %s/missing.conf", test_daemon_dir());
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);

    /* Valid, but serving nothing: said, not refused. */
    char empty[PATH_MAX];
    test_daemon_file(empty, sizeof(empty), "empty.conf");
    test_write_file(empty, "# nothing yet\n");
    snprintf(args, sizeof(args), "-t -c %s", empty);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "warning: ") != NULL && strstr(out, "nothing will be served") != NULL,
                  "no warning in:\n%s", out);

    /* A name that does not resolve is not a format error. */
    test_write_file(bad, "server {\n    listen no-such-host.invalid:80;\n}\n");
    snprintf(args, sizeof(args), "-t -c %s", bad);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(
        strstr(out, ":2:12: listen address \"no-such-host.invalid:80\": host not found") != NULL,
        "%s", out);
}
END_TEST

/* --from-nginx: 0 when all is translated, and the output passes -t; 1
 * when something was not, named on stderr; 2 when it is not a config. */
START_TEST(from_nginx_exit_codes)
{
    char nginx[PATH_MAX], corral[PATH_MAX], out[8192], args[2 * PATH_MAX + 32];
    test_daemon_file(nginx, sizeof(nginx), "nginx.conf");
    test_daemon_file(corral, sizeof(corral), "translated.conf");
    test_write_file(nginx, "worker_processes 2;\nevents {\n    worker_connections 64;\n}\n"
                           "http {\n    sendfile on;\n    server {\n        listen 127.0.0.1:0;\n"
                           "        location / { return 204; }\n    }\n}\n");
    snprintf(args, sizeof(args), "--from-nginx %s > %s", nginx, corral);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 0);
    char *text = test_read_file(corral);
    ck_assert_msg(strstr(text, "\nworkers 2;\n") != NULL && strstr(text, "max_connections 64;"),
                  "%s", text);
    free(text);
    snprintf(args, sizeof(args), "-t -c %s", corral);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 0);

    test_write_file(nginx, "http {\n    random_index on;\n}\n");
    snprintf(args, sizeof(args), "--from-nginx %s", nginx);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 1);
    ck_assert_msg(
        strstr(
            out,
            "nginx.conf:2:5: \"random_index\": not in corral yet: this option of serving files") !=
            NULL,
        "%s", out);

    test_write_file(nginx, "http {\n");
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 2);
    snprintf(args, sizeof(args), "--from-nginx %s/missing.conf", test_daemon_dir());
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 2);
}
END_TEST

/* A config of an upstream of `count` servers proxied to, in `path`. */
static void write_upstream_config(const char *path, int count)
{
    size_t size = 256 + (size_t)count * 40;
    char *text = malloc(size);
    ck_assert_ptr_nonnull(text);
    size_t used = (size_t)snprintf(text, size,
                                   "workers 2;\nadmin { listen 127.0.0.2:0; }\nupstream many {\n");
    for (int i = 0; i < count; i++)
        used += (size_t)snprintf(text + used, size - used, "    server 127.0.%d.%d:%d;\n", i / 250,
                                 1 + i % 250, 20000 + i);
    snprintf(text + used, size - used,
             "}\nserver {\n    listen 127.0.0.1:0;\n"
             "    location / { proxy_pass http://many; }\n}\n");
    test_write_file(path, text);
    free(text);
}

/* More than 64 servers in an upstream (the bound once was 64, and -t then
 * exited without a word): -t and a start take them; one server more than
 * the bound is named with its position by -t and by a start alike. */
START_TEST(upstream_server_bound_is_named)
{
    char conf[PATH_MAX], out[4096], args[PATH_MAX + 8];
    test_daemon_file(conf, sizeof(conf), "up.conf");
    write_upstream_config(conf, 65);
    snprintf(args, sizeof(args), "-t -c %s", conf);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 0);
    struct test_daemon d;
    test_daemon_init(&d, "up");
    write_upstream_config(d.conf, 1024);
    test_daemon_start(&d);
    /* No server listens: the request goes to each of the 1024 in turn,
     * each tried once, then gets 502. */
    char body[256];
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 502);
    test_daemon_stop(&d);

    write_upstream_config(conf, 1025);
    char expected[PATH_MAX + 64];
    snprintf(expected, sizeof(expected), "%s:1028:12: upstream \"many\" has more than 1024 servers",
             conf);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, expected) != NULL, "no \"%s\" in:\n%s", expected, out);
    snprintf(args, sizeof(args), "-c %s", conf);
    ck_assert_int_eq(test_daemon_run(args, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, expected) != NULL, "no \"%s\" in:\n%s", expected, out);
    ck_assert_msg(strstr(out, "Invalid argument") == NULL, "%s", out);
}
END_TEST

START_TEST(probe_and_version)
{
    char out[8192];
    ck_assert_int_eq(test_daemon_run("--probe", out, sizeof(out)), 0);
    ck_assert_ptr_nonnull(strstr(out, "epoll_exclusive"));
    ck_assert_ptr_nonnull(strstr(out, "roundrobin  -> roundrobin"));
    ck_assert_ptr_nonnull(strstr(out, "herd        -> herd"));
    /* A quic listen's steering: eBPF where the wakeup modes get it. */
    const char *quic = strstr(out, "quic steering:\n  ");
    ck_assert_ptr_nonnull(quic);
    bool ebpf = strstr(out, "roundrobin  -> roundrobin (ebpf)") != NULL;
    ck_assert_msg(strncmp(quic + strlen("quic steering:\n  "), ebpf ? "ebpf (" : "cbpf (", 6) == 0,
                  "%s", out);
    ck_assert_int_eq(test_daemon_run("-V", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "corral " CORRAL_VERSION "\n");
    ck_assert_int_eq(test_daemon_run("--version", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "corral " CORRAL_VERSION "\n");
}
END_TEST

START_TEST(serves_and_reports_metrics)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "", "hello\\n");
    test_daemon_start(&d);
    char body[65536]; /* /metrics grows with every family */
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    ck_assert_str_eq(body, "hello\n");
    ck_assert_int_eq(http_get(d.port, "/exact", body, sizeof(body)), 201);
    ck_assert_int_eq(test_daemon_admin_get(&d, "/metrics", body, sizeof(body)), 200);
    ck_assert_ptr_nonnull(strstr(body, "corral_requests_total{code=\"200\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(body, "corral_requests_total{code=\"201\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(body, "corral_accepts_total{worker=\"1\"}"));
    ck_assert_int_eq(test_daemon_admin_get(&d, "/status", body, sizeof(body)), 200);
    ck_assert_ptr_nonnull(strstr(body, "\"config_generation\": 1"));
    ck_assert_int_eq(test_daemon_admin_get(&d, "/nothing", body, sizeof(body)), 404);
    test_daemon_stop(&d);
}
END_TEST

static const char *const modes[] = {"roundrobin", "affinity", "exclusive",
                                    "reuseport",  "herd",     "balanced"};

START_TEST(wakeup_mode_from_config_shows_in_metrics)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char extra[64];
    snprintf(extra, sizeof(extra), "wakeup %s;", modes[_i]);
    write_config(&d, extra, "ok");
    test_daemon_start(&d);
    char body[32768], expected[128];
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    ck_assert_int_eq(test_daemon_admin_get(&d, "/metrics", body, sizeof(body)), 200);
    snprintf(expected, sizeof(expected), "corral_wakeup_mode_info{requested=\"%s\",mode=\"%s\",",
             modes[_i], modes[_i]);
    ck_assert_msg(strstr(body, expected) != NULL, "no %s in\n%s", expected, body);
    /* balanced runs only over eBPF, and shows its steering per worker
     * (whether a worker took the request off another's queue depends on
     * timing, so not how many it took). */
    if (strcmp(modes[_i], "balanced") == 0) {
        ck_assert_ptr_nonnull(strstr(body, "corral_steered_total{worker=\"0\"}"));
        ck_assert_ptr_nonnull(strstr(body, "corral_steer_taken_total{worker=\"0\"} "));
    }
    test_daemon_stop(&d);
}
END_TEST

/* Whether GET / answers `expected` within TEST_WAIT_MS.  A reset fails the test,
 * unless `layout_changes`: a reload that changes the socket layout may reset
 * a connection queued at that instant (a documented limit). */
static bool answers(int port, const char *expected, bool layout_changes)
{
    char body[256];
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    /* Every 5 ms, not every TEST_POLL_MS: each look is a request. */
    for (int i = 0; i < TEST_WAIT_MS / 5 && test_now_ms() < deadline; i++) {
        int status = layout_changes
                         ? test_daemon_http_try_get("127.0.0.1", port, "/", body, sizeof(body))
                         : http_get(port, "/", body, sizeof(body));
        if (status == 200 && strcmp(body, expected) == 0)
            return true;
        test_sleep_ms(5);
    }
    return false;
}

START_TEST(reload_changes_the_answer_and_a_bad_one_keeps_it)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    /* exclusive: one shared socket (the default, steered by eBPF where it
     * loads, has one per worker). */
    write_config(&d, "wakeup exclusive;", "one");
    test_daemon_start(&d);
    ck_assert(answers(d.port, "one", false));

    write_config(&d, "wakeup exclusive;", "two");
    kill(d.pid, SIGHUP);
    ck_assert(answers(d.port, "two", false));

    /* A layout change (shared socket -> one per worker) works too. */
    write_config(&d, "wakeup reuseport;", "three");
    kill(d.pid, SIGHUP);
    ck_assert(answers(d.port, "three", true));

    test_write_file(d.conf, "workers 2;\nserver {\n    listen 127.0.0.1:0\n}\n");
    kill(d.pid, SIGHUP);
    /* The refusal is logged once the reload is over. */
    free(test_daemon_wait_log(&d, "keeps serving"));
    ck_assert(answers(d.port, "three", false));
    char *log = test_read_file(d.log);
    char expected[PATH_MAX + 16];
    snprintf(expected, sizeof(expected), "%s:4:1: ", d.conf);
    ck_assert_msg(strstr(log, expected) != NULL, "no \"%s\" in the log:\n%s", expected, log);
    ck_assert_ptr_nonnull(strstr(log, "keeps serving"));
    free(log);
    char body[8192];
    ck_assert_int_eq(test_daemon_admin_get(&d, "/status", body, sizeof(body)), 200);
    ck_assert_ptr_nonnull(strstr(body, "\"config_generation\": 3"));
    test_daemon_stop(&d);
}
END_TEST

/* Waits up to TEST_WAIT_MS until the daemon's workers hold `count` connections
 * besides the admin request asking: one still queued unaccepted would be
 * reset when a stop closes the listening sockets. */
static void wait_accepted(const struct test_daemon *d, int count)
{
    char body[8192], expected[64];
    snprintf(expected, sizeof(expected), "\"connections_active\": %d}", count + 1);
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    for (int i = 0; i < TEST_WAIT_MS / 5 && test_now_ms() < deadline; i++) {
        if (test_daemon_admin_get(d, "/status", body, sizeof(body)) == 200 &&
            strstr(body, expected) != NULL)
            return;
        test_sleep_ms(5);
    }
    ck_abort_msg("not %d connections after %d ms: %s", count, TEST_WAIT_MS, body);
}

START_TEST(sigterm_lets_an_in_flight_request_finish)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "drain_timeout 10s;", "done");
    test_daemon_start(&d);
    int fd = test_connect(d.port);
    const char *head = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhalf.";
    test_send_all(fd, head, strlen(head));
    wait_accepted(&d, 1);
    kill(d.pid, SIGTERM);
    /* Still running once the stop has begun: a request is in flight (and
     * is answered below, which a daemon gone could not do). */
    free(test_daemon_wait_log(&d, "stopping gracefully"));
    ck_assert_int_eq(waitpid(d.pid, NULL, WNOHANG), 0);
    test_send_all(fd, "rest.", 5);
    char response[1024];
    size_t len = test_recv_all(fd, response, sizeof(response) - 1);
    response[len] = '\0';
    ck_assert_ptr_nonnull(strstr(response, "HTTP/1.1 200 OK"));
    ck_assert_ptr_nonnull(strstr(response, "\r\n\r\ndone"));
    close(fd);
    ck_assert_int_eq(test_wait_exit(d.pid, 5000), 0);
}
END_TEST

/* ------------------------------------------------------ load and reloads */

struct load {
    int port;
    atomic_bool stop;
    atomic_uint ok, failed, retried;
    bool keep_alive;
};

static void *load_main(void *arg)
{
    struct load *load = arg;
    int fd = -1;
    bool reused = false;
    for (int i = 0; i < 100000 && !atomic_load(&load->stop); i++) {
        if (fd == -1) {
            fd = test_connect(load->port);
            reused = false;
        }
        const char *req = load->keep_alive
                              ? "GET / HTTP/1.1\r\nHost: t\r\n\r\n"
                              : "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
        if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
            atomic_fetch_add(reused ? &load->retried : &load->failed, 1);
            close(fd);
            fd = -1;
            continue;
        }
        char response[512];
        size_t len = 0;
        /* Read one response: its head, then 3 bytes of body ("one"/"two"). */
        while (len < sizeof(response) - 1) {
            ssize_t n = recv(fd, response + len, sizeof(response) - 1 - len, 0);
            if (n <= 0)
                break;
            len += (size_t)n;
            response[len] = '\0';
            char *end = strstr(response, "\r\n\r\n");
            if (end != NULL && response + len >= end + 7)
                break;
        }
        response[len] = '\0';
        if (len == 0 && reused) {
            /* The server closed an idle keep-alive connection as the request
             * went out: a client retries on a new connection, as RFC 9112
             * 9.3.1 allows (curl and browsers do). */
            atomic_fetch_add(&load->retried, 1);
            close(fd);
            fd = -1;
            continue;
        }
        if (strncmp(response, "HTTP/1.1 200", 12) == 0)
            atomic_fetch_add(&load->ok, 1);
        else
            atomic_fetch_add(&load->failed, 1);
        reused = true;
        if (!load->keep_alive || len == 0 || strstr(response, "Connection: close") != NULL) {
            close(fd);
            fd = -1;
        }
    }
    if (fd != -1)
        close(fd);
    return NULL;
}

static unsigned loads_ok(struct load *loads, int count)
{
    unsigned ok = 0;
    for (int i = 0; i < count; i++)
        ok += atomic_load(&loads[i].ok);
    return ok;
}

static unsigned loads_failed(struct load *loads, int count)
{
    unsigned failed = 0;
    for (int i = 0; i < count; i++)
        failed += atomic_load(&loads[i].failed);
    return failed;
}

/* Waits until the load has had `more` requests answered, so that what
 * comes next happens under load; a failed request ends the wait (the
 * case reports it). */
static void loads_wait_progress(struct load *loads, int count, unsigned more)
{
    unsigned from = loads_ok(loads, count);
    test_wait_for(loads_ok(loads, count) - from >= more || loads_failed(loads, count) > 0,
                  TEST_WAIT_MS, "only %u requests answered in %d ms", loads_ok(loads, count) - from,
                  TEST_WAIT_MS);
}

START_TEST(five_reloads_under_load_lose_nothing)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "", "one");
    test_daemon_start(&d);
    struct load loads[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        loads[i] = (struct load){.port = d.port, .keep_alive = i % 2 == 0};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, load_main, &loads[i]), 0);
    }
    for (int r = 0; r < 5; r++) {
        /* Each reload under load, once the one before has taken (signals
         * sent closer together would merge into one). */
        loads_wait_progress(loads, 4, 20);
        write_config(&d, "", r % 2 == 0 ? "two" : "one");
        kill(d.pid, SIGHUP);
        test_daemon_wait_generation(&d, (unsigned)r + 2);
    }
    loads_wait_progress(loads, 4, 20);
    test_wait_for(loads_ok(loads, 4) > 100, TEST_WAIT_MS, "only %u requests", loads_ok(loads, 4));
    unsigned ok = 0, failed = 0;
    for (int i = 0; i < 4; i++) {
        atomic_store(&loads[i].stop, true);
        pthread_join(threads[i], NULL);
        ok += atomic_load(&loads[i].ok);
        failed += atomic_load(&loads[i].failed);
    }
    ck_assert_uint_gt(ok, 100);
    ck_assert_msg(failed == 0, "%u of %u requests failed", failed, ok + failed);
    test_daemon_wait_generation(&d, 6);
    test_daemon_stop(&d);
}
END_TEST

/* Starts `d` on a socket bound and listening before it starts, passed the
 * way systemd passes one, its config listening there with
 * `listen_parameters` and answering "ok".  Returns the test's own
 * descriptor of that socket. */
static int start_on_passed_socket(struct test_daemon *d, const char *listen_parameters)
{
    struct sockaddr_storage addr;
    socklen_t len;
    ck_assert_int_eq(corral_parse_address("127.0.0.1:0", &addr, &len), 0);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(bind(listener, (struct sockaddr *)&addr, len), 0);
    ck_assert_int_eq(listen(listener, 16), 0);
    len = sizeof(addr);
    ck_assert_int_eq(getsockname(listener, (struct sockaddr *)&addr, &len), 0);
    char bound[64];
    corral_format_address((struct sockaddr *)&addr, len, bound, sizeof(bound));

    test_daemon_init(d, "corral");
    char conf[512];
    snprintf(conf, sizeof(conf),
             "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
             "server { listen %s%s; location / { return 200 \"ok\"; } }\n",
             bound, listen_parameters);
    test_write_file(d->conf, conf);
    test_daemon_spawn(d, listener);
    test_daemon_wait_listening(d);
    return listener;
}

START_TEST(socket_activation_serves_the_passed_socket)
{
    struct test_daemon d;
    close(start_on_passed_socket(&d, ""));
    char body[256];
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    ck_assert_str_eq(body, "ok");
    char *log = test_read_file(d.log);
    ck_assert_ptr_nonnull(strstr(log, "socket activation: "));
    free(log);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(listen_options_apply_to_a_passed_socket)
{
    struct test_daemon d;
    int listener = start_on_passed_socket(&d, " deferred backlog=100");
    /* The daemon's socket is this one: for a listening socket TCP_INFO
     * reports the backlog in tcpi_sacked. */
    struct tcp_info info;
    socklen_t len = sizeof(info);
    ck_assert_int_eq(getsockopt(listener, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
    ck_assert_uint_eq(info.tcpi_sacked, 100);
    int defer_s = 0;
    len = sizeof(defer_s);
    ck_assert_int_eq(getsockopt(listener, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, &len), 0);
    ck_assert_int_gt(defer_s, 0);
    close(listener);
    char body[256];
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    test_daemon_stop(&d);
}
END_TEST

/* The state of the server's end of the connection from `client_port` to
 * `server_port` in /proc/net/tcp (1 established, 3 SYN_RECV), or -1. */
static int server_side_state(int server_port, int client_port)
{
    FILE *table = fopen("/proc/net/tcp", "r");
    ck_assert_ptr_nonnull(table);
    char line[512];
    int state = -1;
    while (state == -1 && fgets(line, sizeof(line), table) != NULL) {
        unsigned local_port, remote_port, st;
        if (sscanf(line, " %*u: %*x:%x %*x:%x %x", &local_port, &remote_port, &st) == 3 &&
            (int)local_port == server_port && (int)remote_port == client_port)
            state = (int)st;
    }
    fclose(table);
    return state;
}

START_TEST(deferred_listen_accepts_when_the_request_arrives)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                                 "server { listen 127.0.0.1:0 deferred; "
                                 "location / { return 200 \"ok\"; } }\n");
    test_daemon_start(&d);
    int fd = test_connect(d.port);
    struct sockaddr_in client;
    socklen_t len = sizeof(client);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&client, &len), 0);
    /* The handshake's last ACK is held back: the connection stays a request
     * in SYN_RECV, not a socket for the daemon to accept.  (The ACK went
     * out before connect() returned; the pause gives a kernel that would
     * complete the handshake the time to show it, since no event marks
     * that it did not.) */
    test_sleep_ms(20);
    ck_assert_int_eq(server_side_state(d.port, ntohs(client.sin_port)), 3);
    const char request[] = "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    test_send_all(fd, request, sizeof(request) - 1);
    char response[512];
    ssize_t n = recv(fd, response, sizeof(response) - 1, MSG_WAITALL);
    ck_assert_int_gt(n, 0);
    response[n] = '\0';
    ck_assert_msg(strncmp(response, "HTTP/1.1 200 ", 13) == 0, "%s", response);
    close(fd);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(pid_file_log_file_and_reopen)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char pid_file[256], log_file[256], rotated[256], extra[1024];
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    test_daemon_file(log_file, sizeof(log_file), "error.log");
    test_daemon_file(rotated, sizeof(rotated), "error.log.1");
    snprintf(extra, sizeof(extra), "pid_file %s;\nerror_log %s info;", pid_file, log_file);
    write_config(&d, extra, "ok");
    /* The log goes to the file, not to d.log: wait for the pid file. */
    test_daemon_spawn(&d, -1);
    strcpy(d.log, log_file);
    /* The file exists before its line is written. */
    char *pid_text = test_wait_file(pid_file, "\n", TEST_WAIT_MS);
    ck_assert_int_eq(atoi(pid_text), d.pid);
    free(pid_text);

    ck_assert_int_eq(rename(log_file, rotated), 0);
    kill(d.pid, SIGUSR1);
    /* The file exists before the line saying so is written. */
    free(test_daemon_wait_log(&d, "SIGUSR1: log reopened")); /* d.log is log_file */
    char *log = test_read_file(rotated);
    ck_assert_ptr_nonnull(strstr(log, "listening on"));
    free(log);
    test_daemon_stop(&d);
    ck_assert_int_ne(access(pid_file, F_OK), 0); /* removed at exit */
}
END_TEST

START_TEST(access_log_lines_formats_and_reopen)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char log_file[256], rotated[256], extra[512];
    test_daemon_file(log_file, sizeof(log_file), "access.log");
    test_daemon_file(rotated, sizeof(rotated), "access.log.1");
    snprintf(extra, sizeof(extra), "access_log %s;", log_file);
    write_config(&d, extra, "ok");
    test_daemon_start(&d);

    int fd = test_connect(d.port);
    const char *req = "GET /a?b=1 HTTP/1.1\r\nHost: t\r\nReferer: http://r/\r\n"
                      "User-Agent: agent \"quoted\"\r\nConnection: close\r\n\r\n";
    test_send_all(fd, req, strlen(req));
    char response[512];
    test_recv_all(fd, response, sizeof(response));
    close(fd);
    /* The line is written once the response is out. */
    char *log = test_wait_file(log_file, "\n", TEST_WAIT_MS);
    /* Combined format plus request and upstream time; quotes escaped. */
    ck_assert_msg(strstr(log, "127.0.0.1 - - [") == log, "log:\n%s", log);
    ck_assert_msg(strstr(log, "] \"GET /a?b=1 HTTP/1.1\" 200 2 \"http://r/\" "
                              "\"agent \\x22quoted\\x22\" 0.") != NULL,
                  "log:\n%s", log);
    ck_assert_ptr_nonnull(strstr(log, " -\n")); /* no upstream */
    free(log);

    /* Rotation: the old file keeps its lines, SIGUSR1 starts a new one. */
    ck_assert_int_eq(rename(log_file, rotated), 0);
    kill(d.pid, SIGUSR1);
    /* Logged once every log is reopened. */
    free(test_daemon_wait_log(&d, "SIGUSR1: log reopened"));
    char body[64];
    ck_assert_int_eq(http_get(d.port, "/exact", body, sizeof(body)), 201);
    free(test_wait_file(log_file, "\"GET /exact HTTP/1.1\" 201 ", TEST_WAIT_MS));
    test_daemon_stop(&d);

    /* log_format picks the fields; an unknown variable is refused. */
    snprintf(extra, sizeof(extra), "access_log %s;\nlog_format \"$status $request_method $host\";",
             log_file);
    write_config(&d, extra, "ok");
    unlink(log_file);
    unlink(d.log); /* the first daemon's ports must not be read as the second's */
    test_daemon_start(&d);
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    log = test_wait_file(log_file, "\n", TEST_WAIT_MS);
    ck_assert_str_eq(log, "200 GET test\n");
    free(log);
    test_daemon_stop(&d);

    snprintf(extra, sizeof(extra), "access_log %s;\nlog_format \"$status $nope\";", log_file);
    write_config(&d, extra, "ok");
    char out[1024], args[PATH_MAX + 8];
    snprintf(args, sizeof(args), "-t -c %s", d.conf);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "log_format: unknown variable \"$nope\"") != NULL, "%s", out);
}
END_TEST

START_TEST(drops_privileges_after_binding)
{
    if (geteuid() != 0) {
        fprintf(stderr, "privilege drop: not root, skipped\n");
        return;
    }
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    chmod(test_daemon_dir(), 0755); /* readable by nobody for the reload */
    write_config(&d, "user nobody;\ngroup nogroup;", "dropped");
    test_daemon_start(&d);
    char body[256];
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    /* The drop follows the start (workers may answer just before it). */
    char status_path[64];
    snprintf(status_path, sizeof(status_path), "/proc/%d/status", (int)d.pid);
    free(test_daemon_wait_log(&d, "running as uid"));
    char *status = test_read_file(status_path);
    char *line = strstr(status, "\nUid:");
    ck_assert_ptr_nonnull(line);
    ck_assert_int_ne(atoi(line + 5), 0);
    free(status);
    test_daemon_stop(&d);
}
END_TEST

/* The certbot case: a key only root may read, renewed, then a reload by a
 * daemon that runs as nobody.  As nginx's master reads it, so does the
 * reload; the configuration's directory is root's only too. */
START_TEST(reload_after_the_drop_reads_root_only_keys)
{
    if (geteuid() != 0) {
        fprintf(stderr, "privilege drop: not root, skipped\n");
        return;
    }
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    chmod(test_daemon_dir(), 0700);
    char cert[PATH_MAX], key[PATH_MAX], command[5 * PATH_MAX];
    test_daemon_file(cert, sizeof(cert), "cert.pem");
    test_daemon_file(key, sizeof(key), "key.pem");
    snprintf(command, sizeof(command),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
             "-subj /CN=test -keyout %s -out %s >/dev/null 2>&1 && chmod 600 %s %s",
             key, cert, key, cert);
    ck_assert_int_eq(system(command), 0);
    char conf[3 * PATH_MAX];
    snprintf(conf, sizeof(conf),
             "workers 1;\nuser nobody;\ngroup nogroup;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.4:0 tls;\n    tls_certificate %s;\n"
             "    tls_certificate_key %s;\n    location / { return 200 \"tls\"; }\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { return 200 \"plain\"; }\n}\n",
             cert, key);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    free(test_daemon_wait_log(&d, "running as uid"));
    /* Renewed: a new key and certificate in place, root's only. */
    ck_assert_int_eq(system(command), 0);
    kill(d.pid, SIGHUP);
    char *log = test_daemon_wait_log(&d, "generation 1: draining");
    ck_assert_msg(strstr(log, "reload failed") == NULL && strstr(log, "cannot read") == NULL, "%s",
                  log);
    free(log);
    char body[64];
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    ck_assert_str_eq(body, "plain");
    test_daemon_stop(&d);
}
END_TEST

/* ------------------------------------------------------------- error log */

/* Writes a line of `len` bytes of message through the daemon's logger into
 * a fresh file and returns the file's contents. */
static char *log_line(const char *name, bool plain, size_t len)
{
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), name);
    ck_assert_int_eq(daemon_log_open(path), 0);
    daemon_log_plain(plain);
    char *message = malloc(len + 1);
    ck_assert_ptr_nonnull(message);
    memset(message, 'x', len);
    message[len] = '\0';
    daemon_log_write(CORRAL_LOG_ERROR, message, NULL);
    free(message);
    return test_read_file(path);
}

START_TEST(log_lines_keep_their_end_whatever_their_length)
{
    /* Around the size of the buffer the line was once formatted into. */
    static const size_t lengths[] = {0, 1, 1023, 1165, 1166, 1167, 1198, 1199, 1200, 5000};
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        for (int plain = 0; plain < 2; plain++) {
            char name[64];
            snprintf(name, sizeof(name), "error-%zu-%d.log", lengths[i], plain);
            char *text = log_line(name, plain, lengths[i]);
            size_t len = strlen(text);
            ck_assert_msg(len > 0 && text[len - 1] == '\n' && strchr(text, '\n') == text + len - 1,
                          "a %zu-byte message (plain %d) is not one line", lengths[i], plain);
            size_t prefix = plain ? 0 : strlen("2026-12-03T04:33:16.293Z [error] ");
            ck_assert_uint_eq(len, prefix + lengths[i] + 1);
            ck_assert(plain || strstr(text, "Z [error] ") == text + 23);
            free(text);
        }
    }
}
END_TEST

/* ------------------------------------------------- workers that stop alone */

/* Starts `d` with refuse_listeners.so (built next to the daemon) preloaded,
 * in `mode` (see refuse_listeners.c). */
static void spawn_refusing_listeners(struct test_daemon *d, const char *mode)
{
    const char *binary = test_daemon_binary();
    const char *slash = strrchr(binary, '/');
    char lib[PATH_MAX + 64], options[1024];
    snprintf(lib, sizeof(lib), "%.*s/obj/tests/cmd/refuse_listeners.so",
             slash != NULL ? (int)(slash - binary) : 1, slash != NULL ? binary : ".");
    ck_assert_msg(access(lib, R_OK) == 0, "%s: %s", lib, strerror(errno));
    /* gcc's ASan runtime, a shared library, insists on coming first among
     * the libraries (clang's, linked into the program, checks nothing);
     * this one intercepts nothing ASan does. */
    const char *asan = getenv("ASAN_OPTIONS");
    snprintf(options, sizeof(options), "%s%sverify_asan_link_order=0", asan != NULL ? asan : "",
             asan != NULL && asan[0] != '\0' ? ":" : "");
    setenv("ASAN_OPTIONS", options, 1);
    setenv("LD_PRELOAD", lib, 1);
    setenv("REFUSE_LISTENERS", mode, 1);
    test_daemon_spawn(d, -1);
    unsetenv("LD_PRELOAD");
}

/* Waits up to 10 s for `d` to exit by itself: its exit status, 128 +
 * signal, or -1 if it still runs. */
static int wait_own_exit(struct test_daemon *d)
{
    uint64_t deadline = test_now_ms() + 10000;
    for (int i = 0; i <= 10000 / TEST_POLL_MS && test_now_ms() < deadline; i++) {
        int raw;
        if (waitpid(d->pid, &raw, WNOHANG) == d->pid) {
            d->pid = -1;
            return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        }
        test_sleep_ms(TEST_POLL_MS);
    }
    return -1;
}

START_TEST(exits_with_an_error_when_every_worker_stops_on_its_own)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "", "ok");
    spawn_refusing_listeners(&d, "all");
    /* Nothing accepts any more: the daemon says so and exits with an error
     * for its supervisor to see, instead of running on and refusing every
     * connection. */
    int status = wait_own_exit(&d);
    if (status == -1) {
        /* Still running without a worker: reload and stop must be safe. */
        kill(d.pid, SIGHUP);
        test_sleep_ms(300); /* only after a failure already: what the reload does */
        kill(d.pid, SIGTERM);
        status = test_wait_exit(d.pid, 5000);
        d.pid = -1;
        ck_abort_msg("the daemon ran on without workers; after SIGHUP and SIGTERM, status %d:\n%s",
                     status, test_read_file(d.log));
    }
    char *log = test_read_file(d.log);
    ck_assert_msg(status == 1, "exit status %d:\n%s", status, log);
    ck_assert_msg(strstr(log, "worker 0: stopped on error") != NULL, "%s", log);
    ck_assert_msg(strstr(log, "generation 1: every worker stopped on its own; stopping") != NULL,
                  "%s", log);
    free(log);
}
END_TEST

/* Connects to 127.0.0.1:port: 0, or the errno of the failure. */
static int try_connect(int port)
{
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    int err = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 ? 0 : errno;
    close(fd);
    return err;
}

START_TEST(sigterm_refuses_new_clients_while_draining)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "drain_timeout 10s;", "done");
    test_daemon_start(&d);
    /* A reload first: the draining generation must let go of the sockets
     * too. */
    write_config(&d, "drain_timeout 10s;", "done");
    kill(d.pid, SIGHUP);
    ck_assert(answers(d.port, "done", false));
    int fd = test_connect(d.port);
    const char *head = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhalf.";
    test_send_all(fd, head, strlen(head));
    wait_accepted(&d, 1);
    kill(d.pid, SIGTERM);
    /* Refused, not queued where no worker will accept it.  A SYN that
     * meets a listening socket as it closes is reset instead: not queued
     * either. */
    int err = 0;
    test_wait_for((err = try_connect(d.port)) != 0, TEST_WAIT_MS, "still connects");
    ck_assert_msg(err == ECONNREFUSED || err == ECONNRESET, "a new client during the drain: %s",
                  err != 0 ? strerror(err) : "connected");
    ck_assert_int_eq(waitpid(d.pid, NULL, WNOHANG), 0);
    test_send_all(fd, "rest.", 5);
    char response[1024];
    size_t len = test_recv_all(fd, response, sizeof(response) - 1);
    response[len] = '\0';
    ck_assert_msg(strstr(response, "\r\n\r\ndone") != NULL, "%s", response);
    close(fd);
    ck_assert_int_eq(test_wait_exit(d.pid, 5000), 0);
    d.pid = -1;
}
END_TEST

START_TEST(sigusr1_reopens_the_access_log_of_a_draining_generation)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char log_file[256], rotated[256], extra[512];
    test_daemon_file(log_file, sizeof(log_file), "access.log");
    test_daemon_file(rotated, sizeof(rotated), "access.log.1");
    snprintf(extra, sizeof(extra), "drain_timeout 10s;\naccess_log %s;", log_file);
    write_config(&d, extra, "one");
    test_daemon_start(&d);
    /* A request half sent keeps generation 1 draining after the reload, and
     * is answered, and logged, after the rotation.  (It asks to close: the
     * connection would otherwise move on to generation 2.) */
    int fd = test_connect(d.port);
    const char *head = "GET /draining HTTP/1.1\r\nHost: t\r\nConnection: close\r\n";
    test_send_all(fd, head, strlen(head));
    wait_accepted(&d, 1);
    write_config(&d, extra, "two");
    kill(d.pid, SIGHUP);
    ck_assert(answers(d.port, "two", false));

    ck_assert_int_eq(rename(log_file, rotated), 0);
    kill(d.pid, SIGUSR1);
    /* Logged once every generation's logs are reopened. */
    free(test_daemon_wait_log(&d, "SIGUSR1: log reopened"));
    test_send_all(fd, "\r\n", 2);
    char response[1024];
    size_t len = test_recv_all(fd, response, sizeof(response) - 1);
    response[len] = '\0';
    ck_assert_msg(strstr(response, "\r\n\r\none") != NULL, "%s", response);
    close(fd);
    free(test_wait_file(log_file, "\"GET /draining HTTP/1.1\" 200 ", TEST_WAIT_MS));
    test_daemon_stop(&d);
}
END_TEST

START_TEST(pid_file_goes_after_dropping_privileges)
{
    if (geteuid() != 0) {
        fprintf(stderr, "pid file after a privilege drop: not root, skipped\n");
        return;
    }
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    /* Readable by nobody for the config, writable by root only, as /run. */
    chmod(test_daemon_dir(), 0755);
    char pid_file[256], extra[512];
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    snprintf(extra, sizeof(extra), "user nobody;\ngroup nogroup;\npid_file %s;", pid_file);
    write_config(&d, extra, "dropped");
    test_daemon_start(&d);
    free(test_daemon_wait_log(&d, "running as uid"));
    char *pid_text = test_read_file(pid_file);
    ck_assert_int_eq(atoi(pid_text), d.pid);
    free(pid_text);
    test_daemon_stop(&d);
    char *log = test_read_file(d.log);
    ck_assert_msg(access(pid_file, F_OK) != 0, "the pid file is left behind:\n%s", log);
    ck_assert_msg(strstr(log, "[error]") == NULL, "%s", log);
    free(log);
}
END_TEST

START_TEST(metrics_keep_long_upstream_names_apart)
{
    /* Two names alike in their first 64 bytes, on a port that refuses. */
    char a[80], b[80];
    memset(a, 'u', 70);
    memcpy(b, a, 70);
    strcpy(a + 70, "-a");
    strcpy(b + 70, "-b");
    int port;
    int reserved = test_reserve_port(&port);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream %s { server 127.0.0.1:%d max_fails=0; }\n"
             "upstream %s { server 127.0.0.1:%d max_fails=0; }\n"
             "server {\n    listen 127.0.0.1:0;\n"
             "    location /a { proxy_pass http://%s; }\n"
             "    location /b { proxy_pass http://%s; }\n}\n",
             a, port, b, port, a, b);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    char body[16384], expected[256];
    ck_assert_int_eq(http_get(d.port, "/a", body, sizeof(body)), 502);
    ck_assert_int_eq(test_daemon_admin_get(&d, "/metrics", body, sizeof(body)), 200);
    snprintf(expected, sizeof(expected), "corral_upstream_errors_total{upstream=\"%s\",", a);
    ck_assert_msg(strstr(body, expected) != NULL, "no %s in\n%s", expected, body);
    snprintf(expected, sizeof(expected), "corral_upstream_errors_total{upstream=\"%s\"", b);
    ck_assert_msg(strstr(body, expected) == NULL, "%s counted for /a:\n%s", b, body);
    test_daemon_stop(&d);
    close(reserved);
}
END_TEST

START_TEST(stops_when_some_workers_stopped_on_their_own)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "", "ok");
    spawn_refusing_listeners(&d, "all-but-one");
    test_daemon_wait_listening(&d);
    /* The request once the other workers are gone: one that came before
     * could wait in the queue of a worker about to stop. */
    free(test_daemon_wait_log(&d, ": stopped on error"));
    char body[256];
    ck_assert_int_eq(http_get(d.port, "/", body, sizeof(body)), 200);
    /* The workers left close the sockets and stop; those gone must not be
     * waited for. */
    test_daemon_stop(&d);
}
END_TEST

START_TEST(stops_when_a_reload_cannot_recreate_the_sockets)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    /* One shared socket to start with: rebind refuses a reuseport group. */
    write_config(&d, "wakeup exclusive;", "one");
    spawn_refusing_listeners(&d, "rebind");
    test_daemon_wait_listening(&d);
    ck_assert(answers(d.port, "one", false));
    /* A layout change closes the sockets; binding the port again fails. */
    write_config(&d, "wakeup reuseport;", "two");
    kill(d.pid, SIGHUP);
    int status = wait_own_exit(&d);
    if (status == -1) {
        test_daemon_kill(&d);
        ck_abort_msg("the daemon ran on accepting nothing:\n%s", test_read_file(d.log));
    }
    char *log = test_read_file(d.log);
    ck_assert_msg(status == 1, "exit status %d:\n%s", status, log);
    ck_assert_msg(strstr(log, "generation 1 no longer accepts; stopping") != NULL, "%s", log);
    free(log);
}
END_TEST

START_TEST(a_pid_file_that_cannot_be_removed_is_logged)
{
    if (geteuid() != 0) {
        fprintf(stderr, "pid file removal failure: not root, skipped\n");
        return;
    }
    /* The daemon runs as nobody from the start; its pid file's directory
     * is nobody's until the test takes the write permission away. */
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    chmod(test_daemon_dir(), 0755);
    char run[256], pid_file[300], extra[512];
    test_daemon_file(run, sizeof(run), "run");
    ck_assert_int_eq(mkdir(run, 0755), 0);
    ck_assert_int_eq(chown(run, 65534, 65534), 0);
    snprintf(pid_file, sizeof(pid_file), "%s/corral.pid", run);
    snprintf(extra, sizeof(extra), "pid_file %s;", pid_file);
    write_config(&d, extra, "ok");
    pid_t parent = getpid();
    d.pid = fork();
    ck_assert_int_ge(d.pid, 0);
    if (d.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(d.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (getppid() != parent || fd == -1 || setgroups(0, NULL) != 0 || setgid(65534) != 0 ||
            setuid(65534) != 0)
            _exit(127);
        signal(SIGPIPE, SIG_DFL);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(test_daemon_binary(), test_daemon_binary(), "-c", d.conf, (char *)NULL);
        _exit(127);
    }
    test_daemon_wait_listening(&d);
    test_wait_for(access(pid_file, F_OK) == 0, TEST_WAIT_MS, "no %s", pid_file);
    ck_assert_int_eq(chmod(run, 0555), 0);
    test_daemon_stop(&d);
    char *log = test_read_file(d.log);
    char expected[400];
    snprintf(expected, sizeof(expected), "pid_file %s: removing it: Permission denied", pid_file);
    ck_assert_msg(strstr(log, expected) != NULL, "no \"%s\" in:\n%s", expected, log);
    free(log);
}
END_TEST

/* ------------------------------------------------------- a second daemon */

/* The port of the first "listening on `host`:" line in d's log, or 0. */
static int logged_port(const struct test_daemon *d, const char *host)
{
    char *log = test_daemon_log(d), key[64];
    snprintf(key, sizeof(key), "listening on %s:", host);
    const char *at = strstr(log, key);
    int port = at != NULL ? atoi(at + strlen(key)) : 0;
    free(log);
    return port;
}

/* `workers`, a plain listener on 127.0.0.1, a TLS one on 127.0.0.3 and the
 * admin one on 127.0.0.2, at ports[0], [1] and [2] (0: ephemeral). */
static void write_three_listeners(struct test_daemon *d, unsigned workers, const int ports[3],
                                  const char *text)
{
    char conf[PATH_MAX * 2 + 1024];
    snprintf(conf, sizeof(conf),
             "workers %u;\nadmin { listen 127.0.0.2:%d; }\n"
             "server {\n    listen 127.0.0.1:%d;\n    location / { return 200 \"%s\"; }\n}\n"
             "server {\n    listen 127.0.0.3:%d tls;\n"
             "    tls_certificate %s/cert.pem;\n    tls_certificate_key %s/key.pem;\n"
             "    location / { return 200 \"%s\"; }\n}\n",
             workers, ports[2], ports[0], text, ports[1], test_daemon_dir(), test_daemon_dir(),
             text);
    test_daemon_write_config(d, conf);
}

/* A TLS handshake with 127.0.0.3:port completes. */
static void check_tls_handshake(int port)
{
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.3:%d", port);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    ck_assert_ptr_nonnull(ctx);
    int fd = test_connect_address(address);
    SSL *ssl = SSL_new(ctx);
    ck_assert_ptr_nonnull(ssl);
    SSL_set_fd(ssl, fd);
    ck_assert_int_eq(SSL_connect(ssl), 1);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
}

/* A second daemon configured with an address the first listens on fails to
 * start and says which address, whatever the worker count (a per-worker
 * SO_REUSEPORT group would otherwise let it join and take connections),
 * for a plain, a TLS and the admin listener; the first keeps every socket
 * and serves on. */
START_TEST(a_second_daemon_cannot_take_a_listened_address)
{
    static const unsigned counts[] = {1, 2, 4};
    unsigned workers = counts[_i];
    char command[PATH_MAX + 256];
    snprintf(command, sizeof(command),
             "cd '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout key.pem -out cert.pem -subj /CN=t -days 2 >/dev/null 2>&1",
             test_daemon_dir());
    ck_assert_int_eq(system(command), 0);
    struct test_daemon first;
    test_daemon_init(&first, "first");
    const int ephemeral[3] = {0, 0, 0};
    write_three_listeners(&first, workers, ephemeral, "first");
    test_daemon_start(&first);
    const char *hosts[3] = {"127.0.0.1", "127.0.0.3", "127.0.0.2"};
    /* first.port is the last listener's: either of the two. */
    const int taken[3] = {logged_port(&first, "127.0.0.1"), logged_port(&first, "127.0.0.3"),
                          first.admin_port};
    ck_assert_int_gt(taken[0], 0);
    ck_assert_int_gt(taken[1], 0);
    for (int kind = 0; kind < 3; kind++) {
        int sockets = test_listen_sockets(hosts[kind], taken[kind]);
        ck_assert_int_ge(sockets, 1);
        struct test_daemon second;
        test_daemon_init(&second, "second");
        int ports[3] = {0, 0, 0};
        ports[kind] = taken[kind];
        write_three_listeners(&second, workers, ports, "second");
        test_daemon_spawn(&second, -1);
        int status = test_wait_exit(second.pid, 5000);
        second.pid = -1;
        char *log = test_daemon_log(&second), expected[128];
        snprintf(expected, sizeof(expected),
                 "%s:%d: address already in use (another process listens there)", hosts[kind],
                 taken[kind]);
        ck_assert_msg(status == 1 && strstr(log, expected) != NULL,
                      "workers %u: status %d, no \"%s\" in:\n%s", workers, status, expected, log);
        free(log);
        ck_assert_int_eq(test_listen_sockets(hosts[kind], taken[kind]), sockets);
        for (int i = 0; i < 8; i++) {
            char body[256];
            ck_assert_int_eq(http_get(taken[0], "/", body, sizeof(body)), 200);
            ck_assert_str_eq(body, "first");
            ck_assert_int_eq(test_daemon_admin_get(&first, "/healthz", body, sizeof(body)), 200);
            check_tls_handshake(taken[1]);
        }
    }
    test_daemon_stop(&first);
}
END_TEST

/* d's log, polled up to 5 s until it has `text`; fails the test if not. */
static void wait_log(const struct test_daemon *d, const char *text)
{
    free(test_daemon_wait_log(d, text));
}

/* A listen that overlaps another on the same port (`*:PORT` beside
 * `127.0.0.1:PORT`) is refused at start and on a reload, naming the listen
 * it overlaps, with a shared socket or one per worker alike.  The wildcard
 * never binds: it comes second. */
START_TEST(an_overlapping_listen_is_refused_and_named)
{
    unsigned workers = _i == 0 ? 1 : 2;
    int port;
    close(test_reserve_port(&port));
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[1024], expected[256];
    snprintf(conf, sizeof(conf),
             "workers %u;\nadmin { listen 127.0.0.2:0; }\n"
             "server { listen 127.0.0.1:%d; location / { return 200 \"one\"; } }\n"
             "server { listen *:%d; location / { return 200 \"two\"; } }\n",
             workers, port, port);
    test_daemon_write_config(&d, conf);
    test_daemon_spawn(&d, -1);
    int status = test_wait_exit(d.pid, 5000);
    d.pid = -1;
    ck_assert_int_eq(status, 1);
    snprintf(expected, sizeof(expected),
             "listen *:%d: address already in use (by listen 127.0.0.1:%d of this configuration)",
             port, port);
    wait_log(&d, expected);

    snprintf(conf, sizeof(conf),
             "workers %u;\nadmin { listen 127.0.0.2:0; }\n"
             "server { listen 127.0.0.1:%d; location / { return 200 \"one\"; } }\n",
             workers, port);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    snprintf(conf, sizeof(conf),
             "workers %u;\nadmin { listen 127.0.0.2:0; }\n"
             "server { listen *:%d; location / { return 200 \"two\"; } }\n",
             workers, port);
    test_daemon_write_config(&d, conf);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    snprintf(expected, sizeof(expected),
             "listen *:%d: address already in use (by listen 127.0.0.1:%d of the running "
             "configuration)",
             port, port);
    wait_log(&d, expected);
    wait_log(&d, "keeps serving");
    char body[256];
    ck_assert_int_eq(http_get(port, "/", body, sizeof(body)), 200);
    ck_assert_str_eq(body, "one");
    test_daemon_stop(&d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("cmd/daemon");
    TCase *tc = tcase_create("daemon");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, check_config_exit_codes);
    tcase_add_test(tc, from_nginx_exit_codes);
    tcase_add_test(tc, upstream_server_bound_is_named);
    tcase_add_test(tc, probe_and_version);
    tcase_add_test(tc, serves_and_reports_metrics);
    tcase_add_loop_test(tc, wakeup_mode_from_config_shows_in_metrics, 0,
                        (int)(sizeof(modes) / sizeof(modes[0])));
    tcase_add_test(tc, reload_changes_the_answer_and_a_bad_one_keeps_it);
    tcase_add_test(tc, sigterm_lets_an_in_flight_request_finish);
    tcase_add_test(tc, five_reloads_under_load_lose_nothing);
    tcase_add_test(tc, socket_activation_serves_the_passed_socket);
    tcase_add_test(tc, listen_options_apply_to_a_passed_socket);
    tcase_add_test(tc, deferred_listen_accepts_when_the_request_arrives);
    tcase_add_test(tc, pid_file_log_file_and_reopen);
    tcase_add_test(tc, access_log_lines_formats_and_reopen);
    tcase_add_test(tc, drops_privileges_after_binding);
    tcase_add_test(tc, reload_after_the_drop_reads_root_only_keys);
    suite_add_tcase(suite, tc);

    /* Stops, reloads and signals in unusual states. */
    TCase *states = tcase_create("states");
    test_daemon_fixture(states);
    tcase_set_timeout(states, 60);
    tcase_add_test(states, exits_with_an_error_when_every_worker_stops_on_its_own);
    tcase_add_test(states, stops_when_some_workers_stopped_on_their_own);
    tcase_add_test(states, stops_when_a_reload_cannot_recreate_the_sockets);
    tcase_add_test(states, sigterm_refuses_new_clients_while_draining);
    tcase_add_test(states, sigusr1_reopens_the_access_log_of_a_draining_generation);
    tcase_add_test(states, pid_file_goes_after_dropping_privileges);
    tcase_add_test(states, a_pid_file_that_cannot_be_removed_is_logged);
    tcase_add_test(states, metrics_keep_long_upstream_names_apart);
    tcase_add_loop_test(states, a_second_daemon_cannot_take_a_listened_address, 0, 3);
    tcase_add_loop_test(states, an_overlapping_listen_is_refused_and_named, 0, 2);
    suite_add_tcase(suite, states);

    TCase *log = tcase_create("log");
    test_daemon_fixture(log);
    tcase_set_timeout(log, 30);
    tcase_add_test(log, log_lines_keep_their_end_whatever_their_length);
    suite_add_tcase(suite, log);
    return suite;
}
