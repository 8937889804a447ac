/*
 * fake_framer.h: a framer without sockets for the tests of response
 * filters: its exchange_ops record the head, body, trailers and end that
 * reach them (fake_seen), and take the router's set_handler and routed.
 */
#ifndef CORRAL_TEST_FAKE_FRAMER_H
#define CORRAL_TEST_FAKE_FRAMER_H

#include "proto/http/exchange.h"

#include <stddef.h>
#include <stdint.h>

/* What reached the framer since fake_exchange(). */
struct fake_seen {
    unsigned status; /* of the last head; 0: none */
    int begins;
    char headers[4096]; /* the last head's lines, NUL-terminated */
    int64_t content_length;
    char *body; /* all body bytes, NUL-terminated (never NULL) */
    size_t body_len;
    int writes;
    char trailers[128];
    int ends;
    int splices;
    int aborts;
    /* The output backs up (exchange_backed_up()) once the body reaches
     * this many bytes; 0: never.  The test sets it after fake_exchange(). */
    size_t backs_up_at;
};
extern struct fake_seen fake_seen;

extern const struct exchange_ops fake_framer_ops;

/* A zeroed exchange on the fake framer, with fake_seen cleared. */
struct exchange fake_exchange(void);

#endif
