/*
 * acme_directives.c: automatic certificates, in the shape of nginx's
 * ngx_http_acme_module: the acme_issuer block at top level and
 * acme_certificate in a server.  The issuer a server names is looked up
 * by the daemon, which may find it written after the server.
 */
#include "registry.h"

#include "proto/tls/acme.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void conf__acme_certificate_free(struct conf_acme_certificate *acme)
{
    free(acme->issuer);
    for (size_t i = 0; i < acme->domain_count; i++)
        free(acme->domains[i]);
    free(acme->domains);
    *acme = (struct conf_acme_certificate){0};
}

void conf__acme_free(struct conf_config *config)
{
    for (size_t i = 0; i < config->acme_issuer_count; i++) {
        struct conf_acme_issuer *is = &config->acme_issuers[i];
        free(is->name);
        free(is->uri);
        free(is->state_path);
        free(is->trusted_ca);
        free(is->eab_kid);
        free(is->eab_key);
        for (size_t j = 0; j < is->contact_count; j++)
            free(is->contacts[j]);
        free(is->contacts);
    }
    free(config->acme_issuers);
    config->acme_issuers = NULL;
    config->acme_issuer_count = 0;
}

/* account_key and key=: nginx's "ecdsa[:256]" and "rsa[:2048|4096]". */
static int key_type(const char *text, int *out)
{
    if (strcmp(text, "ecdsa") == 0 || strcmp(text, "ecdsa:256") == 0)
        *out = ACME_KEY_EC_P256;
    else if (strcmp(text, "rsa") == 0 || strcmp(text, "rsa:2048") == 0)
        *out = ACME_KEY_RSA_2048;
    else if (strcmp(text, "rsa:4096") == 0)
        *out = ACME_KEY_RSA_4096;
    else
        return -1;
    return 0;
}

static int one_arg(struct conf_state *state, const struct conf_node *line)
{
    if (line->block || line->arg_count != 1)
        return conf__error_at(state->error, &line->name.pos,
                              "\"%s\" in acme_issuer takes one argument", line->name.text);
    return 0;
}

/* The most bytes of an external account's key file: a MAC key in
 * base64url is some tens of characters. */
#define EAB_KEY_FILE_MAX 4096

/* external_account_key KID FILE|data:KEY, as nginx's: the key (base64url)
 * in the file (surrounding white space dropped) or after "data:". */
static int external_account_key(struct conf_state *state, struct conf_acme_issuer *is,
                                const struct conf_node *line)
{
    if (line->block || line->arg_count != 2)
        return conf__error_at(state->error, &line->name.pos,
                              "\"external_account_key\" takes a key ID and a key file (or "
                              "data:KEY)");
    const struct conf_arg *kid = &line->args[0], *src = &line->args[1];
    char text[EAB_KEY_FILE_MAX + 1] = {0}; /* fread() fills only n bytes */
    if (strncmp(src->text, "data:", 5) == 0) {
        snprintf(text, sizeof(text), "%s", src->text + 5);
    } else {
        char *path = NULL;
        if (conf__arg_path(state, src, &path) != 0)
            return -1;
        FILE *f = fopen(path, "r");
        size_t n = f != NULL ? fread(text, 1, sizeof(text) - 1, f) : 0;
        bool too_long = f != NULL && n == sizeof(text) - 1 && fgetc(f) != EOF;
        int err = f == NULL ? errno : 0;
        if (f != NULL)
            fclose(f);
        if (f == NULL || too_long) {
            conf__error_at(state->error, &src->pos, "external_account_key \"%s\": %s", path,
                           too_long ? "larger than 4 KiB" : strerror(err));
            free(path);
            return -1;
        }
        free(path);
        text[n] = '\0';
    }
    char *start = text;
    while (isspace((unsigned char)*start))
        start++;
    size_t len = strlen(start);
    while (len > 0 && isspace((unsigned char)start[len - 1]))
        start[--len] = '\0';
    /* Decoded, and refused if it is not base64url, by the ACME client
     * (acme_client_new(), which -t runs too). */
    if (*start == '\0')
        return conf__error_at(state->error, &src->pos, "external_account_key \"%s\": no key",
                              kid->text);
    free(is->eab_kid);
    free(is->eab_key);
    is->eab_kid = conf__strdup(state, &kid->pos, kid->text);
    is->eab_key = conf__strdup(state, &src->pos, start);
    return is->eab_kid != NULL && is->eab_key != NULL ? 0 : -1;
}

/* One line of an acme_issuer block. */
static int issuer_line(struct conf_state *state, struct conf_acme_issuer *is,
                       const struct conf_node *line)
{
    const char *name = line->name.text;
    const struct conf_arg *arg = line->arg_count > 0 ? &line->args[0] : NULL;
    if (strcmp(name, "accept_terms_of_service") == 0) {
        if (line->block || line->arg_count != 0)
            return conf__error_at(state->error, &line->name.pos,
                                  "\"accept_terms_of_service\" takes no argument");
        is->accept_terms_of_service = true;
        return 0;
    }
    if (strcmp(name, "external_account_key") == 0)
        return external_account_key(state, is, line);
    if (one_arg(state, line) != 0)
        return -1;
    if (strcmp(name, "uri") == 0) {
        if (strncmp(arg->text, "https://", 8) != 0)
            return conf__error_at(state->error, &arg->pos,
                                  "the ACME directory \"%s\" must be an https:// URL", arg->text);
        free(is->uri);
        return (is->uri = conf__strdup(state, &arg->pos, arg->text)) != NULL ? 0 : -1;
    }
    if (strcmp(name, "contact") == 0) {
        char **contacts =
            conf__grow(state, &arg->pos, is->contacts, is->contact_count, sizeof(*contacts));
        if (contacts == NULL)
            return -1;
        is->contacts = contacts;
        contacts[is->contact_count] = conf__strdup(state, &arg->pos, arg->text);
        return contacts[is->contact_count++] != NULL ? 0 : -1;
    }
    if (strcmp(name, "state_path") == 0) {
        free(is->state_path);
        is->state_path = NULL;
        return conf__arg_path(state, arg, &is->state_path);
    }
    /* ca_certificate is the name the ACME issue's block uses;
       ssl_trusted_certificate is nginx's.  Same file, same meaning. */
    if (strcmp(name, "ssl_trusted_certificate") == 0 || strcmp(name, "ca_certificate") == 0) {
        free(is->trusted_ca);
        is->trusted_ca = NULL;
        return conf__arg_path(state, arg, &is->trusted_ca);
    }
    if (strcmp(name, "account_key") == 0) {
        if (key_type(arg->text, &is->account_key) != 0)
            return conf__error_at(state->error, &arg->pos,
                                  "account_key \"%s\": expected ecdsa, ecdsa:256, rsa, rsa:2048 "
                                  "or rsa:4096 (a key file is not supported)",
                                  arg->text);
        return 0;
    }
    if (strcmp(name, "challenge") == 0) {
        if (strcmp(arg->text, "http-01") == 0 || strcmp(arg->text, "http") == 0)
            is->tls_alpn = false;
        else if (strcmp(arg->text, "tls-alpn-01") == 0 || strcmp(arg->text, "tls-alpn") == 0)
            is->tls_alpn = true;
        else
            return conf__error_at(state->error, &arg->pos,
                                  "challenge \"%s\": expected http-01 or tls-alpn-01", arg->text);
        return 0;
    }
    return conf__error_at(state->error, &line->name.pos,
                          "unknown directive \"%s\" in acme_issuer: expected uri, contact, "
                          "state_path, accept_terms_of_service, ssl_trusted_certificate, "
                          "ca_certificate, "
                          "account_key, challenge or external_account_key",
                          name);
}

/* acme_issuer NAME { uri URL; state_path DIR; ... } */
static int apply_acme_issuer(struct conf_state *state, const struct conf_node *node,
                             const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    const struct conf_arg *name = &node->args[0];
    for (size_t i = 0; i < config->acme_issuer_count; i++)
        if (strcmp(config->acme_issuers[i].name, name->text) == 0)
            return conf__error_at(state->error, &name->pos, "duplicate acme_issuer \"%s\"",
                                  name->text);
    struct conf_acme_issuer *issuers = conf__grow(state, &name->pos, config->acme_issuers,
                                                  config->acme_issuer_count, sizeof(*issuers));
    if (issuers == NULL)
        return -1;
    config->acme_issuers = issuers;
    struct conf_acme_issuer *is = &issuers[config->acme_issuer_count++];
    *is = (struct conf_acme_issuer){.account_key = ACME_KEY_EC_P256, .pos = node->name.pos};
    if ((is->name = conf__strdup(state, &name->pos, name->text)) == NULL)
        return -1;
    for (size_t i = 0; i < node->child_count; i++)
        if (issuer_line(state, is, &node->children[i]) != 0)
            return -1;
    if (is->uri == NULL)
        return conf__error_at(state->error, &node->name.pos, "acme_issuer \"%s\" needs a \"uri\"",
                              is->name);
    /* Keys and certificates must outlive a restart, and tls_certificate
     * reads the certificate from there. */
    if (is->state_path == NULL)
        return conf__error_at(state->error, &node->name.pos,
                              "acme_issuer \"%s\" needs a \"state_path\"", is->name);
    return 0;
}

/* acme_certificate ISSUER [DOMAIN...] [key=ALG] */
static int apply_acme_certificate(struct conf_state *state, const struct conf_node *node,
                                  const struct conf_directive *directive)
{
    (void)directive;
    struct conf_acme_certificate *acme = &state->server->acme;
    *acme = (struct conf_acme_certificate){.key = ACME_KEY_EC_P256, .pos = node->name.pos};
    if ((acme->issuer = conf__strdup(state, &node->args[0].pos, node->args[0].text)) == NULL)
        return -1;
    for (size_t i = 1; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        if (strncmp(arg->text, "key=", 4) == 0) {
            if (key_type(arg->text + 4, &acme->key) != 0)
                return conf__error_at(state->error, &arg->pos,
                                      "\"%s\": expected key=ecdsa, key=rsa or key=rsa:4096",
                                      arg->text);
            continue;
        }
        if (arg->text[0] == '~' || strchr(arg->text, '/') != NULL || arg->text[0] == '\0')
            return conf__error_at(state->error, &arg->pos, "\"%s\" is not a domain name to certify",
                                  arg->text);
        char **domains =
            conf__grow(state, &arg->pos, acme->domains, acme->domain_count, sizeof(*domains));
        if (domains == NULL)
            return -1;
        acme->domains = domains;
        if ((domains[acme->domain_count] = conf__strdup(state, &arg->pos, arg->text)) == NULL)
            return -1;
        acme->domain_count++;
    }
    return 0;
}

/* clang-format off */
const struct conf_directive conf__acme_directives[] = {
    {.name = "acme_issuer", .contexts = CONF_MAIN, .min_args = 1, .max_args = 1, .block = true,
     .repeat = true, .apply = apply_acme_issuer},
    {.name = "acme_certificate", .contexts = CONF_SERVER, .min_args = 1,
     .max_args = CONF_ARGS_MANY, .apply = apply_acme_certificate},
    {.name = NULL},
};
/* clang-format on */
