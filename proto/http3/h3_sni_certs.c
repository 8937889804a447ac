/*
 * h3_sni_certs.c: certificates named by the client's SNI name over QUIC,
 * as the TCP listens' `ssl_certificate $ssl_server_name.pem`
 * (tls_sni_certs.c): a vhost's pairs whose file names hold the variable
 * are read, as GnuTLS credentials, during the first handshake that asks
 * for a name, and kept per endpoint (a worker's) in a cache of bounded
 * size.  A connection holds the credentials it handshakes with until it
 * is freed, so that the cache may let them go meanwhile.
 */
#include "proto/http3/http3_internal.h"
#include "proto/tls/tls.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct h3_sni_cred {
    struct h3_sni_cred *next; /* in the endpoint's cache, while cached */
    size_t vhost;
    char name[256]; /* the SNI name as received */
    gnutls_certificate_credentials_t cred;
    unsigned refs; /* connections holding it, and the cache while cached */
    uint64_t used; /* the cache's clock when last taken */
};

/* Credentials of the by-name pairs of `pair`'s list for `name`; NULL
 * (logged) when one does not load. */
static gnutls_certificate_credentials_t load(const struct h3_certificate *pair, const char *name)
{
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS)
        return NULL;
    bool any = false;
    for (; pair != NULL; pair = pair->next) {
        if (!pair->by_name)
            continue;
        char cert_path[4096], key_path[4096];
        int rc = GNUTLS_E_FILE_ERROR;
        if (tls_sni_certs_path(pair->cert_file, name, cert_path, sizeof(cert_path)) &&
            tls_sni_certs_path(pair->key_file, name, key_path, sizeof(key_path)))
            rc = gnutls_certificate_set_x509_key_file(cred, cert_path, key_path,
                                                      GNUTLS_X509_FMT_PEM);
        if (rc < 0) {
            corral_log(CORRAL_LOG_ERROR,
                       "http3: tls_certificate for SNI \"%s\": cannot load \"%s\" and \"%s\": %s",
                       name, pair->cert_file, pair->key_file, gnutls_strerror(rc));
            gnutls_certificate_free_credentials(cred);
            return NULL;
        }
        any = true;
    }
    if (!any) {
        gnutls_certificate_free_credentials(cred);
        return NULL;
    }
    return cred;
}

void h3_sni_certs_release(struct h3_sni_cred *c)
{
    if (c == NULL)
        return;
    assert(c->refs > 0);
    if (--c->refs > 0)
        return;
    gnutls_certificate_free_credentials(c->cred);
    free(c);
}

gnutls_certificate_credentials_t h3_sni_certs_get(struct h3_endpoint *ep, size_t vhost,
                                                  const struct h3_certificate *pairs,
                                                  const char *name, struct h3_sni_cred **held)
{
    *held = NULL;
    struct h3_sni_cred **oldest = NULL;
    size_t count = 0;
    for (struct h3_sni_cred **p = &ep->sni_creds; *p != NULL; p = &(*p)->next, count++) {
        struct h3_sni_cred *c = *p;
        if (c->vhost == vhost && strcmp(c->name, name) == 0) {
            c->used = ++ep->sni_clock;
            c->refs++;
            *held = c;
            return c->cred;
        }
        if (oldest == NULL || c->used < (*oldest)->used)
            oldest = p;
    }
    size_t name_len = strlen(name);
    if (name_len >= sizeof((*held)->name))
        return NULL;
    gnutls_certificate_credentials_t cred = load(pairs, name);
    if (cred == NULL)
        return NULL;
    struct h3_sni_cred *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        gnutls_certificate_free_credentials(cred);
        return NULL;
    }
    /* The least recently taken goes first when the cache is full; the
     * connections that hold it keep it until they are freed. */
    if (count >= H3_SNI_CACHED && oldest != NULL) {
        struct h3_sni_cred *out = *oldest;
        *oldest = out->next;
        h3_sni_certs_release(out);
    }
    c->vhost = vhost;
    memcpy(c->name, name, name_len + 1); /* checked above */
    c->cred = cred;
    c->refs = 2; /* the cache's and the connection's */
    c->used = ++ep->sni_clock;
    c->next = ep->sni_creds;
    ep->sni_creds = c;
    *held = c;
    return cred;
}

void h3_sni_certs_free_all(struct h3_endpoint *ep)
{
    while (ep->sni_creds != NULL) {
        struct h3_sni_cred *c = ep->sni_creds;
        ep->sni_creds = c->next;
        h3_sni_certs_release(c);
    }
}
