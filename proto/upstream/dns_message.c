/*
 * dns_message.c: DNS queries and answers (dns_message.h).
 */
#include "proto/upstream/dns_message.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#define DNS_CLASS_IN 1
/* Compression pointers followed in one name: more is a loop. */
#define DNS_POINTERS_MAX 16

int resolve_query_build(const char *name, uint16_t id, uint16_t type, uint8_t *out, size_t size)
{
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > DNS_NAME_MAX || size < DNS_HEADER + name_len + 2 + 4)
        return -EINVAL;
    uint8_t header[DNS_HEADER] = {(uint8_t)(id >> 8), (uint8_t)id, 0x01 /* RD */, 0, 0, 1};
    memcpy(out, header, sizeof(header));
    /* The name as labels: each dot becomes the length of the label after
     * it, so the labels take name_len + 1 bytes, then a zero. */
    uint8_t *labels = out + DNS_HEADER;
    memcpy(labels + 1, name, name_len);
    size_t start = 0; /* of the current label's length byte */
    for (size_t i = 0; i <= name_len; i++) {
        if (i < name_len && name[i] != '.')
            continue;
        size_t len = i - start;
        if (len == 0 || len > 63)
            return -EINVAL;
        labels[start] = (uint8_t)len;
        start = i + 1;
    }
    const uint8_t tail[] = {0, (uint8_t)(type >> 8), (uint8_t)type, 0, DNS_CLASS_IN};
    memcpy(labels + name_len + 1, tail, sizeof(tail));
    return (int)(DNS_HEADER + name_len + 1 + sizeof(tail));
}

/* Steps over a name at *pos: labels, ending with a zero or a pointer. */
static bool skip_name(const uint8_t *msg, size_t len, size_t *pos)
{
    for (unsigned labels = 0; labels < 128; labels++) {
        if (*pos >= len)
            return false;
        uint8_t b = msg[*pos];
        if ((b & 0xc0) == 0xc0) {
            if (*pos + 2 > len)
                return false;
            *pos += 2;
            return true;
        }
        if ((b & 0xc0) != 0)
            return false;
        *pos += 1u + b;
        if (b == 0)
            return true;
    }
    return false;
}

static unsigned read16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

/* A host name's label byte (RFC 952, with '_' for service labels). */
static bool name_byte(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* The name at `pos` as text (labels joined by dots, "" for the root) into
 * `out` (DNS_NAME_MAX + 1 bytes), following compression pointers, each
 * to an earlier offset and DNS_POINTERS_MAX at most.  False when it is
 * malformed, too long, or not a host name. */
static bool read_name(const uint8_t *msg, size_t len, size_t pos, char *out)
{
    size_t used = 0;
    unsigned pointers = 0;
    for (;;) {
        if (pos >= len)
            return false;
        uint8_t b = msg[pos];
        if ((b & 0xc0) == 0xc0) {
            if (pos + 2 > len || ++pointers > DNS_POINTERS_MAX)
                return false;
            size_t to = (size_t)(b & 0x3f) << 8 | msg[pos + 1];
            if (to >= pos)
                return false; /* only backwards: no loop */
            pos = to;
            continue;
        }
        if ((b & 0xc0) != 0)
            return false;
        if (b == 0) {
            out[used] = '\0';
            return true;
        }
        if (pos + 1 + b > len || used + (used > 0) + b > DNS_NAME_MAX)
            return false;
        if (used > 0)
            out[used++] = '.';
        for (size_t k = 0; k < b; k++) {
            uint8_t c = msg[pos + 1 + k];
            if (!name_byte(c))
                return false;
            out[used++] = (char)c;
        }
        pos += 1u + b;
    }
}

/* A walk over an answer's records, and the record it is at. */
struct dns_answer {
    const uint8_t *msg;
    size_t len, pos;
    int left; /* records not yet read; negative: why the walk stopped */
    uint32_t ttl;
    size_t data, data_len; /* the record's data, within msg */
};

/* Checks an answer's header for query `id` and steps over its questions:
 * a->left is the count of answer records (0 for NXDOMAIN), or -EAGAIN or
 * -EINVAL as the parsers say. */
static void answer_begin(struct dns_answer *a, const uint8_t *msg, size_t len, uint16_t id)
{
    *a = (struct dns_answer){.msg = msg, .len = len, .pos = DNS_HEADER, .left = -EINVAL};
    if (len < DNS_HEADER || read16(msg) != id || !(msg[2] & 0x80))
        return;
    unsigned rcode = msg[3] & 0x0f;
    if ((msg[2] & 0x02) || (rcode != 0 && rcode != 3)) { /* TC (truncated), or a failure */
        a->left = -EAGAIN;
        return;
    }
    if (rcode == 3) { /* NXDOMAIN: the name has no records any more */
        a->left = 0;
        return;
    }
    unsigned questions = read16(msg + 4);
    for (unsigned i = 0; i < questions; i++) {
        if (!skip_name(msg, len, &a->pos) || a->pos + 4 > len)
            return;
        a->pos += 4;
    }
    a->left = (int)read16(msg + 6);
}

/* Steps to the next answer record of class IN and type `type`: CNAMEs
 * lead to the records that follow them in the answer, and records of
 * another type than asked are not the answer.  False when none is left,
 * or (a->left -EINVAL) when a record does not fit the message. */
static bool answer_next(struct dns_answer *a, unsigned type)
{
    const uint8_t *msg = a->msg;
    while (a->left > 0) {
        a->left--;
        if (!skip_name(msg, a->len, &a->pos) || a->pos + 10 > a->len) {
            a->left = -EINVAL;
            return false;
        }
        unsigned rr_type = read16(msg + a->pos), class = read16(msg + a->pos + 2);
        a->ttl = (uint32_t)read16(msg + a->pos + 4) << 16 | read16(msg + a->pos + 6);
        if (a->ttl > INT32_MAX) /* RFC 2181 8: such a TTL is 0 */
            a->ttl = 0;
        a->data_len = read16(msg + a->pos + 8);
        a->data = a->pos + 10;
        if (a->data + a->data_len > a->len) {
            a->left = -EINVAL;
            return false;
        }
        a->pos = a->data + a->data_len;
        if (rr_type == type && class == DNS_CLASS_IN)
            return true;
    }
    return false;
}

int resolve_answer_parse(const uint8_t *msg, size_t len, uint16_t id, uint16_t type,
                         struct dns_addr *out, size_t max, uint32_t *ttl)
{
    size_t want_len = type == DNS_TYPE_AAAA ? 16 : 4;
    struct dns_answer a;
    size_t count = 0;
    for (answer_begin(&a, msg, len, id); answer_next(&a, type);) {
        if (a.data_len != want_len)
            continue;
        if (a.ttl < *ttl)
            *ttl = a.ttl;
        if (count < max) {
            out[count] = (struct dns_addr){.family = want_len == 16 ? AF_INET6 : AF_INET};
            memcpy(out[count].bytes, msg + a.data, want_len);
        }
        count++;
    }
    return a.left < 0 ? a.left : (int)count;
}

int resolve_srv_parse(const uint8_t *msg, size_t len, uint16_t id, struct dns_srv *out, size_t max,
                      uint32_t *ttl)
{
    struct dns_answer a;
    size_t count = 0;
    for (answer_begin(&a, msg, len, id); answer_next(&a, DNS_TYPE_SRV);) {
        struct dns_srv srv;
        /* the target within the record's data: a message cut to it */
        if (a.data_len < 7 || !read_name(msg, a.data + a.data_len, a.data + 6, srv.target))
            return -EINVAL;
        if (srv.target[0] == '\0')
            continue; /* ".": no such service there */
        srv.priority = (uint16_t)read16(msg + a.data);
        srv.weight = (uint16_t)read16(msg + a.data + 2);
        srv.port = (uint16_t)read16(msg + a.data + 4);
        if (a.ttl < *ttl)
            *ttl = a.ttl;
        if (count < max)
            out[count] = srv;
        count++;
    }
    return a.left < 0 ? a.left : (int)count;
}
