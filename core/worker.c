/*
 * worker.c: the worker threads, each with its own loop: start, run, stop,
 * and letting go of the listening sockets.  Nothing is shared between them
 * on the hot path: every crossing goes through a worker's post queue.
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>

/* Nothing cancels a worker: it stops through its loop.  glibc's
 * cancellation points (recv, send, epoll_wait, accept4, close...) switch a
 * thread of a multi-threaded process to asynchronous cancellation and back
 * around each system call, an atomic compare-exchange each way, unless it
 * is asynchronous already.  So it is made so, with cancellation disabled
 * first, under which the type is never acted on: four locked instructions
 * and 34 others fewer per keep-alive request (a recv and a send). */
static void worker_never_cancelled(void)
{
    int rc = pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    assert(rc == 0); /* fails only for an invalid state */
    rc = pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
    assert(rc == 0);
    (void)rc;
}

static void *worker_main(void *arg)
{
    corral_worker *worker = arg;
    corral_server *server = worker->server;

    worker_never_cancelled();
    corral__worker_pin(worker);
    int err = corral__worker_start_accepting(worker);
    if (err == 0)
        err = corral_loop_run(worker->loop);
    if (err != 0)
        corral__error("worker %u: stopped on error: %s", worker->index, strerror(-err));
    corral__worker_stop_accepting(worker, CORRAL__PAUSE_STOPPED);
    corral__udp_detach(worker);
    corral__udp_stopped(worker);
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
    if (worker->steer_slot != NULL)
        corral__steer_closed(worker);
    if (worker->stopping) {
        if (active == 0 && worker->holds == 0)
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
            corral__udp_stopping(worker);
            corral_timer_start(&worker->stop_timer, graceful_ms);
        }
    }
    if (graceful_ms == 0) {
        corral__loop_abort_conns(worker->loop);
        corral_loop_stop(worker->loop);
    } else if (corral__stat_read(&worker->stats.connections_active) == 0 && worker->holds == 0) {
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
        if (server->config.io_uring_off)
            corral_loop_set_io_uring(worker->loop, false);
        if (server->config.busy_poll_usecs > 0)
            corral__loop_set_busy_poll(worker->loop, server->config.busy_poll_usecs);
    }
    err = corral__wakeup_setup(server);
    if (err == 0)
        err = corral__udp_start(server);
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
    if (!atomic_load_explicit(&worker->server->keep_udp, memory_order_relaxed))
        corral__udp_detach(worker);
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
        corral__server_drain_listeners(server);
    }
    for (corral_listener *l = server->listeners; l != NULL; l = l->next)
        corral__listener_close(l);
}

void corral_server_close_tcp_listeners(corral_server *server)
{
    /* Relaxed: each worker reads it in its release post, which the queue
     * publishes after this store. */
    atomic_store_explicit(&server->keep_udp, true, memory_order_relaxed);
    corral_server_close_listeners(server);
    atomic_store_explicit(&server->keep_udp, false, memory_order_relaxed);
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

/* -------------------------------------------------------------- accessors */

unsigned corral_worker_index(const corral_worker *worker)
{
    return worker->index;
}

bool corral_worker_stopping(const corral_worker *worker)
{
    assert(corral__loop_owned(worker->loop));
    return worker->stopping;
}

void corral_worker_hold(corral_worker *worker)
{
    assert(corral__loop_owned(worker->loop));
    worker->holds++;
}

void corral_worker_release(corral_worker *worker)
{
    assert(corral__loop_owned(worker->loop));
    assert(worker->holds > 0);
    if (--worker->holds == 0 && worker->stopping &&
        corral__stat_read(&worker->stats.connections_active) == 0)
        corral_loop_stop(worker->loop);
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
