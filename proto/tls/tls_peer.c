/*
 * tls_peer.c: the client certificate's facts (tls_peer.h), read from the
 * connection's SSL with OpenSSL's printers.
 */
#include "proto/tls/tls_peer.h"

#include "proto/tls/tls_internal.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What `bio` holds, as a string. */
static char *bio_text(BIO *bio)
{
    char *data;
    long len = BIO_get_mem_data(bio, &data);
    char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (text != NULL) {
        memcpy(text, data, (size_t)len);
        text[len] = '\0';
    }
    return text;
}

static char *hex(const unsigned char *p, size_t n)
{
    char *text = malloc(2 * n + 1);
    for (size_t i = 0; text != NULL && i < n; i++)
        snprintf(text + 2 * i, 3, "%02x", p[i]);
    return text;
}

/* RFC 3986's unreserved bytes stay; every other is %XX, as nginx escapes
 * a URI component. */
static char *url_escaped(const char *s)
{
    size_t n = strlen(s);
    char *text = malloc(3 * n + 1), *o = text;
    for (size_t i = 0; text != NULL && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~')
            *o++ = (char)c;
        else
            o += snprintf(o, 4, "%%%02X", c);
    }
    if (text != NULL)
        *o = '\0';
    return text;
}

static char *cert_fact(X509 *cert, enum tls_peer_fact fact)
{
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL)
        return NULL;
    char *text = NULL;
    switch (fact) {
    case TLS_PEER_SUBJECT:
    case TLS_PEER_ISSUER: {
        X509_NAME *name =
            fact == TLS_PEER_SUBJECT ? X509_get_subject_name(cert) : X509_get_issuer_name(cert);
        if (X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253) >= 0)
            text = bio_text(bio);
        break;
    }
    case TLS_PEER_SERIAL: {
        BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL);
        char *h = bn != NULL ? BN_bn2hex(bn) : NULL;
        text = h != NULL ? strdup(h) : NULL;
        OPENSSL_free(h);
        BN_free(bn);
        break;
    }
    case TLS_PEER_FINGERPRINT: {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        if (X509_digest(cert, EVP_sha1(), md, &len) == 1)
            text = hex(md, len);
        break;
    }
    case TLS_PEER_ESCAPED_CERT:
        if (PEM_write_bio_X509(bio, cert) == 1) {
            char *pem = bio_text(bio);
            text = pem != NULL ? url_escaped(pem) : NULL;
            free(pem);
        }
        break;
    case TLS_PEER_NOT_BEFORE:
    case TLS_PEER_NOT_AFTER:
        if (ASN1_TIME_print(bio, fact == TLS_PEER_NOT_BEFORE ? X509_get0_notBefore(cert)
                                                             : X509_get0_notAfter(cert)) == 1)
            text = bio_text(bio);
        break;
    case TLS_PEER_DAYS_LEFT: {
        int days = 0, secs = 0;
        if (ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(cert)) == 1) {
            text = malloc(16);
            if (text != NULL)
                snprintf(text, 16, "%d", days > 0 ? days : 0);
        }
        break;
    }
    default: break;
    }
    BIO_free(bio);
    return text;
}

char *tls_peer_fact(const corral_conn *conn, enum tls_peer_fact fact)
{
    const struct tls_conn *tc = corral_conn_transport_state(conn);
    if (tc == NULL || !tc->established || tc->client != NULL)
        return NULL;
    X509 *cert = SSL_get0_peer_certificate(tc->ssl);
    if (fact == TLS_PEER_VERIFY) {
        if (cert == NULL)
            return strdup("NONE");
        long result = SSL_get_verify_result(tc->ssl);
        if (result == X509_V_OK)
            return strdup("SUCCESS");
        const char *why = X509_verify_cert_error_string(result);
        size_t len = strlen("FAILED:") + strlen(why) + 1;
        char *text = malloc(len);
        if (text != NULL)
            snprintf(text, len, "FAILED:%s", why);
        return text;
    }
    return cert != NULL ? cert_fact(cert, fact) : NULL;
}
