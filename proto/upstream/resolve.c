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
    /* An SRV name (service=): its query, then its targets' A and AAAA
     * queries; each address's port, weight and backup by its record. */
    uint16_t srv_id;
    bool srv_pending;
    struct srv_target *targets; /* room: the name's slots */
    size_t target_count;
    struct srv_peer *peers; /* beside addrs */
};

/* What an SRV record gives the addresses of its target. */
struct srv_peer {
    uint16_t port;
    unsigned weight;
    bool backup;
};

struct srv_target {
    struct dns_srv rec;
    struct srv_peer peer;
    uint16_t ids[DNS_ASKED];
    bool pending[DNS_ASKED];
    bool answered[DNS_ASKED];
};

/* An SRV record's weight as a server's (1 to SRV_WEIGHT_MAX): 0, which
 * RFC 2782 gives to records seldom to be picked, is the least. */
#define SRV_WEIGHT_MAX 1000

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

/* Whether slot `s` is `a` (and, for an SRV name, its record's `peer`). */
static bool slot_has(const struct upstream_server *s, const struct dns_addr *a,
                     const struct srv_peer *peer)
{
    if (peer != NULL &&
        (s->resolve_port != peer->port || s->weight != peer->weight || s->backup != peer->backup))
        return false;
    if (a->family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&s->addr;
        return s->addrlen == sizeof(*in6) && memcmp(&in6->sin6_addr, a->bytes, 16) == 0;
    }
    const struct sockaddr_in *in = (const struct sockaddr_in *)&s->addr;
    return s->addrlen == sizeof(*in) && memcmp(&in->sin_addr, a->bytes, 4) == 0;
}

/* Points slot `s` at `a`, on its port (an SRV record's, with its weight
 * and backup, for an SRV name). */
static void slot_set(struct upstream_server *s, const struct dns_addr *a,
                     const struct srv_peer *peer)
{
    if (peer != NULL) {
        s->resolve_port = peer->port;
        atomic_store(&s->weight, peer->weight);
        atomic_store(&s->backup, peer->backup);
    }
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

/* Puts each address of an answer that no slot of `slots` has into an
 * empty one; `warn`: logs those left out for want of one. */
static void apply_joins(struct proxy_upstream *up, struct upstream_server *slots,
                        const struct dns_addr *addrs, const struct srv_peer *peers, size_t count,
                        bool warn)
{
    size_t slot_count = slots[0].resolve_slots;
    char text[INET6_ADDRSTRLEN];
    for (size_t a = 0; a < count; a++) {
        size_t free_slot = slot_count;
        bool present = false;
        for (size_t k = 0; k < slot_count && !present; k++) {
            int state = atomic_load(&slots[k].state);
            if (state == UPSTREAM_SLOT_EMPTY && free_slot == slot_count)
                free_slot = k;
            present = state != UPSTREAM_SLOT_EMPTY &&
                      slot_has(&slots[k], &addrs[a], peers != NULL ? &peers[a] : NULL);
        }
        if (present)
            continue;
        inet_ntop(addrs[a].family, addrs[a].bytes, text, sizeof(text));
        if (free_slot == slot_count) {
            if (warn)
                corral_log(CORRAL_LOG_WARN,
                           "upstream %s: %s: %s left out: this name has at most %zu addresses at "
                           "once (its max_addresses)",
                           up->name, slots[0].address, text, slot_count);
            continue;
        }
        struct upstream_server *s = &slots[free_slot];
        slot_set(s, &addrs[a], peers != NULL ? &peers[a] : NULL);
        atomic_fetch_add(&s->gen, 1);
        atomic_store(&s->checked_down, false);
        atomic_store(&s->recovered_ms, 0);
        atomic_store(&s->state, UPSTREAM_SLOT_ACTIVE); /* publishes addr */
        corral_log(CORRAL_LOG_INFO, "upstream %s: %s: %s joins", up->name, s->address, text);
    }
}

/* Applies an answer to the slots of one name, from `first` on.  Main loop only: it alone writes a
 * slot's address, and only into an empty one, which no request can be using (see
 * upstream_server_acquire()).  The new addresses join before the old ones drain, so that a
 * request in between finds a server; those that find no empty slot then join once the drained
 * ones have emptied theirs. */
static void apply(struct proxy_upstream *up, size_t first, const struct dns_addr *addrs,
                  const struct srv_peer *peers, size_t count)
{
    struct upstream_server *slots = &up->servers[first];
    size_t slot_count = slots[0].resolve_slots;
    char text[INET6_ADDRSTRLEN];
    apply_joins(up, slots, addrs, peers, count, false);
    for (size_t k = 0; k < slot_count; k++) {
        struct upstream_server *s = &slots[k];
        int state = atomic_load(&s->state);
        bool listed = false;
        for (size_t a = 0; state != UPSTREAM_SLOT_EMPTY && a < count; a++)
            listed = listed || slot_has(s, &addrs[a], peers != NULL ? &peers[a] : NULL);
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
    apply_joins(up, slots, addrs, peers, count, true);
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

static bool take_srv_answer(struct upstream_resolver *r, size_t i, const uint8_t *msg, size_t len);

/* Reads `msg` as an answer to one of name `i`'s queries: false when it is
 * none of them.  The name's slots change once all its queries are
 * answered, and only if none failed. */
static bool take_answer(struct upstream_resolver *r, size_t i, const uint8_t *msg, size_t len)
{
    if (r->up->servers[i].resolve_srv)
        return take_srv_answer(r, i, msg, len);
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
    apply(r->up, i, nr->addrs, NULL, nr->count);
    resolve_rearm(r);
    return true;
}

/* Sends the queries of type `types[t]` for `name` (A, then AAAA unless
 * ipv6=off), noting their ids and whether they left. */
static void send_queries(struct upstream_resolver *r, const char *name, uint16_t *ids,
                         bool *pending)
{
    size_t asked = r->up->resolve_ipv4_only ? 1 : DNS_ASKED;
    for (size_t t = 0; t < asked; t++) {
        uint8_t query[DNS_HEADER + DNS_NAME_MAX + 2 + 4];
        ids[t] = next_id(r);
        int len = resolve_query_build(name, ids[t], asked_types[t], query, sizeof(query));
        pending[t] = len > 0 && sendto(r->fd, query, (size_t)len, MSG_NOSIGNAL,
                                       (const struct sockaddr *)&r->asked, r->asked_len) == len;
    }
}

/* The SRV answer of name `i`: its records of the best (least) priority
 * are the primaries, the others backups; a `backup` server's best are
 * backups and the others are dropped, as nginx does.  Their targets are
 * asked for next. */
static void take_srv_records(struct upstream_resolver *r, size_t i, struct dns_srv *recs,
                             size_t count)
{
    struct name_round *nr = &r->rounds[i];
    const struct upstream_server *s = &r->up->servers[i];
    bool backup_only = s->resolve_backup;
    unsigned best = UINT_MAX;
    for (size_t k = 0; k < count; k++)
        if (recs[k].priority < best)
            best = recs[k].priority;
    nr->target_count = 0;
    for (size_t k = 0; k < count && nr->target_count < s->resolve_slots; k++) {
        bool backup = recs[k].priority != best;
        if (backup_only && backup)
            continue;
        struct srv_target *t = &nr->targets[nr->target_count++];
        *t = (struct srv_target){.rec = recs[k]};
        unsigned weight = recs[k].weight > SRV_WEIGHT_MAX ? SRV_WEIGHT_MAX : recs[k].weight;
        t->peer = (struct srv_peer){
            .port = recs[k].port,
            .weight = weight > 0 ? weight : 1,
            .backup = backup || backup_only,
        };
    }
    if (nr->target_count == 0) { /* no such service (any more) */
        apply(r->up, i, nr->addrs, nr->peers, 0);
        resolve_rearm(r);
        return;
    }
    for (size_t k = 0; k < nr->target_count; k++)
        send_queries(r, nr->targets[k].rec.target, nr->targets[k].ids, nr->targets[k].pending);
}

/* take_answer() for an SRV name: its SRV answer, or one of its targets'
 * address answers; the slots change once every target is answered, and
 * only if none failed. */
static bool take_srv_answer(struct upstream_resolver *r, size_t i, const uint8_t *msg, size_t len)
{
    struct name_round *nr = &r->rounds[i];
    size_t room = r->up->servers[i].resolve_slots;
    if (nr->srv_pending) {
        struct dns_srv recs[16];
        uint32_t ttl = UINT32_MAX;
        int count = resolve_srv_parse(
            msg, len, nr->srv_id, recs,
            room < sizeof(recs) / sizeof(recs[0]) ? room : sizeof(recs) / sizeof(recs[0]), &ttl);
        if (count != -EINVAL) {
            nr->srv_pending = false;
            if (count < 0)
                return true; /* a failure: the slots stay as they are */
            if (ttl < r->round_ttl)
                r->round_ttl = ttl;
            size_t kept = (size_t)count < sizeof(recs) / sizeof(recs[0])
                              ? (size_t)count
                              : sizeof(recs) / sizeof(recs[0]);
            if (kept > room)
                kept = room;
            take_srv_records(r, i, recs, kept);
            return true;
        }
    }
    size_t asked = r->up->resolve_ipv4_only ? 1 : DNS_ASKED;
    for (size_t k = 0; k < nr->target_count; k++) {
        struct srv_target *t = &nr->targets[k];
        for (size_t q = 0; q < asked; q++) {
            if (!t->pending[q])
                continue;
            uint32_t ttl = UINT32_MAX;
            size_t free_room = nr->room - nr->count;
            int count = resolve_answer_parse(msg, len, t->ids[q], asked_types[q],
                                             nr->addrs + nr->count, free_room, &ttl);
            if (count == -EINVAL)
                continue;
            t->pending[q] = false;
            t->answered[q] = count >= 0;
            size_t got = count > 0 ? ((size_t)count < free_room ? (size_t)count : free_room) : 0;
            for (size_t a = 0; a < got; a++)
                nr->peers[nr->count + a] = t->peer;
            nr->count += got;
            if (ttl < r->round_ttl)
                r->round_ttl = ttl;
            for (size_t m = 0; m < nr->target_count; m++)
                for (size_t n = 0; n < asked; n++)
                    if (!nr->targets[m].answered[n])
                        return true; /* still waiting, or failed */
            apply(r->up, i, nr->addrs, nr->peers, nr->count);
            resolve_rearm(r);
            return true;
        }
    }
    return false;
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
        bool late = nr->srv_pending;
        for (size_t t = 0; t < DNS_ASKED; t++)
            late = late || nr->pending[t];
        for (size_t k = 0; k < nr->target_count; k++)
            for (size_t t = 0; t < DNS_ASKED; t++)
                late = late || nr->targets[k].pending[t];
        *nr = (struct name_round){
            .addrs = nr->addrs, .room = nr->room, .targets = nr->targets, .peers = nr->peers};
        if (late)
            continue;
        if (!s->resolve_srv) {
            send_queries(r, s->resolve_name, nr->ids, nr->pending);
            continue;
        }
        uint8_t query[DNS_HEADER + DNS_NAME_MAX + 2 + 4];
        nr->srv_id = next_id(r);
        int len =
            resolve_query_build(s->resolve_name, nr->srv_id, DNS_TYPE_SRV, query, sizeof(query));
        nr->srv_pending =
            len > 0 && sendto(r->fd, query, (size_t)len, MSG_NOSIGNAL,
                              (const struct sockaddr *)&r->asked, r->asked_len) == len;
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
        struct name_round *nr = &r->rounds[i];
        nr->room = 2 * (size_t)s->resolve_slots;
        nr->addrs = calloc(nr->room, sizeof(*nr->addrs));
        if (s->resolve_srv) {
            nr->targets = calloc(s->resolve_slots, sizeof(*nr->targets));
            nr->peers = calloc(nr->room, sizeof(*nr->peers));
        }
        if (nr->addrs == NULL || (s->resolve_srv && (nr->targets == NULL || nr->peers == NULL))) {
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
    for (size_t i = 0; i < up->server_count; i++) {
        free(r->rounds[i].addrs);
        free(r->rounds[i].targets);
        free(r->rounds[i].peers);
    }
    free(r->rounds);
    free(r);
}
