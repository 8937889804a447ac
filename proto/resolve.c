/*
 * resolve.c: re-resolving `server NAME:PORT resolve`: every `valid`, an A
 * query per name goes over UDP to one of the upstream's resolvers (in
 * turn), on the daemon's main loop, so no worker ever waits for DNS.  An
 * answer fills empty slots with new addresses and drains the slots whose
 * address left it; a drained slot that no request holds is empty again.
 */
#include "proto/resolve.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DNS_HEADER   12
#define DNS_TYPE_A   1
#define DNS_CLASS_IN 1
#define DNS_NAME_MAX 253
/* Answers come in one datagram: 512 bytes without EDNS, which the
 * queries do not offer; the buffer takes any datagram whole. */
#define DNS_DATAGRAM_MAX 4096

struct upstream_resolver {
    struct proxy_upstream *up;
    corral_loop *loop;
    corral_timer *timer;
    corral_io *io;
    int fd;
    size_t turn;                        /* the resolver asked this round */
    bool pending[UPSTREAM_MAX_SERVERS]; /* by the name's first slot */
    uint16_t ids[UPSTREAM_MAX_SERVERS]; /* the query id it waits for */
    struct sockaddr_storage asked;      /* where the queries went */
    socklen_t asked_len;
    uint64_t random;
};

/* ---------------------------------------------------------------- messages */

int dns_query_build(const char *name, uint16_t id, uint8_t *out, size_t size)
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
    static const uint8_t tail[] = {0, 0, DNS_TYPE_A, 0, DNS_CLASS_IN};
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

int dns_answer_parse(const uint8_t *msg, size_t len, uint16_t id, struct in_addr *out, size_t max)
{
    if (len < DNS_HEADER || read16(msg) != id || !(msg[2] & 0x80))
        return -EINVAL;
    if (msg[2] & 0x02) /* TC: truncated */
        return -EAGAIN;
    unsigned rcode = msg[3] & 0x0f;
    if (rcode == 3) /* NXDOMAIN: the name has no addresses any more */
        return 0;
    if (rcode != 0)
        return -EAGAIN;
    unsigned questions = read16(msg + 4), answers = read16(msg + 6);
    size_t pos = DNS_HEADER;
    for (unsigned i = 0; i < questions; i++) {
        if (!skip_name(msg, len, &pos) || pos + 4 > len)
            return -EINVAL;
        pos += 4;
    }
    size_t count = 0;
    for (unsigned i = 0; i < answers; i++) {
        if (!skip_name(msg, len, &pos) || pos + 10 > len)
            return -EINVAL;
        unsigned type = read16(msg + pos), class = read16(msg + pos + 2);
        unsigned rdlength = read16(msg + pos + 8);
        pos += 10;
        if (pos + rdlength > len)
            return -EINVAL;
        /* CNAMEs lead to the A records that follow them in the answer. */
        if (type == DNS_TYPE_A && class == DNS_CLASS_IN && rdlength == 4 && count < max)
            memcpy(&out[count++], msg + pos, 4);
        pos += rdlength;
    }
    return (int)count;
}

/* ------------------------------------------------------------------ slots */

static void slot_text(const struct upstream_server *s, char *buf, size_t size)
{
    const struct sockaddr_in *in = (const struct sockaddr_in *)&s->addr;
    if (inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)size) == NULL)
        snprintf(buf, size, "?");
}

static bool slot_has(const struct upstream_server *s, struct in_addr addr)
{
    const struct sockaddr_in *in = (const struct sockaddr_in *)&s->addr;
    return s->addrlen == sizeof(*in) && in->sin_addr.s_addr == addr.s_addr;
}

/* Applies an answer to the slots first..first+UPSTREAM_RESOLVE_SLOTS-1 of
 * one name.  Main loop only: it alone writes a slot's address, and only
 * into an empty one, which no request can be using (see
 * upstream_server_acquire()). */
static void apply(struct proxy_upstream *up, size_t first, const struct in_addr *addrs,
                  size_t count)
{
    struct upstream_server *slots = &up->servers[first];
    char text[INET_ADDRSTRLEN];
    for (size_t k = 0; k < UPSTREAM_RESOLVE_SLOTS; k++) {
        struct upstream_server *s = &slots[k];
        int state = atomic_load(&s->state);
        bool listed = false;
        for (size_t a = 0; state != UPSTREAM_SLOT_EMPTY && a < count; a++)
            listed = listed || slot_has(s, addrs[a]);
        if (state == UPSTREAM_SLOT_ACTIVE && !listed) {
            atomic_store(&s->state, UPSTREAM_SLOT_DRAINING);
            slot_text(s, text, sizeof(text));
            corral_log(CORRAL_LOG_INFO, "upstream %s: %s: %s is no longer in the answer: draining",
                       up->name, s->address, text);
        } else if (state == UPSTREAM_SLOT_DRAINING && listed) {
            atomic_store(&s->state, UPSTREAM_SLOT_ACTIVE);
        }
        if (atomic_load(&s->state) == UPSTREAM_SLOT_DRAINING && atomic_load(&s->conns) == 0)
            atomic_store(&s->state, UPSTREAM_SLOT_EMPTY);
    }
    for (size_t a = 0; a < count; a++) {
        size_t free_slot = UPSTREAM_RESOLVE_SLOTS;
        bool present = false;
        for (size_t k = 0; k < UPSTREAM_RESOLVE_SLOTS && !present; k++) {
            int state = atomic_load(&slots[k].state);
            if (state == UPSTREAM_SLOT_EMPTY && free_slot == UPSTREAM_RESOLVE_SLOTS)
                free_slot = k;
            present = state != UPSTREAM_SLOT_EMPTY && slot_has(&slots[k], addrs[a]);
        }
        if (present)
            continue;
        inet_ntop(AF_INET, &addrs[a], text, sizeof(text));
        if (free_slot == UPSTREAM_RESOLVE_SLOTS) {
            corral_log(CORRAL_LOG_WARN,
                       "upstream %s: %s: %s left out: a name has at most %d addresses at once",
                       up->name, slots[0].address, text, UPSTREAM_RESOLVE_SLOTS);
            continue;
        }
        struct upstream_server *s = &slots[free_slot];
        struct sockaddr_in in = {
            .sin_family = AF_INET, .sin_port = htons(s->resolve_port), .sin_addr = addrs[a]};
        memset(&s->addr, 0, sizeof(s->addr));
        memcpy(&s->addr, &in, sizeof(in));
        s->addrlen = sizeof(in);
        atomic_fetch_add(&s->gen, 1);
        atomic_store(&s->checked_down, false);
        atomic_store(&s->recovered_ms, 0);
        atomic_store(&s->state, UPSTREAM_SLOT_ACTIVE); /* publishes addr */
        corral_log(CORRAL_LOG_INFO, "upstream %s: %s: %s joins", up->name, s->address, text);
    }
}

/* ------------------------------------------------------------------ client */

static uint16_t next_id(struct upstream_resolver *r)
{
    r->random ^= r->random << 13;
    r->random ^= r->random >> 7;
    r->random ^= r->random << 17;
    return (uint16_t)(r->random >> 24);
}

static void on_readable(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    struct upstream_resolver *r = arg;
    struct proxy_upstream *up = r->up;
    for (int n = 0; n < 64; n++) {
        uint8_t msg[DNS_DATAGRAM_MAX];
        struct sockaddr_storage from;
        socklen_t from_len = sizeof(from);
        ssize_t len = recvfrom(r->fd, msg, sizeof(msg), 0, (struct sockaddr *)&from, &from_len);
        if (len < 0)
            return; /* EAGAIN, or an ICMP error from a resolver that is down */
        /* Only the resolver asked may answer. */
        if (from_len != r->asked_len || memcmp(&from, &r->asked, from_len) != 0)
            continue;
        for (size_t i = 0; i < up->server_count; i++) {
            if (!r->pending[i])
                continue;
            struct in_addr addrs[UPSTREAM_RESOLVE_SLOTS * 4];
            int count = dns_answer_parse(msg, (size_t)len, r->ids[i], addrs,
                                         sizeof(addrs) / sizeof(addrs[0]));
            if (count == -EINVAL)
                continue; /* not this name's answer */
            r->pending[i] = false;
            if (count >= 0)
                apply(up, i, addrs, (size_t)count);
            break;
        }
    }
}

/* One round: a query per name, to the next resolver. */
static void on_timer(corral_timer *timer, void *arg)
{
    struct upstream_resolver *r = arg;
    struct proxy_upstream *up = r->up;
    corral_timer_start(timer, up->resolve_valid_ms);
    size_t which = r->turn++ % up->resolver_count;
    r->asked = up->resolvers[which];
    r->asked_len = up->resolver_lens[which];
    for (size_t i = 0; i < up->server_count; i++) {
        const struct upstream_server *s = &up->servers[i];
        if (s->resolve_name == NULL || s->resolve_slot != 0)
            continue;
        /* A query still unanswered from the last round is given up: the
         * name is asked again in the next one. */
        if (!r->pending[i]) {
            uint8_t query[DNS_HEADER + DNS_NAME_MAX + 2 + 4];
            r->ids[i] = next_id(r);
            int len = dns_query_build(s->resolve_name, r->ids[i], query, sizeof(query));
            if (len < 0)
                continue;
            r->pending[i] = sendto(r->fd, query, (size_t)len, MSG_NOSIGNAL,
                                   (const struct sockaddr *)&r->asked, r->asked_len) == len;
        } else {
            r->pending[i] = false; /* unanswered: asked again next round */
        }
    }
}

int upstream_resolve_start(struct proxy_upstream *up, corral_loop *loop)
{
    if (!up->has_resolve || up->resolver != NULL)
        return 0;
    struct upstream_resolver *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->up = up;
    r->loop = loop;
    r->random = corral_monotonic_ns() | 1;
    r->fd = socket(up->resolvers[0].ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = r->fd < 0 ? -errno : 0;
    if (err == 0)
        err = corral_io_new(loop, r->fd, CORRAL_READABLE, on_readable, r, &r->io);
    if (err == 0)
        err = corral_timer_new(loop, on_timer, r, &r->timer);
    up->resolver = r;
    if (err != 0) {
        upstream_resolve_stop(up);
        return err;
    }
    corral_timer_start(r->timer, 0); /* the first answers at once */
    return 0;
}

void upstream_resolve_stop(struct proxy_upstream *up)
{
    struct upstream_resolver *r = up->resolver;
    if (r == NULL)
        return;
    up->resolver = NULL;
    if (r->timer != NULL)
        corral_timer_free(r->timer);
    if (r->io != NULL)
        corral_io_free(r->io);
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}
