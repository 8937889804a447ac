/*
 * auth_basic.c: HTTP Basic authentication in the access phase (see
 * auth_basic.h): the credentials' check against the location's user file,
 * the per-worker cache of verified credentials, the failure limit, the
 * 401 challenge and $remote_user.  Its directives, its struct per level
 * and its build are the module's too.
 */
#include "proto/policy/auth_basic.h"

#include "proto/http/module.h"
#include "proto/policy/auth_cache.h"
#include "proto/policy/auth_realm.h"
#include "proto/policy/base64.h"
#include "proto/policy/htpasswd.h"
#include "proto/policy/limit.h"
#include "proto/policy/satisfy.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What the phase reads for a location. */
struct auth_basic_loc {
    const struct htpasswd *users;
    const char *challenge; /* the WWW-Authenticate line */
    struct limit_zone *fail_zone;
    const struct vars_template *fail_key;
    uint64_t fail_rate, fail_burst;
    unsigned fail_status;
};

/* --------------------------------------------------------------- checking */

enum auth_basic_result auth_basic_check(const struct htpasswd *users, struct http_str value,
                                        struct auth_cache *cache, uint64_t now_ms, char *user,
                                        size_t *user_len)
{
    value = http_trim(value);
    if (value.len < 6 || strncasecmp(value.data, "basic", 5) != 0 ||
        (value.data[5] != ' ' && value.data[5] != '\t'))
        return AUTH_BASIC_MISSING;
    struct http_str token = http_trim((struct http_str){value.data + 6, value.len - 6});
    uint8_t decoded[AUTH_BASIC_CREDENTIALS_MAX];
    long n = base64_decode(token.data, token.len, false, decoded, sizeof(decoded));
    const uint8_t *colon = n > 0 ? memchr(decoded, ':', (size_t)n) : NULL;
    if (colon == NULL) {
        OPENSSL_cleanse(decoded, sizeof(decoded));
        return AUTH_BASIC_WRONG;
    }
    const char *name = (const char *)decoded;
    size_t name_len = (size_t)(colon - decoded);
    const char *password = (const char *)colon + 1;
    size_t password_len = (size_t)n - name_len - 1;
    struct auth_cache_key key;
    bool keyed = cache != NULL && auth_cache_key(users->generation, name, name_len, password,
                                                 password_len, &key) == 0;
    enum auth_basic_result result = AUTH_BASIC_WRONG;
    if (keyed && auth_cache_hit(cache, &key, now_ms)) {
        result = AUTH_BASIC_OK;
    } else {
        const struct htpasswd_entry *entry = htpasswd_find(users, name, name_len);
        /* An unknown user costs a check against the first entry's hash,
         * whose result does not count. */
        const struct htpasswd_entry *against = entry != NULL ? entry : &users->entries[0];
        bool match = htpasswd_verify(against->hash, against->kind, password, password_len);
        if (match && entry != NULL) {
            result = AUTH_BASIC_OK;
            if (keyed)
                auth_cache_put(cache, &key, now_ms);
        }
    }
    if (result == AUTH_BASIC_OK) {
        memcpy(user, name, name_len);
        *user_len = name_len;
    }
    OPENSSL_cleanse(decoded, sizeof(decoded));
    return result;
}

size_t auth_basic_challenge(const char *realm, char *out, size_t cap)
{
    return auth_realm_challenge("Basic", realm, "\r\n", out, cap);
}

/* ----------------------------------------------------------- per request */

/* The exchange's $remote_user, once it passed: a copy in the slot. */
struct auth_basic_state {
    size_t user_len;
    char user[];
};

static bool remote_user(const struct exchange *ex, const char *suffix, size_t len,
                        struct http_str *out)
{
    (void)suffix, (void)len;
    const struct auth_basic_state *st = exchange_ctx(ex, auth_basic_module.slot);
    if (st == NULL)
        return false;
    *out = (struct http_str){st->user, st->user_len};
    return true;
}

static void release(struct exchange *ex)
{
    free(exchange_ctx(ex, auth_basic_module.slot));
    exchange_set_ctx(ex, auth_basic_module.slot, NULL);
}

static struct http_str authorization(const struct http_request *req)
{
    for (size_t i = 0; i < req->header_count; i++)
        if (http_str_equal_nocase(req->headers[i].name, "authorization"))
            return req->headers[i].value;
    return (struct http_str){"", 0};
}

static int challenge(struct router_walk *w, const struct auth_basic_loc *a)
{
    static const char body[] = "401 Unauthorized\n";
    char headers[512];
    int n = snprintf(headers, sizeof(headers), "%sContent-Type: text/plain\r\n", a->challenge);
    if (n < 0 || (size_t)n >= sizeof(headers))
        return 500; /* the build bounds the realm: never */
    router_routed(w);
    exchange_respond(w->ex, 401, headers, body, sizeof(body) - 1);
    return ROUTER_DONE;
}

static int auth_basic_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    const struct auth_basic_loc *a =
        ex->loc != NULL ? http_module_built_in(ex->loc->modules, &auth_basic_module) : NULL;
    if (a == NULL)
        return ROUTER_DECLINED;
    uint64_t now_ms = corral_monotonic_ns() / 1000000;
    char key[LIMIT_KEY_MAX];
    size_t key_len = SIZE_MAX;
    if (a->fail_zone != NULL) {
        key_len = limit_key(ex, &w->req, a->fail_key, key);
        if (key_len != SIZE_MAX &&
            limit_zone_req_over(a->fail_zone, key, key_len, now_ms, a->fail_rate, a->fail_burst))
            return (int)a->fail_status;
    }
    char user[AUTH_BASIC_CREDENTIALS_MAX];
    size_t user_len = 0;
    enum auth_basic_result result = auth_basic_check(a->users, authorization(&w->req),
                                                     auth_cache_worker(), now_ms, user, &user_len);
    if (result != AUTH_BASIC_OK) {
        if (result == AUTH_BASIC_WRONG && key_len != SIZE_MAX)
            limit_zone_req(a->fail_zone, key, key_len, now_ms, a->fail_rate, a->fail_burst,
                           UINT64_MAX);
        return challenge(w, a);
    }
    release(ex); /* a walk again after a rewrite: the newest */
    struct auth_basic_state *st = malloc(sizeof(*st) + user_len + 1);
    if (st == NULL)
        return 500;
    st->user_len = user_len;
    memcpy(st->user, user, user_len);
    st->user[user_len] = '\0';
    exchange_set_ctx(ex, auth_basic_module.slot, st);
    /* Under satisfy any, one that passes is enough (satisfy.h). */
    return satisfy_any(ex) ? ROUTER_NEXT : ROUTER_DECLINED;
}

/* ------------------------------------------------------- configuration */

/* A realm ends up in a header line: no control bytes; long enough for
 * any product name, short enough for a line. */

/* auth_basic "REALM" | off; */
static int apply_auth_basic(void *conf, const struct conf_arg *args, size_t count,
                            struct conf_module_error *error)
{
    (void)count;
    struct auth_basic_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    c->realm_pos = arg->pos;
    if (strcmp(arg->text, "off") == 0)
        return 0;
    if (auth_realm_check(arg, error) != 0)
        return -1;
    c->realm = strdup(arg->text);
    return c->realm != NULL ? 0 : conf_module_fail(error, &arg->pos, "%s", "out of memory");
}

/* auth_basic_user_file FILE; loaded now, with the config (and again with
 * each reload's). */
static int apply_user_file(void *conf, const struct conf_arg *args, size_t count,
                           struct conf_module_error *error)
{
    (void)count;
    struct auth_basic_conf *c = conf;
    const struct conf_arg *arg = &args[0];
    char *path = conf_arg_file(arg, error);
    if (path == NULL)
        return -1;
    int rc = htpasswd_load(path, &c->users, error->message, sizeof(error->message));
    free(path);
    if (rc != 0)
        error->at = &arg->pos;
    return rc;
}

/* auth_basic_fail_limit zone=NAME [burst=N] [status=CODE]; */
static int apply_fail_limit(void *conf, const struct conf_arg *args, size_t count,
                            struct conf_module_error *error)
{
    struct auth_basic_conf *c = conf;
    const struct conf_arg *zone = NULL;
    c->fail_status = 429;
    for (size_t i = 0; i < count; i++) {
        const struct conf_arg *arg = &args[i];
        size_t eq = strcspn(arg->text, "=");
        struct conf_arg value = conf_arg_tail(arg, arg->text[eq] == '=' ? eq + 1 : eq);
        int rc = 0;
        if (conf_has_prefix(arg->text, "zone=") && zone == NULL) {
            zone = arg;
            if (!limit_zone_name_valid(value.text, strlen(value.text)))
                rc = conf_module_fail(error, &arg->pos, "invalid zone name in \"%s\"", arg->text);
        } else if (conf_has_prefix(arg->text, "burst=")) {
            rc = conf_arg_uint(&value, "burst", 0, 1000000, &c->fail_burst, error);
        } else if (conf_has_prefix(arg->text, "status=")) {
            rc = conf_arg_uint(&value, "status", 400, 599, &c->fail_status, error);
        } else {
            rc = conf_module_fail(error, &arg->pos, "invalid parameter \"%s\"", arg->text);
        }
        if (rc != 0)
            return conf_module_fail_kept(error, &value); /* `value` goes with this frame */
    }
    if (zone == NULL)
        return conf_module_fail(error, NULL, "%s", "\"auth_basic_fail_limit\" needs zone=NAME");
    c->fail_pos = zone->pos;
    c->fail_zone = strdup(zone->text + 5);
    return c->fail_zone != NULL ? 0 : conf_module_fail(error, &zone->pos, "%s", "out of memory");
}

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct auth_basic_conf *c = conf;
    const struct auth_basic_conf *p = parent;
    if (p == NULL)
        return 0;
    if (c->realm_pos.file == NULL && p->realm_pos.file != NULL) {
        c->realm_pos = p->realm_pos;
        c->realm = p->realm;
        c->inherited_realm = true;
    }
    if (c->users == NULL && p->users != NULL) {
        c->users = p->users;
        c->inherited_users = true;
    }
    if (c->fail_zone == NULL && p->fail_zone != NULL) {
        c->fail_zone = p->fail_zone;
        c->fail_burst = p->fail_burst;
        c->fail_status = p->fail_status;
        c->fail_pos = p->fail_pos;
        c->inherited_fail = true;
    }
    return 0;
}

/* A location that asks for a password must have users to check it
 * against: nginx lets such a location in unchecked, corral refuses it. */
static int check(void *conf, struct conf_module_error *error)
{
    const struct auth_basic_conf *c = conf;
    if (error->where->context != CONF_LOCATION || c->realm == NULL || c->users != NULL)
        return 0;
    return conf_module_fail(error, NULL, "%s",
                            "\"auth_basic\" is on here but no \"auth_basic_user_file\" is set");
}

static void conf_free(void *conf)
{
    struct auth_basic_conf *c = conf;
    if (!c->inherited_realm)
        free(c->realm);
    if (!c->inherited_users)
        htpasswd_free(c->users);
    if (!c->inherited_fail)
        free(c->fail_zone);
}

static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    const struct auth_basic_conf *c = conf;
    *out = NULL;
    if (b->loc == NULL || c->realm == NULL || c->users == NULL)
        return 0;
    struct auth_basic_loc *a = b->calloc(b->arena, 1, sizeof(*a));
    char *line = b->calloc(b->arena, 1, 2 * AUTH_REALM_MAX + 64);
    if (a == NULL || line == NULL)
        return -ENOMEM;
    if (auth_basic_challenge(c->realm, line, 2 * AUTH_REALM_MAX + 64) == 0)
        return -EINVAL; /* AUTH_REALM_MAX bounds it: never */
    a->users = c->users;
    a->challenge = line;
    if (c->fail_zone != NULL) {
        int err = b->limit_zone(b->arena, c->fail_zone, &a->fail_zone, &a->fail_key, &a->fail_rate);
        if (err != 0 || a->fail_rate == 0) {
            corral_log(CORRAL_LOG_ERROR, "%s:%u:%u: auth_basic_fail_limit: %s \"%s\"",
                       c->fail_pos.file, c->fail_pos.line, c->fail_pos.col,
                       err != 0 ? "unknown limit_req zone" : "not a limit_req_zone:", c->fail_zone);
            return err != 0 ? err : -EINVAL;
        }
        a->fail_burst = (uint64_t)c->fail_burst * 1000;
        a->fail_status = c->fail_status;
    }
    *out = a;
    return 0;
}

#define AUTH_CONTEXTS (CONF_MAIN | CONF_SERVER | CONF_LOCATION)

static const struct conf_directive auth_basic_directives[] = {
    {.name = "auth_basic",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_auth_basic},
    {.name = "auth_basic_user_file",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 1,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_user_file},
    {.name = "auth_basic_fail_limit",
     .contexts = AUTH_CONTEXTS,
     .min_args = 1,
     .max_args = 3,
     .base = CONF_BASE_MODULE,
     .module_apply = apply_fail_limit},
    {.name = NULL},
};

static const struct http_phase_handler auth_basic_phases[] = {
    {ROUTER_ACCESS, auth_basic_phase},
};

static const struct vars_module_var auth_basic_vars[] = {
    {.name = "remote_user", .get = remote_user},
    {.name = NULL},
};

struct http_module auth_basic_module = {
    .name = "auth_basic",
    .conf =
        {
            .name = "auth_basic",
            .directives = auth_basic_directives,
            .size = sizeof(struct auth_basic_conf),
            .merge = merge,
            .check = check,
            .free = conf_free,
        },
    .build = build,
    .phases = auth_basic_phases,
    .phase_count = 1,
    .slots = 1,
    .release = release,
    .release_on_redirect = false,
    .vars = auth_basic_vars,
};
