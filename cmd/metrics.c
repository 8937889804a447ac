/*
 * metrics.c: the /metrics families whose labels come from the
 * configuration: request and upstream latency histograms, byte counters,
 * upstream connections; and process_* from /proc.  Series are keyed by
 * their label text, so that two generations (or two server blocks with the
 * same name) add up into one series instead of repeating it.
 */
#include "cmd/metrics.h"

#include "proto/http3/http3.h"
#include "proto/upstream/health.h"
#include "proto/http/vars.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ------------------------------------------------------------------ text */

void text_printf(struct text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        /* An empty text has no buffer yet, and NULL + 0 is undefined. */
        int n = vsnprintf(t->data != NULL ? t->data + t->len : NULL, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap <= t->len + (size_t)n)
            cap *= 2;
        char *grown = realloc(t->data, cap);
        if (grown == NULL)
            return;
        t->data = grown;
        t->cap = cap;
    }
}

void text_json_string(struct text *t, const char *s)
{
    char small[256];
    struct vars_buf escaped;
    vars_buf_init(&escaped, small, sizeof(small));
    vars_escape_json(&escaped, s, strlen(s));
    text_printf(t, "\"%.*s\"", (int)escaped.len, escaped.data);
    vars_buf_free(&escaped);
}

void text_label(struct text *t, const char *name, const char *value)
{
    text_printf(t, "%s=\"", name);
    for (; *value != '\0'; value++) {
        if (*value == '\\' || *value == '"')
            text_printf(t, "\\%c", *value);
        else if (*value == '\n')
            text_printf(t, "\\n");
        else
            text_printf(t, "%c", *value);
    }
    text_printf(t, "\"");
}

/* ---------------------------------------------------------------- series */

struct series {
    char *labels; /* the label pairs as written: server="a" */
    uint64_t buckets[STATUS_CLASSES][HISTOGRAM_BOUNDS + 1];
    uint64_t sum_ns[STATUS_CLASSES];
    uint64_t open, idle; /* upstream connections: gauges of running generations */
};

struct series_table {
    struct series *items;
    size_t count, cap;
};

/* Labels stay bounded by configurations; this bounds what reloads with
 * ever new names can pile up. */
#define SERIES_MAX 4096

/* The series with `labels` (taking them), a new one if there is none;
 * NULL when out of memory or room (then `labels` is freed). */
static struct series *series_get(struct series_table *table, char *labels)
{
    if (labels == NULL)
        return NULL;
    for (size_t i = 0; i < table->count; i++) {
        if (strcmp(table->items[i].labels, labels) == 0) {
            free(labels);
            return &table->items[i];
        }
    }
    if (table->count == table->cap) {
        size_t cap = table->cap ? table->cap * 2 : 16;
        struct series *grown =
            cap <= SERIES_MAX ? realloc(table->items, cap * sizeof(*grown)) : NULL;
        if (grown == NULL) {
            free(labels);
            return NULL;
        }
        table->items = grown;
        table->cap = cap;
    }
    struct series *s = &table->items[table->count++];
    *s = (struct series){.labels = labels};
    return s;
}

static void series_free(struct series_table *table)
{
    for (size_t i = 0; i < table->count; i++)
        free(table->items[i].labels);
    free(table->items);
    *table = (struct series_table){0};
}

/* Adds `from`'s values into `table`'s series of the same labels. */
static void series_merge(struct series_table *table, const struct series_table *from)
{
    for (size_t i = 0; i < from->count; i++) {
        const struct series *f = &from->items[i];
        struct series *s = series_get(table, strdup(f->labels));
        if (s == NULL)
            continue;
        for (int c = 0; c < STATUS_CLASSES; c++) {
            for (int b = 0; b <= HISTOGRAM_BOUNDS; b++)
                s->buckets[c][b] += f->buckets[c][b];
            s->sum_ns[c] += f->sum_ns[c];
        }
    }
}

static void series_add_histograms(struct series *s, const struct histogram *h)
{
    for (int c = 0; c < STATUS_CLASSES; c++) {
        for (int b = 0; b <= HISTOGRAM_BOUNDS; b++)
            s->buckets[c][b] += atomic_load_explicit(&h[c].buckets[b], memory_order_relaxed);
        s->sum_ns[c] += atomic_load_explicit(&h[c].sum_ns, memory_order_relaxed);
    }
}

static char *labels_dup(const char *first, const char *a, const char *second, const char *b)
{
    struct text t = {0};
    text_label(&t, first, a);
    if (second != NULL) {
        text_printf(&t, ",");
        text_label(&t, second, b);
    }
    return t.data;
}

/* The `server` label of server block `slot` of `config` (the last slot is
 * the admin listener's): its first server_name, else its listen address. */
static const char *server_label(const struct conf_config *config, unsigned slot)
{
    if (slot >= config->server_count)
        return config->admin_listen_count > 0 ? config->admin_listens[0] : "admin";
    const struct conf_server *server = &config->servers[slot];
    if (server->server_name_count > 0 && server->server_names[0][0] != '\0')
        return server->server_names[0];
    return server->listen_count > 0 ? server->listens[0].address : "-";
}

/* ----------------------------------------------------------- generations */

int metrics_attach(struct generation *gen, unsigned workers)
{
    unsigned slots = (unsigned)gen->config->server_count + 1;
    size_t size = (size_t)workers * slots * sizeof(struct http_server_stats);
    /* Whole cache lines per worker: sizeof is a multiple of 64. */
    struct http_server_stats *all = aligned_alloc(64, size);
    if (all == NULL)
        return -ENOMEM;
    memset(all, 0, size);
    for (unsigned w = 0; w < workers; w++) {
        gen->stats[w].servers = all + (size_t)w * slots;
        gen->stats[w].server_count = slots;
    }
    return 0;
}

void metrics_detach(struct generation *gen)
{
    if (gen->stats != NULL)
        free(gen->stats[0].servers);
}

/* Adds `gen`'s histograms to `requests` (by server) and `upstreams` (by
 * upstream and server), and its upstream connections to `conns` (by
 * upstream; NULL: not wanted). */
static void add_generation(struct series_table *requests, struct series_table *upstreams,
                           struct series_table *conns, const struct generation *gen)
{
    unsigned workers = corral_server_worker_count(gen->server);
    for (unsigned slot = 0; workers > 0 && slot < gen->stats[0].server_count; slot++) {
        struct series *s =
            series_get(requests, labels_dup("server", server_label(gen->config, slot), NULL, NULL));
        for (unsigned w = 0; s != NULL && w < workers; w++)
            series_add_histograms(s, gen->stats[w].servers[slot].duration);
    }
    for (size_t u = 0; u < gen->upstream_count; u++) {
        const struct proxy_upstream *up = gen->upstreams[u].upstream;
        struct series *c =
            conns != NULL ? series_get(conns, labels_dup("upstream", up->name, NULL, NULL)) : NULL;
        for (size_t i = 0; i < up->server_count; i++) {
            /* an api_servers slot that holds no server has no series */
            struct series *s =
                upstream_server_api_unused(up, i)
                    ? NULL
                    : series_get(upstreams, labels_dup("upstream", up->name, "server",
                                                       up->servers[i].address));
            for (unsigned w = 0; w < up->worker_count; w++) {
                const struct upstream_server_stats *st = &up->workers[w].stats[i];
                if (s != NULL)
                    series_add_histograms(s, st->response);
                if (c == NULL)
                    continue;
                c->open += atomic_load_explicit(&st->open, memory_order_relaxed);
                c->idle += atomic_load_explicit(&st->idle, memory_order_relaxed);
            }
        }
    }
}

/* What exited generations counted, for counters that never go back. */
static struct {
    struct series_table requests, upstreams;
    uint64_t bytes[4]; /* client in, out; upstream in, out */
} retired;

static void add_bytes(uint64_t bytes[4], const struct generation *gen)
{
    for (unsigned w = 0; w < corral_server_worker_count(gen->server); w++) {
        struct corral_worker_stats stats;
        corral_server_stats(gen->server, w, &stats);
        bytes[0] += stats.client_bytes_in;
        bytes[1] += stats.client_bytes_out;
        bytes[2] += stats.outgoing_bytes_in;
        bytes[3] += stats.outgoing_bytes_out;
    }
}

void metrics_retire(struct generation *gen)
{
    if (gen->stats == NULL || gen->stats[0].servers == NULL)
        return;
    add_generation(&retired.requests, &retired.upstreams, NULL, gen);
    add_bytes(retired.bytes, gen);
}

/* ---------------------------------------------------------------- output */

static const char *const class_names[STATUS_CLASSES] = {"1xx", "2xx", "3xx", "4xx", "5xx"};

static void write_histograms(struct text *t, const char *name, const char *help,
                             const struct series_table *table)
{
    static const uint64_t bounds_us[HISTOGRAM_BOUNDS] = HISTOGRAM_BOUNDS_US;
    text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < table->count; i++) {
        const struct series *s = &table->items[i];
        for (int c = 0; c < STATUS_CLASSES; c++) {
            uint64_t count = 0;
            for (int b = 0; b <= HISTOGRAM_BOUNDS; b++)
                count += s->buckets[c][b];
            if (count == 0) /* classes never seen are left out */
                continue;
            uint64_t cumulative = 0;
            for (int b = 0; b < HISTOGRAM_BOUNDS; b++) {
                cumulative += s->buckets[c][b];
                text_printf(t, "%s_bucket{%s,code=\"%s\",le=\"%g\"} %llu\n", name, s->labels,
                            class_names[c], (double)bounds_us[b] / 1e6,
                            (unsigned long long)cumulative);
            }
            text_printf(t, "%s_bucket{%s,code=\"%s\",le=\"+Inf\"} %llu\n", name, s->labels,
                        class_names[c], (unsigned long long)count);
            text_printf(t, "%s_sum{%s,code=\"%s\"} %.9f\n", name, s->labels, class_names[c],
                        (double)s->sum_ns[c] / 1e9);
            text_printf(t, "%s_count{%s,code=\"%s\"} %llu\n", name, s->labels, class_names[c],
                        (unsigned long long)count);
        }
    }
}

static void write_counter(struct text *t, const char *name, const char *help, uint64_t value)
{
    text_printf(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                (unsigned long long)value);
}

/* corral_upstream_server_up of `gen`'s upstreams: every server, backups
 * and `down` ones too, as the health checks and passive failures leave it;
 * a `resolve` name is up while any of its addresses is. */
static void write_server_up(struct text *t, const struct generation *gen)
{
    text_printf(t, "# HELP corral_upstream_server_up Whether an upstream server takes requests: "
                   "not down in the config, by its health checks or by passive failures.\n"
                   "# TYPE corral_upstream_server_up gauge\n");
    uint64_t now = corral_monotonic_ns() / 1000000; /* the loops' clock */
    struct series_table servers = {0};              /* open: up; idle: seen */
    for (size_t u = 0; gen != NULL && u < gen->upstream_count; u++) {
        const struct proxy_upstream *up = gen->upstreams[u].upstream;
        for (size_t i = 0; i < up->server_count; i++) {
            const struct upstream_server *server = &up->servers[i];
            if (server->resolve_slot != 0 || upstream_server_api_unused(up, i))
                continue; /* counted with the name's first slot, or no server */
            struct series *s =
                series_get(&servers, labels_dup("upstream", up->name, "server", server->address));
            if (s == NULL)
                continue;
            s->idle = 1;
            size_t slots = server->resolve_name != NULL ? server->resolve_slots : 1;
            for (size_t k = 0; k < slots && i + k < up->server_count; k++)
                s->open += health_server_up(up, i + k, now);
        }
    }
    for (size_t i = 0; i < servers.count; i++)
        text_printf(t, "corral_upstream_server_up{%s} %d\n", servers.items[i].labels,
                    servers.items[i].open > 0);
    series_free(&servers);
}

/* Per worker of the newest generation: its handshakes and what the eBPF
 * steering program sent it (new connections, datagrams by the server's
 * connection ID), over its quic listens; and how each listen is steered. */
static void write_quic_workers(struct text *t)
{
    const struct generation *g = daemon_state.generations;
    if (g == NULL || g->server == NULL)
        return;
    unsigned workers = corral_server_worker_count(g->server);
    text_printf(t, "# HELP corral_quic_steering_info How a quic listen's datagrams reach their "
                   "worker (impl: ebpf, cbpf, hash, none) and how new connections are spread.\n"
                   "# TYPE corral_quic_steering_info gauge\n");
    for (size_t i = 0; i < g->udp_site_count; i++) {
        const struct site *site = &g->udp_sites[i];
        char address[128];
        if (site->quic == NULL || site->udp == NULL ||
            corral_udp_address(site->udp, address, sizeof(address)) != 0)
            continue;
        struct corral_udp_steering steering;
        corral_udp_steering(site->udp, &steering);
        text_printf(t, "corral_quic_steering_info{listen=\"%s\",impl=\"%s\",initials=\"%s\"} 1\n",
                    address, steering.impl, steering.initials);
    }
    text_printf(t, "# HELP corral_quic_worker_handshakes_total QUIC handshakes completed, by "
                   "worker.\n# TYPE corral_quic_worker_handshakes_total counter\n");
    for (unsigned w = 0; w < workers; w++) {
        uint64_t handshakes = 0;
        for (size_t i = 0; i < g->udp_site_count; i++) {
            struct h3_udp_stats one;
            if (g->udp_sites[i].quic != NULL &&
                h3_udp_site_stats(g->udp_sites[i].quic, w, &one) == 0)
                handshakes += one.v[H3_HANDSHAKES];
        }
        text_printf(t, "corral_quic_worker_handshakes_total{worker=\"%u\"} %llu\n", w,
                    (unsigned long long)handshakes);
    }
    text_printf(t, "# HELP corral_quic_steered_total What the eBPF steering program sent each "
                   "worker: new connections, and datagrams by the connection ID it gave.\n"
                   "# TYPE corral_quic_steered_total counter\n");
    for (unsigned w = 0; w < workers; w++) {
        uint64_t fresh = 0, owned = 0;
        for (size_t i = 0; i < g->udp_site_count; i++) {
            struct corral_udp_stats one;
            if (g->udp_sites[i].quic != NULL && g->udp_sites[i].udp != NULL &&
                corral_udp_stats(g->udp_sites[i].udp, w, &one) == 0) {
                fresh += one.steered_new;
                owned += one.steered_owned;
            }
        }
        text_printf(t,
                    "corral_quic_steered_total{worker=\"%u\",kind=\"new\"} %llu\n"
                    "corral_quic_steered_total{worker=\"%u\",kind=\"owned\"} %llu\n",
                    w, (unsigned long long)fresh, w, (unsigned long long)owned);
    }
}

/* The QUIC listens' counters, summed over workers and the generations
 * still running (a retired generation's are gone with it); nothing when
 * no generation has a quic listen. */
static void write_quic(struct text *t)
{
    struct h3_udp_stats sum = {0};
    bool any = false;
    for (const struct generation *g = daemon_state.generations; g != NULL; g = g->next)
        for (size_t i = 0; i < g->udp_site_count; i++) {
            const struct h3_udp_site *site = g->udp_sites[i].quic;
            any |= site != NULL;
            struct h3_udp_stats one;
            for (unsigned w = 0; site != NULL && h3_udp_site_stats(site, w, &one) == 0; w++)
                for (unsigned c = 0; c < H3_COUNTER_COUNT; c++)
                    sum.v[c] += one.v[c];
        }
    if (!any)
        return; /* no quic listen: no families, as for stream */
    for (unsigned c = 0; c < H3_COUNTER_COUNT; c++) {
        const struct h3_counter_info *info = &h3_counter_info[c];
        text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", info->name, info->help, info->name,
                    info->kind == H3_KIND_GAUGE ? "gauge" : "counter");
        if (info->kind == H3_KIND_SECONDS)
            text_printf(t, "%s %.6f\n", info->name, (double)sum.v[c] / 1e9);
        else
            text_printf(t, "%s %llu\n", info->name, (unsigned long long)sum.v[c]);
    }
    write_quic_workers(t);
}

void metrics_write(struct text *t)
{
    struct series_table requests = {0}, upstreams = {0}, by_upstream = {0};
    series_merge(&requests, &retired.requests);
    series_merge(&upstreams, &retired.upstreams);
    uint64_t bytes[4];
    memcpy(bytes, retired.bytes, sizeof(bytes));
    for (const struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
        if (g->stats != NULL && g->stats[0].servers != NULL)
            add_generation(&requests, &upstreams, &by_upstream, g);
        add_bytes(bytes, g);
    }

    write_histograms(t, "corral_request_duration_seconds",
                     "Time from a request's first byte to the end of its response, by server "
                     "block and status class.",
                     &requests);
    write_histograms(t, "corral_upstream_response_seconds",
                     "Time from sending a request to an upstream server to the end of its "
                     "response, by status class.",
                     &upstreams);
    text_printf(t, "# HELP corral_upstream_requests_total Responses received from each upstream "
                   "server, by status class.\n# TYPE corral_upstream_requests_total counter\n");
    for (size_t i = 0; i < upstreams.count; i++) {
        for (int c = 0; c < STATUS_CLASSES; c++) {
            uint64_t count = 0;
            for (int b = 0; b <= HISTOGRAM_BOUNDS; b++)
                count += upstreams.items[i].buckets[c][b];
            if (count > 0)
                text_printf(t, "corral_upstream_requests_total{%s,code=\"%s\"} %llu\n",
                            upstreams.items[i].labels, class_names[c], (unsigned long long)count);
        }
    }
    text_printf(t, "# HELP corral_upstream_connections Open connections to upstream servers: "
                   "active (serving a request) or idle (pooled).\n"
                   "# TYPE corral_upstream_connections gauge\n");
    for (size_t i = 0; i < by_upstream.count; i++) {
        const struct series *u = &by_upstream.items[i];
        uint64_t idle = u->idle < u->open ? u->idle : u->open;
        text_printf(t, "corral_upstream_connections{%s,state=\"active\"} %llu\n", u->labels,
                    (unsigned long long)(u->open - idle));
        text_printf(t, "corral_upstream_connections{%s,state=\"idle\"} %llu\n", u->labels,
                    (unsigned long long)idle);
    }
    series_free(&by_upstream);
    series_free(&requests);
    series_free(&upstreams);
    write_server_up(t, daemon_state.generations); /* the newest generation's */

    write_counter(t, "corral_client_received_bytes_total",
                  "Bytes read from client connections (after TLS).", bytes[0]);
    write_counter(t, "corral_client_sent_bytes_total",
                  "Bytes written to client connections (before TLS).", bytes[1]);
    write_counter(t, "corral_upstream_received_bytes_total",
                  "Bytes read from upstream connections (after TLS).", bytes[2]);
    write_counter(t, "corral_upstream_sent_bytes_total",
                  "Bytes written to upstream connections (before TLS).", bytes[3]);
    write_quic(t);
}

/* --------------------------------------------------------------- process */

/* Fields of /proc/self/stat after the command name, which may hold spaces
 * and parentheses: read from the last ')'. */
struct proc_stat {
    unsigned long long utime, stime, starttime, vsize;
    long long rss;
};

static int read_proc_stat(struct proc_stat *out)
{
    char buf[1024];
    *out = (struct proc_stat){0};
    FILE *f = fopen("/proc/self/stat", "re");
    if (f == NULL)
        return -EIO;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime priority nice num_threads
     * itrealvalue starttime vsize rss (proc(5), fields 3 to 24) */
    if (p == NULL || sscanf(p + 1,
                            " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d "
                            "%*d %*d %*d %llu %llu %lld",
                            &out->utime, &out->stime, &out->starttime, &out->vsize, &out->rss) != 5)
        return -EINVAL;
    return 0;
}

/* The boot time from /proc/stat's btime line, Unix seconds; 0 if unknown. */
static unsigned long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (f == NULL)
        return 0;
    char line[256];
    unsigned long long btime = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "btime %llu", &btime) == 1)
            break;
    fclose(f);
    return btime;
}

static long count_open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return -1;
    long count = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        count += e->d_name[0] != '.';
    closedir(dir);
    return count - 1; /* the directory's own descriptor */
}

static void write_gauge(struct text *t, const char *name, const char *help, double value)
{
    text_printf(t, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, value);
}

void metrics_write_process(struct text *t)
{
    struct proc_stat st;
    long ticks = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    if (read_proc_stat(&st) == 0 && ticks > 0 && page > 0) {
        text_printf(t,
                    "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                    "seconds.\n# TYPE process_cpu_seconds_total counter\n"
                    "process_cpu_seconds_total %.2f\n",
                    (double)(st.utime + st.stime) / (double)ticks);
        write_gauge(t, "process_resident_memory_bytes", "Resident memory size in bytes.",
                    (double)st.rss * (double)page);
        write_gauge(t, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                    (double)st.vsize);
        unsigned long long btime = boot_time();
        if (btime > 0)
            text_printf(t,
                        "# HELP process_start_time_seconds Start time of the process since unix "
                        "epoch in seconds.\n# TYPE process_start_time_seconds gauge\n"
                        "process_start_time_seconds %.2f\n",
                        (double)btime + (double)st.starttime / (double)ticks);
    }
    long fds = count_open_fds();
    if (fds >= 0)
        write_gauge(t, "process_open_fds", "Number of open file descriptors.", (double)fds);
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0)
        write_gauge(t, "process_max_fds", "Maximum number of open file descriptors.",
                    limit.rlim_cur == RLIM_INFINITY ? -1.0 : (double)limit.rlim_cur);
}
