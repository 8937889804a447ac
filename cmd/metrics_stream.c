/*
 * metrics_stream.c: the stream proxy's /metrics families, by listen
 * address: sessions begun and ended by status, bytes each way, sessions
 * refused, sessions that reached no server, UDP datagrams dropped.
 * Summed over the running generations and those retired, as metrics.c
 * does for HTTP, so that a counter never goes back on reload.
 */
#include "cmd/metrics.h"

#include "proto/stream/stream.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One listen address's counters. */
struct stream_series {
    char *listen;
    uint64_t started, bytes_in, bytes_out, denied, failed, dropped_in, dropped_out;
    uint64_t status[STREAM_STATUSES];
};

struct stream_table {
    struct stream_series *items;
    size_t count, cap;
};

/* Labels stay bounded by configurations; this bounds what reloads with
 * ever new addresses can pile up. */
#define STREAM_SERIES_MAX 4096

static struct stream_table retired;

/* The series of `listen`, a new one if there is none; NULL when out of
 * memory or room. */
static struct stream_series *series_of(struct stream_table *table, const char *listen)
{
    for (size_t i = 0; i < table->count; i++)
        if (strcmp(table->items[i].listen, listen) == 0)
            return &table->items[i];
    if (table->count == table->cap) {
        size_t cap = table->cap ? table->cap * 2 : 16;
        struct stream_series *grown =
            cap <= STREAM_SERIES_MAX ? realloc(table->items, cap * sizeof(*grown)) : NULL;
        if (grown == NULL)
            return NULL;
        table->items = grown;
        table->cap = cap;
    }
    char *copy = strdup(listen);
    if (copy == NULL)
        return NULL;
    struct stream_series *s = &table->items[table->count++];
    *s = (struct stream_series){.listen = copy};
    return s;
}

static void table_free(struct stream_table *table)
{
    for (size_t i = 0; i < table->count; i++)
        free(table->items[i].listen);
    free(table->items);
}

static uint64_t load(_Atomic uint64_t *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

/* Adds `gen`'s stream listens' counters to `table`. */
static void add_generation(struct stream_table *table, const struct generation *gen)
{
    unsigned workers = corral_server_worker_count(gen->server);
    for (size_t i = 0; i < gen->site_count + gen->udp_site_count; i++) {
        const struct site *site =
            i < gen->site_count ? &gen->sites[i] : &gen->udp_sites[i - gen->site_count];
        if (site->stream == NULL)
            continue;
        struct stream_series *s = series_of(table, site->address);
        if (s == NULL)
            continue;
        for (unsigned w = 0; w < (workers > 0 ? workers : 1); w++) {
            struct stream_stats *st = &site->stream->stats[w];
            s->started += load(&st->sessions);
            s->bytes_in += load(&st->bytes_in);
            s->bytes_out += load(&st->bytes_out);
            s->denied += load(&st->denied);
            s->failed += load(&st->failed);
            s->dropped_in += load(&st->udp_dropped_in);
            s->dropped_out += load(&st->udp_dropped_out);
            for (size_t k = 0; k < STREAM_STATUSES; k++)
                s->status[k] += load(&st->status[k]);
        }
    }
}

void metrics_stream_retire(struct generation *gen)
{
    add_generation(&retired, gen);
}

static void write_family(struct text *t, const char *name, const char *type, const char *help)
{
    text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Writes the counter `name`: for each listen address of `table`, the
 * count at `offset` in its series. */
static void write_listen_counter(struct text *t, const struct stream_table *table, const char *name,
                                 const char *help, size_t offset)
{
    write_family(t, name, "counter", help);
    for (size_t i = 0; i < table->count; i++) {
        const struct stream_series *s = &table->items[i];
        const uint64_t *value = (const uint64_t *)((const char *)s + offset);
        text_printf(t, "%s{listen=\"%s\"} %llu\n", name, s->listen, (unsigned long long)*value);
    }
}

void metrics_stream_write(struct text *t)
{
    struct stream_table table = {0}, running = {0};
    for (size_t i = 0; i < retired.count; i++) {
        struct stream_series *s = series_of(&table, retired.items[i].listen);
        if (s == NULL)
            continue;
        char *listen = s->listen;
        *s = retired.items[i];
        s->listen = listen;
    }
    for (const struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
        add_generation(&table, g);
        add_generation(&running, g);
    }
    if (table.count == 0) { /* no stream block, now or before */
        table_free(&table);
        table_free(&running);
        return;
    }
    write_listen_counter(t, &table, "corral_stream_sessions_started_total",
                         "Stream sessions begun (TCP connections accepted, UDP sessions begun), by "
                         "listen address.",
                         offsetof(struct stream_series, started));
    write_family(t, "corral_stream_sessions_total", "counter",
                 "Stream sessions ended, by listen address and status (nginx's $status).");
    for (size_t i = 0; i < table.count; i++)
        for (size_t k = 0; k < STREAM_STATUSES; k++)
            text_printf(t, "corral_stream_sessions_total{listen=\"%s\",status=\"%u\"} %llu\n",
                        table.items[i].listen, stream_status_code(k),
                        (unsigned long long)table.items[i].status[k]);
    write_family(t, "corral_stream_sessions_active", "gauge",
                 "Stream sessions begun and not ended yet, by listen address.");
    for (size_t i = 0; i < running.count; i++) {
        uint64_t ended = 0;
        for (size_t k = 0; k < STREAM_STATUSES; k++)
            ended += running.items[i].status[k];
        uint64_t started = running.items[i].started;
        text_printf(t, "corral_stream_sessions_active{listen=\"%s\"} %llu\n",
                    running.items[i].listen,
                    (unsigned long long)(started > ended ? started - ended : 0));
    }
    write_listen_counter(
        t, &table, "corral_stream_received_bytes_total",
        "Bytes received from stream clients (passed on to servers), by listen address.",
        offsetof(struct stream_series, bytes_in));
    write_listen_counter(t, &table, "corral_stream_sent_bytes_total",
                         "Bytes sent to stream clients (from servers), by listen address.",
                         offsetof(struct stream_series, bytes_out));
    write_listen_counter(t, &table, "corral_stream_refused_total",
                         "Stream sessions refused by allow/deny or limit_conn, by listen address.",
                         offsetof(struct stream_series, denied));
    write_listen_counter(t, &table, "corral_stream_upstream_failures_total",
                         "Stream sessions for which no server could be reached, by listen address.",
                         offsetof(struct stream_series, failed));
    write_family(t, "corral_stream_udp_dropped_total", "counter",
                 "Datagrams a udp stream listen dropped, by listen address and direction "
                 "(in: from clients; out: from servers).");
    for (size_t i = 0; i < table.count; i++) {
        text_printf(t, "corral_stream_udp_dropped_total{listen=\"%s\",direction=\"in\"} %llu\n",
                    table.items[i].listen, (unsigned long long)table.items[i].dropped_in);
        text_printf(t, "corral_stream_udp_dropped_total{listen=\"%s\",direction=\"out\"} %llu\n",
                    table.items[i].listen, (unsigned long long)table.items[i].dropped_out);
    }
    table_free(&table);
    table_free(&running);
}
