/*
 * udp_io.c: the UDP data path.  Reads batches with recvmmsg() and hands
 * them over with their ancillary data taken apart; sends batches with
 * sendmmsg(), runs of equal-sized datagrams as one GSO send while the
 * kernel takes them; and waits for writability on the caller's behalf.
 */
#include "internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/epoll.h>

/* recvmmsg() calls per readiness event: then other events get a turn, and
 * the level-triggered socket brings the worker back for the rest. */
#define READ_ROUNDS 4
/* A GSO send's bounds: the kernel's segment count (UDP_MAX_SEGMENTS, 64
 * before Linux 6.9) and an IP packet's 64 KiB with headers to spare. */
#define GSO_SEGMENTS_MAX 64
#define GSO_BYTES_MAX    65000

int (*corral__udp_sendmmsg)(int fd, struct mmsghdr *msgs, unsigned int count, int flags) = sendmmsg;

/* ------------------------------------------------------------ receiving */

/* Fills `out`'s local address, interface, ECN bits and GRO segment size
 * from the datagram's control messages. */
static void read_control(const corral_udp_socket *sock, struct msghdr *hdr,
                         struct corral_udp_msg *out)
{
    const corral_udp *udp = sock->udp;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(hdr); c != NULL; c = CMSG_NXTHDR(hdr, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo info;
            memcpy(&info, CMSG_DATA(c), sizeof(info));
            struct sockaddr_in *local = (struct sockaddr_in *)&out->local;
            local->sin_family = AF_INET;
            local->sin_addr = info.ipi_addr; /* the header's destination */
            local->sin_port = ((const struct sockaddr_in *)&udp->addr)->sin_port;
            out->local_len = sizeof(*local);
            out->ifindex = (unsigned)info.ipi_ifindex;
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo info;
            memcpy(&info, CMSG_DATA(c), sizeof(info));
            struct sockaddr_in6 *local = (struct sockaddr_in6 *)&out->local;
            local->sin6_family = AF_INET6;
            local->sin6_addr = info.ipi6_addr;
            local->sin6_port = ((const struct sockaddr_in6 *)&udp->addr)->sin6_port;
            out->local_len = sizeof(*local);
            out->ifindex = info.ipi6_ifindex;
        } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
            out->ecn = *(const unsigned char *)CMSG_DATA(c) & 3;
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
            int tclass;
            memcpy(&tclass, CMSG_DATA(c), sizeof(tclass));
            out->ecn = (uint8_t)(tclass & 3);
        } else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
            int size;
            memcpy(&size, CMSG_DATA(c), sizeof(size));
            /* One datagram's worth is not a run. */
            out->segment_size = size > 0 && (size_t)size < out->len ? (uint16_t)size : 0;
        }
    }
}

/* One recvmmsg(): returns how many datagrams it read (0: none waiting, or
 * an error, logged). */
static int read_batch(corral_udp_socket *sock)
{
    unsigned batch = sock->udp->options.recv_batch;
    for (unsigned i = 0; i < batch; i++) {
        sock->recv_iov[i] =
            (struct iovec){sock->recv_buffers + (size_t)i * sock->recv_size, sock->recv_size};
        sock->recv_msgs[i].msg_hdr = (struct msghdr){
            .msg_name = &sock->recv_names[i],
            .msg_namelen = sizeof(sock->recv_names[i]),
            .msg_iov = &sock->recv_iov[i],
            .msg_iovlen = 1,
            .msg_control = sock->recv_control[i].bytes,
            .msg_controllen = sizeof(sock->recv_control[i].bytes),
        };
    }
    int n;
    while ((n = recvmmsg(sock->fd, sock->recv_msgs, batch, MSG_DONTWAIT, NULL)) == -1 &&
           errno == EINTR)
        ;
    if (n == -1) {
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            corral__debug("udp %s: recvmmsg: %s", sock->udp->address_text, strerror(errno));
        return 0;
    }
    size_t kept = 0;
    uint64_t datagrams = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        struct msghdr *hdr = &sock->recv_msgs[i].msg_hdr;
        /* A datagram larger than the buffer lost its tail: never half. */
        if (hdr->msg_flags & MSG_TRUNC) {
            corral__stat_add(&sock->stats.truncated, 1);
            continue;
        }
        struct corral_udp_msg *out = &sock->recv_out[kept++];
        memset(out, 0, sizeof(*out));
        out->data = sock->recv_iov[i].iov_base;
        out->len = sock->recv_msgs[i].msg_len;
        socklen_t name_len = hdr->msg_namelen;
        if (name_len > sizeof(out->peer))
            name_len = sizeof(out->peer);
        memcpy(&out->peer, hdr->msg_name, name_len);
        out->peer_len = name_len;
        read_control(sock, hdr, out);
        datagrams += out->segment_size ? (out->len + out->segment_size - 1) / out->segment_size : 1;
        bytes += out->len;
    }
    corral__stat_add(&sock->stats.recv_batches, 1);
    corral__stat_add(&sock->stats.received, (int64_t)datagrams);
    corral__stat_add(&sock->stats.received_bytes, (int64_t)bytes);
    if (kept > 0)
        sock->udp->handler->on_recv(sock, sock->recv_out, kept);
    return n;
}

void corral__udp_on_event(struct corral__handle *handle, uint32_t epoll_events)
{
    corral_udp_socket *sock = (corral_udp_socket *)handle;
    assert(corral__loop_owned(sock->worker->loop));
    /* Released in this iteration (corral_server_close_listeners()), with
     * its event still in the batch: a successor reads it now. */
    if (!sock->registered)
        return;
    if ((epoll_events & EPOLLOUT) && sock->want_writable) {
        sock->want_writable = false;
        corral__loop_rewatch(sock->worker->loop, sock->fd, &sock->handle, EPOLLIN);
        sock->udp->handler->on_writable(sock);
    }
    if (!(epoll_events & (EPOLLIN | EPOLLERR)))
        return;
    unsigned batch = sock->udp->options.recv_batch;
    /* on_recv may have had the sockets released: then stop reading. */
    for (int round = 0; round < READ_ROUNDS && sock->registered; round++)
        if ((unsigned)read_batch(sock) < batch)
            break;
}

/* -------------------------------------------------------------- sending */

/* Adds the source address, ECN bits and GSO segment size of `msg` to the
 * control buffer of a send table entry; returns the bytes used. */
static size_t write_control(const corral_udp_socket *sock, const struct corral_udp_msg *msg,
                            uint16_t gso_size, union corral__udp_control *control,
                            struct msghdr *hdr)
{
    memset(control, 0, sizeof(*control));
    hdr->msg_control = control->bytes;
    hdr->msg_controllen = sizeof(control->bytes);
    struct cmsghdr *c = CMSG_FIRSTHDR(hdr);
    size_t used = 0;
    bool v6 = sock->udp->addr.ss_family == AF_INET6;
    if (msg->local_len > 0 && msg->local.ss_family == AF_INET && !v6) {
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
        struct in_pktinfo info = {
            .ipi_ifindex = (int)msg->ifindex,
            .ipi_spec_dst = ((const struct sockaddr_in *)&msg->local)->sin_addr,
        };
        memcpy(CMSG_DATA(c), &info, sizeof(info));
        used += CMSG_SPACE(sizeof(info));
        c = (struct cmsghdr *)(control->bytes + used);
    } else if (msg->local_len > 0 && msg->local.ss_family == AF_INET6 && v6) {
        c->cmsg_level = IPPROTO_IPV6;
        c->cmsg_type = IPV6_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
        struct in6_pktinfo info = {
            .ipi6_addr = ((const struct sockaddr_in6 *)&msg->local)->sin6_addr,
            .ipi6_ifindex = msg->ifindex,
        };
        memcpy(CMSG_DATA(c), &info, sizeof(info));
        used += CMSG_SPACE(sizeof(info));
        c = (struct cmsghdr *)(control->bytes + used);
    }
    if (msg->ecn != 0) {
        int tos = msg->ecn & 3;
        c->cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
        c->cmsg_type = v6 ? IPV6_TCLASS : IP_TOS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &tos, sizeof(tos));
        used += CMSG_SPACE(sizeof(int));
        c = (struct cmsghdr *)(control->bytes + used);
    }
    if (gso_size > 0) {
        c->cmsg_level = IPPROTO_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        memcpy(CMSG_DATA(c), &gso_size, sizeof(gso_size));
        used += CMSG_SPACE(sizeof(uint16_t));
    }
    assert(used <= sizeof(control->bytes));
    if (used == 0)
        hdr->msg_control = NULL;
    hdr->msg_controllen = used;
    return used;
}

/* Fills the send table from message `*msg`, byte `offset` on: whole
 * messages, GSO chunks of runs, or single datagrams of runs when GSO is
 * off.  Returns the entries filled. */
static unsigned fill_table(corral_udp_socket *sock, const struct corral_udp_msg *msgs, size_t count,
                           size_t msg, size_t offset, bool gso)
{
    unsigned n = 0;
    while (n < CORRAL__UDP_SEND_BATCH && msg < count) {
        const struct corral_udp_msg *m = &msgs[msg];
        size_t seg = m->segment_size;
        size_t chunk = m->len - offset;
        uint16_t gso_size = 0;
        if (seg > 0 && seg < chunk) {
            if (gso) {
                size_t segments = GSO_BYTES_MAX / seg;
                if (segments > GSO_SEGMENTS_MAX)
                    segments = GSO_SEGMENTS_MAX;
                if (segments < 1)
                    segments = 1;
                if (chunk > segments * seg)
                    chunk = segments * seg;
                if (chunk > seg)
                    gso_size = (uint16_t)seg;
            } else {
                chunk = seg;
            }
        }
        struct msghdr *hdr = &sock->send_msgs[n].msg_hdr;
        sock->send_iov[n] = (struct iovec){(char *)m->data + offset, chunk};
        *hdr = (struct msghdr){
            .msg_name = (void *)&m->peer,
            .msg_namelen = m->peer_len,
            .msg_iov = &sock->send_iov[n],
            .msg_iovlen = 1,
        };
        write_control(sock, m, gso_size, &sock->send_control[n], hdr);
        offset += chunk;
        sock->send_ends[n] =
            (struct corral__udp_entry_end){.msg = msg, .offset = offset, .gso = gso_size > 0};
        n++;
        if (offset == m->len) {
            msg++;
            offset = 0;
        }
    }
    return n;
}

/* The kernel refused a GSO send: log it once, and send single datagrams
 * from now on, on every worker's socket of the listen. */
static void gso_refused(corral_udp_socket *sock, int err)
{
    corral_udp *udp = sock->udp;
    atomic_store_explicit(&udp->gso, false, memory_order_relaxed);
    corral__stat_add(&sock->stats.gso_fallbacks, 1);
    if (!atomic_exchange_explicit(&udp->gso_fallback_logged, true, memory_order_relaxed))
        corral__warn("udp %s: the kernel refused a GSO send (%s); sending datagrams one by one",
                     udp->address_text, strerror(err));
}

size_t corral_udp_send(corral_udp_socket *sock, const struct corral_udp_msg *msgs, size_t count)
{
    assert(sock->worker != NULL && corral__loop_owned(sock->worker->loop));
    size_t msg = 0, offset = 0; /* where the next entry starts */
    while (msg < count) {
        assert(CORRAL__RESERVED_CLEAR(msgs[msg].reserved));
        bool gso = atomic_load_explicit(&sock->udp->gso, memory_order_relaxed);
        unsigned n = fill_table(sock, msgs, count, msg, offset, gso);
        int sent;
        while ((sent = corral__udp_sendmmsg(sock->fd, sock->send_msgs, n, MSG_DONTWAIT)) == -1 &&
               errno == EINTR)
            ;
        corral__stat_add(&sock->stats.send_calls, 1);
        if (sent > 0) {
            uint64_t datagrams = 0, bytes = 0;
            for (int i = 0; i < sent; i++) {
                const struct corral__udp_entry_end *end = &sock->send_ends[i];
                size_t len = sock->send_iov[i].iov_len;
                size_t seg = msgs[end->msg].segment_size;
                datagrams += end->gso ? (len + seg - 1) / seg : 1;
                bytes += len;
                if (end->gso)
                    corral__stat_add(&sock->stats.gso_sends, 1);
            }
            corral__stat_add(&sock->stats.sent, (int64_t)datagrams);
            corral__stat_add(&sock->stats.sent_bytes, (int64_t)bytes);
            const struct corral__udp_entry_end *last = &sock->send_ends[sent - 1];
            msg = last->msg;
            offset = last->offset;
            if (offset == msgs[msg].len) {
                msg++;
                offset = 0;
            }
            continue;
        }
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) {
            corral__stat_add(&sock->stats.send_full, 1);
            return msg; /* a message cut short is not done: it goes again whole */
        }
        if (sock->send_ends[0].gso && (err == EIO || err == EINVAL)) {
            gso_refused(sock, err);
            continue; /* the same entry again, unsegmented */
        }
        /* The first entry's message has an error of its own: drop it. */
        corral__debug("udp %s: sendmmsg: %s; datagram dropped", sock->udp->address_text,
                      strerror(err));
        corral__stat_add(&sock->stats.send_errors, 1);
        msg++;
        offset = 0;
    }
    return count;
}

int corral_udp_wait_writable(corral_udp_socket *sock)
{
    assert(sock->worker != NULL && corral__loop_owned(sock->worker->loop));
    if (sock->udp->handler->on_writable == NULL)
        return -EINVAL;
    if (!sock->registered)
        return -EBADF;
    if (sock->want_writable)
        return 0;
    int err = corral__loop_rewatch(sock->worker->loop, sock->fd, &sock->handle, EPOLLIN | EPOLLOUT);
    if (err == 0)
        sock->want_writable = true;
    return err;
}
