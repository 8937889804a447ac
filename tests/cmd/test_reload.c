/*
 * test_reload.c: reloads that lose nothing.  build/corral under keep-alive
 * and connection-per-request load while it reloads between two configs, one
 * of which changes the listening socket layout: every request must be
 * answered, on the connection it was sent on.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <unistd.h>

/* ------------------------------------------------------------------ load */

/* One client thread: requests on one keep-alive connection at a time, or a
 * connection per request.  Unlike a browser, it never retries: a request
 * that goes unanswered, on a connection the server closed without saying
 * "Connection: close" first, is a failure. */
struct load {
    int port;
    bool keep_alive;
    atomic_bool stop;
    atomic_uint ok, failed, one, two;
    char why[128]; /* the first failure */
};

static void load_fail(struct load *load, const char *what, int err)
{
    if (atomic_fetch_add(&load->failed, 1) == 0)
        snprintf(load->why, sizeof(load->why), "%s, %s: %s",
                 load->keep_alive ? "keep-alive" : "a connection per request", what,
                 err ? strerror(err) : "closed");
}

static int load_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -1;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* Reads one response with a Content-Length body into `buf`.  Returns its
 * length, 0 if the connection ended first, or -errno. */
static ssize_t read_response(int fd, char *buf, size_t size)
{
    size_t len = 0;
    while (len < size - 1) {
        ssize_t n = recv(fd, buf + len, size - 1 - len, 0);
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            return -errno;
        if (n == 0)
            return 0;
        len += (size_t)n;
        buf[len] = '\0';
        const char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strstr(buf, "Content-Length: ");
        if (end != NULL && cl != NULL && buf + len >= end + 4 + atoi(cl + 16))
            return (ssize_t)len;
    }
    return -EMSGSIZE;
}

static void *load_main(void *arg)
{
    struct load *load = arg;
    const char *req = load->keep_alive ? "GET / HTTP/1.1\r\nHost: t\r\n\r\n"
                                       : "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    int fd = -1;
    uint64_t deadline = test_now_ms() + 30000;
    for (int i = 0; i < 200000 && !atomic_load(&load->stop) && test_now_ms() < deadline; i++) {
        if (fd == -1 && (fd = load_connect(load->port)) == -1) {
            load_fail(load, "connect", errno);
            continue;
        }
        if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
            load_fail(load, "send", errno);
            close(fd);
            fd = -1;
            continue;
        }
        char response[1024];
        ssize_t len = read_response(fd, response, sizeof(response));
        if (len <= 0 || strncmp(response, "HTTP/1.1 200", 12) != 0) {
            load_fail(load, len <= 0 ? "recv" : "status", len < 0 ? (int)-len : 0);
            close(fd);
            fd = -1;
            continue;
        }
        atomic_fetch_add(&load->ok, 1);
        if (strstr(response, "\r\n\r\none") != NULL)
            atomic_fetch_add(&load->one, 1);
        else if (strstr(response, "\r\n\r\ntwo") != NULL)
            atomic_fetch_add(&load->two, 1);
        if (!load->keep_alive || strstr(response, "Connection: close") != NULL) {
            close(fd);
            fd = -1;
        }
    }
    if (fd != -1)
        close(fd);
    return NULL;
}

#define LOADERS 4

struct loaders {
    struct load load[LOADERS];
    pthread_t thread[LOADERS];
};

static void loaders_start(struct loaders *l, int port)
{
    for (int i = 0; i < LOADERS; i++) {
        l->load[i] = (struct load){.port = port, .keep_alive = i % 2 == 0};
        ck_assert_int_eq(pthread_create(&l->thread[i], NULL, load_main, &l->load[i]), 0);
    }
}

static unsigned loaders_ok(struct loaders *l)
{
    unsigned ok = 0;
    for (int i = 0; i < LOADERS; i++)
        ok += atomic_load(&l->load[i].ok);
    return ok;
}

static unsigned loaders_failed(struct loaders *l)
{
    unsigned failed = 0;
    for (int i = 0; i < LOADERS; i++)
        failed += atomic_load(&l->load[i].failed);
    return failed;
}

/* Waits until the load has had `count` more requests answered, so that
 * what comes next happens under load; a failed request ends the wait
 * (loaders_check() reports it). */
static void loaders_wait_progress(struct loaders *l, unsigned count)
{
    unsigned from = loaders_ok(l);
    test_wait_for(loaders_ok(l) - from >= count || loaders_failed(l) > 0, TEST_WAIT_MS,
                  "only %u requests answered in %d ms", loaders_ok(l) - from, TEST_WAIT_MS);
}

/* Stops the load and checks that nothing failed, that there was load, and
 * that both answers were seen. */
static void loaders_check(struct loaders *l, bool both_answers)
{
    unsigned ok = 0, failed = 0, one = 0, two = 0;
    const char *why = "";
    for (int i = 0; i < LOADERS; i++)
        atomic_store(&l->load[i].stop, true);
    for (int i = 0; i < LOADERS; i++) {
        pthread_join(l->thread[i], NULL);
        ok += atomic_load(&l->load[i].ok);
        one += atomic_load(&l->load[i].one);
        two += atomic_load(&l->load[i].two);
        if (atomic_load(&l->load[i].failed) > 0 && failed == 0)
            why = l->load[i].why;
        failed += atomic_load(&l->load[i].failed);
    }
    ck_assert_msg(failed == 0, "%u of %u requests failed (first: %s)", failed, ok + failed, why);
    ck_assert_uint_gt(ok, 200);
    if (both_answers)
        ck_assert_msg(one > 0 && two > 0, "answers: %u \"one\", %u \"two\"", one, two);
}

/* ----------------------------------------------------------------- cases */

/* A config of `workers` answering `text` on an ephemeral port, with `extra`
 * directives. */
static void write_workers_config(struct test_daemon *d, unsigned workers, const char *extra,
                                 const char *text)
{
    char conf[PATH_MAX + 1024];
    snprintf(conf, sizeof(conf),
             "workers %u;\n%s\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { return 200 \"%s\"; }\n}\n",
             workers, extra, text);
    test_daemon_write_config(d, conf);
}

/* The same with 2 workers. */
static void write_config(struct test_daemon *d, const char *extra, const char *text)
{
    write_workers_config(d, 2, extra, text);
}

/* pid_file is read at start only: a reload that changes it says so. */
START_TEST(a_reload_names_what_needs_a_restart)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char first[PATH_MAX], second[PATH_MAX], extra[PATH_MAX + 16];
    test_daemon_file(first, sizeof(first), "first.pid");
    test_daemon_file(second, sizeof(second), "second.pid");
    snprintf(extra, sizeof(extra), "pid_file %s;", first);
    write_config(&d, extra, "one");
    test_daemon_start(&d);
    snprintf(extra, sizeof(extra), "pid_file %s;", second);
    write_config(&d, extra, "two");
    kill(d.pid, SIGHUP);
    char *log = test_daemon_wait_log(&d, "generation 1: draining");
    char expected[3 * PATH_MAX];
    snprintf(expected, sizeof(expected),
             "[warn] reload: \"pid_file\" changed from %s to %s; it is read at start only: "
             "restart corral",
             first, second);
    ck_assert_msg(strstr(log, expected) != NULL, "%s", log);
    ck_assert_msg(strstr(log, "\"user\" changed") == NULL, "%s", log);
    free(log);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(ten_reloads_under_load_fail_no_request)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "", "one");
    test_daemon_start(&d);
    struct loaders l;
    loaders_start(&l, d.port);
    for (int r = 0; r < 10; r++) {
        /* Each reload under load, once the one before has taken (signals
         * sent closer together would merge into one). */
        loaders_wait_progress(&l, 25);
        /* Every other reload switches between a shared socket and one per
         * worker, which re-creates the listening sockets. */
        if (r % 2 == 0)
            write_config(&d, "wakeup reuseport;", "two");
        else
            write_config(&d, "", "one");
        kill(d.pid, SIGHUP);
        test_daemon_wait_generation(&d, (unsigned)r + 2);
    }
    loaders_wait_progress(&l, 25);
    test_wait_for(loaders_ok(&l) > 200, TEST_WAIT_MS, "only %u requests", loaders_ok(&l));
    loaders_check(&l, true);
    test_daemon_stop(&d);
}
END_TEST

/* A config of 2 workers answering on an ephemeral port that listens with
 * `flags` (" http2", or ""). */
static void write_listen_config(struct test_daemon *d, const char *flags)
{
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.1:0%s;\n    location / { return 200 \"ok\"; }\n}\n",
             flags);
    test_daemon_write_config(d, conf);
}

/* A connection that has sent only part of the HTTP/2 preface is still
 * choosing its protocol when a reload hands it over: it chooses under the
 * configuration it moves to, where HTTP/2 is off, so the whole preface is
 * an HTTP/1.1 request line there, refused. */
START_TEST(a_connection_still_choosing_chooses_under_its_new_site)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_listen_config(&d, " http2");
    test_daemon_start(&d);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    int fd = test_connect(d.port);
    test_send_all(fd, preface, 16);
    write_listen_config(&d, "");
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    /* The old generation ends once its connection has moved. */
    free(test_daemon_wait_log(&d, "generation 1 finished"));
    test_send_all(fd, preface + 16, sizeof(preface) - 1 - 16);
    char response[512];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(response) - 1 &&
           ((n = recv(fd, response + len, sizeof(response) - 1 - len, 0)) > 0 ||
            (n == -1 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    response[len] = '\0';
    ck_assert_msg(strncmp(response, "HTTP/1.1 400 ", 13) == 0, "%s", response);
    close(fd);
    test_daemon_stop(&d);
}
END_TEST

/* ------------------------------------------------------------------- TLS */

/* Self-signed certificates CN=one and CN=two in the case's directory,
 * made by the openssl command with a config of its own. */
static void make_certificates(void)
{
    char conf[PATH_MAX], command[4 * PATH_MAX];
    test_daemon_file(conf, sizeof(conf), "openssl.cnf");
    test_write_file(conf, "[req]\ndistinguished_name = dn\n[dn]\n");
    for (int i = 0; i < 2; i++) {
        const char *name = i == 0 ? "one" : "two";
        snprintf(command, sizeof(command),
                 "cd '%s' && OPENSSL_CONF=openssl.cnf openssl req -x509 -newkey ec "
                 "-pkeyopt ec_paramgen_curve:P-256 -nodes -keyout %s.key -out %s.pem "
                 "-subj /CN=%s -days 2 2>/dev/null",
                 test_daemon_dir(), name, name, name);
        ck_assert_int_eq(system(command), 0);
    }
}

static void write_tls_config(struct test_daemon *d, const char *name)
{
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "workers 2;\n%s\nadmin { listen 127.0.0.2:0; }\n"
             "server {\n    listen 127.0.0.1:0 tls;\n"
             "    tls_certificate %s/%s.pem;\n    tls_certificate_key %s/%s.key;\n"
             "    location / { return 200 \"%s\"; }\n}\n",
             strcmp(name, "two") == 0 ? "wakeup reuseport;" : "", test_daemon_dir(), name,
             test_daemon_dir(), name, name);
    test_daemon_write_config(d, conf);
}

struct tls_client {
    SSL_CTX *ctx;
    SSL *ssl;
    int fd;
};

static void tls_client_open(struct tls_client *c, int port)
{
    c->ctx = SSL_CTX_new(TLS_client_method());
    ck_assert_ptr_nonnull(c->ctx);
    c->fd = load_connect(port);
    ck_assert_int_ge(c->fd, 0);
    c->ssl = SSL_new(c->ctx);
    ck_assert_ptr_nonnull(c->ssl);
    SSL_set_fd(c->ssl, c->fd);
    ck_assert_int_eq(SSL_connect(c->ssl), 1);
}

static void tls_client_close(struct tls_client *c)
{
    SSL_free(c->ssl);
    SSL_CTX_free(c->ctx);
    close(c->fd);
}

/* The common name of the certificate the server presented. */
static void tls_peer_name(const struct tls_client *c, char *name, size_t size)
{
    X509 *cert = SSL_get1_peer_certificate(c->ssl);
    ck_assert_ptr_nonnull(cert);
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, name, (int)size);
    X509_free(cert);
}

/* GET / on the connection: the response's body, or "" if it ended. */
static void tls_get(struct tls_client *c, char *body, size_t size)
{
    const char *req = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert_int_eq(SSL_write(c->ssl, req, (int)strlen(req)), (int)strlen(req));
    char response[2048];
    size_t len = 0;
    body[0] = '\0';
    while (len < sizeof(response) - 1) {
        int n = SSL_read(c->ssl, response + len, (int)(sizeof(response) - 1 - len));
        if (n <= 0)
            return;
        len += (size_t)n;
        response[len] = '\0';
        const char *end = strstr(response, "\r\n\r\n");
        const char *cl = strstr(response, "Content-Length: ");
        if (end != NULL && cl != NULL && response + len >= end + 4 + atoi(cl + 16)) {
            snprintf(body, size, "%s", end + 4);
            return;
        }
    }
}

START_TEST(a_tls_keep_alive_connection_survives_a_reload)
{
    make_certificates();
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_tls_config(&d, "one");
    test_daemon_start(&d);
    struct tls_client c;
    tls_client_open(&c, d.port);
    char body[64], name[64];
    tls_get(&c, body, sizeof(body));
    ck_assert_str_eq(body, "one");
    tls_peer_name(&c, name, sizeof(name));
    ck_assert_str_eq(name, "one");

    /* A change of socket layout too: the connection moves all the same. */
    write_tls_config(&d, "two");
    kill(d.pid, SIGHUP);
    struct tls_client fresh = {0};
    bool served = false;
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    for (int i = 0; i < TEST_WAIT_MS / 10 && !served && test_now_ms() < deadline; i++) {
        if (i > 0)
            test_sleep_ms(10); /* each try is a handshake: not every TEST_POLL_MS */
        tls_client_open(&fresh, d.port);
        tls_get(&fresh, body, sizeof(body));
        /* A connection the old generation accepted just before the reload
         * has its certificate and moves to the new one for its request:
         * the reload has taken when a new handshake gets the new one. */
        tls_peer_name(&fresh, name, sizeof(name));
        served = strcmp(body, "two") == 0 && strcmp(name, "two") == 0;
        tls_client_close(&fresh);
    }
    ck_assert_msg(served, "the reload did not take");
    /* The old connection is served by the new configuration, once its
     * old generation has handed it over (a request that comes first is
     * the old one's to answer, with its configuration). */
    test_wait_for((tls_get(&c, body, sizeof(body)), strcmp(body, "two") == 0), TEST_WAIT_MS,
                  "the kept connection still answers \"%s\"", body);
    tls_get(&c, body, sizeof(body));
    ck_assert_str_eq(body, "two");
    tls_client_close(&c);
    test_daemon_stop(&d);
}
END_TEST

/* ---------------------------------------------------------------- systemd */

/* The next notification that changes the state (not a status update alone)
 * into `buf`; fails the test after 10 s without one. */
static void next_state(int sock, char *buf, size_t size)
{
    for (int i = 0; i < 100; i++) {
        ssize_t n = recv(sock, buf, size - 1, 0);
        ck_assert_msg(n > 0, "no notification: %s", n == -1 ? strerror(errno) : "empty");
        buf[n] = '\0';
        if (strncmp(buf, "STATUS=", 7) != 0)
            return;
    }
    ck_abort_msg("only status updates");
}

/* A fake service manager's socket at `name` (a path, or "@" and an abstract
 * name), for NOTIFY_SOCKET. */
static int notify_socket(const char *name)
{
    int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(sock, 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(name), sizeof(addr.sun_path));
    memcpy(addr.sun_path, name, strlen(name));
    if (name[0] == '@')
        addr.sun_path[0] = '\0';
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name));
    ck_assert_int_eq(bind(sock, (struct sockaddr *)&addr, len), 0);
    return sock;
}

/* A fake service manager: a datagram socket at a path, or at an abstract
 * name (`_i` 1), which the daemon finds in NOTIFY_SOCKET. */
START_TEST(notifies_ready_reloading_ready_stopping)
{
    char name[108];
    if (_i == 0)
        test_daemon_file(name, sizeof(name), "notify");
    else
        snprintf(name, sizeof(name), "@corral-test-notify-%d", (int)getpid());
    int sock = notify_socket(name);

    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_config(&d, "", "one");
    setenv("NOTIFY_SOCKET", name, 1);
    test_daemon_start(&d);
    unsetenv("NOTIFY_SOCKET");
    char message[512];
    next_state(sock, message, sizeof(message));
    ck_assert_msg(strstr(message, "READY=1\n") != NULL, "%s", message);
    ck_assert_msg(strstr(message, "STATUS=generation 1, ") != NULL, "%s", message);

    write_config(&d, "", "two");
    kill(d.pid, SIGHUP);
    next_state(sock, message, sizeof(message));
    ck_assert_msg(strstr(message, "RELOADING=1\nMONOTONIC_USEC=") != NULL, "%s", message);
    next_state(sock, message, sizeof(message));
    ck_assert_msg(strstr(message, "READY=1\n") != NULL, "%s", message);
    ck_assert_msg(strstr(message, "STATUS=generation 2, ") != NULL, "%s", message);

    test_daemon_stop(&d);
    next_state(sock, message, sizeof(message));
    ck_assert_msg(strstr(message, "STOPPING=1\n") != NULL, "%s", message);
    close(sock);
}
END_TEST

/* ---------------------------------------------------------- binary upgrade */

/* The daemons of a case: an upgraded one is the child of the one before,
 * which this process adopts (a subreaper) once that one exits.  Killed
 * when the case ends early. */
static pid_t daemons[8];
static int daemon_count;

static void kill_daemons(void)
{
    for (int i = 0; i < daemon_count; i++)
        if (daemons[i] > 0)
            kill(daemons[i], SIGKILL);
}

static void track_daemon(pid_t pid)
{
    if (daemon_count == 0)
        atexit(kill_daemons);
    ck_assert_int_lt(daemon_count, 8);
    daemons[daemon_count++] = pid;
}

/* Whether `pid` has exited (and is reaped) within `ms`. */
static bool daemon_gone(pid_t pid, int ms)
{
    uint64_t deadline = test_now_ms() + (uint64_t)ms;
    for (int i = 0; i <= ms / TEST_POLL_MS; i++) {
        int status;
        pid_t rc = waitpid(pid, &status, WNOHANG);
        if (rc == pid || (rc == -1 && errno == ECHILD && kill(pid, 0) == -1 && errno == ESRCH))
            return true;
        if (test_now_ms() >= deadline)
            break;
        test_sleep_ms(TEST_POLL_MS);
    }
    return false;
}

static pid_t read_pid(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    int pid = -1;
    if (fscanf(f, "%d", &pid) != 1)
        pid = -1;
    fclose(f);
    return pid;
}

/* Starts a copy of the daemon binary at DIR/corral (the path an upgrade
 * starts again) on `d`'s config, its output to d's log. */
static void spawn_copy(struct test_daemon *d, const char *binary)
{
    char command[3 * PATH_MAX];
    snprintf(command, sizeof(command), "cp '%s' '%s'", test_daemon_binary(), binary);
    ck_assert_int_eq(system(command), 0);
    int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    pid_t parent = getpid();
    d->pid = fork();
    ck_assert_int_ge(d->pid, 0);
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        signal(SIGPIPE, SIG_DFL);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(binary, binary, "-c", d->conf, (char *)NULL);
        _exit(127);
    }
    close(fd);
    track_daemon(d->pid);
    test_daemon_wait_listening(d);
}

/* Sends SIGUSR2 to `old` and waits until the pid file names a new process
 * and `old` has exited.  Returns the new process. */
static pid_t upgrade(const struct test_daemon *d, const char *pid_file, pid_t old)
{
    ck_assert_int_eq(kill(old, SIGUSR2), 0);
    pid_t pid = -1;
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    for (int i = 0; i <= TEST_WAIT_MS / TEST_POLL_MS && (pid == -1 || pid == old); i++) {
        if (test_now_ms() >= deadline)
            break;
        test_sleep_ms(TEST_POLL_MS);
        pid = read_pid(pid_file);
    }
    char *log = test_daemon_log(d);
    ck_assert_msg(pid > 0 && pid != old, "no new process in %s:\n%s", pid_file, log);
    free(log);
    track_daemon(pid);
    ck_assert_msg(daemon_gone(old, 20000), "process %d still runs", (int)old);
    return pid;
}

static void write_upgrade_config(struct test_daemon *d, const char *pid_file, const char *text)
{
    char extra[PATH_MAX + 32];
    snprintf(extra, sizeof(extra), "pid_file %s;", pid_file);
    write_config(d, extra, text);
}

/* The first problem a daemon's log reports (an error, a sanitizer's or
 * UBSan's report), with what comes before it, for a failure message that
 * fits; NULL if there is none. */
static const char *log_problem(const char *log)
{
    static const char *const marks[] = {"[error]", "Sanitizer", "runtime error"};
    const char *first = NULL;
    for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
        const char *at = strstr(log, marks[i]);
        if (at != NULL && (first == NULL || at < first))
            first = at;
    }
    if (first == NULL)
        return NULL;
    return first - log > 1000 ? first - 1000 : log;
}

START_TEST(three_upgrades_under_load_fail_no_request)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char binary[PATH_MAX], pid_file[PATH_MAX], oldbin[PATH_MAX + 8];
    test_daemon_file(binary, sizeof(binary), "corral");
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    snprintf(oldbin, sizeof(oldbin), "%s.oldbin", pid_file);
    char name[108];
    test_daemon_file(name, sizeof(name), "notify");
    int sock = notify_socket(name);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_upgrade_config(&d, pid_file, "one");
    setenv("NOTIFY_SOCKET", name, 1);
    spawn_copy(&d, binary);
    unsetenv("NOTIFY_SOCKET");
    int port = d.port;
    struct loaders l;
    loaders_start(&l, port);
    pid_t pid = d.pid;
    for (int i = 0; i < 3; i++) {
        loaders_wait_progress(&l, 25); /* each upgrade under load */
        pid_t old = pid;
        pid = upgrade(&d, pid_file, old);
        /* The old process removed it on exit.  (Waited for, not looked at
         * once: whatever the order in which the file goes and the process
         * is seen gone, the file must go.) */
        test_wait_for(access(oldbin, F_OK) != 0, TEST_WAIT_MS, "%s still there:\n%s", oldbin,
                      test_daemon_log(&d));
        /* The service manager learns the new main process from the old. */
        char message[512], expected[64];
        snprintf(expected, sizeof(expected), "MAINPID=%d\n", (int)pid);
        message[0] = '\0';
        for (int k = 0; k < 50 && strstr(message, expected) == NULL; k++)
            next_state(sock, message, sizeof(message));
        ck_assert_msg(strstr(message, expected) != NULL, "no %s", expected);
    }
    close(sock);
    loaders_wait_progress(&l, 25);
    test_wait_for(loaders_ok(&l) > 200, TEST_WAIT_MS, "only %u requests", loaders_ok(&l));
    loaders_check(&l, false);
    ck_assert_int_eq(read_pid(pid_file), pid);
    char body[64];
    ck_assert_int_eq(test_daemon_http_get("127.0.0.1", port, "/", body, sizeof(body)), 200);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert(daemon_gone(pid, 15000));
    ck_assert_int_ne(access(pid_file, F_OK), 0);
    /* Nor did any of the processes report an error, or a sanitizer a
     * problem (their exit statuses are not this test's to read). */
    char *log = test_daemon_log(&d);
    ck_assert_msg(log_problem(log) == NULL, "%.4000s", log_problem(log));
    free(log);
}
END_TEST

/* Waits up to TEST_WAIT_MS until exactly `want` sockets listen on d's port and
 * admin port each; fails the test with the counts if not.  A socket too
 * many is one whose queue no one accepts from. */
static void wait_listen_sockets(const struct test_daemon *d, int want)
{
    int plain = -1, admin = -1;
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    for (int i = 0; i <= TEST_WAIT_MS / TEST_POLL_MS && test_now_ms() < deadline; i++) {
        plain = test_listen_sockets("127.0.0.1", d->port);
        admin = test_listen_sockets("127.0.0.2", d->admin_port);
        if (plain == want && admin == want)
            return;
        test_sleep_ms(TEST_POLL_MS);
    }
    ck_abort_msg("%d and %d sockets listen on the port and the admin port, not %d", plain, admin,
                 want);
}

/* `count` requests on new connections: each answered within 2 s. */
static void check_answered(int port, int count)
{
    const char req[] = "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    for (int i = 0; i < count; i++) {
        int fd = load_connect(port);
        ck_assert_int_ge(fd, 0);
        struct timeval tv = {.tv_sec = 2};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ck_assert_int_eq(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
        char response[1024];
        ssize_t len = read_response(fd, response, sizeof(response));
        ck_assert_msg(len > 0 && strncmp(response, "HTTP/1.1 200", 12) == 0, "request %d of %d: %s",
                      i + 1, count, len < 0 ? strerror((int)-len) : "closed");
        close(fd);
    }
}

/* The new process of an upgrade serves on the sockets it inherited; a
 * reload that changes the socket layout then keeps those it needs (_i 3:
 * the upgrade itself changes it).  The others must close: one left
 * listening in the SO_REUSEPORT group gets its share of new connections,
 * and no one accepts them. */
START_TEST(an_upgrade_then_a_layout_change_leave_no_socket_behind)
{
    /* One worker, or one socket the workers share. */
    static const struct {
        unsigned workers;
        const char *wakeup;
    } changes[] = {{1, ""}, {2, "wakeup exclusive;"}, {2, "wakeup herd;"}, {1, ""}};
    bool with_upgrade = _i == 3;
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char binary[PATH_MAX], pid_file[PATH_MAX];
    test_daemon_file(binary, sizeof(binary), "corral");
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_upgrade_config(&d, pid_file, "one");
    spawn_copy(&d, binary);
    wait_listen_sockets(&d, 2); /* one per worker */
    char extra[PATH_MAX + 64];
    snprintf(extra, sizeof(extra), "pid_file %s;\n%s", pid_file, changes[_i].wakeup);
    if (with_upgrade)
        write_workers_config(&d, changes[_i].workers, extra, "one");
    pid_t pid = upgrade(&d, pid_file, d.pid);
    wait_listen_sockets(&d, with_upgrade ? 1 : 2);

    if (!with_upgrade) {
        write_workers_config(&d, changes[_i].workers, extra, "one");
        ck_assert_int_eq(kill(pid, SIGHUP), 0);
        test_daemon_wait_generation(&d, 2);
        wait_listen_sockets(&d, 1);
    }
    check_answered(d.port, 20);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert(daemon_gone(pid, 15000));
    char *log = test_daemon_log(&d);
    ck_assert_msg(log_problem(log) == NULL, "%.4000s", log_problem(log));
    ck_assert_msg(strstr(log, "no longer used") != NULL, "%.4000s", log);
    free(log);
}
END_TEST

/* Upgrades and socket layout changes in turn, under load: nothing is lost,
 * and each time exactly the sockets of the newest layout listen. */
START_TEST(upgrades_and_layout_changes_under_load_fail_no_request)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char binary[PATH_MAX], pid_file[PATH_MAX];
    test_daemon_file(binary, sizeof(binary), "corral");
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_upgrade_config(&d, pid_file, "one");
    spawn_copy(&d, binary);
    struct loaders l;
    loaders_start(&l, d.port);
    pid_t pid = d.pid;
    char extra[PATH_MAX + 64];
    for (int i = 0; i < 2; i++) {
        loaders_wait_progress(&l, 25); /* each upgrade under load */
        pid = upgrade(&d, pid_file, pid);
        test_daemon_wait_generation(&d, 1);
        /* Between 2 workers with a socket each, and 1. */
        snprintf(extra, sizeof(extra), "pid_file %s;", pid_file);
        write_workers_config(&d, i == 0 ? 1 : 2, extra, "one");
        ck_assert_int_eq(kill(pid, SIGHUP), 0);
        test_daemon_wait_generation(&d, 2);
        wait_listen_sockets(&d, i == 0 ? 1 : 2);
    }
    loaders_wait_progress(&l, 25);
    test_wait_for(loaders_ok(&l) > 200, TEST_WAIT_MS, "only %u requests", loaders_ok(&l));
    loaders_check(&l, false);
    wait_listen_sockets(&d, 2);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert(daemon_gone(pid, 15000));
    char *log = test_daemon_log(&d);
    ck_assert_msg(log_problem(log) == NULL, "%.4000s", log_problem(log));
    free(log);
}
END_TEST

/* A binary that cannot run, then a config that does not load: each upgrade
 * fails, and the old process keeps serving with its pid file in place. */
START_TEST(a_failed_upgrade_leaves_the_old_process_serving)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char binary[PATH_MAX], pid_file[PATH_MAX], oldbin[PATH_MAX + 8];
    test_daemon_file(binary, sizeof(binary), "corral");
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    snprintf(oldbin, sizeof(oldbin), "%s.oldbin", pid_file);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_upgrade_config(&d, pid_file, "one");
    spawn_copy(&d, binary);
    test_wait_for(read_pid(pid_file) == d.pid, TEST_WAIT_MS, "%s does not name process %d",
                  pid_file, (int)d.pid);

    /* Replaced by something that is not a program. */
    ck_assert_int_eq(unlink(binary), 0);
    test_write_file(binary, "not a program\n");
    ck_assert_int_eq(chmod(binary, 0755), 0);
    const char *expected[] = {"could not be started", "exited with status 1"};
    for (int i = 0; i < 2; i++) {
        if (i == 1) {
            char command[3 * PATH_MAX];
            snprintf(command, sizeof(command), "cp '%s' '%s'", test_daemon_binary(), binary);
            ck_assert_int_eq(system(command), 0);
            test_write_file(d.conf, "workers 2;\nserver {\n    listen 127.0.0.1:0\n}\n");
        }
        kill(d.pid, SIGUSR2);
        free(test_daemon_wait_log(&d, expected[i]));
        ck_assert_int_eq(read_pid(pid_file), d.pid);
        ck_assert_int_ne(access(oldbin, F_OK), 0);
        char body[64];
        ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 200);
        ck_assert_str_eq(body, "one");
    }
    test_daemon_stop(&d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("cmd/reload");
    TCase *tc = tcase_create("reload");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, ten_reloads_under_load_fail_no_request);
    tcase_add_test(tc, a_reload_names_what_needs_a_restart);
    tcase_add_test(tc, a_tls_keep_alive_connection_survives_a_reload);
    tcase_add_test(tc, a_connection_still_choosing_chooses_under_its_new_site);
    tcase_add_loop_test(tc, notifies_ready_reloading_ready_stopping, 0, 2);
    tcase_add_test(tc, three_upgrades_under_load_fail_no_request);
    tcase_add_test(tc, a_failed_upgrade_leaves_the_old_process_serving);
    tcase_add_loop_test(tc, an_upgrade_then_a_layout_change_leave_no_socket_behind, 0, 4);
    tcase_add_test(tc, upgrades_and_layout_changes_under_load_fail_no_request);
    suite_add_tcase(suite, tc);
    return suite;
}
