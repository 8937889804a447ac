/*
 * acme_challenge.c: the HTTP-01 answers offered while an order waits for
 * its validation (RFC 8555 §8.3): few, short-lived, written by the main
 * loop and read by whichever worker the CA's request lands on, so a small
 * list under a mutex, with an atomic count that lets requests skip it.
 */
#include "proto/tls/acme_challenge.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct entry {
    char *token, *answer;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *entries;
static size_t count;
atomic_size_t acme_challenge__http_count;

int acme_challenge_set(const char *token, const char *key_authorization)
{
    char *t = strdup(token), *a = strdup(key_authorization);
    pthread_mutex_lock(&lock);
    struct entry *grown =
        t != NULL && a != NULL ? realloc(entries, (count + 1) * sizeof(*grown)) : NULL;
    if (grown != NULL) {
        entries = grown;
        entries[count++] = (struct entry){t, a};
        atomic_store_explicit(&acme_challenge__http_count, count, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
    if (grown == NULL) {
        free(t);
        free(a);
        return -ENOMEM;
    }
    return 0;
}

void acme_challenge_remove(const char *token)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count; i++)
        if (strcmp(entries[i].token, token) == 0) {
            free(entries[i].token);
            free(entries[i].answer);
            entries[i] = entries[--count];
            break;
        }
    atomic_store_explicit(&acme_challenge__http_count, count, memory_order_relaxed);
    if (count == 0) {
        free(entries);
        entries = NULL;
    }
    pthread_mutex_unlock(&lock);
}

long acme_challenge_lookup(const char *path, size_t len, char *out, size_t cap)
{
    size_t prefix = sizeof(ACME_CHALLENGE_PREFIX) - 1;
    if (len <= prefix || memcmp(path, ACME_CHALLENGE_PREFIX, prefix) != 0 || !acme_challenge_any())
        return -1;
    const char *token = path + prefix;
    size_t token_len = len - prefix;
    long found = -1;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count && found < 0; i++) {
        if (strlen(entries[i].token) != token_len ||
            memcmp(entries[i].token, token, token_len) != 0)
            continue;
        size_t n = strlen(entries[i].answer);
        if (n < cap) {
            memcpy(out, entries[i].answer, n + 1);
            found = (long)n;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

/* ------------------------------------------------------------ tls-alpn-01 */

/* The certificates answering TLS-ALPN-01 (RFC 8737): few, short-lived,
 * by name; read in the handshakes of whichever worker the CA reaches. */
struct alpn_entry {
    char *name;
    X509 *cert;
    EVP_PKEY *key;
};

static struct alpn_entry *alpn_entries;
static size_t alpn_count;
atomic_size_t acme_challenge__alpn_count;

int acme_challenge_alpn_set(const char *name, X509 *cert, EVP_PKEY *key)
{
    char *n = strdup(name);
    pthread_mutex_lock(&lock);
    struct alpn_entry *grown =
        n != NULL ? realloc(alpn_entries, (alpn_count + 1) * sizeof(*grown)) : NULL;
    if (grown != NULL) {
        X509_up_ref(cert);
        EVP_PKEY_up_ref(key);
        alpn_entries = grown;
        alpn_entries[alpn_count++] = (struct alpn_entry){n, cert, key};
        atomic_store_explicit(&acme_challenge__alpn_count, alpn_count, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
    if (grown == NULL) {
        free(n);
        return -ENOMEM;
    }
    return 0;
}

void acme_challenge_alpn_remove(const char *name)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < alpn_count; i++)
        if (strcmp(alpn_entries[i].name, name) == 0) {
            free(alpn_entries[i].name);
            X509_free(alpn_entries[i].cert);
            EVP_PKEY_free(alpn_entries[i].key);
            alpn_entries[i] = alpn_entries[--alpn_count];
            break;
        }
    atomic_store_explicit(&acme_challenge__alpn_count, alpn_count, memory_order_relaxed);
    if (alpn_count == 0) {
        free(alpn_entries);
        alpn_entries = NULL;
    }
    pthread_mutex_unlock(&lock);
}

bool acme_challenge_alpn_use(SSL *ssl, const char *name, size_t len)
{
    bool used = false;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < alpn_count && !used; i++)
        if (strlen(alpn_entries[i].name) == len &&
            strncasecmp(alpn_entries[i].name, name, len) == 0)
            used = SSL_use_certificate(ssl, alpn_entries[i].cert) == 1 &&
                   SSL_use_PrivateKey(ssl, alpn_entries[i].key) == 1;
    pthread_mutex_unlock(&lock);
    return used;
}

bool acme_challenge_alpn_offered(const unsigned char *list, unsigned len)
{
    static const unsigned char acme_tls[] = "\x0a"
                                            "acme-tls/1";
    for (unsigned i = 0; i < len; i += 1u + list[i])
        if (list[i] == 10 && i + 11 <= len && memcmp(list + i, acme_tls, 11) == 0)
            return true;
    return false;
}
