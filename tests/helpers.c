/*
 * helpers.c: shared test support; see helpers.h.
 */
#include "helpers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
    SRunner *runner = srunner_create(test_suite());
    srunner_set_fork_status(runner, &test_forkless != NULL && test_forkless ? CK_NOFORK : CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

uint64_t test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void test_appendf(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    ck_assert_uint_lt(*used, size);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    ck_assert(n >= 0 && (size_t)n < size - *used);
    *used += (size_t)n;
}

void test_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

bool test_poll_until(bool (*cond)(void *arg), void *arg, int timeout_ms)
{
    uint64_t deadline = test_now_ms() + (uint64_t)timeout_ms;
    for (int i = 0; i <= timeout_ms / TEST_POLL_MS; i++) {
        if (cond(arg))
            return true;
        if (test_now_ms() >= deadline)
            break;
        test_sleep_ms(TEST_POLL_MS);
    }
    return cond(arg);
}

int test_fd_count(void)
{
    DIR *dir = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(dir);
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL)
        if (entry->d_name[0] != '.')
            count++;
    closedir(dir);
    return count - 1; /* the directory's own fd */
}

static void set_timeouts(int fd)
{
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* test_connect_address() with, when rcvbuf > 0, a receive buffer of that
 * many bytes set before connect(). */
static int connect_address(const char *address, int rcvbuf)
{
    struct sockaddr_storage addr;
    socklen_t len;
    ck_assert_int_eq(corral_parse_address(address, &addr, &len), 0);
    int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    set_timeouts(fd);
    if (rcvbuf > 0)
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&addr, len) == 0, "connect %s: %s", address,
                  strerror(errno));
    return fd;
}

int test_connect_address(const char *address)
{
    return connect_address(address, 0);
}

/* A socket of `type` bound to 127.0.0.1:0, its port in *port. */
static int bind_loopback(int type, int *port)
{
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    *port = ntohs(addr.sin_port);
    return fd;
}

int test_reserve_port(int *port)
{
    return bind_loopback(SOCK_STREAM, port);
}

int test_bind_udp(int *port)
{
    return bind_loopback(SOCK_DGRAM, port);
}

int test_listen(int *port, int backlog)
{
    int fd = test_reserve_port(port);
    ck_assert_msg(listen(fd, backlog) == 0, "listen: %s", strerror(errno));
    return fd;
}

int test_listen_sockets(const char *host, int port)
{
    struct in_addr want;
    ck_assert_int_eq(inet_pton(AF_INET, host, &want), 1);
    FILE *table = fopen("/proc/net/tcp", "re");
    ck_assert_ptr_nonnull(table);
    char line[512];
    int count = 0;
    while (fgets(line, sizeof(line), table) != NULL) {
        unsigned address, local_port, state;
        /* The address is the raw network-order word printed in hex. */
        if (sscanf(line, " %*u: %x:%x %*x:%*x %x", &address, &local_port, &state) == 3 &&
            address == want.s_addr && (int)local_port == port && state == 0x0A)
            count++;
    }
    fclose(table);
    return count;
}

int test_connect(int port)
{
    return test_connect_small(port, 0);
}

int test_connect_small(int port, int rcvbuf)
{
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%d", port);
    return connect_address(address, rcvbuf);
}

void test_send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n == -1 && errno == EINTR)
            continue;
        ck_assert_msg(n > 0, "send: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

size_t test_recv_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, p + got, len - got, 0);
        if (n == -1 && errno == EINTR)
            continue;
        ck_assert_msg(n >= 0, "recv after %zu bytes: %s", got, strerror(errno));
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static size_t ok_on_data(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    if (len < 4)
        return 0;
    corral_conn_write(conn, "ok", 2);
    return 4;
}

const struct corral_conn_handler test_ok_handler = {.on_data = ok_on_data};

int test_start_server(corral_server *server, const struct corral_conn_handler *handler, void *data)
{
    corral_listener *listener;
    ck_assert_int_eq(corral_server_listen(server, "127.0.0.1:0", NULL, handler, data, &listener),
                     0);
    int port = corral_listener_port(listener);
    ck_assert_int_gt(port, 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    return port;
}

void test_stop_server(corral_server *server)
{
    corral_server_stop(server, 0);
    corral_server_wait(server);
    corral_server_free(server);
}

struct backend_conn {
    struct test_backend *b;
    int fd;
};

static void *backend_conn_main(void *arg)
{
    struct backend_conn *c = arg;
    struct test_backend *b = c->b;
    b->serve(c->fd, b->data);
    close(c->fd);
    atomic_fetch_sub(&b->live, 1);
    free(c);
    return NULL;
}

static void *backend_accept_main(void *arg)
{
    struct test_backend *b = arg;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    while (!atomic_load(&b->stop)) {
        struct pollfd p = {.fd = b->fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int fd = accept(b->fd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&b->accepted, 1);
        atomic_fetch_add(&b->live, 1);
        struct backend_conn *c = malloc(sizeof(*c));
        ck_assert_ptr_nonnull(c);
        *c = (struct backend_conn){b, fd};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, &attr, backend_conn_main, c), 0);
    }
    pthread_attr_destroy(&attr);
    return NULL;
}

void test_backend_start(struct test_backend *b, const char *ip, int port,
                        void (*serve)(int fd, void *data), void *data)
{
    *b = (struct test_backend){.serve = serve, .data = data};
    bool v6 = strchr(ip, ':') != NULL;
    /* Not inherited by the daemon, which would keep it listening. */
    b->fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(b->fd, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in6 addr6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    struct sockaddr *sa = v6 ? (struct sockaddr *)&addr6 : (struct sockaddr *)&addr;
    socklen_t len = v6 ? sizeof(addr6) : sizeof(addr);
    ck_assert_int_eq(inet_pton(sa->sa_family, ip, v6 ? (void *)&addr6.sin6_addr : &addr.sin_addr),
                     1);
    ck_assert_int_eq(bind(b->fd, sa, len), 0);
    ck_assert_int_eq(listen(b->fd, 1024), 0);
    ck_assert_int_eq(getsockname(b->fd, sa, &len), 0);
    b->port = ntohs(v6 ? addr6.sin6_port : addr.sin_port);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, backend_accept_main, b), 0);
}

static bool backend_idle(void *arg)
{
    return atomic_load(&((struct test_backend *)arg)->live) == 0;
}

bool test_backend_stop(struct test_backend *b, int timeout_ms)
{
    atomic_store(&b->stop, true);
    pthread_join(b->thread, NULL);
    close(b->fd);
    return test_poll_until(backend_idle, b, timeout_ms);
}

static void recorder_serve(int fd, void *data)
{
    struct test_recorder *r = data;
    struct timeval timeout = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char head[sizeof(r->last)];
    (void)test_recv_head(fd, head, sizeof(head)); /* a head cut short is kept */
    pthread_mutex_lock(&r->lock);
    memcpy(r->last, head, strlen(head) + 1);
    r->requests++;
    pthread_mutex_unlock(&r->lock);
    /* The client may be gone already: the daemon's error paths are tested. */
    (void)!send(fd, r->answer, strlen(r->answer), MSG_NOSIGNAL);
}

void test_recorder_start(struct test_recorder *r, const char *answer)
{
    memset(r, 0, sizeof(*r));
    ck_assert_uint_lt(strlen(answer), sizeof(r->answer));
    strcpy(r->answer, answer);
    pthread_mutex_init(&r->lock, NULL);
    test_backend_start(&r->server, "127.0.0.1", 0, recorder_serve, r);
}

void test_recorder_stop(struct test_recorder *r)
{
    /* A connection's serve() waits 5 s at most: then the lock is free. */
    ck_assert_msg(test_backend_stop(&r->server, TEST_WAIT_MS),
                  "a backend connection outlived %d ms", TEST_WAIT_MS);
    pthread_mutex_destroy(&r->lock);
}

bool test_recv_head(int fd, char *buf, size_t size)
{
    size_t have = 0;
    buf[0] = '\0';
    while (have < size - 1) {
        ssize_t n = recv(fd, buf + have, size - 1 - have, 0);
        if (n <= 0)
            return false;
        have += (size_t)n;
        buf[have] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL)
            break;
    }
    return true;
}

void test_send_head(int fd, const char *status_and_headers, size_t length)
{
    char head[1024];
    int n =
        snprintf(head, sizeof(head), "HTTP/1.1 %sContent-Length: %zu\r\nConnection: close\r\n\r\n",
                 status_and_headers, length);
    ck_assert(n > 0 && (size_t)n < sizeof(head));
    test_send_all(fd, head, (size_t)n);
}

int test_wait_exit(pid_t pid, int timeout_ms)
{
    uint64_t deadline = test_now_ms() + (uint64_t)timeout_ms;
    for (int i = 0; i <= timeout_ms / TEST_POLL_MS; i++) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (test_now_ms() >= deadline)
            break;
        test_sleep_ms(TEST_POLL_MS);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

bool test_answers_within(int fd, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char reply[4];
    ssize_t n = recv(fd, reply, sizeof(reply), 0);
    tv = (struct timeval){.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return n > 0;
}

void test_daemon_path(char *buf, size_t size)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    char *cut = strstr(self, "/tests/");
    ck_assert_ptr_nonnull(cut);
    *cut = '\0';
    ck_assert_int_lt(snprintf(buf, size, "%s/corral", self), (int)size);
}

void test_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

char *test_read_file(const char *path)
{
    char *text = calloc(1, 1 << 16);
    ck_assert_ptr_nonnull(text);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return text;
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

char *test_wait_file(const char *path, const char *text, int timeout_ms)
{
    char *content = NULL;
    uint64_t deadline = test_now_ms() + (uint64_t)timeout_ms;
    for (int i = 0; i <= timeout_ms / TEST_POLL_MS; i++) {
        free(content);
        content = test_read_file(path);
        if (strstr(content, text) != NULL)
            return content;
        if (test_now_ms() >= deadline)
            break;
        test_sleep_ms(TEST_POLL_MS);
    }
    ck_abort_msg("no \"%s\" in %s after %d ms:\n%s", text, path, timeout_ms, content);
    return content;
}

int test_run(const char *command, char *out, size_t size)
{
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    size_t used = 0, n;
    while (used + 1 < size && (n = fread(out + used, 1, size - 1 - used, p)) > 0)
        used += n;
    out[used] = '\0';
    char drain[4096];
    while (fread(drain, 1, sizeof(drain), p) > 0)
        ;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
