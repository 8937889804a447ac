/*
 * static_send.h: the body of a static file's response, after its head:
 * the whole file, one range, or several as multipart/byteranges, read
 * with pread() into a buffer and written to the exchange as the client
 * takes it (exchange_backed_up(), on_drain).  A file that ends before the
 * length announced cuts the response off (exchange_abort()).
 */
#ifndef CORRAL_PROTO_STATIC_SEND_H
#define CORRAL_PROTO_STATIC_SEND_H

#include "proto/http/exchange.h"
#include "proto/static/static_file.h"
#include "proto/static/static_range.h"

#include <stddef.h>
#include <stdint.h>

/* What to send of a file of `size` bytes: `count` ranges of `ranges`
 * (0: the whole file; more than 1: multipart/byteranges, each part of
 * Content-Type `type`, between `boundary`s). */
struct static_send_plan {
    uint64_t size;
    const struct static_range *ranges;
    size_t count;
    const char *type;
    const char *boundary; /* at most 32 bytes */
    bool sendfile;        /* the ranges' bytes by exchange_sendfile() where it can */
    /* Where the body starts in the file: a range's byte N is the file's
     * byte base + N (the cache's entries start with their own header). */
    uint64_t base;
};

/* The body's length for `plan`. */
uint64_t static_send_length(const struct static_send_plan *plan);

/* Sends the body planned, once the head is begun: takes `file` (closed
 * when done), ends the exchange at the end, or aborts it on a read error
 * or a file shorter than planned.  On failure to start (out of memory)
 * aborts it too. */
void static_send_start(struct exchange *ex, struct static_file *file,
                       const struct static_send_plan *plan);

/* The handler's on_drain and on_abort while a body is being sent. */
void static_send_on_drain(struct exchange *ex);
void static_send_on_abort(struct exchange *ex);

#endif
