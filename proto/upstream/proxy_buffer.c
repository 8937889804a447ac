/*
 * proxy_buffer.c: a request body read whole before a server is asked
 * (proxy_buffer.h).
 */
#include "proto/upstream/proxy_buffer.h"

#include <corral.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct proxy_buffer *proxy_buffer_new(const struct proxy_conf *conf, const struct http_request *req)
{
    struct proxy_buffer *pb = calloc(1, sizeof(*pb));
    if (pb == NULL)
        return NULL;
    pb->req_block = exchange_request_copy(req, &pb->req);
    if (pb->req_block == NULL) {
        free(pb);
        return NULL;
    }
    pb->body = BODY_STORE_INIT;
    pb->body.mem_max = conf->body_buffer_size;
    pb->body.temp_path = conf->body_temp_path;
    pb->body.disk_max = conf->body_temp_max_size;
    return pb;
}

unsigned proxy_buffer_add(struct proxy_buffer *pb, const char *upstream, const char *data,
                          size_t len)
{
    int err = body_store_append(&pb->body, data, len);
    if (err == -EDQUOT) {
        corral_log(CORRAL_LOG_ERROR,
                   "upstream \"%s\": a request body of %llu bytes and more is refused: the "
                   "temporary files of buffered bodies hold %llu bytes, and "
                   "client_body_temp_max_size is %llu (answering 503)",
                   upstream, (unsigned long long)(pb->body.len + len),
                   (unsigned long long)body_store_disk_bytes(),
                   (unsigned long long)pb->body.disk_max);
        return 503;
    }
    if (err != 0) {
        corral_log(CORRAL_LOG_ERROR,
                   "upstream \"%s\": a request body of %llu bytes and more cannot be buffered "
                   "in client_body_temp_path \"%s\": %s (answering 500)",
                   upstream, (unsigned long long)(pb->body.len + len),
                   pb->body.temp_path != NULL ? pb->body.temp_path : "", strerror(-err));
        return 500;
    }
    if (pb->body.in_file && !pb->logged_file) {
        /* nginx's warning: a body this large costs a file's writes */
        pb->logged_file = true;
        corral_log(CORRAL_LOG_WARN,
                   "upstream \"%s\": a client request body is buffered to a temporary file in "
                   "\"%s\" (client_body_buffer_size %zu; the temporary files hold %llu bytes "
                   "now)",
                   upstream, pb->body.temp_path, pb->body.mem_max,
                   (unsigned long long)body_store_disk_bytes());
    }
    return 0;
}

const struct http_request *proxy_buffer_end(struct proxy_buffer *pb)
{
    pb->req.has_body = pb->body.len > 0;
    pb->req.has_content_length = true;
    pb->req.content_length = pb->body.len;
    return &pb->req;
}

void proxy_buffer_free(struct proxy_buffer *pb)
{
    if (pb == NULL)
        return;
    body_store_free(&pb->body);
    free(pb->req_block);
    free(pb);
}
