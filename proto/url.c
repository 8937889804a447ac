/*
 * url.c: splitting http:// and https:// URLs (url.h).
 */
#include "proto/url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Whether `len` bytes at `s` make a host name: letters, digits and
 * `extra` ('-', '.', and '_' as some internal names have). */
static bool url_name_ok(const char *s, size_t len, const char *extra)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (!alnum && strchr(extra, c) == NULL)
            return false;
    }
    return len > 0;
}

int url_split(const char *url, struct url *out)
{
    memset(out, 0, sizeof(*out));
    const char *rest;
    if (strncasecmp(url, "https://", 8) == 0) {
        out->https = true;
        rest = url + 8;
    } else if (strncasecmp(url, "http://", 7) == 0) {
        rest = url + 7;
    } else {
        return -EINVAL;
    }
    /* Everything goes into a request line or a header as it is. */
    for (const char *p = rest; *p != '\0'; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return -EINVAL;
    size_t auth_len = strcspn(rest, "/?#");
    const char *end = rest + auth_len, *port = NULL, *name = rest, *name_end;
    if (memchr(rest, '@', auth_len) != NULL)
        return -EINVAL; /* user information: never sent, so refused */
    if (*rest == '[') {
        name = rest + 1;
        name_end = memchr(rest, ']', auth_len);
        /* Hex digits, colons and the dots of an embedded IPv4 address */
        size_t len = name_end != NULL ? (size_t)(name_end - name) : 0;
        if (len == 0 || strspn(name, "0123456789abcdefABCDEF:.") < len ||
            memchr(name, ':', len) == NULL)
            return -EINVAL;
        if (name_end + 1 < end && name_end[1] != ':')
            return -EINVAL;
        port = name_end + 1 < end ? name_end + 2 : NULL;
    } else {
        name_end = memchr(rest, ':', auth_len);
        port = name_end != NULL ? name_end + 1 : NULL;
        if (name_end == NULL)
            name_end = end;
        if (!url_name_ok(name, (size_t)(name_end - name), "-._"))
            return -EINVAL;
    }
    size_t name_len = (size_t)(name_end - name);
    if (name_len >= sizeof(out->host))
        return -EINVAL;
    memcpy(out->host, name, name_len);
    out->host[name_len] = '\0';
    if (port != NULL) {
        size_t len = (size_t)(end - port);
        if (len == 0 || len >= sizeof(out->port) || strspn(port, "0123456789") < len)
            return -EINVAL;
        memcpy(out->port, port, len);
        out->port[len] = '\0';
        long value = strtol(out->port, NULL, 10);
        if (value < 1 || value > 65535)
            return -EINVAL;
    } else {
        snprintf(out->port, sizeof(out->port), "%s", out->https ? "443" : "80");
    }
    out->authority = rest;
    out->authority_len = auth_len;
    if (*end == '?')
        return -EINVAL; /* no path to put the query after */
    if (*end == '/') {
        out->path = end;
        out->path_len = strcspn(end, "#");
    } else {
        out->path = "/";
        out->path_len = 1;
    }
    return 0;
}
