/*
 * stub_status.h: `stub_status;` in a location, nginx's status page in
 * nginx's text format, from the daemon's per-worker counters, which the
 * daemon hands over as a function (stub_status_set_source()), so that
 * the module names nothing of cmd/.
 */
#ifndef CORRAL_PROTO_STUB_STATUS_H
#define CORRAL_PROTO_STUB_STATUS_H

#include "conf/directive.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Its struct per level: `on` where a location writes stub_status. */
struct stub_status_conf {
    bool on;
};

/* What the page shows, nginx's names. */
struct stub_status_counts {
    uint64_t active;   /* open client connections */
    uint64_t accepts;  /* client connections accepted */
    uint64_t handled;  /* of those, handled (not closed at once for want of resources) */
    uint64_t requests; /* requests answered */
    uint64_t reading, writing, waiting;
};

/* Fills *out; false when the counts are not there yet (a 503). */
typedef bool (*stub_status_source_fn)(struct stub_status_counts *out);

/* The daemon's counts, set once before the first exchange; NULL (the
 * default): the page answers 503. */
void stub_status_set_source(stub_status_source_fn fn);

/* Writes the page for `c` into `buf` (`cap` bytes, NUL-terminated when
 * it fits): nginx's format, byte for byte.  Returns its length. */
size_t stub_status_format(const struct stub_status_counts *c, char *buf, size_t cap);

struct http_module;
extern struct http_module stub_status_module;

#endif
