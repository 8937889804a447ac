/*
 * balance.h: how an upstream picks a server for a request: the algorithms
 * of `balance`, the key hash balancing follows, and the consistent-hash
 * ring (ketama-style) of `balance hash KEY consistent`.
 */
#ifndef CORRAL_PROTO_BALANCE_H
#define CORRAL_PROTO_BALANCE_H

#include "proto/http/exchange.h"
#include "proto/upstream/upstream.h"

#include <stdint.h>

/* What `balance hash KEY` hashes.  The key's evaluation is this one
 * function's business, so that a general variables engine can take its
 * place in one hunk. */
struct balance_key;

/* Reads KEY: "$remote_addr", "$request_uri", "$host" or "$http_NAME".
 * Returns 0, -EINVAL for anything else, or -ENOMEM. */
int balance_key_new(const char *text, struct balance_key **out);
void balance_key_free(struct balance_key *key);

/* The hash of the request's key (`client`: its address as text); NULL
 * `key` hashes the client's address, as ip_hash does.  A header the
 * request lacks hashes as the empty string. */
uint32_t balance_key_hash(const struct balance_key *key, const struct http_request *req,
                          const char *client);

/* A ring of points for the servers that are not backups: each gets
 * BALANCE_RING_POINTS points per unit of weight, so adding one of N
 * servers moves about 1/(N+1) of the keys, and only to the new one. */
#define BALANCE_RING_POINTS 160
struct balance_ring;

int balance_ring_new(const struct upstream_server *servers, size_t count,
                     struct balance_ring **out);
void balance_ring_free(struct balance_ring *ring);

#endif
