/*
 * h3_closing.c: the closing and draining periods of the connections an
 * endpoint has freed (RFC 9000 10.2).  A connection the server closed
 * leaves a small record of its CONNECTION_CLOSE datagram, which its IDs
 * lead to for three PTOs: a packet the client sent before it learnt of
 * the close (or whose answer was lost) gets that datagram again, instead
 * of a stateless reset or nothing.  A connection the client closed
 * leaves one without a datagram: its packets are dropped, as a draining
 * endpoint must send nothing.  The records are few and bounded; the
 * oldest goes first when the bound is reached.
 */
#include "proto/http3/http3_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Unlinks and frees `rec`, its IDs out of the table. */
static void closing_end(struct h3_endpoint *ep, struct h3_closing *rec)
{
    h3_endpoint_remove_closing(ep, rec);
    if (rec->prev != NULL)
        rec->prev->next = rec->next;
    else
        ep->closing_head = rec->next;
    if (rec->next != NULL)
        rec->next->prev = rec->prev;
    else
        ep->closing_tail = rec->prev;
    assert(ep->closing_count > 0);
    ep->closing_count--;
    free(rec);
}

void h3_closing_reap(struct h3_endpoint *ep, uint64_t now)
{
    /* Oldest first: records made later end later, but for the PTOs of
     * their connections, which differ little; one that ends before
     * those ahead of it goes when it is next looked up. */
    while (ep->closing_head != NULL && ep->closing_head->expires <= now)
        closing_end(ep, ep->closing_head);
}

void h3_closing_begin(struct h3_conn *conn, const uint8_t *pkt, size_t len)
{
    struct h3_endpoint *ep = conn->ep;
    assert(conn->closing == NULL);
    uint64_t now = h3_conn_now();
    h3_closing_reap(ep, now);
    size_t max = ep->config.max_closing > 0 ? ep->config.max_closing : H3_CLOSING_MAX;
    while (ep->closing_count >= max) {
        closing_end(ep, ep->closing_head);
        ep->count[H3_CLOSING_EVICTED]++;
    }
    struct h3_closing *rec = malloc(sizeof(*rec) + len);
    if (rec == NULL)
        return; /* its IDs go with it: a later packet gets a stateless reset */
    *rec = (struct h3_closing){
        .prev = ep->closing_tail, .expires = now + 3 * ngtcp2_conn_get_pto(conn->quic), .len = len};
    if (len > 0)
        memcpy(rec->pkt, pkt, len);
    if (ep->closing_tail != NULL)
        ep->closing_tail->next = rec;
    else
        ep->closing_head = rec;
    ep->closing_tail = rec;
    ep->closing_count++;
    conn->closing = rec; /* h3_endpoint_remove_conn() files its IDs here */
}

bool h3_closing_input(struct h3_endpoint *ep, struct h3_closing *rec, const struct sockaddr *local,
                      socklen_t local_len, const struct sockaddr *peer, socklen_t peer_len)
{
    if (rec->expires <= h3_conn_now()) {
        closing_end(ep, rec);
        return false;
    }
    /* RFC 9000 10.2.1: answered, at a rate that falls as packets keep
     * coming (the 1st, 2nd, 4th, 8th...), so that a peer (or a spoofer)
     * cannot make the endpoint send as many as it is sent. */
    rec->packets++;
    if (rec->len > 0 && (rec->packets & (rec->packets - 1)) == 0) {
        ep->config.output(ep->config.output_arg, local, local_len, peer, peer_len, rec->pkt,
                          rec->len, 0);
        ep->count[H3_CLOSES_REPEATED]++;
    }
    return true;
}

void h3_closing_free_all(struct h3_endpoint *ep)
{
    while (ep->closing_head != NULL)
        closing_end(ep, ep->closing_head);
}
