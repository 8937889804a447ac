/*
 * trace_context.h: W3C Trace Context (https://www.w3.org/TR/trace-context/):
 * the traceparent header (version 00), the tracestate header's syntax,
 * and the ids in hex.  A parser that allocates nothing: the caller owns
 * every buffer, and a malformed header is refused whole.
 */
#ifndef CORRAL_PROTO_TRACE_CONTEXT_H
#define CORRAL_PROTO_TRACE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A traceparent: "00-" 32 hex "-" 16 hex "-" 2 hex. */
#define TRACEPARENT_LEN 55
/* The longest tracestate carried on; a longer one is dropped, as the
 * specification lets a vendor do (section 3.3.1.5). */
#define TRACESTATE_MAX 512
/* The most list members a tracestate may have (section 3.3.1.1). */
#define TRACESTATE_MEMBERS_MAX 32

struct trace_context {
    uint8_t trace_id[16];
    uint8_t span_id[8]; /* the parent's span, for an incoming header */
    uint8_t flags;      /* bit 0: sampled */
};
#define TRACE_FLAG_SAMPLED 0x01

/* Parses `len` bytes of a traceparent value, already trimmed of spaces,
 * strictly: version 00 only, exactly 55 characters, lowercase hex, a
 * trace id and a parent id that are not all zero.  Returns true and
 * fills *out, or false (then *out is unspecified). */
bool traceparent_parse(const char *text, size_t len, struct trace_context *out);

/* Writes the traceparent of `ctx` (version 00) and a NUL into `out`. */
void traceparent_format(const struct trace_context *ctx, char out[TRACEPARENT_LEN + 1]);

/* Whether `len` bytes are a tracestate to carry on: the list syntax of
 * section 3.3.1 (keys, values, at most 32 members, no key twice; empty
 * members and spaces around them allowed), at most TRACESTATE_MAX bytes. */
bool tracestate_valid(const char *text, size_t len);

/* Writes `n` bytes as 2n lowercase hex digits and a NUL into `out`. */
void trace_hex(const uint8_t *bytes, size_t n, char *out);

#endif
