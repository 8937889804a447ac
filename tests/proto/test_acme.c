/*
 * test_acme.c: the ACME client's pieces without sockets: JWS requests
 * verified by auth_jwt's independent verifier (jwt_verify()) against the
 * JWK they carry, RFC 7638's thumbprint vector, the ACME server's answers
 * (RFC 8555's examples, then each field of the wrong type), and
 * state_path: modes, atomic writes, the placeholder, the renewal
 * schedule of certificates made by openssl(1), and the lease.
 */
#include "../helpers.h"
#include "conf/config.h"
#include "proto/policy/jwt.h"
#include "proto/tls/acme.h"
#include "proto/tls/acme_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const bool test_forkless = true;

/* ------------------------------------------------------------------ JWS */

/* Checks `jws` (flattened JSON) as the ACME server would: its compact
 * form verifies with the JWK `jwk` (its own, or the account's), its
 * header names `url`, `nonce` and `kid`, and its payload is `payload`. */
static void jws_verifies(const char *jws, json_t *jwk, const char *url, const char *nonce,
                         const char *kid, const char *payload)
{
    json_t *root = json_loads(jws, 0, NULL);
    ck_assert_ptr_nonnull(root);
    const char *prot = json_string_value(json_object_get(root, "protected"));
    const char *body = json_string_value(json_object_get(root, "payload"));
    const char *sig = json_string_value(json_object_get(root, "signature"));
    ck_assert(prot != NULL && body != NULL && sig != NULL);
    char compact[8192];
    int n = snprintf(compact, sizeof(compact), "%s.%s.%s", prot, body, sig);
    ck_assert(n > 0 && (size_t)n < sizeof(compact));

    /* auth_jwt picks the key by the header's kid: the account URL. */
    json_t *named = json_deep_copy(jwk);
    if (kid != NULL)
        json_object_set_new(named, "kid", json_string(kid));
    char *set_text = json_dumps(named, JSON_COMPACT);
    json_decref(named);
    struct jwks *keys;
    char message[256];
    ck_assert_msg(jwks_parse("jwk", set_text, strlen(set_text), &keys, message, sizeof(message)) ==
                      0,
                  "%s", message);
    free(set_text);
    struct jwt_token t;
    const char *why = NULL;
    /* auth_jwt wants claims in an object: an empty payload is checked
     * for its signature only, below, by giving it "{}"'s place. */
    if (payload != NULL) {
        ck_assert_msg(jwt_parse(compact, (size_t)n, &t, &why) == 0, "%s", why);
        struct jwt_checks checks = {.now = 1};
        ck_assert_msg(jwt_verify(&t, keys, &checks, &why) == 0, "%s", why);
        ck_assert_str_eq(json_string_value(json_object_get(t.header, "url")), url);
        ck_assert_str_eq(json_string_value(json_object_get(t.header, "nonce")), nonce);
        json_t *k = json_object_get(t.header, "kid");
        if (kid != NULL)
            ck_assert_str_eq(json_string_value(k), kid);
        else
            ck_assert(k == NULL && json_is_object(json_object_get(t.header, "jwk")));
        char *claims = json_dumps(t.claims, JSON_COMPACT | JSON_SORT_KEYS);
        json_t *want = json_loads(payload, 0, NULL);
        char *want_text = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        ck_assert_str_eq(claims, want_text);
        free(claims);
        free(want_text);
        json_decref(want);
        jwt_token_free(&t);
    } else {
        ck_assert_str_eq(body, ""); /* RFC 8555 §6.3: POST-as-GET */
    }
    jwks_free(keys);
    json_decref(root);
}

static void jws_for(enum acme_key_type type)
{
    EVP_PKEY *key = acme_key_generate(type);
    ck_assert_ptr_nonnull(key);
    json_t *jwk = acme_jwk(key);
    ck_assert_ptr_nonnull(jwk);
    const char *payload = "{\"termsOfServiceAgreed\":true,\"contact\":[\"mailto:a@example.com\"]}";
    char *jws = acme_jws(key, NULL, "nonce-1", "https://ca.test/new-account", payload);
    ck_assert_ptr_nonnull(jws);
    jws_verifies(jws, jwk, "https://ca.test/new-account", "nonce-1", NULL, payload);
    free(jws);
    jws = acme_jws(key, "https://ca.test/acct/7", "nonce-2", "https://ca.test/order/1", "{}");
    jws_verifies(jws, jwk, "https://ca.test/order/1", "nonce-2", "https://ca.test/acct/7", "{}");
    free(jws);
    jws = acme_jws(key, "https://ca.test/acct/7", "nonce-3", "https://ca.test/cert/1", NULL);
    jws_verifies(jws, jwk, "https://ca.test/cert/1", "nonce-3", "https://ca.test/acct/7", NULL);
    free(jws);
    json_decref(jwk);
    EVP_PKEY_free(key);
}

START_TEST(jws_es256)
{
    jws_for(ACME_KEY_EC_P256);
}
END_TEST

START_TEST(jws_rs256)
{
    jws_for(ACME_KEY_RSA_2048);
}
END_TEST

/* A signature that verifies is not enough: one made with another key
 * must not. */
START_TEST(jws_other_key_fails)
{
    EVP_PKEY *a = acme_key_generate(ACME_KEY_EC_P256), *b = acme_key_generate(ACME_KEY_EC_P256);
    char *jws = acme_jws(a, "k", "n", "https://ca.test/x", "{}");
    json_t *root = json_loads(jws, 0, NULL);
    char compact[4096];
    snprintf(compact, sizeof(compact), "%s.%s.%s",
             json_string_value(json_object_get(root, "protected")),
             json_string_value(json_object_get(root, "payload")),
             json_string_value(json_object_get(root, "signature")));
    json_t *jwk = acme_jwk(b);
    json_object_set_new(jwk, "kid", json_string("k")); /* found, but not the signer */
    char *set_text = json_dumps(jwk, JSON_COMPACT);
    struct jwks *keys;
    char message[256];
    ck_assert_int_eq(jwks_parse("jwk", set_text, strlen(set_text), &keys, message, sizeof(message)),
                     0);
    struct jwt_token t;
    const char *why;
    ck_assert_int_eq(jwt_parse(compact, strlen(compact), &t, &why), 0);
    struct jwt_checks checks = {.now = 1};
    ck_assert_int_ne(jwt_verify(&t, keys, &checks, &why), 0);
    ck_assert_ptr_null(strstr(why, "no key"));
    jwt_token_free(&t);
    jwks_free(keys);
    free(set_text);
    json_decref(jwk);
    json_decref(root);
    free(jws);
    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
}
END_TEST

/* RFC 7638 §3.1's RSA key and its thumbprint. */
START_TEST(thumbprint_rfc7638)
{
    /* The RFC gives n and e in base64url: the key is built from them. */
    const char *n64 = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFx"
                      "uhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_"
                      "RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQ"
                      "vRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_"
                      "xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
    char jwk_text[1024];
    snprintf(jwk_text, sizeof(jwk_text), "{\"kty\":\"RSA\",\"n\":\"%s\",\"e\":\"AQAB\"}", n64);
    struct jwks *keys;
    char message[256];
    ck_assert_msg(jwks_parse("rfc", jwk_text, strlen(jwk_text), &keys, message, sizeof(message)) ==
                      0,
                  "%s", message);
    char thumb[44];
    ck_assert_int_eq(acme_jwk_thumbprint(keys->keys[0].pkey, thumb), 0);
    ck_assert_str_eq(thumb, "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
    char *ka = acme_key_authorization(keys->keys[0].pkey, "tok_EN-1");
    ck_assert_str_eq(ka, "tok_EN-1.NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
    free(ka);
    jwks_free(keys);
}
END_TEST

START_TEST(base64url_vectors)
{
    /* RFC 4648 §10, made URL-safe and unpadded. */
    const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar", "\xfb\xff"};
    const char *out[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy", "-_8"};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        char *s = acme_base64url((const unsigned char *)in[i], strlen(in[i]));
        ck_assert_str_eq(s, out[i]);
        free(s);
    }
}
END_TEST

/* --------------------------------------------------------------- answers */

#define PARSE(fn, text, out) fn(text, strlen(text), out, why, sizeof(why))

START_TEST(parse_directory)
{
    char why[256];
    struct acme_directory d;
    const char *ok = "{\"newNonce\":\"https://ca/nonce\",\"newAccount\":\"https://ca/acct\","
                     "\"newOrder\":\"https://ca/order\",\"revokeCert\":\"https://ca/revoke\","
                     "\"meta\":{\"termsOfService\":\"https://ca/tos\",\"website\":7}}";
    ck_assert_int_eq(PARSE(acme_parse_directory, ok, &d), 0);
    ck_assert_str_eq(d.new_nonce, "https://ca/nonce");
    ck_assert_str_eq(d.new_account, "https://ca/acct");
    ck_assert_str_eq(d.new_order, "https://ca/order");
    ck_assert_str_eq(d.terms_of_service, "https://ca/tos");
    ck_assert_ptr_null(d.renewal_info);
    acme_directory_free(&d);
    const char *ari = "{\"newNonce\":\"https://ca/nonce\",\"newAccount\":\"https://ca/acct\","
                      "\"newOrder\":\"https://ca/order\",\"renewalInfo\":\"https://ca/ari\"}";
    ck_assert_int_eq(PARSE(acme_parse_directory, ari, &d), 0);
    ck_assert_str_eq(d.renewal_info, "https://ca/ari");
    ck_assert(!d.external_account_required);
    acme_directory_free(&d);
    const char *eab =
        "{\"newNonce\":\"https://ca/nonce\",\"newAccount\":\"https://ca/acct\","
        "\"newOrder\":\"https://ca/order\",\"meta\":{\"externalAccountRequired\":true}}";
    ck_assert_int_eq(PARSE(acme_parse_directory, eab, &d), 0);
    ck_assert(d.external_account_required);
    acme_directory_free(&d);
    const char *bad[] = {
        "",
        "[]",
        "{\"newNonce\":\"https://ca/nonce\",\"newAccount\":\"https://ca/acct\"}",
        "{\"newNonce\":7,\"newAccount\":\"https://ca/acct\",\"newOrder\":\"https://ca/o\"}",
        "{\"newNonce\":\"ftp://x\",\"newAccount\":\"https://ca/acct\",\"newOrder\":\"https://o\"}",
        "{\"newNonce\":\"https://n\",\"newAccount\":\"https://a\",\"newOrder\":\"https://o\","
        "\"meta\":[]}",
        "{\"newNonce\":\"https://n\",\"newAccount\":\"https://a\",\"newOrder\":\"https://o\","
        "\"meta\":{\"termsOfService\":false}}",
        "{\"newNonce\":\"https://n\",\"newNonce\":\"https://m\",\"newAccount\":\"https://a\","
        "\"newOrder\":\"https://o\"}",
        "{\"newNonce\":\"https://n\",\"newAccount\":\"https://a\",\"newOrder\":\"https://o\","
        "\"renewalInfo\":7}",
        "{\"newNonce\":\"https://n\",\"newAccount\":\"https://a\",\"newOrder\":\"https://o\","
        "\"meta\":{\"externalAccountRequired\":\"yes\"}}",
        "{\"newNonce\":\"https://n\",\"newAccount\":\"https://a\",\"newOrder\":\"https://o\","
        "\"renewalInfo\":\"file:///etc/passwd\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        ck_assert_msg(PARSE(acme_parse_directory, bad[i], &d) == -EINVAL, "%zu accepted", i);
        ck_assert(why[0] != '\0' && d.new_nonce == NULL);
    }
}
END_TEST

/* RFC 9773's renewalInfo answers: its example, fractions and offsets,
 * then windows that are not windows. */
START_TEST(parse_renewal_info)
{
    char why[256];
    struct acme_renewal_info r;
    const char *ok = "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00Z\","
                     "\"end\":\"2025-01-03T04:00:00Z\"},"
                     "\"explanationURL\":\"https://acme.example.com/docs/ari\"}";
    ck_assert_int_eq(PARSE(acme_parse_renewal_info, ok, &r), 0);
    ck_assert_int_eq((long long)r.start, 1735790400LL);
    ck_assert_int_eq((long long)r.end, 1735790400LL + 86400);
    ck_assert_str_eq(r.explanation, "https://acme.example.com/docs/ari");
    acme_renewal_info_free(&r);
    const char *offsets = "{\"suggestedWindow\":{\"start\":\"2025-01-02T06:30:00.123+02:30\","
                          "\"end\":\"2025-01-02T00:00:00.5-05:00\"}}";
    ck_assert_int_eq(PARSE(acme_parse_renewal_info, offsets, &r), 0);
    ck_assert_int_eq((long long)r.start, 1735790400LL);
    ck_assert_int_eq((long long)r.end, 1735790400LL + 3600);
    ck_assert_ptr_null(r.explanation);
    acme_renewal_info_free(&r);
    const char *bad[] = {
        "{}",
        "{\"suggestedWindow\":[]}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00Z\"}}",
        "{\"suggestedWindow\":{\"start\":1,\"end\":2}}",
        /* ends before (or as) it starts */
        "{\"suggestedWindow\":{\"start\":\"2025-01-03T04:00:00Z\",\"end\":\"2025-01-02T04:00:00Z\"}"
        "}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00Z\",\"end\":\"2025-01-02T04:00:00Z\"}"
        "}",
        /* not RFC 3339 */
        "{\"suggestedWindow\":{\"start\":\"2025-01-02 "
        "04:00:00Z\",\"end\":\"2025-01-03T04:00:00Z\"}}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00\",\"end\":\"2025-01-03T04:00:00Z\"}"
        "}",
        "{\"suggestedWindow\":{\"start\":\"2025-02-30T04:00:00Z\",\"end\":\"2025-03-03T04:00:00Z\"}"
        "}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T24:00:00Z\",\"end\":\"2025-01-03T04:00:00Z\"}"
        "}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00.Z\",\"end\":\"2025-01-03T04:00:"
        "00Z\"}}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00Zjunk\",\"end\":\"2025-01-03T04:00:"
        "00Z\"}}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00+0100\",\"end\":\"2025-01-03T04:00:"
        "00Z\"}}",
        "{\"suggestedWindow\":{\"start\":\"2025-01-02T04:00:00Z\",\"end\":\"2025-01-03T04:00:00Z\"}"
        ","
        "\"explanationURL\":5}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        ck_assert_msg(PARSE(acme_parse_renewal_info, bad[i], &r) == -EINVAL, "%zu accepted", i);
        ck_assert(why[0] != '\0' && r.explanation == NULL);
    }
}
END_TEST

/* RFC 9773 §4.1's example: key identifier 69:88:5B:...:C8:D4 and serial
 * 0x87654321 (DER content 00 87 65 43 21) make
 * "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE". */
START_TEST(ari_cert_id_rfc9773)
{
    static const unsigned char keyid[] = {0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40,
                                          0x41, 0xE1, 0xB3, 0x7B, 0x84, 0x7B, 0xA0,
                                          0xAE, 0x2C, 0xDE, 0x01, 0xC8, 0xD4};
    X509 *cert = X509_new();
    ck_assert_ptr_nonnull(cert);
    ck_assert_int_eq(ASN1_INTEGER_set_int64(X509_get_serialNumber(cert), 0x87654321), 1);
    char *none = acme_ari_cert_id(cert);
    ck_assert_ptr_null(none); /* no authority key identifier */
    AUTHORITY_KEYID *akid = AUTHORITY_KEYID_new();
    akid->keyid = ASN1_OCTET_STRING_new();
    ck_assert_int_eq(ASN1_OCTET_STRING_set(akid->keyid, keyid, sizeof(keyid)), 1);
    ck_assert_int_eq(X509_add1_ext_i2d(cert, NID_authority_key_identifier, akid, 0, 0), 1);
    AUTHORITY_KEYID_free(akid);
    char *id = acme_ari_cert_id(cert);
    ck_assert_str_eq(id, "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE");
    free(id);
    /* A serial whose high bit is clear has no leading zero. */
    ck_assert_int_eq(ASN1_INTEGER_set_int64(X509_get_serialNumber(cert), 0x0102), 1);
    id = acme_ari_cert_id(cert);
    ck_assert_str_eq(id, "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AQI");
    free(id);
    X509_free(cert);
}
END_TEST

/* A time in the window, spread over it by the random value; now when
 * that time has passed. */
START_TEST(ari_choose_in_the_window)
{
    const time_t start = 1000000, end = 1000000 + 86400;
    ck_assert_int_eq(acme_ari_choose(start, end, 0, 0), start);
    ck_assert_int_eq(acme_ari_choose(start, end, 0, UINT32_MAX), end - 1);
    ck_assert_int_eq(acme_ari_choose(start, end, 0, UINT32_MAX / 2), start + 43199);
    /* Partly past: the first half's times are now. */
    ck_assert_int_eq(acme_ari_choose(start, end, start + 43200, 0), start + 43200);
    ck_assert_int_eq(acme_ari_choose(start, end, start + 43200, UINT32_MAX), end - 1);
    /* Wholly past, or not a window: now. */
    ck_assert_int_eq(acme_ari_choose(start, end, end + 5, UINT32_MAX), end + 5);
    ck_assert_int_eq(acme_ari_choose(end, start, 7, 12345), 7);
    for (uint32_t r = 1; r < 4000000000u; r += 123456789u) {
        time_t at = acme_ari_choose(start, end, 0, r);
        ck_assert(at >= start && at < end);
    }
}
END_TEST

/* base64url back to bytes: the vectors of RFC 4648 §10 (URL-safe, no
 * padding), and text that is not base64url. */
START_TEST(base64url_decode_vectors)
{
    const char *in[][2] = {{"Zg", "f"},        {"Zm8", "fo"},        {"Zm9v", "foo"},
                           {"Zm9vYg", "foob"}, {"Zm9vYmE", "fooba"}, {"Zm9vYmFy", "foobar"},
                           {"-_8", "\xfb\xff"}};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        size_t len = 0;
        unsigned char *out = acme_base64url_decode(in[i][0], &len);
        ck_assert_ptr_nonnull(out);
        ck_assert_uint_eq(len, strlen(in[i][1]));
        ck_assert(memcmp(out, in[i][1], len) == 0);
        free(out);
    }
    /* Zh and Zm9=: bits set past the last byte */
    const char *bad[] = {"", "Z", "Zm9v=", "Zm+v", "Zm/v", "Zm9v Yg", "Zm9vY", "Zh", "Zm9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t len;
        ck_assert_msg(acme_base64url_decode(bad[i], &len) == NULL, "\"%s\" decoded", bad[i]);
    }
}
END_TEST

/* External account binding: auth_jwt's verifier takes the binding as an
 * HS256 JWS under the MAC key (as a JWK of kty "oct"), its header names
 * the key ID and newAccount's URL, and its payload is the account key's
 * JWK; another MAC key does not verify it. */
START_TEST(eab_verifies_with_the_mac_key)
{
    static const char mac_b64[] =
        "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
    size_t mac_len;
    unsigned char *mac = acme_base64url_decode(mac_b64, &mac_len);
    ck_assert_ptr_nonnull(mac);
    EVP_PKEY *key = acme_key_generate(ACME_KEY_EC_P256);
    json_t *eab = acme_eab(key, "kid-1", mac, mac_len, "https://ca/acct");
    ck_assert_ptr_nonnull(eab);
    char compact[4096];
    int n = snprintf(compact, sizeof(compact), "%s.%s.%s",
                     json_string_value(json_object_get(eab, "protected")),
                     json_string_value(json_object_get(eab, "payload")),
                     json_string_value(json_object_get(eab, "signature")));
    ck_assert(n > 0 && (size_t)n < sizeof(compact));
    for (int other = 0; other < 2; other++) {
        char set[256], message[256];
        snprintf(set, sizeof(set), "{\"kty\":\"oct\",\"kid\":\"kid-1\",\"k\":\"%s\"}",
                 other ? "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" : mac_b64);
        struct jwks *keys;
        ck_assert_msg(jwks_parse("jwk", set, strlen(set), &keys, message, sizeof(message)) == 0,
                      "%s", message);
        struct jwt_token t;
        const char *why = NULL;
        ck_assert_msg(jwt_parse(compact, (size_t)n, &t, &why) == 0, "%s", why);
        struct jwt_checks checks = {.now = 1};
        int rc = jwt_verify(&t, keys, &checks, &why);
        if (other) {
            ck_assert_msg(rc != 0, "verified under another key");
        } else {
            ck_assert_msg(rc == 0, "%s", why);
            ck_assert_str_eq(json_string_value(json_object_get(t.header, "alg")), "HS256");
            ck_assert_str_eq(json_string_value(json_object_get(t.header, "kid")), "kid-1");
            ck_assert_str_eq(json_string_value(json_object_get(t.header, "url")),
                             "https://ca/acct");
            ck_assert_ptr_null(json_object_get(t.header, "nonce")); /* RFC 8555 §7.3.4 */
            json_t *jwk = acme_jwk(key);
            ck_assert(json_equal(t.claims, jwk));
            json_decref(jwk);
        }
        jwt_token_free(&t);
        jwks_free(keys);
    }
    json_decref(eab);
    EVP_PKEY_free(key);
    free(mac);
}
END_TEST

START_TEST(parse_order)
{
    char why[256];
    struct acme_order o;
    /* RFC 8555 §7.1.3's example. */
    const char *ok = "{\"status\":\"valid\",\"expires\":\"2016-01-20T14:09:07.99Z\","
                     "\"identifiers\":[{\"type\":\"dns\",\"value\":\"www.example.org\"}],"
                     "\"authorizations\":[\"https://example.com/acme/authz/PAniVnsZcis\","
                     "\"https://example.com/acme/authz/r4HqLzrSrpI\"],"
                     "\"finalize\":\"https://example.com/acme/order/TOlocE8rfgo/finalize\","
                     "\"certificate\":\"https://example.com/acme/cert/mAt3xBGaobw\"}";
    ck_assert_int_eq(PARSE(acme_parse_order, ok, &o), 0);
    ck_assert_int_eq(o.status, ACME_STATUS_VALID);
    ck_assert_uint_eq(o.authorization_count, 2);
    ck_assert_str_eq(o.authorizations[1], "https://example.com/acme/authz/r4HqLzrSrpI");
    ck_assert_str_eq(o.certificate, "https://example.com/acme/cert/mAt3xBGaobw");
    acme_order_free(&o);
    const char *failed = "{\"status\":\"invalid\",\"authorizations\":[\"https://a\"],"
                         "\"finalize\":\"https://f\",\"error\":{\"type\":"
                         "\"urn:ietf:params:acme:error:unauthorized\",\"detail\":\"no\"}}";
    ck_assert_int_eq(PARSE(acme_parse_order, failed, &o), 0);
    ck_assert_int_eq(o.status, ACME_STATUS_INVALID);
    ck_assert_str_eq(o.error.detail, "no");
    ck_assert_ptr_null(o.certificate);
    acme_order_free(&o);
    const char *odd = "{\"status\":\"sleeping\",\"authorizations\":[\"https://a\"],"
                      "\"finalize\":\"https://f\"}";
    ck_assert_int_eq(PARSE(acme_parse_order, odd, &o), 0);
    ck_assert_int_eq(o.status, ACME_STATUS_UNKNOWN);
    acme_order_free(&o);
    const char *bad[] = {
        "{\"authorizations\":[\"https://a\"],\"finalize\":\"https://f\"}",
        "{\"status\":1,\"authorizations\":[\"https://a\"],\"finalize\":\"https://f\"}",
        "{\"status\":\"ready\",\"authorizations\":\"https://a\",\"finalize\":\"https://f\"}",
        "{\"status\":\"ready\",\"authorizations\":[],\"finalize\":\"https://f\"}",
        "{\"status\":\"ready\",\"authorizations\":[\"https://a\",3],\"finalize\":\"https://f\"}",
        "{\"status\":\"ready\",\"authorizations\":[\"https://a\"]}",
        "{\"status\":\"ready\",\"authorizations\":[\"https://a\"],\"finalize\":\"https://f\","
        "\"certificate\":{}}",
        "{\"status\":\"ready\",\"authorizations\":[\"https://a\"],\"finalize\":\"https://f\","
        "\"error\":\"bad\"}",
        "{\"status\":\"ready\",\"authorizations\":[\"https://a\"],\"finalize\":\"https://f\","
        "\"error\":{\"detail\":[1]}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(PARSE(acme_parse_order, bad[i], &o) == -EINVAL, "%zu accepted", i);
    /* More authorizations than an order for one certificate has. */
    size_t big = 64 + (ACME_AUTHZ_LIMIT + 1) * 12;
    char *many = malloc(big);
    size_t at = (size_t)sprintf(many, "{\"status\":\"ready\",\"finalize\":\"https://f\","
                                      "\"authorizations\":[");
    for (int i = 0; i <= ACME_AUTHZ_LIMIT; i++)
        at += (size_t)sprintf(many + at, "%s\"https://a\"", i ? "," : "");
    strcpy(many + at, "]}");
    ck_assert_int_eq(PARSE(acme_parse_order, many, &o), -EINVAL);
    free(many);
}
END_TEST

START_TEST(parse_authorization)
{
    char why[256];
    struct acme_authorization a;
    /* RFC 8555 §7.1.4's example. */
    const char *ok = "{\"status\":\"pending\",\"expires\":\"2016-01-02T14:09:30Z\","
                     "\"identifier\":{\"type\":\"dns\",\"value\":\"www.example.org\"},"
                     "\"challenges\":[{\"type\":\"http-01\",\"url\":\"https://example.com/acme/"
                     "chall/prV_B7yEyA4\",\"status\":\"pending\",\"token\":"
                     "\"DGyRejmCefe7v4NfDGDKfA\"},{\"type\":\"dns-01\",\"url\":\"https://"
                     "example.com/acme/chall/Rg5dV14Gh1Q\",\"status\":\"pending\",\"token\":"
                     "\"DGyRejmCefe7v4NfDGDKfA\"},{\"type\":\"future-02\",\"url\":\"https://x\","
                     "\"status\":\"pending\"}]}";
    ck_assert_int_eq(PARSE(acme_parse_authorization, ok, &a), 0);
    ck_assert_int_eq(a.status, ACME_STATUS_PENDING);
    ck_assert_str_eq(a.identifier, "www.example.org");
    ck_assert_uint_eq(a.challenge_count, 3);
    const struct acme_challenge *c = acme_authorization_challenge(&a, "http-01");
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(c->token, "DGyRejmCefe7v4NfDGDKfA");
    ck_assert_str_eq(c->url, "https://example.com/acme/chall/prV_B7yEyA4");
    ck_assert_ptr_null(acme_authorization_challenge(&a, "tls-alpn-01"));
    ck_assert_ptr_null(acme_authorization_challenge(&a, "future-02"));
    acme_authorization_free(&a);
    const char *invalid =
        "{\"status\":\"invalid\",\"identifier\":{\"type\":\"dns\",\"value\":\"a.test\"},"
        "\"challenges\":[{\"type\":\"http-01\",\"url\":\"https://x\",\"status\":\"invalid\","
        "\"token\":\"t\",\"error\":{\"type\":\"urn:ietf:params:acme:error:connection\","
        "\"detail\":\"connection refused\"}}]}";
    ck_assert_int_eq(PARSE(acme_parse_authorization, invalid, &a), 0);
    ck_assert_int_eq(a.status, ACME_STATUS_INVALID);
    ck_assert_str_eq(a.challenges[0].error.detail, "connection refused");
    acme_authorization_free(&a);
    const char *head = "{\"status\":\"pending\",\"identifier\":{\"type\":\"dns\",\"value\":\"a\"},";
    const char *bad_tail[] = {
        "\"challenges\":{}}",
        "\"challenges\":[7]}",
        "\"challenges\":[{\"type\":\"http-01\",\"url\":\"https://x\",\"status\":\"pending\","
        "\"token\":\"../../etc/passwd\"}]}",
        "\"challenges\":[{\"type\":\"http-01\",\"url\":\"https://x\",\"status\":\"pending\","
        "\"token\":\"\"}]}",
        "\"challenges\":[{\"type\":\"http-01\",\"url\":\"https://x\",\"status\":\"pending\","
        "\"token\":5}]}",
        "\"challenges\":[{\"type\":\"http-01\",\"status\":\"pending\",\"token\":\"t\"}]}",
        "\"challenges\":[{\"type\":1,\"url\":\"https://x\",\"status\":\"pending\"}]}",
        "\"wildcard\":\"yes\",\"challenges\":[]}",
        "\"challenges\":[{\"type\":\"http-01\",\"url\":\"https://x\",\"status\":\"invalid\","
        "\"error\":\"refused\"}]}",
        "\"challenges\":[{\"type\":\"http-01\",\"url\":\"https://x\",\"status\":\"invalid\","
        "\"error\":{\"detail\":5}}]}",
    };
    char text[1024];
    for (size_t i = 0; i < sizeof(bad_tail) / sizeof(bad_tail[0]); i++) {
        snprintf(text, sizeof(text), "%s%s", head, bad_tail[i]);
        ck_assert_msg(PARSE(acme_parse_authorization, text, &a) == -EINVAL, "%zu accepted", i);
    }
    const char *bad_id[] = {
        ("{\"status\":\"pending\",\"identifier\":{\"type\":\"ip\",\"value\":\"1.2.3.4\"},"
         "\"challenges\":[]}"),
        "{\"status\":\"pending\",\"identifier\":\"a\",\"challenges\":[]}",
        "{\"status\":\"pending\",\"identifier\":{\"type\":\"dns\",\"value\":7},\"challenges\":[]}",
    };
    for (size_t i = 0; i < sizeof(bad_id) / sizeof(bad_id[0]); i++)
        ck_assert_msg(PARSE(acme_parse_authorization, bad_id[i], &a) == -EINVAL, "%zu", i);
}
END_TEST

START_TEST(parse_problem_and_limits)
{
    char why[256];
    struct acme_problem p;
    const char *ok = "{\"type\":\"urn:ietf:params:acme:error:badNonce\",\"detail\":\"stale\"}";
    ck_assert_int_eq(PARSE(acme_parse_problem, ok, &p), 0);
    ck_assert_str_eq(p.type, "urn:ietf:params:acme:error:badNonce");
    acme_problem_free(&p);
    ck_assert_int_eq(PARSE(acme_parse_problem, "{\"type\":[]}", &p), -EINVAL);
    ck_assert_ptr_null(p.type);
    /* Deep nesting and oversized answers are refused, not recursed into. */
    size_t deep = 100000;
    char *text = malloc(2 * deep + 1);
    memset(text, '[', deep);
    memset(text + deep, ']', deep);
    text[2 * deep] = '\0';
    struct acme_account acct;
    ck_assert_int_eq(PARSE(acme_parse_account, text, &acct), -EINVAL);
    free(text);
    size_t huge = ACME_RESPONSE_LIMIT + 10;
    text = malloc(huge + 1);
    memset(text, ' ', huge);
    memcpy(text, "{\"status\":\"valid\"}", 18);
    text[huge] = '\0';
    ck_assert_int_eq(PARSE(acme_parse_account, text, &acct), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "larger"));
    free(text);
    ck_assert_int_eq(PARSE(acme_parse_account, "{\"status\":\"valid\"}", &acct), 0);
    ck_assert_int_eq(acct.status, ACME_STATUS_VALID);
    /* A NUL inside a string is not a URL. */
    const char nul[] = "{\"newNonce\":\"https://a\\u0000b\",\"newAccount\":\"https://a\","
                       "\"newOrder\":\"https://o\"}";
    struct acme_directory d;
    ck_assert_int_eq(PARSE(acme_parse_directory, nul, &d), -EINVAL);
}
END_TEST

/* ----------------------------------------------------------------- store */

static char dir[64];

static void store_setup(void)
{
    strcpy(dir, "/tmp/test_acme.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void store_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    char out[64];
    test_run(cmd, out, sizeof(out));
}

static void path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static mode_t mode_of(const char *p)
{
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    return st.st_mode & 0777;
}

START_TEST(store_key_mode_and_reload)
{
    char p[128], why[256];
    path(p, sizeof(p), "account.key");
    mode_t old = umask(0);
    EVP_PKEY *k1, *k2;
    ck_assert_int_eq(acme_store_key(p, ACME_KEY_EC_P256, &k1, why, sizeof(why)), 0);
    umask(old);
    ck_assert_int_eq(mode_of(p), 0600);
    ck_assert_int_eq(acme_store_key(p, ACME_KEY_EC_P256, &k2, why, sizeof(why)), 0);
    ck_assert_int_eq(EVP_PKEY_eq(k1, k2), 1); /* read back, not made again */
    EVP_PKEY_free(k1);
    EVP_PKEY_free(k2);
    path(p, sizeof(p), "rsa.key");
    ck_assert_int_eq(acme_store_key(p, ACME_KEY_RSA_2048, &k1, why, sizeof(why)), 0);
    ck_assert(EVP_PKEY_is_a(k1, "RSA") && EVP_PKEY_get_bits(k1) == 2048);
    EVP_PKEY_free(k1);
    path(p, sizeof(p), "junk.key");
    ck_assert_int_eq(acme_store_write(p, "junk", 4), 0);
    ck_assert_int_eq(acme_store_key(p, ACME_KEY_EC_P256, &k1, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "no private key"));
}
END_TEST

START_TEST(store_write_replaces_whole)
{
    char p[128];
    path(p, sizeof(p), "f");
    ck_assert_int_eq(acme_store_write(p, "one", 3), 0);
    struct stat a, b;
    ck_assert_int_eq(stat(p, &a), 0);
    ck_assert_int_eq(acme_store_write(p, "second", 6), 0);
    ck_assert_int_eq(stat(p, &b), 0);
    ck_assert(a.st_ino != b.st_ino); /* renamed over, as the watcher expects */
    ck_assert_int_eq(b.st_size, 6);
    ck_assert_int_eq(mode_of(p), 0600);
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/no/such/dir/f", dir);
    ck_assert_int_eq(acme_store_write(missing, "x", 1), -ENOENT);
}
END_TEST

START_TEST(store_placeholder_is_due)
{
    char crt[128];
    path(crt, sizeof(crt), "site.pem");
    const char *names[] = {"example.test"};
    struct acme_due due;
    acme_store_due(crt, names, 1, time(NULL), &due);
    ck_assert(due.order_now);
    ck_assert_ptr_nonnull(strstr(due.why, "no certificate"));
    EVP_PKEY *k = acme_key_generate(ACME_KEY_EC_P256);
    ck_assert_int_eq(acme_store_placeholder(crt, "example.test", k), 0);
    ck_assert_int_eq(mode_of(crt), 0600);
    acme_store_due(crt, names, 1, time(NULL), &due);
    ck_assert(due.order_now);
    ck_assert_ptr_nonnull(strstr(due.why, "placeholder"));
    /* Certificate and key read from the one file match. */
    char cmd[512], out[256];
    snprintf(cmd, sizeof(cmd),
             "a=$(openssl x509 -in %s -noout -pubkey | openssl sha256); "
             "b=$(openssl pkey -in %s -pubout | openssl sha256); test \"$a\" = \"$b\"",
             crt, crt);
    ck_assert_int_eq(test_run(cmd, out, sizeof(out)), 0);
    EVP_PKEY_free(k);
}
END_TEST

/* A certificate signed by a separate CA key, valid from `start_days_ago`
 * days ago for `days` days, for DNS names `san` ("DNS:a,DNS:b"). */
static void issued(const char *crt, int start_days_ago, int days, const char *san)
{
    EVP_PKEY *ca = acme_key_generate(ACME_KEY_EC_P256), *leaf = acme_key_generate(ACME_KEY_EC_P256);
    X509 *x = X509_new();
    X509_NAME *ca_name = X509_NAME_new(), *leaf_name = X509_NAME_new();
    X509_NAME_add_entry_by_txt(ca_name, "CN", MBSTRING_ASC, (const unsigned char *)"ca", -1, -1, 0);
    X509_NAME_add_entry_by_txt(leaf_name, "CN", MBSTRING_ASC, (const unsigned char *)"leaf", -1, -1,
                               0);
    X509_set_version(x, X509_VERSION_3);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 2);
    X509_set_issuer_name(x, ca_name);
    X509_set_subject_name(x, leaf_name);
    X509_gmtime_adj(X509_getm_notBefore(x), -86400L * start_days_ago);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400L * (days - start_days_ago));
    X509_set_pubkey(x, leaf);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, NULL, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, NID_subject_alt_name, san);
    ck_assert_ptr_nonnull(ext);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    ck_assert(X509_sign(x, ca, EVP_sha256()) > 0);
    FILE *f = fopen(crt, "w");
    ck_assert_ptr_nonnull(f);
    PEM_write_X509(f, x);
    fclose(f);
    X509_free(x);
    X509_NAME_free(ca_name);
    X509_NAME_free(leaf_name);
    EVP_PKEY_free(ca);
    EVP_PKEY_free(leaf);
}

START_TEST(store_due_two_thirds)
{
    char crt[128];
    path(crt, sizeof(crt), "issued.crt");
    const char *names[] = {"example.test", "www.example.test"};
    time_t now = time(NULL);
    struct acme_due due;
    /* 90 days, 10 in: renewal on day 60. */
    issued(crt, 10, 90, "DNS:example.test,DNS:www.example.test");
    acme_store_due(crt, names, 2, now, &due);
    ck_assert_msg(!due.order_now, "%s", due.why);
    long long at = (long long)(due.renew_at - now);
    ck_assert_msg(at > 49 * 86400LL && at < 51 * 86400LL, "%lld", at);
    ck_assert(due.not_after > now + 79 * 86400LL);
    /* A domain it does not name orders now. */
    const char *more[] = {"example.test", "other.test"};
    acme_store_due(crt, more, 2, now, &due);
    ck_assert(due.order_now);
    ck_assert_ptr_nonnull(strstr(due.why, "every domain"));
    /* 90 days, 70 in: past two thirds. */
    issued(crt, 70, 90, "DNS:example.test,DNS:www.example.test");
    acme_store_due(crt, names, 2, now, &due);
    ck_assert(due.order_now);
    ck_assert_ptr_nonnull(strstr(due.why, "two thirds"));
    /* Seen from later than its end. */
    issued(crt, 10, 90, "DNS:example.test,DNS:www.example.test");
    acme_store_due(crt, names, 2, now + 100 * 86400, &due);
    ck_assert(due.order_now);
    ck_assert_ptr_nonnull(strstr(due.why, "expired"));
}
END_TEST

START_TEST(store_lease)
{
    char p[128];
    path(p, sizeof(p), "site.lock");
    time_t now = 1000000;
    ck_assert_int_eq(acme_store_lease(p, "a", now, 60), 1);
    ck_assert_int_eq(mode_of(p), 0600);
    ck_assert_int_eq(acme_store_lease(p, "b", now + 30, 60), 0); /* a holds it */
    ck_assert_int_eq(acme_store_lease(p, "a", now + 30, 60), 1); /* renewed: to now+90 */
    ck_assert_int_eq(acme_store_lease(p, "b", now + 80, 60), 0);
    ck_assert_int_eq(acme_store_lease(p, "b", now + 91, 60), 1); /* run out: b's */
    ck_assert_int_eq(acme_store_lease(p, "a", now + 92, 60), 0);
    acme_store_release(p, "a"); /* not a's to give */
    ck_assert_int_eq(acme_store_lease(p, "a", now + 93, 60), 0);
    acme_store_release(p, "b");
    ck_assert_int_eq(acme_store_lease(p, "a", now + 94, 60), 1);
    /* Garbage in the file is no lease. */
    ck_assert_int_eq(acme_store_write(p, "\x01\x02 zz", 5), 0);
    ck_assert_int_eq(acme_store_lease(p, "b", now, 60), 1);
    ck_assert_int_eq(acme_store_lease(p, "has space", now, 60), -EINVAL);
}
END_TEST

/* ---------------------------------------------------------------- conf */

static int parse(const char *text, struct conf_config **out, char *error, size_t size)
{
    struct conf_error err;
    int rc = conf_parse("/etc/corral/test.conf", text, strlen(text), NULL, NULL, out, &err);
    snprintf(error, size, "%s", rc == 0 ? "" : err.text);
    return rc;
}

START_TEST(conf_directives)
{
    struct conf_config *c;
    char error[512];
    const char *ok = "acme_issuer le {\n"
                     "    uri https://acme.example/dir; contact a@example.test;\n"
                     "    contact mailto:b@example.test; state_path acme/le;\n"
                     "    ssl_trusted_certificate ca.pem; account_key rsa:4096;\n"
                     "    challenge http-01; accept_terms_of_service;\n"
                     "}\n"
                     "server { listen 127.0.0.1:8443 tls; server_name a.example b.example;\n"
                     "    acme_certificate le c.example key=rsa;\n"
                     "    tls_certificate $acme_certificate;\n"
                     "    tls_certificate_key $acme_certificate_key; }\n";
    ck_assert_msg(parse(ok, &c, error, sizeof(error)) == 0, "%s", error);
    ck_assert_uint_eq(c->acme_issuer_count, 1);
    const struct conf_acme_issuer *is = &c->acme_issuers[0];
    ck_assert_str_eq(is->uri, "https://acme.example/dir");
    ck_assert_str_eq(is->state_path, "/etc/corral/acme/le");
    ck_assert_str_eq(is->trusted_ca, "/etc/corral/ca.pem");
    ck_assert_uint_eq(is->contact_count, 2);
    ck_assert(is->accept_terms_of_service);
    ck_assert_int_eq(is->account_key, ACME_KEY_RSA_4096);
    ck_assert_ptr_null(is->eab_kid);
    const struct conf_acme_certificate *cert = &c->servers[0].acme;
    ck_assert_str_eq(cert->issuer, "le");
    ck_assert_uint_eq(cert->domain_count, 1);
    ck_assert_str_eq(cert->domains[0], "c.example");
    ck_assert_int_eq(cert->key, ACME_KEY_RSA_2048);
    /* Kept as written, for the daemon to replace. */
    ck_assert_str_eq(c->servers[0].tls.certificates[0].certificate, "$acme_certificate");
    ck_assert_str_eq(c->servers[0].tls.certificates[0].key, "$acme_certificate_key");
    conf_free(c);

    /* external_account_key, as nginx's: the key given inline or in a file */
    /* ca_certificate: the same as ssl_trusted_certificate */
    const char *ca = "acme_issuer c { uri https://acme.example/dir; state_path acme/c;\n"
                     "    ca_certificate ca2.pem; }\n";
    ck_assert_msg(parse(ca, &c, error, sizeof(error)) == 0, "%s", error);
    ck_assert_str_eq(c->acme_issuers[0].trusted_ca, "/etc/corral/ca2.pem");
    conf_free(c);

    const char *eab = "acme_issuer z { uri https://acme.example/dir; state_path acme/z;\n"
                      "    external_account_key kid-1 data:c2VjcmV0; }\n";
    ck_assert_msg(parse(eab, &c, error, sizeof(error)) == 0, "%s", error);
    ck_assert_str_eq(c->acme_issuers[0].eab_kid, "kid-1");
    ck_assert_str_eq(c->acme_issuers[0].eab_key, "c2VjcmV0");
    conf_free(c);
    char key_file[] = "/tmp/test_acme_eab.XXXXXX", text[256];
    int fd = mkstemp(key_file);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "  c2VjcmV0LWZpbGU\n", 18), 18);
    close(fd);
    snprintf(text, sizeof(text),
             "acme_issuer z { uri https://a/d; state_path /x; external_account_key k2 %s; }",
             key_file);
    ck_assert_msg(parse(text, &c, error, sizeof(error)) == 0, "%s", error);
    ck_assert_str_eq(c->acme_issuers[0].eab_kid, "k2");
    ck_assert_str_eq(c->acme_issuers[0].eab_key, "c2VjcmV0LWZpbGU");
    conf_free(c);
    unlink(key_file);
    ck_assert(parse(text, &c, error, sizeof(error)) != 0);
    ck_assert_msg(strstr(error, "No such file") != NULL, "%s", error);
    /* A key that is not base64url: refused by the client the daemon (and
     * -t) makes, before it touches state_path. */
    static const char *const domains[] = {"a.example"};
    struct acme_issuer_conf ic = {.name = "z",
                                  .uri = "https://a/d",
                                  .state_path = "/nonexistent/acme",
                                  .eab_kid = "k",
                                  .eab_key = "a+b="};
    struct acme_certificate_conf cc = {.domains = domains, .domain_count = 1};
    struct acme_client *client = NULL;
    char why[256] = "";
    ck_assert_int_eq(acme_client_new(&ic, &cc, &client, why, sizeof(why)), -EINVAL);
    ck_assert_str_eq(why, "external_account_key \"k\": the key is not base64url");

    const struct {
        const char *text, *expected;
    } bad[] = {
        {"acme_issuer le { uri https://a/d; state_path /x; external_account_key k; }",
         "takes a key ID and a key file"},
        {"acme_issuer le { uri https://a/d; state_path /x; external_account_key k data:; }",
         "external_account_key \"k\": no key"},
        {"acme_issuer le { state_path /x; }", "needs a \"uri\""},
        {"acme_issuer le { uri https://a/d; }", "needs a \"state_path\""},
        {"acme_issuer le { uri http://a/d; state_path /x; }", "https://"},
        {"acme_issuer le { uri https://a/d; state_path /x; challenge dns-01; }",
         "expected http-01 or tls-alpn-01"},
        {"acme_issuer le { uri https://a/d; state_path /x; account_key dsa; }", "account_key"},
        {"acme_issuer le { uri https://a/d; state_path /x; bogus 1; }", "unknown directive"},
        {"acme_issuer le { uri https://a/d; state_path /x; }\n"
         "acme_issuer le { uri https://a/d; state_path /y; }",
         "duplicate acme_issuer"},
        {"server { listen 127.0.0.1:1; acme_certificate le key=dsa; }", "key=ecdsa"},
        {"server { listen 127.0.0.1:1; acme_certificate le ~re; }", "not a domain"},
        {"acme_certificate le;", ""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(parse(bad[i].text, &c, error, sizeof(error)) != 0, "%zu accepted", i);
        ck_assert_msg(strstr(error, bad[i].expected) != NULL, "%zu: %s", i, error);
    }
}
END_TEST

/* The directory's address is looked up on a thread: the owner polls
 * until it is in; a lookup that fails says why; one let go before it is
 * over ends by itself (ASan sees no leak and no use after free). */
static bool resolve_wait(struct acme_resolve *r, int *rc, struct sockaddr_storage *addr,
                         socklen_t *len)
{
    for (int i = 0; i < 5000; i++) {
        if (acme_resolve_done(r, rc, addr, len))
            return true;
        usleep(1000);
    }
    return false;
}

START_TEST(resolve_off_the_loop)
{
    struct acme_resolve *r;
    struct sockaddr_storage addr;
    socklen_t len = 0;
    int rc = -1;
    ck_assert_int_eq(acme_resolve_start("127.0.0.1", "14000", &r), 0);
    ck_assert(resolve_wait(r, &rc, &addr, &len));
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(addr.ss_family, AF_INET);
    const struct sockaddr_in *in = (const struct sockaddr_in *)&addr;
    ck_assert_int_eq(ntohs(in->sin_port), 14000);
    ck_assert_uint_eq(ntohl(in->sin_addr.s_addr), INADDR_LOOPBACK);
    acme_resolve_release(r);
    /* A service name where a port number is wanted: refused. */
    ck_assert_int_eq(acme_resolve_start("127.0.0.1", "https", &r), 0);
    ck_assert(resolve_wait(r, &rc, &addr, &len));
    ck_assert_int_ne(rc, 0);
    acme_resolve_release(r);
    ck_assert_int_eq(acme_resolve_start("::1", "443", &r), 0);
    acme_resolve_release(r); /* before it is over */
    char long_host[300];
    memset(long_host, 'a', sizeof(long_host) - 1);
    long_host[sizeof(long_host) - 1] = '\0';
    ck_assert_int_eq(acme_resolve_start(long_host, "443", &r), -EINVAL);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("acme");
    TCase *jws = tcase_create("jws");
    tcase_add_test(jws, jws_es256);
    tcase_add_test(jws, jws_rs256);
    tcase_add_test(jws, jws_other_key_fails);
    tcase_add_test(jws, thumbprint_rfc7638);
    tcase_add_test(jws, base64url_vectors);
    tcase_add_test(jws, base64url_decode_vectors);
    tcase_add_test(jws, eab_verifies_with_the_mac_key);
    suite_add_tcase(s, jws);
    TCase *parse = tcase_create("parse");
    tcase_add_test(parse, parse_directory);
    tcase_add_test(parse, parse_order);
    tcase_add_test(parse, parse_authorization);
    tcase_add_test(parse, parse_problem_and_limits);
    tcase_add_test(parse, parse_renewal_info);
    tcase_add_test(parse, ari_cert_id_rfc9773);
    tcase_add_test(parse, ari_choose_in_the_window);
    suite_add_tcase(s, parse);
    TCase *store = tcase_create("store");
    tcase_add_checked_fixture(store, store_setup, store_teardown);
    tcase_add_test(store, store_key_mode_and_reload);
    tcase_add_test(store, store_write_replaces_whole);
    tcase_add_test(store, store_placeholder_is_due);
    tcase_add_test(store, store_due_two_thirds);
    tcase_add_test(store, store_lease);
    tcase_set_timeout(store, 30);
    suite_add_tcase(s, store);
    TCase *resolve = tcase_create("resolve");
    tcase_add_test(resolve, resolve_off_the_loop);
    suite_add_tcase(s, resolve);
    TCase *conf = tcase_create("conf");
    tcase_add_test(conf, conf_directives);
    suite_add_tcase(s, conf);
    return s;
}
