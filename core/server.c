/*
 * server.c: the worker pool.  A server owns its listeners (listener.c) and N
 * worker threads (worker.c); the main thread only starts, stops and takes
 * signals, in corral_server_run().
 */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#define DEFAULT_STOP_MS 10000

struct corral__signal_handler {
    struct corral__signal_handler *next;
    int signo;
    corral_signal_cb cb;
    void *arg;
};

void corral_server_config_init(struct corral_server_config *config)
{
    *config = (struct corral_server_config){.wakeup = CORRAL_WAKEUP_AUTO};
}

int corral_server_new(const struct corral_server_config *config, corral_server **out)
{
    corral_server *server = calloc(1, sizeof(*server));
    if (server == NULL)
        return -ENOMEM;
    server->config = *config;
    server->config.caps = NULL; /* copied below; the caller's may not outlive us */
    server->nested_epfd = -1;
    if (config->caps != NULL)
        server->caps = *config->caps;
    else
        corral_probe(&server->caps);
    server->worker_count = config->workers > 0 ? config->workers : server->caps.cpu_count;
    if (server->worker_count == 0)
        server->worker_count = 1;
    server->workers = calloc(server->worker_count, sizeof(*server->workers));
    if (server->workers == NULL) {
        free(server);
        return -ENOMEM;
    }
    /* Resolved now, not at start, because the mode decides how many
     * sockets each listen call creates. */
    server->wakeup = corral__wakeup_choose(config->wakeup, &server->caps, &server->wakeup_info);
    unsigned cpus_used = corral__cpus_used(server);
    for (unsigned i = 0; i < server->worker_count; i++) {
        corral_worker *worker = &server->workers[i];
        worker->server = server;
        worker->index = i;
        worker->cpu = server->wakeup->pins_workers ? server->caps.cpus[i % cpus_used] : -1;
    }
    *out = server;
    return 0;
}

void corral_server_free(corral_server *server)
{
    if (server == NULL)
        return;
    for (unsigned i = 0; i < server->worker_count; i++) {
        corral_worker *worker = &server->workers[i];
        if (worker->loop != NULL) {
            corral_timer_stop(&worker->emfile_timer);
            corral_timer_stop(&worker->stop_timer);
            corral_loop_free(worker->loop);
        }
        free(worker->entries);
    }
    free(server->workers);
    if (server->wakeup->teardown != NULL)
        server->wakeup->teardown(server);
    while (server->listeners != NULL) {
        corral_listener *next = server->listeners->next;
        corral__listener_free(server->listeners);
        server->listeners = next;
    }
    while (server->signal_handlers != NULL) {
        struct corral__signal_handler *next = server->signal_handlers->next;
        free(server->signal_handlers);
        server->signal_handlers = next;
    }
    free(server);
}

/* ------------------------------------------------------ main thread, signals */

int corral_server_on_signal(corral_server *server, int signo, corral_signal_cb cb, void *arg)
{
    if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP)
        return -EINVAL;
    struct corral__signal_handler *handler = malloc(sizeof(*handler));
    if (handler == NULL)
        return -ENOMEM;
    *handler = (struct corral__signal_handler){server->signal_handlers, signo, cb, arg};
    server->signal_handlers = handler;
    return 0;
}

static void server_on_signal(int signo, void *arg)
{
    corral_server *server = arg;
    bool handled = false;
    for (struct corral__signal_handler *h = server->signal_handlers; h != NULL; h = h->next) {
        if (h->signo == signo) {
            h->cb(server, signo, h->arg);
            handled = true;
        }
    }
    if (handled)
        return;
    if (signo == SIGQUIT) {
        corral__info("SIGQUIT: stopping now");
        corral_server_stop(server, 0);
    } else {
        corral__info("%s: stopping gracefully (up to %d ms)", strsignal(signo), DEFAULT_STOP_MS);
        corral_server_stop(server, DEFAULT_STOP_MS);
    }
}

static void stop_main_loop(void *arg)
{
    corral_loop_stop(arg);
}

int corral_server_run(corral_server *server)
{
    int handled[NSIG + 1], count = 0;
    handled[count++] = SIGINT;
    handled[count++] = SIGTERM;
    handled[count++] = SIGQUIT;
    for (struct corral__signal_handler *h = server->signal_handlers; h != NULL; h = h->next)
        if (count < NSIG)
            handled[count++] = h->signo;
    handled[count] = 0;

    corral_signals *signals = NULL;
    int err = corral_loop_new(&server->main_loop);
    if (err != 0)
        return err;
    err = corral_signals_new(server->main_loop, handled, server_on_signal, server, &signals);
    if (err != 0)
        goto out;
    corral_server_on_exit(server, server->main_loop, stop_main_loop, server->main_loop);
    err = corral_server_start(server);
    if (err != 0)
        goto out;
    /* Relaxed: if every worker is gone already, their exit post is queued
     * and runs when the loop is freed; either way the join below waits. */
    if (atomic_load_explicit(&server->workers_running, memory_order_relaxed) > 0)
        err = corral_loop_run(server->main_loop);
    corral_server_wait(server);

out:
    corral_signals_free(signals);
    corral_loop_free(server->main_loop);
    server->main_loop = NULL;
    return err;
}

corral_loop *corral_server_main_loop(const corral_server *server)
{
    return server->main_loop;
}

/* -------------------------------------------------------------- accessors */

unsigned corral_server_worker_count(const corral_server *server)
{
    return server->worker_count;
}

corral_worker *corral_server_worker(const corral_server *server, unsigned index)
{
    return index < server->worker_count ? &server->workers[index] : NULL;
}

void corral_server_stats(const corral_server *server, unsigned index,
                         struct corral_worker_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (index >= server->worker_count)
        return;
    const corral_worker *worker = &server->workers[index];
    const struct corral__stats *stats = &worker->stats;
    out->accepts = corral__stat_read(&stats->accepts);
    out->accept_wakeups = corral__stat_read(&stats->accept_wakeups);
    out->accept_wasted = corral__stat_read(&stats->accept_wasted);
    out->accepts_local = corral__stat_read(&stats->accepts_local);
    /* The limits count every connection; what users see splits them. */
    uint64_t open = corral__stat_read(&stats->connections_active);
    out->connections_outgoing = corral__stat_read(&stats->connections_outgoing);
    out->connections_active =
        open > out->connections_outgoing ? open - out->connections_outgoing : 0;
    out->accept_pauses = corral__stat_read(&stats->accept_pauses);
    out->client_bytes_in = corral__stat_read(&stats->bytes_in[0]);
    out->client_bytes_out = corral__stat_read(&stats->bytes_out[0]);
    out->outgoing_bytes_in = corral__stat_read(&stats->bytes_in[1]);
    out->outgoing_bytes_out = corral__stat_read(&stats->bytes_out[1]);
    out->cpu = worker->cpu;
}
