/*
 * cache_hot.h: each worker thread's open entries, as the static module's
 * open_file_cache: a hit on an entry the thread served lately skips
 * opening, reading and checking its file again.  A small table per
 * thread, one entry per slot (the slot chosen by the entry's id), each
 * keeping the file's descriptor, its header (checked when it was read)
 * and, for a body of at most CACHE_HOT_SMALL bytes, the body itself.  An
 * entry counts only for the version of the index's entry it was read at
 * (cache_found.version): a response stored again, revalidated, dropped
 * or purged has another, and the file is read afresh.  The file is
 * checked with fstat() on each use whose body comes from it, and at most
 * once per second of the wall clock when the body is kept in memory (then
 * nothing of the file is read: what is served is the copy checked when it
 * was read): one changed in place since (its times, its size), or removed
 * (a purge by `rm`), is read and checked again too.
 */
#ifndef CORRAL_PROTO_CACHE_HOT_H
#define CORRAL_PROTO_CACHE_HOT_H

#include "proto/cache/cache_file.h"
#include "proto/cache/cache_zone.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define CACHE_HOT_SLOTS 256         /* per thread: at most so many descriptors open */
#define CACHE_HOT_SMALL (16 * 1024) /* bodies kept in memory: 4 MiB per thread at most */

/* One thread's kept entry: valid until the thread's next cache_hot_put()
 * or cache_hot_drop(). */
struct cache_hot_entry {
    const struct cache_zone *zone;
    uint8_t id[CACHE_ID_LEN];
    uint64_t version;
    int fd; /* -1: none kept */
    struct stat st;
    int64_t checked;          /* the wall-clock second of its last fstat() */
    struct cache_file_meta m; /* points into `header` */
    uint8_t *header;
    uint8_t *body; /* the whole body, or NULL: read it from `fd` */
};

/* The calling thread's entry for `id` of `zone` at `version`, or NULL;
 * `now` is the wall-clock second. */
const struct cache_hot_entry *cache_hot_get(const struct cache_zone *zone,
                                            const uint8_t id[CACHE_ID_LEN], uint64_t version,
                                            int64_t now);

/* Keeps for the calling thread the open entry `fd` (with `st`, read at
 * wall-clock second `now`), its
 * header `header` (`m` parsed from it) and, when not NULL, its body:
 * copies of them, and `fd` itself, which the table then owns (closed when
 * the slot is taken by another).  Returns the entry kept, or NULL (out of
 * memory: `fd` stays the caller's). */
const struct cache_hot_entry *cache_hot_put(const struct cache_zone *zone,
                                            const uint8_t id[CACHE_ID_LEN], uint64_t version,
                                            int fd, const struct stat *st, int64_t now,
                                            const uint8_t *header, const struct cache_file_meta *m,
                                            const uint8_t *body);

#endif
