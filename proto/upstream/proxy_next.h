/*
 * proxy_next.h: the proxy's retry policy (proxy_next_upstream, its tries
 * and timeout) and the error-log lines about upstream failures.
 */
#ifndef CORRAL_PROTO_PROXY_NEXT_H
#define CORRAL_PROTO_PROXY_NEXT_H

#include "proto/upstream/proxy_conf.h"
#include "proto/upstream/upstream.h"

/* The PROXY_NEXT_* condition a failure of `kind` is. */
unsigned proxy_next_condition(enum proxy_error_kind kind);
/* The condition a response status is (http_500...), or 0. */
unsigned proxy_next_status_condition(unsigned status);

/* What the retry decision needs to know of a request. */
struct proxy_attempt {
    bool sent;           /* its bytes may have reached the server */
    bool idempotent;     /* its method is */
    unsigned tries;      /* servers tried so far */
    uint64_t elapsed_ms; /* since the first try began */
};

/* Whether a failure that is `condition` may go on to the next server:
 * the condition is listed, a request whose bytes left is idempotent (or
 * non_idempotent is listed), and the tries and the time are not used up. */
bool proxy_next_allowed(const struct proxy_conf *conf, unsigned condition,
                        const struct proxy_attempt *attempt);

/* Logs that `server` of `up` failed the request whose head (as
 * forwarded) is `head`, from `client`: a failure of `kind` with the close's
 * `error` (0: none known), or with a listed `status` (not 0) the next server
 * is asked:
 *   upstream app: 10.0.0.12:8000: timed out, client: 1.2.3.4, request: "GET /a"
 * at error level (a status at warn), at most one line a second per server
 * over all workers; the next line counts those left out. */
void proxy_next_log_failure(struct proxy_upstream *up, unsigned server, uint64_t now,
                            enum proxy_error_kind kind, int error, unsigned status,
                            const char *client, const char *head, size_t head_len);

#endif
