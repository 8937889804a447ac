/*
 * test_upstream.c: upstream groups.  Unit cases pick servers from an
 * upstream built in memory (each algorithm's distribution, the consistent
 * ring, slow_start, backups, max_conns); daemon cases run build/corral in
 * front of small threaded backends written here (active health checks,
 * backup servers, max_conns over 2 workers, the retry policy).
 */
#include "../daemon.h"
#include "tests/dns.h"
#include "../helpers.h"
#include "proto/upstream/balance.h"
#include "proto/upstream/health.h"
#include "proto/upstream/resolve.h"
#include "proto/upstream/upstream.h"

#include <errno.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* ------------------------------------------------------------ in memory */

static char addresses[UPSTREAM_MAX_SERVERS][32];

/* An upstream of `count` servers 127.0.0.1:9001... with the given
 * settings (NULL: defaults), for one worker. */
static struct proxy_upstream *upstream_of(size_t count, const struct proxy_server_conf *servers,
                                          enum proxy_balance balance, bool consistent)
{
    struct proxy_server_conf conf[UPSTREAM_MAX_SERVERS];
    for (size_t i = 0; i < count; i++) {
        conf[i] = servers != NULL ? servers[i] : PROXY_SERVER_CONF_DEFAULT;
        snprintf(addresses[i], sizeof(addresses[i]), "127.0.0.1:%zu", 9001 + i);
        conf[i].address = addresses[i];
    }
    struct proxy_upstream_conf up = PROXY_UPSTREAM_CONF_DEFAULT;
    up.name = "u";
    up.servers = conf;
    up.server_count = count;
    up.balance = balance;
    up.hash_consistent = consistent;
    struct proxy_upstream *out;
    ck_assert_int_eq(upstream_new(&up, 1, &out), 0);
    return out;
}

static int pick(struct proxy_upstream *up, uint32_t hash)
{
    static const struct upstream_tried none;
    return balance_pick_server(up, upstream_worker_of(up, NULL), &none, hash, 1000000);
}

static uint32_t key_hash(unsigned n)
{
    char key[32];
    snprintf(key, sizeof(key), "/item/%u", n);
    struct http_request req = {.target = {key, strlen(key)}};
    struct balance_key *k;
    ck_assert_int_eq(balance_key_new("$request_uri", &k), 0);
    uint32_t h = balance_key_hash(k, &req, "");
    balance_key_free(k);
    return h;
}

#define KEYS 20000

START_TEST(consistent_hash_moves_about_one_nth_of_the_keys)
{
    for (size_t n = 3; n <= 8; n++) {
        struct proxy_upstream *before = upstream_of(n, NULL, PROXY_BALANCE_HASH, true);
        struct proxy_upstream *after = upstream_of(n + 1, NULL, PROXY_BALANCE_HASH, true);
        unsigned moved = 0, share[UPSTREAM_MAX_SERVERS] = {0};
        for (unsigned k = 0; k < KEYS; k++) {
            uint32_t h = key_hash(k);
            int a = pick(before, h), b = pick(after, h);
            ck_assert_int_ge(a, 0);
            share[b]++;
            if (a != b) {
                moved++;
                ck_assert_int_eq(b, (int)n); /* only to the new server */
            }
        }
        /* Ideally KEYS/(n+1); a ring of 160 points a server stays near it. */
        double ideal = (double)KEYS / (double)(n + 1);
        ck_assert_msg(moved <= ideal * 1.3 && moved >= ideal * 0.7, "%zu -> %zu servers: %u moved",
                      n, n + 1, moved);
        for (size_t i = 0; i <= n; i++)
            ck_assert_msg(share[i] >= ideal * 0.7 && share[i] <= ideal * 1.3,
                          "server %zu has %u keys", i, share[i]);
        upstream_free(before);
        upstream_free(after);
    }
}
END_TEST

/* A request's tried servers are bits past the first 64 too: with every
 * method, the only server not tried yet is the one picked, and none once
 * all are tried. */
START_TEST(tried_servers_past_the_64th)
{
    static const struct {
        enum proxy_balance balance;
        bool consistent;
    } methods[] = {{PROXY_BALANCE_ROUND_ROBIN, false},
                   {PROXY_BALANCE_LEAST_CONN, false},
                   {PROXY_BALANCE_RANDOM, false},
                   {PROXY_BALANCE_HASH, false},
                   {PROXY_BALANCE_HASH, true}};
    enum { SERVERS = 200 };
    for (int m = 0; m < COUNT(methods); m++) {
        struct proxy_upstream *up =
            upstream_of(SERVERS, NULL, methods[m].balance, methods[m].consistent);
        struct upstream_worker *worker = upstream_worker_of(up, NULL);
        for (size_t last = 0; last < SERVERS; last += 63) {
            struct upstream_tried tried = {{0}};
            for (size_t i = 0; i < SERVERS; i++)
                if (i != last)
                    upstream_tried_add(&tried, i);
            for (uint32_t hash = 0; hash < 20; hash++)
                ck_assert_int_eq(
                    balance_pick_server(up, worker, &tried, hash * 2654435761u, 1000000),
                    (int)last);
            ck_assert(balance_any_usable(up, worker, &tried, 1000000));
            upstream_tried_add(&tried, last);
            ck_assert_int_eq(balance_pick_server(up, worker, &tried, 7, 1000000), -1);
            ck_assert(!balance_any_usable(up, worker, &tried, 1000000));
            upstream_tried_remove(&tried, last);
            ck_assert(upstream_tried_has(&tried, last == 0 ? 1 : 0) &&
                      !upstream_tried_has(&tried, last));
        }
        upstream_free(up);
    }
}
END_TEST

START_TEST(plain_hash_spreads_and_sticks)
{
    struct proxy_upstream *up = upstream_of(4, NULL, PROXY_BALANCE_HASH, false);
    unsigned share[4] = {0};
    for (unsigned k = 0; k < KEYS; k++) {
        int s = pick(up, key_hash(k));
        ck_assert_int_eq(s, pick(up, key_hash(k)));
        share[s]++;
    }
    for (int i = 0; i < 4; i++)
        ck_assert_msg(share[i] >= KEYS / 4 * 0.8 && share[i] <= KEYS / 4 * 1.2, "server %d: %u", i,
                      share[i]);
    upstream_free(up);
}
END_TEST

START_TEST(ip_hash_follows_the_client_address)
{
    struct proxy_upstream *up = upstream_of(3, NULL, PROXY_BALANCE_IP_HASH, false);
    struct http_request req = {0};
    unsigned share[3] = {0};
    for (unsigned c = 0; c < 3000; c++) {
        char client[32];
        snprintf(client, sizeof(client), "10.0.%u.%u", c / 250, c % 250);
        uint32_t h = balance_key_hash(NULL, &req, client);
        int s = pick(up, h);
        ck_assert_int_eq(s, pick(up, balance_key_hash(NULL, &req, client)));
        share[s]++;
    }
    for (int i = 0; i < 3; i++)
        ck_assert_msg(share[i] >= 800 && share[i] <= 1200, "server %d: %u", i, share[i]);
    upstream_free(up);
}
END_TEST

START_TEST(header_key_reads_the_named_header)
{
    struct balance_key *k;
    ck_assert_int_eq(balance_key_new("$http_x_user", &k), 0);
    struct http_header h[] = {{{"Accept", 6}, {"*/*", 3}}, {{"X-User", 6}, {" alice ", 7}}};
    struct http_request a = {.headers = h, .header_count = 2};
    struct http_header h2[] = {{{"x-user", 6}, {"alice", 5}}};
    struct http_request b = {.headers = h2, .header_count = 1};
    ck_assert_uint_eq(balance_key_hash(k, &a, "1.1.1.1"), balance_key_hash(k, &b, "2.2.2.2"));
    balance_key_free(k);
    ck_assert_int_eq(balance_key_new("$cookie_x", &k), -EINVAL);
}
END_TEST

START_TEST(round_robin_follows_weights)
{
    struct proxy_server_conf s[2] = {PROXY_SERVER_CONF_DEFAULT, PROXY_SERVER_CONF_DEFAULT};
    s[0].weight = 3;
    struct proxy_upstream *up = upstream_of(2, s, PROXY_BALANCE_ROUND_ROBIN, false);
    unsigned share[2] = {0};
    for (int i = 0; i < 1000; i++)
        share[pick(up, 0)]++;
    ck_assert_uint_eq(share[0], 750);
    upstream_free(up);
}
END_TEST

START_TEST(random_follows_weights)
{
    struct proxy_server_conf s[3] = {PROXY_SERVER_CONF_DEFAULT, PROXY_SERVER_CONF_DEFAULT,
                                     PROXY_SERVER_CONF_DEFAULT};
    s[0].weight = 2;
    struct proxy_upstream *up = upstream_of(3, s, PROXY_BALANCE_RANDOM, false);
    unsigned share[3] = {0};
    for (int i = 0; i < 8000; i++)
        share[pick(up, 0)]++;
    ck_assert_msg(share[0] >= 3600 && share[0] <= 4400, "%u %u %u", share[0], share[1], share[2]);
    ck_assert_msg(share[1] >= 1600 && share[1] <= 2400, "%u %u %u", share[0], share[1], share[2]);
    upstream_free(up);
}
END_TEST

/* least_conn and random two steer away from a server with requests in
 * flight (counted over all workers). */
static const enum proxy_balance load_aware[] = {PROXY_BALANCE_LEAST_CONN, PROXY_BALANCE_RANDOM};

START_TEST(load_aware_methods_avoid_the_busy_server)
{
    struct proxy_upstream *up = upstream_of(3, NULL, load_aware[_i], false);
    up->random_two = true;
    struct upstream_worker *w = upstream_worker_of(up, NULL);
    for (int i = 0; i < 10; i++)
        ck_assert(upstream_server_acquire(up, w, 0));
    unsigned share[3] = {0};
    for (int i = 0; i < 3000; i++) {
        int s = pick(up, 0);
        share[s]++;
        ck_assert(upstream_server_acquire(up, w, (unsigned)s));
        upstream_server_release(up, w, (unsigned)s);
    }
    ck_assert_msg(share[0] < 3000 / 10, "%u %u %u", share[0], share[1], share[2]);
    for (int i = 0; i < 10; i++)
        upstream_server_release(up, w, 0);
    upstream_free(up);
}
END_TEST

START_TEST(backup_only_when_every_primary_is_down)
{
    struct proxy_server_conf s[4] = {PROXY_SERVER_CONF_DEFAULT, PROXY_SERVER_CONF_DEFAULT,
                                     PROXY_SERVER_CONF_DEFAULT, PROXY_SERVER_CONF_DEFAULT};
    s[1].backup = true;
    s[2].down = true;
    struct proxy_upstream *up = upstream_of(4, s, PROXY_BALANCE_ROUND_ROBIN, false);
    for (int i = 0; i < 20; i++) {
        int p = pick(up, 0);
        ck_assert_msg(p == 0 || p == 3, "picked %d", p);
    }
    atomic_store(&up->servers[0].checked_down, true);
    upstream_worker_of(up, NULL)->servers[3].down_until = 2000000; /* passively */
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(pick(up, 0), 1);
    ck_assert_int_eq(upstream_server_state(up, 0), PROXY_SERVER_DOWN);
    ck_assert_int_eq(upstream_server_state(up, 2), PROXY_SERVER_DISABLED);
    ck_assert(upstream_server_backup(up, 1));
    ck_assert_uint_eq(upstream_server_count(up), 4);
    ck_assert_str_eq(upstream_server_address(up, 3), "127.0.0.1:9004");
    ck_assert_uint_eq(upstream_server_slot(up, 3), 0);
    upstream_free(up);
}
END_TEST

START_TEST(max_conns_is_a_hard_limit)
{
    struct proxy_server_conf s[2] = {PROXY_SERVER_CONF_DEFAULT, PROXY_SERVER_CONF_DEFAULT};
    s[0].max_conns = 2;
    s[1].max_conns = 1;
    struct proxy_upstream *up = upstream_of(2, s, PROXY_BALANCE_ROUND_ROBIN, false);
    struct upstream_worker *w = upstream_worker_of(up, NULL);
    for (int i = 0; i < 3; i++) {
        int p = pick(up, 0);
        ck_assert_int_ge(p, 0);
        ck_assert(upstream_server_acquire(up, w, (unsigned)p));
    }
    ck_assert_int_eq(pick(up, 0), -1);
    ck_assert(!upstream_server_acquire(up, w, 0));
    ck_assert_uint_eq(upstream_server_conns(up, 0), 2);
    upstream_server_release(up, w, 0);
    ck_assert_int_eq(pick(up, 0), 0);
    upstream_server_release(up, w, 0);
    upstream_server_release(up, w, 1);
    upstream_free(up);
}
END_TEST

START_TEST(slow_start_ramps_the_weight)
{
    struct proxy_server_conf s[2] = {PROXY_SERVER_CONF_DEFAULT, PROXY_SERVER_CONF_DEFAULT};
    s[0].slow_start_ms = 10000;
    struct proxy_upstream *up = upstream_of(2, s, PROXY_BALANCE_ROUND_ROBIN, false);
    /* Back for a quarter of its slow start: a quarter of its weight. */
    atomic_store(&up->servers[0].recovered_ms, 1000000 - 2500);
    unsigned share[2] = {0};
    for (int i = 0; i < 1000; i++)
        share[pick(up, 0)]++;
    ck_assert_msg(share[0] >= 180 && share[0] <= 220, "%u %u", share[0], share[1]);
    upstream_free(up);
}
END_TEST

START_TEST(health_match_defaults_and_lists)
{
    struct proxy_health_conf c = PROXY_HEALTH_CONF_DEFAULT;
    ck_assert(health_match(&c, 200));
    ck_assert(health_match(&c, 302));
    ck_assert(!health_match(&c, 404));
    c.match[204 / 64] |= 1ull << (204 % 64);
    ck_assert(health_match(&c, 204));
    ck_assert(!health_match(&c, 200));
    ck_assert(!health_match(&c, 999));
}
END_TEST

/* ------------------------------------------------------------ backends */

/* A backend answering each request on its own thread, one request per
 * connection: `status` and its name as the body, after `delay_ms`;
 * /healthz gets `health_status` (0: the connection closes unanswered). */
struct backend {
    struct test_backend tcp;
    char name[16];
    atomic_int status, health_status, delay_ms;
    atomic_uint requests, health_requests, current, peak;
};

static void backend_serve(int fd, void *data)
{
    struct backend *b = data;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[8192];
    if (!test_recv_head(fd, buf, sizeof(buf)) || strstr(buf, "\r\n\r\n") == NULL)
        return;
    int status;
    if (strncmp(buf, "GET /healthz", 12) == 0) {
        atomic_fetch_add(&b->health_requests, 1);
        status = atomic_load(&b->health_status);
    } else {
        atomic_fetch_add(&b->requests, 1);
        unsigned now = atomic_fetch_add(&b->current, 1) + 1;
        unsigned peak = atomic_load(&b->peak);
        while (now > peak && !atomic_compare_exchange_weak(&b->peak, &peak, now))
            ;
        /* In steps: backend_free() need not wait out what is left of
         * a delay the daemon gave up on long ago. */
        int delay = atomic_load(&b->delay_ms);
        for (int waited = 0; waited < delay && !atomic_load(&b->tcp.stop); waited += 10)
            usleep(10 * 1000);
        atomic_fetch_sub(&b->current, 1);
        status = atomic_load(&b->status);
    }
    if (status != 0) {
        char out[256];
        int n = snprintf(out, sizeof(out),
                         "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         status, strlen(b->name), b->name);
        (void)!send(fd, out, (size_t)n, MSG_NOSIGNAL);
    }
}

/* A backend on `ip`:`port` (port 0: any); `ip` may be IPv6 ("::1"). */
static struct backend *backend_start_on(const char *name, const char *ip, int port)
{
    struct backend *b = calloc(1, sizeof(*b));
    ck_assert_ptr_nonnull(b);
    snprintf(b->name, sizeof(b->name), "%s", name);
    atomic_store(&b->status, 200);
    atomic_store(&b->health_status, 200);
    test_backend_start(&b->tcp, ip, port, backend_serve, b);
    return b;
}

static struct backend *backend_start(const char *name)
{
    return backend_start_on(name, "127.0.0.1", 0);
}

/* Whether TCP port `port` can be bound on every one of `count` IPv4
 * addresses; `port` 0: any port free on the first, which goes into it. */
static bool port_free_on_all(const char *const *ips, int count, int *port)
{
    int fds[16];
    ck_assert_int_le(count, 16);
    int bound = 0;
    for (; bound < count; bound++) {
        fds[bound] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fds[bound], 0);
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*port)};
        ck_assert_int_eq(inet_pton(AF_INET, ips[bound], &addr.sin_addr), 1);
        if (bind(fds[bound], (struct sockaddr *)&addr, sizeof(addr)) != 0) {
            ck_assert_msg(errno == EADDRINUSE, "bind %s: %s", ips[bound], strerror(errno));
            close(fds[bound]);
            break;
        }
        socklen_t len = sizeof(addr);
        ck_assert_int_eq(getsockname(fds[bound], (struct sockaddr *)&addr, &len), 0);
        *port = ntohs(addr.sin_port);
    }
    for (int i = 0; i < bound; i++)
        close(fds[i]);
    return bound == count;
}

/* Backends names[i] on ips[i], all on one port.  Each address has ports
 * of its own, and another program's socket (a daemon's admin listen on
 * 127.0.0.2:0, say) may hold on one of them the port the first got: such
 * a port is given up for another. */
static void backends_on_one_port(struct backend **bs, const char *const *names,
                                 const char *const *ips, int count)
{
    int port = 0;
    for (int i = 0; i < 20 && !port_free_on_all(ips, count, &port); i++)
        port = 0;
    ck_assert_msg(port > 0, "no port free on all %d addresses in 20 tries", count);
    for (int i = 0; i < count; i++)
        bs[i] = backend_start_on(names[i], ips[i], port);
}

static void backend_free(struct backend *b)
{
    ck_assert_msg(test_backend_stop(&b->tcp, 5000), "%u backend connections live",
                  (unsigned)atomic_load(&b->tcp.live));
    free(b);
}

/* ------------------------------------------------------------ daemon */

/* A daemon proxying / to upstream "app" holding `upstream`; `server` and
 * `location` go into those blocks. */
static void start_daemon_with(struct test_daemon *d, unsigned workers, const char *upstream,
                              const char *server, const char *location)
{
    test_daemon_init(d, "corral");
    char conf[4096];
    snprintf(conf, sizeof(conf),
             "workers %u;\ndrain_timeout 100ms;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream app {\n%s\n}\n"
             "server {\n    listen 127.0.0.1:0;\n%s\n"
             "    location / {\n        proxy_pass http://app;\n%s\n    }\n}\n",
             workers, upstream, server, location);
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

static void start_daemon(struct test_daemon *d, unsigned workers, const char *upstream,
                         const char *location)
{
    start_daemon_with(d, workers, upstream, "", location);
}

/* Waits up to `ms` for `text` in d's log; returns the milliseconds it
 * took, or -1. */
static long wait_log(const struct test_daemon *d, const char *text, unsigned ms)
{
    uint64_t start = test_now_ms();
    while (test_now_ms() - start < ms) {
        char *log = test_daemon_log(d);
        bool found = strstr(log, text) != NULL;
        free(log);
        if (found)
            return (long)(test_now_ms() - start);
        usleep(20 * 1000);
    }
    return -1;
}

static int get_body(int port, char *body, size_t size)
{
    return test_daemon_http_get("127.0.0.1", port, "/", body, size);
}

START_TEST(failing_backend_is_marked_down_then_up)
{
    struct backend *a = backend_start("a"), *b = backend_start("b");
    struct test_daemon d;
    char upstream[512];
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d max_fails=0;\nserver 127.0.0.1:%d max_fails=0;\n"
             "health_check interval=200ms timeout=150ms rise=2 fall=3 uri=/healthz;",
             a->tcp.port, b->tcp.port);
    start_daemon(&d, 2, upstream, "");
    /* Checked once, not once per worker: one probe a server per interval,
     * so 4 more come 800 ms or more after the next one seen (400 ms if
     * each of the 2 workers probed), watched every 5 ms. */
    unsigned base = atomic_load(&a->health_requests);
    uint64_t next = 0, fourth = 0;
    for (uint64_t until = test_now_ms() + 5000; fourth == 0 && test_now_ms() < until;
         test_sleep_ms(5)) {
        unsigned probes = atomic_load(&a->health_requests) - base;
        if (probes >= 1 && next == 0)
            next = test_now_ms();
        if (probes >= 5)
            fourth = test_now_ms();
    }
    ck_assert_msg(fourth != 0, "%u probes in 5 s", atomic_load(&a->health_requests) - base);
    ck_assert_msg(fourth - next >= 650, "4 probes in %llu ms", (unsigned long long)(fourth - next));

    atomic_store(&a->health_status, 500);
    char text[128];
    snprintf(text, sizeof(text), "upstream app: 127.0.0.1:%d is down: 3 failed checks (status 500)",
             a->tcp.port);
    long took = wait_log(&d, text, 3000);
    ck_assert_msg(took >= 0, "not marked down");
    /* interval x fall = 600 ms, plus the probe under way and a loaded box. */
    ck_assert_msg(took <= 600 + 200 + 1000, "marked down after %ld ms", took);
    unsigned before = atomic_load(&a->requests);
    char body[64];
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
        ck_assert_str_eq(body, "b");
    }
    ck_assert_uint_eq(atomic_load(&a->requests), before);

    atomic_store(&a->health_status, 200);
    snprintf(text, sizeof(text), "upstream app: 127.0.0.1:%d is up: 2 passed checks", a->tcp.port);
    took = wait_log(&d, text, 3000);
    ck_assert_msg(took >= 0 && took <= 400 + 200 + 1000, "marked up after %ld ms", took);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
    ck_assert_uint_gt(atomic_load(&a->requests), before);
    test_daemon_stop(&d);
    backend_free(a);
    backend_free(b);
}
END_TEST

START_TEST(reload_keeps_the_health_state)
{
    struct backend *a = backend_start("a"), *b = backend_start("b");
    struct test_daemon d;
    char upstream[512];
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d max_fails=0;\nserver 127.0.0.1:%d max_fails=0;\n"
             "health_check interval=300ms timeout=3s rise=10 fall=1 uri=/healthz;",
             a->tcp.port, b->tcp.port);
    /* b must not fail a probe: a timeout that no slow machine reaches (a
     * probe then skips turns, it does not pile up). */
    start_daemon(&d, 1, upstream, "");
    atomic_store(&a->health_status, 0);
    char text[128];
    snprintf(text, sizeof(text), "127.0.0.1:%d is down", a->tcp.port);
    ck_assert_int_ge(wait_log(&d, text, 3000), 0);
    atomic_store(&a->health_status, 200); /* up again only after 10 passes, 3 s */
    kill(d.pid, SIGHUP);
    ck_assert_int_ge(wait_log(&d, "generation 1 finished", 3000), 0);
    unsigned before = atomic_load(&a->requests);
    char body[64];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
    ck_assert_uint_eq(atomic_load(&a->requests), before);
    test_daemon_stop(&d);
    backend_free(a);
    backend_free(b);
}
END_TEST

START_TEST(backup_gets_requests_only_when_the_primaries_are_down)
{
    struct backend *a = backend_start("a"), *b = backend_start("b"), *c = backend_start("c");
    struct test_daemon d;
    char upstream[512];
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d;\nserver 127.0.0.1:%d backup;\nserver 127.0.0.1:%d down;",
             a->tcp.port, b->tcp.port, c->tcp.port);
    start_daemon(&d, 2, upstream, "");
    char body[64];
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
        ck_assert_str_eq(body, "a");
    }
    ck_assert_uint_eq(atomic_load(&b->requests), 0);
    backend_free(a); /* refused from now on: marked down, the backup answers */
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
        ck_assert_str_eq(body, "b");
    }
    ck_assert_uint_eq(atomic_load(&c->requests), 0);
    test_daemon_stop(&d);
    backend_free(b);
    backend_free(c);
}
END_TEST

struct client {
    pthread_t thread;
    int port, status;
};

/* One GET with plain socket calls (the daemon.h clients share a buffer):
 * the status, or 0. */
static void *client_main(void *arg)
{
    struct client *c = arg;
    c->status = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)c->port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static const char request[] = "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    char response[256] = "";
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
        send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(request) - 1 &&
        recv(fd, response, sizeof(response) - 1, 0) > 0)
        sscanf(response, "HTTP/1.1 %d", &c->status);
    if (fd >= 0)
        close(fd);
    return NULL;
}

START_TEST(max_conns_holds_across_two_workers)
{
    struct backend *a = backend_start("a");
    atomic_store(&a->delay_ms, 600);
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream), "server 127.0.0.1:%d max_conns=2;", a->tcp.port);
    start_daemon(&d, 2, upstream, "");
    struct client clients[8];
    for (int i = 0; i < COUNT(clients); i++) {
        clients[i] = (struct client){.port = d.port};
        ck_assert_int_eq(pthread_create(&clients[i].thread, NULL, client_main, &clients[i]), 0);
    }
    int ok = 0, refused = 0;
    for (int i = 0; i < COUNT(clients); i++) {
        pthread_join(clients[i].thread, NULL);
        ok += clients[i].status == 200;
        refused += clients[i].status == 502;
    }
    ck_assert_msg(atomic_load(&a->peak) <= 2, "%u in flight", atomic_load(&a->peak));
    ck_assert_int_ge(ok, 2);
    ck_assert_int_eq(ok + refused, COUNT(clients));
    test_daemon_stop(&d);
    backend_free(a);
}
END_TEST

/* Three backends slower than proxy_read_timeout 1s: `location` bounds the
 * retries; returns the status and sets the time taken and the backends
 * asked. */
static int slow_get(const char *location, const char *method, long *took_ms, unsigned *asked)
{
    struct backend *b[3];
    char upstream[512];
    for (int i = 0; i < 3; i++) {
        b[i] = backend_start("slow");
        atomic_store(&b[i]->delay_ms, 2500);
    }
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d max_fails=0;\nserver 127.0.0.1:%d max_fails=0;\n"
             "server 127.0.0.1:%d max_fails=0;",
             b[0]->tcp.port, b[1]->tcp.port, b[2]->tcp.port);
    struct test_daemon d;
    start_daemon_with(&d, 1, upstream, "proxy_read_timeout 1s;", location);
    int fd = test_connect(d.port);
    char request[256];
    snprintf(request, sizeof(request),
             "%s /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
             method);
    uint64_t start = test_now_ms();
    test_send_all(fd, request, strlen(request));
    char response[1024] = "";
    test_recv_all(fd, response, sizeof(response) - 1);
    *took_ms = (long)(test_now_ms() - start);
    close(fd);
    int status = 0;
    sscanf(response, "HTTP/1.1 %d", &status);
    *asked = 0;
    for (int i = 0; i < 3; i++)
        *asked += atomic_load(&b[i]->requests);
    test_daemon_stop(&d);
    for (int i = 0; i < 3; i++)
        backend_free(b[i]);
    return status;
}

START_TEST(slow_get_goes_to_every_server_by_default)
{
    long took;
    unsigned asked;
    ck_assert_int_eq(slow_get("", "GET", &took, &asked), 504);
    ck_assert_uint_eq(asked, 3);
    ck_assert_msg(took >= 2900, "took %ld ms", took);
}
END_TEST

START_TEST(retries_stop_at_the_configured_tries)
{
    long took;
    unsigned asked;
    ck_assert_int_eq(slow_get("proxy_next_upstream_tries 1;", "GET", &took, &asked), 504);
    ck_assert_uint_eq(asked, 1);
    /* asked says one server was tried; the time, that its 1 s read timeout
     * ended the request, and well before the default's three tries would
     * (2900 ms and more).  A tighter bound fails on a loaded machine. */
    ck_assert_msg(took >= 950 && took < 2900, "took %ld ms", took);
}
END_TEST

START_TEST(retries_stop_at_the_configured_timeout)
{
    long took;
    unsigned asked;
    ck_assert_int_eq(slow_get("proxy_next_upstream_timeout 1500ms;", "GET", &took, &asked), 504);
    ck_assert_uint_eq(asked, 2);
    ck_assert_msg(took >= 1950 && took < 2900, "took %ld ms", took);
}
END_TEST

START_TEST(timeouts_are_not_retried_when_not_listed)
{
    long took;
    unsigned asked;
    ck_assert_int_eq(slow_get("proxy_next_upstream error;", "GET", &took, &asked), 504);
    ck_assert_uint_eq(asked, 1);
}
END_TEST

START_TEST(post_is_not_retried_once_sent_unless_non_idempotent)
{
    long took;
    unsigned asked;
    ck_assert_int_eq(slow_get("", "POST", &took, &asked), 504);
    ck_assert_uint_eq(asked, 1);
    ck_assert_int_eq(
        slow_get("proxy_next_upstream error timeout non_idempotent;", "POST", &took, &asked), 504);
    ck_assert_uint_eq(asked, 3);
}
END_TEST

START_TEST(listed_status_goes_to_the_next_server)
{
    struct backend *a = backend_start("a"), *b = backend_start("b");
    atomic_store(&a->status, 503);
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d max_fails=0;\nserver 127.0.0.1:%d max_fails=0;", a->tcp.port,
             b->tcp.port);
    start_daemon(&d, 1, upstream, "proxy_next_upstream error timeout http_503;");
    char body[64];
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
        ck_assert_str_eq(body, "b");
    }
    ck_assert_uint_ge(atomic_load(&a->requests), 2);
    /* The last server left answers as it does. */
    atomic_store(&b->status, 503);
    ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 503);
    test_daemon_stop(&d);
    backend_free(a);
    backend_free(b);
}
END_TEST

/* corral_upstream_server_up's value for 127.0.0.1:port on d's /metrics:
 * 1, 0, or -1 when the page has no such line. */
static int server_up(const struct test_daemon *d, int port)
{
    size_t size = 1 << 18;
    char *page = malloc(size);
    ck_assert_ptr_nonnull(page);
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", page, size), 200);
    char want[128];
    snprintf(want, sizeof(want),
             "\ncorral_upstream_server_up{upstream=\"app\",server=\"127.0.0.1:%d\"} ", port);
    const char *at = strstr(page, want);
    int value = at != NULL ? atoi(at + strlen(want)) : -1;
    free(page);
    return value;
}

/* The gauge follows the shared health state: the active checks, for a
 * backup too, and `down` in the config. */
START_TEST(server_up_metric_follows_the_health_checks)
{
    struct backend *a = backend_start("a"), *b = backend_start("b"), *c = backend_start("c");
    struct test_daemon d;
    char upstream[512];
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d max_fails=0;\nserver 127.0.0.1:%d backup;\n"
             "server 127.0.0.1:%d down;\n"
             "health_check interval=200ms timeout=150ms rise=1 fall=1 uri=/healthz;",
             a->tcp.port, b->tcp.port, c->tcp.port);
    start_daemon(&d, 2, upstream, "");
    ck_assert_int_eq(server_up(&d, a->tcp.port), 1);
    ck_assert_int_eq(server_up(&d, b->tcp.port), 1);
    ck_assert_int_eq(server_up(&d, c->tcp.port), 0);
    atomic_store(&b->health_status, 500);
    char text[128];
    snprintf(text, sizeof(text), "127.0.0.1:%d is down", b->tcp.port);
    ck_assert_int_ge(wait_log(&d, text, 3000), 0);
    ck_assert_int_eq(server_up(&d, b->tcp.port), 0);
    ck_assert_int_eq(server_up(&d, a->tcp.port), 1);
    atomic_store(&b->health_status, 200);
    snprintf(text, sizeof(text), "127.0.0.1:%d is up", b->tcp.port);
    ck_assert_int_ge(wait_log(&d, text, 3000), 0);
    ck_assert_int_eq(server_up(&d, b->tcp.port), 1);
    test_daemon_stop(&d);
    backend_free(a);
    backend_free(b);
    backend_free(c);
}
END_TEST

/* And the passive failures: max_fails within fail_timeout on a worker. */
START_TEST(server_up_metric_follows_passive_failures)
{
    int port;
    close(test_reserve_port(&port)); /* nothing listens there */
    struct backend *b = backend_start("b");
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d max_fails=1 fail_timeout=30s;\nserver 127.0.0.1:%d;", port,
             b->tcp.port);
    start_daemon(&d, 1, upstream, "");
    ck_assert_int_eq(server_up(&d, port), 1);
    char body[64];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
    ck_assert_int_eq(server_up(&d, port), 0);
    ck_assert_int_eq(server_up(&d, b->tcp.port), 1);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

START_TEST(upstream_failures_are_logged_with_the_request)
{
    int port;
    close(test_reserve_port(&port)); /* nothing listens there */
    struct backend *b = backend_start("b");
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "server 127.0.0.1:%d max_fails=0;\nserver 127.0.0.1:%d max_fails=0;", port,
             b->tcp.port);
    start_daemon(&d, 1, upstream, "");
    char body[64];
    for (int i = 0; i < 10; i++)
        test_daemon_http_get("127.0.0.1", d.port, "/first?x=1", body, sizeof(body));
    char text[256];
    snprintf(text, sizeof(text),
             "[error] upstream app: 127.0.0.1:%d: could not connect (Connection refused), "
             "client: 127.0.0.1, request: \"GET /first?x=1\"",
             port);
    ck_assert_int_ge(wait_log(&d, text, 2000), 0);
    /* One line a second for the server; the next counts those left out. */
    usleep(1100 * 1000);
    test_daemon_http_get("127.0.0.1", d.port, "/second", body, sizeof(body));
    test_daemon_http_get("127.0.0.1", d.port, "/second", body, sizeof(body));
    ck_assert_int_ge(wait_log(&d, "request: \"GET /second\" (4 more)", 2000), 0);
    char *log = test_daemon_log(&d);
    unsigned lines = 0;
    for (const char *p = log; (p = strstr(p, "could not connect")) != NULL; p++)
        lines++;
    free(log);
    ck_assert_uint_eq(lines, 2);
    test_daemon_stop(&d);
    backend_free(b);
}
END_TEST

/* ------------------------------------------------------------ DNS */

/* GETs until one is answered by `name`, for up to `ms`: true if one was. */
static bool answered_by(int port, const char *name, unsigned ms)
{
    uint64_t start = test_now_ms();
    char body[64];
    while (test_now_ms() - start < ms) {
        if (test_daemon_http_try_get("127.0.0.1", port, "/", body, sizeof(body)) == 200 &&
            strcmp(body, name) == 0)
            return true;
        usleep(20 * 1000);
    }
    return false;
}

START_TEST(changed_dns_answer_moves_traffic_without_a_reload)
{
    struct backend *ab[2];
    backends_on_one_port(ab, (const char *const[]){"a", "b"},
                         (const char *const[]){"127.0.0.1", "127.0.0.3"}, 2);
    struct backend *a = ab[0], *b = ab[1];
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.1");
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "resolver 127.0.0.1:%d valid=200ms;\nserver app.test:%d resolve max_fails=0;",
             dns->port, a->tcp.port);
    start_daemon(&d, 2, upstream, "");
    ck_assert(answered_by(d.port, "a", 3000));
    char body[64];
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 200);
        ck_assert_str_eq(body, "a");
    }
    ck_assert_uint_eq(atomic_load(&b->requests), 0);

    dns_answer(dns, "127.0.0.3");
    ck_assert(answered_by(d.port, "b", 3000));
    unsigned before = atomic_load(&a->requests);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 200);
        ck_assert_str_eq(body, "b");
    }
    ck_assert_uint_eq(atomic_load(&a->requests), before);
    ck_assert_int_ge(wait_log(&d, "upstream app: app.test:", 100), 0);
    ck_assert_int_ge(wait_log(&d, "127.0.0.3 joins", 100), 0);
    ck_assert_int_ge(wait_log(&d, "127.0.0.1 is no longer in the answer: draining", 100), 0);
    ck_assert_uint_ge(atomic_load(&dns->queries), 2);
    test_daemon_stop(&d);
    dns_free(dns);
    backend_free(a);
    backend_free(b);
}
END_TEST

/* Without valid=, the answers' TTL (1 s here) says when the name is
 * asked again: a change is followed within seconds, not the 30 s a fixed
 * default would take. */
START_TEST(dns_ttl_sets_when_a_name_is_asked_again)
{
    struct backend *ab[2];
    backends_on_one_port(ab, (const char *const[]){"a", "b"},
                         (const char *const[]){"127.0.0.1", "127.0.0.3"}, 2);
    struct backend *a = ab[0], *b = ab[1];
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.1");
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "resolver 127.0.0.1:%d ipv6=off;\nserver app.test:%d resolve max_fails=0;", dns->port,
             a->tcp.port);
    start_daemon(&d, 1, upstream, "");
    ck_assert(answered_by(d.port, "a", 3000));
    dns_answer(dns, "127.0.0.3");
    ck_assert(answered_by(d.port, "b", 5000));
    unsigned queries = atomic_load(&dns->queries);
    test_wait_for(atomic_load(&dns->queries) > queries, 3000, "no query after a 1 s TTL");
    test_daemon_stop(&d);
    dns_free(dns);
    backend_free(a);
    backend_free(b);
}
END_TEST

/* Every address of a name serves, beyond the four it used to be cut to;
 * max_addresses=N keeps N (and logs what it leaves out). */
START_TEST(every_address_of_a_name_serves)
{
    enum { COUNT = 8 };
    static const char *const names[COUNT] = {"b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"};
    static const char *const ips[COUNT] = {"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4",
                                           "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8"};
    struct backend *bs[COUNT];
    backends_on_one_port(bs, names, ips, COUNT);
    struct dns_server *dns = dns_start();
    dns_answer_many(dns, COUNT);
    unsigned kept = _i == 0 ? COUNT : 3;
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "resolver 127.0.0.1:%d valid=10s ipv6=off;\nserver app.test:%d resolve%s;\n"
             "balance round_robin;",
             dns->port, bs[0]->tcp.port, _i == 0 ? "" : " max_addresses=3");
    start_daemon(&d, 1, upstream, "");
    ck_assert(answered_by(d.port, "b1", 3000));
    for (unsigned i = 0; i < 4 * COUNT; i++)
        ck_assert_int_eq(test_daemon_http_try_get("127.0.0.1", d.port, "/", NULL, 0), 200);
    unsigned serving = 0;
    for (int i = 0; i < COUNT; i++)
        serving += atomic_load(&bs[i]->requests) > 0;
    ck_assert_uint_eq(serving, kept);
    if (_i == 1)
        ck_assert_int_ge(wait_log(&d, "left out: this name has at most 3 addresses", 100), 0);
    test_daemon_stop(&d);
    dns_free(dns);
    for (int i = 0; i < COUNT; i++)
        backend_free(bs[i]);
}
END_TEST

/* service=http: the name's SRV records (_http._tcp.NAME) give the
 * servers, with their ports and weights; a record of a worse priority
 * is a backup, unused while the others serve. */
START_TEST(srv_records_give_ports_weights_and_backups)
{
    struct backend *x = backend_start_on("x", "127.0.0.1", 0);
    struct backend *y = backend_start_on("y", "127.0.0.1", 0);
    struct backend *z = backend_start_on("z", "127.0.0.1", 0);
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.1"); /* every target's A record */
    dns->srv[0].priority = 10, dns->srv[0].weight = 1, dns->srv[0].port = (uint16_t)x->tcp.port;
    dns->srv[0].target = "x";
    dns->srv[1].priority = 10, dns->srv[1].weight = 3, dns->srv[1].port = (uint16_t)y->tcp.port;
    dns->srv[1].target = "y";
    dns->srv[2].priority = 20, dns->srv[2].weight = 1, dns->srv[2].port = (uint16_t)z->tcp.port;
    dns->srv[2].target = "z";
    atomic_store(&dns->srv_count, 3);
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "resolver 127.0.0.1:%d valid=10s ipv6=off;\nserver app.test service=http resolve;\n"
             "balance round_robin;",
             dns->port);
    start_daemon(&d, 1, upstream, "");
    ck_assert(answered_by(d.port, "y", 3000));
    ck_assert(answered_by(d.port, "x", 3000));
    unsigned x0 = atomic_load(&x->requests), y0 = atomic_load(&y->requests);
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(test_daemon_http_try_get("127.0.0.1", d.port, "/", NULL, 0), 200);
    ck_assert_uint_eq(atomic_load(&x->requests) - x0, 10);
    ck_assert_uint_eq(atomic_load(&y->requests) - y0, 30);
    ck_assert_uint_eq(atomic_load(&z->requests), 0);
    test_daemon_stop(&d);
    atomic_store(&dns->stop, true);
    pthread_join(dns->thread, NULL);
    ck_assert_str_eq(dns->srv_asked, "_http._tcp.app.test");
    dns_free(dns);
    backend_free(x);
    backend_free(y);
    backend_free(z);
}
END_TEST

/* A name with an A and an AAAA record: both addresses serve (nginx
 * resolves both), unless the resolver says ipv6=off. */
START_TEST(resolve_uses_ipv6_addresses_too)
{
    struct backend *a = backend_start_on("a", "127.0.0.1", 0);
    struct backend *b = backend_start_on("b", "::1", a->tcp.port);
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.1");
    dns_answer_v6(dns, "::1");
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "resolver 127.0.0.1:%d valid=200ms%s;\nserver app.test:%d resolve max_fails=0;",
             dns->port, _i == 0 ? "" : " ipv6=off", a->tcp.port);
    start_daemon(&d, 1, upstream, "");
    ck_assert(answered_by(d.port, "a", 3000));
    if (_i == 0) {
        ck_assert(answered_by(d.port, "b", 3000));
        ck_assert_int_ge(wait_log(&d, "::1 joins", 100), 0);
    } else {
        char body[64];
        for (int i = 0; i < 6; i++) {
            ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)),
                             200);
            ck_assert_str_eq(body, "a");
        }
        ck_assert_uint_eq(atomic_load(&dns->v6_queries), 0);
        ck_assert_uint_eq(atomic_load(&b->requests), 0);
    }
    test_daemon_stop(&d);
    dns_free(dns);
    backend_free(a);
    backend_free(b);
}
END_TEST

START_TEST(resolve_server_has_empty_slots_until_an_answer)
{
    struct proxy_server_conf s[2] = {PROXY_SERVER_CONF_DEFAULT, PROXY_SERVER_CONF_DEFAULT};
    s[0].address = "127.0.0.1:9001";
    s[1].address = "app.test:8000";
    s[1].resolve = true;
    struct proxy_upstream_conf conf = PROXY_UPSTREAM_CONF_DEFAULT;
    conf.name = "u";
    conf.servers = s;
    conf.server_count = 2;
    struct proxy_upstream *up;
    ck_assert_int_eq(upstream_new(&conf, 1, &up), -EINVAL); /* no resolver */
    conf.resolvers[0] = "127.0.0.1";
    conf.resolver_count = 1;
    ck_assert_int_eq(upstream_new(&conf, 1, &up), 0);
    ck_assert_uint_eq(upstream_server_count(up), 1 + UPSTREAM_RESOLVE_SLOTS);
    /* What sizes the per-slot TLS sessions, known before the upstream is. */
    ck_assert_uint_eq(upstream_conf_slots(&conf), upstream_server_count(up));
    for (unsigned k = 0; k < UPSTREAM_RESOLVE_SLOTS; k++) {
        ck_assert_str_eq(upstream_server_address(up, 1 + k), "app.test:8000");
        ck_assert_uint_eq(upstream_server_slot(up, 1 + k), k);
        ck_assert_int_eq(upstream_server_state(up, 1 + k), PROXY_SERVER_DISABLED);
    }
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(pick(up, 0), 0); /* the empty slots are never picked */
    upstream_free(up);
}
END_TEST

/* api_servers slots: empty (never picked, not listed) until the API adds
 * a server; one removed is not picked, and its slot, once no request
 * holds it, takes the next; duplicates, names and a full upstream are
 * refused; a reload of the same config carries the servers added, and
 * of a changed one does not. */
START_TEST(api_servers_slots_in_memory)
{
    struct proxy_server_conf s[1] = {PROXY_SERVER_CONF_DEFAULT};
    s[0].address = "127.0.0.1:9001";
    struct proxy_upstream_conf conf = PROXY_UPSTREAM_CONF_DEFAULT;
    conf.name = "u";
    conf.servers = s;
    conf.server_count = 1;
    conf.api_servers = 2;
    struct proxy_upstream *up;
    ck_assert_int_eq(upstream_new(&conf, 1, &up), 0);
    ck_assert_uint_eq(upstream_server_count(up), 3);
    ck_assert_uint_eq(upstream_conf_slots(&conf), 3);
    ck_assert(upstream_server_api_unused(up, 1) && upstream_server_api_unused(up, 2));
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pick(up, 0), 0);
    ck_assert_int_eq(upstream_api_add(up, "127.0.0.1:9002", 1, UPSTREAM_API_NONE), 1);
    ck_assert(!upstream_server_api_unused(up, 1));
    ck_assert_str_eq(upstream_server_address(up, 1), "127.0.0.1:9002");
    bool seen[3] = {false};
    for (int i = 0; i < 4; i++)
        seen[pick(up, 0)] = true;
    ck_assert(seen[0] && seen[1] && !seen[2]);
    ck_assert_int_eq(upstream_api_add(up, "127.0.0.1:9002", 1, UPSTREAM_API_NONE), -EEXIST);
    ck_assert_int_eq(upstream_api_add(up, "127.0.0.1:9001", 1, UPSTREAM_API_NONE), -EEXIST);
    ck_assert_int_eq(upstream_api_add(up, "app.test:80", 1, UPSTREAM_API_NONE), -EINVAL);
    ck_assert_int_eq(upstream_api_add(up, "[::1]:9003", 1, UPSTREAM_API_NONE), 2);
    ck_assert_int_eq(upstream_api_add(up, "127.0.0.1:9004", 1, UPSTREAM_API_NONE), -ENOSPC);
    /* the same config again: both added servers go on */
    struct proxy_upstream *next;
    ck_assert_int_eq(upstream_new(&conf, 1, &next), 0);
    upstream_take_health(next, up);
    ck_assert_str_eq(upstream_server_address(next, 1), "127.0.0.1:9002");
    ck_assert_str_eq(upstream_server_address(next, 2), "[::1]:9003");
    ck_assert(!upstream_server_api_unused(next, 2));
    upstream_free(next);
    /* a request holds server 1 while it is removed: not picked, slot held */
    struct upstream_worker *w = upstream_worker_of(up, NULL);
    ck_assert(upstream_server_acquire(up, w, 1));
    ck_assert_int_eq(upstream_api_remove(up, 1), 0);
    ck_assert(upstream_server_api_unused(up, 1));
    ck_assert_int_eq(upstream_api_remove(up, 1), -ENOENT);
    ck_assert_int_eq(upstream_api_remove(up, 0), -ENOENT); /* the config's */
    for (int i = 0; i < 6; i++)
        ck_assert_int_ne(pick(up, 0), 1);
    ck_assert_int_eq(upstream_api_add(up, "127.0.0.1:9005", 1, UPSTREAM_API_NONE), -ENOSPC);
    upstream_server_release(up, w, 1);
    ck_assert_int_eq(upstream_api_add(up, "127.0.0.1:9005", 1, UPSTREAM_API_NONE), 1);
    /* a changed config: nothing carried */
    conf.api_servers = 3;
    ck_assert_int_eq(upstream_new(&conf, 1, &next), 0);
    upstream_take_health(next, up);
    for (size_t i = 1; i < upstream_server_count(next); i++)
        ck_assert(upstream_server_api_unused(next, i));
    upstream_free(next);
    upstream_free(up);
}
END_TEST

/* SRV answers: each record's priority, weight, port and target, whose
 * name may point back into the message; a pointer forward (a loop) or a
 * target that is no host name is a malformed answer. */
START_TEST(dns_srv_answers_are_parsed)
{
    static const uint8_t head[] = {
        0x12, 0x34, 0x81, 0x80, 0, 1,   0,   2,   0, 0,   0,   0,   5,   '_', 'h', 't', 't', 'p', 4,
        '_',  't',  'c',  'p',  3, 'a', 'p', 'p', 4, 't', 'e', 's', 't', 0,   0,   33,  0,   1};
    uint8_t m[200];
    memcpy(m, head, sizeof(head));
    size_t pos = sizeof(head);
    /* "x" + a pointer to "app.test" (offset 23), TTL 60 */
    static const uint8_t r1[] = {0xc0, 0x0c, 0,  33, 0, 1,    0,    0, 0,   60,   0,
                                 10,   0,    10, 0,  1, 0x1f, 0x90, 1, 'x', 0xc0, 23};
    memcpy(m + pos, r1, sizeof(r1));
    pos += sizeof(r1);
    static const uint8_t r2[] = {0xc0, 0x0c, 0, 33,   0,    1, 0,   0, 1,   44,  0,   14,  0,
                                 20,   0,    5, 0x23, 0x82, 1, 'y', 4, 't', 'e', 's', 't', 0};
    memcpy(m + pos, r2, sizeof(r2));
    pos += sizeof(r2);
    struct dns_srv out[2];
    uint32_t ttl = UINT32_MAX;
    ck_assert_int_eq(resolve_srv_parse(m, pos, 0x1234, out, 2, &ttl), 2);
    ck_assert_uint_eq(out[0].priority, 10);
    ck_assert_uint_eq(out[0].weight, 1);
    ck_assert_uint_eq(out[0].port, 8080);
    ck_assert_str_eq(out[0].target, "x.app.test");
    ck_assert_str_eq(out[1].target, "y.test");
    ck_assert_uint_eq(out[1].port, 9090);
    ck_assert_uint_eq(ttl, 60);
    ck_assert_int_eq(resolve_srv_parse(m, pos, 0x1235, out, 2, &ttl), -EINVAL);
    /* a pointer to itself */
    m[sizeof(head) + sizeof(r1) - 1] = (uint8_t)(sizeof(head) + sizeof(r1) - 2);
    ck_assert_int_eq(resolve_srv_parse(m, pos, 0x1234, out, 2, &ttl), -EINVAL);
    m[sizeof(head) + sizeof(r1) - 1] = 23;
    /* a target byte no host name has */
    m[sizeof(head) + sizeof(r1) + 19] = '/';
    ck_assert_int_eq(resolve_srv_parse(m, pos, 0x1234, out, 2, &ttl), -EINVAL);
}
END_TEST

/* ------------------------------------------------------------ runtime API */

/* A request to the admin listener: its status, and its body into `out`. */
static int admin_call(const struct test_daemon *d, const char *method, const char *path,
                      const char *token, const char *body, char *out, size_t size)
{
    char address[64], request[1024];
    snprintf(address, sizeof(address), "127.0.0.2:%d", d->admin_port);
    int fd = test_connect_address(address);
    int n = snprintf(request, sizeof(request),
                     "%s %s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n%s%s%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, token != NULL ? "Authorization: Bearer " : "",
                     token != NULL ? token : "", token != NULL ? "\r\n" : "",
                     body != NULL ? strlen(body) : 0, body != NULL ? body : "");
    test_send_all(fd, request, (size_t)n);
    char reply[16384];
    size_t len = 0;
    for (ssize_t got;
         len < sizeof(reply) - 1 && (got = recv(fd, reply + len, sizeof(reply) - 1 - len, 0)) > 0;)
        len += (size_t)got;
    close(fd);
    reply[len] = '\0';
    int status = 0;
    sscanf(reply, "HTTP/1.1 %d", &status);
    const char *start = strstr(reply, "\r\n\r\n");
    snprintf(out, size, "%s", start != NULL ? start + 4 : "");
    return status;
}

/* ------------------------------------------------------------ under load */

/* Client threads asking the daemon on `port` again and again, each on a
 * connection of its own, until told to stop: every answer but a 200
 * counts as failed. */
struct load {
    int port;
    pthread_t threads[2];
    atomic_bool stop;
    atomic_uint ok, failed;
};

static void *load_main(void *arg)
{
    struct load *l = arg;
    char body[64];
    while (!atomic_load(&l->stop)) {
        if (test_daemon_http_try_get("127.0.0.1", l->port, "/", body, sizeof(body)) == 200)
            atomic_fetch_add(&l->ok, 1);
        else
            atomic_fetch_add(&l->failed, 1);
    }
    return NULL;
}

static void load_start(struct load *l, int port)
{
    *l = (struct load){.port = port};
    for (int i = 0; i < COUNT(l->threads); i++)
        ck_assert_int_eq(pthread_create(&l->threads[i], NULL, load_main, l), 0);
}

/* Stops the load; its requests all answered 200, and there were some. */
static void load_stop(struct load *l)
{
    atomic_store(&l->stop, true);
    for (int i = 0; i < COUNT(l->threads); i++)
        pthread_join(l->threads[i], NULL);
    ck_assert_msg(atomic_load(&l->failed) == 0, "%u of %u requests failed", atomic_load(&l->failed),
                  atomic_load(&l->failed) + atomic_load(&l->ok));
    ck_assert_uint_gt(atomic_load(&l->ok), 20);
}

/* Waits up to `ms` for backend `b` to get a request more than `since`. */
static bool gets_requests(const struct backend *b, unsigned since, unsigned ms)
{
    uint64_t start = test_now_ms();
    while (test_now_ms() - start < ms) {
        if (atomic_load(&b->requests) > since)
            return true;
        usleep(10 * 1000);
    }
    return false;
}

/* Whether backend `b` got no request for `ms`, once `settle` ms passed
 * for those already sent to it. */
static bool gets_no_requests(const struct backend *b, unsigned settle, unsigned ms)
{
    usleep(settle * 1000);
    unsigned before = atomic_load(&b->requests);
    usleep(ms * 1000);
    return atomic_load(&b->requests) == before;
}

/* A and SRV answers that change while requests flow: the new addresses
 * get requests, the old ones none, and no request fails. */
START_TEST(dns_answers_change_under_load_without_a_failure)
{
    struct backend *ab[2];
    backends_on_one_port(ab, (const char *const[]){"a", "b"},
                         (const char *const[]){"127.0.0.1", "127.0.0.3"}, 2);
    struct backend *a = ab[0], *b = ab[1];
    struct dns_server *dns = dns_start();
    dns_answer(dns, "127.0.0.1");
    struct test_daemon d;
    char upstream[256];
    snprintf(upstream, sizeof(upstream),
             "resolver 127.0.0.1:%d valid=100ms ipv6=off;\nserver app.test:%d resolve;", dns->port,
             a->tcp.port);
    start_daemon(&d, 2, upstream, "");
    ck_assert(answered_by(d.port, "a", 3000));
    struct load l;
    load_start(&l, d.port);
    dns_answer(dns, "127.0.0.3");
    ck_assert(gets_requests(b, 0, 3000));
    ck_assert(gets_no_requests(a, 300, 200));
    dns_answer(dns, "127.0.0.1");
    ck_assert(gets_requests(a, atomic_load(&a->requests), 3000));
    ck_assert(gets_no_requests(b, 300, 200));
    load_stop(&l);
    test_daemon_stop(&d);
    dns_free(dns);
    backend_free(a);
    backend_free(b);

    /* SRV: x, then x and y, then y alone */
    struct backend *x = backend_start_on("x", "127.0.0.1", 0);
    struct backend *y = backend_start_on("y", "127.0.0.1", 0);
    dns = dns_start();
    dns_answer(dns, "127.0.0.1");
    dns->srv[0].priority = 10, dns->srv[0].weight = 1, dns->srv[0].port = (uint16_t)x->tcp.port;
    dns->srv[0].target = "x";
    dns->srv[1].priority = 10, dns->srv[1].weight = 1, dns->srv[1].port = (uint16_t)y->tcp.port;
    dns->srv[1].target = "y";
    atomic_store(&dns->srv_count, 1);
    snprintf(upstream, sizeof(upstream),
             "resolver 127.0.0.1:%d valid=100ms ipv6=off;\nserver app.test service=http resolve;",
             dns->port);
    start_daemon(&d, 2, upstream, "");
    ck_assert(answered_by(d.port, "x", 3000));
    load_start(&l, d.port);
    atomic_store(&dns->srv_count, 2);
    ck_assert(gets_requests(y, 0, 3000));
    atomic_store(&dns->srv_count, 1); /* x alone for a moment at most */
    atomic_store(&dns->srv_first, 1);
    ck_assert(gets_no_requests(x, 300, 200));
    ck_assert(gets_requests(y, atomic_load(&y->requests), 1000));
    load_stop(&l);
    test_daemon_stop(&d);
    dns_free(dns);
    backend_free(x);
    backend_free(y);
}
END_TEST

/* Writes the token file of the admin listener: "secret". */
static void write_token(char *path, size_t size)
{
    test_daemon_file(path, size, "token");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("secret\n", f);
    fclose(f);
    chmod(path, 0600);
}

/* The config of the API tests: upstream app of the server on `port`
 * (its line ending in `extra`) with 2 api_servers slots. */
static void write_api_config(const struct test_daemon *d, const char *token_path, int port,
                             const char *extra)
{
    char conf[PATH_MAX + 1024];
    snprintf(conf, sizeof(conf),
             "workers 2;\ndrain_timeout 100ms;\n"
             "admin { listen 127.0.0.2:0; auth_token_file %s; }\n"
             "upstream app {\n    server 127.0.0.1:%d max_fails=0%s;\n    api_servers 2;\n"
             "    balance round_robin;\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { proxy_pass http://app; }\n}\n",
             token_path, port, extra);
    test_daemon_write_config(d, conf);
}

/* The server id in a POST's answer, {"id":N,...}. */
static int answer_id(const char *json)
{
    const char *p = strstr(json, "\"id\":");
    ck_assert_msg(p != NULL, "%s", json);
    return atoi(p + 5);
}

/* Servers added, drained and removed through the API while requests
 * flow: each change reaches every worker within a second, no request
 * fails, each change is logged, a reload that leaves the upstream as it
 * was keeps the servers added and one that changes it does not. */
START_TEST(runtime_api_adds_and_removes_servers_under_load)
{
    struct backend *a = backend_start_on("a", "127.0.0.1", 0);
    struct backend *b = backend_start_on("b", "127.0.0.1", 0);
    struct backend *c = backend_start_on("c", "127.0.0.1", 0);
    char token_path[PATH_MAX];
    write_token(token_path, sizeof(token_path));
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    write_api_config(&d, token_path, a->tcp.port, "");
    test_daemon_start(&d);
    char out[8192], body[128];
    const char *list = "/api/upstreams/app/servers";
    ck_assert_int_eq(admin_call(&d, "GET", list, "secret", NULL, out, sizeof(out)), 200);
    ck_assert_msg(strstr(out, "\"id\":1") == NULL, "free slots are not listed: %s", out);
    snprintf(body, sizeof(body), "{\"server\": \"127.0.0.1:%d\"}", b->tcp.port);
    ck_assert_int_eq(admin_call(&d, "POST", list, NULL, body, out, sizeof(out)), 401);
    ck_assert_int_eq(admin_call(&d, "POST", list, "wrong", body, out, sizeof(out)), 401);

    struct load l;
    load_start(&l, d.port);
    ck_assert_int_eq(admin_call(&d, "POST", list, "secret", body, out, sizeof(out)), 201);
    int b_id = answer_id(out);
    ck_assert(gets_requests(b, 0, 1000));
    ck_assert_int_eq(admin_call(&d, "POST", list, "secret", body, out, sizeof(out)), 409);
    snprintf(body, sizeof(body), "{\"server\": \"127.0.0.1:%d\", \"weight\": 2}", c->tcp.port);
    ck_assert_int_eq(admin_call(&d, "POST", list, "secret", body, out, sizeof(out)), 201);
    ck_assert_msg(strstr(out, "\"weight\":2") != NULL, "%s", out);
    int c_id = answer_id(out);
    ck_assert(gets_requests(c, 0, 1000));
    ck_assert_int_eq(
        admin_call(&d, "POST", list, "secret", "{\"server\": \"127.0.0.1:1\"}", out, sizeof(out)),
        409); /* api_servers 2: no slot left */
    ck_assert_int_eq(
        admin_call(&d, "POST", list, "secret", "{\"server\": \"app.test:80\"}", out, sizeof(out)),
        400);
    ck_assert_int_eq(admin_call(&d, "POST", list, "secret", "{\"weight\": 2}", out, sizeof(out)),
                     400);
    /* drained, then removed */
    char path[128];
    snprintf(path, sizeof(path), "%s/%d", list, b_id);
    ck_assert_int_eq(admin_call(&d, "PATCH", path, "secret", "{\"drain\": true}", out, sizeof(out)),
                     200);
    ck_assert(gets_no_requests(b, 200, 200));
    ck_assert_int_eq(admin_call(&d, "DELETE", path, "secret", NULL, out, sizeof(out)), 200);
    ck_assert_int_eq(admin_call(&d, "GET", path, "secret", NULL, out, sizeof(out)), 404);
    ck_assert_int_eq(admin_call(&d, "DELETE", path, "secret", NULL, out, sizeof(out)), 404);
    ck_assert_int_eq(
        admin_call(&d, "DELETE", "/api/upstreams/app/servers/0", "secret", NULL, out, sizeof(out)),
        409); /* the config's */
    /* a reload that leaves the upstream as it was keeps c */
    kill(d.pid, SIGHUP);
    ck_assert_int_ge(wait_log(&d, "generation 1 finished", 3000), 0);
    ck_assert_int_eq(admin_call(&d, "GET", list, "secret", NULL, out, sizeof(out)), 200);
    char c_address[64];
    snprintf(c_address, sizeof(c_address), "\"127.0.0.1:%d\"", c->tcp.port);
    ck_assert_msg(strstr(out, c_address) != NULL, "%s", out);
    ck_assert(gets_requests(c, atomic_load(&c->requests), 1000));
    /* removed under load, with no drain first */
    snprintf(path, sizeof(path), "%s/%d", list, c_id);
    ck_assert_int_eq(admin_call(&d, "DELETE", path, "secret", NULL, out, sizeof(out)), 200);
    ck_assert_msg(strstr(out, c_address) == NULL, "%s", out);
    ck_assert(gets_no_requests(c, 200, 200));
    ck_assert(gets_requests(a, atomic_load(&a->requests), 1000));
    load_stop(&l);
    ck_assert_int_ge(wait_log(&d, "admin API: upstream \"app\" server", 100), 0);
    ck_assert_int_ge(wait_log(&d, ") added: weight 2, up", 100), 0);
    ck_assert_int_ge(wait_log(&d, ") removed", 100), 0);

    /* one that changes the upstream drops what the API added */
    snprintf(body, sizeof(body), "{\"server\": \"127.0.0.1:%d\"}", b->tcp.port);
    ck_assert_int_eq(admin_call(&d, "POST", list, "secret", body, out, sizeof(out)), 201);
    write_api_config(&d, token_path, a->tcp.port, " weight=2");
    kill(d.pid, SIGHUP);
    ck_assert_int_ge(wait_log(&d, "generation 2 finished", 3000), 0);
    ck_assert_int_eq(admin_call(&d, "GET", list, "secret", NULL, out, sizeof(out)), 200);
    char b_address[64];
    snprintf(b_address, sizeof(b_address), "\"127.0.0.1:%d\"", b->tcp.port);
    ck_assert_msg(strstr(out, b_address) == NULL, "%s", out);
    test_daemon_stop(&d);
    backend_free(a);
    backend_free(b);
    backend_free(c);
}
END_TEST

/* The upstream API: refused without the token; the servers listed; a
 * server set down, then up with a new weight, in every worker at once,
 * each change logged; bad requests refused. */
START_TEST(runtime_api_sets_servers_down_and_weights)
{
    struct backend *a = backend_start_on("a", "127.0.0.1", 0);
    struct backend *b = backend_start_on("b", "127.0.0.1", 0);
    char token_path[PATH_MAX];
    test_daemon_file(token_path, sizeof(token_path), "token");
    FILE *f = fopen(token_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("secret\n", f);
    fclose(f);
    chmod(token_path, 0600);
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[PATH_MAX + 1024];
    snprintf(conf, sizeof(conf),
             "workers 2;\ndrain_timeout 100ms;\n"
             "admin { listen 127.0.0.2:0; auth_token_file %s; }\n"
             "upstream app {\n    server 127.0.0.1:%d max_fails=0;\n"
             "    server 127.0.0.1:%d max_fails=0;\n    balance round_robin;\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { proxy_pass http://app; }\n}\n",
             token_path, a->tcp.port, b->tcp.port);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    char out[8192];
    const char *list = "/api/upstreams/app/servers";
    ck_assert_int_eq(admin_call(&d, "GET", list, NULL, NULL, out, sizeof(out)), 401);
    ck_assert_int_eq(admin_call(&d, "GET", list, "wrong", NULL, out, sizeof(out)), 401);
    ck_assert_int_eq(admin_call(&d, "GET", list, "secret", NULL, out, sizeof(out)), 200);
    ck_assert_msg(strstr(out, "\"id\":0") != NULL && strstr(out, "\"id\":1") != NULL &&
                      strstr(out, "\"state\":\"up\"") != NULL && strstr(out, "\"weight\":1"),
                  "%s", out);
    ck_assert_int_eq(admin_call(&d, "PATCH", "/api/upstreams/app/servers/0", "secret",
                                "{\"down\": true}", out, sizeof(out)),
                     200);
    ck_assert_msg(strstr(out, "\"down\":true") != NULL && strstr(out, "\"state\":\"down\""), "%s",
                  out);
    unsigned before = atomic_load(&a->requests);
    char body[64];
    for (int i = 0; i < 20; i++) { /* new connections: both workers */
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
        ck_assert_str_eq(body, "b");
    }
    ck_assert_uint_eq(atomic_load(&a->requests), before);
    ck_assert_int_eq(admin_call(&d, "PATCH", "/api/upstreams/app/servers/0", "secret",
                                "{\"down\": false, \"weight\": 3}", out, sizeof(out)),
                     200);
    ck_assert_msg(strstr(out, "\"weight\":3") != NULL && strstr(out, "\"state\":\"up\""), "%s",
                  out);
    before = atomic_load(&a->requests);
    unsigned b_before = atomic_load(&b->requests);
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
    unsigned to_a = atomic_load(&a->requests) - before, to_b = atomic_load(&b->requests) - b_before;
    ck_assert_msg(to_a >= 2 * to_b, "weight 3 to 1: %u to %u", to_a, to_b);
    ck_assert_int_ge(wait_log(&d, "admin API: upstream \"app\" server 0 (127.0.0.1:", 1000), 0);
    ck_assert_int_ge(wait_log(&d, "weight 1 -> 3, down -> up", 1000), 0);
    /* refusals */
    ck_assert_int_eq(
        admin_call(&d, "PATCH", "/api/upstreams/app/servers/0", "secret", "{", out, sizeof(out)),
        400);
    ck_assert_int_eq(admin_call(&d, "PATCH", "/api/upstreams/app/servers/0", "secret",
                                "{\"backup\": true}", out, sizeof(out)),
                     400);
    ck_assert_int_eq(admin_call(&d, "PATCH", "/api/upstreams/app/servers/0", "secret",
                                "{\"weight\": 0}", out, sizeof(out)),
                     400);
    ck_assert_int_eq(admin_call(&d, "PATCH", "/api/upstreams/app/servers/9", "secret",
                                "{\"drain\": true}", out, sizeof(out)),
                     404);
    ck_assert_int_eq(
        admin_call(&d, "GET", "/api/upstreams/none/servers", "secret", NULL, out, sizeof(out)),
        404);
    ck_assert_int_eq(
        admin_call(&d, "PUT", "/api/upstreams/app/servers/0", "secret", NULL, out, sizeof(out)),
        405);
    /* drained: no new requests either */
    ck_assert_int_eq(admin_call(&d, "PATCH", "/api/upstreams/app/servers/1", "secret",
                                "{\"drain\": true}", out, sizeof(out)),
                     200);
    ck_assert_msg(strstr(out, "\"state\":\"draining\"") != NULL, "%s", out);
    b_before = atomic_load(&b->requests);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
    ck_assert_uint_eq(atomic_load(&b->requests), b_before);
    /* a reload that leaves the servers' lines as they were keeps it all */
    kill(d.pid, SIGHUP);
    ck_assert_int_ge(wait_log(&d, "generation 1 finished", 3000), 0);
    ck_assert_int_eq(admin_call(&d, "GET", list, "secret", NULL, out, sizeof(out)), 200);
    ck_assert_msg(strstr(out, "\"drain\":true") != NULL && strstr(out, "\"weight\":3") != NULL,
                  "%s", out);
    b_before = atomic_load(&b->requests);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(get_body(d.port, body, sizeof(body)), 200);
    ck_assert_uint_eq(atomic_load(&b->requests), b_before);
    /* one that changes server 1's line gives it the config's state again */
    snprintf(conf, sizeof(conf),
             "workers 2;\ndrain_timeout 100ms;\n"
             "admin { listen 127.0.0.2:0; auth_token_file %s; }\n"
             "upstream app {\n    server 127.0.0.1:%d max_fails=0;\n"
             "    server 127.0.0.1:%d max_fails=0 weight=2;\n    balance round_robin;\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { proxy_pass http://app; }\n}\n",
             token_path, a->tcp.port, b->tcp.port);
    test_daemon_write_config(&d, conf);
    kill(d.pid, SIGHUP);
    ck_assert_int_ge(wait_log(&d, "generation 2 finished", 3000), 0);
    ck_assert_int_eq(
        admin_call(&d, "GET", "/api/upstreams/app/servers/1", "secret", NULL, out, sizeof(out)),
        200);
    ck_assert_msg(strstr(out, "\"drain\":false") != NULL && strstr(out, "\"weight\":2") != NULL,
                  "%s", out);
    test_daemon_stop(&d);

    /* an admin listener that authenticates nobody: refused */
    test_daemon_init(&d, "corral");
    snprintf(conf, sizeof(conf),
             "workers 1;\ndrain_timeout 100ms;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream app {\n    server 127.0.0.1:%d;\n}\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { proxy_pass http://app; }\n}\n",
             a->tcp.port);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    ck_assert_int_eq(admin_call(&d, "GET", list, NULL, NULL, out, sizeof(out)), 403);
    ck_assert_int_eq(admin_call(&d, "PATCH", "/api/upstreams/app/servers/0", NULL,
                                "{\"down\": true}", out, sizeof(out)),
                     403);
    test_daemon_stop(&d);
    backend_free(a);
    backend_free(b);
}
END_TEST

START_TEST(dns_answers_are_parsed)
{
    uint8_t q[300];
    int len = resolve_query_build("app.test", 0x1234, DNS_TYPE_A, q, sizeof(q));
    ck_assert_int_eq(len, 12 + 10 + 4);
    /* The query turned into an answer with two A records and a CNAME. */
    uint8_t m[300];
    memcpy(m, q, (size_t)len);
    m[2] = 0x81;
    m[3] = 0x80;
    m[7] = 3;
    size_t pos = (size_t)len;
    static const uint8_t cname[] = {0xc0, 0x0c, 0, 5, 0, 1, 0, 0, 0, 1, 0, 2, 0xc0, 0x0c};
    /* TTLs 300 and 60: the answer's is the least */
    static const uint8_t a1[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 10, 0, 0, 1};
    static const uint8_t a2[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 2};
    memcpy(m + pos, cname, sizeof(cname));
    pos += sizeof(cname);
    memcpy(m + pos, a1, sizeof(a1));
    pos += sizeof(a1);
    memcpy(m + pos, a2, sizeof(a2));
    pos += sizeof(a2);
    static const uint8_t aaaa[] = {0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 1, 0, 16, 0x20, 1,
                                   0x0d, 0xb8, 0, 0,  0, 0, 0, 0, 0, 0, 0, 0,  0,    9};
    memcpy(m + pos, aaaa, sizeof(aaaa));
    pos += sizeof(aaaa);
    m[7] = 4;
    struct dns_addr out[4];
    uint32_t ttl = UINT32_MAX;
    ck_assert_int_eq(resolve_answer_parse(m, pos, 0x1234, DNS_TYPE_A, out, 4, &ttl), 2);
    ck_assert_int_eq(out[1].family, AF_INET);
    ck_assert_mem_eq(out[1].bytes, "\x0a\x00\x00\x02", 4);
    ck_assert_uint_eq(ttl, 60);
    /* The records of the type asked, only. */
    ttl = UINT32_MAX;
    ck_assert_int_eq(resolve_answer_parse(m, pos, 0x1234, DNS_TYPE_AAAA, out, 4, &ttl), 1);
    ck_assert_int_eq(out[0].family, AF_INET6);
    ck_assert_mem_eq(out[0].bytes, aaaa + 12, 16);
    ck_assert_uint_eq(ttl, 1);
    ck_assert_int_eq(resolve_answer_parse(m, pos, 0x1235, DNS_TYPE_A, out, 4, &ttl), -EINVAL);
    ck_assert_int_eq(resolve_answer_parse(m, pos - 1, 0x1234, DNS_TYPE_A, out, 4, &ttl), -EINVAL);
    /* more records than room: all counted, the room filled */
    memset(out, 0, sizeof(out));
    ck_assert_int_eq(resolve_answer_parse(m, pos, 0x1234, DNS_TYPE_A, out, 1, &ttl), 2);
    ck_assert_mem_eq(out[0].bytes, "\x0a\x00\x00\x01", 4);
    ck_assert_int_eq(out[1].family, 0);
    /* a TTL with its top bit set is 0 (RFC 2181 8) */
    m[pos - 16 - 28 + 6] = 0x80;
    ttl = UINT32_MAX;
    ck_assert_int_eq(resolve_answer_parse(m, pos, 0x1234, DNS_TYPE_A, out, 4, &ttl), 2);
    ck_assert_uint_eq(ttl, 0);
    m[3] = 0x83; /* NXDOMAIN */
    ck_assert_int_eq(resolve_answer_parse(m, pos, 0x1234, DNS_TYPE_A, out, 4, &ttl), 0);
    m[3] = 0x82; /* SERVFAIL */
    ck_assert_int_eq(resolve_answer_parse(m, pos, 0x1234, DNS_TYPE_AAAA, out, 4, &ttl), -EAGAIN);
    ck_assert_int_eq(resolve_query_build("a..b", 1, DNS_TYPE_A, q, sizeof(q)), -EINVAL);
    ck_assert_int_eq(resolve_query_build("app.test", 1, DNS_TYPE_A, q, 20), -EINVAL);
    len = resolve_query_build("app.test", 7, DNS_TYPE_AAAA, q, sizeof(q));
    ck_assert_int_eq(len, 12 + 10 + 4);
    ck_assert_int_eq(q[len - 3], 28); /* QTYPE AAAA, class IN */
    ck_assert_int_eq(q[len - 1], 1);
}
END_TEST

static TCase *new_case(Suite *suite, const char *name, double timeout_s, bool daemon)
{
    TCase *tc = tcase_create(name);
    if (daemon)
        test_daemon_fixture(tc);
    tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(suite, tc);
    return tc;
}

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/upstream");
    TCase *tc = new_case(suite, "balance", 20, false);
    tcase_add_test(tc, consistent_hash_moves_about_one_nth_of_the_keys);
    tcase_add_test(tc, plain_hash_spreads_and_sticks);
    tcase_add_test(tc, tried_servers_past_the_64th);
    tcase_add_test(tc, ip_hash_follows_the_client_address);
    tcase_add_test(tc, header_key_reads_the_named_header);
    tcase_add_test(tc, round_robin_follows_weights);
    tcase_add_test(tc, random_follows_weights);
    tcase_add_loop_test(tc, load_aware_methods_avoid_the_busy_server, 0, COUNT(load_aware));
    tcase_add_test(tc, backup_only_when_every_primary_is_down);
    tcase_add_test(tc, max_conns_is_a_hard_limit);
    tcase_add_test(tc, slow_start_ramps_the_weight);
    tcase_add_test(tc, health_match_defaults_and_lists);
    tcase_add_test(tc, dns_answers_are_parsed);
    tcase_add_test(tc, dns_srv_answers_are_parsed);
    tcase_add_test(tc, resolve_server_has_empty_slots_until_an_answer);
    tcase_add_test(tc, api_servers_slots_in_memory);

    tc = new_case(suite, "daemon", 30, true);
    tcase_add_test(tc, failing_backend_is_marked_down_then_up);
    tcase_add_test(tc, reload_keeps_the_health_state);
    tcase_add_test(tc, backup_gets_requests_only_when_the_primaries_are_down);
    tcase_add_test(tc, max_conns_holds_across_two_workers);
    tcase_add_test(tc, changed_dns_answer_moves_traffic_without_a_reload);
    tcase_add_test(tc, dns_ttl_sets_when_a_name_is_asked_again);
    tcase_add_test(tc, runtime_api_sets_servers_down_and_weights);
    tcase_add_test(tc, srv_records_give_ports_weights_and_backups);
    tcase_add_loop_test(tc, every_address_of_a_name_serves, 0, 2);
    tcase_add_loop_test(tc, resolve_uses_ipv6_addresses_too, 0, 2);
    tcase_add_test(tc, server_up_metric_follows_the_health_checks);
    tcase_add_test(tc, server_up_metric_follows_passive_failures);

    tc = new_case(suite, "under load", 30, true);
    tcase_add_test(tc, dns_answers_change_under_load_without_a_failure);
    tcase_add_test(tc, runtime_api_adds_and_removes_servers_under_load);

    /* One request's way through the servers, in the worker that took it:
     * nothing for ThreadSanitizer to see that the cases above do not
     * show (the release and ASan runs have them). */
    if (TEST_TSAN)
        return suite;
    tc = new_case(suite, "retry", 30, true);
    tcase_add_test(tc, slow_get_goes_to_every_server_by_default);
    tcase_add_test(tc, retries_stop_at_the_configured_tries);
    tcase_add_test(tc, retries_stop_at_the_configured_timeout);
    tcase_add_test(tc, timeouts_are_not_retried_when_not_listed);
    tcase_add_test(tc, post_is_not_retried_once_sent_unless_non_idempotent);
    tcase_add_test(tc, listed_status_goes_to_the_next_server);
    tcase_add_test(tc, upstream_failures_are_logged_with_the_request);
    return suite;
}
