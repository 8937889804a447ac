/*
 * test_wakeup_ebpf.c: the eBPF-steered modes: an exact rotation, the least
 * loaded of two keeping clear of a stalled or busy worker and taking what
 * waits on one (waking up for it if need be), affinity spilling over and
 * weighing the arrival CPU's workers together, the load map following
 * connections, and the queue of a socket that leaves the group moving to a
 * live one.
 */
#include "../helpers.h"
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Whether eBPF steering can run here; says so loudly if not. */
static bool ebpf_available(void)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (caps.ebpf)
        return true;
    struct corral_wakeup_info info;
    corral_wakeup_resolve(CORRAL_WAKEUP_BALANCED, &caps, &info);
    fprintf(stderr, "SKIPPED: eBPF steering is unavailable here: %s\n", info.reason);
    return false;
}

/* Starts a server in `mode` over eBPF; caps NULL: probed. */
/* A server listening on an ephemeral port, not started yet. */
static corral_server *create_on(const struct corral_kernel_caps *caps, enum corral_wakeup_mode mode,
                                unsigned workers, double spill, corral_listener **listener,
                                int *port)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.caps = caps;
    config.workers = workers;
    config.wakeup = mode;
    config.wakeup_spill = spill;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    ck_assert_int_eq(
        corral_server_listen(server, "127.0.0.1:0", NULL, &test_ok_handler, NULL, listener), 0);
    *port = corral_listener_port(*listener);
    return server;
}

/* Starts it, steered by the eBPF program in `mode`. */
static void start_steered(corral_server *server, enum corral_wakeup_mode mode)
{
    ck_assert_int_eq(corral_server_start(server), 0);
    struct corral_wakeup_info info;
    corral_server_wakeup(server, &info);
    ck_assert_int_eq(info.mode, mode);
    ck_assert_str_eq(info.impl, "ebpf");
}

static corral_server *start_on(const struct corral_kernel_caps *caps, enum corral_wakeup_mode mode,
                               unsigned workers, double spill, corral_listener **listener,
                               int *port)
{
    corral_server *server = create_on(caps, mode, workers, spill, listener, port);
    start_steered(server, mode);
    return server;
}

static corral_server *start(enum corral_wakeup_mode mode, unsigned workers, double spill,
                            corral_listener **listener, int *port)
{
    return start_on(NULL, mode, workers, spill, listener, port);
}

static void exchange(int fd)
{
    test_send_all(fd, "ping", 4);
    char reply[2];
    ck_assert_uint_eq(test_recv_all(fd, reply, 2), 2);
    ck_assert(memcmp(reply, "ok", 2) == 0);
}

static struct corral_steer_stats steer(corral_server *server, unsigned worker)
{
    struct corral_steer_stats stats;
    ck_assert_int_eq(corral_server_steer_stats(server, worker, &stats), 0);
    return stats;
}

static struct corral_worker_stats worker_stats(corral_server *server, unsigned worker)
{
    struct corral_worker_stats stats;
    corral_server_stats(server, worker, &stats);
    return stats;
}

/* Blocks a worker's loop, as a slow request or a page fault storm would,
 * for `ms` or until stall_end(): a test ends the stall once it has seen
 * what it looks for, rather than have the server's stop wait it out. */
struct stall {
    unsigned ms;
    atomic_bool started;
    atomic_bool ended;
};

static void stall_worker(void *arg)
{
    struct stall *stall = arg;
    atomic_store(&stall->started, true);
    uint64_t until = test_now_ms() + stall->ms;
    while (!atomic_load(&stall->ended) && test_now_ms() < until)
        test_sleep_ms(1);
}

static void stall_end(struct stall *stall)
{
    atomic_store(&stall->ended, true);
}

static void stall_start(corral_server *server, unsigned worker, struct stall *stall)
{
    atomic_store(&stall->started, false);
    atomic_store(&stall->ended, false);
    ck_assert_int_eq(corral_worker_post(corral_server_worker(server, worker), stall_worker, stall),
                     0);
    test_wait_for(atomic_load(&stall->started), TEST_WAIT_MS, "worker %u did not stall", worker);
}

START_TEST(roundrobin_is_an_exact_rotation)
{
    enum { WORKERS = 4, CONNECTIONS = 400 };
    if (!ebpf_available())
        return;
    corral_listener *listener;
    int port;
    corral_server *server = start(CORRAL_WAKEUP_ROUNDROBIN, WORKERS, 0, &listener, &port);
    for (int i = 0; i < CONNECTIONS; i++) {
        int fd = test_connect(port);
        exchange(fd);
        close(fd);
    }
    for (unsigned w = 0; w < WORKERS; w++) {
        struct corral_worker_stats stats = worker_stats(server, w);
        ck_assert_msg(stats.accepts == CONNECTIONS / WORKERS, "worker %u accepted %lu", w,
                      (unsigned long)stats.accepts);
        ck_assert_uint_eq(steer(server, w).steered, CONNECTIONS / WORKERS);
        /* One waiter per socket: a wakeup always finds a connection. */
        ck_assert_uint_eq(stats.accept_wasted, 0);
    }
    test_stop_server(server);
}
END_TEST

struct window_client {
    int port;
    uint64_t until;
    atomic_int *served;
};

/* Connects, exchanges and closes, again and again until the window ends. */
static void *window_client_main(void *arg)
{
    struct window_client *c = arg;
    while (test_now_ms() < c->until) {
        int fd = test_connect(c->port);
        exchange(fd);
        close(fd);
        atomic_fetch_add(c->served, 1);
    }
    return NULL;
}

START_TEST(balanced_keeps_clear_of_a_stalled_worker)
{
    enum { WORKERS = 8, THREADS = 8, WINDOW_MS = 1000 };
    if (!ebpf_available())
        return;
    corral_listener *listener;
    int port;
    corral_server *server = start(CORRAL_WAKEUP_BALANCED, WORKERS, 0, &listener, &port);
    struct stall stall = {.ms = 2 * WINDOW_MS};
    stall_start(server, 0, &stall);
    atomic_int served = 0;
    struct window_client client = {port, test_now_ms() + WINDOW_MS, &served};
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&threads[i], NULL, window_client_main, &client), 0);
    test_sleep_ms(WINDOW_MS); /* the clients count what is served in the window */
    int in_window = atomic_load(&served);
    uint64_t stalled = steer(server, 0).steered;
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    /* Round-robin queues every eighth connection behind the stall, so all
     * eight clients are stuck after about 64 connections.  The queued ones
     * count as load, and a worker that has left them waiting 2 ms is
     * stalled, so the less loaded of two different workers passes it by
     * (a few may land there before that) and the other clients go on. */
    ck_assert_msg(stalled < THREADS, "the stalled worker was given %lu connections",
                  (unsigned long)stalled);
    ck_assert_msg(in_window >= 150, "only %d connections served while a worker stalled", in_window);
    stall_end(&stall);
    test_stop_server(server);
}
END_TEST

START_TEST(balanced_passes_over_a_busy_worker)
{
    enum { HELD = 8 };
    if (!ebpf_available())
        return;
    corral_listener *listener;
    int port;
    corral_server *server = start(CORRAL_WAKEUP_BALANCED, 2, 0, &listener, &port);
    /* Worker 0 is in the middle of a long callback, with nothing queued:
     * by load alone it would get the first or second of these (worker 1
     * holds each one it takes); it is busy, so it gets none. */
    struct stall stall = {.ms = 1500};
    stall_start(server, 0, &stall);
    test_sleep_ms(20); /* busy for a while: there is no event for that */
    int fds[HELD];
    for (int i = 0; i < HELD; i++) {
        fds[i] = test_connect(port);
        exchange(fds[i]);
    }
    ck_assert_msg(steer(server, 0).steered == 0, "the busy worker was given %lu connections",
                  (unsigned long)steer(server, 0).steered);
    ck_assert_uint_eq(worker_stats(server, 1).accepts, HELD);
    for (int i = 0; i < HELD; i++)
        close(fds[i]);
    stall_end(&stall);
    test_stop_server(server);
}
END_TEST

/* Polls until worker `w`'s published load is `want` (2 s at most). */
static void wait_load(corral_server *server, unsigned w, uint64_t want)
{
    uint64_t load = 0;
    for (int i = 0; i < 200; i++) {
        load = steer(server, w).load;
        if (load == want)
            return;
        test_sleep_ms(10);
    }
    ck_abort_msg("worker %u: load %lu, want %lu", w, (unsigned long)load, (unsigned long)want);
}

START_TEST(balanced_takes_what_waits_on_a_busy_worker)
{
    if (!ebpf_available())
        return;
    corral_listener *listener;
    int port;
    corral_server *server = start(CORRAL_WAKEUP_BALANCED, 2, 0, &listener, &port);
    /* Both workers busy: worker 1 since earlier, for 300 ms; worker 0
     * since later, for 3 s.  The program picks the one busy for less long,
     * worker 0, and the connection queues behind its long callback.  When
     * worker 1 is done it is about to wait with a connection waiting on
     * another's socket: it takes it, and the client is answered at once
     * rather than after worker 0's 3 s. */
    struct stall long_stall = {.ms = 3000}, short_stall = {.ms = 300};
    stall_start(server, 1, &short_stall);
    test_sleep_ms(100); /* worker 1 busy for longer than worker 0 will be */
    stall_start(server, 0, &long_stall);
    test_sleep_ms(20); /* both busy for a while: there is no event for that */
    uint64_t started = test_now_ms();
    int fd = test_connect(port);
    exchange(fd);
    uint64_t took = test_now_ms() - started;
    ck_assert_uint_eq(steer(server, 0).steered, 1);
    ck_assert_msg(took < 1500, "answered after %lu ms, behind the busy worker",
                  (unsigned long)took);
    ck_assert_uint_eq(steer(server, 1).taken, 1);
    ck_assert_uint_eq(worker_stats(server, 1).accepts, 1);
    ck_assert_uint_eq(worker_stats(server, 0).accepts, 0);
    /* The owner's count of accepted connections has the taken one: once
     * it is closed, neither worker shows any load. */
    close(fd);
    wait_load(server, 1, 0);
    wait_load(server, 0, 0);
    stall_end(&short_stall);
    stall_end(&long_stall);
    test_stop_server(server);
}
END_TEST

/* Keeps a worker busy for `ms`, then, in the same loop iteration, connects
 * to `port` from the worker's own thread. */
struct busy_connect {
    unsigned ms;
    int port;
    int fd;
    uint64_t connected_ms; /* test_now_ms() when connect() returned */
    atomic_bool done;
};

static void busy_then_connect(void *arg)
{
    struct busy_connect *b = arg;
    test_sleep_ms((int)b->ms); /* busy, as a long callback */
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)b->port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        close(fd);
        fd = -1;
    }
    b->connected_ms = test_now_ms();
    b->fd = fd;
    atomic_store(&b->done, true);
}

START_TEST(balanced_wakes_up_to_take_what_waits_on_a_busy_worker)
{
    if (!ebpf_available())
        return;
    /* Worker 1 is busy for 300 ms and then connects; worker 0 has been
     * busy for 200 ms of a 3 s callback by then, the shorter time, so the
     * connection is steered to it.  Worker 1 goes back to wait at once,
     * when the connection is too young to take (taking is put off for
     * 300 ms here, so that it surely is), and nothing else will wake it:
     * it must end its wait when the connection is old enough, and take
     * it, rather than leave it behind the 3 s. */
    corral_listener *listener;
    int port;
    corral_server *server = create_on(NULL, CORRAL_WAKEUP_BALANCED, 2, 0, &listener, &port);
    corral__steer_set_take_ns(server, 300 * 1000 * 1000);
    start_steered(server, CORRAL_WAKEUP_BALANCED);
    struct busy_connect b = {.ms = 300, .port = port, .fd = -1};
    ck_assert_int_eq(corral_worker_post(corral_server_worker(server, 1), busy_then_connect, &b), 0);
    test_sleep_ms(100); /* worker 1 busy for longer than worker 0 will be */
    struct stall long_stall = {.ms = 3000};
    stall_start(server, 0, &long_stall);
    test_wait_for(atomic_load(&b.done), TEST_WAIT_MS, "worker 1 did not connect");
    ck_assert_int_ge(b.fd, 0);
    exchange(b.fd);
    uint64_t took = test_now_ms() - b.connected_ms;
    ck_assert_uint_eq(steer(server, 0).steered, 1);
    ck_assert_msg(took < 1500, "answered after %lu ms, behind the busy worker",
                  (unsigned long)took);
    ck_assert_msg(took >= 200, "answered after %lu ms: taken too young", (unsigned long)took);
    ck_assert_uint_eq(steer(server, 1).taken, 1);
    close(b.fd);
    stall_end(&long_stall);
    test_stop_server(server);
}
END_TEST

START_TEST(the_load_map_follows_connections)
{
    enum { HELD = 6 };
    if (!ebpf_available())
        return;
    corral_listener *listener;
    int port;
    corral_server *server = start(CORRAL_WAKEUP_ROUNDROBIN, 2, 0, &listener, &port);
    int fds[HELD];
    for (int i = 0; i < HELD; i++) {
        fds[i] = test_connect(port);
        exchange(fds[i]);
    }
    wait_load(server, 0, HELD / 2);
    wait_load(server, 1, HELD / 2);
    ck_assert(steer(server, 0).accepting && steer(server, 1).accepting);
    for (int i = 0; i < HELD; i++)
        close(fds[i]);
    wait_load(server, 0, 0);
    wait_load(server, 1, 0);
    test_stop_server(server);
}
END_TEST

/* Opens `count` connections from a thread pinned to `cpu` and keeps them. */
static void connect_from_cpu(int port, int cpu, int *fds, int count)
{
    cpu_set_t set, saved;
    pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved);
    CPU_ZERO(&set);
    CPU_SET((size_t)cpu, &set);
    ck_assert_int_eq(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
    for (int i = 0; i < count; i++) {
        fds[i] = test_connect(port);
        exchange(fds[i]);
    }
    pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
}

/* eBPF steering and two CPUs at least, for affinity to spill from one to
 * another; says so loudly if not. */
static bool ebpf_on_two_cpus(struct corral_kernel_caps *caps)
{
    if (!ebpf_available())
        return false;
    corral_probe(caps);
    if (caps->cpu_count < 2) {
        fprintf(stderr, "SKIPPED: one CPU only, nowhere to spill to\n");
        return false;
    }
    return true;
}

START_TEST(affinity_spills_over_when_its_cpu_is_overloaded)
{
    enum { HELD = 30 };
    struct corral_kernel_caps caps;
    if (!ebpf_on_two_cpus(&caps))
        return;
    /* One worker per CPU; every client on the first CPU. */
    for (int run = 0; run < 2; run++) {
        double spill = run == 0 ? 1.5 : 100;
        corral_listener *listener;
        int port;
        corral_server *server = start(CORRAL_WAKEUP_AFFINITY, 2, spill, &listener, &port);
        int fds[HELD];
        connect_from_cpu(port, caps.cpus[0], fds, HELD);
        uint64_t other = worker_stats(server, 1).accepts;
        struct corral_steer_stats local = steer(server, 0);
        if (spill < 2) {
            /* Spilling keeps the first worker at 1.5x the mean: about 3:1. */
            ck_assert_msg(other >= 4 && local.spills >= 4, "spill %.1f: %lu moved, %lu spills",
                          spill, (unsigned long)other, (unsigned long)local.spills);
        } else {
            ck_assert_msg(other == 0 && local.spills == 0, "spill %.0f: %lu moved", spill,
                          (unsigned long)other);
        }
        ck_assert_uint_eq(local.local + local.spills, HELD);
        for (int i = 0; i < HELD; i++)
            close(fds[i]);
        test_stop_server(server);
    }
}
END_TEST

START_TEST(affinity_weighs_the_arrival_cpu_as_a_whole)
{
    enum { WORKERS = 8, HELD = 16 };
    struct corral_kernel_caps caps;
    if (!ebpf_on_two_cpus(&caps))
        return;
    /* Several workers on each CPU, every client on the first.  The first
     * CPU's workers together keep at most their share of the load (half)
     * plus one connection, and what they spill goes to the other CPU: 9 of
     * 16 at most stay.  A margin of one for each worker would have let
     * them keep about 12. */
    /* Two CPUs, four workers on each, whatever this machine has.  The
     * bound is exact: each connection is answered before the next, so the
     * published loads are too. */
    caps.cpu_count = 2;
    corral_listener *listener;
    int port;
    corral_server *server = start_on(&caps, CORRAL_WAKEUP_AFFINITY, WORKERS, 1.1, &listener, &port);
    int fds[HELD];
    connect_from_cpu(port, caps.cpus[0], fds, HELD);
    uint64_t here = 0, elsewhere = 0;
    for (unsigned w = 0; w < WORKERS; w++) {
        struct corral_worker_stats stats = worker_stats(server, w);
        if (stats.cpu == caps.cpus[0])
            here += stats.accepts;
        else
            elsewhere += stats.accepts;
    }
    ck_assert_uint_eq(here + elsewhere, HELD);
    ck_assert_msg(here <= HELD / 2 + 1, "%lu of %d stayed on the arrival CPU", (unsigned long)here,
                  HELD);
    for (int i = 0; i < HELD; i++)
        close(fds[i]);
    test_stop_server(server);
}
END_TEST

START_TEST(a_closing_socket_hands_its_queue_to_a_live_one)
{
    enum { CONNECTIONS = 10 };
    if (!ebpf_available())
        return;
    corral_listener *listener;
    int port;
    corral_server *server = start(CORRAL_WAKEUP_ROUNDROBIN, 2, 0, &listener, &port);
    const int *sockets;
    ck_assert_uint_eq(corral_listener_fds(listener, &sockets), 2);
    /* Worker 0 stops taking connections for a while; the rotation still
     * queues connections on its socket. */
    struct stall stall = {.ms = 1500};
    stall_start(server, 0, &stall);
    int fds[CONNECTIONS];
    for (int i = 0; i < CONNECTIONS; i++) {
        fds[i] = test_connect(port);
        test_send_all(fds[i], "ping", 4);
    }
    /* Every other one, until the stall is 2 ms old and its turns pass on. */
    uint64_t queued = steer(server, 0).steered;
    ck_assert_uint_ge(queued, 1);
    /* Its socket leaves the group with those connections queued. */
    ck_assert_int_eq(shutdown(sockets[0], SHUT_RDWR), 0);
    uint64_t start = test_now_ms();
    for (int i = 0; i < CONNECTIONS; i++) {
        char reply[2];
        ck_assert_uint_eq(test_recv_all(fds[i], reply, 2), 2); /* a reset fails here */
        ck_assert(memcmp(reply, "ok", 2) == 0);
        close(fds[i]);
    }
    /* Served by worker 1 while worker 0 still sleeps. */
    ck_assert_uint_lt(test_now_ms() - start, 1000);
    ck_assert_uint_eq(worker_stats(server, 1).accepts, CONNECTIONS);
    ck_assert_uint_eq(worker_stats(server, 0).accepts, 0);
    stall_end(&stall);
    test_stop_server(server);
}
END_TEST

/* How often the workers blocked and were woken again (voluntary context
 * switches), including the wakeups the kernel hides from user space. */
struct sleeps {
    atomic_uint pending;
    atomic_ulong total;
};

static void add_sleeps(void *arg)
{
    struct sleeps *sleeps = arg;
    struct rusage usage;
    getrusage(RUSAGE_THREAD, &usage);
    atomic_fetch_add(&sleeps->total, (unsigned long)usage.ru_nvcsw);
    atomic_fetch_sub(&sleeps->pending, 1);
}

static unsigned long worker_sleeps(corral_server *server)
{
    struct sleeps sleeps = {0};
    unsigned workers = corral_server_worker_count(server);
    atomic_store(&sleeps.pending, workers);
    for (unsigned w = 0; w < workers; w++)
        ck_assert_int_eq(corral_worker_post(corral_server_worker(server, w), add_sleeps, &sleeps),
                         0);
    test_wait_for(atomic_load(&sleeps.pending) == 0, TEST_WAIT_MS, "workers did not answer");
    return atomic_load(&sleeps.total);
}

/* A unix socket has no group to steer: it is shared as under `rotate`, so
 * a connection wakes one worker, not all of them. */
START_TEST(a_shared_socket_wakes_one_worker)
{
    enum { WORKERS = 4, CONNECTIONS = 200 };
    if (!ebpf_available())
        return;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/corral-test-ebpf-%d.sock", (int)getpid());
    char address[80];
    snprintf(address, sizeof(address), "unix:%s", path);
    unlink(path);
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = WORKERS;
    config.wakeup = CORRAL_WAKEUP_BALANCED;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    ck_assert_int_eq(corral_server_listen(server, address, NULL, &test_ok_handler, NULL, NULL), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    unsigned long before = worker_sleeps(server);
    for (int i = 0; i < CONNECTIONS; i++) {
        int fd = test_connect_address(address);
        exchange(fd);
        close(fd);
    }
    unsigned long sleeps = worker_sleeps(server) - before;
    uint64_t accepts = 0;
    for (unsigned w = 0; w < WORKERS; w++)
        accepts += worker_stats(server, w).accepts;
    ck_assert_uint_eq(accepts, CONNECTIONS);
    /* About 2.6 per connection (its accept, its close) when one worker is
     * woken; 6 when all four are. */
    ck_assert_msg(sleeps <= 4 * CONNECTIONS, "%lu worker wakeups for %d connections", sleeps,
                  CONNECTIONS);
    unlink(path);
    test_stop_server(server);
}
END_TEST

START_TEST(without_ebpf_every_mode_falls_back_and_serves)
{
    static const enum corral_wakeup_mode modes[] = {CORRAL_WAKEUP_ROUNDROBIN,
                                                    CORRAL_WAKEUP_BALANCED, CORRAL_WAKEUP_AFFINITY};
    static const char *const impls[] = {"rotate", "rotate", "cbpf-cpu"};
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        struct corral_kernel_caps caps;
        corral_probe(&caps);
        ck_assert_int_eq(corral_caps_disable(&caps, "ebpf"), 0);
        struct corral_server_config config;
        corral_server_config_init(&config);
        config.workers = 2;
        config.wakeup = modes[m];
        config.caps = &caps;
        corral_server *server;
        ck_assert_int_eq(corral_server_new(&config, &server), 0);
        int port = test_start_server(server, &test_ok_handler, NULL);
        struct corral_wakeup_info info;
        corral_server_wakeup(server, &info);
        ck_assert_str_eq(info.impl, impls[m]);
        ck_assert_int_eq(info.mode,
                         modes[m] == CORRAL_WAKEUP_BALANCED ? CORRAL_WAKEUP_ROUNDROBIN : modes[m]);
        struct corral_steer_stats stats;
        ck_assert_int_eq(corral_server_steer_stats(server, 0, &stats), -ENOTSUP);
        for (int i = 0; i < 10; i++) {
            int fd = test_connect(port);
            exchange(fd);
            close(fd);
        }
        test_stop_server(server);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/wakeup_ebpf");
    TCase *tc = tcase_create("steering");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, roundrobin_is_an_exact_rotation);
    tcase_add_test(tc, balanced_keeps_clear_of_a_stalled_worker);
    tcase_add_test(tc, balanced_passes_over_a_busy_worker);
    tcase_add_test(tc, balanced_takes_what_waits_on_a_busy_worker);
    tcase_add_test(tc, balanced_wakes_up_to_take_what_waits_on_a_busy_worker);
    tcase_add_test(tc, the_load_map_follows_connections);
    tcase_add_test(tc, affinity_spills_over_when_its_cpu_is_overloaded);
    tcase_add_test(tc, affinity_weighs_the_arrival_cpu_as_a_whole);
    tcase_add_test(tc, a_closing_socket_hands_its_queue_to_a_live_one);
    tcase_add_test(tc, a_shared_socket_wakes_one_worker);
    tcase_add_test(tc, without_ebpf_every_mode_falls_back_and_serves);
    suite_add_tcase(suite, tc);
    return suite;
}
