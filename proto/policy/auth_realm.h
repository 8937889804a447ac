/*
 * auth_realm.h: the realm of auth_basic and auth_jwt: its check when the
 * config is read, and the WWW-Authenticate challenge that names it
 * (RFC 9110 11.6.1), the realm written as a quoted-string.
 */
#ifndef CORRAL_PROTO_AUTH_REALM_H
#define CORRAL_PROTO_AUTH_REALM_H

#include "conf/directive.h"

#include <stddef.h>

/* The longest realm a directive takes, in bytes. */
#define AUTH_REALM_MAX 256u

/* Checks the realm `arg` of an auth directive: at most AUTH_REALM_MAX
 * bytes, no control byte.  Returns 0, or -1 with why in `error`. */
int auth_realm_check(const struct conf_arg *arg, struct conf_module_error *error);

/* "WWW-Authenticate: SCHEME realm=\"REALM\"" then `tail` (e.g. "\r\n"),
 * the realm's '"' and '\\' escaped as a quoted-string's (RFC 9110
 * 5.6.4), into `out` (`cap` bytes, NUL-terminated).  Returns the length,
 * or 0 when it does not fit. */
size_t auth_realm_challenge(const char *scheme, const char *realm, const char *tail, char *out,
                            size_t cap);

#endif
