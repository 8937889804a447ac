/*
 * trace_span.h: one finished span and its OTLP/JSON encoding (the
 * OpenTelemetry protocol's JSON mapping: hex ids, times as decimal
 * strings of Unix nanoseconds, attributes as key and typed value), and
 * the envelope that wraps a batch of them for POST /v1/traces.
 */
#ifndef CORRAL_PROTO_TRACE_SPAN_H
#define CORRAL_PROTO_TRACE_SPAN_H

#include "proto/http/vars.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on what one span carries, so that a span's encoding is bounded
 * whatever a client sends: longer strings are cut (at a UTF-8 boundary
 * the escaper respects), and attributes past the count are left out. */
#define TRACE_SPAN_STRING_MAX 256
#define TRACE_SPAN_ATTRS_MAX  24

enum trace_span_kind {
    TRACE_SPAN_SERVER = 2, /* OTLP's SPAN_KIND_SERVER */
    TRACE_SPAN_CLIENT = 3, /* SPAN_KIND_CLIENT */
};

struct trace_attr {
    const char *key; /* a literal or the config's: never escaped */
    bool is_int;
    struct http_str str; /* !is_int */
    int64_t num;         /* is_int */
};

struct trace_span {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t parent_id[8];
    bool has_parent;
    enum trace_span_kind kind;
    struct http_str name;
    uint64_t start_ns, end_ns; /* Unix time */
    bool error;                /* status code STATUS_CODE_ERROR */
    const struct trace_attr *attrs;
    size_t attr_count;
};

/* Appends `span` as one OTLP/JSON Span object to `out`. */
void trace_span_json(const struct trace_span *span, struct vars_buf *out);

/* Appends the start of an ExportTraceServiceRequest for the resource
 * named `service` (service.name), up to the opening of its spans list,
 * and its end; the spans go between, comma-separated. */
void trace_span_batch_open(struct vars_buf *out, const char *service);
void trace_span_batch_close(struct vars_buf *out);

#endif
