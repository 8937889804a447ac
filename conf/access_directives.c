/*
 * access_directives.c: the client's real address and access rules, as
 * nginx's realip and access modules spell them: set_real_ip_from,
 * real_ip_header, real_ip_recursive, allow and deny, at the top level, in
 * a server and in a location, each block inheriting what it does not set;
 * allow and deny in the admin block too, which inherits nothing.
 */
#include "registry.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* The block a directive of this module is written in. */
static struct access_conf *block_access(struct conf_state *state)
{
    if (state->in_admin)
        return &state->config->admin.access;
    if (state->location != NULL)
        return &state->location->access;
    if (state->server != NULL)
        return &state->server->access;
    return &state->config->access;
}

/* "192.0.2.0/24", "2001:db8::/32", an address alone, or (with `all_ok`)
 * "all".  Bits past the prefix are dropped, as nginx does. */
static int arg_net(struct conf_state *state, const struct conf_arg *arg, bool all_ok,
                   struct access_net *out)
{
    *out = (struct access_net){.family = AF_UNSPEC};
    if (all_ok && strcmp(arg->text, "all") == 0)
        return 0;
    char text[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(arg->text, '/');
    size_t host_len = slash != NULL ? (size_t)(slash - arg->text) : strlen(arg->text);
    if (host_len == 0 || host_len >= sizeof(text))
        goto invalid;
    memcpy(text, arg->text, host_len);
    text[host_len] = '\0';
    unsigned max_bits;
    if (inet_pton(AF_INET, text, out->addr) == 1) {
        out->family = AF_INET;
        max_bits = 32;
    } else if (inet_pton(AF_INET6, text, out->addr) == 1) {
        out->family = AF_INET6;
        max_bits = 128;
    } else {
        goto invalid;
    }
    unsigned bits = max_bits;
    if (slash != NULL) {
        if (conf__parse_uint(slash + 1, &bits) != 0 || bits > max_bits)
            return conf__error_at(state->error, &arg->pos,
                                  "invalid prefix length in \"%s\" (expected 0 to %u)", arg->text,
                                  max_bits);
    }
    out->bits = (uint8_t)bits;
    for (unsigned i = 0; i < 16; i++) {
        unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;
        out->addr[i] &= (uint8_t)(0xff00u >> keep);
    }
    return 0;
invalid:
    return conf__error_at(state->error, &arg->pos,
                          all_ok ? "invalid address \"%s\" (expected an IPv4 or IPv6 address, "
                                   "ADDRESS/BITS or all)"
                                 : "invalid address \"%s\" (expected an IPv4 or IPv6 address "
                                   "or ADDRESS/BITS)",
                          arg->text);
}

/* set_real_ip_from CIDR; */
static int apply_real_ip_from(struct conf_state *state, const struct conf_node *node,
                              const struct conf_directive *directive)
{
    (void)directive;
    struct access_conf *access = block_access(state);
    struct access_net net;
    if (arg_net(state, &node->args[0], false, &net) != 0)
        return -1;
    struct access_net *nets = conf__grow(state, &node->args[0].pos, access->real_ip_from,
                                         access->real_ip_from_count, sizeof(*nets));
    if (nets == NULL)
        return -1;
    access->real_ip_from = nets;
    nets[access->real_ip_from_count++] = net;
    return 0;
}

/* real_ip_header X-Real-IP | X-Forwarded-For | proxy_protocol | NAME; */
static int apply_real_ip_header(struct conf_state *state, const struct conf_node *node,
                                const struct conf_directive *directive)
{
    (void)directive;
    struct access_conf *access = block_access(state);
    const struct conf_arg *arg = &node->args[0];
    access->has_real_ip_header = true;
    if (strcmp(arg->text, "proxy_protocol") == 0) {
        access->real_ip_proxy_protocol = true;
        return 0;
    }
    for (const char *c = arg->text; *c != '\0'; c++)
        if (*c <= ' ' || *c == ':' || *c >= 0x7f)
            return conf__error_at(state->error, &arg->pos, "invalid header name \"%s\"", arg->text);
    if (arg->text[0] == '\0')
        return conf__error_at(state->error, &arg->pos, "invalid header name \"\"");
    access->real_ip_header = conf__strdup(state, &arg->pos, arg->text);
    return access->real_ip_header != NULL ? 0 : -1;
}

/* real_ip_recursive on|off; */
static int apply_real_ip_recursive(struct conf_state *state, const struct conf_node *node,
                                   const struct conf_directive *directive)
{
    (void)directive;
    struct access_conf *access = block_access(state);
    access->has_real_ip_recursive = true;
    return conf__arg_switch(state, &node->args[0], &access->real_ip_recursive);
}

/* allow ADDRESS|CIDR|all; and deny the same, in one list, in order. */
static int apply_rule(struct conf_state *state, const struct conf_node *node,
                      const struct conf_directive *directive)
{
    struct access_conf *access = block_access(state);
    struct access_rule rule = {.allow = strcmp(directive->name, "allow") == 0};
    if (arg_net(state, &node->args[0], true, &rule.net) != 0)
        return -1;
    struct access_rule *rules =
        conf__grow(state, &node->args[0].pos, access->rules, access->rule_count, sizeof(*rules));
    if (rules == NULL)
        return -1;
    access->rules = rules;
    rules[access->rule_count++] = rule;
    return 0;
}

#define ACCESS_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

const struct conf_directive conf__access_directives[] = {
    {.name = "set_real_ip_from",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .apply = apply_real_ip_from},
    {.name = "real_ip_header",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .apply = apply_real_ip_header},
    {.name = "real_ip_recursive",
     .contexts = ACCESS_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .apply = apply_real_ip_recursive},
    {.name = "allow",
     .contexts = ACCESS_CONTEXTS | CONF_ADMIN,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .apply = apply_rule},
    {.name = "deny",
     .contexts = ACCESS_CONTEXTS | CONF_ADMIN,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .apply = apply_rule},
    {.name = NULL},
};

/* ------------------------------------------------------------ inheritance */

/* A copy of `count` items of `size` bytes, or NULL (out of memory). */
static void *copy_array(const void *array, size_t count, size_t size)
{
    void *copy = malloc(count * size);
    if (copy != NULL)
        memcpy(copy, array, count * size);
    return copy;
}

/* Gives `child` what it does not set of `parent`'s, as nginx merges: the
 * trusted list and the rules as a whole, the other two one by one.  The
 * child gets copies, so that each block owns what it holds. */
static int inherit(struct conf_state *state, const struct conf_pos *pos, void *own,
                   const void *from)
{
    struct access_conf *child = own;
    const struct access_conf *parent = from;
    if (child->real_ip_from_count == 0 && parent->real_ip_from_count > 0) {
        child->real_ip_from = copy_array(parent->real_ip_from, parent->real_ip_from_count,
                                         sizeof(*parent->real_ip_from));
        if (child->real_ip_from == NULL)
            return conf__error_at(state->error, pos, "out of memory");
        child->real_ip_from_count = parent->real_ip_from_count;
    }
    if (!child->has_real_ip_header && parent->has_real_ip_header) {
        child->has_real_ip_header = true;
        child->real_ip_proxy_protocol = parent->real_ip_proxy_protocol;
        if (parent->real_ip_header != NULL) {
            child->real_ip_header = conf__strdup(state, pos, parent->real_ip_header);
            if (child->real_ip_header == NULL)
                return -1;
        }
    }
    if (!child->has_real_ip_recursive && parent->has_real_ip_recursive) {
        child->has_real_ip_recursive = true;
        child->real_ip_recursive = parent->real_ip_recursive;
    }
    if (child->rule_count == 0 && parent->rule_count > 0) {
        child->rules = copy_array(parent->rules, parent->rule_count, sizeof(*parent->rules));
        if (child->rules == NULL)
            return conf__error_at(state->error, pos, "out of memory");
        child->rule_count = parent->rule_count;
    }
    return 0;
}

int conf__access_finish(struct conf_state *state)
{
    static const struct conf_levels levels = {
        offsetof(struct conf_config, access),
        offsetof(struct conf_server, access),
        offsetof(struct conf_location, access),
        inherit,
    };
    return conf__levels_merge(state, &levels);
}

void conf__access_free(struct access_conf *access)
{
    free(access->real_ip_from);
    free(access->real_ip_header);
    free(access->rules);
}
