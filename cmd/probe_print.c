/*
 * probe_print.c: `corral --probe`: prints what the kernel offers and what
 * each wakeup mode resolves to on it.
 */
#include "cmd/probe_print.h"

#include <corral.h>
#include <stddef.h>
#include <stdio.h>

void print_probe(void)
{
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    static const struct {
        const char *name;
        size_t offset;
        const char *what;
    } flags[] = {
        {"epoll_exclusive", offsetof(struct corral_kernel_caps, epoll_exclusive),
         "EPOLLEXCLUSIVE wake-one (Linux 4.5)"},
        {"epoll_rotate", offsetof(struct corral_kernel_caps, epoll_rotate),
         "native round-robin epoll set"},
        {"epoll_affinity", offsetof(struct corral_kernel_caps, epoll_affinity),
         "native CPU-affinity epoll set"},
        {"reuseport", offsetof(struct corral_kernel_caps, reuseport), "SO_REUSEPORT (Linux 3.9)"},
        {"reuseport_cbpf", offsetof(struct corral_kernel_caps, reuseport_cbpf),
         "SO_ATTACH_REUSEPORT_CBPF (Linux 4.5)"},
        {"incoming_cpu", offsetof(struct corral_kernel_caps, incoming_cpu),
         "SO_INCOMING_CPU (Linux 4.4)"},
        {"busy_poll", offsetof(struct corral_kernel_caps, busy_poll),
         "per-epoll busy poll, EPIOCSPARAMS (Linux 6.9)"},
        {"ebpf", offsetof(struct corral_kernel_caps, ebpf),
         "sk_reuseport eBPF steering, select or migrate (CAP_BPF, Linux 5.14)"},
        {"udp_gso", offsetof(struct corral_kernel_caps, udp_gso),
         "UDP_SEGMENT, UDP send segmentation (Linux 4.18)"},
        {"udp_gro", offsetof(struct corral_kernel_caps, udp_gro),
         "UDP_GRO, UDP receive coalescing (Linux 5.0)"},
    };
    printf("kernel capabilities:\n");
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        printf("  %-16s %-4s %s\n", flags[i].name,
               *(const bool *)((const char *)&caps + flags[i].offset) ? "yes" : "no",
               flags[i].what);
    printf("  %-16s %u:", "cpus", caps.cpu_count);
    for (unsigned i = 0; i < caps.cpu_count; i++)
        printf(" %u", caps.cpus[i]);
    printf("\nwakeup modes:\n");
    for (int m = CORRAL_WAKEUP_AUTO; m <= CORRAL_WAKEUP_BALANCED; m++) {
        struct corral_wakeup_info info;
        corral_wakeup_resolve((enum corral_wakeup_mode)m, &caps, &info);
        printf("  %-11s -> %-10s (%s)%s%s\n", corral_wakeup_mode_name(info.requested),
               corral_wakeup_mode_name(info.mode), info.impl, info.reason[0] ? ": " : "",
               info.reason);
    }
    /* A quic listen's fallback chain (quic_bpf on, more than one worker). */
    printf("quic steering:\n  %s\n",
           caps.reuseport && caps.ebpf
               ? "ebpf (each datagram to its connection's worker; new connections by the "
                 "wakeup mode)"
           : caps.reuseport_cbpf ? "cbpf (each datagram to its connection's worker; new "
                                   "connections by the 4-tuple hash): no eBPF"
                                 : "hash (datagrams handed off between workers): no BPF");
}
