/*
 * acme_resolve.c: the ACME server's address, looked up by getaddrinfo()
 * on a thread of its own, so that the main loop never waits on a
 * resolver at start or on a reload.  The loop asks whether the answer is
 * in (acme_resolve_done()) on a timer; the lookup and its owner share the
 * request, freed by whichever lets it go last, so that a client freed
 * mid-lookup neither waits for it nor leaves it a freed request.
 */
#include "proto/tls/acme_client.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct acme_resolve {
    _Atomic int refs;  /* the owner's and the lookup's */
    _Atomic bool done; /* release: the fields below are written */
    char host[256], port[8];
    int rc; /* getaddrinfo()'s */
    struct sockaddr_storage addr;
    socklen_t addr_len;
};

static void acme_resolve_unref(struct acme_resolve *r)
{
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
        free(r);
}

static void *acme_resolve_main(void *arg)
{
    struct acme_resolve *r = arg;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    r->rc = getaddrinfo(r->host, r->port, &hints, &ai);
    if (r->rc == 0 && (ai == NULL || ai->ai_addrlen > sizeof(r->addr)))
        r->rc = EAI_FAMILY;
    if (r->rc == 0) {
        memcpy(&r->addr, ai->ai_addr, ai->ai_addrlen);
        r->addr_len = ai->ai_addrlen;
    }
    if (ai != NULL)
        freeaddrinfo(ai);
    atomic_store_explicit(&r->done, true, memory_order_release);
    acme_resolve_unref(r);
    return NULL;
}

int acme_resolve_start(const char *host, const char *port, struct acme_resolve **out)
{
    struct acme_resolve *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    if (snprintf(r->host, sizeof(r->host), "%s", host) >= (int)sizeof(r->host) ||
        snprintf(r->port, sizeof(r->port), "%s", port) >= (int)sizeof(r->port)) {
        free(r);
        return -EINVAL;
    }
    atomic_init(&r->refs, 2);
    pthread_attr_t attr;
    pthread_t thread;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&thread, &attr, acme_resolve_main, r);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        free(r);
        return -rc;
    }
    *out = r;
    return 0;
}

bool acme_resolve_done(struct acme_resolve *r, int *rc, struct sockaddr_storage *addr,
                       socklen_t *addr_len)
{
    if (!atomic_load_explicit(&r->done, memory_order_acquire))
        return false;
    *rc = r->rc;
    if (r->rc == 0) {
        *addr = r->addr;
        *addr_len = r->addr_len;
    }
    return true;
}

void acme_resolve_release(struct acme_resolve *r)
{
    if (r != NULL)
        acme_resolve_unref(r);
}
