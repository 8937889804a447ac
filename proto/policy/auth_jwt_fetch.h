/*
 * auth_jwt_fetch.h: auth_jwt_key_request, NGINX Plus's: the JWK set a
 * location's tokens are checked against, fetched by a subrequest
 * (subrequest.h) while the request is held (hold.h), and kept for
 * auth_jwt_key_cache's time, shared by the workers.
 */
#ifndef CORRAL_PROTO_AUTH_JWT_FETCH_H
#define CORRAL_PROTO_AUTH_JWT_FETCH_H

#include "proto/http/router.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jwks;

/* A fetched set, shared by the requests that use it and the cache. */
struct auth_jwt_keys;

/* One auth_jwt_key_request line: its URI and the set kept from it.  The
 * config owns it (auth_jwt_fetch_source_free()). */
struct auth_jwt_key_source;

struct auth_jwt_key_source *auth_jwt_fetch_source_new(const char *uri);
void auth_jwt_fetch_source_free(struct auth_jwt_key_source *src);
const char *auth_jwt_fetch_source_uri(const struct auth_jwt_key_source *src);

/* The set kept from `src` while it is fresh at `now_ms` (a reference:
 * auth_jwt_fetch_put() it), or NULL. */
struct auth_jwt_keys *auth_jwt_fetch_cached(struct auth_jwt_key_source *src, uint64_t now_ms);

const struct jwks *auth_jwt_fetch_set(const struct auth_jwt_keys *keys);
void auth_jwt_fetch_put(struct auth_jwt_keys *keys);

/* Holds the walk and asks `src`'s URI for its set, which is kept for
 * `cache_ms` (0: not kept) when it parses; the walk then goes on at the
 * step `at` of the access phase.  The exchange's state is in context
 * slot `slot`.  Returns ROUTER_DONE, or 500. */
int auth_jwt_fetch_start(struct router_walk *w, struct auth_jwt_key_source *src, uint32_t cache_ms,
                         unsigned slot, router_phase_fn at);

/* Once the walk came back: whether a fetch from `src` is over for the
 * exchange (false: none was made), and then its set in *keys (a
 * reference), or NULL when it failed (logged). */
bool auth_jwt_fetch_result(struct exchange *ex, unsigned slot,
                           const struct auth_jwt_key_source *src, struct auth_jwt_keys **keys);

/* Lets go of the exchange's fetch: the module's release. */
void auth_jwt_fetch_release(struct exchange *ex, unsigned slot);

#endif
