/*
 * trace_export.h: the tracing module's exporter: each worker queues its
 * finished spans (bounded) and posts them in batches to an OpenTelemetry
 * collector over OTLP/HTTP with JSON (POST /v1/traces), from its own loop,
 * without ever blocking it.  Spans that find the queue full are dropped
 * and counted; a failed export is retried with backoff.
 */
#ifndef CORRAL_PROTO_TRACE_EXPORT_H
#define CORRAL_PROTO_TRACE_EXPORT_H

#include "conf/directive.h"

#include <corral.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* otel_exporter { endpoint; interval; batch_size; batch_count; }, and
 * otel_service_name: the top level's, shared by every level below. */
struct trace_exporter_conf {
    char *endpoint; /* "HOST:PORT" as written; NULL: no exporter */
    struct conf_pos pos;
    uint32_t interval_ms;         /* the longest a span waits for its batch; 5 s */
    unsigned batch_size;          /* spans per export; 512 */
    unsigned batch_count;         /* batches a worker keeps waiting; 4 */
    char *service_name;           /* service.name; "unknown_service:corral" */
    struct sockaddr_storage addr; /* the endpoint, resolved with the config */
    socklen_t addrlen;
};

/* Queues one span's OTLP/JSON object (`json`, `len` bytes, malloc'd: the
 * exporter frees it) on the calling thread's exporter, which runs on
 * `loop`, `worker`'s (NULL: a bare loop; a stopping worker's exports
 * get 1 s, since it waits for them): at most batch_size * batch_count spans wait; one
 * more is dropped and counted.  Never blocks, never fails. */
void trace_export_span(corral_loop *loop, corral_worker *worker,
                       const struct trace_exporter_conf *conf, char *json, size_t len);

/* Every worker's counts since the start, those of exited workers too.
 * Any thread. */
struct trace_export_totals {
    uint64_t exported; /* spans the collector took (a 2xx answer) */
    uint64_t dropped;  /* spans dropped: the queue full, or a worker's exit */
    uint64_t failed;   /* exports that failed (no connection, no 2xx) */
};
void trace_export_totals(struct trace_export_totals *out);

#endif
