/*
 * echo.c: a TCP echo server on libcorral, the example of docs/embedding.md.
 *
 *   build/examples/echo [ADDRESS] [WORKERS]     (default 127.0.0.1:7000, 2)
 *
 * Every byte a client sends comes back.  Ctrl-C stops it gracefully.
 */
#include <corral.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Called on the worker that owns the connection with all unconsumed input.
 * Writing queues the bytes; the library pauses reading from this client
 * while too much is queued, so a slow reader cannot grow memory.  A write
 * has no result to check: one that cannot be queued ends the connection,
 * and echo_on_close hears why. */
static size_t echo_on_data(corral_conn *conn, const char *data, size_t len)
{
    corral_conn_write(conn, data, len);
    return len;
}

static void echo_on_close(corral_conn *conn, int error)
{
    (void)conn;
    if (error != 0 && error != -ECONNRESET)
        fprintf(stderr, "echo: connection closed: %s\n", strerror(-error));
}

static const struct corral_conn_handler echo_handler = {
    .on_data = echo_on_data,
    .on_close = echo_on_close,
    /* No on_eof: when the client half-closes, queued output is flushed and
     * the connection closes. */
};

int main(int argc, char **argv)
{
    const char *address = argc > 1 ? argv[1] : "127.0.0.1:7000";

    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
    config.wakeup = CORRAL_WAKEUP_ROUNDROBIN;

    corral_server *server;
    int err = corral_server_new(&config, &server);
    if (err != 0) {
        fprintf(stderr, "echo: %s\n", strerror(-err));
        return 1;
    }

    corral_listener *listener;
    err = corral_server_listen(server, address, NULL, &echo_handler, NULL, &listener);
    if (err != 0) {
        fprintf(stderr, "echo: listen %s: %s\n", address, strerror(-err));
        corral_server_free(server);
        return 1;
    }
    char bound[128];
    corral_listener_address(listener, bound, sizeof(bound));
    printf("echo: listening on %s with %u workers\n", bound, corral_server_worker_count(server));
    fflush(stdout);

    /* Runs until SIGINT/SIGTERM (graceful) or SIGQUIT (immediate). */
    err = corral_server_run(server);
    corral_server_free(server);
    return err == 0 ? 0 : 1;
}
