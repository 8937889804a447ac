/*
 * hpack_encode.c: the HPACK encoder (hpack.h).  A field in a table goes
 * out as its index; else as a literal naming a table's entry when one has
 * the name, with the value Huffman-coded when that is shorter.
 */
#include "proto/http2/hpack.h"
#include "proto/http2/hpack_huffman.h"
#include "proto/http2/hpack_table.h"

#include <assert.h>
#include <string.h>

void hpack_encoder_init(struct hpack_encoder *e, uint32_t limit)
{
    if (limit > HPACK_TABLE_SIZE_MAX)
        limit = HPACK_TABLE_SIZE_MAX;
    *e = (struct hpack_encoder){.limit = limit};
    uint32_t size = limit < HPACK_TABLE_DEFAULT_SIZE ? limit : HPACK_TABLE_DEFAULT_SIZE;
    hpack_table_init(&e->table, size);
    /* Below the default the peer must learn our size from the first block. */
    e->update_pending = size != HPACK_TABLE_DEFAULT_SIZE;
    e->update_min = size;
}

void hpack_encoder_free(struct hpack_encoder *e)
{
    hpack_table_free(&e->table);
}

void hpack_encoder_set_peer_size(struct hpack_encoder *e, uint32_t size)
{
    if (size > e->limit)
        size = e->limit;
    if (size == e->table.max_size)
        return;
    /* A failed shrink of the block keeps the entries in the larger one:
     * still correct, so nothing to undo. */
    (void)hpack_table_resize(&e->table, size);
    if (!e->update_pending || size < e->update_min)
        e->update_min = size;
    e->update_pending = true;
}

/* An integer with a `bits`-bit prefix, the prefix's other bits `first`. */
static size_t put_int(uint8_t *out, unsigned bits, uint8_t first, uint64_t v)
{
    uint64_t mask = (1u << bits) - 1;
    if (v < mask) {
        out[0] = (uint8_t)(first | v);
        return 1;
    }
    out[0] = (uint8_t)(first | mask);
    v -= mask;
    size_t n = 1;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(0x80 | (v & 0x7f));
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static size_t put_string(uint8_t *out, const uint8_t *s, size_t len)
{
    size_t h = hpack_huffman_encoded_len(s, len);
    if (h <= len) { /* as RFC 7541 appendix C does when equal */
        size_t n = put_int(out, 7, 0x80, h);
        return n + hpack_huffman_encode(out + n, s, len);
    }
    size_t n = put_int(out, 7, 0, len);
    if (len > 0)
        memcpy(out + n, s, len);
    return n + len;
}

/* A prefix integer takes at most this many bytes for a size_t. */
#define INT_MAX_BYTES 11

size_t hpack_encode_bound(const struct hpack_field *fields, size_t n)
{
    size_t bound = 2 * INT_MAX_BYTES; /* two size updates */
    for (size_t i = 0; i < n; i++)
        bound += 2 * INT_MAX_BYTES + fields[i].name_len + fields[i].value_len;
    return bound;
}

/* hpack_table_find() for the field at place `i` of a block: the entry the
 * field at that place matched last, when it matches again, else the
 * tables searched (a search was most of a response head's encoding, a
 * walk of the whole dynamic table for each field).  The same answer:
 * the encoder adds a field only when no entry has its name and value,
 * so an entry that does is the only one, static or dynamic. */
static uint32_t find(const struct hpack_encoder *e, size_t i, const struct hpack_field *f,
                     bool *both)
{
    if (i < HPACK_ENCODER_HINTS) {
        uint32_t index = hpack_table_index_of(&e->table, e->hint[i]);
        if (index != 0 &&
            hpack_table_holds(&e->table, index, f->name, f->name_len, f->value, f->value_len)) {
            assert(hpack_table_find(&e->table, f->name, f->name_len, f->value, f->value_len,
                                    both) == index &&
                   *both);
            *both = true;
            return index;
        }
    }
    return hpack_table_find(&e->table, f->name, f->name_len, f->value, f->value_len, both);
}

size_t hpack_encode(struct hpack_encoder *e, const struct hpack_field *fields, const uint8_t *how,
                    size_t n, uint8_t *out)
{
    size_t len = 0;
    if (e->update_pending) { /* the smallest size, then the size now (4.2) */
        if (e->update_min < e->table.max_size)
            len += put_int(out + len, 5, 0x20, e->update_min);
        len += put_int(out + len, 5, 0x20, e->table.max_size);
        e->update_pending = false;
    }
    for (size_t i = 0; i < n; i++) {
        const struct hpack_field *f = &fields[i];
        uint8_t mode = how != NULL ? how[i] : HPACK_NO_INDEX;
        if (f->never_indexed)
            mode = HPACK_NEVER;
        bool both;
        uint32_t index = find(e, i, f, &both);
        if (both && mode != HPACK_NEVER) {
            len += put_int(out + len, 7, 0x80, index);
            if (i < HPACK_ENCODER_HINTS)
                e->hint[i] = hpack_table_id(&e->table, index);
            continue;
        }
        /* Added before it is written: when the table cannot get memory
         * the field goes out unindexed, and both ends' tables agree.  The
         * index was found before, as the peer looks the name up. */
        if (mode == HPACK_INDEX &&
            !hpack_table_add(&e->table, f->name, f->name_len, f->value, f->value_len))
            mode = HPACK_NO_INDEX;
        if (i < HPACK_ENCODER_HINTS) /* the new entry, if it fit the table */
            e->hint[i] = mode == HPACK_INDEX && e->table.count > 0
                             ? hpack_table_id(&e->table, HPACK_TABLE_STATIC + 1)
                             : 0;
        if (mode == HPACK_INDEX)
            len += put_int(out + len, 6, 0x40, index);
        else
            len += put_int(out + len, 4, mode == HPACK_NEVER ? 0x10 : 0x00, index);
        if (index == 0)
            len += put_string(out + len, f->name, f->name_len);
        len += put_string(out + len, f->value, f->value_len);
    }
    return len;
}
