/*
 * hpack_table.c: HPACK's static and dynamic tables (hpack_table.h).  The
 * dynamic entries' bytes sit oldest first in one buffer, made as large
 * as the entries need (doubling, from 256 bytes and 8 entries, up to the
 * table's maximum size): a client that indexes a few short fields keeps a
 * few hundred bytes, not the 5.5 KiB a 4096-byte table may take.  An
 * eviction only moves `head`, and when the tail has no room left for an
 * entry the live bytes are moved to the front (the block was grown to
 * hold them and the new one).
 */
#include "proto/http2/hpack_table.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* The overhead each entry counts for (4.1). */
#define ENTRY_OVERHEAD 32
/* A block's smallest size, and its smallest number of entries. */
#define BLOCK_MIN_BYTES   256
#define BLOCK_MIN_ENTRIES 8

/* RFC 7541 appendix A. */
#define S(n, v)                                                                                    \
    {                                                                                              \
        (const uint8_t *)n, (const uint8_t *)v, sizeof(n) - 1, sizeof(v) - 1                       \
    }
static const struct {
    const uint8_t *name;
    const uint8_t *value;
    uint8_t name_len;
    uint8_t value_len;
} hpack_static[HPACK_TABLE_STATIC] = {
    S(":authority", ""),
    S(":method", "GET"),
    S(":method", "POST"),
    S(":path", "/"),
    S(":path", "/index.html"),
    S(":scheme", "http"),
    S(":scheme", "https"),
    S(":status", "200"),
    S(":status", "204"),
    S(":status", "206"),
    S(":status", "304"),
    S(":status", "400"),
    S(":status", "404"),
    S(":status", "500"),
    S("accept-charset", ""),
    S("accept-encoding", "gzip, deflate"),
    S("accept-language", ""),
    S("accept-ranges", ""),
    S("accept", ""),
    S("access-control-allow-origin", ""),
    S("age", ""),
    S("allow", ""),
    S("authorization", ""),
    S("cache-control", ""),
    S("content-disposition", ""),
    S("content-encoding", ""),
    S("content-language", ""),
    S("content-length", ""),
    S("content-location", ""),
    S("content-range", ""),
    S("content-type", ""),
    S("cookie", ""),
    S("date", ""),
    S("etag", ""),
    S("expect", ""),
    S("expires", ""),
    S("from", ""),
    S("host", ""),
    S("if-match", ""),
    S("if-modified-since", ""),
    S("if-none-match", ""),
    S("if-range", ""),
    S("if-unmodified-since", ""),
    S("last-modified", ""),
    S("link", ""),
    S("location", ""),
    S("max-forwards", ""),
    S("proxy-authenticate", ""),
    S("proxy-authorization", ""),
    S("range", ""),
    S("referer", ""),
    S("refresh", ""),
    S("retry-after", ""),
    S("server", ""),
    S("set-cookie", ""),
    S("strict-transport-security", ""),
    S("transfer-encoding", ""),
    S("user-agent", ""),
    S("vary", ""),
    S("via", ""),
    S("www-authenticate", ""),
};
#undef S

void hpack_table_init(struct hpack_table *t, uint32_t max_size)
{
    assert(max_size <= HPACK_TABLE_SIZE_MAX);
    *t = (struct hpack_table){.max_size = max_size};
}

void hpack_table_free(struct hpack_table *t)
{
    free(t->entries);
    hpack_table_init(t, t->max_size);
}

static struct hpack_entry *entry_at(const struct hpack_table *t, uint32_t i)
{
    /* i = 0 the newest */
    assert(i < t->count);
    return &t->entries[(t->first + t->count - 1 - i) % t->slots];
}

/* Up to the last 8 bytes of p[0, n), as a number. */
static uint64_t tail_word(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    if (n >= 8) {
        memcpy(&v, p + n - 8, sizeof(v));
        return v;
    }
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* A byte of a field's name and value, kept with its entry: from their
 * lengths and last bytes, where the values of one name usually differ
 * (a date's seconds), not from all their bytes.  A field is compared
 * with the entries of its byte alone, for its value: the date of each
 * past second is in the table, and a new date (a field the encoder does
 * not find by its hint) need not be compared with them all. */
static unsigned hash(const uint8_t *name, size_t name_len, const uint8_t *value, size_t value_len)
{
    uint64_t h = ((uint64_t)name_len << 32 | value_len) ^ tail_word(value, value_len);
    h = (h ^ tail_word(name, name_len) * 0x9e3779b97f4a7c15u) * 0xff51afd7ed558ccdu;
    return (unsigned)(h >> 56);
}

static void evict_oldest(struct hpack_table *t)
{
    assert(t->count > 0);
    struct hpack_entry *e = &t->entries[t->first];
    t->size -= e->name_len + e->value_len + ENTRY_OVERHEAD;
    t->head = e->off + e->name_len + e->value_len;
    t->first = (t->first + 1) % t->slots;
    if (--t->count == 0)
        t->head = t->tail = 0;
}

/* Moves the entries into a block of `cap` bytes and `slots` entries,
 * which hold them. */
static bool reblock(struct hpack_table *t, uint32_t cap, uint32_t slots)
{
    assert(slots >= t->count);
    struct hpack_entry *entries = NULL;
    if (slots > 0) {
        entries = malloc((size_t)slots * sizeof(*entries) + cap);
        if (entries == NULL)
            return false;
    }
    uint8_t *buf = (uint8_t *)(entries + slots);
    uint32_t tail = 0;
    for (uint32_t i = 0; i < t->count; i++) {
        const struct hpack_entry *e = &t->entries[(t->first + i) % t->slots];
        uint32_t n = e->name_len + e->value_len;
        assert(i < slots && tail + n <= cap);
        memcpy(buf + tail, t->buf + e->off, n);
        entries[i] = *e;
        entries[i].off = tail;
        tail += n;
    }
    free(t->entries);
    t->entries = entries;
    t->buf = slots > 0 ? buf : NULL;
    t->cap = cap;
    t->slots = slots;
    t->first = 0;
    t->head = 0;
    t->tail = tail;
    return true;
}

bool hpack_table_resize(struct hpack_table *t, uint32_t max_size)
{
    assert(max_size <= HPACK_TABLE_SIZE_MAX);
    while (t->size > max_size)
        evict_oldest(t);
    t->max_size = max_size;
    if (t->count == 0) {
        free(t->entries);
        hpack_table_init(t, max_size);
        return true;
    }
    uint32_t cap = t->cap < max_size ? t->cap : max_size;
    uint32_t slots = t->slots < max_size / ENTRY_OVERHEAD ? t->slots : max_size / ENTRY_OVERHEAD;
    return (cap == t->cap && slots == t->slots) || reblock(t, cap, slots);
}

/* `have` doubled (from `least`) until it reaches `want`, but not past
 * `most`. */
static uint32_t grown(uint32_t have, uint32_t want, uint32_t least, uint32_t most)
{
    uint64_t n = have > least ? have : least;
    while (n < want)
        n *= 2;
    return n < most ? (uint32_t)n : most;
}

bool hpack_table_add(struct hpack_table *t, const uint8_t *name, size_t name_len,
                     const uint8_t *value, size_t value_len)
{
    assert(t->buf == NULL || name + name_len <= t->buf || name >= t->buf + t->cap);
    assert(t->buf == NULL || value + value_len <= t->buf || value >= t->buf + t->cap);
    if (name_len + value_len + ENTRY_OVERHEAD > t->max_size) {
        while (t->count > 0)
            evict_oldest(t);
        return true;
    }
    /* The block first, so that a failure leaves the table as it was:
     * grown to hold the live bytes and the new ones, and one entry more,
     * before any eviction (at the maximum, evictions make the room). */
    uint32_t n = (uint32_t)(name_len + value_len);
    uint32_t live = t->tail - t->head;
    uint32_t max_slots = t->max_size / ENTRY_OVERHEAD;
    if ((t->cap < t->max_size && live + n > t->cap) ||
        (t->slots < max_slots && t->count + 1 > t->slots) || t->buf == NULL) {
        uint32_t cap = grown(t->cap, live + n, BLOCK_MIN_BYTES, t->max_size);
        uint32_t slots = grown(t->slots, t->count + 1, BLOCK_MIN_ENTRIES, max_slots);
        if (!reblock(t, cap, slots))
            return false;
    }
    /* The entry fits the maximum, so the block is not empty. */
    assert(t->buf != NULL && t->slots > 0);
    while (t->size + n + ENTRY_OVERHEAD > t->max_size)
        evict_oldest(t);
    if (t->cap - t->tail < n) { /* the live bytes to the front */
        uint32_t delta = t->head;
        memmove(t->buf, t->buf + t->head, t->tail - t->head);
        for (uint32_t i = 0; i < t->count; i++)
            t->entries[(t->first + i) % t->slots].off -= delta;
        t->tail -= delta;
        t->head = 0;
    }
    assert(t->cap - t->tail >= n && t->count < t->slots);
    uint32_t off = t->tail;
    memcpy(t->buf + off, name, name_len);
    memcpy(t->buf + off + name_len, value, value_len);
    t->tail += n;
    t->entries[(t->first + t->count) % t->slots] = (struct hpack_entry){
        off, (uint32_t)name_len, hash(name, name_len, value, value_len), (uint32_t)value_len, 0};
    t->count++;
    t->added++;
    t->size += n + ENTRY_OVERHEAD;
    return true;
}

bool hpack_table_get(const struct hpack_table *t, uint64_t index, struct hpack_field *f)
{
    if (index == 0)
        return false;
    if (index <= HPACK_TABLE_STATIC) {
        f->name = hpack_static[index - 1].name;
        f->name_len = hpack_static[index - 1].name_len;
        f->value = hpack_static[index - 1].value;
        f->value_len = hpack_static[index - 1].value_len;
        return true;
    }
    if (index - HPACK_TABLE_STATIC > t->count)
        return false;
    const struct hpack_entry *e = entry_at(t, (uint32_t)(index - HPACK_TABLE_STATIC - 1));
    f->name = t->buf + e->off;
    f->name_len = e->name_len;
    f->value = t->buf + e->off + e->name_len;
    f->value_len = e->value_len;
    return true;
}

/* The 8 (or 4) bytes at p, unaligned. */
static uint64_t load8(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint32_t load4(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* n bytes alike.  The first and the last eight bytes (or four, or the
 * few there are) are compared as words before a call to memcmp(), for
 * the middle of a string longer than 16: a name or value of the same
 * length as another usually differs in one of its ends (a date in its
 * seconds, the last bytes), and every field the encoder does not find
 * by its hint is compared with the static entries of its name's length
 * (eleven of seven bytes, ":method" to ":status") and with the whole
 * dynamic table, where a date of each past second may be. */
static bool equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    if (n >= 8) {
        if (load8(a) != load8(b) || load8(a + n - 8) != load8(b + n - 8))
            return false;
        return n <= 16 || memcmp(a + 8, b + 8, n - 16) == 0;
    }
    if (n >= 4)
        return load4(a) == load4(b) && load4(a + n - 4) == load4(b + n - 4);
    /* 0 to 3 bytes: the first, the second and the last are all of them */
    return n == 0 || (a[0] == b[0] && a[n - 1] == b[n - 1] && a[n / 2] == b[n / 2]);
}

static bool same(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    return alen == blen && equal(a, b, alen);
}

/* The static table's entries by the length of their names (index - 1,
 * in index order within a length): hpack_static_by_len[k] for k from
 * hpack_static_len_at[len] to hpack_static_len_at[len + 1].  A name is
 * compared with the few entries of its length, not with all 61 (checked
 * against the table by tests/proto/test_hpack). */
#define HPACK_STATIC_NAME_MAX 27
static const uint8_t hpack_static_by_len[HPACK_TABLE_STATIC] = {
    20, 59, 32, 33, 36, 37, 44, 58, 3,  4,  21, 49, 18, 31, 34, 53, 1,  2,  5,  6,  7,
    8,  9,  10, 11, 12, 13, 35, 50, 51, 38, 41, 45, 0,  54, 57, 52, 30, 46, 17, 22, 23,
    29, 40, 43, 14, 27, 15, 16, 25, 26, 28, 60, 39, 56, 47, 24, 42, 48, 55, 19,
};
static const uint8_t hpack_static_len_at[HPACK_STATIC_NAME_MAX + 2] = {
    0,  0,  0,  0,  2,  8,  12, 16, 30, 33, 33, 36, 37, 39, 45,
    47, 49, 53, 55, 56, 59, 59, 59, 59, 59, 59, 60, 60, 61,
};

uint32_t hpack_table_find(const struct hpack_table *t, const uint8_t *name, size_t name_len,
                          const uint8_t *value, size_t value_len, bool *both)
{
    uint32_t by_name = 0;
    *both = false;
    if (name_len <= HPACK_STATIC_NAME_MAX) {
        const uint8_t *at = hpack_static_len_at + name_len; /* two entries: from, to */
        for (unsigned k = at[0]; k < at[1]; k++) {
            unsigned i = hpack_static_by_len[k];
            assert(hpack_static[i].name_len == name_len);
            if (!equal(name, hpack_static[i].name, name_len))
                continue;
            if (same(value, value_len, hpack_static[i].value, hpack_static[i].value_len)) {
                *both = true;
                return i + 1;
            }
            if (by_name == 0)
                by_name = i + 1;
        }
    }
    /* Past the static table, only the entries of the field's hash can
     * have its value, and they are all that is compared once a static
     * entry has its name. */
    unsigned h = hash(name, name_len, value, value_len);
    /* The ring walked back from the newest entry (entry_at()'s order),
     * without a division an entry. */
    uint32_t at = t->count > 0 ? (t->first + t->count - 1) % t->slots : 0;
    for (uint32_t i = 0; i < t->count; i++, at = at == 0 ? t->slots - 1 : at - 1) {
        const struct hpack_entry *e = &t->entries[at];
        assert(e == entry_at(t, i));
        bool hashed = e->hash == h;
        if ((!hashed && by_name != 0) || !same(name, name_len, t->buf + e->off, e->name_len))
            continue;
        if (hashed && same(value, value_len, t->buf + e->off + e->name_len, e->value_len)) {
            *both = true;
            return HPACK_TABLE_STATIC + 1 + i;
        }
        if (by_name == 0)
            by_name = HPACK_TABLE_STATIC + 1 + i;
    }
    return by_name;
}

/* A dynamic entry's id: its number (hpack_table's `added`) in the low 31
 * bits, with the top bit, so that no id is a static index. */
#define ID_DYNAMIC 0x80000000u
#define ID_NUMBER  0x7fffffffu

uint32_t hpack_table_id(const struct hpack_table *t, uint32_t index)
{
    assert(index > 0 && index <= HPACK_TABLE_STATIC + t->count);
    if (index <= HPACK_TABLE_STATIC)
        return index;
    /* index 62 is the newest, number added - 1 */
    return ID_DYNAMIC | ((t->added - (index - HPACK_TABLE_STATIC)) & ID_NUMBER);
}

uint32_t hpack_table_index_of(const struct hpack_table *t, uint32_t id)
{
    if ((id & ID_DYNAMIC) == 0)
        return id; /* a static index, or 0 */
    /* The newest `count` numbers are in the table, the newest at 62;
     * modulo 2^31, as the ids hold their numbers. */
    uint32_t back = (t->added - id) & ID_NUMBER;
    return back >= 1 && back <= t->count ? HPACK_TABLE_STATIC + back : 0;
}

bool hpack_table_holds(const struct hpack_table *t, uint32_t index, const uint8_t *name,
                       size_t name_len, const uint8_t *value, size_t value_len)
{
    struct hpack_field f;
    if (!hpack_table_get(t, index, &f)) {
        assert(!"an entry's index");
        return false;
    }
    return same(name, name_len, f.name, f.name_len) && same(value, value_len, f.value, f.value_len);
}

void hpack_table_mark(struct hpack_table *t, uint32_t index)
{
    assert(index > 0 && index <= HPACK_TABLE_STATIC + t->count);
    if (index <= HPACK_TABLE_STATIC)
        t->static_marks |= (uint64_t)1 << (index - 1);
    else
        entry_at(t, index - HPACK_TABLE_STATIC - 1)->marked = 1;
}

bool hpack_table_marked(const struct hpack_table *t, uint32_t index)
{
    assert(index > 0 && index <= HPACK_TABLE_STATIC + t->count);
    if (index <= HPACK_TABLE_STATIC)
        return (t->static_marks >> (index - 1) & 1) != 0;
    return entry_at(t, index - HPACK_TABLE_STATIC - 1)->marked;
}
