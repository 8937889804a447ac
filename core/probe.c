/*
 * probe.c: what this kernel and process can do for the accept path, asked
 * once at start with throw-away sockets and epoll sets.  The result is a
 * plain struct that callers may mask, so fallbacks can be tested anywhere.
 */
#include "internal.h"

#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* The per-epoll busy-poll ioctl (Linux 6.9).  Older system headers lack it;
 * the layout is kernel ABI, and older kernels answer ENOTTY. */
#ifndef EPIOCSPARAMS
struct epoll_params {
    uint32_t busy_poll_usecs;
    uint16_t busy_poll_budget;
    uint8_t prefer_busy_poll;
    uint8_t pad;
};
#define EPIOCSPARAMS _IOW(0x8A, 0x01, struct epoll_params)
#endif

static bool probe_epoll_exclusive(void)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    int efd = eventfd(0, EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE};
    bool ok = epfd != -1 && efd != -1 && epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) == 0;
    if (efd != -1)
        close(efd);
    if (epfd != -1)
        close(epfd);
    return ok;
}

static bool probe_busy_poll(void)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd == -1)
        return false;
    struct epoll_params params = {0}; /* all zero: busy poll stays off */
    bool ok = ioctl(epfd, EPIOCSPARAMS, &params) == 0;
    close(epfd);
    return ok;
}

/* One socket answers the three socket-level questions. */
static void probe_sockets(struct corral_kernel_caps *caps)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return;
    int one = 1;
    caps->reuseport = setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0;
    int cpu;
    socklen_t len = sizeof(cpu);
    caps->incoming_cpu = getsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, &len) == 0;

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sock_filter first[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    struct sock_fprog program = {.len = 1, .filter = first};
    caps->reuseport_cbpf =
        caps->reuseport && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
        setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program, sizeof(program)) == 0;
    close(fd);
}

/* UDP segmentation offload both ways, asked of a throw-away UDP socket:
 * the socket options exist from the kernel versions that can use them.
 * A device that cannot checksum a GSO send still refuses it at send time;
 * udp_io.c falls back then. */
static void probe_udp(struct corral_kernel_caps *caps)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd == -1)
        return;
    int value = 0;
    socklen_t len = sizeof(value);
    caps->udp_gso = getsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &value, &len) == 0;
    int one = 1;
    caps->udp_gro = setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0;
    close(fd);
}

static void probe_cpus(struct corral_kernel_caps *caps)
{
    cpu_set_t set;
    caps->cpu_count = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == -1) {
        caps->cpus[caps->cpu_count++] = 0;
        return;
    }
    for (unsigned cpu = 0; cpu < CPU_SETSIZE && caps->cpu_count < CORRAL_MAX_CPUS; cpu++)
        if (CPU_ISSET(cpu, &set))
            caps->cpus[caps->cpu_count++] = (unsigned short)cpu;
}

static struct corral_kernel_caps probed;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static void probe_kernel(void)
{
    probed.epoll_exclusive = probe_epoll_exclusive();
    /* Round-robin and CPU-affinity epoll sets were proposed upstream but
     * never merged (tests/kernel/ has them as patches): asked of the
     * kernel itself, which on mainline refuses them. */
    bool rotate, affinity;
    corral__native_probe(&rotate, &affinity);
    probed.epoll_rotate = probed.epoll_exclusive && rotate;
    probed.epoll_affinity = probed.epoll_exclusive && affinity;
    probed.busy_poll = probe_busy_poll();
    probe_sockets(&probed);
    probe_udp(&probed);
    probe_cpus(&probed);
    probed.ebpf = probed.reuseport && corral__ebpf_probe();
}

void corral_probe(struct corral_kernel_caps *caps)
{
    pthread_once(&probe_once, probe_kernel);
    *caps = probed;
    const char *disabled = getenv("CORRAL_CAPS_DISABLE");
    if (disabled != NULL && corral_caps_disable(caps, disabled) != 0)
        corral__warn("CORRAL_CAPS_DISABLE=\"%s\": unknown capability name; ignored", disabled);
}

#define CAP_FIELD(name)                                                                            \
    {                                                                                              \
#name, offsetof(struct corral_kernel_caps, name)                                           \
    }
static const struct {
    const char *name;
    size_t offset;
} cap_fields[] = {
    CAP_FIELD(epoll_exclusive), CAP_FIELD(epoll_rotate),   CAP_FIELD(epoll_affinity),
    CAP_FIELD(reuseport),       CAP_FIELD(reuseport_cbpf), CAP_FIELD(incoming_cpu),
    CAP_FIELD(busy_poll),       CAP_FIELD(ebpf),           CAP_FIELD(udp_gso),
    CAP_FIELD(udp_gro),
};

int corral_caps_disable(struct corral_kernel_caps *caps, const char *names)
{
    struct corral_kernel_caps masked = *caps;
    const char *p = names;
    while (*p != '\0') {
        size_t len = strcspn(p, ", ");
        if (len > 0) {
            size_t i = 0;
            while (i < sizeof(cap_fields) / sizeof(cap_fields[0]) &&
                   !(strlen(cap_fields[i].name) == len && strncmp(cap_fields[i].name, p, len) == 0))
                i++;
            if (i == sizeof(cap_fields) / sizeof(cap_fields[0]))
                return -EINVAL;
            *(bool *)((char *)&masked + cap_fields[i].offset) = false;
        }
        p += len;
        p += strspn(p, ", ");
    }
    *caps = masked;
    return 0;
}

void corral__loop_set_busy_poll(corral_loop *loop, unsigned usecs)
{
    struct epoll_params params = {.busy_poll_usecs = usecs, .busy_poll_budget = 8};
    if (ioctl(loop->epfd, EPIOCSPARAMS, &params) == -1)
        corral__warn("busy_poll %u us: ioctl(EPIOCSPARAMS): %s; polling without busy poll", usecs,
                     strerror(errno));
}
