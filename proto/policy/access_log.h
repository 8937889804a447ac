/*
 * access_log.h: one line per HTTP exchange, in a format of $variables
 * (vars.h, nginx's names), written with one write(2) per line to an
 * O_APPEND file that SIGUSR1 can reopen.
 */
#ifndef CORRAL_PROTO_ACCESS_LOG_H
#define CORRAL_PROTO_ACCESS_LOG_H

#include "proto/http/exchange.h" /* struct http_request */
#include "proto/http/vars.h"     /* enum vars_escape */

#include <stdint.h>

/* The default: the combined format plus request and upstream time. */
#define ACCESS_LOG_COMBINED_TIMED                                                                  \
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent "             \
    "\"$http_referer\" "                                                                           \
    "\"$http_user_agent\" $request_time $upstream_response_time"

/* nginx's predefined `combined`: $remote_user is "-" where no auth_basic
 * passed the request. */
#define ACCESS_LOG_COMBINED                                                                        \
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent "             \
    "\"$http_referer\" "                                                                           \
    "\"$http_user_agent\""

struct access_log;
struct vars_template;
struct http_site;
struct http_vhost;
struct http_location;

/* Opens `path` for appending with `format` (NULL: the default).  Returns 0,
 * -EINVAL with *bad pointing at an unknown $variable, or -errno from open. */
int access_log_open(const char *path, const char *format, struct access_log **out,
                    const char **bad);
/* The same with a format compiled by the caller (it may name maps), which
 * must outlive the log; NULL: the default.  Returns 0 or -errno. */
int access_log_open_compiled(const char *path, const struct vars_template *format,
                             struct access_log **out);
/* Checks a format without opening anything: 0, or -EINVAL with *bad at the
 * unknown $variable. */
int access_log_check_format(const char *format, const char **bad);
/* How values are escaped in the lines: VARS_LOG (nginx's escape=default)
 * unless this says otherwise; VARS_JSON for escape=json, VARS_RAW for
 * escape=none.  Before the first line is written. */
void access_log_set_escape(struct access_log *log, enum vars_escape escape);
/* buffer=SIZE: each of `workers` workers gathers its lines, up to `size`
 * bytes, and writes them when the next would not fit, when
 * access_log_post_flushes() or access_log_flush() says, and when the log
 * is freed; no lock is taken per line.  Before the first line.  Returns 0
 * or -ENOMEM. */
int access_log_set_buffer(struct access_log *log, size_t size, unsigned workers);
/* flush=TIME: has each worker of `server` write what it gathered, on its
 * own thread (posted to its loop).  Any thread. */
void access_log_post_flushes(struct access_log *log, corral_server *server);
/* Writes what every worker gathered: only once the workers have exited. */
void access_log_flush(struct access_log *log);
/* Reopens the file under the same descriptor (after log rotation). */
int access_log_reopen(struct access_log *log);
void access_log_free(struct access_log *log);

/* A log that writes each line to every one of `logs` (`count` of them,
 * which must outlive it; none: `access_log off`): the access_log lines of
 * one level.  Freeing it frees none of them.  Returns 0 or -ENOMEM. */
int access_log_tee(struct access_log *const *logs, size_t count, struct access_log **out);

/* The log of an exchange that `loc` of `vhost` (either may be NULL) on
 * `site` serves: the innermost that has one (nginx's rule), or NULL when
 * there is none or it is `access_log off`. */
struct access_log *access_log_route(const struct http_site *site, const struct http_vhost *vhost,
                                    const struct http_location *loc);

/* What one exchange leaves for its log line; the framer fills it. */
struct access_entry {
    struct exchange *ex;  /* $request_id, $upstream_*, addresses; may be NULL */
    const char *kept;     /* access_log_keep()'s copy, may be NULL */
    const char *protocol; /* "HTTP/1.1": $request's last word */
    unsigned status;
    uint64_t body_bytes_sent;
    uint64_t request_ns; /* from the first byte of the head to the end */
};

void access_log_write(struct access_log *log, const struct access_entry *entry);

/* Writes the line of `ctx` (its `escape` is the log's): for what is not
 * an exchange, such as a stream session (ctx->stream), from `worker`'s
 * thread (NULL: not a worker's; the line is written at once). */
void access_log_write_ctx(struct access_log *log, const corral_worker *worker,
                          struct vars_ctx *ctx);

/* The request's strings die with on_request; the log line comes later.
 * Returns a malloc'd copy of `req` (its head and headers) and the client's
 * address `remote`, or NULL when out of memory (the line is then written
 * with "-" for them). */
char *access_log_keep(const struct http_request *req, const char *remote);

/* The same for a request refused before it was parsed whole (400, 408,
 * 413, 431): the first line of `head` (`len` bytes of the client's input,
 * whatever they hold; NULL: none) split at its first and last space into
 * method, target and protocol, so that $request logs it as received, and
 * `remote`.  Without a whole first line, $request logs empty.  NULL when
 * out of memory. */
char *access_log_keep_line(const char *head, size_t len, const char *remote);

/* Points `entry` at `kept` (access_log_keep()'s result, may be NULL),
 * which must outlive the access_log_write() call. */
void access_log_entry_from_kept(struct access_entry *entry, const char *kept);

#endif
