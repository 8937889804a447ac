/*
 * runtime_vars.h: the variables of a generation: its maps and every config
 * value with $variables its sites use, compiled once when the generation
 * is built, each error reported at its file:line:col.
 */
#ifndef CORRAL_CMD_RUNTIME_VARS_H
#define CORRAL_CMD_RUNTIME_VARS_H

#include "conf/config.h"
#include "proto/policy/add_header.h"
#include "proto/http/regex.h"
#include "proto/policy/rewrite.h"
#include "proto/http/vars.h"

struct runtime_vars;

/* Compiles the config's maps and log_format.  Returns 0 with *out, or
 * -EINVAL (the problem logged) or -ENOMEM; *out is set either way, for
 * runtime_vars_free(). */
int runtime_vars_new(const struct conf_config *config, struct runtime_vars **out);
void runtime_vars_free(struct runtime_vars *vars);

/* The compiled format of the access log, or NULL for the default; and how
 * its values are escaped (log_format escape=). */
const struct vars_template *runtime_vars_log_format(const struct runtime_vars *vars);
enum vars_escape runtime_vars_log_escape(const struct runtime_vars *vars);

/* The compiled format named `name` (NULL: log_format's one string, else
 * the default), owned by `vars`, and its escaping.  The names were checked
 * by runtime_vars_new().  Returns 0, -EINVAL (logged) or -ENOMEM. */
int runtime_vars_log_format_for(struct runtime_vars *vars, const struct conf_config *config,
                                const char *name, const struct vars_template **out,
                                enum vars_escape *escape);

/* Compiles `text`, written at `pos` by `directive`, into *out, which
 * `vars` owns: NULL when the text holds no variable.  Returns 0, -EINVAL
 * (logged) or -ENOMEM. */
int runtime_vars_compile(struct runtime_vars *vars, const char *text, const struct conf_pos *pos,
                         const char *directive, const struct vars_template **out);

/* The same, a text without variables compiled too (*out never NULL on
 * success). */
int runtime_vars_compile_any(struct runtime_vars *vars, const char *text,
                             const struct conf_pos *pos, const char *directive,
                             const struct vars_template **out);

/* Compiles a location's regex into *out, which `vars` owns; a bad one is
 * reported at `pos` with PCRE2's message.  Returns 0, -EINVAL or -ENOMEM. */
int runtime_vars_regex(struct runtime_vars *vars, const char *pattern, bool caseless,
                       const struct conf_pos *pos, const char *directive,
                       const struct http_regex **out);

/* The regex whose named groups are variables for the values compiled from
 * now on (one location's); NULL: none. */
void runtime_vars_set_captures(struct runtime_vars *vars, const struct http_regex *re);

/* The server regex names whose groups the values compiled from now on
 * may read (vars.h's host_regexes); NULL, 0: none. */
void runtime_vars_set_host_regexes(struct runtime_vars *vars, const struct http_regex *const *res,
                                   size_t count);

/* `count` zeroed items of `size` bytes that `vars` owns; NULL when out of
 * memory. */
void *runtime_vars_calloc(struct runtime_vars *vars, size_t count, size_t size);

/* A server's "~REGEX" names among `names` (`count`, written at `pos`)
 * compiled caseless, as nginx's, in the order written, into *out (owned
 * by `vars`; NULL and 0 when there is none).  Returns 0, -EINVAL or
 * -ENOMEM. */
int runtime_vars_name_regexes(struct runtime_vars *vars, char *const *names,
                              const struct conf_pos *pos, size_t count,
                              const struct http_regex *const **out, size_t *out_count);

#endif
