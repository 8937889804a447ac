/*
 * htpasswd.h: the user files of auth_basic (Apache's htpasswd format,
 * `user:hash` lines): loaded whole at config time, and the check of a
 * password against an entry's hash, in the same time whether it is right
 * or wrong.
 */
#ifndef CORRAL_PROTO_HTPASSWD_H
#define CORRAL_PROTO_HTPASSWD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The hash kinds a file may hold.  Plain text, DES crypt and {SHA} are
 * refused at load: they are too cheap to guess. */
enum htpasswd_kind {
    HTPASSWD_BCRYPT, /* $2a$, $2b$, $2y$ (libxcrypt) */
    HTPASSWD_SHA512, /* $6$ */
    HTPASSWD_SHA256, /* $5$ */
    HTPASSWD_MD5,    /* $1$, MD5-crypt (libxcrypt) */
    HTPASSWD_APR1,   /* $apr1$, Apache's MD5-crypt (htpasswd_apr1()) */
};

struct htpasswd_entry {
    const char *user, *hash; /* NUL-terminated, in the file's block */
    size_t user_len;
    enum htpasswd_kind kind;
};

/* A loaded file: its entries sorted by user (the first line of a user
 * named twice wins, as in nginx), and the number of this load, unique in
 * the process, so that what a cache keeps for one load is never taken for
 * another's (auth_cache.h). */
struct htpasswd {
    struct htpasswd_entry *entries;
    size_t count;
    uint64_t generation;
    char *_block; /* the file's bytes, which the entries point into */
};

/* The most a file may hold. */
#define HTPASSWD_FILE_MAX (16u * 1024 * 1024)

/* Reads the file at `path`: `user:hash` lines (a third ':' field and
 * what follows it are ignored, as Apache writes none), blank lines and
 * lines starting with '#' skipped, CRLF endings allowed.  Returns 0 with
 * *out (htpasswd_free() it), or -1 with why in `message` (`len` bytes),
 * naming the file and, for a bad line, its number: a hash of no kind
 * above, an empty user, a user with a control byte, no entry at all. */
int htpasswd_load(const char *path, struct htpasswd **out, char *message, size_t len);

/* The same from `data` (`size` bytes, copied), `name` standing for the
 * file in messages: for tests and the fuzzer. */
int htpasswd_parse(const char *name, const char *data, size_t size, struct htpasswd **out,
                   char *message, size_t len);

void htpasswd_free(struct htpasswd *h);

/* The entry of `user` (`len` bytes), or NULL. */
const struct htpasswd_entry *htpasswd_find(const struct htpasswd *h, const char *user, size_t len);

/* Whether `password` (`len` bytes) hashes to `hash` of `kind`, compared
 * in constant time.  A password with a NUL byte never matches, but costs
 * the same.  Slow by design (bcrypt cost 10: tens of milliseconds); any
 * thread (crypt_rn() with its own struct crypt_data per call). */
bool htpasswd_verify(const char *hash, enum htpasswd_kind kind, const char *password, size_t len);

/* Apache's apr1 MD5-crypt of `password` with the salt of `setting`
 * ("$apr1$SALT[$...]", up to 8 salt characters) into `out`:
 * "$apr1$SALT$" and 22 characters.  Returns 0, or -1 when `setting` is not
 * an apr1 one or OpenSSL fails. */
#define HTPASSWD_APR1_MAX 40
int htpasswd_apr1(const char *password, size_t len, const char *setting,
                  char out[HTPASSWD_APR1_MAX]);

#endif
