/*
 * tls_tickets.c: the session ticket keys of a TLS server, shared by its
 * workers and rotated as they are used, so that a resumed client needs no
 * server-side session cache.
 */
#include "proto/tls/tls_internal.h"

#include <openssl/core_names.h>
#include <openssl/rand.h>
#include <string.h>

static void ticket_key_generate(struct ticket_key *key, uint64_t now)
{
    key->valid = RAND_bytes(key->name, sizeof(key->name)) == 1 &&
                 RAND_priv_bytes(key->cipher_key, sizeof(key->cipher_key)) == 1 &&
                 RAND_priv_bytes(key->mac_key, sizeof(key->mac_key)) == 1;
    key->created_ms = now;
}

/* Rotation happens when a key is needed, catching up on idle periods. */
static void ticket_keys_rotate(struct ticket_keys *keys, uint64_t now)
{
    uint64_t age = now - keys->current.created_ms;
    if (keys->current.valid && age < keys->rotation_ms)
        return;
    if (age < 2 * keys->rotation_ms)
        keys->previous = keys->current;
    else
        keys->previous.valid = false;
    ticket_key_generate(&keys->current, now);
}

void tls_tickets_init(struct ticket_keys *keys, uint64_t rotation_ms)
{
    keys->rotation_ms = rotation_ms;
    pthread_mutex_init(&keys->lock, NULL);
}

void tls_tickets_free(struct ticket_keys *keys)
{
    pthread_mutex_destroy(&keys->lock);
    OPENSSL_cleanse(keys, sizeof(*keys));
}

void tls_tickets_take(struct ticket_keys *keys, struct ticket_keys *from)
{
    pthread_mutex_lock(&from->lock);
    keys->current = from->current;
    keys->previous = from->previous;
    pthread_mutex_unlock(&from->lock);
}

int tls_tickets_key_cb(struct ticket_keys *keys, SSL *ssl, unsigned char key_name[16],
                       unsigned char *iv, EVP_CIPHER_CTX *cipher, EVP_MAC_CTX *mac, int encrypt)
{
    struct ticket_key key;
    int found = 0; /* 1: the current key, 2: the previous one (renew the ticket) */
    pthread_mutex_lock(&keys->lock);
    ticket_keys_rotate(keys, corral_monotonic_ns() / 1000000u);
    if (encrypt || (keys->current.valid && memcmp(key_name, keys->current.name, 16) == 0)) {
        key = keys->current;
        found = key.valid;
    } else if (keys->previous.valid && memcmp(key_name, keys->previous.name, 16) == 0) {
        key = keys->previous;
        found = 2;
    }
    pthread_mutex_unlock(&keys->lock);
    if (!found)
        return 0; /* no ticket issued, or a full handshake */
    /* TLS 1.3 tickets are meant for one use (RFC 8446 appendix C.4): a
     * resumed client gets a fresh one for its next connection. */
    if (!encrypt && SSL_version(ssl) == TLS1_3_VERSION)
        found = 2;
    if (encrypt) {
        if (RAND_bytes(iv, EVP_CIPHER_get_iv_length(EVP_aes_256_cbc())) != 1)
            return -1;
        memcpy(key_name, key.name, 16);
    }
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_CipherInit_ex(cipher, EVP_aes_256_cbc(), NULL, key.cipher_key, iv, encrypt) != 1 ||
        EVP_MAC_init(mac, key.mac_key, sizeof(key.mac_key), params) != 1)
        return -1;
    return found;
}
