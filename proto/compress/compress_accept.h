/*
 * compress_accept.h: the content codings corral compresses with, and the
 * client's Accept-Encoding (RFC 9110 12.5.3) read into what each of them
 * is worth to it; the choice among those a server offers.  Used by the
 * compress module and by whatever serves precompressed files.
 */
#ifndef CORRAL_PROTO_COMPRESS_ACCEPT_H
#define CORRAL_PROTO_COMPRESS_ACCEPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The codings, in the server's order of preference when a client weighs
 * several the same: zstd (fastest to decode, best ratio at low levels),
 * then brotli, then gzip. */
enum compress_coding {
    COMPRESS_ZSTD,
    COMPRESS_BR,
    COMPRESS_GZIP,
    COMPRESS_CODINGS,
};

/* The coding's token in Content-Encoding: "zstd", "br", "gzip". */
const char *compress_coding_name(enum compress_coding coding);

/* A q-value in thousandths (0..1000); COMPRESS_Q_UNSET: not named. */
#define COMPRESS_Q_UNSET UINT16_MAX

/* What one request's Accept-Encoding fields say. */
struct compress_accept {
    uint16_t q[COMPRESS_CODINGS]; /* each coding as named ("x-gzip" is gzip) */
    uint16_t any;                 /* "*" */
    uint16_t identity;
};

/* Starts `a` with nothing named: with no Accept-Encoding, no coding. */
void compress_accept_init(struct compress_accept *a);

/* Reads one Accept-Encoding field value of `len` bytes into `a` (the
 * fields of one request in turn).  Elements are "coding[;q=VALUE]"
 * separated by commas, case-insensitive; other parameters are ignored;
 * an element whose q is not a valid qvalue, or whose coding is not a
 * token, is skipped, as is the rest of a malformed element: the value is
 * a peer's and may be anything.  The first element naming a coding
 * counts.  Reads nothing past `len`, writes nothing but `a`. */
void compress_accept_parse(struct compress_accept *a, const char *value, size_t len);

/* What `coding` is worth to the client: its own q, else that of "*",
 * else 0 (not acceptable). */
unsigned compress_accept_q(const struct compress_accept *a, enum compress_coding coding);

/* The acceptable codings (q > 0) into `order`, the best first: a higher
 * q first, and among equal q the server's preference (enum order).
 * Returns how many. */
size_t compress_accept_order(const struct compress_accept *a,
                             enum compress_coding order[COMPRESS_CODINGS]);

/* The best of the codings in `offered` (bit 1 << coding) that the client
 * accepts, by compress_accept_order(); -1: none. */
int compress_accept_choose(const struct compress_accept *a, unsigned offered);

#endif
