/*
 * steer.h: what the eBPF steering program (steer.bpf.c) and libcorral
 * (wakeup_ebpf.c) share: limits, modes and the per-worker slot that workers
 * publish their load in and the program counts its choices in.
 */
#ifndef CORRAL_BPF_STEER_H
#define CORRAL_BPF_STEER_H

#include <linux/types.h>

#define STEER_MAX_WORKERS 1024 /* as many as a daemon may run */
#define STEER_MAX_CPUS    1024 /* CORRAL_MAX_CPUS */
#define STEER_MAX_SOCKETS 8192 /* listeners x workers */

enum steer_mode {
    STEER_ROUNDROBIN = 1,
    STEER_BALANCED = 2,
    STEER_AFFINITY = 3,
};

/*
 * One per worker, in a memory-mapped array: the worker writes its fields
 * with plain stores (no system call), the program adds to its own fields
 * atomically.  128 bytes, so two workers never share a cache line (nor
 * the adjacent line the CPU may fetch with it).  `accepted` is also added
 * to by other workers (balanced), atomically.
 */
struct steer_slot {
    __u64 conns;     /* worker: its open connections */
    __u64 accepted;  /* worker: connections taken off its queue (re-based on drain) */
    __u32 paused;    /* worker: 1 while it does not accept (at its limit, stopping) */
    __u32 busy_at;   /* worker: when its loop last woke with events, 0 while it waits */
    __u64 selected;  /* program: connections steered to this worker */
    __u64 local;     /* program (affinity): kept on their arrival CPU, here */
    __u64 spills;    /* program (affinity): arrived on this worker's CPU, sent elsewhere */
    __u64 seen_ns;   /* worker: CLOCK_MONOTONIC of its last accept or drain */
    __u64 queued_ns; /* program: when a connection was steered to its empty queue */
    __u64 taken;     /* worker (balanced): connections it took off other workers' queues */
    __u64 pad[7];
};

/* A worker that has had connections queued, and accepted none, for this
 * long is stalled (a long request, a page-fault storm): it is chosen only
 * if every other worker is too.  Longer than a wakeup takes, far shorter
 * than a slow request. */
#define STEER_STALLED_NS   (2 * 1000 * 1000ull)
#define STEER_STALLED_LOAD (1ull << 32)

/* A worker whose loop has been running one iteration for this long (a
 * slow request, a blocking call, its thread preempted) will not see a new
 * connection before that ends: balanced passes it by, as a stalled one,
 * before any connection waits on it.  busy_at is CLOCK_MONOTONIC in units
 * of 1024 ns, cut to 32 bits (it wraps every 73 minutes; differences are
 * taken modulo 2^32), never 0 while busy. */
#define STEER_BUSY_NS        (1000 * 1000ull)
#define STEER_BUSY_SHIFT     10
#define STEER_BUSY_STAMP(ns) ((__u32)((ns) >> STEER_BUSY_SHIFT) | 1u)

/* affinity: the arrival CPU's workers whose load is weighed against their
 * share; on a CPU with more, the first this many stand for them all. */
#define STEER_CPU_SCAN 64

/* balanced: a worker about to wait for events takes the connections that
 * have been queued this long on another worker's socket, which has not
 * taken them (it is in a long request, or its thread is not running).
 * About what a woken idle worker takes to reach accept() when it gets a
 * CPU at once; far shorter than a slow request.  Taking one too early
 * costs the owner a wakeup that finds nothing, counted as wasted. */
#define STEER_TAKE_NS (50 * 1000ull)

#endif /* CORRAL_BPF_STEER_H */
