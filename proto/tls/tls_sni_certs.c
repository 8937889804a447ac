/*
 * tls_sni_certs.c: certificates named by the client's SNI name, as
 * nginx's `ssl_certificate $ssl_server_name.pem`: the files are read
 * during the handshake that first asks for a name, and the pair is kept
 * in a cache of bounded size shared by the workers of the server.  With
 * tls_stapling, the main loop makes each pair's staple after the pair is
 * read (tls_sni_certs_staple()), so that a handshake never waits on a
 * file, resolver or responder for it: the first handshakes of a name go
 * out without a staple.
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
    /* tls_stapling: made and freed by the main loop only */
    struct tls_staple *staple;
    bool staple_tried;
};

/* The staples of pairs the cache let go, which only the main loop may
 * stop and free (it may be fetching for them). */
struct doomed {
    struct tls_staple *staple;
    struct doomed *next;
};

struct tls_sni_certs {
    char *certificate, *key; /* the templates */
    pthread_mutex_t lock;
    struct sni_pair *pairs;
    size_t count;
    uint64_t clock;
    /* tls_stapling: the vhost's settings (a copy), or stapling off */
    struct tls_vhost_conf stapling;
    struct tls_stapling_stats *stats;
    struct doomed *doomed;
    /* Main loop only: the responses the previous configuration's staples
     * held (tls_sni_certs_take_staples()), for pairs read again after a
     * reload to staple at once rather than after a fetch. */
    struct tls_staple_held **held;
    size_t held_count;
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

static char *dup_or_null(const char *s, bool *failed)
{
    char *copy = s != NULL ? strdup(s) : NULL;
    *failed |= s != NULL && copy == NULL;
    return copy;
}

int tls_sni_certs_new(const char *certificate, const char *key, const struct tls_vhost_conf *vhost,
                      struct tls_stapling_stats *stats, struct tls_sni_certs **out, char *why,
                      size_t why_len)
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
    bool failed = false;
    /* The settings are kept without tls_stapling too: a must-staple
     * certificate is stapled all the same. */
    if (vhost != NULL) {
        c->stapling.stapling = vhost->stapling;
        c->stapling.stapling_verify = vhost->stapling_verify;
        c->stapling.stapling_file = dup_or_null(vhost->stapling_file, &failed);
        c->stapling.stapling_responder = dup_or_null(vhost->stapling_responder, &failed);
        c->stapling.trusted_ca = dup_or_null(vhost->trusted_ca, &failed);
        c->stats = stats;
    }
    if (c->certificate == NULL || c->key == NULL || c->pairs == NULL || failed) {
        tls_sni_certs_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

/* Under the lock, or from tls_sni_certs_free(): a staple goes to the main
 * loop's list (lost, not freed, if there is no memory for it). */
static void pair_clear(struct tls_sni_certs *c, struct sni_pair *p)
{
    assert(c != NULL || p->staple == NULL);
    struct doomed *d = p->staple != NULL ? malloc(sizeof(*d)) : NULL;
    if (d != NULL) {
        *d = (struct doomed){p->staple, c->doomed};
        c->doomed = d;
    }
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
        pair_clear(c, &c->pairs[i]);
    for (struct doomed *d = c->doomed, *next; d != NULL; d = next) {
        next = d->next;
        tls_staple_free(d->staple);
        free(d);
    }
    for (size_t i = 0; i < c->held_count; i++)
        tls_staple_held_free(c->held[i]);
    free(c->held);
    free(c->pairs);
    free(c->certificate);
    free(c->key);
    free((char *)c->stapling.stapling_file);
    free((char *)c->stapling.stapling_responder);
    free((char *)c->stapling.trusted_ca);
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

bool tls_sni_certs_path(const char *template, const char *sni, char *out, size_t size)
{
    char name[256];
    return safe_name(sni, name, sizeof(name)) && expand(template, name, out, size);
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
    tls_clear_errors();
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
        pair_clear(NULL, out);
    }
    tls_clear_errors();
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
            pair_clear(c, &c->pairs[slot]);
        } else {
            c->count++;
        }
        fresh.used = ++c->clock;
        c->pairs[slot] = fresh;
    }
    pthread_mutex_unlock(&c->lock);
    if (cached)
        pair_clear(NULL, &fresh);
    return ok == 1;
}

void tls_sni_certs_attach(struct tls_sni_certs *c, SSL_CTX *ctx)
{
    SSL_CTX_set_cert_cb(ctx, tls_sni_certs_select, c);
    /* Without tls_stapling too, for must-staple certificates. */
    SSL_CTX_set_tlsext_status_cb(ctx, tls_sni_certs_status);
    SSL_CTX_set_tlsext_status_arg(ctx, c);
}

int tls_sni_certs_status(SSL *ssl, void *arg)
{
    struct tls_sni_certs *c = arg;
    X509 *cert = SSL_get_certificate(ssl);
    if (cert == NULL)
        return SSL_TLSEXT_ERR_NOACK;
    /* The pair's staple is read under the lock that the cache lets a pair
     * go under, and freed only after that. */
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->count; i++)
        if (c->pairs[i].cert == cert) {
            int rc = tls_staple_answer(ssl, c->pairs[i].staple);
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
    pthread_mutex_unlock(&c->lock);
    /* Another certificate of the server, stapled by tls_staple_new() */
    return tls_staple_status_cb(ssl, NULL);
}

/* The staples the cache let go: stopped and freed. */
static void doomed_free(struct tls_sni_certs *c)
{
    pthread_mutex_lock(&c->lock);
    struct doomed *d = c->doomed;
    c->doomed = NULL;
    pthread_mutex_unlock(&c->lock);
    for (struct doomed *next; d != NULL; d = next) {
        next = d->next;
        tls_staple_free(d->staple);
        free(d);
    }
}

/* The most staples made in one call: each may read the CA store and
 * resolve a responder on the main loop. */
#define STAPLES_PER_CALL 16

void tls_sni_certs_staple(struct tls_sni_certs *c, corral_loop *loop)
{
    doomed_free(c);
    struct {
        X509 *cert;
        STACK_OF(X509) * chain;
        char name[256];
    } todo[STAPLES_PER_CALL];
    size_t n = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->count && n < STAPLES_PER_CALL; i++) {
        struct sni_pair *p = &c->pairs[i];
        if (p->staple_tried)
            continue;
        p->staple_tried = true;
        /* Without tls_stapling, only must-staple certificates. */
        if (!c->stapling.stapling && !tls_staple_required(p->cert))
            continue;
        X509_up_ref(p->cert);
        todo[n].cert = p->cert;
        todo[n].chain = X509_chain_up_ref(p->chain);
        snprintf(todo[n].name, sizeof(todo[n].name), "%s", p->name);
        n++;
    }
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        struct tls_staple *st = NULL;
        char why[512];
        if (!c->stapling.stapling)
            corral_log(CORRAL_LOG_WARN,
                       "tls_certificate for SNI \"%s\" is must-staple (TLS Feature "
                       "status_request): OCSP stapling is turned on for it although "
                       "tls_stapling is off",
                       todo[i].name);
        int err = todo[i].chain != NULL
                      ? tls_staple_new_for(todo[i].cert, todo[i].chain, &c->stapling, todo[i].name,
                                           c->stats, &st, why, sizeof(why))
                      : -ENOMEM;
        if (err != 0 || why[0] != '\0')
            corral_log(CORRAL_LOG_WARN, "tls_stapling for SNI \"%s\": %s", todo[i].name,
                       err == -ENOMEM ? "out of memory" : why);
        for (size_t j = 0; st != NULL && j < c->held_count; j++)
            tls_staple_take_held(st, c->held[j]);
        bool attached = false;
        if (st != NULL) {
            /* The pair may have gone meanwhile: the certificate tells. */
            pthread_mutex_lock(&c->lock);
            for (size_t j = 0; j < c->count && !attached; j++)
                if (c->pairs[j].cert == todo[i].cert && c->pairs[j].staple == NULL) {
                    c->pairs[j].staple = st;
                    attached = true;
                }
            pthread_mutex_unlock(&c->lock);
        }
        /* Started here, on the loop's thread; a pair let go since goes to
         * the next call's doomed_free(). */
        if (attached && (err = tls_staple_start(st, loop)) != 0)
            corral_log(CORRAL_LOG_WARN, "tls_stapling for SNI \"%s\": %s; not fetched",
                       todo[i].name, strerror(-err));
        if (!attached)
            tls_staple_free(st);
        X509_free(todo[i].cert);
        sk_X509_pop_free(todo[i].chain, X509_free);
    }
}

void tls_sni_certs_stop(struct tls_sni_certs *c)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->count; i++)
        if (c->pairs[i].staple != NULL)
            tls_staple_stop(c->pairs[i].staple);
    pthread_mutex_unlock(&c->lock);
    doomed_free(c);
}

/* Whether `c` keeps a response for `cert` already. */
static bool held_for(const struct tls_sni_certs *c, X509 *cert)
{
    for (size_t i = 0; i < c->held_count; i++)
        if (X509_cmp(tls_staple_held_cert(c->held[i]), cert) == 0)
            return true;
    return false;
}

void tls_sni_certs_take_staples(struct tls_sni_certs *c, struct tls_sni_certs *from)
{
    /* At most one per certificate, and no more than the cache holds: a
     * run of reloads does not make the list grow. */
    pthread_mutex_lock(&from->lock);
    /* and those `from` kept from the configuration before it, for names
     * not asked for since: a few reloads in a row do not lose them */
    size_t most = from->count + from->held_count;
    struct tls_staple_held **held =
        most > 0 ? realloc(c->held, (c->held_count + most) * sizeof(*held)) : NULL;
    if (held != NULL) {
        c->held = held;
        for (size_t i = 0; i < most && c->held_count < TLS_SNI_CERTS_CACHED; i++) {
            X509 *cert = i >= from->count ? tls_staple_held_cert(from->held[i - from->count])
                                          : from->pairs[i].cert;
            if (held_for(c, cert))
                continue;
            struct tls_staple_held *h =
                i >= from->count                ? tls_staple_held_copy(from->held[i - from->count])
                : from->pairs[i].staple != NULL ? tls_staple_hold(from->pairs[i].staple)
                                                : NULL;
            if (h != NULL)
                c->held[c->held_count++] = h;
        }
    }
    pthread_mutex_unlock(&from->lock);
}
