/*
 * test_udp.c: UDP listens on loopback: batches, peer and local addresses,
 * ECN, GSO on, off and refused, GRO, a full socket (EAGAIN) and waiting
 * for writability, several workers with a socket each, steering, and
 * sockets handed to a successor server.
 */
#include "../helpers.h"
#include "internal.h"
#include "udp_burst.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

/* What the workers saw, read by the test thread under the lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned calls, datagrams, max_batch, per_worker[4];
static char locals[64][64]; /* the local address of each datagram, in order */
static uint8_t ecns[64];
static unsigned gro_segment;
static size_t gro_len;
static unsigned mismatched; /* datagrams whose socket was not its worker's */

static void reset(void)
{
    pthread_mutex_lock(&lock);
    calls = datagrams = max_batch = gro_segment = mismatched = 0;
    gro_len = 0;
    memset(per_worker, 0, sizeof(per_worker));
    pthread_mutex_unlock(&lock);
}

static unsigned read_counter(const unsigned *counter)
{
    pthread_mutex_lock(&lock);
    unsigned value = *counter;
    pthread_mutex_unlock(&lock);
    return value;
}

static void record(corral_udp_socket *sock, const struct corral_udp_msg *msgs, size_t count)
{
    unsigned worker = corral_worker_index(corral_udp_socket_worker(sock));
    pthread_mutex_lock(&lock);
    calls++;
    if (count > max_batch)
        max_batch = (unsigned)count;
    for (size_t i = 0; i < count; i++) {
        if (datagrams < 64) {
            corral_format_address((const struct sockaddr *)&msgs[i].local, msgs[i].local_len,
                                  locals[datagrams], sizeof(locals[0]));
            ecns[datagrams] = msgs[i].ecn;
        }
        datagrams++;
        if (worker < 4)
            per_worker[worker]++;
        if (msgs[i].segment_size > 0) {
            gro_segment = msgs[i].segment_size;
            gro_len = msgs[i].len;
        }
    }
    if (corral_udp_socket_of(corral_udp_socket_udp(sock), worker) != sock)
        mismatched++;
    pthread_mutex_unlock(&lock);
}

/* Echoes every datagram from the address it was sent to, with its ECN
 * bits. */
static void echo_on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    record(sock, msgs, count);
    ck_assert_uint_eq(corral_udp_send(sock, msgs, count), count);
}

static unsigned stops;
static void count_on_stop(corral_udp_socket *sock)
{
    (void)sock;
    pthread_mutex_lock(&lock);
    stops++;
    pthread_mutex_unlock(&lock);
}

static const struct corral_udp_handler echo_handler = {.on_recv = echo_on_recv,
                                                       .on_stop = count_on_stop};

/* Worker `index`'s counters once its sends are counted: a client may
 * read a datagram before the worker that sent it has counted it. */
static struct corral_udp_stats stats_after_sends(corral_udp *udp, unsigned index, uint64_t sent)
{
    struct corral_udp_stats stats;
    test_wait_for(corral_udp_stats(udp, index, &stats) == 0 && stats.sent >= sent, TEST_WAIT_MS,
                  "%llu datagrams not counted as sent", (unsigned long long)sent);
    return stats;
}

static corral_server *server_new(unsigned workers, const struct corral_kernel_caps *caps)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = workers;
    config.caps = caps;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    return server;
}

/* A UDP client socket connected to host:port: it takes datagrams from
 * that address only.  5 s receive timeout. */
static int client(const char *host, int port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &addr.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

START_TEST(batches_with_peer_and_local_addresses)
{
    reset();
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(corral_server_listen_udp(server, "0.0.0.0:0", NULL, &echo_handler, NULL, &udp),
                     0);
    int port = corral_udp_port(udp);
    ck_assert_int_gt(port, 0);
    /* Queued before the worker runs: its first recvmmsg() takes them as
     * one batch of the default 16. */
    int to_one = client("127.0.0.1", port), to_two = client("127.0.0.2", port);
    for (int i = 0; i < 10; i++) {
        char text[16];
        int len = snprintf(text, sizeof(text), "q%d", i);
        ck_assert_int_eq(send(i % 2 ? to_two : to_one, text, (size_t)len, 0), len);
    }
    ck_assert_int_eq(corral_server_start(server), 0);
    /* The answers come back from the address each was sent to: the
     * connected clients would not take them from another. */
    for (int i = 0; i < 10; i++) {
        char expect[16], got[16];
        int len = snprintf(expect, sizeof(expect), "q%d", i);
        ck_assert_int_eq(recv(i % 2 ? to_two : to_one, got, sizeof(got), 0), len);
        ck_assert(memcmp(got, expect, (size_t)len) == 0);
    }
    ck_assert_uint_eq(read_counter(&datagrams), 10);
    ck_assert_uint_eq(read_counter(&max_batch), 10);
    ck_assert_uint_eq(read_counter(&calls), 1);
    char expect_local[64];
    snprintf(expect_local, sizeof(expect_local), "127.0.0.2:%d", port);
    pthread_mutex_lock(&lock);
    ck_assert_str_eq(locals[1], expect_local);
    snprintf(expect_local, sizeof(expect_local), "127.0.0.1:%d", port);
    ck_assert_str_eq(locals[0], expect_local);
    pthread_mutex_unlock(&lock);
    struct corral_udp_stats stats = stats_after_sends(udp, 0, 10);
    for (size_t i = 0; i < sizeof(stats.reserved) / sizeof(stats.reserved[0]); i++)
        ck_assert_uint_eq(stats.reserved[i], 0);
    ck_assert_uint_eq(stats.received, 10);
    ck_assert_uint_eq(stats.recv_batches, 1);
    ck_assert_uint_eq(stats.sent, 10);
    ck_assert_uint_eq(stats.send_calls, 1);
    close(to_one);
    close(to_two);
    test_stop_server(server);
}
END_TEST

START_TEST(ecn_bits_both_ways)
{
    reset();
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &echo_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int fd = client("127.0.0.1", corral_udp_port(udp));
    int one = 1;
    ck_assert_int_eq(setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)), 0);
    int tos = 2; /* ECT(0) */
    ck_assert_int_eq(setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)), 0);
    ck_assert_int_eq(send(fd, "x", 1, 0), 1);
    char byte;
    union {
        struct cmsghdr align;
        char bytes[64];
    } control;
    struct iovec iov = {&byte, 1};
    struct msghdr hdr = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.bytes,
                         .msg_controllen = sizeof(control.bytes)};
    ck_assert_int_eq(recvmsg(fd, &hdr, 0), 1);
    int got = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&hdr); c != NULL; c = CMSG_NXTHDR(&hdr, c))
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
            got = *(unsigned char *)CMSG_DATA(c);
    ck_assert_int_eq(got & 3, 2); /* the echo set them from what it read */
    pthread_mutex_lock(&lock);
    ck_assert_uint_eq(ecns[0], 2);
    pthread_mutex_unlock(&lock);
    close(fd);
    test_stop_server(server);
}
END_TEST

START_TEST(ipv6_addresses_and_traffic_class)
{
    reset();
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(corral_server_listen_udp(server, "[::1]:0", NULL, &echo_handler, NULL, &udp),
                     0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int port = corral_udp_port(udp);
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 addr = {.sin6_family = AF_INET6,
                                .sin6_port = htons((uint16_t)port),
                                .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1, tclass = 1; /* ECT(1) */
    ck_assert_int_eq(setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one)), 0);
    ck_assert_int_eq(setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tclass, sizeof(tclass)), 0);
    ck_assert_int_eq(send(fd, "six", 3, 0), 3);
    char got[8];
    union {
        struct cmsghdr align;
        char bytes[64];
    } control;
    struct iovec iov = {got, sizeof(got)};
    struct msghdr hdr = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.bytes,
                         .msg_controllen = sizeof(control.bytes)};
    ck_assert_int_eq(recvmsg(fd, &hdr, 0), 3);
    int echoed = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&hdr); c != NULL; c = CMSG_NXTHDR(&hdr, c))
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)
            memcpy(&echoed, CMSG_DATA(c), sizeof(echoed));
    ck_assert_int_eq(echoed & 3, 1);
    char expect[64];
    snprintf(expect, sizeof(expect), "[::1]:%d", port);
    pthread_mutex_lock(&lock);
    ck_assert_str_eq(locals[0], expect);
    ck_assert_uint_eq(ecns[0], 1);
    pthread_mutex_unlock(&lock);
    close(fd);
    test_stop_server(server);
}
END_TEST

/* ------------------------------------------------------------ GSO runs */

#define RUN_SEGMENT 1000
#define RUN_BYTES   (37 * RUN_SEGMENT + 123) /* 38 datagrams, the last short */
static char run[RUN_BYTES];

/* Answers any datagram with the run, as one message of RUN_SEGMENT-byte
 * datagrams. */
static void run_on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    record(sock, msgs, count);
    struct corral_udp_msg msg = msgs[0];
    msg.data = run;
    msg.len = sizeof(run);
    msg.segment_size = RUN_SEGMENT;
    ck_assert_uint_eq(corral_udp_send(sock, &msg, 1), 1);
}

static const struct corral_udp_handler run_handler = {.on_recv = run_on_recv};

/* Asks for the run and checks that every byte of it arrives, in
 * datagrams of RUN_SEGMENT bytes. */
static void check_run(int port)
{
    int fd = client("127.0.0.1", port);
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    ck_assert_int_eq(send(fd, "go", 2, 0), 2);
    static char got[RUN_BYTES];
    size_t total = 0;
    unsigned count = 0;
    while (total < sizeof(got)) {
        ssize_t n = recv(fd, got + total, sizeof(got) - total, 0);
        ck_assert_int_gt(n, 0);
        ck_assert(n == RUN_SEGMENT || total + (size_t)n == sizeof(got));
        total += (size_t)n;
        count++;
    }
    ck_assert_uint_eq(count, 38);
    ck_assert(memcmp(got, run, sizeof(run)) == 0);
    close(fd);
}

static void fill_run(void)
{
    for (size_t i = 0; i < sizeof(run); i++)
        run[i] = (char)(i * 7 + i / RUN_SEGMENT);
}

START_TEST(gso_on_and_off_deliver_the_same_bytes)
{
    fill_run();
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    for (int gso = 0; gso < 2; gso++) {
        reset();
        struct corral_kernel_caps used = caps;
        if (!gso)
            ck_assert_int_eq(corral_caps_disable(&used, "udp_gso"), 0);
        corral_server *server = server_new(1, &used);
        corral_udp *udp;
        ck_assert_int_eq(
            corral_server_listen_udp(server, "127.0.0.1:0", NULL, &run_handler, NULL, &udp), 0);
        ck_assert_int_eq(corral_server_start(server), 0);
        check_run(corral_udp_port(udp));
        struct corral_udp_stats stats = stats_after_sends(udp, 0, 38);
        ck_assert_uint_eq(stats.sent, 38);
        ck_assert_uint_eq(stats.sent_bytes, RUN_BYTES);
        if (gso && caps.udp_gso) {
            ck_assert(stats.gso);
            ck_assert_uint_eq(stats.gso_sends, 1);
            ck_assert_uint_eq(stats.send_calls, 1);
        } else {
            ck_assert(!stats.gso);
            ck_assert_uint_eq(stats.gso_sends, 0);
        }
        test_stop_server(server);
    }
}
END_TEST

/* sendmmsg() as a device without segmentation offload answers it: EIO for
 * any batch whose first message asks for GSO. */
static int refusing_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int count, int flags)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[0].msg_hdr); c != NULL;
         c = CMSG_NXTHDR(&msgs[0].msg_hdr, c))
        if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_SEGMENT) {
            errno = EIO;
            return -1;
        }
    return sendmmsg(fd, msgs, count, flags);
}

START_TEST(a_refused_gso_send_goes_unsegmented_and_gso_stops)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (!caps.udp_gso)
        return; /* nothing to refuse: the kernel has no GSO */
    fill_run();
    reset();
    corral__udp_sendmmsg = refusing_sendmmsg;
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &run_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    check_run(corral_udp_port(udp));
    check_run(corral_udp_port(udp)); /* no GSO is tried a second time */
    struct corral_udp_stats stats = stats_after_sends(udp, 0, 76);
    ck_assert_uint_eq(stats.gso_fallbacks, 1);
    ck_assert_uint_eq(stats.gso_sends, 0);
    ck_assert(!stats.gso);
    ck_assert_uint_eq(stats.sent, 76);
    test_stop_server(server);
    corral__udp_sendmmsg = sendmmsg;
}
END_TEST

/* A run longer than one GSO send takes (64 datagrams) goes as several;
 * a message the kernel refuses (a datagram over 64 KB) is dropped and
 * counted, and the batch goes on after it. */
static char long_run[150 * 500];
static void long_on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    record(sock, msgs, count);
    static char too_big[70000];
    struct corral_udp_msg out[3] = {msgs[0], msgs[0], msgs[0]};
    out[0].data = too_big;
    out[0].len = sizeof(too_big);
    out[1].data = long_run;
    out[1].len = sizeof(long_run);
    out[1].segment_size = 500;
    out[2].data = "end";
    out[2].len = 3;
    ck_assert_uint_eq(corral_udp_send(sock, out, 3), 3);
}

static const struct corral_udp_handler long_handler = {.on_recv = long_on_recv};

START_TEST(long_runs_split_and_refused_messages_are_dropped)
{
    for (size_t i = 0; i < sizeof(long_run); i++)
        long_run[i] = (char)(i / 500);
    reset();
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &long_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int fd = client("127.0.0.1", corral_udp_port(udp));
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    ck_assert_int_eq(send(fd, "go", 2, 0), 2);
    for (int i = 0; i < 150; i++) {
        char got[600];
        ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 500);
        ck_assert_int_eq(got[0], (char)i); /* in order, none missing */
    }
    char got[8];
    ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 3);
    struct corral_udp_stats stats = stats_after_sends(udp, 0, 151);
    ck_assert_uint_eq(stats.send_errors, 1);
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (caps.udp_gso)
        ck_assert_uint_eq(stats.gso_sends, 3); /* 64 + 64 + 22 datagrams */
    close(fd);
    test_stop_server(server);
}
END_TEST

#define BURST_LEN (10 * 500)

/* Sends BURST_LEN bytes as ten datagrams of 500 in one sendmsg() with
 * UDP_SEGMENT: over loopback, a GRO-eligible burst. */
static void send_gso_burst(int fd)
{
    static char payload[BURST_LEN];
    memset(payload, 'g', sizeof(payload));
    udp_burst_send(fd, payload, sizeof(payload), 500);
}

START_TEST(gro_hands_over_a_coalesced_run)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (!caps.udp_gro || !caps.udp_gso)
        return; /* the kernel can neither send nor read a run */
    reset();
    corral_server *server = server_new(1, NULL);
    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.gro = true;
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", &options, &echo_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    /* A GSO send over loopback reaches a GRO socket as one run. */
    int fd = client("127.0.0.1", corral_udp_port(udp));
    send_gso_burst(fd);
    test_wait_for(read_counter(&datagrams) >= 1, TEST_WAIT_MS, "the run did not arrive");
    pthread_mutex_lock(&lock);
    ck_assert_uint_eq(gro_segment, 500);
    ck_assert_uint_eq(gro_len, BURST_LEN);
    pthread_mutex_unlock(&lock);
    /* The echo sends the run back as it came, segmented again: ten
     * datagrams of 500 bytes. */
    for (int i = 0; i < 10; i++) {
        char got[600];
        ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 500);
    }
    struct corral_udp_stats stats = stats_after_sends(udp, 0, 10);
    ck_assert(stats.gro);
    ck_assert_uint_eq(stats.received, 10);
    close(fd);
    test_stop_server(server);
}
END_TEST

/* GRO asked for where the kernel cannot (its capability off, as when
 * setsockopt(UDP_GRO) fails): the socket reads without it, and the same
 * burst arrives as ten datagrams, each seen on its own. */
START_TEST(gro_refused_reads_each_datagram)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (!caps.udp_gso)
        return; /* the burst cannot be sent in one call */
    reset();
    ck_assert_int_eq(corral_caps_disable(&caps, "udp_gro"), 0);
    corral_server *server = server_new(1, &caps);
    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.gro = true;
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", &options, &echo_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int fd = client("127.0.0.1", corral_udp_port(udp));
    send_gso_burst(fd);
    test_wait_for(read_counter(&datagrams) >= 10, TEST_WAIT_MS, "the datagrams did not arrive");
    pthread_mutex_lock(&lock);
    ck_assert_uint_eq(datagrams, 10);
    ck_assert_uint_eq(gro_segment, 0); /* none coalesced */
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < 10; i++) {
        char got[600];
        ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 500);
    }
    struct corral_udp_stats stats = stats_after_sends(udp, 0, 10);
    ck_assert(!stats.gro);
    ck_assert_uint_eq(stats.received, 10);
    close(fd);
    test_stop_server(server);
}
END_TEST

START_TEST(a_datagram_over_the_bound_is_dropped_and_counted)
{
    reset();
    corral_server *server = server_new(1, NULL);
    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.max_datagram = 100;
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", &options, &echo_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int fd = client("127.0.0.1", corral_udp_port(udp));
    char big[101] = {0};
    ck_assert_int_eq(send(fd, big, sizeof(big), 0), (ssize_t)sizeof(big));
    ck_assert_int_eq(send(fd, big, 100, 0), 100);
    char got[200];
    ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 100); /* only the one that fit */
    struct corral_udp_stats stats = stats_after_sends(udp, 0, 1);
    ck_assert_uint_eq(stats.truncated, 1);
    ck_assert_uint_eq(read_counter(&datagrams), 1);
    close(fd);
    test_stop_server(server);
}
END_TEST

/* ------------------------------------------------------ a full socket */

/* Loopback never fills a UDP send buffer (the receiver takes each
 * datagram at once), so the kernel's EAGAIN is played here: the first
 * `full_calls` sends find the socket full. */
static int full_calls;
static int filling_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int count, int flags)
{
    if (full_calls > 0) {
        full_calls--;
        errno = EAGAIN;
        return -1;
    }
    return sendmmsg(fd, msgs, count, flags);
}

/* What waits for writability: one answer per worker (one worker here). */
static struct corral_udp_msg pending;
static char pending_data[64];
static unsigned writable_calls;

static void backpressure_on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    record(sock, msgs, count);
    size_t done = corral_udp_send(sock, msgs, count);
    if (done < count) { /* keep the first one not sent, and wait */
        pending = msgs[done];
        memcpy(pending_data, msgs[done].data, msgs[done].len < 64 ? msgs[done].len : 64);
        pending.data = pending_data;
        ck_assert_int_eq(corral_udp_wait_writable(sock), 0);
    }
}

static void backpressure_on_writable(corral_udp_socket *sock)
{
    pthread_mutex_lock(&lock);
    writable_calls++;
    pthread_mutex_unlock(&lock);
    ck_assert_uint_eq(corral_udp_send(sock, &pending, 1), 1);
}

static const struct corral_udp_handler backpressure_handler = {
    .on_recv = backpressure_on_recv,
    .on_writable = backpressure_on_writable,
};

START_TEST(a_full_socket_is_reported_and_writability_awaited)
{
    reset();
    full_calls = 1;
    corral__udp_sendmmsg = filling_sendmmsg;
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &backpressure_handler, NULL, &udp),
        0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int fd = client("127.0.0.1", corral_udp_port(udp));
    ck_assert_int_eq(send(fd, "ping", 4, 0), 4);
    char got[16];
    ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 4);
    ck_assert(memcmp(got, "ping", 4) == 0);
    struct corral_udp_stats stats = stats_after_sends(udp, 0, 1);
    ck_assert_uint_eq(read_counter(&writable_calls), 1);
    ck_assert_uint_eq(stats.send_full, 1);
    ck_assert_uint_eq(stats.sent, 1);
    close(fd);
    test_stop_server(server);
    corral__udp_sendmmsg = sendmmsg;
}
END_TEST

START_TEST(waiting_for_writability_needs_on_writable)
{
    /* Checked on a socket of a server that runs, from its own worker. */
    reset();
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &echo_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    corral_server_stop(server, 0);
    corral_server_wait(server);
    /* The loop has stopped: the socket is this thread's now. */
    ck_assert_int_eq(corral_udp_wait_writable(corral_udp_socket_of(udp, 0)), -EINVAL);
    corral_server_free(server);
}
END_TEST

/* ------------------------------------------------------ several workers */

/* Sends one datagram from each of `clients` sockets (each its own port,
 * so the group's hash spreads them) and waits for every echo. */
static void send_from_many(int port, int clients)
{
    int fds[64];
    ck_assert_int_le(clients, 64);
    for (int i = 0; i < clients; i++) {
        fds[i] = client("127.0.0.1", port);
        ck_assert_int_eq(send(fds[i], "hi", 2, 0), 2);
    }
    for (int i = 0; i < clients; i++) {
        char got[8];
        ck_assert_int_eq(recv(fds[i], got, sizeof(got), 0), 2);
        close(fds[i]);
    }
}

START_TEST(each_worker_reads_its_own_socket)
{
    reset();
    corral_server *server = server_new(2, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &echo_handler, NULL, &udp), 0);
    const int *fds;
    ck_assert_uint_eq(corral_udp_fds(udp, &fds), 2);
    ck_assert_int_ne(fds[0], fds[1]);
    ck_assert_int_eq(corral_server_start(server), 0);
    send_from_many(corral_udp_port(udp), 64);
    /* 64 source ports over two sockets: both take some (all on one is a
     * 2^-63 chance), each on its own worker. */
    ck_assert_uint_gt(read_counter(&per_worker[0]), 0);
    ck_assert_uint_gt(read_counter(&per_worker[1]), 0);
    ck_assert_uint_eq(read_counter(&per_worker[0]) + read_counter(&per_worker[1]), 64);
    ck_assert_uint_eq(read_counter(&mismatched), 0);
    test_stop_server(server);
    ck_assert_uint_eq(read_counter(&stops), 2); /* each worker's socket, once */
}
END_TEST

START_TEST(a_steering_program_picks_the_worker)
{
    reset();
    corral_server *server = server_new(2, NULL);
    struct sock_filter to_second[] = {BPF_STMT(BPF_RET | BPF_K, 1)};
    struct sock_fprog program = {.len = 1, .filter = to_second};
    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.steer_cbpf = &program;
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", &options, &echo_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    send_from_many(corral_udp_port(udp), 32);
    ck_assert_uint_eq(read_counter(&per_worker[0]), 0);
    ck_assert_uint_eq(read_counter(&per_worker[1]), 32);
    test_stop_server(server);
}
END_TEST

START_TEST(an_address_in_use_fails_cleanly)
{
    corral_server *server = server_new(2, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &echo_handler, NULL, &udp), 0);
    char address[64];
    ck_assert_int_eq(corral_udp_address(udp, address, sizeof(address)), 0);
    corral_server *other = server_new(2, NULL);
    int before = test_fd_count();
    ck_assert_int_eq(corral_server_listen_udp(other, address, NULL, &echo_handler, NULL, NULL),
                     -EADDRINUSE);
    ck_assert_int_eq(
        corral_server_listen_udp(other, "unix:/tmp/x", NULL, &echo_handler, NULL, NULL), -EINVAL);
    struct corral_udp_handler no_recv = {0};
    ck_assert_int_eq(corral_server_listen_udp(other, "127.0.0.1:0", NULL, &no_recv, NULL, NULL),
                     -EINVAL);
    /* Members of a later header, and options out of range, are refused. */
    struct corral_udp_handler later = echo_handler;
    later.reserved[0] = (void (*)(void))echo_on_recv;
    ck_assert_int_eq(corral_server_listen_udp(other, "127.0.0.1:0", NULL, &later, NULL, NULL),
                     -EINVAL);
    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.reserved[6] = 1; /* the last */
    ck_assert_int_eq(
        corral_server_listen_udp(other, "127.0.0.1:0", &options, &echo_handler, NULL, NULL),
        -EINVAL);
    corral_udp_options_init(&options);
    options.max_datagram = 65536;
    ck_assert_int_eq(
        corral_server_listen_udp(other, "127.0.0.1:0", &options, &echo_handler, NULL, NULL),
        -EINVAL);
    corral_udp_options_init(&options);
    options.recv_batch = 0;
    ck_assert_int_eq(
        corral_server_listen_udp(other, "127.0.0.1:0", &options, &echo_handler, NULL, NULL),
        -EINVAL);
    ck_assert_int_eq(test_fd_count(), before);
    corral_server_free(other);
    corral_server_free(server);
}
END_TEST

/* ----------------------------------------------------------- a successor */

/* The old server's part after it let go of its sockets: each worker sends
 * one datagram to `old_to` from its socket. */
static struct sockaddr_in old_to;
static void old_send(void *arg)
{
    corral_udp_socket *sock = arg;
    struct corral_udp_msg msg = {.data = "late", .len = 4, .peer_len = sizeof(old_to)};
    memcpy(&msg.peer, &old_to, sizeof(old_to));
    ck_assert_uint_eq(corral_udp_send(sock, &msg, 1), 1);
}

START_TEST(a_successor_keeps_the_port_and_what_was_queued)
{
    reset();
    corral_server *old = server_new(2, NULL);
    corral_udp *old_udp;
    ck_assert_int_eq(
        corral_server_listen_udp(old, "127.0.0.1:0", NULL, &echo_handler, NULL, &old_udp), 0);
    ck_assert_int_eq(corral_server_start(old), 0);
    int port = corral_udp_port(old_udp);
    send_from_many(port, 8);
    ck_assert_uint_eq(read_counter(&datagrams), 8);

    /* The successor has one worker more: it joins the group with a socket
     * of its own for it. */
    const int *fds;
    unsigned count = corral_udp_fds(old_udp, &fds);
    corral_server *next = server_new(3, NULL);
    corral_udp *next_udp;
    ck_assert_int_eq(corral_server_udp_fds(next, fds, count, NULL, &echo_handler, NULL, &next_udp),
                     0);
    ck_assert_int_eq(corral_udp_port(next_udp), port);
    corral_server_close_listeners(old); /* the old workers let go; the sockets stay open */
    /* The old server still answers, from its sockets' address. */
    int late = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    old_to = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(late, (struct sockaddr *)&old_to, sizeof(old_to)), 0);
    socklen_t to_len = sizeof(old_to);
    ck_assert_int_eq(getsockname(late, (struct sockaddr *)&old_to, &to_len), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(late, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (unsigned i = 0; i < 2; i++)
        ck_assert_int_eq(corral_worker_post(corral_server_worker(old, i), old_send,
                                            corral_udp_socket_of(old_udp, i)),
                         0);
    for (int i = 0; i < 2; i++) {
        char got[8];
        struct sockaddr_in from;
        socklen_t from_len = sizeof(from);
        ck_assert_int_eq(recvfrom(late, got, sizeof(got), 0, (struct sockaddr *)&from, &from_len),
                         4);
        ck_assert_int_eq(ntohs(from.sin_port), port);
    }
    close(late);

    /* Sent while no one reads: queued in the sockets, not lost. */
    reset();
    int clients[16];
    for (int i = 0; i < 16; i++) {
        clients[i] = client("127.0.0.1", port);
        ck_assert_int_eq(send(clients[i], "q", 1, 0), 1);
    }
    ck_assert_uint_eq(read_counter(&datagrams), 0);
    ck_assert_int_eq(corral_server_start(next), 0);
    for (int i = 0; i < 16; i++) {
        char got[4];
        ck_assert_int_eq(recv(clients[i], got, sizeof(got), 0), 1);
        close(clients[i]);
    }
    ck_assert_uint_eq(read_counter(&datagrams), 16);
    test_stop_server(old);
    test_stop_server(next);
}
END_TEST

/* A handler that holds its worker when a graceful stop begins (as a
 * QUIC endpoint does while its connections drain), echoes what it reads,
 * and gives the hold back on a datagram "release". */
static unsigned stoppings;
static void hold_on_stopping(corral_udp_socket *sock)
{
    pthread_mutex_lock(&lock);
    stoppings++;
    pthread_mutex_unlock(&lock);
    corral_worker_hold(corral_udp_socket_worker(sock));
}

static void hold_on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    record(sock, msgs, count);
    ck_assert_uint_eq(corral_udp_send(sock, msgs, count), count);
    for (size_t i = 0; i < count; i++)
        if (msgs[i].len == 7 && memcmp(msgs[i].data, "release", 7) == 0)
            corral_worker_release(corral_udp_socket_worker(sock));
}

static const struct corral_udp_handler hold_handler = {
    .on_recv = hold_on_recv, .on_stop = count_on_stop, .on_stopping = hold_on_stopping};

/* Whether the server's workers have all exited. */
static bool all_stopped(void *arg)
{
    (void)arg;
    return read_counter(&stops) == 1;
}

START_TEST(a_hold_keeps_a_stopping_worker_and_its_socket_read)
{
    reset();
    stops = stoppings = 0;
    corral_server *server = server_new(1, NULL);
    corral_udp *udp;
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &hold_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    int fd = client("127.0.0.1", corral_udp_port(udp));
    /* A stop's TCP side only: the UDP socket stays in the loop. */
    corral_server_close_tcp_listeners(server);
    corral_server_stop(server, 10000);
    test_wait_for(read_counter(&stoppings) == 1, TEST_WAIT_MS, "on_stopping not called");
    /* Held: the worker runs on, and still reads and answers. */
    char got[16];
    ck_assert_int_eq(send(fd, "ping", 4, 0), 4);
    ck_assert_int_eq(recv(fd, got, sizeof(got), 0), 4);
    ck_assert_uint_eq(read_counter(&stops), 0);
    /* Released: it ends, long before the grace. */
    uint64_t released = test_now_ms();
    ck_assert_int_eq(send(fd, "release", 7, 0), 7);
    ck_assert(test_poll_until(all_stopped, NULL, TEST_WAIT_MS));
    ck_assert_uint_lt(test_now_ms() - released, 5000);
    corral_server_wait(server);
    corral_server_free(server);
    close(fd);

    /* A hold never released: the grace ends it. */
    reset();
    stops = stoppings = 0;
    server = server_new(1, NULL);
    ck_assert_int_eq(
        corral_server_listen_udp(server, "127.0.0.1:0", NULL, &hold_handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    corral_server_stop(server, 50);
    ck_assert(test_poll_until(all_stopped, NULL, TEST_WAIT_MS));
    ck_assert_uint_eq(read_counter(&stoppings), 1);
    corral_server_wait(server);
    corral_server_free(server);
}
END_TEST

START_TEST(successor_refuses_what_is_not_a_bound_udp_socket)
{
    corral_server *server = server_new(1, NULL);
    int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int unbound = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(corral_server_udp_fds(server, &tcp, 1, NULL, &echo_handler, NULL, NULL),
                     -EINVAL);
    ck_assert_int_eq(corral_server_udp_fds(server, &unbound, 1, NULL, &echo_handler, NULL, NULL),
                     -EINVAL);
    close(tcp);
    close(unbound);
    corral_server_free(server);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/udp");
    TCase *tc = tcase_create("udp");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, batches_with_peer_and_local_addresses);
    tcase_add_test(tc, ecn_bits_both_ways);
    tcase_add_test(tc, ipv6_addresses_and_traffic_class);
    tcase_add_test(tc, gso_on_and_off_deliver_the_same_bytes);
    tcase_add_test(tc, a_refused_gso_send_goes_unsegmented_and_gso_stops);
    tcase_add_test(tc, gro_hands_over_a_coalesced_run);
    tcase_add_test(tc, gro_refused_reads_each_datagram);
    tcase_add_test(tc, long_runs_split_and_refused_messages_are_dropped);
    tcase_add_test(tc, a_datagram_over_the_bound_is_dropped_and_counted);
    tcase_add_test(tc, a_full_socket_is_reported_and_writability_awaited);
    tcase_add_test(tc, waiting_for_writability_needs_on_writable);
    tcase_add_test(tc, each_worker_reads_its_own_socket);
    tcase_add_test(tc, a_steering_program_picks_the_worker);
    tcase_add_test(tc, an_address_in_use_fails_cleanly);
    tcase_add_test(tc, a_successor_keeps_the_port_and_what_was_queued);
    tcase_add_test(tc, successor_refuses_what_is_not_a_bound_udp_socket);
    tcase_add_test(tc, a_hold_keeps_a_stopping_worker_and_its_socket_read);
    suite_add_tcase(suite, tc);
    return suite;
}
