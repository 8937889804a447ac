/*
 * wakeup_ebpf.c: accepting steered by an eBPF sk_reuseport program
 * (bpf/steer.bpf.c).  Each worker has its own socket in a SO_REUSEPORT
 * group, so every socket has one waiter and no wakeup is wasted; the
 * program picks the socket for each connection: in turn (roundrobin), the
 * less loaded of two random workers (balanced), or the worker on the
 * arrival CPU unless it is overloaded (affinity).  Workers publish their
 * load in a memory-mapped array the program reads, without a system call.
 */
#include "internal.h"

#include "bpf/steer.h"
#include "steer.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/utsname.h>
#include <time.h>

#define DEFAULT_SPILL 1.1

/* At most this many other workers' queues looked at each time a balanced
 * worker is about to wait. */
#define TAKE_SCAN 64

_Static_assert(sizeof(struct steer_slot) == 128 && offsetof(struct steer_slot, taken) == 64,
               "a steering slot is two cache lines, its hot fields in the first");

/* One loaded program with its maps, held by the servers that steer with it. */
struct corral__steer {
    struct steer_bpf *skel;
    _Atomic(corral_server *) owner; /* the server whose workers publish their load */
    unsigned refs;                  /* under steer_lock */
    unsigned keys;                  /* socket array entries in use: listeners x workers */
};

/* Loading needs CAP_BPF and CAP_PERFMON (for the verifier, the program's
 * pointer arithmetic), which a daemon drops after its first start: a
 * server started later (a reload) takes over the most recently loaded
 * program when it cannot load its own. */
static pthread_mutex_t steer_lock = PTHREAD_MUTEX_INITIALIZER;
static struct corral__steer *latest;
static char unavailable[200]; /* why the probe could not load it; "" if it could */
/* The copy the probe loaded, kept for the first server to steer: a load
 * costs milliseconds (the verifier, the maps), and a daemon probes and
 * then starts at once.  Under steer_lock. */
static struct steer_bpf *probed_copy;

/* ------------------------------------------------------------- loading */

static char verifier_error[160]; /* under steer_lock, while loading */

/* libbpf prints the verifier's log in one message when a load fails; the
 * line that says what was refused is the last one before the statistics. */
static int capture_print(enum libbpf_print_level level, const char *format, va_list args)
    __attribute__((format(printf, 2, 0)));

static int capture_print(enum libbpf_print_level level, const char *format, va_list args)
{
    if (level == LIBBPF_DEBUG)
        return 0;
    char *text;
    if (vasprintf(&text, format, args) == -1)
        return 0;
    const char *log = strstr(text, "-- BEGIN PROG LOAD LOG --\n");
    if (log == NULL) {
        free(text);
        return 0;
    }
    log += strlen("-- BEGIN PROG LOAD LOG --\n");
    for (const char *line = log; *line != '\0' && strncmp(line, "-- END", 6) != 0;) {
        size_t len = strcspn(line, "\n");
        if (len > 0 && strncmp(line, "processed ", 10) != 0 &&
            strncmp(line, "verification time", 17) != 0 && strncmp(line, "stack depth", 11) != 0)
            snprintf(verifier_error, sizeof(verifier_error), "%.*s", (int)len, line);
        line += len + (line[len] == '\n');
    }
    free(text);
    return 0;
}

static bool kernel_older_than(unsigned major, unsigned minor)
{
    struct utsname name;
    unsigned have_major, have_minor;
    if (uname(&name) != 0 || sscanf(name.release, "%u.%u", &have_major, &have_minor) != 2)
        return false;
    return have_major < major || (have_major == major && have_minor < minor);
}

/* Loads a fresh copy of the program; on failure writes why into `why`.
 * Called with steer_lock held. */
static int steer_load(struct steer_bpf **out, char *why, size_t len)
{
    verifier_error[0] = '\0';
    libbpf_print_fn_t previous = libbpf_set_print(capture_print);
    struct steer_bpf *skel = steer_bpf__open();
    int err = skel == NULL ? -errno : steer_bpf__load(skel);
    libbpf_set_print(previous);
    if (err == 0) {
        *out = skel;
        return 0;
    }
    if (err > 0)
        err = -err;
    if (verifier_error[0] != '\0')
        snprintf(why, len, "the verifier refused the eBPF program: %s%s", verifier_error,
                 strstr(verifier_error, "!root") != NULL ? " (it needs CAP_PERFMON with CAP_BPF)"
                                                         : "");
    else if (err == -EPERM || err == -EACCES)
        snprintf(why, len, "no CAP_BPF or CAP_SYS_ADMIN to load the eBPF program");
    else if (kernel_older_than(5, 14))
        snprintf(why, len, "the kernel is too old for the eBPF program (needs Linux 5.14)");
    else
        snprintf(why, len, "loading the eBPF program failed: %s", strerror(-err));
    steer_bpf__destroy(skel);
    return err;
}

bool corral__ebpf_probe(void)
{
    struct steer_bpf *skel = NULL;
    pthread_mutex_lock(&steer_lock);
    bool ok = steer_load(&skel, unavailable, sizeof(unavailable)) == 0;
    if (ok && probed_copy == NULL) {
        probed_copy = skel;
        skel = NULL;
    }
    pthread_mutex_unlock(&steer_lock);
    if (skel != NULL)
        steer_bpf__destroy(skel);
    return ok;
}

/* Removes every socket from `steer`'s array, and every group: a socket can
 * be in one array only, and a server taking the program over puts its own
 * in.  (An array's keys all exist: delete those that were used.)  Until it
 * has, the program finds no group and the kernel hashes: nothing is lost. */
static void forget_sockets(struct corral__steer *steer)
{
    int fd = bpf_map__fd(steer->skel->maps.socks);
    for (__u32 key = 0; key < steer->keys; key++)
        bpf_map_delete_elem(fd, &key); /* ENOENT for a socket closed since */
    fd = bpf_map__fd(steer->skel->maps.groups);
    __u64 cookie;
    while (bpf_map_get_next_key(fd, NULL, &cookie) == 0 && bpf_map_delete_elem(fd, &cookie) == 0)
        ;
}

static int steer_acquire(corral_server *server, struct corral__steer **out)
{
    char why[200];
    struct steer_bpf *skel = NULL;
    pthread_mutex_lock(&steer_lock);
    int err = 0;
    if (probed_copy != NULL) { /* fresh: no server has used it */
        skel = probed_copy;
        probed_copy = NULL;
    } else {
        err = steer_load(&skel, why, sizeof(why));
    }
    struct corral__steer *steer = NULL;
    if (err == 0) {
        steer = calloc(1, sizeof(*steer));
        if (steer == NULL) {
            steer_bpf__destroy(skel);
            err = -ENOMEM;
            snprintf(why, sizeof(why), "out of memory");
        } else {
            steer->skel = skel;
            steer->refs = 1;
            if (latest != NULL)
                forget_sockets(latest);
            latest = steer;
        }
    } else if (latest != NULL) {
        corral__warn("wakeup: %s now; taking over the program loaded earlier", why);
        forget_sockets(latest);
        steer = latest;
        steer->refs++;
        err = 0;
    }
    pthread_mutex_unlock(&steer_lock);
    if (err != 0) {
        corral__error("wakeup %s: %s", corral_wakeup_mode_name(server->wakeup_info.mode), why);
        return err;
    }
    *out = steer;
    return 0;
}

static void steer_release(struct corral__steer *steer)
{
    pthread_mutex_lock(&steer_lock);
    bool last = --steer->refs == 0;
    if (last && latest == steer)
        latest = NULL;
    pthread_mutex_unlock(&steer_lock);
    if (last) {
        steer_bpf__destroy(steer->skel);
        free(steer);
    }
}

/* --------------------------------------------------------------- setup */

static void configure(struct corral__steer *steer, const corral_server *server,
                      enum steer_mode mode)
{
    struct steer_bpf__bss *bss = steer->skel->bss;
    /* workers = 0 makes the program pass (hash) while this changes. */
    __atomic_store_n(&bss->workers, 0, __ATOMIC_RELEASE);
    double spill = server->config.wakeup_spill > 0 ? server->config.wakeup_spill : DEFAULT_SPILL;
    bss->mode = mode;
    bss->spill_x16 = (__u32)(spill * 16 + 0.5);
    memset(bss->cpu_first, 0, sizeof(bss->cpu_first));
    memset(bss->cpu_count, 0, sizeof(bss->cpu_count));
    unsigned n = server->worker_count, used = corral__cpus_used(server);
    bss->cpu_stride = used;
    for (unsigned slot = 0; mode == STEER_AFFINITY && slot < used; slot++) {
        unsigned cpu = server->caps.cpus[slot];
        if (cpu < STEER_MAX_CPUS) {
            bss->cpu_first[cpu] = slot + 1;
            bss->cpu_count[cpu] = (n - slot + used - 1) / used;
        }
    }
    /* A reload that takes the program over configures it while the old
     * server's workers may still publish into the same slots: every field
     * a worker touches is cleared by an atomic store, as they write them. */
    for (unsigned i = 0; i < n; i++) {
        struct steer_slot *slot = &bss->slots[i];
        __atomic_store_n(&slot->conns, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->accepted, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->paused, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->busy_at, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->selected, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->local, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->spills, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->seen_ns, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->queued_ns, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->taken, 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&bss->total_conns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&bss->total_selected, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&bss->total_accepted, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&bss->workers, n, __ATOMIC_RELEASE);
}

/* Puts the listener's sockets in the array at [index x workers + i] and
 * attaches the program to its group. */
static int add_listener(struct corral__steer *steer, corral_listener *listener, unsigned n)
{
    int socks = bpf_map__fd(steer->skel->maps.socks);
    int groups = bpf_map__fd(steer->skel->maps.groups);
    for (unsigned i = 0; i < n; i++) {
        __u32 key = (__u32)(listener->index * n + i), group = (__u32)listener->index;
        __u64 fd = (__u64)listener->fds[i], cookie;
        socklen_t len = sizeof(cookie);
        if (getsockopt(listener->fds[i], SOL_SOCKET, SO_COOKIE, &cookie, &len) == -1) {
            int err = -errno;
            corral__error("getsockopt(%s, SO_COOKIE): %s", listener->address_text, strerror(errno));
            return err;
        }
        if (bpf_map_update_elem(socks, &key, &fd, BPF_ANY) != 0) {
            int err = -errno;
            corral__error("bpf_map_update_elem(sockets, %s): %s", listener->address_text,
                          strerror(errno));
            return err;
        }
        if (bpf_map_update_elem(groups, &cookie, &group, BPF_ANY) != 0) {
            int err = -errno;
            corral__error("bpf_map_update_elem(groups, %s): %s", listener->address_text,
                          strerror(errno));
            return err;
        }
    }
    int prog = bpf_program__fd(steer->skel->progs.corral_steer);
    if (setsockopt(listener->fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, &prog, sizeof(prog)) ==
        -1) {
        int err = -errno;
        corral__error("setsockopt(%s, SO_ATTACH_REUSEPORT_EBPF): %s", listener->address_text,
                      strerror(errno));
        return err;
    }
    listener->steered_beside = false; /* replaced */
    return 0;
}

static void ebpf_teardown(corral_server *server);

static int ebpf_setup(corral_server *server, enum steer_mode mode)
{
    ebpf_teardown(server); /* started again after a wait: take a fresh one */
    unsigned n = server->worker_count;
    if (n > STEER_MAX_WORKERS || server->listener_count * n > STEER_MAX_SOCKETS) {
        corral__error("wakeup %s over eBPF: at most %d workers and %d listening sockets",
                      corral_wakeup_mode_name(server->wakeup_info.mode), STEER_MAX_WORKERS,
                      STEER_MAX_SOCKETS);
        return -E2BIG;
    }
    struct corral__steer *steer;
    int err = steer_acquire(server, &steer);
    if (err != 0)
        return err;
    server->steer = steer;
    pthread_mutex_lock(&steer_lock);
    steer->keys = (unsigned)server->listener_count * n;
    pthread_mutex_unlock(&steer_lock);
    configure(steer, server, mode);
    for (unsigned i = 0; i < n; i++)
        server->workers[i].steer_slot = &steer->skel->bss->slots[i];
    atomic_store_explicit(&steer->owner, server, memory_order_release);
    for (corral_listener *l = server->listeners; l != NULL; l = l->next) {
        if (l->fds == NULL)
            continue; /* a unix socket: no group, every worker watches it */
        err = add_listener(steer, l, n);
        if (err != 0)
            return err; /* the teardown at corral_server_free() releases it */
    }
    return 0;
}

static int setup_roundrobin(corral_server *server)
{
    return ebpf_setup(server, STEER_ROUNDROBIN);
}

static int setup_balanced(corral_server *server)
{
    return ebpf_setup(server, STEER_BALANCED);
}

static int setup_affinity(corral_server *server)
{
    return ebpf_setup(server, STEER_AFFINITY);
}

static void ebpf_teardown(corral_server *server)
{
    if (server->steer == NULL)
        return;
    corral_server *self = server;
    /* A server that took this program over owns it now: leave it be.
     * Otherwise the sockets leave the array now, not when the kernel
     * frees the map at some later point: a socket can be in one array
     * only, and a newer server that keeps these sockets (a reload) may
     * want to put them in its own. */
    if (atomic_compare_exchange_strong(&server->steer->owner, &self, NULL)) {
        __atomic_store_n(&server->steer->skel->bss->workers, 0, __ATOMIC_RELEASE);
        pthread_mutex_lock(&steer_lock);
        forget_sockets(server->steer);
        pthread_mutex_unlock(&steer_lock);
    }
    steer_release(server->steer);
    server->steer = NULL;
}

int corral_server_steer_lend(corral_server *server, bool lend)
{
    struct corral__steer *steer = server->steer;
    if (steer == NULL || atomic_load_explicit(&steer->owner, memory_order_acquire) != server)
        return 0;
    if (lend) {
        pthread_mutex_lock(&steer_lock);
        forget_sockets(steer);
        pthread_mutex_unlock(&steer_lock);
        return 0;
    }
    unsigned n = server->worker_count;
    for (corral_listener *l = server->listeners; l != NULL; l = l->next) {
        if (l->fds == NULL)
            continue;
        int err = add_listener(steer, l, n);
        if (err != 0)
            return err;
    }
    return 0;
}

/* ----------------------------------------------------- worker's side */

/* Whether this worker's server still steers with the program. */
static bool publishing(const corral_worker *worker)
{
    return atomic_load_explicit(&worker->server->steer->owner, memory_order_relaxed) ==
           worker->server;
}

/* The worker is its slot's only writer, so most of its fields change by
 * plain stores; `accepted`, which a worker taking another's connections
 * adds to, and the sums shared by all workers change by atomic adds. */
static void publish_conns(corral_worker *worker)
{
    struct steer_slot *slot = worker->steer_slot;
    uint64_t now = corral__stat_read(&worker->stats.connections_active);
    uint64_t before = __atomic_load_n(&slot->conns, __ATOMIC_RELAXED);
    if (now == before)
        return;
    __atomic_store_n(&slot->conns, now, __ATOMIC_RELAXED);
    __atomic_fetch_add(&worker->server->steer->skel->bss->total_conns, now - before,
                       __ATOMIC_RELAXED);
}

static void add_accepted(corral_worker *worker, struct steer_slot *slot, uint64_t count)
{
    __atomic_fetch_add(&slot->accepted, count, __ATOMIC_RELAXED);
    __atomic_fetch_add(&worker->server->steer->skel->bss->total_accepted, count, __ATOMIC_RELAXED);
}

/* The clock the program reads with bpf_ktime_get_ns(). */
static uint64_t clock_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static void publish_seen(struct steer_slot *slot)
{
    __atomic_store_n(&slot->seen_ns, clock_now(), __ATOMIC_RELAXED);
}

/* While a worker takes a connection off another worker's queue: that
 * worker's slot, whose count of accepted connections it adds to. */
static _Thread_local struct steer_slot *taking_from;

void corral__steer_accepted(corral_worker *worker)
{
    if (!publishing(worker))
        return;
    if (taking_from != NULL) {
        /* Not the owner's seen_ns: a worker that stalls stays stalled. */
        add_accepted(worker, taking_from, 1);
        struct steer_slot *slot = worker->steer_slot;
        __atomic_store_n(&slot->taken, __atomic_load_n(&slot->taken, __ATOMIC_RELAXED) + 1,
                         __ATOMIC_RELAXED);
    } else {
        publish_seen(worker->steer_slot);
        add_accepted(worker, worker->steer_slot, 1);
    }
    publish_conns(worker);
}

/* The queue is empty: whatever the program steered here has been taken, so
 * connections it counted that never completed their handshake stop
 * weighing on this worker. */
void corral__steer_drained(corral_worker *worker)
{
    if (!publishing(worker))
        return;
    struct steer_slot *slot = worker->steer_slot;
    publish_seen(slot);
    /* A compare-and-swap: another worker may be taking one of them. */
    __u64 accepted = __atomic_load_n(&slot->accepted, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t selected = __atomic_load_n(&slot->selected, __ATOMIC_RELAXED);
        if (selected <= accepted)
            return;
        if (__atomic_compare_exchange_n(&slot->accepted, &accepted, selected, false,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&worker->server->steer->skel->bss->total_accepted,
                               selected - accepted, __ATOMIC_RELAXED);
            return;
        }
    }
}

/* Takes up to `max` connections queued on worker `owner`'s sockets. */
static unsigned take_from(corral_worker *worker, unsigned owner, unsigned max)
{
    unsigned taken = 0, limit = worker->server->config.max_connections;
    struct steer_slot *slot = &worker->server->steer->skel->bss->slots[owner];
    for (size_t i = 0; i < worker->entry_count && taken < max; i++) {
        corral_listener *listener = worker->entries[i].listener;
        if (listener->fds == NULL)
            continue; /* shared by every worker: no queue of another's */
        while (taken < max) {
            /* Below the limit after this one, so no pause is needed. */
            if (limit > 0 && corral__stat_read(&worker->stats.connections_active) + 1 >= limit)
                return taken;
            struct sockaddr_storage peer;
            socklen_t peer_len = sizeof(peer);
            int fd = accept4(listener->fds[owner], (struct sockaddr *)&peer, &peer_len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd == -1) {
                if (corral__accept_error_passes(errno))
                    continue;
                break; /* EAGAIN: empty; anything else is the owner's to handle */
            }
            taken++;
            corral__count_locality(worker, fd);
            taking_from = slot;
            corral__conn_open_accepted(worker, listener, fd, &peer, peer_len);
            taking_from = NULL;
        }
    }
    return taken;
}

void corral__steer_set_take_ns(corral_server *server, uint64_t take_ns)
{
    assert(!atomic_load(&server->started)); /* the workers read it unlocked */
    server->steer_take_ns = take_ns;
}

/* balanced: before waiting, a worker takes the connections that have
 * waited STEER_TAKE_NS (or the server's own time) on other workers' sockets, so that no connection
 * waits for one worker while another is idle: a worker in a long request,
 * or whose thread the kernel does not run, cannot accept them; any worker
 * could have, with one shared queue.  A connection the owner has already
 * accepted is not taken: only the queue. */
bool corral__steer_take(corral_worker *worker, uint64_t *look_again_ns)
{
    *look_again_ns = 0;
    corral_server *server = worker->server;
    if (server->wakeup != &corral__wakeup_ebpf_balanced || worker->pause_reasons != 0 ||
        !worker->attached || !publishing(worker))
        return false;
    struct steer_bpf__bss *bss = server->steer->skel->bss;
    /* One shared line says whether anything waits anywhere. */
    if (__atomic_load_n(&bss->total_selected, __ATOMIC_RELAXED) <=
        __atomic_load_n(&bss->total_accepted, __ATOMIC_RELAXED))
        return false;
    unsigned taken = 0;
    unsigned n = server->worker_count;
    uint64_t now = clock_now();
    uint64_t take_ns = server->steer_take_ns != 0 ? server->steer_take_ns : STEER_TAKE_NS;
    for (unsigned k = 1; k < n && k <= TAKE_SCAN; k++) {
        unsigned owner = (worker->index + k) % n;
        const struct steer_slot *slot = &bss->slots[owner];
        uint64_t selected = __atomic_load_n(&slot->selected, __ATOMIC_RELAXED);
        uint64_t accepted = __atomic_load_n(&slot->accepted, __ATOMIC_RELAXED);
        if (selected <= accepted)
            continue;
        uint64_t since = __atomic_load_n(&slot->seen_ns, __ATOMIC_RELAXED);
        uint64_t queued_ns = __atomic_load_n(&slot->queued_ns, __ATOMIC_RELAXED);
        if (queued_ns > since)
            since = queued_ns;
        if (now < since)
            continue;
        if (now - since < take_ns) {
            /* Not yet.  This worker may go to sleep now, and nobody else
             * may come back to its loop before the owner does, so it looks
             * again then, if the connection went to an empty queue the
             * owner has not accepted from since: one accepting is draining
             * its queue, but one woken for it may not be running. */
            if (since == queued_ns) {
                uint64_t left = take_ns - (now - since);
                if (*look_again_ns == 0 || left < *look_again_ns)
                    *look_again_ns = left;
            }
            continue;
        }
        uint64_t waiting = selected - accepted;
        taken += take_from(worker, owner, waiting < 4 ? (unsigned)waiting : 4);
    }
    return taken > 0;
}

void corral__steer_busy(corral_worker *worker, bool busy)
{
    if (!publishing(worker))
        return;
    uint32_t *at = &worker->steer_slot->busy_at;
    /* Idle, a worker leaves its slot's cache line alone. */
    if (!busy && __atomic_load_n(at, __ATOMIC_RELAXED) == 0)
        return;
    __atomic_store_n(at, busy ? STEER_BUSY_STAMP(clock_now()) : 0, __ATOMIC_RELAXED);
}

void corral__steer_closed(corral_worker *worker)
{
    if (publishing(worker))
        publish_conns(worker);
}

/* A socket without a group (a unix socket, or one socket passed in for all
 * workers) is shared by every worker: it gets what `rotate` does, so that
 * it does not wake them all. */
static bool shared_exclusive(const corral_worker *worker, const struct corral__accept_entry *entry)
{
    return entry->listener->fds == NULL && worker->server->caps.epoll_exclusive &&
           worker->server->worker_count > 1;
}

static int ebpf_attach(corral_worker *worker)
{
    for (size_t i = 0; i < worker->entry_count; i++) {
        struct corral__accept_entry *entry = &worker->entries[i];
        int err =
            corral__entry_register(entry, shared_exclusive(worker, entry) ? EPOLLEXCLUSIVE : 0);
        if (err != 0) {
            while (i-- > 0)
                corral__entry_unregister(&worker->entries[i]);
            /* It stops on this error: the program must not choose it. */
            if (publishing(worker))
                __atomic_store_n(&worker->steer_slot->paused, 1, __ATOMIC_RELEASE);
            return err;
        }
    }
    if (publishing(worker)) {
        publish_conns(worker);
        __atomic_store_n(&worker->steer_slot->paused, 0, __ATOMIC_RELEASE);
    }
    return 0;
}

static void ebpf_on_drained(corral_worker *worker, struct corral__accept_entry *entry)
{
    if (shared_exclusive(worker, entry))
        corral__rotate_requeue(worker, entry);
}

/* The program stops choosing this worker; what is queued on its socket
 * waits for it to rejoin (or moves to a live socket if this one closes).
 * A worker that has not attached yet is not paused: its socket listens
 * from the start, and it accepts what queued there as soon as it runs. */
static void ebpf_detach(corral_worker *worker)
{
    if (publishing(worker))
        __atomic_store_n(&worker->steer_slot->paused, 1, __ATOMIC_RELEASE);
    corral__detach_all(worker);
}

int corral_server_steer_stats(const corral_server *server, unsigned index,
                              struct corral_steer_stats *out)
{
    if (index >= server->worker_count)
        return -EINVAL;
    const corral_worker *worker = &server->workers[index];
    /* A server whose program a later one took over shows nothing: the
     * slots are the successor's now. */
    if (server->steer == NULL || worker->steer_slot == NULL ||
        atomic_load_explicit(&server->steer->owner, memory_order_relaxed) != server)
        return -ENOTSUP;
    const struct steer_slot *slot = worker->steer_slot;
    uint64_t selected = __atomic_load_n(&slot->selected, __ATOMIC_RELAXED);
    uint64_t accepted = __atomic_load_n(&slot->accepted, __ATOMIC_RELAXED);
    uint64_t since = __atomic_load_n(&slot->seen_ns, __ATOMIC_RELAXED);
    uint64_t queued_ns = __atomic_load_n(&slot->queued_ns, __ATOMIC_RELAXED);
    if (queued_ns > since)
        since = queued_ns;
    *out = (struct corral_steer_stats){
        .steered = selected,
        .local = __atomic_load_n(&slot->local, __ATOMIC_RELAXED),
        .spills = __atomic_load_n(&slot->spills, __ATOMIC_RELAXED),
        .load = __atomic_load_n(&slot->conns, __ATOMIC_RELAXED) +
                (selected > accepted ? selected - accepted : 0),
        .stalled = selected > accepted && clock_now() - since > STEER_STALLED_NS,
        .accepting = __atomic_load_n(&slot->paused, __ATOMIC_RELAXED) == 0,
        .taken = __atomic_load_n(&slot->taken, __ATOMIC_RELAXED),
    };
    return 0;
}

/* ----------------------------------------------------------- ops tables */

static bool ebpf_probe(const struct corral_kernel_caps *caps, const char **why)
{
    if (!caps->reuseport) {
        *why = "SO_REUSEPORT is not supported";
        return false;
    }
    if (!caps->ebpf) {
        *why = unavailable[0] != '\0' ? unavailable
                                      : "eBPF steering is turned off (CORRAL_CAPS_DISABLE=ebpf)";
        return false;
    }
    return true;
}

const struct corral_wakeup_ops corral__wakeup_ebpf_roundrobin = {
    .mode = CORRAL_WAKEUP_ROUNDROBIN,
    .impl = "ebpf",
    .description = "SO_REUSEPORT group steered in turn by an eBPF program",
    .per_worker_sockets = true,
    .probe = ebpf_probe,
    .setup = setup_roundrobin,
    .teardown = ebpf_teardown,
    .attach = ebpf_attach,
    .on_drained = ebpf_on_drained,
    .detach = ebpf_detach,
};

const struct corral_wakeup_ops corral__wakeup_ebpf_balanced = {
    .mode = CORRAL_WAKEUP_BALANCED,
    .impl = "ebpf",
    .description = "SO_REUSEPORT group steered by an eBPF program to the less loaded of two "
                   "random workers",
    .per_worker_sockets = true,
    .probe = ebpf_probe,
    .setup = setup_balanced,
    .teardown = ebpf_teardown,
    .attach = ebpf_attach,
    .on_drained = ebpf_on_drained,
    .detach = ebpf_detach,
};

const struct corral_wakeup_ops corral__wakeup_ebpf_affinity = {
    .mode = CORRAL_WAKEUP_AFFINITY,
    .impl = "ebpf",
    .description = "pinned workers, SO_REUSEPORT steered by an eBPF program to the arrival "
                   "CPU's worker unless it is overloaded",
    .per_worker_sockets = true,
    .pins_workers = true,
    .probe = ebpf_probe,
    .setup = setup_affinity,
    .teardown = ebpf_teardown,
    .attach = ebpf_attach,
    .on_drained = ebpf_on_drained,
    .detach = ebpf_detach,
};
