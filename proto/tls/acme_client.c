/*
 * acme_client.c: ordering one certificate (RFC 8555 §7), one request at
 * a time on the main loop: the directory, a nonce, the account (made or
 * found by its key), the order, each authorization's HTTP-01 challenge
 * offered and answered, the CSR, and the certificate, stored with its key
 * in one file that tls_certificate_watch picks up in every worker.  A
 * failure is logged and tried again later, doubling the wait; the file in
 * place serves meanwhile.
 */
#include "proto/tls/acme_client.h"
#include "proto/url.h"

#include <errno.h>
#include <stdarg.h>
#include <netdb.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long one instance may hold the order lease; an order takes
 * seconds, so a crashed holder delays the others by this much at most. */
#define LEASE_S 600
/* Polls of a pending authorization or a processing order. */
#define POLL_MS      1000
#define POLL_LIMIT   120
#define RETRY_MAX_MS (24u * 60 * 60 * 1000)
/* How often the loop looks whether the directory's address is in. */
#define RESOLVE_POLL_MS 10
/* The longest a renewal timer is set for: the certificate is looked at
 * again by then (its file may have changed under another instance). */
#define RECHECK_MS (12u * 60 * 60 * 1000)

enum step {
    STEP_IDLE,
    STEP_DIRECTORY,
    STEP_NONCE,
    STEP_ACCOUNT,
    STEP_ORDER,
    STEP_AUTHZ,     /* reading authorization `authz` */
    STEP_CHALLENGE, /* telling the CA to validate it */
    STEP_FINALIZE,
    STEP_ORDER_POLL,
    STEP_CERTIFICATE,
};

struct acme_client {
    struct acme_issuer_conf issuer; /* strings owned (copied) */
    char **domains;
    size_t domain_count;
    enum acme_key_type key_type;
    char *dir_path;  /* state_path */
    char *pem_path;  /* <state_path>/<domain>.pem */
    char *lock_path; /* <state_path>/<domain>.lock */
    char *owner;     /* this instance, in the lease */
    EVP_PKEY *account_key;
    corral_loop *loop;
    corral_timer *timer;
    struct tls_client *tls;
    struct sockaddr_storage addr; /* the directory's server; addr_len 0: not known yet */
    socklen_t addr_len;
    struct acme_resolve *resolving; /* its lookup, in flight */
    /* One order */
    enum step step;
    struct acme_http *http;
    struct acme_directory directory;
    struct url server; /* the directory's */
    char *nonce, *kid, *order_url;
    char *pending_url, *pending_payload; /* the POST in flight, sent again on badNonce */
    bool fetching_nonce;
    struct acme_order order;
    size_t authz;    /* the authorization being worked on */
    char *token;     /* its challenge's, while offered */
    char *alpn_name; /* tls-alpn-01: the name its certificate answers, while offered */
    unsigned polls;
    bool nonce_retried;
    EVP_PKEY *cert_key;
    uint32_t retry_ms;
    struct acme_client_stats stats;
    /* External account binding: the MAC key, decoded (issuer.eab_kid set) */
    unsigned char *eab_mac;
    size_t eab_mac_len;
    /* ARI: asking the CA when to renew the stored certificate */
    struct acme_http *ari_http;
    enum { ARI_DIRECTORY, ARI_INFO } ari_step;
    time_t ari_due;                    /* two thirds: the latest renewal */
    time_t ari_start, ari_end, ari_at; /* the last window, and the time chosen in it */
};

static void order_fail(struct acme_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static char *join(const char *dir, const char *name, const char *suffix)
{
    size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
    char *s = malloc(n);
    if (s != NULL)
        snprintf(s, n, "%s/%s%s", dir, name, suffix);
    return s;
}

static char *dup_or_null(const char *s, bool *failed)
{
    char *copy = s != NULL ? strdup(s) : NULL;
    if (s != NULL && copy == NULL)
        *failed = true;
    return copy;
}

int acme_client_new(const struct acme_issuer_conf *issuer, const struct acme_certificate_conf *cert,
                    struct acme_client **out, char *why, size_t why_len)
{
    *out = NULL;
    if (cert->domain_count == 0) {
        snprintf(why, why_len, "acme_certificate names no domain");
        return -EINVAL;
    }
    /* The file is named after the first domain: it must not climb out
     * of state_path. */
    if (strchr(cert->domains[0], '/') != NULL || cert->domains[0][0] == '.') {
        snprintf(why, why_len, "\"%s\" cannot name a file", cert->domains[0]);
        return -EINVAL;
    }
    struct acme_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    bool failed = false;
    c->issuer = *issuer;
    c->issuer.name = dup_or_null(issuer->name, &failed);
    c->issuer.uri = dup_or_null(issuer->uri, &failed);
    c->issuer.state_path = NULL;
    c->issuer.trusted_ca = dup_or_null(issuer->trusted_ca, &failed);
    c->issuer.eab_kid = dup_or_null(issuer->eab_kid, &failed);
    c->issuer.eab_key = NULL; /* decoded into eab_mac */
    if (issuer->eab_kid != NULL) {
        c->eab_mac = issuer->eab_key != NULL
                         ? acme_base64url_decode(issuer->eab_key, &c->eab_mac_len)
                         : NULL;
        if (c->eab_mac == NULL) {
            snprintf(why, why_len, "external_account_key \"%s\": the key is not base64url",
                     issuer->eab_kid);
            acme_client_free(c);
            return -EINVAL;
        }
    }
    c->issuer.contacts = NULL;
    char **contacts = calloc(issuer->contact_count + 1, sizeof(char *));
    failed |= contacts == NULL;
    for (size_t i = 0; contacts != NULL && i < issuer->contact_count; i++)
        contacts[i] = dup_or_null(issuer->contacts[i], &failed);
    c->issuer.contacts = (const char *const *)contacts;
    c->domains = calloc(cert->domain_count, sizeof(char *));
    failed |= c->domains == NULL;
    for (size_t i = 0; c->domains != NULL && i < cert->domain_count; i++)
        c->domains[i] = dup_or_null(cert->domains[i], &failed);
    c->domain_count = cert->domain_count;
    c->key_type = cert->key;
    c->retry_ms = issuer->retry_ms ? issuer->retry_ms : 60 * 1000;
    c->dir_path = dup_or_null(issuer->state_path, &failed);
    c->pem_path = join(issuer->state_path, cert->domains[0], ".pem");
    c->lock_path = join(issuer->state_path, cert->domains[0], ".lock");
    char host[200] = "host";
    gethostname(host, sizeof(host) - 1);
    host[strcspn(host, " \n")] = '\0';
    /* Each client its own owner: after a reload, the old generation's
     * client may still hold the lease when the new one's looks. */
    static atomic_uint clients;
    char owner[256];
    snprintf(owner, sizeof(owner), "%s:%ld:%u", host, (long)getpid(),
             atomic_fetch_add_explicit(&clients, 1, memory_order_relaxed));
    c->owner = strdup(owner);
    if (failed || c->pem_path == NULL || c->lock_path == NULL || c->owner == NULL) {
        acme_client_free(c);
        return -ENOMEM;
    }
    if (mkdir(issuer->state_path, 0700) == -1 && errno != EEXIST) {
        int err = -errno;
        snprintf(why, why_len, "state_path \"%s\": %s", issuer->state_path, strerror(errno));
        acme_client_free(c);
        return err;
    }
    char *key_path = join(issuer->state_path, "account", ".key");
    int err = key_path != NULL
                  ? acme_store_key(key_path, issuer->account_key, &c->account_key, why, why_len)
                  : -ENOMEM;
    free(key_path);
    if (err != 0) {
        acme_client_free(c);
        return err;
    }
    /* Nothing stored yet: the placeholder, so that the server starts. */
    struct acme_due due;
    acme_store_due(c->pem_path, (const char *const *)c->domains, c->domain_count, time(NULL), &due);
    if (!due.placeholder)
        atomic_store_explicit(&c->stats.not_after, (int64_t)due.not_after, memory_order_relaxed);
    if (due.not_after == 0) {
        EVP_PKEY *k = acme_key_generate(c->key_type);
        err = k != NULL ? acme_store_placeholder(c->pem_path, c->domains[0], k) : -ENOMEM;
        EVP_PKEY_free(k);
        if (err != 0) {
            snprintf(why, why_len, "\"%s\": %s", c->pem_path, strerror(-err));
            acme_client_free(c);
            return err;
        }
        corral_log(CORRAL_LOG_WARN,
                   "acme: \"%s\": %s; a self-signed placeholder serves until one is issued",
                   c->pem_path, due.why);
    }
    *out = c;
    return 0;
}

const char *acme_client_path(const struct acme_client *c)
{
    return c->pem_path;
}

const char *acme_client_name(const struct acme_client *c)
{
    return c->domains[0];
}

const struct acme_client_stats *acme_client_stats(const struct acme_client *c)
{
    return &c->stats;
}

/* ---------------------------------------------------------------- order */

/* Withdraws the challenge answer offered, if any. */
static void challenge_withdraw(struct acme_client *c)
{
    if (c->token != NULL)
        acme_challenge_remove(c->token);
    free(c->token);
    c->token = NULL;
    if (c->alpn_name != NULL)
        acme_challenge_alpn_remove(c->alpn_name);
    free(c->alpn_name);
    c->alpn_name = NULL;
}

static void order_reset(struct acme_client *c)
{
    acme_http_cancel(c->http);
    c->http = NULL;
    challenge_withdraw(c);
    acme_directory_free(&c->directory);
    acme_order_free(&c->order);
    free(c->order_url);
    c->order_url = NULL;
    free(c->pending_url);
    free(c->pending_payload);
    c->pending_url = c->pending_payload = NULL;
    c->fetching_nonce = false;
    EVP_PKEY_free(c->cert_key);
    c->cert_key = NULL;
    c->step = STEP_IDLE;
    c->polls = 0;
}

/* When to look at the certificate again: its renewal, or sooner. */
static void schedule_check(struct acme_client *c, uint64_t after_ms)
{
    if (after_ms > RECHECK_MS)
        after_ms = RECHECK_MS;
    corral_timer_start(c->timer, after_ms);
}

static void order_fail(struct acme_client *c, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    corral_log(CORRAL_LOG_ERROR,
               "acme: ordering \"%s\" from \"%s\" failed: %s; the certificate in place serves "
               "on, trying again in %.1f s",
               c->domains[0], c->issuer.uri, why, c->retry_ms / 1000.0);
    atomic_fetch_add_explicit(&c->stats.failures, 1, memory_order_relaxed);
    order_reset(c);
    acme_store_release(c->lock_path, c->owner);
    schedule_check(c, c->retry_ms);
    c->retry_ms = c->retry_ms >= RETRY_MAX_MS / 2 ? RETRY_MAX_MS : c->retry_ms * 2;
}

static void on_response(void *arg, int err, struct acme_http_response *r);

/* Whether `url` is on the ACME server the directory is on: the one
 * address resolved and the one name verified. */
static bool same_server(const struct acme_client *c, const char *url)
{
    struct url u;
    return url_split(url, &u) == 0 && u.https && strcasecmp(u.host, c->server.host) == 0 &&
           strcmp(u.port, c->server.port) == 0;
}

static void send_request(struct acme_client *c, const char *method, const char *url,
                         const char *body)
{
    if (!same_server(c, url)) {
        order_fail(c, "\"%s\" is not on the directory's server", url);
        return;
    }
    int err = acme_http_request(c->loop, c->tls, (const struct sockaddr *)&c->addr, c->addr_len,
                                method, url, body, on_response, c, &c->http);
    if (err != 0)
        order_fail(c, "%s %s: %s", method, url, strerror(-err));
}

/* Sends the pending POST, signed with the nonce in hand, or fetches a
 * nonce first. */
static void post_pending(struct acme_client *c)
{
    if (c->nonce == NULL) {
        c->fetching_nonce = true;
        send_request(c, "HEAD", c->directory.new_nonce, NULL);
        return;
    }
    char *body = acme_jws(c->account_key, c->step == STEP_ACCOUNT ? NULL : c->kid, c->nonce,
                          c->pending_url, c->pending_payload);
    /* A nonce is good once. */
    free(c->nonce);
    c->nonce = NULL;
    if (body == NULL) {
        order_fail(c, "cannot sign the request");
        return;
    }
    send_request(c, "POST", c->pending_url, body);
    free(body);
}

/* A signed POST of `payload` (taken; NULL: POST-as-GET) to `url`. */
static void post(struct acme_client *c, enum step step, const char *url, char *payload)
{
    c->step = step;
    free(c->pending_url);
    free(c->pending_payload);
    c->pending_url = strdup(url);
    c->pending_payload = payload;
    c->nonce_retried = false;
    if (c->pending_url == NULL) {
        order_fail(c, "out of memory");
        return;
    }
    post_pending(c);
}

static char *account_payload(struct acme_client *c)
{
    json_t *contacts = json_array();
    for (size_t i = 0; contacts != NULL && i < c->issuer.contact_count; i++) {
        const char *s = c->issuer.contacts[i];
        char *uri = NULL;
        if (strchr(s, ':') == NULL && asprintf(&uri, "mailto:%s", s) == -1)
            uri = NULL;
        json_array_append_new(contacts, json_string(uri != NULL ? uri : s));
        free(uri);
    }
    json_t *p = json_pack("{s:b, s:o}", "termsOfServiceAgreed", c->issuer.accept_terms_of_service,
                          "contact", contacts);
    /* Bound to the CA's external account; a binding that cannot be made
     * fails the payload, not the CA's check. */
    if (p != NULL && c->issuer.eab_kid != NULL) {
        json_t *eab = acme_eab(c->account_key, c->issuer.eab_kid, c->eab_mac, c->eab_mac_len,
                               c->directory.new_account);
        if (eab == NULL || json_object_set_new(p, "externalAccountBinding", eab) != 0) {
            json_decref(p);
            p = NULL;
        }
    }
    char *text = p != NULL ? json_dumps(p, JSON_COMPACT) : NULL;
    json_decref(p);
    return text;
}

static char *order_payload(struct acme_client *c)
{
    json_t *ids = json_array();
    for (size_t i = 0; ids != NULL && i < c->domain_count; i++)
        json_array_append_new(ids, json_pack("{s:s, s:s}", "type", "dns", "value", c->domains[i]));
    json_t *p = json_pack("{s:o}", "identifiers", ids);
    char *text = p != NULL ? json_dumps(p, JSON_COMPACT) : NULL;
    json_decref(p);
    return text;
}

/* The CSR for the domains on the certificate key, base64url DER. */
static char *csr_payload(struct acme_client *c)
{
    X509_REQ *req = X509_REQ_new();
    X509_NAME *name = X509_NAME_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    GENERAL_NAMES *names = GENERAL_NAMES_new();
    char *result = NULL;
    unsigned char *der = NULL;
    if (req == NULL || name == NULL || exts == NULL || names == NULL)
        goto done;
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)c->domains[0], -1,
                               -1, 0);
    X509_REQ_set_subject_name(req, name);
    for (size_t i = 0; i < c->domain_count; i++) {
        GENERAL_NAME *gn = GENERAL_NAME_new();
        ASN1_IA5STRING *s = ASN1_IA5STRING_new();
        if (gn == NULL || s == NULL || ASN1_STRING_set(s, c->domains[i], -1) != 1) {
            GENERAL_NAME_free(gn);
            ASN1_IA5STRING_free(s);
            goto done;
        }
        GENERAL_NAME_set0_value(gn, GEN_DNS, s);
        sk_GENERAL_NAME_push(names, gn);
    }
    X509_EXTENSION *ext = X509V3_EXT_i2d(NID_subject_alt_name, 0, names);
    if (ext == NULL || !sk_X509_EXTENSION_push(exts, ext)) {
        X509_EXTENSION_free(ext);
        goto done;
    }
    int len;
    if (X509_REQ_add_extensions(req, exts) != 1 || X509_REQ_set_pubkey(req, c->cert_key) != 1 ||
        X509_REQ_sign(req, c->cert_key, EVP_sha256()) <= 0 || (len = i2d_X509_REQ(req, &der)) <= 0)
        goto done;
    char *b64 = acme_base64url(der, (size_t)len);
    json_t *p = b64 != NULL ? json_pack("{s:s}", "csr", b64) : NULL;
    free(b64);
    result = p != NULL ? json_dumps(p, JSON_COMPACT) : NULL;
    json_decref(p);
done:
    OPENSSL_free(der);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    GENERAL_NAMES_free(names);
    X509_NAME_free(name);
    X509_REQ_free(req);
    return result;
}

static const char *status_name(enum acme_status s)
{
    static const char *const names[] = {"unknown", "pending", "ready",       "processing", "valid",
                                        "invalid", "expired", "deactivated", "revoked"};
    return (size_t)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

static void authz_next(struct acme_client *c);

/* Where an order stands decides the next request. */
static void order_advance(struct acme_client *c)
{
    switch (c->order.status) {
    case ACME_STATUS_PENDING:
        c->authz = 0;
        post(c, STEP_AUTHZ, c->order.authorizations[0], NULL);
        return;
    case ACME_STATUS_READY: {
        if (c->cert_key == NULL)
            c->cert_key = acme_key_generate(c->key_type);
        char *csr = c->cert_key != NULL ? csr_payload(c) : NULL;
        if (csr == NULL) {
            order_fail(c, "cannot make the certificate request");
            return;
        }
        post(c, STEP_FINALIZE, c->order.finalize, csr);
        return;
    }
    case ACME_STATUS_PROCESSING:
        if (++c->polls > POLL_LIMIT) {
            order_fail(c, "the order is still processing after %u polls", POLL_LIMIT);
            return;
        }
        c->step = STEP_ORDER_POLL;
        corral_timer_start(c->timer, POLL_MS);
        return;
    case ACME_STATUS_VALID:
        if (c->order.certificate == NULL) {
            order_fail(c, "a valid order names no certificate");
            return;
        }
        post(c, STEP_CERTIFICATE, c->order.certificate, NULL);
        return;
    default:
        order_fail(c, "the order is %s%s%s", status_name(c->order.status),
                   c->order.error.detail != NULL ? ": " : "",
                   c->order.error.detail != NULL ? c->order.error.detail : "");
    }
}

static void authz_next(struct acme_client *c)
{
    challenge_withdraw(c);
    c->polls = 0;
    if (++c->authz < c->order.authorization_count) {
        post(c, STEP_AUTHZ, c->order.authorizations[c->authz], NULL);
        return;
    }
    /* Every authorization is valid: the order is ready (or soon). */
    post(c, STEP_ORDER_POLL, c->order_url, NULL);
}

/* The TLS-ALPN-01 certificate for `name` (RFC 8737 §3): self-signed
 * on a key of its own, the name its only SAN, and the critical
 * acmeIdentifier extension holding the SHA-256 of the key
 * authorization. */
static int alpn_offer(struct acme_client *c, const char *name, const char *key_authorization)
{
    unsigned char digest[32], der[34];
    unsigned int digest_len = 0;
    EVP_PKEY *key = acme_key_generate(ACME_KEY_EC_P256);
    X509 *x = X509_new();
    X509_NAME *subject = X509_NAME_new();
    ASN1_OBJECT *oid = OBJ_txt2obj("1.3.6.1.5.5.7.1.31", 1);
    ASN1_OCTET_STRING *value = ASN1_OCTET_STRING_new();
    X509_EXTENSION *ident = NULL, *san = NULL;
    char san_text[300];
    int err = -ENOMEM;
    if (key == NULL || x == NULL || subject == NULL || oid == NULL || value == NULL ||
        EVP_Digest(key_authorization, strlen(key_authorization), digest, &digest_len, EVP_sha256(),
                   NULL) != 1)
        goto done;
    /* The extension's value is the DER of an OCTET STRING of the digest. */
    der[0] = 0x04;
    der[1] = 32;
    memcpy(der + 2, digest, 32);
    snprintf(san_text, sizeof(san_text), "DNS:%s", name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    if (ASN1_OCTET_STRING_set(value, der, sizeof(der)) != 1 ||
        (ident = X509_EXTENSION_create_by_OBJ(NULL, oid, 1, value)) == NULL ||
        (san = X509V3_EXT_conf_nid(NULL, &ctx, NID_subject_alt_name, san_text)) == NULL ||
        X509_set_version(x, X509_VERSION_3) != 1 ||
        ASN1_INTEGER_set(X509_get_serialNumber(x), 1) != 1 ||
        X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, (const unsigned char *)name, -1,
                                   -1, 0) != 1 ||
        X509_set_subject_name(x, subject) != 1 || X509_set_issuer_name(x, subject) != 1 ||
        X509_gmtime_adj(X509_getm_notBefore(x), 0) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(x), 24 * 60 * 60) == NULL ||
        X509_set_pubkey(x, key) != 1 || X509_add_ext(x, san, -1) != 1 ||
        X509_add_ext(x, ident, -1) != 1 || X509_sign(x, key, EVP_sha256()) <= 0)
        goto done;
    c->alpn_name = strdup(name);
    err = c->alpn_name != NULL ? acme_challenge_alpn_set(name, x, key) : -ENOMEM;
    if (err != 0) {
        free(c->alpn_name);
        c->alpn_name = NULL;
    }
done:
    X509_EXTENSION_free(ident);
    X509_EXTENSION_free(san);
    ASN1_OCTET_STRING_free(value);
    ASN1_OBJECT_free(oid);
    X509_NAME_free(subject);
    X509_free(x);
    EVP_PKEY_free(key);
    return err;
}

static void on_authorization(struct acme_client *c, const struct acme_http_response *r)
{
    struct acme_authorization a;
    char why[256];
    if (acme_parse_authorization(r->body, r->body_len, &a, why, sizeof(why)) != 0) {
        order_fail(c, "authorization: %s", why);
        return;
    }
    if (a.status == ACME_STATUS_VALID) {
        acme_authorization_free(&a);
        authz_next(c);
        return;
    }
    if (a.status != ACME_STATUS_PENDING) {
        /* The CA's reason: the failed challenge's problem. */
        const char *detail = NULL;
        for (size_t i = 0; i < a.challenge_count && detail == NULL; i++)
            detail = a.challenges[i].error.detail;
        order_fail(c, "the authorization of \"%s\" is %s%s%s", a.identifier, status_name(a.status),
                   detail != NULL ? ": " : "", detail != NULL ? detail : "");
        acme_authorization_free(&a);
        return;
    }
    if (c->token != NULL) { /* offered: the CA has not looked yet */
        acme_authorization_free(&a);
        if (++c->polls > POLL_LIMIT) {
            order_fail(c, "the authorization is still pending after %u polls", POLL_LIMIT);
            return;
        }
        corral_timer_start(c->timer, POLL_MS);
        return;
    }
    const char *type = c->issuer.tls_alpn ? "tls-alpn-01" : "http-01";
    const struct acme_challenge *ch = acme_authorization_challenge(&a, type);
    char *answer = ch != NULL ? acme_key_authorization(c->account_key, ch->token) : NULL;
    if (ch == NULL || answer == NULL) {
        order_fail(c, "the authorization of \"%s\" offers no %s challenge", a.identifier, type);
        free(answer);
        acme_authorization_free(&a);
        return;
    }
    c->token = strdup(ch->token);
    int err = c->token == NULL     ? -ENOMEM
              : c->issuer.tls_alpn ? alpn_offer(c, a.identifier, answer)
                                   : acme_challenge_set(ch->token, answer);
    if (err != 0) {
        free(c->token);
        c->token = NULL;
        order_fail(c, "cannot offer the %s answer", type);
    } else {
        /* The answer is in place before the CA is told to look. */
        post(c, STEP_CHALLENGE, ch->url, strdup("{}"));
    }
    free(answer);
    acme_authorization_free(&a);
}

/* The issued chain: checked to be for the key and the names, then stored
 * with the key in one file, which replaces the old one whole. */
static void on_certificate(struct acme_client *c, const struct acme_http_response *r)
{
    BIO *in = BIO_new_mem_buf(r->body != NULL ? r->body : "", (int)r->body_len);
    X509 *leaf = in != NULL ? PEM_read_bio_X509(in, NULL, NULL, NULL) : NULL;
    BIO_free(in);
    bool names_ok = leaf != NULL;
    for (size_t i = 0; names_ok && i < c->domain_count; i++)
        names_ok = X509_check_host(leaf, c->domains[i], 0, 0, NULL) == 1;
    if (leaf == NULL || !names_ok || X509_check_private_key(leaf, c->cert_key) != 1) {
        X509_free(leaf);
        order_fail(c, "the certificate sent is not a PEM chain for the key and names ordered");
        return;
    }
    X509_free(leaf);
    BIO *out = BIO_new(BIO_s_mem());
    char *pem;
    long len = 0;
    int err = -ENOMEM;
    if (out != NULL && PEM_write_bio_PrivateKey(out, c->cert_key, NULL, NULL, 0, NULL, NULL) == 1 &&
        BIO_write(out, r->body, (int)r->body_len) == (int)r->body_len) {
        len = BIO_get_mem_data(out, &pem);
        err = acme_store_write(c->pem_path, pem, (size_t)len);
    }
    BIO_free(out);
    if (err != 0) {
        order_fail(c, "\"%s\": %s", c->pem_path, strerror(-err));
        return;
    }
    atomic_fetch_add_explicit(&c->stats.issued, 1, memory_order_relaxed);
    struct acme_due due;
    acme_store_due(c->pem_path, (const char *const *)c->domains, c->domain_count, time(NULL), &due);
    atomic_store_explicit(&c->stats.not_after, (int64_t)due.not_after, memory_order_relaxed);
    corral_log(CORRAL_LOG_INFO,
               "acme: \"%s\" issued by \"%s\", stored in \"%s\"; renewal in %lld s", c->domains[0],
               c->issuer.uri, c->pem_path,
               due.order_now ? 0LL : (long long)(due.renew_at - time(NULL)));
    order_reset(c);
    acme_store_release(c->lock_path, c->owner);
    c->retry_ms = c->issuer.retry_ms ? c->issuer.retry_ms : 60 * 1000;
    /* A certificate due at once (a CA that issues a lifetime shorter than
     * the retry) waits for the retry, not a loop of orders. */
    schedule_check(c, due.order_now ? c->retry_ms : (uint64_t)(due.renew_at - time(NULL)) * 1000);
}

/* An answer that is not 2xx: the problem document's detail. */
static void on_error_status(struct acme_client *c, const struct acme_http_response *r)
{
    struct acme_problem p;
    char why[256];
    if (acme_parse_problem(r->body, r->body_len, &p, why, sizeof(why)) != 0)
        p = (struct acme_problem){0};
    order_fail(c, "HTTP status %u from %s%s%s%s%s", r->status, c->pending_url ? c->pending_url : "",
               p.type != NULL ? ": " : "", p.type != NULL ? p.type : "",
               p.detail != NULL ? ": " : "", p.detail != NULL ? p.detail : "");
    acme_problem_free(&p);
}

static void on_response(void *arg, int err, struct acme_http_response *r)
{
    struct acme_client *c = arg;
    c->http = NULL;
    if (err != 0) {
        order_fail(c, "%s: %s", c->step == STEP_DIRECTORY ? c->issuer.uri : "the ACME server",
                   strerror(-err));
        return;
    }
    /* Every answer may carry the next nonce (RFC 8555 §7.2). */
    if (r->nonce != NULL) {
        free(c->nonce);
        c->nonce = strdup(r->nonce);
    }
    if (c->fetching_nonce) {
        c->fetching_nonce = false;
        if (c->nonce == NULL)
            order_fail(c, "newNonce sent no Replay-Nonce");
        else
            post_pending(c);
        return;
    }
    if (r->status == 400 && !c->nonce_retried && r->body != NULL &&
        strstr(r->body, "urn:ietf:params:acme:error:badNonce") != NULL) {
        c->nonce_retried = true; /* once, with the nonce this answer brought */
        post_pending(c);
        return;
    }
    if (r->status < 200 || r->status > 299) {
        on_error_status(c, r);
        return;
    }
    char why[256];
    switch (c->step) {
    case STEP_DIRECTORY:
        if (acme_parse_directory(r->body, r->body_len, &c->directory, why, sizeof(why)) != 0) {
            order_fail(c, "directory: %s", why);
            return;
        }
        if (c->directory.external_account_required && c->issuer.eab_kid == NULL) {
            order_fail(c, "the CA requires an external account: give its key ID and key with "
                          "\"external_account_key\" in the acme_issuer");
            return;
        }
        if (c->directory.terms_of_service != NULL && !c->issuer.accept_terms_of_service) {
            order_fail(c,
                       "the CA's terms of service (%s) must be agreed to with "
                       "\"accept_terms_of_service\"",
                       c->directory.terms_of_service);
            return;
        }
        char *payload = account_payload(c);
        if (payload == NULL) {
            order_fail(c, "out of memory");
            return;
        }
        post(c, STEP_ACCOUNT, c->directory.new_account, payload);
        return;
    case STEP_ACCOUNT: {
        struct acme_account account;
        if (acme_parse_account(r->body, r->body_len, &account, why, sizeof(why)) != 0) {
            order_fail(c, "account: %s", why);
            return;
        }
        if (account.status != ACME_STATUS_VALID || r->location == NULL ||
            !same_server(c, r->location)) {
            order_fail(c, "the account is %s",
                       r->location == NULL ? "without a URL" : status_name(account.status));
            return;
        }
        free(c->kid);
        c->kid = strdup(r->location);
        char *order = c->kid != NULL ? order_payload(c) : NULL;
        if (order == NULL) {
            order_fail(c, "out of memory");
            return;
        }
        post(c, STEP_ORDER, c->directory.new_order, order);
        return;
    }
    case STEP_ORDER:
        if (r->location == NULL) {
            order_fail(c, "the new order has no URL");
            return;
        }
        free(c->order_url);
        c->order_url = strdup(r->location);
        __attribute__((fallthrough)); /* the answer is the order */
    case STEP_FINALIZE:
    case STEP_ORDER_POLL:
        acme_order_free(&c->order);
        if (c->order_url == NULL ||
            acme_parse_order(r->body, r->body_len, &c->order, why, sizeof(why)) != 0) {
            order_fail(c, "order: %s", c->order_url == NULL ? "out of memory" : why);
            return;
        }
        order_advance(c);
        return;
    case STEP_AUTHZ: on_authorization(c, r); return;
    case STEP_CHALLENGE:
        /* Told; the authorization says when the CA has looked. */
        c->step = STEP_AUTHZ;
        corral_timer_start(c->timer, POLL_MS / 4);
        return;
    case STEP_CERTIFICATE: on_certificate(c, r); return;
    case STEP_IDLE:
    case STEP_NONCE: break;
    }
}

/* ------------------------------------------------------------- schedule */

static void order_start(struct acme_client *c, const char *why);

/* Without an answer from the CA's renewal information: two thirds. */
static void ari_give_up(struct acme_client *c, const char *why)
{
    if (why != NULL)
        corral_log(CORRAL_LOG_WARN,
                   "acme: \"%s\": renewal information from \"%s\": %s; renewing at two thirds "
                   "of the certificate's lifetime",
                   c->domains[0], c->issuer.uri, why);
    time_t now = time(NULL);
    schedule_check(c, c->ari_due > now ? (uint64_t)(c->ari_due - now) * 1000 : 0);
}

static void on_ari_response(void *arg, int err, struct acme_http_response *r);

static void ari_send(struct acme_client *c, const char *url)
{
    int err =
        same_server(c, url)
            ? acme_http_request(c->loop, c->tls, (const struct sockaddr *)&c->addr, c->addr_len,
                                "GET", url, NULL, on_ari_response, c, &c->ari_http)
            : -EXDEV;
    if (err != 0)
        ari_give_up(c, err == -EXDEV ? "not on the directory's server" : strerror(-err));
}

/* The renewalInfo URL of the stored certificate: <renewalInfo>/<cert ID>. */
static char *ari_url(struct acme_client *c, const char *base)
{
    BIO *bio = BIO_new_file(c->pem_path, "r");
    X509 *cert = bio != NULL ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    char *id = cert != NULL ? acme_ari_cert_id(cert) : NULL;
    X509_free(cert);
    char *url = NULL;
    if (id != NULL &&
        asprintf(&url, "%s%s%s", base, base[strlen(base) - 1] == '/' ? "" : "/", id) == -1)
        url = NULL;
    free(id);
    return url;
}

/* The CA's answers about when to renew: its directory, then the
 * certificate's renewal information.  Any failure falls back on two
 * thirds of the lifetime; none is an order's failure. */
static void on_ari_response(void *arg, int err, struct acme_http_response *r)
{
    struct acme_client *c = arg;
    c->ari_http = NULL;
    char why[256];
    if (err != 0 || r->status < 200 || r->status > 299) {
        if (err != 0)
            snprintf(why, sizeof(why), "%s", strerror(-err));
        else
            snprintf(why, sizeof(why), "HTTP status %u", r->status);
        ari_give_up(c, why);
        return;
    }
    if (c->ari_step == ARI_DIRECTORY) {
        struct acme_directory d;
        if (acme_parse_directory(r->body, r->body_len, &d, why, sizeof(why)) != 0) {
            ari_give_up(c, why);
            return;
        }
        char *url = d.renewal_info != NULL ? ari_url(c, d.renewal_info) : NULL;
        bool none = d.renewal_info == NULL;
        acme_directory_free(&d);
        if (url == NULL) {
            /* A CA without ARI is the usual case, not worth a warning. */
            ari_give_up(c, none ? NULL : "the certificate has no authority key identifier");
            return;
        }
        c->ari_step = ARI_INFO;
        ari_send(c, url);
        free(url);
        return;
    }
    struct acme_renewal_info info;
    if (acme_parse_renewal_info(r->body, r->body_len, &info, why, sizeof(why)) != 0) {
        ari_give_up(c, why);
        return;
    }
    time_t now = time(NULL);
    /* The same window keeps the time chosen in it: a poll does not draw
     * again. */
    if (info.start != c->ari_start || info.end != c->ari_end) {
        uint32_t random = 0;
        RAND_bytes((unsigned char *)&random, sizeof(random));
        c->ari_start = info.start;
        c->ari_end = info.end;
        c->ari_at = acme_ari_choose(info.start, info.end, now, random);
        corral_log(CORRAL_LOG_INFO,
                   "acme: \"%s\": the CA suggests renewing within %lld s to %lld s from now%s%s; "
                   "renewing in %lld s",
                   c->domains[0], (long long)(info.start - now), (long long)(info.end - now),
                   info.explanation != NULL ? ", see " : "",
                   info.explanation != NULL ? info.explanation : "", (long long)(c->ari_at - now));
    }
    acme_renewal_info_free(&info);
    if (c->ari_at <= now) {
        order_start(c, "the CA's renewal information (ARI) suggests renewing now");
        return;
    }
    /* Asked again as the CA says (Retry-After), or at the chosen time,
     * and never later than two thirds. */
    time_t at = c->ari_at < c->ari_due ? c->ari_at : c->ari_due;
    if (r->retry_after_s > 0 && now + (time_t)r->retry_after_s < at)
        at = now + (time_t)(r->retry_after_s < 60 ? 60 : r->retry_after_s);
    schedule_check(c, at > now ? (uint64_t)(at - now) * 1000 : 0);
}

static void check(struct acme_client *c)
{
    struct acme_due due;
    time_t now = time(NULL);
    acme_store_due(c->pem_path, (const char *const *)c->domains, c->domain_count, now, &due);
    if (!due.order_now) {
        /* Two thirds of the lifetime, or sooner if the CA's renewal
         * information (RFC 9773) says so. */
        c->ari_due = due.renew_at;
        c->ari_step = ARI_DIRECTORY;
        ari_send(c, c->issuer.uri);
        return;
    }
    order_start(c, due.why);
}

static void order_start(struct acme_client *c, const char *why)
{
    time_t now = time(NULL);
    int taken = acme_store_lease(c->lock_path, c->owner, now, LEASE_S);
    if (taken != 1) {
        /* Another instance orders; its file is looked at again then. */
        corral_log(CORRAL_LOG_INFO, "acme: \"%s\": %s; looking again in %.1f s", c->pem_path,
                   taken == 0 ? "another instance holds the order lease" : strerror(-taken),
                   c->retry_ms / 1000.0);
        schedule_check(c, c->retry_ms);
        return;
    }
    corral_log(CORRAL_LOG_INFO, "acme: ordering \"%s\" from \"%s\": %s", c->domains[0],
               c->issuer.uri, why);
    c->step = STEP_DIRECTORY;
    send_request(c, "GET", c->issuer.uri, NULL);
}

/* The directory's address, looked up off the loop (acme_resolve.c): the
 * lookup started, then looked at every few milliseconds until it is in;
 * a name that does not resolve is looked up again later, doubling the
 * wait as a failed order does. */
static void resolve_step(struct acme_client *c)
{
    int rc;
    if (c->resolving == NULL) {
        rc = acme_resolve_start(c->server.host, c->server.port, &c->resolving);
        if (rc != 0) {
            corral_log(CORRAL_LOG_ERROR, "acme: \"%s\": %s; trying again in %.1f s", c->server.host,
                       strerror(-rc), c->retry_ms / 1000.0);
            schedule_check(c, c->retry_ms);
            return;
        }
        corral_timer_start(c->timer, RESOLVE_POLL_MS);
        return;
    }
    if (!acme_resolve_done(c->resolving, &rc, &c->addr, &c->addr_len)) {
        corral_timer_start(c->timer, RESOLVE_POLL_MS);
        return;
    }
    acme_resolve_release(c->resolving);
    c->resolving = NULL;
    if (rc != 0) {
        c->addr_len = 0;
        corral_log(CORRAL_LOG_ERROR, "acme: cannot resolve \"%s\": %s; trying again in %.1f s",
                   c->server.host, gai_strerror(rc), c->retry_ms / 1000.0);
        schedule_check(c, c->retry_ms);
        c->retry_ms = c->retry_ms >= RETRY_MAX_MS / 2 ? RETRY_MAX_MS : c->retry_ms * 2;
        return;
    }
    check(c);
}

static void on_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    struct acme_client *c = arg;
    if (c->http != NULL || c->ari_http != NULL)
        return;
    if (c->addr_len == 0) {
        resolve_step(c);
        return;
    }
    switch (c->step) {
    case STEP_IDLE: check(c); return;
    case STEP_AUTHZ: post(c, STEP_AUTHZ, c->order.authorizations[c->authz], NULL); return;
    case STEP_ORDER_POLL: post(c, STEP_ORDER_POLL, c->order_url, NULL); return;
    default: return;
    }
}

int acme_client_start(struct acme_client *c, corral_loop *loop)
{
    if (url_split(c->issuer.uri, &c->server) != 0 || !c->server.https) {
        corral_log(CORRAL_LOG_ERROR, "acme: \"%s\" is not an https:// URL", c->issuer.uri);
        return -EINVAL;
    }
    /* The address is looked up by the first timer (resolve_step()), off
     * the loop: a slow resolver holds up neither start nor a reload. */
    c->addr_len = 0;
    struct tls_client_conf conf = TLS_CLIENT_CONF_DEFAULT;
    conf.ca_file = c->issuer.trusted_ca;
    conf.server_name = c->server.host;
    char error[256];
    int err = tls_client_new(&conf, 1, 1, &c->tls, error, sizeof(error));
    if (err != 0) {
        corral_log(CORRAL_LOG_ERROR, "acme: %s", error);
        return err;
    }
    c->loop = loop;
    err = corral_timer_new(loop, on_timer, c, &c->timer);
    if (err != 0)
        return err;
    corral_timer_start(c->timer, 0);
    return 0;
}

void acme_client_free(struct acme_client *c)
{
    if (c == NULL)
        return;
    order_reset(c);
    acme_http_cancel(c->ari_http);
    acme_resolve_release(c->resolving);
    if (c->lock_path != NULL && c->owner != NULL)
        acme_store_release(c->lock_path, c->owner);
    corral_timer_free(c->timer);
    if (c->tls != NULL)
        tls_client_free(c->tls);
    EVP_PKEY_free(c->account_key);
    free(c->nonce);
    free(c->kid);
    for (size_t i = 0; c->domains != NULL && i < c->domain_count; i++)
        free(c->domains[i]);
    free(c->domains);
    for (size_t i = 0; c->issuer.contacts != NULL && i < c->issuer.contact_count; i++)
        free((char *)c->issuer.contacts[i]);
    free((void *)c->issuer.contacts);
    free((char *)c->issuer.name);
    free((char *)c->issuer.uri);
    free((char *)c->issuer.trusted_ca);
    free((char *)c->issuer.eab_kid);
    free(c->eab_mac);
    free(c->dir_path);
    free(c->pem_path);
    free(c->lock_path);
    free(c->owner);
    free(c);
}
