/*
 * redirect.c: the redirect module (redirect.h): three switches per level
 * and the Location line the modules that redirect write with them.  It
 * has no phase and no filter: a redirect's maker asks it, so that no
 * other response pays for it.
 */
#include "proto/policy/redirect.h"

#include "proto/http/http_conn.h"
#include "proto/http/module.h"
#include "proto/http/vars.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define LEVELS CONF_MAIN | CONF_SERVER | CONF_LOCATION

static const struct conf_directive redirect_directives[] = {
    {.name = "absolute_redirect",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct redirect_conf, absolute),
     .keep_pos = true,
     .pos_offset = offsetof(struct redirect_conf, absolute_pos)},
    {.name = "server_name_in_redirect",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct redirect_conf, server_name),
     .keep_pos = true,
     .pos_offset = offsetof(struct redirect_conf, server_name_pos)},
    {.name = "port_in_redirect",
     .contexts = LEVELS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_SWITCH,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct redirect_conf, port),
     .keep_pos = true,
     .pos_offset = offsetof(struct redirect_conf, port_pos)},
    {.name = NULL},
};

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct redirect_conf *c = conf;
    const struct redirect_conf *p = parent;
    if (c->absolute_pos.file == NULL)
        c->absolute = p != NULL ? p->absolute : true;
    if (c->server_name_pos.file == NULL)
        c->server_name = p != NULL ? p->server_name : false;
    if (c->port_pos.file == NULL)
        c->port = p != NULL ? p->port : true;
    return 0;
}

/* nginx's defaults build nothing: redirect_location() knows them. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    (void)b;
    const struct redirect_conf *c = conf;
    *out = c->absolute && !c->server_name && c->port ? NULL : conf;
    return 0;
}

struct http_module redirect_module = {
    .name = "redirect",
    .conf =
        {
            .name = "redirect",
            .directives = redirect_directives,
            .size = sizeof(struct redirect_conf),
            .merge = merge,
        },
    .build = build,
};

/* The address the connection came to, without its port, into `out`
 * (nginx: ngx_connection_local_sockaddr()), and its port; false when
 * unknown. */
static bool local_address(const struct exchange *ex, char *out, size_t size, unsigned *port)
{
    struct sockaddr_storage addr = {0};
    socklen_t len = sizeof(addr);
    if (ex->conn == NULL || !http_conn_local(ex->conn, &addr, &len))
        return false;
    if (addr.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&addr;
        *port = ntohs(in->sin_port);
        return inet_ntop(AF_INET, &in->sin_addr, out, (socklen_t)size) != NULL;
    }
    if (addr.ss_family == AF_INET6 && size > 2) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&addr;
        *port = ntohs(in6->sin6_port);
        out[0] = '[';
        if (inet_ntop(AF_INET6, &in6->sin6_addr, out + 1, (socklen_t)(size - 2)) == NULL)
            return false;
        size_t n = strlen(out);
        if (n + 2 > size)
            return false;
        memcpy(out + n, "]", 2);
        return true;
    }
    return false;
}

static void add_lowercase(struct vars_buf *line, struct http_str s)
{
    char chunk[64];
    for (size_t at = 0; at < s.len;) {
        size_t n = s.len - at < sizeof(chunk) ? s.len - at : sizeof(chunk);
        for (size_t i = 0; i < n; i++) {
            char c = s.data[at + i];
            chunk[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        }
        vars_buf_add(line, chunk, n);
        at += n;
    }
}

void redirect_location(struct exchange *ex, struct http_str host, const char *uri, size_t len,
                       struct vars_buf *line)
{
    vars_buf_add(line, "Location: ", 10);
    static const struct redirect_conf defaults = {.absolute = true, .port = true};
    const struct redirect_conf *c = http_module_built(ex, &redirect_module);
    if (c == NULL)
        c = &defaults;
    if (len > 0 && uri[0] == '/' && c->absolute) {
        bool tls = ex->conn != NULL && exchange_tls(ex);
        vars_buf_add(line, tls ? "https://" : "http://", tls ? 8 : 7);
        char local[INET6_ADDRSTRLEN + 2];
        unsigned port = 0;
        bool known = local_address(ex, local, sizeof(local), &port);
        if (c->server_name && ex->vhost != NULL && ex->vhost->name_count > 0 &&
            ex->vhost->names[0][0] != '~' && ex->vhost->names[0][0] != '\0')
            vars_buf_add(line, ex->vhost->names[0], strlen(ex->vhost->names[0]));
        else if (host.len > 0)
            add_lowercase(line, host); /* nginx's $host is lowercase too */
        else if (known)
            vars_buf_add(line, local, strlen(local));
        if (c->port && known && port != (tls ? 443u : 80u)) {
            char digits[8];
            int n = snprintf(digits, sizeof(digits), ":%u", port);
            vars_buf_add(line, digits, (size_t)n);
        }
    }
    vars_buf_add(line, uri, len);
    vars_buf_add(line, "\r\n", 3); /* with its NUL */
}
