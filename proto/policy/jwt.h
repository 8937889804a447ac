/*
 * jwt.h: JSON Web Tokens for auth_jwt: a compact JWS token parsed
 * (jwt_token.c), a JWK set read from a file (jwks.c), and a token's
 * signature and time and audience claims checked against them
 * (jwt_verify.c).  Nothing here reads an exchange.
 */
#ifndef CORRAL_PROTO_JWT_H
#define CORRAL_PROTO_JWT_H

#include <jansson.h>
#include <openssl/evp.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The signature algorithms (RFC 7518 3.1), "none" not among them. */
enum jwt_alg {
    JWT_HS256,
    JWT_HS384,
    JWT_HS512,
    JWT_RS256,
    JWT_RS384,
    JWT_RS512,
    JWT_PS256,
    JWT_PS384,
    JWT_PS512,
    JWT_ES256,
    JWT_ES384,
    JWT_EDDSA,
    JWT_ALG_COUNT,
};

/* The algorithm named `name` ("RS256"), or -1 (also for "none"). */
int jwt_alg_from_name(const char *name);
const char *jwt_alg_name(enum jwt_alg alg);

/* ----------------------------------------------------------------- tokens */

/* The longest token looked at: a longer one is refused unread. */
#define JWT_TOKEN_MAX 8192
/* How deep a token's JSON may nest. */
#define JWT_JSON_DEPTH_MAX 16

/* A parsed token.  `header` and `claims` are JSON objects (jansson: the
 * token holds one reference to each); `signing_input` points into the
 * text given to jwt_parse(), which must outlive the check. */
struct jwt_token {
    json_t *header, *claims;
    enum jwt_alg alg;
    const char *kid; /* the header's, in `header`; NULL: none */
    const char *signing_input;
    size_t signing_len;
    uint8_t *signature; /* malloc'd */
    size_t signature_len;
};

/* Parses the compact form "HEADER.PAYLOAD.SIGNATURE" (`len` bytes at
 * `text`): each part strict base64url, header and payload JSON objects
 * (no duplicate names, nesting JWT_JSON_DEPTH_MAX at most), the header's
 * "alg" one of enum jwt_alg ("none" refused), no "crit".  Returns 0 with
 * *out filled (jwt_token_free() it), or -1 with *why a static message. */
int jwt_parse(const char *text, size_t len, struct jwt_token *out, const char **why);
void jwt_token_free(struct jwt_token *t);

/* Whether `len` bytes of JSON text nest no deeper than `max` (strings
 * skipped): checked before a parser recurses into them. */
bool jwt_json_depth_ok(const char *json, size_t len, unsigned max);

/* ------------------------------------------------------------------- keys */

enum jwk_type {
    JWK_RSA,
    JWK_EC_P256,
    JWK_EC_P384,
    JWK_ED25519,
    JWK_OCT,
};

/* One public (or, for oct, secret) key of a set. */
struct jwk {
    char *kid; /* NULL: none */
    int alg;   /* its "alg" (enum jwt_alg), or -1: any its type fits */
    enum jwk_type type;
    EVP_PKEY *pkey;  /* RSA, EC, OKP */
    uint8_t *secret; /* oct */
    size_t secret_len;
};

struct jwks {
    struct jwk *keys;
    size_t count;
};

/* Whether a key of `type` verifies `alg` (enum jwt_alg): RSA keys RS and
 * PS, each EC curve its ES, Ed25519 EdDSA, oct secrets HS only. */
bool jwk_type_fits(enum jwk_type type, int alg);

/* The most a key file may hold. */
#define JWKS_FILE_MAX (1024u * 1024)

/* Reads a JWK set ({"keys": [...]}, or one JWK alone): RSA (2048 bits at
 * least), EC on P-256 or P-384, OKP Ed25519, oct (32 bytes at least).  A
 * key whose "use" is not "sig" is skipped; one of another type, curve or
 * a malformed one fails the load.  Returns 0 with *out (jwks_free() it),
 * or -1 with why in `message` (`len` bytes), naming `name` (the file)
 * and the key by its place. */
int jwks_parse(const char *name, const char *json, size_t size, struct jwks **out, char *message,
               size_t len);
int jwks_load(const char *path, struct jwks **out, char *message, size_t len);
void jwks_free(struct jwks *set);

/* ------------------------------------------------------------------ check */

/* What a token's claims are checked against. */
struct jwt_checks {
    int64_t now;          /* Unix seconds */
    int64_t leeway;       /* seconds of clock skew allowed for exp and nbf */
    const char *issuer;   /* NULL: "iss" not checked */
    const char *audience; /* NULL: "aud" not checked */
};

/* Whether a key of `set` signed `t`: one whose type fits the token's
 * algorithm (an RSA key only for RS and PS, an oct secret only for HS:
 * no algorithm confusion), whose "alg" if any is the token's, and whose
 * "kid" is the token's when the token names one; then "exp" and "nbf"
 * (numbers) with the leeway, "iss" and "aud" as `checks` asks.  Returns 0,
 * or -1 with *why a static message. */
int jwt_verify(const struct jwt_token *t, const struct jwks *set, const struct jwt_checks *checks,
               const char **why);

#endif
