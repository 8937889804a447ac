/*
 * test_conf.c: the config language.  Valid configs and the struct they
 * produce, invalid configs and the exact message each gives, include from
 * memory and from real files with globs, and the value parsers.
 */
#include "../helpers.h"
#include "conf/config.h"
#include "conf/registry.h"
#include "proto/cache/cache.h"
#include "proto/cache/cache_conf.h"
#include "proto/compress/compress.h"
#include "proto/http/module.h"
#include "proto/modules.h"
#include "proto/policy/add_header.h"
#include "proto/policy/auth_basic.h"
#include "proto/policy/auth_jwt.h"
#include "proto/policy/auth_request.h"
#include "proto/policy/error_page.h"
#include "proto/policy/limit.h"
#include "proto/policy/return.h"
#include "proto/policy/rewrite.h"
#include "proto/policy/trace.h"
#include "proto/static/static_module.h"
#include "proto/upstream/proxy_module.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- helpers */

/* A location's return, which the return module's struct holds. */
static const struct return_conf *return_of(const struct conf_location *l)
{
    const struct return_conf *r = conf_module_conf(l->modules, &return_module.conf);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* A level's proxy settings, which the proxy module's struct holds (NULL
 * when the level is NULL). */
static const struct proxy_module_conf *proxy_of(const void *modules)
{
    const struct proxy_module_conf *p = conf_module_conf(modules, &proxy_module.conf);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* In-memory files for include; the list ends with a NULL path. */
struct memfile {
    const char *path;
    const char *text;
};

static char *read_memory(const char *path, size_t *len, void *arg)
{
    for (const struct memfile *file = arg; file != NULL && file->path != NULL; file++) {
        if (strcmp(file->path, path) == 0) {
            *len = strlen(file->text);
            return strdup(file->text);
        }
    }
    errno = ENOENT;
    return NULL;
}

static struct conf_config *parse_named(const char *path, const char *text,
                                       const struct memfile *files)
{
    struct conf_config *config = NULL;
    struct conf_error error = {{0}};
    int rc = conf_parse(path, text, strlen(text), read_memory, (void *)files, &config, &error);
    ck_assert_msg(rc == 0, "unexpected error: %s", error.text);
    ck_assert_ptr_nonnull(config);
    return config;
}

static struct conf_config *parse_ok(const char *text)
{
    return parse_named("test.conf", text, NULL);
}

static const char *parse_error(const char *text, const struct memfile *files,
                               struct conf_error *error)
{
    struct conf_config *config = (struct conf_config *)1;
    int rc =
        conf_parse("test.conf", text, strlen(text), read_memory, (void *)files, &config, error);
    ck_assert_msg(rc == -1, "parsed although it should not: %s", text);
    ck_assert_ptr_null(config);
    return error->text;
}

/* ------------------------------------------------------- valid configs */

/* listen ... quic: a UDP address of its own beside the TCP one of the same
 * number, without http2 from "http2 on"; http3 off at top level reaches
 * every server that does not turn it on. */
START_TEST(quic_listens)
{
    struct conf_config *c =
        parse_ok("http2 on;\n"
                 "http3 off;\n"
                 "server { listen 127.0.0.1:8443 tls; listen 127.0.0.1:8443 quic reuseport;\n"
                 "  tls_certificate /c.pem; tls_certificate_key /k.pem; http3 on; }\n"
                 "server { listen 127.0.0.1:9443 quic;\n"
                 "  tls_certificate /c.pem; tls_certificate_key /k.pem; }\n");
    ck_assert_uint_eq(c->listen_address_count, 3);
    const struct conf_server *a = &c->servers[0], *b = &c->servers[1];
    ck_assert(!a->listens[0].quic && a->listens[0].tls && a->listens[0].http2);
    ck_assert(a->listens[1].quic && !a->listens[1].tls && !a->listens[1].http2);
    ck_assert_uint_ne(a->listens[0].address_index, a->listens[1].address_index);
    ck_assert(!a->http3_off);
    ck_assert(b->http3_off);
    conf_free(c);
}
END_TEST

/* stream { }: its upstreams join the config's, its servers take the
 * stream block's settings where they write none, and their rules as a
 * whole. */
START_TEST(stream_block)
{
    struct conf_config *c =
        parse_ok("stream {\n"
                 "  upstream back { server 127.0.0.1:9001; server 127.0.0.1:9002; }\n"
                 "  proxy_timeout 30s;\n"
                 "  proxy_protocol on;\n"
                 "  deny 10.0.0.0/8;\n"
                 "  server { listen 127.0.0.1:9000; listen 127.0.0.1:9100 "
                 "proxy_protocol; proxy_pass back; }\n"
                 "  server { listen 127.0.0.1:9200; proxy_pass 127.0.0.1:7;\n"
                 "    proxy_timeout 5s; proxy_connect_timeout 1s; "
                 "proxy_next_upstream off;\n"
                 "    proxy_next_upstream_tries 3; proxy_next_upstream_timeout 2s;\n"
                 "    proxy_buffer_size 16k; allow 127.0.0.1; deny all; }\n"
                 "}\n");
    ck_assert(c->stream.present);
    ck_assert_uint_eq(c->upstream_count, 1);
    ck_assert_str_eq(c->upstreams[0].upstream.name, "back");
    ck_assert_uint_eq(c->stream.server_count, 2);
    const struct conf_stream_server *a = &c->stream.servers[0], *b = &c->stream.servers[1];
    ck_assert_uint_eq(a->listen_count, 2);
    ck_assert(!a->listens[0].proxy_protocol);
    ck_assert(a->listens[1].proxy_protocol);
    ck_assert_str_eq(a->pass, "back");
    ck_assert_uint_eq(a->conf.timeout_ms, 30000);
    ck_assert_uint_eq(a->conf.connect_timeout_ms, 60000);
    ck_assert(a->conf.proxy_protocol);
    ck_assert(a->conf.next_upstream);
    ck_assert_uint_eq(a->conf.buffer_size, 64 * 1024);
    ck_assert_uint_eq(a->conf.access.rule_count, 1);
    ck_assert(!a->conf.access.rules[0].allow);
    ck_assert_str_eq(b->pass, "127.0.0.1:7");
    ck_assert_uint_eq(b->conf.timeout_ms, 5000);
    ck_assert_uint_eq(b->conf.connect_timeout_ms, 1000);
    ck_assert(!b->conf.next_upstream);
    ck_assert_uint_eq(b->conf.next_upstream_tries, 3);
    ck_assert_uint_eq(b->conf.next_upstream_timeout_ms, 2000);
    ck_assert_uint_eq(b->conf.buffer_size, 16 * 1024);
    ck_assert(b->conf.proxy_protocol); /* the stream block's */
    ck_assert_uint_eq(b->conf.access.rule_count, 2);
    conf_free(c);
    /* ssl_preread (nginx's name) and a map for proxy_pass $NAME. */
    c = parse_ok("stream {\n"
                 "  upstream a { server 127.0.0.1:9001; }\n"
                 "  map $ssl_preread_server_name $to { a.example a; ~^b 127.0.0.1:9002; "
                 "default a; }\n"
                 "  ssl_preread on;\n"
                 "  server { listen 127.0.0.1:9000; proxy_pass $to; }\n"
                 "  server { listen 127.0.0.1:9100; proxy_pass a; tls_preread off; }\n"
                 "}\n");
    ck_assert_uint_eq(c->stream.map_count, 1);
    ck_assert_str_eq(c->stream.maps[0].name, "to");
    ck_assert_uint_eq(c->stream.maps[0].entry_count, 3);
    ck_assert_str_eq(c->stream.servers[0].pass, "$to");
    ck_assert(c->stream.servers[0].conf.preread);
    ck_assert(!c->stream.servers[1].conf.preread);
    ck_assert_uint_eq(c->map_count, 0); /* the top level's are apart */
    conf_free(c);
    /* UDP: a listen of its own beside TCP on one address, and the
     * session counts, inherited from the stream block. */
    c = parse_ok("stream {\n"
                 "  proxy_responses 1;\n"
                 "  server { listen 127.0.0.1:9000 udp; listen 127.0.0.1:9000; "
                 "proxy_pass 127.0.0.1:53; proxy_requests 3; }\n"
                 "  server { listen 127.0.0.1:9100 udp; proxy_pass 127.0.0.1:53; "
                 "proxy_responses 0; }\n"
                 "}\n");
    ck_assert(c->stream.servers[0].listens[0].udp);
    ck_assert(!c->stream.servers[0].listens[1].udp);
    ck_assert_uint_eq(c->stream.servers[0].conf.responses, 1);
    ck_assert_uint_eq(c->stream.servers[0].conf.requests, 3);
    ck_assert_uint_eq(c->stream.servers[1].conf.responses, 0);
    ck_assert_uint_eq(c->stream.servers[1].conf.requests, 0);
    conf_free(c);
    c = parse_ok("stream { server { listen 127.0.0.1:9000 udp; proxy_pass 127.0.0.1:53; } }");
    ck_assert_uint_eq(c->stream.servers[0].conf.responses, STREAM_UNLIMITED);
    conf_free(c);
    /* TLS settings and tls_alpn in the stream block: its servers take
     * those they do not write, the certificates as a whole list; and
     * server_name, default_server on one shared address. */
    c = parse_ok("stream {\n"
                 "  ssl_certificate s.pem; ssl_certificate_key s.key; ssl_protocols TLSv1.2;\n"
                 "  tls_ciphers ECDHE+AESGCM; ssl_client_certificate ca.pem;\n"
                 "  ssl_verify_client optional; ssl_alpn mqtt; ssl_session_cache off;\n"
                 "  server { listen 127.0.0.1:9000 ssl; proxy_pass 127.0.0.1:1; }\n"
                 "  server { listen 127.0.0.1:9000 ssl default_server; server_name a.test "
                 "*.b.test;\n"
                 "    proxy_pass 127.0.0.1:2; tls_certificate a.pem; tls_certificate_key a.key;\n"
                 "    tls_protocols TLSv1.3; tls_client_certificate other.pem; tls_alpn imap; }\n"
                 "}");
    const struct conf_stream_server *inherits = &c->stream.servers[0];
    const struct conf_stream_server *writes = &c->stream.servers[1];
    ck_assert_uint_eq(inherits->tls.certificate_count, 1);
    ck_assert(strstr(inherits->tls.certificates[0].certificate, "s.pem") != NULL);
    ck_assert(strstr(inherits->tls.certificates[0].key, "s.key") != NULL);
    ck_assert_uint_eq(inherits->tls.settings.protocols, TLS_PROTOCOL_1_2);
    ck_assert_str_eq(inherits->tls.settings.ciphers, "ECDHE+AESGCM");
    ck_assert(strstr(inherits->tls.settings.client_ca, "ca.pem") != NULL);
    ck_assert_int_eq(inherits->tls.settings.verify_client, TLS_VERIFY_CLIENT_OPTIONAL);
    ck_assert_uint_eq(inherits->tls.settings.session_cache, 0);
    ck_assert_uint_eq(inherits->alpn_len, 5);
    ck_assert(memcmp(inherits->alpn, "\4mqtt", 5) == 0);
    ck_assert_uint_eq(inherits->server_name_count, 0);
    ck_assert_uint_eq(writes->tls.certificate_count, 1);
    ck_assert(strstr(writes->tls.certificates[0].certificate, "a.pem") != NULL);
    ck_assert_uint_eq(writes->tls.settings.protocols, TLS_PROTOCOL_1_3);
    ck_assert_str_eq(writes->tls.settings.ciphers, "ECDHE+AESGCM");
    ck_assert(strstr(writes->tls.settings.client_ca, "other.pem") != NULL);
    /* its own CA file settles its verification: on, as for HTTP */
    ck_assert_int_eq(writes->tls.settings.verify_client, TLS_VERIFY_CLIENT_ON);
    ck_assert(memcmp(writes->alpn, "\4imap", 5) == 0);
    ck_assert_uint_eq(writes->server_name_count, 2);
    ck_assert_str_eq(writes->server_names[1], "*.b.test");
    ck_assert(writes->listens[0].default_server);
    ck_assert(!inherits->listens[0].default_server);
    conf_free(c);

    /* health_check match=NAME: a match block's send and expect, the
     * block written before or after the upstream; a type=tcp check. */
    c = parse_ok("stream {\n"
                 "  upstream a { server 127.0.0.1:1; health_check match=ping interval=1s; }\n"
                 "  upstream b { server 127.0.0.1:2; health_check match=banner; }\n"
                 "  match ping { send \"PING\\r\\n\"; expect ~ \"^\\\\+PONG\"; }\n"
                 "  match banner { expect \"220 \"; }\n"
                 "  server { listen 127.0.0.1:9000; proxy_pass a; }\n"
                 "}");
    const struct proxy_health_conf *ha = &c->upstreams[0].upstream.health;
    const struct proxy_health_conf *hb = &c->upstreams[1].upstream.health;
    ck_assert_int_eq(ha->type, PROXY_HEALTH_TCP);
    ck_assert_str_eq(ha->send, "PING\r\n");
    ck_assert_str_eq(ha->expect, "^\\+PONG");
    ck_assert(ha->expect_regex);
    ck_assert_int_eq(hb->type, PROXY_HEALTH_TCP);
    ck_assert_ptr_null(hb->send);
    ck_assert_str_eq(hb->expect, "220 ");
    ck_assert(!hb->expect_regex);
    conf_free(c);
    /* health_check udp (NGINX Plus's spelling), with or without a match */
    c = parse_ok("stream {\n"
                 "  upstream dns { server 127.0.0.1:53; health_check udp match=q; }\n"
                 "  upstream syslog { server 127.0.0.1:514; health_check type=udp; }\n"
                 "  match q { send x; expect y; }\n"
                 "  server { listen 127.0.0.1:9000 udp; proxy_pass dns; }\n"
                 "}");
    ck_assert_int_eq(c->upstreams[0].upstream.health.type, PROXY_HEALTH_UDP);
    ck_assert_str_eq(c->upstreams[0].upstream.health.send, "x");
    ck_assert_int_eq(c->upstreams[1].upstream.health.type, PROXY_HEALTH_UDP);
    ck_assert_ptr_null(c->upstreams[1].upstream.health.send);
    conf_free(c);

    /* No stream block: nothing there. */
    c = parse_ok("");
    ck_assert(!c->stream.present);
    ck_assert_uint_eq(c->stream.server_count, 0);
    conf_free(c);
}
END_TEST

/* add_header belongs to its module (proto/policy/add_header.c): a level
 * with lines of its own keeps only those, one without takes its
 * parent's (nginx's rule), through conf/'s one inheritance walk. */
START_TEST(add_header_is_its_modules)
{
    struct conf_config *c = parse_ok("add_header X-Top 1;\n"
                                     "server { listen 127.0.0.1:80;\n"
                                     "  location /a { return 200; }\n"
                                     "  location /b { add_header X-B 2 always; return 200; } }\n"
                                     "server { listen 127.0.0.1:81; add_header X-S 3;\n"
                                     "  location /c { return 200; } }\n");
    const struct add_header_conf *h = conf_module_conf(c->modules, &add_header_module.conf);
    ck_assert_uint_eq(h->count, 1);
    ck_assert_str_eq(h->items[0].name, "X-Top");
    ck_assert(!h->items[0].always);
    ck_assert(!h->inherited);
    h = conf_module_conf(c->servers[0].modules, &add_header_module.conf);
    ck_assert_str_eq(h->items[0].name, "X-Top");
    ck_assert(h->inherited);
    h = conf_module_conf(c->servers[0].locations[0].modules, &add_header_module.conf);
    ck_assert_str_eq(h->items[0].name, "X-Top");
    h = conf_module_conf(c->servers[0].locations[1].modules, &add_header_module.conf);
    ck_assert_uint_eq(h->count, 1);
    ck_assert_str_eq(h->items[0].name, "X-B");
    ck_assert_str_eq(h->items[0].value, "2");
    ck_assert(h->items[0].always);
    ck_assert(!h->inherited);
    h = conf_module_conf(c->servers[1].locations[0].modules, &add_header_module.conf);
    ck_assert_uint_eq(h->count, 1);
    ck_assert_str_eq(h->items[0].name, "X-S");
    conf_free(c);
}
END_TEST

/* rewrite belongs to its module (proto/policy/rewrite.c), which conf/
 * learns of by its registration: the lines of each level are the
 * module's struct there, not inherited, and a location with rewrites
 * only needs no content handler. */
START_TEST(rewrite_is_its_modules)
{
    struct conf_config *c =
        parse_ok("server {\n"
                 "    listen 127.0.0.1:80;\n"
                 "    rewrite ^/a(.*) /b$1 last;\n"
                 "    location /old/ { rewrite ^/old/(.*)$ /new/$1; }\n"
                 "    location / { rewrite ^ https://x/ permanent; return 200; }\n"
                 "}\n");
    const struct conf_server *s = &c->servers[0];
    const struct rewrite_conf *r = conf_module_conf(s->modules, &rewrite_module.conf);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->count, 1);
    ck_assert_str_eq(r->items[0].regex, "^/a(.*)");
    ck_assert_str_eq(r->items[0].replacement, "/b$1");
    ck_assert_int_eq(r->items[0].flag, HTTP_REWRITE_LAST);
    ck_assert_uint_eq(r->items[0].regex_pos.line, 3);
    ck_assert_uint_eq(r->items[0].regex_pos.col, 13);
    r = conf_module_conf(s->locations[0].modules, &rewrite_module.conf);
    ck_assert_uint_eq(r->count, 1);
    ck_assert_int_eq(r->items[0].flag, HTTP_REWRITE_NEXT);
    ck_assert(s->locations[0].passes);
    ck_assert_ptr_null(s->locations[0].content);
    r = conf_module_conf(s->locations[1].modules, &rewrite_module.conf);
    ck_assert_uint_eq(r->count, 1);
    ck_assert_int_eq(r->items[0].flag, HTTP_REWRITE_PERMANENT);
    ck_assert_str_eq(s->locations[1].content, "return");
    conf_free(c);
}
END_TEST

/* if (CONDITION) { ... } is a line of the rewrite module's list, its
 * block the lines after it up to `end`; nginx's parentheses come off the
 * words, spaced or not, a quoted regex may touch the ")", and a location
 * with only an if needs no content handler. */
START_TEST(if_is_a_jump_in_the_rewrite_lines)
{
    struct conf_config *c =
        parse_ok("server {\n"
                 "    listen 127.0.0.1:80;\n"
                 "    if ($http_user_agent ~* \"bot|spider\") { return 403; }\n"
                 "    location /a {\n"
                 "        set $x 1;\n"
                 "        if ( $request_method = POST ) { set $x 2; rewrite ^ /b last; }\n"
                 "        if (!-f /srv$uri) { break; }\n"
                 "        if ($x) { return 301 https://$host$request_uri; }\n"
                 "        if ($x != \"\") {}\n"
                 "        if ($uri !~ ^/a/(.*)$) { return 404; }\n"
                 "    }\n"
                 "}\n");
    const struct conf_server *s = &c->servers[0];
    const struct rewrite_conf *r = conf_module_conf(s->modules, &rewrite_module.conf);
    ck_assert_uint_eq(r->count, 2);
    ck_assert_int_eq(r->items[0].kind, HTTP_STEP_IF);
    ck_assert_int_eq(r->items[0].op, HTTP_IF_MATCH);
    ck_assert(r->items[0].caseless && !r->items[0].negate);
    ck_assert_str_eq(r->items[0].name, "$http_user_agent");
    ck_assert_str_eq(r->items[0].regex, "bot|spider");
    ck_assert_uint_eq(r->items[0].end, 2);
    ck_assert_int_eq(r->items[1].kind, HTTP_STEP_RETURN);
    ck_assert_uint_eq(r->items[1].ret.code, 403);
    r = conf_module_conf(s->locations[0].modules, &rewrite_module.conf);
    ck_assert_uint_eq(r->count, 11);
    ck_assert_int_eq(r->items[0].kind, HTTP_STEP_SET);
    ck_assert_int_eq(r->items[1].kind, HTTP_STEP_IF);
    ck_assert_int_eq(r->items[1].op, HTTP_IF_EQUAL);
    ck_assert_str_eq(r->items[1].name, "$request_method");
    ck_assert_str_eq(r->items[1].replacement, "POST");
    ck_assert_uint_eq(r->items[1].regex_pos.col, 14); /* "$request_method", after "( " */
    ck_assert_uint_eq(r->items[1].end, 4);
    ck_assert_int_eq(r->items[2].kind, HTTP_STEP_SET);
    ck_assert_int_eq(r->items[3].kind, HTTP_STEP_REWRITE);
    ck_assert_int_eq(r->items[4].op, HTTP_IF_FILE);
    ck_assert(r->items[4].negate);
    ck_assert_str_eq(r->items[4].name, "/srv$uri");
    ck_assert_int_eq(r->items[5].kind, HTTP_STEP_BREAK);
    ck_assert_int_eq(r->items[6].op, HTTP_IF_VALUE);
    ck_assert_int_eq(r->items[7].kind, HTTP_STEP_RETURN);
    ck_assert_str_eq(r->items[7].ret.text, "https://$host$request_uri");
    ck_assert_int_eq(r->items[8].op, HTTP_IF_EQUAL);
    ck_assert(r->items[8].negate);
    ck_assert_str_eq(r->items[8].replacement, "");
    ck_assert_uint_eq(r->items[8].end, 9); /* an empty block */
    ck_assert_int_eq(r->items[9].op, HTTP_IF_MATCH);
    ck_assert(r->items[9].negate && !r->items[9].caseless);
    ck_assert_str_eq(r->items[9].regex, "^/a/(.*)$");
    ck_assert_uint_eq(r->items[9].end, 11);
    ck_assert_int_eq(r->items[10].kind, HTTP_STEP_RETURN);
    ck_assert(s->locations[0].passes);
    ck_assert_ptr_null(s->locations[0].content);
    conf_free(c);
}
END_TEST

/* An if in a location is a location nested in it (nginx's noname
 * location): add_header and proxy_pass inside set its structs, which
 * inherit the location's (add_header only where it writes none, the
 * location's proxy_pass and TLS where it has no proxy_pass, its return),
 * while the if's rewrite lines stay steps of the location's list.  An if
 * of rewrite lines only sets no struct: it is the location itself. */
START_TEST(if_in_a_location_is_a_location)
{
    struct conf_config *c =
        parse_ok("upstream canary { server 127.0.0.1:2; }\n"
                 "server {\n"
                 "    listen 127.0.0.1:80;\n"
                 "    if ($a) { return 403; }\n"
                 "    location /a {\n"
                 "        add_header X-Loc 1;\n"
                 "        if ($request_method = OPTIONS) { add_header X-Cors 1; return 204; }\n"
                 "        if ($http_x_canary) { proxy_pass http://canary; set $c 1; }\n"
                 "        if ($arg_x) { set $x 1; }\n"
                 "        proxy_pass https://127.0.0.1:1/p/;\n"
                 "        proxy_tls_name backend.example;\n"
                 "    }\n"
                 "    location /b {\n"
                 "        if ($arg_y) { add_header X-Y 1; }\n"
                 "        return 200 \"b\";\n"
                 "    }\n"
                 "}\n");
    const struct conf_server *s = &c->servers[0];
    ck_assert_uint_eq(s->location_count, 2);
    const struct conf_location *a = &s->locations[0];
    ck_assert_uint_eq(a->nested_count, 3);
    ck_assert_str_eq(a->content, "proxy_pass");
    /* the steps, the ifs' lines among them, are the location's */
    const struct rewrite_conf *r = conf_module_conf(a->modules, &rewrite_module.conf);
    ck_assert_uint_eq(r->count, 6);
    ck_assert_int_eq(r->items[1].kind, HTTP_STEP_RETURN);
    ck_assert_uint_eq(r->items[1].ret.code, 204);
    ck_assert_int_eq(r->items[3].kind, HTTP_STEP_SET);
    r = conf_module_conf(a->nested[0].modules, &rewrite_module.conf);
    ck_assert_uint_eq(r->count, 0);
    /* the preflight's if: its own add_header only, the location's proxy */
    const struct add_header_conf *h =
        conf_module_conf(a->nested[0].modules, &add_header_module.conf);
    ck_assert_uint_eq(h->count, 1);
    ck_assert_str_eq(h->items[0].name, "X-Cors");
    ck_assert(!h->inherited);
    ck_assert_ptr_null(a->nested[0].content);
    const struct proxy_module_conf *px = conf_module_conf(a->nested[0].modules, &proxy_module.conf);
    ck_assert_str_eq(px->pass, "https://127.0.0.1:1");
    ck_assert_str_eq(px->uri, "/p/");
    ck_assert_str_eq(px->tls.server_name, "backend.example");
    ck_assert(px->borrowed_pass && px->borrowed_tls);
    /* the canary's: its own proxy_pass, the location's add_header */
    ck_assert_str_eq(a->nested[1].content, "proxy_pass");
    px = conf_module_conf(a->nested[1].modules, &proxy_module.conf);
    ck_assert_str_eq(px->pass, "http://canary");
    ck_assert_ptr_null(px->uri);
    ck_assert(!px->borrowed_pass);
    h = conf_module_conf(a->nested[1].modules, &add_header_module.conf);
    ck_assert_str_eq(h->items[0].name, "X-Loc");
    ck_assert(h->inherited);
    /* rewrite lines only: no struct of its own */
    ck_assert_ptr_null(a->nested[2].modules);
    /* the location's return, for the if without a handler */
    const struct conf_location *b = &s->locations[1];
    ck_assert_uint_eq(b->nested_count, 1);
    const struct return_conf *ret = conf_module_conf(b->nested[0].modules, &return_module.conf);
    ck_assert_uint_eq(ret->code, 200);
    ck_assert_str_eq(ret->text, "b");
    ck_assert(ret->borrowed);
    ck_assert_ptr_null(s->locations[0].nested[0].path);
    conf_free(c);
}
END_TEST

START_TEST(defaults_when_absent)
{
    struct conf_config *c = parse_ok("# nothing but a comment\n");
    ck_assert_uint_eq(c->workers, 0);
    ck_assert_int_eq(c->wakeup, CORRAL_WAKEUP_AUTO);
    ck_assert_uint_eq(c->max_connections, 10000);
    ck_assert_uint_eq(c->busy_poll_usecs, 0);
    ck_assert_uint_eq(c->drain_timeout_ms, 10000);
    ck_assert_ptr_null(c->user);
    ck_assert_ptr_null(c->group);
    ck_assert_ptr_null(c->pid_file);
    ck_assert_ptr_null(c->error_log);
    ck_assert_int_eq(c->log_level, CORRAL_LOG_INFO);
    ck_assert_ptr_null(c->access_log);
    ck_assert_ptr_null(c->log_format);
    ck_assert_uint_eq(c->admin_listen_count, 0);
    ck_assert_uint_eq(c->server_count, 0);
    ck_assert_uint_eq(c->upstream_count, 0);
    ck_assert_uint_eq(c->http.limits.header_timeout_ms, 60000);
    ck_assert_uint_eq(c->http.limits.body_timeout_ms, 60000);
    ck_assert_uint_eq(c->http.limits.send_timeout_ms, 60000);
    ck_assert_uint_eq(c->http.limits.keepalive_timeout_ms, 75000);
    ck_assert_uint_eq(c->http.limits.keepalive_requests, 1000);
    ck_assert_uint_eq(c->http.limits.max_header_size, 8192);
    ck_assert_uint_eq(c->http.limits.max_headers, 100);
    ck_assert_uint_eq(c->http.limits.max_body_size, 1048576);
    ck_assert_uint_eq(proxy_of(c->modules)->proxy.connect_timeout_ms, 60000);
    ck_assert_uint_eq(proxy_of(c->modules)->proxy.read_timeout_ms, 60000);
    ck_assert_uint_eq(proxy_of(c->modules)->proxy.send_timeout_ms, 60000);
    ck_assert_str_eq(c->path, "test.conf");
    ck_assert_uint_eq(c->file_count, 1);
    ck_assert_str_eq(c->files[0], "test.conf");
    conf_free(c);
}
END_TEST

/*
 * The documented defaults: for each directive whose docs/config.md gives
 * a value as its default, a block it is written in and that value, as
 * the directive summary writes it.  tests/build/test_docs_defaults.sh
 * checks this list against the docs, and that every documented value is
 * here or on its list of those a parse cannot show.  A config without the
 * directive and one that writes it with that value must leave the same
 * setting where a server's location (or the admin block, the upstream,
 * the stream server) reads it: the field the directive's table entry
 * sets, or what `show` prints of a directive whose entry sets several.
 * Another value must leave another setting there: else the setting read
 * is not the one the directive sets, and the check would prove nothing.
 */
typedef void (*documented_show_fn)(const struct conf_config *c, char *buf, size_t len);

struct documented_default {
    const char *name;
    unsigned context; /* the block it is written in */
    const char *value;
    const char *other; /* a value that is not the default */
    /* What it needs beside it in that block (USERS: a user file's path);
     * NULL: nothing. */
    const char *with;
    documented_show_fn show; /* NULL: the field its entry sets */
};

#define DEFAULT(name, context, value, other)                                                       \
    {                                                                                              \
        name, context, value, other, NULL, NULL                                                    \
    }
#define DEFAULT_WITH(name, context, value, other, with)                                            \
    {                                                                                              \
        name, context, value, other, with, NULL                                                    \
    }
#define DEFAULT_SHOWN(name, context, value, other, show)                                           \
    {                                                                                              \
        name, context, value, other, NULL, show                                                    \
    }
#define DEFAULT_SHOWN_WITH(name, context, value, other, with, show)                                \
    {                                                                                              \
        name, context, value, other, with, show                                                    \
    }

/* The first server's first location's struct of `module`. */
static const void *documented_module(const struct conf_config *c, const struct http_module *module)
{
    const void *conf = conf_module_conf(c->servers[0].locations[0].modules, &module->conf);
    ck_assert_ptr_nonnull(conf);
    return conf;
}

static void show_wakeup(const struct conf_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "%d %g", (int)c->wakeup, c->wakeup_spill);
}

static void show_busy_poll(const struct conf_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "%u", c->busy_poll_usecs);
}

static void show_error_log(const struct conf_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s %d", c->error_log != NULL ? c->error_log : "(stderr)",
             (int)c->log_level);
}

static void show_http3(const struct conf_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "%d", c->servers[0].http3_off);
}

static void show_gzip_http_version(const struct conf_config *c, char *buf, size_t len)
{
    const struct compress_conf *conf = documented_module(c, &compress_module);
    snprintf(buf, len, "%u", conf->http_version);
}

static void show_gunzip_buffers(const struct conf_config *c, char *buf, size_t len)
{
    const struct compress_conf *conf = documented_module(c, &compress_module);
    snprintf(buf, len, "%zu", conf->gunzip_piece);
}

static void show_expires(const struct conf_config *c, char *buf, size_t len)
{
    const struct static_conf *conf = documented_module(c, &static_module);
    snprintf(buf, len, "%d %" PRId64, (int)conf->expires, conf->expires_s);
}

static void show_open_file_cache(const struct conf_config *c, char *buf, size_t len)
{
    const struct static_conf *conf = documented_module(c, &static_module);
    snprintf(buf, len, "%u %" PRIu32, conf->cache.max, conf->cache.inactive_ms);
}

static void show_proxy_http_version(const struct conf_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "%u", proxy_of(c->servers[0].locations[0].modules)->http_version);
}

/* PROXY_NEXT_WRITTEN says where the value comes from, not what it is. */
static void show_proxy_next_upstream(const struct conf_config *c, char *buf, size_t len)
{
    unsigned next = proxy_of(c->servers[0].locations[0].modules)->proxy.next_upstream;
    snprintf(buf, len, "%u", next & ~(unsigned)PROXY_NEXT_WRITTEN);
}

static void show_balance(const struct conf_config *c, char *buf, size_t len)
{
    const struct proxy_upstream_conf *u = &c->upstreams[0].upstream;
    snprintf(buf, len, "%d %d %d", (int)u->balance, u->hash_consistent, u->random_two);
}

static void show_auth_basic(const struct conf_config *c, char *buf, size_t len)
{
    const struct auth_basic_conf *conf = documented_module(c, &auth_basic_module);
    snprintf(buf, len, "%s", conf->realm != NULL ? conf->realm : "(off)");
}

static void show_access_log(const struct conf_config *c, char *buf, size_t len)
{
    const struct conf_location *l = &c->servers[0].locations[0];
    snprintf(buf, len, "%zu %zu %zu %s", c->access_logs.count, c->servers[0].access_logs.count,
             l->access_logs.count, c->access_log != NULL ? c->access_log : "(off)");
}

static void show_auth_jwt(const struct conf_config *c, char *buf, size_t len)
{
    const struct auth_jwt_conf *conf = documented_module(c, &auth_jwt_module);
    snprintf(buf, len, "%s", conf->realm != NULL ? conf->realm : "(off)");
}

static void show_auth_request(const struct conf_config *c, char *buf, size_t len)
{
    const struct auth_request_conf *conf = documented_module(c, &auth_request_module);
    snprintf(buf, len, "%s", conf->uri != NULL ? conf->uri : "(off)");
}

static void show_otel_trace(const struct conf_config *c, char *buf, size_t len)
{
    const struct trace_conf *conf = documented_module(c, &trace_module);
    snprintf(buf, len, "%d %s", conf->trace,
             conf->trace_variable != NULL ? conf->trace_variable : "(none)");
}

static void show_otel_sampler(const struct conf_config *c, char *buf, size_t len)
{
    const struct trace_conf *conf = documented_module(c, &trace_module);
    snprintf(buf, len, "%" PRIu64 " %d %d", conf->sampler.threshold, conf->sampler.all,
             conf->sampler.parent_based);
}

static void show_proxy_cache(const struct conf_config *c, char *buf, size_t len)
{
    const struct cache_conf *conf = documented_module(c, &cache_module);
    snprintf(buf, len, "%s", conf->zone != NULL ? conf->zone : "(off)");
}

static void show_proxy_cache_key(const struct conf_config *c, char *buf, size_t len)
{
    const struct cache_conf *conf = documented_module(c, &cache_module);
    snprintf(buf, len, "%s", conf->key != NULL ? conf->key : "(null)");
}

/* The body's file path is the module's written one, merged into proxy's. */
static void show_client_body_temp_path(const struct conf_config *c, char *buf, size_t len)
{
    const char *path = proxy_of(c->servers[0].locations[0].modules)->proxy.body_temp_path;
    snprintf(buf, len, "%s", path != NULL ? path : "(null)");
}

/* The top level's: the exporter's. */
static void show_otel_service_name(const struct conf_config *c, char *buf, size_t len)
{
    const struct trace_conf *conf = conf_module_conf(c->modules, &trace_module.conf);
    ck_assert_ptr_nonnull(conf);
    const char *name = conf->exporter.service_name;
    snprintf(buf, len, "%s", name != NULL ? name : "(null)");
}

/* An otel_exporter block's settings, which its entry's apply sets. */
static void show_otel_exporter(const struct conf_config *c, char *buf, size_t len)
{
    const struct trace_conf *conf = conf_module_conf(c->modules, &trace_module.conf);
    ck_assert_ptr_nonnull(conf);
    snprintf(buf, len, "%" PRIu32 " %u %u", conf->exporter.interval_ms, conf->exporter.batch_size,
             conf->exporter.batch_count);
}

/* A stream server's setting, which the stream block's entries set among
 * others. */
#define SHOW_STREAM(field)                                                                         \
    static void show_stream_##field(const struct conf_config *c, char *buf, size_t len)            \
    {                                                                                              \
        snprintf(buf, len, "%llu", (unsigned long long)c->stream.servers[0].conf.field);           \
    }
SHOW_STREAM(connect_timeout_ms)
SHOW_STREAM(timeout_ms)
SHOW_STREAM(next_upstream)
SHOW_STREAM(next_upstream_tries)
SHOW_STREAM(next_upstream_timeout_ms)
SHOW_STREAM(proxy_protocol)
SHOW_STREAM(buffer_size)
SHOW_STREAM(requests)
SHOW_STREAM(preread)
#define STREAM_DEFAULT(name, value, other, field)                                                  \
    {                                                                                              \
        name, CONF_STREAM, value, other, NULL, show_stream_##field                                 \
    }

static const struct documented_default documented_defaults[] = {
    DEFAULT("workers", CONF_MAIN, "auto", "2"),
    DEFAULT_SHOWN("wakeup", CONF_MAIN, "auto", "roundrobin", show_wakeup),
    DEFAULT("max_connections", CONF_MAIN, "10000", "10001"),
    DEFAULT_SHOWN("busy_poll", CONF_MAIN, "off", "50", show_busy_poll),
    DEFAULT("drain_timeout", CONF_MAIN, "10s", "11s"),
    DEFAULT("shutdown_delay", CONF_MAIN, "0", "1"),
    DEFAULT_SHOWN("error_log", CONF_MAIN, "stderr info", "stderr warn", show_error_log),
    DEFAULT_SHOWN("http3", CONF_MAIN, "on", "off", show_http3),
    DEFAULT("quic_bpf", CONF_MAIN, "on", "off"),
    DEFAULT("io_uring", CONF_MAIN, "on", "off"),
    DEFAULT("quic_gso", CONF_MAIN, "on", "off"),
    DEFAULT("quic_retry", CONF_MAIN, "off", "on"),
    DEFAULT("quic_retry_threshold", CONF_MAIN, "100", "101"),
    DEFAULT("http3_max_concurrent_streams", CONF_MAIN, "128", "129"),
    DEFAULT("http3_stream_buffer_size", CONF_MAIN, "64k", "65k"),
    DEFAULT("ssl_early_data", CONF_MAIN, "off", "on"),
    DEFAULT("absolute_redirect", CONF_MAIN, "on", "off"),
    DEFAULT("port_in_redirect", CONF_MAIN, "on", "off"),
    DEFAULT("server_name_in_redirect", CONF_MAIN, "off", "on"),
    DEFAULT("server_timing", CONF_MAIN, "off", "on"),
    DEFAULT("gzip", CONF_MAIN, "off", "on"),
    DEFAULT("brotli", CONF_MAIN, "off", "on"),
    DEFAULT("zstd", CONF_MAIN, "off", "on"),
    DEFAULT("gzip_min_length", CONF_MAIN, "20", "21"),
    DEFAULT("brotli_min_length", CONF_MAIN, "20", "21"),
    DEFAULT("zstd_min_length", CONF_MAIN, "20", "21"),
    DEFAULT("gzip_comp_level", CONF_MAIN, "1", "2"),
    DEFAULT("brotli_comp_level", CONF_MAIN, "3", "4"),
    DEFAULT("zstd_comp_level", CONF_MAIN, "1", "2"),
    DEFAULT("gzip_vary", CONF_MAIN, "off", "on"),
    DEFAULT("gzip_proxied", CONF_MAIN, "off", "any"),
    DEFAULT_SHOWN("gzip_http_version", CONF_MAIN, "1.1", "1.0", show_gzip_http_version),
    DEFAULT("gunzip", CONF_MAIN, "off", "on"),
    DEFAULT_SHOWN("gunzip_buffers", CONF_MAIN, "32 4k", "32 8k", show_gunzip_buffers),
    DEFAULT("client_header_timeout", CONF_MAIN, "60s", "61s"),
    DEFAULT("client_body_timeout", CONF_MAIN, "60s", "61s"),
    DEFAULT("send_timeout", CONF_MAIN, "60s", "61s"),
    DEFAULT("keepalive_timeout", CONF_MAIN, "75s", "76s"),
    DEFAULT("keepalive_requests", CONF_MAIN, "1000", "1001"),
    DEFAULT("client_max_header_size", CONF_MAIN, "8k", "9k"),
    DEFAULT("client_max_headers", CONF_MAIN, "100", "101"),
    DEFAULT("client_max_body_size", CONF_MAIN, "1m", "2m"),
    DEFAULT("http2_max_concurrent_streams", CONF_MAIN, "128", "129"),
    DEFAULT("http2_max_header_list_size", CONF_MAIN, "32k", "33k"),
    DEFAULT("http2_initial_window_size", CONF_MAIN, "64k", "65k"),
    DEFAULT("http2_idle_timeout", CONF_MAIN, "3m", "4m"),
    DEFAULT("http2_max_resets", CONF_MAIN, "200", "201"),
    DEFAULT("http2_reset_interval", CONF_MAIN, "10s", "11s"),
    DEFAULT("http2_stream_buffer_size", CONF_MAIN, "64k", "65k"),
    DEFAULT_SHOWN("expires", CONF_MAIN, "off", "1h", show_expires),
    DEFAULT("etag", CONF_MAIN, "on", "off"),
    DEFAULT("if_modified_since", CONF_MAIN, "exact", "before"),
    DEFAULT("disable_symlinks", CONF_MAIN, "off", "on"),
    DEFAULT_SHOWN("open_file_cache", CONF_MAIN, "off", "max=10", show_open_file_cache),
    DEFAULT("open_file_cache_valid", CONF_MAIN, "1s", "2s"),
    DEFAULT("sendfile", CONF_MAIN, "on", "off"),
    DEFAULT("autoindex", CONF_MAIN, "off", "on"),
    DEFAULT("gzip_static", CONF_MAIN, "off", "on"),
    DEFAULT("brotli_static", CONF_MAIN, "off", "on"),
    DEFAULT("zstd_static", CONF_MAIN, "off", "on"),
    DEFAULT("proxy_intercept_errors", CONF_MAIN, "off", "on"),
    DEFAULT("grpc_intercept_errors", CONF_MAIN, "off", "on"),
    DEFAULT("proxy_connect_timeout", CONF_MAIN, "60s", "61s"),
    DEFAULT("proxy_read_timeout", CONF_MAIN, "60s", "61s"),
    DEFAULT("proxy_send_timeout", CONF_MAIN, "60s", "61s"),
    DEFAULT("proxy_buffer_size", CONF_MAIN, "8k", "9k"),
    DEFAULT("grpc_buffer_size", CONF_MAIN, "8k", "9k"),
    DEFAULT("proxy_splice", CONF_MAIN, "on", "off"),
    DEFAULT("proxy_request_buffering", CONF_MAIN, "off", "on"),
    DEFAULT("grpc_request_buffering", CONF_MAIN, "off", "on"),
    DEFAULT("client_body_buffer_size", CONF_MAIN, "16k", "32k"),
    DEFAULT_SHOWN("client_body_temp_path", CONF_MAIN, "/tmp", "/var/tmp",
                  show_client_body_temp_path),
    DEFAULT("client_body_temp_max_size", CONF_MAIN, "1g", "2g"),
    DEFAULT("proxy_via", CONF_MAIN, "off", "on"),
    DEFAULT_SHOWN("proxy_http_version", CONF_MAIN, "1.1", "2", show_proxy_http_version),
    DEFAULT_SHOWN("proxy_next_upstream", CONF_MAIN, "error timeout", "error",
                  show_proxy_next_upstream),
    DEFAULT("proxy_next_upstream_tries", CONF_MAIN, "0", "1"),
    DEFAULT("proxy_next_upstream_timeout", CONF_MAIN, "0", "1"),
    DEFAULT_SHOWN_WITH("proxy_cache", CONF_MAIN, "off", "zone",
                       "proxy_cache_path /tmp/cache keys_zone=zone:1m;", show_proxy_cache),
    DEFAULT_SHOWN("proxy_cache_key", CONF_MAIN, "$scheme$host$request_uri", "$host$request_uri",
                  show_proxy_cache_key),
    DEFAULT("proxy_cache_methods", CONF_MAIN, "GET HEAD", "GET HEAD POST"),
    DEFAULT("proxy_cache_min_uses", CONF_MAIN, "1", "2"),
    DEFAULT("proxy_cache_lock", CONF_MAIN, "off", "on"),
    DEFAULT("proxy_cache_lock_timeout", CONF_MAIN, "5s", "6s"),
    DEFAULT("proxy_cache_use_stale", CONF_MAIN, "off", "error"),
    DEFAULT("proxy_cache_revalidate", CONF_MAIN, "off", "on"),
    DEFAULT("proxy_cache_background_update", CONF_MAIN, "off", "on"),
    DEFAULT_SHOWN("balance", CONF_UPSTREAM, "round_robin", "least_conn", show_balance),
    DEFAULT("keepalive", CONF_UPSTREAM, "32", "33"),
    DEFAULT("keepalive_timeout", CONF_UPSTREAM, "60s", "61s"),
    DEFAULT("api_servers", CONF_UPSTREAM, "0", "1"),
    DEFAULT("proxy_protocol", CONF_UPSTREAM, "off", "on"),
    DEFAULT_WITH("proxy_protocol_version", CONF_UPSTREAM, "1", "2", "proxy_protocol on;"),
    DEFAULT("tls_protocols", CONF_MAIN, "TLSv1.2 TLSv1.3", "TLSv1.3"),
    DEFAULT("tls_protocols", CONF_STREAM, "TLSv1.2 TLSv1.3", "TLSv1.3"),
    DEFAULT("tls_session_tickets", CONF_MAIN, "on", "off"),
    DEFAULT("tls_session_ticket_rotation", CONF_MAIN, "1h", "2h"),
    DEFAULT("tls_session_cache", CONF_MAIN, "20000", "20001"),
    DEFAULT("tls_session_timeout", CONF_MAIN, "5m", "6m"),
    DEFAULT("tls_handshake_timeout", CONF_MAIN, "10s", "11s"),
    DEFAULT("tls_ktls", CONF_MAIN, "off", "on"),
    DEFAULT("tls_certificate_watch", CONF_MAIN, "off", "on"),
    DEFAULT("tls_stapling", CONF_MAIN, "off", "on"),
    DEFAULT("tls_stapling_verify", CONF_MAIN, "off", "on"),
    DEFAULT("proxy_tls_verify", CONF_LOCATION, "on", "off"),
    DEFAULT_SHOWN("access_log", CONF_MAIN, "off", "a.log", show_access_log),
    DEFAULT("real_ip_recursive", CONF_MAIN, "off", "on"),
    DEFAULT("satisfy", CONF_MAIN, "all", "any"),
    DEFAULT_SHOWN_WITH("auth_basic", CONF_MAIN, "off", "realm", "auth_basic_user_file USERS;",
                       show_auth_basic),
    DEFAULT_SHOWN_WITH("auth_jwt", CONF_MAIN, "off", "realm", "auth_jwt_key_request /jwks;",
                       show_auth_jwt),
    DEFAULT("auth_jwt_key_cache", CONF_MAIN, "0", "1"),
    DEFAULT_SHOWN("auth_request", CONF_MAIN, "off", "/auth", show_auth_request),
    DEFAULT("auth_jwt_leeway", CONF_MAIN, "0s", "1s"),
    DEFAULT_SHOWN("interval", CONF_OTEL_EXPORTER, "5s", "6s", show_otel_exporter),
    DEFAULT_SHOWN("batch_size", CONF_OTEL_EXPORTER, "512", "513", show_otel_exporter),
    DEFAULT_SHOWN("batch_count", CONF_OTEL_EXPORTER, "4", "5", show_otel_exporter),
    DEFAULT_SHOWN("otel_service_name", CONF_MAIN, "unknown_service:corral", "shop",
                  show_otel_service_name),
    DEFAULT_SHOWN_WITH("otel_trace", CONF_MAIN, "off", "on",
                       "otel_exporter { endpoint 127.0.0.1:4318; }", show_otel_trace),
    DEFAULT("otel_trace_context", CONF_MAIN, "ignore", "extract"),
    DEFAULT_SHOWN("otel_sampler", CONF_MAIN, "ratio=1", "ratio=0.5", show_otel_sampler),
    DEFAULT("limit_req_status", CONF_MAIN, "503", "429"),
    DEFAULT("limit_conn_status", CONF_MAIN, "503", "429"),
    STREAM_DEFAULT("proxy_connect_timeout", "60s", "61s", connect_timeout_ms),
    STREAM_DEFAULT("proxy_timeout", "10m", "11m", timeout_ms),
    STREAM_DEFAULT("proxy_next_upstream", "on", "off", next_upstream),
    STREAM_DEFAULT("proxy_next_upstream_tries", "0", "1", next_upstream_tries),
    STREAM_DEFAULT("proxy_next_upstream_timeout", "0", "1", next_upstream_timeout_ms),
    STREAM_DEFAULT("proxy_protocol", "off", "on", proxy_protocol),
    STREAM_DEFAULT("proxy_buffer_size", "64k", "65k", buffer_size),
    STREAM_DEFAULT("proxy_requests", "0", "1", requests),
    STREAM_DEFAULT("tls_preread", "off", "on", preread),
};

/* The entry of `name` for `context`, in conf/'s tables or a registered
 * module's (then *module is that module). */
static const struct conf_directive *documented_entry(const char *name, unsigned context,
                                                     const struct conf_module **module)
{
    *module = NULL;
    for (size_t t = 0; t < conf__table_count; t++)
        for (const struct conf_directive *d = conf__tables[t]; d->name != NULL; d++)
            if (strcmp(d->name, name) == 0 && (d->contexts & context))
                return d;
    for (size_t m = 0; m < modules_count; m++) {
        const struct conf_module *candidate = &modules_list[m]->conf;
        for (const struct conf_directive *d = candidate->directives; d != NULL && d->name != NULL;
             d++) {
            if (strcmp(d->name, name) == 0 && (d->contexts & context)) {
                *module = candidate;
                return d;
            }
        }
    }
    return NULL;
}

/* A config with one of each block a directive may be written in, and
 * `line` in the block of `context` (an otel_exporter block only for a
 * line of its own: it makes spans go somewhere). */
static struct conf_config *documented_config(unsigned context, const char *line)
{
    static const unsigned blocks[] = {CONF_MAIN,     CONF_ADMIN,  CONF_UPSTREAM,     CONF_SERVER,
                                      CONF_LOCATION, CONF_STREAM, CONF_STREAM_SERVER};
    const char *in[sizeof(blocks) / sizeof(blocks[0])];
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++)
        in[b] = blocks[b] == context ? line : "";
    char exporter[600] = "";
    if (context == CONF_OTEL_EXPORTER)
        snprintf(exporter, sizeof(exporter), "otel_exporter { endpoint 127.0.0.1:4318; %s }", line);
    char text[2048];
    int n = snprintf(text, sizeof(text),
                     "%s\n%s\n"
                     "admin { listen 127.0.0.1:9090; %s }\n"
                     "upstream app { server 127.0.0.1:9001; %s }\n"
                     "server { listen 127.0.0.1:8080; %s\n"
                     "    location / { proxy_pass https://app; %s } }\n"
                     "stream { %s\n"
                     "    server { listen 127.0.0.1:9002; proxy_pass 127.0.0.1:9003; %s } }\n",
                     in[0], exporter, in[1], in[2], in[3], in[4], in[5], in[6]);
    ck_assert(n > 0 && (size_t)n < sizeof(text));
    return parse_ok(text);
}

/* What `row`'s directive left in `c`, printed: its show's, or the field
 * its table entry sets, as the first server's location (or the admin
 * block, the upstream) reads it. */
static void documented_value(const struct conf_config *c, const struct documented_default *row,
                             char *buf, size_t len)
{
    if (row->show != NULL) {
        row->show(c, buf, len);
        return;
    }
    const struct conf_module *module;
    const struct conf_directive *entry = documented_entry(row->name, row->context, &module);
    ck_assert_msg(entry != NULL, "%s: no entry for its block", row->name);
    const struct conf_server *s = &c->servers[0];
    const char *base = NULL;
    switch (entry->base) {
    case CONF_BASE_MAIN: base = (const char *)c; break;
    case CONF_BASE_LIMITS: base = (const char *)&s->http.limits; break;
    case CONF_BASE_HTTP2: base = (const char *)&s->http.http2; break;
    case CONF_BASE_TLS:
        if (row->context == CONF_ADMIN)
            base = (const char *)&c->admin.tls;
        else if (row->context == CONF_STREAM)
            base = (const char *)&c->stream.servers[0].tls;
        else
            base = (const char *)&s->tls;
        break;
    case CONF_BASE_LOCATION: base = (const char *)&s->locations[0]; break;
    case CONF_BASE_UPSTREAM: base = (const char *)&c->upstreams[0]; break;
    case CONF_BASE_MODULE: base = conf_module_conf(s->locations[0].modules, module); break;
    }
    ck_assert_ptr_nonnull(base);
    const void *field = base + entry->offset;
    switch (entry->kind) {
    case CONF_KIND_DURATION: snprintf(buf, len, "%" PRIu32, *(const uint32_t *)field); break;
    case CONF_KIND_SIZE: snprintf(buf, len, "%zu", *(const size_t *)field); break;
    case CONF_KIND_COUNT:
    case CONF_KIND_FLAGS: snprintf(buf, len, "%u", *(const unsigned *)field); break;
    case CONF_KIND_SWITCH: snprintf(buf, len, "%d", *(const bool *)field); break;
    case CONF_KIND_KEYWORD: snprintf(buf, len, "%d", *(const int *)field); break;
    case CONF_KIND_STRING:
    case CONF_KIND_PATH: {
        const char *text = *(char *const *)field;
        snprintf(buf, len, "%s", text != NULL ? text : "(null)");
        break;
    }
    case CONF_KIND_NONE: ck_abort_msg("%s: its entry sets no one field: give it a show", row->name);
    }
}

/* What `row`'s directive leaves with `value` written (NULL: not written);
 * `users`: a user file's path, for USERS in row->with. */
static void documented_written(const struct documented_default *row, const char *value,
                               const char *users, char *buf, size_t len)
{
    char with[256] = "";
    const char *token = row->with != NULL ? strstr(row->with, "USERS") : NULL;
    int n = 0;
    if (token != NULL)
        n = snprintf(with, sizeof(with), "%.*s%s%s", (int)(token - row->with), row->with, users,
                     token + strlen("USERS"));
    else if (row->with != NULL)
        n = snprintf(with, sizeof(with), "%s", row->with);
    ck_assert(n >= 0 && (size_t)n < sizeof(with));
    char line[512];
    if (value != NULL)
        n = snprintf(line, sizeof(line), "%s %s; %s", row->name, value, with);
    else
        n = snprintf(line, sizeof(line), "%s", with);
    ck_assert(n >= 0 && (size_t)n < sizeof(line));
    struct conf_config *c = documented_config(row->context, line);
    documented_value(c, row, buf, len);
    conf_free(c);
}

START_TEST(documented_defaults_are_the_code_s)
{
    const struct documented_default *row = &documented_defaults[_i];
    /* auth_basic on needs a user file with a user: alice's, from
     * `htpasswd -nbB -C 4 alice secret` */
    char users[] = "/tmp/corral-users-XXXXXX";
    bool needs_users = row->with != NULL && strstr(row->with, "USERS") != NULL;
    if (needs_users) {
        int fd = mkstemp(users);
        ck_assert_int_ge(fd, 0);
        static const char user[] =
            "alice:$2y$04$PGfAFGJbPzOJUX./IawePemBWfv2cwWxCay9aPiyh.tbmm43pCvVG\n";
        ck_assert_int_eq(write(fd, user, strlen(user)), (ssize_t)strlen(user));
        ck_assert_int_eq(close(fd), 0);
    }
    char absent[256], written[256], other[256];
    documented_written(row, NULL, users, absent, sizeof(absent));
    documented_written(row, row->value, users, written, sizeof(written));
    documented_written(row, row->other, users, other, sizeof(other));
    if (needs_users)
        unlink(users);
    ck_assert_msg(strcmp(absent, written) == 0, "%s: absent: %s; written \"%s\": %s", row->name,
                  absent, row->value, written);
    ck_assert_msg(strcmp(other, written) != 0, "%s: \"%s\" and \"%s\" both give %s", row->name,
                  row->value, row->other, written);
}
END_TEST

START_TEST(empty_text)
{
    struct conf_config *config;
    struct conf_error error;
    ck_assert_int_eq(conf_parse("empty.conf", "", 0, NULL, NULL, &config, &error), 0);
    ck_assert_uint_eq(config->server_count, 0);
    conf_free(config);
    conf_free(NULL);
}
END_TEST

/*
 * One row per setting: a config and the value one field must take.  The
 * field is named as a path, read by numeric_field().
 */
struct field_case {
    const char *text;
    const char *field;
    uint64_t expect;
};

static uint64_t numeric_field(const struct conf_config *c, const char *field)
{
    const struct conf_server *s = c->server_count > 0 ? &c->servers[0] : NULL;
    const struct conf_upstream *u = c->upstream_count > 0 ? &c->upstreams[0] : NULL;
    const struct conf_tls *tls = s != NULL ? &s->tls : NULL;
    const struct conf_location *l = s != NULL && s->location_count > 0 ? &s->locations[0] : NULL;
    static const char server_http[] = "server.http.";
    const struct conf_http *http = &c->http;
    const struct proxy_module_conf *proxy = proxy_of(c->modules);
    const struct proxy_module_conf *lp = l != NULL ? proxy_of(l->modules) : NULL;
    if (strncmp(field, server_http, strlen(server_http)) == 0) {
        ck_assert_ptr_nonnull(s);
        http = &s->http;
        proxy = proxy_of(s->modules);
        field += strlen(server_http);
    } else if (strncmp(field, "http.", 5) == 0) {
        field += 5;
    }
    struct {
        const char *name;
        uint64_t value;
    } fields[] = {
        {"workers", c->workers},
        {"wakeup", c->wakeup},
        {"max_connections", c->max_connections},
        {"busy_poll_usecs", c->busy_poll_usecs},
        {"drain_timeout_ms", c->drain_timeout_ms},
        {"log_level", c->log_level},
        {"client_header_timeout_ms", http->limits.header_timeout_ms},
        {"client_body_timeout_ms", http->limits.body_timeout_ms},
        {"send_timeout_ms", http->limits.send_timeout_ms},
        {"keepalive_timeout_ms", http->limits.keepalive_timeout_ms},
        {"keepalive_requests", http->limits.keepalive_requests},
        {"client_max_header_size", http->limits.max_header_size},
        {"client_max_headers", http->limits.max_headers},
        {"client_max_body_size", http->limits.max_body_size},
        {"proxy_connect_timeout_ms", proxy->proxy.connect_timeout_ms},
        {"proxy_read_timeout_ms", proxy->proxy.read_timeout_ms},
        {"proxy_send_timeout_ms", proxy->proxy.send_timeout_ms},
        {"upstream.balance", u != NULL ? u->upstream.balance : 99},
        {"upstream.keepalive", u != NULL ? u->upstream.keepalive : 99},
        {"upstream.keepalive_timeout_ms", u != NULL ? u->upstream.idle_timeout_ms : 99},
        {"upstream.server.weight", u != NULL ? u->upstream.servers[0].weight : 99},
        {"upstream.server.max_fails", u != NULL ? u->upstream.servers[0].max_fails : 99},
        {"upstream.server.fail_timeout_ms",
         u != NULL ? u->upstream.servers[0].fail_timeout_ms : 99},
        {"server.tls.certificate_count", tls != NULL ? tls->certificate_count : 99},
        {"server.tls.protocols", tls != NULL ? tls->settings.protocols : 99},
        {"server.tls.session_tickets", tls != NULL ? tls->settings.session_tickets : 99},
        {"server.tls.ticket_key_rotation_ms",
         tls != NULL ? tls->settings.ticket_key_rotation_ms : 99},
        {"server.tls.session_cache", tls != NULL ? tls->settings.session_cache : 99},
        {"server.tls.session_timeout_ms", tls != NULL ? tls->settings.session_timeout_ms : 99},
        {"server.tls.handshake_timeout_ms", tls != NULL ? tls->settings.handshake_timeout_ms : 99},
        {"server.tls.ktls", tls != NULL ? tls->settings.ktls : 99},
        {"server.tls.certificate_watch", tls != NULL ? tls->settings.certificate_watch : 99},
        {"server.tls.verify_client", tls != NULL ? tls->settings.verify_client : 99},
        {"location.proxy_tls.verify", lp != NULL ? lp->tls.verify : 99},
        {"location.next_upstream", lp != NULL ? lp->proxy.next_upstream & ~PROXY_NEXT_WRITTEN : 99},
        {"location.next_upstream_tries", lp != NULL ? lp->proxy.next_upstream_tries : 99},
        {"location.next_upstream_timeout_ms", lp != NULL ? lp->proxy.next_upstream_timeout_ms : 99},
        {"upstream.hash_consistent", u != NULL ? u->upstream.hash_consistent : 99},
        {"upstream.random_two", u != NULL ? u->upstream.random_two : 99},
        {"upstream.health.enabled", u != NULL ? u->upstream.health.enabled : 99},
        {"upstream.health.interval_ms", u != NULL ? u->upstream.health.interval_ms : 99},
        {"upstream.health.fall", u != NULL ? u->upstream.health.fall : 99},
        {"upstream.health.port", u != NULL ? u->upstream.health.port : 99},
        {"upstream.health.match0", u != NULL ? u->upstream.health.match[0] : 99},
        {"upstream.health.match3", u != NULL ? u->upstream.health.match[3] : 99},
        {"upstream.health.type", u != NULL ? u->upstream.health.type : 99},
        {"upstream.server.backup", u != NULL ? u->upstream.servers[0].backup : 99},
        {"upstream.server.down", u != NULL ? u->upstream.servers[0].down : 99},
        {"upstream.server.max_conns", u != NULL ? u->upstream.servers[0].max_conns : 99},
        {"upstream.server.slow_start_ms", u != NULL ? u->upstream.servers[0].slow_start_ms : 99},
        {"upstream.server.resolve", u != NULL ? u->upstream.servers[0].resolve : 99},
        {"upstream.resolve_valid_ms", u != NULL ? u->upstream.resolve_valid_ms : 99},
        {"upstream.server.resolve_slots", u != NULL ? u->upstream.servers[0].resolve_slots : 99},
        {"upstream.server.service", u != NULL
                                        ? u->upstream.servers[0].service != NULL &&
                                              strcmp(u->upstream.servers[0].service, "_x._tcp") == 0
                                        : 99},
        {"location.proxy_buffer_size", lp != NULL ? lp->proxy.response_head_limit : 99},
        {"location.proxy_connect_timeout_ms", lp != NULL ? lp->proxy.connect_timeout_ms : 99},
        {"location.proxy_read_timeout_ms", lp != NULL ? lp->proxy.read_timeout_ms : 99},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (strcmp(fields[i].name, field) == 0)
            return fields[i].value;
    ck_abort_msg("no field %s", field);
    return 0;
}

#define UP(body) "upstream app { server 127.0.0.1:9001" body "; }\n"
/* A TLS server with one certificate and `body` among its directives. */
#define TLS(body)                                                                                  \
    "server { listen 127.0.0.1:443 tls; tls_certificate c.pem; tls_certificate_key k.pem; " body   \
    " location / { return 204; } }\n"
/* A location sending to an https upstream, with `body` among its directives. */
#define HTTPS(body)                                                                                \
    "server { listen 127.0.0.1:80; location / { proxy_pass https://127.0.0.1:8443; " body " } }\n"
/* A location sending to a plain upstream, with `body` among its directives. */
#define PROXY(body)                                                                                \
    "server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1; " body " } }\n"

static const struct field_case field_cases[] = {
    {"workers 8;", "workers", 8},
    {"workers auto;", "workers", 0},
    {"workers 1024;", "workers", 1024},
    {"wakeup auto;", "wakeup", CORRAL_WAKEUP_AUTO},
    {"wakeup roundrobin;", "wakeup", CORRAL_WAKEUP_ROUNDROBIN},
    {"wakeup affinity;", "wakeup", CORRAL_WAKEUP_AFFINITY},
    {"wakeup exclusive;", "wakeup", CORRAL_WAKEUP_EXCLUSIVE},
    {"wakeup reuseport;", "wakeup", CORRAL_WAKEUP_REUSEPORT},
    {"wakeup herd;", "wakeup", CORRAL_WAKEUP_HERD},
    {"wakeup balanced;", "wakeup", CORRAL_WAKEUP_BALANCED},
    {"wakeup affinity spill=1.25;", "wakeup", CORRAL_WAKEUP_AFFINITY},
    {"max_connections 500;", "max_connections", 500},
    {"busy_poll 50;", "busy_poll_usecs", 50},
    {"busy_poll 75us;", "busy_poll_usecs", 75},
    {"busy_poll 2ms;", "busy_poll_usecs", 2000},
    {"busy_poll 1s;", "busy_poll_usecs", 1000000},
    {"busy_poll 0;", "busy_poll_usecs", 0},
    {"busy_poll off;", "busy_poll_usecs", 0},
    {"busy_poll 2147483647us;", "busy_poll_usecs", 2147483647},
    {"drain_timeout 30s;", "drain_timeout_ms", 30000},
    {"drain_timeout 1500ms;", "drain_timeout_ms", 1500},
    {"error_log /var/log/corral.log warn;", "log_level", CORRAL_LOG_WARN},
    {"error_log stderr debug;", "log_level", CORRAL_LOG_DEBUG},
    {"error_log stderr error;", "log_level", CORRAL_LOG_ERROR},
    {"error_log stderr;", "log_level", CORRAL_LOG_INFO},
    {"client_header_timeout 5s;", "http.client_header_timeout_ms", 5000},
    {"client_body_timeout 1m;", "http.client_body_timeout_ms", 60000},
    {"send_timeout 250ms;", "http.send_timeout_ms", 250},
    {"keepalive_timeout 0;", "http.keepalive_timeout_ms", 0},
    {"keepalive_requests 50;", "http.keepalive_requests", 50},
    {"client_max_header_size 16k;", "http.client_max_header_size", 16384},
    {"client_max_headers 64;", "http.client_max_headers", 64},
    {"client_max_body_size 10m;", "http.client_max_body_size", 10485760},
    {"client_max_body_size 0;", "http.client_max_body_size", 0},
    {"proxy_connect_timeout 2s;", "http.proxy_connect_timeout_ms", 2000},
    {"proxy_read_timeout 1h;", "http.proxy_read_timeout_ms", 3600000},
    {"proxy_send_timeout 1d;", "http.proxy_send_timeout_ms", 86400000},
    /* A server inherits the top level's value, written before or after it. */
    {"keepalive_timeout 5s;\n"
     "server { listen 127.0.0.1:8080; location / { return 204; } }",
     "server.http.keepalive_timeout_ms", 5000},
    {"server { listen 127.0.0.1:8080; location / { return 204; } }\n"
     "keepalive_timeout 5s;",
     "server.http.keepalive_timeout_ms", 5000},
    {"client_max_body_size 2m;\n"
     "server { listen 127.0.0.1:8080; client_max_body_size 5m; location / { return 204; } }",
     "server.http.client_max_body_size", 5 * 1024 * 1024},
    {"server { listen 127.0.0.1:8080; client_max_body_size 5m; location / { return 204; } }\n"
     "client_max_body_size 2m;",
     "server.http.client_max_body_size", 5 * 1024 * 1024},
    {"server { listen 127.0.0.1:8080; client_max_body_size 5m; location / { return 204; } }\n"
     "client_max_body_size 2m;",
     "http.client_max_body_size", 2 * 1024 * 1024},
    {"server { listen 127.0.0.1:8080; location / { return 204; } }",
     "server.http.proxy_read_timeout_ms", 60000},
    {"server { listen 127.0.0.1:8080; client_header_timeout 1s; client_body_timeout 2s; "
     "send_timeout 3s; keepalive_timeout 4s; keepalive_requests 5; client_max_header_size 6k; "
     "client_max_headers 7; client_max_body_size 8k; proxy_connect_timeout 9s; "
     "proxy_read_timeout 10s; proxy_send_timeout 11s; location / { return 204; } }",
     "server.http.proxy_send_timeout_ms", 11000},
    {UP(""), "upstream.balance", PROXY_BALANCE_ROUND_ROBIN},
    {UP(""), "upstream.keepalive", 32},
    {UP(""), "upstream.keepalive_timeout_ms", 60000},
    {"upstream app { server 127.0.0.1:1; keepalive_timeout 5s; }", "upstream.keepalive_timeout_ms",
     5000},
    {UP(""), "upstream.server.weight", 1},
    {UP(""), "upstream.server.max_fails", 1},
    {UP(""), "upstream.server.fail_timeout_ms", 10000},
    {UP(" weight=3"), "upstream.server.weight", 3},
    {UP(" max_fails=0"), "upstream.server.max_fails", 0},
    {UP(" fail_timeout=30s max_fails=5 weight=2"), "upstream.server.fail_timeout_ms", 30000},
    {"upstream app { server 127.0.0.1:1; balance least_conn; }", "upstream.balance",
     PROXY_BALANCE_LEAST_CONN},
    {"upstream app { server 127.0.0.1:1; balance hash; }", "upstream.balance", PROXY_BALANCE_HASH},
    {"upstream app { server 127.0.0.1:1; balance round_robin; keepalive 0; }", "upstream.keepalive",
     0},
    {UP(" backup"), "upstream.server.backup", 1},
    {UP(" down"), "upstream.server.down", 1},
    {UP(" max_conns=7 backup"), "upstream.server.max_conns", 7},
    {UP(" slow_start=30s"), "upstream.server.slow_start_ms", 30000},
    {"upstream app { resolver 127.0.0.1 [::1]:5353 valid=5s; server app.internal:80 resolve; }",
     "upstream.resolve_valid_ms", 5000},
    {"upstream app { resolver 127.0.0.1; server app.internal:80 resolve; }",
     "upstream.server.resolve", 1},
    {"upstream app { resolver 127.0.0.1; server app.internal:80 resolve; }",
     "upstream.resolve_valid_ms", 0},
    {"upstream app { resolver 127.0.0.1; server app.internal:80 resolve max_addresses=200; }",
     "upstream.server.resolve_slots", 200},
    {"upstream app { resolver 127.0.0.1; server _http._tcp.app.internal service=_x._tcp resolve; }",
     "upstream.server.service", 1},
    {"upstream app { server 127.0.0.1:1; balance ip_hash; }", "upstream.balance",
     PROXY_BALANCE_IP_HASH},
    {"upstream app { server 127.0.0.1:1; balance hash $http_x_user consistent; }",
     "upstream.hash_consistent", 1},
    {"upstream app { server 127.0.0.1:1; balance random two; }", "upstream.random_two", 1},
    {UP(""), "upstream.health.enabled", 0},
    {"upstream app { server 127.0.0.1:1; health_check; }", "upstream.health.interval_ms", 5000},
    {"upstream app { server 127.0.0.1:1; health_check interval=2s fall=4 port=81; }",
     "upstream.health.fall", 4},
    {"upstream app { server 127.0.0.1:1; health_check port=81; }", "upstream.health.port", 81},
    /* match=204 sets bit 204 - 192 of the fourth word */
    {"upstream app { server 127.0.0.1:1; health_check match=204; }", "upstream.health.match3",
     1ull << 12},
    {"upstream app { server 127.0.0.1:1; health_check match=204; }", "upstream.health.match0", 0},
    {"upstream app { server 127.0.0.1:1; health_check; }", "upstream.health.type",
     PROXY_HEALTH_HTTP},
    {"upstream app { server 127.0.0.1:1; health_check type=http2; }", "upstream.health.type",
     PROXY_HEALTH_HTTP2},
    {"upstream app { server 127.0.0.1:1; health_check type=grpc grpc_service=a.B; }",
     "upstream.health.type", PROXY_HEALTH_GRPC},
    {"stream { upstream db { server 127.0.0.1:1; health_check type=tcp interval=1s; } }",
     "upstream.health.type", PROXY_HEALTH_TCP},
    {PROXY(""), "location.next_upstream", PROXY_NEXT_ERROR | PROXY_NEXT_TIMEOUT},
    {PROXY("proxy_next_upstream off;"), "location.next_upstream", 0},
    {"proxy_next_upstream http_502 error; server { listen 127.0.0.1:80; location / { proxy_pass "
     "http://127.0.0.1:1; } }",
     "location.next_upstream", PROXY_NEXT_HTTP_502 | PROXY_NEXT_ERROR},
    {"server { listen 127.0.0.1:80; proxy_next_upstream_tries 2; location / { proxy_pass "
     "http://127.0.0.1:1; proxy_next_upstream_timeout 3s; } }",
     "location.next_upstream_tries", 2},
    {PROXY("proxy_next_upstream_timeout 3s;"), "location.next_upstream_timeout_ms", 3000},
    /* a location's 0 (no limit) takes its server's; a server's stays */
    {"server { listen 127.0.0.1:80; proxy_next_upstream_tries 2; location / { proxy_pass "
     "http://127.0.0.1:1; proxy_next_upstream_tries 0; } }",
     "location.next_upstream_tries", 2},
    {"proxy_next_upstream_tries 3; server { listen 127.0.0.1:80; proxy_next_upstream_tries 0; "
     "location / { proxy_pass http://127.0.0.1:1; } }",
     "location.next_upstream_tries", 0},
    {"proxy_next_upstream_timeout 5s; server { listen 127.0.0.1:80; location / { proxy_pass "
     "http://127.0.0.1:1; proxy_next_upstream_timeout 0; } }",
     "location.next_upstream_timeout_ms", 5000},
    /* TLS: the defaults, in servers with and without a tls listener */
    {TLS(""), "server.tls.certificate_count", 1},
    {TLS(""), "server.tls.protocols", TLS_PROTOCOL_1_2 | TLS_PROTOCOL_1_3},
    {TLS(""), "server.tls.session_tickets", 1},
    {TLS(""), "server.tls.ticket_key_rotation_ms", 3600000},
    {TLS(""), "server.tls.session_cache", 20000},
    {TLS(""), "server.tls.session_timeout_ms", 300000},
    {TLS(""), "server.tls.handshake_timeout_ms", 10000},
    {TLS(""), "server.tls.ktls", 0},
    {TLS(""), "server.tls.verify_client", TLS_VERIFY_CLIENT_OFF},
    {TLS(""), "location.proxy_tls.verify", 1},
    {"server { listen 127.0.0.1:80; location / { return 204; } }", "server.tls.certificate_count",
     0},
    {"server { listen 127.0.0.1:80; location / { return 204; } }", "server.tls.protocols",
     TLS_PROTOCOL_1_2 | TLS_PROTOCOL_1_3},
    {"server { listen 127.0.0.1:80; location / { return 204; } }", "server.tls.session_cache",
     20000},
    {"server { listen 127.0.0.1:80; location / { return 204; } }",
     "server.tls.handshake_timeout_ms", 10000},
    {"server { listen 127.0.0.1:80; location / { return 204; } }", "server.tls.session_tickets", 1},
    {"server { listen 127.0.0.1:80; location / { return 204; } }", "location.proxy_tls.verify", 1},
    /* TLS: each directive */
    {TLS("tls_protocols TLSv1.2;"), "server.tls.protocols", TLS_PROTOCOL_1_2},
    {TLS("tls_protocols TLSv1.3;"), "server.tls.protocols", TLS_PROTOCOL_1_3},
    {TLS("tls_protocols TLSv1.3 TLSv1.2;"), "server.tls.protocols",
     TLS_PROTOCOL_1_2 | TLS_PROTOCOL_1_3},
    {TLS("tls_session_tickets off;"), "server.tls.session_tickets", 0},
    {TLS("tls_session_tickets on;"), "server.tls.session_tickets", 1},
    {TLS("tls_session_ticket_rotation 30m;"), "server.tls.ticket_key_rotation_ms", 1800000},
    {TLS("tls_session_ticket_rotation 1s;"), "server.tls.ticket_key_rotation_ms", 1000},
    {TLS("tls_session_ticket_rotation 12h;"), "server.tls.ticket_key_rotation_ms", 43200000},
    {TLS("tls_session_cache 50000;"), "server.tls.session_cache", 50000},
    {TLS("tls_session_cache off;"), "server.tls.session_cache", 0},
    {TLS("tls_session_cache 0;"), "server.tls.session_cache", 0},
    {TLS("tls_session_timeout 1h;"), "server.tls.session_timeout_ms", 3600000},
    {TLS("tls_session_timeout 1ms;"), "server.tls.session_timeout_ms", 1},
    {TLS("tls_handshake_timeout 3s;"), "server.tls.handshake_timeout_ms", 3000},
    {TLS("tls_handshake_timeout 250ms;"), "server.tls.handshake_timeout_ms", 250},
    {TLS("tls_ktls on;"), "server.tls.ktls", 1},
    {TLS("tls_ktls off;"), "server.tls.ktls", 0},
    {TLS(""), "server.tls.certificate_watch", 0},
    {TLS("tls_certificate_watch on;"), "server.tls.certificate_watch", 1},
    /* Client certificates are required once a CA file is given, unless
     * tls_verify_client says otherwise, before or after it. */
    {TLS("tls_client_certificate ca.pem;"), "server.tls.verify_client", TLS_VERIFY_CLIENT_ON},
    {TLS("tls_verify_client optional; tls_client_certificate ca.pem;"), "server.tls.verify_client",
     TLS_VERIFY_CLIENT_OPTIONAL},
    {TLS("tls_client_certificate ca.pem; tls_verify_client off;"), "server.tls.verify_client",
     TLS_VERIFY_CLIENT_OFF},
    {TLS("tls_client_certificate ca.pem; tls_verify_client on;"), "server.tls.verify_client",
     TLS_VERIFY_CLIENT_ON},
    {TLS("tls_verify_client off;"), "server.tls.verify_client", TLS_VERIFY_CLIENT_OFF},
    /* TLS to upstreams */
    {HTTPS(""), "location.proxy_tls.verify", 1},
    {HTTPS("proxy_tls_verify off;"), "location.proxy_tls.verify", 0},
    {HTTPS("proxy_tls_verify on;"), "location.proxy_tls.verify", 1},
    /* proxy_buffer_size: 8k, or the nearest setting: location, server, top
     * level (written before or after the server). */
    {"server { listen 127.0.0.1:80; location / { return 204; } }", "location.proxy_buffer_size",
     8192},
    {"proxy_buffer_size 16k;\nserver { listen 127.0.0.1:80; location / { return 204; } }",
     "location.proxy_buffer_size", 16384},
    {"server { listen 127.0.0.1:80; location / { return 204; } }\nproxy_buffer_size 16k;",
     "location.proxy_buffer_size", 16384},
    {"proxy_buffer_size 16k;\n"
     "server { listen 127.0.0.1:80; proxy_buffer_size 4k; location / { return 204; } }",
     "location.proxy_buffer_size", 4096},
    {"server { listen 127.0.0.1:80; proxy_buffer_size 4k; location / { return 204; } }\n"
     "proxy_buffer_size 16k;",
     "location.proxy_buffer_size", 4096},
    {"proxy_buffer_size 16k;\nserver { listen 127.0.0.1:80; proxy_buffer_size 4k;\n"
     "location / { proxy_pass http://127.0.0.1:1; proxy_buffer_size 128k; } }",
     "location.proxy_buffer_size", 131072},
    {"server { listen 127.0.0.1:80; location / { proxy_buffer_size 1024; return 204; } }",
     "location.proxy_buffer_size", 1024},
    /* A location has its server's proxy timeouts, which may be the top
     * level's. */
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1; } }",
     "location.proxy_read_timeout_ms", 60000},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1; } }\n"
     "proxy_read_timeout 5s;",
     "location.proxy_read_timeout_ms", 5000},
    {"proxy_connect_timeout 5s;\nserver { listen 127.0.0.1:80; proxy_connect_timeout 2s;\n"
     "location / { proxy_pass http://127.0.0.1:1; proxy_buffer_size 4k; } }",
     "location.proxy_connect_timeout_ms", 2000},
};

START_TEST(field_table)
{
    const struct field_case *row = &field_cases[_i];
    struct conf_config *c = parse_ok(row->text);
    uint64_t got = numeric_field(c, row->field);
    ck_assert_msg(got == row->expect, "%s: %s = %llu, expected %llu", row->text, row->field,
                  (unsigned long long)got, (unsigned long long)row->expect);
    conf_free(c);
}
END_TEST

START_TEST(core_strings)
{
    struct conf_config *c = parse_named("/etc/corral/corral.conf",
                                        "user www-data;\n"
                                        "group 'www-data';\n"
                                        "pid_file run/corral.pid;\n"
                                        "error_log /var/log/corral/error.log info;\n"
                                        "access_log logs/access.log;\n"
                                        "log_format \"$remote_addr \\\"$request\\\" $status\";\n",
                                        NULL);
    ck_assert_str_eq(c->user, "www-data");
    ck_assert_str_eq(c->group, "www-data");
    ck_assert_str_eq(c->pid_file, "/etc/corral/run/corral.pid");
    ck_assert_str_eq(c->error_log, "/var/log/corral/error.log");
    ck_assert_str_eq(c->access_log, "/etc/corral/logs/access.log");
    ck_assert_str_eq(c->log_format, "$remote_addr \"$request\" $status");
    conf_free(c);

    c = parse_ok("access_log off; error_log stderr;");
    ck_assert_ptr_null(c->access_log);
    ck_assert_ptr_null(c->error_log);
    conf_free(c);
}
END_TEST

START_TEST(admin_block)
{
    struct conf_config *c = parse_ok("admin {\n"
                                     "    listen 127.0.0.1:9090;\n"
                                     "    listen [::1]:9090;\n"
                                     "}\n");
    ck_assert_uint_eq(c->admin_listen_count, 2);
    ck_assert_str_eq(c->admin_listens[0], "127.0.0.1:9090");
    ck_assert_str_eq(c->admin_listens[1], "[::1]:9090");
    ck_assert(!c->admin.listens[0].tls && !c->admin.listens[1].tls);
    ck_assert_uint_eq(c->admin.access.rule_count, 0);
    ck_assert_ptr_null(c->admin.token_file);
    conf_free(c);
}
END_TEST

/* Who may read it: allow/deny of its own (the top level's are not
 * inherited), a token file, TLS with client certificates. */
START_TEST(admin_block_access)
{
    struct conf_config *c = parse_ok("deny 192.0.2.1;\n"
                                     "admin {\n"
                                     "    listen 127.0.0.1:9090;\n"
                                     "    listen *:9443 tls;\n"
                                     "    allow 10.0.0.0/8;\n"
                                     "    deny all;\n"
                                     "    auth_token_file secrets/admin.token;\n"
                                     "    tls_certificate admin.pem;\n"
                                     "    tls_certificate_key admin.key;\n"
                                     "    tls_client_certificate ca.pem;\n"
                                     "}\n");
    ck_assert_uint_eq(c->admin_listen_count, 2);
    ck_assert(!c->admin.listens[0].tls && c->admin.listens[1].tls);
    ck_assert_uint_eq(c->admin.listens[1].pos.line, 4);
    ck_assert_uint_eq(c->admin.access.rule_count, 2);
    ck_assert(c->admin.access.rules[0].allow && c->admin.access.rules[0].net.bits == 8);
    ck_assert(!c->admin.access.rules[1].allow && c->admin.access.rules[1].net.family == AF_UNSPEC);
    const struct access_conf *top = conf_module_conf(c->modules, &access_module.conf);
    ck_assert_uint_eq(top->rule_count, 1);
    ck_assert_str_eq(c->admin.token_file, "secrets/admin.token");
    ck_assert_uint_eq(c->admin.token_file_pos.line, 7);
    ck_assert_uint_eq(c->admin.tls.certificate_count, 1);
    ck_assert_str_eq(c->admin.tls.certificates[0].key, "admin.key");
    ck_assert_str_eq(c->admin.tls.settings.client_ca, "ca.pem");
    /* as in a server: a CA file alone turns verification on */
    ck_assert_int_eq(c->admin.tls.settings.verify_client, TLS_VERIFY_CLIENT_ON);
    conf_free(c);
}
END_TEST

START_TEST(full_server)
{
    struct conf_config *c =
        parse_named("/etc/corral/corral.conf",
                    "upstream app {\n"
                    "    server 127.0.0.1:9001 weight=2;\n"
                    "    server 127.0.0.1:9002;\n"
                    "    balance least_conn;\n"
                    "    keepalive 64;\n"
                    "}\n"
                    "server {\n"
                    "    listen 127.0.0.1:8080 deferred backlog=4096;\n"
                    "    listen 127.0.0.1:8443 tls default_server;\n"
                    "    server_name example.com *.example.com;\n"
                    "    tls_certificate     cert.pem;\n"
                    "    tls_certificate_key /etc/ssl/private/key.pem;\n"
                    "    location /healthz { return 200 \"ok\\n\"; }\n"
                    "    location = /empty { return 204; }\n"
                    "    location / {\n"
                    "        proxy_pass http://app;\n"
                    "        proxy_set_header X-Real-IP $remote_addr;\n"
                    "        proxy_set_header Host \"example.com\";\n"
                    "        proxy_hide_header Server;\n"
                    "    }\n"
                    "    location /direct { proxy_pass http://127.0.0.1:3000; }\n"
                    "}\n",
                    NULL);
    ck_assert_uint_eq(c->upstream_count, 1);
    const struct conf_upstream *u = &c->upstreams[0];
    ck_assert_str_eq(u->upstream.name, "app");
    ck_assert_uint_eq(u->pos.line, 1);
    ck_assert_uint_eq(u->pos.col, 1);
    ck_assert_uint_eq(u->upstream.server_count, 2);
    ck_assert_str_eq(u->upstream.servers[0].address, "127.0.0.1:9001");
    ck_assert_uint_eq(u->upstream.servers[0].weight, 2);
    ck_assert_uint_eq(u->server_pos[0].line, 2);
    ck_assert_uint_eq(u->server_pos[0].col, 12);
    ck_assert_str_eq(u->upstream.servers[1].address, "127.0.0.1:9002");
    ck_assert_uint_eq(u->upstream.servers[1].weight, 1);
    ck_assert_int_eq(u->upstream.balance, PROXY_BALANCE_LEAST_CONN);
    ck_assert_uint_eq(u->upstream.keepalive, 64);

    ck_assert_uint_eq(c->server_count, 1);
    const struct conf_server *s = &c->servers[0];
    ck_assert_uint_eq(s->pos.line, 7);
    ck_assert_uint_eq(s->pos.col, 1);
    ck_assert_str_eq(s->pos.file, "/etc/corral/corral.conf");
    ck_assert_uint_eq(s->listen_count, 2);
    ck_assert_str_eq(s->listens[0].address, "127.0.0.1:8080");
    ck_assert(!s->listens[0].tls);
    ck_assert(!s->listens[0].default_server);
    ck_assert(s->listens[0].has_socket_options);
    ck_assert(s->listens[0].deferred);
    ck_assert_uint_eq(s->listens[0].backlog, 4096);
    ck_assert_uint_eq(s->listens[0].pos.line, 8);
    ck_assert_uint_eq(s->listens[0].pos.col, 12);
    ck_assert_str_eq(s->listens[1].address, "127.0.0.1:8443");
    ck_assert(s->listens[1].tls);
    ck_assert(s->listens[1].default_server);
    ck_assert(!s->listens[1].has_socket_options);
    ck_assert(!s->listens[1].deferred);
    ck_assert_uint_eq(s->listens[1].backlog, 0);
    ck_assert_uint_eq(s->server_name_count, 2);
    ck_assert_str_eq(s->server_names[0], "example.com");
    ck_assert_str_eq(s->server_names[1], "*.example.com");
    ck_assert_uint_eq(s->tls.certificate_count, 1);
    ck_assert_str_eq(s->tls.certificates[0].certificate, "/etc/corral/cert.pem");
    ck_assert_str_eq(s->tls.certificates[0].key, "/etc/ssl/private/key.pem");
    ck_assert_uint_eq(s->tls.certificates[0].certificate_pos.line, 11);
    ck_assert_uint_eq(s->tls.certificates[0].certificate_pos.col, 25);
    ck_assert_uint_eq(s->tls.certificates[0].key_pos.line, 12);
    ck_assert_uint_eq(s->tls.certificates[0].key_pos.col, 25);

    ck_assert_uint_eq(s->location_count, 4);
    const struct conf_location *l = &s->locations[0];
    ck_assert_str_eq(l->path, "/healthz");
    ck_assert(!l->exact);
    ck_assert_str_eq(l->content, "return");
    ck_assert_uint_eq(return_of(l)->code, 200);
    ck_assert_str_eq(return_of(l)->text, "ok\n");
    ck_assert_uint_eq(l->pos.line, 13);
    ck_assert_uint_eq(l->pos.col, 5);
    l = &s->locations[1];
    ck_assert_str_eq(l->path, "/empty");
    ck_assert(l->exact);
    ck_assert_uint_eq(return_of(l)->code, 204);
    ck_assert_ptr_null(return_of(l)->text);
    l = &s->locations[2];
    ck_assert_str_eq(l->path, "/");
    ck_assert_str_eq(l->content, "proxy_pass");
    ck_assert_str_eq(proxy_of(l->modules)->pass, "http://app");
    ck_assert_uint_eq(proxy_of(l->modules)->set_header_count, 2);
    ck_assert_str_eq(proxy_of(l->modules)->set_headers[0].name, "X-Real-IP");
    ck_assert_str_eq(proxy_of(l->modules)->set_headers[0].value, "$remote_addr");
    ck_assert_str_eq(proxy_of(l->modules)->set_headers[1].name, "Host");
    ck_assert_str_eq(proxy_of(l->modules)->set_headers[1].value, "example.com");
    ck_assert_uint_eq(proxy_of(l->modules)->hide_header_count, 1);
    ck_assert_str_eq(proxy_of(l->modules)->hide_headers[0], "Server");
    l = &s->locations[3];
    ck_assert_str_eq(proxy_of(l->modules)->pass, "http://127.0.0.1:3000");
    conf_free(c);
}
END_TEST

START_TEST(tls_server)
{
    struct conf_config *c =
        parse_named("/etc/corral/corral.conf",
                    "server {\n"
                    "    listen *:443 tls default_server;\n"
                    "    server_name example.com;\n"
                    "    tls_certificate     certs/rsa.pem;\n"
                    "    tls_certificate_key certs/rsa.key;\n"
                    "    tls_certificate     /etc/ssl/ecdsa.pem;\n"
                    "    tls_certificate_key /etc/ssl/ecdsa.key;\n"
                    "    tls_protocols TLSv1.3;\n"
                    "    tls_ciphers \"ECDHE+AESGCM:!aNULL\";\n"
                    "    tls_ciphersuites TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;\n"
                    "    tls_session_tickets off;\n"
                    "    tls_session_ticket_rotation 2h;\n"
                    "    tls_session_cache 1000;\n"
                    "    tls_session_timeout 10m;\n"
                    "    tls_handshake_timeout 5s;\n"
                    "    tls_ktls on;\n"
                    "    tls_client_certificate ca/clients.pem;\n"
                    "    location / { return 204; }\n"
                    "}\n"
                    "server {\n"
                    "    listen *:443 tls;\n"
                    "    server_name www.example.com;\n"
                    "    tls_certificate www.pem; tls_certificate_key www.key;\n"
                    "    location / { return 204; }\n"
                    "}\n",
                    NULL);
    ck_assert_uint_eq(c->server_count, 2);
    const struct conf_tls *tls = &c->servers[0].tls;
    ck_assert_uint_eq(tls->certificate_count, 2);
    const struct conf_tls_certificate *rsa = &tls->certificates[0];
    const struct conf_tls_certificate *ecdsa = &tls->certificates[1];
    ck_assert_str_eq(rsa->certificate, "/etc/corral/certs/rsa.pem");
    ck_assert_str_eq(rsa->key, "/etc/corral/certs/rsa.key");
    ck_assert_str_eq(rsa->certificate_pos.file, "/etc/corral/corral.conf");
    ck_assert_uint_eq(rsa->certificate_pos.line, 4);
    ck_assert_uint_eq(rsa->certificate_pos.col, 25);
    ck_assert_uint_eq(rsa->key_pos.line, 5);
    ck_assert_uint_eq(rsa->key_pos.col, 25);
    ck_assert_str_eq(ecdsa->certificate, "/etc/ssl/ecdsa.pem");
    ck_assert_str_eq(ecdsa->key, "/etc/ssl/ecdsa.key");
    ck_assert_uint_eq(ecdsa->certificate_pos.line, 6);
    ck_assert_uint_eq(ecdsa->key_pos.line, 7);
    ck_assert_uint_eq(tls->settings.protocols, TLS_PROTOCOL_1_3);
    ck_assert_str_eq(tls->settings.ciphers, "ECDHE+AESGCM:!aNULL");
    ck_assert_uint_eq(tls->ciphers_pos.line, 9);
    ck_assert_uint_eq(tls->ciphers_pos.col, 17);
    ck_assert_str_eq(tls->settings.ciphersuites,
                     "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
    ck_assert_uint_eq(tls->ciphersuites_pos.line, 10);
    ck_assert_uint_eq(tls->ciphersuites_pos.col, 22);
    ck_assert(!tls->settings.session_tickets);
    ck_assert_uint_eq(tls->settings.ticket_key_rotation_ms, 7200000);
    ck_assert_uint_eq(tls->settings.session_cache, 1000);
    ck_assert_uint_eq(tls->settings.session_timeout_ms, 600000);
    ck_assert_uint_eq(tls->settings.handshake_timeout_ms, 5000);
    ck_assert(tls->settings.ktls);
    ck_assert_str_eq(tls->settings.client_ca, "/etc/corral/ca/clients.pem");
    ck_assert_uint_eq(tls->client_ca_pos.line, 17);
    ck_assert_uint_eq(tls->client_ca_pos.col, 28);
    ck_assert_int_eq(tls->settings.verify_client, TLS_VERIFY_CLIENT_ON);

    /* The second server on the address keeps its own certificate and the
     * defaults of everything else. */
    tls = &c->servers[1].tls;
    ck_assert_uint_eq(tls->certificate_count, 1);
    ck_assert_str_eq(tls->certificates[0].certificate, "/etc/corral/www.pem");
    ck_assert_str_eq(tls->certificates[0].key, "/etc/corral/www.key");
    ck_assert_uint_eq(tls->certificates[0].key_pos.line, 23);
    ck_assert_uint_eq(tls->certificates[0].key_pos.col, 50);
    ck_assert_uint_eq(tls->settings.protocols, TLS_PROTOCOL_1_2 | TLS_PROTOCOL_1_3);
    ck_assert_ptr_null(tls->settings.ciphers);
    ck_assert_ptr_null(tls->settings.ciphersuites);
    ck_assert(tls->settings.session_tickets);
    ck_assert(!tls->settings.ktls);
    ck_assert_ptr_null(tls->settings.client_ca);
    ck_assert_int_eq(tls->settings.verify_client, TLS_VERIFY_CLIENT_OFF);
    conf_free(c);
}
END_TEST

START_TEST(https_proxy_pass)
{
    struct conf_config *c =
        parse_named("/etc/corral/corral.conf",
                    "upstream app { server 10.0.0.1:443; server 10.0.0.2:443; }\n"
                    "server {\n"
                    "    listen 127.0.0.1:80;\n"
                    "    location /a {\n"
                    "        proxy_tls_name app.internal;\n"
                    "        proxy_pass https://app;\n"
                    "        proxy_tls_trusted_certificate ca/internal.pem;\n"
                    "    }\n"
                    "    location /b { proxy_pass https://127.0.0.1:8443; proxy_tls_verify off; }\n"
                    "    location /c { proxy_pass https://[::1]:8443; proxy_tls_name ::1; }\n"
                    "    location /d { proxy_pass http://app; }\n"
                    "}\n",
                    NULL);
    const struct conf_server *s = &c->servers[0];
    ck_assert_uint_eq(s->location_count, 4);
    const struct conf_location *l = &s->locations[0];
    ck_assert_str_eq(l->content, "proxy_pass");
    ck_assert_str_eq(proxy_of(l->modules)->pass, "https://app");
    ck_assert(proxy_of(l->modules)->tls.verify);
    ck_assert_str_eq(proxy_of(l->modules)->tls.server_name, "app.internal");
    ck_assert_str_eq(proxy_of(l->modules)->tls.ca_file, "/etc/corral/ca/internal.pem");
    ck_assert_uint_eq(proxy_of(l->modules)->tls_ca_pos.line, 7);
    ck_assert_uint_eq(proxy_of(l->modules)->tls_ca_pos.col, 39);
    l = &s->locations[1];
    ck_assert_str_eq(proxy_of(l->modules)->pass, "https://127.0.0.1:8443");
    ck_assert(!proxy_of(l->modules)->tls.verify);
    ck_assert_ptr_null(proxy_of(l->modules)->tls.server_name);
    ck_assert_ptr_null(proxy_of(l->modules)->tls.ca_file);
    l = &s->locations[2];
    ck_assert_str_eq(proxy_of(l->modules)->pass, "https://[::1]:8443");
    ck_assert_str_eq(proxy_of(l->modules)->tls.server_name, "::1");
    ck_assert(proxy_of(l->modules)->tls.verify);
    l = &s->locations[3];
    ck_assert_str_eq(proxy_of(l->modules)->pass, "http://app");
    ck_assert(proxy_of(l->modules)->tls.verify);
    ck_assert_ptr_null(proxy_of(l->modules)->tls.server_name);
    conf_free(c);
}
END_TEST

/* proxy_upgrade lists the upgrades a location passes on; nginx's idiom,
 * proxy_set_header Upgrade $http_upgrade with its Connection line, says
 * any, and sets no header of its own. */
START_TEST(proxy_upgrade_settings)
{
    struct conf_config *c =
        parse_ok("server {\n"
                 "    listen 127.0.0.1:80;\n"
                 "    location /a { proxy_pass http://127.0.0.1:1; }\n"
                 "    location /b { proxy_pass http://127.0.0.1:1; proxy_upgrade websocket foo; }\n"
                 "    location /c { proxy_pass http://127.0.0.1:1; proxy_upgrade off; }\n"
                 "    location /d { proxy_pass http://127.0.0.1:1;\n"
                 "        proxy_set_header Upgrade $http_upgrade;\n"
                 "        proxy_set_header Connection $connection_upgrade; }\n"
                 "}\n");
    const struct conf_location *l = c->servers[0].locations;
    ck_assert(!proxy_of(l[0].modules)->upgrade_set && !proxy_of(l[0].modules)->upgrade_any);
    ck_assert(proxy_of(l[1].modules)->upgrade_set && !proxy_of(l[1].modules)->upgrade_any);
    ck_assert_uint_eq(proxy_of(l[1].modules)->upgrade_count, 2);
    ck_assert_str_eq(proxy_of(l[1].modules)->upgrades[0], "websocket");
    ck_assert_str_eq(proxy_of(l[1].modules)->upgrades[1], "foo");
    ck_assert(proxy_of(l[2].modules)->upgrade_set && proxy_of(l[2].modules)->upgrade_count == 0);
    ck_assert(!proxy_of(l[3].modules)->upgrade_set && proxy_of(l[3].modules)->upgrade_any);
    ck_assert_uint_eq(proxy_of(l[3].modules)->set_header_count, 0);
    conf_free(c);
}
END_TEST

/* grpc_pass and proxy_http_version: the scheme says TLS, no scheme is
 * grpc://, the version is inherited, and the grpc_* names set the proxy's
 * settings. */
START_TEST(grpc_pass_and_http_version)
{
    struct conf_config *c =
        parse_ok("upstream g { server 127.0.0.1:50051; }\n"
                 "proxy_http_version 2;\n"
                 "server {\n"
                 "    listen 127.0.0.1:80;\n"
                 "    location /a { grpc_pass g; grpc_read_timeout 5s; grpc_set_header X-A a; }\n"
                 "    location /b { grpc_pass grpcs://127.0.0.1:443; }\n"
                 "    location /c { proxy_pass http://127.0.0.1:1; }\n"
                 "    location /d { proxy_pass http://127.0.0.1:1; proxy_http_version 1.1; }\n"
                 "    location /e { grpc_pass grpcs://g; grpc_ssl_name g.internal;\n"
                 "        grpc_buffer_size 16k; grpc_next_upstream off; }\n"
                 "}\n");
    const struct conf_location *l = c->servers[0].locations;
    ck_assert_str_eq(l[0].content, "grpc_pass");
    ck_assert_str_eq(proxy_of(l[0].modules)->pass, "grpc://g");
    ck_assert(proxy_of(l[0].modules)->grpc);
    ck_assert_uint_eq(proxy_of(l[0].modules)->proxy.read_timeout_ms, 5000);
    ck_assert_uint_eq(proxy_of(l[0].modules)->set_header_count, 1);
    ck_assert_str_eq(proxy_of(l[0].modules)->set_headers[0].name, "X-A");
    ck_assert_uint_eq(proxy_of(l[2].modules)->http_version, PROXY_HTTP_2);
    ck_assert(!proxy_of(l[2].modules)->grpc);
    ck_assert_uint_eq(proxy_of(l[3].modules)->http_version, PROXY_HTTP_11);
    ck_assert_str_eq(proxy_of(l[4].modules)->pass, "grpcs://g");
    ck_assert_str_eq(proxy_of(l[4].modules)->tls.server_name, "g.internal");
    ck_assert_uint_eq(proxy_of(l[4].modules)->proxy.response_head_limit, 16 * 1024);
    ck_assert_uint_eq(proxy_of(l[4].modules)->proxy.next_upstream, PROXY_NEXT_WRITTEN);
    conf_free(c);
}
END_TEST

/* proxy_intercept_errors and proxy_redirect: a level without its own
 * takes its parent's. */
START_TEST(proxy_intercept_and_redirect_inherit)
{
    struct conf_config *c =
        parse_ok("proxy_intercept_errors on;\n"
                 "server {\n"
                 "    listen 127.0.0.1:80;\n"
                 "    proxy_redirect http://a/ /b/;\n"
                 "    location /a { proxy_pass http://127.0.0.1:1; }\n"
                 "    location /b { proxy_pass http://127.0.0.1:1; proxy_intercept_errors off;\n"
                 "        proxy_redirect off; }\n"
                 "    location /c { proxy_pass http://127.0.0.1:1; proxy_redirect default;\n"
                 "        proxy_redirect ~^http://x(.*)$ $1; }\n"
                 "}\n");
    const struct conf_location *l = c->servers[0].locations;
    ck_assert(proxy_of(l[0].modules)->proxy.intercept_errors);
    ck_assert_uint_eq(proxy_of(l[0].modules)->redirect_count, 1);
    ck_assert_str_eq(proxy_of(l[0].modules)->redirects[0].from, "http://a/");
    ck_assert_str_eq(proxy_of(l[0].modules)->redirects[0].to, "/b/");
    ck_assert(!proxy_of(l[1].modules)->proxy.intercept_errors);
    ck_assert(proxy_of(l[1].modules)->redirects_off);
    ck_assert(proxy_of(l[2].modules)->proxy.intercept_errors);
    ck_assert(!proxy_of(l[2].modules)->redirects_off);
    ck_assert_uint_eq(proxy_of(l[2].modules)->redirect_count, 2);
    ck_assert_ptr_null(proxy_of(l[2].modules)->redirects[0].from); /* default */
    ck_assert_str_eq(proxy_of(l[2].modules)->redirects[1].from, "~^http://x(.*)$");
    conf_free(c);
}
END_TEST

START_TEST(servers_told_apart)
{
    /* Same address with different names, different addresses without
     * names, a proxy_pass to an upstream defined after it. */
    struct conf_config *c = parse_ok("server { listen 127.0.0.1:80; server_name a.example; "
                                     "location / { proxy_pass http://later; } }\n"
                                     "server { listen 127.0.0.1:80; server_name b.example; "
                                     "location / { return 204; } }\n"
                                     "server { listen 127.0.0.1:80; location / { return 204; } }\n"
                                     "server { listen 127.0.0.1:81; location / { return 204; } }\n"
                                     "upstream later { server localhost:9000; }\n");
    ck_assert_uint_eq(c->server_count, 4);
    ck_assert_uint_eq(c->servers[2].server_name_count, 0);
    conf_free(c);
}
END_TEST

/* What the daemon groups by: each distinct listen address (whatever its
 * spelling), numbered by the parser, and each proxy_pass target. */
START_TEST(addresses_and_proxy_targets_are_numbered)
{
    struct conf_config *c =
        parse_ok("upstream b { server 127.0.0.1:9001; }\n"
                 "upstream a { server 127.0.0.1:9000; }\n"
                 "server { listen 127.0.0.1:80; listen *:81; server_name x.example;\n"
                 "  location / { proxy_pass http://a; }\n"
                 "  location /b { proxy_pass http://b/; }\n"
                 "  location /c { proxy_pass http://127.0.0.1:9002; } }\n"
                 "server { listen 0.0.0.0:81; listen 127.000.0.1:80; server_name y.example;\n"
                 "  location / { proxy_pass http://a/x/; }\n"
                 "  location /s { proxy_pass https://a; } }\n"
                 "server { listen [::1]:80; location / { return 204; } }\n");
    ck_assert_uint_eq(c->listen_address_count, 3);
    ck_assert_uint_eq(c->servers[0].listens[0].address_index, 0);
    ck_assert_uint_eq(c->servers[0].listens[1].address_index, 1);
    ck_assert_uint_eq(c->servers[1].listens[0].address_index, 1);
    ck_assert_uint_eq(c->servers[1].listens[1].address_index, 0);
    ck_assert_uint_eq(c->servers[2].listens[0].address_index, 2);
    const struct conf_location *l0 = c->servers[0].locations, *l1 = c->servers[1].locations;
    /* What the daemon shares an upstream group by: the target without
     * its path (the names are checked at the end: "a" and "b" are
     * upstream blocks). */
    ck_assert_str_eq(proxy_of(l0[0].modules)->pass, "http://a");
    ck_assert_str_eq(proxy_of(l0[1].modules)->pass, "http://b");
    ck_assert_str_eq(proxy_of(l0[1].modules)->uri, "/");
    ck_assert_str_eq(proxy_of(l0[2].modules)->pass, "http://127.0.0.1:9002");
    ck_assert_str_eq(proxy_of(l1[0].modules)->pass, "http://a"); /* the path is not part of it */
    ck_assert_str_eq(proxy_of(l1[0].modules)->uri, "/x/");
    ck_assert_str_eq(proxy_of(l1[1].modules)->pass, "https://a");
    conf_free(c);
}
END_TEST

/* CPU time, which other processes on the machine do not stretch. */
static double cpu_seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* Parsing grows linearly: each location, listen and server name is checked
 * against the earlier ones through an index.  Comparing each with every
 * earlier one took seconds here (tests/bench/conf-scale.sh measures it). */
START_TEST(many_locations_and_servers_parse_quickly)
{
    enum { LOCATIONS = 30000, SERVERS = 8000 };
    size_t size = (size_t)LOCATIONS * 48 + (size_t)SERVERS * 120 + 64;
    char *text = malloc(size);
    ck_assert_ptr_nonnull(text);
    size_t used = (size_t)snprintf(text, size, "server { listen 127.0.0.1:80;\n");
    for (int i = 0; i < LOCATIONS; i++)
        used += (size_t)snprintf(text + used, size - used, "location /p%d { return 204; }\n", i);
    used += (size_t)snprintf(text + used, size - used, "}\n");
    for (int i = 0; i < SERVERS; i++)
        used += (size_t)snprintf(text + used, size - used,
                                 "server { listen 127.0.0.1:80; server_name s%d.example; "
                                 "location / { return 204; } }\n",
                                 i);
    ck_assert_uint_lt(used, size - 1);
    struct timespec start;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    struct conf_config *c = parse_ok(text);
    double took = cpu_seconds_since(&start);
    ck_assert_uint_eq(c->servers[0].location_count, LOCATIONS);
    ck_assert_uint_eq(c->server_count, SERVERS + 1);
    conf_free(c);
    free(text);
    /* Linear: well under 1 s of CPU, ASan included; quadratic: over 7 s. */
    ck_assert_msg(took < 4.0, "parsing took %.2f s of CPU", took);
}
END_TEST

/* real_ip and allow/deny: each block keeps what it writes and takes the
 * rest from its parent, the lists as a whole (nginx's merge). */
START_TEST(access_inheritance)
{
    struct conf_config *c =
        parse_ok("set_real_ip_from 10.0.0.0/8;\nset_real_ip_from 2001:db8::1/64;\n"
                 "real_ip_header X-Forwarded-For;\ndeny 192.0.2.1;\n"
                 "server { listen 127.0.0.1:80 proxy_protocol; real_ip_recursive on;\n"
                 "  location / { return 204; }\n"
                 "  location /in { allow 10.1.2.3/16; deny all; real_ip_header proxy_protocol;\n"
                 "    set_real_ip_from 172.16.0.0/12; return 204; }\n"
                 "}\n"
                 "server { listen 127.0.0.1:81; allow all; location / { return 204; } }\n");
    const struct conf_server *s0 = &c->servers[0], *s1 = &c->servers[1];
    const struct access_conf *top = conf_module_conf(c->modules, &access_module.conf),
                             *a = conf_module_conf(s0->locations[0].modules, &access_module.conf),
                             *in = conf_module_conf(s0->locations[1].modules, &access_module.conf),
                             *b = conf_module_conf(s1->locations[0].modules, &access_module.conf);
    ck_assert(s0->listens[0].proxy_protocol);
    ck_assert(!s1->listens[0].proxy_protocol);
    ck_assert_uint_eq(top->real_ip_from_count, 2);
    ck_assert_uint_eq(top->real_ip_from[1].family, AF_INET6);
    ck_assert_uint_eq(top->real_ip_from[1].bits, 64);
    ck_assert_uint_eq(top->real_ip_from[1].addr[15], 0); /* host bits dropped */
    ck_assert_uint_eq(a->real_ip_from_count, 2);
    ck_assert_str_eq(a->real_ip_header, "X-Forwarded-For");
    ck_assert(a->real_ip_recursive);
    ck_assert_uint_eq(a->rule_count, 1);
    ck_assert(!a->rules[0].allow);
    ck_assert_uint_eq(in->real_ip_from_count, 1);
    ck_assert_uint_eq(in->real_ip_from[0].bits, 12);
    ck_assert(in->real_ip_proxy_protocol);
    ck_assert(in->real_ip_recursive);
    ck_assert_uint_eq(in->rule_count, 2);
    ck_assert(in->rules[0].allow);
    ck_assert_uint_eq(in->rules[0].net.addr[1], 1);
    ck_assert_uint_eq(in->rules[0].net.addr[2], 0); /* 10.1.2.3/16 is 10.1.0.0/16 */
    ck_assert_uint_eq(in->rules[1].net.family, AF_UNSPEC);
    ck_assert(!b->real_ip_recursive);
    ck_assert_uint_eq(b->rule_count, 1);
    ck_assert(b->rules[0].allow);
    conf_free(c);
}
END_TEST

/* error_page at each level, each code an item, "=" and "=N" kept; a
 * level with none takes its parent's whole (the module's merge). */
START_TEST(error_page_levels)
{
    struct conf_config *c =
        parse_ok("error_page 404 /top;\n"
                 "server { listen 127.0.0.1:80; error_page 500 502 =200 /srv?x=$host;\n"
                 "  location / { error_page 403 = https://example.com/; return 204; }\n"
                 "  location /b { return 204; error_page 502 = @b; }\n"
                 "  location @b { return 204; }\n"
                 "}\n");
    const struct error_page_conf *top = conf_module_conf(c->modules, &error_page_module.conf);
    ck_assert_uint_eq(top->count, 1);
    ck_assert_uint_eq(top->items[0].status, 404);
    ck_assert_int_eq(top->items[0].response, -1);
    ck_assert_str_eq(top->items[0].uri, "/top");
    const struct conf_server *s = &c->servers[0];
    const struct error_page_conf *srv = conf_module_conf(s->modules, &error_page_module.conf);
    ck_assert_uint_eq(srv->count, 2);
    ck_assert_uint_eq(srv->items[0].status, 500);
    ck_assert_uint_eq(srv->items[1].status, 502);
    ck_assert_int_eq(srv->items[1].response, 200);
    ck_assert_str_eq(srv->items[1].uri, "/srv?x=$host");
    ck_assert_uint_eq(srv->items[1].uri_pos.line, 2);
    ck_assert_uint_eq(srv->items[1].uri_pos.col, 55);
    const struct error_page_conf *l0 =
        conf_module_conf(s->locations[0].modules, &error_page_module.conf);
    ck_assert_uint_eq(l0->count, 1);
    ck_assert_int_eq(l0->items[0].response, 0);
    const struct error_page_conf *l1 =
        conf_module_conf(s->locations[1].modules, &error_page_module.conf);
    ck_assert_uint_eq(l1->count, 1);
    ck_assert_str_eq(l1->items[0].uri, "@b");
    /* one with none of its own takes its server's, none of the top level's */
    const struct error_page_conf *l2 =
        conf_module_conf(s->locations[2].modules, &error_page_module.conf);
    ck_assert_ptr_eq(l2->items, srv->items);
    ck_assert_uint_eq(l2->count, 2);
    ck_assert_str_eq(s->locations[2].path, "@b");
    conf_free(c);
}
END_TEST

/* limit_req and limit_conn: a block with any of its own does not inherit
 * the enclosing block's (nginx's rule); the statuses default to 503. */
START_TEST(limit_inheritance)
{
    struct conf_config *c =
        parse_ok("limit_req_zone $binary_remote_addr zone=one:1m rate=30r/m;\n"
                 "limit_req_zone $uri zone=two:64k rate=5r/s;\n"
                 "limit_conn_zone $binary_remote_addr zone=c:1m;\n"
                 "limit_req zone=one burst=5 nodelay;\nlimit_conn_status 429;\n"
                 "server { listen 127.0.0.1:80; limit_conn c 3;\n"
                 "  location / { return 204; }\n"
                 "  location /two { limit_req zone=two delay=2 burst=4; limit_req_status 444;\n"
                 "    return 204; }\n"
                 "}\n");
    ck_assert_uint_eq(c->limit_zone_count, 3);
    ck_assert_uint_eq(c->limit_zones[0].rate, 500); /* milli-requests a second */
    ck_assert_uint_eq(c->limit_zones[1].rate, 5000);
    ck_assert_uint_eq(c->limit_zones[1].size, 65536);
    ck_assert(c->limit_zones[2].conn);
    ck_assert_str_eq(c->limit_zones[2].key, "$binary_remote_addr");
    const struct limit_conf *a = conf_module_conf(c->servers[0].locations[0].modules,
                                                  &limit_module.conf),
                            *two = conf_module_conf(c->servers[0].locations[1].modules,
                                                    &limit_module.conf);
    ck_assert_uint_eq(a->req_count, 1);
    ck_assert_str_eq(a->reqs[0].zone_name, "one");
    ck_assert_uint_eq(a->reqs[0].burst, 5);
    ck_assert(a->reqs[0].nodelay);
    ck_assert_uint_eq(a->conn_count, 1);
    ck_assert_str_eq(a->conns[0].zone_name, "c");
    ck_assert_uint_eq(a->conns[0].max, 3);
    ck_assert_uint_eq(a->req_status, 503);
    ck_assert_uint_eq(a->conn_status, 429);
    ck_assert_uint_eq(two->req_count, 1);
    ck_assert_str_eq(two->reqs[0].zone_name, "two");
    ck_assert_uint_eq(two->reqs[0].delay, 2);
    ck_assert_uint_eq(two->reqs[0].burst, 4);
    ck_assert(!two->reqs[0].nodelay);
    ck_assert_uint_eq(two->conn_count, 1);
    ck_assert_uint_eq(two->req_status, 444);
    conf_free(c);
}
END_TEST

START_TEST(lexer_forms)
{
    struct conf_config *c =
        parse_ok("# comment line\n"
                 "log_format 'single \"quoted\" \\'x\\' \\\\ \\t end'; # trailing\n"
                 "server{listen 127.0.0.1:80;location /a#b{return 200 \"two\n"
                 "lines\";}}\n"
                 "\tworkers\t2 ;\r\n");
    ck_assert_str_eq(c->log_format, "single \"quoted\" 'x' \\ \t end");
    ck_assert_str_eq(c->servers[0].locations[0].path, "/a#b");
    ck_assert_str_eq(return_of(&c->servers[0].locations[0])->text, "two\nlines");
    ck_assert_uint_eq(c->workers, 2);
    conf_free(c);
}
END_TEST

START_TEST(default_text_parses)
{
    struct conf_config *c;
    struct conf_error error;
    int rc = conf_parse("<built-in>", conf_default_text, strlen(conf_default_text), NULL, NULL, &c,
                        &error);
    ck_assert_msg(rc == 0, "%s", error.text);
    ck_assert_str_eq(c->path, "<built-in>");
    ck_assert_uint_eq(c->workers, 0);
    ck_assert_int_eq(c->wakeup, CORRAL_WAKEUP_AUTO);
    ck_assert_uint_eq(c->admin_listen_count, 1);
    ck_assert_str_eq(c->admin_listens[0], "127.0.0.1:9090");
    ck_assert_uint_eq(c->server_count, 1);
    ck_assert_uint_eq(c->servers[0].listen_count, 1);
    ck_assert_str_eq(c->servers[0].listens[0].address, "127.0.0.1:8080");
    ck_assert_uint_eq(c->servers[0].location_count, 1);
    const struct conf_location *l = &c->servers[0].locations[0];
    ck_assert_str_eq(l->path, "/");
    ck_assert_str_eq(l->content, "return");
    ck_assert_uint_eq(return_of(l)->code, 200);
    ck_assert_str_eq(return_of(l)->text, "corral is running\n");
    conf_free(c);
}
END_TEST

START_TEST(relative_paths_follow_their_file)
{
    static const struct memfile files[] = {
        {"/etc/corral/sites/a.conf",
         "server { listen 127.0.0.1:443 tls; tls_certificate a.pem;\n"
         "tls_certificate_key ../keys/a.key; tls_client_certificate ca/clients.pem;\n"
         "location / { proxy_pass https://127.0.0.1:8443;\n"
         "    proxy_tls_trusted_certificate ./ca//app.pem; } }\n"},
        {NULL, NULL},
    };
    struct conf_config *c =
        parse_named("/etc/corral/corral.conf",
                    "include sites/a.conf;\n"
                    "server { listen 127.0.0.1:444 tls;\n"
                    "    tls_certificate ./b.pem; tls_certificate_key /k/b.key;\n"
                    "    location / { return 204; } }\n",
                    files);
    const struct conf_tls *a = &c->servers[0].tls, *b = &c->servers[1].tls;
    ck_assert_str_eq(a->certificates[0].certificate, "/etc/corral/sites/a.pem");
    ck_assert_str_eq(a->certificates[0].key, "/etc/corral/sites/../keys/a.key");
    ck_assert_str_eq(a->certificates[0].certificate_pos.file, "/etc/corral/sites/a.conf");
    ck_assert_str_eq(a->settings.client_ca, "/etc/corral/sites/ca/clients.pem");
    ck_assert_str_eq(a->client_ca_pos.file, "/etc/corral/sites/a.conf");
    ck_assert_str_eq(proxy_of(c->servers[0].locations[0].modules)->tls.ca_file,
                     "/etc/corral/sites/ca/app.pem");
    ck_assert_str_eq(c->servers[0].pos.file, "/etc/corral/sites/a.conf");
    ck_assert_str_eq(b->certificates[0].certificate, "/etc/corral/b.pem");
    ck_assert_str_eq(b->certificates[0].key, "/k/b.key");
    ck_assert_str_eq(b->certificates[0].key_pos.file, "/etc/corral/corral.conf");
    conf_free(c);

    /* A main file named without a directory: paths stay relative to the
     * current directory, which is where the file is. */
    c = parse_ok("pid_file corral.pid;");
    ck_assert_str_eq(c->pid_file, "corral.pid");
    conf_free(c);
}
END_TEST

/* ----------------------------------------------------- invalid configs */

struct error_case {
    const char *text;
    const char *error;
};

static const struct error_case error_cases[] = {
    /* the modules' directives, with conf/'s checks and messages */
    {"server { listen 127.0.0.1:80; set a 1; }",
     "test.conf:1:35: invalid variable name \"a\" (expected $ and letters, digits or _)"},
    {"server { listen 127.0.0.1:80; set $a-b 1; }",
     "test.conf:1:35: invalid variable name \"$a-b\" (expected $ and letters, digits or _)"},
    {"server { listen 127.0.0.1:80; location / { set $Host x; return 200; } }",
     "test.conf:1:48: \"$Host\" is corral's own variable: set another name"},
    {"server { listen 127.0.0.1:80; set $http_x x; }",
     "test.conf:1:35: \"$http_x\" is corral's own variable: set another name"},
    {"server { listen 127.0.0.1:80; set $a; }", "test.conf:1:31: \"set\" takes 2 arguments, got 1"},
    {"set $a 1;", "test.conf:1:1: \"set\" is not allowed at top level (it belongs in server, "
                  "location or if)"},
    {"server { listen 127.0.0.1:80; location / { stub_status x; } }",
     "test.conf:1:56: invalid value \"x\" (stub_status takes no argument, or \"on\")"},
    {"add_header \"Bad Name\" x;", "test.conf:1:12: invalid header name \"Bad Name\""},
    {"add_header X-A \"a\\nb\";", "test.conf:1:16: header value contains a control character"},
    {"add_header X-A b sometimes;",
     "test.conf:1:18: unknown add_header parameter \"sometimes\" (expected always)"},
    {"server { listen 127.0.0.1:80; location / { rewrite ^ /b stop; } }",
     "test.conf:1:57: unknown rewrite flag \"stop\" (expected last, break, redirect or permanent)"},
    /* if */
    {"server { listen 127.0.0.1:80; location / { if ($a) { proxy_pass http://127.0.0.1:1; }\n"
     " return 200; } }",
     "test.conf:1:54: \"proxy_pass\" inside \"if\" never gets a request: the location's "
     "\"return\" (line 2) answers first, as in nginx"},
    {"server { listen 127.0.0.1:80; location / { return 200;\n"
     " if ($a) { proxy_pass http://127.0.0.1:1; } } }",
     "test.conf:2:12: \"proxy_pass\" inside \"if\" never gets a request: the location's "
     "\"return\" (line 1) answers first, as in nginx"},
    {"server { listen 127.0.0.1:80; if ($a) { proxy_pass http://127.0.0.1:1; } }",
     "test.conf:1:41: \"proxy_pass\" is not allowed inside \"if\": corral's \"if\" "
     "takes return, rewrite, set and break only; put \"proxy_pass\" in a location "
     "that a \"rewrite ... last\" in the \"if\" leads to"},
    {"server { listen 127.0.0.1:80; location / { if ($a) { deny all; } return 200; } }",
     "test.conf:1:54: \"deny\" is not allowed inside \"if\": in a location, "
     "corral's \"if\" takes return, rewrite, set, break, add_header and proxy_pass only; "
     "put \"deny\" in the location itself, or in a location that a \"rewrite "
     "... last\" in the \"if\" leads to"},
    {"server { listen 127.0.0.1:80; location / { if ($a) { proxy_set_header A b; }\n"
     " proxy_pass http://127.0.0.1:1; } }",
     "test.conf:1:54: \"proxy_set_header\" is not allowed inside \"if\": in a location, "
     "corral's \"if\" takes return, rewrite, set, break, add_header and proxy_pass only; "
     "put \"proxy_set_header\" in the location itself, or in a location that a \"rewrite "
     "... last\" in the \"if\" leads to"},
    {"server { listen 127.0.0.1:80; location / { if ($a) { server_timing on; }\n"
     " return 200; } }",
     "test.conf:1:54: \"server_timing\" is not allowed inside \"if\": in a location, "
     "corral's \"if\" takes return, rewrite, set, break, add_header and proxy_pass only; "
     "put \"server_timing\" in the location itself, or in a location that a \"rewrite "
     "... last\" in the \"if\" leads to"},
    {"server { listen 127.0.0.1:80; location / { if ($a) { if ($b) { return 403; } } } }",
     "test.conf:1:54: \"if\" cannot be nested: combine the conditions with a \"map\", "
     "or \"set\" a variable in the first \"if\" and test it in a second one after it"},
    {"server { listen 127.0.0.1:80; location / { if ($a) { proxy_pass http://127.0.0.1:1/x; } "
     "} }",
     "test.conf:1:65: proxy_pass \"http://127.0.0.1:1/x\" has a path, which cannot be used "
     "inside \"if\" (as in nginx): write it without, or rewrite the URI in the \"if\" with "
     "\"rewrite ... break\""},
    {"server { listen 127.0.0.1:80; location / { if ($a) { proxy_pass http://127.0.0.1:1;\n"
     " proxy_pass http://127.0.0.1:2; } } }",
     "test.conf:2:2: duplicate \"proxy_pass\" (first at line 1)"},
    {"server { listen 127.0.0.1:80; location / { if ($a) { proxy_pass http://nowhere; } } }",
     "test.conf:1:65: no upstream named \"nowhere\" (an address needs a port: "
     "http://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { if ($a) { add_header \"B C\" d; } "
     "return 200; } }",
     "test.conf:1:65: invalid header name \"B C\""},
    {"server { listen 127.0.0.1:80; if ($a) { if ($b) { return 403; } } }",
     "test.conf:1:41: \"if\" cannot be nested: combine the conditions with a \"map\", "
     "or \"set\" a variable in the first \"if\" and test it in a second one after it"},
    {"server { listen 127.0.0.1:80; if $a { return 403; } }",
     "test.conf:1:34: invalid condition \"$a\" (expected \"(\" before it)"},
    {"server { listen 127.0.0.1:80; if ($a { return 403; } }",
     "test.conf:1:34: invalid condition \"($a\" (expected \")\" after it)"},
    {"server { listen 127.0.0.1:80; if ($a == b) { return 403; } }",
     "test.conf:1:38: unexpected \"==\" in condition (expected =, !=, ~, ~*, !~ or "
     "!~*)"},
    {"server { listen 127.0.0.1:80; if (-f) { return 403; } }",
     "test.conf:1:35: \"-f\" needs a path after it"},
    {"server { listen 127.0.0.1:80; if ($a = ) { return 403; } }",
     "test.conf:1:38: \"=\" needs a value after it"},
    /* a second if after one refused is read as any other */
    {"server { listen 127.0.0.1:80; if (a = b) { return 403; } if ($x) { return 4; } }",
     "test.conf:1:35: invalid condition \"a\""},
    {"server { listen 127.0.0.1:80; if (a = b) { return 403; } }",
     "test.conf:1:35: invalid condition \"a\""},
    {"server { listen 127.0.0.1:80; if ($a = b c) { return 403; } }",
     "test.conf:1:42: invalid condition \"c\""},
    {"server { listen 127.0.0.1:80; if () { return 403; } }", "test.conf:1:34: empty condition"},
    {"server { listen 127.0.0.1:80; if ($a) { return 99; } }",
     "test.conf:1:48: invalid status code \"99\" (expected 200 to 599)"},
    {"server { listen 127.0.0.1:80; if ($a) return 403; }",
     "test.conf:1:31: \"if\" needs a \"{ ... }\" block"},
    {"if ($a) { return 403; }",
     "test.conf:1:1: \"if\" is not allowed at top level (it belongs in server or "
     "location)"},
    {"server { listen 127.0.0.1:80; break now; }",
     "test.conf:1:31: \"break\" takes no arguments, got 1"},
    {"server { listen 127.0.0.1:80; if ($a) { add_header X-A b; } }",
     "test.conf:1:41: \"add_header\" is not allowed inside \"if\": corral's \"if\" "
     "takes return, rewrite, set and break only; put \"add_header\" in a location "
     "that a \"rewrite ... last\" in the \"if\" leads to"},
    {"server { listen 127.0.0.1:80; location / { rewrite \"\" /b; } }",
     "test.conf:1:52: empty rewrite regex"},
    {"server { listen 127.0.0.1:80; location / { rewrite ^ /b c d; } }",
     "test.conf:1:44: \"rewrite\" takes 2 or 3 arguments, got 4"},
    {"rewrite ^ /b;", "test.conf:1:1: \"rewrite\" is not allowed at top level (it belongs in "
                      "server, location or if)"},
    {"server { listen 127.0.0.1:80; location / { return 99; } }",
     "test.conf:1:51: invalid status code \"99\" (expected 200 to 599)"},
    /* syntax */
    {"workers 4", "test.conf:1:10: unexpected end of file, expecting \";\" or \"}\""},
    {"server {\n    listen 127.0.0.1:80;\n",
     "test.conf:3:1: unexpected end of file, expecting \"}\" to close \"server\" from line 1"},
    {"workers 4;\n}\n", "test.conf:2:1: unexpected \"}\""},
    {"workers 4 }", "test.conf:1:11: unexpected \"}\""},
    {"  ;", "test.conf:1:3: unexpected \";\""},
    {"{ }", "test.conf:1:1: unexpected \"{\""},
    {"log_format \"abc;\nworkers 2;\n", "test.conf:1:12: unterminated string"},
    {"log_format 'it\\'s;", "test.conf:1:12: unterminated string"},
    {"log_format \"a\\qb\";",
     "test.conf:1:14: unknown escape \"\\q\" (use \\\", \\', \\\\, \\n, \\r or \\t)"},
    {"log_format \"a\\\nb\";", "test.conf:1:14: unknown escape: \"\\\" followed by byte 0x0a"},
    {"log_format \"a\"b;", "test.conf:1:15: unexpected \"b\" after a quoted string"},
    {"log_format a\"b\";",
     "test.conf:1:13: unexpected '\"' inside a word (quote the whole argument)"},
    {"a{a{a{a{a{a{a{a{a{a{a{a{a{a{a{a{a{}}}}}}}}}}}}}}}}}",
     "test.conf:1:34: blocks nested more than 16 deep"},
    /* directive registry */
    {"wrokers 4;", "test.conf:1:1: unknown directive \"wrokers\" (did you mean \"workers\"?)"},
    {"server {\n  lisen 127.0.0.1:80;\n}",
     "test.conf:2:3: unknown directive \"lisen\" (did you mean \"listen\"?)"},
    {"frobnicate on;", "test.conf:1:1: unknown directive \"frobnicate\""},
    {"listen 127.0.0.1:80;",
     "test.conf:1:1: \"listen\" is not allowed at top level (it belongs in server, admin or "
     "stream server)"},
    {"upstream app { server 127.0.0.1:1; return 200; }",
     "test.conf:1:36: \"return\" is not allowed in upstream (it belongs in server, "
     "location or if)"},
    {"server { workers 2; }",
     "test.conf:1:10: \"workers\" is not allowed in server (it belongs at top level)"},
    {"server { listen 127.0.0.1:80; location / { keepalive_timeout 1s; } }",
     "test.conf:1:44: \"keepalive_timeout\" is not allowed in location (it belongs at top level "
     "or in server or upstream)"},
    {"workers 1 2;", "test.conf:1:1: \"workers\" takes 1 argument, got 2"},
    {"\nworkers;", "test.conf:2:1: \"workers\" takes 1 argument, got 0"},
    {"admin 1 { listen 127.0.0.1:9090; }", "test.conf:1:1: \"admin\" takes no arguments, got 1"},
    {"error_log a info extra;", "test.conf:1:1: \"error_log\" takes 1 or 2 arguments, got 3"},
    {"server { server_name; }", "test.conf:1:10: \"server_name\" takes at least 1 argument, got 0"},
    {"server { listen 127.0.0.1:80 tls http2 default_server deferred backlog=1 x; }",
     "test.conf:1:10: \"listen\" takes 1 to 6 arguments, got 7"},
    {"proxy_set_header X;", "test.conf:1:1: \"proxy_set_header\" takes 2 arguments, got 1"},
    {"upstream u { server 127.0.0.1:1; proxy_set_header X y; }",
     "test.conf:1:34: \"proxy_set_header\" is not allowed in upstream (it belongs at top level "
     "or in server or location)"},
    {"wakeup auto;\nworkers 2;\nwakeup herd;",
     "test.conf:3:1: duplicate \"wakeup\" (first at line 1)"},
    {"admin { listen 127.0.0.1:9090; }\nadmin { listen 127.0.0.1:9091; }",
     "test.conf:2:1: duplicate \"admin\" (first at line 1)"},
    {"server;", "test.conf:1:1: \"server\" needs a \"{ ... }\" block"},
    {"upstream app;", "test.conf:1:1: \"upstream\" needs a \"{ ... }\" block"},
    {"workers 4 { }", "test.conf:1:11: \"workers\" does not take a \"{ ... }\" block"},
    /* values */
    {"client_max_body_size 10q;", "test.conf:1:22: invalid size \"10q\""},
    {"client_max_body_size -1;", "test.conf:1:22: invalid size \"-1\""},
    {"client_max_body_size 99999999999g;", "test.conf:1:22: size \"99999999999g\" is too large"},
    {"client_max_header_size 0;",
     "test.conf:1:24: \"client_max_header_size\" must be between 1 and 16384k, got \"0\""},
    {"keepalive_timeout 5x;", "test.conf:1:19: invalid duration \"5x\""},
    {"keepalive_timeout 50d;", "test.conf:1:19: duration \"50d\" is too large (at most 49 days)"},
    {"wakeup fast;",
     "test.conf:1:8: unknown wakeup mode \"fast\" (expected auto, roundrobin, affinity, exclusive, "
     "reuseport, herd or balanced)"},
    {"wakeup balanced spill=2;", "test.conf:1:17: \"spill=2\": only affinity takes spill="},
    {"wakeup affinity spill=1;",
     "test.conf:1:17: bad \"spill=1\" (expected spill=FACTOR, above 1 and at most 100, such as "
     "spill=1.5)"},
    {"workers many;", "test.conf:1:9: invalid worker count \"many\" (expected a number or auto)"},
    {"workers 0;", "test.conf:1:9: \"workers\" must be from 1 to 1024, got \"0\""},
    {"workers 99999999999;",
     "test.conf:1:9: \"workers\" must be from 1 to 1024, got \"99999999999\""},
    {"max_connections 99999999999;", "test.conf:1:17: number \"99999999999\" is too large"},
    {"max_connections 0;", "test.conf:1:17: \"max_connections\" must be at least 1, got \"0\""},
    {"max_connections +5;", "test.conf:1:17: invalid number \"+5\""},
    {"client_max_headers 0;",
     "test.conf:1:20: \"client_max_headers\" must be at least 1, got \"0\""},
    {"busy_poll fast;",
     "test.conf:1:11: invalid busy_poll time \"fast\" (expected microseconds such as 50 or 50us, a "
     "duration such as 1ms, or off)"},
    {"busy_poll 2147483648;",
     "test.conf:1:11: busy_poll time \"2147483648\" is too large (at most 2147483647us)"},
    {"busy_poll 1h;", "test.conf:1:11: busy_poll time \"1h\" is too large (at most 2147483647us)"},
    {"busy_poll 99999999999;",
     "test.conf:1:11: busy_poll time \"99999999999\" is too large (at most 2147483647us)"},
    {"busy_poll 99999999999999999us;",
     "test.conf:1:11: busy_poll time \"99999999999999999us\" is too large (at most 2147483647us)"},
    {"busy_poll 50d;",
     "test.conf:1:11: busy_poll time \"50d\" is too large (at most 2147483647us)"},
    {"busy_poll 5.5us;",
     "test.conf:1:11: invalid busy_poll time \"5.5us\" (expected microseconds such as 50 or 50us, "
     "a duration such as 1ms, or off)"},
    {"error_log /tmp/e.log loud;",
     "test.conf:1:22: unknown log level \"loud\" (expected error, warn, info or debug; nginx's "
     "notice, crit, alert and emerg are taken too)"},
    {"user \"\";", "test.conf:1:6: empty user name"},
    {"pid_file '';", "test.conf:1:10: empty path"},
    {"log_format \"\";", "test.conf:1:12: empty log format"},
    /* admin */
    {"admin { }", "test.conf:1:1: \"admin\" has no \"listen\""},
    {"admin { listen nowhere; }",
     "test.conf:1:16: invalid listen address \"nowhere\" (expected HOST:PORT, [IPV6]:PORT, *:PORT, "
     "PORT or unix:/PATH)"},
    {"admin { listen [::1]:9090;\n listen [0:0::1]:9090; }",
     "test.conf:2:9: duplicate listen \"[0:0::1]:9090\" (first at line 1)"},
    {"admin { listen 127.0.0.1:9090;\n listen 127.0.0.1:9090; }",
     "test.conf:2:9: duplicate listen \"127.0.0.1:9090\" (first at line 1)"},
    {"admin { listen 127.0.0.1:9090; }\n"
     "server { listen 127.0.0.1:9090; location / { return 204; } }",
     "test.conf:1:16: admin listen \"127.0.0.1:9090\" is also a server's listen (at line 2)"},
    {"admin { listen 127.0.0.1:9090 ssl; }",
     "test.conf:1:31: unknown admin listen parameter \"ssl\" (expected tls)"},
    {"admin { listen 127.0.0.1:9090 tls; }",
     "test.conf:1:16: listen \"127.0.0.1:9090\" is tls but the admin block has no "
     "\"tls_certificate\""},
    {"admin { listen 127.0.0.1:9090; tls_verify_client optional; }",
     "test.conf:1:50: \"tls_verify_client optional\" needs a \"tls_client_certificate\" in the "
     "same admin block"},
    {"admin { listen 127.0.0.1:9090; tls_certificate_key a.key; }",
     "test.conf:1:32: \"tls_certificate_key\" needs a \"tls_certificate\" in the same admin "
     "block"},
    {"admin { listen 127.0.0.1:9090; tls_certificate a.pem; }",
     "test.conf:1:32: \"tls_certificate\" needs a \"tls_certificate_key\" in the same admin "
     "block"},
    {"admin { listen 127.0.0.1:9090; allow 10.0.0.0/33; }",
     "test.conf:1:38: invalid prefix length in \"10.0.0.0/33\" (expected 0 to 32)"},
    {"admin { listen 127.0.0.1:9090; real_ip_header X-Real-IP; }",
     "test.conf:1:32: \"real_ip_header\" is not allowed in admin (it belongs at top level or in "
     "server or location)"},
    {"admin { listen 127.0.0.1:9090; auth_token_file \"\"; }", "test.conf:1:48: empty path"},
    {"auth_token_file t;",
     "test.conf:1:1: \"auth_token_file\" is not allowed at top level (it belongs in admin)"},
    /* servers */
    {"server {\n  location / { return 204; }\n}", "test.conf:1:1: server has no \"listen\""},
    {"server { listen 127.0.0.1:99999; }",
     "test.conf:1:17: invalid listen address \"127.0.0.1:99999\" (expected HOST:PORT, "
     "[IPV6]:PORT, *:PORT, PORT or unix:/PATH)"},
    /* "ssl" is nginx's "tls" */
    {"server { listen 127.0.0.1:80 ssl; }",
     "test.conf:1:17: listen \"127.0.0.1:80\" is tls but the server has no \"tls_certificate\""},
    {"server { listen 127.0.0.1:80 reuseport2; }",
     "test.conf:1:30: unknown listen parameter \"reuseport2\" (expected tls, http2, quic, "
     "default_server, deferred, proxy_protocol or backlog=N)"},
    {"server { listen [::]:80 ipv6only=off; }",
     "test.conf:1:25: \"ipv6only=off\" is nginx's: corral's [::] listens take IPv6 only; add a "
     "listen on 0.0.0.0 for IPv4"},
    {"server { listen 127.0.0.1:443 ssl quic; }",
     "test.conf:1:17: listen \"127.0.0.1:443\" quic: a UDP socket for HTTP/3, whose TLS is "
     "QUIC's; tls, http2, proxy_protocol, deferred and backlog are TCP's"},
    {"server { listen 127.0.0.1:443 quic; }",
     "test.conf:1:17: listen \"127.0.0.1:443\" quic needs a certificate: the server has no "
     "\"tls_certificate\""},
    {"server { listen unix:/tmp/x quic; }",
     "test.conf:1:17: listen \"unix:/tmp/x\" quic: QUIC listens on an IP address"},
    {"server { listen 127.0.0.1:80 so_keepalive=on; }",
     "test.conf:1:30: \"so_keepalive\" is nginx's: corral sets no such socket option (it has "
     "deferred and backlog=N); remove it"},
    {"error_log stderr verbose;",
     "test.conf:1:18: unknown log level \"verbose\" (expected error, warn, info or debug; "
     "nginx's notice, crit, alert and emerg are taken too)"},
    {"keepalive_timeout 65 6x;", "test.conf:1:22: invalid duration \"6x\""},
    {"server { listen 127.0.0.1:80 proxy_protocol; server_name a; }\n"
     "server { listen 127.0.0.1:80; server_name b; }",
     "test.conf:2:17: listen \"127.0.0.1:80\" is not proxy_protocol here but proxy_protocol at "
     "line 1"},
    {"server { listen 127.0.0.1:80 proxy_protocol proxy_protocol; }",
     "test.conf:1:45: duplicate parameter \"proxy_protocol\""},
    {"server { listen 127.0.0.1:80 http2; server_name a; }\n"
     "server { listen 127.0.0.1:80; server_name b; }",
     "test.conf:2:17: listen \"127.0.0.1:80\" is not http2 here but http2 at line 1"},
    {"server { listen 127.0.0.1:80 http2 http2; }",
     "test.conf:1:36: duplicate parameter \"http2\""},
    {"http2_max_concurrent_streams 0;",
     "test.conf:1:30: \"http2_max_concurrent_streams\" must be from 1 to 65536, got \"0\""},
    {"server { listen 127.0.0.1:80 tls tls; }", "test.conf:1:34: duplicate parameter \"tls\""},
    {"server { listen 127.0.0.1:80 deferred deferred; }",
     "test.conf:1:39: duplicate parameter \"deferred\""},
    {"server { listen 127.0.0.1:80 backlog=8 backlog=9; }",
     "test.conf:1:40: duplicate parameter \"backlog\""},
    {"server { listen 127.0.0.1:80 backlog=0; }",
     "test.conf:1:30: backlog must be from 1 to 2147483647, got \"0\""},
    {"server { listen 127.0.0.1:80 backlog=many; }", "test.conf:1:30: invalid number \"many\""},
    {"server { listen 127.0.0.1:80 deferred; server_name a; location / { return 204; } }\n"
     "server { listen 127.0.0.1:80 backlog=64; server_name b; location / { return 204; } }",
     "test.conf:2:17: listen \"127.0.0.1:80\" already has deferred or backlog set (at line 1)"},
    {"server { listen unix:/run/a.sock;\n listen unix:/run/a.sock; }",
     "test.conf:2:9: duplicate listen \"unix:/run/a.sock\" (first at line 1)"},
    {"server { listen 127.0.0.1:80;\n listen 127.0.0.1:80; }",
     "test.conf:2:9: duplicate listen \"127.0.0.1:80\" (first at line 1)"},
    {"server { listen 127.0.0.1:80; location / { return 204; } }\n"
     "server { listen 127.0.0.1:80; location / { return 204; } }",
     "test.conf:2:17: a server without server_name already listens on \"127.0.0.1:80\" (at line "
     "1)"},
    {"server { listen *:80; server_name a.example; location / { return 204; } }\n"
     "server {\n listen 0.0.0.0:80;\n server_name b.example A.example;\n"
     " location / { return 204; } }",
     "test.conf:4:24: server_name \"A.example\" on \"0.0.0.0:80\" is already used at line 1"},
    {"server { listen 127.0.0.1:80 default_server; server_name a; location / { return 204; } }\n"
     "server { listen 127.0.0.1:80 default_server; server_name b; location / { return 204; } }",
     "test.conf:2:17: listen \"127.0.0.1:80\" already has a default_server (at line 1)"},
    {"server { listen 127.0.0.1:443 tls; server_name a; tls_certificate c; tls_certificate_key k;"
     " location / { return 204; } }\n"
     "server { listen 127.0.0.1:443; server_name b; location / { return 204; } }",
     "test.conf:2:17: listen \"127.0.0.1:443\" is not tls here but tls at line 1"},
    {"server { listen 127.0.0.1:443 tls; location / { return 204; } }",
     "test.conf:1:17: listen \"127.0.0.1:443\" is tls but the server has no \"tls_certificate\""},
    {"server { listen 127.0.0.1:443; tls_certificate c.pem; location / { return 204; } }",
     "test.conf:1:32: \"tls_certificate\" needs a \"tls_certificate_key\" in the same server"},
    {"server { listen 127.0.0.1:443; tls_certificate_key k.pem; location / { return 204; } }",
     "test.conf:1:32: \"tls_certificate_key\" needs a \"tls_certificate\" in the same server"},
    /* tls */
    {"server { listen 127.0.0.1:443 tls;\n tls_certificate a.pem;\n"
     " tls_certificate b.pem; tls_certificate_key b.key; location / { return 204; } }",
     "test.conf:3:2: \"tls_certificate\" at line 2 needs its \"tls_certificate_key\" before the "
     "next \"tls_certificate\""},
    {"server { listen 127.0.0.1:443 tls;\n tls_certificate a.pem; tls_certificate_key a.key;\n"
     " tls_certificate_key b.key; location / { return 204; } }",
     "test.conf:3:2: duplicate \"tls_certificate_key\" for the \"tls_certificate\" at line 2"},
    {"server { listen 127.0.0.1:443 tls;\n tls_certificate_key a.key;\n"
     " tls_certificate a.pem; location / { return 204; } }",
     "test.conf:2:2: \"tls_certificate_key\" must come after its \"tls_certificate\""},
    {"server { listen 127.0.0.1:443 tls;\n tls_certificate a.pem; tls_certificate_key a.key;\n"
     " tls_certificate b.pem; location / { return 204; } }",
     "test.conf:3:2: \"tls_certificate\" needs a \"tls_certificate_key\" in the same server"},
    {"server { listen 127.0.0.1:443 tls;\n tls_certificate ''; }", "test.conf:2:18: empty path"},
    {"server { listen 127.0.0.1:443 tls;\n tls_certificate a.pem; tls_certificate_key \"\"; }",
     "test.conf:2:45: empty path"},
    {"tls_certificate a.pem;", "test.conf:1:1: \"tls_certificate\" is not allowed at top level (it "
                               "belongs in server, admin, stream or stream server)"},
    {"server { listen 127.0.0.1:80;\n tls_protocols TLSv1.2 TLSv1.1; }",
     "test.conf:2:24: unknown TLS protocol \"TLSv1.1\" (expected TLSv1.2 or TLSv1.3)"},
    {"server { listen 127.0.0.1:80;\n tls_protocols SSLv3; }",
     "test.conf:2:16: unknown TLS protocol \"SSLv3\" (expected TLSv1.2 or TLSv1.3)"},
    {"server { listen 127.0.0.1:80;\n tls_protocols tlsv1.3; }",
     "test.conf:2:16: unknown TLS protocol \"tlsv1.3\" (expected TLSv1.2 or TLSv1.3)"},
    {"server { listen 127.0.0.1:80;\n tls_protocols TLSv1.3 TLSv1.3; }",
     "test.conf:2:24: duplicate protocol \"TLSv1.3\""},
    {"server { listen 127.0.0.1:80;\n tls_protocols; }",
     "test.conf:2:2: \"tls_protocols\" takes at least 1 argument, got 0"},
    {"server { listen 127.0.0.1:80;\n tls_ciphers a; tls_ciphers b; }",
     "test.conf:2:17: duplicate \"tls_ciphers\" (first at line 2)"},
    {"server { listen 127.0.0.1:80;\n tls_ciphersuites a b; }",
     "test.conf:2:2: \"tls_ciphersuites\" takes 1 argument, got 2"},
    {"server { listen 127.0.0.1:80;\n tls_session_tickets yes; }",
     "test.conf:2:22: invalid value \"yes\" (expected on or off)"},
    {"server { listen 127.0.0.1:80;\n tls_session_ticket_rotation 0; }",
     "test.conf:2:30: \"tls_session_ticket_rotation\" must be at least 1s, got \"0\""},
    {"server { listen 127.0.0.1:80;\n tls_session_ticket_rotation 999ms; }",
     "test.conf:2:30: \"tls_session_ticket_rotation\" must be at least 1s, got \"999ms\""},
    {"server { listen 127.0.0.1:80;\n tls_session_ticket_rotation 1y; }",
     "test.conf:2:30: invalid duration \"1y\""},
    {"server { listen 127.0.0.1:80;\n tls_session_ticket_rotation 50d; }",
     "test.conf:2:30: duration \"50d\" is too large (at most 49 days)"},
    {"server { listen 127.0.0.1:80;\n tls_session_cache lots; }",
     "test.conf:2:20: invalid session cache size \"lots\" (expected a number or off)"},
    {"server { listen 127.0.0.1:80;\n tls_session_cache -1; }",
     "test.conf:2:20: invalid session cache size \"-1\" (expected a number or off)"},
    {"server { listen 127.0.0.1:80;\n tls_session_cache 99999999999; }",
     "test.conf:2:20: number \"99999999999\" is too large"},
    {"server { listen 127.0.0.1:80;\n tls_session_timeout 0; }",
     "test.conf:2:22: \"tls_session_timeout\" must be at least 1ms, got \"0\""},
    {"server { listen 127.0.0.1:80;\n tls_handshake_timeout 0ms; }",
     "test.conf:2:24: \"tls_handshake_timeout\" must be at least 1ms, got \"0ms\""},
    {"server { listen 127.0.0.1:80;\n tls_handshake_timeout soon; }",
     "test.conf:2:24: invalid duration \"soon\""},
    {"server { listen 127.0.0.1:80;\n tls_ktls maybe; }",
     "test.conf:2:11: invalid value \"maybe\" (expected on or off)"},
    {"server { listen 127.0.0.1:80;\n tls_ktls ON; }",
     "test.conf:2:11: invalid value \"ON\" (expected on or off)"},
    {"server { listen 127.0.0.1:80;\n tls_client_certificate ''; }", "test.conf:2:25: empty path"},
    {"server { listen 127.0.0.1:80;\n tls_verify_client required; }",
     "test.conf:2:20: unknown client verification \"required\" (expected on, optional or off)"},
    {"server { listen 127.0.0.1:80;\n tls_verify_client on; location / { return 204; } }",
     "test.conf:2:20: \"tls_verify_client on\" needs a \"tls_client_certificate\" in the same "
     "server"},
    {"server { listen 127.0.0.1:80;\n tls_verify_client optional; location / { return 204; } }",
     "test.conf:2:20: \"tls_verify_client optional\" needs a \"tls_client_certificate\" in the "
     "same server"},
    {"server { listen 127.0.0.1:80; location / { return 204;\n tls_verify_client off; } }",
     "test.conf:2:2: \"tls_verify_client\" is not allowed in location (it belongs in server, "
     "admin, stream or stream server)"},
    {"tls_certificate a.pem;",
     "test.conf:1:1: \"tls_certificate\" is not allowed at top level (it belongs in server, "
     "admin, stream or stream server)"},
    {"server { listen 127.0.0.1:80; tls_sesion_cache 10; }",
     "test.conf:1:31: unknown directive \"tls_sesion_cache\" (did you mean "
     "\"tls_session_cache\"?)"},
    {"server { listen 127.0.0.1:80; server_name a..b bad/name; }",
     "test.conf:1:48: invalid server name \"bad/name\" (expected a host name, *.domain, "
     "name.*, .domain or ~REGEX)"},
    {"server { listen 127.0.0.1:80; server_name *; }",
     "test.conf:1:43: invalid server name \"*\" (expected a host name, *.domain, name.*, .domain "
     "or ~REGEX)"},
    {"server { listen 127.0.0.1:80; server_name *.; }",
     "test.conf:1:43: invalid server name \"*.\" (expected a host name, *.domain, name.*, .domain "
     "or ~REGEX)"},
    /* locations */
    {"server { listen 127.0.0.1:80;\n location /a { return 204; }\n location /a { return 200; } }",
     "test.conf:3:11: duplicate location \"/a\" (first at line 2)"},
    {"server { listen 127.0.0.1:80;\n location = / { return 204; }\n location = / { return 200; } "
     "}",
     "test.conf:3:13: duplicate location \"= /\" (first at line 2)"},
    {"server { listen 127.0.0.1:80; location ~~ /a { return 204; } }",
     "test.conf:1:40: unknown location modifier \"~~\" (expected =, ~, ~* or ^~)"},
    {"server { listen 127.0.0.1:80;\n location /a { return 204; }\n location ^~ /a { return 200; } "
     "}",
     "test.conf:3:14: duplicate location \"^~ /a\" (first at line 2)"},
    {"server { listen 127.0.0.1:80; location ~ \"\" { return 204; } }",
     "test.conf:1:42: empty location regex"},
    {"server { listen 127.0.0.1:80; location a { return 204; } }",
     "test.conf:1:40: location path must start with \"/\", got \"a\""},
    {"server { listen 127.0.0.1:80; location /a { } }",
     "test.conf:1:31: location \"/a\" serves files (it has no \"return\", \"proxy_pass\" or "
     "\"rewrite\") but no \"root\" is set for it, in it, its server or at top level"},
    {"server { listen 127.0.0.1:80; location / { return 600; } }",
     "test.conf:1:51: invalid status code \"600\" (expected 200 to 599)"},
    {"server { listen 127.0.0.1:80; location / { return ok; } }",
     "test.conf:1:51: invalid status code \"ok\" (expected 200 to 599)"},
    {"server { listen 127.0.0.1:80; location / { return 101; } }",
     "test.conf:1:51: invalid status code \"101\" (expected 200 to 599)"},
    {"server { listen 127.0.0.1:80; location / { return 301 \"http://a/\\nSet-Cookie: x=1\"; } }",
     "test.conf:1:55: a redirect target cannot hold control characters"},
    {"server { listen 127.0.0.1:80; location / { return 302 \"http://a/\r\nSet-Cookie: x=1\"; } }",
     "test.conf:1:55: a redirect target cannot hold control characters"},
    {"server { listen 127.0.0.1:80; location / { return 200; return 204; } }",
     "test.conf:1:56: duplicate \"return\" (first at line 1)"},
    {"server { listen 127.0.0.1:80; location / { return 200; proxy_pass http://127.0.0.1:1; } }",
     "test.conf:1:56: \"proxy_pass\" cannot be combined with \"return\" in one location"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1; return 200; } }",
     "test.conf:1:75: \"return\" cannot be combined with \"proxy_pass\" in one location"},
    /* upstreams and proxying */
    {"server { listen 127.0.0.1:80;\n  location / { proxy_pass http://ap; } }\n"
     "upstream app { server 127.0.0.1:9000; }",
     "test.conf:2:27: no upstream named \"ap\" (an address needs a port: http://HOST:PORT)"},
    {"server { listen 127.0.0.1:80;\n  location / { proxy_pass https://ap; } }\n"
     "upstream app { server 127.0.0.1:9000; }",
     "test.conf:2:27: no upstream named \"ap\" (an address needs a port: https://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass ftp://app; } }",
     "test.conf:1:55: invalid proxy_pass \"ftp://app\" (expected http[s]://UPSTREAM or "
     "http[s]://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://; } }",
     "test.conf:1:55: invalid proxy_pass \"http://\" (expected http[s]://UPSTREAM or "
     "http[s]://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://; } }",
     "test.conf:1:55: invalid proxy_pass \"https://\" (expected http[s]://UPSTREAM or "
     "http[s]://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass HTTPS://app; } }",
     "test.conf:1:55: invalid proxy_pass \"HTTPS://app\" (expected http[s]://UPSTREAM or "
     "http[s]://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://app/x?y; } }",
     "test.conf:1:55: proxy_pass \"https://app/x?y\" has a query; give https://UPSTREAM[/PATH] or "
     "https://HOST:PORT[/PATH]"},
    {"server { listen 127.0.0.1:80; location ~ ^/a { proxy_pass http://127.0.0.1:1/x; } }",
     "test.conf:1:59: proxy_pass \"http://127.0.0.1:1/x\" has a path, which a regex location "
     "cannot replace its match with"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://[::1]:x; } }",
     "test.conf:1:55: invalid proxy_pass address \"[::1]:x\" (expected HOST:PORT, "
     "[IPV6]:PORT, *:PORT, PORT or unix:/PATH)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http:///x; } }",
     "test.conf:1:55: invalid proxy_pass \"http:///x\" (expected http[s]://UPSTREAM or "
     "http[s]://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:port; } }",
     "test.conf:1:55: invalid proxy_pass address \"127.0.0.1:port\" (expected HOST:PORT, "
     "[IPV6]:PORT, *:PORT, PORT or unix:/PATH)"},
    {"server { listen 127.0.0.1:80; location / {\n proxy_pass http://127.0.0.1:1;\n"
     " proxy_tls_verify off; } }",
     "test.conf:3:2: \"proxy_tls_verify\" needs \"proxy_pass https://...\" in the same location"},
    {"server { listen 127.0.0.1:80; location / {\n proxy_tls_name a.example;\n"
     " proxy_pass http://app; } }\nupstream app { server 127.0.0.1:1; }",
     "test.conf:2:2: \"proxy_tls_name\" needs \"proxy_pass https://...\" in the same location"},
    {"server { listen 127.0.0.1:80; location / {\n return 204;\n"
     " proxy_tls_trusted_certificate ca.pem; } }",
     "test.conf:3:2: \"proxy_tls_trusted_certificate\" needs \"proxy_pass https://...\" in the "
     "same location"},
    /* as written: nginx's spelling */
    {"server { listen 127.0.0.1:80; location / {\n proxy_pass http://127.0.0.1:1;\n"
     " proxy_ssl_verify off; } }",
     "test.conf:3:2: \"proxy_ssl_verify\" needs \"proxy_pass https://...\" in the same location"},
    {"server { listen 127.0.0.1:80; location / {\n proxy_pass http://127.0.0.1:1;\n"
     " proxy_tls_name a.example; proxy_tls_verify off; } }",
     "test.conf:3:2: \"proxy_tls_name\" needs \"proxy_pass https://...\" in the same location"},
    {"server { listen 127.0.0.1:80; location / { proxy_tls_name a.example; } }",
     "test.conf:1:44: \"proxy_tls_name\" needs \"proxy_pass https://...\" in the same location"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://127.0.0.1:1;\n"
     " proxy_tls_verify maybe; } }",
     "test.conf:2:19: invalid value \"maybe\" (expected on or off)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://127.0.0.1:1;\n"
     " proxy_tls_name \"a b\"; } }",
     "test.conf:2:17: invalid proxy_tls_name \"a b\" (expected a host name or an IP address)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://127.0.0.1:1;\n"
     " proxy_tls_name [::1]; } }",
     "test.conf:2:17: invalid proxy_tls_name \"[::1]\" (expected a host name or an IP address)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://127.0.0.1:1;\n"
     " proxy_tls_name a; proxy_tls_name b; } }",
     "test.conf:2:20: duplicate \"proxy_tls_name\" (first at line 2)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass https://127.0.0.1:1;\n"
     " proxy_tls_trusted_certificate ''; } }",
     "test.conf:2:32: empty path"},
    {"server { listen 127.0.0.1:80; proxy_tls_verify off; }",
     "test.conf:1:31: \"proxy_tls_verify\" is not allowed in server (it belongs in location)"},
    {"upstream app { }", "test.conf:1:1: upstream \"app\" has no servers"},
    {"upstream '' { server 127.0.0.1:1; }",
     "test.conf:1:10: invalid upstream name \"\" (use letters, digits, \"-\", \"_\" and \".\")"},
    {"upstream a:b { server 127.0.0.1:1; }",
     "test.conf:1:10: invalid upstream name \"a:b\" (use letters, digits, \"-\", \"_\" and \".\")"},
    {"upstream app { server 127.0.0.1:1; }\nupstream app { server 127.0.0.1:2; }",
     "test.conf:2:10: duplicate upstream \"app\" (first at line 1)"},
    {"upstream app { server 127.0.0.1; }",
     "test.conf:1:23: invalid server address \"127.0.0.1\" (expected HOST:PORT, [IPV6]:PORT, "
     "*:PORT, PORT or unix:/PATH)"},
    {"upstream app { server 127.0.0.1:1 weight=0; }",
     "test.conf:1:35: weight must be from 1 to 1000, got \"0\""},
    {"upstream app { server 127.0.0.1:1 max_fails=x; }", "test.conf:1:35: invalid number \"x\""},
    {"upstream app { server 127.0.0.1:1 fail_timeout=1y; }",
     "test.conf:1:35: invalid duration \"1y\""},
    {"upstream app { server 127.0.0.1:1 weight=2 weight=3; }",
     "test.conf:1:44: duplicate parameter \"weight\""},
    {"upstream app { server 127.0.0.1:1 spare; }",
     "test.conf:1:35: unknown server parameter \"spare\" (expected weight=, max_fails=, "
     "fail_timeout=, max_conns=, slow_start=, max_addresses=, service=, backup, down or "
     "resolve)"},
    {"upstream app { server 127.0.0.1:1 backup=1; }",
     "test.conf:1:35: unknown server parameter \"backup=1\" (expected weight=, max_fails=, "
     "fail_timeout=, max_conns=, slow_start=, max_addresses=, service=, backup, down or "
     "resolve)"},
    {"upstream app { resolver 127.0.0.1; server app.internal service=http; }",
     "test.conf:1:43: \"service=\" needs \"resolve\" (SRV records are looked up again and "
     "again)"},
    {"upstream app { resolver 127.0.0.1; server app.internal:80 service=http resolve; }",
     "test.conf:1:43: invalid server name \"app.internal:80\" for service= (expected a host "
     "name without a port, the SRV records give the ports)"},
    {"upstream app { resolver 127.0.0.1; server app.internal service=ht/tp resolve; }",
     "test.conf:1:56: invalid service \"ht/tp\" (expected a name such as http or _http._tcp)"},
    {"upstream app { server 127.0.0.1:1 max_addresses=4; }",
     "test.conf:1:23: \"max_addresses\" is for a server with \"resolve\""},
    {"upstream app { resolver 127.0.0.1; server a.internal:80 resolve max_addresses=1000; "
     "server b.internal:80 resolve max_addresses=25; }",
     "test.conf:1:92: upstream \"app\" has more than 1024 servers (at most 1024 addresses, a "
     "server with \"resolve\" counting as its max_addresses, 16 by default)"},
    {"upstream app { server app.internal:8000 resolve; }",
     "test.conf:1:23: \"resolve\" needs a \"resolver\" in the upstream block"},
    {"upstream app { resolver 127.0.0.1; server app.internal resolve; }",
     "test.conf:1:43: invalid server name \"app.internal\" for resolve (expected NAME:PORT)"},
    {"upstream app { resolver dns.internal; server 127.0.0.1:1; }",
     "test.conf:1:25: invalid resolver \"dns.internal\" (expected an IP address, with a port or "
     "for port 53)"},
    {"upstream app { server 127.0.0.1:1; balance fastest; }",
     "test.conf:1:44: unknown balance method \"fastest\" (expected round_robin, least_conn, "
     "ip_hash, hash or random)"},
    {"upstream app { server 127.0.0.1:1; balance hash $cookie_x; }",
     "test.conf:1:49: unsupported hash key \"$cookie_x\" (expected $remote_addr, $request_uri, "
     "$host or $http_NAME)"},
    {"upstream app { server 127.0.0.1:1; balance random three; }",
     "test.conf:1:51: unexpected \"three\" after \"balance random\""},
    {"upstream app { server 127.0.0.1:1; health_check rise=0; }",
     "test.conf:1:49: rise must be from 1 to 1000, got \"0\""},
    {"upstream app { server 127.0.0.1:1; health_check \"uri=/a b\"; }",
     "test.conf:1:49: invalid health_check uri \"/a b\" (a path of at most 256 bytes, without "
     "spaces)"},
    {"upstream app { server 127.0.0.1:1; health_check type=h3; }",
     "test.conf:1:49: invalid health_check type \"h3\" (expected http, http2, grpc, tcp or udp)"},
    {"upstream u { server 127.0.0.1:1; health_check type=tcp uri=/x; }",
     "test.conf:1:34: \"health_check type=tcp\" only connects: it takes no uri=, match= or "
     "grpc_service="},
    {"upstream app { server 127.0.0.1:1; health_check \"grpc_service=a b\"; }",
     "test.conf:1:49: invalid health_check grpc_service \"a b\" (a name of at most 255 bytes, "
     "without spaces)"},
    {"upstream app { server 127.0.0.1:1; health_check match=2xx,6xx; }",
     "test.conf:1:49: invalid health_check match \"2xx,6xx\" (expected statuses or classes such "
     "as 2xx, separated by commas)"},
    {"upstream app { server 127.0.0.1:1; health_check every=1s; }",
     "test.conf:1:49: unknown health_check parameter \"every=1s\" (expected interval=, "
     "timeout=, rise=, fall=, uri=, match=, port=, type= or grpc_service=)"},
    {"upstream app { server 127.0.0.1:1; keepalive -1; }", "test.conf:1:46: invalid number \"-1\""},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_set_header \"Bad Name\" x; } }",
     "test.conf:2:19: invalid header name \"Bad Name\""},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_set_header X-A \"a\\nb\"; } }",
     "test.conf:2:23: header value contains a control character"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_set_header X-A a; proxy_set_header x-a b; } }",
     "test.conf:2:43: duplicate proxy_set_header \"x-a\" in this location"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_hide_header X:Y; } }",
     "test.conf:2:20: invalid header name \"X:Y\""},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_hide_header \"\"; } }",
     "test.conf:2:20: invalid header name \"\""},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_upgrade websocket H2C; } }",
     "test.conf:2:26: proxy_upgrade cannot allow \"H2C\": an HTTP version through a tunnel "
     "would pass requests that the proxy never checks"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_upgrade http; } }",
     "test.conf:2:16: proxy_upgrade cannot allow \"http\": an HTTP version through a tunnel "
     "would pass requests that the proxy never checks"},
    {"server { listen 127.0.0.1:80; location / { grpc_pass grpc://127.0.0.1:1/svc; } }",
     "test.conf:1:54: invalid grpc_pass \"grpc://127.0.0.1:1/svc\" (expected "
     "grpc[s]://UPSTREAM or grpc[s]://HOST:PORT, without a path)"},
    {"server { listen 127.0.0.1:80; location / { grpc_pass http://127.0.0.1:1; } }",
     "test.conf:1:54: invalid grpc_pass \"http://127.0.0.1:1\" (expected grpc[s]://UPSTREAM "
     "or grpc[s]://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass grpc://127.0.0.1:1; } }",
     "test.conf:1:55: invalid proxy_pass \"grpc://127.0.0.1:1\" (expected http[s]://UPSTREAM "
     "or http[s]://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { grpc_pass nowhere; } }",
     "test.conf:1:54: no upstream named \"nowhere\" (an address needs a port: "
     "grpc://HOST:PORT)"},
    {"server { listen 127.0.0.1:80; location / { grpc_pass 127.0.0.1:1;\n"
     " proxy_pass http://127.0.0.1:1; } }",
     "test.conf:2:2: \"proxy_pass\" cannot be combined with \"grpc_pass\" in one location"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_http_version 3; } }",
     "test.conf:2:21: invalid proxy_http_version \"3\" (expected 1.1 or 2)"},
    {"server { listen 127.0.0.1:80; location / { grpc_pass grpc://127.0.0.1:1;\n"
     " grpc_ssl_verify off; } }",
     "test.conf:2:2: \"grpc_ssl_verify\" needs \"grpc_pass grpcs://...\" in the same location"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_upgrade websocket/13; } }",
     "test.conf:2:16: invalid proxy_upgrade protocol \"websocket/13\" (expected a name such as "
     "websocket, without a version)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_upgrade websocket off; } }",
     "test.conf:2:26: \"off\" cannot be combined with protocols"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_upgrade websocket; proxy_set_header Upgrade $http_upgrade; } }",
     "test.conf:2:44: \"proxy_upgrade\" and \"proxy_set_header Upgrade $http_upgrade\" both "
     "say which upgrades pass; keep one"},
    /* the server's line, which the location takes */
    {"server { listen 127.0.0.1:80;\n proxy_set_header Upgrade $http_upgrade;\n"
     " location / { proxy_pass http://127.0.0.1:1; proxy_upgrade websocket; } }",
     "test.conf:2:19: \"proxy_upgrade\" and \"proxy_set_header Upgrade $http_upgrade\" both "
     "say which upgrades pass; keep one"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_set_header Upgrade $http_upgrade; proxy_upgrade websocket; } }",
     "test.conf:2:42: \"proxy_upgrade\" and \"proxy_set_header Upgrade $http_upgrade\" both "
     "say which upgrades pass; keep one"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_set_header Upgrade \"h2c\"; } }",
     "test.conf:2:19: proxy_set_header cannot set \"Upgrade\": the proxy derives it"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_set_header Connection close; } }",
     "test.conf:2:19: proxy_set_header cannot set \"Connection\": the proxy derives it"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_set_header Connection upgrade; proxy_set_header connection \"\"; } }",
     "test.conf:2:56: duplicate proxy_set_header \"connection\" in this location"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_intercept_errors yes; } }",
     "test.conf:2:25: invalid value \"yes\" (expected on or off)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_redirect default; proxy_redirect off; } }",
     "test.conf:2:41: \"proxy_redirect off\" cannot be combined with other proxy_redirect "
     "lines"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_redirect off; proxy_redirect / /x/; } }",
     "test.conf:2:37: \"proxy_redirect off\" cannot be combined with other proxy_redirect "
     "lines"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_redirect on; } }",
     "test.conf:2:17: invalid proxy_redirect \"on\" (expected default, off, or REDIRECT "
     "REPLACEMENT)"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_redirect ~* /; } }",
     "test.conf:2:17: empty proxy_redirect regex"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_redirect / \"/a\\nb\"; } }",
     "test.conf:2:19: header value contains a control character"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_redirect / /a/b c; } }",
     "test.conf:2:2: \"proxy_redirect\" takes 1 or 2 arguments, got 3"},
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://127.0.0.1:1;\n"
     " proxy_upgrade websocket; proxy_upgrade foo; } }",
     "test.conf:2:27: duplicate \"proxy_upgrade\" (first at line 2)"},
    {"proxy_buffer_size 1000;",
     "test.conf:1:19: \"proxy_buffer_size\" must be between 1k and 128k, "
     "got \"1000\""},
    {"server { listen 127.0.0.1:80; location / { proxy_buffer_size 129k; return 204; } }",
     "test.conf:1:62: \"proxy_buffer_size\" must be between 1k and 128k, got \"129k\""},
    {"proxy_buffer_size 4k; proxy_buffer_size 8k;",
     "test.conf:1:23: duplicate \"proxy_buffer_size\" (first at line 1)"},
    {"upstream app { server 127.0.0.1:1; proxy_buffer_size 4k; }",
     "test.conf:1:36: \"proxy_buffer_size\" is not allowed in upstream (it belongs at top "
     "level or in server, location, stream or stream server)"},
    /* include */
    {"include test.conf;", "test.conf:1:1: include loop: test.conf includes itself"},
    {"include missing.conf;",
     "test.conf:1:9: cannot read \"missing.conf\": No such file or directory"},
    {"include;", "test.conf:1:1: \"include\" takes 1 argument, got 0"},
    {"include a b;", "test.conf:1:1: \"include\" takes 1 argument, got 2"},
    {"include x { }", "test.conf:1:11: \"include\" does not take a \"{ ... }\" block"},
    {"include '';", "test.conf:1:9: empty path"},
    {"include ./;", "test.conf:1:9: cannot read \".\": No such file or directory"},
    /* real_ip, allow, deny */
    {"set_real_ip_from 10.0.0.0/33;",
     "test.conf:1:18: invalid prefix length in \"10.0.0.0/33\" (expected 0 to 32)"},
    {"set_real_ip_from 2001:db8::/129;",
     "test.conf:1:18: invalid prefix length in \"2001:db8::/129\" (expected 0 to 128)"},
    {"set_real_ip_from all;",
     "test.conf:1:18: invalid address \"all\" (expected an IPv4 or IPv6 address or "
     "ADDRESS/BITS)"},
    {"set_real_ip_from unix:;",
     "test.conf:1:18: invalid address \"unix:\" (expected an IPv4 or IPv6 address or "
     "ADDRESS/BITS)"},
    {"set_real_ip_from 10.0.0.0/x;",
     "test.conf:1:18: invalid prefix length in \"10.0.0.0/x\" (expected 0 to 32)"},
    {"real_ip_header X-Real-IP; real_ip_header X-Forwarded-For;",
     "test.conf:1:27: duplicate \"real_ip_header\" (first at line 1)"},
    {"real_ip_header \"X Real\";", "test.conf:1:16: invalid header name \"X Real\""},
    {"real_ip_recursive yes;", "test.conf:1:19: invalid value \"yes\" (expected on or off)"},
    {"server { listen 127.0.0.1:80; location / { allow 10.0.0.300; return 204; } }",
     "test.conf:1:50: invalid address \"10.0.0.300\" (expected an IPv4 or IPv6 address, "
     "ADDRESS/BITS or all)"},
    {"deny;", "test.conf:1:1: \"deny\" takes 1 argument, got 0"},
    {"allow 10.0.0.1 10.0.0.2;", "test.conf:1:1: \"allow\" takes 1 argument, got 2"},
    {"upstream app { server 127.0.0.1:1; deny all; }",
     "test.conf:1:36: \"deny\" is not allowed in upstream (it belongs at top level or in "
     "server, location, admin, stream or stream server)"}, /* limit_req_zone, limit_conn_zone,
                                                              limit_req, limit_conn */
    {"limit_req_zone $binary_remote_addr zone=one rate=1r/s;",
     "test.conf:1:36: invalid zone \"zone=one\" (expected zone=NAME:SIZE)"},
    {"limit_req_zone $binary_remote_addr zone=one:10k rate=1r/s;",
     "test.conf:1:45: zone \"one\" is too small (at least 32k)"},
    {"limit_req_zone $binary_remote_addr zone=o.e:1m rate=1r/s;",
     "test.conf:1:36: invalid zone name in \"zone=o.e:1m\" (letters, digits, \"_\" and \"-\")"},
    {"limit_req_zone $binary_remote_addr zone=one:1m rate=1r/h;",
     "test.conf:1:48: invalid rate \"rate=1r/h\" (expected rate=Nr/s or rate=Nr/m)"},
    {"limit_req_zone $binary_remote_addr zone=one:1m rate=0r/s;",
     "test.conf:1:48: rate must be from 1 to 1000000, got \"rate=0r/s\""},
    {"limit_req_zone $binary_remote_addr b zone=one:1m;",
     "test.conf:1:36: invalid parameter \"b\""},
    {"limit_conn_zone zone=c:1m rate=1r/s;", "test.conf:1:27: invalid parameter \"rate=1r/s\""},
    {"limit_req_zone $a zone=one:1m rate=1r/s;\nlimit_conn_zone $a zone=one:1m;",
     "test.conf:2:20: zone \"one\" is already declared (line 1)"},
    {"limit_req burst=5;", "test.conf:1:1: \"limit_req\" needs zone=NAME"},
    {"limit_req zone=one nodelay delay=3;", "test.conf:1:28: invalid parameter \"delay=3\""},
    {"limit_req zone=one burst=x;", "test.conf:1:26: invalid number \"x\""},
    {"limit_req zone=two;", "test.conf:1:11: unknown limit_req zone \"two\""},
    {"limit_conn_zone $a zone=c:1m;\nlimit_req zone=c;",
     "test.conf:2:11: zone \"c\" is a limit_conn_zone, not a limit_req_zone"},
    {"limit_req_zone $a zone=one:1m rate=1r/s;\nlimit_req zone=one; limit_req zone=one burst=2;",
     "test.conf:2:31: zone \"one\" is limited twice in this block"},
    {"limit_conn_zone $a zone=c:1m;\nlimit_conn c 0;",
     "test.conf:2:14: \"limit_conn\" must be from 1 to 65535, got \"0\""},
    {"limit_req_status 302;",
     "test.conf:1:18: \"limit_req_status\" must be from 400 to 599, got \"302\""},
    {"server { listen 127.0.0.1:80; limit_conn_zone $a zone=c:1m; }",
     "test.conf:1:31: \"limit_conn_zone\" is not allowed in server (it belongs at top level or in "
     "stream)"},
    /* error_page */
    {"error_page 404;", "test.conf:1:1: \"error_page\" takes at least 2 arguments, got 1"},
    {"error_page 200 /x;",
     "test.conf:1:12: invalid error_page code \"200\" (expected 300 to 599, not 499)"},
    {"error_page 404 499 /x;",
     "test.conf:1:16: invalid error_page code \"499\" (expected 300 to 599, not 499)"},
    {"error_page 404 600 /x;",
     "test.conf:1:16: invalid error_page code \"600\" (expected 300 to 599, not 499)"},
    {"error_page = /x;", "test.conf:1:12: error_page needs a status code before \"=\""},
    {"error_page 404 =abc /x;",
     "test.conf:1:16: invalid response code \"=abc\" (expected \"=\" or =200 to =599)"},
    {"error_page 404 =199 /x;",
     "test.conf:1:16: invalid response code \"=199\" (expected \"=\" or =200 to =599)"},
    {"error_page 404 =200;", "test.conf:1:16: error_page needs a URI after \"=200\""},
    {"error_page 404 \"\";", "test.conf:1:16: empty error_page URI"},
    {"error_page 404 \"/a\\nb\";",
     "test.conf:1:16: an error_page URI cannot hold control characters"},
    {"server { listen 127.0.0.1:80;\n location / { error_page 502 @down; return 204; } }",
     "test.conf:2:30: no location \"@down\" in the server at line 1"},
    {"error_page 404 @top;\nserver { listen 127.0.0.1:80; location / { return 204; } }",
     "test.conf:1:16: no location \"@top\" in the server at line 2"},
    {"error_page 404 @;", "test.conf:1:16: empty location name \"@\""},
    {"server { listen 127.0.0.1:80; location = @a { return 204; } }",
     "test.conf:1:42: location path must start with \"/\", got \"@a\""},
    {"upstream u { server 127.0.0.1:1; error_page 502 /x; }",
     "test.conf:1:34: \"error_page\" is not allowed in upstream (it belongs at top level or in "
     "server or location)"},
    /* stream */
    {"stream { server { listen 127.0.0.1:9000; } }",
     "test.conf:1:10: a stream's server needs a \"proxy_pass\""},
    {"stream { server { proxy_pass 127.0.0.1:1; } }",
     "test.conf:1:10: a stream's server needs a \"listen\""},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass nowhere; } }",
     "test.conf:1:53: no upstream \"nowhere\" (write its upstream block in the stream block, "
     "before its use)"},
    {"stream { server { listen 127.0.0.1:9000 udp proxy_protocol; proxy_pass 127.0.0.1:1; } }",
     "test.conf:1:19: a udp listen takes no PROXY header (\"proxy_protocol\")"},
    {"stream { server { listen 127.0.0.1:9000 udp; listen 127.0.0.1:9000 udp; "
     "proxy_pass 127.0.0.1:1; } }",
     "test.conf:1:46: duplicate stream listen 127.0.0.1:9000 (first at line 1)"},
    {"stream { proxy_responses -1; }",
     "test.conf:1:26: \"proxy_responses\" must be from 0 to 1000000, got \"-1\""},
    {"stream { server { listen 127.0.0.1:9000 deferred; proxy_pass 127.0.0.1:1; } }",
     "test.conf:1:41: invalid listen parameter \"deferred\" (expected udp, tls, "
     "proxy_protocol or default_server)"},
    {"stream { server { listen 127.0.0.1:9000 ssl; proxy_pass 127.0.0.1:1; } }",
     "test.conf:1:19: listen \"127.0.0.1:9000\" is tls but neither the server nor the stream "
     "block has a \"tls_certificate\""},
    {"stream { server { listen 127.0.0.1:9000 udp tls; proxy_pass 127.0.0.1:1; } }",
     "test.conf:1:19: a udp listen has no TLS (DTLS is not supported)"},
    {"stream { tls_preread on; server { listen 127.0.0.1:9000 ssl; proxy_pass 127.0.0.1:1;\n"
     " ssl_certificate a.pem; ssl_certificate_key a.key; } }",
     "test.conf:1:35: a tls listen terminates TLS itself: \"tls_preread\" reads a ClientHello "
     "that is passed on"},
    {"stream { server { listen 127.0.0.1:9000 ssl; proxy_pass 127.0.0.1:1;\n"
     " ssl_certificate a.pem; ssl_certificate_key a.key; ssl_verify_client on; } }",
     "test.conf:2:70: \"tls_verify_client on\" needs a \"tls_client_certificate\" in the same "
     "server"},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:1; ssl_alpn \"\"; } }",
     "test.conf:1:75: an ALPN protocol name is 1 to 255 bytes, got \"\""},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:1; ssl_stapling on; } }",
     "test.conf:1:66: \"ssl_stapling\" is not allowed in stream server (it belongs at top level "
     "or in server or admin)"},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass http://127.0.0.1:1; } }",
     "test.conf:1:53: a stream's proxy_pass takes an upstream's name or HOST:PORT, without a "
     "scheme, got \"http://127.0.0.1:1\""},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:1; }\n"
     "server { listen 127.0.0.1:9000 proxy_protocol; proxy_pass 127.0.0.1:2; } }",
     "test.conf:2:10: stream listen 127.0.0.1:9000 takes other parameters than at line 1 "
     "(servers on one address share its tls and proxy_protocol)"},
    {"stream { server { listen 127.0.0.1:9000 udp; proxy_pass 127.0.0.1:1; }\n"
     "server { listen 127.0.0.1:9000 udp; proxy_pass 127.0.0.1:2; } }",
     "test.conf:2:10: duplicate stream listen 127.0.0.1:9000 (first at line 1)"},
    {"stream { server { listen 127.0.0.1:9000 default_server; proxy_pass 127.0.0.1:1; }\n"
     "server { listen 127.0.0.1:9000 default_server; proxy_pass 127.0.0.1:2; } }",
     "test.conf:2:10: a duplicate default server for 127.0.0.1:9000 (first at line 1)"},
    {"stream { server { listen 127.0.0.1:9000; server_name a.test; proxy_pass 127.0.0.1:1; }\n"
     "server { listen 127.0.0.1:9000; server_name A.test; proxy_pass 127.0.0.1:2; } }",
     "test.conf:2:10: server_name \"A.test\" on \"127.0.0.1:9000\" is already used at line 1"},
    {"stream { server { listen 127.0.0.1:9000; server_name a..*b; proxy_pass 127.0.0.1:1; } }",
     "test.conf:1:54: invalid server name \"a..*b\" (expected a host name, *.domain, name.*, "
     ".domain or ~REGEX)"},
    {"stream { upstream a { server 127.0.0.1:1; health_check match=nope; } }",
     "test.conf:1:56: no match block \"nope\" in the stream block"},
    {"upstream a { server 127.0.0.1:1; health_check match=ping; }",
     "test.conf:1:47: health_check match=ping names a stream match block: the upstream must be "
     "in the stream block"},
    {"stream { match m { send x; receive y; } }",
     "test.conf:1:28: a match block takes \"send\" and \"expect\", not \"receive\""},
    {"stream { match m { expect ~ a b; } }",
     "test.conf:1:20: \"expect\" takes a string, or \"~\" and a regex"},
    {"stream { upstream a { server 127.0.0.1:1; health_check match=m type=http; }\n"
     "match m { send x; } }",
     "test.conf:1:43: \"health_check match=m\" (a stream match block) is a type=tcp or udp check"},
    {"stream { ssl_verify_client on; }",
     "test.conf:1:28: \"tls_verify_client on\" needs a \"tls_client_certificate\" in the same "
     "stream block"},
    {"stream { proxy_timeout 0; }", "test.conf:1:24: \"proxy_timeout\" must be more than 0"},
    {"stream { proxy_buffer_size 100; }",
     "test.conf:1:28: \"proxy_buffer_size\" must be from 1k to 16m, got \"100\""},
    {"stream { proxy_next_upstream maybe; }",
     "test.conf:1:30: expected \"on\" or \"off\", got \"maybe\""},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:1; location / { } } }",
     "test.conf:1:66: \"location\" is not allowed in stream server (it belongs in server)"},
    {"stream { proxy_pass 127.0.0.1:1; }",
     "test.conf:1:10: \"proxy_pass\" is not allowed in stream (it belongs in location, if or "
     "stream server)"},
    {"stream { } stream { }", "test.conf:1:12: duplicate \"stream\" (first at line 1)"},
    {"stream { limit_conn z 0; }",
     "test.conf:1:23: \"limit_conn\" must be from 1 to 1000000, got \"0\""},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass $nomap; } }",
     "test.conf:1:53: no map \"$nomap\" in the stream block"},
    {"stream { map $host $x { default 127.0.0.1:1; } }",
     "test.conf:1:14: a stream's map reads $tls_preread_server_name, $tls_preread_alpn_protocols "
     "(or their $ssl_preread_ names) or $remote_addr, got \"$host\""},
    {"stream { map $ssl_preread_server_name $x { a.example nowhere; } }",
     "test.conf:1:54: a stream's map value is an upstream's name or HOST:PORT, got \"nowhere\""},
    {"stream { server { listen 127.0.0.1:9000; proxy_pass $a$b; } }",
     "test.conf:1:53: a stream's proxy_pass takes one variable, a map's, alone, got \"$a$b\""},
};

START_TEST(error_table)
{
    const struct error_case *row = &error_cases[_i];
    struct conf_error error;
    ck_assert_str_eq(parse_error(row->text, NULL, &error), row->error);
}
END_TEST

/* --------------------------------------------------------- nginx forms */

/* nginx's boilerplate and spellings load, and mean what corral's do. */
START_TEST(nginx_boilerplate)
{
    struct conf_config *c = parse_ok(
        "user www-data adm;\nworker_processes auto;\npid /run/nginx.pid;\n"
        "worker_rlimit_nofile 65535;\n"
        "events { worker_connections 768; multi_accept on; use epoll; }\n"
        "http {\n"
        "    sendfile on; tcp_nopush on; tcp_nodelay on; server_tokens off;\n"
        "    types_hash_max_size 2048; server_names_hash_bucket_size 64;\n"
        "    keepalive_timeout 65 60;\n"
        "    error_log /var/log/nginx/error.log crit;\n"
        "    types { text/html html htm shtml; text/css css; image/png png; text/x-html html; }\n"
        "    default_type application/octet-stream;\n"
        "    ssl_protocols TLSv1 TLSv1.1 TLSv1.2; ssl_prefer_server_ciphers on;\n"
        "    ssl_session_cache shared:SSL:10m; ssl_session_timeout 1d;\n"
        "    ssl_ciphers HIGH:!aNULL;\n"
        "    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;\n"
        "    ssl_conf_command Options KTLS;\n"
        "    ssl_handshake_timeout 5s;\n"
        "    http2 on;\n"
        "    upstream a { least_conn; server 127.0.0.1:1; }\n"
        "    upstream b { hash $request_uri consistent; server 127.0.0.1:1; }\n"
        "    upstream c { random two; server 127.0.0.1:1; }\n"
        "    server {\n"
        "        listen 127.0.0.1:443 ssl default reuseport bind;\n"
        "        ssl_certificate a.pem; ssl_certificate_key a.key;\n"
        "        ssl_session_cache off;\n"
        "        location / { proxy_http_version 1.1; proxy_buffering off; return 204; }\n"
        "    }\n"
        "    server {\n"
        "        listen 127.0.0.1:444 ssl; http2 off;\n"
        "        ssl_certificate b.pem; ssl_certificate_key b.key;\n"
        "        ssl_protocols TLSv1.3; ssl_client_certificate ca.pem;\n"
        "        ssl_conf_command Ciphersuites TLS_CHACHA20_POLY1305_SHA256;\n"
        "        location / { return 204; }\n"
        "    }\n"
        "}\n");
    ck_assert_str_eq(c->user, "www-data");
    ck_assert_str_eq(c->group, "adm");
    ck_assert_uint_eq(c->workers, 0);
    ck_assert_str_eq(c->pid_file, "/run/nginx.pid");
    ck_assert_uint_eq(c->max_connections, 768);
    ck_assert_uint_eq(c->http.limits.keepalive_timeout_ms, 65000);
    ck_assert_int_eq(c->log_level, CORRAL_LOG_ERROR); /* nginx's crit */
    ck_assert_uint_eq(c->mime_type_count, 5);
    ck_assert_str_eq(c->mime_types[0].extension, "html");
    ck_assert_str_eq(c->mime_types[0].type, "text/x-html"); /* the later line wins */
    ck_assert_str_eq(c->mime_types[4].type, "image/png");
    ck_assert_str_eq(c->default_type, "application/octet-stream");
    /* nginx's names of the balancing methods */
    ck_assert_uint_eq(c->upstream_count, 3);
    ck_assert_int_eq(c->upstreams[0].upstream.balance, PROXY_BALANCE_LEAST_CONN);
    ck_assert_int_eq(c->upstreams[1].upstream.balance, PROXY_BALANCE_HASH);
    ck_assert_str_eq(c->upstreams[1].upstream.hash_key, "$request_uri");
    ck_assert(c->upstreams[1].upstream.hash_consistent);
    ck_assert_int_eq(c->upstreams[2].upstream.balance, PROXY_BALANCE_RANDOM);
    ck_assert(c->upstreams[2].upstream.random_two);
    ck_assert_uint_eq(c->server_count, 2);
    const struct conf_server *a = &c->servers[0], *b = &c->servers[1];
    ck_assert(a->listens[0].tls && a->listens[0].http2 && a->listens[0].default_server);
    ck_assert(b->listens[0].tls && !b->listens[0].http2);
    ck_assert_uint_eq(a->tls.certificate_count, 1);
    /* the top level's ssl_* settings, unless the server writes its own */
    ck_assert_uint_eq(a->tls.settings.protocols, TLS_PROTOCOL_1_2);
    ck_assert_uint_eq(b->tls.settings.protocols, TLS_PROTOCOL_1_3);
    ck_assert_uint_eq(a->tls.settings.session_cache, 0);
    ck_assert_uint_eq(b->tls.settings.session_cache, 10 * 1024 * 1024 / 256);
    ck_assert_uint_eq(b->tls.settings.session_timeout_ms, 86400000);
    ck_assert_str_eq(a->tls.settings.ciphers, "HIGH:!aNULL");
    ck_assert_str_eq(b->tls.settings.ciphers, "HIGH:!aNULL");
    ck_assert_str_eq(a->tls.settings.ciphersuites, "TLS_AES_128_GCM_SHA256");
    ck_assert_str_eq(b->tls.settings.ciphersuites, "TLS_CHACHA20_POLY1305_SHA256");
    ck_assert(b->tls.settings.ktls);
    ck_assert_uint_eq(b->tls.settings.handshake_timeout_ms, 5000);
    /* nginx's ssl_client_certificate alone verifies nothing */
    ck_assert_int_eq(b->tls.settings.verify_client, TLS_VERIFY_CLIENT_OFF);
    conf_free(c);
}
END_TEST

/* nginx's levels: return in a server answers every request; proxy
 * timeouts in a location; proxy_set_header inherited by a location that
 * writes none, from its server, else from the top level. */
START_TEST(nginx_levels)
{
    struct conf_config *c =
        parse_ok("proxy_set_header X-Top top;\n"
                 "proxy_read_timeout 30s;\n"
                 "server { listen 127.0.0.1:80; return 301 https://$host$request_uri; }\n"
                 "server {\n"
                 "    listen 127.0.0.1:81;\n"
                 "    server_name .example.com \"\" _;\n"
                 "    proxy_connect_timeout 2s;\n"
                 "    location /a/ { proxy_pass http://127.0.0.1:9; proxy_read_timeout 5s; }\n"
                 "    location /b/ { proxy_pass http://127.0.0.1:9;\n"
                 "                   proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
                 "                   proxy_set_header Connection \"\"; }\n"
                 "}\n"
                 "server {\n"
                 "    listen 127.0.0.1:82;\n"
                 "    location / { proxy_pass http://127.0.0.1:9; }\n"
                 "    proxy_set_header Host $host;\n"
                 "    proxy_set_header X-Real-IP $remote_addr;\n"
                 "}\n");
    ck_assert_uint_eq(c->server_count, 3);
    const struct conf_server *redirect = &c->servers[0];
    /* ".example.com" is both names, "" none */
    ck_assert_uint_eq(c->servers[1].server_name_count, 3);
    ck_assert_str_eq(c->servers[1].server_names[0], "*.example.com");
    /* a name that starts with two dots is one name, not nginx's ".name" */
    struct conf_config *dots = parse_ok("server { listen 127.0.0.1:83; server_name a ..b; }\n");
    ck_assert_uint_eq(dots->servers[0].server_name_count, 2);
    ck_assert_str_eq(dots->servers[0].server_names[1], "..b");
    conf_free(dots);
    ck_assert_str_eq(c->servers[1].server_names[1], "example.com");
    ck_assert_str_eq(c->servers[1].server_names[2], "_");
    /* the server's own return, which its rewrite phase answers with */
    ck_assert_uint_eq(redirect->location_count, 0);
    const struct return_conf *r = conf_module_conf(redirect->modules, &return_module.conf);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->code, 301);
    ck_assert_str_eq(r->text, "https://$host$request_uri");

    const struct conf_location *a = &c->servers[1].locations[0], *b = &c->servers[1].locations[1];
    ck_assert_uint_eq(proxy_of(a->modules)->proxy.read_timeout_ms, 5000);    /* its own */
    ck_assert_uint_eq(proxy_of(a->modules)->proxy.connect_timeout_ms, 2000); /* its server's */
    ck_assert_uint_eq(proxy_of(b->modules)->proxy.read_timeout_ms, 30000);   /* the top level's */
    ck_assert_uint_eq(proxy_of(b->modules)->proxy.send_timeout_ms, 60000);   /* the default */
    /* a: none of its own, none in its server: the top level's */
    ck_assert_uint_eq(proxy_of(a->modules)->set_header_count, 1);
    ck_assert_str_eq(proxy_of(a->modules)->set_headers[0].name, "X-Top");
    /* b: lines of its own (which corral does anyway), so nothing inherited */
    ck_assert_uint_eq(proxy_of(b->modules)->set_header_count, 0);
    ck_assert(proxy_of(b->modules)->connection_set);
    /* the server's lines, written after the location */
    const struct conf_location *l = &c->servers[2].locations[0];
    ck_assert_uint_eq(proxy_of(l->modules)->set_header_count, 2);
    ck_assert_str_eq(proxy_of(l->modules)->set_headers[0].name, "Host");
    ck_assert_str_eq(proxy_of(l->modules)->set_headers[1].value, "$remote_addr");
    conf_free(c);
}
END_TEST

/* Each nginx word corral lacks gets a message saying what to do; a
 * spelling written twice is a duplicate. */
static const struct error_case nginx_cases[] = {
    {"flv;",
     "test.conf:1:1: \"flv\": not in corral yet: this option of serving files (see \"static "
     "files and compression\" in the roadmap, docs/config.md)"},
    {"server { listen 127.0.0.1:80; random_index on; }",
     "test.conf:1:31: \"random_index\": not in corral yet: this option of serving files (see "
     "\"static files and "
     "compression\" in the roadmap, docs/config.md)"},
    {"quic_active_connection_id_limit 4;",
     "test.conf:1:1: \"quic_active_connection_id_limit\": not in corral yet: QUIC's other "
     "settings (see \"HTTP/3\" in the roadmap, docs/config.md)"},
    {"http3_hq on;",
     "test.conf:1:1: \"http3_hq\": not in corral yet: HTTP/3's other settings (http3_hq) (see "
     "\"HTTP/3\" in the roadmap, docs/config.md)"},
    /* families corral has: an unknown member is named as such, not the
     * family as missing */
    {"acme_shared_zone zone=x:1m;",
     "test.conf:1:1: \"acme_shared_zone\": not in corral yet: this ACME directive (corral has "
     "acme_issuer and acme_certificate) (see \"ACME and OCSP\" in the roadmap, docs/config.md)"},
    {"otel_resource_attr a b;",
     "test.conf:1:1: \"otel_resource_attr\": not in corral yet: this tracing directive (corral's "
     "otel_* directives are in docs/config.md) (see \"auth and tracing\" in the roadmap, "
     "docs/config.md)"},
    {"opentelemetry on;", "test.conf:1:1: \"opentelemetry\" is nginx's: in corral, the \"otel_*\" "
                          "directives (\"Tracing\" in docs/config.md)"},
    {"stream { preread_timeout 5s; }",
     "test.conf:1:10: \"preread_timeout\": not in corral yet: the stream proxy's preread settings "
     "(see \"stream proxy\" in the roadmap, docs/config.md)"},
    {"upstream u { server 127.0.0.1:1; least_time header; }",
     "test.conf:1:34: \"least_time\" is nginx's: in corral, \"balance least_conn;\" in the "
     "upstream block"},
    {"upstream u { server 127.0.0.1:1; hash $cookie_x; }",
     "test.conf:1:39: unsupported hash key \"$cookie_x\" (expected $remote_addr, $request_uri, "
     "$host or $http_NAME)"},
    {"daemon off;", "test.conf:1:1: \"daemon\" is not needed: corral runs in the foreground; "
                    "systemd (docs/corral.service) or your supervisor runs it as a service; "
                    "delete the line"},
    {"server { listen 127.0.0.1:80; location / { fastcgi_pass 127.0.0.1:9000; } }",
     "test.conf:1:44: \"fastcgi_pass\" is nginx's: corral speaks HTTP to backends, not "
     "FastCGI: give the application an HTTP listener (its language's HTTP server, or a "
     "FastCGI-to-HTTP gateway) and proxy_pass to it"},
    {"server { listen 127.0.0.1:80; ssl_protocols TLSv1 TLSv1.1; }",
     "test.conf:1:45: no protocol corral speaks: it has TLSv1.2 and TLSv1.3 only"},
    {"server { listen 127.0.0.1:80; ssl_session_cache shared:SSL; }",
     "test.conf:1:49: invalid ssl_session_cache \"shared:SSL\" (expected off, none, "
     "builtin[:N] or shared:NAME:SIZE)"},
    {"workers 2;\nworker_processes 4;",
     "test.conf:2:1: duplicate \"worker_processes\" (first at line 1)"},
    {"events { worker_connections 0; }",
     "test.conf:1:29: \"worker_connections\" must be at least 1, got \"0\""},
    {"events { workers 2; }",
     "test.conf:1:10: \"workers\" is not allowed in events (it belongs at top level)"},
    {"server { listen 127.0.0.1:80; proxy_set_header Content-Length 1;\n"
     "location / { proxy_pass http://127.0.0.1:9; } location /a { return 204; } }",
     "test.conf:1:48: proxy_set_header cannot set \"Content-Length\": the proxy derives it"},
    {"proxy_set_header X a;\nproxy_set_header x b;\n",
     "test.conf:2:18: duplicate proxy_set_header \"x\" in this location"},
    {"server { listen 127.0.0.1:80; location / { proxy_read_timeout 4294967295ms; } }",
     "test.conf:1:63: \"proxy_read_timeout\" must be at most 4294967294ms, got "
     "\"4294967295ms\""},
    {"map $host $m { hostnames; default 0; }",
     "test.conf:1:16: \"hostnames\" is nginx's: corral's map has no host name patterns; list "
     "the names, or write a regex such as ~^(.+\\.)?example\\.com$"},
    /* dots only: one name, not two (it overflowed the names) */
    {"server { listen 127.0.0.1:80; server_name a ...; location / { return 204; } }\n"
     "server { listen 127.0.0.1:80; server_name ...; location / { return 204; } }",
     "test.conf:2:43: server_name \"...\" on \"127.0.0.1:80\" is already used at line 1"},
    {"server { listen 127.0.0.1:80; server_name ~; }", "test.conf:1:43: empty server name regex"},
    {"server { listen 127.0.0.1:80; server_name .example.*; }",
     "test.conf:1:43: invalid server name \".example.*\" (expected a host name, *.domain, "
     "name.*, .domain or ~REGEX)"},
    {"server { listen 127.0.0.1:80; server_name *.example.*; }",
     "test.conf:1:43: invalid server name \"*.example.*\" (expected a host name, *.domain, "
     "name.*, .domain or ~REGEX)"},
    {"server { listen 127.0.0.1:80; server_name .*.a; }",
     "test.conf:1:43: invalid server name \".*.a\" (expected a host name, *.domain, "
     "name.*, .domain or ~REGEX)"},
    {"server { listen 127.0.0.1:80; server_name example; location / { return 204; } }\n"
     "server { listen 127.0.0.1:80; server_name .example; location / { return 204; } }",
     "test.conf:2:43: server_name \"example\" on \"127.0.0.1:80\" is already used at "
     "line 1"},
    {"ssl_conf_command Options -SessionTicket;",
     "test.conf:1:18: ssl_conf_command \"Options\": corral sets no raw OpenSSL commands but "
     "Ciphersuites (tls_ciphersuites) and Options KTLS (tls_ktls on)"},
    {"access_log /var/log/a.log combined if=$loggable;",
     "test.conf:1:36: \"if=\" is nginx's: corral has no conditional logging; a location's own "
     "access_log (or access_log off) chooses what is logged"},
    {"access_log /var/log/a.log combined gzip=9;",
     "test.conf:1:36: \"gzip\" is nginx's: corral writes its logs uncompressed; compress them "
     "when they rotate"},
    {"proxy_next_upstream error http_404;",
     "test.conf:1:27: \"http_404\" is nginx's: corral tries the next server on 429, 500, 502, 503 "
     "and 504 answers only"},
    {"events { use kqueue2; }",
     "test.conf:1:14: unknown event method \"kqueue2\" (nginx's are epoll, poll, select, kqueue, "
     "eventport and /dev/poll; corral uses epoll whatever it says)"},
    {"types { html; }",
     "test.conf:1:9: expected \"TYPE EXTENSION...;\" in types, such as \"text/html html htm;\""},
    {"sendfile yes;", "test.conf:1:10: invalid value \"yes\" (expected on or off)"},
    {"server { listen 127.0.0.1:80; location / { return 204; }\n http { } }",
     "test.conf:2:2: \"http\" is nginx's: in corral, \"http { ... }\" may be written at top "
     "level only"},
};

START_TEST(nginx_table)
{
    const struct error_case *row = &nginx_cases[_i];
    struct conf_error error;
    ck_assert_str_eq(parse_error(row->text, NULL, &error), row->error);
}
END_TEST

START_TEST(nginx_variable_notes)
{
    char buf[400];
    ck_assert_ptr_null(conf_nginx_variable_note("no_such_thing", buf, sizeof(buf)));
    ck_assert_str_eq(
        conf_nginx_variable_note("ssl_client_raw_cert", buf, sizeof(buf)),
        "\"$ssl_client_raw_cert\": not in corral yet: client certificate variables (see "
        "\"auth and tracing\" in the roadmap, docs/config.md)");
    ck_assert_ptr_nonnull(conf_nginx_variable_note("upstream_http_x_foo", buf, sizeof(buf)));
}
END_TEST

/* ------------------------------------------------------- every error */

/* Collects what conf_parse_each() reports, one message a line. */
struct reported {
    char text[8192];
    unsigned count;
};

static void collect_report(void *arg, const char *message)
{
    struct reported *r = arg;
    size_t used = strlen(r->text);
    snprintf(r->text + used, sizeof(r->text) - used, "%s\n", message);
    r->count++;
}

/* One row per config with several errors: every message, in order. */
struct each_case {
    const char *text;
    const char *errors;
};

static const struct each_case each_cases[] = {
    /* siblings at top level, each reported */
    {"wrokers 4;\nmax_connections 0;\nbusy_poll x;\n",
     "test.conf:1:1: unknown directive \"wrokers\" (did you mean \"workers\"?)\n"
     "test.conf:2:17: \"max_connections\" must be at least 1, got \"0\"\n"
     "test.conf:3:11: invalid busy_poll time \"x\" (expected microseconds such as 50 or 50us, "
     "a duration such as 1ms, or off)\n"},
    /* errors inside a server and a location, once each, then the next
     * server's */
    {"server {\n listen 127.0.0.1:80;\n lisen x;\n location / { retrun 200; }\n}\n"
     "server {\n listen 127.0.0.1:81 ssl2;\n}\n",
     "test.conf:3:2: unknown directive \"lisen\" (did you mean \"listen\"?)\n"
     "test.conf:4:15: unknown directive \"retrun\" (did you mean \"return\"?)\n"
     "test.conf:7:22: unknown listen parameter \"ssl2\" (expected tls, http2, quic, "
     "default_server, deferred, proxy_protocol or backlog=N)\n"},
    /* a whole-config check runs once every directive applied */
    {"server { listen 127.0.0.1:80; location / { proxy_pass http://nowhere; } }\n",
     "test.conf:1:55: no upstream named \"nowhere\" (an address needs a port: "
     "http://HOST:PORT)\n"},
    /* a syntax error ends the parse */
    {"wrokers 4;\nworkers 4\n",
     "test.conf:3:1: unexpected end of file, expecting \";\" or \"}\"\n"},
};

START_TEST(every_error_reported)
{
    const struct each_case *row = &each_cases[_i];
    struct reported r = {.text = ""};
    struct conf_config *config = (struct conf_config *)1;
    struct conf_error error;
    int rc = conf_parse_each("test.conf", row->text, strlen(row->text), read_memory, NULL,
                             collect_report, &r, &config, &error);
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_null(config);
    ck_assert_str_eq(r.text, row->errors);
    /* error holds the first, as conf_parse() gives it */
    const char *newline = strchr(row->errors, '\n');
    ck_assert_int_eq((int)strlen(error.text), (int)(newline - row->errors));
    ck_assert(strncmp(error.text, row->errors, strlen(error.text)) == 0);
}
END_TEST

/* Past CONF_ERRORS_MAX errors the parse stops. */
START_TEST(errors_are_capped)
{
    char text[4096] = "";
    for (int i = 0; i < CONF_ERRORS_MAX + 20; i++)
        strcat(text, "nope;\n");
    struct reported r = {.text = ""};
    struct conf_config *config;
    struct conf_error error;
    ck_assert_int_eq(conf_parse_each("test.conf", text, strlen(text), read_memory, NULL,
                                     collect_report, &r, &config, &error),
                     -1);
    ck_assert_uint_eq(r.count, CONF_ERRORS_MAX);
    ck_assert_str_eq(error.text, "test.conf:1:1: unknown directive \"nope\"");
}
END_TEST

/* ------------------------------------------------------ nginx corpus */

/* Reads the corpus: /etc/nginx/... is tests/conf/nginx/debian/...; an
 * include pattern (handed over as written) matches what Debian's package
 * enables: the default site, and no module or conf.d file. */
static char *read_corpus(const char *path, size_t *len, void *arg)
{
    const char *dir = arg;
    char real[PATH_MAX];
    if (strcmp(path, "/etc/nginx/conf.d/*.conf") == 0) {
        *len = 0;
        return strdup("");
    }
    if (strcmp(path, "/etc/nginx/modules-enabled/*.conf") == 0)
        path = "/etc/nginx/modules-enabled/50-mod-http-echo.conf";
    if (strcmp(path, "/etc/nginx/sites-enabled/*") == 0)
        path = "/etc/nginx/sites-available/default";
    if (strncmp(path, "/etc/nginx/", 11) == 0)
        ck_assert_int_lt(snprintf(real, sizeof(real), "%s/debian/%s", dir, path + 11),
                         (int)sizeof(real));
    else
        ck_assert_int_lt(snprintf(real, sizeof(real), "%s", path), (int)sizeof(real));
    FILE *f = fopen(real, "r");
    if (f == NULL)
        return NULL;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    *len = n;
    return strdup(text);
}

/* Each corpus file loads unchanged, or fails only on features the
 * roadmap lists, with their messages. */
struct corpus_case {
    const char *file;
    const char *errors; /* "": loads */
};

static const struct corpus_case corpus_cases[] = {
    /* Debian 12's own files (nginx-common 1.22.1), with nginx-light's
     * module: every error is a feature on the roadmap */
    {"debian/nginx.conf", ""},
    {"proxy.conf", ""},
    {"tls.conf", ""},
    {"names.conf", ""},
    {"missing.conf",
     "missing.conf:12:9: \"ssl_ocsp\": not in corral yet: OCSP checks of client certificates "
     "(see \"ACME and OCSP\" in the roadmap, docs/config.md)\n"
     "missing.conf:19:13: \"auth_delay\": not in corral yet: a delay before 401 answers (see "
     "\"auth and tracing\" in the roadmap, docs/config.md)\n"},
    {"maps.conf",
     "maps.conf:17:9: \"hostnames\" is nginx's: corral's map has no host name patterns; list "
     "the names, or write a regex such as ~^(.+\\.)?example\\.com$\n"},
};

/* The source tree's tests/conf/nginx, found from this program's path
 * (build/.../tests/conf/test_conf), into `dir`. */
static void nginx_dir(char *dir, size_t size)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    char *cut = strstr(self, "/build/");
    ck_assert_ptr_nonnull(cut);
    *cut = '\0';
    int len = snprintf(dir, size, "%s/tests/conf/nginx", self);
    ck_assert(len > 0 && (size_t)len < size);
}

START_TEST(nginx_corpus)
{
    const struct corpus_case *row = &corpus_cases[_i];
    char dir[PATH_MAX + 32], path[PATH_MAX];
    nginx_dir(dir, sizeof(dir));
    ck_assert_int_eq(chdir(dir), 0); /* positions name the files as written here */
    size_t len;
    char *text = read_corpus(row->file, &len, dir);
    ck_assert_ptr_nonnull(text);
    snprintf(path, sizeof(path), "%s", row->file);
    struct reported r = {.text = ""};
    struct conf_config *config = NULL;
    struct conf_error error;
    int rc =
        conf_parse_each(path, text, len, read_corpus, dir, collect_report, &r, &config, &error);
    free(text);
    ck_assert_str_eq(r.text, row->errors);
    ck_assert_int_eq(rc, row->errors[0] == '\0' ? 0 : -1);
    conf_free(config);
}
END_TEST

/* No nginx directive gets a bare "unknown directive": each is corral's,
 * accepted, or has its porting message. */
START_TEST(nginx_directives_have_messages)
{
    char dir[PATH_MAX + 32], path[PATH_MAX + 64];
    nginx_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/directives.txt", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[128];
    unsigned names = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        names++;
        char text[2 * sizeof(line) + 32];
        snprintf(text, sizeof(text), "%s;\nserver { %s; }\n", line, line);
        struct reported r = {.text = ""};
        struct conf_config *config = NULL;
        struct conf_error error;
        conf_parse_each("test.conf", text, strlen(text), read_memory, NULL, collect_report, &r,
                        &config, &error);
        conf_free(config);
        ck_assert_msg(strstr(r.text, "unknown directive") == NULL, "%s: %s", line, r.text);
    }
    fclose(f);
    ck_assert_uint_gt(names, 250);
}
END_TEST

/* ------------------------------------------------------ --from-nginx */

/* Translates `text`: the output (malloc'd) and the count of what could not
 * be translated. */
static char *translate(const char *path, const char *text, int *failed, struct reported *r)
{
    char *out = NULL;
    size_t out_len = 0;
    FILE *f = open_memstream(&out, &out_len);
    ck_assert_ptr_nonnull(f);
    struct conf_error error;
    *failed = conf_from_nginx(path, text, strlen(text), f, collect_report, r, &error);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_msg(*failed >= 0, "%s", error.text);
    return out;
}

/* Small translations, line by line. */
struct translate_case {
    const char *nginx, *corral;
    int failed;
};

static const struct translate_case translate_cases[] = {
    {"worker_processes 4;\npid /run/x.pid;\n",
     "# corral: nginx's \"worker_processes\" is \"workers\"\nworkers 4;\n"
     "# corral: nginx's \"pid\" is \"pid_file\"\npid_file /run/x.pid;\n",
     0},
    /* the wrappers go; what is inside stays where it is */
    {"events {\n  worker_connections 10;\n  use epoll;\n}\nhttp {\n  sendfile on; # fast\n}\n",
     "# corral: nginx's \"events { }\": its lines are corral's top level\n# events {\n"
     "  # corral: nginx's \"worker_connections\" (per worker)\n  max_connections 10;\n"
     "  # corral: no effect here: corral uses epoll; \"wakeup\" says how workers share "
     "connections\n  # use epoll;\n"
     "# corral: the end of \"events { }\"\n# }\n"
     "# corral: nginx's \"http { }\": its lines are corral's top level\n# http {\n"
     "  sendfile on; # fast\n"
     "# corral: the end of \"http { }\"\n# }\n",
     0},
    /* a wrapper sharing a line stays, as corral reads it; so does
     * worker_connections in it */
    {"events { worker_connections 10; }\n", "events { worker_connections 10; }\n", 0},
    {"server {\n  listen 443 ssl http2;\n  ssl_certificate a.pem;\n"
     "  ssl_client_certificate ca.pem;\n  ssl_protocols TLSv1.1 TLSv1.2;\n}\n",
     "server {\n  # corral: \"listen ... ssl\" is \"tls\"\n  listen 443 tls http2;\n"
     "  # corral: nginx's \"ssl_certificate\" is \"tls_certificate\"\n  tls_certificate a.pem;\n"
     "  # corral: nginx's \"ssl_client_certificate\" is \"tls_client_certificate\"\n"
     "  # corral: nginx verifies no client with this line alone:\n  tls_verify_client off;\n"
     "  tls_client_certificate ca.pem;\n"
     "  # corral: nginx's \"ssl_protocols\"; corral speaks TLSv1.2 and TLSv1.3 only\n"
     "  tls_protocols  TLSv1.2;\n}\n",
     0},
    /* set, stub_status and regex server names are corral's: unchanged */
    {"server {\n  server_name ~^(?<sub>.+)\\.example\\.com$ www.example.*;\n  set $a \"$sub\";\n"
     "  location = /s { stub_status; }\n}\n",
     "server {\n  server_name ~^(?<sub>.+)\\.example\\.com$ www.example.*;\n  set $a \"$sub\";\n"
     "  location = /s { stub_status; }\n}\n",
     0},
    /* lacking: commented out with its message on its own lines, else the
     * message only; either way it counts */
    {"flv;\nmail {\n  server { listen 25; }\n}\nlocation_x { } random_index on;\n",
     "# corral: NOT TRANSLATED: \"flv\": not in corral yet: this option of serving files (see "
     "\"static files "
     "and compression\" in the roadmap, docs/config.md)\n# flv;\n"
     "# corral: NOT TRANSLATED: \"mail\" is nginx's: corral is no mail proxy\n# mail {\n"
     "  # server { listen 25; }\n# }\n"
     "# corral: NOT TRANSLATED: \"random_index\": not in corral yet: this option of serving files "
     "(see \"static "
     "files and compression\" in the roadmap, docs/config.md)\nlocation_x { } random_index on;\n",
     3},
    {"location / {\n  proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
     "  proxy_set_header Connection \"\";\n  proxy_set_header Upgrade $http_upgrade;\n}\n",
     "location / {\n  # corral: does this by itself: X-Forwarded-For "
     "$proxy_add_x_forwarded_for\n  # proxy_set_header X-Forwarded-For "
     "$proxy_add_x_forwarded_for;\n  # corral: does this by itself: Connection \"\"\n"
     "  # proxy_set_header Connection \"\";\n  proxy_set_header Upgrade $http_upgrade;\n}\n",
     0},
    {"upstream u {\n  least_conn;\n  hash $host consistent;\n}\n",
     "upstream u {\n  # corral: nginx's \"least_conn\" is \"balance least_conn\"\n"
     "  balance least_conn;\n  # corral: nginx's \"hash\" is \"balance hash\"\n"
     "  balance hash $host consistent;\n}\n",
     0},
    {"", "", 0},
};

START_TEST(translate_table)
{
    const struct translate_case *row = &translate_cases[_i];
    struct reported r = {.text = ""};
    int failed;
    char *out = translate("t.conf", row->nginx, &failed, &r);
    ck_assert_str_eq(out, row->corral);
    ck_assert_int_eq(failed, row->failed);
    ck_assert_uint_eq(r.count, (unsigned)row->failed);
    /* the translation of a translation changes nothing */
    struct reported again = {.text = ""};
    char *twice = translate("t.conf", out, &failed, &again);
    ck_assert_str_eq(twice, out);
    free(twice);
    free(out);
}
END_TEST

/* The corpus round trip: each file translated loads as its nginx form
 * does (with the same errors for what corral lacks, now refused by its
 * translation), and translating again changes nothing. */
static const struct corpus_case round_trip_cases[] = {
    {"proxy.conf", ""},
    {"tls.conf", ""},
    {"maps.conf",
     "maps.conf:19:9: \"hostnames\" is nginx's: corral's map has no host name patterns; list "
     "the names, or write a regex such as ~^(.+\\.)?example\\.com$\n"},
};

START_TEST(translate_corpus_round_trip)
{
    const struct corpus_case *row = &round_trip_cases[_i];
    char dir[PATH_MAX + 32];
    nginx_dir(dir, sizeof(dir));
    ck_assert_int_eq(chdir(dir), 0);
    size_t len;
    char *text = read_corpus(row->file, &len, dir);
    ck_assert_ptr_nonnull(text);
    struct reported r = {.text = ""};
    int failed;
    char *out = translate(row->file, text, &failed, &r);
    ck_assert_int_eq(failed, row->errors[0] == '\0' ? 0 : 1);
    struct reported errors = {.text = ""};
    struct conf_config *config = NULL;
    struct conf_error error;
    int rc = conf_parse_each(row->file, out, strlen(out), read_corpus, dir, collect_report, &errors,
                             &config, &error);
    ck_assert_str_eq(errors.text, row->errors);
    ck_assert_int_eq(rc, row->errors[0] == '\0' ? 0 : -1);
    conf_free(config);
    char *twice = translate(row->file, out, &failed, &r);
    ck_assert_str_eq(twice, out);
    free(twice);
    free(out);
    free(text);
}
END_TEST

/* Every prefix of a full config either parses or fails with a well-formed
 * message pointing inside the text, and frees what it built. */
START_TEST(every_prefix_fails_cleanly)
{
    static const char text[] =
        "workers 2; wakeup exclusive; busy_poll 20us; error_log stderr warn;\n"
        "admin { listen 127.0.0.1:9090; }\n"
        "upstream app { server 127.0.0.1:9001 weight=2 fail_timeout=5s; balance hash; }\n"
        "server {\n"
        "    listen 127.0.0.1:8080 default_server; server_name 'a.example';\n"
        "    keepalive_timeout 10s; # a comment\n"
        "    location = /x { return 200 \"x\\n\"; }\n"
        "    location / { proxy_pass http://app; proxy_set_header X-A \"b\"; }\n"
        "}\n"
        "server {\n"
        "    listen 127.0.0.1:8443 tls; tls_certificate a.pem; tls_certificate_key a.key;\n"
        "    tls_protocols TLSv1.3; tls_session_cache off; tls_session_timeout 1m;\n"
        "    tls_client_certificate ca.pem; tls_verify_client optional; tls_ktls on;\n"
        "    location / {\n"
        "        proxy_pass https://app; proxy_tls_name a.example; proxy_tls_verify off;\n"
        "    }\n"
        "}\n";
    unsigned parsed = 0;
    for (size_t len = 0; len <= strlen(text); len++) {
        struct conf_config *config;
        struct conf_error error;
        if (conf_parse("test.conf", text, len, NULL, NULL, &config, &error) == 0) {
            parsed++;
            conf_free(config);
            continue;
        }
        unsigned line, col;
        int end = 0;
        ck_assert_msg(sscanf(error.text, "test.conf:%u:%u: %n", &line, &col, &end) == 2 &&
                          end > 0 && error.text[end] != '\0' && line >= 1 && line <= 17 && col >= 1,
                      "prefix %zu: %s", len, error.text);
    }
    ck_assert_uint_ge(parsed, 2); /* the empty text and the whole one at least */
}
END_TEST

START_TEST(nul_byte_is_an_error)
{
    static const char text[] = "workers\0 4;";
    struct conf_config *config;
    struct conf_error error;
    ck_assert_int_eq(conf_parse("nul.conf", text, sizeof(text) - 1, NULL, NULL, &config, &error),
                     -1);
    ck_assert_str_eq(error.text, "nul.conf:1:8: unexpected NUL byte");
    static const char in_string[] = "log_format \"a\0\";";
    ck_assert_int_eq(
        conf_parse("nul.conf", in_string, sizeof(in_string) - 1, NULL, NULL, &config, &error), -1);
    ck_assert_str_eq(error.text, "nul.conf:1:14: unexpected NUL byte");
}
END_TEST

/* ------------------------------------------------------------- include */

START_TEST(nested_includes_from_memory)
{
    static const struct memfile files[] = {
        {"conf/conf.d/core.conf", "workers 3;\ninclude more/wakeup.conf;\n"},
        {"conf/conf.d/more/wakeup.conf", "# deeper\nwakeup herd;\n"},
        {"conf/sites/app.conf", "listen 127.0.0.1:8080;\n"},
        {"conf/sites/loc.conf", "return 200 \"included\";"},
        {NULL, NULL},
    };
    struct conf_config *c = parse_named("conf/main.conf",
                                        "include conf.d/core.conf;\n"
                                        "server {\n"
                                        "    include ./sites/app.conf;\n"
                                        "    location / { include sites//loc.conf; }\n"
                                        "}\n",
                                        files);
    ck_assert_uint_eq(c->workers, 3);
    ck_assert_int_eq(c->wakeup, CORRAL_WAKEUP_HERD);
    ck_assert_str_eq(c->servers[0].listens[0].address, "127.0.0.1:8080");
    ck_assert_str_eq(c->servers[0].listens[0].pos.file, "conf/sites/app.conf");
    ck_assert_uint_eq(c->servers[0].listens[0].pos.line, 1);
    ck_assert_uint_eq(c->servers[0].listens[0].pos.col, 8);
    ck_assert_str_eq(return_of(&c->servers[0].locations[0])->text, "included");
    ck_assert_uint_eq(c->file_count, 5);
    ck_assert_str_eq(c->files[0], "conf/main.conf");
    ck_assert_str_eq(c->files[1], "conf/conf.d/core.conf");
    ck_assert_str_eq(c->files[2], "conf/conf.d/more/wakeup.conf");
    ck_assert_str_eq(c->files[3], "conf/sites/app.conf");
    ck_assert_str_eq(c->files[4], "conf/sites/loc.conf");
    conf_free(c);
}
END_TEST

START_TEST(same_file_included_twice)
{
    static const struct memfile files[] = {
        {"loc.conf", "location / { return 204; }\n"},
        {NULL, NULL},
    };
    struct conf_config *c = parse_named("main.conf",
                                        "server { listen 127.0.0.1:80; include loc.conf; }\n"
                                        "server { listen 127.0.0.1:81; include loc.conf; }\n",
                                        files);
    ck_assert_uint_eq(c->server_count, 2);
    ck_assert_uint_eq(c->file_count, 2);
    ck_assert_ptr_eq(c->servers[0].locations[0].pos.file, c->servers[1].locations[0].pos.file);
    conf_free(c);
}
END_TEST

struct include_error_case {
    const char *text;
    struct memfile files[4];
    const char *error;
};

static const struct include_error_case include_error_cases[] = {
    {"include a.conf;",
     {{"a.conf", "include b.conf;\n"}, {"b.conf", "\n  include a.conf;"}},
     "b.conf:2:3: include loop: a.conf -> b.conf -> a.conf"},
    {"include a.conf;",
     {{"a.conf", "include ./a.conf;"}},
     "a.conf:1:1: include loop: a.conf includes itself"},
    {"include a.conf;",
     {{"a.conf", "workers 2;\nwokers 3;\n"}},
     "a.conf:2:1: unknown directive \"wokers\" (did you mean \"workers\"?)"},
    {"workers 1;\ninclude a.conf;",
     {{"a.conf", "\n\nworkers 2;\n"}},
     "a.conf:3:1: duplicate \"workers\" (first at test.conf:1)"},
    {"server {\ninclude a.conf;\n}",
     {{"a.conf", "location / { return 204; }\n}\n"}},
     "a.conf:2:1: unexpected \"}\""},
    {"server {\ninclude a.conf;\n}",
     {{"a.conf", "location / {\n"}},
     "a.conf:2:1: unexpected end of file, expecting \"}\" to close \"location\" from line 1"},
    {"include a.conf;\n",
     {{"a.conf", "include missing/*.conf;\n"}},
     "a.conf:1:9: cannot read \"missing/*.conf\": No such file or directory"},
};

START_TEST(include_error_table)
{
    const struct include_error_case *row = &include_error_cases[_i];
    struct conf_error error;
    ck_assert_str_eq(parse_error(row->text, row->files, &error), row->error);
}
END_TEST

/* Serves every path the same text, so a file can include "itself" under a
 * name that grows each time ("x/../x.conf", "x/../x/../x.conf", ...). */
static char *read_any(const char *path, size_t *len, void *arg)
{
    (void)path;
    *len = strlen(arg);
    return strdup(arg);
}

START_TEST(include_depth_is_bounded)
{
    static const char text[] = "include x/../x.conf;";
    struct conf_config *config;
    struct conf_error error;
    ck_assert_int_eq(
        conf_parse("x.conf", text, strlen(text), read_any, (void *)text, &config, &error), -1);
    /* main, then 16 nested files; the 17th include is refused */
    char expect[512] = "";
    for (int i = 0; i < 16; i++)
        strcat(expect, "x/../");
    strcat(expect, "x.conf:1:1: includes nested more than 16 deep");
    ck_assert_str_eq(error.text, expect);
}
END_TEST

/* Real files under a temporary directory, for globs and conf_load(). */
struct tmpdir {
    char path[64];
};

static void write_file(const struct tmpdir *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir->path, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static void make_tmpdir(struct tmpdir *dir)
{
    snprintf(dir->path, sizeof(dir->path), "/tmp/corral-conf-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir->path));
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/sites", dir->path);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
}

static void remove_tmpdir(const struct tmpdir *dir)
{
    char command[128];
    snprintf(command, sizeof(command), "rm -rf '%s'", dir->path);
    ck_assert_int_eq(system(command), 0);
}

static int load(const struct tmpdir *dir, const char *name, struct conf_config **out,
                struct conf_error *error)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir->path, name);
    return conf_load(path, out, error);
}

START_TEST(glob_includes_in_sorted_order)
{
    struct tmpdir dir;
    make_tmpdir(&dir);
    write_file(&dir, "main.conf",
               "include sites/*.conf;\n"
               "include none/*.conf;   # matches nothing: fine\n"
               "include sites/[x]*.conf;\n");
    write_file(&dir, "sites/b.conf",
               "server { listen 127.0.0.1:8082; location / { return 202; } }\n");
    write_file(&dir, "sites/a.conf",
               "server { listen 127.0.0.1:8081; tls_certificate a.pem; tls_certificate_key a.key;"
               " location / { return 201; } }\n");
    write_file(&dir, "sites/c.txt", "this is not a config\n");
    write_file(&dir, "sites/.hidden.conf", "not read either\n");
    struct conf_config *c;
    struct conf_error error;
    int rc = load(&dir, "main.conf", &c, &error);
    ck_assert_msg(rc == 0, "%s", error.text);
    ck_assert_uint_eq(c->server_count, 2);
    ck_assert_str_eq(c->servers[0].listens[0].address, "127.0.0.1:8081");
    ck_assert_str_eq(c->servers[1].listens[0].address, "127.0.0.1:8082");
    char expect[256];
    snprintf(expect, sizeof(expect), "%s/sites/a.pem", dir.path);
    ck_assert_str_eq(c->servers[0].tls.certificates[0].certificate, expect);
    snprintf(expect, sizeof(expect), "%s/sites/b.conf", dir.path);
    ck_assert_str_eq(c->servers[1].pos.file, expect);
    conf_free(c);
    remove_tmpdir(&dir);
}
END_TEST

START_TEST(large_files)
{
    struct tmpdir dir;
    make_tmpdir(&dir);
    /* Larger than one read buffer: a long comment, then the directive. */
    static const char directive[] = "\nworkers 7;\n";
    static char text[20000 + sizeof(directive)];
    memset(text, '#', 20000);
    memcpy(text + 20000, directive, sizeof(directive));
    write_file(&dir, "main.conf", text);
    struct conf_config *c;
    struct conf_error error;
    int rc = load(&dir, "main.conf", &c, &error);
    ck_assert_msg(rc == 0, "%s", error.text);
    ck_assert_uint_eq(c->workers, 7);
    conf_free(c);

    /* Past the 16 MiB limit: refused, not read into memory whole. */
    write_file(&dir, "main.conf", "include sites/huge.conf;\n");
    char path[256];
    snprintf(path, sizeof(path), "%s/sites/huge.conf", dir.path);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(ftruncate(fileno(f), 16 * 1024 * 1024 + 1), 0);
    fclose(f);
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    char expect[512];
    snprintf(expect, sizeof(expect), "%s/main.conf:1:9: cannot read \"%s\": File too large",
             dir.path, path);
    ck_assert_str_eq(error.text, expect);
    remove_tmpdir(&dir);
}
END_TEST

START_TEST(glob_errors)
{
    struct tmpdir dir;
    make_tmpdir(&dir);
    struct conf_config *c;
    struct conf_error error;
    char expect[512];

    /* A loop through a glob and "..", caught by the file's real path. */
    write_file(&dir, "main.conf", "include sites/*.conf;\n");
    write_file(&dir, "sites/a.conf", "workers 2;\n");
    write_file(&dir, "sites/b.conf", "\ninclude ../main.conf;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    ck_assert_ptr_null(c);
    snprintf(expect, sizeof(expect),
             "%s/sites/b.conf:2:1: include loop: %s/main.conf -> "
             "%s/sites/b.conf -> %s/main.conf",
             dir.path, dir.path, dir.path, dir.path);
    ck_assert_str_eq(error.text, expect);

    /* A name without glob characters must exist. */
    write_file(&dir, "main.conf", "workers 2;\ninclude sites/missing.conf;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    snprintf(expect, sizeof(expect),
             "%s/main.conf:2:9: cannot read \"%s/sites/missing.conf\": No such file or directory",
             dir.path, dir.path);
    ck_assert_str_eq(error.text, expect);

    /* A directory matched by a glob is not a config file. */
    write_file(&dir, "main.conf", "include s*;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    snprintf(expect, sizeof(expect),
             "%s/main.conf:1:9: cannot include \"%s/sites\": a directory, not a regular file",
             dir.path, dir.path);
    ck_assert_str_eq(error.text, expect);

    /* An error inside a globbed file names that file. */
    write_file(&dir, "main.conf", "include sites/*.conf;\n");
    write_file(&dir, "sites/b.conf", "workers 2 3;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    snprintf(expect, sizeof(expect), "%s/sites/b.conf:1:1: \"workers\" takes 1 argument, got 2",
             dir.path);
    ck_assert_str_eq(error.text, expect);

    /* The main file itself missing. */
    ck_assert_int_eq(load(&dir, "nothere.conf", &c, &error), -1);
    snprintf(expect, sizeof(expect), "%s/nothere.conf:1:1: cannot read: No such file or directory",
             dir.path);
    ck_assert_str_eq(error.text, expect);
    remove_tmpdir(&dir);
}
END_TEST

/* -------------------------------------------------------- value parsers */

/* A value parser's answer to `text`: `rc`, then the value or errno. */
struct parse_case {
    const char *text;
    int rc;
    int err;
    uint64_t value;
};

/* What a parser returned (`rc`, errno `err`, `value`) is `row`'s. */
static void parse_case_check(const struct parse_case *row, int rc, int err, uint64_t value)
{
    ck_assert_msg(rc == row->rc, "\"%s\": rc %d", row->text, rc);
    if (rc == 0)
        ck_assert_msg(value == row->value, "\"%s\": %llu", row->text, (unsigned long long)value);
    else
        ck_assert_msg(err == row->err, "\"%s\": errno %d", row->text, err);
}

static const struct parse_case size_cases[] = {
    {"0", 0, 0, 0},
    {"512", 0, 0, 512},
    {"16k", 0, 0, 16384},
    {"16K", 0, 0, 16384},
    {"10m", 0, 0, 10485760},
    {"10M", 0, 0, 10485760},
    {"1g", 0, 0, 1073741824},
    {"1G", 0, 0, 1073741824},
    {"007k", 0, 0, 7168},
    {"17179869183g", 0, 0, (size_t)17179869183u << 30}, /* the largest whole number of GiB */
    {"18446744073709551615", 0, 0, SIZE_MAX},
    {"17179869184g", -1, ERANGE, 0},
    {"18446744073709551616", -1, ERANGE, 0},
    {"99999999999999999999999k", -1, ERANGE, 0},
    {"", -1, EINVAL, 0},
    {"k", -1, EINVAL, 0},
    {"-1", -1, EINVAL, 0},
    {"+1", -1, EINVAL, 0},
    {" 1", -1, EINVAL, 0},
    {"1 ", -1, EINVAL, 0},
    {"10q", -1, EINVAL, 0},
    {"10kb", -1, EINVAL, 0},
    {"1.5m", -1, EINVAL, 0},
    {"0x10", -1, EINVAL, 0},
    {"99999999999999999999999x", -1, EINVAL, 0},
};

START_TEST(size_table)
{
    const struct parse_case *row = &size_cases[_i];
    size_t value = 12345;
    errno = 0;
    int rc = conf_parse_size(row->text, &value);
    parse_case_check(row, rc, errno, value);
}
END_TEST

static const struct parse_case duration_cases[] = {
    {"0", 0, 0, 0},
    {"30", 0, 0, 30000},
    {"30s", 0, 0, 30000},
    {"500ms", 0, 0, 500},
    {"5m", 0, 0, 300000},
    {"1h", 0, 0, 3600000},
    {"2d", 0, 0, 172800000},
    {"49d", 0, 0, 4233600000u},
    {"4294967295ms", 0, 0, UINT32_MAX},
    {"4294967s", 0, 0, 4294967000u},
    {"4294967296ms", -1, ERANGE, 0},
    {"4294968s", -1, ERANGE, 0},
    {"50d", -1, ERANGE, 0},
    {"99999999999999999999999h", -1, ERANGE, 0},
    {"", -1, EINVAL, 0},
    {"s", -1, EINVAL, 0},
    {"5x", -1, EINVAL, 0},
    {"5S", -1, EINVAL, 0},
    {"5 s", -1, EINVAL, 0},
    {"-5s", -1, EINVAL, 0},
    {"1.5s", -1, EINVAL, 0},
    {"5mss", -1, EINVAL, 0},
    {"1h30m", -1, EINVAL, 0},
    {"5us", -1, EINVAL, 0},
};

START_TEST(duration_table)
{
    const struct parse_case *row = &duration_cases[_i];
    uint32_t ms = 12345;
    errno = 0;
    int rc = conf_parse_duration(row->text, &ms);
    parse_case_check(row, rc, errno, ms);
}
END_TEST

/* ------------------------------------------------------------- bounds */

/* An upstream of `count` servers, each `extra` (e.g. " resolve"), the
 * server lines starting on line 2. */
static char *upstream_text(unsigned count, const char *extra)
{
    size_t size = 64 + count * (48 + strlen(extra));
    char *text = malloc(size);
    ck_assert_ptr_nonnull(text);
    size_t used = (size_t)snprintf(text, size, "upstream u {\n resolver 127.0.0.1;\n");
    for (unsigned i = 0; i < count; i++)
        used += (size_t)snprintf(text + used, size - used, "  server 127.0.0.%u:%u%s;\n",
                                 1 + i / 250, 1000 + i, extra);
    snprintf(text + used, size - used, "}\n");
    return text;
}

/* The servers of an upstream are bounded (a request keeps the ones it
 * tried as bits): one too many is named where it is written, and a
 * resolve server counts for the addresses it may hold at once. */
START_TEST(upstream_server_count_is_bounded)
{
    char *text = upstream_text(1024, "");
    struct conf_config *c = parse_ok(text);
    ck_assert_uint_eq(c->upstreams[0].upstream.server_count, 1024);
    conf_free(c);
    free(text);

    struct conf_error error;
    text = upstream_text(1025, "");
    ck_assert_str_eq(parse_error(text, NULL, &error),
                     "test.conf:1027:10: upstream \"u\" has more than 1024 servers (at most 1024 "
                     "addresses, a server with \"resolve\" counting as its max_addresses, 16 by "
                     "default)");
    free(text);

    text = upstream_text(64, " resolve");
    conf_free(parse_ok(text));
    free(text);
    text = upstream_text(65, " resolve");
    ck_assert_str_eq(parse_error(text, NULL, &error),
                     "test.conf:67:10: upstream \"u\" has more than 1024 servers (at most 1024 "
                     "addresses, a server with \"resolve\" counting as its max_addresses, 16 by "
                     "default)");
    free(text);
}
END_TEST

/* include names config files: a FIFO would block the parser for good, a
 * device would be read forever or as garbage.  Each is refused by name,
 * by a plain name or through a glob, without opening it for long. */
START_TEST(include_refuses_what_is_not_a_regular_file)
{
    struct tmpdir dir;
    make_tmpdir(&dir);
    char path[256], expect[768];
    snprintf(path, sizeof(path), "%s/sites/fifo.conf", dir.path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    struct conf_config *c;
    struct conf_error error;
    /* A blocking open would hang here: the case's timeout bounds it. */
    write_file(&dir, "main.conf", "workers 2;\ninclude sites/fifo.conf;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    ck_assert_ptr_null(c);
    snprintf(expect, sizeof(expect),
             "%s/main.conf:2:9: cannot include \"%s\": a FIFO, not a regular file", dir.path, path);
    ck_assert_str_eq(error.text, expect);

    write_file(&dir, "main.conf", "include sites/*.conf;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    snprintf(expect, sizeof(expect),
             "%s/main.conf:1:9: cannot include \"%s\": a FIFO, not a regular file", dir.path, path);
    ck_assert_str_eq(error.text, expect);

    write_file(&dir, "main.conf", "include /dev/zero;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), -1);
    snprintf(expect, sizeof(expect),
             "%s/main.conf:1:9: cannot include \"/dev/zero\": a character device, not a "
             "regular file",
             dir.path);
    ck_assert_str_eq(error.text, expect);

    /* A symlink to a regular file is a regular file. */
    ck_assert_int_eq(unlink(path), 0);
    write_file(&dir, "real.conf", "workers 3;\n");
    snprintf(expect, sizeof(expect), "%s/real.conf", dir.path);
    ck_assert_int_eq(symlink(expect, path), 0);
    write_file(&dir, "main.conf", "include sites/*.conf;\n");
    ck_assert_int_eq(load(&dir, "main.conf", &c, &error), 0);
    ck_assert_uint_eq(c->workers, 3);
    conf_free(c);
    remove_tmpdir(&dir);
}
END_TEST

/* This machine's memory, as the parser bounds zones by it. */
static uint64_t physical_memory(void)
{
    return (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Sizes that become memory are bounded: a zone by this machine's memory,
 * a buffer by a fixed ceiling, each saying its bound. */
START_TEST(sizes_that_allocate_are_bounded)
{
    struct conf_error error;
    char text[256], expect[512];
    uint64_t memory = physical_memory();
    static const char *const zones[][2] = {
        {"limit_req_zone $binary_remote_addr zone=z:", " rate=1r/s;"},
        {"limit_conn_zone $binary_remote_addr zone=z:", ";"}};
    for (size_t i = 0; i < 2; i++) {
        char size[32];
        snprintf(size, sizeof(size), "%" PRIu64 "k", memory / 1024);
        snprintf(text, sizeof(text), "%s%s%s", zones[i][0], size, zones[i][1]);
        conf_free(parse_ok(text));
        snprintf(size, sizeof(size), "%" PRIu64 "k", memory / 1024 + 1);
        snprintf(text, sizeof(text), "%s%s%s", zones[i][0], size, zones[i][1]);
        snprintf(expect, sizeof(expect),
                 "test.conf:1:%d: zone \"z\" of %s is larger than this machine's memory "
                 "(%" PRIu64 "k)",
                 i == 0 ? 43 : 44, size, memory / 1024);
        ck_assert_str_eq(parse_error(text, NULL, &error), expect);
        snprintf(text, sizeof(text), "%s1000g%s", zones[i][0], zones[i][1]);
        ck_assert_ptr_nonnull(strstr(parse_error(text, NULL, &error), "larger than this machine"));
    }

    conf_free(parse_ok("access_log /tmp/a.log buffer=16m;"));
    ck_assert_str_eq(parse_error("access_log /tmp/a.log buffer=1000g;", NULL, &error),
                     "test.conf:1:23: access_log buffer=1000g is too large (at most 16m)");
    ck_assert_str_eq(parse_error("access_log /tmp/a.log buffer=16385k;", NULL, &error),
                     "test.conf:1:23: access_log buffer=16385k is too large (at most 16m)");

    conf_free(parse_ok("client_max_header_size 16m;"));
    ck_assert_str_eq(parse_error("client_max_header_size 1000g;", NULL, &error),
                     "test.conf:1:24: \"client_max_header_size\" must be between 1 and 16384k, got "
                     "\"1000g\"");
}
END_TEST

#define COUNT(table) ((int)(sizeof(table) / sizeof(table[0])))

/* One comparison of addresses for the parser's duplicate checks and the
 * daemon's socket reuse. */
START_TEST(same_address_whatever_the_spelling)
{
    ck_assert(conf_same_address("*:80", "0.0.0.0:80"));
    ck_assert(conf_same_address("127.0.0.1:8080", "127.0.0.1:8080"));
    ck_assert(conf_same_address("[::1]:80", "[0:0::1]:80"));
    ck_assert(conf_same_address("unix:/tmp/a.sock", "unix:/tmp/a.sock"));
    ck_assert(!conf_same_address("127.0.0.1:80", "127.0.0.1:81"));
    ck_assert(!conf_same_address("127.0.0.1:80", "[::1]:80"));
    /* Unreadable: the same only as the same text. */
    ck_assert(conf_same_address("nonsense", "nonsense"));
    ck_assert(!conf_same_address("nonsense", "127.0.0.1:80"));
}
END_TEST

/* Plain functions all: one process (helpers.h). */
const bool test_forkless = true;

Suite *test_suite(void)
{
    /* The modules that bring their directives (return...), as the daemon
     * registers them before its first parse. */
    modules_init();
    for (size_t m = 0; m < modules_count; m++)
        if (conf_module_register(&modules_list[m]->conf) != 0)
            abort();
    Suite *suite = suite_create("conf");

    TCase *valid = tcase_create("valid");
    tcase_set_timeout(valid, 20);
    tcase_add_test(valid, defaults_when_absent);
    tcase_add_loop_test(valid, documented_defaults_are_the_code_s, 0, COUNT(documented_defaults));
    tcase_add_test(valid, quic_listens);
    tcase_add_test(valid, rewrite_is_its_modules);
    tcase_add_test(valid, if_is_a_jump_in_the_rewrite_lines);
    tcase_add_test(valid, if_in_a_location_is_a_location);
    tcase_add_test(valid, add_header_is_its_modules);
    tcase_add_test(valid, stream_block);
    tcase_add_test(valid, empty_text);
    tcase_add_test(valid, same_address_whatever_the_spelling);
    tcase_add_loop_test(valid, field_table, 0, COUNT(field_cases));
    tcase_add_test(valid, core_strings);
    tcase_add_test(valid, admin_block);
    tcase_add_test(valid, admin_block_access);
    tcase_add_test(valid, full_server);
    tcase_add_test(valid, tls_server);
    tcase_add_test(valid, https_proxy_pass);
    tcase_add_test(valid, servers_told_apart);
    tcase_add_test(valid, addresses_and_proxy_targets_are_numbered);
    tcase_add_test(valid, many_locations_and_servers_parse_quickly);
    tcase_add_test(valid, proxy_upgrade_settings);
    tcase_add_test(valid, proxy_intercept_and_redirect_inherit);
    tcase_add_test(valid, grpc_pass_and_http_version);
    tcase_add_test(valid, access_inheritance);
    tcase_add_test(valid, limit_inheritance);
    tcase_add_test(valid, error_page_levels);
    tcase_add_test(valid, lexer_forms);
    tcase_add_test(valid, default_text_parses);
    tcase_add_test(valid, relative_paths_follow_their_file);
    tcase_add_test(valid, nginx_boilerplate);
    tcase_add_test(valid, nginx_levels);
    tcase_add_loop_test(valid, nginx_table, 0, COUNT(nginx_cases));
    tcase_add_test(valid, nginx_variable_notes);
    tcase_add_loop_test(valid, nginx_corpus, 0, COUNT(corpus_cases));
    tcase_add_loop_test(valid, translate_table, 0, COUNT(translate_cases));
    tcase_add_test(valid, nginx_directives_have_messages);
    tcase_add_loop_test(valid, translate_corpus_round_trip, 0, COUNT(round_trip_cases));
    suite_add_tcase(suite, valid);

    TCase *invalid = tcase_create("invalid");
    tcase_set_timeout(invalid, 20);
    tcase_add_loop_test(invalid, error_table, 0, COUNT(error_cases));
    tcase_add_test(invalid, every_prefix_fails_cleanly);
    tcase_add_loop_test(invalid, every_error_reported, 0, COUNT(each_cases));
    tcase_add_test(invalid, errors_are_capped);
    tcase_add_test(invalid, nul_byte_is_an_error);
    suite_add_tcase(suite, invalid);

    TCase *include = tcase_create("include");
    tcase_set_timeout(include, 20);
    tcase_add_test(include, nested_includes_from_memory);
    tcase_add_test(include, same_file_included_twice);
    tcase_add_loop_test(include, include_error_table, 0, COUNT(include_error_cases));
    tcase_add_test(include, include_depth_is_bounded);
    tcase_add_test(include, glob_includes_in_sorted_order);
    tcase_add_test(include, glob_errors);
    tcase_add_test(include, large_files);
    tcase_add_test(include, include_refuses_what_is_not_a_regular_file);
    suite_add_tcase(suite, include);

    TCase *values = tcase_create("values");
    tcase_set_timeout(values, 20);
    tcase_add_loop_test(values, size_table, 0, COUNT(size_cases));
    tcase_add_loop_test(values, duration_table, 0, COUNT(duration_cases));
    tcase_add_test(values, upstream_server_count_is_bounded);
    tcase_add_test(values, sizes_that_allocate_are_bounded);
    suite_add_tcase(suite, values);
    return suite;
}
