/*
 * cache_key.c: entry ids and Vary's secondary keys (cache_key.h).
 */
#include "proto/cache/cache_key.h"

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
static pthread_key_t ctx_key; /* frees a thread's context when it ends */
static pthread_once_t md5_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void md5_fetch(void)
{
    md5 = EVP_MD_fetch(NULL, "MD5", NULL);
    if (pthread_key_create(&ctx_key, ctx_free) != 0)
        abort(); /* at start, out of keys: nothing can run */
}

void cache_key_id(struct http_str key, struct http_str variant, uint8_t out[CACHE_ID_LEN])
{
    pthread_once(&md5_once, md5_fetch);
    if (thread_ctx == NULL && (thread_ctx = EVP_MD_CTX_new()) != NULL)
        (void)pthread_setspecific(ctx_key, thread_ctx);
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
