/*
 * cache_key.c: entry ids and Vary's secondary keys (cache_key.h).
 */
#include "proto/cache/cache_key.h"

#include "proto/thread_exit.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The digest and a context per thread, made once: OpenSSL 3 looks the
 * algorithm up again on every EVP_md5() digest otherwise, which costs a
 * hit as much as the rest of its lookup. */
static _Thread_local EVP_MD_CTX *thread_ctx;
static EVP_MD *md5;
static pthread_once_t md5_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void md5_fetch(void)
{
    md5 = EVP_MD_fetch(NULL, "MD5", NULL);
}

/* Each thread's ids of the short keys it digested lately: a hit digests
 * its key again on every request, and MD5 through EVP (an allocation and
 * a provider's dispatch per digest) is about 3% of a small hit's CPU
 * time, ten times an FNV-1a hash and a comparison.  Direct-mapped by that
 * hash; a key and variant longer than MEMO_KEY_MAX together are digested
 * every time. */
#define MEMO_SLOTS   64
#define MEMO_KEY_MAX 200

struct memo {
    uint64_t hash;
    uint16_t key_len, variant_len; /* 0 and 0: empty (such a key is never kept) */
    uint8_t id[CACHE_ID_LEN];
    char text[MEMO_KEY_MAX]; /* the key, then the variant */
};
static _Thread_local struct memo memos[MEMO_SLOTS];

static uint64_t fnv1a(uint64_t h, const char *data, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)data[i]) * 0x100000001b3u;
    return h;
}

static void digest(struct http_str key, struct http_str variant, uint8_t out[CACHE_ID_LEN]);

void cache_key_id(struct http_str key, struct http_str variant, uint8_t out[CACHE_ID_LEN])
{
    if (key.len + variant.len > MEMO_KEY_MAX || key.len + variant.len == 0) {
        digest(key, variant, out);
        return;
    }
    uint64_t h = fnv1a(fnv1a(0xcbf29ce484222325u, key.data, key.len), variant.data, variant.len);
    /* The length apart, so that "ab" + "c" and "a" + "bc" differ. */
    struct memo *m = &memos[(h ^ key.len) % MEMO_SLOTS];
    if (m->hash == h && m->key_len == key.len && m->variant_len == variant.len &&
        memcmp(m->text, key.data, key.len) == 0 &&
        (variant.len == 0 || memcmp(m->text + key.len, variant.data, variant.len) == 0)) {
        memcpy(out, m->id, CACHE_ID_LEN);
        return;
    }
    digest(key, variant, out);
    static const uint8_t failed[CACHE_ID_LEN] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                                 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    if (memcmp(out, failed, CACHE_ID_LEN) == 0)
        return; /* OpenSSL out of memory: not kept */
    m->hash = h;
    m->key_len = (uint16_t)key.len;
    m->variant_len = (uint16_t)variant.len;
    memcpy(m->id, out, CACHE_ID_LEN);
    memcpy(m->text, key.data, key.len);
    if (variant.len > 0)
        memcpy(m->text + key.len, variant.data, variant.len);
}

static void digest(struct http_str key, struct http_str variant, uint8_t out[CACHE_ID_LEN])
{
    pthread_once(&md5_once, md5_fetch);
    if (thread_ctx == NULL && (thread_ctx = EVP_MD_CTX_new()) != NULL &&
        thread_exit_call(ctx_free, thread_ctx) != 0) {
        EVP_MD_CTX_free(thread_ctx);
        thread_ctx = NULL;
    }
    EVP_MD_CTX *ctx = thread_ctx;
    unsigned len = 0;
    if (ctx == NULL || md5 == NULL || EVP_DigestInit_ex(ctx, md5, NULL) != 1 ||
        EVP_DigestUpdate(ctx, key.data, key.len) != 1 ||
        (variant.len > 0 && (EVP_DigestUpdate(ctx, "\n", 1) != 1 ||
                             EVP_DigestUpdate(ctx, variant.data, variant.len) != 1)) ||
        EVP_DigestFinal_ex(ctx, out, &len) != 1 || len != CACHE_ID_LEN) {
        /* Out of memory in OpenSSL: an id no key has, so that nothing
         * is served for it and what is stored under it is never found. */
        memset(out, 0xff, CACHE_ID_LEN);
    }
}

static void add(char *out, size_t cap, size_t *len, const char *data, size_t n, bool lower)
{
    for (size_t i = 0; i < n; i++, (*len)++)
        if (*len < cap) {
            char c = data[i];
            out[*len] = lower && c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        }
}

size_t cache_key_variant(struct http_str vary, const struct http_header *headers, size_t count,
                         char *out, size_t cap)
{
    size_t len = 0;
    const char *p = vary.data, *end = vary.data + vary.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        struct http_str name = http_trim((struct http_str){p, (size_t)(stop - p)});
        p = stop + 1;
        if (name.len == 0)
            continue;
        add(out, cap, &len, name.data, name.len, true);
        add(out, cap, &len, ":", 1, false);
        bool first = true;
        for (size_t i = 0; i < count; i++) {
            if (headers[i].name.len != name.len ||
                strncasecmp(headers[i].name.data, name.data, name.len) != 0)
                continue;
            if (!first)
                add(out, cap, &len, ",", 1, false);
            struct http_str v = http_trim(headers[i].value);
            add(out, cap, &len, v.data, v.len, false);
            first = false;
        }
        add(out, cap, &len, "\n", 1, false);
    }
    return len;
}

void cache_key_hex(const uint8_t id[CACHE_ID_LEN], char out[2 * CACHE_ID_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < CACHE_ID_LEN; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
    out[2 * CACHE_ID_LEN] = '\0';
}
