/*
 * proxy_redirect.c: the rewriting of a proxied response's Location and
 * Refresh headers by a location's proxy_redirect lines, as nginx's
 * ngx_http_proxy_rewrite_redirect(): the first line that matches wins.
 */
#include "proto/upstream/proxy_redirect.h"

#include "proto/http/regex.h"

#include <string.h>
#include <strings.h>

/* One rule against `value`: true when it matched, the new value in `out`
 * after `value`'s first `prefix` bytes (`whole`). */
static bool rewrite_one(const struct proxy_redirect *rule, struct http_str whole, size_t prefix,
                        struct vars_ctx *ctx, struct vars_buf *out)
{
    struct http_str value = {whole.data + prefix, whole.len - prefix};
    if (rule->regex != NULL) {
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        int pairs = regex_match(rule->regex, value.data, value.len, ovector);
        if (pairs <= 0) /* no match, or PCRE2 gave up: the value goes on as it is */
            return false;
        const char *subject = ctx->subject;
        const size_t *saved = ctx->ovector;
        size_t count = ctx->capture_count;
        ctx->subject = value.data;
        ctx->ovector = ovector;
        ctx->capture_count = (size_t)pairs;
        vars_buf_add(out, whole.data, prefix);
        vars_eval(rule->replacement, ctx, out);
        ctx->subject = subject;
        ctx->ovector = saved;
        ctx->capture_count = count;
        return true;
    }
    struct http_str text = rule->text;
    char small[256];
    struct vars_buf pattern;
    vars_buf_init(&pattern, small, sizeof(small));
    if (rule->pattern != NULL) {
        vars_eval(rule->pattern, ctx, &pattern);
        text = (struct http_str){pattern.data, pattern.len};
    }
    /* Case-sensitive, as nginx's; an empty pattern matches any value. */
    bool match = !pattern.failed && text.len <= value.len &&
                 (text.len == 0 || memcmp(value.data, text.data, text.len) == 0);
    if (match) {
        vars_buf_add(out, whole.data, prefix);
        vars_eval(rule->replacement, ctx, out);
        vars_buf_add(out, value.data + text.len, value.len - text.len);
    }
    vars_buf_free(&pattern);
    return match;
}

bool proxy_redirect_value(const struct proxy_redirects *rules, struct http_str value, size_t prefix,
                          struct vars_ctx *ctx, struct vars_buf *out)
{
    if (rules == NULL || prefix > value.len)
        return false;
    for (size_t i = 0; i < rules->count; i++)
        if (rewrite_one(&rules->items[i], value, prefix, ctx, out))
            return true;
    return false;
}

/* Where the URL of a Refresh value ("5; url=/next") starts, as nginx
 * finds it: after the first "url=" in any case; 0 with none. */
static size_t refresh_url(struct http_str value)
{
    for (size_t i = 0; i + 4 <= value.len; i++)
        if (strncasecmp(value.data + i, "url=", 4) == 0)
            return i + 4;
    return 0;
}

bool proxy_redirect_header(const struct proxy_redirects *rules, struct http_str name,
                           struct http_str value, struct vars_ctx *ctx, struct vars_buf *out)
{
    if (http_str_equal_nocase(name, "location"))
        return proxy_redirect_value(rules, value, 0, ctx, out);
    if (!http_str_equal_nocase(name, "refresh"))
        return false;
    size_t url = refresh_url(value);
    return url > 0 && proxy_redirect_value(rules, value, url, ctx, out);
}
