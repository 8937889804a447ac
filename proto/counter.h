/*
 * counter.h: counters that only one worker writes and any thread reads
 * (for metrics), so that counting needs no locked instruction; and
 * latency histograms built from them.
 */
#ifndef CORRAL_PROTO_COUNTER_H
#define CORRAL_PROTO_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

/* Adds one to a counter that only its worker writes (no atomic add needed). */
static inline void counter_inc(_Atomic uint64_t *counter)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Adds `n` to a counter that only its worker writes. */
static inline void counter_add(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* A latency histogram's upper bounds (le), in seconds: 0.5 ms to 30 s,
 * about 2.5 times apart, as Prometheus suggests for request latency. */
#define HISTOGRAM_BOUNDS 14
#define HISTOGRAM_BOUNDS_US                                                                        \
    {                                                                                              \
        500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000,      \
            10000000, 30000000                                                                     \
    }

/* Classes of HTTP status codes, 1xx to 5xx, for a label that stays small. */
#define STATUS_CLASSES 5

/* One worker's observations: buckets[i] counts those at most bound i and
 * above bound i - 1 (the last, those above every bound), so that the total
 * count and +Inf are one sum and always agree. */
struct histogram {
    _Atomic uint64_t buckets[HISTOGRAM_BOUNDS + 1];
    _Atomic uint64_t sum_ns;
};

/* Records one observation of `ns` nanoseconds (only its worker writes). */
static inline void histogram_observe(struct histogram *h, uint64_t ns)
{
    static const uint64_t bounds_us[HISTOGRAM_BOUNDS] = HISTOGRAM_BOUNDS_US;
    unsigned i = 0;
    while (i < HISTOGRAM_BOUNDS && ns > bounds_us[i] * 1000u)
        i++;
    counter_inc(&h->buckets[i]);
    counter_add(&h->sum_ns, ns);
}

/* The class index of `status` (0 for 1xx ... 4 for 5xx), or -1 for a code
 * outside 100..599. */
static inline int status_class(unsigned status)
{
    return status >= 100 && status < 600 ? (int)(status / 100 - 1) : -1;
}

#endif
