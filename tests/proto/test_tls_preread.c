/*
 * test_tls_preread.c: the ClientHello parser (proto/tls/tls_preread.c) on
 * hellos OpenSSL writes and on hellos built by hand: fed whole, byte by
 * byte, split at every byte, and re-cut into records of every small size;
 * then malformed ones, each refused for its own reason.
 */
#include "proto/tls/tls_preread.h"

#include "tests/helpers.h"

#include <check.h>
#include <errno.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

struct bytes {
    uint8_t data[TLS_PREREAD_MAX + 1024];
    size_t len;
};

/* The first flight OpenSSL sends as a client with `name` (NULL: no SNI)
 * and `alpn` (wire format, NULL: none). */
static void openssl_hello(const char *name, const unsigned char *alpn, size_t alpn_len,
                          struct bytes *out)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    ck_assert_ptr_nonnull(ctx);
    SSL *ssl = SSL_new(ctx);
    ck_assert_ptr_nonnull(ssl);
    BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, rbio, wbio);
    if (name != NULL)
        ck_assert_int_eq(SSL_set_tlsext_host_name(ssl, name), 1);
    if (alpn != NULL)
        ck_assert_int_eq(SSL_set_alpn_protos(ssl, alpn, (unsigned)alpn_len), 0);
    ck_assert_int_eq(SSL_connect(ssl), -1); /* waits for the server's answer */
    int n = BIO_read(wbio, out->data, (int)sizeof(out->data));
    ck_assert_int_gt(n, 0);
    out->len = (size_t)n;
    SSL_free(ssl);
    SSL_CTX_free(ctx);
}

static int feed_whole(const struct bytes *b, struct tls_preread *p)
{
    memset(p, 0, sizeof(*p));
    return tls_preread_feed(p, b->data, b->len);
}

static const unsigned char h2_alpn[] = "\x02h2\x08http/1.1";

START_TEST(openssl_hello_whole)
{
    struct bytes b;
    openssl_hello("api.example.com", h2_alpn, sizeof(h2_alpn) - 1, &b);
    static struct tls_preread p;
    ck_assert_int_eq(feed_whole(&b, &p), 1);
    ck_assert_str_eq(p.server_name, "api.example.com");
    ck_assert_str_eq(p.alpn, "h2,http/1.1");
    openssl_hello(NULL, NULL, 0, &b);
    ck_assert_int_eq(feed_whole(&b, &p), 1);
    ck_assert_str_eq(p.server_name, "");
    ck_assert_str_eq(p.alpn, "");
}
END_TEST

/* Byte by byte: 0 for every byte but the last, then 1; and split in two at
 * every byte. */
START_TEST(openssl_hello_split_anywhere)
{
    struct bytes b;
    openssl_hello("a.example", h2_alpn, sizeof(h2_alpn) - 1, &b);
    static struct tls_preread p;
    memset(&p, 0, sizeof(p));
    for (size_t i = 0; i < b.len; i++) {
        int rc = tls_preread_feed(&p, b.data + i, 1);
        ck_assert_int_eq(rc, i + 1 == b.len ? 1 : 0);
    }
    ck_assert_str_eq(p.server_name, "a.example");
    for (size_t cut = 0; cut <= b.len; cut++) {
        memset(&p, 0, sizeof(p));
        int rc = tls_preread_feed(&p, b.data, cut);
        ck_assert_int_eq(rc, cut == b.len ? 1 : 0);
        if (cut < b.len)
            ck_assert_int_eq(tls_preread_feed(&p, b.data + cut, b.len - cut), 1);
        ck_assert_str_eq(p.server_name, "a.example");
        ck_assert_str_eq(p.alpn, "h2,http/1.1");
    }
}
END_TEST

/* The handshake message of `hello` (one record) cut into records of
 * `size` bytes. */
static void recut(const struct bytes *hello, size_t size, struct bytes *out)
{
    const uint8_t *msg = hello->data + 5;
    size_t len = hello->len - 5;
    out->len = 0;
    for (size_t off = 0; off < len; off += size) {
        size_t n = len - off < size ? len - off : size;
        uint8_t *r = out->data + out->len;
        r[0] = 22, r[1] = 3, r[2] = 1, r[3] = (uint8_t)(n >> 8), r[4] = (uint8_t)n;
        memcpy(r + 5, msg + off, n);
        out->len += 5 + n;
        ck_assert_uint_le(out->len + 5 + size, sizeof(out->data));
    }
}

START_TEST(hello_over_many_records)
{
    struct bytes b;
    openssl_hello("many.example", h2_alpn, sizeof(h2_alpn) - 1, &b);
    ck_assert_uint_eq(b.data[0], 22);
    ck_assert_uint_eq((size_t)b.data[3] << 8 | b.data[4], b.len - 5); /* one record */
    static struct bytes cut;
    static struct tls_preread p;
    const size_t sizes[] = {1, 2, 3, 4, 5, 7, 64, 255, 1000};
    for (size_t i = 0; i < COUNT(sizes); i++) {
        recut(&b, sizes[i], &cut);
        ck_assert_int_eq(feed_whole(&cut, &p), 1);
        ck_assert_str_eq(p.server_name, "many.example");
        ck_assert_str_eq(p.alpn, "h2,http/1.1");
        /* and fed a byte at a time */
        memset(&p, 0, sizeof(p));
        int rc = 0;
        for (size_t k = 0; k < cut.len && rc == 0; k++)
            rc = tls_preread_feed(&p, cut.data + k, 1);
        ck_assert_int_eq(rc, 1);
        ck_assert_str_eq(p.server_name, "many.example");
    }
}
END_TEST

/* --------------------------------------------------- hellos by hand */

/* A ClientHello with `exts` (`exts_len` bytes; NULL: no extensions block)
 * in one record. */
static void hello_with(const uint8_t *exts, size_t exts_len, struct bytes *out)
{
    uint8_t body[TLS_PREREAD_MAX];
    size_t n = 0;
    body[n++] = 3, body[n++] = 3;
    memset(body + n, 0x11, 32), n += 32;
    body[n++] = 0;                                                 /* session id */
    body[n++] = 0, body[n++] = 2, body[n++] = 0x13, body[n++] = 1; /* one suite */
    body[n++] = 1, body[n++] = 0;                                  /* null compression */
    if (exts != NULL) {
        body[n++] = (uint8_t)(exts_len >> 8), body[n++] = (uint8_t)exts_len;
        memcpy(body + n, exts, exts_len), n += exts_len;
    }
    uint8_t *r = out->data;
    size_t msg = 4 + n;
    r[0] = 22, r[1] = 3, r[2] = 1, r[3] = (uint8_t)(msg >> 8), r[4] = (uint8_t)msg;
    r[5] = 1, r[6] = (uint8_t)(n >> 16), r[7] = (uint8_t)(n >> 8), r[8] = (uint8_t)n;
    memcpy(r + 9, body, n);
    out->len = 9 + n;
}

struct bad_case {
    const char *what;
    const char *exts; /* NULL: `raw` is the whole input */
    size_t exts_len;
    const char *raw;
    size_t raw_len;
    int rc;
};

#define EXTS(s) s, sizeof(s) - 1, NULL, 0
#define RAW(s)  NULL, 0, s, sizeof(s) - 1

static const struct bad_case bad_cases[] = {
    {"an HTTP request", RAW("GET / HTTP/1.1\r\n\r\n"), -EPROTO},
    {"an alert record", RAW("\x15\x03\x01\x00\x02\x02\x28"), -EPROTO},
    {"an empty handshake record", RAW("\x16\x03\x01\x00\x00"), -EPROTO},
    {"a record past 2^14", RAW("\x16\x03\x01\x40\x01"), -EPROTO},
    {"SSLv2's version", RAW("\x16\x02\x00\x00\x04"), -EPROTO},
    {"a ServerHello", RAW("\x16\x03\x01\x00\x04\x02\x00\x00\x00"), -EPROTO},
    {"a hello past the bound", RAW("\x16\x03\x01\x00\x04\x01\x00\x40\x00"), -EMSGSIZE},
    {"an empty hello", RAW("\x16\x03\x01\x00\x04\x01\x00\x00\x00"), -EPROTO},
    {"extensions longer than the hello", EXTS("\x00\x00\x00\x10"), -EPROTO},
    {"server_name twice",
     EXTS("\x00\x00\x00\x06\x00\x04\x00\x00\x01\x61\x00\x00\x00\x06\x00\x04\x00\x00\x01\x62"),
     -EPROTO},
    {"two host names", EXTS("\x00\x00\x00\x0a\x00\x08\x00\x00\x01\x61\x00\x00\x01\x62"), -EPROTO},
    {"an empty host name", EXTS("\x00\x00\x00\x05\x00\x03\x00\x00\x00"), -EPROTO},
    {"a NUL in the host name", EXTS("\x00\x00\x00\x07\x00\x05\x00\x00\x02\x61\x00"), -EPROTO},
    {"a slash in the host name", EXTS("\x00\x00\x00\x07\x00\x05\x00\x00\x02\x61/"), -EPROTO},
    {"a name list longer than its extension", EXTS("\x00\x00\x00\x05\x00\x09\x00\x00\x01"),
     -EPROTO},
    {"an empty name list", EXTS("\x00\x00\x00\x02\x00\x00"), -EPROTO},
    {"an empty ALPN list", EXTS("\x00\x10\x00\x02\x00\x00"), -EPROTO},
    {"an empty protocol name", EXTS("\x00\x10\x00\x04\x00\x02\x01\x61\x00"), -EPROTO},
    {"a comma in a protocol", EXTS("\x00\x10\x00\x05\x00\x03\x02\x61,"), -EPROTO},
    {"a protocol past its list", EXTS("\x00\x10\x00\x04\x00\x02\x05\x61"), -EPROTO},
    {"bytes after the extensions' list", EXTS("\x00\x15\x00\x00\x00"), -EPROTO},
};

START_TEST(malformed_hellos_refused)
{
    const struct bad_case *c = &bad_cases[_i];
    static struct bytes b;
    if (c->raw != NULL) {
        memcpy(b.data, c->raw, c->raw_len);
        b.len = c->raw_len;
    } else {
        hello_with((const uint8_t *)c->exts, c->exts_len, &b);
    }
    static struct tls_preread p;
    ck_assert_msg(feed_whole(&b, &p) == c->rc, "%s: %d", c->what, feed_whole(&b, &p));
    /* The same answer fed a byte at a time. */
    memset(&p, 0, sizeof(p));
    int rc = 0;
    for (size_t i = 0; i < b.len && rc == 0; i++)
        rc = tls_preread_feed(&p, b.data + i, 1);
    ck_assert_msg(rc == c->rc, "%s, byte by byte: %d", c->what, rc);
}
END_TEST

/* Well-formed by hand: no extensions at all (TLS 1.2 allows it), other
 * name types skipped, unknown extensions skipped, a 255-byte name. */
START_TEST(hand_made_hellos)
{
    static struct bytes b;
    static struct tls_preread p;
    hello_with(NULL, 0, &b);
    ck_assert_int_eq(feed_whole(&b, &p), 1);
    ck_assert_str_eq(p.server_name, "");
    hello_with((const uint8_t *)"\x00\x00\x00\x0a\x00\x08\x05\x00\x01\x7a\x00\x00\x01"
                                "b"
                                "\xfe\xfe\x00\x00",
               18, &b);
    ck_assert_int_eq(feed_whole(&b, &p), 1);
    ck_assert_str_eq(p.server_name, "b");
    uint8_t exts[300];
    size_t n = 0;
    exts[n++] = 0, exts[n++] = 0, exts[n++] = 1, exts[n++] = 4; /* ext 0, 260 bytes */
    exts[n++] = 1, exts[n++] = 2, exts[n++] = 0, exts[n++] = 0, exts[n++] = 255;
    memset(exts + n, 'x', 255), n += 255;
    hello_with(exts, n, &b);
    ck_assert_int_eq(feed_whole(&b, &p), 1);
    ck_assert_uint_eq(strlen(p.server_name), 255);
    /* what follows the hello is not looked at */
    memcpy(b.data + b.len, "\x17garbage", 8);
    b.len += 8;
    ck_assert_int_eq(feed_whole(&b, &p), 1);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("tls_preread");
    TCase *tc = tcase_create("parse");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, openssl_hello_whole);
    tcase_add_test(tc, openssl_hello_split_anywhere);
    tcase_add_test(tc, hello_over_many_records);
    tcase_add_loop_test(tc, malformed_hellos_refused, 0, COUNT(bad_cases));
    tcase_add_test(tc, hand_made_hellos);
    suite_add_tcase(s, tc);
    return s;
}
