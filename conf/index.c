/*
 * index.c: a hash index from byte strings to numbers, so that the checks
 * that find an earlier item of the same name (a duplicate location, a
 * listen address shared by servers, a server name on an address) take
 * constant time, not a walk over every earlier item.
 */
#include "registry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct conf_index_slot {
    char *key; /* NULL: empty */
    size_t len;
    uint64_t hash;
    size_t value;
};

/* FNV-1a: the keys come from the operator's own config, not from peers,
 * so no seed is needed against chosen collisions. */
static uint64_t hash_bytes(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3u;
    }
    return h;
}

static struct conf_index_slot *probe(struct conf_index_slot *slots, size_t mask, const void *key,
                                     size_t len, uint64_t hash)
{
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        struct conf_index_slot *slot = &slots[i];
        if (slot->key == NULL ||
            (slot->hash == hash && slot->len == len && memcmp(slot->key, key, len) == 0))
            return slot;
    }
}

/* Doubles the table, keeping it at most half full. */
static int grow(struct conf_index *index)
{
    size_t cap = index->slots == NULL ? 16 : (index->mask + 1) * 2;
    struct conf_index_slot *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; index->slots != NULL && i <= index->mask; i++) {
        struct conf_index_slot *old = &index->slots[i];
        if (old->key != NULL)
            *probe(slots, cap - 1, old->key, old->len, old->hash) = *old;
    }
    free(index->slots);
    index->slots = slots;
    index->mask = cap - 1;
    return 0;
}

bool conf__index_find(const struct conf_index *index, const void *key, size_t len, size_t *value)
{
    if (index->slots == NULL)
        return false;
    const struct conf_index_slot *slot =
        probe(index->slots, index->mask, key, len, hash_bytes(key, len));
    if (slot->key == NULL)
        return false;
    *value = slot->value;
    return true;
}

int conf__index_add(struct conf_index *index, const void *key, size_t len, size_t value,
                    size_t *existing)
{
    if ((index->slots == NULL || 2 * (index->count + 1) > index->mask + 1) && grow(index) != 0)
        return -ENOMEM;
    uint64_t hash = hash_bytes(key, len);
    struct conf_index_slot *slot = probe(index->slots, index->mask, key, len, hash);
    if (slot->key != NULL) {
        if (existing != NULL)
            *existing = slot->value;
        return 1;
    }
    char *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, key, len);
    *slot = (struct conf_index_slot){.key = copy, .len = len, .hash = hash, .value = value};
    index->count++;
    return 0;
}

void conf__index_free(struct conf_index *index)
{
    for (size_t i = 0; index->slots != NULL && i <= index->mask; i++)
        free(index->slots[i].key);
    free(index->slots);
    *index = (struct conf_index){0};
}
