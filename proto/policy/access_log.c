/*
 * access_log.c: the access log.  The format is a template of variables
 * (vars.h) compiled once; each exchange keeps a copy of its request head
 * for its line, formatted into a stack buffer (the heap for a long one) and
 * appended with one write(2), which O_APPEND keeps whole even with every
 * worker writing; with buffer=, a worker gathers its lines and writes them
 * together.
 */
#include "proto/policy/access_log.h"

#include "proto/http/site.h"
#include "proto/http/vars.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One worker's gathered lines (buffer=): its thread alone touches them,
 * or any thread once the workers have exited. */
struct log_buffer {
    struct access_log *log;
    char *data; /* `size` bytes, allocated at the first line */
    size_t len;
} __attribute__((aligned(64)));

struct access_log {
    /* A tee (access_log_tee()): the logs its lines go to, the caller's. */
    bool is_tee;
    struct access_log **tee;
    size_t tee_count;
    int fd;
    char *path;
    struct vars_template *own; /* compiled here, else the caller's */
    const struct vars_template *format;
    enum vars_escape escape;    /* VARS_LOG unless log_format escape= says */
    size_t size;                /* buffer=: per worker; 0: a write(2) per line */
    struct log_buffer *buffers; /* one per worker */
    unsigned buffer_count;
};

/* What access_log_keep() copies: the request with its headers, then their
 * bytes. */
struct kept {
    struct http_request req;
    const char *remote;
    const char *protocol; /* a refused request's, as received; NULL: the framer's */
};

static int log_open(const char *path, struct access_log *log)
{
    log->fd = -1;
    log->escape = VARS_LOG;
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

int access_log_set_buffer(struct access_log *log, size_t size, unsigned workers)
{
    assert(log->buffers == NULL && size > 0 && workers > 0);
    log->buffers = aligned_alloc(64, workers * sizeof(*log->buffers));
    if (log->buffers == NULL)
        return -ENOMEM;
    for (unsigned w = 0; w < workers; w++)
        log->buffers[w] = (struct log_buffer){.log = log};
    log->size = size;
    log->buffer_count = workers;
    return 0;
}

static void write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* a full disk: the lines are lost, the server goes on */
        data += n;
        len -= (size_t)n;
    }
}

static void buffer_flush(struct log_buffer *b)
{
    if (b->len > 0)
        write_all(b->log->fd, b->data, b->len);
    b->len = 0;
}

/* A corral_callback: flushes the worker's buffer `arg` on its thread. */
static void flush_posted(void *arg)
{
    buffer_flush(arg);
}

void access_log_post_flushes(struct access_log *log, corral_server *server)
{
    unsigned workers = corral_server_worker_count(server);
    for (unsigned w = 0; w < log->buffer_count && w < workers; w++)
        if (corral_worker_post(corral_server_worker(server, w), flush_posted, &log->buffers[w]) !=
            0)
            continue; /* out of memory: the lines wait for the next flush */
}

void access_log_flush(struct access_log *log)
{
    for (unsigned w = 0; w < log->buffer_count; w++)
        buffer_flush(&log->buffers[w]);
}

/* Appends `line` to the buffer of the exchange's worker; false when the
 * line is to be written at once (no buffer for it, or too long). */
static bool buffer_line(struct access_log *log, const corral_worker *worker, const char *line,
                        size_t len)
{
    unsigned w = worker != NULL ? corral_worker_index(worker) : 0;
    if (log->buffers == NULL || worker == NULL || w >= log->buffer_count)
        return false;
    struct log_buffer *b = &log->buffers[w];
    if (b->data == NULL && (b->data = malloc(log->size)) == NULL)
        return false;
    if (log->size - b->len < len)
        buffer_flush(b);
    if (len > log->size)
        return false; /* after the lines before it */
    memcpy(b->data + b->len, line, len);
    b->len += len;
    return true;
}

void access_log_set_escape(struct access_log *log, enum vars_escape escape)
{
    log->escape = escape;
}

int access_log_reopen(struct access_log *log)
{
    if (log->is_tee)
        return 0; /* its logs are reopened themselves */
    int fd = open(log->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd == -1)
        return -errno;
    /* Onto the same number: writers on other threads never see it closed. */
    int err = dup3(fd, log->fd, O_CLOEXEC) == -1 ? -errno : 0;
    close(fd);
    return err;
}

int access_log_tee(struct access_log *const *logs, size_t count, struct access_log **out)
{
    struct access_log *log = calloc(1, sizeof(*log));
    if (log == NULL)
        return -ENOMEM;
    log->is_tee = true;
    log->fd = -1;
    log->tee = calloc(count > 0 ? count : 1, sizeof(*log->tee));
    if (log->tee == NULL) {
        free(log);
        return -ENOMEM;
    }
    for (size_t i = 0; i < count; i++)
        log->tee[i] = logs[i];
    log->tee_count = count;
    *out = log;
    return 0;
}

struct access_log *access_log_route(const struct http_site *site, const struct http_vhost *vhost,
                                    const struct http_location *loc)
{
    struct access_log *log = site->access_log;
    if (vhost != NULL && vhost->access_log != NULL)
        log = vhost->access_log;
    if (loc != NULL && loc->access_log != NULL)
        log = loc->access_log;
    return log != NULL && log->is_tee && log->tee_count == 0 ? NULL : log; /* access_log off */
}

void access_log_free(struct access_log *log)
{
    if (log == NULL)
        return;
    free(log->tee);
    for (unsigned w = 0; w < log->buffer_count; w++) {
        buffer_flush(&log->buffers[w]);
        free(log->buffers[w].data);
    }
    free(log->buffers);
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
        .protocol = kept != NULL && kept->protocol != NULL ? kept->protocol : e->protocol,
        .status = e->status,
        .bytes_sent = e->body_bytes_sent,
        .request_ns = e->request_ns,
    };
    access_log_write_ctx(log, e->ex != NULL ? exchange_worker(e->ex) : NULL, &ctx);
}

void access_log_write_ctx(struct access_log *log, const corral_worker *worker, struct vars_ctx *ctx)
{
    if (log->is_tee) {
        for (size_t i = 0; i < log->tee_count; i++)
            access_log_write_ctx(log->tee[i], worker, ctx);
        return;
    }
    ctx->escape = log->escape;
    /* On the stack, and the heap for a long line: a request's fields
     * (escaped, up to four times their size) have any length. */
    char small[4096];
    struct vars_buf line;
    vars_buf_init(&line, small, sizeof(small));
    vars_eval(log->format, ctx, &line);
    vars_buf_add(&line, "\n", 1);
    if (line.len > line.cap) /* out of memory: what fit, and its end of line */
        line.len = line.cap;
    if (line.len > 0 && line.data[line.len - 1] != '\n')
        line.data[line.len - 1] = '\n';
    if (!buffer_line(log, worker, line.data, line.len))
        while (write(log->fd, line.data, line.len) == -1 && errno == EINTR)
            ;
    vars_buf_free(&line);
}

/* Copies `s` to *p, advancing it; a NULL one (absent) stays NULL. */
static struct http_str copy_str(char **p, struct http_str s)
{
    if (s.data == NULL)
        return s;
    struct http_str copy = {*p, s.len};
    if (s.len > 0)
        memcpy(*p, s.data, s.len);
    *p += s.len;
    return copy;
}

/* access_log_keep(), with the protocol `protocol` (NULL data: none). */
static char *keep(const struct http_request *req, const char *remote, struct http_str protocol)
{
    size_t remote_len = strlen(remote) + 1;
    size_t total = sizeof(struct kept) + req->header_count * sizeof(struct http_header) +
                   req->method.len + req->target.len + req->host.len + req->authority.len +
                   remote_len + protocol.len + 1;
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
    kept->protocol = NULL;
    if (protocol.data != NULL) {
        /* With its NUL, before the client's address at the block's end. */
        assert((size_t)(p - block) + protocol.len + 1 + remote_len == total);
        memcpy(p, protocol.data, protocol.len);
        block[total - remote_len - 1] = '\0';
        kept->protocol = p;
        p += protocol.len + 1;
    }
    memcpy(p, remote, remote_len);
    kept->remote = p;
    return block;
}

char *access_log_keep(const struct http_request *req, const char *remote)
{
    return keep(req, remote, (struct http_str){NULL, 0});
}

char *access_log_keep_line(const char *head, size_t len, const char *remote)
{
    struct http_request req = {.method = {NULL, 0}};
    struct http_str protocol = {NULL, 0};
    const char *eol = head != NULL ? memchr(head, '\n', len) : NULL;
    if (eol != NULL) {
        size_t n = (size_t)(eol - head);
        if (n > 0 && head[n - 1] == '\r')
            n--;
        const char *end = head + n;
        const char *sp1 = memchr(head, ' ', n);
        const char *sp2 = sp1 != NULL ? memrchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
        assert(sp1 == NULL || sp1 < end);
        assert(sp2 == NULL || (sp2 > sp1 && sp2 < end));
        protocol = (struct http_str){"", 0};
        if (sp1 == NULL) {
            req.method = (struct http_str){head, n};
        } else {
            req.method = (struct http_str){head, (size_t)(sp1 - head)};
            const char *target_end = sp2 != NULL ? sp2 : end;
            req.target = (struct http_str){sp1 + 1, (size_t)(target_end - sp1 - 1)};
            if (sp2 != NULL)
                protocol = (struct http_str){sp2 + 1, (size_t)(end - sp2 - 1)};
        }
        const char *query =
            req.target.data != NULL ? memchr(req.target.data, '?', req.target.len) : NULL;
        req.path = (struct http_str){
            req.target.data, query != NULL ? (size_t)(query - req.target.data) : req.target.len};
    }
    return keep(&req, remote, protocol);
}

void access_log_entry_from_kept(struct access_entry *entry, const char *kept)
{
    entry->kept = kept;
}
