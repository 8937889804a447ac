/*
 * fuzz_jwt.c: libFuzzer over jwt_parse() and jwt_verify(), what auth_jwt
 * does with a client's bearer token, against a set of every key type
 * (tests/proto/jwt/vectors.h).  Each input is a token.  A parse either
 * fails with a reason or gives a header and claims that are JSON objects
 * and a signing input inside the token.
 */
#include "proto/policy/jwt.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/jwt/vectors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct jwks *keys;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (keys == NULL) {
        char message[256];
        if (jwks_parse("jwks", jwt_jwks, strlen(jwt_jwks), &keys, message, sizeof(message)) != 0)
            abort();
    }
    /* A copy of its own size, so that a read past the token is caught. */
    char *text = malloc(size > 0 ? size : 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    struct jwt_token t;
    const char *why = NULL;
    if (jwt_parse(text, size, &t, &why) == 0) {
        assert(json_is_object(t.header) && json_is_object(t.claims));
        assert(t.signing_input == text && t.signing_len < size);
        assert(t.signature_len > 0);
        struct jwt_checks checks = {
            .now = 3500000000, .leeway = 60, .issuer = "i", .audience = "a"};
        if (jwt_verify(&t, keys, &checks, &why) != 0)
            assert(why != NULL);
        jwt_token_free(&t);
    } else {
        assert(why != NULL);
    }
    free(text);
    return 0;
}
