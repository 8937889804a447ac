/*
 * quic.h: what the QUIC steering program (quic.bpf.c) and libcorral
 * (udp_steer.c) share: limits, the modes new connections are spread by,
 * and the per-worker slot the worker publishes its load in and the program
 * counts its choices in.
 */
#ifndef CORRAL_BPF_QUIC_H
#define CORRAL_BPF_QUIC_H

#include <linux/types.h>

#define QUIC_MAX_WORKERS 1024 /* as STEER_MAX_WORKERS */
#define QUIC_MAX_CPUS    1024 /* CORRAL_MAX_CPUS */
#define QUIC_MAX_CID     20   /* RFC 9000: a connection ID has at most 20 bytes */
/* Clients' first destination IDs remembered, so that every datagram a
 * client sends before it has the server's ID reaches one worker; least
 * recently used ones are forgotten beyond this. */
#define QUIC_FIRST_IDS 65536

enum quic_mode {
    QUIC_HASH = 0, /* new connections: the kernel's 4-tuple hash */
    QUIC_ROUNDROBIN = 1,
    QUIC_BALANCED = 2,
    QUIC_AFFINITY = 3,
};

/* One per worker: 64 bytes, so that two workers never share a line. */
struct quic_slot {
    __u64 load;     /* worker: its open connections */
    __u64 seen;     /* worker: `initials` when it last wrote `load` */
    __u64 initials; /* program: new connections steered here */
    __u64 owned;    /* program: datagrams steered here by the ID the server gave */
    __u64 pad[4];
};

/* A client's first destination ID, its own choice (8 to 20 bytes). */
struct quic_first_id {
    __u8 len;
    __u8 id[QUIC_MAX_CID];
    __u8 pad[3];
};

#endif /* CORRAL_BPF_QUIC_H */
