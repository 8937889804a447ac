/*
 * runtime_limit.h: the limit zones a generation uses, the locations'
 * limits (runtime_limit.c), and their metrics.
 */
#ifndef CORRAL_CMD_RUNTIME_LIMIT_H
#define CORRAL_CMD_RUNTIME_LIMIT_H

#include "cmd/metrics.h"
#include "cmd/runtime_vars.h"
#include "conf/config.h"
#include "proto/policy/limit.h"

struct runtime_limits;

/* Takes a reference on every zone the config declares (the zone of the
 * same name, kind and size that a running generation has, else a new
 * one) and compiles their keys.  Returns 0, -EINVAL (logged) or -ENOMEM;
 * *out is set either way, for runtime_limits_free(). */
int runtime_limits_new(struct runtime_vars *vars, const struct conf_config *config,
                       struct runtime_limits **out);
/* Drops the references (NULL: nothing).  No exchange of the generation
 * may be left. */
void runtime_limits_free(struct runtime_limits *limits);

/* Sets `loc`'s limits (loc->limits) when `conf` has some and `loc` a
 * handler; what it builds `vars` owns.  Returns 0 or -ENOMEM. */
int runtime_limits_build(struct runtime_limits *limits, struct runtime_vars *vars,
                         const struct conf_location *conf, struct http_location *loc);

/* The zones' counters, by zone. */
void runtime_limits_metrics(struct text *t);

#endif
