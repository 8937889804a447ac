/*
 * pair.c: loopback TCP pairs for the connection tests; see pair.h.
 */
#include "pair.h"

#include "../helpers.h"
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

corral_conn *pair_open(corral_loop *loop, const struct corral_conn_handler *handler, void *data,
                       int *peer_fd)
{
    return pair_open_small(loop, handler, data, peer_fd, 0);
}

corral_conn *pair_open_small(corral_loop *loop, const struct corral_conn_handler *handler,
                             void *data, int *peer_fd, int rcvbuf)
{
    int listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(listen_fd, 0);
    if (rcvbuf > 0)
        ck_assert_int_eq(setsockopt(listen_fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    ck_assert_int_eq(listen(listen_fd, 1), 0);
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(getsockname(listen_fd, (struct sockaddr *)&addr, &len), 0);

    corral_conn *conn;
    ck_assert_int_eq(corral_connect(loop, (struct sockaddr *)&addr, len, handler, data, &conn), 0);
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    ck_assert_msg(fd >= 0, "accept4: %s", strerror(errno));
    close(listen_fd);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    uint64_t deadline = test_now_ms() + 5000;
    while (conn->state == CORRAL__CONN_CONNECTING) {
        ck_assert_msg(test_now_ms() < deadline, "the connection did not open");
        ck_assert_int_eq(corral__loop_run_once(loop, 100), 0);
    }
    ck_assert_int_eq(conn->state, CORRAL__CONN_OPEN);
    *peer_fd = fd;
    return conn;
}

void pair_run_until(corral_loop *loop, bool (*done)(void *arg), void *arg, int timeout_ms)
{
    uint64_t deadline = test_now_ms() + (uint64_t)timeout_ms;
    while (!done(arg)) {
        ck_assert_msg(test_now_ms() < deadline, "timed out after %d ms", timeout_ms);
        int timeout = corral__timers_next_timeout(loop);
        if (timeout < 0 || timeout > 50)
            timeout = 50;
        if (loop->deferred_count > 0 || loop->flush_list != NULL || loop->kick_list != NULL ||
            loop->splices_done != NULL)
            timeout = 0;
        ck_assert_int_eq(corral__loop_run_once(loop, timeout), 0);
    }
}

void pair_fill(char *buf, size_t len, uint64_t offset)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)pair_pattern(offset + i);
}
