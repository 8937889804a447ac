/*
 * test_hpack.c: the HPACK codec (proto/http2/hpack.h) without sockets:
 * RFC 7541 appendix C's blocks decoded, with the dynamic table checked
 * after each; the encoder against the same blocks and against libnghttp2's
 * decoder; and each way a hostile block is refused.
 */
#include "../helpers.h"
#include "proto/http2/hpack.h"
#include "proto/http2/hpack_huffman.h"
#include "proto/http2/hpack_table.h"

#include <nghttp2/nghttp2.h>
#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const bool test_forkless = true;

/* Bytes from hex, spaces ignored; returns the length. */
static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = hex; *p != '\0';) {
        if (*p == ' ') {
            p++;
            continue;
        }
        unsigned v;
        ck_assert(sscanf(p, "%2x", &v) == 1);
        ck_assert(n < cap);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    return n;
}

/* The fields a block decoded to, as "name: value\n" lines; "!" after the
 * colon marks a never-indexed field. */
struct seen {
    char text[4096];
    size_t len;
    int fields;
};

static int collect(void *arg, const struct hpack_field *f)
{
    struct seen *s = arg;
    int n = snprintf(s->text + s->len, sizeof(s->text) - s->len, "%.*s:%s %.*s\n", (int)f->name_len,
                     (const char *)f->name, f->never_indexed ? "!" : "", (int)f->value_len,
                     (const char *)f->value);
    ck_assert(n > 0 && (size_t)n < sizeof(s->text) - s->len);
    s->len += (size_t)n;
    s->fields++;
    return 0;
}

static uint8_t scratch[8192];

static enum hpack_result decode_hex(struct hpack_decoder *d, const char *hex, uint64_t limit,
                                    struct seen *s)
{
    static uint8_t block[8192];
    size_t n = unhex(hex, block, sizeof(block));
    memset(s, 0, sizeof(*s));
    return hpack_decode(d, block, n, limit, scratch, sizeof(scratch), collect, s);
}

/* The dynamic table as "name: value\n" lines, newest first, and its size. */
static void table_is(const struct hpack_table *t, const char *want, uint32_t size)
{
    char text[2048];
    size_t len = 0;
    struct hpack_field f;
    for (uint64_t i = HPACK_TABLE_STATIC + 1; hpack_table_get(t, i, &f); i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%.*s: %.*s\n", (int)f.name_len,
                                (const char *)f.name, (int)f.value_len, (const char *)f.value);
    text[len] = '\0';
    ck_assert_str_eq(text, want);
    ck_assert_uint_eq(t->size, size);
}

static void decodes(struct hpack_decoder *d, const char *hex, const char *want)
{
    struct seen s;
    ck_assert_int_eq(decode_hex(d, hex, UINT64_MAX, &s), HPACK_OK);
    s.text[s.len] = '\0';
    ck_assert_str_eq(s.text, want);
}

/* ------------------------------------------------------------ appendix C */

START_TEST(c2_field_representations)
{
    struct hpack_decoder d;
    hpack_decoder_init(&d, 4096);
    decodes(&d, "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            "custom-key: custom-header\n");
    table_is(&d.table, "custom-key: custom-header\n", 55);
    hpack_decoder_free(&d);

    hpack_decoder_init(&d, 4096);
    decodes(&d, "040c 2f73 616d 706c 652f 7061 7468", ":path: /sample/path\n");
    table_is(&d.table, "", 0);
    ck_assert_ptr_null(d.table.buf);
    decodes(&d, "1008 7061 7373 776f 7264 0673 6563 7265 74", "password:! secret\n");
    table_is(&d.table, "", 0);
    decodes(&d, "82", ":method: GET\n");
    table_is(&d.table, "", 0);
    ck_assert_ptr_null(d.table.buf); /* nothing indexed: no memory */
    hpack_decoder_free(&d);
}
END_TEST

static const char *const c3[] = {
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
};
static const char *const c4[] = {
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
};
static const char *const req_lists[] = {
    ":method: GET\n:scheme: http\n:path: /\n:authority: www.example.com\n",
    ":method: GET\n:scheme: http\n:path: /\n:authority: www.example.com\n"
    "cache-control: no-cache\n",
    ":method: GET\n:scheme: https\n:path: /index.html\n:authority: www.example.com\n"
    "custom-key: custom-value\n",
};
static const char *const req_tables[] = {
    ":authority: www.example.com\n",
    "cache-control: no-cache\n:authority: www.example.com\n",
    "custom-key: custom-value\ncache-control: no-cache\n:authority: www.example.com\n",
};
static const uint32_t req_sizes[] = {57, 110, 164};

static const char *const c5[] = {
    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133"
    "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70"
    "6c65 2e63 6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d"
    "54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049"
    "5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e"
    "3d31",
};
static const char *const c6[] = {
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6"
    "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab"
    "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f"
    "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
};
#define DATE1  "date: Mon, 21 Oct 2013 20:13:21 GMT\n"
#define DATE2  "date: Mon, 21 Oct 2013 20:13:22 GMT\n"
#define LOC    "location: https://www.example.com\n"
#define COOKIE "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1\n"
static const char *const resp_lists[] = {
    ":status: 302\ncache-control: private\n" DATE1 LOC,
    ":status: 307\ncache-control: private\n" DATE1 LOC,
    ":status: 200\ncache-control: private\n" DATE2 LOC "content-encoding: gzip\n" COOKIE,
};
static const char *const resp_tables[] = {
    LOC DATE1 "cache-control: private\n:status: 302\n",
    ":status: 307\n" LOC DATE1 "cache-control: private\n",
    COOKIE "content-encoding: gzip\n" DATE2,
};
static const uint32_t resp_sizes[] = {222, 222, 215};

static void sequence(const char *const *blocks, const char *const *lists, const char *const *tables,
                     const uint32_t *sizes, uint32_t setting)
{
    struct hpack_decoder d;
    hpack_decoder_init(&d, setting);
    for (int i = 0; i < 3; i++) {
        decodes(&d, blocks[i], lists[i]);
        table_is(&d.table, tables[i], sizes[i]);
    }
    hpack_decoder_free(&d);
}

START_TEST(c3_requests)
{
    sequence(c3, req_lists, req_tables, req_sizes, 4096);
}
END_TEST

START_TEST(c4_requests_huffman)
{
    sequence(c4, req_lists, req_tables, req_sizes, 4096);
}
END_TEST

START_TEST(c5_responses)
{
    sequence(c5, resp_lists, resp_tables, resp_sizes, 256);
}
END_TEST

START_TEST(c6_responses_huffman)
{
    sequence(c6, resp_lists, resp_tables, resp_sizes, 256);
}
END_TEST

/* ------------------------------------------------------------ the encoder */

/* "name: value\n" lines into fields, pointing into `text` (changed). */
static size_t fields_of(char *text, struct hpack_field *f, size_t cap)
{
    size_t n = 0;
    for (char *line = text; *line != '\0';) {
        char *end = strchr(line, '\n');
        char *colon = strstr(line + 1, ": ");
        ck_assert(end != NULL && colon != NULL && n < cap);
        f[n] = (struct hpack_field){(const uint8_t *)line, (size_t)(colon - line),
                                    (const uint8_t *)colon + 2, (size_t)(end - colon - 2), false};
        n++;
        line = end + 1;
    }
    return n;
}

/* Whether libnghttp2 decodes `block` to the lines `want`. */
static void nghttp2_decodes(nghttp2_hd_inflater *inf, const uint8_t *block, size_t len,
                            const char *want)
{
    char text[4096];
    size_t tlen = 0;
    for (;;) {
        nghttp2_nv nv;
        int flags = 0;
        ssize_t n = nghttp2_hd_inflate_hd2(inf, &nv, &flags, block, len, 1);
        ck_assert_int_ge(n, 0);
        block += n;
        len -= (size_t)n;
        if (flags & NGHTTP2_HD_INFLATE_EMIT)
            tlen +=
                (size_t)snprintf(text + tlen, sizeof(text) - tlen, "%.*s: %.*s\n", (int)nv.namelen,
                                 (const char *)nv.name, (int)nv.valuelen, (const char *)nv.value);
        if (flags & NGHTTP2_HD_INFLATE_FINAL)
            break;
    }
    nghttp2_hd_inflate_end_headers(inf);
    text[tlen] = '\0';
    ck_assert_str_eq(text, want);
}

/* The encoder makes appendix C's Huffman blocks byte for byte when told to
 * index what the RFC's encoder indexed; libnghttp2 decodes them alike. */
static void encodes(const char *const *blocks, const char *const *lists, uint32_t peer_size,
                    const char *update_hex)
{
    struct hpack_encoder e;
    hpack_encoder_init(&e, 4096);
    if (peer_size != 4096)
        hpack_encoder_set_peer_size(&e, peer_size);
    nghttp2_hd_inflater *inf;
    ck_assert_int_eq(nghttp2_hd_inflate_new(&inf), 0);
    for (int i = 0; i < 3; i++) {
        char text[1024];
        struct hpack_field f[8];
        uint8_t how[8];
        snprintf(text, sizeof(text), "%s", lists[i]);
        size_t n = fields_of(text, f, 8);
        memset(how, HPACK_INDEX, sizeof(how));
        uint8_t out[1024], want[1024];
        ck_assert_uint_le(hpack_encode_bound(f, n), sizeof(out));
        size_t len = hpack_encode(&e, f, how, n, out);
        ck_assert_uint_le(len, hpack_encode_bound(f, n));
        char hex[2048];
        snprintf(hex, sizeof(hex), "%s%s", i == 0 ? update_hex : "", blocks[i]);
        size_t wlen = unhex(hex, want, sizeof(want));
        ck_assert_uint_eq(len, wlen);
        ck_assert_mem_eq(out, want, len);
        nghttp2_decodes(inf, out, len, lists[i]);
    }
    nghttp2_hd_inflate_del(inf);
    hpack_encoder_free(&e);
}

/* The static table's lookup by name length finds every entry by its name
 * and value, and a name alone at its lowest index, as a walk over all 61
 * does; names of no entry, of every length, are not found. */
START_TEST(static_table_lookup)
{
    struct hpack_table t;
    hpack_table_init(&t, 4096);
    for (uint32_t i = 1; i <= HPACK_TABLE_STATIC; i++) {
        struct hpack_field f;
        ck_assert(hpack_table_get(&t, i, &f));
        bool both;
        ck_assert_uint_eq(hpack_table_find(&t, f.name, f.name_len, f.value, f.value_len, &both), i);
        ck_assert(both);
        uint32_t first = 0;
        for (uint32_t j = 1; j <= HPACK_TABLE_STATIC && first == 0; j++) {
            struct hpack_field g;
            ck_assert(hpack_table_get(&t, j, &g));
            if (g.name_len == f.name_len && memcmp(g.name, f.name, f.name_len) == 0)
                first = j;
        }
        ck_assert_uint_eq(hpack_table_find(&t, f.name, f.name_len, (const uint8_t *)"?", 1, &both),
                          first);
        ck_assert(!both);
    }
    static const char z[40] = "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz";
    for (size_t len = 0; len < sizeof(z); len++) {
        bool both;
        ck_assert_uint_eq(hpack_table_find(&t, (const uint8_t *)z, len, NULL, 0, &both), 0);
    }
    hpack_table_free(&t);
}
END_TEST

/* An entry's id finds it as later entries push its index up, and finds
 * nothing once it is evicted; a static index is its own id. */
START_TEST(table_ids_follow_entries)
{
    struct hpack_table t;
    hpack_table_init(&t, 100); /* two entries of 4 + 4 bytes, not three */
    ck_assert_uint_eq(hpack_table_id(&t, 5), 5);
    ck_assert_uint_eq(hpack_table_index_of(&t, 5), 5);
    ck_assert_uint_eq(hpack_table_index_of(&t, 0), 0);
    ck_assert(hpack_table_add(&t, (const uint8_t *)"x-aa", 4, (const uint8_t *)"1111", 4));
    uint32_t a = hpack_table_id(&t, 62);
    ck_assert_uint_eq(hpack_table_index_of(&t, a), 62);
    ck_assert(hpack_table_holds(&t, 62, (const uint8_t *)"x-aa", 4, (const uint8_t *)"1111", 4));
    ck_assert(!hpack_table_holds(&t, 62, (const uint8_t *)"x-aa", 4, (const uint8_t *)"1112", 4));
    ck_assert(!hpack_table_holds(&t, 62, (const uint8_t *)"x-ab", 4, (const uint8_t *)"1111", 4));
    ck_assert(hpack_table_add(&t, (const uint8_t *)"x-bb", 4, (const uint8_t *)"2222", 4));
    uint32_t b = hpack_table_id(&t, 62);
    ck_assert_uint_ne(a, b);
    ck_assert_uint_eq(hpack_table_index_of(&t, a), 63);
    ck_assert_uint_eq(hpack_table_index_of(&t, b), 62);
    ck_assert_uint_eq(hpack_table_id(&t, 63), a);
    ck_assert(hpack_table_add(&t, (const uint8_t *)"x-cc", 4, (const uint8_t *)"3333", 4));
    ck_assert_uint_eq(t.count, 2);
    ck_assert_uint_eq(hpack_table_index_of(&t, a), 0); /* evicted */
    ck_assert_uint_eq(hpack_table_index_of(&t, b), 63);
    ck_assert(hpack_table_holds(&t, 63, (const uint8_t *)"x-bb", 4, (const uint8_t *)"2222", 4));
    ck_assert(hpack_table_holds(&t, 1, (const uint8_t *)":authority", 10, NULL, 0));
    hpack_table_free(&t);
}
END_TEST

/* A block's fields found by the encoder's hints (the same fields at the
 * same places as the block before) come out as the search finds them;
 * hints gone stale (other fields at those places, entries evicted, a
 * value changed) fall back to the search. */
START_TEST(encoder_hints_same_answers)
{
    struct hpack_encoder e;
    hpack_encoder_init(&e, 4096);
    hpack_encoder_set_peer_size(&e, 150); /* three entries of ~40 bytes */
    nghttp2_hd_inflater *inf;
    ck_assert_int_eq(nghttp2_hd_inflate_new(&inf), 0);
    static const struct {
        const char *lines;
        const char *hex; /* the block, "" when not checked */
    } blocks[] = {
        {":status: 200\nserver: corral\ndate: d1\n", ""},
        /* server 63, date 62 */
        {":status: 200\nserver: corral\ndate: d1\n", "88bfbe"},
        /* other places: the search finds them */
        {"date: d1\n:status: 200\nserver: corral\n", "be88bf"},
        /* date's new value: a literal naming entry 62, added (64: server) */
        {":status: 200\nserver: corral\ndate: d2\n", ""},
        {":status: 200\nserver: corral\ndate: d2\n", "88c0be"},
        /* x-a and x-b evict server and the first date */
        {"x-a: 0123456789\nx-b: 0123456789\n", ""},
        {":status: 200\nserver: corral\ndate: d2\n", ""},
        {":status: 200\nserver: corral\ndate: d2\n", "88bfbe"},
    };
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
        char text[256];
        snprintf(text, sizeof(text), "%s", blocks[b].lines);
        struct hpack_field f[8];
        uint8_t how[8];
        size_t n = fields_of(text, f, 8);
        memset(how, HPACK_INDEX, sizeof(how));
        uint8_t out[256], want[256];
        size_t len = hpack_encode(&e, f, how, n, out);
        if (blocks[b].hex[0] != '\0') {
            size_t wlen = unhex(blocks[b].hex, want, sizeof(want));
            ck_assert_uint_eq(len, wlen);
            ck_assert_mem_eq(out, want, len);
        }
        nghttp2_decodes(inf, out, len, blocks[b].lines);
    }
    nghttp2_hd_inflate_del(inf);
    hpack_encoder_free(&e);
}
END_TEST

/* Names and values are told apart by any byte, at every length (the
 * comparison takes words from both ends and memcmp()s the middle). */
START_TEST(table_compares_every_byte)
{
    struct hpack_table t;
    hpack_table_init(&t, 4096);
    uint8_t v[40], w[40];
    for (size_t n = 0; n <= sizeof(v); n++) {
        for (size_t i = 0; i < n; i++)
            v[i] = (uint8_t)('a' + i % 26);
        ck_assert(hpack_table_add(&t, (const uint8_t *)"x-v", 3, v, n));
        ck_assert(hpack_table_holds(&t, 62, (const uint8_t *)"x-v", 3, v, n));
        for (size_t i = 0; i < n; i++) {
            memcpy(w, v, n);
            w[i] ^= 0x20;
            ck_assert_msg(!hpack_table_holds(&t, 62, (const uint8_t *)"x-v", 3, w, n), "%zu %zu", n,
                          i);
        }
    }
    hpack_table_free(&t);
}
END_TEST

/* hpack_table_find() answers as a walk over every index does, whatever
 * the table held and evicted: random names and values of a few bytes,
 * many alike, added to a small table and looked for. */
START_TEST(table_find_as_a_walk)
{
    struct hpack_table t;
    hpack_table_init(&t, 300);
    static const char *const names[] = {"date", "server", "x-a", "x-bb", "content-type"};
    uint32_t seed = 11;
    for (int round = 0; round < 20000; round++) {
        seed = seed * 1103515245u + 12345u;
        const char *name = names[(seed >> 16) % 5];
        char value[16];
        int vlen = snprintf(value, sizeof(value), "%u%s", (seed >> 8) % 23,
                            (seed >> 20) % 2 ? "-long-enough" : "");
        size_t nlen = strlen(name);
        uint32_t want = 0;
        bool want_both = false;
        for (uint32_t i = 1; i <= HPACK_TABLE_STATIC + t.count && !want_both; i++) {
            struct hpack_field f;
            ck_assert(hpack_table_get(&t, i, &f));
            if (f.name_len != nlen || memcmp(f.name, name, nlen) != 0)
                continue;
            if (f.value_len == (size_t)vlen && memcmp(f.value, value, f.value_len) == 0) {
                want = i;
                want_both = true;
            } else if (want == 0) {
                want = i;
            }
        }
        bool both;
        ck_assert_uint_eq(hpack_table_find(&t, (const uint8_t *)name, nlen, (const uint8_t *)value,
                                           (size_t)vlen, &both),
                          want);
        ck_assert(both == want_both);
        if (!both)
            ck_assert(hpack_table_add(&t, (const uint8_t *)name, nlen, (const uint8_t *)value,
                                      (size_t)vlen));
        if (round % 5000 == 4999) /* emptied, then as before */
            ck_assert(hpack_table_resize(&t, round % 10000 == 9999 ? 0 : 300));
    }
    hpack_table_free(&t);
}
END_TEST

/* The decoder's marks: a field's entry marked from the callback says so
 * for the fields decoded from it whole later, static or dynamic, and for
 * a literal with incremental indexing the entry it makes; a literal is
 * never marked, and an evicted entry's mark goes with it. */
struct marks {
    struct hpack_decoder *d;
    char seen[64]; /* per field: 'm' marked, '-' not */
    size_t n;
};

static int mark_all(void *arg, const struct hpack_field *f)
{
    (void)f;
    struct marks *m = arg;
    ck_assert_uint_lt(m->n, sizeof(m->seen) - 1);
    m->seen[m->n++] = hpack_decoder_marked(m->d) ? 'm' : '-';
    hpack_decoder_mark(m->d);
    return 0;
}

static const char *decode_marks(struct hpack_decoder *d, const char *hex)
{
    static struct marks m;
    uint8_t block[128];
    size_t n = unhex(hex, block, sizeof(block));
    m = (struct marks){.d = d};
    ck_assert_int_eq(hpack_decode(d, block, n, UINT64_MAX, scratch, sizeof(scratch), mark_all, &m),
                     HPACK_OK);
    return m.seen;
}

START_TEST(decoder_marks_entries)
{
    struct hpack_decoder d;
    hpack_decoder_init(&d, 80); /* one entry of 4 + 4 bytes, not two */
    /* :method GET (2); x-aa: 1111 indexed; x-bb: 2222 not indexed */
    ck_assert_str_eq(decode_marks(&d, "82"
                                      "4004782d61610431313131"
                                      "0004782d62620432323232"),
                     "---");
    /* 2 and 62 again; 3, :method POST, new */
    ck_assert_str_eq(decode_marks(&d, "82be83"), "mm-");
    ck_assert_str_eq(decode_marks(&d, "be8283"), "mmm");
    /* a literal naming 62, not indexed, is not marked: its value is new */
    ck_assert_str_eq(decode_marks(&d, "0f2f0431313131be"), "-m");
    /* x-cc evicts x-aa: the new 62 is x-cc's, marked as it was added */
    ck_assert_str_eq(decode_marks(&d, "4004782d63630433333333be"), "-m");
    hpack_decoder_free(&d);
}
END_TEST

START_TEST(encoder_makes_c4)
{
    encodes(c4, req_lists, 4096, "");
}
END_TEST

/* At 256 bytes the first block starts with the size update (3fe101). */
START_TEST(encoder_makes_c6)
{
    encodes(c6, resp_lists, 256, "3fe101");
}
END_TEST

/* Fields neither indexed nor in a table: literals without indexing, and
 * the never-indexed flag carried to the peer. */
START_TEST(encoder_literals_and_never_indexed)
{
    struct hpack_encoder e;
    hpack_encoder_init(&e, 4096);
    struct hpack_field f[] = {
        {(const uint8_t *)":path", 5, (const uint8_t *)"/sample/path", 12, false},
        {(const uint8_t *)"password", 8, (const uint8_t *)"secret", 6, true},
        {(const uint8_t *)"x-empty", 7, (const uint8_t *)"", 0, false},
    };
    uint8_t out[256];
    size_t len = hpack_encode(&e, f, NULL, 3, out);
    ck_assert_uint_eq(e.table.count, 0);
    ck_assert_ptr_null(e.table.buf);
    /* :path by its static name, without indexing. */
    ck_assert_uint_eq(out[0], 0x04);

    struct hpack_decoder d;
    hpack_decoder_init(&d, 4096);
    struct seen s = {0};
    ck_assert_int_eq(hpack_decode(&d, out, len, UINT64_MAX, scratch, sizeof(scratch), collect, &s),
                     HPACK_OK);
    s.text[s.len] = '\0';
    ck_assert_str_eq(s.text, ":path: /sample/path\npassword:! secret\nx-empty: \n");
    hpack_decoder_free(&d);
    hpack_encoder_free(&e);
}
END_TEST

/* The encoder's table holds memory only while it has entries, and the
 * peer learns each change of size, the smallest first (RFC 7541 4.2). */
START_TEST(encoder_table_memory_and_size_updates)
{
    struct hpack_encoder e;
    hpack_encoder_init(&e, 4096);
    nghttp2_hd_inflater *inf;
    ck_assert_int_eq(nghttp2_hd_inflate_new(&inf), 0);
    struct hpack_field f = {(const uint8_t *)"x-a", 3, (const uint8_t *)"b", 1, false};
    uint8_t how = HPACK_INDEX, out[64];
    ck_assert_ptr_null(e.table.buf);
    size_t len = hpack_encode(&e, &f, &how, 1, out);
    nghttp2_decodes(inf, out, len, "x-a: b\n");
    ck_assert_ptr_nonnull(e.table.buf);
    hpack_encoder_set_peer_size(&e, 0);
    ck_assert_ptr_null(e.table.buf);
    hpack_encoder_set_peer_size(&e, 100);
    len = hpack_encode(&e, &f, &how, 1, out);
    ck_assert_uint_ge(len, 3);
    ck_assert_uint_eq(out[0], 0x20);                 /* 0 */
    ck_assert(out[1] == 0x3f && out[2] == 100 - 31); /* then 100 */
    nghttp2_decodes(inf, out, len, "x-a: b\n");
    len = hpack_encode(&e, &f, &how, 1, out);
    ck_assert_uint_eq(len, 1); /* indexed now: 62 */
    ck_assert_uint_eq(out[0], 0x80 | 62);
    nghttp2_decodes(inf, out, len, "x-a: b\n");
    nghttp2_hd_inflate_del(inf);
    hpack_encoder_free(&e);
}
END_TEST

/* Many blocks through one encoder and libnghttp2's decoder: evictions,
 * compaction of the table's buffer and size changes all stay in step. */
START_TEST(encoder_round_trip_nghttp2)
{
    struct hpack_encoder e;
    hpack_encoder_init(&e, 4096);
    nghttp2_hd_inflater *inf;
    ck_assert_int_eq(nghttp2_hd_inflate_new(&inf), 0);
    struct hpack_decoder d;
    hpack_decoder_init(&d, 4096);
    uint32_t seed = 7;
    for (int round = 0; round < 300; round++) {
        char text[4096];
        size_t tlen = 0;
        int n = 1 + round % 7;
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            int vlen = (int)((seed >> 16) % 300);
            tlen += (size_t)snprintf(text + tlen, sizeof(text) - tlen, "x-h%u: ", (seed >> 8) % 9);
            for (int k = 0; k < vlen; k++)
                text[tlen++] = (char)(' ' + ((seed >> (k % 13)) + (unsigned)k) % 94);
            text[tlen++] = '\n';
        }
        text[tlen] = '\0';
        if (round % 50 == 49) /* the peer's setting changes between blocks */
            hpack_encoder_set_peer_size(&e, (uint32_t)(round % 100 == 99 ? 0 : 1000));
        char copy[4096];
        memcpy(copy, text, tlen + 1);
        struct hpack_field f[8];
        uint8_t how[8];
        size_t nf = fields_of(copy, f, 8);
        for (size_t i = 0; i < nf; i++)
            how[i] = (uint8_t)((seed >> i) % 3);
        uint8_t out[8192];
        ck_assert_uint_le(hpack_encode_bound(f, nf), sizeof(out));
        size_t len = hpack_encode(&e, f, how, nf, out);
        nghttp2_decodes(inf, out, len, text);
        struct seen s = {0};
        ck_assert_int_eq(
            hpack_decode(&d, out, len, UINT64_MAX, scratch, sizeof(scratch), collect, &s),
            HPACK_OK);
        ck_assert_int_eq(s.fields, (int)nf);
        ck_assert_uint_eq(d.table.size, e.table.size);
    }
    nghttp2_hd_inflate_del(inf);
    hpack_decoder_free(&d);
    hpack_encoder_free(&e);
}
END_TEST

/* ------------------------------------------------------------ Huffman */

START_TEST(huffman_every_byte_round_trips)
{
    uint8_t in[512], coded[2048], out[512];
    for (int i = 0; i < 512; i++)
        in[i] = (uint8_t)(i * 7 + i / 256);
    for (size_t n = 0; n <= sizeof(in); n += 37) {
        size_t len = hpack_huffman_encoded_len(in, n);
        ck_assert_uint_le(len, sizeof(coded));
        ck_assert_uint_eq(hpack_huffman_encode(coded, in, n), len);
        ck_assert_int_eq(hpack_huffman_decode(out, sizeof(out), coded, len), (long)n);
        ck_assert(n == 0 || memcmp(in, out, n) == 0);
    }
}
END_TEST

START_TEST(huffman_padding_and_eos)
{
    uint8_t out[16];
    const uint8_t a[] = {0x1f};                     /* 'a' 00011 + 111 */
    const uint8_t zero_pad[] = {0x1e};              /* 'a' + 110: padding not all 1s */
    const uint8_t long_pad[] = {0x1f, 0xff};        /* 'a' + 11 bits of padding */
    const uint8_t eos[] = {0xff, 0xff, 0xff, 0xff}; /* EOS, then 2 bits */
    const uint8_t only_pad[] = {0xff};              /* 8 bits of padding, no symbol */
    ck_assert_int_eq(hpack_huffman_decode(out, sizeof(out), a, 1), 1);
    ck_assert_uint_eq(out[0], 'a');
    ck_assert_int_eq(hpack_huffman_decode(out, sizeof(out), zero_pad, 1), -1);
    ck_assert_int_eq(hpack_huffman_decode(out, sizeof(out), long_pad, 2), -1);
    ck_assert_int_eq(hpack_huffman_decode(out, sizeof(out), eos, 4), -1);
    ck_assert_int_eq(hpack_huffman_decode(out, sizeof(out), only_pad, 1), -1);
    /* No room: nothing past the bound is written. */
    const uint8_t www[] = {0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff};
    memset(out, 0xaa, sizeof(out));
    ck_assert_int_eq(hpack_huffman_decode(out, 3, www, sizeof(www)), -2);
    ck_assert_uint_eq(out[3], 0xaa);
}
END_TEST

/* ------------------------------------------------------------ hostile blocks */

static void refused(const char *hex, uint32_t setting, enum hpack_result want)
{
    struct hpack_decoder d;
    hpack_decoder_init(&d, setting);
    struct seen s;
    ck_assert_int_eq(decode_hex(&d, hex, UINT64_MAX, &s), want);
    /* The table may no longer match the peer's: all later blocks fail. */
    ck_assert_int_eq(decode_hex(&d, "82", UINT64_MAX, &s), HPACK_ERROR);
    hpack_decoder_free(&d);
}

START_TEST(bad_indexes)
{
    refused("80", 4096, HPACK_ERROR);                   /* index 0 */
    refused("be", 4096, HPACK_ERROR);                   /* 62: the dynamic table is empty */
    refused("7e 01 61", 4096, HPACK_ERROR);             /* a literal naming index 62 */
    refused("ff 80 80 80 80 80 01", 4096, HPACK_ERROR); /* more than 32 bits of shift */
    refused("ff ff ff ff ff 0f", 4096, HPACK_ERROR);    /* 2^32 + 126 */
    refused("ff", 4096, HPACK_ERROR);                   /* the block ends in the integer */
    refused("ff 80", 4096, HPACK_ERROR);
}
END_TEST

START_TEST(bad_strings)
{
    refused("00 05 61", 4096, HPACK_ERROR);             /* longer than the block */
    refused("00", 4096, HPACK_ERROR);                   /* no name */
    refused("00 01 61", 4096, HPACK_ERROR);             /* no value */
    refused("00 7f 82 80 04", 4096, HPACK_ERROR);       /* past libnghttp2's 65536 */
    refused("00 81 1e 00", 4096, HPACK_ERROR);          /* padding with a 0 */
    refused("00 82 1f ff 00", 4096, HPACK_ERROR);       /* padding of 11 bits */
    refused("00 84 ff ff ff ff 00", 4096, HPACK_ERROR); /* EOS */
    struct hpack_decoder d;
    hpack_decoder_init(&d, 4096);
    decodes(&d, "00 81 1f 00", "a: \n");
    hpack_decoder_free(&d);
}
END_TEST

/* A table's block grows with its entries, by doubling, up to what its
 * maximum needs, and keeps every entry as it moves. */
START_TEST(table_block_grows)
{
    struct hpack_table t;
    hpack_table_init(&t, 4096);
    ck_assert_ptr_null(t.buf);
    char name[16], value[64];
    memset(value, 'v', sizeof(value));
    for (uint32_t i = 0; i < 100; i++) {
        int n = snprintf(name, sizeof(name), "x-%u", i);
        ck_assert(
            hpack_table_add(&t, (const uint8_t *)name, (size_t)n, (const uint8_t *)value, i % 40));
        ck_assert_uint_le(t.cap, 4096);
        ck_assert_uint_le(t.slots, 128);
        ck_assert_uint_ge(t.cap, t.tail);
        if (i == 0) { /* the smallest block */
            ck_assert_uint_eq(t.cap, 256);
            ck_assert_uint_eq(t.slots, 8);
        }
        if (i == 8) /* a 9th entry: twice the entries */
            ck_assert_uint_eq(t.slots, 16);
        /* Every entry still there, newest first. */
        for (uint32_t k = 0; k < t.count; k++) {
            struct hpack_field f;
            ck_assert(hpack_table_get(&t, HPACK_TABLE_STATIC + 1 + k, &f));
            n = snprintf(name, sizeof(name), "x-%u", i - k);
            ck_assert_uint_eq(f.name_len, (size_t)n);
            ck_assert_int_eq(memcmp(f.name, name, f.name_len), 0);
            ck_assert_uint_eq(f.value_len, (i - k) % 40);
        }
    }
    /* Full, evicting: the block holds the entries' bytes, not the 32
     * each counts for, so it stays below the maximum. */
    ck_assert_uint_gt(t.size, 4096 - 32 - 16 - 40);
    ck_assert_uint_le(t.size, 4096);
    ck_assert_uint_eq(t.cap, 2048);
    hpack_table_free(&t);
}
END_TEST

START_TEST(size_updates)
{
    refused("82 20", 4096, HPACK_ERROR);    /* after a field */
    refused("3f e2 1f", 4096, HPACK_ERROR); /* 4097, above the setting */
    refused("3f e2 1f", 4096, HPACK_ERROR);
    struct hpack_decoder d;
    hpack_decoder_init(&d, 4096);
    decodes(&d, "20 3f e1 1f 82", ":method: GET\n"); /* two, at the start */
    decodes(&d, c3[0], req_lists[0]);
    decodes(&d, c3[1], req_lists[1]);
    decodes(&d, c3[2], req_lists[2]);
    ck_assert_uint_eq(d.table.count, 3);
    ck_assert_uint_eq(d.table.cap, 256); /* grown as entries come, from 256 */
    /* 110 keeps the two newest (54 + 53), in a block made smaller. */
    decodes(&d, "3f 4f 82", ":method: GET\n");
    table_is(&d.table, "custom-key: custom-value\ncache-control: no-cache\n", 107);
    ck_assert_uint_eq(d.table.cap, 110);
    /* 0 empties the table and gives its memory back. */
    decodes(&d, "20", "");
    table_is(&d.table, "", 0);
    ck_assert_ptr_null(d.table.buf);
    ck_assert_ptr_null(d.table.entries);
    /* A field too large for the table empties it and is not added. */
    decodes(&d, "3f 09 40 01 61 03 62 62 62", "a: bbb\n"); /* size 40 */
    table_is(&d.table, "a: bbb\n", 36);
    decodes(&d, "40 01 61 09 62 62 62 62 62 62 62 62 62", "a: bbbbbbbbb\n"); /* 42 */
    table_is(&d.table, "", 0);
    hpack_decoder_free(&d);
}
END_TEST

/* Our setting lowered: the table shrinks at once and the next block must
 * start with a size update no larger than the smallest setting since
 * (RFC 7541 4.2), as libnghttp2 requires too. */
START_TEST(setting_lowered_needs_an_update)
{
    struct hpack_decoder d;
    struct seen s;
    hpack_decoder_init(&d, 4096);
    decodes(&d, c3[0], req_lists[0]);
    ck_assert_ptr_nonnull(d.table.buf);
    ck_assert(hpack_decoder_set_max(&d, 0));
    ck_assert_ptr_null(d.table.buf); /* memory given back at once */
    ck_assert_int_eq(decode_hex(&d, "82", UINT64_MAX, &s), HPACK_ERROR);
    hpack_decoder_free(&d);

    hpack_decoder_init(&d, 4096);
    ck_assert(hpack_decoder_set_max(&d, 48));
    ck_assert_int_eq(decode_hex(&d, "", UINT64_MAX, &s), HPACK_ERROR); /* empty: still owed */
    hpack_decoder_free(&d);

    hpack_decoder_init(&d, 4096);
    ck_assert(hpack_decoder_set_max(&d, 48));
    ck_assert_int_eq(decode_hex(&d, "3f 12 82", UINT64_MAX, &s), HPACK_ERROR); /* 49 */
    hpack_decoder_free(&d);

    /* 48 then 3000: the first update must be at most 48. */
    hpack_decoder_init(&d, 4096);
    ck_assert(hpack_decoder_set_max(&d, 48));
    ck_assert(hpack_decoder_set_max(&d, 3000));
    ck_assert_int_eq(decode_hex(&d, "3f 99 17 82", UINT64_MAX, &s), HPACK_ERROR);
    hpack_decoder_free(&d);
    hpack_decoder_init(&d, 4096);
    ck_assert(hpack_decoder_set_max(&d, 48));
    ck_assert(hpack_decoder_set_max(&d, 3000));
    decodes(&d, "3f 11 3f 99 17 82", ":method: GET\n");
    ck_assert_uint_eq(d.table.max_size, 3000);
    decodes(&d, "82", ":method: GET\n"); /* owed no longer */
    hpack_decoder_free(&d);

    /* Raised: nothing owed, and the peer may now ask for more. */
    hpack_decoder_init(&d, 4096);
    ck_assert(hpack_decoder_set_max(&d, 8000));
    decodes(&d, "82", ":method: GET\n");
    decodes(&d, "3f a1 3e 82", ":method: GET\n"); /* 8000 */
    ck_assert_uint_eq(d.table.max_size, 8000);
    hpack_decoder_free(&d);
}
END_TEST

static int stop_at_first(void *arg, const struct hpack_field *f)
{
    (void)f;
    (*(int *)arg)++;
    return 1;
}

START_TEST(header_list_limit)
{
    struct hpack_decoder d;
    struct seen s;
    /* C.3.1's list is 4 fields: 32 * 4 + 7+3 + 7+4 + 5+1 + 10+15 = 180. */
    hpack_decoder_init(&d, 4096);
    ck_assert_int_eq(decode_hex(&d, c3[0], 180, &s), HPACK_OK);
    hpack_decoder_free(&d);
    hpack_decoder_init(&d, 4096);
    ck_assert_int_eq(decode_hex(&d, c3[0], 179, &s), HPACK_TOO_LARGE);
    ck_assert_int_eq(s.fields, 3); /* cut at the string that passes it */
    hpack_decoder_free(&d);
    hpack_decoder_init(&d, 4096);
    ck_assert_int_eq(decode_hex(&d, c4[0], 179, &s), HPACK_TOO_LARGE);
    ck_assert_int_eq(s.fields, 3);
    hpack_decoder_free(&d);

    /* A long Huffman value is decoded no further than the limit allows. */
    uint8_t block[4 + 2000];
    block[0] = 0x00;
    block[1] = 0x01;
    block[2] = 'x';
    block[3] = 0xff; /* Huffman, length 127 + 0x80... */
    size_t n = 4;
    block[n++] = 0x80 | ((1900 - 127) & 0x7f);
    block[n++] = (uint8_t)((1900 - 127) >> 7);
    memset(block + n, 0x00, 1900); /* "0" (00000) over and over */
    n += 1900;
    memset(scratch, 0xaa, sizeof(scratch));
    hpack_decoder_init(&d, 4096);
    memset(&s, 0, sizeof(s));
    ck_assert_int_eq(hpack_decode(&d, block, n, 100, scratch, sizeof(scratch), collect, &s),
                     HPACK_TOO_LARGE);
    ck_assert_int_eq(s.fields, 0);
    ck_assert_uint_eq(scratch[100 - 33], 0xaa); /* 32 + "x" leave 67 */
    ck_assert_uint_ne(scratch[100 - 34], 0xaa);
    hpack_decoder_free(&d);
    /* The scratch bounds a field the same way. */
    hpack_decoder_init(&d, 4096);
    ck_assert_int_eq(hpack_decode(&d, block, n, UINT64_MAX, scratch, 10, collect, &s),
                     HPACK_TOO_LARGE);
    hpack_decoder_free(&d);
    /* The callback may stop the decoding. */
    hpack_decoder_init(&d, 4096);
    int calls = 0;
    uint8_t b[64];
    n = unhex(c3[0], b, sizeof(b));
    ck_assert_int_eq(
        hpack_decode(&d, b, n, UINT64_MAX, scratch, sizeof(scratch), stop_at_first, &calls),
        HPACK_STOPPED);
    ck_assert_int_eq(calls, 1);
    hpack_decoder_free(&d);
}
END_TEST

/* An indexed-name literal with indexing whose name is a dynamic entry
 * that the addition evicts: the name must survive. */
START_TEST(name_from_an_evicted_entry)
{
    struct hpack_decoder d;
    hpack_decoder_init(&d, 4096);
    /* size 80; add "abcdefghij: v" (44); then 7e (62, itself) with a new
     * value of 30 bytes: 10 + 30 + 32 = 72, which evicts the entry. */
    decodes(&d, "3f 31 40 0a 61 62 63 64 65 66 67 68 69 6a 01 76", "abcdefghij: v\n");
    decodes(&d,
            "7e 1e 30 31 32 33 34 35 36 37 38 39 30 31 32 33 34 35 36 37 38 39 30 31 32 33 34 35 "
            "36 37 38 39",
            "abcdefghij: 012345678901234567890123456789\n");
    table_is(&d.table, "abcdefghij: 012345678901234567890123456789\n", 72);
    hpack_decoder_free(&d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/hpack");
    TCase *tc = tcase_create("rfc7541");
    tcase_add_test(tc, c2_field_representations);
    tcase_add_test(tc, c3_requests);
    tcase_add_test(tc, c4_requests_huffman);
    tcase_add_test(tc, c5_responses);
    tcase_add_test(tc, c6_responses_huffman);
    tcase_add_test(tc, static_table_lookup);
    tcase_add_test(tc, table_ids_follow_entries);
    tcase_add_test(tc, encoder_hints_same_answers);
    tcase_add_test(tc, decoder_marks_entries);
    tcase_add_test(tc, table_compares_every_byte);
    tcase_add_test(tc, table_find_as_a_walk);
    tcase_add_test(tc, encoder_makes_c4);
    tcase_add_test(tc, encoder_makes_c6);
    tcase_add_test(tc, encoder_literals_and_never_indexed);
    tcase_add_test(tc, encoder_table_memory_and_size_updates);
    tcase_add_test(tc, encoder_round_trip_nghttp2);
    tcase_add_test(tc, huffman_every_byte_round_trips);
    tcase_add_test(tc, huffman_padding_and_eos);
    suite_add_tcase(suite, tc);
    tc = tcase_create("hostile");
    tcase_add_test(tc, bad_indexes);
    tcase_add_test(tc, bad_strings);
    tcase_add_test(tc, size_updates);
    tcase_add_test(tc, table_block_grows);
    tcase_add_test(tc, setting_lowered_needs_an_update);
    tcase_add_test(tc, header_list_limit);
    tcase_add_test(tc, name_from_an_evicted_entry);
    suite_add_tcase(suite, tc);
    return suite;
}
