/*
 * daemon.c: the daemon under test as a child process, and the temporary
 * directories it runs in; see daemon.h.
 */
#include "daemon.h"
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* The group's directory is made by the runner process (an unchecked
 * fixture, run once around a test case group), each case's inside it by the
 * forked case (a checked fixture).  A failed case ends with _exit() and
 * skips its own teardown; the runner's teardown still finds its directory. */
static char group_dir[64];
static char case_dir[96];
static char binary[PATH_MAX + 16];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static int remove_tree(const char *path)
{
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void group_setup(void)
{
    const char *name = program_invocation_short_name;
    if (strncmp(name, "test_", 5) == 0)
        name += 5;
    snprintf(group_dir, sizeof(group_dir), "/tmp/corral-%.20s-XXXXXX", name);
    ck_assert_msg(mkdtemp(group_dir) != NULL, "mkdtemp: %s", strerror(errno));
    /* Searchable by all, listable by none: a daemon that drops its
     * privileges still reaches its config in the case's directory. */
    ck_assert_int_eq(chmod(group_dir, 0711), 0);
}

static void group_teardown(void)
{
    if (group_dir[0] != '\0')
        remove_tree(group_dir);
    group_dir[0] = '\0';
}

static void case_setup(void)
{
    ck_assert_msg(group_dir[0] != '\0', "no directory for this test case group");
    snprintf(case_dir, sizeof(case_dir), "%s/case-XXXXXX", group_dir);
    ck_assert_msg(mkdtemp(case_dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static void case_teardown(void)
{
    ck_assert_msg(remove_tree(case_dir) == 0, "removing %s: %s", case_dir, strerror(errno));
}

void test_daemon_fixture(TCase *tc)
{
    tcase_add_unchecked_fixture(tc, group_setup, group_teardown);
    tcase_add_checked_fixture(tc, case_setup, case_teardown);
}

TCase *test_daemon_case(Suite *suite, const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(suite, tc);
    return tc;
}

const char *test_daemon_dir(void)
{
    ck_assert_msg(case_dir[0] != '\0', "the case has no directory: no test_daemon_fixture()");
    return case_dir;
}

const char *test_daemon_group_dir(void)
{
    ck_assert_msg(group_dir[0] != '\0', "no directory for this test case group");
    return group_dir;
}

void test_daemon_file(char *path, size_t size, const char *name)
{
    ck_assert_int_lt(snprintf(path, size, "%s/%s", test_daemon_dir(), name), (int)size);
}

const char *test_daemon_binary(void)
{
    if (binary[0] == '\0')
        test_daemon_path(binary, sizeof(binary));
    return binary;
}

void test_daemon_init(struct test_daemon *d, const char *name)
{
    memset(d, 0, sizeof(*d));
    d->pid = -1;
    char file[128];
    snprintf(file, sizeof(file), "%s.conf", name);
    test_daemon_file(d->conf, sizeof(d->conf), file);
    snprintf(file, sizeof(file), "%s.log", name);
    test_daemon_file(d->log, sizeof(d->log), file);
}

void test_daemon_write_config(const struct test_daemon *d, const char *text)
{
    test_write_file(d->conf, text);
}

void test_daemon_spawn(struct test_daemon *d, int passed_fd)
{
    const char *path = test_daemon_binary();
    pid_t parent = getpid();
    /* Truncated here, not in the child: test_daemon_wait_listening() reads
     * the log at once, and must not find the ports of a daemon that ran
     * earlier under the same name. */
    int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_msg(fd != -1, "open %s: %s", d->log, strerror(errno));
    d->pid = fork();
    ck_assert_int_ge(d->pid, 0);
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        /* An ignored signal stays ignored across exec: start the daemon as
         * a shell would, whatever the test does with SIGPIPE. */
        signal(SIGPIPE, SIG_DFL);
        dup2(fd, 1);
        dup2(fd, 2);
        if (passed_fd >= 0) {
            dup2(passed_fd, 3);
            char pid[16];
            snprintf(pid, sizeof(pid), "%d", (int)getpid());
            setenv("LISTEN_PID", pid, 1);
            setenv("LISTEN_FDS", "1", 1);
        }
        execl(path, path, "-c", d->conf, (char *)NULL);
        _exit(127);
    }
    close(fd);
}

void test_daemon_wait_listening(struct test_daemon *d)
{
    d->port = d->admin_port = 0;
    /* An ASan daemon on a loaded machine has taken more than 5 s to say
     * it listens; one that cannot start exits, which ends the wait. */
    uint64_t deadline = test_now_ms() + 30000;
    /* One buffer for all the polls: a fresh 64 KiB block at each (every
     * 2 ms) is new memory to fault in under ASan, whose quarantine holds
     * the freed ones back. */
    enum { LOG_MAX = 1 << 16 };
    char *log = malloc(LOG_MAX);
    ck_assert_ptr_nonnull(log);
    int fd = -1;
    for (int i = 0; i < 30000 / TEST_POLL_MS && (d->port == 0 || d->admin_port == 0); i++) {
        if (test_now_ms() > deadline)
            break;
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = -1;
            ck_abort_msg("daemon exited (status 0x%x) instead of starting:\n%s", status,
                         test_read_file(d->log));
        }
        test_sleep_ms(TEST_POLL_MS);
        if (fd < 0)
            fd = open(d->log, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? 0 : pread(fd, log, LOG_MAX - 1, 0);
        log[n > 0 ? n : 0] = '\0';
        char *save = NULL;
        for (char *line = strtok_r(log, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            char *at = strstr(line, "listening on 127.0.0.");
            char *colon = at != NULL ? strchr(at, ':') : NULL;
            if (colon == NULL)
                continue;
            if (strstr(line, "(admin)") != NULL)
                d->admin_port = atoi(colon + 1);
            else
                d->port = atoi(colon + 1);
        }
    }
    free(log);
    if (fd >= 0)
        close(fd);
    ck_assert_msg(d->port > 0 && d->admin_port > 0, "daemon did not start:\n%s",
                  test_read_file(d->log));
}

void test_daemon_start(struct test_daemon *d)
{
    test_daemon_spawn(d, -1);
    test_daemon_wait_listening(d);
}

bool test_daemon_wait_port(int port, int timeout_ms)
{
    struct sockaddr_storage addr;
    socklen_t len;
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%d", port);
    ck_assert_int_eq(corral_parse_address(address, &addr, &len), 0);
    uint64_t deadline = test_now_ms() + (uint64_t)timeout_ms;
    for (int i = 0; i <= timeout_ms / TEST_POLL_MS; i++) {
        int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        int rc = connect(fd, (struct sockaddr *)&addr, len);
        close(fd);
        if (rc == 0)
            return true;
        if (test_now_ms() >= deadline)
            break;
        test_sleep_ms(TEST_POLL_MS);
    }
    return false;
}

void test_daemon_wait_generation(const struct test_daemon *d, unsigned n)
{
    char expected[64], body[8192] = "";
    snprintf(expected, sizeof(expected), "\"config_generation\": %u,", n);
    uint64_t deadline = test_now_ms() + TEST_WAIT_MS;
    /* Every 5 ms, not every TEST_POLL_MS: each look is a request the
     * daemon serves, and some callers load it already. */
    for (int i = 0; i < TEST_WAIT_MS / 5; i++) {
        if (test_daemon_admin_get(d, "/status", body, sizeof(body)) == 200 &&
            strstr(body, expected) != NULL)
            return;
        if (test_now_ms() >= deadline)
            break;
        test_sleep_ms(5);
    }
    ck_abort_msg("no %s in /status after %d ms:\n%s\nlog:\n%s", expected, TEST_WAIT_MS, body,
                 test_daemon_log(d));
}

char *test_daemon_wait_log(const struct test_daemon *d, const char *text)
{
    return test_wait_file(d->log, text, TEST_WAIT_MS);
}

void test_daemon_stop(struct test_daemon *d)
{
    kill(d->pid, SIGTERM);
    uint64_t deadline = test_now_ms() + 15000;
    for (int i = 0; i <= 15000 / TEST_POLL_MS && test_now_ms() < deadline; i++) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = -1;
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                          "daemon exit status 0x%x; log:\n%s", status, test_read_file(d->log));
            return;
        }
        test_sleep_ms(TEST_POLL_MS);
    }
    test_daemon_kill(d);
    ck_abort_msg("daemon did not stop on SIGTERM; log:\n%s", test_read_file(d->log));
}

void test_daemon_kill(struct test_daemon *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = -1;
}

char *test_daemon_log(const struct test_daemon *d)
{
    return test_read_file(d->log);
}

int test_daemon_http_try_get(const char *host, int port, const char *path, char *body, size_t size)
{
    char address[64];
    snprintf(address, sizeof(address), "%s:%d", host, port);
    struct sockaddr_storage addr;
    socklen_t addrlen;
    ck_assert_int_eq(corral_parse_address(address, &addr, &addrlen), 0);
    int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval timeout = {.tv_sec = 5}; /* as test_connect() */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
                     path);
    ck_assert_int_lt(n, (int)sizeof(req));
    /* Each caller its own (tests call this from several threads). */
    const size_t cap = 1 << 16;
    char *response = malloc(cap);
    ck_assert_ptr_nonnull(response);
    size_t len = 0;
    ssize_t got = 0;
    int err = 0;
    if (connect(fd, (struct sockaddr *)&addr, addrlen) != 0 ||
        send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        err = errno;
    while (err == 0 && len < cap - 1 && (got = recv(fd, response + len, cap - 1 - len, 0)) != 0) {
        if (got < 0)
            err = errno;
        else
            len += (size_t)got;
    }
    close(fd);
    if (err != 0) {
        free(response);
        return -err;
    }
    response[len] = '\0';
    int status = 0;
    sscanf(response, "HTTP/1.1 %d", &status);
    const char *start = strstr(response, "\r\n\r\n");
    snprintf(body, size, "%s", start != NULL ? start + 4 : "");
    free(response);
    return status;
}

int test_daemon_http_get(const char *host, int port, const char *path, char *body, size_t size)
{
    int status = test_daemon_http_try_get(host, port, path, body, size);
    ck_assert_msg(status >= 0, "GET %s from %s:%d: %s", path, host, port, strerror(-status));
    return status;
}

int test_daemon_admin_get(const struct test_daemon *d, const char *path, char *body, size_t size)
{
    return test_daemon_http_get("127.0.0.2", d->admin_port, path, body, size);
}

long test_daemon_connections_active(const struct test_daemon *d)
{
    char page[16384];
    if (test_daemon_admin_get(d, "/status", page, sizeof(page)) != 200)
        return -1;
    const char *at = strstr(page, "\"connections_active\": ");
    return at != NULL ? strtol(at + 22, NULL, 10) : -1;
}

int test_daemon_run(const char *args, char *output, size_t size)
{
    char cmd[PATH_MAX + 1024];
    ck_assert_int_lt(snprintf(cmd, sizeof(cmd), "%s %s 2>&1", test_daemon_binary(), args),
                     (int)sizeof(cmd));
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(output, 1, size - 1, p);
    output[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
