/*
 * pair.h: loopback TCP pairs for the connection tests: a corral connection
 * on a loop the test runs itself, and the plain socket at its other end.
 */
#ifndef CORRAL_TEST_PAIR_H
#define CORRAL_TEST_PAIR_H

#include <corral.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Connects a corral connection on `loop` to a socket of the test's and runs
 * the loop until it is open.  *peer_fd is the other end: blocking, with 10 s
 * send and receive timeouts.  Fails the test on error. */
corral_conn *pair_open(corral_loop *loop, const struct corral_conn_handler *handler, void *data,
                       int *peer_fd);

/* pair_open() whose end *peer_fd has a receive buffer of `rcvbuf` bytes
 * from its first segment on: set on the listening socket, which the
 * accepted one inherits.  Set after the handshake, it comes too late for
 * the window already advertised, and a sender that fills a window larger
 * than what the buffer now takes creeps along on its window probes. */
corral_conn *pair_open_small(corral_loop *loop, const struct corral_conn_handler *handler,
                             void *data, int *peer_fd, int rcvbuf);

/* Runs `loop` until done(arg) is true; fails the test after timeout_ms. */
void pair_run_until(corral_loop *loop, bool (*done)(void *arg), void *arg, int timeout_ms);

/* The byte at `offset` of the test streams. */
static inline unsigned char pair_pattern(uint64_t offset)
{
    return (unsigned char)((offset * 131u) >> 3 ^ offset >> 17);
}

/* Fills buf with the stream's bytes from `offset` on. */
void pair_fill(char *buf, size_t len, uint64_t offset);

#endif
