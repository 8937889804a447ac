/*
 * fuzz_acme.c: libFuzzer over what the ACME client reads from the ACME
 * server: the first byte picks the answer's kind (directory, account,
 * order, authorization, problem, a URL to split as the ACME client and
 * OCSP stapling do, a renewalInfo answer (ARI), or base64url text such as
 * an external account's key), the rest is its body.  A parse either fails with a reason and nothing
 * to free, or gives fields that hold what the parser promises.
 */
#include "proto/tls/acme_client.h"
#include "proto/url.h"

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
    switch (data[0] % 8) {
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
        char *url = malloc(len + 1);
        struct url u;
        if (url == NULL)
            break;
        memcpy(url, body, len);
        url[len] = '\0';
        if (url_split(url, &u) == 0) {
            /* What goes into a request line, a Host header and a
             * resolver is inside the URL and holds no byte that could
             * end a line or a field. */
            assert(u.host[0] != '\0' && strlen(u.host) < sizeof(u.host));
            assert(strcspn(u.host, "[]/@ \r\n") == strlen(u.host));
            assert(u.port[0] != '\0' && strspn(u.port, "0123456789") == strlen(u.port));
            long port = strtol(u.port, NULL, 10);
            assert(port >= 1 && port <= 65535);
            assert(u.authority > url && u.authority + u.authority_len <= url + len);
            assert(u.authority_len > 0 && memchr(u.authority, '/', u.authority_len) == NULL);
            assert(u.path_len > 0 && u.path[0] == '/');
            assert((u.path > url && u.path + u.path_len <= url + len) ||
                   (u.path_len == 1 && strcmp(u.path, "/") == 0));
            for (size_t i = 0; i < u.path_len; i++)
                assert((unsigned char)u.path[i] > 0x20 && (unsigned char)u.path[i] < 0x7f &&
                       u.path[i] != '#');
            for (size_t i = 0; i < u.authority_len; i++)
                assert((unsigned char)u.authority[i] > 0x20 &&
                       (unsigned char)u.authority[i] < 0x7f);
        }
        free(url);
        break;
    }
    case 6: {
        struct acme_renewal_info r;
        if (acme_parse_renewal_info(body, len, &r, why, sizeof(why)) == 0) {
            assert(r.end > r.start);
            acme_renewal_info_free(&r);
        } else {
            assert(r.explanation == NULL && why[0] != '\0');
        }
        break;
    }
    case 7: {
        char *text = malloc(len + 1);
        if (text == NULL)
            break;
        memcpy(text, body, len);
        text[len] = '\0';
        size_t n = 0;
        unsigned char *bytes = acme_base64url_decode(text, &n);
        if (bytes != NULL) {
            /* Encoded again, the bytes give the text back. */
            char *again = acme_base64url(bytes, n);
            assert(n > 0 && again != NULL && strcmp(again, text) == 0);
            free(again);
            free(bytes);
        }
        free(text);
        break;
    }
    }
    free(body);
    return 0;
}
