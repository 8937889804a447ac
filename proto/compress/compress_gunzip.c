/*
 * compress_gunzip.c: the gzip decoder of compress_gunzip.h, zlib's
 * inflate writing into one piece of output at a time, handed on before
 * the next is made, so that what a member expands to never sits here.
 */
#include "proto/compress/compress_gunzip.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct compress_gunzip {
    z_stream z;
    compress_gunzip_emit_fn emit;
    void *arg;
    int error;
    bool started; /* input taken since the last member ended */
    bool stalled; /* the consumer stopped it: input, or output, waits */
    /* The input not yet decoded, from kept_off to kept_len. */
    char *kept;
    size_t kept_off, kept_len, kept_cap;
    size_t piece;
    char out[];
};

struct compress_gunzip *compress_gunzip_new(size_t piece, compress_gunzip_emit_fn emit, void *arg)
{
    assert(piece > 0 && piece <= UINT_MAX);
    if (piece > SIZE_MAX - sizeof(struct compress_gunzip))
        return NULL;
    struct compress_gunzip *g = malloc(sizeof(*g) + piece);
    if (g == NULL)
        return NULL;
    memset(g, 0, sizeof(*g));
    g->emit = emit;
    g->arg = arg;
    g->piece = piece;
    /* 16 + 15: a gzip wrapper (no zlib or raw stream), any window. */
    if (inflateInit2(&g->z, 16 + MAX_WBITS) != Z_OK) {
        free(g);
        return NULL;
    }
    return g;
}

void compress_gunzip_free(struct compress_gunzip *g)
{
    if (g == NULL)
        return;
    inflateEnd(&g->z);
    free(g->kept);
    free(g);
}

/* Decodes `len` bytes at `in` until they are all taken and nothing is
 * pending, the consumer stops it (g->stalled) or they are no gzip
 * (g->error).  Returns how many were taken. */
static size_t run(struct compress_gunzip *g, const char *in, size_t len)
{
    size_t taken = 0;
    for (;;) {
        size_t give = len - taken > UINT_MAX ? UINT_MAX : len - taken;
        g->z.next_in = (Bytef *)(uintptr_t)(in + taken);
        g->z.avail_in = (uInt)give;
        g->z.next_out = (Bytef *)g->out;
        g->z.avail_out = (uInt)g->piece;
        int rc = inflate(&g->z, Z_NO_FLUSH);
        size_t used = give - g->z.avail_in, made = g->piece - g->z.avail_out;
        taken += used;
        if (used > 0)
            g->started = true;
        if (rc == Z_STREAM_END) {
            /* A member ended with its check value right; another may follow. */
            g->started = false;
            if (inflateReset(&g->z) != Z_OK) {
                g->error = -EIO;
                return taken;
            }
        } else if (rc == Z_MEM_ERROR) {
            g->error = -ENOMEM;
            return taken;
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            g->error = -EIO; /* Z_DATA_ERROR: corrupt, or bytes that begin no member */
            return taken;
        }
        if (made > 0 && !g->emit(g->arg, g->out, made)) {
            g->stalled = true;
            return taken;
        }
        /* Room left over with all input taken: nothing more is pending. */
        if (taken == len && g->z.avail_out != 0)
            return taken;
        if (used == 0 && made == 0 && rc != Z_STREAM_END) {
            g->error = -EIO; /* no progress on input it refuses */
            return taken;
        }
    }
}

/* Keeps `len` bytes at `data` behind what is kept already. */
static int keep(struct compress_gunzip *g, const char *data, size_t len)
{
    if (g->kept_off > 0) {
        memmove(g->kept, g->kept + g->kept_off, g->kept_len - g->kept_off);
        g->kept_len -= g->kept_off;
        g->kept_off = 0;
    }
    if (len > g->kept_cap - g->kept_len) {
        if (len > SIZE_MAX / 2 - g->kept_len)
            return -ENOMEM;
        size_t cap = g->kept_cap > 0 ? g->kept_cap : 4096;
        while (cap < g->kept_len + len)
            cap *= 2;
        char *p = realloc(g->kept, cap);
        if (p == NULL)
            return -ENOMEM;
        g->kept = p;
        g->kept_cap = cap;
    }
    if (len > 0)
        memcpy(g->kept + g->kept_len, data, len);
    g->kept_len += len;
    return 0;
}

int compress_gunzip_write(struct compress_gunzip *g, const char *data, size_t len)
{
    if (g->error != 0)
        return g->error;
    if (g->stalled && len > 0) /* the consumer has not asked for more yet */
        return g->error = keep(g, data, len);
    if (g->stalled) {
        g->stalled = false;
        const char *k = g->kept != NULL ? g->kept + g->kept_off : "";
        g->kept_off += run(g, k, g->kept_len - g->kept_off);
        if (g->error != 0)
            return g->error;
        if (g->stalled)
            return 0;
        g->kept_off = g->kept_len = 0;
        return 0;
    }
    if (len == 0)
        return 0;
    size_t taken = run(g, data, len);
    if (g->error == 0 && g->stalled)
        g->error = keep(g, data + taken, len - taken);
    return g->error;
}

bool compress_gunzip_holds(const struct compress_gunzip *g)
{
    return g->stalled;
}

bool compress_gunzip_complete(const struct compress_gunzip *g)
{
    return g->error == 0 && !g->started && !g->stalled;
}
