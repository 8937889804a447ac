/*
 * limit_zone.c: the zones of limit_req and limit_conn: per-key state shared
 * by every worker, in shards that each have a mutex, hash chains and a
 * least-recently-used list, with memory bounded by the zone's size.
 */
#include "proto/policy/limit.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

struct limit_node {
    struct limit_node *chain;         /* the next in its hash bucket */
    struct limit_node *newer, *older; /* the shard's recently-used list */
    uint64_t hash;
    uint64_t last_ms; /* limit_req: when the bucket was last counted */
    uint64_t excess;  /* limit_req: milli-requests in the bucket */
    uint32_t conns;   /* limit_conn: exchanges under way; never evicted while > 0 */
    uint16_t key_len;
    char key[];
};

/* Aligned so that two shards never share a cache line. */
struct limit_shard {
    pthread_mutex_t lock;
    struct limit_node **buckets;
    size_t bucket_mask;
    struct limit_node *newest, *oldest;
    size_t used, budget; /* bytes of entries, against the shard's part of the size */
    struct limit_zone_counts counts;
} __attribute__((aligned(64)));

struct limit_zone {
    char *name;
    enum limit_zone_kind kind;
    size_t size;
    unsigned refs;
    bool replaced; /* a zone of the same name took its place in the registry */
    uint64_t seed; /* per zone, so that no key set collides in every process */
    unsigned shard_bits;
    struct limit_shard *shards;
    struct limit_zone *next;
};

/* Zones are made and dropped on the main thread when a generation is
 * built or freed; the admin endpoint reads them from its own. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct limit_zone *registry;

/* How many entries an evicting scan looks at for one that no exchange
 * holds, before giving up (limit_conn). */
#define EVICT_SCAN 16

bool limit_zone_name_valid(const char *name, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

size_t limit_zone_entry_bytes(void)
{
    return sizeof(struct limit_node) + 16; /* malloc's header, rounded */
}

/* FNV-1a over the key, seeded, then a full-avalanche finish, so that the
 * top bits (the shard) and the bottom (the bucket) both mix every byte. */
static uint64_t hash_key(uint64_t seed, const char *key, size_t len)
{
    uint64_t h = seed ^ 0xcbf29ce484222325u;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)key[i];
        h *= 0x100000001b3u;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdu;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53u;
    h ^= h >> 33;
    return h;
}

static struct limit_shard *shard_of(struct limit_zone *zone, uint64_t hash)
{
    return &zone->shards[zone->shard_bits == 0 ? 0 : hash >> (64 - zone->shard_bits)];
}

static void lru_unlink(struct limit_shard *shard, struct limit_node *node)
{
    if (node->newer != NULL)
        node->newer->older = node->older;
    else
        shard->newest = node->older;
    if (node->older != NULL)
        node->older->newer = node->newer;
    else
        shard->oldest = node->newer;
}

static void lru_push(struct limit_shard *shard, struct limit_node *node)
{
    node->newer = NULL;
    node->older = shard->newest;
    if (shard->newest != NULL)
        shard->newest->newer = node;
    shard->newest = node;
    if (shard->oldest == NULL)
        shard->oldest = node;
}

static void node_remove(struct limit_shard *shard, struct limit_node *node)
{
    struct limit_node **link = &shard->buckets[node->hash & shard->bucket_mask];
    while (*link != node)
        link = &(*link)->chain;
    *link = node->chain;
    lru_unlink(shard, node);
    shard->used -= limit_zone_entry_bytes() + node->key_len;
    free(node);
}

/* The entry for the key, made the most recently used; NULL: none. */
static struct limit_node *node_find(struct limit_shard *shard, uint64_t hash, const char *key,
                                    size_t len)
{
    for (struct limit_node *n = shard->buckets[hash & shard->bucket_mask]; n != NULL;
         n = n->chain) {
        if (n->hash == hash && n->key_len == len && memcmp(n->key, key, len) == 0) {
            lru_unlink(shard, n);
            lru_push(shard, n);
            return n;
        }
    }
    return NULL;
}

/* A new entry, after evicting the least recently used ones that no
 * exchange holds until it fits; NULL when it cannot (or no memory). */
static struct limit_node *node_add(struct limit_shard *shard, uint64_t hash, const char *key,
                                   size_t len)
{
    size_t need = limit_zone_entry_bytes() + len;
    if (need > shard->budget)
        return NULL;
    while (shard->used + need > shard->budget) {
        struct limit_node *victim = shard->oldest;
        for (int i = 0; victim != NULL && victim->conns > 0 && i < EVICT_SCAN; i++)
            victim = victim->newer;
        if (victim == NULL || victim->conns > 0)
            return NULL;
        node_remove(shard, victim);
    }
    struct limit_node *node = malloc(sizeof(*node) + len);
    if (node == NULL)
        return NULL;
    *node = (struct limit_node){.hash = hash, .key_len = (uint16_t)len};
    memcpy(node->key, key, len);
    struct limit_node **bucket = &shard->buckets[hash & shard->bucket_mask];
    node->chain = *bucket;
    *bucket = node;
    lru_push(shard, node);
    shard->used += need;
    return node;
}

int64_t limit_zone_req(struct limit_zone *zone, const char *key, size_t key_len, uint64_t now_ms,
                       uint64_t rate, uint64_t burst, uint64_t delay)
{
    assert(zone->kind == LIMIT_ZONE_REQ && rate > 0 && key_len <= LIMIT_KEY_MAX);
    uint64_t hash = hash_key(zone->seed, key, key_len);
    struct limit_shard *shard = shard_of(zone, hash);
    int64_t verdict = 0;
    pthread_mutex_lock(&shard->lock);
    struct limit_node *node = node_find(shard, hash, key, key_len);
    if (node == NULL) {
        /* A new key passes, as in nginx; one that finds no room too. */
        node = node_add(shard, hash, key, key_len);
        if (node != NULL)
            node->last_ms = now_ms;
        shard->counts.passed++;
        pthread_mutex_unlock(&shard->lock);
        return 0;
    }
    /* nginx's leaky bucket: drained at `rate` since it was last counted,
     * one request (1000) added.  The elapsed time is capped so that the
     * product cannot overflow; a day drains any bucket. */
    uint64_t elapsed = now_ms > node->last_ms ? now_ms - node->last_ms : 0;
    if (elapsed > 86400000u)
        elapsed = 86400000u;
    uint64_t drained = rate * elapsed / 1000;
    uint64_t excess = (node->excess > drained ? node->excess - drained : 0) + 1000;
    if (excess > burst) {
        shard->counts.rejected++;
        verdict = -1;
    } else {
        node->excess = excess;
        node->last_ms = now_ms;
        if (delay == UINT64_MAX || excess <= delay) {
            shard->counts.passed++;
        } else {
            shard->counts.delayed++;
            verdict = (int64_t)((excess - delay) * 1000 / rate);
            if (verdict == 0)
                verdict = 1;
        }
    }
    pthread_mutex_unlock(&shard->lock);
    return verdict;
}

bool limit_zone_req_over(struct limit_zone *zone, const char *key, size_t key_len, uint64_t now_ms,
                         uint64_t rate, uint64_t burst)
{
    assert(zone->kind == LIMIT_ZONE_REQ && rate > 0 && key_len <= LIMIT_KEY_MAX);
    uint64_t hash = hash_key(zone->seed, key, key_len);
    struct limit_shard *shard = shard_of(zone, hash);
    pthread_mutex_lock(&shard->lock);
    struct limit_node *node = node_find(shard, hash, key, key_len);
    bool over = false;
    if (node != NULL) { /* limit_zone_req()'s bucket, drained to now */
        uint64_t elapsed = now_ms > node->last_ms ? now_ms - node->last_ms : 0;
        if (elapsed > 86400000u)
            elapsed = 86400000u;
        uint64_t drained = rate * elapsed / 1000;
        over = (node->excess > drained ? node->excess - drained : 0) + 1000 > burst;
    }
    if (over)
        shard->counts.rejected++;
    pthread_mutex_unlock(&shard->lock);
    return over;
}

struct limit_node *limit_zone_conn(struct limit_zone *zone, const char *key, size_t key_len,
                                   unsigned max)
{
    assert(zone->kind == LIMIT_ZONE_CONN && key_len <= LIMIT_KEY_MAX);
    uint64_t hash = hash_key(zone->seed, key, key_len);
    struct limit_shard *shard = shard_of(zone, hash);
    pthread_mutex_lock(&shard->lock);
    struct limit_node *node = node_find(shard, hash, key, key_len);
    if (node == NULL)
        node = node_add(shard, hash, key, key_len);
    if (node == NULL || node->conns >= max) {
        shard->counts.rejected++;
        node = NULL;
    } else {
        node->conns++;
        shard->counts.passed++;
    }
    pthread_mutex_unlock(&shard->lock);
    return node;
}

void limit_zone_conn_end(struct limit_zone *zone, struct limit_node *node)
{
    struct limit_shard *shard = shard_of(zone, node->hash);
    pthread_mutex_lock(&shard->lock);
    assert(node->conns > 0);
    node->conns--;
    pthread_mutex_unlock(&shard->lock);
}

/* ---------------------------------------------------------------- registry */

static void zone_free(struct limit_zone *zone)
{
    size_t shards = (size_t)1 << zone->shard_bits;
    for (size_t i = 0; zone->shards != NULL && i < shards; i++) {
        struct limit_shard *shard = &zone->shards[i];
        struct limit_node *node = shard->newest;
        while (node != NULL) {
            struct limit_node *older = node->older;
            assert(node->conns == 0); /* every exchange gave its count back */
            free(node);
            node = older;
        }
        free(shard->buckets);
        pthread_mutex_destroy(&shard->lock);
    }
    free(zone->shards);
    free(zone->name);
    free(zone);
}

/* One shard per 8 KiB up to 64: a small zone is not cut into parts too
 * small for its keys. */
static struct limit_zone *zone_new(const char *name, enum limit_zone_kind kind, size_t size)
{
    struct limit_zone *zone = calloc(1, sizeof(*zone));
    if (zone == NULL)
        return NULL;
    zone->name = strdup(name);
    zone->kind = kind;
    zone->size = size;
    zone->refs = 1;
    while (zone->shard_bits < 6 && (size / 8192) >> (zone->shard_bits + 1) > 0)
        zone->shard_bits++;
    size_t shards = (size_t)1 << zone->shard_bits;
    zone->shards = aligned_alloc(64, shards * sizeof(*zone->shards));
    if (zone->name == NULL || zone->shards == NULL) {
        free(zone->shards);
        zone->shards = NULL;
        zone_free(zone);
        return NULL;
    }
    memset(zone->shards, 0, shards * sizeof(*zone->shards));
    size_t budget = size / shards;
    /* About one bucket per entry of a short key. */
    size_t buckets = 8;
    while (buckets < budget / (limit_zone_entry_bytes() + 16))
        buckets *= 2;
    for (size_t i = 0; i < shards; i++) {
        struct limit_shard *shard = &zone->shards[i];
        pthread_mutex_init(&shard->lock, NULL);
        shard->budget = budget;
        shard->bucket_mask = buckets - 1;
        shard->buckets = calloc(buckets, sizeof(*shard->buckets));
        if (shard->buckets == NULL) {
            zone_free(zone); /* the shards not yet set are zero: nothing to free */
            return NULL;
        }
    }
    if (getrandom(&zone->seed, sizeof(zone->seed), GRND_NONBLOCK) != (ssize_t)sizeof(zone->seed))
        zone->seed = (uint64_t)(uintptr_t)zone ^ 0x9e3779b97f4a7c15u;
    return zone;
}

int limit_zone_get(const char *name, enum limit_zone_kind kind, size_t size,
                   struct limit_zone **out)
{
    pthread_mutex_lock(&registry_lock);
    struct limit_zone *zone = NULL;
    for (struct limit_zone *z = registry; z != NULL; z = z->next) {
        if (z->replaced || strcmp(z->name, name) != 0)
            continue;
        if (z->kind == kind && z->size == size) {
            z->refs++;
            zone = z;
        } else {
            z->replaced = true; /* its generations keep it until they go */
        }
        break;
    }
    if (zone == NULL) {
        zone = zone_new(name, kind, size);
        if (zone != NULL) {
            zone->next = registry;
            registry = zone;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    *out = zone;
    return zone != NULL ? 0 : -ENOMEM;
}

void limit_zone_put(struct limit_zone *zone)
{
    if (zone == NULL)
        return;
    pthread_mutex_lock(&registry_lock);
    assert(zone->refs > 0);
    bool last = --zone->refs == 0;
    if (last) {
        struct limit_zone **link = &registry;
        while (*link != zone)
            link = &(*link)->next;
        *link = zone->next;
    }
    pthread_mutex_unlock(&registry_lock);
    if (last)
        zone_free(zone);
}

void limit_zone_each(void (*fn)(const char *name, enum limit_zone_kind kind,
                                const struct limit_zone_counts *counts, void *arg),
                     void *arg)
{
    pthread_mutex_lock(&registry_lock);
    for (struct limit_zone *z = registry; z != NULL; z = z->next) {
        if (z->replaced)
            continue;
        struct limit_zone_counts sum = {0};
        for (size_t i = 0; i < (size_t)1 << z->shard_bits; i++) {
            struct limit_shard *shard = &z->shards[i];
            pthread_mutex_lock(&shard->lock);
            sum.passed += shard->counts.passed;
            sum.delayed += shard->counts.delayed;
            sum.rejected += shard->counts.rejected;
            pthread_mutex_unlock(&shard->lock);
        }
        fn(z->name, z->kind, &sum, arg);
    }
    pthread_mutex_unlock(&registry_lock);
}
