/*
 * metrics.h: the metrics of /metrics that carry config-bounded labels
 * (latency histograms by server and by upstream server, byte counters,
 * upstream connections) and the process_* metrics (metrics.c), with the
 * text buffer the admin endpoints write into.
 */
#ifndef CORRAL_CMD_METRICS_H
#define CORRAL_CMD_METRICS_H

#include "cmd/daemon.h"

/* A growing text buffer; a failed allocation leaves it short, never
 * overrun. */
struct text {
    char *data;
    size_t len, cap;
};

void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string, escaped by vars_escape_json(): valid JSON whatever the
 * bytes (a config path is any bytes). */
void text_json_string(struct text *t, const char *s);
/* A label pair NAME="VALUE", the value escaped as the exposition format
 * wants (backslash, double quote, newline). */
void text_label(struct text *t, const char *name, const char *value);

/* Gives each of `gen`'s `workers` http_stats room for one entry per server
 * block and one for the admin listener.  0 or -ENOMEM.  Main thread. */
int metrics_attach(struct generation *gen, unsigned workers);
/* Frees what metrics_attach() allocated (none: nothing). */
void metrics_detach(struct generation *gen);
/* Adds an exiting generation's counters to the totals kept for the next
 * scrapes.  Under daemon_state.lock. */
void metrics_retire(struct generation *gen);

/* Writes the histogram, byte and upstream connection families, summed
 * over the running generations and those retired.  Under
 * daemon_state.lock. */
void metrics_write(struct text *t);
/* metrics_stream.c: the stream proxy's families (corral_stream_*), by
 * listen address, and the retired generations' part of them.  Under
 * daemon_state.lock, as the two above. */
void metrics_stream_write(struct text *t);
void metrics_stream_retire(struct generation *gen);

/* Writes process_* as the Prometheus client libraries define them. */
void metrics_write_process(struct text *t);

#endif
