/*
 * cache_zone.h: a cache zone (proxy_cache_path): the index of the
 * entries under one directory, shared by every worker thread behind one
 * mutex, bounded in entries by keys_zone's size and on disk by max_size
 * (least recently used first), and kept by the process across reloads
 * (a registry by name and path).  Each zone has a manager thread that
 * first indexes what the directory already holds (the loader: serving
 * goes on meanwhile, what it has not reached yet is a miss) and then,
 * once a second, drops entries unused for `inactive` and keeps the disk
 * under max_size.
 */
#ifndef CORRAL_PROTO_CACHE_ZONE_H
#define CORRAL_PROTO_CACHE_ZONE_H

#include "proto/cache/cache_key.h"

#include <corral.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_VARY_MAX 64 /* a Vary value longer than this is not stored */
#define CACHE_LEVELS   3

/* What proxy_cache_path says. */
struct cache_zone_conf {
    const char *name;
    const char *path;
    unsigned levels[CACHE_LEVELS]; /* each 1 or 2; 0 ends */
    size_t keys_size;              /* keys_zone=NAME:SIZE */
    uint64_t max_size;             /* 0: no bound */
    uint32_t inactive_s;           /* nginx's 10 minutes by default */
};

/* The zone's counters, read by the metrics (relaxed atomics: every
 * worker adds to them). */
struct cache_zone_counters {
    atomic_uint_fast64_t hits, misses, expired, stale, updating, revalidated, bypass;
    atomic_uint_fast64_t evictions, stored, store_errors, corrupt;
    atomic_uint_fast64_t loader_files; /* entries the loader indexed */
    atomic_bool loader_done;
    atomic_bool error_logged; /* a store failure was logged: once per zone */
};

struct cache_zone;

/* What the index keeps of a stored response, besides its file. */
struct cache_entry_info {
    uint64_t size;        /* of its file */
    int64_t expires;      /* wall-clock second from which it is stale */
    uint32_t swr, sie;    /* stale-while-revalidate, stale-if-error */
    bool must_revalidate; /* never served stale */
};

/* The zone `conf` describes: the process's, made on first use (with its
 * manager thread) and found again by later generations, whose max_size
 * and inactive it then takes.  Returns 0, or -errno (the directory cannot
 * be made, out of memory). */
int cache_zone_get(const struct cache_zone_conf *conf, struct cache_zone **out);

/* Purges the entries of `key` (every Vary variant of it), or with
 * `prefix` of every key that starts with it: out of the index, their
 * files removed.  A key stored without Vary goes at once; the others
 * are found by reading the headers of the zone's files, from the
 * calling thread (the admin API's).  Returns how many entries went. */
size_t cache_zone_purge(struct cache_zone *zone, const char *key, size_t len, bool prefix);

/* The zone of `name` the process has, or NULL (the admin API's purge). */
struct cache_zone *cache_zone_find(const char *name);

/* Calls `fn` for each zone of the process (the metrics). */
void cache_zone_each(void (*fn)(struct cache_zone *zone, void *arg), void *arg);

const char *cache_zone_name(const struct cache_zone *zone);
struct cache_zone_counters *cache_zone_counters(struct cache_zone *zone);
/* Bytes of entries on disk, and entries indexed. */
uint64_t cache_zone_size(struct cache_zone *zone);
size_t cache_zone_count(struct cache_zone *zone);

/* The file of entry `id` (its levels of directories and 32 hex digits)
 * into `out` (PATH_MAX bytes).  With `mkdirs`, its directories are made.
 * Returns 0, or -errno. */
int cache_zone_path(const struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN], char *out,
                    bool mkdirs);

/* A temporary file's name in the zone's directory, for an entry being
 * written (the loader removes those a crash left). */
int cache_zone_temp_path(const struct cache_zone *zone, char *out);

enum cache_lookup {
    CACHE_LOOKUP_MISS,  /* no stored response */
    CACHE_LOOKUP_FRESH, /* stored and fresh */
    CACHE_LOOKUP_STALE, /* stored, stale */
    CACHE_LOOKUP_VARY,  /* the key's responses vary: look up the variant */
};

struct cache_found {
    enum cache_lookup state;
    uint32_t uses;                 /* requests for the key counted so far, this one too */
    struct cache_entry_info entry; /* FRESH, STALE */
    uint64_t version;              /* changes with each store (0: none yet) */
    char vary[CACHE_VARY_MAX + 1]; /* VARY: the names, NUL-terminated */
};

/* Looks `id` up at wall-clock second `now`, marks it used, and with
 * `count` counts this request for proxy_cache_min_uses (an entry with no
 * response yet is kept for that).  A request looks again without
 * counting (back from proxy_cache_lock's wait, or its entry changed
 * meanwhile): it counts once, as in nginx, unless the entry went in
 * between and its count with it. */
void cache_zone_lookup(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN], int64_t now,
                       bool count, struct cache_found *out);

/* Entry `id`'s file is in place: indexed with `info`, and older entries
 * dropped while the zone is over its bounds. */
void cache_zone_stored(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN],
                       const struct cache_entry_info *info);

/* The responses of key `id` vary by `vary` (the Vary names). */
void cache_zone_set_vary(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN], const char *vary,
                         size_t len);

/* Drops entry `id` and removes its file (a corrupted one, a purge).
 * Returns whether it was indexed. */
bool cache_zone_drop(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN]);

/* A request waiting for another's fetch of the same key
 * (proxy_cache_lock).  The zone queues it, and when the lock goes posts
 * `wake(arg)` to `loop` (corral_loop_post()).  Out of memory to post
 * with, the waiter is left to its own timeout, unless it was cancelled
 * meanwhile (cache_zone_cancel(), `gone`): then nothing else would ever
 * run, and `wake(arg)` is called on the unlocking thread, where it only
 * frees the waiter (cache_zone_woken() says false).  The fields after
 * `arg` are the zone's, under its mutex. */
struct cache_waiter {
    corral_loop *loop;
    void (*wake)(void *arg);
    void *arg;
    struct cache_waiter *next;
    bool queued;    /* in a lock's queue */
    bool posted;    /* its wake is posted and has not run */
    bool cancelled; /* its exchange went before the wake ran */
};

enum cache_lock_result {
    CACHE_LOCK_TAKEN,   /* the caller fetches, and calls cache_zone_unlock() */
    CACHE_LOCK_HELD,    /* another request fetches: `w` is queued (with `w` NULL, nothing is) */
    CACHE_LOCK_CHANGED, /* `entry` changed since its lookup: no lock, look again */
    /* Out of memory for the lock: none taken, nothing queued; the caller
     * fetches without it (never to let go a lock another took since). */
    CACHE_LOCK_NONE,
};

/* Takes the fetch lock of key `id` (its store done or given up, the caller
 * calls cache_zone_unlock()), or queues `w` behind the request that holds
 * it; with `w` NULL nothing is queued (a stale entry's updating, or a
 * waiter that first makes what its wait needs).  The caller's lookup of
 * `entry` (the key's entry, or its Vary variant's) saw `version`: another
 * request may have fetched and stored it whole and let its lock go since,
 * and a fetch now would be a second one, so if `entry` changed no lock is
 * taken.  With `entry` NULL it is taken whatever changed. */
enum cache_lock_result cache_zone_lock(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN],
                                       const uint8_t entry[CACHE_ID_LEN], uint64_t version,
                                       struct cache_waiter *w);

/* Lets the lock of `id` go and wakes those waiting for it. */
void cache_zone_unlock(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN]);

/* Takes `w` out of its queue: true (also when it was in none).  False
 * when its wake is posted already: then, with `gone` (its exchange is
 * over), it is marked cancelled and the wake frees it. */
bool cache_zone_cancel(struct cache_zone *zone, struct cache_waiter *w, bool gone);

/* In a wake: whether `w` is still wanted (false: its exchange went
 * meanwhile, and the wake frees it). */
bool cache_zone_woken(struct cache_zone *zone, struct cache_waiter *w);

/* Waits (polling the flag, for tests and the daemon's own checks) until
 * the loader is done; false if it is not after `timeout_ms`. */
bool cache_zone_wait_loaded(struct cache_zone *zone, unsigned timeout_ms);

/* The entries the zone can index: keys_size over what one takes. */
size_t cache_zone_capacity(size_t keys_size);

#endif
