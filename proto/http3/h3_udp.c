/*
 * h3_udp.c: an HTTP/3 endpoint per worker on a libcorral UDP listen.
 * Each worker's socket feeds its own endpoint (made on its first
 * datagram, freed when its loop ends), and the endpoint's datagrams leave
 * by the same socket; those the socket cannot take now wait for it,
 * within a bound, as a full network would drop the rest.
 */
#include "proto/http3/http3.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of datagrams a worker keeps for a full socket; beyond them a
 * datagram is dropped (QUIC's loss recovery sends it again). */
#define PENDING_MAX (1024 * 1024)

struct pending {
    struct pending *next;
    struct corral_udp_msg msg; /* its data: `bytes` */
    uint8_t bytes[];
};

struct h3_udp_worker {
    struct h3_udp_site *site;
    corral_udp_socket *sock;
    struct h3_endpoint *ep;
    struct pending *head, **tail;
    size_t pending_bytes;
};

struct h3_udp_site {
    struct h3_endpoint_config config; /* loop, worker, index and output set per worker */
    unsigned worker_count;
    struct h3_udp_worker **workers; /* by corral_worker_index() */
};

int h3_udp_site_new(const struct h3_endpoint_config *config, unsigned workers,
                    struct h3_udp_site **out)
{
    *out = NULL;
    int err = h3_credentials_check(config->cert_file, config->key_file);
    if (err != 0)
        return err;
    struct h3_udp_site *site = calloc(1, sizeof(*site));
    if (site == NULL || (site->workers = calloc(workers, sizeof(*site->workers))) == NULL) {
        free(site);
        return -ENOMEM;
    }
    site->config = *config;
    site->worker_count = workers;
    *out = site;
    return 0;
}

void h3_udp_site_free(struct h3_udp_site *site)
{
    if (site == NULL)
        return;
    free(site->workers); /* each worker's freed by its on_stop */
    free(site);
}

/* Sends what waits, in order, until the socket is full again. */
static void flush_pending(struct h3_udp_worker *w)
{
    while (w->head != NULL) {
        struct pending *p = w->head;
        if (corral_udp_send(w->sock, &p->msg, 1) == 0) {
            /* -EBADF: a reload took the socket; what waits is lost. */
            if (corral_udp_wait_writable(w->sock) == 0)
                return;
        }
        w->head = p->next;
        if (w->head == NULL)
            w->tail = &w->head;
        w->pending_bytes -= p->msg.len;
        free(p);
    }
}

static void output(void *arg, const struct sockaddr *local, socklen_t local_len,
                   const struct sockaddr *peer, socklen_t peer_len, const uint8_t *data, size_t len,
                   size_t gso_segment)
{
    struct h3_udp_worker *w = arg;
    struct corral_udp_msg msg = {.data = (void *)data, .len = len, .peer_len = peer_len};
    if (peer_len > sizeof(msg.peer) || local_len > sizeof(msg.local))
        return;
    memcpy(&msg.peer, peer, peer_len);
    if (local != NULL && local_len > 0) {
        memcpy(&msg.local, local, local_len);
        msg.local_len = local_len;
    }
    if (gso_segment > 0 && gso_segment < len && gso_segment <= UINT16_MAX)
        msg.segment_size = (uint16_t)gso_segment;
    if (w->head == NULL && corral_udp_send(w->sock, &msg, 1) == 1)
        return;
    if (w->pending_bytes + len > PENDING_MAX)
        return;
    struct pending *p = malloc(sizeof(*p) + len);
    if (p == NULL)
        return;
    p->next = NULL;
    p->msg = msg;
    memcpy(p->bytes, data, len);
    p->msg.data = p->bytes;
    bool first = w->head == NULL;
    *w->tail = p;
    w->tail = &p->next;
    w->pending_bytes += len;
    if (first && corral_udp_wait_writable(w->sock) != 0)
        flush_pending(w); /* no loop watches it: drops what cannot go now */
}

/* The worker's endpoint, made on its first datagram. */
static struct h3_udp_worker *worker_of(corral_udp_socket *sock)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    corral_worker *worker = corral_udp_socket_worker(sock);
    unsigned index = corral_worker_index(worker);
    if (index >= site->worker_count)
        return NULL;
    struct h3_udp_worker *w = site->workers[index];
    if (w != NULL)
        return w->ep != NULL ? w : NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->site = site;
    w->sock = sock;
    w->tail = &w->head;
    site->workers[index] = w;
    struct h3_endpoint_config config = site->config;
    config.loop = corral_worker_loop(worker);
    config.worker = worker;
    config.worker_index = (uint16_t)index;
    config.output = output;
    config.output_arg = w;
    /* A failure is logged once; the worker drops its datagrams after it. */
    if (h3_endpoint_new(&config, &w->ep) != 0)
        w->ep = NULL;
    return w->ep != NULL ? w : NULL;
}

static void on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    struct h3_udp_worker *w = worker_of(sock);
    if (w == NULL)
        return;
    for (size_t i = 0; i < count; i++) {
        const struct corral_udp_msg *m = &msgs[i];
        size_t step = m->segment_size > 0 ? m->segment_size : m->len;
        /* ngtcp2 asserts on an empty datagram: it never reaches it. */
        for (size_t off = 0; step > 0 && off < m->len; off += step) {
            size_t len = m->len - off < step ? m->len - off : step;
            h3_endpoint_input(w->ep, (const struct sockaddr *)&m->local, m->local_len,
                              (const struct sockaddr *)&m->peer, m->peer_len,
                              (const uint8_t *)m->data + off, len, m->ecn);
        }
    }
}

static void on_writable(corral_udp_socket *sock)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    unsigned index = corral_worker_index(corral_udp_socket_worker(sock));
    if (index < site->worker_count && site->workers[index] != NULL)
        flush_pending(site->workers[index]);
}

/* The worker's loop ended: its connections end at once (no
 * CONNECTION_CLOSE), and its endpoint goes. */
static void on_stop(corral_udp_socket *sock)
{
    struct h3_udp_site *site = corral_udp_data(sock);
    unsigned index = corral_worker_index(corral_udp_socket_worker(sock));
    if (index >= site->worker_count || site->workers[index] == NULL)
        return;
    struct h3_udp_worker *w = site->workers[index];
    if (w->ep != NULL)
        h3_endpoint_free(w->ep);
    while (w->head != NULL) {
        struct pending *p = w->head;
        w->head = p->next;
        free(p);
    }
    free(w);
    site->workers[index] = NULL;
}

const struct corral_udp_handler h3_udp_handler = {
    .on_recv = on_recv,
    .on_writable = on_writable,
    .on_stop = on_stop,
};
