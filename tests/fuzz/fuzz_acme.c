/*
 * fuzz_acme.c: libFuzzer over what the ACME client reads from the ACME
 * server: the first byte picks the answer's kind (directory, account,
 * order, authorization, problem, or a URL to split), the rest is its
 * body.  A parse either fails with a reason and nothing to free, or gives
 * fields that hold what the parser promises.
 */
#include "proto/tls/acme_client.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool base64url(const char *s)
{
    return s[0] != '\0' && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789-_") == strlen(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* A copy of its own size, so that a read past the body is caught. */
    size_t len = size - 1;
    char *body = malloc(len > 0 ? len : 1);
    if (body == NULL)
        return 0;
    memcpy(body, data + 1, len);
    char why[256];
    switch (data[0] % 6) {
    case 0: {
        struct acme_directory d;
        if (acme_parse_directory(body, len, &d, why, sizeof(why)) == 0) {
            assert(d.new_nonce != NULL && d.new_account != NULL && d.new_order != NULL);
            acme_directory_free(&d);
        } else {
            assert(d.new_nonce == NULL && why[0] != '\0');
        }
        break;
    }
    case 1: {
        struct acme_account a;
        (void)acme_parse_account(body, len, &a, why, sizeof(why));
        break;
    }
    case 2: {
        struct acme_order o;
        if (acme_parse_order(body, len, &o, why, sizeof(why)) == 0) {
            assert(o.finalize != NULL && o.authorization_count > 0 &&
                   o.authorization_count <= ACME_AUTHZ_LIMIT);
            for (size_t i = 0; i < o.authorization_count; i++)
                assert(o.authorizations[i] != NULL);
            acme_order_free(&o);
        } else {
            assert(o.authorizations == NULL && o.finalize == NULL);
        }
        break;
    }
    case 3: {
        struct acme_authorization a;
        if (acme_parse_authorization(body, len, &a, why, sizeof(why)) == 0) {
            assert(a.identifier != NULL && a.challenge_count <= ACME_CHALLENGE_LIMIT);
            const struct acme_challenge *c = acme_authorization_challenge(&a, "http-01");
            /* A token goes into a path and a key authorization. */
            assert(c == NULL || base64url(c->token));
            acme_authorization_free(&a);
        } else {
            assert(a.identifier == NULL && a.challenge_count == 0);
        }
        break;
    }
    case 4: {
        struct acme_problem p;
        if (acme_parse_problem(body, len, &p, why, sizeof(why)) == 0)
            acme_problem_free(&p);
        else
            assert(p.type == NULL && p.detail == NULL);
        break;
    }
    case 5: {
        char *url = malloc(len + 1), host[256], port[8];
        const char *path;
        if (url == NULL)
            break;
        memcpy(url, body, len);
        url[len] = '\0';
        if (acme_url_split(url, host, sizeof(host), port, sizeof(port), &path) == 0)
            assert(host[0] != '\0' && port[0] != '\0' && path[0] == '/');
        free(url);
        break;
    }
    }
    free(body);
    return 0;
}
