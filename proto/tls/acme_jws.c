/*
 * acme_jws.c: the keys of ACME and the JWS that signs each request to the
 * ACME server (RFC 8555 §6.2, RFC 7515 flattened JSON): ES256 with P-256
 * keys, RS256 with RSA ones, the JWK of the account key and its
 * thumbprint for the challenges' key authorizations.
 */
#include "proto/tls/acme.h"

#include <assert.h>
#include <errno.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

EVP_PKEY *acme_key_generate(enum acme_key_type type)
{
    switch (type) {
    case ACME_KEY_EC_P256: return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    case ACME_KEY_RSA_2048: return EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    case ACME_KEY_RSA_4096: return EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)4096);
    }
    return NULL;
}

char *acme_base64url(const unsigned char *in, size_t len)
{
    if (len > (size_t)INT32_MAX / 2)
        return NULL;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (out == NULL)
        return NULL;
    int n = len > 0 ? EVP_EncodeBlock((unsigned char *)out, in, (int)len) : 0;
    out[n] = '\0';
    /* The standard alphabet's last two and its padding, made URL-safe. */
    while (n > 0 && out[n - 1] == '=')
        out[--n] = '\0';
    for (int i = 0; i < n; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    return out;
}

unsigned char *acme_base64url_decode(const char *in, size_t *len)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t n = strlen(in);
    if (n == 0 || n > (size_t)INT32_MAX / 2 || n % 4 == 1 || strspn(in, alphabet) != n)
        return NULL;
    /* The last character's bits past the bytes must be zero (RFC 4648
     * §3.5): one text per key, as the CA encoded it. */
    size_t last = (size_t)(strchr(alphabet, in[n - 1]) - alphabet);
    if ((n % 4 == 2 && (last & 0xf) != 0) || (n % 4 == 3 && (last & 0x3) != 0))
        return NULL;
    /* Back to the standard alphabet, padded, for OpenSSL's decoder. */
    size_t padded = (n + 3) / 4 * 4;
    char *std = malloc(padded + 1);
    unsigned char *out = malloc(padded / 4 * 3 + 1);
    int got = -1;
    if (std != NULL && out != NULL) {
        for (size_t i = 0; i < n; i++)
            std[i] = in[i] == '-' ? '+' : in[i] == '_' ? '/' : in[i];
        memset(std + n, '=', padded - n);
        std[padded] = '\0';
        got = EVP_DecodeBlock(out, (const unsigned char *)std, (int)padded);
    }
    free(std);
    if (got < 0) {
        free(out);
        return NULL;
    }
    /* EVP_DecodeBlock() counts the padding's bytes as zeros. */
    *len = (size_t)got - (padded - n);
    return out;
}

/* A big-number parameter of `key`, big-endian in `pad` bytes (0: its own
 * length), base64url. */
static char *key_param(EVP_PKEY *key, const char *name, int pad)
{
    BIGNUM *bn = NULL;
    if (EVP_PKEY_get_bn_param(key, name, &bn) != 1)
        return NULL;
    int len = pad > 0 ? pad : BN_num_bytes(bn);
    unsigned char *bytes = malloc(len > 0 ? (size_t)len : 1);
    char *out = NULL;
    if (bytes != NULL && BN_bn2binpad(bn, bytes, len) == len)
        out = acme_base64url(bytes, (size_t)len);
    free(bytes);
    BN_free(bn);
    return out;
}

static bool key_is_p256(EVP_PKEY *key)
{
    char group[32];
    return EVP_PKEY_is_a(key, "EC") &&
           EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group),
                                          NULL) == 1 &&
           strcmp(group, "prime256v1") == 0;
}

json_t *acme_jwk(EVP_PKEY *key)
{
    char *a = NULL, *b = NULL;
    json_t *jwk = NULL;
    if (key_is_p256(key)) {
        a = key_param(key, OSSL_PKEY_PARAM_EC_PUB_X, 32);
        b = key_param(key, OSSL_PKEY_PARAM_EC_PUB_Y, 32);
        if (a != NULL && b != NULL)
            jwk = json_pack("{s:s, s:s, s:s, s:s}", "crv", "P-256", "kty", "EC", "x", a, "y", b);
    } else if (EVP_PKEY_is_a(key, "RSA")) {
        a = key_param(key, OSSL_PKEY_PARAM_RSA_E, 0);
        b = key_param(key, OSSL_PKEY_PARAM_RSA_N, 0);
        if (a != NULL && b != NULL)
            jwk = json_pack("{s:s, s:s, s:s}", "e", a, "kty", "RSA", "n", b);
    }
    free(a);
    free(b);
    return jwk;
}

int acme_jwk_thumbprint(EVP_PKEY *key, char out[44])
{
    json_t *jwk = acme_jwk(key);
    /* RFC 7638 §3: the required members only (all acme_jwk() gives), in
     * lexicographic order, without whitespace. */
    char *text = jwk != NULL ? json_dumps(jwk, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(jwk);
    unsigned char digest[32];
    unsigned int digest_len = 0;
    int ok = text != NULL &&
             EVP_Digest(text, strlen(text), digest, &digest_len, EVP_sha256(), NULL) == 1;
    free(text);
    char *b64 = ok ? acme_base64url(digest, digest_len) : NULL;
    if (b64 == NULL)
        return -EINVAL;
    assert(strlen(b64) == 43);
    memcpy(out, b64, 44);
    free(b64);
    return 0;
}

/* "`a`.`b`", malloc'd: a key authorization (RFC 8555 §8.1) or a JWS
 * signing input (RFC 7515 §5.1); NULL when out of memory. */
static char *dot_join(const char *a, const char *b)
{
    size_t a_len = strlen(a), b_len = strlen(b);
    char *out = malloc(a_len + 1 + b_len + 1);
    if (out != NULL) {
        memcpy(out, a, a_len);
        out[a_len] = '.';
        memcpy(out + a_len + 1, b, b_len + 1);
    }
    return out;
}

/* The base64url of the string `text`; NULL when `text` is (a failed
 * step before) or when out of memory. */
static char *base64url_text(const char *text)
{
    return text != NULL ? acme_base64url((const unsigned char *)text, strlen(text)) : NULL;
}

char *acme_key_authorization(EVP_PKEY *account_key, const char *token)
{
    char thumb[44];
    if (acme_jwk_thumbprint(account_key, thumb) != 0)
        return NULL;
    return dot_join(token, thumb);
}

/* The signature of `input` by `key`, base64url: for ES256 the raw R and S
 * of 32 bytes each (RFC 7518 §3.4), not OpenSSL's DER. */
static char *sign(EVP_PKEY *key, bool ec, const char *input)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char *sig = NULL;
    size_t sig_len = 0;
    char *out = NULL;
    if (md == NULL || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(md, NULL, &sig_len, (const unsigned char *)input, strlen(input)) != 1 ||
        (sig = malloc(sig_len)) == NULL ||
        EVP_DigestSign(md, sig, &sig_len, (const unsigned char *)input, strlen(input)) != 1)
        goto done;
    if (!ec) {
        out = acme_base64url(sig, sig_len);
        goto done;
    }
    const unsigned char *p = sig;
    ECDSA_SIG *ecdsa = d2i_ECDSA_SIG(NULL, &p, (long)sig_len);
    unsigned char raw[64];
    if (ecdsa != NULL && BN_bn2binpad(ECDSA_SIG_get0_r(ecdsa), raw, 32) == 32 &&
        BN_bn2binpad(ECDSA_SIG_get0_s(ecdsa), raw + 32, 32) == 32)
        out = acme_base64url(raw, sizeof(raw));
    ECDSA_SIG_free(ecdsa);
done:
    free(sig);
    EVP_MD_CTX_free(md);
    return out;
}

char *acme_jws(EVP_PKEY *key, const char *kid, const char *nonce, const char *url,
               const char *payload)
{
    bool ec = key_is_p256(key);
    if (!ec && !EVP_PKEY_is_a(key, "RSA"))
        return NULL;
    json_t *header =
        json_pack("{s:s, s:s, s:s}", "alg", ec ? "ES256" : "RS256", "nonce", nonce, "url", url);
    char *result = NULL, *protected = NULL, *body = NULL, *input = NULL, *sig = NULL;
    if (header == NULL)
        return NULL;
    int set = kid != NULL ? json_object_set_new(header, "kid", json_string(kid))
                          : json_object_set_new(header, "jwk", acme_jwk(key));
    char *header_text = set == 0 ? json_dumps(header, JSON_COMPACT) : NULL;
    json_decref(header);
    if (header_text == NULL)
        return NULL;
    protected = base64url_text(header_text);
    free(header_text);
    /* A POST-as-GET signs an empty payload, not "{}" (RFC 8555 §6.3). */
    body = base64url_text(payload != NULL ? payload : "");
    if (protected == NULL || body == NULL)
        goto done;
    input = dot_join(protected, body);
    if (input == NULL)
        goto done;
    sig = sign(key, ec, input);
    if (sig == NULL)
        goto done;
    json_t *jws =
        json_pack("{s:s, s:s, s:s}", "protected", protected, "payload", body, "signature", sig);
    result = jws != NULL ? json_dumps(jws, JSON_COMPACT) : NULL;
    json_decref(jws);
done:
    free(protected);
    free(body);
    free(input);
    free(sig);
    return result;
}

json_t *acme_eab(EVP_PKEY *account_key, const char *kid, const unsigned char *mac_key,
                 size_t mac_len, const char *url)
{
    json_t *jwk = acme_jwk(account_key);
    json_t *header = json_pack("{s:s, s:s, s:s}", "alg", "HS256", "kid", kid, "url", url);
    char *jwk_text = jwk != NULL ? json_dumps(jwk, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *header_text = header != NULL ? json_dumps(header, JSON_COMPACT) : NULL;
    json_decref(jwk);
    json_decref(header);
    char *protected = base64url_text(header_text);
    char *payload = base64url_text(jwk_text);
    free(jwk_text);
    free(header_text);
    json_t *result = NULL;
    char *input = NULL, *sig = NULL;
    if (protected == NULL || payload == NULL || mac_len > INT32_MAX)
        goto done;
    input = dot_join(protected, payload);
    if (input == NULL)
        goto done;
    /* The MAC over the signing input, with the key the CA gave (RFC 8555
     * §7.3.4): the JWS binds the account key to the external account. */
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_out = 0;
    if (HMAC(EVP_sha256(), mac_key, (int)mac_len, (const unsigned char *)input, strlen(input), mac,
             &mac_out) == NULL)
        goto done;
    sig = acme_base64url(mac, mac_out);
    if (sig != NULL)
        result = json_pack("{s:s, s:s, s:s}", "protected", protected, "payload", payload,
                           "signature", sig);
done:
    free(protected);
    free(payload);
    free(input);
    free(sig);
    return result;
}
