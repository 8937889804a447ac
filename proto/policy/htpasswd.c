/*
 * htpasswd.c: auth_basic's user files: their lines and the hash kinds
 * they may hold, and the check of a password: libxcrypt's crypt_rn() for
 * bcrypt, SHA-crypt and MD5-crypt, and Apache's apr1 variant of MD5-crypt
 * here, over OpenSSL's MD5, which libxcrypt lacks.
 */
#include "proto/policy/htpasswd.h"

#include "proto/policy/secret_file.h"

#include <crypt.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t generations;

/* The crypt alphabet ("./0-9A-Za-z"), also apr1's base-64 digits. */
static const char crypt64[] = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

static bool is_crypt64(char c)
{
    return c != '\0' && strchr(crypt64, c) != NULL;
}

/* Whether `n` characters at `p` are all of the crypt alphabet, and then
 * the string ends. */
static bool tail_is(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_crypt64(p[i]))
            return false;
    return p[n] == '\0';
}

/* "SALT$HASH" with a salt of up to `salt_max` characters and a hash of
 * `hash_len`. */
static bool salt_then_hash(const char *p, size_t salt_max, size_t hash_len)
{
    size_t salt = 0;
    while (salt <= salt_max && is_crypt64(p[salt]))
        salt++;
    return salt <= salt_max && p[salt] == '$' && tail_is(p + salt + 1, hash_len);
}

/* The kind of `hash`, or -1 with why in `why`: as htpasswd, openssl passwd
 * and mkpasswd write them, so that a typo fails at load, not at login. */
static int hash_kind(const char *hash, const char **why)
{
    size_t len = strlen(hash);
    if (strncmp(hash, "$2", 2) == 0) {
        bool ok = len == 60 && (hash[2] == 'a' || hash[2] == 'b' || hash[2] == 'y') &&
                  hash[3] == '$' && hash[4] >= '0' && hash[4] <= '3' && hash[5] >= '0' &&
                  hash[5] <= '9' && hash[6] == '$' && tail_is(hash + 7, 53);
        *why = "malformed bcrypt hash";
        return ok ? HTPASSWD_BCRYPT : -1;
    }
    if (strncmp(hash, "$5$", 3) == 0 || strncmp(hash, "$6$", 3) == 0) {
        const char *p = hash + 3;
        if (strncmp(p, "rounds=", 7) == 0) {
            p += 7;
            if (*p < '1' || *p > '9')
                p = hash; /* fails below */
            while (*p >= '0' && *p <= '9')
                p++;
            p = *p == '$' ? p + 1 : hash;
        }
        bool sha512 = hash[1] == '6';
        *why = sha512 ? "malformed SHA-512-crypt hash" : "malformed SHA-256-crypt hash";
        if (p == hash || !salt_then_hash(p, 16, sha512 ? 86 : 43))
            return -1;
        return sha512 ? HTPASSWD_SHA512 : HTPASSWD_SHA256;
    }
    if (strncmp(hash, "$1$", 3) == 0) {
        *why = "malformed MD5-crypt hash";
        return salt_then_hash(hash + 3, 8, 22) ? HTPASSWD_MD5 : -1;
    }
    if (strncmp(hash, "$apr1$", 6) == 0) {
        *why = "malformed apr1 hash";
        return salt_then_hash(hash + 6, 8, 22) ? HTPASSWD_APR1 : -1;
    }
    if (strncmp(hash, "{SHA}", 5) == 0)
        *why = "{SHA} (unsalted SHA-1) hashes are refused: use bcrypt (htpasswd -B)";
    else if (len == 13 && tail_is(hash, 13))
        *why = "DES-crypt hashes are refused: use bcrypt (htpasswd -B)";
    else
        *why = "plain-text or unknown password hashes are refused: use bcrypt (htpasswd -B)";
    return -1;
}

static int by_user(const void *a, const void *b)
{
    const struct htpasswd_entry *x = a, *y = b;
    size_t n = x->user_len < y->user_len ? x->user_len : y->user_len;
    int c = memcmp(x->user, y->user, n);
    if (c != 0)
        return c;
    if (x->user_len != y->user_len)
        return x->user_len < y->user_len ? -1 : 1;
    /* The same user: the earlier line first (the block keeps their order). */
    return x->user < y->user ? -1 : x->user > y->user;
}

int htpasswd_parse(const char *name, const char *data, size_t size, struct htpasswd **out,
                   char *message, size_t len)
{
    *out = NULL;
    struct htpasswd *h = calloc(1, sizeof(*h));
    char *block = malloc(size + 1);
    size_t cap = 0;
    if (h == NULL || block == NULL) {
        snprintf(message, len, "%s: out of memory", name);
        goto fail;
    }
    memcpy(block, data, size);
    block[size] = '\0';
    h->_block = block;
    unsigned line_no = 0;
    for (char *line = block; line < block + size;) {
        char *end = memchr(line, '\n', (size_t)(block + size - line));
        char *next = end != NULL ? end + 1 : block + size;
        if (end == NULL)
            end = block + size;
        line_no++;
        /* By length from the line's start: block[size] is the one byte
         * past the data, its terminator. */
        size_t line_len = (size_t)(end - line);
        if (line_len > 0 && line[line_len - 1] == '\r')
            line_len--;
        line[line_len] = '\0';
        end = line + line_len;
        char *p = line;
        line = next;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        if (strlen(p) != (size_t)(end - p)) {
            snprintf(message, len, "%s:%u: NUL byte in the line", name, line_no);
            goto fail;
        }
        char *colon = strchr(p, ':');
        if (colon == NULL || colon == p) {
            snprintf(message, len, "%s:%u: expected \"user:hash\"", name, line_no);
            goto fail;
        }
        for (const char *c = p; c < colon; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                snprintf(message, len, "%s:%u: control byte in the user name", name, line_no);
                goto fail;
            }
        *colon = '\0';
        char *hash = colon + 1;
        char *more = strchr(hash, ':');
        if (more != NULL)
            *more = '\0';
        const char *why = NULL;
        int kind = hash_kind(hash, &why);
        if (kind < 0) {
            snprintf(message, len, "%s:%u: user \"%s\": %s", name, line_no, p, why);
            goto fail;
        }
        if (h->count == cap) {
            cap = cap > 0 ? cap * 2 : 16;
            struct htpasswd_entry *grown = realloc(h->entries, cap * sizeof(*grown));
            if (grown == NULL) {
                snprintf(message, len, "%s: out of memory", name);
                goto fail;
            }
            h->entries = grown;
        }
        h->entries[h->count++] = (struct htpasswd_entry){
            .user = p, .user_len = (size_t)(colon - p), .hash = hash, .kind = kind};
    }
    if (h->count == 0) {
        snprintf(message, len, "%s: no user in the file", name);
        goto fail;
    }
    qsort(h->entries, h->count, sizeof(*h->entries), by_user);
    h->generation = atomic_fetch_add(&generations, 1) + 1;
    *out = h;
    return 0;
fail:
    htpasswd_free(h);
    if (h == NULL)
        free(block);
    return -1;
}

int htpasswd_load(const char *path, struct htpasswd **out, char *message, size_t len)
{
    *out = NULL;
    size_t size;
    char *data = secret_file_read(path, HTPASSWD_FILE_MAX, &size, message, len);
    int rc = data != NULL ? htpasswd_parse(path, data, size, out, message, len) : -1;
    secret_file_free(data, size);
    return rc;
}

void htpasswd_free(struct htpasswd *h)
{
    if (h == NULL)
        return;
    free(h->entries);
    free(h->_block);
    free(h);
}

const struct htpasswd_entry *htpasswd_find(const struct htpasswd *h, const char *user, size_t len)
{
    size_t lo = 0, hi = h->count;
    while (lo < hi) { /* the first entry not below `user` */
        size_t mid = lo + (hi - lo) / 2;
        const struct htpasswd_entry *e = &h->entries[mid];
        size_t n = e->user_len < len ? e->user_len : len;
        int c = memcmp(e->user, user, n);
        if (c < 0 || (c == 0 && e->user_len < len))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < h->count && h->entries[lo].user_len == len &&
        memcmp(h->entries[lo].user, user, len) == 0)
        return &h->entries[lo];
    return NULL;
}

/* ------------------------------------------------------------------ apr1 */

static int md5_add(EVP_MD_CTX *ctx, const void *data, size_t len)
{
    return EVP_DigestUpdate(ctx, data, len) == 1 ? 0 : -1;
}

/* Appends `n` base-64 digits of `v`, least significant first. */
static char *to64(char *p, unsigned long v, int n)
{
    while (n-- > 0) {
        *p++ = crypt64[v & 0x3f];
        v >>= 6;
    }
    return p;
}

/* Poul-Henning Kamp's MD5-crypt with Apache's magic "$apr1$": the digest
 * of the password, magic and salt, stirred with a digest of password,
 * salt and password, then 1000 rounds that mix the three in turn. */
int htpasswd_apr1(const char *password, size_t len, const char *setting,
                  char out[HTPASSWD_APR1_MAX])
{
    static const char magic[] = "$apr1$";
    const size_t magic_len = sizeof(magic) - 1;
    if (strncmp(setting, magic, magic_len) != 0)
        return -1;
    const char *salt = setting + magic_len;
    size_t salt_len = 0;
    while (salt_len < 8 && salt[salt_len] != '\0' && salt[salt_len] != '$')
        salt_len++;
    unsigned char alt[16], final[16];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    const EVP_MD *md5 = EVP_md5();
    int rc = -1;
    if (ctx == NULL || md5 == NULL)
        goto done;
    /* alt = MD5(password salt password) */
    if (EVP_DigestInit_ex(ctx, md5, NULL) != 1 || md5_add(ctx, password, len) != 0 ||
        md5_add(ctx, salt, salt_len) != 0 || md5_add(ctx, password, len) != 0 ||
        EVP_DigestFinal_ex(ctx, alt, NULL) != 1)
        goto done;
    if (EVP_DigestInit_ex(ctx, md5, NULL) != 1 || md5_add(ctx, password, len) != 0 ||
        md5_add(ctx, magic, magic_len) != 0 || md5_add(ctx, salt, salt_len) != 0)
        goto done;
    for (size_t n = len; n > 0; n -= n > 16 ? 16 : n)
        if (md5_add(ctx, alt, n > 16 ? 16 : n) != 0)
            goto done;
    /* For each bit of the length: a NUL byte when set, else the
     * password's first byte (the published algorithm's quirk). */
    for (size_t n = len; n > 0; n >>= 1)
        if (md5_add(ctx, (n & 1) ? "" : password, 1) != 0)
            goto done;
    if (EVP_DigestFinal_ex(ctx, final, NULL) != 1)
        goto done;
    for (int i = 0; i < 1000; i++) {
        bool odd = i & 1;
        if (EVP_DigestInit_ex(ctx, md5, NULL) != 1 ||
            (odd ? md5_add(ctx, password, len) : md5_add(ctx, final, 16)) != 0 ||
            (i % 3 != 0 && md5_add(ctx, salt, salt_len) != 0) ||
            (i % 7 != 0 && md5_add(ctx, password, len) != 0) ||
            (odd ? md5_add(ctx, final, 16) : md5_add(ctx, password, len)) != 0 ||
            EVP_DigestFinal_ex(ctx, final, NULL) != 1)
            goto done;
    }
    char *p = out;
    memcpy(p, magic, magic_len);
    p += magic_len;
    memcpy(p, salt, salt_len);
    p += salt_len;
    *p++ = '$';
    static const int groups[5][3] = {{0, 6, 12}, {1, 7, 13}, {2, 8, 14}, {3, 9, 15}, {4, 10, 5}};
    for (int g = 0; g < 5; g++)
        p = to64(p,
                 (unsigned long) final[groups[g][0]] << 16 |
                     (unsigned long) final[groups[g][1]] << 8 | final[groups[g][2]],
                 4);
    p = to64(p, final[11], 2);
    *p = '\0';
    rc = 0;
done:
    OPENSSL_cleanse(final, sizeof(final));
    OPENSSL_cleanse(alt, sizeof(alt));
    EVP_MD_CTX_free(ctx);
    return rc;
}

/* ---------------------------------------------------------------- verify */

/* The longest password checked: bcrypt reads 72 bytes, the others all;
 * a longer one is refused after the same work. */
#define PASSWORD_MAX 1024

bool htpasswd_verify(const char *hash, enum htpasswd_kind kind, const char *password, size_t len)
{
    char pw[PASSWORD_MAX + 1];
    bool usable = len <= PASSWORD_MAX && memchr(password, '\0', len) == NULL;
    size_t n = len <= PASSWORD_MAX ? len : PASSWORD_MAX;
    memcpy(pw, password, n);
    pw[n] = '\0';
    size_t hash_len = strlen(hash);
    bool match = false;
    if (kind == HTPASSWD_APR1) {
        char out[HTPASSWD_APR1_MAX];
        if (htpasswd_apr1(pw, n, hash, out) == 0)
            match = strlen(out) == hash_len && CRYPTO_memcmp(out, hash, hash_len) == 0;
        OPENSSL_cleanse(out, sizeof(out));
    } else {
        /* Large (tens of KB): on the heap, not a worker's stack. */
        struct crypt_data *data = calloc(1, sizeof(*data));
        const char *out = data != NULL ? crypt_rn(pw, hash, data, (int)sizeof(*data)) : NULL;
        if (out != NULL)
            match = strlen(out) == hash_len && CRYPTO_memcmp(out, hash, hash_len) == 0;
        if (data != NULL)
            OPENSSL_cleanse(data, sizeof(*data));
        free(data);
    }
    OPENSSL_cleanse(pw, n);
    return match && usable;
}
