/*
 * udp_burst.c: one GSO send of a burst of datagrams; see udp_burst.h.
 */
#include "udp_burst.h"

#include "../helpers.h"

#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

void udp_burst_send(int fd, const void *data, size_t len, uint16_t segment)
{
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(uint16_t))];
    } control = {0};
    struct iovec iov = {(void *)data, len};
    struct msghdr hdr = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.bytes,
                         .msg_controllen = sizeof(control.bytes)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&hdr);
    c->cmsg_level = IPPROTO_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(segment));
    memcpy(CMSG_DATA(c), &segment, sizeof(segment));
    ck_assert_int_eq(sendmsg(fd, &hdr, 0), (ssize_t)len);
}
