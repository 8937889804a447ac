/*
 * grpc_status.c: trailers-only gRPC answers for corral's own failures
 * (grpc_status.h), with the same codes nginx's grpc module gives.
 */
#include "proto/upstream/grpc_status.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum grpc_status grpc_status_of_http(unsigned status)
{
    switch (status) {
    case 401: return GRPC_STATUS_UNAUTHENTICATED;
    case 403: return GRPC_STATUS_PERMISSION_DENIED;
    case 404: return GRPC_STATUS_UNIMPLEMENTED;
    case 413:
    case 429:
    case 503: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case 502: return GRPC_STATUS_UNAVAILABLE;
    case 504: return GRPC_STATUS_DEADLINE_EXCEEDED;
    default: return GRPC_STATUS_INTERNAL;
    }
}

bool grpc_status_call(const struct http_request *req)
{
    static const char grpc[] = "application/grpc";
    const size_t len = sizeof(grpc) - 1;
    for (size_t i = 0; i < req->header_count; i++) {
        const struct http_header *h = &req->headers[i];
        if (!http_str_equal_nocase(h->name, "content-type"))
            continue;
        struct http_str v = http_trim(h->value);
        if (v.len < len || strncasecmp(v.data, grpc, len) != 0)
            return false;
        return v.len == len || v.data[len] == '+' || v.data[len] == ';';
    }
    return false;
}

void grpc_status_respond(struct exchange *ex, enum grpc_status code, const char *message)
{
    char headers[256];
    int n =
        snprintf(headers, sizeof(headers),
                 "Content-Type: application/grpc\r\nGrpc-Status: %d\r\nGrpc-Message: %.160s\r\n",
                 (int)code, message);
    if (n < 0 || (size_t)n >= sizeof(headers))
        return;
    ex->status_override = 0;
    exchange_respond(ex, 200, headers, "", 0);
}

bool grpc_status_error_hook(struct exchange *ex, unsigned status)
{
    char message[48];
    snprintf(message, sizeof(message), "%u %s", status, http_reason(status));
    grpc_status_respond(ex, grpc_status_of_http(status), message);
    return true;
}
