/*
 * h2_message.h: the checks RFC 9113 8.1-8.3 make on a message's decoded
 * header fields and on its trailers, one field at a time: a request's as
 * a server makes them, a response's (its interim 1xx heads included) as
 * a client makes them: which fields make the message malformed (a
 * stream error, RST_STREAM PROTOCOL_ERROR), and the content-length the
 * body must match.  Where RFC 9113 leaves a choice, it is
 * libnghttp2 1.52's, which the server used before (fuzz_h2_frame
 * compares the two).
 *
 * Ownership: the caller owns the struct, which holds no heap memory.
 */
#ifndef CORRAL_PROTO_HTTP2_H2_MESSAGE_H
#define CORRAL_PROTO_HTTP2_H2_MESSAGE_H

#include "proto/http2/hpack.h"

#include <stdbool.h>
#include <stdint.h>

/* What a field does to its message. */
enum h2_message_verdict {
    H2_MESSAGE_PASS,      /* a field to pass on */
    H2_MESSAGE_MALFORMED, /* the message is malformed (8.1.1) */
    H2_MESSAGE_DROP,      /* a field not passed on: a 204's "content-length: 0" */
};

/* The state of one header block's checks. */
struct h2_message {
    uint16_t seen; /* H2_MESSAGE_* flags of h2_message.c */
    /* A response's :status once its head ended; below 200 (0 before
     * any head, 1xx after an interim one) its final head is to come. */
    uint16_t status;
    bool response;
    int64_t content_length; /* the message's, -1: none (or CONNECT) */
};

/* Starts a request's head. */
void h2_message_begin(struct h2_message *m);

/* Starts a response's head, for a request whose method was HEAD or not
 * (`head`: the response has no body, whatever its content-length). */
void h2_message_begin_response(struct h2_message *m, bool head);

/* Checks one field of a request head (`trailers` false) or of its
 * trailers (true: the same struct, after the head's end).  Whether its
 * bytes may be in its name and value depends on those bytes alone (and
 * on m->response): *bytes_ok true says a field with the same name and
 * value passed that check before, so it is not made again; it is set to
 * whether the bytes pass, whatever the verdict. */
enum h2_message_verdict h2_message_field(struct h2_message *m, const struct hpack_field *f,
                                         bool trailers, bool *bytes_ok);

/* The head ended: false when it is malformed (a pseudo-header missing,
 * or CONNECT's rules broken, 8.3.1 and 8.5; a response's :status
 * missing, 8.3.2).  After an interim (1xx) response head, m->status
 * says so and the checks start again for the next head (8.1). */
bool h2_message_head_end(struct h2_message *m);

/* The response's final head came: what follows is its body, then its
 * trailers. */
static inline bool h2_message_final(const struct h2_message *m)
{
    return !m->response || m->status >= 200;
}

/* The body's bytes match the content-length, when the head gave one:
 * `received` so far, and whether the stream ended.  A response's body
 * (or its end) before its final head is malformed (8.1). */
static inline bool h2_message_body_ok(const struct h2_message *m, uint64_t received, bool end)
{
    if (!h2_message_final(m))
        return false;
    if (m->content_length < 0)
        return true;
    return end ? received == (uint64_t)m->content_length : received <= (uint64_t)m->content_length;
}

#endif
