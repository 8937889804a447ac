/*
 * tls_stapling.c: OCSP stapling.  Each certificate of a server with
 * tls_stapling on has one staple, shared by every worker: the DER of the
 * last good OCSP response, which the status callback hands to clients that
 * ask.  Responses come from tls_stapling_file, or are fetched from the
 * responder (the certificate's AIA OCSP URL or tls_stapling_responder) by
 * one HTTP/1.1 POST at a time on the main loop (plain for http://, over
 * verified TLS by acme_http_send() for https://), and fetched again
 * before they expire; a failed fetch leaves the last good one in place.
 * Responder bytes are bounded and parsed by OpenSSL only.
 */
#include "proto/tls/tls_internal.h"
#include "proto/tls/acme_client.h"
#include "proto/counter.h"
#include "proto/url.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ocsp.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

/* A response larger than this is not an OCSP response for one
 * certificate: the fetch fails rather than buffer more of it. */
#define RESPONSE_LIMIT (64 * 1024)
/* nginx's schedule: at most an hour between fetches, five minutes after a
 * failure; and never later than half the time left to nextUpdate. */
#define REFRESH_MAX_S    3600
#define RETRY_S          300
#define FETCH_TIMEOUT_MS (10 * 1000)
/* Clock skew allowed on thisUpdate and nextUpdate (OCSP_check_validity). */
#define SKEW_S 300

struct fetch;

struct tls_staple {
    X509 *cert, *issuer;
    STACK_OF(X509) * chain; /* the certificate's chain, trusted as signers (nginx) */
    OCSP_CERTID *id;
    X509_STORE *store; /* tls_stapling_verify: tls_trusted_certificate, else the system's */
    bool verify;
    char *name; /* the certificate's file, for the log */
    /* The responder, resolved when the configuration is loaded; no
     * address: tls_stapling_file, or no responder */
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char *host, *path;
    /* Its name and port, while its address is to be looked up by the
     * main loop (a staple made outside the configuration's load) */
    char lookup_host[256], lookup_port[8];
    bool lookup;
    struct acme_resolve *resolving;
    char *url;               /* https://: fetched by acme_http_send() */
    struct tls_client *tls;  /* https://: towards the responder */
    struct acme_http *https; /* https://: in flight */
    bool from_file;
    /* The staple, read by every worker */
    pthread_mutex_t lock;
    unsigned char *der;
    size_t der_len;
    time_t valid_until; /* nextUpdate, or never without one */
    /* Main loop only */
    corral_loop *loop;
    corral_timer *timer;
    struct fetch *fetch; /* in flight */
    struct tls_stapling_stats *stats;
};

struct fetch {
    struct tls_staple *staple; /* NULL once the staple is gone */
    corral_conn *conn;
    unsigned char *buf;
    size_t len;
    bool failed;
    bool done; /* the answer was judged */
};

static int staple_index = -1;
static pthread_once_t staple_index_once = PTHREAD_ONCE_INIT;

static void staple_index_init(void)
{
    staple_index = X509_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

bool tls_staple_required(X509 *cert)
{
    /* RFC 7633: the TLS Feature extension, a list of TLS extension
     * numbers; 5 is status_request. */
    TLS_FEATURE *features =
        cert != NULL ? X509_get_ext_d2i(cert, NID_tlsfeature, NULL, NULL) : NULL;
    bool required = false;
    for (int i = 0; i < sk_ASN1_INTEGER_num(features) && !required; i++)
        required =
            ASN1_INTEGER_get(sk_ASN1_INTEGER_value(features, i)) == TLSEXT_TYPE_status_request;
    TLS_FEATURE_free(features);
    tls_clear_errors();
    return required;
}

static time_t asn1_time_t(const ASN1_GENERALIZEDTIME *t)
{
    struct tm tm;
    if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
        return (time_t)-1;
    return timegm(&tm);
}

/* Whether `der` is a good, current response for the staple's certificate:
 * its expiry in *valid_until, or why not in `why`. */
static bool response_check(const struct tls_staple *st, const unsigned char *der, size_t len,
                           time_t *valid_until, char *why, size_t why_len)
{
    const unsigned char *p = der;
    OCSP_RESPONSE *resp = len <= LONG_MAX ? d2i_OCSP_RESPONSE(NULL, &p, (long)len) : NULL;
    OCSP_BASICRESP *basic = NULL;
    bool ok = false;
    int status, reason;
    ASN1_GENERALIZEDTIME *revoked, *this_update, *next_update;
    if (resp == NULL) {
        snprintf(why, why_len, "not an OCSP response");
    } else if (OCSP_response_status(resp) != OCSP_RESPONSE_STATUS_SUCCESSFUL) {
        snprintf(why, why_len, "the responder answered \"%s\"",
                 OCSP_response_status_str(OCSP_response_status(resp)));
    } else if ((basic = OCSP_response_get1_basic(resp)) == NULL) {
        snprintf(why, why_len, "no basic OCSP response");
    } else if (st->verify && OCSP_basic_verify(basic, st->chain, st->store, OCSP_TRUSTOTHER) != 1) {
        snprintf(why, why_len, "the response does not verify: %s", tls_openssl_reason());
    } else if (OCSP_resp_find_status(basic, st->id, &status, &reason, &revoked, &this_update,
                                     &next_update) != 1) {
        snprintf(why, why_len, "the response is not about this certificate");
    } else if (status != V_OCSP_CERTSTATUS_GOOD) {
        snprintf(why, why_len, "the certificate's status is \"%s\"", OCSP_cert_status_str(status));
    } else if (OCSP_check_validity(this_update, next_update, SKEW_S, -1) != 1) {
        snprintf(why, why_len, "the response has expired or is not valid yet");
    } else {
        time_t until = next_update != NULL ? asn1_time_t(next_update) : (time_t)INT64_MAX;
        ok = until != (time_t)-1;
        if (!ok)
            snprintf(why, why_len, "unreadable nextUpdate");
        *valid_until = until;
    }
    OCSP_BASICRESP_free(basic);
    OCSP_RESPONSE_free(resp);
    tls_clear_errors();
    return ok;
}

/* Puts a checked response in place of the one before (which a failed
 * check leaves alone). */
static void staple_set(struct tls_staple *st, unsigned char *der, size_t len, time_t valid_until)
{
    pthread_mutex_lock(&st->lock);
    free(st->der);
    st->der = der;
    st->der_len = len;
    st->valid_until = valid_until;
    pthread_mutex_unlock(&st->lock);
}

int tls_staple_answer(SSL *ssl, struct tls_staple *st)
{
    if (st == NULL)
        return SSL_TLSEXT_ERR_NOACK;
    unsigned char *copy = NULL;
    size_t len = 0;
    pthread_mutex_lock(&st->lock);
    if (st->der != NULL && time(NULL) < st->valid_until) {
        copy = OPENSSL_malloc(st->der_len);
        if (copy != NULL) {
            memcpy(copy, st->der, st->der_len);
            len = st->der_len;
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (copy == NULL)
        return SSL_TLSEXT_ERR_NOACK;
    /* OpenSSL frees it with the SSL. */
    if (SSL_set_tlsext_status_ocsp_resp(ssl, copy, (long)len) != 1) {
        OPENSSL_free(copy);
        return SSL_TLSEXT_ERR_NOACK;
    }
    return SSL_TLSEXT_ERR_OK;
}

int tls_staple_status_cb(SSL *ssl, void *arg)
{
    (void)arg;
    X509 *cert = SSL_get_certificate(ssl);
    return tls_staple_answer(
        ssl, cert != NULL && staple_index >= 0 ? X509_get_ex_data(cert, staple_index) : NULL);
}

/* The issuer of `cert`: in its chain, else in `store`. */
static X509 *find_issuer(X509 *cert, STACK_OF(X509) * chain, X509_STORE *store)
{
    for (int i = 0; i < sk_X509_num(chain); i++) {
        X509 *c = sk_X509_value(chain, i);
        if (X509_check_issued(c, cert) == X509_V_OK) {
            X509_up_ref(c);
            return c;
        }
    }
    X509 *issuer = NULL;
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    if (ctx != NULL && X509_STORE_CTX_init(ctx, store, NULL, NULL) == 1 &&
        X509_STORE_CTX_get1_issuer(&issuer, ctx, cert) != 1)
        issuer = NULL;
    X509_STORE_CTX_free(ctx);
    return issuer;
}

/* The responders' addresses resolved so far, by "HOST PORT": a
 * certificate the watch loads again (a renewal, from the same CA) names
 * the responder its predecessor did, and a worker then need not wait on
 * a resolver.  Bounded; the oldest entry makes room. */
#define RESPONDER_CACHE_SIZE 16

static struct responder_cached {
    char key[sizeof("[]") + 256 + 8];
    struct sockaddr_storage addr;
    socklen_t addr_len;
} responder_cache[RESPONDER_CACHE_SIZE];
static size_t responder_cache_next;
static pthread_mutex_t responder_cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* The address of `host`:`port` if the cache has it. */
static bool responder_cached(const char *host, const char *port, struct sockaddr_storage *addr,
                             socklen_t *addr_len)
{
    char key[sizeof(responder_cache[0].key)];
    snprintf(key, sizeof(key), "%s %s", host, port);
    bool found = false;
    pthread_mutex_lock(&responder_cache_lock);
    for (size_t i = 0; i < RESPONDER_CACHE_SIZE && !found; i++)
        if (responder_cache[i].addr_len > 0 && strcmp(responder_cache[i].key, key) == 0) {
            *addr = responder_cache[i].addr;
            *addr_len = responder_cache[i].addr_len;
            found = true;
        }
    pthread_mutex_unlock(&responder_cache_lock);
    return found;
}

static void responder_cache_put(const char *host, const char *port,
                                const struct sockaddr_storage *addr, socklen_t addr_len)
{
    pthread_mutex_lock(&responder_cache_lock);
    struct responder_cached *slot = &responder_cache[responder_cache_next];
    responder_cache_next = (responder_cache_next + 1) % RESPONDER_CACHE_SIZE;
    snprintf(slot->key, sizeof(slot->key), "%s %s", host, port);
    slot->addr = *addr;
    slot->addr_len = addr_len;
    pthread_mutex_unlock(&responder_cache_lock);
}

/* The address of `host`:`port` from the cache, else from getaddrinfo(),
 * then cached.  Returns 0, or getaddrinfo()'s error. */
static int responder_resolve(const char *host, const char *port, struct sockaddr_storage *addr,
                             socklen_t *addr_len)
{
    if (responder_cached(host, port, addr, addr_len))
        return 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL)
        return rc != 0 ? rc : EAI_FAIL;
    if (res->ai_addrlen > sizeof(*addr)) {
        freeaddrinfo(res);
        return EAI_FAMILY;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    responder_cache_put(host, port, addr, *addr_len);
    return 0;
}

/* "http[s]://HOST[:PORT][/PATH]": the responder, from the cache when an
 * earlier certificate named it, else resolved now (configuration time,
 * so that -t says when it cannot be) or, with `later` (a staple made
 * while serving: a worker's or the loop's must not wait on a resolver),
 * looked up off the loop before the first fetch.  An https:// one is
 * verified against `trusted_ca` (NULL: the system's store) for its
 * host. */
static int responder_parse(struct tls_staple *st, const char *url, const char *trusted_ca,
                           bool later, char *why, size_t why_len)
{
    struct url u;
    if (url_split(url, &u) != 0) {
        snprintf(why, why_len, "OCSP responder \"%s\" is not an http:// or https:// URL", url);
        return -EINVAL;
    }
    if (u.https) {
        struct tls_client_conf conf = TLS_CLIENT_CONF_DEFAULT;
        conf.ca_file = trusted_ca;
        conf.server_name = u.host;
        char error[256];
        if (tls_client_new(&conf, 1, 1, &st->tls, error, sizeof(error)) != 0) {
            snprintf(why, why_len, "OCSP responder \"%s\": %s", url, error);
            return -EINVAL;
        }
        st->url = strdup(url);
        if (st->url == NULL)
            return -ENOMEM;
    }
    int rc = 0;
    if (later && !responder_cached(u.host, u.port, &st->addr, &st->addr_len)) {
        st->lookup = true;
        snprintf(st->lookup_host, sizeof(st->lookup_host), "%s", u.host);
        snprintf(st->lookup_port, sizeof(st->lookup_port), "%s", u.port);
    } else if (!later) {
        rc = responder_resolve(u.host, u.port, &st->addr, &st->addr_len);
    }
    if (rc != 0) {
        snprintf(why, why_len, "OCSP responder \"%s\": cannot resolve \"%s\": %s", url, u.host,
                 gai_strerror(rc));
        return -EINVAL;
    }
    st->host = strndup(u.authority, u.authority_len); /* with its port: the Host header */
    st->path = strndup(u.path, u.path_len);
    return st->host != NULL && st->path != NULL ? 0 : -ENOMEM;
}

/* Reads tls_stapling_file, stapled while it is good and current.  A file
 * that cannot be read is an error; one that is not a good response for
 * the certificate only a warning (not stapled), as it may be replaced. */
static int stapling_file_load(struct tls_staple *st, const char *path, char *why, size_t why_len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, why_len, "cannot read \"%s\": %s", path, strerror(errno));
        return -EINVAL;
    }
    unsigned char *der = malloc(RESPONSE_LIMIT);
    size_t len = der != NULL ? fread(der, 1, RESPONSE_LIMIT, f) : 0;
    bool too_long = der != NULL && len == RESPONSE_LIMIT && fgetc(f) != EOF;
    fclose(f);
    if (der == NULL)
        return -ENOMEM;
    time_t until;
    char bad[256];
    if (too_long || !response_check(st, der, len, &until, bad, sizeof(bad))) {
        snprintf(why, why_len, "OCSP response \"%s\": %s; not stapled", path,
                 too_long ? "larger than 64 KiB" : bad);
        free(der);
        return 0;
    }
    staple_set(st, der, len, until);
    return 0;
}

/* tls_staple_new() and tls_staple_new_for() but for the context. */
static int staple_make(X509 *cert, STACK_OF(X509) * chain, const struct tls_vhost_conf *vhost,
                       const char *name, bool later, struct tls_stapling_stats *stats,
                       struct tls_staple **out, enum tls_conf_item *item, char *why, size_t why_len)
{
    pthread_once(&staple_index_once, staple_index_init);
    *out = NULL;
    why[0] = '\0';
    struct tls_staple *st = calloc(1, sizeof(*st));
    if (st == NULL || staple_index < 0)
        goto nomem;
    pthread_mutex_init(&st->lock, NULL);
    st->stats = stats;
    st->verify = vhost->stapling_verify;
    X509_up_ref(cert);
    st->cert = cert;
    st->chain = chain != NULL ? X509_chain_up_ref(chain) : sk_X509_new_null();
    st->store = X509_STORE_new();
    st->name = strdup(name);
    if (st->chain == NULL || st->store == NULL || st->name == NULL)
        goto nomem;
    tls_clear_errors();
    *item = TLS_CONF_TRUSTED_CERTIFICATE;
    if ((vhost->trusted_ca != NULL ? X509_STORE_load_file(st->store, vhost->trusted_ca)
                                   : X509_STORE_set_default_paths(st->store)) != 1) {
        snprintf(why, why_len, "cannot load CA certificates from \"%s\": %s",
                 vhost->trusted_ca != NULL ? vhost->trusted_ca : "the default store",
                 tls_openssl_reason());
        goto invalid;
    }
    st->issuer = find_issuer(cert, st->chain, st->store);
    *item = TLS_CONF_CERTIFICATE;
    if (st->issuer == NULL) {
        /* nginx goes on without stapling, and so does corral. */
        snprintf(why, why_len,
                 "tls_stapling: no issuer of \"%s\" in its chain or tls_trusted_certificate; "
                 "not stapled",
                 name);
        tls_staple_free(st);
        return 0;
    }
    st->id = OCSP_cert_to_id(NULL, cert, st->issuer);
    if (st->id == NULL)
        goto nomem;
    if (vhost->stapling_file != NULL) {
        *item = TLS_CONF_STAPLING_FILE;
        st->from_file = true;
        int err = stapling_file_load(st, vhost->stapling_file, why, why_len);
        if (err != 0) {
            tls_staple_free(st);
            return err;
        }
    } else {
        const char *url = vhost->stapling_responder;
        STACK_OF(OPENSSL_STRING) *aia = url == NULL ? X509_get1_ocsp(cert) : NULL;
        if (url == NULL && sk_OPENSSL_STRING_num(aia) > 0)
            url = sk_OPENSSL_STRING_value(aia, 0);
        *item =
            vhost->stapling_responder != NULL ? TLS_CONF_STAPLING_RESPONDER : TLS_CONF_CERTIFICATE;
        int err =
            url != NULL ? responder_parse(st, url, vhost->trusted_ca, later, why, why_len) : 0;
        if (url == NULL)
            snprintf(why, why_len,
                     "tls_stapling: \"%s\" names no OCSP responder and there is no "
                     "\"tls_stapling_responder\"; not stapled",
                     name);
        X509_email_free(aia);
        if (err != 0 || url == NULL) {
            tls_staple_free(st);
            return err;
        }
    }
    *out = st;
    return 0;
nomem:
    tls_staple_free(st);
    return -ENOMEM;
invalid:
    tls_staple_free(st);
    return -EINVAL;
}

int tls_staple_new(SSL_CTX *ctx, const struct tls_vhost_conf *vhost, const char *name, bool later,
                   struct tls_stapling_stats *stats, struct tls_staple **out,
                   enum tls_conf_item *item, char *why, size_t why_len)
{
    X509 *cert = SSL_CTX_get0_certificate(ctx);
    STACK_OF(X509) *chain = NULL;
    SSL_CTX_get0_chain_certs(ctx, &chain);
    int err = staple_make(cert, chain, vhost, name, later, stats, out, item, why, why_len);
    if (err != 0 || *out == NULL)
        return err;
    if (X509_set_ex_data(cert, staple_index, *out) != 1) {
        tls_staple_free(*out);
        *out = NULL;
        return -ENOMEM;
    }
    /* A callback there already (certificates named by SNI) falls back on
     * this one for the others. */
    int (*cb)(SSL *, void *) = NULL;
    SSL_CTX_get_tlsext_status_cb(ctx, &cb);
    if (cb == NULL)
        SSL_CTX_set_tlsext_status_cb(ctx, tls_staple_status_cb);
    return 0;
}

int tls_staple_new_for(X509 *cert, STACK_OF(X509) * chain, const struct tls_vhost_conf *vhost,
                       const char *name, struct tls_stapling_stats *stats, struct tls_staple **out,
                       char *why, size_t why_len)
{
    enum tls_conf_item item;
    return staple_make(cert, chain, vhost, name, true, stats, out, &item, why, why_len);
}

/* ------------------------------------------------------------- fetching */

static void fetch_end(struct fetch *f, bool ok);

static void schedule(struct tls_staple *st, bool ok)
{
    time_t now = time(NULL), after = ok ? REFRESH_MAX_S : RETRY_S;
    pthread_mutex_lock(&st->lock);
    time_t until = st->der != NULL ? st->valid_until : 0;
    pthread_mutex_unlock(&st->lock);
    /* Before the response in hand expires: halfway there. */
    if (until > now && (until - now) / 2 < after)
        after = (until - now) / 2;
    if (after < 1)
        after = 1;
    corral_timer_start(st->timer, (uint64_t)after * 1000);
}

/* The DER of an OCSP request for the staple's certificate (OPENSSL_free
 * it), its length in *len; NULL when out of memory. */
static unsigned char *ocsp_request(const struct tls_staple *st, int *len)
{
    OCSP_REQUEST *req = OCSP_REQUEST_new();
    OCSP_CERTID *id = OCSP_CERTID_dup(st->id);
    unsigned char *der = NULL;
    *len = -1;
    if (req != NULL && id != NULL && OCSP_request_add0_id(req, id) != NULL)
        id = NULL, *len = i2d_OCSP_REQUEST(req, &der);
    else
        OCSP_CERTID_free(id);
    OCSP_REQUEST_free(req);
    if (*len <= 0) {
        OPENSSL_free(der);
        return NULL;
    }
    return der;
}

static void on_fetch_open(corral_conn *conn)
{
    struct fetch *f = corral_conn_data(conn);
    struct tls_staple *st = f->staple;
    if (st == NULL) {
        corral_conn_abort(conn, 0);
        return;
    }
    int len;
    unsigned char *der = ocsp_request(st, &len);
    if (der == NULL) {
        f->failed = true;
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/ocsp-request\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n",
                     st->path, st->host, len);
    if (n < 0 || (size_t)n >= sizeof(head)) {
        OPENSSL_free(der);
        f->failed = true;
        corral_conn_abort(conn, -EINVAL);
        return;
    }
    corral_conn_write(conn, head, (size_t)n);
    corral_conn_write(conn, der, (size_t)len);
    OPENSSL_free(der);
}

static void fetch_done(corral_conn *conn);

/* The Content-Length of the head in f->buf that ends at `end` (its blank
 * line, which stops every scan below inside the buffer). */
static bool content_length(const struct fetch *f, const char *end, size_t *n)
{
    const char *text = (const char *)f->buf;
    for (const char *line = memchr(text, '\n', (size_t)(end - text)); line != NULL && line < end;
         line = memchr(line + 1, '\n', (size_t)(end - line))) {
        if (strncasecmp(line + 1, "Content-Length:", 15) != 0)
            continue;
        unsigned long value = strtoul(line + 16, NULL, 10);
        *n = value;
        return value <= RESPONSE_LIMIT;
    }
    return false;
}

/* Whether the answer in f->buf is whole by its Content-Length (a
 * responder may keep the connection open after it). */
static bool answer_complete(const struct fetch *f)
{
    const char *end = memmem(f->buf, f->len, "\r\n\r\n", 4);
    size_t n;
    return end != NULL && content_length(f, end, &n) &&
           f->len - (size_t)(end + 4 - (const char *)f->buf) >= n;
}

static size_t on_fetch_data(corral_conn *conn, const char *data, size_t len)
{
    struct fetch *f = corral_conn_data(conn);
    if (len > RESPONSE_LIMIT - f->len) {
        corral_log(CORRAL_LOG_WARN, "OCSP responder: the answer is larger than 64 KiB");
        f->failed = true;
        corral_conn_abort(conn, -EMSGSIZE);
        return len;
    }
    memcpy(f->buf + f->len, data, len);
    f->len += len;
    if (answer_complete(f))
        fetch_done(conn);
    return len;
}

/* The body of an HTTP/1.x 200 answer in f->buf, or NULL. */
static const unsigned char *http_body(const struct fetch *f, size_t *len, char *why, size_t n)
{
    const char *text = (const char *)f->buf;
    const char *end = memmem(text, f->len, "\r\n\r\n", 4);
    if (f->len < 12 || end == NULL || strncmp(text, "HTTP/1.", 7) != 0) {
        snprintf(why, n, "not an HTTP/1.x answer");
        return NULL;
    }
    if (strncmp(text + 8, " 200", 4) != 0) {
        snprintf(why, n, "HTTP status %.3s", text + 9);
        return NULL;
    }
    const unsigned char *body = (const unsigned char *)end + 4;
    size_t declared;
    *len = f->len - (size_t)(body - f->buf);
    if (content_length(f, end, &declared) && declared < *len)
        *len = declared;
    return body;
}

/* The responder's answer, `len` bytes at `body` (NULL: none, `why` says
 * why): stapled if it is a good response.  Returns whether it was. */
static bool fetch_judge(struct tls_staple *st, const unsigned char *body, size_t len,
                        const char *why)
{
    char bad[256];
    time_t until;
    unsigned char *copy = body != NULL ? malloc(len ? len : 1) : NULL;
    if (copy != NULL)
        memcpy(copy, body, len);
    if (copy != NULL && response_check(st, copy, len, &until, bad, sizeof(bad))) {
        staple_set(st, copy, len, until);
        corral_log(CORRAL_LOG_INFO, "tls_stapling: new OCSP response for \"%s\"", st->name);
        return true;
    }
    free(copy);
    corral_log(CORRAL_LOG_WARN,
               "tls_stapling: OCSP responder %s for \"%s\": %s; the last good response (if any) "
               "stays",
               st->host, st->name,
               body == NULL   ? why
               : copy != NULL ? bad
                              : "out of memory");
    return false;
}

/* The answer is in (whole, or ended by the responder): stapled if good. */
static void fetch_done(corral_conn *conn)
{
    struct fetch *f = corral_conn_data(conn);
    struct tls_staple *st = f->staple;
    if (f->done)
        return;
    f->done = true;
    if (st != NULL) {
        char why[256];
        size_t len = 0;
        const unsigned char *body = http_body(f, &len, why, sizeof(why));
        if (!fetch_judge(st, body, len, why))
            f->failed = true;
    }
    corral_conn_close(conn);
}

static void on_fetch_eof(corral_conn *conn)
{
    fetch_done(conn);
}

static void on_fetch_close(corral_conn *conn, int error)
{
    struct fetch *f = corral_conn_data(conn);
    struct tls_staple *st = f->staple;
    /* Ended before an answer was judged: refused, reset, timed out. */
    if (st != NULL && !f->done && !f->failed) {
        f->failed = true;
        corral_log(CORRAL_LOG_WARN,
                   "tls_stapling: OCSP responder %s for \"%s\": %s; the last good response (if "
                   "any) stays",
                   st->host, st->name, strerror(error != 0 ? -error : ECONNRESET));
    }
    fetch_end(f, f->done && !f->failed);
}

static const struct corral_conn_handler fetch_handler = {
    .on_open = on_fetch_open,
    .on_data = on_fetch_data,
    .on_eof = on_fetch_eof,
    .on_close = on_fetch_close,
};

/* A fetch is over: counted, and the next one scheduled. */
static void fetch_count(struct tls_staple *st, bool ok)
{
    if (st->stats != NULL)
        counter_inc(ok ? &st->stats->fetches : &st->stats->failures);
    schedule(st, ok);
}

static void fetch_end(struct fetch *f, bool ok)
{
    struct tls_staple *st = f->staple;
    if (st != NULL) {
        st->fetch = NULL;
        fetch_count(st, ok);
    }
    free(f->buf);
    free(f);
}

static void on_https_done(void *arg, int err, struct acme_http_response *r)
{
    struct tls_staple *st = arg;
    st->https = NULL;
    char why[256];
    const unsigned char *body = NULL;
    if (err != 0)
        snprintf(why, sizeof(why), "%s", strerror(-err));
    else if (r->status != 200)
        snprintf(why, sizeof(why), "HTTP status %u", r->status);
    else if (r->body_len > RESPONSE_LIMIT)
        snprintf(why, sizeof(why), "the answer is larger than 64 KiB");
    else
        body = r->body != NULL ? (const unsigned char *)r->body : (const unsigned char *)"";
    fetch_count(st, fetch_judge(st, body, body != NULL ? r->body_len : 0, why));
}

/* A POST of the request over TLS by the ACME client's HTTPS exchange,
 * which reads the answer with llhttp and bounds it. */
static void fetch_https(struct tls_staple *st)
{
    int len;
    unsigned char *der = ocsp_request(st, &len);
    int err = -ENOMEM;
    if (der != NULL) {
        struct acme_http_msg msg = {
            .method = "POST",
            .url = st->url,
            .accept = "application/ocsp-response",
            .content_type = "application/ocsp-request",
            .body = der,
            .body_len = (size_t)len,
        };
        err = acme_http_send(st->loop, st->tls, (const struct sockaddr *)&st->addr, st->addr_len,
                             &msg, on_https_done, st, &st->https);
        OPENSSL_free(der);
    }
    if (err != 0) {
        corral_log(CORRAL_LOG_WARN, "tls_stapling: OCSP responder %s for \"%s\": %s", st->host,
                   st->name, strerror(-err));
        fetch_count(st, false);
    }
}

/* How often the loop looks whether a responder's address is in. */
#define LOOKUP_POLL_MS 10

/* A responder named while serving is looked up off the loop
 * (acme_resolve.c), then cached: true once its address is known, else
 * the timer is set to look again, or to try again after a failure. */
static bool lookup_step(struct tls_staple *st)
{
    assert(st->lookup);
    int rc;
    if (st->resolving == NULL) {
        rc = acme_resolve_start(st->lookup_host, st->lookup_port, &st->resolving);
        if (rc != 0) {
            corral_log(CORRAL_LOG_WARN, "tls_stapling: OCSP responder %s for \"%s\": %s", st->host,
                       st->name, strerror(-rc));
            fetch_count(st, false);
            return false;
        }
        corral_timer_start(st->timer, LOOKUP_POLL_MS);
        return false;
    }
    if (!acme_resolve_done(st->resolving, &rc, &st->addr, &st->addr_len)) {
        corral_timer_start(st->timer, LOOKUP_POLL_MS);
        return false;
    }
    acme_resolve_release(st->resolving);
    st->resolving = NULL;
    if (rc != 0) {
        st->addr_len = 0;
        corral_log(CORRAL_LOG_WARN,
                   "tls_stapling: OCSP responder %s for \"%s\": cannot resolve \"%s\": %s",
                   st->host, st->name, st->lookup_host, gai_strerror(rc));
        fetch_count(st, false);
        return false;
    }
    responder_cache_put(st->lookup_host, st->lookup_port, &st->addr, st->addr_len);
    return true;
}

static void on_fetch_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    struct tls_staple *st = arg;
    if (st->fetch != NULL || st->https != NULL)
        return;
    if (st->addr_len == 0 && !lookup_step(st))
        return;
    if (st->tls != NULL) {
        fetch_https(st);
        return;
    }
    struct fetch *f = calloc(1, sizeof(*f));
    if (f != NULL && (f->buf = malloc(RESPONSE_LIMIT)) == NULL) {
        free(f);
        f = NULL;
    }
    if (f == NULL) {
        schedule(st, false);
        return;
    }
    f->staple = st;
    int err = corral_connect(st->loop, (const struct sockaddr *)&st->addr, st->addr_len,
                             &fetch_handler, f, &f->conn);
    if (err != 0) {
        corral_log(CORRAL_LOG_WARN, "tls_stapling: OCSP responder %s for \"%s\": %s", st->host,
                   st->name, strerror(-err));
        fetch_end(f, false);
        return;
    }
    st->fetch = f;
    /* A responder that stops sending fails the fetch. */
    corral_conn_set_timeouts(f->conn, FETCH_TIMEOUT_MS, FETCH_TIMEOUT_MS);
}

int tls_staple_start(struct tls_staple *st, corral_loop *loop)
{
    if (st->from_file || (st->addr_len == 0 && !st->lookup) || st->timer != NULL)
        return 0;
    st->loop = loop;
    int err = corral_timer_new(loop, on_fetch_timer, st, &st->timer);
    if (err != 0)
        return err;
    /* A valid response taken from the previous configuration is
     * refreshed on its schedule; none, or an expired one: fetch now. */
    pthread_mutex_lock(&st->lock);
    bool have = st->der != NULL && time(NULL) < st->valid_until;
    pthread_mutex_unlock(&st->lock);
    if (have)
        schedule(st, true);
    else
        corral_timer_start(st->timer, 0);
    return 0;
}

/* A response kept for a staple made later (tls_staple_hold()). */
struct tls_staple_held {
    X509 *cert, *issuer;
    unsigned char *der;
    size_t len;
    time_t valid_until;
};

/* Gives `st`, about `cert` by `issuer`, the response `der` (taken, or
 * freed) if it is valid for longer than the one `st` holds and passes
 * `st`'s checks. */
static void take_response(struct tls_staple *st, X509 *cert, X509 *issuer, unsigned char *der,
                          size_t len, time_t until)
{
    if (st->from_file || X509_cmp(st->cert, cert) != 0 || X509_cmp(st->issuer, issuer) != 0) {
        free(der);
        return;
    }
    /* Only a valid response, and only one valid for longer than the one
     * held: a staple never loses a good response for a worse one. */
    pthread_mutex_lock(&st->lock);
    time_t held = st->der != NULL ? st->valid_until : 0;
    pthread_mutex_unlock(&st->lock);
    if (der == NULL || until <= time(NULL) || until <= held) {
        free(der);
        return;
    }
    /* Checked again as this staple says: the configuration it came from
     * may not have verified it (tls_stapling_verify off), or trusted
     * other CAs. */
    char why[256];
    if (!response_check(st, der, len, &until, why, sizeof(why))) {
        corral_log(CORRAL_LOG_WARN, "tls_stapling: the OCSP response held for \"%s\": %s; not kept",
                   st->name, why);
        free(der);
        return;
    }
    staple_set(st, der, len, until);
}

/* A copy of `from`'s response, NULL (without one, or without memory):
 * valid_until is read under the lock with it. */
static unsigned char *response_copy(struct tls_staple *from, size_t *len, time_t *until)
{
    pthread_mutex_lock(&from->lock);
    unsigned char *copy = from->der != NULL ? malloc(from->der_len) : NULL;
    *len = from->der_len;
    *until = from->valid_until;
    if (copy != NULL)
        memcpy(copy, from->der, *len);
    pthread_mutex_unlock(&from->lock);
    return copy;
}

void tls_staple_take(struct tls_staple *st, struct tls_staple *from)
{
    /* Not copied for a certificate that is not the same. */
    if (X509_cmp(st->cert, from->cert) != 0)
        return;
    size_t len;
    time_t until;
    unsigned char *copy = response_copy(from, &len, &until);
    take_response(st, from->cert, from->issuer, copy, len, until);
}

struct tls_staple_held *tls_staple_hold(struct tls_staple *from)
{
    struct tls_staple_held *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->der = response_copy(from, &h->len, &h->valid_until);
    if (h->der == NULL || h->valid_until <= time(NULL)) {
        free(h->der);
        free(h);
        return NULL;
    }
    X509_up_ref(from->cert);
    X509_up_ref(from->issuer);
    h->cert = from->cert;
    h->issuer = from->issuer;
    return h;
}

X509 *tls_staple_held_cert(const struct tls_staple_held *held)
{
    return held->cert;
}

struct tls_staple_held *tls_staple_held_copy(const struct tls_staple_held *held)
{
    if (held->valid_until <= time(NULL))
        return NULL;
    struct tls_staple_held *h = malloc(sizeof(*h));
    unsigned char *der = malloc(held->len);
    if (h == NULL || der == NULL) {
        free(h);
        free(der);
        return NULL;
    }
    memcpy(der, held->der, held->len);
    *h = *held;
    h->der = der;
    X509_up_ref(h->cert);
    X509_up_ref(h->issuer);
    return h;
}

void tls_staple_take_held(struct tls_staple *st, const struct tls_staple_held *held)
{
    if (X509_cmp(st->cert, held->cert) != 0)
        return;
    unsigned char *copy = malloc(held->len);
    if (copy != NULL)
        memcpy(copy, held->der, held->len);
    take_response(st, held->cert, held->issuer, copy, held->len, held->valid_until);
}

void tls_staple_held_free(struct tls_staple_held *held)
{
    if (held == NULL)
        return;
    X509_free(held->cert);
    X509_free(held->issuer);
    free(held->der);
    free(held);
}

void tls_staple_stop(struct tls_staple *st)
{
    /* The connection in flight frees its fetch when it closes. */
    if (st->fetch != NULL) {
        st->fetch->staple = NULL;
        corral_conn_abort(st->fetch->conn, 0);
        st->fetch = NULL;
    }
    acme_http_cancel(st->https);
    st->https = NULL;
    acme_resolve_release(st->resolving);
    st->resolving = NULL;
    corral_timer_free(st->timer);
    st->timer = NULL;
}

void tls_staple_free(struct tls_staple *st)
{
    if (st == NULL)
        return;
    tls_staple_stop(st);
    if (st->cert != NULL && staple_index >= 0 && X509_get_ex_data(st->cert, staple_index) == st)
        X509_set_ex_data(st->cert, staple_index, NULL);
    X509_free(st->cert);
    X509_free(st->issuer);
    sk_X509_pop_free(st->chain, X509_free);
    OCSP_CERTID_free(st->id);
    X509_STORE_free(st->store);
    free(st->name);
    free(st->host);
    free(st->path);
    free(st->url);
    if (st->tls != NULL)
        tls_client_free(st->tls);
    free(st->der);
    pthread_mutex_destroy(&st->lock);
    free(st);
}
