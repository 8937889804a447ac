/*
 * wakeup_affinity.c: serve each connection on the CPU its packets arrived
 * on, without a native kernel mode.  Workers are pinned (worker i to the
 * (i mod C)-th allowed CPU, C = min(workers, CPUs)), each has its own socket
 * in a SO_REUSEPORT group, created in worker order, and a classic BPF program
 * picks the group index from the receiving CPU:
 *
 *   A = cpu
 *   for each used CPU slot s:  if A == cpus[s]:
 *       one worker on it:      return s
 *       k workers on it:       return s + C * (random % k)
 *   return A % workers         (a CPU without workers still gets served)
 *
 * so with more workers than CPUs the connections of one CPU are spread over
 * all the workers pinned to it, not only the first.
 */
#include "internal.h"

#include <errno.h>
#include <linux/filter.h>
#include <string.h>

/* Beyond this many CPUs the comparison chain would outgrow a BPF program;
 * such machines get the plain `cpu % workers` program. */
#define MAX_SLOTS 512

static bool cbpf_probe(const struct corral_kernel_caps *caps, const char **why)
{
    if (!caps->reuseport) {
        *why = "SO_REUSEPORT is not supported";
        return false;
    }
    *why = "SO_ATTACH_REUSEPORT_CBPF is not supported";
    return caps->reuseport_cbpf;
}

unsigned corral__cpus_used(const corral_server *server)
{
    unsigned cpus = server->caps.cpu_count > 0 ? server->caps.cpu_count : 1;
    return server->worker_count < cpus ? server->worker_count : cpus;
}

/* Writes the program into `code` (room for 3 + 6 * MAX_SLOTS) and returns
 * its length. */
static unsigned short build_program(const corral_server *server, struct sock_filter *code)
{
    unsigned workers = server->worker_count;
    unsigned slots = corral__cpus_used(server);
    unsigned short n = 0;
    code[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_CPU);
    for (unsigned slot = 0; slots <= MAX_SLOTS && slot < slots; slot++) {
        unsigned on_this_cpu = (workers - slot + slots - 1) / slots;
        uint8_t block = on_this_cpu == 1 ? 1 : 5;
        code[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, server->caps.cpus[slot],
                                                 0, block);
        if (on_this_cpu == 1) {
            code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, slot);
            continue;
        }
        code[n++] =
            (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_RANDOM);
        code[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, on_this_cpu);
        code[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, slots);
        code[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, slot);
        code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
    }
    code[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, workers);
    code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
    return n;
}

static int cbpf_setup(corral_server *server)
{
    static struct sock_filter code[3 + 6 * MAX_SLOTS];
    struct sock_fprog program = {.len = build_program(server, code), .filter = code};
    for (corral_listener *l = server->listeners; l != NULL; l = l->next) {
        if (l->fds == NULL)
            continue; /* a unix socket: no reuseport group to steer */
        if (setsockopt(l->fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program,
                       sizeof(program)) == -1) {
            int err = -errno;
            corral__error("setsockopt(%s, SO_ATTACH_REUSEPORT_CBPF): %s", l->address_text,
                          strerror(errno));
            return err;
        }
        l->steered_beside = false; /* replaced */
    }
    return 0;
}

const struct corral_wakeup_ops corral__wakeup_cbpf_cpu = {
    .mode = CORRAL_WAKEUP_AFFINITY,
    .impl = "cbpf-cpu",
    .description = "pinned workers, SO_REUSEPORT steered by a CPU-number BPF program",
    .per_worker_sockets = true,
    .pins_workers = true,
    .probe = cbpf_probe,
    .setup = cbpf_setup,
    .attach = corral__attach_level,
    .detach = corral__detach_all,
};
