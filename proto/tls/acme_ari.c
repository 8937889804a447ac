/*
 * acme_ari.c: ACME Renewal Information (RFC 9773): the identifier a
 * certificate has in the CA's renewalInfo URLs, and the time chosen in
 * the window the CA suggests.  The request and its answer are the ACME
 * client's (acme_client.c) and parser's (acme_parse.c).
 */
#include "proto/tls/acme.h"

#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

char *acme_ari_cert_id(X509 *cert)
{
    /* Decoded here rather than from OpenSSL's cache of the extensions,
     * which a certificate being built may not have yet. */
    AUTHORITY_KEYID *akid = X509_get_ext_d2i(cert, NID_authority_key_identifier, NULL, NULL);
    const ASN1_OCTET_STRING *keyid = akid != NULL ? akid->keyid : NULL;
    const ASN1_INTEGER *serial = X509_get0_serialNumber(cert);
    if (keyid == NULL || ASN1_STRING_length(keyid) <= 0 || serial == NULL) {
        AUTHORITY_KEYID_free(akid);
        return NULL;
    }
    /* The serial's DER content octets (two's complement, a leading zero
     * when the high bit is set): i2d's, past the tag and the length,
     * which is one byte for the at most 20 octets of RFC 5280 §4.1.2.2. */
    unsigned char *der = NULL;
    int len = i2d_ASN1_INTEGER((ASN1_INTEGER *)serial, &der);
    char *result = NULL;
    if (len > 2 && len < 0x80 + 2 && der[1] == len - 2) {
        char *a = acme_base64url(ASN1_STRING_get0_data(keyid), (size_t)ASN1_STRING_length(keyid));
        char *b = acme_base64url(der + 2, (size_t)len - 2);
        size_t n = a != NULL && b != NULL ? strlen(a) + strlen(b) + 2 : 0;
        result = n > 0 ? malloc(n) : NULL;
        if (result != NULL) {
            memcpy(result, a, strlen(a));
            result[strlen(a)] = '.';
            memcpy(result + strlen(a) + 1, b, strlen(b) + 1);
        }
        free(a);
        free(b);
    }
    OPENSSL_free(der);
    AUTHORITY_KEYID_free(akid);
    return result;
}

time_t acme_ari_choose(time_t start, time_t end, time_t now, uint32_t random)
{
    if (end <= start)
        return now;
    /* Uniform over the window; a time past means now (RFC 9773 §4.2). */
    uint64_t span = (uint64_t)(end - start);
    time_t at = start + (time_t)(span * random >> 32);
    return at < now ? now : at;
}
