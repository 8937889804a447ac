/*
 * test_trace_daemon.c: tracing through the daemon: a fake OpenTelemetry
 * collector in this process (a thread that keeps every POST body), a
 * backend that is a second daemon echoing the trace headers it gets, and
 * corral between them.  The spans must carry the incoming trace, their
 * parents, attributes and times, a client span per upstream attempt; the
 * backend must get a traceparent of the same trace; and with the
 * collector down, requests are answered as fast and the drops counted.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------- the collector */

struct collector {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t lock;
    json_t *spans; /* every span of every POST /v1/traces, in order */
    int posts;
    char content_type[64];
};

/* Reads a request head and its Content-Length body from `fd`: the body
 * (malloc'd) and its length, or NULL. */
static char *read_request(int fd, size_t *body_len, char *content_type, size_t type_size)
{
    char head[8192];
    size_t len = 0;
    char *end = NULL;
    while (end == NULL && len < sizeof(head) - 1) {
        ssize_t n = recv(fd, head + len, sizeof(head) - 1 - len, 0);
        if (n <= 0)
            return NULL;
        len += (size_t)n;
        head[len] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    if (end == NULL || strncmp(head, "POST /v1/traces HTTP/1.1\r\n", 26) != 0)
        return NULL;
    const char *cl = strcasestr(head, "\r\nContent-Length: ");
    const char *ct = strcasestr(head, "\r\nContent-Type: ");
    if (cl == NULL || ct == NULL)
        return NULL;
    snprintf(content_type, type_size, "%.*s", (int)strcspn(ct + 16, "\r"), ct + 16);
    size_t want = strtoul(cl + 18, NULL, 10);
    char *body = malloc(want + 1);
    size_t have = len - (size_t)(end + 4 - head);
    memcpy(body, end + 4, have);
    while (have < want) {
        ssize_t n = recv(fd, body + have, want - have, 0);
        if (n <= 0) {
            free(body);
            return NULL;
        }
        have += (size_t)n;
    }
    *body_len = want;
    return body;
}

static void *collector_main(void *arg)
{
    struct collector *c = arg;
    for (;;) {
        int fd = accept(c->fd, NULL, NULL);
        if (fd < 0)
            return NULL; /* the listener was shut down */
        size_t len;
        char type[64] = "";
        char *body = read_request(fd, &len, type, sizeof(type));
        json_t *doc = body != NULL ? json_loadb(body, len, 0, NULL) : NULL;
        pthread_mutex_lock(&c->lock);
        c->posts++;
        snprintf(c->content_type, sizeof(c->content_type), "%s", type);
        json_t *rs = json_array_get(json_object_get(doc, "resourceSpans"), 0);
        json_t *spans =
            json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0), "spans");
        size_t i;
        json_t *span;
        json_array_foreach(spans, i, span)
        {
            json_array_append(c->spans, span);
        }
        pthread_mutex_unlock(&c->lock);
        static const char ok[] =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
        if (doc != NULL)
            send(fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL);
        json_decref(doc);
        free(body);
        close(fd);
    }
}

static void collector_start(struct collector *c)
{
    c->fd = test_listen(&c->port, 16);
    c->spans = json_array();
    pthread_mutex_init(&c->lock, NULL);
    ck_assert_int_eq(pthread_create(&c->thread, NULL, collector_main, c), 0);
}

static void collector_stop(struct collector *c)
{
    shutdown(c->fd, SHUT_RDWR);
    pthread_join(c->thread, NULL);
    close(c->fd);
    json_decref(c->spans);
}

static size_t collector_count(struct collector *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = json_array_size(c->spans);
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* ------------------------------------------------------------- helpers */

/* One request with extra header lines (each ending in CRLF) on a new
 * connection: the status, the whole response in `out`. */
static int request(int port, const char *path, const char *headers, char *out, size_t size)
{
    int fd = test_connect(port);
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: t.example\r\n%sConnection: close\r\n\r\n", path,
                     headers);
    test_send_all(fd, req, (size_t)n);
    size_t got = test_recv_all(fd, out, size - 1);
    out[got] = '\0';
    close(fd);
    int status = 0;
    sscanf(out, "HTTP/1.1 %d", &status);
    return status;
}

static const char *str(json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s != NULL ? s : "";
}

/* The value of attribute `key` of `span`, as text (an intValue is a
 * string in OTLP/JSON); NULL when absent. */
static const char *attr(json_t *span, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(span, "attributes"), i, a)
    {
        if (strcmp(str(a, "key"), key) != 0)
            continue;
        json_t *v = json_object_get(a, "value");
        json_t *s = json_object_get(v, "stringValue");
        return json_string_value(s != NULL ? s : json_object_get(v, "intValue"));
    }
    return NULL;
}

static void assert_times(json_t *span)
{
    unsigned long long start = strtoull(str(span, "startTimeUnixNano"), NULL, 10);
    unsigned long long end = strtoull(str(span, "endTimeUnixNano"), NULL, 10);
    ck_assert_uint_gt(start, 1600000000ull * 1000000000ull); /* a Unix time */
    ck_assert_uint_ge(end, start);
}

static uint64_t metric(const struct test_daemon *d, const char *name)
{
    char body[65536];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", body, sizeof(body)), 200);
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *at = strstr(body, key);
    ck_assert_msg(at != NULL, "%s missing", name);
    return strtoull(at + strlen(key), NULL, 10);
}

static void start(struct test_daemon *d, const char *name, const char *text)
{
    test_daemon_init(d, name);
    test_daemon_write_config(d, text);
    test_daemon_start(d);
}

#define INCOMING_TRACE  "0af7651916cd43dd8448eb211c80319c"
#define INCOMING_PARENT "b7ad6b7169203331"

/* ---------------------------------------------------------------- cases */

/* An incoming traceparent: its trace goes on, to the collector and the
 * backend; the first server refuses, so the proxy's retry makes a second
 * client span. */
START_TEST(spans_carry_the_incoming_trace)
{
    struct collector c = {0};
    collector_start(&c);
    struct test_daemon backend, d;
    start(&backend, "backend",
          "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
          "server { listen 127.0.0.1:0; location / {"
          " return 200 \"tp=$http_traceparent ts=$http_tracestate\"; } }\n");
    int refused_port;
    close(test_reserve_port(&refused_port));
    char text[2048];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "otel_exporter { endpoint 127.0.0.1:%d; interval 20ms; }\n"
             "otel_service_name edge;\n"
             "otel_trace on;\notel_trace_context propagate;\n"
             "upstream be { server 127.0.0.1:%d; server 127.0.0.1:%d; }\n"
             "server { listen 127.0.0.1:0;\n"
             "  location /api { proxy_pass http://be; otel_span_attr team \"t-$request_method\";"
             " add_header X-Trace $otel_trace_id; add_header X-Span $otel_span_id;"
             " add_header X-Parent $otel_parent_id; add_header X-Sampled $otel_parent_sampled;"
             " add_header X-Alias $trace_id; } }\n",
             c.port, refused_port, backend.port);
    start(&d, "corral", text);

    char out[8192];
    ck_assert_int_eq(
        request(d.port, "/api/x?q=1",
                "traceparent: 00-" INCOMING_TRACE "-" INCOMING_PARENT "-01\r\n"
                "tracestate: congo=t61rcWkgMzE\r\ntracestate: rojo=00f067aa0ba902b7\r\n",
                out, sizeof(out)),
        200);
    ck_assert_msg(strstr(out, "X-Trace: " INCOMING_TRACE "\r\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "X-Alias: " INCOMING_TRACE "\r\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "X-Parent: " INCOMING_PARENT "\r\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "X-Sampled: 1\r\n") != NULL, "%s", out);
    char span_id[17] = "";
    const char *x_span = strstr(out, "X-Span: ");
    ck_assert_ptr_nonnull(x_span);
    memcpy(span_id, x_span + 8, 16);
    /* The backend got our span as parent, and the tracestate as sent. */
    char expect[256];
    snprintf(expect, sizeof(expect),
             "tp=00-" INCOMING_TRACE "-%s-01 ts=congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", span_id);
    ck_assert_msg(strstr(out, expect) != NULL, "%s", out);

    test_wait_for(collector_count(&c) >= 3, TEST_WAIT_MS, "spans: %zu", collector_count(&c));
    pthread_mutex_lock(&c.lock);
    ck_assert_str_eq(c.content_type, "application/json");
    ck_assert_uint_eq(json_array_size(c.spans), 3);
    json_t *server = NULL, *clients[2] = {NULL, NULL};
    size_t i, n = 0;
    json_t *span;
    json_array_foreach(c.spans, i, span)
    {
        ck_assert_str_eq(str(span, "traceId"), INCOMING_TRACE);
        assert_times(span);
        if (json_integer_value(json_object_get(span, "kind")) == 2)
            server = span;
        else if (n < 2)
            clients[n++] = span;
    }
    ck_assert_ptr_nonnull(server);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(str(server, "spanId"), span_id);
    ck_assert_str_eq(str(server, "parentSpanId"), INCOMING_PARENT);
    ck_assert_str_eq(str(server, "name"), "/api");
    ck_assert_str_eq(attr(server, "http.request.method"), "GET");
    ck_assert_str_eq(attr(server, "url.path"), "/api/x");
    ck_assert_str_eq(attr(server, "http.route"), "/api");
    ck_assert_str_eq(attr(server, "http.response.status_code"), "200");
    ck_assert_str_eq(attr(server, "server.address"), "t.example");
    ck_assert_str_eq(attr(server, "client.address"), "127.0.0.1");
    ck_assert_str_eq(attr(server, "network.protocol.version"), "1.1");
    ck_assert_str_eq(attr(server, "team"), "t-GET");
    char port[16];
    for (int k = 0; k < 2; k++) {
        ck_assert_str_eq(str(clients[k], "parentSpanId"), span_id);
        ck_assert_str_ne(str(clients[k], "spanId"), span_id);
        ck_assert_str_eq(attr(clients[k], "server.address"), "127.0.0.1");
    }
    snprintf(port, sizeof(port), "%d", refused_port);
    ck_assert_str_eq(attr(clients[0], "server.port"), port);
    ck_assert_str_eq(attr(clients[0], "http.response.status_code"), "502");
    ck_assert_ptr_nonnull(json_object_get(clients[0], "status"));
    snprintf(port, sizeof(port), "%d", backend.port);
    ck_assert_str_eq(attr(clients[1], "server.port"), port);
    ck_assert_str_eq(attr(clients[1], "http.response.status_code"), "200");
    ck_assert_str_eq(attr(clients[1], "http.request.resend_count"), "1");
    /* Both attempts lie within the server span. */
    ck_assert_str_ge(str(clients[0], "startTimeUnixNano"), str(server, "startTimeUnixNano"));
    ck_assert_str_le(str(clients[1], "endTimeUnixNano"), str(server, "endTimeUnixNano"));
    pthread_mutex_unlock(&c.lock);
    test_wait_for(metric(&d, "corral_otel_spans_exported_total") == 3, TEST_WAIT_MS,
                  "exported count");
    test_daemon_stop(&d);
    test_daemon_stop(&backend);
    collector_stop(&c);
}
END_TEST

/* Without a traceparent (or with a malformed one) a new trace starts,
 * its id $request_id's; ignore, the default, sends the backend nothing. */
START_TEST(new_trace_without_a_valid_traceparent)
{
    struct collector c = {0};
    collector_start(&c);
    struct test_daemon backend, d;
    start(&backend, "backend",
          "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
          "server { listen 127.0.0.1:0; location / { return 200 \"tp=[$http_traceparent]\"; } }\n");
    char text[2048];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "otel_exporter { endpoint 127.0.0.1:%d; interval 20ms; }\n"
             "server { listen 127.0.0.1:0; otel_trace on;\n"
             "  location /p { otel_trace_context propagate; proxy_pass http://127.0.0.1:%d;"
             " add_header X-Trace $otel_trace_id; add_header X-Id $request_id; }\n"
             "  location /i { proxy_pass http://127.0.0.1:%d; } }\n",
             c.port, backend.port, backend.port);
    start(&d, "corral", text);
    char out[8192];
    ck_assert_int_eq(request(d.port, "/p",
                             "traceparent: 00-" INCOMING_TRACE "-0000000000000000-01\r\n", out,
                             sizeof(out)),
                     200);
    const char *trace = strstr(out, "X-Trace: ");
    const char *id = strstr(out, "X-Id: ");
    ck_assert_msg(trace != NULL && id != NULL, "%s", out);
    ck_assert_int_eq(strncmp(trace + 9, id + 6, 32), 0);
    ck_assert_int_ne(strncmp(trace + 9, INCOMING_TRACE, 32), 0);
    char expect[64], trace_id[33];
    snprintf(trace_id, sizeof(trace_id), "%.32s", trace + 9);
    snprintf(expect, sizeof(expect), "tp=[00-%s-", trace_id);
    ck_assert_msg(strstr(out, expect) != NULL, "%s", out);
    /* ignore: the client's header goes on as it is, nothing of ours. */
    ck_assert_int_eq(request(d.port, "/i", "", out, sizeof(out)), 200);
    ck_assert_msg(strstr(out, "tp=[]") != NULL, "%s", out);
    ck_assert_int_eq(request(d.port, "/i",
                             "traceparent: 00-" INCOMING_TRACE "-" INCOMING_PARENT "-01\r\n", out,
                             sizeof(out)),
                     200);
    ck_assert_msg(strstr(out, "tp=[00-" INCOMING_TRACE "-" INCOMING_PARENT "-01]") != NULL, "%s",
                  out);
    test_wait_for(collector_count(&c) >= 6, TEST_WAIT_MS, "spans: %zu", collector_count(&c));
    pthread_mutex_lock(&c.lock);
    json_t *first = json_array_get(c.spans, 1); /* the server span of /p */
    ck_assert_str_eq(str(first, "name"), "/p");
    ck_assert_str_eq(str(first, "traceId"), trace_id);
    ck_assert_ptr_null(json_object_get(first, "parentSpanId"));
    pthread_mutex_unlock(&c.lock);
    test_daemon_stop(&d);
    test_daemon_stop(&backend);
    collector_stop(&c);
}
END_TEST

/* otel_trace $variable and otel_sampler decide which requests are
 * recorded; one worker exports in order, so once the recorded ones have
 * arrived, any recorded before them would have too. */
START_TEST(variable_and_sampler_decide)
{
    struct collector c = {0};
    collector_start(&c);
    struct test_daemon d;
    char text[2048];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "otel_exporter { endpoint 127.0.0.1:%d; interval 20ms; }\n"
             "server { listen 127.0.0.1:0;\n"
             "  location /v { otel_trace $arg_t; return 200; }\n"
             "  location /s { otel_trace on; otel_sampler ratio=0; return 200; }\n"
             "  location /pb { otel_trace on; otel_sampler parent_based ratio=0;"
             " otel_trace_context extract; return 200; } }\n",
             c.port);
    start(&d, "corral", text);
    char out[4096];
    const char *unsampled = "traceparent: 00-" INCOMING_TRACE "-" INCOMING_PARENT "-00\r\n";
    const char *sampled = "traceparent: 00-" INCOMING_TRACE "-" INCOMING_PARENT "-01\r\n";
    ck_assert_int_eq(request(d.port, "/v?t=0", "", out, sizeof(out)), 200);
    ck_assert_int_eq(request(d.port, "/s", "", out, sizeof(out)), 200);
    ck_assert_int_eq(request(d.port, "/pb", "", out, sizeof(out)), 200);
    ck_assert_int_eq(request(d.port, "/pb", unsampled, out, sizeof(out)), 200);
    ck_assert_int_eq(request(d.port, "/v?t=on", "", out, sizeof(out)), 200);
    ck_assert_int_eq(request(d.port, "/pb", sampled, out, sizeof(out)), 200);
    test_wait_for(collector_count(&c) >= 2, TEST_WAIT_MS, "spans: %zu", collector_count(&c));
    pthread_mutex_lock(&c.lock);
    ck_assert_uint_eq(json_array_size(c.spans), 2);
    ck_assert_str_eq(str(json_array_get(c.spans, 0), "name"), "/v");
    ck_assert_str_eq(str(json_array_get(c.spans, 1), "name"), "/pb");
    ck_assert_str_eq(str(json_array_get(c.spans, 1), "traceId"), INCOMING_TRACE);
    pthread_mutex_unlock(&c.lock);
    test_daemon_stop(&d);
    collector_stop(&c);
}
END_TEST

/* The collector is down: requests are answered as before, in bounded
 * time; what does not fit the queue is dropped and counted. */
START_TEST(collector_down_drops_are_counted)
{
    struct test_daemon backend, d;
    start(&backend, "backend",
          "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
          "server { listen 127.0.0.1:0; location / { return 200 ok; } }\n");
    int down;
    close(test_reserve_port(&down));
    char text[2048];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "otel_exporter { endpoint 127.0.0.1:%d; interval 10ms; batch_size 2;"
             " batch_count 2; }\n"
             "otel_trace on;\n"
             "server { listen 127.0.0.1:0; location / { proxy_pass http://127.0.0.1:%d; } }\n",
             down, backend.port);
    start(&d, "corral", text);
    char out[4096];
    for (int i = 0; i < 20; i++) {
        uint64_t before = test_now_ms();
        ck_assert_int_eq(request(d.port, "/", "", out, sizeof(out)), 200);
        /* Nothing waits on the collector: far below its 10 s timeout
         * and its backoff, even under a sanitizer. */
        ck_assert_uint_lt(test_now_ms() - before, 1000);
    }
    /* 40 spans (server and client), 4 queued at most. */
    test_wait_for(metric(&d, "corral_otel_spans_dropped_total") >= 36, TEST_WAIT_MS,
                  "dropped: %llu",
                  (unsigned long long)metric(&d, "corral_otel_spans_dropped_total"));
    test_wait_for(metric(&d, "corral_otel_exports_failed_total") >= 1, TEST_WAIT_MS, "failed");
    ck_assert_uint_eq(metric(&d, "corral_otel_spans_exported_total"), 0);
    test_daemon_stop(&d);
    test_daemon_stop(&backend);
}
END_TEST

/* A collector that takes the connection and never answers holds a
 * stopping daemon for 1 s at most, not for the export's 10 s timeout
 * (nor the 10 s drain_timeout). */
START_TEST(stop_does_not_wait_for_a_silent_collector)
{
    int silent_port;
    int silent = test_listen(&silent_port, 4);
    struct test_daemon d;
    char text[1024];
    snprintf(text, sizeof(text),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "otel_exporter { endpoint 127.0.0.1:%d; interval 10ms; }\n"
             "otel_trace on;\n"
             "server { listen 127.0.0.1:0; location / { return 200; } }\n",
             silent_port);
    start(&d, "corral", text);
    char out[4096];
    ck_assert_int_eq(request(d.port, "/", "", out, sizeof(out)), 200);
    /* The export's connection arrives; it is taken and never answered. */
    struct pollfd p = {.fd = silent, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, TEST_WAIT_MS), 1);
    int held = accept(silent, NULL, NULL);
    ck_assert_int_ge(held, 0);
    uint64_t before = test_now_ms();
    test_daemon_stop(&d);
    ck_assert_uint_lt(test_now_ms() - before, 5000);
    close(held);
    close(silent);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/trace_daemon");
    TCase *tc = tcase_create("trace_daemon");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, spans_carry_the_incoming_trace);
    tcase_add_test(tc, new_trace_without_a_valid_traceparent);
    tcase_add_test(tc, variable_and_sampler_decide);
    tcase_add_test(tc, collector_down_drops_are_counted);
    tcase_add_test(tc, stop_does_not_wait_for_a_silent_collector);
    suite_add_tcase(suite, tc);
    return suite;
}
