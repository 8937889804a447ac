/*
 * access_log.c: the access log.  The format is compiled once into literal
 * pieces and variables; each exchange formats its line into a stack buffer
 * (the heap for a long one) and appends it with one write(2), which
 * O_APPEND keeps whole even with every worker writing.
 */
#include "proto/access_log.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum variable {
    VAR_LITERAL,
    VAR_REMOTE_ADDR,
    VAR_TIME_LOCAL,
    VAR_TIME_ISO8601,
    VAR_REQUEST,
    VAR_REQUEST_METHOD,
    VAR_REQUEST_URI,
    VAR_HOST,
    VAR_STATUS,
    VAR_BODY_BYTES_SENT,
    VAR_HTTP_REFERER,
    VAR_HTTP_USER_AGENT,
    VAR_REQUEST_TIME,
    VAR_UPSTREAM_RESPONSE_TIME,
};

static const struct {
    const char *name;
    enum variable var;
} variables[] = {
    {"remote_addr", VAR_REMOTE_ADDR},
    {"time_local", VAR_TIME_LOCAL},
    {"time_iso8601", VAR_TIME_ISO8601},
    {"request", VAR_REQUEST},
    {"request_method", VAR_REQUEST_METHOD},
    {"request_uri", VAR_REQUEST_URI},
    {"host", VAR_HOST},
    {"status", VAR_STATUS},
    {"body_bytes_sent", VAR_BODY_BYTES_SENT},
    {"http_referer", VAR_HTTP_REFERER},
    {"http_user_agent", VAR_HTTP_USER_AGENT},
    {"request_time", VAR_REQUEST_TIME},
    {"upstream_response_time", VAR_UPSTREAM_RESPONSE_TIME},
};

struct piece {
    enum variable var;
    const char *text; /* VAR_LITERAL: into the log's copy of the format */
    size_t len;
};

struct access_log {
    int fd;
    char *path;
    char *format;
    struct piece *pieces;
    size_t piece_count;
};

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* Splits the format into pieces; a longest-name match, so $request_time is
 * not read as $request followed by "_time". */
static int compile(struct access_log *log, const char **bad)
{
    size_t len = strlen(log->format);
    log->pieces = calloc(len + 1, sizeof(*log->pieces));
    if (log->pieces == NULL)
        return -ENOMEM;
    const char *p = log->format;
    while (*p != '\0') {
        struct piece *piece = &log->pieces[log->piece_count++];
        if (*p != '$') {
            const char *dollar = strchr(p, '$');
            size_t n = dollar != NULL ? (size_t)(dollar - p) : strlen(p);
            *piece = (struct piece){VAR_LITERAL, p, n};
            p += n;
            continue;
        }
        size_t n = 0;
        while (name_char(p[1 + n]))
            n++;
        size_t i = 0;
        while (i < sizeof(variables) / sizeof(variables[0]) &&
               !(strlen(variables[i].name) == n && strncmp(variables[i].name, p + 1, n) == 0))
            i++;
        if (i == sizeof(variables) / sizeof(variables[0])) {
            *bad = p;
            return -EINVAL;
        }
        *piece = (struct piece){variables[i].var, NULL, 0};
        p += 1 + n;
    }
    return 0;
}

int access_log_open(const char *path, const char *format, struct access_log **out, const char **bad)
{
    struct access_log *log = calloc(1, sizeof(*log));
    if (log == NULL)
        return -ENOMEM;
    log->fd = -1;
    log->path = strdup(path);
    log->format = strdup(format != NULL ? format : ACCESS_LOG_COMBINED_TIMED);
    int err = log->path == NULL || log->format == NULL ? -ENOMEM : compile(log, bad);
    if (err == 0) {
        log->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (log->fd == -1)
            err = -errno;
    }
    if (err != 0) {
        access_log_free(log);
        return err;
    }
    *out = log;
    return 0;
}

int access_log_check_format(const char *format, const char **bad)
{
    struct access_log log = {.format = (char *)format};
    int err = compile(&log, bad);
    free(log.pieces);
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
    free(log->pieces);
    free(log->format);
    free(log->path);
    free(log);
}

/* A line is built on the stack and moves to the heap when it outgrows it:
 * a request's fields (escaped, up to four times their size) and the
 * format's literals have any length.  One byte stays free for the '\n'. */
struct line {
    char *buf;
    size_t len, cap;
    char small[4096];
};

static void line_init(struct line *line)
{
    line->buf = line->small;
    line->len = 0;
    line->cap = sizeof(line->small);
}

static void line_free(struct line *line)
{
    if (line->buf != line->small)
        free(line->buf);
}

/* Makes room for `len` more bytes and the '\n'; false when memory ran out,
 * and the line is then cut to what fits. */
static bool line_reserve(struct line *line, size_t len)
{
    if (len <= line->cap - 1 - line->len)
        return true;
    size_t cap = line->cap;
    while (cap - 1 - line->len < len) {
        if (cap > SIZE_MAX / 2)
            return false;
        cap *= 2;
    }
    char *grown = line->buf == line->small ? malloc(cap) : realloc(line->buf, cap);
    if (grown == NULL)
        return false;
    if (line->buf == line->small)
        memcpy(grown, line->small, line->len);
    line->buf = grown;
    line->cap = cap;
    return true;
}

static void put(struct line *line, const char *text, size_t len)
{
    if (!line_reserve(line, len))
        len = line->cap - 1 - line->len;
    memcpy(line->buf + line->len, text, len);
    line->len += len;
}

/* A request's own text, with quotes, backslashes and control bytes escaped
 * as \xHH so that a request cannot forge log lines or fields. */
static void put_escaped(struct line *line, const char *text)
{
    if (text == NULL || *text == '\0') {
        put(line, "-", 1);
        return;
    }
    for (; *text != '\0'; text++) {
        unsigned char c = (unsigned char)*text;
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x7f) {
            char hex[5]; /* "\\xHH" and the NUL snprintf adds */
            snprintf(hex, sizeof(hex), "\\x%02X", c);
            put(line, hex, 4);
        } else {
            put(line, (const char *)&c, 1);
        }
    }
}

static void put_printf(struct line *line, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put_printf(struct line *line, const char *fmt, ...)
{
    char text[128]; /* numbers only, and vsnprintf() stops at its end */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n > 0)
        put(line, text, (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
}

static void put_seconds(struct line *line, uint64_t ns)
{
    put_printf(line, "%llu.%03llu", (unsigned long long)(ns / 1000000000u),
               (unsigned long long)(ns / 1000000u % 1000u));
}

void access_log_write(struct access_log *log, const struct access_entry *e)
{
    struct line line;
    line_init(&line);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    for (size_t i = 0; i < log->piece_count; i++) {
        const struct piece *piece = &log->pieces[i];
        switch (piece->var) {
        case VAR_LITERAL: put(&line, piece->text, piece->len); break;
        case VAR_REMOTE_ADDR: put_escaped(&line, e->remote_addr); break;
        case VAR_TIME_LOCAL: {
            char text[64]; /* fixed-width fields; strftime() returns 0 if not */
            size_t n = strftime(text, sizeof(text), "%d/%b/%Y:%H:%M:%S %z", &tm);
            assert(n < sizeof(text));
            put(&line, text, n);
            break;
        }
        case VAR_TIME_ISO8601: {
            char text[64]; /* fixed-width fields; strftime() returns 0 if not */
            size_t n = strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S%z", &tm);
            assert(n < sizeof(text));
            put(&line, text, n);
            break;
        }
        case VAR_REQUEST:
            if (e->method == NULL) {
                put(&line, "-", 1);
                break;
            }
            put_escaped(&line, e->method);
            put(&line, " ", 1);
            put_escaped(&line, e->target);
            put_printf(&line, " %s", e->protocol);
            break;
        case VAR_REQUEST_METHOD: put_escaped(&line, e->method); break;
        case VAR_REQUEST_URI: put_escaped(&line, e->target); break;
        case VAR_HOST: put_escaped(&line, e->host); break;
        case VAR_STATUS: put_printf(&line, "%u", e->status); break;
        case VAR_BODY_BYTES_SENT:
            put_printf(&line, "%llu", (unsigned long long)e->body_bytes_sent);
            break;
        case VAR_HTTP_REFERER: put_escaped(&line, e->referer); break;
        case VAR_HTTP_USER_AGENT: put_escaped(&line, e->user_agent); break;
        case VAR_REQUEST_TIME: put_seconds(&line, e->request_ns); break;
        case VAR_UPSTREAM_RESPONSE_TIME:
            if (e->upstream_ns < 0)
                put(&line, "-", 1);
            else
                put_seconds(&line, (uint64_t)e->upstream_ns);
            break;
        }
    }
    line.buf[line.len++] = '\n';
    while (write(log->fd, line.buf, line.len) == -1 && errno == EINTR)
        ;
    line_free(&line);
}

char *access_log_keep(const struct http_request *req, const char *remote)
{
    struct http_str referer = {NULL, 0}, agent = {NULL, 0};
    for (size_t i = 0; i < req->header_count; i++) {
        if (http_str_equal_nocase(req->headers[i].name, "referer"))
            referer = req->headers[i].value;
        else if (http_str_equal_nocase(req->headers[i].name, "user-agent"))
            agent = req->headers[i].value;
    }
    const struct http_str fields[] = {
        {remote, strlen(remote)}, req->method, req->target, req->host, referer, agent};
    size_t total = 0;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        total += fields[i].len + 1;
    char *kept = malloc(total);
    if (kept == NULL)
        return NULL;
    char *p = kept;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        memcpy(p, fields[i].data != NULL ? fields[i].data : "", fields[i].len);
        p += fields[i].len;
        *p++ = '\0';
    }
    return kept;
}

void access_entry_from_kept(struct access_entry *entry, const char *kept)
{
    const char *field[6] = {NULL}; /* the six access_log_keep() copies */
    if (kept != NULL) {
        const char *p = kept;
        for (int i = 0; i < 6; i++, p += strlen(p) + 1)
            field[i] = p;
    }
    entry->remote_addr = field[0];
    entry->method = field[1];
    entry->target = field[2];
    entry->host = field[3];
    entry->referer = field[4];
    entry->user_agent = field[5];
}
