/*
 * jwt_verify.c: a token's signature checked with a key of the set that
 * fits its algorithm (RFC 7518: HMAC, RSASSA-PKCS1-v1_5, RSASSA-PSS,
 * ECDSA with its r||s signature turned into DER for OpenSSL, Ed25519),
 * then its time, issuer and audience claims.
 */
#include "proto/policy/jwt.h"

#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/hmac.h>
#include <openssl/rsa.h>
#include <string.h>

static const EVP_MD *digest_of(enum jwt_alg alg)
{
    switch (alg) {
    case JWT_HS256:
    case JWT_RS256:
    case JWT_PS256:
    case JWT_ES256: return EVP_sha256();
    case JWT_HS384:
    case JWT_RS384:
    case JWT_PS384:
    case JWT_ES384: return EVP_sha384();
    case JWT_HS512:
    case JWT_RS512:
    case JWT_PS512: return EVP_sha512();
    case JWT_EDDSA:
    case JWT_ALG_COUNT: break;
    }
    return NULL;
}

/* Whether `key` may verify `alg`: its type (an RSA key never as an HMAC
 * secret, an oct secret never for RS or ES), and its own "alg". */
static bool key_fits(const struct jwk *key, enum jwt_alg alg)
{
    return jwk_type_fits(key->type, (int)alg) && (key->alg < 0 || key->alg == (int)alg);
}

static bool hmac_ok(const struct jwt_token *t, const struct jwk *key)
{
    const EVP_MD *md = digest_of(t->alg);
    uint8_t mac[EVP_MAX_MD_SIZE];
    unsigned mac_len = 0;
    /* RFC 7518 3.2: a key at least as long as the hash. */
    if (key->secret_len < (size_t)EVP_MD_get_size(md))
        return false;
    if (HMAC(md, key->secret, (int)key->secret_len, (const uint8_t *)t->signing_input,
             t->signing_len, mac, &mac_len) == NULL)
        return false;
    return mac_len == t->signature_len && CRYPTO_memcmp(mac, t->signature, mac_len) == 0;
}

/* JOSE's ECDSA signature is r and s, each `size` bytes; OpenSSL wants
 * DER.  Returns the DER's length in *der (OPENSSL_free() it), or 0. */
static int ecdsa_der(const struct jwt_token *t, size_t size, uint8_t **der)
{
    if (t->signature_len != 2 * size)
        return 0;
    ECDSA_SIG *sig = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(t->signature, (int)size, NULL);
    BIGNUM *s = BN_bin2bn(t->signature + size, (int)size, NULL);
    int len = 0;
    if (sig != NULL && r != NULL && s != NULL && ECDSA_SIG_set0(sig, r, s) == 1) {
        r = s = NULL; /* the signature owns them */
        *der = NULL;
        len = i2d_ECDSA_SIG(sig, der);
        if (len < 0)
            len = 0;
    }
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return len;
}

static bool pkey_ok(const struct jwt_token *t, const struct jwk *key)
{
    const EVP_MD *md = digest_of(t->alg);
    const uint8_t *sig = t->signature;
    size_t sig_len = t->signature_len;
    uint8_t *der = NULL;
    if (t->alg == JWT_ES256 || t->alg == JWT_ES384) {
        int n = ecdsa_der(t, t->alg == JWT_ES256 ? 32 : 48, &der);
        if (n == 0)
            return false;
        sig = der;
        sig_len = (size_t)n;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    bool ok = ctx != NULL && EVP_DigestVerifyInit(ctx, &pctx, md, NULL, key->pkey) == 1;
    if (ok && t->alg >= JWT_PS256 && t->alg <= JWT_PS512)
        ok = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
             EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, md) == 1 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1;
    ok = ok && EVP_DigestVerify(ctx, sig, sig_len, (const uint8_t *)t->signing_input,
                                t->signing_len) == 1;
    EVP_MD_CTX_free(ctx);
    OPENSSL_free(der);
    return ok;
}

/* A NumericDate claim: absent (true, *present false), or a number. */
static bool number_claim(const json_t *claims, const char *name, bool *present, double *value)
{
    const json_t *v = json_object_get(claims, name);
    *present = v != NULL;
    if (v == NULL)
        return true;
    if (!json_is_number(v))
        return false;
    *value = json_number_value(v);
    return true;
}

static bool audience_ok(const json_t *aud, const char *want)
{
    if (json_is_string(aud))
        return strcmp(json_string_value(aud), want) == 0;
    size_t i;
    const json_t *item;
    json_array_foreach(aud, i, item) if (json_is_string(item) &&
                                         strcmp(json_string_value(item), want) == 0) return true;
    return false;
}

int jwt_verify(const struct jwt_token *t, const struct jwks *set, const struct jwt_checks *checks,
               const char **why)
{
    bool tried = false, verified = false;
    for (size_t i = 0; i < set->count && !verified; i++) {
        const struct jwk *key = &set->keys[i];
        if (!key_fits(key, t->alg))
            continue;
        if (t->kid != NULL && (key->kid == NULL || strcmp(key->kid, t->kid) != 0))
            continue;
        tried = true;
        verified = key->type == JWK_OCT ? hmac_ok(t, key) : pkey_ok(t, key);
    }
    if (!verified) {
        *why = tried ? "bad signature" : "no key for the token's alg and kid";
        return -1;
    }
    bool present;
    double at = 0;
    if (!number_claim(t->claims, "exp", &present, &at)) {
        *why = "exp is not a number";
        return -1;
    }
    if (present && (double)checks->now > at + (double)checks->leeway) {
        *why = "token expired";
        return -1;
    }
    if (!number_claim(t->claims, "nbf", &present, &at)) {
        *why = "nbf is not a number";
        return -1;
    }
    if (present && (double)checks->now + (double)checks->leeway < at) {
        *why = "token not yet valid";
        return -1;
    }
    if (checks->issuer != NULL) {
        const json_t *iss = json_object_get(t->claims, "iss");
        if (!json_is_string(iss) || strcmp(json_string_value(iss), checks->issuer) != 0) {
            *why = "wrong issuer";
            return -1;
        }
    }
    if (checks->audience != NULL &&
        !audience_ok(json_object_get(t->claims, "aud"), checks->audience)) {
        *why = "wrong audience";
        return -1;
    }
    return 0;
}
