/*
 * runtime_acme.c: a generation's ACME clients (runtime_acme.h).  The
 * certificate a client stores is read by the vhost's TLS through
 * tls_certificate_watch, so a new one reaches every worker without a
 * reload; a reload makes new clients, which find the stored certificate.
 */
#include "cmd/runtime_acme.h"

#include "conf/config.h"
#include "proto/tls/acme_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct runtime_acme {
    const struct conf_server **servers;
    struct acme_client **clients;
    size_t count;
    bool started;
    pthread_mutex_t lock;      /* clients stopped while /metrics reads them */
    uint64_t issued, failures; /* of the clients stopped */
};

static const struct conf_acme_issuer *issuer_named(const struct conf_config *config,
                                                   const char *name)
{
    for (size_t i = 0; i < config->acme_issuer_count; i++)
        if (strcmp(config->acme_issuers[i].name, name) == 0)
            return &config->acme_issuers[i];
    return NULL;
}

/* The names to certify: those written, else the server's exact names. */
static size_t server_domains(const struct conf_server *s, const char **names, size_t cap)
{
    size_t n = 0;
    if (s->acme.domain_count > 0) {
        for (size_t i = 0; i < s->acme.domain_count && n < cap; i++)
            names[n++] = s->acme.domains[i];
        return n;
    }
    for (size_t i = 0; i < s->server_name_count && n < cap; i++) {
        const char *name = s->server_names[i];
        /* wildcards need dns-01, regexes name nothing certifiable */
        if (name[0] != '\0' && name[0] != '~' && name[0] != '.' && strchr(name, '*') == NULL)
            names[n++] = name;
    }
    return n;
}

int runtime_acme_new(const struct conf_config *config, struct runtime_acme **out)
{
    *out = NULL;
    size_t count = 0;
    for (size_t s = 0; s < config->server_count; s++)
        count += config->servers[s].acme.issuer != NULL;
    if (count == 0)
        return 0;
    struct runtime_acme *acme = calloc(1, sizeof(*acme));
    if (acme != NULL) {
        pthread_mutex_init(&acme->lock, NULL);
        acme->count = 0; /* calloc's zero, restated: the analyzer forgets it across the call */
    }
    if (acme == NULL || (acme->servers = calloc(count, sizeof(*acme->servers))) == NULL ||
        (acme->clients = calloc(count, sizeof(*acme->clients))) == NULL) {
        runtime_acme_free(acme);
        return -ENOMEM;
    }
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        const struct conf_acme_certificate *cert = &server->acme;
        if (cert->issuer == NULL)
            continue;
        const struct conf_acme_issuer *is = issuer_named(config, cert->issuer);
        if (is == NULL) {
            corral_log(CORRAL_LOG_ERROR, "%s:%u:%u: no acme_issuer \"%s\"", cert->pos.file,
                       cert->pos.line, cert->pos.col, cert->issuer);
            runtime_acme_free(acme);
            return -EINVAL;
        }
        const char *names[64];
        size_t n = server_domains(server, names, sizeof(names) / sizeof(names[0]));
        struct acme_issuer_conf ic = {.name = is->name,
                                      .uri = is->uri,
                                      .state_path = is->state_path,
                                      .trusted_ca = is->trusted_ca,
                                      .contacts = (const char *const *)is->contacts,
                                      .contact_count = is->contact_count,
                                      .accept_terms_of_service = is->accept_terms_of_service,
                                      .account_key = (enum acme_key_type)is->account_key,
                                      .tls_alpn = is->tls_alpn,
                                      .eab_kid = is->eab_kid,
                                      .eab_key = is->eab_key};
        struct acme_certificate_conf cc = {
            .domains = names, .domain_count = n, .key = (enum acme_key_type)cert->key};
        char why[256] = "";
        int err = acme_client_new(&ic, &cc, &acme->clients[acme->count], why, sizeof(why));
        if (err != 0) {
            corral_log(CORRAL_LOG_ERROR, "%s:%u:%u: acme_certificate: %s", cert->pos.file,
                       cert->pos.line, cert->pos.col,
                       n == 0 ? "no domain: name them, or give the server a server_name" : why);
            runtime_acme_free(acme);
            return err;
        }
        acme->servers[acme->count++] = server;
    }
    *out = acme;
    return 0;
}

const char *runtime_acme_path(const struct runtime_acme *acme, const struct conf_server *server)
{
    for (size_t i = 0; acme != NULL && i < acme->count; i++)
        if (acme->servers[i] == server)
            return acme_client_path(acme->clients[i]);
    return NULL;
}

int runtime_acme_start(struct runtime_acme *acme, corral_loop *loop)
{
    if (acme == NULL || acme->started)
        return 0;
    acme->started = true;
    for (size_t i = 0; i < acme->count; i++) {
        /* One that cannot start (an unresolvable directory) is logged and
         * leaves its certificate as it is: serving goes on. */
        (void)acme_client_start(acme->clients[i], loop);
    }
    return 0;
}

/* Adds `client`'s counts of certificates issued and of failed attempts
 * to *issued and *failures. */
static void add_client_counts(const struct acme_client *client, uint64_t *issued,
                              uint64_t *failures)
{
    const struct acme_client_stats *s = acme_client_stats(client);
    *issued += atomic_load_explicit(&s->issued, memory_order_relaxed);
    *failures += atomic_load_explicit(&s->failures, memory_order_relaxed);
}

void runtime_acme_totals(struct runtime_acme *acme, uint64_t *issued, uint64_t *failures)
{
    if (acme == NULL)
        return;
    pthread_mutex_lock(&acme->lock);
    *issued += acme->issued;
    *failures += acme->failures;
    for (size_t i = 0; i < acme->count; i++)
        if (acme->clients[i] != NULL)
            add_client_counts(acme->clients[i], issued, failures);
    pthread_mutex_unlock(&acme->lock);
}

bool runtime_acme_expiry(struct runtime_acme *acme, size_t i, char *name, size_t name_len,
                         int64_t *not_after)
{
    if (acme == NULL)
        return false;
    pthread_mutex_lock(&acme->lock);
    bool found = i < acme->count && acme->clients[i] != NULL;
    if (found) {
        snprintf(name, name_len, "%s", acme_client_name(acme->clients[i]));
        *not_after = atomic_load_explicit(&acme_client_stats(acme->clients[i])->not_after,
                                          memory_order_relaxed);
    }
    pthread_mutex_unlock(&acme->lock);
    return found;
}

void runtime_acme_stop(struct runtime_acme *acme)
{
    if (acme == NULL)
        return;
    /* /metrics reads the clients from the admin's thread. */
    pthread_mutex_lock(&acme->lock);
    for (size_t i = 0; i < acme->count; i++) {
        if (acme->clients[i] == NULL)
            continue;
        /* Their counts outlive them: /metrics adds them up. */
        add_client_counts(acme->clients[i], &acme->issued, &acme->failures);
        acme_client_free(acme->clients[i]);
        acme->clients[i] = NULL;
    }
    pthread_mutex_unlock(&acme->lock);
}

void runtime_acme_free(struct runtime_acme *acme)
{
    if (acme == NULL)
        return;
    runtime_acme_stop(acme);
    free(acme->clients);
    free(acme->servers);
    pthread_mutex_destroy(&acme->lock);
    free(acme);
}
