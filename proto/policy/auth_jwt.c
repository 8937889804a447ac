/*
 * auth_jwt.c: JWT authentication in the access phase (see auth_jwt.h):
 * the token taken from the request, parsed and checked (jwt.h), the 401
 * with a Bearer challenge, and the token's claims and header kept for
 * $jwt_claim_NAME and $jwt_header_NAME.  Its directives, its struct per
 * level and its build are the module's too.
 */
#include "proto/policy/auth_jwt.h"

#include "proto/http/module.h"
#include "proto/policy/auth_jwt_fetch.h"
#include "proto/policy/auth_realm.h"
#include "proto/policy/jwt.h"
#include "proto/policy/satisfy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* What the phase reads for a location. */
struct auth_jwt_loc {
    const struct jwks *keys;                /* NULL: none from a file */
    struct auth_jwt_key_source *key_source; /* NULL: none fetched */
    uint32_t key_cache_ms;
    const struct vars_template *token; /* NULL: Authorization: Bearer */
    const char *challenge;             /* the WWW-Authenticate line, no error */
    const char *invalid;               /* the same with error="invalid_token" */
    int64_t leeway;
    const char *issuer, *audience;
};

/* ----------------------------------------------------------- per request */

/* A passed token's JSON, and the texts made of its values for variables
 * that are not strings, kept until the exchange ends. */
struct auth_jwt_state {
    json_t *header, *claims;
    char **texts;
    size_t text_count;
};

/* The state of a passed token, in the module's first slot. */
static void release_state(struct exchange *ex)
{
    struct auth_jwt_state *st = exchange_ctx(ex, auth_jwt_module.slot);
    if (st == NULL)
        return;
    exchange_set_ctx(ex, auth_jwt_module.slot, NULL);
    json_decref(st->header);
    json_decref(st->claims);
    for (size_t i = 0; i < st->text_count; i++)
        free(st->texts[i]);
    free(st->texts);
    free(st);
}

/* The exchange is over: its token's state, and its key fetch's, in the
 * second slot (auth_jwt_fetch.h), which the phase never lets go of while
 * the walk it held goes on. */
static void release(struct exchange *ex)
{
    release_state(ex);
    auth_jwt_fetch_release(ex, auth_jwt_module.slot + 1);
}

/* Member `name` of `object`, whose names the variable gives lowercase:
 * the exact one first, else one that differs only in case. */
static json_t *member_named(json_t *object, const char *name, size_t len)
{
    char key[128];
    if (len >= sizeof(key))
        return NULL;
    memcpy(key, name, len);
    key[len] = '\0';
    json_t *v = json_object_get(object, key);
    if (v != NULL)
        return v;
    const char *k;
    json_object_foreach(object, k, v) if (strcasecmp(k, key) == 0) return v;
    return NULL;
}

static bool value_of(const struct exchange *ex, bool header, const char *name, size_t len,
                     struct http_str *out)
{
    struct auth_jwt_state *st = exchange_ctx(ex, auth_jwt_module.slot);
    if (st == NULL)
        return false;
    json_t *v = member_named(header ? st->header : st->claims, name, len);
    if (v == NULL || json_is_null(v))
        return false;
    if (json_is_string(v)) {
        *out = (struct http_str){json_string_value(v), json_string_length(v)};
        return true;
    }
    /* Numbers as JSON writes them; arrays and objects as compact JSON. */
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    char **grown = text != NULL ? realloc(st->texts, (st->text_count + 1) * sizeof(*grown)) : NULL;
    if (grown == NULL) {
        free(text);
        return false;
    }
    st->texts = grown;
    st->texts[st->text_count++] = text;
    *out = (struct http_str){text, strlen(text)};
    return true;
}

static bool claim(const struct exchange *ex, const char *suffix, size_t len, struct http_str *out)
{
    return value_of(ex, false, suffix, len, out);
}

static bool header_value(const struct exchange *ex, const char *suffix, size_t len,
                         struct http_str *out)
{
    return value_of(ex, true, suffix, len, out);
}

/* The Bearer token of the Authorization header (RFC 6750 2.1). */
static struct http_str bearer(const struct http_request *req)
{
    for (size_t i = 0; i < req->header_count; i++) {
        if (!http_str_equal_nocase(req->headers[i].name, "authorization"))
            continue;
        struct http_str v = http_trim(req->headers[i].value);
        if (v.len > 7 && strncasecmp(v.data, "bearer", 6) == 0 &&
            (v.data[6] == ' ' || v.data[6] == '\t'))
            return http_trim((struct http_str){v.data + 7, v.len - 7});
        break;
    }
    return (struct http_str){"", 0};
}

static int challenge(struct router_walk *w, const char *line)
{
    static const char body[] = "401 Unauthorized\n";
    char headers[1024];
    int n = snprintf(headers, sizeof(headers), "%sContent-Type: text/plain\r\n", line);
    if (n < 0 || (size_t)n >= sizeof(headers))
        return 500; /* the build bounds the realm: never */
    router_routed(w);
    exchange_respond(w->ex, 401, headers, body, sizeof(body) - 1);
    return ROUTER_DONE;
}

static int auth_jwt_phase(struct router_walk *w);

static int auth_jwt_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct auth_jwt_loc *a =
        ex->loc != NULL ? http_module_built_in(ex->loc->modules, &auth_jwt_module) : NULL;
    if (a == NULL)
        return ROUTER_DECLINED;
    char buf[JWT_TOKEN_MAX + 1];
    struct http_str token;
    if (a->token != NULL) {
        struct vars_ctx ctx = {.ex = ex, .req = &w->req, .escape = VARS_RAW};
        size_t len = vars_eval_into(a->token, &ctx, buf, sizeof(buf));
        token = (struct http_str){buf, len < sizeof(buf) ? len : sizeof(buf)};
    } else {
        token = bearer(&w->req);
    }
    if (token.len == 0)
        return challenge(w, a->challenge);
    struct jwt_token t;
    const char *why = NULL;
    struct jwt_checks checks = {.now = (int64_t)time(NULL),
                                .leeway = a->leeway,
                                .issuer = a->issuer,
                                .audience = a->audience};
    if (jwt_parse(token.data, token.len, &t, &why) != 0)
        return challenge(w, a->invalid);
    /* The file's keys first; then the fetched set, kept or fetched now
     * (the walk comes back here once it is). */
    bool passed = a->keys != NULL && jwt_verify(&t, a->keys, &checks, &why) == 0;
    if (!passed && a->key_source != NULL) {
        struct auth_jwt_keys *keys = NULL;
        if (!auth_jwt_fetch_result(ex, auth_jwt_module.slot + 1, a->key_source, &keys)) {
            keys = auth_jwt_fetch_cached(a->key_source, corral_monotonic_ns() / 1000000);
            if (keys == NULL) {
                jwt_token_free(&t);
                return auth_jwt_fetch_start(w, a->key_source, a->key_cache_ms,
                                            auth_jwt_module.slot + 1, auth_jwt_phase);
            }
        }
        if (keys == NULL) { /* the fetch failed: logged */
            jwt_token_free(&t);
            return 500;
        }
        passed = jwt_verify(&t, auth_jwt_fetch_set(keys), &checks, &why) == 0;
        auth_jwt_fetch_put(keys);
    }
    if (!passed) {
        jwt_token_free(&t);
        return challenge(w, a->invalid);
    }
    release_state(ex); /* a walk again after a rewrite: the newest */
    struct auth_jwt_state *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        jwt_token_free(&t);
        return 500;
    }
    st->header = json_incref(t.header);
    st->claims = json_incref(t.claims);
    jwt_token_free(&t);
    exchange_set_ctx(ex, auth_jwt_module.slot, st);
    return satisfy_any(ex) ? ROUTER_NEXT : ROUTER_DECLINED;
}

/* ------------------------------------------------------- configuration */

/* auth_jwt "REALM" [token=$variable] | off; */
static int apply_auth_jwt(void *conf, const struct conf_arg *args, size_t count,
                          struct conf_module_error *error)
{
    struct auth_jwt_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    c->realm_pos = arg->pos;
    if (strcmp(arg->text, "off") == 0) {
        if (count > 1)
            return conf_module_fail(error, &args[1].pos, "%s", "\"off\" takes no token=");
        return 0;
    }
    if (auth_realm_check(arg, error) != 0)
        return -1;
    if (count > 1) {
        if (strncmp(args[1].text, "token=", 6) != 0 || args[1].text[6] != '$')
            return conf_module_fail(error, &args[1].pos,
                                    "invalid parameter \"%s\" (expected token=$variable)",
                                    args[1].text);
        c->token = strdup(args[1].text + 6);
        c->token_pos = conf_arg_tail(&args[1], 6).pos;
        if (c->token == NULL)
            return conf_module_fail(error, &arg->pos, "%s", "out of memory");
    }
    c->realm = strdup(arg->text);
    return c->realm != NULL ? 0 : conf_module_fail(error, &arg->pos, "%s", "out of memory");
}

/* auth_jwt_key_file FILE; read now, with the config. */
static int apply_key_file(void *conf, const struct conf_arg *args, size_t count,
                          struct conf_module_error *error)
{
    (void)count;
    struct auth_jwt_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    char *path = conf_arg_file(arg, error);
    if (path == NULL)
        return -1;
    int rc = jwks_load(path, &c->keys, error->message, sizeof(error->message));
    free(path);
    if (rc != 0)
        error->at = &arg->pos;
    return rc;
}

/* auth_jwt_key_request URI; */
static int apply_key_request(void *conf, const struct conf_arg *args, size_t count,
                             struct conf_module_error *error)
{
    (void)count;
    struct auth_jwt_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    if (conf_arg_uri(arg, error) != 0)
        return -1;
    c->key_request_pos = arg->pos;
    c->key_source = auth_jwt_fetch_source_new(arg->text);
    return c->key_source != NULL ? 0 : conf_module_fail(error, &arg->pos, "%s", "out of memory");
}

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct auth_jwt_conf *c = conf;
    const struct auth_jwt_conf *p = parent;
    if (p == NULL)
        return 0;
    if (c->realm_pos.file == NULL && p->realm_pos.file != NULL) {
        c->realm_pos = p->realm_pos;
        c->realm = p->realm;
        c->token = p->token;
        c->token_pos = p->token_pos;
        c->inherited_realm = true;
    }
    if (c->keys == NULL && p->keys != NULL) {
        c->keys = p->keys;
        c->inherited_keys = true;
    }
    if (c->key_source == NULL && p->key_source != NULL) {
        c->key_source = p->key_source;
        c->key_request_pos = p->key_request_pos;
        c->inherited_key_source = true;
    }
    if (c->key_cache_pos.file == NULL) {
        c->key_cache_ms = p->key_cache_ms;
        c->key_cache_pos = p->key_cache_pos;
    }
    if (c->leeway_pos.file == NULL) {
        c->leeway_ms = p->leeway_ms;
        c->leeway_pos = p->leeway_pos;
    }
    if (c->issuer_pos.file == NULL && p->issuer_pos.file != NULL) {
        c->issuer = p->issuer;
        c->issuer_pos = p->issuer_pos;
        c->inherited_issuer = true;
    }
    if (c->audience_pos.file == NULL && p->audience_pos.file != NULL) {
        c->audience = p->audience;
        c->audience_pos = p->audience_pos;
        c->inherited_audience = true;
    }
    return 0;
}

static int check(void *conf, struct conf_module_error *error)
{
    const struct auth_jwt_conf *c = conf;
    if (error->where->context != CONF_LOCATION || c->realm == NULL || c->keys != NULL ||
        c->key_source != NULL)
        return 0;
    return conf_module_fail(error, NULL, "%s",
                            "\"auth_jwt\" is on here but no \"auth_jwt_key_file\" or "
                            "\"auth_jwt_key_request\" is set");
}

static void conf_free(void *conf)
{
    struct auth_jwt_conf *c = conf;
    if (!c->inherited_realm) {
        free(c->realm);
        free(c->token);
    }
    if (!c->inherited_keys)
        jwks_free(c->keys);
    if (!c->inherited_key_source)
        auth_jwt_fetch_source_free(c->key_source);
    if (!c->inherited_issuer)
        free(c->issuer);
    if (!c->inherited_audience)
        free(c->audience);
}

/* "WWW-Authenticate: Bearer realm="REALM"[, error="invalid_token"]\r\n",
 * the realm escaped as a quoted-string; arena memory. */
static const char *challenge_line(const struct http_module_build *b, const char *realm,
                                  bool invalid)
{
    size_t cap = 2 * strlen(realm) + 96;
    char *line = b->calloc(b->arena, 1, cap);
    const char *tail = invalid ? ", error=\"invalid_token\"\r\n" : "\r\n";
    if (line == NULL || auth_realm_challenge("Bearer", realm, tail, line, cap) == 0)
        return NULL; /* the cap bounds it: out of memory only */
    return line;
}

static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct auth_jwt_conf *c = conf;
    *out = NULL;
    if (b->loc == NULL || c->realm == NULL || (c->keys == NULL && c->key_source == NULL))
        return 0;
    struct auth_jwt_loc *a = b->calloc(b->arena, 1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->keys = c->keys;
    a->key_source = c->key_source;
    a->key_cache_ms = c->key_cache_ms;
    a->challenge = challenge_line(b, c->realm, false);
    a->invalid = challenge_line(b, c->realm, true);
    if (a->challenge == NULL || a->invalid == NULL)
        return -ENOMEM;
    if (c->token != NULL) {
        int err = b->compile(b->arena, c->token, &c->token_pos, "auth_jwt", &a->token);
        if (err != 0)
            return err;
    }
    a->leeway = c->leeway_ms / 1000;
    a->issuer = c->issuer;
    a->audience = c->audience;
    *out = a;
    return 0;
}

#define AUTH_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

static const struct conf_directive auth_jwt_directives[] = {
    {.name = "auth_jwt",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 2,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_auth_jwt},
    {.name = "auth_jwt_key_file",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_key_file},
    {.name = "auth_jwt_key_request",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_key_request},
    {.name = "auth_jwt_key_cache",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_DURATION,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct auth_jwt_conf, key_cache_ms),
     .keep_pos = true,
     .pos_offset = offsetof(struct auth_jwt_conf, key_cache_pos)},
    {.name = "auth_jwt_leeway",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_DURATION,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct auth_jwt_conf, leeway_ms),
     .keep_pos = true,
     .pos_offset = offsetof(struct auth_jwt_conf, leeway_pos)},
    {.name = "auth_jwt_issuer",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_STRING,
     .what = "issuer",
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct auth_jwt_conf, issuer),
     .keep_pos = true,
     .pos_offset = offsetof(struct auth_jwt_conf, issuer_pos)},
    {.name = "auth_jwt_audience",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_STRING,
     .what = "audience",
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct auth_jwt_conf, audience),
     .keep_pos = true,
     .pos_offset = offsetof(struct auth_jwt_conf, audience_pos)},
    {.name = NULL},
};

static const struct http_phase_handler auth_jwt_phases[] = {
    {ROUTER_ACCESS, auth_jwt_phase},
};

static const struct vars_module_var auth_jwt_vars[] = {
    {.name = "jwt_claim_", .prefix = true, .get = claim},
    {.name = "jwt_header_", .prefix = true, .get = header_value},
    {.name = NULL},
};

struct http_module auth_jwt_module = {
    .name = "auth_jwt",
    .conf =
        {
            .name = "auth_jwt",
            .directives = auth_jwt_directives,
            .size = sizeof(struct auth_jwt_conf),
            .merge = merge,
            .check = check,
            .free = conf_free,
        },
    .build = build,
    .phases = auth_jwt_phases,
    .phase_count = 1,
    .slots = 2,
    .release = release,
    .vars = auth_jwt_vars,
};
