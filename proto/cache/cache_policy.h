/*
 * cache_policy.h: whether a response may be stored by a shared cache and
 * for how long (RFC 9111 3 and 4.2): Cache-Control, Expires, Date, Age,
 * Set-Cookie, Vary and the request's Authorization, with the location's
 * proxy_cache_valid as the lifetime of a response that gives none.  No
 * heuristic freshness.  Pure: no sockets, no clock of its own.
 */
#ifndef CORRAL_PROTO_CACHE_POLICY_H
#define CORRAL_PROTO_CACHE_POLICY_H

#include "proto/http/http.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* proxy_ignore_headers: response fields that then decide nothing. */
enum {
    CACHE_IGNORE_CACHE_CONTROL = 1u << 0,
    CACHE_IGNORE_EXPIRES = 1u << 1,
    CACHE_IGNORE_SET_COOKIE = 1u << 2,
    CACHE_IGNORE_VARY = 1u << 3,
    CACHE_IGNORE_X_ACCEL_EXPIRES = 1u << 4, /* accepted; corral reads none */
    CACHE_IGNORE_X_ACCEL = 1u << 5,         /* X-Accel-*: accepted, none read */
};

/* What the decision reads. */
struct cache_policy_in {
    unsigned status;
    const char *lines; /* the response's header lines, each ending in CRLF */
    size_t len;
    int64_t now;        /* wall-clock seconds when the response arrived */
    int64_t valid;      /* proxy_cache_valid's time for `status`, seconds; -1: none */
    bool authorization; /* the request carried Authorization */
    unsigned ignore;    /* CACHE_IGNORE_* */
};

/* Why a response is not stored. */
enum cache_refusal {
    CACHE_STORE = 0,
    CACHE_NO_STORE,      /* Cache-Control: no-store */
    CACHE_PRIVATE,       /* private: for one user's cache only */
    CACHE_NO_CACHE,      /* no-cache: corral keeps none to revalidate each time */
    CACHE_SET_COOKIE,    /* a response setting a cookie is one client's */
    CACHE_AUTHORIZATION, /* the request was authenticated, the response not public */
    CACHE_VARY_ANY,      /* Vary: *: no request ever matches */
    CACHE_STATUS,        /* a status that is not stored */
    CACHE_NO_LIFETIME,   /* no explicit freshness and no proxy_cache_valid */
    CACHE_EXPIRED,       /* already stale when it arrived */
};

struct cache_policy {
    enum cache_refusal refusal;
    int64_t initial_age;  /* RFC 9111 4.2.3's corrected initial age, seconds */
    int64_t expires;      /* wall-clock second from which it is stale */
    uint32_t swr, sie;    /* stale-while-revalidate, stale-if-error: seconds */
    bool must_revalidate; /* must-revalidate, proxy-revalidate or s-maxage */
    struct http_str vary; /* Vary's value (one field), or empty: in `lines` */
};

/* Decides for `in`.  Allocates nothing; `out->vary` points into
 * in->lines. */
void cache_policy_decide(const struct cache_policy_in *in, struct cache_policy *out);

/* The Age to send with a stored response served at `now`: its initial age
 * plus its time in the cache (RFC 9111 4.2.3), never negative. */
static inline int64_t cache_policy_age(int64_t initial_age, int64_t stored, int64_t now)
{
    int64_t age = initial_age + (now > stored ? now - stored : 0);
    return age > 0 ? age : 0;
}

/* Reads the delta-seconds after "NAME=" in a Cache-Control value's
 * directive `name` into *out (a quoted value too, as RFC 9111 1.2.2
 * asks recipients to accept; past 2^31 it is 2^31).  False: absent or
 * malformed. */
bool cache_policy_seconds(struct http_str value, const char *name, uint32_t *out);

#endif
