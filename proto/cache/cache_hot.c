/*
 * cache_hot.c: the per-thread table of open cache entries (cache_hot.h).
 * Direct-mapped: an entry's slot is given by its id (an MD5, evenly
 * spread), and a new one replaces whatever held it.  Freed with its
 * thread.
 */
#include "proto/cache/cache_hot.h"

#include "proto/thread_exit.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct hot_table {
    struct cache_hot_entry slots[CACHE_HOT_SLOTS];
};

static _Thread_local struct hot_table *table;

static void slot_clear(struct cache_hot_entry *e)
{
    if (e->fd >= 0)
        close(e->fd);
    free(e->header);
    free(e->body);
    memset(e, 0, sizeof(*e));
    e->fd = -1;
}

static void table_free(void *arg)
{
    struct hot_table *t = arg;
    for (size_t i = 0; i < CACHE_HOT_SLOTS; i++)
        slot_clear(&t->slots[i]);
    free(t);
}

static struct cache_hot_entry *slot_of(const uint8_t id[CACHE_ID_LEN])
{
    return &table->slots[(id[0] | (unsigned)id[1] << 8) % CACHE_HOT_SLOTS];
}

const struct cache_hot_entry *cache_hot_get(const struct cache_zone *zone,
                                            const uint8_t id[CACHE_ID_LEN], uint64_t version,
                                            int64_t now)
{
    if (table == NULL)
        return NULL;
    struct cache_hot_entry *e = slot_of(id);
    if (e->fd < 0 || e->zone != zone || e->version != version ||
        memcmp(e->id, id, CACHE_ID_LEN) != 0)
        return NULL;
    /* A body in memory is the copy checked when it was read: the file
     * is looked at once a second (a system call is a third of a small
     * hit's), for a removal or a change from outside. */
    if (e->body != NULL && e->checked == now)
        return e;
    /* The file as it was checked: a file written over in place (its
     * time changes) is read and checked again, so that a corrupted one is
     * never served from what was kept of it. */
    struct stat st;
    if (fstat(e->fd, &st) == -1 || st.st_size != e->st.st_size ||
        st.st_mtim.tv_sec != e->st.st_mtim.tv_sec || st.st_mtim.tv_nsec != e->st.st_mtim.tv_nsec ||
        st.st_ctim.tv_sec != e->st.st_ctim.tv_sec || st.st_ctim.tv_nsec != e->st.st_ctim.tv_nsec ||
        st.st_nlink == 0) {
        slot_clear(e);
        return NULL;
    }
    e->checked = now;
    return e;
}

const struct cache_hot_entry *cache_hot_put(const struct cache_zone *zone,
                                            const uint8_t id[CACHE_ID_LEN], uint64_t version,
                                            int fd, const struct stat *st, int64_t now,
                                            const uint8_t *header, const struct cache_file_meta *m,
                                            const uint8_t *body)
{
    if (table == NULL) {
        if ((table = calloc(1, sizeof(*table))) == NULL)
            return NULL;
        for (size_t i = 0; i < CACHE_HOT_SLOTS; i++)
            table->slots[i].fd = -1;
        if (thread_exit_call(table_free, table) != 0) {
            free(table);
            table = NULL;
            return NULL;
        }
    }
    uint8_t *h = malloc(m->header_len);
    bool small = body != NULL && m->body_len <= CACHE_HOT_SMALL;
    uint8_t *b = small ? malloc(m->body_len > 0 ? m->body_len : 1) : NULL;
    if (h == NULL || (small && b == NULL)) {
        free(h);
        free(b);
        return NULL;
    }
    struct cache_hot_entry *e = slot_of(id);
    slot_clear(e);
    memcpy(h, header, m->header_len);
    if (small)
        memcpy(b, body, m->body_len);
    e->zone = zone;
    memcpy(e->id, id, CACHE_ID_LEN);
    e->version = version;
    e->fd = fd;
    e->st = *st;
    e->checked = now;
    e->header = h;
    e->body = b;
    /* The strings, moved to the copy of the header. */
    e->m = *m;
    const struct http_str *from[] = {&m->key, &m->vary, &m->variant, &m->head};
    struct http_str *to[] = {&e->m.key, &e->m.vary, &e->m.variant, &e->m.head};
    for (size_t i = 0; i < 4; i++)
        to[i]->data = (const char *)h + (from[i]->data - (const char *)header);
    return e;
}
