/*
 * trace.h: distributed tracing with the names of nginx's otel module
 * (ngx_otel_module): W3C Trace Context in and out (otel_trace_context),
 * a server span per exchange and a client span per upstream attempt,
 * exported over OTLP/HTTP (otel_exporter, trace_export.h), and the
 * $otel_* variables.  The whole module is trace.c and its line in
 * proto/modules.c; docs/config.md, "Tracing", says what it does.
 */
#ifndef CORRAL_PROTO_TRACE_H
#define CORRAL_PROTO_TRACE_H

#include "conf/directive.h"
#include "proto/policy/trace_export.h"
#include "proto/policy/trace_sample.h"

#include <stdbool.h>

/* otel_trace: off, on, or on where a variable reads "1" or "on". */
enum trace_mode {
    TRACE_OFF,
    TRACE_ON,
    TRACE_VARIABLE,
};

/* otel_trace_context, as bits: extract the incoming context, inject our
 * own; ignore is neither, propagate both (nginx's four words). */
enum trace_context_mode {
    TRACE_CONTEXT_IGNORE = 0,
    TRACE_CONTEXT_EXTRACT = 1,
    TRACE_CONTEXT_INJECT = 2,
    TRACE_CONTEXT_PROPAGATE = 3,
};

struct trace_attr_conf {
    char *name, *value;
    struct conf_pos pos;
};

/* Its struct per level.  A level that does not write a directive takes
 * its parent's (`*_pos.file` NULL: not written here; `inherited_*`: the
 * parent's strings, not this level's to free). */
struct trace_conf {
    int trace; /* enum trace_mode */
    char *trace_variable;
    struct conf_pos trace_pos;
    int context; /* enum trace_context_mode */
    struct conf_pos context_pos;
    char *span_name;
    struct conf_pos span_name_pos;
    struct trace_attr_conf *attrs; /* otel_span_attr, all of a level's, or its parent's */
    size_t attr_count;
    struct trace_sampler sampler;
    struct conf_pos sampler_pos;
    bool inherited_trace_variable, inherited_span_name, inherited_attrs;
    /* The top level's only: otel_exporter { } and otel_service_name. */
    bool has_exporter;
    struct trace_exporter_conf exporter;
    /* Every level's after the merge: the top level's exporter, or NULL. */
    const struct trace_exporter_conf *export;
};

/* The module (module.h). */
struct http_module;
extern struct http_module trace_module;

#endif
