/*
 * parse.c: the config language's syntax.  A recursive-descent parser
 * turns the lexer's tokens (lex.c) into a tree of directive nodes with
 * positions, splicing in the files `include` names; the registry then
 * builds the config from the tree.  Also the config's destructor, which
 * knows every field.
 */
#include "lex.h"
#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far deeper than any real config (a location is two blocks down), and
 * shallow enough that hostile input cannot exhaust the stack. */
#define MAX_BLOCK_DEPTH   16
#define MAX_INCLUDE_DEPTH 16

/* A config file larger than this is a mistake, e.g. a log file matched by
 * an include glob. */
#define MAX_FILE_SIZE (16u * 1024 * 1024)

struct parser {
    struct conf_config *config; /* owns the file names that positions point to */
    struct conf_error *error;
    conf_read_file_fn read_file;
    void *read_arg;
    bool glob; /* reading the file system: include patterns are globs */
    /* The files being read, outermost first: their keys (see file_key())
     * to detect include loops, and the names that messages show. */
    const char *reading[MAX_INCLUDE_DEPTH + 1];
    const char *shown[MAX_INCLUDE_DEPTH + 1];
    size_t depth;
    struct conf_node *root; /* the main block */
};

/* `include` is expanded by the parser, but its form is checked like any
 * directive's. */
static const struct conf_directive include_directive = {
    .name = "include",
    .min_args = 1,
    .max_args = 1,
    .repeat = true,
};

/* ------------------------------------------------------------------ paths */

/* Drops "." components and repeated or trailing slashes, in place.  ".."
 * is kept: folding "a/b/.." into "a" is wrong when b is a symlink. */
static void tidy_path(char *path)
{
    char *out = path;
    const char *in = path;
    if (*in == '/')
        *out++ = *in++;
    for (;;) {
        while (*in == '/')
            in++;
        const char *segment = in;
        while (*in != '\0' && *in != '/')
            in++;
        size_t len = (size_t)(in - segment);
        if (len == 0)
            break;
        if (len == 1 && segment[0] == '.')
            continue;
        if (out > path && out[-1] != '/')
            *out++ = '/';
        memmove(out, segment, len);
        out += len;
    }
    if (out == path)
        *out++ = '.';
    *out = '\0';
}

char *conf__resolve_path(const char *file, const char *path)
{
    char *resolved = conf_path_join(file, path);
    if (resolved != NULL)
        tidy_path(resolved);
    return resolved;
}

/* What identifies a file for include-loop detection: its real path when
 * reading from the file system, which sees through symlinks and
 * "sites/../main.conf"; else the tidied path.  Malloc'd, or NULL when out
 * of memory. */
static char *file_key(const struct parser *ps, const char *path)
{
    if (ps->glob) {
        char *real = realpath(path, NULL);
        if (real != NULL)
            return real;
    }
    char *key = strdup(path);
    if (key != NULL)
        tidy_path(key);
    return key;
}

/* The config's copy of a file name, made on first use: positions point to
 * it, so it lives as long as the config. */
static const char *file_name(struct parser *ps, const char *path)
{
    struct conf_config *config = ps->config;
    for (size_t i = 0; i < config->file_count; i++)
        if (strcmp(config->files[i], path) == 0)
            return config->files[i];
    char **files = realloc(config->files, (config->file_count + 1) * sizeof(*files));
    if (files == NULL)
        return NULL;
    config->files = files;
    files[config->file_count] = strdup(path);
    if (files[config->file_count] == NULL)
        return NULL;
    return files[config->file_count++];
}

/* What a file that is not a regular one is, for a message. */
static const char *file_type(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a file";
}

/* Reads a file whole.  With `regular_only` (an include) anything but a
 * regular file is refused, and *mode says what it was: the open does not
 * block, as it would on a FIFO without a writer.  The main file may be a
 * pipe (/dev/stdin). */
static char *read_file_whole(const char *path, size_t *len, bool regular_only, mode_t *mode)
{
    char *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0));
    if (fd == -1)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) == -1)
        goto fail;
    if (S_ISDIR(st.st_mode) || (regular_only && !S_ISREG(st.st_mode))) {
        if (mode != NULL)
            *mode = st.st_mode;
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        goto fail;
    }
    /* Read to end of file rather than trusting st_size: /dev/stdin and
     * pipes have none. */
    size_t used = 0, cap = 4096;
    buf = malloc(cap);
    if (buf == NULL)
        goto fail;
    for (;;) {
        if (used == cap) {
            if (cap >= MAX_FILE_SIZE) {
                errno = EFBIG;
                goto fail;
            }
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL)
                goto fail;
            buf = grown;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + used, cap - used);
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1)
            goto fail;
        if (n == 0)
            break;
        used += (size_t)n;
    }
    close(fd);
    *len = used;
    return buf;

fail:;
    int err = errno;
    free(buf);
    close(fd);
    errno = err;
    return NULL;
}

/* The file-system reader: a conf_read_file_fn. */
static char *read_fs(const char *path, size_t *len, void *arg)
{
    (void)arg;
    return read_file_whole(path, len, false, NULL);
}

char *conf__read_file(const char *path, size_t *len)
{
    return read_fs(path, len, NULL);
}

/* ----------------------------------------------------------------- parser */

static void node_free(struct conf_node *node)
{
    free(node->name.text);
    for (size_t i = 0; i < node->arg_count; i++)
        free(node->args[i].text);
    free(node->args);
    for (size_t i = 0; i < node->child_count; i++)
        node_free(&node->children[i]);
    free(node->children);
}

/* Appends the word to the node's arguments, taking its text. */
static int add_arg(struct parser *ps, struct conf_node *node, struct token *tok)
{
    if (node->arg_count == node->arg_cap) {
        size_t cap = node->arg_cap == 0 ? 4 : node->arg_cap * 2;
        struct conf_arg *args = realloc(node->args, cap * sizeof(*args));
        if (args == NULL) {
            free(tok->text);
            return conf__error_at(ps->error, &tok->pos, "out of memory");
        }
        node->args = args;
        node->arg_cap = cap;
    }
    node->args[node->arg_count++] = (struct conf_arg){.text = tok->text, .pos = tok->pos};
    return 0;
}

/* Moves *child into the parent's children, leaving *child empty. */
static int add_child(struct parser *ps, struct conf_node *parent, struct conf_node *child)
{
    if (parent->child_count == parent->child_cap) {
        size_t cap = parent->child_cap == 0 ? 8 : parent->child_cap * 2;
        struct conf_node *children = realloc(parent->children, cap * sizeof(*children));
        if (children == NULL)
            return conf__error_at(ps->error, &child->name.pos, "out of memory");
        parent->children = children;
        parent->child_cap = cap;
    }
    parent->children[parent->child_count++] = *child;
    *child = (struct conf_node){0};
    return 0;
}

static int parse_file(struct parser *ps, const char *key, const char *name, const char *text,
                      size_t len, struct conf_node *parent, unsigned depth);

static int check_loop(struct parser *ps, const struct conf_node *node, const char *key)
{
    for (size_t i = 0; i < ps->depth; i++) {
        if (strcmp(ps->reading[i], key) != 0)
            continue;
        if (i + 1 == ps->depth)
            return conf__error_at(ps->error, &node->name.pos, "include loop: %s includes itself",
                                  ps->shown[i]);
        char chain[400];
        size_t used = 0;
        for (size_t j = i; j < ps->depth && used < sizeof(chain); j++)
            used += (size_t)snprintf(chain + used, sizeof(chain) - used, "%s -> ", ps->shown[j]);
        return conf__error_at(ps->error, &node->name.pos, "include loop: %s%s", chain,
                              ps->shown[i]);
    }
    if (ps->depth > MAX_INCLUDE_DEPTH)
        return conf__error_at(ps->error, &node->name.pos, "includes nested more than %d deep",
                              MAX_INCLUDE_DEPTH);
    return 0;
}

static int include_file(struct parser *ps, struct conf_node *parent, const struct conf_node *node,
                        const char *path, unsigned depth)
{
    const struct conf_arg *pattern = &node->args[0];
    char *text = NULL;
    int rc = -1;
    char *key = file_key(ps, path);
    if (key == NULL) {
        conf__error_at(ps->error, &pattern->pos, "out of memory");
        goto out;
    }
    if (check_loop(ps, node, key) != 0)
        goto out;
    size_t len;
    errno = 0;
    mode_t mode = 0;
    text = ps->glob ? read_file_whole(path, &len, true, &mode)
                    : ps->read_file(path, &len, ps->read_arg);
    if (text == NULL && mode != 0) {
        conf__error_at(ps->error, &pattern->pos, "cannot include \"%s\": %s, not a regular file",
                       path, file_type(mode));
        goto out;
    }
    if (text == NULL) {
        conf__error_at(ps->error, &pattern->pos, "cannot read \"%s\": %s", path,
                       strerror(errno != 0 ? errno : EIO));
        goto out;
    }
    const char *name = file_name(ps, path);
    if (name == NULL)
        conf__error_at(ps->error, &pattern->pos, "out of memory");
    else
        rc = parse_file(ps, key, name, text, len, parent, depth);
out:
    free(text);
    free(key);
    return rc;
}

static int compare_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int include_glob(struct parser *ps, struct conf_node *parent, const struct conf_node *node,
                        const char *pattern, unsigned depth)
{
    glob_t found;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &found);
    if (rc == GLOB_NOMATCH) {
        globfree(&found);
        return 0;
    }
    if (rc != 0) {
        globfree(&found);
        return conf__error_at(ps->error, &node->args[0].pos, "cannot expand \"%s\": %s", pattern,
                              rc == GLOB_NOSPACE ? "out of memory" : "read error");
    }
    /* Byte order, whatever the locale, so a config means the same
     * everywhere. */
    qsort(found.gl_pathv, found.gl_pathc, sizeof(char *), compare_paths);
    for (size_t i = 0; i < found.gl_pathc && rc == 0; i++)
        rc = include_file(ps, parent, node, found.gl_pathv[i], depth);
    globfree(&found);
    return rc;
}

/* Splices the files named by the `include` node into `parent`. */
static int include(struct parser *ps, struct conf_node *parent, const struct conf_node *node,
                   unsigned depth)
{
    if (conf__check_form(ps->error, node, &include_directive) != 0)
        return -1;
    const struct conf_arg *pattern = &node->args[0];
    if (pattern->text[0] == '\0')
        return conf__error_at(ps->error, &pattern->pos, "empty path");
    char *path = conf__resolve_path(pattern->pos.file, pattern->text);
    if (path == NULL)
        return conf__error_at(ps->error, &pattern->pos, "out of memory");
    int rc = ps->glob && strpbrk(path, "*?[") != NULL ? include_glob(ps, parent, node, path, depth)
                                                      : include_file(ps, parent, node, path, depth);
    free(path);
    return rc;
}

static int parse_statements(struct parser *ps, struct lexer *lx, struct conf_node *parent,
                            const struct conf_node *open, unsigned depth);

/* Reads the rest of the statement `node` (its name is read) and adds it to
 * `parent`, or expands it there if it is an include. */
static int parse_statement(struct parser *ps, struct lexer *lx, struct conf_node *parent,
                           struct conf_node *node, unsigned depth)
{
    for (;;) {
        struct token tok;
        if (conf__next_token(ps->error, lx, &tok) != 0)
            return -1;
        if (tok.type == TOKEN_WORD) {
            if (add_arg(ps, node, &tok) != 0)
                return -1;
            continue;
        }
        if (tok.type == TOKEN_SEMICOLON)
            break;
        if (tok.type == TOKEN_OPEN) {
            if (depth >= MAX_BLOCK_DEPTH)
                return conf__error_at(ps->error, &tok.pos, "blocks nested more than %d deep",
                                      MAX_BLOCK_DEPTH);
            node->block = true;
            node->block_pos = tok.pos;
            if (parse_statements(ps, lx, node, node, depth + 1) != 0)
                return -1;
            break;
        }
        if (tok.type == TOKEN_CLOSE)
            return conf__error_at(ps->error, &tok.pos, "unexpected \"}\"");
        return conf__error_at(ps->error, &tok.pos,
                              "unexpected end of file, expecting \";\" or \"}\"");
    }
    if (strcmp(node->name.text, "include") == 0)
        return include(ps, parent, node, depth);
    /* nginx's "http { ... }" at top level holds what corral writes at top
     * level: its directives join the main block where it stands. */
    if (parent == ps->root && node->block && node->arg_count == 0 &&
        strcmp(node->name.text, "http") == 0) {
        for (size_t i = 0; i < node->child_count; i++)
            if (add_child(ps, parent, &node->children[i]) != 0)
                return -1;
        return 0;
    }
    return add_child(ps, parent, node);
}

/* Parses statements into `parent` up to the "}" that closes `open`, or to
 * the end of the file when `open` is NULL (a block never spans files). */
static int parse_statements(struct parser *ps, struct lexer *lx, struct conf_node *parent,
                            const struct conf_node *open, unsigned depth)
{
    for (;;) {
        struct token tok;
        if (conf__next_token(ps->error, lx, &tok) != 0)
            return -1;
        switch (tok.type) {
        case TOKEN_WORD: break;
        case TOKEN_END:
            if (open == NULL)
                return 0;
            return conf__error_at(ps->error, &tok.pos,
                                  "unexpected end of file, expecting \"}\" to close \"%s\" "
                                  "from line %u",
                                  open->name.text, open->name.pos.line);
        case TOKEN_CLOSE:
            if (open != NULL)
                return 0;
            return conf__error_at(ps->error, &tok.pos, "unexpected \"}\"");
        case TOKEN_SEMICOLON: return conf__error_at(ps->error, &tok.pos, "unexpected \";\"");
        case TOKEN_OPEN: return conf__error_at(ps->error, &tok.pos, "unexpected \"{\"");
        }
        struct conf_node node = {.name = {.text = tok.text, .pos = tok.pos}};
        int rc = parse_statement(ps, lx, parent, &node, depth);
        node_free(&node);
        if (rc != 0)
            return -1;
    }
}

static int parse_file(struct parser *ps, const char *key, const char *name, const char *text,
                      size_t len, struct conf_node *parent, unsigned depth)
{
    ps->reading[ps->depth] = key;
    ps->shown[ps->depth] = name;
    ps->depth++;
    struct lexer lx = {.p = text, .end = text + len, .pos = {.file = name, .line = 1, .col = 1}};
    int rc = parse_statements(ps, &lx, parent, NULL, depth);
    ps->depth--;
    return rc;
}

/* ------------------------------------------------------------------- API */

int conf_parse(const char *path, const char *text, size_t len, conf_read_file_fn read_file,
               void *read_arg, struct conf_config **out, struct conf_error *error)
{
    return conf_parse_each(path, text, len, read_file, read_arg, NULL, NULL, out, error);
}

int conf_parse_each(const char *path, const char *text, size_t len, conf_read_file_fn read_file,
                    void *read_arg, conf_report_fn report, void *report_arg,
                    struct conf_config **out, struct conf_error *error)
{
    struct conf_pos start = {.file = path, .line = 1, .col = 1};
    struct conf_node root = {0};
    struct parser ps = {
        .error = error,
        .read_file = read_file != NULL ? read_file : read_fs,
        .read_arg = read_arg,
        .glob = read_file == NULL,
    };
    *out = NULL;
    char *key = NULL;
    struct conf_config *config = calloc(1, sizeof(*config));
    if (config == NULL)
        goto out_of_memory;
    ps.config = config;
    conf__core_defaults(config);
    config->path = strdup(path);
    key = file_key(&ps, path);
    const char *name = file_name(&ps, path);
    if (config->path == NULL || key == NULL || name == NULL)
        goto out_of_memory;
    ps.root = &root;
    if (parse_file(&ps, key, name, text, len, &root, 0) != 0) {
        if (report != NULL)
            report(report_arg, error->text);
        goto fail;
    }
    if (conf__apply(config, &root, error, report, report_arg) != 0)
        goto fail;
    free(key);
    node_free(&root);
    *out = config;
    return 0;

out_of_memory:
    conf__error_at(error, &start, "out of memory");
    if (report != NULL)
        report(report_arg, error->text);
fail:
    free(key);
    node_free(&root);
    conf_free(config);
    return -1;
}

int conf_load(const char *path, struct conf_config **out, struct conf_error *error)
{
    return conf_load_each(path, NULL, NULL, out, error);
}

int conf_load_each(const char *path, conf_report_fn report, void *report_arg,
                   struct conf_config **out, struct conf_error *error)
{
    *out = NULL;
    size_t len;
    char *text = read_fs(path, &len, NULL);
    if (text == NULL) {
        struct conf_pos start = {.file = path, .line = 1, .col = 1};
        conf__error_at(error, &start, "cannot read: %s", strerror(errno));
        if (report != NULL)
            report(report_arg, error->text);
        return -1;
    }
    int rc = conf_parse_each(path, text, len, NULL, NULL, report, report_arg, out, error);
    free(text);
    return rc;
}

void conf__access_logs_free(struct conf_access_logs *logs)
{
    for (size_t i = 0; i < logs->count; i++) {
        free(logs->items[i].path);
        free(logs->items[i].format);
    }
    free(logs->items);
}

static void location_free(struct conf_location *location)
{
    free(location->path);
    conf__access_logs_free(&location->access_logs);
    free(location->nested); /* no path, no access_log: nothing of their own */
}

static void server_free(struct conf_server *server)
{
    for (size_t i = 0; i < server->listen_count; i++)
        free(server->listens[i].address);
    free(server->listens);
    for (size_t i = 0; i < server->server_name_count; i++)
        free(server->server_names[i]);
    free(server->server_names);
    free(server->server_name_pos);
    for (size_t i = 0; i < server->location_count; i++)
        location_free(&server->locations[i]);
    free(server->locations);
    conf__tls_free(&server->tls);
    conf__access_logs_free(&server->access_logs);
    conf__acme_certificate_free(&server->acme);
}

void conf_free(struct conf_config *config)
{
    if (config == NULL)
        return;
    conf__modules_free(config); /* before the servers and locations go */
    free(config->user);
    free(config->group);
    free(config->pid_file);
    free(config->quic_host_key);
    free(config->error_log);
    free(config->access_log);
    free(config->log_format);
    for (size_t i = 0; i < config->log_format_count; i++) {
        free(config->log_formats[i].name);
        free(config->log_formats[i].format);
    }
    free(config->log_formats);
    free(config->access_log_format);
    conf__access_logs_free(&config->access_logs);
    for (size_t i = 0; i < config->admin_listen_count; i++)
        free(config->admin_listens[i]);
    free(config->admin_listens);
    conf__admin_free(config);
    for (size_t i = 0; i < config->server_count; i++)
        server_free(&config->servers[i]);
    free(config->servers);
    conf__limit_zones_free(config);
    for (size_t i = 0; i < config->upstream_count; i++) {
        struct proxy_upstream_conf *upstream = &config->upstreams[i].upstream;
        free((void *)upstream->name);
        free((void *)upstream->hash_key);
        free((void *)upstream->health.uri);
        free((void *)upstream->health.grpc_service);
        for (size_t j = 0; j < upstream->resolver_count; j++)
            free((void *)upstream->resolvers[j]);
        for (size_t j = 0; j < upstream->server_count; j++) {
            free((void *)upstream->servers[j].address);
            free((void *)upstream->servers[j].service);
        }
        free((void *)upstream->servers);
        free(config->upstreams[i].server_pos);
        free(config->upstreams[i].health_match);
    }
    free(config->upstreams);
    conf__stream_free(&config->stream);
    conf__free_maps(config);
    conf__acme_free(config);
    for (size_t i = 0; i < config->mime_type_count; i++) {
        free(config->mime_types[i].extension);
        free(config->mime_types[i].type);
    }
    free(config->mime_types);
    free(config->default_type);
    conf__tls_free(&config->tls);
    for (size_t i = 0; i < config->file_count; i++)
        free(config->files[i]);
    free(config->files);
    free(config->path);
    free(config);
}
