/*
 * auth_realm.c: an auth directive's realm, checked, and the challenge
 * line that names it (auth_realm.h).
 */
#include "proto/policy/auth_realm.h"

#include <stdio.h>
#include <string.h>

int auth_realm_check(const struct conf_arg *arg, struct conf_module_error *error)
{
    if (strlen(arg->text) > AUTH_REALM_MAX)
        return conf_module_fail(error, &arg->pos, "realm longer than %u bytes", AUTH_REALM_MAX);
    for (const char *p = arg->text; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return conf_module_fail(error, &arg->pos, "%s", "control byte in the realm");
    return 0;
}

size_t auth_realm_challenge(const char *scheme, const char *realm, const char *tail, char *out,
                            size_t cap)
{
    int head = snprintf(out, cap, "WWW-Authenticate: %s realm=\"", scheme);
    if (head < 0 || (size_t)head >= cap)
        return 0;
    size_t n = (size_t)head, tail_len = strlen(tail);
    /* Each byte leaves room for its escape, the closing quote, the tail
     * and the NUL. */
    for (const char *p = realm; *p != '\0'; p++) {
        if (n + 2 + 1 + tail_len + 1 > cap)
            return 0;
        if (*p == '"' || *p == '\\')
            out[n++] = '\\';
        out[n++] = *p;
    }
    if (n + 1 + tail_len + 1 > cap)
        return 0;
    out[n++] = '"';
    memcpy(out + n, tail, tail_len + 1);
    return n + tail_len;
}
