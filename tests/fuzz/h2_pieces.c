/*
 * h2_pieces.c: the three pieces of h2_pieces.h.
 */
#include "h2_pieces.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void h2_pieces_init(struct h2_pieces *p, const uint8_t *data, size_t size)
{
    *p = (struct h2_pieces){.data = data, .size = size, .cuts = {size / 3, 2 * size / 3, size}};
    p->pending = malloc(size + 1);
    if (p->pending == NULL)
        abort();
}

void h2_pieces_feed(struct h2_pieces *p, size_t c, struct h2_session *s, uint64_t now)
{
    assert(c < H2_PIECES && p->cuts[c] >= p->from);
    memcpy(p->pending + p->have, p->data + p->from, p->cuts[c] - p->from);
    p->have += p->cuts[c] - p->from;
    p->from = p->cuts[c];
    if (s->error != H2_NO_ERROR)
        return;
    size_t used = h2_session_recv(s, p->pending, p->have, now);
    assert(used <= p->have);
    memmove(p->pending, p->pending + used, p->have - used);
    p->have -= used;
}

void h2_pieces_free(struct h2_pieces *p)
{
    free(p->pending);
}
