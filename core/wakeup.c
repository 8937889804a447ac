/*
 * wakeup.c: the accept path shared by every wakeup mode, and the choice of
 * mode.  A mode (one ops table per file) decides only how listening sockets
 * sit in the workers' epoll sets; accepting, counting, overload pauses and
 * the EMFILE back-off are the same for all and live here.
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Accepts per wakeup before other events get a turn.  Small, so that
 * accepting stays interleaved with serving what was accepted: draining 64 at
 * once left the clients and upstreams of those connections waiting, and with
 * a new connection per request 4 served about 10% more than 64.  At least 2,
 * so that a worker taking the last queued connection sees the queue empty
 * (the rotate mode re-queues on that). */
#define ACCEPT_BATCH    4
#define EMFILE_PAUSE_MS 100

static const char *const mode_names[] = {
    [CORRAL_WAKEUP_AUTO] = "auto",           [CORRAL_WAKEUP_ROUNDROBIN] = "roundrobin",
    [CORRAL_WAKEUP_AFFINITY] = "affinity",   [CORRAL_WAKEUP_EXCLUSIVE] = "exclusive",
    [CORRAL_WAKEUP_REUSEPORT] = "reuseport", [CORRAL_WAKEUP_HERD] = "herd",
    [CORRAL_WAKEUP_BALANCED] = "balanced",
};

const char *corral_wakeup_mode_name(enum corral_wakeup_mode mode)
{
    return (unsigned)mode < sizeof(mode_names) / sizeof(mode_names[0]) ? mode_names[mode] : "?";
}

int corral_wakeup_mode_parse(const char *name, enum corral_wakeup_mode *out)
{
    for (size_t i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++) {
        if (strcmp(name, mode_names[i]) == 0) {
            *out = (enum corral_wakeup_mode)i;
            return 0;
        }
    }
    return -EINVAL;
}

/*
 * Each mode's mechanisms, most preferred first.  The first one the
 * capabilities allow is used; falling off the mode's own mechanisms onto
 * another mode is a fallback and is logged as a warning.  `balanced` needs
 * eBPF and falls back to round-robin; it skips the native round-robin set
 * so that its reason for falling back is eBPF's.
 */
static const struct corral_wakeup_ops *const chains[][6] = {
    [CORRAL_WAKEUP_AUTO] = {&corral__wakeup_native_rotate, &corral__wakeup_ebpf_roundrobin,
                            &corral__wakeup_rotate, &corral__wakeup_reuseport,
                            &corral__wakeup_herd},
    [CORRAL_WAKEUP_ROUNDROBIN] = {&corral__wakeup_native_rotate, &corral__wakeup_ebpf_roundrobin,
                                  &corral__wakeup_rotate, &corral__wakeup_reuseport,
                                  &corral__wakeup_herd},
    [CORRAL_WAKEUP_AFFINITY] = {&corral__wakeup_native_affinity, &corral__wakeup_ebpf_affinity,
                                &corral__wakeup_cbpf_cpu, &corral__wakeup_reuseport,
                                &corral__wakeup_herd},
    [CORRAL_WAKEUP_EXCLUSIVE] = {&corral__wakeup_exclusive, &corral__wakeup_reuseport,
                                 &corral__wakeup_herd},
    [CORRAL_WAKEUP_REUSEPORT] = {&corral__wakeup_reuseport, &corral__wakeup_herd},
    [CORRAL_WAKEUP_HERD] = {&corral__wakeup_herd},
    [CORRAL_WAKEUP_BALANCED] = {&corral__wakeup_ebpf_balanced, &corral__wakeup_rotate,
                                &corral__wakeup_reuseport, &corral__wakeup_herd},
};

const struct corral_wakeup_ops *corral__wakeup_choose(enum corral_wakeup_mode requested,
                                                      const struct corral_kernel_caps *caps,
                                                      struct corral_wakeup_info *info)
{
    if ((unsigned)requested >= sizeof(chains) / sizeof(chains[0]))
        requested = CORRAL_WAKEUP_AUTO;
    const char *reason = "";
    const struct corral_wakeup_ops *chosen = &corral__wakeup_herd;
    for (size_t i = 0; chains[requested][i] != NULL; i++) {
        const struct corral_wakeup_ops *ops = chains[requested][i];
        const char *why = "";
        if (ops->probe == NULL || ops->probe(caps, &why)) {
            chosen = ops;
            break;
        }
        reason = why; /* the one just ahead of the chosen one: the closest miss */
    }
    *info = (struct corral_wakeup_info){
        .requested = requested,
        .mode = chosen->mode,
        .impl = chosen->impl,
        .reason = reason,
    };
    return chosen;
}

void corral_wakeup_resolve(enum corral_wakeup_mode requested, const struct corral_kernel_caps *caps,
                           struct corral_wakeup_info *info)
{
    struct corral_kernel_caps probed;
    if (caps == NULL) {
        corral_probe(&probed);
        caps = &probed;
    }
    corral__wakeup_choose(requested, caps, info);
}

/* Whether the mechanism passed over just ahead of `chosen` is the patched
 * kernel's native epoll set: on a mainline kernel that is the normal case,
 * and `chosen` is the best there is, not a shortfall. */
static bool only_native_passed_over(enum corral_wakeup_mode requested,
                                    const struct corral_wakeup_ops *chosen)
{
    if ((unsigned)requested >= sizeof(chains) / sizeof(chains[0]))
        return false;
    const struct corral_wakeup_ops *const *chain = chains[requested];
    return chain[0] != NULL && chain[1] == chosen && strcmp(chain[0]->impl, "native") == 0;
}

int corral__wakeup_setup(corral_server *server)
{
    const struct corral_wakeup_info *info = &server->wakeup_info;
    enum corral_wakeup_mode wanted =
        info->requested == CORRAL_WAKEUP_AUTO ? CORRAL_WAKEUP_ROUNDROBIN : info->requested;
    const char *mode = corral_wakeup_mode_name(info->mode);
    if (info->mode != wanted)
        corral__warn("wakeup %s: falling back to %s (%s, %s) because %s; %u workers",
                     corral_wakeup_mode_name(info->requested), mode, info->impl,
                     server->wakeup->description, info->reason, server->worker_count);
    else if (info->reason[0] != '\0' && only_native_passed_over(info->requested, server->wakeup))
        corral__info("wakeup %s: %s (%s), the best this kernel offers; %u workers (the native "
                     "epoll sets, which need a patched kernel, are not here: %s)",
                     corral_wakeup_mode_name(info->requested), info->impl,
                     server->wakeup->description, server->worker_count, info->reason);
    else if (info->reason[0] != '\0')
        corral__info("wakeup %s: %s (%s); preferred mechanism unavailable: %s; %u workers",
                     corral_wakeup_mode_name(info->requested), info->impl,
                     server->wakeup->description, info->reason, server->worker_count);
    else
        corral__info("wakeup %s: %s (%s); %u workers", corral_wakeup_mode_name(info->requested),
                     info->impl, server->wakeup->description, server->worker_count);
    return server->wakeup->setup != NULL ? server->wakeup->setup(server) : 0;
}

void corral_server_wakeup(const corral_server *server, struct corral_wakeup_info *info)
{
    *info = server->wakeup_info;
}

/* ----------------------------------------------------------- accept path */

static void worker_sync_accepting(corral_worker *worker)
{
    bool want = worker->pause_reasons == 0;
    if (want && !worker->attached) {
        int err = worker->server->wakeup->attach(worker);
        if (err != 0) {
            corral__error("worker %u: cannot register listeners: %s", worker->index,
                          strerror(-err));
            return;
        }
        worker->attached = true;
    } else if (!want && worker->attached) {
        worker->server->wakeup->detach(worker);
        worker->attached = false;
    }
}

static void worker_pause(corral_worker *worker, unsigned reason)
{
    if (worker->pause_reasons == 0)
        corral__stat_add(&worker->stats.accept_pauses, 1);
    worker->pause_reasons |= reason;
    worker_sync_accepting(worker);
}

static void worker_unpause(corral_worker *worker, unsigned reason)
{
    if (!(worker->pause_reasons & reason))
        return;
    worker->pause_reasons &= ~reason;
    worker_sync_accepting(worker);
}

int corral__worker_start_accepting(corral_worker *worker)
{
    worker->pause_reasons &= ~CORRAL__PAUSE_STOPPED;
    worker_sync_accepting(worker);
    return worker->attached || worker->pause_reasons != 0 ? 0 : -EIO;
}

void corral__worker_stop_accepting(corral_worker *worker, unsigned reason)
{
    worker->pause_reasons |= reason;
    worker_sync_accepting(worker);
}

/* Rejoins the accept rotation at the low-water mark (90% of the limit), so a
 * worker hovering at its limit does not flap in and out. */
void corral__worker_maybe_resume(corral_worker *worker, uint64_t active)
{
    unsigned max = worker->server->config.max_connections;
    if ((worker->pause_reasons & CORRAL__PAUSE_FULL) && active <= (uint64_t)max - max / 10)
        worker_unpause(worker, CORRAL__PAUSE_FULL);
}

void corral__worker_on_emfile_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    worker_unpause(arg, CORRAL__PAUSE_NO_FDS);
}

void corral__worker_pin(corral_worker *worker)
{
    if (worker->cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((size_t)worker->cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc != 0)
        corral__warn("worker %u: pthread_setaffinity_np(CPU %d): %s", worker->index, worker->cpu,
                     strerror(rc));
}

void corral__count_locality(corral_worker *worker, int fd)
{
    if (!worker->server->count_locality)
        return;
    int incoming_cpu;
    socklen_t len = sizeof(incoming_cpu);
    if (getsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &incoming_cpu, &len) == -1)
        return;
    int here = worker->cpu >= 0 ? worker->cpu : sched_getcpu();
    if (incoming_cpu == here)
        corral__stat_add(&worker->stats.accepts_local, 1);
}

static void accept_failed(corral_worker *worker, struct corral__accept_entry *entry, int error)
{
    if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        /* The connection stays queued; retrying at once would spin. */
        if (!worker->emfile_logged) {
            corral__warn("worker %u: accept4(%s): %s; pausing accepts for %d ms", worker->index,
                         entry->listener->address_text, strerror(error), EMFILE_PAUSE_MS);
            worker->emfile_logged = true;
        }
        worker_pause(worker, CORRAL__PAUSE_NO_FDS);
        corral_timer_start(&worker->emfile_timer, EMFILE_PAUSE_MS);
        return;
    }
    /* EINVAL, EBADF and the like: the socket no longer listens (someone
     * shut it down).  epoll keeps reporting it ready, so watching it on
     * would spin the worker; it joins again with the next attach, such as
     * a resume after max_connections, and fails again just once. */
    corral__error("worker %u: accept4(%s): %s; no longer accepting on it", worker->index,
                  entry->listener->address_text, strerror(error));
    corral__entry_unregister(entry);
}

bool corral__accept_error_passes(int err)
{
    /* EPERM: a firewall rule refused this one connection. */
    return err == EINTR || err == ECONNABORTED || err == EPROTO || err == EPERM;
}

void corral__accept_from(struct corral__accept_entry *entry)
{
    corral_worker *worker = entry->worker;
    assert(corral__loop_owned(worker->loop));
    corral_listener *listener = entry->listener;
    unsigned max = worker->server->config.max_connections;

    unsigned batch = worker->server->wakeup->accept_batch;
    if (batch == 0)
        batch = ACCEPT_BATCH;

    corral__stat_add(&worker->stats.accept_wakeups, 1);
    bool drained = false;
    for (unsigned i = 0; i < batch && worker->pause_reasons == 0; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);
        int fd =
            accept4(entry->fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd == -1) {
            if (corral__accept_error_passes(errno))
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (i == 0)
                    corral__stat_add(&worker->stats.accept_wasted, 1);
                drained = true;
                if (worker->steer_slot != NULL && listener->fds != NULL)
                    corral__steer_drained(worker);
            } else {
                accept_failed(worker, entry, errno);
            }
            break;
        }
        worker->emfile_logged = false;
        if (listener->addr.ss_family != AF_UNIX)
            corral__count_locality(worker, fd);
        corral__conn_open_accepted(worker, listener, fd, &peer, peer_len);
        if (max > 0 && corral__stat_read(&worker->stats.connections_active) >= max)
            worker_pause(worker, CORRAL__PAUSE_FULL);
    }
    if (drained && entry->registered && worker->server->wakeup->on_drained != NULL)
        worker->server->wakeup->on_drained(worker, entry);
}

static void entry_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    (void)epoll_events;
    struct corral__accept_entry *entry = (struct corral__accept_entry *)handle;
    if (entry->registered) /* else detached earlier in this batch of events */
        corral__accept_from(entry);
}

void corral__entry_init(struct corral__accept_entry *entry, corral_worker *worker,
                        corral_listener *listener)
{
    *entry = (struct corral__accept_entry){
        .handle.on_event = entry_on_event,
        .worker = worker,
        .listener = listener,
        .fd = listener->fds != NULL ? listener->fds[worker->index] : listener->fd,
    };
}

int corral__entry_register(struct corral__accept_entry *entry, uint32_t extra_events)
{
    int err =
        corral__loop_watch(entry->worker->loop, entry->fd, &entry->handle, EPOLLIN | extra_events);
    entry->registered = err == 0;
    return err;
}

void corral__entry_unregister(struct corral__accept_entry *entry)
{
    if (!entry->registered)
        return;
    corral__loop_unwatch(entry->worker->loop, entry->fd);
    entry->registered = false;
}

int corral__attach_all(corral_worker *worker, uint32_t extra_events)
{
    for (size_t i = 0; i < worker->entry_count; i++) {
        int err = corral__entry_register(&worker->entries[i], extra_events);
        if (err != 0) {
            while (i-- > 0)
                corral__entry_unregister(&worker->entries[i]);
            return err;
        }
    }
    return 0;
}

void corral__detach_all(corral_worker *worker)
{
    for (size_t i = 0; i < worker->entry_count; i++)
        corral__entry_unregister(&worker->entries[i]);
}

int corral__attach_level(corral_worker *worker)
{
    return corral__attach_all(worker, 0);
}

int corral__attach_exclusive(corral_worker *worker)
{
    return corral__attach_all(worker, EPOLLEXCLUSIVE);
}

bool corral__probe_epoll_exclusive(const struct corral_kernel_caps *caps, const char **why)
{
    *why = "EPOLLEXCLUSIVE is not supported";
    return caps->epoll_exclusive;
}
