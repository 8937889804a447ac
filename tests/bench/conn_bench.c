/*
 * conn_bench.c: pushes N MB from one loopback connection to another through
 * one loop, as a proxy forwards a body: copied writes, large direct writes,
 * or splice(2); prints MB/s and the loop thread's CPU time per MB for each.
 *
 * usage: build/conn-bench [MB] [BLOCK...]   (default 1000 MB; block sizes
 * 1024 4096 16384 65536: each read is written on in pieces of that size,
 * and the splice rows splice bodies of that size one after the other, as a
 * proxy does one per response; the last splice row is one for everything).
 * The gen-copy and gen-direct rows write blocks of that size from memory,
 * as a server answering from a cache, with no source connection.  The
 * gen-send and gen-zerocopy rows do the same with blocking send(2) calls
 * outside the loop, without and with MSG_ZEROCOPY (completions read from
 * the error queue as they come); "copied" counts the completions in which
 * the kernel says it copied the pages after all.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <poll.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum mode { COPY, DIRECT, SPLICE, GEN_COPY, GEN_DIRECT };
static const char *const mode_names[] = {"copy", "direct", "splice", "gen-copy", "gen-direct"};

struct bench {
    corral_loop *loop;
    corral_conn *from, *to;
    int from_peer, to_peer;
    enum mode mode;
    size_t block;
    uint64_t total;
    uint64_t body, spliced; /* splice: bytes per splice (0: all), and done */
    uint64_t generated;     /* gen-*: bytes written */
    atomic_bool received;
    bool to_closed;
};

static uint64_t ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *send_all(void *arg)
{
    struct bench *b = arg;
    static char chunk[256 * 1024];
    memset(chunk, 'x', sizeof(chunk));
    for (uint64_t sent = 0; sent < b->total;) {
        size_t n = b->total - sent < sizeof(chunk) ? (size_t)(b->total - sent) : sizeof(chunk);
        ssize_t w = send(b->from_peer, chunk, n, MSG_NOSIGNAL);
        if (w <= 0) {
            perror("send");
            exit(1);
        }
        sent += (uint64_t)w;
    }
    shutdown(b->from_peer, SHUT_WR);
    return NULL;
}

static void *receive_all(void *arg)
{
    struct bench *b = arg;
    static char buf[256 * 1024];
    uint64_t got = 0;
    for (;;) {
        ssize_t n = recv(b->to_peer, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        got += (uint64_t)n;
    }
    if (got != b->total) {
        fprintf(stderr, "received %llu of %llu bytes\n", (unsigned long long)got,
                (unsigned long long)b->total);
        exit(1);
    }
    atomic_store(&b->received, true);
    return NULL;
}

static size_t from_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct bench *b = corral_conn_data(conn);
    for (size_t off = 0; off < len; off += b->block) {
        size_t n = len - off < b->block ? len - off : b->block;
        corral_conn_write(b->to, data + off, n);
    }
    if (corral_conn_backed_up(b->to))
        corral_conn_pause_read(conn);
    return len;
}

static void from_on_eof(corral_conn *conn)
{
    struct bench *b = corral_conn_data(conn);
    corral_conn_close_no_linger(b->to); /* the reader closes only after the loop */
    corral_conn_close_no_linger(conn);
}

/* gen-*: writes blocks from memory while `to` takes them. */
static void generate(struct bench *b)
{
    static char block[4 * 1024 * 1024];
    while (b->generated < b->total && !corral_conn_backed_up(b->to)) {
        size_t n =
            b->total - b->generated < b->block ? (size_t)(b->total - b->generated) : b->block;
        corral_conn_write(b->to, block, n);
        b->generated += n;
    }
    if (b->generated == b->total) {
        corral_conn_close_no_linger(b->to);
        corral_conn_close_no_linger(b->from);
    }
}

static void to_on_drain(corral_conn *conn)
{
    struct bench *b = corral_conn_data(conn);
    if (b->mode == GEN_COPY || b->mode == GEN_DIRECT)
        generate(b);
    else
        corral_conn_resume_read(b->from);
}

static void to_on_close(corral_conn *conn, int error)
{
    struct bench *b = corral_conn_data(conn);
    if (error != 0)
        fprintf(stderr, "to: %s\n", strerror(-error));
    b->to_closed = true;
}

static const struct corral_conn_handler from_handler = {.on_data = from_on_data,
                                                        .on_eof = from_on_eof};
static const struct corral_conn_handler to_handler = {.on_drain = to_on_drain,
                                                      .on_close = to_on_close};

static void spliced(corral_conn *from, corral_conn *to, uint64_t moved, int error, void *arg);

static void splice_next(struct bench *b)
{
    uint64_t left = b->total - b->spliced;
    uint64_t len = b->body != 0 && b->body < left ? b->body : left;
    if (corral_conn_splice(b->from, b->to, len, spliced, b) != 0) {
        fprintf(stderr, "splice refused\n");
        exit(1);
    }
}

static void spliced(corral_conn *from, corral_conn *to, uint64_t moved, int error, void *arg)
{
    struct bench *b = arg;
    if (error != 0)
        fprintf(stderr, "splice: %s after %llu bytes\n", strerror(-error),
                (unsigned long long)moved);
    b->spliced += moved;
    if (error == 0 && b->spliced < b->total) {
        splice_next(b);
        return;
    }
    corral_conn_close_no_linger(to);
    corral_conn_close_no_linger(from);
}

/* A corral connection on b->loop and the blocking socket at its other end. */
static corral_conn *open_pair(struct bench *b, const struct corral_conn_handler *handler, int *peer)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    if (lfd == -1 || bind(lfd, (struct sockaddr *)&addr, len) == -1 || listen(lfd, 1) == -1 ||
        getsockname(lfd, (struct sockaddr *)&addr, &len) == -1) {
        perror("listen");
        exit(1);
    }
    corral_conn *conn;
    if (corral_connect(b->loop, (struct sockaddr *)&addr, len, handler, b, &conn) != 0 ||
        (*peer = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) == -1) {
        perror("connect");
        exit(1);
    }
    close(lfd);
    while (conn->state == CORRAL__CONN_CONNECTING)
        corral__loop_run_once(b->loop, 100);
    return conn;
}

static void run(enum mode mode, size_t block, uint64_t total)
{
    struct bench b = {.mode = mode, .block = block, .total = total};
    if (corral_loop_new(&b.loop) != 0)
        exit(1);
    b.from = open_pair(&b, &from_handler, &b.from_peer);
    b.to = open_pair(&b, &to_handler, &b.to_peer);
    /* Copies: every write below the threshold; direct: every write at it. */
    corral__loop_set_direct_write_min(b.loop, mode == COPY || mode == GEN_COPY ? SIZE_MAX : 1);

    pthread_t sender, receiver;
    uint64_t wall0 = ns(CLOCK_MONOTONIC), cpu0 = ns(CLOCK_THREAD_CPUTIME_ID);
    bool generating = mode == GEN_COPY || mode == GEN_DIRECT;
    pthread_create(&receiver, NULL, receive_all, &b);
    if (!generating)
        pthread_create(&sender, NULL, send_all, &b);
    else
        generate(&b);
    if (mode == SPLICE) {
        b.body = block;
        splice_next(&b);
    }
    while (!b.to_closed)
        corral__loop_run_once(
            b.loop, b.loop->flush_list || b.loop->kick_list || b.loop->splices_done ? 0 : 100);
    uint64_t cpu = ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    if (!generating)
        pthread_join(sender, NULL);
    pthread_join(receiver, NULL);
    uint64_t wall = ns(CLOCK_MONOTONIC) - wall0;
    double mb = (double)total / (1024.0 * 1024.0);
    printf("%-10s %7zu %9.0f %9.1f\n", mode_names[mode], block, mb / ((double)wall / 1e9),
           (double)cpu / 1e3 / mb);
    close(b.from_peer);
    close(b.to_peer);
    corral_loop_free(b.loop);
}

/* ------------------------------------------------------------ MSG_ZEROCOPY */

struct zc_receiver {
    int fd;
    uint64_t total;
};

static void *zc_receive(void *arg)
{
    struct zc_receiver *r = arg;
    static char buf[256 * 1024];
    uint64_t got = 0;
    ssize_t n;
    while ((n = recv(r->fd, buf, sizeof(buf), 0)) > 0)
        got += (uint64_t)n;
    if (got != r->total) {
        fprintf(stderr, "received %llu of %llu bytes\n", (unsigned long long)got,
                (unsigned long long)r->total);
        exit(1);
    }
    return NULL;
}

/* Reads the zerocopy completions queued on `fd`: how many ranges of sends
 * they cover, and of those how many the kernel copied anyway. */
static void zc_reap(int fd, uint64_t *done, uint64_t *copied)
{
    for (;;) {
        char control[128];
        struct msghdr msg = {.msg_control = control, .msg_controllen = sizeof(control)};
        if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) == -1)
            return;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
            struct sock_extended_err *e = (struct sock_extended_err *)CMSG_DATA(c);
            if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            uint64_t n = (uint64_t)(e->ee_data - e->ee_info) + 1;
            *done += n;
            if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                *copied += n;
        }
    }
}

static void run_send(size_t block, uint64_t total, bool zerocopy)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct zc_receiver r = {.total = total};
    if (lfd == -1 || fd == -1 || bind(lfd, (struct sockaddr *)&addr, len) == -1 ||
        listen(lfd, 1) == -1 || getsockname(lfd, (struct sockaddr *)&addr, &len) == -1 ||
        connect(fd, (struct sockaddr *)&addr, len) == -1 ||
        (r.fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) == -1) {
        perror("socket pair");
        exit(1);
    }
    close(lfd);
    if (zerocopy && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == -1) {
        perror("SO_ZEROCOPY");
        exit(1);
    }
    static char data[4 * 1024 * 1024]; /* never written while sends are in flight */
    pthread_t receiver;
    uint64_t wall0 = ns(CLOCK_MONOTONIC), cpu0 = ns(CLOCK_THREAD_CPUTIME_ID);
    uint64_t all0 = ns(CLOCK_PROCESS_CPUTIME_ID);
    pthread_create(&receiver, NULL, zc_receive, &r);
    uint64_t sends = 0, done = 0, copied = 0;
    for (uint64_t sent = 0; sent < total;) {
        size_t n = total - sent < block ? (size_t)(total - sent) : block;
        ssize_t w = send(fd, data, n, MSG_NOSIGNAL | (zerocopy ? MSG_ZEROCOPY : 0));
        if (w == -1 && errno == ENOBUFS) { /* too many completions unread */
            struct pollfd p = {.fd = fd};
            poll(&p, 1, 10);
            zc_reap(fd, &done, &copied);
            continue;
        }
        if (w <= 0) {
            perror("send");
            exit(1);
        }
        sent += (uint64_t)w;
        sends++;
        if (zerocopy)
            zc_reap(fd, &done, &copied);
    }
    shutdown(fd, SHUT_WR);
    while (zerocopy && done < sends) {
        struct pollfd p = {.fd = fd};
        poll(&p, 1, 10);
        zc_reap(fd, &done, &copied);
    }
    uint64_t cpu = ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    pthread_join(receiver, NULL);
    uint64_t wall = ns(CLOCK_MONOTONIC) - wall0, all = ns(CLOCK_PROCESS_CPUTIME_ID) - all0;
    double mb = (double)total / (1024.0 * 1024.0);
    /* On loopback the receiver may do the copy the sender skipped: the
     * process's CPU (both threads) is printed too. */
    printf("%-12s %7zu %9.0f %9.1f   sender+receiver %.1f", zerocopy ? "gen-zerocopy" : "gen-send",
           block, mb / ((double)wall / 1e9), (double)cpu / 1e3 / mb, (double)all / 1e3 / mb);
    if (zerocopy)
        printf("   copied %llu of %llu", (unsigned long long)copied, (unsigned long long)done);
    printf("\n");
    close(fd);
    close(r.fd);
}

int main(int argc, char **argv)
{
    uint64_t mb = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
    size_t blocks[16] = {1024, 4096, 16384, 65536};
    int nblocks = 4;
    if (argc > 2) {
        nblocks = 0;
        for (int i = 2; i < argc && nblocks < 16; i++)
            blocks[nblocks++] = strtoul(argv[i], NULL, 10);
    }
    printf("%llu MB through one loop\nmode         block      MB/s  loop CPU us/MB\n",
           (unsigned long long)mb);
    for (int i = 0; i < nblocks; i++) {
        run(COPY, blocks[i], mb << 20);
        run(DIRECT, blocks[i], mb << 20);
        run(SPLICE, blocks[i], mb << 20);
        if (blocks[i] <= 4 * 1024 * 1024) {
            run(GEN_COPY, blocks[i], mb << 20);
            run(GEN_DIRECT, blocks[i], mb << 20);
            run_send(blocks[i], mb << 20, false);
            run_send(blocks[i], mb << 20, true);
        }
    }
    run(SPLICE, 0, mb << 20);
    return 0;
}
