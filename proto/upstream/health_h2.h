/*
 * health_h2.h: the HTTP/2 side of an active health check (health_check
 * type=http2 and type=grpc): one request on its own connection, held in
 * the client side of corral's HTTP/2 session in memory (health.c moves
 * the bytes), and gRPC's grpc.health.v1 Check answer read.
 */
#ifndef CORRAL_PROTO_HEALTH_H2_H
#define CORRAL_PROTO_HEALTH_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct health_h2;

/* What the server answered, once whole. */
struct health_h2_answer {
    unsigned status; /* :status */
    int grpc_status; /* grpc-status; -1: none (type=http2) */
    int serving;     /* a Check's HealthCheckResponse.status; -1: none */
};

/* A probe: GET `path` (grpc false), or POST
 * /grpc.health.v1.Health/Check for `service` ("" the server as a whole),
 * to `authority` over `scheme`.  Returns 0 or -ENOMEM. */
int health_h2_new(bool grpc, const char *scheme, const char *authority, const char *path,
                  const char *service, struct health_h2 **out);
void health_h2_free(struct health_h2 *h);

/* The bytes to send now (the preface, SETTINGS, the request, acks), valid
 * until the next call: their length, 0 for none, -1 on an error. */
ssize_t health_h2_output(struct health_h2 *h, const uint8_t **data);

/* Bytes from the server, all taken (a frame not yet whole is kept, up
 * to a header block's or a frame's bound): 1 once the answer is whole
 * (*answer set), 0 while it may still come, -1 when the server broke the
 * protocol, sent a malformed response (RFC 9113 8.3.2) or a header list
 * over 16 KiB, or reset the stream. */
int health_h2_input(struct health_h2 *h, const char *data, size_t len,
                    struct health_h2_answer *answer);

/* Reads the HealthCheckResponse in a gRPC message body as it came (the
 * 5-byte prefix, then the message): its `status` field (1 SERVING), 0 when
 * the message has none (proto3's default, UNKNOWN), -1 for anything that
 * is not one uncompressed, well-formed message. */
int health_h2_serving(const uint8_t *body, size_t len);

#endif
