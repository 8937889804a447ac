/*
 * test_splice.c: corral_conn_splice() between two loopback TCP pairs: the
 * bytes arrive intact (SHA-256) for sizes from 0 B to 100 MB, a slow reader
 * keeps the pipe and the pending output bounded, either side dying mid-way
 * ends the splice, and no pipe or socket is left open; and
 * corral_conn_sendfile() from a file: its bytes after the queued ones, at
 * offsets past 4 GB, a file that shrinks, a stalled destination.
 */
#include "../helpers.h"
#include "internal.h"
#include "pair.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_data_segs_out */
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------------ the peers */

struct sender {
    int fd;
    uint64_t len;
    const char *tail; /* sent after the stream, for after the splice */
    bool shutdown;    /* FIN after the bytes */
    bool reset;       /* RST after the bytes */
    unsigned char sha[32];
    int error; /* the send that failed, when the test cuts the stream */
};

/* Sends all of buf, or records why not. */
static bool send_all(struct sender *s, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(s->fd, buf, len, MSG_NOSIGNAL);
        if (n <= 0) {
            s->error = n == 0 ? EPIPE : errno;
            return false;
        }
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

#if TEST_ASAN
#define RSS_GROWTH_MAX_KB (50 * 1024)
#else
#define RSS_GROWTH_MAX_KB (32 * 1024)
#endif

static void *send_stream(void *arg)
{
    struct sender *s = arg;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    static char chunk[64 * 1024];
    for (uint64_t off = 0; off < s->len;) {
        size_t n = s->len - off < sizeof(chunk) ? (size_t)(s->len - off) : sizeof(chunk);
        pair_fill(chunk, n, off);
        EVP_DigestUpdate(ctx, chunk, n);
        if (!send_all(s, chunk, n))
            break;
        off += n;
    }
    EVP_DigestFinal_ex(ctx, s->sha, NULL);
    EVP_MD_CTX_free(ctx);
    if (s->tail != NULL)
        send_all(s, s->tail, strlen(s->tail));
    if (s->reset) {
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
        close(s->fd);
        s->fd = -1;
    } else if (s->shutdown) {
        shutdown(s->fd, SHUT_WR);
    }
    return NULL;
}

struct receiver {
    int fd;
    uint64_t expect;    /* read this many bytes, then stop */
    int slow_reads;     /* reads with a pause before them */
    uint64_t reset_at;  /* 0, or reset the connection after this many */
    const char *prefix; /* expected before the stream, not hashed */
    uint64_t got;
    bool prefix_ok;
    unsigned char sha[32];
};

static void *receive_stream(void *arg)
{
    struct receiver *r = arg;
    if (r->prefix != NULL) {
        char head[64];
        size_t len = strlen(r->prefix);
        r->prefix_ok = test_recv_all(r->fd, head, len) == len && memcmp(head, r->prefix, len) == 0;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    static char buf[64 * 1024];
    for (int reads = 0; r->got < r->expect; reads++) {
        if (reads < r->slow_reads)
            test_sleep_ms(2); /* slow at first, so that the pipe fills */
        size_t want = r->expect - r->got < sizeof(buf) ? (size_t)(r->expect - r->got) : sizeof(buf);
        if (reads < r->slow_reads && want > 4096)
            want = 4096;
        ssize_t n = recv(r->fd, buf, want, 0);
        if (n <= 0)
            break;
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        r->got += (size_t)n;
        if (r->reset_at > 0 && r->got >= r->reset_at) {
            struct linger linger = {.l_onoff = 1, .l_linger = 0};
            setsockopt(r->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
            close(r->fd);
            r->fd = -1;
            break;
        }
    }
    EVP_DigestFinal_ex(ctx, r->sha, NULL);
    EVP_MD_CTX_free(ctx);
    return NULL;
}

/* ------------------------------------------------------------ the owner */

struct run {
    corral_loop *loop;
    corral_conn *from, *to;
    int from_peer, to_peer;
    bool done;
    uint64_t moved;
    int error;
    int calls;
    size_t max_pending;
    int max_fds;
    long max_rss_kb;
    char after[64]; /* what on_data of `from` got after the splice */
    size_t after_len;
    int from_closes;
};

static void splice_done(corral_conn *from, corral_conn *to, uint64_t moved, int error, void *arg)
{
    struct run *run = arg;
    ck_assert_ptr_eq(from, run->from);
    ck_assert_ptr_eq(to, run->to);
    run->done = true;
    run->moved = moved;
    run->error = error;
    run->calls++;
}

static size_t from_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct run *run = corral_conn_data(conn);
    size_t room = sizeof(run->after) - run->after_len;
    size_t n = len < room ? len : room;
    memcpy(run->after + run->after_len, data, n);
    run->after_len += n;
    return len;
}

static void from_on_close(corral_conn *conn, int error)
{
    (void)error;
    struct run *run = corral_conn_data(conn);
    run->from_closes++;
    run->from = NULL; /* freed when this returns */
}

static void to_on_close(corral_conn *conn, int error)
{
    (void)error;
    struct run *run = corral_conn_data(conn);
    run->to = NULL;
}

static const struct corral_conn_handler from_handler = {
    .on_data = from_on_data,
    .on_eof = NULL,
    .on_close = from_on_close,
};
static const struct corral_conn_handler to_handler = {.on_close = to_on_close};

/* The process's resident memory in KB, read without the heap: under ASan a
 * freed block stays resident in the quarantine, so a read through malloc on
 * every loop iteration would itself grow what it measures. */
static long rss_kb(void)
{
    char text[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ck_assert_int_ne(fd, -1);
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    ck_assert_int_gt(n, 0);
    text[n] = '\0';
    long size, resident;
    ck_assert_int_eq(sscanf(text, "%ld %ld", &size, &resident), 2);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static bool splice_over(void *arg)
{
    struct run *run = arg;
    size_t pending = run->to != NULL && run->to->state == CORRAL__CONN_OPEN
                         ? corral_conn_pending_output(run->to)
                         : 0;
    if (pending > run->max_pending)
        run->max_pending = pending;
    int fds = test_fd_count();
    if (fds > run->max_fds)
        run->max_fds = fds;
    long rss = rss_kb();
    if (rss > run->max_rss_kb)
        run->max_rss_kb = rss;
    return run->done;
}

/* The two pairs; `to`'s peer with a receive buffer of to_rcvbuf bytes
 * (pair_open_small()) when it is not 0. */
static void run_open_small(struct run *run, int to_rcvbuf)
{
    memset(run, 0, sizeof(*run));
    ck_assert_int_eq(corral_loop_new(&run->loop), 0);
    run->from = pair_open(run->loop, &from_handler, run, &run->from_peer);
    run->to = pair_open_small(run->loop, &to_handler, run, &run->to_peer, to_rcvbuf);
}

static void run_open(struct run *run)
{
    run_open_small(run, 0);
}

static void run_close(struct run *run)
{
    corral_loop_free(run->loop);
    if (run->from_peer >= 0)
        close(run->from_peer);
    if (run->to_peer >= 0)
        close(run->to_peer);
}

/* Splices `len` bytes and checks they arrive whole, then that the loop and
 * the process hold no more descriptors than before. */
static void check_splice(uint64_t len, int slow_reads)
{
    /* OpenSSL's first use may open files of its own: not ours to count. */
    unsigned char ignored[32];
    EVP_Digest("", 0, ignored, NULL, EVP_sha256(), NULL);
    int fds_before = test_fd_count();
    struct run run;
    run_open(&run);
    int fds_open = test_fd_count();
    long rss_open = rss_kb();
    struct sender s = {.fd = run.from_peer, .len = len};
    struct receiver r = {.fd = run.to_peer, .expect = len, .slow_reads = slow_reads};
    pthread_t st, rt;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, len, splice_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 120000);
    pthread_join(st, NULL);
    pthread_join(rt, NULL);
    ck_assert_int_eq(s.error, 0);
    ck_assert_int_eq(run.calls, 1);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, len);
    ck_assert_uint_eq(r.got, len);
    ck_assert(memcmp(r.sha, s.sha, sizeof(s.sha)) == 0);
    /* One pipe at most (two descriptors), and nothing else. */
    ck_assert_int_le(run.max_fds, fds_open + 2);
    ck_assert_uint_le(run.max_pending, 256 * 1024); /* the pipe, within the watermark */
    /* The bytes never pass through this process: its memory grows by the
     * two threads' stacks and buffers, not with `len`.  Under ASan those
     * threads also bring shadow memory and fake stacks (34-42 MB seen), so
     * there the bound is 50 MB: still half of what a copy of the 100 MB
     * case through user space would add. */
    ck_assert_msg(run.max_rss_kb - rss_open < RSS_GROWTH_MAX_KB, "RSS grew by %ld KB",
                  run.max_rss_kb - rss_open);
    /* The pipe went back to the pool: a second splice reuses it. */
    ck_assert_uint_eq(run.loop->pipe_count, 1);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}

START_TEST(splice_zero_bytes)
{
    check_splice(0, 0);
}
END_TEST

START_TEST(splice_one_byte)
{
    check_splice(1, 0);
}
END_TEST

START_TEST(splice_64k_plus_one)
{
    check_splice(64 * 1024 + 1, 0);
}
END_TEST

START_TEST(splice_one_megabyte)
{
    check_splice(1024 * 1024, 0);
}
END_TEST

START_TEST(splice_100_megabytes)
{
    check_splice(100 * 1024 * 1024, 0);
}
END_TEST

/* A slow reader: the pipe fills, `from` stalls, pending output stays
 * within the pipe (256 KiB where allowed) plus nothing queued. */
START_TEST(a_slow_reader_keeps_the_splice_bounded)
{
    check_splice(8 * 1024 * 1024, 300);
}
END_TEST

/* Output queued on `to` before the splice goes first; bytes after the
 * splice's `max` are read from `from` as usual once it is over. */
START_TEST(queued_output_goes_first_and_reading_resumes_after)
{
    struct run run;
    run_open(&run);
    uint64_t len = 300 * 1000;
    struct sender s = {.fd = run.from_peer, .len = len, .tail = "after"};
    struct receiver r = {.fd = run.to_peer, .expect = len, .prefix = "HEAD"};
    corral_conn_write(run.to, "HEAD", 4);
    pthread_t st, rt;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, len, splice_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 30000);
    pthread_join(st, NULL);
    pthread_join(rt, NULL);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, len);
    ck_assert(r.prefix_ok);
    ck_assert(memcmp(r.sha, s.sha, sizeof(s.sha)) == 0);
    uint64_t deadline = test_now_ms() + 5000;
    while (run.after_len < 5 && test_now_ms() < deadline)
        ck_assert_int_eq(corral__loop_run_once(run.loop, 50), 0);
    ck_assert_uint_eq(run.after_len, 5);
    ck_assert(memcmp(run.after, "after", 5) == 0);
    run_close(&run);
}
END_TEST

/* `from` ends its stream before `max`: the splice ends without error,
 * with what moved, and the end of stream reaches the owner after. */
START_TEST(an_early_end_of_stream_ends_the_splice)
{
    int fds_before = test_fd_count();
    struct run run;
    run_open(&run);
    uint64_t len = 200 * 1000;
    struct sender s = {.fd = run.from_peer, .len = len, .shutdown = true};
    struct receiver r = {.fd = run.to_peer, .expect = len};
    pthread_t st, rt;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, UINT64_MAX, splice_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 30000);
    pthread_join(st, NULL);
    pthread_join(rt, NULL);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, len);
    ck_assert(memcmp(r.sha, s.sha, sizeof(s.sha)) == 0);
    /* No on_eof handler: the default closes `from` once the EOF is read. */
    uint64_t deadline = test_now_ms() + 5000;
    while (run.from_closes == 0 && test_now_ms() < deadline)
        ck_assert_int_eq(corral__loop_run_once(run.loop, 50), 0);
    ck_assert_int_eq(run.from_closes, 1);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}
END_TEST

/* Half-closing `from` (its sending side) leaves the splice that reads
 * from it alone, as a proxy half-closes one side of a pair while bytes
 * still flow from it. */
START_TEST(half_closing_the_source_keeps_the_splice)
{
    struct run run;
    run_open(&run);
    uint64_t len = 300 * 1000;
    struct sender s = {.fd = run.from_peer, .len = len, .shutdown = true};
    struct receiver r = {.fd = run.to_peer, .expect = len};
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, UINT64_MAX, splice_done, &run), 0);
    corral_conn_shutdown(run.from);
    pthread_t st, rt;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    pair_run_until(run.loop, splice_over, &run, 30000);
    pthread_join(st, NULL);
    pthread_join(rt, NULL);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, len);
    ck_assert(memcmp(r.sha, s.sha, sizeof(s.sha)) == 0);
    /* The FIN went out: the peer of `from` reads the end. */
    char byte;
    ck_assert_int_eq(recv(run.from_peer, &byte, 1, 0), 0);

    run_close(&run);
}
END_TEST

/* `from`'s peer resets mid-splice: the splice ends with the error and
 * `from` closes; the pipe, with bytes or not, is not leaked. */
START_TEST(a_source_that_dies_mid_splice_ends_it)
{
    int fds_before = test_fd_count();
    struct run run;
    run_open(&run);
    uint64_t len = 3 * 1000 * 1000;
    struct sender s = {.fd = run.from_peer, .len = len, .reset = true};
    run.from_peer = -1; /* the sender closes it */
    struct receiver r = {.fd = run.to_peer, .expect = 10 * 1000 * 1000, .slow_reads = 50};
    pthread_t st, rt;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, 10 * 1000 * 1000, splice_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 30000);
    pthread_join(st, NULL);
    ck_assert_int_eq(run.calls, 1);
    ck_assert_msg(run.error == -ECONNRESET || run.error == 0, "error %d", run.error);
    ck_assert_uint_le(run.moved, len);
    /* The owner resets `to`, as a proxy does for a cut-off body. */
    corral_conn_abort(run.to, -ECONNRESET);
    pthread_join(rt, NULL);
    ck_assert_uint_le(r.got, run.moved); /* the reset drops what it had not read */
    ck_assert_int_eq(corral__loop_run_once(run.loop, 0), 0);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}
END_TEST

/* `to`'s peer resets mid-splice: the splice ends with the send error. */
START_TEST(a_destination_that_dies_mid_splice_ends_it)
{
    int fds_before = test_fd_count();
    struct run run;
    run_open(&run);
    uint64_t len = 20 * 1000 * 1000;
    struct sender s = {.fd = run.from_peer, .len = len};
    struct receiver r = {.fd = run.to_peer, .expect = len, .reset_at = 100 * 1000};
    run.to_peer = -1; /* the receiver closes it */
    int small = 64 * 1024;
    setsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    pthread_t st, rt;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, len, splice_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 30000);
    pthread_join(rt, NULL);
    ck_assert_int_eq(run.calls, 1);
    ck_assert_msg(run.error == -ECONNRESET || run.error == -EPIPE, "error %d", run.error);
    ck_assert_uint_lt(run.moved, len);
    /* The sender is stuck on a full socket: closing `from` frees it. */
    corral_conn_abort(run.from, -ECONNABORTED);
    ck_assert_int_eq(corral__loop_run_once(run.loop, 0), 0);
    pthread_join(st, NULL);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}
END_TEST

/* The owner aborts `to` mid-splice: the pipe, full of bytes, is closed. */
START_TEST(aborting_the_destination_releases_the_pipe)
{
    int fds_before = test_fd_count();
    struct run run;
    int small = 64 * 1024;
    run_open_small(&run, small);
    struct sender s = {.fd = run.from_peer, .len = 8 * 1000 * 1000};
    setsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    setsockopt(corral_conn_fd(run.to), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    pthread_t st;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, s.len, splice_done, &run), 0);
    /* Nobody reads `to`: run until the pipe holds bytes. */
    uint64_t deadline = test_now_ms() + 10000;
    while (corral_conn_pending_output(run.to) == 0 && test_now_ms() < deadline)
        ck_assert_int_eq(corral__loop_run_once(run.loop, 50), 0);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(corral__loop_run_once(run.loop, 10), 0);
    ck_assert_uint_gt(corral_conn_pending_output(run.to), 0);
    corral_conn_abort(run.to, -ECONNRESET);
    pair_run_until(run.loop, splice_over, &run, 5000);
    ck_assert_int_eq(run.error, -ECONNRESET);
    ck_assert_uint_eq(run.loop->pipe_count, 0); /* not pooled: it held bytes */
    corral_conn_abort(run.from, -ECONNABORTED);
    ck_assert_int_eq(corral__loop_run_once(run.loop, 0), 0);
    pthread_join(st, NULL);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}
END_TEST

/* The pipe's bytes count toward `to`'s write timeout: a reader that stops
 * ends the splice with -ETIMEDOUT. */
START_TEST(a_stalled_destination_times_out)
{
    int fds_before = test_fd_count();
    struct run run;
    int small = 64 * 1024;
    run_open_small(&run, small);
    struct sender s = {.fd = run.from_peer, .len = 16 * 1000 * 1000};
    setsockopt(corral_conn_fd(run.to), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    corral_conn_set_timeouts(run.to, 0, 300);
    pthread_t st;
    ck_assert_int_eq(pthread_create(&st, NULL, send_stream, &s), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, s.len, splice_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 10000);
    ck_assert_int_eq(run.error, -ETIMEDOUT);
    ck_assert_uint_lt(run.moved, s.len);
    corral_conn_abort(run.from, -ECONNABORTED); /* frees the sender */
    ck_assert_int_eq(corral__loop_run_once(run.loop, 0), 0);
    pthread_join(st, NULL);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}
END_TEST

/* `from`'s read timeout applies while the splice waits for its bytes. */
START_TEST(a_silent_source_times_out)
{
    struct run run;
    run_open(&run);
    corral_conn_set_timeouts(run.from, 300, 0);
    test_send_all(run.from_peer, "abc", 3);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, 1000, splice_done, &run), 0);
    uint64_t start = test_now_ms();
    pair_run_until(run.loop, splice_over, &run, 10000);
    ck_assert_int_eq(run.error, -ETIMEDOUT);
    ck_assert_uint_eq(run.moved, 3);
    ck_assert_uint_ge(test_now_ms() - start, 250);
    char got[3];
    ck_assert_uint_eq(test_recv_all(run.to_peer, got, 3), 3);
    ck_assert(memcmp(got, "abc", 3) == 0);
    run_close(&run);
}
END_TEST

static void use_layered(corral_conn *conn)
{
    static struct corral_transport layered;
    layered = corral_plain_transport;
    layered.name = "layered";
    layered.layered = true;
    corral_conn_set_transport(conn, &layered, NULL);
}

START_TEST(refused_for_layered_transports_and_busy_connections)
{
    struct run run;
    run_open(&run);
    ck_assert_int_eq(corral_conn_splice(run.from, run.from, 10, splice_done, &run), -EBUSY);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, 10, splice_done, &run), 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, 10, splice_done, &run), -EBUSY);
    corral_conn_abort(run.from, 0);
    ck_assert_int_eq(corral_conn_splice(run.from, run.to, 10, splice_done, &run), -EPIPE);
    pair_run_until(run.loop, splice_over, &run, 5000);
    ck_assert_int_eq(run.error, -ECANCELED);
    use_layered(run.to);
    struct run other;
    run_open(&other);
    ck_assert_int_eq(corral_conn_splice(other.from, run.to, 10, splice_done, &run), -EOPNOTSUPP);
    run_close(&other);
    run_close(&run);
}
END_TEST

/* Started from on_data that leaves input unconsumed: ends with -EBUSY,
 * having moved nothing, and the input is delivered again after. */
static size_t splice_but_keep(corral_conn *conn, const char *data, size_t len)
{
    struct run *run = corral_conn_data(conn);
    (void)data;
    if (run->calls == 0 && !run->from->splicing_from)
        ck_assert_int_eq(corral_conn_splice(run->from, run->to, 1000, splice_done, run), 0);
    return run->calls == 0 ? 0 : len;
}

static const struct corral_conn_handler keep_handler = {.on_data = splice_but_keep};

START_TEST(input_left_unconsumed_ends_the_splice_with_ebusy)
{
    struct run run;
    memset(&run, 0, sizeof(run));
    ck_assert_int_eq(corral_loop_new(&run.loop), 0);
    run.from = pair_open(run.loop, &keep_handler, &run, &run.from_peer);
    run.to = pair_open(run.loop, &to_handler, &run, &run.to_peer);
    test_send_all(run.from_peer, "0123456789", 10);
    pair_run_until(run.loop, splice_over, &run, 5000);
    ck_assert_int_eq(run.error, -EBUSY);
    ck_assert_uint_eq(run.moved, 0);
    run_close(&run);
}
END_TEST

/* ------------------------------------------------------------- sendfile */

static void file_done(corral_conn *from, corral_conn *to, uint64_t moved, int error, void *arg)
{
    struct run *run = arg;
    ck_assert_ptr_null(from);
    ck_assert_ptr_eq(to, run->to);
    run->done = true;
    run->moved = moved;
    run->error = error;
    run->calls++;
}

/* A file of `len` bytes of the test pattern, unlinked: its descriptor. */
static int pattern_file(uint64_t len)
{
    char path[] = "/tmp/corral-sendfile-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    static char buf[64 * 1024];
    for (uint64_t off = 0; off < len;) {
        size_t n = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
        pair_fill(buf, n, off);
        ck_assert_int_eq(pwrite(fd, buf, n, (off_t)off), (ssize_t)n);
        off += n;
    }
    return fd;
}

static void sha_of_pattern(uint64_t offset, uint64_t len, unsigned char *out)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    static char buf[64 * 1024];
    for (uint64_t done = 0; done < len;) {
        size_t n = len - done < sizeof(buf) ? (size_t)(len - done) : sizeof(buf);
        pair_fill(buf, n, offset + done);
        EVP_DigestUpdate(ctx, buf, n);
        done += n;
    }
    EVP_DigestFinal_ex(ctx, out, NULL);
    EVP_MD_CTX_free(ctx);
}

START_TEST(sendfile_sends_a_part_of_a_file_after_queued_output)
{
    int fds_before = test_fd_count();
    struct run run;
    run_open(&run);
    int fd = pattern_file(3 << 20);
    uint64_t offset = 1000, len = (2 << 20) + 1;
    /* First, as OpenSSL's first digest reads its config file: not in the
     * receiver's thread while the run counts descriptors. */
    unsigned char want[32];
    sha_of_pattern(offset, len, want);
    int fds_open = test_fd_count();
    struct receiver r = {.fd = run.to_peer, .expect = len, .prefix = "HEAD", .slow_reads = 50};
    corral_conn_write(run.to, "HEAD", 4);
    pthread_t rt;
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, offset, len, file_done, &run), 0);
    ck_assert_int_eq(run.calls, 0); /* later, from the loop */
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, 0, 1, file_done, &run), -EBUSY);
    pair_run_until(run.loop, splice_over, &run, 30000);
    pthread_join(rt, NULL);
    ck_assert_int_eq(run.calls, 1);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, len);
    ck_assert(r.prefix_ok);
    ck_assert_uint_eq(r.got, len);
    ck_assert(memcmp(r.sha, want, sizeof(want)) == 0);
    ck_assert_int_le(run.max_fds, fds_open); /* no pipe */
    close(fd);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}
END_TEST

/* Data segments `fd` has sent so far (TCP_INFO). */
static uint32_t data_segments_out(int fd)
{
    struct tcp_info info;
    socklen_t len = sizeof(info);
    memset(&info, 0, sizeof(info));
    ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
    return info.tcpi_data_segs_out;
}

/* A queued head and a short file leave in one segment, as nginx's
 * tcp_nopush sends them, not the head alone ahead of the file. */
START_TEST(sendfile_takes_the_queued_head_along)
{
    struct run run;
    run_open(&run);
    int fd = pattern_file(1000);
    uint32_t before = data_segments_out(corral_conn_fd(run.to));
    corral_conn_write(run.to, "HEAD", 4);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, 0, 1000, file_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 30000);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, 1000);
    ck_assert_uint_eq(data_segments_out(corral_conn_fd(run.to)) - before, 1);
    char got[1004];
    size_t have = 0;
    while (have < sizeof(got)) {
        ssize_t n = recv(run.to_peer, got + have, sizeof(got) - have, 0);
        ck_assert_int_gt(n, 0);
        have += (size_t)n;
    }
    ck_assert(memcmp(got, "HEAD", 4) == 0);
    char want[1000];
    pair_fill(want, sizeof(want), 0);
    ck_assert(memcmp(got + 4, want, sizeof(want)) == 0);
    close(fd);
    run_close(&run);
}
END_TEST

/* More than a wakeup's rounds to a fast reader: the send yields and goes
 * on by itself, with no event from the socket. */
START_TEST(sendfile_yields_and_goes_on)
{
    struct run run;
    run_open(&run);
    char path[] = "/tmp/corral-sendfile-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    uint64_t len = 64ull << 20;
    ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
    struct receiver r = {.fd = run.to_peer, .expect = len};
    pthread_t rt;
    ck_assert_int_eq(pthread_create(&rt, NULL, receive_stream, &r), 0);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, 0, len, file_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 30000);
    pthread_join(rt, NULL);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, len);
    ck_assert_uint_eq(r.got, len);
    close(fd);
    run_close(&run);
}
END_TEST

START_TEST(sendfile_reads_past_4gb)
{
    struct run run;
    run_open(&run);
    char path[] = "/tmp/corral-sendfile-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    const uint64_t at = (4ull << 30) + 100;
    ck_assert_int_eq(ftruncate(fd, (off_t)(5ull << 30)), 0);
    ck_assert_int_eq(pwrite(fd, "past-4GB", 8, (off_t)at), 8);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, at, 8, file_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 10000);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, 8);
    char got[8];
    ck_assert_uint_eq(test_recv_all(run.to_peer, got, 8), 8);
    ck_assert(memcmp(got, "past-4GB", 8) == 0);
    close(fd);
    run_close(&run);
}
END_TEST

/* The file ends before `len`: no error, what was sent, and the
 * connection stays open for its owner to decide. */
START_TEST(sendfile_of_a_file_that_shrank_ends_short)
{
    struct run run;
    run_open(&run);
    int fd = pattern_file(100 * 1000);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, 0, 300 * 1000, file_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 10000);
    ck_assert_int_eq(run.error, 0);
    ck_assert_uint_eq(run.moved, 100 * 1000);
    ck_assert_ptr_nonnull(run.to);
    ck_assert_int_eq(run.to->state, CORRAL__CONN_OPEN);
    close(fd);
    run_close(&run);
}
END_TEST

START_TEST(sendfile_to_a_stalled_destination_times_out)
{
    int fds_before = test_fd_count();
    struct run run;
    int small = 64 * 1024;
    run_open_small(&run, small);
    int fd = pattern_file(16 << 20);
    setsockopt(corral_conn_fd(run.to), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    corral_conn_set_timeouts(run.to, 0, 300);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, 0, 16 << 20, file_done, &run), 0);
    pair_run_until(run.loop, splice_over, &run, 10000);
    ck_assert_int_eq(run.error, -ETIMEDOUT);
    ck_assert_uint_lt(run.moved, 16 << 20);
    /* what was left counted as pending output meanwhile */
    ck_assert_uint_gt(run.max_pending, 0);
    close(fd);
    run_close(&run);
    ck_assert_int_eq(test_fd_count(), fds_before);
}
END_TEST

START_TEST(sendfile_refused_for_layered_transports)
{
    struct run run;
    run_open(&run);
    int fd = pattern_file(10);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, UINT64_MAX - 1, 10, file_done, &run),
                     -EINVAL);
    use_layered(run.to);
    ck_assert_int_eq(corral_conn_sendfile(run.to, fd, 0, 10, file_done, &run), -EOPNOTSUPP);
    close(fd);
    run_close(&run);
}
END_TEST

Suite *test_suite(void)
{
    signal(SIGPIPE, SIG_IGN); /* see corral_conn_splice(); the cases inherit it */
    Suite *suite = suite_create("core/splice");
    TCase *tc = tcase_create("splice");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, splice_zero_bytes);
    tcase_add_test(tc, splice_one_byte);
    tcase_add_test(tc, splice_64k_plus_one);
    tcase_add_test(tc, splice_one_megabyte);
    tcase_add_test(tc, splice_100_megabytes);
    tcase_add_test(tc, a_slow_reader_keeps_the_splice_bounded);
    tcase_add_test(tc, queued_output_goes_first_and_reading_resumes_after);
    tcase_add_test(tc, an_early_end_of_stream_ends_the_splice);
    tcase_add_test(tc, half_closing_the_source_keeps_the_splice);
    tcase_add_test(tc, a_source_that_dies_mid_splice_ends_it);
    tcase_add_test(tc, a_destination_that_dies_mid_splice_ends_it);
    tcase_add_test(tc, aborting_the_destination_releases_the_pipe);
    tcase_add_test(tc, a_stalled_destination_times_out);
    tcase_add_test(tc, a_silent_source_times_out);
    tcase_add_test(tc, refused_for_layered_transports_and_busy_connections);
    tcase_add_test(tc, input_left_unconsumed_ends_the_splice_with_ebusy);
    tcase_add_test(tc, sendfile_sends_a_part_of_a_file_after_queued_output);
    tcase_add_test(tc, sendfile_yields_and_goes_on);
    tcase_add_test(tc, sendfile_takes_the_queued_head_along);
    tcase_add_test(tc, sendfile_reads_past_4gb);
    tcase_add_test(tc, sendfile_of_a_file_that_shrank_ends_short);
    tcase_add_test(tc, sendfile_to_a_stalled_destination_times_out);
    tcase_add_test(tc, sendfile_refused_for_layered_transports);
    suite_add_tcase(suite, tc);
    return suite;
}
