/*
 * test_trace.c: the tracing module's parts that need no socket: the
 * traceparent parser (a table of values, and every shorter prefix of a
 * valid one), tracestate's syntax and bound, the sampling decision, the
 * OTLP/JSON of a span and a batch (read back with jansson), and the
 * directives as conf/ parses, inherits and refuses them.
 */
#include "../helpers.h"
#include "conf/config.h"
#include "proto/http/module.h"
#include "proto/policy/return.h"
#include "proto/policy/trace.h"
#include "proto/policy/trace_context.h"
#include "proto/policy/trace_sample.h"
#include "proto/policy/trace_span.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- traceparent */

START_TEST(traceparent_table)
{
    static const struct {
        const char *text;
        bool ok;
        uint8_t flags;
    } cases[] = {
        {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", true, 1},
        {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", true, 0},
        {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff", true, 0xff},
        /* uppercase hex is not the specification's */
        {"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", false, 0},
        {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0A", false, 0},
        /* all-zero ids are invalid */
        {"00-00000000000000000000000000000000-b7ad6b7169203331-01", false, 0},
        {"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false, 0},
        /* versions: ff is forbidden, others are not corral's to parse */
        {"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false, 0},
        {"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false, 0},
        /* lengths and separators */
        {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-", false, 0},
        {"00-0af7651916cd43dd8448eb211c80319-cb7ad6b7169203331-01", false, 0},
        {"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false, 0},
        {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333g-01", false, 0},
        {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331- 1", false, 0},
        {"", false, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct trace_context ctx;
        bool ok = traceparent_parse(cases[i].text, strlen(cases[i].text), &ctx);
        ck_assert_msg(ok == cases[i].ok, "%s", cases[i].text);
        if (!ok)
            continue;
        ck_assert_uint_eq(ctx.flags, cases[i].flags);
        char again[TRACEPARENT_LEN + 1];
        traceparent_format(&ctx, again);
        ck_assert_str_eq(again, cases[i].text);
    }
    struct trace_context ctx;
    const char *valid = cases[0].text;
    ck_assert(traceparent_parse(valid, strlen(valid), &ctx));
    ck_assert_uint_eq(ctx.trace_id[0], 0x0a);
    ck_assert_uint_eq(ctx.trace_id[15], 0x9c);
    ck_assert_uint_eq(ctx.span_id[0], 0xb7);
    ck_assert_uint_eq(ctx.span_id[7], 0x31);
    /* Every shorter prefix of a valid value is refused. */
    for (size_t len = 0; len < TRACEPARENT_LEN; len++)
        ck_assert_msg(!traceparent_parse(valid, len, &ctx), "prefix of %zu bytes", len);
}
END_TEST

START_TEST(tracestate_syntax)
{
    static const struct {
        const char *text;
        bool ok;
    } cases[] = {
        {"congo=t61rcWkgMzE", true},
        {"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", true},
        {"rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE", true},
        {"a=1,,b=2", true}, /* empty members are allowed */
        {"tenant1@vendor=x", true},
        {"1tenant@vendor=x", true},
        {"a=va lue", true},
        {"", true},
        {"A=1", false},                 /* uppercase key */
        {"1a=1", false},                /* a simple key starts with a letter */
        {"a=1,a=2", false},             /* a key twice */
        {"a", false},                   /* no value */
        {"a=", false},                  /* empty value */
        {"a=b=c", false},               /* '=' in a value */
        {"a=x ", true},                 /* OWS after the member */
        {"a=\x01", false},              /* control character */
        {"t@1vendor=x", false},         /* a system id starts with a letter */
        {"t@vendorvendor123=x", false}, /* a system id of 15 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ck_assert_msg(tracestate_valid(cases[i].text, strlen(cases[i].text)) == cases[i].ok, "%s",
                      cases[i].text);
    /* At most 32 members, and TRACESTATE_MAX bytes. */
    char many[512];
    size_t len = 0;
    for (int i = 0; i < 32; i++)
        len += (size_t)snprintf(many + len, sizeof(many) - len, "%sk%d=v", i ? "," : "", i);
    ck_assert(tracestate_valid(many, len));
    len += (size_t)snprintf(many + len, sizeof(many) - len, ",k32=v");
    ck_assert(!tracestate_valid(many, len));
    char big[TRACESTATE_MAX + 2];
    memset(big, 'x', sizeof(big));
    memcpy(big, "a=", 2);
    ck_assert(!tracestate_valid(big, 258 + 2)); /* a value of more than 256 */
    char longest[TRACESTATE_MAX + 1];
    len = 0;
    for (int i = 0; i < 16; i++) /* 16 members of 31 bytes and their commas */
        len += (size_t)snprintf(longest + len, sizeof(longest) - len, "%sk%02d=%s", i ? "," : "", i,
                                "vvvvvvvvvvvvvvvvvvvvvvvvvvv");
    ck_assert_uint_eq(len, TRACESTATE_MAX - 1);
    ck_assert(tracestate_valid(longest, len));
    memset(big, ' ', sizeof(big));
    memcpy(big, "a=1", 3);
    ck_assert(tracestate_valid(big, TRACESTATE_MAX));
    ck_assert(!tracestate_valid(big, TRACESTATE_MAX + 1));
}
END_TEST

/* ------------------------------------------------------------- sampling */

START_TEST(sampler_decides_by_trace_id)
{
    uint8_t id[16] = {0};
    struct trace_sampler all = trace_sampler_ratio(1.0, false);
    struct trace_sampler none = trace_sampler_ratio(0.0, false);
    struct trace_sampler half = trace_sampler_ratio(0.5, false);
    ck_assert(trace_sample(&all, id, false, false));
    ck_assert(!trace_sample(&none, id, false, false));
    id[8] = 0x7f; /* the random part below half */
    ck_assert(trace_sample(&half, id, false, false));
    id[8] = 0x80;
    ck_assert(!trace_sample(&half, id, false, false));
    id[0] = 0xff; /* the high half does not count */
    ck_assert(!trace_sample(&half, id, false, false));
    /* Parent-based: an incoming decision wins, else the ratio. */
    struct trace_sampler parent = trace_sampler_ratio(0.0, true);
    ck_assert(trace_sample(&parent, id, true, true));
    ck_assert(!trace_sample(&parent, id, true, false));
    ck_assert(!trace_sample(&parent, id, false, false));
    ck_assert(!trace_sample(&none, id, true, true)); /* a plain ratio ignores the parent */
    /* Over many ids, about the ratio. */
    struct trace_sampler quarter = trace_sampler_ratio(0.25, false);
    unsigned kept = 0;
    uint64_t x = 88172645463325252u;
    for (int i = 0; i < 10000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        for (int b = 0; b < 8; b++)
            id[8 + b] = (uint8_t)(x >> (8 * b));
        kept += trace_sample(&quarter, id, false, false);
    }
    ck_assert_uint_gt(kept, 2200);
    ck_assert_uint_lt(kept, 2800);
}
END_TEST

/* ----------------------------------------------------------------- JSON */

START_TEST(span_json_is_otlp)
{
    struct trace_attr attrs[] = {
        {.key = "http.request.method", .str = {"GET", 3}},
        {.key = "http.response.status_code", .is_int = true, .num = 503},
        {.key = "evil", .str = {"a\"b\\c\n\x01\xff", 8}},
    };
    struct trace_span span = {.kind = TRACE_SPAN_CLIENT,
                              .name = {"GET", 3},
                              .has_parent = true,
                              .start_ns = 1700000000000000001u,
                              .end_ns = 1700000000000000002u,
                              .error = true,
                              .attrs = attrs,
                              .attr_count = 3};
    memset(span.trace_id, 0xab, 16);
    memset(span.span_id, 0x01, 8);
    memset(span.parent_id, 0xfe, 8);
    struct vars_buf out;
    vars_buf_init(&out, NULL, 0);
    trace_span_batch_open(&out, "svc \"one\"");
    trace_span_json(&span, &out);
    vars_buf_add(&out, ",", 1);
    span.has_parent = false;
    span.error = false;
    span.end_ns = 5; /* before its start: written as its start */
    trace_span_json(&span, &out);
    trace_span_batch_close(&out);
    json_error_t error;
    json_t *doc = json_loadb(out.data, out.len, 0, &error);
    ck_assert_msg(doc != NULL, "%s: %.*s", error.text, (int)out.len, out.data);
    json_t *rs = json_array_get(json_object_get(doc, "resourceSpans"), 0);
    json_t *svc = json_array_get(json_object_get(json_object_get(rs, "resource"), "attributes"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(svc, "key")), "service.name");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(svc, "value"), "stringValue")),
        "svc \"one\"");
    json_t *spans = json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0), "spans");
    ck_assert_uint_eq(json_array_size(spans), 2);
    json_t *s = json_array_get(spans, 0);
    ck_assert_str_eq(json_string_value(json_object_get(s, "traceId")),
                     "abababababababababababababababab");
    ck_assert_str_eq(json_string_value(json_object_get(s, "spanId")), "0101010101010101");
    ck_assert_str_eq(json_string_value(json_object_get(s, "parentSpanId")), "fefefefefefefefe");
    ck_assert_int_eq(json_integer_value(json_object_get(s, "kind")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(s, "startTimeUnixNano")),
                     "1700000000000000001");
    ck_assert_str_eq(json_string_value(json_object_get(s, "endTimeUnixNano")),
                     "1700000000000000002");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(s, "status"), "code")), 2);
    json_t *a = json_object_get(s, "attributes");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_array_get(a, 1), "value"), "intValue")),
                     "503");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_array_get(a, 2), "value"), "stringValue")),
                     "a\"b\\c\n\x01\xef\xbf\xbd");
    json_t *second = json_array_get(spans, 1);
    ck_assert_ptr_null(json_object_get(second, "parentSpanId"));
    ck_assert_ptr_null(json_object_get(second, "status"));
    ck_assert_str_eq(json_string_value(json_object_get(second, "endTimeUnixNano")),
                     "1700000000000000001");
    json_decref(doc);
    vars_buf_free(&out);
}
END_TEST

/* Strings are cut at TRACE_SPAN_STRING_MAX bytes and attributes at
 * TRACE_SPAN_ATTRS_MAX, whatever a client sent. */
START_TEST(span_json_is_bounded)
{
    static char huge[100000];
    memset(huge, 'x', sizeof(huge));
    struct trace_attr attrs[TRACE_SPAN_ATTRS_MAX + 10];
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
        attrs[i] = (struct trace_attr){.key = "k", .str = {huge, sizeof(huge)}};
    struct trace_span span = {.kind = TRACE_SPAN_SERVER,
                              .name = {huge, sizeof(huge)},
                              .attrs = attrs,
                              .attr_count = sizeof(attrs) / sizeof(attrs[0])};
    struct vars_buf out;
    vars_buf_init(&out, NULL, 0);
    trace_span_json(&span, &out);
    ck_assert_uint_lt(out.len, 1024 + (TRACE_SPAN_ATTRS_MAX + 1) * (TRACE_SPAN_STRING_MAX + 64));
    json_error_t error;
    json_t *doc = json_loadb(out.data, out.len, 0, &error);
    ck_assert_msg(doc != NULL, "%s", error.text);
    ck_assert_uint_eq(json_array_size(json_object_get(doc, "attributes")), TRACE_SPAN_ATTRS_MAX);
    ck_assert_uint_eq(strlen(json_string_value(json_object_get(doc, "name"))),
                      TRACE_SPAN_STRING_MAX);
    json_decref(doc);
    vars_buf_free(&out);
}
END_TEST

/* ----------------------------------------------------------- directives */

static struct conf_config *parse(const char *text, struct conf_error *error)
{
    ck_assert_int_eq(conf_module_register(&trace_module.conf), 0);
    ck_assert_int_eq(conf_module_register(&return_module.conf), 0);
    struct conf_config *config = NULL;
    if (conf_parse("test.conf", text, strlen(text), NULL, NULL, &config, error) != 0)
        return NULL;
    return config;
}

static const struct trace_conf *trace_of(const void *block)
{
    const struct trace_conf *conf = conf_module_conf(block, &trace_module.conf);
    ck_assert_ptr_nonnull(conf);
    return conf;
}

START_TEST(directives_inherit)
{
    struct conf_error error;
    struct conf_config *config =
        parse("otel_exporter { endpoint 127.0.0.1:4318; interval 2s; batch_size 8; }\n"
              "otel_service_name edge;\n"
              "otel_trace_context propagate;\n"
              "otel_span_attr team a;\n"
              "server { listen 127.0.0.1:8080; otel_trace on;\n"
              "  location /a { otel_sampler parent_based ratio=0.5; return 200; }\n"
              "  location /b { otel_trace $t; otel_span_attr x y; otel_trace_context ignore;"
              " return 200; } }\n",
              &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    const struct trace_conf *top = trace_of(config->modules);
    ck_assert_int_eq(top->trace, TRACE_OFF);
    ck_assert_ptr_nonnull(top->export);
    ck_assert_uint_eq(top->export->interval_ms, 2000);
    ck_assert_uint_eq(top->export->batch_size, 8);
    ck_assert_uint_eq(top->export->batch_count, 4);
    ck_assert_str_eq(top->export->service_name, "edge");
    const struct trace_conf *a = trace_of(config->servers[0].locations[0].modules);
    ck_assert_int_eq(a->trace, TRACE_ON);
    ck_assert_int_eq(a->context, TRACE_CONTEXT_PROPAGATE);
    ck_assert(a->sampler.parent_based && !a->sampler.all);
    ck_assert_uint_eq(a->attr_count, 1);
    ck_assert_ptr_eq(a->export, top->export);
    const struct trace_conf *b = trace_of(config->servers[0].locations[1].modules);
    ck_assert_int_eq(b->trace, TRACE_VARIABLE);
    ck_assert_int_eq(b->context, TRACE_CONTEXT_IGNORE);
    ck_assert(b->sampler.all);
    ck_assert_uint_eq(b->attr_count, 1);
    ck_assert_str_eq(b->attrs[0].name, "x");
    conf_free(config);
}
END_TEST

START_TEST(directive_errors)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"otel_trace maybe;",
         "test.conf:1:12: invalid value \"maybe\" (expected on, off or a $variable)"},
        {"otel_trace on;", "test.conf:1:12: \"otel_trace\" needs an \"otel_exporter\" block at "
                           "top level"},
        {"otel_trace_context both;",
         "test.conf:1:20: unknown trace context mode \"both\" (expected ignore, extract, "
         "inject or propagate)"},
        {"otel_sampler ratio=2;", "test.conf:1:14: invalid ratio \"2\" (expected 0 to 1)"},
        {"otel_sampler fast;", "test.conf:1:14: invalid parameter \"fast\" (expected "
                               "parent_based or ratio=R, once each)"},
        {"otel_exporter { interval 1s; }", "test.conf:1:1: \"otel_exporter\" has no \"endpoint\""},
        {"otel_exporter { endpoint nowhere; }",
         "test.conf:1:1: invalid otel_exporter endpoint \"nowhere\""},
        {"otel_exporter { batch_size 0; endpoint 127.0.0.1:1; }",
         "test.conf:1:28: \"batch_size\" must be from 1 to 65536, got \"0\""},
        {"otel_exporter { batch_size 65536; batch_count 32; endpoint 127.0.0.1:1; }",
         "test.conf:1:1: \"otel_exporter\" queues batch_size * batch_count = 2097152 spans per "
         "worker, more than 1048576"},
        {"server { otel_exporter { endpoint 127.0.0.1:1; } }",
         "test.conf:1:10: \"otel_exporter\" is not allowed in server (it belongs at top level)"},
        {"endpoint 127.0.0.1:1;",
         "test.conf:1:1: \"endpoint\" is not allowed at top level (it belongs in otel_exporter)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct conf_error error;
        struct conf_config *config = parse(cases[i].text, &error);
        ck_assert_msg(config == NULL, "%s", cases[i].text);
        ck_assert_str_eq(error.text, cases[i].message);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/trace");
    TCase *tc = tcase_create("trace");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, traceparent_table);
    tcase_add_test(tc, tracestate_syntax);
    tcase_add_test(tc, sampler_decides_by_trace_id);
    tcase_add_test(tc, span_json_is_otlp);
    tcase_add_test(tc, span_json_is_bounded);
    tcase_add_test(tc, directives_inherit);
    tcase_add_test(tc, directive_errors);
    suite_add_tcase(suite, tc);
    return suite;
}
