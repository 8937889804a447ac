/*
 * test_udp_steer.c: QUIC steering of a UDP listen by its eBPF program:
 * 1,000 new connections' Initials spread over 4 workers exactly in turn
 * (a client's second Initial following its first), then each
 * connection's short- and long-header datagrams, from another port, all
 * on the worker their ID names; the same over [::1]; balanced and
 * affinity; and the fallbacks when eBPF is off: the classic program, else
 * the hash.  The datagrams are QUIC-shaped (headers only), no handshake.
 */
#include "../helpers.h"
#include "internal.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WORKERS 4
#define CONNS   1000
#define SOCKETS 50 /* client sockets: CONNS / SOCKETS connections on each */

/* The server's IDs: 16 bytes, 0x01, the worker's index (2 bytes), the rest. */
static const struct corral_udp_quic_ids ids = {.length = 16, .marker = 0x01, .index_offset = 1};

/* Per connection: the worker each kind of datagram reached. */
enum kind { FIRST, SECOND, SHORT, HANDSHAKE, KINDS };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int seen[CONNS][KINDS];
static unsigned received;

/* Each datagram carries its connection and kind in its last 3 bytes. */
static void on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    int worker = (int)corral_worker_index(corral_udp_socket_worker(sock));
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count; i++) {
        const uint8_t *d = msgs[i].data;
        size_t len = msgs[i].len;
        ck_assert_uint_ge(len, 3);
        unsigned conn = (unsigned)d[len - 3] << 8 | d[len - 2], kind = d[len - 1];
        ck_assert_uint_lt(conn, CONNS);
        ck_assert_uint_lt(kind, KINDS);
        ck_assert_int_eq(seen[conn][kind], -1);
        seen[conn][kind] = worker;
        received++;
    }
    pthread_mutex_unlock(&lock);
}

static const struct corral_udp_handler handler = {.on_recv = on_recv};

static unsigned read_received(void)
{
    pthread_mutex_lock(&lock);
    unsigned value = received;
    pthread_mutex_unlock(&lock);
    return value;
}

static bool ebpf_available(void)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (caps.ebpf)
        return true;
    fprintf(stderr, "SKIPPED: eBPF steering is unavailable here\n");
    return false;
}

static corral_server *server_new(enum corral_wakeup_mode mode,
                                 const struct corral_kernel_caps *caps)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = WORKERS;
    config.wakeup = mode;
    config.caps = caps;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    memset(seen, 0xff, sizeof(seen));
    received = 0;
    return server;
}

/* A classic program that reads a short header's worker (bytes 2-3). */
static struct sock_filter short_only_code[] = {
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 2),
    BPF_STMT(BPF_RET | BPF_A, 0),
};
static const struct sock_fprog short_only = {.len = 2, .filter = short_only_code};

static corral_udp *listen_on(corral_server *server, const char *address, bool cbpf)
{
    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.steer_quic = &ids;
    options.steer_cbpf = cbpf ? &short_only : NULL;
    options.recv_buffer = 4 << 20;
    corral_udp *udp;
    ck_assert_int_eq(corral_server_listen_udp(server, address, &options, &handler, NULL, &udp), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    return udp;
}

struct client {
    int family;
    struct sockaddr_storage to;
    socklen_t to_len;
    int fds[SOCKETS];
    uint8_t first_ids[CONNS][18];
};
static struct client cl;

static void client_open(int family, int port)
{
    cl.family = family;
    memset(&cl.to, 0, sizeof(cl.to));
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&cl.to;
        *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, "127.0.0.1", &a->sin_addr);
        cl.to_len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&cl.to;
        *a = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
        a->sin6_addr = in6addr_loopback;
        cl.to_len = sizeof(*a);
    }
    for (int i = 0; i < SOCKETS; i++) {
        cl.fds[i] = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(cl.fds[i], 0);
    }
    for (unsigned c = 0; c < CONNS; c++)
        for (unsigned i = 0; i < 18; i++)
            cl.first_ids[c][i] = (uint8_t)(random() >> 7);
}

static void client_close(void)
{
    for (int i = 0; i < SOCKETS; i++)
        close(cl.fds[i]);
}

static void send_tagged(int fd, uint8_t *d, size_t len, unsigned conn, enum kind kind)
{
    d[len - 3] = (uint8_t)(conn >> 8);
    d[len - 2] = (uint8_t)conn;
    d[len - 1] = (uint8_t)kind;
    ck_assert_int_eq(sendto(fd, d, len, 0, (struct sockaddr *)&cl.to, cl.to_len), (ssize_t)len);
}

/* A client Initial (version 1) with the connection's own first ID,
 * padded to 1200 bytes. */
static void send_initial(unsigned conn, enum kind kind)
{
    uint8_t d[1200] = {0xc0, 0, 0, 0, 1, 18};
    memcpy(d + 6, cl.first_ids[conn], 18);
    send_tagged(cl.fds[conn % SOCKETS], d, sizeof(d), conn, kind);
}

/* A datagram with the server's ID for `worker`: a short header, or a
 * long-header Handshake packet; from another socket than the Initials'. */
static void send_owned(unsigned conn, unsigned worker, enum kind kind)
{
    uint8_t d[64] = {0};
    uint8_t *id;
    if (kind == SHORT) {
        d[0] = 0x40;
        id = d + 1;
    } else {
        memcpy(d, (uint8_t[]){0xe0, 0, 0, 0, 1, 16}, 6);
        id = d + 6;
    }
    id[0] = 0x01;
    id[1] = (uint8_t)(worker >> 8);
    id[2] = (uint8_t)worker;
    for (int i = 3; i < 16; i++)
        id[i] = (uint8_t)(random() >> 7);
    send_tagged(cl.fds[(conn + 1) % SOCKETS], d, sizeof(d), conn, kind);
}

static void wait_received(unsigned count)
{
    test_wait_for(read_received() >= count, TEST_WAIT_MS, "%u of %u datagrams received",
                  read_received(), count);
}

/* `conns` connections: two Initials each, then a short-header and a
 * Handshake datagram each to the worker the first reached.  Checks that
 * each connection stayed on one worker and returns how many each got. */
static void run_connections(unsigned conns, unsigned per_worker[WORKERS])
{
    for (unsigned c = 0; c < conns; c++)
        send_initial(c, FIRST);
    wait_received(conns);
    for (unsigned c = 0; c < conns; c++)
        send_initial(c, SECOND);
    wait_received(2 * conns);
    memset(per_worker, 0, WORKERS * sizeof(*per_worker));
    for (unsigned c = 0; c < conns; c++) {
        int w = seen[c][FIRST];
        ck_assert_int_ge(w, 0);
        ck_assert_int_lt(w, WORKERS);
        per_worker[w]++;
        send_owned(c, (unsigned)w, SHORT);
        send_owned(c, (unsigned)w, HANDSHAKE);
    }
    wait_received(4 * conns);
    for (unsigned c = 0; c < conns; c++)
        for (int k = SECOND; k < KINDS; k++)
            ck_assert_msg(seen[c][k] == seen[c][FIRST],
                          "connection %u: datagram %d on worker %d, its Initial on %d", c, k,
                          seen[c][k], seen[c][FIRST]);
}

static void stop(corral_server *server)
{
    corral_server_stop(server, 0);
    corral_server_wait(server);
    corral_server_free(server);
}

static void roundrobin_exact(const char *address, int family, unsigned conns)
{
    if (!ebpf_available())
        return;
    corral_server *server = server_new(CORRAL_WAKEUP_ROUNDROBIN, NULL);
    corral_udp *udp = listen_on(server, address, true);
    struct corral_udp_steering steering;
    corral_udp_steering(udp, &steering);
    ck_assert_str_eq(steering.impl, "ebpf");
    ck_assert_str_eq(steering.initials, "roundrobin");
    ck_assert_str_eq(steering.reason, "");
    client_open(family, corral_udp_port(udp));
    unsigned per_worker[WORKERS];
    run_connections(conns, per_worker);
    for (unsigned w = 0; w < WORKERS; w++) {
        ck_assert_uint_eq(per_worker[w], conns / WORKERS);
        struct corral_udp_stats stats;
        ck_assert_int_eq(corral_udp_stats(udp, w, &stats), 0);
        ck_assert_uint_eq(stats.steered_new, conns / WORKERS);
        ck_assert_uint_eq(stats.steered_owned, 2 * conns / WORKERS);
    }
    client_close();
    stop(server);
}

START_TEST(initials_in_turn_and_every_datagram_on_its_owner)
{
    roundrobin_exact("127.0.0.1:0", AF_INET, CONNS);
}
END_TEST

START_TEST(over_ipv6)
{
    roundrobin_exact("[::1]:0", AF_INET6, 200);
}
END_TEST

/* balanced: three workers say they are loaded; the fourth gets most. */
START_TEST(balanced_by_published_load)
{
    if (!ebpf_available())
        return;
    corral_server *server = server_new(CORRAL_WAKEUP_BALANCED, NULL);
    corral_udp *udp = listen_on(server, "127.0.0.1:0", false);
    struct corral_udp_steering steering;
    corral_udp_steering(udp, &steering);
    ck_assert_str_eq(steering.initials, "balanced");
    for (unsigned w = 0; w < WORKERS - 1; w++)
        corral_udp_publish_load(corral_udp_socket_of(udp, w), 1000);
    client_open(AF_INET, corral_udp_port(udp));
    unsigned per_worker[WORKERS];
    run_connections(200, per_worker);
    for (unsigned w = 0; w < WORKERS - 1; w++)
        ck_assert_msg(per_worker[w] < per_worker[WORKERS - 1], "worker %u got %u, the idle one %u",
                      w, per_worker[w], per_worker[WORKERS - 1]);
    client_close();
    stop(server);
}
END_TEST

/* affinity: Initials sent from one CPU reach that CPU's workers only. */
START_TEST(affinity_by_arrival_cpu)
{
    if (!ebpf_available())
        return;
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (caps.cpu_count < 2) {
        fprintf(stderr, "SKIPPED: one CPU\n");
        return;
    }
    corral_server *server = server_new(CORRAL_WAKEUP_AFFINITY, NULL);
    corral_udp *udp = listen_on(server, "127.0.0.1:0", false);
    struct corral_udp_steering steering;
    corral_udp_steering(udp, &steering);
    ck_assert_str_eq(steering.initials, "affinity");
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(caps.cpus[1], &set);
    ck_assert_int_eq(sched_setaffinity(0, sizeof(set), &set), 0);
    client_open(AF_INET, corral_udp_port(udp));
    unsigned per_worker[WORKERS];
    run_connections(100, per_worker);
    unsigned used = caps.cpu_count < WORKERS ? caps.cpu_count : WORKERS;
    for (unsigned w = 0; w < WORKERS; w++)
        if (w % used != 1)
            ck_assert_msg(per_worker[w] == 0, "worker %u, on another CPU, got %u", w,
                          per_worker[w]);
    client_close();
    stop(server);
}
END_TEST

/* Without eBPF: the classic program steers the server's IDs (here short
 * headers only), and Initials go by the hash; without it, everything. */
START_TEST(fallbacks_said)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    ck_assert_int_eq(corral_caps_disable(&caps, "ebpf"), 0);
    for (int cbpf = 1; cbpf >= 0; cbpf--) {
        corral_server *server = server_new(CORRAL_WAKEUP_ROUNDROBIN, &caps);
        corral_udp *udp = listen_on(server, "127.0.0.1:0", cbpf);
        struct corral_udp_steering steering;
        corral_udp_steering(udp, &steering);
        ck_assert_str_eq(steering.impl, cbpf ? "cbpf" : "hash");
        ck_assert_str_eq(steering.initials, "hash");
        ck_assert_str_ne(steering.reason, "");
        if (cbpf) {
            client_open(AF_INET, corral_udp_port(udp));
            for (unsigned c = 0; c < 40; c++)
                send_owned(c, c % WORKERS, SHORT);
            wait_received(40);
            for (unsigned c = 0; c < 40; c++)
                ck_assert_int_eq(seen[c][SHORT], (int)(c % WORKERS));
            client_close();
        }
        stop(server);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("core/udp_steer");
    TCase *tc = tcase_create("quic");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, initials_in_turn_and_every_datagram_on_its_owner);
    tcase_add_test(tc, over_ipv6);
    tcase_add_test(tc, balanced_by_published_load);
    tcase_add_test(tc, affinity_by_arrival_cpu);
    tcase_add_test(tc, fallbacks_said);
    suite_add_tcase(s, tc);
    return s;
}
