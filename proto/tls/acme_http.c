/*
 * acme_http.c: one HTTP/1.1 request over TLS, on a loop, without
 * blocking it, to the ACME server or to an https:// OCSP responder: connected with
 * corral_connect(), encrypted by the TLS client side (tls_client_connect()), the answer read by
 * llhttp (Content-Length, chunked or to the end) into a buffer bounded by
 * ACME_RESPONSE_LIMIT, with the headers ACME uses kept.
 */
#include "proto/tls/acme_client.h"
#include "proto/url.h"

#include <arpa/inet.h>
#include <errno.h>
#include <llhttp.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define REQUEST_TIMEOUT_MS (30 * 1000)
#define HEADER_VALUE_MAX   2048

struct acme_http {
    corral_conn *conn;
    struct tls_client *tls;
    char *request;
    size_t request_len;
    llhttp_t parser;
    llhttp_settings_t settings;
    enum { H_NONE, H_LOCATION, H_NONCE, H_TYPE, H_RETRY } header;
    char field[32];
    size_t field_len;
    struct acme_http_response response;
    size_t body_cap;
    bool head; /* its answer has no body, whatever its length says */
    bool complete, failed, done;
    int error;
    acme_http_done_fn done_fn;
    void *arg;
};

static void finish(struct acme_http *h, int err)
{
    if (h->done)
        return;
    h->done = true;
    acme_http_done_fn fn = h->done_fn;
    h->done_fn = NULL;
    if (fn != NULL)
        fn(h->arg, err, err == 0 ? &h->response : NULL);
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    struct acme_http *h = p->data;
    if (len > sizeof(h->field) - 1 - h->field_len)
        len = sizeof(h->field) - 1 - h->field_len; /* longer names are none we keep */
    memcpy(h->field + h->field_len, at, len);
    h->field_len += len;
    return 0;
}

static int on_header_field_complete(llhttp_t *p)
{
    struct acme_http *h = p->data;
    h->field[h->field_len] = '\0';
    h->field_len = 0;
    h->header = strcasecmp(h->field, "Location") == 0       ? H_LOCATION
                : strcasecmp(h->field, "Replay-Nonce") == 0 ? H_NONCE
                : strcasecmp(h->field, "Content-Type") == 0 ? H_TYPE
                : strcasecmp(h->field, "Retry-After") == 0  ? H_RETRY
                                                            : H_NONE;
    return 0;
}

static char **header_slot(struct acme_http *h)
{
    switch (h->header) {
    case H_LOCATION: return &h->response.location;
    case H_NONCE: return &h->response.nonce;
    case H_TYPE: return &h->response.content_type;
    default: return NULL;
    }
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    struct acme_http *h = p->data;
    if (h->header == H_RETRY) {
        for (size_t i = 0; i < len; i++)
            if (at[i] >= '0' && at[i] <= '9' && h->response.retry_after_s < 86400)
                h->response.retry_after_s =
                    h->response.retry_after_s * 10 + (unsigned)(at[i] - '0');
        return 0;
    }
    char **slot = header_slot(h);
    if (slot == NULL)
        return 0;
    size_t have = *slot != NULL ? strlen(*slot) : 0;
    if (len > HEADER_VALUE_MAX - have)
        return HPE_USER; /* no ACME header is this long */
    char *grown = realloc(*slot, have + len + 1);
    if (grown == NULL)
        return HPE_USER;
    memcpy(grown + have, at, len);
    grown[have + len] = '\0';
    *slot = grown;
    return 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    struct acme_http *h = p->data;
    /* A header seen twice keeps its first value whole, not a splice. */
    if (header_slot(h) != NULL)
        h->header = H_NONE;
    return 0;
}

static int on_headers_complete(llhttp_t *p)
{
    struct acme_http *h = p->data;
    return h->head ? 1 : 0; /* 1: llhttp reads no body */
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    struct acme_http *h = p->data;
    if (len > ACME_RESPONSE_LIMIT - h->response.body_len)
        return HPE_USER;
    if (h->response.body_len + len + 1 > h->body_cap) {
        size_t cap = h->body_cap ? h->body_cap : 4096;
        while (cap < h->response.body_len + len + 1)
            cap *= 2;
        char *grown = realloc(h->response.body, cap);
        if (grown == NULL)
            return HPE_USER;
        h->response.body = grown;
        h->body_cap = cap;
    }
    memcpy(h->response.body + h->response.body_len, at, len);
    h->response.body_len += len;
    h->response.body[h->response.body_len] = '\0';
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    struct acme_http *h = p->data;
    h->response.status = p->status_code;
    h->complete = true;
    return HPE_PAUSED; /* nothing after the one answer is read */
}

static void on_open(corral_conn *conn)
{
    struct acme_http *h = corral_conn_data(conn);
    if (tls_client_connect(h->tls, conn, 0, false) != 0) {
        h->error = -ENOMEM;
        corral_conn_abort(conn, -ENOMEM);
        return;
    }
    corral_conn_write(conn, h->request, h->request_len);
}

static size_t on_data(corral_conn *conn, const char *data, size_t len)
{
    struct acme_http *h = corral_conn_data(conn);
    if (h->complete || h->failed)
        return len;
    llhttp_errno_t err = llhttp_execute(&h->parser, data, len);
    if (h->complete) {
        finish(h, 0);
        corral_conn_close(conn);
    } else if (err != HPE_OK) {
        h->failed = true;
        h->error = -EPROTO;
        corral_conn_abort(conn, -EPROTO);
    }
    return len;
}

static void on_eof(corral_conn *conn)
{
    struct acme_http *h = corral_conn_data(conn);
    /* An answer without a length ends with the connection. */
    if (!h->complete && !h->failed && llhttp_finish(&h->parser) == HPE_OK && h->complete)
        finish(h, 0);
    corral_conn_close(conn);
}

static void on_close(corral_conn *conn, int error)
{
    struct acme_http *h = corral_conn_data(conn);
    finish(h, h->error != 0 ? h->error : error != 0 ? error : -ECONNRESET);
    acme_http_response_clear(&h->response);
    free(h->request);
    free(h);
}

static const struct corral_conn_handler handler = {
    .on_open = on_open,
    .on_data = on_data,
    .on_eof = on_eof,
    .on_close = on_close,
};

void acme_http_response_clear(struct acme_http_response *r)
{
    free(r->location);
    free(r->nonce);
    free(r->content_type);
    free(r->body);
    *r = (struct acme_http_response){0};
}

int acme_http_send(corral_loop *loop, struct tls_client *tls, const struct sockaddr *addr,
                   socklen_t addr_len, const struct acme_http_msg *msg, acme_http_done_fn done,
                   void *arg, struct acme_http **out)
{
    struct url u;
    if (url_split(msg->url, &u) != 0 || !u.https)
        return -EINVAL;
    struct acme_http *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    const char *type = msg->content_type;
    size_t body_len = type != NULL ? msg->body_len : 0;
    size_t cap = strlen(msg->method) + u.path_len + u.authority_len + strlen(msg->accept) +
                 (type != NULL ? strlen(type) : 0) + body_len + 256;
    h->request = malloc(cap);
    if (h->request == NULL) {
        free(h);
        return -ENOMEM;
    }
    int n = snprintf(h->request, cap,
                     "%s %.*s HTTP/1.1\r\nHost: %.*s\r\nUser-Agent: corral\r\n"
                     "Accept: %s\r\nConnection: close\r\n",
                     msg->method, (int)u.path_len, u.path, (int)u.authority_len, u.authority,
                     msg->accept);
    if (type != NULL)
        n += snprintf(h->request + n, cap - (size_t)n,
                      "Content-Type: %s\r\nContent-Length: %zu\r\n", type, body_len);
    n += snprintf(h->request + n, cap - (size_t)n, "\r\n");
    if (body_len > 0)
        memcpy(h->request + n, msg->body, body_len);
    h->request_len = (size_t)n + body_len;
    h->tls = tls;
    h->done_fn = done;
    h->arg = arg;
    llhttp_settings_init(&h->settings);
    h->settings.on_header_field = on_header_field;
    h->settings.on_header_field_complete = on_header_field_complete;
    h->settings.on_header_value = on_header_value;
    h->settings.on_header_value_complete = on_header_value_complete;
    h->settings.on_headers_complete = on_headers_complete;
    h->settings.on_body = on_body;
    h->settings.on_message_complete = on_message_complete;
    llhttp_init(&h->parser, HTTP_RESPONSE, &h->settings);
    h->parser.data = h;
    h->head = strcmp(msg->method, "HEAD") == 0;
    int err = corral_connect(loop, addr, addr_len, &handler, h, &h->conn);
    if (err != 0) {
        free(h->request);
        free(h);
        return err;
    }
    corral_conn_set_timeouts(h->conn, REQUEST_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
    if (out != NULL)
        *out = h;
    return 0;
}

int acme_http_request(corral_loop *loop, struct tls_client *tls, const struct sockaddr *addr,
                      socklen_t addr_len, const char *method, const char *url, const char *body,
                      acme_http_done_fn done, void *arg, struct acme_http **out)
{
    struct acme_http_msg msg = {
        .method = method,
        .url = url,
        .accept = "application/json",
        .content_type = body != NULL ? "application/jose+json" : NULL,
        .body = body,
        .body_len = body != NULL ? strlen(body) : 0,
    };
    return acme_http_send(loop, tls, addr, addr_len, &msg, done, arg, out);
}

void acme_http_cancel(struct acme_http *h)
{
    if (h == NULL || h->done)
        return;
    h->done_fn = NULL;
    h->done = true;
    corral_conn_abort(h->conn, 0);
}
