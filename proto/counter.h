/*
 * counter.h: counters that only one worker writes and any thread reads
 * (for metrics), so that counting needs no locked instruction.
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

#endif
