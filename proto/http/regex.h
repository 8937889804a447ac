/*
 * regex.h: the PCRE2 regexes of map and location, compiled once (with the
 * JIT where there is one) and matched without a heap allocation.
 */
#ifndef CORRAL_PROTO_REGEX_H
#define CORRAL_PROTO_REGEX_H

#include <stdbool.h>
#include <stddef.h>

struct http_regex;

/* The most capture pairs a match reports: $0..$9. */
#define HTTP_REGEX_PAIRS 10

/* Compiles `pattern`.  Returns 0 with *out, or -EINVAL with PCRE2's
 * message in `message` and the offset of the fault in *offset, or -ENOMEM. */
int regex_compile(const char *pattern, bool caseless, struct http_regex **out, char *message,
                  size_t size, size_t *offset);
void regex_free(struct http_regex *re);

/* Matches `subject`: the number of pairs set in `ovector` (start and end
 * offsets; unset groups have start > end), 0 when it does not match, or
 * HTTP_REGEX_GAVE_UP when PCRE2 stopped before knowing (its match or depth
 * limit, which a crafted subject can reach in a backtracking pattern; the
 * error is logged, at most once a second per thread).  A caller that
 * routes or rewrites by the result must not read that as "no match": the
 * next location or rule would get a request meant for this one.  nginx
 * answers 500 there, and so does corral. */
#define HTTP_REGEX_GAVE_UP (-1)
int regex_match(const struct http_regex *re, const char *subject, size_t len,
                size_t ovector[2 * HTTP_REGEX_PAIRS]);

/* The group number of a named group, or -1. */
int regex_group(const struct http_regex *re, const char *name, size_t len);

#endif
