/*
 * core_directives.c: the top-level directives that shape the process rather
 * than the HTTP traffic: worker pool and wakeup mode, limits, privilege
 * drop, pid file, logs, and the admin listener.
 */
#include "registry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Workers are threads; more than this is a typo ("workers 80000"), not a
 * plan. */
#define MAX_WORKERS 1024

/* The kernel refuses busy_poll_usecs above S32_MAX in EPIOCSPARAMS. */
#define MAX_BUSY_POLL_USECS 2147483647u

void conf__core_defaults(struct conf_config *config)
{
    config->workers = 0;
    config->wakeup = CORRAL_WAKEUP_AUTO;
    config->max_connections = 10000;
    config->busy_poll_usecs = 0;
    config->io_uring = true;
    config->drain_timeout_ms = 10000;
    config->quic_bpf = true;
    config->quic_gso = true;
    config->http3_max_concurrent_streams = 128;
    config->quic_retry_threshold = 100;
    config->http3_stream_buffer_size = 64 * 1024;
    config->log_level = CORRAL_LOG_INFO;
    /* What a server does not set; the modules own these defaults. */
    config->http.limits = HTTP_LIMITS_DEFAULT;
    config->http.http2 = HTTP2_CONF_DEFAULT;
    config->tls.settings = TLS_SERVER_CONF_DEFAULT;
}

/* wakeup auto|roundrobin|affinity|exclusive|reuseport|herd|balanced [spill=F]
 * spill: affinity over eBPF, how far above their share of the load a CPU's
 * workers may go before its connections spill to others (1 < F <= 100). */
static int apply_wakeup(struct conf_state *state, const struct conf_node *node,
                        const struct conf_directive *directive)
{
    (void)directive;
    const struct conf_arg *arg = &node->args[0];
    if (corral_wakeup_mode_parse(arg->text, &state->config->wakeup) != 0)
        return conf__error_at(state->error, &arg->pos,
                              "unknown wakeup mode \"%s\" (expected auto, roundrobin, affinity, "
                              "exclusive, reuseport, herd or balanced)",
                              arg->text);
    if (node->arg_count < 2)
        return 0;
    arg = &node->args[1];
    if (state->config->wakeup != CORRAL_WAKEUP_AFFINITY)
        return conf__error_at(state->error, &arg->pos,
                              "\"%s\": only affinity takes spill=", arg->text);
    char *end = NULL;
    errno = 0;
    bool prefixed = strncmp(arg->text, "spill=", 6) == 0;
    double spill = prefixed ? strtod(arg->text + 6, &end) : 0;
    if (!prefixed || end == arg->text + 6 || *end != '\0' || errno != 0 ||
        !(spill > 1.0 && spill <= 100.0))
        return conf__error_at(state->error, &arg->pos,
                              "bad \"%s\" (expected spill=FACTOR, above 1 and at most 100, "
                              "such as spill=1.5)",
                              arg->text);
    state->config->wakeup_spill = spill;
    return 0;
}

/*
 * busy_poll TIME: how long a worker's epoll_wait may spin on the device
 * queue before sleeping.  Useful values are tens of microseconds, so unlike
 * every other duration a bare number means microseconds ("50" = 50 us); a
 * "us" suffix says the same explicitly, "ms" and "s" work as elsewhere, and
 * 0 or "off" disables it.
 */
static int apply_busy_poll(struct conf_state *state, const struct conf_node *node,
                           const struct conf_directive *directive)
{
    (void)directive;
    const struct conf_arg *arg = &node->args[0];
    const char *text = arg->text;
    size_t len = strlen(text);
    uint64_t usecs;
    unsigned n;
    uint32_t ms;
    char digits[16];
    if (strcmp(text, "off") == 0) {
        usecs = 0;
    } else if (conf__parse_uint(text, &n) == 0) {
        usecs = n;
    } else if (errno == ERANGE) {
        goto too_large;
    } else if (len > 2 && strcmp(text + len - 2, "us") == 0) {
        if (len - 2 >= sizeof(digits))
            goto too_large;
        memcpy(digits, text, len - 2);
        digits[len - 2] = '\0';
        if (conf__parse_uint(digits, &n) != 0)
            goto invalid;
        usecs = n;
    } else if (conf_parse_duration(text, &ms) == 0) {
        usecs = (uint64_t)ms * 1000;
    } else if (errno == ERANGE) {
        goto too_large;
    } else {
        goto invalid;
    }
    if (usecs > MAX_BUSY_POLL_USECS)
        goto too_large;
    state->config->busy_poll_usecs = (unsigned)usecs;
    return 0;

invalid:
    return conf__error_at(state->error, &arg->pos,
                          "invalid busy_poll time \"%s\" (expected microseconds such as 50 or "
                          "50us, a duration such as 1ms, or off)",
                          text);
too_large:
    return conf__error_at(state->error, &arg->pos,
                          "busy_poll time \"%s\" is too large (at most %uus)", text,
                          MAX_BUSY_POLL_USECS);
}

/* error_log PATH|stderr [error|warn|info|debug] */
static int apply_error_log(struct conf_state *state, const struct conf_node *node,
                           const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    if (node->arg_count == 2) {
        const struct conf_arg *level = &node->args[1];
        static const enum corral_log_level levels[] = {CORRAL_LOG_ERROR, CORRAL_LOG_WARN,
                                                       CORRAL_LOG_INFO, CORRAL_LOG_DEBUG};
        /* nginx's levels that corral folds into its own */
        static const struct {
            const char *nginx;
            enum corral_log_level level;
        } nginx_levels[] = {{"notice", CORRAL_LOG_INFO},
                            {"crit", CORRAL_LOG_ERROR},
                            {"alert", CORRAL_LOG_ERROR},
                            {"emerg", CORRAL_LOG_ERROR}};
        size_t i = 0;
        while (i < sizeof(levels) / sizeof(levels[0]) &&
               strcmp(level->text, corral_log_level_name(levels[i])) != 0)
            i++;
        size_t k = 0;
        while (i == sizeof(levels) / sizeof(levels[0]) &&
               k < sizeof(nginx_levels) / sizeof(nginx_levels[0]) &&
               strcmp(level->text, nginx_levels[k].nginx) != 0)
            k++;
        if (i == sizeof(levels) / sizeof(levels[0]) &&
            k == sizeof(nginx_levels) / sizeof(nginx_levels[0]))
            return conf__error_at(state->error, &level->pos,
                                  "unknown log level \"%s\" (expected error, warn, info or debug; "
                                  "nginx's notice, crit, alert and emerg are taken too)",
                                  level->text);
        config->log_level =
            i < sizeof(levels) / sizeof(levels[0]) ? levels[i] : nginx_levels[k].level;
    }
    if (strcmp(node->args[0].text, "stderr") == 0)
        return 0;
    return conf__arg_path(state, &node->args[0], &config->error_log);
}

/* admin { listen ADDR [tls]; ... }: where /metrics, /status, /healthz and
 * /readyz are served, and who may read them. */
static int apply_admin(struct conf_state *state, const struct conf_node *node,
                       const struct conf_directive *directive)
{
    (void)directive;
    struct conf_admin *admin = &state->config->admin;
    state->admin_node = node;
    admin->pos = node->name.pos;
    admin->tls.settings = TLS_SERVER_CONF_DEFAULT;
    state->in_admin = true;
    int err = conf__apply_block(state, node, CONF_ADMIN);
    state->in_admin = false;
    if (err != 0)
        return -1;
    if (state->config->admin_listen_count == 0)
        return conf__error_at(state->error, &node->name.pos, "\"admin\" has no \"listen\"");
    return conf__tls_check_admin(state);
}

static int apply_admin_listen(struct conf_state *state, const struct conf_node *node,
                              const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    const struct conf_arg *arg = &node->args[0];
    if (conf__arg_address(state, arg, "listen address") != 0)
        return -1;
    if (node->arg_count > 1 && strcmp(node->args[1].text, "tls") != 0)
        return conf__error_at(state->error, &node->args[1].pos,
                              "unknown admin listen parameter \"%s\" (expected tls)",
                              node->args[1].text);
    for (const struct conf_node *earlier = state->admin_node->children; earlier < node; earlier++) {
        /* An earlier listen without an address was refused already; the
         * walk goes on past errors (corral -t reports them all). */
        if (strcmp(earlier->name.text, "listen") != 0 || earlier->arg_count == 0 ||
            !conf_same_address(earlier->args[0].text, arg->text))
            continue;
        char where[300];
        return conf__error_at(state->error, &arg->pos, "duplicate listen \"%s\" (first at %s)",
                              arg->text,
                              conf__where(where, sizeof(where), &arg->pos, &earlier->args[0].pos));
    }
    char **listens = conf__grow(state, &arg->pos, config->admin_listens, config->admin_listen_count,
                                sizeof(*listens));
    if (listens == NULL)
        return -1;
    config->admin_listens = listens;
    struct conf_admin_listen *more = conf__grow(state, &arg->pos, config->admin.listens,
                                                config->admin_listen_count, sizeof(*more));
    if (more == NULL)
        return -1;
    config->admin.listens = more;
    more[config->admin_listen_count] = (struct conf_admin_listen){node->arg_count > 1, arg->pos};
    listens[config->admin_listen_count] = conf__strdup(state, &arg->pos, arg->text);
    if (listens[config->admin_listen_count] == NULL)
        return -1;
    config->admin_listen_count++;
    return 0;
}

void conf__admin_free(struct conf_config *config)
{
    free(config->admin.listens);
    access_conf_free(&config->admin.access);
    free(config->admin.token_file);
    conf__tls_free(&config->admin.tls);
}

static const struct conf_keyword log_escapes[] = {
    {"default", CONF_LOG_ESCAPE_DEFAULT},
    {"json", CONF_LOG_ESCAPE_JSON},
    {"none", CONF_LOG_ESCAPE_NONE},
};

/* log_format STRING: the default access log line, as it always was.
 * log_format NAME [escape=default|json|none] STRING...: a format that
 * access_log names, its strings joined (nginx's syntax).  The daemon
 * knows the variables, so it checks them. */
static int apply_log_format(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    struct conf_config *config = state->config;
    if (node->arg_count == 1) {
        if (config->log_format != NULL)
            return conf__error_at(state->error, &node->name.pos,
                                  "duplicate \"log_format\" without a name");
        return conf__apply_setting(state, node, directive);
    }
    const struct conf_arg *name = &node->args[0];
    char where[300];
    if (strcmp(name->text, "combined") == 0)
        return conf__error_at(state->error, &name->pos,
                              "log_format \"combined\" is built in: give yours another name");
    for (size_t i = 0; i < config->log_format_count; i++)
        if (strcmp(config->log_formats[i].name, name->text) == 0)
            return conf__error_at(
                state->error, &name->pos, "duplicate log_format \"%s\" (first at %s)", name->text,
                conf__where(where, sizeof(where), &name->pos, &config->log_formats[i].pos));
    size_t first = 1;
    int escape = CONF_LOG_ESCAPE_DEFAULT;
    if (strncmp(node->args[1].text, "escape=", 7) == 0) {
        const struct conf_arg word = {node->args[1].text + 7, node->args[1].pos};
        if (conf__arg_keyword(state, &word, "log_format escape", log_escapes,
                              sizeof(log_escapes) / sizeof(log_escapes[0]), &escape) != 0)
            return -1;
        first = 2;
    }
    size_t len = 0;
    for (size_t i = first; i < node->arg_count; i++)
        len += strlen(node->args[i].text);
    if (len == 0)
        return conf__error_at(state->error, &node->args[node->arg_count - 1].pos,
                              "empty log format");
    struct conf_log_format *formats = conf__grow(state, &name->pos, config->log_formats,
                                                 config->log_format_count, sizeof(*formats));
    if (formats == NULL)
        return -1;
    config->log_formats = formats;
    /* Counted at once: conf_free() frees what it holds if the rest fails. */
    struct conf_log_format *f = &formats[config->log_format_count++];
    f->escape = (enum conf_log_escape)escape;
    f->pos = name->pos;
    f->format_pos = node->args[first].pos;
    f->name = conf__strdup(state, &name->pos, name->text);
    f->format = malloc(len + 1);
    if (f->name == NULL || f->format == NULL)
        return conf__error_at(state->error, &name->pos, "out of memory");
    char *p = f->format;
    for (size_t i = first; i < node->arg_count; i++) {
        size_t n = strlen(node->args[i].text);
        memcpy(p, node->args[i].text, n);
        p += n;
    }
    *p = '\0';
    return 0;
}

/* nginx's buffer when flush= comes without buffer=. */
#define ACCESS_LOG_BUFFER_DEFAULT (64 * 1024)
/* A ceiling, not the machine's memory: every worker has a buffer, and one
 * much larger than a second of lines only delays them. */
#define ACCESS_LOG_BUFFER_MAX (16u * 1024 * 1024)

/* access_log PATH [FORMAT] [buffer=SIZE] [flush=TIME] | off: FORMAT is a
 * log_format's name.  Each level (top, server, location) has a list; the
 * top level's first also fills the config's access_log fields. */
static int apply_access_log(struct conf_state *state, const struct conf_node *node,
                            const struct conf_directive *directive)
{
    (void)directive;
    struct conf_config *config = state->config;
    struct conf_stream *stream = &config->stream;
    struct conf_access_logs *logs = state->location != NULL   ? &state->location->access_logs
                                    : state->server != NULL   ? &state->server->access_logs
                                    : stream->current != NULL ? &stream->current->access_logs
                                    : stream->applying        ? &stream->access_logs
                                                              : &config->access_logs;
    logs->set = true;
    const struct conf_arg *path = &node->args[0];
    if (strcmp(path->text, "off") == 0) {
        if (node->arg_count > 1)
            return conf__error_at(state->error, &node->args[1].pos,
                                  "\"access_log off\" takes nothing more");
        for (size_t i = 0; i < logs->count; i++) { /* the level's lines before it */
            free(logs->items[i].path);
            free(logs->items[i].format);
        }
        logs->count = 0;
        if (logs == &config->access_logs) {
            free(config->access_log);
            free(config->access_log_format);
            config->access_log = config->access_log_format = NULL;
            config->access_log_buffer = 0;
            config->access_log_flush_ms = 0;
        }
        return 0;
    }
    struct conf_access_log *items =
        conf__grow(state, &path->pos, logs->items, logs->count, sizeof(*items));
    if (items == NULL)
        return -1;
    logs->items = items;
    /* Counted at once: conf_free() frees what it holds if the rest fails. */
    struct conf_access_log *log = &items[logs->count++];
    log->pos = path->pos;
    if (conf__arg_path(state, path, &log->path) != 0)
        return -1;
    for (size_t i = 1; i < node->arg_count; i++) {
        const struct conf_arg *arg = &node->args[i];
        if (strncmp(arg->text, "buffer=", 7) == 0) {
            const struct conf_arg value = {arg->text + 7, arg->pos};
            if (conf__arg_size(state, &value, &log->buffer) != 0)
                return -1;
            if (log->buffer == 0)
                return conf__error_at(state->error, &arg->pos, "\"buffer\" must be more than 0");
            /* Each worker allocates one at its first line. */
            if (log->buffer > ACCESS_LOG_BUFFER_MAX)
                return conf__error_at(state->error, &arg->pos,
                                      "access_log %s is too large (at most %um)", arg->text,
                                      ACCESS_LOG_BUFFER_MAX / (1024 * 1024));
        } else if (strncmp(arg->text, "flush=", 6) == 0) {
            const struct conf_arg value = {arg->text + 6, arg->pos};
            if (conf__arg_duration(state, &value, &log->flush_ms) != 0)
                return -1;
            if (log->flush_ms == 0)
                return conf__error_at(state->error, &arg->pos, "\"flush\" must be more than 0");
        } else if (strncmp(arg->text, "if=", 3) == 0) {
            return conf__error_at(state->error, &arg->pos,
                                  "\"if=\" is nginx's: corral has no conditional logging; a "
                                  "location's own access_log (or access_log off) chooses what is "
                                  "logged");
        } else if (strncmp(arg->text, "gzip", 4) == 0 &&
                   (arg->text[4] == '\0' || arg->text[4] == '=')) {
            return conf__error_at(state->error, &arg->pos,
                                  "\"gzip\" is nginx's: corral writes its logs uncompressed; "
                                  "compress them when they rotate");
        } else if (i == 1) {
            log->format_pos = arg->pos;
            log->format = conf__strdup(state, &arg->pos, arg->text);
            if (log->format == NULL)
                return -1;
        } else {
            return conf__error_at(state->error, &arg->pos,
                                  "unknown access_log parameter \"%s\" (expected buffer=SIZE "
                                  "or flush=TIME)",
                                  arg->text);
        }
    }
    if (log->flush_ms > 0 && log->buffer == 0)
        log->buffer = ACCESS_LOG_BUFFER_DEFAULT;
    if (logs != &config->access_logs || config->access_log != NULL)
        return 0;
    config->access_log = conf__strdup(state, &path->pos, log->path);
    config->access_log_format =
        log->format != NULL ? conf__strdup(state, &log->format_pos, log->format) : NULL;
    config->access_log_format_pos = log->format_pos;
    config->access_log_buffer = log->buffer;
    config->access_log_flush_ms = log->flush_ms;
    return config->access_log != NULL && (log->format == NULL || config->access_log_format != NULL)
               ? 0
               : -1;
}

/* user NAME [GROUP]: nginx's form sets the group too. */
static int apply_user(struct conf_state *state, const struct conf_node *node,
                      const struct conf_directive *directive)
{
    if (conf__apply_setting(state, node, directive) != 0)
        return -1;
    if (node->arg_count < 2)
        return 0;
    struct conf_config *config = state->config;
    if (conf__find_child(state->root, "group") != NULL)
        return conf__error_at(state->error, &node->args[1].pos,
                              "the group is set twice (here and by \"group\")");
    config->group = conf__strdup(state, &node->args[1].pos, node->args[1].text);
    return config->group != NULL ? 0 : -1;
}

/* Each entry sets one field through conf__apply_setting(), except those
 * with an apply function: wakeup (the library owns the mode names),
 * busy_poll (a syntax of its own), error_log (two settings) and the admin
 * block with its listen list.  One directive per entry: a table reads
 * better than what the formatter makes of it. */
/* clang-format off */
#define MAIN_FIELD(field) .contexts = CONF_MAIN, .min_args = 1, .max_args = 1, \
    .base = CONF_BASE_MAIN, CONF_FIELD(struct conf_config, field)

const struct conf_directive conf__core_directives[] = {
    {.name = "workers", MAIN_FIELD(workers), .kind = CONF_KIND_COUNT, .min = 1,
     .max = MAX_WORKERS, .zero_word = "auto", .what = "worker count"},
    {.name = "wakeup", .contexts = CONF_MAIN, .min_args = 1, .max_args = 2,
     .apply = apply_wakeup},
    /* per worker */
    {.name = "max_connections", MAIN_FIELD(max_connections), .kind = CONF_KIND_COUNT, .min = 1},
    {.name = "busy_poll", .contexts = CONF_MAIN, .min_args = 1, .max_args = 1,
     .apply = apply_busy_poll},
    /* corral's: sends and reads batched, a system call per batch */
    {.name = "io_uring", MAIN_FIELD(io_uring), .kind = CONF_KIND_SWITCH},
    /* how long a graceful stop or reload waits for in-flight requests */
    {.name = "drain_timeout", MAIN_FIELD(drain_timeout_ms), .kind = CONF_KIND_DURATION},
    /* A classic BPF program on each quic listen's socket group (no
     * privilege needed, unlike nginx's eBPF one) */
    {.name = "quic_bpf", MAIN_FIELD(quic_bpf), .kind = CONF_KIND_SWITCH},
    /* nginx's is per server, off by default */
    {.name = "quic_gso", MAIN_FIELD(quic_gso), .kind = CONF_KIND_SWITCH},
    {.name = "quic_retry", MAIN_FIELD(quic_retry), .kind = CONF_KIND_SWITCH},
    {.name = "quic_host_key", MAIN_FIELD(quic_host_key), .kind = CONF_KIND_PATH},
    /* corral's: Retry only under a flood of Initials (0: never) */
    {.name = "quic_retry_threshold", MAIN_FIELD(quic_retry_threshold), .kind = CONF_KIND_COUNT,
     .max = 1000000, .zero_word = "off"},
    /* nginx's is per server and for TCP too; here quic listens' only */
    {.name = "ssl_early_data", MAIN_FIELD(ssl_early_data), .kind = CONF_KIND_SWITCH},
    /* nginx's are per server; here every quic listen's */
    {.name = "http3_max_concurrent_streams", MAIN_FIELD(http3_max_concurrent_streams),
     .kind = CONF_KIND_COUNT, .min = 1, .max = 65536},
    {.name = "http3_stream_buffer_size", MAIN_FIELD(http3_stream_buffer_size),
     .kind = CONF_KIND_SIZE, .min = 4096, .max = 16 * 1024 * 1024},
    /* how long a graceful stop keeps serving, not ready, before it drains */
    {.name = "shutdown_delay", MAIN_FIELD(shutdown_delay_ms), .kind = CONF_KIND_DURATION},
    /* looked up by the daemon when it drops privileges, so that a config
     * can be checked on a machine without those accounts */
    {.name = "user", .contexts = CONF_MAIN, .min_args = 1, .max_args = 2,
     .base = CONF_BASE_MAIN, CONF_FIELD(struct conf_config, user), .kind = CONF_KIND_STRING,
     .what = "user name", .apply = apply_user},
    {.name = "group", MAIN_FIELD(group), .kind = CONF_KIND_STRING, .what = "group name"},
    /* Relative paths, here and in every directive naming a file, are
     * relative to the directory of the config file they are written in,
     * not to wherever the daemon was started. */
    {.name = "pid_file", MAIN_FIELD(pid_file), .kind = CONF_KIND_PATH},
    {.name = "error_log", .contexts = CONF_MAIN, .min_args = 1, .max_args = 2,
     .apply = apply_error_log},
    {.name = "access_log",
     .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION | CONF_STREAM | CONF_STREAM_SERVER,
     .min_args = 1,
     .max_args = 4, .repeat = true,
     .apply = apply_access_log},
    {.name = "log_format", .contexts = CONF_MAIN | CONF_STREAM, .min_args = 1, .max_args = CONF_ARGS_MANY,
     .repeat = true, .base = CONF_BASE_MAIN, CONF_FIELD(struct conf_config, log_format),
     .kind = CONF_KIND_STRING, .what = "log format", .keep_pos = true,
     .pos_offset = offsetof(struct conf_config, log_format_pos), .apply = apply_log_format},
    {.name = "admin", .contexts = CONF_MAIN, .block = true, .apply = apply_admin},
    {.name = "listen", .contexts = CONF_ADMIN, .min_args = 1, .max_args = 2, .repeat = true,
     .apply = apply_admin_listen},
    /* the bearer token /metrics and /status want; read by the daemon at
     * each start and reload, so that a secret stays out of the config */
    {.name = "auth_token_file", .contexts = CONF_ADMIN, .min_args = 1, .max_args = 1,
     .base = CONF_BASE_MAIN, CONF_FIELD(struct conf_config, admin.token_file),
     .kind = CONF_KIND_PATH, .keep_pos = true,
     .pos_offset = offsetof(struct conf_config, admin.token_file_pos)},
    {.name = NULL},
};
/* clang-format on */
