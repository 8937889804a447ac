/*
 * test_h2_client.c: the pieces of HTTP/2 to backends that need no socket:
 * a forwarded request head turned into HTTP/2 fields (h2_client_head_nv()),
 * what makes a request a gRPC call, and corral's own gRPC answers
 * (grpc_status.c) through a fake framer, and the HTTP/2 health probe fed
 * a backend's bytes (health_h2.c).  tests/proto/test_grpc.sh and
 * test_h2_upstream.sh run the rest against real clients and backends.
 */
#include "proto/upstream/grpc_status.h"
#include "proto/upstream/h2_client.h"
#include "proto/upstream/health_h2.h"

#include "tests/helpers.h"
#include "tests/proto/fake_framer.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields as "name=value;" text, for one comparison. */
static void nv_text(const struct hpack_field *nv, size_t n, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%.*s=%.*s;", (int)nv[i].name_len,
                                 (const char *)nv[i].name, (int)nv[i].value_len,
                                 (const char *)nv[i].value);
}

static const struct {
    const char *head, *scheme, *fields;
} heads[] = {
    /* pseudo-fields first, Host as :authority, names lowercased, what
     * HTTP/2 forbids dropped, te only as "trailers" */
    {"POST /helloworld.Greeter/SayHello HTTP/1.1\r\nHost: api:50051\r\n"
     "Content-Type: application/grpc\r\nTE: trailers\r\nConnection: keep-alive\r\n"
     "Keep-Alive: 5\r\nTransfer-Encoding: chunked\r\nUpgrade: h2c\r\n"
     "X-Forwarded-For: 10.0.0.1\r\n\r\n",
     "http",
     ":method=POST;:scheme=http;:authority=api:50051;:path=/helloworld.Greeter/SayHello;"
     "content-type=application/grpc;te=trailers;x-forwarded-for=10.0.0.1;"},
    {"GET /a?b=c HTTP/1.1\r\nTe: gzip\r\nhost: h\r\nContent-Length: 0\r\n\r\n", "https",
     ":method=GET;:scheme=https;:authority=h;:path=/a?b=c;content-length=0;"},
    /* no Host: an empty authority, which the backend may refuse */
    {"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", "http",
     ":method=GET;:scheme=http;:authority=;:path=/;accept=*/*;"},
    /* values trimmed as a field's are */
    {"GET / HTTP/1.1\r\nX-A:   spaced  \r\n\r\n", "http",
     ":method=GET;:scheme=http;:authority=;:path=/;x-a=spaced;"},
};

START_TEST(head_becomes_fields)
{
    char *head = strdup(heads[_i].head);
    struct hpack_field nv[16];
    size_t n = h2_client_head_nv(head, strlen(head), heads[_i].scheme, nv, 16);
    char text[1024];
    nv_text(nv, n, text, sizeof(text));
    ck_assert_str_eq(text, heads[_i].fields);
    free(head);
}
END_TEST

START_TEST(malformed_or_too_many_is_refused)
{
    char line_only[] = "GET\r\n\r\n";
    struct hpack_field nv[8];
    ck_assert_uint_eq(h2_client_head_nv(line_only, strlen(line_only), "http", nv, 8), 0);
    char no_line[] = "GET / HTTP/1.1";
    ck_assert_uint_eq(h2_client_head_nv(no_line, strlen(no_line), "http", nv, 8), 0);
    char many[] = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    ck_assert_uint_eq(h2_client_head_nv(many, strlen(many), "http", nv, 6), 0);
    ck_assert_uint_eq(h2_client_head_nv(many, strlen(many), "http", nv, 7), 7);
}
END_TEST

static const struct {
    const char *content_type; /* NULL: none */
    bool grpc;
} calls[] = {
    {"application/grpc", true},      {"application/grpc+proto", true},
    {"Application/GRPC; x=1", true}, {" application/grpc ", true},
    {"application/grpc-web", false}, {"application/json", false},
    {"application/grp", false},      {NULL, false},
};

START_TEST(grpc_call_by_content_type)
{
    struct http_header h[2] = {{{"Accept", 6}, {"*/*", 3}}};
    size_t n = 1;
    if (calls[_i].content_type != NULL)
        h[n++] = (struct http_header){{"content-type", 12},
                                      {calls[_i].content_type, strlen(calls[_i].content_type)}};
    struct http_request req = {.headers = h, .header_count = n};
    ck_assert_int_eq(grpc_status_call(&req), calls[_i].grpc);
}
END_TEST

START_TEST(http_statuses_map_to_grpc)
{
    ck_assert_int_eq(grpc_status_of_http(502), GRPC_STATUS_UNAVAILABLE);
    ck_assert_int_eq(grpc_status_of_http(504), GRPC_STATUS_DEADLINE_EXCEEDED);
    ck_assert_int_eq(grpc_status_of_http(503), GRPC_STATUS_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(grpc_status_of_http(429), GRPC_STATUS_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(grpc_status_of_http(413), GRPC_STATUS_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(grpc_status_of_http(403), GRPC_STATUS_PERMISSION_DENIED);
    ck_assert_int_eq(grpc_status_of_http(401), GRPC_STATUS_UNAUTHENTICATED);
    ck_assert_int_eq(grpc_status_of_http(404), GRPC_STATUS_UNIMPLEMENTED);
    ck_assert_int_eq(grpc_status_of_http(500), GRPC_STATUS_INTERNAL);
}
END_TEST

/* A trailers-only answer: 200, no body, the status in the head; an error
 * through the hook answers the same way, never with a page. */
START_TEST(trailers_only_answer)
{
    struct exchange ex = fake_exchange();
    grpc_status_respond(&ex, GRPC_STATUS_UNAVAILABLE, "Bad Gateway");
    ck_assert_uint_eq(fake_seen.status, 200);
    ck_assert_int_eq(fake_seen.content_length, 0);
    ck_assert_uint_eq(fake_seen.body_len, 0);
    ck_assert_int_eq(fake_seen.ends, 1);
    ck_assert_str_eq(fake_seen.headers, "Content-Type: application/grpc\r\nGrpc-Status: 14\r\n"
                                        "Grpc-Message: Bad Gateway\r\n");
    ex = fake_exchange();
    ex.error_hook = grpc_status_error_hook;
    exchange_respond_error(&ex, 403);
    ck_assert_uint_eq(fake_seen.status, 200);
    ck_assert_ptr_nonnull(strstr(fake_seen.headers, "Grpc-Status: 7\r\n"));
    ck_assert_ptr_nonnull(strstr(fake_seen.headers, "Grpc-Message: 403 Forbidden\r\n"));
    ck_assert_uint_eq(fake_seen.body_len, 0);
}
END_TEST

/* grpc.health.v1's answer as health_check type=grpc reads it: the 5-byte
 * prefix, then HealthCheckResponse { status = 1 }, other fields skipped. */
static const struct {
    const char *bytes;
    size_t len;
    int serving;
} answers[] = {
    {"\x00\x00\x00\x00\x02\x08\x01", 7, 1},
    {"\x00\x00\x00\x00\x02\x08\x02", 7, 2},
    {"\x00\x00\x00\x00\x00", 5, 0},                                      /* proto3 default */
    {"\x00\x00\x00\x00\x08\x12\x02hi\x08\x01\x18\x05", 13, 1},           /* fields around it */
    {"\x00\x00\x00\x00\x09\x19\x01\x02\x03\x04\x05\x06\x07\x08", 14, 0}, /* 64 bits */
    {"\x01\x00\x00\x00\x02\x08\x01", 7, -1},                             /* compressed */
    {"\x00\x00\x00\x00\x03\x08\x01", 7, -1},                             /* length too long */
    {"\x00\x00\x00\x00\x02\x08\x80", 7, -1},                             /* varint cut */
    {"\x00\x00\x00\x00\x02\x12\x05", 7, -1},                             /* string past the end */
    {"\x00\x00\x00\x00\x02\x08\x07", 7, -1},                             /* no such status */
    {"\x00\x00\x00\x00\x01\x0b", 6, -1},                                 /* group: not proto3 */
    {"\x00\x00\x00", 3, -1},
};

START_TEST(grpc_health_answer_is_read)
{
    /* An exact-size copy, so that ASan sees a read past the end. */
    uint8_t *copy = malloc(answers[_i].len);
    memcpy(copy, answers[_i].bytes, answers[_i].len);
    ck_assert_int_eq(health_h2_serving(copy, answers[_i].len), answers[_i].serving);
    free(copy);
}
END_TEST

/* A backend's answer to a probe, as bytes: SETTINGS, its ACK, then a
 * response head (`fields`, "name", "value" pairs), a gRPC message and
 * trailers on stream 1. */
struct wire {
    uint8_t bytes[2048];
    size_t len;
};

static void wire_write(void *arg, const struct iovec *iov, int count)
{
    struct wire *w = arg;
    for (int i = 0; i < count; i++) {
        ck_assert_uint_le(w->len + iov[i].iov_len, sizeof(w->bytes));
        memcpy(w->bytes + w->len, iov[i].iov_base, iov[i].iov_len);
        w->len += iov[i].iov_len;
    }
}

static void wire_head(struct wire *w, struct hpack_encoder *e, const char *const *nv, size_t n,
                      bool end)
{
    struct hpack_field f[8];
    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++)
        f[i] = (struct hpack_field){(const uint8_t *)nv[2 * i], strlen(nv[2 * i]),
                                    (const uint8_t *)nv[2 * i + 1], strlen(nv[2 * i + 1]), false};
    uint8_t block[512];
    ck_assert_uint_le(hpack_encode_bound(f, n), sizeof(block));
    size_t len = hpack_encode(e, f, NULL, n, block);
    const struct h2_sink sink = {wire_write, w};
    h2_frame_write_headers(&sink, 1, block, len, end, H2_MIN_FRAME_SIZE);
}

static void wire_grpc_answer(struct wire *w, const char *const *head, size_t n)
{
    const struct h2_sink sink = {wire_write, w};
    struct hpack_encoder e;
    hpack_encoder_init(&e, 0);
    h2_frame_write_settings(&sink, NULL, NULL, 0);
    h2_frame_write_settings_ack(&sink);
    wire_head(w, &e, head, n, false);
    static const char message[] = "\x00\x00\x00\x00\x02\x08\x01"; /* SERVING */
    struct iovec iov = {(void *)message, 7};
    h2_frame_write_data(&sink, 1, &iov, 1, false, H2_MIN_FRAME_SIZE);
    static const char *const trailers[] = {"grpc-status", "0"};
    wire_head(w, &e, trailers, 1, true);
    hpack_encoder_free(&e);
}

/* A gRPC health answer read whole, however its bytes are cut: one at a
 * time, the rest of a frame kept between inputs. */
START_TEST(grpc_health_probe_reads_an_answer_in_pieces)
{
    static const char *const head[] = {":status", "200", "content-type", "application/grpc"};
    struct wire w = {.len = 0};
    wire_grpc_answer(&w, head, 2);
    for (size_t step = 1; step <= w.len; step = step * 3 + 1) {
        struct health_h2 *h;
        ck_assert_int_eq(health_h2_new(true, "http", "a:1", "/", "svc", &h), 0);
        const uint8_t *out;
        ssize_t n = health_h2_output(h, &out);
        ck_assert_int_gt(n, 24);
        ck_assert_mem_eq(out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
        ck_assert_int_eq(health_h2_output(h, &out), 0); /* handed out once */
        struct health_h2_answer answer = {0};
        int rc = 0;
        for (size_t at = 0; at < w.len && rc == 0; at += step) {
            size_t piece = w.len - at < step ? w.len - at : step;
            rc = health_h2_input(h, (const char *)w.bytes + at, piece, &answer);
            while (health_h2_output(h, &out) > 0) /* the SETTINGS ACK */
                ;
        }
        ck_assert_msg(rc == 1, "step %zu: %d", step, rc);
        ck_assert_uint_eq(answer.status, 200);
        ck_assert_int_eq(answer.grpc_status, 0);
        ck_assert_int_eq(answer.serving, 1);
        health_h2_free(h);
    }
}
END_TEST

/* A malformed answer fails the probe (RFC 9113 8.3.2). */
START_TEST(health_probe_fails_a_malformed_answer)
{
    static const char *const bad[][4] = {
        {":status", "200", ":path", "/"},
        {":status", "2000", "x", "1"},
        {"x", "1", ":status", "200"},
        {":status", "200", "connection", "close"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct wire w = {.len = 0};
        wire_grpc_answer(&w, bad[i], 2);
        struct health_h2 *h;
        ck_assert_int_eq(health_h2_new(true, "http", "a:1", "/", "", &h), 0);
        struct health_h2_answer answer = {0};
        ck_assert_int_eq(health_h2_input(h, (const char *)w.bytes, w.len, &answer), -1);
        health_h2_free(h);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("h2_client");
    TCase *tc = tcase_create("heads");
    tcase_add_loop_test(tc, head_becomes_fields, 0, (int)(sizeof(heads) / sizeof(heads[0])));
    tcase_add_test(tc, malformed_or_too_many_is_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("grpc");
    tcase_add_loop_test(tc, grpc_call_by_content_type, 0, (int)(sizeof(calls) / sizeof(calls[0])));
    tcase_add_test(tc, http_statuses_map_to_grpc);
    tcase_add_test(tc, trailers_only_answer);
    tcase_add_loop_test(tc, grpc_health_answer_is_read, 0,
                        (int)(sizeof(answers) / sizeof(answers[0])));
    tcase_add_test(tc, grpc_health_probe_reads_an_answer_in_pieces);
    tcase_add_test(tc, health_probe_fails_a_malformed_answer);
    suite_add_tcase(s, tc);
    return s;
}
