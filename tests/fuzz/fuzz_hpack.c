/*
 * fuzz_hpack.c: libFuzzer, differential, over the HPACK decoder
 * (proto/http2/hpack.h) with libnghttp2's decoder as the oracle.  An
 * input is a seed byte, then header blocks, each after its length in two
 * bytes (big-endian; the last takes what is left when the length says
 * more).  Both decoders get the same blocks in order, each keeping its
 * dynamic table across them: both must accept or refuse each block alike
 * and decode an accepted one to the same header list.  Between blocks the
 * table size setting changes now and then, on both.  A third decoder,
 * ours with a header-list limit, must refuse exactly the accepted blocks
 * whose list passes it.  Each accepted list
 * is then encoded by our encoder (how each field is indexed from the seed)
 * and libnghttp2 must decode that to the same list again.
 */
#include "proto/http2/hpack.h"

#include <nghttp2/nghttp2.h>

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* A header list as its fields, in one growing buffer of bytes: name
 * length, name, value length, value, never-indexed (ours only). */
struct list {
    uint8_t *buf;
    size_t len, cap;
    size_t fields;
    uint64_t size; /* as RFC 9113 6.5.2 counts it */
};

static void list_put(struct list *l, const void *p, size_t n)
{
    if (l->len + n > l->cap) {
        size_t cap = l->cap * 2 + n + 256;
        l->buf = realloc(l->buf, cap);
        assert(l->buf != NULL);
        l->cap = cap;
    }
    if (n > 0)
        memcpy(l->buf + l->len, p, n);
    l->len += n;
}

static void list_add(struct list *l, const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen)
{
    list_put(l, &nlen, sizeof(nlen));
    list_put(l, name, nlen);
    list_put(l, &vlen, sizeof(vlen));
    list_put(l, value, vlen);
    l->fields++;
    l->size += nlen + vlen + 32;
}

static int ours_add(void *arg, const struct hpack_field *f)
{
    list_add(arg, f->name, f->name_len, f->value, f->value_len);
    return 0;
}

/* libnghttp2's decoding of a whole block into `l`; false if it refuses. */
static bool theirs(nghttp2_hd_inflater *inf, const uint8_t *p, size_t n, struct list *l)
{
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t k = nghttp2_hd_inflate_hd2(inf, &nv, &flags, (uint8_t *)p, n, 1);
        if (k < 0)
            return false;
        p += k;
        n -= (size_t)k;
        if (flags & NGHTTP2_HD_INFLATE_EMIT)
            list_add(l, nv.name, nv.namelen, nv.value, nv.valuelen);
        if (flags & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(inf);
            return n == 0;
        }
        if (k == 0 && (flags & NGHTTP2_HD_INFLATE_EMIT) == 0)
            return false;
    }
}

/* The list's fields as hpack_field, for the encoder. */
static size_t fields_of(const struct list *l, struct hpack_field *f)
{
    size_t n = 0;
    for (size_t off = 0; off < l->len; n++) {
        memcpy(&f[n].name_len, l->buf + off, sizeof(size_t));
        f[n].name = l->buf + off + sizeof(size_t);
        off += sizeof(size_t) + f[n].name_len;
        memcpy(&f[n].value_len, l->buf + off, sizeof(size_t));
        f[n].value = l->buf + off + sizeof(size_t);
        off += sizeof(size_t) + f[n].value_len;
        f[n].never_indexed = false;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t seed = data[0];
    data++;
    size--;
    struct hpack_decoder dec;
    struct hpack_encoder enc;
    nghttp2_hd_inflater *inf, *check;
    hpack_decoder_init(&dec, 4096);
    /* A second decoder of ours, with a header-list limit from the seed: it
     * must refuse exactly the blocks whose list passes it. */
    struct hpack_decoder lim;
    hpack_decoder_init(&lim, 4096);
    uint64_t limit = 32 + (seed * 7) % 600;
    bool lim_live = true;
    hpack_encoder_init(&enc, 4096);
    if (nghttp2_hd_inflate_new(&inf) != 0 || nghttp2_hd_inflate_new(&check) != 0)
        abort();
    /* Huffman strings decode to at most 8/5 of their length; a name from
     * the dynamic table is at most its size. */
    size_t scratch_size = size * 2 + 4096;
    uint8_t *scratch = malloc(scratch_size);
    struct list a = {0}, b = {0}, c = {0};
    while (size >= 2) {
        size_t n = (size_t)data[0] << 8 | data[1];
        data += 2;
        size -= 2;
        if (n > size)
            n = size;
        /* Now and then our setting changes between blocks, on both. */
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 24) % 4 == 0) {
            uint32_t setting = (seed >> 8) % 4097;
            if (nghttp2_hd_inflate_change_table_size(inf, setting) != 0 ||
                !hpack_decoder_set_max(&dec, setting))
                abort();
            if (lim_live && !hpack_decoder_set_max(&lim, setting))
                abort();
        }
        a.len = b.len = c.len = 0;
        a.fields = b.fields = c.fields = 0;
        a.size = b.size = c.size = 0;
        enum hpack_result r =
            hpack_decode(&dec, data, n, UINT64_MAX, scratch, scratch_size, ours_add, &a);
        bool ok = theirs(inf, data, n, &b);
        assert(r == HPACK_OK || r == HPACK_ERROR);
        assert((r == HPACK_OK) == ok);
        if (lim_live) {
            struct list l = {0};
            enum hpack_result rl =
                hpack_decode(&lim, data, n, limit, scratch, scratch_size, ours_add, &l);
            if (ok)
                assert(rl == (b.size > limit ? HPACK_TOO_LARGE : HPACK_OK));
            else
                assert(rl == HPACK_ERROR || rl == HPACK_TOO_LARGE);
            /* What it passed on is where the list starts, within the limit. */
            assert(l.size <= limit && l.len <= a.len);
            assert(l.len == 0 || memcmp(l.buf, a.buf, l.len) == 0);
            free(l.buf);
            lim_live = rl == HPACK_OK;
        }
        data += n;
        size -= n;
        if (!ok)
            break;
        assert(a.len == b.len && a.fields == b.fields);
        assert(a.len == 0 || memcmp(a.buf, b.buf, a.len) == 0);

        /* Round trip: our encoder, their decoder. */
        struct hpack_field *f = malloc((a.fields + 1) * sizeof(*f));
        uint8_t *how = malloc(a.fields + 1);
        size_t nf = fields_of(&a, f);
        assert(nf == a.fields);
        for (size_t i = 0; i < nf; i++) {
            seed = seed * 1103515245u + 12345u;
            how[i] = (uint8_t)((seed >> 16) % 3);
        }
        if ((seed >> 24) % 8 == 0)
            hpack_encoder_set_peer_size(&enc, (seed >> 8) % 4097);
        uint8_t *out = malloc(hpack_encode_bound(f, nf));
        size_t len = hpack_encode(&enc, f, how, nf, out);
        assert(len <= hpack_encode_bound(f, nf));
        bool back = theirs(check, out, len, &c);
        assert(back);
        assert(c.len == a.len && c.fields == a.fields);
        assert(a.len == 0 || memcmp(a.buf, c.buf, a.len) == 0);
        free(out);
        free(how);
        free(f);
    }
    free(a.buf);
    free(b.buf);
    free(c.buf);
    free(scratch);
    nghttp2_hd_inflate_del(inf);
    nghttp2_hd_inflate_del(check);
    hpack_decoder_free(&dec);
    hpack_decoder_free(&lim);
    hpack_encoder_free(&enc);
    return 0;
}
