/*
 * test_compress_codec.c: response compression's parts without a
 * response: Accept-Encoding read into q-values and a choice (a table fed
 * whole, as two fields split at every byte, and at every shorter length),
 * and each codec's stream decoded by the real decoder byte for byte: a
 * body in one piece, a large one in many, after each flush everything
 * written so far, and within the memory bound docs/config.md states.
 */
#include "../helpers.h"
#include "compress_decode.h"
#include "proto/compress/compress_accept.h"
#include "proto/compress/compress_codec.h"
#include "proto/http/block_pool.h"

#include <stdlib.h>
#if TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif
#include <string.h>

/* ------------------------------------------------------- Accept-Encoding */

#define U COMPRESS_Q_UNSET

static const struct {
    const char *value;
    uint16_t zstd, br, gzip, any, identity;
    int choice; /* of all three offered; -1 none */
} accept_cases[] = {
    {"", U, U, U, U, U, -1},
    {"gzip", U, U, 1000, U, U, COMPRESS_GZIP},
    {"gzip, deflate, br", U, 1000, 1000, U, U, COMPRESS_BR},
    {"gzip, deflate, br, zstd", 1000, 1000, 1000, U, U, COMPRESS_ZSTD},
    {"br;q=1.0, gzip;q=0.8, *;q=0.1", U, 1000, 800, 100, U, COMPRESS_BR},
    {"gzip;q=1, br;q=0.9", U, 900, 1000, U, U, COMPRESS_GZIP},
    {"GZIP;Q=0.5,Br;q=0.25", U, 250, 500, U, U, COMPRESS_GZIP},
    {"x-gzip", U, U, 1000, U, U, COMPRESS_GZIP},
    {"*", U, U, U, 1000, U, COMPRESS_ZSTD},
    {"*;q=0, gzip", U, U, 1000, 0, U, COMPRESS_GZIP},
    {"gzip;q=0, *", U, U, 0, 1000, U, COMPRESS_ZSTD},
    {"zstd;q=0, br;q=0, gzip;q=0", 0, 0, 0, U, U, -1},
    {"identity;q=0", U, U, U, U, 0, -1},
    {"gzip;q=0.001", U, U, 1, U, U, COMPRESS_GZIP},
    {"gzip;q=0.000", U, U, 0, U, U, -1},
    /* the first element naming a coding counts */
    {"gzip;q=0, gzip", U, U, 0, U, U, -1},
    {"gzip, gzip;q=0", U, U, 1000, U, U, COMPRESS_GZIP},
    /* other parameters, quoted or not, are skipped */
    {"br;level=\"a,b\";q=0.5, gzip;x=1", U, 500, 1000, U, U, COMPRESS_GZIP},
    {"  ,, ,gzip ; q=0.3 ,\t br\t", U, 1000, 300, U, U, COMPRESS_BR},
    /* malformed elements are skipped, the rest counts */
    {"gzip;q=2, br", U, 1000, U, U, U, COMPRESS_BR},
    {"gzip;q=1.5, br;q=0.1234, zstd;q=.5", U, U, U, U, U, -1},
    {"gzip;q=1.000", U, U, 1000, U, U, COMPRESS_GZIP},
    {"gzip;q=1.001", U, U, U, U, U, -1},
    {"gzip;q", U, U, U, U, U, -1},
    {"gzip;q=", U, U, U, U, U, -1},
    {"gzip junk, br", U, 1000, U, U, U, COMPRESS_BR},
    {"gzip;q=0.5 x", U, U, U, U, U, -1},
    {"br;a=\"unterminated, gzip", U, U, U, U, U, -1},
    {"\"gzip\", br", U, 1000, U, U, U, COMPRESS_BR},
    {"gzipx, brr, zstd2", U, U, U, U, U, -1},
    {";q=1, gzip", U, U, 1000, U, U, COMPRESS_GZIP},
};

static void check_accept(const struct compress_accept *a, size_t i)
{
    ck_assert_msg(a->q[COMPRESS_ZSTD] == accept_cases[i].zstd &&
                      a->q[COMPRESS_BR] == accept_cases[i].br &&
                      a->q[COMPRESS_GZIP] == accept_cases[i].gzip &&
                      a->any == accept_cases[i].any && a->identity == accept_cases[i].identity,
                  "\"%s\": zstd %u br %u gzip %u * %u identity %u", accept_cases[i].value,
                  a->q[COMPRESS_ZSTD], a->q[COMPRESS_BR], a->q[COMPRESS_GZIP], a->any, a->identity);
    ck_assert_msg(compress_accept_choose(a, 7) == accept_cases[i].choice, "\"%s\": chose %d",
                  accept_cases[i].value, compress_accept_choose(a, 7));
}

START_TEST(accept_table)
{
    for (size_t i = 0; i < sizeof(accept_cases) / sizeof(accept_cases[0]); i++) {
        const char *v = accept_cases[i].value;
        size_t len = strlen(v);
        /* A copy of exactly its length, so that ASan sees a read past it. */
        char *copy = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, v, len);
        struct compress_accept a;
        compress_accept_init(&a);
        compress_accept_parse(&a, copy, len);
        check_accept(&a, i);
        /* Cut at every byte into two fields, the first ended by a comma
         * (as two Accept-Encoding lines are one list): the same answer
         * when the cut falls on a comma, and never a crash elsewhere. */
        bool quoted = false;
        for (size_t cut = 0; cut <= len; cut++) {
            compress_accept_init(&a);
            compress_accept_parse(&a, copy, cut);
            compress_accept_parse(&a, copy + cut, len - cut);
            if (cut == len || (!quoted && (copy[cut] == ',' || (cut > 0 && copy[cut - 1] == ','))))
                check_accept(&a, i);
            if (cut < len && copy[cut] == '"')
                quoted = !quoted;
        }
        free(copy);
    }
}
END_TEST

/* Equal q-values go by the server's order, a higher q first; what is
 * not offered is passed over. */
START_TEST(accept_choice)
{
    struct compress_accept a;
    compress_accept_init(&a);
    const char *v = "gzip;q=0.9, br;q=0.9, zstd;q=0.5";
    compress_accept_parse(&a, v, strlen(v));
    enum compress_coding order[COMPRESS_CODINGS];
    ck_assert_uint_eq(compress_accept_order(&a, order), 3);
    ck_assert_int_eq(order[0], COMPRESS_BR);
    ck_assert_int_eq(order[1], COMPRESS_GZIP);
    ck_assert_int_eq(order[2], COMPRESS_ZSTD);
    ck_assert_int_eq(compress_accept_choose(&a, 1u << COMPRESS_GZIP | 1u << COMPRESS_ZSTD),
                     COMPRESS_GZIP);
    ck_assert_int_eq(compress_accept_choose(&a, 1u << COMPRESS_ZSTD), COMPRESS_ZSTD);
    ck_assert_int_eq(compress_accept_choose(&a, 0), -1);
    ck_assert_uint_eq(compress_accept_q(&a, COMPRESS_BR), 900);
    ck_assert_str_eq(compress_coding_name(COMPRESS_BR), "br");
    ck_assert_str_eq(compress_coding_name(COMPRESS_ZSTD), "zstd");
    ck_assert_str_eq(compress_coding_name(COMPRESS_GZIP), "gzip");
}
END_TEST

/* ---------------------------------------------------------------- codecs */

struct sink {
    struct compress_decoder *dec;
    size_t emitted;
};

static void to_decoder(void *arg, const char *data, size_t len)
{
    struct sink *s = arg;
    ck_assert_uint_gt(len, 0);
    ck_assert_uint_le(len, COMPRESS_OUT_SIZE);
    ck_assert_msg(compress_decoder_feed(s->dec, data, len), "undecodable output");
    s->emitted += len;
}

/* A body that compresses as text does, with bytes that do not repeat. */
static char *make_body(size_t len)
{
    char *body = malloc(len + 1);
    ck_assert_ptr_nonnull(body);
    uint32_t x = 12345;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        body[i] = (i % 97 < 60) ? "the quick brown fox jumps "[i % 26] : (char)(x >> 24);
    }
    body[len] = '\0';
    return body;
}

static void check_decoded(const struct compress_decoder *dec, const char *body, size_t len)
{
    size_t got;
    const char *out = compress_decoder_output(dec, &got);
    ck_assert_uint_eq(got, len);
    ck_assert(memcmp(out, body, len) == 0);
}

/* Each coding at its lowest, default and highest levels: one piece. */
START_TEST(codec_round_trip)
{
    static const unsigned levels[COMPRESS_CODINGS][3] = {
        [COMPRESS_GZIP] = {1, 6, 9}, [COMPRESS_BR] = {0, 6, 11}, [COMPRESS_ZSTD] = {1, 3, 19}};
    char *body = make_body(100000);
    for (int c = 0; c < COMPRESS_CODINGS; c++) {
        for (int l = 0; l < 3; l++) {
            for (int known = 0; known < 2; known++) {
                struct sink sink = {compress_decoder_new((enum compress_coding)c), 0};
                struct compress_stream *s =
                    compress_stream_new(compress_codec_of((enum compress_coding)c), levels[c][l],
                                        known ? 100000 : -1, to_decoder, &sink);
                ck_assert_ptr_nonnull(s);
                ck_assert_int_eq(compress_stream_write(s, body, 100000, COMPRESS_END), 0);
                ck_assert_msg(compress_decoder_done(sink.dec), "%s level %u: no end",
                              compress_coding_name((enum compress_coding)c), levels[c][l]);
                check_decoded(sink.dec, body, 100000);
                ck_assert_uint_lt(sink.emitted, 100000);
                compress_stream_free(s);
                compress_decoder_free(sink.dec);
            }
        }
    }
    free(body);
}
END_TEST

/* An empty body is a complete, valid stream too. */
START_TEST(codec_empty_body)
{
    for (int c = 0; c < COMPRESS_CODINGS; c++) {
        struct sink sink = {compress_decoder_new((enum compress_coding)c), 0};
        struct compress_stream *s = compress_stream_new(compress_codec_of((enum compress_coding)c),
                                                        1, -1, to_decoder, &sink);
        ck_assert_int_eq(compress_stream_write(s, NULL, 0, COMPRESS_END), 0);
        ck_assert(compress_decoder_done(sink.dec));
        check_decoded(sink.dec, "", 0);
        compress_stream_free(s);
        compress_decoder_free(sink.dec);
    }
}
END_TEST

/* A 4 MB body in pieces of uneven sizes, flushed now and then: after
 * each flush everything written so far decodes, before the end; the
 * whole decodes byte for byte; and the library never held more than the
 * bound docs/config.md gives for the default levels. */
START_TEST(codec_many_pieces_and_flushes)
{
    static const unsigned level[COMPRESS_CODINGS] = {
        [COMPRESS_GZIP] = 1, [COMPRESS_BR] = 3, [COMPRESS_ZSTD] = 1};
    static const size_t bound[COMPRESS_CODINGS] = {
        [COMPRESS_GZIP] = 200 * 1024, [COMPRESS_BR] = 700 * 1024, [COMPRESS_ZSTD] = 540 * 1024};
    const size_t total = 4u << 20;
    char *body = make_body(total);
    for (int c = 0; c < COMPRESS_CODINGS; c++) {
        struct sink sink = {compress_decoder_new((enum compress_coding)c), 0};
        struct compress_stream *s = compress_stream_new(compress_codec_of((enum compress_coding)c),
                                                        level[c], -1, to_decoder, &sink);
        size_t at = 0, flushes = 0;
        for (unsigned i = 0; at < total; i++) {
            size_t piece = 1 + (i * 7919u) % 20000u;
            if (piece > total - at)
                piece = total - at;
            bool flush = i % 13 == 0;
            ck_assert_int_eq(
                compress_stream_write(s, body + at, piece, flush ? COMPRESS_FLUSH : COMPRESS_RUN),
                0);
            at += piece;
            if (flush) {
                check_decoded(sink.dec, body, at);
                ck_assert(!compress_decoder_done(sink.dec));
                flushes++;
            }
        }
        ck_assert_uint_gt(flushes, 10);
        /* A flush with nothing new is harmless. */
        ck_assert_int_eq(compress_stream_write(s, NULL, 0, COMPRESS_FLUSH), 0);
        ck_assert_int_eq(compress_stream_write(s, NULL, 0, COMPRESS_FLUSH), 0);
        check_decoded(sink.dec, body, total);
        ck_assert_int_eq(compress_stream_write(s, NULL, 0, COMPRESS_END), 0);
        ck_assert(compress_decoder_done(sink.dec));
        check_decoded(sink.dec, body, total);
        ck_assert_msg(s->mem_peak <= bound[c], "%s held %zu bytes",
                      compress_coding_name((enum compress_coding)c), s->mem_peak);
        compress_stream_free(s);
        compress_decoder_free(sink.dec);
    }
    free(body);
}
END_TEST

/* A short body known in advance gets a smaller window: less memory.
 * (brotli sizes what it holds from the input it sees anyway.) */
START_TEST(codec_short_body_holds_less)
{
    static const enum compress_coding sized[] = {COMPRESS_GZIP, COMPRESS_ZSTD};
    for (size_t i = 0; i < 2; i++) {
        enum compress_coding c = sized[i];
        size_t peak[2];
        for (int known = 0; known < 2; known++) {
            struct sink sink = {compress_decoder_new(c), 0};
            struct compress_stream *s =
                compress_stream_new(compress_codec_of(c), 1, known ? 1000 : -1, to_decoder, &sink);
            /* In two calls: zstd does a body given whole in one pass. */
            ck_assert_int_eq(compress_stream_write(s, "hello hello hello", 17, COMPRESS_RUN), 0);
            ck_assert_int_eq(compress_stream_write(s, NULL, 0, COMPRESS_END), 0);
            check_decoded(sink.dec, "hello hello hello", 17);
            peak[known] = s->mem_peak;
            compress_stream_free(s);
            compress_decoder_free(sink.dec);
        }
        ck_assert_msg(peak[1] < peak[0], "%s: %zu known, %zu unknown", compress_coding_name(c),
                      peak[1], peak[0]);
    }
}
END_TEST

/* A freed stream's large blocks stay with the thread and the next stream
 * of the same coding takes them back (what it does to the bytes is
 * checked by decoding them); many streams at once leave no more than the
 * bound behind. */
START_TEST(codec_pool_reuse_bounded)
{
    char *body = make_body(100000);
    for (int c = 0; c < COMPRESS_CODINGS; c++) {
        for (int round = 0; round < 3; round++) {
            size_t before = block_pool_bytes();
            struct sink sink = {compress_decoder_new((enum compress_coding)c), 0};
            struct compress_stream *s =
                compress_stream_new(compress_codec_of((enum compress_coding)c),
                                    c == COMPRESS_BR ? 3 : 1, -1, to_decoder, &sink);
            ck_assert_int_eq(compress_stream_write(s, body, 100000, COMPRESS_END), 0);
            check_decoded(sink.dec, body, 100000);
            size_t during = block_pool_bytes();
            compress_stream_free(s);
            compress_decoder_free(sink.dec);
            size_t after = block_pool_bytes();
            ck_assert_uint_gt(after, during);
            if (round > 0) /* the first stream's blocks, taken back */
                ck_assert_uint_lt(during, before);
            ck_assert_uint_le(after, BLOCK_POOL_BYTES);
        }
    }
    struct compress_stream *many[16];
    struct sink sinks[16];
    for (size_t i = 0; i < 16; i++) {
        sinks[i] = (struct sink){compress_decoder_new(COMPRESS_BR), 0};
        many[i] = compress_stream_new(&compress_brotli, 3, -1, to_decoder, &sinks[i]);
        ck_assert_int_eq(compress_stream_write(many[i], body, 100000, COMPRESS_RUN), 0);
    }
    for (size_t i = 0; i < 16; i++) {
        ck_assert_int_eq(compress_stream_write(many[i], NULL, 0, COMPRESS_END), 0);
        check_decoded(sinks[i].dec, body, 100000);
        compress_stream_free(many[i]);
        compress_decoder_free(sinks[i].dec);
        ck_assert_uint_le(block_pool_bytes(), BLOCK_POOL_BYTES);
    }
    /* 16 states would be 10 MB: the pool stopped at its bound. */
    ck_assert_uint_gt(block_pool_bytes(), BLOCK_POOL_BYTES * 3 / 4);
    free(body);
}
END_TEST

/* The pool by itself: a block fits a request of its size down to four
 * fifths of it, not less; small blocks are not kept. */
START_TEST(pool_fit)
{
    size_t cap = 0;
    ck_assert_ptr_null(block_pool_take(100000, &cap));
    void *big = malloc(100000);
    block_pool_put(big, 100000);
#if TEST_ASAN
    /* kept, not to be touched: a use after the coder freed it is caught */
    ck_assert(__asan_address_is_poisoned((char *)big + 50000));
#endif
    size_t held = block_pool_bytes();
    ck_assert_uint_ge(held, 100000);
    ck_assert_ptr_null(block_pool_take(100001, &cap));
    ck_assert_ptr_null(block_pool_take(70000, &cap));
    ck_assert_ptr_eq(block_pool_take(80000, &cap), big);
    ck_assert_uint_eq(cap, 100000);
#if TEST_ASAN
    ck_assert(!__asan_address_is_poisoned((char *)big + 50000));
#endif
    ck_assert_uint_eq(block_pool_bytes(), held - 100000);
    block_pool_put(big, cap);
    void *small = malloc(BLOCK_POOL_MIN - 1);
    block_pool_put(small, BLOCK_POOL_MIN - 1); /* freed, not kept */
    ck_assert_uint_eq(block_pool_bytes(), held);
    ck_assert_ptr_eq(block_pool_take(100000, &cap), big);
    free(big);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/compress_codec");
    TCase *accept = tcase_create("accept");
    tcase_set_timeout(accept, 10);
    tcase_add_test(accept, accept_table);
    tcase_add_test(accept, accept_choice);
    suite_add_tcase(suite, accept);
    TCase *codec = tcase_create("codec");
    tcase_set_timeout(codec, 120);
    tcase_add_test(codec, codec_round_trip);
    tcase_add_test(codec, codec_empty_body);
    tcase_add_test(codec, codec_many_pieces_and_flushes);
    tcase_add_test(codec, codec_short_body_holds_less);
    tcase_add_test(codec, codec_pool_reuse_bounded);
    tcase_add_test(codec, pool_fit);
    suite_add_tcase(suite, codec);
    return suite;
}
