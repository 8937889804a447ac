/*
 * hpack_decode.c: the HPACK decoder (hpack.h).  Every integer, index and
 * length from the peer is checked before use: integers fit 32 bits (as in
 * libnghttp2, which is the oracle), indexes name an entry, strings are no
 * longer than the block holds nor than libnghttp2's limit, Huffman
 * strings are decoded only into the caller's scratch, bounded.
 *
 * http2_hpack_scan.h walks the same framing while a block arrives in
 * pieces, to cut it early in front of libnghttp2; this decoder sees the
 * whole block, so it checks the lengths itself as it decodes, with the
 * same string limit (HTTP2_HPACK_MAX_STRING) and the header-list limit.
 */
#include "proto/http2/hpack.h"
#include "proto/http2/hpack_huffman.h"
#include "proto/http2/hpack_table.h"
#include "proto/http2/http2_hpack_scan.h"

#include <assert.h>
#include <string.h>

void hpack_decoder_init(struct hpack_decoder *d, uint32_t max_setting)
{
    assert(max_setting <= HPACK_TABLE_SIZE_MAX);
    *d = (struct hpack_decoder){.max_setting = max_setting, .update_min = UINT32_MAX};
    hpack_table_init(&d->table, max_setting);
}

void hpack_decoder_free(struct hpack_decoder *d)
{
    hpack_table_free(&d->table);
}

bool hpack_decoder_set_max(struct hpack_decoder *d, uint32_t max_setting)
{
    assert(max_setting <= HPACK_TABLE_SIZE_MAX);
    d->max_setting = max_setting;
    if (d->table.max_size <= max_setting)
        return true;
    d->update_required = true;
    if (max_setting < d->update_min)
        d->update_min = max_setting;
    if (!hpack_table_resize(&d->table, max_setting))
        d->broken = true;
    return !d->broken;
}

void hpack_decoder_mark(struct hpack_decoder *d)
{
    if (d->passing != 0)
        hpack_table_mark(&d->table, d->passing);
    else
        d->mark_added = true; /* kept only if the literal is indexed */
}

bool hpack_decoder_marked(const struct hpack_decoder *d)
{
    return d->passing != 0 && hpack_table_marked(&d->table, d->passing);
}

/* Where the decoding is in a block. */
struct cursor {
    const uint8_t *p, *end;
    uint8_t *scratch;
    size_t scratch_used, scratch_size;
    uint64_t list_left; /* of the header-list limit */
};

/* An integer with an `bits`-bit prefix (5.1).  False when the block ends
 * inside it or it passes 32 bits. */
static bool read_int(struct cursor *c, unsigned bits, uint32_t *v)
{
    if (c->p == c->end)
        return false;
    uint32_t mask = (1u << bits) - 1;
    uint32_t n = *c->p++ & mask;
    if (n < mask) {
        *v = n;
        return true;
    }
    for (unsigned shift = 0;; shift += 7) {
        if (c->p == c->end || shift >= 32)
            return false;
        uint32_t add = *c->p & 0x7f;
        if ((UINT32_MAX >> shift) < add)
            return false;
        add <<= shift;
        if (UINT32_MAX - add < n)
            return false;
        n += add;
        if ((*c->p++ & 0x80) == 0)
            break;
    }
    *v = n;
    return true;
}

/* A string literal (5.2), into *s and *len: a span of the block, or, if
 * Huffman-coded, of the scratch.  `extra` is the size it counts for in
 * the list beyond its length.  Returns HPACK_OK or the error. */
static enum hpack_result read_string(struct cursor *c, uint64_t extra, const uint8_t **s,
                                     size_t *len)
{
    if (c->p == c->end)
        return HPACK_ERROR;
    bool huffman = (*c->p & 0x80) != 0;
    uint32_t n;
    if (!read_int(c, 7, &n) || n > HTTP2_HPACK_MAX_STRING || n > (size_t)(c->end - c->p))
        return HPACK_ERROR;
    if (extra > c->list_left)
        return HPACK_TOO_LARGE;
    uint64_t budget = c->list_left - extra;
    if (!huffman) {
        if (n > budget)
            return HPACK_TOO_LARGE;
        *s = c->p;
        *len = n;
    } else {
        size_t room = c->scratch_size - c->scratch_used;
        size_t cap = budget < room ? (size_t)budget : room;
        uint8_t *out = c->scratch + c->scratch_used;
        long k = hpack_huffman_decode(out, cap, c->p, n);
        if (k == -1)
            return HPACK_ERROR;
        if (k < 0)
            return HPACK_TOO_LARGE;
        c->scratch_used += (size_t)k;
        *s = out;
        *len = (size_t)k;
    }
    c->p += n;
    c->list_left -= *len;
    return HPACK_OK;
}

/* Copies a name from the dynamic table into the scratch, so that adding
 * the field to the table cannot move it from under the copy. */
static bool name_to_scratch(struct cursor *c, struct hpack_field *f)
{
    if (f->name_len > c->scratch_size - c->scratch_used)
        return false;
    memcpy(c->scratch + c->scratch_used, f->name, f->name_len);
    f->name = c->scratch + c->scratch_used;
    c->scratch_used += f->name_len;
    return true;
}

/* One field representation after the first byte's kind: a literal with a
 * `bits`-bit name index (6.2). */
static enum hpack_result read_literal(struct hpack_decoder *d, struct cursor *c, unsigned bits,
                                      bool indexing, struct hpack_field *f)
{
    uint32_t index;
    if (!read_int(c, bits, &index))
        return HPACK_ERROR;
    enum hpack_result r;
    if (index == 0) {
        r = read_string(c, 32, &f->name, &f->name_len);
        if (r != HPACK_OK)
            return r;
    } else {
        if (!hpack_table_get(&d->table, index, f))
            return HPACK_ERROR;
        if (32 + (uint64_t)f->name_len > c->list_left)
            return HPACK_TOO_LARGE;
        c->list_left -= f->name_len;
        if (indexing && index > HPACK_TABLE_STATIC && !name_to_scratch(c, f))
            return HPACK_TOO_LARGE;
    }
    r = read_string(c, 32, &f->value, &f->value_len);
    if (r != HPACK_OK)
        return r;
    c->list_left -= 32;
    return HPACK_OK;
}

static enum hpack_result decode(struct hpack_decoder *d, struct cursor *c, hpack_field_fn fn,
                                void *arg)
{
    bool at_start = true; /* size updates only before the first field (4.2) */
    while (c->p < c->end) {
        uint8_t b = *c->p;
        struct hpack_field f = {0};
        bool indexing = false;
        c->scratch_used = 0;
        d->passing = 0;
        d->mark_added = false;
        if (d->update_required && (b & 0xe0) != 0x20)
            return HPACK_ERROR;
        if ((b & 0x80) != 0) { /* indexed (6.1) */
            uint32_t index;
            if (!read_int(c, 7, &index) || !hpack_table_get(&d->table, index, &f))
                return HPACK_ERROR;
            if (32 + (uint64_t)f.name_len + f.value_len > c->list_left)
                return HPACK_TOO_LARGE;
            c->list_left -= 32 + (uint64_t)f.name_len + f.value_len;
            d->passing = index;
        } else if ((b & 0xe0) == 0x20) { /* a dynamic table size update (6.3) */
            uint32_t size;
            if (!at_start || !read_int(c, 5, &size) || size > d->max_setting)
                return HPACK_ERROR;
            if (d->update_required) { /* the first after our setting fell */
                if (size > d->update_min)
                    return HPACK_ERROR;
                d->update_required = false;
                d->update_min = UINT32_MAX;
            }
            if (!hpack_table_resize(&d->table, size))
                return HPACK_ERROR;
            continue;
        } else {
            enum hpack_result r;
            if ((b & 0x40) != 0) { /* with incremental indexing (6.2.1) */
                indexing = true;
                r = read_literal(d, c, 6, true, &f);
            } else { /* without indexing (6.2.2), never indexed (6.2.3) */
                f.never_indexed = (b & 0x10) != 0;
                r = read_literal(d, c, 4, false, &f);
            }
            if (r != HPACK_OK)
                return r;
        }
        at_start = false;
        if (fn(arg, &f) != 0)
            return HPACK_STOPPED;
        if (indexing && !hpack_table_add(&d->table, f.name, f.name_len, f.value, f.value_len))
            return HPACK_ERROR;
        /* Unless it was larger than the table, which it emptied. */
        if (indexing && d->mark_added && d->table.count > 0)
            hpack_table_mark(&d->table, HPACK_TABLE_STATIC + 1);
    }
    /* An empty block does not bring the size update owed either. */
    return d->update_required ? HPACK_ERROR : HPACK_OK;
}

enum hpack_result hpack_decode(struct hpack_decoder *d, const uint8_t *block, size_t len,
                               uint64_t max_list_size, uint8_t *scratch, size_t scratch_size,
                               hpack_field_fn fn, void *arg)
{
    assert(scratch != NULL && fn != NULL);
    if (d->broken)
        return HPACK_ERROR;
    struct cursor c = {
        .p = block,
        .end = block + len,
        .scratch = scratch,
        .scratch_size = scratch_size,
        .list_left = max_list_size,
    };
    enum hpack_result r = decode(d, &c, fn, arg);
    if (r != HPACK_OK)
        d->broken = true;
    return r;
}
