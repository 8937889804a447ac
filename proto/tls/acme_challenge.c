/*
 * acme_challenge.c: the HTTP-01 answers offered while an order waits for
 * its validation (RFC 8555 §8.3): few, short-lived, written by the main
 * loop and read by whichever worker the CA's request lands on, so a small
 * list under a mutex, with an atomic count that lets requests skip it.
 */
#include "proto/tls/acme_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *token, *answer;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *entries;
static size_t count;
static atomic_size_t offered;

bool acme_challenge_any(void)
{
    return atomic_load_explicit(&offered, memory_order_relaxed) > 0;
}

int acme_challenge_set(const char *token, const char *key_authorization)
{
    char *t = strdup(token), *a = strdup(key_authorization);
    pthread_mutex_lock(&lock);
    struct entry *grown =
        t != NULL && a != NULL ? realloc(entries, (count + 1) * sizeof(*grown)) : NULL;
    if (grown != NULL) {
        entries = grown;
        entries[count++] = (struct entry){t, a};
        atomic_store_explicit(&offered, count, memory_order_relaxed);
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
    atomic_store_explicit(&offered, count, memory_order_relaxed);
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
