/*
 * udp_steer.c: QUIC steering of a UDP listen by an eBPF sk_reuseport
 * program (bpf/quic.bpf.c): each datagram to the worker that owns its
 * connection, by the index in the connection ID the server issued, and a
 * new connection's Initials to the worker the wakeup mode picks.  When the
 * program cannot be used, the listen's classic BPF program (steer_cbpf),
 * attached before, stays; else the kernel's hash.
 */
#include "internal.h"

#include "bpf/quic.h"
#include "quic.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(struct quic_slot) == 64, "a worker's slot is one cache line");

struct corral__udp_steer {
    struct quic_bpf *skel;
    unsigned workers;
    struct corral__udp_steer *next; /* in `loaded` */
};

/* Every program loaded in this process, so that a listen that takes over
 * another's sockets (a reload) can take them out of its array first: a
 * socket can be in one array only.  Under lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct corral__udp_steer *loaded;

static int quiet(enum libbpf_print_level level, const char *format, va_list args)
{
    (void)level;
    (void)format;
    (void)args;
    return 0;
}

/* Takes the socket with this cookie out of every other program's array. */
static void release_elsewhere(const struct corral__udp_steer *self, uint64_t cookie)
{
    for (struct corral__udp_steer *s = loaded; s != NULL; s = s->next) {
        if (s == self)
            continue;
        int fd = bpf_map__fd(s->skel->maps.socks);
        for (__u32 key = 0; key < s->workers; key++) {
            __u64 value;
            if (bpf_map_lookup_elem(fd, &key, &value) == 0 && value == cookie)
                bpf_map_delete_elem(fd, &key);
        }
    }
}

static enum quic_mode mode_of(const corral_server *server, const char **name)
{
    switch (server->wakeup_info.mode) {
    case CORRAL_WAKEUP_AUTO:
    case CORRAL_WAKEUP_ROUNDROBIN: *name = "roundrobin"; return QUIC_ROUNDROBIN;
    case CORRAL_WAKEUP_BALANCED: *name = "balanced"; return QUIC_BALANCED;
    case CORRAL_WAKEUP_AFFINITY:
        if (server->wakeup->pins_workers) {
            *name = "affinity";
            return QUIC_AFFINITY;
        }
        break;
    default: break;
    }
    *name = "hash";
    return QUIC_HASH;
}

static void configure(struct quic_bpf__bss *bss, const corral_server *server, enum quic_mode mode,
                      const struct corral_udp_quic_ids *ids)
{
    unsigned n = server->worker_count, used = corral__cpus_used(server);
    bss->mode = mode;
    bss->cid_len = ids->length;
    bss->cid_marker = ids->marker;
    bss->index_offset = ids->index_offset;
    bss->cpu_stride = used;
    /* Worker i runs on the (i % used)-th CPU (server.c). */
    for (unsigned slot = 0; mode == QUIC_AFFINITY && slot < used; slot++) {
        unsigned cpu = server->caps.cpus[slot];
        if (cpu < QUIC_MAX_CPUS) {
            bss->cpu_first[cpu] = slot + 1;
            bss->cpu_count[cpu] = (n - slot + used - 1) / used;
        }
    }
    bss->workers = n;
}

static int fail(char *why, size_t len, int err, const char *what)
{
    snprintf(why, len, "%s: %s", what, strerror(err));
    return -err;
}

/* Loads the program, puts the listen's sockets in its array and attaches
 * it to their group.  On failure writes why into `why`. */
static int attach(corral_udp *udp, const struct corral_udp_quic_ids *ids, char *why, size_t len)
{
    corral_server *server = udp->server;
    unsigned n = server->worker_count;
    if (n > QUIC_MAX_WORKERS) {
        snprintf(why, len, "more than %d workers", QUIC_MAX_WORKERS);
        return -E2BIG;
    }
    struct corral__udp_steer *steer = calloc(1, sizeof(*steer));
    if (steer == NULL)
        return fail(why, len, ENOMEM, "out of memory");
    libbpf_print_fn_t previous = libbpf_set_print(quiet);
    steer->skel = quic_bpf__open();
    int err = steer->skel == NULL ? -errno : quic_bpf__load(steer->skel);
    libbpf_set_print(previous);
    if (err != 0) {
        quic_bpf__destroy(steer->skel);
        free(steer);
        return fail(why, len, err < 0 ? -err : err, "loading the eBPF program");
    }
    steer->workers = n;
    const char *initials;
    configure(steer->skel->bss, server, mode_of(server, &initials), ids);
    int socks = bpf_map__fd(steer->skel->maps.socks);
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < n && err == 0; i++) {
        __u32 key = i;
        __u64 fd = (__u64)udp->fds[i], cookie;
        socklen_t cookie_len = sizeof(cookie);
        if (getsockopt(udp->fds[i], SOL_SOCKET, SO_COOKIE, &cookie, &cookie_len) == -1) {
            err = fail(why, len, errno, "getsockopt(SO_COOKIE)");
            break;
        }
        release_elsewhere(steer, cookie);
        if (bpf_map_update_elem(socks, &key, &fd, BPF_ANY) != 0)
            err = fail(why, len, errno,
                       errno == EBUSY ? "a socket is in another process's eBPF program"
                                      : "bpf_map_update_elem(sockets)");
    }
    int prog = bpf_program__fd(steer->skel->progs.corral_quic_steer);
    if (err == 0 &&
        setsockopt(udp->fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, &prog, sizeof(prog)) == -1)
        err = fail(why, len, errno, "setsockopt(SO_ATTACH_REUSEPORT_EBPF)");
    if (err == 0) {
        steer->next = loaded;
        loaded = steer;
    }
    pthread_mutex_unlock(&lock);
    if (err != 0) {
        quic_bpf__destroy(steer->skel);
        free(steer);
        return err;
    }
    udp->steer = steer;
    udp->steering_initials = initials;
    for (unsigned i = 0; i < n; i++)
        udp->sockets[i].quic_slot = &steer->skel->bss->slots[i];
    return 0;
}

void corral__udp_steer_attach(corral_udp *udp, const struct corral_udp_quic_ids *ids)
{
    udp->steering = udp->steered_cbpf ? "cbpf" : "hash";
    udp->steering_initials = "hash";
    udp->steering_reason[0] = '\0';
    if (udp->server->worker_count < 2) {
        udp->steering = "none";
        return;
    }
    if (ids == NULL)
        return;
    char *why = udp->steering_reason;
    size_t len = sizeof(udp->steering_reason);
    static const uint8_t zero[sizeof(ids->reserved)];
    if (ids->length < 3 || ids->length > QUIC_MAX_CID || ids->index_offset < 1 ||
        ids->index_offset + 2 > ids->length || memcmp(ids->reserved, zero, sizeof(zero)) != 0)
        snprintf(why, len, "the connection ID layout is not one it reads");
    else if (!udp->server->caps.reuseport || !udp->server->caps.ebpf)
        snprintf(why, len, "eBPF steering is unavailable (corral --probe says why)");
    else if (attach(udp, ids, why, len) == 0)
        udp->steering = "ebpf";
    if (udp->steer == NULL)
        corral__warn("udp %s: no eBPF steering (%s); steering by %s", udp->address_text, why,
                     udp->steered_cbpf ? "the classic BPF program" : "the 4-tuple hash");
}

void corral__udp_steer_free(corral_udp *udp)
{
    struct corral__udp_steer *steer = udp->steer;
    if (steer == NULL)
        return;
    pthread_mutex_lock(&lock);
    for (struct corral__udp_steer **p = &loaded; *p != NULL; p = &(*p)->next) {
        if (*p == steer) {
            *p = steer->next;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    /* The group keeps the program attached (a successor's replaced it, or
     * the sockets close with it); its array goes with the last reference. */
    quic_bpf__destroy(steer->skel);
    free(steer);
    udp->steer = NULL;
    for (unsigned i = 0; udp->sockets != NULL && i < udp->server->worker_count; i++)
        udp->sockets[i].quic_slot = NULL;
}

void corral_udp_steering(const corral_udp *udp, struct corral_udp_steering *out)
{
    *out = (struct corral_udp_steering){
        .impl = udp->steering,
        .initials = udp->steering_initials,
        .reason = udp->steering_reason,
    };
}

void corral_udp_publish_load(corral_udp_socket *sock, uint64_t connections)
{
    struct quic_slot *slot = sock->quic_slot;
    if (slot == NULL)
        return;
    __atomic_store_n(&slot->seen, __atomic_load_n(&slot->initials, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&slot->load, connections, __ATOMIC_RELAXED);
}

void corral__udp_steer_stats(const corral_udp_socket *sock, uint64_t *steered_new,
                             uint64_t *steered_owned)
{
    const struct quic_slot *slot = sock->quic_slot;
    *steered_new = slot != NULL ? __atomic_load_n(&slot->initials, __ATOMIC_RELAXED) : 0;
    *steered_owned = slot != NULL ? __atomic_load_n(&slot->owned, __ATOMIC_RELAXED) : 0;
}
