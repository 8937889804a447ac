/*
 * corral.c: the daemon.  Loads the configuration, builds a generation (a
 * libcorral server with its HTTP sites) on the configured addresses, and runs
 * the main thread's loop for signals: SIGHUP reloads without closing the
 * listening sockets, SIGTERM/SIGINT stop gracefully, SIGQUIT at once, SIGUSR1
 * reopens the log.
 */
#include "cmd/daemon.h"
#include "cmd/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct daemon_state daemon_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

static corral_loop *main_loop;
static bool stopping;
static int exit_status; /* 1 once the daemon stops because it cannot serve */

/* Sockets passed by systemd (LISTEN_FDS), by bound address. */
struct activated_socket {
    char address[128];
    int fd;
};
static struct activated_socket *activated;
static size_t activated_count;

/* ------------------------------------------------------------ generations */

/* Listens for `site` in `gen`: on the previous generation's sockets when it
 * had the same address with the same socket layout, on a socket passed by
 * systemd, else on a new one.  Returns -EADDRINUSE when the previous
 * generation holds the address with another layout. */
static int site_listen(struct generation *gen, struct site *site, struct generation *previous)
{
    struct site *old = find_site(previous, site->address);
    if (old != NULL && old->listener != NULL) {
        const int *fds;
        unsigned count = corral_listener_fds(old->listener, &fds);
        if (count != corral_server_sockets_per_listener(gen->server))
            return -EADDRINUSE;
        return corral_server_listen_fds(gen->server, fds, count, &site->listen_options,
                                        &http1_server_handler, &site->http, &site->listener);
    }
    for (size_t i = 0; i < activated_count; i++)
        if (same_address(activated[i].address, site->address))
            return corral_server_listen_fds(gen->server, &activated[i].fd, 1, &site->listen_options,
                                            &http1_server_handler, &site->http, &site->listener);
    return corral_server_listen(gen->server, site->address, &site->listen_options,
                                &http1_server_handler, &site->http, &site->listener);
}

/* After the previous generation closed its sockets: new ones on the very
 * address it had bound (the same port even where the config says 0). */
static int site_relisten(struct generation *gen, struct site *site, struct generation *previous)
{
    char bound[128];
    struct site *old = find_site(previous, site->address);
    if (old == NULL || corral_listener_address(old->listener, bound, sizeof(bound)) != 0)
        return site_listen(gen, site, NULL);
    return corral_server_listen(gen->server, bound, &site->listen_options, &http1_server_handler,
                                &site->http, &site->listener);
}

static void on_generation_exit(void *arg);

static int generation_start(struct conf_config *config, struct generation *previous,
                            struct generation **out)
{
    int err;
    struct generation *gen = calloc(1, sizeof(*gen));
    if (gen == NULL) {
        conf_free(config);
        return -ENOMEM;
    }
    gen->config = config;
    struct corral_server_config server_config;
    corral_server_config_init(&server_config);
    server_config.workers = config->workers;
    server_config.wakeup = config->wakeup;
    server_config.max_connections = config->max_connections;
    server_config.busy_poll_usecs = config->busy_poll_usecs;
    err = corral_server_new(&server_config, &gen->server);
    if (err != 0)
        goto fail;
    unsigned workers = corral_server_worker_count(gen->server);
    if (workers > DAEMON_MAX_WORKERS) {
        log_error("workers %u: at most %d are supported", workers, DAEMON_MAX_WORKERS);
        err = -EINVAL;
        goto fail;
    }
    gen->stats = aligned_alloc(64, workers * sizeof(*gen->stats));
    if (gen->stats == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    memset(gen->stats, 0, workers * sizeof(*gen->stats));

    err = sites_build(gen, config, workers);
    if (err != 0)
        goto fail;
    if (config->access_log != NULL) {
        const char *bad;
        err = access_log_open(config->access_log, config->log_format, &gen->access_log, &bad);
        if (err != 0) {
            log_error("access_log %s: %s", config->access_log, strerror(-err));
            goto fail;
        }
    }
    for (size_t i = 0; i < gen->site_count; i++) {
        struct site *site = &gen->sites[i];
        site->http.stats = gen->stats;
        if (!site->admin)
            site->http.access_log = gen->access_log;
        /* Tickets issued before a reload keep resuming after it. */
        struct site *old = find_site(previous, site->address);
        if (site->http.tls != NULL && old != NULL && old->http.tls != NULL)
            tls_server_take_ticket_keys(site->http.tls, old->http.tls);
    }

    /* Inherit what can be inherited first, so that closing the previous
     * generation's sockets (for a layout change) cannot pull any we need. */
    bool layout_changed = false;
    for (size_t i = 0; i < gen->site_count; i++) {
        struct site *site = &gen->sites[i];
        err = site_listen(gen, site, previous);
        if (err == -EADDRINUSE && previous != NULL) {
            layout_changed = true;
            continue;
        }
        if (err != 0) {
            log_error("listen %s: %s", site->address, strerror(-err));
            goto fail;
        }
    }
    if (layout_changed) {
        /* Switching between shared and per-worker sockets needs new sockets
         * on the same ports, which the old ones block. */
        log_warn("the listening socket layout changes (wakeup or workers): re-creating the "
                 "sockets; connections queued at this instant may be reset");
        corral_server_close_listeners(previous->server);
        previous->listeners_closed = true;
        for (size_t i = 0; i < gen->site_count; i++) {
            struct site *site = &gen->sites[i];
            if (site->listener != NULL)
                continue;
            err = site_relisten(gen, site, previous);
            if (err != 0) {
                log_error("listen %s: %s; generation %u no longer accepts", site->address,
                          strerror(-err), previous->number);
                goto fail;
            }
        }
    }
    corral_server_on_exit(gen->server, main_loop, on_generation_exit, gen);
    err = corral_server_start(gen->server);
    if (err != 0)
        goto fail;
    gen->number = ++daemon_state.generation_count;
    *out = gen;
    return 0;

fail:
    generation_free(gen);
    return err;
}

/* Adds an exited generation's counters to the retired totals. */
static void retire_counters(struct generation *gen)
{
    struct retired_totals *retired = &daemon_state.retired;
    for (unsigned i = 0; i < corral_server_worker_count(gen->server); i++) {
        struct corral_worker_stats stats;
        corral_server_stats(gen->server, i, &stats);
        retired->accepts[i] += stats.accepts;
        retired->accept_wakeups[i] += stats.accept_wakeups;
        retired->accept_wasted[i] += stats.accept_wasted;
        retired->accepts_local[i] += stats.accepts_local;
        for (unsigned s = 0; s < HTTP_MAX_STATUS; s++)
            retired->responses[s] += atomic_load(&gen->stats[i].responses[s]);
        for (unsigned k = 0; k < HTTP_TIMEOUT_KINDS; k++)
            retired->timeouts[k] += atomic_load(&gen->stats[i].timeouts[k]);
        tls_totals_add(&retired->tls, gen, i);
    }
    for (size_t i = 0; i < gen->upstream_count; i++)
        upstream_errors_add(retired->upstreams, &retired->upstream_count,
                            gen->upstreams[i].upstream);
}

static void stop_all(uint32_t graceful_ms);

/* Main loop: the last worker of `arg` has exited. */
static void on_generation_exit(void *arg)
{
    struct generation *gen = arg;
    corral_server_wait(gen->server);
    pthread_mutex_lock(&daemon_state.lock);
    struct generation **link = &daemon_state.generations;
    while (*link != gen)
        link = &(*link)->next;
    *link = gen->next;
    retire_counters(gen);
    pthread_mutex_unlock(&daemon_state.lock);
    if (gen->stop_requested || stopping) {
        log_info("generation %u finished", gen->number);
    } else {
        /* Only the newest generation is never asked to stop: its workers
         * failed (the errors are logged above) and nothing accepts any more.
         * Exit with an error for a supervisor to restart the daemon, as a
         * process that ran on would look alive while refusing every
         * connection.  Older generations still draining may finish. */
        log_error("generation %u: every worker stopped on its own; stopping", gen->number);
        exit_status = 1;
        stop_all(gen->config->drain_timeout_ms);
    }
    generation_free(gen);
    if (daemon_state.generations == NULL && stopping)
        corral_loop_stop(main_loop);
}

static void log_wakeup(const struct generation *gen)
{
    struct corral_wakeup_info info;
    corral_server_wakeup(gen->server, &info);
    log_info("generation %u: %u workers, wakeup %s resolved to %s (%s)", gen->number,
             corral_server_worker_count(gen->server), corral_wakeup_mode_name(info.requested),
             corral_wakeup_mode_name(info.mode), info.impl);
}

static int load_config(const char *path, struct conf_config **out)
{
    struct conf_error error;
    int rc = path != NULL ? conf_load(path, out, &error)
                          : conf_parse("<built-in>", conf_default_text, strlen(conf_default_text),
                                       NULL, NULL, out, &error);
    if (rc != 0) {
        log_error("%s", error.text);
        return -EINVAL;
    }
    if (check_servable(*out) != 0) {
        conf_free(*out);
        *out = NULL;
        return -EINVAL;
    }
    return 0;
}

/* Closes the generation's listening sockets, then stops it.  Closing comes
 * first, while every worker runs to let go of the sockets (a draining
 * generation's workers exit one by one), and only once.  On a reload the
 * new generation serves the same sockets through its own descriptors; on a
 * stop the sockets close with this, and new clients are refused at once
 * instead of queueing where no one will accept them. */
static void generation_stop(struct generation *gen, uint32_t graceful_ms)
{
    if (!gen->listeners_closed) {
        corral_server_close_listeners(gen->server);
        gen->listeners_closed = true;
    }
    gen->stop_requested = true;
    corral_server_stop(gen->server, graceful_ms);
}

static void reload(void)
{
    /* No generation left means stopping: when the newest one exits on its
     * own, the daemon stops. */
    struct generation *previous = daemon_state.generations, *gen;
    if (stopping || previous == NULL)
        return;
    struct conf_config *config;
    log_info("SIGHUP: reloading %s", daemon_state.config_path ? daemon_state.config_path
                                                               : "the built-in configuration");
    if (load_config(daemon_state.config_path, &config) != 0) {
        log_error("reload failed; generation %u keeps serving", previous->number);
        return;
    }
    int err = generation_start(config, previous, &gen);
    if (err != 0 && previous->listeners_closed) {
        /* A socket layout change closed its sockets and new ones could not
         * be made: it serves what it has in flight but accepts nothing, as
         * when its workers stop on their own. */
        log_error("reload failed (%s); generation %u no longer accepts; stopping", strerror(-err),
                  previous->number);
        exit_status = 1;
        stop_all(previous->config->drain_timeout_ms);
        return;
    }
    if (err != 0) {
        log_error("reload failed (%s); generation %u keeps serving", strerror(-err),
                  previous->number);
        return;
    }
    pthread_mutex_lock(&daemon_state.lock);
    gen->next = daemon_state.generations;
    daemon_state.generations = gen;
    pthread_mutex_unlock(&daemon_state.lock);
    log_wakeup(gen);
    for (size_t i = 0; i < gen->site_count; i++) {
        if (find_site(previous, gen->sites[i].address) != NULL)
            continue;
        char bound[128];
        corral_listener_address(gen->sites[i].listener, bound, sizeof(bound));
        log_info("listening on %s%s", bound, gen->sites[i].admin ? " (admin)" : "");
    }
    corral_set_log_level(config->log_level);
    /* The old generation stops accepting (its sockets live on in the new
     * one), finishes what is in flight, and exits within the drain timeout. */
    log_info("generation %u: draining (up to %u ms)", previous->number,
             previous->config->drain_timeout_ms);
    generation_stop(previous, previous->config->drain_timeout_ms);
}

/* Stops every generation; the main loop ends when the last has exited, or
 * now if none is left. */
static void stop_all(uint32_t graceful_ms)
{
    stopping = true;
    /* The list changes only on this thread: no lock needed to walk it. */
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next)
        generation_stop(g, graceful_ms);
    /* No generation will take over the sockets systemd passed. */
    for (size_t i = 0; i < activated_count; i++)
        close(activated[i].fd);
    activated_count = 0;
    if (daemon_state.generations == NULL)
        corral_loop_stop(main_loop);
}

static void on_signal(int signo, void *arg)
{
    (void)arg;
    switch (signo) {
    case SIGHUP:
        reload();
        break;
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
    default: {
        /* The newest generation's drain timeout; none left: already stopping. */
        struct generation *newest = daemon_state.generations;
        uint32_t drain = newest != NULL ? newest->config->drain_timeout_ms : 0;
        log_info("%s: stopping gracefully (up to %u ms)", strsignal(signo), drain);
        stop_all(drain);
    }
    }
}

/* ------------------------------------------------------------- start-up */

/* systemd socket activation: LISTEN_PID is us, LISTEN_FDS sockets from 3. */
static void collect_activated_sockets(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (pid == NULL || fds == NULL || atol(pid) != (long)getpid())
        return;
    int count = atoi(fds);
    activated = calloc((size_t)(count > 0 ? count : 1), sizeof(*activated));
    for (int i = 0; activated != NULL && i < count; i++) {
        int fd = 3 + i;
        struct sockaddr_storage addr;
        socklen_t len = sizeof(addr);
        if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0 ||
            corral_format_address((struct sockaddr *)&addr, len, activated[activated_count].address,
                                  sizeof(activated[activated_count].address)) != 0)
            continue;
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        activated[activated_count++].fd = fd;
        log_info("socket activation: %s (fd %d)", activated[activated_count - 1].address, fd);
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* Enough descriptors for every worker's connections, twice over for
 * proxied ones, within the hard limit. */
static void raise_fd_limit(const struct conf_config *config, unsigned workers)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return;
    rlim_t clients = (rlim_t)workers * (config->max_connections ? config->max_connections : 1024);
    rlim_t wanted = clients * 2 + 256;
    if (limit.rlim_cur >= wanted)
        return;
    rlim_t target = wanted < limit.rlim_max ? wanted : limit.rlim_max;
    limit.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
        log_warn("setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)target, strerror(errno));
    else if (target < clients)
        log_warn("open files limited to %llu (the hard limit), below max_connections %u x %u "
                 "workers; accepting pauses when it is reached",
                 (unsigned long long)target, config->max_connections, workers);
}

static int drop_privileges(const struct conf_config *config)
{
    if (config->user == NULL && config->group == NULL)
        return 0;
    gid_t gid = getgid();
    uid_t uid = getuid();
    if (config->user != NULL) {
        struct passwd *pw = getpwnam(config->user);
        if (pw == NULL) {
            log_error("user \"%s\": no such user", config->user);
            return -1;
        }
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    }
    if (config->group != NULL) {
        struct group *gr = getgrnam(config->group);
        if (gr == NULL) {
            log_error("group \"%s\": no such group", config->group);
            return -1;
        }
        gid = gr->gr_gid;
    }
    /* Group first: once the user changes, the group can no longer be. */
    if (setgroups(0, NULL) != 0 && errno != EPERM) {
        log_error("setgroups: %s", strerror(errno));
        return -1;
    }
    if (setgid(gid) != 0 || setuid(uid) != 0) {
        log_error("dropping privileges to %s:%s: %s", config->user ? config->user : "-",
                  config->group ? config->group : "-", strerror(errno));
        return -1;
    }
    log_info("running as uid %u gid %u", (unsigned)uid, (unsigned)gid);
    return 0;
}

static int write_pid_file(const char *path)
{
    FILE *f = fopen(path, "we");
    if (f == NULL) {
        log_error("pid_file %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "%d\n", (int)getpid());
    if (fclose(f) != 0) {
        log_error("pid_file %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Removes the pid file at `path` if it still holds `pid`, so that a daemon
 * that failed to start never removes the file of the one running.  Returns
 * 0 (also when there is nothing to remove) or -errno. */
static int pid_file_remove(const char *path, pid_t pid)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1)
        return errno == ENOENT ? 0 : -errno;
    char text[32];
    ssize_t n = read(fd, text, sizeof(text) - 1);
    int err = n == -1 ? -errno : 0;
    close(fd);
    if (err != 0)
        return err;
    text[n] = '\0';
    if (strtol(text, NULL, 10) != (long)pid)
        return 0;
    return unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
}

/*
 * Once privileges are dropped the daemon can no longer remove its pid file:
 * the directory it is in (/run) is writable by root only, and a directory
 * descriptor kept open would not help, as unlinkat() checks the caller's
 * rights at the time of the call.  nginx removes the file from its master
 * process, which keeps its privileges; corral forks, before any thread
 * exists, a process for that alone.  It holds nothing of the daemon's but
 * the read end of a pipe, waits for the daemon to end (the write end
 * closes, after a crash too), removes the file if it still holds the
 * daemon's pid, and exits with 0 or the errno of the failure.
 */
static pid_t keeper_pid = -1;
static int keeper_fd = -1; /* the write end */

static int pid_file_keeper_start(const char *path)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == -1) {
        int err = -errno;
        log_error("pid_file %s: pipe2: %s", path, strerror(errno));
        return err;
    }
    pid_t daemon_pid = getpid();
    pid_t pid = fork();
    if (pid == -1) {
        int err = -errno;
        log_error("pid_file %s: fork: %s", path, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    if (pid == 0) {
        /* The daemon's signals (^C from a terminal, systemd's SIGTERM to the
         * whole unit) must not end the keeper before the daemon ends. */
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, NULL);
        prctl(PR_SET_NAME, "corral-pidfile");
        close(fds[1]);
        if (fds[0] != 3)
            dup2(fds[0], 3);
        /* No socket or file of the daemon's stays open in here. */
        if (close_range(4, ~0U, 0) != 0)
            for (int fd = 4; fd < 1024; fd++)
                close(fd);
        char byte;
        while (read(3, &byte, 1) == -1 && errno == EINTR)
            ;
        _exit(-pid_file_remove(path, daemon_pid) & 0xff);
    }
    close(fds[0]);
    keeper_pid = pid;
    keeper_fd = fds[1];
    return 0;
}

/* Removes the pid file at exit: through the keeper if there is one. */
static void pid_file_release(const char *path)
{
    int err;
    if (keeper_pid > 0) {
        close(keeper_fd);
        int status;
        pid_t rc;
        while ((rc = waitpid(keeper_pid, &status, 0)) == -1 && errno == EINTR)
            ;
        keeper_pid = -1;
        if (rc != -1 && WIFSIGNALED(status)) {
            log_error("pid_file %s: the process removing it was killed (%s)", path,
                      strsignal(WTERMSIG(status)));
            return;
        }
        err = rc == -1 ? -errno : -WEXITSTATUS(status);
    } else {
        err = pid_file_remove(path, getpid());
    }
    if (err != 0)
        log_error("pid_file %s: removing it: %s", path, strerror(-err));
}

static void print_probe(void)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    static const struct {
        const char *name;
        size_t offset;
        const char *what;
    } flags[] = {
        {"epoll_exclusive", offsetof(struct corral_kernel_caps, epoll_exclusive),
         "EPOLLEXCLUSIVE wake-one (Linux 4.5)"},
        {"epoll_rotate", offsetof(struct corral_kernel_caps, epoll_rotate),
         "native round-robin epoll set"},
        {"epoll_affinity", offsetof(struct corral_kernel_caps, epoll_affinity),
         "native CPU-affinity epoll set"},
        {"reuseport", offsetof(struct corral_kernel_caps, reuseport), "SO_REUSEPORT (Linux 3.9)"},
        {"reuseport_cbpf", offsetof(struct corral_kernel_caps, reuseport_cbpf),
         "SO_ATTACH_REUSEPORT_CBPF (Linux 4.5)"},
        {"incoming_cpu", offsetof(struct corral_kernel_caps, incoming_cpu),
         "SO_INCOMING_CPU (Linux 4.4)"},
        {"busy_poll", offsetof(struct corral_kernel_caps, busy_poll),
         "per-epoll busy poll, EPIOCSPARAMS (Linux 6.9)"},
    };
    printf("kernel capabilities:\n");
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        printf("  %-16s %-4s %s\n", flags[i].name,
               *(const bool *)((const char *)&caps + flags[i].offset) ? "yes" : "no",
               flags[i].what);
    printf("  %-16s %u:", "cpus", caps.cpu_count);
    for (unsigned i = 0; i < caps.cpu_count; i++)
        printf(" %u", caps.cpus[i]);
    printf("\nwakeup modes:\n");
    for (int m = CORRAL_WAKEUP_AUTO; m <= CORRAL_WAKEUP_HERD; m++) {
        struct corral_wakeup_info info;
        corral_wakeup_resolve((enum corral_wakeup_mode)m, &caps, &info);
        printf("  %-11s -> %-10s (%s)%s%s\n", corral_wakeup_mode_name(info.requested),
               corral_wakeup_mode_name(info.mode), info.impl, info.reason[0] ? ": " : "",
               info.reason);
    }
}

static void usage(FILE *to)
{
    fprintf(to, "usage: corral [-c FILE] [-t] [--probe] [-V] [-h]\n"
                "  -c FILE    configuration file (default: the built-in configuration:\n"
                "             127.0.0.1:8080 answers \"corral is running\", metrics on\n"
                "             127.0.0.1:9090)\n"
                "  -t         check the configuration and exit (0 if valid)\n"
                "  --probe    print the kernel's capabilities and each wakeup mode's resolution\n"
                "  -V         print the version\n"
                "signals: HUP reload, TERM/INT graceful stop, QUIT fast stop, USR1 reopen logs\n");
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"probe", no_argument, NULL, 'P'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
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
        corral_signals_new(main_loop, signals, on_signal, NULL, &signal_watch) != 0) {
        conf_free(config);
        goto out;
    }
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
    bool started = (pid_file == NULL || write_pid_file(pid_file) == 0) &&
                   drop_privileges(gen->config) == 0;
    if (!started)
        stop_all(0);
    corral_loop_run(main_loop);
    status = started ? exit_status : 1;
    if (pid_file != NULL)
        pid_file_release(pid_file);
    free(pid_file);
    log_info("stopped");

out:
    corral_signals_free(signal_watch);
    corral_loop_free(main_loop);
    for (size_t i = 0; i < activated_count; i++)
        close(activated[i].fd);
    free(activated);
    return status;
}
