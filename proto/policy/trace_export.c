/*
 * trace_export.c: the per-worker span queue and its OTLP/HTTP export
 * (trace_export.h).  Each worker thread has its own exporter, made with
 * its first span: a ring of encoded spans, one timer and at most one
 * connection to the collector at a time, each export a plain HTTP/1.1
 * POST with its length and "Connection: close" whose answer is read to
 * its end for its status and otherwise dropped.  Nothing is shared
 * between workers but the counters' registry, locked only when an
 * exporter is made or ends and when /metrics reads them.
 */
#include "proto/policy/trace_export.h"

#include "proto/counter.h"
#include "proto/http/vars.h"
#include "proto/policy/trace_span.h"
#include "proto/thread_exit.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest an export may take, connection included; and once its
 * worker is stopping, which waits for it as for any connection. */
#define EXPORT_TIMEOUT_MS          10000
#define EXPORT_STOPPING_TIMEOUT_MS 1000
/* Backoff after a failed export: from the first to the last, doubling. */
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS   30000

struct queued_span {
    char *json;
    size_t len;
};

struct exporter {
    /* Only this worker writes them; /metrics sums them. */
    _Alignas(64) _Atomic uint64_t exported;
    _Atomic uint64_t dropped;
    _Atomic uint64_t failed;
    corral_loop *loop;
    corral_worker *worker; /* NULL on a bare loop */
    bool stopping;         /* its worker stops: exports get a short deadline */
    const struct trace_exporter_conf *conf;
    struct queued_span *ring;
    size_t cap, head, count;
    size_t sending;      /* spans at the head that the connection carries */
    corral_conn *conn;   /* the export under way; NULL: none */
    corral_timer *timer; /* the batch's interval, or the backoff */
    uint32_t backoff_ms; /* 0: the last export went through */
    /* The answer's status line, as far as it came (bounded). */
    char status_line[16];
    size_t status_len;
    struct exporter *next; /* in the registry */
};

/* ------------------------------------------------------------- registry */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct exporter *registry;
static struct trace_export_totals retired;

static _Thread_local struct exporter *mine;

void trace_export_totals(struct trace_export_totals *out)
{
    pthread_mutex_lock(&registry_lock);
    *out = retired;
    for (const struct exporter *e = registry; e != NULL; e = e->next) {
        out->exported += atomic_load_explicit(&e->exported, memory_order_relaxed);
        out->dropped += atomic_load_explicit(&e->dropped, memory_order_relaxed);
        out->failed += atomic_load_explicit(&e->failed, memory_order_relaxed);
    }
    pthread_mutex_unlock(&registry_lock);
}

/* The thread ends (a worker that exited: its loop no longer runs, and its
 * connections were closed, on this thread, before): what is still queued
 * is dropped and counted, its counts kept in `retired`. */
static void exporter_free(void *arg)
{
    struct exporter *e = arg;
    if (e->conn != NULL)
        corral_conn_set_data(e->conn, NULL);
    corral_timer_free(e->timer);
    for (size_t i = 0; i < e->count; i++)
        free(e->ring[(e->head + i) % e->cap].json);
    counter_add(&e->dropped, e->count);
    free(e->ring);
    pthread_mutex_lock(&registry_lock);
    struct exporter **link = &registry;
    while (*link != e)
        link = &(*link)->next;
    *link = e->next;
    retired.exported += atomic_load_explicit(&e->exported, memory_order_relaxed);
    retired.dropped += atomic_load_explicit(&e->dropped, memory_order_relaxed);
    retired.failed += atomic_load_explicit(&e->failed, memory_order_relaxed);
    pthread_mutex_unlock(&registry_lock);
    if (mine == e)
        mine = NULL;
    free(e);
}

static void on_timer(corral_timer *timer, void *arg);

/* The calling thread's exporter on `loop`, made on first use; NULL when
 * out of memory. */
static struct exporter *exporter_get(corral_loop *loop, corral_worker *worker,
                                     const struct trace_exporter_conf *conf)
{
    if (mine != NULL)
        return mine->loop == loop ? mine : NULL; /* a thread runs one loop */
    struct exporter *e = aligned_alloc(64, (sizeof(*e) + 63) / 64 * 64);
    if (e == NULL)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->loop = loop;
    e->worker = worker;
    e->conf = conf;
    e->cap = (size_t)conf->batch_size * conf->batch_count;
    e->ring = calloc(e->cap, sizeof(*e->ring));
    if (e->ring == NULL || corral_timer_new(loop, on_timer, e, &e->timer) != 0) {
        free(e->ring);
        free(e);
        return NULL;
    }
    pthread_mutex_lock(&registry_lock);
    e->next = registry;
    registry = e;
    pthread_mutex_unlock(&registry_lock);
    if (thread_exit_call(exporter_free, e) != 0) {
        exporter_free(e);
        return NULL;
    }
    mine = e;
    return e;
}

/* --------------------------------------------------------------- export */

static const struct corral_conn_handler export_handler;

static void export_failed(struct exporter *e)
{
    counter_inc(&e->failed);
    e->sending = 0;
    e->backoff_ms = e->backoff_ms == 0                    ? BACKOFF_FIRST_MS
                    : e->backoff_ms >= BACKOFF_MAX_MS / 2 ? BACKOFF_MAX_MS
                                                          : e->backoff_ms * 2;
    corral_timer_start(e->timer, e->backoff_ms);
}

/* Posts the oldest spans, a batch at most, on a new connection.  The
 * body is never put together: its length is summed, and each span's
 * text goes to the connection's output as it is (a batch may be a few
 * hundred KB). */
static void export_start(struct exporter *e)
{
    assert(e->conn == NULL && e->count > 0);
    const struct trace_exporter_conf *conf = e->conf;
    size_t n = e->count < conf->batch_size ? e->count : conf->batch_size;
    char small[512], tail[16];
    struct vars_buf open, close;
    vars_buf_init(&open, small, sizeof(small));
    vars_buf_fixed(&close, tail, sizeof(tail));
    trace_span_batch_open(&open, conf->service_name);
    trace_span_batch_close(&close);
    size_t length = open.len + close.len + (n - 1); /* the commas */
    for (size_t i = 0; i < n; i++)
        length += e->ring[(e->head + i) % e->cap].len;
    char head[512];
    int head_len = snprintf(head, sizeof(head),
                            "POST /v1/traces HTTP/1.1\r\nHost: %s\r\n"
                            "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                            "Connection: close\r\n\r\n",
                            conf->endpoint, length);
    corral_conn *conn = NULL;
    if (open.failed || close.failed || head_len < 0 || (size_t)head_len >= sizeof(head) ||
        corral_connect(e->loop, (const struct sockaddr *)&conf->addr, conf->addrlen,
                       &export_handler, e, &conn) != 0) {
        vars_buf_free(&open);
        export_failed(e);
        return;
    }
    e->conn = conn;
    e->sending = n;
    e->status_len = 0;
    e->stopping = e->stopping || (e->worker != NULL && corral_worker_stopping(e->worker));
    corral_conn_set_deadline(conn,
                             corral_loop_now(e->loop) +
                                 (e->stopping ? EXPORT_STOPPING_TIMEOUT_MS : EXPORT_TIMEOUT_MS));
    corral_conn_write(conn, head, (size_t)head_len);
    corral_conn_write(conn, open.data, open.len);
    for (size_t i = 0; i < n; i++) {
        const struct queued_span *s = &e->ring[(e->head + i) % e->cap];
        if (i > 0)
            corral_conn_write(conn, ",", 1);
        corral_conn_write(conn, s->json, s->len);
    }
    corral_conn_write(conn, close.data, close.len);
    vars_buf_free(&open);
}

/* Whether the answer's status line says 2xx. */
static bool answered_ok(const struct exporter *e)
{
    return e->status_len >= 12 && memcmp(e->status_line, "HTTP/1.", 7) == 0 &&
           e->status_line[8] == ' ' && e->status_line[9] == '2';
}

static size_t export_on_data(corral_conn *conn, const char *data, size_t len)
{
    struct exporter *e = corral_conn_data(conn);
    if (e == NULL)
        return len;
    size_t room = sizeof(e->status_line) - e->status_len;
    size_t take = len < room ? len : room;
    memcpy(e->status_line + e->status_len, data, take);
    e->status_len += take;
    return len; /* the rest of the answer is of no use */
}

/* The worker stops and waits for its connections, this one too: it may
 * finish, briefly. */
static void export_on_stop(corral_conn *conn)
{
    struct exporter *e = corral_conn_data(conn);
    if (e == NULL)
        return;
    e->stopping = true;
    corral_conn_set_deadline(conn, corral_loop_now(e->loop) + EXPORT_STOPPING_TIMEOUT_MS);
}

static void export_on_deadline(corral_conn *conn)
{
    corral_conn_abort(conn, -ETIMEDOUT);
}

static void export_on_close(corral_conn *conn, int error)
{
    (void)error; /* a reset after a whole 2xx answer is still a success */
    struct exporter *e = corral_conn_data(conn);
    if (e == NULL)
        return; /* its exporter ended first */
    e->conn = NULL;
    if (!answered_ok(e)) {
        export_failed(e);
        return;
    }
    for (size_t i = 0; i < e->sending; i++)
        free(e->ring[(e->head + i) % e->cap].json);
    e->head = (e->head + e->sending) % e->cap;
    e->count -= e->sending;
    counter_add(&e->exported, e->sending);
    e->sending = 0;
    e->backoff_ms = 0;
    if (e->count > 0) /* a full batch at once, else after the interval */
        corral_timer_start(e->timer, e->count >= e->conf->batch_size ? 0 : e->conf->interval_ms);
}

static const struct corral_conn_handler export_handler = {
    .on_data = export_on_data,
    .on_deadline = export_on_deadline,
    .on_stop = export_on_stop,
    .on_close = export_on_close,
};

static void on_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    struct exporter *e = arg;
    if (e->conn == NULL && e->count > 0)
        export_start(e);
}

void trace_export_span(corral_loop *loop, corral_worker *worker,
                       const struct trace_exporter_conf *conf, char *json, size_t len)
{
    struct exporter *e = exporter_get(loop, worker, conf);
    if (e == NULL) { /* out of memory: nothing to count it in */
        free(json);
        return;
    }
    if (e->count == e->cap) {
        counter_inc(&e->dropped);
        free(json);
        return;
    }
    e->ring[(e->head + e->count) % e->cap] = (struct queued_span){json, len};
    e->count++;
    if (e->conn != NULL || e->backoff_ms != 0)
        return; /* the export under way, or the backoff's timer, goes on */
    if (e->count - e->sending >= conf->batch_size)
        corral_timer_start(e->timer, 0);
    else if (!corral_timer_active(e->timer))
        corral_timer_start(e->timer, conf->interval_ms);
}
