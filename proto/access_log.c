/*
 * access_log.c: the access log.  The format is a template of variables
 * (vars.h) compiled once; each exchange keeps a copy of its request head
 * for its line, formatted into a stack buffer (the heap for a long one) and
 * appended with one write(2), which O_APPEND keeps whole even with every
 * worker writing.
 */
#include "proto/access_log.h"

#include "proto/vars.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct access_log {
    int fd;
    char *path;
    struct vars_template *own; /* compiled here, else the caller's */
    const struct vars_template *format;
};

/* What access_log_keep() copies: the request with its headers, then their
 * bytes. */
struct kept {
    struct http_request req;
    const char *remote;
};

static int log_open(const char *path, struct access_log *log)
{
    log->fd = -1;
    log->path = strdup(path);
    if (log->path == NULL)
        return -ENOMEM;
    log->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    return log->fd == -1 ? -errno : 0;
}

int access_log_open(const char *path, const char *format, struct access_log **out, const char **bad)
{
    struct access_log *log = calloc(1, sizeof(*log));
    if (log == NULL)
        return -ENOMEM;
    const char *text = format != NULL ? format : ACCESS_LOG_COMBINED_TIMED;
    struct vars_error error;
    int err = vars_compile(text, NULL, &log->own, &error);
    if (err == -EINVAL)
        *bad = text + error.offset;
    if (err == 0) {
        log->format = log->own;
        err = log_open(path, log);
    }
    if (err != 0) {
        access_log_free(log);
        return err;
    }
    *out = log;
    return 0;
}

int access_log_open_compiled(const char *path, const struct vars_template *format,
                             struct access_log **out)
{
    if (format == NULL) {
        const char *bad;
        return access_log_open(path, NULL, out, &bad);
    }
    struct access_log *log = calloc(1, sizeof(*log));
    if (log == NULL)
        return -ENOMEM;
    log->format = format;
    int err = log_open(path, log);
    if (err != 0) {
        access_log_free(log);
        return err;
    }
    *out = log;
    return 0;
}

int access_log_check_format(const char *format, const char **bad)
{
    struct vars_template *t;
    struct vars_error error;
    int err = vars_compile(format, NULL, &t, &error);
    if (err == 0)
        vars_template_free(t);
    else if (err == -EINVAL)
        *bad = format + error.offset;
    return err;
}

int access_log_reopen(struct access_log *log)
{
    int fd = open(log->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd == -1)
        return -errno;
    /* Onto the same number: writers on other threads never see it closed. */
    int err = dup3(fd, log->fd, O_CLOEXEC) == -1 ? -errno : 0;
    close(fd);
    return err;
}

void access_log_free(struct access_log *log)
{
    if (log == NULL)
        return;
    if (log->fd != -1)
        close(log->fd);
    vars_template_free(log->own);
    free(log->path);
    free(log);
}

void access_log_write(struct access_log *log, const struct access_entry *e)
{
    const struct kept *kept = (const struct kept *)(const void *)e->kept;
    struct vars_ctx ctx = {
        .ex = e->ex,
        .req = kept != NULL ? &kept->req : NULL,
        .remote_addr = kept != NULL ? kept->remote : "",
        .protocol = e->protocol,
        .status = e->status,
        .bytes_sent = e->body_bytes_sent,
        .request_ns = e->request_ns,
        .upstream_ns = e->upstream_ns,
        .escape = VARS_LOG,
    };
    /* On the stack, and the heap for a long line: a request's fields
     * (escaped, up to four times their size) have any length. */
    char small[4096];
    struct vars_buf line;
    vars_buf_init(&line, small, sizeof(small));
    vars_eval(log->format, &ctx, &line);
    vars_buf_add(&line, "\n", 1);
    if (line.len > line.cap) /* out of memory: what fit, and its end of line */
        line.len = line.cap;
    if (line.len > 0 && line.data[line.len - 1] != '\n')
        line.data[line.len - 1] = '\n';
    while (write(log->fd, line.data, line.len) == -1 && errno == EINTR)
        ;
    vars_buf_free(&line);
}

/* Copies `s` to *p, advancing it. */
static struct http_str copy_str(char **p, struct http_str s)
{
    struct http_str copy = {*p, s.len};
    if (s.len > 0)
        memcpy(*p, s.data, s.len);
    *p += s.len;
    return copy;
}

char *access_log_keep(const struct http_request *req, const char *remote)
{
    size_t remote_len = strlen(remote) + 1;
    size_t total = sizeof(struct kept) + req->header_count * sizeof(struct http_header) +
                   req->method.len + req->target.len + req->host.len + req->authority.len +
                   remote_len;
    for (size_t i = 0; i < req->header_count; i++)
        total += req->headers[i].name.len + req->headers[i].value.len;
    char *block = malloc(total);
    if (block == NULL)
        return NULL;
    struct kept *kept = (struct kept *)(void *)block;
    struct http_header *headers = (struct http_header *)(void *)(kept + 1);
    char *p = (char *)(headers + req->header_count);
    kept->req = *req;
    kept->req.headers = headers;
    kept->req.method = copy_str(&p, req->method);
    kept->req.target = copy_str(&p, req->target);
    /* path is the target's start */
    kept->req.path = (struct http_str){kept->req.target.data, req->path.len};
    kept->req.host = copy_str(&p, req->host);
    kept->req.authority = copy_str(&p, req->authority);
    kept->req.upgrade_protocol = (struct http_str){"", 0};
    for (size_t i = 0; i < req->header_count; i++) {
        headers[i].name = copy_str(&p, req->headers[i].name);
        headers[i].value = copy_str(&p, req->headers[i].value);
    }
    memcpy(p, remote, remote_len);
    kept->remote = p;
    return block;
}

void access_entry_from_kept(struct access_entry *entry, const char *kept)
{
    entry->kept = kept;
}
