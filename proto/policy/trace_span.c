/*
 * trace_span.c: OTLP/JSON for spans (trace_span.h), written by hand with
 * the JSON escaper the access log uses: a span is a few fixed keys and
 * short strings, so a document tree per span would only add
 * allocations.
 */
#include "proto/policy/trace_span.h"

#include "proto/policy/trace_context.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void add_str(struct vars_buf *out, const char *text)
{
    vars_buf_add(out, text, strlen(text));
}

/* A JSON string of at most TRACE_SPAN_STRING_MAX bytes of `s`. */
static void add_json_string(struct vars_buf *out, struct http_str s)
{
    size_t len = s.len < TRACE_SPAN_STRING_MAX ? s.len : TRACE_SPAN_STRING_MAX;
    vars_buf_add(out, "\"", 1);
    vars_escape_json(out, s.data, len);
    vars_buf_add(out, "\"", 1);
}

static void add_u64_string(struct vars_buf *out, uint64_t n)
{
    char text[24];
    int len = snprintf(text, sizeof(text), "\"%" PRIu64 "\"", n);
    vars_buf_add(out, text, (size_t)len);
}

static void add_hex(struct vars_buf *out, const uint8_t *bytes, size_t n)
{
    char hex[33];
    trace_hex(bytes, n, hex);
    vars_buf_add(out, "\"", 1);
    vars_buf_add(out, hex, 2 * n);
    vars_buf_add(out, "\"", 1);
}

static void add_attr(struct vars_buf *out, const struct trace_attr *a)
{
    add_str(out, "{\"key\":");
    add_json_string(out, (struct http_str){a->key, strlen(a->key)});
    if (a->is_int) {
        /* OTLP/JSON writes 64-bit integers as strings (proto3 JSON). */
        char text[32];
        int len =
            snprintf(text, sizeof(text), ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", a->num);
        vars_buf_add(out, text, (size_t)len);
        return;
    }
    add_str(out, ",\"value\":{\"stringValue\":");
    add_json_string(out, a->str);
    add_str(out, "}}");
}

void trace_span_json(const struct trace_span *span, struct vars_buf *out)
{
    add_str(out, "{\"traceId\":");
    add_hex(out, span->trace_id, 16);
    add_str(out, ",\"spanId\":");
    add_hex(out, span->span_id, 8);
    if (span->has_parent) {
        add_str(out, ",\"parentSpanId\":");
        add_hex(out, span->parent_id, 8);
    }
    add_str(out, ",\"name\":");
    add_json_string(out, span->name);
    char kind[16];
    int n = snprintf(kind, sizeof(kind), ",\"kind\":%d", (int)span->kind);
    vars_buf_add(out, kind, (size_t)n);
    add_str(out, ",\"startTimeUnixNano\":");
    add_u64_string(out, span->start_ns);
    add_str(out, ",\"endTimeUnixNano\":");
    add_u64_string(out, span->end_ns < span->start_ns ? span->start_ns : span->end_ns);
    add_str(out, ",\"attributes\":[");
    size_t count =
        span->attr_count < TRACE_SPAN_ATTRS_MAX ? span->attr_count : TRACE_SPAN_ATTRS_MAX;
    for (size_t i = 0; i < count; i++) {
        if (i > 0)
            vars_buf_add(out, ",", 1);
        add_attr(out, &span->attrs[i]);
    }
    add_str(out, "]");
    if (span->error)
        add_str(out, ",\"status\":{\"code\":2}");
    add_str(out, "}");
}

void trace_span_batch_open(struct vars_buf *out, const char *service)
{
    add_str(out, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    struct trace_attr name = {.key = "service.name", .str = {service, strlen(service)}};
    add_attr(out, &name);
    add_str(out, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"corral\"},\"spans\":[");
}

void trace_span_batch_close(struct vars_buf *out)
{
    add_str(out, "]}]}]}");
}
