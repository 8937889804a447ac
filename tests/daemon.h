/*
 * daemon.h: build/corral run by a daemon-level test: a temporary directory
 * per case for its configs and logs, the daemon started there with its
 * ports read from its log, stopped and waited for, and its one-shot modes
 * (-t, --probe, -V) run for their output.
 */
#ifndef CORRAL_TEST_DAEMON_H
#define CORRAL_TEST_DAEMON_H

#include <check.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* One daemon process.  test_daemon_init() names its files; the test writes
 * the config; start and stop fill and use pid and the ports. */
struct test_daemon {
    pid_t pid;
    int port, admin_port; /* the last "listening on" port of each kind in the log */
    char conf[PATH_MAX], log[PATH_MAX];
};

/* Adds to `tc` the fixtures that give each case an empty directory of its
 * own, /tmp/corral-NAME-XXXXXX/case-XXXXXX (NAME: this program's name
 * without "test_").  The case's directory goes when the case passes; the
 * runner removes the whole tree after the test case group, so a case that
 * fails or times out leaves nothing behind either. */
void test_daemon_fixture(TCase *tc);

/* A test case group with test_daemon_fixture() and a timeout of
 * `timeout_s`, added to `suite`. */
TCase *test_daemon_case(Suite *suite, const char *name, double timeout_s);

/* The current case's directory; valid in a case run with the fixture. */
const char *test_daemon_dir(void);

/* The directory of the test case group, which holds the cases' own: for
 * what the cases can share, made once by an unchecked fixture added after
 * test_daemon_fixture() (which runs in the runner process, before the
 * group's first case). */
const char *test_daemon_group_dir(void);

/* DIR/name into `path`. */
void test_daemon_file(char *path, size_t size, const char *name);

/* The daemon binary next to this test's build directory. */
const char *test_daemon_binary(void);

/* Names d's files DIR/NAME.conf and DIR/NAME.log; nothing is running. */
void test_daemon_init(struct test_daemon *d, const char *name);

/* Writes `text` as d's config. */
void test_daemon_write_config(const struct test_daemon *d, const char *text);

/* Starts `corral -c d->conf`, its output to d->log, and returns at once.
 * With `passed_fd` >= 0 that socket is passed as fd 3 the systemd way
 * (LISTEN_PID, LISTEN_FDS).  The daemon gets SIGKILL when the calling thread
 * ends, so a case that fails early does not leave it running. */
void test_daemon_spawn(struct test_daemon *d, int passed_fd);

/* Waits up to 5 s until d->log shows a listener and the admin listener,
 * and sets d->port and d->admin_port; fails the test with the log if not. */
void test_daemon_wait_listening(struct test_daemon *d);

/* test_daemon_spawn(d, -1), then test_daemon_wait_listening(d). */
void test_daemon_start(struct test_daemon *d);

/* Waits up to `timeout_ms` until 127.0.0.1:port accepts a connection. */
bool test_daemon_wait_port(int port, int timeout_ms);

/* Waits up to TEST_WAIT_MS until d's /status shows configuration
 * generation `n` (a new process counts from 1); fails the test with the
 * page and the log if not. */
void test_daemon_wait_generation(const struct test_daemon *d, unsigned n);

/* Waits up to TEST_WAIT_MS until d's log holds `text`; fails the test with
 * the log if not.  Returns the log (free it). */
char *test_daemon_wait_log(const struct test_daemon *d, const char *text);

/* SIGTERM, then waits up to 15 s: fails the test (with the log) unless the
 * daemon exits with status 0; kills it if it does not exit. */
void test_daemon_stop(struct test_daemon *d);

/* SIGKILL and wait, for a daemon whose exit does not matter. */
void test_daemon_kill(struct test_daemon *d);

/* The daemon's log so far; free it. */
char *test_daemon_log(const struct test_daemon *d);

/* One GET on a new connection to host:port, "Connection: close": returns
 * the status (0 without a response), the body in `body`.  A connection that
 * fails or is reset fails the test. */
int test_daemon_http_get(const char *host, int port, const char *path, char *body, size_t size);

/* The same, but a connection that fails or is reset returns -errno, for a
 * caller that expects that may happen and tries again. */
int test_daemon_http_try_get(const char *host, int port, const char *path, char *body, size_t size);

/* The same to d's admin listener, which is on 127.0.0.2. */
int test_daemon_admin_get(const struct test_daemon *d, const char *path, char *body, size_t size);

/* The connections d has open, as its admin /status counts them (the one
 * that asks among them); -1 when the page does not say. */
long test_daemon_connections_active(const struct test_daemon *d);

/* Runs `corral ARGS` (split by the shell) to its end: returns its exit
 * status (-1 if it did not exit), stdout and stderr together in `output`. */
int test_daemon_run(const char *args, char *output, size_t size);

#endif
