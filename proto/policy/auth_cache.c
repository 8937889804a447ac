/*
 * auth_cache.c: auth_basic's per-worker cache of verified credentials, a
 * small set-associative table of SHA-256 digests with an expiry each.
 */
#include "proto/policy/auth_cache.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

int auth_cache_key(uint64_t generation, const char *user, size_t user_len, const char *password,
                   size_t password_len, struct auth_cache_key *out)
{
    uint8_t gen[8];
    for (int i = 0; i < 8; i++)
        gen[i] = (uint8_t)(generation >> (8 * i));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned len = 0;
    /* A user name holds no ':' (the header splits at the first): the
     * separator keeps "ab" + "c" apart from "a" + "bc". */
    int ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, gen, sizeof(gen)) == 1 &&
             EVP_DigestUpdate(ctx, user, user_len) == 1 && EVP_DigestUpdate(ctx, ":", 1) == 1 &&
             EVP_DigestUpdate(ctx, password, password_len) == 1 &&
             EVP_DigestFinal_ex(ctx, out->digest, &len) == 1 && len == sizeof(out->digest);
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -1;
}

static size_t set_of(const struct auth_cache_key *key)
{
    return ((size_t)key->digest[0] | (size_t)key->digest[1] << 8) % AUTH_CACHE_SETS;
}

bool auth_cache_hit(const struct auth_cache *cache, const struct auth_cache_key *key,
                    uint64_t now_ms)
{
    const struct auth_cache_entry *set = cache->entries[set_of(key)];
    bool hit = false;
    for (int i = 0; i < AUTH_CACHE_WAYS; i++)
        hit |= set[i].expires_ms > now_ms &&
               CRYPTO_memcmp(set[i].key.digest, key->digest, sizeof(key->digest)) == 0;
    return hit;
}

void auth_cache_put(struct auth_cache *cache, const struct auth_cache_key *key, uint64_t now_ms)
{
    struct auth_cache_entry *set = cache->entries[set_of(key)];
    int victim = 0;
    for (int i = 0; i < AUTH_CACHE_WAYS; i++) {
        if (memcmp(set[i].key.digest, key->digest, sizeof(key->digest)) == 0) {
            victim = i; /* already there: renewed */
            break;
        }
        if (set[i].expires_ms < set[victim].expires_ms)
            victim = i;
    }
    set[victim] = (struct auth_cache_entry){.key = *key, .expires_ms = now_ms + AUTH_CACHE_TTL_MS};
}

struct auth_cache *auth_cache_worker(void)
{
    static _Thread_local struct auth_cache cache;
    return &cache;
}
