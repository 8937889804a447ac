/*
 * resolve.c: re-resolving `server NAME:PORT resolve`: when the least TTL
 * of the last answers runs out (or every `valid`), an A and an AAAA query
 * per name (A only with ipv6=off) go over UDP to one of the upstream's
 * resolvers (in turn), on the daemon's main loop, so no worker ever waits
 * for DNS.  Once both are answered, their addresses fill
 * empty slots and drain the slots whose address left them; a drained slot
 * that no request holds is empty again.
 */
#include "proto/upstream/resolve.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DNS_HEADER   12
#define DNS_CLASS_IN 1
#define DNS_NAME_MAX 253
/* Answers come in one datagram: 512 bytes without EDNS, which the
 * queries do not offer; the buffer takes any datagram whole. */
#define DNS_DATAGRAM_MAX 4096

/* The record types asked for each name: A, then AAAA unless ipv6=off. */
static const uint16_t asked_types[] = {DNS_TYPE_A, DNS_TYPE_AAAA};
#define DNS_ASKED (sizeof(asked_types) / sizeof(asked_types[0]))

/* One name's round: the queries it waits for, and the addresses of the
 * answers so far, applied together once every query is answered (an A
 * answer alone would drain the IPv6 addresses). */
struct name_round {
    uint16_t ids[DNS_ASKED];
    bool pending[DNS_ASKED];
    bool answered[DNS_ASKED]; /* with something to say (not a failure) */
    struct dns_addr *addrs;   /* room for twice the name's slots */
    size_t count, room;
    size_t over; /* records beyond the room */
};

struct upstream_resolver {
    struct proxy_upstream *up;
    corral_loop *loop;
    corral_timer *timer;
    corral_io *io;
    int fd;
    size_t turn;                   /* the resolver asked this round */
    struct name_round *rounds;     /* by the name's first slot: server_count of them */
    struct sockaddr_storage asked; /* where the queries went */
    socklen_t asked_len;
    uint64_t random;
    uint64_t round_ms;    /* loop clock when the round began */
    uint32_t round_ttl;   /* the least TTL of the round's answers so far, seconds */
    uint32_t last_ttl_ms; /* the wait the last round's TTLs asked for */
};

/* ---------------------------------------------------------------- messages */

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

int resolve_answer_parse(const uint8_t *msg, size_t len, uint16_t id, uint16_t type,
                         struct dns_addr *out, size_t max, uint32_t *ttl)
{
    size_t want_len = type == DNS_TYPE_AAAA ? 16 : 4;
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
        unsigned rr_type = read16(msg + pos), class = read16(msg + pos + 2);
        unsigned rdlength = read16(msg + pos + 8);
        pos += 10;
        if (pos + rdlength > len)
            return -EINVAL;
        /* CNAMEs lead to the records that follow them in the answer;
         * records of another type than asked are not the answer. */
        if (rr_type == type && class == DNS_CLASS_IN && rdlength == want_len) {
            uint32_t rr_ttl = (uint32_t)read16(msg + pos - 6) << 16 | read16(msg + pos - 4);
            if (rr_ttl > INT32_MAX) /* RFC 2181 8: such a TTL is 0 */
                rr_ttl = 0;
            if (rr_ttl < *ttl)
                *ttl = rr_ttl;
            if (count < max) {
                out[count] = (struct dns_addr){.family = want_len == 16 ? AF_INET6 : AF_INET};
                memcpy(out[count].bytes, msg + pos, want_len);
            }
            if (count < INT_MAX)
                count++;
        }
        pos += rdlength;
    }
    return (int)count;
}

/* ------------------------------------------------------------------ slots */

static void slot_text(const struct upstream_server *s, char *buf, size_t size)
{
    const struct sockaddr_in *in = (const struct sockaddr_in *)&s->addr;
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&s->addr;
    const void *bytes =
        s->addr.ss_family == AF_INET6 ? (const void *)&in6->sin6_addr : (const void *)&in->sin_addr;
    if (inet_ntop(s->addr.ss_family, bytes, buf, (socklen_t)size) == NULL)
        snprintf(buf, size, "?");
}

static bool slot_has(const struct upstream_server *s, const struct dns_addr *a)
{
    if (a->family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&s->addr;
        return s->addrlen == sizeof(*in6) && memcmp(&in6->sin6_addr, a->bytes, 16) == 0;
    }
    const struct sockaddr_in *in = (const struct sockaddr_in *)&s->addr;
    return s->addrlen == sizeof(*in) && memcmp(&in->sin_addr, a->bytes, 4) == 0;
}

/* Points slot `s` at `a`, on its port. */
static void slot_set(struct upstream_server *s, const struct dns_addr *a)
{
    memset(&s->addr, 0, sizeof(s->addr));
    if (a->family == AF_INET6) {
        struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(s->resolve_port)};
        memcpy(&in6.sin6_addr, a->bytes, 16);
        memcpy(&s->addr, &in6, sizeof(in6));
        s->addrlen = sizeof(in6);
    } else {
        struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(s->resolve_port)};
        memcpy(&in.sin_addr, a->bytes, 4);
        memcpy(&s->addr, &in, sizeof(in));
        s->addrlen = sizeof(in);
    }
}

/* Applies an answer to the slots of one name, from `first` on.  Main loop only: it alone writes a
 * slot's address, and only into an empty one, which no request can be using (see
 * upstream_server_acquire()). */
static void apply(struct proxy_upstream *up, size_t first, const struct dns_addr *addrs,
                  size_t count)
{
    struct upstream_server *slots = &up->servers[first];
    size_t slot_count = slots[0].resolve_slots;
    char text[INET6_ADDRSTRLEN];
    for (size_t k = 0; k < slot_count; k++) {
        struct upstream_server *s = &slots[k];
        int state = atomic_load(&s->state);
        bool listed = false;
        for (size_t a = 0; state != UPSTREAM_SLOT_EMPTY && a < count; a++)
            listed = listed || slot_has(s, &addrs[a]);
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
        size_t free_slot = slot_count;
        bool present = false;
        for (size_t k = 0; k < slot_count && !present; k++) {
            int state = atomic_load(&slots[k].state);
            if (state == UPSTREAM_SLOT_EMPTY && free_slot == slot_count)
                free_slot = k;
            present = state != UPSTREAM_SLOT_EMPTY && slot_has(&slots[k], &addrs[a]);
        }
        if (present)
            continue;
        inet_ntop(addrs[a].family, addrs[a].bytes, text, sizeof(text));
        if (free_slot == slot_count) {
            corral_log(CORRAL_LOG_WARN,
                       "upstream %s: %s: %s left out: this name has at most %zu addresses at "
                       "once (its max_addresses)",
                       up->name, slots[0].address, text, slot_count);
            continue;
        }
        struct upstream_server *s = &slots[free_slot];
        slot_set(s, &addrs[a]);
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

/* Without valid=, the next round comes when the least TTL of this one's
 * answers so far runs out (bounded both ways). */
static void resolve_rearm(struct upstream_resolver *r)
{
    if (r->up->resolve_valid_ms != 0 || r->round_ttl == UINT32_MAX)
        return;
    uint64_t wait = (uint64_t)r->round_ttl * 1000;
    if (wait < RESOLVE_TTL_MIN_MS)
        wait = RESOLVE_TTL_MIN_MS;
    if (wait > RESOLVE_TTL_MAX_MS)
        wait = RESOLVE_TTL_MAX_MS;
    r->last_ttl_ms = (uint32_t)wait;
    uint64_t elapsed = corral_loop_now(r->loop) - r->round_ms;
    corral_timer_start(r->timer, wait > elapsed ? wait - elapsed : 0);
}

/* Reads `msg` as an answer to one of name `i`'s queries: false when it is
 * none of them.  The name's slots change once all its queries are
 * answered, and only if none failed. */
static bool take_answer(struct upstream_resolver *r, size_t i, const uint8_t *msg, size_t len)
{
    struct name_round *nr = &r->rounds[i];
    size_t room = nr->room - nr->count;
    size_t t = 0;
    int count = -EINVAL;
    uint32_t ttl = UINT32_MAX;
    for (; t < DNS_ASKED && count == -EINVAL; t++)
        if (nr->pending[t])
            count = resolve_answer_parse(msg, len, nr->ids[t], asked_types[t],
                                         nr->addrs + nr->count, room, &ttl);
    if (count == -EINVAL)
        return false;
    nr->pending[t - 1] = false;
    nr->answered[t - 1] = count >= 0;
    if (count > 0) {
        size_t kept = (size_t)count < room ? (size_t)count : room;
        nr->count += kept;
        nr->over += (size_t)count - kept;
    }
    if (ttl < r->round_ttl)
        r->round_ttl = ttl;
    size_t asked = r->up->resolve_ipv4_only ? 1 : DNS_ASKED;
    for (size_t k = 0; k < asked; k++)
        if (!nr->answered[k])
            return true; /* still waiting, or failed: the slots stay as they are */
    if (nr->over > 0)
        corral_log(CORRAL_LOG_WARN, "upstream %s: %s: %zu more addresses than kept are left out",
                   r->up->name, r->up->servers[i].address, nr->over);
    apply(r->up, i, nr->addrs, nr->count);
    resolve_rearm(r);
    return true;
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
        for (size_t i = 0; i < up->server_count; i++)
            if (take_answer(r, i, msg, (size_t)len))
                break;
    }
}

/* One round: a query per name, to the next resolver. */
static void on_timer(corral_timer *timer, void *arg)
{
    struct upstream_resolver *r = arg;
    struct proxy_upstream *up = r->up;
    /* valid=, or what the last round's TTLs asked for until this round's
     * answers say (resolve_rearm()). */
    corral_timer_start(timer, up->resolve_valid_ms != 0 ? up->resolve_valid_ms : r->last_ttl_ms);
    r->round_ms = corral_loop_now(r->loop);
    r->round_ttl = UINT32_MAX;
    size_t which = r->turn++ % up->resolver_count;
    r->asked = up->resolvers[which];
    r->asked_len = up->resolver_lens[which];
    for (size_t i = 0; i < up->server_count; i++) {
        const struct upstream_server *s = &up->servers[i];
        if (s->resolve_name == NULL || s->resolve_slot != 0)
            continue;
        /* Queries still unanswered from the last round are given up: the
         * name is asked again in the next one. */
        struct name_round *nr = &r->rounds[i];
        bool late = false;
        for (size_t t = 0; t < DNS_ASKED; t++)
            late = late || nr->pending[t];
        *nr = (struct name_round){.addrs = nr->addrs, .room = nr->room};
        if (late)
            continue;
        size_t asked = up->resolve_ipv4_only ? 1 : DNS_ASKED;
        for (size_t t = 0; t < asked; t++) {
            uint8_t query[DNS_HEADER + DNS_NAME_MAX + 2 + 4];
            nr->ids[t] = next_id(r);
            int len = resolve_query_build(s->resolve_name, nr->ids[t], asked_types[t], query,
                                          sizeof(query));
            if (len < 0)
                continue;
            nr->pending[t] = sendto(r->fd, query, (size_t)len, MSG_NOSIGNAL,
                                    (const struct sockaddr *)&r->asked, r->asked_len) == len;
        }
    }
}

int resolve_start(struct proxy_upstream *up, corral_loop *loop)
{
    if (!up->has_resolve || up->resolver != NULL)
        return 0;
    struct upstream_resolver *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->up = up;
    r->loop = loop;
    r->fd = -1;
    r->rounds = calloc(up->server_count, sizeof(*r->rounds));
    if (r->rounds == NULL) {
        free(r);
        return -ENOMEM;
    }
    for (size_t i = 0; i < up->server_count; i++) {
        const struct upstream_server *s = &up->servers[i];
        if (s->resolve_name == NULL || s->resolve_slot != 0)
            continue;
        r->rounds[i].room = 2 * (size_t)s->resolve_slots;
        r->rounds[i].addrs = calloc(r->rounds[i].room, sizeof(*r->rounds[i].addrs));
        if (r->rounds[i].addrs == NULL) {
            up->resolver = r;
            resolve_stop(up);
            return -ENOMEM;
        }
    }
    r->last_ttl_ms = RESOLVE_RETRY_MS;
    r->random = corral_monotonic_ns() | 1;
    r->fd = socket(up->resolvers[0].ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = r->fd < 0 ? -errno : 0;
    if (err == 0)
        err = corral_io_new(loop, r->fd, CORRAL_READABLE, on_readable, r, &r->io);
    if (err == 0)
        err = corral_timer_new(loop, on_timer, r, &r->timer);
    up->resolver = r;
    if (err != 0) {
        resolve_stop(up);
        return err;
    }
    corral_timer_start(r->timer, 0); /* the first answers at once */
    return 0;
}

void resolve_stop(struct proxy_upstream *up)
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
    for (size_t i = 0; i < up->server_count; i++)
        free(r->rounds[i].addrs);
    free(r->rounds);
    free(r);
}
