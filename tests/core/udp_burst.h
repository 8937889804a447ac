/*
 * udp_burst.h: a burst of equal-sized datagrams sent in one sendmsg()
 * with UDP_SEGMENT (GSO), which a GRO socket over loopback reads as one
 * coalesced run; for the UDP and HTTP/3 tests.
 */
#ifndef CORRAL_TEST_UDP_BURST_H
#define CORRAL_TEST_UDP_BURST_H

#include <stddef.h>
#include <stdint.h>

/* Sends the `len` bytes at `data` on the connected UDP socket `fd` as
 * datagrams of `segment` bytes (the last may be shorter), in one call.
 * Fails the test unless the kernel takes them all. */
void udp_burst_send(int fd, const void *data, size_t len, uint16_t segment);

#endif
