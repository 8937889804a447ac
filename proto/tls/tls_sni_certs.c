/*
 * tls_sni_certs.c: certificates named by the client's SNI name, as
 * nginx's `ssl_certificate $ssl_server_name.pem`: the files are read
 * during the handshake that first asks for a name, and the pair is kept
 * in a cache of bounded size shared by the workers of the server.
 */
#include "proto/tls/tls_internal.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const variables[] = {"${tls_server_name}", "${ssl_server_name}",
                                        "$tls_server_name", "$ssl_server_name"};

struct sni_pair {
    char *name;
    X509 *cert;
    EVP_PKEY *key;
    STACK_OF(X509) * chain;
    uint64_t used; /* the cache's clock when last used: the oldest goes first */
};

struct tls_sni_certs {
    char *certificate, *key; /* the templates */
    pthread_mutex_t lock;
    struct sni_pair *pairs;
    size_t count;
    uint64_t clock;
};

/* The variable at `p`, or NULL. */
static const char *variable_at(const char *p)
{
    for (size_t i = 0; i < sizeof(variables) / sizeof(variables[0]); i++)
        if (strncmp(p, variables[i], strlen(variables[i])) == 0)
            return variables[i];
    return NULL;
}

bool tls_sni_certs_template(const char *path)
{
    return strchr(path, '$') != NULL;
}

/* `template` with its variables replaced by `name`, in `out`; false when
 * it holds another variable or does not fit. */
static bool expand(const char *template, const char *name, char *out, size_t size)
{
    assert(size > 0);
    size_t name_len = strlen(name);
    char *w = out;
    size_t left = size - 1; /* before the NUL */
    for (const char *p = template; *p != '\0';) {
        const char *var = *p == '$' ? variable_at(p) : NULL;
        if (*p == '$' && var == NULL)
            return false;
        const char *piece = var != NULL ? name : p;
        size_t n = var != NULL ? name_len : 1;
        if (n > left)
            return false;
        memcpy(w, piece, n);
        w += n;
        left -= n;
        p += var != NULL ? strlen(var) : 1;
    }
    *w = '\0';
    return true;
}

int tls_sni_certs_new(const char *certificate, const char *key, struct tls_sni_certs **out,
                      char *why, size_t why_len)
{
    assert(certificate != NULL && key != NULL);
    char probe[4096];
    const char *bad = !expand(certificate, "x", probe, sizeof(probe)) ? certificate
                      : !expand(key, "x", probe, sizeof(probe))       ? key
                                                                      : NULL;
    if (bad != NULL) {
        snprintf(why, why_len,
                 "\"%s\": the only variables a certificate's file name takes are "
                 "$tls_server_name and $ssl_server_name",
                 bad);
        return -EINVAL;
    }
    struct tls_sni_certs *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->certificate = strdup(certificate);
    c->key = strdup(key);
    c->pairs = calloc(TLS_SNI_CERTS_CACHED, sizeof(*c->pairs));
    pthread_mutex_init(&c->lock, NULL);
    if (c->certificate == NULL || c->key == NULL || c->pairs == NULL) {
        tls_sni_certs_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

static void pair_clear(struct sni_pair *p)
{
    free(p->name);
    X509_free(p->cert);
    EVP_PKEY_free(p->key);
    sk_X509_pop_free(p->chain, X509_free);
    *p = (struct sni_pair){0};
}

void tls_sni_certs_free(struct tls_sni_certs *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; c->pairs != NULL && i < c->count; i++)
        pair_clear(&c->pairs[i]);
    free(c->pairs);
    free(c->certificate);
    free(c->key);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* A name that may go into a file name: a host name's letters, digits,
 * '-' and '.', no empty label (so neither "/" nor ".." ever), lowercase. */
static bool safe_name(const char *name, char *out, size_t size)
{
    size_t len = strlen(name);
    if (len == 0 || len > 253 || len >= size || name[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (!(isalnum(ch) || ch == '-' || ch == '.') || (ch == '.' && name[i + 1] == '.'))
            return false;
        out[i] = (char)tolower(ch);
    }
    out[len] = '\0';
    return true;
}

/* Reads the pair for `name` from its files; false (logged) if it does not
 * load. */
static bool pair_load(const struct tls_sni_certs *c, const char *name, struct sni_pair *out)
{
    char cert_path[4096], key_path[4096];
    if (!expand(c->certificate, name, cert_path, sizeof(cert_path)) ||
        !expand(c->key, name, key_path, sizeof(key_path)))
        return false;
    *out = (struct sni_pair){0};
    ERR_clear_error();
    BIO *bio = BIO_new_file(cert_path, "r");
    out->cert = bio != NULL ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    out->chain = sk_X509_new_null();
    for (X509 *extra; out->cert != NULL && out->chain != NULL &&
                      (extra = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL;)
        if (sk_X509_push(out->chain, extra) == 0)
            X509_free(extra);
    BIO_free(bio);
    bio = out->cert != NULL ? BIO_new_file(key_path, "r") : NULL;
    out->key = bio != NULL ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    out->name = strdup(name);
    bool ok = out->cert != NULL && out->key != NULL && out->chain != NULL && out->name != NULL &&
              X509_check_private_key(out->cert, out->key) == 1;
    if (!ok) {
        corral_log(CORRAL_LOG_ERROR,
                   "tls_certificate for SNI \"%s\": cannot load \"%s\" and \"%s\"", name, cert_path,
                   key_path);
        pair_clear(out);
    }
    ERR_clear_error();
    return ok;
}

/* OpenSSL's certificate callback (SSL_CTX_set_cert_cb()), in the worker
 * that handshakes: the pair of the client's SNI name, from the cache or
 * read now.  Without SNI, or without files for the name, the handshake
 * fails. */
int tls_sni_certs_select(SSL *ssl, void *arg)
{
    struct tls_sni_certs *c = arg;
    const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    char name[256];
    if (sni == NULL || !safe_name(sni, name, sizeof(name)))
        return 0;
    int ok = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->count && !ok; i++) {
        struct sni_pair *p = &c->pairs[i];
        if (strcmp(p->name, name) == 0) {
            p->used = ++c->clock;
            ok = SSL_use_cert_and_key(ssl, p->cert, p->key, p->chain, 1);
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (ok)
        return 1;
    /* Read outside the lock: the other workers' handshakes go on. */
    struct sni_pair fresh;
    if (!pair_load(c, name, &fresh))
        return 0;
    ok = SSL_use_cert_and_key(ssl, fresh.cert, fresh.key, fresh.chain, 1);
    pthread_mutex_lock(&c->lock);
    bool cached = false;
    for (size_t i = 0; i < c->count && !cached; i++)
        cached = strcmp(c->pairs[i].name, name) == 0; /* another worker was as quick */
    if (!cached) {
        size_t slot = c->count;
        if (c->count == TLS_SNI_CERTS_CACHED) {
            slot = 0;
            for (size_t i = 1; i < c->count; i++)
                if (c->pairs[i].used < c->pairs[slot].used)
                    slot = i;
            pair_clear(&c->pairs[slot]);
        } else {
            c->count++;
        }
        fresh.used = ++c->clock;
        c->pairs[slot] = fresh;
    }
    pthread_mutex_unlock(&c->lock);
    if (cached)
        pair_clear(&fresh);
    return ok == 1;
}
