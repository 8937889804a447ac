/*
 * h2_pieces.h: an input read by an HTTP/2 session (h2_session.h) in three
 * pieces, cut at a third and at two thirds, as a connection presents it:
 * what the session did not consume comes again with the next piece.  The
 * differential targets (fuzz_h2_frame, fuzz_h2_client) read theirs so.
 */
#ifndef CORRAL_FUZZ_H2_PIECES_H
#define CORRAL_FUZZ_H2_PIECES_H

#include "proto/http2/h2_session.h"

#include <stddef.h>
#include <stdint.h>

#define H2_PIECES 3

struct h2_pieces {
    const uint8_t *data;
    size_t size;
    size_t cuts[H2_PIECES]; /* where each piece ends */
    uint8_t *pending;       /* the bytes not yet consumed */
    size_t have, from;
};

/* Cuts `data` (`size` bytes, kept by the caller); aborts without memory. */
void h2_pieces_init(struct h2_pieces *p, const uint8_t *data, size_t size);

/* Adds piece `c` (in order, from 0) to the pending bytes and, unless `s`
 * has ended the connection, gives them to h2_session_recv() at `now`. */
void h2_pieces_feed(struct h2_pieces *p, size_t c, struct h2_session *s, uint64_t now);

void h2_pieces_free(struct h2_pieces *p);

#endif
