/*
 * static_handler.c: the content handler of a location that serves files
 * (static_module.h): try_files, the request's path mapped to a file
 * under root or alias, index files and the redirect of a directory to
 * its slash, then the response: validators, preconditions, ranges, the
 * head, and the body through static_send.c.
 */
#include "proto/compress/compress.h"
#include "proto/http/module.h"
#include "proto/http/regex.h"
#include "proto/http/router.h"
#include "proto/http/vars.h"
#include "proto/policy/add_header.h"
#include "proto/policy/redirect.h"
#include "proto/static/static_autoindex.h"
#include "proto/static/static_module.h"
#include "proto/static/static_path.h"
#include "proto/static/static_send.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* try_files fallbacks nested in one another, at most, as nginx bounds
 * internal redirects: a fallback that comes back to its location does so
 * within the call that made it, so a count of the calls under way on
 * the thread finds the loop, and ends it with 500. */
#define STATIC_REDIRECTS_MAX 10
static _Thread_local unsigned redirect_depth;

static bool method_is(struct http_str method, const char *name)
{
    return method.len == strlen(name) && memcmp(method.data, name, method.len) == 0;
}

static unsigned status_of(int err)
{
    switch (err) {
    case -ENOENT:
    case -ENOTDIR:
    case -ENAMETOOLONG: return 404;
    case -EACCES:
    case -EPERM:
    case -ELOOP: return 403;
    default: return 500;
    }
}

/* The loop's clock, refreshed once per turn: enough for the cache's
 * windows, and no clock read per request. */
static uint64_t now_ms(const struct exchange *ex)
{
    return corral_loop_now(exchange_loop(ex));
}

/* The file for a normalised `uri`: under root, or under alias for the
 * part after the location's prefix.  Returns 0, or the status to answer
 * with. */
static unsigned map_path(const struct static_location *sl, const char *uri, size_t len, char *out,
                         size_t cap)
{
    const char *rest = uri;
    size_t rest_len = len;
    if (sl->alias) {
        /* The router matched the path as sent; decoded, it may have
         * left the prefix ("/a/%2e%2e/b"). */
        if (len < sl->prefix_len || memcmp(uri, sl->prefix, sl->prefix_len) != 0)
            return 404;
        rest += sl->prefix_len;
        rest_len -= sl->prefix_len;
    }
    int err = static_path_join(sl->base, sl->base_len, rest, rest_len, out, cap);
    return err == 0 ? 0 : err == -EINVAL ? 400 : 404;
}

/* ----------------------------------------------------------- responses */

static void add_date(struct vars_buf *b, const char *name, int64_t t)
{
    char date[STATIC_DATE_LEN + 1];
    static_date_format(date, t);
    vars_buf_add(b, name, strlen(name));
    vars_buf_add(b, date, STATIC_DATE_LEN);
    vars_buf_add(b, "\r\n", 2);
}

static void add_text(struct vars_buf *b, const char *text)
{
    vars_buf_add(b, text, strlen(text));
}

/* Last-Modified and ETag, which every file response has, put together
 * first and added in one piece. */
static void add_validators(struct vars_buf *b, const struct static_validators *v)
{
    static const char lm[] = "Last-Modified: ", et[] = "\r\nETag: ";
    char lines[sizeof(lm) + STATIC_DATE_LEN + sizeof(et) + STATIC_ETAG_MAX + 2];
    size_t n = sizeof(lm) - 1;
    memcpy(lines, lm, n);
    static_date_format(lines + n, v->mtime);
    n += STATIC_DATE_LEN;
    if (v->etag != NULL) {
        assert(v->etag_len <= STATIC_ETAG_MAX);
        memcpy(lines + n, et, sizeof(et) - 1);
        n += sizeof(et) - 1;
        memcpy(lines + n, v->etag, v->etag_len);
        n += v->etag_len;
    }
    memcpy(lines + n, "\r\n", 2);
    vars_buf_add(b, lines, n + 2);
}

/* Expires and Cache-Control, as nginx's expires writes them. */
static void add_expires(struct vars_buf *b, const struct static_location *sl)
{
    char line[64];
    switch (sl->expires) {
    case STATIC_EXPIRES_OFF: break;
    case STATIC_EXPIRES_EPOCH:
        add_text(b, "Expires: Thu, 01 Jan 1970 00:00:01 GMT\r\nCache-Control: no-cache\r\n");
        break;
    case STATIC_EXPIRES_MAX:
        add_text(b, "Expires: Thu, 31 Dec 2037 23:55:55 GMT\r\n"
                    "Cache-Control: max-age=315360000\r\n");
        break;
    case STATIC_EXPIRES_TIME:
        add_date(b, "Expires: ", (int64_t)time(NULL) + sl->expires_s);
        if (sl->expires_s < 0) {
            add_text(b, "Cache-Control: no-cache\r\n");
        } else {
            snprintf(line, sizeof(line), "Cache-Control: max-age=%lld\r\n",
                     (long long)sl->expires_s);
            add_text(b, line);
        }
        break;
    }
}

/* A boundary for multipart/byteranges: the worker's count, as nginx's,
 * after the time it started so that it differs across restarts. */
static void make_boundary(char *out, size_t cap)
{
    static _Thread_local uint64_t seq;
    if (seq == 0)
        seq = corral_monotonic_ns() & 0xffffffffffull;
    snprintf(out, cap, "%020llu", (unsigned long long)++seq);
}

static struct http_str header_value(const struct http_request *req, const char *name, bool *present)
{
    for (size_t i = 0; i < req->header_count; i++)
        if (http_str_equal_nocase(req->headers[i].name, name)) {
            *present = true;
            return http_trim(req->headers[i].value);
        }
    *present = false;
    return (struct http_str){NULL, 0};
}

/* Answers with the regular file `f`, whose name is `path`, or with its
 * sibling compressed ahead of time (gzip_static...): the sibling's
 * validators, length and bytes, the file's type. */
static void serve_file(struct exchange *ex, const struct http_request *req,
                       const struct static_location *sl, struct static_file *f, const char *path)
{
    struct static_file sibling;
    int coding = -1;
    if (sl->any_precompressed) {
        /* gzip_http_version: an HTTP/1.0 client below it gets no sibling
         * by `on`, only by `always` (nginx's gzip_static). */
        uint8_t modes[COMPRESS_CODINGS];
        memcpy(modes, sl->precompressed, sizeof(modes));
        if (req->http10 && compress_http_version(ex) > 10)
            for (size_t i = 0; i < COMPRESS_CODINGS; i++)
                if (modes[i] == STATIC_PRECOMPRESSED_ON)
                    modes[i] = STATIC_PRECOMPRESSED_OFF;
        coding = static_precompressed_open(req, modes, path, f, sl->no_symlinks, &sl->cache,
                                           sl->cache.max > 0 ? now_ms(ex) : 0, &sibling);
        if (coding >= 0) {
            static_file_close(f);
            f = &sibling;
        }
    }
    char etag[STATIC_ETAG_MAX];
    struct static_validators v = {.mtime = (int64_t)f->st.st_mtim.tv_sec,
                                  .size = (uint64_t)f->st.st_size};
    if (sl->etag) {
        v.etag_len = static_etag_format(etag, v.mtime, v.size);
        v.etag = v.etag_len > 0 ? etag : NULL;
    }
    char small[512];
    struct vars_buf h;
    vars_buf_init(&h, small, sizeof(small));
    add_validators(&h, &v);
    add_expires(&h, sl);
    /* The response varies with Accept-Encoding wherever a sibling could
     * be served, to this client or not (nginx's, with gzip_vary on). */
    if (sl->any_precompressed)
        add_text(&h, "Vary: Accept-Encoding\r\n");
    unsigned cond = static_cond_check(req, &v, sl->ims);
    if (cond == 304) {
        vars_buf_add(&h, "", 1);
        static_file_close(f);
        if (h.failed)
            exchange_respond_error(ex, 500);
        else
            exchange_respond(ex, 304, h.data, "", 0);
        vars_buf_free(&h);
        return;
    }
    if (cond != 0) {
        static_file_close(f);
        vars_buf_free(&h);
        exchange_respond_error(ex, cond);
        return;
    }
    const char *type = static_mime_type(&sl->mime, path);
    struct static_range ranges[STATIC_RANGES_MAX];
    size_t count = 0;
    bool present;
    struct http_str range = header_value(req, "range", &present);
    if (present && method_is(req->method, "GET") && static_cond_if_range(req, &v)) {
        enum static_range_result r = static_range_parse(range, v.size, ranges, &count);
        if (r == STATIC_RANGE_UNSATISFIABLE) {
            static_file_close(f);
            char line[64];
            snprintf(line, sizeof(line), "Content-Range: bytes */%llu\r\n",
                     (unsigned long long)v.size);
            add_text(&h, line);
            add_text(&h, "Content-Type: text/plain\r\n");
            vars_buf_add(&h, "", 1);
            static const char body[] = "416 Range Not Satisfiable\n";
            if (h.failed)
                exchange_respond_error(ex, 500);
            else
                exchange_respond(ex, 416, h.data, body, sizeof(body) - 1);
            vars_buf_free(&h);
            return;
        }
    }
    /* Accept-Ranges, Content-Encoding and the name of Content-Type in as
     * few pieces as may be. */
    if (coding >= 0) {
        add_text(&h, "Accept-Ranges: bytes\r\nContent-Encoding: ");
        add_text(&h, compress_coding_name((enum compress_coding)coding));
    }
    add_text(&h, coding >= 0 ? "\r\nContent-Type: " : "Accept-Ranges: bytes\r\nContent-Type: ");
    char boundary[24] = "";
    char line[160];
    if (count > 1) {
        make_boundary(boundary, sizeof(boundary));
        add_text(&h, "multipart/byteranges; boundary=");
        add_text(&h, boundary);
        add_text(&h, "\r\n");
    } else {
        add_text(&h, type);
        add_text(&h, "\r\n");
        if (count == 1) {
            snprintf(line, sizeof(line), "Content-Range: bytes %llu-%llu/%llu\r\n",
                     (unsigned long long)ranges[0].first, (unsigned long long)ranges[0].last,
                     (unsigned long long)v.size);
            add_text(&h, line);
        }
    }
    if (h.failed) {
        static_file_close(f);
        vars_buf_free(&h);
        exchange_respond_error(ex, 500);
        return;
    }
    struct static_send_plan plan = {.size = v.size,
                                    .ranges = ranges,
                                    .count = count,
                                    .type = type,
                                    .boundary = count > 1 ? boundary : NULL,
                                    .sendfile = sl->sendfile};
    uint64_t length = static_send_length(&plan);
    exchange_begin(ex, count > 0 ? 206 : 200, h.data, h.len, (int64_t)length);
    vars_buf_free(&h);
    if (req->head || length == 0) {
        static_file_close(f);
        exchange_end(ex);
        return;
    }
    static_send_start(ex, f, &plan);
}

/* A directory asked for without its slash: to the slash, with the
 * query, as nginx does (absolute as absolute_redirect says). */
static void redirect_to_slash(struct exchange *ex, const struct http_request *req)
{
    char small[512];
    struct vars_buf b;
    vars_buf_init(&b, small, sizeof(small));
    char uri_small[256];
    struct vars_buf uri;
    vars_buf_init(&uri, uri_small, sizeof(uri_small));
    vars_buf_add(&uri, req->path.data, req->path.len);
    vars_buf_add(&uri, "/", 1);
    if (req->target.len > req->path.len)
        vars_buf_add(&uri, req->target.data + req->path.len, req->target.len - req->path.len);
    add_text(&b, "Content-Type: text/html\r\n");
    redirect_location(ex, req->host, uri.data, uri.len, &b); /* with its NUL */
    b.failed |= uri.failed;
    vars_buf_free(&uri);
    static const char body[] = "<html>\r\n<head><title>301 Moved Permanently</title></head>\r\n"
                               "<body>\r\n<center><h1>301 Moved Permanently</h1></center>\r\n"
                               "</body>\r\n</html>\r\n";
    if (b.failed)
        exchange_respond_error(ex, 500);
    else
        exchange_respond(ex, 301, b.data, body, sizeof(body) - 1);
    vars_buf_free(&b);
}

/* autoindex: the listing of the directory open as `f`, which it takes. */
static void list_directory(struct exchange *ex, const struct http_request *req,
                           struct static_file *f)
{
    char small[4096];
    struct vars_buf page;
    vars_buf_init(&page, small, sizeof(small));
    int err = static_autoindex_page(f->fd, req->path.data, req->path.len, &page);
    f->fd = -1; /* closed with the listing */
    if (err != 0 || page.failed)
        exchange_respond_error(ex, err == -EACCES ? 403 : 500);
    else
        exchange_respond(ex, 200, "Content-Type: text/html\r\n", page.data, page.len);
    vars_buf_free(&page);
}

/* Serves the normalised `uri`: a file, a directory's index (or listing),
 * or the redirect of a directory to its slash. */
static void serve_uri(struct exchange *ex, const struct http_request *req,
                      const struct static_location *sl, const char *uri, size_t len, bool mapped)
{
    if (!method_is(req->method, "GET") && !method_is(req->method, "HEAD")) {
        exchange_respond(ex, 405, "Allow: GET, HEAD\r\n", "", 0);
        return;
    }
    char path[PATH_MAX];
    unsigned status = 0;
    if (mapped) /* a regex location's alias: `uri` is the file's path */
        memcpy(path, uri, len + 1);
    else
        status = map_path(sl, uri, len, path, sizeof(path));
    if (status != 0) {
        exchange_respond_error(ex, status);
        return;
    }
    struct static_file f;
    uint64_t now = sl->cache.max > 0 ? now_ms(ex) : 0;
    if (len > 0 && uri[len - 1] == '/') {
        size_t dir_len = strlen(path);
        for (size_t i = 0; i < sl->index_count; i++) {
            size_t n = strlen(sl->index[i]);
            if (dir_len + n + 1 > sizeof(path)) {
                exchange_respond_error(ex, 404);
                return;
            }
            memcpy(path + dir_len, sl->index[i], n + 1);
            int err = static_file_open(path, sl->no_symlinks, &sl->cache, now, &f);
            if (err == -ENOENT)
                continue;
            if (err != 0) {
                exchange_respond_error(ex, status_of(err));
                return;
            }
            if (S_ISREG(f.st.st_mode)) {
                serve_file(ex, req, sl, &f, path);
                return;
            }
            static_file_close(&f); /* a directory of that name: the next */
        }
        path[dir_len] = '\0';
        /* No index: nginx's 403 without autoindex, when the directory is
         * there. */
        int err = static_file_open(path, sl->no_symlinks, NULL, 0, &f);
        if (err == 0 && S_ISDIR(f.st.st_mode) && sl->autoindex) {
            list_directory(ex, req, &f);
        } else if (err == 0) {
            bool dir = S_ISDIR(f.st.st_mode);
            static_file_close(&f);
            exchange_respond_error(ex, dir ? 403 : 404);
        } else {
            exchange_respond_error(ex, status_of(err));
        }
        return;
    }
    int err = static_file_open(path, sl->no_symlinks, &sl->cache, now, &f);
    if (err != 0) {
        exchange_respond_error(ex, status_of(err));
        return;
    }
    if (S_ISDIR(f.st.st_mode)) {
        static_file_close(&f);
        redirect_to_slash(ex, req);
        return;
    }
    if (!S_ISREG(f.st.st_mode)) {
        static_file_close(&f);
        exchange_respond_error(ex, 403);
        return;
    }
    serve_file(ex, req, sl, &f, path);
}

/* ------------------------------------------------------------ try_files */

/* The value of `t` for this request. */
static void try_value(struct exchange *ex, const struct http_request *req,
                      const struct static_try *t, struct vars_buf *out)
{
    if (t->value == NULL) {
        vars_buf_add(out, t->text, strlen(t->text));
        return;
    }
    struct vars_ctx ctx = {.ex = ex, .req = req, .escape = VARS_RAW};
    vars_eval(t->value, &ctx, out);
}

/* Whether the element names what is there: a regular file, or with a
 * trailing slash a directory. */
static bool try_exists(const struct static_location *sl, const char *uri, size_t len)
{
    char path[PATH_MAX];
    if (map_path(sl, uri, len, path, sizeof(path)) != 0)
        return false;
    struct stat st;
    if (stat(path, &st) == -1)
        return false;
    return len > 0 && uri[len - 1] == '/' ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
}

/* try_files's last element: an answer, a named location, or a URI. */
static void try_fallback(struct exchange *ex, const struct http_request *req,
                         const struct static_try *t)
{
    if (t->kind == STATIC_TRY_CODE) {
        exchange_respond_error(ex, t->code);
        add_header_forget_early(ex);
        return;
    }
    if (redirect_depth >= STATIC_REDIRECTS_MAX) {
        exchange_respond_error(ex, 500);
        add_header_forget_early(ex);
        return;
    }
    add_header_forget_early(ex);
    if (t->kind == STATIC_TRY_NAMED) {
        redirect_depth++;
        router_redirect(ex, req, t->named);
        redirect_depth--;
        return;
    }
    char small[512];
    struct vars_buf target;
    vars_buf_init(&target, small, sizeof(small));
    try_value(ex, req, t, &target);
    const char *q = memchr(target.data, '?', target.len);
    size_t path_len = q != NULL ? (size_t)(q - target.data) : target.len;
    /* Without a query of its own, the URI keeps the request's. */
    if (q == NULL && req->target.len > req->path.len)
        vars_buf_add(&target, req->target.data + req->path.len, req->target.len - req->path.len);
    if (target.failed || path_len == 0 || target.data[0] != '/') {
        vars_buf_free(&target);
        exchange_respond_error(ex, 500);
        return;
    }
    struct http_request next = *req;
    next.target = (struct http_str){target.data, target.len};
    next.path = (struct http_str){target.data, path_len};
    redirect_depth++;
    router_redirect(ex, &next, NULL);
    redirect_depth--;
    vars_buf_free(&target);
}

/* A regex location's alias, its $1... the groups the location's regex
 * matched in the path as sent: the value, decoded and normalised as a
 * request path is (the groups are the client's bytes), must stay under
 * the alias's own directory, the part before its first variable.
 * Returns 0 with the file's path in `out`, -EINVAL (400), -EACCES (403)
 * or -ENAMETOOLONG. */
static int regex_alias(struct exchange *ex, const struct http_request *req,
                       const struct static_location *sl, char *out, size_t cap, size_t *len)
{
    char small[512];
    struct vars_buf value;
    vars_buf_init(&value, small, sizeof(small));
    struct vars_ctx ctx = {.ex = ex, .req = req, .escape = VARS_RAW};
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    int err = 0;
    if (sl->captures != NULL && !vars_set_captures(&ctx, sl->captures, ovector))
        err = -EINVAL;
    if (err == 0)
        vars_eval(sl->alias_value, &ctx, &value);
    if (err == 0 && value.failed)
        err = -ENAMETOOLONG;
    if (err == 0)
        err = static_path_normalise(value.data, value.len, out, cap, len);
    vars_buf_free(&value);
    if (err != 0)
        return err;
    if (*len < sl->base_len || memcmp(out, sl->base, sl->base_len) != 0)
        return -EACCES;
    return 0;
}

size_t static_request_filename(const struct exchange *ex, const struct http_request *req, char *buf,
                               size_t cap)
{
    const struct static_location *sl = http_module_built(ex, &static_module);
    if (sl == NULL)
        return 0;
    size_t len = 0;
    if (sl->alias_value != NULL) {
        /* regex_alias() reads the exchange's variables, and changes
         * nothing of it. */
        if (regex_alias((struct exchange *)ex, req, sl, buf, cap, &len) != 0)
            return 0;
        return len;
    }
    char uri[PATH_MAX];
    if (static_path_normalise(req->path.data, req->path.len, uri, sizeof(uri), &len) != 0 ||
        map_path(sl, uri, len, buf, cap) != 0)
        return 0;
    return strlen(buf);
}

static void static_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    const struct static_location *sl = data;
    add_header_set_rules(ex, sl->add_headers);
    char early_small[256];
    struct vars_buf early;
    vars_buf_init(&early, early_small, sizeof(early_small));
    add_header_early(ex, req, &early);
    char uri[PATH_MAX];
    size_t len = 0;
    int err = 0;
    size_t found = sl->try_count;
    for (size_t i = 0; i + 1 < sl->try_count; i++) {
        char small[512];
        struct vars_buf value;
        vars_buf_init(&value, small, sizeof(small));
        try_value(ex, req, &sl->tries[i], &value);
        bool ok = !value.failed &&
                  static_path_normalise(value.data, value.len, uri, sizeof(uri), &len) == 0 &&
                  try_exists(sl, uri, len);
        vars_buf_free(&value);
        if (ok) {
            found = i;
            break;
        }
    }
    if (sl->try_count > 0 && found == sl->try_count) {
        /* Nothing there: after the fallback the exchange may be another
         * location's, whose add_header values are its own. */
        try_fallback(ex, req, &sl->tries[sl->try_count - 1]);
        vars_buf_free(&early);
        return;
    }
    bool mapped = false;
    if (sl->try_count == 0 && sl->alias_value != NULL) {
        err = regex_alias(ex, req, sl, uri, sizeof(uri), &len);
        mapped = true;
    } else if (sl->try_count == 0) {
        err = static_path_normalise(req->path.data, req->path.len, uri, sizeof(uri), &len);
    }
    if (err != 0)
        exchange_respond_error(ex, err == -EINVAL ? 400 : err == -EACCES ? 403 : 414);
    else
        serve_uri(ex, req, sl, uri, len, mapped);
    add_header_forget_early(ex);
    vars_buf_free(&early);
}

const struct http_handler static_handler = {
    .name = "static",
    .on_request = static_on_request,
    .on_drain = static_send_on_drain,
    .on_abort = static_send_on_abort,
};
