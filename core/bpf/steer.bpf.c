/*
 * steer.bpf.c: the sk_reuseport program that picks, for each new connection,
 * the worker whose listening socket gets it: an exact rotation, the less
 * loaded of two random workers, or the worker on the arrival CPU unless it
 * is overloaded.  Attached for select-or-migrate, so the connections queued
 * on a socket that leaves the group move to a live one.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "steer.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Key: listener index x workers + worker index. */
struct {
    __uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
    __uint(max_entries, STEER_MAX_SOCKETS);
    __type(key, __u32);
    __type(value, __u64);
} socks SEC(".maps");

/* Socket cookie -> listener index: which group a connection arrived for. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, STEER_MAX_SOCKETS);
    __type(key, __u64);
    __type(value, __u32);
} groups SEC(".maps");

/* Global data lives in a memory-mapped array (BPF_F_MMAPABLE): libcorral
 * writes the configuration before attaching, workers their slots. */
__u32 workers;
__u32 mode;
__u32 spill_x16; /* affinity: spill when load > spill_x16 / 16 x max(mean, 1) */
__u32 cpu_stride;
__u32 cpu_first[STEER_MAX_CPUS]; /* 1 + the first worker pinned to the CPU, or 0 */
__u32 cpu_count[STEER_MAX_CPUS]; /* workers pinned to the CPU */
__u32 rotation;
/* Sums over the slots, kept by whoever changes a slot (atomic adds), so that
 * the mean load costs no loop here: open connections, connections steered
 * and connections accepted. */
__u64 total_conns, total_selected, total_accepted;
struct steer_slot slots[STEER_MAX_WORKERS];

/*
 * The verifier walks every path through the program, and an inlined
 * helper again at each place it is inlined, in each state it reaches it
 * in: with every helper inlined, 58,000 instructions, 20 to 30 ms of CPU
 * at each start and reload.  The helpers called from several places, and
 * the steps of affinity's scan, are global functions (neither static nor
 * inlined, Linux 5.6), which it checks once each, on their own, for any
 * value of their scalar arguments, taking what they return for any value:
 * about 5,000 instructions.  Each is a real call when the program runs,
 * some nanoseconds, so the small helpers a choice uses once stay inlined.
 */

/* The verifier wants every index bounded where it is used; the compiler
 * drops a mask it can prove useless, so hide the value from it first. */
static __always_inline struct steer_slot *slot_of(__u32 w)
{
    asm volatile("" : "+r"(w));
    return &slots[w & (STEER_MAX_WORKERS - 1)];
}

static __always_inline __u64 queued_on(const struct steer_slot *s)
{
    __u64 selected = s->selected, accepted = s->accepted;
    return selected > accepted ? selected - accepted : 0;
}

/* Whether connections have waited on the worker, and it has accepted none,
 * for STEER_STALLED_NS. */
static __always_inline int stalled(const struct steer_slot *s)
{
    __u64 since = s->seen_ns > s->queued_ns ? s->seen_ns : s->queued_ns;
    return queued_on(s) > 0 && bpf_ktime_get_ns() - since > STEER_STALLED_NS;
}

/* How long the worker has been in one loop iteration, in units of
 * 1 << STEER_BUSY_SHIFT ns, if that is longer than STEER_BUSY_NS; else 0. */
static __always_inline __u64 busy_for(const struct steer_slot *s)
{
    __u32 at = s->busy_at;
    __s32 age = (__s32)(STEER_BUSY_STAMP(bpf_ktime_get_ns()) - at);
    return at != 0 && age > (__s32)(STEER_BUSY_NS >> STEER_BUSY_SHIFT) ? (__u64)age : 0;
}

/* How long the worker has been stalled or busy, in the same units; 0 if it
 * is neither. */
static __always_inline __u64 late_for(const struct steer_slot *s)
{
    __u64 busy = busy_for(s);
    if (!stalled(s))
        return busy;
    __u64 since = s->seen_ns > s->queued_ns ? s->seen_ns : s->queued_ns;
    __u64 stall = (bpf_ktime_get_ns() - since) >> STEER_BUSY_SHIFT;
    return stall > busy ? stall : busy;
}

/* Connections steered here but not accepted yet are load too. */
__noinline __u64 plain_load_of(__u32 w)
{
    struct steer_slot *s = slot_of(w);
    return s->conns + queued_on(s);
}

/* For choosing between workers: a stalled or busy one weighs more than
 * any other, and more the longer it has been so (on a loaded machine many
 * workers are a little late; the one stuck in a long request is the one
 * to pass by). */
static __always_inline __u64 load_of(__u32 w)
{
    __u64 load = plain_load_of(w);
    struct steer_slot *s = slot_of(w);
    __u64 late = late_for(s);
    if (late > 0)
        return STEER_STALLED_LOAD + (late << 20) + load;
    return load * 2 + (s->busy_at != 0);
}

static __always_inline int accepting(__u32 w)
{
    return slot_of(w)->paused == 0;
}

/* Whether the worker is in a loop iteration rather than waiting for
 * events. */
__noinline int busy(__u32 w)
{
    return slot_of(w)->busy_at != 0;
}

/* The next worker in turn that accepts and is not stalled, or n if the
 * next few all are (a paused or stalled worker's turn goes to the one
 * after it). */
__noinline __u32 next_in_turn(__u32 n)
{
    __u32 start = __sync_fetch_and_add(&rotation, 1);
    for (__u32 k = 0; k < 4; k++) {
        __u32 w = (start + k) % n;
        if (accepting(w) && !stalled(slot_of(w)))
            return w;
    }
    return n;
}

/* Of workers a and b, the less loaded one that accepts (a on a tie), or n
 * if neither does. */
static __always_inline __u32 less_loaded(__u32 a, __u32 b, __u32 n)
{
    int ok_a = a < n && accepting(a), ok_b = b < n && accepting(b);
    if (ok_a && ok_b)
        return load_of(b) < load_of(a) ? b : a;
    return ok_a ? a : ok_b ? b : n;
}

__noinline __u32 less_loaded_of_two(__u32 n)
{
    if (n == 1)
        return accepting(0) ? 0 : n;
    /* Two different workers: drawing one twice would hand a stalled
     * worker one connection in n^2 whatever its load. */
    __u32 a = bpf_get_prandom_u32() % n;
    __u32 b = (a + 1 + bpf_get_prandom_u32() % (n - 1)) % n;
    __u32 w = less_loaded(a, b, n);
    return w < n ? w : next_in_turn(n);
}

/* A random worker pinned to another CPU than the one at `home` (an index
 * into the stride of CPUs): worker w runs on CPU w % cpu_stride. */
static __always_inline __u32 elsewhere(__u32 n, __u32 home)
{
    __u32 stride = cpu_stride;
    __u32 cpu = (home + 1 + bpf_get_prandom_u32() % (stride - 1)) % stride;
    __u32 on_it = (n - cpu + stride - 1) / stride;
    return cpu + stride * (bpf_get_prandom_u32() % on_it);
}

/* The less loaded of two workers on other CPUs: the arrival CPU's workers
 * were just found overloaded together. */
__noinline __u32 spill_from(__u32 n, __u32 home)
{
    if (cpu_stride < 2 || cpu_stride > n || home >= cpu_stride)
        return less_loaded_of_two(n);
    __u32 stride = cpu_stride, a = elsewhere(n, home), b = elsewhere(n, home);
    if (b == a) /* two different workers, where that CPU has two */
        b = a + stride < n ? a + stride : a % stride;
    __u32 w = less_loaded(a, b, n);
    return w < n ? w : less_loaded_of_two(n);
}

/* 1 if worker w accepts and its weight is below `least`, else 0: the
 * scan in on_cpu() takes it with a mask, not a branch. */
__noinline int lighter(__u32 w, __u64 weight, __u64 least)
{
    return accepting(w) && weight < least;
}

/* Counts a connection kept on worker w's CPU, or spilled from it.  On its
 * own: a worker index used for an address in on_cpu() would have the
 * verifier tell the scan's paths apart by the worker each found. */
__noinline int count_locality(__u32 w, int spilled)
{
    struct steer_slot *s = slot_of(w);
    if (spilled)
        __sync_fetch_and_add(&s->spills, 1);
    else
        __sync_fetch_and_add(&s->local, 1);
    return 0;
}

/* affinity, among the m workers pinned to the arrival CPU, the first of
 * them `first`.  The verifier walks the scan's loop turn by turn, up to
 * STEER_CPU_SCAN of them (Linux 5.14 has no bpf_loop()), and inside a
 * loop it keeps apart states whose values differ at all: each turn has
 * one path, its choice made by global functions and applied with a mask.
 * m is an argument for the same reason: computed here, its value
 * STEER_CPU_SCAN would be a second case to walk the whole loop for. */
__noinline __u32 on_cpu(__u32 n, __u32 first, __u32 m)
{
    /* The CPU's workers: their load together, weighed against their share
     * of the whole below, and the least loaded of them that accepts (one
     * of them running ahead of its neighbours would be the busiest),
     * looked at from a random one on, so that a tie goes to any of them.
     * By plain load: on a CPU crowded by a burst most of its workers are
     * late, and the one late the shortest time would get all of it; one
     * that stays stalled builds a queue, which is load. */
    __u32 from = bpf_get_prandom_u32() % m;
    __u64 load = 0, least = ~0ull;
    __u32 local = n;
    for (__u32 k = 0; k < STEER_CPU_SCAN && k < m; k++) {
        __u32 w = first + cpu_stride * ((from + k) % m);
        if (w >= n)
            break;
        __u64 plain = plain_load_of(w);
        load += plain;
        /* A tie goes to one waiting for events, which the connection wakes. */
        __u64 weight = plain * 2 + busy(w);
        __u64 take = -(__u64)lighter(w, weight, least); /* all ones or 0 */
        least = (weight & take) | (least & ~take);
        local = (w & (__u32)take) | (local & ~(__u32)take);
    }
    if (local >= n)
        return less_loaded_of_two(n);
    __u64 selected = total_selected, accepted = total_accepted;
    __u64 sum = total_conns + (selected > accepted ? selected - accepted : 0);
    /* Spills when the CPU's load is above factor x its share, and by more
     * than one connection: with a handful of connections a difference of
     * one is noise, and spilling on it would give up locality for
     * nothing.  The CPU's, not the worker's: a margin for each of several
     * workers on a CPU would let them all run ahead of the rest at once.
     * The plain load: a worker late by a few ms on a busy machine is no
     * reason to give up locality. */
    __u64 share = sum * m; /* x n */
    if (load * n * 16 <= (__u64)spill_x16 * share || load * n <= share + n) {
        count_locality(local, 0);
        return local;
    }
    count_locality(local, 1);
    return spill_from(n, first);
}

static __always_inline __u32 on_arrival_cpu(__u32 n)
{
    __u32 cpu = bpf_get_smp_processor_id();
    asm volatile("" : "+r"(cpu));
    cpu &= STEER_MAX_CPUS - 1;
    __u32 first = cpu_first[cpu], count = cpu_count[cpu];
    if (first == 0 || count == 0)
        return next_in_turn(n); /* nobody on this CPU */
    return on_cpu(n, first - 1, count < STEER_CPU_SCAN ? count : STEER_CPU_SCAN);
}

SEC("sk_reuseport/migrate")
int corral_steer(struct sk_reuseport_md *ctx)
{
    __u32 n = workers;
    if (n == 0 || n > STEER_MAX_WORKERS || !ctx->sk)
        return SK_PASS; /* not configured: the kernel's hash */
    __u64 cookie = bpf_get_socket_cookie(ctx->sk);
    __u32 *group = bpf_map_lookup_elem(&groups, &cookie);
    if (!group)
        return SK_PASS;

    __u32 w;
    if (mode == STEER_BALANCED)
        w = less_loaded_of_two(n);
    else if (mode == STEER_AFFINITY)
        w = on_arrival_cpu(n);
    else
        w = next_in_turn(n);
    if (w >= n)
        return SK_PASS; /* nobody accepts: hash, the connection waits in a queue */
    __u32 key = *group * n + w;
    /* A socket that left the group (or is leaving, when this is a
     * migration) is no longer in the array: the kernel then hashes among
     * the live ones. */
    if (bpf_sk_select_reuseport(ctx, &socks, &key, 0) == 0) {
        struct steer_slot *s = slot_of(w);
        if (queued_on(s) == 0)
            s->queued_ns = bpf_ktime_get_ns();
        __sync_fetch_and_add(&s->selected, 1);
        __sync_fetch_and_add(&total_selected, 1);
    }
    return SK_PASS;
}
