/*
 * wakebench.c: corral-wakebench, the accept-path benchmark.  Runs libcorral
 * in-process with N workers in each wakeup mode and mechanism and drives it
 * from client threads over loopback, then prints per run: wakeups per
 * accept, wasted wakeups, balance across workers, CPU locality, connection
 * rate, CPU per connection and the p50/p99/p99.9 latency from connect() to
 * the worker reading the first bytes.
 */
#include "cmd/wakebench.h"

#include <corral.h>

#include <bpf/bpf.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64
#define MAX_CLIENTS 16
#define MAX_REPEAT  15

static const char *const scenario_names[] = {"paced", "burst", "long", "uneven", "stalled"};

struct options {
    unsigned worker_counts[8];
    size_t worker_count_count;
    bool modes[CORRAL_WAKEUP_BALANCED + 1];
    bool scenarios[SCENARIO_COUNT];
    unsigned connections;
    unsigned clients;
    unsigned rate; /* paced: connections per second, all clients together */
    unsigned burst;
    bool json;
    bool one_cpu;     /* every client on the first CPU */
    bool closed_loop; /* uneven and stalled: clients wait for each answer */
    double spill;     /* wakeup affinity spill=; 0 = the library's */
    unsigned repeat;  /* runs of each mode; the row is the one with the middle p99 */
    const char *disable;
    const char *trace; /* per-connection timings written here, for the last run */
};

/* ------------------------------------------------------------ the server */

/* What --trace records of a connection, CLOCK_MONOTONIC ns: when the
 * client called connect(), when the worker accepted it, when it read the
 * first bytes and when it had answered (after the heavy work, if any). */
struct trace_entry {
    uint64_t started, accepted, read, answered;
    uint64_t heavy;
};

/* Latencies recorded by each worker into its own array: no sharing. */
struct worker_samples {
    uint64_t *latency_ns;
    struct trace_entry *trace; /* with --trace */
    size_t count, cap;
} __attribute__((aligned(64)));

struct bench_server {
    corral_server *server;
    struct worker_samples samples[MAX_WORKERS];
};

/* Voluntary context switches count every time a worker blocked and was woken
 * again, including wakeups the kernel swallowed because another worker had
 * already taken the connection: the part of a herd no user-space counter
 * sees.  getrusage(RUSAGE_THREAD) must run on the worker itself. */
struct sleep_count {
    atomic_uint pending;
    uint64_t total;
    pthread_mutex_t lock;
};

static void read_worker_sleeps(void *arg)
{
    struct sleep_count *count = arg;
    struct rusage usage;
    getrusage(RUSAGE_THREAD, &usage);
    pthread_mutex_lock(&count->lock);
    count->total += (uint64_t)usage.ru_nvcsw;
    pthread_mutex_unlock(&count->lock);
    atomic_fetch_sub(&count->pending, 1);
}

static uint64_t worker_sleeps(corral_server *server)
{
    struct sleep_count count = {.lock = PTHREAD_MUTEX_INITIALIZER};
    unsigned workers = corral_server_worker_count(server);
    atomic_store(&count.pending, workers);
    for (unsigned i = 0; i < workers; i++)
        corral_worker_post(corral_server_worker(server, i), read_worker_sleeps, &count);
    while (atomic_load(&count.pending) > 0)
        usleep(1000);
    return count.total;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t bench_on_data(corral_conn *conn, const char *data, size_t len)
{
    if (len < sizeof(struct message))
        return 0;
    struct message message;
    memcpy(&message, data, sizeof(message));
    struct bench_server *bench = corral_conn_listener_data(conn);
    struct worker_samples *samples = &bench->samples[corral_worker_index(corral_conn_worker(conn))];
    uint64_t now = corral_monotonic_ns();
    struct trace_entry *trace = NULL;
    if (samples->count < samples->cap) {
        if (samples->trace != NULL)
            trace = &samples->trace[samples->count];
        samples->latency_ns[samples->count++] = now - message.started;
    }
    if (message.heavy) {
        uint64_t until = thread_cpu_ns() + HEAVY_CPU_NS;
        while (thread_cpu_ns() < until)
            ;
    }
    corral_conn_write(conn, "k", 1);
    if (trace != NULL)
        *trace = (struct trace_entry){
            .started = message.started,
            .accepted = (uint64_t)(uintptr_t)corral_conn_data(conn),
            .read = now,
            .answered = corral_monotonic_ns(),
            .heavy = message.heavy,
        };
    return sizeof(message);
}

/* --trace: the accept time rides in the connection's data pointer. */
static void bench_on_open(corral_conn *conn)
{
    corral_conn_set_data(conn, (void *)(uintptr_t)corral_monotonic_ns());
}

/* stalled: worker 0 sleeps STALL_MS, posted every STALL_EVERY_MS. */
struct staller {
    pthread_t thread;
    corral_server *server;
    atomic_bool stop;
};

static void stall_worker(void *arg)
{
    (void)arg;
    usleep(STALL_MS * 1000);
}

static void *staller_main(void *arg)
{
    struct staller *st = arg;
    for (unsigned ms = 0; !atomic_load(&st->stop); ms += 10) {
        if (ms % STALL_EVERY_MS == 100)
            corral_worker_post(corral_server_worker(st->server, 0), stall_worker, NULL);
        usleep(10000);
    }
    return NULL;
}

static const struct corral_conn_handler bench_handler = {.on_data = bench_on_data};
static const struct corral_conn_handler trace_handler = {.on_open = bench_on_open,
                                                         .on_data = bench_on_data};

/* ---------------------------------------------------------------- a run */

struct result {
    const char *mode;
    const char *impl;
    const char *scenario;
    unsigned workers;
    uint64_t accepts, wakeups, wasted, local, sleeps;
    uint64_t taken; /* balanced: accepted off another worker's queue */
    double max_over_mean;
    double seconds;
    double p50_ms, p99_ms, p999_ms;
    double cpu_us; /* process CPU (workers, clients, kernel) per connection */
    double bpf_ns; /* the steering program's run time per run, or -1 */
    unsigned failures;
    unsigned min_accepts, max_accepts;
};

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double process_cpu_us(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 +
           (double)(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

/* The steering program's average run time, from the kernel's statistics
 * (on while bpf_enable_stats()'s descriptor is open): the most recently
 * loaded program of that name, which is this run's.  -1 if none. */
static double steer_program_ns(void)
{
    __u32 id = 0, found = 0;
    while (bpf_prog_get_next_id(id, &id) == 0) {
        int fd = bpf_prog_get_fd_by_id(id);
        if (fd < 0)
            continue;
        struct bpf_prog_info info = {0};
        __u32 len = sizeof(info);
        if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && strcmp(info.name, "corral_steer") == 0)
            found = id;
        close(fd);
    }
    int fd = found != 0 ? bpf_prog_get_fd_by_id(found) : -1;
    if (fd < 0)
        return -1;
    struct bpf_prog_info info = {0};
    __u32 len = sizeof(info);
    double ns = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.run_cnt > 0
                    ? (double)info.run_time_ns / (double)info.run_cnt
                    : -1;
    close(fd);
    return ns;
}

static double percentile_ms(const uint64_t *sorted, size_t n, unsigned per_mille)
{
    if (n == 0)
        return 0;
    size_t i = n * per_mille / 1000;
    return (double)sorted[i < n ? i : n - 1] / 1e6;
}

/* Appends one line per connection: run, mode, mechanism, workers, worker,
 * heavy, then connect, accept, first read and answer in microseconds from
 * the run's start. */
static void write_trace(const char *path, const struct bench_server *bench, unsigned workers,
                        uint64_t start, const struct result *r)
{
    static unsigned run;
    FILE *f = fopen(path, run == 0 ? "w" : "a");
    if (f == NULL) {
        fprintf(stderr, "corral-wakebench: %s: %s\n", path, strerror(errno));
        return;
    }
    if (run == 0)
        fprintf(f, "run,mode,mechanism,workers,worker,heavy,connect_us,accept_us,read_us,"
                   "answer_us\n");
    for (unsigned w = 0; w < workers; w++) {
        for (size_t k = 0; k < bench->samples[w].count; k++) {
            const struct trace_entry *t = &bench->samples[w].trace[k];
            fprintf(f, "%u,%s,%s,%u,%u,%u,%.1f,%.1f,%.1f,%.1f\n", run, r->mode, r->impl, workers, w,
                    (unsigned)t->heavy, (double)((int64_t)(t->started - start)) / 1e3,
                    (double)((int64_t)(t->accepted - start)) / 1e3,
                    (double)((int64_t)(t->read - start)) / 1e3,
                    (double)((int64_t)(t->answered - start)) / 1e3);
        }
    }
    fclose(f);
    run++;
}

static int run_one(const struct options *opt, enum corral_wakeup_mode mode, const char *disable,
                   unsigned workers, enum scenario scenario, struct result *out)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if ((opt->disable != NULL && corral_caps_disable(&caps, opt->disable) != 0) ||
        corral_caps_disable(&caps, disable) != 0) {
        fprintf(stderr, "corral-wakebench: --disable %s: unknown capability\n", opt->disable);
        return -EINVAL;
    }
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = workers;
    config.wakeup = mode;
    config.caps = &caps;
    config.wakeup_spill = opt->spill;
    config.count_locality = true; /* locality is one of the figures compared */

    struct bench_server *bench = calloc(1, sizeof(*bench));
    int err = corral_server_new(&config, &bench->server);
    if (err != 0)
        goto out;
    for (unsigned i = 0; i < workers; i++) {
        bench->samples[i].cap = opt->connections;
        bench->samples[i].latency_ns = calloc(opt->connections, sizeof(uint64_t));
        if (opt->trace != NULL)
            bench->samples[i].trace = calloc(opt->connections, sizeof(struct trace_entry));
    }
    struct corral_listen_options listen_options;
    corral_listen_options_init(&listen_options);
    listen_options.backlog = 4096;
    corral_listener *listener;
    err = corral_server_listen(bench->server, "127.0.0.1:0", &listen_options,
                               opt->trace != NULL ? &trace_handler : &bench_handler, bench,
                               &listener);
    if (err == 0)
        err = corral_server_start(bench->server);
    if (err != 0)
        goto out;

    unsigned clients = opt->clients;
    struct client client[MAX_CLIENTS];
    int *held = scenario == SCENARIO_LONG ? calloc(opt->connections, sizeof(int)) : NULL;
    unsigned assigned = 0;
    uint64_t sleeps_before = worker_sleeps(bench->server);
    struct staller staller = {.server = bench->server};
    if (scenario == SCENARIO_STALLED)
        pthread_create(&staller.thread, NULL, staller_main, &staller);
    double cpu_before = process_cpu_us();
    uint64_t start = corral_monotonic_ns();
    for (unsigned i = 0; i < clients; i++) {
        unsigned share = opt->connections / clients + (i < opt->connections % clients);
        client[i] = (struct client){
            .port = corral_listener_port(listener),
            .cpu = caps.cpus[opt->one_cpu ? 0 : i % caps.cpu_count],
            .scenario = scenario,
            .open_loop =
                (scenario == SCENARIO_UNEVEN || scenario == SCENARIO_STALLED) && !opt->closed_loop,
            .connections = share,
            .index = i,
            .stride = clients,
            .interval_ns = (uint64_t)clients * 1000000000u / opt->rate,
            .phase_ns = (uint64_t)i * 1000000000u / opt->rate,
            .burst = opt->burst,
            .held = held != NULL ? held + assigned : NULL,
        };
        assigned += share;
        pthread_create(&client[i].thread, NULL, client_main, &client[i]);
    }
    unsigned failures = 0;
    for (unsigned i = 0; i < clients; i++) {
        pthread_join(client[i].thread, NULL);
        failures += client[i].failures;
    }
    double seconds = (double)(corral_monotonic_ns() - start) / 1e9;
    double cpu = process_cpu_us() - cpu_before;
    if (scenario == SCENARIO_STALLED) {
        atomic_store(&staller.stop, true);
        pthread_join(staller.thread, NULL);
    }
    uint64_t sleeps = worker_sleeps(bench->server) - sleeps_before;

    struct corral_wakeup_info info;
    corral_server_wakeup(bench->server, &info);
    *out = (struct result){.mode = corral_wakeup_mode_name(mode),
                           .impl = info.impl,
                           .scenario = scenario_names[scenario],
                           .workers = workers,
                           .seconds = seconds,
                           .failures = failures,
                           .min_accepts = UINT32_MAX,
                           .sleeps = sleeps,
                           .bpf_ns = strcmp(info.impl, "ebpf") == 0 ? steer_program_ns() : -1};
    for (unsigned i = 0; i < workers; i++) {
        struct corral_worker_stats stats;
        corral_server_stats(bench->server, i, &stats);
        out->accepts += stats.accepts;
        out->wakeups += stats.accept_wakeups;
        out->wasted += stats.accept_wasted;
        out->local += stats.accepts_local;
        struct corral_steer_stats steer;
        if (corral_server_steer_stats(bench->server, i, &steer) == 0)
            out->taken += steer.taken;
        if (stats.accepts > out->max_accepts)
            out->max_accepts = (unsigned)stats.accepts;
        if (stats.accepts < out->min_accepts)
            out->min_accepts = (unsigned)stats.accepts;
    }
    out->cpu_us = out->accepts > 0 ? cpu / (double)out->accepts : 0;
    double mean = (double)out->accepts / workers;
    out->max_over_mean = mean > 0 ? out->max_accepts / mean : 0;

    corral_server_stop(bench->server, 0);
    corral_server_wait(bench->server);
    if (held != NULL) {
        for (unsigned i = 0; i < opt->connections; i++)
            if (held[i] > 0)
                close(held[i]);
        free(held);
    }

    size_t total = 0;
    for (unsigned i = 0; i < workers; i++)
        total += bench->samples[i].count;
    uint64_t *all = malloc((total ? total : 1) * sizeof(uint64_t));
    size_t n = 0;
    for (unsigned i = 0; i < workers; i++) {
        memcpy(all + n, bench->samples[i].latency_ns, bench->samples[i].count * sizeof(uint64_t));
        n += bench->samples[i].count;
    }
    if (opt->trace != NULL)
        write_trace(opt->trace, bench, workers, start, out);
    qsort(all, n, sizeof(uint64_t), compare_u64);
    out->p50_ms = percentile_ms(all, n, 500);
    out->p99_ms = percentile_ms(all, n, 990);
    out->p999_ms = percentile_ms(all, n, 999);
    free(all);

out:
    if (err != 0)
        fprintf(stderr, "corral-wakebench: %s: %s\n", corral_wakeup_mode_name(mode),
                strerror(-err));
    for (unsigned i = 0; i < workers && i < MAX_WORKERS; i++) {
        free(bench->samples[i].latency_ns);
        free(bench->samples[i].trace);
    }
    corral_server_free(bench->server);
    free(bench);
    return err;
}

/* ------------------------------------------------------------- reporting */

static void print_header(unsigned workers, enum scenario scenario, const struct options *opt)
{
    printf("\n%u workers, %s: %u connections from %u client threads", workers,
           scenario_names[scenario], opt->connections, opt->clients);
    if (scenario == SCENARIO_PACED || scenario == SCENARIO_UNEVEN || scenario == SCENARIO_STALLED)
        printf(" at %u/s", opt->rate);
    if (scenario == SCENARIO_UNEVEN || scenario == SCENARIO_STALLED)
        printf(opt->closed_loop ? ", closed loop" : ", open loop");
    if (opt->one_cpu)
        printf(", all clients on one CPU");
    if (opt->repeat > 1)
        printf(", the middle of %u runs by p99", opt->repeat);
    if (scenario == SCENARIO_BURST)
        printf(" in bursts of %u", opt->burst);
    printf("\n%-11s %-9s %7s %9s %7s %9s %8s %8s %8s %8s %8s %8s %7s %7s %6s %4s\n", "mode",
           "mechanism", "accepts", "wakeup/ac", "wasted%", "sleeps/ac", "max/mean", "locality",
           "conn/s", "p50 ms", "p99 ms", "p99.9 ms", "cpu us", "bpf ns", "taken%", "fail");
}

static void print_row(const struct result *r)
{
    double per_accept = r->accepts ? (double)r->wakeups / (double)r->accepts : 0;
    double wasted = r->wakeups ? 100.0 * (double)r->wasted / (double)r->wakeups : 0;
    double locality = r->accepts ? (double)r->local / (double)r->accepts : 0;
    double sleeps = r->accepts ? (double)r->sleeps / (double)r->accepts : 0;
    double taken = r->accepts ? 100.0 * (double)r->taken / (double)r->accepts : 0;
    printf("%-11s %-9s %7lu %9.2f %7.1f %9.2f %8.2f %8.2f %8.0f %8.3f %8.3f %8.3f %7.1f %7.0f "
           "%6.1f %4u\n",
           r->mode, r->impl, (unsigned long)r->accepts, per_accept, wasted, sleeps,
           r->max_over_mean, locality, (double)r->accepts / r->seconds, r->p50_ms, r->p99_ms,
           r->p999_ms, r->cpu_us, r->bpf_ns, taken, r->failures);
}

static void print_json(const struct result *r, bool first)
{
    printf("%s\n  {\"workers\": %u, \"scenario\": \"%s\", \"mode\": \"%s\", \"mechanism\": \"%s\", "
           "\"accepts\": %lu, \"wakeups\": %lu, \"wasted\": %lu, \"local\": %lu, \"sleeps\": %lu, "
           "\"wakeups_per_accept\": %.4f, \"wasted_ratio\": %.4f, \"max_over_mean\": %.4f, "
           "\"min_accepts\": %u, \"max_accepts\": %u, \"locality\": %.4f, "
           "\"connections_per_second\": %.1f, \"p50_ms\": %.4f, \"p99_ms\": %.4f, "
           "\"p999_ms\": %.4f, \"cpu_us_per_connection\": %.2f, \"bpf_ns_per_run\": %.1f, "
           "\"taken\": %lu, \"failures\": %u}",
           first ? "" : ",", r->workers, r->scenario, r->mode, r->impl, (unsigned long)r->accepts,
           (unsigned long)r->wakeups, (unsigned long)r->wasted, (unsigned long)r->local,
           (unsigned long)r->sleeps, r->accepts ? (double)r->wakeups / (double)r->accepts : 0,
           r->wakeups ? (double)r->wasted / (double)r->wakeups : 0, r->max_over_mean,
           r->min_accepts, r->max_accepts, r->accepts ? (double)r->local / (double)r->accepts : 0,
           (double)r->accepts / r->seconds, r->p50_ms, r->p99_ms, r->p999_ms, r->cpu_us, r->bpf_ns,
           (unsigned long)r->taken, r->failures);
}

/* -------------------------------------------------------------- options */

static void usage(FILE *to)
{
    fprintf(to,
            "usage: corral-wakebench [options]\n"
            "  -w, --workers N[,N...]  worker threads per run (default 8,16)\n"
            "  -m, --mode MODE         roundrobin|affinity|exclusive|reuseport|herd|balanced|all\n"
            "                          (default all; roundrobin and affinity run with and without\n"
            "                          eBPF steering)\n"
            "  -s, --scenario NAME     paced|burst|long|uneven|stalled|all (default all)\n"
            "  -n, --connections N     connections per run (default 4000)\n"
            "  -c, --clients N         client threads, pinned to CPUs in turn (default 2)\n"
            "  -r, --rate N            paced: connections per second in all (default 2000)\n"
            "  -b, --burst N           burst: connections per burst per client (default 32)\n"
            "  -d, --disable CAPS      pretend capabilities are missing (see corral --probe)\n"
            "  -1, --one-cpu           pin every client thread to the first CPU\n"
            "  -S, --spill F           affinity over eBPF: the spill factor (default 1.1)\n"
            "  -C, --closed-loop       uneven, stalled: each client waits for its answer before\n"
            "                          its next connection (default: open loop, connections\n"
            "                          start on schedule however many still wait)\n"
            "  -R, --repeat N          run each mode N times, in turns, and show the run with\n"
            "                          the middle p99 (default 1, at most 15); also prints\n"
            "                          balanced's p99 over round-robin's (without eBPF) and\n"
            "                          reuseport's, the median of the ratios of each turn\n"
            "  -t, --trace FILE        write every connection's connect, accept, first read and\n"
            "                          answer times (CSV, one line each, all runs) to FILE\n"
            "  -j, --json              machine-readable output\n");
}

static int parse_options(int argc, char **argv, struct options *opt)
{
    *opt = (struct options){.worker_counts = {8, 16},
                            .worker_count_count = 2,
                            .connections = 4000,
                            .clients = 2,
                            .rate = 2000,
                            .burst = 32,
                            .repeat = 1};
    bool any_mode = false, any_scenario = false;
    static const struct option longs[] = {
        {"workers", required_argument, NULL, 'w'},  {"mode", required_argument, NULL, 'm'},
        {"scenario", required_argument, NULL, 's'}, {"connections", required_argument, NULL, 'n'},
        {"clients", required_argument, NULL, 'c'},  {"rate", required_argument, NULL, 'r'},
        {"burst", required_argument, NULL, 'b'},    {"disable", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},           {"one-cpu", no_argument, NULL, '1'},
        {"spill", required_argument, NULL, 'S'},    {"closed-loop", no_argument, NULL, 'C'},
        {"trace", required_argument, NULL, 't'},    {"repeat", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "w:m:s:n:c:r:b:d:j1S:CR:t:h", longs, NULL)) != -1) {
        switch (c) {
        case 'w': {
            opt->worker_count_count = 0;
            for (char *tok = strtok(optarg, ","); tok != NULL && opt->worker_count_count < 8;
                 tok = strtok(NULL, ",")) {
                unsigned n = (unsigned)atoi(tok);
                if (n == 0 || n > MAX_WORKERS) {
                    fprintf(stderr, "corral-wakebench: workers must be 1..%d\n", MAX_WORKERS);
                    return -1;
                }
                opt->worker_counts[opt->worker_count_count++] = n;
            }
            break;
        }
        case 'm': {
            enum corral_wakeup_mode mode;
            if (strcmp(optarg, "all") == 0) {
                break;
            }
            if (corral_wakeup_mode_parse(optarg, &mode) != 0 || mode == CORRAL_WAKEUP_AUTO) {
                fprintf(stderr, "corral-wakebench: unknown mode \"%s\"\n", optarg);
                return -1;
            }
            opt->modes[mode] = any_mode = true;
            break;
        }
        case 's': {
            if (strcmp(optarg, "all") == 0)
                break;
            int found = -1;
            for (int i = 0; i < SCENARIO_COUNT; i++)
                if (strcmp(optarg, scenario_names[i]) == 0)
                    found = i;
            if (found < 0) {
                fprintf(stderr, "corral-wakebench: unknown scenario \"%s\"\n", optarg);
                return -1;
            }
            opt->scenarios[found] = any_scenario = true;
            break;
        }
        case 'n': opt->connections = (unsigned)atoi(optarg); break;
        case 'c': opt->clients = (unsigned)atoi(optarg); break;
        case 'r': opt->rate = (unsigned)atoi(optarg); break;
        case 'b': opt->burst = (unsigned)atoi(optarg); break;
        case 'd': opt->disable = optarg; break;
        case 'j': opt->json = true; break;
        case '1': opt->one_cpu = true; break;
        case 'S': opt->spill = atof(optarg); break;
        case 'C': opt->closed_loop = true; break;
        case 'R': opt->repeat = (unsigned)atoi(optarg); break;
        case 't': opt->trace = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (opt->clients == 0 || opt->clients > MAX_CLIENTS || opt->connections == 0 ||
        opt->burst == 0 || opt->rate == 0 || opt->repeat == 0 || opt->repeat > MAX_REPEAT) {
        fprintf(stderr,
                "corral-wakebench: clients must be 1..%d, repeat 1..%d; connections, burst and "
                "rate > 0\n",
                MAX_CLIENTS, MAX_REPEAT);
        return -1;
    }
    for (int m = CORRAL_WAKEUP_ROUNDROBIN; m <= CORRAL_WAKEUP_BALANCED; m++)
        opt->modes[m] = opt->modes[m] || !any_mode;
    for (int s = 0; s < SCENARIO_COUNT; s++)
        opt->scenarios[s] = opt->scenarios[s] || !any_scenario;
    return 0;
}

/* Every mode on its preferred mechanism, then the modes that have an eBPF
 * mechanism on the one they fall back to. */
static const struct {
    enum corral_wakeup_mode mode;
    const char *disable;
    bool needs_ebpf;
} runs[] = {
    {CORRAL_WAKEUP_ROUNDROBIN, "", false},  {CORRAL_WAKEUP_ROUNDROBIN, "ebpf", true},
    {CORRAL_WAKEUP_BALANCED, "", false},    {CORRAL_WAKEUP_AFFINITY, "", false},
    {CORRAL_WAKEUP_AFFINITY, "ebpf", true}, {CORRAL_WAKEUP_EXCLUSIVE, "", false},
    {CORRAL_WAKEUP_REUSEPORT, "", false},   {CORRAL_WAKEUP_HERD, "", false},
};

#define RUN_COUNT (sizeof(runs) / sizeof(runs[0]))

static int compare_p99(const void *a, const void *b)
{
    double x = ((const struct result *)a)->p99_ms, y = ((const struct result *)b)->p99_ms;
    return x < y ? -1 : x > y;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* balanced's p99 over another mode's, as the median of the ratios of runs
 * made in the same turn: the machine's load drifts between turns, and a
 * ratio within one turn cancels most of it.  Before the rows are sorted. */
static void print_paired(struct result (*results)[MAX_REPEAT], const unsigned *done,
                         unsigned repeat)
{
    size_t balanced = 0;
    while (balanced < RUN_COUNT && runs[balanced].mode != CORRAL_WAKEUP_BALANCED)
        balanced++;
    if (balanced == RUN_COUNT || done[balanced] != repeat)
        return;
    for (size_t k = 0; k < RUN_COUNT; k++) {
        if (done[k] != repeat)
            continue;
        /* The marks balanced is judged against: round-robin without eBPF
         * (the shared queue) and reuseport hashing. */
        bool mark =
            (runs[k].mode == CORRAL_WAKEUP_ROUNDROBIN && strcmp(results[k][0].impl, "ebpf") != 0) ||
            runs[k].mode == CORRAL_WAKEUP_REUSEPORT;
        if (!mark)
            continue;
        double ratio[MAX_REPEAT];
        unsigned n = 0;
        for (unsigned rep = 0; rep < repeat; rep++)
            if (results[k][rep].p99_ms > 0)
                ratio[n++] = results[balanced][rep].p99_ms / results[k][rep].p99_ms;
        if (n == 0)
            continue;
        qsort(ratio, n, sizeof(double), compare_double);
        printf("paired p99: balanced (%s) / %s (%s) %.2f, the median of %u turns (%.2f to "
               "%.2f)\n",
               results[balanced][0].impl, results[k][0].mode, results[k][0].impl,
               n % 2 ? ratio[n / 2] : (ratio[n / 2 - 1] + ratio[n / 2]) / 2, n, ratio[0],
               ratio[n - 1]);
    }
}

static void print_result(const struct result *r, bool json, bool *first)
{
    if (json)
        print_json(r, *first);
    else
        print_row(r);
    fflush(stdout);
    *first = false;
}

int main(int argc, char **argv)
{
    struct options opt;
    if (parse_options(argc, argv, &opt) != 0)
        return 2;
    corral_set_log_level(CORRAL_LOG_WARN);
    /* The kernel times BPF programs while this descriptor is open. */
    int bpf_stats = bpf_enable_stats(BPF_STATS_RUN_TIME);

    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (!opt.json)
        printf("corral-wakebench: %u CPUs; wakeup/ac = accept wakeups per accepted connection, "
               "wasted%% = wakeups whose first accept() found nothing, sleeps/ac = times a worker "
               "thread blocked and was woken (voluntary context switches, which also count the "
               "wakeups the kernel hid from user space) per accept, max/mean = busiest "
               "worker's accepts over the mean, locality = accepts on the CPU the connection "
               "arrived on, p50/p99/p99.9 = connect() to the worker reading the first bytes, "
               "cpu us = process CPU per connection (workers, clients and kernel), bpf ns = the "
               "steering program's run time per run, taken%% = accepted off another worker's queue "
               "(balanced)\n",
               caps.cpu_count);
    else
        printf("[");
    bool first = true;
    int status = 0;
    for (size_t w = 0; w < opt.worker_count_count; w++) {
        for (int s = 0; s < SCENARIO_COUNT; s++) {
            if (!opt.scenarios[s])
                continue;
            if (!opt.json)
                print_header(opt.worker_counts[w], (enum scenario)s, &opt);
            /* The modes take turns, so that a change in the machine's load
             * hits them all alike. */
            struct result results[RUN_COUNT][MAX_REPEAT];
            unsigned done[RUN_COUNT] = {0};
            for (unsigned rep = 0; rep < opt.repeat; rep++) {
                for (size_t k = 0; k < RUN_COUNT; k++) {
                    if (!opt.modes[runs[k].mode] || (runs[k].needs_ebpf && !caps.ebpf))
                        continue;
                    if (run_one(&opt, runs[k].mode, runs[k].disable, opt.worker_counts[w],
                                (enum scenario)s, &results[k][done[k]]) != 0) {
                        status = 1;
                        continue;
                    }
                    done[k]++;
                    if (opt.repeat == 1)
                        print_result(&results[k][0], opt.json, &first);
                }
            }
            if (opt.repeat > 1 && !opt.json)
                print_paired(results, done, opt.repeat);
            for (size_t k = 0; opt.repeat > 1 && k < RUN_COUNT; k++) {
                if (done[k] == 0)
                    continue;
                qsort(results[k], done[k], sizeof(struct result), compare_p99);
                print_result(&results[k][done[k] / 2], opt.json, &first);
            }
        }
    }
    if (opt.json)
        printf("\n]\n");
    if (bpf_stats >= 0)
        close(bpf_stats);
    return status;
}
