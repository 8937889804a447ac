/*
 * wakebench_load.c: corral-wakebench's client threads.  Closed loop (each
 * waits for its answer before its next connection) or, for the paced
 * scenarios that stall workers, open loop (connections start on schedule).
 */
#include "cmd/wakebench.h"

#include <corral.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int client_connect(int port, bool heavy)
{
    struct sockaddr_storage addr;
    socklen_t len;
    char text[32];
    snprintf(text, sizeof(text), "127.0.0.1:%d", port);
    corral_parse_address(text, &addr, &len);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return -1;
    /* A connection no worker ever serves counts as a failure after this
     * long, rather than hanging the run. */
    static const struct timeval reply_timeout = {.tv_sec = 10};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &reply_timeout, sizeof(reply_timeout));
    struct message message = {.started = corral_monotonic_ns(), .heavy = heavy};
    if (connect(fd, (struct sockaddr *)&addr, len) == -1 ||
        send(fd, &message, sizeof(message), MSG_NOSIGNAL) != (ssize_t)sizeof(message)) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool client_await_reply(int fd)
{
    char reply;
    return recv(fd, &reply, 1, 0) == 1;
}

static void sleep_until(uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* By the connection's place in the run, all clients together, so that
 * the clients' heavy connections do not come in pairs. */
static bool is_heavy(const struct client *c, unsigned k)
{
    unsigned sequence = c->index + k * c->stride;
    return c->scenario == SCENARIO_UNEVEN && sequence % HEAVY_EVERY == HEAVY_EVERY / 2;
}

static void closed_loop(struct client *c, uint64_t next)
{
    bool paced = c->scenario == SCENARIO_PACED || c->scenario == SCENARIO_UNEVEN ||
                 c->scenario == SCENARIO_STALLED;
    int fds[256];
    for (unsigned done = 0; done < c->connections;) {
        unsigned batch = c->scenario == SCENARIO_BURST ? c->burst : 1;
        if (batch > c->connections - done)
            batch = c->connections - done;
        if (batch > sizeof(fds) / sizeof(fds[0]))
            batch = sizeof(fds) / sizeof(fds[0]);
        for (unsigned i = 0; i < batch; i++)
            fds[i] = client_connect(c->port, is_heavy(c, done + i));
        for (unsigned i = 0; i < batch; i++) {
            if (fds[i] == -1 || !client_await_reply(fds[i])) {
                c->failures++;
                if (fds[i] != -1)
                    close(fds[i]);
            } else if (c->scenario == SCENARIO_LONG) {
                c->held[done + i] = fds[i];
            } else {
                close(fds[i]);
            }
        }
        done += batch;
        if (paced) {
            next += c->interval_ns;
            sleep_until(next);
        } else if (c->scenario == SCENARIO_BURST) {
            usleep(20000); /* let every worker go idle between bursts */
        }
    }
}

/* Takes the answers that have come until `until`, or until none is left
 * to wait for when `drain`.  Latency is measured by the workers, so an
 * answer taken late changes no number. */
static void collect(struct client *c, int ep, int *open, uint64_t until, bool drain,
                    unsigned *waiting)
{
    struct epoll_event events[64];
    for (;;) {
        uint64_t now = corral_monotonic_ns();
        if (now >= until || (drain && *waiting == 0))
            return;
        int timeout = (int)((until - now) / 1000000);
        int n = epoll_wait(ep, events, 64, timeout);
        if (n == -1 && errno != EINTR)
            return;
        for (int i = 0; i < n; i++) {
            unsigned k = (unsigned)events[i].data.u64;
            if (!client_await_reply(open[k]))
                c->failures++;
            close(open[k]); /* which takes it out of the epoll set */
            open[k] = -1;
            (*waiting)--;
        }
        if (n == 0 && timeout == 0)
            sleep_until(until); /* less than epoll_wait's millisecond */
    }
}

/* Connection k starts at next + k x interval however many of the earlier
 * ones still wait for their answer, so a connection stuck behind a stalled
 * worker holds back no other; a client that falls behind its schedule
 * catches up at once.  Every connection still unanswered
 * OPEN_LOOP_DRAIN_NS after the last one started counts as a failure. */
static void open_loop(struct client *c, uint64_t next)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int *open = malloc(c->connections * sizeof(int));
    if (ep == -1 || open == NULL) {
        c->failures = c->connections;
        goto out;
    }
    unsigned waiting = 0;
    for (unsigned k = 0; k < c->connections; k++) {
        collect(c, ep, open, next + k * c->interval_ns, false, &waiting);
        open[k] = client_connect(c->port, is_heavy(c, k));
        struct epoll_event event = {.events = EPOLLIN, .data.u64 = k};
        if (open[k] == -1 || epoll_ctl(ep, EPOLL_CTL_ADD, open[k], &event) == -1) {
            c->failures++;
            if (open[k] != -1)
                close(open[k]);
            open[k] = -1;
            continue;
        }
        waiting++;
    }
    collect(c, ep, open, corral_monotonic_ns() + OPEN_LOOP_DRAIN_NS, true, &waiting);
    c->failures += waiting;
    for (unsigned k = 0; k < c->connections; k++)
        if (open[k] != -1)
            close(open[k]);
out:
    free(open);
    if (ep != -1)
        close(ep);
}

void *client_main(void *arg)
{
    struct client *c = arg;
    if (c->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((size_t)c->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    uint64_t next = corral_monotonic_ns() + c->phase_ns;
    if (c->scenario == SCENARIO_PACED || c->scenario == SCENARIO_UNEVEN ||
        c->scenario == SCENARIO_STALLED)
        sleep_until(next);
    if (c->open_loop)
        open_loop(c, next);
    else
        closed_loop(c, next);
    return NULL;
}
