/*
 * jwt_token.c: the compact JWS form (RFC 7515 7.1) taken apart: three
 * strict base64url parts, a header and a payload that are JSON objects
 * of bounded depth, the algorithm named by the header.  The fuzz target
 * fuzz_jwt drives it.
 */
#include "proto/policy/jwt.h"

#include "proto/policy/base64.h"

#include <stdlib.h>
#include <string.h>

static const char *const alg_names[JWT_ALG_COUNT] = {
    [JWT_HS256] = "HS256", [JWT_HS384] = "HS384", [JWT_HS512] = "HS512", [JWT_RS256] = "RS256",
    [JWT_RS384] = "RS384", [JWT_RS512] = "RS512", [JWT_PS256] = "PS256", [JWT_PS384] = "PS384",
    [JWT_PS512] = "PS512", [JWT_ES256] = "ES256", [JWT_ES384] = "ES384", [JWT_EDDSA] = "EdDSA",
};

int jwt_alg_from_name(const char *name)
{
    for (int i = 0; i < JWT_ALG_COUNT; i++)
        if (strcmp(alg_names[i], name) == 0)
            return i;
    return -1;
}

const char *jwt_alg_name(enum jwt_alg alg)
{
    return alg < JWT_ALG_COUNT ? alg_names[alg] : "?";
}

bool jwt_json_depth_ok(const char *json, size_t len, unsigned max)
{
    unsigned depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = json[i];
        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character is never a quote that ends it */
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max)
                return false;
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        }
    }
    return true;
}

/* The JSON object `len` base64url characters at `part` encode, or NULL. */
static json_t *decode_object(const char *part, size_t len, const char **why)
{
    uint8_t buf[JWT_TOKEN_MAX];
    long n = base64_decode(part, len, true, buf, sizeof(buf));
    if (n < 0) {
        *why = "bad base64url";
        return NULL;
    }
    if (!jwt_json_depth_ok((const char *)buf, (size_t)n, JWT_JSON_DEPTH_MAX)) {
        *why = "JSON nested too deep";
        return NULL;
    }
    json_error_t error;
    json_t *v = json_loadb((const char *)buf, (size_t)n, JSON_REJECT_DUPLICATES, &error);
    if (v == NULL || !json_is_object(v)) {
        json_decref(v);
        *why = "not a JSON object";
        return NULL;
    }
    return v;
}

int jwt_parse(const char *text, size_t len, struct jwt_token *out, const char **why)
{
    *out = (struct jwt_token){0};
    if (len == 0) {
        *why = "empty token";
        return -1;
    }
    if (len > JWT_TOKEN_MAX) {
        *why = "token too long";
        return -1;
    }
    const char *dot1 = memchr(text, '.', len);
    const char *dot2 = dot1 != NULL ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - text)) : NULL;
    if (dot2 == NULL || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - text)) != NULL) {
        *why = "not three parts";
        return -1;
    }
    size_t header_len = (size_t)(dot1 - text), payload_len = (size_t)(dot2 - dot1 - 1);
    size_t sig_len = len - (size_t)(dot2 + 1 - text);
    if (header_len == 0 || payload_len == 0 || sig_len == 0) {
        *why = "empty part"; /* an unsigned token ends in "." */
        return -1;
    }
    out->header = decode_object(text, header_len, why);
    if (out->header == NULL)
        goto fail;
    json_t *alg = json_object_get(out->header, "alg");
    int id = json_is_string(alg) ? jwt_alg_from_name(json_string_value(alg)) : -1;
    if (id < 0) {
        *why = "unsupported or missing alg";
        goto fail;
    }
    out->alg = (enum jwt_alg)id;
    if (json_object_get(out->header, "crit") != NULL) {
        *why = "critical header extensions are not supported";
        goto fail;
    }
    json_t *kid = json_object_get(out->header, "kid");
    if (kid != NULL && !json_is_string(kid)) {
        *why = "kid is not a string";
        goto fail;
    }
    out->kid = kid != NULL ? json_string_value(kid) : NULL;
    out->claims = decode_object(dot1 + 1, payload_len, why);
    if (out->claims == NULL)
        goto fail;
    out->signature = malloc(base64_decoded_max(sig_len));
    long n = out->signature != NULL ? base64_decode(dot2 + 1, sig_len, true, out->signature,
                                                    base64_decoded_max(sig_len))
                                    : -1;
    if (n <= 0) {
        *why = "bad signature encoding";
        goto fail;
    }
    out->signature_len = (size_t)n;
    out->signing_input = text;
    out->signing_len = (size_t)(dot2 - text);
    return 0;
fail:
    jwt_token_free(out);
    return -1;
}

void jwt_token_free(struct jwt_token *t)
{
    json_decref(t->header);
    json_decref(t->claims);
    free(t->signature);
    *t = (struct jwt_token){0};
}
