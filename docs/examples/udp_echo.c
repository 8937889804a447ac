/*
 * udp_echo.c: a UDP echo server on libcorral, the UDP example of
 * docs/embedding.md.
 *
 *   build/examples/udp_echo [ADDRESS] [WORKERS]    (default 127.0.0.1:7001, 2)
 *
 * Every datagram comes back to its sender, from the address it was sent
 * to (which matters on a wildcard address of a host with several), with
 * its ECN bits.  Each worker reads its own socket of the port.  When a
 * socket's send buffer is full, the worker keeps up to 16 datagrams it
 * could not send and sends them once the socket can take more; what comes
 * meanwhile beyond those is dropped, as a full network drops it, so that
 * a client that floods cannot make it queue without bound.  Ctrl-C stops
 * it.
 */
#include <corral.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DATAGRAM 2048

/* One per worker: the datagrams a full socket left to send.  A worker
 * touches only its own, so there is no lock. */
struct backlog {
    struct corral_udp_msg msgs[16];
    char data[16][MAX_DATAGRAM];
    size_t count;
};

static struct backlog *backlogs;

/* Keeps what corral_udp_send() could not send (the library's buffers are
 * reused after on_recv returns, so the bytes are copied), and asks to be
 * told when the socket takes output again. */
static void keep_unsent(corral_udp_socket *sock, const struct corral_udp_msg *msgs, size_t count)
{
    struct backlog *b = &backlogs[corral_worker_index(corral_udp_socket_worker(sock))];
    for (size_t i = 0; i < count && b->count < 16; i++) {
        b->msgs[b->count] = msgs[i];
        memcpy(b->data[b->count], msgs[i].data, msgs[i].len);
        b->msgs[b->count].data = b->data[b->count];
        b->count++;
    }
    corral_udp_wait_writable(sock);
}

static void echo_on_recv(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count)
{
    struct backlog *b = &backlogs[corral_worker_index(corral_udp_socket_worker(sock))];
    if (b->count > 0) {
        keep_unsent(sock, msgs, count); /* behind what waits already; beyond 16, dropped */
        return;
    }
    /* The received messages are sent as they are: the peer becomes the
     * destination, the local address the source, the ECN bits stay. */
    size_t sent = corral_udp_send(sock, msgs, count);
    if (sent < count)
        keep_unsent(sock, msgs + sent, count - sent);
}

static void echo_on_writable(corral_udp_socket *sock)
{
    struct backlog *b = &backlogs[corral_worker_index(corral_udp_socket_worker(sock))];
    size_t sent = corral_udp_send(sock, b->msgs, b->count);
    memmove(b->msgs, b->msgs + sent, (b->count - sent) * sizeof(b->msgs[0]));
    memmove(b->data, b->data + sent, (b->count - sent) * sizeof(b->data[0]));
    b->count -= sent;
    for (size_t i = 0; i < b->count; i++)
        b->msgs[i].data = b->data[i];
    if (b->count > 0)
        corral_udp_wait_writable(sock);
}

static const struct corral_udp_handler echo_handler = {
    .on_recv = echo_on_recv,
    .on_writable = echo_on_writable,
};

int main(int argc, char **argv)
{
    const char *address = argc > 1 ? argv[1] : "127.0.0.1:7001";

    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = argc > 2 ? (unsigned)atoi(argv[2]) : 2;

    corral_server *server;
    int err = corral_server_new(&config, &server);
    if (err != 0) {
        fprintf(stderr, "udp_echo: %s\n", strerror(-err));
        return 1;
    }
    backlogs = calloc(corral_server_worker_count(server), sizeof(*backlogs));
    if (backlogs == NULL) {
        corral_server_free(server);
        return 1;
    }

    struct corral_udp_options options;
    corral_udp_options_init(&options);
    options.max_datagram = MAX_DATAGRAM;
    corral_udp *udp;
    err = corral_server_listen_udp(server, address, &options, &echo_handler, NULL, &udp);
    if (err != 0) {
        fprintf(stderr, "udp_echo: listen %s: %s\n", address, strerror(-err));
        free(backlogs);
        corral_server_free(server);
        return 1;
    }
    char bound[128];
    corral_udp_address(udp, bound, sizeof(bound));
    printf("udp_echo: listening on %s with %u workers\n", bound,
           corral_server_worker_count(server));
    fflush(stdout);

    /* Runs until SIGINT/SIGTERM or SIGQUIT. */
    err = corral_server_run(server);
    corral_server_free(server);
    free(backlogs);
    return err == 0 ? 0 : 1;
}
