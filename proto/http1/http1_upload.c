/*
 * http1_upload.c: request bodies moved inside the kernel, from the client's
 * socket to where the handler sends them (exchange_request_splice()), for
 * the HTTP/1.1 framer: what may move, and the body's accounting after.
 */
#include "proto/http1/http1_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

uint64_t http1_upload_spliceable(const struct exchange *base)
{
    const struct h1_exchange *ex = h1_exchange_of(base);
    const struct h1_conn *h1 = h1_exchange_conn(ex);
    /* body_raw: inside on_body, with llhttp inside the body's bytes.  An
     * upgrade's bytes after the body are another protocol's: not moved. */
    if (!ex->body_raw || ex->request_splicing || h1->c.tls || h1->parser == NULL ||
        h1->parser->upgrade)
        return 0;
    uint64_t rest = h1->parser->content_length;
    /* A chunk that would take the body past its limit is read, and
     * refused with 413 where it crosses it, as when it is not spliced. */
    size_t max = h1->vhost->limits.max_body_size;
    if (max > 0 && rest > max - ex->body_received)
        return 0;
    return rest;
}

/* A request body splice under way, allocated only then. */
struct h1_request_splice {
    struct h1_exchange *ex;
    exchange_splice_cb cb;
    void *arg;
};

/* The moved bytes count as read; a body whose length they completed is
 * complete.  The h1 connection outlives this: its on_close waits. */
static void h1_request_spliced(corral_conn *from, corral_conn *to, uint64_t moved, int error,
                               void *arg)
{
    (void)to;
    struct h1_request_splice sp = *(struct h1_request_splice *)arg;
    free(arg);
    struct h1_exchange *ex = sp.ex;
    struct h1_conn *h1 = h1_exchange_conn(ex);
    ex->request_splicing = false;
    ex->body_received += moved;
    /* The parser lives until the message ends, which only this can say. */
    assert(h1->parser != NULL && moved <= h1->parser->content_length);
    if (h1->parser != NULL)
        h1->parser->content_length -= moved; /* a chunk's CRLF comes next, or the end */
    sp.cb(&ex->base, moved, error, sp.arg);
    if (error != 0 || corral_conn_fd(from) < 0 || h1->closed || h1->parser == NULL ||
        h1->parser->content_length > 0 || (h1->parser->flags & F_CHUNKED))
        return;
    http1_request_parser_free(h1);
    http1_request_complete(h1);
    /* on_body_end may have ended the response, and with it the exchange. */
    if (h1->ex != ex || h1->closed)
        return;
    if (ex->response_done)
        http1_finish_exchange(h1);
    else { /* a pipelined request waits; the client's end is watched (h1_on_hangup()) */
        corral_conn_pause_read(h1->c.sock);
        corral_conn_watch(h1->c.sock);
    }
}

int http1_upload_splice(struct exchange *base, corral_conn *to, uint64_t len, exchange_splice_cb cb,
                        void *arg)
{
    struct h1_exchange *ex = h1_exchange_of(base);
    if (ex->request_splicing)
        return -EBUSY;
    if (len == 0 || len > http1_upload_spliceable(base))
        return -EOPNOTSUPP;
    struct h1_request_splice *sp = malloc(sizeof(*sp));
    if (sp == NULL)
        return -ENOMEM;
    *sp = (struct h1_request_splice){.ex = ex, .cb = cb, .arg = arg};
    int err = corral_conn_splice(h1_exchange_conn(ex)->c.sock, to, len, h1_request_spliced, sp);
    if (err != 0) {
        free(sp);
        return err;
    }
    ex->request_splicing = true;
    return 0;
}
