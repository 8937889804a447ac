/*
 * auth_jwt_fetch.c: JWK sets fetched by subrequest (auth_jwt_fetch.h):
 * the shared, reference-counted sets, the cache of one per source, and
 * the held request while its fetch runs.
 */
#include "proto/policy/auth_jwt_fetch.h"

#include "proto/http/hold.h"
#include "proto/http/site.h"
#include "proto/http/subrequest.h"
#include "proto/policy/add_header.h"
#include "proto/policy/jwt.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct auth_jwt_keys {
    atomic_uint refs;
    struct jwks *set;
};

struct auth_jwt_key_source {
    char *uri;
    size_t uri_len;
    pthread_mutex_t lock; /* the workers share the cache */
    struct auth_jwt_keys *cached;
    uint64_t expires_ms;
};

/* A request's fetch, in its context slot. */
struct fetch {
    struct http_hold hold;
    struct subrequest *sr;
    const struct auth_jwt_key_source *src;
    uint32_t cache_ms;
    router_phase_fn at;
    unsigned slot;
    struct exchange *ex;
    bool done;
    struct auth_jwt_keys *keys; /* NULL: the fetch failed */
};

struct auth_jwt_key_source *auth_jwt_fetch_source_new(const char *uri)
{
    struct auth_jwt_key_source *src = calloc(1, sizeof(*src));
    if (src == NULL || (src->uri = strdup(uri)) == NULL) {
        free(src);
        return NULL;
    }
    src->uri_len = strlen(uri);
    pthread_mutex_init(&src->lock, NULL);
    return src;
}

void auth_jwt_fetch_source_free(struct auth_jwt_key_source *src)
{
    if (src == NULL)
        return;
    auth_jwt_fetch_put(src->cached);
    pthread_mutex_destroy(&src->lock);
    free(src->uri);
    free(src);
}

const char *auth_jwt_fetch_source_uri(const struct auth_jwt_key_source *src)
{
    return src->uri;
}

const struct jwks *auth_jwt_fetch_set(const struct auth_jwt_keys *keys)
{
    return keys->set;
}

void auth_jwt_fetch_put(struct auth_jwt_keys *keys)
{
    if (keys == NULL || atomic_fetch_sub(&keys->refs, 1) != 1)
        return;
    jwks_free(keys->set);
    free(keys);
}

struct auth_jwt_keys *auth_jwt_fetch_cached(struct auth_jwt_key_source *src, uint64_t now_ms)
{
    pthread_mutex_lock(&src->lock);
    struct auth_jwt_keys *keys =
        src->cached != NULL && now_ms < src->expires_ms ? src->cached : NULL;
    if (keys != NULL)
        atomic_fetch_add(&keys->refs, 1);
    pthread_mutex_unlock(&src->lock);
    return keys;
}

/* Keeps `keys` as `src`'s set until `expires_ms`. */
static void cache_put(struct auth_jwt_key_source *src, struct auth_jwt_keys *keys,
                      uint64_t expires_ms)
{
    atomic_fetch_add(&keys->refs, 1);
    pthread_mutex_lock(&src->lock);
    struct auth_jwt_keys *old = src->cached;
    src->cached = keys;
    src->expires_ms = expires_ms;
    pthread_mutex_unlock(&src->lock);
    auth_jwt_fetch_put(old);
}

static void fetch_free(struct fetch *f)
{
    subrequest_free(f->sr);
    f->sr = NULL;
    auth_jwt_fetch_put(f->keys);
    f->keys = NULL;
}

/* The set from a 200 whose body is a JWK set; NULL, logged, otherwise. */
static struct auth_jwt_keys *parse(struct fetch *f)
{
    size_t len;
    const char *body = subrequest_body(f->sr, &len);
    unsigned status = subrequest_status(f->sr);
    char message[256] = "";
    struct jwks *set = NULL;
    if (status != 200)
        snprintf(message, sizeof(message), "answered %u", status);
    else if (body == NULL)
        snprintf(message, sizeof(message), "a key set over %u bytes", JWKS_FILE_MAX);
    else if (jwks_parse(f->src->uri, body, len, &set, message, sizeof(message)) != 0)
        set = NULL;
    struct auth_jwt_keys *keys = set != NULL ? calloc(1, sizeof(*keys)) : NULL;
    if (keys == NULL) {
        jwks_free(set);
        corral_log(CORRAL_LOG_ERROR, "auth_jwt_key_request %s: %s", f->src->uri,
                   message[0] != '\0' ? message : "out of memory");
        return NULL;
    }
    atomic_init(&keys->refs, 1);
    keys->set = set;
    return keys;
}

static void on_done(struct subrequest *sr, void *arg)
{
    (void)sr;
    struct fetch *f = arg;
    f->keys = parse(f);
    if (f->keys != NULL && f->cache_ms > 0)
        cache_put((struct auth_jwt_key_source *)(uintptr_t)f->src, f->keys,
                  corral_monotonic_ns() / 1000000 + f->cache_ms);
    subrequest_free(f->sr);
    f->sr = NULL;
    f->done = true;
    if (!hold_resume(&f->hold, f->ex, f->at, ROUTER_ACCESS)) {
        fetch_free(f); /* the exchange ended meanwhile: release left it */
        free(f);
    }
}

/* The held request cannot wait on: answered as the router answers. */
static void give_up(struct exchange *ex, unsigned status)
{
    add_header_respond_error(ex, NULL, ex->loc->add_headers, status);
}

int auth_jwt_fetch_start(struct router_walk *w, struct auth_jwt_key_source *src, uint32_t cache_ms,
                         unsigned slot, router_phase_fn at)
{
    struct exchange *ex = w->ex;
    struct fetch *f = exchange_ctx(ex, slot);
    if (f == NULL) {
        f = calloc(1, sizeof(*f));
        if (f == NULL)
            return 500;
        exchange_set_ctx(ex, slot, f);
    }
    fetch_free(f);
    *f = (struct fetch){
        .hold = f->hold, .src = src, .cache_ms = cache_ms, .at = at, .slot = slot, .ex = ex};
    int held = hold_begin(&f->hold, w, give_up);
    if (held != ROUTER_DONE)
        return held;
    f->sr = subrequest_start(ex, &f->hold.req, src->uri, src->uri_len, JWKS_FILE_MAX, on_done, f);
    if (f->sr == NULL) {
        hold_release(&f->hold);
        return 500;
    }
    return ROUTER_DONE;
}

bool auth_jwt_fetch_result(struct exchange *ex, unsigned slot,
                           const struct auth_jwt_key_source *src, struct auth_jwt_keys **keys)
{
    struct fetch *f = exchange_ctx(ex, slot);
    if (f == NULL || !f->done || f->src != src)
        return false;
    *keys = f->keys;
    if (f->keys != NULL)
        atomic_fetch_add(&f->keys->refs, 1);
    return true;
}

void auth_jwt_fetch_release(struct exchange *ex, unsigned slot)
{
    struct fetch *f = exchange_ctx(ex, slot);
    if (f == NULL)
        return;
    exchange_set_ctx(ex, slot, NULL);
    fetch_free(f);
    if (hold_release(&f->hold))
        free(f); /* else on_done() frees it once the walk is back */
}
