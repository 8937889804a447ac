/*
 * vars.h: nginx-style $variables.  A value written in the config
 * ("https://$host$request_uri") is compiled once, at load, into literal and
 * variable parts; a request evaluates it into a caller's buffer.  `map`
 * blocks are variables the config defines, evaluated lazily.
 */
#ifndef CORRAL_PROTO_VARS_H
#define CORRAL_PROTO_VARS_H

#include "proto/http/exchange.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vars_template;
struct vars_map;

struct http_regex;

/* What else $names may be: the maps a config defines, and the named
 * groups of a location's regex.  The caller owns them. */
struct vars_maps {
    struct vars_map *const *maps;
    size_t count;
    const struct http_regex *captures; /* NULL: none */
    /* The variables `set` defines (nginx's user variables): their names,
     * without "$", each one's index its place here; their values for an
     * exchange are in its context slot `user_slot` (vars_user_set()). */
    const char *const *user_names;
    size_t user_count;
    unsigned user_slot;
    /* The server's regex names (site.h): their named groups are
     * variables, and so are $1...$9 where no location regex is
     * (`captures` NULL); read from the host of the exchange's vhost. */
    const struct http_regex *const *host_regexes;
    size_t host_regex_count;
};

/* Why a compile failed: `offset` is the byte of the text at fault. */
struct vars_error {
    size_t offset;
    char message[200];
};

/* ---------------------------------------------------------------- templates */

/* Compiles `text`: "$name" and "${name}" are variables (names are
 * [A-Za-z0-9_], case-insensitive), everything else is literal.  As in
 * nginx there is no escape: a "$" that starts no name is an error.
 * `maps` (may be NULL) names the maps $names may refer to.  Returns 0 with
 * *out (vars_template_free() it), -EINVAL with `error` written, or -ENOMEM. */
int vars_compile(const char *text, const struct vars_maps *maps, struct vars_template **out,
                 struct vars_error *error);
void vars_template_free(struct vars_template *t);

/* Whether `t` holds no variable: its value is its text. */
bool vars_template_is_literal(const struct vars_template *t);

/* Whether `t` reads something known only once the response is under way
 * ($status, $upstream_*, $request_time, $bytes_sent). */
bool vars_template_is_late(const struct vars_template *t);

/* Whether `t` reads the request's head ($host, $http_*, $arg_*, $uri...,
 * or a map), which is gone once the request's handler has returned. */
bool vars_template_reads_request(const struct vars_template *t);

/* Whether `t` reads a regex capture ($1..$9 or a named group). */
bool vars_template_uses_captures(const struct vars_template *t);

/* ------------------------------------------------------------- evaluation */

/* How values are written: as they are, fit for a header line (control
 * bytes other than HTAB dropped, so that no value can start a line of its
 * own), for an access log line ('"', '\\', control and non-ASCII bytes
 * as \xHH; an empty value as "-"), or for a JSON string (RFC 8259: '"',
 * '\\' and control bytes escaped, valid UTF-8 as it is, each byte of an
 * invalid sequence as \ufffd; an empty value stays empty), nginx's
 * log_format escape=json. */
enum vars_escape {
    VARS_RAW,
    VARS_HEADER,
    VARS_LOG,
    VARS_JSON,
};

/* A stream session's facts (proto/stream/), for its log line, where an
 * exchange would give them: $remote_port, $server_addr, $server_port,
 * $upstream_addr, and the stream's own $bytes_received, $session_time,
 * $upstream_bytes_sent, $upstream_bytes_received and the
 * $tls_preread_ (or $ssl_preread_) server name and ALPN protocols.  They
 * read empty in an HTTP exchange's values. */
struct vars_stream {
    const struct sockaddr *peer, *local; /* NULL: unknown */
    const char *upstream_addr;           /* NULL: none was asked */
    uint64_t bytes_received;             /* from the client */
    uint64_t upstream_bytes_sent, upstream_bytes_received;
    uint64_t session_ns;
    const char *server_name, *alpn; /* NULL: no tls_preread */
    /* A tls listen's session: $ssl_protocol, $ssl_cipher, $ssl_server_name
     * (NULL: none, or no handshake) */
    const char *tls_protocol, *tls_cipher, *tls_server_name;
};

/* What variables read.  The caller fills what it has; what it leaves zero
 * (NULL) evaluates empty. */
struct vars_ctx {
    struct exchange *ex;            /* the connection's and the exchange's variables */
    const struct http_request *req; /* the request's */
    const char *remote_addr;        /* overrides exchange_client_host() (the log's copy) */
    const char *protocol;           /* "HTTP/1.1": $server_protocol, $request */
    /* The captures of the location's regex ($1..$9, named): `subject`
     * and the offsets of `capture_count` pairs (regex_match()). */
    const char *subject;
    const size_t *ovector;
    size_t capture_count;
    /* Known once the response is under way. */
    unsigned status;
    uint64_t bytes_sent;
    uint64_t request_ns;
    enum vars_escape escape;
    const struct vars_stream *stream; /* a stream session's, instead of `ex` */
    unsigned _depth;                  /* maps evaluating maps */
    const struct vars_map *_open[8];  /* those being evaluated: a cycle reads empty */
};

/* A buffer the evaluation appends to.  It starts in caller-owned memory
 * (`stack`, `cap` bytes) and moves to the heap when it outgrows it, unless
 * it was made with vars_buf_fixed(); then it keeps what fits and `len`
 * still counts every byte the value has. */
struct vars_buf {
    char *data;
    size_t len, cap;
    bool fixed;
    bool failed; /* out of memory: `data` holds what fit */
    char *_stack;
    size_t _stack_cap;
};

void vars_buf_init(struct vars_buf *b, char *stack, size_t cap);
void vars_buf_fixed(struct vars_buf *b, char *buf, size_t cap);
void vars_buf_free(struct vars_buf *b);
void vars_buf_add(struct vars_buf *b, const char *data, size_t len);

/* Appends `data` to `out` as the inside of a JSON string (RFC 8259 7):
 * what any JSON parser reads, whatever the bytes.  Valid UTF-8 stays as
 * it is, a byte of no valid sequence becomes \ufffd. */
void vars_escape_json(struct vars_buf *out, const char *data, size_t len);

/* Appends the value of `t` for `ctx` to `out`. */
void vars_eval(const struct vars_template *t, struct vars_ctx *ctx, struct vars_buf *out);

/* The value of `t` in `buf` (no NUL added): the length of the whole value,
 * of which `cap` bytes at most are written.  For keys (limit zones) and
 * other callers with a buffer of their own. */
size_t vars_eval_into(const struct vars_template *t, struct vars_ctx *ctx, char *buf, size_t cap);

/* --------------------------------------------------------------------- maps */

/* A map $source $name { ... }: `name` without its "$".  NULL when out of
 * memory.  Free with vars_map_free(). */
struct vars_map *vars_map_new(const char *name);
void vars_map_free(struct vars_map *map);
const char *vars_map_name(const struct vars_map *map);

/* The value to look up, compiled as any template.  Returns as vars_compile(). */
int vars_map_set_source(struct vars_map *map, const char *text, const struct vars_maps *maps,
                        struct vars_error *error);

/* One entry: `key` is an exact value, "~REGEX" or "~*REGEX" (caseless);
 * `value` a template.  A NULL key is the default.  Exact keys are tried
 * first, then the regexes in the order given.  Returns 0, -ENOMEM, or
 * -EINVAL with `error` written and *in_value telling whether its offset is
 * into `value` (a bad template) or into `key` (a bad regex: PCRE2's message). */
int vars_map_add(struct vars_map *map, const char *key, const char *value,
                 const struct vars_maps *maps, struct vars_error *error, bool *in_value);

/* ----------------------------------------------------- module variables */

/* A variable a module defines ($remote_user, $jwt_claim_NAME), whose
 * value is the module's state for the exchange: `get` points *out at
 * bytes that stay valid until the exchange ends (false, or ex NULL: the
 * value is empty).  `suffix` is what follows the name when `prefix` is
 * set ("sub" of $jwt_claim_sub), else empty. */
struct vars_module_var {
    const char *name; /* without "$", lowercase; NULL ends a list */
    bool prefix;
    bool (*get)(const struct exchange *ex, const char *suffix, size_t len, struct http_str *out);
    /* Instead of `get` (NULL: `get`), a value made from the request as
     * the evaluation has it (its URI maybe rewritten): written into `buf`
     * (`cap` bytes), its length returned; 0, or more than `cap`: empty. */
    size_t (*make)(const struct exchange *ex, const struct http_request *req, char *buf,
                   size_t cap);
};

/* Adds `list` (ending with a NULL name) to what every later compile
 * resolves, after corral's own names.  Call before any compile, from one
 * thread (http_module_init() does, for the modules' `vars`).  Returns 0,
 * or -ENOSPC past VARS_MODULE_LISTS_MAX lists. */
#define VARS_MODULE_LISTS_MAX 8
int vars_module_add(const struct vars_module_var *list);

/* Whether the header field name `field` is the one a variable's suffix
 * `name` (`len` bytes: $http_NAME's, lowercase, '_' for '-') names. */
bool vars_field_name_is(struct http_str field, const char *name, size_t len);

/* ------------------------------------------------------- user variables */

/* Whether `name` (`len` bytes, without "$") is one of corral's own
 * variables ($host, $http_NAME, $1...), which `set` may not change. */
bool vars_name_is_builtin(const char *name, size_t len);

/* The index of the user variable `t` is made of alone ("$name"), or -1
 * when it is anything else. */
int vars_template_user_index(const struct vars_template *t);

/* Gives the user variable that `target` ("$name" compiled) is the value
 * `data` (`len` bytes) for `ex`, as `set` does; *slot: the context slot
 * its values live in, for vars_user_release().  False: `target` is no
 * user variable, or out of memory. */
bool vars_template_assign(struct exchange *ex, const struct vars_template *target, const char *data,
                          size_t len, unsigned *slot);

/* Gives user variable `index` of `ex` the value `data` (`len` bytes, copied);
 * the values live in context slot `slot` until vars_user_release().
 * Returns false when out of memory (the old value stays). */
bool vars_user_set(struct exchange *ex, unsigned slot, size_t index, const char *data, size_t len);

/* The value of user variable `index` of `ex`; false when never set. */
bool vars_user_get(const struct exchange *ex, unsigned slot, size_t index, struct http_str *out);

/* Frees the values of `ex` in `slot`. */
void vars_user_release(struct exchange *ex, unsigned slot);

/* ----------------------------------------------------------------- helpers */

/* Sets the captures of `ctx` to those of `re` matched against the path of
 * ctx->req, in `ovector` (2 * HTTP_REGEX_PAIRS items, the caller's).
 * False when the regex gave up (HTTP_REGEX_GAVE_UP): no captures then. */
bool vars_set_captures(struct vars_ctx *ctx, const struct http_regex *re, size_t *ovector);

/* Fills `out` (33 bytes) with the exchange's $request_id: 128 random bits
 * in hex, drawn once per exchange. */
void vars_request_id(struct exchange *ex, char out[33]);

/* 128 unpredictable bits from the calling thread's generator, seeded from
 * the kernel once per thread ($request_id's, and the tracing module's
 * span ids): no system call per draw. */
void vars_random_128(uint64_t out[2]);

#endif
