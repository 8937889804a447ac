/*
 * runtime_limit.h: the limit zones a generation uses (runtime_limit.c),
 * found by name, and their metrics.
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

/* The zone `name` (its reference is the generation's), its compiled key
 * and its rate (0: a limit_conn_zone), for the limit module's build
 * (http_module_build.limit_zone).  Returns 0, or -ENOENT: none. */
int runtime_limits_find(const struct runtime_limits *limits, const char *name,
                        struct limit_zone **zone, const struct vars_template **key, uint64_t *rate);

/* The zones' counters, by zone. */
void runtime_limits_metrics(struct text *t);

#endif
