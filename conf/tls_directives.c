/*
 * tls_directives.c: a server block's TLS settings (or the admin block's):
 * its certificate and key pairs, and the tls_* settings of the TLS
 * module's own struct, with the checks that need the whole block.
 */
#include "registry.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct conf_tls *conf__block_tls(struct conf_state *state)
{
    if (state->config->stream.current != NULL)
        return &state->config->stream.current->tls;
    if (state->config->stream.applying)
        return &state->config->stream.tls;
    if (state->in_admin)
        return &state->config->admin.tls;
    return state->server != NULL ? &state->server->tls : &state->config->tls;
}

/* The block being applied, and its name in messages. */
static const struct conf_node *block_node(const struct conf_state *state, const char **name)
{
    if (state->in_admin) {
        *name = "admin block";
        return state->admin_node;
    }
    *name = "server";
    if (state->config->stream.current != NULL)
        return state->stream_node;
    if (state->config->stream.applying) {
        *name = "stream block";
        return state->stream_block;
    }
    return state->server_nodes[state->server - state->config->servers];
}

void conf__tls_free(struct conf_tls *tls)
{
    for (size_t i = 0; i < tls->certificate_count; i++) {
        free(tls->certificates[i].certificate);
        free(tls->certificates[i].key);
    }
    free(tls->certificates);
    free((void *)tls->settings.ciphers);
    free((void *)tls->settings.ciphersuites);
    free((void *)tls->settings.client_ca);
    free((void *)tls->settings.stapling_file);
    free((void *)tls->settings.stapling_responder);
    free((void *)tls->settings.trusted_ca);
}

/* tls_certificate FILE: starts a pair that the next tls_certificate_key
 * completes.  The files are opened by the daemon, not here, so that a
 * config can be checked where they are not readable. */
static int apply_tls_certificate(struct conf_state *state, const struct conf_node *node,
                                 const struct conf_directive *directive)
{
    (void)directive;
    struct conf_tls *tls = conf__block_tls(state);
    const struct conf_arg *arg = &node->args[0];
    if (tls->certificate_count > 0 && tls->certificates[tls->certificate_count - 1].key == NULL) {
        const struct conf_pos *last =
            &tls->certificates[tls->certificate_count - 1].certificate_pos;
        char where[300];
        return conf__error_at(state->error, &node->name.pos,
                              "\"tls_certificate\" at %s needs its \"tls_certificate_key\" before "
                              "the next \"tls_certificate\"",
                              conf__where(where, sizeof(where), &node->name.pos, last));
    }
    struct conf_tls_certificate *certificates = conf__grow(
        state, &arg->pos, tls->certificates, tls->certificate_count, sizeof(*certificates));
    if (certificates == NULL)
        return -1;
    tls->certificates = certificates;
    struct conf_tls_certificate *pair = &certificates[tls->certificate_count++];
    pair->certificate_pos = arg->pos;
    /* The daemon puts the acme_certificate's file in its place. */
    if (strcmp(arg->text, "$acme_certificate") == 0)
        return (pair->certificate = conf__strdup(state, &arg->pos, arg->text)) != NULL ? 0 : -1;
    return conf__arg_path(state, arg, &pair->certificate);
}

/* tls_certificate_key FILE: the key of the tls_certificate just before. */
static int apply_tls_certificate_key(struct conf_state *state, const struct conf_node *node,
                                     const struct conf_directive *directive)
{
    (void)directive;
    struct conf_tls *tls = conf__block_tls(state);
    const struct conf_arg *arg = &node->args[0];
    if (tls->certificate_count == 0) {
        const char *block;
        if (conf__find_child(block_node(state, &block), "tls_certificate") == NULL)
            return conf__error_at(state->error, &node->name.pos,
                                  "\"tls_certificate_key\" needs a \"tls_certificate\" in the "
                                  "same %s",
                                  block);
        return conf__error_at(state->error, &node->name.pos,
                              "\"tls_certificate_key\" must come after its \"tls_certificate\"");
    }
    struct conf_tls_certificate *pair = &tls->certificates[tls->certificate_count - 1];
    if (pair->key != NULL) {
        char where[300];
        return conf__error_at(
            state->error, &node->name.pos,
            "duplicate \"tls_certificate_key\" for the \"tls_certificate\" at %s",
            conf__where(where, sizeof(where), &node->name.pos, &pair->certificate_pos));
    }
    pair->key_pos = arg->pos;
    if (strcmp(arg->text, "$acme_certificate_key") == 0)
        return (pair->key = conf__strdup(state, &arg->pos, arg->text)) != NULL ? 0 : -1;
    return conf__arg_path(state, arg, &pair->key);
}

/* What needs the whole block `node` (named `block` in messages): the last
 * certificate has its key, and client verification has a CA file, which
 * settles its default.  `inherited`: the block took the enclosing block's
 * CA file and verification where it writes neither (a stream server),
 * which are then settled already. */
static int check_block(struct conf_state *state, struct conf_tls *tls, const struct conf_node *node,
                       const char *block, bool inherited)
{
    if (tls->certificate_count > 0 && tls->certificates[tls->certificate_count - 1].key == NULL) {
        const struct conf_node *cert = NULL;
        for (size_t i = 0; i < node->child_count; i++)
            if (strcmp(node->children[i].name.text, "tls_certificate") == 0 ||
                strcmp(node->children[i].name.text, "ssl_certificate") == 0)
                cert = &node->children[i];
        return conf__error_at(state->error, &cert->name.pos,
                              "\"tls_certificate\" needs a \"tls_certificate_key\" in the same %s",
                              block);
    }
    const struct conf_node *verify = conf__find_child(node, "tls_verify_client");
    if (verify == NULL)
        verify = conf__find_child(node, "ssl_verify_client");
    /* nginx's ssl_client_certificate alone verifies nothing: its
     * ssl_verify_client is off unless written. */
    bool nginx_ca = conf__find_child(node, "ssl_client_certificate") != NULL;
    bool writes_ca = nginx_ca || conf__find_child(node, "tls_client_certificate") != NULL;
    if (verify == NULL && inherited && !writes_ca)
        ; /* the enclosing block's, settled there */
    else if (verify == NULL)
        tls->settings.verify_client = tls->settings.client_ca != NULL && !nginx_ca
                                          ? TLS_VERIFY_CLIENT_ON
                                          : TLS_VERIFY_CLIENT_OFF;
    else if (tls->settings.verify_client != TLS_VERIFY_CLIENT_OFF &&
             tls->settings.client_ca == NULL)
        return conf__error_at(state->error, &verify->args[0].pos,
                              "\"tls_verify_client %s\" needs a \"tls_client_certificate\" in the "
                              "same %s",
                              verify->args[0].text, block);
    return 0;
}

/* Whether the server block `node` writes the TLS setting at `offset`,
 * under any of the names that set it. */
static bool writes_tls_field(const struct conf_node *node, size_t offset)
{
    /* nginx's ssl_conf_command sets two of them */
    for (size_t i = 0; i < node->child_count; i++) {
        const struct conf_node *line = &node->children[i];
        if (strcmp(line->name.text, "ssl_conf_command") != 0 || line->arg_count != 2)
            continue;
        if ((offset == offsetof(struct conf_tls, settings.ciphersuites) &&
             strcasecmp(line->args[0].text, "Ciphersuites") == 0) ||
            (offset == offsetof(struct conf_tls, settings.ktls) &&
             strcasecmp(line->args[0].text, "Options") == 0 &&
             strcasecmp(line->args[1].text, "KTLS") == 0))
            return true;
    }
    const struct conf_directive *const tables[] = {conf__tls_directives, conf__nginx_directives};
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        for (const struct conf_directive *d = tables[t]; d->name != NULL; d++) {
            if (d->base != CONF_BASE_TLS || d->offset != offset)
                continue;
            const char *alias = conf__nginx_alias_of(d->name);
            if (conf__find_child(node, d->name) != NULL ||
                (alias != NULL && conf__find_child(node, alias) != NULL))
                return true;
        }
    }
    return false;
}

/* Gives the server `node` the settings of `top` (the block around it,
 * where the directives take `context`) that it does not write. */
static int inherit_tls(struct conf_state *state, struct conf_tls *tls, const struct conf_node *node,
                       const struct conf_tls *top, unsigned context)
{
    for (const struct conf_directive *d = conf__tls_directives; d->name != NULL; d++) {
        if (d->base != CONF_BASE_TLS || !(d->contexts & context) ||
            writes_tls_field(node, d->offset))
            continue;
        char *to = (char *)tls + d->offset;
        const char *from = (const char *)top + d->offset;
        switch (d->kind) {
        case CONF_KIND_STRING:
        case CONF_KIND_PATH: {
            const char *text = *(char *const *)from;
            if (text == NULL)
                break;
            char *copy = conf__strdup(state, &node->name.pos, text);
            if (copy == NULL)
                return -1;
            free(*(char **)to);
            *(char **)to = copy;
            if (d->keep_pos)
                memcpy((char *)tls + d->pos_offset, (const char *)top + d->pos_offset,
                       sizeof(struct conf_pos));
            break;
        }
        case CONF_KIND_DURATION: memcpy(to, from, sizeof(uint32_t)); break;
        case CONF_KIND_SIZE: memcpy(to, from, sizeof(size_t)); break;
        case CONF_KIND_COUNT:
        case CONF_KIND_FLAGS: memcpy(to, from, sizeof(unsigned)); break;
        case CONF_KIND_SWITCH: memcpy(to, from, sizeof(bool)); break;
        case CONF_KIND_KEYWORD: memcpy(to, from, sizeof(int)); break;
        case CONF_KIND_NONE: break;
        }
    }
    return 0;
}

int conf__tls_check_server(struct conf_state *state, size_t index)
{
    struct conf_server *server = &state->config->servers[index];
    if (inherit_tls(state, &server->tls, state->server_nodes[index], &state->config->tls,
                    CONF_MAIN) != 0)
        return -1;
    if (check_block(state, &server->tls, state->server_nodes[index], "server", false) != 0)
        return -1;
    for (size_t i = 0; i < server->listen_count; i++)
        if (server->listens[i].tls && server->tls.certificate_count == 0)
            return conf__error_at(state->error, &server->listens[i].pos,
                                  "listen \"%s\" is tls but the server has no \"tls_certificate\"",
                                  server->listens[i].address);
    return 0;
}

int conf__tls_check_admin(struct conf_state *state)
{
    struct conf_config *config = state->config;
    if (check_block(state, &config->admin.tls, state->admin_node, "admin block", false) != 0)
        return -1;
    for (size_t i = 0; i < config->admin_listen_count; i++)
        if (config->admin.listens[i].tls && config->admin.tls.certificate_count == 0)
            return conf__error_at(state->error, &config->admin.listens[i].pos,
                                  "listen \"%s\" is tls but the admin block has no "
                                  "\"tls_certificate\"",
                                  config->admin_listens[i]);
    return 0;
}

/* A stream server without certificates takes the stream block's, the
 * whole list, as nginx inherits ssl_certificate. */
static int inherit_certificates(struct conf_state *state, struct conf_tls *tls,
                                const struct conf_tls *top, const struct conf_node *node)
{
    if (tls->certificate_count > 0 || top->certificate_count == 0)
        return 0;
    tls->certificates = calloc(top->certificate_count, sizeof(*tls->certificates));
    if (tls->certificates == NULL)
        return conf__error_at(state->error, &node->name.pos, "out of memory");
    for (size_t i = 0; i < top->certificate_count; i++) {
        struct conf_tls_certificate *pair = &tls->certificates[i];
        *pair = top->certificates[i];
        pair->certificate = pair->key = NULL;
        tls->certificate_count = i + 1;
        pair->certificate = conf__strdup(state, &node->name.pos, top->certificates[i].certificate);
        pair->key = conf__strdup(state, &node->name.pos, top->certificates[i].key);
        if (pair->certificate == NULL || pair->key == NULL)
            return -1;
    }
    return 0;
}

int conf__tls_check_stream(struct conf_state *state, const struct conf_node *node)
{
    struct conf_stream *stream = &state->config->stream;
    if (check_block(state, &stream->tls, node, "stream block", false) != 0)
        return -1;
    size_t s = 0;
    for (size_t c = 0; c < node->child_count; c++) {
        const struct conf_node *child = &node->children[c];
        if (strcmp(child->name.text, "server") != 0)
            continue;
        assert(s < stream->server_count); /* one per server child, in order */
        struct conf_stream_server *server = &stream->servers[s++];
        if (inherit_tls(state, &server->tls, child, &stream->tls, CONF_STREAM) != 0 ||
            inherit_certificates(state, &server->tls, &stream->tls, child) != 0 ||
            check_block(state, &server->tls, child, "server", true) != 0)
            return -1;
        for (size_t i = 0; i < server->listen_count; i++)
            if (server->listens[i].tls && server->tls.certificate_count == 0)
                return conf__error_at(state->error, &server->listens[i].pos,
                                      "listen \"%s\" is tls but neither the server nor the stream "
                                      "block has a \"tls_certificate\"",
                                      server->listens[i].address);
    }
    return 0;
}

/* Keyword settings are stored as int: their enums must be int-sized. */
_Static_assert(sizeof(enum tls_verify_client) == sizeof(int), "an enum setting is an int");

static const struct conf_keyword protocols[] = {
    {"TLSv1.2", TLS_PROTOCOL_1_2},
    {"TLSv1.3", TLS_PROTOCOL_1_3},
};

static const struct conf_keyword verify_modes[] = {
    {"on", TLS_VERIFY_CLIENT_ON},
    {"optional", TLS_VERIFY_CLIENT_OPTIONAL},
    {"off", TLS_VERIFY_CLIENT_OFF},
};

/* Each entry sets one field of the server's struct conf_tls through
 * conf__apply_setting(), except the certificate and key, which build a list
 * of pairs.  One directive per entry: a table reads better than what the
 * formatter makes of it. */
/* clang-format off */
#define TLS_CONTEXTS (CONF_SERVER | CONF_ADMIN)
/* Those a stream server takes too (`listen ... tls` in stream): not the
 * OCSP stapling, which the daemon runs for HTTP sites only. */
#define STREAM_TLS (TLS_CONTEXTS | CONF_STREAM | CONF_STREAM_SERVER)
/* The settings may be written at top level too, as nginx's ssl_* in
 * http { }; a server takes those it does not write. */
#define TLS_FIELD(field) TLS_FIELD_IN(TLS_CONTEXTS | CONF_MAIN, field)
#define TLS_FIELD_IN(where, field) .contexts = where, .min_args = 1, .max_args = 1, \
    .base = CONF_BASE_TLS, CONF_FIELD(struct conf_tls, settings.field)
#define TLS_POS(field) .keep_pos = true, .pos_offset = offsetof(struct conf_tls, field)

const struct conf_directive conf__tls_directives[] = {
    {.name = "tls_certificate", .contexts = STREAM_TLS, .min_args = 1, .max_args = 1,
     .repeat = true, .apply = apply_tls_certificate},
    {.name = "tls_certificate_key", .contexts = STREAM_TLS, .min_args = 1, .max_args = 1,
     .repeat = true, .apply = apply_tls_certificate_key},
    {.name = "tls_protocols", .contexts = STREAM_TLS | CONF_MAIN, .min_args = 1, .max_args = CONF_ARGS_MANY,
     .base = CONF_BASE_TLS, CONF_FIELD(struct conf_tls, settings.protocols),
     .kind = CONF_KIND_FLAGS, CONF_KEYWORDS(protocols), .what = "TLS protocol",
     .repeated = "protocol"},
    /* Kept as written: OpenSSL judges them when the daemon sets up TLS; the
     * position lets it point here. */
    {.name = "tls_ciphers", TLS_FIELD_IN(STREAM_TLS | CONF_MAIN, ciphers), .kind = CONF_KIND_STRING, TLS_POS(ciphers_pos)},
    {.name = "tls_ciphersuites", TLS_FIELD_IN(STREAM_TLS | CONF_MAIN, ciphersuites), .kind = CONF_KIND_STRING,
     TLS_POS(ciphersuites_pos)},
    {.name = "tls_session_tickets", TLS_FIELD_IN(STREAM_TLS | CONF_MAIN, session_tickets), .kind = CONF_KIND_SWITCH},
    /* A ticket's lifetime is told to the client in whole seconds, and a
     * ticket lives at least one rotation period. */
    {.name = "tls_session_ticket_rotation", TLS_FIELD(ticket_key_rotation_ms),
     .kind = CONF_KIND_DURATION, .min = 1000},
    /* sessions kept for resumption without a ticket; 0 is off too */
    {.name = "tls_session_cache", TLS_FIELD_IN(STREAM_TLS | CONF_MAIN, session_cache), .kind = CONF_KIND_COUNT,
     .zero_word = "off", .what = "session cache size"},
    {.name = "tls_session_timeout", TLS_FIELD_IN(STREAM_TLS | CONF_MAIN, session_timeout_ms), .kind = CONF_KIND_DURATION,
     .min = 1},
    {.name = "tls_handshake_timeout", TLS_FIELD_IN(STREAM_TLS | CONF_MAIN, handshake_timeout_ms),
     .kind = CONF_KIND_DURATION, .min = 1},
    {.name = "tls_ktls", TLS_FIELD(ktls), .kind = CONF_KIND_SWITCH},
    /* a vhost's certificate files looked at again while serving */
    {.name = "tls_certificate_watch", TLS_FIELD(certificate_watch), .kind = CONF_KIND_SWITCH},
    /* the CAs that client certificates must chain to */
    {.name = "tls_client_certificate", TLS_FIELD_IN(STREAM_TLS, client_ca), .kind = CONF_KIND_PATH,
     TLS_POS(client_ca_pos)},
    /* checked against the CA file by conf__tls_check_server(), which may
     * come later in the block */
    {.name = "tls_verify_client", TLS_FIELD_IN(STREAM_TLS, verify_client), .kind = CONF_KIND_KEYWORD,
     CONF_KEYWORDS(verify_modes), .what = "client verification"},
    /* OCSP stapling; the files and the URL are judged when the daemon
     * loads the certificates */
    {.name = "tls_stapling", TLS_FIELD(stapling), .kind = CONF_KIND_SWITCH},
    {.name = "tls_stapling_verify", TLS_FIELD(stapling_verify), .kind = CONF_KIND_SWITCH},
    {.name = "tls_stapling_file", TLS_FIELD(stapling_file), .kind = CONF_KIND_PATH,
     TLS_POS(stapling_file_pos)},
    {.name = "tls_stapling_responder", TLS_FIELD(stapling_responder), .kind = CONF_KIND_STRING,
     TLS_POS(stapling_responder_pos)},
    {.name = "tls_trusted_certificate", TLS_FIELD(trusted_ca), .kind = CONF_KIND_PATH,
     TLS_POS(trusted_ca_pos)},
    {.name = NULL},
};
/* clang-format on */
