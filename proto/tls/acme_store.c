/*
 * acme_store.c: what an ACME issuer keeps in its state_path: keys and
 * certificates in files of mode 0600 replaced by rename (whole or not at
 * all), the self-signed placeholder served until a certificate is issued,
 * when a stored certificate is due for renewal, and the lease file that
 * lets one instance of several sharing state_path order at a time.
 */
#include "proto/tls/acme.h"

#include <corral.h>

#include <errno.h>
#include <fcntl.h>
#include <openssl/asn1.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* A lease file is one line, "owner expiry\n"; more is not ours. */
#define LEASE_MAX 512

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            return -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int acme_store_write(const char *path, const void *data, size_t len)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (tmp == NULL)
        return -ENOMEM;
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    /* mkstemp() creates it 0600: the key is never readable by others. */
    int fd = mkstemp(tmp);
    if (fd == -1) {
        int err = -errno;
        free(tmp);
        return err;
    }
    int err = write_all(fd, data, len);
    if (err == 0 && fsync(fd) == -1)
        err = -errno;
    if (close(fd) == -1 && err == 0)
        err = -errno;
    if (err == 0 && rename(tmp, path) == -1)
        err = -errno;
    if (err != 0)
        unlink(tmp);
    free(tmp);
    return err;
}

/* The PEM of `key`'s private key, in a BIO's memory (`*out`, `*len`). */
static int key_pem(EVP_PKEY *key, BIO *bio, const char **out, long *len)
{
    if (PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) != 1)
        return -ENOMEM;
    char *p;
    *len = BIO_get_mem_data(bio, &p);
    *out = p;
    return 0;
}

int acme_store_key(const char *path, enum acme_key_type type, EVP_PKEY **out, char *why,
                   size_t why_len)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        EVP_PKEY *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
        if (key == NULL) {
            snprintf(why, why_len, "\"%s\" holds no private key", path);
            return -EINVAL;
        }
        *out = key;
        return 0;
    }
    if (errno != ENOENT) {
        int err = -errno;
        snprintf(why, why_len, "\"%s\": %s", path, strerror(errno));
        return err;
    }
    EVP_PKEY *key = acme_key_generate(type);
    BIO *bio = BIO_new(BIO_s_mem());
    const char *pem;
    long len = 0;
    int err = key != NULL && bio != NULL ? key_pem(key, bio, &pem, &len) : -ENOMEM;
    if (err == 0)
        err = acme_store_write(path, pem, (size_t)len);
    BIO_free(bio);
    if (err != 0) {
        snprintf(why, why_len, "\"%s\": %s", path, strerror(-err));
        EVP_PKEY_free(key);
        return err;
    }
    *out = key;
    return 0;
}

int acme_store_placeholder(const char *path, const char *name, EVP_PKEY *key)
{
    X509 *x = X509_new();
    X509_NAME *subject = X509_NAME_new();
    BIO *bio = BIO_new(BIO_s_mem());
    unsigned char serial[16];
    int err = -ENOMEM;
    if (x == NULL || subject == NULL || bio == NULL)
        goto done;
    /* A random serial: a client that saw an earlier placeholder must not
     * take this one for it. */
    BIGNUM *bn = BN_new();
    if (bn == NULL ||
        BN_rand(bn, 8 * sizeof(serial) - 1, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
        BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) == NULL) {
        BN_free(bn);
        goto done;
    }
    BN_free(bn);
    const char *cn = name != NULL && *name != '\0' ? name : "corral acme placeholder";
    if (X509_set_version(x, X509_VERSION_3) != 1 ||
        X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                   0) != 1 ||
        X509_set_subject_name(x, subject) != 1 || X509_set_issuer_name(x, subject) != 1 ||
        X509_gmtime_adj(X509_getm_notBefore(x), 0) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(x), 24 * 60 * 60) == NULL ||
        X509_set_pubkey(x, key) != 1 || X509_sign(x, key, EVP_sha256()) <= 0)
        goto done;
    /* The key, then the certificate, in one file replaced whole: a
     * watcher never sees one without the other. */
    const char *pem;
    long len;
    if (key_pem(key, bio, &pem, &len) != 0 || PEM_write_bio_X509(bio, x) != 1)
        goto done;
    len = BIO_get_mem_data(bio, &pem);
    err = acme_store_write(path, pem, (size_t)len);
done:
    X509_NAME_free(subject);
    X509_free(x);
    BIO_free(bio);
    return err;
}

/* Seconds from `now` to `t` (negative in the past), or false. */
static bool asn1_seconds(const ASN1_TIME *t, time_t now, long long *out)
{
    int days, secs;
    ASN1_TIME *from = ASN1_TIME_set(NULL, now);
    bool ok = from != NULL && ASN1_TIME_diff(&days, &secs, from, t) == 1;
    ASN1_TIME_free(from);
    if (ok)
        *out = (long long)days * 86400 + secs;
    return ok;
}

void acme_store_due(const char *cert_path, const char *const *names, size_t count, time_t now,
                    struct acme_due *out)
{
    *out = (struct acme_due){.order_now = true};
    FILE *f = fopen(cert_path, "r");
    X509 *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f != NULL)
        fclose(f);
    if (x == NULL) {
        out->why = "no certificate is stored yet";
        return;
    }
    long long before, after;
    if (!asn1_seconds(X509_get0_notBefore(x), now, &before) ||
        !asn1_seconds(X509_get0_notAfter(x), now, &after)) {
        out->why = "the stored certificate's dates are unreadable";
        goto done;
    }
    out->not_after = (time_t)(now + after);
    /* The placeholder signs itself; an issued certificate never does. */
    if (X509_check_issued(x, x) == X509_V_OK) {
        out->placeholder = true;
        out->why = "the stored certificate is the self-signed placeholder";
        goto done;
    }
    for (size_t i = 0; i < count; i++)
        if (X509_check_host(x, names[i], 0, 0, NULL) != 1) {
            out->why = "the stored certificate does not name every domain";
            goto done;
        }
    if (after <= 0) {
        out->why = "the stored certificate has expired";
        goto done;
    }
    /* Two thirds of the lifetime, as Let's Encrypt advises (30 days
     * before the end of 90). */
    long long lifetime = after - before;
    time_t renew_at = (time_t)(now + before + lifetime * 2 / 3);
    if (renew_at <= now) {
        out->why = "two thirds of the stored certificate's lifetime have passed";
        goto done;
    }
    out->order_now = false;
    out->renew_at = renew_at;
done:
    X509_free(x);
}

/* The lease file `path`, opened and locked for a read and a write
 * (flock: microseconds, and never waited for), or -1 with errno
 * (EWOULDBLOCK: another instance is looking at it now). */
static int lease_open(const char *path, bool create)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
    if (fd == -1)
        return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) == -1) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* The lease in open file `fd`: its owner (in `owner`, `owner_len` bytes)
 * and its expiry; false when there is none or it is unreadable. */
static bool lease_read(int fd, char *owner, size_t owner_len, long long *expiry)
{
    char buf[LEASE_MAX + 1];
    ssize_t n;
    do
        n = pread(fd, buf, LEASE_MAX, 0);
    while (n == -1 && errno == EINTR);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    char *space = strchr(buf, ' ');
    if (space == NULL || (size_t)(space - buf) >= owner_len)
        return false;
    memcpy(owner, buf, (size_t)(space - buf));
    owner[space - buf] = '\0';
    char *end;
    errno = 0;
    *expiry = strtoll(space + 1, &end, 10);
    return errno == 0 && end != space + 1 && (*end == '\n' || *end == '\0');
}

int acme_store_lease(const char *path, const char *owner, time_t now, unsigned lease_s)
{
    if (strlen(owner) >= LEASE_MAX / 2 || strchr(owner, ' ') != NULL || strchr(owner, '\n') != NULL)
        return -EINVAL;
    int fd = lease_open(path, true);
    if (fd == -1)
        return errno == EWOULDBLOCK ? 0 : -errno;
    char held_by[LEASE_MAX];
    long long expiry;
    int rc = 1;
    if (lease_read(fd, held_by, sizeof(held_by), &expiry) && strcmp(held_by, owner) != 0 &&
        expiry > (long long)now) {
        rc = 0;
        goto done;
    }
    char line[LEASE_MAX];
    int n = snprintf(line, sizeof(line), "%s %lld\n", owner, (long long)now + lease_s);
    if (ftruncate(fd, 0) == -1)
        rc = -errno;
    else if (pwrite(fd, line, (size_t)n, 0) != n)
        rc = -EIO;
done:
    close(fd); /* and the flock with it */
    return rc;
}

void acme_store_release(const char *path, const char *owner)
{
    int fd = lease_open(path, false);
    if (fd == -1)
        return;
    char held_by[LEASE_MAX];
    long long expiry;
    if (lease_read(fd, held_by, sizeof(held_by), &expiry) && strcmp(held_by, owner) == 0 &&
        ftruncate(fd, 0) == -1)
        corral_log(CORRAL_LOG_WARN, "acme: \"%s\": ftruncate: %s", path, strerror(errno));
    close(fd);
}
