/*
 * fuzz_health.c: libFuzzer over what an active health check reads from a
 * server: the status line (whole, and at every length up to the whole,
 * the answer must be consistent and never read past what it was given);
 * a gRPC Check answer's message (health_h2_serving()); and the same
 * bytes as a server's side of an HTTP/2 probe's connection.
 */
#include "proto/upstream/health.h"
#include "proto/upstream/health_h2.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that ASan sees any read past the end. */
    char *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    unsigned status = 0;
    int whole = health_status_line(copy, size, &status);
    if (whole == 1 && (status < 100 || status > 999 || memcmp(copy, "HTTP/1.", 7) != 0))
        abort();
    /* A prefix never decides differently from the whole, except by
     * waiting for more (0). */
    for (size_t len = 0; len < size && len < 600; len++) {
        unsigned s = 0;
        int part = health_status_line(copy, len, &s);
        if (part != 0 && (part != whole || s != status))
            abort();
    }
    int serving = health_h2_serving((const uint8_t *)copy, size);
    if (serving < -1 || serving > 3)
        abort();
    for (int grpc = 0; grpc < 2; grpc++) {
        struct health_h2 *h;
        if (health_h2_new(grpc, "http", "a:1", "/", "svc", &h) != 0)
            break;
        const uint8_t *out;
        while (health_h2_output(h, &out) > 0)
            ;
        struct health_h2_answer answer;
        if (health_h2_input(h, copy, size, &answer) == 1 && grpc &&
            (answer.serving < -1 || answer.serving > 3))
            abort();
        health_h2_free(h);
    }
    free(copy);
    return 0;
}
