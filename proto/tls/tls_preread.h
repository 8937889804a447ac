/*
 * tls_preread.h: what a TLS ClientHello says before any decryption: the
 * server name (SNI) and the ALPN protocols, read from the first bytes a
 * client sends (nginx's ssl_preread), so that a proxy can route a TLS
 * connection it does not terminate.  No OpenSSL: a strict, bounded parser
 * fed the stream's bytes as they come, split anywhere, the hello spread
 * over several records or not.
 */
#ifndef CORRAL_PROTO_TLS_PREREAD_H
#define CORRAL_PROTO_TLS_PREREAD_H

#include <stddef.h>
#include <stdint.h>

/* The most handshake bytes read: a ClientHello longer than this is
 * refused (nginx's preread_buffer_size default). */
#define TLS_PREREAD_MAX 16384
/* host_name is at most 255 bytes (RFC 6066); the ALPN list as text, the
 * names joined by ",", at most this much. */
#define TLS_PREREAD_NAME_MAX 255
#define TLS_PREREAD_ALPN_MAX 1024

/* A parse in progress: tls_preread_init() (or zero it) before the first
 * byte. */
struct tls_preread {
    uint32_t record_left; /* payload bytes of the current record still to come */
    uint8_t header[5];    /* a record header being read */
    uint8_t header_len;
    uint32_t msg_len; /* handshake bytes gathered in msg */
    uint8_t msg[TLS_PREREAD_MAX];
    /* The result, once tls_preread_feed() returned 1: NUL-terminated,
     * empty when the hello has no such extension. */
    char server_name[TLS_PREREAD_NAME_MAX + 1];
    char alpn[TLS_PREREAD_ALPN_MAX + 1];
};

/* Readies `p` for a new hello without touching the message buffer (16 KB
 * that need no zeroing). */
static inline void tls_preread_init(struct tls_preread *p)
{
    p->record_left = 0;
    p->header_len = 0;
    p->msg_len = 0;
    p->server_name[0] = p->alpn[0] = '\0';
}

/* Feeds the next `len` bytes of the client's stream.  Returns 1 once the
 * whole ClientHello is read (server_name and alpn filled in; the bytes
 * after it are not looked at), 0 when more is needed, -EPROTO when the
 * bytes are not a well-formed TLS ClientHello (not TLS, another message
 * first, a length that does not add up, a name with bytes no host name
 * has, an extension twice), or -EMSGSIZE past TLS_PREREAD_MAX (or a list
 * of protocols past TLS_PREREAD_ALPN_MAX).  After anything but 0, it must
 * not be fed again.  Allocates nothing; reads no byte past `len`. */
int tls_preread_feed(struct tls_preread *p, const uint8_t *data, size_t len);

#endif
