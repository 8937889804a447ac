/*
 * vars_buf.c: the buffers values are evaluated into: on the caller's
 * stack, moved to the heap when they outgrow it, or fixed in size.
 */
#include "proto/http/vars.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void vars_buf_init(struct vars_buf *b, char *stack, size_t cap)
{
    *b = (struct vars_buf){.data = stack, .cap = cap, ._stack = stack, ._stack_cap = cap};
}

void vars_buf_fixed(struct vars_buf *b, char *buf, size_t cap)
{
    *b =
        (struct vars_buf){.data = buf, .cap = cap, .fixed = true, ._stack = buf, ._stack_cap = cap};
}

void vars_buf_free(struct vars_buf *b)
{
    if (b->data != b->_stack)
        free(b->data);
    b->data = b->_stack;
    b->cap = b->_stack_cap;
    b->len = 0;
}

/* Room for `more` bytes after `len`, on the heap; false (and `failed`)
 * when memory runs out. */
static bool grow(struct vars_buf *b, size_t more)
{
    size_t cap = b->cap > 0 ? b->cap : 64;
    while (cap - b->len < more) {
        if (cap > SIZE_MAX / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *grown = b->data == b->_stack ? malloc(cap) : realloc(b->data, cap);
    if (grown == NULL) {
        b->failed = true;
        return false;
    }
    if (b->data == b->_stack && b->len > 0)
        memcpy(grown, b->data, b->len);
    b->data = grown;
    b->cap = cap;
    return true;
}

void vars_buf_add(struct vars_buf *b, const char *data, size_t len)
{
    if (len == 0)
        return;
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    if (len > room && !b->fixed && !b->failed && grow(b, len))
        room = b->cap - b->len;
    size_t n = len < room ? len : room;
    if (n > 0)
        memcpy(b->data + b->len, data, n);
    b->len += b->fixed ? len : n; /* a fixed buffer counts the whole value */
}
