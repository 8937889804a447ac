/*
 * value.c: the value syntax shared by directives: sizes, durations, plain
 * numbers, on|off switches, addresses and paths.  Each parser takes the
 * whole argument and rejects whatever it does not consume, so "10 m" or
 * "5mm" never half-parse.
 */
#include "registry.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

int conf__arg_uint(struct conf_state *state, const struct conf_arg *arg, const char *what,
                   unsigned min, unsigned max, unsigned *out)
{
    struct conf_module_error error;
    if (conf_arg_uint(arg, what, min, max, out, &error) == 0)
        return 0;
    return conf__error_at(state->error, error.at, "%s", error.message);
}

int conf__arg_size(struct conf_state *state, const struct conf_arg *arg, size_t *out)
{
    if (conf_parse_size(arg->text, out) == 0)
        return 0;
    if (errno == ERANGE)
        return conf__error_at(state->error, &arg->pos, "size \"%s\" is too large", arg->text);
    return conf__error_at(state->error, &arg->pos, "invalid size \"%s\"", arg->text);
}

uint64_t conf__physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return UINT64_MAX; /* unknown: no bound but the type's */
    return (uint64_t)pages * (uint64_t)page;
}

int conf__arg_duration(struct conf_state *state, const struct conf_arg *arg, uint32_t *out_ms)
{
    if (conf_parse_duration(arg->text, out_ms) == 0)
        return 0;
    if (errno == ERANGE)
        /* The limit is UINT32_MAX milliseconds, a little over 49 days. */
        return conf__error_at(state->error, &arg->pos,
                              "duration \"%s\" is too large (at most 49 days)", arg->text);
    return conf__error_at(state->error, &arg->pos, "invalid duration \"%s\"", arg->text);
}

int conf__arg_keyword(struct conf_state *state, const struct conf_arg *arg, const char *what,
                      const struct conf_keyword *keywords, size_t count, int *out)
{
    for (size_t i = 0; i < count; i++) {
        if (strcmp(arg->text, keywords[i].name) == 0) {
            *out = keywords[i].value;
            return 0;
        }
    }
    char expected[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < count && used < sizeof(expected); i++) {
        const char *separator = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        int n =
            snprintf(expected + used, sizeof(expected) - used, "%s%s", separator, keywords[i].name);
        used += n > 0 ? (size_t)n : 0;
    }
    return conf__error_at(state->error, &arg->pos, "unknown %s \"%s\" (expected %s)", what,
                          arg->text, expected);
}

int conf__arg_switch(struct conf_state *state, const struct conf_arg *arg, bool *out)
{
    if (strcmp(arg->text, "on") == 0)
        *out = true;
    else if (strcmp(arg->text, "off") == 0)
        *out = false;
    else
        return conf__error_at(state->error, &arg->pos, "invalid value \"%s\" (expected on or off)",
                              arg->text);
    return 0;
}

int conf__arg_address(struct conf_state *state, const struct conf_arg *arg, const char *kind)
{
    struct sockaddr_storage addr;
    socklen_t len;
    int err = corral_parse_address(arg->text, &addr, &len);
    if (err == 0)
        return 0;
    if (err == -ENOENT)
        return conf__error_at(state->error, &arg->pos, "%s \"%s\": host not found", kind,
                              arg->text);
    return conf__error_at(state->error, &arg->pos,
                          "invalid %s \"%s\" (expected HOST:PORT, [IPV6]:PORT, *:PORT, PORT or "
                          "unix:/PATH)",
                          kind, arg->text);
}

int conf__address_key(const char *text, struct conf_address_key *key)
{
    struct sockaddr_storage addr;
    socklen_t len;
    if (corral_parse_address(text, &addr, &len) != 0)
        return -1;
    unsigned char *p = key->bytes;
    *p++ = (unsigned char)addr.ss_family;
    /* The fields conf_same_address() compares, and nothing else: the
     * resolver does not promise to zero the padding. */
    switch (addr.ss_family) {
    case AF_INET: {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&addr;
        memcpy(p, &in->sin_port, sizeof(in->sin_port));
        p += sizeof(in->sin_port);
        memcpy(p, &in->sin_addr, sizeof(in->sin_addr));
        p += sizeof(in->sin_addr);
        break;
    }
    case AF_INET6: {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&addr;
        memcpy(p, &in6->sin6_port, sizeof(in6->sin6_port));
        p += sizeof(in6->sin6_port);
        memcpy(p, &in6->sin6_scope_id, sizeof(in6->sin6_scope_id));
        p += sizeof(in6->sin6_scope_id);
        memcpy(p, &in6->sin6_addr, sizeof(in6->sin6_addr));
        p += sizeof(in6->sin6_addr);
        break;
    }
    case AF_UNIX: {
        const char *path = ((const struct sockaddr_un *)&addr)->sun_path;
        size_t n = strnlen(path, sizeof(((const struct sockaddr_un *)&addr)->sun_path));
        memcpy(p, path, n);
        p += n;
        break;
    }
    default: return -1;
    }
    key->len = (size_t)(p - key->bytes);
    return 0;
}

bool conf_same_address(const char *a, const char *b)
{
    struct sockaddr_storage x, y;
    socklen_t x_len, y_len;
    if (corral_parse_address(a, &x, &x_len) != 0 || corral_parse_address(b, &y, &y_len) != 0)
        return strcmp(a, b) == 0;
    if (x.ss_family != y.ss_family)
        return false;
    /* Compared field by field: the resolver does not promise to zero the
     * padding the way corral_parse_address() zeroes its own results. */
    switch (x.ss_family) {
    case AF_INET: {
        const struct sockaddr_in *p = (const struct sockaddr_in *)&x;
        const struct sockaddr_in *q = (const struct sockaddr_in *)&y;
        return p->sin_port == q->sin_port && p->sin_addr.s_addr == q->sin_addr.s_addr;
    }
    case AF_INET6: {
        const struct sockaddr_in6 *p = (const struct sockaddr_in6 *)&x;
        const struct sockaddr_in6 *q = (const struct sockaddr_in6 *)&y;
        return p->sin6_port == q->sin6_port && p->sin6_scope_id == q->sin6_scope_id &&
               memcmp(&p->sin6_addr, &q->sin6_addr, sizeof(p->sin6_addr)) == 0;
    }
    case AF_UNIX:
        return strcmp(((const struct sockaddr_un *)&x)->sun_path,
                      ((const struct sockaddr_un *)&y)->sun_path) == 0;
    }
    return false;
}

int conf__arg_path(struct conf_state *state, const struct conf_arg *arg, char **out)
{
    if (arg->text[0] == '\0')
        return conf__error_at(state->error, &arg->pos, "empty path");
    *out = conf__resolve_path(arg->pos.file, arg->text);
    if (*out == NULL)
        return conf__error_at(state->error, &arg->pos, "out of memory");
    return 0;
}
