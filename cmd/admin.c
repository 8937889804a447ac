/*
 * admin.c: the admin listener's endpoints.  GET /metrics answers in the
 * Prometheus text format, GET /status in JSON.  Counters are summed over the
 * running generations plus the totals of the ones that have exited, under
 * the daemon lock: admin requests are rare, the workers never take it.
 * Before any of them, the admin block's allow/deny and bearer token.
 */
#include "cmd/daemon.h"
#include "cmd/metrics.h"
#include "cmd/runtime_acme.h"
#include "cmd/runtime_cache.h"
#include "cmd/runtime_limit.h"
#include "proto/http/exchange.h"
#include "proto/upstream/health.h"
#include "proto/http2/http2.h" /* http2_counter_names */
#include "proto/policy/stub_status.h"
#include "proto/policy/trace_export.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ the gate */

enum admin_refusal {
    ADMIN_REFUSED_ADDRESS, /* allow/deny: 403 */
    ADMIN_REFUSED_TOKEN,   /* bearer token missing or wrong: 401 */
    ADMIN_REFUSALS,
};
static const char *const admin_refusal_names[ADMIN_REFUSALS] = {"address", "token"};

/* Daemon-wide and never reset, so that they keep growing across reloads;
 * refusals are rare enough for one shared counter. */
static _Atomic uint64_t admin_refused[ADMIN_REFUSALS];

/* RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=" */
static bool is_token_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
}

static bool is_b64token(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len && is_token_char(s[i]))
        i++;
    if (i == 0)
        return false;
    while (i < len && s[i] == '=')
        i++;
    return i == len;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Reads at most ADMIN_TOKEN_MAX + 1 bytes of `fd` into `buf`: the count,
 * or -errno. */
static ssize_t read_bounded(int fd, char *buf)
{
    size_t n = 0;
    while (n <= ADMIN_TOKEN_MAX) {
        ssize_t got = read(fd, buf + n, ADMIN_TOKEN_MAX + 1 - n);
        if (got == -1 && errno == EINTR)
            continue;
        if (got == -1)
            return -errno;
        if (got == 0)
            break;
        n += (size_t)got;
    }
    return (ssize_t)n;
}

int admin_token_read(const char *path, const struct conf_pos *pos, char *token, size_t *len)
{
    const char *problem = NULL;
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    ssize_t got = 0;
    if (fd == -1 || fstat(fd, &st) == -1)
        problem = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        problem = "not a regular file";
    else if ((got = read_bounded(fd, token)) < 0)
        problem = strerror((int)-got);
    else if (got > ADMIN_TOKEN_MAX)
        problem = "longer than 4096 bytes";
    if (fd != -1)
        close(fd);
    size_t start = 0, end = got > 0 ? (size_t)got : 0;
    while (start < end && is_space(token[start]))
        start++;
    while (end > start && is_space(token[end - 1]))
        end--;
    if (problem == NULL && start == end)
        problem = "no token in the file";
    else if (problem == NULL && !is_b64token(token + start, end - start))
        problem = "a token is one word of A-Z a-z 0-9 - . _ ~ + / then = signs (RFC 6750)";
    if (problem != NULL) {
        log_error("%s:%u:%u: auth_token_file %s: %s", pos->file, pos->line, pos->col, path,
                  problem);
        return -EINVAL;
    }
    if (st.st_mode & S_IROTH)
        log_warn("%s:%u:%u: auth_token_file %s is readable by any user", pos->file, pos->line,
                 pos->col, path);
    memmove(token, token + start, end - start);
    token[end - start] = '\0';
    *len = end - start;
    return 0;
}

/* Whether `given` is `token`, in a time that depends only on the token's
 * length: neither on its bytes nor on where the two differ. */
static bool token_equal(const char *given, size_t given_len, const char *token, size_t token_len)
{
    unsigned char diff = given_len != token_len;
    for (size_t i = 0; i < token_len; i++)
        diff |= (unsigned char)(token[i] ^ (i < given_len ? given[i] : 0));
    return diff == 0;
}

/* The bearer token `req` carries (RFC 6750 2.1: "Authorization: Bearer
 * TOKEN", the scheme in any case); false when it carries none. */
static bool bearer_token(const struct http_request *req, struct http_str *out)
{
    for (size_t i = 0; i < req->header_count; i++) {
        const struct http_header *h = &req->headers[i];
        if (!http_str_equal_nocase(h->name, "authorization"))
            continue;
        const char *v = h->value.data;
        size_t len = h->value.len, at = 6;
        if (len <= at || strncasecmp(v, "bearer", 6) != 0 || v[at] != ' ')
            return false;
        while (at < len && v[at] == ' ')
            at++;
        while (len > at && is_space(v[len - 1]))
            len--;
        *out = (struct http_str){v + at, len - at};
        return out->len > 0;
    }
    return false;
}

static void gate_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    const struct admin_gate *gate = data;
    if (gate->access != NULL && access_check_routed(ex, gate->access, req) != 0) {
        atomic_fetch_add_explicit(&admin_refused[ADMIN_REFUSED_ADDRESS], 1, memory_order_relaxed);
        exchange_respond_error(ex, 403);
        return;
    }
    if (gate->token != NULL) {
        struct http_str given;
        bool carried = bearer_token(req, &given);
        if (!carried || !token_equal(given.data, given.len, gate->token, gate->token_len)) {
            atomic_fetch_add_explicit(&admin_refused[ADMIN_REFUSED_TOKEN], 1, memory_order_relaxed);
            /* RFC 6750 3: the scheme, and an error only for a token that
             * was sent and is wrong. */
            exchange_respond(ex, 401,
                             carried ? "WWW-Authenticate: Bearer realm=\"corral admin\", "
                                       "error=\"invalid_token\"\r\n"
                                       "Content-Type: text/plain\r\n"
                                     : "WWW-Authenticate: Bearer realm=\"corral admin\"\r\n"
                                       "Content-Type: text/plain\r\n",
                             "401 Unauthorized\n", 17);
            return;
        }
    }
    if (gate->next == NULL) {
        exchange_respond_error(ex, 404);
        return;
    }
    /* An endpoint that reads a body gets it from the framer itself. */
    if (gate->next->on_body != NULL)
        ex->_ops->set_handler(ex, gate->next);
    gate->next->on_request(ex, req, NULL);
}

const struct http_handler admin_gate_handler = {
    .name = "admin",
    .on_request = gate_on_request,
};

struct worker_totals {
    uint64_t accepts, wakeups, wasted, local, active;
    uint64_t steered, steer_local, spills, taken, load; /* eBPF steering, running generations */
};

/* Per-worker counters of every generation, by worker index; *steering
 * says whether a running generation is steered by eBPF. */
static unsigned sum_workers(struct worker_totals *totals, bool *steering)
{
    *steering = false;
    const struct retired_totals *retired = &daemon_state.retired;
    unsigned count = 0;
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next)
        if (corral_server_worker_count(g->server) > count)
            count = corral_server_worker_count(g->server);
    for (unsigned i = 0; i < DAEMON_MAX_WORKERS; i++) {
        totals[i] = (struct worker_totals){retired->accepts[i],
                                           retired->accept_wakeups[i],
                                           retired->accept_wasted[i],
                                           retired->accepts_local[i],
                                           0,
                                           0,
                                           0,
                                           0,
                                           0,
                                           0};
        if (totals[i].accepts > 0 && i >= count)
            count = i + 1;
    }
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
        for (unsigned i = 0; i < corral_server_worker_count(g->server); i++) {
            struct corral_worker_stats stats;
            corral_server_stats(g->server, i, &stats);
            totals[i].accepts += stats.accepts;
            totals[i].wakeups += stats.accept_wakeups;
            totals[i].wasted += stats.accept_wasted;
            totals[i].local += stats.accepts_local;
            totals[i].active += stats.connections_active;
            struct corral_steer_stats steer;
            if (corral_server_steer_stats(g->server, i, &steer) == 0) {
                *steering = true;
                totals[i].steered += steer.steered;
                totals[i].steer_local += steer.local;
                totals[i].spills += steer.spills;
                totals[i].taken += steer.taken;
                totals[i].load += steer.load;
            }
        }
    }
    return count;
}

void upstream_errors_add(struct retired_upstream *slots, size_t *count,
                         const struct proxy_upstream *upstream)
{
    const char *name = upstream_name(upstream);
    struct retired_upstream *slot = NULL;
    for (size_t i = 0; i < *count && slot == NULL; i++)
        if (strcmp(slots[i].name, name) == 0)
            slot = &slots[i];
    if (slot == NULL && *count < DAEMON_MAX_UPSTREAMS) {
        /* Whole: a name cut short would merge the counters of two
         * upstreams that begin alike. */
        char *copy = strdup(name);
        if (copy != NULL) {
            slot = &slots[(*count)++];
            *slot = (struct retired_upstream){.name = copy};
        }
    }
    for (int k = 0; slot != NULL && k < PROXY_ERROR_KINDS; k++)
        slot->errors[k] += upstream_errors(upstream, (enum proxy_error_kind)k);
}

/* Upstream errors by upstream name: exited generations' plus running ones'.
 * The first daemon_state.retired.upstream_count slots borrow the retired
 * totals' names; free the names of the rest. */
static size_t sum_upstreams(struct retired_upstream *out)
{
    size_t count = daemon_state.retired.upstream_count;
    memcpy(out, daemon_state.retired.upstreams, count * sizeof(*out));
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next)
        for (size_t i = 0; i < g->upstream_count; i++)
            upstream_errors_add(out, &count, g->upstreams[i].upstream);
    return count;
}

/* The seconds left to each ACME certificate of the current generation
 * (none for a placeholder: nothing issued yet).  Under daemon_state.lock. */
static void acme_expiry_write(struct text *t)
{
    struct runtime_acme *acme =
        daemon_state.generations != NULL ? daemon_state.generations->acme : NULL;
    char name[256];
    int64_t not_after;
    bool head = false;
    time_t now = time(NULL);
    for (size_t i = 0; runtime_acme_expiry(acme, i, name, sizeof(name), &not_after); i++) {
        /* Two servers may order the same name: one series. */
        char other[256];
        int64_t unused;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = runtime_acme_expiry(acme, j, other, sizeof(other), &unused) &&
                   strcmp(other, name) == 0;
        if (not_after == 0 || seen)
            continue;
        if (!head)
            text_printf(t, "# HELP corral_acme_certificate_expiry_seconds Seconds until the "
                           "ACME certificate's notAfter (negative: expired).\n"
                           "# TYPE corral_acme_certificate_expiry_seconds gauge\n");
        head = true;
        text_printf(t, "corral_acme_certificate_expiry_seconds{");
        text_label(t, "certificate", name);
        text_printf(t, "} %lld\n", (long long)(not_after - (int64_t)now));
    }
}

void tls_totals_add(struct tls_totals *totals, const struct generation *gen, unsigned worker)
{
    if (worker == 0)
        runtime_acme_totals(gen->acme, &totals->acme_issued, &totals->acme_failures);
    for (size_t i = 0; i < gen->site_count; i++) {
        if (gen->sites[i].http.tls == NULL)
            continue;
        if (worker == 0) {
            const struct tls_stapling_stats *ocsp =
                tls_server_stapling_stats(gen->sites[i].http.tls);
            totals->ocsp_fetches += atomic_load_explicit(&ocsp->fetches, memory_order_relaxed);
            totals->ocsp_failures += atomic_load_explicit(&ocsp->failures, memory_order_relaxed);
        }
        const struct tls_stats *stats = tls_server_stats(gen->sites[i].http.tls, worker);
        if (stats == NULL)
            continue;
        for (int k = 0; k < TLS_HANDSHAKE_KINDS; k++)
            totals->handshakes[k] +=
                atomic_load_explicit(&stats->handshakes[k], memory_order_relaxed);
        for (int k = 0; k < TLS_ERROR_KINDS; k++)
            totals->errors[k] += atomic_load_explicit(&stats->errors[k], memory_order_relaxed);
        totals->ktls += atomic_load_explicit(&stats->ktls, memory_order_relaxed);
    }
}

/* A counter of struct worker_totals, written with a sample per worker. */
struct worker_metric {
    const char *name, *type, *help;
    size_t offset; /* in struct worker_totals */
};

static const struct worker_metric accept_metrics[] = {
    {"corral_accepts_total", "counter", "Connections accepted by each worker.",
     offsetof(struct worker_totals, accepts)},
    {"corral_accept_wakeups_total", "counter",
     "Times each worker woke with a listening socket ready.",
     offsetof(struct worker_totals, wakeups)},
    {"corral_accept_wasted_total", "counter",
     "Accept wakeups whose first accept() found no connection.",
     offsetof(struct worker_totals, wasted)},
    {"corral_accepts_local_total", "counter",
     "Accepted connections that arrived on the worker's own CPU.",
     offsetof(struct worker_totals, local)},
    {"corral_connections_active", "gauge", "Open client connections on each worker.",
     offsetof(struct worker_totals, active)},
};

/* Written only while a running generation is steered by eBPF. */
static const struct worker_metric steer_metrics[] = {
    {"corral_steered_total", "counter",
     "Connections the eBPF program sent to each worker (this generation).",
     offsetof(struct worker_totals, steered)},
    {"corral_steer_local_total", "counter",
     "wakeup affinity over eBPF: connections kept on the worker of their arrival CPU.",
     offsetof(struct worker_totals, steer_local)},
    {"corral_steer_spills_total", "counter",
     "wakeup affinity over eBPF: connections that arrived on the worker's CPU and went to a "
     "less loaded worker.",
     offsetof(struct worker_totals, spills)},
    {"corral_steer_taken_total", "counter",
     "wakeup balanced: connections the worker took off other workers' queues because they "
     "had waited there.",
     offsetof(struct worker_totals, taken)},
    {"corral_steer_load", "gauge",
     "The load each worker publishes to the eBPF program: open connections plus connections "
     "steered to it and not yet accepted.",
     offsetof(struct worker_totals, load)},
};

static void write_worker_metrics(struct text *t, const struct worker_metric *metrics, size_t n,
                                 const struct worker_totals *totals, unsigned count)
{
    for (size_t k = 0; k < n; k++) {
        const struct worker_metric *m = &metrics[k];
        text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
        for (unsigned i = 0; i < count; i++)
            text_printf(
                t, "%s{worker=\"%u\"} %llu\n", m->name, i,
                (unsigned long long)*(const uint64_t *)((const char *)&totals[i] + m->offset));
    }
}

static void metrics_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    struct text t = {0};
    struct worker_totals *totals = calloc(DAEMON_MAX_WORKERS, sizeof(*totals));
    uint64_t responses[HTTP_MAX_STATUS];
    uint64_t timeouts[HTTP_TIMEOUT_KINDS];
    uint64_t http2[HTTP2_COUNTERS];
    uint64_t proxy_protocol[PROXY_PROTOCOL_FAILURES];

    pthread_mutex_lock(&daemon_state.lock);
    bool steering = false;
    unsigned count = totals != NULL ? sum_workers(totals, &steering) : 0;
    memcpy(responses, daemon_state.retired.responses, sizeof(responses));
    memcpy(timeouts, daemon_state.retired.timeouts, sizeof(timeouts));
    memcpy(http2, daemon_state.retired.http2, sizeof(http2));
    memcpy(proxy_protocol, daemon_state.retired.proxy_protocol, sizeof(proxy_protocol));
    struct tls_totals tls = daemon_state.retired.tls;
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
        for (unsigned w = 0; w < corral_server_worker_count(g->server); w++) {
            for (unsigned s = 0; s < HTTP_MAX_STATUS; s++)
                responses[s] +=
                    atomic_load_explicit(&g->stats[w].responses[s], memory_order_relaxed);
            for (unsigned k = 0; k < HTTP_TIMEOUT_KINDS; k++)
                timeouts[k] += atomic_load_explicit(&g->stats[w].timeouts[k], memory_order_relaxed);
            for (unsigned k = 0; k < HTTP2_COUNTERS; k++)
                http2[k] += atomic_load_explicit(&g->stats[w].http2[k], memory_order_relaxed);
            for (unsigned k = 0; k < PROXY_PROTOCOL_FAILURES; k++)
                proxy_protocol[k] +=
                    atomic_load_explicit(&g->stats[w].proxy_protocol[k], memory_order_relaxed);
            tls_totals_add(&tls, g, w);
        }
    }
    if (daemon_state.generations == NULL) {
        /* Workers serve before main() publishes their generation. */
        pthread_mutex_unlock(&daemon_state.lock);
        free(totals);
        exchange_respond_error(ex, 503);
        return;
    }
    struct corral_wakeup_info wakeup;
    corral_server_wakeup(daemon_state.generations->server, &wakeup);
    unsigned generation = atomic_load(&daemon_state.accepting);
    struct retired_upstream *upstreams =
        malloc(sizeof(struct retired_upstream) * DAEMON_MAX_UPSTREAMS);
    size_t upstream_count = upstreams != NULL ? sum_upstreams(upstreams) : 0;
    size_t borrowed = daemon_state.retired.upstream_count;
    metrics_write(&t);
    metrics_stream_write(&t);
    /* The generation's clients may be gone once the lock is let go. */
    struct text acme_expiry = {0};
    acme_expiry_write(&acme_expiry);
    pthread_mutex_unlock(&daemon_state.lock);
    metrics_write_process(&t);
    runtime_limits_metrics(&t);
    runtime_cache_metrics(&t);

    if (totals != NULL)
        write_worker_metrics(&t, accept_metrics, sizeof(accept_metrics) / sizeof(accept_metrics[0]),
                             totals, count);
    text_printf(&t,
                "# HELP corral_wakeup_mode_info The wakeup mode requested and what this kernel "
                "gave.\n# TYPE corral_wakeup_mode_info gauge\n"
                "corral_wakeup_mode_info{requested=\"%s\",mode=\"%s\",impl=\"%s\"} 1\n",
                corral_wakeup_mode_name(wakeup.requested), corral_wakeup_mode_name(wakeup.mode),
                wakeup.impl);
    if (totals != NULL && steering)
        write_worker_metrics(&t, steer_metrics, sizeof(steer_metrics) / sizeof(steer_metrics[0]),
                             totals, count);
    text_printf(&t, "# HELP corral_requests_total HTTP responses sent, by status code.\n"
                    "# TYPE corral_requests_total counter\n");
    for (unsigned s = 0; s < HTTP_MAX_STATUS; s++)
        if (responses[s] > 0)
            text_printf(&t, "corral_requests_total{code=\"%u\"} %llu\n", s,
                        (unsigned long long)responses[s]);
    text_printf(&t, "# HELP corral_client_timeouts_total Client connections ended by a timeout, "
                    "by kind.\n# TYPE corral_client_timeouts_total counter\n");
    for (unsigned k = 0; k < HTTP_TIMEOUT_KINDS; k++)
        text_printf(&t, "corral_client_timeouts_total{kind=\"%s\"} %llu\n",
                    http_timeout_kind_names[k], (unsigned long long)timeouts[k]);
    text_printf(&t, "# HELP corral_http2_events_total HTTP/2 streams opened, stream resets "
                    "received and sent, and GOAWAYs sent by reason.\n"
                    "# TYPE corral_http2_events_total counter\n");
    for (unsigned k = 0; k < HTTP2_COUNTERS; k++)
        text_printf(&t, "corral_http2_events_total{event=\"%s\"} %llu\n", http2_counter_names[k],
                    (unsigned long long)http2[k]);
    text_printf(&t, "# HELP corral_proxy_protocol_errors_total Connections closed because their "
                    "PROXY header was malformed or late.\n"
                    "# TYPE corral_proxy_protocol_errors_total counter\n");
    for (unsigned k = 0; k < PROXY_PROTOCOL_FAILURES; k++)
        text_printf(&t, "corral_proxy_protocol_errors_total{reason=\"%s\"} %llu\n",
                    proxy_protocol_failure_names[k], (unsigned long long)proxy_protocol[k]);
    text_printf(&t, "# HELP corral_tls_handshakes_total Completed TLS handshakes with clients, "
                    "full or resumed.\n# TYPE corral_tls_handshakes_total counter\n");
    for (int k = 0; k < TLS_HANDSHAKE_KINDS; k++)
        text_printf(&t, "corral_tls_handshakes_total{kind=\"%s\"} %llu\n",
                    tls_handshake_kind_names[k], (unsigned long long)tls.handshakes[k]);
    text_printf(&t,
                "# HELP corral_tls_handshake_errors_total Client TLS handshakes that failed, by "
                "kind.\n# TYPE corral_tls_handshake_errors_total counter\n");
    for (int k = 0; k < TLS_ERROR_KINDS; k++)
        text_printf(&t, "corral_tls_handshake_errors_total{kind=\"%s\"} %llu\n",
                    tls_error_kind_names[k], (unsigned long long)tls.errors[k]);
    text_printf(&t,
                "# HELP corral_tls_ktls_connections_total TLS connections whose records the "
                "kernel encrypts (kTLS).\n# TYPE corral_tls_ktls_connections_total counter\n"
                "corral_tls_ktls_connections_total %llu\n",
                (unsigned long long)tls.ktls);
    text_printf(&t,
                "# HELP corral_tls_ocsp_fetches_total OCSP responses fetched for stapling: ok "
                "(stapled), failed (unreachable, or a response refused).\n"
                "# TYPE corral_tls_ocsp_fetches_total counter\n"
                "corral_tls_ocsp_fetches_total{result=\"ok\"} %llu\n"
                "corral_tls_ocsp_fetches_total{result=\"failed\"} %llu\n",
                (unsigned long long)tls.ocsp_fetches, (unsigned long long)tls.ocsp_failures);
    text_printf(&t,
                "# HELP corral_acme_certificates_issued_total Certificates issued by an ACME CA "
                "and stored (first issues and renewals).\n"
                "# TYPE corral_acme_certificates_issued_total counter\n"
                "corral_acme_certificates_issued_total %llu\n"
                "# HELP corral_acme_order_failures_total ACME orders that failed (each retried "
                "later).\n"
                "# TYPE corral_acme_order_failures_total counter\n"
                "corral_acme_order_failures_total %llu\n",
                (unsigned long long)tls.acme_issued, (unsigned long long)tls.acme_failures);
    if (acme_expiry.data != NULL)
        text_printf(&t, "%s", acme_expiry.data);
    free(acme_expiry.data);
    text_printf(&t, "# HELP corral_upstream_errors_total Failed upstream attempts, by kind.\n"
                    "# TYPE corral_upstream_errors_total counter\n");
    for (size_t i = 0; i < upstream_count; i++)
        for (int k = 0; k < PROXY_ERROR_KINDS; k++)
            if (upstreams[i].errors[k] > 0)
                text_printf(&t, "corral_upstream_errors_total{upstream=\"%s\",kind=\"%s\"} %llu\n",
                            upstreams[i].name, proxy_error_kind_names[k],
                            (unsigned long long)upstreams[i].errors[k]);
    struct trace_export_totals otel;
    trace_export_totals(&otel);
    text_printf(&t,
                "# HELP corral_otel_spans_exported_total Spans an OpenTelemetry collector "
                "took.\n# TYPE corral_otel_spans_exported_total counter\n"
                "corral_otel_spans_exported_total %llu\n"
                "# HELP corral_otel_spans_dropped_total Spans dropped: a worker's queue was "
                "full, or the worker exited with them.\n"
                "# TYPE corral_otel_spans_dropped_total counter\n"
                "corral_otel_spans_dropped_total %llu\n"
                "# HELP corral_otel_exports_failed_total Span exports that failed (no "
                "connection, or no 2xx answer), each retried with backoff.\n"
                "# TYPE corral_otel_exports_failed_total counter\n"
                "corral_otel_exports_failed_total %llu\n",
                (unsigned long long)otel.exported, (unsigned long long)otel.dropped,
                (unsigned long long)otel.failed);
    text_printf(&t, "# HELP corral_admin_denied_total Admin requests refused: by the admin "
                    "block's allow/deny (403), or for a missing or wrong bearer token (401).\n"
                    "# TYPE corral_admin_denied_total counter\n");
    for (int k = 0; k < ADMIN_REFUSALS; k++)
        text_printf(
            &t, "corral_admin_denied_total{reason=\"%s\"} %llu\n", admin_refusal_names[k],
            (unsigned long long)atomic_load_explicit(&admin_refused[k], memory_order_relaxed));
    text_printf(&t,
                "# HELP corral_config_generation Configurations loaded since start.\n"
                "# TYPE corral_config_generation gauge\ncorral_config_generation %u\n",
                generation);
    text_printf(
        &t,
        "# HELP corral_reloads_total Reloads (SIGHUP): ok started a new generation, "
        "failed left the one before serving (or stopped).\n"
        "# TYPE corral_reloads_total counter\n"
        "corral_reloads_total{result=\"ok\"} %u\ncorral_reloads_total{result=\"failed\"} %u\n",
        atomic_load(&daemon_state.reloads_ok), atomic_load(&daemon_state.reloads_failed));
    text_printf(&t,
                "# HELP corral_start_time_seconds When the daemon started (Unix time).\n"
                "# TYPE corral_start_time_seconds gauge\ncorral_start_time_seconds %llu\n",
                (unsigned long long)daemon_state.started_at);

    exchange_respond(ex, 200, "Content-Type: text/plain; version=0.0.4\r\n", t.data, t.len);
    free(t.data);
    free(totals);
    for (size_t i = borrowed; i < upstream_count; i++)
        free(upstreams[i].name);
    free(upstreams);
}

/* Whether the daemon takes new work: a generation serves and no SIGTERM
 * has asked it to stop. */
/* stub_status's counts (stub_status.h): every generation's, as /metrics
 * sums them.  corral does not count its connections by state: each open
 * one counts as Writing, as documented. */
bool admin_stub_status_counts(struct stub_status_counts *out)
{
    *out = (struct stub_status_counts){0};
    pthread_mutex_lock(&daemon_state.lock);
    if (daemon_state.generations == NULL) {
        pthread_mutex_unlock(&daemon_state.lock);
        return false;
    }
    const struct retired_totals *retired = &daemon_state.retired;
    for (unsigned i = 0; i < DAEMON_MAX_WORKERS; i++)
        out->accepts += retired->accepts[i];
    for (unsigned s = 0; s < HTTP_MAX_STATUS; s++)
        out->requests += retired->responses[s];
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
        for (unsigned w = 0; w < corral_server_worker_count(g->server); w++) {
            struct corral_worker_stats stats;
            corral_server_stats(g->server, w, &stats);
            out->accepts += stats.accepts;
            out->active += stats.connections_active;
            for (unsigned s = 0; s < HTTP_MAX_STATUS; s++)
                out->requests +=
                    atomic_load_explicit(&g->stats[w].responses[s], memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&daemon_state.lock);
    /* corral closes no accepted connection for want of resources before
     * it serves it: every accepted one is handled, as in nginx without
     * worker_connections reached. */
    out->handled = out->accepts;
    out->writing = out->active;
    return true;
}

static bool daemon_ready(void)
{
    return daemon_state.generations != NULL &&
           !atomic_load_explicit(&daemon_state.stopping, memory_order_relaxed);
}

/* The upstreams of `gen`, each server with its state (what
 * corral_upstream_server_up says: the config's `down`, the health checks
 * and passive failures together), how many workers skip it for passive
 * failures, and its connections.  Under daemon_state.lock. */
static void write_status_upstreams(struct text *t, const struct generation *gen, uint64_t now)
{
    for (size_t u = 0; u < gen->upstream_count; u++) {
        const struct proxy_upstream *up = gen->upstreams[u].upstream;
        text_printf(t, "%s{\"name\": ", u > 0 ? ", " : "");
        text_json_string(t, up->name);
        text_printf(t, ", \"servers\": [");
        bool first = true;
        for (size_t i = 0; i < up->server_count; i++) {
            if (upstream_server_api_unused(up, i))
                continue; /* an api_servers slot that holds none */
            uint64_t open = 0, idle = 0;
            unsigned down = 0;
            for (unsigned w = 0; w < up->worker_count; w++) {
                const struct upstream_server_stats *st = &up->workers[w].stats[i];
                open += atomic_load_explicit(&st->open, memory_order_relaxed);
                idle += atomic_load_explicit(&st->idle, memory_order_relaxed);
                down += upstream_server_down(&up->workers[w], (unsigned)i, now);
            }
            idle = idle < open ? idle : open;
            text_printf(t, "%s{\"address\": ", first ? "" : ", ");
            first = false;
            text_json_string(t, up->servers[i].address);
            text_printf(t,
                        ", \"state\": \"%s\", \"down_workers\": %u, \"active\": %llu, "
                        "\"idle\": %llu}",
                        health_server_up(up, i, now) ? "up" : "down", down,
                        (unsigned long long)(open - idle), (unsigned long long)idle);
        }
        text_printf(t, "]}");
    }
}

static void status_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    struct text t = {0};
    pthread_mutex_lock(&daemon_state.lock);
    struct generation *current = daemon_state.generations;
    if (current == NULL) { /* workers serve before main() publishes them */
        pthread_mutex_unlock(&daemon_state.lock);
        exchange_respond_error(ex, 503);
        return;
    }
    struct corral_wakeup_info wakeup;
    corral_server_wakeup(current->server, &wakeup);
    uint64_t active = 0;
    unsigned running = 0;
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
        running++;
        for (unsigned i = 0; i < corral_server_worker_count(g->server); i++) {
            struct corral_worker_stats stats;
            corral_server_stats(g->server, i, &stats);
            active += stats.connections_active;
        }
    }
    text_printf(&t,
                "{\"version\": \"%s\", \"pid\": %d, \"uptime_seconds\": %llu, \"config_file\": ",
                CORRAL_VERSION, (int)getpid(),
                (unsigned long long)((uint64_t)time(NULL) - daemon_state.started_at));
    text_json_string(&t, current->config->path);
    text_printf(
        &t,
        ", \"config_generation\": %u, \"generations_running\": %u, \"workers\": %u, "
        "\"wakeup\": {\"requested\": \"%s\", \"mode\": \"%s\", \"impl\": \"%s\", \"reason\": ",
        atomic_load(&daemon_state.accepting), running, corral_server_worker_count(current->server),
        corral_wakeup_mode_name(wakeup.requested), corral_wakeup_mode_name(wakeup.mode),
        wakeup.impl);
    text_json_string(&t, wakeup.reason);
    unsigned reloads_ok = atomic_load(&daemon_state.reloads_ok);
    unsigned reloads_failed = atomic_load(&daemon_state.reloads_failed);
    text_printf(&t, "}, \"reloads\": {\"ok\": %u, \"failed\": %u, \"last\": %s}", reloads_ok,
                reloads_failed,
                reloads_ok + reloads_failed == 0                ? "null"
                : atomic_load(&daemon_state.last_reload_failed) ? "\"failed\""
                                                                : "\"ok\"");
    text_printf(&t, ", \"ready\": %s, \"upstreams\": [", daemon_ready() ? "true" : "false");
    write_status_upstreams(&t, current, corral_loop_now(exchange_loop(ex)));
    text_printf(&t, "], \"connections_active\": %llu}\n", (unsigned long long)active);
    pthread_mutex_unlock(&daemon_state.lock);
    exchange_respond(ex, 200, "Content-Type: application/json\r\n", t.data, t.len);
    free(t.data);
}

const struct http_handler admin_metrics_handler = {
    .name = "metrics",
    .on_request = metrics_on_request,
};

const struct http_handler admin_status_handler = {
    .name = "status",
    .on_request = status_on_request,
};

/* GET /healthz: the process answers, so it is alive. */
static void healthz_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    exchange_respond(ex, 200, "Content-Type: text/plain\r\n", "ok\n", 3);
}

/* GET /readyz: 200 while it takes new work, 503 from SIGTERM on (during
 * shutdown_delay, before the listeners close), so that load balancers stop
 * sending first. */
static void readyz_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    (void)data;
    pthread_mutex_lock(&daemon_state.lock);
    bool ready = daemon_ready();
    pthread_mutex_unlock(&daemon_state.lock);
    if (ready)
        exchange_respond(ex, 200, "Content-Type: text/plain\r\n", "ready\n", 6);
    else
        exchange_respond(ex, 503, "Content-Type: text/plain\r\n", "stopping\n", 9);
}

const struct http_handler admin_healthz_handler = {
    .name = "healthz",
    .on_request = healthz_on_request,
};

const struct http_handler admin_readyz_handler = {
    .name = "readyz",
    .on_request = readyz_on_request,
};
