/*
 * test_auth_jwt.c: JWT parsing and verification without sockets, on
 * keys made by openssl genpkey and tokens signed by openssl (jwt/
 * make_vectors.py): each algorithm, the time claims with and without
 * leeway, issuer and audience, bad signatures, alg none, HS/RS confusion,
 * truncated, oversized and badly encoded tokens, deep JSON, JWK sets
 * refused at load.
 */
#include "../helpers.h"
#include "proto/policy/jwt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jwt/vectors.h"

static struct jwks *keys;

static void setup(void)
{
    char message[256];
    int rc = jwks_parse("jwks.json", jwt_jwks, strlen(jwt_jwks), &keys, message, sizeof(message));
    ck_assert_msg(rc == 0, "%s", message);
}

static void teardown(void)
{
    jwks_free(keys);
    keys = NULL;
}

/* 2100-01-01, between the vectors' nbf and exp. */
static const struct jwt_checks now = {.now = 3500000000};

/* Parses and verifies `text`: 0, or -1 with *why. */
static int check(const char *text, const struct jwt_checks *checks, const char **why)
{
    struct jwt_token t;
    *why = NULL;
    if (jwt_parse(text, strlen(text), &t, why) != 0)
        return -1;
    int rc = jwt_verify(&t, keys, checks, why);
    jwt_token_free(&t);
    return rc;
}

static void passes(const char *text, const struct jwt_checks *checks)
{
    const char *why;
    ck_assert_msg(check(text, checks, &why) == 0, "refused: %s", why);
}

static void fails(const char *text, const struct jwt_checks *checks, const char *expected)
{
    const char *why;
    ck_assert_int_eq(check(text, checks, &why), -1);
    ck_assert_msg(strcmp(why, expected) == 0, "\"%s\", not \"%s\"", why, expected);
}

START_TEST(the_key_set_loads)
{
    ck_assert_uint_eq(keys->count, 5); /* the "use": "enc" key is skipped */
    ck_assert_int_eq(keys->keys[0].type, JWK_RSA);
    ck_assert_int_eq(keys->keys[1].type, JWK_EC_P256);
    ck_assert_int_eq(keys->keys[2].type, JWK_EC_P384);
    ck_assert_int_eq(keys->keys[3].type, JWK_ED25519);
    ck_assert_int_eq(keys->keys[4].type, JWK_OCT);
    ck_assert_int_eq(keys->keys[4].alg, JWT_HS256);
    ck_assert_str_eq(keys->keys[0].kid, "rsa1");
}
END_TEST

START_TEST(each_algorithm_verifies)
{
    passes(jwt_rs256, &now);
    passes(jwt_ps256, &now);
    passes(jwt_es256, &now);
    passes(jwt_es384, &now);
    passes(jwt_eddsa, &now);
    passes(jwt_hs256, &now);
    passes(jwt_no_times, &now);
    struct jwt_token t;
    const char *why;
    ck_assert_int_eq(jwt_parse(jwt_ps256, strlen(jwt_ps256), &t, &why), 0);
    ck_assert_int_eq(t.alg, JWT_PS256);
    ck_assert_str_eq(t.kid, "rsa1");
    ck_assert_str_eq(json_string_value(json_object_get(t.claims, "sub")), "alice");
    jwt_token_free(&t);
}
END_TEST

START_TEST(time_claims_with_leeway)
{
    fails(jwt_expired, &now, "token expired");
    fails(jwt_not_yet, &now, "token not yet valid");
    /* exp is 1000000100: 100 s ago with a clock at 1000000200. */
    struct jwt_checks at = {.now = 1000000200};
    fails(jwt_expired, &at, "token expired");
    at.leeway = 100;
    passes(jwt_expired, &at);
    at.leeway = 99;
    fails(jwt_expired, &at, "token expired");
    /* nbf is 4000000000. */
    at = (struct jwt_checks){.now = 3999999990, .leeway = 10};
    passes(jwt_not_yet, &at);
    at.leeway = 9;
    fails(jwt_not_yet, &at, "token not yet valid");
}
END_TEST

START_TEST(issuer_and_audience)
{
    struct jwt_checks c = now;
    c.issuer = "https://issuer.example";
    c.audience = "web"; /* one of the token's array */
    passes(jwt_es256, &c);
    c.audience = "mobile";
    fails(jwt_es256, &c, "wrong audience");
    c.audience = NULL;
    c.issuer = "https://other.example";
    fails(jwt_es256, &c, "wrong issuer");
    c.issuer = "https://issuer.example";
    fails(jwt_no_times, &c, "wrong issuer"); /* it has none */
}
END_TEST

/* What must never pass. */
START_TEST(forgeries_are_refused)
{
    fails(jwt_bad_sig, &now, "bad signature");
    /* HS256 with the RSA key's public bytes as the secret: no RSA key is
     * ever an HMAC secret, and the oct key is not that kid. */
    fails(jwt_confused, &now, "no key for the token's alg and kid");
    fails(jwt_alg_none, &now, "empty part");
    fails(jwt_alg_none_signed, &now, "unsupported or missing alg");
    fails(jwt_wrong_kid, &now, "no key for the token's alg and kid");
    fails(jwt_enc_key, &now, "no key for the token's alg and kid");
    fails(jwt_truncated, &now, "not three parts");
    /* A signature moved to another algorithm's token. */
    char swapped[JWT_TOKEN_MAX];
    const char *es_sig = strrchr(jwt_es256, '.');
    size_t head = (size_t)(strrchr(jwt_es384, '.') - jwt_es384);
    snprintf(swapped, sizeof(swapped), "%.*s%s", (int)head, jwt_es384, es_sig);
    fails(swapped, &now, "bad signature");
}
END_TEST

START_TEST(malformed_tokens_are_refused)
{
    const char *why;
    struct jwt_token t;
    fails("", &now, "empty token");
    fails("a.b", &now, "not three parts");
    fails("a.b.c.d", &now, "not three parts");
    fails("..", &now, "empty part");
    fails("eyJhbGciOiJIUzI1NiJ9.e30.AAAA=", &now, "bad signature encoding");
    fails("eyJhbGciOiJIUzI1NiJ9=.e30.AAAA", &now, "bad base64url");
    fails("eyJhbGciOiJIUzI1NiJ9.e+30.AAAA", &now, "bad base64url");
    fails("eyJhbGciOiJIUzI1NiJ9.W10.AAAA", &now, "not a JSON object"); /* [] */
    fails("e30.e30.AAAA", &now, "unsupported or missing alg");         /* {} */
    /* {"alg":"HS256","crit":["x"]} */
    fails("eyJhbGciOiJIUzI1NiIsImNyaXQiOlsieCJdfQ.e30.AAAA", &now,
          "critical header extensions are not supported");
    /* {"alg":"HS256","alg":"none"}: duplicate names */
    fails("eyJhbGciOiJIUzI1NiIsImFsZyI6Im5vbmUifQ.e30.AAAA", &now, "not a JSON object");
    /* Longer than JWT_TOKEN_MAX: refused unread. */
    static char big[JWT_TOKEN_MAX + 2];
    memset(big, 'A', sizeof(big) - 1);
    ck_assert_int_eq(jwt_parse(big, sizeof(big) - 1, &t, &why), -1);
    ck_assert_str_eq(why, "token too long");
    /* The ES256 signature cut by a byte. */
    char cut[JWT_TOKEN_MAX];
    snprintf(cut, sizeof(cut), "%.*s", (int)strlen(jwt_es256) - 2, jwt_es256);
    ck_assert_int_eq(check(cut, &now, &why), -1);
}
END_TEST

START_TEST(json_depth_is_bounded)
{
    char deep[64];
    memset(deep, '[', 17);
    memset(deep + 17, ']', 17);
    deep[34] = '\0';
    ck_assert(!jwt_json_depth_ok(deep, strlen(deep), JWT_JSON_DEPTH_MAX));
    ck_assert(jwt_json_depth_ok(deep + 1, strlen(deep) - 2, JWT_JSON_DEPTH_MAX));
    ck_assert(jwt_json_depth_ok("{\"a\":\"[[[[[[[[[[[[[[[[[[\\\"[[[\"}", 29, 4)); /* in strings */
}
END_TEST

static void set_refused(const char *json, const char *expected)
{
    struct jwks *set = NULL;
    char message[256] = "";
    ck_assert_int_eq(jwks_parse("k.json", json, strlen(json), &set, message, sizeof(message)), -1);
    ck_assert_ptr_null(set);
    ck_assert_msg(strstr(message, expected) != NULL, "\"%s\" lacks \"%s\"", message, expected);
}

START_TEST(bad_key_sets_are_refused)
{
    set_refused("{\"keys\": [", "k.json:1:");
    set_refused("[]", "expected a JWK set");
    set_refused("{\"keys\": []}", "no signature key");
    set_refused("{\"keys\": [{\"kty\":\"oct\",\"k\":\"AAAA\"}]}", "key 1: oct key shorter than 32");
    set_refused("{\"keys\": [{\"kty\":\"RSA\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}",
                "RSA key shorter than 2048 bits");
    set_refused("{\"keys\": [{\"kty\":\"EC\",\"crv\":\"P-521\",\"x\":\"AA\",\"y\":\"AA\"}]}",
                "curve other than");
    set_refused("{\"keys\": [{\"kty\":\"EC\",\"crv\":\"P-256\","
                "\"x\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\","
                "\"y\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}",
                "EC key not on its curve");
    set_refused("{\"keys\": [{\"kty\":\"oct\",\"alg\":\"RS256\","
                "\"k\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\"}]}",
                "not of the key's type");
    set_refused("{\"keys\": [{\"kty\":\"XYZ\"}]}", "unsupported \"kty\"");
    /* One JWK alone is a set of one. */
    struct jwks *set = NULL;
    char message[256];
    const char *one = "{\"kty\":\"oct\",\"k\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\"}";
    ck_assert_int_eq(jwks_parse("k.json", one, strlen(one), &set, message, sizeof(message)), 0);
    ck_assert_uint_eq(set->count, 1);
    ck_assert_int_eq(set->keys[0].alg, -1);
    jwks_free(set);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/auth_jwt");
    TCase *tc = tcase_create("jwt");
    tcase_set_timeout(tc, 20);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, the_key_set_loads);
    tcase_add_test(tc, each_algorithm_verifies);
    tcase_add_test(tc, time_claims_with_leeway);
    tcase_add_test(tc, issuer_and_audience);
    tcase_add_test(tc, forgeries_are_refused);
    tcase_add_test(tc, malformed_tokens_are_refused);
    tcase_add_test(tc, json_depth_is_bounded);
    tcase_add_test(tc, bad_key_sets_are_refused);
    suite_add_tcase(suite, tc);
    return suite;
}
