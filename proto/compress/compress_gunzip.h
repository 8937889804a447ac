/*
 * compress_gunzip.h: a gzip body decoded (zlib's inflate) for a client
 * that does not take gzip, nginx's gunzip: its output goes on in pieces
 * of a set size, and stops whenever the consumer says it has enough, the
 * input not yet decoded then kept until the consumer asks for more.  A
 * hostile body (a bomb, a corrupt stream) costs a window, a piece and
 * the input the producer wrote past the consumer's "enough".
 */
#ifndef CORRAL_PROTO_COMPRESS_GUNZIP_H
#define CORRAL_PROTO_COMPRESS_GUNZIP_H

#include <stdbool.h>
#include <stddef.h>

struct compress_gunzip;

/* Where decoded bytes go (`len` > 0); returns whether to go on now
 * (false: the consumer is backed up, the rest waits for the next
 * compress_gunzip_write()). */
typedef bool (*compress_gunzip_emit_fn)(void *arg, const char *data, size_t len);

/* A decoder whose output goes to emit(arg, ...) in pieces of at most
 * `piece` bytes (> 0).  NULL: out of memory. */
struct compress_gunzip *compress_gunzip_new(size_t piece, compress_gunzip_emit_fn emit, void *arg);

void compress_gunzip_free(struct compress_gunzip *g);

/* Decodes `len` bytes of the body until the consumer stops it; what is
 * left is copied and kept.  While something is kept, more bytes are only
 * kept behind it; `len` 0 (the consumer wants more) decodes what is
 * kept, until the consumer stops it again.  Returns 0,
 * -EIO when the body is no gzip (corrupt, a bad check value, bytes after
 * the last member that begin no other) or -ENOMEM; after an error it does
 * nothing and returns it again.  Several members, one after the other,
 * decode as one body (RFC 1952 2.2). */
int compress_gunzip_write(struct compress_gunzip *g, const char *data, size_t len);

/* Whether the consumer stopped it: input kept, or output pending. */
bool compress_gunzip_holds(const struct compress_gunzip *g);

/* Whether the body so far ends a member: nothing kept and no member
 * begun and left unfinished.  A body that ends otherwise was cut off. */
bool compress_gunzip_complete(const struct compress_gunzip *g);

#endif
