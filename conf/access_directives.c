/*
 * access_directives.c: allow and deny in the admin block, which has no
 * levels and inherits nothing.  Everywhere else they, set_real_ip_from,
 * real_ip_header and real_ip_recursive are the access module's
 * (proto/policy/access.c), whose address parser this shares.
 */
#include "registry.h"

#include <string.h>

/* allow ADDRESS|CIDR|all; and deny the same, in one list, in order. */
static int apply_rule(struct conf_state *state, const struct conf_node *node,
                      const struct conf_directive *directive)
{
    struct access_conf *access = &state->config->admin.access;
    const struct conf_arg *arg = &node->args[0];
    struct access_net net;
    char message[256];
    if (access_net_parse(arg->text, true, &net, message, sizeof(message)) != 0)
        return conf__error_at(state->error, &arg->pos, "%s", message);
    if (access_rule_add(access, strcmp(directive->name, "allow") == 0, &net) != 0)
        return conf__error_at(state->error, &arg->pos, "out of memory");
    return 0;
}

const struct conf_directive conf__access_directives[] = {
    {.name = "allow",
     .contexts = CONF_ADMIN,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .apply = apply_rule},
    {.name = "deny",
     .contexts = CONF_ADMIN,
     .min_args = 1,
     .max_args = 1,
     .repeat = true,
     .apply = apply_rule},
    {.name = NULL},
};
