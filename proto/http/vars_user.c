/*
 * vars_user.c: the values of the variables `set` defines, per exchange:
 * an array by variable index in a module's context slot, grown to the
 * highest index set, each value a copy, all freed with the exchange.
 */
#include "proto/http/vars.h"

#include <stdlib.h>
#include <string.h>

struct user_value {
    char *data; /* NULL: never set */
    size_t len;
};

struct user_values {
    size_t count;
    struct user_value items[];
};

bool vars_user_set(struct exchange *ex, unsigned slot, size_t index, const char *data, size_t len)
{
    struct user_values *v = exchange_ctx(ex, slot);
    if (v == NULL || index >= v->count) {
        size_t count = index + 1;
        struct user_values *grown = realloc(v, sizeof(*v) + count * sizeof(v->items[0]));
        if (grown == NULL)
            return false;
        size_t old = v != NULL ? grown->count : 0;
        memset(&grown->items[old], 0, (count - old) * sizeof(grown->items[0]));
        grown->count = count;
        v = grown;
        exchange_set_ctx(ex, slot, v);
    }
    /* One byte more: a value read as a string has its NUL. */
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return false;
    memcpy(copy, data, len);
    copy[len] = '\0';
    free(v->items[index].data);
    v->items[index] = (struct user_value){copy, len};
    return true;
}

bool vars_user_get(const struct exchange *ex, unsigned slot, size_t index, struct http_str *out)
{
    const struct user_values *v = exchange_ctx(ex, slot);
    if (v == NULL || index >= v->count || v->items[index].data == NULL)
        return false;
    *out = (struct http_str){v->items[index].data, v->items[index].len};
    return true;
}

void vars_user_release(struct exchange *ex, unsigned slot)
{
    struct user_values *v = exchange_ctx(ex, slot);
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->count; i++)
        free(v->items[i].data);
    free(v);
    exchange_set_ctx(ex, slot, NULL);
}
