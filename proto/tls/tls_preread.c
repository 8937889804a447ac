/*
 * tls_preread.c: the ClientHello parser of tls_preread.h.  Records are
 * taken apart as they come (RFC 8446 5.1: handshake records, none empty),
 * their payloads gathered into the handshake message, and the message is
 * parsed once whole: every length checked against what contains it.
 */
#include "proto/tls/tls_preread.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define RECORD_HANDSHAKE 22
#define RECORD_MAX       16384 /* 2^14 bytes of plaintext per record */
#define HELLO_CLIENT     1
#define EXT_SERVER_NAME  0
#define EXT_ALPN         16
#define NAME_HOST        0

/* A reader over a bounded byte range: every take checks what is left. */
struct cursor {
    const uint8_t *p, *end;
};

static bool take(struct cursor *c, size_t n, const uint8_t **out)
{
    if ((size_t)(c->end - c->p) < n)
        return false;
    *out = c->p;
    c->p += n;
    return true;
}

static bool take_u8(struct cursor *c, size_t *out)
{
    const uint8_t *b;
    if (!take(c, 1, &b))
        return false;
    *out = b[0];
    return true;
}

static bool take_u16(struct cursor *c, size_t *out)
{
    const uint8_t *b;
    if (!take(c, 2, &b))
        return false;
    *out = (size_t)b[0] << 8 | b[1];
    return true;
}

/* A vector with a length prefix of `width` bytes (1 or 2), as a cursor of
 * its own. */
static bool take_vector(struct cursor *c, int width, struct cursor *out)
{
    size_t len;
    if (!(width == 1 ? take_u8(c, &len) : take_u16(c, &len)))
        return false;
    const uint8_t *b;
    if (!take(c, len, &b))
        return false;
    *out = (struct cursor){b, b + len};
    return true;
}

static bool host_byte(uint8_t b)
{
    return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '-' ||
           b == '.' || b == '_';
}

/* server_name (RFC 6066 3): one host_name at most, of host name bytes. */
static int parse_server_name(struct cursor ext, struct tls_preread *p)
{
    struct cursor list;
    if (!take_vector(&ext, 2, &list) || ext.p != ext.end || list.p == list.end)
        return -EPROTO;
    bool seen = false;
    while (list.p < list.end) {
        size_t type;
        struct cursor name;
        if (!take_u8(&list, &type) || !take_vector(&list, 2, &name))
            return -EPROTO;
        if (type != NAME_HOST)
            continue;
        size_t len = (size_t)(name.end - name.p);
        if (seen || len == 0 || len > TLS_PREREAD_NAME_MAX)
            return -EPROTO;
        for (size_t i = 0; i < len; i++)
            if (!host_byte(name.p[i]))
                return -EPROTO;
        memcpy(p->server_name, name.p, len);
        p->server_name[len] = '\0';
        seen = true;
    }
    return 0;
}

/* application_layer_protocol_negotiation (RFC 7301 3.1): a non-empty list
 * of non-empty names, given as text joined by "," (nginx's
 * $ssl_preread_alpn_protocols); a name with "," or a byte outside
 * printable ASCII could not be told apart there, so it is refused. */
static int parse_alpn(struct cursor ext, struct tls_preread *p)
{
    struct cursor list;
    if (!take_vector(&ext, 2, &list) || ext.p != ext.end || list.p == list.end)
        return -EPROTO;
    size_t used = 0;
    while (list.p < list.end) {
        struct cursor name;
        if (!take_vector(&list, 1, &name) || name.p == name.end)
            return -EPROTO;
        size_t len = (size_t)(name.end - name.p);
        for (size_t i = 0; i < len; i++)
            if (name.p[i] <= 0x20 || name.p[i] >= 0x7f || name.p[i] == ',')
                return -EPROTO;
        if (used + (used > 0) + len > TLS_PREREAD_ALPN_MAX)
            return -EMSGSIZE;
        if (used > 0)
            p->alpn[used++] = ',';
        memcpy(p->alpn + used, name.p, len);
        used += len;
    }
    p->alpn[used] = '\0';
    return 0;
}

/* The ClientHello's body (RFC 8446 4.1.2, and TLS 1.2's, whose extensions
 * may be absent). */
static int parse_hello(struct cursor c, struct tls_preread *p)
{
    const uint8_t *version, *random;
    struct cursor session, suites, compression;
    if (!take(&c, 2, &version) || version[0] != 3 || !take(&c, 32, &random) ||
        !take_vector(&c, 1, &session) || session.end - session.p > 32 ||
        !take_vector(&c, 2, &suites) || suites.p == suites.end ||
        (suites.end - suites.p) % 2 != 0 || !take_vector(&c, 1, &compression) ||
        compression.p == compression.end)
        return -EPROTO;
    p->server_name[0] = p->alpn[0] = '\0';
    if (c.p == c.end)
        return 1; /* no extensions */
    struct cursor exts;
    if (!take_vector(&c, 2, &exts) || c.p != c.end)
        return -EPROTO;
    /* Each extension type once (RFC 8446 4.2): the types seen, as bits. */
    uint64_t seen[65536 / 64] = {0};
    while (exts.p < exts.end) {
        size_t type;
        struct cursor body;
        if (!take_u16(&exts, &type) || !take_vector(&exts, 2, &body))
            return -EPROTO;
        if (seen[type / 64] >> (type % 64) & 1)
            return -EPROTO;
        seen[type / 64] |= UINT64_C(1) << (type % 64);
        int rc = type == EXT_SERVER_NAME ? parse_server_name(body, p)
                 : type == EXT_ALPN      ? parse_alpn(body, p)
                                         : 0;
        if (rc != 0)
            return rc;
    }
    return 1;
}

/* The handshake message gathered so far: 1 once the ClientHello is whole
 * and parsed, 0 before. */
static int message_check(struct tls_preread *p)
{
    if (p->msg_len < 4)
        return 0;
    if (p->msg[0] != HELLO_CLIENT)
        return -EPROTO;
    size_t body = (size_t)p->msg[1] << 16 | (size_t)p->msg[2] << 8 | p->msg[3];
    if (body > TLS_PREREAD_MAX - 4)
        return -EMSGSIZE;
    if (p->msg_len < 4 + body)
        return 0;
    return parse_hello((struct cursor){p->msg + 4, p->msg + 4 + body}, p);
}

int tls_preread_feed(struct tls_preread *p, const uint8_t *data, size_t len)
{
    const uint8_t *end = data + len;
    while (data < end) {
        if (p->record_left == 0) {
            size_t n = sizeof(p->header) - p->header_len;
            if (n > (size_t)(end - data))
                n = (size_t)(end - data);
            memcpy(p->header + p->header_len, data, n);
            p->header_len = (uint8_t)(p->header_len + n);
            data += n;
            if (p->header_len < sizeof(p->header))
                return 0;
            p->header_len = 0;
            size_t record = (size_t)p->header[3] << 8 | p->header[4];
            if (p->header[0] != RECORD_HANDSHAKE || p->header[1] != 3 || p->header[2] > 4 ||
                record == 0 || record > RECORD_MAX)
                return -EPROTO;
            p->record_left = (uint32_t)record;
            continue;
        }
        size_t n = p->record_left;
        if (n > (size_t)(end - data))
            n = (size_t)(end - data);
        if (n > sizeof(p->msg) - p->msg_len)
            return -EMSGSIZE;
        memcpy(p->msg + p->msg_len, data, n);
        p->msg_len += (uint32_t)n;
        p->record_left -= (uint32_t)n;
        data += n;
        int rc = message_check(p);
        if (rc != 0)
            return rc;
    }
    return 0;
}
