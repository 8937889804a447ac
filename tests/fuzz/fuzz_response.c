/*
 * fuzz_response.c: libFuzzer over the response path, with the fuzzer as
 * the upstream.  A real corral server runs in-process with a proxy_pass
 * location whose upstream is a unix socket this file listens on; each input
 * picks a client request and scripts what the backend answers, in pieces,
 * with pauses, closes and resets.  This thread plays both the client and the
 * backend with non-blocking sockets and poll, so nothing sleeps.
 *
 * Input format:
 *   byte 0     the client's request(s): requests[byte % 12], below
 *   the rest   the backend's script: bytes written to the current upstream
 *              connection, in which "~~" and one of these letters is a
 *              command ("~~" before any other byte is data):
 *     ~~n  wait for the next request head the proxy sends (on a new or a
 *          pooled connection); what follows goes to that connection
 *     ~~a  wait for a new upstream connection; what follows goes to it
 *          before its request is read
 *     ~~p  pause: wait until the proxy has read what was written, so that
 *          what follows arrives in a later read
 *     ~~c  close the current connection (FIN)
 *     ~~r  reset it: SO_LINGER 0, then close (a unix socket reports a reset
 *          to its peer only when bytes it sent are still unread; else the
 *          proxy sees the end of the stream, as for ~~c)
 *     ~~h  shut its sending side, reading on
 *     ~~w  wait for the proxy to act on its own (its 25 ms read timeout)
 *     ~~k  the client resets its connection
 *   Bytes with no current connection first wait as ~~n does.  When the
 *   script ends, the backend shuts the sending side of its connections and
 *   reads until the proxy closes them; the client reads until the server
 *   closes it.  A client that is never closed is a wedged server: abort.
 * With FUZZ_RESPONSE_TRACE set in the environment, what the client and the
 * backend read is printed, to see what a reproducer does.  What the client
 * gets must be valid HTTP with no response more than it asked for (see
 * check_bytes); FUZZ_RESPONSE_LAX set turns that check off.
 */
#include "proxy_pair.h"

#include "proto/http1/http1.h"
#include "proto/upstream/proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <llhttp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define READ_TIMEOUT_MS 25
#define QUIET_US        500
#define WEDGED_MS       10000 /* far beyond any timeout the server has here */
#define MAX_UPSTREAMS   16

/* How often the harness's own loops turn depends on timing: counted as
 * coverage, it would make inputs look new that are not.  Only the script's
 * parsing stays instrumented. */
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))
#define MAX_PENDING 64

/* ------------------------------------------------------------- the server */

static char front_path[108], back_path[108];
static bool trace;       /* FUZZ_RESPONSE_TRACE set: print what both sides read */
static bool strict;      /* check what the client gets (unless FUZZ_RESPONSE_LAX) */
static int back_fd = -1; /* the fake backend's listening socket */

static struct http_header set_headers[] = {{{"X-Set", 5}, {"1", 1}}};
static struct http_str hide_headers[] = {{"X-Hidden", 8}};
static struct proxy_location proxy = {.conf = {.connect_timeout_ms = 2000,
                                               .read_timeout_ms = READ_TIMEOUT_MS,
                                               .send_timeout_ms = 2000},
                                      .set_headers = set_headers,
                                      .set_header_count = 1,
                                      .hide_headers = hide_headers,
                                      .hide_header_count = 1};
static struct http_location front_locations[] = {{.path = "/p",
                                                  .path_len = 2,
                                                  .exact = false,
                                                  .handler = &proxy_handler,
                                                  .handler_data = &proxy}};
static const char *const names[] = {"example.com"};
static struct http_vhost front_vhost = {
    .names = names, .name_count = 1, .locations = front_locations, .location_count = 1};
static struct http_site front_site = {.vhosts = &front_vhost, .vhost_count = 1};

static void remove_sockets(void)
{
    unlink(front_path);
    unlink(back_path);
}

static int unix_address(struct sockaddr_un *addr, const char *path)
{
    *addr = (struct sockaddr_un){.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof(addr->sun_path))
        return -ENAMETOOLONG;
    memcpy(addr->sun_path, path, len + 1);
    return 0;
}

static void start_server(void)
{
    signal(SIGPIPE, SIG_IGN);
    trace = getenv("FUZZ_RESPONSE_TRACE") != NULL;
    strict = getenv("FUZZ_RESPONSE_LAX") == NULL;
    snprintf(front_path, sizeof(front_path), "/tmp/corral-fuzz-%d-rfront.sock", (int)getpid());
    snprintf(back_path, sizeof(back_path), "/tmp/corral-fuzz-%d-rback.sock", (int)getpid());
    remove_sockets();
    atexit(remove_sockets); /* the server itself runs until the process ends */
    corral_set_log_level(CORRAL_LOG_ERROR);

    struct sockaddr_un addr;
    back_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (back_fd == -1 || unix_address(&addr, back_path) != 0 ||
        bind(back_fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(back_fd, 64) != 0)
        abort();

    struct http_limits limits = HTTP_LIMITS_DEFAULT;
    limits.header_timeout_ms = limits.body_timeout_ms = 2000;
    front_vhost.limits = limits;
    corral_server *srv = proxy_pair_server(front_path, back_path, &front_site, &proxy.upstream);
    if (corral_server_start(srv) != 0)
        abort();
}

/* ---------------------------------------------------------- the requests */

struct request {
    const char *sent;     /* at once */
    const char *deferred; /* once the client hears back, or the server is silent */
    const char *kinds;    /* a letter per request: H for HEAD, R for the others */
};

#define HOST "Host: example.com\r\n"
static const struct request requests[12] = {
    {"GET /p/a HTTP/1.1\r\n" HOST "\r\n", NULL, "R"},
    {"HEAD /p/a HTTP/1.1\r\n" HOST "\r\n", NULL, "H"},
    {"POST /p/form HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello", NULL, "R"},
    {"POST /p/up HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     NULL, "R"},
    {"GET /p/a HTTP/1.1\r\n" HOST "Connection: close\r\n\r\n", NULL, "R"},
    {"GET /p/old HTTP/1.0\r\n" HOST "\r\n", NULL, "R"},
    {"GET /p/ws HTTP/1.1\r\n" HOST "Connection: Upgrade\r\nUpgrade: websocket\r\n"
     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
     "\x81\x05hello", "R"},
    {"POST /p/form HTTP/1.1\r\n" HOST "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n", "hello",
     "R"},
    {"GET /p/1 HTTP/1.1\r\n" HOST "\r\nGET /p/2 HTTP/1.1\r\n" HOST "\r\n", NULL, "RR"},
    {"HEAD /p/1 HTTP/1.1\r\n" HOST "\r\nGET /p/2 HTTP/1.1\r\n" HOST "\r\n", NULL, "HR"},
    {"POST /p/1 HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello"
     "GET /p/2 HTTP/1.1\r\n" HOST "\r\n",
     NULL, "RR"},
    {"POST /p/1 HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
     "GET /p/2 HTTP/1.0\r\n" HOST "Connection: keep-alive\r\n\r\n",
     NULL, "RR"},
};

/* ------------------------------------------------ what the client gets */

/* Unless FUZZ_RESPONSE_LAX is set, what the client receives is checked too:
 * it must parse as strict HTTP/1.1 with statuses in 100-599, and hold no
 * more final responses than there were requests (a response the backend
 * slipped in after a complete one, reaching a later exchange, would be
 * one).  A response cut short is not checked: the proxy may abort. */

struct client_check {
    llhttp_t parser;
    const char *kinds;
    size_t answered; /* final responses */
    bool tunnel;     /* after a 101: not HTTP any more */
};

static void check_failed(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void check_failed(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz_response: the client got ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

NO_COVERAGE static int check_on_headers_complete(llhttp_t *parser)
{
    struct client_check *check = parser->data;
    unsigned status = parser->status_code;
    if (status < 100 || status > 599)
        check_failed("status %u", status);
    if (status < 200)
        return 0;
    if (check->answered >= strlen(check->kinds))
        check_failed("more responses than the %zu requests", strlen(check->kinds));
    return check->kinds[check->answered] == 'H' ? 1 : 0;
}

NO_COVERAGE static int check_on_message_complete(llhttp_t *parser)
{
    struct client_check *check = parser->data;
    if (parser->status_code >= 200)
        check->answered++;
    return 0;
}

static const llhttp_settings_t check_settings = {
    .on_headers_complete = check_on_headers_complete,
    .on_message_complete = check_on_message_complete,
};

static void check_init(struct client_check *check, const char *kinds)
{
    llhttp_init(&check->parser, HTTP_RESPONSE, &check_settings);
    check->parser.data = check;
    check->kinds = kinds;
    check->answered = 0;
    check->tunnel = false;
}

NO_COVERAGE static void check_bytes(struct client_check *check, const char *data, size_t len)
{
    if (check->tunnel)
        return;
    llhttp_errno_t err = llhttp_execute(&check->parser, data, len);
    if (err == HPE_PAUSED_UPGRADE)
        check->tunnel = true;
    else if (err != HPE_OK)
        check_failed("an invalid response: %s (%s)", llhttp_errno_name(err),
                     llhttp_get_error_reason(&check->parser));
}

/* ------------------------------------------------------------ one input */

/* Where a connection's request stream is: requests are counted as their
 * heads complete, and their bodies skipped by their framing. */
enum stream_state { IN_HEAD, IN_BODY, IN_CHUNK_SIZE, IN_CHUNK_DATA, IN_CHUNK_END, IN_TRAILER };

struct upstream {
    int fd; /* -1: closed */
    enum stream_state state;
    char head[4096]; /* the head's first bytes, for its framing headers */
    size_t head_len, line_len;
    uint32_t last4;
    uint64_t remaining;
};

struct run {
    struct client_check check;
    int client; /* -1 once reset */
    bool client_eof, client_shut;
    const char *deferred;
    unsigned events; /* client bytes or end, upstream ends: for ~~w */
    struct upstream ups[MAX_UPSTREAMS];
    size_t up_count;
    int pending[MAX_PENDING]; /* connections with a request head not yet answered */
    size_t pending_first, pending_count;
    int current;            /* the connection written to, or -1 */
    bool closing;           /* the script is over: new connections are closed at once */
    uint64_t last_activity; /* now_us() */
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

NO_COVERAGE static bool find_header(const char *head, size_t len, const char *name,
                                    const char **value)
{
    size_t name_len = strlen(name);
    for (const char *p = head, *end = head + len; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            return false;
        if ((size_t)(eol - p) > name_len && strncasecmp(p, name, name_len) == 0) {
            *value = p + name_len;
            return true;
        }
        p = eol + 1;
    }
    return false;
}

NO_COVERAGE static void head_complete(struct run *r, int index)
{
    struct upstream *u = &r->ups[index];
    if (r->pending_count < MAX_PENDING)
        r->pending[(r->pending_first + r->pending_count++) % MAX_PENDING] = index;
    const char *value;
    u->state = IN_HEAD;
    if (find_header(u->head, u->head_len, "transfer-encoding:", &value)) {
        u->state = IN_CHUNK_SIZE;
        u->remaining = 0;
    } else if (find_header(u->head, u->head_len, "content-length:", &value)) {
        u->remaining = strtoull(value, NULL, 10);
        if (u->remaining > 0)
            u->state = IN_BODY;
    }
    u->head_len = 0;
    u->last4 = 0;
}

/* The proxy's requests are well formed: this follows their framing only as
 * far as needed to count them. */
NO_COVERAGE static void upstream_parse(struct run *r, int index, const char *data, size_t len)
{
    struct upstream *u = &r->ups[index];
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        switch (u->state) {
        case IN_HEAD:
            if (u->head_len < sizeof(u->head))
                u->head[u->head_len++] = c;
            u->last4 = u->last4 << 8 | (uint8_t)c;
            if (u->last4 == 0x0d0a0d0a)
                head_complete(r, index);
            break;
        case IN_BODY:
            if (--u->remaining == 0)
                u->state = IN_HEAD;
            break;
        case IN_CHUNK_SIZE:
            if (c == '\n') {
                u->state = u->remaining > 0 ? IN_CHUNK_DATA : IN_TRAILER;
                u->line_len = 0;
            } else if (c >= '0' && c <= '9') {
                u->remaining = u->remaining * 16 + (uint64_t)(c - '0');
            } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
                u->remaining = u->remaining * 16 + (uint64_t)((c | 0x20) - 'a' + 10);
            }
            break;
        case IN_CHUNK_DATA:
            if (--u->remaining == 0)
                u->state = IN_CHUNK_END;
            break;
        case IN_CHUNK_END:
            if (c == '\n')
                u->state = IN_CHUNK_SIZE;
            break;
        case IN_TRAILER:
            if (c == '\n') {
                if (u->line_len == 0)
                    u->state = IN_HEAD;
                u->line_len = 0;
            } else if (c != '\r') {
                u->line_len++;
            }
            break;
        }
    }
}

static void upstream_close(struct run *r, int index, bool reset)
{
    struct upstream *u = &r->ups[index];
    if (u->fd < 0)
        return;
    if (reset)
        setsockopt(u->fd, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0}, sizeof(struct linger));
    close(u->fd);
    u->fd = -1;
    if (r->current == index)
        r->current = -1;
}

NO_COVERAGE static void client_send(struct run *r, const char *data, size_t len)
{
    while (r->client >= 0 && len > 0) {
        ssize_t n = send(r->client, data, len, MSG_NOSIGNAL);
        if (n <= 0)
            return; /* the server closed it: what it answered is still read */
        data += n;
        len -= (size_t)n;
    }
}

/* Sends what the client holds back, then ends its requests. */
static void client_finish_sending(struct run *r)
{
    if (r->client < 0 || r->client_shut)
        return;
    if (r->deferred != NULL)
        client_send(r, r->deferred, strlen(r->deferred));
    shutdown(r->client, SHUT_WR);
    r->client_shut = true;
}

NO_COVERAGE static void accept_upstreams(struct run *r)
{
    for (;;) {
        int fd = accept4(back_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd == -1)
            return;
        if (r->closing || r->up_count == MAX_UPSTREAMS) {
            close(fd);
            continue;
        }
        r->ups[r->up_count++] = (struct upstream){.fd = fd};
    }
}

/* One poll round over the client, the listening socket and the upstream
 * connections, reading whatever is there. */
NO_COVERAGE static void pump(struct run *r, long timeout_us)
{
    struct pollfd fds[2 + MAX_UPSTREAMS];
    int map[2 + MAX_UPSTREAMS];
    nfds_t n = 0;
    fds[n] = (struct pollfd){.fd = back_fd, .events = POLLIN};
    map[n++] = -2;
    if (r->client >= 0 && !r->client_eof) {
        fds[n] = (struct pollfd){.fd = r->client, .events = POLLIN};
        map[n++] = -1;
    }
    for (size_t i = 0; i < r->up_count; i++) {
        if (r->ups[i].fd >= 0) {
            fds[n] = (struct pollfd){.fd = r->ups[i].fd, .events = POLLIN};
            map[n++] = (int)i;
        }
    }
    struct timespec timeout = {0, timeout_us * 1000};
    if (ppoll(fds, n, &timeout, NULL) <= 0)
        return;
    r->last_activity = now_us();
    char buf[16384];
    for (nfds_t i = 0; i < n; i++) {
        if (fds[i].revents == 0)
            continue;
        if (map[i] == -2) {
            accept_upstreams(r);
        } else if (map[i] == -1) {
            ssize_t got = recv(r->client, buf, sizeof(buf), 0);
            if (got == -1 && errno == EAGAIN)
                continue;
            r->events++;
            if (got <= 0) {
                r->client_eof = true;
            } else {
                if (trace)
                    fprintf(stderr, "client <- %.*s\n", (int)got, buf);
                if (strict)
                    check_bytes(&r->check, buf, (size_t)got);
                client_finish_sending(r); /* 100 Continue, 101: it may go on */
            }
        } else {
            int index = map[i];
            ssize_t got = recv(r->ups[index].fd, buf, sizeof(buf), 0);
            if (got > 0 && trace)
                fprintf(stderr, "upstream %d <- %.*s\n", index, (int)got, buf);
            if (got > 0) {
                upstream_parse(r, index, buf, (size_t)got);
            } else if (got == 0 || errno != EAGAIN) {
                r->events++;
                upstream_close(r, index, false);
            }
        }
    }
}

typedef bool (*predicate)(struct run *r);

NO_COVERAGE static bool all_drained(struct run *r)
{
    for (size_t i = 0; i < r->up_count; i++) {
        int queued = 0;
        if (r->ups[i].fd >= 0 && ioctl(r->ups[i].fd, SIOCOUTQ, &queued) == 0 && queued > 0)
            return false;
    }
    return true;
}

/* Pumps until `done` holds or `limit_ms` passes; with `until_quiet`, also
 * once the client has seen its end, or the proxy has read everything and
 * QUIET_US go by without a word from the server, which then waits for
 * nothing that will come.  A client holding bytes back (Expect, Upgrade)
 * sends them after such a silence, as real clients do. */
NO_COVERAGE static bool wait_for(struct run *r, predicate done, uint64_t limit_ms, bool until_quiet)
{
    uint64_t start = now_us();
    for (;;) {
        if (done(r))
            return true;
        uint64_t now = now_us();
        if ((until_quiet && (r->client_eof || r->client < 0)) || now - start >= limit_ms * 1000)
            return false;
        if (now - r->last_activity >= QUIET_US && all_drained(r)) {
            if (!r->client_shut) {
                client_finish_sending(r);
                r->last_activity = now;
            } else if (until_quiet) {
                return false;
            }
        }
        pump(r, QUIET_US / 4);
    }
}

NO_COVERAGE static bool have_head(struct run *r)
{
    /* Heads of connections closed since are stale. */
    while (r->pending_count > 0 && r->ups[r->pending[r->pending_first]].fd < 0) {
        r->pending_first = (r->pending_first + 1) % MAX_PENDING;
        r->pending_count--;
    }
    return r->pending_count > 0;
}

static size_t accepted_before;

NO_COVERAGE static bool have_new_connection(struct run *r)
{
    return r->up_count > accepted_before;
}

NO_COVERAGE static bool current_drained(struct run *r)
{
    int queued = 0;
    return r->current < 0 || ioctl(r->ups[r->current].fd, SIOCOUTQ, &queued) != 0 || queued == 0;
}

static unsigned events_before;

NO_COVERAGE static bool server_acted(struct run *r)
{
    return r->events != events_before || r->client_eof || r->client < 0;
}

NO_COVERAGE static bool client_closed(struct run *r)
{
    return r->client_eof || r->client < 0;
}

NO_COVERAGE static bool upstreams_closed(struct run *r)
{
    for (size_t i = 0; i < r->up_count; i++)
        if (r->ups[i].fd >= 0)
            return false;
    return true;
}

static void next_request(struct run *r)
{
    if (!wait_for(r, have_head, 1000, true))
        return;
    r->current = r->pending[r->pending_first];
    r->pending_first = (r->pending_first + 1) % MAX_PENDING;
    r->pending_count--;
}

/* Also done when the connection went away meanwhile (a pump closed it):
 * there is nothing left to poll, and no index to read a descriptor at. */
NO_COVERAGE static bool current_writable(struct run *r)
{
    if (r->current < 0)
        return true;
    struct pollfd pfd = {.fd = r->ups[r->current].fd, .events = POLLOUT};
    return poll(&pfd, 1, 0) == 1;
}

NO_COVERAGE static void upstream_write(struct run *r, const uint8_t *data, size_t len)
{
    if (len == 0)
        return;
    if (r->current < 0)
        next_request(r);
    uint64_t start = now_us();
    while (r->current >= 0 && len > 0) {
        ssize_t n = send(r->ups[r->current].fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
        } else if (n == -1 && errno == EAGAIN && now_us() - start < 1000000) {
            wait_for(r, current_writable, 100, false); /* the proxy paused reading */
        } else {
            return; /* it went away: the rest is lost, as it would be */
        }
    }
}

static void command(struct run *r, uint8_t letter)
{
    switch (letter) {
    case 'n': next_request(r); break;
    case 'a':
        accepted_before = r->up_count;
        if (wait_for(r, have_new_connection, 1000, true))
            r->current = (int)r->up_count - 1;
        break;
    case 'p': wait_for(r, current_drained, 50, false); break;
    case 'c':
    case 'r':
        if (r->current >= 0)
            upstream_close(r, r->current, letter == 'r');
        break;
    case 'h':
        if (r->current >= 0)
            shutdown(r->ups[r->current].fd, SHUT_WR);
        break;
    case 'w':
        events_before = r->events;
        wait_for(r, server_acted, 2 * READ_TIMEOUT_MS, false);
        break;
    case 'k':
        if (r->client >= 0) {
            setsockopt(r->client, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0},
                       sizeof(struct linger));
            close(r->client);
            r->client = -1;
        }
        break;
    }
}

static bool is_command(const uint8_t *p, const uint8_t *end)
{
    return end - p >= 3 && p[0] == '~' && p[1] == '~' && memchr("nacrhpwk", p[2], 8) != NULL;
}

static void run_script(struct run *r, const uint8_t *script, size_t size)
{
    const uint8_t *p = script, *end = script + size;
    while (p < end) {
        if (is_command(p, end)) {
            command(r, p[2]);
            p += 3;
            continue;
        }
        const uint8_t *stop = p + 1;
        while (stop < end && !is_command(stop, end))
            stop++;
        upstream_write(r, p, (size_t)(stop - p));
        p = stop;
    }
}

/* Connections the server opened after the previous input ended belong to
 * it, not to this one. */
NO_COVERAGE static void drop_stale_connections(void)
{
    int fd;
    while ((fd = accept4(back_fd, NULL, NULL, SOCK_CLOEXEC)) != -1)
        close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

NO_COVERAGE int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool started;
    if (!started) {
        start_server();
        started = true;
    }
    if (size == 0)
        return 0;
    drop_stale_connections();
    const struct request *req = &requests[data[0] % (sizeof(requests) / sizeof(requests[0]))];
    static struct run run;
    struct run *r = &run;
    memset(r, 0, sizeof(*r));
    r->current = -1;
    r->deferred = req->deferred;
    check_init(&r->check, req->kinds);
    r->last_activity = now_us();

    struct sockaddr_un addr;
    r->client = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->client == -1 || unix_address(&addr, front_path) != 0 ||
        connect(r->client, (struct sockaddr *)&addr, sizeof(addr)) != 0)
        abort();
    fcntl(r->client, F_SETFL, O_NONBLOCK);
    client_send(r, req->sent, strlen(req->sent));
    if (req->deferred == NULL)
        client_finish_sending(r);

    run_script(r, data + 1, size - 1);

    /* The end: the backend shuts its connections, and the proxy must close
     * them and the client's, whatever it still waited for.  It closes them
     * before the next input begins, which then finds no idle connection
     * from this one in the pool. */
    r->closing = true;
    for (size_t i = 0; i < r->up_count; i++)
        if (r->ups[i].fd >= 0)
            shutdown(r->ups[i].fd, SHUT_WR);
    client_finish_sending(r);
    if (!wait_for(r, client_closed, WEDGED_MS, false)) {
        fprintf(stderr, "fuzz_response: the server did not close the client in %d ms\n", WEDGED_MS);
        abort();
    }
    wait_for(r, upstreams_closed, 1000, false);
    for (size_t i = 0; i < r->up_count; i++)
        upstream_close(r, (int)i, false);
    if (r->client >= 0)
        close(r->client);
    return 0;
}
