/*
 * helpers.h: what the Check suites share: the test main, blocking loopback
 * clients, fd counting, and a server started on an ephemeral port.
 */
#ifndef CORRAL_TEST_HELPERS_H
#define CORRAL_TEST_HELPERS_H

#include <check.h>
#include <corral.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A passing Check assertion reports its file and line to the runner: one
 * write(2) per assertion in fork mode.  Loops that check every byte of a
 * transfer or every one of 100,000 timers spent most of their program's
 * time there (a minute under the sanitizers).  Here a passing assertion
 * marks nothing: a failing one still reports where it failed, and a case
 * that crashes is reported by the sanitizers or by its signal. */
#undef _mark_point
#define _mark_point(file, line) ((void)(file), (void)(line))

/* Each test program defines its suite; helpers.c holds main(), which runs it
 * with CK_FORK so every case runs in its own child process. */
Suite *test_suite(void);

/* A program whose cases are all plain functions (no daemon, no timeout to
 * enforce, no exit) may define this as true: its cases then run in one
 * process, not one fork each.  Under ASan every forked case's exit runs a
 * leak check of its own, which cost a unit-test program of hundreds of
 * cases minutes; the one check at the end still finds what any case
 * leaked. */
extern const bool test_forkless __attribute__((weak));

/* 1 in a program built with ThreadSanitizer.  scripts/test runs the
 * programs that targets.ninja's tests-threads lists under TSan as well as
 * in the release and ASan builds; there a program may leave out the cases
 * that exercise no thread of the daemon's or its own (the other two runs
 * have them), since TSan makes each case several times slower. */
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#ifndef TEST_TSAN
#define TEST_TSAN 0
#endif

/* 1 in a program built with AddressSanitizer: gcc says so with
 * __SANITIZE_ADDRESS__, Debian 12's clang (14, the ASan build's compiler)
 * only through __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif

/* Runs `command` through the shell: what it prints, as much as fits, into
 * `out` (`size` bytes, NUL-terminated; the rest is read and dropped), and
 * its exit status, or -1 when it did not exit. */
int test_run(const char *command, char *out, size_t size);

/* Monotonic milliseconds. */
uint64_t test_now_ms(void);

/* Appends printf-style text at `buf + *used` (`size` bytes in all, kept
 * NUL-terminated) and advances `*used`; text that does not fit fails the
 * test.  What the event logs of the unit tests are written with. */
void test_appendf(char *buf, size_t size, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* How long a test waits for a state it expects, and how often it looks:
 * generous, for sanitizer builds on a loaded machine; a state that comes
 * sooner ends the wait sooner. */
#define TEST_WAIT_MS 10000
#define TEST_POLL_MS 2

/* Calls cond(arg) every TEST_POLL_MS until it returns true (then true) or
 * timeout_ms has passed (then false). */
bool test_poll_until(bool (*cond)(void *arg), void *arg, int timeout_ms);

/* Evaluates `expr` every TEST_POLL_MS until it is true; after timeout_ms,
 * fails the test with the printf-style message that follows. */
#define test_wait_for(expr, timeout_ms, ...)                                                       \
    do {                                                                                           \
        uint64_t test_deadline_ = test_now_ms() + (uint64_t)(timeout_ms);                          \
        bool test_held_ = false;                                                                   \
        for (int test_i_ = 0; test_i_ <= (timeout_ms) / TEST_POLL_MS && !(test_held_ = (expr));    \
             test_i_++) {                                                                          \
            if (test_now_ms() >= test_deadline_)                                                   \
                break;                                                                             \
            test_sleep_ms(TEST_POLL_MS);                                                           \
        }                                                                                          \
        ck_assert_msg(test_held_, __VA_ARGS__);                                                    \
    } while (0)

/* Sleeps `ms` milliseconds (EINTR restarts it): only to pace a loop, or
 * where a test must let time pass to show that nothing happens. */
void test_sleep_ms(int ms);

/* Open file descriptors of this process. */
int test_fd_count(void);

/* A blocking TCP client connected to 127.0.0.1:port (or the given address),
 * with 5 s send/receive timeouts.  Fails the test on error. */
int test_connect(int port);
int test_connect_address(const char *address);

/* test_connect() with a receive buffer of `rcvbuf` bytes, set before
 * connect(): set after, it comes too late for the window the connection
 * has advertised already (it may have grown past it), and a sender that
 * then fills a window smaller than the one it was told creeps along on
 * its window probes. */
int test_connect_small(int port, int rcvbuf);

/* A socket bound to 127.0.0.1:0 and not listening, so that connections to
 * its port (*port) are refused until something listens on it; close it to
 * hand the port to a config.  Fails the test on error. */
int test_reserve_port(int *port);

/* test_reserve_port() listening with a backlog of `backlog`.  Until the
 * test accepts them its connections complete in that backlog: never
 * accepted, it is a server that takes connections and never answers. */
int test_listen(int *port, int backlog);

/* A UDP socket bound to 127.0.0.1:0, not inherited by a daemon the test
 * starts: its port in *port.  Fails the test on error. */
int test_bind_udp(int *port);

/* The TCP sockets listening on IPv4 `host`:port in this network namespace
 * (/proc/net/tcp): each socket once, however many descriptors, processes
 * or generations hold it. */
int test_listen_sockets(const char *host, int port);

/* Sends all of buf; fails the test on error. */
void test_send_all(int fd, const void *buf, size_t len);

/* Reads len bytes, stopping early at EOF; returns the count.  A receive
 * error or the 5 s timeout fails the test. */
size_t test_recv_all(int fd, void *buf, size_t len);

/* Starts `server` with one listener for `handler` on 127.0.0.1:0 and returns
 * the port. */
int test_start_server(corral_server *server, const struct corral_conn_handler *handler, void *data);

/* A handler that answers "ok" to each 4-byte request and keeps the
 * connection until the client closes it. */
extern const struct corral_conn_handler test_ok_handler;

/* Stops a started server at once, waits for its workers, frees it. */
void test_stop_server(corral_server *server);

/* A TCP server for a test's daemon to talk to (an upstream, a stream's
 * server): it listens on `ip` ("127.0.0.1", "::1"):`port` (0: any; `port`
 * says which), not inherited by a daemon the test starts, and serves each
 * connection it accepts with serve(fd, data) on a detached thread of its
 * own (256 KiB of stack), then closes it.  It counts the connections
 * accepted and those being served (live). */
struct test_backend {
    int fd, port;
    atomic_uint accepted, live;
    atomic_bool stop; /* test_backend_stop() was called: a slow serve() may look */
    void (*serve)(int fd, void *data);
    void *data;
    pthread_t thread;
};
void test_backend_start(struct test_backend *b, const char *ip, int port,
                        void (*serve)(int fd, void *data), void *data);

/* Stops accepting, closes the listener, and waits up to timeout_ms for
 * the connections being served to end: whether they all did.  Until then
 * their threads use `b` and serve()'s data. */
bool test_backend_stop(struct test_backend *b, int timeout_ms);

/* A test_backend that reads each connection's request head (5 s at most,
 * a head cut short kept), keeps the last one and a count under `lock`,
 * answers with `answer` as it is and closes. */
struct test_recorder {
    struct test_backend server;
    pthread_mutex_t lock;
    char last[8192];
    unsigned requests;
    char answer[256];
};
/* `answer` is a whole response, "HTTP/1.1 200 OK\r\n...". */
void test_recorder_start(struct test_recorder *r, const char *answer);
void test_recorder_stop(struct test_recorder *r);

/* For a backend's serve(): reads a request head into `buf` (`size` bytes,
 * kept NUL-terminated) until its empty line or a full buffer; false when
 * the peer closed (or recv failed) first. */
bool test_recv_head(int fd, char *buf, size_t size);

/* For a backend's serve(): sends "HTTP/1.1 ", `status_and_headers` (the
 * status line's rest and header lines, each ending in CRLF), then
 * Content-Length: `length` and Connection: close. */
void test_send_head(int fd, const char *status_and_headers, size_t length);

/* Waits up to timeout_ms for child `pid`: its exit status, 128 + signal, or
 * -1 after killing it when the time is up. */
int test_wait_exit(pid_t pid, int timeout_ms);

/* Whether `fd` receives something within `ms` (then the usual 5 s receive
 * timeout applies again). */
bool test_answers_within(int fd, int ms);

/* The daemon built next to this test: build/X/tests/DIR/test -> build/X/corral. */
void test_daemon_path(char *buf, size_t size);

/* Whole small files: write text, or read (up to 64 KiB; "" if missing; free
 * the result). */
void test_write_file(const char *path, const char *text);
char *test_read_file(const char *path);

/* Waits up to timeout_ms until the file at `path` holds `text`; fails the
 * test with what it holds if not.  Returns the whole file (free it). */
char *test_wait_file(const char *path, const char *text, int timeout_ms);

#endif
