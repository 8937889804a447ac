/*
 * quic.bpf.c: the sk_reuseport program of a QUIC UDP listen.  A datagram
 * whose destination connection ID is one the server issued goes to the
 * worker whose index the ID carries; a client's Initial, whose ID is its
 * own, starts a new connection, spread by the wakeup mode (in turn, the
 * less loaded of two random workers, or the arrival CPU's worker), and
 * its ID is remembered so that the client's next datagrams with that ID
 * (a second Initial, a retransmission) reach the same worker.  Anything
 * else goes by the kernel's 4-tuple hash.  The headers read are QUIC's
 * invariant ones (RFC 8999), so any version's packets are steered.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "quic.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Worker index -> its socket. */
struct {
    __uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
    __uint(max_entries, QUIC_MAX_WORKERS);
    __type(key, __u32);
    __type(value, __u64);
} socks SEC(".maps");

/* A client's first destination ID -> the worker its connection went to. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, QUIC_FIRST_IDS);
    __type(key, struct quic_first_id);
    __type(value, __u32);
} firsts SEC(".maps");

/* Written by libcorral before the program is attached (workers = 0: the
 * program passes everything to the hash while it changes). */
__u32 workers;
__u32 mode;
__u32 cid_len;      /* the server's IDs: their length, */
__u32 cid_marker;   /* first byte */
__u32 index_offset; /* and where in them the worker's index is (2 bytes, big-endian) */
__u32 cpu_stride;
__u32 cpu_first[QUIC_MAX_CPUS]; /* 1 + the first worker pinned to the CPU, or 0 */
__u32 cpu_count[QUIC_MAX_CPUS]; /* workers pinned to the CPU */
__u32 rotation;
struct quic_slot slots[QUIC_MAX_WORKERS];

#define UDP_HEADER  8    /* the program sees the datagram from its UDP header on */
#define MIN_INITIAL 1200 /* RFC 9000 14.1: a client's Initial datagram is padded to this */

static __always_inline struct quic_slot *slot_of(__u32 w)
{
    asm volatile("" : "+r"(w));
    return &slots[w & (QUIC_MAX_WORKERS - 1)];
}

/* The worker a server ID at `at` (its offset from the UDP header) names,
 * or n: not one of ours, or of a generation with more workers. */
static __always_inline __u32 owner_at(struct sk_reuseport_md *ctx, __u32 at, __u32 n)
{
    __u8 marker, index[2];
    if (bpf_skb_load_bytes(ctx, at, &marker, 1) != 0 || marker != cid_marker)
        return n;
    if (bpf_skb_load_bytes(ctx, at + index_offset, index, 2) != 0)
        return n;
    __u32 w = (__u32)index[0] << 8 | index[1];
    return w < n ? w : n;
}

static __always_inline __u64 load_of(__u32 w)
{
    struct quic_slot *s = slot_of(w);
    __u64 initials = s->initials, seen = s->seen;
    return s->load + (initials > seen ? initials - seen : 0);
}

/* The worker a new connection goes to.  A global function (neither static
 * nor inlined, Linux 5.6), which the verifier checks once, on its own:
 * inlined, it was walked again for each of the states the destination
 * ID's bytes leave the stack in, most of the verifier's 16,000
 * instructions' walk at each load. */
__noinline __u32 choose(__u32 n)
{
    if (mode == QUIC_BALANCED && n > 1) {
        __u32 a = bpf_get_prandom_u32() % n;
        __u32 b = (a + 1 + bpf_get_prandom_u32() % (n - 1)) % n;
        return load_of(b) < load_of(a) ? b : a;
    }
    if (mode == QUIC_AFFINITY) {
        __u32 cpu = bpf_get_smp_processor_id();
        asm volatile("" : "+r"(cpu));
        cpu &= QUIC_MAX_CPUS - 1;
        __u32 first = cpu_first[cpu], count = cpu_count[cpu];
        if (first != 0 && count != 0) {
            __u32 w = first - 1 + cpu_stride * (bpf_get_prandom_u32() % count);
            if (w < n)
                return w;
        }
    }
    return __sync_fetch_and_add(&rotation, 1) % n;
}

static __always_inline int steer_to(struct sk_reuseport_md *ctx, __u32 w)
{
    __u32 key = w;
    bpf_sk_select_reuseport(ctx, &socks, &key, 0); /* no socket there: the hash */
    return SK_PASS;
}

SEC("sk_reuseport")
int corral_quic_steer(struct sk_reuseport_md *ctx)
{
    __u32 n = workers;
    if (n == 0 || n > QUIC_MAX_WORKERS || cid_len == 0 || cid_len > QUIC_MAX_CID)
        return SK_PASS;
    __u32 len = ctx->len;
    if (len < UDP_HEADER + 1)
        return SK_PASS;
    __u32 payload = len - UDP_HEADER;
    __u8 head[6]; /* flags, version, the destination ID's length */
    if (bpf_skb_load_bytes(ctx, UDP_HEADER, head, 1) != 0)
        return SK_PASS;
    __u32 w;
    if ((head[0] & 0x80) == 0) { /* short header: the server's ID after the flags */
        if (payload < 1 + cid_len)
            return SK_PASS;
        w = owner_at(ctx, UDP_HEADER + 1, n);
        if (w < n)
            __sync_fetch_and_add(&slot_of(w)->owned, 1);
        return w < n ? steer_to(ctx, w) : SK_PASS;
    }
    if (payload < 6 || bpf_skb_load_bytes(ctx, UDP_HEADER, head, 6) != 0)
        return SK_PASS;
    __u32 dcid_len = head[5];
    if (dcid_len == cid_len && payload >= 6 + cid_len) {
        w = owner_at(ctx, UDP_HEADER + 6, n);
        if (w < n) {
            __sync_fetch_and_add(&slot_of(w)->owned, 1);
            return steer_to(ctx, w);
        }
    }
    /* The client's own ID: a new connection's. */
    if (mode == QUIC_HASH || dcid_len == 0 || dcid_len > QUIC_MAX_CID || payload < 6 + QUIC_MAX_CID)
        return SK_PASS;
    struct quic_first_id key = {.len = (__u8)dcid_len};
    if (bpf_skb_load_bytes(ctx, UDP_HEADER + 6, key.id, QUIC_MAX_CID) != 0)
        return SK_PASS;
    for (__u32 i = 0; i < QUIC_MAX_CID; i++)
        if (i >= dcid_len)
            key.id[i] = 0;
    __u32 *known = bpf_map_lookup_elem(&firsts, &key);
    if (known != NULL)
        return *known < n ? steer_to(ctx, *known) : SK_PASS;
    /* Only an Initial (version 1: type 0; version 2: type 1) large enough
     * to be one opens a connection; the rest of a connection's long-header
     * packets carry the server's ID. */
    __u32 version = (__u32)head[1] << 24 | (__u32)head[2] << 16 | (__u32)head[3] << 8 | head[4];
    __u32 type = (head[0] >> 4) & 3;
    if (payload < MIN_INITIAL ||
        !((version == 1 && type == 0) || (version == 0x6b3343cf && type == 1)))
        return SK_PASS;
    w = choose(n);
    if (bpf_map_update_elem(&firsts, &key, &w, BPF_NOEXIST) != 0) {
        /* Another CPU chose first for the same ID: its choice. */
        known = bpf_map_lookup_elem(&firsts, &key);
        if (known == NULL)
            return SK_PASS;
        w = *known;
        if (w >= n)
            return SK_PASS;
    } else {
        __sync_fetch_and_add(&slot_of(w)->initials, 1);
    }
    return steer_to(ctx, w);
}
