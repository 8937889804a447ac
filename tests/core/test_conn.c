/*
 * test_conn.c: connections end to end over loopback: echo round trips,
 * backpressure against a slow reader, half-close, lingering close, timeouts
 * and outgoing connects.  Accepted sockets join the epoll set only when they
 * wait; the cases below cover both ways into it: input that comes later than
 * the handshake, and output that does not fit the socket at once.
 */
#include "../helpers.h"
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------------ echo server */

static _Atomic size_t max_pending_output;
static _Atomic int last_close_error = 1;
static _Atomic int closes;

static size_t echo_on_data(corral_conn *conn, const char *data, size_t len)
{
    corral_conn_write(conn, data, len);
    size_t pending = corral_conn_pending_output(conn);
    if (pending > atomic_load(&max_pending_output))
        atomic_store(&max_pending_output, pending);
    return len;
}

static void record_close(corral_conn *conn, int error)
{
    (void)conn;
    atomic_store(&last_close_error, error);
    atomic_fetch_add(&closes, 1);
}

static const struct corral_conn_handler echo_handler = {
    .on_data = echo_on_data,
    .on_close = record_close,
};

static corral_server *start_echo(int workers, const struct corral_conn_handler *handler, int *port)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = (unsigned)workers;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    *port = test_start_server(server, handler, NULL);
    return server;
}

START_TEST(echo_round_trips)
{
    int port;
    corral_server *server = start_echo(2, &echo_handler, &port);
    for (int c = 0; c < 20; c++) {
        int fd = test_connect(port);
        for (int i = 0; i < 10; i++) {
            char message[64], reply[64];
            int len = snprintf(message, sizeof(message), "connection %d message %d", c, i);
            test_send_all(fd, message, (size_t)len);
            ck_assert_uint_eq(test_recv_all(fd, reply, (size_t)len), (size_t)len);
            ck_assert(memcmp(message, reply, (size_t)len) == 0);
        }
        close(fd);
    }
    test_stop_server(server);
}
END_TEST

enum { BIG = 10 * 1024 * 1024 };

static unsigned char pattern_byte(size_t i)
{
    return (unsigned char)((i * 131u) >> 3);
}

struct sender {
    int fd;
    size_t sent;
};

static void *send_big(void *arg)
{
    struct sender *s = arg;
    unsigned char chunk[65536];
    while (s->sent < BIG) {
        size_t n = BIG - s->sent < sizeof(chunk) ? BIG - s->sent : sizeof(chunk);
        for (size_t i = 0; i < n; i++)
            chunk[i] = pattern_byte(s->sent + i);
        test_send_all(s->fd, chunk, n);
        s->sent += n;
    }
    shutdown(s->fd, SHUT_WR);
    return NULL;
}

START_TEST(ten_megabytes_through_a_slow_reader_stay_bounded)
{
    int port;
    corral_server *server = start_echo(1, &echo_handler, &port);
    /* A small receive buffer makes the server's side fill up early. */
    int fd = test_connect_small(port, 64 * 1024);
    struct sender sender = {.fd = fd};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, send_big, &sender), 0);

    unsigned char buf[16384];
    size_t received = 0;
    bool intact = true;
    for (int reads = 0; received < BIG; reads++) {
        if (reads < 100)
            test_sleep_ms(2); /* slow at first, while the sender is far ahead */
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        ck_assert_msg(n > 0, "recv after %zu bytes: %s", received,
                      n == 0 ? "EOF" : strerror(errno));
        for (ssize_t i = 0; i < n; i++)
            intact = intact && buf[i] == pattern_byte(received + (size_t)i);
        received += (size_t)n;
    }
    pthread_join(thread, NULL);
    ck_assert(intact);
    ck_assert_uint_eq(received, BIG);
    ck_assert_uint_eq(test_recv_all(fd, buf, 1), 0); /* EOF after the echo */
    /* Output stayed within the high watermark plus one read's worth. */
    size_t bound = 256 * 1024 + 64 * 1024;
    ck_assert_msg(atomic_load(&max_pending_output) <= bound, "pending output reached %zu",
                  atomic_load(&max_pending_output));
    ck_assert_uint_gt(atomic_load(&max_pending_output), 64 * 1024); /* it did push back */
    close(fd);
    test_stop_server(server);
}
END_TEST

START_TEST(a_client_that_speaks_late_is_heard)
{
    int port;
    corral_server *server = start_echo(1, &echo_handler, &port);
    int fd = test_connect(port);
    /* The server has accepted, read nothing, and must wait: only time
     * shows that it waits rather than giving up. */
    test_sleep_ms(50);
    test_send_all(fd, "late", 4);
    char reply[4];
    ck_assert_uint_eq(test_recv_all(fd, reply, sizeof(reply)), 4);
    ck_assert(memcmp(reply, "late", 4) == 0);
    close(fd);
    test_stop_server(server);
}
END_TEST

/* Greets with more than the socket takes, without ever reading: the
 * connection waits for output only. */
enum { GREETING = 8 * 1024 * 1024 };

static void greet_and_close(corral_conn *conn)
{
    corral_conn_pause_read(conn);
    static char chunk[65536];
    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (char)pattern_byte(i);
    for (size_t sent = 0; sent < GREETING; sent += sizeof(chunk))
        corral_conn_write(conn, chunk, sizeof(chunk));
    corral_conn_close_no_linger(conn);
}

static const struct corral_conn_handler greeting_handler = {
    .on_open = greet_and_close,
    .on_data = echo_on_data,
    .on_close = record_close,
};

START_TEST(output_larger_than_the_socket_is_flushed_later)
{
    int port;
    corral_server *server = start_echo(1, &greeting_handler, &port);
    int fd = test_connect(port);
    /* Let the server fill the socket and wait for output room: the wait
     * has no event of its own to watch for. */
    test_sleep_ms(50);
    static unsigned char buf[65536];
    size_t received = 0;
    bool intact = true;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        ck_assert_msg(n >= 0, "recv after %zu bytes: %s", received, strerror(errno));
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            intact = intact && buf[i] == pattern_byte((received + (size_t)i) % sizeof(buf));
        received += (size_t)n;
    }
    ck_assert(intact);
    ck_assert_uint_eq(received, GREETING);
    close(fd);
    test_stop_server(server);
}
END_TEST

/* A deadline set at open fires; one set and then cleared does not. */
static _Atomic int deadlines_fired;

static void arm_deadlines(corral_conn *conn)
{
    uint64_t now = corral_loop_now(corral_conn_loop(conn));
    corral_conn_set_deadline(conn, now + 30);
    corral_conn_set_deadline(conn, now + 80); /* moved later */
}

static void say_deadline(corral_conn *conn)
{
    atomic_fetch_add(&deadlines_fired, 1);
    corral_conn_write(conn, "deadline", 8);
    corral_conn_close(conn);
}

static size_t clear_deadline(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    corral_conn_set_deadline(conn, 0);
    corral_conn_write(conn, "cleared", 7);
    return len;
}

static const struct corral_conn_handler deadline_handler = {
    .on_open = arm_deadlines,
    .on_data = clear_deadline,
    .on_deadline = say_deadline,
};

START_TEST(deadline_fires_once_unless_cleared)
{
    int port;
    corral_server *server = start_echo(1, &deadline_handler, &port);
    int quiet = test_connect(port);
    char reply[16];
    uint64_t started = test_now_ms();
    ck_assert_uint_eq(test_recv_all(quiet, reply, 8), 8);
    ck_assert(memcmp(reply, "deadline", 8) == 0);
    ck_assert_uint_ge(test_now_ms() - started, 70); /* the later deadline */
    close(quiet);

    int talker = test_connect(port);
    test_send_all(talker, "x", 1);
    ck_assert_uint_eq(test_recv_all(talker, reply, 7), 7);
    ck_assert(memcmp(reply, "cleared", 7) == 0);
    /* A later connection's deadline fires after the talker's would have:
     * timers run in (deadline, start) order on the one worker, so once it
     * has fired, the talker's cleared one has had its chance. */
    int later = test_connect(port);
    ck_assert_uint_eq(test_recv_all(later, reply, 8), 8);
    ck_assert(memcmp(reply, "deadline", 8) == 0);
    ck_assert_int_eq(atomic_load(&deadlines_fired), 2);
    close(later);
    close(talker);
    test_stop_server(server);
}
END_TEST

START_TEST(half_close_flushes_then_closes)
{
    int port;
    corral_server *server = start_echo(1, &echo_handler, &port);
    int fd = test_connect(port);
    test_send_all(fd, "last words", 10);
    shutdown(fd, SHUT_WR);
    char reply[32];
    ck_assert_uint_eq(test_recv_all(fd, reply, sizeof(reply)), 10);
    ck_assert(memcmp(reply, "last words", 10) == 0);
    close(fd);
    test_wait_for(atomic_load(&closes) != 0, TEST_WAIT_MS, "the connection did not close");
    ck_assert_int_eq(atomic_load(&last_close_error), 0);
    test_stop_server(server);
}
END_TEST

/* The server answers the first input with "bye" and closes at once, while
 * the client keeps sending: a plain close() would reset the connection and
 * could destroy "bye" before the client reads it. */
static size_t bye_on_data(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    corral_conn_write(conn, "bye", 3);
    corral_conn_close(conn);
    return len;
}

static const struct corral_conn_handler bye_handler = {
    .on_data = bye_on_data,
    .on_close = record_close,
};

START_TEST(close_lingers_so_the_peer_reads_everything)
{
    int port;
    corral_server *server = start_echo(1, &bye_handler, &port);
    int fd = test_connect(port);
    test_send_all(fd, "hello", 5);
    /* "bye" has arrived once the server has read "hello" and closed: the
     * junk then stays unread. */
    struct pollfd readable = {.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&readable, 1, TEST_WAIT_MS), 1);
    char junk[4096];
    memset(junk, 'j', sizeof(junk));
    test_send_all(fd, junk, sizeof(junk)); /* unread by the server */
    char reply[8];
    ck_assert_uint_eq(test_recv_all(fd, reply, 3), 3);
    ck_assert(memcmp(reply, "bye", 3) == 0);
    ck_assert_int_eq(recv(fd, reply, sizeof(reply), 0), 0); /* FIN, not a reset */
    close(fd);
    test_wait_for(atomic_load(&closes) != 0, TEST_WAIT_MS, "the connection did not close");
    ck_assert_int_eq(atomic_load(&closes), 1);
    ck_assert_int_eq(atomic_load(&last_close_error), 0);
    test_stop_server(server);
}
END_TEST

static void set_short_read_timeout(corral_conn *conn)
{
    corral_conn_set_timeouts(conn, 100, 0);
}

static const struct corral_conn_handler idle_timeout_handler = {
    .on_open = set_short_read_timeout,
    .on_data = echo_on_data,
    .on_close = record_close,
};

START_TEST(read_timeout_closes_an_idle_connection)
{
    int port;
    corral_server *server = start_echo(1, &idle_timeout_handler, &port);
    int fd = test_connect(port);
    /* Activity keeps it open past the timeout... */
    for (int i = 0; i < 5; i++) {
        test_sleep_ms(50); /* idle for half the read timeout */
        char reply[1];
        test_send_all(fd, "x", 1);
        ck_assert_uint_eq(test_recv_all(fd, reply, 1), 1);
    }
    /* ...and silence closes it. */
    uint64_t start = test_now_ms();
    char reply[1];
    ck_assert_int_eq(recv(fd, reply, 1, 0), 0);
    uint64_t waited = test_now_ms() - start;
    ck_assert_uint_ge(waited, 80);
    ck_assert_uint_le(waited, 1000);
    test_wait_for(atomic_load(&closes) != 0, TEST_WAIT_MS, "the connection did not close");
    ck_assert_int_eq(atomic_load(&last_close_error), -ETIMEDOUT);
    close(fd);
    test_stop_server(server);
}
END_TEST

static void set_short_write_timeout(corral_conn *conn)
{
    corral_conn_set_timeouts(conn, 0, 200);
    /* A fixed send buffer stops the kernel's autotuning, which can grow it
     * to tcp_wmem's maximum (4 MiB here) and take the whole flood, leaving
     * no output pending for the timeout to act on. */
    int size = 65536;
    ck_assert_int_eq(setsockopt(corral_conn_fd(conn), SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)),
                     0);
}

static size_t flood_on_data(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    static char block[65536];
    for (int i = 0; i < 64; i++)
        corral_conn_write(conn, block, sizeof(block));
    return len;
}

static const struct corral_conn_handler write_timeout_handler = {
    .on_open = set_short_write_timeout,
    .on_data = flood_on_data,
    .on_close = record_close,
};

START_TEST(write_timeout_closes_a_stalled_reader)
{
    int port;
    corral_server *server = start_echo(1, &write_timeout_handler, &port);
    /* A small receive buffer, so that the 4 MiB cannot all fit in the
     * kernel's buffers and leave nothing pending to time out. */
    int fd = test_connect_small(port, 16 * 1024);
    test_send_all(fd, "go", 2); /* 4 MiB come back; this client never reads */
    test_wait_for(atomic_load(&closes) != 0, TEST_WAIT_MS, "the connection did not close");
    ck_assert_int_eq(atomic_load(&closes), 1);
    ck_assert_int_eq(atomic_load(&last_close_error), -ETIMEDOUT);
    close(fd);
    test_stop_server(server);
}
END_TEST

/* ------------------------------------------------------ outgoing connects */

struct client_case {
    corral_loop *loop;
    char received[16];
    size_t received_len;
    int close_error;
    bool opened;
};

static void client_on_open(corral_conn *conn)
{
    struct client_case *c = corral_conn_data(conn);
    c->opened = true;
}

static size_t client_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct client_case *c = corral_conn_data(conn);
    size_t room = sizeof(c->received) - c->received_len;
    size_t take = len < room ? len : room;
    memcpy(c->received + c->received_len, data, take);
    c->received_len += take;
    if (c->received_len >= 4)
        corral_conn_close(conn);
    return len;
}

static void client_on_close(corral_conn *conn, int error)
{
    struct client_case *c = corral_conn_data(conn);
    c->close_error = error;
    corral_loop_stop(c->loop);
}

static const struct corral_conn_handler client_handler = {
    .on_open = client_on_open,
    .on_data = client_on_data,
    .on_close = client_on_close,
};

START_TEST(outgoing_connection_round_trip)
{
    int port;
    corral_server *server = start_echo(1, &echo_handler, &port);
    struct client_case c = {.close_error = 1};
    ck_assert_int_eq(corral_loop_new(&c.loop), 0);
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%d", port);
    struct sockaddr_storage addr;
    socklen_t addrlen;
    ck_assert_int_eq(corral_parse_address(address, &addr, &addrlen), 0);
    corral_conn *conn;
    ck_assert_int_eq(
        corral_connect(c.loop, (struct sockaddr *)&addr, addrlen, &client_handler, &c, &conn), 0);
    /* Written before the connection is up: queued until it is. */
    corral_conn_write(conn, "ping", 4);
    ck_assert_int_eq(corral_loop_run(c.loop), 0);
    ck_assert(c.opened);
    ck_assert_uint_eq(c.received_len, 4);
    ck_assert(memcmp(c.received, "ping", 4) == 0);
    ck_assert_int_eq(c.close_error, 0);
    corral_loop_free(c.loop);
    test_stop_server(server);
}
END_TEST

START_TEST(refused_connection_reports_econnrefused)
{
    /* A port that was just free: bind, read the port, close. */
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_storage addr;
    socklen_t addrlen;
    ck_assert_int_eq(corral_parse_address("127.0.0.1:0", &addr, &addrlen), 0);
    ck_assert_int_eq(bind(probe, (struct sockaddr *)&addr, addrlen), 0);
    ck_assert_int_eq(getsockname(probe, (struct sockaddr *)&addr, &addrlen), 0);
    close(probe);

    struct client_case c = {.close_error = 1};
    ck_assert_int_eq(corral_loop_new(&c.loop), 0);
    corral_conn *conn;
    ck_assert_int_eq(
        corral_connect(c.loop, (struct sockaddr *)&addr, addrlen, &client_handler, &c, &conn), 0);
    ck_assert_int_eq(corral_loop_run(c.loop), 0);
    ck_assert(!c.opened);
    ck_assert_int_eq(c.close_error, -ECONNREFUSED);
    corral_loop_free(c.loop);
}
END_TEST

/* A connect that fails before corral_connect() returns is reported by its
 * result alone: the caller frees its state on that error, so a later
 * on_close would run on freed memory. */
struct counted {
    int opens, closes;
};

static void counted_on_open(corral_conn *conn)
{
    struct counted *c = corral_conn_data(conn);
    c->opens++;
}

static size_t counted_on_data(corral_conn *conn, const char *data, size_t len)
{
    (void)conn;
    (void)data;
    return len;
}

static void counted_on_close(corral_conn *conn, int error)
{
    (void)error;
    struct counted *c = corral_conn_data(conn);
    c->closes++;
}

static const struct corral_conn_handler counted_handler = {
    .on_open = counted_on_open,
    .on_data = counted_on_data,
    .on_close = counted_on_close,
};

START_TEST(a_connect_that_fails_at_once_never_reaches_on_close)
{
    int port;
    int reserved = test_reserve_port(&port);
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%d", port);
    struct sockaddr_storage addr;
    socklen_t addrlen;
    ck_assert_int_eq(corral_parse_address(address, &addr, &addrlen), 0);

    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct counted *c = calloc(1, sizeof(*c));
    int fds_before = test_fd_count();
    /* The loop's epoll descriptor briefly becomes an eventfd, so that
     * registering the new socket fails with EINVAL inside corral_connect. */
    int saved = dup(loop->epfd);
    int not_epoll = eventfd(0, EFD_CLOEXEC);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(not_epoll, 0);
    ck_assert_int_eq(dup2(not_epoll, loop->epfd), loop->epfd);
    corral_conn *conn = NULL;
    int err = corral_connect(loop, (struct sockaddr *)&addr, addrlen, &counted_handler, c, &conn);
    ck_assert_int_eq(dup2(saved, loop->epfd), loop->epfd);
    close(saved);
    close(not_epoll);
    ck_assert_int_eq(err, -EINVAL);
    ck_assert_int_eq(test_fd_count(), fds_before); /* the socket is closed */

    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(corral__loop_run_once(loop, 0), 0);
    ck_assert_int_eq(c->closes, 0);
    ck_assert_int_eq(c->opens, 0);
    corral_loop_free(loop);
    ck_assert_int_eq(c->closes, 0);
    free(c);
    close(reserved);
}
END_TEST

/* ---------------------------------------------------------------- aborts */

/* Sends a first part at once and aborts 50 ms later, once the peer has had
 * it: a close-delimited body cut off there. */
static _Atomic int abort_error;

static size_t partial_then_abort(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    corral_conn_write(conn, "partial", 7);
    corral_conn_set_deadline(conn, corral_loop_now(corral_conn_loop(conn)) + 50);
    return len;
}

static void abort_at_deadline(corral_conn *conn)
{
    corral_conn_abort(conn, atomic_load(&abort_error));
}

static const struct corral_conn_handler abort_handler = {
    .on_data = partial_then_abort,
    .on_deadline = abort_at_deadline,
    .on_close = record_close,
};

/* A layered transport over the plain one whose end of stream is a message
 * ("END"), as a TLS close_notify is. */
static int marker_shutdown(corral_conn *conn)
{
    static const struct iovec end = {.iov_base = "END", .iov_len = 3};
    corral_plain_transport.writev(conn, &end, 1);
    return corral_plain_transport.shutdown(conn);
}

static struct corral_transport layered;

static void use_layered_transport(corral_conn *conn)
{
    layered = (struct corral_transport){
        .name = "marker",
        .layered = true,
        .read = corral_plain_transport.read,
        .writev = corral_plain_transport.writev,
        .shutdown = marker_shutdown,
    };
    corral_conn_set_transport(conn, &layered, NULL);
}

static const struct corral_conn_handler layered_abort_handler = {
    .on_open = use_layered_transport,
    .on_data = partial_then_abort,
    .on_deadline = abort_at_deadline,
    .on_close = record_close,
};

/* What the peer sees after the first part: 0 for a FIN, else -errno. */
static int read_after_partial(int port, char *rest, size_t rest_size, size_t *rest_len)
{
    int fd = test_connect(port);
    test_send_all(fd, "go", 2);
    char head[7];
    ck_assert_uint_eq(test_recv_all(fd, head, sizeof(head)), sizeof(head));
    ck_assert(memcmp(head, "partial", 7) == 0);
    *rest_len = 0;
    int result;
    for (int reads = 0;; reads++) {
        ck_assert_int_lt(reads, 100);
        ssize_t n = recv(fd, rest + *rest_len, rest_size - *rest_len, 0);
        if (n > 0 && *rest_len + (size_t)n < rest_size) {
            *rest_len += (size_t)n;
            continue;
        }
        result = n == 0 ? 0 : n < 0 ? -errno : -EMSGSIZE;
        break;
    }
    close(fd);
    return result;
}

static void wait_for_close(void)
{
    test_wait_for(atomic_load(&closes) != 0, TEST_WAIT_MS, "the connection did not close");
    ck_assert_int_eq(atomic_load(&closes), 1);
}

START_TEST(an_abort_with_an_error_resets_the_peer)
{
    atomic_store(&abort_error, -EIO);
    int port;
    corral_server *server = start_echo(1, &abort_handler, &port);
    char rest[16];
    size_t rest_len;
    ck_assert_int_eq(read_after_partial(port, rest, sizeof(rest), &rest_len), -ECONNRESET);
    ck_assert_uint_eq(rest_len, 0);
    wait_for_close();
    ck_assert_int_eq(atomic_load(&last_close_error), -EIO);
    test_stop_server(server);
}
END_TEST

START_TEST(an_abort_without_an_error_ends_with_a_fin)
{
    atomic_store(&abort_error, 0);
    int port;
    corral_server *server = start_echo(1, &abort_handler, &port);
    char rest[16];
    size_t rest_len;
    ck_assert_int_eq(read_after_partial(port, rest, sizeof(rest), &rest_len), 0);
    ck_assert_uint_eq(rest_len, 0);
    wait_for_close();
    ck_assert_int_eq(atomic_load(&last_close_error), 0);
    test_stop_server(server);
}
END_TEST

START_TEST(an_abort_resets_a_layered_transport_without_its_end_of_stream)
{
    atomic_store(&abort_error, -ECONNRESET);
    int port;
    corral_server *server = start_echo(1, &layered_abort_handler, &port);
    char rest[16];
    size_t rest_len;
    ck_assert_int_eq(read_after_partial(port, rest, sizeof(rest), &rest_len), -ECONNRESET);
    ck_assert_uint_eq(rest_len, 0); /* no "END" */
    wait_for_close();
    test_stop_server(server);
}
END_TEST

/* A write timeout drops queued output: the peer must not take what it got
 * for the whole stream. */
START_TEST(a_write_timeout_resets_the_peer)
{
    int port;
    corral_server *server = start_echo(1, &write_timeout_handler, &port);
    int fd = test_connect_small(port, 16 * 1024);
    test_send_all(fd, "go", 2);
    test_wait_for(atomic_load(&closes) != 0, TEST_WAIT_MS, "the connection did not close");
    ck_assert_int_eq(atomic_load(&closes), 1);
    ck_assert_int_eq(atomic_load(&last_close_error), -ETIMEDOUT);
    static char buf[65536];
    ssize_t n;
    int reads = 0;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0 && reads++ < 10000)
        ;
    ck_assert_int_eq(n, -1);
    ck_assert_int_eq(errno, ECONNRESET);
    close(fd);
    test_stop_server(server);
}
END_TEST

/* ----------------------------------------------------------- write results */

/* A write that cannot be queued ends the connection, and on_close says
 * why: callers need not (and cannot usefully) check each write. */
static _Atomic int oversized_kind;

static size_t oversized_write(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    static char small[4];
    if (atomic_load(&oversized_kind) == 0) {
        /* More than the 1 GiB a connection may queue (rejected before any
         * byte is read from it). */
        struct iovec iov = {.iov_base = small, .iov_len = (1u << 30) + 1};
        corral_conn_writev(conn, &iov, 1);
    } else {
        /* Lengths whose sum wraps around to 1. */
        struct iovec iov[2] = {{.iov_base = small, .iov_len = SIZE_MAX},
                               {.iov_base = small, .iov_len = 2}};
        corral_conn_writev(conn, iov, 2);
    }
    corral_conn_write(conn, "late", 4); /* dropped: the connection is closing */
    return len;
}

static const struct corral_conn_handler oversized_handler = {
    .on_data = oversized_write,
    .on_close = record_close,
};

static void check_oversized_write(int kind)
{
    atomic_store(&oversized_kind, kind);
    int port;
    corral_server *server = start_echo(1, &oversized_handler, &port);
    int fd = test_connect(port);
    test_send_all(fd, "go", 2);
    test_wait_for(atomic_load(&closes) != 0, TEST_WAIT_MS, "the connection did not close");
    ck_assert_int_eq(atomic_load(&closes), 1);
    ck_assert_int_eq(atomic_load(&last_close_error), -ENOBUFS);
    char byte;
    ck_assert_int_eq(recv(fd, &byte, 1, 0), -1); /* reset, and "late" never sent */
    ck_assert_int_eq(errno, ECONNRESET);
    close(fd);
    test_stop_server(server);
}

START_TEST(a_write_over_the_queue_limit_aborts_with_enobufs)
{
    check_oversized_write(0);
}
END_TEST

START_TEST(write_lengths_that_wrap_around_abort_with_enobufs)
{
    check_oversized_write(1);
}
END_TEST

/* ---------------------------------------------------------- backpressure */

/* Whether output is backed up is measured against the connection's own
 * high watermark, not the default one. */
static _Atomic int backed_up_below, backed_up_above;

static size_t write_past_own_watermark(corral_conn *conn, const char *data, size_t len)
{
    (void)data;
    static char chunk[2 * 1024 * 1024];
    /* Large writes go to the socket at once: a small send buffer keeps
     * most of them queued. */
    int small = 16 * 1024;
    setsockopt(corral_conn_fd(conn), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    corral_conn_set_watermarks(conn, 1024 * 1024, 64 * 1024);
    corral_conn_write(conn, chunk, 512 * 1024); /* over the default 256 KiB */
    atomic_store(&backed_up_below, corral_conn_backed_up(conn) ? 1 : 0);
    corral_conn_write(conn, chunk, sizeof(chunk));
    atomic_store(&backed_up_above, corral_conn_backed_up(conn) ? 1 : 0);
    return len;
}

static const struct corral_conn_handler own_watermark_handler = {
    .on_data = write_past_own_watermark,
    .on_close = record_close,
};

START_TEST(backed_up_follows_the_connections_own_watermark)
{
    atomic_store(&backed_up_below, -1);
    atomic_store(&backed_up_above, -1);
    int port;
    corral_server *server = start_echo(1, &own_watermark_handler, &port);
    int fd = test_connect(port);
    test_send_all(fd, "go", 2);
    test_wait_for(atomic_load(&backed_up_above) != -1, TEST_WAIT_MS, "never backed up");
    ck_assert_int_eq(atomic_load(&backed_up_below), 0);
    ck_assert_int_eq(atomic_load(&backed_up_above), 1);
    close(fd);
    test_stop_server(server);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/conn");
    TCase *tc = tcase_create("conn");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, echo_round_trips);
    tcase_add_test(tc, ten_megabytes_through_a_slow_reader_stay_bounded);
    tcase_add_test(tc, a_client_that_speaks_late_is_heard);
    tcase_add_test(tc, output_larger_than_the_socket_is_flushed_later);
    tcase_add_test(tc, deadline_fires_once_unless_cleared);
    tcase_add_test(tc, half_close_flushes_then_closes);
    tcase_add_test(tc, close_lingers_so_the_peer_reads_everything);
    tcase_add_test(tc, read_timeout_closes_an_idle_connection);
    tcase_add_test(tc, write_timeout_closes_a_stalled_reader);
    tcase_add_test(tc, outgoing_connection_round_trip);
    tcase_add_test(tc, refused_connection_reports_econnrefused);
    tcase_add_test(tc, a_connect_that_fails_at_once_never_reaches_on_close);
    tcase_add_test(tc, an_abort_with_an_error_resets_the_peer);
    tcase_add_test(tc, an_abort_without_an_error_ends_with_a_fin);
    tcase_add_test(tc, an_abort_resets_a_layered_transport_without_its_end_of_stream);
    tcase_add_test(tc, a_write_timeout_resets_the_peer);
    tcase_add_test(tc, a_write_over_the_queue_limit_aborts_with_enobufs);
    tcase_add_test(tc, write_lengths_that_wrap_around_abort_with_enobufs);
    tcase_add_test(tc, backed_up_follows_the_connections_own_watermark);
    suite_add_tcase(suite, tc);
    return suite;
}
