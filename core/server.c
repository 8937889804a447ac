/*
 * server.c: the worker pool.  A server owns its listeners and N worker
 * threads, each running its own loop; the main thread only starts, stops and
 * takes signals.  Nothing is shared between workers on the hot path: every
 * crossing goes through a worker's post queue.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
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

static void listener_free(corral_listener *listener)
{
    if (listener->fds != NULL) {
        for (unsigned i = 0; i < listener->server->worker_count; i++)
            if (listener->fds[i] != -1)
                close(listener->fds[i]);
        free(listener->fds);
    } else if (listener->fd != -1) {
        close(listener->fd);
    }
    if (listener->owns_path)
        unlink(((const struct sockaddr_un *)&listener->addr)->sun_path);
    free(listener->address_text);
    free(listener);
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
        listener_free(server->listeners);
        server->listeners = next;
    }
    while (server->signal_handlers != NULL) {
        struct corral__signal_handler *next = server->signal_handlers->next;
        free(server->signal_handlers);
        server->signal_handlers = next;
    }
    free(server);
}

/* --------------------------------------------------------------- listen */

/* Records the address the kernel really bound (port 0 becomes a port). */
static void listener_read_bound_address(corral_listener *listener)
{
    struct sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    if (listener->addr.ss_family != AF_UNIX &&
        getsockname(listener->fd, (struct sockaddr *)&bound, &len) == 0) {
        listener->addr = bound;
        listener->addrlen = len;
    }
}

static corral_listener *listener_new(corral_server *server,
                                     const struct corral_listen_options *options,
                                     const struct corral_conn_handler *handler, void *data)
{
    corral_listener *listener = calloc(1, sizeof(*listener));
    if (listener == NULL)
        return NULL;
    listener->server = server;
    listener->fd = -1;
    listener->handler = handler;
    listener->data = data;
    if (options != NULL)
        listener->options = *options;
    else
        corral_listen_options_init(&listener->options);
    return listener;
}

static void listener_add(corral_server *server, corral_listener *listener, corral_listener **out)
{
    listener->index = server->listener_count++;
    corral_listener **tail = &server->listeners;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = listener;
    if (out != NULL)
        *out = listener;
}

unsigned corral_server_sockets_per_listener(const corral_server *server)
{
    return server->wakeup->per_worker_sockets ? server->worker_count : 1;
}

int corral_server_listen(corral_server *server, const char *address,
                         const struct corral_listen_options *options,
                         const struct corral_conn_handler *handler, void *data,
                         corral_listener **out)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) /* main thread only */
        return -EBUSY;
    int err;
    corral_listener *listener = listener_new(server, options, handler, data);
    if (listener == NULL)
        return -ENOMEM;
    listener->address_text = strdup(address);
    if (listener->address_text == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    err = corral_parse_address(address, &listener->addr, &listener->addrlen);
    if (err != 0) {
        corral__error("listen: bad address \"%s\"", address);
        goto fail;
    }

    if (corral_server_sockets_per_listener(server) > 1 && listener->addr.ss_family != AF_UNIX) {
        listener->fds = malloc(server->worker_count * sizeof(*listener->fds));
        if (listener->fds == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        for (unsigned i = 0; i < server->worker_count; i++)
            listener->fds[i] = -1;
        /* The first socket fixes the port (an ephemeral one if 0); the rest
         * join its reuseport group on that port. */
        for (unsigned i = 0; i < server->worker_count; i++) {
            int fd = corral__listen_socket(listener, true);
            if (fd < 0) {
                err = fd;
                goto fail;
            }
            listener->fds[i] = fd;
            if (i == 0) {
                listener->fd = fd;
                listener_read_bound_address(listener);
            }
        }
    } else {
        int fd = corral__listen_socket(listener, false);
        if (fd < 0) {
            err = fd;
            goto fail;
        }
        listener->fd = fd;
        listener->owns_path = listener->addr.ss_family == AF_UNIX;
        listener_read_bound_address(listener);
    }
    listener_add(server, listener, out);
    return 0;

fail:
    listener_free(listener);
    return err;
}

static bool is_listening_stream(int fd)
{
    int listening = 0, type = 0;
    socklen_t len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == -1 || !listening)
        return false;
    len = sizeof(int);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

/* Gives sockets passed in the backlog and TCP options the caller asks for
 * now: a reload may have changed them.  listen() again only resizes the
 * queue of a listening socket. */
static int apply_listen_options(const corral_listener *listener, unsigned count)
{
    for (unsigned i = 0; i < count; i++) {
        int fd = listener->fds != NULL ? listener->fds[i] : listener->fd;
        int err;
        if (listener->addr.ss_family != AF_UNIX &&
            (err = corral__set_accept_options(listener, fd)) != 0)
            return err;
        if (listen(fd, listener->options.backlog) == -1) {
            err = -errno;
            corral__error("listen(fd %d): %s", fd, strerror(errno));
            return err;
        }
    }
    return 0;
}

int corral_server_listen_fds(corral_server *server, const int *fds, unsigned count,
                             const struct corral_listen_options *options,
                             const struct corral_conn_handler *handler, void *data,
                             corral_listener **out)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) /* main thread only */
        return -EBUSY;
    if (count == 0 || (count != 1 && count != corral_server_sockets_per_listener(server)))
        return -EINVAL;
    for (unsigned i = 0; i < count; i++)
        if (!is_listening_stream(fds[i]))
            return -EINVAL;
    int err;
    corral_listener *listener = listener_new(server, options, handler, data);
    if (listener == NULL)
        return -ENOMEM;
    if (count > 1) {
        /* listener_free() and corral_listener_fds() count the group by
         * workers. */
        assert(count == server->worker_count);
        listener->fds = malloc(count * sizeof(*listener->fds));
        if (listener->fds == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        for (unsigned i = 0; i < count; i++)
            listener->fds[i] = -1;
    }
    for (unsigned i = 0; i < count; i++) {
        int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (fd == -1) {
            err = -errno;
            corral__error("dup(listening socket %d): %s", fds[i], strerror(errno));
            goto fail;
        }
        if (listener->fds != NULL)
            listener->fds[i] = fd;
        if (i == 0)
            listener->fd = fd;
    }
    /* Accepted sockets must be non-blocking whatever the donor set. */
    int flags = fcntl(listener->fd, F_GETFL);
    for (unsigned i = 0; i < count; i++)
        fcntl(listener->fds != NULL ? listener->fds[i] : listener->fd, F_SETFL, flags | O_NONBLOCK);
    listener->addrlen = sizeof(listener->addr);
    if (getsockname(listener->fd, (struct sockaddr *)&listener->addr, &listener->addrlen) == -1) {
        err = -errno;
        goto fail;
    }
    if (options != NULL && (err = apply_listen_options(listener, count)) != 0)
        goto fail;
    char text[128];
    if (corral_listener_address(listener, text, sizeof(text)) != 0)
        snprintf(text, sizeof(text), "fd %d", fds[0]);
    listener->address_text = strdup(text);
    if (listener->address_text == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    listener_add(server, listener, out);
    return 0;

fail:
    listener_free(listener);
    return err;
}

unsigned corral_listener_fds(corral_listener *listener, const int **fds)
{
    listener->owns_path = false; /* a successor serves the file now */
    if (listener->fds != NULL) {
        *fds = listener->fds;
        return listener->server->worker_count;
    }
    *fds = &listener->fd;
    return 1;
}

/* ---------------------------------------------------------------- workers */

static void *worker_main(void *arg)
{
    corral_worker *worker = arg;
    corral_server *server = worker->server;

    corral__worker_pin(worker);
    int err = corral__worker_start_accepting(worker);
    if (err == 0)
        err = corral_loop_run(worker->loop);
    if (err != 0)
        corral__error("worker %u: stopped on error: %s", worker->index, strerror(-err));
    corral__worker_stop_accepting(worker, CORRAL__PAUSE_STOPPED);
    /* Release: the listening sockets are out of this worker's epoll set
     * before corral_server_close_listeners() may close them. */
    atomic_store_explicit(&worker->holds_listeners, false, memory_order_release);
    corral__loop_abort_conns(worker->loop);
    corral__loop_free_closed(worker->loop);

    /* acq_rel: the last worker out sees every other worker's exit. */
    if (atomic_fetch_sub_explicit(&server->workers_running, 1, memory_order_acq_rel) == 1 &&
        server->exit_loop != NULL)
        corral__loop_post_node(server->exit_loop, &server->exit_post);
    return NULL;
}

static void worker_on_stop_timeout(corral_timer *timer, void *arg)
{
    (void)timer;
    corral_worker *worker = arg;
    corral__loop_abort_conns(worker->loop);
    corral_loop_stop(worker->loop);
}

void corral__worker_conn_closed(corral_worker *worker)
{
    assert(corral__loop_owned(worker->loop));
    uint64_t active = corral__stat_read(&worker->stats.connections_active);
    if (worker->stopping) {
        if (active == 0)
            corral_loop_stop(worker->loop);
        return;
    }
    corral__worker_maybe_resume(worker, active);
}

/* The worker's stop post: runs the shortest stop asked for so far. */
static void worker_begin_stop(void *arg)
{
    corral_worker *worker = arg;
    assert(corral__loop_owned(worker->loop));
    /* acq_rel: this exchange reads the value a stopper's exchange wrote
     * (release), so the stop_ms it stored before is visible below.  Clearing
     * the flag first lets a later, shorter stop queue the post again. */
    atomic_exchange_explicit(&worker->stop_queued, false, memory_order_acq_rel);
    uint64_t graceful_ms = atomic_load_explicit(&worker->stop_ms, memory_order_relaxed);

    if (!worker->stopping) {
        worker->stopping = true;
        corral__worker_stop_accepting(worker, CORRAL__PAUSE_STOPPED);
        if (graceful_ms > 0) {
            corral__loop_stop_conns(worker->loop);
            corral_timer_start(&worker->stop_timer, graceful_ms);
        }
    }
    if (graceful_ms == 0) {
        corral__loop_abort_conns(worker->loop);
        corral_loop_stop(worker->loop);
    } else if (corral__stat_read(&worker->stats.connections_active) == 0) {
        corral_loop_stop(worker->loop);
    }
}

static void worker_release_listeners(void *arg);

int corral_server_start(corral_server *server)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) /* main thread only */
        return -EBUSY;
    int err = 0;
    for (unsigned i = 0; i < server->worker_count; i++) {
        corral_worker *worker = &server->workers[i];
        err = corral_loop_new(&worker->loop);
        if (err != 0)
            goto fail;
        worker->loop->worker = worker;
        atomic_init(&worker->stop_ms, CORRAL__NO_STOP);
        atomic_init(&worker->stop_queued, false);
        worker->stop_post =
            (struct corral__post){.cb = worker_begin_stop, .arg = worker, .embedded = true};
        atomic_init(&worker->holds_listeners, true);
        worker->release_post =
            (struct corral__post){.cb = worker_release_listeners, .arg = worker, .embedded = true};
        err = corral__timer_init(&worker->emfile_timer, worker->loop,
                                 corral__worker_on_emfile_timer, worker);
        if (err == 0)
            err = corral__timer_init(&worker->stop_timer, worker->loop, worker_on_stop_timeout,
                                     worker);
        if (err != 0)
            goto fail;
        worker->entries =
            calloc(server->listener_count ? server->listener_count : 1, sizeof(*worker->entries));
        if (worker->entries == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        worker->entry_count = server->listener_count;
        for (corral_listener *l = server->listeners; l != NULL; l = l->next)
            corral__entry_init(&worker->entries[l->index], worker, l);
        if (server->config.busy_poll_usecs > 0)
            corral__loop_set_busy_poll(worker->loop, server->config.busy_poll_usecs);
    }
    err = corral__wakeup_setup(server);
    if (err != 0)
        goto fail;

    /* Workers take no signals: the main thread handles them through a
     * signalfd, and a signal landing on a worker would be lost to it. */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    atomic_store_explicit(&server->workers_running, server->worker_count, memory_order_relaxed);
    /* Release: a corral_server_stop() that reads `started` (acquire) sees
     * every worker's loop and stop post set up above, even from a worker
     * started below before the others are. */
    atomic_store_explicit(&server->started, true, memory_order_release);
    for (unsigned i = 0; i < server->worker_count; i++) {
        corral_worker *worker = &server->workers[i];
        int rc = pthread_create(&worker->thread, NULL, worker_main, worker);
        if (rc != 0) {
            corral__error("pthread_create(worker %u): %s", i, strerror(rc));
            for (unsigned j = i; j < server->worker_count; j++)
                atomic_store_explicit(&server->workers[j].holds_listeners, false,
                                      memory_order_relaxed);
            atomic_fetch_sub_explicit(&server->workers_running, server->worker_count - i,
                                      memory_order_acq_rel);
            pthread_sigmask(SIG_SETMASK, &previous, NULL);
            corral_server_stop(server, 0);
            corral_server_wait(server);
            return -rc;
        }
        worker->thread_started = true;
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    return 0;

fail:
    for (unsigned i = 0; i < server->worker_count; i++) {
        corral_worker *worker = &server->workers[i];
        corral_loop_free(worker->loop);
        worker->loop = NULL;
        free(worker->entries);
        worker->entries = NULL;
    }
    return err;
}

/* Records a stop for `worker` and makes sure its stop post is queued.  The
 * post is embedded in the worker, so a stop allocates nothing and cannot
 * fail; requests made while it is queued are merged into it. */
static void worker_request_stop(corral_worker *worker, uint32_t graceful_ms)
{
    /* The shortest grace asked for wins; 0, at once, is the shortest.
     * Relaxed: the exchange below publishes it. */
    uint64_t current = atomic_load_explicit(&worker->stop_ms, memory_order_relaxed);
    while (graceful_ms < current &&
           !atomic_compare_exchange_weak_explicit(&worker->stop_ms, &current, graceful_ms,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    /* acq_rel: if the post is already queued, the worker's own exchange in
     * worker_begin_stop comes after this one and sees stop_ms as stored
     * above; if not, queuing it publishes stop_ms along with the node. */
    if (!atomic_exchange_explicit(&worker->stop_queued, true, memory_order_acq_rel))
        corral__loop_post_node(worker->loop, &worker->stop_post);
}

void corral_server_stop(corral_server *server, uint32_t graceful_ms)
{
    /* Acquire: pairs with the release in corral_server_start().  Every
     * worker's loop exists from then on, whether or not its thread runs
     * yet: a stop queued before the thread starts waits for it. */
    if (!atomic_load_explicit(&server->started, memory_order_acquire))
        return;
    for (unsigned i = 0; i < server->worker_count; i++)
        worker_request_stop(&server->workers[i], graceful_ms);
}

void corral_server_on_exit(corral_server *server, corral_loop *loop, corral_callback cb, void *arg)
{
    server->exit_loop = loop;
    server->exit_post = (struct corral__post){.cb = cb, .arg = arg, .embedded = true};
}

static void worker_release_listeners(void *arg)
{
    corral_worker *worker = arg;
    assert(corral__loop_owned(worker->loop));
    corral__worker_stop_accepting(worker, CORRAL__PAUSE_CLOSED);
    /* Release: the sockets are out of this worker's epoll set before the
     * main thread, reading this (acquire), closes them. */
    atomic_store_explicit(&worker->holds_listeners, false, memory_order_release);
}

static bool some_worker_holds_listeners(const corral_server *server)
{
    for (unsigned i = 0; i < server->worker_count; i++)
        if (atomic_load_explicit(&server->workers[i].holds_listeners, memory_order_acquire))
            return true;
    return false;
}

void corral_server_close_listeners(corral_server *server)
{
    if (atomic_load_explicit(&server->started, memory_order_relaxed)) { /* main thread only */
        /* A worker that has let go (or exited) is not asked again: its
         * release post may still sit in the queue of a loop that stopped. */
        for (unsigned i = 0; i < server->worker_count; i++) {
            corral_worker *worker = &server->workers[i];
            if (atomic_load_explicit(&worker->holds_listeners, memory_order_acquire))
                corral__loop_post_node(worker->loop, &worker->release_post);
        }
        /* A short wait on the main thread: each worker answers within one
         * loop iteration, or exits and lets go then.  Yielding rather than
         * sleeping keeps short the moment in which a connection can still
         * queue on a socket that is about to be closed (and be reset). */
        while (some_worker_holds_listeners(server))
            sched_yield();
    }
    for (corral_listener *l = server->listeners; l != NULL; l = l->next) {
        if (l->fds != NULL) {
            for (unsigned i = 0; i < server->worker_count; i++) {
                if (l->fds[i] != -1)
                    close(l->fds[i]);
                l->fds[i] = -1;
            }
        } else if (l->fd != -1) {
            close(l->fd);
        }
        l->fd = -1;
        if (l->owns_path)
            unlink(((const struct sockaddr_un *)&l->addr)->sun_path);
        l->owns_path = false;
    }
}

int corral_server_wait(corral_server *server)
{
    for (unsigned i = 0; i < server->worker_count; i++) {
        corral_worker *worker = &server->workers[i];
        if (worker->thread_started) {
            pthread_join(worker->thread, NULL);
            worker->thread_started = false;
        }
    }
    /* After every join: no worker can call corral_server_stop() now. */
    atomic_store_explicit(&server->started, false, memory_order_relaxed);
    return 0;
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

unsigned corral_worker_index(const corral_worker *worker)
{
    return worker->index;
}

bool corral_worker_stopping(const corral_worker *worker)
{
    assert(corral__loop_owned(worker->loop));
    return worker->stopping;
}

corral_loop *corral_worker_loop(const corral_worker *worker)
{
    return worker->loop;
}

corral_server *corral_worker_server(const corral_worker *worker)
{
    return worker->server;
}

int corral_worker_post(corral_worker *worker, corral_callback cb, void *arg)
{
    return corral_loop_post(worker->loop, cb, arg);
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
    out->connections_active = corral__stat_read(&stats->connections_active);
    out->accept_pauses = corral__stat_read(&stats->accept_pauses);
    out->cpu = worker->cpu;
}
