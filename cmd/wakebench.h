/*
 * wakebench.h: what corral-wakebench's server side (wakebench.c) and its
 * client threads (wakebench_load.c) share: the scenarios, the message a
 * client sends and the client threads' parameters.
 */
#ifndef CORRAL_CMD_WAKEBENCH_H
#define CORRAL_CMD_WAKEBENCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* uneven: paced, and one connection in 50 holds its worker for 20 ms of
 * CPU; stalled: paced, and worker 0 is blocked for 200 ms every second. */
enum scenario {
    SCENARIO_PACED,
    SCENARIO_BURST,
    SCENARIO_LONG,
    SCENARIO_UNEVEN,
    SCENARIO_STALLED,
    SCENARIO_COUNT
};
#define HEAVY_EVERY    50
#define HEAVY_CPU_NS   (20 * 1000000ull)
#define STALL_EVERY_MS 1000
#define STALL_MS       200

/* How long an open-loop client waits for its last answers once it has
 * made every connection: far longer than a stall. */
#define OPEN_LOOP_DRAIN_NS (5 * 1000000000ull)

/* A client sends the CLOCK_MONOTONIC time it called connect() and whether
 * the connection is heavy; the worker records how long ago that was, burns
 * the CPU a heavy one asks for, and answers one byte. */
struct message {
    uint64_t started;
    uint64_t heavy;
};

struct client {
    pthread_t thread;
    int port;
    int cpu;
    enum scenario scenario;
    bool open_loop; /* paced: start on schedule, however many still wait */
    unsigned connections;
    unsigned index, stride; /* connection k is the run's index + k x stride'th */
    uint64_t interval_ns;   /* paced */
    uint64_t phase_ns;      /* paced: offset of this client's slots, so clients interleave */
    unsigned burst;
    int *held; /* long: connections kept open until the run ends */
    unsigned failures;
};

/* A client thread's body: makes c->connections connections as its scenario
 * says and counts those that got no answer in c->failures. */
void *client_main(void *arg);

#endif /* CORRAL_CMD_WAKEBENCH_H */
