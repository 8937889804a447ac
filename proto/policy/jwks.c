/*
 * jwks.c: JSON Web Key sets (RFC 7517) read into OpenSSL keys when the
 * config is loaded: RSA from n and e, EC from crv, x and y, Ed25519 from
 * x, and oct secrets from k.  Private members are ignored: only
 * verification is done here.
 */
#include "proto/policy/jwt.h"

#include "proto/policy/base64.h"
#include "proto/policy/secret_file.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/param_build.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The biggest member a key may have: an RSA modulus of 16384 bits. */
#define MEMBER_MAX 2048

/* The bytes of base64url member `name` of `key` into `out`; -1 when it is
 * missing or malformed. */
static long member(const json_t *key, const char *name, uint8_t *out, size_t cap)
{
    const json_t *v = json_object_get(key, name);
    if (!json_is_string(v))
        return -1;
    return base64_decode(json_string_value(v), json_string_length(v), true, out, cap);
}

static EVP_PKEY *from_params(const char *type, OSSL_PARAM_BLD *bld)
{
    OSSL_PARAM *params = bld != NULL ? OSSL_PARAM_BLD_to_param(bld) : NULL;
    EVP_PKEY_CTX *ctx = params != NULL ? EVP_PKEY_CTX_new_from_name(NULL, type, NULL) : NULL;
    EVP_PKEY *pkey = NULL;
    if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
        EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1)
        pkey = NULL;
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return pkey;
}

static EVP_PKEY *rsa_key(const json_t *key, const char **why)
{
    uint8_t n[MEMBER_MAX], e[16];
    long n_len = member(key, "n", n, sizeof(n)), e_len = member(key, "e", e, sizeof(e));
    if (n_len <= 0 || e_len <= 0) {
        *why = "RSA key without valid \"n\" and \"e\"";
        return NULL;
    }
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    BIGNUM *bn_n = BN_bin2bn(n, (int)n_len, NULL), *bn_e = BN_bin2bn(e, (int)e_len, NULL);
    EVP_PKEY *pkey = NULL;
    if (bld != NULL && bn_n != NULL && bn_e != NULL &&
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) == 1 &&
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e) == 1)
        pkey = from_params("RSA", bld);
    OSSL_PARAM_BLD_free(bld);
    BN_free(bn_n);
    BN_free(bn_e);
    if (pkey == NULL)
        *why = "RSA key OpenSSL does not take";
    else if (EVP_PKEY_get_bits(pkey) < 2048) {
        *why = "RSA key shorter than 2048 bits";
        EVP_PKEY_free(pkey);
        pkey = NULL;
    }
    return pkey;
}

static EVP_PKEY *ec_key(const json_t *key, enum jwk_type *type, const char **why)
{
    const char *crv = json_string_value(json_object_get(key, "crv"));
    size_t size;
    const char *group;
    if (crv != NULL && strcmp(crv, "P-256") == 0) {
        *type = JWK_EC_P256;
        size = 32;
        group = "prime256v1";
    } else if (crv != NULL && strcmp(crv, "P-384") == 0) {
        *type = JWK_EC_P384;
        size = 48;
        group = "secp384r1";
    } else {
        *why = "EC key on a curve other than P-256 and P-384";
        return NULL;
    }
    uint8_t point[1 + 2 * 48];
    point[0] = 0x04; /* uncompressed: x then y */
    if (member(key, "x", point + 1, size) != (long)size ||
        member(key, "y", point + 1 + size, size) != (long)size) {
        *why = "EC key without valid \"x\" and \"y\"";
        return NULL;
    }
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    EVP_PKEY *pkey = NULL;
    if (bld != NULL &&
        OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, group, 0) == 1 &&
        OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, 1 + 2 * size) == 1)
        pkey = from_params("EC", bld);
    OSSL_PARAM_BLD_free(bld);
    if (pkey == NULL)
        *why = "EC key not on its curve";
    return pkey;
}

static EVP_PKEY *okp_key(const json_t *key, const char **why)
{
    const char *crv = json_string_value(json_object_get(key, "crv"));
    uint8_t x[32];
    if (crv == NULL || strcmp(crv, "Ed25519") != 0) {
        *why = "OKP key on a curve other than Ed25519";
        return NULL;
    }
    if (member(key, "x", x, sizeof(x)) != (long)sizeof(x)) {
        *why = "Ed25519 key without a valid \"x\"";
        return NULL;
    }
    EVP_PKEY *pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, x, sizeof(x));
    if (pkey == NULL)
        *why = "Ed25519 key OpenSSL does not take";
    return pkey;
}

bool jwk_type_fits(enum jwk_type type, int alg)
{
    switch (type) {
    case JWK_RSA: return alg >= JWT_RS256 && alg <= JWT_PS512;
    case JWK_EC_P256: return alg == JWT_ES256;
    case JWK_EC_P384: return alg == JWT_ES384;
    case JWK_ED25519: return alg == JWT_EDDSA;
    case JWK_OCT: return alg >= JWT_HS256 && alg <= JWT_HS512;
    }
    return false;
}

/* Reads `key` into *out; 1: skipped (not for signatures). */
static int read_key(const json_t *key, struct jwk *out, const char **why)
{
    *out = (struct jwk){.alg = -1};
    if (!json_is_object(key)) {
        *why = "not a JSON object";
        return -1;
    }
    const char *use = json_string_value(json_object_get(key, "use"));
    if (use != NULL && strcmp(use, "sig") != 0)
        return 1;
    const char *kty = json_string_value(json_object_get(key, "kty"));
    if (kty == NULL) {
        *why = "no \"kty\"";
        return -1;
    }
    if (strcmp(kty, "RSA") == 0) {
        out->type = JWK_RSA;
        out->pkey = rsa_key(key, why);
    } else if (strcmp(kty, "EC") == 0) {
        out->pkey = ec_key(key, &out->type, why);
    } else if (strcmp(kty, "OKP") == 0) {
        out->type = JWK_ED25519;
        out->pkey = okp_key(key, why);
    } else if (strcmp(kty, "oct") == 0) {
        out->type = JWK_OCT;
        uint8_t k[MEMBER_MAX];
        long n = member(key, "k", k, sizeof(k));
        if (n < 32) {
            *why = n < 0 ? "oct key without a valid \"k\"" : "oct key shorter than 32 bytes";
            return -1;
        }
        out->secret = malloc((size_t)n);
        if (out->secret == NULL) {
            *why = "out of memory";
            return -1;
        }
        memcpy(out->secret, k, (size_t)n);
        out->secret_len = (size_t)n;
        OPENSSL_cleanse(k, sizeof(k));
    } else {
        *why = "unsupported \"kty\"";
        return -1;
    }
    if (out->pkey == NULL && out->secret == NULL)
        return -1;
    const json_t *alg = json_object_get(key, "alg");
    const json_t *kid = json_object_get(key, "kid");
    if (alg != NULL) {
        out->alg = json_is_string(alg) ? jwt_alg_from_name(json_string_value(alg)) : -1;
        if (out->alg < 0 || !jwk_type_fits(out->type, out->alg)) {
            *why = "\"alg\" unsupported or not of the key's type";
            goto fail;
        }
    }
    if (kid != NULL) {
        out->kid = json_is_string(kid) ? strdup(json_string_value(kid)) : NULL;
        if (out->kid == NULL) {
            *why = "\"kid\" is not a string";
            goto fail;
        }
    }
    return 0;
fail:
    EVP_PKEY_free(out->pkey);
    if (out->secret != NULL)
        OPENSSL_cleanse(out->secret, out->secret_len);
    free(out->secret);
    *out = (struct jwk){0};
    return -1;
}

int jwks_parse(const char *name, const char *json, size_t size, struct jwks **out, char *message,
               size_t len)
{
    *out = NULL;
    if (!jwt_json_depth_ok(json, size, JWT_JSON_DEPTH_MAX)) {
        snprintf(message, len, "%s: JSON nested too deep", name);
        return -1;
    }
    json_error_t error;
    json_t *root = json_loadb(json, size, JSON_REJECT_DUPLICATES, &error);
    if (root == NULL) {
        snprintf(message, len, "%s:%d:%d: %s", name, error.line, error.column, error.text);
        return -1;
    }
    json_t *keys = json_object_get(root, "keys");
    json_t *single = NULL;
    if (keys == NULL && json_is_object(root) && json_object_get(root, "kty") != NULL) {
        single = json_array();
        json_array_append(single, root);
        keys = single;
    }
    struct jwks *set = calloc(1, sizeof(*set));
    int rc = -1;
    if (!json_is_array(keys)) {
        snprintf(message, len, "%s: expected a JWK set ({\"keys\": [...]}) or a JWK", name);
        goto done;
    }
    if (set == NULL ||
        (set->keys = calloc(json_array_size(keys) + 1, sizeof(*set->keys))) == NULL) {
        snprintf(message, len, "%s: out of memory", name);
        goto done;
    }
    for (size_t i = 0; i < json_array_size(keys); i++) {
        const char *why = NULL;
        int r = read_key(json_array_get(keys, i), &set->keys[set->count], &why);
        if (r < 0) {
            snprintf(message, len, "%s: key %zu: %s", name, i + 1, why);
            goto done;
        }
        if (r == 0)
            set->count++;
    }
    if (set->count == 0) {
        snprintf(message, len, "%s: no signature key in the set", name);
        goto done;
    }
    *out = set;
    set = NULL;
    rc = 0;
done:
    jwks_free(set);
    json_decref(single);
    json_decref(root);
    return rc;
}

int jwks_load(const char *path, struct jwks **out, char *message, size_t len)
{
    *out = NULL;
    size_t size;
    char *data = secret_file_read(path, JWKS_FILE_MAX, &size, message, len);
    int rc = data != NULL ? jwks_parse(path, data, size, out, message, len) : -1;
    secret_file_free(data, size);
    return rc;
}

void jwks_free(struct jwks *set)
{
    if (set == NULL)
        return;
    for (size_t i = 0; set->keys != NULL && i < set->count; i++) {
        struct jwk *k = &set->keys[i];
        EVP_PKEY_free(k->pkey);
        if (k->secret != NULL)
            OPENSSL_cleanse(k->secret, k->secret_len);
        free(k->secret);
        free(k->kid);
    }
    free(set->keys);
    free(set);
}
