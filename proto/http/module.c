/*
 * module.c: from the list of modules to what the router and the filter
 * chain walk per request: the lists are built once, so that a request
 * walks a flat array of steps as before, with nothing looked up.
 */
#include "proto/http/module.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>

static void add_step(struct router_table *t, enum router_phase phase, router_phase_fn fn)
{
    /* A fixed table: its size is a build-time fact, not an input. */
    if (t->step_count >= ROUTER_STEPS_MAX)
        abort();
    t->steps[t->step_count++] = (struct router_step){phase, fn};
}

void http_module_table(struct router_table *t, struct http_module *const *modules, size_t count,
                       uint32_t used)
{
    t->step_count = 0;
    for (unsigned p = 0; p < ROUTER_PHASES; p++) {
        enum router_phase phase = (enum router_phase)p;
        if (phase == ROUTER_FIND_LOCATION)
            add_step(t, phase, router_find_location);
        for (size_t m = 0; m < count; m++)
            for (size_t h = 0; (used >> m & 1) && h < modules[m]->phase_count; h++)
                if (modules[m]->phases[h].phase == phase)
                    add_step(t, phase, modules[m]->phases[h].fn);
        /* The refusal waits for the location's error pages. */
        if (phase == ROUTER_FIND_LOCATION)
            add_step(t, phase, router_refuse);
        if (phase == ROUTER_CONTENT)
            add_step(t, phase, router_content);
    }
    t->release_count = 0;
    t->answer = NULL;
    for (size_t m = 0; m < count; m++) {
        const struct http_module *mod = modules[m];
        if (!(used >> m & 1))
            continue;
        if (mod->release != NULL) {
            if (t->release_count >= ROUTER_RELEASES_MAX)
                abort();
            t->releases[t->release_count++] =
                (struct router_release){mod->release, mod->release_on_redirect};
        }
        if (mod->answer != NULL) {
            assert(t->answer == NULL); /* one module decorates them */
            t->answer = mod->answer;
        }
    }
}

void http_module_init(struct http_module *const *modules, size_t count)
{
    if (count > HTTP_MODULES_MAX)
        abort();
    unsigned place = 0, slot = 0;
    for (size_t m = 0; m < count; m++) {
        struct http_module *mod = modules[m];
        mod->index = (unsigned)m;
        /* struct exchange's ctx[] is to grow for more. */
        if (mod->slots > EXCHANGE_CTX_SLOTS - slot)
            abort();
        mod->slot = slot;
        slot += mod->slots;
        if (mod->vars != NULL && vars_module_add(mod->vars) != 0)
            abort(); /* the list is the build's: VARS_MODULE_LISTS_MAX is to grow */
        if (mod->filter != NULL) {
            /* One bit per place in struct exchange's filter masks. */
            if (place >= EXCHANGE_FILTER_MAX)
                abort();
            mod->filter->order = place++;
        }
    }
    http_module_table(&router_table, modules, count, UINT32_MAX);
}
