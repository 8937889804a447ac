/*
 * proxy_buffer.h: proxy_request_buffering: a request whose body is read
 * whole (in memory up to client_body_buffer_size, then in an unlinked
 * temporary file in client_body_temp_path) before a server is asked, so
 * that a slow upload holds no backend connection and proxy_next_upstream
 * can send the body again.  Both the HTTP/1.1 and the HTTP/2 proxy
 * (proxy.c, proxy_h2.c) keep one while they buffer.
 */
#ifndef CORRAL_PROTO_PROXY_BUFFER_H
#define CORRAL_PROTO_PROXY_BUFFER_H

#include "proto/http/body_store.h"
#include "proto/http/exchange.h"
#include "proto/upstream/proxy_conf.h"

struct proxy_buffer {
    struct http_request req; /* the request, as on_request had it */
    char *req_block;
    struct body_store body;
    bool logged_file; /* the move to a file was logged */
};

/* Whether a location with `conf` (`grpc`: a grpc_pass one) reads `req`'s
 * body whole before asking a server: its buffering is on
 * (grpc_request_buffering for grpc_pass) and a body comes.  Nothing is
 * allocated when it does not. */
static inline bool proxy_buffer_wanted(const struct proxy_conf *conf, bool grpc,
                                       const struct http_request *req)
{
    return req->has_body && (grpc ? conf->grpc_request_buffering : conf->request_buffering);
}

/* A buffer for `req`'s body, the request copied; NULL when out of memory. */
struct proxy_buffer *proxy_buffer_new(const struct proxy_conf *conf,
                                      const struct http_request *req);

/* Keeps body bytes.  Returns 0, or the status to answer with (500, as
 * nginx's when the temporary file cannot be written), logged with the
 * `upstream` the request was for. */
unsigned proxy_buffer_add(struct proxy_buffer *pb, const char *upstream, const char *data,
                          size_t len);

/* The body came whole: the request, its length now known, goes on with
 * Content-Length (a chunked one too; its trailers are dropped, as
 * nginx's). */
const struct http_request *proxy_buffer_end(struct proxy_buffer *pb);

/* Frees the copy and the body (the file leaves the disk with it); NULL
 * is nothing to do. */
void proxy_buffer_free(struct proxy_buffer *pb);

#endif
