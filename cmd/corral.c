/*
 * corral.c: the daemon's main().  Reads the command line, loads the
 * configuration, sets the process up, starts the first generation, and runs
 * the main thread's loop for signals: SIGHUP reloads without closing the
 * listening sockets, SIGTERM/SIGINT stop gracefully, SIGQUIT at once,
 * SIGUSR1 reopens the log.
 */
#include "cmd/daemon.h"
#include "cmd/generation.h"
#include "cmd/probe_print.h"
#include "cmd/process.h"
#include "cmd/runtime.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static corral_loop *main_loop;
static corral_timer *shutdown_timer; /* shutdown_delay after SIGTERM, then drain */

/* Stops gracefully within the newest generation's drain timeout. */
static void stop_gracefully(const char *why)
{
    /* The newest generation's drain timeout; none left: already stopping. */
    struct generation *newest = daemon_state.generations;
    uint32_t drain = newest != NULL ? newest->config->drain_timeout_ms : 0;
    log_info("%s: stopping gracefully (up to %u ms)", why, drain);
    stop_all(drain);
}

static void on_shutdown_delay(corral_timer *timer, void *arg)
{
    (void)timer;
    (void)arg;
    stop_gracefully("shutdown_delay over");
}

/* SIGTERM, SIGINT: /readyz answers 503 from now on.  With shutdown_delay,
 * everything keeps serving that long, so that load balancers see it and
 * stop sending before the listeners close; a second signal ends the wait. */
static void begin_stop(int signo)
{
    atomic_store_explicit(&daemon_state.stopping, true, memory_order_relaxed);
    struct generation *newest = daemon_state.generations;
    uint32_t delay = newest != NULL ? newest->config->shutdown_delay_ms : 0;
    if (delay > 0 && shutdown_timer != NULL && !corral_timer_active(shutdown_timer)) {
        log_info("%s: not ready; stopping in %u ms (shutdown_delay)", strsignal(signo), delay);
        corral_timer_start(shutdown_timer, delay);
        return;
    }
    if (shutdown_timer != NULL)
        corral_timer_stop(shutdown_timer);
    stop_gracefully(strsignal(signo));
}

static void on_signal(int signo, void *arg)
{
    (void)arg;
    switch (signo) {
    case SIGHUP: reload(); break;
    case SIGUSR1: {
        int err = daemon_log_reopen();
        if (err != 0)
            log_error("SIGUSR1: reopening the error log failed: %s", strerror(-err));
        /* Every generation's access log, draining ones included: their
         * last requests belong in the new file too. */
        for (struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
            int rc = g->access_log != NULL ? access_log_reopen(g->access_log) : 0;
            if (rc != 0)
                log_error("SIGUSR1: generation %u: reopening access_log %s failed: %s", g->number,
                          g->config->access_log, strerror(-rc));
            err = err != 0 ? err : rc;
        }
        if (err == 0)
            log_info("SIGUSR1: log reopened");
        break;
    }
    case SIGQUIT:
        log_info("SIGQUIT: stopping now");
        stop_all(0);
        break;
    default: begin_stop(signo);
    }
}

/* Valid but serving nothing is almost always a mistake worth a word. */
static bool listens_anywhere(const struct conf_config *config)
{
    for (size_t i = 0; i < config->server_count; i++)
        if (config->servers[i].listen_count > 0)
            return true;
    return config->admin_listen_count > 0;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: corral [-c FILE] [-t] [--probe] [-V] [-h]\n"
                "  -c FILE    configuration file (default: the built-in configuration:\n"
                "             127.0.0.1:8080 answers \"corral is running\", metrics on\n"
                "             127.0.0.1:9090)\n"
                "  -t         check the configuration and exit (0 if valid)\n"
                "  --probe    print the kernel's capabilities and each wakeup mode's resolution\n"
                "  -V, --version  print the version\n"
                "signals: HUP reload, TERM/INT graceful stop, QUIT fast stop, USR1 reopen logs\n");
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"probe", no_argument, NULL, 'P'},
                                          {"help", no_argument, NULL, 'h'},
                                          {"version", no_argument, NULL, 'V'},
                                          {NULL, 0, NULL, 0}};
    const char *path = NULL;
    bool test_only = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:tVh", longs, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 't': test_only = true; break;
        case 'V': printf("corral %s\n", CORRAL_VERSION); return 0;
        case 'P': print_probe(); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    /* OpenSSL writes to sockets with write(2): a reset connection must be
     * an error, not SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    daemon_state.config_path = path;
    daemon_log_open(NULL);
    daemon_log_plain(test_only);

    struct conf_config *config;
    if (load_config(path, &config) != 0)
        return 1;
    if (!listens_anywhere(config))
        log_warn("%s: no server and no admin block has a listen directive: nothing will be served",
                 config->path);
    if (test_only) {
        int err = check_config(config);
        if (err == 0)
            printf("corral: configuration %s is valid\n", config->path);
        else if (err == -ENOMEM)
            log_error("out of memory");
        conf_free(config);
        return err == 0 ? 0 : 1;
    }
    int log_err = config->error_log != NULL ? daemon_log_open(config->error_log) : 0;
    if (log_err != 0) {
        log_error("error_log %s: %s", config->error_log, strerror(-log_err));
        conf_free(config);
        return 1;
    }
    corral_set_log_level(config->log_level);
    daemon_state.started_at = (uint64_t)time(NULL);

    int status = 1;
    static const int signals[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, 0};
    corral_signals *signal_watch = NULL;
    if (corral_loop_new(&main_loop) != 0 ||
        corral_timer_new(main_loop, on_shutdown_delay, NULL, &shutdown_timer) != 0 ||
        corral_signals_new(main_loop, signals, on_signal, NULL, &signal_watch) != 0) {
        conf_free(config);
        goto out;
    }
    generations_init(main_loop);
    collect_activated_sockets();
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    raise_fd_limit(config, config->workers ? config->workers : caps.cpu_count);
    char *pid_file = config->pid_file != NULL ? strdup(config->pid_file) : NULL;
    if (config->pid_file != NULL && pid_file == NULL) {
        log_error("out of memory");
        conf_free(config);
        goto out;
    }
    if (pid_file != NULL && (config->user != NULL || config->group != NULL) &&
        pid_file_keeper_start(pid_file) != 0) {
        free(pid_file);
        conf_free(config);
        goto out;
    }

    struct generation *gen;
    int err = generation_start(config, NULL, &gen);
    if (err != 0) {
        log_error("cannot start: %s", strerror(-err));
        if (pid_file != NULL)
            pid_file_release(pid_file);
        free(pid_file);
        goto out;
    }
    /* The workers already run, and the admin endpoints read the list. */
    pthread_mutex_lock(&daemon_state.lock);
    daemon_state.generations = gen;
    pthread_mutex_unlock(&daemon_state.lock);
    log_wakeup(gen);
    for (size_t i = 0; i < gen->site_count; i++) {
        char bound[128];
        corral_listener_address(gen->sites[i].listener, bound, sizeof(bound));
        log_info("listening on %s%s", bound, gen->sites[i].admin ? " (admin)" : "");
    }
    bool started =
        (pid_file == NULL || write_pid_file(pid_file) == 0) && drop_privileges(gen->config) == 0;
    if (!started)
        stop_all(0);
    corral_loop_run(main_loop);
    status = started ? generations_exit_status() : 1;
    if (pid_file != NULL)
        pid_file_release(pid_file);
    free(pid_file);
    log_info("stopped");

out:
    corral_signals_free(signal_watch);
    corral_timer_free(shutdown_timer);
    corral_loop_free(main_loop);
    activated_sockets_close();
    return status;
}
