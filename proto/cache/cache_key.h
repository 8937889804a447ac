/*
 * cache_key.h: an entry's identity: the MD5 of its key (nginx names its
 * files so), and for a response that varies the MD5 of the key and the
 * request's values of the fields its Vary names (RFC 9111 4.1), so that
 * each variant is an entry of its own.
 */
#ifndef CORRAL_PROTO_CACHE_KEY_H
#define CORRAL_PROTO_CACHE_KEY_H

#include "proto/http/http.h"

#include <stddef.h>
#include <stdint.h>

#define CACHE_ID_LEN 16 /* MD5 of the key, as nginx names its files */

/* The id of `key`, and with `variant` non-empty of that variant of it. */
void cache_key_id(struct http_str key, struct http_str variant, uint8_t out[CACHE_ID_LEN]);

/* Writes the request's values for each field named in `vary` (a Vary
 * value) into `out` (`cap` bytes): per name, its lowercase spelling, ':',
 * the values of every field of that name in order, joined by ",", with
 * spaces around them dropped, and '\n'.  Returns its length, which may
 * exceed `cap` (then only `cap` bytes are written). */
size_t cache_key_variant(struct http_str vary, const struct http_header *headers, size_t count,
                         char *out, size_t cap);

/* 32 lowercase hex digits of `id` and a NUL into `out`. */
void cache_key_hex(const uint8_t id[CACHE_ID_LEN], char out[2 * CACHE_ID_LEN + 1]);

#endif
