/*
 * registry.c: the directive registry.  Each module lists its directives in
 * a table; this file walks the tree, finds each node's entry for the block
 * it is in, and runs the checks every directive shares (known, allowed
 * here, block form, argument count, repetition) before the entry applies it.
 */
#include "registry.h"

#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct conf_directive *const conf__tables[] = {
    conf__core_directives,     conf__http_directives,  conf__tls_directives,
    conf__access_directives,   conf__vars_directives,  conf__limit_directives,
    conf__upstream_directives, conf__nginx_directives, conf__stream_directives,
    conf__acme_directives,
};

const size_t conf__table_count = sizeof(conf__tables) / sizeof(conf__tables[0]);

/* In parentheses: registry.h may define a macro of the name. */
int(conf__error_at)(struct conf_error *error, const struct conf_pos *pos, const char *fmt, ...)
{
    int n =
        snprintf(error->text, sizeof(error->text), "%s:%u:%u: ", pos->file, pos->line, pos->col);
    if (n >= 0 && (size_t)n < sizeof(error->text)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(error->text + n, sizeof(error->text) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *conf__where(char *buf, size_t len, const struct conf_pos *here,
                        const struct conf_pos *there)
{
    if (strcmp(here->file, there->file) == 0)
        snprintf(buf, len, "line %u", there->line);
    else
        snprintf(buf, len, "%s:%u", there->file, there->line);
    return buf;
}

char *conf__strdup(struct conf_state *state, const struct conf_pos *pos, const char *text)
{
    char *copy = strdup(text);
    if (copy == NULL)
        conf__error_at(state->error, pos, "out of memory");
    return copy;
}

void *conf__grow(struct conf_state *state, const struct conf_pos *pos, void *array, size_t count,
                 size_t size)
{
    /* The arrays' owners keep no capacity field: the allocation's own size
     * is the capacity, so an array allocated some other way is grown
     * safely too.  Doubling keeps 100k locations from being copied 100k
     * times (glibc's mremap hides that cost; other allocators do not). */
    char *grown = array;
    if (count >= SIZE_MAX / size / 2 - 4)
        grown = NULL;
    else if (array == NULL || (count + 1) * size > malloc_usable_size(array))
        grown = realloc(array, (count < 4 ? 4 : count * 2) * size);
    if (grown == NULL) {
        conf__error_at(state->error, pos, "out of memory");
        return NULL;
    }
    memset(grown + count * size, 0, size);
    return grown;
}

/* ----------------------------------------------------------------- lookup */

/* conf/'s own tables, then the registered modules'. */
static const struct conf_directive *table(size_t t)
{
    return t < conf__table_count ? conf__tables[t] : conf__module_table(t - conf__table_count);
}

/* The entry for `name` in `context`, or NULL; *elsewhere collects the
 * contexts where an entry of that name would have been allowed. */
static const struct conf_directive *find_name(const char *name, unsigned context,
                                              unsigned *elsewhere)
{
    *elsewhere = 0;
    for (size_t t = 0; t < conf__table_count + conf__module_table_count(); t++) {
        for (const struct conf_directive *d = table(t); d->name != NULL; d++) {
            if (strcmp(d->name, name) != 0)
                continue;
            if (d->contexts & context)
                return d;
            *elsewhere |= d->contexts;
        }
    }
    return NULL;
}

#define SUGGEST_MAX_LEN 40

/* Optimal-string-alignment distance: edits plus swaps of neighbours, the
 * typos people make in names ("wrokers").  Both strings are at most
 * SUGGEST_MAX_LEN bytes. */
static unsigned edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    unsigned d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (unsigned)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (unsigned)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            unsigned best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* The known directive closest to a misspelt `name`, if one is close enough
 * to be what was meant; those allowed in `context` win ties. */
static const char *suggest(const char *name, unsigned context)
{
    size_t len = strlen(name);
    if (len > SUGGEST_MAX_LEN)
        return NULL;
    unsigned limit = len < 5 ? 1 : 2;
    const char *best = NULL;
    unsigned best_score = UINT_MAX;
    for (size_t t = 0; t < conf__table_count + conf__module_table_count(); t++) {
        for (const struct conf_directive *d = table(t); d->name != NULL; d++) {
            unsigned distance = edit_distance(name, d->name);
            if (distance > limit)
                continue;
            unsigned score = distance * 2 + ((d->contexts & context) ? 0 : 1);
            if (score < best_score) {
                best = d->name;
                best_score = score;
            }
        }
    }
    return best;
}

/* "at top level", "in server", "at top level or in server", "in server or
 * admin": where a directive may be written. */
static const char *describe_contexts(char *buf, size_t len, unsigned contexts)
{
    static const struct {
        unsigned context;
        const char *name;
    } names[] = {
        {CONF_SERVER, "server"},
        {CONF_LOCATION, "location"},
        {CONF_UPSTREAM, "upstream"},
        {CONF_ADMIN, "admin"},
        {CONF_EVENTS, "events"},
        {CONF_IF, "if"}, /* one or both */
        {CONF_OTEL_EXPORTER, "otel_exporter"},
        {CONF_STREAM, "stream"},
        {CONF_STREAM_SERVER, "stream server"},
    };
    const char *listed[sizeof(names) / sizeof(names[0])];
    size_t count = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (contexts & names[i].context)
            listed[count++] = names[i].name;

    size_t used = 0;
    buf[0] = '\0';
    if (contexts & CONF_MAIN)
        used += (size_t)snprintf(buf, len, count > 0 ? "at top level or in " : "at top level");
    else
        used += (size_t)snprintf(buf, len, "in ");
    for (size_t i = 0; i < count && used < len; i++) {
        const char *separator = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        used += (size_t)snprintf(buf + used, len - used, "%s%s", separator, listed[i]);
    }
    return buf;
}

/* As find_name(), trying the corral name of an nginx spelling too. */
static const struct conf_directive *find(const char *name, unsigned context, unsigned *elsewhere)
{
    const struct conf_directive *found = find_name(name, context, elsewhere);
    const char *alias = found == NULL && *elsewhere == 0 ? conf__nginx_alias(name) : NULL;
    return alias != NULL ? find_name(alias, context, elsewhere) : found;
}

/* Whether two sibling directives are the same one, spelt alike or one as
 * nginx spells it. */
static bool same_directive(const char *a, const char *b, const char *b_alias)
{
    return strcmp(a, b) == 0 || (b_alias != NULL && strcmp(a, b_alias) == 0);
}

/* ------------------------------------------------------------------ checks */

int conf__check_form(struct conf_error *error, const struct conf_node *node,
                     const struct conf_directive *directive)
{
    const char *name = node->name.text; /* as written: it may be nginx's spelling */
    if (directive->block && !node->block)
        return conf__error_at(error, &node->name.pos, "\"%s\" needs a \"{ ... }\" block", name);
    if (!directive->block && node->block)
        return conf__error_at(error, &node->block_pos, "\"%s\" does not take a \"{ ... }\" block",
                              name);

    unsigned min = directive->min_args, max = directive->max_args;
    if (node->arg_count >= min && node->arg_count <= max)
        return 0;
    char expected[64];
    if (max == 0)
        snprintf(expected, sizeof(expected), "no arguments");
    else if (min == max)
        snprintf(expected, sizeof(expected), "%u argument%s", min, min == 1 ? "" : "s");
    else if (max == CONF_ARGS_MANY)
        snprintf(expected, sizeof(expected), "at least %u argument%s", min, min == 1 ? "" : "s");
    else if (max == min + 1)
        snprintf(expected, sizeof(expected), "%u or %u arguments", min, max);
    else
        snprintf(expected, sizeof(expected), "%u to %u arguments", min, max);
    return conf__error_at(error, &node->name.pos, "\"%s\" takes %s, got %zu", name, expected,
                          node->arg_count);
}

static int check_unknown(struct conf_state *state, const struct conf_node *node, unsigned context,
                         unsigned elsewhere)
{
    const char *name = node->name.text;
    char here[96], there[96], note[400];
    if (elsewhere == 0 && conf__nginx_directive_note(name, note, sizeof(note)) != NULL)
        return conf__error_at(state->error, &node->name.pos, "%s", note);
    /* nginx's if takes most directives, as a location of its own; corral's
     * takes those of its safe subset: in a server the rewrite module's,
     * in a location add_header and proxy_pass too. */
    if ((context & CONF_IF) && strcmp(name, "if") == 0)
        return conf__error_at(state->error, &node->name.pos,
                              "\"if\" cannot be nested: combine the conditions with a \"map\", "
                              "or \"set\" a variable in the first \"if\" and test it in a "
                              "second one after it");
    if (context == CONF_SERVER_IF && elsewhere != 0)
        return conf__error_at(state->error, &node->name.pos,
                              "\"%s\" is not allowed inside \"if\": corral's \"if\" takes "
                              "return, rewrite, set and break only; put \"%s\" in a location "
                              "that a \"rewrite ... last\" in the \"if\" leads to",
                              name, name);
    if (context == CONF_LOCATION_IF && elsewhere != 0)
        return conf__error_at(state->error, &node->name.pos,
                              "\"%s\" is not allowed inside \"if\": in a location, corral's "
                              "\"if\" takes return, rewrite, set, break, add_header and "
                              "proxy_pass only; put \"%s\" in the location itself, or in a "
                              "location that a \"rewrite ... last\" in the \"if\" leads to",
                              name, name);
    if (elsewhere != 0)
        return conf__error_at(state->error, &node->name.pos,
                              "\"%s\" is not allowed %s (it belongs %s)", name,
                              describe_contexts(here, sizeof(here), context),
                              describe_contexts(there, sizeof(there), elsewhere));
    const char *maybe = suggest(name, context);
    if (maybe != NULL)
        return conf__error_at(state->error, &node->name.pos,
                              "unknown directive \"%s\" (did you mean \"%s\"?)", name, maybe);
    return conf__error_at(state->error, &node->name.pos, "unknown directive \"%s\"", name);
}

/* Hands the error just written on to the report, once: a block directive
 * that fails because a child did finds the text already taken. */
static void record_error(struct conf_state *state)
{
    char *text = state->error->text;
    if (text[0] == '\0')
        return;
    if (state->error_count == 0)
        memcpy(state->first_error, text, sizeof(state->first_error));
    state->error_count++;
    if (state->report != NULL)
        state->report(state->report_arg, text);
    text[0] = '\0';
}

/* A location has one content handler: the directive that gives it one is
 * the only one of its kind there. */
static int check_content(struct conf_state *state, const struct conf_node *node,
                         const struct conf_directive *directive)
{
    struct conf_location *location = state->location;
    if (location == NULL)
        return 0;
    if (location->content != NULL)
        return conf__error_at(state->error, &node->name.pos,
                              "\"%s\" cannot be combined with \"%s\" in one location",
                              directive->name, location->content);
    location->content = directive->name;
    location->content_pos = node->name.pos;
    return 0;
}

/* Checks and applies one child of a block; 0 or -1 with the error written. */
static int apply_child(struct conf_state *state, const struct conf_node *block, size_t i,
                       unsigned context)
{
    const struct conf_node *node = &block->children[i];
    unsigned elsewhere;
    const struct conf_directive *directive = find(node->name.text, context, &elsewhere);
    if (directive == NULL)
        return check_unknown(state, node, context, elsewhere);
    if (conf__check_form(state->error, node, directive) != 0)
        return -1;
    if (!directive->repeat) {
        /* Earlier siblings of the same name passed these checks, so
         * they are the same directive; so are those with its other
         * spelling. */
        const char *other = strcmp(node->name.text, directive->name) != 0
                                ? directive->name
                                : conf__nginx_alias_of(directive->name);
        for (size_t j = 0; j < i; j++) {
            const struct conf_node *first = &block->children[j];
            if (!same_directive(first->name.text, node->name.text, other))
                continue;
            char where[300];
            return conf__error_at(
                state->error, &node->name.pos, "duplicate \"%s\" (first at %s)", node->name.text,
                conf__where(where, sizeof(where), &node->name.pos, &first->name.pos));
        }
    }
    if (directive->content && check_content(state, node, directive) != 0)
        return -1;
    if (directive->passes && state->location != NULL)
        state->location->passes = true;
    conf_apply_fn apply = directive->apply != NULL ? directive->apply : conf__apply_setting;
    return apply(state, node, directive);
}

int conf__apply_block(struct conf_state *state, const struct conf_node *block, unsigned context)
{
    int rc = 0;
    for (size_t i = 0; i < block->child_count; i++) {
        if (apply_child(state, block, i, context) == 0)
            continue;
        rc = -1;
        record_error(state);
        if (state->error_count >= CONF_ERRORS_MAX)
            break;
    }
    return rc;
}

int conf__apply(struct conf_config *config, const struct conf_node *root, struct conf_error *error,
                conf_report_fn report, void *report_arg)
{
    struct conf_state state = {
        .config = config, .error = error, .root = root, .report = report, .report_arg = report_arg};
    error->text[0] = '\0';
    state.root_http2 = conf__find_child(root, "http2");
    state.root_http3 = conf__find_child(root, "http3");
    int rc = conf__apply_block(&state, root, CONF_MAIN);
    /* The whole-config passes assume every directive applied. */
    if (rc == 0)
        rc = conf__http_finish(&state);
    if (rc == 0)
        if (rc == 0)
            rc = conf__limit_finish(&state);
    if (rc == 0)
        rc = conf__modules_finish(&state);
    if (rc != 0) {
        record_error(&state);
        if (state.error_count > 0)
            memcpy(error->text, state.first_error, sizeof(error->text));
    }
    free(state.server_nodes);
    conf__index_free(&state.locations);
    conf__index_free(&state.addresses);
    conf__index_free(&state.names);
    conf__index_free(&state.upstream_names);
    free(state.address_uses);
    return rc;
}
