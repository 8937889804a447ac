/*
 * test_edge.c: what corral learns of a client behind a load balancer: the
 * PROXY protocol parser fed whole, byte by byte and in random splits; then
 * build/corral with `listen ... proxy_protocol` over plain, TLS and
 * HTTP/2, in front of a backend written here that records the forwarding
 * headers it receives.
 */
#include "../daemon.h"
#include "../helpers.h"
#include "proto/policy/access.h"
#include "proto/http/exchange.h"
#include "proto/http/proxy_protocol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* ------------------------------------------------------------ v2 headers */

static const char v2_sig[12] = "\r\n\r\n\0\r\nQUIT\n";

/* A v2 header: command (0 LOCAL, 1 PROXY), family byte, then `body`. */
static size_t v2_make(char *out, unsigned command, unsigned family, const void *body, size_t len)
{
    memcpy(out, v2_sig, 12);
    out[12] = (char)(0x20 | command);
    out[13] = (char)family;
    out[14] = (char)(len >> 8);
    out[15] = (char)(len & 0xff);
    memcpy(out + 16, body, len);
    return 16 + len;
}

/* PROXY TCP4 from src:sport, with `tlv_len` bytes of TLVs (one NOOP). */
static size_t v2_ipv4(char *out, const char *src, unsigned sport, size_t tlv_len)
{
    unsigned char body[12 + 4096] = {0};
    inet_pton(AF_INET, src, body);
    inet_pton(AF_INET, "192.0.2.1", body + 4);
    body[8] = (unsigned char)(sport >> 8);
    body[9] = (unsigned char)sport;
    body[10] = 0;
    body[11] = 80;
    if (tlv_len >= 3) {
        body[12] = 0x04; /* PP2_TYPE_NOOP */
        body[13] = (unsigned char)((tlv_len - 3) >> 8);
        body[14] = (unsigned char)(tlv_len - 3);
    }
    return v2_make(out, 1, 0x11, body, 12 + tlv_len);
}

static size_t v2_ipv6(char *out, const char *src, unsigned sport)
{
    unsigned char body[36] = {0};
    inet_pton(AF_INET6, src, body);
    inet_pton(AF_INET6, "2001:db8::1", body + 16);
    body[32] = (unsigned char)(sport >> 8);
    body[33] = (unsigned char)sport;
    body[35] = 80;
    return v2_make(out, 1, 0x21, body, sizeof(body));
}

/* ------------------------------------------------------------- the parser */

struct parse_case {
    const char *name;
    char data[600];
    size_t len;     /* 0: strlen(data) */
    ssize_t result; /* the header's length, or -EPROTO / -EMSGSIZE */
    bool has_address;
    const char *source; /* with has_address */
    unsigned port;
};

static void source_text(const struct proxy_protocol_header *h, char *buf, size_t size)
{
    if (h->source.sa.sa_family == AF_INET)
        inet_ntop(AF_INET, &h->source.in.sin_addr, buf, (socklen_t)size);
    else
        inet_ntop(AF_INET6, &h->source.in6.sin6_addr, buf, (socklen_t)size);
}

static unsigned source_port(const struct proxy_protocol_header *h)
{
    return ntohs(h->source.sa.sa_family == AF_INET ? h->source.in.sin_port
                                                   : h->source.in6.sin6_port);
}

static struct parse_case *parse_cases(int *count)
{
    static struct parse_case cases[32];
    int n = 0;
#define TEXT(NAME, TEXT_, RESULT, HAS, SRC, PORT)                                                  \
    cases[n] = (struct parse_case){NAME, TEXT_, 0, RESULT, HAS, SRC, PORT};                        \
    cases[n].len = strlen(cases[n].data);                                                          \
    n++
    TEXT("v1 tcp4", "PROXY TCP4 203.0.113.7 192.0.2.1 51000 80\r\n", 43, true, "203.0.113.7",
         51000);
    TEXT("v1 tcp6", "PROXY TCP6 2001:db8::7 2001:db8::1 1 443\r\n", 42, true, "2001:db8::7", 1);
    TEXT("v1 unknown", "PROXY UNKNOWN\r\n", 15, false, NULL, 0);
    TEXT("v1 unknown with addresses", "PROXY UNKNOWN ::1 ::1 1 2\r\n", 27, false, NULL, 0);
    TEXT("v1 longest line",
         "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
         "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
         104, true, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
    TEXT("v1 family mismatch", "PROXY TCP4 2001:db8::7 192.0.2.1 1 2\r\n", -EPROTO, false, NULL, 0);
    TEXT("v1 port too large", "PROXY TCP4 192.0.2.7 192.0.2.1 65536 80\r\n", -EPROTO, false, NULL,
         0);
    TEXT("v1 port leading zero", "PROXY TCP4 192.0.2.7 192.0.2.1 080 80\r\n", -EPROTO, false, NULL,
         0);
    TEXT("v1 double space", "PROXY TCP4  192.0.2.7 192.0.2.1 1 80\r\n", -EPROTO, false, NULL, 0);
    TEXT("v1 missing field", "PROXY TCP4 192.0.2.7 192.0.2.1 80\r\n", -EPROTO, false, NULL, 0);
    TEXT("v1 extra field", "PROXY TCP4 192.0.2.7 192.0.2.1 1 80 9\r\n", -EPROTO, false, NULL, 0);
    TEXT("v1 bare LF", "PROXY TCP4 192.0.2.7 192.0.2.1 1 80\n", -EPROTO, false, NULL, 0);
    TEXT("v1 unknown protocol", "PROXY UDP4 192.0.2.7 192.0.2.1 1 80\r\n", -EPROTO, false, NULL, 0);
    TEXT("v1 lowercase", "proxy TCP4 192.0.2.7 192.0.2.1 1 80\r\n", -EPROTO, false, NULL, 0);
    TEXT("an HTTP request", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", -EPROTO, false, NULL, 0);
    TEXT("a TLS ClientHello", "\x16\x03\x01\x02\x00\x01", -EPROTO, false, NULL, 0);
    /* 107 bytes without CRLF: no valid line is that long. */
    TEXT("v1 oversize",
         "PROXY UNKNOWN xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
         "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n",
         -EMSGSIZE, false, NULL, 0);
#undef TEXT
    struct parse_case *c;
    c = &cases[n++];
    *c = (struct parse_case){
        .name = "v2 tcp4", .has_address = true, .source = "203.0.113.7", .port = 51000};
    c->len = v2_ipv4(c->data, "203.0.113.7", 51000, 0);
    c->result = (ssize_t)c->len;
    c = &cases[n++];
    *c = (struct parse_case){
        .name = "v2 tcp4 with TLVs", .has_address = true, .source = "203.0.113.8", .port = 2};
    c->len = v2_ipv4(c->data, "203.0.113.8", 2, 40);
    c->result = (ssize_t)c->len;
    c = &cases[n++];
    *c = (struct parse_case){
        .name = "v2 tcp6", .has_address = true, .source = "2001:db8::7", .port = 443};
    c->len = v2_ipv6(c->data, "2001:db8::7", 443);
    c->result = (ssize_t)c->len;
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 local"};
    c->len = v2_make(c->data, 0, 0x00, "", 0);
    c->result = (ssize_t)c->len;
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 local with addresses"};
    c->len = v2_make(c->data, 0, 0x11, "123456789012", 12);
    c->result = (ssize_t)c->len;
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 unspec"};
    c->len = v2_make(c->data, 1, 0x00, "abc", 3);
    c->result = (ssize_t)c->len;
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 tcp4 short", .result = -EPROTO};
    c->len = v2_make(c->data, 1, 0x11, "12345678901", 11);
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 bad TLV", .result = -EPROTO};
    c->len = v2_ipv4(c->data, "203.0.113.7", 1, 2);
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 bad command", .result = -EPROTO};
    c->len = v2_make(c->data, 2, 0x11, "123456789012", 12);
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 bad version", .result = -EPROTO};
    c->len = v2_make(c->data, 1, 0x11, "123456789012", 12);
    c->data[12] = 0x31;
    c = &cases[n++];
    *c = (struct parse_case){.name = "v2 oversize", .result = -EMSGSIZE};
    c->len = v2_make(c->data, 1, 0x11, "", 0);
    c->data[14] = 0x10; /* 4096 bytes of addresses and TLVs, 16 too many */
    ck_assert_int_le(n, COUNT(cases));
    *count = n;
    return cases;
}

/* Feeds `c` in pieces ending at each of `cuts` (then whole): every prefix
 * must ask for more, or fail as the whole fails. */
static void parse_split(const struct parse_case *c, const size_t *cuts, int cut_count)
{
    struct proxy_protocol_header h;
    for (int i = 0; i < cut_count; i++) {
        if (cuts[i] >= c->len)
            continue;
        memset(&h, 0xa5, sizeof(h));
        ssize_t r = proxy_protocol_parse(c->data, cuts[i], &h);
        if (c->result > 0 || r != 0)
            ck_assert_msg(r == 0 || r == c->result, "%s: %zu bytes gave %zd", c->name, cuts[i], r);
    }
    memset(&h, 0xa5, sizeof(h));
    ssize_t r = proxy_protocol_parse(c->data, c->len, &h);
    ck_assert_msg(r == c->result, "%s: gave %zd, expected %zd", c->name, r, c->result);
    if (r <= 0)
        return;
    ck_assert_msg(h.has_address == c->has_address, "%s: has_address", c->name);
    if (c->has_address) {
        char text[INET6_ADDRSTRLEN];
        source_text(&h, text, sizeof(text));
        ck_assert_str_eq(text, c->source);
        ck_assert_uint_eq(source_port(&h), c->port);
    }
}

START_TEST(parser_whole_bytewise_and_split)
{
    int count;
    struct parse_case *cases = parse_cases(&count);
    unsigned seed = 12345;
    for (int k = 0; k < count; k++) {
        const struct parse_case *c = &cases[k];
        parse_split(c, NULL, 0);
        size_t every[600];
        for (size_t i = 0; i < c->len; i++)
            every[i] = i;
        parse_split(c, every, (int)c->len);
        for (int round = 0; round < 20; round++) {
            size_t cut = (size_t)rand_r(&seed) % (c->len + 1);
            parse_split(c, &cut, 1);
        }
    }
}
END_TEST

/* The longest v2 header taken, and one byte more. */
START_TEST(parser_v2_bound)
{
    static char v2[PROXY_PROTOCOL_MAX + 16];
    struct proxy_protocol_header h;
    size_t len = v2_ipv4(v2, "203.0.113.7", 1, PROXY_PROTOCOL_MAX - 16 - 12);
    ck_assert_uint_eq(len, PROXY_PROTOCOL_MAX);
    ck_assert_int_eq(proxy_protocol_parse(v2, len, &h), PROXY_PROTOCOL_MAX);
    ck_assert(h.has_address);
    len = v2_ipv4(v2, "203.0.113.7", 1, PROXY_PROTOCOL_MAX - 16 - 12 + 1);
    ck_assert_int_eq(proxy_protocol_parse(v2, 16, &h), -EMSGSIZE);
}
END_TEST

/* What follows the header is not the parser's: the length says where it ends. */
START_TEST(parser_stops_at_the_header)
{
    struct proxy_protocol_header h;
    const char v1[] = "PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\nGET / HTTP/1.1\r\n";
    ck_assert_int_eq(proxy_protocol_parse(v1, sizeof(v1) - 1, &h), 39);
    char v2[64];
    size_t len = v2_ipv4(v2, "203.0.113.7", 1, 0);
    memcpy(v2 + len, "\x16\x03\x01", 3);
    ck_assert_int_eq(proxy_protocol_parse(v2, len + 3, &h), (ssize_t)len);
    ck_assert_int_eq(proxy_protocol_parse(v2, 0, &h), 0);
}
END_TEST

/* ------------------------------------------------------------- backend */

/* The backend: a test_recorder answering every request with 200 "ok". */
static const char backend_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                     "Connection: close\r\n\r\nok";

static int backend_requests(struct test_recorder *b)
{
    pthread_mutex_lock(&b->lock);
    int n = (int)b->requests;
    pthread_mutex_unlock(&b->lock);
    return n;
}

/* The value of header `name` in the last request ("" if absent, "?" with
 * no request at all). */
static void backend_header(struct test_recorder *b, const char *name, char *out, size_t size)
{
    pthread_mutex_lock(&b->lock);
    snprintf(out, size, "%s", b->requests > 0 ? "" : "?");
    size_t name_len = strlen(name);
    for (const char *line = strstr(b->last, "\r\n"); line != NULL;
         line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, name, name_len) == 0 && line[2 + name_len] == ':') {
            const char *value = line + 2 + name_len + 1;
            while (*value == ' ')
                value++;
            snprintf(out, size, "%.*s", (int)strcspn(value, "\r"), value);
            break;
        }
    }
    pthread_mutex_unlock(&b->lock);
}

/* ------------------------------------------------------------ the daemon */

#define ADMIN "admin { listen 127.0.0.2:0; }\n"

/* Writes DIR/NAME.conf from a format and starts the daemon. */
__attribute__((format(printf, 3, 4))) static void start(struct test_daemon *d, const char *name,
                                                        const char *format, ...)
{
    test_daemon_init(d, name);
    char conf[8192];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(conf, sizeof(conf), format, args);
    va_end(args);
    ck_assert_int_lt(n, (int)sizeof(conf));
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

/* Reads a response until the daemon closes (or resets: a refused header
 * is cut off): its status, 0 if none. */
static int read_status(int fd)
{
    char response[4096];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof(response) - 1 &&
           (got = recv(fd, response + n, sizeof(response) - 1 - n, 0)) > 0)
        n += (size_t)got;
    response[n] = '\0';
    int status = 0;
    if (sscanf(response, "HTTP/1.1 %d", &status) != 1)
        return 0;
    return status;
}

/* Sends `pre` (`pre_len` bytes, the PROXY header) in pieces of `piece`
 * bytes (0: at once) with `pause_ms` between them, then a GET for `path`
 * with `extra` header lines; returns the response's status, or 0 if the
 * daemon closed without one. */
static int get_after(int port, const char *pre, size_t pre_len, size_t piece, int pause_ms,
                     const char *path, const char *extra)
{
    int fd = test_connect(port);
    for (size_t off = 0; off < pre_len;) {
        size_t n = piece == 0 || pre_len - off < piece ? pre_len - off : piece;
        ck_assert_int_eq(send(fd, pre + off, n, MSG_NOSIGNAL), (ssize_t)n);
        off += n;
        if (pause_ms > 0 && off < pre_len)
            usleep((useconds_t)pause_ms * 1000);
    }
    char request[1024];
    int len =
        snprintf(request, sizeof(request),
                 "GET %s HTTP/1.1\r\nHost: a.test\r\n%sConnection: close\r\n\r\n", path, extra);
    send(fd, request, (size_t)len, MSG_NOSIGNAL); /* may fail: the daemon closed */
    int status = read_status(fd);
    close(fd);
    return status;
}

static int get_v1(int port, const char *header, const char *extra)
{
    return get_after(port, header, strlen(header), 0, 0, "/", extra);
}

/* The value of a metric line "NAME VALUE" in /metrics; -1 if absent. */
static long long metric(struct test_daemon *d, const char *name)
{
    static char body[65536];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", body, sizeof(body)), 200);
    const char *at = strstr(body, name);
    return at != NULL ? atoll(at + strlen(name) + 1) : -1;
}

/* The metric once it reads `want`, or what it reads after 3 s: the worker
 * counts a refused connection when it closes it, a moment after the client
 * sees the close. */
static long long metric_wait(struct test_daemon *d, const char *name, long long want)
{
    long long value = metric(d, name);
    for (int i = 0; i < 300 && value != want; i++) {
        usleep(10 * 1000);
        value = metric(d, name);
    }
    return value;
}

#define MALFORMED "corral_proxy_protocol_errors_total{reason=\"malformed\"}"
#define LATE      "corral_proxy_protocol_errors_total{reason=\"timeout\"}"

static void start_pp(struct test_daemon *d, const struct test_recorder *b, const char *listen_flags,
                     const char *server_extra)
{
    start(d, "pp",
          ADMIN "server {\n    listen 127.0.0.1:0 proxy_protocol %s;\n"
                "    client_header_timeout 3s;\n%s"
                "    location / { proxy_pass http://127.0.0.1:%d; }\n}\n",
          listen_flags, server_extra, b->server.port);
}

START_TEST(v1_and_v2_set_the_client_address)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    start_pp(&d, &b, "", "");
    char xff[256];
    ck_assert_int_eq(get_v1(d.port, "PROXY TCP4 203.0.113.7 192.0.2.1 51000 80\r\n", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "203.0.113.7");
    ck_assert_int_eq(get_v1(d.port, "PROXY TCP6 2001:db8::7 2001:db8::1 1 443\r\n", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "2001:db8::7");
    /* UNKNOWN and LOCAL keep the connection's own address. */
    ck_assert_int_eq(get_v1(d.port, "PROXY UNKNOWN\r\n", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "127.0.0.1");

    char v2[4200];
    size_t len = v2_ipv4(v2, "198.51.100.9", 4000, 0);
    ck_assert_int_eq(get_after(d.port, v2, len, 0, 0, "/", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.9");
    len = v2_ipv4(v2, "198.51.100.10", 4000, 200); /* with TLVs */
    ck_assert_int_eq(get_after(d.port, v2, len, 0, 0, "/", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.10");
    len = v2_ipv6(v2, "2001:db8::9", 1);
    ck_assert_int_eq(get_after(d.port, v2, len, 0, 0, "/", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "2001:db8::9");
    len = v2_make(v2, 0, 0, "", 0); /* LOCAL */
    ck_assert_int_eq(get_after(d.port, v2, len, 0, 0, "/", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "127.0.0.1");
    /* The client's own X-Forwarded-For stays before it, as without PROXY. */
    ck_assert_int_eq(get_v1(d.port, "PROXY TCP4 203.0.113.7 192.0.2.1 51000 80\r\n",
                            "X-Forwarded-For: 10.1.1.1\r\n"),
                     200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "10.1.1.1, 203.0.113.7");
    ck_assert_int_eq(metric(&d, MALFORMED), 0);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* The header and the request in pieces, slowly, and the header and the
 * request in one write: the header is taken exactly, whatever the reads. */
START_TEST(header_split_across_reads)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    start_pp(&d, &b, "", "");
    char xff[256];
    const char v1[] = "PROXY TCP4 203.0.113.7 192.0.2.1 51000 80\r\n";
    ck_assert_int_eq(get_after(d.port, v1, sizeof(v1) - 1, 1, 5, "/", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "203.0.113.7");
    char v2[4200];
    size_t len = v2_ipv4(v2, "198.51.100.9", 4000, 100);
    ck_assert_int_eq(get_after(d.port, v2, len, 7, 5, "/", ""), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.9");
    /* Header and request in one segment. */
    char both[512];
    int n = snprintf(both, sizeof(both),
                     "%sGET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", v1);
    int fd = test_connect(d.port);
    test_send_all(fd, both, (size_t)n);
    ck_assert_int_eq(read_status(fd), 200);
    close(fd);
    ck_assert_int_eq(backend_requests(&b), 3);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* Garbage, an oversize header, a truncated one and a silent client are all
 * closed without an answer and counted; the backend sees none of them. */
START_TEST(bad_headers_close_and_count)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    start_pp(&d, &b, "", "");
    ck_assert_int_eq(get_v1(d.port, "", ""), 0);                       /* a bare request */
    ck_assert_int_eq(get_v1(d.port, "PROXY TCP4 1.2.3.4\r\n", ""), 0); /* malformed */
    char big[200];
    memset(big, 'x', sizeof(big));
    memcpy(big, "PROXY UNKNOWN ", 14);
    ck_assert_int_eq(get_after(d.port, big, sizeof(big), 0, 0, "/", ""), 0); /* oversize v1 */
    char v2[64];
    size_t len = v2_make(v2, 1, 0x11, "", 0);
    v2[14] = 0x20; /* 8 KiB of body announced */
    ck_assert_int_eq(get_after(d.port, v2, len, 0, 0, "/", ""), 0);
    ck_assert_int_eq(metric_wait(&d, MALFORMED, 4), 4);
    /* Truncated, then the client shuts its side. */
    int fd = test_connect(d.port);
    test_send_all(fd, "PROXY TCP4 203.0.113.7", 22);
    shutdown(fd, SHUT_WR);
    ck_assert_int_eq(read_status(fd), 0);
    close(fd);
    ck_assert_int_eq(metric_wait(&d, MALFORMED, 5), 5);
    /* Half a header, then nothing: closed after client_header_timeout (3 s). */
    fd = test_connect(d.port);
    test_send_all(fd, "PROXY TCP4 ", 11);
    uint64_t began = test_now_ms();
    ck_assert_int_eq(read_status(fd), 0);
    uint64_t took = test_now_ms() - began;
    /* From the accept, which may come a little before `began`. */
    ck_assert_msg(took >= 2500 && took < 15000, "closed after %llu ms", (unsigned long long)took);
    close(fd);
    ck_assert_int_eq(metric_wait(&d, LATE, 1), 1);
    ck_assert_int_eq(backend_requests(&b), 0);
    char *log = test_daemon_log(&d);
    ck_assert_ptr_nonnull(strstr(log, "PROXY header from 127.0.0.1: malformed"));
    free(log);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* Without proxy_protocol on the listen, a PROXY line is a bad request. */
START_TEST(without_the_parameter_a_header_is_refused)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    start(&d, "plain",
          ADMIN "server {\n    listen 127.0.0.1:0;\n"
                "    location / { proxy_pass http://127.0.0.1:%d; }\n}\n",
          b.server.port);
    ck_assert_int_eq(get_v1(d.port, "PROXY TCP4 203.0.113.7 192.0.2.1 51000 80\r\n", ""), 400);
    ck_assert_int_eq(backend_requests(&b), 0);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* ---------------------------------------------------------------- HTTP/2 */

/* Prior knowledge after the header: the preface, empty SETTINGS, and a GET
 * for / (HPACK: indexed :method GET, :scheme http, :path /, then
 * :authority "a" as a literal). */
static void h2_get_after(int port, const char *pre, size_t pre_len)
{
    static const char h2[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                             "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                             "\x00\x00\x06\x01\x05\x00\x00\x00\x01"
                             "\x82\x86\x84\x41\x01"
                             "a";
    int fd = test_connect(port);
    test_send_all(fd, pre, pre_len);
    test_send_all(fd, h2, sizeof(h2) - 1);
    ck_assert(test_answers_within(fd, 5000));
    close(fd);
}

START_TEST(http2_prior_knowledge_after_the_header)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    start_pp(&d, &b, "http2", "");
    char xff[256];
    const char v1[] = "PROXY TCP4 203.0.113.7 192.0.2.1 51000 80\r\n";
    h2_get_after(d.port, v1, sizeof(v1) - 1);
    test_wait_for(backend_requests(&b) > 0, 5000, "no request at the backend");
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "203.0.113.7");
    char v2[64];
    size_t len = v2_ipv6(v2, "2001:db8::9", 1);
    h2_get_after(d.port, v2, len);
    test_wait_for(backend_requests(&b) >= 2, 5000, "%d requests at the backend",
                  backend_requests(&b));
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "2001:db8::9");
    /* HTTP/1.1 on the same port still works after the header. */
    ck_assert_int_eq(get_v1(d.port, "PROXY TCP4 203.0.113.8 192.0.2.1 1 80\r\n", ""), 200);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* -------------------------------------------------------------------- TLS */

static char certs_dir[PATH_MAX];

/* Once per group, in the runner: a self-signed certificate. */
static void certs_make(void)
{
    int n = snprintf(certs_dir, sizeof(certs_dir), "%s/certs", test_daemon_group_dir());
    ck_assert_int_lt(n, (int)sizeof(certs_dir));
    ck_assert_int_eq(mkdir(certs_dir, 0755), 0);
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout key.pem -out cert.pem -subj /CN=a.test -days 2 >make.log 2>&1",
             certs_dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The header in the clear, then TLS offering `alpn` (NULL: no ALPN), then
 * `request`: into `response`, what comes back until the server closes or
 * `want` bytes have come.  Returns the bytes read, or -1 when the
 * handshake failed. */
static int tls_send_after(int port, const char *pre, size_t pre_len, const char *alpn,
                          const char *request, size_t request_len, char *response, int size,
                          int want)
{
    int fd = test_connect(port);
    test_send_all(fd, pre, pre_len);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    ck_assert_ptr_nonnull(ctx);
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, "a.test");
    if (alpn != NULL)
        SSL_set_alpn_protos(ssl, (const unsigned char *)alpn, (unsigned)strlen(alpn));
    int used = -1, n;
    if (SSL_connect(ssl) == 1) {
        ck_assert_int_eq(SSL_write(ssl, request, (int)request_len), (int)request_len);
        used = 0;
        while (used < size - 1 && used < want &&
               (n = SSL_read(ssl, response + used, size - 1 - used)) > 0)
            used += n;
    }
    response[used > 0 ? used : 0] = '\0';
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
    return used;
}

/* The same with a GET: the response's status. */
static int tls_get_after(int port, const char *pre, size_t pre_len, const char *alpn)
{
    static const char get[] = "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    char response[4096];
    int status;
    if (tls_send_after(port, pre, pre_len, alpn, get, sizeof(get) - 1, response, sizeof(response),
                       (int)sizeof(response)) < 0 ||
        sscanf(response, "HTTP/1.1 %d", &status) != 1)
        status = 0;
    return status;
}

/* Over TLS, ALPN alone chooses HTTP/2: the preface with ALPN http/1.1,
 * or with none, is an HTTP/1.1 request line like any other, refused. */
START_TEST(tls_alpn_chooses_the_protocol)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    char tls[PATH_MAX * 2 + 128];
    snprintf(tls, sizeof(tls),
             "    tls_certificate %s/cert.pem;\n    tls_certificate_key %s/key.pem;\n", certs_dir,
             certs_dir);
    start_pp(&d, &b, "tls http2", tls);
    static const char v1[] = "PROXY TCP4 203.0.113.7 192.0.2.1 51000 443\r\n";
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    char response[4096];
    ck_assert_int_gt(tls_send_after(d.port, v1, sizeof(v1) - 1, "\x08http/1.1", preface,
                                    sizeof(preface) - 1, response, sizeof(response), 4096),
                     0);
    ck_assert_msg(strncmp(response, "HTTP/1.1 400 ", 13) == 0, "%s", response);
    ck_assert_int_gt(tls_send_after(d.port, v1, sizeof(v1) - 1, NULL, preface, sizeof(preface) - 1,
                                    response, sizeof(response), 4096),
                     0);
    ck_assert_msg(strncmp(response, "HTTP/1.1 400 ", 13) == 0, "%s", response);
    /* With h2, the server's SETTINGS frame (RFC 9113 3.4) answers it. */
    ck_assert_int_ge(tls_send_after(d.port, v1, sizeof(v1) - 1, "\x02h2", preface,
                                    sizeof(preface) - 1, response, sizeof(response), 9),
                     9);
    ck_assert_int_eq((unsigned char)response[3], 0x04); /* SETTINGS */
    ck_assert_int_eq((unsigned char)response[8], 0);    /* stream 0 */
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

START_TEST(tls_after_the_header)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    char tls[PATH_MAX * 2 + 128];
    snprintf(tls, sizeof(tls),
             "    tls_certificate %s/cert.pem;\n    tls_certificate_key %s/key.pem;\n", certs_dir,
             certs_dir);
    start_pp(&d, &b, "tls http2", tls);
    char xff[256];
    const char v1[] = "PROXY TCP4 203.0.113.7 192.0.2.1 51000 443\r\n";
    ck_assert_int_eq(tls_get_after(d.port, v1, sizeof(v1) - 1, NULL), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "203.0.113.7");
    char v2[4200];
    size_t len = v2_ipv4(v2, "198.51.100.9", 4000, 300);
    ck_assert_int_eq(tls_get_after(d.port, v2, len, NULL), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.9");
    backend_header(&b, "X-Forwarded-Proto", xff, sizeof(xff));
    ck_assert_str_eq(xff, "https");
    /* The longest v2 header taken, TLVs and all, before the ClientHello. */
    static char big[PROXY_PROTOCOL_MAX];
    len = v2_ipv4(big, "198.51.100.11", 4000, PROXY_PROTOCOL_MAX - 16 - 12);
    ck_assert_int_eq(tls_get_after(d.port, big, len, NULL), 200);
    backend_header(&b, "X-Forwarded-For", xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.11");
    /* HTTP/2 by ALPN after the header (curl sends v1 with its own address). */
    char command[256], out[256] = "";
    snprintf(command, sizeof(command),
             "curl -sk --max-time 10 --haproxy-protocol --http2 -w ' v=%%{http_version}' "
             "https://127.0.0.1:%d/",
             d.port);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    pclose(p);
    ck_assert_str_eq(out, "ok v=2");
    ck_assert_int_eq(backend_requests(&b), 4);
    /* A ClientHello where the header should be is malformed. */
    ck_assert_int_eq(tls_get_after(d.port, "", 0, NULL), 0);
    ck_assert_int_eq(metric_wait(&d, MALFORMED, 1), 1);
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* ------------------------------------------------------- real_ip, allow/deny */

/* What the backend's X-Forwarded-For says after a GET on a new connection
 * with `pre` (a PROXY header, or "") and `extra` header lines: the
 * client's own list, then corral's $remote_addr. */
static void xff_after(struct test_recorder *b, int port, const char *pre, const char *path,
                      const char *extra, char *out, size_t size)
{
    int before = backend_requests(b);
    ck_assert_int_eq(get_after(port, pre, strlen(pre), 0, 0, path, extra), 200);
    ck_assert_int_eq(backend_requests(b), before + 1);
    backend_header(b, "X-Forwarded-For", out, size);
}

START_TEST(real_ip_from_trusted_proxies_only)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    start(&d, "realip",
          ADMIN "set_real_ip_from 127.0.0.1;\nset_real_ip_from 10.0.0.0/8;\n"
                "set_real_ip_from 2001:db8:1::/48;\nreal_ip_header X-Forwarded-For;\n"
                "server {\n    listen 127.0.0.1:0;\n"
                "    location / { proxy_pass http://127.0.0.1:%d; }\n"
                "    location /rec { real_ip_recursive on; proxy_pass http://127.0.0.1:%d; }\n"
                "    location /xri { real_ip_header X-Real-IP; proxy_pass http://127.0.0.1:%d; }\n"
                "    location /untrusted { set_real_ip_from 192.0.2.0/24;\n"
                "        proxy_pass http://127.0.0.1:%d; }\n"
                "    location /vars { proxy_set_header X-Real-IP $remote_addr;\n"
                "        proxy_set_header X-Peer $realip_remote_addr;\n"
                "        proxy_pass http://127.0.0.1:%d; }\n"
                "}\n",
          b.server.port, b.server.port, b.server.port, b.server.port, b.server.port);
    char xff[256];
    /* Without recursion, the last address, whoever it is. */
    xff_after(&b, d.port, "", "/", "X-Forwarded-For: 203.0.113.5, 10.0.0.2\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "203.0.113.5, 10.0.0.2, 10.0.0.2");
    /* With it, the rightmost one that is not a trusted proxy. */
    xff_after(&b, d.port, "", "/rec", "X-Forwarded-For: 198.51.100.1, 203.0.113.5, 10.0.0.2\r\n",
              xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.1, 203.0.113.5, 10.0.0.2, 203.0.113.5");
    /* Across header lines, from the last one; ports and brackets allowed. */
    xff_after(&b, d.port, "", "/rec",
              "X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-For: 10.0.0.9:4000, "
              "[2001:db8:1::5]:80\r\n",
              xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.1, 10.0.0.9:4000, [2001:db8:1::5]:80, 198.51.100.1");
    /* Every address trusted: the leftmost. */
    xff_after(&b, d.port, "", "/rec", "X-Forwarded-For: 10.0.0.3, 10.0.0.2\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "10.0.0.3, 10.0.0.2, 10.0.0.3");
    /* What is not an address stops the walk: the last address taken stays. */
    xff_after(&b, d.port, "", "/rec", "X-Forwarded-For: junk, 10.0.0.2\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "junk, 10.0.0.2, 10.0.0.2");
    xff_after(&b, d.port, "", "/", "X-Forwarded-For: 10.0.0.2, junk\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "10.0.0.2, junk, 127.0.0.1");
    /* No header: the connection's address. */
    xff_after(&b, d.port, "", "/", "", xff, sizeof(xff));
    ck_assert_str_eq(xff, "127.0.0.1");
    /* Another header, named in the location. */
    xff_after(&b, d.port, "", "/xri", "X-Real-IP: 203.0.113.77\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "203.0.113.77");
    /* The connection is not a trusted proxy there: the header is the
     * client's say only. */
    xff_after(&b, d.port, "", "/untrusted", "X-Forwarded-For: 192.0.2.1\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "192.0.2.1, 127.0.0.1");
    /* The variables: the client's address found, and the connection's. */
    xff_after(&b, d.port, "", "/vars", "X-Forwarded-For: 203.0.113.5\r\n", xff, sizeof(xff));
    char header[64];
    backend_header(&b, "X-Real-IP", header, sizeof(header));
    ck_assert_str_eq(header, "203.0.113.5");
    backend_header(&b, "X-Peer", header, sizeof(header));
    ck_assert_str_eq(header, "127.0.0.1");
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* Behind a balancer that speaks PROXY: the header's source is the peer
 * real_ip judges, and X-Real-IP from it is taken when it is trusted. */
START_TEST(real_ip_behind_a_proxy_protocol_balancer)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    start_pp(&d, &b, "", "    set_real_ip_from 203.0.113.0/24;\n    real_ip_header X-Real-IP;\n");
    char xff[256];
    xff_after(&b, d.port, "PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\n", "/",
              "X-Real-IP: 198.51.100.20\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.20");
    xff_after(&b, d.port, "PROXY TCP4 198.51.100.7 192.0.2.1 1 80\r\n", "/",
              "X-Real-IP: 198.51.100.20\r\n", xff, sizeof(xff));
    ck_assert_str_eq(xff, "198.51.100.7");
    test_daemon_stop(&d);
    test_recorder_stop(&b);
}
END_TEST

/* allow/deny in order, first match wins; a location without rules has its
 * server's, one with rules only its own; after real_ip; HTTP/2 too. */
/* A server with rewrites routes each request itself: the rules of the
 * location it ends in still apply, server-wide ones included. */
START_TEST(allow_and_deny_apply_after_a_rewrite)
{
    struct test_daemon d;
    start(&d, "access-rewrite",
          ADMIN "server {\n    listen 127.0.0.1:0 proxy_protocol;\n"
                "    rewrite ^/old$ /new;\n    deny 203.0.113.7;\n"
                "    location / { return 200 \"served\\n\"; }\n"
                "    location /new { deny all; return 200 \"new\\n\"; }\n"
                "}\n");
    const char denied[] = "PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\n";
    const char other[] = "PROXY TCP4 203.0.113.8 192.0.2.1 1 80\r\n";
    ck_assert_int_eq(get_after(d.port, denied, sizeof(denied) - 1, 0, 0, "/x", ""), 403);
    ck_assert_int_eq(get_after(d.port, other, sizeof(other) - 1, 0, 0, "/x", ""), 200);
    ck_assert_int_eq(get_after(d.port, other, sizeof(other) - 1, 0, 0, "/old", ""), 403);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(allow_and_deny_in_order)
{
    struct test_recorder b;
    test_recorder_start(&b, backend_answer);
    struct test_daemon d;
    char log[PATH_MAX];
    test_daemon_file(log, sizeof(log), "requests.log");
    start(&d, "access",
          ADMIN "access_log %s;\n"
                "server {\n    listen 127.0.0.1:0 proxy_protocol http2;\n"
                "    deny 203.0.113.7;\n    allow 203.0.113.0/24;\n    allow 2001:db8::/32;\n"
                "    deny all;\n"
                "    location / { proxy_pass http://127.0.0.1:%d; }\n"
                "    location /own { allow 198.51.100.0/24; deny all;\n"
                "        proxy_pass http://127.0.0.1:9; }\n"
                "    location /any { allow all; proxy_pass http://127.0.0.1:9; }\n"
                "}\n",
          log, b.server.port);
    /* Location / has no rules: the server's apply. */
    struct {
        const char *header, *path;
        int status;
    } cases[] = {
        {"PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\n", "/", 403},
        {"PROXY TCP4 203.0.113.8 192.0.2.1 1 80\r\n", "/", 200},
        {"PROXY TCP6 2001:db8::7 2001:db8::1 1 80\r\n", "/", 200},
        {"PROXY TCP6 2001:db9::7 2001:db8::1 1 80\r\n", "/", 403},
        {"PROXY TCP4 198.51.100.1 192.0.2.1 1 80\r\n", "/", 403},
        {"PROXY TCP4 198.51.100.1 192.0.2.1 1 80\r\n", "/own", 502},
        {"PROXY TCP4 203.0.113.8 192.0.2.1 1 80\r\n", "/own", 403},
        {"PROXY TCP4 192.0.2.99 192.0.2.1 1 80\r\n", "/any", 502},
    };
    for (int i = 0; i < COUNT(cases); i++)
        ck_assert_msg(get_after(d.port, cases[i].header, strlen(cases[i].header), 0, 0,
                                cases[i].path, "") == cases[i].status,
                      "case %d", i);
    ck_assert_int_eq(backend_requests(&b), 2);
    /* HTTP/2: refused before the backend, too. */
    const char denied[] = "PROXY TCP4 203.0.113.7 192.0.2.1 1 80\r\n";
    h2_get_after(d.port, denied, sizeof(denied) - 1);
    const char allowed[] = "PROXY TCP4 203.0.113.9 192.0.2.1 1 80\r\n";
    h2_get_after(d.port, allowed, sizeof(allowed) - 1);
    test_wait_for(backend_requests(&b) >= 3, 5000, "%d requests at the backend",
                  backend_requests(&b));
    ck_assert_int_eq(backend_requests(&b), 3);
    test_daemon_stop(&d);
    /* Refusals are logged with the client's address. */
    char *lines = test_read_file(log);
    int refused = 0;
    for (const char *at = lines; (at = strstr(at, "203.0.113.7 - - [")) != NULL; at++)
        refused += strstr(at, "\n") > strstr(at, "\" 403 ") && strstr(at, "\" 403 ") != NULL;
    ck_assert_msg(refused == 2, "%s", lines); /* HTTP/1.1 and HTTP/2 */
    ck_assert_ptr_nonnull(strstr(lines, "2001:db9::7 - - ["));
    free(lines);
    test_recorder_stop(&b);
}
END_TEST

/* A request no location takes is judged by its server's rules: 403 before
 * 404. */
START_TEST(rules_without_a_location)
{
    struct test_daemon d;
    start(&d, "nolocation",
          ADMIN "server {\n    listen 127.0.0.1:0;\n    deny 127.0.0.1;\n"
                "    location = /only { return 200; }\n}\n");
    ck_assert_int_eq(get_after(d.port, "", 0, 0, 0, "/elsewhere", ""), 403);
    ck_assert_int_eq(get_after(d.port, "", 0, 0, 0, "/only", ""), 403);
    test_daemon_stop(&d);
}
END_TEST

static bool contains(const char *net_text, unsigned bits, const char *addr_text)
{
    struct access_net net = {.bits = (uint8_t)bits};
    if (strcmp(net_text, "all") == 0)
        net.family = AF_UNSPEC;
    else if (inet_pton(AF_INET, net_text, net.addr) == 1)
        net.family = AF_INET;
    else {
        ck_assert_int_eq(inet_pton(AF_INET6, net_text, net.addr), 1);
        net.family = AF_INET6;
    }
    union exchange_addr addr = {{0}};
    if (inet_pton(AF_INET, addr_text, &addr.in.sin_addr) == 1)
        addr.in.sin_family = AF_INET;
    else {
        ck_assert_int_eq(inet_pton(AF_INET6, addr_text, &addr.in6.sin6_addr), 1);
        addr.in6.sin6_family = AF_INET6;
    }
    return access_net_contains(&net, &addr.sa);
}

START_TEST(networks_contain_their_addresses)
{
    ck_assert(contains("10.0.0.0", 8, "10.255.1.2"));
    ck_assert(!contains("10.0.0.0", 8, "11.0.0.1"));
    ck_assert(contains("192.0.2.128", 25, "192.0.2.200"));
    ck_assert(!contains("192.0.2.128", 25, "192.0.2.127"));
    ck_assert(contains("192.0.2.7", 32, "192.0.2.7"));
    ck_assert(!contains("192.0.2.7", 32, "192.0.2.6"));
    ck_assert(contains("0.0.0.0", 0, "203.0.113.1"));
    ck_assert(!contains("0.0.0.0", 0, "2001:db8::1"));     /* families do not mix */
    ck_assert(contains("10.0.0.0", 8, "::ffff:10.1.1.1")); /* IPv4-mapped is IPv4 */
    ck_assert(contains("2001:db8::", 32, "2001:db8:ffff::1"));
    ck_assert(!contains("2001:db8::", 33, "2001:db8:8000::1"));
    ck_assert(contains("2001:db8::1", 128, "2001:db8::1"));
    ck_assert(!contains("2001:db8::1", 128, "2001:db8::2"));
    ck_assert(contains("all", 0, "2001:db8::2"));
    ck_assert(contains("all", 0, "192.0.2.1"));
}
END_TEST

/* ------------------------------------------------------------------ suite */

static void ignore_sigpipe(void)
{
    signal(SIGPIPE, SIG_IGN);
}

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/edge");
    TCase *parser = tcase_create("parsers");
    tcase_set_timeout(parser, 10);
    tcase_add_test(parser, parser_whole_bytewise_and_split);
    tcase_add_test(parser, parser_stops_at_the_header);
    tcase_add_test(parser, parser_v2_bound);
    tcase_add_test(parser, networks_contain_their_addresses);
    suite_add_tcase(suite, parser);

    TCase *pp = tcase_create("proxy_protocol");
    test_daemon_fixture(pp);
    tcase_add_unchecked_fixture(pp, certs_make, NULL);
    tcase_add_checked_fixture(pp, ignore_sigpipe, NULL);
    tcase_set_timeout(pp, 30);
    tcase_add_test(pp, v1_and_v2_set_the_client_address);
    tcase_add_test(pp, header_split_across_reads);
    tcase_add_test(pp, bad_headers_close_and_count);
    tcase_add_test(pp, without_the_parameter_a_header_is_refused);
    tcase_add_test(pp, http2_prior_knowledge_after_the_header);
    tcase_add_test(pp, tls_after_the_header);
    tcase_add_test(pp, tls_alpn_chooses_the_protocol);
    tcase_add_test(pp, real_ip_from_trusted_proxies_only);
    tcase_add_test(pp, real_ip_behind_a_proxy_protocol_balancer);
    tcase_add_test(pp, allow_and_deny_in_order);
    tcase_add_test(pp, allow_and_deny_apply_after_a_rewrite);
    tcase_add_test(pp, rules_without_a_location);
    suite_add_tcase(suite, pp);
    return suite;
}
