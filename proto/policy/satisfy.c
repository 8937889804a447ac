/*
 * satisfy.c: `satisfy all | any` (satisfy.h): its directive, its struct
 * per level, and the denial allow/deny notes under `any`, kept in the
 * module's context slot as a flag (no allocation).
 */
#include "proto/policy/satisfy.h"

#include "proto/http/module.h"

#include <stdint.h>

static const struct conf_keyword satisfy_keywords[] = {
    {"all", 0},
    {"any", 1},
};

static const struct conf_directive satisfy_directives[] = {
    {.name = "satisfy",
     .contexts = CONF_MAIN | CONF_SERVER | CONF_LOCATION,
     .min_args = 1,
     .max_args = 1,
     .kind = CONF_KIND_KEYWORD,
     .base = CONF_BASE_MODULE,
     CONF_FIELD(struct satisfy_conf, any),
     CONF_KEYWORDS(satisfy_keywords),
     .keep_pos = true,
     .pos_offset = offsetof(struct satisfy_conf, pos)},
    {.name = NULL},
};

static int merge(void *conf, const void *parent, char *error, size_t len)
{
    (void)error, (void)len;
    struct satisfy_conf *c = conf;
    const struct satisfy_conf *p = parent;
    if (c->pos.file == NULL && p != NULL)
        c->any = p->any;
    return 0;
}

/* Only `any` at a location asks anything of the phase. */
static int build(const void *conf, const struct http_module_build *b, const void **out)
{
    *out = b->loc != NULL && ((const struct satisfy_conf *)conf)->any ? conf : NULL;
    return 0;
}

bool satisfy_any(const struct exchange *ex)
{
    return ex->loc != NULL && http_module_built_in(ex->loc->modules, &satisfy_module) != NULL;
}

void satisfy_note_denied(struct exchange *ex)
{
    exchange_set_ctx(ex, satisfy_module.slot, (void *)(uintptr_t)1);
}

int satisfy_phase(struct router_walk *w)
{
    bool denied = exchange_ctx(w->ex, satisfy_module.slot) != NULL;
    return denied && satisfy_any(w->ex) ? 403 : ROUTER_DECLINED;
}

/* The flag is the location's: a redirect walks again without it. */
static void release(struct exchange *ex)
{
    exchange_set_ctx(ex, satisfy_module.slot, NULL);
}

static const struct http_phase_handler satisfy_phases[] = {
    {ROUTER_ACCESS, satisfy_phase},
};

struct http_module satisfy_module = {
    .name = "satisfy",
    .conf =
        {
            .name = "satisfy",
            .directives = satisfy_directives,
            .size = sizeof(struct satisfy_conf),
            .merge = merge,
        },
    .build = build,
    .slots = 1,
    .phases = satisfy_phases,
    .phase_count = 1,
    .release = release,
    .release_on_redirect = true,
};
