/*
 * test_router.c: the router's walk through its phases, without sockets: a
 * fake framer records what the router asks of it (the handler it sets, when
 * it learns the route, the status it answers with), for locations with
 * rewrites, allow/deny, a framer's refusal and internal redirects.
 */
#include "../helpers.h"
#include "proto/modules.h"
#include "proto/policy/access.h"
#include "proto/policy/add_header.h"
#include "proto/policy/error_page.h"
#include "proto/policy/limit.h"
#include "proto/http/module.h"
#include "proto/http/regex.h"
#include "proto/policy/return.h"
#include "proto/policy/rewrite.h"
#include "proto/policy/trace.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/http_conn.h"
#include "proto/tls/acme_challenge.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ fake framer */

/* What the framer saw, in order: "R" routed, "H" set_handler, "Q" a
 * handler's on_request, "B" a response began. */
static struct {
    char trace[32];
    size_t steps;
    unsigned status;
    const struct http_handler *handler;
    bool redirected;
    char target[256]; /* what on_request got */
    char routed_target[256];
    const struct http_location *routed_loc;
    int requests;
} seen;

static void note(char c)
{
    if (seen.steps + 1 < sizeof(seen.trace))
        seen.trace[seen.steps++] = c;
}

static void copy_str(char *to, size_t size, struct http_str s)
{
    size_t n = s.len < size - 1 ? s.len : size - 1;
    memcpy(to, s.data, n);
    to[n] = '\0';
}

static void fake_begin(struct exchange *ex, unsigned status, const char *headers, size_t len,
                       int64_t content_length, struct http_str codings)
{
    (void)ex, (void)headers, (void)len, (void)content_length, (void)codings;
    if (seen.status == 0)
        seen.status = status;
    note('B');
}

static void fake_write(struct exchange *ex, const char *data, size_t len)
{
    (void)ex, (void)data, (void)len;
}

static void fake_end(struct exchange *ex, const char *trailers, size_t len)
{
    (void)ex, (void)trailers, (void)len;
}

static bool fake_started(const struct exchange *ex)
{
    (void)ex;
    return seen.status != 0;
}

static void fake_set_handler(struct exchange *ex, const struct http_handler *handler)
{
    seen.handler = handler;
    seen.redirected = ex->redirected;
    note('H');
}

static void fake_routed(struct exchange *ex, const struct http_request *req)
{
    seen.routed_loc = ex->loc;
    copy_str(seen.routed_target, sizeof(seen.routed_target), req->target);
    note('R');
}

static const struct exchange_ops fake_ops = {
    .begin = fake_begin,
    .write = fake_write,
    .end = fake_end,
    .response_started = fake_started,
    .set_handler = fake_set_handler,
    .routed = fake_routed,
};

/* ------------------------------------------------------------- handlers */

static void content_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)ex, (void)data;
    seen.requests++;
    copy_str(seen.target, sizeof(seen.target), req->target);
    note('Q');
}

static void content_on_body(struct exchange *ex, const char *data, size_t len)
{
    (void)ex, (void)data, (void)len;
}

static const struct http_handler content = {
    .name = "content",
    .on_request = content_on_request,
    .on_body = content_on_body,
};

/* ------------------------------------------------------------- the site */

static struct http_regex *regex(const char *pattern)
{
    struct http_regex *re = NULL;
    char message[128];
    size_t offset;
    ck_assert_int_eq(regex_compile(pattern, false, &re, message, sizeof(message), &offset), 0);
    return re;
}

static struct vars_template *template(const char *text, const struct http_regex *captures)
{
    struct vars_maps maps = {.captures = captures};
    struct vars_template *t = NULL;
    struct vars_error error;
    ck_assert_int_eq(vars_compile(text, &maps, &t, &error), 0);
    return t;
}

enum { LOC_OLD, LOC_NEW, LOC_LOOP, LOC_DENIED, LOC_NAMED, LOC_BREAK, LOC_NAMED_RW, LOC_COUNT };

static struct http_regex *old_re, *loop_re, *break_re, *server_re;
static struct vars_template *old_to, *loop_to, *break_to, *server_to;
static struct http_rewrite old_rule, loop_rule, break_rule, server_rule;
static struct http_rewrites old_rules, loop_rules, break_rules, server_rules;
static struct access_rule deny_all = {.net = {.family = AF_UNSPEC}, .allow = false};
static struct access_conf denied = {.rules = &deny_all, .rule_count = 1};
static struct http_location locs[LOC_COUNT];
static struct http_vhost vhost;

/* What the rewrite module builds for a level: its rules (`n`: which of
 * the arrays). */
static const void *const *rewrites_of(int n, const struct http_rewrites *rules)
{
    static const void *built[8][HTTP_MODULES_MAX];
    built[n][rewrite_module.index] = rules;
    return built[n];
}

/* What the access module builds for a location that denies all. */
static const void *const *denied_built(void)
{
    static const void *built[HTTP_MODULES_MAX];
    built[access_module.index] = &denied;
    return built;
}

static void setup(void)
{
    memset(&seen, 0, sizeof(seen));
    old_re = regex("^/old/(.*)$");
    old_to = template("/new/$1", old_re);
    old_rule =
        (struct http_rewrite){.regex = old_re, .replacement = old_to, .flag = HTTP_REWRITE_LAST};
    old_rules = (struct http_rewrites){&old_rule, 1};
    loop_re = regex("^/loop(.*)$");
    loop_to = template("/loop$1", loop_re);
    loop_rule =
        (struct http_rewrite){.regex = loop_re, .replacement = loop_to, .flag = HTTP_REWRITE_NEXT};
    loop_rules = (struct http_rewrites){&loop_rule, 1};
    break_re = regex("^/break/(.*)$");
    break_to = template("/stay/$1", break_re);
    break_rule = (struct http_rewrite){
        .regex = break_re, .replacement = break_to, .flag = HTTP_REWRITE_BREAK};
    break_rules = (struct http_rewrites){&break_rule, 1};
    server_re = regex("^/legacy/(.*)$");
    server_to = template("/old/$1", server_re);
    server_rule = (struct http_rewrite){
        .regex = server_re, .replacement = server_to, .flag = HTTP_REWRITE_LAST};
    server_rules = (struct http_rewrites){&server_rule, 1};
    /* Prefix locations; "/old/" rewrites only, it has no handler. */
    locs[LOC_OLD] = (struct http_location){
        .path = "/old/", .path_len = 5, .modules = rewrites_of(0, &old_rules)};
    locs[LOC_NEW] = (struct http_location){.path = "/new/", .path_len = 5, .handler = &content};
    locs[LOC_LOOP] = (struct http_location){.path = "/loop",
                                            .path_len = 5,
                                            .handler = &content,
                                            .modules = rewrites_of(1, &loop_rules)};
    locs[LOC_DENIED] = (struct http_location){
        .path = "/denied", .path_len = 7, .handler = &content, .modules = denied_built()};
    locs[LOC_NAMED] = (struct http_location){
        .path = "@fallback", .path_len = 9, .handler = &content, .named = true};
    locs[LOC_BREAK] = (struct http_location){.path = "/break/",
                                             .path_len = 7,
                                             .handler = &content,
                                             .modules = rewrites_of(2, &break_rules)};
    /* A named location whose rewrites send the request elsewhere. */
    locs[LOC_NAMED_RW] = (struct http_location){
        .path = "@rewriting", .path_len = 10, .named = true, .modules = rewrites_of(3, &old_rules)};
    vhost = (struct http_vhost){.locations = locs, .location_count = LOC_COUNT};
}

static void teardown(void)
{
    vars_template_free(old_to);
    vars_template_free(loop_to);
    vars_template_free(break_to);
    vars_template_free(server_to);
    regex_free(old_re);
    regex_free(loop_re);
    regex_free(break_re);
    regex_free(server_re);
}

static struct http_request request(const char *target)
{
    struct http_request req = {.method = {"GET", 3}, .target = {target, strlen(target)}};
    const char *q = strchr(target, '?');
    req.path = (struct http_str){target, q != NULL ? (size_t)(q - target) : strlen(target)};
    return req;
}

/* Routes `target` on a fresh exchange; returns it for a look after. */
static struct exchange route(const char *target, unsigned refuse)
{
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    struct http_request req = request(target);
    router_start(&ex, &vhost, &req, refuse);
    return ex;
}

/* ---------------------------------------------------------------- tests */

/* The framer learns the route, then the handler is set, then it gets the
 * request: with the location found for its path. */
START_TEST(walks_to_the_location_handler)
{
    struct exchange ex = route("/new/page?x=1", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NEW]);
    ck_assert_ptr_eq(seen.routed_loc, &locs[LOC_NEW]);
    ck_assert_ptr_eq(seen.handler, &content);
    ck_assert(!seen.redirected);
    ck_assert_str_eq(seen.target, "/new/page?x=1");
    ck_assert_uint_eq(seen.status, 0);
    router_end(&ex);
}
END_TEST

/* An ACME HTTP-01 challenge being offered is answered on a plain
 * connection before anything of the server (its rewrites and locations),
 * with the key authorization, after the framer learnt the route (its
 * log); not over TLS, not another token, and not once it is withdrawn. */
START_TEST(acme_challenge_before_locations)
{
    const char *path = "/.well-known/acme-challenge/tok_EN-1";
    ck_assert_int_eq(acme_challenge_set("tok_EN-1", "tok_EN-1.thumb"), 0);
    struct http_conn plain = {.tls = false}, tls = {.tls = true};
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    ex.conn = &plain;
    struct http_request req = request(path);
    router_start(&ex, &vhost, &req, 0);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_str_eq(seen.trace, "RB");
    ck_assert_ptr_null(ex.loc);
    ck_assert_int_eq(seen.requests, 0);
    router_end(&ex);

    memset(&seen, 0, sizeof(seen));
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    ex.conn = &tls;
    router_start(&ex, &vhost, &req, 0);
    ck_assert_uint_eq(seen.status, 404); /* no location for it */
    router_end(&ex);

    memset(&seen, 0, sizeof(seen));
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    ex.conn = &plain;
    req = request("/.well-known/acme-challenge/other");
    router_start(&ex, &vhost, &req, 0);
    ck_assert_uint_eq(seen.status, 404);
    router_end(&ex);

    acme_challenge_remove("tok_EN-1");
    memset(&seen, 0, sizeof(seen));
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    ex.conn = &plain;
    req = request(path);
    router_start(&ex, &vhost, &req, 0);
    ck_assert_uint_eq(seen.status, 404);
    router_end(&ex);
}
END_TEST

/* No location: 404, after the framer learnt the route (its log). */
START_TEST(no_location_is_404)
{
    struct exchange ex = route("/nowhere", 0);
    ck_assert_str_eq(seen.trace, "RB");
    ck_assert_ptr_null(ex.loc);
    ck_assert_uint_eq(seen.status, 404);
    router_end(&ex);
}
END_TEST

/* `rewrite ... last` in a location sends the new URI back to the search:
 * the location it finds answers, with the rewritten target, its
 * arguments kept. */
START_TEST(rewrite_last_searches_again)
{
    struct exchange ex = route("/old/a?q=2", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NEW]);
    ck_assert_str_eq(seen.target, "/new/a?q=2");
    /* The framer's log gets the request as the client sent it. */
    ck_assert_str_eq(seen.routed_target, "/old/a?q=2");
    router_end(&ex);
}
END_TEST

/* `set` runs in order with `rewrite`, the server's lines first: a value
 * reads what was set before it and the URI as rewritten so far, a later
 * line reads it, and nothing after a `last` runs.  The values last until
 * the exchange ends, then go. */
START_TEST(set_runs_in_order_with_rewrite)
{
    static const char *const names[] = {"who", "v"};
    struct vars_maps maps = {
        .user_names = names, .user_count = 2, .user_slot = rewrite_module.slot};
    struct vars_template *who_value = NULL, *v_value = NULL, *late_value = NULL, *to = NULL;
    struct vars_error error;
    ck_assert_int_eq(vars_compile("srv-$uri", &maps, &who_value, &error), 0);
    ck_assert_int_eq(vars_compile("[$who]", &maps, &v_value, &error), 0);
    ck_assert_int_eq(vars_compile("late", &maps, &late_value, &error), 0);
    struct http_regex *re = regex("^/set/(.*)$");
    maps.captures = re;
    ck_assert_int_eq(vars_compile("/new/$1?v=$v", &maps, &to, &error), 0);
    struct http_rewrite server_items[] = {
        {.kind = HTTP_STEP_SET, .set_index = 0, .replacement = who_value}};
    struct http_rewrite loc_items[] = {
        {.kind = HTTP_STEP_SET, .set_index = 1, .replacement = v_value},
        {.regex = re, .replacement = to, .flag = HTTP_REWRITE_LAST},
        {.kind = HTTP_STEP_SET, .set_index = 1, .replacement = late_value},
    };
    struct http_rewrites server_set = {server_items, 1}, loc_set = {loc_items, 3};
    struct http_location set_locs[] = {
        {.path = "/set/", .path_len = 5, .modules = rewrites_of(4, &loc_set)},
        {.path = "/new/", .path_len = 5, .handler = &content},
    };
    static const void *server_built[HTTP_MODULES_MAX];
    server_built[rewrite_module.index] = &server_set;
    vhost =
        (struct http_vhost){.locations = set_locs, .location_count = 2, .modules = server_built};
    struct exchange ex = route("/set/x?q=1", 0);
    ck_assert_ptr_eq(ex.loc, &set_locs[1]);
    ck_assert_str_eq(seen.target, "/new/x?v=[srv-/set/x]&q=1");
    struct http_str value;
    ck_assert(vars_user_get(&ex, rewrite_module.slot, 1, &value));
    ck_assert_int_eq((int)value.len, 12);
    ck_assert(memcmp(value.data, "[srv-/set/x]", 12) == 0);
    ck_assert(vars_user_get(&ex, rewrite_module.slot, 0, &value));
    router_end(&ex);
    ck_assert_ptr_null(exchange_ctx(&ex, rewrite_module.slot));
    vars_template_free(who_value);
    vars_template_free(v_value);
    vars_template_free(late_value);
    vars_template_free(to);
    regex_free(re);
}
END_TEST

/* if: a condition false jumps over its block; a return in it answers;
 * a regex's groups reach the set in its block; break stays; and a file
 * test asks the file system.  Steps as the rewrite module builds them for
 *     location /if/ {
 *         if ($request_method = POST) { return 405; }
 *         if ($uri ~ ^/if/(\w+)$) { set $v got-$1; break; }
 *         if (!-f DIR$uri) { rewrite ^ /new/fallback last; }
 *     }                                                              */
START_TEST(if_jumps_over_its_block)
{
    char dir[] = "/tmp/corral-if-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char sub[64], file[96];
    snprintf(sub, sizeof(sub), "%s/if", dir);
    snprintf(file, sizeof(file), "%s/if/a-b", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);

    static const char *const names[] = {"v"};
    struct vars_maps maps = {
        .user_names = names, .user_count = 1, .user_slot = rewrite_module.slot};
    struct http_regex *word = regex("^/if/(\\w+)$"), *any = regex("^");
    struct vars_template *method = template("$request_method", NULL);
    struct vars_template *post = template("POST", NULL), *uri = template("$uri", NULL);
    struct vars_template *to = template("/new/fallback", any), *value = NULL, *path = NULL;
    struct vars_error error;
    maps.captures = word;
    ck_assert_int_eq(vars_compile("got-$1", &maps, &value, &error), 0);
    char path_text[64];
    snprintf(path_text, sizeof(path_text), "%s$uri", dir);
    path = template(path_text, NULL);
    struct http_if is_post = {.op = HTTP_IF_EQUAL, .subject = method, .value = post, .end = 2};
    struct http_if is_word = {.op = HTTP_IF_MATCH, .subject = uri, .regex = word, .end = 5};
    struct http_if no_file = {.op = HTTP_IF_FILE, .negate = true, .subject = path, .end = 7};
    struct http_return refuse = {.status = 405};
    struct http_rewrite steps[] = {
        {.kind = HTTP_STEP_IF, .cond = &is_post},
        {.kind = HTTP_STEP_RETURN, .answer = &refuse},
        {.kind = HTTP_STEP_IF, .cond = &is_word},
        {.kind = HTTP_STEP_SET, .set_index = 0, .replacement = value, .if_groups = true},
        {.kind = HTTP_STEP_BREAK},
        {.kind = HTTP_STEP_IF, .cond = &no_file},
        {.regex = any, .replacement = to, .flag = HTTP_REWRITE_LAST},
    };
    struct http_rewrites rules = {steps, sizeof(steps) / sizeof(steps[0])};
    struct http_location if_locs[] = {
        {.path = "/if/", .path_len = 4, .handler = &content, .modules = rewrites_of(5, &rules)},
        {.path = "/new/", .path_len = 5, .handler = &content},
    };
    vhost = (struct http_vhost){.locations = if_locs, .location_count = 2};

    /* POST: the first block's return */
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    struct http_request req = request("/if/x");
    req.method = (struct http_str){"POST", 4};
    router_start(&ex, &vhost, &req, 0);
    ck_assert_str_eq(seen.trace, "RB");
    ck_assert_uint_eq(seen.status, 405);
    ck_assert_int_eq(seen.requests, 0);
    router_end(&ex);

    /* a word: its group set, then break, in this location */
    memset(&seen, 0, sizeof(seen));
    ex = route("/if/abc?q=1", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_ptr_eq(ex.loc, &if_locs[0]);
    struct http_str got;
    ck_assert(vars_user_get(&ex, rewrite_module.slot, 0, &got));
    ck_assert_int_eq((int)got.len, 7);
    ck_assert(memcmp(got.data, "got-abc", 7) == 0);
    router_end(&ex);

    /* no word, and a file that is there: nothing to do */
    memset(&seen, 0, sizeof(seen));
    ex = route("/if/a-b", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_ptr_eq(ex.loc, &if_locs[0]);
    ck_assert(!vars_user_get(&ex, rewrite_module.slot, 0, &got));
    router_end(&ex);

    /* no word, no file: the rewrite */
    memset(&seen, 0, sizeof(seen));
    ex = route("/if/c-d", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_ptr_eq(ex.loc, &if_locs[1]);
    ck_assert_str_eq(seen.target, "/new/fallback");
    router_end(&ex);

    unlink(file);
    rmdir(sub);
    rmdir(dir);
    vars_template_free(method);
    vars_template_free(post);
    vars_template_free(uri);
    vars_template_free(to);
    vars_template_free(value);
    vars_template_free(path);
    regex_free(word);
    regex_free(any);
}
END_TEST

static int canary_requests;

static void canary_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)ex, (void)req, (void)data;
    canary_requests++;
    note('C');
}

static const struct http_handler canary = {.name = "canary", .on_request = canary_on_request};

/* An if that holds moves the exchange to its block's location, as
 * nginx's ngx_http_script_if_code sets r->loc_conf: that location's
 * handler gets the request, the framer learns it as the route, and the
 * steps after the if go on in order, so a later if that holds moves it
 * again (to its own location, or the location itself for one of rewrite
 * lines only), and a rewrite that searches again leaves it.  Steps as
 * the rewrite module builds them for
 *     location /m/ {
 *         if ($arg_c) { proxy_pass http://canary; }     (its location: canary)
 *         if ($arg_y) { add_header X-Y 1; }             (its own: content)
 *         if ($arg_back) { set $v 1; }                  (the location itself)
 *         if ($arg_go) { rewrite ^ /new/go last; }      (the location itself)
 *         ...
 *     }                                                              */
START_TEST(if_moves_to_its_location)
{
    struct vars_template *c = template("$arg_c", NULL), *y = template("$arg_y", NULL),
                         *back = template("$arg_back", NULL), *go = template("$arg_go", NULL);
    struct http_regex *any = regex("^");
    struct vars_template *to = template("/new/go", any);
    struct http_location m_locs[2] = {
        {.path = "/m/", .path_len = 3, .handler = &content},
        {.path = "/new/", .path_len = 5, .handler = &content},
    };
    struct http_location in_c = {.path = "/m/", .path_len = 3, .handler = &canary};
    struct http_location in_y = {.path = "/m/", .path_len = 3, .handler = &content};
    struct http_if if_c = {.op = HTTP_IF_VALUE, .subject = c, .end = 1, .loc = &in_c};
    struct http_if if_y = {.op = HTTP_IF_VALUE, .subject = y, .end = 2, .loc = &in_y};
    struct http_if if_back = {.op = HTTP_IF_VALUE, .subject = back, .end = 3, .loc = &m_locs[0]};
    struct http_if if_go = {.op = HTTP_IF_VALUE, .subject = go, .end = 5, .loc = &m_locs[0]};
    struct http_rewrite steps[] = {
        {.kind = HTTP_STEP_IF, .cond = &if_c},
        {.kind = HTTP_STEP_IF, .cond = &if_y},
        {.kind = HTTP_STEP_IF, .cond = &if_back},
        {.kind = HTTP_STEP_IF, .cond = &if_go},
        {.regex = any, .replacement = to, .flag = HTTP_REWRITE_LAST},
    };
    struct http_rewrites rules = {steps, sizeof(steps) / sizeof(steps[0])};
    m_locs[0].modules = rewrites_of(6, &rules);
    vhost = (struct http_vhost){.locations = m_locs, .location_count = 2};
    const struct {
        const char *target;
        const struct http_location *loc;
        const char *trace;
    } cases[] = {
        {"/m/a", &m_locs[0], "RHQ"},
        {"/m/a?c=1", &in_c, "RHC"},
        {"/m/a?y=1", &in_y, "RHQ"},
        {"/m/a?c=1&y=1", &in_y, "RHQ"},         /* the later if's location */
        {"/m/a?c=1&back=1", &m_locs[0], "RHQ"}, /* back where it was */
        {"/m/a?c=1&go=1", &m_locs[1], "RHQ"},   /* a new search */
        {"/m/a?c=0", &m_locs[0], "RHQ"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&seen, 0, sizeof(seen));
        canary_requests = 0;
        struct exchange ex = route(cases[i].target, 0);
        ck_assert_msg(strcmp(seen.trace, cases[i].trace) == 0, "%s: %s", cases[i].target,
                      seen.trace);
        ck_assert_msg(ex.loc == cases[i].loc, "%s", cases[i].target);
        ck_assert_ptr_eq(seen.routed_loc, cases[i].loc);
        ck_assert_int_eq(canary_requests, cases[i].loc == &in_c);
        router_end(&ex);
    }
    vars_template_free(c);
    vars_template_free(y);
    vars_template_free(back);
    vars_template_free(go);
    vars_template_free(to);
    regex_free(any);
}
END_TEST

/* `break` stays in the location, its URI rewritten. */
START_TEST(rewrite_break_stays)
{
    struct exchange ex = route("/break/b", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_ptr_eq(ex.loc, &locs[LOC_BREAK]);
    ck_assert_str_eq(seen.target, "/stay/b");
    router_end(&ex);
}
END_TEST

/* A URI that keeps changing is a loop: 500 after the bounded searches,
 * and no handler gets it. */
START_TEST(rewrite_loop_is_500)
{
    struct exchange ex = route("/loop/x", 0);
    ck_assert_uint_eq(seen.status, 500);
    ck_assert_int_eq(seen.requests, 0);
    ck_assert_ptr_null(seen.handler);
    router_end(&ex);
}
END_TEST

/* The server's rewrites run before the first search. */
START_TEST(server_rewrite_runs_first)
{
    vhost.modules = rewrites_of(4, &server_rules);
    struct exchange ex = route("/legacy/c", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NEW]); /* legacy -> old -> new */
    ck_assert_str_eq(seen.target, "/new/c");
    router_end(&ex);
}
END_TEST

/* allow/deny answers 403 before the limits and the handler. */
START_TEST(access_denies_before_content)
{
    struct exchange ex = route("/denied/x", 0);
    ck_assert_str_eq(seen.trace, "RB");
    ck_assert_uint_eq(seen.status, 403);
    ck_assert_int_eq(seen.requests, 0);
    router_end(&ex);
}
END_TEST

/* The framer's refusal (413) is answered once the location is known. */
START_TEST(refusal_is_answered_at_the_location)
{
    struct exchange ex = route("/new/big", 413);
    ck_assert_str_eq(seen.trace, "RB");
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NEW]);
    ck_assert_uint_eq(seen.status, 413);
    ck_assert_int_eq(seen.requests, 0);
    router_end(&ex);
}
END_TEST

/* An internal redirect walks again, from the search or in a named
 * location; the framer hears of the route once, and the handler set is
 * told that no body comes. */
START_TEST(redirect_walks_again)
{
    struct exchange ex = route("/new/first", 0);
    ck_assert_str_eq(seen.trace, "RHQ");
    struct http_request req = request("/old/second");
    router_redirect(&ex, &req, NULL);
    ck_assert_str_eq(seen.trace, "RHQHQ");
    ck_assert(seen.redirected);
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NEW]);
    ck_assert_str_eq(seen.target, "/new/second");
    req = request("/anything");
    router_redirect(&ex, &req, &locs[LOC_NAMED]);
    ck_assert_str_eq(seen.trace, "RHQHQHQ");
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NAMED]);
    ck_assert_str_eq(seen.target, "/anything");
    /* A named location's rewrites run, as in nginx. */
    req = request("/old/third");
    router_redirect(&ex, &req, &locs[LOC_NAMED_RW]);
    ck_assert_str_eq(seen.trace, "RHQHQHQHQ");
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NEW]);
    ck_assert_str_eq(seen.target, "/new/third");
    router_end(&ex);
}
END_TEST

/* What the old location set for its response goes with a redirect: the
 * page's location sets its own. */
START_TEST(redirect_releases_the_location_state)
{
    struct exchange ex = route("/new/first", 0);
    static const struct http_add_headers rules = {.count = 0};
    add_header_set_rules(&ex, &rules);
    ck_assert_ptr_eq(add_header_rules(&ex), &rules);
    ck_assert(exchange_has_filter(&ex, add_header_module.filter->order));
    struct http_request req = request("/new/second");
    router_redirect(&ex, &req, NULL);
    ck_assert_ptr_null(add_header_rules(&ex));
    ck_assert(!exchange_has_filter(&ex, add_header_module.filter->order));
    /* The trace's state is the exchange's (its server span spans the
     * redirect), not the location's. */
    for (size_t i = 0; i < EXCHANGE_CTX_SLOTS; i++)
        if (i != trace_module.slot)
            ck_assert_ptr_null(ex.ctx[i]);
    router_end(&ex);
    ck_assert_ptr_null(ex.ctx[trace_module.slot]);
}
END_TEST

/* A phase handler's verdicts: the walk goes on in its phase after
 * DECLINED, skips the rest of its phase after NEXT, stops after DONE;
 * router_resume() goes on from a phase. */
START_TEST(resume_goes_on_from_the_phase)
{
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex._ops = &fake_ops;
    ex.vhost = &vhost;
    ex.loc = &locs[LOC_NEW];
    struct http_request req = request("/new/held");
    ck_assert(router_resume(&ex, &req, ROUTER_LIMITS));
    ck_assert_str_eq(seen.trace, "RHQ");
    ck_assert_str_eq(seen.target, "/new/held");
    router_end(&ex);
}
END_TEST

/* The phases are in order, each handler in its phase's group; within a
 * phase the modules' handlers run in the list's order, framed by the
 * router's own. */
static size_t step_of(router_phase_fn fn, enum router_phase phase)
{
    for (size_t i = 0; i < router_table.step_count; i++)
        if (router_table.steps[i].fn == fn && router_table.steps[i].phase == phase)
            return i;
    ck_abort_msg("no such step");
    return 0;
}

START_TEST(steps_are_in_phase_order)
{
    size_t n = router_table.step_count;
    ck_assert_uint_gt(n, 0);
    for (size_t i = 1; i < n; i++)
        ck_assert_int_le(router_table.steps[i - 1].phase, router_table.steps[i].phase);
    ck_assert(router_table.steps[n - 1].fn == router_content);
    ck_assert_uint_lt(step_of(error_page_phase, ROUTER_SERVER_REWRITE),
                      step_of(rewrite_server_phase, ROUTER_SERVER_REWRITE));
    size_t find = step_of(router_find_location, ROUTER_FIND_LOCATION);
    ck_assert_uint_lt(find, step_of(error_page_phase, ROUTER_FIND_LOCATION));
    ck_assert_uint_lt(step_of(error_page_phase, ROUTER_FIND_LOCATION),
                      step_of(router_refuse, ROUTER_FIND_LOCATION));
}
END_TEST

/* A site whose config has no allow/deny or real_ip walks without the
 * access phase's handler, but still sets the client's address (the
 * peer module has no configuration); one without error_page or limits,
 * without theirs. */
static bool table_has(const struct router_table *t, router_phase_fn fn)
{
    for (size_t i = 0; i < t->step_count; i++)
        if (t->steps[i].fn == fn)
            return true;
    return false;
}

START_TEST(unused_modules_leave_the_steps)
{
    uint32_t unused = UINT32_C(1) << access_module.index | UINT32_C(1) << error_page_module.index |
                      UINT32_C(1) << limit_module.index;
    static struct router_table without;
    http_module_table(&without, modules_list, modules_count, UINT32_MAX & ~unused);
    ck_assert(table_has(&router_table, access_phase));
    ck_assert(table_has(&router_table, error_page_phase));
    ck_assert(table_has(&router_table, limit_phase));
    ck_assert(table_has(&without, access_peer_phase));
    ck_assert(!table_has(&without, access_phase));
    ck_assert(!table_has(&without, error_page_phase));
    ck_assert(!table_has(&without, limit_phase));
}
END_TEST

/* A module's phase handler runs in its phase: the registry takes any
 * list of modules. */
static int seen_phase_calls;
static int count_phase(struct router_walk *w)
{
    (void)w;
    seen_phase_calls++;
    return 418;
}

START_TEST(module_phase_handler_runs)
{
    static const struct http_phase_handler phases[] = {{ROUTER_ACCESS, count_phase}};
    static struct http_module teapot = {.name = "teapot", .phases = phases, .phase_count = 1};
    struct http_module *const list[] = {&teapot, &access_module};
    http_module_init(list, 2);
    ck_assert(router_table.answer == NULL); /* no add_header in this list */
    struct exchange ex = route("/new/page", 0);
    ck_assert_ptr_eq(ex.loc, &locs[LOC_NEW]);
    ck_assert_int_eq(seen_phase_calls, 1);
    ck_assert_uint_eq(seen.status, 418);
    ck_assert_ptr_null(seen.handler);
    router_end(&ex);
}
END_TEST

static int jit_warnings;

static void count_jit_warnings(enum corral_log_level level, const char *message, void *arg)
{
    (void)arg;
    if (level == CORRAL_LOG_WARN && strstr(message, "PCRE2's JIT is unavailable") != NULL)
        jit_warnings++;
}

#ifndef PR_SET_MDWE
#define PR_SET_MDWE              65
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

/* Where memory may not be written and executed (systemd's
 * MemoryDenyWriteExecute), PCRE2's JIT fails: regexes still match, in its
 * interpreter, and the log says so once. */
START_TEST(regexes_without_the_jit_match_and_say_so_once)
{
    if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0L, 0L, 0L) != 0) {
        fprintf(stderr, "PR_SET_MDWE: %s, skipped\n", strerror(errno));
        return;
    }
    corral_set_logger(count_jit_warnings, NULL);
    struct http_regex *a = regex("^/a/(\\d+)$"), *b = regex("\\.png$");
    corral_set_logger(NULL, NULL);
    ck_assert_int_eq(jit_warnings, 1);
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    ck_assert_int_gt(regex_match(a, "/a/42", 5, ovector), 0);
    ck_assert_int_le(regex_match(b, "/x.gif", 6, ovector), 0);
    regex_free(a);
    regex_free(b);
}
END_TEST

/* ------------------------------------------------------- server names */

static struct http_regex *caseless(const char *pattern)
{
    struct http_regex *re = NULL;
    char message[128];
    size_t offset;
    ck_assert_int_eq(regex_compile(pattern, true, &re, message, sizeof(message), &offset), 0);
    return re;
}

static size_t vhost_for(const struct http_site *site, const char *host)
{
    return (size_t)(site_find_vhost(site, host, strlen(host)) - site->vhosts);
}

/* nginx's order: the exact name; the longest leading wildcard; the
 * longest trailing one; the first regex in the config's order (not the
 * vhosts', whose default comes first), matched caseless on the host
 * lowercased; else the default.  A regex's groups are variables, named
 * and numbered, read from the host of the exchange's vhost. */
START_TEST(server_names_in_nginx_order)
{
    static const char *const n_default[] = {"default.example"};
    static const char *const n_leading[] = {"*.example.com"};
    static const char *const n_longer[] = {"*.b.example.com"};
    static const char *const n_trailing[] = {"www.example.*"};
    static const char *const n_exact[] = {"a.example.com"};
    static const char *const n_later[] = {"~^(?<sub>.+)\\.example\\.net$"};
    static const char *const n_first[] = {"~^www\\.", "~^(?<sub>[a-z]+)\\.example\\.net$"};
    const struct http_regex *later[] = {caseless("^(?<sub>.+)\\.example\\.net$")};
    const struct http_regex *first[] = {caseless("^www\\."),
                                        caseless("^(?<sub>[a-z]+)\\.example\\.net$")};
    struct http_vhost vhosts[] = {
        {.names = n_default, .name_count = 1, .stats_slot = 6},
        {.names = n_later,
         .name_count = 1,
         .name_regexes = later,
         .name_regex_count = 1,
         .stats_slot = 5},
        {.names = n_leading, .name_count = 1, .stats_slot = 0},
        {.names = n_longer, .name_count = 1, .stats_slot = 1},
        {.names = n_trailing, .name_count = 1, .stats_slot = 2},
        {.names = n_exact, .name_count = 1, .stats_slot = 3},
        {.names = n_first,
         .name_count = 2,
         .name_regexes = first,
         .name_regex_count = 2,
         .stats_slot = 4},
    };
    struct http_site site = {.vhosts = vhosts, .vhost_count = 7};
    ck_assert_uint_eq(vhost_for(&site, "a.example.com"), 5);
    ck_assert_uint_eq(vhost_for(&site, "A.Example.COM"), 5);
    ck_assert_uint_eq(vhost_for(&site, "x.b.example.com"), 3);
    ck_assert_uint_eq(vhost_for(&site, "x.example.com"), 2);
    ck_assert_uint_eq(vhost_for(&site, "example.com"), 0);
    ck_assert_uint_eq(vhost_for(&site, "www.example.org"), 4); /* not the regex ^www\. */
    ck_assert_uint_eq(vhost_for(&site, "www.example"), 6);     /* the regex: ".*" needs more */
    ck_assert_uint_eq(vhost_for(&site, "foo.example.net"), 6); /* first in the config */
    ck_assert_uint_eq(vhost_for(&site, "FOO.Example.NET"), 6);
    ck_assert_uint_eq(vhost_for(&site, "1.example.net"), 1);
    ck_assert_uint_eq(vhost_for(&site, "nothing"), 0);

    /* $sub and $1 in that server's values */
    struct vars_maps maps = {.host_regexes = first, .host_regex_count = 2};
    struct vars_template *t = NULL;
    struct vars_error error;
    ck_assert_int_eq(vars_compile("[$sub|$1|$2]", &maps, &t, &error), 0);
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    ex.vhost = &vhosts[6];
    struct http_request req = request("/");
    req.host = (struct http_str){"Foo.example.net", 15};
    struct vars_ctx ctx = {.ex = &ex, .req = &req};
    char buf[64];
    size_t len = vars_eval_into(t, &ctx, buf, sizeof(buf));
    ck_assert_str_eq((buf[len] = '\0', buf), "[foo|foo|]");
    /* A host none of its regexes matches (its vhost picked otherwise). */
    req.host = (struct http_str){"www.example.org", 15};
    len = vars_eval_into(t, &ctx, buf, sizeof(buf));
    ck_assert_str_eq((buf[len] = '\0', buf), "[||]");
    vars_template_free(t);
    /* Where the location has a regex, $1 is the location's. */
    struct http_regex *loc_re = regex("^/(x)$");
    maps.captures = loc_re;
    ck_assert_int_eq(vars_compile("$1", &maps, &t, &error), 0);
    ck_assert(vars_template_uses_captures(t));
    vars_template_free(t);
    /* A name no regex has is unknown. */
    maps.captures = NULL;
    ck_assert_int_eq(vars_compile("$nosuch", &maps, &t, &error), -EINVAL);
    regex_free(loc_re);
    regex_free((struct http_regex *)later[0]);
    regex_free((struct http_regex *)first[0]);
    regex_free((struct http_regex *)first[1]);
}
END_TEST

Suite *test_suite(void)
{
    modules_init(); /* the router's steps and the filters' places, before the forks */
    Suite *suite = suite_create("proto/router");
    TCase *tc = tcase_create("walk");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, walks_to_the_location_handler);
    tcase_add_test(tc, acme_challenge_before_locations);
    tcase_add_test(tc, if_jumps_over_its_block);
    tcase_add_test(tc, if_moves_to_its_location);
    tcase_add_test(tc, unused_modules_leave_the_steps);
    tcase_add_test(tc, no_location_is_404);
    tcase_add_test(tc, rewrite_last_searches_again);
    tcase_add_test(tc, rewrite_break_stays);
    tcase_add_test(tc, set_runs_in_order_with_rewrite);
    tcase_add_test(tc, server_names_in_nginx_order);
    tcase_add_test(tc, rewrite_loop_is_500);
    tcase_add_test(tc, server_rewrite_runs_first);
    tcase_add_test(tc, access_denies_before_content);
    tcase_add_test(tc, refusal_is_answered_at_the_location);
    tcase_add_test(tc, redirect_walks_again);
    tcase_add_test(tc, redirect_releases_the_location_state);
    tcase_add_test(tc, resume_goes_on_from_the_phase);
    tcase_add_test(tc, steps_are_in_phase_order);
    tcase_add_test(tc, module_phase_handler_runs);
    suite_add_tcase(suite, tc);
    /* Without the fixture: the JIT must not have made its memory yet. */
    tc = tcase_create("regex");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, regexes_without_the_jit_match_and_say_so_once);
    suite_add_tcase(suite, tc);
    return suite;
}
