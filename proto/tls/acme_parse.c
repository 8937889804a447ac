/*
 * acme_parse.c: the ACME server's JSON answers (RFC 8555 §7.1), read as
 * hostile input: bounded in size and depth, every field used checked for
 * its type and length, URLs required to be http(s), tokens base64url.
 * Fields this client does not use are ignored.
 */
#include "proto/tls/acme.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Longer strings than these are not URLs, tokens or names an ACME server
 * sends: refused rather than copied. */
#define URL_MAX   2048
#define TOKEN_MAX 256
#define TEXT_MAX  1024

static int refuse(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* The JSON object in `body`, or NULL with `why`. */
static json_t *parse_object(const char *body, size_t len, char *why, size_t why_len)
{
    if (len > ACME_RESPONSE_LIMIT) {
        refuse(why, why_len, "the answer is larger than %d bytes", ACME_RESPONSE_LIMIT);
        return NULL;
    }
    json_error_t err;
    /* jansson bounds nesting itself (JSON_PARSER_MAX_DEPTH). */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL) {
        refuse(why, why_len, "not JSON: %s", err.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        refuse(why, why_len, "not a JSON object");
        return NULL;
    }
    return root;
}

enum field { OPTIONAL, REQUIRED };

/* A copy of string member `name` of `obj` into *out (at most `max`
 * bytes, no NUL inside): 0, or -EINVAL with `why` when it is there but is
 * not such a string, or is required and missing. */
static int string_field(json_t *obj, const char *name, enum field need, size_t max, char **out,
                        char *why, size_t why_len)
{
    *out = NULL;
    json_t *v = json_object_get(obj, name);
    if (v == NULL)
        return need == REQUIRED ? refuse(why, why_len, "no \"%s\"", name) : 0;
    if (!json_is_string(v))
        return refuse(why, why_len, "\"%s\" is not a string", name);
    size_t len = json_string_length(v);
    const char *s = json_string_value(v);
    if (len > max || memchr(s, '\0', len) != NULL)
        return refuse(why, why_len, "\"%s\" is too long or holds a NUL", name);
    *out = strdup(s);
    return *out != NULL ? 0 : -ENOMEM;
}

/* Whether `s` is a URL this client may fetch: https:// or http://,
 * nothing else. */
static bool is_http_url(const char *s)
{
    return strncmp(s, "https://", 8) == 0 || strncmp(s, "http://", 7) == 0;
}

/* As string_field(), for a URL (is_http_url()). */
static int url_field(json_t *obj, const char *name, enum field need, char **out, char *why,
                     size_t why_len)
{
    int err = string_field(obj, name, need, URL_MAX, out, why, why_len);
    if (err == 0 && *out != NULL && !is_http_url(*out)) {
        free(*out);
        *out = NULL;
        return refuse(why, why_len, "\"%s\" is not an http(s) URL", name);
    }
    return err;
}

static const char *const status_names[] = {
    [ACME_STATUS_PENDING] = "pending",         [ACME_STATUS_READY] = "ready",
    [ACME_STATUS_PROCESSING] = "processing",   [ACME_STATUS_VALID] = "valid",
    [ACME_STATUS_INVALID] = "invalid",         [ACME_STATUS_EXPIRED] = "expired",
    [ACME_STATUS_DEACTIVATED] = "deactivated", [ACME_STATUS_REVOKED] = "revoked",
};

static int status_field(json_t *obj, enum acme_status *out, char *why, size_t why_len)
{
    json_t *v = json_object_get(obj, "status");
    if (!json_is_string(v))
        return refuse(why, why_len, "\"status\" is missing or not a string");
    *out = ACME_STATUS_UNKNOWN;
    for (size_t i = 1; i < sizeof(status_names) / sizeof(status_names[0]); i++)
        if (strcmp(json_string_value(v), status_names[i]) == 0)
            *out = (enum acme_status)i;
    return 0;
}

static int problem_from(json_t *obj, struct acme_problem *out, char *why, size_t why_len)
{
    *out = (struct acme_problem){0};
    int err = string_field(obj, "type", OPTIONAL, TEXT_MAX, &out->type, why, why_len);
    if (err == 0)
        err = string_field(obj, "detail", OPTIONAL, TEXT_MAX, &out->detail, why, why_len);
    if (err != 0)
        acme_problem_free(out);
    return err;
}

/* The optional problem document in member "error" of `obj` (an order's,
 * a challenge's: `what` says whose in `why`) into *out. */
static int error_field(json_t *obj, const char *what, struct acme_problem *out, char *why,
                       size_t why_len)
{
    json_t *problem = json_object_get(obj, "error");
    if (problem == NULL)
        return 0;
    if (!json_is_object(problem))
        return refuse(why, why_len, "%s\"error\" is not an object", what);
    return problem_from(problem, out, why, why_len);
}

void acme_problem_free(struct acme_problem *p)
{
    free(p->type);
    free(p->detail);
    *p = (struct acme_problem){0};
}

int acme_parse_problem(const char *body, size_t len, struct acme_problem *out, char *why,
                       size_t why_len)
{
    *out = (struct acme_problem){0};
    json_t *root = parse_object(body, len, why, why_len);
    if (root == NULL)
        return -EINVAL;
    int err = problem_from(root, out, why, why_len);
    json_decref(root);
    return err;
}

void acme_directory_free(struct acme_directory *d)
{
    free(d->new_nonce);
    free(d->new_account);
    free(d->new_order);
    free(d->terms_of_service);
    free(d->renewal_info);
    *d = (struct acme_directory){0};
}

int acme_parse_directory(const char *body, size_t len, struct acme_directory *out, char *why,
                         size_t why_len)
{
    *out = (struct acme_directory){0};
    json_t *root = parse_object(body, len, why, why_len);
    if (root == NULL)
        return -EINVAL;
    int err = url_field(root, "newNonce", REQUIRED, &out->new_nonce, why, why_len);
    if (err == 0)
        err = url_field(root, "newAccount", REQUIRED, &out->new_account, why, why_len);
    if (err == 0)
        err = url_field(root, "newOrder", REQUIRED, &out->new_order, why, why_len);
    if (err == 0)
        err = url_field(root, "renewalInfo", OPTIONAL, &out->renewal_info, why, why_len);
    json_t *meta = json_object_get(root, "meta");
    if (err == 0 && meta != NULL && !json_is_object(meta))
        err = refuse(why, why_len, "\"meta\" is not an object");
    if (err == 0 && meta != NULL)
        /* Shown to the operator, never fetched: any string (pebble's is a
         * data: URL). */
        err = string_field(meta, "termsOfService", OPTIONAL, URL_MAX, &out->terms_of_service, why,
                           why_len);
    json_t *eab = meta != NULL ? json_object_get(meta, "externalAccountRequired") : NULL;
    if (err == 0 && eab != NULL && !json_is_boolean(eab))
        err = refuse(why, why_len, "\"externalAccountRequired\" is not a boolean");
    out->external_account_required = err == 0 && json_is_true(eab);
    json_decref(root);
    if (err != 0)
        acme_directory_free(out);
    return err;
}

/* Digits at `*p`, exactly `n` of them, as a number in *out. */
static bool digits(const char **p, int n, int *out)
{
    *out = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return false;
        *out = *out * 10 + (**p - '0');
    }
    return true;
}

int acme_parse_time(const char *text, time_t *out)
{
    /* RFC 3339: YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM) */
    const char *p = text;
    int year, mon, day, hour, min, sec, off_h = 0, off_m = 0, sign = 0;
    if (!digits(&p, 4, &year) || *p++ != '-' || !digits(&p, 2, &mon) || *p++ != '-' ||
        !digits(&p, 2, &day) || (*p != 'T' && *p != 't'))
        return -EINVAL;
    p++;
    if (!digits(&p, 2, &hour) || *p++ != ':' || !digits(&p, 2, &min) || *p++ != ':' ||
        !digits(&p, 2, &sec))
        return -EINVAL;
    if (*p == '.') { /* fractions of a second: dropped */
        p++;
        size_t n = strspn(p, "0123456789");
        if (n == 0 || n > 9)
            return -EINVAL;
        p += n;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p++ == '+' ? 1 : -1;
        if (!digits(&p, 2, &off_h) || *p++ != ':' || !digits(&p, 2, &off_m) || off_h > 23 ||
            off_m > 59)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    /* A leap second (60) is read as the next second, as timegm() would. */
    if (*p != '\0' || year < 1970 || mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 ||
        min > 59 || sec > 60)
        return -EINVAL;
    struct tm tm = {.tm_year = year - 1900,
                    .tm_mon = mon - 1,
                    .tm_mday = day,
                    .tm_hour = hour,
                    .tm_min = min,
                    .tm_sec = sec};
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || tm.tm_mday != day) /* 31 February */
        return -EINVAL;
    *out = t - sign * (off_h * 3600 + off_m * 60);
    return 0;
}

int acme_parse_renewal_info(const char *body, size_t len, struct acme_renewal_info *out, char *why,
                            size_t why_len)
{
    *out = (struct acme_renewal_info){0};
    json_t *root = parse_object(body, len, why, why_len);
    if (root == NULL)
        return -EINVAL;
    json_t *window = json_object_get(root, "suggestedWindow");
    int err = 0;
    char *start = NULL, *end = NULL;
    if (!json_is_object(window))
        err = refuse(why, why_len, "\"suggestedWindow\" is missing or not an object");
    if (err == 0)
        err = string_field(window, "start", REQUIRED, TEXT_MAX, &start, why, why_len);
    if (err == 0)
        err = string_field(window, "end", REQUIRED, TEXT_MAX, &end, why, why_len);
    if (err == 0 &&
        (acme_parse_time(start, &out->start) != 0 || acme_parse_time(end, &out->end) != 0))
        err = refuse(why, why_len, "\"suggestedWindow\" holds a time that is not RFC 3339");
    /* RFC 9773 §4.2: a window whose end is not after its start is invalid. */
    if (err == 0 && out->end <= out->start)
        err = refuse(why, why_len, "\"suggestedWindow\" ends before it starts");
    if (err == 0)
        err = string_field(root, "explanationURL", OPTIONAL, URL_MAX, &out->explanation, why,
                           why_len);
    free(start);
    free(end);
    json_decref(root);
    if (err != 0)
        acme_renewal_info_free(out);
    return err;
}

void acme_renewal_info_free(struct acme_renewal_info *r)
{
    free(r->explanation);
    *r = (struct acme_renewal_info){0};
}

int acme_parse_account(const char *body, size_t len, struct acme_account *out, char *why,
                       size_t why_len)
{
    *out = (struct acme_account){0};
    json_t *root = parse_object(body, len, why, why_len);
    if (root == NULL)
        return -EINVAL;
    int err = status_field(root, &out->status, why, why_len);
    json_decref(root);
    return err;
}

void acme_order_free(struct acme_order *o)
{
    for (size_t i = 0; i < o->authorization_count; i++)
        free(o->authorizations[i]);
    free(o->authorizations);
    free(o->finalize);
    free(o->certificate);
    acme_problem_free(&o->error);
    *o = (struct acme_order){0};
}

int acme_parse_order(const char *body, size_t len, struct acme_order *out, char *why,
                     size_t why_len)
{
    *out = (struct acme_order){0};
    json_t *root = parse_object(body, len, why, why_len);
    if (root == NULL)
        return -EINVAL;
    int err = status_field(root, &out->status, why, why_len);
    if (err == 0)
        err = url_field(root, "finalize", REQUIRED, &out->finalize, why, why_len);
    if (err == 0)
        err = url_field(root, "certificate", OPTIONAL, &out->certificate, why, why_len);
    json_t *list = json_object_get(root, "authorizations");
    if (err == 0 && !json_is_array(list))
        err = refuse(why, why_len, "\"authorizations\" is missing or not an array");
    size_t n = err == 0 ? json_array_size(list) : 0;
    if (err != 0)
        goto out;
    if (n == 0 || n > ACME_AUTHZ_LIMIT) {
        err = refuse(why, why_len, "%zu authorizations", n);
        goto out;
    }
    if ((out->authorizations = calloc(n, sizeof(char *))) == NULL)
        err = -ENOMEM;
    for (size_t i = 0; err == 0 && i < n; i++) {
        json_t *v = json_array_get(list, i);
        if (!json_is_string(v) || json_string_length(v) > URL_MAX ||
            !is_http_url(json_string_value(v)))
            err = refuse(why, why_len, "authorization %zu is not a URL", i);
        else if ((out->authorizations[i] = strdup(json_string_value(v))) == NULL)
            err = -ENOMEM;
        else
            out->authorization_count = i + 1;
    }
    if (err == 0)
        err = error_field(root, "", &out->error, why, why_len);
out:
    json_decref(root);
    if (err != 0)
        acme_order_free(out);
    return err;
}

static bool is_base64url(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_'))
            return false;
    return true;
}

void acme_authorization_free(struct acme_authorization *a)
{
    free(a->identifier);
    for (size_t i = 0; i < a->challenge_count; i++) {
        free(a->challenges[i].type);
        free(a->challenges[i].url);
        free(a->challenges[i].token);
        acme_problem_free(&a->challenges[i].error);
    }
    *a = (struct acme_authorization){0};
}

static int challenge_from(json_t *obj, struct acme_challenge *c, char *why, size_t why_len)
{
    if (!json_is_object(obj))
        return refuse(why, why_len, "a challenge is not an object");
    int err = string_field(obj, "type", REQUIRED, TEXT_MAX, &c->type, why, why_len);
    if (err == 0)
        err = url_field(obj, "url", REQUIRED, &c->url, why, why_len);
    if (err == 0)
        err = status_field(obj, &c->status, why, why_len);
    /* A type this client does not answer may carry no token at all. */
    if (err == 0)
        err = string_field(obj, "token", OPTIONAL, TOKEN_MAX, &c->token, why, why_len);
    if (err == 0 && c->token != NULL && (c->token[0] == '\0' || !is_base64url(c->token)))
        err = refuse(why, why_len, "a challenge token is not base64url");
    if (err == 0)
        err = error_field(obj, "a challenge's ", &c->error, why, why_len);
    return err;
}

int acme_parse_authorization(const char *body, size_t len, struct acme_authorization *out,
                             char *why, size_t why_len)
{
    *out = (struct acme_authorization){0};
    json_t *root = parse_object(body, len, why, why_len);
    if (root == NULL)
        return -EINVAL;
    int err = status_field(root, &out->status, why, why_len);
    json_t *id = json_object_get(root, "identifier");
    if (err == 0 && !json_is_object(id))
        err = refuse(why, why_len, "\"identifier\" is missing or not an object");
    json_t *type = err == 0 ? json_object_get(id, "type") : NULL;
    if (err == 0 && (!json_is_string(type) || strcmp(json_string_value(type), "dns") != 0))
        err = refuse(why, why_len, "the identifier is not of type \"dns\"");
    if (err == 0)
        err = string_field(id, "value", REQUIRED, 253, &out->identifier, why, why_len);
    json_t *wildcard = err == 0 ? json_object_get(root, "wildcard") : NULL;
    if (err == 0 && wildcard != NULL && !json_is_boolean(wildcard))
        err = refuse(why, why_len, "\"wildcard\" is not a boolean");
    out->wildcard = json_is_true(wildcard);
    json_t *list = err == 0 ? json_object_get(root, "challenges") : NULL;
    if (err == 0 && !json_is_array(list))
        err = refuse(why, why_len, "\"challenges\" is missing or not an array");
    if (err == 0 && json_array_size(list) > ACME_CHALLENGE_LIMIT)
        err = refuse(why, why_len, "%zu challenges", json_array_size(list));
    for (size_t i = 0; err == 0 && i < json_array_size(list); i++) {
        out->challenge_count = i + 1; /* freed with the rest on failure */
        err = challenge_from(json_array_get(list, i), &out->challenges[i], why, why_len);
    }
    json_decref(root);
    if (err != 0)
        acme_authorization_free(out);
    return err;
}

const struct acme_challenge *acme_authorization_challenge(const struct acme_authorization *authz,
                                                          const char *type)
{
    for (size_t i = 0; i < authz->challenge_count; i++)
        if (strcmp(authz->challenges[i].type, type) == 0 && authz->challenges[i].token != NULL)
            return &authz->challenges[i];
    return NULL;
}
