/*
 * corral.c: the daemon's main().  Reads the command line, loads the
 * configuration, sets the process up, starts the first generation, and runs
 * the main thread's loop for signals: SIGHUP reloads without closing the
 * listening sockets, SIGTERM/SIGINT stop gracefully, SIGQUIT at once,
 * SIGUSR1 reopens the log, SIGUSR2 starts a new binary on the same sockets
 * and hands over to it.
 */
#include "cmd/daemon.h"
#include "cmd/generation.h"
#include "cmd/notify.h"
#include "cmd/probe_print.h"
#include "cmd/process.h"
#include "cmd/runtime.h"
#include "proto/policy/stub_status.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static corral_loop *main_loop;
static char *pid_file;     /* the configured pid_file, or NULL */
static char *pid_file_old; /* pid_file.oldbin: where this pid is during an upgrade */
static bool pid_file_moved;

/* How often the service manager's status line is brought up to date. */
#define STATUS_INTERVAL_MS 5000

static void on_status_timer(corral_timer *timer, void *arg)
{
    (void)arg;
    generations_notify("");
    corral_timer_start(timer, STATUS_INTERVAL_MS);
}

/* ----------------------------------------------------------- binary upgrade */

/* The new process of an upgrade under way (SIGUSR2), and the socket on
 * which it says it serves (a byte when it does, the end of the stream if it
 * exits first), and then takes the idle connections passed to it. */
#define UPGRADE_TIMEOUT_MS 60000
static struct {
    pid_t pid; /* -1: none */
    int fd;
    corral_io *io;
    corral_timer *timer;
    bool done; /* the new process serves: this one is stopping */
} upgrade = {.pid = -1, .fd = -1};

/* Moves the pid file aside for the new process (`aside`), or back. */
static void pid_file_move(bool aside)
{
    if (pid_file == NULL || pid_file_old == NULL || pid_file_moved == aside)
        return;
    const char *from = aside ? pid_file : pid_file_old, *to = aside ? pid_file_old : pid_file;
    if (rename(from, to) != 0) {
        log_warn("pid_file: renaming %s to %s: %s", from, to, strerror(errno));
        return;
    }
    pid_file_moved = aside;
}

/* The new process steers the sockets it inherits with its own eBPF
 * program, which it can only once this one's has let them go; taken back
 * when the upgrade fails. */
static void steering_lend(struct generation *gen, bool lend)
{
    int err = corral_server_steer_lend(gen->server, lend);
    if (err != 0)
        log_warn("upgrade failed, and the eBPF steering could not take the sockets back (%s): "
                 "the kernel spreads connections by hash until the next reload",
                 strerror(-err));
}

/* Stops waiting for the new process, once it has reported (it has exec'd)
 * or ended, or none was started; `keep` the socket to pass it the
 * connections. */
static void upgrade_finish(bool keep)
{
    corral_io_free(upgrade.io);
    corral_timer_free(upgrade.timer);
    if (!keep)
        close(upgrade.fd);
    upgrade.io = NULL;
    upgrade.timer = NULL;
}

/* The new process's report: it serves (this one stops), or it ended. */
static void on_upgrade_report(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    (void)arg;
    char byte;
    ssize_t n = read(upgrade.fd, &byte, 1);
    if (n == -1 && (errno == EAGAIN || errno == EINTR))
        return;
    upgrade_finish(n == 1);
    if (n == 1) {
        struct generation *newest = daemon_state.generations;
        uint32_t drain = newest != NULL ? newest->config->drain_timeout_ms : 0;
        log_info("upgrade: process %d serves; stopping gracefully (up to %u ms)", (int)upgrade.pid,
                 drain);
        /* The new process is the service's main process from now on. */
        notify_send("MAINPID=%d\nSTATUS=upgraded: process %d serves", (int)upgrade.pid,
                    (int)upgrade.pid);
        notify_close();
        upgrade.done = true;
        atomic_store_explicit(&daemon_state.stopping, true, memory_order_relaxed);
        generations_pass_to(upgrade.fd);
        stop_all(drain);
        return;
    }
    /* It ended without serving: an exec that failed, or a configuration it
     * refused (its own log says why). */
    int status = 0;
    pid_t rc;
    for (int i = 0; i < 100 && (rc = waitpid(upgrade.pid, &status, WNOHANG)) == 0; i++)
        usleep(10000);
    /* The pid file back first: whoever reads the log line below and looks
     * for the serving process must find it named. */
    pid_file_move(false);
    if (rc == upgrade.pid && WIFEXITED(status) && WEXITSTATUS(status) == 127)
        log_error("upgrade failed: %s could not be started; this process keeps serving",
                  binary_started_from());
    else if (rc == upgrade.pid && WIFEXITED(status))
        log_error("upgrade failed: the new process exited with status %d (see its messages); "
                  "this process keeps serving",
                  WEXITSTATUS(status));
    else if (rc == upgrade.pid && WIFSIGNALED(status))
        log_error("upgrade failed: the new process was killed (%s); this process keeps serving",
                  strsignal(WTERMSIG(status)));
    else
        log_error("upgrade failed: the new process stopped reporting; this process keeps serving");
    upgrade.fd = -1;
    if (daemon_state.generations != NULL)
        steering_lend(daemon_state.generations, false);
    upgrade.pid = -1;
}

static void on_upgrade_timeout(corral_timer *timer, void *arg)
{
    (void)timer;
    (void)arg;
    log_error("upgrade: process %d did not report serving within %d s; killing it",
              (int)upgrade.pid, UPGRADE_TIMEOUT_MS / 1000);
    kill(upgrade.pid, SIGKILL); /* its end of the pipe closes: a failure */
}

/* In the new process: the socket to the process it upgrades, which passes
 * its idle connections on it, each with the address it was accepted on. */
static corral_io *handed_io;
static int handed_fd = -1;

static void on_connection_handed(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    (void)arg;
    for (int i = 0; i < 64; i++) {
        char address[128];
        union {
            struct cmsghdr align;
            char space[CMSG_SPACE(sizeof(int))];
        } control;
        struct iovec iov = {.iov_base = address, .iov_len = sizeof(address) - 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.space,
                             .msg_controllen = sizeof(control.space)};
        ssize_t n = recvmsg(handed_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n == -1 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) { /* the old process has exited */
            corral_io_free(handed_io);
            close(handed_fd);
            handed_io = NULL;
            handed_fd = -1;
            return;
        }
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        if (cmsg == NULL || cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS ||
            cmsg->cmsg_len != CMSG_LEN(sizeof(int)))
            continue;
        int fd;
        memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
        address[n] = '\0';
        struct generation *newest = daemon_state.generations;
        corral_listener *listener = NULL;
        for (size_t s = 0; newest != NULL && s < newest->site_count && listener == NULL; s++) {
            char bound[128];
            if (corral_listener_address(newest->sites[s].listener, bound, sizeof(bound)) == 0 &&
                strcmp(bound, address) == 0)
                listener = newest->sites[s].listener;
        }
        if (listener == NULL || corral_listener_adopt(listener, fd) != 0)
            close(fd); /* an address this configuration no longer serves */
    }
}

/* SIGUSR2: starts the binary this process was started from, on the same
 * listening sockets; once it serves, this process drains and exits. */
static void upgrade_start(void)
{
    struct generation *newest = daemon_state.generations;
    if (upgrade.pid != -1 || newest == NULL) {
        log_warn("SIGUSR2: %s; ignored",
                 upgrade.pid != -1 ? "an upgrade is under way" : "the daemon is stopping");
        return;
    }
    unsigned count = 0;
    for (size_t i = 0; i < newest->site_count; i++) {
        const int *group;
        count += corral_listener_fds(newest->sites[i].listener, &group);
    }
    for (size_t i = 0; i < newest->udp_site_count; i++) {
        const int *group;
        count += corral_udp_fds(newest->udp_sites[i].udp, &group);
    }
    int *fds = calloc(count ? count : 1, sizeof(*fds)), report[2] = {-1, -1};
    if (fds == NULL || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, report) != 0) {
        log_error("SIGUSR2: %s; no upgrade", fds == NULL ? "out of memory" : strerror(errno));
        free(fds);
        return;
    }
    unsigned n = 0;
    for (size_t i = 0; i < newest->site_count; i++) {
        const int *group;
        unsigned k = corral_listener_fds(newest->sites[i].listener, &group);
        memcpy(fds + n, group, k * sizeof(*fds));
        n += k;
    }
    /* The udp sockets after them: the new process tells them by their type. */
    for (size_t i = 0; i < newest->udp_site_count; i++) {
        const int *group;
        unsigned k = corral_udp_fds(newest->udp_sites[i].udp, &group);
        memcpy(fds + n, group, k * sizeof(*fds));
        n += k;
    }
    pid_file_move(true);
    steering_lend(newest, true);
    int err = upgrade_spawn(fds, count, report[1], &upgrade.pid);
    free(fds);
    close(report[1]);
    upgrade.fd = report[0];
    if (err == 0)
        err = corral_io_new(main_loop, upgrade.fd, CORRAL_READABLE, on_upgrade_report, NULL,
                            &upgrade.io);
    if (err == 0)
        err = corral_timer_new(main_loop, on_upgrade_timeout, NULL, &upgrade.timer);
    if (err != 0) {
        pid_file_move(false); /* before the log line, as after a failed start */
        log_error("SIGUSR2: starting %s: %s; no upgrade",
                  binary_started_from() ? binary_started_from() : "the binary", strerror(-err));
        if (upgrade.pid > 0) {
            kill(upgrade.pid, SIGKILL);
            waitpid(upgrade.pid, NULL, 0);
        }
        upgrade_finish(false);
        steering_lend(newest, false);
        upgrade.pid = -1;
        return;
    }
    corral_timer_start(upgrade.timer, UPGRADE_TIMEOUT_MS);
    log_info("SIGUSR2: upgrading: started %s as process %d with %u listening sockets",
             binary_started_from(), (int)upgrade.pid, count);
}

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
    case SIGHUP:
        if (upgrade.done)
            log_warn("SIGHUP: this process is being replaced; ignored");
        else
            reload();
        break;
    case SIGUSR2:
        if (upgrade.done)
            log_warn("SIGUSR2: this process is being replaced; ignored");
        else
            upgrade_start();
        break;
    case SIGUSR1: {
        int err = daemon_log_reopen();
        if (err != 0)
            log_error("SIGUSR1: reopening the error log failed: %s", strerror(-err));
        /* Every generation's access log, draining ones included: their
         * last requests belong in the new file too. */
        for (struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
            for (size_t i = 0; i < g->log_count; i++) {
                int rc = access_log_reopen(g->logs[i]);
                if (rc != 0)
                    log_error("SIGUSR1: generation %u: reopening an access_log failed: %s",
                              g->number, strerror(-rc));
                err = err != 0 ? err : rc;
            }
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
    return config->admin_listen_count > 0 || config->stream.server_count > 0;
}

/* Prints what could not be translated on stderr. */
static void print_untranslated(void *arg, const char *message)
{
    (void)arg;
    fprintf(stderr, "corral: not translated: %s\n", message);
}

/* --from-nginx FILE: 0 when every directive was translated, 1 when some
 * were not (they are commented out in the output), 2 when FILE cannot be
 * read as a config. */
static int from_nginx(const char *path)
{
    struct conf_error error;
    int rc = conf_from_nginx_file(path, stdout, print_untranslated, NULL, &error);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "corral: writing the translation: %s\n", strerror(errno));
        return 2;
    }
    if (rc < 0) {
        fprintf(stderr, "%s\n", error.text);
        return 2;
    }
    if (rc > 0)
        fprintf(stderr, "corral: %d directive%s of %s could not be translated\n", rc,
                rc == 1 ? "" : "s", path);
    return rc > 0 ? 1 : 0;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: corral [-c FILE] [-t] [--from-nginx FILE] [--probe] [-V] [-h]\n"
                "  -c FILE    configuration file (default: the built-in configuration:\n"
                "             127.0.0.1:8080 answers \"corral is running\", metrics on\n"
                "             127.0.0.1:9090)\n"
                "  -t         check the configuration and exit (0 if valid)\n"
                "  --from-nginx FILE  print FILE, an nginx config, in corral's spelling\n"
                "             (exit 1 if a directive could not be translated)\n"
                "  --probe    print the kernel's capabilities and each wakeup mode's resolution\n"
                "  -V, --version  print the version\n"
                "signals: HUP reload, TERM/INT graceful stop, QUIT fast stop, USR1 reopen logs,\n"
                "         USR2 binary upgrade\n");
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"probe", no_argument, NULL, 'P'},
                                          {"from-nginx", required_argument, NULL, 'N'},
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
        case 'N': return from_nginx(optarg);
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
    remember_binary(argv);
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
    static const int signals[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGUSR2, 0};
    corral_signals *signal_watch = NULL;
    if (corral_loop_new(&main_loop) != 0 ||
        corral_timer_new(main_loop, on_shutdown_delay, NULL, &shutdown_timer) != 0 ||
        corral_signals_new(main_loop, signals, on_signal, NULL, &signal_watch) != 0) {
        conf_free(config);
        goto out;
    }
    generations_init(main_loop);
    collect_activated_sockets();
    handed_fd = upgrade_collect_report();
    notify_open();
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    raise_fd_limit(config, config->workers ? config->workers : caps.cpu_count);
    pid_file = config->pid_file != NULL ? strdup(config->pid_file) : NULL;
    if (pid_file != NULL && asprintf(&pid_file_old, "%s.oldbin", pid_file) == -1)
        pid_file_old = NULL;
    if (config->pid_file != NULL && (pid_file == NULL || pid_file_old == NULL)) {
        log_error("out of memory");
        conf_free(config);
        goto out;
    }
    if (pid_file != NULL && (config->user != NULL || config->group != NULL) &&
        pid_file_keeper_start(pid_file) != 0) {
        conf_free(config);
        goto out;
    }

    stub_status_set_source(admin_stub_status_counts); /* before any worker serves */
    struct generation *gen;
    int err = generation_start(config, NULL, &gen);
    if (err != 0) {
        log_error("cannot start: %s", strerror(-err));
        if (pid_file != NULL)
            pid_file_release(pid_file);
        goto out;
    }
    /* The workers already run, and the admin endpoints read the list. */
    pthread_mutex_lock(&daemon_state.lock);
    daemon_state.generations = gen;
    atomic_store(&daemon_state.accepting, gen->number);
    pthread_mutex_unlock(&daemon_state.lock);
    log_wakeup(gen);
    for (size_t i = 0; i < gen->site_count; i++) {
        char bound[128];
        corral_listener_address(gen->sites[i].listener, bound, sizeof(bound));
        log_info("listening on %s%s", bound, gen->sites[i].admin ? " (admin)" : "");
    }
    for (size_t i = 0; i < gen->udp_site_count; i++) {
        char bound[128];
        corral_udp_address(gen->udp_sites[i].udp, bound, sizeof(bound));
        log_info("listening on %s %s", bound, gen->udp_sites[i].quic != NULL ? "quic" : "udp");
    }
    generations_release_passed();
    bool started =
        (pid_file == NULL || write_pid_file(pid_file) == 0) && drop_privileges(gen->config) == 0;
    if (!started)
        stop_all(0);
    else
        generations_notify("READY=1\n");
    if (started && handed_fd != -1) {
        if (corral_io_new(main_loop, handed_fd, CORRAL_READABLE, on_connection_handed, NULL,
                          &handed_io) != 0) {
            close(handed_fd);
            handed_fd = -1;
        } else {
            upgrade_report_ready(handed_fd);
        }
    }
    corral_timer *status_timer = NULL;
    if (started && notify_enabled() &&
        corral_timer_new(main_loop, on_status_timer, NULL, &status_timer) == 0)
        corral_timer_start(status_timer, STATUS_INTERVAL_MS);
    corral_loop_run(main_loop);
    corral_timer_free(status_timer);
    corral_io_free(handed_io);
    if (handed_fd != -1)
        close(handed_fd);
    status = started ? generations_exit_status() : 1;
    if (pid_file != NULL)
        pid_file_release(pid_file_moved ? pid_file_old : pid_file);
    log_info("stopped");

out:
    free(pid_file);
    free(pid_file_old);
    notify_close();
    corral_signals_free(signal_watch);
    corral_timer_free(shutdown_timer);
    corral_loop_free(main_loop);
    activated_sockets_close();
    return status;
}
