/*
 * trace_sample.h: the sampling decision of the tracing module
 * (otel_sampler): a ratio of traces by their id, as OpenTelemetry's
 * TraceIdRatioBased sampler, optionally led by the parent's sampled flag
 * (ParentBased).  Deterministic: every hop that samples at the same ratio
 * keeps the same traces.
 */
#ifndef CORRAL_PROTO_TRACE_SAMPLE_H
#define CORRAL_PROTO_TRACE_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

struct trace_sampler {
    /* A trace whose id's last 8 bytes (big-endian) are below this is
     * sampled; `all` samples every one (ratio 1). */
    uint64_t threshold;
    bool all;
    /* With an incoming traceparent, its sampled flag decides instead. */
    bool parent_based;
};

/* The sampler for `ratio` in [0, 1]. */
static inline struct trace_sampler trace_sampler_ratio(double ratio, bool parent_based)
{
    struct trace_sampler s = {.parent_based = parent_based};
    if (ratio >= 1.0)
        s.all = true;
    else if (ratio > 0.0)
        s.threshold = (uint64_t)(ratio * 18446744073709551616.0); /* ratio * 2^64 < 2^64 */
    return s;
}

/* Whether to record the trace `trace_id`, given whether it came with a
 * parent (`has_parent`) and that parent's sampled flag. */
static inline bool trace_sample(const struct trace_sampler *s, const uint8_t trace_id[16],
                                bool has_parent, bool parent_sampled)
{
    if (s->parent_based && has_parent)
        return parent_sampled;
    if (s->all)
        return true;
    uint64_t low = 0;
    for (int i = 8; i < 16; i++)
        low = low << 8 | trace_id[i];
    return low < s->threshold;
}

#endif
