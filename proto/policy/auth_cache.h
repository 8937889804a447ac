/*
 * auth_cache.h: the credentials auth_basic verified lately, per worker,
 * so that a keep-alive client sending the same Authorization header with
 * every request pays for its bcrypt check once: bounded in entries
 * (AUTH_CACHE_ENTRIES) and in time (AUTH_CACHE_TTL_MS).  Only a digest is
 * kept, never a password.
 */
#ifndef CORRAL_PROTO_AUTH_CACHE_H
#define CORRAL_PROTO_AUTH_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTH_CACHE_WAYS    4
#define AUTH_CACHE_SETS    256
#define AUTH_CACHE_ENTRIES (AUTH_CACHE_WAYS * AUTH_CACHE_SETS)
#define AUTH_CACHE_TTL_MS  60000u

/* SHA-256 of the user file's load (htpasswd.generation), the user and
 * the password: a reload, a changed password or another file is another
 * key. */
struct auth_cache_key {
    uint8_t digest[32];
};

struct auth_cache_entry {
    struct auth_cache_key key;
    uint64_t expires_ms; /* 0: empty */
};

/* Set-associative: a key's set is chosen by its digest, the oldest of
 * the set replaced when it is full. */
struct auth_cache {
    struct auth_cache_entry entries[AUTH_CACHE_SETS][AUTH_CACHE_WAYS];
};

/* Fills `out`.  Returns 0, or -1 when OpenSSL fails (then nothing is
 * cached). */
int auth_cache_key(uint64_t generation, const char *user, size_t user_len, const char *password,
                   size_t password_len, struct auth_cache_key *out);

/* Whether `key` was put within AUTH_CACHE_TTL_MS of `now_ms`. */
bool auth_cache_hit(const struct auth_cache *cache, const struct auth_cache_key *key,
                    uint64_t now_ms);

/* Remembers `key` as verified at `now_ms`. */
void auth_cache_put(struct auth_cache *cache, const struct auth_cache_key *key, uint64_t now_ms);

/* The calling thread's cache (a worker's: no lock, no sharing). */
struct auth_cache *auth_cache_worker(void);

#endif
