/*
 * grpc_status.h: corral's own failures of a gRPC call as gRPC sees them: a
 * trailers-only response (HTTP 200, content-type application/grpc, and
 * grpc-status with grpc-message in its only HEADERS), never an HTML or
 * text page, which a gRPC client could only report as a broken stream.
 */
#ifndef CORRAL_PROTO_GRPC_STATUS_H
#define CORRAL_PROTO_GRPC_STATUS_H

#include "proto/http/exchange.h"

/* The gRPC status codes corral answers with (grpc/doc/statuscodes.md). */
enum grpc_status {
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_PERMISSION_DENIED = 7,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
    GRPC_STATUS_UNAUTHENTICATED = 16,
};

/* The gRPC status that stands for an HTTP error status corral answers a
 * request with before it reaches the backend: 403 (deny) 7, 429 and 503
 * (a limit) 8, 401 16, 404 12, 504 4, 502 14; others 13. */
enum grpc_status grpc_status_of_http(unsigned status);

/* Whether a request is a gRPC call: its content-type is application/grpc,
 * alone or with a +suffix or parameters (application/grpc+proto). */
bool grpc_status_call(const struct http_request *req);

/* Answers `ex` with a trailers-only response of `code` and `message`
 * (visible ASCII, sent as grpc-message).  Does nothing once a response
 * has begun. */
void grpc_status_respond(struct exchange *ex, enum grpc_status code, const char *message);

/* An exchange's error hook (ex->error_hook) for a gRPC call: every error
 * of corral's own is answered as a grpc-status (grpc_status_of_http()). */
bool grpc_status_error_hook(struct exchange *ex, unsigned status);

#endif
