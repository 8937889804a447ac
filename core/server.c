/*
 * server.c: the worker pool.  A server owns its listeners (listener.c) and N
 * worker threads (worker.c); the main thread only starts, stops and takes
 * signals, in corral_server_run().
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <linux/filter.h>
#include <sys/socket.h>
#include <unistd.h>

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
    if (!CORRAL__RESERVED_CLEAR(config->reserved) ||
        !CORRAL__RESERVED_CLEAR(config->reserved_bytes))
        return -EINVAL;
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
    /* The affinity mode exists for locality, so its statistic is always
     * kept; elsewhere it would cost a getsockopt() per accept for a
     * figure only a comparison of modes (corral-wakebench) asks for. */
    server->count_locality =
        config->count_locality || server->wakeup_info.mode == CORRAL_WAKEUP_AFFINITY;
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
    corral__udp_free_all(server);
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

/* ------------------------------------------------ a change of socket layout */

/* Sends each new connection of the group `fd` is in to one of its first
 * `count` sockets, at random. */
static int steer_to_first(int fd, unsigned count, const char *address)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_RANDOM)),
        BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, count),
        BPF_STMT(BPF_RET | BPF_A, 0),
    };
    struct sock_fprog program = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program, sizeof(program)) == -1) {
        int err = -errno;
        corral__error("setsockopt(%s, SO_ATTACH_REUSEPORT_CBPF): %s", address, strerror(errno));
        return err;
    }
    return 0;
}

int corral_server_listen_beside(corral_server *server, const int *fds, unsigned count,
                                const struct corral_listen_options *options,
                                const struct corral_conn_handler *handler, void *data,
                                corral_listener **out)
{
    unsigned need = corral_server_sockets_per_listener(server);
    if (count == 0 || !corral__listen_args_clear(options, handler))
        return -EINVAL;
    /* A stand-in listener for the new sockets: the address and options. */
    corral_listener model = {.fd = -1, .addrlen = sizeof(model.addr)};
    if (getsockname(fds[0], (struct sockaddr *)&model.addr, &model.addrlen) == -1)
        return -errno;
    if (model.addr.ss_family != AF_INET && model.addr.ss_family != AF_INET6)
        return -EINVAL;
    if (options != NULL)
        model.options = *options;
    else
        corral_listen_options_init(&model.options);
    char text[128];
    if (corral_listener_address(&model, text, sizeof(text)) != 0)
        snprintf(text, sizeof(text), "fd %d", fds[0]);
    model.address_text = text;

    int *group = calloc(need, sizeof(*group));
    if (group == NULL)
        return -ENOMEM;
    int one = 1, err = 0;
    /* The group's order is its sockets' order of joining, and a socket that
     * leaves is replaced by the last one: the ones kept here stay first,
     * however many of the others close. */
    unsigned kept = count < need ? count : need, made = kept;
    for (unsigned i = 0; i < count && err == 0; i++)
        if (setsockopt(fds[i], SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == -1)
            err = -errno;
    for (unsigned i = 0; i < kept; i++)
        group[i] = fds[i];
    for (; made < need && err == 0; made++) {
        int fd = corral__listen_socket(&model, CORRAL__REUSEPORT_JOIN); /* logs its failure */
        if (fd < 0) {
            err = fd;
            break;
        }
        group[made] = fd;
    }
    /* A mode that steers the group itself replaces this at its start. */
    if (err == 0)
        err = steer_to_first(group[0], need, text);
    corral_listener *listener = NULL;
    if (err == 0)
        err = corral_server_listen_fds(server, group, need, options, handler, data, &listener);
    if (err == 0) {
        listener->steered_beside = true;
        if (out != NULL)
            *out = listener;
    }
    for (unsigned i = kept; i < made; i++)
        close(group[i]);
    free(group);
    return err;
}

void corral_server_listeners_settled(corral_server *server)
{
    for (corral_listener *l = server->listeners; l != NULL; l = l->next) {
        if (!l->steered_beside)
            continue;
        int fd = l->fds != NULL ? l->fds[0] : l->fd, unused = 0;
        /* ENOENT would mean no program: nothing to take off either way. */
        if (fd != -1 &&
            setsockopt(fd, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &unused, sizeof(unused)) == -1 &&
            errno != ENOENT)
            corral__error("setsockopt(%s, SO_DETACH_REUSEPORT_BPF): %s", l->address_text,
                          strerror(errno));
        l->steered_beside = false;
    }
}

/* ------------------------------------------- draining the listening sockets */

/* A connection accepted on the main thread, on its way to a worker. */
struct queued_socket {
    struct corral__post post;
    corral_worker *worker;
    corral_listener *listener;
    int fd;
    socklen_t peer_len;
    struct sockaddr_storage peer;
};

/* The worker's post: the connection starts there like one it accepted. */
static void open_queued_socket(void *arg)
{
    struct queued_socket *q = arg;
    /* Posts still queued when a loop is freed run there, outside its run:
     * nothing will serve the connection. */
    if (atomic_load_explicit(&q->worker->loop->running, memory_order_relaxed))
        corral__conn_open_accepted(q->worker, q->listener, q->fd, &q->peer, q->peer_len);
    else
        close(q->fd);
    free(q);
}

/* Sends `fd`, accepted from `l`, to the server's next worker. */
static int queue_socket(corral_listener *l, int fd, const struct sockaddr_storage *peer,
                        socklen_t peer_len)
{
    corral_server *server = l->server;
    struct queued_socket *q = malloc(sizeof(*q));
    if (q == NULL)
        return -ENOMEM;
    q->fd = fd;
    q->listener = l;
    q->peer = *peer;
    q->peer_len = peer_len;
    q->worker = &server->workers[server->next_adopter++ % server->worker_count];
    q->post = (struct corral__post){.cb = open_queued_socket, .arg = q, .embedded = true};
    corral__loop_post_node(q->worker->loop, &q->post);
    return 0;
}

int corral_listener_adopt(corral_listener *listener, int fd)
{
    struct sockaddr_storage peer;
    socklen_t peer_len = sizeof(peer);
    if (getpeername(fd, (struct sockaddr *)&peer, &peer_len) == -1)
        peer_len = 0;
    return queue_socket(listener, fd, &peer, peer_len);
}

/* The most taken from one socket: what it queued, and what arrives while
 * it is emptied, is bounded by the time this takes rather than by a count. */
#define DRAIN_MAX 65536

/* A socket about to be closed resets every connection in its queue:
 * connections that the kernel completed for clients who are waiting for an
 * answer.  Taking them first makes closing a socket (a reload that changes
 * the socket layout, a stop) lose none of them: the workers, even stopping
 * ones, serve them as any others. */
static void drain_socket(corral_listener *l, int fd)
{
    for (int taken = 0; taken < DRAIN_MAX; taken++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);
        int conn_fd =
            accept4(fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (conn_fd == -1) {
            if (corral__accept_error_passes(errno))
                continue;
            break; /* EAGAIN: empty; anything else: nothing more to take */
        }
        if (queue_socket(l, conn_fd, &peer, peer_len) != 0) {
            close(conn_fd);
            break;
        }
    }
}

void corral__server_drain_listeners(corral_server *server)
{
    for (corral_listener *l = server->listeners; l != NULL; l = l->next) {
        unsigned count = l->fds != NULL ? server->worker_count : 1;
        for (unsigned i = 0; i < count; i++) {
            int fd = l->fds != NULL ? l->fds[i] : l->fd;
            if (fd != -1)
                drain_socket(l, fd);
        }
    }
}

int corral_listener_take_queue(corral_listener *listener, int fd)
{
    /* The workers' loops exist from the start on. */
    if (!atomic_load_explicit(&listener->server->started, memory_order_relaxed))
        return -EINVAL;
    /* A socket passed in may block (systemd's, or one this server never
     * took), and an empty queue must not stop the main thread. */
    int flags = fcntl(fd, F_GETFL);
    if (flags == -1 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1)
        return -errno;
    drain_socket(listener, fd);
    return 0;
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
