/*
 * acme.h: the pieces of an ACME client (RFC 8555) for automatic
 * certificates: account and certificate keys and the JWS that signs every
 * request (acme_jws.c), the ACME server's JSON answers read as hostile
 * input (acme_parse.c), the CA's renewal information (ARI, acme_ari.c),
 * and what state_path holds: keys and certificates
 * in files of mode 0600, a placeholder certificate, the renewal schedule
 * and the lease that keeps instances sharing it from ordering twice
 * (acme_store.c).
 */
#ifndef CORRAL_PROTO_TLS_ACME_H
#define CORRAL_PROTO_TLS_ACME_H

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ------------------------------------------------------------ acme_jws.c */

enum acme_key_type {
    ACME_KEY_EC_P256, /* the default, as nginx's and Let's Encrypt's clients */
    ACME_KEY_RSA_2048,
    ACME_KEY_RSA_4096,
};

/* A new key of `type`, or NULL (out of memory, or OpenSSL refused). */
EVP_PKEY *acme_key_generate(enum acme_key_type type);

/* `len` bytes at `in` in base64url without padding (RFC 7515 §2), a
 * NUL-terminated string the caller frees; NULL when out of memory. */
char *acme_base64url(const unsigned char *in, size_t len);

/* The bytes of base64url text `in` (padding not taken), a new buffer the
 * caller frees, their count in *len; NULL for text that is not base64url,
 * empty text, or out of memory. */
unsigned char *acme_base64url_decode(const char *in, size_t *len);

/* The public JWK of `key` (RFC 7517: EC P-256 or RSA) as a new JSON
 * object the caller releases; NULL for another kind of key. */
json_t *acme_jwk(EVP_PKEY *key);

/* The JWK thumbprint of `key` (RFC 7638, SHA-256), base64url: 43
 * characters and a NUL in `out`.  Returns 0 or -EINVAL. */
int acme_jwk_thumbprint(EVP_PKEY *key, char out[44]);

/* A request body for the ACME server (RFC 8555 §6.2): the flattened JSON
 * JWS of `payload` (NULL: the empty payload of a POST-as-GET) signed with
 * `key` (ES256 for P-256, RS256 for RSA), its protected header carrying
 * `nonce`, `url` and either `kid` (the account URL) or, without one, the
 * JWK of the key (newAccount).  A new string the caller frees, or NULL. */
char *acme_jws(EVP_PKEY *key, const char *kid, const char *nonce, const char *url,
               const char *payload);

/* External account binding (RFC 8555 §7.3.4), for newAccount's
 * "externalAccountBinding": a flattened JWS whose payload is the JWK of
 * `account_key`, its protected header {"alg":"HS256","kid":`kid`,"url":
 * `url`} (newAccount's URL), MACed with HMAC-SHA256 under the `mac_len`
 * bytes of `mac_key` the CA gave.  A new JSON object, or NULL. */
json_t *acme_eab(EVP_PKEY *account_key, const char *kid, const unsigned char *mac_key,
                 size_t mac_len, const char *url);

/* The key authorization of a challenge token (RFC 8555 §8.1):
 * "token.thumbprint", a new string, or NULL. */
char *acme_key_authorization(EVP_PKEY *account_key, const char *token);

/* ---------------------------------------------------------- acme_parse.c */

/* The ACME server's answers, every field checked for its type: a missing
 * optional field is NULL (or 0), a field of the wrong type refuses the
 * whole answer.  Strings are the parser's copies; acme_*_free() releases
 * them. */

/* The most bytes of one answer that are parsed (a certificate chain is
 * the largest), and the most authorizations an order may name. */
#define ACME_RESPONSE_LIMIT  (256 * 1024)
#define ACME_AUTHZ_LIMIT     100
#define ACME_CHALLENGE_LIMIT 16

struct acme_directory {
    char *new_nonce, *new_account, *new_order, *terms_of_service;
    char *renewal_info;             /* ARI (RFC 9773); NULL: the CA has none */
    bool external_account_required; /* meta.externalAccountRequired */
};

/* A renewalInfo answer (RFC 9773 §4.2): the window in which the CA
 * suggests renewing. */
struct acme_renewal_info {
    time_t start, end; /* end > start */
    char *explanation; /* explanationURL, or NULL: for the log */
};

enum acme_status {
    ACME_STATUS_UNKNOWN, /* a status this client does not know: treated as a failure */
    ACME_STATUS_PENDING,
    ACME_STATUS_READY,
    ACME_STATUS_PROCESSING,
    ACME_STATUS_VALID,
    ACME_STATUS_INVALID,
    ACME_STATUS_EXPIRED,
    ACME_STATUS_DEACTIVATED,
    ACME_STATUS_REVOKED,
};

struct acme_problem {
    char *type, *detail; /* RFC 7807; either may be NULL */
};

struct acme_account {
    enum acme_status status;
};

struct acme_order {
    enum acme_status status;
    char **authorizations; /* URLs */
    size_t authorization_count;
    char *finalize;
    char *certificate; /* once valid; else NULL */
    struct acme_problem error;
};

struct acme_challenge {
    char *type, *url, *token; /* token: only characters of base64url */
    enum acme_status status;
    struct acme_problem error; /* why an invalid one failed (RFC 8555 §8) */
};

struct acme_authorization {
    enum acme_status status;
    char *identifier; /* a "dns" identifier's value */
    bool wildcard;
    struct acme_challenge challenges[ACME_CHALLENGE_LIMIT];
    size_t challenge_count;
};

/* Each parses `len` bytes at `body` (not NUL-terminated) into `out`:
 * returns 0, or -EINVAL with a reason in `why` (`why_len` bytes) and
 * nothing to free. */
int acme_parse_directory(const char *body, size_t len, struct acme_directory *out, char *why,
                         size_t why_len);
int acme_parse_account(const char *body, size_t len, struct acme_account *out, char *why,
                       size_t why_len);
int acme_parse_order(const char *body, size_t len, struct acme_order *out, char *why,
                     size_t why_len);
int acme_parse_authorization(const char *body, size_t len, struct acme_authorization *out,
                             char *why, size_t why_len);
/* A problem document (application/problem+json); an answer that is not
 * one leaves both fields NULL and returns -EINVAL. */
int acme_parse_problem(const char *body, size_t len, struct acme_problem *out, char *why,
                       size_t why_len);
int acme_parse_renewal_info(const char *body, size_t len, struct acme_renewal_info *out, char *why,
                            size_t why_len);
void acme_renewal_info_free(struct acme_renewal_info *r);
/* An RFC 3339 date-time ("2025-01-02T04:00:00Z", with a fraction or an
 * offset) as Unix time in *out: 0, or -EINVAL. */
int acme_parse_time(const char *text, time_t *out);
/* The challenge of `type` ("http-01") in `authz`, or NULL. */
const struct acme_challenge *acme_authorization_challenge(const struct acme_authorization *authz,
                                                          const char *type);

void acme_directory_free(struct acme_directory *d);
void acme_order_free(struct acme_order *o);
void acme_authorization_free(struct acme_authorization *a);
void acme_problem_free(struct acme_problem *p);

/* ------------------------------------------------------------ acme_ari.c */

/* ACME Renewal Information (RFC 9773): the certificate's identifier in
 * renewalInfo URLs, base64url(authority key identifier) "."
 * base64url(serial number's DER content), a new string; NULL when the
 * certificate has no key identifier of its issuer, or out of memory. */
char *acme_ari_cert_id(X509 *cert);

/* When to renew in a suggested window [start, end), `random` a uniform
 * 32-bit value: the time that far into the window (RFC 9773 §4.2), or
 * `now` when that time is past. */
time_t acme_ari_choose(time_t start, time_t end, time_t now, uint32_t random);

/* ---------------------------------------------------------- acme_store.c */

/* Writes `len` bytes to `path` with mode 0600, whole or not at all: a
 * temporary file beside it, synced, then renamed over it (so that
 * tls_certificate_watch sees one change).  Returns 0 or -errno. */
int acme_store_write(const char *path, const void *data, size_t len);

/* The private key in `path` (PEM); none there: a new one of `type`,
 * written there first.  Returns 0 with *out, or -errno / -EINVAL (a file
 * that is not a key) with a reason in `why`. */
int acme_store_key(const char *path, enum acme_key_type type, EVP_PKEY **out, char *why,
                   size_t why_len);

/* A self-signed certificate for `name` on `key`, valid from now for a
 * day, that handshakes get while there is no issued certificate yet:
 * written to `path` as the key's PEM then the certificate's, as the
 * client stores issued ones.  Returns 0 or -errno. */
int acme_store_placeholder(const char *path, const char *name, EVP_PKEY *key);

/* What a stored certificate says about the next order. */
struct acme_due {
    bool order_now;   /* missing, a placeholder, expired, past two thirds, or not for `names` */
    time_t renew_at;  /* else: when two thirds of its lifetime have passed */
    time_t not_after; /* 0 without a certificate */
    bool placeholder; /* the certificate is the self-signed placeholder */
    const char *why;  /* order_now: why, for the log */
};

/* Looks at the certificate in `cert_path` for `count` `names` at `now`. */
void acme_store_due(const char *cert_path, const char *const *names, size_t count, time_t now,
                    struct acme_due *out);

/* The lease on ordering for one certificate, held in file `path` by one
 * instance of the daemon (`owner`: a name unique to the instance) until
 * `now + lease_s`: taken when the file is absent, its lease has run out,
 * or `owner` holds it already (renewed then).  Returns 1 when taken, 0
 * when another holds it, -errno on failure. */
int acme_store_lease(const char *path, const char *owner, time_t now, unsigned lease_s);
/* Gives the lease back if `owner` holds it. */
void acme_store_release(const char *path, const char *owner);

#endif
