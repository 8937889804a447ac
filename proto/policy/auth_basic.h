/*
 * auth_basic.h: nginx's auth_basic and auth_basic_user_file (HTTP Basic
 * authentication, RFC 7617, against an htpasswd file), and corral's
 * auth_basic_fail_limit, which refuses a client whose failures go over a
 * limit_req_zone's rate.  Its handler runs in the access phase, after
 * allow/deny (satisfy.h), and sets $remote_user.
 */
#ifndef CORRAL_PROTO_AUTH_BASIC_H
#define CORRAL_PROTO_AUTH_BASIC_H

#include "conf/directive.h"
#include "proto/http/http.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct htpasswd;
struct auth_cache;

/* One level's settings (top level, server, location).  A level that
 * writes none of a directive takes its parent's value, which it then
 * does not own (`inherited_*`). */
struct auth_basic_conf {
    char *realm;               /* NULL: off (or unset) */
    struct conf_pos realm_pos; /* file NULL: the level does not write auth_basic */
    struct htpasswd *users;    /* auth_basic_user_file, loaded when the config is */
    char *fail_zone;           /* auth_basic_fail_limit zone=NAME; NULL: none */
    unsigned fail_burst, fail_status;
    struct conf_pos fail_pos;
    bool inherited_realm, inherited_users, inherited_fail;
};

/* How credentials fared. */
enum auth_basic_result {
    AUTH_BASIC_OK,
    AUTH_BASIC_MISSING, /* no Basic credentials: not counted as a failure */
    AUTH_BASIC_WRONG,   /* unknown user, wrong password or malformed */
};

/* The longest credentials (decoded "user:password") looked at. */
#define AUTH_BASIC_CREDENTIALS_MAX 2048

/* Checks an Authorization header's value against `users`: a known user's
 * password costs its hash's work, an unknown user's the same work against
 * the file's first hash (so that timing tells no user names); a hit in
 * `cache` (NULL: none) costs nothing, and a success is put there at
 * `now_ms`.  On success the user name is copied to `user`
 * (AUTH_BASIC_CREDENTIALS_MAX bytes) and its length to *user_len. */
enum auth_basic_result auth_basic_check(const struct htpasswd *users, struct http_str value,
                                        struct auth_cache *cache, uint64_t now_ms, char *user,
                                        size_t *user_len);

/* "WWW-Authenticate: Basic realm=\"REALM\"\r\n" for `realm`, its '"' and
 * '\\' escaped as a quoted-string's (RFC 9110 5.6.4), into `out` (`cap`
 * bytes).  Returns the length, or 0 when it does not fit. */
size_t auth_basic_challenge(const char *realm, char *out, size_t cap);

/* The module (module.h). */
struct http_module;
extern struct http_module auth_basic_module;

#endif
