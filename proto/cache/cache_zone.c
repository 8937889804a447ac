/*
 * cache_zone.c: the zones' index, shared by the workers (cache_zone.h).
 * One mutex per zone guards a hash table of fixed-size nodes taken from
 * one array sized by keys_zone, and a least-recently-used list; files are
 * removed outside the lock.  The manager thread of each zone loads the
 * directory, then sweeps once a second.
 */
#include "proto/cache/cache_zone.h"

#include "proto/cache/cache_file.h"
#include "proto/cache/cache_key.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
    NODE_FILE = 1u << 0, /* a response is stored for it */
    NODE_VARY = 1u << 1, /* its key's responses vary: `vary` names by what */
};

struct cache_node {
    uint8_t id[CACHE_ID_LEN];
    uint16_t flags;
    uint32_t uses;
    struct cache_node *hnext;
    struct cache_node *prev, *next; /* LRU: the head most recent */
    struct cache_entry_info info;
    uint64_t version; /* the zone's count of stores when it was stored */
    int64_t used;     /* wall-clock second of the last lookup */
    char vary[CACHE_VARY_MAX + 1];
};

/* A key being fetched under proxy_cache_lock, and who waits for it. */
struct cache_lock {
    uint8_t id[CACHE_ID_LEN];
    struct cache_waiter *waiters, **tail;
    struct cache_lock *next;
};

struct cache_zone {
    char *name, *path;
    unsigned levels[CACHE_LEVELS];
    size_t capacity;
    _Atomic uint64_t max_size;
    _Atomic uint32_t inactive_s;
    pthread_mutex_t lock;
    struct cache_node *nodes, *free_list;
    struct cache_node **table;
    size_t mask, count;
    struct cache_node lru; /* sentinel */
    uint64_t size;
    uint64_t versions; /* stores so far: each gives its entry a version */
    atomic_uint temp_seq;
    struct cache_zone_counters counters;
    struct cache_lock *locks; /* few: one per key being fetched */
    struct cache_zone *next_zone;
    pthread_t manager;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cache_zone *registry;

size_t cache_zone_capacity(size_t keys_size)
{
    return keys_size / sizeof(struct cache_node);
}

const char *cache_zone_name(const struct cache_zone *zone)
{
    return zone->name;
}

struct cache_zone_counters *cache_zone_counters(struct cache_zone *zone)
{
    return &zone->counters;
}

uint64_t cache_zone_size(struct cache_zone *zone)
{
    pthread_mutex_lock(&zone->lock);
    uint64_t size = zone->size;
    pthread_mutex_unlock(&zone->lock);
    return size;
}

size_t cache_zone_count(struct cache_zone *zone)
{
    pthread_mutex_lock(&zone->lock);
    size_t n = zone->count;
    pthread_mutex_unlock(&zone->lock);
    return n;
}

static size_t bucket(const struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN])
{
    uint64_t h;
    memcpy(&h, id, sizeof(h)); /* MD5 bytes are as good a hash as any */
    return (size_t)h & zone->mask;
}

static struct cache_node *find(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN])
{
    for (struct cache_node *n = zone->table[bucket(zone, id)]; n != NULL; n = n->hnext)
        if (memcmp(n->id, id, CACHE_ID_LEN) == 0)
            return n;
    return NULL;
}

static void lru_unlink(struct cache_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
}

static void lru_front(struct cache_zone *zone, struct cache_node *n)
{
    n->next = zone->lru.next;
    n->prev = &zone->lru;
    zone->lru.next->prev = n;
    zone->lru.next = n;
}

/* Victims whose files are removed once the lock is let go. */
#define VICTIMS_MAX 64
struct victims {
    uint8_t ids[VICTIMS_MAX][CACHE_ID_LEN];
    size_t count;
    bool more; /* some had to stay: go round again */
};

static void node_remove(struct cache_zone *zone, struct cache_node *n, struct victims *v)
{
    struct cache_node **pp = &zone->table[bucket(zone, n->id)];
    while (*pp != n)
        pp = &(*pp)->hnext;
    *pp = n->hnext;
    lru_unlink(n);
    if (n->flags & NODE_FILE) {
        zone->size -= n->info.size;
        if (v != NULL && v->count < VICTIMS_MAX)
            memcpy(v->ids[v->count++], n->id, CACHE_ID_LEN);
        else if (v != NULL)
            v->more = true;
    }
    zone->count--;
    n->hnext = zone->free_list;
    zone->free_list = n;
}

static void remove_files(struct cache_zone *zone, const struct victims *v)
{
    char path[PATH_MAX];
    for (size_t i = 0; i < v->count; i++)
        if (cache_zone_path(zone, v->ids[i], path, false) == 0)
            (void)unlink(path);
}

/* A node for `id`, the least recently used given up when none is free.
 * NULL: the zone holds none at all (capacity 0). */
static struct cache_node *node_new(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN],
                                   struct victims *v)
{
    if (zone->free_list == NULL) {
        if (zone->lru.prev == &zone->lru)
            return NULL;
        node_remove(zone, zone->lru.prev, v);
        atomic_fetch_add_explicit(&zone->counters.evictions, 1, memory_order_relaxed);
    }
    struct cache_node *n = zone->free_list;
    zone->free_list = n->hnext;
    memset(n, 0, sizeof(*n));
    memcpy(n->id, id, CACHE_ID_LEN);
    size_t b = bucket(zone, id);
    n->hnext = zone->table[b];
    zone->table[b] = n;
    lru_front(zone, n);
    zone->count++;
    return n;
}

/* Drops the least recently used stored entries while the zone is over
 * max_size, and, with `now` non-zero, those unused for `inactive`. */
static void shrink(struct cache_zone *zone, int64_t now, struct victims *v)
{
    uint64_t max = atomic_load_explicit(&zone->max_size, memory_order_relaxed);
    int64_t inactive = atomic_load_explicit(&zone->inactive_s, memory_order_relaxed);
    struct cache_node *n = zone->lru.prev;
    while (n != &zone->lru && v->count < VICTIMS_MAX) {
        struct cache_node *prev = n->prev;
        bool over = max != 0 && zone->size > max && (n->flags & NODE_FILE);
        bool idle = now != 0 && n->used + inactive <= now;
        if (over || idle) {
            node_remove(zone, n, v);
            atomic_fetch_add_explicit(&zone->counters.evictions, 1, memory_order_relaxed);
        } else if (now == 0 && (max == 0 || zone->size <= max)) {
            break;
        }
        n = prev;
    }
    if (v->count == VICTIMS_MAX)
        v->more = true;
}

void cache_zone_lookup(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN], int64_t now,
                       bool count, struct cache_found *out)
{
    struct victims v = {.count = 0};
    out->state = CACHE_LOOKUP_MISS;
    out->version = 0;
    out->vary[0] = '\0';
    pthread_mutex_lock(&zone->lock);
    struct cache_node *n = find(zone, id);
    if (n == NULL)
        n = node_new(zone, id, &v);
    else {
        lru_unlink(n);
        lru_front(zone, n);
    }
    if (n != NULL) {
        n->used = now;
        if ((count || n->uses == 0) && n->uses < UINT32_MAX)
            n->uses++;
        out->uses = n->uses;
        out->entry = n->info;
        out->version = n->version;
        if (n->flags & NODE_VARY) {
            out->state = CACHE_LOOKUP_VARY;
            memcpy(out->vary, n->vary, sizeof(out->vary));
        } else if (n->flags & NODE_FILE) {
            out->state = now < n->info.expires ? CACHE_LOOKUP_FRESH : CACHE_LOOKUP_STALE;
        }
    } else {
        out->uses = 1;
    }
    pthread_mutex_unlock(&zone->lock);
    remove_files(zone, &v);
}

static void stored_locked(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN],
                          const struct cache_entry_info *info, int64_t used, struct victims *v)
{
    struct cache_node *n = find(zone, id);
    if (n == NULL && (n = node_new(zone, id, v)) == NULL)
        return;
    if (n->flags & NODE_FILE)
        zone->size -= n->info.size;
    n->flags = (uint16_t)((n->flags & ~NODE_VARY) | NODE_FILE);
    n->info = *info;
    n->version = ++zone->versions;
    if (used > n->used)
        n->used = used;
    zone->size += info->size;
}

void cache_zone_stored(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN],
                       const struct cache_entry_info *info)
{
    struct victims v = {.count = 0};
    pthread_mutex_lock(&zone->lock);
    stored_locked(zone, id, info, (int64_t)time(NULL), &v);
    shrink(zone, 0, &v);
    pthread_mutex_unlock(&zone->lock);
    atomic_fetch_add_explicit(&zone->counters.stored, 1, memory_order_relaxed);
    remove_files(zone, &v);
}

static void set_vary_locked(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN],
                            const char *vary, size_t len, struct victims *v)
{
    if (len > CACHE_VARY_MAX)
        return;
    struct cache_node *n = find(zone, id);
    if (n == NULL && (n = node_new(zone, id, v)) == NULL)
        return;
    if (n->flags & NODE_FILE) {
        /* What was stored without Vary stands for no variant now. */
        zone->size -= n->info.size;
        if (v->count < VICTIMS_MAX)
            memcpy(v->ids[v->count++], n->id, CACHE_ID_LEN);
    }
    n->flags = NODE_VARY;
    /* A request that saw no Vary yet looks again (cache_zone_lock()). */
    n->version = ++zone->versions;
    memcpy(n->vary, vary, len);
    n->vary[len] = '\0';
}

void cache_zone_set_vary(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN], const char *vary,
                         size_t len)
{
    struct victims v = {.count = 0};
    pthread_mutex_lock(&zone->lock);
    set_vary_locked(zone, id, vary, len, &v);
    pthread_mutex_unlock(&zone->lock);
    remove_files(zone, &v);
}

bool cache_zone_drop(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN])
{
    pthread_mutex_lock(&zone->lock);
    struct cache_node *n = find(zone, id);
    if (n != NULL)
        node_remove(zone, n, NULL);
    pthread_mutex_unlock(&zone->lock);
    char path[PATH_MAX];
    if (cache_zone_path(zone, id, path, false) == 0)
        (void)unlink(path);
    return n != NULL;
}

int cache_zone_path(const struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN], char *out,
                    bool mkdirs)
{
    char hex[2 * CACHE_ID_LEN + 1];
    cache_key_hex(id, hex);
    size_t len = strlen(zone->path);
    if (len + 2 * CACHE_ID_LEN + 3 * CACHE_LEVELS + 2 > PATH_MAX)
        return -ENAMETOOLONG;
    memcpy(out, zone->path, len);
    /* nginx's layout: levels=1:2 puts ...c29b7f54b2df7773722d382f4809d65029c
     * in c/29/, taken from the end of the name. */
    size_t end = 2 * CACHE_ID_LEN;
    for (int i = 0; i < CACHE_LEVELS && zone->levels[i] != 0; i++) {
        out[len++] = '/';
        end -= zone->levels[i];
        memcpy(out + len, hex + end, zone->levels[i]);
        len += zone->levels[i];
        if (mkdirs) {
            out[len] = '\0';
            if (mkdir(out, 0700) == -1 && errno != EEXIST)
                return -errno;
        }
    }
    out[len++] = '/';
    memcpy(out + len, hex, 2 * CACHE_ID_LEN + 1);
    return 0;
}

int cache_zone_temp_path(const struct cache_zone *zone, char *out)
{
    unsigned seq =
        atomic_fetch_add_explicit((atomic_uint *)&zone->temp_seq, 1, memory_order_relaxed);
    int n = snprintf(out, PATH_MAX, "%s/.tmp.%ld.%u", zone->path, (long)getpid(), seq);
    return n > 0 && n < PATH_MAX ? 0 : -ENAMETOOLONG;
}

/* ------------------------------------------------------------ the locks */

static struct cache_lock **find_lock(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN])
{
    struct cache_lock **pp = &zone->locks;
    while (*pp != NULL && memcmp((*pp)->id, id, CACHE_ID_LEN) != 0)
        pp = &(*pp)->next;
    return pp;
}

enum cache_lock_result cache_zone_lock(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN],
                                       const uint8_t entry[CACHE_ID_LEN], uint64_t version,
                                       struct cache_waiter *w)
{
    pthread_mutex_lock(&zone->lock);
    struct cache_lock **pp = find_lock(zone, id);
    enum cache_lock_result result = *pp == NULL ? CACHE_LOCK_TAKEN : CACHE_LOCK_HELD;
    if (result == CACHE_LOCK_TAKEN && entry != NULL) {
        /* A node gone (evicted, dropped) and made again starts at 0. */
        const struct cache_node *n = find(zone, entry);
        if ((n != NULL ? n->version : 0) != version)
            result = CACHE_LOCK_CHANGED;
    }
    if (result == CACHE_LOCK_TAKEN) {
        struct cache_lock *l = calloc(1, sizeof(*l));
        if (l != NULL) {
            memcpy(l->id, id, CACHE_ID_LEN);
            l->tail = &l->waiters;
            l->next = zone->locks;
            zone->locks = l;
        } else {
            result = CACHE_LOCK_NONE;
        }
    } else if (result == CACHE_LOCK_HELD && w != NULL) {
        w->next = NULL;
        w->queued = true;
        w->posted = w->cancelled = false;
        *(*pp)->tail = w;
        (*pp)->tail = &w->next;
    }
    pthread_mutex_unlock(&zone->lock);
    return result;
}

void cache_zone_unlock(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN])
{
    pthread_mutex_lock(&zone->lock);
    struct cache_lock **pp = find_lock(zone, id);
    struct cache_lock *l = *pp;
    struct cache_waiter *waiters = NULL;
    if (l != NULL) {
        *pp = l->next;
        waiters = l->waiters;
        for (struct cache_waiter *w = waiters; w != NULL; w = w->next) {
            w->queued = false;
            w->posted = true;
        }
    }
    pthread_mutex_unlock(&zone->lock);
    free(l);
    /* Each posted wake owns its waiter from here: read `next` first. */
    while (waiters != NULL) {
        struct cache_waiter *w = waiters;
        waiters = w->next;
        if (corral_loop_post(w->loop, w->wake, w->arg) != 0) {
            /* No memory to post with: it waits for its lock_timeout.  Its
             * exchange gone meanwhile, it is nobody's but its wake's,
             * which frees it here (cache_waiter). */
            pthread_mutex_lock(&zone->lock);
            w->posted = false;
            bool gone = w->cancelled;
            pthread_mutex_unlock(&zone->lock);
            if (gone)
                w->wake(w->arg);
        }
    }
}

bool cache_zone_cancel(struct cache_zone *zone, struct cache_waiter *w, bool gone)
{
    bool removed = false;
    pthread_mutex_lock(&zone->lock);
    if (w->queued) {
        for (struct cache_lock *l = zone->locks; l != NULL && !removed; l = l->next)
            for (struct cache_waiter **pp = &l->waiters; *pp != NULL; pp = &(*pp)->next)
                if (*pp == w) {
                    *pp = w->next;
                    if (l->tail == &w->next)
                        l->tail = pp;
                    removed = true;
                    break;
                }
        w->queued = false;
    }
    if (!removed && w->posted)
        w->cancelled = gone;
    else
        removed = true; /* neither queued nor posted: nothing holds it */
    pthread_mutex_unlock(&zone->lock);
    return removed;
}

bool cache_zone_woken(struct cache_zone *zone, struct cache_waiter *w)
{
    pthread_mutex_lock(&zone->lock);
    w->posted = false;
    bool wanted = !w->cancelled;
    pthread_mutex_unlock(&zone->lock);
    return wanted;
}

/* ------------------------------------------------------------ the loader */

static bool is_hex_name(const char *name)
{
    size_t i = 0;
    for (; name[i] != '\0'; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return i == 2 * CACHE_ID_LEN;
}

/* Checks a file found in the directory (its header, its length, its
 * body's CRC) and indexes it under the id its key gives, unless a worker
 * has stored the same entry since.  A file that does not check out is
 * removed. */
static void load_file(struct cache_zone *zone, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd == -1)
        return;
    uint8_t *buf = malloc(CACHE_FILE_HEADER_MAX);
    struct stat st;
    bool ok = false;
    struct cache_file_meta m;
    if (buf == NULL || fstat(fd, &st) == -1 || !S_ISREG(st.st_mode))
        goto done;
    ssize_t n = pread(fd, buf, CACHE_FILE_HEADER_MAX, 0);
    if (n <= 0 || cache_file_parse(buf, (size_t)n, &m) != 0 ||
        (uint64_t)st.st_size != m.header_len + m.body_len)
        goto bad;
    uint32_t crc = 0;
    uint8_t chunk[16384];
    for (uint64_t off = m.header_len; off < (uint64_t)st.st_size;) {
        ssize_t r = pread(fd, chunk, sizeof(chunk), (off_t)off);
        if (r <= 0)
            goto bad;
        crc = cache_file_crc(crc, chunk, (size_t)r);
        off += (uint64_t)r;
    }
    if (crc != m.body_crc)
        goto bad;
    uint8_t id[CACHE_ID_LEN], primary[CACHE_ID_LEN];
    cache_key_id(m.key, m.variant, id);
    char expected[PATH_MAX];
    if (cache_zone_path(zone, id, expected, false) != 0 || strcmp(expected, path) != 0)
        goto bad; /* not where its key puts it: a stray */
    struct victims v = {.count = 0};
    pthread_mutex_lock(&zone->lock);
    if (find(zone, id) == NULL || !(find(zone, id)->flags & NODE_FILE)) {
        if (m.vary.len > 0) {
            cache_key_id(m.key, (struct http_str){NULL, 0}, primary);
            struct cache_node *p = find(zone, primary);
            if (p == NULL || !(p->flags & NODE_VARY))
                set_vary_locked(zone, primary, m.vary.data, m.vary.len, &v);
        }
        struct cache_entry_info info = {.size = (uint64_t)st.st_size,
                                        .expires = m.expires,
                                        .swr = m.swr,
                                        .sie = m.sie,
                                        .must_revalidate = m.flags & CACHE_FILE_MUST_REVALIDATE};
        stored_locked(zone, id, &info, (int64_t)time(NULL), &v);
        shrink(zone, 0, &v);
    }
    pthread_mutex_unlock(&zone->lock);
    remove_files(zone, &v);
    atomic_fetch_add_explicit(&zone->counters.loader_files, 1, memory_order_relaxed);
    ok = true;
    goto done;
bad:
    atomic_fetch_add_explicit(&zone->counters.corrupt, 1, memory_order_relaxed);
    (void)unlink(path);
done:
    (void)ok;
    free(buf);
    close(fd);
}

static void load_dir(struct cache_zone *zone, const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
            continue;
        if (depth == 0 && strncmp(e->d_name, ".tmp.", 5) == 0) {
            (void)unlink(path); /* what a crash left half-written */
            continue;
        }
        if (depth < CACHE_LEVELS && zone->levels[depth] != 0) {
            if (strlen(e->d_name) == zone->levels[depth])
                load_dir(zone, path, depth + 1);
        } else if (is_hex_name(e->d_name)) {
            load_file(zone, path);
        }
    }
    closedir(d);
}

static void *manager(void *arg)
{
    struct cache_zone *zone = arg;
    load_dir(zone, zone->path, 0);
    atomic_store(&zone->counters.loader_done, true);
    for (;;) {
        struct timespec ts = {1, 0};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
        struct victims v;
        do {
            v = (struct victims){.count = 0};
            pthread_mutex_lock(&zone->lock);
            shrink(zone, (int64_t)time(NULL), &v);
            pthread_mutex_unlock(&zone->lock);
            remove_files(zone, &v);
        } while (v.more);
    }
    return NULL;
}

bool cache_zone_wait_loaded(struct cache_zone *zone, unsigned timeout_ms)
{
    for (unsigned i = 0; i < timeout_ms; i++) {
        if (atomic_load(&zone->counters.loader_done))
            return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&zone->counters.loader_done);
}

/* -------------------------------------------------------------- purging */

struct purge {
    const char *key;
    size_t len;
    bool prefix;
    size_t purged;
};

/* A file of the zone whose key matches: out of the index (with its
 * key's Vary marker), and removed. */
static void purge_file(struct cache_zone *zone, const char *path, struct purge *p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd == -1)
        return;
    uint8_t *buf = malloc(CACHE_FILE_HEADER_MAX);
    struct cache_file_meta m;
    ssize_t n = buf != NULL ? pread(fd, buf, CACHE_FILE_HEADER_MAX, 0) : -1;
    close(fd);
    if (n > 0 && cache_file_parse(buf, (size_t)n, &m) == 0 &&
        (p->prefix ? m.key.len >= p->len : m.key.len == p->len) &&
        memcmp(m.key.data, p->key, p->len) == 0) {
        uint8_t id[CACHE_ID_LEN], primary[CACHE_ID_LEN];
        cache_key_id(m.key, m.variant, id);
        cache_key_id(m.key, (struct http_str){NULL, 0}, primary);
        pthread_mutex_lock(&zone->lock);
        struct cache_node *node = find(zone, id);
        if (node != NULL)
            node_remove(zone, node, NULL);
        if ((node = find(zone, primary)) != NULL && (node->flags & NODE_VARY))
            node_remove(zone, node, NULL);
        pthread_mutex_unlock(&zone->lock);
        if (unlink(path) == 0)
            p->purged++;
    }
    free(buf);
}

static void purge_dir(struct cache_zone *zone, const char *dir, int depth, struct purge *p)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' ||
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
            continue;
        if (depth < CACHE_LEVELS && zone->levels[depth] != 0) {
            if (strlen(e->d_name) == zone->levels[depth])
                purge_dir(zone, path, depth + 1, p);
        } else if (is_hex_name(e->d_name)) {
            purge_file(zone, path, p);
        }
    }
    closedir(d);
}

size_t cache_zone_purge(struct cache_zone *zone, const char *key, size_t len, bool prefix)
{
    if (!prefix) {
        uint8_t id[CACHE_ID_LEN];
        cache_key_id((struct http_str){key, len}, (struct http_str){NULL, 0}, id);
        pthread_mutex_lock(&zone->lock);
        struct cache_node *n = find(zone, id);
        bool plain = n != NULL && (n->flags & NODE_FILE);
        pthread_mutex_unlock(&zone->lock);
        if (plain)
            return cache_zone_drop(zone, id) ? 1 : 0;
    }
    struct purge p = {key, len, prefix, 0};
    purge_dir(zone, zone->path, 0, &p);
    return p.purged;
}

/* ---------------------------------------------------------- the registry */

static int make_dirs(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++)
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0700) == -1 && errno != EEXIST)
                return -errno;
            buf[i] = c;
        }
    return 0;
}

static struct cache_zone *registry_find(const char *name)
{
    for (struct cache_zone *z = registry; z != NULL; z = z->next_zone)
        if (strcmp(z->name, name) == 0)
            return z;
    return NULL;
}

struct cache_zone *cache_zone_find(const char *name)
{
    pthread_mutex_lock(&registry_lock);
    struct cache_zone *z = registry_find(name);
    pthread_mutex_unlock(&registry_lock);
    return z;
}

void cache_zone_each(void (*fn)(struct cache_zone *zone, void *arg), void *arg)
{
    pthread_mutex_lock(&registry_lock);
    struct cache_zone *z = registry;
    pthread_mutex_unlock(&registry_lock);
    /* Zones are never freed and are added at the head: the list from `z`
     * on stays as it is. */
    for (; z != NULL; z = z->next_zone)
        fn(z, arg);
}

static void zone_free(struct cache_zone *z)
{
    free(z->table);
    free(z->nodes);
    free(z->name);
    free(z->path);
    free(z);
}

int cache_zone_get(const struct cache_zone_conf *conf, struct cache_zone **out)
{
    pthread_mutex_lock(&registry_lock);
    struct cache_zone *z = registry_find(conf->name);
    if (z != NULL) {
        int rc = 0;
        /* Its files are where its levels put them: a zone of the same
         * name elsewhere, or laid out otherwise, is not this one. */
        if (strcmp(z->path, conf->path) != 0 ||
            memcmp(z->levels, conf->levels, sizeof(z->levels)) != 0)
            rc = -EEXIST;
        else {
            atomic_store(&z->max_size, conf->max_size);
            atomic_store(&z->inactive_s, conf->inactive_s);
            *out = z;
        }
        pthread_mutex_unlock(&registry_lock);
        return rc;
    }
    int rc = make_dirs(conf->path);
    if (rc != 0) {
        pthread_mutex_unlock(&registry_lock);
        return rc;
    }
    z = calloc(1, sizeof(*z));
    size_t cap = cache_zone_capacity(conf->keys_size);
    size_t buckets = 16;
    while (buckets < cap)
        buckets *= 2;
    if (z == NULL || (z->name = strdup(conf->name)) == NULL ||
        (z->path = strdup(conf->path)) == NULL ||
        (z->nodes = calloc(cap > 0 ? cap : 1, sizeof(*z->nodes))) == NULL ||
        (z->table = calloc(buckets, sizeof(*z->table))) == NULL) {
        if (z != NULL)
            zone_free(z);
        pthread_mutex_unlock(&registry_lock);
        return -ENOMEM;
    }
    memcpy(z->levels, conf->levels, sizeof(z->levels));
    z->capacity = cap;
    z->mask = buckets - 1;
    atomic_store(&z->max_size, conf->max_size);
    atomic_store(&z->inactive_s, conf->inactive_s);
    pthread_mutex_init(&z->lock, NULL);
    z->lru.next = z->lru.prev = &z->lru;
    for (size_t i = 0; i < cap; i++) {
        z->nodes[i].hnext = z->free_list;
        z->free_list = &z->nodes[i];
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&z->manager, &attr, manager, z);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_destroy(&z->lock);
        zone_free(z);
        pthread_mutex_unlock(&registry_lock);
        return -rc;
    }
    z->next_zone = registry;
    registry = z;
    pthread_mutex_unlock(&registry_lock);
    *out = z;
    return 0;
}
