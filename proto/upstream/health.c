/*
 * health.c: active health checks: per server, a timer that opens a
 * connection every interval, sends "GET uri HTTP/1.0" and reads the status
 * line (type=tcp: the connection accepted is the pass, or with a stream
 * match block, the answer to what it sends); `fall` failures in
 * a row mark the server down for every worker, `rise` passes bring it
 * back.  Transitions are logged.  To a proxy_protocol
 * upstream, the request follows a header that names no client.
 */
#include "proto/upstream/health.h"

#include "proto/http/regex.h"
#include "proto/upstream/health_h2.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A status line longer than this is not one. */
#define STATUS_LINE_MAX 512

struct upstream_health {
    struct proxy_upstream *up;
    corral_loop *loop;
    struct health_probe **probes; /* one per server checked */
    size_t count;
};

/* One server's checks.  It outlives the checker while a probe's
 * connection closes: then `health` is NULL and on_close frees it. */
struct health_probe {
    struct upstream_health *health;
    unsigned server;
    corral_timer *timer;
    corral_conn *conn; /* the probe in flight */
    bool recorded;     /* its result is counted */
    unsigned passes, fails;
    char *request;        /* the PROXY header if any, then the HTTP request */
    struct health_h2 *h2; /* type=http2 and grpc: the probe in flight's session */
    size_t preamble_len;  /* the header's part: sent in the clear, before TLS */
    size_t request_len;
    /* type=udp: the probe in flight's socket (-1: none), its watcher and
     * its timeout */
    int udp_fd;
    corral_io *udp_io;
    corral_timer *udp_timer;
};

bool health_match(const struct proxy_health_conf *conf, unsigned status)
{
    bool any = false;
    for (size_t i = 0; i < sizeof(conf->match) / sizeof(conf->match[0]); i++)
        any = any || conf->match[i] != 0;
    if (!any)
        return status >= 200 && status < 400;
    return status < HEALTH_MATCH_CODES && ((conf->match[status / 64] >> (status % 64)) & 1);
}

/* type=udp: the probe in flight ends. */
static void probe_udp_end(struct health_probe *probe)
{
    if (probe->udp_fd < 0)
        return;
    corral_io_free(probe->udp_io);
    probe->udp_io = NULL;
    close(probe->udp_fd);
    probe->udp_fd = -1;
    if (probe->udp_timer != NULL)
        corral_timer_stop(probe->udp_timer);
}

static void probe_free(struct health_probe *probe)
{
    probe_udp_end(probe);
    if (probe->udp_timer != NULL)
        corral_timer_free(probe->udp_timer);
    health_h2_free(probe->h2);
    free(probe->request);
    free(probe);
}

static void record(struct health_probe *probe, bool passed, const char *why)
{
    if (probe->recorded || probe->health == NULL)
        return;
    probe->recorded = true;
    struct proxy_upstream *up = probe->health->up;
    struct upstream_server *s = &up->servers[probe->server];
    bool down = atomic_load(&s->checked_down);
    if (passed) {
        probe->fails = 0;
        probe->passes++;
        if (down && probe->passes >= up->health.rise) {
            atomic_store(&s->recovered_ms, corral_loop_now(probe->health->loop));
            atomic_store(&s->checked_down, false);
            corral_log(CORRAL_LOG_WARN, "upstream %s: %s is up: %u passed checks", up->name,
                       s->address, probe->passes);
        }
        return;
    }
    probe->passes = 0;
    probe->fails++;
    if (!down && probe->fails >= up->health.fall) {
        atomic_store(&s->checked_down, true);
        corral_log(CORRAL_LOG_ERROR, "upstream %s: %s is down: %u failed checks (%s)", up->name,
                   s->address, probe->fails, why);
    }
}

bool health_server_up(const struct proxy_upstream *up, size_t index, uint64_t now)
{
    if (upstream_server_state(up, index) != PROXY_SERVER_UP)
        return false;
    for (unsigned w = 0; w < up->worker_count; w++)
        if (upstream_server_down(&up->workers[w], (unsigned)index, now))
            return false;
    return true;
}

int health_status_line(const char *data, size_t len, unsigned *status)
{
    const char *eol = memchr(data, '\n', len < STATUS_LINE_MAX ? len : STATUS_LINE_MAX);
    if (eol == NULL)
        return len < STATUS_LINE_MAX ? 0 : -1;
    /* "HTTP/1.x NNN" and a reason or nothing */
    if (eol - data < 12 || memcmp(data, "HTTP/1.", 7) != 0 || data[8] != ' ' ||
        (eol - data > 12 && data[12] != ' ' && data[12] != '\r'))
        return -1;
    unsigned code = 0;
    for (int i = 9; i < 12; i++) {
        if (data[i] < '0' || data[i] > '9')
            return -1;
        code = code * 10 + (unsigned)(data[i] - '0');
    }
    if (code < 100)
        return -1;
    *status = code;
    return 1;
}

int health_expect_copy(struct proxy_upstream *up, const struct proxy_health_conf *conf)
{
    up->health.send = up->health.expect = NULL;
    if (conf->send != NULL && (up->health_send = strdup(conf->send)) == NULL)
        return -ENOMEM;
    if (conf->expect != NULL && (up->health_expect = strdup(conf->expect)) == NULL)
        return -ENOMEM;
    up->health.send = up->health_send;
    up->health.expect = up->health_expect;
    if (conf->expect == NULL || !conf->expect_regex)
        return 0;
    char message[256];
    size_t offset;
    int err = regex_compile(conf->expect, false, &up->health_expect_re, message, sizeof(message),
                            &offset);
    if (err == -EINVAL)
        corral_log(CORRAL_LOG_ERROR, "upstream %s: health check expect \"%s\": %s at %zu", up->name,
                   conf->expect, message, offset);
    return err;
}

void health_expect_free(struct proxy_upstream *up)
{
    free(up->health_send);
    free(up->health_expect);
    if (up->health_expect_re != NULL)
        regex_free(up->health_expect_re);
}

int health_expect_answer(const struct proxy_upstream *up, const char *data, size_t len)
{
    assert(up->health.expect != NULL);
    size_t n = len < HEALTH_EXPECT_MAX ? len : HEALTH_EXPECT_MAX;
    bool found;
    if (up->health_expect_re != NULL) {
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        /* a regex that gives up on these bytes does not pass */
        found = regex_match(up->health_expect_re, data, n, ovector) > 0;
    } else {
        found = memmem(data, n, up->health.expect, strlen(up->health.expect)) != NULL;
    }
    if (found)
        return 1;
    return len < HEALTH_EXPECT_MAX ? 0 : -1;
}

/* What the HTTP/2 session has to send. */
static void probe_h2_flush(struct health_probe *probe, corral_conn *conn)
{
    const uint8_t *out;
    ssize_t n;
    while ((n = health_h2_output(probe->h2, &out)) > 0)
        corral_conn_write(conn, out, (size_t)n);
}

/* type=http2 passes as the status matches; type=grpc with grpc-status 0
 * and a SERVING answer. */
static size_t probe_h2_on_data(struct health_probe *probe, corral_conn *conn, const char *data,
                               size_t len)
{
    struct health_h2_answer answer;
    int rc = health_h2_input(probe->h2, data, len, &answer);
    if (rc == 0) {
        probe_h2_flush(probe, conn);
        return len;
    }
    char why[48];
    if (rc < 0) {
        record(probe, false, "invalid HTTP/2 response");
    } else if (probe->health == NULL) {
        /* the checker stopped: nothing to record */
    } else if (probe->health->up->health.type == PROXY_HEALTH_GRPC) {
        if (answer.status == 200 && answer.grpc_status == 0 && answer.serving == 1) {
            record(probe, true, NULL);
        } else {
            if (answer.status != 200)
                snprintf(why, sizeof(why), "status %u", answer.status);
            else if (answer.grpc_status != 0)
                snprintf(why, sizeof(why), "grpc-status %d", answer.grpc_status);
            else
                snprintf(why, sizeof(why), "not serving (%d)", answer.serving);
            record(probe, false, why);
        }
    } else if (health_match(&probe->health->up->health, answer.status)) {
        record(probe, true, NULL);
    } else {
        snprintf(why, sizeof(why), "status %u", answer.status);
        record(probe, false, why);
    }
    corral_conn_close(conn);
    return len;
}

static size_t probe_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct health_probe *probe = corral_conn_data(conn);
    if (probe->h2 != NULL)
        return probe_h2_on_data(probe, conn, data, len);
    if (probe->health != NULL && probe->health->up->health.type == PROXY_HEALTH_TCP) {
        if (probe->health->up->health.expect == NULL)
            return len; /* passed once sent; closing */
        /* send/expect: the answer is kept (not consumed) until it has
         * what is expected, up to HEALTH_EXPECT_MAX bytes. */
        int rc = health_expect_answer(probe->health->up, data, len);
        if (rc == 0)
            return 0;
        if (rc > 0)
            record(probe, true, NULL);
        else
            record(probe, false, "unexpected response");
        corral_conn_close(conn);
        return len;
    }
    unsigned status = 0;
    int rc = health_status_line(data, len, &status);
    if (rc == 0)
        return 0; /* the status line is not whole yet */
    if (rc < 0) {
        record(probe, false, "invalid response");
    } else if (probe->health != NULL && health_match(&probe->health->up->health, status)) {
        record(probe, true, NULL);
    } else {
        char why[32];
        snprintf(why, sizeof(why), "status %u", status);
        record(probe, false, why);
    }
    corral_conn_close(conn);
    return len;
}

static void probe_on_deadline(corral_conn *conn)
{
    record(corral_conn_data(conn), false, "timeout");
    corral_conn_close(conn);
}

static void probe_on_eof(corral_conn *conn)
{
    struct health_probe *probe = corral_conn_data(conn);
    bool tcp = probe->health != NULL && probe->health->up->health.type == PROXY_HEALTH_TCP;
    record(probe, false,
           tcp ? "closed without the expected response" : "closed without a status line");
    corral_conn_close(conn);
}

static void probe_on_close(corral_conn *conn, int error)
{
    struct health_probe *probe = corral_conn_data(conn);
    record(probe, false, error != 0 ? strerror(-error) : "closed without a status line");
    probe->conn = NULL;
    if (probe->health == NULL)
        probe_free(probe);
}

/* As for a proxied request: the PROXY header in the clear, then TLS if
 * the upstream is reached by https, then the request. */
static void probe_on_open(corral_conn *conn)
{
    struct health_probe *probe = corral_conn_data(conn);
    assert(probe->health != NULL); /* a stopped checker closed its probes */
    struct proxy_upstream *up = probe->health->up;
    int err = upstream_send_preamble(conn, probe->request, probe->preamble_len);
    if (err == 0 && up->health.type == PROXY_HEALTH_TCP) {
        /* A match block's send, after the PROXY header if any. */
        if (probe->request_len > probe->preamble_len)
            corral_conn_write(conn, probe->request + probe->preamble_len,
                              probe->request_len - probe->preamble_len);
        if (up->health.expect != NULL)
            return; /* the answer decides (probe_on_data()) */
        /* Connected (and sent): passed, and closed at once with a FIN,
         * as nginx's stream checks do. */
        record(probe, true, NULL);
        corral_conn_close(conn);
        return;
    }
    if (err == 0 && up->tls != NULL)
        err = tls_client_connect(up->tls, conn, probe->server, false);
    if (err != 0) {
        record(probe, false, strerror(-err));
        corral_conn_close(conn);
        return;
    }
    if (probe->h2 != NULL)
        probe_h2_flush(probe, conn);
    else
        corral_conn_write(conn, probe->request + probe->preamble_len,
                          probe->request_len - probe->preamble_len);
}

static const struct corral_conn_handler probe_handler = {
    .on_open = probe_on_open,
    .on_data = probe_on_data,
    .on_eof = probe_on_eof,
    .on_deadline = probe_on_deadline,
    .on_close = probe_on_close,
};

/* type=udp: an answer, or the ICMP refusal of the datagram sent. */
static void probe_udp_on_io(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    struct health_probe *probe = arg;
    char buf[HEALTH_EXPECT_MAX];
    ssize_t n = recv(probe->udp_fd, buf, sizeof(buf), MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n < 0) {
        record(probe, false, strerror(errno)); /* ECONNREFUSED: port unreachable */
    } else {
        /* One datagram is the whole answer: what it holds (its first
         * HEALTH_EXPECT_MAX bytes) has what is expected or not. */
        const struct proxy_upstream *up = probe->health->up;
        size_t len = (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf);
        bool passed = up->health.expect == NULL || health_expect_answer(up, buf, len) > 0;
        record(probe, passed, passed ? NULL : "unexpected response");
    }
    probe_udp_end(probe);
}

/* type=udp: no answer within the timeout passes without `expect` (no
 * refusal came), and fails with it. */
static void probe_udp_on_timeout(corral_timer *timer, void *arg)
{
    (void)timer;
    struct health_probe *probe = arg;
    bool passed = probe->health->up->health.expect == NULL;
    record(probe, passed, passed ? NULL : "timeout");
    probe_udp_end(probe);
}

/* type=udp: a datagram to the server from a socket of its own. */
static void probe_udp_start(struct health_probe *probe, const struct sockaddr_storage *addr,
                            socklen_t len)
{
    struct upstream_health *health = probe->health;
    int fd = socket(addr->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        record(probe, false, strerror(errno));
        return;
    }
    const char *payload = probe->request + probe->preamble_len;
    size_t payload_len = probe->request_len - probe->preamble_len;
    if (connect(fd, (const struct sockaddr *)addr, len) != 0 ||
        send(fd, payload, payload_len, 0) < 0) {
        record(probe, false, strerror(errno));
        close(fd);
        return;
    }
    int err =
        corral_io_new(health->loop, fd, CORRAL_READABLE, probe_udp_on_io, probe, &probe->udp_io);
    if (err != 0) {
        record(probe, false, strerror(-err));
        close(fd);
        return;
    }
    probe->udp_fd = fd;
    corral_timer_start(probe->udp_timer, health->up->health.timeout_ms);
}

/* Every interval, from the start of one probe to the next, so that a
 * server is found down within interval x fall; a probe still running then
 * (a timeout longer than the interval) skips a turn. */
static void probe_on_timer(corral_timer *timer, void *arg)
{
    struct health_probe *probe = arg;
    struct upstream_health *health = probe->health;
    struct proxy_upstream *up = health->up;
    corral_timer_start(timer, up->health.interval_ms);
    const struct upstream_server *s = &up->servers[probe->server];
    /* A `resolve` slot without an address has nothing to probe; this loop
     * is the one that writes slot addresses, so reading one is safe. */
    if (probe->conn != NULL || probe->udp_fd >= 0 || atomic_load(&s->state) != UPSTREAM_SLOT_ACTIVE)
        return;
    struct sockaddr_storage addr = s->addr;
    if (up->health.port != 0) {
        if (addr.ss_family == AF_INET)
            ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)up->health.port);
        else if (addr.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)up->health.port);
    }
    probe->recorded = false;
    if (up->health.type == PROXY_HEALTH_UDP) {
        probe_udp_start(probe, &addr, s->addrlen);
        return;
    }
    health_h2_free(probe->h2);
    probe->h2 = NULL;
    if ((up->health.type == PROXY_HEALTH_HTTP2 || up->health.type == PROXY_HEALTH_GRPC) &&
        health_h2_new(up->health.type == PROXY_HEALTH_GRPC, up->tls != NULL ? "https" : "http",
                      s->address, up->health.uri,
                      up->health.grpc_service != NULL ? up->health.grpc_service : "",
                      &probe->h2) != 0) {
        record(probe, false, strerror(ENOMEM));
        return;
    }
    int err = corral_connect(health->loop, (const struct sockaddr *)&addr, s->addrlen,
                             &probe_handler, probe, &probe->conn);
    if (err != 0) {
        probe->conn = NULL;
        record(probe, false, strerror(-err));
        return;
    }
    corral_conn_set_deadline(probe->conn, corral_loop_now(health->loop) + up->health.timeout_ms);
}

/* The request, sized from the uri and the address (type=tcp: none, only
 * the header).  A proxy_protocol
 * upstream expects a PROXY header on every connection: the probe's is
 * "PROXY UNKNOWN" (v1) or LOCAL (v2), which says the connection is the
 * proxy's own, as HAProxy's check-send-proxy does. */
static char *probe_request(const struct proxy_upstream *up, const char *host, size_t *preamble_len,
                           size_t *len)
{
    static const char *const fmt = "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: corral-health-check"
                                   "\r\nConnection: close\r\n\r\n";
    char header[PROXY_PROTOCOL_SEND_MAX];
    bool udp = up->health.type == PROXY_HEALTH_UDP;
    ssize_t header_len =
        up->proxy_protocol != 0 && !udp
            ? proxy_protocol_encode(up->proxy_protocol, NULL, NULL, header, sizeof(header))
            : 0;
    bool tcp = up->health.type == PROXY_HEALTH_TCP || udp;
    /* a udp check sends a datagram, some bytes if no match block says */
    const char *send = udp && up->health.send == NULL ? "health check" : up->health.send;
    size_t send_len = tcp && send != NULL ? strlen(send) : 0;
    int n = tcp ? (int)send_len : snprintf(NULL, 0, fmt, up->health.uri, host);
    if (n < 0 || header_len < 0)
        return NULL;
    char *text = malloc((size_t)header_len + (size_t)n + 1);
    if (text == NULL)
        return NULL;
    memcpy(text, header, (size_t)header_len);
    text[header_len] = '\0';
    if (!tcp)
        snprintf(text + header_len, (size_t)n + 1, fmt, up->health.uri, host);
    else if (send_len > 0)
        memcpy(text + header_len, send, send_len + 1);
    *preamble_len = (size_t)header_len;
    *len = (size_t)header_len + (size_t)n;
    return text;
}

int health_start(struct proxy_upstream *up, corral_loop *loop)
{
    if (!up->health.enabled || up->checker != NULL)
        return 0;
    struct upstream_health *health = calloc(1, sizeof(*health));
    if (health == NULL)
        return -ENOMEM;
    health->up = up;
    health->loop = loop;
    health->probes = calloc(up->server_count, sizeof(*health->probes));
    up->checker = health;
    if (health->probes == NULL)
        goto nomem;
    for (size_t i = 0; i < up->server_count; i++) {
        if (up->servers[i].disabled)
            continue;
        struct health_probe *probe = calloc(1, sizeof(*probe));
        if (probe == NULL)
            goto nomem;
        health->probes[health->count++] = probe;
        probe->health = health;
        probe->server = (unsigned)i;
        probe->udp_fd = -1;
        if (up->health.type == PROXY_HEALTH_UDP &&
            corral_timer_new(loop, probe_udp_on_timeout, probe, &probe->udp_timer) != 0)
            goto nomem;
        probe->request =
            probe_request(up, up->servers[i].address, &probe->preamble_len, &probe->request_len);
        if (probe->request == NULL ||
            corral_timer_new(loop, probe_on_timer, probe, &probe->timer) != 0)
            goto nomem;
        corral_timer_start(probe->timer, 0); /* the first check at once */
    }
    return 0;

nomem:
    health_stop(up);
    return -ENOMEM;
}

void health_stop(struct proxy_upstream *up)
{
    struct upstream_health *health = up->checker;
    if (health == NULL)
        return;
    up->checker = NULL;
    for (size_t i = 0; i < health->count; i++) {
        struct health_probe *probe = health->probes[i];
        if (probe->timer != NULL)
            corral_timer_free(probe->timer);
        probe->health = NULL;
        probe_udp_end(probe);
        if (probe->conn != NULL)
            corral_conn_close_no_linger(probe->conn); /* its on_close frees it */
        else
            probe_free(probe);
    }
    free(health->probes);
    free(health);
}
