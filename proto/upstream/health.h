/*
 * health.h: active health checks of an upstream's servers (health_check):
 * one loop probes each server for every worker, and marks it down or up
 * in the state all workers read.
 */
#ifndef CORRAL_PROTO_HEALTH_H
#define CORRAL_PROTO_HEALTH_H

#include "proto/upstream/upstream.h"

/* Starts probing each server of `up` on `loop` (the daemon's main loop),
 * if its health_check is on; a no-op otherwise.  Loop thread only.
 * Returns 0 or -ENOMEM. */
int health_start(struct proxy_upstream *up, corral_loop *loop);

/* Stops the probes (a probe in flight is closed and lets go of `up`).
 * From the loop's thread; a no-op when none run.  upstream_free()
 * calls it. */
void health_stop(struct proxy_upstream *up);

/* Whether server `index` of `up` takes requests at `now` (the loops'
 * clock, corral_monotonic_ns() in ms): not `down` in the config, an
 * address of its own (a `resolve` slot filled and not draining), not
 * failed by the health checks, and not kept out by passive failures
 * (max_fails) on any worker.  Any thread: what it reads may be a moment
 * old. */
bool health_server_up(const struct proxy_upstream *up, size_t index, uint64_t now);

/* Whether `status` passes the check's `match` (by default 2xx and 3xx). */
bool health_match(const struct proxy_health_conf *conf, unsigned status);

/* Reads the status line a probe got (peer bytes, `len` of them so far):
 * 1 and *status when it is whole and valid, 0 while it may still come,
 * -1 for anything else (a line longer than 512 bytes included). */
int health_status_line(const char *data, size_t len, unsigned *status);

/* Gives `up` its own copies of `conf`'s send and expect, the expect
 * compiled when it is a regex.  Returns 0, -EINVAL for a bad regex
 * (logged), or -ENOMEM. */
int health_expect_copy(struct proxy_upstream *up, const struct proxy_health_conf *conf);
void health_expect_free(struct proxy_upstream *up);

/* Reads a send/expect check's answer so far (peer bytes, `len` of
 * them): 1 when it has what `up` expects, 0 while it may still come
 * (fewer than HEALTH_EXPECT_MAX bytes), -1 when it will not. */
int health_expect_answer(const struct proxy_upstream *up, const char *data, size_t len);

#endif
