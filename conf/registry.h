/*
 * registry.h: what conf/'s own files share: the directive tree the parser
 * builds, the directive table each module registers, and the state the
 * directives fill in.  Nothing here is visible outside conf/.
 */
#ifndef CORRAL_CONF_REGISTRY_H
#define CORRAL_CONF_REGISTRY_H

#include "config.h"

#include <limits.h>

/* ------------------------------------------------------------------ tree */

/*
 * One directive: `name args;` or `name args { children }`.  Included files
 * are already spliced in, so a block's children may come from several files
 * (each position names its own).  The root is a nameless block.
 */
struct conf_node {
    struct conf_arg name;
    struct conf_arg *args;
    size_t arg_count, arg_cap;
    bool block;                /* written with "{ ... }" */
    struct conf_pos block_pos; /* where the "{" is */
    struct conf_node *children;
    size_t child_count, child_cap;
};

/* ------------------------------------------------------------- directives */

extern const struct conf_directive conf__core_directives[];
extern const struct conf_directive conf__http_directives[];
extern const struct conf_directive conf__tls_directives[];
extern const struct conf_directive conf__upstream_directives[];
extern const struct conf_directive conf__access_directives[];
extern const struct conf_directive conf__vars_directives[];
extern const struct conf_directive conf__limit_directives[];
extern const struct conf_directive conf__nginx_directives[];
extern const struct conf_directive conf__stream_directives[];
extern const struct conf_directive conf__acme_directives[];
void conf__acme_free(struct conf_config *config);
void conf__acme_certificate_free(struct conf_acme_certificate *acme);

/* vars_directives.c: applies a map block `node` (map $SOURCE $NAME
 * { ... }), adding it to `*list` (`*count` of them): for the top level's
 * maps and the stream block's.  Returns 0 or -1. */
int conf__map_apply(struct conf_state *state, const struct conf_node *node, struct conf_map **list,
                    size_t *count);
/* Frees `count` maps and the array. */
void conf__maps_free(struct conf_map *maps, size_t count);

/* parse.c: frees a level's access_log lines. */
void conf__access_logs_free(struct conf_access_logs *logs);

/* stream_directives.c: frees what the stream block holds. */
void conf__stream_free(struct conf_stream *stream);

/* nginx_directives.c: nginx's name of a corral directive, spelt
 * differently but meaning the same ("ssl_certificate" for
 * "tls_certificate"): the corral name, or NULL.  conf__nginx_alias_of()
 * is the other way: the nginx name of corral's `name`, or NULL. */
const char *conf__nginx_alias(const char *name);
const char *conf__nginx_alias_of(const char *name);

/* Gives each listen of `server` HTTP/2 when nginx's "http2 on;" is
 * written in its block, or at top level and not in its block.  Returns 0. */
int conf__nginx_server_http2(struct conf_state *state, const struct conf_node *server_node,
                             struct conf_server *server);
/* Sets server->http3_off when nginx's "http3 off;" is written in its
 * block, or at top level and not in its block (on is the default). */
void conf__nginx_server_http3(struct conf_state *state, const struct conf_node *server_node,
                              struct conf_server *server);

/* nginx_porting.c: what to write instead of nginx's directive `name`,
 * which corral does not have: the message in `buf`, or NULL when `name`
 * is no nginx directive. */
const char *conf__nginx_directive_note(const char *name, char *buf, size_t len);

/* Every module's table, in the order they are searched. */
extern const struct conf_directive *const conf__tables[];
extern const size_t conf__table_count;

/*
 * What the directives fill in while the tree is applied.  The object
 * pointers are set while their block is being applied and point into the
 * config's arrays; those arrays only grow from the enclosing block, so the
 * pointers stay valid for the whole block.
 */
/* A hash index from byte strings to numbers (index.c).  Zeroed: empty. */
struct conf_index {
    struct conf_index_slot *slots;
    size_t mask, count;
};

/* Whether `key` is in `index`, and its value in *value if so. */
bool conf__index_find(const struct conf_index *index, const void *key, size_t len, size_t *value);

/* Adds `key` (copied) with `value`: 0; or, when it is there already, 1
 * with its value in *existing (if not NULL); or -ENOMEM. */
int conf__index_add(struct conf_index *index, const void *key, size_t len, size_t value,
                    size_t *existing);

void conf__index_free(struct conf_index *index);

/* An address as the kernel sees it, whatever its spelling, as bytes to
 * index: the family, port and address, or the socket path. */
struct conf_address_key {
    unsigned char bytes[1 + sizeof(struct sockaddr_storage)];
    size_t len;
};

/* The key of `text`; -1 when it cannot be read as an address. */
int conf__address_key(const char *text, struct conf_address_key *key);

/* What the servers checked so far have on one listen address (indexed by
 * conf_listen.address_index), so that a server is checked against them in
 * constant time; SIZE_MAX: none. */
struct conf_address_use {
    size_t last_server;       /* the last server with a listen there, */
    struct conf_pos last_pos; /* and that listen: a second in one server is a duplicate */
    size_t first_server;      /* the flags every listen there must agree with */
    size_t first_listen;      /* its listen's index in that server */
    size_t default_server, options_server, nameless_server;
};

struct conf_state {
    struct conf_config *config;
    struct conf_error *error;
    struct conf_server *server;
    struct conf_location *location;
    /* A block directive's block in a location is being applied
     * (conf__apply_nested()): `location` is the location nested in
     * `enclosing`, and `block` is the directive, whose own module's
     * entries set `enclosing`'s structs. */
    struct conf_location *enclosing;
    const struct conf_directive *block;
    struct conf_upstream *upstream;
    const struct conf_node *admin_node;
    bool in_admin;                         /* the admin block is being applied */
    const struct conf_node *stream_node;   /* the stream server block being applied */
    const struct conf_node *stream_block;  /* the stream block, while it is applied */
    const struct conf_node **server_nodes; /* one per config->servers, same order */
    struct conf_index locations;           /* the server's: kind and path -> index */
    struct conf_index addresses; /* listen addresses (conf_address_key) -> address_index */
    struct conf_address_use *address_uses;
    struct conf_index names;          /* address_index and lower-case server_name -> server */
    struct conf_index upstream_names; /* -> index in config->upstreams */
    /* Every error goes to report; the first is kept to be error's text at
     * the end. */
    const struct conf_node *root; /* the main block */
    /* Looked up once, not once per server: the top level's "http2". */
    const struct conf_node *root_http2;
    const struct conf_node *root_http3;
    conf_report_fn report;
    void *report_arg;
    unsigned error_count;
    char first_error[sizeof(((struct conf_error *)0)->text)];
};

/* registry.c */

/* Applies the directives of the main block `root` to `config`, then runs
 * the checks that need the whole config.  Returns 0, or -1 with `error`
 * holding the first error, each error having gone to `report` (if not
 * NULL); `config` then holds what was applied so far (conf_free() it). */
int conf__apply(struct conf_config *config, const struct conf_node *root, struct conf_error *error,
                conf_report_fn report, void *report_arg);

/* Applies the children of `block`, which is a block of kind `context`.  A
 * child that fails is reported and the next one applied, up to
 * CONF_ERRORS_MAX errors; returns -1 if any failed. */
int conf__apply_block(struct conf_state *state, const struct conf_node *block, unsigned context);

/* Checks a node against an entry's argument count and block form, as for
 * any directive (the parser uses it for `include`).  Returns 0 or -1. */
int conf__check_form(struct conf_error *error, const struct conf_node *node,
                     const struct conf_directive *directive);

/* Writes "file:line:col: message" into `error`.  Returns -1. */
int conf__error_at(struct conf_error *error, const struct conf_pos *pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#ifdef __clang_analyzer__
/* The static analyzer looks at one file at a time and does not follow
 * variadic calls: this shows it the -1, so that it does not take
 * "return conf__error_at(...)" for a success. */
#define conf__error_at(...) (conf__error_at(__VA_ARGS__), -1)
#endif

/* "line 12" when `there` is in the same file as `here`, else "file:12":
 * how messages point back at an earlier definition. */
const char *conf__where(char *buf, size_t len, const struct conf_pos *here,
                        const struct conf_pos *there);

/* strdup() that reports "out of memory" at `pos` on failure. */
char *conf__strdup(struct conf_state *state, const struct conf_pos *pos, const char *text);

/* Returns `array` (of `count` items of `size` bytes) reallocated with room
 * for one more item, which is zeroed; or reports "out of memory" at `pos`
 * and returns NULL, leaving `array` as it was. */
void *conf__grow(struct conf_state *state, const struct conf_pos *pos, void *array, size_t count,
                 size_t size);

/* setting.c: the generic setter of the entries that set one field, as
 * the entry says.  Returns 0, or -1 with the error written. */
int conf__apply_setting(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive);

/* http_directives.c: applies the block of `node`, a block directive of a
 * module (`directive`) written in a location, as a location nested in
 * it (conf_location.nested), in context `context`.  Returns 0 or -1. */
int conf__apply_nested(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive, unsigned context);

/* Gives server `index` the top level's value of every setting allowed in
 * both that its block does not write. */
void conf__inherit_settings(struct conf_state *state, size_t index);

/* The child of `block` named `name` (the first), or NULL. */
const struct conf_node *conf__find_child(const struct conf_node *block, const char *name);

/* levels.c: a struct that each level holds at these offsets, merged by
 * conf__levels_merge(): each server's with the top level's (none when
 * in_config is SIZE_MAX: the servers' need no merge), then each
 * location's with its server's, by `merge` (`pos`: the child's block,
 * for messages).  The top level's own is its owner's to finish first. */
struct conf_levels {
    size_t in_config, in_server, in_location;
    int (*merge)(struct conf_state *state, const struct conf_pos *pos, void *child,
                 const void *parent);
};
int conf__levels_merge(struct conf_state *state, const struct conf_levels *levels);

/* module.c: the registered modules' tables, searched after conf__tables
 * (conf__module_table(), conf__module_table_count() of them); the struct
 * a CONF_BASE_MODULE entry sets, in the block being applied (NULL: out of
 * memory); the merge of every level once the config is applied; and
 * freeing the structs of a config. */
size_t conf__module_table_count(void);
const struct conf_directive *conf__module_table(size_t index);
char *conf__module_base(struct conf_state *state, const struct conf_directive *directive);
int conf__modules_finish(struct conf_state *state);
void conf__modules_free(struct conf_config *config);

/* Finishing passes of the modules, run by conf__apply() in this order. */
int conf__http_finish(struct conf_state *state);

/* limit_directives.c: each limit_req and limit_conn (the limit module's)
 * names a zone of its kind; conf__limit_zones_free() frees the zones. */
int conf__limit_finish(struct conf_state *state);
void conf__limit_zones_free(struct conf_config *config);

/* tls_directives.c: what needs a server's whole block: the last
 * certificate has its key, a tls listener has a certificate, and client
 * verification has a CA file (which settles its default). */
int conf__tls_check_server(struct conf_state *state, size_t index);
/* The same for the stream block (`node`, the stream block's node):
 * its own settings checked, then each server (the stream block's server
 * children, in the order of config->stream.servers) given the stream
 * block's TLS settings it does not write, its pairs complete, client
 * verification settled and a certificate for a tls listen. */
int conf__tls_check_stream(struct conf_state *state, const struct conf_node *node);
/* The same for the admin block, whose tls listens need a certificate. */
int conf__tls_check_admin(struct conf_state *state);
/* The block being applied's TLS settings: its server's, or the admin
 * block's. */
struct conf_tls *conf__block_tls(struct conf_state *state);
/* Frees what a block's TLS settings hold. */
void conf__tls_free(struct conf_tls *tls);

/* core_directives.c: frees the admin block's settings. */
void conf__admin_free(struct conf_config *config);

/* upstream_directives.c: upstream names cannot contain ":", so
 * http://NAME (an upstream) and http://HOST:PORT (an address) never look
 * alike in a proxy_pass. */
bool conf__valid_upstream_name(const char *name);

/* vars_directives.c: frees what the maps hold. */
void conf__free_maps(struct conf_config *config);

/* error_page_directives.c: each "@name" an error_page names is a location
 * of every server whose pages they are. */
int conf__error_pages_check(struct conf_state *state);

/* parse.c: the whole of the file `path`, malloc'd, and its length in
 * *len; or NULL with errno set. */
char *conf__read_file(const char *path, size_t *len);

/* Defaults of the settings of the top level, from the modules' own. */
void conf__core_defaults(struct conf_config *config);

/* value.c: argument parsers that report their own errors at the argument.
 * `what` names the setting in range messages, e.g. "\"workers\"". */
#define conf__parse_uint conf_parse_uint /* directive.h: modules parse with it too */
int conf__arg_uint(struct conf_state *state, const struct conf_arg *arg, const char *what,
                   unsigned min, unsigned max, unsigned *out);
int conf__arg_size(struct conf_state *state, const struct conf_arg *arg, size_t *out);
/* This machine's physical memory in bytes, the bound of the sizes that
 * become memory shared by every worker (the limit zones). */
uint64_t conf__physical_memory(void);
int conf__arg_duration(struct conf_state *state, const struct conf_arg *arg, uint32_t *out_ms);
int conf__arg_switch(struct conf_state *state, const struct conf_arg *arg, bool *out); /* on|off */

/* The value of the keyword `arg` names, else the error "unknown WHAT "x"
 * (expected a, b or c)" listing the `count` keywords. */
int conf__arg_keyword(struct conf_state *state, const struct conf_arg *arg, const char *what,
                      const struct conf_keyword *keywords, size_t count, int *out);

/* Checks `arg` with corral_parse_address(); `kind` names it in the
 * message ("listen address").  Returns 0 or -1. */
int conf__arg_address(struct conf_state *state, const struct conf_arg *arg, const char *kind);

/* Sets *out (malloc'd) to `arg` resolved against the directory of the
 * file it is written in, with conf__resolve_path(); rejects an empty path. */
int conf__arg_path(struct conf_state *state, const struct conf_arg *arg, char **out);

/* parse.c: `path` as seen from the directory of `file` (a path as the
 * config names it), with "." components and repeated slashes dropped;
 * absolute paths stay absolute.  Malloc'd, or NULL when out of memory. */
char *conf__resolve_path(const char *file, const char *path);

#endif
