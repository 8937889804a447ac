/*
 * test_compress.c: the compress module without sockets: its directives
 * as conf/ parses and inherits them, and its filters through the router
 * and the fake framer (fake_framer.h): which responses are coded and
 * which are left alone, the head a coded response gets (HEAD's too),
 * the choice among codings, gzip_proxied, and bodies written in many
 * pieces and flushed, decoded with the real decoders byte for byte.
 */
#include "../helpers.h"
#include "compress_decode.h"
#include "conf/config.h"
#include "fake_framer.h"
#include "proto/compress/compress.h"
#include "proto/http/module.h"
#include "proto/http/regex.h"
#include "proto/modules.h"
#include "proto/policy/add_header.h"
#include "proto/policy/server_timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ----------------------------------------------------------- the config */

static void *test_calloc_early(void *arena, size_t count, size_t size)
{
    (void)arena;
    return calloc(count, size);
}

static struct conf_config *parse(const char *text, struct conf_error *error)
{
    struct conf_config *config = NULL;
    if (conf_parse("test.conf", text, strlen(text), NULL, NULL, &config, error) != 0)
        return NULL;
    return config;
}

static const struct compress_conf *conf_of(const void *block)
{
    const struct compress_conf *conf = conf_module_conf(block, &compress_module.conf);
    ck_assert_ptr_nonnull(conf);
    return conf;
}

/* nginx's defaults; a level takes what its parent says unless it says
 * otherwise, each setting on its own. */
START_TEST(directives_default_and_inherit)
{
    struct conf_error error;
    struct conf_config *config =
        parse("gzip on; gzip_types text/css Application/JSON; gzip_comp_level 5;\n"
              "gzip_proxied expired no-cache; brotli_min_length 1k;\n"
              "server { listen 127.0.0.1:8080; zstd on; gzip_vary on;\n"
              "  location /a { gzip off; zstd_types *; zstd_comp_level 19; return 200; }\n"
              "  location /b { brotli on; brotli_comp_level 11; return 200; } }\n",
              &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    const struct compress_conf *top = conf_of(config->modules);
    ck_assert(top->coding[COMPRESS_GZIP].on);
    ck_assert(!top->coding[COMPRESS_BR].on);
    ck_assert_uint_eq(top->coding[COMPRESS_GZIP].level, 5);
    ck_assert_uint_eq(top->coding[COMPRESS_BR].level, 3);
    ck_assert_uint_eq(top->coding[COMPRESS_ZSTD].level, 1);
    ck_assert_uint_eq(top->coding[COMPRESS_GZIP].min_length, 20);
    ck_assert_uint_eq(top->coding[COMPRESS_BR].min_length, 1024);
    ck_assert_uint_eq(top->proxied, COMPRESS_PROXIED_EXPIRED | COMPRESS_PROXIED_NO_CACHE);
    ck_assert(!top->vary);
    ck_assert_uint_eq(top->http_version, 11);
    ck_assert(compress_conf_takes(&top->coding[COMPRESS_GZIP], "application/json", 16));
    ck_assert(compress_conf_takes(&top->coding[COMPRESS_GZIP], "TEXT/CSS", 8));
    ck_assert(compress_conf_takes(&top->coding[COMPRESS_GZIP], "text/html", 9));
    ck_assert(!compress_conf_takes(&top->coding[COMPRESS_GZIP], "text/plain", 10));
    ck_assert(!compress_conf_takes(&top->coding[COMPRESS_BR], "text/css", 8));
    const struct compress_conf *a = conf_of(config->servers[0].locations[0].modules);
    ck_assert(!a->coding[COMPRESS_GZIP].on);
    ck_assert(a->coding[COMPRESS_ZSTD].on);
    ck_assert(a->vary);
    ck_assert_uint_eq(a->coding[COMPRESS_ZSTD].level, 19);
    ck_assert(compress_conf_takes(&a->coding[COMPRESS_ZSTD], "image/png", 9));
    ck_assert(compress_conf_takes(&a->coding[COMPRESS_GZIP], "text/css", 8));
    const struct compress_conf *b = conf_of(config->servers[0].locations[1].modules);
    ck_assert(b->coding[COMPRESS_GZIP].on && b->coding[COMPRESS_BR].on &&
              b->coding[COMPRESS_ZSTD].on);
    ck_assert_uint_eq(b->coding[COMPRESS_BR].level, 11);
    ck_assert_uint_eq(b->coding[COMPRESS_GZIP].level, 5);
    ck_assert_uint_eq(b->proxied, COMPRESS_PROXIED_EXPIRED | COMPRESS_PROXIED_NO_CACHE);
    conf_free(config);

    config = parse("gzip_buffers 32 4k; gzip_http_version 1.0; gzip_disable \"msie6\" curl;\n"
                   "server { listen 127.0.0.1:8080; location / { return 200; }\n"
                   "  location /b { gzip_disable Wget; return 200; } }\n",
                   &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    top = conf_of(config->modules);
    ck_assert(!top->coding[COMPRESS_GZIP].on);
    ck_assert_uint_eq(top->proxied, COMPRESS_PROXIED_OFF);
    ck_assert_uint_eq(top->http_version, 10);
    ck_assert_uint_eq(top->disable_count, 2);
    ck_assert_str_eq(top->disable[1], "curl");
    const struct compress_conf *loc_a = conf_of(config->servers[0].locations[0].modules);
    ck_assert_uint_eq(loc_a->disable_count, 2);
    ck_assert_str_eq(loc_a->disable[0], "msie6");
    const struct compress_conf *loc_b = conf_of(config->servers[0].locations[1].modules);
    ck_assert_uint_eq(loc_b->disable_count, 1);
    ck_assert_str_eq(loc_b->disable[0], "Wget");
    conf_free(config);
}
END_TEST

/* gunzip and gunzip_buffers: off and 4 KB pieces (nginx's 32 4k) unless
 * written; inherited. */
START_TEST(gunzip_directives)
{
    struct conf_error error;
    struct conf_config *config = parse("gunzip on;\n"
                                       "server { listen 127.0.0.1:8080; gunzip_buffers 16 8k;\n"
                                       "  location /a { gunzip off; return 200; }\n"
                                       "  location /b { return 200; } }\n",
                                       &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    const struct compress_conf *top = conf_of(config->modules);
    ck_assert(top->gunzip);
    ck_assert_uint_eq(top->gunzip_piece, 4096);
    const struct compress_conf *a = conf_of(config->servers[0].locations[0].modules);
    ck_assert(!a->gunzip);
    ck_assert_uint_eq(a->gunzip_piece, 8192);
    const struct compress_conf *b = conf_of(config->servers[0].locations[1].modules);
    ck_assert(b->gunzip);
    ck_assert_uint_eq(b->gunzip_piece, 8192);
    /* gunzip alone builds the module: its filter is on there. */
    struct http_module_build mb = {.calloc = test_calloc_early};
    const void *out = NULL;
    ck_assert_int_eq(compress_conf_build(b, &mb, &out), 0);
    ck_assert_ptr_nonnull(out);
    ck_assert(((const struct compress_built *)out)->on);
    free((void *)out);
    ck_assert_int_eq(compress_conf_build(a, &mb, &out), 0);
    ck_assert_ptr_null(out);
    conf_free(config);
}
END_TEST

START_TEST(directive_errors)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"gzip maybe;", "test.conf:1:6: invalid value \"maybe\" (expected on or off)"},
        {"gzip_comp_level 10;",
         "test.conf:1:17: \"gzip_comp_level\" must be from 1 to 9, got \"10\""},
        {"brotli_comp_level 12;",
         "test.conf:1:19: \"brotli_comp_level\" must be from 0 to 11, got \"12\""},
        {"zstd_comp_level 0;",
         "test.conf:1:17: \"zstd_comp_level\" must be from 1 to 19, got \"0\""},
        {"gzip_types text;", "test.conf:1:12: invalid MIME type \"text\""},
        {"gzip_types text/html;\ngzip_types text/css;",
         "test.conf:2:1: duplicate \"gzip_types\" (first at line 1)"},
        {"gzip_proxied sometimes;",
         "test.conf:1:14: unknown gzip_proxied value \"sometimes\" (expected off, expired, "
         "no-cache, no-store, private, no_last_modified, no_etag, auth or any)"},
        {"gzip_http_version 2;", "test.conf:1:19: invalid value \"2\" (expected 1.0 or 1.1)"},
        {"gzip_buffers 32 lots;", "test.conf:1:17: invalid size \"lots\""},
        {"gunzip_buffers 32 0;", "test.conf:1:19: invalid size \"0\""},
        {"gunzip_buffers 0 4k;",
         "test.conf:1:16: \"gunzip_buffers\" number must be at least 1, got \"0\""},
        {"gunzip_buffers 1 2m;", "test.conf:1:18: size \"2m\" too large (at most 1048576)"},
        {"gunzip yes;", "test.conf:1:8: invalid value \"yes\" (expected on or off)"},
        {"upstream u { server 127.0.0.1:1; gzip on; }",
         "test.conf:1:34: \"gzip\" is not allowed in upstream (it belongs at top level or in "
         "server or location)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct conf_error error;
        ck_assert_msg(parse(cases[i].text, &error) == NULL, "%s parsed", cases[i].text);
        ck_assert_str_eq(error.text, cases[i].message);
    }
}
END_TEST

/* --------------------------------------------------------- the site */

/* What the handler answers: a head, then the body given in `pieces`
 * pieces (or none), unless `hold` leaves the exchange open for the test
 * to drive. */
static struct {
    unsigned status;
    const char *headers;
    int64_t length; /* -2: the body's own */
    const char *body;
    size_t body_len; /* 0: strlen(body) */
    bool hold;
    struct exchange *ex;
    int drains; /* on_drain calls */
} answer;

static void answer_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req, (void)data;
    answer.ex = ex;
    const char *body = answer.body != NULL ? answer.body : "";
    size_t body_len = answer.body_len != 0 ? answer.body_len : strlen(body);
    int64_t length = answer.length == -2 ? (int64_t)body_len : answer.length;
    exchange_begin(ex, answer.status, answer.headers, strlen(answer.headers), length);
    if (answer.hold)
        return;
    exchange_write(ex, body, body_len);
    exchange_end(ex);
}

static void answer_on_drain(struct exchange *ex)
{
    (void)ex;
    answer.drains++;
}

static const struct http_handler answer_handler = {
    .name = "answer",
    .on_request = answer_on_request,
    .on_drain = answer_on_drain,
};

static struct compress_conf conf;
static struct compress_built conf_built;
static const void *built[HTTP_MODULES_MAX];
static struct http_location loc;
static struct http_vhost vhost;
static char *css_types[] = {"text/css"};

static void setup(void)
{
    char message[64];
    memset(&conf, 0, sizeof(conf));
    compress_conf_init(&conf);
    ck_assert_int_eq(compress_conf_merge(&conf, NULL, message, sizeof(message)), 0);
    conf.coding[COMPRESS_GZIP].on = true;
    conf.coding[COMPRESS_GZIP].types = css_types;
    conf.coding[COMPRESS_GZIP].type_count = 1;
    conf_built = (struct compress_built){.conf = &conf, .on = true};
    built[compress_module.index] = &conf_built;
    loc = (struct http_location){
        .path = "/", .path_len = 1, .handler = &answer_handler, .modules = built};
    vhost = (struct http_vhost){.locations = &loc, .location_count = 1};
    answer.status = 200;
    answer.headers = "Content-Type: text/html; charset=utf-8\r\n";
    answer.length = -2;
    answer.body = "<p>hello hello hello hello hello hello hello hello</p>";
    answer.body_len = 0;
    answer.hold = false;
    answer.ex = NULL;
    answer.drains = 0;
}

static struct exchange ex;
static bool http10; /* the next request_with() is an HTTP/1.0 one */

/* Routes a request with `headers` (NULL-terminated name, value pairs)
 * through the router; `end`: and ends the exchange (router_end()). */
static void request_with(const char *method, const char *const *headers, bool end)
{
    ex = fake_exchange();
    struct http_header list[8];
    size_t n = 0;
    for (; headers != NULL && headers[2 * n] != NULL; n++)
        list[n] = (struct http_header){{headers[2 * n], strlen(headers[2 * n])},
                                       {headers[2 * n + 1], strlen(headers[2 * n + 1])}};
    struct http_request req = {.method = {method, strlen(method)},
                               .target = {"/x", 2},
                               .path = {"/x", 2},
                               .headers = list,
                               .header_count = n,
                               .head = strcmp(method, "HEAD") == 0,
                               .http10 = http10};
    router_start(&ex, &vhost, &req, 0);
    if (end)
        router_end(&ex);
}

static void request(const char *accept)
{
    const char *headers[] = {"Accept-Encoding", accept, NULL};
    request_with("GET", accept != NULL ? headers : NULL, true);
}

static bool has_line(const char *line)
{
    return strstr(fake_seen.headers, line) != NULL;
}

/* The body as it reached the framer, decoded with `coding`. */
static void check_body_decodes(enum compress_coding coding, const char *expected)
{
    struct compress_decoder *d = compress_decoder_new(coding);
    ck_assert(compress_decoder_feed(d, fake_seen.body, fake_seen.body_len));
    ck_assert(compress_decoder_done(d));
    size_t len;
    const char *out = compress_decoder_output(d, &len);
    ck_assert_uint_eq(len, strlen(expected));
    ck_assert(memcmp(out, expected, len) == 0);
    compress_decoder_free(d);
}

static void check_untouched(void)
{
    ck_assert_int_eq(fake_seen.content_length, (int64_t)strlen(answer.body));
    ck_assert_str_eq(fake_seen.headers, answer.headers);
    ck_assert_str_eq(fake_seen.body, answer.body);
    ck_assert_int_eq(fake_seen.ends, 1);
}

/* A client that takes gzip gets the body coded, without a length, with
 * Content-Encoding; the whole of it decodes to the original. */
START_TEST(coded_when_accepted)
{
    request("gzip");
    ck_assert_uint_eq(fake_seen.status, 200);
    ck_assert_int_eq(fake_seen.content_length, -1);
    ck_assert(has_line("Content-Type: text/html; charset=utf-8\r\n"));
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    ck_assert(!has_line("Vary"));
    ck_assert_int_eq(fake_seen.ends, 1);
    check_body_decodes(COMPRESS_GZIP, answer.body);
    /* The stream is gone with the end. */
    ck_assert_ptr_null(exchange_ctx(&ex, compress_module.slot));
}
END_TEST

/* No Accept-Encoding, or one without gzip: as it was. */
START_TEST(left_alone_without_acceptance)
{
    request(NULL);
    check_untouched();
    request("br;q=1, gzip;q=0");
    check_untouched();
    /* Nor where the module is off: the location built nothing. */
    built[compress_module.index] = NULL;
    request("gzip");
    check_untouched();
}
END_TEST

/* gzip_vary: Vary wherever the response could be coded, the client
 * taking it or not (nginx); not where it could not be, nor twice. */
START_TEST(vary_where_it_could_be_coded)
{
    conf.vary = true;
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n"));
    request(NULL);
    ck_assert_str_eq(fake_seen.headers,
                     "Content-Type: text/html; charset=utf-8\r\nVary: Accept-Encoding\r\n");
    ck_assert_int_eq(fake_seen.content_length, (int64_t)strlen(answer.body));
    ck_assert_str_eq(fake_seen.body, answer.body);
    answer.headers = "Content-Type: image/png\r\n";
    request("gzip");
    check_untouched();
    answer.headers = "Content-Type: text/html\r\nVary: Accept-Encoding, Cookie\r\n";
    request("gzip");
    ck_assert_str_eq(fake_seen.headers, "Content-Type: text/html\r\nVary: Accept-Encoding, "
                                        "Cookie\r\nContent-Encoding: gzip\r\n");
}
END_TEST

/* What nginx leaves alone, and no-transform (RFC 9110 7.7) besides. */
START_TEST(left_alone_by_the_head)
{
    static const char *const heads[] = {
        "Content-Type: text/html\r\nContent-Encoding: br\r\n",
        "Content-Type: text/html\r\nContent-Encoding: identity\r\n",
        "Content-Type: text/html\r\nCache-Control: public, no-transform\r\n",
        "Content-Type: text/plain\r\n",
        "Content-Type: application/json\r\n",
        "X-No-Type: 1\r\n",
    };
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        answer.headers = heads[i];
        request("gzip");
        check_untouched();
    }
    answer.headers = "Content-Type: text/html\r\n";
    static const unsigned statuses[] = {201, 206, 301, 500, 503};
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        answer.status = statuses[i];
        request("gzip");
        ck_assert_uint_eq(fake_seen.status, statuses[i]);
        check_untouched();
    }
    /* 403 and 404 are coded, as nginx does. */
    answer.status = 404;
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    check_body_decodes(COMPRESS_GZIP, answer.body);
}
END_TEST

/* gzip_types: text/html always, the listed types, "*" any; parameters
 * and case do not count. */
START_TEST(types_decide)
{
    answer.headers = "content-type: TEXT/CSS ;charset=x\r\n";
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    conf.coding[COMPRESS_GZIP].any_type = true;
    answer.headers = "Content-Type: image/svg+xml\r\n";
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    answer.headers = "X-No-Type: 1\r\n";
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
}
END_TEST

/* gzip_min_length against a length the head gives; an unknown length
 * is coded whatever it turns out to be. */
START_TEST(min_length_decides)
{
    conf.coding[COMPRESS_GZIP].min_length = strlen(answer.body) + 1;
    request("gzip");
    check_untouched();
    conf.coding[COMPRESS_GZIP].min_length = strlen(answer.body);
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    conf.coding[COMPRESS_GZIP].min_length = 1000000;
    answer.length = -1;
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    check_body_decodes(COMPRESS_GZIP, answer.body);
}
END_TEST

/* A coded body is not the same bytes: a strong ETag turns weak, a weak
 * one stays, one that is no entity-tag goes (nginx), and so does
 * Accept-Ranges. */
START_TEST(head_of_a_coded_response)
{
    answer.headers = "Content-Type: text/html\r\nETag: \"abc\"\r\nAccept-Ranges: bytes\r\n"
                     "Last-Modified: Sat, 05 Dec 2026 08:00:00 GMT\r\n";
    request("gzip");
    ck_assert_str_eq(fake_seen.headers,
                     "Content-Type: text/html\r\nETag: W/\"abc\"\r\n"
                     "Last-Modified: Sat, 05 Dec 2026 08:00:00 GMT\r\nContent-Encoding: gzip\r\n");
    answer.headers = "Content-Type: text/html\r\nETag: W/\"abc\"\r\n";
    request("gzip");
    ck_assert_str_eq(fake_seen.headers,
                     "Content-Type: text/html\r\nETag: W/\"abc\"\r\nContent-Encoding: gzip\r\n");
    answer.headers = "Content-Type: text/html\r\nETag: abc\r\n";
    request("gzip");
    ck_assert_str_eq(fake_seen.headers, "Content-Type: text/html\r\nContent-Encoding: gzip\r\n");
}
END_TEST

/* HEAD gets the head GET would, and no body is coded: the filter steps
 * aside at once, holding nothing. */
START_TEST(head_request_gets_the_get_head)
{
    conf.vary = true;
    answer.hold = true;
    const char *headers[] = {"Accept-Encoding", "gzip", NULL};
    request_with("HEAD", headers, false);
    ck_assert_str_eq(fake_seen.headers, "Content-Type: text/html; charset=utf-8\r\n"
                                        "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n");
    ck_assert_int_eq(fake_seen.content_length, -1);
    ck_assert_ptr_null(exchange_ctx(&ex, compress_module.slot));
    ck_assert(!exchange_has_filter(&ex, compress_module.filter->order));
    exchange_end(&ex);
    ck_assert_int_eq(fake_seen.ends, 1);
    ck_assert_uint_eq(fake_seen.body_len, 0);
    router_end(&ex);
}
END_TEST

/* Higher q first, then zstd > br > gzip; a coding whose types do not
 * take the response passes to the next. */
START_TEST(choice_among_codings)
{
    conf.coding[COMPRESS_BR].on = true;
    conf.coding[COMPRESS_ZSTD].on = true;
    request("gzip, br, zstd");
    ck_assert(has_line("Content-Encoding: zstd\r\n"));
    check_body_decodes(COMPRESS_ZSTD, answer.body);
    request("gzip, br");
    ck_assert(has_line("Content-Encoding: br\r\n"));
    check_body_decodes(COMPRESS_BR, answer.body);
    request("zstd;q=0.5, br;q=0.7, gzip;q=0.9");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    check_body_decodes(COMPRESS_GZIP, answer.body);
    request("*");
    ck_assert(has_line("Content-Encoding: zstd\r\n"));
    /* text/css is gzip's only */
    answer.headers = "Content-Type: text/css\r\n";
    request("zstd, br, gzip;q=0.1");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    request("zstd, br");
    check_untouched();
}
END_TEST

/* A response already carrying transfer codings of a backend's is passed
 * on as it is. */
static void begin_coded_on_request(struct exchange *e, const struct http_request *req, void *data)
{
    (void)req, (void)data;
    exchange_begin_coded(e, 200, "Content-Type: text/html\r\n", 25, -1,
                         (struct http_str){"gzip", 4});
    exchange_write(e, "xyz", 3);
    exchange_end(e);
}

START_TEST(transfer_coded_left_alone)
{
    static const struct http_handler coded = {.name = "coded",
                                              .on_request = begin_coded_on_request};
    loc.handler = &coded;
    request("gzip");
    ck_assert_str_eq(fake_seen.headers, "Content-Type: text/html\r\n");
    ck_assert_str_eq(fake_seen.body, "xyz");
}
END_TEST

/* gzip_proxied, nginx's rules, for a request with Via. */
START_TEST(proxied_requests)
{
    const char *via[] = {"Accept-Encoding", "gzip", "Via", "1.1 cache", NULL};
    const char *via_auth[] = {"Accept-Encoding", "gzip", "Via", "1.1 cache",
                              "Authorization",   "x",    NULL};
    conf.vary = true;
    /* off (the default): not coded, but it varies */
    request_with("GET", via, true);
    ck_assert(!has_line("Content-Encoding"));
    ck_assert(has_line("Vary: Accept-Encoding\r\n"));
    ck_assert_str_eq(fake_seen.body, answer.body);
    conf.proxied = COMPRESS_PROXIED_ANY;
    request_with("GET", via, true);
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    conf.proxied = COMPRESS_PROXIED_AUTH;
    request_with("GET", via_auth, true);
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    answer.headers = "Content-Type: text/html\r\nCache-Control: max-age=60\r\n";
    request_with("GET", via, true);
    ck_assert(!has_line("Content-Encoding"));
    conf.proxied = COMPRESS_PROXIED_EXPIRED;
    answer.headers = "Content-Type: text/html\r\nExpires: Thu, 01 Jan 1970 00:00:00 GMT\r\n";
    request_with("GET", via, true);
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    answer.headers = "Content-Type: text/html\r\nExpires: Fri, 01 Jan 2100 00:00:00 GMT\r\n";
    request_with("GET", via, true);
    ck_assert(!has_line("Content-Encoding"));
    answer.headers = "Content-Type: text/html\r\nExpires: 0\r\n";
    request_with("GET", via, true);
    ck_assert(!has_line("Content-Encoding"));
    conf.proxied = COMPRESS_PROXIED_NO_CACHE | COMPRESS_PROXIED_PRIVATE;
    answer.headers = "Content-Type: text/html\r\nCache-Control: private=\"x\", max-age=0\r\n";
    request_with("GET", via, true);
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    answer.headers = "Content-Type: text/html\r\nCache-Control: no-store\r\n";
    request_with("GET", via, true);
    ck_assert(!has_line("Content-Encoding"));
    /* Neither Expires nor Cache-Control: Last-Modified and ETag decide. */
    conf.proxied = COMPRESS_PROXIED_NO_LM | COMPRESS_PROXIED_NO_ETAG;
    answer.headers = "Content-Type: text/html\r\n";
    request_with("GET", via, true);
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    answer.headers = "Content-Type: text/html\r\nETag: \"1\"\r\n";
    request_with("GET", via, true);
    ck_assert(!has_line("Content-Encoding"));
}
END_TEST

/* What the module's build gets to compile gzip_disable's regexes. */
static struct http_regex *compiled[4];
static size_t compiled_count;

static void *test_calloc(void *arena, size_t count, size_t size)
{
    (void)arena;
    return calloc(count, size);
}

static int test_regex(void *arena, const char *pattern, bool caseless, const struct conf_pos *pos,
                      const char *directive, const struct http_regex **out)
{
    (void)arena, (void)pos, (void)directive;
    char message[128];
    size_t offset;
    ck_assert_uint_lt(compiled_count, 4);
    int err = regex_compile(pattern, caseless, &compiled[compiled_count], message, sizeof(message),
                            &offset);
    ck_assert_msg(err == 0, "%s: %s", pattern, message);
    *out = compiled[compiled_count++];
    return 0;
}

/* gzip_disable, as the build compiles it: a User-Agent one of its
 * regexes takes (caseless) gets no coding, but the Vary all the same, as
 * in nginx; "msie6" is nginx's: MSIE 4 to 6 but 6's SV1 builds. */
START_TEST(disabled_by_user_agent)
{
    char *patterns[] = {"^curl/", "msie6"};
    struct conf_pos pos[2] = {{"t", 1, 1}, {"t", 1, 2}};
    conf.disable = patterns;
    conf.disable_pos = pos;
    conf.disable_count = 2;
    conf.vary = true;
    struct http_module_build b = {.calloc = test_calloc, .regex = test_regex};
    const void *out;
    ck_assert_int_eq(compress_conf_build(&conf, &b, &out), 0);
    struct compress_built *made = (struct compress_built *)out;
    ck_assert_ptr_eq(made->conf, &conf);
    ck_assert_uint_eq(made->disable_count, 2);
    built[compress_module.index] = made;
    static const struct {
        const char *agent;
        bool coded;
    } cases[] = {
        {"CURL/8.0", false},
        {"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)", false},
        {"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)", true},
        {"Mozilla/4.0 (compatible; MSIE 5.5; Windows 98)", false},
        {"Mozilla/5.0 (compatible; MSIE 10.0)", true},
        {"Wget/1.21", true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *headers[] = {"User-Agent", cases[i].agent, "Accept-Encoding", "gzip", NULL};
        request_with("GET", headers, true);
        ck_assert_msg(has_line("Content-Encoding: gzip\r\n") == cases[i].coded, "%s: %s",
                      cases[i].agent, fake_seen.headers);
        ck_assert(has_line("Vary: Accept-Encoding\r\n"));
    }
    /* Where every coding is off the build gives nothing. */
    conf.coding[COMPRESS_GZIP].on = false;
    const void *none;
    ck_assert_int_eq(compress_conf_build(&conf, &b, &none), 0);
    ck_assert_ptr_null(none);
    for (size_t i = 0; i < compiled_count; i++)
        regex_free(compiled[i]);
    free(made->disable);
    free(made);
}
END_TEST

/* gzip_http_version: an HTTP/1.0 request gets no coding under its
 * default 1.1, only its Vary (nginx); under 1.0 it is coded. */
START_TEST(http_version_decides)
{
    conf.vary = true;
    const char *headers[] = {"Accept-Encoding", "gzip", NULL};
    http10 = true;
    request_with("GET", headers, true);
    ck_assert(!has_line("Content-Encoding"));
    ck_assert(has_line("Vary: Accept-Encoding\r\n"));
    ck_assert_str_eq(fake_seen.body, answer.body);
    conf.http_version = 10;
    request_with("GET", headers, true);
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    check_body_decodes(COMPRESS_GZIP, answer.body);
    conf.http_version = 11;
    http10 = false;
    request_with("GET", headers, true);
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
}
END_TEST

/* A body of 2 MB written in many pieces, flushed now and then, in each
 * coding: before the end, after each flush, everything written so far
 * decodes; the whole decodes byte for byte; splicing is refused while the
 * body is coded. */
START_TEST(streamed_and_flushed)
{
    const size_t total = 2u << 20;
    char *body = malloc(total + 1);
    ck_assert_ptr_nonnull(body);
    uint32_t x = 7;
    for (size_t i = 0; i < total; i++) {
        x = x * 1103515245u + 12345u;
        body[i] = i % 50 < 35 ? "lorem ipsum dolor sit amet "[i % 27] : (char)('a' + (x >> 27));
    }
    body[total] = '\0';
    answer.length = -1;
    answer.hold = true;
    static const enum compress_coding codings[] = {COMPRESS_GZIP, COMPRESS_BR, COMPRESS_ZSTD};
    static const char *const accept[] = {"gzip", "br", "zstd"};
    for (int c = 0; c < 3; c++) {
        conf.coding[codings[c]].on = true;
        const char *headers[] = {"Accept-Encoding", accept[c], NULL};
        request_with("GET", headers, false);
        char line[64];
        snprintf(line, sizeof(line), "Content-Encoding: %s\r\n", accept[c]);
        ck_assert(has_line(line));
        ck_assert(exchange_wants_flush(&ex));
        ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), -EOPNOTSUPP);
        struct compress_decoder *d = compress_decoder_new(codings[c]);
        size_t at = 0, fed = 0;
        for (unsigned i = 0; at < total; i++) {
            size_t piece = 1 + (i * 104729u) % 30000u;
            if (piece > total - at)
                piece = total - at;
            exchange_write(&ex, body + at, piece);
            at += piece;
            if (i % 17 == 0) {
                exchange_flush(&ex);
                ck_assert(compress_decoder_feed(d, fake_seen.body + fed, fake_seen.body_len - fed));
                fed = fake_seen.body_len;
                size_t len;
                const char *out = compress_decoder_output(d, &len);
                ck_assert_msg(len == at, "%s: %zu decoded of %zu", accept[c], len, at);
                ck_assert(memcmp(out, body, at) == 0);
            }
        }
        /* Without a flush, the coder holds some back. */
        ck_assert(fake_seen.body_len < total);
        exchange_end(&ex);
        ck_assert(compress_decoder_feed(d, fake_seen.body + fed, fake_seen.body_len - fed));
        ck_assert(compress_decoder_done(d));
        size_t len;
        const char *out = compress_decoder_output(d, &len);
        ck_assert_uint_eq(len, total);
        ck_assert(memcmp(out, body, total) == 0);
        compress_decoder_free(d);
        router_end(&ex);
        conf.coding[codings[c]].on = false;
    }
    free(body);
}
END_TEST

/* An exchange cut off mid-body lets go of its stream when it ends (the
 * sanitizer build's leak check sees it otherwise), and one whose filter
 * stepped aside splices again. */
START_TEST(released_when_cut_off)
{
    answer.hold = true;
    answer.length = -1;
    const char *headers[] = {"Accept-Encoding", "gzip", NULL};
    request_with("GET", headers, false);
    exchange_write(&ex, "abc", 3);
    ck_assert_ptr_nonnull(exchange_ctx(&ex, compress_module.slot));
    router_end(&ex);
    ck_assert_ptr_null(exchange_ctx(&ex, compress_module.slot));
    answer.headers = "Content-Type: image/png\r\n";
    request_with("GET", headers, false);
    ck_assert(!exchange_wants_flush(&ex));
    ck_assert_int_eq(exchange_splice(&ex, NULL, 10, NULL, NULL), 0);
    router_end(&ex);
}
END_TEST

/* ----------------------------------------------------------- gunzip */

/* `len` bytes at `data` gzip-coded, in `members` members (malloc'd). */
static char *gzip_of(const char *data, size_t len, int members, size_t *out_len)
{
    size_t cap = len + 64 * (size_t)members + 1024, at = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    for (int m = 0; m < members; m++) {
        size_t from = len * (size_t)m / (size_t)members,
               to = len * (size_t)(m + 1) / (size_t)members;
        z_stream z = {0};
        ck_assert_int_eq(deflateInit2(&z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
        z.next_in = (Bytef *)(uintptr_t)(data + from);
        z.avail_in = (uInt)(to - from);
        z.next_out = (Bytef *)out + at;
        z.avail_out = (uInt)(cap - at);
        ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
        at = cap - z.avail_out;
        deflateEnd(&z);
    }
    *out_len = at;
    return out;
}

static const char gunzip_text[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness, it was the epoch of belief, it was the epoch of "
    "incredulity, it was the season of Light, it was the season of Darkness.\n";

static char *gunzip_coded;

/* A backend's gzip-coded answer under gunzip. */
static void gunzip_setup(void)
{
    setup();
    conf.coding[COMPRESS_GZIP].on = false;
    conf.gunzip = true;
    conf.gunzip_piece = 16; /* many pieces, even for a short body */
    size_t len;
    gunzip_coded = gzip_of(gunzip_text, strlen(gunzip_text), 1, &len);
    answer.headers = "Content-Type: text/plain\r\nContent-Encoding: gzip\r\nETag: \"e1\"\r\n"
                     "Accept-Ranges: bytes\r\nVary: Cookie\r\n";
    answer.body = gunzip_coded;
    answer.body_len = len;
}

static void gunzip_teardown(void)
{
    free(gunzip_coded);
    gunzip_coded = NULL;
}

static void check_plain_body(const char *expected, size_t len)
{
    ck_assert_uint_eq(fake_seen.body_len, len);
    ck_assert(memcmp(fake_seen.body, expected, len) == 0);
}

/* A client that does not take gzip gets the body decoded, with the head
 * nginx's gunzip gives: no Content-Encoding, length or Accept-Ranges, a
 * weak ETag, the backend's Vary kept; `Vary: Accept-Encoding` under
 * gzip_vary. */
START_TEST(gunzip_decodes_for_a_client_without_gzip)
{
    request(NULL);
    ck_assert_uint_eq(fake_seen.status, 200);
    ck_assert_str_eq(fake_seen.headers,
                     "Content-Type: text/plain\r\nETag: W/\"e1\"\r\nVary: Cookie\r\n");
    ck_assert_int_eq(fake_seen.content_length, -1);
    check_plain_body(gunzip_text, strlen(gunzip_text));
    ck_assert_int_gt(fake_seen.writes, 10); /* in pieces of gunzip_buffers' size */
    ck_assert_int_eq(fake_seen.ends, 1);
    ck_assert_int_eq(fake_seen.aborts, 0);
    ck_assert_ptr_null(exchange_ctx(&ex, compress_module.slot));
    request("br, gzip;q=0");
    check_plain_body(gunzip_text, strlen(gunzip_text));
    conf.vary = true;
    request("identity");
    ck_assert_str_eq(fake_seen.headers, "Content-Type: text/plain\r\nETag: W/\"e1\"\r\nVary: "
                                        "Cookie\r\nVary: Accept-Encoding\r\n");
    check_plain_body(gunzip_text, strlen(gunzip_text));
    /* gzip_http_version: an HTTP/1.0 client takes no gzip. */
    http10 = true;
    request("gzip");
    http10 = false;
    check_plain_body(gunzip_text, strlen(gunzip_text));
}
END_TEST

/* A client that takes gzip gets the coded body as it is (with the Vary
 * under gzip_vary); so does everyone where gunzip is off, and a
 * response whose coding is not gzip alone, or a 206. */
START_TEST(gunzip_leaves_alone)
{
    request("gzip");
    ck_assert_str_eq(fake_seen.headers, answer.headers);
    ck_assert_int_eq(fake_seen.content_length, (int64_t)answer.body_len);
    check_plain_body(answer.body, answer.body_len);
    conf.vary = true;
    request("gzip");
    ck_assert(has_line("Content-Encoding: gzip\r\n"));
    ck_assert(has_line("Vary: Accept-Encoding\r\n"));
    check_plain_body(answer.body, answer.body_len);
    conf.vary = false;
    static const char *const heads[] = {
        "Content-Type: text/plain\r\nContent-Encoding: br\r\n",
        "Content-Type: text/plain\r\nContent-Encoding: gzip, br\r\n",
        "Content-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Encoding: br\r\n",
        "Content-Type: text/plain\r\n",
    };
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        answer.headers = heads[i];
        request(NULL);
        ck_assert_str_eq(fake_seen.headers, heads[i]);
        check_plain_body(answer.body, answer.body_len);
    }
    answer.headers = "Content-Type: text/plain\r\nContent-Encoding: gzip\r\n";
    answer.status = 206;
    request(NULL);
    ck_assert_str_eq(fake_seen.headers, answer.headers);
    check_plain_body(answer.body, answer.body_len);
    answer.status = 200;
    conf.gunzip = false;
    request(NULL);
    check_plain_body(answer.body, answer.body_len);
}
END_TEST

/* HEAD gets the head GET would, and the filter steps aside. */
START_TEST(gunzip_head)
{
    answer.hold = true;
    request_with("HEAD", NULL, false);
    ck_assert_str_eq(fake_seen.headers,
                     "Content-Type: text/plain\r\nETag: W/\"e1\"\r\nVary: Cookie\r\n");
    ck_assert_int_eq(fake_seen.content_length, -1);
    ck_assert_ptr_null(exchange_ctx(&ex, compress_module.slot));
    ck_assert(!exchange_has_filter(&ex, compress_module.filter->order));
    exchange_end(&ex);
    router_end(&ex);
}
END_TEST

/* Members one after the other decode as one body, written a byte at a
 * time; a flush passes on. */
START_TEST(gunzip_members_byte_by_byte)
{
    size_t len;
    char *coded = gzip_of(gunzip_text, strlen(gunzip_text), 3, &len);
    answer.hold = true;
    request_with("GET", NULL, false);
    for (size_t i = 0; i < len; i++)
        exchange_write(&ex, coded + i, 1);
    exchange_flush(&ex);
    exchange_end(&ex);
    check_plain_body(gunzip_text, strlen(gunzip_text));
    ck_assert_int_eq(fake_seen.ends, 1);
    ck_assert_int_eq(fake_seen.aborts, 0);
    router_end(&ex);
    free(coded);
}
END_TEST

/* A body that is no gzip is cut off, never passed on as it is nor ended
 * as if whole: corrupt, cut short, a bad check value, bytes after the
 * last member. */
START_TEST(gunzip_bad_body_is_cut_off)
{
    size_t len = answer.body_len;
    char *bad = malloc(len + 8);
    ck_assert_ptr_nonnull(bad);
    for (int c = 0; c < 5; c++) {
        memcpy(bad, gunzip_coded, len);
        size_t bad_len = len;
        switch (c) {
        case 0: bad[0] = 'x'; break;                               /* not gzip at all */
        case 1: bad[12] ^= 0x55; break;                            /* corrupt deflate data */
        case 2: bad_len = len - 5; break;                          /* cut short */
        case 3: bad[len - 6] ^= 1; break;                          /* the CRC is wrong */
        case 4: memcpy(bad + len, "junk", 4), bad_len += 4; break; /* after the end */
        }
        answer.hold = true;
        request_with("GET", NULL, false);
        exchange_write(&ex, bad, bad_len);
        exchange_write(&ex, gunzip_coded, len); /* nothing more after a failure */
        exchange_end(&ex);
        ck_assert_msg(fake_seen.aborts == 1, "case %d: %d aborts", c, fake_seen.aborts);
        ck_assert_msg(fake_seen.ends == 0, "case %d ended", c);
        ck_assert(fake_seen.body_len <= strlen(gunzip_text));
        ck_assert(memcmp(fake_seen.body, gunzip_text, fake_seen.body_len) == 0 || c == 1);
        router_end(&ex);
    }
    free(bad);
}
END_TEST

/* A bomb (64 MB of zeros in 64 KB) against a client that reads slowly:
 * the output stops when the framer backs up, the input waits (the
 * handler's on_drain with it), the end too, and each drain passes on
 * about a watermark's worth; all of it arrives, whole. */
START_TEST(gunzip_bomb_waits_for_the_client)
{
    const size_t total = 64u << 20, mark = 256u << 10;
    char *zeros = calloc(1, total);
    ck_assert_ptr_nonnull(zeros);
    size_t len;
    char *coded = gzip_of(zeros, total, 1, &len);
    ck_assert_uint_lt(len, 128u << 10);
    conf.gunzip_piece = 4096;
    answer.hold = true;
    request_with("GET", NULL, false);
    fake_seen.backs_up_at = mark;
    for (size_t at = 0; at < len; at += 16384) {
        exchange_write(&ex, coded + at, len - at < 16384 ? len - at : 16384);
        ck_assert_uint_le(fake_seen.body_len, mark + 4096);
    }
    exchange_end(&ex);
    ck_assert_int_eq(fake_seen.ends, 0);
    size_t drains = 0;
    while (fake_seen.ends == 0) {
        size_t before = fake_seen.body_len;
        fake_seen.backs_up_at = before + mark;
        exchange_drained(&ex, &answer_handler);
        ck_assert_uint_le(fake_seen.body_len - before, mark + 4096);
        ck_assert(fake_seen.body_len > before || fake_seen.ends == 1);
        ck_assert_int_eq(answer.drains, 0); /* the producer stays paused */
        ck_assert_uint_lt(++drains, total / mark + 2);
    }
    ck_assert_int_eq(fake_seen.aborts, 0);
    check_plain_body(zeros, total);
    router_end(&ex);
    free(coded);
    free(zeros);
}
END_TEST

/* Once the decoder holds nothing, a drain reaches the handler. */
START_TEST(gunzip_drain_reaches_the_handler)
{
    answer.hold = true;
    request_with("GET", NULL, false);
    fake_seen.backs_up_at = 10;
    exchange_write(&ex, answer.body, answer.body_len);
    ck_assert_uint_lt(fake_seen.body_len, strlen(gunzip_text));
    fake_seen.backs_up_at = 0;
    exchange_drained(&ex, &answer_handler);
    ck_assert_int_eq(answer.drains, 1);
    check_plain_body(gunzip_text, strlen(gunzip_text));
    exchange_drained(&ex, &answer_handler);
    ck_assert_int_eq(answer.drains, 2);
    exchange_end(&ex);
    ck_assert_int_eq(fake_seen.ends, 1);
    router_end(&ex);
}
END_TEST

/* Its filter comes after add_header's and server_timing's: it sees the
 * head as they leave it. */
START_TEST(filter_comes_last)
{
    ck_assert_uint_gt(compress_module.filter->order, add_header_module.filter->order);
    ck_assert_uint_gt(compress_module.filter->order, server_timing_module.filter->order);
}
END_TEST

Suite *test_suite(void)
{
    modules_init();
    for (size_t m = 0; m < modules_count; m++)
        if (conf_module_register(&modules_list[m]->conf) != 0)
            abort();
    Suite *suite = suite_create("proto/compress");
    TCase *tc = tcase_create("conf");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, directives_default_and_inherit);
    tcase_add_test(tc, directive_errors);
    tcase_add_test(tc, gunzip_directives);
    suite_add_tcase(suite, tc);
    tc = tcase_create("filter");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, coded_when_accepted);
    tcase_add_test(tc, left_alone_without_acceptance);
    tcase_add_test(tc, vary_where_it_could_be_coded);
    tcase_add_test(tc, left_alone_by_the_head);
    tcase_add_test(tc, types_decide);
    tcase_add_test(tc, min_length_decides);
    tcase_add_test(tc, head_of_a_coded_response);
    tcase_add_test(tc, head_request_gets_the_get_head);
    tcase_add_test(tc, choice_among_codings);
    tcase_add_test(tc, transfer_coded_left_alone);
    tcase_add_test(tc, proxied_requests);
    tcase_add_test(tc, disabled_by_user_agent);
    tcase_add_test(tc, http_version_decides);
    tcase_add_test(tc, streamed_and_flushed);
    tcase_add_test(tc, released_when_cut_off);
    tcase_add_test(tc, filter_comes_last);
    suite_add_tcase(suite, tc);
    tc = tcase_create("gunzip");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, gunzip_setup, gunzip_teardown);
    tcase_add_test(tc, gunzip_decodes_for_a_client_without_gzip);
    tcase_add_test(tc, gunzip_leaves_alone);
    tcase_add_test(tc, gunzip_head);
    tcase_add_test(tc, gunzip_members_byte_by_byte);
    tcase_add_test(tc, gunzip_bad_body_is_cut_off);
    tcase_add_test(tc, gunzip_bomb_waits_for_the_client);
    tcase_add_test(tc, gunzip_drain_reaches_the_handler);
    suite_add_tcase(suite, tc);
    return suite;
}
