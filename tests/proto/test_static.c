/*
 * test_static.c: the static files module: its directives as conf/ parses
 * them, and a running daemon serving a directory over HTTP/1.1, HTTP/2
 * and TLS: GET and HEAD, conditional requests, single and multipart
 * ranges, directories, index files, try_files to a code, a URI and a
 * named location that proxies, a types file included, every traversal
 * attempt, symbolic links, a sparse file past 4 GB, a file cut short
 * while it is being sent, a server's own files where no location matches
 * (root, index, try_files), $request_filename, and siblings compressed
 * ahead of time (gzip_static, brotli_static, zstd_static), decoded by
 * the coders' own tools.
 */
#include "../daemon.h"
#include "../helpers.h"
#include "conf/config.h"
#include "proto/http/module.h"
#include "proto/modules.h"
#include "proto/static/static_module.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ directives */

static struct conf_config *parse(const char *text, struct conf_error *error)
{
    struct conf_config *config = NULL;
    if (conf_parse("test.conf", text, strlen(text), NULL, NULL, &config, error) != 0)
        return NULL;
    return config;
}

static const struct static_conf *static_of(const void *block)
{
    return conf_module_conf(block, &static_module.conf);
}

START_TEST(directives_and_inheritance)
{
    struct conf_error error;
    struct conf_config *config =
        parse("etag off;\n"
              "server { listen 127.0.0.1:8080; root /srv/www; index a.html b.html; expires 1h;\n"
              "  open_file_cache max=100 inactive=30s;\n"
              "  location / { try_files $uri $uri/ =404; }\n"
              "  location /i/ { alias /data/img/; expires max; if_modified_since before;\n"
              "    disable_symlinks on; etag on; open_file_cache off; }\n"
              "  location /x { expires -1m; index x.html; }\n"
              "  location /p { proxy_pass http://127.0.0.1:9; } }\n",
              &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    const struct conf_server *s = &config->servers[0];
    const struct static_conf *root = static_of(s->locations[0].modules);
    ck_assert_str_eq(root->root, "/srv/www");
    ck_assert_uint_eq(root->index_count, 2);
    ck_assert_str_eq(root->index[1], "b.html");
    ck_assert_uint_eq(root->try_count, 3);
    ck_assert_str_eq(root->try_files[2], "=404");
    ck_assert_int_eq(root->expires, STATIC_EXPIRES_TIME);
    ck_assert_int_eq(root->expires_s, 3600);
    ck_assert(!root->etag);
    ck_assert_int_eq(root->ims, STATIC_IMS_EXACT);
    ck_assert_uint_eq(root->cache.max, 100);
    ck_assert_uint_eq(root->cache.inactive_ms, 30000);
    const struct static_conf *img = static_of(s->locations[1].modules);
    ck_assert_str_eq(img->alias, "/data/img/");
    ck_assert_int_eq(img->expires, STATIC_EXPIRES_MAX);
    ck_assert_int_eq(img->ims, STATIC_IMS_BEFORE);
    ck_assert(img->no_symlinks);
    ck_assert(img->etag);
    ck_assert_uint_eq(img->cache.max, 0);
    const struct static_conf *x = static_of(s->locations[2].modules);
    ck_assert_int_eq(x->expires_s, -60);
    ck_assert_uint_eq(x->index_count, 1);
    conf_free(config);
}
END_TEST

/* Where no root is needed: a location another module answers, with
 * an if's location in it, and one of rewrites only. */
START_TEST(no_root_needed)
{
    struct conf_error error;
    struct conf_config *config =
        parse("server { listen 127.0.0.1:1;\n"
              "  location /p/ { proxy_pass http://127.0.0.1:9; if ($arg_a) { add_header A b; } }\n"
              "  location /w/ { rewrite ^ /p/ last; }\n"
              "  location /i/ { if ($arg_a) { return 204; } } }\n",
              &error);
    ck_assert_msg(config != NULL, "%s", error.text);
    conf_free(config);
}
END_TEST

START_TEST(directive_errors)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"server { listen 127.0.0.1:1; location / { expires soon; } }",
         "test.conf:1:51: invalid value \"soon\" (expected off, epoch, max or a time)"},
        {"server { listen 127.0.0.1:1; location / { root /a; try_files $uri x; } }",
         "test.conf:1:67: invalid fallback \"x\" (expected =CODE, @name or a URI)"},
        {"server { listen 127.0.0.1:1; location / { root /a; try_files $uri =99; } }",
         "test.conf:1:67: invalid code \"=99\" (expected =200 to =599)"},
        {"server { listen 127.0.0.1:1; location / { index ../x; } }",
         "test.conf:1:49: invalid index \"../x\" (a file name, without '/' or variables)"},
        {"server { listen 127.0.0.1:1; location / { root /a; open_file_cache max=0; } }",
         "test.conf:1:72: open_file_cache max must be from 1 to 1000000, got \"0\""},
        {"server { listen 127.0.0.1:1; location / { root /a; open_file_cache big; } }",
         "test.conf:1:68: invalid parameter \"big\" (expected max=N, inactive=TIME)"},
        {"server { listen 127.0.0.1:1; location / { root /a; if_modified_since never; } }",
         "test.conf:1:70: unknown if_modified_since \"never\" (expected exact, before or off)"},
        {"server { listen 127.0.0.1:1; location ~ ^/(.*)$ { alias /a/$1; try_files $uri =404; } }",
         "test.conf:1:57: \"alias\" in a regex location cannot be combined with \"try_files\""},
        {"server { listen 127.0.0.1:1; location / { } }",
         "test.conf:1:30: location \"/\" serves files (it has no \"return\", \"proxy_pass\" or "
         "\"rewrite\") but no \"root\" is set for it, in it, its server or at top level"},
        {"server { listen 127.0.0.1:1; location / { index a.html; } }",
         "test.conf:1:30: location \"/\" serves files (it has no \"return\", \"proxy_pass\" or "
         "\"rewrite\") but no \"root\" is set for it, in it, its server or at top level"},
        {"server { listen 127.0.0.1:1; alias /a; }",
         "test.conf:1:30: \"alias\" is not allowed in server (it belongs in location)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct conf_error error;
        ck_assert_ptr_null(parse(cases[i].text, &error));
        ck_assert_str_eq(error.text, cases[i].message);
    }
}
END_TEST

/* ------------------------------------------------------------- the daemon */

/* The files of a case: www/ is the root; secret.txt is beside it. */
static char www[PATH_MAX];

static void file_at(const char *name, const char *text)
{
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), name);
    test_write_file(path, text);
}

static void make_tree(void)
{
    char path[PATH_MAX], target[PATH_MAX];
    test_daemon_file(www, sizeof(www), "www");
    ck_assert_int_eq(mkdir(www, 0755), 0);
    const char *dirs[] = {"www/sub", "www/empty", "www/al"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        test_daemon_file(path, sizeof(path), dirs[i]);
        ck_assert_int_eq(mkdir(path, 0755), 0);
    }
    file_at("www/a.txt", "hello, world\n");
    file_at("www/page.html", "<p>page</p>\n");
    file_at("www/sub/index.html", "sub index\n");
    file_at("www/al/in.txt", "in alias\n");
    file_at("www/f.tst", "typed\n");
    file_at("secret.txt", "SECRET\n");
    file_at("types.conf", "types {\n    text/x-corral-test tst;\n    text/html html;\n}\n");
    test_daemon_file(path, sizeof(path), "www/link.txt");
    test_daemon_file(target, sizeof(target), "secret.txt");
    ck_assert_int_eq(symlink(target, path), 0);
    test_daemon_file(path, sizeof(path), "www/locked.txt");
    test_write_file(path, "locked\n");
    ck_assert_int_eq(chmod(path, 0), 0);
}

static void start(struct test_daemon *d, const char *top, const char *listen_flags,
                  const char *server)
{
    make_tree();
    test_daemon_init(d, "corral");
    char conf[4 * PATH_MAX + 8192];
    int n = snprintf(conf, sizeof(conf),
                     "workers 1;\nadmin { listen 127.0.0.2:0; }\n%s\n"
                     "server {\n    listen 127.0.0.1:0%s;\n    root %s;\n%s\n}\n",
                     top, listen_flags, www, server);
    ck_assert_int_lt(n, (int)sizeof(conf));
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

/* Sends `request` on a new connection and reads until the server closes. */
static size_t exchange(int port, const char *request, char *out, size_t size)
{
    int fd = test_connect(port);
    test_send_all(fd, request, strlen(request));
    size_t len = test_recv_all(fd, out, size - 1);
    out[len] = '\0';
    close(fd);
    return len;
}

/* `method` `path` with extra header lines, asking to close: the status. */
static unsigned ask(int port, const char *method, const char *path, const char *headers, char *out,
                    size_t size)
{
    char request[2048];
    snprintf(request, sizeof(request), "%s %s HTTP/1.1\r\nHost: h\r\n%sConnection: close\r\n\r\n",
             method, path, headers);
    exchange(port, request, out, size);
    unsigned status = 0;
    sscanf(out, "HTTP/1.1 %u", &status);
    return status;
}

static const char *body_of(const char *response)
{
    const char *end = strstr(response, "\r\n\r\n");
    return end != NULL ? end + 4 : "";
}

/* The value of header `name` in the head of `response`, into `out`. */
static bool header_of(const char *response, const char *name, char *out, size_t size)
{
    const char *end = strstr(response, "\r\n\r\n");
    size_t n = strlen(name);
    for (const char *p = strstr(response, "\r\n"); p != NULL && p < end;
         p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
            const char *v = p + 2 + n + 1;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            snprintf(out, size, "%.*s", (int)(e - v), v);
            return true;
        }
    }
    return false;
}

START_TEST(get_head_and_methods)
{
    struct test_daemon d;
    start(&d, "", "", "    location / { expires 1h; }");
    char out[4096], v[256];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    ck_assert(header_of(out, "Content-Type", v, sizeof(v)));
    ck_assert_str_eq(v, "text/plain");
    ck_assert(header_of(out, "Content-Length", v, sizeof(v)));
    ck_assert_str_eq(v, "13");
    ck_assert(header_of(out, "Accept-Ranges", v, sizeof(v)));
    ck_assert(header_of(out, "Cache-Control", v, sizeof(v)));
    ck_assert_str_eq(v, "max-age=3600");
    ck_assert(header_of(out, "Expires", v, sizeof(v)));
    char etag[64], lm[64];
    ck_assert(header_of(out, "ETag", etag, sizeof(etag)));
    ck_assert(header_of(out, "Last-Modified", lm, sizeof(lm)));
    struct stat st;
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/a.txt");
    ck_assert_int_eq(stat(path, &st), 0);
    char want[64];
    snprintf(want, sizeof(want), "\"%llx-%llx\"", (unsigned long long)st.st_mtime,
             (unsigned long long)st.st_size);
    ck_assert_str_eq(etag, want);

    ck_assert_uint_eq(ask(d.port, "HEAD", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "");
    ck_assert(header_of(out, "Content-Length", v, sizeof(v)));
    ck_assert_str_eq(v, "13");
    ck_assert_uint_eq(ask(d.port, "GET", "/page.html", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "Content-Type", v, sizeof(v)));
    ck_assert_str_eq(v, "text/html");
    ck_assert_uint_eq(ask(d.port, "POST", "/a.txt", "Content-Length: 0\r\n", out, sizeof(out)),
                      405);
    ck_assert(header_of(out, "Allow", v, sizeof(v)));
    ck_assert_str_eq(v, "GET, HEAD");
    ck_assert_uint_eq(ask(d.port, "GET", "/missing", "", out, sizeof(out)), 404);
    ck_assert_uint_eq(ask(d.port, "GET", "/locked.txt", "", out, sizeof(out)),
                      geteuid() == 0 ? 200 : 403);
    /* two on one connection: the body's length frames it */
    char pair[4096];
    exchange(d.port,
             "GET /a.txt HTTP/1.1\r\nHost: h\r\n\r\n"
             "GET /page.html HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
             pair, sizeof(pair));
    ck_assert_ptr_nonnull(strstr(pair, "hello, world\nHTTP/1.1 200 OK\r\n"));
    ck_assert_ptr_nonnull(strstr(pair, "\r\n\r\n<p>page</p>\n"));
    test_daemon_stop(&d);
}
END_TEST

START_TEST(conditional_requests)
{
    struct test_daemon d;
    start(&d, "", "", "    location / { index index.html; }");
    char out[4096], etag[64], lm[64], h[256];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "ETag", etag, sizeof(etag)));
    ck_assert(header_of(out, "Last-Modified", lm, sizeof(lm)));
    snprintf(h, sizeof(h), "If-None-Match: %s\r\n", etag);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", h, out, sizeof(out)), 304);
    ck_assert_str_eq(body_of(out), "");
    char v[64];
    ck_assert(header_of(out, "ETag", v, sizeof(v)));
    ck_assert_str_eq(v, etag);
    ck_assert_uint_eq(ask(d.port, "HEAD", "/a.txt", h, out, sizeof(out)), 304);
    ck_assert_uint_eq(
        ask(d.port, "GET", "/a.txt", "If-None-Match: \"other\"\r\n", out, sizeof(out)), 200);
    snprintf(h, sizeof(h), "If-Modified-Since: %s\r\n", lm);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", h, out, sizeof(out)), 304);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt",
                          "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n", out, sizeof(out)),
                      200);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "If-Match: \"other\"\r\n", out, sizeof(out)),
                      412);
    snprintf(h, sizeof(h), "If-Match: %s\r\n", etag);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", h, out, sizeof(out)), 200);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt",
                          "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n", out,
                          sizeof(out)),
                      412);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(ranges)
{
    struct test_daemon d;
    start(&d, "", "", "    location / { index index.html; }");
    char out[4096], v[256];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "Range: bytes=0-4\r\n", out, sizeof(out)), 206);
    ck_assert_str_eq(body_of(out), "hello");
    ck_assert(header_of(out, "Content-Range", v, sizeof(v)));
    ck_assert_str_eq(v, "bytes 0-4/13");
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "Range: bytes=-6\r\n", out, sizeof(out)), 206);
    ck_assert_str_eq(body_of(out), "world\n");
    /* two ranges: multipart/byteranges, each part with its range */
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "Range: bytes=0-1,7-11\r\n", out, sizeof(out)),
                      206);
    ck_assert(header_of(out, "Content-Type", v, sizeof(v)));
    ck_assert_int_eq(strncmp(v, "multipart/byteranges; boundary=", 31), 0);
    char boundary[256];
    snprintf(boundary, sizeof(boundary), "%s", v + 31);
    char want[1024];
    snprintf(want, sizeof(want),
             "\r\n--%s\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/13\r\n\r\nhe"
             "\r\n--%s\r\nContent-Type: text/plain\r\nContent-Range: bytes 7-11/13\r\n\r\nworld"
             "\r\n--%s--\r\n",
             boundary, boundary, boundary);
    ck_assert_str_eq(body_of(out), want);
    ck_assert(header_of(out, "Content-Length", v, sizeof(v)));
    ck_assert_uint_eq(strtoul(v, NULL, 10), strlen(want));
    /* overlapping ranges come once */
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "Range: bytes=0-3,2-4\r\n", out, sizeof(out)),
                      206);
    ck_assert_str_eq(body_of(out), "hello");
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "Range: bytes=13-20\r\n", out, sizeof(out)),
                      416);
    ck_assert(header_of(out, "Content-Range", v, sizeof(v)));
    ck_assert_str_eq(v, "bytes */13");
    /* a malformed bytes range: 416 as nginx; another unit: ignored */
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "Range: bytes=abc\r\n", out, sizeof(out)), 416);
    ck_assert(header_of(out, "Content-Range", v, sizeof(v)));
    ck_assert_str_eq(v, "bytes */13");
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "Range: items=0-4\r\n", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    /* too many ranges: the whole file */
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt",
                          "Range: bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9,10-10,11-11,12-12,"
                          "0-0,1-1,2-2,3-3\r\n",
                          out, sizeof(out)),
                      200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    /* If-Range that no longer matches: the whole file */
    ck_assert_uint_eq(
        ask(d.port, "GET", "/a.txt", "Range: bytes=0-4\r\nIf-Range: \"old\"\r\n", out, sizeof(out)),
        200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(directories_and_index)
{
    struct test_daemon d;
    start(&d, "", "",
          "    location / { index index.html; }\n    location /empty { absolute_redirect off; }");
    char out[4096], v[256], want[256];
    /* absolute, as nginx's absolute_redirect: the Host, the port */
    ck_assert_uint_eq(ask(d.port, "GET", "/sub?x=1", "", out, sizeof(out)), 301);
    ck_assert(header_of(out, "Location", v, sizeof(v)));
    snprintf(want, sizeof(want), "http://h:%d/sub/?x=1", d.port);
    ck_assert_str_eq(v, want);
    ck_assert_uint_eq(ask(d.port, "GET", "/empty", "", out, sizeof(out)), 301);
    ck_assert(header_of(out, "Location", v, sizeof(v)));
    ck_assert_str_eq(v, "/empty/");
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "sub index\n");
    ck_assert(header_of(out, "Content-Type", v, sizeof(v)));
    ck_assert_str_eq(v, "text/html");
    ck_assert_uint_eq(ask(d.port, "GET", "/empty/", "", out, sizeof(out)), 403);
    ck_assert_uint_eq(ask(d.port, "GET", "/nodir/", "", out, sizeof(out)), 404);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt/", "", out, sizeof(out)), 404);
    /* only regular files: a FIFO is refused, and nothing waits on it */
    char fifo[PATH_MAX];
    test_daemon_file(fifo, sizeof(fifo), "www/fifo");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    ck_assert_uint_eq(ask(d.port, "GET", "/fifo", "", out, sizeof(out)), 403);
    test_daemon_stop(&d);
}
END_TEST

/* nginx's absolute_redirect, port_in_redirect, server_name_in_redirect
 * on corral's own redirects (return, rewrite; static files above). */
START_TEST(redirects_made_absolute)
{
    struct test_daemon d;
    start(&d, "", "",
          "    server_name Site.Example www.site.example;\n"
          "    location = /r1 { return 301 /to; }\n"
          "    location = /r2 { absolute_redirect off; return 301 /to; }\n"
          "    location = /r3 { port_in_redirect off; return 302 /to?q; }\n"
          "    location = /r4 { server_name_in_redirect on; return 301 /to; }\n"
          "    location = /r5 { return 301 http://else.example/x; }\n"
          "    location = /r6 { rewrite ^ /to redirect; }\n"
          "    location /off { absolute_redirect off; return 307 /to; }\n");
    char out[4096], v[256], want[256];
    static const struct {
        const char *path, *host, *location; /* "%d": the port */
    } cases[] = {
        {"/r1", "Host: h\r\n", "http://h:%d/to"},
        {"/r1", "Host: MiXed.Example:99\r\n", "http://mixed.example:%d/to"},
        {"/r2", "Host: h\r\n", "/to"},
        {"/r3", "Host: h\r\n", "http://h/to?q"},
        {"/r4", "Host: h\r\n", "http://Site.Example:%d/to"},
        {"/r5", "Host: h\r\n", "http://else.example/x"},
        {"/r6?a=1", "Host: h\r\n", "http://h:%d/to?a=1"},
        {"/off/r7", "Host: h\r\n", "/to"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char request[512];
        snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\n%sConnection: close\r\n\r\n",
                 cases[i].path, cases[i].host);
        exchange(d.port, request, out, sizeof(out));
        ck_assert_msg(header_of(out, "Location", v, sizeof(v)), "%s: %s", cases[i].path, out);
        const char *mark = strstr(cases[i].location, "%d");
        if (mark != NULL)
            snprintf(want, sizeof(want), "%.*s%d%s", (int)(mark - cases[i].location),
                     cases[i].location, d.port, mark + 2);
        else
            snprintf(want, sizeof(want), "%s", cases[i].location);
        ck_assert_str_eq(v, want);
    }
    /* no Host (HTTP/1.0): the address the connection came to */
    exchange(d.port, "GET /r1 HTTP/1.0\r\n\r\n", out, sizeof(out));
    ck_assert(header_of(out, "Location", v, sizeof(v)));
    snprintf(want, sizeof(want), "http://127.0.0.1:%d/to", d.port);
    ck_assert_str_eq(v, want);
    test_daemon_stop(&d);
}
END_TEST

/* A test_backend serve() that answers every request with "backend
 * page\n". */
static void backend_page(int fd, void *data)
{
    (void)data;
    char buf[4096];
    (void)!recv(fd, buf, sizeof(buf), 0);
    static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"
                                 "Connection: close\r\n\r\nbackend page\n";
    (void)!send(fd, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
}

START_TEST(try_files_fallbacks)
{
    struct test_backend b;
    test_backend_start(&b, "127.0.0.1", 0, backend_page, NULL);
    char server[1024];
    snprintf(server, sizeof(server),
             "    location / { try_files $uri $uri/ =404; }\n"
             "    location /app/ { try_files $uri @backend; }\n"
             "    location /u/ { try_files /nothing /page.html; }\n"
             "    location /loop/ { try_files /nothing /loop/x; }\n"
             "    location @backend { proxy_pass http://127.0.0.1:%d; }",
             b.port);
    struct test_daemon d;
    start(&d, "", "", server);
    char out[4096];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "sub index\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/nothing", "", out, sizeof(out)), 404);
    ck_assert_uint_eq(ask(d.port, "GET", "/app/x", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "backend page\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/u/x", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "<p>page</p>\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/loop/x", "", out, sizeof(out)), 500);
    test_daemon_stop(&d);
    (void)test_backend_stop(&b, TEST_WAIT_MS);
}
END_TEST

/* nginx's server-level configuration: a request that no location
 * takes is served from the server's root, with its try_files; an empty
 * location serves the root it inherits. */
START_TEST(server_level_files)
{
    struct test_daemon d;
    start(&d, "", "",
          "    index page.html;\n"
          "    try_files $uri $uri/ /a.txt;\n"
          "    location = /e/ { }\n"
          "    location /sub/ { if ($arg_a) { add_header X-A yes; } }\n"
          "    location /r/ { return 204; }");
    char out[4096];
    ck_assert_uint_eq(ask(d.port, "GET", "/", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "<p>page</p>\n");
    /* a directory without page.html, its index here */
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/", "", out, sizeof(out)), 403);
    ck_assert_uint_eq(ask(d.port, "GET", "/page.html", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "<p>page</p>\n");
    /* the server's try_files: its fallback URI, which no location takes */
    ck_assert_uint_eq(ask(d.port, "GET", "/nothing", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/r/x", "", out, sizeof(out)), 204);
    /* the empty location: the root, and no try_files (nginx's is the
     * server's own, not inherited) */
    ck_assert_uint_eq(ask(d.port, "GET", "/e/", "", out, sizeof(out)), 404);
    /* an if's location serves files as its location does */
    char v[64];
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/index.html?a=1", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "sub index\n");
    ck_assert(header_of(out, "X-A", v, sizeof(v)));
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/index.html", "", out, sizeof(out)), 200);
    ck_assert(!header_of(out, "X-A", v, sizeof(v)));
    test_daemon_stop(&d);
}
END_TEST

/* root at top level, a server with no location at all */
START_TEST(server_without_locations)
{
    struct test_daemon d;
    char out[4096];
    make_tree();
    test_daemon_init(&d, "corral");
    char conf[2 * PATH_MAX + 256];
    int n = snprintf(conf, sizeof(conf),
                     "workers 1;\nadmin { listen 127.0.0.2:0; }\nroot %s;\n"
                     "server { listen 127.0.0.1:0; }\n",
                     www);
    ck_assert_int_lt(n, (int)sizeof(conf));
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "sub index\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_uint_eq(ask(d.port, "GET", "/missing", "", out, sizeof(out)), 404);
    test_daemon_stop(&d);
}
END_TEST

/* $request_filename: root or alias and the URI, for -f and in values. */
START_TEST(request_filename)
{
    struct test_daemon d;
    test_daemon_file(www, sizeof(www), "www"); /* make_tree() makes it */
    char server[2 * PATH_MAX + 512];
    int n = snprintf(server, sizeof(server),
                     "    location / { if (!-f $request_filename) { return 418; }\n"
                     "        add_header X-File $request_filename; }\n"
                     "    location /al/ { alias %s/al/; add_header X-File $request_filename; }\n"
                     "    location /p/ { add_header X-File \"[$request_filename]\"; return 200; }",
                     www);
    ck_assert_int_lt(n, (int)sizeof(server));
    start(&d, "", "", server);
    char out[4096], v[PATH_MAX + 16], want[PATH_MAX + 16];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "X-File", v, sizeof(v)));
    snprintf(want, sizeof(want), "%s/a.txt", www);
    ck_assert_str_eq(v, want);
    /* decoded and normalised, as the file's path is */
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/../%61.txt", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "X-File", v, sizeof(v)));
    ck_assert_str_eq(v, want);
    ck_assert_uint_eq(ask(d.port, "GET", "/none.txt", "", out, sizeof(out)), 418);
    ck_assert_uint_eq(ask(d.port, "GET", "/sub", "", out, sizeof(out)), 418); /* a directory */
    ck_assert_uint_eq(ask(d.port, "GET", "/al/in.txt", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "X-File", v, sizeof(v)));
    snprintf(want, sizeof(want), "%s/al/in.txt", www);
    ck_assert_str_eq(v, want);
    /* where another module answers, no file: empty */
    ck_assert_uint_eq(ask(d.port, "GET", "/p/x", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "X-File", v, sizeof(v)));
    ck_assert_str_eq(v, "[]");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(types_file_included)
{
    struct test_daemon d;
    char top[PATH_MAX + 64];
    char types[PATH_MAX];
    test_daemon_file(types, sizeof(types), "types.conf");
    snprintf(top, sizeof(top), "include %s;\ndefault_type application/octet-stream;", types);
    start(&d, top, "", "    location / { index index.html; }");
    char out[4096], v[256];
    ck_assert_uint_eq(ask(d.port, "GET", "/f.tst", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "Content-Type", v, sizeof(v)));
    ck_assert_str_eq(v, "text/x-corral-test");
    /* not in the file: default_type, the built-in map is not consulted */
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "Content-Type", v, sizeof(v)));
    ck_assert_str_eq(v, "application/octet-stream");
    test_daemon_stop(&d);
}
END_TEST

START_TEST(nothing_outside_the_root)
{
    struct test_daemon d;
    test_daemon_file(www, sizeof(www), "www"); /* make_tree() makes it */
    char server[3 * PATH_MAX + 256];
    int n = snprintf(server, sizeof(server),
                     "    location / { index index.html; }\n"
                     "    location /al { alias %s/al/; }\n"
                     "    location /safe/ { disable_symlinks on; alias %s/; }\n"
                     "    location ~ ^/rx/(.*)$ { alias %s/al/$1; }",
                     www, www, www);
    ck_assert_int_lt(n, (int)sizeof(server));
    start(&d, "", "", server);
    static const char *const attempts[] = {
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/sub/../../secret.txt",
        "/sub/%2e%2e/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/sub%2f..%2f..%2fsecret.txt",
        "/a.txt%00",
        "/..\\secret.txt",
        "/%5c..%5csecret.txt",
        "/al../secret.txt",
        "/al/../../secret.txt",
        "/al/%2e%2e/%2e%2e/secret.txt",
        "/safe/link.txt",
        "/safe/../secret.txt",
        "/rx/../../secret.txt",
        "/rx/%2e%2e/%2e%2e/secret.txt",
        "/rx/..%2f..%2fsecret.txt",
        "/rx/%2e%2e%2f%2e%2e%2fsecret.txt",
    };
    char out[4096];
    for (size_t i = 0; i < sizeof(attempts) / sizeof(attempts[0]); i++) {
        unsigned status = ask(d.port, "GET", attempts[i], "", out, sizeof(out));
        ck_assert_msg(status >= 400 && status < 500, "%s: %u", attempts[i], status);
        ck_assert_msg(strstr(out, "SECRET") == NULL, "%s served the secret", attempts[i]);
    }
    /* The link under disable_symlinks: refused as forbidden, and served
     * where links are followed, as nginx. */
    ck_assert_uint_eq(ask(d.port, "GET", "/safe/link.txt", "", out, sizeof(out)), 403);
    ck_assert_uint_eq(ask(d.port, "GET", "/safe/a.txt", "", out, sizeof(out)), 200);
    ck_assert_uint_eq(ask(d.port, "GET", "/link.txt", "", out, sizeof(out)), 200);
    ck_assert_uint_eq(ask(d.port, "GET", "/al/in.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "in alias\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/rx/in.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "in alias\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/rx/%69n.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "in alias\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/../a.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    test_daemon_stop(&d);
}
END_TEST

#define BIG_SIZE (5ull << 30) /* past 4 GB */

START_TEST(sparse_file_past_4gb)
{
    struct test_daemon d;
    start(&d, "", " http2", "    location / { index index.html; }");
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/big.bin");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)BIG_SIZE), 0);
    ck_assert_int_eq(pwrite(fd, "THE-END\n", 8, (off_t)(BIG_SIZE - 8)), 8);
    ck_assert_int_eq(pwrite(fd, "AT-4GB", 6, (off_t)(4ull << 30)), 6);
    close(fd);
    char out[4096], v[256];
    ck_assert_uint_eq(ask(d.port, "HEAD", "/big.bin", "", out, sizeof(out)), 200);
    ck_assert(header_of(out, "Content-Length", v, sizeof(v)));
    ck_assert_str_eq(v, "5368709120");
    ck_assert_uint_eq(ask(d.port, "GET", "/big.bin", "Range: bytes=-8\r\n", out, sizeof(out)), 206);
    ck_assert_str_eq(body_of(out), "THE-END\n");
    ck_assert(header_of(out, "Content-Range", v, sizeof(v)));
    ck_assert_str_eq(v, "bytes 5368709112-5368709119/5368709120");
    ck_assert_uint_eq(
        ask(d.port, "GET", "/big.bin", "Range: bytes=4294967296-4294967301\r\n", out, sizeof(out)),
        206);
    ck_assert_str_eq(body_of(out), "AT-4GB");
    /* HTTP/2 reads the file (no sendfile) at 64-bit offsets too: 100,001
     * bytes across the 4 GB mark, in DATA frames. */
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 --http2-prior-knowledge -r 4294900000-4295000000 "
             "http://127.0.0.1:%d/big.bin | /usr/bin/python3 -c 'import sys; "
             "d = sys.stdin.buffer.read(); print(len(d), d[67296:67302].decode(), d.count(0))'",
             d.port);
    ck_assert_int_eq(test_run(cmd, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "100001 AT-4GB 99995\n");
    test_daemon_stop(&d);
}
END_TEST

/* A file cut short while it is sent: the response stops short of its
 * length and the connection ends; no other byte stands in. */
/* Asks for `uri`, a sparse file of `size` bytes at `path`, reads the
 * head, cuts the file to 1 MiB, and reads on: the body stops short and
 * the connection ends (reset or closed), with only the file's zeros. */
static void cut_while_sent(int port, const char *path, const char *uri)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    const off_t size = 256 << 20, kept = 1 << 20;
    ck_assert_int_eq(ftruncate(fd, size), 0); /* sparse: zeros */
    int c = test_connect(port);
    char request[256];
    snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
             uri);
    test_send_all(c, request, strlen(request));
    /* the head, and whatever came with it */
    char buf[65536];
    ssize_t n = recv(c, buf, sizeof(buf), 0);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(strncmp(buf, "HTTP/1.1 200 ", 13), 0);
    ck_assert_ptr_nonnull(strstr(buf, "Content-Length: 268435456\r\n"));
    ck_assert_int_eq(ftruncate(fd, kept), 0);
    close(fd);
    char *end = strstr(buf, "\r\n\r\n");
    ck_assert_ptr_nonnull(end);
    uint64_t body = (uint64_t)(n - (end + 4 - buf));
    for (;;) {
        n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            ck_assert_int_eq(buf[i], 0);
        body += (uint64_t)n;
    }
    close(c);
    ck_assert_msg(body < (uint64_t)size, "%s: %llu bytes", uri, (unsigned long long)body);
}

START_TEST(file_truncated_while_sent)
{
    test_daemon_file(www, sizeof(www), "www"); /* make_tree() makes it */
    char server[PATH_MAX + 128];
    snprintf(server, sizeof(server),
             "    location / { index index.html; }\n"
             "    location /copy/ { alias %s/; sendfile off; }",
             www);
    struct test_daemon d;
    start(&d, "", "", server);
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/shrinks.bin");
    cut_while_sent(d.port, path, "/shrinks.bin");      /* sendfile(2) */
    cut_while_sent(d.port, path, "/copy/shrinks.bin"); /* pread() */
    /* the daemon goes on serving */
    char out[4096];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    test_daemon_stop(&d);
}
END_TEST

/* A file of `size` bytes of a pattern in www/, its name in `name`. */
static void patterned(const char *name, size_t size)
{
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < size; i++)
        fputc('a' + (int)(i * 7 % 26), f);
    fclose(f);
}

START_TEST(http2_and_ranges)
{
    struct test_daemon d;
    start(&d, "", " http2", "    location / { index index.html; }");
    patterned("www/p.bin", 3 << 20); /* more than the stream's window */
    char cmd[PATH_MAX * 3], out[512], path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/p.bin");
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 --http2-prior-knowledge http://127.0.0.1:%d/p.bin | "
             "cmp - %s && echo same",
             d.port, path);
    ck_assert_int_eq(test_run(cmd, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "same\n");
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 --http2-prior-knowledge -r 26-51 -w ' %%{http_code} "
             "%%{http_version}' http://127.0.0.1:%d/p.bin",
             d.port);
    test_run(cmd, out, sizeof(out));
    ck_assert_str_eq(out, "ahovcjqxelszgnubipwdkryfmt 206 2");
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 --http2-prior-knowledge -I -w '%%{http_code}' "
             "http://127.0.0.1:%d/a.txt | tr -d '\\r' | grep -i -e '^content-length' -e '^2'",
             d.port);
    test_run(cmd, out, sizeof(out));
    ck_assert_str_eq(out, "content-length: 13\n200\n");
    test_daemon_stop(&d);
}
END_TEST

/* Over HTTP/2 a file cut short resets its stream: the client holds the
 * window shut until the response began, cuts the file, opens the window
 * and must see RST_STREAM, never the stream's end. */
START_TEST(http2_file_truncated_resets_the_stream)
{
    struct test_daemon d;
    start(&d, "", " http2", "    location / { index index.html; }");
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/shrinks.bin");
    int file = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(file, 0);
    ck_assert_int_eq(ftruncate(file, 256 << 20), 0);
    /* The preface, empty SETTINGS, an ACK, and GET /shrinks.bin (HPACK:
     * :method GET, :scheme http, :path, :authority a). */
    static const char request[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\0\0\0\4\0\0\0\0\0"
                                  "\0\0\0\4\1\0\0\0\0"
                                  "\0\0\x13\1\5\0\0\0\1"
                                  "\x82\x86\x04\x0c/shrinks.bin\x41\1a";
    static const char windows[] = "\0\0\4\x08\0\0\0\0\0\x7f\xff\0\0"
                                  "\0\0\4\x08\0\0\0\0\1\x7f\xff\0\0";
    int fd = test_connect(d.port);
    test_send_all(fd, request, sizeof(request) - 1);
    bool headers = false, reset = false, ended = false;
    unsigned char frame[9];
    static unsigned char payload[1 << 16];
    uint64_t start_ms = test_now_ms();
    while (!reset && !ended && test_now_ms() - start_ms < 10000 &&
           test_recv_all(fd, frame, 9) == 9) {
        size_t len = (size_t)frame[0] << 16 | (size_t)frame[1] << 8 | frame[2];
        ck_assert_uint_le(len, sizeof(payload));
        ck_assert_uint_eq(test_recv_all(fd, payload, len), len);
        unsigned sid = (unsigned)(frame[5] & 0x7f) << 24 | (unsigned)frame[6] << 16 |
                       (unsigned)frame[7] << 8 | frame[8];
        if (sid != 1)
            continue;
        if (frame[3] == 1 && !headers) { /* the response began: cut, then open */
            headers = true;
            ck_assert_int_eq(ftruncate(file, 1), 0);
            test_send_all(fd, windows, sizeof(windows) - 1);
        }
        if (frame[3] == 0 && (frame[4] & 1) != 0)
            ended = true;
        if (frame[3] == 3)
            reset = true;
    }
    close(fd);
    close(file);
    ck_assert(headers);
    ck_assert_msg(reset && !ended, "reset %d, ended %d", reset, ended);
    char out[4096];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(over_tls)
{
    char dir[PATH_MAX], cmd[PATH_MAX * 3], out[512];
    snprintf(dir, sizeof(dir), "%s", test_daemon_dir());
    snprintf(cmd, sizeof(cmd),
             "cd %s && printf '[req]\\ndistinguished_name = dn\\n[dn]\\n' > o.cnf && "
             "OPENSSL_CONF=o.cnf openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
             "-nodes -keyout k.pem -out c.pem -subj /CN=localhost -days 1 >/dev/null 2>&1",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    char server[PATH_MAX * 2 + 128];
    snprintf(server, sizeof(server),
             "    tls_certificate %s/c.pem;\n    tls_certificate_key %s/k.pem;\n"
             "    location / { index index.html; }",
             dir, dir);
    struct test_daemon d;
    start(&d, "", " tls", server);
    patterned("www/p.bin", 1 << 20);
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/p.bin");
    snprintf(cmd, sizeof(cmd),
             "curl -sk --max-time 20 https://127.0.0.1:%d/p.bin | cmp - %s && echo same", d.port,
             path);
    ck_assert_int_eq(test_run(cmd, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "same\n");
    snprintf(cmd, sizeof(cmd),
             "curl -sk --max-time 20 -r 0-1,26-27 https://127.0.0.1:%d/p.bin | grep -c "
             "'^Content-Range: bytes'",
             d.port);
    test_run(cmd, out, sizeof(out));
    ck_assert_str_eq(out, "2\n");
    /* the directory's redirect names the scheme the client used */
    snprintf(cmd, sizeof(cmd),
             "curl -sk --max-time 20 -o /dev/null -w '%%{redirect_url}' "
             "https://127.0.0.1:%d/sub",
             d.port);
    test_run(cmd, out, sizeof(out));
    char want[128];
    snprintf(want, sizeof(want), "https://127.0.0.1:%d/sub/", d.port);
    ck_assert_str_eq(out, want);
    test_daemon_stop(&d);
}
END_TEST

/* ------------------------------------------------- precompressed files */

/* Runs `command` through the shell; its exit status. */
static int shell(const char *command)
{
    int status = system(command);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* www/NAME, its text, and its siblings made by the coders' own tools. */
static void with_siblings(const char *name)
{
    char rel[64], path[PATH_MAX], cmd[8 * PATH_MAX];
    snprintf(rel, sizeof(rel), "www/%s", name);
    test_daemon_file(path, sizeof(path), rel);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "line %d of a file compressed ahead of time\n", i);
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "gzip -9 -c '%s' > '%s.gz' && brotli -c '%s' > '%s.br' && zstd -q -c '%s' > '%s.zst'",
             path, path, path, path, path, path);
    ck_assert_int_eq(shell(cmd), 0);
}

/* GET (or `method`) `uri` with `headers`: the status, the head in `head`,
 * the body in www/../NAME.got (for the decoders). */
static unsigned fetch_to(int port, const char *method, const char *uri, const char *headers,
                         char *head, size_t head_size, const char *name, size_t *body_len)
{
    static char out[1 << 20];
    char request[1024];
    snprintf(request, sizeof(request), "%s %s HTTP/1.1\r\nHost: h\r\n%sConnection: close\r\n\r\n",
             method, uri, headers);
    size_t len = exchange(port, request, out, sizeof(out));
    const char *end = strstr(out, "\r\n\r\n");
    ck_assert_ptr_nonnull(end);
    size_t head_len = (size_t)(end + 4 - out);
    ck_assert_uint_lt(head_len, head_size);
    memcpy(head, out, head_len);
    head[head_len] = '\0';
    *body_len = len - head_len;
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(end + 4, 1, *body_len, f), *body_len);
    fclose(f);
    unsigned status = 0;
    sscanf(head, "HTTP/1.1 %u", &status);
    return status;
}

/* Whether `command` exits 0, with $GOT the body's file and $WANT
 * `want_rel`'s. */
static bool body_check(const char *command, const char *want_rel)
{
    char got[PATH_MAX], want[PATH_MAX];
    test_daemon_file(got, sizeof(got), "body.got");
    test_daemon_file(want, sizeof(want), want_rel);
    ck_assert_int_eq(setenv("GOT", got, 1), 0);
    ck_assert_int_eq(setenv("WANT", want, 1), 0);
    return shell(command) == 0;
}

static uint64_t size_of(const char *rel)
{
    char path[PATH_MAX];
    struct stat st;
    test_daemon_file(path, sizeof(path), rel);
    ck_assert_int_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

START_TEST(precompressed_siblings)
{
    struct test_daemon d;
    test_daemon_file(www, sizeof(www), "www"); /* make_tree() makes it */
    char server[PATH_MAX + 512];
    int n = snprintf(server, sizeof(server),
                     "    location / { gzip_static on; brotli_static on; zstd_static on; }\n"
                     "    location /g/ { alias %s/; gzip_static always; }\n"
                     "    location /v/ { alias %s/; gzip_static on; gzip_http_version 1.0;\n"
                     "        gzip off; brotli off; zstd off; }\n"
                     "    location /n/ { alias %s/; }",
                     www, www, www);
    ck_assert_int_lt(n, (int)sizeof(server));
    /* the compression filter is on too: it must leave a coded file be */
    start(&d,
          "gzip on; zstd on; brotli on; gzip_types text/plain; zstd_types text/plain;\n"
          "brotli_types text/plain; gzip_vary on;",
          "", server);
    with_siblings("p.txt");
    with_siblings("old.txt");
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/old.txt.gz");
    struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);

    char head[4096], v[256];
    size_t len;
    static const struct {
        const char *accept, *coding, *suffix, *decode;
    } cases[] = {
        {"gzip", "gzip", ".gz",
         "python3 -c 'import gzip,sys; sys.stdout.buffer.write("
         "gzip.decompress(open(sys.argv[1],\"rb\").read()))' \"$GOT\" | cmp - \"$WANT\""},
        {"br", "br", ".br", "brotli -d -c \"$GOT\" | cmp - \"$WANT\""},
        {"zstd", "zstd", ".zst", "zstd -q -d -c \"$GOT\" | cmp - \"$WANT\""},
        /* equal q: the compression filter's order, zstd first */
        {"gzip, br, zstd", "zstd", ".zst", "zstd -q -d -c \"$GOT\" | cmp - \"$WANT\""},
        {"gzip;q=1, br;q=0.5, zstd;q=0", "gzip", ".gz", "gzip -d -c < \"$GOT\" | cmp - \"$WANT\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char headers[128];
        snprintf(headers, sizeof(headers), "Accept-Encoding: %s\r\n", cases[i].accept);
        ck_assert_uint_eq(
            fetch_to(d.port, "GET", "/p.txt", headers, head, sizeof(head), "body.got", &len), 200);
        ck_assert(header_of(head, "Content-Encoding", v, sizeof(v)));
        ck_assert_str_eq(v, cases[i].coding);
        ck_assert(header_of(head, "Vary", v, sizeof(v)));
        ck_assert_str_eq(v, "Accept-Encoding");
        ck_assert(header_of(head, "Content-Type", v, sizeof(v)));
        ck_assert_str_eq(v, "text/plain");
        char sibling[64];
        snprintf(sibling, sizeof(sibling), "www/p.txt%s", cases[i].suffix);
        ck_assert_uint_eq(len, size_of(sibling));
        ck_assert(body_check("cmp \"$GOT\" \"$WANT\"", sibling)); /* its bytes, coded once */
        ck_assert_msg(body_check(cases[i].decode, "www/p.txt"), "%s", cases[i].accept);
    }
    /* the sibling's validators */
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/p.txt", "Accept-Encoding: gzip\r\n", head,
                               sizeof(head), "body.got", &len),
                      200);
    struct stat st;
    test_daemon_file(path, sizeof(path), "www/p.txt.gz");
    ck_assert_int_eq(stat(path, &st), 0);
    char want[64];
    snprintf(want, sizeof(want), "\"%llx-%llx\"", (unsigned long long)st.st_mtime,
             (unsigned long long)st.st_size);
    ck_assert(header_of(head, "ETag", v, sizeof(v)));
    ck_assert_str_eq(v, want);
    /* HEAD: the same head, no body */
    ck_assert_uint_eq(fetch_to(d.port, "HEAD", "/p.txt", "Accept-Encoding: gzip\r\n", head,
                               sizeof(head), "body.got", &len),
                      200);
    ck_assert_uint_eq(len, 0);
    ck_assert(header_of(head, "Content-Encoding", v, sizeof(v)));
    ck_assert(header_of(head, "Content-Length", v, sizeof(v)));
    ck_assert_uint_eq(strtoull(v, NULL, 10), size_of("www/p.txt.gz"));
    /* a range: the sibling's bytes */
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/p.txt",
                               "Accept-Encoding: br\r\nRange: bytes=0-9\r\n", head, sizeof(head),
                               "body.got", &len),
                      206);
    ck_assert(header_of(head, "Content-Range", v, sizeof(v)));
    snprintf(want, sizeof(want), "bytes 0-9/%llu", (unsigned long long)size_of("www/p.txt.br"));
    ck_assert_str_eq(v, want);
    ck_assert_uint_eq(len, 10);
    ck_assert(body_check("head -c 10 \"$WANT\" | cmp \"$GOT\" -", "www/p.txt.br"));
    /* a client that accepts none: the file, with Vary, coded by nothing
     * (the filter's types take it, but identity is asked for) */
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/p.txt", "", head, sizeof(head), "body.got", &len),
                      200);
    ck_assert(!header_of(head, "Content-Encoding", v, sizeof(v)));
    ck_assert(header_of(head, "Vary", v, sizeof(v)));
    ck_assert_ptr_null(strstr(strstr(head, "Vary") + 1, "Vary")); /* once: not the filter's too */
    ck_assert(body_check("cmp \"$GOT\" \"$WANT\"", "www/p.txt"));
    /* a sibling older than the file is not served: the filter codes it */
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/old.txt", "Accept-Encoding: gzip\r\n", head,
                               sizeof(head), "body.got", &len),
                      200);
    ck_assert(header_of(head, "Content-Encoding", v, sizeof(v)));
    ck_assert_ptr_null(strstr(head, "Content-Length"));
    ck_assert(header_of(head, "Transfer-Encoding", v, sizeof(v))); /* the filter's */
    /* always: whatever the client says */
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/g/p.txt", "Accept-Encoding: identity\r\n", head,
                               sizeof(head), "body.got", &len),
                      200);
    ck_assert(header_of(head, "Content-Encoding", v, sizeof(v)));
    ck_assert_str_eq(v, "gzip");
    ck_assert(body_check("cmp \"$GOT\" \"$WANT\"", "www/p.txt.gz"));
    /* HTTP/1.0 under gzip_http_version 1.1 (its default): neither a
     * sibling nor the filter's coding, but by `always`; under 1.0, the
     * sibling (also where no coding is on) */
    char raw[8192];
    exchange(d.port, "GET /p.txt HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n", raw, sizeof(raw));
    ck_assert_msg(strncmp(raw, "HTTP/1.1 200", 12) == 0, "%s", raw);
    ck_assert(!header_of(raw, "Content-Encoding", v, sizeof(v)));
    exchange(d.port, "GET /g/p.txt HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n", raw, sizeof(raw));
    ck_assert(header_of(raw, "Content-Encoding", v, sizeof(v)));
    exchange(d.port, "GET /v/p.txt HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n", raw, sizeof(raw));
    ck_assert_msg(header_of(raw, "Content-Encoding", v, sizeof(v)), "%s", raw);
    ck_assert_str_eq(v, "gzip");
    /* off: no sibling, no Vary of its own; the filter's gzip */
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/n/p.txt", "", head, sizeof(head), "body.got", &len),
                      200);
    ck_assert(!header_of(head, "Content-Encoding", v, sizeof(v)));
    ck_assert(body_check("cmp \"$GOT\" \"$WANT\"", "www/p.txt"));
    test_daemon_stop(&d);
}
END_TEST

/* A sibling is opened as the file is: a link refused under
 * disable_symlinks, a directory of that name skipped. */
START_TEST(precompressed_sibling_opened_safely)
{
    struct test_daemon d;
    start(&d, "", "", "    location / { gzip_static on; disable_symlinks on; }");
    with_siblings("p.txt");
    char path[PATH_MAX], target[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/p.txt.gz");
    test_daemon_file(target, sizeof(target), "p.gz");
    ck_assert_int_eq(rename(path, target), 0);
    ck_assert_int_eq(symlink(target, path), 0);
    char head[4096], v[64];
    size_t len;
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/p.txt", "Accept-Encoding: gzip\r\n", head,
                               sizeof(head), "body.got", &len),
                      200);
    ck_assert(!header_of(head, "Content-Encoding", v, sizeof(v)));
    ck_assert(body_check("cmp \"$GOT\" \"$WANT\"", "www/p.txt"));
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_uint_eq(fetch_to(d.port, "GET", "/p.txt", "Accept-Encoding: gzip\r\n", head,
                               sizeof(head), "body.got", &len),
                      200);
    ck_assert(!header_of(head, "Content-Encoding", v, sizeof(v)));
    test_daemon_stop(&d);
}
END_TEST

START_TEST(open_file_cache_sees_changes)
{
    struct test_daemon d;
    start(&d, "", "", "    location / { open_file_cache max=10; open_file_cache_valid 0; }");
    char out[4096];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    file_at("www/a.txt", "changed\n");
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "changed\n");
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/a.txt");
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 404);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(autoindex_lists_a_directory)
{
    struct test_daemon d;
    start(&d, "", "", "    location / { index index.html; autoindex on; }");
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/listing");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    test_daemon_file(path, sizeof(path), "www/listing/zdir");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    file_at("www/listing/b.txt", "abc");
    file_at("www/listing/a&<b>.txt", "x");
    file_at("www/listing/.hidden", "x");
    char out[8192];
    ck_assert_uint_eq(ask(d.port, "GET", "/listing/", "", out, sizeof(out)), 200);
    const char *page = body_of(out);
    ck_assert_ptr_nonnull(strstr(page, "<title>Index of /listing/</title>"));
    ck_assert_ptr_nonnull(strstr(page, "<a href=\"../\">../</a>"));
    const char *dir = strstr(page, "<a href=\"zdir/\">zdir/</a>");
    const char *odd = strstr(page, "<a href=\"a%26%3Cb%3E.txt\">a&amp;&lt;b&gt;.txt</a>");
    const char *b = strstr(page, "<a href=\"b.txt\">b.txt</a>");
    ck_assert_msg(dir != NULL && odd != NULL && b != NULL, "%s", page);
    ck_assert(dir < odd && odd < b); /* directories first, then by name */
    ck_assert_ptr_nonnull(strstr(b, "                   3\r\n"));
    ck_assert_ptr_null(strstr(page, "hidden"));
    /* a directory with an index file still gets it */
    ck_assert_uint_eq(ask(d.port, "GET", "/sub/", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "sub index\n");
    test_daemon_stop(&d);
}
END_TEST

/* A file larger than a loop turn's share, whole, by sendfile and by
 * copying: it goes on without an event from the socket. */
START_TEST(large_file_whole)
{
    test_daemon_file(www, sizeof(www), "www"); /* make_tree() makes it */
    char server[PATH_MAX + 128];
    snprintf(server, sizeof(server),
             "    location / { index index.html; }\n"
             "    location /copy/ { alias %s/; sendfile off; }",
             www);
    struct test_daemon d;
    start(&d, "", "", server);
    char path[PATH_MAX];
    test_daemon_file(path, sizeof(path), "www/large.bin");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 40 << 20), 0);
    close(fd);
    const char *paths[] = {"/large.bin", "/copy/large.bin"};
    for (int i = 0; i < 2; i++) {
        char cmd[512], out[128];
        snprintf(cmd, sizeof(cmd),
                 "curl -s --max-time 20 -o /dev/null -w '%%{http_code} %%{size_download}' "
                 "http://127.0.0.1:%d%s",
                 d.port, paths[i]);
        test_run(cmd, out, sizeof(out));
        ck_assert_str_eq(out, "200 41943040");
    }
    test_daemon_stop(&d);
}
END_TEST

/* $body_bytes_sent counts what each path sent: sendfile(2) (on by
 * default), copies (sendfile off), ranges, HEAD's nothing; over HTTP/2
 * too. */
START_TEST(body_bytes_sent_logged)
{
    char log[PATH_MAX], top[PATH_MAX + 128];
    test_daemon_file(log, sizeof(log), "access.log");
    snprintf(top, sizeof(top),
             "log_format bytes '$request_uri $status $body_bytes_sent';\n"
             "access_log %s bytes;",
             log);
    test_daemon_file(www, sizeof(www), "www"); /* make_tree() makes it */
    char server[PATH_MAX + 128];
    snprintf(server, sizeof(server),
             "    location / { index index.html; }\n"
             "    location /copy/ { alias %s/; sendfile off; }",
             www);
    struct test_daemon d;
    start(&d, top, " http2", server);
    patterned("www/p.bin", 300000);
    char out[4096];
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_uint_eq(ask(d.port, "HEAD", "/a.txt", "", out, sizeof(out)), 200);
    ck_assert_uint_eq(ask(d.port, "GET", "/a.txt?r", "Range: bytes=0-1,5-6\r\n", out, sizeof(out)),
                      206);
    ck_assert_uint_eq(ask(d.port, "GET", "/copy/a.txt", "", out, sizeof(out)), 200);
    ck_assert_str_eq(body_of(out), "hello, world\n");
    char cmd[PATH_MAX * 2], res[256];
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 --http2-prior-knowledge http://127.0.0.1:%d/p.bin | wc -c",
             d.port);
    test_run(cmd, res, sizeof(res));
    ck_assert_uint_eq(strtoul(res, NULL, 10), 300000);
    /* what the big one sent through the socket, copied or not */
    int fd = test_connect(d.port);
    const char *req = "GET /p.bin HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    test_send_all(fd, req, strlen(req));
    static char big[400000];
    size_t got = test_recv_all(fd, big, sizeof(big));
    close(fd);
    ck_assert_ptr_nonnull(strstr(big, "\r\n\r\n"));
    ck_assert_uint_eq(got - (size_t)(strstr(big, "\r\n\r\n") + 4 - big), 300000);
    char *text = test_wait_file(log, "/p.bin 200 300000\n/p.bin 200 300000\n", 10000);
    free(text);
    text = test_read_file(log);
    ck_assert_ptr_nonnull(strstr(text, "/a.txt 200 13\n/a.txt 200 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "/copy/a.txt 200 13\n"));
    /* the multipart body, its boundaries and part heads included */
    char *r = strstr(text, "/a.txt?r 206 ");
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_gt(strtoul(r + 13, NULL, 10), 4);
    free(text);
    test_daemon_stop(&d);
}
END_TEST

Suite *test_suite(void)
{
    /* As the daemon does before its first parse (runtime_modules_init()). */
    modules_init();
    for (size_t m = 0; m < modules_count; m++)
        if ((modules_list[m]->conf.size != 0 || modules_list[m]->conf.directives != NULL) &&
            conf_module_register(&modules_list[m]->conf) != 0)
            abort();
    Suite *suite = suite_create("proto/static");
    TCase *unit = tcase_create("unit");
    tcase_set_timeout(unit, 10);
    tcase_add_test(unit, directives_and_inheritance);
    tcase_add_test(unit, directive_errors);
    tcase_add_test(unit, no_root_needed);
    suite_add_tcase(suite, unit);
    TCase *daemon = tcase_create("daemon");
    tcase_set_timeout(daemon, 60);
    test_daemon_fixture(daemon);
    tcase_add_test(daemon, get_head_and_methods);
    tcase_add_test(daemon, conditional_requests);
    tcase_add_test(daemon, ranges);
    tcase_add_test(daemon, directories_and_index);
    tcase_add_test(daemon, redirects_made_absolute);
    tcase_add_test(daemon, try_files_fallbacks);
    tcase_add_test(daemon, server_level_files);
    tcase_add_test(daemon, server_without_locations);
    tcase_add_test(daemon, request_filename);
    tcase_add_test(daemon, types_file_included);
    tcase_add_test(daemon, nothing_outside_the_root);
    tcase_add_test(daemon, sparse_file_past_4gb);
    tcase_add_test(daemon, file_truncated_while_sent);
    tcase_add_test(daemon, http2_and_ranges);
    tcase_add_test(daemon, http2_file_truncated_resets_the_stream);
    tcase_add_test(daemon, over_tls);
    tcase_add_test(daemon, open_file_cache_sees_changes);
    tcase_add_test(daemon, precompressed_siblings);
    tcase_add_test(daemon, precompressed_sibling_opened_safely);
    tcase_add_test(daemon, body_bytes_sent_logged);
    tcase_add_test(daemon, large_file_whole);
    tcase_add_test(daemon, autoindex_lists_a_directory);
    suite_add_tcase(suite, daemon);
    return suite;
}
