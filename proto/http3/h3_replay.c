/*
 * h3_replay.c: the record of 0-RTT ClientHellos that GnuTLS's
 * anti-replay consults, one per listen and shared by its workers' endpoints,
 * so that a ClientHello replayed to another worker (a spoofed source
 * port hashes anywhere) is found as surely as one replayed to the same.
 * A bounded table of SHA-256 digests of GnuTLS's keys under a mutex,
 * taken only for a ClientHello with early data.  It also holds each
 * worker's GnuTLS anti-replay object, made with the store before any
 * ticket is issued: GnuTLS refuses early data from a ticket older than
 * its object's record, and an endpoint is made at its worker's first
 * datagram, often after the ticket another worker issued.
 */
#include "proto/http3/http3_internal.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A ClientHello with early data, seen. */
struct replay_entry {
    int64_t expires; /* 0: free */
    uint8_t digest[32];
};

#define REPLAY_SLOTS 4096 /* a power of two */

/* What GnuTLS (3.6.5 on) puts before the binder in its key: the window's
 * start, seconds (8 bytes) and nanoseconds (4). */
#define REPLAY_KEY_PREFIX 12

struct h3_replay_store {
    pthread_mutex_t lock;
    unsigned workers;
    gnutls_anti_replay_t *anti_replay; /* per worker */
    struct replay_entry entries[REPLAY_SLOTS];
};

/* GnuTLS asks whether a ClientHello with early data was seen within its
 * window: its key is filed until `exp_time`, and a key already there (a
 * replay) refuses the early data (the handshake goes on, its requests
 * wait for it).  A table full of live entries refuses too: early data is
 * an optimisation, safety first.  `ptr`: the endpoint, whose replays are
 * counted. */
static int replay_add(void *ptr, time_t exp_time, const gnutls_datum_t *key,
                      const gnutls_datum_t *data)
{
    (void)data;
    struct h3_endpoint *ep = ptr;
    if (ep == NULL || ep->replay_store == NULL)
        return GNUTLS_E_DB_ERROR;
    struct h3_replay_store *store = ep->replay_store;
    /* GnuTLS's key is its object's window start (12 bytes) and then the
     * ClientHello's PSK binder: the workers' objects began apart, so the
     * binder alone is the key here.  A match is then more likely, never
     * less: a replay across windows is refused too. */
    if (key->size <= REPLAY_KEY_PREFIX)
        return GNUTLS_E_DB_ERROR;
    uint8_t digest[32];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, key->data + REPLAY_KEY_PREFIX,
                         key->size - REPLAY_KEY_PREFIX, digest) != 0)
        return GNUTLS_E_DB_ERROR;
    int64_t now = (int64_t)time(NULL);
    size_t slot = ((size_t)digest[0] << 8 | digest[1]) & (REPLAY_SLOTS - 1);
    int rc = GNUTLS_E_DB_ERROR;
    pthread_mutex_lock(&store->lock);
    struct replay_entry *free_slot = NULL;
    for (size_t i = 0; i < REPLAY_SLOTS; i++) {
        struct replay_entry *e = &store->entries[(slot + i) & (REPLAY_SLOTS - 1)];
        if (e->expires != 0 && e->expires < now)
            e->expires = 0; /* out of the window: a replay of it is refused by its age */
        if (e->expires == 0) {
            if (free_slot == NULL)
                free_slot = e;
            continue;
        }
        if (memcmp(e->digest, digest, sizeof(digest)) == 0) {
            rc = GNUTLS_E_DB_ENTRY_EXISTS;
            break;
        }
    }
    if (rc != GNUTLS_E_DB_ENTRY_EXISTS && free_slot != NULL) {
        free_slot->expires = (int64_t)exp_time > 0 ? (int64_t)exp_time : 1;
        memcpy(free_slot->digest, digest, sizeof(digest));
        rc = 0;
    }
    pthread_mutex_unlock(&store->lock);
    if (rc == GNUTLS_E_DB_ENTRY_EXISTS)
        ep->count[H3_REPLAYS]++;
    return rc;
}

int h3_replay_store_new(unsigned workers, struct h3_replay_store **out)
{
    *out = NULL;
    if (workers == 0)
        return -EINVAL;
    struct h3_replay_store *store = calloc(1, sizeof(*store));
    if (store == NULL)
        return -ENOMEM;
    store->anti_replay = calloc(workers, sizeof(*store->anti_replay));
    if (store->anti_replay == NULL || pthread_mutex_init(&store->lock, NULL) != 0) {
        free(store->anti_replay);
        free(store);
        return -ENOMEM;
    }
    store->workers = workers;
    for (unsigned w = 0; w < workers; w++) {
        if (gnutls_anti_replay_init(&store->anti_replay[w]) != GNUTLS_E_SUCCESS) {
            store->anti_replay[w] = NULL;
            h3_replay_store_free(store);
            return -ENOMEM;
        }
        gnutls_anti_replay_set_add_function(store->anti_replay[w], replay_add);
    }
    *out = store;
    return 0;
}

void h3_replay_store_free(struct h3_replay_store *store)
{
    if (store == NULL)
        return;
    for (unsigned w = 0; w < store->workers; w++)
        if (store->anti_replay[w] != NULL)
            gnutls_anti_replay_deinit(store->anti_replay[w]);
    free(store->anti_replay);
    pthread_mutex_destroy(&store->lock);
    free(store);
}

gnutls_anti_replay_t h3_replay_store_attach(struct h3_replay_store *store, unsigned worker,
                                            struct h3_endpoint *ep)
{
    if (worker >= store->workers)
        return NULL;
    gnutls_anti_replay_set_ptr(store->anti_replay[worker], ep);
    return store->anti_replay[worker];
}
